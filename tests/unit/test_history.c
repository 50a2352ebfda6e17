/* test_history.c - the execution log's writer thread against a real SQLite file: rows from many
 * threads all arrive, flush waits for the commit, retention keeps the newest rows, close commits
 * what is queued, max_rows=0 records nothing, and an unopenable database is refused. */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "history.h"
#include "unit.h"

static char dir[64];
static char path[128];

static const char *SCHEMA =
	"CREATE TABLE executions (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL,"
	" started_at INTEGER NOT NULL, duration_ms REAL NOT NULL, outcome TEXT NOT NULL,"
	" instructions INTEGER, memory_peak INTEGER, code_hash TEXT, tool TEXT)";

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
			     "execute_code" };
	mb_history_add(h, &r);
}

TEST(rows_arrive_with_their_fields)
{
	fresh_db();
	char err[256];
	mb_history *h = mb_history_open(path, 100, 1000, err, sizeof err);
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
	mb_history *h = mb_history_open(path, 100, 1000, err, sizeof err);
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
	mb_history *h = mb_history_open(path, 10, 1000, err, sizeof err);
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
	shared = mb_history_open(path, 100000, 5000, err, sizeof err);
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
	mb_history *h = mb_history_open(path, 100, 1000, err, sizeof err);
	for (int i = 0; i < 7; i++)
		add(h, i, "default");
	mb_history_close(h); /* no flush first */
	CHECK(scalar("SELECT count(*) FROM executions") == 7);
}

TEST(max_rows_zero_records_nothing)
{
	fresh_db();
	char err[256];
	mb_history *h = mb_history_open(path, 0, 1000, err, sizeof err);
	add(h, 1, "default");
	mb_history_flush(h);
	mb_history_close(h);
	CHECK(scalar("SELECT count(*) FROM executions") == 0);
}

TEST(refuses_a_database_without_the_table)
{
	snprintf(path, sizeof path, "%s/empty.db", dir);
	sqlite3 *db;
	sqlite3_open(path, &db);
	sqlite3_close(db);
	char err[256] = "";
	mb_history *h = mb_history_open(path, 10, 1000, err, sizeof err);
	CHECK(h == NULL);
	CHECK(strstr(err, "empty.db: history: no such table: executions") != NULL);
	snprintf(path, sizeof path, "%s/missing/none.db", dir);
	h = mb_history_open(path, 10, 1000, err, sizeof err);
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
	RUN(refuses_a_database_without_the_table);
	unit_rmtree(dir);
	return UNIT_END();
}
