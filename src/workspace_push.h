/* workspace_push.h - turning workspace results (malloc'd C memory) into Lua values without
 * leaking them: each push runs under lua_pcall (mb_ws_pcall1), so a memory error in the Lua
 * state returns to the caller, which frees its buffer and then re-raises. Shared by the host
 * (workspace_lua.c) and sandbox (sandbox_workspace.c) bindings. */
#ifndef MB_WORKSPACE_PUSH_H
#define MB_WORKSPACE_PUSH_H

#include <lua.h>
#include <stddef.h>

#include "workspace.h"

typedef struct {
	const char *s;
	size_t n;
} mb_ws_bytes;

typedef struct {
	mb_workspace_entry *e;
	size_t n;
} mb_ws_entries;

/// lua_CFunctions taking a light userdata (mb_ws_bytes* / mb_ws_entries*): push a string, or
/// an array of {path, size, modified} marked as a JSON array.
int mb_ws_push_bytes(lua_State *L);
int mb_ws_push_entries(lua_State *L);

/// Runs f(ud) in protected mode with one result. @returns the lua_pcall status
int mb_ws_pcall1(lua_State *L, lua_CFunction f, void *ud);

#endif
