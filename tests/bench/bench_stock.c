/* bench_stock.c - the fresh-stock-state floor for issue 22: what stock Lua 5.4 (the same
 * library moonbox links) costs for one execution done the naive way: luaL_newstate,
 * luaL_openlibs, load and run `return 1+1`, lua_close. No limits, no environment, no result
 * encoding. Each iteration is timed on its own; it prints the median per round and the median
 * of the round medians, as key=value lines for tests/bench/run.sh.
 * Usage: bench_stock [ROUNDS] [ITERATIONS-PER-ROUND] */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 5;
	int n = argc > 2 ? atoi(argv[2]) : 2000;
	if (rounds < 1 || n < 1)
		return 2;
	double *t = calloc((size_t)n, sizeof *t), *med = calloc((size_t)rounds, sizeof *med);
	if (!t || !med)
		return 1;
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < n; i++) {
			uint64_t t0 = now_ns();
			lua_State *L = luaL_newstate();
			luaL_openlibs(L);
			if (luaL_loadstring(L, "return 1+1") != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK ||
			    lua_tointeger(L, -1) != 2) {
				fprintf(stderr, "bench_stock: %s\n", lua_tostring(L, -1));
				return 1;
			}
			lua_close(L);
			t[i] = (double)(now_ns() - t0) / 1e3;
		}
		qsort(t, (size_t)n, sizeof *t, cmp);
		med[r] = t[n / 2];
		printf("stock_round_p50_us=%.2f\n", med[r]);
	}
	qsort(med, (size_t)rounds, sizeof *med, cmp);
	printf("stock_p50_us=%.2f\nstock_best_p50_us=%.2f\nstock_rounds=%d\nstock_iterations=%d\n",
	       med[rounds / 2], med[0], rounds, n);
	free(t);
	free(med);
	return 0;
}
