/* types_cli.c - `moonbox types DIR`: writes the editor files of a skill author's folder.
 *
 * DIR/types/sandbox.lua is the ---@meta file of the sandbox API (lua/mcp/sandbox_types.lua, made
 * from the catalog's lua/catalog/sandbox_api.lua) and DIR/.luarc.json points lua-language-server
 * at it: Lua 5.4, the stock libraries the sandbox lacks disabled, moonbox's globals known. The
 * Lua runs in a plain state of its own (no server, no store, no network) with the embedded
 * modules; the files are written with the user's own rights, as any file they ask a CLI for.
 * The upstream tools' stubs need the running server's catalog: they are the resource
 * moonbox://types/servers.lua.
 */
#include "types_cli.h"

#include <errno.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "embedded.h"

static int searcher(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	const mb_embedded_file *f = mb_embedded_find(name);
	if (!f) {
		lua_pushfstring(L, "no embedded module '%s'", name);
		return 1;
	}
	if (luaL_loadbufferx(L, f->data, f->len, name, "b") != LUA_OK)
		return lua_error(L);
	lua_pushstring(L, name);
	return 2;
}

static const char script[] =
	"local dir = ...\n"
	"local st, api = require('mcp.sandbox_types'), require('catalog.sandbox_api')\n"
	"local function put(path, text)\n"
	"  local f, err = io.open(path, 'wb')\n"
	"  if not f then error(err, 0) end\n"
	"  local ok, werr = f:write(text)\n"
	"  local cok, cerr = f:close()\n"
	"  if not ok or not cok then error(path .. ': ' .. tostring(werr or cerr), 0) end\n"
	"  io.stdout:write(path, '\\n')\n"
	"end\n"
	"put(dir .. '/types/sandbox.lua', st.file(api))\n"
	"put(dir .. '/.luarc.json', st.luarc(api))\n";

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) == 0 || errno == EEXIST)
		return 0;
	return -1;
}

int mb_types_main(const char *dir)
{
	char sub[4096];
	if (snprintf(sub, sizeof sub, "%s/types", dir) >= (int)sizeof sub) {
		fprintf(stderr, "moonbox types: the path is too long\n");
		return 2;
	}
	if (make_dir(dir) != 0 || make_dir(sub) != 0) {
		fprintf(stderr, "moonbox types: cannot create %s: %s\n", sub, strerror(errno));
		return 1;
	}
	lua_State *L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "moonbox types: out of memory\n");
		return 1;
	}
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_getfield(L, -1, "searchers");
	lua_pushcfunction(L, searcher);
	lua_rawseti(L, -2, 2);
	lua_pop(L, 2);
	int rc = 0;
	if (luaL_loadbuffer(L, script, sizeof script - 1, "=moonbox types") != LUA_OK ||
	    (lua_pushstring(L, dir), lua_pcall(L, 1, 0, 0)) != LUA_OK) {
		fprintf(stderr, "moonbox types: %s\n", lua_tostring(L, -1));
		rc = 1;
	}
	lua_close(L);
	return rc;
}
