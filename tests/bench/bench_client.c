/* bench_client.c - measures an MCP server over stdio the way an agent's client meets it.
 *
 * It spawns the server command given after `--` with three pipes, sends `initialize` and
 * `notifications/initialized`, and then runs these phases in order, printing one `key=value`
 * line per figure on stdout (tests/bench/run.sh parses them; a person can read them too):
 *
 *   idle RSS     VmRSS of the server 200 ms after `initialize` was answered
 *   ping         -P sequential `ping` round trips: the transport's own floor
 *   sequential   -n sequential `tools/call` round trips (after -u warm-up calls): p50/p90/p99 µs,
 *                and the server's own figure when the result carries
 *                structuredContent.execution_time_ms (moonbox does)
 *   pipelined    -m `tools/call` requests written as fast as possible by one thread (at most -w in
 *                flight when -w is given) while another thread reads the answers: successful
 *                executions per second, errors, the latency of each request under that load, and
 *                the CPU time the server with its worker processes (from /proc/PID/stat of it
 *                and its descendants) and this client used meanwhile
 *   after        VmRSS and VmHWM (peak) of the server 500 ms after the pipelined phase
 *   startup      -s fresh spawns, each timed from posix_spawn to the `initialize` answer
 *
 * With -R FILE the server is recorded with `perf record -g` during the pipelined phase, to see
 * where its time goes under load.
 *
 * A response counts as an error when it has a top-level "error" member or "isError":true.
 * Messages from the server that carry a "method" are notifications (ignored) or requests
 * (answered with a JSON-RPC error so the server never waits on us). Every wait is bounded by -T.
 * The client is kept cheap so that it is not what gets measured: one read() fills a 256 KiB
 * buffer, lines are split with memchr, the pipelined writer sends 64 KiB batches, and the only
 * JSON parsing is a single pass over the top-level keys plus a strstr for execution_time_ms.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define INIT_LINE                                                                             \
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":" \
	"\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"moonbox-bench\","          \
	"\"version\":\"1\"}}}\n"
#define INITIALIZED_LINE "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"

typedef struct {
	const char *tool;
	const char *args;
	long seq_n, ping_n, warmup_n, pipe_m, window, spawns;
	int timeout_s;
	const char *stderr_path;
	const char *perf_out; /* -R: perf record the server during the pipelined phase */
	char **cmd;
} options;

typedef struct {
	pid_t pid;
	int in_fd;  /* we write the server's stdin */
	int out_fd; /* we read the server's stdout */
	char *buf;
	size_t len, off, cap;
	pthread_mutex_t wlock;
} server;

typedef struct {
	int has_id, has_method, has_error;
	long long id;
	int is_error;
	double exec_ms; /* < 0 when absent */
} msg_info;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static _Noreturn void die(const char *what)
{
	fprintf(stderr, "bench_client: %s: %s\n", what, errno ? strerror(errno) : "failed");
	exit(2);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory");
	return p;
}

/* ---- the server process ----------------------------------------------------------------- */

static int server_start(server *s, const options *o)
{
	int in[2], out[2];
	memset(s, 0, sizeof *s);
	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		die("pipe2");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, o->stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	int rc = posix_spawnp(&s->pid, o->cmd[0], &fa, NULL, o->cmd, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	if (rc) {
		errno = rc;
		die(o->cmd[0]);
	}
	s->in_fd = in[1];
	s->out_fd = out[0];
	s->cap = 256 * 1024;
	s->buf = xmalloc(s->cap);
	pthread_mutex_init(&s->wlock, NULL);
	return 0;
}

static void server_stop(server *s)
{
	close(s->in_fd);
	kill(s->pid, SIGTERM);
	int status;
	for (int i = 0; i < 300; i++) { /* 3 s, then SIGKILL */
		if (waitpid(s->pid, &status, WNOHANG) == s->pid)
			goto reaped;
		usleep(10000);
	}
	kill(s->pid, SIGKILL);
	waitpid(s->pid, &status, 0);
reaped:
	close(s->out_fd);
	free(s->buf);
	pthread_mutex_destroy(&s->wlock);
}

static void write_all(server *s, const char *p, size_t n)
{
	pthread_mutex_lock(&s->wlock);
	while (n) {
		ssize_t w = write(s->in_fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write to server");
		p += w;
		n -= (size_t)w;
	}
	pthread_mutex_unlock(&s->wlock);
}

/* Next line from the server (NUL-terminated, newline removed; valid until the next call), or
 * NULL on end of file or when deadline_ns passes. */
static char *read_line(server *s, uint64_t deadline_ns)
{
	for (;;) {
		char *nl = memchr(s->buf + s->off, '\n', s->len - s->off);
		if (nl) {
			char *line = s->buf + s->off;
			*nl = 0;
			s->off = (size_t)(nl - s->buf) + 1;
			return line;
		}
		if (s->off) {
			memmove(s->buf, s->buf + s->off, s->len - s->off);
			s->len -= s->off;
			s->off = 0;
		}
		if (s->len == s->cap) {
			s->cap *= 2;
			s->buf = realloc(s->buf, s->cap);
			if (!s->buf)
				die("out of memory");
		}
		uint64_t t = now_ns();
		if (t >= deadline_ns)
			return NULL;
		struct pollfd pfd = { .fd = s->out_fd, .events = POLLIN };
		int ms = (int)((deadline_ns - t) / 1000000u) + 1;
		int pr = poll(&pfd, 1, ms);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			continue; /* deadline re-checked above */
		ssize_t r = read(s->out_fd, s->buf + s->len, s->cap - s->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return NULL;
		s->len += (size_t)r;
	}
}

/* One pass over the top-level members of a JSON-RPC message. */
static void scan_message(const char *line, msg_info *mi)
{
	memset(mi, 0, sizeof *mi);
	mi->exec_ms = -1;
	int depth = 0, expect_key = 0;
	for (const char *p = line; *p; p++) {
		char c = *p;
		if (c == '"') {
			const char *q = p + 1;
			while (*q && *q != '"') {
				if (*q == '\\' && q[1])
					q++;
				q++;
			}
			if (!*q)
				break;
			if (depth == 1 && expect_key) {
				const char *k = p + 1;
				size_t klen = (size_t)(q - k);
				const char *v = q + 1;
				while (*v == ' ' || *v == ':' || *v == '\t')
					v++;
				if (klen == 2 && !memcmp(k, "id", 2)) {
					mi->has_id = 1;
					mi->id = strtoll(v, NULL, 10);
				} else if (klen == 6 && !memcmp(k, "method", 6)) {
					mi->has_method = 1;
				} else if (klen == 5 && !memcmp(k, "error", 5)) {
					mi->has_error = 1;
				}
				expect_key = 0;
			}
			p = q;
			continue;
		}
		if (c == '{' || c == '[') {
			depth++;
			expect_key = c == '{' && depth == 1;
		} else if (c == '}' || c == ']') {
			depth--;
		} else if (c == ',' && depth == 1) {
			expect_key = 1;
		}
	}
	mi->is_error = mi->has_error || strstr(line, "\"isError\":true") != NULL;
	const char *e = strstr(line, "\"execution_time_ms\":");
	if (e)
		mi->exec_ms = strtod(e + 20, NULL);
}

/* Reads until the response to `id` arrives; answers server requests on the way.
 * Returns 1 with *mi filled, or 0 on end of file / deadline. */
static int await_response(server *s, long long id, uint64_t deadline_ns, msg_info *mi)
{
	char *line;
	while ((line = read_line(s, deadline_ns))) {
		scan_message(line, mi);
		if (mi->has_method) {
			if (mi->has_id) {
				char reply[128];
				int n = snprintf(reply, sizeof reply,
						 "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"error\":{\"code\":-32601,"
						 "\"message\":\"not supported by bench client\"}}\n",
						 mi->id);
				write_all(s, reply, (size_t)n);
			}
			continue;
		}
		if (mi->has_id && mi->id == id)
			return 1;
	}
	return 0;
}

static int request_line(char *buf, size_t cap, long long id, const options *o)
{
	int n = snprintf(buf, cap,
			 "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"tools/call\",\"params\":{\"name\":"
			 "\"%s\",\"arguments\":%s}}\n",
			 id, o->tool, o->args);
	if (n < 0 || (size_t)n >= cap)
		die("request too long");
	return n;
}

static long rss_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long v = -1;
	size_t fl = strlen(field);
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, field, fl) && line[fl] == ':') {
			v = strtol(line + fl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* One process's parent and CPU time (user + system, clock ticks) from /proc/PID/stat. */
static int proc_stat(pid_t pid, pid_t *ppid, unsigned long long *ticks)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	int pp;
	unsigned long long ut, st;
	if (!p || sscanf(p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &pp, &ut, &st) != 3)
		return -1;
	*ppid = pp;
	*ticks = ut + st;
	return 0;
}

/* CPU time (user + system) the process and its live descendants have used so far, in seconds;
 * -1 when unknown. The descendants count: with isolation = process the executions run in
 * moonbox's pre-started worker processes, whose time the server's own /proc entry does not
 * hold. (A descendant that exits during the phase takes its time with it.) */
static double proc_cpu_s(pid_t pid)
{
	pid_t ppid;
	unsigned long long own;
	if (proc_stat(pid, &ppid, &own) != 0)
		return -1;
	enum { MAXP = 4096 };
	static pid_t pids[MAXP], parents[MAXP];
	static unsigned long long ticks[MAXP];
	static char in_tree[MAXP];
	size_t np = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL && np < MAXP) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		pid_t q = (pid_t)atoi(e->d_name);
		if (q != pid && proc_stat(q, &parents[np], &ticks[np]) == 0)
			pids[np++] = q;
	}
	if (d)
		closedir(d);
	memset(in_tree, 0, np);
	unsigned long long total = own;
	for (int grew = 1; grew;) { /* a few passes: children, grandchildren, ... */
		grew = 0;
		for (size_t i = 0; i < np; i++) {
			if (in_tree[i])
				continue;
			int parent_in = parents[i] == pid;
			for (size_t j = 0; j < np && !parent_in; j++)
				parent_in = in_tree[j] && pids[j] == parents[i];
			if (parent_in) {
				in_tree[i] = 1;
				total += ticks[i];
				grew = 1;
			}
		}
	}
	return (double)total / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- statistics ---------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double pct(const double *v, size_t n, double p)
{
	if (!n)
		return -1;
	size_t k = (size_t)(p / 100.0 * (double)n + 0.999999);
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

static void print_pcts(const char *prefix, double *v, size_t n)
{
	if (!n)
		return;
	qsort(v, n, sizeof *v, cmp_double);
	printf("%s_p50_us=%.1f\n%s_p90_us=%.1f\n%s_p99_us=%.1f\n", prefix, pct(v, n, 50), prefix,
	       pct(v, n, 90), prefix, pct(v, n, 99));
}

/* ---- phases ------------------------------------------------------------------------------- */

static long long next_id = 2;

static void initialize(server *s, const options *o)
{
	msg_info mi;
	write_all(s, INIT_LINE, sizeof INIT_LINE - 1);
	if (!await_response(s, 1, now_ns() + (uint64_t)o->timeout_s * 1000000000u, &mi) || mi.is_error) {
		errno = 0;
		die("no initialize response");
	}
	write_all(s, INITIALIZED_LINE, sizeof INITIALIZED_LINE - 1);
}

static void phase_ping(server *s, const options *o)
{
	if (o->ping_n <= 0)
		return;
	double *rt = xmalloc((size_t)o->ping_n * sizeof *rt);
	uint64_t deadline = now_ns() + (uint64_t)o->timeout_s * 1000000000u;
	long done = 0;
	char req[128];
	for (; done < o->ping_n; done++) {
		long long id = next_id++;
		int n = snprintf(req, sizeof req, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"ping\"}\n", id);
		msg_info mi;
		uint64_t t0 = now_ns();
		write_all(s, req, (size_t)n);
		if (!await_response(s, id, deadline, &mi))
			break;
		rt[done] = (double)(now_ns() - t0) / 1e3;
	}
	print_pcts("ping", rt, (size_t)done);
	free(rt);
}

static void phase_sequential(server *s, const options *o)
{
	long total = o->warmup_n + o->seq_n;
	if (total <= 0)
		return;
	double *rt = xmalloc((size_t)total * sizeof *rt), *sv = xmalloc((size_t)total * sizeof *sv);
	size_t nrt = 0, nsv = 0;
	long errors = 0, missing = 0;
	char req[65536];
	uint64_t deadline = now_ns() + (uint64_t)o->timeout_s * 1000000000u;
	for (long i = 0; i < total; i++) {
		long long id = next_id++;
		int n = request_line(req, sizeof req, id, o);
		msg_info mi;
		uint64_t t0 = now_ns();
		write_all(s, req, (size_t)n);
		if (!await_response(s, id, deadline, &mi)) {
			missing = total - i;
			break;
		}
		uint64_t t1 = now_ns();
		if (i < o->warmup_n)
			continue;
		if (mi.is_error)
			errors++;
		rt[nrt++] = (double)(t1 - t0) / 1e3;
		if (mi.exec_ms >= 0)
			sv[nsv++] = mi.exec_ms * 1e3;
	}
	printf("seq_n=%zu\nseq_errors=%ld\nseq_missing=%ld\n", nrt, errors, missing);
	print_pcts("seq", rt, nrt);
	print_pcts("server", sv, nsv);
	/* moonbox also reports the whole request inside the server (line read to response
	 * written) for its last 1000 tools/call requests: all of them sequential ones here. */
	if (strcmp(o->tool, "execute_code") == 0 && missing == 0) {
		long long id = next_id++;
		int n = snprintf(req, sizeof req, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":"
				 "\"tools/call\",\"params\":{\"name\":\"get_execution_stats\","
				 "\"arguments\":{}}}\n", id);
		write_all(s, req, (size_t)n);
		char *line;
		while ((line = read_line(s, deadline)) != NULL) {
			char idbuf[48], idbuf2[48];
			snprintf(idbuf, sizeof idbuf, "\"id\":%lld,", id);
			snprintf(idbuf2, sizeof idbuf2, "\"id\":%lld}", id);
			int mine = strstr(line, idbuf) || strstr(line, idbuf2);
			const char *r = mine ? strstr(line, "\"request_ms\":{") : NULL;
			const char *p = r ? strstr(r, "\"p50\":") : NULL;
			if (p) {
				printf("request_p50_us=%.1f\n", strtod(p + 6, NULL) * 1e3);
				break;
			}
			if (mine)
				break;
		}
	}
	free(rt);
	free(sv);
}

typedef struct {
	server *s;
	const options *o;
	long long base;
	long m;
	uint64_t *sent_ns;	      /* per request, written before the batch holding it is sent */
	double *lat_us;		      /* per answered request */
	long received, errors, ok;    /* reader's counters */
	long sent;		      /* writer's counter */
	int waiting;		      /* writer blocked on the window */
	uint64_t t_start, t_end, deadline;
	pthread_mutex_t mu;
	pthread_cond_t cv;
} pipe_run;

static void *pipe_writer(void *arg)
{
	pipe_run *pr = arg;
	const options *o = pr->o;
	size_t cap = 65536;
	char *batch = xmalloc(cap), one[65536];
	long i = 0;
	pr->t_start = now_ns();
	while (i < pr->m) {
		long limit = pr->m;
		if (o->window > 0) {
			pthread_mutex_lock(&pr->mu);
			while (pr->sent - pr->received >= o->window && now_ns() < pr->deadline) {
				pr->waiting = 1;
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 100000000;
				if (ts.tv_nsec >= 1000000000) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&pr->cv, &pr->mu, &ts);
			}
			pr->waiting = 0;
			limit = pr->received + o->window;
			pthread_mutex_unlock(&pr->mu);
			if (now_ns() >= pr->deadline)
				break;
			if (limit > pr->m)
				limit = pr->m;
		}
		size_t len = 0;
		long first = i;
		while (i < limit) {
			int n = request_line(one, sizeof one, pr->base + i, o);
			if (len + (size_t)n > cap)
				break;
			memcpy(batch + len, one, (size_t)n);
			len += (size_t)n;
			i++;
		}
		uint64_t t = now_ns();
		for (long k = first; k < i; k++)
			__atomic_store_n(&pr->sent_ns[k], t, __ATOMIC_RELAXED);
		pthread_mutex_lock(&pr->mu);
		pr->sent = i;
		pthread_mutex_unlock(&pr->mu);
		write_all(pr->s, batch, len);
	}
	free(batch);
	return NULL;
}

static void *pipe_reader(void *arg)
{
	pipe_run *pr = arg;
	char *line;
	long received = 0;
	while (received < pr->m && (line = read_line(pr->s, pr->deadline))) {
		msg_info mi;
		scan_message(line, &mi);
		if (mi.has_method) {
			if (mi.has_id) {
				char reply[128];
				int n = snprintf(reply, sizeof reply,
						 "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"error\":{\"code\":-32601,"
						 "\"message\":\"not supported by bench client\"}}\n",
						 mi.id);
				write_all(pr->s, reply, (size_t)n);
			}
			continue;
		}
		if (!mi.has_id || mi.id < pr->base || mi.id >= pr->base + pr->m)
			continue;
		uint64_t t = now_ns(), t0 = __atomic_load_n(&pr->sent_ns[mi.id - pr->base], __ATOMIC_RELAXED);
		pr->lat_us[received] = t0 ? (double)(t - t0) / 1e3 : 0;
		if (mi.is_error)
			pr->errors++;
		else
			pr->ok++;
		received++;
		pr->t_end = t;
		if (pr->o->window > 0) {
			pthread_mutex_lock(&pr->mu);
			pr->received = received;
			if (pr->waiting)
				pthread_cond_signal(&pr->cv);
			pthread_mutex_unlock(&pr->mu);
		}
	}
	pthread_mutex_lock(&pr->mu);
	pr->received = received;
	pthread_mutex_unlock(&pr->mu);
	return NULL;
}

/* Starts `perf record -g -p PID -o FILE` and returns its pid (or -1). */
static pid_t perf_start(pid_t target, const char *out)
{
	char pidbuf[32];
	snprintf(pidbuf, sizeof pidbuf, "%d", (int)target);
	char *argv[] = { "perf", "record", "-q", "-g", "-p", pidbuf, "-o", (char *)out, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int rc = posix_spawnp(&pid, "perf", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		return -1;
	usleep(300000); /* let it attach */
	return pid;
}

static void perf_stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGINT);
	int status;
	waitpid(pid, &status, 0);
}

static void phase_pipelined(server *s, const options *o)
{
	if (o->pipe_m <= 0)
		return;
	pid_t perf = o->perf_out ? perf_start(s->pid, o->perf_out) : -1;
	pipe_run pr = { .s = s, .o = o, .base = next_id, .m = o->pipe_m };
	next_id += o->pipe_m;
	pr.sent_ns = calloc((size_t)o->pipe_m, sizeof *pr.sent_ns);
	pr.lat_us = calloc((size_t)o->pipe_m, sizeof *pr.lat_us);
	if (!pr.sent_ns || !pr.lat_us)
		die("out of memory");
	pr.deadline = now_ns() + (uint64_t)o->timeout_s * 1000000000u;
	pthread_mutex_init(&pr.mu, NULL);
	pthread_cond_init(&pr.cv, NULL);
	double srv_cpu0 = proc_cpu_s(s->pid), cli_cpu0 = self_cpu_s();
	pthread_t w, r;
	if (pthread_create(&r, NULL, pipe_reader, &pr) || pthread_create(&w, NULL, pipe_writer, &pr))
		die("pthread_create");
	pthread_join(w, NULL);
	pthread_join(r, NULL);
	double srv_cpu = proc_cpu_s(s->pid) - srv_cpu0, cli_cpu = self_cpu_s() - cli_cpu0;
	perf_stop(perf);
	double secs = pr.t_end > pr.t_start ? (double)(pr.t_end - pr.t_start) / 1e9 : 0;
	if (srv_cpu0 >= 0 && secs > 0 && pr.received > 0)
		printf("pipe_server_cpu_us_per_call=%.1f\npipe_server_cores=%.2f\npipe_client_cores=%.2f\n",
		       srv_cpu * 1e6 / (double)pr.received, srv_cpu / secs, cli_cpu / secs);
	printf("pipe_m=%ld\npipe_window=%ld\npipe_seconds=%.3f\n", o->pipe_m, o->window, secs);
	printf("pipe_ok=%ld\npipe_errors=%ld\npipe_missing=%ld\n", pr.ok, pr.errors, o->pipe_m - pr.received);
	printf("pipe_execs_per_s=%.0f\npipe_answers_per_s=%.0f\n", secs > 0 ? (double)pr.ok / secs : 0,
	       secs > 0 ? (double)pr.received / secs : 0);
	print_pcts("pipe_latency", pr.lat_us, (size_t)pr.received);
	pthread_cond_destroy(&pr.cv);
	pthread_mutex_destroy(&pr.mu);
	free(pr.sent_ns);
	free(pr.lat_us);
}

static void phase_startup(const options *o)
{
	if (o->spawns <= 0)
		return;
	double *ms = xmalloc((size_t)o->spawns * sizeof *ms);
	long n = 0;
	for (long i = 0; i < o->spawns; i++) {
		server s;
		msg_info mi;
		uint64_t t0 = now_ns();
		server_start(&s, o);
		write_all(&s, INIT_LINE, sizeof INIT_LINE - 1);
		int got = await_response(&s, 1, t0 + (uint64_t)o->timeout_s * 1000000000u, &mi);
		uint64_t t1 = now_ns();
		server_stop(&s);
		if (got && !mi.is_error)
			ms[n++] = (double)(t1 - t0) / 1e6;
	}
	printf("startup_samples_ms=");
	for (long i = 0; i < n; i++)
		printf("%s%.2f", i ? "," : "", ms[i]);
	printf("\n");
	qsort(ms, (size_t)n, sizeof *ms, cmp_double);
	if (n)
		printf("startup_ms=%.2f\n", pct(ms, (size_t)n, 50));
	printf("startup_failed=%ld\n", o->spawns - n);
	free(ms);
}

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_client [options] -- SERVER-COMMAND [ARGS...]\n"
		"  -t NAME   tool to call (default execute_code)\n"
		"  -a JSON   its arguments (default {\"code\":\"return 1+1\"})\n"
		"  -n N      sequential tools/call round trips (default 2000; 0 skips)\n"
		"  -u N      warm-up calls before them, not counted (default 200)\n"
		"  -P N      sequential ping round trips (default 1000; 0 skips)\n"
		"  -m M      pipelined tools/call requests (default 20000; 0 skips)\n"
		"  -w W      at most W requests in flight while pipelining (default 0: no limit)\n"
		"  -s S      fresh spawns timed to the initialize answer (default 20; 0 skips)\n"
		"  -T SEC    give up on a phase after SEC seconds (default 120)\n"
		"  -l FILE   server stderr goes to FILE (default /dev/null)\n"
		"  -R FILE   perf record -g the server into FILE during the pipelined phase\n"
		"Output: key=value lines (µs, ms, kB, executions/s).\n");
	exit(2);
}

int main(int argc, char **argv)
{
	options o = { .tool = "execute_code", .args = "{\"code\":\"return 1+1\"}", .seq_n = 2000,
		      .ping_n = 1000, .warmup_n = 200, .pipe_m = 20000, .window = 0, .spawns = 20,
		      .timeout_s = 120, .stderr_path = "/dev/null" };
	int c;
	while ((c = getopt(argc, argv, "t:a:n:u:P:m:w:s:T:l:R:h")) != -1) {
		switch (c) {
		case 't': o.tool = optarg; break;
		case 'a': o.args = optarg; break;
		case 'n': o.seq_n = atol(optarg); break;
		case 'u': o.warmup_n = atol(optarg); break;
		case 'P': o.ping_n = atol(optarg); break;
		case 'm': o.pipe_m = atol(optarg); break;
		case 'w': o.window = atol(optarg); break;
		case 's': o.spawns = atol(optarg); break;
		case 'T': o.timeout_s = atoi(optarg); break;
		case 'l': o.stderr_path = optarg; break;
		case 'R': o.perf_out = optarg; break;
		default: usage();
		}
	}
	if (optind >= argc || o.timeout_s <= 0)
		usage();
	o.cmd = argv + optind;
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (o.ping_n > 0 || o.seq_n > 0 || o.pipe_m > 0) {
		server s;
		server_start(&s, &o);
		initialize(&s, &o);
		printf("server_pid=%d\n", (int)s.pid);
		usleep(200000);
		printf("rss_idle_kb=%ld\n", rss_kb(s.pid, "VmRSS"));
		phase_ping(&s, &o);
		phase_sequential(&s, &o);
		phase_pipelined(&s, &o);
		usleep(500000);
		printf("rss_after_kb=%ld\nrss_peak_kb=%ld\n", rss_kb(s.pid, "VmRSS"), rss_kb(s.pid, "VmHWM"));
		server_stop(&s);
	}
	phase_startup(&o);
	return 0;
}
