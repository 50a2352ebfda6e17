/* host.h - the trusted host Lua state that owns protocol policy.
 *
 * C hands every incoming line to lua/mcp/server.lua, each in its own coroutine; a handler that
 * starts an execution yields until the pool reports it done. The host state only ever runs on the
 * loop thread. The `mb` table it sees is the bridge: send, submit, wait, cancel, JSON, logging,
 * configuration and stats.
 */
#ifndef MB_HOST_H
#define MB_HOST_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "config.h"
#include "pool.h"
#include "sandbox.h"

typedef struct mb_host mb_host;
struct mb_store;
struct mb_workspaces;

/* What the host state reaches besides the pool: the loop (timers, watchers), the store and the
 * tenants' workspaces. All owned by the caller and outliving the host. */
typedef struct mb_host_deps {
	uv_loop_t *loop;
	struct mb_store *store;              /* SQLite; or pg below */
	struct mb_workspaces *workspaces;
	const struct mb_pii_detector *pii;   /* with pii_key: mb.pii_scan, mb.pii_sanitize, mb.pii_token */
	const unsigned char *pii_key;
	struct mb_pg *pg;                    /* PostgreSQL (store_url) instead of store */
} mb_host_deps;

typedef struct mb_host_io {
	/* writes one message; takes ownership of the malloc'd buffer (which ends with '\n') */
	/* session: the transport's session (1 on stdio); exchange: the HTTP POST this message
	 * belongs to (0: none); final: it ends that exchange (a response) */
	/* status: the HTTP status of a final answer sent as a whole JSON response (0 = 200) */
	/* returns 0, or -ENOBUFS when the transport refused it because its client has not read
	 * what was sent before (max_backlog_bytes): err then says why, and the host may send a short
	 * error in its place */
	int (*send)(void *ud, uint64_t session, uint64_t exchange, int final, int status, char *data,
		    size_t len, char *err, size_t errlen);
	void *ud;
	/* optional: the transport's backlog as {bytes, peak, refused} (mb.backlog) */
	void (*backlog)(void *ud, uint64_t out[3]);
} mb_host_io;

/// Creates the host state and loads lua/mcp/server.lua from the embedded modules.
/// @returns the host or NULL (message logged)
mb_host *mb_host_new(const mb_config *cfg, const mb_host_io *io, const mb_host_deps *deps);

/// Gives the host the pool it submits executions to.
void mb_host_set_pool(mb_host *h, mb_pool *pool);

/// Gives the host the PII detector and key (mb.pii_scan, mb.pii_sanitize, mb.pii_token) when
/// they were not in its deps at creation (built on another thread meanwhile).
void mb_host_set_pii(mb_host *h, const struct mb_pii_detector *pii, const unsigned char *key);

/// Gives the host the execution log (history.h); before that mb.history_add does nothing.
struct mb_history;
void mb_host_set_history(mb_host *h, struct mb_history *history);

/// Handles one incoming line (a JSON-RPC message, or garbage that gets an error) on stdio:
/// session 1, no exchange, tenant "default".
void mb_host_handle_line(mb_host *h, const char *line, size_t len);

/// Handles one message of a session (HTTP; session 0 = a sessionless 2026-07-28 request). Messages
/// for it go out through io.send with this exchange; the last one has final set. version, method
/// and name are the MCP-Protocol-Version, Mcp-Method and Mcp-Name headers, params the
/// Mcp-Param-<Name> ones as "Name:value" lines (NULL when absent), which the protocol layer
/// checks against the body. principal and rights (NULL unless an OAuth access token
/// authenticated the request): its sub and the rights its scopes grant ("execute skills admin"
/// or a subset), which lua/mcp/server.lua enforces (docs/auth.md).
/// @returns 1 when the host answered or will answer on this exchange (a request, or an error
///          about the message), 0 when it will not (a notification, a client's response)
int mb_host_handle_message(mb_host *h, uint64_t session, uint64_t exchange, const char *tenant,
			   const char *body, size_t len, const char *version, const char *method,
			   const char *name, const char *params, const char *principal, const char *rights);

/// The connection of a sessionless exchange closed before its answer: the request is cancelled.
void mb_host_exchange_closed(mb_host *h, uint64_t exchange);
/* A request that presented a token was refused (http.h on_auth_failed): on_auth_failed(why, peer). */
void mb_host_auth_failed(mb_host *h, const char *why, const char *peer);

/// The transport ended a session: its executions are cancelled and its state dropped.
void mb_host_end_session(mb_host *h, uint64_t session);

/// Reports a discarded over-long line to the client, under its id when the transport found one
/// (id: the JSON text of a string or an integer, id_len bytes; NULL when none).
void mb_host_handle_oversize(mb_host *h, size_t bytes, const char *id, size_t id_len);

/// Pool callbacks (loop thread).
void mb_host_job_notify(mb_host *h, uint64_t job, mb_notify_kind kind, int level, const char *json,
			size_t len);
void mb_host_job_call(mb_host *h, uint64_t job, uint64_t seq, const char *name, const char *args,
		      size_t len);
void mb_host_job_done(mb_host *h, uint64_t job, const mb_exec_result *res);

/// Requests still being handled (suspended coroutines).
size_t mb_host_inflight(mb_host *h);

/// Prometheus text the host Lua adds to /metrics (the global `metrics_text`: upstream servers).
/// @returns a malloc'd NUL-terminated string the caller frees, or NULL when there is none
char *mb_host_metrics(mb_host *h);

/// Stops timers and watchers, flushes buffered history, ends upstream servers (children get
/// SIGTERM, then SIGKILL after upstream_shutdown_grace_ms; HTTP sessions get a DELETE that may
/// run for at most min(upstream_shutdown_grace_ms, 2000) ms on a timer inside the host). The
/// caller must then run the loop until its handles are closed, and only then mb_host_free.
void mb_host_shutdown(mb_host *h);

/// Runs a full garbage collection of the host state: what a large answer left (its result text,
/// the raw values around it) is freed now rather than at the next allocation that starts a
/// cycle, which in an idle server may be never (server.c calls it after large messages).
/// @param h the host
void mb_host_collect(mb_host *h);

/// The host's Lua state, for tests that call its modules directly (loop thread only).
lua_State *mb_host_state(mb_host *h);

/// Closes the host state.
void mb_host_free(mb_host *h);

#endif
