/* workspace_push.c - see workspace_push.h: the protected pushes shared by the host and sandbox
 * bindings of the workspace. */
#include "workspace_push.h"

#include "json.h"

int mb_ws_push_bytes(lua_State *L)
{
	mb_ws_bytes *b = lua_touserdata(L, 1);
	lua_pushlstring(L, b->s, b->n);
	return 1;
}

int mb_ws_push_entries(lua_State *L)
{
	mb_ws_entries *es = lua_touserdata(L, 1);
	lua_createtable(L, (int)(es->n < 1000000 ? es->n : 1000000), 0);
	for (size_t i = 0; i < es->n; i++) {
		lua_createtable(L, 0, 3);
		lua_pushstring(L, es->e[i].path);
		lua_setfield(L, -2, "path");
		lua_pushinteger(L, es->e[i].size);
		lua_setfield(L, -2, "size");
		lua_pushinteger(L, es->e[i].mtime_ms);
		lua_setfield(L, -2, "modified");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	mb_json_mark_array(L, -1);
	return 1;
}

int mb_ws_pcall1(lua_State *L, lua_CFunction f, void *ud)
{
	lua_pushcfunction(L, f);
	lua_pushlightuserdata(L, ud);
	return lua_pcall(L, 1, 1, 0);
}
