/* test_store.c - the SQLite store on real files in a temporary directory: creation and its mode,
 * WAL and pragmas, migrations (forward, idempotent, newer schema refused, failure rolled back,
 * transaction control refused), refusal of files that are not healthy databases without touching
 * them (garbage header, garbage pages, text, directory, unreadable, read-only, dangling link),
 * durability across kill -9, the busy timeout, and the whole mb.db Lua API through a real
 * lua_State: parameter types, exact integers, binary strings, errors, tx and nested tx, yields
 * refused, and the statement cache past its 64 entries. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"
#include "json.h"
#include "store.h"
#include "unit.h"

static char tmpdir[64];
static char err[2048];

/* dir/name into a static rotating buffer */
static const char *P(const char *name)
{
	static char bufs[8][512];
	static int i;
	char *b = bufs[i++ & 7];
	snprintf(b, 512, "%s/%s", tmpdir, name);
	return b;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	fwrite(data, 1, n, f);
	fclose(f);
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static int contains(const char *hay, const char *needle)
{
	return hay && strstr(hay, needle) != NULL;
}

/* One SQL query that returns a single integer. */
static long long q_int(mb_store *s, const char *sql)
{
	sqlite3_stmt *st;
	long long v = -999;
	if (sqlite3_prepare_v2(mb_store_db(s), sql, -1, &st, NULL) != SQLITE_OK)
		return -998;
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static int table_exists(mb_store *s, const char *name)
{
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_schema WHERE name = '%s'", name);
	return q_int(s, sql) == 1;
}

/* A database with some pages of data, closed (checkpointed into the main file). With
 * rollback set it is left in rollback-journal mode, like a database from an older program:
 * switching it to WAL would rewrite its header, so refusing it must happen before that. */
static void make_db_mode(const char *path, int rollback)
{
	mb_store *s = NULL;
	unlink(path);
	if (mb_store_open(&s, path, 1000, err, sizeof err) != 0) {
		fprintf(stderr, "make_db: %s\n", err);
		return;
	}
	sqlite3_exec(mb_store_db(s), "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
		     "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 500) "
		     "INSERT INTO t(v) SELECT printf('%0200d', i) FROM c;", NULL, NULL, NULL);
	if (rollback)
		sqlite3_exec(mb_store_db(s), "PRAGMA journal_mode=DELETE", NULL, NULL, NULL);
	mb_store_close(s);
}

static void make_db(const char *path)
{
	make_db_mode(path, 0);
}

/* ---- opening ------------------------------------------------------------------------------ */

TEST(open_creates_0600_wal)
{
	const char *path = P("new.db");
	mb_store *s = NULL;
	CHECK(!exists(path));
	CHECK(mb_store_open(&s, path, 500, err, sizeof err) == 0);
	if (!s)
		return;
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK_STR(mb_store_path(s), path);
	sqlite3_stmt *q;
	/* WAL comes with a successful migration (a refused file keeps its journal mode) */
	CHECK(sqlite3_prepare_v2(mb_store_db(s), "PRAGMA journal_mode", -1, &q, NULL) == SQLITE_OK);
	CHECK(sqlite3_step(q) == SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(q, 0), "delete");
	sqlite3_finalize(q);
	CHECK(mb_store_migrate(s, NULL, 0, err, sizeof err) == 0);
	CHECK(sqlite3_prepare_v2(mb_store_db(s), "PRAGMA journal_mode", -1, &q, NULL) == SQLITE_OK);
	CHECK(sqlite3_step(q) == SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(q, 0), "wal");
	sqlite3_finalize(q);
	CHECK(q_int(s, "PRAGMA synchronous") == 2); /* FULL */
	CHECK(q_int(s, "PRAGMA foreign_keys") == 1);
	CHECK(q_int(s, "PRAGMA busy_timeout") == 500);
	CHECK(sqlite3_exec(mb_store_db(s), "CREATE TABLE x(a)", NULL, NULL, NULL) == SQLITE_OK);
	/* the WAL and shared-memory files get the database's mode */
	CHECK(stat(P("new.db-wal"), &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK(stat(P("new.db-shm"), &st) == 0 && (st.st_mode & 0777) == 0600);
	mb_store_close(s);
	/* reopening keeps the data */
	s = NULL;
	CHECK(mb_store_open(&s, path, 500, err, sizeof err) == 0);
	if (s)
		CHECK(table_exists(s, "x"));
	mb_store_close(s);
	mb_store_close(NULL);
}

TEST(open_empty_file_is_a_new_database)
{
	const char *path = P("empty.db");
	write_bytes(path, "", 0);
	mb_store *s = NULL;
	CHECK(mb_store_open(&s, path, 0, err, sizeof err) == 0);
	mb_store_close(s);
}

/* Opening must fail naming the file, leave its bytes as they were and create nothing beside. */
static void check_refused(const char *path, const char *expect_part)
{
	size_t n0 = 0, n1 = 0;
	char *before = unit_read_file(path, &n0);
	char wal[600], shm[600];
	snprintf(wal, sizeof wal, "%s-wal", path);
	snprintf(shm, sizeof shm, "%s-shm", path);
	mb_store *s = NULL;
	err[0] = 0;
	CHECK(mb_store_open(&s, path, 100, err, sizeof err) == -1);
	CHECK(s == NULL);
	CHECK(strncmp(err, path, strlen(path)) == 0);
	CHECK(contains(err, expect_part));
	CHECK(contains(err, "moonbox will not start over it"));
	char *after = unit_read_file(path, &n1);
	CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
	CHECK(!exists(wal));
	CHECK(!exists(shm));
	if (!contains(err, expect_part))
		fprintf(stderr, "  message was: %s\n", err);
	free(before);
	free(after);
}

TEST(refuses_garbage_header)
{
	const char *path = P("garbage_header.db");
	make_db(path);
	size_t n;
	char *b = unit_read_file(path, &n);
	CHECK(b && n > 8192);
	if (!b)
		return;
	for (int i = 0; i < 100; i++)
		b[i] = (char)(0x5a ^ i);
	write_bytes(path, b, n);
	free(b);
	check_refused(path, ": file is not a database (SQLite: file is not a database); moonbox "
		      "will not start over it - move it aside or restore a backup");
}

TEST(refuses_garbage_pages)
{
	const char *path = P("garbage_pages.db");
	make_db_mode(path, 1);
	size_t n;
	char *b = unit_read_file(path, &n);
	CHECK(b && n > 8192);
	if (!b)
		return;
	CHECK(b[18] == 1 && b[19] == 1); /* rollback-journal mode in the header */
	unsigned x = 12345;
	for (size_t i = 4096; i < n; i++) { /* keep page 1 (header and schema) */
		x = x * 1103515245u + 12345u;
		b[i] = (char)(x >> 16);
	}
	write_bytes(path, b, n);
	free(b);
	check_refused(path, ": database file is corrupt (");
}

TEST(refuses_text_files)
{
	const char *path = P("notes.txt");
	char text[3000];
	memset(text, 0, sizeof text);
	for (int i = 0; i < 60; i++)
		strcat(text, "these are somebody's notes, not a database\n");
	write_bytes(path, text, strlen(text));
	check_refused(path, ": file is not a database (SQLite: file is not a database)");
	const char *small = P("small.txt"); /* shorter than SQLite's header */
	write_bytes(small, "hello\n", 6);
	check_refused(small, ": file is not a database");
}

TEST(refuses_directory)
{
	const char *path = P("adir.db");
	mkdir(path, 0700);
	mb_store *s = NULL;
	CHECK(mb_store_open(&s, path, 0, err, sizeof err) == -1);
	char want[1024];
	snprintf(want, sizeof want, "%s: is a directory, not a database file; moonbox will not start "
		 "over it - move it aside or choose another data directory", path);
	CHECK_STR(err, want);
	CHECK(s == NULL);
}

TEST(refuses_missing_parent_and_dangling_link)
{
	mb_store *s = NULL;
	const char *path = P("no/such/dir/x.db");
	CHECK(mb_store_open(&s, path, 0, err, sizeof err) == -1);
	char want[1024];
	snprintf(want, sizeof want, "%s: cannot create the database file (No such file or directory); "
		 "check that its directory exists and is writable", path);
	CHECK_STR(err, want);
	const char *link = P("dangling.db");
	CHECK(symlink(P("nowhere.db"), link) == 0);
	CHECK(mb_store_open(&s, link, 0, err, sizeof err) == -1);
	CHECK(contains(err, ": is a symbolic link to a missing file; moonbox will not create a "
		       "database through it"));
	CHECK(!exists(P("nowhere.db")));
	CHECK(mb_store_open(&s, "", 0, err, sizeof err) == -1);
	CHECK_STR(err, "store: the database path is empty");
}

/* Runs the permission checks as an unprivileged user: the checks themselves when not root, in a
 * child that drops to uid/gid 65534 when root. The child reports through its exit status. */
static int perm_checks(void)
{
	int bad = 0;
	/* unreadable */
	const char *path = P("perm/unreadable.db");
	make_db(path);
	chmod(path, 0000);
	mb_store *s = NULL;
	if (mb_store_open(&s, path, 0, err, sizeof err) != -1 ||
	    !contains(err, "/perm/unreadable.db: cannot open for reading and writing (Permission "
		      "denied); moonbox will not start over it")) {
		fprintf(stderr, "  unreadable: %s\n", err);
		bad = 1;
	}
	/* read-only: refused too (SQLite would silently open it read-only) */
	const char *ro = P("perm/readonly.db");
	if (mb_store_open(&s, ro, 0, err, sizeof err) != -1 ||
	    !contains(err, "/perm/readonly.db: cannot open for reading and writing (Permission "
		      "denied)")) {
		fprintf(stderr, "  read-only: %s\n", err);
		bad = 1;
	}
	return bad;
}

TEST(refuses_unreadable_and_readonly)
{
	mkdir(P("perm"), 0777);
	chmod(P("perm"), 0777);
	chmod(tmpdir, 0755);
	make_db(P("perm/readonly.db"));
	chmod(P("perm/readonly.db"), 0444);
	size_t n0, n1;
	make_db(P("perm/unreadable.db"));
	char *before = unit_read_file(P("perm/unreadable.db"), &n0);
	if (geteuid() != 0) {
		CHECK(perm_checks() == 0);
	} else {
		printf("note: running as root, where file permissions do not apply: checking the "
		       "unreadable and read-only files as uid 65534 in a child process\n");
		fflush(stdout);
		fflush(stderr);
		pid_t pid = fork();
		if (pid == 0) {
			if (setgid(65534) != 0 || setuid(65534) != 0)
				_exit(77);
			_exit(perm_checks());
		}
		int status = 0;
		waitpid(pid, &status, 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
			printf("note: cannot drop to uid 65534; unreadable-file check SKIPPED\n");
		else
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	chmod(P("perm/unreadable.db"), 0600);
	char *after = unit_read_file(P("perm/unreadable.db"), &n1);
	CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
	free(before);
	free(after);
	chmod(tmpdir, 0700);
}

/* ---- migrations --------------------------------------------------------------------------- */

TEST(migrate_forward_idempotent_newer)
{
	const char *path = P("mig.db");
	mb_store *s = NULL;
	CHECK(mb_store_open(&s, path, 0, err, sizeof err) == 0);
	if (!s)
		return;
	const char *steps[] = {
		"CREATE TABLE a(x INTEGER);",
		"CREATE TABLE b(y TEXT); INSERT INTO a VALUES (1);",
		"CREATE INDEX a_x ON a(x)",
		"CREATE TABLE d(z)",
	};
	CHECK(q_int(s, "PRAGMA user_version") == 0);
	CHECK(mb_store_migrate(s, steps, 0, err, sizeof err) == 0);
	CHECK(mb_store_migrate(s, steps, 3, err, sizeof err) == 0);
	CHECK(q_int(s, "PRAGMA user_version") == 3);
	CHECK(table_exists(s, "a") && table_exists(s, "b") && table_exists(s, "a_x"));
	CHECK(q_int(s, "SELECT count(*) FROM a") == 1);
	/* re-run: nothing applied twice */
	CHECK(mb_store_migrate(s, steps, 3, err, sizeof err) == 0);
	CHECK(q_int(s, "SELECT count(*) FROM a") == 1);
	/* one more step appended: only it runs */
	CHECK(mb_store_migrate(s, steps, 4, err, sizeof err) == 0);
	CHECK(q_int(s, "PRAGMA user_version") == 4);
	CHECK(table_exists(s, "d"));
	CHECK(q_int(s, "SELECT count(*) FROM a") == 1);
	/* an older moonbox refuses */
	CHECK(mb_store_migrate(s, steps, 3, err, sizeof err) == -1);
	char want[1024];
	snprintf(want, sizeof want, "%s: schema version 4 is newer than this moonbox knows (3); "
		 "upgrade moonbox", path);
	CHECK_STR(err, want);
	CHECK(q_int(s, "PRAGMA user_version") == 4);
	CHECK(mb_store_migrate(s, steps, -1, err, sizeof err) == -1);
	mb_store_close(s);
}

TEST(migrate_failure_rolls_back)
{
	const char *path = P("migfail.db");
	mb_store *s = NULL;
	CHECK(mb_store_open(&s, path, 0, err, sizeof err) == 0);
	if (!s)
		return;
	const char *steps[] = {
		"CREATE TABLE a(x)",
		"CREATE TABLE half1(x); INSERT INTO a VALUES (7); CREATE TABLE half2(x); "
		"INSERT INTO nope VALUES (1); CREATE TABLE never(x)",
	};
	CHECK(mb_store_migrate(s, steps, 2, err, sizeof err) == -1);
	char want[1024];
	snprintf(want, sizeof want, "%s: migration 2 of 2 failed: no such table: nope; the database "
		 "stays at schema version 1", path);
	CHECK_STR(err, want);
	CHECK(q_int(s, "PRAGMA user_version") == 1);
	CHECK(table_exists(s, "a"));
	CHECK(!table_exists(s, "half1") && !table_exists(s, "half2") && !table_exists(s, "never"));
	CHECK(q_int(s, "SELECT count(*) FROM a") == 0);
	CHECK(sqlite3_get_autocommit(mb_store_db(s)) == 1);

	/* syntax error */
	const char *bad[] = { "CREATE TABLE a(x)", "CREAT TABLE z(x)" };
	CHECK(mb_store_migrate(s, bad, 2, err, sizeof err) == -1);
	CHECK(contains(err, ": migration 2 of 2 failed: near \"CREAT\": syntax error; the database "
		       "stays at schema version 1"));
	/* a migration may not commit or roll back the transaction it runs in */
	const char *txs[] = { "CREATE TABLE a(x)", "CREATE TABLE c1(x); COMMIT; CREATE TABLE c2(x)" };
	CHECK(mb_store_migrate(s, txs, 2, err, sizeof err) == -1);
	CHECK(contains(err, ": migration 2 of 2 failed: transaction control (BEGIN, COMMIT, ROLLBACK, "
		       "SAVEPOINT, RELEASE) is not allowed in a migration; the database stays at "
		       "schema version 1"));
	CHECK(!table_exists(s, "c1") && !table_exists(s, "c2"));
	const char *sp[] = { "CREATE TABLE a(x)", "SAVEPOINT x; CREATE TABLE c3(x)" };
	CHECK(mb_store_migrate(s, sp, 2, err, sizeof err) == -1);
	CHECK(!table_exists(s, "c3"));
	const char *nul[] = { "CREATE TABLE a(x)", NULL };
	CHECK(mb_store_migrate(s, nul, 2, err, sizeof err) == -1);
	CHECK(contains(err, "migration 2 of 2 is missing"));
	CHECK(q_int(s, "PRAGMA user_version") == 1);
	/* and a good list still applies afterwards */
	const char *good[] = { "CREATE TABLE a(x)", "CREATE TABLE ok2(x)" };
	CHECK(mb_store_migrate(s, good, 2, err, sizeof err) == 0);
	CHECK(q_int(s, "PRAGMA user_version") == 2);
	mb_store_close(s);
}

/* ---- durability and locking --------------------------------------------------------------- */

TEST(acknowledged_write_survives_kill_9)
{
	const char *path = P("durable.db");
	int fds[2];
	CHECK(pipe(fds) == 0);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		mb_store *s = NULL;
		const char *steps[] = { "CREATE TABLE k(v TEXT)" };
		if (mb_store_open(&s, path, 0, err, sizeof err) != 0 ||
		    mb_store_migrate(s, steps, 1, err, sizeof err) != 0)
			_exit(3);
		lua_State *L = luaL_newstate();
		luaL_openlibs(L);
		mb_store_push_lua(L, s);
		lua_setglobal(L, "db");
		if (luaL_dostring(L, "db.tx(function() db.run('INSERT INTO k VALUES (?)', 'tx') end)"
				  " db.run('INSERT INTO k VALUES (?)', 'plain')") != LUA_OK)
			_exit(4);
		if (write(fds[1], "k", 1) != 1)
			_exit(5);
		for (;;)
			pause(); /* killed here: no close, no checkpoint */
	}
	close(fds[1]);
	char c = 0;
	CHECK(read(fds[0], &c, 1) == 1 && c == 'k');
	close(fds[0]);
	kill(pid, SIGKILL);
	int status;
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	CHECK(exists(P("durable.db-wal"))); /* the data is only in the WAL */
	mb_store *s = NULL;
	CHECK(mb_store_open(&s, path, 0, err, sizeof err) == 0);
	if (s) {
		CHECK(q_int(s, "SELECT count(*) FROM k WHERE v IN ('tx', 'plain')") == 2);
		CHECK(q_int(s, "PRAGMA user_version") == 1);
	}
	mb_store_close(s);
}

TEST(busy_timeout_applies)
{
	const char *path = P("busy.db");
	mb_store *a = NULL, *b = NULL;
	CHECK(mb_store_open(&a, path, 0, err, sizeof err) == 0);
	CHECK(mb_store_open(&b, path, 150, err, sizeof err) == 0);
	if (!a || !b)
		return;
	CHECK(sqlite3_exec(mb_store_db(a), "CREATE TABLE t(x)", NULL, NULL, NULL) == SQLITE_OK);
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	mb_store_push_lua(L, a);
	lua_setglobal(L, "A");
	mb_store_push_lua(L, b);
	lua_setglobal(L, "B");
	/* A holds the write lock while B tries to write: B waits ~150 ms, then fails */
	CHECK(luaL_dostring(L,
		"local t0 = os.clock()\n"
		"return A.tx(function()\n"
		"  A.run('INSERT INTO t VALUES (1)')\n"
		"  local ok, e = pcall(B.run, 'INSERT INTO t VALUES (2)')\n"
		"  return e\n"
		"end)") == LUA_OK);
	char want[1024];
	snprintf(want, sizeof want, "store: database is locked (%s)", path);
	CHECK_STR(lua_tostring(L, -1), want);
	lua_settop(L, 0);
	CHECK(q_int(b, "SELECT count(*) FROM t") == 1);
	lua_close(L);
	mb_store_close(a);
	mb_store_close(b);
}

/* ---- Lua API ------------------------------------------------------------------------------ */

static lua_State *L;
static mb_store *LS;
static char out[4096];

/* Runs a chunk; returns its first result as a string (tostring), or "ERR: <message>". */
static const char *lua(const char *code)
{
	int top = lua_gettop(L);
	if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
		const char *m = lua_tostring(L, -1);
		/* drop the caller's position luaL_error puts first: [string "..."]:1: */
		if (m && strncmp(m, "[string \"", 9) == 0 && strstr(m, "\"]:")) {
			const char *p = strstr(m, "\"]:") + 3;
			while (*p >= '0' && *p <= '9')
				p++;
			if (p[0] == ':' && p[1] == ' ')
				m = p + 2;
		}
		snprintf(out, sizeof out, "ERR: %s", m ? m : "(non-string error)");
	} else {
		snprintf(out, sizeof out, "%s", luaL_tolstring(L, -1, NULL));
	}
	lua_settop(L, top);
	return out;
}

/* Expected "ERR: store: <msg> (<path>)" */
static const char *store_err(const char *msg)
{
	static char buf[1024];
	snprintf(buf, sizeof buf, "ERR: store: %s (%s)", msg, mb_store_path(LS));
	return buf;
}

static void lua_setup(void)
{
	const char *path = P("lua.db");
	CHECK(mb_store_open(&LS, path, 100, err, sizeof err) == 0);
	L = luaL_newstate();
	*(mb_budget **)lua_getextraspace(L) = NULL;
	luaL_openlibs(L);
	lua_newtable(L);
	mb_store_push_lua(L, LS);
	lua_setfield(L, -2, "db");
	mb_json_push_null(L);
	lua_setfield(L, -2, "null");
	lua_setglobal(L, "mb");
	CHECK_STR(lua("db = mb.db return db.exec('CREATE TABLE t(k INTEGER PRIMARY KEY, "
		      "i INTEGER, f REAL, s TEXT, b BLOB, u UNIQUE)')"), "nil");
}

TEST(lua_exec_run_query_row)
{
	CHECK_STR(lua("return db.path"), mb_store_path(LS));
	CHECK_STR(lua("local c, id = db.run('INSERT INTO t(i, s) VALUES (?, ?)', 5, 'five')"
		      " return c .. ',' .. id"), "1,1");
	CHECK_STR(lua("local c, id = db.run('INSERT INTO t(i, s) VALUES (?, ?)', 6, 'six')"
		      " return c .. ',' .. id"), "1,2");
	CHECK_STR(lua("return #db.query('SELECT * FROM t ORDER BY k')"), "2");
	CHECK_STR(lua("local r = db.query('SELECT k, i, s FROM t ORDER BY k')"
		      " return r[2].k .. r[2].i .. r[2].s .. math.type(r[1].i)"), "26sixinteger");
	CHECK_STR(lua("return db.row('SELECT s FROM t WHERE i = ?', 6).s"), "six");
	CHECK_STR(lua("return db.row('SELECT s FROM t WHERE i = ?', 99)"), "nil");
	/* NULL columns are absent; the result is a JSON array even when empty */
	CHECK_STR(lua("local r = db.row('SELECT f, b, s FROM t WHERE k = 1')"
		      " return tostring(r.f) .. tostring(r.b) .. r.s"), "nilnilfive");
	CHECK_STR(lua("return getmetatable(db.query('SELECT 1 WHERE 0')) == "
		      "getmetatable(mb.db.query('SELECT 1'))"), "true");
	CHECK_STR(lua("local r = db.query('SELECT 1 WHERE 0') return #r .. tostring(next(r))"), "0nil");
	/* run returns changes of an UPDATE, and finishes statements that return rows */
	CHECK_STR(lua("return (db.run('UPDATE t SET f = ? WHERE k > ?', 0.25, 0))"), "2");
	CHECK_STR(lua("local c, id = db.run('INSERT INTO t(i) VALUES (7) RETURNING k') return c .. id"),
		  "13");
	CHECK_STR(lua("return db.exec('DELETE FROM t WHERE k = 3; UPDATE t SET i = i + 1')"), "nil");
	CHECK_STR(lua("return db.row('SELECT sum(i) AS n FROM t').n"), "13");
}

TEST(lua_parameter_types)
{
	lua("db.exec('DELETE FROM t')");
	/* integers are exact across the whole int64 range */
	CHECK_STR(lua("db.run('INSERT INTO t(k, i) VALUES (?, ?)', 100, (1 << 53) + 1)"
		      " local r = db.row('SELECT i FROM t WHERE k = 100')"
		      " return tostring(r.i == 9007199254740993) .. math.type(r.i) .. r.i"),
		  "trueinteger9007199254740993");
	CHECK_STR(lua("db.run('INSERT INTO t(k, i) VALUES (101, ?), (102, ?)', math.maxinteger,"
		      " math.mininteger) local a = db.row('SELECT i FROM t WHERE k = 101').i"
		      " local b = db.row('SELECT i FROM t WHERE k = 102').i"
		      " return tostring(a == math.maxinteger and b == math.mininteger)"), "true");
	/* floats stay floats */
	CHECK_STR(lua("db.run('INSERT INTO t(k, f) VALUES (103, ?)', 0.1)"
		      " local f = db.row('SELECT f FROM t WHERE k = 103').f"
		      " return math.type(f) .. tostring(f == 0.1)"), "floattrue");
	CHECK_STR(lua("return math.type(db.row('SELECT ? AS v', 2.0).v)"), "float");
	/* booleans as 0/1; nil and mb.null as NULL */
	CHECK_STR(lua("local r = db.row('SELECT ? AS a, ? AS b, ? IS NULL AS n1, ? IS NULL AS n2', "
		      "true, false, nil, mb.null) return r.a .. r.b .. r.n1 .. r.n2"), "1011");
	/* strings are binary-safe TEXT */
	CHECK_STR(lua("local s = 'a\\0b\\255\\0' db.run('INSERT INTO t(k, s) VALUES (104, ?)', s)"
		      " local r = db.row('SELECT s, typeof(s) AS ty, length(CAST(s AS BLOB)) AS n "
		      "FROM t WHERE k = 104') return tostring(r.s == s) .. #r.s .. r.ty .. r.n"),
		  "true5text5");
	CHECK_STR(lua("return db.row('SELECT x\\'00ff00\\' AS b').b == '\\0\\255\\0'"), "true");
	CHECK_STR(lua("local big = string.rep('xyz', 100000) db.run('INSERT INTO t(k, s) "
		      "VALUES (105, ?)', big) return db.row('SELECT s FROM t WHERE k = 105').s == big"),
		  "true");
	/* refusals name the parameter */
	CHECK_STR(lua("return db.query('SELECT ?, ?', 1, {})"),
		  "ERR: store: parameter 2 is a table; expected nil, boolean, number or string");
	CHECK_STR(lua("return db.row('SELECT ?', print)"),
		  "ERR: store: parameter 1 is a function; expected nil, boolean, number or string");
	CHECK_STR(lua("return db.run('SELECT ?', io.stdout)"),
		  "ERR: store: parameter 1 is a userdata; expected nil, boolean, number or string");
	CHECK_STR(lua("return db.run('SELECT ?', coroutine.create(print))"),
		  "ERR: store: parameter 1 is a thread; expected nil, boolean, number or string");
	CHECK_STR(lua("return db.query('SELECT ?, ?', 1)"),
		  store_err("the statement has 2 parameters but 1 value was given"));
	CHECK_STR(lua("return db.query('SELECT 1', 1, 2)"),
		  store_err("the statement has 0 parameters but 2 values were given"));
	CHECK_STR(lua("return db.row('SELECT ?1 + ?1 AS v', 4).v"), "8");
	/* after a refused binding the statement is clean: the same SQL works */
	CHECK_STR(lua("return db.row('SELECT ? AS a, ? AS b', 1, 2).b"), "2");
	CHECK_STR(lua("pcall(db.row, 'SELECT ? AS a, ? AS b', 'x', {}) "
		      "return db.row('SELECT ? AS a, ? AS b', 1, nil).a"), "1");
}

TEST(lua_errors)
{
	CHECK_STR(lua("return db.query('SELECT * FROM nope')"), store_err("no such table: nope"));
	CHECK_STR(lua("return db.exec('SELEC 1')"), store_err("near \"SELEC\": syntax error"));
	CHECK_STR(lua("db.run('INSERT INTO t(k, u) VALUES (1000, 1)')"
		      " return db.run('INSERT INTO t(k, u) VALUES (1001, 1)')"),
		  store_err("UNIQUE constraint failed: t.u"));
	CHECK_STR(lua("return db.query('SELECT 1; SELECT 2')"),
		  store_err("query, row and run take one statement; use exec for several"));
	CHECK_STR(lua("return #db.query('SELECT 1; ; -- trailing comment')"), "1");
	CHECK_STR(lua("return db.query('   ')"), store_err("the SQL text holds no statement"));
	CHECK_STR(lua("return db.query('SELECT 1\\0 DROP TABLE t')"),
		  store_err("the SQL text contains a NUL byte"));
	CHECK_STR(lua("return db.exec('SELECT 1\\0 DROP TABLE t')"),
		  store_err("the SQL text contains a NUL byte"));
	CHECK_STR(lua("return db.query(42)"), store_err("near \"42\": syntax error"));
	CHECK_STR(lua("return db.query({})"), "ERR: bad argument #1 to 'query' (string expected, got table)");
	/* transaction control belongs to tx */
	const char *txerr = "transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE) is not "
			    "allowed in SQL; use mb.db.tx";
	CHECK_STR(lua("return db.exec('BEGIN')"), store_err(txerr));
	CHECK_STR(lua("return db.exec('CREATE TABLE z1(x); COMMIT')"), store_err(txerr));
	CHECK_STR(lua("return db.run('COMMIT')"), store_err(txerr));
	CHECK_STR(lua("return db.query('SAVEPOINT a')"), store_err(txerr));
	CHECK_STR(lua("return db.tx(function() return db.run('RELEASE mb_tx') end)"), store_err(txerr));
	CHECK_STR(lua("return db.tx(function() db.exec('ROLLBACK') end)"), store_err(txerr));
	CHECK(sqlite3_get_autocommit(mb_store_db(LS)) == 1);
	/* an error in the middle of stepping leaves no read transaction open */
	CHECK_STR(lua("db.exec('CREATE TABLE m(x); INSERT INTO m VALUES (1), (2), (3), (4)')"
		      " return db.query('SELECT CASE WHEN x = 3 THEN abs(-9223372036854775807 - 1) "
		      "ELSE x END AS v FROM m')"), store_err("integer overflow"));
	CHECK_STR(lua("return db.row('PRAGMA wal_checkpoint(TRUNCATE)').busy"), "0");
	CHECK_STR(lua("return #db.query('SELECT CASE WHEN x = 3 THEN abs(-9223372036854775807 - 1) "
		      "ELSE x END AS v FROM m WHERE x < 3')"), "2");
}

TEST(lua_tx)
{
	lua("db.exec('CREATE TABLE tx1(v)')");
	/* commit, results passed through, arguments passed in */
	CHECK_STR(lua("local a, b, c = db.tx(function(x, y) db.run('INSERT INTO tx1 VALUES (?)', x)"
		      " return y, nil, 'z' end, 'one', 2) return tostring(a) .. tostring(b) .. c"),
		  "2nilz");
	CHECK_STR(lua("return db.row('SELECT count(*) AS n FROM tx1').n"), "1");
	/* error: rolled back, the very same error value re-raised */
	CHECK_STR(lua("local e = {} local ok, got = pcall(db.tx, function()"
		      " db.run('INSERT INTO tx1 VALUES (2)') error(e) end)"
		      " return tostring(ok) .. tostring(got == e) ..  db.row('SELECT count(*) AS n FROM tx1').n"),
		  "falsetrue1");
	CHECK_STR(lua("return select(2, pcall(db.tx, function() db.run('INSERT INTO tx1 VALUES (3)')"
		      " error('boom', 0) end))"), "boom");
	CHECK_STR(lua("return db.row('SELECT count(*) AS n FROM tx1').n"), "1");
	/* nested: an inner failure undoes only the inner part */
	CHECK_STR(lua("db.tx(function()\n"
		      "  db.run('INSERT INTO tx1 VALUES (10)')\n"
		      "  local ok = pcall(db.tx, function()\n"
		      "    db.run('INSERT INTO tx1 VALUES (11)')\n"
		      "    db.tx(function() db.run('INSERT INTO tx1 VALUES (12)') end)\n"
		      "    error('inner')\n"
		      "  end)\n"
		      "  assert(not ok)\n"
		      "  db.tx(function() db.run('INSERT INTO tx1 VALUES (13)') end)\n"
		      "end)\n"
		      "local r = {} for _, row in ipairs(db.query('SELECT v FROM tx1 ORDER BY v')) do\n"
		      "  r[#r + 1] = row.v end return table.concat(r, ',')"), "10,13,one");
	/* an outer failure undoes the committed inner levels too */
	CHECK_STR(lua("pcall(db.tx, function() db.tx(function() db.run('INSERT INTO tx1 VALUES (20)')"
		      " end) error('outer') end) return db.row('SELECT count(*) AS n FROM tx1 "
		      "WHERE v = 20').n"), "0");
	CHECK(sqlite3_get_autocommit(mb_store_db(LS)) == 1);
	/* a SQL error inside is a Lua error like any other */
	CHECK_STR(lua("error(select(2, pcall(db.tx, function() db.run('INSERT INTO tx1 VALUES (30)')"
		      " db.run('INSERT INTO nope VALUES (1)') end)), 0)"), store_err("no such table: nope"));
	/* errors carry the position of the Lua line that called */
	CHECK_STR(lua("return select(2, pcall(db.row, 'SELECT * FROM nope'))"),
		  store_err("no such table: nope") + 5); /* called from C: no position */
	CHECK(strncmp(lua("return select(2, pcall(function()\n\n db.row('SELECT * FROM nope') end))"),
		      "[string \"return select(2, pcall(function()...\"]:3: store: no such table: nope (", 70) == 0);
	CHECK_STR(lua("return db.row('SELECT count(*) AS n FROM tx1 WHERE v = 30').n"), "0");
	/* yielding inside is refused and rolls back */
	CHECK_STR(lua("local co = coroutine.wrap(function() return pcall(db.tx, function()"
		      " db.run('INSERT INTO tx1 VALUES (40)') coroutine.yield() end) end)"
		      " local ok, e = co() return tostring(ok) .. ' ' .. e"),
		  "false attempt to yield across a C-call boundary");
	CHECK_STR(lua("return db.row('SELECT count(*) AS n FROM tx1 WHERE v = 40').n"), "0");
	CHECK(sqlite3_get_autocommit(mb_store_db(LS)) == 1);
	CHECK_STR(lua("return db.tx(42)"), "ERR: bad argument #1 to 'tx' (function expected, got number)");
}

/* SQLite rolls a transaction back by itself on some errors (here: disk full). A caught error
 * must not let later statements autocommit, nor the tx report success. */
TEST(lua_tx_rolled_back_by_sqlite)
{
	const char *gone = "the enclosing transaction was already rolled back by SQLite after an "
			   "error inside it";
	lua("db.exec('CREATE TABLE full(x)')"
	    " db.exec('PRAGMA max_page_count = ' .. (db.row('PRAGMA page_count').page_count + 3))");
	const char *big = "local function big() return pcall(db.run, 'INSERT INTO full VALUES (?)',"
			  " string.rep('x', 100000)) end ";
	char code[2048];
	CHECK_STR(lua("return select(2, pcall(db.run, 'INSERT INTO full VALUES (?)',"
		      " string.rep('x', 100000)))"), store_err("database or disk is full") + 5);
	snprintf(code, sizeof code, "%s return db.tx(function() db.run('INSERT INTO full VALUES (1)')"
		 " big() return db.run('INSERT INTO full VALUES (2)') end)", big);
	CHECK_STR(lua(code), store_err(gone));
	snprintf(code, sizeof code, "%s return db.tx(function() big() return db.tx(print) end)", big);
	CHECK_STR(lua(code), store_err(gone));
	snprintf(code, sizeof code, "%s return db.tx(function() db.run('INSERT INTO full VALUES (1)')"
		 " big() return 'swallowed' end)", big);
	CHECK_STR(lua(code), store_err("the transaction was rolled back by SQLite after an error "
				       "inside it that was caught; nothing was committed"));
	snprintf(code, sizeof code, "%s return db.tx(function() return db.tx(function()"
		 " db.run('INSERT INTO full VALUES (1)') big() end) end)", big);
	CHECK_STR(lua(code), store_err("the transaction was rolled back by SQLite after an error "
				       "inside it that was caught; nothing was committed"));
	CHECK_STR(lua("return db.row('SELECT count(*) AS n FROM full').n"), "0");
	CHECK(sqlite3_get_autocommit(mb_store_db(LS)) == 1);
	lua("db.exec('PRAGMA max_page_count = 1073741823')");
	CHECK_STR(lua("return db.tx(function() return db.run('INSERT INTO full VALUES (1)') end)"), "1");
}

TEST(lua_migrate)
{
	/* this database has tables from earlier tests and user_version 0: not ours, refused */
	char foreign[1024];
	snprintf(foreign, sizeof foreign, "ERR: store: %s: not a moonbox database (it has tables but no "
		 "moonbox schema version); moonbox will not add its tables to it - point --data-dir "
		 "elsewhere or move the file aside", mb_store_path(LS));
	CHECK_STR(lua("return db.migrate({'CREATE TABLE mg1(x)', 'CREATE TABLE mg2(x)'})"), foreign);
	CHECK_STR(lua("return db.row(\"SELECT count(*) AS n FROM sqlite_schema WHERE name = 'mg1'\").n"), "0");
	lua("db.exec('PRAGMA user_version = 1')"); /* pretend migration 1 (mg1) ran */
	lua("db.exec('CREATE TABLE mg1(x)')");
	CHECK_STR(lua("return db.migrate({'CREATE TABLE mg1(x)', 'CREATE TABLE mg2(x)'})"), "true");
	CHECK_STR(lua("return db.row('PRAGMA user_version').user_version"), "2");
	CHECK_STR(lua("return db.migrate({'CREATE TABLE mg1(x)', 'CREATE TABLE mg2(x)'})"), "true");
	char want[1024];
	snprintf(want, sizeof want, "ERR: store: %s: schema version 2 is newer than this moonbox "
		 "knows (1); upgrade moonbox", mb_store_path(LS));
	CHECK_STR(lua("return db.migrate({'CREATE TABLE mg1(x)'})"), want);
	snprintf(want, sizeof want, "ERR: store: %s: migration 3 of 3 failed: no such table: q; the "
		 "database stays at schema version 2", mb_store_path(LS));
	CHECK_STR(lua("return db.migrate({'', '', 'CREATE TABLE mg3(x); DROP TABLE q'})"), want);
	CHECK_STR(lua("return db.row(\"SELECT count(*) AS n FROM sqlite_schema WHERE name = 'mg3'\").n"),
		  "0");
	CHECK_STR(lua("return db.migrate({'', '', 42})"),
		  store_err("migration 3 is a number; expected a string of SQL"));
	CHECK_STR(lua("return db.migrate({'', '', 'SELECT 1\\0'})"),
		  store_err("migration 3 contains a NUL byte"));
	snprintf(want, sizeof want, "ERR: store: %s: cannot migrate inside a transaction (mb.db.tx)",
		 mb_store_path(LS));
	CHECK_STR(lua("return db.tx(function() return db.migrate({}) end)"), want);
	CHECK_STR(lua("return db.migrate('x')"),
		  "ERR: bad argument #1 to 'migrate' (table expected, got string)");
}

/* Allocator of the second Lua state: fails once `limit` bytes are in use. */
static size_t mem_used, mem_limit = (size_t)-1;
static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	if (!ptr)
		osize = 0;
	if (nsize == 0) {
		free(ptr);
		mem_used -= osize;
		return NULL;
	}
	if (nsize > osize && mem_used + (nsize - osize) > mem_limit)
		return NULL;
	void *p = realloc(ptr, nsize);
	if (p)
		mem_used = mem_used - osize + nsize;
	return p;
}

/* Statements of the connection that are mid-step (hold a read snapshot). */
static int busy_stmts(void)
{
	int n = 0;
	for (sqlite3_stmt *st = sqlite3_next_stmt(mb_store_db(LS), NULL); st;
	     st = sqlite3_next_stmt(mb_store_db(LS), st))
		n += sqlite3_stmt_busy(st) != 0;
	return n;
}

/* No statement keeps a read snapshot after a call returns - after row() stopped at the first of
 * many rows, and after a Lua memory error escaped in the middle of building query()'s rows -
 * so WAL checkpoints can always complete. */
TEST(lua_no_snapshot_left_open)
{
	CHECK_STR(lua("return db.exec([[CREATE TABLE big(x); WITH RECURSIVE c(i) AS (SELECT 1 UNION "
		      "ALL SELECT i + 1 FROM c WHERE i < 3000) INSERT INTO big SELECT printf('%0100d', i) "
		      "FROM c]])"), "nil");
	CHECK_STR(lua("return #db.row('SELECT x FROM big').x"), "100");
	CHECK(busy_stmts() == 0);
	CHECK_STR(lua("return #db.query('SELECT x FROM big WHERE rowid < ?', 10)"), "9");
	CHECK(busy_stmts() == 0);
	CHECK_STR(lua("return select(2, pcall(db.row, 'SELECT x FROM big WHERE rowid = ?', {}))"),
		  "store: parameter 1 is a table; expected nil, boolean, number or string");
	CHECK(busy_stmts() == 0);
	CHECK_STR(lua("db.run('INSERT INTO big VALUES (1)')"
		      " return db.row('PRAGMA wal_checkpoint(TRUNCATE)').busy"), "0");
	lua_State *keep = L;
	L = lua_newstate(limited_alloc, NULL);
	*(mb_budget **)lua_getextraspace(L) = NULL;
	luaL_openlibs(L);
	mb_store_push_lua(L, LS);
	lua_setglobal(L, "db");
	lua_gc(L, LUA_GCCOLLECT);
	mem_limit = mem_used + 100000; /* far less than 3000 rows of 100 bytes */
	CHECK_STR(lua("return #db.query('SELECT x FROM big')"), "ERR: not enough memory");
	mem_limit = (size_t)-1;
	CHECK(busy_stmts() == 1); /* the longjmp left it; the next call resets it */
	CHECK_STR(lua("db.run('INSERT INTO big VALUES (2)')"
		      " return db.row('PRAGMA wal_checkpoint(TRUNCATE)').busy"), "0");
	CHECK(busy_stmts() == 0);
	CHECK_STR(lua("return #db.query('SELECT x FROM big')"), "3002");
	lua_close(L);
	L = keep;
}

TEST(lua_statement_cache)
{
	mb_store_stats a, b;
	mb_store_get_stats(LS, &a);
	CHECK(a.cached <= MB_STORE_CACHE_SIZE);
	/* the same SQL is compiled once */
	CHECK_STR(lua("local n = 0 for i = 1, 50 do n = n + db.row('SELECT ? + 1 AS v', i).v end"
		      " return n"), "1325");
	mb_store_get_stats(LS, &b);
	CHECK(b.prepares == a.prepares + 1);
	CHECK(b.hits == a.hits + 49);
	/* 200 distinct statements while one hot statement keeps being used: results stay right,
	 * the cache stays at its size and the hot statement is never evicted */
	mb_store_get_stats(LS, &a);
	CHECK_STR(lua("local bad = 0\n"
		      "for i = 1, 200 do\n"
		      "  if db.row('SELECT ' .. i .. ' AS v').v ~= i then bad = bad + 1 end\n"
		      "  if db.row('SELECT ? * 2 AS v', i).v ~= 2 * i then bad = bad + 1 end\n"
		      "end return bad"), "0");
	mb_store_get_stats(LS, &b);
	CHECK(b.cached == MB_STORE_CACHE_SIZE);
	CHECK(b.prepares == a.prepares + 201);
	CHECK(b.hits == a.hits + 199);
	/* evicted statements come back correctly */
	CHECK_STR(lua("local bad = 0 for i = 1, 200 do if db.row('SELECT ' .. i .. ' AS v').v ~= i"
		      " then bad = bad + 1 end end return bad"), "0");
	/* a cached statement follows schema changes */
	CHECK_STR(lua("db.exec('CREATE TABLE sc(a)') db.run('INSERT INTO sc VALUES (1)')"
		      " local r1 = db.row('SELECT * FROM sc') db.exec('ALTER TABLE sc ADD COLUMN b DEFAULT 5')"
		      " local r2 = db.row('SELECT * FROM sc') return tostring(r1.b) .. r2.b"), "nil5");
}

TEST(lua_tx_busy)
{
	/* BEGIN IMMEDIATE fails while another connection writes: the error names the file */
	mb_store *other = NULL;
	CHECK(mb_store_open(&other, mb_store_path(LS), 0, err, sizeof err) == 0);
	if (!other)
		return;
	CHECK(sqlite3_exec(mb_store_db(other), "CREATE TABLE IF NOT EXISTS o(x)", NULL, NULL, NULL) == 0);
	sqlite3_set_authorizer(mb_store_db(other), NULL, NULL);
	CHECK(sqlite3_exec(mb_store_db(other), "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
	CHECK_STR(lua("return db.tx(function() return 1 end)"), store_err("database is locked"));
	CHECK(sqlite3_exec(mb_store_db(other), "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
	CHECK_STR(lua("return db.tx(function() return 1 end)"), "1");
	mb_store_close(other);
}

/* Over 64 MiB the start-up check reads the header and schema instead of every page: a big,
 * valid database opens; one whose header is garbage is still refused, unchanged. */
TEST(big_database_checked_by_header)
{
	const char *path = P("big.db");
	sqlite3 *db;
	CHECK(sqlite3_open(path, &db) == SQLITE_OK);
	CHECK(sqlite3_exec(db, "CREATE TABLE b(x); INSERT INTO b VALUES (zeroblob(66 * 1024 * 1024))",
			   NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(db);
	struct stat st;
	CHECK(stat(path, &st) == 0 && st.st_size > ((off_t)64 << 20));
	mb_store *s = NULL;
	CHECK(mb_store_open(&s, path, 500, err, sizeof err) == 0);
	if (s)
		mb_store_close(s);
	FILE *f = fopen(path, "r+b");
	CHECK(f != NULL);
	if (!f)
		return;
	fwrite("this is garbage!", 1, 16, f);
	fclose(f);
	s = NULL;
	CHECK(mb_store_open(&s, path, 500, err, sizeof err) != 0);
	CHECK(strstr(err, path) != NULL);
	CHECK(strstr(err, "moonbox will not start over it") != NULL);
	unlink(path);
}

int main(void)
{
	if (unit_tmpdir(tmpdir, sizeof tmpdir, "/tmp/mb-store-XXXXXX") != 0)
		return 1;
	umask(022);
	RUN(open_creates_0600_wal);
	RUN(big_database_checked_by_header);
	RUN(open_empty_file_is_a_new_database);
	RUN(refuses_garbage_header);
	RUN(refuses_garbage_pages);
	RUN(refuses_text_files);
	RUN(refuses_directory);
	RUN(refuses_missing_parent_and_dangling_link);
	RUN(refuses_unreadable_and_readonly);
	RUN(migrate_forward_idempotent_newer);
	RUN(migrate_failure_rolls_back);
	RUN(acknowledged_write_survives_kill_9);
	RUN(busy_timeout_applies);
	lua_setup();
	RUN(lua_exec_run_query_row);
	RUN(lua_parameter_types);
	RUN(lua_errors);
	RUN(lua_tx);
	RUN(lua_tx_rolled_back_by_sqlite);
	RUN(lua_migrate);
	RUN(lua_no_snapshot_left_open);
	RUN(lua_statement_cache);
	RUN(lua_tx_busy);
	lua_close(L);
	mb_store_close(LS);
	unit_rmtree(tmpdir);
	return UNIT_END();
}
