/* http_session.c - the HTTP transport's sessions, exchanges, SSE and resumption.
 *
 * Sessions. An `initialize` POST without Mcp-Session-Id creates one (mb_http_session_new): 32
 * random bytes of id, sent as 64 hex digits after "<replica_id>." when that option is set (so a
 * load balancer can send the session back to this replica: docs/deploy.md), and a number for
 * the host. Sessions are found by
 * their id (hash table keyed by its first 8 bytes, full compare with sodium_memcmp) and by
 * number (for mb_http_send). A session ends on DELETE, idle expiry (the sweep in http.c), a
 * failed initialize and shutdown (mb_http_session_end); the end of a failed initialize reaches
 * the host later, from the loop, because it happens inside the host's own mb_http_send.
 *
 * Exchanges. A POST on a session gets an exchange number registered in a hash table (exchange
 * -> conn; handle_post in http.c); the host answers through mb_http_send, which looks the
 * exchange up and calls mb_http_exchange_send: one JSON response, or a switch to SSE (chunked)
 * at the first message that is not final. A conn that closes unregisters its exchange
 * (mb_http_exchange_finish, in http_conn.c), so late host messages are dropped - unless the
 * answer is a resumable SSE stream: then the exchange is parked on its replay record
 * (mb_http_exchange_park) and mb_http_parked_send keeps what the host sends.
 *
 * SSE. Events are written one uv_write each (mb_http_sse_write, mb_http_sse_event), with chunked
 * framing unless the request was HTTP/1.0; a client that lets 64 MiB queue up is cut.
 *
 * Resumption. A stream that starts (an SSE answer, a GET stream: mb_http_stream_open) gets a
 * replay record (http_replay.c) and, for 2025-11-25 clients, a priming event; each event then
 * carries an id and is kept (mb_http_stream_send, mb_http_session_push). mb_http_resume answers
 * a GET with Last-Event-ID: the kept events after it, then the live stream on that connection
 * (a connection still writing the stream is closed: the client has left it).
 *
 * Builds on http_conn.c (writes, responses, close) and http_replay.c; http.c builds on them.
 * Everything runs on the loop thread (http.h).
 */
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"
#include "log.h"

#define WQ_MAX ((size_t)64 << 20) /* queued output above which a client that does not read is cut */

/* ---- SSE ------------------------------------------------------------------------------------- */

static const char sse_prefix[] = "event: message\ndata: ";

/* Writes one SSE event carrying data (taken), after head when given (the complete response
 * head), and the end of the stream when last. data NULL: a comment (heartbeat), or with last
 * just the end of the stream. Chunked framing unless the request was HTTP/1.0. */
void mb_http_sse_write(conn *c, const char *head, size_t hlen, char *data, size_t len, int last)
{
	mb_http_sse_event(c, head, hlen, NULL, data, len, last);
}

/* The same with an event id (NULL: none) between "event: message" and "data:". */
void mb_http_sse_event(conn *c, const char *head, size_t hlen, const char *id, char *data, size_t len,
		       int last)
{
	mb_http *h = c->h;
	if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > WQ_MAX) {
		mb_log(MB_LOG_WARNING, "http: a client is not reading its stream (over %zu bytes queued); closing it",
		       WQ_MAX);
		free(data);
		h->st.messages_dropped++;
		mb_http_conn_close(c);
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
			mb_http_conn_close(c);
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
	wreq *w = mb_http_wreq_get(h, c);
	if (!w) {
		free(data);
		mb_http_conn_close(c);
		return;
	}
	int chunked = !c->http10;
	hb b = { w->head, 0, sizeof w->head };
	if (head)
		hb_put(&b, head, hlen);
	unsigned n = 1;
	const char *tail = NULL;
	if (data) {
		size_t idlen = id ? 4 + strlen(id) + 1 : 0; /* "id: " id "\n" */
		if (chunked) {
			hb_u64(&b, sizeof sse_prefix - 1 + idlen + len + 2, 1);
			hb_str(&b, "\r\n");
		}
		if (id) {
			hb_str(&b, "event: message\nid: ");
			hb_str(&b, id);
			hb_str(&b, "\n");
			hb_str(&b, sse_prefix + 15); /* "data: " */
		} else {
			hb_str(&b, sse_prefix);
		}
		w->own = data;
		w->own_len = len;
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
		mb_http_wreq_put(h, w);
		return;
	}
	mb_http_wreq_send(c, w, n);
}

/* Builds the head of an SSE response into b (status 200). */
void mb_http_sse_head(conn *c, hb *b, const char *extra)
{
	mb_http_count(c, 200);
	mb_http_head_start(c, b, 200, "text/event-stream");
	hb_str(b, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
	if (extra)
		hb_str(b, extra);
	if (!c->http10)
		hb_str(b, "Transfer-Encoding: chunked\r\n");
	else
		c->keep_alive = 0; /* HTTP/1.0: the stream ends with the connection */
	mb_http_head_end(c, b);
}

/* ---- event ids and resumption ---------------------------------------------------------------- */

/* SEP-1699 (2025-11-25): a priming event, id and empty data, opens a resumable stream. Older
 * clients may choke on empty data (the SDKs' servers send it from 2025-11-25 on too). */
static int wants_priming(conn *c)
{
	return c->hcount[H_PROTO] && !c->hover[H_PROTO] && strcmp(hval(c, H_PROTO), "2025-11-25") >= 0;
}

/* Appends SSE text (complete events) to a head being built, framed as a chunk unless HTTP/1.0. */
static void sse_text(conn *c, hb *b, const char *text, size_t n)
{
	if (!c->http10) {
		hb_u64(b, n, 1);
		hb_str(b, "\r\n");
	}
	hb_put(b, text, n);
	if (!c->http10)
		hb_str(b, "\r\n");
}

void mb_http_stream_open(conn *c, session *s, uint64_t exchange, hb *b)
{
	mb_http *h = c->h;
	rstream *r = s ? mb_http_replay_open(h, s, exchange) : NULL;
	if (!r)
		return;
	r->c = c;
	c->rs = r;
	if (wants_priming(c)) {
		char id[MB_HTTP_EVENT_ID_MAX], ev[MB_HTTP_EVENT_ID_MAX + 48];
		mb_http_replay_id(r, 0, id);
		int n = snprintf(ev, sizeof ev, "id: %s\nretry: %d\ndata: \n\n", id, MB_HTTP_SSE_RETRY_MS);
		sse_text(c, b, ev, (size_t)n);
	}
}

void mb_http_stream_send(conn *c, const char *head, size_t hlen, char *data, size_t len, int last)
{
	rstream *r = c->rs;
	if (!r) {
		mb_http_sse_write(c, head, hlen, data, len, last);
		return;
	}
	char id[MB_HTTP_EVENT_ID_MAX];
	mb_http_replay_id(r, mb_http_replay_add(c->h, r, data, len, last), id);
	mb_http_sse_event(c, head, hlen, id, data, len, last);
}

/* A GET stream's response ends (session gone; a resumed stream's final message written): what
 * the connection holds is let go, and the connection waits for its next request. */
static void stream_end(conn *c, int write_end)
{
	mb_http *h = c->h;
	if (write_end) {
		mb_http_sse_write(c, NULL, 0, NULL, 0, 1); /* HTTP/1.0: nothing; mb_http_request_done closes */
		if (c->state != C_STREAM)
			return; /* closed: mb_http_conn_close did what follows */
	}
	mb_http_stream_detach(c);
	c->ssession = 0;
	if (c->rs)
		mb_http_replay_release(h, c->rs);
	mb_http_request_done(c);
}

void mb_http_parked_send(mb_http *h, rstream *r, int final, char *data, size_t len)
{
	conn *c = r->c; /* a GET that resumed the stream, or NULL */
	uint64_t seq = mb_http_replay_add(h, r, data, len, final);
	if (final)
		mb_http_replay_unpark(h, r);
	if (!c) {
		free(data);
		return;
	}
	char id[MB_HTTP_EVENT_ID_MAX];
	mb_http_replay_id(r, seq, id);
	mb_http_sse_event(c, NULL, 0, id, data, len, final);
	if (final && c->state == C_STREAM)
		stream_end(c, 0);
}

int mb_http_session_listens(const session *s)
{
	return (s->rp.get && !s->rp.get->done) || s->stream;
}

conn *mb_http_session_writer(const session *s)
{
	rstream *r = s->rp.get;
	if (r && !r->done)
		return r->c;
	return s->stream;
}

int mb_http_session_push(mb_http *h, session *s, char *data, size_t len)
{
	rstream *r = s->rp.get;
	if (r && !r->done) {
		conn *c = r->c;
		uint64_t seq = mb_http_replay_add(h, r, data, len, 0);
		if (!c) { /* kept for the client's resume */
			free(data);
			return 0;
		}
		char id[MB_HTTP_EVENT_ID_MAX];
		mb_http_replay_id(r, seq, id);
		mb_http_sse_event(c, NULL, 0, id, data, len, 0);
		return 0;
	}
	if (s->stream) {
		mb_http_sse_write(s->stream, NULL, 0, data, len, 0);
		return 0;
	}
	h->st.messages_dropped++;
	free(data);
	return -1;
}

void mb_http_resume(conn *c, session *s)
{
	mb_http *h = c->h;
	const char *v = hval(c, H_LASTID);
	char m[320];
	rstream *r = NULL;
	uint64_t after = 0;
	int rc = h->replay_max ? mb_http_replay_find(s, v, c->hlen[H_LASTID], &r, &after) : -ENOENT;
	if (rc == -EINVAL) {
		snprintf(m, sizeof m, "Bad Request: Last-Event-ID \"%s\" is not an event id of this server", v);
		mb_http_respond_error(c, 400, -32000, m, NULL);
		return;
	}
	if (rc == -ENOENT) {
		if (!h->replay_max)
			snprintf(m, sizeof m, "Conflict: cannot resume from Last-Event-ID \"%s\": resumption is off "
				 "(http_replay_bytes=0)", v);
		else
			snprintf(m, sizeof m, "Conflict: cannot resume from Last-Event-ID \"%s\": no stream of this "
				 "session has that event (another session's, or forgotten)", v);
		mb_http_respond_error(c, 409, -32000, m, NULL);
		return;
	}
	if (rc == -ERANGE) {
		snprintf(m, sizeof m, "Conflict: cannot resume from Last-Event-ID \"%s\": the events after it "
			 "were dropped from the session's replay buffer (http_replay_bytes=%zu)", v, h->replay_max);
		mb_http_respond_error(c, 409, -32000, m, NULL);
		return;
	}
	revent *e = r->head;
	while (e && e->seq <= after)
		e = e->next;
	if (r->done && !e) { /* the stream ended and the client has it all: stop reconnecting */
		r->idle_since = uv_now(h->loop);
		mb_http_respond(c, 204, NULL, NULL, NULL, 0, NULL);
		return;
	}
	if (r->c) /* the client left that connection (it may not know yet): this one takes over */
		mb_http_conn_close(r->c);
	if (!r->done && !r->exchange && s->stream) { /* cannot happen: a GET stream has its record */
		mb_http_respond_error(c, 409, -32000, "Conflict: this session already has an open GET stream", NULL);
		return;
	}
	char head[HEAD_MAX];
	hb b = { head, 0, sizeof head - 256 };
	mb_http_sse_head(c, &b, NULL);
	h->st.streams_resumed++;
	s->last_used = uv_now(h->loop);
	if (!e)
		mb_http_write_head(c, head, b.n);
	for (int first = 1; e && c->state != C_CLOSED; e = e->next, first = 0) {
		char id[MB_HTTP_EVENT_ID_MAX], m[512];
		if (mb_http_backlog_admit(c, e->len, m, sizeof m) != 0) {
			/* the client resumes while it does not read: it may try again later */
			mb_log(MB_LOG_NOTICE, "http: a resumed stream is cut: %s", m);
			mb_http_conn_close(c);
			return;
		}
		char *copy = malloc(e->len ? e->len : 1);
		if (!copy) {
			mb_http_conn_close(c);
			return;
		}
		memcpy(copy, e->data, e->len);
		mb_http_replay_id(r, e->seq, id);
		mb_http_sse_event(c, first ? head : NULL, first ? b.n : 0, id, copy, e->len, r->done && !e->next);
	}
	if (c->state == C_CLOSED)
		return;
	if (r->done) { /* replayed to its end: the response is complete (request_done follows) */
		r->idle_since = uv_now(h->loop);
		return;
	}
	c->state = C_STREAM;
	c->ssession = s->num;
	c->rs = r;
	r->c = c;
	h->st.streams_active++;
	if (r == s->rp.get)
		s->stream = c;
	else
		s->resumed++;
}

/* ---- sessions -------------------------------------------------------------------------------- */

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

session *mb_http_session_by_id(mb_http *h, const char *hex, size_t len)
{
	unsigned char raw[32];
	size_t n = 0;
	/* an id minted by another replica (or by this one under another replica_id) is not ours */
	size_t rl = strlen(h->cfg->replica_id);
	if (rl) {
		if (len != rl + 1 + 64 || memcmp(hex, h->cfg->replica_id, rl) != 0 || hex[rl] != '.')
			return NULL;
		hex += rl + 1;
		len -= rl + 1;
	}
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

session *mb_http_session_new(mb_http *h, const char *tenant)
{
	session *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	randombytes_buf(s->raw, sizeof s->raw);
	size_t rl = strlen(h->cfg->replica_id);
	if (rl) {
		memcpy(s->id, h->cfg->replica_id, rl);
		s->id[rl++] = '.';
	}
	sodium_bin2hex(s->id + rl, sizeof s->id - rl, s->raw, sizeof s->raw);
	s->num = ++h->next_session;
	snprintf(s->tenant, sizeof s->tenant, "%s", tenant);
	s->last_used = uv_now(h->loop);
	mb_http_replay_init(s);
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

void mb_http_session_end(mb_http *h, session *s, int how)
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
	/* its GET streams end (the session's, and POST streams resumed on a GET); a POST still
	 * answering goes on without event ids */
	if (s->stream && s->stream->state == C_STREAM)
		stream_end(s->stream, 1);
	for (rstream *r = s->rp.first; r; r = r->next)
		if (r->c && r->c->state == C_STREAM)
			stream_end(r->c, 1);
	mb_http_replay_free(h, s);
	uint64_t num = s->num;
	free(s);
	if (how == END_INIT_FAILED) {
		/* we are inside the host's mb_http_send: tell it later, from the loop */
		mb_http_later(h, END_LATER, num);
		return;
	}
	if (h->cb.on_session_end)
		h->cb.on_session_end(h->cb.ud, num);
}

/* ---- exchanges ------------------------------------------------------------------------------- */

/* Whether a JSON-RPC message is an error response (the host refused initialize). */
static int is_error_response(const char *data, size_t len)
{
	json_t *j = json_loadb(data, len, 0, NULL);
	int e = j && json_is_object(j) && json_object_get(j, "error") != NULL;
	json_decref(j);
	return e;
}

void mb_http_exchange_send(conn *c, int final, char *data, size_t len)
{
	mb_http *h = c->h;
	char extra[32 + MB_HTTP_SESSION_ID_MAX];
	extra[0] = 0;
	if (c->xinit && !c->xsse) {
		session *s = session_by_num(h, c->xsession);
		if (s && final && is_error_response(data, len)) {
			c->xinit = 0;
			mb_http_exchange_finish(c);
			mb_http_session_end(h, s, END_INIT_FAILED);
		} else if (s) {
			snprintf(extra, sizeof extra, "Mcp-Session-Id: %s\r\n", s->id);
		}
	}
	if (!c->xsse && final) {
		if (c->xsession)
			mb_http_exchange_finish(c);
		char challenge[600];
		if (c->xstatus == 403 && c->oauth && h->oauth && strlen(extra) < 32 + MB_HTTP_SESSION_ID_MAX &&
		    mb_http_scope_challenge(h->oauth, data, len, challenge, sizeof challenge) == 0)
			snprintf(c->auth_hdr, sizeof c->auth_hdr, "%s%s", extra, challenge);
		else
			snprintf(c->auth_hdr, sizeof c->auth_hdr, "%s", extra);
		mb_http_respond(c, c->xstatus ? c->xstatus : 200, "application/json",
				c->auth_hdr[0] ? c->auth_hdr : NULL, data, len, data);
		mb_http_request_done(c);
		return;
	}
	if (!c->xsse) {
		char head[HEAD_MAX];
		hb b = { head, 0, sizeof head - 256 }; /* room for the priming event and an event's framing */
		mb_http_sse_head(c, &b, extra[0] ? extra : NULL);
		c->xsse = 1;
		mb_http_stream_open(c, session_by_num(h, c->xsession), c->xnode.key, &b);
		mb_http_stream_send(c, head, b.n, data, len, 0);
		return;
	}
	mb_http_stream_send(c, NULL, 0, data, len, final);
	if (final && c->state == C_BUSY) {
		mb_http_exchange_finish(c);
		mb_http_request_done(c);
	}
}
