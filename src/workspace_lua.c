/* workspace_lua.c - the workspaces as the trusted host Lua state sees them.
 *
 * mb_workspace_lua_open adds a `workspace` table to the table on top of the stack (the host's
 * `mb`), whose functions take the tenant name first and reach that tenant's workspace through
 * the registry (mb_workspaces_get: opened on first use). Tool handlers in lua/mcp/ use it to
 * offer workspace tools to agents, so failures are returned as data the handler can pass on -
 * nil, the message, and a short code ("not_found", "invalid", "quota", "io") - rather than
 * raised. Runs on the loop thread; the workspace module itself is thread-safe, so the same files
 * may be used by sandbox code on worker threads at the same time.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "workspace.h"
#include "workspace_push.h"

static int fail3(lua_State *L, const char *msg, const char *code)
{
	lua_pushnil(L);
	lua_pushstring(L, msg);
	lua_pushstring(L, code);
	return 3;
}

/* The workspace of the tenant in argument 1, or NULL with err set. */
static mb_workspace *tenant_ws(lua_State *L, char *err, size_t errlen)
{
	mb_workspaces *reg = lua_touserdata(L, lua_upvalueindex(1));
	size_t n;
	const char *t = luaL_checklstring(L, 1, &n);
	if (strlen(t) != n) {
		snprintf(err, errlen, "tenant: the name contains a NUL byte");
		return NULL;
	}
	return mb_workspaces_get(reg, t, err, errlen);
}


/* read(tenant, path) -> data | nil, msg, code */
static int l_read(lua_State *L)
{
	char err[MB_ERR_MAX];
	mb_workspace *ws = tenant_ws(L, err, sizeof err);
	size_t plen, n;
	const char *path = luaL_checklstring(L, 2, &plen);
	if (!ws)
		return fail3(L, err, "invalid");
	char *data;
	int rc = mb_workspace_read(ws, path, plen, &data, &n, err, sizeof err);
	if (rc)
		return fail3(L, err, mb_workspace_error_code(rc));
	mb_ws_bytes b = { data, n };
	int status = mb_ws_pcall1(L, mb_ws_push_bytes, &b);
	free(data);
	if (status != LUA_OK)
		return lua_error(L);
	return 1;
}

/* write(tenant, path, data) -> true | nil, msg, code */
static int l_write(lua_State *L)
{
	char err[MB_ERR_MAX];
	mb_workspace *ws = tenant_ws(L, err, sizeof err);
	size_t plen, n;
	const char *path = luaL_checklstring(L, 2, &plen);
	luaL_argexpected(L, lua_type(L, 3) == LUA_TSTRING, 3, "string");
	const char *data = lua_tolstring(L, 3, &n);
	if (!ws)
		return fail3(L, err, "invalid");
	int rc = mb_workspace_write(ws, path, plen, data, n, err, sizeof err);
	if (rc)
		return fail3(L, err, mb_workspace_error_code(rc));
	lua_pushboolean(L, 1);
	return 1;
}

/* delete(tenant, path) -> true (deleted) | false (no such file) | nil, msg, code */
static int l_delete(lua_State *L)
{
	char err[MB_ERR_MAX];
	mb_workspace *ws = tenant_ws(L, err, sizeof err);
	size_t plen;
	const char *path = luaL_checklstring(L, 2, &plen);
	if (!ws)
		return fail3(L, err, "invalid");
	int rc = mb_workspace_delete(ws, path, plen, err, sizeof err);
	if (rc && rc != -ENOENT)
		return fail3(L, err, mb_workspace_error_code(rc));
	lua_pushboolean(L, rc == 0);
	return 1;
}

/* list(tenant, dir?) -> { {path=, size=, modified=}, ... } | nil, msg, code. A directory that
 * does not exist lists as empty. */
static int l_list(lua_State *L)
{
	char err[MB_ERR_MAX];
	mb_workspace *ws = tenant_ws(L, err, sizeof err);
	size_t dlen = 0;
	const char *dir = luaL_optlstring(L, 2, NULL, &dlen);
	if (!ws)
		return fail3(L, err, "invalid");
	mb_ws_entries es = { NULL, 0 };
	int rc = mb_workspace_list(ws, dir, dlen, &es.e, &es.n, err, sizeof err);
	if (rc && rc != -ENOENT)
		return fail3(L, err, mb_workspace_error_code(rc));
	int status = mb_ws_pcall1(L, mb_ws_push_entries, &es);
	mb_workspace_entries_free(es.e, es.n);
	if (status != LUA_OK)
		return lua_error(L);
	return 1;
}

/* stat(tenant, path) -> {size=, modified=, is_dir=} | nil (missing) | nil, msg, code */
static int l_stat(lua_State *L)
{
	char err[MB_ERR_MAX];
	mb_workspace *ws = tenant_ws(L, err, sizeof err);
	size_t plen;
	const char *path = luaL_checklstring(L, 2, &plen);
	if (!ws)
		return fail3(L, err, "invalid");
	mb_workspace_info info;
	int rc = mb_workspace_stat(ws, path, plen, &info, err, sizeof err);
	if (rc == -ENOENT) {
		lua_pushnil(L);
		return 1;
	}
	if (rc)
		return fail3(L, err, mb_workspace_error_code(rc));
	lua_createtable(L, 0, 3);
	lua_pushinteger(L, info.size);
	lua_setfield(L, -2, "size");
	lua_pushinteger(L, info.mtime_ms);
	lua_setfield(L, -2, "modified");
	lua_pushboolean(L, info.is_dir);
	lua_setfield(L, -2, "is_dir");
	return 1;
}

/* usage(tenant) -> {files=, bytes=, max_files=, max_bytes=, max_file_bytes=} | nil, msg, code */
static int l_usage(lua_State *L)
{
	char err[MB_ERR_MAX];
	mb_workspace *ws = tenant_ws(L, err, sizeof err);
	if (!ws)
		return fail3(L, err, "invalid");
	int64_t files, nbytes;
	mb_workspace_usage(ws, &files, &nbytes);
	const mb_workspace_limits *lim = mb_workspace_limits_of(ws);
	lua_createtable(L, 0, 5);
	lua_pushinteger(L, files);
	lua_setfield(L, -2, "files");
	lua_pushinteger(L, nbytes);
	lua_setfield(L, -2, "bytes");
	lua_pushinteger(L, lim->max_files);
	lua_setfield(L, -2, "max_files");
	lua_pushinteger(L, lim->max_total_bytes);
	lua_setfield(L, -2, "max_bytes");
	lua_pushinteger(L, lim->max_file_bytes);
	lua_setfield(L, -2, "max_file_bytes");
	return 1;
}

void mb_workspace_lua_open(lua_State *L, mb_workspaces *reg)
{
	static const luaL_Reg fns[] = {
		{ "read", l_read },   { "write", l_write }, { "delete", l_delete },
		{ "list", l_list },   { "stat", l_stat },   { "usage", l_usage },
		{ NULL, NULL },
	};
	lua_createtable(L, 0, 6);
	lua_pushlightuserdata(L, reg);
	luaL_setfuncs(L, fns, 1);
	lua_setfield(L, -2, "workspace");
}
