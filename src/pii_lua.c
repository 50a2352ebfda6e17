/* pii_lua.c - pii_scan and pii_sanitize for Lua states (host or sandbox).
 *
 * mb_pii_lua_open adds two functions to the table on top of the stack. Both share one upvalue,
 * a full userdata holding the detector pointer, a copy of the key, and this state's scratch
 * (made on first use, freed by __gc with the key wiped): a lua_State runs on one thread at a
 * time, which is the scratch's rule.
 *
 * C results are malloc'd, so a Lua error while they are turned into tables (out of memory, a
 * budget limit) would leak them. Each call therefore first pushes a "box" userdata whose __gc
 * frees whatever the box still holds; the normal path frees it explicitly and empties the box.
 * The mint function runs under lua_pcall through a trampoline, so an error inside it cannot
 * jump over mb_pii_sanitize's own cleanup; its error object is kept in the box's user value and
 * raised again, unchanged, once mb_pii_sanitize has returned.
 */
#include "pii.h"

#include "json.h"
#include "log.h"

#include <lauxlib.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PII_LUA_MT "mb.pii.state"
#define PII_BOX_MT "mb.pii.box"

typedef struct {
	const mb_pii_detector *d;
	unsigned char key[MB_PII_KEY_BYTES];
	int has_key;
	mb_pii_scratch *scratch;
} pii_lua;

typedef struct {
	mb_pii_span *spans;
	mb_pii_result res;
} pii_box;

static int pii_lua_gc(lua_State *L)
{
	pii_lua *u = luaL_checkudata(L, 1, PII_LUA_MT);
	sodium_memzero(u->key, sizeof u->key);
	mb_pii_scratch_free(u->scratch);
	u->scratch = NULL;
	return 0;
}

static int pii_box_gc(lua_State *L)
{
	pii_box *b = luaL_checkudata(L, 1, PII_BOX_MT);
	free(b->spans);
	b->spans = NULL;
	mb_pii_result_free(&b->res);
	return 0;
}

static pii_box *push_box(lua_State *L)
{
	pii_box *b = lua_newuserdatauv(L, sizeof *b, 1);
	memset(b, 0, sizeof *b);
	if (luaL_newmetatable(L, PII_BOX_MT)) {
		lua_pushcfunction(L, pii_box_gc);
		lua_setfield(L, -2, "__gc");
		lua_pushliteral(L, "pii.box");
		lua_setfield(L, -2, "__metatable");
	}
	lua_setmetatable(L, -2);
	return b;
}

static pii_lua *get_state(lua_State *L)
{
	pii_lua *u = lua_touserdata(L, lua_upvalueindex(1));
	if (!u->scratch) {
		u->scratch = mb_pii_scratch_new(u->d);
		if (!u->scratch)
			luaL_error(L, "pii: out of memory (scratch)");
	}
	return u;
}

/* types argument: nil (all), a type name, or an array of names. */
static uint64_t check_types(lua_State *L, int arg, const mb_pii_detector *d)
{
	int t = lua_type(L, arg);
	if (t == LUA_TNONE || t == LUA_TNIL)
		return MB_PII_ALL;
	uint64_t mask = 0;
	int n = 1;
	if (t == LUA_TTABLE)
		n = (int)luaL_len(L, arg);
	else if (t != LUA_TSTRING)
		luaL_typeerror(L, arg, "nil, type name or array of type names");
	for (int i = 1; i <= n; i++) {
		int pushed = 0;
		if (t == LUA_TTABLE) {
			lua_geti(L, arg, i);
			pushed = 1;
		} else {
			lua_pushvalue(L, arg);
			pushed = 1;
		}
		const char *name = lua_tostring(L, -1);
		int ty = name && lua_type(L, -1) == LUA_TSTRING ? mb_pii_type_find(d, name) : -1;
		if (ty < 0) {
			luaL_Buffer B;
			luaL_buffinit(L, &B);
			for (int k = 0; k < mb_pii_type_count(d); k++) {
				if (k)
					luaL_addstring(&B, ", ");
				luaL_addstring(&B, mb_pii_type_name(d, k));
			}
			luaL_pushresult(&B);
			return (uint64_t)luaL_error(L, "pii: unknown type %s%s%s (known: %s)",
						    name ? "'" : "", name ? name : luaL_typename(L, -2),
						    name ? "'" : "", lua_tostring(L, -1));
		}
		mask |= 1ull << ty;
		lua_pop(L, pushed);
	}
	return mask;
}

/* pii_scan(text [, types]) -> { {type=, start=, stop=}, ... } (1-based, stop inclusive) */
static int pii_scan_lua(lua_State *L)
{
	pii_lua *u = get_state(L);
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	uint64_t types = check_types(L, 2, u->d);
	pii_box *b = push_box(L);
	size_t n = 0;
	char err[MB_ERR_MAX];
	int rc = mb_pii_scan(u->d, s, len, types, u->scratch, &b->spans, &n, err, sizeof err);
	if (rc != 0)
		return luaL_error(L, "%s", err);
	lua_createtable(L, n > 0x7fffffff ? 0x7fffffff : (int)n, 0);
	mb_json_mark_array(L, -1);
	for (size_t i = 0; i < n; i++) {
		const mb_pii_span *sp = &b->spans[i];
		lua_createtable(L, 0, 3);
		lua_pushstring(L, mb_pii_type_name(u->d, sp->type));
		lua_setfield(L, -2, "type");
		lua_pushinteger(L, (lua_Integer)sp->start + 1);
		lua_setfield(L, -2, "start");
		lua_pushinteger(L, (lua_Integer)sp->stop);
		lua_setfield(L, -2, "stop");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	free(b->spans);
	b->spans = NULL;
	return 1;
}

typedef struct {
	lua_State *L;
	int fn;         /* stack index of the mint function */
	int box;        /* stack index of the box (its user value keeps a raised error) */
	const char *type, *value;
	size_t len;
	char *token;
	int bad;        /* the function returned something other than a string or nil */
	char badtype[32];
} mint_call;

/* Runs under lua_pcall: (fn, mint_call*) -> calls fn(type, value, default_token). */
static int mint_trampoline(lua_State *L)
{
	mint_call *mc = lua_touserdata(L, 2);
	lua_pushvalue(L, 1);
	lua_pushstring(L, mc->type);
	lua_pushlstring(L, mc->value, mc->len);
	lua_pushstring(L, mc->token);
	lua_call(L, 3, 1);
	int t = lua_type(L, -1);
	if (t == LUA_TSTRING) {
		size_t tl;
		const char *tok = lua_tolstring(L, -1, &tl);
		if (tl >= MB_PII_TOKEN_MAX)
			tl = MB_PII_TOKEN_MAX - 1;   /* too long: rejected by mb_pii_sanitize's check */
		memcpy(mc->token, tok, tl);
		mc->token[tl] = '\0';
		if (strlen(mc->token) != tl || tl == MB_PII_TOKEN_MAX - 1)
			mc->token[0] = '\0';
	} else if (t != LUA_TNIL) {
		mc->bad = 1;
		strncpy(mc->badtype, lua_typename(L, t), sizeof mc->badtype - 1);
	}
	return 0;
}

static int mint_lua(void *ud, const char *type, const char *value, size_t len,
		    char token[MB_PII_TOKEN_MAX], char *err, size_t errlen)
{
	mint_call *mc = ud;
	lua_State *L = mc->L;
	mc->type = type;
	mc->value = value;
	mc->len = len;
	mc->token = token;
	mc->bad = 0;
	lua_pushcfunction(L, mint_trampoline);
	lua_pushvalue(L, mc->fn);
	lua_pushlightuserdata(L, mc);
	if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
		lua_setiuservalue(L, mc->box, 1);   /* raised again after cleanup */
		snprintf(err, errlen, "pii: mint function failed");
		return -1;
	}
	if (mc->bad) {
		snprintf(err, errlen, "pii: mint function must return a token string or nil, not a %s",
			 mc->badtype);
		return -1;
	}
	return 0;
}

/* pii_sanitize(text [, mint_fn [, types]]) -> sanitized, found, counts */
static int pii_sanitize_lua(lua_State *L)
{
	pii_lua *u = get_state(L);
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	if (!lua_isnoneornil(L, 2))
		luaL_checktype(L, 2, LUA_TFUNCTION);
	uint64_t types = check_types(L, 3, u->d);
	if (!u->has_key)
		return luaL_error(L, "pii: pii_sanitize needs a key (none was given to this state)");
	lua_settop(L, 3);
	pii_box *b = push_box(L);   /* index 4 */
	luaL_checkstack(L, 8, "pii");
	mint_call mc = { .L = L, .fn = 2, .box = 4 };
	char err[MB_ERR_MAX];
	int rc = mb_pii_sanitize(u->d, u->key, s, len, types, lua_isnil(L, 2) ? NULL : mint_lua, &mc,
				 u->scratch, &b->res, err, sizeof err);
	if (rc != 0) {
		if (lua_getiuservalue(L, 4, 1) != LUA_TNIL)
			return lua_error(L);
		return luaL_error(L, "%s", err);
	}
	const mb_pii_result *r = &b->res;
	lua_pushlstring(L, r->text, r->len);
	lua_createtable(L, r->nfound > 0x7fffffff ? 0x7fffffff : (int)r->nfound, 0);
	mb_json_mark_array(L, -1);
	for (size_t i = 0; i < r->nfound; i++) {
		const mb_pii_found *f = &r->found[i];
		lua_createtable(L, 0, 4);
		lua_pushstring(L, f->token);
		lua_setfield(L, -2, "token");
		lua_pushstring(L, mb_pii_type_name(u->d, f->type));
		lua_setfield(L, -2, "type");
		lua_pushlstring(L, f->value, f->value_len);
		lua_setfield(L, -2, "value");
		lua_pushinteger(L, (lua_Integer)f->count);
		lua_setfield(L, -2, "count");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_createtable(L, 0, 4);
	for (size_t t = 0; t < r->ntypes; t++)
		if (r->counts[t]) {
			lua_pushinteger(L, (lua_Integer)r->counts[t]);
			lua_setfield(L, -2, mb_pii_type_name(u->d, (int)t));
		}
	mb_pii_result_free(&b->res);
	return 3;
}

void mb_pii_lua_open(lua_State *L, const mb_pii_detector *d, const unsigned char *key)
{
	int t = lua_absindex(L, -1);
	pii_lua *u = lua_newuserdatauv(L, sizeof *u, 0);
	memset(u, 0, sizeof *u);
	u->d = d;
	if (key) {
		memcpy(u->key, key, MB_PII_KEY_BYTES);
		u->has_key = 1;
	}
	if (luaL_newmetatable(L, PII_LUA_MT)) {
		lua_pushcfunction(L, pii_lua_gc);
		lua_setfield(L, -2, "__gc");
		lua_pushliteral(L, "pii");
		lua_setfield(L, -2, "__metatable");
	}
	lua_setmetatable(L, -2);
	lua_pushvalue(L, -1);
	lua_pushcclosure(L, pii_scan_lua, 1);
	lua_setfield(L, t, "pii_scan");
	lua_pushcclosure(L, pii_sanitize_lua, 1);
	lua_setfield(L, t, "pii_sanitize");
}
