/* host_uv.h - libuv timers and directory watchers for the trusted host Lua state.
 *
 * Adds `timer(ms, fn)` and `watch(dir, fn)` to a table (the host's `mb`). Callbacks run on the
 * loop thread on the state's main thread through lua_pcall; an error in one is logged with
 * mb_log and never propagates. Callbacks cannot yield (start a coroutine inside if needed).
 *
 * timer(ms, fn) -> handle: one-shot; fn() runs once after ms milliseconds (0 <= ms <= 2^53,
 * fractions rounded up). handle:stop() cancels it (also :close(); both are idempotent). A pending
 * timer keeps itself alive, so `mb.timer(10, fn)` without keeping the handle still fires.
 *
 * watch(dir, fn) -> handle | nil, "watch <dir>: <reason>": inotify on dir (not recursive);
 * fn(filename_or_nil, events) with events "rename", "change" or "rename,change". handle:close()
 * stops it (also :stop(); idempotent; also a to-be-closed variable). A watcher lives as long as
 * its handle is referenced: when the handle is garbage-collected without :close() the watcher is
 * closed and a warning logged.
 *
 * Ownership: each libuv handle lives in its own malloc'd block that is freed only in its
 * uv_close callback; Lua objects point at it and are detached at close time, and the function
 * reference is released then too. Handles are uv_unref'd: they never keep the loop alive.
 *
 * Shutdown order: mb_host_uv_close_all(L); let the loop run (uv_run) so the close callbacks free
 * the memory; lua_close(L) whenever convenient (before or after that uv_run); uv_loop_close.
 * lua_close without close_all is also safe (finalizers close the handles), but the loop must
 * still run once afterwards to free them.
 *
 * Threads: loop thread only; L must belong to the loop's thread.
 */
#ifndef MB_HOST_UV_H
#define MB_HOST_UV_H

#include <lauxlib.h>
#include <lua.h>
#include <uv.h>

/// Adds timer and watch to the table on top of L's stack (the stack is left as it was). Creates
/// the per-state handle registry on first use; calling it again with another table is allowed
/// but the loop must be the same.
/// @param L    the host state (any thread of it; callbacks use its main thread)
/// @param loop the loop the handles run on; must outlive every handle (see shutdown order)
void mb_host_uv_open(lua_State *L, uv_loop_t *loop);

/// Closes every live timer and watcher of L (uv_close; memory freed by the loop's close
/// callbacks) and releases their Lua functions. Later calls of timer/watch still work.
/// @param L the host state given to mb_host_uv_open (nothing happens if it never was)
void mb_host_uv_close_all(lua_State *L);

/// Message handler for lua_pcall in host callbacks (also used by host_proc.c and host_http_client.c):
/// the error message (or a description of a non-string error object) with a traceback.
int mb_host_traceback(lua_State *L);

/// The metatable of a kind of host handle (registry name `name`; also used by host_proc.c and
/// host_http_client.c), made on the first call: __index is a table of the methods, __gc, __close
/// and __tostring are the given functions, and __metatable is `shown` (what getmetatable gives
/// Lua code). The stack is left as it was.
void mb_host_handle_mt(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
		       lua_CFunction close, lua_CFunction tostring, const char *shown);

/// Pushes the per-state context of a host module: a userdata kept in the registry under key.
/// The first call makes it (size bytes, zeroed, with the metatable mt whose __gc is gc) and sets
/// *made to 1 so the caller fills it in; later calls push the same one and set *made to 0.
void *mb_host_context(lua_State *L, const void *key, size_t size, const char *mt, lua_CFunction gc,
		      int *made);

/// Number of live (not yet closed) handles of L, for tests and stats.
/// @param L the host state
/// @returns the count, 0 when mb_host_uv_open was never called
int mb_host_uv_live(lua_State *L);

#endif
