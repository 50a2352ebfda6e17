/* test_host_http_client.c - mb.http_request against a real HTTP/1.1 server that runs in this process
 * (a thread per connection on 127.0.0.1, blocking sockets, keep-alive): JSON with
 * Content-Length, status and lower-cased/joined headers, 1xx and redirects not followed,
 * chunked SSE written slowly (several on_data calls in order), bodiless 202/404, the request
 * as the server saw it (method, body with a NUL, custom and empty headers, no Expect), every
 * argument error, error texts for refused connections, timeouts, truncated bodies,
 * max_response_bytes and oversized headers (and credentials kept out of them), cancel from
 * inside on_data, requests started and cancelled from callbacks, callback errors logged, 50
 * concurrent requests, garbage collection of a running request, close_all and lua_close with
 * transfers running, and a loop that closes cleanly at the end (ASan checks the memory). */
#include <arpa/inet.h>
#include <lauxlib.h>
#include <lualib.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "host_http_client.h"
#include "log.h"
#include "host_test.h"
#include "unit.h"

/* ---- the test server -------------------------------------------------------------------------- */

static int srv_fd = -1;
static int srv_port;
static pthread_t srv_thread;
static atomic_int srv_stop;
static atomic_int srv_conns;       /* connection threads alive */
static atomic_int srv_accepted;    /* connections accepted so far */

static void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int send_str(int fd, const char *s)
{
	return send_all(fd, s, strlen(s));
}

/* recv that gives up (returns 0) when the server stops */
static ssize_t recv_some(int fd, char *p, size_t n)
{
	for (;;) {
		if (atomic_load(&srv_stop))
			return 0;
		struct pollfd pf = { fd, POLLIN, 0 };
		int r = poll(&pf, 1, 50);
		if (r < 0)
			return -1;
		if (r > 0)
			return recv(fd, p, n, 0);
	}
}

/* Waits until the client closes the connection (or the server stops). */
static void hold(int fd)
{
	char b[256];
	while (recv_some(fd, b, sizeof b) > 0)
		;
}

static int send_chunk(int fd, const char *data)
{
	char head[32];
	snprintf(head, sizeof head, "%zx\r\n", strlen(data));
	return send_str(fd, head) || send_str(fd, data) || send_str(fd, "\r\n") ? -1 : 0;
}

/* Answers one request; returns 0 to keep the connection, -1 to close it. */
static int handle(int fd, const char *req, size_t head_len, size_t body_len)
{
	char method[16] = "", path[256] = "";
	if (sscanf(req, "%15s %255s", method, path) != 2)
		return -1;
	char resp[1024];
	if (strcmp(path, "/json") == 0) {
		const char *body = "{\"ok\":true}";
		snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			 "X-Multi: a\r\nx-multi: b\r\nX-Spaced:   padded value  \r\n"
			 "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
		return send_str(fd, resp);
	}
	if (strcmp(path, "/sse") == 0) {
		if (send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			     "Transfer-Encoding: chunked\r\n\r\n"))
			return -1;
		for (int i = 1; i <= 3; i++) {
			msleep(60);
			char ev[64];
			snprintf(ev, sizeof ev, "data: %d\n\n", i);
			if (send_chunk(fd, ev))
				return -1;
		}
		return send_str(fd, "0\r\n\r\n");
	}
	if (strcmp(path, "/sse-forever") == 0) {
		if (send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			     "Transfer-Encoding: chunked\r\n\r\n"))
			return -1;
		for (int i = 1; i <= 100 && !atomic_load(&srv_stop); i++) {
			char ev[64];
			snprintf(ev, sizeof ev, "data: %d\n\n", i);
			if (send_chunk(fd, ev))
				return -1;
			msleep(30);
		}
		return -1;
	}
	if (strcmp(path, "/status/404") == 0)
		return send_str(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
	if (strcmp(path, "/status/202") == 0)
		return send_str(fd, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n");
	if (strcmp(path, "/redirect") == 0)
		return send_str(fd, "HTTP/1.1 302 Found\r\nLocation: /json\r\nContent-Length: 0\r\n\r\n");
	if (strcmp(path, "/continue") == 0)
		return send_str(fd, "HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\n"
				"HTTP/1.1 200 OK\r\nX-Final: yes\r\nContent-Length: 2\r\n\r\nok");
	if (strcmp(path, "/hold") == 0 || strncmp(path, "/hold?", 6) == 0) {
		hold(fd);
		return -1;
	}
	if (strcmp(path, "/big") == 0) {
		if (send_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"))
			return -1;
		static const char x[1000] = { 0 };
		for (int i = 0; i < 100; i++)
			if (send_all(fd, x, sizeof x))
				return -1;
		return 0;
	}
	if (strcmp(path, "/truncate") == 0) {
		send_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789");
		return -1;
	}
	if (strcmp(path, "/truncate-chunked") == 0) {
		send_str(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
		send_chunk(fd, "partial");
		return -1;
	}
	if (strcmp(path, "/bigheaders") == 0) {
		if (send_str(fd, "HTTP/1.1 200 OK\r\n"))
			return -1;
		char line[1100];
		memset(line, 'v', sizeof line);
		memcpy(line, "X-Big: ", 7);
		memcpy(line + sizeof line - 2, "\r\n", 2);
		for (int i = 0; i < 300; i++)
			if (send_all(fd, line, sizeof line))
				return -1;
		send_str(fd, "Content-Length: 0\r\n\r\n");
		return -1;
	}
	if (strcmp(path, "/echo") == 0) {
		snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
			 head_len + body_len);
		if (send_str(fd, resp) || send_all(fd, req, head_len + body_len))
			return -1;
		return 0;
	}
	return send_str(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
}

static size_t content_length(const char *head, size_t len)
{
	for (const char *p = head; p && p < head + len; p = memchr(p, '\n', (size_t)(head + len - p))) {
		if (*p == '\n')
			p++;
		if (strncasecmp(p, "Content-Length:", 15) == 0)
			return (size_t)strtoul(p + 15, NULL, 10);
	}
	return 0;
}

static void *conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	static const size_t cap = 65536;
	char *buf = malloc(cap + 1);
	size_t have = 0;
	while (buf) {
		char *end;
		buf[have] = 0;
		while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
			if (have == cap)
				goto out;
			ssize_t n = recv_some(fd, buf + have, cap - have);
			if (n <= 0)
				goto out;
			have += (size_t)n;
			buf[have] = 0;
		}
		size_t head_len = (size_t)(end + 4 - buf);
		size_t body_len = content_length(buf, head_len);
		if (head_len + body_len > cap)
			goto out;
		while (have < head_len + body_len) {
			ssize_t n = recv_some(fd, buf + have, cap - have);
			if (n <= 0)
				goto out;
			have += (size_t)n;
		}
		if (handle(fd, buf, head_len, body_len) < 0)
			goto out;
		have -= head_len + body_len;
		memmove(buf, buf + head_len + body_len, have);
	}
out:
	free(buf);
	close(fd);
	atomic_fetch_sub(&srv_conns, 1);
	return NULL;
}

static void *srv_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&srv_stop)) {
		struct pollfd pf = { srv_fd, POLLIN, 0 };
		if (poll(&pf, 1, 50) <= 0)
			continue;
		int fd = accept(srv_fd, NULL, NULL);
		if (fd < 0)
			continue;
		atomic_fetch_add(&srv_conns, 1);
		atomic_fetch_add(&srv_accepted, 1);
		pthread_t t;
		if (pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd) != 0) {
			close(fd);
			atomic_fetch_sub(&srv_conns, 1);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

static int listen_any(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
		perror("test server");
		exit(1);
	}
	*port = ntohs(a.sin_port);
	return fd;
}

static void server_start(void)
{
	srv_fd = listen_any(&srv_port);
	if (pthread_create(&srv_thread, NULL, srv_main, NULL) != 0) {
		perror("pthread_create");
		exit(1);
	}
}

static void server_stop(void)
{
	atomic_store(&srv_stop, 1);
	pthread_join(srv_thread, NULL);
	close(srv_fd);
	for (int i = 0; i < 200 && atomic_load(&srv_conns) > 0; i++)
		msleep(10);
}

/* ---- helpers ---------------------------------------------------------------------------------- */

/* lua() with every "%d" replaced by the server port and "%%" by "%" */
static const char *luap(const char *code)
{
	static char buf[8192];
	size_t o = 0;
	for (const char *p = code; *p && o < sizeof buf - 16; p++) {
		if (p[0] == '%' && p[1] == 'd') {
			o += (size_t)snprintf(buf + o, sizeof buf - o, "%d", srv_port);
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			buf[o++] = '%';
			p++;
		} else {
			buf[o++] = *p;
		}
	}
	buf[o] = 0;
	return lua(buf);
}

/* Runs the loop until the Lua expression is true or max_ms passed; returns whether it held. */
static int wait_for(const char *expr, int max_ms)
{
	char code[512];
	snprintf(code, sizeof code, "return (%s) == true", expr);
	for (int waited = 0; waited < max_ms; waited += 10) {
		if (strcmp(lua(code), "true") == 0)
			return 1;
		run_for(10);
	}
	int ok = strcmp(lua(code), "true") == 0;
	if (!ok)
		fprintf(stderr, "  wait_for(%s) timed out\n", expr);
	return ok;
}

static lua_State *new_state(void)
{
	return host_test_state(mb_host_http_open);
}

static void count_polls(uv_handle_t *h, void *arg)
{
	if (h->type == UV_POLL && uv_is_active(h) && !uv_is_closing(h))
		(*(int *)arg)++;
}

static int active_polls(void)
{
	int n = 0;
	uv_walk(&loop, count_polls, &n);
	return n;
}

/* A Lua helper: req(url_path, extra_fields) records every callback into `ev` (a list) and
 * the body into `body`; `done` becomes true at on_done. */
static const char *recorder =
	"function rec(t)\n"
	"  local r = {ev = {}, chunks = {}, done = false}\n"
	"  t.on_headers = t.on_headers or function(status, h) r.status = status r.headers = h\n"
	"    r.ev[#r.ev + 1] = 'headers' end\n"
	"  t.on_data = t.on_data or function(c) r.chunks[#r.chunks + 1] = c r.ev[#r.ev + 1] = 'data' end\n"
	"  t.on_done = t.on_done or function(err, status) r.err = err r.done_status = status\n"
	"    r.ev[#r.ev + 1] = 'done' r.done = true end\n"
	"  t.method = t.method or 'GET'\n"
	"  local req, e = mb.http_request(t)\n"
	"  r.req = req r.start_err = e\n"
	"  return r\n"
	"end\n"
	"function body(r) return table.concat(r.chunks) end\n"
	"function evs(r) local o, last = {}, nil for _, e in ipairs(r.ev) do\n"
	"  if e ~= last or e ~= 'data' then o[#o + 1] = e end last = e end return table.concat(o, ',') end\n";

/* ---- tests ------------------------------------------------------------------------------------ */

TEST(json_status_and_headers)
{
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/json'} return tostring(r.req)"),
		  luap("return 'http_request GET http://127.0.0.1:%d/json (running)'"));
	CHECK(mb_host_http_live(L) == 1);
	CHECK(wait_for("r.done", 3000));
	CHECK_STR(lua("return table.concat(r.ev, ',')"), "headers,data,done");
	CHECK_STR(lua("return r.status .. ' ' .. tostring(r.done_status) .. ' ' .. tostring(r.err)"),
		  "200 200 nil");
	CHECK_STR(lua("return r.headers['content-type']"), "application/json");
	CHECK_STR(lua("return r.headers['x-multi']"), "a, b");
	CHECK_STR(lua("return '[' .. r.headers['x-spaced'] .. ']'"), "[padded value]");
	CHECK_STR(lua("return r.headers['content-length']"), "11");
	CHECK_STR(lua("return tostring(r.headers['Content-Type'])"), "nil");
	CHECK_STR(lua("return body(r)"), "{\"ok\":true}");
	CHECK(mb_host_http_live(L) == 0);
	CHECK_STR(lua("return tostring(r.req) .. ' ' .. tostring(r.req:cancel())"),
		  "http_request (finished) false");
	CHECK_STR(lua("return getmetatable(r.req)"), "mb.http_request");
	/* finished transfers leave no socket watched (idle keep-alive connections included) */
	CHECK(active_polls() == 0);
	CHECK(lua_gettop(L) == 0);
}

TEST(hostname_is_resolved)
{
	/* a name goes through libcurl's resolver (a thread or c-ares) driven by the same loop */
	CHECK_STR(luap("r = rec{url = 'http://localhost:%d/json', connect_timeout_ms = 5000} return 1"), "1");
	CHECK(wait_for("r.done", 5000));
	CHECK_STR(lua("return tostring(r.err) .. ' ' .. r.status .. ' ' .. body(r)"), "nil 200 {\"ok\":true}");
	CHECK(active_polls() == 0);
}

TEST(handles_do_not_hold_the_loop)
{
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/hold'} return 1"), "1");
	run_for(50);
	CHECK(mb_host_http_live(L) == 1);
	CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0); /* returns at once: nothing referenced */
	CHECK_STR(lua("return tostring(r.req:cancel()) .. tostring(r.req:cancel())"), "truefalse");
	CHECK(mb_host_http_live(L) == 0);
	run_for(30);
	CHECK_STR(lua("return #r.ev"), "0");
	CHECK(active_polls() == 0);
}

TEST(sse_streams_in_chunks)
{
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/sse', timeout_ms = 0,"
		       " headers = {Accept = 'text/event-stream'}} return 1"), "1");
	CHECK(wait_for("r.done", 3000));
	CHECK_STR(lua("return body(r)"), "data: 1\n\ndata: 2\n\ndata: 3\n\n");
	CHECK_STR(lua("return evs(r)"), "headers,data,done");
	/* the events were written 60 ms apart: each arrived in its own on_data */
	CHECK_STR(lua("return #r.chunks"), "3");
	CHECK_STR(lua("return r.chunks[2]"), "data: 2\n\n");
	CHECK_STR(lua("return r.headers['transfer-encoding'] .. ' ' .. r.headers['content-type']"),
		  "chunked text/event-stream");
	CHECK_STR(lua("return tostring(r.err) .. ' ' .. r.done_status"), "nil 200");
}

TEST(bodiless_statuses_and_no_redirects)
{
	CHECK_STR(luap("a = rec{url = 'http://127.0.0.1:%d/status/404'}"
		       " b = rec{url = 'http://127.0.0.1:%d/status/202', method = 'POST', body = '{}'}"
		       " c = rec{url = 'http://127.0.0.1:%d/redirect'}"
		       " d = rec{url = 'http://127.0.0.1:%d/continue'} return 1"), "1");
	CHECK(wait_for("a.done and b.done and c.done and d.done", 3000));
	CHECK_STR(lua("return table.concat(a.ev, ',') .. ' ' .. a.status .. ' ' .. a.done_status .."
		      " ' ' .. tostring(a.err)"), "headers,done 404 404 nil");
	CHECK_STR(lua("return table.concat(b.ev, ',') .. ' ' .. b.status .. ' ' .. tostring(b.err)"),
		  "headers,done 202 nil");
	CHECK_STR(lua("return c.status .. ' ' .. c.headers.location .. ' ' .. #c.chunks"), "302 /json 0");
	/* an interim 100 response is skipped: one on_headers with the final status and headers */
	CHECK_STR(lua("return table.concat(d.ev, ',') .. ' ' .. d.status .. ' ' .. d.headers['x-final']"
		      " .. ' ' .. tostring(d.headers['x-interim']) .. ' ' .. body(d)"),
		  "headers,data,done 200 yes nil ok");
}

TEST(request_as_the_server_sees_it)
{
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/echo', method = 'POST', body = 'a\\0b',"
		       " headers = {['Content-Type'] = 'application/json', ['X-Test'] = 'yes',"
		       " ['X-Empty'] = '', ['User-Agent'] = 'agent/1'}} return 1"), "1");
	CHECK(wait_for("r.done", 3000));
	CHECK_STR(lua("local b = body(r) return b:match('^[^\\r]*')"), "POST /echo HTTP/1.1");
	CHECK_STR(lua("local b = body(r) return tostring(b:find('\\r\\nX%-Test: yes\\r\\n') ~= nil) .."
		      " tostring(b:find('\\r\\nX%-Empty:\\r\\n') ~= nil) .."
		      " tostring(b:find('\\r\\nContent%-Type: application/json\\r\\n') ~= nil) .."
		      " tostring(b:find('\\r\\nContent%-Length: 3\\r\\n') ~= nil) .."
		      " tostring(b:find('\\r\\nUser%-Agent: agent/1\\r\\n') ~= nil) .."
		      " tostring(b:find('moonbox') ~= nil)"), "truetruetruetruetruefalse");
	CHECK_STR(lua("local b = body(r) return #b:match('\\r\\n\\r\\n(.*)$') .. ' ' .."
		      " tostring(b:sub(-3) == 'a\\0b')"), "3 true");
	/* a large body goes at once (no Expect: 100-continue wait) and arrives whole */
	CHECK_STR(luap("big = string.rep('0123456789', 5000)"
		       " r = rec{url = 'http://127.0.0.1:%d/echo', method = 'POST', body = big} return 1"),
		  "1");
	CHECK(wait_for("r.done", 3000));
	CHECK_STR(lua("local b = body(r) return tostring(b:find('Expect') ~= nil) .. ' ' .."
		      " tostring(b:sub(-50000) == big) .. ' ' .. tostring(b:find('User%-Agent: moonbox') ~= nil)"),
		  "false true true");
	/* DELETE and GET carry no body; a POST without body sends Content-Length: 0 */
	CHECK_STR(luap("d = rec{url = 'http://127.0.0.1:%d/echo', method = 'DELETE',"
		       " headers = {['Mcp-Session-Id'] = 's1'}}"
		       " p = rec{url = 'http://127.0.0.1:%d/echo', method = 'POST'} return 1"), "1");
	CHECK(wait_for("d.done and p.done", 3000));
	CHECK_STR(lua("return body(d):match('^[^\\r]*') .. ' ' .."
		      " tostring(body(d):find('\\r\\nMcp%-Session%-Id: s1\\r\\n') ~= nil)"),
		  "DELETE /echo HTTP/1.1 true");
	CHECK_STR(lua("return tostring(body(p):find('\\r\\nContent%-Length: 0\\r\\n') ~= nil)"), "true");
}

TEST(bad_arguments_raise)
{
	static const struct { const char *code, *err; } cases[] = {
		{ "mb.http_request('x')", "bad argument #1 to 'http_request' (table expected, got string)" },
		{ "mb.http_request{url = 'http://h/'}",
		  "http_request: method must be \"GET\", \"POST\" or \"DELETE\"" },
		{ "mb.http_request{method = 'PUT', url = 'http://h/'}",
		  "http_request: method must be \"GET\", \"POST\" or \"DELETE\" (got \"PUT\")" },
		{ "mb.http_request{method = 'get', url = 'http://h/'}",
		  "http_request: method must be \"GET\", \"POST\" or \"DELETE\" (got \"get\")" },
		{ "mb.http_request{method = 'GET'}", "http_request: url must be a string (got nil)" },
		{ "mb.http_request{method = 'GET', url = 'ftp://h/x'}",
		  "http_request: url must be http://host... or https://host... (got \"ftp://h/x\")" },
		{ "mb.http_request{method = 'GET', url = 'file:///etc/passwd'}",
		  "http_request: url must be http://host... or https://host... (got \"file:///etc/passwd\")" },
		{ "mb.http_request{method = 'GET', url = 'http:///x'}",
		  "http_request: url must be http://host... or https://host... (got \"http:///x\")" },
		{ "mb.http_request{method = 'GET', url = 'http://h/a b'}",
		  "http_request: url contains a space or control character at byte 11" },
		{ "mb.http_request{method = 'GET', url = 'http://h/\\r\\nX: y'}",
		  "http_request: url contains a space or control character at byte 10" },
		{ "mb.http_request{method = 'GET', url = 'http://h:99999/'}",
		  "http_request: url is not valid (Port number was not a decimal number between 0 and 65535)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/' .. string.rep('a', 8200)}",
		  "http_request: url is 8209 bytes, above the limit of 8192" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', timeout = 5}",
		  "http_request: unknown field \"timeout\"" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', 5}",
		  "http_request: unexpected number key in the options (fields are named)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = 'x'}",
		  "http_request: headers must be a table of strings (got string)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {X = 1}}",
		  "http_request: headers must be a table of strings (got a string key with a number value)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {'v'}}",
		  "http_request: headers must be a table of strings (got a number key with a string value)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {['X-A'] = 'a\\r\\nX-B: b'}}",
		  "http_request: header \"X-A\" has a CR, LF or NUL in its value" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {['X-A'] = 'a\\nb'}}",
		  "http_request: header \"X-A\" has a CR, LF or NUL in its value" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {['X-A'] = 'a\\0b'}}",
		  "http_request: header \"X-A\" has a CR, LF or NUL in its value" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {['X-A\\r\\nB'] = 'v'}}",
		  "http_request: header name \"X-A\r\nB\" is not a valid HTTP token" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {['X A'] = 'v'}}",
		  "http_request: header name \"X A\" is not a valid HTTP token" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {['X:A'] = 'v'}}",
		  "http_request: header name \"X:A\" is not a valid HTTP token" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', headers = {[''] = 'v'}}",
		  "http_request: header name \"\" is not a valid HTTP token" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', body = 'x'}",
		  "http_request: body is only sent with POST (method is GET)" },
		{ "mb.http_request{method = 'DELETE', url = 'http://h/', body = 'x'}",
		  "http_request: body is only sent with POST (method is DELETE)" },
		{ "mb.http_request{method = 'POST', url = 'http://h/', body = {}}",
		  "http_request: body must be a string (got table)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', timeout_ms = -1}",
		  "http_request: timeout_ms must be an integer between 0 and 2147483647" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', timeout_ms = 1.5}",
		  "http_request: timeout_ms must be an integer between 0 and 2147483647" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', timeout_ms = '10'}",
		  "http_request: timeout_ms must be an integer between 0 and 2147483647" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', connect_timeout_ms = 2^31}",
		  "http_request: connect_timeout_ms must be an integer between 0 and 2147483647" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', max_response_bytes = -5}",
		  "http_request: max_response_bytes must be an integer >= 0" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', on_data = 'print'}",
		  "http_request: on_data must be a function (got string)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', on_done = true}",
		  "http_request: on_done must be a function (got boolean)" },
		{ "mb.http_request{method = 'GET', url = 'http://h/', on_headers = {}}",
		  "http_request: on_headers must be a function (got table)" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char code[9000];
		snprintf(code, sizeof code, "local ok, e = pcall(function() %s end)"
			 " return tostring(ok) .. '|' .. tostring(e)", cases[i].code);
		const char *got = lua(code);
		const char *bar = strchr(got, '|');
		int ok = bar && strncmp(got, "false|", 6) == 0 && strstr(bar, cases[i].err) != NULL;
		CHECK(ok);
		if (!ok)
			fprintf(stderr, "    case %zu: got %s\n    want %s\n", i, got, cases[i].err);
	}
	CHECK(mb_host_http_live(L) == 0);
	/* the methods refuse other objects */
	CHECK(strstr(lua("local ok, e = pcall(mb.http_request{method = 'GET', url = 'http://127.0.0.1:1/'}"
			 ".cancel, {}) return e"), "mb.http_request expected, got table") != NULL);
	run_for(50);
	CHECK(mb_host_http_live(L) == 0);
}

TEST(error_texts)
{
	/* a port nobody listens on */
	int closed_port;
	int fd = listen_any(&closed_port);
	close(fd);
	char code[1024], want[512];
	snprintf(code, sizeof code, "refused = rec{url = 'http://127.0.0.1:%d/x'} return 1", closed_port);
	CHECK_STR(lua(code), "1");
	CHECK_STR(luap("slow = rec{url = 'http://user:secret@127.0.0.1:%d/hold?token=abc#frag',"
		       " timeout_ms = 150}"
		       " trunc = rec{url = 'http://127.0.0.1:%d/truncate'}"
		       " trunc2 = rec{url = 'http://127.0.0.1:%d/truncate-chunked'}"
		       " big = rec{url = 'http://127.0.0.1:%d/big', max_response_bytes = 1000}"
		       " bigok = rec{url = 'http://127.0.0.1:%d/big', max_response_bytes = 100000}"
		       " nocap = rec{url = 'http://127.0.0.1:%d/big', max_response_bytes = 0}"
		       " hdrs = rec{url = 'http://127.0.0.1:%d/bigheaders'} return 1"), "1");
	CHECK(wait_for("refused.done and slow.done and trunc.done and trunc2.done and big.done and"
		       " bigok.done and nocap.done and hdrs.done", 5000));
	snprintf(want, sizeof want, "GET http://127.0.0.1:%d/x: Failed to connect to 127.0.0.1 port %d",
		 closed_port, closed_port);
	CHECK(strncmp(lua("return refused.err"), want, strlen(want)) == 0);
	CHECK(strstr(out, "Connection refused") != NULL || strstr(out, "Couldn't connect") != NULL);
	if (getenv("SHOW_ERRORS")) {
		fprintf(stderr, "    refused: %s\n", out);
		fprintf(stderr, "    slow: %s\n", lua("return slow.err"));
		fprintf(stderr, "    trunc2: %s\n", lua("return trunc2.err"));
		lua("return refused.err");
	}
	if (strncmp(out, want, strlen(want)) != 0)
		fprintf(stderr, "    refused: %s\n", out);
	CHECK_STR(lua("return table.concat(refused.ev, ',') .. ' ' .. tostring(refused.done_status)"),
		  "done nil");
	/* credentials, query and fragment never appear in messages */
	snprintf(want, sizeof want, "GET http://127.0.0.1:%d/hold: Operation timed out after ", srv_port);
	CHECK(strncmp(lua("return slow.err"), want, strlen(want)) == 0);
	CHECK(strstr(out, "secret") == NULL && strstr(out, "token") == NULL && strstr(out, "user") == NULL);
	CHECK_STR(lua("return tostring(slow.done_status) .. ' ' .. #slow.ev"), "nil 1");
	snprintf(want, sizeof want, "GET http://127.0.0.1:%d/truncate: transfer closed with 990 bytes "
		 "remaining to read", srv_port);
	CHECK_STR(lua("return trunc.err"), want);
	CHECK_STR(lua("return trunc.done_status .. ' ' .. body(trunc) .. ' ' .. evs(trunc)"),
		  "200 0123456789 headers,data,done");
	snprintf(want, sizeof want, "GET http://127.0.0.1:%d/truncate-chunked: transfer closed with "
		 "outstanding read data remaining", srv_port);
	CHECK_STR(lua("return trunc2.err"), want);
	CHECK_STR(lua("return body(trunc2)"), "partial");
	snprintf(want, sizeof want, "GET http://127.0.0.1:%d/big: response above 1000 bytes "
		 "(max_response_bytes=1000)", srv_port);
	CHECK_STR(lua("return big.err"), want);
	CHECK_STR(lua("return big.done_status .. ' ' .. tostring(#body(big) <= 1000)"), "200 true");
	/* exactly at the cap is fine, 0 is no cap */
	CHECK_STR(lua("return tostring(bigok.err) .. ' ' .. #body(bigok)"), "nil 100000");
	CHECK_STR(lua("return tostring(nocap.err) .. ' ' .. #body(nocap)"), "nil 100000");
	snprintf(want, sizeof want, "GET http://127.0.0.1:%d/bigheaders: response headers above 262144 "
		 "bytes", srv_port);
	CHECK_STR(lua("return hdrs.err"), want);
	CHECK_STR(lua("return #hdrs.ev"), "1");
	CHECK(mb_host_http_live(L) == 0);
	CHECK(active_polls() == 0);
}

TEST(default_cap_is_16_mib)
{
	/* nil max_response_bytes means 16777216, not "no body at all" */
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/big'} return 1"), "1");
	CHECK(wait_for("r.done", 3000));
	CHECK_STR(lua("return tostring(r.err) .. ' ' .. #body(r)"), "nil 100000");
}

TEST(cancel_inside_on_data)
{
	CHECK_STR(luap("n, finished = 0, false\n"
		       "r = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/sse-forever',\n"
		       "  on_data = function(c) n = n + 1 first = c cancelled = r:cancel() again = r:cancel() end,\n"
		       "  on_done = function() finished = true end} return 1"), "1");
	CHECK(wait_for("n > 0", 3000));
	run_for(200); /* the server keeps sending */
	CHECK_STR(lua("return n .. ' ' .. tostring(finished) .. ' ' .. tostring(cancelled) .. ' ' .."
		      " tostring(again) .. ' ' .. first:sub(1, 9)"), "1 false true false data: 1\n\n");
	CHECK(mb_host_http_live(L) == 0);
	/* cancel from on_headers: no data, no done */
	CHECK_STR(luap("hn, dn, fin = 0, 0, false\n"
		       "r = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/json',\n"
		       "  on_headers = function() hn = hn + 1 r:cancel() end,\n"
		       "  on_data = function() dn = dn + 1 end, on_done = function() fin = true end} return 1"),
		  "1");
	CHECK(wait_for("hn > 0", 3000));
	run_for(50);
	CHECK_STR(lua("return hn .. dn .. tostring(fin)"), "10false");
	CHECK(mb_host_http_live(L) == 0);
}

TEST(callbacks_start_and_cancel_requests)
{
	/* on_done starts the next request (a chain of 3); on_headers of one cancels another */
	CHECK_STR(luap("chain = {}\n"
		       "function step(i)\n"
		       "  chain_req = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/json',\n"
		       "    on_done = function(err, st)\n"
		       "      chain[#chain + 1] = tostring(err) .. st\n"
		       "      if i < 3 then step(i + 1) end\n"
		       "    end}\n"
		       "end\n"
		       "step(1)\n"
		       "victim_calls = 0\n"
		       "victim = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/hold',\n"
		       "  on_done = function() victim_calls = victim_calls + 1 end}\n"
		       "killer = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/json',\n"
		       "  on_headers = function() killed = victim:cancel() end}\n"
		       "return 1"), "1");
	CHECK(wait_for("#chain == 3 and killed ~= nil", 3000));
	CHECK_STR(lua("return table.concat(chain, ',')"), "nil200,nil200,nil200");
	run_for(50);
	CHECK_STR(lua("return tostring(killed) .. ' ' .. victim_calls"), "true 0");
	CHECK(mb_host_http_live(L) == 0);
	/* a callback can close everything, itself included */
	CHECK_STR(luap("after = 0\n"
		       "x1 = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/hold',"
		       " on_done = function() after = after + 1 end}\n"
		       "x2 = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/sse-forever',\n"
		       "  on_data = function() close_all() after_close = true end,"
		       " on_done = function() after = after + 1 end}\n"
		       "return 1"), "1");
}

static int l_close_all(lua_State *s)
{
	mb_host_http_close_all(s);
	return 0;
}

TEST(close_all_from_a_callback)
{
	/* x1/x2 were started by the previous test with close_all() as a Lua function */
	CHECK(wait_for("after_close", 3000));
	CHECK(mb_host_http_live(L) == 0);
	run_for(100);
	CHECK_STR(lua("return after"), "0");
	/* and new requests work afterwards */
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/json'} return 1"), "1");
	CHECK(wait_for("r.done", 3000));
	CHECK_STR(lua("return tostring(r.err) .. r.status"), "nil200");
}

TEST(callback_errors_are_logged)
{
	log_capture();
	luap("r = rec{url = 'http://127.0.0.1:%d/json', on_headers = function() error('hboom') end,"
	     " on_data = function() error({}) end}"
	     " r2 = rec{url = 'http://127.0.0.1:%d/status/404', on_done = function() error('dboom') end}"
	     " return 1");
	int ok = wait_for("r.done", 3000);
	run_for(100);
	const char *log = log_text();
	CHECK(ok);
	char want[256];
	snprintf(want, sizeof want, "moonbox: error: http_request on_headers callback (GET "
		 "http://127.0.0.1:%d/json): [string \"r = rec{url = ", srv_port);
	CHECK(strstr(log, want) != NULL);
	CHECK(strstr(log, "hboom\nstack traceback:") != NULL);
	snprintf(want, sizeof want, "moonbox: error: http_request on_data callback (GET "
		 "http://127.0.0.1:%d/json): (error object is a table value)", srv_port);
	CHECK(strstr(log, want) != NULL);
	snprintf(want, sizeof want, "moonbox: error: http_request on_done callback (GET "
		 "http://127.0.0.1:%d/status/404): ", srv_port);
	CHECK(strstr(log, want) != NULL && strstr(log, "dboom") != NULL);
	/* the failing callbacks did not stop the others */
	CHECK_STR(lua("return tostring(r.err) .. ' ' .. tostring(r.done_status)"), "nil 200");
	CHECK(mb_host_http_live(L) == 0);
	CHECK(lua_gettop(L) == 0);
}

TEST(fifty_concurrent_requests)
{
	CHECK_STR(luap("all = {}\n"
		       "for i = 1, 50 do\n"
		       "  local path = i %% 2 == 0 and '/sse' or '/echo'\n"
		       "  local t = {url = 'http://127.0.0.1:%d' .. path, method = 'GET'}\n"
		       "  if i %% 2 == 1 then t.method = 'POST' t.body = 'body' .. i end\n"
		       "  all[i] = rec(t)\n"
		       "end\n"
		       "function all_done() for i = 1, 50 do if not all[i].done then return false end end"
		       " return true end return 1"), "1");
	CHECK(mb_host_http_live(L) == 50);
	CHECK(wait_for("all_done()", 10000));
	CHECK_STR(lua("local bad = {}\n"
		      "for i = 1, 50 do local r = all[i]\n"
		      "  local want = i % 2 == 0 and 'data: 1\\n\\ndata: 2\\n\\ndata: 3\\n\\n' or nil\n"
		      "  local b = body(r)\n"
		      "  if r.err or r.status ~= 200 or (want and b ~= want)"
		      " or (not want and b:sub(-#('body' .. i)) ~= 'body' .. i) then bad[#bad + 1] = i end\n"
		      "end return #bad"), "0");
	CHECK(mb_host_http_live(L) == 0);
	CHECK(active_polls() == 0);
}

TEST(gc_of_a_running_request)
{
	mb_log_set_level("debug");
	log_capture();
	luap("called = false\n"
	     "do mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/hold',"
	     " on_done = function() called = true end} end\n"
	     "collectgarbage() collectgarbage() return 1");
	int live = mb_host_http_live(L);
	run_for(50);
	const char *log = log_text();
	mb_log_set_level("info");
	CHECK(live == 0);
	char want[256];
	snprintf(want, sizeof want, "moonbox: debug: http_request GET http://127.0.0.1:%d/hold: "
		 "request object garbage-collected while running; cancelled", srv_port);
	CHECK(strstr(log, want) != NULL);
	CHECK_STR(lua("return tostring(called)"), "false");
	/* a request referred to by its own callback stays alive; the callback releases it when done */
	CHECK_STR(luap("do local req req = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/json',"
		       " on_done = function(err, st) kept = tostring(req) .. st end} end"
		       " collectgarbage() collectgarbage() return 1"), "1");
	CHECK(mb_host_http_live(L) == 1);
	CHECK(wait_for("kept ~= nil", 3000));
	CHECK_STR(lua("return kept"), "http_request (finished)200");
	/* after it finished, its callbacks are collectable */
	CHECK_STR(luap("weak = setmetatable({}, {__mode = 'k'})\n"
		       "do local f = function() end weak[f] = true"
		       " keep_req = mb.http_request{method = 'GET', url = 'http://127.0.0.1:%d/json', on_done = f} end\n"
		       "return 1"), "1");
	CHECK(wait_for("keep_req and tostring(keep_req):find('finished') ~= nil", 3000));
	CHECK_STR(lua("collectgarbage() collectgarbage() return tostring(next(weak))"), "nil");
}

TEST(close_all_with_transfers_running)
{
	lua_State *s = new_state();
	lua_State *keep = L;
	L = s;
	lua(recorder);
	CHECK_STR(luap("calls = 0 local f = function() calls = calls + 1 end\n"
		       "reqs = {}\n"
		       "for i = 1, 3 do reqs[#reqs + 1] = mb.http_request{method = 'GET',"
		       " url = 'http://127.0.0.1:%d/hold', on_headers = f, on_data = f, on_done = f} end\n"
		       "for i = 1, 2 do reqs[#reqs + 1] = mb.http_request{method = 'GET',"
		       " url = 'http://127.0.0.1:%d/sse-forever', on_data = function() calls = calls + 1 end,"
		       " on_done = f} end\n"
		       "return 1"), "1");
	CHECK(wait_for("calls >= 2", 3000));
	CHECK(mb_host_http_live(s) == 5);
	mb_host_http_close_all(s);
	CHECK(mb_host_http_live(s) == 0);
	mb_host_http_close_all(s); /* twice is fine */
	CHECK_STR(lua("before = calls local n = 0 for _, r in ipairs(reqs) do"
		      " if r:cancel() then n = n + 1 end end return n"), "0");
	run_for(100);
	CHECK_STR(lua("return calls == before"), "true");
	/* still usable: a fresh context */
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/json'} return 1"), "1");
	CHECK(wait_for("r.done", 3000));
	CHECK_STR(lua("return tostring(r.err) .. r.status"), "nil200");
	mb_host_http_close_all(s);
	lua_close(s);
	uv_run(&loop, UV_RUN_NOWAIT);
	/* lua_close with transfers running and no close_all: the finalizers clean up */
	s = new_state();
	L = s;
	lua(recorder);
	CHECK_STR(luap("a = rec{url = 'http://127.0.0.1:%d/hold'}"
		       " b = rec{url = 'http://127.0.0.1:%d/sse-forever'}"
		       " c = rec{url = 'http://127.0.0.1:%d/json'} return 1"), "1");
	CHECK(wait_for("#b.chunks > 0 and c.done", 3000));
	CHECK(mb_host_http_live(s) == 2);
	lua_close(s);
	uv_run(&loop, UV_RUN_NOWAIT);
	/* close_all on a state that never had the bindings does nothing */
	s = luaL_newstate();
	mb_host_http_close_all(s);
	CHECK(mb_host_http_live(s) == 0);
	lua_close(s);
	L = keep;
}

/* Shutdown as the server does it: close_all with a transfer running, let the loop free the
 * handles, close the state; then the loop must close with nothing left. */
TEST(shutdown_loop_closes_cleanly)
{
	CHECK_STR(luap("r = rec{url = 'http://127.0.0.1:%d/hold'} s = rec{url = 'http://127.0.0.1:%d/sse-forever'}"
		       " return 1"), "1");
	CHECK(wait_for("#s.chunks > 0", 3000));
	mb_host_http_close_all(L);
	CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
	lua_close(L);
	L = NULL;
	CHECK(uv_loop_close(&loop) == 0);
}

int main(void)
{
	/* the test talks to 127.0.0.1 directly */
	unsetenv("http_proxy");
	unsetenv("HTTP_PROXY");
	unsetenv("https_proxy");
	unsetenv("HTTPS_PROXY");
	unsetenv("all_proxy");
	unsetenv("ALL_PROXY");
	server_start();
	uv_loop_init(&loop);
	L = new_state();
	lua_pushcfunction(L, l_close_all);
	lua_setglobal(L, "close_all");
	if (strcmp(lua(recorder), "nil") != 0) {
		fprintf(stderr, "recorder: %s\n", out);
		return 1;
	}
	RUN(json_status_and_headers);
	RUN(hostname_is_resolved);
	RUN(handles_do_not_hold_the_loop);
	RUN(sse_streams_in_chunks);
	RUN(bodiless_statuses_and_no_redirects);
	RUN(request_as_the_server_sees_it);
	RUN(bad_arguments_raise);
	RUN(error_texts);
	RUN(default_cap_is_16_mib);
	RUN(cancel_inside_on_data);
	RUN(callbacks_start_and_cancel_requests);
	RUN(close_all_from_a_callback);
	RUN(callback_errors_are_logged);
	RUN(fifty_concurrent_requests);
	RUN(gc_of_a_running_request);
	RUN(close_all_with_transfers_running);
	RUN(shutdown_loop_closes_cleanly);
	server_stop();
	return UNIT_END();
}
