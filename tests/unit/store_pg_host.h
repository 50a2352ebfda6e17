/* store_pg_host.h - what host.c gives the PostgreSQL store (store_pg.h's mb_pg_host), for the
 * tests and benches that drive src/store_pg.c without a whole host: a weak-keyed set of the
 * coroutines this code made (the only ones the store makes wait), resuming one, and making a
 * new one on the main state. sph_on_end, when set, hears of each coroutine that ended (its
 * status, and its first result or error on top of its stack). */
#ifndef MB_STORE_PG_HOST_H
#define MB_STORE_PG_HOST_H

#include <lauxlib.h>
#include <lua.h>

#include "store_pg.h"

static lua_State *sph_L;
static int sph_threads_ref;
static void (*sph_on_end)(lua_State *co, int status);

static void sph_resume(void *ud, lua_State *co, int nargs)
{
	(void)ud;
	int nres;
	int st = lua_resume(co, sph_L, nargs, &nres);
	if (st == LUA_YIELD) {
		lua_pop(co, nres);
		return;
	}
	if (st == LUA_OK && nres == 0)
		lua_pushnil(co);
	if (sph_on_end)
		sph_on_end(co, st);
}

static int sph_owns(void *ud, lua_State *co)
{
	(void)ud;
	lua_rawgeti(sph_L, LUA_REGISTRYINDEX, sph_threads_ref);
	lua_pushthread(co);
	lua_xmove(co, sph_L, 1);
	int r = lua_rawget(sph_L, -2) == LUA_TBOOLEAN;
	lua_pop(sph_L, 2);
	return r;
}

/* A new coroutine of ours, left on sph_L's stack. */
static lua_State *sph_spawn(void *ud)
{
	(void)ud;
	lua_State *co = lua_newthread(sph_L);
	lua_rawgeti(sph_L, LUA_REGISTRYINDEX, sph_threads_ref);
	lua_pushvalue(sph_L, -2);
	lua_pushboolean(sph_L, 1);
	lua_rawset(sph_L, -3);
	lua_pop(sph_L, 1);
	return co;
}

/* Makes L the main state and gives s the hooks. */
static void sph_init(lua_State *L, mb_pg *s)
{
	sph_L = L;
	lua_newtable(L);
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "k");
	lua_setfield(L, -2, "__mode");
	lua_setmetatable(L, -2);
	sph_threads_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	mb_pg_host hh = { sph_resume, sph_owns, sph_spawn, NULL };
	mb_pg_set_host(s, &hh);
}

#endif
