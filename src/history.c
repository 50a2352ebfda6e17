/* history.c - the execution log's writer thread (see history.h for why it is a thread).
 *
 * Shape: rows are appended to a growable array under `mu`. The writer waits on `cv` for up to a
 * second (or until a flush or close asks), swaps the array out, and inserts the rows in one
 * transaction on its own connection, each with its ref (drawn when it was queued), followed by the DELETEs
 * that keep the newest tenant_max_rows of every tenant in the batch and the newest max_rows in
 * all; once a minute (with rows or without) it drops rows older than max_age_ms. A flush records the sequence number it waits for and
 * sleeps on `done_cv` until the writer has committed that far. Failures are logged and counted;
 * they never stop the server.
 */
#include "history.h"

#include <sodium.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "log.h"

#define MAX_QUEUED 100000
#define AGE_TRIM_MS 60000 /* old rows are looked for once a minute (a scan: no index on time) */

typedef struct {
	const char *s; /* NULL: absent (SQL NULL) */
	size_t n;
} text;

/* A queued row: its strings are copies in one allocation (buf), so adding a row costs the
 * loop thread one malloc whatever the number of fields. */
typedef struct {
	char *buf;
	text tenant, outcome, code_hash, tool, rerun_of, code, result_head, output_head, error, tools;
	int64_t started_ms, instructions, memory_peak, code_len, context_bytes, result_bytes,
		output_bytes;
	double duration_ms;
	size_t bytes; /* the size of buf, for max_queued_bytes */
	char ref[17];  /* the row's opaque id, hex (mb_history_add) */
} row;

struct mb_history {
	sqlite3 *db;
	sqlite3_stmt *ins, *trim, *trim_tenant, *trim_age;
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

static int write_rows(mb_history *h, row *rows, size_t n)
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
fail:
	mb_log(MB_LOG_ERROR, "history: %s", sqlite3_errmsg(h->db));
	sqlite3_exec(h->db, "ROLLBACK", NULL, NULL, NULL);
	return -1;
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
		int rc = n ? write_rows(h, rows, n) : 0;
		if (!n && h->lim.max_age_ms > 0 && wall_ms() - h->last_age_trim >= AGE_TRIM_MS)
			rc = trim_age(h, wall_ms()); /* a tenant that stopped still loses its old rows */
		if (rc != 0) {
			if (!n)
				mb_log(MB_LOG_ERROR, "history: %s", sqlite3_errmsg(h->db));
			uv_mutex_lock(&h->mu);
			h->failed++;
			uv_mutex_unlock(&h->mu);
		}
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

mb_history *mb_history_open(const char *db_path, const mb_history_limits *lim, int busy_ms,
			    char *err, size_t errlen)
{
	mb_history *h = calloc(1, sizeof *h);
	if (!h || sodium_init() < 0) {
		snprintf(err, errlen, "out of memory");
		free(h);
		return NULL;
	}
	h->lim = *lim;
	h->max_rows = lim->max_rows;
	crypto_shorthash_keygen(h->ref_key);
	atomic_init(&h->ref_seq, 0);
	if (h->lim.tenant_max_rows < 1)
		h->lim.tenant_max_rows = 1;
	if (sqlite3_open_v2(db_path, &h->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_busy_timeout(h->db, busy_ms);
	if (sqlite3_exec(h->db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h->db,
			       "INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions,"
			       " memory_peak, code_hash, tool, ref, code, code_bytes, context_bytes,"
			       " result_head, result_bytes, output_head, output_bytes, error, tools_called,"
			       " rerun_of) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
				 &x.result_head, &x.output_head, &x.error, &x.tools };
	const text src[] = {
		{ tenant, strlen(tenant) }, { outcome, strlen(outcome) },
		{ r->code_hash, r->code_hash ? strlen(r->code_hash) : 0 }, { tool, strlen(tool) },
		{ r->rerun_of, r->rerun_of ? strlen(r->rerun_of) : 0 },
		{ keep_code ? r->code : NULL, r->code_len }, { r->result_head, r->result_head_len },
		{ r->output_head, r->output_head_len }, { r->error, r->error_len },
		{ r->tools, r->tools_len },
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
	while (h->committed_seq < want) {
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
	uv_mutex_destroy(&h->mu);
	uv_cond_destroy(&h->cv);
	uv_cond_destroy(&h->done_cv);
	free(h);
}
