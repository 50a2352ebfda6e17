/* history.c - the execution log's writer thread (see history.h for why it is a thread).
 *
 * Shape: rows are appended to a growable array under `mu`. The writer waits on `cv` for up to a
 * second (or until a flush or close asks), swaps the array out, and inserts the rows in one
 * transaction on its own connection, each with its ref (drawn when it was queued), followed by the DELETEs
 * that keep the newest tenant_max_rows of every tenant in the batch and the newest max_rows in
 * all; once a minute (with rows or without) it drops rows older than max_age_ms. A flush records the sequence number it waits for and
 * sleeps on `done_cv` until the writer has committed that far. Failures are logged and counted;
 * they never stop the server.
 *
 * PostgreSQL (store_url): the same shape on a blocking libpq connection of the writer's own. The
 * rows go in INSERTs of up to PG_CHUNK rows each (one statement, or BEGIN .. COMMIT around
 * several), then the trims run in a transaction of their own that first takes an advisory lock,
 * so replicas sharing the table trim one at a time instead of deadlocking on each other's
 * DELETEs, and a failed trim never costs an inserted row. A failure that can pass (the
 * connection broke, PostgreSQL restarting, a serialization failure, a timeout: SQLSTATE classes
 * 08, 40, 53, 57, 58) puts the rows back at the head of the queue (dropping the oldest beyond the
 * queue's bounds), marks the writer down and logs once; the next round (a second later)
 * reconnects and writes them. Another failure (a row PostgreSQL refuses) drops the batch. On
 * SQLite the same: a failure that can pass (SQLITE_FULL: the disk is full; SQLITE_BUSY or
 * SQLITE_LOCKED: another process on the data directory holds the lock past the busy timeout;
 * SQLITE_IOERR) keeps the rows queued, any other drops the batch. TEXT on PostgreSQL holds neither NUL bytes nor invalid UTF-8: those bytes of the
 * journal's texts are written as U+FFFD (docs/journal.md).
 */
#include "history.h"

#include "pq_load.h"
#include <sodium.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "log.h"
#include "utf8.h"

#define MAX_QUEUED 100000
#define AGE_TRIM_MS 60000 /* old rows are looked for once a minute (a scan: no index on time) */
#define PG_CHUNK 500      /* rows per INSERT on PostgreSQL: 20 parameters each, at most 65535 */
#define PG_TRIM_LOCK 0x6d62686973740001LL /* advisory lock key of the trims ("mbhist" 1) */

enum { WR_OK = 0, WR_DROP = -1, WR_RETRY = -2 }; /* what a failed write does with its rows */

typedef struct {
	const char *s; /* NULL: absent (SQL NULL) */
	size_t n;
} text;

/* A queued row: its strings are copies in one allocation (buf), so adding a row costs the
 * loop thread one malloc whatever the number of fields. */
typedef struct {
	char *buf;
	text tenant, outcome, code_hash, tool, rerun_of, code, result_head, output_head, error, tools,
		principal;
	int64_t started_ms, instructions, memory_peak, code_len, context_bytes, result_bytes,
		output_bytes;
	double duration_ms;
	size_t bytes; /* the size of buf, for max_queued_bytes */
	char ref[17];  /* the row's opaque id, hex (mb_history_add) */
} row;

struct mb_history {
	sqlite3 *db;
	sqlite3_stmt *ins, *trim, *trim_tenant, *trim_age;
	/* PostgreSQL (conninfo != NULL): the writer's connection, NULL or broken while down */
	char *conninfo;
	PGconn *pg;
	int timeout_ms;
	int outage;          /* the writer thread's: a failure was logged, none since */
	int down;            /* under mu: rows wait for PostgreSQL, mb_history_flush does not */
	uint64_t outage_failed;
	char pg_err[512];    /* the last write's failure (PostgreSQL's or SQLite's message) */
	char down_msg[512];  /* under mu: pg_err of the failure that put the writer down */
	int64_t max_rows;
	mb_history_limits lim;
	int64_t last_age_trim;
	size_t queued_bytes;
	uv_thread_t thread;
	uv_mutex_t mu;
	uv_cond_t cv, done_cv;
	row *rows;
	size_t n, cap;
	uint64_t queued_seq, committed_seq; /* rows ever queued / ever handled by the writer */
	int stop, wake;
	uint64_t dropped, failed;
	/* refs: SipHash-2-4 of a counter under a key drawn at open, so a row's id is known when it
	 * is queued (execute_code answers with it) without a system call per row */
	unsigned char ref_key[crypto_shorthash_KEYBYTES];
	atomic_uint_fast64_t ref_seq;
};

/* The strings of a row, copied into one buffer: fields[i] from src[i] (s NULL: absent). */
static int copy_texts(row *x, text *const *fields, const text *src, size_t n)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		if (src[i].s)
			total += src[i].n + 1;
	x->bytes = total;
	if (!total)
		return 0;
	char *p = x->buf = malloc(total);
	if (!p)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!src[i].s)
			continue;
		memcpy(p, src[i].s, src[i].n);
		p[src[i].n] = 0;
		fields[i]->s = p;
		fields[i]->n = src[i].n;
		p += src[i].n + 1;
	}
	return 0;
}

static void row_free(row *r)
{
	free(r->buf);
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void bind_text(sqlite3_stmt *st, int i, const text *t)
{
	if (t->s)
		sqlite3_bind_text(st, i, t->s, (int)t->n, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, i);
}

static int step_reset(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

/* Drops rows older than max_age_ms (the caller holds a transaction or accepts autocommit). */
static int trim_age(mb_history *h, int64_t now)
{
	h->last_age_trim = now;
	if (h->lim.max_age_ms <= 0)
		return 0;
	sqlite3_bind_int64(h->trim_age, 1, now - h->lim.max_age_ms);
	return step_reset(h->trim_age);
}

/* Keeps the newest tenant_max_rows rows of each tenant that has rows in the batch. */
static int trim_tenants(mb_history *h, row *rows, size_t first, size_t n)
{
	for (size_t i = first; i < n; i++) {
		const text *t = &rows[i].tenant;
		size_t j = first;
		for (; j < i; j++) /* once per tenant: tenants are few (the configured tokens') */
			if (rows[j].tenant.n == t->n && memcmp(rows[j].tenant.s, t->s, t->n) == 0)
				break;
		if (j < i)
			continue;
		bind_text(h->trim_tenant, 1, t);
		sqlite3_bind_int64(h->trim_tenant, 2, h->lim.tenant_max_rows);
		if (step_reset(h->trim_tenant) != 0)
			return -1;
	}
	return 0;
}

static int sqlite_write_rows(mb_history *h, row *rows, size_t n)
{
	if (sqlite3_exec(h->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		goto fail;
	size_t first = n > (size_t)h->max_rows ? n - (size_t)h->max_rows : 0;
	for (size_t i = first; i < n; i++) {
		row *r = &rows[i];
		sqlite3_stmt *st = h->ins;
		bind_text(st, 1, &r->tenant);
		sqlite3_bind_int64(st, 2, r->started_ms);
		sqlite3_bind_double(st, 3, r->duration_ms);
		bind_text(st, 4, &r->outcome);
		sqlite3_bind_int64(st, 5, r->instructions);
		sqlite3_bind_int64(st, 6, r->memory_peak);
		bind_text(st, 7, &r->code_hash);
		bind_text(st, 8, &r->tool);
		sqlite3_bind_text(st, 9, r->ref, 16, SQLITE_STATIC);
		bind_text(st, 10, &r->code);
		sqlite3_bind_int64(st, 11, r->code_len);
		sqlite3_bind_int64(st, 12, r->context_bytes);
		bind_text(st, 13, &r->result_head);
		sqlite3_bind_int64(st, 14, r->result_bytes);
		bind_text(st, 15, &r->output_head);
		sqlite3_bind_int64(st, 16, r->output_bytes);
		bind_text(st, 17, &r->error);
		bind_text(st, 18, &r->tools);
		bind_text(st, 19, &r->rerun_of);
		bind_text(st, 20, &r->principal);
		if (step_reset(st) != 0)
			goto fail;
	}
	if (trim_tenants(h, rows, first, n) != 0)
		goto fail;
	sqlite3_bind_int64(h->trim, 1, h->max_rows);
	if (step_reset(h->trim) != 0)
		goto fail;
	int64_t now = wall_ms();
	int expired = 0; /* a row that arrives already too old (a clock step) goes at once */
	for (size_t i = first; i < n && h->lim.max_age_ms > 0 && !expired; i++)
		expired = rows[i].started_ms < now - h->lim.max_age_ms;
	if ((expired || now - h->last_age_trim >= AGE_TRIM_MS) && trim_age(h, now) != 0)
		goto fail;
	if (sqlite3_exec(h->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
		return 0;
fail:;
	/* a failure that passes (the disk full, another process holding the lock past the busy
	 * timeout, an I/O error) keeps the rows queued for the next round, as on PostgreSQL: their
	 * ids were already given to clients */
	int code = sqlite3_errcode(h->db) & 0xff;
	snprintf(h->pg_err, sizeof h->pg_err, "%s", sqlite3_errmsg(h->db));
	sqlite3_exec(h->db, "ROLLBACK", NULL, NULL, NULL);
	return code == SQLITE_FULL || code == SQLITE_BUSY || code == SQLITE_LOCKED || code == SQLITE_IOERR
			       ? WR_RETRY
			       : WR_DROP;
}

/* ---- PostgreSQL ------------------------------------------------------------------------ */

/* Keeps the message of a failed call in pg_err: "<primary message> (SQLSTATE xxxxx)". */
static void pg_seterr(mb_history *h, const PGresult *r)
{
	const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (!msg)
		msg = h->pg ? PQerrorMessage(h->pg) : "out of memory";
	int k = snprintf(h->pg_err, sizeof h->pg_err, "%s", msg);
	while (k > 0 && (size_t)k < sizeof h->pg_err && (h->pg_err[k - 1] == '\n' || h->pg_err[k - 1] == ' '))
		h->pg_err[--k] = 0;
	if (state && (size_t)k < sizeof h->pg_err)
		snprintf(h->pg_err + k, sizeof h->pg_err - (size_t)k, " (SQLSTATE %s)", state);
}

/* WR_OK when r has status want; else the message is kept and the failure classified: WR_RETRY
 * when it can pass (connection, restart, conflicts, resources, timeouts), WR_DROP when the rows
 * themselves are refused. Clears r. */
static int pg_check(mb_history *h, PGresult *r, ExecStatusType want)
{
	if (r && PQresultStatus(r) == want) {
		PQclear(r);
		return WR_OK;
	}
	pg_seterr(h, r);
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	int retry = !r || PQstatus(h->pg) != CONNECTION_OK || !state || strncmp(state, "08", 2) == 0 ||
		    strncmp(state, "40", 2) == 0 || strncmp(state, "53", 2) == 0 ||
		    strncmp(state, "57", 2) == 0 || strncmp(state, "58", 2) == 0;
	PQclear(r);
	return retry ? WR_RETRY : WR_DROP;
}

static int pg_command(mb_history *h, const char *sql, int nparams, const char *const *values)
{
	return pg_check(h, PQexecParams(h->pg, sql, nparams, NULL, values, NULL, NULL, 0),
			PGRES_COMMAND_OK);
}

/* A connection that works, made anew when there is none or it broke. */
static int pg_connect(mb_history *h)
{
	if (h->pg && PQstatus(h->pg) == CONNECTION_OK)
		return WR_OK;
	if (h->pg)
		PQfinish(h->pg);
	char timeout[24], set[64];
	int secs = (h->timeout_ms + 999) / 1000;
	snprintf(timeout, sizeof timeout, "%d", secs < 2 ? 2 : secs);
	/* keywords before dbname are defaults: the connection string (expanded) may override them */
	const char *const keys[] = { "connect_timeout", "application_name", "dbname", NULL };
	const char *const vals[] = { timeout, "moonbox-history", h->conninfo, NULL };
	h->pg = PQconnectdbParams(keys, vals, 1);
	if (!h->pg || PQstatus(h->pg) != CONNECTION_OK) {
		pg_seterr(h, NULL);
		return WR_RETRY;
	}
	snprintf(set, sizeof set, "SET statement_timeout = %d", h->timeout_ms);
	return pg_command(h, set, 0, NULL);
}

/* t as a PostgreSQL text value: NUL-terminated valid UTF-8. The copy is used as it is when it
 * already is (copy_texts ends every field with a NUL); otherwise a copy with U+FFFD for every
 * NUL byte and invalid sequence goes to *owned. NULL for an absent value (or out of memory). */
static const char *pg_text(const text *t, char **owned)
{
	*owned = NULL;
	if (!t->s)
		return NULL;
	const unsigned char *s = (const unsigned char *)t->s;
	size_t i = 0, bad = 0;
	while (i < t->n) {
		if (s[i] >= 0x01 && s[i] < 0x80) {
			i++;
			continue;
		}
		size_t k = s[i] ? utf8_seq(s + i, t->n - i, &bad) : 0;
		if (!k)
			break;
		i += k;
	}
	if (i == t->n)
		return t->s;
	char *out = malloc(t->n * 3 + 1), *o = out;
	if (!out)
		return NULL;
	for (i = 0; i < t->n;) {
		size_t k = s[i] >= 0x01 && s[i] < 0x80 ? 1 : s[i] ? utf8_seq(s + i, t->n - i, &bad) : 0;
		if (k) {
			memcpy(o, s + i, k);
			o += k;
			i += k;
			continue;
		}
		memcpy(o, "\xEF\xBF\xBD", 3);
		o += 3;
		i += s[i] && bad ? bad : 1;
	}
	*o = 0;
	*owned = out;
	return out;
}

#define PG_COLS 20

/* Inserts rows[first..n) in statements of up to PG_CHUNK rows, in one transaction. */
static int pg_insert(mb_history *h, row *rows, size_t first, size_t n)
{
	static const char head[] = "INSERT INTO executions (tenant, started_at, duration_ms, outcome,"
		" instructions, memory_peak, code_hash, tool, ref, code, code_bytes, context_bytes,"
		 " result_head, result_bytes, output_head, output_bytes, error, tools_called, rerun_of,"
		" principal) VALUES ";
	size_t chunks = (n - first + PG_CHUNK - 1) / PG_CHUNK;
	size_t sqlcap = sizeof head + (size_t)PG_CHUNK * PG_COLS * 8;
	char *sql = malloc(sqlcap);
	const char **vals = malloc(sizeof *vals * PG_CHUNK * PG_COLS);
	char **owned = calloc((size_t)PG_CHUNK * PG_COLS, sizeof *owned);
	char (*nums)[24] = malloc(sizeof *nums * PG_CHUNK * 8);
	int rc = WR_OK;
	if (!sql || !vals || !owned || !nums) {
		snprintf(h->pg_err, sizeof h->pg_err, "out of memory");
		rc = WR_DROP;
		goto out;
	}
	if (chunks > 1 && (rc = pg_command(h, "BEGIN", 0, NULL)) != WR_OK)
		goto out;
	for (size_t c = first; c < n && rc == WR_OK; c += PG_CHUNK) {
		size_t m = n - c < PG_CHUNK ? n - c : PG_CHUNK, len = sizeof head - 1, nv = 0, nn = 0;
		memcpy(sql, head, len);
		for (size_t i = 0; i < m; i++) {
			row *r = &rows[c + i];
			len += (size_t)snprintf(sql + len, sqlcap - len, "%s(", i ? "," : "");
			for (int j = 1; j <= PG_COLS; j++)
				len += (size_t)snprintf(sql + len, sqlcap - len, "$%zu%s",
							i * PG_COLS + (size_t)j, j < PG_COLS ? "," : ")");
#define NUM(fmt, v) (snprintf(nums[nn], sizeof nums[nn], fmt, v), (const char *)nums[nn++])
#define TXT(t) pg_text(&(t), &owned[nv])
			vals[nv] = TXT(r->tenant), nv++;
			vals[nv++] = NUM("%lld", (long long)r->started_ms);
			vals[nv++] = NUM("%.17g", r->duration_ms);
			vals[nv] = TXT(r->outcome), nv++;
			vals[nv++] = NUM("%lld", (long long)r->instructions);
			vals[nv++] = NUM("%lld", (long long)r->memory_peak);
			vals[nv] = TXT(r->code_hash), nv++;
			vals[nv] = TXT(r->tool), nv++;
			vals[nv++] = r->ref;
			vals[nv] = TXT(r->code), nv++;
			vals[nv++] = NUM("%lld", (long long)r->code_len);
			vals[nv++] = NUM("%lld", (long long)r->context_bytes);
			vals[nv] = TXT(r->result_head), nv++;
			vals[nv++] = NUM("%lld", (long long)r->result_bytes);
			vals[nv] = TXT(r->output_head), nv++;
			vals[nv++] = NUM("%lld", (long long)r->output_bytes);
			vals[nv] = TXT(r->error), nv++;
			vals[nv] = TXT(r->tools), nv++;
			vals[nv] = TXT(r->rerun_of), nv++;
			vals[nv] = TXT(r->principal), nv++;
#undef NUM
#undef TXT
		}
		rc = pg_command(h, sql, (int)nv, vals);
		for (size_t i = 0; i < nv; i++) {
			free(owned[i]);
			owned[i] = NULL;
		}
	}
	if (chunks > 1) {
		if (rc == WR_OK)
			rc = pg_command(h, "COMMIT", 0, NULL);
		else if (PQstatus(h->pg) == CONNECTION_OK)
			PQclear(PQexec(h->pg, "ROLLBACK"));
	}
out:
	free(sql);
	free(vals);
	free(owned);
	free(nums);
	return rc;
}

/* The trims of one round, in a transaction of their own under the trim lock: the newest
 * tenant_max_rows of each tenant in rows[first..n), the newest max_rows in all, and (when due)
 * nothing older than max_age_ms. */
static int pg_trim(mb_history *h, row *rows, size_t first, size_t n, int age_due, int64_t now)
{
	char a[24], b[24];
	const char *v[2] = { a, b };
	int rc = pg_command(h, "BEGIN", 0, NULL);
	if (rc == WR_OK) {
		snprintf(a, sizeof a, "%lld", (long long)PG_TRIM_LOCK);
		rc = pg_check(h, PQexecParams(h->pg, "SELECT pg_advisory_xact_lock($1::bigint)", 1, NULL,
					      v, NULL, NULL, 0), PGRES_TUPLES_OK);
	}
	for (size_t i = first; i < n && rc == WR_OK; i++) {
		const text *t = &rows[i].tenant;
		size_t j = first;
		for (; j < i; j++)
			if (rows[j].tenant.n == t->n && memcmp(rows[j].tenant.s, t->s, t->n) == 0)
				break;
		if (j < i)
			continue;
		char *owned;
		const char *tv[2] = { pg_text(t, &owned), b };
		snprintf(b, sizeof b, "%lld", (long long)h->lim.tenant_max_rows);
		rc = pg_command(h, "DELETE FROM executions WHERE tenant = $1 AND id <= (SELECT id FROM"
				" executions WHERE tenant = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)", 2, tv);
		free(owned);
	}
	if (rc == WR_OK && n > first) {
		snprintf(a, sizeof a, "%lld", (long long)h->max_rows);
		rc = pg_command(h, "DELETE FROM executions WHERE id <= (SELECT id FROM executions"
				" ORDER BY id DESC LIMIT 1 OFFSET $1)", 1, v);
	}
	if (rc == WR_OK && age_due) {
		h->last_age_trim = now;
		if (h->lim.max_age_ms > 0) {
			snprintf(a, sizeof a, "%lld", (long long)(now - h->lim.max_age_ms));
			rc = pg_command(h, "DELETE FROM executions WHERE started_at < $1", 1, v);
		}
	}
	if (rc == WR_OK)
		rc = pg_command(h, "COMMIT", 0, NULL);
	else if (h->pg && PQstatus(h->pg) == CONNECTION_OK)
		PQclear(PQexec(h->pg, "ROLLBACK"));
	return rc;
}

/* One round on PostgreSQL: connect if needed, insert, trim. A failed trim does not undo the
 * insert: its rows are in (WR_OK is returned for them) and the failure is counted. Flushes
 * waiting for rows up to seq are released once the rows are in, before the trim: it takes the
 * trim lock, which another replica's trim may hold for long, and a flush blocks the loop. */
static int pg_write_rows(mb_history *h, row *rows, size_t n, uint64_t seq, int *trim_failed)
{
	*trim_failed = 0;
	int rc = pg_connect(h);
	if (rc != WR_OK)
		return rc;
	size_t first = n > (size_t)h->max_rows ? n - (size_t)h->max_rows : 0;
	if (n > first && (rc = pg_insert(h, rows, first, n)) != WR_OK)
		return rc;
	uv_mutex_lock(&h->mu);
	h->committed_seq = seq;
	uv_cond_broadcast(&h->done_cv);
	uv_mutex_unlock(&h->mu);
	int64_t now = wall_ms();
	int expired = 0;
	for (size_t i = first; i < n && h->lim.max_age_ms > 0 && !expired; i++)
		expired = rows[i].started_ms < now - h->lim.max_age_ms;
	int age_due = expired || now - h->last_age_trim >= AGE_TRIM_MS;
	if (n > first || (age_due && h->lim.max_age_ms > 0))
		*trim_failed = pg_trim(h, rows, first, n, age_due, now) != WR_OK;
	return WR_OK;
}

/* Puts rows that could not be written back in front of the queue, dropping the oldest of
 * them when the queue would pass its bounds. Called with mu held. */
static void requeue(mb_history *h, row *rows, size_t n)
{
	size_t bytes = 0, from = 0;
	for (size_t i = 0; i < n; i++)
		bytes += rows[i].bytes;
	while (from < n && (n - from + h->n > MAX_QUEUED ||
			    (int64_t)(bytes + h->queued_bytes) > h->lim.max_queued_bytes)) {
		bytes -= rows[from].bytes;
		row_free(&rows[from++]);
		h->dropped++;
	}
	size_t total = n - from + h->n;
	row *all = total ? malloc(total * sizeof *all) : NULL;
	if (!all) {
		for (size_t i = from; i < n; i++)
			row_free(&rows[i]);
		h->dropped += n - from;
		free(rows);
		return;
	}
	memcpy(all, rows + from, (n - from) * sizeof *all);
	if (h->n)
		memcpy(all + (n - from), h->rows, h->n * sizeof *all);
	free(h->rows);
	free(rows);
	h->rows = all;
	h->n = h->cap = total;
	h->queued_bytes += bytes;
}

static void writer(void *arg)
{
	mb_history *h = arg;
	uv_mutex_lock(&h->mu);
	for (;;) {
		if (!h->n && !h->stop)
			uv_cond_timedwait(&h->cv, &h->mu, 1000000000ull);
		/* once a second: commit what arrived (a flush or close asks sooner) */
		while (h->n && !h->wake && !h->stop) {
			if (uv_cond_timedwait(&h->cv, &h->mu, 1000000000ull) != 0)
				break;
		}
		h->wake = 0;
		row *rows = h->rows;
		size_t n = h->n;
		uint64_t seq = h->queued_seq;
		h->rows = NULL;
		h->n = h->cap = 0;
		h->queued_bytes = 0;
		int stop = h->stop;
		uv_mutex_unlock(&h->mu);
		int rc = WR_OK, trim_failed = 0, attempted = 0;
		if (h->conninfo) {
			int age_due = h->lim.max_age_ms > 0 && wall_ms() - h->last_age_trim >= AGE_TRIM_MS;
			attempted = n || age_due;
			if (attempted)
				rc = pg_write_rows(h, rows, n, seq, &trim_failed);
		} else {
			attempted = n > 0;
			rc = n ? sqlite_write_rows(h, rows, n) : WR_OK;
			if (!n && h->lim.max_age_ms > 0 && wall_ms() - h->last_age_trim >= AGE_TRIM_MS &&
			    trim_age(h, wall_ms()) != 0) {
				/* a tenant that stopped still loses its old rows */
				mb_log(MB_LOG_ERROR, "history: %s", sqlite3_errmsg(h->db));
				rc = WR_DROP;
			}
		}
		if (attempted) { /* logged once per outage, not once a second */
			const char *store = h->conninfo ? "PostgreSQL" : "SQLite";
			if (rc != WR_OK || trim_failed) {
				if (!h->outage)
					mb_log(MB_LOG_ERROR, "history: %s: %s%s", store, h->pg_err,
					       rc == WR_RETRY ? "; rows stay queued and are written when it "
					       "answers again" : rc == WR_DROP ? "; rows dropped" : " (trimming)");
				else
					mb_log(MB_LOG_DEBUG, "history: %s: %s", store, h->pg_err);
				h->outage = 1;
				h->outage_failed++;
			} else if (h->outage) {
				mb_log(MB_LOG_INFO, "history: %s answers again (%llu failed attempts); "
				       "%zu queued rows written", store, (unsigned long long)h->outage_failed, n);
				h->outage = 0;
				h->outage_failed = 0;
			}
		}
		uv_mutex_lock(&h->mu);
		if (rc != WR_OK || trim_failed)
			h->failed++;
		if (attempted || !h->conninfo) {
			h->down = rc == WR_RETRY;
			if (h->down)
				snprintf(h->down_msg, sizeof h->down_msg, "%s", h->pg_err);
		}
		if (rc == WR_RETRY && n && !stop) {
			requeue(h, rows, n);
			rows = NULL;
			n = 0;
		} else if (rc == WR_RETRY && n) {
			h->dropped += n;
			mb_log(MB_LOG_ERROR, "history: %zu rows not written at shutdown: %s", n, h->pg_err);
		}
		uv_mutex_unlock(&h->mu);
		for (size_t i = 0; i < n; i++)
			row_free(&rows[i]);
		free(rows);
		uv_mutex_lock(&h->mu);
		h->committed_seq = seq;
		uv_cond_broadcast(&h->done_cv);
		if (stop && !h->n)
			break;
	}
	uv_mutex_unlock(&h->mu);
}

static int pg_open(mb_history *h, const mb_history_store *st, char *err, size_t errlen)
{
	if (mb_pq_load(err, errlen) != 0)
		return -1;
	h->conninfo = strdup(st->pg_conninfo);
	if (!h->conninfo) {
		snprintf(err, errlen, "history: out of memory");
		return -1;
	}
	if (pg_connect(h) != WR_OK ||
	    pg_check(h, PQexec(h->pg, "SELECT id, tenant, started_at, ref, rerun_of, principal FROM executions LIMIT 0"),
		     PGRES_TUPLES_OK) != WR_OK) {
		snprintf(err, errlen, "history: PostgreSQL: %s", h->pg_err);
		return -1;
	}
	h->last_age_trim = 0;
	return 0;
}

mb_history *mb_history_open(const mb_history_store *st, const mb_history_limits *lim, char *err,
			    size_t errlen)
{
	mb_history *h = calloc(1, sizeof *h);
	if (!h || sodium_init() < 0) {
		snprintf(err, errlen, "out of memory");
		free(h);
		return NULL;
	}
	const char *db_path = st->db_path ? st->db_path : "";
	h->lim = *lim;
	h->max_rows = lim->max_rows;
	h->timeout_ms = st->timeout_ms > 0 ? st->timeout_ms : 10000;
	crypto_shorthash_keygen(h->ref_key);
	atomic_init(&h->ref_seq, 0);
	if (h->lim.tenant_max_rows < 1)
		h->lim.tenant_max_rows = 1;
	if (st->pg_conninfo && st->pg_conninfo[0]) {
		if (pg_open(h, st, err, errlen) != 0)
			goto fail_quiet;
	} else {
		if (sqlite3_open_v2(db_path, &h->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
			goto fail;
		sqlite3_busy_timeout(h->db, st->timeout_ms);
		if (sqlite3_exec(h->db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) != SQLITE_OK ||
		    sqlite3_prepare_v2(h->db,
				       "INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions,"
				       " memory_peak, code_hash, tool, ref, code, code_bytes, context_bytes,"
				       " result_head, result_bytes, output_head, output_bytes, error, tools_called,"
				       " rerun_of, principal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
				       -1, &h->ins, NULL) != SQLITE_OK ||
		    sqlite3_prepare_v2(h->db,
				       "DELETE FROM executions WHERE id <= (SELECT max(id) FROM executions) - ?",
				       -1, &h->trim, NULL) != SQLITE_OK ||
		    sqlite3_prepare_v2(h->db,
				       "DELETE FROM executions WHERE tenant = ?1 AND id <= (SELECT id FROM executions"
				       " WHERE tenant = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
				       -1, &h->trim_tenant, NULL) != SQLITE_OK ||
		    sqlite3_prepare_v2(h->db, "DELETE FROM executions WHERE started_at < ?", -1, &h->trim_age,
				       NULL) != SQLITE_OK)
			goto fail;
	}
	if (uv_mutex_init(&h->mu) || uv_cond_init(&h->cv) || uv_cond_init(&h->done_cv)) {
		snprintf(err, errlen, "%s: history: cannot create a mutex", db_path);
		goto fail_quiet;
	}
	if (uv_thread_create(&h->thread, writer, h) != 0) {
		snprintf(err, errlen, "%s: history: cannot start the writer thread", db_path);
		goto fail_quiet;
	}
	return h;
fail:
	snprintf(err, errlen, "%s: history: %s", db_path, h->db ? sqlite3_errmsg(h->db) : "out of memory");
fail_quiet:
	sqlite3_finalize(h->ins);
	sqlite3_finalize(h->trim);
	sqlite3_finalize(h->trim_tenant);
	sqlite3_finalize(h->trim_age);
	sqlite3_close(h->db);
	if (h->pg)
		PQfinish(h->pg);
	free(h->conninfo);
	free(h);
	return NULL;
}

void mb_history_add(mb_history *h, const mb_history_row *r, char ref[17])
{
	if (ref)
		ref[0] = 0;
	if (h->max_rows <= 0)
		return;
	row x = { .buf = NULL, .started_ms = r->started_ms, .instructions = r->instructions,
		  .memory_peak = r->memory_peak, .duration_ms = r->duration_ms,
		  .code_len = (int64_t)r->code_len, .context_bytes = r->context_bytes,
		  .result_bytes = r->result_bytes, .output_bytes = r->output_bytes };
	const char *tenant = r->tenant ? r->tenant : "default";
	const char *outcome = r->outcome ? r->outcome : "runtime";
	const char *tool = r->tool ? r->tool : "execute_code";
	int keep_code = r->code && (int64_t)r->code_len <= h->lim.max_code_bytes;
	text *const fields[] = { &x.tenant, &x.outcome, &x.code_hash, &x.tool, &x.rerun_of, &x.code,
				 &x.result_head, &x.output_head, &x.error, &x.tools, &x.principal };
	const text src[] = {
		{ tenant, strlen(tenant) }, { outcome, strlen(outcome) },
		{ r->code_hash, r->code_hash ? strlen(r->code_hash) : 0 }, { tool, strlen(tool) },
		{ r->rerun_of, r->rerun_of ? strlen(r->rerun_of) : 0 },
		{ keep_code ? r->code : NULL, r->code_len }, { r->result_head, r->result_head_len },
		{ r->output_head, r->output_head_len }, { r->error, r->error_len },
		{ r->tools, r->tools_len },
		{ r->principal, r->principal ? strlen(r->principal) : 0 },
	};
	if (copy_texts(&x, fields, src, sizeof src / sizeof src[0]) != 0) {
		uv_mutex_lock(&h->mu);
		h->dropped++;
		uv_mutex_unlock(&h->mu);
		return;
	}
	uv_mutex_lock(&h->mu);
	if (h->n >= MAX_QUEUED || (int64_t)(h->queued_bytes + x.bytes) > h->lim.max_queued_bytes) {
		h->dropped++;
		uv_mutex_unlock(&h->mu);
		row_free(&x);
		return;
	}
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 256;
		row *nr = realloc(h->rows, cap * sizeof *nr);
		if (!nr) {
			h->dropped++;
			uv_mutex_unlock(&h->mu);
			row_free(&x);
			return;
		}
		h->rows = nr;
		h->cap = cap;
	}
	uint64_t seq = atomic_fetch_add(&h->ref_seq, 1);
	unsigned char in[8], out[crypto_shorthash_BYTES];
	for (int i = 0; i < 8; i++)
		in[i] = (unsigned char)(seq >> (8 * i));
	crypto_shorthash(out, in, sizeof in, h->ref_key);
	sodium_bin2hex(x.ref, sizeof x.ref, out, sizeof out);
	if (ref)
		memcpy(ref, x.ref, sizeof x.ref);
	h->rows[h->n++] = x;
	h->queued_bytes += x.bytes;
	h->queued_seq++;
	if (h->n == 1)
		uv_cond_signal(&h->cv); /* start the one-second clock */
	uv_mutex_unlock(&h->mu);
}

void mb_history_flush(mb_history *h)
{
	uv_mutex_lock(&h->mu);
	uint64_t want = h->queued_seq;
	if (h->down) { /* rows wait for PostgreSQL; ask for an attempt now but do not wait */
		h->wake = 1;
		uv_cond_signal(&h->cv);
	}
	while (h->committed_seq < want && !h->down) {
		h->wake = 1;
		uv_cond_signal(&h->cv);
		uv_cond_wait(&h->done_cv, &h->mu);
	}
	uv_mutex_unlock(&h->mu);
}

void mb_history_counters(mb_history *h, uint64_t *dropped, uint64_t *failed)
{
	uv_mutex_lock(&h->mu);
	*dropped = h->dropped;
	*failed = h->failed;
	uv_mutex_unlock(&h->mu);
}

int mb_history_outage(mb_history *h, size_t *queued, char *msg, size_t n)
{
	uv_mutex_lock(&h->mu);
	int down = h->down;
	*queued = h->n;
	if (down && n)
		snprintf(msg, n, "%s", h->down_msg);
	uv_mutex_unlock(&h->mu);
	return down;
}

void mb_history_close(mb_history *h)
{
	if (!h)
		return;
	uv_mutex_lock(&h->mu);
	h->stop = 1;
	uv_cond_signal(&h->cv);
	uv_mutex_unlock(&h->mu);
	uv_thread_join(&h->thread);
	sqlite3_finalize(h->ins);
	sqlite3_finalize(h->trim);
	sqlite3_finalize(h->trim_tenant);
	sqlite3_finalize(h->trim_age);
	sqlite3_close(h->db);
	if (h->pg)
		PQfinish(h->pg);
	free(h->conninfo);
	uv_mutex_destroy(&h->mu);
	uv_cond_destroy(&h->cv);
	uv_cond_destroy(&h->done_cv);
	free(h);
}
