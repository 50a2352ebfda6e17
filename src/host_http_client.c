/* host_http_client.c - mb.http_request: asynchronous HTTP for the host Lua state, libcurl multi_socket
 * driven by the server's libuv loop.
 *
 * Four kinds of object cooperate. The holder (a full userdata in the registry under the address
 * of holder_key, and the upvalue of http_request) knows the loop and points at the current
 * context, created at the first request. The context (`http_ctx`, malloc'd) owns the curl multi
 * handle, the uv_timer curl asks for (CURLMOPT_TIMERFUNCTION), the list of polled sockets
 * (CURLMOPT_SOCKETFUNCTION: one malloc'd uv_poll_t `sock` per socket, attached to curl's socket
 * with curl_multi_assign), the list of live transfers and the queue of transfers with events to
 * deliver. A transfer (`xfer`, malloc'd) owns its easy handle, header list, buffers and the
 * registry references of its three callbacks; the Lua object a script holds (`requd`) only points
 * at it, and both are detached when the transfer ends.
 *
 * libcurl forbids calling multi functions from inside its callbacks, and a Lua callback may
 * cancel or start requests, so Lua never runs inside libcurl: the header and write callbacks
 * only record into the transfer's C buffers (headers as "name\0value\0" pairs, body bytes
 * appended) and queue it; completions are read with curl_multi_info_read. After every
 * curl_multi_socket_action returns (from a poll or the timer callback) the queue is dispatched:
 * for each transfer its pending headers, then data, then completion are handed to Lua, each
 * through a protected trampoline (so a memory error while building the arguments is logged like
 * a callback error). A transfer is closed (easy handle removed and cleaned up, references
 * released, unlinked) by cancel, by garbage collection of its object, by close_all, or just
 * before its on_done runs; while one of its callbacks runs it is marked busy and its memory is
 * only freed once the callback returns, so a callback can close anything, itself included.
 *
 * libcurl is not linked: the first request opens it (curl_load.h), so a server without HTTP
 * upstreams never loads it.
 *
 * Closing the context closes every transfer (curl_multi_remove_handle may call the socket
 * callback, which uv_closes polls while their sockets are still open), closes the remaining
 * polls, then marks it closing (curl callbacks become no-ops) and runs curl_multi_cleanup, and
 * last uv_closes the timer, whose close callback frees the context. Poll and timer close
 * callbacks only free memory, so they are safe after lua_close.
 */
#include "host_http_client.h"

#include <lauxlib.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "curl_load.h"
#include "host_uv.h"
#include "log.h"

#define REQ_MT "mb.http_request"
#define HOLDER_MT "mb.http_holder"
#define MAX_URL_BYTES 8192
#define MAX_HEADER_BYTES (256 * 1024)       /* response headers, all blocks together */
#define DEFAULT_MAX_RESPONSE 16777216
#define MAX_TIMEOUT_MS 2147483647
#define KEEP_BUFFER 65536                   /* data buffer kept between reads; larger is freed */

static const char holder_key = 0; /* its address is the registry key of the holder */


typedef struct http_ctx http_ctx;
typedef struct xfer xfer;
typedef struct sock sock;
typedef struct requd requd;

struct http_ctx {
	uv_timer_t timer;      /* first member: the close callback frees the block */
	uv_loop_t *loop;
	lua_State *L;          /* the main thread of the state */
	CURLM *multi;
	xfer *live;            /* transfers not yet closed */
	int nlive;
	xfer *qhead, *qtail;   /* transfers with events to deliver */
	sock *socks;           /* polled sockets */
	int closing;           /* curl callbacks do nothing once set */
	int dispatching;
};

struct sock {
	uv_poll_t poll;        /* first member: the close callback frees the block */
	http_ctx *ctx;
	curl_socket_t fd;
	sock *prev, *next;
};

enum { EV_HEADERS = 1, EV_DATA, EV_DONE };

struct xfer {
	http_ctx *ctx;
	CURL *easy;
	struct curl_slist *hdrs;
	requd *ud;             /* the Lua object, NULL once detached */
	int ref_headers, ref_data, ref_done;
	int in_multi;
	int busy;              /* a callback of this transfer runs: do not free */
	int closed;
	/* response, filled by the curl callbacks */
	int status;            /* from the last status line */
	int hdr_done;          /* the final headers are complete */
	int ev_headers;        /* ... and not yet delivered */
	int ev_done;           /* finished, on_done not yet delivered */
	char *hbuf;            /* "name\0value\0" pairs of the current header block */
	size_t hlen, hcap, htotal;
	char *dbuf;            /* body bytes not yet delivered */
	size_t dlen, dcap;
	uint64_t received, max;
	CURLcode result;
	long final_status;
	char localerr[MB_ERR_MAX];    /* our reason for aborting, preferred over curl's */
	char errbuf[CURL_ERROR_SIZE];
	xfer *prev, *next;     /* live list */
	xfer *qprev, *qnext;   /* dispatch queue */
	int queued;
	char what[];           /* "METHOD url" for messages (url without credentials/query) */
};

struct requd {
	xfer *x;               /* NULL once the transfer ended */
};

typedef struct holder {
	http_ctx *c;           /* NULL until the first request and after close_all */
	uv_loop_t *loop;
} holder;

/* ---- lists ------------------------------------------------------------------------------------ */

static void queue_push(http_ctx *c, xfer *x)
{
	if (x->queued || x->closed)
		return;
	x->queued = 1;
	x->qnext = NULL;
	x->qprev = c->qtail;
	if (c->qtail)
		c->qtail->qnext = x;
	else
		c->qhead = x;
	c->qtail = x;
}

static void queue_unlink(http_ctx *c, xfer *x)
{
	if (!x->queued)
		return;
	if (x->qprev)
		x->qprev->qnext = x->qnext;
	else
		c->qhead = x->qnext;
	if (x->qnext)
		x->qnext->qprev = x->qprev;
	else
		c->qtail = x->qprev;
	x->qprev = x->qnext = NULL;
	x->queued = 0;
}

static void xfer_free(xfer *x)
{
	free(x->hbuf);
	free(x->dbuf);
	free(x);
}

/* Ends x: detaches the Lua object, releases the callbacks, removes and cleans up the easy
 * handle, unlinks it. Frees it unless one of its callbacks runs (then the dispatcher does).
 * Never call from inside a libcurl callback. */
static void xfer_close(lua_State *L, xfer *x)
{
	http_ctx *c = x->ctx;
	if (x->closed)
		return;
	x->closed = 1;
	if (x->ud)
		x->ud->x = NULL;
	x->ud = NULL;
	luaL_unref(L, LUA_REGISTRYINDEX, x->ref_headers);
	luaL_unref(L, LUA_REGISTRYINDEX, x->ref_data);
	luaL_unref(L, LUA_REGISTRYINDEX, x->ref_done);
	x->ref_headers = x->ref_data = x->ref_done = LUA_NOREF;
	queue_unlink(c, x);
	if (x->prev)
		x->prev->next = x->next;
	else
		c->live = x->next;
	if (x->next)
		x->next->prev = x->prev;
	x->prev = x->next = NULL;
	c->nlive--;
	if (x->easy) {
		if (x->in_multi) {
			CURLMcode rc = curl_multi_remove_handle(c->multi, x->easy);
			if (rc != CURLM_OK)
				mb_log(MB_LOG_ERROR, "http_request %s: curl_multi_remove_handle: %s",
				       x->what, curl_multi_strerror(rc));
		}
		curl_easy_cleanup(x->easy);
		x->easy = NULL;
		x->in_multi = 0;
	}
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	if (!x->busy)
		xfer_free(x);
}

/* ---- sockets and timer (libcurl -> libuv) ---------------------------------------------------- */

static void free_on_close(uv_handle_t *h)
{
	free(h); /* the handle is the first member of its block */
}

static void sock_close(http_ctx *c, sock *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		c->socks = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
	uv_close((uv_handle_t *)&s->poll, free_on_close); /* stops polling now, before curl closes */
}

static void dispatch(http_ctx *c);

static void check_done(http_ctx *c)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(c->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		CURL *e = msg->easy_handle;
		CURLcode result = msg->data.result; /* msg dies with remove_handle: copy first */
		char *p = NULL;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, &p);
		xfer *x = (xfer *)p;
		if (!x)
			continue;
		long code = 0;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
		x->result = result;
		x->final_status = code;
		curl_multi_remove_handle(c->multi, e);
		x->in_multi = 0;
		curl_easy_cleanup(e); /* its connection stays in the multi's cache */
		x->easy = NULL;
		if (result == CURLE_OK && !x->hdr_done) {
			x->hdr_done = 1;
			x->ev_headers = 1;
			if (!x->status)
				x->status = (int)code;
		}
		x->ev_done = 1;
		queue_push(c, x);
	}
}

/* After curl_multi_socket_action: completions, then the Lua callbacks. */
static void after_action(http_ctx *c, CURLMcode rc)
{
	if (rc != CURLM_OK)
		mb_log(MB_LOG_ERROR, "http_request: curl_multi_socket_action: %s", curl_multi_strerror(rc));
	check_done(c);
	dispatch(c);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	sock *s = (sock *)h;
	http_ctx *c = s->ctx;
	int flags = 0;
	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	int running;
	/* s may be closed inside; it is not touched afterwards */
	CURLMcode rc = curl_multi_socket_action(c->multi, s->fd, flags, &running);
	after_action(c, rc);
}

static void on_uv_timer(uv_timer_t *t)
{
	http_ctx *c = (http_ctx *)t;
	int running;
	CURLMcode rc = curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	after_action(c, rc);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	(void)multi;
	http_ctx *c = userp;
	if (c->closing)
		return 0;
	if (timeout_ms < 0)
		uv_timer_stop(&c->timer);
	else
		uv_timer_start(&c->timer, on_uv_timer, (uint64_t)timeout_ms, 0);
	return 0;
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	(void)easy;
	http_ctx *c = userp;
	sock *s = socketp;
	if (c->closing)
		return 0;
	if (what == CURL_POLL_REMOVE) {
		if (s)
			sock_close(c, s); /* curl forgets socketp itself */
		return 0;
	}
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s) {
			mb_log(MB_LOG_ERROR, "http_request: out of memory for a socket watcher");
			return -1; /* curl aborts the transfers of this multi */
		}
		int rc = uv_poll_init_socket(c->loop, &s->poll, fd);
		if (rc < 0) {
			mb_log(MB_LOG_ERROR, "http_request: uv_poll_init_socket(%d): %s", (int)fd,
			       uv_strerror(rc));
			free(s);
			return -1;
		}
		uv_unref((uv_handle_t *)&s->poll);
		s->ctx = c;
		s->fd = fd;
		s->next = c->socks;
		if (c->socks)
			c->socks->prev = s;
		c->socks = s;
		curl_multi_assign(c->multi, fd, s);
	}
	int ev = 0;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		ev |= UV_READABLE;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		ev |= UV_WRITABLE;
	int rc = uv_poll_start(&s->poll, ev, on_poll);
	if (rc < 0) {
		mb_log(MB_LOG_ERROR, "http_request: uv_poll_start(%d): %s", (int)fd, uv_strerror(rc));
		return -1;
	}
	return 0;
}

/* ---- response recording (inside libcurl: no Lua, no multi calls) ----------------------------- */

static int grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	char *p = realloc(*buf, n);
	if (!p)
		return -1;
	*buf = p;
	*cap = n;
	return 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *userp)
{
	xfer *x = userp;
	size_t len = size * n;
	if (x->hdr_done)
		return len; /* trailers */
	x->htotal += len;
	if (x->htotal > MAX_HEADER_BYTES) {
		snprintf(x->localerr, sizeof x->localerr, "response headers above %d bytes",
			 MAX_HEADER_BYTES);
		return 0;
	}
	size_t l = len;
	while (l > 0 && (p[l - 1] == '\r' || p[l - 1] == '\n'))
		l--;
	if (memchr(p, 0, l))
		return len; /* a NUL would break the "name\0value\0" records: line ignored */
	if (l == 0) { /* end of a header block */
		if (x->status >= 100 && x->status < 200) {
			x->hlen = 0; /* 1xx: the real response follows */
			x->status = 0;
			return len;
		}
		x->hdr_done = 1;
		x->ev_headers = 1;
		queue_push(x->ctx, x);
		return len;
	}
	if (l >= 5 && memcmp(p, "HTTP/", 5) == 0) { /* status line: a new block */
		x->hlen = 0;
		const char *sp = memchr(p, ' ', l);
		int st = 0;
		if (sp)
			for (sp++; sp < p + l && *sp >= '0' && *sp <= '9' && st < 1000; sp++)
				st = st * 10 + (*sp - '0');
		x->status = st;
		return len;
	}
	if (p[0] == ' ' || p[0] == '\t') { /* obsolete line folding: continues the last value */
		if (x->hlen == 0)
			return len;
		size_t a = 0;
		while (a < l && (p[a] == ' ' || p[a] == '\t'))
			a++;
		if (grow(&x->hbuf, &x->hcap, x->hlen + 1 + (l - a) + 1) < 0)
			goto nomem;
		x->hlen--; /* over the value's NUL */
		x->hbuf[x->hlen++] = ' ';
		memcpy(x->hbuf + x->hlen, p + a, l - a);
		x->hlen += l - a;
		x->hbuf[x->hlen++] = 0;
		return len;
	}
	const char *colon = memchr(p, ':', l);
	if (!colon || colon == p)
		return len; /* not a header line: ignored */
	size_t nlen = (size_t)(colon - p);
	const char *v = colon + 1, *end = p + l;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	size_t vlen = (size_t)(end - v);
	if (grow(&x->hbuf, &x->hcap, x->hlen + nlen + vlen + 2) < 0)
		goto nomem;
	char *d = x->hbuf + x->hlen;
	for (size_t i = 0; i < nlen; i++) {
		char ch = p[i];
		d[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
	}
	d[nlen] = 0;
	memcpy(d + nlen + 1, v, vlen);
	d[nlen + 1 + vlen] = 0;
	x->hlen += nlen + vlen + 2;
	return len;
nomem:
	snprintf(x->localerr, sizeof x->localerr, "out of memory for the response headers");
	return 0;
}

static size_t on_write(char *p, size_t size, size_t n, void *userp)
{
	xfer *x = userp;
	size_t len = size * n;
	if (len == 0)
		return 0;
	if (x->max && x->received + len > x->max) {
		snprintf(x->localerr, sizeof x->localerr,
			 "response above %llu bytes (max_response_bytes=%llu)",
			 (unsigned long long)x->max, (unsigned long long)x->max);
		return CURL_WRITEFUNC_ERROR;
	}
	x->received += len;
	if (!x->hdr_done) { /* no header block seen (should not happen with HTTP/1.x) */
		x->hdr_done = 1;
		x->ev_headers = 1;
	}
	if (x->ref_data != LUA_NOREF) {
		if (grow(&x->dbuf, &x->dcap, x->dlen + len) < 0) {
			snprintf(x->localerr, sizeof x->localerr,
				 "out of memory for %zu bytes of response body", x->dlen + len);
			return CURL_WRITEFUNC_ERROR;
		}
		memcpy(x->dbuf + x->dlen, p, len);
		x->dlen += len;
	}
	queue_push(x->ctx, x);
	return len;
}

/* ---- delivery to Lua -------------------------------------------------------------------------- */

/* Builds the arguments of one callback and calls it: (fn, xfer, kind). Runs protected. */
static int trampoline(lua_State *L)
{
	xfer *x = lua_touserdata(L, 2);
	int kind = (int)lua_tointeger(L, 3);
	lua_settop(L, 1);
	int has_fn = lua_isfunction(L, 1);
	switch (kind) {
	case EV_HEADERS: {
		if (!has_fn)
			return 0;
		lua_pushinteger(L, x->status);
		lua_newtable(L);
		for (size_t i = 0; i < x->hlen;) {
			const char *name = x->hbuf + i;
			size_t nl = strlen(name);
			const char *val = name + nl + 1;
			size_t vl = strlen(val);
			i += nl + vl + 2;
			if (lua_getfield(L, 3, name) == LUA_TSTRING) {
				lua_pushliteral(L, ", ");
				lua_pushlstring(L, val, vl);
				lua_concat(L, 3);
			} else {
				lua_pop(L, 1);
				lua_pushlstring(L, val, vl);
			}
			lua_setfield(L, 3, name);
		}
		lua_call(L, 2, 0);
		return 0;
	}
	case EV_DATA: {
		size_t n = x->dlen;
		x->dlen = 0;
		if (!has_fn)
			return 0;
		lua_pushlstring(L, x->dbuf, n);
		lua_call(L, 1, 0);
		return 0;
	}
	default: { /* EV_DONE */
		if (!has_fn)
			return 0;
		if (x->result == CURLE_OK) {
			lua_pushnil(L);
		} else {
			const char *why = x->localerr[0] ? x->localerr
					  : x->errbuf[0] ? x->errbuf : curl_easy_strerror(x->result);
			lua_pushfstring(L, "%s: %s", x->what, why);
		}
		if (x->final_status > 0)
			lua_pushinteger(L, x->final_status);
		else
			lua_pushnil(L);
		lua_call(L, 2, 0);
		return 0;
	}
	}
}

/* Calls the callback behind ref for event kind of x. x must be busy. For EV_DONE x is closed
 * after its function is fetched and before it runs. */
static void deliver(http_ctx *c, xfer *x, int kind, int ref, const char *name)
{
	lua_State *L = c->L;
	if (!lua_checkstack(L, 8)) {
		mb_log(MB_LOG_ERROR, "http_request %s %s: no Lua stack space", name, x->what);
		if (kind == EV_DONE)
			xfer_close(L, x);
		x->dlen = 0;
		return;
	}
	lua_pushcfunction(L, mb_host_traceback);
	int h = lua_gettop(L);
	lua_pushcfunction(L, trampoline);
	lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
	lua_pushlightuserdata(L, x);
	lua_pushinteger(L, kind);
	if (kind == EV_DONE)
		xfer_close(L, x); /* finished: cancel is a no-op from now on */
	if (lua_pcall(L, 3, 0, h) != LUA_OK) {
		const char *msg = lua_tostring(L, -1);
		mb_log(MB_LOG_ERROR, "http_request %s callback (%s): %s", name, x->what,
		       msg ? msg : "(no message)");
		lua_pop(L, 1);
	}
	lua_pop(L, 1); /* the handler */
}

static void dispatch(http_ctx *c)
{
	if (c->dispatching)
		return; /* the running dispatch picks up what was queued */
	c->dispatching = 1;
	xfer *x;
	while ((x = c->qhead)) {
		queue_unlink(c, x);
		x->busy = 1;
		if (!x->closed && x->ev_headers) {
			x->ev_headers = 0;
			deliver(c, x, EV_HEADERS, x->ref_headers, "on_headers");
			free(x->hbuf);
			x->hbuf = NULL;
			x->hlen = x->hcap = 0;
		}
		if (!x->closed && x->dlen) {
			deliver(c, x, EV_DATA, x->ref_data, "on_data");
			if (x->dcap > KEEP_BUFFER) {
				free(x->dbuf);
				x->dbuf = NULL;
				x->dcap = 0;
			}
		}
		if (!x->closed && x->ev_done) {
			x->ev_done = 0;
			deliver(c, x, EV_DONE, x->ref_done, "on_done");
		}
		x->busy = 0;
		if (x->closed)
			xfer_free(x);
	}
	c->dispatching = 0;
}

/* ---- context ---------------------------------------------------------------------------------- */

static http_ctx *ctx_new(holder *hd, lua_State *L, char *err, size_t errlen)
{
	http_ctx *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->loop = hd->loop;
	lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
	c->L = lua_tothread(L, -1);
	lua_pop(L, 1);
	c->multi = curl_multi_init();
	if (!c->multi) {
		free(c);
		snprintf(err, errlen, "curl_multi_init failed");
		return NULL;
	}
	int rc = uv_timer_init(c->loop, &c->timer);
	if (rc < 0) {
		curl_multi_cleanup(c->multi);
		free(c);
		snprintf(err, errlen, "uv_timer_init: %s", uv_strerror(rc));
		return NULL;
	}
	uv_unref((uv_handle_t *)&c->timer);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
	return c;
}

static void ctx_close(lua_State *L, http_ctx *c)
{
	while (c->live)
		xfer_close(L, c->live);
	while (c->socks)
		sock_close(c, c->socks);
	c->closing = 1;
	curl_multi_cleanup(c->multi);
	c->multi = NULL;
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->timer, free_on_close);
}

static holder *find_holder(lua_State *L)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &holder_key);
	holder *hd = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return hd;
}

static int l_holder_gc(lua_State *L)
{
	holder *hd = lua_touserdata(L, 1);
	if (hd->c) {
		http_ctx *c = hd->c;
		hd->c = NULL;
		ctx_close(L, c);
	}
	return 0;
}

/* ---- request objects -------------------------------------------------------------------------- */

static requd *check_req(lua_State *L)
{
	return luaL_checkudata(L, 1, REQ_MT);
}

/* req:cancel() -> true if it was running */
static int l_req_cancel(lua_State *L)
{
	requd *u = check_req(L);
	int live = u->x != NULL;
	if (live)
		xfer_close(L, u->x);
	lua_pushboolean(L, live);
	return 1;
}

static int l_req_gc(lua_State *L)
{
	requd *u = lua_touserdata(L, 1);
	if (u && u->x) {
		mb_log(MB_LOG_DEBUG, "http_request %s: request object garbage-collected while running; "
		       "cancelled", u->x->what);
		xfer_close(L, u->x);
	}
	return 0;
}

static int l_req_tostring(lua_State *L)
{
	requd *u = check_req(L);
	if (u->x)
		lua_pushfstring(L, "http_request %s (running)", u->x->what);
	else
		lua_pushliteral(L, "http_request (finished)");
	return 1;
}

/* ---- http_request{...} ------------------------------------------------------------------------ */

typedef struct opts {
	const char *method;
	const char *url;
	size_t url_len;
	const char *body;
	size_t body_len;
	lua_Integer timeout_ms, connect_timeout_ms, max;
	int has_headers;
	int has_expect;
} opts;

static const char *const fields[] = {
	"method", "url", "headers", "body", "timeout_ms", "connect_timeout_ms",
	"max_response_bytes", "on_headers", "on_data", "on_done", NULL
};

static int is_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static lua_Integer int_field(lua_State *L, const char *name, lua_Integer dflt, lua_Integer max)
{
	lua_getfield(L, 1, name);
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		return dflt;
	}
	int ok = 0;
	lua_Integer v = 0;
	if (lua_type(L, -1) == LUA_TNUMBER)
		v = lua_tointegerx(L, -1, &ok);
	if ((!ok || v < 0) && max == LUA_MAXINTEGER)
		luaL_error(L, "http_request: %s must be an integer >= 0", name);
	if (!ok || v < 0 || v > max)
		luaL_error(L, "http_request: %s must be an integer between 0 and %I", name, max);
	lua_pop(L, 1);
	return v;
}

static void fn_field(lua_State *L, const char *name)
{
	int t = lua_getfield(L, 1, name);
	if (t != LUA_TNIL && t != LUA_TFUNCTION)
		luaL_error(L, "http_request: %s must be a function (got %s)", name, luaL_typename(L, -1));
	lua_pop(L, 1);
}

/* Validates every field of the table at index 1; raises on the first bad one. The strings stay
 * valid while the table is on the stack (and is not changed). */
static void parse_opts(lua_State *L, opts *o)
{
	memset(o, 0, sizeof *o);
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "http_request: unexpected %s key in the options (fields are named)",
				   luaL_typename(L, -1));
		const char *k = lua_tostring(L, -1);
		int known = 0;
		for (int i = 0; fields[i] && !known; i++)
			known = strcmp(k, fields[i]) == 0;
		if (!known)
			luaL_error(L, "http_request: unknown field \"%s\"", k);
	}

	if (lua_getfield(L, 1, "method") != LUA_TSTRING)
		luaL_error(L, "http_request: method must be \"GET\", \"POST\" or \"DELETE\"");
	const char *m = lua_tostring(L, -1);
	o->method = strcmp(m, "GET") == 0 ? "GET" : strcmp(m, "POST") == 0 ? "POST"
		    : strcmp(m, "DELETE") == 0 ? "DELETE" : NULL;
	if (!o->method)
		luaL_error(L, "http_request: method must be \"GET\", \"POST\" or \"DELETE\" (got \"%s\")", m);
	lua_pop(L, 1);

	if (lua_getfield(L, 1, "url") != LUA_TSTRING)
		luaL_error(L, "http_request: url must be a string (got %s)", luaL_typename(L, -1));
	o->url = lua_tolstring(L, -1, &o->url_len);
	lua_pop(L, 1);
	if (o->url_len > MAX_URL_BYTES)
		luaL_error(L, "http_request: url is %I bytes, above the limit of %d",
			   (lua_Integer)o->url_len, MAX_URL_BYTES);
	for (size_t i = 0; i < o->url_len; i++)
		if ((unsigned char)o->url[i] <= ' ' || o->url[i] == 0x7f)
			luaL_error(L, "http_request: url contains a space or control character at byte %I",
				   (lua_Integer)i + 1);
	size_t skip = strncasecmp(o->url, "http://", 7) == 0 ? 7
		      : strncasecmp(o->url, "https://", 8) == 0 ? 8 : 0;
	if (!skip || o->url[skip] == 0 || o->url[skip] == '/') {
		char shown[120];
		snprintf(shown, sizeof shown, "%.100s%s", o->url, o->url_len > 100 ? "..." : "");
		luaL_error(L, "http_request: url must be http://host... or https://host... (got \"%s\")",
			   shown);
	}
	CURLU *u = curl_url();
	if (!u)
		luaL_error(L, "http_request: out of memory");
	CURLUcode uc = curl_url_set(u, CURLUPART_URL, o->url, 0);
	curl_url_cleanup(u);
	if (uc != CURLUE_OK)
		luaL_error(L, "http_request: url is not valid (%s)", curl_url_strerror(uc));

	int t = lua_getfield(L, 1, "headers");
	if (t != LUA_TNIL) {
		if (t != LUA_TTABLE)
			luaL_error(L, "http_request: headers must be a table of strings (got %s)",
				   luaL_typename(L, -1));
		o->has_headers = 1;
		int ht = lua_gettop(L);
		lua_pushnil(L);
		while (lua_next(L, ht)) {
			if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
				luaL_error(L, "http_request: headers must be a table of strings "
					   "(got a %s key with a %s value)", luaL_typename(L, -2),
					   luaL_typename(L, -1));
			size_t nl, vl;
			const char *name = lua_tolstring(L, -2, &nl);
			const char *val = lua_tolstring(L, -1, &vl);
			int ok = nl > 0;
			for (size_t i = 0; i < nl && ok; i++)
				ok = is_tchar((unsigned char)name[i]);
			if (!ok)
				luaL_error(L, "http_request: header name \"%s\" is not a valid HTTP token",
					   name);
			for (size_t i = 0; i < vl; i++)
				if (val[i] == '\r' || val[i] == '\n' || val[i] == 0)
					luaL_error(L, "http_request: header \"%s\" has a CR, LF or NUL in its "
						   "value", name);
			if (strcasecmp(name, "Expect") == 0)
				o->has_expect = 1;
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);

	t = lua_getfield(L, 1, "body");
	if (t != LUA_TNIL) {
		if (t != LUA_TSTRING)
			luaL_error(L, "http_request: body must be a string (got %s)", luaL_typename(L, -1));
		if (strcmp(o->method, "POST") != 0)
			luaL_error(L, "http_request: body is only sent with POST (method is %s)", o->method);
		o->body = lua_tolstring(L, -1, &o->body_len);
	}
	lua_pop(L, 1);

	o->timeout_ms = int_field(L, "timeout_ms", 0, MAX_TIMEOUT_MS);
	o->connect_timeout_ms = int_field(L, "connect_timeout_ms", 0, MAX_TIMEOUT_MS);
	o->max = int_field(L, "max_response_bytes", DEFAULT_MAX_RESPONSE, LUA_MAXINTEGER);
	fn_field(L, "on_headers");
	fn_field(L, "on_data");
	fn_field(L, "on_done");
}

/* The url for messages: scheme://host[:port]/path, without user:password@, query or fragment. */
static void redact_url(const char *url, char *out)
{
	const char *p = strstr(url, "://") + 3;
	memcpy(out, url, (size_t)(p - url));
	out += p - url;
	size_t alen = strcspn(p, "/?#");
	const char *host = memrchr(p, '@', alen);
	host = host ? host + 1 : p;
	memcpy(out, host, (size_t)(p + alen - host));
	out += p + alen - host;
	p += alen;
	size_t plen = strcspn(p, "?#");
	memcpy(out, p, plen);
	out[plen] = 0;
}

/* Header list from the validated table: "Name: value", "Name;" for an empty value. */
static int build_headers(lua_State *L, const opts *o, struct curl_slist **out)
{
	struct curl_slist *list = NULL, *n;
	char *line = NULL;
	int top = lua_gettop(L);
	if (o->has_headers) {
		lua_getfield(L, 1, "headers");
		int ht = lua_gettop(L);
		lua_pushnil(L);
		while (lua_next(L, ht)) {
			size_t nl, vl;
			const char *name = lua_tolstring(L, -2, &nl);
			const char *val = lua_tolstring(L, -1, &vl);
			line = malloc(nl + vl + 3);
			if (!line)
				goto fail;
			if (vl)
				snprintf(line, nl + vl + 3, "%s: %s", name, val);
			else
				snprintf(line, nl + 2, "%s;", name);
			n = curl_slist_append(list, line);
			free(line);
			line = NULL;
			if (!n)
				goto fail;
			list = n;
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
	}
	if (!o->has_expect) {
		n = curl_slist_append(list, "Expect:");
		if (!n)
			goto fail;
		list = n;
	}
	*out = list;
	return 0;
fail:
	lua_settop(L, top);
	curl_slist_free_all(list);
	return -1;
}

#define SETOPT(opt, val) do { if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val); } while (0)

/* Configures x->easy from o; returns the first failing code. */
static CURLcode configure(xfer *x, const opts *o)
{
	CURL *e = x->easy;
	CURLcode rc = CURLE_OK;
	SETOPT(CURLOPT_URL, o->url);
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
	SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
	SETOPT(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
	SETOPT(CURLOPT_USERAGENT, "moonbox");
	SETOPT(CURLOPT_ERRORBUFFER, x->errbuf);
	SETOPT(CURLOPT_PRIVATE, (char *)x);
	SETOPT(CURLOPT_HEADERFUNCTION, on_header);
	SETOPT(CURLOPT_HEADERDATA, x);
	SETOPT(CURLOPT_WRITEFUNCTION, on_write);
	SETOPT(CURLOPT_WRITEDATA, x);
	SETOPT(CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, (long)o->connect_timeout_ms);
	SETOPT(CURLOPT_HTTPHEADER, x->hdrs);
	/* Cancelling a transfer whose name lookup is still running must not wait for it: without
	 * this, curl_multi_remove_handle joins the resolver thread, and a slow DNS server held the
	 * loop (and the exit after shutdown's DELETEs) for as long as getaddrinfo took (review: 8 s).
	 * libcurl before 7.87 does not know the option; that is not an error. */
	if (rc == CURLE_OK)
		(void)curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
	if (strcmp(o->method, "POST") == 0) {
		SETOPT(CURLOPT_POST, 1L);
		SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
		SETOPT(CURLOPT_COPYPOSTFIELDS, o->body ? o->body : "");
	} else if (strcmp(o->method, "DELETE") == 0) {
		SETOPT(CURLOPT_CUSTOMREQUEST, "DELETE");
	} else {
		SETOPT(CURLOPT_HTTPGET, 1L);
	}
	return rc;
}

static int fn_ref(lua_State *L, const char *name)
{
	if (lua_getfield(L, 1, name) == LUA_TNIL) {
		lua_pop(L, 1);
		return LUA_NOREF;
	}
	return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* http_request{...} -> request | nil, "http_request: <reason>" */
static int l_http_request(lua_State *L)
{
	holder *hd = lua_touserdata(L, lua_upvalueindex(1));
	char err[MB_ERR_MAX];
	/* libcurl is opened by the first request (curl_load.h); parse_opts already uses it */
	if (mb_curl_load(err, sizeof err) != 0) {
		lua_pushnil(L);
		lua_pushfstring(L, "http_request: %s", err);
		return 2;
	}
	opts o;
	parse_opts(L, &o);
	if (!hd->c) {
		hd->c = ctx_new(hd, L, err, sizeof err);
		if (!hd->c)
			goto failed;
	}
	http_ctx *c = hd->c;
	/* Lua allocations first (they may raise); no C memory is held yet */
	requd *u = lua_newuserdatauv(L, sizeof *u, 0);
	u->x = NULL;
	luaL_setmetatable(L, REQ_MT);
	int ud_idx = lua_gettop(L);
	int refs[3] = { fn_ref(L, "on_headers"), fn_ref(L, "on_data"), fn_ref(L, "on_done") };

	size_t mlen = strlen(o.method);
	xfer *x = calloc(1, sizeof *x + mlen + 1 + o.url_len + 1);
	if (!x) {
		snprintf(err, sizeof err, "out of memory");
		goto unref;
	}
	x->ctx = c;
	x->ref_headers = refs[0];
	x->ref_data = refs[1];
	x->ref_done = refs[2];
	x->max = (uint64_t)o.max;
	memcpy(x->what, o.method, mlen);
	x->what[mlen] = ' ';
	redact_url(o.url, x->what + mlen + 1);
	if (build_headers(L, &o, &x->hdrs) < 0) {
		snprintf(err, sizeof err, "out of memory");
		goto freex;
	}
	x->easy = curl_easy_init();
	if (!x->easy) {
		snprintf(err, sizeof err, "curl_easy_init failed");
		goto freex;
	}
	CURLcode rc = configure(x, &o);
	if (rc != CURLE_OK) {
		snprintf(err, sizeof err, "%s", curl_easy_strerror(rc));
		goto freex;
	}
	CURLMcode mrc = curl_multi_add_handle(c->multi, x->easy);
	if (mrc != CURLM_OK) {
		snprintf(err, sizeof err, "curl_multi_add_handle: %s", curl_multi_strerror(mrc));
		goto freex;
	}
	x->in_multi = 1;
	x->next = c->live;
	if (c->live)
		c->live->prev = x;
	c->live = x;
	c->nlive++;
	x->ud = u;
	u->x = x;
	lua_settop(L, ud_idx);
	return 1;
freex:
	if (x->easy)
		curl_easy_cleanup(x->easy);
	curl_slist_free_all(x->hdrs);
	free(x);
unref:
	for (int i = 0; i < 3; i++)
		luaL_unref(L, LUA_REGISTRYINDEX, refs[i]);
failed:
	lua_pushnil(L);
	lua_pushfstring(L, "http_request: %s", err);
	return 2;
}

/* ---- public ----------------------------------------------------------------------------------- */

void mb_host_http_open(lua_State *L, uv_loop_t *loop)
{
	/* libcurl itself is loaded by the first request (l_http_request, curl_load.h) */
	static const luaL_Reg methods[] = { { "cancel", l_req_cancel }, { NULL, NULL } };
	int t = lua_absindex(L, -1);
	mb_host_handle_mt(L, REQ_MT, methods, l_req_gc, l_req_cancel, l_req_tostring,
			  "mb.http_request");
	int made;
	holder *hd = mb_host_context(L, &holder_key, sizeof *hd, HOLDER_MT, l_holder_gc, &made);
	hd->loop = loop;
	lua_pushcclosure(L, l_http_request, 1);
	lua_setfield(L, t, "http_request");
}

void mb_host_http_close_all(lua_State *L)
{
	holder *hd = find_holder(L);
	if (!hd || !hd->c)
		return;
	http_ctx *c = hd->c;
	hd->c = NULL;
	ctx_close(L, c);
}

int mb_host_http_live(lua_State *L)
{
	holder *hd = find_holder(L);
	return hd && hd->c ? hd->c->nlive : 0;
}
