/* yaml.c - YAML text to Lua values with libyaml's event parser (yaml.h says what for).
 *
 * Events drive a stack of open containers kept beside the Lua stack: a mapping alternates key
 * and value (a key is pushed and waits for its value), a sequence appends. Scalars are resolved
 * here (libyaml only tokenizes): a plain scalar that reads as null, a boolean, an integer or a
 * float becomes that; anything quoted, tagged !!str, or not a number stays a string.
 */
#include "yaml.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "json.h"
#include "log.h"

#define MAX_DEPTH_CAP 256

typedef struct {
	int idx;        /* Lua stack index of the table */
	int is_map;
	int have_key;   /* a key is on the stack, waiting for its value */
	lua_Integer n;  /* items so far (sequences) */
} frame;

static int ieq(const char *s, size_t n, const char *const *words)
{
	for (; *words; words++)
		if (strlen(*words) == n && memcmp(s, *words, n) == 0)
			return 1;
	return 0;
}

/* Pushes a plain scalar resolved by YAML 1.2's core schema. */
static void push_plain(lua_State *L, const char *s, size_t n)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
	static const char *const trues[] = {"true", "True", "TRUE", NULL};
	static const char *const falses[] = {"false", "False", "FALSE", NULL};
	static const char *const infs[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", NULL};
	static const char *const ninfs[] = {"-.inf", "-.Inf", "-.INF", NULL};
	static const char *const nans[] = {".nan", ".NaN", ".NAN", NULL};
	if (ieq(s, n, nulls)) {
		mb_json_push_null(L);
		return;
	}
	if (ieq(s, n, trues) || ieq(s, n, falses)) {
		lua_pushboolean(L, ieq(s, n, trues));
		return;
	}
	if (ieq(s, n, infs) || ieq(s, n, ninfs) || ieq(s, n, nans)) {
		lua_pushnumber(L, ieq(s, n, nans) ? NAN : ieq(s, n, infs) ? HUGE_VAL : -HUGE_VAL);
		return;
	}
	/* a number only when the whole text is one; lua_stringtonumber also takes hex and spaces,
	 * so the characters are checked first: [-+]digits[.digits][e[-+]digits] */
	int digits = 0, ok = n > 0 && n < 64;
	for (size_t i = 0; ok && i < n; i++) {
		char c = s[i];
		if (c >= '0' && c <= '9')
			digits++;
		else if (!strchr("+-.eE", c))
			ok = 0;
	}
	if (ok && digits) {
		char tmp[64];
		memcpy(tmp, s, n);
		tmp[n] = 0;
		if (lua_stringtonumber(L, tmp) != 0)
			return;
	}
	lua_pushlstring(L, s, n);
}

static void fail(char *err, size_t errlen, size_t line, size_t col, const char *what)
{
	snprintf(err, errlen, "line %zu column %zu: %s", line + 1, col + 1, what);
}

/* Adds the value at the top of the stack to the open container, or leaves it as the result. */
static int add_value(lua_State *L, frame *st, int depth, int *done, char *err, size_t errlen,
		     const yaml_mark_t *m)
{
	if (depth == 0) {
		*done = 1;
		return 0;
	}
	frame *f = &st[depth - 1];
	if (!f->is_map) {
		lua_rawseti(L, f->idx, ++f->n);
		return 0;
	}
	if (!f->have_key) { /* this value is a key: keys must be strings (or scalars, as text) */
		if (lua_type(L, -1) == LUA_TTABLE) {
			fail(err, errlen, m->line, m->column, "a mapping key must be a scalar");
			return -1;
		}
		if (lua_type(L, -1) != LUA_TSTRING) { /* 1: x, true: x, ~: x -> "1", "true", "null" */
			if (lua_islightuserdata(L, -1))
				lua_pushliteral(L, "null");
			else
				luaL_tolstring(L, -1, NULL);
			lua_remove(L, -2);
		}
		lua_pushvalue(L, -1);
		if (lua_rawget(L, f->idx) != LUA_TNIL) {
			lua_pop(L, 1);
			snprintf(err, errlen, "line %zu column %zu: duplicate key \"%.64s\"", m->line + 1,
				 m->column + 1, lua_tostring(L, -1));
			return -1;
		}
		lua_pop(L, 1);
		f->have_key = 1;
		return 0;
	}
	lua_rawset(L, f->idx);
	f->have_key = 0;
	return 0;
}

int mb_yaml_decode(lua_State *L, const char *buf, size_t len, int max_depth, char *err, size_t errlen)
{
	if (max_depth <= 0 || max_depth > MAX_DEPTH_CAP)
		max_depth = MAX_DEPTH_CAP;
	yaml_parser_t p;
	if (!yaml_parser_initialize(&p)) {
		snprintf(err, errlen, "cannot start the YAML parser");
		return -1;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
	int top = lua_gettop(L), depth = 0, done = 0, docs = 0, rc = -1;
	frame st[MAX_DEPTH_CAP];
	luaL_checkstack(L, 2 * max_depth + 8, "YAML nesting");
	for (;;) {
		yaml_event_t ev;
		if (!yaml_parser_parse(&p, &ev)) {
			fail(err, errlen, p.problem_mark.line, p.problem_mark.column,
			     p.problem ? p.problem : "YAML syntax error");
			break;
		}
		const yaml_mark_t *m = &ev.start_mark;
		int stop = 0, bad = 0;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			stop = 1;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++docs > 1) {
				fail(err, errlen, m->line, m->column, "one YAML document per file");
				bad = 1;
			}
			break;
		case YAML_ALIAS_EVENT:
			fail(err, errlen, m->line, m->column, "aliases (*name) are not supported");
			bad = 1;
			break;
		case YAML_SCALAR_EVENT: {
			const char *s = (const char *)ev.data.scalar.value;
			size_t n = ev.data.scalar.length;
			const char *tag = (const char *)ev.data.scalar.tag;
			if (ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !(tag && strstr(tag, ":str")))
				push_plain(L, s, n);
			else
				lua_pushlstring(L, s, n);
			bad = add_value(L, st, depth, &done, err, errlen, m) != 0;
			break;
		}
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (depth >= max_depth) {
				snprintf(err, errlen, "line %zu column %zu: nesting deeper than %d", m->line + 1,
					 m->column + 1, max_depth);
				bad = 1;
				break;
			}
			lua_newtable(L);
			st[depth].idx = lua_gettop(L);
			st[depth].is_map = ev.type == YAML_MAPPING_START_EVENT;
			st[depth].have_key = 0;
			st[depth].n = 0;
			depth++;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			if (!st[depth].is_map)
				mb_json_mark_array(L, -1);
			bad = add_value(L, st, depth, &done, err, errlen, m) != 0;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
		if (bad)
			break;
		if (stop) {
			if (!done)
				mb_json_push_null(L); /* an empty text is null, as an empty document is */
			rc = 0;
			break;
		}
	}
	yaml_parser_delete(&p);
	lua_settop(L, rc == 0 ? top + 1 : top); /* the document's value is at top + 1 */
	return rc;
}

int mb_yaml_decode_lua(lua_State *L)
{
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	char err[MB_ERR_MAX];
	if (mb_yaml_decode(L, s, len, 64, err, sizeof err) != 0) {
		lua_pushnil(L);
		lua_pushstring(L, err);
		return 2;
	}
	return 1;
}
