/* history.h - the execution log, written to the store by its own thread.
 *
 * Every execution adds one row (tenant, start, duration, outcome, instructions, peak memory,
 * code hash, tool). Adding copies the row into a buffer under a mutex; a writer thread with its
 * own SQLite connection to the same database file commits the buffer once a second in one
 * transaction and then trims the table to the newest max_rows rows. So the loop thread copies a
 * row per execution instead of running an INSERT (docs/benchmarks.md, "Session 2", has what that
 * saved) and never waits for an fsync. The cost: rows of the last second are lost if the process
 * is killed.
 *
 * Threads: mb_history_add and mb_history_flush may be called from any thread; open and close
 * from the loop thread.
 */
#ifndef MB_HISTORY_H
#define MB_HISTORY_H

#include <stddef.h>
#include <stdint.h>

typedef struct mb_history mb_history;

typedef struct mb_history_row {
	const char *tenant;
	int64_t started_ms;      /* wall clock, ms since the epoch */
	double duration_ms;
	const char *outcome;     /* "ok" or the error type */
	int64_t instructions;
	int64_t memory_peak;
	const char *code_hash;   /* hex, may be NULL */
	const char *tool;        /* execute_code or a published skill */
} mb_history_row;

/// Opens a second connection to the store's database (which must already exist with the
/// executions table) and starts the writer thread.
/// @param db_path   the database file
/// @param max_rows  rows kept (0 = keep none: adding does nothing)
/// @param busy_ms   how long a commit waits for the other connection's lock
/// @returns the history, or NULL with err set
mb_history *mb_history_open(const char *db_path, int64_t max_rows, int busy_ms, char *err, size_t errlen);

/// Queues a row (strings are copied). Never blocks on SQLite. Rows beyond 100,000 waiting are
/// dropped (and counted) rather than letting memory grow.
void mb_history_add(mb_history *h, const mb_history_row *row);

/// Waits until every row queued before the call is committed.
void mb_history_flush(mb_history *h);

/// Rows dropped because the queue was full, and commits that failed.
void mb_history_counters(mb_history *h, uint64_t *dropped, uint64_t *failed);

/// Commits what is queued, stops the thread and closes its connection.
void mb_history_close(mb_history *h);

#endif
