/* host_proc.c - child processes for the host Lua state, on the server's libuv loop.
 *
 * Four kinds of object cooperate. The per-state context (`proc_ctx`, malloc'd; a small userdata
 * box in the registry under the address of ctx_key points at it and is an upvalue of spawn) knows
 * the loop, the state's main thread and the list of live children. Each child is a malloc'd `proc`
 * block holding its five libuv handles (process, stdin/stdout/stderr pipes, one timer), its two
 * line buffers and the registry references of its callbacks; it counts its open handles and the
 * last close callback frees it. The Lua object (`pud`) only points at its proc; detaching (at
 * exit, shutdown, garbage collection or lua_close) clears that pointer, releases the references
 * and from then on the proc never calls into Lua again. The context outlives the Lua state when
 * children are still being reaped: it is freed by whichever comes last, the box's finalizer or
 * the unlinking of the last finished child.
 *
 * A child runs through these events, each a libuv callback: reads on stdout/stderr are split into
 * lines (`feed`: a fast path for lines wholly inside one read, a growing buffer bounded by
 * max_line_bytes otherwise, a skip mode after an over-long line); the exit callback records the
 * status, closes stdin and the process handle, and arms the drain timer in case a grandchild
 * holds the pipes; end of file on a stream delivers its last unterminated line and closes it.
 * When the child has exited and both streams are closed it is finished (`maybe_finish`): it
 * leaves the live list, its Lua object is detached and on_exit runs last. The same timer, before
 * the exit, is the SIGKILL deadline of close()/shutdown.
 *
 * Callbacks run through a C trampoline under lua_pcall (so even pushing a 16 MB line cannot raise
 * outside protection) with a traceback handler; errors are logged. A proc is never freed during a
 * callback (only close callbacks free), so after each Lua call the code re-checks only whether
 * the proc is still attached.
 */
#include "host_proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host_uv.h"
#include "log.h"

#define PROC_MT "mb.process"
#define CTX_MT "mb.proc_ctx"

enum {
	READ_BYTES = 65536,          /* one read buffer */
	STDERR_LINE_MAX = 4096,      /* stderr lines are cut here */
	SHRINK_ABOVE = 65536,        /* a line buffer larger than this is freed after its line */
	DRAIN_MS = 1000,             /* after the exit, wait this long for end of file */
	DEFAULT_GRACE_MS = 2000,
	MAX_COMMAND_BYTES = 4096,
};
#define DEFAULT_MAX_LINE ((lua_Integer)16 << 20)
#define MAX_MAX_LINE ((lua_Integer)1 << 30)
#define MAX_GRACE_MS ((lua_Integer)86400000)

static const char ctx_key = 0;   /* its address is the registry key of the context box */

typedef struct proc proc;
typedef struct pud pud;

typedef struct proc_ctx {
	uv_loop_t *loop;
	lua_State *L;    /* the main thread of the state; NULL once the state is gone */
	proc *live;      /* children not yet finished */
	int nlive;
	int shut_down;   /* mb_host_proc_shutdown was called: spawn refuses */
} proc_ctx;

typedef struct ctx_box {
	proc_ctx *ctx;
} ctx_box;

/* Why a Lua object no longer has a proc. */
enum { PUD_LIVE = 0, PUD_EXITED, PUD_SHUT_DOWN, PUD_COLLECTED };

struct pud {
	proc *p;         /* NULL once detached */
	int state;       /* PUD_* */
};

typedef struct linebuf {
	char *buf;
	size_t len, cap;
	size_t max;      /* the longest line */
	int cut;         /* 1: deliver the first max bytes of a longer line; 0: drop it with a notice */
	int skipping;    /* dropping bytes up to the next '\n' */
} linebuf;

enum { IN_OPEN, IN_SHUTTING, IN_CLOSED };

struct proc {
	uv_process_t process;
	uv_pipe_t in, out, err;
	uv_timer_t timer;      /* SIGKILL deadline before the exit, drain deadline after it */
	uv_shutdown_t shut;
	proc_ctx *ctx;
	pud *ud;               /* the Lua object while attached, else NULL */
	int line_ref, stderr_ref, exit_ref;
	int nopen;             /* handles initialised and not yet through their close callback */
	int in_state;          /* IN_* */
	int exited, out_eof, err_eof, finished, linked, termed;
	int pid;
	int64_t exit_status;
	int term_signal;
	size_t queued;         /* stdin bytes handed to uv_write and not yet written */
	linebuf lo, le;        /* stdout, stderr */
	proc *prev, *next;
	char name[];           /* the command, for messages */
};

typedef struct wreq {
	uv_write_t req;
	proc *p;
	size_t n;
	char data[];
} wreq;

/* ---- handles and lifetime ------------------------------------------------------------------ */

static void on_handle_closed(uv_handle_t *h)
{
	proc *p = h->data;
	if (--p->nopen == 0) {
		free(p->lo.buf);
		free(p->le.buf);
		free(p);
	}
}

/* Closes h once; h->data is set only for initialised handles. */
static void close_h(uv_handle_t *h)
{
	if (h->data && !uv_is_closing(h))
		uv_close(h, on_handle_closed);
}

static void link_proc(proc_ctx *ctx, proc *p)
{
	p->prev = NULL;
	p->next = ctx->live;
	if (ctx->live)
		ctx->live->prev = p;
	ctx->live = p;
	ctx->nlive++;
	p->linked = 1;
}

/* Removes p from the live list; frees the context when the state is gone and p was the last. */
static void unlink_proc(proc *p)
{
	proc_ctx *ctx = p->ctx;
	if (!p->linked)
		return;
	if (p->prev)
		p->prev->next = p->next;
	else
		ctx->live = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
	p->linked = 0;
	ctx->nlive--;
	p->ctx = NULL;
	if (!ctx->L && !ctx->live)
		free(ctx);
}

/* Cuts the link to the Lua object and releases the callbacks; no Lua call happens afterwards. */
static void detach(proc *p, int why)
{
	if (!p->ud)
		return;
	lua_State *L = p->ctx->L;
	p->ud->p = NULL;
	p->ud->state = why;
	p->ud = NULL;
	luaL_unref(L, LUA_REGISTRYINDEX, p->line_ref);
	luaL_unref(L, LUA_REGISTRYINDEX, p->stderr_ref);
	luaL_unref(L, LUA_REGISTRYINDEX, p->exit_ref);
	p->line_ref = p->stderr_ref = p->exit_ref = LUA_NOREF;
}

static void on_stdin_shutdown(uv_shutdown_t *r, int status)
{
	(void)status; /* ECANCELED when the pipe was closed meanwhile; errors end in close anyway */
	proc *p = r->handle->data;
	p->in_state = IN_CLOSED;
	close_h((uv_handle_t *)&p->in);
}

/* Closes stdin: after the queued bytes are written when flush is set, else at once (queued
 * writes are cancelled). */
static void stdin_close(proc *p, int flush)
{
	if (p->in_state == IN_CLOSED)
		return;
	if (p->in_state == IN_OPEN && flush && p->queued > 0 &&
	    uv_shutdown(&p->shut, (uv_stream_t *)&p->in, on_stdin_shutdown) == 0) {
		p->in_state = IN_SHUTTING;
		return;
	}
	p->in_state = IN_CLOSED;
	close_h((uv_handle_t *)&p->in);
}

/* ---- calling Lua ----------------------------------------------------------------------------- */

enum { CB_LINE, CB_NOTICE, CB_STDERR, CB_EXIT };

typedef struct cb_call {
	int ref;
	int kind;
	const char *s;
	size_t n;
	lua_Integer a, b;
} cb_call;

/* Runs under lua_pcall: pushes the function and its arguments (allocations may raise here
 * safely) and calls it. */
static int cb_trampoline(lua_State *L)
{
	cb_call *c = lua_touserdata(L, 1);
	lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
	int nargs = 1;
	switch (c->kind) {
	case CB_LINE:
	case CB_STDERR:
		lua_pushlstring(L, c->s, c->n);
		break;
	case CB_NOTICE:
		lua_pushnil(L);
		lua_pushlstring(L, c->s, c->n);
		nargs = 2;
		break;
	default:
		lua_pushinteger(L, c->a);
		lua_pushinteger(L, c->b);
		nargs = 2;
		break;
	}
	lua_call(L, nargs, 0);
	return 0;
}

/* Calls the callback described by c on the main thread; logs an error. */
static void invoke(lua_State *L, proc *p, cb_call *c, const char *what)
{
	if (!lua_checkstack(L, 8)) {
		mb_log(MB_LOG_ERROR, "spawn %s (pid %d): %s callback: no Lua stack space", p->name,
		       p->pid, what);
		return;
	}
	lua_pushcfunction(L, mb_host_traceback);
	lua_pushcfunction(L, cb_trampoline);
	lua_pushlightuserdata(L, c);
	if (lua_pcall(L, 1, 0, -3) != LUA_OK) {
		const char *msg = lua_tostring(L, -1);
		mb_log(MB_LOG_ERROR, "spawn %s (pid %d): %s callback: %s", p->name, p->pid, what,
		       msg ? msg : "(no message)");
		lua_pop(L, 1);
	}
	lua_pop(L, 1); /* the handler */
}

/* Hands one line of stdout (is_out) or stderr to its callback; strip removes a trailing '\r'. */
static void deliver(proc *p, int is_out, const char *s, size_t n, int strip)
{
	if (!p->ud)
		return;
	if (strip && n > 0 && s[n - 1] == '\r')
		n--;
	int ref = is_out ? p->line_ref : p->stderr_ref;
	if (ref == LUA_NOREF) {
		if (!is_out)
			mb_log(MB_LOG_DEBUG, "spawn %s (pid %d) stderr: %.*s", p->name, p->pid, (int)n, s);
		return;
	}
	cb_call c = { ref, is_out ? CB_LINE : CB_STDERR, s, n, 0, 0 };
	invoke(p->ctx->L, p, &c, is_out ? "on_line" : "on_stderr");
}

/* on_line(nil, msg) for a stdout line that was dropped; stderr drops are only logged. */
static void deliver_notice(proc *p, int is_out, const char *msg)
{
	if (!p->ud)
		return;
	if (!is_out || p->line_ref == LUA_NOREF) {
		mb_log(MB_LOG_WARNING, "spawn %s (pid %d) %s: %s", p->name, p->pid,
		       is_out ? "stdout" : "stderr", msg);
		return;
	}
	cb_call c = { p->line_ref, CB_NOTICE, msg, strlen(msg), 0, 0 };
	invoke(p->ctx->L, p, &c, "on_line");
}

/* ---- line splitting --------------------------------------------------------------------------- */

/* Appends n bytes (len + n <= max is the caller's promise); -1 when out of memory. */
static int buf_append(linebuf *lb, const char *d, size_t n)
{
	if (lb->len + n > lb->cap) {
		size_t cap = lb->cap ? lb->cap : 4096;
		while (cap < lb->len + n)
			cap *= 2;
		if (cap > lb->max)
			cap = lb->max;
		char *b = realloc(lb->buf, cap);
		if (!b)
			return -1;
		lb->buf = b;
		lb->cap = cap;
	}
	memcpy(lb->buf + lb->len, d, n);
	lb->len += n;
	return 0;
}

static void buf_reset(linebuf *lb)
{
	lb->len = 0;
	if (lb->cap > SHRINK_ABOVE) {
		free(lb->buf);
		lb->buf = NULL;
		lb->cap = 0;
	}
}

/* Splits n bytes read from stdout (is_out) or stderr into lines and delivers them. Stops when
 * a callback detached the process (nothing is delivered any more). */
static void feed(proc *p, int is_out, const char *d, size_t n)
{
	linebuf *lb = is_out ? &p->lo : &p->le;
	char msg[MB_ERR_MAX];
	while (n > 0 && p->ud) {
		const char *nl = memchr(d, '\n', n);
		size_t seg = nl ? (size_t)(nl - d) : n;
		size_t adv = nl ? seg + 1 : seg;
		if (lb->skipping) {
			if (nl)
				lb->skipping = 0;
		} else if (seg > lb->max - lb->len) {
			/* too long: stderr delivers its first max bytes, stdout drops it */
			if (lb->cut) {
				if (lb->len == 0)
					deliver(p, is_out, d, lb->max, 0);
				else if (buf_append(lb, d, lb->max - lb->len) == 0)
					deliver(p, is_out, lb->buf, lb->len, 0);
				else
					deliver_notice(p, is_out, "out of memory: a line was discarded");
			} else {
				snprintf(msg, sizeof msg, "a line of more than %zu bytes was discarded "
					 "(max_line_bytes=%zu)", lb->max, lb->max);
				deliver_notice(p, is_out, msg);
			}
			buf_reset(lb);
			lb->skipping = nl == NULL;
		} else if (nl && lb->len == 0) {
			deliver(p, is_out, d, seg, 1); /* the whole line is in this read */
		} else if (buf_append(lb, d, seg) < 0) {
			snprintf(msg, sizeof msg, "out of memory buffering a line of more than %zu bytes; "
				 "the line was discarded", lb->len + seg);
			deliver_notice(p, is_out, msg);
			buf_reset(lb);
			lb->skipping = nl == NULL;
		} else if (nl) {
			deliver(p, is_out, lb->buf, lb->len, 1);
			buf_reset(lb);
		}
		d += adv;
		n -= adv;
	}
}

/* End of file (or a read error, or the drain deadline) on one stream: the last unterminated
 * line is delivered and the pipe closed. */
static void end_stream(proc *p, int is_out)
{
	int *eof = is_out ? &p->out_eof : &p->err_eof;
	linebuf *lb = is_out ? &p->lo : &p->le;
	if (*eof)
		return;
	*eof = 1;
	uv_handle_t *h = is_out ? (uv_handle_t *)&p->out : (uv_handle_t *)&p->err;
	close_h(h);
	if (!lb->skipping && lb->len > 0)
		deliver(p, is_out, lb->buf, lb->len, 1);
	lb->len = 0;
	lb->skipping = 0;
}

/* Once exited and both streams are closed: leaves the live list, detaches, calls on_exit. */
static void maybe_finish(proc *p)
{
	if (p->finished || !p->exited || !p->out_eof || !p->err_eof)
		return;
	p->finished = 1;
	uv_timer_stop(&p->timer);
	close_h((uv_handle_t *)&p->timer);
	lua_State *L = NULL;
	int ref = LUA_NOREF;
	if (p->ud) {
		L = p->ctx->L;
		ref = p->exit_ref;
		p->exit_ref = LUA_NOREF;
		detach(p, PUD_EXITED);
	}
	unlink_proc(p); /* the context stays: a state that had p attached is alive */
	if (ref != LUA_NOREF) {
		cb_call c = { ref, CB_EXIT, NULL, 0, (lua_Integer)p->exit_status, p->term_signal };
		invoke(L, p, &c, "on_exit");
		luaL_unref(L, LUA_REGISTRYINDEX, ref);
	}
}

/* ---- libuv callbacks ---------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	(void)h;
	(void)suggested;
	b->base = malloc(READ_BYTES);
	b->len = b->base ? READ_BYTES : 0; /* 0: libuv reports UV_ENOBUFS and tries again later */
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	proc *p = s->data;
	int is_out = s == (uv_stream_t *)&p->out;
	if (n > 0)
		feed(p, is_out, b->base, (size_t)n);
	free(b->base);
	if (n >= 0)
		return;
	if (n == UV_ENOBUFS) {
		mb_log(MB_LOG_WARNING, "spawn %s (pid %d): out of memory reading its output", p->name,
		       p->pid);
		return;
	}
	if (n != UV_EOF)
		mb_log(MB_LOG_WARNING, "spawn %s (pid %d): reading %s: %s", p->name, p->pid,
		       is_out ? "stdout" : "stderr", uv_strerror((int)n));
	end_stream(p, is_out);
	maybe_finish(p);
}

static void on_timer(uv_timer_t *t)
{
	proc *p = t->data;
	if (!p->exited) {
		mb_log(MB_LOG_WARNING, "spawn %s (pid %d): still running after its grace period; "
		       "sending SIGKILL", p->name, p->pid);
		int rc = uv_process_kill(&p->process, SIGKILL);
		if (rc < 0)
			mb_log(MB_LOG_ERROR, "spawn %s (pid %d): SIGKILL: %s", p->name, p->pid,
			       uv_strerror(rc));
		return;
	}
	/* exited, but a grandchild still holds a pipe open: stop waiting for end of file */
	mb_log(MB_LOG_INFO, "spawn %s (pid %d): output still open %d ms after the exit (a "
	       "background process?); closing it", p->name, p->pid, DRAIN_MS);
	end_stream(p, 1);
	end_stream(p, 0);
	maybe_finish(p);
}

static void on_proc_exit(uv_process_t *h, int64_t status, int sig)
{
	proc *p = h->data;
	p->exited = 1;
	p->exit_status = status;
	p->term_signal = sig;
	uv_timer_stop(&p->timer);
	stdin_close(p, 0);
	close_h((uv_handle_t *)&p->process);
	if (!p->out_eof || !p->err_eof)
		uv_timer_start(&p->timer, on_timer, DRAIN_MS, 0);
	maybe_finish(p);
}

static void on_written(uv_write_t *r, int status)
{
	wreq *w = (wreq *)r;
	proc *p = w->p;
	p->queued -= w->n;
	if (status < 0 && status != UV_ECANCELED && !p->exited)
		mb_log(MB_LOG_DEBUG, "spawn %s (pid %d): writing to stdin: %s", p->name, p->pid,
		       uv_strerror(status));
	free(w);
}

/* Closes stdin, sends SIGTERM once and SIGKILL after grace_ms (an earlier deadline stays). */
static void stop_proc(proc *p, uint64_t grace_ms)
{
	if (p->exited)
		return;
	stdin_close(p, 1);
	if (!p->termed) {
		p->termed = 1;
		int rc = uv_process_kill(&p->process, SIGTERM);
		if (rc < 0)
			mb_log(MB_LOG_WARNING, "spawn %s (pid %d): SIGTERM: %s", p->name, p->pid,
			       uv_strerror(rc));
	}
	if (uv_is_active((uv_handle_t *)&p->timer) && uv_timer_get_due_in(&p->timer) <= grace_ms)
		return;
	uv_timer_start(&p->timer, on_timer, grace_ms, 0);
}

/* The Lua side let go of a running process (garbage collection or lua_close): SIGKILL. */
static void abandon(proc *p, const char *why)
{
	if (!p->exited) {
		mb_log(MB_LOG_WARNING, "spawn %s (pid %d): %s while the process runs; killing it with "
		       "SIGKILL (keep a reference to it, or call :close())", p->name, p->pid, why);
		stdin_close(p, 0);
		uv_process_kill(&p->process, SIGKILL);
		p->termed = 1;
	}
	detach(p, PUD_COLLECTED);
}

/* Every descriptor from 3 up gets FD_CLOEXEC, so the child inherits only its three pipes. */
static void cloexec_from_3(void)
{
#ifdef CLOSE_RANGE_CLOEXEC
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return;
#endif
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int dfd = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		if (end == e->d_name || *end || fd < 3 || fd == dfd || fd > INT32_MAX)
			continue;
		int fl = fcntl((int)fd, F_GETFD);
		if (fl >= 0 && !(fl & FD_CLOEXEC))
			fcntl((int)fd, F_SETFD, fl | FD_CLOEXEC);
	}
	closedir(d);
}

/* ---- Lua objects --------------------------------------------------------------------------------- */

static pud *check_pud(lua_State *L)
{
	return luaL_checkudata(L, 1, PROC_MT);
}

static const char *cmd_of(lua_State *L)
{
	lua_getiuservalue(L, 1, 1);
	const char *s = lua_tostring(L, -1);
	lua_pop(L, 1); /* still referenced by the object */
	return s ? s : "?";
}

static const char *gone_text(const pud *u)
{
	switch (u->state) {
	case PUD_SHUT_DOWN:
		return "the process was shut down";
	case PUD_COLLECTED:
		return "the process was killed";
	default:
		return "the process has exited";
	}
}

static int fail2(lua_State *L, const char *verb, const char *text)
{
	lua_pushnil(L);
	lua_pushfstring(L, "%s %s: %s", verb, cmd_of(L), text);
	return 2;
}

/* p:write(data) -> true | nil, err */
static int l_write(lua_State *L)
{
	pud *u = check_pud(L);
	size_t n;
	const char *s = luaL_checklstring(L, 2, &n);
	proc *p = u->p;
	if (!p)
		return fail2(L, "write", gone_text(u));
	if (p->exited)
		return fail2(L, "write", "the process has exited");
	if (p->in_state != IN_OPEN)
		return fail2(L, "write", "stdin is closed");
	if (p->queued == 0 && n > 0) {
		uv_buf_t b = uv_buf_init((char *)s, (unsigned int)(n > UINT32_MAX ? UINT32_MAX : n));
		int rc = uv_try_write((uv_stream_t *)&p->in, &b, 1);
		if (rc >= 0) {
			s += rc;
			n -= (size_t)rc;
		} else if (rc != UV_EAGAIN) {
			return fail2(L, "write", uv_strerror(rc));
		}
	}
	while (n > 0) {
		size_t chunk = n > UINT32_MAX ? UINT32_MAX : n;
		wreq *w = malloc(sizeof *w + chunk);
		if (!w)
			return fail2(L, "write", "out of memory");
		w->p = p;
		w->n = chunk;
		memcpy(w->data, s, chunk);
		uv_buf_t b = uv_buf_init(w->data, (unsigned int)chunk);
		int rc = uv_write(&w->req, (uv_stream_t *)&p->in, &b, 1, on_written);
		if (rc < 0) {
			free(w);
			return fail2(L, "write", uv_strerror(rc));
		}
		p->queued += chunk;
		s += chunk;
		n -= chunk;
	}
	lua_pushboolean(L, 1);
	return 1;
}

static int l_queued_bytes(lua_State *L)
{
	pud *u = check_pud(L);
	lua_pushinteger(L, u->p ? (lua_Integer)u->p->queued : 0);
	return 1;
}

static int l_pid(lua_State *L)
{
	pud *u = check_pud(L);
	if (u->p && !u->p->exited)
		lua_pushinteger(L, u->p->pid);
	else
		lua_pushnil(L);
	return 1;
}

static int l_running(lua_State *L)
{
	pud *u = check_pud(L);
	lua_pushboolean(L, u->p && !u->p->exited);
	return 1;
}

static const struct { const char *name; int sig; } signals[] = {
	{ "TERM", SIGTERM }, { "KILL", SIGKILL }, { "INT", SIGINT }, { "HUP", SIGHUP },
	{ "STOP", SIGSTOP }, { "CONT", SIGCONT }, { "QUIT", SIGQUIT }, { "USR1", SIGUSR1 },
	{ "USR2", SIGUSR2 },
};

/* p:kill(sig = "TERM") -> true | nil, err */
static int l_kill(lua_State *L)
{
	pud *u = check_pud(L);
	int sig = -1;
	if (lua_isnoneornil(L, 2)) {
		sig = SIGTERM;
	} else if (lua_type(L, 2) == LUA_TNUMBER) {
		int isint;
		lua_Integer v = lua_tointegerx(L, 2, &isint);
		luaL_argcheck(L, isint && v >= 0 && v <= 64, 2, "expected a signal number 0..64");
		sig = (int)v;
	} else if (lua_type(L, 2) == LUA_TSTRING) {
		const char *name = lua_tostring(L, 2);
		if (strncmp(name, "SIG", 3) == 0)
			name += 3;
		for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
			if (strcmp(name, signals[i].name) == 0)
				sig = signals[i].sig;
		if (sig < 0)
			return luaL_argerror(L, 2, lua_pushfstring(L, "unknown signal '%s' (expected "
					     "TERM, KILL, INT, HUP, STOP, CONT, QUIT, USR1, USR2 or a number)",
					     lua_tostring(L, 2)));
	} else {
		return luaL_typeerror(L, 2, "signal name or number");
	}
	proc *p = u->p;
	if (!p)
		return fail2(L, "kill", gone_text(u));
	if (p->exited)
		return fail2(L, "kill", "the process has exited");
	int rc = uv_process_kill(&p->process, sig);
	if (rc < 0)
		return fail2(L, "kill", uv_strerror(rc));
	lua_pushboolean(L, 1);
	return 1;
}

/* p:close_stdin() -> true (idempotent) */
static int l_close_stdin(lua_State *L)
{
	pud *u = check_pud(L);
	if (u->p)
		stdin_close(u->p, 1);
	lua_pushboolean(L, 1);
	return 1;
}

static int close_with(lua_State *L, pud *u, lua_Integer grace)
{
	if (u->p)
		stop_proc(u->p, (uint64_t)grace);
	lua_pushboolean(L, 1);
	return 1;
}

/* p:close(grace_ms = 2000) -> true (idempotent) */
static int l_close(lua_State *L)
{
	pud *u = check_pud(L);
	lua_Integer grace = luaL_optinteger(L, 2, DEFAULT_GRACE_MS);
	luaL_argcheck(L, grace >= 0 && grace <= MAX_GRACE_MS, 2,
		      "expected milliseconds between 0 and 86400000");
	return close_with(L, u, grace);
}

/* __close of a to-be-closed variable: the second argument is an error object, not a grace. */
static int l_tbc_close(lua_State *L)
{
	return close_with(L, check_pud(L), DEFAULT_GRACE_MS);
}

static int l_proc_gc(lua_State *L)
{
	pud *u = lua_touserdata(L, 1);
	if (u && u->p)
		abandon(u->p, "its Lua object was garbage-collected");
	return 0;
}

static int l_proc_tostring(lua_State *L)
{
	pud *u = check_pud(L);
	const char *cmd = cmd_of(L);
	if (u->p && !u->p->exited)
		lua_pushfstring(L, "process %s (pid %d)", cmd, u->p->pid);
	else if (u->p || u->state == PUD_EXITED)
		lua_pushfstring(L, "process %s (exited)", cmd);
	else
		lua_pushfstring(L, "process %s (%s)", cmd,
				u->state == PUD_SHUT_DOWN ? "shut down" : "killed");
	return 1;
}

static int l_ctx_gc(lua_State *L)
{
	ctx_box *b = lua_touserdata(L, 1);
	proc_ctx *ctx = b->ctx;
	if (!ctx)
		return 0;
	b->ctx = NULL;
	for (proc *p = ctx->live; p; p = p->next)
		if (p->ud)
			abandon(p, "the Lua state was closed");
	ctx->L = NULL;
	if (!ctx->live)
		free(ctx);
	return 0;
}

/* ---- spawn ----------------------------------------------------------------------------------------- */

static int rawfield(lua_State *L, const char *name)
{
	lua_pushstring(L, name);
	return lua_rawget(L, 1);
}

static const char *const known_fields[] = {
	"command", "args", "env", "cwd", "max_line_bytes", "on_line", "on_stderr", "on_exit", NULL,
};

static void check_fields(lua_State *L)
{
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "spawn: unknown field [%s] (fields are command, args, env, cwd, "
				   "max_line_bytes, on_line, on_stderr, on_exit)", luaL_tolstring(L, -1, NULL));
		const char *k = lua_tostring(L, -1);
		int ok = 0;
		for (int i = 0; known_fields[i]; i++)
			ok |= strcmp(k, known_fields[i]) == 0;
		if (!ok)
			luaL_error(L, "spawn: unknown field '%s' (fields are command, args, env, cwd, "
				   "max_line_bytes, on_line, on_stderr, on_exit)", k);
	}
}

/* An optional string field without NUL bytes; NULL when absent. */
static const char *opt_string(lua_State *L, const char *name, size_t *len)
{
	int t = rawfield(L, name);
	const char *s = t == LUA_TSTRING ? lua_tolstring(L, -1, len) : NULL;
	lua_pop(L, 1); /* s stays referenced by the table */
	if (t == LUA_TNIL)
		return NULL;
	if (t != LUA_TSTRING)
		luaL_error(L, "spawn: %s must be a string (got %s)", name, lua_typename(L, t));
	if (*len == 0)
		luaL_error(L, "spawn: %s must not be empty", name);
	if (strlen(s) != *len)
		luaL_error(L, "spawn: %s contains a NUL byte", name);
	return s;
}

static int opt_function_ref(lua_State *L, const char *name)
{
	int t = rawfield(L, name);
	if (t == LUA_TNIL) {
		lua_pop(L, 1);
		return LUA_NOREF;
	}
	if (t != LUA_TFUNCTION)
		luaL_error(L, "spawn: %s must be a function (got %s)", name, lua_typename(L, t));
	return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Validates args and pushes a userdata holding argv (command first, NULL-terminated). */
static char **push_argv(lua_State *L, const char *command, size_t clen)
{
	int t = rawfield(L, "args");
	lua_Integer n = 0;
	if (t != LUA_TNIL && t != LUA_TTABLE)
		luaL_error(L, "spawn: args must be a table of strings (got %s)", lua_typename(L, t));
	int args = lua_gettop(L);
	if (t == LUA_TTABLE)
		n = (lua_Integer)lua_rawlen(L, args);
	if (n > 1000000)
		luaL_error(L, "spawn: args has %I entries, above 1000000", n);
	size_t bytes = clen + 1;
	for (lua_Integer i = 1; i <= n; i++) {
		int et = lua_rawgeti(L, args, i);
		if (et != LUA_TSTRING)
			luaL_error(L, "spawn: args[%I] must be a string (got %s)", i, lua_typename(L, et));
		size_t len;
		const char *s = lua_tolstring(L, -1, &len);
		if (strlen(s) != len)
			luaL_error(L, "spawn: args[%I] contains a NUL byte", i);
		bytes += len + 1;
		lua_pop(L, 1);
	}
	size_t ptrs = ((size_t)n + 2) * sizeof(char *);
	char **argv = lua_newuserdatauv(L, ptrs + bytes, 0);
	char *w = (char *)argv + ptrs;
	memcpy(w, command, clen + 1);
	argv[0] = w;
	w += clen + 1;
	for (lua_Integer i = 1; i <= n; i++) {
		size_t len;
		lua_rawgeti(L, args, i);
		const char *s = lua_tolstring(L, -1, &len);
		memcpy(w, s, len + 1);
		argv[i] = w;
		w += len + 1;
		lua_pop(L, 1);
	}
	argv[n + 1] = NULL;
	lua_remove(L, args); /* the userdata stays on top */
	return argv;
}

/* Validates env and pushes a userdata holding "KEY=VALUE" strings, or nil (inherit ours). */
static char **push_envp(lua_State *L)
{
	int t = rawfield(L, "env");
	if (t == LUA_TNIL)
		return NULL; /* the nil stays on the stack */
	if (t != LUA_TTABLE)
		luaL_error(L, "spawn: env must be a table of strings (got %s)", lua_typename(L, t));
	int env = lua_gettop(L);
	size_t count = 0, bytes = 0;
	lua_pushnil(L);
	while (lua_next(L, env)) {
		if (lua_type(L, -2) != LUA_TSTRING)
			luaL_error(L, "spawn: env keys must be strings (got a %s key)",
				   luaL_typename(L, -2));
		size_t klen, vlen;
		const char *k = lua_tolstring(L, -2, &klen);
		if (klen == 0 || strlen(k) != klen || strchr(k, '='))
			luaL_error(L, "spawn: env key '%s' must be non-empty, without '=' or NUL", k);
		if (lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "spawn: env.%s must be a string (got %s)", k, luaL_typename(L, -1));
		const char *v = lua_tolstring(L, -1, &vlen);
		if (strlen(v) != vlen)
			luaL_error(L, "spawn: env.%s contains a NUL byte", k);
		count++;
		bytes += klen + vlen + 2;
		lua_pop(L, 1);
	}
	size_t ptrs = (count + 1) * sizeof(char *);
	char **envp = lua_newuserdatauv(L, ptrs + bytes, 0);
	char *w = (char *)envp + ptrs;
	size_t i = 0;
	lua_pushnil(L);
	while (lua_next(L, env)) {
		size_t klen, vlen;
		const char *k = lua_tolstring(L, -2, &klen);
		const char *v = lua_tolstring(L, -1, &vlen);
		envp[i++] = w;
		memcpy(w, k, klen);
		w[klen] = '=';
		memcpy(w + klen + 1, v, vlen + 1);
		w += klen + vlen + 2;
		lua_pop(L, 1);
	}
	envp[i] = NULL;
	lua_remove(L, env);
	return envp;
}

static lua_Integer opt_max_line(lua_State *L)
{
	int t = rawfield(L, "max_line_bytes");
	lua_Integer v = DEFAULT_MAX_LINE;
	if (t != LUA_TNIL) {
		int isint = 0;
		v = lua_tointegerx(L, -1, &isint);
		if (t != LUA_TNUMBER || !isint || v < 1 || v > MAX_MAX_LINE)
			luaL_error(L, "spawn: max_line_bytes must be an integer between 1 and %I",
				   MAX_MAX_LINE);
	}
	lua_pop(L, 1);
	return v;
}

/* The message for a failed uv_spawn: names the cwd when that is what is wrong. */
static int spawn_failed(lua_State *L, const char *command, const char *cwd, int rc)
{
	lua_pushnil(L);
	struct stat st;
	if (cwd && stat(cwd, &st) != 0)
		lua_pushfstring(L, "spawn %s: cwd %s: %s", command, cwd,
				uv_strerror(uv_translate_sys_error(errno)));
	else if (cwd && !S_ISDIR(st.st_mode))
		lua_pushfstring(L, "spawn %s: cwd %s: not a directory", command, cwd);
	else if (cwd && access(cwd, X_OK) != 0)
		lua_pushfstring(L, "spawn %s: cwd %s: %s", command, cwd,
				uv_strerror(uv_translate_sys_error(errno)));
	else
		lua_pushfstring(L, "spawn %s: %s", command, uv_strerror(rc));
	return 2;
}

/* spawn{...} -> process | nil, err */
static int l_spawn(lua_State *L)
{
	ctx_box *box = lua_touserdata(L, lua_upvalueindex(1));
	proc_ctx *ctx = box->ctx;
	if (!ctx)
		return luaL_error(L, "spawn: the state is closing");
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	check_fields(L);
	int t = rawfield(L, "command");
	if (t != LUA_TSTRING)
		return luaL_error(L, "spawn: command must be a non-empty string (got %s)",
				  lua_typename(L, t));
	size_t clen;
	const char *command = lua_tolstring(L, -1, &clen);
	lua_pop(L, 1); /* still referenced by the table */
	if (clen == 0)
		return luaL_error(L, "spawn: command must be a non-empty string");
	if (strlen(command) != clen)
		return luaL_error(L, "spawn: command contains a NUL byte");
	if (clen > MAX_COMMAND_BYTES)
		return luaL_error(L, "spawn: command is %d bytes, above %d", (int)clen,
				  MAX_COMMAND_BYTES);
	size_t cwdlen;
	const char *cwd = opt_string(L, "cwd", &cwdlen);
	lua_Integer max_line = opt_max_line(L);
	for (int i = 0; i < 3; i++) {
		static const char *const cbs[] = { "on_line", "on_stderr", "on_exit" };
		int ct = rawfield(L, cbs[i]);
		lua_pop(L, 1);
		if (ct != LUA_TNIL && ct != LUA_TFUNCTION)
			return luaL_error(L, "spawn: %s must be a function (got %s)", cbs[i],
					  lua_typename(L, ct));
	}
	if (ctx->shut_down) {
		lua_pushnil(L);
		lua_pushfstring(L, "spawn %s: the server is shutting down", command);
		return 2;
	}
	char **argv = push_argv(L, command, clen);   /* index 2 */
	char **envp = push_envp(L);                   /* index 3 */

	pud *u = lua_newuserdatauv(L, sizeof *u, 1);  /* index 4 */
	u->p = NULL;
	u->state = PUD_LIVE;
	luaL_setmetatable(L, PROC_MT);
	lua_pushlstring(L, command, clen);
	lua_setiuservalue(L, -2, 1);
	int line_ref = opt_function_ref(L, "on_line");
	int stderr_ref = opt_function_ref(L, "on_stderr");
	int exit_ref = opt_function_ref(L, "on_exit");

	proc *p = calloc(1, sizeof *p + clen + 1);
	if (!p) {
		luaL_unref(L, LUA_REGISTRYINDEX, line_ref);
		luaL_unref(L, LUA_REGISTRYINDEX, stderr_ref);
		luaL_unref(L, LUA_REGISTRYINDEX, exit_ref);
		return luaL_error(L, "spawn %s: out of memory", command);
	}
	memcpy(p->name, command, clen + 1);
	p->ctx = ctx;
	p->line_ref = p->stderr_ref = p->exit_ref = LUA_NOREF;
	p->lo.max = (size_t)max_line;
	p->le.max = STDERR_LINE_MAX;
	p->le.cut = 1;
	uv_handle_t *pipes[3] = { (uv_handle_t *)&p->in, (uv_handle_t *)&p->out,
				  (uv_handle_t *)&p->err };
	for (int i = 0; i < 3; i++) {
		uv_pipe_init(ctx->loop, (uv_pipe_t *)pipes[i], 0); /* cannot fail on Unix */
		pipes[i]->data = p;
		p->nopen++;
	}
	uv_timer_init(ctx->loop, &p->timer);
	p->timer.data = p;
	p->nopen++;

	uv_stdio_container_t stdio[3];
	stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
	stdio[0].data.stream = (uv_stream_t *)&p->in;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&p->out;
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&p->err;
	uv_process_options_t opt;
	memset(&opt, 0, sizeof opt);
	opt.exit_cb = on_proc_exit;
	opt.file = argv[0];
	opt.args = argv;
	opt.env = envp;
	opt.cwd = cwd;
	opt.stdio_count = 3;
	opt.stdio = stdio;

	cloexec_from_3();
	int rc = uv_spawn(ctx->loop, &p->process, &opt);
	p->process.data = p; /* uv_spawn initialises the handle even when it fails */
	p->nopen++;
	if (rc < 0) {
		if (p->process.pid > 0) {
			/* exec happened but a pipe could not be opened: do not leave the child behind */
			uv_process_kill(&p->process, SIGKILL);
			while (waitpid(p->process.pid, NULL, 0) < 0 && errno == EINTR)
				;
		}
		p->in_state = IN_CLOSED;
		for (int i = 0; i < 3; i++)
			close_h(pipes[i]);
		close_h((uv_handle_t *)&p->timer);
		close_h((uv_handle_t *)&p->process);
		luaL_unref(L, LUA_REGISTRYINDEX, line_ref);
		luaL_unref(L, LUA_REGISTRYINDEX, stderr_ref);
		luaL_unref(L, LUA_REGISTRYINDEX, exit_ref);
		return spawn_failed(L, command, cwd, rc);
	}
	p->pid = p->process.pid;
	p->line_ref = line_ref;
	p->stderr_ref = stderr_ref;
	p->exit_ref = exit_ref;
	link_proc(ctx, p);
	p->ud = u;
	u->p = p;
	for (int i = 1; i < 3; i++) {
		rc = uv_read_start((uv_stream_t *)pipes[i], on_alloc, on_read);
		if (rc < 0) {
			mb_log(MB_LOG_ERROR, "spawn %s (pid %d): reading %s: %s", p->name, p->pid,
			       i == 1 ? "stdout" : "stderr", uv_strerror(rc));
			end_stream(p, i == 1);
		}
	}
	return 1;
}

/* ---- public ---------------------------------------------------------------------------------------- */

static proc_ctx *find_ctx(lua_State *L)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &ctx_key);
	ctx_box *b = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return b ? b->ctx : NULL;
}

void mb_host_proc_open(lua_State *L, uv_loop_t *loop)
{
	static const luaL_Reg methods[] = {
		{ "write", l_write }, { "queued_bytes", l_queued_bytes }, { "pid", l_pid },
		{ "kill", l_kill }, { "close_stdin", l_close_stdin }, { "close", l_close },
		{ "running", l_running }, { NULL, NULL },
	};
	int t = lua_absindex(L, -1);
	mb_host_handle_mt(L, PROC_MT, methods, l_proc_gc, l_tbc_close, l_proc_tostring, "mb.process");
	int made;
	ctx_box *b = mb_host_context(L, &ctx_key, sizeof *b, CTX_MT, l_ctx_gc, &made);
	if (made) {
		proc_ctx *ctx = calloc(1, sizeof *ctx);
		if (!ctx) {
			lua_pop(L, 1);
			lua_pushnil(L); /* no context: a later call tries again */
			lua_rawsetp(L, LUA_REGISTRYINDEX, &ctx_key);
			mb_log(MB_LOG_ERROR, "spawn: out of memory; mb.spawn is not available");
			return;
		}
		ctx->loop = loop;
		lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
		ctx->L = lua_tothread(L, -1);
		lua_pop(L, 1);
		b->ctx = ctx;
	}
	lua_pushcclosure(L, l_spawn, 1);
	lua_setfield(L, t, "spawn");
}

void mb_host_proc_shutdown(lua_State *L, int grace_ms)
{
	proc_ctx *ctx = find_ctx(L);
	if (!ctx)
		return;
	ctx->shut_down = 1;
	for (proc *p = ctx->live; p; p = p->next) {
		detach(p, PUD_SHUT_DOWN);
		stop_proc(p, grace_ms > 0 ? (uint64_t)grace_ms : 0);
	}
}

int mb_host_proc_live(lua_State *L)
{
	proc_ctx *ctx = find_ctx(L);
	return ctx ? ctx->nlive : 0;
}
