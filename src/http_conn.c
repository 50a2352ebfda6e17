/* http_conn.c - the HTTP transport's connections: accepting, reading and the http_parser
 * callbacks that collect a request, pipelining, writes and responses, shutdown and close.
 *
 * Each accepted socket is a `conn` with its own http_parser. Bytes are parsed straight from one
 * shared read buffer; only what a request needs is copied out: the URL, the eight headers the
 * transport looks at (fixed slots in the conn, bounded; mb_http_hdr_def) and the body (a
 * per-connection buffer reused across requests). The header checks run at headers-complete
 * (http.c), so a rejected request's body is discarded, never buffered. The parser is paused after
 * every request; while a response is pending (an exchange, a GET stream) further pipelined bytes
 * wait in conn->pend (bounded; reading stops beyond it) and are parsed in order once the response
 * ends, from an idle handle rather than from inside the host's mb_http_send (so the host is never
 * re-entered). State machine: IDLE -> READING -> (answered at once -> IDLE | BUSY with an
 * exchange | STREAM for a GET) -> IDLE, or DRAIN (answer written, then shutdown, discard input
 * until EOF) -> CLOSED.
 *
 * Writes. One write per response or event with 1-3 iovecs: a head built in the write request
 * (from a free list, so a keep-alive request costs no allocation here) and the host's buffer
 * itself, freed when written; tried at once (uv_try_write), queued with uv_write only for what
 * the socket did not take (mb_http_wreq_send).
 *
 * Near the bottom of the transport: http_session.c (sessions, exchanges, SSE) and http.c
 * (routing, the sweep, the public API) build on this file and it calls neither; it calls only
 * http_replay.c (the replay buffer). Closing a connection ends the exchange it holds - or, when
 * the exchange answers with a resumable SSE stream, parks it on its replay record, since a
 * disconnect is not a cancellation - so mb_http_exchange_finish and mb_http_exchange_park live
 * here. Everything runs on the loop thread (http.h).
 */
#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http_int.h"
#include "log.h"

#define PEND_MAX 65536            /* bytes read ahead while a response is pending */
#define WQ_PAUSE (1u << 20)       /* queued output above which pipelined requests wait */
#define DRAIN_MS 2000             /* linger for a closing connection's unread input */
#define BODY_KEEP 65536           /* body buffer kept between requests up to this size */
#define FREE_WREQS 256

const mb_http_hdr mb_http_hdr_def[NHDR] = {
#define HD(name, f) { name, offsetof(hvals, f), sizeof(((hvals *)0)->f) }
	HD("host", host), HD("origin", origin), HD("accept", accept), HD("content-type", ctype),
	HD("authorization", auth), HD("mcp-session-id", session), HD("mcp-protocol-version", proto),
	HD("expect", expect), HD("mcp-method", mmethod), HD("mcp-name", mname),
	HD("mcp-param-", mparam), /* a prefix: every Mcp-Param-<Name> header */
	HD("last-event-id", lastid),
#undef HD
};

/* ---- small helpers --------------------------------------------------------------------------- */

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

/* ---- write requests -------------------------------------------------------------------------- */

wreq *mb_http_wreq_get(mb_http *h, conn *c)
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
	w->own_len = 0;
	w->qbytes = 0;
	return w;
}

/* ---- the backlog ------------------------------------------------------------------------------ */

/* The bytes a write request holds for a client that did not take them at once. Counted when the
 * request is queued and uncounted when it is freed (written, failed, or its connection closed:
 * libuv then calls on_write with UV_ECANCELED), whatever happens in between. */
static void backlog_add(mb_http *h, conn *c, wreq *w)
{
	if (!w->own_len)
		return;
	w->qbytes = w->own_len;
	w->qslot = c->tslot;
	h->st.backlog_bytes += w->qbytes;
	h->tenants[w->qslot].bytes += w->qbytes;
	if (h->st.backlog_bytes > h->st.backlog_peak)
		h->st.backlog_peak = h->st.backlog_bytes;
}

static void backlog_sub(mb_http *h, wreq *w)
{
	if (!w->qbytes)
		return;
	h->st.backlog_bytes -= w->qbytes;
	h->tenants[w->qslot].bytes -= w->qbytes;
	w->qbytes = 0;
}

uint32_t mb_http_tenant_slot(const mb_http *h, const char *tenant)
{
	const mb_http_policy *p = &h->pol;
	if (!p->ntokens || !tenant || (const void *)tenant < (const void *)p->tokens ||
	    (const void *)tenant >= (const void *)(p->tokens + p->ntokens))
		return 0; /* "default" (no tokens) */
	size_t i = (size_t)((const char *)tenant - (const char *)p->tokens) / sizeof *p->tokens;
	return p->tokens[i].slot;
}

uint32_t mb_http_oauth_slot(mb_http *h, conn *c, const char *tenant)
{
	if (c->oslot >= h->oauth_first && c->oslot < h->ntenants &&
	    strcmp(h->tenants[c->oslot].name, tenant) == 0)
		return c->oslot; /* the tenant of this conn's last request */
	uint32_t free_slot = 0;
	for (uint32_t i = h->oauth_first; i < h->ntenants; i++) {
		struct mb_http_tenant_backlog *t = &h->tenants[i];
		if (strcmp(t->name, tenant) == 0)
			return c->oslot = i;
		if (!free_slot && !t->conns && !t->bytes)
			free_slot = i;
	}
	if (!free_slot)
		return h->oauth_slot; /* oauth_backlog_tenants are all in use */
	snprintf(h->tenants[free_slot].name, sizeof h->tenants[free_slot].name, "%s", tenant);
	return c->oslot = free_slot;
}

void mb_http_set_slot(conn *c, uint32_t slot)
{
	mb_http *h = c->h;
	if (c->tslot >= h->oauth_first && c->tslot < h->ntenants)
		h->tenants[c->tslot].conns--;
	c->tslot = slot;
	if (slot >= h->oauth_first && slot < h->ntenants)
		h->tenants[slot].conns++;
}

static void fmt_bytes(char *buf, size_t n, uint64_t v)
{
	snprintf(buf, n, "%llu", (unsigned long long)v);
}

int mb_http_backlog_admit(conn *c, size_t len, char *err, size_t errlen)
{
	mb_http *h = c->h;
	const struct mb_http_tenant_backlog *t = &h->tenants[c->tslot];
	char a[24], b[24], m[24];
	if (len > h->backlog_max || h->st.backlog_bytes > h->backlog_max - len) {
		fmt_bytes(a, sizeof a, len);
		fmt_bytes(b, sizeof b, h->st.backlog_bytes);
		fmt_bytes(m, sizeof m, h->backlog_max);
		if (err && errlen)
			snprintf(err, errlen, "the answer (%s bytes) was not sent: %s bytes of earlier messages wait for "
				 "clients that have not read them, and max_backlog_bytes=%s bounds what the server "
				 "holds for its clients; read pending answers, ask for a smaller result, or retry "
				 "later", a, b, m);
		goto refused;
	}
	if ((h->pol.ntokens || h->oauth) && (len > h->backlog_tenant_max || t->bytes > h->backlog_tenant_max - len)) {
		fmt_bytes(a, sizeof a, len);
		fmt_bytes(b, sizeof b, t->bytes);
		fmt_bytes(m, sizeof m, h->backlog_tenant_max);
		if (err && errlen)
			snprintf(err, errlen, "the answer (%s bytes) was not sent: %s bytes of earlier messages wait for "
				 "clients of tenant \"%s\" that have not read them, and max_backlog_tenant_bytes=%s "
				 "bounds what the server holds for one tenant; read pending answers, ask for a "
				 "smaller result, or retry later", a, b, t->name, m);
		goto refused;
	}
	return 0;
refused:
	h->st.backlog_refused++;
	return -ENOBUFS;
}

void mb_http_wreq_put(mb_http *h, wreq *w)
{
	backlog_sub(h, w);
	free(w->own);
	if (h->nfree_w < FREE_WREQS && !h->closing) {
		w->next = h->free_w;
		h->free_w = w;
		h->nfree_w++;
	} else {
		free(w);
	}
}

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
	mb_http_wreq_put(h, w);
	if (c->state == C_CLOSED)
		return;
	if (status < 0) {
		mb_http_conn_close(c);
		return;
	}
	if (c->close_after && c->writes == 0) {
		do_shutdown(c);
		return;
	}
	if (c->poff < c->plen && can_parse(c))
		schedule_drive(c);
}

/* Writes w (bufs[0..n)): at once when the socket takes it all, which is the usual case (then w
 * and its buffer are freed here and nothing is left to finish); otherwise what is left is queued
 * with uv_write and finished in on_write. Trying first spares a keep-alive response libuv's
 * write request: uv_write's completion stops POLLOUT, and that costs an epoll_ctl at the next
 * poll even when POLLOUT was never started (one system call per response). uv_try_write refuses
 * while earlier writes wait, so the order holds. On failure the connection is closed; w and its
 * buffer are freed. */
void mb_http_wreq_send(conn *c, wreq *w, unsigned n)
{
	mb_http *h = c->h;
	size_t total = 0;
	for (unsigned i = 0; i < n; i++)
		total += w->bufs[i].len;
	h->st.bytes_out += total;
	int k = uv_try_write((uv_stream_t *)&c->tcp, w->bufs, n);
	if (k > 0 && (size_t)k == total) {
		mb_http_wreq_put(h, w);
		return;
	}
	if (k > 0) { /* the socket took part: queue the rest */
		size_t done = (size_t)k;
		unsigned first = 0;
		while (done >= w->bufs[first].len)
			done -= w->bufs[first++].len;
		w->bufs[first].base += done;
		w->bufs[first].len -= done;
		if (first)
			memmove(w->bufs, w->bufs + first, (n - first) * sizeof w->bufs[0]);
		n -= first;
	} else if (k != UV_EAGAIN && k != UV_ENOSYS) {
		mb_http_wreq_put(h, w);
		mb_http_conn_close(c);
		return;
	}
	c->writes++;
	backlog_add(h, c, w);
	int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, w->bufs, n, on_write);
	if (rc) {
		c->writes--;
		mb_http_wreq_put(h, w);
		mb_http_conn_close(c);
	}
}

/* ---- responses ------------------------------------------------------------------------------- */

void mb_http_write_head(conn *c, const char *head, size_t n)
{
	wreq *w = mb_http_wreq_get(c->h, c);
	if (!w) {
		mb_http_conn_close(c);
		return;
	}
	memcpy(w->head, head, n);
	w->bufs[0] = uv_buf_init(w->head, (unsigned)n);
	mb_http_wreq_send(c, w, 1);
}

void mb_http_stream_detach(conn *c)
{
	mb_http *h = c->h;
	session *s = session_by_num(h, c->ssession);
	if (s && s->stream == c)
		s->stream = NULL;
	else if (s)
		s->resumed--;
	if (s)
		s->last_used = uv_now(h->loop);
	h->st.streams_active--;
}

void mb_http_count(conn *c, int status)
{
	mb_http *h = c->h;
	int m = c->have_method ? c->method : M_OTHER;
	h->st.requests[m][mb_http_status_index(status)]++;
	h->st.requests_total++;
}

/* Status line and the headers every response carries. */
void mb_http_head_start(conn *c, hb *b, int status, const char *ctype)
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
		hb_str(b, "\r\nAccess-Control-Expose-Headers: Mcp-Session-Id, WWW-Authenticate\r\nVary: Origin\r\n");
	}
}

void mb_http_head_end(conn *c, hb *b)
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
void mb_http_respond(conn *c, int status, const char *ctype, const char *extra, const char *body,
		    size_t blen, char *own)
{
	mb_http *h = c->h;
	mb_http_count(c, status);
	wreq *w = mb_http_wreq_get(h, c);
	if (!w) {
		free(own);
		mb_http_conn_close(c);
		return;
	}
	hb b = { w->head, 0, sizeof w->head };
	mb_http_head_start(c, &b, status, ctype);
	if (extra)
		hb_str(&b, extra);
	if (status != 204) {
		hb_str(&b, "Content-Length: ");
		hb_u64(&b, blen, 0);
		hb_str(&b, "\r\n");
	}
	mb_http_head_end(c, &b);
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
			mb_http_wreq_put(h, w);
			mb_http_conn_close(c);
			return;
		}
		if (own != body)
			memcpy(own, body, blen);
		w->own = own;
		w->own_len = blen;
		w->bufs[1] = uv_buf_init(own, (unsigned)blen);
		n = 2;
	} else {
		free(own);
	}
	w->bufs[0] = uv_buf_init(w->head, (unsigned)b.n);
	mb_http_wreq_send(c, w, n);
}

void mb_http_respond_error(conn *c, int status, int rpc, const char *msg, const char *extra)
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
	mb_http_respond(c, status, "application/json", extra, body, b.n, NULL);
}

/* The response to the current request is queued: wait for the next one or close. */
void mb_http_request_done(conn *c)
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

void mb_http_answer_reject(conn *c)
{
	mb_http_respond_error(c, c->reject, c->reject_rpc, c->msg, c->reject_hdr);
}

/* ---- the exchange a connection holds -------------------------------------------------------- */

/* Here rather than in http_session.c because closing a connection ends (or parks) its exchange. */
void mb_http_exchange_finish(conn *c)
{
	mb_http *h = c->h;
	htab_del(&h->exchanges, &c->xnode);
	h->st.exchanges_active--;
	session *s = c->xsession == MB_HTTP_SESSIONLESS ? NULL : session_by_num(h, c->xsession);
	if (s) {
		s->exchanges--;
		s->last_used = uv_now(h->loop);
	}
	c->xsession = 0;
	if (c->rs) {
		c->rs->done = 1; /* nothing more comes on it (normally its final message is recorded) */
		mb_http_replay_release(h, c->rs);
	}
}

/* The exchange stays counted in exchanges_active until its final message or its record goes; it
 * no longer holds its session open (the session's idle expiry bounds it). */
void mb_http_exchange_park(conn *c)
{
	mb_http *h = c->h;
	rstream *r = c->rs;
	htab_del(&h->exchanges, &c->xnode);
	session *s = session_by_num(h, c->xsession);
	if (s) {
		s->exchanges--;
		s->last_used = uv_now(h->loop);
	}
	c->xsession = 0;
	mb_http_replay_release(h, r);
	mb_http_replay_park(h, r);
}

/* ---- parser callbacks ------------------------------------------------------------------------ */

int mb_http_bad(conn *c, int status, const char *fmt, const char *a)
{
	c->err_status = status;
	snprintf(c->msg, sizeof c->msg, fmt, a ? a : "");
	return -1;
}

int mb_http_on_message_begin(http_parser *p)
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
	c->cors = c->expect_continue = c->has_body = c->modern = 0;
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
		((char *)&c->hv)[mb_http_hdr_def[i].off] = 0;
	c->tenant = NULL;
	mb_http_set_slot(c, 0);
	c->sess_num = 0;
	c->blen = 0;
	mb_oauth_unwait(c->h->oauth, &c->aw);
	c->oauth = c->auth_wait = 0;
	c->rights = 0;
	c->otenant[0] = c->osub[0] = 0;
	return 0;
}

static int header_budget(conn *c, size_t n)
{
	c->hbytes += n;
	if (c->hbytes > c->h->max_header) {
		char num[32];
		snprintf(num, sizeof num, "%zu", c->h->max_header);
		return mb_http_bad(c, 431, "Request Header Fields Too Large: above http_max_header_bytes=%s", num);
	}
	return 0;
}

int mb_http_on_url(http_parser *p, const char *at, size_t n)
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
int mb_http_on_header_field(http_parser *p, const char *at, size_t n)
{
	conn *c = p->data;
	for (size_t i = 0; i < n; i++)
		if (!is_tchar((unsigned char)at[i]))
			return mb_http_bad(c, 400, "Bad Request: a header name holds a byte that is not a token "
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

int mb_http_on_header_value(http_parser *p, const char *at, size_t n)
{
	conn *c = p->data;
	/* http_parser reports a value's last piece at its line end, with at[n] the CR (or bare LF);
	 * a piece of the same value after that is a continuation line (obs-fold), which it joins
	 * without the space RFC 9112 5.2 asks for. Refused (the RFC's other choice). */
	if (c->in_value && c->value_ended)
		return mb_http_bad(c, 400, "Bad Request: a header line continued on the next line (obs-fold, "
			   "RFC 9112) is not accepted%s", "");
	if (at + n < c->exec_end && (at[n] == '\r' || at[n] == '\n'))
		c->value_ended = 1;
	if (!c->in_value) { /* first piece of this value: which header is it? */
		c->in_value = 1;
		c->fidx = -1;
		if (!c->fover)
			for (int i = 0; i < NHDR; i++)
				if (i != H_MPARAM && strlen(mb_http_hdr_def[i].name) == c->flen &&
				    strncasecmp(mb_http_hdr_def[i].name, c->fname, c->flen) == 0) {
					c->fidx = i;
					break;
				}
		int param = 0;
		if (c->fidx < 0 && !c->fover && c->flen > 10 && strncasecmp(c->fname, "mcp-param-", 10) == 0) {
			/* Mcp-Param-<Name>: one "Name:value" line each in mparam */
			size_t need = c->flen - 10 + 2, have = c->hlen[H_MPARAM];
			char *v = c->hv.mparam;
			if (c->hcount[H_MPARAM] < 255)
				c->hcount[H_MPARAM]++;
			if (c->hover[H_MPARAM] || have + need >= sizeof c->hv.mparam) {
				c->hover[H_MPARAM] = 1;
			} else {
				if (have)
					v[have++] = '\n';
				memcpy(v + have, c->fname + 10, c->flen - 10);
				have += c->flen - 10;
				v[have++] = ':';
				v[have] = 0;
				c->hlen[H_MPARAM] = (uint16_t)have;
			}
			c->fidx = H_MPARAM;
			param = 1;
		}
		if (c->fidx >= 0 && !param) {
			int i = c->fidx;
			if (c->hcount[i] < 255)
				c->hcount[i]++;
			if (c->hcount[i] > 1 && i == H_ACCEPT && !c->hover[i]) { /* repeated Accept: join */
				if ((size_t)c->hlen[i] + 1 >= mb_http_hdr_def[i].cap)
					c->hover[i] = 1;
				else {
					char *v = (char *)&c->hv + mb_http_hdr_def[i].off;
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
	if (i < 0 || c->hover[i] || (c->hcount[i] > 1 && i != H_ACCEPT && i != H_MPARAM))
		return 0;
	if (c->hlen[i] + n >= mb_http_hdr_def[i].cap) {
		c->hover[i] = 1;
		return 0;
	}
	char *v = (char *)&c->hv + mb_http_hdr_def[i].off;
	memcpy(v + c->hlen[i], at, n);
	c->hlen[i] = (uint16_t)(c->hlen[i] + n);
	v[c->hlen[i]] = 0;
	return 0;
}

int mb_http_on_body(http_parser *p, const char *at, size_t n)
{
	conn *c = p->data;
	mb_http *h = c->h;
	if (c->reject || c->route != R_MCP || c->method != M_POST)
		return 0; /* discarded */
	if (c->blen + n > h->max_body) {
		char num[32];
		snprintf(num, sizeof num, "%zu", h->max_body);
		return mb_http_bad(c, 413, "Content Too Large: the body is above http_max_body_bytes=%s", num);
	}
	if (c->blen + n + 1 > c->bcap) {
		size_t cap = c->bcap ? c->bcap : 4096;
		while (cap < c->blen + n + 1)
			cap *= 2;
		if (!(p->flags & F_CHUNKED) && cap > p->content_length + c->blen + n + 1)
			cap = (size_t)p->content_length + c->blen + n + 1; /* exact when the length is known */
		char *nb = realloc(c->body, cap);
		if (!nb)
			return mb_http_bad(c, 503, "Service Unavailable: out of memory for the request body%s", NULL);
		c->body = nb;
		c->bcap = cap;
	}
	memcpy(c->body + c->blen, at, n);
	c->blen += n;
	return 0;
}

/* ---- connections ----------------------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *hd);

/* A request that cannot be parsed further: answer and close. */
static void parse_failed(conn *c, enum http_errno e)
{
	c->keep_alive = 0;
	if (c->fatal && c->reject)
		mb_http_answer_reject(c);
	else if (c->err_status)
		mb_http_respond_error(c, c->err_status, -32000, c->msg, NULL);
	else if (e == HPE_HEADER_OVERFLOW)
		mb_http_respond_error(c, 431, -32000, "Request Header Fields Too Large", NULL);
	else {
		char m[160];
		snprintf(m, sizeof m, "Bad Request: malformed HTTP (%s)", http_errno_description(e));
		mb_http_respond_error(c, 400, -32000, m, NULL);
	}
	mb_http_request_done(c);
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
		mb_http_conn_close(c);
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
		mb_http_conn_close(c);
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
		mb_http_conn_close(c);
}

static void do_shutdown(conn *c)
{
	c->close_after = 0;
	if (c->shut)
		return;
	c->shut = 1;
	c->shutreq.data = c;
	if (uv_shutdown(&c->shutreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
		mb_http_conn_close(c);
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

void mb_http_conn_close(conn *c)
{
	mb_http *h = c->h;
	if (c->state == C_CLOSED)
		return;
	if (c->state == C_BUSY && c->xsession) {
		uint64_t x = c->xnode.key;
		int cancel = c->xsession == MB_HTTP_SESSIONLESS;
		if (c->rs && !c->rs->done && !h->closing)
			mb_http_exchange_park(c); /* the host's later messages are kept for a resume */
		else
			mb_http_exchange_finish(c); /* the host may still send for it: dropped */
		if (cancel && !h->closing)
			mb_http_later(h, CLOSED_LATER, x); /* 2026-07-28: a disconnect cancels */
	}
	if (c->state == C_STREAM)
		mb_http_stream_detach(c);
	mb_oauth_unwait(h->oauth, &c->aw); /* a token that waited for the issuer's keys */
	if (c->rs)
		mb_http_replay_release(h, c->rs); /* the stream stays resumable */
	c->state = C_CLOSED;
	mb_http_set_slot(c, 0);
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

void mb_http_maybe_free(mb_http *h)
{
	if (h->handles)
		return;
	while (h->free_w) {
		wreq *w = h->free_w;
		h->free_w = w->next;
		free(w);
	}
	free(h->tenants);
	free(h->by_num.b);
	free(h->by_id.b);
	free(h->exchanges.b);
	free(h->parked.b);
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
	mb_http_maybe_free(h);
}

static void schedule_drive(conn *c)
{
	if (c->drive_queued || c->state == C_CLOSED)
		return;
	c->drive_queued = 1;
	c->drive_next = c->h->drive;
	c->h->drive = c;
	uv_idle_start(&c->h->deferred, mb_http_on_deferred);
}

void mb_http_later(mb_http *h, int kind, uint64_t v)
{
	if (h->nended == h->ended_cap) {
		size_t cap = h->ended_cap ? h->ended_cap * 2 : 8;
		struct mb_http_later *e = realloc(h->ended, cap * sizeof *e);
		if (!e) {
			mb_log(MB_LOG_ERROR, "http: out of memory; %s %llu ends without notice",
			       kind == END_LATER ? "session" : "request", (unsigned long long)v);
			return;
		}
		h->ended = e;
		h->ended_cap = cap;
	}
	h->ended[h->nended++] = (struct mb_http_later){ kind, v };
	uv_idle_start(&h->deferred, mb_http_on_deferred);
}

/* Runs what must not happen inside the host's own calls: parsing pipelined requests and
 * on_session_end for failed initializations. */
void mb_http_on_deferred(uv_idle_t *idle)
{
	mb_http *h = idle->data;
	uv_idle_stop(idle);
	while (h->nended) {
		struct mb_http_later e = h->ended[--h->nended];
		if (e.kind == END_LATER && h->cb.on_session_end)
			h->cb.on_session_end(h->cb.ud, e.v);
		else if (e.kind == CLOSED_LATER && h->cb.on_exchange_closed)
			h->cb.on_exchange_closed(h->cb.ud, e.v);
	}
	while (h->drive) {
		conn *c = h->drive;
		h->drive = c->drive_next;
		c->drive_queued = 0;
		conn_drive(c);
	}
}

void mb_http_on_connection(uv_stream_t *srv, int status)
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
		mb_http_conn_close(c);
}
