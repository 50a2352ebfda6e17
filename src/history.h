/* history.h - the execution log and journal, written to the store by its own thread.
 *
 * Every execution adds one row (tenant, start, duration, outcome, instructions, peak memory,
 * code hash, tool) and its journal fields (docs/journal.md): the code up to max_code_bytes, the
 * first bytes of its result, output and error as the model saw them, the upstream tools it
 * called, the size of its context_vars. Adding copies the row into a buffer under a mutex; a
 * writer thread with its own SQLite connection to the same database file commits the buffer
 * once a second in one transaction and then trims the table: the newest
 * tenant_max_rows rows of each tenant written to, the newest max_rows rows in all, and once a
 * minute nothing older than max_age_ms. So the loop thread copies a row per
 * execution instead of running an INSERT (docs/benchmarks.md, "Session 2", has what that saved)
 * and never waits for an fsync. The cost: rows of the last second are lost if the process is
 * killed. With the store on PostgreSQL (store_url) the writer has its own blocking libpq
 * connection instead, inserts many rows per statement, trims in a second transaction under an
 * advisory lock (replicas trim one at a time), and keeps rows queued while PostgreSQL is down.
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
	/* the journal: bytes as the model saw them (already tokenized by pii_policy); any may be
	 * NULL. Strings are copied; code longer than max_code_bytes is not (code_len is kept). */
	const char *code;
	size_t code_len;
	int64_t context_bytes;   /* size of the context_vars JSON */
	const char *result_head; /* the first bytes of the result's JSON text */
	size_t result_head_len;
	int64_t result_bytes;    /* its whole size */
	const char *output_head;
	size_t output_head_len;
	int64_t output_bytes;
	const char *error;       /* (the first bytes of) the error message, NULL on success */
	size_t error_len;
	const char *tools;       /* upstream tools called, "server.tool" lines */
	size_t tools_len;
	const char *rerun_of;    /* the ref of the execution this one reran */
	const char *principal;   /* who ran it (an OAuth token's sub), NULL when not known */
} mb_history_row;

typedef struct mb_history_limits {
	int64_t max_rows;        /* rows kept in all (0 = keep none: adding does nothing) */
	int64_t tenant_max_rows; /* rows kept per tenant */
	int64_t max_age_ms;      /* rows older than this are dropped (0 = no age limit) */
	int64_t max_code_bytes;  /* code kept with a row */
	int64_t max_queued_bytes;/* bytes waiting for the writer; rows beyond are dropped */
} mb_history_limits;

/* Where the rows go: the SQLite file of the store, or PostgreSQL (store_url). */
typedef struct mb_history_store {
	const char *db_path;     /* SQLite: the database file; used when pg_conninfo is NULL or "" */
	const char *pg_conninfo; /* PostgreSQL: a libpq connection string or postgres:// URL */
	int timeout_ms;          /* SQLite: how long a commit waits for the other connection's lock;
	                          * PostgreSQL: connect_timeout (rounded up to seconds, at least 2)
	                          * and statement_timeout of the writer's connection */
} mb_history_store;

/// Opens a connection of its own to the store (which must already exist with the executions
/// table) and starts the writer thread. On PostgreSQL the connection is a blocking libpq one
/// (the writer is not the loop thread); when it breaks, queued rows stay queued (within the
/// same bounds) and are written once the writer has connected again (it retries every second).
/// @param st   where to write (copied)
/// @param lim  retention and sizes (copied)
/// @returns the history, or NULL with err set
mb_history *mb_history_open(const mb_history_store *st, const mb_history_limits *lim, char *err,
			    size_t errlen);

/// Queues a row (strings are copied). Never blocks on SQLite. Rows beyond 100,000 waiting, or
/// beyond max_queued_bytes of strings, are dropped (and counted) rather than letting memory grow.
/// Each row gets an opaque id (`ref`, 16 hex digits: SipHash-2-4 of a counter under a key drawn
/// at open, so unguessable from other rows' ids and known at once: execute_code answers with it).
/// ref (may be NULL) receives it, or "" when the row was not queued (history off, queue full).
void mb_history_add(mb_history *h, const mb_history_row *row, char ref[17]);

/// Waits until every row queued before the call is committed (or the writer tried and failed).
/// While PostgreSQL is unreachable it does not wait: the rows stay queued for later.
void mb_history_flush(mb_history *h);

/// Rows dropped because the queue was full, and commits that failed.
void mb_history_counters(mb_history *h, uint64_t *dropped, uint64_t *failed);

/// Whether the writer is down: its last write failed for a reason that passes (PostgreSQL
/// unreachable, the disk full, a lock held past the busy timeout) and the rows wait in the queue.
/// @param queued set to the number of rows waiting
/// @param msg    receives that failure's message (n bytes, NUL-terminated), when down
/// @returns 1 when down, else 0
int mb_history_outage(mb_history *h, size_t *queued, char *msg, size_t n);

/// Commits what is queued, stops the thread and closes its connection.
void mb_history_close(mb_history *h);

#endif
