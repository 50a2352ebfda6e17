/* http_session.c - the HTTP transport's sessions, exchanges and SSE.
 *
 * Sessions. An `initialize` POST without Mcp-Session-Id creates one (mb_http_session_new): 32
 * random bytes of id, sent as 64 hex digits, and a number for the host. Sessions are found by
 * their id (hash table keyed by its first 8 bytes, full compare with sodium_memcmp) and by
 * number (for mb_http_send). A session ends on DELETE, idle expiry (the sweep in http.c), a
 * failed initialize and shutdown (mb_http_session_end); the end of a failed initialize reaches
 * the host later, from the loop, because it happens inside the host's own mb_http_send.
 *
 * Exchanges. A POST on a session gets an exchange number registered in a hash table (exchange
 * -> conn; handle_post in http.c); the host answers through mb_http_send, which looks the
 * exchange up and calls mb_http_exchange_send: one JSON response, or a switch to SSE (chunked)
 * at the first message that is not final. A conn that closes unregisters its exchange
 * (mb_http_exchange_finish, in http_conn.c), so late host messages are dropped.
 *
 * SSE. Events are written one uv_write each (mb_http_sse_write), with chunked framing unless
 * the request was HTTP/1.0; a client that lets 64 MiB queue up is cut.
 *
 * Builds on http_conn.c (writes, responses, close); http.c builds on both. Everything runs on
 * the loop thread (http.h).
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

static void stream_finish(conn *c)
{
	mb_http *h = c->h;
	h->st.streams_active--;
	c->ssession = 0;
	mb_http_sse_write(c, NULL, 0, NULL, 0, 1); /* HTTP/1.0: nothing; mb_http_request_done closes */
	mb_http_request_done(c);
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
	conn *stream = s->stream;
	uint64_t num = s->num;
	free(s);
	if (stream && stream->state == C_STREAM)
		stream_finish(stream);
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
	char extra[128];
	extra[0] = 0;
	if (c->xinit && !c->xsse) {
		session *s = session_by_num(h, c->xsession);
		if (s && final && is_error_response(data, len)) {
			c->xinit = 0;
			mb_http_exchange_finish(c);
			mb_http_session_end(h, s, END_INIT_FAILED);
		} else if (s) {
			snprintf(extra, sizeof extra, "Mcp-Session-Id: %s\r\n", s->hex);
		}
	}
	if (!c->xsse && final) {
		if (c->xsession)
			mb_http_exchange_finish(c);
		mb_http_respond(c, c->xstatus ? c->xstatus : 200, "application/json", extra[0] ? extra : NULL,
				data, len, data);
		mb_http_request_done(c);
		return;
	}
	if (!c->xsse) {
		char head[HEAD_MAX];
		hb b = { head, 0, sizeof head - 64 };
		mb_http_sse_head(c, &b, extra[0] ? extra : NULL);
		c->xsse = 1;
		mb_http_sse_write(c, head, b.n, data, len, 0);
		return;
	}
	mb_http_sse_write(c, NULL, 0, data, len, final);
	if (final && c->state == C_BUSY) {
		mb_http_exchange_finish(c);
		mb_http_request_done(c);
	}
}
