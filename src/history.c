/* history.c - the execution log's writer thread (see history.h for why it is a thread).
 *
 * Shape: rows are appended to a growable array under `mu`. The writer waits on `cv` for up to a
 * second (or until a flush or close asks), swaps the array out, and inserts the rows in one
 * transaction on its own connection, followed by a DELETE that keeps the newest max_rows. A
 * flush records the sequence number it waits for and sleeps on `done_cv` until the writer has
 * committed that far. Failures are logged and counted; they never stop the server.
 */
#include "history.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "log.h"

#define MAX_QUEUED 100000

typedef struct {
	char *tenant, *outcome, *code_hash, *tool;
	int64_t started_ms, instructions, memory_peak;
	double duration_ms;
} row;

struct mb_history {
	sqlite3 *db;
	sqlite3_stmt *ins, *trim;
	int64_t max_rows;
	uv_thread_t thread;
	uv_mutex_t mu;
	uv_cond_t cv, done_cv;
	row *rows;
	size_t n, cap;
	uint64_t queued_seq, committed_seq; /* rows ever queued / ever handled by the writer */
	int stop, wake;
	uint64_t dropped, failed;
};

static char *dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void row_free(row *r)
{
	free(r->tenant);
	free(r->outcome);
	free(r->code_hash);
	free(r->tool);
}

static int write_rows(mb_history *h, row *rows, size_t n)
{
	if (sqlite3_exec(h->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		return -1;
	size_t first = n > (size_t)h->max_rows ? n - (size_t)h->max_rows : 0;
	for (size_t i = first; i < n; i++) {
		row *r = &rows[i];
		sqlite3_stmt *st = h->ins;
		sqlite3_bind_text(st, 1, r->tenant ? r->tenant : "default", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, r->started_ms);
		sqlite3_bind_double(st, 3, r->duration_ms);
		sqlite3_bind_text(st, 4, r->outcome ? r->outcome : "runtime", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 5, r->instructions);
		sqlite3_bind_int64(st, 6, r->memory_peak);
		if (r->code_hash)
			sqlite3_bind_text(st, 7, r->code_hash, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(st, 7);
		sqlite3_bind_text(st, 8, r->tool ? r->tool : "execute_code", -1, SQLITE_STATIC);
		int rc = sqlite3_step(st);
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
		if (rc != SQLITE_DONE)
			goto fail;
	}
	sqlite3_bind_int64(h->trim, 1, h->max_rows);
	int rc = sqlite3_step(h->trim);
	sqlite3_reset(h->trim);
	if (rc != SQLITE_DONE)
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
		int stop = h->stop;
		uv_mutex_unlock(&h->mu);
		if (n && write_rows(h, rows, n) != 0) {
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

mb_history *mb_history_open(const char *db_path, int64_t max_rows, int busy_ms, char *err, size_t errlen)
{
	mb_history *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->max_rows = max_rows;
	if (sqlite3_open_v2(db_path, &h->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_busy_timeout(h->db, busy_ms);
	if (sqlite3_exec(h->db, "PRAGMA synchronous=FULL", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h->db,
			       "INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions,"
			       " memory_peak, code_hash, tool) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			       -1, &h->ins, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(h->db,
			       "DELETE FROM executions WHERE id <= (SELECT max(id) FROM executions) - ?",
			       -1, &h->trim, NULL) != SQLITE_OK)
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
	sqlite3_close(h->db);
	free(h);
	return NULL;
}

void mb_history_add(mb_history *h, const mb_history_row *r)
{
	if (h->max_rows <= 0)
		return;
	row x = { dup_str(r->tenant), dup_str(r->outcome), dup_str(r->code_hash), dup_str(r->tool),
		  r->started_ms, r->instructions, r->memory_peak, r->duration_ms };
	uv_mutex_lock(&h->mu);
	if (h->n >= MAX_QUEUED) {
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
	h->rows[h->n++] = x;
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
	sqlite3_close(h->db);
	uv_mutex_destroy(&h->mu);
	uv_cond_destroy(&h->cv);
	uv_cond_destroy(&h->done_cv);
	free(h);
}
