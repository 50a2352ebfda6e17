/* test_history.c - the execution log's writer thread against a real SQLite file: rows from many
 * threads all arrive, flush waits for the commit, retention keeps the newest rows (in all, per
 * tenant, by age), close commits what is queued, max_rows=0 records nothing, the journal's
 * fields arrive byte for byte with a random ref each, code over its bound and rows over the
 * queued-bytes bound are not kept, rows wait out a lock held past the busy timeout, and an
 * unopenable database is refused. */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "history.h"
#include "unit.h"

static char dir[64];
static char path[128];

static const char *SCHEMA =
	"CREATE TABLE executions (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL,"
	" started_at INTEGER NOT NULL, duration_ms REAL NOT NULL, outcome TEXT NOT NULL,"
	" instructions INTEGER, memory_peak INTEGER, code_hash TEXT, tool TEXT, ref TEXT, code TEXT,"
	" code_bytes INTEGER, context_bytes INTEGER, result_head TEXT, result_bytes INTEGER,"
	" output_head TEXT, output_bytes INTEGER, error TEXT, tools_called TEXT, rerun_of TEXT, principal TEXT)";

static mb_history_limits lim(int64_t max_rows)
{
	mb_history_limits l = { max_rows, max_rows, 0, 64, (int64_t)1 << 30 };
	return l;
}

static mb_history *open_h(int64_t max_rows, int busy_ms, char *err, size_t errlen)
{
	mb_history_limits l = lim(max_rows);
	mb_history_store st = { path, NULL, busy_ms };
	return mb_history_open(&st, &l, err, errlen);
}

static void fresh_db(void)
{
	static int n;
	snprintf(path, sizeof path, "%s/h%d.db", dir, n++);
	sqlite3 *db;
	sqlite3_open(path, &db);
	sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
	sqlite3_exec(db, SCHEMA, NULL, NULL, NULL);
	sqlite3_close(db);
}

static long long scalar(const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	long long v = -1;
	sqlite3_open(path, &db);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

static void add(mb_history *h, int i, const char *tenant)
{
	char hash[33];
	snprintf(hash, sizeof hash, "%032x", i);
	mb_history_row r = { tenant, 1000 + i, 0.5, i % 2 ? "ok" : "timeout", i, 2 * i, hash,
			     "execute_code", .code = NULL };
	mb_history_add(h, &r, NULL);
}

TEST(rows_arrive_with_their_fields)
{
	fresh_db();
	char err[256];
	mb_history *h = open_h(100, 1000, err, sizeof err);
	CHECK(h != NULL);
	if (!h)
		return;
	add(h, 1, "t1");
	add(h, 2, "t2");
	mb_history_flush(h);
	CHECK(scalar("SELECT count(*) FROM executions") == 2);
	CHECK(scalar("SELECT instructions FROM executions WHERE tenant = 't1' AND outcome = 'ok'"
		     " AND code_hash = '00000000000000000000000000000001' AND started_at = 1001") == 1);
	CHECK(scalar("SELECT memory_peak FROM executions WHERE tenant = 't2' AND outcome = 'timeout'") == 4);
	uint64_t dropped, failed;
	mb_history_counters(h, &dropped, &failed);
	CHECK(dropped == 0 && failed == 0);
	mb_history_close(h);
}

TEST(flush_with_nothing_queued_returns)
{
	fresh_db();
	char err[256];
	mb_history *h = open_h(100, 1000, err, sizeof err);
	CHECK(h != NULL);
	mb_history_flush(h);
	mb_history_flush(h);
	CHECK(scalar("SELECT count(*) FROM executions") == 0);
	mb_history_close(h);
}

TEST(retention_keeps_the_newest)
{
	fresh_db();
	char err[256];
	mb_history *h = open_h(10, 1000, err, sizeof err);
	for (int i = 0; i < 25; i++)
		add(h, i, "default");
	mb_history_flush(h);
	CHECK(scalar("SELECT count(*) FROM executions") == 10);
	CHECK(scalar("SELECT min(instructions) FROM executions") == 15);
	CHECK(scalar("SELECT max(instructions) FROM executions") == 24);
	for (int i = 25; i < 30; i++)
		add(h, i, "default");
	mb_history_flush(h);
	CHECK(scalar("SELECT count(*) FROM executions") == 10);
	CHECK(scalar("SELECT min(instructions) FROM executions") == 20);
	mb_history_close(h);
}

static mb_history *shared;

static void adder(void *arg)
{
	int base = (int)(intptr_t)arg;
	for (int i = 0; i < 500; i++)
		add(shared, base + i, "threads");
}

TEST(many_threads_lose_nothing)
{
	fresh_db();
	char err[256];
	shared = open_h(100000, 5000, err, sizeof err);
	CHECK(shared != NULL);
	if (!shared)
		return;
	uv_thread_t t[4];
	for (int i = 0; i < 4; i++)
		uv_thread_create(&t[i], adder, (void *)(intptr_t)(i * 1000));
	for (int i = 0; i < 4; i++)
		uv_thread_join(&t[i]);
	mb_history_flush(shared);
	CHECK(scalar("SELECT count(*) FROM executions") == 2000);
	CHECK(scalar("SELECT count(DISTINCT instructions) FROM executions") == 2000);
	mb_history_close(shared);
}

TEST(close_commits_what_is_queued)
{
	fresh_db();
	char err[256];
	mb_history *h = open_h(100, 1000, err, sizeof err);
	for (int i = 0; i < 7; i++)
		add(h, i, "default");
	mb_history_close(h); /* no flush first */
	CHECK(scalar("SELECT count(*) FROM executions") == 7);
}

TEST(max_rows_zero_records_nothing)
{
	fresh_db();
	char err[256];
	mb_history *h = open_h(0, 1000, err, sizeof err);
	add(h, 1, "default");
	mb_history_flush(h);
	mb_history_close(h);
	CHECK(scalar("SELECT count(*) FROM executions") == 0);
}

static long long count_where(const char *sql, const char *arg, int arglen)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	long long v = -1;
	sqlite3_open(path, &db);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, arg, arglen, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW)
			v = sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

TEST(journal_fields_arrive_byte_for_byte)
{
	fresh_db();
	char err[256];
	mb_history *h = open_h(100, 1000, err, sizeof err);
	CHECK(h != NULL);
	if (!h)
		return;
	static const char code[] = "return 'a\0b'";
	static const char out[] = "line\0two\n";
	mb_history_row r = { "t1", 5, 1.5, "ok", 10, 20, "ab", "execute_code",
			     .code = code, .code_len = sizeof code - 1, .context_bytes = 17,
			     .result_head = "\"a\\u0000b\"", .result_head_len = 10, .result_bytes = 10,
			     .output_head = out, .output_head_len = sizeof out - 1, .output_bytes = 900,
			     .tools = "srv.echo\nsrv.add", .tools_len = 16, .rerun_of = "0123456789abcdef",
			     .principal = "alice@example.com" };
	char ref1[17], ref2[17];
	mb_history_add(h, &r, ref1);
	mb_history_row big = { "t1", 6, 1, "syntax", 0, 0, NULL, "execute_code",
			       .code = "x = 1 -- a comment that makes this code longer than 64 bytes .......",
			       .code_len = 70, .error = "oops", .error_len = 4 };
	mb_history_add(h, &big, ref2);
	mb_history_flush(h);
	/* the ref handed back when queued is the row's */
	CHECK(strlen(ref1) == 16 && strlen(ref2) == 16 && strcmp(ref1, ref2) != 0);
	CHECK(count_where("SELECT count(*) FROM executions WHERE ref = ? AND context_bytes = 17", ref1, 16) == 1);
	CHECK(count_where("SELECT count(*) FROM executions WHERE ref = ? AND outcome = 'syntax'", ref2, 16) == 1);
	CHECK(count_where("SELECT count(*) FROM executions WHERE code = ?", code, sizeof code - 1) == 1);
	CHECK(count_where("SELECT count(*) FROM executions WHERE output_head = ?", out, sizeof out - 1) == 1);
	CHECK(scalar("SELECT count(*) FROM executions WHERE context_bytes = 17 AND result_bytes = 10"
		     " AND output_bytes = 900 AND code_bytes = 12 AND result_head = '\"a\\u0000b\"'"
		     " AND tools_called = 'srv.echo' || char(10) || 'srv.add'"
		     " AND rerun_of = '0123456789abcdef' AND principal = 'alice@example.com'"
		     " AND error IS NULL") == 1);
	/* code over max_code_bytes: size kept, text not */
	CHECK(scalar("SELECT count(*) FROM executions WHERE code IS NULL AND code_bytes = 70"
		     " AND error = 'oops' AND outcome = 'syntax'") == 1);
	/* every row has its own 16-hex-digit ref */
	CHECK(scalar("SELECT count(DISTINCT ref) FROM executions WHERE length(ref) = 16"
		     " AND ref NOT GLOB '*[^0-9a-f]*'") == 2);
	mb_history_close(h);
}

TEST(retention_per_tenant_spares_the_others)
{
	fresh_db();
	char err[256];
	mb_history_limits l = { 1000, 5, 0, 64, (int64_t)1 << 30 };
	mb_history *h = mb_history_open(&(mb_history_store){ path, NULL, 1000 }, &l, err, sizeof err);
	CHECK(h != NULL);
	if (!h)
		return;
	for (int i = 0; i < 3; i++)
		add(h, i, "quiet");
	mb_history_flush(h);
	for (int i = 100; i < 150; i++)
		add(h, i, "busy");
	mb_history_flush(h);
	for (int i = 150; i < 160; i++)
		add(h, i, "busy");
	mb_history_flush(h);
	CHECK(scalar("SELECT count(*) FROM executions WHERE tenant = 'quiet'") == 3);
	CHECK(scalar("SELECT count(*) FROM executions WHERE tenant = 'busy'") == 5);
	CHECK(scalar("SELECT min(instructions) FROM executions WHERE tenant = 'busy'") == 155);
	mb_history_close(h);
}

TEST(retention_by_age)
{
	fresh_db();
	char err[256];
	mb_history_limits l = { 1000, 1000, 60000, 64, (int64_t)1 << 30 };
	mb_history *h = mb_history_open(&(mb_history_store){ path, NULL, 1000 }, &l, err, sizeof err);
	CHECK(h != NULL);
	if (!h)
		return;
	add(h, 1, "old"); /* started_ms 1001: 1970 */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	mb_history_row now = { "new", (int64_t)ts.tv_sec * 1000, 1, "ok", 7, 0, NULL, "execute_code", .code = NULL };
	mb_history_add(h, &now, NULL);
	mb_history_flush(h);
	CHECK(scalar("SELECT count(*) FROM executions WHERE tenant = 'old'") == 0);
	CHECK(scalar("SELECT count(*) FROM executions WHERE tenant = 'new'") == 1);
	mb_history_close(h);
}

TEST(queued_bytes_bound_drops_rows)
{
	fresh_db();
	char err[256];
	mb_history_limits l = { 1000, 1000, 0, 64, 100 };
	mb_history *h = mb_history_open(&(mb_history_store){ path, NULL, 1000 }, &l, err, sizeof err);
	CHECK(h != NULL);
	if (!h)
		return;
	char out[60];
	memset(out, 'x', sizeof out);
	for (int i = 0; i < 3; i++) {
		mb_history_row r = { "t", i, 1, "ok", i, 0, NULL, "execute_code", .output_head = out,
				     .output_head_len = sizeof out, .output_bytes = sizeof out };
		char ref[17] = "x";
		mb_history_add(h, &r, ref); /* with the second, more than 100 bytes: dropped */
		CHECK(i == 0 ? strlen(ref) == 16 : ref[0] == 0); /* a dropped row has no id */
	}
	mb_history_flush(h);
	uint64_t dropped, failed;
	mb_history_counters(h, &dropped, &failed);
	CHECK(dropped == 2 && failed == 0);
	CHECK(scalar("SELECT count(*) FROM executions") == 1);
	add(h, 5, "t"); /* the queue emptied: rows fit again */
	mb_history_flush(h);
	CHECK(scalar("SELECT count(*) FROM executions") == 2);
	mb_history_close(h);
}

/* Another process on the data directory holds the write lock past the busy timeout: the rows of
 * that round stay queued and are written once the lock is free (before, they were dropped, and
 * the ids already given to clients were not found). SQLITE_FULL, the disk full, takes the same
 * path; tests/soak/chaos.test.mjs fills a real disk. */
TEST(rows_wait_out_a_lock_held_past_the_busy_timeout)
{
	fresh_db();
	char err[256];
	mb_history *h = open_h(100, 20, err, sizeof err);
	CHECK(h != NULL);
	if (!h)
		return;
	sqlite3 *other;
	sqlite3_open(path, &other);
	CHECK(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
	for (int i = 0; i < 5; i++)
		add(h, i, "default");
	/* wait (bounded) until the writer has tried and failed on the lock at least once */
	uint64_t dropped = 0, failed = 0;
	for (int i = 0; i < 1000 && failed == 0; i++) {
		mb_history_counters(h, &dropped, &failed);
		if (failed == 0)
			usleep(10000);
	}
	CHECK(failed >= 1);
	CHECK(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(other);
	long long n = 0;
	for (int i = 0; i < 1000 && n != 5; i++) { /* the next round, a second later */
		mb_history_flush(h);
		n = scalar("SELECT count(*) FROM executions");
		if (n != 5)
			usleep(10000);
	}
	CHECK(n == 5);
	mb_history_counters(h, &dropped, &failed);
	CHECK(dropped == 0);
	mb_history_close(h);
}

TEST(refuses_a_database_without_the_table)
{
	snprintf(path, sizeof path, "%s/empty.db", dir);
	sqlite3 *db;
	sqlite3_open(path, &db);
	sqlite3_close(db);
	char err[256] = "";
	mb_history *h = open_h(10, 1000, err, sizeof err);
	CHECK(h == NULL);
	CHECK(strstr(err, "empty.db: history: no such table: executions") != NULL);
	snprintf(path, sizeof path, "%s/missing/none.db", dir);
	h = open_h(10, 1000, err, sizeof err);
	CHECK(h == NULL);
	CHECK(strstr(err, "none.db: history:") != NULL);
}

int main(void)
{
	if (unit_tmpdir(dir, sizeof dir, "/tmp/mb-history-XXXXXX") != 0)
		return 1;
	RUN(rows_arrive_with_their_fields);
	RUN(flush_with_nothing_queued_returns);
	RUN(retention_keeps_the_newest);
	RUN(many_threads_lose_nothing);
	RUN(close_commits_what_is_queued);
	RUN(max_rows_zero_records_nothing);
	RUN(journal_fields_arrive_byte_for_byte);
	RUN(rows_wait_out_a_lock_held_past_the_busy_timeout);
	RUN(retention_per_tenant_spares_the_others);
	RUN(retention_by_age);
	RUN(queued_bytes_bound_drops_rows);
	RUN(refuses_a_database_without_the_table);
	unit_rmtree(dir);
	return UNIT_END();
}
