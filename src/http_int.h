/* http_int.h - internals shared by the files of the HTTP transport: http_conn.c (connections,
 * parsing, writes, responses), http_session.c (sessions, exchanges, SSE, resumption), http.c
 * (routing, the sweep, the public API), http_replay.c (the per-session replay buffer behind SSE
 * event ids and Last-Event-ID), http_auth.c (listen address, tokens, Host/Origin/CORS
 * allow-lists) and http_metrics.c (Prometheus text). Not for other modules; tests may use it.
 * Everything runs on the loop thread; a policy is read-only after mb_http_policy_init.
 *
 * The server's files depend one way: http.c on http_session.c on http_conn.c on http_replay.c,
 * all four on http_auth.c and http_metrics.c. The small helpers below (hash table, head builder,
 * hval, session_by_num) are static inline so that each file has its own.
 */
#ifndef MB_HTTP_INT_H
#define MB_HTTP_INT_H

#include <errno.h>
#include <http_parser.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "auth_oauth.h"
#include "config.h"
#include "http.h"

#define MB_HTTP_HASH_BYTES 32      /* BLAKE2b-256 of a token, keyed per process */
#define MB_HTTP_TENANT_MAX 64      /* tenant names: [A-Za-z0-9_.-]{1,64} */
#define MB_HTTP_TOKEN_MIN 16
#define MB_HTTP_TOKEN_MAX 512

typedef struct mb_http_token {
	unsigned char hash[MB_HTTP_HASH_BYTES];
	char tenant[MB_HTTP_TENANT_MAX + 1];
	uint32_t slot;                 /* its tenant's backlog counter (mb_http.tenants; set by http.c) */
} mb_http_token;

/* A comma-separated list split into lower-cased entries; any = it contained "*". */
typedef struct mb_http_list {
	char **v;
	size_t n;
	int any;
} mb_http_list;

typedef struct mb_http_policy {
	unsigned char key[32];         /* random key for token hashes (never leaves memory) */
	mb_http_token *tokens;         /* NULL when no tokens: tenant "default", no auth */
	size_t ntokens;
	mb_http_list hosts;            /* http_allowed_hosts */
	mb_http_list origins;          /* http_allowed_origins */
	mb_http_list cors;             /* http_cors_origin */
	char bound_host[64];           /* the bound IP literal (also an allowed Host), or "" */
} mb_http_policy;

/// Parses "[host:]port" ("8080", ":8080", "127.0.0.1:8080", "[::1]:8080", "localhost:8080").
/// @param spec    the http_listen value
/// @param ss      receives the address
/// @param loopback receives 1 for 127.0.0.0/8 or ::1
/// @returns 0 or -EINVAL with err naming the value
int mb_http_parse_listen(const char *spec, struct sockaddr_storage *ss, int *loopback, char *err,
			 size_t errlen);

/// Builds the policy from cfg (tokens hashed, lists split). bound is the IP literal listened on.
/// @returns 0 or -EINVAL / -ENOMEM with err naming the option
int mb_http_policy_init(mb_http_policy *p, const mb_config *cfg, const char *bound, char *err,
			size_t errlen);
void mb_http_policy_free(mb_http_policy *p);

/// Host header check: loopback names (localhost, 127.0.0.1, [::1]) with any port, the bound
/// literal, and http_allowed_hosts entries (name = any port, name:port = that port).
int mb_http_host_allowed(const mb_http_policy *p, const char *host, size_t len);

/// Origin header check: http(s) origins on loopback names, http_allowed_origins and
/// http_cors_origin entries (exact, case-insensitive), or "*".
int mb_http_origin_allowed(const mb_http_policy *p, const char *origin, size_t len);

/// Whether CORS headers are sent for this (already allowed) origin.
int mb_http_cors_allowed(const mb_http_policy *p, const char *origin, size_t len);

/// Authenticates an Authorization header value (NULL when absent).
/// @returns the tenant name (owned by the policy, or the static "default" when no tokens are
///          configured), or NULL: missing or wrong token
const char *mb_http_authenticate(const mb_http_policy *p, const char *authz, size_t len);

/// The WWW-Authenticate line (with CRLF) of a 403 the host chose for an OAuth request: the
/// scope comes from the answer's error.data.scope (insufficient_scope, RFC 6750 section 3.1).
/// @returns 0 with out filled, -1 when json carries no scope
int mb_http_scope_challenge(const mb_oauth *o, const char *json, size_t len, char *out, size_t cap);

/// Index of a status code in mb_http_stats_t.requests columns (last = other).
int mb_http_status_index(int status);

/// Renders the Prometheus text for st plus extra (may be NULL).
/// @returns malloc'd text or NULL when out of memory; *len its length
char *mb_http_metrics_render(const mb_http_stats_t *st, const char *extra, size_t *len);

/* ---- the server (http_conn.c, http_session.c, http.c) -------------------------------------- */

#define URL_MAX 2048
#define HEAD_MAX 1536

#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

/* ---- a small intrusive hash table of uint64 keys ------------------------------------------ */

typedef struct hnode {
	uint64_t key;
	struct hnode *next;
} hnode;

typedef struct htab {
	hnode **b;
	size_t mask, n;
} htab;

static inline size_t hslot(const htab *t, uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (size_t)k & t->mask;
}

static inline int htab_init(htab *t, size_t buckets)
{
	t->b = calloc(buckets, sizeof *t->b);
	t->mask = buckets - 1;
	t->n = 0;
	return t->b ? 0 : -ENOMEM;
}

static inline void htab_grow(htab *t)
{
	size_t nb = (t->mask + 1) * 2;
	hnode **b = calloc(nb, sizeof *b);
	if (!b)
		return; /* longer chains, still correct */
	htab old = *t;
	t->b = b;
	t->mask = nb - 1;
	for (size_t i = 0; i <= old.mask; i++)
		for (hnode *x = old.b[i], *next; x; x = next) {
			next = x->next;
			size_t s = hslot(t, x->key);
			x->next = t->b[s];
			t->b[s] = x;
		}
	free(old.b);
}

static inline void htab_put(htab *t, hnode *x)
{
	if (t->n >= t->mask + 1)
		htab_grow(t);
	size_t s = hslot(t, x->key);
	x->next = t->b[s];
	t->b[s] = x;
	t->n++;
}

static inline hnode *htab_get(const htab *t, uint64_t key)
{
	for (hnode *x = t->b[hslot(t, key)]; x; x = x->next)
		if (x->key == key)
			return x;
	return NULL;
}

static inline void htab_del(htab *t, hnode *x)
{
	for (hnode **pp = &t->b[hslot(t, x->key)]; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			t->n--;
			return;
		}
}

/* ---- types ----------------------------------------------------------------------------------- */

enum { H_HOST, H_ORIGIN, H_ACCEPT, H_CTYPE, H_AUTH, H_SESSION, H_PROTO, H_EXPECT, H_MMETHOD, H_MNAME,
       H_MPARAM, H_LASTID, NHDR };

typedef struct hvals {
	char host[256], origin[256], accept[512], ctype[128], session[128], proto[64],
		expect[64], mmethod[128], mname[1024];
	char mparam[1024]; /* every Mcp-Param-<Name> header, as "Name:value" lines (SEP-2243) */
	char lastid[80];
	char auth[8200]; /* OAuth access tokens (JWTs) run to several KiB (Keycloak: 1-3 KiB) */
} hvals;

/* The headers the transport reads, and where each one's value lives in hvals (http_conn.c). */
typedef struct mb_http_hdr {
	const char *name;
	size_t off, cap;
} mb_http_hdr;

extern const mb_http_hdr mb_http_hdr_def[NHDR];

/* C_AUTH: the request is complete, its token waits for the issuer's keys (auth_oauth.h) */
enum { C_IDLE, C_READING, C_BUSY, C_STREAM, C_DRAIN, C_CLOSED, C_AUTH };
enum { R_NONE, R_HEALTH, R_METRICS, R_MCP, R_OPTIONS, R_NOTFOUND, R_PRM /* RFC 9728 metadata */ };
enum { M_GET, M_POST, M_DELETE, M_OPTIONS, M_HEAD, M_OTHER };
struct mb_http_later {
	int kind; /* END_LATER, CLOSED_LATER */
	uint64_t v;
};
enum { END_LATER, CLOSED_LATER };
#define MB_HTTP_SESSIONLESS UINT64_MAX /* xsession of an exchange without a session */

enum { END_DELETE, END_EXPIRED, END_INIT_FAILED, END_SHUTDOWN };

typedef struct session session;
typedef struct conn conn;
typedef struct rstream rstream;
typedef struct revent revent;

/* ---- the replay buffer (http_replay.c) ------------------------------------------------------- */

/* A session id: "<replica_id>." when replica_id is set (at most MB_REPLICA_ID_MAX characters
 * of [A-Za-z0-9_-], config.c), then 32 random bytes as 64 hex digits. */
#define MB_HTTP_SESSION_ID_MAX (MB_REPLICA_ID_MAX + 1 + 64)
#define MB_HTTP_EVENT_ID_MAX 64    /* "<8 hex>-<stream>-<seq>" and its NUL */
#define MB_HTTP_SSE_RETRY_MS 1000  /* the retry: field of a priming event */

/* One kept event: a copy of the host's message. */
struct revent {
	revent *sprev, *snext; /* the session's kept events, oldest first */
	revent *next;          /* the stream's, oldest first */
	rstream *rs;
	uint64_t seq;
	size_t len;
	char data[];
};

/* One SSE stream of a session, as far as a resume needs it. The priming event has seq 0, the
 * host's messages 1, 2, ...; every event with seq <= dropped_to is gone (evicted, or too large to
 * keep), every later one is kept. */
struct rstream {
	rstream *prev, *next;  /* the session's streams, oldest first */
	hnode xnode;           /* in mb_http.parked (key: exchange) while parked */
	session *s;
	conn *c;               /* the connection writing it, or NULL */
	uint64_t num;          /* 1, 2, ... within the session */
	uint64_t exchange;     /* the POST's exchange; 0 for a GET stream */
	uint64_t next_seq;
	uint64_t dropped_to;
	revent *head, *tail;
	uint64_t idle_since;   /* when it last lost its connection or got its last event */
	int done;              /* the last event is recorded (final message; a GET stream superseded) */
	int parked;            /* its exchange lost its POST connection and waits for its final message */
};

typedef struct replay {
	rstream *first, *last;
	size_t n;
	revent *ev_first, *ev_last;
	size_t bytes;          /* kept messages plus their bookkeeping (sizeof(revent) each) */
	uint64_t next_num;
	rstream *get;          /* the GET stream's record (the newest one) */
	char tag[9];           /* 8 random hex digits that start every event id of the session */
} replay;

struct session {
	hnode by_num, by_id;
	session *prev, *next;
	unsigned char raw[32];
	char id[MB_HTTP_SESSION_ID_MAX + 1]; /* "<replica_id>." (when set) and raw as 64 hex digits */
	uint64_t num;
	char tenant[MB_HTTP_TENANT_MAX + 1];
	uint64_t last_used;
	conn *stream;       /* the open GET stream */
	uint32_t exchanges; /* unanswered POSTs that still have their connection */
	uint32_t resumed;   /* open GETs that resumed a POST's stream (Last-Event-ID) */
	replay rp;
};

struct conn {
	uv_tcp_t tcp;
	mb_http *h;
	conn *prev, *next;
	conn *drive_next; /* in h->drive queue */
	int drive_queued;
	http_parser p;
	int state;
	int in_parse;
	int reading;
	int close_after; /* shut down once queued writes are done */
	int shut;        /* shutdown requested */
	size_t writes;   /* uv_write requests in flight */
	uint32_t tslot;  /* the tenant of its current request: its backlog counter (mb_http.tenants);
			  * set with mb_http_set_slot, which counts the conns on an OAuth tenant's */
	uint32_t oslot;  /* the OAuth tenant slot of its last request (where the search starts) */
	uint64_t deadline;
	size_t wq_last;    /* output queue size at wq_since (stall detection) */
	uint64_t wq_since;
	uv_shutdown_t shutreq;
	/* the request being parsed */
	int method, have_method, route;
	int reject, reject_rpc, fatal, err_status;
	const char *reject_hdr; /* extra header lines for the rejection (static text) */
	char msg[320];
	int keep_alive, http10, cors, expect_continue, has_body;
	size_t hbytes;
	char url[URL_MAX + 1];
	size_t url_len;
	int url_over;
	char fname[24];
	size_t flen;
	int fover, fidx, in_value;
	int value_ended;      /* the current header value's line ended (its CR or LF was seen) */
	const char *exec_end; /* end of the bytes given to the running http_parser_execute */
	hvals hv;
	uint16_t hlen[NHDR];
	uint8_t hcount[NHDR], hover[NHDR];
	const char *tenant;
	uint64_t sess_num;
	/* OAuth (h->oauth): the principal of the current request's token */
	int oauth;           /* authenticated by an OAuth access token (not a static token) */
	unsigned rights;     /* MB_RIGHT_* of that token */
	int auth_wait;       /* its token waits for the issuer's keys or an introspection (aw queued) */
	mb_oauth_waiter aw;
	char otenant[MB_OAUTH_TENANT_MAX + 1], osub[MB_OAUTH_SUB_MAX + 1];
	char auth_hdr[1024]; /* a WWW-Authenticate line built for this request (reject_hdr points here) */
	char *body;
	size_t blen, bcap;
	/* the exchange in flight (C_BUSY) */
	hnode xnode;
	uint64_t xsession;   /* its session, MB_HTTP_SESSIONLESS for a 2026-07-28 request, 0 = none */
	int xinit, xsse;
	int xstatus;         /* the HTTP status the host chose for a JSON answer (0 = 200) */
	int modern;          /* this POST goes the 2026-07-28 way: no session */
	/* the GET stream (C_STREAM): the session's, or a POST's stream resumed with Last-Event-ID */
	uint64_t ssession;
	/* the replay record of the SSE stream this connection writes (an SSE answer, a GET stream),
	 * or NULL (JSON answers; resumption off) */
	rstream *rs;
	/* input read ahead */
	char *pend;
	size_t poff, plen, pcap;
};

typedef struct wreq {
	uv_write_t req;
	struct wreq *next;
	conn *c;
	char *own;
	size_t own_len;   /* the message bytes own holds */
	size_t qbytes;    /* of them, counted in the backlog while queued (0: none) */
	uint32_t qslot;   /* the tenant counter they are counted in */
	uv_buf_t bufs[3];
	char head[HEAD_MAX];
} wreq;

struct mb_http {
	uv_loop_t *loop;
	const mb_config *cfg;
	mb_http_callbacks cb;
	mb_http_policy pol;
	mb_oauth *oauth;       /* the OAuth resource server, or NULL (oauth_issuer not set) */
	uint32_t oauth_slot;   /* the backlog counter OAuth tenants share when theirs are all taken */
	uint32_t oauth_first;  /* tenants[oauth_first..ntenants): one OAuth tenant's each, when in use */
	uv_tcp_t listener;
	uv_timer_t sweeper;
	uv_idle_t deferred;
	int handles;
	int closing;
	char addr[80];
	int port;
	size_t max_body, max_header;
	uint64_t read_timeout, idle_ms, tick;
	conn *conns;
	size_t nconns;
	session *sessions;
	htab by_num, by_id, exchanges;
	htab parked;          /* exchanges whose POST connection closed first: exchange -> rstream */
	size_t replay_max;    /* http_replay_bytes per session; 0 = no event ids, no resumption */
	size_t replay_total_max; /* http_replay_total_bytes: all sessions together */
	uint64_t replay_keep; /* ms a finished stream without a connection stays resumable */
	uint64_t next_session, next_exchange;
	uint64_t next_session_sweep, next_heartbeat;
	conn *drive;          /* conns with pipelined input to parse */
	struct mb_http_later *ended; /* on_session_end / on_exchange_closed calls deferred */
	size_t nended, ended_cap;
	wreq *free_w;
	size_t nfree_w;
	/* the backlog: message bytes queued for clients that have not taken them (max_backlog_bytes;
	 * per tenant max_backlog_tenant_bytes), counted while a write request holds them */
	size_t backlog_max, backlog_tenant_max;
	struct mb_http_tenant_backlog {
		char name[MB_HTTP_TENANT_MAX + 1];
		size_t bytes;
		uint32_t conns; /* OAuth slots: conns whose request is this tenant's (0 and no
				 * bytes: free for another tenant) */
	} *tenants;            /* slot 0: "default" (no tokens); one per tenant of http_tokens; the
			        * shared OAuth slot; then oauth_backlog_tenants OAuth tenants' */
	size_t ntenants;
	mb_http_stats_t st;
	char date[40];
	time_t date_sec;
	http_parser_settings settings;
	char rbuf[65536];
};

/* ---- small helpers --------------------------------------------------------------------------- */

/* A response head (or a short body) built in a fixed buffer. */
typedef struct hb {
	char *p;
	size_t n, cap;
} hb;

static inline void hb_put(hb *b, const char *s, size_t n)
{
	if (n > b->cap - b->n)
		n = b->cap - b->n; /* cannot happen with the transport's bounded inputs; truncate if it does */
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
}

static inline void hb_str(hb *b, const char *s)
{
	hb_put(b, s, strlen(s));
}

static inline void hb_u64(hb *b, uint64_t v, int hex)
{
	char t[24];
	int i = sizeof t;
	do {
		t[--i] = "0123456789abcdef"[v % (hex ? 16 : 10)];
		v /= hex ? 16 : 10;
	} while (v);
	hb_put(b, t + i, sizeof t - (size_t)i);
}

static inline const char *hval(conn *c, int i)
{
	return (const char *)&c->hv + mb_http_hdr_def[i].off;
}

static inline session *session_by_num(mb_http *h, uint64_t num)
{
	hnode *x = num ? htab_get(&h->by_num, num) : NULL;
	return x ? container_of(x, session, by_num) : NULL;
}

/* ---- http_replay.c: stream records, kept events, their bounds -------------------------------- */

/// Draws the session's event-id tag (before any stream is opened).
void mb_http_replay_init(session *s);

/// A new stream record of s: for a POST's SSE answer (exchange != 0) or a GET stream (0: it
/// becomes s->rp.get; the previous GET record is done). Beyond the per-session count, the oldest
/// record without a connection is forgotten first (a finished one before a parked one).
/// @returns the record, or NULL: resumption off, out of memory, or every record has a connection
rstream *mb_http_replay_open(mb_http *h, session *s, uint64_t exchange);

/// Gives the next event of r its sequence number and keeps a copy of data (the oldest events of
/// the session are dropped while the session is over http_replay_bytes; one larger than that is
/// not kept at all, nor one that would take all sessions together over http_replay_total_bytes
/// once the session's own older events are gone). last: the stream ends with this event.
/// @returns the event's sequence number
uint64_t mb_http_replay_add(mb_http *h, rstream *r, const char *data, size_t len, int last);

/// Formats the id of event seq of r into id (MB_HTTP_EVENT_ID_MAX bytes).
void mb_http_replay_id(const rstream *r, uint64_t seq, char *id);

/// Finds the stream and position a Last-Event-ID names in s.
/// @returns 0 (*out, *seq set: every event after seq is kept), -EINVAL (not an id of this
///          server's form), -ENOENT (no stream of s has that event: another session's id, a
///          forgotten stream, an event never sent) or -ERANGE (events after it were dropped)
int mb_http_replay_find(session *s, const char *id, size_t len, rstream **out, uint64_t *seq);

/// The connection writing r stops doing so (it closed, or r's response ended): r->c and its
/// conn's rs are cleared and r's idle time starts.
void mb_http_replay_release(mb_http *h, rstream *r);

/// r's exchange lost its POST connection before its final message: it goes into h->parked, so
/// that the host's later messages are kept for a resume (exchanges_detached).
void mb_http_replay_park(mb_http *h, rstream *r);

/// r's parked exchange ends (its final message is recorded, or r is forgotten): out of h->parked,
/// and out of exchanges_active.
void mb_http_replay_unpark(mb_http *h, rstream *r);

/// The parked exchange's record, or NULL.
rstream *mb_http_replay_parked(mb_http *h, uint64_t exchange);

/// Frees r and its events (a parked exchange ends: the host's later messages are dropped). A
/// connection still writing r goes on without event ids.
void mb_http_replay_forget(mb_http *h, rstream *r);

/// Forgets s's finished streams that have had no connection for h->replay_keep ms.
void mb_http_replay_sweep(mb_http *h, session *s, uint64_t now);

/// Forgets every stream of s (the session ends).
void mb_http_replay_free(mb_http *h, session *s);

/* ---- http_conn.c: writes, responses, the parser's callbacks, connections --------------------- */

/// A write request for c from the free list (or malloc'd).
/// @returns the request, or NULL when out of memory
wreq *mb_http_wreq_get(mb_http *h, conn *c);

/// Frees what w owns and returns it to the free list.
void mb_http_wreq_put(mb_http *h, wreq *w);

/// Queues w (bufs[0..n)). On failure the connection is closed; w and its buffer are freed.
void mb_http_wreq_send(conn *c, wreq *w, unsigned n);

/// Writes a response head (or any bytes up to HEAD_MAX) on c; closes c when out of memory.
void mb_http_write_head(conn *c, const char *head, size_t n);
/// c stops being a stream (C_STREAM): off its session (the GET stream, or a resumed one), counted.
void mb_http_stream_detach(conn *c);
/// Counts a response with this status in the request counters.
void mb_http_count(conn *c, int status);

/// The status line and the headers every response carries; then the headers that end a head.
void mb_http_head_start(conn *c, hb *b, int status, const char *ctype);
void mb_http_head_end(conn *c, hb *b);

/// Writes a whole response. body is copied when it fits beside the head, else (or when own is
/// set: then body == own) it is sent from own, which is taken.
void mb_http_respond(conn *c, int status, const char *ctype, const char *extra, const char *body,
		     size_t blen, char *own);

/// A JSON-RPC error response (id null) with msg, cut to fit.
void mb_http_respond_error(conn *c, int status, int rpc, const char *msg, const char *extra);

/// The response to the current request is queued: wait for the next one or close.
void mb_http_request_done(conn *c);

/// Answers the rejection recorded for the current request (c->reject).
void mb_http_answer_reject(conn *c);

/// Unregisters c's exchange (the host's later messages for it are dropped) and lets go of its
/// replay record (which stays resumable for a while).
void mb_http_exchange_finish(conn *c);

/// c's exchange, answered with SSE and resumable, loses its connection before the final message:
/// it stays registered, parked on its replay record (mb_http_replay_park), for a GET with
/// Last-Event-ID to pick up.
void mb_http_exchange_park(conn *c);

/// Records a request that cannot be parsed further (answered with status, then closed).
/// @returns -1, for a parser callback to return
int mb_http_bad(conn *c, int status, const char *fmt, const char *a);

/// http_parser callbacks that collect a request (mb_http_start installs them).
int mb_http_on_message_begin(http_parser *p);
int mb_http_on_url(http_parser *p, const char *at, size_t n);
int mb_http_on_header_field(http_parser *p, const char *at, size_t n);
int mb_http_on_header_value(http_parser *p, const char *at, size_t n);
int mb_http_on_body(http_parser *p, const char *at, size_t n);

/// Closes c now (its exchange is parked when resumable, else dropped; its GET stream detached from
/// the session and its replay record kept).
void mb_http_conn_close(conn *c);

/// Frees h once its last handle is closed.
void mb_http_maybe_free(mb_http *h);

/// Whether a message of len bytes for connection c fits in the backlog (the server's and c's
/// tenant's). A message that goes out at once is not counted, but the check is made before
/// writing, so a refused one is never partly sent.
/// @returns 0, or -ENOBUFS with err naming the limit that would be passed
int mb_http_backlog_admit(conn *c, size_t len, char *err, size_t errlen);

/// The tenant counter of an authenticated tenant name (mb_http_authenticate's result).
uint32_t mb_http_tenant_slot(const mb_http *h, const char *tenant);
/// The backlog counter of OAuth tenant `tenant`: its own (found, or a free one taken), else the
/// shared one when oauth_backlog_tenants are all in use.
uint32_t mb_http_oauth_slot(mb_http *h, conn *c, const char *tenant);
/// Sets the backlog counter of c's request (counting the conns on OAuth tenants' slots).
void mb_http_set_slot(conn *c, uint32_t slot);

/// Defers a host callback to the loop (never inside the host's own mb_http_send): kind END_LATER
/// (on_session_end of session v) or CLOSED_LATER (on_exchange_closed of exchange v).
void mb_http_later(mb_http *h, int kind, uint64_t v);
/// The idle callback that parses pipelined requests and tells the host of sessions whose end was
/// deferred.
void mb_http_on_deferred(uv_idle_t *idle);

/// The listener's connection callback.
void mb_http_on_connection(uv_stream_t *srv, int status);

/* ---- http_session.c: SSE, sessions, exchanges ------------------------------------------------ */

/// Writes one SSE event carrying data (taken), after head when given (the complete response
/// head), and the end of the stream when last. data NULL: a comment (heartbeat), or with last
/// just the end of the stream.
void mb_http_sse_write(conn *c, const char *head, size_t hlen, char *data, size_t len, int last);

/// mb_http_sse_write for an event with an id (NULL: none): "event: message", "id: ...", "data: ...".
void mb_http_sse_event(conn *c, const char *head, size_t hlen, const char *id, char *data, size_t len,
		       int last);

/// Builds the head of an SSE response into b (status 200).
void mb_http_sse_head(conn *c, hb *b, const char *extra);

/// Opens the replay record of the SSE stream c starts (exchange: c's POST, 0: a GET stream of s)
/// and appends its priming event (id, retry:, empty data) to the head in b when the request's
/// MCP-Protocol-Version is 2025-11-25 or later. Nothing when resumption is off.
void mb_http_stream_open(conn *c, session *s, uint64_t exchange, hb *b);

/// Sends a host message on c's SSE stream (after head, when given): recorded and with an id when
/// c has a replay record.
void mb_http_stream_send(conn *c, const char *head, size_t hlen, char *data, size_t len, int last);

/// Sends a host message for a parked exchange: recorded, and written to the GET that resumed it
/// (whose response ends with the final message).
void mb_http_parked_send(mb_http *h, rstream *r, int final, char *data, size_t len);

/// Sends a host message to s's GET stream: written when it has a connection; kept for a resume
/// when its record is live but its connection gone.
/// @returns 0, or -1 when it had nowhere to go (freed and counted as dropped)
int mb_http_session_push(mb_http *h, session *s, char *data, size_t len);

/// Whether mb_http_session_push has somewhere to put a message for s.
int mb_http_session_listens(const session *s);
/// The connection a message pushed to s (mb_http_session_push) is written on, or NULL when it
/// would only be kept for a resume or dropped.
conn *mb_http_session_writer(const session *s);

/// Answers a GET with Last-Event-ID on session s: replays the events after it on that stream,
/// then continues live (or ends the response when the stream has ended; 204 when nothing is
/// left), or a 400/409 JSON-RPC error.
void mb_http_resume(conn *c, session *s);

/// The session with this id ("<replica_id>." when set, then 64 hex digits), or NULL.
session *mb_http_session_by_id(mb_http *h, const char *hex, size_t len);

/// A new session of tenant, or NULL when out of memory.
session *mb_http_session_new(mb_http *h, const char *tenant);

/// Ends and frees s (how: END_*); its GET stream ends; on_session_end is called (later, from the
/// loop, for END_INIT_FAILED).
void mb_http_session_end(mb_http *h, session *s, int how);

/// Sends a host message on c's exchange: the JSON response when it is final and first, else an
/// SSE event (the first one switches the response to SSE). An error answer to `initialize` sent
/// as the JSON response ends the session it created (no Mcp-Session-Id goes out).
void mb_http_exchange_send(conn *c, int final, char *data, size_t len);

#endif
