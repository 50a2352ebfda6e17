/* test_http.c - the Streamable HTTP transport on a real libuv loop (its own thread) with a fake
 * host made of the callbacks (echoes the request id; "slow" sends a progress notification before
 * its answer; "delay" answers 150 ms later; "never" never answers; initialize with params.fail
 * is refused), driven with raw sockets from the test thread. Covers sessions (ids, DELETE,
 * expiry, tenant binding), JSON vs SSE answers, 202, every status code the transport produces,
 * keep-alive and pipelining, read timeouts, clients that vanish mid-request or mid-exchange,
 * GET streams and broadcasts, tokens, CORS, limits, /healthz and /metrics, and start-up
 * refusals. ASan checks that nothing leaks; uv_loop_close checks that no handle is left.
 *
 * `test_http --bench PORT` serves the echo host on 127.0.0.1:PORT until interrupted (for wrk).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "http.h"
#include "http_int.h"
#include "log.h"
#include "unit.h"

/* ---- the fake host (loop thread) ----------------------------------------------------------- */

static struct {
	pthread_mutex_t mu;
	int messages;
	uint64_t last_session, last_exchange;
	char last_tenant[80];
	char last_body[8192];
	int last_sessionless;
	char last_proto[64], last_mmethod[128], last_mname[1024], last_params[1024]; /* "-": absent */
	int ended;
	uint64_t ended_ids[256];
	int timers; /* delayed answers not sent yet */
} F = { .mu = PTHREAD_MUTEX_INITIALIZER };

static mb_http *H;
static uv_loop_t loop;
static pthread_t loop_thread;
static uv_async_t wake;
static int PORT;
static mb_config cfg;
static int metrics_calls;

typedef struct delayed {
	uv_timer_t t;
	uint64_t session, exchange;
	char *data;
	size_t len;
} delayed;

static char *dumps(json_t *j, size_t *len)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	*len = strlen(s);
	return s;
}

static char *reply(json_t *id, const char *tenant, uint64_t session, size_t *len)
{
	return dumps(json_pack("{s:s,s:O,s:{s:O,s:s,s:I}}", "jsonrpc", "2.0", "id", id, "result", "echo", id,
			       "tenant", tenant, "session", (json_int_t)session), len);
}

static void delayed_closed(uv_handle_t *h)
{
	free(h->data);
}

static void delayed_fire(uv_timer_t *t)
{
	delayed *d = t->data;
	mb_http_send(H, d->session, d->exchange, 1, 0, d->data, d->len, NULL, 0);
	t->data = d;
	uv_close((uv_handle_t *)t, delayed_closed);
	pthread_mutex_lock(&F.mu);
	F.timers--;
	pthread_mutex_unlock(&F.mu);
}

static void later(uint64_t session, uint64_t exchange, char *data, size_t len, int ms)
{
	delayed *d = calloc(1, sizeof *d);
	d->session = session;
	d->exchange = exchange;
	d->data = data;
	d->len = len;
	uv_timer_init(&loop, &d->t);
	d->t.data = d;
	uv_timer_start(&d->t, delayed_fire, (uint64_t)ms, 0);
	pthread_mutex_lock(&F.mu);
	F.timers++;
	pthread_mutex_unlock(&F.mu);
}

static int fake_message(void *ud, uint64_t session, uint64_t exchange, const char *tenant,
			const char *body, size_t len, const mb_http_req *req)
{
	(void)ud;
	pthread_mutex_lock(&F.mu);
	F.messages++;
	F.last_sessionless = req->sessionless;
	snprintf(F.last_proto, sizeof F.last_proto, "%s", req->protocol_version ? req->protocol_version : "-");
	snprintf(F.last_mmethod, sizeof F.last_mmethod, "%s", req->method ? req->method : "-");
	snprintf(F.last_mname, sizeof F.last_mname, "%s", req->name ? req->name : "-");
	snprintf(F.last_params, sizeof F.last_params, "%s", req->params ? req->params : "-");
	F.last_session = session;
	F.last_exchange = exchange;
	snprintf(F.last_tenant, sizeof F.last_tenant, "%s", tenant);
	snprintf(F.last_body, sizeof F.last_body, "%.*s", (int)(len < 8000 ? len : 8000), body);
	pthread_mutex_unlock(&F.mu);
	if (body[len] != 0)
		return 0; /* the body must arrive NUL-terminated: the tests would see no answer */
	json_t *j = json_loadb(body, len, 0, NULL);
	json_t *id = j ? json_object_get(j, "id") : NULL;
	const char *method = j ? json_string_value(json_object_get(j, "method")) : NULL;
	if (!id || !method) {
		json_decref(j);
		return 0;
	}
	size_t n;
	char *out;
	if (strcmp(method, "never") == 0) {
		json_decref(j);
		return 1;
	}
	if (strcmp(method, "initialize") == 0) {
		if (json_is_true(json_object_get(json_object_get(j, "params"), "fail")))
			out = dumps(json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id, "error", "code",
					      -32602, "message", "Unsupported protocol version"), &n);
		else
			out = dumps(json_pack("{s:s,s:O,s:{s:s,s:s}}", "jsonrpc", "2.0", "id", id, "result",
					      "protocolVersion", "2025-11-25", "tenant", tenant), &n);
		mb_http_send(H, session, exchange, 1, 0, out, n, NULL, 0);
	} else if (strcmp(method, "slow") == 0 || strcmp(method, "slowsync") == 0) {
		char *note = dumps(json_pack("{s:s,s:s,s:{s:O,s:i,s:i}}", "jsonrpc", "2.0", "method",
					     "notifications/progress", "params", "progressToken", id, "progress", 50,
					     "total", 100), &n);
		mb_http_send(H, session, exchange, 0, 0, note, n, NULL, 0);
		out = reply(id, tenant, session, &n);
		if (method[4] == 's')
			mb_http_send(H, session, exchange, 1, 0, out, n, NULL, 0);
		else
			later(session, exchange, out, n, 30);
	} else if (strcmp(method, "delay") == 0) {
		out = reply(id, tenant, session, &n);
		later(session, exchange, out, n, 150);
	} else if (strcmp(method, "big") == 0 || strcmp(method, "huge") == 0) {
		size_t big = method[0] == 'b' ? 1 << 20 : 32 << 20;
		char *s = malloc(big + 1);
		memset(s, 'x', big);
		s[big] = 0;
		out = dumps(json_pack("{s:s,s:O,s:s}", "jsonrpc", "2.0", "id", id, "result", s), &n);
		free(s);
		mb_http_send(H, session, exchange, 1, 0, out, n, NULL, 0);
	} else {
		out = reply(id, tenant, session, &n);
		char *nl = realloc(out, n + 1); /* like the host: a trailing newline */
		nl[n] = '\n';
		mb_http_send(H, session, exchange, 1, 0, nl, n + 1, NULL, 0);
	}
	json_decref(j);
	return 1;
}

static void fake_end(void *ud, uint64_t session)
{
	(void)ud;
	pthread_mutex_lock(&F.mu);
	if (F.ended < 256)
		F.ended_ids[F.ended] = session;
	F.ended++;
	pthread_mutex_unlock(&F.mu);
}

static const char *fake_metrics(void *ud)
{
	(void)ud;
	metrics_calls++;
	return "# HELP moonbox_executions_total Executions.\n# TYPE moonbox_executions_total counter\n"
	       "moonbox_executions_total 42";
}

static const mb_http_callbacks CBS = { .on_message = fake_message, .on_session_end = fake_end,
				       .metrics_extra = fake_metrics };

static int fake_ended(uint64_t s)
{
	pthread_mutex_lock(&F.mu);
	int found = 0;
	for (int i = 0; i < F.ended && i < 256; i++)
		found |= F.ended_ids[i] == s;
	pthread_mutex_unlock(&F.mu);
	return found;
}

/* ---- the server thread -------------------------------------------------------------------- */

static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cv = PTHREAD_COND_INITIALIZER;
static void (*job_fn)(void *);
static void *job_arg;
static int job_done;

static void on_wake(uv_async_t *a)
{
	(void)a;
	pthread_mutex_lock(&job_mu);
	void (*fn)(void *) = job_fn;
	void *arg = job_arg;
	pthread_mutex_unlock(&job_mu);
	if (fn)
		fn(arg);
	pthread_mutex_lock(&job_mu);
	job_fn = NULL;
	job_done = 1;
	pthread_cond_signal(&job_cv);
	pthread_mutex_unlock(&job_mu);
}

/* Runs fn(arg) on the loop thread and waits for it. */
static void on_loop(void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&job_mu);
	job_fn = fn;
	job_arg = arg;
	job_done = 0;
	uv_async_send(&wake);
	while (!job_done)
		pthread_cond_wait(&job_cv, &job_mu);
	pthread_mutex_unlock(&job_mu);
}

static void *run_loop(void *arg)
{
	(void)arg;
	uv_run(&loop, UV_RUN_DEFAULT);
	return NULL;
}

static char start_err[512];

/* Loads the configuration from extra flags (after the defaults below). */
static int load_cfg(mb_config *c, const char *const *extra)
{
	char *argv[64] = { "moonbox", "--data-dir", "/tmp/mb-http-test-none", "--http-listen", "127.0.0.1:0" };
	int argc = 5;
	for (int i = 0; extra && extra[i]; i++)
		argv[argc++] = (char *)extra[i];
	return mb_config_load(c, argc, argv);
}

static int srv_start(const char *const *extra)
{
	if (load_cfg(&cfg, extra) != 0)
		return -1;
	uv_loop_init(&loop);
	uv_async_init(&loop, &wake, on_wake);
	H = mb_http_start(&loop, &cfg, &CBS, start_err, sizeof start_err);
	if (!H) {
		uv_close((uv_handle_t *)&wake, NULL);
		uv_run(&loop, UV_RUN_DEFAULT);
		uv_loop_close(&loop);
		return -1;
	}
	PORT = mb_http_address(H, NULL, 0);
	pthread_mutex_lock(&F.mu);
	F.messages = F.ended = 0;
	pthread_mutex_unlock(&F.mu);
	pthread_create(&loop_thread, NULL, run_loop, NULL);
	return 0;
}

static void stop_job(void *arg)
{
	(void)arg;
	mb_http_close(H);
	H = NULL;
	uv_close((uv_handle_t *)&wake, NULL);
}

static void wait_timers(void)
{
	for (int i = 0; i < 300; i++) {
		pthread_mutex_lock(&F.mu);
		int t = F.timers;
		pthread_mutex_unlock(&F.mu);
		if (!t)
			return;
		usleep(10000);
	}
}

static void srv_stop(void)
{
	wait_timers();
	on_loop(stop_job, NULL);
	pthread_join(loop_thread, NULL);
	CHECK(uv_loop_close(&loop) == 0); /* every handle closed */
}

static mb_http_stats_t stats_out;
static void stats_job(void *arg)
{
	(void)arg;
	mb_http_stats(H, &stats_out);
}

static mb_http_stats_t stats(void)
{
	on_loop(stats_job, NULL);
	return stats_out;
}

typedef struct send_args {
	uint64_t session, exchange;
	const char *text;
	int final;
} send_args;

static void send_job(void *arg)
{
	send_args *a = arg;
	mb_http_send(H, a->session, a->exchange, a->final, 0, strdup(a->text), strlen(a->text), NULL, 0);
}

/* Sends a host message from the test thread (on the loop). */
static void host_says(uint64_t session, uint64_t exchange, int final, const char *text)
{
	send_args a = { session, exchange, text, final };
	on_loop(send_job, &a);
}

/* ---- the client (test thread) --------------------------------------------------------------- */

typedef struct cli {
	int fd;
	char buf[1 << 21];
	size_t len;
} cli;

typedef struct resp {
	int status;
	char head[16384];
	char *body;
	size_t blen;
} resp;

static cli *dial(void)
{
	cli *c = calloc(1, sizeof *c);
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)PORT) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = { 3, 0 };
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
		close(c->fd);
		free(c);
		return NULL;
	}
	return c;
}

static void hang_up(cli *c)
{
	if (c) {
		close(c->fd);
		free(c);
	}
}

static void say(cli *c, const char *s, size_t n)
{
	size_t off = 0;
	while (off < n) {
		ssize_t k = send(c->fd, s + off, n - off, MSG_NOSIGNAL);
		if (k <= 0)
			return;
		off += (size_t)k;
	}
}

static void says(cli *c, const char *s)
{
	say(c, s, strlen(s));
}

/* Reads more bytes into c->buf. @returns bytes read, 0 on EOF, -1 on timeout/error */
static ssize_t fill(cli *c)
{
	if (c->len >= sizeof c->buf)
		return -1;
	ssize_t k = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
	if (k > 0)
		c->len += (size_t)k;
	return k;
}

static void consume(cli *c, size_t n)
{
	memmove(c->buf, c->buf + n, c->len - n);
	c->len -= n;
}

static const char *hdr(const resp *r, const char *name)
{
	static char val[4096];
	size_t nl = strlen(name);
	for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
		const char *l = p + 2;
		if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
			const char *v = l + nl + 1;
			while (*v == ' ')
				v++;
			const char *e = strstr(v, "\r\n");
			snprintf(val, sizeof val, "%.*s", (int)(e - v), v);
			return val;
		}
	}
	return NULL;
}

/* Reads a response head (skipping 100 Continue unless stop_at_100). @returns 0 or -1 */
static int read_head(cli *c, resp *r, int stop_at_100)
{
	for (;;) {
		char *e;
		while (!(e = memmem(c->buf, c->len, "\r\n\r\n", 4)))
			if (fill(c) <= 0)
				return -1;
		size_t hl = (size_t)(e - c->buf) + 4;
		snprintf(r->head, sizeof r->head, "%.*s", (int)hl, c->buf);
		consume(c, hl);
		r->status = atoi(r->head + 9);
		if (r->status != 100 || stop_at_100)
			return 0;
	}
}

static int need(cli *c, size_t n)
{
	while (c->len < n)
		if (fill(c) <= 0)
			return -1;
	return 0;
}

/* Reads one chunk of a chunked body into out (NUL-terminated). @returns its size or -1 */
static long read_chunk(cli *c, char *out, size_t cap)
{
	char *e;
	while (!(e = memmem(c->buf, c->len, "\r\n", 2)))
		if (fill(c) <= 0)
			return -1;
	long n = strtol(c->buf, NULL, 16);
	consume(c, (size_t)(e - c->buf) + 2);
	if (need(c, (size_t)n + 2) != 0)
		return -1;
	if (out) {
		size_t k = (size_t)n < cap - 1 ? (size_t)n : cap - 1;
		memcpy(out, c->buf, k);
		out[k] = 0;
	}
	consume(c, (size_t)n + 2);
	return n;
}

/* Takes the "id: ..." line out of an SSE event (in place); its value goes to id ("" when none).
 * @returns ev */
static char *strip_id(char *ev, char id[MB_HTTP_EVENT_ID_MAX])
{
	char *p = strncmp(ev, "id: ", 4) == 0 ? ev : strstr(ev, "\nid: ");
	id[0] = 0;
	if (!p)
		return ev;
	if (p != ev)
		p++;
	char *e = strchr(p, '\n');
	if (!e)
		return ev;
	snprintf(id, MB_HTTP_EVENT_ID_MAX, "%.*s", (int)(e - p - 4), p + 4);
	memmove(p, e + 1, strlen(e + 1) + 1);
	return ev;
}

/* Reads one SSE event (a chunk), with its id taken out. @returns the chunk's size or -1 (0: the end) */
static long read_event(cli *c, char *ev, size_t cap, char id[MB_HTTP_EVENT_ID_MAX])
{
	long n = read_chunk(c, ev, cap);
	if (n > 0)
		strip_id(ev, id);
	else
		id[0] = 0;
	return n;
}

static void resp_free(resp *r)
{
	free(r->body);
	r->body = NULL;
}

static int read_body(cli *c, resp *r, int head_req)
{
	const char *te = hdr(r, "transfer-encoding"), *cl = hdr(r, "content-length");
	free(r->body);
	r->body = NULL;
	r->blen = 0;
	if (te && strcasecmp(te, "chunked") == 0) {
		size_t cap = 1 << 16;
		r->body = malloc(cap);
		for (;;) {
			char *e;
			while (!(e = memmem(c->buf, c->len, "\r\n", 2)))
				if (fill(c) <= 0)
					return -1;
			long n = strtol(c->buf, NULL, 16);
			consume(c, (size_t)(e - c->buf) + 2);
			if (need(c, (size_t)n + 2) != 0)
				return -1;
			while (r->blen + (size_t)n + 1 > cap)
				r->body = realloc(r->body, cap *= 2);
			memcpy(r->body + r->blen, c->buf, (size_t)n);
			r->blen += (size_t)n;
			consume(c, (size_t)n + 2);
			if (n == 0)
				break;
		}
	} else if (cl || head_req || r->status == 204) {
		size_t n = cl ? strtoul(cl, NULL, 10) : 0;
		if (need(c, n) != 0)
			return -1;
		r->body = malloc(n + 1);
		memcpy(r->body, c->buf, n);
		r->blen = n;
		consume(c, n);
	} else { /* until the connection closes */
		while (fill(c) > 0)
			;
		r->body = malloc(c->len + 1);
		memcpy(r->body, c->buf, c->len);
		r->blen = c->len;
		c->len = 0;
	}
	r->body[r->blen] = 0;
	return 0;
}

static int read_resp(cli *c, resp *r)
{
	if (read_head(c, r, 0) != 0)
		return -1;
	return read_body(c, r, 0);
}

/* Whether the server closed the connection (EOF before timeout, nothing else pending). */
static int closed_by_server(cli *c)
{
	char b[256];
	for (;;) {
		ssize_t k = recv(c->fd, b, sizeof b, 0);
		if (k == 0)
			return 1;
		if (k < 0)
			return errno == ECONNRESET;
	}
}

static char req_buf[1 << 21];

/* Builds a POST /mcp request. extra: more header lines, each ending in \r\n. */
static const char *post(const char *sid, const char *extra, const char *body)
{
	snprintf(req_buf, sizeof req_buf,
		 "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
		 "Accept: application/json, text/event-stream\r\n%s%s%s%sContent-Length: %zu\r\n\r\n%s",
		 PORT, sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "", extra ? extra : "",
		 strlen(body), body);
	return req_buf;
}

static const char init_body[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
				"{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
				"\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}";

/* One request on a fresh connection. */
static int once(const char *text, resp *r)
{
	cli *c = dial();
	if (!c)
		return -1;
	says(c, text);
	int rc = read_resp(c, r);
	hang_up(c);
	return rc;
}

/* initialize; sid receives the session id. @returns the status */
static int init_session(char sid[65], const char *extra)
{
	resp r = { 0 };
	if (once(post(NULL, extra, init_body), &r) != 0)
		return -1;
	const char *h = hdr(&r, "mcp-session-id");
	snprintf(sid, 65, "%s", h ? h : "");
	resp_free(&r);
	return r.status;
}

static int is_hex64(const char *s)
{
	if (strlen(s) != 64)
		return 0;
	for (int i = 0; i < 64; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return 0;
	return 1;
}

static uint64_t sess_of(const char *body)
{
	const char *p = strstr(body, "\"session\":");
	return p ? strtoull(p + 10, NULL, 10) : 0;
}

static long ms_since(struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Polls the server's counters until cond holds (3 s at most): server-side effects of a client's
 * action land asynchronously, and a loaded machine may be slow. */
#define WAIT_UNTIL(cond)                                                                    \
	do {                                                                                \
		for (int w_ = 0; w_ < 300; w_++) {                                          \
			mb_http_stats_t st_ = stats();                                      \
			(void)st_;                                                          \
			if (cond)                                                           \
				break;                                                      \
			usleep(10000);                                                      \
		}                                                                           \
	} while (0)

static int ended_count(void)
{
	pthread_mutex_lock(&F.mu);
	int n = F.ended;
	pthread_mutex_unlock(&F.mu);
	return n;
}

/* ---- tests ----------------------------------------------------------------------------------- */

TEST(sessions_and_json_answers)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65], sid2[65];
	resp r = { 0 };
	CHECK(once(post(NULL, NULL, init_body), &r) == 0);
	CHECK(r.status == 200);
	CHECK_STR(hdr(&r, "content-type"), "application/json");
	const char *h = hdr(&r, "mcp-session-id");
	CHECK(h && is_hex64(h));
	snprintf(sid, sizeof sid, "%s", h ? h : "");
	CHECK(strstr(r.body, "\"id\":1") && strstr(r.body, "\"protocolVersion\":\"2025-11-25\""));
	CHECK(r.body[r.blen - 1] == '}'); /* the host's trailing newline is not sent */
	CHECK(hdr(&r, "date") != NULL);
	pthread_mutex_lock(&F.mu);
	CHECK_STR(F.last_tenant, "default");
	uint64_t s1 = F.last_session;
	pthread_mutex_unlock(&F.mu);
	CHECK(s1 != 0);
	CHECK(init_session(sid2, NULL) == 200);
	CHECK(is_hex64(sid2) && strcmp(sid, sid2) != 0);

	/* a notification and a client's response: 202, empty */
	CHECK(once(post(sid, "MCP-Protocol-Version: 2025-11-25\r\n",
			"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"), &r) == 0);
	CHECK(r.status == 202);
	CHECK(r.blen == 0);
	CHECK_STR(hdr(&r, "content-length"), "0");
	CHECK(hdr(&r, "mcp-session-id") == NULL);
	CHECK(once(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"result\":{}}"), &r) == 0);
	CHECK(r.status == 202);

	/* a request on the session: the host sees that session and answers JSON */
	CHECK(once(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}"), &r) == 0);
	CHECK(r.status == 200);
	CHECK_STR(hdr(&r, "content-type"), "application/json");
	CHECK(strstr(r.body, "\"id\":7") != NULL);
	CHECK(sess_of(r.body) == s1);
	pthread_mutex_lock(&F.mu);
	CHECK(F.last_session == s1 && F.last_exchange != 0);
	CHECK(strstr(F.last_body, "tools/list") != NULL);
	pthread_mutex_unlock(&F.mu);
	/* string ids and header names in any case */
	snprintf(req_buf, sizeof req_buf,
		 "POST /mcp?x=1 HTTP/1.1\r\nHOST: localhost:%d \r\ncontent-TYPE: Application/JSON; charset=utf-8\r\n"
		 "accept: text/event-stream\r\naccept: application/json;q=0.9\r\nmcp-SESSION-id: %s\r\n"
		 "Content-Length: 44\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"}  ",
		 PORT, sid);
	CHECK(once(req_buf, &r) == 0);
	CHECK(r.status == 200);
	CHECK(strstr(r.body, "\"id\":\"a\"") != NULL);
	resp_free(&r);
	mb_http_stats_t st = stats();
	CHECK(st.sessions_active == 2);
	CHECK(st.sessions_created == 2);
	CHECK(st.exchanges_active == 0);
	srv_stop();
	pthread_mutex_lock(&F.mu);
	CHECK(F.ended == 2); /* shutdown ends both sessions */
	pthread_mutex_unlock(&F.mu);
}

TEST(sse_when_a_notification_comes_first)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	cli *c = dial();
	resp r = { 0 };
	for (int k = 0; k < 2; k++) { /* async final, then synchronous final */
		says(c, post(sid, NULL, k ? "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"slowsync\"}"
					  : "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"slow\"}"));
		CHECK(read_head(c, &r, 0) == 0);
		CHECK(r.status == 200);
		CHECK_STR(hdr(&r, "content-type"), "text/event-stream");
		CHECK_STR(hdr(&r, "transfer-encoding"), "chunked");
		CHECK_STR(hdr(&r, "cache-control"), "no-cache");
		CHECK(hdr(&r, "content-length") == NULL);
		char ev[4096], id1[MB_HTTP_EVENT_ID_MAX], id2[MB_HTTP_EVENT_ID_MAX];
		CHECK(read_event(c, ev, sizeof ev, id1) > 0); /* no MCP-Protocol-Version: no priming event */
		CHECK(strncmp(ev, "event: message\ndata: {", 22) == 0);
		CHECK(strstr(ev, "notifications/progress") && strstr(ev, "\"progress\":50"));
		CHECK(strcmp(ev + strlen(ev) - 3, "}\n\n") == 0);
		CHECK(read_event(c, ev, sizeof ev, id2) > 0);
		CHECK(strncmp(ev, "event: message\ndata: {", 22) == 0 && strstr(ev, "\"result\""));
		/* ids: <tag>-<stream>-<seq>, the host's messages from 1 */
		CHECK(strlen(id1) > 9 && strcmp(id1 + strlen(id1) - 2, "-1") == 0);
		CHECK(strlen(id2) == strlen(id1) && strcmp(id2 + strlen(id2) - 2, "-2") == 0 &&
		      strncmp(id1, id2, strlen(id1) - 1) == 0);
		CHECK(read_chunk(c, ev, sizeof ev) == 0); /* the stream ends after the final message */
	}
	/* the connection stays usable: a plain JSON answer next */
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"x\"}"));
	CHECK(read_resp(c, &r) == 0);
	CHECK(r.status == 200 && strstr(r.body, "\"id\":6"));
	hang_up(c);
	/* HTTP/1.0: SSE without chunking, ended by closing */
	snprintf(req_buf, sizeof req_buf,
		 "POST /mcp HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
		 "Accept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nContent-Length: 40\r\n\r\n"
		 "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"slow\"}", sid);
	CHECK(once(req_buf, &r) == 0);
	CHECK(r.status == 200);
	CHECK(hdr(&r, "transfer-encoding") == NULL);
	CHECK_STR(hdr(&r, "connection"), "close");
	CHECK(strncmp(r.body, "event: message\nid: ", 19) == 0 && strstr(r.body, "-1\ndata: {"));
	CHECK(strstr(r.body, "}\n\nevent: message\nid: ") != NULL && strstr(r.body, "-2\ndata: {"));
	CHECK(strcmp(r.body + r.blen - 3, "}\n\n") == 0);
	resp_free(&r);
	srv_stop();
}

static void check_error(const char *text, int status, const char *needle, const char *extra_hdr)
{
	resp r = { 0 };
	int rc = once(text, &r);
	CHECK(rc == 0);
	if (r.status != status || (needle && (!r.body || !strstr(r.body, needle))))
		fprintf(stderr, "  expected %d \"%s\", got %d: %s\n", status, needle ? needle : "", r.status,
			r.body ? r.body : "(no body)");
	CHECK(r.status == status);
	if (needle)
		CHECK(r.body && strstr(r.body, needle));
	if (needle && r.body) {
		json_t *j = json_loads(r.body, 0, NULL);
		CHECK(j && json_is_null(json_object_get(j, "id")) && json_object_get(j, "error"));
		json_decref(j);
		CHECK_STR(hdr(&r, "content-type"), "application/json");
	}
	if (extra_hdr) {
		char name[64];
		const char *colon = strchr(extra_hdr, ':');
		snprintf(name, sizeof name, "%.*s", (int)(colon - extra_hdr), extra_hdr);
		CHECK_STR(hdr(&r, name), colon + 2);
	}
	resp_free(&r);
}

TEST(status_codes)
{
	const char *const args[] = { "--http-max-body-bytes", "1024", "--http-max-header-bytes", "2048", NULL };
	CHECK(srv_start(args) == 0);
	char sid[65], q[4096];
	CHECK(init_session(sid, NULL) == 200);
	/* without a session, anything but initialize is a 2026-07-28 request: handed to the host with
	 * session 0 and the headers it checks against the body (the host answers, with the id) */
	resp r = { 0 };
	CHECK(once(post(NULL, "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n"
			"Mcp-Name: =?base64?ZXhlY3V0ZV9jb2Rl?=\r\n",
			"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}"), &r) == 0 && r.status == 200);
	CHECK(r.body && strstr(r.body, "\"session\":0"));
	resp_free(&r);
	CHECK(F.last_sessionless == 1);
	CHECK_STR(F.last_proto, "2026-07-28");
	CHECK_STR(F.last_mmethod, "tools/call");
	CHECK_STR(F.last_mname, "execute_code"); /* decoded from =?base64?...?= */
	CHECK_STR(F.last_params, "-");
	CHECK(once(post(NULL, "Mcp-Param-Region: eu-1\r\nMCP-PARAM-n: =?base64?NQ==?=\r\n",
			"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"x\"}"), &r) == 0 && r.status == 200);
	resp_free(&r);
	CHECK_STR(F.last_params, "Region:eu-1\nn:=?base64?NQ==?="); /* every Mcp-Param-*, names as sent */
	/* over-long: Mcp-Name above 1023 bytes is -32020 (400), the Mcp-Param-* lines together
	 * above their 1023 bytes a 400; neither reaches the host */
	{
		char big[1200], hdrs[1400];
		memset(big, 'n', sizeof big - 1);
		big[sizeof big - 1] = 0;
		int before_big = F.messages;
		snprintf(hdrs, sizeof hdrs, "Mcp-Name: %s\r\n", big);
		check_error(post(NULL, hdrs, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"x\"}"), 400, "-32020", NULL);
		snprintf(hdrs, sizeof hdrs, "Mcp-Param-A: %.600s\r\nMcp-Param-B: %.600s\r\n", big, big);
		check_error(post(NULL, hdrs, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"x\"}"), 400, "too long", NULL);
		CHECK(F.messages == before_big);
	}
	CHECK(once(post(NULL, "Mcp-Name: =?base64?!!notbase64?=\r\n", "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"x\"}"),
		   &r) == 0 && r.status == 200);
	resp_free(&r);
	CHECK_STR(F.last_mname, ""); /* not base64: empty, which the host refuses */
	CHECK_STR(F.last_proto, "-");
	int before = F.messages;
	CHECK(once(post(NULL, NULL, "{\"jsonrpc\":"), &r) == 0 && r.status == 202); /* the host says -32700 */
	resp_free(&r);
	CHECK(F.messages == before + 1);
	/* a 2025 version without a session: the session is missing */
	check_error(post(NULL, "MCP-Protocol-Version: 2025-11-25\r\n", "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}"),
		    400, "Bad Request: Mcp-Session-Id header is required (only initialize may come without it)", NULL);
	check_error(post(NULL, "MCP-Protocol-Version: 2025-11-25\r\n", "{\"jsonrpc\":\"2.0\",\"method\":\"initialize\"}"),
		    400, "Mcp-Session-Id header is required", NULL); /* a notification cannot open a session */
	check_error(post("0000000000000000000000000000000000000000000000000000000000000000", NULL, "{}"), 404,
		    "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32001,\"message\":\"Session not found\"},\"id\":null}",
		    NULL);
	check_error(post("abc", NULL, "{}"), 404, "Session not found", NULL);
	check_error(post("\"><script>", NULL, "{}"), 404, "Session not found", NULL);
	snprintf(q, sizeof q, "PUT /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
	check_error(q, 405, "Method Not Allowed", "Allow: GET, POST, DELETE, OPTIONS");
	snprintf(q, sizeof q, "PATCH /mcp HTTP/1.1\r\nHost: localhost\r\n\r\n");
	check_error(q, 405, "Method Not Allowed", NULL);
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		 "Accept: application/json\r\nContent-Length: 2\r\n\r\n{}");
	check_error(q, 406, "Accept must list both application/json and text/event-stream", NULL);
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		 "Accept: */*\r\nContent-Length: 2\r\n\r\n{}");
	check_error(q, 406, "Not Acceptable", NULL);
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n"
		 "Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}");
	check_error(q, 415, "Content-Type must be application/json", NULL);
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/jsonx\r\n"
		 "Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}");
	check_error(q, 415, "Unsupported Media Type", NULL);
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\n"
		 "Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}");
	check_error(q, 415, "Unsupported Media Type", NULL);
	/* a version that is not a 2025 one goes the 2026-07-28 way (the host answers -32022 with
	 * the request's id), the session header ignored */
	CHECK(once(post(sid, "MCP-Protocol-Version: 1999-01-01\r\n", "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"a\"}"),
		   &r) == 0 && r.status == 200 && r.body && strstr(r.body, "\"session\":0"));
	resp_free(&r);
	CHECK_STR(F.last_proto, "1999-01-01");
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "MCP-Protocol-Version: 2026-07-28\r\n\r\n");
	check_error(q, 405, "takes POST only", "Allow: POST");
	CHECK(once(post(sid, "MCP-Protocol-Version: 2025-06-18\r\n", "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"a\"}"),
		   &r) == 0 && r.status == 200);
	resp_free(&r);
	CHECK(once(post(sid, "MCP-Protocol-Version: 2025-03-26\r\n", "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"a\"}"),
		   &r) == 0 && r.status == 200);
	/* Host and Origin */
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: evil.example.com\r\nOrigin: http://evil.example.com\r\n"
		 "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		 "Content-Length: %zu\r\n\r\n%s", strlen(init_body), init_body);
	check_error(q, 403, "Forbidden: Host \\\"evil.example.com\\\" is not allowed", NULL);
	snprintf(q, sizeof q, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1.evil.com:%d\r\n\r\n", PORT);
	check_error(q, 403, "Forbidden: Host", NULL);
	snprintf(q, sizeof q, "GET /metrics HTTP/1.1\r\nHost: localhost@evil.com\r\n\r\n");
	check_error(q, 403, "Forbidden: Host", NULL);
	snprintf(q, sizeof q, "GET /metrics HTTP/1.1\r\nHost: localhost:80x\r\n\r\n");
	check_error(q, 403, "Forbidden: Host", NULL);
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost:%d\r\nOrigin: http://evil.example.com\r\n"
		 "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		 "Content-Length: %zu\r\n\r\n%s", PORT, strlen(init_body), init_body);
	check_error(q, 403, "Forbidden: Origin \\\"http://evil.example.com\\\" is not allowed", NULL);
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost:%d\r\nOrigin: null\r\n"
		 "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		 "Content-Length: %zu\r\n\r\n%s", PORT, strlen(init_body), init_body);
	check_error(q, 403, "Forbidden: Origin", NULL);
	for (int k = 0; k < 3; k++) {
		const char *hosts[] = { "localhost", "127.0.0.1", "[::1]" };
		snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: %s:%d\r\nOrigin: http://%s:3000\r\n"
			 "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
			 "Content-Length: %zu\r\n\r\n%s", hosts[k], PORT, hosts[k], strlen(init_body), init_body);
		CHECK(once(q, &r) == 0 && r.status == 200);
		CHECK(hdr(&r, "access-control-allow-origin") == NULL); /* CORS is off */
	}
	/* missing / duplicate Host */
	check_error("GET /metrics HTTP/1.0\r\n\r\n", 400, "missing Host header", NULL);
	check_error("GET /metrics HTTP/1.1\r\nHost: localhost\r\nHost: evil.com\r\n\r\n", 400,
		    "duplicate host header", NULL);
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\nMcp-Session-Id: %s\r\n\r\n", sid, sid);
	check_error(q, 400, "duplicate mcp-session-id header", NULL);
	/* paths and methods */
	check_error("GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n", 404, "Not Found: the MCP endpoint is /mcp", NULL);
	check_error("GET /mcp/ HTTP/1.1\r\nHost: localhost\r\n\r\n", 404, "Not Found", NULL);
	check_error("POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n", 405, "use GET",
		    "Allow: GET");
	check_error("DELETE /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", 405, "use GET", "Allow: GET");
	check_error("GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n", 400,
		    "Mcp-Session-Id header is required", NULL);
	check_error("DELETE /mcp HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, "Mcp-Session-Id header is required", NULL);
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
		 "Mcp-Session-Id: %s\r\n\r\n", sid);
	check_error(q, 406, "Accept must list text/event-stream", NULL);
	/* sizes: URL, headers, body (declared and chunked) */
	char *longurl = malloc(3000);
	memset(longurl, 'a', 2999);
	longurl[2999] = 0;
	snprintf(req_buf, sizeof req_buf, "GET /%s HTTP/1.1\r\nHost: localhost\r\n\r\n", longurl);
	check_error(req_buf, 431, "http_max_header_bytes=2048", NULL); /* the request line counts */
	snprintf(req_buf, sizeof req_buf, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Junk: %.1900s\r\n"
		 "X-More: %.200s\r\n\r\n", longurl, longurl);
	check_error(req_buf, 431, "Request Header Fields Too Large: above http_max_header_bytes=2048", NULL);
	free(longurl);
	char body[2000];
	memset(body, ' ', sizeof body - 1);
	body[sizeof body - 1] = 0;
	body[0] = '{';
	body[sizeof body - 2] = '}';
	check_error(post(sid, NULL, body), 413, "Content Too Large: the body is above http_max_body_bytes=1024", NULL);
	cli *c = dial();
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		 "Accept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\n"
		 "Transfer-Encoding: chunked\r\n\r\n", sid);
	says(c, q);
	for (int k = 0; k < 3; k++) /* 3 x 512 bytes > 1024 */
		say(c, "200\r\n", 5), say(c, body, 512), say(c, "\r\n", 2);
	CHECK(read_resp(c, &r) == 0);
	CHECK(r.status == 413);
	CHECK_STR(hdr(&r, "connection"), "close");
	CHECK(closed_by_server(c));
	hang_up(c);
	/* a chunked body within the limit is fine */
	c = dial();
	says(c, q);
	says(c, "5\r\n{\"jso\r\n21\r\nnrpc\":\"2.0\",\"id\":11,\"method\":\"a\"}\r\n0\r\n\r\n");
	CHECK(read_resp(c, &r) == 0);
	CHECK(r.status == 200 && strstr(r.body, "\"id\":11"));
	hang_up(c);
	/* malformed HTTP: 400 and the connection is closed */
	c = dial();
	says(c, "HELLO\r\n\r\n");
	CHECK(read_resp(c, &r) == 0);
	CHECK(r.status == 400 && strstr(r.body, "Bad Request: malformed HTTP"));
	CHECK(closed_by_server(c));
	hang_up(c);
	/* HEAD: refused, with no body, and the connection stays in step */
	c = dial();
	says(c, "HEAD /mcp HTTP/1.1\r\nHost: localhost\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
	CHECK(read_head(c, &r, 0) == 0 && r.status == 405);
	CHECK(hdr(&r, "content-length") && atoi(hdr(&r, "content-length")) > 0);
	CHECK(read_resp(c, &r) == 0 && r.status == 200 && strcmp(r.body, "ok\n") == 0);
	hang_up(c);
	/* a rejected request keeps the connection (its body is discarded) */
	c = dial();
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n"
		 "Accept: application/json, text/event-stream\r\nContent-Length: 5\r\n\r\nhello"
		 "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
	says(c, q);
	CHECK(read_resp(c, &r) == 0 && r.status == 415);
	CHECK(read_resp(c, &r) == 0 && r.status == 200 && strcmp(r.body, "ok\n") == 0);
	hang_up(c);
	resp_free(&r);
	mb_http_stats_t st = stats();
	CHECK(st.requests[1][mb_http_status_index(415)] >= 4);
	srv_stop();
}

TEST(keep_alive_and_pipelining)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	cli *c = dial();
	resp r = { 0 };
	/* three requests in one write: JSON, SSE (answered later), JSON; answered in order */
	static char three[8192];
	size_t n = 0;
	n += (size_t)snprintf(three + n, sizeof three - n, "%s", post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"));
	n += (size_t)snprintf(three + n, sizeof three - n, "%s", post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"slow\"}"));
	n += (size_t)snprintf(three + n, sizeof three - n, "%s", post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"delay\"}"));
	n += (size_t)snprintf(three + n, sizeof three - n, "%s", post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"b\"}"));
	say(c, three, n);
	CHECK(read_resp(c, &r) == 0 && r.status == 200 && strstr(r.body, "\"id\":1,"));
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	CHECK_STR(hdr(&r, "content-type"), "text/event-stream");
	CHECK(strstr(r.body, "notifications/progress") && strstr(r.body, "\"echo\":2"));
	CHECK(read_resp(c, &r) == 0 && r.status == 200 && strstr(r.body, "\"echo\":3"));
	CHECK(read_resp(c, &r) == 0 && r.status == 200 && strstr(r.body, "\"echo\":4"));
	/* 100 pipelined requests in one write, byte by byte for the first */
	char one[256];
	int ol = snprintf(one, sizeof one, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
	for (int i = 0; i < ol; i++)
		say(c, one + i, 1);
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	static char many[100 * 64];
	size_t m = 0;
	for (int i = 0; i < 100; i++)
		m += (size_t)snprintf(many + m, sizeof many - m, "%s", one);
	say(c, many, m);
	int ok = 0;
	for (int i = 0; i < 100; i++)
		ok += read_resp(c, &r) == 0 && r.status == 200 && strcmp(r.body, "ok\n") == 0;
	CHECK(ok == 100);
	/* Connection: close is honoured, pipelined bytes after it are ignored */
	says(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
		"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	CHECK_STR(hdr(&r, "connection"), "close");
	CHECK(closed_by_server(c));
	hang_up(c);
	/* HTTP/1.0 keep-alive */
	c = dial();
	says(c, "GET /healthz HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n");
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	CHECK_STR(hdr(&r, "connection"), "keep-alive");
	says(c, "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	CHECK(closed_by_server(c));
	hang_up(c);
	resp_free(&r);
	mb_http_stats_t st = stats();
	CHECK(st.exchanges_active == 0);
	srv_stop();
}

TEST(slow_clients_are_cut)
{
	const char *const args[] = { "--http-read-timeout-ms", "300", NULL };
	CHECK(srv_start(args) == 0);
	struct timespec t0;
	resp r = { 0 };
	/* headers that never end */
	cli *c = dial();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	says(c, "POST /mcp HTTP/1.1\r\nHost: 127");
	CHECK(read_resp(c, &r) == 0);
	long ms = ms_since(&t0);
	CHECK(r.status == 408);
	CHECK(strstr(r.body, "Request Timeout: not read within http_read_timeout_ms=300") != NULL);
	CHECK(ms >= 250 && ms < 1500);
	CHECK(closed_by_server(c));
	hang_up(c);
	/* a body that never completes, even if bytes trickle in */
	c = dial();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	says(c, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{");
	for (int i = 0; i < 4; i++) {
		usleep(100000);
		says(c, " ");
	}
	CHECK(read_resp(c, &r) == 0 && r.status == 408);
	ms = ms_since(&t0);
	CHECK(ms >= 250 && ms < 1500);
	hang_up(c);
	/* an idle keep-alive connection is closed without an answer */
	c = dial();
	says(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(closed_by_server(c));
	ms = ms_since(&t0);
	CHECK(ms >= 250 && ms < 1500);
	CHECK(c->len == 0);
	hang_up(c);
	resp_free(&r);
	mb_http_stats_t st = stats();
	CHECK(st.read_timeouts == 2);
	CHECK(st.requests[1][mb_http_status_index(408)] == 2); /* both were POSTs */
	CHECK(st.connections_active == 0);
	srv_stop();
}

TEST(clients_that_vanish)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	pthread_mutex_lock(&F.mu);
	int before = F.messages;
	pthread_mutex_unlock(&F.mu);
	/* half a body, then gone */
	mb_http_stats_t stats_before = stats();
	cli *c = dial();
	const char *q = post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}");
	say(c, q, strlen(q) - 10);
	WAIT_UNTIL(st_.bytes_in >= stats_before.bytes_in + strlen(q) - 10);
	hang_up(c);
	/* gone while the host works: its late answer is dropped */
	c = dial();
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"delay\"}"));
	WAIT_UNTIL(st_.exchanges_active == 1);
	hang_up(c);
	/* gone mid-SSE (the exchange is parked: its final message is kept for a resume), and gone
	 * while the host never answers */
	c = dial();
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"slow\"}"));
	resp r = { 0 };
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	hang_up(c);
	WAIT_UNTIL(st_.exchanges_active == 0); /* slow's final message, 30 ms later, ends it */
	c = dial();
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"never\"}"));
	WAIT_UNTIL(st_.exchanges_active == 1);
	mb_http_stats_t st = stats();
	CHECK(st.exchanges_active == 1);
	hang_up(c);
	wait_timers();
	WAIT_UNTIL(st_.exchanges_active == 0 && st_.connections_active == 0 && st_.messages_dropped == 1);
	st = stats();
	CHECK(st.exchanges_active == 0);
	CHECK(st.exchanges_detached == 0);
	CHECK(st.connections_active == 0);
	CHECK(st.messages_dropped == 1); /* the delayed answer; slow's final message is kept */
	CHECK(st.replay_bytes > 0);
	pthread_mutex_lock(&F.mu);
	CHECK(F.messages == before + 3); /* the half request never reached the host */
	pthread_mutex_unlock(&F.mu);
	/* late messages for unknown exchanges/sessions are dropped too */
	send_args a = { 0, 999999, "{}", 0 };
	on_loop(send_job, &a);
	send_args b = { 424242, 0, "{}", 0 };
	on_loop(send_job, &b);
	st = stats();
	CHECK(st.messages_dropped == 3);
	/* the session is still there */
	CHECK(once(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"a\"}"), &r) == 0 && r.status == 200);
	resp_free(&r);
	srv_stop();
}

TEST(get_streams_delete_and_broadcast)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65], sid2[65], q[1024];
	CHECK(init_session(sid, NULL) == 200);
	CHECK(init_session(sid2, NULL) == 200);
	resp r = { 0 };
	CHECK(once(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"), &r) == 0);
	uint64_t s1 = sess_of(r.body);
	CHECK(once(post(sid2, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"), &r) == 0);
	uint64_t s2 = sess_of(r.body);
	CHECK(s1 && s2 && s1 != s2);
	cli *g1 = dial(), *g2 = dial();
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n", sid);
	says(g1, q);
	CHECK(read_head(g1, &r, 0) == 0 && r.status == 200);
	CHECK_STR(hdr(&r, "content-type"), "text/event-stream");
	CHECK_STR(hdr(&r, "transfer-encoding"), "chunked");
	char ev[1024], id[MB_HTTP_EVENT_ID_MAX], id0[MB_HTTP_EVENT_ID_MAX];
	CHECK(read_chunk(g1, ev, sizeof ev) > 0); /* MCP-Protocol-Version 2025-11-25: a priming event */
	CHECK(strncmp(ev, "id: ", 4) == 0 && strstr(ev, "-0\nretry: 1000\ndata: \n\n"));
	strip_id(ev, id0);
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\n\r\n", sid2);
	says(g2, q);
	CHECK(read_head(g2, &r, 0) == 0 && r.status == 200);
	/* a second GET on the same session: 409 */
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\n\r\n", sid);
	check_error(q, 409, "Conflict: this session already has an open GET stream", NULL);
	mb_http_stats_t st = stats();
	CHECK(st.streams_active == 2);
	/* to one session's stream, then to all */
	send_args a = { s1, 0, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n", 0 };
	on_loop(send_job, &a);
	CHECK(read_event(g1, ev, sizeof ev, id) > 0);
	CHECK_STR(ev, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n");
	CHECK(strlen(id) == strlen(id0) && strncmp(id, id0, strlen(id) - 1) == 0 && id[strlen(id) - 1] == '1');
	send_args b = { 0, 0, "{\"b\":1}", 0 };
	on_loop(send_job, &b);
	CHECK(read_event(g1, ev, sizeof ev, id) > 0);
	CHECK_STR(ev, "event: message\ndata: {\"b\":1}\n\n");
	CHECK(id[strlen(id) - 1] == '2');
	CHECK(read_event(g2, ev, sizeof ev, id) > 0); /* no MCP-Protocol-Version: no priming event */
	CHECK_STR(ev, "event: message\ndata: {\"b\":1}\n\n");
	CHECK(id[0] && strncmp(id, id0, 8) != 0); /* another session, another tag */
	/* a message with line breaks becomes several data: lines */
	send_args nl = { s2, 0, "{\n\"x\": 1\r\n}", 0 };
	on_loop(send_job, &nl);
	CHECK(read_event(g2, ev, sizeof ev, id) > 0);
	CHECK_STR(ev, "event: message\ndata: {\ndata: \"x\": 1\ndata: }\n\n");
	/* DELETE ends the session: its stream ends, later requests get 404 */
	snprintf(q, sizeof q, "DELETE /mcp HTTP/1.1\r\nHost: localhost\r\nMcp-Session-Id: %s\r\n\r\n", sid);
	CHECK(once(q, &r) == 0 && r.status == 204);
	CHECK(read_chunk(g1, ev, sizeof ev) == 0);
	CHECK(fake_ended(s1));
	CHECK(!fake_ended(s2));
	check_error(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"a\"}"), 404, "Session not found", NULL);
	check_error(q, 404, "Session not found", NULL);
	/* the stream's connection is reusable after the stream ended */
	says(g1, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(g1, &r) == 0 && r.status == 200);
	/* the stream's client goes away: the session stays, sends are kept for its resume */
	hang_up(g2);
	WAIT_UNTIL(st_.streams_active == 0);
	st = stats();
	CHECK(st.streams_active == 0);
	CHECK(st.sessions_active == 1);
	CHECK(st.sessions_deleted == 1);
	send_args d = { s2, 0, "{}", 0 };
	on_loop(send_job, &d);
	CHECK(stats().messages_dropped == st.messages_dropped);
	CHECK(stats().replay_bytes > st.replay_bytes);
	/* without resumption (http_replay_bytes=0) they are dropped */
	srv_stop();
	const char *const off[] = { "--http-replay-bytes", "0", NULL };
	CHECK(srv_start(off) == 0);
	CHECK(init_session(sid2, NULL) == 200);
	CHECK(once(post(sid2, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"), &r) == 0);
	s2 = sess_of(r.body);
	g2 = dial();
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n", sid2);
	says(g2, q);
	CHECK(read_head(g2, &r, 0) == 0 && r.status == 200);
	on_loop(send_job, &b);
	CHECK(read_chunk(g2, ev, sizeof ev) > 0); /* no priming event, no id */
	CHECK_STR(ev, "event: message\ndata: {\"b\":1}\n\n");
	hang_up(g2);
	WAIT_UNTIL(st_.streams_active == 0);
	st = stats();
	send_args d2 = { s2, 0, "{}", 0 };
	on_loop(send_job, &d2);
	CHECK(stats().messages_dropped == st.messages_dropped + 1);
	CHECK(stats().replay_bytes == 0);
	hang_up(g1);
	resp_free(&r);
	srv_stop();
}

/* ---- event ids and resumption ---------------------------------------------------------------- */

/* A GET /mcp on session sid, with Last-Event-ID when lastid is given, and MCP-Protocol-Version
 * 2025-11-25 (which asks for a priming event) when proto. */
static const char *get_req(const char *sid, const char *lastid, int proto)
{
	static char q[1024];
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\n%s%s%s%s\r\n", sid, lastid ? "Last-Event-ID: " : "", lastid ? lastid : "",
		 lastid ? "\r\n" : "", proto ? "MCP-Protocol-Version: 2025-11-25\r\n" : "");
	return q;
}

/* The session number behind sid (the echo host says it). */
static uint64_t session_num(const char *sid)
{
	resp r = { 0 };
	if (once(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"), &r) != 0)
		return 0;
	uint64_t n = sess_of(r.body);
	resp_free(&r);
	return n;
}

/* Starts a request the host leaves open ("never", 2025-11-25) on c, then has the host send one
 * message on it, which makes the answer SSE: reads the head, the priming event (its id into
 * prime) and that event (its id into id1). @returns the exchange, 0 on failure */
static uint64_t open_sse(cli *c, const char *sid, uint64_t session, char *prime, char *id1)
{
	pthread_mutex_lock(&F.mu);
	int before = F.messages;
	pthread_mutex_unlock(&F.mu);
	says(c, post(sid, "MCP-Protocol-Version: 2025-11-25\r\n", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"never\"}"));
	uint64_t x = 0;
	for (int i = 0; i < 300 && !x; i++) {
		pthread_mutex_lock(&F.mu);
		if (F.messages > before)
			x = F.last_exchange;
		pthread_mutex_unlock(&F.mu);
		if (!x)
			usleep(10000);
	}
	if (!x)
		return 0;
	host_says(session, x, 0, "{\"n\":1}");
	resp r = { 0 };
	char ev[1024];
	if (read_head(c, &r, 0) != 0 || r.status != 200 || read_chunk(c, ev, sizeof ev) <= 0 ||
	    strncmp(ev, "id: ", 4) != 0 || !strstr(ev, "\nretry: 1000\ndata: \n\n"))
		return 0;
	strip_id(ev, prime);
	if (read_event(c, ev, sizeof ev, id1) <= 0 || !strstr(ev, "{\"n\":1}"))
		return 0;
	return x;
}

/* The id of event seq on the stream of id (same tag and stream). */
static const char *id_at(const char *id, uint64_t seq)
{
	static char out[MB_HTTP_EVENT_ID_MAX];
	const char *dash = strrchr(id, '-');
	snprintf(out, sizeof out, "%.*s-%llu", (int)(dash ? dash - id : 0), id, (unsigned long long)seq);
	return out;
}

/* Reads an event and checks its data and id. */
static void expect_event(cli *c, const char *data, const char *id)
{
	char ev[4096], got[MB_HTTP_EVENT_ID_MAX], want[1024];
	CHECK(read_event(c, ev, sizeof ev, got) > 0);
	snprintf(want, sizeof want, "event: message\ndata: %s\n\n", data);
	CHECK_STR(ev, want);
	CHECK_STR(got, id);
}

TEST(resume_a_post_stream)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65], prime[MB_HTTP_EVENT_ID_MAX], id1[MB_HTTP_EVENT_ID_MAX], id3[MB_HTTP_EVENT_ID_MAX];
	CHECK(init_session(sid, NULL) == 200);
	uint64_t s1 = session_num(sid);
	cli *c = dial();
	uint64_t x = open_sse(c, sid, s1, prime, id1);
	CHECK(x != 0);
	/* "<8 hex>-<stream>-<seq>": the priming event is 0, the host's messages 1, 2, ... */
	CHECK(strlen(prime) > 11 && strspn(prime, "0123456789abcdef") == 8 && prime[8] == '-');
	CHECK(strcmp(prime + strlen(prime) - 2, "-0") == 0);
	CHECK_STR(id_at(prime, 1), id1);
	/* the client goes; a disconnect is not a cancellation: the exchange stays, parked */
	hang_up(c);
	WAIT_UNTIL(st_.exchanges_detached == 1);
	mb_http_stats_t st = stats();
	CHECK(st.exchanges_active == 1 && st.exchanges_detached == 1 && st.connections_active == 0);
	host_says(s1, x, 0, "{\"n\":2}");
	host_says(s1, x, 1, "{\"n\":3}");
	st = stats();
	CHECK(st.exchanges_active == 0 && st.exchanges_detached == 0);
	CHECK(st.messages_dropped == 0);
	snprintf(id3, sizeof id3, "%s", id_at(id1, 3));
	/* resumed after event 1: events 2 and 3, then the end of the response */
	c = dial();
	says(c, get_req(sid, id1, 0));
	resp r = { 0 };
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	CHECK_STR(hdr(&r, "content-type"), "text/event-stream");
	expect_event(c, "{\"n\":2}", id_at(id1, 2));
	expect_event(c, "{\"n\":3}", id3);
	char ev[1024];
	CHECK(read_chunk(c, ev, sizeof ev) == 0);
	/* the connection serves on; from the last event there is nothing left: 204 (stop reconnecting) */
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"a\"}"));
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	says(c, get_req(sid, id3, 0));
	CHECK(read_resp(c, &r) == 0 && r.status == 204);
	/* from the priming event: all of it, exactly once, in order */
	says(c, get_req(sid, prime, 0));
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	expect_event(c, "{\"n\":1}", id1);
	expect_event(c, "{\"n\":2}", id_at(id1, 2));
	expect_event(c, "{\"n\":3}", id3);
	CHECK(read_chunk(c, ev, sizeof ev) == 0);
	hang_up(c);
	st = stats();
	CHECK(st.streams_resumed == 2 && st.streams_active == 0);

	/* resumed while the host still works: replay, then live; the POST connection the client
	 * still holds is taken over (closed) */
	cli *p = dial();
	x = open_sse(p, sid, s1, prime, id1);
	CHECK(x != 0);
	c = dial();
	says(c, get_req(sid, prime, 0));
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	expect_event(c, "{\"n\":1}", id1);
	CHECK(closed_by_server(p));
	hang_up(p);
	WAIT_UNTIL(st_.streams_active == 1 && st_.exchanges_detached == 1 && st_.connections_active == 1);
	st = stats();
	CHECK(st.streams_active == 1 && st.exchanges_detached == 1 && st.exchanges_active == 1);
	host_says(s1, x, 0, "{\"n\":2}");
	expect_event(c, "{\"n\":2}", id_at(id1, 2));
	host_says(s1, x, 1, "{\"n\":3}");
	expect_event(c, "{\"n\":3}", id_at(id1, 3));
	CHECK(read_chunk(c, ev, sizeof ev) == 0);
	st = stats();
	CHECK(st.streams_active == 0 && st.exchanges_active == 0 && st.exchanges_detached == 0);
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"a\"}"));
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	/* the stream's previous connection broke mid-resume: it can be resumed again */
	p = dial();
	x = open_sse(p, sid, s1, prime, id1);
	hang_up(p);
	says(c, get_req(sid, id1, 0));
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	host_says(s1, x, 0, "{\"n\":2}");
	expect_event(c, "{\"n\":2}", id_at(id1, 2));
	hang_up(c);
	WAIT_UNTIL(st_.streams_active == 0 && st_.connections_active == 0);
	host_says(s1, x, 1, "{\"n\":3}");
	c = dial();
	says(c, get_req(sid, id_at(id1, 2), 0));
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	expect_event(c, "{\"n\":3}", id_at(id1, 3));
	CHECK(read_chunk(c, ev, sizeof ev) == 0);
	hang_up(c);
	st = stats();
	CHECK(st.exchanges_active == 0 && st.exchanges_detached == 0 && st.messages_dropped == 0);
	resp_free(&r);
	srv_stop();
}

TEST(resume_refusals)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65], sid2[65], prime[MB_HTTP_EVENT_ID_MAX], id1[MB_HTTP_EVENT_ID_MAX], other[MB_HTTP_EVENT_ID_MAX],
		v[256];
	CHECK(init_session(sid, NULL) == 200);
	CHECK(init_session(sid2, NULL) == 200);
	uint64_t s1 = session_num(sid), s2 = session_num(sid2);
	cli *c = dial(), *c2 = dial();
	uint64_t x = open_sse(c, sid, s1, prime, id1);
	CHECK(x != 0);
	uint64_t x2 = open_sse(c2, sid2, s2, prime, other);
	CHECK(x2 != 0);
	char tag[9];
	memcpy(tag, id1, 8);
	tag[8] = 0;
	/* not an id of this server: 400 */
	const char *malformed[] = { "nope", "0123456789", "1234567g-1-1", "-1-1", "x", NULL };
	for (int i = 0; malformed[i]; i++)
		check_error(get_req(sid, malformed[i], 0), 400, "is not an event id of this server", NULL);
	snprintf(v, sizeof v, "%s-01-1", tag);
	check_error(get_req(sid, v, 0), 400, "is not an event id of this server", NULL);
	snprintf(v, sizeof v, "%s-1-1x", tag);
	check_error(get_req(sid, v, 0), 400, "is not an event id of this server", NULL);
	snprintf(v, sizeof v, "%s-0-1", tag);
	check_error(get_req(sid, v, 0), 400, "is not an event id of this server", NULL);
	snprintf(v, sizeof v, "%s-1-123456789012345678901", tag);
	check_error(get_req(sid, v, 0), 400, "is not an event id of this server", NULL);
	char upper[MB_HTTP_EVENT_ID_MAX];
	snprintf(upper, sizeof upper, "%s", id1);
	for (int i = 0; i < 8; i++)
		upper[i] = (char)toupper((unsigned char)upper[i]);
	if (strcmp(upper, id1) != 0)
		check_error(get_req(sid, upper, 0), 400, "is not an event id of this server", NULL);
	memset(v, '7', 120);
	v[120] = 0;
	check_error(get_req(sid, v, 0), 400, "last-event-id is too long", NULL);
	/* another session's id, an unknown stream, an event never sent: 409 */
	check_error(get_req(sid, other, 0), 409, "no stream of this session has that event", NULL);
	check_error(get_req(sid2, id1, 0), 409, "no stream of this session has that event", NULL);
	snprintf(v, sizeof v, "%s-1-1", strcmp(tag, "12345678") ? "12345678" : "87654321");
	check_error(get_req(sid, v, 0), 409, "no stream of this session has that event", NULL);
	snprintf(v, sizeof v, "%s-99-1", tag);
	check_error(get_req(sid, v, 0), 409, "no stream of this session has that event", NULL);
	check_error(get_req(sid, id_at(id1, 2), 0), 409, "no stream of this session has that event", NULL);
	/* the session rules come first: no session 400, an unknown one 404 */
	snprintf(v, sizeof v, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Last-Event-ID: %s\r\n\r\n", id1);
	check_error(v, 400, "Mcp-Session-Id header is required", NULL);
	check_error(get_req("0000000000000000000000000000000000000000000000000000000000000000", id1, 0), 404,
		    "Session not found", NULL);
	/* none of that touched the streams */
	mb_http_stats_t st = stats();
	CHECK(st.exchanges_active == 2 && st.exchanges_detached == 0 && st.streams_active == 0);
	CHECK(st.streams_resumed == 0);
	host_says(s1, x, 1, "{\"n\":2}");
	expect_event(c, "{\"n\":2}", id_at(id1, 2));
	host_says(s2, x2, 1, "{\"n\":2}");
	expect_event(c2, "{\"n\":2}", id_at(other, 2));
	hang_up(c);
	hang_up(c2);
	/* with resumption off there are no ids, and every Last-Event-ID is refused */
	srv_stop();
	const char *const off[] = { "--http-replay-bytes", "0", NULL };
	CHECK(srv_start(off) == 0);
	CHECK(init_session(sid, NULL) == 200);
	s1 = session_num(sid);
	c = dial();
	says(c, post(sid, "MCP-Protocol-Version: 2025-11-25\r\n", "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"slow\"}"));
	resp r = { 0 };
	char ev[4096];
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	CHECK(read_chunk(c, ev, sizeof ev) > 0);
	CHECK(strncmp(ev, "event: message\ndata: {", 22) == 0); /* no priming event, no id */
	hang_up(c); /* the exchange is dropped: its final message has nowhere to go */
	wait_timers();
	WAIT_UNTIL(st_.exchanges_active == 0 && st_.messages_dropped == 1);
	st = stats();
	CHECK(st.exchanges_active == 0 && st.exchanges_detached == 0 && st.messages_dropped == 1);
	CHECK(st.replay_bytes == 0);
	check_error(get_req(sid, id1, 0), 409, "resumption is off (http_replay_bytes=0)", NULL);
	resp_free(&r);
	srv_stop();
}

TEST(resume_the_get_stream)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65], gp[MB_HTTP_EVENT_ID_MAX], g1[MB_HTTP_EVENT_ID_MAX], ev[1024], id[MB_HTTP_EVENT_ID_MAX];
	CHECK(init_session(sid, NULL) == 200);
	uint64_t s1 = session_num(sid);
	cli *g = dial();
	says(g, get_req(sid, NULL, 1));
	resp r = { 0 };
	CHECK(read_head(g, &r, 0) == 0 && r.status == 200);
	CHECK(read_chunk(g, ev, sizeof ev) > 0);
	strip_id(ev, gp);
	CHECK_STR(ev, "retry: 1000\ndata: \n\n");
	host_says(s1, 0, 0, "{\"g\":1}");
	snprintf(g1, sizeof g1, "%s", id_at(gp, 1));
	expect_event(g, "{\"g\":1}", g1);
	/* the stream breaks; what the host sends meanwhile is kept */
	hang_up(g);
	WAIT_UNTIL(st_.streams_active == 0);
	host_says(s1, 0, 0, "{\"g\":2}");
	host_says(0, 0, 0, "{\"b\":1}"); /* a broadcast too */
	CHECK(stats().messages_dropped == 0);
	/* resumed: the two, then live; it takes the GET stream's place */
	g = dial();
	says(g, get_req(sid, g1, 0));
	CHECK(read_head(g, &r, 0) == 0 && r.status == 200);
	expect_event(g, "{\"g\":2}", id_at(gp, 2));
	expect_event(g, "{\"b\":1}", id_at(gp, 3));
	check_error(get_req(sid, NULL, 0), 409, "already has an open GET stream", NULL);
	host_says(s1, 0, 0, "{\"g\":4}");
	expect_event(g, "{\"g\":4}", id_at(gp, 4));
	mb_http_stats_t st = stats();
	CHECK(st.streams_active == 1 && st.streams_resumed == 1);
	/* resumed again while open (a client that saw it break first): the new GET takes over */
	cli *g2 = dial();
	says(g2, get_req(sid, id_at(gp, 3), 0));
	CHECK(read_head(g2, &r, 0) == 0 && r.status == 200);
	expect_event(g2, "{\"g\":4}", id_at(gp, 4));
	CHECK(closed_by_server(g));
	hang_up(g);
	host_says(s1, 0, 0, "{\"g\":5}");
	expect_event(g2, "{\"g\":5}", id_at(gp, 5));
	WAIT_UNTIL(st_.streams_active == 1 && st_.connections_active == 1);
	CHECK(stats().streams_active == 1);
	hang_up(g2);
	WAIT_UNTIL(st_.streams_active == 0);
	/* a GET without Last-Event-ID starts a new stream; the old one can still be replayed to its
	 * end, but no further */
	g = dial();
	says(g, get_req(sid, NULL, 1));
	CHECK(read_head(g, &r, 0) == 0 && r.status == 200);
	CHECK(read_chunk(g, ev, sizeof ev) > 0);
	strip_id(ev, id);
	CHECK(strcmp(id, gp) != 0 && strncmp(id, gp, 8) == 0);
	host_says(s1, 0, 0, "{\"g\":6}");
	expect_event(g, "{\"g\":6}", id_at(id, 1));
	cli *c = dial();
	says(c, get_req(sid, id_at(gp, 3), 0));
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	expect_event(c, "{\"g\":4}", id_at(gp, 4));
	expect_event(c, "{\"g\":5}", id_at(gp, 5));
	CHECK(read_chunk(c, ev, sizeof ev) == 0);
	says(c, get_req(sid, id_at(gp, 5), 0));
	CHECK(read_resp(c, &r) == 0 && r.status == 204);
	hang_up(c);
	/* DELETE ends the session: its streams and what was kept go */
	char q[512];
	snprintf(q, sizeof q, "DELETE /mcp HTTP/1.1\r\nHost: localhost\r\nMcp-Session-Id: %s\r\n\r\n", sid);
	CHECK(once(q, &r) == 0 && r.status == 204);
	CHECK(read_chunk(g, ev, sizeof ev) == 0);
	hang_up(g);
	WAIT_UNTIL(st_.connections_active == 0);
	st = stats();
	CHECK(st.streams_active == 0 && st.replay_bytes == 0 && st.sessions_active == 0);
	resp_free(&r);
	srv_stop();
}

TEST(replay_bounds)
{
	const char *const args[] = { "--http-replay-bytes", "2048", "--http-session-idle-ms", "400", NULL };
	CHECK(srv_start(args) == 0);
	char sid[65], prime[MB_HTTP_EVENT_ID_MAX], id1[MB_HTTP_EVENT_ID_MAX], big[4096], ev[4096];
	CHECK(init_session(sid, NULL) == 200);
	uint64_t s1 = session_num(sid);
	cli *keep = dial(); /* an open GET stream keeps the session alive */
	says(keep, get_req(sid, NULL, 0));
	resp r = { 0 };
	CHECK(read_head(keep, &r, 0) == 0 && r.status == 200);
	cli *c = dial();
	uint64_t x = open_sse(c, sid, s1, prime, id1);
	CHECK(x != 0);
	hang_up(c);
	WAIT_UNTIL(st_.exchanges_detached == 1);
	/* nine messages of ~400 bytes: the oldest go */
	char pad[401];
	memset(pad, 'y', 400);
	pad[400] = 0;
	snprintf(big, sizeof big, "{\"pad\":\"%s\"}", pad);
	for (int i = 0; i < 9; i++)
		host_says(s1, x, 0, big); /* seq 2..10 */
	mb_http_stats_t st = stats();
	CHECK(st.replay_bytes > 0 && st.replay_bytes <= 2048);
	CHECK(st.replay_dropped >= 5);
	check_error(get_req(sid, id1, 0), 409, "were dropped from the session's replay buffer (http_replay_bytes=2048)",
		    NULL);
	check_error(get_req(sid, prime, 0), 409, "were dropped", NULL);
	/* what is still kept can be resumed */
	c = dial();
	says(c, get_req(sid, id_at(id1, 9), 0));
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	expect_event(c, big, id_at(id1, 10));
	hang_up(c);
	WAIT_UNTIL(st_.exchanges_detached == 1 && st_.streams_active == 1);
	/* a message larger than the bound is not kept at all: resuming before it is refused */
	char huge[3000];
	memset(huge, 'z', sizeof huge - 1);
	huge[0] = '"';
	huge[sizeof huge - 2] = '"';
	huge[sizeof huge - 1] = 0;
	host_says(s1, x, 1, huge); /* seq 11, final */
	st = stats();
	CHECK(st.exchanges_active == 0 && st.exchanges_detached == 0);
	check_error(get_req(sid, id_at(id1, 10), 0), 409, "were dropped", NULL);
	c = dial();
	says(c, get_req(sid, id_at(id1, 11), 0));
	CHECK(read_resp(c, &r) == 0 && r.status == 204);
	hang_up(c);
	/* a finished stream is forgotten min(60 s, http_session_idle_ms) after it finished */
	usleep(700000);
	check_error(get_req(sid, id_at(id1, 11), 0), 409, "no stream of this session has that event", NULL);
	/* at most 64 streams per session: the oldest finished ones are forgotten first */
	c = dial();
	char first[MB_HTTP_EVENT_ID_MAX] = "", last[MB_HTTP_EVENT_ID_MAX] = "";
	for (int i = 0; i < 66; i++) {
		says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"slowsync\"}"));
		CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
		CHECK(read_event(c, ev, sizeof ev, i ? last : first) > 0);
		CHECK(read_chunk(c, ev, sizeof ev) > 0 && read_chunk(c, ev, sizeof ev) == 0);
	}
	check_error(get_req(sid, first, 0), 409, "no stream of this session has that event", NULL);
	says(c, get_req(sid, last, 0));
	CHECK(read_head(c, &r, 0) == 0 && r.status == 200);
	CHECK(read_event(c, ev, sizeof ev, big) > 0 && strstr(ev, "\"result\""));
	CHECK(read_chunk(c, ev, sizeof ev) == 0);
	hang_up(c);
	hang_up(keep);
	/* a parked exchange does not keep its session alive: expiry ends both */
	char sid2[65];
	CHECK(init_session(sid2, NULL) == 200);
	uint64_t s2 = session_num(sid2);
	c = dial();
	x = open_sse(c, sid2, s2, prime, id1);
	CHECK(x != 0);
	hang_up(c);
	WAIT_UNTIL(st_.exchanges_detached == 1);
	usleep(600000);
	WAIT_UNTIL(st_.sessions_active == 0);
	st = stats();
	CHECK(fake_ended(s2));
	CHECK(st.sessions_active == 0 && st.exchanges_active == 0 && st.exchanges_detached == 0);
	CHECK(st.replay_bytes == 0 && st.streams_active == 0 && st.connections_active == 0);
	uint64_t dropped = st.messages_dropped;
	host_says(s2, x, 1, "{\"n\":2}");
	CHECK(stats().messages_dropped == dropped + 1);
	resp_free(&r);
	srv_stop();
}

/* The replay buffer's bookkeeping on its own (no sockets). */
TEST(replay_buffer_bookkeeping)
{
	uv_loop_t l;
	uv_loop_init(&l);
	mb_http *h = calloc(1, sizeof *h);
	h->loop = &l;
	h->replay_max = 4 * (sizeof(revent) + 10);
	h->replay_total_max = SIZE_MAX; /* (the server-wide bound: replay_total_bound) */
	h->replay_keep = 1000;
	CHECK(htab_init(&h->parked, 8) == 0);
	session *s = calloc(1, sizeof *s);
	mb_http_replay_init(s);
	CHECK(strlen(s->rp.tag) == 8);
	rstream *a = mb_http_replay_open(h, s, 7), *g = mb_http_replay_open(h, s, 0);
	CHECK(a && g && a->num == 1 && g->num == 2 && s->rp.get == g);
	char id[MB_HTTP_EVENT_ID_MAX], want[MB_HTTP_EVENT_ID_MAX];
	CHECK(mb_http_replay_add(h, a, "0123456789", 10, 0) == 1);
	CHECK(mb_http_replay_add(h, g, "abcdefghij", 10, 0) == 1);
	CHECK(mb_http_replay_add(h, a, "0123456789", 10, 0) == 2);
	mb_http_replay_id(a, 2, id);
	snprintf(want, sizeof want, "%s-1-2", s->rp.tag);
	CHECK_STR(id, want);
	rstream *r = NULL;
	uint64_t seq = 99;
	CHECK(mb_http_replay_find(s, id, strlen(id), &r, &seq) == 0 && r == a && seq == 2);
	mb_http_replay_id(g, 0, id);
	CHECK(mb_http_replay_find(s, id, strlen(id), &r, &seq) == 0 && r == g && seq == 0);
	mb_http_replay_id(g, 2, id); /* not sent yet */
	CHECK(mb_http_replay_find(s, id, strlen(id), &r, &seq) == -ENOENT);
	CHECK(mb_http_replay_find(s, "zz", 2, &r, &seq) == -EINVAL);
	CHECK(h->st.replay_bytes == 3 * (sizeof(revent) + 10) && s->rp.bytes == h->st.replay_bytes);
	/* over the bound: the session's oldest event goes (a's first), then g's */
	mb_http_replay_add(h, a, "0123456789", 10, 0);
	mb_http_replay_add(h, a, "0123456789", 10, 0);
	CHECK(h->st.replay_dropped == 1 && a->dropped_to == 1 && a->head->seq == 2);
	mb_http_replay_add(h, a, "0123456789", 10, 0);
	CHECK(h->st.replay_dropped == 2 && g->head == NULL && g->dropped_to == 1);
	mb_http_replay_id(a, 0, id);
	CHECK(mb_http_replay_find(s, id, strlen(id), &r, &seq) == -ERANGE);
	mb_http_replay_id(a, 1, id);
	CHECK(mb_http_replay_find(s, id, strlen(id), &r, &seq) == 0 && r == a);
	mb_http_replay_id(g, 1, id);
	CHECK(mb_http_replay_find(s, id, strlen(id), &r, &seq) == 0 && r == g); /* nothing after it to miss */
	/* parked: counted, found by exchange; the final message ends it */
	h->st.exchanges_active = 1;
	mb_http_replay_park(h, a);
	CHECK(h->st.exchanges_detached == 1 && mb_http_replay_parked(h, 7) == a && !mb_http_replay_parked(h, 8));
	mb_http_replay_add(h, a, "x", 1, 1);
	mb_http_replay_unpark(h, a);
	CHECK(a->done && h->st.exchanges_detached == 0 && h->st.exchanges_active == 0 && !mb_http_replay_parked(h, 7));
	/* a new GET stream supersedes the old one; finished streams go after replay_keep */
	rstream *g2 = mb_http_replay_open(h, s, 0);
	CHECK(g->done && s->rp.get == g2 && s->rp.n == 3);
	mb_http_replay_sweep(h, s, uv_now(&l) + 999);
	CHECK(s->rp.n == 3);
	mb_http_replay_sweep(h, s, uv_now(&l) + 1000);
	CHECK(s->rp.n == 1 && s->rp.first == g2);
	/* at most 64 records: one more forgets the oldest without a connection */
	for (int i = 0; i < 63; i++)
		CHECK(mb_http_replay_open(h, s, 100 + (uint64_t)i) != NULL);
	CHECK(s->rp.n == 64);
	rstream *more = mb_http_replay_open(h, s, 500);
	CHECK(more && s->rp.n == 64 && s->rp.first->exchange == 100 && s->rp.get == NULL);
	mb_http_replay_free(h, s);
	CHECK(s->rp.n == 0 && s->rp.bytes == 0 && h->st.replay_bytes == 0);
	/* off: no records */
	h->replay_max = 0;
	CHECK(mb_http_replay_open(h, s, 1) == NULL);
	free(s);
	free(h->parked.b);
	free(h);
	CHECK(uv_loop_close(&l) == 0);
}

/* All sessions' events together stay within http_replay_total_bytes: a session over it loses its
 * own oldest events first, then keeps no new one while the others hold the rest (a resume from
 * before that event is refused); once their sessions go, it keeps events again. */
TEST(replay_total_bound)
{
	uv_loop_t l;
	uv_loop_init(&l);
	mb_http *h = calloc(1, sizeof *h);
	h->loop = &l;
	size_t ev = sizeof(revent) + 10;
	h->replay_max = 4 * ev;       /* per session */
	h->replay_total_max = 5 * ev; /* all sessions */
	h->replay_keep = 1000;
	CHECK(htab_init(&h->parked, 8) == 0);
	session *s1 = calloc(1, sizeof *s1), *s2 = calloc(1, sizeof *s2);
	mb_http_replay_init(s1);
	mb_http_replay_init(s2);
	rstream *a = mb_http_replay_open(h, s1, 1), *b = mb_http_replay_open(h, s2, 2);
	CHECK(a && b);
	for (int i = 0; i < 4; i++)
		mb_http_replay_add(h, a, "0123456789", 10, 0);
	CHECK(s1->rp.bytes == 4 * ev && h->st.replay_bytes == 4 * ev && h->st.replay_dropped == 0);
	mb_http_replay_add(h, b, "abcdefghij", 10, 0); /* the fifth: fits */
	CHECK(h->st.replay_bytes == 5 * ev && s2->rp.bytes == ev);
	/* s2's next: over the total; s2's own oldest goes first, then it fits again */
	uint64_t seq = mb_http_replay_add(h, b, "abcdefghij", 10, 0);
	CHECK(seq == 2 && s2->rp.bytes == ev && h->st.replay_bytes == 5 * ev && b->head->seq == 2);
	CHECK(b->dropped_to == 1 && h->st.replay_dropped == 1);
	/* s1 is at its own bound and the total is full: its oldest go, one per new event */
	mb_http_replay_add(h, a, "0123456789", 10, 0);
	CHECK(s1->rp.bytes == 4 * ev && h->st.replay_bytes == 5 * ev && a->dropped_to == 1);
	/* a session with nothing kept cannot take from the others: its event is not kept */
	session *s3 = calloc(1, sizeof *s3);
	mb_http_replay_init(s3);
	rstream *c = mb_http_replay_open(h, s3, 3);
	seq = mb_http_replay_add(h, c, "xyzxyzxyzx", 10, 0);
	CHECK(seq == 1 && c->head == NULL && c->dropped_to == 1 && s3->rp.bytes == 0);
	CHECK(h->st.replay_bytes == 5 * ev && s1->rp.bytes == 4 * ev && s2->rp.bytes == ev);
	char id[MB_HTTP_EVENT_ID_MAX];
	rstream *r = NULL;
	mb_http_replay_id(c, 0, id); /* before the event not kept: refused */
	CHECK(mb_http_replay_find(s3, id, strlen(id), &r, &seq) == -ERANGE);
	/* when the others' sessions end, it keeps events again */
	mb_http_replay_free(h, s1);
	mb_http_replay_free(h, s2);
	CHECK(h->st.replay_bytes == 0);
	mb_http_replay_add(h, c, "xyzxyzxyzx", 10, 0);
	CHECK(s3->rp.bytes == ev && c->head && c->head->seq == 2);
	mb_http_replay_free(h, s3);
	CHECK(h->st.replay_bytes == 0);
	free(s1);
	free(s2);
	free(s3);
	free(h->parked.b);
	free(h);
	CHECK(uv_loop_close(&l) == 0);
}

TEST(idle_sessions_expire)
{
	const char *const args[] = { "--http-session-idle-ms", "200", NULL };
	CHECK(srv_start(args) == 0);
	char sid[65], keep[65], q[512];
	CHECK(init_session(sid, NULL) == 200);
	CHECK(init_session(keep, NULL) == 200);
	cli *g = dial(); /* an open GET stream keeps a session alive */
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\n\r\n", keep);
	says(g, q);
	resp r = { 0 };
	CHECK(read_head(g, &r, 0) == 0 && r.status == 200);
	/* used within the idle time: stays */
	for (int i = 0; i < 3; i++) {
		usleep(120000);
		CHECK(once(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"), &r) == 0 && r.status == 200);
	}
	uint64_t s1 = sess_of(r.body);
	usleep(600000);
	check_error(post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"), 404, "Session not found", NULL);
	CHECK(fake_ended(s1));
	mb_http_stats_t st = stats();
	CHECK(st.sessions_expired == 1);
	CHECK(st.sessions_active == 1);
	hang_up(g);
	usleep(300000); /* without its stream it expires too */
	WAIT_UNTIL(st_.sessions_expired == 2);
	st = stats();
	CHECK(st.sessions_expired == 2);
	CHECK(st.sessions_active == 0);
	resp_free(&r);
	srv_stop();
}

#define TOK_A "alpha-token-0123456789"
#define TOK_B "beta-token-9876543210"

TEST(tokens_and_tenants)
{
	const char *const args[] = { "--http-tokens", TOK_A "=alpha, " TOK_B "=beta,other-token-0000000=alpha", NULL };
	CHECK(srv_start(args) == 0);
	char sid[65], q[1024];
	resp r = { 0 };
	/* The 401 says which header to send, in the body and in WWW-Authenticate's error_description
	 * (a client that sees only "Bearer" starts OAuth, which moonbox does not offer);
	 * error="invalid_token" only where a bearer token was sent and refused (RFC 6750). */
	const char *none = "WWW-Authenticate: Bearer realm=\"moonbox\", error_description=\"send the header "
			   "Authorization: Bearer <token> with a token of this server's http_tokens (OAuth is not "
			   "offered)\"";
	const char *refused = "WWW-Authenticate: Bearer realm=\"moonbox\", error=\"invalid_token\", "
			      "error_description=\"the bearer token is not one of this server's http_tokens: send "
			      "Authorization: Bearer <token> with a configured token (OAuth is not offered)\"";
	check_error(post(NULL, NULL, init_body), 401,
		    "Unauthorized: send Authorization: Bearer <token> with a token of this server's http_tokens "
		    "(moonbox does not offer OAuth", none);
	check_error(post(NULL, "Authorization: Bearer wrong-token-000000000\r\n", init_body), 401,
		    "Unauthorized: the bearer token is not valid: send Authorization: Bearer <token>", refused);
	check_error(post(NULL, "Authorization: Bearer " TOK_A "x\r\n", init_body), 401, "not valid", refused);
	check_error(post(NULL, "Authorization: Bearer alpha-token-012345678\r\n", init_body), 401, "not valid", refused);
	check_error(post(NULL, "Authorization: Basic " TOK_A "\r\n", init_body), 401,
		    "the Authorization header must be Bearer <token>", none);
	check_error(post(NULL, "Authorization: Bearer\r\n", init_body), 401, "not valid", refused);
	CHECK(stats().auth_failures == 6);
	pthread_mutex_lock(&F.mu);
	CHECK(F.messages == 0);
	pthread_mutex_unlock(&F.mu);
	CHECK(init_session(sid, "Authorization: bearer   " TOK_A "  \r\n") == 200);
	CHECK(is_hex64(sid));
	pthread_mutex_lock(&F.mu);
	CHECK_STR(F.last_tenant, "alpha");
	pthread_mutex_unlock(&F.mu);
	/* the same tenant through another token may use the session; another tenant may not */
	CHECK(once(post(sid, "Authorization: Bearer other-token-0000000\r\n",
			"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"), &r) == 0);
	CHECK(r.status == 200 && strstr(r.body, "\"tenant\":\"alpha\""));
	check_error(post(sid, "Authorization: Bearer " TOK_B "\r\n", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}"),
		    404, "Session not found", NULL);
	snprintf(q, sizeof q, "DELETE /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " TOK_B "\r\n"
		 "Mcp-Session-Id: %s\r\n\r\n", sid);
	check_error(q, 404, "Session not found", NULL);
	snprintf(q, sizeof q, "DELETE /mcp HTTP/1.1\r\nHost: localhost\r\nMcp-Session-Id: %s\r\n\r\n", sid);
	check_error(q, 401, "Unauthorized", NULL);
	CHECK(init_session(sid, "Authorization: Bearer " TOK_B "\r\n") == 200);
	pthread_mutex_lock(&F.mu);
	CHECK_STR(F.last_tenant, "beta");
	pthread_mutex_unlock(&F.mu);
	/* /metrics needs a token, /healthz does not */
	check_error("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", 401, "Unauthorized", NULL);
	CHECK(once("GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " TOK_B "\r\n\r\n", &r) == 0);
	CHECK(r.status == 200);
	CHECK(once("GET /healthz HTTP/1.1\r\n\r\n", &r) == 0 && r.status == 200);
	/* Expect: 100-continue: refused at once, or told to continue */
	cli *c = dial();
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		 "Accept: application/json, text/event-stream\r\nExpect: 100-continue\r\nContent-Length: %zu\r\n\r\n",
		 strlen(init_body));
	says(c, q);
	CHECK(read_resp(c, &r) == 0 && r.status == 401);
	CHECK(closed_by_server(c));
	hang_up(c);
	c = dial();
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		 "Accept: application/json, text/event-stream\r\nExpect: 100-Continue\r\n"
		 "Authorization: Bearer " TOK_A "\r\nContent-Length: %zu\r\n\r\n", strlen(init_body));
	says(c, q);
	CHECK(read_head(c, &r, 1) == 0 && r.status == 100);
	says(c, init_body);
	CHECK(read_resp(c, &r) == 0 && r.status == 200 && hdr(&r, "mcp-session-id"));
	hang_up(c);
	resp_free(&r);
	srv_stop();
}

static int start_fails(const char *const *extra, const char *want)
{
	if (srv_start(extra) == 0) {
		srv_stop();
		fprintf(stderr, "  expected a refusal: %s\n", want);
		return 0;
	}
	if (strcmp(start_err, want) != 0) {
		fprintf(stderr, "  got \"%s\"\n  want \"%s\"\n", start_err, want);
		return 0;
	}
	return 1;
}

TEST(start_refusals)
{
	const char *const any[] = { "--http-listen", "0.0.0.0:0", NULL };
	CHECK(start_fails(any, "refusing to listen on 0.0.0.0:0 without http_tokens or oauth_issuer; set "
			  "http_trust_proxy=1 if an authenticating proxy is in front"));
	const char *const v6[] = { "--http-listen", "[::]:0", NULL };
	CHECK(start_fails(v6, "refusing to listen on [::]:0 without http_tokens or oauth_issuer; set "
			  "http_trust_proxy=1 if an authenticating proxy is in front"));
	const char *const proxy[] = { "--http-listen", "0.0.0.0:0", "--http-trust-proxy", "1", NULL };
	CHECK(srv_start(proxy) == 0);
	/* the bound address is all interfaces; Host must still be allowed */
	resp r = { 0 };
	CHECK(once("GET /metrics HTTP/1.1\r\nHost: 10.1.2.3\r\n\r\n", &r) == 0 && r.status == 403);
	resp_free(&r);
	srv_stop();
	const char *const tok[] = { "--http-listen", "0.0.0.0:0", "--http-tokens", TOK_A "=a",
				    "--http-allowed-hosts", "mcp.example.com, 10.1.2.3:8080", NULL };
	CHECK(srv_start(tok) == 0);
	char q[256];
	snprintf(q, sizeof q, "GET /metrics HTTP/1.1\r\nHost: MCP.example.com:%d\r\nAuthorization: Bearer %s\r\n\r\n",
		 PORT, TOK_A);
	CHECK(once(q, &r) == 0 && r.status == 200);
	CHECK(once("GET /metrics HTTP/1.1\r\nHost: 10.1.2.3:8080\r\nAuthorization: Bearer " TOK_A "\r\n\r\n", &r) == 0 &&
	      r.status == 200);
	CHECK(once("GET /metrics HTTP/1.1\r\nHost: 10.1.2.3:8081\r\nAuthorization: Bearer " TOK_A "\r\n\r\n", &r) == 0 &&
	      r.status == 403);
	resp_free(&r);
	srv_stop();
	const char *const empty[] = { "--http-listen", "", NULL };
	CHECK(start_fails(empty, "http_listen is empty"));
	const char *const name[] = { "--http-listen", "example.com:80", NULL };
	CHECK(start_fails(name, "http_listen \"example.com:80\": host \"example.com\" is not an IP address or localhost"));
	const char *const port[] = { "--http-listen", "127.0.0.1:99999", NULL };
	CHECK(start_fails(port, "http_listen \"127.0.0.1:99999\": port must be 0..65535, got \"99999\""));
	const char *const v6bad[] = { "--http-listen", "[::1]", NULL };
	CHECK(start_fails(v6bad, "http_listen \"[::1]\" is not [ipv6]:port"));
	const char *const v6raw[] = { "--http-listen", "::1:80", NULL };
	CHECK(start_fails(v6raw, "http_listen \"::1:80\" is not host:port (write IPv6 as [addr]:port)"));
	const char *const short_tok[] = { "--http-tokens", "short=a", NULL };
	CHECK(start_fails(short_tok, "http_tokens entry 1: a token must be 16..512 characters long"));
	const char *const bad_tenant[] = { "--http-tokens", TOK_A "=../etc", NULL };
	CHECK(start_fails(bad_tenant, "http_tokens entry 1: tenant must be 1-64 characters of A-Z a-z 0-9 _ . - "
			  "(not \".\" or \"..\")"));
	const char *const dotdot[] = { "--http-tokens", TOK_A "=a," TOK_B "=..", NULL };
	CHECK(start_fails(dotdot, "http_tokens entry 2: tenant must be 1-64 characters of A-Z a-z 0-9 _ . - "
			  "(not \".\" or \"..\")"));
	const char *const no_eq[] = { "--http-tokens", TOK_A, NULL };
	CHECK(start_fails(no_eq, "http_tokens entry 1 has no \"=tenant\" (expected token=tenant,...)"));
	const char *const dup[] = { "--http-tokens", TOK_A "=a," TOK_A "=b", NULL };
	CHECK(start_fails(dup, "http_tokens entry 2 repeats an earlier token"));
	const char *const nontext[] = { "--http-tokens", "abc\tdefghijklmnopq=a", NULL };
	CHECK(start_fails(nontext, "http_tokens entry 1: the token must be visible ASCII without spaces"));
	/* the port is taken */
	CHECK(srv_start(NULL) == 0);
	char spec[64];
	snprintf(spec, sizeof spec, "127.0.0.1:%d", PORT);
	mb_config c2;
	const char *const taken[] = { "--http-listen", spec, NULL };
	CHECK(load_cfg(&c2, taken) == 0);
	uv_loop_t l2;
	uv_loop_init(&l2);
	char err[256];
	CHECK(mb_http_start(&l2, &c2, &CBS, err, sizeof err) == NULL);
	char want[128];
	snprintf(want, sizeof want, "cannot listen on %s (http_listen): Address already in use", spec);
	CHECK_STR(err, want);
	CHECK(uv_loop_close(&l2) == 0); /* nothing left on the loop */
	srv_stop();
}

TEST(listen_addresses_and_policies)
{
	struct sockaddr_storage ss;
	int lb;
	char err[256];
	CHECK(mb_http_parse_listen("8080", &ss, &lb, err, sizeof err) == 0 && lb == 1);
	CHECK(ss.ss_family == AF_INET && ntohs(((struct sockaddr_in *)&ss)->sin_port) == 8080);
	CHECK(mb_http_parse_listen(":8080", &ss, &lb, err, sizeof err) == 0 && lb == 1);
	CHECK(mb_http_parse_listen("localhost:1", &ss, &lb, err, sizeof err) == 0 && lb == 1);
	CHECK(mb_http_parse_listen("127.3.4.5:1", &ss, &lb, err, sizeof err) == 0 && lb == 1);
	CHECK(mb_http_parse_listen("[::1]:9", &ss, &lb, err, sizeof err) == 0 && lb == 1 && ss.ss_family == AF_INET6);
	CHECK(mb_http_parse_listen("0.0.0.0:9", &ss, &lb, err, sizeof err) == 0 && lb == 0);
	CHECK(mb_http_parse_listen("192.168.1.5:9", &ss, &lb, err, sizeof err) == 0 && lb == 0);
	CHECK(mb_http_parse_listen("[::]:9", &ss, &lb, err, sizeof err) == 0 && lb == 0);
	CHECK(mb_http_parse_listen("1.2.3.4:", &ss, &lb, err, sizeof err) == -EINVAL);
	CHECK(mb_http_parse_listen("1.2.3.4:-1", &ss, &lb, err, sizeof err) == -EINVAL);
	CHECK(mb_http_parse_listen("1.2.3.4:+1", &ss, &lb, err, sizeof err) == -EINVAL);
	CHECK(mb_http_parse_listen("x", &ss, &lb, err, sizeof err) == -EINVAL);

	mb_config c;
	const char *const args[] = { "--http-tokens", TOK_A "=alpha," TOK_B "=beta",
				     "--http-allowed-hosts", "Example.com,api.example.com:443",
				     "--http-allowed-origins", "https://app.example.com",
				     "--http-cors-origin", "https://ui.example.com", NULL };
	CHECK(load_cfg(&c, args) == 0);
	mb_http_policy p;
	CHECK(mb_http_policy_init(&p, &c, "192.168.1.5", err, sizeof err) == 0);
	CHECK(p.ntokens == 2);
	for (size_t i = 0; i < p.ntokens; i++) /* only hashes are kept */
		CHECK(memmem(&p.tokens[i], sizeof p.tokens[i], "alpha-token", 11) == NULL);
#define HOST(s) mb_http_host_allowed(&p, s, strlen(s))
	CHECK(HOST("localhost") && HOST("LOCALHOST:1") && HOST("127.0.0.1:8080") && HOST("[::1]:80") && HOST("[::1]"));
	CHECK(HOST("example.com") && HOST("example.com:9") && HOST("api.example.com:443"));
	CHECK(!HOST("api.example.com") && !HOST("api.example.com:80"));
	CHECK(HOST("192.168.1.5:8080") && !HOST("192.168.1.6"));
	CHECK(!HOST("") && !HOST("localhost:") && !HOST("localhost:x") && !HOST("[::1") && !HOST("a b"));
	CHECK(!HOST("localhost.evil.com") && !HOST("127.0.0.1.nip.io") && !HOST("evil.com:80@localhost"));
#define ORIGIN(s) mb_http_origin_allowed(&p, s, strlen(s))
	CHECK(ORIGIN("http://localhost:3000") && ORIGIN("https://127.0.0.1") && ORIGIN("http://[::1]:6274"));
	CHECK(ORIGIN("https://app.example.com") && ORIGIN("HTTPS://APP.example.com") && ORIGIN("https://ui.example.com"));
	CHECK(!ORIGIN("https://app.example.com:8443") && !ORIGIN("http://app.example.com"));
	CHECK(!ORIGIN("null") && !ORIGIN("file://") && !ORIGIN("http://localhost.evil.com") && !ORIGIN("localhost"));
	CHECK(!ORIGIN("http://localhost@evil.com") && !ORIGIN("http://localhost:3000/path"));
	CHECK(mb_http_cors_allowed(&p, "https://ui.example.com", 22) && !mb_http_cors_allowed(&p, "https://app.example.com", 23));
#define AUTH(s) mb_http_authenticate(&p, s, strlen(s))
	CHECK_STR(AUTH("Bearer " TOK_A), "alpha");
	CHECK_STR(AUTH("BEARER\t" TOK_B " "), "beta");
	CHECK(AUTH("Bearer " TOK_A "A") == NULL && AUTH("Bearer") == NULL && AUTH("Bearer ") == NULL);
	CHECK(AUTH("Token " TOK_A) == NULL && AUTH(TOK_A) == NULL && AUTH("Bearer" TOK_A) == NULL);
	CHECK(mb_http_authenticate(&p, NULL, 0) == NULL);
	mb_http_policy_free(&p);
	CHECK(load_cfg(&c, NULL) == 0);
	CHECK(mb_http_policy_init(&p, &c, "", err, sizeof err) == 0);
	CHECK_STR(mb_http_authenticate(&p, NULL, 0), "default");
	CHECK_STR(AUTH("Bearer anything"), "default");
	CHECK(!HOST("example.com") && !ORIGIN("https://app.example.com"));
	mb_http_policy_free(&p);
	const char *const star[] = { "--http-allowed-hosts", "*", "--http-allowed-origins", " * ", NULL };
	CHECK(load_cfg(&c, star) == 0);
	CHECK(mb_http_policy_init(&p, &c, "", err, sizeof err) == 0);
	CHECK(HOST("anything.example") && ORIGIN("https://anything.example") && !HOST("bad host"));
	mb_http_policy_free(&p);
}

TEST(cors)
{
	const char *const args[] = { "--http-cors-origin", "http://app.example", NULL };
	CHECK(srv_start(args) == 0);
	resp r = { 0 };
	CHECK(once("OPTIONS /mcp HTTP/1.1\r\nHost: localhost\r\nOrigin: http://app.example\r\n"
		   "Access-Control-Request-Method: POST\r\n"
		   "Access-Control-Request-Headers: content-type, mcp-session-id\r\n\r\n", &r) == 0);
	CHECK(r.status == 204);
	CHECK_STR(hdr(&r, "access-control-allow-origin"), "http://app.example");
	CHECK_STR(hdr(&r, "access-control-allow-methods"), "GET, POST, DELETE, OPTIONS");
	const char *ah = hdr(&r, "access-control-allow-headers");
	CHECK(ah && strstr(ah, "Mcp-Session-Id") && strstr(ah, "Authorization") && strstr(ah, "Mcp-Protocol-Version") &&
	      strstr(ah, "Last-Event-ID") && strstr(ah, "Content-Type"));
	CHECK_STR(hdr(&r, "vary"), "Origin");
	CHECK(hdr(&r, "content-length") == NULL);
	char q[2048];
	snprintf(q, sizeof q, "POST /mcp HTTP/1.1\r\nHost: localhost:%d\r\nOrigin: http://app.example\r\n"
		 "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		 "Content-Length: %zu\r\n\r\n%s", PORT, strlen(init_body), init_body);
	CHECK(once(q, &r) == 0 && r.status == 200);
	CHECK_STR(hdr(&r, "access-control-allow-origin"), "http://app.example");
	CHECK_STR(hdr(&r, "access-control-expose-headers"), "Mcp-Session-Id, WWW-Authenticate");
	CHECK(hdr(&r, "mcp-session-id") != NULL);
	/* a loopback origin is allowed but gets no CORS headers; a foreign one is refused */
	CHECK(once("OPTIONS /mcp HTTP/1.1\r\nHost: localhost\r\nOrigin: http://localhost:5173\r\n\r\n", &r) == 0);
	CHECK(r.status == 204 && hdr(&r, "access-control-allow-origin") == NULL);
	CHECK_STR(hdr(&r, "allow"), "GET, POST, DELETE, OPTIONS");
	check_error("OPTIONS /mcp HTTP/1.1\r\nHost: localhost\r\nOrigin: http://other.example\r\n\r\n", 403,
		    "Forbidden: Origin", NULL);
	resp_free(&r);
	srv_stop();
}

TEST(limits_on_connections_and_sessions)
{
	const char *const args[] = { "--http-max-connections", "2", "--http-max-sessions", "1", NULL };
	CHECK(srv_start(args) == 0);
	cli *a = dial(), *b = dial();
	resp r = { 0 };
	says(a, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(a, &r) == 0 && r.status == 200);
	says(b, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(b, &r) == 0 && r.status == 200);
	cli *c = dial();
	CHECK(c != NULL);
	CHECK(read_resp(c, &r) == 0 && r.status == 503);
	CHECK_STR(hdr(&r, "retry-after"), "1");
	CHECK(closed_by_server(c));
	hang_up(c);
	hang_up(b);
	WAIT_UNTIL(st_.connections_active == 1);
	mb_http_stats_t st = stats();
	CHECK(st.connections_rejected == 1 && st.connections_active == 1);
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	check_error(post(NULL, NULL, init_body), 503,
		    "Service Unavailable: 1 sessions are open (http_max_sessions=1); retry later", "Retry-After: 5");
	hang_up(a);
	srv_stop();
	/* a refused initialize (the host answers an error) ends its session again */
	CHECK(srv_start(NULL) == 0);
	CHECK(once(post(NULL, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"fail\":true}}"),
		   &r) == 0);
	CHECK(r.status == 200 && strstr(r.body, "\"error\""));
	CHECK(hdr(&r, "mcp-session-id") == NULL);
	WAIT_UNTIL(ended_count() == 1);
	pthread_mutex_lock(&F.mu);
	CHECK(F.ended == 1 && F.ended_ids[0] == F.last_session);
	pthread_mutex_unlock(&F.mu);
	st = stats();
	CHECK(st.sessions_active == 0 && st.sessions_created == 1);
	resp_free(&r);
	srv_stop();
}

TEST(healthz_and_metrics)
{
	CHECK(srv_start(NULL) == 0);
	resp r = { 0 };
	char longurl[2100];
	memset(longurl, 'a', sizeof longurl - 1);
	longurl[sizeof longurl - 1] = 0;
	snprintf(req_buf, sizeof req_buf, "GET /mcp?%s HTTP/1.1\r\nHost: localhost\r\n\r\n", longurl);
	check_error(req_buf, 414, "request URL above 2048 bytes", NULL);
	CHECK(once("GET /healthz HTTP/1.1\r\nHost: whatever\r\n\r\n", &r) == 0);
	CHECK(r.status == 200 && r.blen == 3 && strcmp(r.body, "ok\n") == 0);
	CHECK_STR(hdr(&r, "content-type"), "text/plain; charset=utf-8");
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	check_error(post(NULL, "MCP-Protocol-Version: 2025-11-25\r\n", "{}"), 400, "Mcp-Session-Id", NULL);
	cli *c = dial();
	says(c, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	CHECK_STR(hdr(&r, "content-type"), "text/plain; version=0.0.4; charset=utf-8");
	const char *b = r.body;
	CHECK(strstr(b, "# TYPE moonbox_http_requests_total counter\n") != NULL);
	CHECK(strstr(b, "moonbox_http_requests_total{method=\"GET\",status=\"200\"} 1\n") != NULL);
	CHECK(strstr(b, "moonbox_http_requests_total{method=\"POST\",status=\"200\"} 1\n") != NULL);
	CHECK(strstr(b, "moonbox_http_requests_total{method=\"POST\",status=\"400\"} 1\n") != NULL);
	CHECK(strstr(b, "\nmoonbox_http_sessions_active 1\n") != NULL);
	CHECK(strstr(b, "\nmoonbox_http_connections_active 1\n") != NULL);
	CHECK(strstr(b, "# TYPE moonbox_http_sessions_active gauge\n") != NULL);
	CHECK(strstr(b, "\nmoonbox_executions_total 42\n") != NULL); /* metrics_extra, newline added */
	/* every line is a comment or `name{labels} value` */
	int bad_lines = 0, samples = 0;
	for (const char *l = b; *l; l = strchr(l, '\n') + 1) {
		const char *e = strchr(l, '\n');
		if (!e) {
			bad_lines++;
			break;
		}
		if (*l == '#') {
			bad_lines += strncmp(l, "# HELP ", 7) != 0 && strncmp(l, "# TYPE ", 7) != 0;
			continue;
		}
		const char *p = l;
		while (p < e && (isalnum((unsigned char)*p) || *p == '_'))
			p++;
		if (p < e && *p == '{') {
			const char *close = memchr(p, '}', (size_t)(e - p));
			p = close ? close + 1 : e;
		}
		bad_lines += p == l || p >= e || *p != ' ' || !isdigit((unsigned char)p[1]);
		samples++;
	}
	CHECK(bad_lines == 0);
	CHECK(samples >= 15);
	/* the counters move */
	says(c, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
	CHECK(read_resp(c, &r) == 0 && strstr(r.body, "moonbox_http_requests_total{method=\"GET\",status=\"200\"} 2\n"));
	hang_up(c);
	resp_free(&r);
	srv_stop();
}

TEST(large_bodies_and_answers)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	size_t n = 300000;
	char *body = malloc(n + 64);
	int k = snprintf(body, n + 64, "{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"a\",\"params\":{\"s\":\"");
	memset(body + k, 'y', n);
	strcpy(body + k + n, "\"}}");
	resp r = { 0 };
	CHECK(once(post(sid, NULL, body), &r) == 0 && r.status == 200 && strstr(r.body, "\"echo\":77"));
	pthread_mutex_lock(&F.mu);
	CHECK(strncmp(F.last_body, body, 1000) == 0);
	pthread_mutex_unlock(&F.mu);
	free(body);
	cli *c = dial();
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"big\"}"));
	CHECK(read_resp(c, &r) == 0 && r.status == 200);
	CHECK(r.blen > (1 << 20) && strspn(strstr(r.body, "xxx"), "x") == (1 << 20));
	hang_up(c);
	resp_free(&r);
	srv_stop();
}

TEST(shutdown_with_work_in_flight)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65], sid2[65], q[512];
	CHECK(init_session(sid, NULL) == 200);
	CHECK(init_session(sid2, NULL) == 200);
	cli *n = dial(), *g = dial(), *half = dial();
	says(n, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"never\"}"));
	snprintf(q, sizeof q, "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
		 "Mcp-Session-Id: %s\r\n\r\n", sid2);
	says(g, q);
	resp r = { 0 };
	CHECK(read_head(g, &r, 0) == 0 && r.status == 200);
	says(half, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n{");
	WAIT_UNTIL(st_.connections_active == 3 && st_.exchanges_active == 1 && st_.streams_active == 1);
	CHECK(stats().connections_active == 3);
	srv_stop(); /* CHECKs that the loop closes with no handle left */
	pthread_mutex_lock(&F.mu);
	CHECK(F.ended == 2);
	pthread_mutex_unlock(&F.mu);
	CHECK(closed_by_server(n) && closed_by_server(g) && closed_by_server(half));
	hang_up(n);
	hang_up(g);
	hang_up(half);
}

TEST(clients_that_stop_reading)
{
	const char *const args[] = { "--http-read-timeout-ms", "100", NULL };
	CHECK(srv_start(args) == 0);
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	cli *c = calloc(1, sizeof *c);
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	int small = 4096;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)PORT) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(connect(c->fd, (struct sockaddr *)&a, sizeof a) == 0);
	says(c, post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"huge\"}"));
	usleep(100000);
	mb_http_stats_t st = stats();
	CHECK(st.connections_active == 1);
	for (int i = 0; i < 40 && stats().connections_active; i++)
		usleep(50000);
	st = stats();
	CHECK(st.connections_active == 0); /* 32 MiB queued, not moving: cut */
	CHECK(st.exchanges_active == 0);
	hang_up(c);
	srv_stop();
}

TEST(garbage_and_mutations)
{
	CHECK(srv_start(NULL) == 0);
	char sid[65];
	CHECK(init_session(sid, NULL) == 200);
	resp r = { 0 };
	/* an empty header value must not merge the next header's name into this one */
	CHECK(once("GET /metrics HTTP/1.1\r\nX-Empty:\r\nHost: localhost\r\nX-Empty2: \r\n\r\n", &r) == 0);
	CHECK(r.status == 200);
	/* obsolete line folding and bare LF */
	CHECK(once("GET /metrics HTTP/1.1\nHost: localhost\n\n", &r) == 0);
	CHECK(r.status == 200);
	/* smuggling: both Content-Length and Transfer-Encoding, or two lengths */
	check_error("POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "malformed HTTP", NULL);
	check_error("POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
		    400, "malformed HTTP", NULL);
	check_error("GET /metrics HTTP/1.1\r\nHost: local\x01host\r\n\r\n", 400, "malformed HTTP", NULL);
	check_error("GET /healthz HTTP/9.9\r\nHost: localhost\r\n\r\n", 400,
		    "Bad Request: only HTTP/1.0 and HTTP/1.1 are served", NULL);
	check_error("GET /healthz HTTP/2.0\r\nHost: localhost\r\n\r\n", 400, "only HTTP/1.0 and HTTP/1.1", NULL);
	check_error("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "Bad Request", NULL);
	/* mutated requests: every byte position flipped in turn; the server must stay sane */
	const char *base = post(sid, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}");
	char good[1024], bad[1024];
	snprintf(good, sizeof good, "%s", base);
	size_t gl = strlen(good);
	unsigned seed = 12345;
	int answered = 0;
	for (size_t i = 0; i < gl; i += 3) {
		memcpy(bad, good, gl);
		seed = seed * 1103515245 + 12345;
		bad[i] = (char)(seed >> 16);
		cli *c = dial();
		struct timeval tv = { 0, 300000 };
		setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		say(c, bad, gl);
		shutdown(c->fd, SHUT_WR);
		answered += read_resp(c, &r) == 0;
		hang_up(c);
	}
	CHECK(answered > 0);
	CHECK(once("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", &r) == 0 && r.status == 200);
	WAIT_UNTIL(st_.connections_active == 0);
	mb_http_stats_t st = stats();
	CHECK(st.connections_active == 0);
	CHECK(st.exchanges_active == 0);
	resp_free(&r);
	srv_stop();
}

/* ---- bench mode ---------------------------------------------------------------------------- */

static void on_signal(uv_signal_t *s, int sig)
{
	(void)sig;
	mb_http_close(H);
	uv_close((uv_handle_t *)s, NULL);
}

static int bench(const char *port)
{
	char spec[64];
	snprintf(spec, sizeof spec, "127.0.0.1:%s", port);
	const char *const args[] = { "--http-listen", spec, NULL };
	if (load_cfg(&cfg, args) != 0)
		return 1;
	uv_loop_init(&loop);
	char err[256];
	H = mb_http_start(&loop, &cfg, &CBS, err, sizeof err);
	if (!H) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	uv_signal_t sig;
	uv_signal_init(&loop, &sig);
	uv_signal_start(&sig, on_signal, SIGINT);
	fprintf(stderr, "echo host on http://%s/mcp (Ctrl-C stops)\n", spec);
	uv_run(&loop, UV_RUN_DEFAULT);
	return uv_loop_close(&loop) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc == 3 && strcmp(argv[1], "--bench") == 0)
		return bench(argv[2]);
	mb_log_set_level("critical");
	RUN(listen_addresses_and_policies);
	RUN(sessions_and_json_answers);
	RUN(sse_when_a_notification_comes_first);
	RUN(status_codes);
	RUN(keep_alive_and_pipelining);
	RUN(slow_clients_are_cut);
	RUN(clients_that_vanish);
	RUN(get_streams_delete_and_broadcast);
	RUN(replay_buffer_bookkeeping);
	RUN(replay_total_bound);
	RUN(resume_a_post_stream);
	RUN(resume_refusals);
	RUN(resume_the_get_stream);
	RUN(replay_bounds);
	RUN(idle_sessions_expire);
	RUN(tokens_and_tenants);
	RUN(start_refusals);
	RUN(cors);
	RUN(limits_on_connections_and_sessions);
	RUN(healthz_and_metrics);
	RUN(large_bodies_and_answers);
	RUN(shutdown_with_work_in_flight);
	RUN(clients_that_stop_reading);
	RUN(garbage_and_mutations);
	return UNIT_END();
}
