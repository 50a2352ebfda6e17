/* json.c - the decoding half of the JSON codec (json.h) and its Lua-facing functions; the
 * encoder, raw values and the helpers both halves use are in json_enc.c (json_int.h).
 *
 * Decoding bounds the input size and tries the fast reader first (json_dec.h: text straight to
 * Lua values). When it declines - in practice only on invalid input - this file scans the nesting
 * depth (so jansson's recursive parser stays within max_depth), lets jansson parse it (through a
 * reader callback that polls the budget for inputs over 64 KB), then converts the tree to Lua
 * (dec_*) inside lua_pcall, so that a Lua error (memory, timeout) never unwinds past a live
 * jansson tree: the tree is freed first, then the error is reported. No error ever longjmps
 * across jansson; jansson's messages are the errors the client sees.
 *
 * Budget: mb_budget_of(L) (or mb_budget_current() for host states) is made current while jansson
 * runs, so jansson's allocations (routed through mb_budget_malloc by mb_json_global_init) count
 * against the execution's memory cap.
 *
 * Numbers: JSON integers -> Lua integers (exact int64); integers outside int64 are retried as
 * reals (jansson rejects them); reals -> Lua floats.
 */
#include "json.h"
#include "json_int.h"

#include "budget.h"
#include "json_dec.h"

#include <jansson.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_THRESHOLD (64u * 1024) /* decode larger inputs through the polling reader */
#define GC_AFTER_DECLINE (64u * 1024) /* a declined input this long: collect before jansson */

/* ---- decoding: text -> jansson tree -> Lua ----------------------------------------------------- */

typedef struct {
	const char *p;
	size_t left;
	mb_budget *b;
	int stopped;
} reader;

static size_t read_chunk(void *buffer, size_t buflen, void *data)
{
	reader *r = data;
	if (r->b && mb_budget_check(r->b) != MB_STOP_NONE) {
		r->stopped = 1;
		return (size_t)-1;
	}
	size_t n = buflen < r->left ? buflen : r->left;
	memcpy(buffer, r->p, n);
	r->p += n;
	r->left -= n;
	return n;
}

/* Does the integer literal s[0..n) (optional '-', digits) overflow int64? */
static int int_overflows(const char *s, size_t n)
{
	int neg = s[0] == '-';
	const char *d = s + neg;
	size_t nd = n - (size_t)neg;
	const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
	if (nd != 19)
		return nd > 19;
	return memcmp(d, lim, 19) > 0;
}

/* Copy of buf where every integer literal outside int64 gets "e0" appended, making it a real.
 * From mb_budget_malloc; NULL when out of memory. Only called after jansson reported one. */
static char *widen_big_ints(const char *buf, size_t len, size_t *outlen)
{
	size_t extra = 0, i, j;
	for (int pass = 0; pass < 2; pass++) {
		char *out = NULL;
		size_t o = 0;
		if (pass == 1 && !(out = mb_budget_malloc(len + extra + 1)))
			return NULL;
		int in_str = 0;
		for (i = 0; i < len; i = j) {
			char c = buf[i];
			j = i + 1;
			if (in_str) {
				if (c == '\\' && j < len)
					j++;
				else if (c == '"')
					in_str = 0;
			} else if (c == '"') {
				in_str = 1;
			} else if (c == '-' || (c >= '0' && c <= '9')) {
				int plain = 1;
				for (j = i; j < len; j++) {
					char d = buf[j];
					if (d == '.' || d == 'e' || d == 'E' || d == '+' || (d == '-' && j > i))
						plain = 0;
					else if (!(d >= '0' && d <= '9') && d != '-')
						break;
				}
				if (plain && j - i > 1 && int_overflows(buf + i, j - i)) {
					if (pass == 0) {
						extra += 2;
					} else {
						memcpy(out + o, buf + i, j - i);
						o += j - i;
						memcpy(out + o, "e0", 2);
						o += 2;
						continue;
					}
				}
			}
			if (pass == 1) {
				memcpy(out + o, buf + i, j - i);
				o += j - i;
			}
		}
		if (pass == 1) {
			out[o] = '\0';
			*outlen = o;
			return out;
		}
	}
	return NULL;
}

/* Checks the nesting of buf before jansson sees it, so jansson's recursive parser never goes
 * deeper than max_depth (its own limit is 2048 levels of C recursion). Returns 0, -1 when too
 * deep, -2 when the budget stopped. Text inside strings is skipped; malformed input is left to
 * jansson to report. */
static int depth_scan(const char *buf, size_t len, int max_depth, mb_budget *b)
{
	int depth = 0, in_str = 0;
	size_t i = 0, next_poll = 0;
	while (i < len) {
		if (i >= next_poll) {
			next_poll = i + 65536;
			if (b && mb_budget_check(b) != MB_STOP_NONE)
				return -2;
		}
		if (in_str) {
			char c = buf[i];
			i += c == '\\' ? 2 : 1;
			in_str = c != '"';
			continue;
		}
		switch (buf[i++]) {
		case '"':
			in_str = 1;
			break;
		case '[':
		case '{':
			if (++depth > max_depth)
				return -1;
			break;
		case ']':
		case '}':
			if (depth > 0)
				depth--;
			break;
		default:
			break;
		}
	}
	return 0;
}

static json_t *parse(const char *buf, size_t len, int unique_keys, mb_budget *b, int *stopped,
		     json_error_t *je)
{
	const size_t fl = JSON_DECODE_ANY | JSON_ALLOW_NUL | (unique_keys ? JSON_REJECT_DUPLICATES : 0);
	if (len <= STREAM_THRESHOLD || !b)
		return json_loadb(buf, len, fl, je);
	reader r = {buf, len, b, 0};
	json_t *j = json_load_callback(read_chunk, &r, fl, je);
	*stopped = r.stopped;
	return j;
}

typedef struct {
	json_t *root;
	const mb_json_limits *lim;
	mb_budget *b;
	unsigned nodes;
} dec;

static void dec_value(lua_State *L, dec *d, json_t *j, int depth)
{
	if ((++d->nodes & POLL_MASK) == 0 && d->b && mb_budget_check(d->b) != MB_STOP_NONE)
		mb_budget_raise(L, d->b);
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		const char *k;
		json_t *v;
		if (depth >= d->lim->max_depth)
			goto too_deep;
		luaL_checkstack(L, 4, "JSON nesting");
		lua_createtable(L, 0, (int)json_object_size(j));
		for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
			k = json_object_iter_key(it);
			v = json_object_iter_value(it);
			lua_pushlstring(L, k, json_object_iter_key_len(it));
			dec_value(L, d, v, depth + 1);
			lua_rawset(L, -3);
		}
		return;
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(j);
		if (depth >= d->lim->max_depth)
			goto too_deep;
		luaL_checkstack(L, 4, "JSON nesting");
		lua_createtable(L, n > INT_MAX ? INT_MAX : (int)n, 0);
		for (size_t i = 0; i < n; i++) {
			dec_value(L, d, json_array_get(j, i), depth + 1);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		lua_pushvalue(L, 2); /* the array metatable */
		lua_setmetatable(L, -2);
		return;
	}
	case JSON_STRING:
		lua_pushlstring(L, json_string_value(j), json_string_length(j));
		return;
	case JSON_INTEGER:
		lua_pushinteger(L, (lua_Integer)json_integer_value(j));
		return;
	case JSON_REAL:
		lua_pushnumber(L, (lua_Number)json_real_value(j));
		return;
	case JSON_TRUE:
	case JSON_FALSE:
		lua_pushboolean(L, json_is_true(j));
		return;
	default:
		lua_pushlightuserdata(L, NULL);
		return;
	}
too_deep: {
	char msg[96];
	json_depth_message(msg, sizeof msg, d->lim->max_depth, 0);
	lua_pushstring(L, msg);
	lua_error(L);
}
}

/* lua_pcall'd: [1] = dec*; pushes the converted value. */
static int dec_protected(lua_State *L)
{
	dec *d = lua_touserdata(L, 1);
	json_push_array_mt(L); /* index 2 */
	dec_value(L, d, d->root, 0);
	return 1;
}

typedef struct {
	const char *buf;
	size_t len;
	int max_depth, unique_keys;
	mb_budget *b;
	int ok;
	const char *const *raw_path;
} fast;

/* lua_pcall'd: [1] = fast*; pushes the value (f->ok = 1) or declines (f->ok = 0). */
static int fast_protected(lua_State *L)
{
	fast *f = lua_touserdata(L, 1);
	json_push_array_mt(L); /* index 2 */
	size_t lens[MB_JSON_RAW_PATH_MAX];
	for (int i = 0; f->raw_path && i < MB_JSON_RAW_PATH_MAX && f->raw_path[i]; i++)
		lens[i] = strlen(f->raw_path[i]);
	mb_json_raw_at raw = {f->raw_path, lens, mb_json_push_raw};
	f->ok = mb_json_dec_fast(L, f->buf, f->len, f->max_depth, f->unique_keys, f->b, 2,
				 f->raw_path ? &raw : NULL);
	return 1;
}

int mb_json_decode(lua_State *L, const char *buf, size_t len, const mb_json_limits *lim,
		   char *err, size_t errlen)
{
	mb_json_limits l = json_norm_limits(lim);
	mb_budget *prev = mb_budget_current(), *b = json_pick_budget(L);
	json_error_t je;
	json_t *root = NULL;
	char *widened = NULL;
	int stopped = 0, rc = -1;

	if (errlen)
		err[0] = '\0';
	if (len > l.max_input_bytes) {
		snprintf(err, errlen, "JSON input is %zu bytes, exceeds %s=%zu", len,
			 l.input_limit_name, l.max_input_bytes);
		return -1;
	}
	mb_budget_set_current(b);
	if (b && mb_budget_check(b) != MB_STOP_NONE) {
		mb_budget_message(b, err, errlen);
		goto done;
	}
	if (!lua_checkstack(L, 8)) {
		json_oom_message(b, err, errlen, "decoding");
		goto done;
	}
	/* the fast path (json_dec.h); jansson below only when it declines */
	fast f = {buf, len, l.max_depth, l.unique_keys, b, 0, l.raw_path};
	lua_pushcfunction(L, fast_protected);
	lua_pushlightuserdata(L, &f);
	if (lua_pcall(L, 1, 1, 0) == LUA_OK && f.ok) {
		rc = 0;
		goto done;
	}
	lua_pop(L, 1);
	if (b && mb_budget_check(b) != MB_STOP_NONE) { /* the fast path ran out of memory or time */
		mb_budget_message(b, err, errlen);
		goto done;
	}
	/* what the fast path built before it declined is garbage now; on a long input it can be
	 * as large as the result, so collect it before jansson's tree and the result are built */
	if (len > GC_AFTER_DECLINE)
		lua_gc(L, LUA_GCCOLLECT, 0);
	int scan = depth_scan(buf, len, l.max_depth, b);
	if (scan != 0) {
		if (scan == -1)
			json_depth_message(err, errlen, l.max_depth, 0);
		else
			mb_budget_message(b, err, errlen);
		goto done;
	}
	root = parse(buf, len, l.unique_keys, b, &stopped, &je);
	if (!root && !stopped && json_error_code(&je) == json_error_numeric_overflow &&
	    strncmp(je.text, "too big", 7) == 0) {
		size_t wlen;
		widened = widen_big_ints(buf, len, &wlen);
		if (!widened) {
			json_oom_message(b, err, errlen, "decoding");
			goto done;
		}
		root = parse(widened, wlen, l.unique_keys, b, &stopped, &je);
	}
	if (!root) {
		enum json_error_code code = json_error_code(&je);
		if (stopped || (b && mb_budget_check(b) != MB_STOP_NONE))
			mb_budget_message(b, err, errlen);
		else if (code == json_error_stack_overflow)
			json_depth_message(err, errlen, l.max_depth, 0);
		else if (code == json_error_out_of_memory)
			json_oom_message(b, err, errlen, "decoding");
		else if (code == json_error_null_byte_in_key) /* valid JSON jansson cannot hold */
			snprintf(err, errlen, "object keys containing \\u0000 are not supported (line %d "
				 "column %d, position %d)", je.line, je.column, je.position);
		else
			snprintf(err, errlen, "%s at line %d column %d (position %d)", je.text, je.line,
				 je.column, je.position);
		goto done;
	}
	dec d = {root, &l, b, 0}; /* (stack room was reserved before the fast path) */
	lua_pushcfunction(L, dec_protected);
	lua_pushlightuserdata(L, &d);
	if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
		if (b && mb_budget_check(b) != MB_STOP_NONE)
			mb_budget_message(b, err, errlen);
		else
			snprintf(err, errlen, "%s",
				 lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error while decoding JSON");
		lua_pop(L, 1);
		goto done;
	}
	rc = 0;
done:
	json_decref(root);
	mb_budget_free(widened);
	mb_budget_set_current(prev);
	if (rc && errlen)
		json_clean_message(err);
	return rc;
}

/* ---- Lua-facing functions ------------------------------------------------------------------ */

static int l_decode(lua_State *L)
{
	const mb_json_limits *lim = lua_touserdata(L, lua_upvalueindex(1));
	char err[256];
	size_t len;
	luaL_checktype(L, 1, LUA_TSTRING);
	const char *s = lua_tolstring(L, 1, &len);
	if (mb_json_decode(L, s, len, lim, err, sizeof err) != 0)
		return json_raise(L, "json.decode", err);
	return 1;
}

static int l_array(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	if (mb_json_mark_array(L, 1) != 0)
		return luaL_error(L, "json.array: the table already has a metatable");
	return 1;
}

int mb_json_mark_array(lua_State *L, int idx)
{
	idx = lua_absindex(L, idx);
	if (lua_getmetatable(L, idx)) {
		lua_pop(L, 1);
		mb_json_expand(L, idx);
	}
	json_push_array_mt(L);
	if (lua_getmetatable(L, idx)) {
		int same = lua_rawequal(L, -1, -2);
		lua_pop(L, 2);
		return same ? 0 : -1;
	}
	lua_setmetatable(L, idx);
	return 0;
}

void mb_json_push_null(lua_State *L)
{
	lua_pushlightuserdata(L, NULL);
}

int mb_json_open(lua_State *L, const mb_json_limits *lim)
{
	lua_createtable(L, 0, 6); /* the sandbox adds read_file and write_file */
	mb_json_limits *u = lua_newuserdatauv(L, sizeof *u, 0);
	*u = json_norm_limits(lim);
	lua_pushvalue(L, -1);
	lua_pushcclosure(L, json_l_encode, 1);
	lua_setfield(L, -3, "encode");
	lua_pushcclosure(L, l_decode, 1);
	lua_setfield(L, -2, "decode");
	mb_json_push_null(L);
	lua_setfield(L, -2, "null");
	lua_pushcfunction(L, l_array);
	lua_setfield(L, -2, "array");
	json_push_array_mt(L);
	lua_pop(L, 1);
	return 1;
}

void mb_json_global_init(void)
{
	json_set_alloc_funcs(mb_budget_malloc, mb_budget_free);
	json_object_seed(0);
}
