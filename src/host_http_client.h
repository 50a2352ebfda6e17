/* host_http_client.h - an asynchronous HTTP client for the trusted host Lua state (libcurl multi_socket
 * driven by the server's libuv loop). It carries MCP Streamable HTTP traffic to upstream MCP
 * servers: POST of JSON-RPC answered by JSON or by an SSE stream, GET of a long-lived SSE
 * stream, DELETE of a session.
 *
 * Lua API (added to the host's `mb` table):
 *
 *   local req, err = mb.http_request{
 *     method = "POST",              -- "GET", "POST" or "DELETE" (exact, upper case)
 *     url = "http://127.0.0.1:3001/mcp", -- http:// or https:// only, at most 8192 bytes
 *     headers = { ["Content-Type"] = "application/json" }, -- optional map name -> value
 *     body = "...",                 -- optional string, POST only (binary safe)
 *     timeout_ms = 60000,           -- optional total time; 0 or nil: none (SSE streams)
 *     connect_timeout_ms = 10000,   -- optional; 0 or nil: libcurl's default (300 s)
 *     max_response_bytes = 16777216, -- optional cap on body bytes; nil: 16777216; 0: no cap
 *     on_headers = function(status, headers) end, -- optional
 *     on_data = function(chunk) end,               -- optional
 *     on_done = function(err, status) end,         -- optional
 *   }
 *   req:cancel()  -- true if it was running, false if already finished or cancelled
 *
 * Bad arguments raise "http_request: <field> ..." (unknown fields too, so a misspelt option is
 * never silently ignored). Header names must be HTTP tokens; values must not contain CR, LF or
 * NUL; an empty value is sent as an empty header. A failure to start (out of memory, libcurl or
 * libuv refusing) returns nil, "http_request: <reason>".
 *
 * Callbacks, each in the order of this list, on the state's main thread, never from inside a
 * libcurl call: on_headers once when the final (non-1xx) response headers are complete, with
 * the status (integer) and a table of lower-cased header names to values (repeated headers
 * joined with ", "); on_data for body bytes as they arrive (de-chunked; each call carries what
 * libcurl read since the previous one, so an SSE event may be split or merged across calls);
 * on_done(err, status) once at the end: err is nil on success (any HTTP
 * status is a success) or "<METHOD> <url>: <reason>" where reason is libcurl's error text or
 * "response above N bytes (max_response_bytes=N)"; status is the HTTP status when a response
 * was received, else nil. The url in messages has no user:password@ part and no query string
 * (they may carry credentials). An error raised by a callback is logged (mb_log, with a
 * traceback) and goes no further. Callbacks cannot yield (resume a coroutine inside if needed).
 * A callback may cancel any request (its own too: nothing more is called for it) and start new
 * ones. After req:cancel() or mb_host_http_close_all no callback of that request runs.
 *
 * Lifetime: the callbacks are held by the request until it finishes; the request object itself
 * is NOT anchored: a request whose object becomes garbage while it runs is cancelled (logged at
 * debug). Keep the object (or refer to it from a callback or a live table) for as long as the
 * transfer matters.
 *
 * Transport: redirects are not followed (a 3xx is an ordinary response), no cookies, no
 * netrc, HTTP/1.1, TLS peers verified with the system CA store, TCP keepalive on, "Expect:
 * 100-continue" never sent. Proxies from the environment (http_proxy, https_proxy, no_proxy)
 * are honoured as libcurl does by default. CURLOPT_NOSIGNAL is set.
 *
 * Ownership: the per-state context (multi handle, its libuv timer, live transfers, polled
 * sockets) is a malloc'd block created at the first request and freed by the close callback of
 * its timer; each polled socket has its own malloc'd uv_poll_t block freed by its close
 * callback. Lua objects point into them and are detached when a transfer ends. All libuv handles
 * are uv_unref'd: they never keep the loop alive on their own.
 *
 * Shutdown order (as host_uv.h): mb_host_http_close_all(L); let the loop run (uv_run) so the
 * close callbacks free the memory; lua_close(L) whenever convenient; uv_loop_close. lua_close
 * without close_all is also safe (a finalizer closes everything), but the loop must still run
 * once afterwards.
 *
 * Threads: loop thread only; L must belong to the loop's thread. curl_global_init runs once per
 * process (pthread_once) at the first mb_host_http_open.
 */
#ifndef MB_HOST_HTTP_H
#define MB_HOST_HTTP_H

#include <lua.h>
#include <uv.h>

/// Adds http_request to the table on top of L's stack (the stack is left as it was). Calls
/// curl_global_init once per process. Calling it again is allowed; the loop must be the same.
/// @param L    the host state (any thread of it; callbacks use its main thread)
/// @param loop the loop the transfers run on; must outlive them (see shutdown order)
void mb_host_http_open(lua_State *L, uv_loop_t *loop);

/// Cancels every transfer of L (no callback runs afterwards), releases the multi handle and
/// uv_closes the libuv handles (memory freed by the loop's close callbacks). Safe to call twice
/// and from inside a callback; a later http_request starts a fresh context.
/// @param L the host state given to mb_host_http_open (nothing happens if it never was)
void mb_host_http_close_all(lua_State *L);

/// Number of live transfers of L (started, not yet finished, cancelled or closed).
/// @param L the host state
/// @returns the count, 0 when mb_host_http_open was never called
int mb_host_http_live(lua_State *L);

#endif
