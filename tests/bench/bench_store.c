/* bench_store.c - what one store operation costs on PostgreSQL against SQLite, same run: the
 * latency of the operations moonbox's requests make (a PII vault lookup by key, a vault upsert,
 * a skill-save-like transaction of a read and an insert) through the real `mb.db` of each
 * backend, on a throwaway PostgreSQL cluster (Unix socket, fsync on as in production unless
 * BENCH_PG_FSYNC=off) and a SQLite file in a temporary directory (WAL, synchronous=FULL).
 * PostgreSQL is measured both ways a request reaches it: from a request coroutine (the
 * statement runs on a non-blocking connection while the loop is free) and blocking (code that
 * cannot yield). The three take turns in batches of ten operations, so all see the same moments
 * of a shared machine; the figures are medians and p95 over every operation.
 *
 * Build and run (tests/bench/run.sh does it):
 *   cc -O2 -std=c11 -D_GNU_SOURCE ... tests/bench/bench_store.c <lib objects> -o bench_store
 *   bench_store [ops per round, default 300] [rounds, default 5]
 */
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "pg_cluster.h"
#include "store.h"
#include "store_pg.h"
#include "store_pg_host.h"

#define BATCH 10
static uv_loop_t loop;
static lua_State *PL; /* the PostgreSQL state */
static int finished;

static int now_us(lua_State *L)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	lua_pushnumber(L, (lua_Number)ts.tv_sec * 1e6 + (lua_Number)ts.tv_nsec / 1e3);
	return 1;
}

static void on_end(lua_State *co, int status)
{
	if (status != LUA_OK)
		fprintf(stderr, "bench_store: %s\n", lua_tostring(co, -1));
	finished = 1;
}

/* The operations, timed one by one into the global array `t` (microseconds) of the state. */
static const char OPS[] =
	"local db, now, n, op, base = mb.db, now_us, ...\n"
	"t = t or {}\n"
	"for i = 1, n do\n"
	"  local k = base + i\n"
	"  local a = now()\n"
	"  if op == 'read' then\n"
	"    db.row('SELECT value FROM v WHERE tenant = ? AND token = ?', 'default', 'tok' .. (k % 1000))\n"
	"  elseif op == 'upsert' then\n"
	"    db.run('INSERT INTO v (tenant, token, value, seen) VALUES (?, ?, ?, ?) ON CONFLICT (tenant, token) '\n"
	"      .. 'DO UPDATE SET seen = excluded.seen', 'default', 'tok' .. (k % 1000), 'ann@example.com', k)\n"
	"  else\n"
	"    db.tx(function()\n"
	"      local m = db.row('SELECT coalesce(max(version), 0) AS m FROM sv WHERE name = ?', 'n' .. (k % 50)).m\n"
	"      db.run('INSERT INTO sv (name, version, code) VALUES (?, ?, ?)', 'n' .. (k % 50), m + 1, 'return 1')\n"
	"    end)\n"
	"  end\n"
	"  t[#t + 1] = now() - a\n"
	"end\n";

static const char SCHEMA[] =
	"CREATE TABLE v (tenant TEXT NOT NULL, token TEXT NOT NULL, value BLOB, seen BIGINT, "
	"PRIMARY KEY (tenant, token)); CREATE TABLE sv (name TEXT NOT NULL, version BIGINT NOT NULL, "
	"code TEXT, PRIMARY KEY (name, version));";
static const char SCHEMA_PG[] =
	"CREATE TABLE v (tenant TEXT NOT NULL, token TEXT NOT NULL, value BYTEA, seen BIGINT, "
	"PRIMARY KEY (tenant, token)); CREATE TABLE sv (name TEXT NOT NULL, version BIGINT NOT NULL, "
	"code TEXT, PRIMARY KEY (name, version));";

static lua_State *new_state(void)
{
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_register(L, "now_us", now_us);
	return L;
}

/* Runs OPS(n, op, base) in L: as a plain call (SQLite, PostgreSQL blocking) or, for PostgreSQL
 * from a request coroutine, in an owned coroutine driven by the loop. */
static void run_ops(lua_State *L, int async, int n, const char *op, int base)
{
	if (!async) {
		luaL_loadstring(L, OPS);
		lua_pushinteger(L, n);
		lua_pushstring(L, op);
		lua_pushinteger(L, base);
		if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
			fprintf(stderr, "bench_store: %s\n", lua_tostring(L, -1));
			exit(1);
		}
		return;
	}
	lua_State *co = sph_spawn(NULL);
	luaL_loadstring(co, OPS);
	lua_pushinteger(co, n);
	lua_pushstring(co, op);
	lua_pushinteger(co, base);
	finished = 0;
	sph_resume(NULL, co, 3);
	while (!finished)
		uv_run(&loop, UV_RUN_ONCE);
	lua_pop(PL, 1);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* median and p95 of the global t, which is then cleared */
static void take(lua_State *L, double *med, double *p95)
{
	lua_getglobal(L, "t");
	int n = (int)lua_rawlen(L, -1);
	double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
	for (int i = 0; i < n; i++) {
		lua_rawgeti(L, -1, i + 1);
		v[i] = lua_tonumber(L, -1);
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	qsort(v, (size_t)n, sizeof *v, cmp);
	*med = n ? v[n / 2] : 0;
	*p95 = n ? v[(n * 95) / 100] : 0;
	free(v);
	lua_pushnil(L);
	lua_setglobal(L, "t");
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 300, rounds = argc > 2 ? atoi(argv[2]) : 5;
	pg_cluster pc;
	int rc = pg_cluster_init(&pc);
	if (rc == 1) {
		printf("bench_store: no PostgreSQL server binaries; skipped\n");
		return 0;
	}
	const char *fs = getenv("BENCH_PG_FSYNC");
	pc.durable = !fs || strcmp(fs, "off") != 0; /* as in production, unless asked */
	if (rc != 0 || pg_cluster_start(&pc) != 0) {
		fprintf(stderr, "bench_store: the PostgreSQL cluster did not start\n");
		return 1;
	}
	char fsync_now[16] = "?";
	PGconn *pq = PQconnectdb(pc.conninfo);
	PGresult *pr = PQexec(pq, "SHOW fsync");
	if (PQresultStatus(pr) == PGRES_TUPLES_OK)
		snprintf(fsync_now, sizeof fsync_now, "%s", PQgetvalue(pr, 0, 0));
	PQclear(pr);
	PQfinish(pq);
	uv_loop_init(&loop);
	char err[1024], path[300];
	snprintf(path, sizeof path, "%s/bench.db", pc.dir);
	mb_store *sq;
	if (mb_store_open(&sq, path, 5000, err, sizeof err) != 0 ||
	    mb_store_migrate(sq, (const char *[]){ SCHEMA }, 1, err, sizeof err) != 0) {
		fprintf(stderr, "bench_store: %s\n", err);
		return 1;
	}
	mb_pg *pg;
	if (mb_pg_open(&pg, &loop, pc.conninfo, 4, 10000, err, sizeof err) != 0 ||
	    mb_pg_migrate(pg, (const char *[]){ SCHEMA_PG }, 1, err, sizeof err) != 0) {
		fprintf(stderr, "bench_store: %s\n", err);
		return 1;
	}
	lua_State *SL = new_state();
	lua_newtable(SL);
	mb_store_push_lua(SL, sq);
	lua_setfield(SL, -2, "db");
	lua_setglobal(SL, "mb");
	PL = new_state();
	sph_init(PL, pg);
	sph_on_end = on_end;
	lua_newtable(PL);
	mb_pg_push_lua(PL, pg);
	lua_setfield(PL, -2, "db");
	lua_setglobal(PL, "mb");
	if (luaL_dostring(PL, "package.path = 'lua/?.lua;' .. package.path "
			      "require('mcp.store_pg').wrap(mb.db)") != LUA_OK) {
		fprintf(stderr, "bench_store: %s (run from the repository root)\n", lua_tostring(PL, -1));
		return 1;
	}
	/* warm up and fill the vault's 1000 keys on each */
	run_ops(SL, 0, 1000, "upsert", 0);
	run_ops(PL, 1, 1000, "upsert", 0);
	take(SL, &(double){0}, &(double){0});
	take(PL, &(double){0}, &(double){0});

	static const char *ops[] = { "read", "upsert", "tx" };
	printf("store operation latency, microseconds: median (p95) over %d operations each, in "
	       "batches of %d taking turns; PostgreSQL fsync %s (SQLite: synchronous=FULL)\n",
	       rounds * (n / BATCH) * BATCH, BATCH, fsync_now);
	printf("%-8s %18s %22s %22s %10s\n", "op", "SQLite", "PostgreSQL (request)", "PostgreSQL (blocking)",
	       "PG/SQLite");
	for (int o = 0; o < 3; o++) {
		/* every round runs the three ways back to back; the medians are over all rounds */
		lua_State *Ls[3] = { SL, PL, PL };
		const char *gname[3] = { "ts", "ta", "tb" };
		/* batches of BATCH operations, the three ways in turn: each sees the same moments of
		 * the machine (run one way after the other, the figures moved with the order) */
		for (int r = 0; r < rounds * (n / BATCH); r++)
			for (int w = 0; w < 3; w++) {
				run_ops(Ls[w], w == 1, BATCH, ops[o], 2000 + r * BATCH);
				/* move t to the way's own list */
				lua_State *L = Ls[w];
				lua_getglobal(L, gname[w]);
				if (lua_isnil(L, -1)) {
					lua_pop(L, 1);
					lua_newtable(L);
					lua_pushvalue(L, -1);
					lua_setglobal(L, gname[w]);
				}
				lua_getglobal(L, "t");
				int k = (int)lua_rawlen(L, -1), base = (int)lua_rawlen(L, -2);
				for (int i = 1; i <= k; i++) {
					lua_rawgeti(L, -1, i);
					lua_rawseti(L, -3, base + i);
				}
				lua_pop(L, 2);
				lua_pushnil(L);
				lua_setglobal(L, "t");
			}
		double med[3], p95[3];
		for (int w = 0; w < 3; w++) {
			lua_State *L = Ls[w];
			lua_getglobal(L, gname[w]);
			lua_setglobal(L, "t");
			take(L, &med[w], &p95[w]);
			lua_pushnil(L);
			lua_setglobal(L, gname[w]);
		}
		printf("%-8s %9.1f (%6.1f) %13.1f (%6.1f) %13.1f (%6.1f) %9.2fx\n", ops[o], med[0], p95[0],
		       med[1], p95[1], med[2], p95[2], med[0] > 0 ? med[1] / med[0] : 0);
	}
	lua_close(SL);
	lua_close(PL);
	mb_store_close(sq);
	mb_pg_close(pg);
	uv_run(&loop, UV_RUN_NOWAIT);
	pg_cluster_stop(&pc);
	pg_cluster_free(&pc);
	return 0;
}
