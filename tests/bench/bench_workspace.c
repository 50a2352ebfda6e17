/* bench_workspace.c - what one workspace write and delete cost (mb_workspace_write: reserve,
 * temporary file, fsync, rename, directory fsync, accounting), in one process and in P processes
 * writing to one tenant of one shared workspace directory at once (replicas). Figures, not a
 * test. Linked like the unit tests:
 *   cc ... tests/bench/bench_workspace.c build/obj/(all but main.o) ... -o bench_workspace
 *   bench_workspace [dir] [writes=2000] [bytes=1024] [procs=1,2,4]
 * dir defaults to a new directory under /tmp (tmpfs or not: say which when quoting figures;
 * fsync dominates on a disk). Prints microseconds per operation (median of 5 rounds). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workspace.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One process: n writes over 100 names (replacing), then deletes them. Writes us/op to out. */
static int run(const char *root, int id, int n, size_t bytes, double *w_us, double *d_us)
{
	mb_workspace_limits lim = { 1 << 20, (int64_t)1 << 40, 1000000 };
	char err[512];
	mb_workspaces *r = mb_workspaces_new(root, &lim, err, sizeof err);
	mb_workspace *ws = r ? mb_workspaces_get(r, "bench", err, sizeof err) : NULL;
	if (!ws) {
		fprintf(stderr, "bench_workspace: %s\n", err);
		return -1;
	}
	char *buf = malloc(bytes);
	memset(buf, 'x', bytes);
	char path[64];
	double t0 = now_us();
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof path, "p%d/f%d", id, i % 100);
		if (mb_workspace_write(ws, path, strlen(path), buf, bytes, err, sizeof err) != 0) {
			fprintf(stderr, "bench_workspace: %s\n", err);
			return -1;
		}
	}
	double t1 = now_us();
	for (int i = 0; i < 100 && i < n; i++) {
		snprintf(path, sizeof path, "p%d/f%d", id, i);
		mb_workspace_delete(ws, path, strlen(path), err, sizeof err);
	}
	double t2 = now_us();
	*w_us = (t1 - t0) / n;
	*d_us = (t2 - t1) / (n < 100 ? n : 100);
	free(buf);
	mb_workspaces_free(r);
	return 0;
}

int main(int argc, char **argv)
{
	char dir[256];
	if (argc > 1 && argv[1][0]) {
		snprintf(dir, sizeof dir, "%s", argv[1]);
	} else {
		snprintf(dir, sizeof dir, "/tmp/mb-bench-ws-XXXXXX");
		if (!mkdtemp(dir))
			return 1;
	}
	int n = argc > 2 ? atoi(argv[2]) : 2000;
	size_t bytes = argc > 3 ? (size_t)atol(argv[3]) : 1024;
	const char *procs_arg = argc > 4 ? argv[4] : "1,2,4";
	printf("workspace %s, %d writes of %zu bytes per process\n", dir, n, bytes);
	char list[64];
	snprintf(list, sizeof list, "%s", procs_arg);
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int procs = atoi(t);
		double w[5], d[5];
		for (int round = 0; round < 5; round++) {
			int fds[2];
			if (pipe(fds) != 0)
				return 1;
			for (int p = 0; p < procs; p++) {
				if (fork() == 0) {
					double r[2] = { -1, -1 };
					run(dir, p, n, bytes, &r[0], &r[1]);
					if (write(fds[1], r, sizeof r) != sizeof r)
						_exit(1);
					_exit(0);
				}
			}
			close(fds[1]);
			double sw = 0, sd = 0, r[2];
			int got = 0;
			while (read(fds[0], r, sizeof r) == sizeof r && r[0] >= 0) {
				sw += r[0];
				sd += r[1];
				got++;
			}
			close(fds[0]);
			while (wait(NULL) > 0)
				;
			if (got != procs) {
				fprintf(stderr, "bench_workspace: a process failed\n");
				return 1;
			}
			w[round] = sw / procs;
			d[round] = sd / procs;
		}
		qsort(w, 5, sizeof w[0], cmp_d);
		qsort(d, 5, sizeof d[0], cmp_d);
		printf("%d process%s: write %.1f us, delete %.1f us (median per operation and process; "
		       "%.0f writes/s in all)\n", procs, procs > 1 ? "es" : "", w[2], d[2], procs * 1e6 / w[2]);
	}
	if (argc <= 1 || !argv[1][0]) {
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			return 1;
	}
	return 0;
}
