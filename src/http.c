/* http.c - the Streamable HTTP server: connections, request parsing and routing, sessions,
 * exchanges and SSE.
 *
 * Connections. Each accepted socket is a `conn` with its own http_parser. Bytes are parsed
 * straight from one shared read buffer; only what a request needs is copied out: the URL, the
 * eight headers the transport looks at (fixed slots in the conn, bounded) and the body (a
 * per-connection buffer reused across requests). All header checks (Host, Origin, token, method,
 * Content-Type, Accept, protocol version, session) run at headers-complete, so a rejected
 * request's body is discarded, never buffered. The parser is paused after every request; while a
 * response is pending (an exchange, a GET stream) further pipelined bytes wait in conn->pend
 * (bounded; reading stops beyond it) and are parsed in order once the response ends, from an
 * idle handle rather than from inside the host's mb_http_send (so the host is never re-entered).
 * State machine: IDLE -> READING -> (answered at once -> IDLE | BUSY with an exchange | STREAM
 * for a GET) -> IDLE, or DRAIN (answer written, then shutdown, discard input until EOF) -> CLOSED.
 *
 * Exchanges and sessions. A POST on a session gets an exchange number registered in a hash
 * table (exchange -> conn); the host answers through mb_http_send, which looks the exchange up
 * and either writes one JSON response or switches to SSE (chunked). A conn that closes
 * unregisters its exchange, so late host messages are dropped. Sessions are found by the 32
 * random bytes of their id (hash table keyed by their first 8 bytes, full compare with
 * sodium_memcmp) and by number (for mb_http_send).
 *
 * Time. One repeating timer sweeps connections (read timeout, idle keep-alive, drain linger,
 * SSE heartbeats) and sessions (idle expiry); deadlines use uv_now.
 *
 * Writes. One uv_write per response or event with 1-3 iovecs: a head built in the write
 * request (from a free list, so a keep-alive request costs no allocation here) and the host's
 * buffer itself, freed when written.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_int.h"
#include "protocol.h"
#include "log.h"

#define URL_MAX 2048
#define PEND_MAX 65536            /* bytes read ahead while a response is pending */
#define WQ_PAUSE (1u << 20)       /* queued output above which pipelined requests wait */
#define WQ_MAX ((size_t)64 << 20) /* queued output above which a client that does not read is cut */
#define HEARTBEAT_MS 15000        /* SSE comment on GET streams, for proxies */
#define DRAIN_MS 2000             /* linger for a closing connection's unread input */
#define HEAD_MAX 1536
#define BODY_KEEP 65536           /* body buffer kept between requests up to this size */
#define FREE_WREQS 256

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

static size_t hslot(const htab *t, uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (size_t)k & t->mask;
}

static int htab_init(htab *t, size_t buckets)
{
	t->b = calloc(buckets, sizeof *t->b);
	t->mask = buckets - 1;
	t->n = 0;
	return t->b ? 0 : -ENOMEM;
}

static void htab_grow(htab *t)
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

static void htab_put(htab *t, hnode *x)
{
	if (t->n >= t->mask + 1)
		htab_grow(t);
	size_t s = hslot(t, x->key);
	x->next = t->b[s];
	t->b[s] = x;
	t->n++;
}

static hnode *htab_get(const htab *t, uint64_t key)
{
	for (hnode *x = t->b[hslot(t, key)]; x; x = x->next)
		if (x->key == key)
			return x;
	return NULL;
}

static void htab_del(htab *t, hnode *x)
{
	for (hnode **pp = &t->b[hslot(t, x->key)]; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			t->n--;
			return;
		}
}

/* ---- types ----------------------------------------------------------------------------------- */

enum { H_HOST, H_ORIGIN, H_ACCEPT, H_CTYPE, H_AUTH, H_SESSION, H_PROTO, H_EXPECT, NHDR };

typedef struct hvals {
	char host[256], origin[256], accept[512], ctype[128], auth[600], session[128], proto[64],
		expect[64];
} hvals;

static const struct {
	const char *name;
	size_t off, cap;
} hdr_def[NHDR] = {
#define HD(name, f) { name, offsetof(hvals, f), sizeof(((hvals *)0)->f) }
	HD("host", host), HD("origin", origin), HD("accept", accept), HD("content-type", ctype),
	HD("authorization", auth), HD("mcp-session-id", session), HD("mcp-protocol-version", proto),
	HD("expect", expect),
#undef HD
};

enum { C_IDLE, C_READING, C_BUSY, C_STREAM, C_DRAIN, C_CLOSED };
enum { R_NONE, R_HEALTH, R_METRICS, R_MCP, R_OPTIONS, R_NOTFOUND };
enum { M_GET, M_POST, M_DELETE, M_OPTIONS, M_HEAD, M_OTHER };
enum { END_DELETE, END_EXPIRED, END_INIT_FAILED, END_SHUTDOWN };

typedef struct session session;
typedef struct conn conn;

struct session {
	hnode by_num, by_id;
	session *prev, *next;
	unsigned char raw[32];
	char hex[65];
	uint64_t num;
	char tenant[MB_HTTP_TENANT_MAX + 1];
	uint64_t last_used;
	conn *stream;       /* the open GET stream */
	uint32_t exchanges; /* unanswered POSTs */
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
	char *body;
	size_t blen, bcap;
	/* the exchange in flight (C_BUSY) */
	hnode xnode;
	uint64_t xsession;
	int xinit, xsse;
	/* the GET stream (C_STREAM) */
	uint64_t ssession;
	/* input read ahead */
	char *pend;
	size_t poff, plen, pcap;
};

typedef struct wreq {
	uv_write_t req;
	struct wreq *next;
	conn *c;
	char *own;
	uv_buf_t bufs[3];
	char head[HEAD_MAX];
} wreq;

struct mb_http {
	uv_loop_t *loop;
	const mb_config *cfg;
	mb_http_callbacks cb;
	mb_http_policy pol;
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
	uint64_t next_session, next_exchange;
	uint64_t next_session_sweep, next_heartbeat;
	conn *drive;          /* conns with pipelined input to parse */
	uint64_t *ended;      /* sessions whose on_session_end is deferred */
	size_t nended, ended_cap;
	wreq *free_w;
	size_t nfree_w;
	mb_http_stats_t st;
	char date[40];
	time_t date_sec;
	http_parser_settings settings;
	char rbuf[65536];
};


/* ---- small helpers --------------------------------------------------------------------------- */

typedef struct hb {
	char *p;
	size_t n, cap;
} hb;

static void hb_put(hb *b, const char *s, size_t n)
{
	if (n > b->cap - b->n)
		n = b->cap - b->n; /* cannot happen with the bounded inputs below; truncate if it does */
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void hb_str(hb *b, const char *s)
{
	hb_put(b, s, strlen(s));
}

static void hb_u64(hb *b, uint64_t v, int hex)
{
	char t[24];
	int i = sizeof t;
	do {
		t[--i] = "0123456789abcdef"[v % (hex ? 16 : 10)];
		v /= hex ? 16 : 10;
	} while (v);
	hb_put(b, t + i, sizeof t - (size_t)i);
}

/* JSON string escaping of our own messages (which may quote header values); non-ASCII bytes
 * become '?' so the body stays valid UTF-8. */
/* A JSON string's content: at most MSG_MAX bytes of s (each becomes at most 2), so an error body
 * of ERR_BODY bytes always holds the whole envelope; what is cut is marked "...". */
#define MSG_MAX 400
#define ERR_BODY 1024
static void hb_json_str(hb *b, const char *s)
{
	size_t n = 0;
	for (; *s; s++, n++) {
		if (n == MSG_MAX) {
			hb_put(b, "...", 3);
			break;
		}
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			char e[2] = { '\\', (char)ch };
			hb_put(b, e, 2);
		} else if (ch < 0x20 || ch >= 0x7f) {
			hb_put(b, "?", 1);
		} else {
			hb_put(b, s, 1);
		}
	}
}

static const char *http_date(mb_http *h)
{
	static const char days[] = "SunMonTueWedThuFriSat", months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	time_t now = time(NULL);
	if (now != h->date_sec) {
		struct tm tm;
		gmtime_r(&now, &tm);
		snprintf(h->date, sizeof h->date, "%.3s, %02d %.3s %04d %02d:%02d:%02d GMT", days + 3 * tm.tm_wday,
			 tm.tm_mday, months + 3 * tm.tm_mon, tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
		h->date_sec = now;
	}
	return h->date;
}

static const char *reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 431: return "Request Header Fields Too Large";
	case 503: return "Service Unavailable";
	default: return "Internal Server Error";
	}
}

static const char *hval(conn *c, int i)
{
	return (const char *)&c->hv + hdr_def[i].off;
}

/* Case-insensitive compare of a media type (up to ';', trimmed) with t. */
static int media_is(const char *s, size_t n, const char *t)
{
	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	const char *semi = memchr(s, ';', n);
	if (semi)
		n = (size_t)(semi - s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	return n == strlen(t) && strncasecmp(s, t, n) == 0;
}

/* Whether an Accept list names the media type t (exactly; wildcards do not count). */
static int accepts(const char *v, size_t len, const char *t)
{
	while (len) {
		const char *comma = memchr(v, ',', len);
		size_t n = comma ? (size_t)(comma - v) : len;
		if (media_is(v, n, t))
			return 1;
		if (!comma)
			break;
		len -= n + 1;
		v = comma + 1;
	}
	return 0;
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* ---- write requests -------------------------------------------------------------------------- */

static wreq *wreq_get(mb_http *h, conn *c)
{
	wreq *w = h->free_w;
	if (w) {
		h->free_w = w->next;
		h->nfree_w--;
	} else if (!(w = malloc(sizeof *w))) {
		return NULL;
	}
	w->c = c;
	w->own = NULL;
	return w;
}

static void wreq_put(mb_http *h, wreq *w)
{
	free(w->own);
	if (h->nfree_w < FREE_WREQS && !h->closing) {
		w->next = h->free_w;
		h->free_w = w;
		h->nfree_w++;
	} else {
		free(w);
	}
}

static void conn_close(conn *c);
static void do_shutdown(conn *c);
static void schedule_drive(conn *c);

static int can_parse(conn *c)
{
	return (c->state == C_IDLE || c->state == C_READING) &&
	       uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) <= WQ_PAUSE;
}

static void on_write(uv_write_t *req, int status)
{
	wreq *w = container_of(req, wreq, req);
	conn *c = w->c;
	mb_http *h = c->h;
	c->writes--;
	wreq_put(h, w);
	if (c->state == C_CLOSED)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	if (c->close_after && c->writes == 0) {
		do_shutdown(c);
		return;
	}
	if (c->poff < c->plen && can_parse(c))
		schedule_drive(c);
}

/* Queues w (bufs[0..n)). On failure the connection is closed; w and its buffer are freed. */
static void wreq_send(conn *c, wreq *w, unsigned n)
{
	mb_http *h = c->h;
	for (unsigned i = 0; i < n; i++)
		h->st.bytes_out += w->bufs[i].len;
	c->writes++;
	int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, w->bufs, n, on_write);
	if (rc) {
		c->writes--;
		wreq_put(h, w);
		conn_close(c);
	}
}

/* ---- responses ------------------------------------------------------------------------------- */

static void count(conn *c, int status)
{
	mb_http *h = c->h;
	int m = c->have_method ? c->method : M_OTHER;
	h->st.requests[m][mb_http_status_index(status)]++;
	h->st.requests_total++;
}

/* Status line and the headers every response carries. */
static void head_start(conn *c, hb *b, int status, const char *ctype)
{
	hb_str(b, "HTTP/1.1 ");
	hb_u64(b, (uint64_t)status, 0);
	hb_put(b, " ", 1);
	hb_str(b, reason(status));
	hb_str(b, "\r\nDate: ");
	hb_str(b, http_date(c->h));
	hb_str(b, "\r\n");
	if (ctype) {
		hb_str(b, "Content-Type: ");
		hb_str(b, ctype);
		hb_str(b, "\r\n");
	}
	if (c->cors) {
		hb_str(b, "Access-Control-Allow-Origin: ");
		hb_put(b, hval(c, H_ORIGIN), c->hlen[H_ORIGIN]);
		hb_str(b, "\r\nAccess-Control-Expose-Headers: Mcp-Session-Id\r\nVary: Origin\r\n");
	}
}

static void head_end(conn *c, hb *b)
{
	if (!c->keep_alive) {
		hb_str(b, "Connection: close\r\n");
	} else {
		if (c->http10)
			hb_str(b, "Connection: keep-alive\r\n");
		/* Tell clients when an idle connection will be closed, so a pooled one (fetch/undici
		 * in the SDK) is retired before that instead of being reused as we close it. */
		char ka[48];
		uint64_t secs = c->h->read_timeout / 1000;
		snprintf(ka, sizeof ka, "Keep-Alive: timeout=%llu\r\n", (unsigned long long)(secs ? secs : 1));
		hb_str(b, ka);
	}
	hb_str(b, "\r\n");
}

/* Writes a whole response. body is copied when it fits beside the head, else (or when own is
 * set: then body == own) it is sent from own, which is taken. */
static void respond(conn *c, int status, const char *ctype, const char *extra, const char *body,
		    size_t blen, char *own)
{
	mb_http *h = c->h;
	count(c, status);
	wreq *w = wreq_get(h, c);
	if (!w) {
		free(own);
		conn_close(c);
		return;
	}
	hb b = { w->head, 0, sizeof w->head };
	head_start(c, &b, status, ctype);
	if (extra)
		hb_str(&b, extra);
	if (status != 204) {
		hb_str(&b, "Content-Length: ");
		hb_u64(&b, blen, 0);
		hb_str(&b, "\r\n");
	}
	head_end(c, &b);
	unsigned n = 1;
	if (c->have_method && c->method == M_HEAD) { /* the head only, Content-Length included */
		free(own);
		own = NULL;
		blen = 0;
	}
	if (!own && blen <= b.cap - b.n) {
		hb_put(&b, body, blen);
	} else if (blen) {
		if (!own && !(own = malloc(blen))) {
			wreq_put(h, w);
			conn_close(c);
			return;
		}
		if (own != body)
			memcpy(own, body, blen);
		w->own = own;
		w->bufs[1] = uv_buf_init(own, (unsigned)blen);
		n = 2;
	} else {
		free(own);
	}
	w->bufs[0] = uv_buf_init(w->head, (unsigned)b.n);
	wreq_send(c, w, n);
}

static void respond_error(conn *c, int status, int rpc, const char *msg, const char *extra)
{
	char body[ERR_BODY];
	hb b = { body, 0, sizeof body };
	hb_str(&b, "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":");
	if (rpc < 0) {
		hb_put(&b, "-", 1);
		hb_u64(&b, (uint64_t)-(int64_t)rpc, 0);
	} else {
		hb_u64(&b, (uint64_t)rpc, 0);
	}
	hb_str(&b, ",\"message\":\"");
	hb_json_str(&b, msg);
	hb_str(&b, "\"},\"id\":null}");
	respond(c, status, "application/json", extra, body, b.n, NULL);
}

/* The response to the current request is queued: wait for the next one or close. */
static void request_done(conn *c)
{
	mb_http *h = c->h;
	/* the next request's method is unknown until its line is parsed: a parse failure before
	 * that must not be answered as if it were this one (a HEAD answer has no body) */
	c->method = M_OTHER;
	c->have_method = 0;
	if (c->state == C_CLOSED)
		return;
	if (!c->keep_alive || h->closing) {
		c->state = C_DRAIN;
		c->deadline = uv_now(h->loop) + DRAIN_MS;
		c->close_after = 1;
		c->poff = c->plen = 0;
		if (c->writes == 0)
			do_shutdown(c);
		return;
	}
	c->state = C_IDLE;
	c->deadline = uv_now(h->loop) + h->read_timeout;
	if (c->bcap > BODY_KEEP) {
		free(c->body);
		c->body = NULL;
		c->bcap = 0;
	}
	if (c->poff < c->plen || !c->reading)
		schedule_drive(c);
}

/* ---- SSE ------------------------------------------------------------------------------------- */

static const char sse_prefix[] = "event: message\ndata: ";

/* Writes one SSE event carrying data (taken), after head when given (the complete response
 * head), and the end of the stream when last. data NULL: a comment (heartbeat), or with last
 * just the end of the stream. Chunked framing unless the request was HTTP/1.0. */
static void sse_write(conn *c, const char *head, size_t hlen, char *data, size_t len, int last)
{
	mb_http *h = c->h;
	if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > WQ_MAX) {
		mb_log(MB_LOG_WARNING, "http: a client is not reading its stream (over %zu bytes queued); closing it",
		       WQ_MAX);
		free(data);
		h->st.messages_dropped++;
		conn_close(c);
		return;
	}
	/* data with line breaks needs one "data:" line per line (compact JSON has none) */
	if (data && (memchr(data, '\n', len) || memchr(data, '\r', len))) {
		size_t extra = 0;
		for (size_t i = 0; i < len; i++)
			extra += (data[i] == '\n' || data[i] == '\r') ? 6 : 0;
		char *f = malloc(len + extra);
		if (!f) {
			free(data);
			conn_close(c);
			return;
		}
		size_t o = 0;
		for (size_t i = 0; i < len; i++) {
			if (data[i] == '\r' || data[i] == '\n') {
				if (data[i] == '\r' && i + 1 < len && data[i + 1] == '\n')
					i++;
				memcpy(f + o, "\ndata: ", 7);
				o += 7;
			} else {
				f[o++] = data[i];
			}
		}
		free(data);
		data = f;
		len = o;
	}
	wreq *w = wreq_get(h, c);
	if (!w) {
		free(data);
		conn_close(c);
		return;
	}
	int chunked = !c->http10;
	hb b = { w->head, 0, sizeof w->head };
	if (head)
		hb_put(&b, head, hlen);
	unsigned n = 1;
	const char *tail = NULL;
	if (data) {
		if (chunked) {
			hb_u64(&b, sizeof sse_prefix - 1 + len + 2, 1);
			hb_str(&b, "\r\n");
		}
		hb_str(&b, sse_prefix);
		w->own = data;
		w->bufs[n++] = uv_buf_init(data, (unsigned)len);
		tail = !chunked ? "\n\n" : last ? "\n\n\r\n0\r\n\r\n" : "\n\n\r\n";
	} else if (!last) {
		hb_str(&b, chunked ? "3\r\n:\n\n\r\n" : ":\n\n");
	} else if (chunked) {
		hb_str(&b, "0\r\n\r\n");
	}
	if (tail)
		w->bufs[n++] = uv_buf_init((char *)tail, (unsigned)strlen(tail));
	w->bufs[0] = uv_buf_init(w->head, (unsigned)b.n);
	if (b.n == 0 && n == 1) { /* nothing to write (end of an HTTP/1.0 stream) */
		wreq_put(h, w);
		return;
	}
	wreq_send(c, w, n);
}

/* Builds the head of an SSE response into b (status 200). */
static void sse_head(conn *c, hb *b, const char *extra)
{
	count(c, 200);
	head_start(c, b, 200, "text/event-stream");
	hb_str(b, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
	if (extra)
		hb_str(b, extra);
	if (!c->http10)
		hb_str(b, "Transfer-Encoding: chunked\r\n");
	else
		c->keep_alive = 0; /* HTTP/1.0: the stream ends with the connection */
	head_end(c, b);
}

/* ---- sessions -------------------------------------------------------------------------------- */

static session *session_by_num(mb_http *h, uint64_t num)
{
	hnode *x = num ? htab_get(&h->by_num, num) : NULL;
	return x ? container_of(x, session, by_num) : NULL;
}

static session *session_by_id(mb_http *h, const char *hex, size_t len)
{
	unsigned char raw[32];
	size_t n = 0;
	if (len != 64 || sodium_hex2bin(raw, sizeof raw, hex, len, NULL, &n, NULL) != 0 || n != 32)
		return NULL;
	uint64_t key = load64(raw);
	for (hnode *x = h->by_id.b[hslot(&h->by_id, key)]; x; x = x->next) {
		session *s = container_of(x, session, by_id);
		if (x->key == key && sodium_memcmp(s->raw, raw, sizeof raw) == 0)
			return s;
	}
	return NULL;
}

static session *session_new(mb_http *h, const char *tenant)
{
	session *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	randombytes_buf(s->raw, sizeof s->raw);
	sodium_bin2hex(s->hex, sizeof s->hex, s->raw, sizeof s->raw);
	s->num = ++h->next_session;
	snprintf(s->tenant, sizeof s->tenant, "%s", tenant);
	s->last_used = uv_now(h->loop);
	s->by_num.key = s->num;
	s->by_id.key = load64(s->raw);
	htab_put(&h->by_num, &s->by_num);
	htab_put(&h->by_id, &s->by_id);
	s->next = h->sessions;
	if (h->sessions)
		h->sessions->prev = s;
	h->sessions = s;
	h->st.sessions_active++;
	h->st.sessions_created++;
	return s;
}

static void on_deferred(uv_idle_t *idle);

static void stream_finish(conn *c)
{
	mb_http *h = c->h;
	h->st.streams_active--;
	c->ssession = 0;
	sse_write(c, NULL, 0, NULL, 0, 1); /* HTTP/1.0: nothing; request_done closes */
	request_done(c);
}

static void session_end(mb_http *h, session *s, int how)
{
	htab_del(&h->by_num, &s->by_num);
	htab_del(&h->by_id, &s->by_id);
	if (s->prev)
		s->prev->next = s->next;
	else
		h->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	h->st.sessions_active--;
	if (how == END_EXPIRED)
		h->st.sessions_expired++;
	else if (how == END_DELETE)
		h->st.sessions_deleted++;
	conn *stream = s->stream;
	uint64_t num = s->num;
	free(s);
	if (stream && stream->state == C_STREAM)
		stream_finish(stream);
	if (how == END_INIT_FAILED) {
		/* we are inside the host's mb_http_send: tell it later, from the loop */
		if (h->nended == h->ended_cap) {
			size_t cap = h->ended_cap ? h->ended_cap * 2 : 8;
			uint64_t *e = realloc(h->ended, cap * sizeof *e);
			if (!e) {
				mb_log(MB_LOG_ERROR, "http: out of memory; session %llu ends without notice",
				       (unsigned long long)num);
				return;
			}
			h->ended = e;
			h->ended_cap = cap;
		}
		h->ended[h->nended++] = num;
		uv_idle_start(&h->deferred, on_deferred);
		return;
	}
	if (h->cb.on_session_end)
		h->cb.on_session_end(h->cb.ud, num);
}

/* ---- exchanges ------------------------------------------------------------------------------- */

static void exchange_finish(conn *c)
{
	mb_http *h = c->h;
	htab_del(&h->exchanges, &c->xnode);
	h->st.exchanges_active--;
	session *s = session_by_num(h, c->xsession);
	if (s) {
		s->exchanges--;
		s->last_used = uv_now(h->loop);
	}
	c->xsession = 0;
}

/* Whether a JSON-RPC message is an error response (the host refused initialize). */
static int is_error_response(const char *data, size_t len)
{
	json_t *j = json_loadb(data, len, 0, NULL);
	int e = j && json_is_object(j) && json_object_get(j, "error") != NULL;
	json_decref(j);
	return e;
}

static void exchange_send(conn *c, int final, char *data, size_t len)
{
	mb_http *h = c->h;
	char extra[128];
	extra[0] = 0;
	if (c->xinit && !c->xsse) {
		session *s = session_by_num(h, c->xsession);
		if (s && final && is_error_response(data, len)) {
			c->xinit = 0;
			exchange_finish(c);
			session_end(h, s, END_INIT_FAILED);
		} else if (s) {
			snprintf(extra, sizeof extra, "Mcp-Session-Id: %s\r\n", s->hex);
		}
	}
	if (!c->xsse && final) {
		if (c->xsession)
			exchange_finish(c);
		respond(c, 200, "application/json", extra[0] ? extra : NULL, data, len, data);
		request_done(c);
		return;
	}
	if (!c->xsse) {
		char head[HEAD_MAX];
		hb b = { head, 0, sizeof head - 64 };
		sse_head(c, &b, extra[0] ? extra : NULL);
		c->xsse = 1;
		sse_write(c, head, b.n, data, len, 0);
		return;
	}
	sse_write(c, NULL, 0, data, len, final);
	if (final && c->state == C_BUSY) {
		exchange_finish(c);
		request_done(c);
	}
}

/* ---- routing --------------------------------------------------------------------------------- */

/* Records the answer to a request whose body will be discarded. msg may quote one value. */
static void reject(conn *c, int status, int rpc, const char *extra, const char *msg, const char *a)
{
	if (!c->reject) {
		c->reject = status;
		c->reject_rpc = rpc;
		c->reject_hdr = extra;
		snprintf(c->msg, sizeof c->msg, msg, a ? a : "");
	}
}

static int bad(conn *c, int status, const char *fmt, const char *a)
{
	c->err_status = status;
	snprintf(c->msg, sizeof c->msg, fmt, a ? a : "");
	return -1;
}

static const char allow_mcp[] = "Allow: GET, POST, DELETE, OPTIONS\r\n";
static const char allow_get[] = "Allow: GET\r\n";

static int on_headers_complete(http_parser *p)
{
	conn *c = p->data;
	mb_http *h = c->h;
	if (c->url_over)
		return bad(c, 414, "request URL above %s bytes", "2048");
	if (p->http_major != 1)
		return bad(c, 400, "Bad Request: only HTTP/1.0 and HTTP/1.1 are served%s", NULL);
	c->http10 = p->http_major < 1 || (p->http_major == 1 && p->http_minor == 0);
	c->has_body = (p->flags & F_CHUNKED) || (p->content_length > 0 && p->content_length != ULLONG_MAX);
	c->expect_continue = c->hcount[H_EXPECT] && !c->http10 &&
			     strcasecmp(hval(c, H_EXPECT), "100-continue") == 0;
	size_t plen = strcspn(c->url, "?#");
	if (plen == 4 && memcmp(c->url, "/mcp", 4) == 0)
		c->route = R_MCP;
	else if (plen == 8 && memcmp(c->url, "/healthz", 8) == 0)
		c->route = R_HEALTH;
	else if (plen == 8 && memcmp(c->url, "/metrics", 8) == 0)
		c->route = R_METRICS;
	else
		c->route = R_NOTFOUND;
	char num[32];
	for (int i = 0; i < NHDR; i++) { /* values may end in whitespace */
		char *v = (char *)&c->hv + hdr_def[i].off;
		while (c->hlen[i] && (v[c->hlen[i] - 1] == ' ' || v[c->hlen[i] - 1] == '\t'))
			v[--c->hlen[i]] = 0;
	}

	if (c->route == R_HEALTH) {
		if (c->method != M_GET)
			reject(c, 405, -32000, allow_get, "method not allowed on /healthz (use GET)", NULL);
		goto checked;
	}
	for (int i = 0; i < NHDR; i++) {
		if (c->hover[i] && i != H_ACCEPT && i != H_ORIGIN && i != H_HOST && i != H_AUTH && i != H_SESSION)
			return bad(c, 400, "header %s is too long", hdr_def[i].name);
		if (c->hcount[i] > 1 && i != H_ACCEPT)
			return bad(c, 400, "duplicate %s header", hdr_def[i].name);
	}
	if (!c->hcount[H_HOST])
		return bad(c, 400, "missing Host header%s", NULL);
	if (c->hover[H_HOST] || !mb_http_host_allowed(&h->pol, hval(c, H_HOST), c->hlen[H_HOST])) {
		reject(c, 403, -32000, NULL,
		       "Forbidden: Host \"%s\" is not allowed (loopback names and http_allowed_hosts are)",
		       c->hover[H_HOST] ? "(too long)" : hval(c, H_HOST));
		goto checked;
	}
	if (c->hcount[H_ORIGIN] &&
	    (c->hover[H_ORIGIN] || !mb_http_origin_allowed(&h->pol, hval(c, H_ORIGIN), c->hlen[H_ORIGIN]))) {
		reject(c, 403, -32000, NULL,
		       "Forbidden: Origin \"%s\" is not allowed (loopback origins and http_allowed_origins are)",
		       c->hover[H_ORIGIN] ? "(too long)" : hval(c, H_ORIGIN));
		goto checked;
	}
	c->cors = c->hcount[H_ORIGIN] && mb_http_cors_allowed(&h->pol, hval(c, H_ORIGIN), c->hlen[H_ORIGIN]);
	if (c->route == R_NOTFOUND) {
		reject(c, 404, -32000, NULL, "Not Found: the MCP endpoint is /mcp", NULL);
		goto checked;
	}
	if (c->method == M_OPTIONS) {
		c->route = R_OPTIONS;
		goto checked;
	}
	c->tenant = c->hover[H_AUTH] ? NULL
				    : mb_http_authenticate(&h->pol, c->hcount[H_AUTH] ? hval(c, H_AUTH) : NULL,
							   c->hlen[H_AUTH]);
	if (!c->tenant) {
		h->st.auth_failures++;
		reject(c, 401, -32000, "WWW-Authenticate: Bearer realm=\"moonbox\"\r\n",
		       c->hcount[H_AUTH] ? "Unauthorized: the bearer token is not valid"
					 : "Unauthorized: send Authorization: Bearer <token>", NULL);
		goto checked;
	}
	if (c->route == R_METRICS) {
		if (c->method != M_GET)
			reject(c, 405, -32000, allow_get, "method not allowed on /metrics (use GET)", NULL);
		goto checked;
	}
	/* /mcp */
	if (c->method != M_GET && c->method != M_POST && c->method != M_DELETE) {
		reject(c, 405, -32000, allow_mcp, "Method Not Allowed: /mcp takes POST, GET and DELETE", NULL);
		goto checked;
	}
	if (c->hcount[H_PROTO]) {
		int ok = 0;
		char list[160] = "";
		for (const char *const *v = mb_protocol_served; *v; v++) {
			ok |= strcmp(hval(c, H_PROTO), *v) == 0;
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
				 v == mb_protocol_served ? "" : ", ", *v);
		}
		if (!ok) {
			char m[320];
			snprintf(m, sizeof m, "Bad Request: unsupported MCP-Protocol-Version \"%%s\" (supported: %s)",
				 list);
			reject(c, 400, -32000, NULL, m, hval(c, H_PROTO));
			goto checked;
		}
	}
	if (c->method == M_POST) {
		if (!c->hcount[H_CTYPE] || !media_is(hval(c, H_CTYPE), c->hlen[H_CTYPE], "application/json")) {
			reject(c, 415, -32000, NULL,
			       "Unsupported Media Type: Content-Type must be application/json", NULL);
			goto checked;
		}
		if (!accepts(hval(c, H_ACCEPT), c->hlen[H_ACCEPT], "application/json") ||
		    !accepts(hval(c, H_ACCEPT), c->hlen[H_ACCEPT], "text/event-stream")) {
			reject(c, 406, -32000, NULL,
			       "Not Acceptable: Accept must list both application/json and text/event-stream",
			       NULL);
			goto checked;
		}
	} else if (c->method == M_GET) {
		if (!accepts(hval(c, H_ACCEPT), c->hlen[H_ACCEPT], "text/event-stream")) {
			reject(c, 406, -32000, NULL, "Not Acceptable: Accept must list text/event-stream", NULL);
			goto checked;
		}
	}
	if (c->hcount[H_SESSION]) {
		const char *v = hval(c, H_SESSION);
		size_t n = c->hlen[H_SESSION];
		session *s = c->hover[H_SESSION] ? NULL : session_by_id(h, v, n);
		if (!s || strcmp(s->tenant, c->tenant) != 0) {
			reject(c, 404, -32001, NULL, "Session not found", NULL);
			goto checked;
		}
		c->sess_num = s->num;
	} else if (c->method != M_POST) {
		reject(c, 400, -32000, NULL, "Bad Request: Mcp-Session-Id header is required", NULL);
		goto checked;
	}

checked:
	if (c->has_body && !(p->flags & F_CHUNKED) && p->content_length > h->max_body) {
		if (!c->reject) {
			snprintf(num, sizeof num, "%zu", h->max_body);
			return bad(c, 413, "Content Too Large: the body is above http_max_body_bytes=%s", num);
		}
		c->fatal = 1; /* answer the rejection now rather than read a body that large */
		return -1;
	}
	if (c->reject && c->expect_continue) {
		c->fatal = 1; /* the client waits before sending its body: answer now and close */
		return -1;
	}
	if (c->expect_continue) {
		wreq *w = wreq_get(h, c);
		if (!w)
			return bad(c, 503, "out of memory%s", NULL);
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		memcpy(w->head, cont, sizeof cont - 1);
		w->bufs[0] = uv_buf_init(w->head, sizeof cont - 1);
		wreq_send(c, w, 1);
		if (c->state == C_CLOSED)
			return -1;
	}
	return 0;
}

/* ---- request handlers ------------------------------------------------------------------------ */

static void answer_reject(conn *c)
{
	respond_error(c, c->reject, c->reject_rpc, c->msg, c->reject_hdr);
}

static void handle_metrics(conn *c)
{
	mb_http *h = c->h;
	const char *extra = h->cb.metrics_extra ? h->cb.metrics_extra(h->cb.ud) : NULL;
	size_t len = 0;
	char *text = mb_http_metrics_render(&h->st, extra, &len);
	if (!text) {
		respond_error(c, 500, -32603, "out of memory rendering /metrics", NULL);
		return;
	}
	respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, text, len, text);
}

static void handle_options(conn *c)
{
	char extra[512];
	hb b = { extra, 0, sizeof extra - 1 };
	hb_str(&b, c->route == R_OPTIONS && c->cors ? "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\n"
		   "Access-Control-Allow-Headers: Content-Type, Accept, Authorization, Mcp-Session-Id, "
		   "Mcp-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name\r\n"
		   "Access-Control-Max-Age: 86400\r\n" : "");
	hb_str(&b, allow_mcp);
	extra[b.n] = 0;
	respond(c, 204, NULL, extra, NULL, 0, NULL);
}

static void handle_delete(conn *c)
{
	mb_http *h = c->h;
	session *s = session_by_num(h, c->sess_num);
	if (!s) {
		respond_error(c, 404, -32001, "Session not found", NULL);
		return;
	}
	session_end(h, s, END_DELETE); /* ended before the client hears so */
	respond(c, 204, NULL, NULL, NULL, 0, NULL);
}

static void handle_get(conn *c)
{
	mb_http *h = c->h;
	session *s = session_by_num(h, c->sess_num);
	if (!s) {
		respond_error(c, 404, -32001, "Session not found", NULL);
		return;
	}
	if (s->stream) {
		respond_error(c, 409, -32000, "Conflict: this session already has an open GET stream", NULL);
		return;
	}
	char head[HEAD_MAX];
	hb b = { head, 0, sizeof head };
	sse_head(c, &b, NULL);
	wreq *w = wreq_get(h, c);
	if (!w) {
		conn_close(c);
		return;
	}
	memcpy(w->head, head, b.n);
	w->bufs[0] = uv_buf_init(w->head, (unsigned)b.n);
	wreq_send(c, w, 1);
	if (c->state == C_CLOSED)
		return;
	c->state = C_STREAM;
	c->ssession = s->num;
	s->stream = c;
	s->last_used = uv_now(h->loop);
	h->st.streams_active++;
}

static void handle_post(conn *c)
{
	mb_http *h = c->h;
	session *s;
	int init = 0;
	if (!c->sess_num) {
		json_error_t je;
		json_t *j = json_loadb(c->body ? c->body : "", c->blen, JSON_REJECT_DUPLICATES, &je);
		if (!j) {
			char m[300];
			snprintf(m, sizeof m, "Parse error: %s", je.text);
			respond_error(c, 400, -32700, m, NULL);
			return;
		}
		json_t *method = json_is_object(j) ? json_object_get(j, "method") : NULL;
		json_t *id = json_is_object(j) ? json_object_get(j, "id") : NULL;
		init = json_is_string(method) && strcmp(json_string_value(method), "initialize") == 0 && id &&
		       !json_is_null(id);
		json_decref(j);
		if (!init) {
			respond_error(c, 400, -32000,
				      "Bad Request: Mcp-Session-Id header is required (only initialize may come without it)",
				      NULL);
			return;
		}
		if (h->st.sessions_active >= (uint64_t)h->cfg->http_max_sessions) {
			char m[160];
			snprintf(m, sizeof m, "Service Unavailable: %llu sessions are open (http_max_sessions=%lld); "
				 "retry later", (unsigned long long)h->st.sessions_active,
				 (long long)h->cfg->http_max_sessions);
			respond_error(c, 503, -32000, m, "Retry-After: 5\r\n");
			return;
		}
		s = session_new(h, c->tenant);
		if (!s) {
			respond_error(c, 503, -32000, "Service Unavailable: out of memory", "Retry-After: 5\r\n");
			return;
		}
	} else if (!(s = session_by_num(h, c->sess_num))) {
		respond_error(c, 404, -32001, "Session not found", NULL);
		return;
	}
	uint64_t x = ++h->next_exchange;
	uint64_t snum = s->num;
	c->xnode.key = x;
	htab_put(&h->exchanges, &c->xnode);
	c->xsession = snum;
	c->xinit = init;
	c->xsse = 0;
	c->state = C_BUSY;
	s->exchanges++;
	s->last_used = uv_now(h->loop);
	h->st.exchanges_active++;
	if (c->bcap < c->blen + 1) { /* the body is handed over NUL-terminated */
		char *nb = realloc(c->body, c->blen + 1);
		if (!nb) {
			exchange_finish(c);
			c->state = C_READING;
			respond_error(c, 503, -32000, "Service Unavailable: out of memory", NULL);
			return;
		}
		c->body = nb;
		c->bcap = c->blen + 1;
	}
	c->body[c->blen] = 0;
	int r = h->cb.on_message(h->cb.ud, snum, x, c->tenant, c->body, c->blen);
	if (c->state != C_BUSY || c->xnode.key != x || !c->xsession)
		return; /* answered (or the connection closed) during the call */
	if (!r) {
		exchange_finish(c);
		respond(c, 202, NULL, NULL, NULL, 0, NULL);
		if (init && (s = session_by_num(h, snum)))
			session_end(h, s, END_INIT_FAILED);
		request_done(c);
	}
}

static void handle_request(conn *c)
{
	if (c->reject) {
		answer_reject(c);
	} else {
		switch (c->route) {
		case R_HEALTH:
			respond(c, 200, "text/plain; charset=utf-8", NULL, "ok\n", 3, NULL);
			break;
		case R_METRICS:
			handle_metrics(c);
			break;
		case R_OPTIONS:
			handle_options(c);
			break;
		default:
			if (c->method == M_POST)
				handle_post(c);
			else if (c->method == M_GET)
				handle_get(c);
			else
				handle_delete(c);
			if (c->state != C_READING)
				return; /* waiting for the host or streaming, or already answered */
		}
	}
	request_done(c);
}

/* ---- parser callbacks ------------------------------------------------------------------------ */

static int on_message_begin(http_parser *p)
{
	conn *c = p->data;
	c->state = C_READING;
	c->deadline = uv_now(c->h->loop) + c->h->read_timeout;
	c->method = M_OTHER;
	c->have_method = 0;
	c->route = R_NONE;
	c->reject = c->reject_rpc = c->fatal = c->err_status = 0;
	c->reject_hdr = NULL;
	c->msg[0] = 0;
	c->keep_alive = 1;
	c->cors = c->expect_continue = c->has_body = 0;
	c->hbytes = 0;
	c->url_len = 0;
	c->url_over = 0;
	c->url[0] = 0;
	c->flen = 0;
	c->fover = 0;
	c->fidx = -1;
	c->in_value = c->value_ended = 0;
	memset(c->hlen, 0, sizeof c->hlen);
	memset(c->hcount, 0, sizeof c->hcount);
	memset(c->hover, 0, sizeof c->hover);
	for (int i = 0; i < NHDR; i++)
		((char *)&c->hv)[hdr_def[i].off] = 0;
	c->tenant = NULL;
	c->sess_num = 0;
	c->blen = 0;
	return 0;
}

static int header_budget(conn *c, size_t n)
{
	c->hbytes += n;
	if (c->hbytes > c->h->max_header) {
		char num[32];
		snprintf(num, sizeof num, "%zu", c->h->max_header);
		return bad(c, 431, "Request Header Fields Too Large: above http_max_header_bytes=%s", num);
	}
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
	conn *c = p->data;
	if (!c->have_method) {
		c->have_method = 1;
		switch (p->method) {
		case HTTP_GET: c->method = M_GET; break;
		case HTTP_POST: c->method = M_POST; break;
		case HTTP_DELETE: c->method = M_DELETE; break;
		case HTTP_OPTIONS: c->method = M_OPTIONS; break;
		case HTTP_HEAD: c->method = M_HEAD; break;
		default: c->method = M_OTHER;
		}
	}
	if (header_budget(c, n))
		return -1;
	if (c->url_len + n > URL_MAX) {
		c->url_over = 1;
		return 0;
	}
	memcpy(c->url + c->url_len, at, n);
	c->url_len += n;
	c->url[c->url_len] = 0;
	return 0;
}

/* RFC 9110 tchar: what a header name may hold */
static int is_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* http_parser (built without HTTP_PARSER_STRICT) lets a space into a header name and then
 * matches "Transfer-Encoding " as Transfer-Encoding; a proxy in front may not. RFC 9112 5.1
 * says 400 for whitespace before the colon, so any byte outside tchar is refused here. */
static int on_header_field(http_parser *p, const char *at, size_t n)
{
	conn *c = p->data;
	for (size_t i = 0; i < n; i++)
		if (!is_tchar((unsigned char)at[i]))
			return bad(c, 400, "Bad Request: a header name holds a byte that is not a token "
				   "character (RFC 9110; no whitespace before the colon)%s", "");
	if (c->in_value || (c->flen == 0 && !c->fover)) { /* a new header begins */
		c->in_value = 0;
		c->value_ended = 0;
		c->flen = 0;
		c->fover = 0;
		c->fidx = -1;
		if (header_budget(c, 4)) /* ": " and CRLF */
			return -1;
	}
	if (header_budget(c, n))
		return -1;
	if (c->flen + n >= sizeof c->fname) {
		c->fover = 1;
		return 0;
	}
	memcpy(c->fname + c->flen, at, n);
	c->flen += n;
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
	conn *c = p->data;
	/* http_parser reports a value's last piece at its line end, with at[n] the CR (or bare LF);
	 * a piece of the same value after that is a continuation line (obs-fold), which it joins
	 * without the space RFC 9112 5.2 asks for. Refused (the RFC's other choice). */
	if (c->in_value && c->value_ended)
		return bad(c, 400, "Bad Request: a header line continued on the next line (obs-fold, "
			   "RFC 9112) is not accepted%s", "");
	if (at + n < c->exec_end && (at[n] == '\r' || at[n] == '\n'))
		c->value_ended = 1;
	if (!c->in_value) { /* first piece of this value: which header is it? */
		c->in_value = 1;
		c->fidx = -1;
		if (!c->fover)
			for (int i = 0; i < NHDR; i++)
				if (strlen(hdr_def[i].name) == c->flen && strncasecmp(hdr_def[i].name, c->fname, c->flen) == 0) {
					c->fidx = i;
					break;
				}
		if (c->fidx >= 0) {
			int i = c->fidx;
			if (c->hcount[i] < 255)
				c->hcount[i]++;
			if (c->hcount[i] > 1 && i == H_ACCEPT && !c->hover[i]) { /* repeated Accept: join */
				if ((size_t)c->hlen[i] + 1 >= hdr_def[i].cap)
					c->hover[i] = 1;
				else {
					char *v = (char *)&c->hv + hdr_def[i].off;
					v[c->hlen[i]++] = ',';
					v[c->hlen[i]] = 0;
				}
			}
		}
		c->flen = 0;
	}
	if (header_budget(c, n))
		return -1;
	int i = c->fidx;
	if (i < 0 || c->hover[i] || (c->hcount[i] > 1 && i != H_ACCEPT))
		return 0;
	if (c->hlen[i] + n >= hdr_def[i].cap) {
		c->hover[i] = 1;
		return 0;
	}
	char *v = (char *)&c->hv + hdr_def[i].off;
	memcpy(v + c->hlen[i], at, n);
	c->hlen[i] = (uint16_t)(c->hlen[i] + n);
	v[c->hlen[i]] = 0;
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
	conn *c = p->data;
	mb_http *h = c->h;
	if (c->reject || c->route != R_MCP || c->method != M_POST)
		return 0; /* discarded */
	if (c->blen + n > h->max_body) {
		char num[32];
		snprintf(num, sizeof num, "%zu", h->max_body);
		return bad(c, 413, "Content Too Large: the body is above http_max_body_bytes=%s", num);
	}
	if (c->blen + n + 1 > c->bcap) {
		size_t cap = c->bcap ? c->bcap : 4096;
		while (cap < c->blen + n + 1)
			cap *= 2;
		if (!(p->flags & F_CHUNKED) && cap > p->content_length + c->blen + n + 1)
			cap = (size_t)p->content_length + c->blen + n + 1; /* exact when the length is known */
		char *nb = realloc(c->body, cap);
		if (!nb)
			return bad(c, 503, "Service Unavailable: out of memory for the request body%s", NULL);
		c->body = nb;
		c->bcap = cap;
	}
	memcpy(c->body + c->blen, at, n);
	c->blen += n;
	return 0;
}

static int on_message_complete(http_parser *p)
{
	conn *c = p->data;
	c->keep_alive = http_should_keep_alive(p) && !p->upgrade && !c->h->closing;
	handle_request(c);
	http_parser_pause(p, 1);
	return 0;
}

/* ---- connections ----------------------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *hd);

/* A request that cannot be parsed further: answer and close. */
static void parse_failed(conn *c, enum http_errno e)
{
	c->keep_alive = 0;
	if (c->fatal && c->reject)
		answer_reject(c);
	else if (c->err_status)
		respond_error(c, c->err_status, -32000, c->msg, NULL);
	else if (e == HPE_HEADER_OVERFLOW)
		respond_error(c, 431, -32000, "Request Header Fields Too Large", NULL);
	else {
		char m[160];
		snprintf(m, sizeof m, "Bad Request: malformed HTTP (%s)", http_errno_description(e));
		respond_error(c, 400, -32000, m, NULL);
	}
	request_done(c);
}

/* Parses as much of data as the connection's state allows. @returns bytes consumed */
static size_t parse_some(conn *c, const char *data, size_t len)
{
	size_t off = 0;
	c->in_parse = 1;
	while (off < len && can_parse(c)) {
		c->exec_end = data + len;
		size_t n = http_parser_execute(&c->p, &c->h->settings, data + off, len - off);
		if (c->state == C_CLOSED)
			break;
		off += n;
		enum http_errno e = HTTP_PARSER_ERRNO(&c->p);
		if (e == HPE_PAUSED) {
			http_parser_pause(&c->p, 0);
			continue;
		}
		if (e != HPE_OK) {
			parse_failed(c, e);
			off = len;
			break;
		}
		if (n == 0)
			break;
	}
	c->in_parse = 0;
	return off;
}

static int pend_append(conn *c, const char *data, size_t n)
{
	if (c->poff && c->poff == c->plen)
		c->poff = c->plen = 0;
	if (c->poff && c->plen + n > c->pcap) {
		memmove(c->pend, c->pend + c->poff, c->plen - c->poff);
		c->plen -= c->poff;
		c->poff = 0;
	}
	if (c->plen + n > c->pcap) {
		size_t cap = c->pcap ? c->pcap : 4096;
		while (cap < c->plen + n)
			cap *= 2;
		char *np = realloc(c->pend, cap);
		if (!np)
			return -1;
		c->pend = np;
		c->pcap = cap;
	}
	memcpy(c->pend + c->plen, data, n);
	c->plen += n;
	return 0;
}

static void alloc_cb(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	conn *c = hd->data;
	*buf = uv_buf_init(c->h->rbuf, sizeof c->h->rbuf);
}

static void read_stop(conn *c)
{
	if (c->reading) {
		uv_read_stop((uv_stream_t *)&c->tcp);
		c->reading = 0;
	}
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

static void read_start(conn *c)
{
	if (!c->reading && c->state != C_CLOSED &&
	    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, on_read) == 0)
		c->reading = 1;
}

static void conn_drive(conn *c)
{
	if (c->state == C_CLOSED || c->in_parse)
		return;
	if (c->poff < c->plen && can_parse(c)) {
		size_t n = parse_some(c, c->pend + c->poff, c->plen - c->poff);
		if (c->state == C_CLOSED)
			return;
		c->poff += n;
		if (c->poff >= c->plen)
			c->poff = c->plen = 0;
	}
	if (c->plen - c->poff < PEND_MAX)
		read_start(c);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	conn *c = st->data;
	mb_http *h = c->h;
	if (nread < 0) { /* EOF or error: the client is gone (half-closed clients are not served) */
		conn_close(c);
		return;
	}
	if (nread == 0 || c->state == C_CLOSED)
		return;
	h->st.bytes_in += (uint64_t)nread;
	if (c->state == C_DRAIN)
		return; /* discarded until EOF or the linger deadline */
	size_t off = 0;
	if (c->poff == c->plen)
		off = parse_some(c, buf->base, (size_t)nread);
	if (c->state == C_CLOSED || c->state == C_DRAIN)
		return;
	if (off < (size_t)nread && pend_append(c, buf->base + off, (size_t)nread - off) != 0) {
		mb_log(MB_LOG_WARNING, "http: out of memory buffering pipelined input; closing the connection");
		conn_close(c);
		return;
	}
	if (off == 0 && c->poff < c->plen)
		conn_drive(c);
	if (c->state != C_CLOSED && c->plen - c->poff >= PEND_MAX)
		read_stop(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	conn *c = req->data;
	if (status < 0 && c->state != C_CLOSED)
		conn_close(c);
}

static void do_shutdown(conn *c)
{
	c->close_after = 0;
	if (c->shut)
		return;
	c->shut = 1;
	c->shutreq.data = c;
	if (uv_shutdown(&c->shutreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
		conn_close(c);
		return;
	}
	read_start(c); /* drain what the client still sends, until its EOF */
}

static void unqueue_drive(conn *c)
{
	if (!c->drive_queued)
		return;
	for (conn **pp = &c->h->drive; *pp; pp = &(*pp)->drive_next)
		if (*pp == c) {
			*pp = c->drive_next;
			break;
		}
	c->drive_queued = 0;
}

static void conn_close(conn *c)
{
	mb_http *h = c->h;
	if (c->state == C_CLOSED)
		return;
	if (c->state == C_BUSY && c->xsession)
		exchange_finish(c); /* the host may still send for it: dropped */
	if (c->state == C_STREAM) {
		session *s = session_by_num(h, c->ssession);
		if (s && s->stream == c) {
			s->stream = NULL;
			s->last_used = uv_now(h->loop);
		}
		h->st.streams_active--;
	}
	c->state = C_CLOSED;
	unqueue_drive(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	h->nconns--;
	h->st.connections_active--;
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void maybe_free(mb_http *h)
{
	if (h->handles)
		return;
	while (h->free_w) {
		wreq *w = h->free_w;
		h->free_w = w->next;
		free(w);
	}
	free(h->by_num.b);
	free(h->by_id.b);
	free(h->exchanges.b);
	free(h->ended);
	mb_http_policy_free(&h->pol);
	free(h);
}

static void on_conn_closed(uv_handle_t *hd)
{
	conn *c = hd->data;
	mb_http *h = c->h;
	free(c->body);
	free(c->pend);
	free(c);
	h->handles--;
	maybe_free(h);
}

static void schedule_drive(conn *c)
{
	if (c->drive_queued || c->state == C_CLOSED)
		return;
	c->drive_queued = 1;
	c->drive_next = c->h->drive;
	c->h->drive = c;
	uv_idle_start(&c->h->deferred, on_deferred);
}

/* Runs what must not happen inside the host's own calls: parsing pipelined requests and
 * on_session_end for failed initializations. */
static void on_deferred(uv_idle_t *idle)
{
	mb_http *h = idle->data;
	uv_idle_stop(idle);
	while (h->nended) {
		uint64_t num = h->ended[--h->nended];
		if (h->cb.on_session_end)
			h->cb.on_session_end(h->cb.ud, num);
	}
	while (h->drive) {
		conn *c = h->drive;
		h->drive = c->drive_next;
		c->drive_queued = 0;
		conn_drive(c);
	}
}

static void on_connection(uv_stream_t *srv, int status)
{
	mb_http *h = srv->data;
	if (status < 0) {
		mb_log(MB_LOG_WARNING, "http: accept: %s", uv_strerror(status));
		return;
	}
	conn *c = calloc(1, sizeof *c);
	if (!c) {
		mb_log(MB_LOG_ERROR, "http: out of memory accepting a connection");
		return;
	}
	c->h = h;
	uv_tcp_init(h->loop, &c->tcp);
	c->tcp.data = c;
	h->handles++;
	if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
		c->state = C_CLOSED;
		uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
		return;
	}
	h->st.connections_total++;
	if (h->nconns >= (size_t)h->cfg->http_max_connections || h->closing) {
		static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
					   "Retry-After: 1\r\nConnection: close\r\n\r\n";
		uv_buf_t b = uv_buf_init((char *)busy, sizeof busy - 1);
		uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
		h->st.connections_rejected++;
		c->state = C_CLOSED;
		uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	http_parser_init(&c->p, HTTP_REQUEST);
	c->p.data = c;
	c->state = C_IDLE;
	c->keep_alive = 1;
	c->deadline = uv_now(h->loop) + h->read_timeout;
	c->next = h->conns;
	if (h->conns)
		h->conns->prev = c;
	h->conns = c;
	h->nconns++;
	h->st.connections_active++;
	read_start(c);
	if (!c->reading)
		conn_close(c);
}

/* ---- the sweep ------------------------------------------------------------------------------- */

static void on_sweep(uv_timer_t *t)
{
	mb_http *h = t->data;
	uint64_t now = uv_now(h->loop);
	int beat = now >= h->next_heartbeat;
	if (beat)
		h->next_heartbeat = now + HEARTBEAT_MS;
	for (conn *c = h->conns, *next; c; c = next) {
		next = c->next;
		size_t q = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
		if (q != c->wq_last || !q) {
			c->wq_last = q;
			c->wq_since = now;
		} else if (now - c->wq_since >= 3 * h->read_timeout) {
			mb_log(MB_LOG_NOTICE, "http: a client has not read its responses for %llu ms; closing it",
			       (unsigned long long)(now - c->wq_since));
			conn_close(c); /* output queued and not moving: the client stopped reading */
			continue;
		}
		switch (c->state) {
		case C_IDLE:
			if (now >= c->deadline && c->writes == 0)
				conn_close(c); /* idle keep-alive connection */
			break;
		case C_READING:
			if (now >= c->deadline) {
				char num[32];
				snprintf(num, sizeof num, "%llu", (unsigned long long)h->read_timeout);
				h->st.read_timeouts++;
				c->keep_alive = 0;
				char m[128];
				snprintf(m, sizeof m, "Request Timeout: not read within http_read_timeout_ms=%s", num);
				respond_error(c, 408, -32000, m, NULL);
				request_done(c);
			}
			break;
		case C_DRAIN:
			if (now >= c->deadline)
				conn_close(c);
			break;
		case C_STREAM:
		case C_BUSY:
			if (beat && (c->state == C_STREAM || c->xsse))
				sse_write(c, NULL, 0, NULL, 0, 0);
			break;
		default:
			break;
		}
	}
	if (now >= h->next_session_sweep) {
		h->next_session_sweep = now + h->tick * 4;
		for (session *s = h->sessions, *next; s; s = next) {
			next = s->next;
			if (!s->stream && !s->exchanges && now - s->last_used >= h->idle_ms)
				session_end(h, s, END_EXPIRED);
		}
	}
}

/* ---- public API ------------------------------------------------------------------------------ */

static void on_handle_closed(uv_handle_t *hd)
{
	mb_http *h = hd->data;
	h->handles--;
	maybe_free(h);
}

/* Creates the listening socket (bound, listening) and records the address it got.
 * @returns the fd, or a negative errno with err set */
static int open_listener(mb_http *h, const struct sockaddr_storage *ss, char *err, size_t errlen)
{
	const char *spec = h->cfg->http_listen;
	socklen_t sl = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "http_listen \"%s\": socket: %s", spec, strerror(e));
		return -e;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (const struct sockaddr *)ss, sl) != 0 || listen(fd, 511) != 0) {
		int e = errno;
		snprintf(err, errlen, "cannot listen on %s (http_listen): %s", spec, strerror(e));
		close(fd);
		return -e;
	}
	struct sockaddr_storage got;
	socklen_t gl = sizeof got;
	char ip[INET6_ADDRSTRLEN] = "?";
	if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0) {
		if (got.ss_family == AF_INET) {
			struct sockaddr_in *a = (struct sockaddr_in *)&got;
			inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
			h->port = ntohs(a->sin_port);
			snprintf(h->addr, sizeof h->addr, "%s:%d", ip, h->port);
		} else {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&got;
			inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
			h->port = ntohs(a->sin6_port);
			snprintf(h->addr, sizeof h->addr, "[%s]:%d", ip, h->port);
		}
	}
	return fd;
}

mb_http *mb_http_start(uv_loop_t *loop, const mb_config *cfg, const mb_http_callbacks *cb,
		       char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	int loopback = 0;
	char bound[INET6_ADDRSTRLEN + 2] = "";
	if (!cb || !cb->on_message) {
		snprintf(err, errlen, "mb_http_start: on_message callback is required");
		return NULL;
	}
	if (mb_http_parse_listen(cfg->http_listen, &ss, &loopback, err, errlen) != 0)
		return NULL;
	if (!cfg->http_tokens[0] && !loopback && !cfg->http_trust_proxy) {
		snprintf(err, errlen, "refusing to listen on %s without http_tokens; set http_trust_proxy=1 if an "
			 "authenticating proxy is in front", cfg->http_listen);
		return NULL;
	}
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		if (a->sin_addr.s_addr != htonl(INADDR_ANY))
			inet_ntop(AF_INET, &a->sin_addr, bound, sizeof bound);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		if (!IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr)) {
			bound[0] = '[';
			inet_ntop(AF_INET6, &a->sin6_addr, bound + 1, sizeof bound - 2);
			strcat(bound, "]");
		}
	}
	mb_http *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, errlen, "out of memory starting the HTTP transport");
		return NULL;
	}
	h->loop = loop;
	h->cfg = cfg;
	h->cb = *cb;
	h->max_body = (size_t)(cfg->http_max_body_bytes > 0 ? cfg->http_max_body_bytes : cfg->max_message_bytes);
	h->max_header = (size_t)cfg->http_max_header_bytes;
	h->read_timeout = (uint64_t)cfg->http_read_timeout_ms;
	h->idle_ms = (uint64_t)cfg->http_session_idle_ms;
	uint64_t m = h->read_timeout < h->idle_ms ? h->read_timeout : h->idle_ms;
	h->tick = m / 8 < 10 ? 10 : m / 8 > 1000 ? 1000 : m / 8;
	if (mb_http_policy_init(&h->pol, cfg, bound, err, errlen) != 0) {
		free(h);
		return NULL;
	}
	if (htab_init(&h->by_num, 64) || htab_init(&h->by_id, 64) || htab_init(&h->exchanges, 64)) {
		snprintf(err, errlen, "out of memory starting the HTTP transport");
		goto fail;
	}
	int fd = open_listener(h, &ss, err, errlen);
	if (fd < 0)
		goto fail;
	int rc = uv_tcp_init(loop, &h->listener);
	if (rc) {
		close(fd);
		snprintf(err, errlen, "http_listen \"%s\": %s", cfg->http_listen, uv_strerror(rc));
		goto fail;
	}
	h->listener.data = h;
	if ((rc = uv_tcp_open(&h->listener, fd)) != 0)
		close(fd);
	if (rc || (rc = uv_listen((uv_stream_t *)&h->listener, 511, on_connection)) != 0) {
		snprintf(err, errlen, "cannot listen on %s (http_listen): %s", cfg->http_listen, uv_strerror(rc));
		h->handles = 1; /* h is freed when the listener is closed (the caller's loop runs it) */
		h->closing = 1;
		uv_close((uv_handle_t *)&h->listener, on_handle_closed);
		return NULL;
	}
	h->handles = 3;
	uv_timer_init(loop, &h->sweeper);
	h->sweeper.data = h;
	uv_timer_start(&h->sweeper, on_sweep, h->tick, h->tick);
	uv_idle_init(loop, &h->deferred);
	h->deferred.data = h;
	h->next_heartbeat = uv_now(loop) + HEARTBEAT_MS;
	http_parser_settings_init(&h->settings);
	h->settings.on_message_begin = on_message_begin;
	h->settings.on_url = on_url;
	h->settings.on_header_field = on_header_field;
	h->settings.on_header_value = on_header_value;
	h->settings.on_headers_complete = on_headers_complete;
	h->settings.on_body = on_body;
	h->settings.on_message_complete = on_message_complete;
	mb_log(MB_LOG_INFO, "serving MCP over HTTP on http://%s/mcp (%s)", h->addr,
	       h->pol.ntokens ? "bearer tokens required" : loopback ? "no authentication: loopback only"
								   : "no authentication: http_trust_proxy=1");
	return h;
fail:
	free(h->by_num.b);
	free(h->by_id.b);
	free(h->exchanges.b);
	mb_http_policy_free(&h->pol);
	free(h);
	return NULL;
}

void mb_http_send(mb_http *h, uint64_t session_num, uint64_t exchange, int final, char *data,
		  size_t len)
{
	if (!h || h->closing || !data) {
		free(data);
		return;
	}
	while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
		len--;
	if (exchange) {
		hnode *x = htab_get(&h->exchanges, exchange);
		conn *c = x ? container_of(x, conn, xnode) : NULL;
		if (!c || c->state != C_BUSY || (session_num && c->xsession != session_num)) {
			h->st.messages_dropped++;
			free(data);
			return;
		}
		exchange_send(c, final, data, len);
		return;
	}
	if (session_num) {
		session *s = session_by_num(h, session_num);
		if (!s || !s->stream) {
			h->st.messages_dropped++;
			free(data);
			return;
		}
		sse_write(s->stream, NULL, 0, data, len, 0);
		return;
	}
	/* broadcast: a copy for every GET stream but the last, which takes data */
	size_t left = 0;
	for (conn *c = h->conns; c; c = c->next)
		left += c->state == C_STREAM;
	if (!left)
		h->st.messages_dropped++;
	for (conn *c = h->conns, *next; c && left; c = next) {
		next = c->next;
		if (c->state != C_STREAM)
			continue;
		char *copy = --left ? malloc(len ? len : 1) : data;
		if (!copy) {
			h->st.messages_dropped++;
			continue;
		}
		if (copy != data)
			memcpy(copy, data, len);
		else
			data = NULL;
		sse_write(c, NULL, 0, copy, len, 0);
	}
	free(data);
}

void mb_http_stats(mb_http *h, mb_http_stats_t *out)
{
	*out = h->st;
}

int mb_http_address(mb_http *h, char *buf, size_t len)
{
	if (!h)
		return -1;
	if (buf && len)
		snprintf(buf, len, "%s", h->addr);
	return h->port;
}

void mb_http_close(mb_http *h)
{
	if (!h || h->closing)
		return;
	h->closing = 1;
	uv_close((uv_handle_t *)&h->listener, on_handle_closed);
	uv_close((uv_handle_t *)&h->sweeper, on_handle_closed);
	uv_close((uv_handle_t *)&h->deferred, on_handle_closed);
	while (h->conns)
		conn_close(h->conns);
	while (h->nended) {
		uint64_t num = h->ended[--h->nended];
		if (h->cb.on_session_end)
			h->cb.on_session_end(h->cb.ud, num);
	}
	while (h->sessions)
		session_end(h, h->sessions, END_SHUTDOWN);
}
