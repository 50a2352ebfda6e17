/* host_proc.h - child processes for the trusted host Lua state (upstream MCP servers on stdio).
 *
 * Adds `spawn{...}` to a table (the host's `mb`). A child gets three pipes as its stdin, stdout
 * and stderr and nothing else: before each spawn every descriptor of ours from 3 up is marked
 * close-on-exec (close_range, or a /proc/self/fd sweep). The child stays in our process group and
 * session (not detached), with its signal dispositions reset by libuv.
 *
 *   local p, err = mb.spawn{
 *     command = "node",             -- required; looked up in PATH (execvp) when it has no '/':
 *                                   -- the child's PATH, i.e. env.PATH when env is given
 *                                   -- (glibc's default /bin:/usr/bin when env has no PATH)
 *     args = { "server.js" },       -- optional argv[1..]; strings only
 *     env = { PATH = "/usr/bin" },  -- optional: the child's WHOLE environment; nil inherits ours
 *     cwd = "/srv",                 -- optional working directory
 *     max_line_bytes = 16777216,    -- optional, 1 .. 2^30: longest stdout line delivered
 *     on_line = function(line, err) end,  -- each stdout line (see below)
 *     on_stderr = function(line) end,     -- each stderr line, cut at 4096 bytes
 *     on_exit = function(exit_status, term_signal) end,
 *   }
 *   -- failure: nil, "spawn node: no such file or directory" (also "spawn node: cwd /x: <reason>")
 *
 * Lines: the bytes before each "\n", without one trailing "\r". A stdout line longer than
 * max_line_bytes is dropped: on_line(nil, "a line of more than N bytes was discarded
 * (max_line_bytes=N)") once, then its bytes are skipped up to the next "\n". A stderr line longer
 * than 4096 bytes is delivered cut to its first 4096 bytes; without on_stderr, stderr lines are
 * logged at debug level. A final unterminated line is delivered at end of file.
 * on_exit(exit_status, term_signal) runs once, after the process exited AND both its stdout and
 * stderr reached end of file, so every line came before it. A grandchild that keeps the pipes
 * open cannot hold it back for long: 1 s after the exit the pipes are closed regardless.
 *
 * Methods: p:write(data) -> true | nil, err (queues a copy, never blocks; queued bytes are bounded
 * only by memory, see p:queued_bytes()); p:pid() (nil after exit); p:kill(sig) with an integer or
 * "TERM"/"KILL"/"INT"/"HUP"/"STOP"/"CONT"/"QUIT"/"USR1"/"USR2" (default "TERM") -> true | nil, err;
 * p:close_stdin() (after the queued bytes are written); p:close(grace_ms) closes stdin, sends
 * SIGTERM and SIGKILL after grace_ms (default 2000) if the process is still alive; on_exit still
 * fires; idempotent; also the __close of a to-be-closed variable; p:running().
 *
 * Callbacks run on the state's main thread through lua_pcall with a traceback; an error in one is
 * logged with mb_log and never propagates. A callback may call any method (p:close() inside
 * on_line included) or spawn another process. Callbacks cannot yield.
 *
 * Lifetime: the Lua object holds the process. If it is garbage-collected while the child runs,
 * the child is killed with SIGKILL and a warning logged (the callbacks usually keep it alive: a
 * callback that refers to p anchors it until on_exit). After mb_host_proc_shutdown, or after the
 * object was collected, no Lua callback runs again for that process.
 *
 * Ownership: each child lives in a malloc'd block holding its libuv handles (process, three pipes,
 * a timer), freed by the last close callback; the per-state context is malloc'd too and freed
 * when the Lua state is gone and the last child is finished. Nothing the loop does afterwards
 * touches the Lua state, so lua_close may come before the loop has reaped the children.
 *
 * The loop: the handles of a running child are REFERENCED. uv_run does not return while a child
 * runs or its pipes are open; that is what lets shutdown reap its children. Shutdown order:
 * mb_host_proc_shutdown(L, grace_ms); let uv_run finish (children exit, at the latest grace_ms
 * later by SIGKILL, and the handles close); lua_close(L) before or after that uv_run. lua_close
 * without shutdown is also safe (finalizers SIGKILL the children), but the loop must still run
 * afterwards to reap them and free the memory.
 *
 * Writes to a child that has exited fail with EPIPE; the process must ignore SIGPIPE (the server
 * does, in mb_server_run_stdio).
 *
 * Threads: loop thread only; L must belong to the loop's thread.
 */
#ifndef MB_HOST_PROC_H
#define MB_HOST_PROC_H

#include <lua.h>
#include <uv.h>

/// Adds spawn to the table on top of L's stack (the stack is left as it was). Creates the
/// per-state context on first use; calling it again is allowed but the loop must be the same.
/// @param L    the host state (any thread of it; callbacks use its main thread)
/// @param loop the loop the children run on; must outlive every child (see shutdown order)
void mb_host_proc_open(lua_State *L, uv_loop_t *loop);

/// Stops every live child of L: closes its stdin, sends SIGTERM, and SIGKILL after grace_ms if
/// it has not exited (the timer and the process handle keep the loop running until then). The
/// Lua callbacks of every child are released and never called again; the Lua objects report the
/// process as shut down. From then on spawn returns nil, "spawn <cmd>: the server is shutting
/// down" (so a late request cannot start a child that keeps the loop alive). Safe to call twice
/// (a second call may only shorten the grace).
/// @param L        the host state given to mb_host_proc_open (nothing happens if it never was)
/// @param grace_ms milliseconds between SIGTERM and SIGKILL (negative counts as 0)
void mb_host_proc_shutdown(lua_State *L, int grace_ms);

/// Number of live children of L: spawned and not yet finished (exited with stdout and stderr at
/// end of file), including children already shut down that have not been reaped yet.
/// @param L the host state
/// @returns the count, 0 when mb_host_proc_open was never called
int mb_host_proc_live(lua_State *L);

#endif
