/* fuzz_http.c - libFuzzer target: the Streamable HTTP transport (src/http.c, http_conn.c,
 * http_session.c, http_auth.c, http_metrics.c): request parsing, routing, limits,
 * Host/Origin/token checks, sessions, exchanges answered as JSON or SSE, GET streams, keep-alive
 * and pipelining.
 *
 * The transport has no entry point that takes bytes without a socket, so the seam is the
 * smallest real one: every input starts the transport on 127.0.0.1:0 on a private libuv loop
 * (one of two configurations: no tokens, or a bearer token with allowed origins, CORS, small
 * body/header/session limits), connects one client socket and writes the input to it. The loop
 * is run without blocking (UV_RUN_NOWAIT) until nothing moves. The input is cut at NUL bytes into
 * chunks written one after the other with the loop run to rest in between (requests split across
 * reads, pipelining), and "$SID" in a chunk becomes the last Mcp-Session-Id the server sent. A
 * stand-in host answers each POST: JSON at once, SSE (a notification, then the answer), or later
 * (answered once the loop is at rest, with a broadcast to GET streams); `initialize` creates the
 * session, and fails when the body says "fail". Then the client closes (RST) and the transport
 * is closed. Invariants, any violation aborts:
 *  - what the client received is a sequence of well-formed HTTP/1.1 responses (http-parser in
 *    response mode, HEAD answers without a body), each with a status the transport documents;
 *    only a streaming (text/event-stream) response may be cut by the client's close;
 *  - every error response (4xx, 5xx) has a JSON-RPC error body with id null;
 *  - after a response that says "Connection: close" the server closes the connection;
 *  - no more final responses than requests;
 *  - once the client is gone, no connection, stream or exchange holding a connection is left
 *    (parked ones, kept for a Last-Event-ID resume, may be); after mb_http_close every session
 *    created was ended exactly once and no libuv handle is left on the loop.
 * Build and run: tests/fuzz/run.sh fuzz_http
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "http.h"
#include "json.h"
#include "log.h"

#define FAIL(...) do { fprintf(stderr, "FUZZ INVARIANT: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)
#define MAX_PENDING 64
#define MAX_SESSIONS 64

static uv_loop_t loop;
static mb_config cfgs[2];
static mb_http *H;

/* ---- the stand-in host ---------------------------------------------------------------------- */

static struct {
	struct { uint64_t session, exchange; char *data; size_t len; } pending[MAX_PENDING];
	int npending;
	uint64_t sessions[MAX_SESSIONS];
	int nsessions, created, ended;
} host;

static char *msg(const char *fmt, json_t *id, size_t *len)
{
	char *ids = id ? json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	int n = snprintf(NULL, 0, fmt, ids ? ids : "null");
	char *out = malloc((size_t)n + 2);
	snprintf(out, (size_t)n + 1, fmt, ids ? ids : "null");
	if (ids) {
		json_free_t jfree;
		json_get_alloc_funcs(NULL, &jfree);
		jfree(ids);
	}
	*len = (size_t)n;
	return out;
}

static void later(uint64_t session, uint64_t exchange, char *data, size_t len)
{
	if (host.npending == MAX_PENDING) {
		mb_http_send(H, session, exchange, 1, 0, data, len, NULL, 0);
		return;
	}
	host.pending[host.npending].session = session;
	host.pending[host.npending].exchange = exchange;
	host.pending[host.npending].data = data;
	host.pending[host.npending].len = len;
	host.npending++;
}

static int on_message(void *ud, uint64_t session, uint64_t exchange, const char *tenant, const char *body,
		      size_t len, const mb_http_req *req)
{
	(void)ud;
	if (!tenant || !*tenant || body[len] != 0)
		FAIL("on_message without a tenant or with a body not NUL-terminated");
	if ((session == 0) != (req->sessionless != 0))
		FAIL("session 0 is exactly a sessionless (2026-07-28) request");
	int known = session == 0; /* sessionless: answered on its own exchange */
	for (int i = 0; i < host.nsessions; i++)
		known |= host.sessions[i] == session;
	json_t *j = json_loadb(body, len, 0, NULL);
	json_t *id = json_is_object(j) ? json_object_get(j, "id") : NULL;
	const char *method = json_is_object(j) ? json_string_value(json_object_get(j, "method")) : NULL;
	if (session == 0 && method && strcmp(method, "initialize") == 0 && id && !json_is_null(id) &&
	    !req->protocol_version) {
		json_t *strict = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
		if (strict) /* a body with a repeated key goes to the host, which refuses it */
			FAIL("a sessionless initialize request (without a version header) did not start a session");
	}
	if (!known) {
		if (!method || strcmp(method, "initialize") != 0 || !id)
			FAIL("a message for an unknown session that is not initialize");
		if (host.nsessions < MAX_SESSIONS)
			host.sessions[host.nsessions++] = session;
		host.created++;
	}
	if (!id || !method) {
		json_decref(j);
		return 0; /* a notification or a client's response: 202 */
	}
	size_t n;
	char *out;
	if (strcmp(method, "initialize") == 0) {
		out = msg(strstr(body, "fail") ? "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32602,\"message\":\"no\"}}"
					       : "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"protocolVersion\":\"2025-11-25\"}}",
			  id, &n);
		mb_http_send(H, session, exchange, 1, 0, out, n, NULL, 0);
		json_decref(j);
		return 1;
	}
	unsigned h = 0;
	for (size_t i = 0; i < len; i++)
		h = h * 31 + (unsigned char)body[i];
	char *note = msg("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%s,"
			 "\"progress\":1}}", id, &n);
	size_t nn = n;
	out = msg("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"ok\":true}}\n", id, &n);
	switch (h % 4) {
	case 0:
		free(note);
		mb_http_send(H, session, exchange, 1, 0, out, n, NULL, 0);
		break;
	case 1:
		mb_http_send(H, session, exchange, 0, 0, note, nn, NULL, 0);
		later(session, exchange, out, n);
		break;
	case 2:
		free(note);
		later(session, exchange, out, n);
		break;
	default:
		mb_http_send(H, session, exchange, 0, 0, note, nn, NULL, 0);
		mb_http_send(H, session, exchange, 1, 0, out, n, NULL, 0);
	}
	json_decref(j);
	return 1;
}

static void on_session_end(void *ud, uint64_t session)
{
	(void)ud;
	int found = 0;
	for (int i = 0; i < host.nsessions; i++)
		if (host.sessions[i] == session) {
			host.sessions[i] = host.sessions[--host.nsessions];
			found = 1;
			break;
		}
	if (!found && host.created <= MAX_SESSIONS)
		FAIL("on_session_end for a session that is unknown or already ended");
	host.ended++;
}

static const char *metrics_extra(void *ud)
{
	(void)ud;
	return "# TYPE moonbox_fuzz gauge\nmoonbox_fuzz 1";
}

static const mb_http_callbacks CBS = { .on_message = on_message, .on_session_end = on_session_end,
				       .metrics_extra = metrics_extra };

/* ---- the client --------------------------------------------------------------------------- */

static struct {
	char *buf;
	size_t len, cap;
	int eof;
} rx;

static int client_read(int fd)
{
	int got = 0;
	for (;;) {
		if (rx.len + 4096 > rx.cap) {
			rx.cap = rx.cap ? rx.cap * 2 : 65536;
			rx.buf = realloc(rx.buf, rx.cap);
		}
		ssize_t n = read(fd, rx.buf + rx.len, rx.cap - rx.len);
		if (n > 0) {
			rx.len += (size_t)n;
			got = 1;
			continue;
		}
		if (n == 0)
			rx.eof = 1;
		else if (errno != EAGAIN && errno != EWOULDBLOCK)
			rx.eof = 1; /* reset */
		return got;
	}
}

/* Runs the loop without blocking until neither side moves for three rounds. */
static void pump(int fd)
{
	int still = 0;
	mb_http_stats_t a, b;
	mb_http_stats(H, &a);
	for (int i = 0; i < 400 && still < 3; i++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		int got = fd >= 0 && !rx.eof ? client_read(fd) : 0;
		mb_http_stats(H, &b);
		int moved = got || b.bytes_in != a.bytes_in || b.bytes_out != a.bytes_out ||
			    b.requests_total != a.requests_total || b.connections_active != a.connections_active;
		a = b;
		still = moved ? 0 : still + 1;
	}
}

/* ---- checking what the client received ------------------------------------------------------ */

typedef struct {
	int methods[256];      /* method of each request the server will see, in order (-1: bad) */
	int nreq, in_req;
	int status, sse, close_hdr, in_msg, finals;
	char field[32];
	size_t flen;
	int last_value;
	char ctype[128];
	char *body;
	size_t blen;
} check_state;

static int rq_begin(http_parser *p)
{
	check_state *c = p->data;
	if (c->nreq < 256)
		c->methods[c->nreq] = -1;
	c->nreq++;
	c->in_req = 1;
	return 0;
}

static int rq_url(http_parser *p, const char *at, size_t n)
{
	(void)at;
	(void)n;
	check_state *c = p->data;
	if (c->nreq <= 256)
		c->methods[c->nreq - 1] = (int)p->method;
	return 0;
}

static int rq_complete(http_parser *p)
{
	((check_state *)p->data)->in_req = 0;
	return 0;
}

/* The requests in the bytes sent, as the server's parser sees them (the same http-parser): one
 * per message begun, its method once the request line gives it (the server answers a HEAD
 * without a body even when the request is malformed after that); a malformed one counts too (the
 * server answers it, then closes). */
static size_t chunk_len[4096];
static int nchunks;

static void request_methods(check_state *c, const char *sent, size_t n)
{
	http_parser p;
	http_parser_settings s;
	http_parser_settings_init(&s);
	s.on_message_begin = rq_begin;
	s.on_url = rq_url;
	s.on_message_complete = rq_complete;
	http_parser_init(&p, HTTP_REQUEST);
	p.data = c;
	/* chunk by chunk, as the server reads them: http-parser reports a URL read so far at the
	 * end of each piece it is given, so where the pieces end decides whether the server knew
	 * the method of a request that turns out malformed */
	size_t off = 0;
	for (int i = 0; i < nchunks && off < n; i++) {
		size_t end = off + chunk_len[i] > n ? n : off + chunk_len[i];
		while (off < end) {
			size_t k = http_parser_execute(&p, &s, sent + off, end - off);
			off += k;
			if (HTTP_PARSER_ERRNO(&p) != HPE_OK) {
				if (!c->in_req) {
					/* a request malformed before http-parser begins a message (a bad first
					 * byte of the method) has no method: its 400 has a body (http_conn.c
					 * resets the method after each answer; it once kept a HEAD's, found here) */
					if (c->nreq < 256)
						c->methods[c->nreq] = -1;
					c->nreq++;
				}
				return;
			}
			if (k == 0)
				return;
		}
	}
}

static int rs_begin(http_parser *p)
{
	check_state *c = p->data;
	c->in_msg = 1;
	c->sse = c->close_hdr = 0;
	c->ctype[0] = 0;
	c->blen = 0;
	c->flen = 0;
	c->last_value = 0;
	return 0;
}

static int rs_field(http_parser *p, const char *at, size_t n)
{
	check_state *c = p->data;
	if (c->last_value)
		c->flen = 0;
	c->last_value = 0;
	if (c->flen + n < sizeof c->field) {
		memcpy(c->field + c->flen, at, n);
		c->flen += n;
	}
	c->field[c->flen < sizeof c->field ? c->flen : sizeof c->field - 1] = 0;
	return 0;
}

static int rs_value(http_parser *p, const char *at, size_t n)
{
	check_state *c = p->data;
	c->last_value = 1;
	if (strcasecmp(c->field, "content-type") == 0) {
		size_t l = strlen(c->ctype);
		if (l + n < sizeof c->ctype) {
			memcpy(c->ctype + l, at, n);
			c->ctype[l + n] = 0;
		}
	} else if (strcasecmp(c->field, "connection") == 0 && n >= 5 && strncasecmp(at, "close", 5) == 0) {
		c->close_hdr = 1;
	}
	return 0;
}

static int rs_headers(http_parser *p)
{
	check_state *c = p->data;
	c->status = (int)p->status_code;
	c->sse = strncmp(c->ctype, "text/event-stream", 17) == 0;
	int known = c->status == 100;
	for (int i = 0; i < MB_HTTP_NSTATUS - 1; i++)
		known |= mb_http_status_code(i) == c->status;
	if (!known)
		FAIL("response status %d is not one the transport documents", c->status);
	if (c->status >= 200 && c->finals < 256 && c->finals < c->nreq && c->methods[c->finals] == HTTP_HEAD)
		return 1; /* the answer to HEAD has no body */
	return 0;
}

static int rs_body(http_parser *p, const char *at, size_t n)
{
	check_state *c = p->data;
	if (c->status >= 400) {
		c->body = realloc(c->body, c->blen + n + 1);
		memcpy(c->body + c->blen, at, n);
		c->blen += n;
	}
	return 0;
}

static int rs_complete(http_parser *p)
{
	check_state *c = p->data;
	c->in_msg = 0;
	if (c->status < 200)
		return 0;
	int head = c->finals < 256 && c->finals < c->nreq && c->methods[c->finals] == HTTP_HEAD;
	c->finals++;
	if (c->status >= 400 && !head) {
		if (strncmp(c->ctype, "application/json", 16) != 0)
			FAIL("error response %d with Content-Type \"%s\"", c->status, c->ctype);
		json_t *j = json_loadb(c->body ? c->body : "", c->blen, 0, NULL);
		json_t *e = json_is_object(j) ? json_object_get(j, "error") : NULL;
		if (!json_is_object(e) || !json_is_integer(json_object_get(e, "code")) ||
		    !json_is_string(json_object_get(e, "message")) || !json_is_null(json_object_get(j, "id")))
			FAIL("error response %d without a JSON-RPC error body: %.*s", c->status, (int)c->blen,
			     c->body ? c->body : "");
		json_decref(j);
	}
	return 0;
}

static void check_responses(const char *sent, size_t sent_len)
{
	static check_state c;
	free(c.body);
	memset(&c, 0, sizeof c);
	request_methods(&c, sent, sent_len);
	http_parser p;
	http_parser_settings s;
	http_parser_settings_init(&s);
	s.on_message_begin = rs_begin;
	s.on_header_field = rs_field;
	s.on_header_value = rs_value;
	s.on_headers_complete = rs_headers;
	s.on_body = rs_body;
	s.on_message_complete = rs_complete;
	http_parser_init(&p, HTTP_RESPONSE);
	p.data = &c;
	size_t off = 0;
	int last_close = 0;
	while (off < rx.len) {
		size_t k = http_parser_execute(&p, &s, rx.buf + off, rx.len - off);
		off += k;
		if (HTTP_PARSER_ERRNO(&p) != HPE_OK)
			FAIL("the client received malformed HTTP (%s) at byte %zu of %zu:\n%.*s",
			     http_errno_description(HTTP_PARSER_ERRNO(&p)), off, rx.len,
			     (int)(rx.len > 3000 ? 3000 : rx.len), rx.buf);
		if (k == 0)
			break;
		if (!c.in_msg)
			last_close = c.close_hdr;
	}
	if (c.in_msg && !c.sse)
		FAIL("a %d response was cut short (only streaming responses may be):\n%.*s", c.status,
		     (int)(rx.len > 3000 ? 3000 : rx.len), rx.buf);
	if (c.finals > c.nreq)
		FAIL("%d final responses for %d requests", c.finals, c.nreq);
	if (last_close && !c.in_msg && !rx.eof)
		FAIL("the server said Connection: close and kept the connection open");
}

/* ---- the driver -------------------------------------------------------------------------------- */

static void setup(void)
{
	char *a0[] = { "fuzz", "--data-dir", "/tmp/moonbox-fuzz-http", "--http", "127.0.0.1:0",
		       "--max-message-bytes", "3000", "--log-level", "critical", NULL };
	char *a1[] = { "fuzz", "--data-dir", "/tmp/moonbox-fuzz-http", "--http", "127.0.0.1:0",
		       "--http-tokens", "fuzz-token-0123456789=tenantA,another-token-abcdefgh=tenantB",
		       "--http-allowed-origins", "https://app.example", "--http-cors-origin", "https://app.example",
		       "--http-allowed-hosts", "example.com,api.example.com:8443", "--http-max-body-bytes", "2048",
		       "--http-max-header-bytes", "1024", "--http-max-sessions", "2", "--log-level", "critical", NULL };
	if (mb_config_load(&cfgs[0], (int)(sizeof a0 / sizeof *a0) - 1, a0) != 0 ||
	    mb_config_load(&cfgs[1], (int)(sizeof a1 / sizeof *a1) - 1, a1) != 0)
		FAIL("configuration");
	mb_log_set_level("critical");
	mb_json_global_init();
	uv_loop_init(&loop);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!loop.data) {
		setup();
		loop.data = &loop;
	}
	if (size < 1)
		return 0;
	char err[512];
	H = mb_http_start(&loop, &cfgs[data[0] & 1], &CBS, err, sizeof err);
	if (!H)
		FAIL("mb_http_start: %s", err);
	data++;
	size--;
	memset(&host, 0, sizeof host);
	nchunks = 0;
	rx.len = 0;
	rx.eof = 0;

	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)mb_http_address(H, NULL, 0)) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct linger lg = { 1, 0 }; /* close with RST: no TIME_WAIT left per input */
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
		FAIL("connect: %s", strerror(errno));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

	/* the chunks, with $SID replaced, in order; what was sent is kept for the checks */
	static char sent[65536];
	size_t sent_len = 0;
	const char *p = (const char *)data, *end = p + size;
	while (p <= end && !rx.eof) {
		const char *z = memchr(p, 0, (size_t)(end - p));
		size_t n = (size_t)((z ? z : end) - p);
		char chunk[8192];
		size_t cl = 0;
		for (size_t i = 0; i < n && cl < sizeof chunk - 80;) {
			if (n - i >= 4 && memcmp(p + i, "$SID", 4) == 0) {
				const char *sid = NULL;
				for (const char *q = rx.buf; q && q + 16 < rx.buf + rx.len;) {
					q = memmem(q, (size_t)(rx.buf + rx.len - q), "Mcp-Session-Id: ", 16);
					if (q) {
						sid = q + 16;
						q += 16;
					}
				}
				if (sid && sid + 64 <= rx.buf + rx.len) {
					memcpy(chunk + cl, sid, 64);
					cl += 64;
				}
				i += 4;
				continue;
			}
			chunk[cl++] = p[i++];
		}
		if (cl) {
			if (write(fd, chunk, cl) != (ssize_t)cl)
				FAIL("short write to the server");
			if (nchunks < 4096)
				chunk_len[nchunks++] = cl;
			if (sent_len + cl <= sizeof sent) {
				memcpy(sent + sent_len, chunk, cl);
				sent_len += cl;
			}
		}
		pump(fd);
		/* the host's answers that were left for later, and a message on every GET stream */
		for (int round = 0; round < 4 && host.npending; round++) {
			int np = host.npending;
			host.npending = 0;
			for (int i = 0; i < np; i++)
				mb_http_send(H, host.pending[i].session, host.pending[i].exchange, 1, 0, host.pending[i].data,
					     host.pending[i].len, NULL, 0);
			char *b = strdup("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}");
			mb_http_send(H, 0, 0, 0, 0, b, strlen(b), NULL, 0);
			pump(fd);
		}
		if (!z)
			break;
		p = z + 1;
	}
	client_read(fd);
	check_responses(sent, sent_len);

	close(fd);
	mb_http_stats_t st;
	for (int i = 0; i < 100; i++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		mb_http_stats(H, &st);
		if (!st.connections_active)
			break;
	}
	/* an exchange whose connection closed before its final message may stay parked for a resume
	 * (its session's end frees it); none may still hold a connection */
	if (st.connections_active || st.exchanges_active != st.exchanges_detached || st.streams_active)
		FAIL("after the client left: %llu connections, %llu exchanges (%llu parked), %llu streams",
		     (unsigned long long)st.connections_active, (unsigned long long)st.exchanges_active,
		     (unsigned long long)st.exchanges_detached, (unsigned long long)st.streams_active);
	for (int i = 0; i < host.npending; i++)
		free(host.pending[i].data);
	host.npending = 0;
	mb_http_close(H);
	H = NULL;
	uv_run(&loop, UV_RUN_DEFAULT);
	if (uv_loop_alive(&loop))
		FAIL("handles left on the loop after mb_http_close");
	if (host.ended != host.created)
		FAIL("%d sessions created, %d ended", host.created, host.ended);
	return 0;
}
