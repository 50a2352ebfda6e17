/* bench_sandbox.c - in-process cost of one execution (fresh state, environment, prelude, run,
 * result capture, close), without any transport. Prints the median of N runs in microseconds.
 * Usage: bench_sandbox [N] [code]   (also used under callgrind for instruction counts) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "json.h"
#include "sandbox.h"
#include "../unit/sandbox_setup.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2000;
	const char *code = argc > 2 ? argv[2] : "return 1+1";
	static mb_config cfg;
	if (sandbox_setup(&cfg) != 0)
		return 1;
	double *t = calloc((size_t)n, sizeof *t);
	for (int i = 0; i < n; i++) {
		mb_budget b;
		mb_budget_init(&b, 64u << 20, 100000000, 5000);
		mb_exec_request req = { .code = code, .code_len = strlen(code), .timeout_ms = 5000,
					.memory_bytes = 64u << 20, .instruction_limit = 100000000, .cfg = &cfg };
		mb_exec_result res;
		uint64_t t0 = mb_now_ns();
		mb_sandbox_run(&req, &b, &res);
		t[i] = (double)(mb_now_ns() - t0) / 1e3;
		if (!res.success) {
			fprintf(stderr, "error: %s\n", res.error);
			return 1;
		}
		mb_exec_result_free(&res);
	}
	qsort(t, (size_t)n, sizeof *t, cmp);
	printf("sandbox run (%s): median %.1f us, p90 %.1f us over %d runs\n", code, t[n / 2],
	       t[n * 9 / 10], n);
	free(t);
	return 0;
}
