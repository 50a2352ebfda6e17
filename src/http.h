/* http.h - the Streamable HTTP transport (MCP 2025-11-25) on the libuv loop.
 *
 * One endpoint, /mcp, plus /healthz and /metrics. The transport owns everything HTTP: parsing
 * (http-parser), keep-alive and pipelining, limits, Host/Origin checks, bearer tokens and
 * tenants, sessions (Mcp-Session-Id) and their idle expiry, and the choice between a JSON and an
 * SSE response. The host sees only JSON-RPC messages tagged with a session and an exchange:
 *
 *   - A POST on a session becomes one on_message call with a fresh exchange number. If the host
 *     returns 1 it answers on that exchange with mb_http_send: the first message decides the
 *     response type (final first: one application/json body; non-final first: text/event-stream,
 *     one `event: message` per mb_http_send, closed after the final one). If it returns 0 the
 *     client gets 202 Accepted at once.
 *   - An `initialize` request without Mcp-Session-Id creates a session before on_message; its id
 *     (64 lowercase hex characters from randombytes_buf, after "<replica_id>." when that option is
 *     set) goes back in the Mcp-Session-Id header
 *     of the response. If the host's final answer to it is a JSON-RPC error, the session is
 *     ended again (on_session_end) and no header is sent.
 *   - A POST of the 2026-07-28 revision (an MCP-Protocol-Version that is not a 2025 one, or a
 *     request other than initialize without Mcp-Session-Id) has no session: on_message gets
 *     session 0 and the headers the host must check against the body (mb_http_req). Closing
 *     its connection before the final message is its cancellation (on_exchange_closed). GET and
 *     DELETE with such a version get 405.
 *   - GET /mcp opens the session's server-to-client SSE stream (exchange 0 messages). One per
 *     session: a second GET while one is open gets 409. DELETE ends the session (204).
 *   - Resumption (http_replay_bytes > 0, the default). Every SSE stream of a session gets event
 *     ids "<tag>-<stream>-<seq>" (tag: 8 random hex digits per session) and, when the request's
 *     MCP-Protocol-Version is 2025-11-25 or later, a priming event (id, `retry: 1000`, empty
 *     data) first. Its events are kept, within http_replay_bytes per session. A POST whose
 *     connection closes before the final message is not dropped: the exchange stays (parked)
 *     and the host's later messages for it are kept; so are messages for a session whose GET
 *     stream broke. A GET with Last-Event-ID replays what followed that event on its stream and
 *     goes on live (a POST's stream ends after its final message; the session's GET stream takes
 *     its place again); 204 when the stream has ended and nothing is left. The host never hears
 *     of disconnects (a disconnect is not a cancellation); a parked exchange is bounded by its
 *     session's idle expiry.
 *   - A session ends on DELETE, on idle expiry (http_session_idle_ms without a request, while it
 *     has no open GET stream and no unanswered exchange that still has its connection), when the
 *     host's initialize answer is an error, and in mb_http_close. Each end calls on_session_end
 *     exactly once; afterwards the id answers 404.
 *
 * Status codes: 400 bad request (malformed HTTP, missing Mcp-Session-Id, bad
 * MCP-Protocol-Version, duplicate Host, a Last-Event-ID not of this server's form...), 401
 * missing/wrong token (WWW-Authenticate: Bearer), 403 Host/Origin not allowed, 404 unknown path
 * or unknown/expired/other tenant's session, 405 other methods (with Allow), 406 Accept lacks
 * application/json or text/event-stream (both needed on POST, text/event-stream on GET;
 * wildcards do not count), 408 request not read within http_read_timeout_ms, 409 second GET
 * stream, or a Last-Event-ID that cannot be resumed (another session's, forgotten, or its
 * events dropped; resumption off), 413 body above http_max_body_bytes, 414 URL above
 * 2048 bytes, 415 Content-Type not application/json, 431 headers above http_max_header_bytes,
 * 503 http_max_sessions or http_max_connections reached. Error bodies are JSON-RPC errors with
 * id null (-32000; -32001 for an unknown session; -32700 for a sessionless body that is not
 * JSON).
 *
 * Ownership and threads: everything here runs on the loop thread that owns `loop` (callbacks
 * included); no function may be called from another thread. `cfg` must outlive the transport.
 * The body and tenant passed to on_message are valid only during the call. mb_http_send takes
 * ownership of `data` in every case (it is freed when written or dropped). Callbacks may call
 * mb_http_send (also for the exchange being delivered) but not mb_http_close.
 */
#ifndef MB_HTTP_H
#define MB_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"

typedef struct mb_http mb_http;

/* What the transport read from a POST's headers for the host (values NUL-terminated, trimmed,
 * `=?base64?...?=` decoded; NULL when the header was absent). session is 0 for a sessionless
 * request of the 2026-07-28 revision (no Mcp-Session-Id; the host answers every request on its
 * own exchange and checks the headers against the body). */
typedef struct mb_http_req {
	const char *protocol_version; /* MCP-Protocol-Version */
	const char *method;           /* Mcp-Method */
	const char *name;             /* Mcp-Name */
	const char *params;           /* every Mcp-Param-<Name>: "Name:value" lines (not decoded) */
	int sessionless;
	/* an OAuth access token's principal (docs/auth.md); both NULL for a static token or none */
	const char *principal;        /* its sub (printable ASCII) */
	const char *rights;           /* what its scopes grant: "execute skills admin", a subset, or "" */
} mb_http_req;

typedef struct mb_http_callbacks {
	/* A JSON-RPC message (the POST body, already size-checked, UTF-8 not validated, followed
	 * by a NUL not counted in len) for a session. exchange identifies this POST: every message
	 * the host sends with that exchange goes back on this POST's response (SSE events, or the
	 * single JSON body), and the one sent with final=1 ends it. Returns 1 when the host will
	 * answer on this exchange (a request), 0 when it will not (a notification or a client's
	 * response): then the transport answers 202 at once (unless a final message was already
	 * sent during the call). `initialize` arrives with a session the transport just created.
	 * tenant is the tenant of the token that authenticated the request ("default" without
	 * tokens); it is always the session's tenant. */
	int (*on_message)(void *ud, uint64_t session, uint64_t exchange, const char *tenant,
			  const char *body, size_t len, const mb_http_req *req);
	/* Optional: a sessionless (2026-07-28) exchange's connection closed before the host's
	 * final message: the client cancelled that request (the spec's cancellation signal). */
	void (*on_exchange_closed)(void *ud, uint64_t exchange);
	/* The session ended (DELETE, idle expiry, failed initialize, server shutdown): the host
	 * drops its state. Messages sent to it afterwards are dropped. */
	void (*on_session_end)(void *ud, uint64_t session);
	/* Optional (may be NULL): more Prometheus text appended to /metrics (executions, sandbox
	 * memory...). The text is copied at once; it must stay valid until the next call. NULL
	 * return = nothing to add. */
	const char *(*metrics_extra)(void *ud);
	/* Optional: a request that presented a token was refused (why: what was wrong with it;
	 * peer: the client's address, "" when unknown). Never given the token. */
	void (*on_auth_failed)(void *ud, const char *why, const char *peer);
	void *ud;
} mb_http_callbacks;

/* Request counters are kept per method and status class below. */
#define MB_HTTP_NMETHODS 6   /* GET POST DELETE OPTIONS HEAD other */
#define MB_HTTP_NSTATUS 18   /* the codes listed by mb_http_status_code, last = other */

typedef struct mb_http_stats {
	uint64_t requests[MB_HTTP_NMETHODS][MB_HTTP_NSTATUS];
	uint64_t requests_total;
	uint64_t connections_active;
	uint64_t connections_total;     /* accepted since start */
	uint64_t connections_rejected;  /* beyond http_max_connections */
	uint64_t sessions_active;
	uint64_t sessions_created;
	uint64_t sessions_expired;      /* ended by idle expiry */
	uint64_t sessions_deleted;      /* ended by DELETE */
	uint64_t streams_active;        /* open GET streams (a session's, or a resumed POST's) */
	uint64_t exchanges_active;      /* POSTs waiting for the host's final message */
	uint64_t exchanges_detached;    /* ... of which lost their connection (kept for a resume) */
	uint64_t streams_resumed;       /* GETs with Last-Event-ID that replayed a stream */
	uint64_t replay_bytes;          /* kept for resumption, all sessions (http_replay_bytes each) */
	uint64_t replay_dropped;        /* events dropped from a replay buffer over its bound */
	uint64_t messages_dropped;      /* host messages for a gone exchange/session/stream */
	uint64_t read_timeouts;         /* connections cut by http_read_timeout_ms */
	uint64_t auth_failures;         /* 401 answers */
	uint64_t bytes_in, bytes_out;
	uint64_t backlog_bytes;         /* message bytes queued for clients that have not read them */
	uint64_t backlog_peak;          /* the most backlog_bytes has been (never above max_backlog_bytes) */
	uint64_t backlog_refused;       /* messages not sent: the backlog would pass max_backlog_*bytes */
} mb_http_stats_t;

/// Starts listening on cfg->http_listen ("[host:]port"; host an IPv4/IPv6 literal or
/// localhost, default 127.0.0.1; port 0 picks a free one, see mb_http_address).
/// Refuses a non-loopback address without http_tokens unless http_trust_proxy=1.
/// @param loop the loop all callbacks run on
/// @param cfg  options (http_*, max_message_bytes); must outlive the transport
/// @param cb   callbacks, copied
/// @param err  receives a message naming the option and value on failure
/// @param errlen size of err
/// @returns the transport, or NULL (nothing left on the loop)
mb_http *mb_http_start(uv_loop_t *loop, const mb_config *cfg, const mb_http_callbacks *cb,
		       char *err, size_t errlen);

/// Sends one host message to a client. exchange != 0: on that POST's response (final=1 ends
/// it; session, when not 0, must match the exchange's), or kept for a resume when the POST's
/// SSE answer lost its connection. exchange 0: to the session's GET stream (kept for a resume
/// while it is broken), else dropped; session 0 with exchange 0 = to every session's GET stream.
/// Messages for a finished exchange or a gone session are dropped silently.
/// @param status the HTTP status of a final message sent as the whole (JSON) response; 0 =
///               200 (an SSE response has already sent its 200)
/// A message that would take the backlog (bytes queued for clients that have not read them)
/// above max_backlog_bytes, or its tenant's above max_backlog_tenant_bytes, is not sent
/// (counted in backlog_refused): the host may send a short error in its place. A refused final
/// message too short to be replaced (MB_HTTP_BACKLOG_SHORT bytes or less) closes its exchange's
/// connection, so no exchange waits for an answer that cannot come.
/// @param data malloc'd JSON text (trailing newline allowed); ownership is taken in all cases
/// @param len  its length
/// @param err  receives the reason when refused (may be NULL)
/// @returns 0 (sent, kept or dropped as above), or -ENOBUFS: refused for the backlog
int mb_http_send(mb_http *h, uint64_t session, uint64_t exchange, int final, int status,
		 char *data, size_t len, char *err, size_t errlen);

/* A refused final message of at most this many bytes is not replaced: its connection closes. */
#define MB_HTTP_BACKLOG_SHORT 2048

/// Copies the counters (for /metrics and get_execution_stats).
void mb_http_stats(mb_http *h, mb_http_stats_t *out);

/// The method label of a requests[] row ("GET", ..., "other").
const char *mb_http_method_name(int i);

/// The status code of a requests[] column (0 for the last, "other").
int mb_http_status_code(int i);

/// The address actually bound, e.g. "127.0.0.1:41234" or "[::1]:8080".
/// @returns the port, or -1
int mb_http_address(mb_http *h, char *buf, size_t len);

/// Stops listening, closes every connection (unanswered exchanges, parked ones too, are dropped), ends every
/// session (on_session_end for each, synchronously) and frees the transport once its handles
/// are closed: run the loop afterwards (uv_run) before uv_loop_close. h must not be used after.
void mb_http_close(mb_http *h);

#endif
