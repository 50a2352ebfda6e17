/* bench_parallel.c - the sandbox's side of mcp.parallel, in-process: one execution per run
 * (fresh state, environment, the scheduler, result capture, close) whose upstream calls are
 * answered at once by a stand-in host (no loop thread, no upstream server), so the figures are
 * what the scheduler, the batch encoding and the reply decoding cost on the worker thread.
 *
 * Usage: bench_parallel [N] [WORKLOAD...]   (default N=2000, every workload)
 * Prints, per workload, `bench_parallel_<name>_us=<median>` and its p90 over N runs (the runs
 * of the workloads are interleaved, so that load on the machine hits them alike), and the host
 * calls made per run. Under callgrind, `--toggle-collect=mb_sandbox_run` with one workload
 * counts its instructions (tests/bench/parallel_compare.sh does both for two builds).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "json.h"
#include "sandbox.h"
#include "../unit/sandbox_setup.h"

typedef struct {
	const char *name, *code;
	long expect; /* the integer the code returns */
} workload;

static const workload workloads[] = {
	{ "base", "return 100", 100 },
	{ "specs2", "return #mcp.parallel{{'everything', 'echo', {message = 'a'}}, "
		    "{'everything', 'echo', {message = 'b'}}}", 2 },
	{ "specs100", "local c = {} for i = 1, 100 do c[i] = {'everything', 'echo', {message = 'm' .. i}} end "
		      "return #mcp.parallel(c)", 100 },
	{ "named100", "local c = {} for i = 1, 100 do c[i] = {server = 'everything', tool = 'echo', "
		      "args = {message = 'm' .. i}} end return #mcp.parallel(c)", 100 },
	{ "tasks100x2", "local c = {} for i = 1, 100 do c[i] = function() "
			"local a = servers.everything.echo{message = 'a' .. i} "
			"return servers.everything.echo{message = a} end end return #mcp.parallel(c)", 100 },
	{ "mixed1000", "local c = {} for i = 1, 1000 do c[i] = i % 2 == 0 and {'everything', 'echo', {i = i}} "
		       "or function() return servers.everything.echo{i = i} end end return #mcp.parallel(c)", 1000 },
};
#define NW (sizeof workloads / sizeof workloads[0])

typedef struct {
	long calls;
} host;

/* The stand-in host: every upstream call answers "Echo: ok" at once. */
static int fake_host(void *ud, const char *name, const char *args, size_t len, char **reply,
		     size_t *reply_len)
{
	host *h = ud;
	h->calls++;
	static const char one[] = "{\"ok\":true,\"v\":\"Echo: ok\"}";
	if (strcmp(name, "upstream_call") == 0) {
		*reply = strdup("{\"v\":\"Echo: ok\"}");
		*reply_len = strlen(*reply);
		return 0;
	}
	if (strcmp(name, "upstream_batch") != 0) {
		*reply = strdup("unexpected host call");
		*reply_len = strlen(*reply);
		return 1;
	}
	size_t items = len ? 1 : 0;
	for (size_t i = 0; i < len; i++)
		items += args[i] == '\n';
	char *r = malloc(2 + items * sizeof one), *p = r;
	*p++ = '[';
	for (size_t i = 0; i < items; i++) {
		if (i)
			*p++ = ',';
		memcpy(p, one, sizeof one - 1);
		p += sizeof one - 1;
	}
	*p++ = ']';
	*reply = r;
	*reply_len = (size_t)(p - r);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2000;
	const workload *sel[NW];
	size_t ns = 0;
	for (int a = 2; a < argc; a++) {
		size_t k = 0;
		while (k < NW && strcmp(workloads[k].name, argv[a]) != 0)
			k++;
		if (k == NW) {
			fprintf(stderr, "unknown workload %s\n", argv[a]);
			return 2;
		}
		sel[ns++] = &workloads[k];
	}
	if (ns == 0)
		for (; ns < NW; ns++)
			sel[ns] = &workloads[ns];
	if (n < 1)
		n = 1;
	static mb_config cfg;
	if (sandbox_setup(&cfg) != 0)
		return 1;
	double *t = calloc((size_t)n * ns, sizeof *t);
	long *calls = calloc(ns, sizeof *calls);
	for (int i = 0; i < n; i++) {
		for (size_t w = 0; w < ns; w++) {
			host h = { 0 };
			mb_budget b;
			mb_budget_init(&b, 64u << 20, 100000000, 5000);
			mb_exec_request req = { .code = sel[w]->code, .code_len = strlen(sel[w]->code),
						.timeout_ms = 5000, .memory_bytes = 64u << 20,
						.instruction_limit = 100000000, .cfg = &cfg,
						.host_call = fake_host, .host_ud = &h };
			mb_exec_result res;
			uint64_t t0 = mb_now_ns();
			mb_sandbox_run(&req, &b, &res);
			t[w * (size_t)n + (size_t)i] = (double)(mb_now_ns() - t0) / 1e3;
			char want[32];
			snprintf(want, sizeof want, "%ld", sel[w]->expect);
			if (!res.success || !res.result_json || strcmp(res.result_json, want) != 0) {
				fprintf(stderr, "%s: %s\n", sel[w]->name, res.success ? res.result_json : res.error);
				return 1;
			}
			calls[w] = h.calls;
			mb_exec_result_free(&res);
		}
	}
	for (size_t w = 0; w < ns; w++) {
		double *x = t + w * (size_t)n;
		qsort(x, (size_t)n, sizeof *x, cmp);
		printf("bench_parallel_%s_us=%.1f p90=%.1f host_calls=%ld runs=%d\n", sel[w]->name,
		       x[n / 2], x[n * 9 / 10], calls[w], n);
	}
	free(t);
	free(calls);
	return 0;
}
