/* json_ref.h - compares the fast JSON decoder (src/json_dec.c) with jansson, the reference:
 * shared by tests/unit/test_json_dec.c and the fuzz target tests/fuzz/fuzz_json_dec.c.
 *
 * json_ref_compare(L, buf, len) runs mb_json_dec_fast under lua_pcall and jansson's json_loadb
 * with the flags json.c uses (JSON_DECODE_ANY | JSON_ALLOW_NUL), retried like json.c when jansson
 * reports an integer outside int64 (each such integer read as a real). The rule it checks: whatever the
 * fast path accepts, jansson accepts too, and the Lua value is the same value as jansson's tree
 * (same types, integers exact, reals bit for bit, strings byte for byte, arrays marked with the
 * json.array metatable and objects not, the same keys). Declining is always allowed.
 */
#ifndef MB_JSON_REF_H
#define MB_JSON_REF_H

#include <jansson.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "json_dec.h"

enum { JSON_REF_DECLINED = 0, JSON_REF_SAME = 1, JSON_REF_DIFFERENT = -1 };

static int json_ref_is_array(lua_State *L, int idx)
{
	if (!lua_getmetatable(L, idx))
		return 0;
	int t = lua_getfield(L, -1, "__metatable");
	int yes = t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "json.array") == 0;
	lua_pop(L, 2);
	return yes;
}

/* 1 when the Lua value at idx is the same value as j. */
static int json_ref_same(lua_State *L, int idx, json_t *j)
{
	idx = lua_absindex(L, idx);
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		if (lua_type(L, idx) != LUA_TTABLE || json_ref_is_array(L, idx) || lua_getmetatable(L, idx))
			return 0;
		size_t n = 0;
		lua_pushnil(L);
		while (lua_next(L, idx)) {
			n++;
			lua_pop(L, 1);
		}
		if (n != json_object_size(j))
			return 0;
		for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
			lua_pushlstring(L, json_object_iter_key(it), json_object_iter_key_len(it));
			lua_rawget(L, idx);
			int ok = json_ref_same(L, -1, json_object_iter_value(it));
			lua_pop(L, 1);
			if (!ok)
				return 0;
		}
		return 1;
	}
	case JSON_ARRAY: {
		if (lua_type(L, idx) != LUA_TTABLE || !json_ref_is_array(L, idx))
			return 0;
		size_t n = json_array_size(j), keys = 0;
		lua_pushnil(L);
		while (lua_next(L, idx)) {
			keys++;
			lua_pop(L, 1);
		}
		if (keys != n || lua_rawlen(L, idx) != n)
			return 0;
		for (size_t i = 0; i < n; i++) {
			lua_rawgeti(L, idx, (lua_Integer)i + 1);
			int ok = json_ref_same(L, -1, json_array_get(j, i));
			lua_pop(L, 1);
			if (!ok)
				return 0;
		}
		return 1;
	}
	case JSON_STRING: {
		size_t n;
		if (lua_type(L, idx) != LUA_TSTRING)
			return 0;
		const char *s = lua_tolstring(L, idx, &n);
		return n == json_string_length(j) && memcmp(s, json_string_value(j), n) == 0;
	}
	case JSON_INTEGER:
		return lua_isinteger(L, idx) && lua_tointeger(L, idx) == (lua_Integer)json_integer_value(j);
	case JSON_REAL: {
		if (lua_type(L, idx) != LUA_TNUMBER || lua_isinteger(L, idx))
			return 0;
		double a = (double)lua_tonumber(L, idx), b = json_real_value(j);
		return memcmp(&a, &b, sizeof a) == 0;
	}
	case JSON_TRUE:
	case JSON_FALSE:
		return lua_type(L, idx) == LUA_TBOOLEAN && lua_toboolean(L, idx) == json_is_true(j);
	default:
		return lua_islightuserdata(L, idx) && lua_touserdata(L, idx) == NULL;
	}
}

/* json.c hands jansson an input with an integer outside int64 again with "e0" after each such
 * integer (so it reads them as reals); the reference does the same, written anew here: a
 * malloc'd copy, or NULL when there is no such integer. */
static char *json_ref_widen(const char *buf, size_t len, size_t *outlen)
{
	char *out = malloc(len * 3 + 1);
	size_t o = 0, i = 0;
	int in_str = 0, any = 0;
	while (i < len) {
		char c = buf[i];
		if (in_str) {
			out[o++] = c;
			if (c == '\\' && i + 1 < len)
				out[o++] = buf[++i];
			else if (c == '"')
				in_str = 0;
			i++;
			continue;
		}
		if (c == '"')
			in_str = 1;
		if (c == '-' || (c >= '0' && c <= '9')) {
			/* the whole number token: a fraction or exponent makes it a real already */
			size_t j = i + (c == '-'), k = j;
			while (k < len && ((buf[k] >= '0' && buf[k] <= '9') || buf[k] == '.' || buf[k] == 'e' ||
					   buf[k] == 'E' || buf[k] == '+' || buf[k] == '-'))
				k++;
			while (j < len && buf[j] >= '0' && buf[j] <= '9')
				j++;
			int plain = j == k;
			j = k;
			size_t digits = plain ? j - i - (c == '-') : 0;
			const char *d = buf + i + (c == '-');
			while (digits > 1 && *d == '0') /* (leading zeros are invalid JSON anyway) */
				d++, digits--;
			const char *lim = c == '-' ? "9223372036854775808" : "9223372036854775807";
			int big = digits > 19 || (digits == 19 && memcmp(d, lim, 19) > 0);
			memcpy(out + o, buf + i, j - i);
			o += j - i;
			if (plain && big && digits > 0) {
				memcpy(out + o, "e0", 2);
				o += 2;
				any = 1;
			}
			i = j;
			continue;
		}
		out[o++] = c;
		i++;
	}
	if (!any) {
		free(out);
		return NULL;
	}
	out[o] = '\0';
	*outlen = o;
	return out;
}

typedef struct {
	const char *buf;
	size_t len;
	int ok;
} json_ref_call;

static int json_ref_fast(lua_State *L)
{
	json_ref_call *c = lua_touserdata(L, 1);
	/* the codec's array metatable, as json.c passes it: taken from a decoded "[]" */
	char err[64];
	if (mb_json_decode(L, "[]", 2, NULL, err, sizeof err) != 0 || !lua_getmetatable(L, -1))
		return luaL_error(L, "no array metatable");
	c->ok = mb_json_dec_fast(L, c->buf, c->len, MB_JSON_DEFAULT_DEPTH, 0, NULL, -1, NULL);
	return 1;
}

/// @returns JSON_REF_SAME, JSON_REF_DECLINED or JSON_REF_DIFFERENT (why says what differs)
static int json_ref_compare(lua_State *L, const char *buf, size_t len, char *why, size_t whylen)
{
	int top = lua_gettop(L), rc;
	json_ref_call c = {buf, len, 0};
	lua_pushcfunction(L, json_ref_fast);
	lua_pushlightuserdata(L, &c);
	if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
		snprintf(why, whylen, "the fast path raised: %s", lua_tostring(L, -1));
		lua_settop(L, top);
		return JSON_REF_DIFFERENT;
	}
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	if (!j && json_error_code(&je) == json_error_numeric_overflow && strncmp(je.text, "too big", 7) == 0) {
		size_t wlen;
		char *w = json_ref_widen(buf, len, &wlen);
		if (w) {
			j = json_loadb(w, wlen, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
			free(w);
		}
	}
	if (!c.ok) {
		rc = JSON_REF_DECLINED;
	} else if (!j) {
		snprintf(why, whylen, "accepted what jansson rejects (%s)", je.text);
		rc = JSON_REF_DIFFERENT;
	} else if (!json_ref_same(L, -1, j)) {
		snprintf(why, whylen, "a different value than jansson's");
		rc = JSON_REF_DIFFERENT;
	} else {
		rc = JSON_REF_SAME;
	}
	json_decref(j);
	lua_settop(L, top);
	return rc;
}

#endif
