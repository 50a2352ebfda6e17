/* test_store_pg.c - the PostgreSQL store (src/store_pg.c, lua/mcp/store_pg.lua) against a real
 * throwaway PostgreSQL cluster this test starts itself (initdb into a temporary directory, a
 * Unix socket only, as user postgres when run as root) and stops at the end: value types both
 * ways, placeholders, refused transaction control, errors, tx (commit, rollback re-raising the
 * same value, savepoints, a caught error inside), statements of many coroutines queued over
 * few connections, serializable conflicts retried, the blocking path, LISTEN/NOTIFY, a
 * connection killed under it, PostgreSQL stopped and started again, migrations (applied once,
 * a newer schema and somebody else's database refused), and the state closed with statements
 * in flight. Skipped, saying so, only when the PostgreSQL server binaries are not installed. */
#include <glob.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "store_pg.h"
#include "unit.h"

static char dir[128], bindir[256], url[512], as_pg[64];
static int port;
static mb_pg *S;
static lua_State *L;
static uv_loop_t loop;
static int threads_ref;

static int sh(const char *fmt, const char *a)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, fmt, a);
	return system(cmd);
}

static int pg_ctl(const char *what)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s%s/pg_ctl -D %s/data -l %s/log -w -m immediate -o \"-c "
		 "listen_addresses='' -k %s -p %d -c fsync=off\" %s >/dev/null 2>&1", as_pg, bindir, dir,
		 dir, dir, port, what);
	return system(cmd);
}

static int psql(const char *sql)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "%s%s/psql -q -h %s -p %d -U postgres -d postgres -c \"%s\" >/dev/null",
		 as_pg, bindir, dir, port, sql);
	return system(cmd);
}

static int start_cluster(void)
{
	glob_t g;
	if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0 || g.gl_pathc == 0)
		return -1;
	snprintf(bindir, sizeof bindir, "%s", g.gl_pathv[g.gl_pathc - 1]);
	*strrchr(bindir, '/') = 0;
	globfree(&g);
	if (unit_tmpdir(dir, sizeof dir, "/tmp/mb-pg-XXXXXX") != 0)
		return -1;
	chmod(dir, 0755);
	if (getuid() == 0) {
		snprintf(as_pg, sizeof as_pg, "runuser -u postgres -- ");
		sh("chown postgres %s", dir);
	}
	port = 20000 + (int)(getpid() % 20000);
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "%s%s/initdb -D %s/data -U postgres --auth=trust --no-sync -E UTF8 "
		 ">/dev/null 2>&1", as_pg, bindir, dir);
	if (system(cmd) != 0 || pg_ctl("start") != 0)
		return -1;
	snprintf(url, sizeof url, "postgresql:///postgres?host=%s&port=%d&user=postgres", dir, port);
	return 0;
}

/* ---- a host for the store: owned coroutines, resume, spawn ---------------------------------- */

static int last_status;
static char last_result[4096];

static void on_finish(lua_State *co, int status)
{
	last_status = status;
	const char *s = luaL_tolstring(co, -1, NULL);
	snprintf(last_result, sizeof last_result, "%s", s ? s : "(nil)");
	if (status != LUA_OK && getenv("MB_TEST_VERBOSE"))
		fprintf(stderr, "  coroutine failed: %s\n", last_result);
	lua_pop(co, 1);
}

static void h_resume(void *ud, lua_State *co, int nargs)
{
	(void)ud;
	int nres;
	int st = lua_resume(co, L, nargs, &nres);
	if (st == LUA_YIELD) {
		lua_pop(co, nres);
		return;
	}
	if (st == LUA_OK && nres == 0)
		lua_pushnil(co);
	on_finish(co, st);
}

static int h_owns(void *ud, lua_State *co)
{
	(void)ud;
	lua_rawgeti(L, LUA_REGISTRYINDEX, threads_ref);
	lua_pushthread(co);
	lua_xmove(co, L, 1);
	int r = lua_rawget(L, -2) == LUA_TBOOLEAN;
	lua_pop(L, 2);
	return r;
}

static lua_State *h_spawn(void *ud)
{
	(void)ud;
	lua_State *co = lua_newthread(L);
	lua_rawgeti(L, LUA_REGISTRYINDEX, threads_ref);
	lua_pushvalue(L, -2);
	lua_pushboolean(L, 1);
	lua_rawset(L, -3);
	lua_pop(L, 1);
	return co;
}

static int open_store(void)
{
	char err[1024];
	if (mb_pg_open(&S, &loop, url, 2, 5000, err, sizeof err) != 0) {
		fprintf(stderr, "  open: %s\n", err);
		return -1;
	}
	L = luaL_newstate();
	luaL_openlibs(L);
	lua_newtable(L);
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "k");
	lua_setfield(L, -2, "__mode");
	lua_setmetatable(L, -2);
	threads_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	mb_pg_host hh = { h_resume, h_owns, h_spawn, NULL };
	mb_pg_set_host(S, &hh);
	lua_newtable(L);
	mb_pg_push_lua(L, S);
	lua_setfield(L, -2, "db");
	lua_setglobal(L, "mb");
	if (luaL_dostring(L, "package.path = 'lua/?.lua;' .. package.path "
			     "require('mcp.store_pg').wrap(mb.db) db = mb.db") != LUA_OK) {
		fprintf(stderr, "  wrap: %s\n", lua_tostring(L, -1));
		return -1;
	}
	return 0;
}

static void close_store(void)
{
	lua_close(L);
	L = NULL;
	mb_pg_close(S);
	S = NULL;
	uv_run(&loop, UV_RUN_NOWAIT);
}

/* Runs the loop for ms (timers, reopen work, notifications). */
static void spin(int ms)
{
	uv_update_time(&loop);
	uint64_t until = uv_now(&loop) + (uint64_t)ms;
	while (uv_now(&loop) < until) {
		uv_run(&loop, UV_RUN_NOWAIT);
		usleep(2000);
		uv_update_time(&loop);
	}
}

/* Runs code in a new owned coroutine and the loop until it ends (at most 20 s); the first result
 * (tostring) or the error in last_result; returns the status. */
static int run(const char *code)
{
	lua_State *co = h_spawn(NULL);
	if (luaL_loadstring(co, code) != LUA_OK) {
		on_finish(co, LUA_ERRSYNTAX);
		lua_pop(L, 1);
		return last_status;
	}
	last_status = -1;
	h_resume(NULL, co, 0);
	lua_pop(L, 1);
	uint64_t until = uv_now(&loop) + 20000;
	while (last_status == -1 && uv_now(&loop) < until)
		spin(1);
	return last_status;
}

#define OK(code, want) do { CHECK(run(code) == LUA_OK); if (strcmp(last_result, want)) { \
	unit_failed_checks++; fprintf(stderr, "  FAIL %s:%d: got %s, want %s\n", __FILE__, __LINE__, \
	last_result, want); } } while (0)
#define FAILS(code, needle) do { CHECK(run(code) != LUA_OK); if (!strstr(last_result, needle)) { \
	unit_failed_checks++; fprintf(stderr, "  FAIL %s:%d: error %s lacks %s\n", __FILE__, __LINE__, \
	last_result, needle); } } while (0)

/* ---- tests ------------------------------------------------------------------------------------ */

TEST(values_both_ways)
{
	OK("db.exec('CREATE TABLE t (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, i bigint, "
	   "f double precision, s text, b bytea, n numeric, ok boolean)') return 'x'", "x");
	OK("local c, id = db.run('INSERT INTO t (i, f, s, b, n, ok) VALUES (?, ?, ?, ?, ?, ?) RETURNING id',"
	   " 9007199254740993, 0.5, 'h\\xc3\\xa9', 'a\\0b\\255', 12, true) return c .. ',' .. id", "1,1");
	OK("local r = db.row('SELECT * FROM t WHERE id = ?', 1) return string.format('%s %s %s %s %s %s %s',"
	   " math.type(r.i), r.i, r.f, r.b == 'a\\0b\\255', math.type(r.n), r.n, r.ok)",
	   "integer 9007199254740993 0.5 true integer 12 1");
	OK("local r = db.row('SELECT s, NULL AS gone, 2.5::numeric AS q FROM t') return r.s .. tostring(r.gone) .. r.q",
	   "h\xc3\xa9nil2.5");
	OK("local rows = db.query('SELECT i FROM t WHERE i > ?', 0) return #rows .. ',' .. "
	   "#db.query('SELECT 1 FROM t WHERE false')", "1,0");
	OK("local c, id = db.run('UPDATE t SET s = ? WHERE id = ?', nil, 1) return c .. tostring(id)", "1nil");
	FAILS("return db.row('SELECT ?::int AS x', {})", "parameter 1 is a table");
}

TEST(placeholders)
{
	OK("return db.row(\"SELECT '?' AS a, ?1::int + ?1::int AS b, ?2 AS c -- ?\\n\", 20, 'z').a", "?");
	OK("local r = db.row('SELECT ?1::int + ?1::int AS b, ?2 AS c', 20, 'z') return r.b .. r.c", "40z");
	OK("return db.row('SELECT 1 AS \"?\" /* ? */').x == nil and db.row('SELECT 1 AS \"?\"')['?']", "1");
	FAILS("return db.row('SELECT ? AS a, ? AS b', 1)", "the statement has 2 parameters but 1 value was given");
	FAILS("return db.row('SELECT 1 AS a', 1)", "has 0 parameters but 1 value");
	FAILS("return db.row('SELECT 1 AS a\\0')", "NUL byte");
}

TEST(transaction_control_refused)
{
	FAILS("db.exec('BEGIN')", "use mb.db.tx");
	FAILS("db.run('  commit')", "use mb.db.tx");
	FAILS("db.row('/* x */ ROLLBACK')", "use mb.db.tx");
	FAILS("db.exec('SELECT 1; SAVEPOINT a')", "use mb.db.tx");
	OK("return db.row(\"SELECT 'BEGIN; COMMIT' AS x\").x", "BEGIN; COMMIT");
}

TEST(errors_name_the_state)
{
	FAILS("db.row('SELEC 1')", "SQLSTATE 42601");
	FAILS("db.row('SELECT * FROM nowhere')", "relation \"nowhere\" does not exist");
	OK("local ok, e = pcall(db.row, 'SELECT 1/0 AS x') return e:match('^store: ') and 'y'", "y");
}

TEST(tx_commit_rollback_nested)
{
	OK("db.exec('CREATE TABLE k (v int PRIMARY KEY)') return db.tx(function(a) db.run('INSERT INTO k VALUES (?)', a) "
	   "return a * 2 end, 1)", "2");
	OK("local err = {} local ok, e = pcall(db.tx, function() db.run('INSERT INTO k VALUES (2)') error(err) end) "
	   "return tostring(e == err) .. db.row('SELECT count(*) AS n FROM k').n", "true1");
	OK("db.tx(function() db.run('INSERT INTO k VALUES (3)') pcall(db.tx, function() "
	   "db.run('INSERT INTO k VALUES (4)') error('inner') end) end) "
	   "return db.row('SELECT string_agg(v::text, \\',\\' ORDER BY v) AS s FROM k').s", "1,3");
	FAILS("db.tx(function() pcall(db.run, 'INSERT INTO k VALUES (1)') end)", "nothing was committed");
	OK("return db._depth()", "0");
	FAILS("db.tx(42)", "function expected");
}

TEST(many_coroutines_few_connections)
{
	/* 12 coroutines, 2 connections: every statement answered, in its own coroutine */
	CHECK(luaL_dostring(L, "done = {}") == LUA_OK);
	for (int i = 0; i < 12; i++) {
		char code[256];
		snprintf(code, sizeof code, "done[%d] = db.row('SELECT pg_sleep(0.02), ?::int * 2 AS v', %d).v",
			 i + 1, i + 1);
		lua_State *co = h_spawn(NULL);
		CHECK(luaL_loadstring(co, code) == LUA_OK);
		h_resume(NULL, co, 0);
		lua_pop(L, 1);
	}
	OK("local deadline = os.time() + 15 return 'started'", "started");
	for (int i = 0; i < 2000; i++) {
		spin(5);
		lua_getglobal(L, "done");
		int n = (int)lua_rawlen(L, -1);
		lua_pop(L, 1);
		if (n == 12)
			break;
	}
	CHECK(luaL_dostring(L, "local s = 0 for i = 1, 12 do s = s + (done[i] or 0) end return s") == LUA_OK);
	CHECK(lua_tointeger(L, -1) == 156);
	lua_pop(L, 1);
	mb_pg_stats st;
	mb_pg_get_stats(S, &st);
	CHECK(st.waited > 0);
}

TEST(serializable_conflict_retried)
{
	OK("db.exec('CREATE TABLE seq (v int PRIMARY KEY)') return 1", "1");
	CHECK(luaL_dostring(L, "got = {} tries = 0") == LUA_OK);
	const char *code = "table.insert(got, db.tx(function() tries = tries + 1 "
			   "if os.getenv('MB_TEST_VERBOSE') then print('try', tries) end "
			   "local m = db.row('SELECT coalesce(max(v), 0) AS m FROM seq').m "
			   "db.row('SELECT pg_sleep(0.1) AS x') db.run('INSERT INTO seq VALUES (?)', m + 1) "
			   "return m + 1 end))";
	for (int i = 0; i < 2; i++) {
		lua_State *co = h_spawn(NULL);
		CHECK(luaL_loadstring(co, code) == LUA_OK);
		h_resume(NULL, co, 0);
		lua_pop(L, 1);
	}
	for (int i = 0; i < 3000; i++) {
		spin(5);
		lua_getglobal(L, "got");
		int n = (int)lua_rawlen(L, -1);
		lua_pop(L, 1);
		if (n == 2)
			break;
	}
	OK("table.sort(got) return table.concat(got, ',') .. ' ' .. tostring(tries > 2)", "1,2 true");
}

TEST(blocking_path_outside_coroutines)
{
	mb_pg_stats a, b;
	mb_pg_get_stats(S, &a);
	CHECK(luaL_dostring(L, "return db.row('SELECT 41 + 1 AS v').v") == LUA_OK);
	CHECK(lua_tointeger(L, -1) == 42);
	lua_pop(L, 1);
	CHECK(luaL_dostring(L, "return db.tx(function() db.run('INSERT INTO k VALUES (10)') return db._depth() end)") == LUA_OK);
	CHECK(lua_tointeger(L, -1) == 1);
	lua_pop(L, 1);
	mb_pg_get_stats(S, &b);
	CHECK(b.blocking >= a.blocking + 4);
	OK("return db.row('SELECT count(*) AS n FROM k WHERE v = 10').n", "1");
}

TEST(listen_notify)
{
	CHECK(luaL_dostring(L, "heard = nil db.listen('chan_x', function(ch, p) heard = ch .. ':' .. tostring(p) "
			       "heard_rows = db.row('SELECT 7 AS v').v end)") == LUA_OK);
	spin(300); /* LISTEN is sent without waiting: let it run before the NOTIFY */
	OK("db.notify('chan_x', 'hello') return 1", "1");
	for (int i = 0; i < 500; i++) {
		spin(10);
		lua_getglobal(L, "heard_rows");
		int got = !lua_isnil(L, -1);
		lua_pop(L, 1);
		if (got)
			break;
	}
	OK("return heard .. ' ' .. tostring(heard_rows)", "chan_x:hello 7");
}

TEST(connection_killed_then_reopened)
{
	mb_pg_stats a, b;
	mb_pg_get_stats(S, &a);
	/* kill every moonbox session but the killer's own (the blocking one) */
	OK("return db.row(\"SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE "
	   "application_name = 'moonbox' AND pid <> pg_backend_pid()\").n >= 2 and 'k'", "k");
	int ok_after = 0;
	for (int i = 0; i < 50 && !ok_after; i++) {
		if (run("return db.row('SELECT 5 AS v').v") == LUA_OK)
			ok_after = strcmp(last_result, "5") == 0;
		else
			CHECK(strstr(last_result, "connection") || strstr(last_result, "unreachable") ||
			      strstr(last_result, "terminat"));
		if (!ok_after)
			spin(100);
	}
	CHECK(ok_after);
	spin(300);
	mb_pg_get_stats(S, &b);
	CHECK(b.reconnects > a.reconnects);
	/* the notifications connection came back and LISTENs again */
	CHECK(luaL_dostring(L, "heard_rows = nil") == LUA_OK);
	OK("db.notify('chan_x', 'again') return 1", "1");
	for (int i = 0; i < 300; i++) {
		spin(10);
		lua_getglobal(L, "heard");
		int got = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "chan_x:again") == 0;
		lua_pop(L, 1);
		if (got)
			break;
	}
	OK("return heard", "chan_x:again");
}

TEST(postgres_down_then_back)
{
	CHECK(pg_ctl("stop") == 0);
	spin(100);
	/* while it is down: a clear error, soon */
	FAILS("return db.row('SELECT 1 AS v').v", "PostgreSQL");
	FAILS("return db.row('SELECT 1 AS v').v", "unreachable");
	/* the blocking connection: its first use finds it closed, the next cannot reconnect */
	CHECK(luaL_dostring(L, "return select(2, pcall(db.row, 'SELECT 1 AS v'))") == LUA_OK);
	CHECK(strstr(lua_tostring(L, -1), "PostgreSQL") != NULL);
	lua_pop(L, 1);
	CHECK(luaL_dostring(L, "return select(2, pcall(db.row, 'SELECT 1 AS v'))") == LUA_OK);
	CHECK(strstr(lua_tostring(L, -1), "unreachable") != NULL);
	lua_pop(L, 1);
	CHECK(pg_ctl("start") == 0);
	int back = 0;
	for (int i = 0; i < 100 && !back; i++) {
		spin(100);
		back = run("return db.row('SELECT 6 AS v').v") == LUA_OK && strcmp(last_result, "6") == 0;
	}
	CHECK(back);
	CHECK(luaL_dostring(L, "return db.row('SELECT 8 AS v').v") == LUA_OK); /* blocking reconnects */
	CHECK(lua_tointeger(L, -1) == 8);
	lua_pop(L, 1);
	OK("return db.row('SELECT count(*) AS n FROM k').n", "3");
}

TEST(migrations)
{
	CHECK(psql("CREATE DATABASE mig") == 0);
	CHECK(psql("CREATE DATABASE theirs") == 0);
	char u[600], err[1024];
	const char *steps[] = { "CREATE TABLE a (x int)", "CREATE TABLE b (y int); INSERT INTO b VALUES (1)" };
	mb_pg *m;
	snprintf(u, sizeof u, "postgresql:///mig?host=%s&port=%d&user=postgres", dir, port);
	CHECK(mb_pg_open(&m, &loop, u, 1, 5000, err, sizeof err) == 0);
	CHECK(mb_pg_migrate(m, steps, 1, err, sizeof err) == 0);
	CHECK(mb_pg_migrate(m, steps, 2, err, sizeof err) == 0);
	CHECK(mb_pg_migrate(m, steps, 2, err, sizeof err) == 0); /* idempotent: b keeps one row */
	CHECK(mb_pg_migrate(m, steps, 1, err, sizeof err) != 0 && strstr(err, "newer than this moonbox"));
	const char *bad[] = { "CREATE TABLE a (x int)", "CREATE TABLE a (x int)", "SELEC" };
	CHECK(mb_pg_migrate(m, bad, 3, err, sizeof err) != 0 && strstr(err, "migration 3 of 3 failed") &&
	      strstr(err, "stays at schema version 2"));
	mb_pg_close(m);
	uv_run(&loop, UV_RUN_NOWAIT);
	snprintf(u, sizeof u, "postgresql:///theirs?host=%s&port=%d&user=postgres", dir, port);
	CHECK(psql("SELECT 1") == 0);
	char cmd[800];
	snprintf(cmd, sizeof cmd, "%s%s/psql -q -h %s -p %d -U postgres -d theirs -c 'CREATE TABLE users (id int)'",
		 as_pg, bindir, dir, port);
	CHECK(system(cmd) == 0);
	CHECK(mb_pg_open(&m, &loop, u, 1, 5000, err, sizeof err) == 0);
	CHECK(mb_pg_migrate(m, steps, 2, err, sizeof err) != 0 && strstr(err, "not a moonbox database"));
	mb_pg_close(m);
	uv_run(&loop, UV_RUN_NOWAIT);
	snprintf(u, sizeof u, "postgresql:///nosuchdb?host=%s&port=%d&user=postgres", dir, port);
	CHECK(mb_pg_open(&m, &loop, u, 1, 5000, err, sizeof err) != 0 && strstr(err, "nosuchdb"));
}

TEST(closed_with_statements_in_flight)
{
	for (int i = 0; i < 5; i++) {
		lua_State *co = h_spawn(NULL);
		CHECK(luaL_loadstring(co, "db.row('SELECT pg_sleep(0.2) AS x')") == LUA_OK);
		h_resume(NULL, co, 0);
		lua_pop(L, 1);
	}
	uv_run(&loop, UV_RUN_NOWAIT);
	close_store(); /* no crash, no leak (ASan), no resume into a closed state */
	spin(50);
	CHECK(open_store() == 0);
	OK("return db.row('SELECT 3 AS v').v", "3");
}

static void on_keepalive(uv_timer_t *t)
{
	(void)t;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (start_cluster() != 0) {
		printf("skip: no PostgreSQL server binaries (/usr/lib/postgresql/*/bin) or the cluster "
		       "did not start\n0 passed, 0 failed\n");
		if (dir[0]) {
			pg_ctl("stop");
			unit_rmtree(dir);
		}
		return access("/usr/lib/postgresql", F_OK) == 0 ? 1 : 0;
	}
	uv_loop_init(&loop);
	/* the store's idle connections and reopen timers do not keep a loop alive (a server stops
	 * when its transport has closed); this one has no transport, so a handle of ours does */
	uv_timer_t keepalive;
	uv_timer_init(&loop, &keepalive);
	uv_timer_start(&keepalive, on_keepalive, 1000, 1000);
	if (open_store() != 0) {
		pg_ctl("stop");
		unit_rmtree(dir);
		return 1;
	}
	RUN(values_both_ways);
	RUN(placeholders);
	RUN(transaction_control_refused);
	RUN(errors_name_the_state);
	RUN(tx_commit_rollback_nested);
	RUN(many_coroutines_few_connections);
	RUN(serializable_conflict_retried);
	RUN(blocking_path_outside_coroutines);
	RUN(listen_notify);
	RUN(connection_killed_then_reopened);
	RUN(postgres_down_then_back);
	RUN(migrations);
	RUN(closed_with_statements_in_flight);
	close_store();
	uv_close((uv_handle_t *)&keepalive, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
	uv_loop_close(&loop);
	pg_ctl("stop");
	unit_rmtree(dir);
	return UNIT_END();
}
