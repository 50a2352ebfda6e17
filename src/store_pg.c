/* store_pg.c - the store on PostgreSQL: libpq connections driven from the libuv loop, and the
 * `mb.db` functions of the host Lua state on them (store_pg.h says what the caller sees).
 *
 * One statement is a pg_req, a full userdata on the stack of the coroutine that asked for it (so
 * it lives exactly as long as that call: its __gc detaches it from a connection or the wait
 * queue when the host state is closed under it). It is sent on the coroutine's pinned
 * connection (inside tx), else on a free one, else queued; the coroutine yields with the req as
 * its continuation context; the poll callback collects the results, hands the connection to the
 * next queued statement and resumes the coroutine through the host's hook; the continuation
 * turns the result into Lua values. Callers that cannot yield use the blocking connection
 * (s->sync) with PQexecParams.
 *
 * Results are read in text form: int2/int4/int8/oid become integers, float4/float8 floats,
 * numeric an integer when it has no fraction, bool 1 or 0, bytea its raw bytes, NULL an absent
 * field, anything else its text. Strings are sent in binary form (their exact bytes, so a BYTEA
 * column gets them unchanged), numbers as text.
 */
#include "store_pg.h"

#include <errno.h>
#include <lauxlib.h>
#include "pq_load.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json.h"
#include "log.h"
#include "store.h"

#define MAX_PARAMS 32767
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define MIGRATE_LOCK "7243911040" /* pg_advisory_lock key of the migrations */

enum { K_QUERY, K_ROW, K_RUN, K_EXEC, K_BEGIN, K_COMMIT, K_ROLLBACK };

typedef struct pg_conn pg_conn;

typedef struct pg_req {
	struct pg_req *next;    /* in the wait queue */
	mb_pg *s;
	lua_State *L;
	int ref;                /* registry reference to L while it waits: nothing else may hold
	                         * the coroutine (the host keeps only a weak set of them) */
	int kind;
	int queued;
	int done, failed;
	pg_conn *conn;          /* running on it */
	char *sql;              /* the text sent (translated), malloc'd */
	int nparams;
	const char **values;
	int *lengths, *formats;
	char *numbuf;           /* text of number parameters */
	PGresult *res;          /* the result that carries rows or the command tag */
	char err[1024];
} pg_req;

struct pg_conn {
	mb_pg *s;
	PGconn *c;
	uv_poll_t poll;
	int poll_open;          /* poll handle initialised and not closed */
	int down;               /* broken: reopening on the thread pool */
	int listen;             /* the LISTEN connection */
	pg_req *cur;
	lua_State *pinned;      /* coroutine in a transaction on it */
	int depth;              /* that transaction's nesting */
	int tx_lost;            /* the connection broke inside the pinned transaction */
	uint64_t backoff_ms;
	uv_timer_t timer;
	int timer_open;
	uv_work_t work;
	int working;
	PGconn *fresh;          /* made by the thread pool */
	char werr[256];
};

struct mb_pg {
	uv_loop_t *loop;
	char *conninfo;
	char label[256];        /* what messages call it: "PostgreSQL user@host/db" (no password) */
	int64_t timeout_ms;
	int n;
	pg_conn *conns;
	pg_conn sync;           /* blocking: callers that cannot yield, migrations */
	pg_conn lconn;          /* LISTEN, opened at the first listen() */
	pg_req *wait_head, *wait_tail;
	mb_pg_host host;
	mb_pg_stats st;
	char last_err[256];
	lua_State *L;           /* the host's main state (listen callbacks) */
	int handles;            /* closing handles not yet called back */
	int in_call;            /* inside a Lua call into the store: resumes are deferred */
	pg_req *ready_head, *ready_tail; /* finished while in_call: resumed by the idle handle */
	int drain_pending;      /* notifications to deliver from the idle handle */
	uv_idle_t idle;
	int idle_open;
	int listen_ref;         /* registry: channel -> function */
	int pauses;             /* coroutines waiting in _pause */
	int closing;
};

static const char TX_DENIED[] = "transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE) "
				"is not allowed in SQL; use mb.db.tx";

/* ---- connecting ------------------------------------------------------------------------------ */

static void on_notice(void *arg, const char *message);

/* The first line of libpq's message, without its trailing newline. */
static void pq_msg(char *out, size_t len, const char *msg)
{
	snprintf(out, len, "%s", msg && *msg ? msg : "unknown error");
	out[strcspn(out, "\n")] = 0;
}

static void make_label(mb_pg *s)
{
	char *e = NULL;
	PQconninfoOption *opts = PQconninfoParse(s->conninfo, &e);
	PQfreemem(e);
	const char *host = NULL, *port = NULL, *db = NULL, *user = NULL;
	for (PQconninfoOption *o = opts; o && o->keyword; o++) {
		if (!o->val || !*o->val)
			continue;
		if (!strcmp(o->keyword, "host")) host = o->val;
		else if (!strcmp(o->keyword, "port")) port = o->val;
		else if (!strcmp(o->keyword, "dbname")) db = o->val;
		else if (!strcmp(o->keyword, "user")) user = o->val;
	}
	snprintf(s->label, sizeof s->label, "PostgreSQL %s%s%s%s%s/%s", user ? user : "",
		 user ? "@" : "", host ? host : "localhost", port ? ":" : "", port ? port : "",
		 db ? db : (user ? user : ""));
	PQconninfoFree(opts);
}

/* The blocking connection waits at most this long for a row lock: the lock may be held by a
 * transaction of a request that cannot go on while the loop waits (it needs the loop to send its
 * next statement), so a longer wait would only stall the server until statement_timeout. */
#define SYNC_LOCK_TIMEOUT_MS 1000

/* A connection with our session settings, or NULL with err set. Thread-safe (libpq is).
 * blocking: the connection of callers that cannot yield (a short lock_timeout). */
static PGconn *connect_one(const char *conninfo, int64_t timeout_ms, int blocking, char *err,
			   size_t errlen)
{
	char ct[32];
	snprintf(ct, sizeof ct, "%lld", (long long)((timeout_ms + 999) / 1000));
	const char *keys[] = { "connect_timeout", "application_name", "client_encoding", "dbname", NULL };
	const char *vals[] = { ct, "moonbox", "UTF8", conninfo, NULL };
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		pq_msg(err, errlen, PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	PQsetNoticeProcessor(c, on_notice, NULL);
	char set[200];
	snprintf(set, sizeof set, "SET statement_timeout = %lld; SET idle_in_transaction_session_timeout"
		 " = %lld; SET lock_timeout = %lld", (long long)timeout_ms, (long long)timeout_ms * 6,
		 blocking ? (long long)(timeout_ms < SYNC_LOCK_TIMEOUT_MS ? timeout_ms : SYNC_LOCK_TIMEOUT_MS)
			  : 0LL);
	PGresult *r = PQexec(c, set);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		pq_msg(err, errlen, PQerrorMessage(c));
		PQclear(r);
		PQfinish(c);
		return NULL;
	}
	PQclear(r);
	return c;
}

static void on_poll(uv_poll_t *p, int status, int events);
static void maybe_free(mb_pg *s);

/* PostgreSQL's NOTICEs (to_tsquery on a word it drops, ...) go to the debug log, not to stderr
 * as libpq's default does: text from a request must not be able to fill the log. */
static void on_notice(void *arg, const char *message)
{
	(void)arg;
	char m[256];
	pq_msg(m, sizeof m, message);
	mb_log(MB_LOG_DEBUG, "store: PostgreSQL notice: %s", m);
}
static void conn_broken(pg_conn *cn, const char *why);
static void dispatch(mb_pg *s);

/* Takes a fresh connection into use: non-blocking, watched by the loop. */
static int conn_attach(pg_conn *cn, PGconn *c)
{
	cn->c = c;
	cn->down = 0;
	cn->tx_lost = cn->pinned != NULL;
	if (PQsetnonblocking(c, 1) != 0 || uv_poll_init(cn->s->loop, &cn->poll, PQsocket(c)) != 0) {
		PQfinish(c);
		cn->c = NULL;
		cn->down = 1;
		return -1;
	}
	cn->poll.data = cn;
	cn->poll_open = 1;
	uv_poll_start(&cn->poll, UV_READABLE, on_poll);
	uv_unref((uv_handle_t *)&cn->poll); /* an idle connection does not keep the loop running */
	return 0;
}

static void reopen_work(uv_work_t *w)
{
	pg_conn *cn = w->data;
	cn->fresh = connect_one(cn->s->conninfo, cn->s->timeout_ms, 0, cn->werr, sizeof cn->werr);
}

static void schedule_reopen(pg_conn *cn);
static void resubscribe(mb_pg *s);

static void reopen_done(uv_work_t *w, int status)
{
	pg_conn *cn = w->data;
	mb_pg *s = cn->s;
	cn->working = 0;
	if (s->closing || status != 0) {
		if (cn->fresh)
			PQfinish(cn->fresh);
		cn->fresh = NULL;
		maybe_free(s);
		return;
	}
	if (!cn->fresh || conn_attach(cn, cn->fresh) != 0) {
		if (!cn->fresh)
			snprintf(s->last_err, sizeof s->last_err, "%s", cn->werr);
		cn->fresh = NULL;
		schedule_reopen(cn);
		dispatch(s); /* statements waiting while every connection is down fail now */
		return;
	}
	cn->fresh = NULL;
	cn->backoff_ms = 0;
	s->st.reconnects++;
	s->st.down--;
	s->st.connections++;
	mb_log(MB_LOG_NOTICE, "store: %s: connection %s again", s->label,
	       cn->listen ? "for notifications open" : "open");
	if (cn->listen)
		resubscribe(s);
	dispatch(s);
}

static void on_reopen_timer(uv_timer_t *t)
{
	pg_conn *cn = t->data;
	if (cn->s->closing || cn->working)
		return;
	cn->working = 1;
	cn->work.data = cn;
	if (uv_queue_work(cn->s->loop, &cn->work, reopen_work, reopen_done) != 0)
		cn->working = 0;
}

static void schedule_reopen(pg_conn *cn)
{
	if (cn->s->closing)
		return;
	cn->backoff_ms = cn->backoff_ms ? cn->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (cn->backoff_ms > BACKOFF_MAX_MS)
		cn->backoff_ms = BACKOFF_MAX_MS;
	if (!cn->timer_open) {
		uv_timer_init(cn->s->loop, &cn->timer);
		cn->timer.data = cn;
		cn->timer_open = 1;
	}
	uv_timer_start(&cn->timer, on_reopen_timer, cn->backoff_ms, 0);
	uv_unref((uv_handle_t *)&cn->timer);
	cn->timer.data = cn;
}

static void on_poll_closed(uv_handle_t *h)
{
	pg_conn *cn = h->data;
	mb_pg *s = cn->s;
	if (cn->c) {
		PQfinish(cn->c);
		cn->c = NULL;
	}
	s->handles--;
	if (!s->closing)
		schedule_reopen(cn);
	maybe_free(s);
}

/* ---- SQL text --------------------------------------------------------------------------------- */

static int is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Skips white space and comments from p; returns where the next token starts. */
static const char *skip_space(const char *p, const char *end)
{
	for (;;) {
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f'))
			p++;
		if (end - p >= 2 && p[0] == '-' && p[1] == '-') {
			while (p < end && *p != '\n')
				p++;
		} else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
			/* PostgreSQL's block comments nest (a comment opened inside one needs its own end) */
			const char *q = p + 2;
			int depth = 1;
			while (depth > 0 && end - q >= 2) {
				if (q[0] == '*' && q[1] == '/')
					depth--, q += 2;
				else if (q[0] == '/' && q[1] == '*')
					depth++, q += 2;
				else
					q++;
			}
			p = depth > 0 ? end : q;
		} else {
			return p;
		}
	}
}

/* 1 when the statement starting at p begins with a transaction-control keyword. */
static int starts_tx_control(const char *p, const char *end)
{
	static const char *const words[] = { "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE",
					     "START", "END", "ABORT", "PREPARE", NULL };
	p = skip_space(p, end);
	size_t n = 0;
	while (p + n < end && is_word(p[n]))
		n++;
	for (int i = 0; words[i]; i++)
		if (strlen(words[i]) == n && strncasecmp(p, words[i], n) == 0)
			return 1;
	return 0;
}

/* Copies sql into a new string with `?` and `?NNN` turned into $n, outside quoted text, quoted
 * identifiers, dollar-quoted text and comments; counts the parameters; refuses transaction
 * control at the start of any statement. Returns NULL with msg set. */
char *mb_pg_translate(const char *sql, size_t len, int *nparams, char *msg, size_t msglen)
{
	const char *p = sql, *end = sql + len;
	char *out = malloc(len * 6 + 1), *o = out;
	int next = 0, max = 0, stmt_start = 1;
	if (!out) {
		snprintf(msg, msglen, "out of memory");
		return NULL;
	}
	while (p < end) {
		if (stmt_start) {
			if (starts_tx_control(p, end))
				goto tx_denied;
			stmt_start = 0;
		}
		char c = *p;
		if (c == '\'' || c == '"') {
			/* E'...' (escape string): a backslash escapes the next byte, `\'` included */
			int esc = c == '\'' && p > sql && (p[-1] == 'E' || p[-1] == 'e') &&
				  (p - 1 == sql || !is_word(p[-2]));
			const char *q = p + 1;
			for (;;) {
				if (q >= end)
					break;
				if (esc && *q == '\\') {
					q += q + 1 < end ? 2 : 1;
					continue;
				}
				if (*q == c) {
					if (q + 1 < end && q[1] == c) {
						q += 2;
						continue;
					}
					q++;
					break;
				}
				q++;
			}
			memcpy(o, p, (size_t)(q - p));
			o += q - p;
			p = q;
		} else if ((c == '-' && p + 1 < end && p[1] == '-') || (c == '/' && p + 1 < end && p[1] == '*')) {
			const char *q = skip_space(p, end);
			memcpy(o, p, (size_t)(q - p));
			o += q - p;
			p = q;
		} else if (c == '$' && (p == sql || !is_word(p[-1])) && p + 1 < end &&
			   (p[1] == '$' || (is_word(p[1]) && !(p[1] >= '0' && p[1] <= '9')))) {
			/* $tag$ ... $tag$ */
			const char *t = p + 1;
			while (t < end && is_word(*t))
				t++;
			if (t < end && *t == '$') {
				size_t tl = (size_t)(t + 1 - p);
				const char *q = t + 1;
				while (q + tl <= end && memcmp(q, p, tl) != 0)
					q++;
				q = q + tl <= end ? q + tl : end;
				memcpy(o, p, (size_t)(q - p));
				o += q - p;
				p = q;
			} else {
				*o++ = *p++;
			}
		} else if (c == '?') {
			int idx;
			p++;
			if (p < end && *p >= '0' && *p <= '9') {
				long v = 0;
				while (p < end && *p >= '0' && *p <= '9' && v <= MAX_PARAMS)
					v = v * 10 + (*p++ - '0');
				if (v < 1 || v > MAX_PARAMS) {
					snprintf(msg, msglen, "parameter number ?%ld is out of range", v);
					free(out);
					return NULL;
				}
				idx = (int)v;
			} else {
				idx = max + 1;
			}
			if (idx > MAX_PARAMS) {
				snprintf(msg, msglen, "more than %d parameters", MAX_PARAMS);
				free(out);
				return NULL;
			}
			if (idx > max)
				max = idx;
			o += sprintf(o, "$%d", idx);
			next = idx;
		} else if (c == ';') {
			*o++ = *p++;
			stmt_start = 1;
		} else {
			*o++ = *p++;
		}
	}
	(void)next;
	*o = 0;
	*nparams = max;
	return out;
tx_denied:
	snprintf(msg, msglen, "%s", TX_DENIED);
	free(out);
	return NULL;
}

/* ---- results to Lua --------------------------------------------------------------------------- */

static void push_value(lua_State *L, const PGresult *r, int row, int col)
{
	const char *v = PQgetvalue(r, row, col);
	int n = PQgetlength(r, row, col);
	char *e;
	switch (PQftype(r, col)) {
	case 20: case 21: case 23: case 26: /* int8 int2 int4 oid */
		errno = 0;
		long long i = strtoll(v, &e, 10);
		if (errno == 0 && *e == 0)
			lua_pushinteger(L, (lua_Integer)i);
		else
			lua_pushlstring(L, v, (size_t)n);
		return;
	case 700: case 701: /* float4 float8 */
		lua_pushnumber(L, (lua_Number)strtod(v, NULL));
		return;
	case 1700: /* numeric */
		if (!strpbrk(v, ".eEN")) {
			errno = 0;
			long long i = strtoll(v, &e, 10);
			if (errno == 0 && *e == 0) {
				lua_pushinteger(L, (lua_Integer)i);
				return;
			}
		}
		lua_pushnumber(L, (lua_Number)strtod(v, NULL));
		return;
	case 16: /* bool */
		lua_pushinteger(L, v[0] == 't');
		return;
	case 17: { /* bytea */
		size_t bn = 0;
		unsigned char *b = PQunescapeBytea((const unsigned char *)v, &bn);
		if (!b)
			luaL_error(L, "store: out of memory");
		lua_pushlstring(L, (const char *)b, bn);
		PQfreemem(b);
		return;
	}
	default:
		lua_pushlstring(L, v, (size_t)n);
	}
}

static void push_row(lua_State *L, const PGresult *r, int row)
{
	int nc = PQnfields(r);
	lua_createtable(L, 0, nc);
	for (int c = 0; c < nc; c++) {
		if (PQgetisnull(r, row, c))
			continue;
		push_value(L, r, row, c);
		lua_setfield(L, -2, PQfname(r, c));
	}
}

/* ---- requests --------------------------------------------------------------------------------- */

static mb_pg *store_of(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

static void req_unqueue(pg_req *r)
{
	if (!r->queued)
		return;
	mb_pg *s = r->s;
	pg_req **pp = &s->wait_head, *prev = NULL;
	while (*pp && *pp != r) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (*pp) {
		*pp = r->next;
		if (s->wait_tail == r)
			s->wait_tail = prev;
	}
	r->queued = 0;
	r->next = NULL;
}

static void req_clear(pg_req *r)
{
	req_unqueue(r);
	if (r->conn && r->conn->cur == r)
		r->conn->cur = NULL; /* its results are read and dropped */
	r->conn = NULL;
	if (r->res)
		PQclear(r->res);
	r->res = NULL;
	free(r->sql);
	r->sql = NULL;
	free(r->values); /* one block: values, lengths, formats, numbuf */
	r->values = NULL;
}

static int req_gc(lua_State *L)
{
	req_clear(luaL_checkudata(L, 1, "mb.pg_req"));
	return 0;
}

static void req_fail(pg_req *r, const char *fmt, const char *what)
{
	if (r->failed)
		return;
	r->failed = 1;
	snprintf(r->err, sizeof r->err, fmt, what);
}

/* The error of a failed result: "message (SQLSTATE xxxxx)". */
static void result_error(pg_req *r, const PGresult *res, PGconn *c)
{
	char m[400];
	const char *prim = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	pq_msg(m, sizeof m, prim ? prim : PQerrorMessage(c));
	if (r->failed)
		return;
	r->failed = 1;
	if (state)
		snprintf(r->err, sizeof r->err, "%s (SQLSTATE %s)", m, state);
	else
		snprintf(r->err, sizeof r->err, "%s", m);
}

/* A PGresult for r: the one to keep is the last with rows or a command tag. */
static void absorb(pg_req *r, PGresult *res, PGconn *c)
{
	ExecStatusType st = PQresultStatus(res);
	if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
		if (st != PGRES_NONFATAL_ERROR)
			result_error(r, res, c);
		PQclear(res);
		return;
	}
	if (r->res)
		PQclear(r->res);
	r->res = res;
}

static int send_req(pg_conn *cn, pg_req *r)
{
	int ok;
	if (r->kind == K_EXEC || r->kind >= K_BEGIN)
		ok = PQsendQuery(cn->c, r->sql);
	else
		ok = PQsendQueryParams(cn->c, r->sql, r->nparams, NULL, r->values, r->lengths, r->formats, 0);
	if (!ok)
		return -1;
	int f = PQflush(cn->c);
	if (f < 0)
		return -1;
	cn->cur = r;
	r->conn = cn;
	if (f == 1) /* else it stays watched for reading: uv_poll_start again costs two epoll_ctl */
		uv_poll_start(&cn->poll, UV_READABLE | UV_WRITABLE, on_poll);
	uv_ref((uv_handle_t *)&cn->poll); /* a statement in flight does: its answer is awaited */
	return 0;
}

static void on_idle(uv_idle_t *h);

/* Resumes r's coroutine, which waits for it - never from inside a Lua call into the store
 * (a coroutine resumed while another runs would corrupt the state): then it is queued for the
 * idle handle. A req whose coroutine has not yielded yet (failed at once) is only marked done. */
static void resume_req(pg_req *r)
{
	r->done = 1;
	r->conn = NULL;
	mb_pg *s = r->s;
	if (s->closing || r->ref == LUA_NOREF)
		return;
	if (s->in_call) {
		r->next = NULL;
		if (s->ready_tail)
			s->ready_tail->next = r;
		else
			s->ready_head = r;
		s->ready_tail = r;
		uv_idle_start(&s->idle, on_idle);
		return;
	}
	/* the reference holds the coroutine until it is back: while it runs it may resume another
	 * coroutine, and Lua's collector keeps only the running one - an unreferenced resumer would
	 * be freed under it (a crash in lua_checkstack / lua_yieldk when control came back) */
	lua_State *co = r->L;
	int ref = r->ref;
	r->ref = LUA_NOREF;
	if (s->host.resume)
		s->host.resume(s->host.ud, co, 0); /* r may be gone after this */
	if (!s->closing)
		luaL_unref(s->L, LUA_REGISTRYINDEX, ref);
}

static void drain_notifies(pg_conn *cn);

static void on_idle(uv_idle_t *h)
{
	mb_pg *s = h->data;
	uv_idle_stop(&s->idle);
	while (s->ready_head && !s->closing) {
		pg_req *r = s->ready_head;
		s->ready_head = r->next;
		if (!s->ready_head)
			s->ready_tail = NULL;
		r->next = NULL;
		resume_req(r);
	}
	if (s->drain_pending && !s->closing && s->lconn.c) {
		s->drain_pending = 0;
		drain_notifies(&s->lconn);
	}
}

static int any_up(mb_pg *s)
{
	for (int i = 0; i < s->n; i++)
		if (!s->conns[i].down)
			return 1;
	return 0;
}

static pg_conn *free_conn(mb_pg *s)
{
	for (int i = 0; i < s->n; i++) {
		pg_conn *cn = &s->conns[i];
		if (!cn->down && !cn->cur && !cn->pinned)
			return cn;
	}
	return NULL;
}

/* Hands free connections to queued statements; fails them all when every connection is down. */
static void dispatch(mb_pg *s)
{
	while (s->wait_head) {
		pg_req *r = s->wait_head;
		pg_conn *cn = NULL;
		if (!any_up(s)) {
			req_unqueue(r);
			r->failed = 1;
			snprintf(r->err, sizeof r->err, "PostgreSQL is unreachable (%s); the request can "
				 "be retried when it is back", s->last_err);
			s->st.failed++;
			resume_req(r);
			continue;
		}
		cn = free_conn(s);
		if (!cn)
			return;
		req_unqueue(r);
		if (send_req(cn, r) != 0) {
			char m[256];
			pq_msg(m, sizeof m, PQerrorMessage(cn->c));
			snprintf(r->err, sizeof r->err, "cannot send to %s: %s", s->label, m);
			r->failed = 1;
			s->st.failed++;
			conn_broken(cn, m);
			resume_req(r);
		}
	}
}

/* The transaction bookkeeping of a statement that completed on cn. */
static void settle(pg_conn *cn, pg_req *r)
{
	cn->cur = NULL;
	r->conn = NULL;
	if (cn->poll_open)
		uv_unref((uv_handle_t *)&cn->poll);
	if (r->kind == K_BEGIN && !r->failed) {
		cn->pinned = r->L;
		cn->depth++;
	} else if (r->kind == K_COMMIT || r->kind == K_ROLLBACK) {
		/* a failed COMMIT or ROLLBACK ends the transaction (or savepoint) too */
		if (--cn->depth <= 0) {
			cn->depth = 0;
			cn->pinned = NULL;
			cn->tx_lost = 0;
		}
		if (r->kind == K_COMMIT && !r->failed && r->res &&
		    strcmp(PQcmdStatus(r->res), "ROLLBACK") == 0)
			req_fail(r, "%s", "the transaction was rolled back by PostgreSQL after an error "
				 "inside it that was caught; nothing was committed");
	}
	if (r->failed)
		r->s->st.failed++;
}

/* The statement on cn is complete: bookkeeping, the next statement, resume its coroutine. */
static void finish(pg_conn *cn)
{
	pg_req *r = cn->cur;
	if (!r)
		return;
	settle(cn, r);
	dispatch(r->s);
	resume_req(r);
}

static void drain_notifies(pg_conn *cn);

static void on_poll(uv_poll_t *p, int status, int events)
{
	pg_conn *cn = p->data;
	if (!cn->c)
		return;
	if (status < 0) {
		conn_broken(cn, uv_strerror(status));
		return;
	}
	if (events & UV_WRITABLE) {
		int f = PQflush(cn->c);
		if (f < 0) {
			conn_broken(cn, PQerrorMessage(cn->c));
			return;
		}
		if (f == 0)
			uv_poll_start(&cn->poll, UV_READABLE, on_poll);
	}
	if (!(events & UV_READABLE))
		return;
	if (!PQconsumeInput(cn->c)) {
		conn_broken(cn, PQerrorMessage(cn->c));
		return;
	}
	if (cn->listen)
		drain_notifies(cn);
	while (!PQisBusy(cn->c)) {
		PGresult *res = PQgetResult(cn->c);
		if (!res) {
			finish(cn);
			break;
		}
		if (cn->cur)
			absorb(cn->cur, res, cn->c);
		else
			PQclear(res); /* of a statement whose caller went away */
	}
	if (PQstatus(cn->c) == CONNECTION_BAD)
		conn_broken(cn, PQerrorMessage(cn->c));
}

static void conn_broken(pg_conn *cn, const char *why)
{
	mb_pg *s = cn->s;
	if (cn->down)
		return;
	char m[256];
	pq_msg(m, sizeof m, why);
	snprintf(s->last_err, sizeof s->last_err, "%s", m);
	mb_log(MB_LOG_WARNING, "store: %s: connection lost (%s); reopening", s->label, m);
	cn->down = 1;
	s->st.down++;
	s->st.connections--;
	if (cn->pinned)
		cn->tx_lost = 1;
	pg_req *r = cn->cur;
	cn->cur = NULL;
	if (r) {
		r->conn = NULL;
		if (!r->failed) {
			r->failed = 1;
			snprintf(r->err, sizeof r->err, "the connection to %s broke while the statement "
				 "ran (%s); whether it took effect is unknown", s->label, m);
		}
		s->st.failed++;
	}
	if (cn->poll_open) {
		cn->poll_open = 0;
		s->handles++;
		uv_close((uv_handle_t *)&cn->poll, on_poll_closed);
	} else {
		if (cn->c)
			PQfinish(cn->c);
		cn->c = NULL;
		schedule_reopen(cn);
	}
	dispatch(s);
	if (r)
		resume_req(r);
}

/* ---- listen ----------------------------------------------------------------------------------- */

static void notify_one(mb_pg *s, const char *channel, const char *payload)
{
	lua_State *L = s->L;
	if (!L || !s->host.spawn)
		return;
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->listen_ref);
	if (lua_getfield(L, -1, channel) != LUA_TFUNCTION) {
		lua_pop(L, 2);
		return;
	}
	lua_State *co = s->host.spawn(s->host.ud); /* pushed on L */
	lua_pushvalue(L, -2);
	lua_xmove(L, co, 1);
	lua_pushstring(co, channel);
	if (payload)
		lua_pushstring(co, payload);
	else
		lua_pushnil(co);
	s->host.resume(s->host.ud, co, 2);
	lua_pop(L, 3);
}

static void drain_notifies(pg_conn *cn)
{
	PGnotify *n;
	while ((n = PQnotifies(cn->c)) != NULL) {
		notify_one(cn->s, n->relname, n->extra);
		PQfreemem(n);
	}
}

/* LISTEN channel, waiting for the answer (PQexec blocks even on a non-blocking connection): one
 * round trip, at start or after a reconnect. Two LISTENs sent without waiting would have the
 * second refused ("another command is already in progress"). Notifications that arrived
 * meanwhile are kept by libpq for the next drain. */
static int send_listen(mb_pg *s, const char *channel)
{
	char *id = PQescapeIdentifier(s->lconn.c, channel, strlen(channel));
	if (!id)
		return -1;
	char *sql = malloc(strlen(id) + 8);
	int ok = 0;
	if (sql) {
		sprintf(sql, "LISTEN %s", id);
		PGresult *r = PQexec(s->lconn.c, sql);
		ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
	}
	free(sql);
	PQfreemem(id);
	return ok ? 0 : -1;
}

/* After the LISTEN connection was reopened: LISTEN again, then tell each listener that
 * notifications may have been missed (payload nil). */
static void resubscribe(mb_pg *s)
{
	lua_State *L = s->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->listen_ref);
	lua_pushnil(L);
	while (lua_next(L, -2)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) == LUA_TSTRING && send_listen(s, lua_tostring(L, -1)) != 0) {
			lua_pop(L, 2);
			conn_broken(&s->lconn, PQerrorMessage(s->lconn.c));
			return;
		}
	}
	lua_pushnil(L);
	while (lua_next(L, -2)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) == LUA_TSTRING) {
			lua_pushvalue(L, -1);
			char ch[128];
			snprintf(ch, sizeof ch, "%s", lua_tostring(L, -1));
			lua_pop(L, 1);
			notify_one(s, ch, NULL);
		}
	}
	lua_pop(L, 1);
}

/* listen(channel, fn) */
static int l_listen(lua_State *L)
{
	mb_pg *s = store_of(L);
	size_t n;
	const char *ch = luaL_checklstring(L, 1, &n);
	luaL_checktype(L, 2, LUA_TFUNCTION);
	if (n == 0 || n > 63 || strlen(ch) != n)
		return luaL_error(L, "store: listen: a channel name is 1 to 63 bytes");
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->listen_ref);
	lua_pushvalue(L, 1);
	lua_pushvalue(L, 2);
	lua_rawset(L, -3);
	lua_pop(L, 1);
	if (!s->lconn.c && !s->lconn.down) {
		char err[256];
		PGconn *c = connect_one(s->conninfo, s->timeout_ms, 0, err, sizeof err);
		if (!c)
			return luaL_error(L, "store: %s: cannot open the connection for notifications: %s",
					  s->label, err);
		s->lconn.s = s;
		s->lconn.listen = 1;
		if (conn_attach(&s->lconn, c) != 0)
			return luaL_error(L, "store: %s: cannot watch the connection for notifications",
					  s->label);
		s->st.connections++;
	}
	if (s->lconn.c && !s->lconn.down) {
		s->in_call++;
		if (send_listen(s, ch) != 0)
			conn_broken(&s->lconn, PQerrorMessage(s->lconn.c));
		s->in_call--;
		s->drain_pending = 1; /* what arrived meanwhile, delivered from the loop */
		uv_idle_start(&s->idle, on_idle);
	}
	return 0;
}

/* ---- the Lua functions -------------------------------------------------------------------------- */

static pg_conn *pinned_of(mb_pg *s, lua_State *L)
{
	for (int i = 0; i < s->n; i++)
		if (s->conns[i].pinned == L)
			return &s->conns[i];
	if (s->sync.pinned == L)
		return &s->sync;
	return NULL;
}

/* Builds the req for the call at L's stack (argument 1 the SQL, 2.. the values). */
static pg_req *new_req(lua_State *L, mb_pg *s, int kind, const char *fixed_sql)
{
	char msg[512];
	int top = lua_gettop(L);
	pg_req *r = lua_newuserdatauv(L, sizeof *r, 0);
	memset(r, 0, sizeof *r);
	r->s = s;
	r->L = L;
	r->ref = LUA_NOREF;
	r->kind = kind;
	luaL_setmetatable(L, "mb.pg_req");
	if (fixed_sql) {
		r->sql = strdup(fixed_sql);
		if (!r->sql)
			luaL_error(L, "store: out of memory");
		return r;
	}
	size_t len;
	const char *sql = luaL_checklstring(L, 1, &len);
	if (strlen(sql) != len)
		luaL_error(L, "store: the SQL text contains a NUL byte (%s)", s->label);
	r->sql = mb_pg_translate(sql, len, &r->nparams, msg, sizeof msg);
	if (!r->sql)
		luaL_error(L, "store: %s (%s)", msg, s->label);
	int nargs = top - 1;
	if (kind == K_EXEC) {
		if (r->nparams) /* exec takes no values: a `?` there is text for PostgreSQL to refuse */
			r->nparams = 0;
		return r;
	}
	if (nargs != r->nparams)
		luaL_error(L, "store: the statement has %d parameter%s but %d value%s given (%s)",
			   r->nparams, r->nparams == 1 ? "" : "s", nargs, nargs == 1 ? " was" : "s were",
			   s->label);
	int np = r->nparams;
	if (np == 0)
		return r;
	size_t block = (size_t)np * (sizeof(char *) + 2 * sizeof(int) + 32);
	char *b = malloc(block);
	if (!b)
		luaL_error(L, "store: out of memory");
	r->values = (const char **)b;
	r->lengths = (int *)(b + (size_t)np * sizeof(char *));
	r->formats = r->lengths + np;
	r->numbuf = (char *)(r->formats + np);
	for (int i = 0; i < np; i++) {
		int idx = i + 2;
		char *nb = r->numbuf + (size_t)i * 32;
		r->formats[i] = 0;
		r->lengths[i] = 0;
		switch (lua_type(L, idx)) {
		case LUA_TNIL:
			r->values[i] = NULL;
			break;
		case LUA_TBOOLEAN:
			strcpy(nb, lua_toboolean(L, idx) ? "1" : "0");
			r->values[i] = nb;
			break;
		case LUA_TNUMBER:
			if (lua_isinteger(L, idx)) {
				snprintf(nb, 32, "%lld", (long long)lua_tointeger(L, idx));
			} else {
				double d = (double)lua_tonumber(L, idx);
				if (d != d)
					strcpy(nb, "NaN");
				else if (d > 1e308 * 10)
					strcpy(nb, "Infinity");
				else if (d < -1e308 * 10)
					strcpy(nb, "-Infinity");
				else
					snprintf(nb, 32, "%.17g", d);
			}
			r->values[i] = nb;
			break;
		case LUA_TSTRING: {
			size_t n;
			r->values[i] = lua_tolstring(L, idx, &n); /* stays on the stack for the call */
			if (n > 0x7fffffff)
				luaL_error(L, "store: parameter %d is too long", i + 1);
			r->lengths[i] = (int)n;
			r->formats[i] = 1;
			break;
		}
		case LUA_TLIGHTUSERDATA:
			if (lua_touserdata(L, idx) == NULL) {
				r->values[i] = NULL;
				break;
			}
			/* fall through */
		default:
			luaL_error(L, "store: parameter %d is a %s; expected nil, boolean, number or string",
				   i + 1, luaL_typename(L, idx));
		}
	}
	return r;
}

/* Turns a finished req into the call's results (or raises). */
static int deliver(lua_State *L, pg_req *r)
{
	if (r->failed) {
		lua_pushfstring(L, "store: %s (%s)", r->err, r->s->label);
		req_clear(r);
		return lua_error(L);
	}
	PGresult *res = r->res;
	int n = 0;
	switch (r->kind) {
	case K_QUERY: {
		int rows = res ? PQntuples(res) : 0;
		lua_createtable(L, rows, 0);
		for (int i = 0; i < rows; i++) {
			push_row(L, res, i);
			lua_rawseti(L, -2, i + 1);
		}
		mb_json_mark_array(L, -1);
		n = 1;
		break;
	}
	case K_ROW:
		if (res && PQntuples(res) > 0)
			push_row(L, res, 0);
		else
			lua_pushnil(L);
		n = 1;
		break;
	case K_RUN: {
		const char *t = res ? PQcmdTuples(res) : "";
		lua_pushinteger(L, (lua_Integer)strtoll(t, NULL, 10));
		if (res && PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0))
			push_value(L, res, 0, 0);
		else
			lua_pushnil(L);
		n = 2;
		break;
	}
	default:
		break;
	}
	req_clear(r);
	return n;
}

static int k_stmt(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	pg_req *r = (pg_req *)ctx;
	if (!r->done) /* resumed by somebody else meanwhile: keep waiting */
		return lua_yieldk(L, 0, ctx, k_stmt);
	return deliver(L, r);
}

/* r in a transaction whose connection (pin) broke: a COMMIT or ROLLBACK ends it (a ROLLBACK
 * quietly: there is nothing to undo), anything else fails. */
static int lost_tx(lua_State *L, mb_pg *s, pg_conn *pin, pg_req *r)
{
	if (r->kind == K_ROLLBACK || r->kind == K_COMMIT) {
		if (--pin->depth <= 0) {
			pin->depth = 0;
			pin->pinned = NULL;
			pin->tx_lost = 0;
		}
	}
	if (r->kind == K_ROLLBACK) {
		req_clear(r);
		return 0;
	}
	req_fail(r, "%s", "the connection of the transaction was lost; nothing was committed");
	s->st.failed++;
	return deliver(L, r);
}

/* Runs r on the blocking connection and delivers. */
static int run_blocking(lua_State *L, mb_pg *s, pg_req *r)
{
	pg_conn *cn = &s->sync;
	s->st.blocking++;
	if (cn->pinned && cn->pinned != L) {
		/* code that cannot yield left a transaction open on this connection while it waits
		 * (a coroutine made by Lua code that yielded inside tx): a statement of other code
		 * must not run inside it, where a rollback would take it away */
		req_fail(r, "%s", "the blocking connection is inside a transaction of other code that "
			 "is waiting (a coroutine that yielded inside mb.db.tx); this statement was not run");
		s->st.failed++;
		r->done = 1;
		return deliver(L, r);
	}
	if (!cn->c || PQstatus(cn->c) != CONNECTION_OK) {
		if (cn->pinned)
			return lost_tx(L, s, cn, r);
		char err[256];
		if (cn->c)
			PQfinish(cn->c);
		cn->c = connect_one(s->conninfo, s->timeout_ms, 1, err, sizeof err);
		if (!cn->c) {
			snprintf(s->last_err, sizeof s->last_err, "%s", err);
			snprintf(r->err, sizeof r->err, "PostgreSQL is unreachable (%s); the request can "
				 "be retried when it is back", err);
			r->failed = 1;
			s->st.failed++;
			return deliver(L, r);
		}
	}
	if (r->kind == K_EXEC || r->kind >= K_BEGIN) {
		if (!PQsendQuery(cn->c, r->sql))
			result_error(r, NULL, cn->c);
	} else if (!PQsendQueryParams(cn->c, r->sql, r->nparams, NULL, r->values, r->lengths,
				      r->formats, 0)) {
		result_error(r, NULL, cn->c);
	}
	if (!r->failed) {
		PGresult *res;
		while ((res = PQgetResult(cn->c)) != NULL)
			absorb(r, res, cn->c);
	}
	settle(cn, r);
	r->done = 1;
	return deliver(L, r);
}

/* Sends r (or queues it) and yields until it is done; or runs it blocking. */
static int submit(lua_State *L, mb_pg *s, pg_req *r)
{
	pg_conn *pin = pinned_of(s, L);
	int can_yield = lua_isyieldable(L) && s->host.owns && s->host.owns(s->host.ud, L);
	if (pin == &s->sync || (!pin && !can_yield))
		return run_blocking(L, s, r);
	if (pin && !can_yield)
		return luaL_error(L, "store: a statement inside mb.db.tx from code that cannot wait for "
				  "it (%s)", s->label);
	if (pin && (pin->down || pin->tx_lost))
		return lost_tx(L, s, pin, r);
	s->st.statements++;
	if (pin) {
		if (send_req(pin, r) != 0) {
			char m[256];
			pq_msg(m, sizeof m, PQerrorMessage(pin->c));
			s->in_call++;
			conn_broken(pin, m);
			s->in_call--;
			req_fail(r, "the connection of the transaction was lost (%s); nothing was committed", m);
			return deliver(L, r);
		}
	} else if (!any_up(s)) {
		snprintf(r->err, sizeof r->err, "PostgreSQL is unreachable (%s); the request can be "
			 "retried when it is back", s->last_err);
		r->failed = 1;
		s->st.failed++;
		return deliver(L, r);
	} else {
		pg_conn *cn = s->wait_head ? NULL : free_conn(s);
		if (!cn || send_req(cn, r) != 0) {
			s->in_call++;
			if (cn)
				conn_broken(cn, PQerrorMessage(cn->c));
			s->st.waited++;
			r->queued = 1;
			if (s->wait_tail)
				s->wait_tail->next = r;
			else
				s->wait_head = r;
			s->wait_tail = r;
			dispatch(s);
			s->in_call--;
		}
	}
	if (r->done) /* failed at once by dispatch */
		return deliver(L, r);
	lua_pushthread(L);
	r->ref = luaL_ref(L, LUA_REGISTRYINDEX);
	return lua_yieldk(L, 0, (lua_KContext)r, k_stmt);
}

static int stmt(lua_State *L, int kind)
{
	mb_pg *s = store_of(L);
	pg_req *r = new_req(L, s, kind, NULL);
	return submit(L, s, r);
}

static int l_query(lua_State *L) { return stmt(L, K_QUERY); }
static int l_row(lua_State *L) { return stmt(L, K_ROW); }
static int l_run(lua_State *L) { return stmt(L, K_RUN); }

static int l_exec(lua_State *L)
{
	luaL_checkstring(L, 1);
	lua_settop(L, 1);
	return stmt(L, K_EXEC);
}

/* _begin(): BEGIN (SERIALIZABLE) on a connection pinned to this coroutine, or a SAVEPOINT */
static int l_begin(lua_State *L)
{
	mb_pg *s = store_of(L);
	pg_conn *pin = pinned_of(s, L);
	lua_settop(L, 0);
	pg_req *r = new_req(L, s, K_BEGIN, pin ? "SAVEPOINT mb_tx" : "BEGIN ISOLATION LEVEL SERIALIZABLE");
	return submit(L, s, r); /* blocking callers pin the blocking connection */
}

static int end_tx(lua_State *L, int commit)
{
	mb_pg *s = store_of(L);
	pg_conn *pin = pinned_of(s, L);
	lua_settop(L, 0);
	if (!pin)
		return luaL_error(L, "store: no transaction to end (%s)", s->label);
	const char *sql = pin->depth > 1 ? (commit ? "RELEASE SAVEPOINT mb_tx"
					   : "ROLLBACK TO SAVEPOINT mb_tx; RELEASE SAVEPOINT mb_tx")
					 : (commit ? "COMMIT" : "ROLLBACK");
	pg_req *r = new_req(L, s, commit ? K_COMMIT : K_ROLLBACK, sql);
	return submit(L, s, r);
}

static int l_commit(lua_State *L) { return end_tx(L, 1); }
static int l_rollback(lua_State *L) { return end_tx(L, 0); }

/* _pause(ms): the coroutine waits ms milliseconds (the back-off between two attempts of a
 * transaction that lost a serialization conflict), the loop going on meanwhile. Code that cannot
 * yield does not wait. */
typedef struct pause_t {
	uv_timer_t t;
	lua_State *L;
	int ref;
	int fired;
	mb_pg *s;
} pause_t;

static void on_pause_closed(uv_handle_t *h)
{
	pause_t *p = h->data;
	p->s->handles--;
	mb_pg *s = p->s;
	free(p);
	maybe_free(s);
}

static void on_pause(uv_timer_t *t)
{
	pause_t *p = t->data;
	mb_pg *s = p->s;
	lua_State *L = p->L;
	int ref = p->ref;
	p->fired = 1;
	s->pauses--;
	uv_close((uv_handle_t *)&p->t, on_pause_closed);
	if (s->closing)
		return;
	if (s->host.resume)
		s->host.resume(s->host.ud, L, 0);
	if (!s->closing) /* held until it is back (see resume_req) */
		luaL_unref(s->L, LUA_REGISTRYINDEX, ref);
}

static int k_pause(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	if (!((pause_t *)ctx)->fired) /* resumed by somebody else meanwhile: keep waiting */
		return lua_yieldk(L, 0, ctx, k_pause);
	return 0;
}

static int l_pause(lua_State *L)
{
	mb_pg *s = store_of(L);
	lua_Integer ms = luaL_checkinteger(L, 1);
	if (ms <= 0 || !lua_isyieldable(L) || !s->host.owns || !s->host.owns(s->host.ud, L))
		return 0;
	pause_t *p = calloc(1, sizeof *p);
	if (!p)
		return 0;
	p->s = s;
	p->L = L;
	uv_timer_init(s->loop, &p->t);
	p->t.data = p;
	s->handles++; /* closed by on_pause (or by close: the loop runs it once more) */
	s->pauses++;
	lua_pushthread(L);
	p->ref = luaL_ref(L, LUA_REGISTRYINDEX);
	uv_timer_start(&p->t, on_pause, (uint64_t)(ms > 10000 ? 10000 : ms), 0);
	return lua_yieldk(L, 0, (lua_KContext)p, k_pause);
}

static int l_depth(lua_State *L)
{
	mb_pg *s = store_of(L);
	pg_conn *pin = pinned_of(s, L);
	lua_pushinteger(L, pin ? pin->depth : 0);
	return 1;
}

static int l_migrate(lua_State *L)
{
	mb_pg *s = store_of(L);
	int n;
	const char **steps = mb_store_migration_steps(L, s->label, &n);
	char err[1024];
	if (mb_pg_migrate(s, steps, n, err, sizeof err) != 0)
		return luaL_error(L, "store: %s", err);
	lua_pushboolean(L, 1);
	return 1;
}

static int l_stats(lua_State *L)
{
	mb_pg *s = store_of(L);
	lua_createtable(L, 0, 8);
#define F(name, v) (lua_pushinteger(L, (lua_Integer)(v)), lua_setfield(L, -2, name))
	F("statements", s->st.statements);
	F("blocking", s->st.blocking);
	F("waited", s->st.waited);
	F("failed", s->st.failed);
	F("reconnects", s->st.reconnects);
	F("connections", s->st.connections);
	F("down", s->st.down);
#undef F
	return 1;
}

void mb_pg_push_lua(lua_State *L, mb_pg *s)
{
	static const luaL_Reg fns[] = {
		{ "exec", l_exec }, { "query", l_query }, { "row", l_row }, { "run", l_run },
		{ "migrate", l_migrate }, { "_begin", l_begin }, { "_commit", l_commit },
		{ "_rollback", l_rollback }, { "_depth", l_depth }, { "_pause", l_pause },
		{ "listen", l_listen },
		{ "stats", l_stats }, { NULL, NULL },
	};
	if (luaL_newmetatable(L, "mb.pg_req")) {
		lua_pushcfunction(L, req_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_pop(L, 1);
	s->L = L;
	lua_newtable(L);
	s->listen_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_createtable(L, 0, 14);
	lua_pushlightuserdata(L, s);
	luaL_setfuncs(L, fns, 1);
	lua_pushstring(L, s->label);
	lua_setfield(L, -2, "path");
	lua_pushliteral(L, "postgres");
	lua_setfield(L, -2, "dialect");
}

/* ---- migrations ------------------------------------------------------------------------------- */

/* One statement on the blocking connection; 0, or -1 with msg set. *out gets the first value of
 * the first row when asked. */
static int sync_exec(mb_pg *s, const char *sql, char *out, size_t outlen, char *msg, size_t msglen)
{
	PGresult *r = PQexec(s->sync.c, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		const char *prim = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
		pq_msg(msg, msglen, prim ? prim : PQerrorMessage(s->sync.c));
		PQclear(r);
		return -1;
	}
	if (out) {
		snprintf(out, outlen, "%s", PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : "");
	}
	PQclear(r);
	return 0;
}

int mb_pg_migrate(mb_pg *s, const char *const *steps, int n, char *err, size_t errlen)
{
	char msg[512], v[64];
	int rc = -1;
	if (sync_exec(s, "SELECT pg_advisory_lock(" MIGRATE_LOCK ")", NULL, 0, msg, sizeof msg) != 0) {
		mb_seterr(err, errlen, "%s: cannot take the migration lock: %s", s->label, msg);
		return -1;
	}
	if (sync_exec(s, "SELECT to_regclass('moonbox_schema') IS NOT NULL", v, sizeof v, msg,
		      sizeof msg) != 0)
		goto fail;
	if (strcmp(v, "t") != 0) {
		char tables[32];
		if (sync_exec(s, "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
			      tables, sizeof tables, msg, sizeof msg) != 0)
			goto fail;
		if (atoi(tables) != 0) {
			mb_seterr(err, errlen, "%s: not a moonbox database (it has tables but no "
				 "moonbox_schema); moonbox will not add its tables to it - point store_url "
				 "at an empty database", s->label);
			goto out;
		}
		if (sync_exec(s, "CREATE TABLE moonbox_schema (version integer NOT NULL); "
			      "INSERT INTO moonbox_schema VALUES (0)", NULL, 0, msg, sizeof msg) != 0)
			goto fail;
	}
	if (sync_exec(s, "SELECT version FROM moonbox_schema", v, sizeof v, msg, sizeof msg) != 0)
		goto fail;
	int cur = atoi(v);
	if (cur > n) {
		mb_seterr(err, errlen, "%s: schema version %d is newer than this moonbox knows (%d); "
			 "upgrade moonbox", s->label, cur, n);
		goto out;
	}
	for (int i = cur + 1; i <= n; i++) {
		char up[96];
		snprintf(up, sizeof up, "UPDATE moonbox_schema SET version = %d", i);
		if (sync_exec(s, "BEGIN", NULL, 0, msg, sizeof msg) != 0)
			goto fail;
		if (sync_exec(s, steps[i - 1], NULL, 0, msg, sizeof msg) != 0 ||
		    sync_exec(s, up, NULL, 0, msg, sizeof msg) != 0 ||
		    sync_exec(s, "COMMIT", NULL, 0, msg, sizeof msg) != 0) {
			char ignore[64];
			sync_exec(s, "ROLLBACK", NULL, 0, ignore, sizeof ignore);
			mb_seterr(err, errlen, "%s: migration %d of %d failed: %s; the database stays at "
				 "schema version %d", s->label, i, n, msg, i - 1);
			goto out;
		}
	}
	rc = 0;
	goto out;
fail:
	mb_seterr(err, errlen, "%s: cannot read the schema version: %s", s->label, msg);
out:
	sync_exec(s, "SELECT pg_advisory_unlock(" MIGRATE_LOCK ")", NULL, 0, msg, sizeof msg);
	return rc;
}

/* ---- open and close --------------------------------------------------------------------------- */

int mb_pg_open(mb_pg **out, uv_loop_t *loop, const char *conninfo, int n, int64_t timeout_ms,
	       char *err, size_t errlen)
{
	char le[MB_ERR_MAX];
	if (mb_pq_load(le, sizeof le) != 0) {
		mb_seterr(err, errlen, "%s", le);
		return -1;
	}
	mb_pg *s = calloc(1, sizeof *s);
	if (!s || n < 1) {
		free(s);
		mb_seterr(err, errlen, "store: out of memory");
		return -1;
	}
	s->loop = loop;
	s->n = n;
	s->timeout_ms = timeout_ms;
	s->conninfo = strdup(conninfo);
	s->conns = calloc((size_t)n, sizeof *s->conns);
	s->listen_ref = LUA_NOREF;
	if (!s->conninfo || !s->conns) {
		mb_seterr(err, errlen, "store: out of memory");
		goto fail;
	}
	make_label(s);
	uv_idle_init(loop, &s->idle);
	s->idle.data = s;
	s->idle_open = 1;
	char e[256];
	s->sync.s = s;
	s->sync.c = connect_one(conninfo, timeout_ms, 1, e, sizeof e);
	if (!s->sync.c) {
		mb_seterr(err, errlen, "%s: cannot connect: %s; check store_url and that PostgreSQL is "
			 "running", s->label, e);
		goto fail;
	}
	for (int i = 0; i < n; i++) {
		pg_conn *cn = &s->conns[i];
		cn->s = s;
		PGconn *c = connect_one(conninfo, timeout_ms, 0, e, sizeof e);
		if (!c || conn_attach(cn, c) != 0) {
			mb_seterr(err, errlen, "%s: cannot open connection %d of %d: %s", s->label, i + 1, n,
				 c ? "cannot watch its socket" : e);
			goto fail;
		}
		s->st.connections++;
	}
	*out = s;
	return 0;
fail:
	mb_pg_close(s);
	uv_run(loop, UV_RUN_NOWAIT);
	return -1;
}

void mb_pg_set_host(mb_pg *s, const mb_pg_host *host)
{
	s->host = *host;
}

void mb_pg_get_stats(const mb_pg *s, mb_pg_stats *out)
{
	*out = s->st;
}

size_t mb_pg_pending(const mb_pg *s)
{
	size_t n = 0;
	for (int i = 0; i < s->n; i++)
		n += s->conns[i].cur != NULL;
	for (const pg_req *r = s->wait_head; r; r = r->next)
		n++;
	for (const pg_req *r = s->ready_head; r; r = r->next)
		n++; /* done, its coroutine not resumed yet */
	return n + (size_t)s->pauses;
}

/* Frees s once every handle has closed and no reopen runs on the thread pool. */
static void maybe_free(mb_pg *s)
{
	if (!s->closing || s->handles > 0)
		return;
	for (int i = 0; i < s->n; i++)
		if (s->conns[i].working)
			return;
	if (s->lconn.working)
		return;
	free(s->conns);
	free(s->conninfo);
	free(s);
}

static void on_closed_free(uv_handle_t *h)
{
	pg_conn *cn = h->data;
	mb_pg *s = cn->s;
	s->handles--;
	maybe_free(s);
}

static void on_idle_closed(uv_handle_t *h)
{
	mb_pg *s = h->data;
	s->handles--;
	maybe_free(s);
}

static void conn_close(pg_conn *cn)
{
	if (cn->poll_open) {
		cn->poll_open = 0;
		uv_poll_stop(&cn->poll);
		cn->s->handles++;
		uv_close((uv_handle_t *)&cn->poll, on_closed_free);
	}
	if (cn->timer_open) {
		cn->timer_open = 0;
		cn->s->handles++;
		uv_close((uv_handle_t *)&cn->timer, on_closed_free);
	}
	if (cn->c)
		PQfinish(cn->c);
	cn->c = NULL;
	cn->cur = NULL;
}

void mb_pg_close(mb_pg *s)
{
	if (!s)
		return;
	s->closing = 1;
	s->handles++; /* held while closing, so no callback frees s under this loop */
	for (int i = 0; s->conns && i < s->n; i++)
		conn_close(&s->conns[i]);
	conn_close(&s->lconn);
	if (s->idle_open) {
		s->idle_open = 0;
		uv_idle_stop(&s->idle);
		s->handles++;
		uv_close((uv_handle_t *)&s->idle, on_idle_closed);
	}
	if (s->sync.c)
		PQfinish(s->sync.c);
	s->sync.c = NULL;
	s->handles--;
	maybe_free(s); /* else after the loop has closed the handles (the caller runs it once) */
}
