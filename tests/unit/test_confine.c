/* test_confine.c - src/confine.c on real processes: each test forks a child that confines itself
 * with mb_confine, as a worker does, and then either runs the real sandbox (which must still work)
 * or attempts something the confinement forbids (which must kill it with SIGSYS).
 *
 * The parent is never confined. Every child is reaped: each wait has a time limit after which
 * the child is killed, and an atexit handler kills and reaps whatever is left (children also
 * get PR_SET_PDEATHSIG, so they die with the test). Children report over their channel (a
 * socketpair, the worker's channel) and end with _exit, never exit: the parent's atexit
 * handlers must not run in them.
 *
 * Skipped, with the reason printed, only when the kernel has no seccomp at all; mb_confine must
 * then fail. Under AddressSanitizer RLIMIT_AS is not set (ASan reserves terabytes of shadow
 * address space at start, so any cap below that makes every later mmap fail). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>

#include "budget.h"
#include "confine.h"
#include "config.h"
#include "pii.h"
#include "sandbox.h"
#include "sandbox_setup.h"
#include "unit.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#define EXIT_CONFINE_FAILED 90
#define EXIT_CHILD_FAILED 91
#define STRAY_FD 57 /* a descriptor the child inherits and mb_confine must close */

static mb_config cfg;
static uint64_t address_space; /* RLIMIT_AS for the children (0 under ASan) */
static int landlock_abi = -1; /* what the last confined child reported */
/* run in the child before mb_confine when set (a test's own outer seccomp filter) */
static void (*before_confine)(void);
static pid_t parent_pid; /* getppid is not allowed in the child: read before the fork */

/* ---- children ------------------------------------------------------------------------------ */

#define MAX_KIDS 64
static pid_t kids[MAX_KIDS];
static int nkids;

static void forget(pid_t pid)
{
	for (int i = 0; i < nkids; i++)
		if (kids[i] == pid) {
			kids[i] = kids[--nkids];
			return;
		}
}

/* Kills and reaps every child still known: at exit, also after a failed check. */
static void reap_all(void)
{
	for (int i = 0; i < nkids; i++) {
		kill(kids[i], SIGKILL);
		while (waitpid(kids[i], NULL, 0) < 0 && errno == EINTR)
			;
	}
	nkids = 0;
}

typedef struct {
	pid_t pid;
	int fd; /* the parent's end of the channel */
} kid;

typedef void (*child_fn)(int ch);

/* In a child: a line to the parent (write; MSG_NOSIGNAL send is exercised elsewhere). */
static void say(int ch, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof buf - 2)
		n = (int)sizeof buf - 2;
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	buf[n++] = '\n';
	for (int off = 0; off < n;) {
		ssize_t w = write(ch, buf + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(EXIT_CHILD_FAILED);
		off += (int)w;
	}
}

/* Forks a child that puts stderr_fd (if >= 0) on its descriptor 2, confines itself, reports
 * "confined <seccomp> <landlock> <nnp>" and runs fn - or reports "refused <mb_confine's error>"
 * and exits with EXIT_CONFINE_FAILED. */
static kid start_with(child_fn fn, uint64_t as, int stderr_fd)
{
	kid k = { -1, -1 };
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || nkids == MAX_KIDS) {
		fprintf(stderr, "  socketpair: %s\n", strerror(errno));
		return k;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return k;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(sv[0]);
		if (stderr_fd >= 0)
			dup2(stderr_fd, 2);
		if (before_confine)
			before_confine();
		char err[256];
		mb_confine_report rep;
		mb_confine_opts o = { .channel_fd = sv[1], .address_space = as };
		if (mb_confine(&o, &rep, err, sizeof err) != 0) {
			say(sv[1], "refused %s", err);
			_exit(EXIT_CONFINE_FAILED);
		}
		say(sv[1], "confined %d %d %d", rep.seccomp, rep.landlock, rep.no_new_privs);
		fn(sv[1]);
		_exit(0);
	}
	close(sv[1]);
	kids[nkids++] = pid;
	k.pid = pid;
	k.fd = sv[0];
	return k;
}

static kid start(child_fn fn)
{
	return start_with(fn, address_space, -1);
}

/* Reads one line from fd within timeout_ms; returns its length without the newline, -1 on EOF,
 * error or timeout. */
static int read_line(int fd, char *buf, size_t size, int timeout_ms)
{
	size_t n = 0;
	uint64_t end = mb_now_ns() + (uint64_t)timeout_ms * 1000000u;
	while (n + 1 < size) {
		int left = (int)((int64_t)(end - mb_now_ns()) / 1000000);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		ssize_t r = read(fd, buf + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (buf[n] == '\n') {
			buf[n] = 0;
			return (int)n;
		}
		n++;
	}
	buf[n] = 0;
	return -1;
}

/* Waits up to timeout_ms for the child to end; kills it after that. Returns its wait status, or
 * -1 when it had to be killed. Closes k->fd. */
static int finish(kid *k, int timeout_ms)
{
	int status = 0;
	uint64_t end = mb_now_ns() + (uint64_t)timeout_ms * 1000000u;
	pid_t r;
	while ((r = waitpid(k->pid, &status, WNOHANG)) == 0 && mb_now_ns() < end) {
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
	if (r == 0) {
		fprintf(stderr, "  child %d still running after %d ms: killed\n", (int)k->pid, timeout_ms);
		kill(k->pid, SIGKILL);
		waitpid(k->pid, &status, 0);
		status = -1;
	}
	forget(k->pid);
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	return status;
}

static const char *describe(int status, char *buf, size_t size)
{
	if (status == -1)
		snprintf(buf, size, "killed by the test (timeout)");
	else if (WIFSIGNALED(status))
		snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, size, "exited with %d", WEXITSTATUS(status));
	return buf;
}

/* Reads the child's "confined ..." line; 0 when it is confined with seccomp and NNP. */
static int expect_confined(kid *k)
{
	char line[128];
	int s = 0, l = 0, n = 0;
	if (k->pid < 0 || read_line(k->fd, line, sizeof line, 5000) < 0 ||
	    sscanf(line, "confined %d %d %d", &s, &l, &n) != 3 || s != 1 || n != 1) {
		fprintf(stderr, "  the child did not report its confinement (got \"%s\")\n",
			k->pid < 0 ? "no child" : line);
		return -1;
	}
	landlock_abi = l;
	return 0;
}

static void expect_exit0(kid *k, int timeout_ms)
{
	char why[96];
	int st = finish(k, timeout_ms);
	if (!(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0))
		fprintf(stderr, "  child %s\n", describe(st, why, sizeof why));
	CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- the sandbox, inside a confined child ---------------------------------------------------- */

static int child_channel = -1;

static void child_notify(void *ud, mb_notify_kind kind, int level, const char *json, size_t len)
{
	(void)ud;
	(void)kind;
	(void)level;
	char buf[512];
	int n = snprintf(buf, sizeof buf, "note %.*s\n", (int)(len < 400 ? len : 400), json);
	if (n > 0) /* send(): sendto with MSG_NOSIGNAL */
		(void)!send(child_channel, buf, (size_t)n, MSG_NOSIGNAL);
}

/* Runs code in a fresh sandbox and sends "ok <json> peak=<bytes>" or "err <type> <message>". */
static void exec_and_say(int ch, const char *code, uint64_t timeout_ms, uint64_t mem_mb)
{
	child_channel = ch;
	mb_budget b;
	mb_budget_init(&b, mem_mb << 20, 500000000, timeout_ms);
	mb_exec_request req = { .code = code, .code_len = strlen(code), .timeout_ms = timeout_ms,
				.memory_bytes = mem_mb << 20, .instruction_limit = 500000000, .cfg = &cfg,
				.notify = child_notify };
	mb_exec_result r;
	if (mb_sandbox_run(&req, &b, &r) != 0) {
		say(ch, "err state %s", r.error ? r.error : "?");
		mb_exec_result_free(&r);
		return;
	}
	if (r.success)
		say(ch, "ok %s peak=%zu", r.result_json, r.memory_peak_bytes);
	else
		say(ch, "err %s %s", r.error_type ? r.error_type : "?", r.error ? r.error : "?");
	mb_exec_result_free(&r);
}

/* What a worker's executions use: strings, patterns, tables, coroutines, errors, float
 * formatting, the clock and the calendar, JSON, PCRE2 (patterns JIT-compiled after confinement),
 * the PII detector, load. Each line is "name=value"; the parent compares the whole list. */
static const char program[] =
	"local r = {}\n"
	"local function add(k, v) r[#r + 1] = k .. '=' .. tostring(v) end\n"
	"add('str', ('Hello'):upper() .. '|' .. ('abcdef'):sub(2, 4) .. '|' .. #('ab'):rep(1000))\n"
	"add('gsub', (('x=1, y=22'):gsub('%d+', function(d) return '<' .. d * 2 .. '>' end)))\n"
	"add('find', table.concat({ ('key = value'):match('(%w+)%s*=%s*(%w+)') }, ','))\n"
	"local t = {} for i = 1, 2000 do t[i] = (i * 7919) % 2003 end table.sort(t)\n"
	"add('sort', t[1] .. ',' .. t[2000] .. ',' .. #t .. ',' .. table.concat({ 1, 2, 3 }, '-'))\n"
	"local m = {} for i = 1, 500 do m['k' .. i] = i end local s = 0\n"
	"for _, v in pairs(m) do s = s + v end add('pairs', s)\n"
	"local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i * i) end end)\n"
	"add('wrap', gen() + gen() + gen())\n"
	"local co = coroutine.create(function(a) local b = coroutine.yield(a + 1) error('in co ' .. b, 0) end)\n"
	"local _, x = coroutine.resume(co, 1) local ok, e = coroutine.resume(co, 5)\n"
	"add('co', x .. ',' .. tostring(ok) .. ',' .. e .. ',' .. coroutine.status(co))\n"
	"local ok1, e1 = pcall(error, { code = 7 }) add('pcall', tostring(ok1) .. ',' .. e1.code)\n"
	"local ok2, e2 = pcall(function() local n = nil return n.x end)\n"
	"add('pcall2', tostring(ok2) .. ',' .. tostring(e2:find('attempt to index') ~= nil))\n"
	"add('xpcall', select(2, xpcall(function() error('deep', 0) end, function(m) return 'h:' .. m end)))\n"
	"add('fmt', string.format('%.3f %g %.2e %5.1f %d %x %q', math.pi, 1e300, 12345.678, 2.25, 42, 255, 0.1))\n"
	"add('num', tostring(0.1) .. ' ' .. tostring(1 / 3) .. ' ' .. tostring(2 ^ 63) .. ' ' .. 7 // 2 .. ' ' .. 7 / 2)\n"
	"add('tonumber', tonumber('0x1p4') .. ' ' .. tonumber(' 1e2 ') .. ' ' .. math.tointeger(3.0))\n"
	"add('time', os.time({ year = 2020, month = 1, day = 1, hour = 12 }) - os.time({ year = 2020, month = 1, day = 1, hour = 11 }))\n"
	"add('now', os.time() > 1700000000)\n"
	"add('udate', os.date('!%Y-%m-%d %H:%M:%S', 86400 * 365))\n"
	"add('ldate', type(os.date('%c %Z')) .. ',' .. type(os.date('*t').isdst))\n"
	"add('difftime', os.difftime(10, 4))\n"
	"local c0 = os.clock() local z = 0 for i = 1, 200000 do z = z + i end\n"
	"add('clock', os.clock() >= c0 and os.clock() < 60)\n"
	"local j = json.encode({ a = { 1, 2, 3 }, b = 'x\\n', c = 1.5 })\n"
	"local d = json.decode(j) add('json', d.a[3] + d.c .. ',' .. d.b:byte(2) .. ',' .. json.encode(json.decode('[1,2.5,\"\\\\u00e9\",null]')))\n"
	"add('re', table.concat({ re.match('order 66 shipped on 2024-05-06', [[(\\d{4})-(\\d\\d)-(\\d\\d)]]) }, '/'))\n"
	"add('re2', (re.gsub('a1b22c333', [[\\d+]], function(d) return '#' .. #d end)))\n"
	"add('re3', #re.split('a, b,c ,d', [[\\s*,\\s*]]) .. ',' .. tostring(re.find('HeLLo', 'l+', nil, 'i')))\n"
	"local n = 0 for i = 1, 100 do if re.match('id-' .. i, '^id-(' .. i .. ')$') then n = n + 1 end end add('re_many', n)\n"
	"local ok3, spans = pcall(function() return pii.scan('mail alice@example.com please') end)\n"
	"add('pii', ok3 and (#spans .. ',' .. spans[1].type .. ',' .. spans[1].start .. ',' .. spans[1].stop) or spans)\n"
	"add('load', load('return 6 * 7')())\n"
	"add('utf8', utf8.len('h\\u{e9}llo') .. ',' .. utf8.char(233, 8364))\n"
	"mcp.log('info', { step = 'done' })\n"
	"return r\n";

static const char *const program_expect[] = {
	"str=HELLO|bcd|2000",
	"gsub=x=<2>, y=<44>",
	"find=key,value",
	"sort=1,2002,2000,1-2-3",
	"pairs=125250",
	"wrap=14",
	"co=2,false,in co 5,dead",
	"pcall=false,7",
	"pcall2=false,true",
	"xpcall=h:deep",
	"fmt=3.142 1e+300 1.23e+04   2.2 42 ff 0x1.999999999999ap-4",
	"num=0.1 0.33333333333333 9.2233720368548e+18 3 3.5",
	"tonumber=16.0 100.0 3",
	"time=3600",
	"now=true",
	"udate=1971-01-01 00:00:00",
	"ldate=string,boolean",
	"difftime=6.0",
	"clock=true",
	"json=4.5,10,[1,2.5,\\\"\xc3\xa9\\\",null]",
	"re=2024/05/06",
	"re2=a#1b#2c#3",
	"re3=4,3",
	"re_many=100",
	"pii=1,EMAIL,6,22",
	"load=42",
	"utf8=5,\xc3\xa9\xe2\x82\xac",
	NULL,
};

static void child_program(int ch)
{
	exec_and_say(ch, program, 5000, 64);
}

/* The next JSON string of a result array from *p (escapes kept as they are), or NULL. */
static const char *next_string(const char **p, size_t *len)
{
	const char *s = strchr(*p, '"');
	if (!s)
		return NULL;
	const char *e = ++s;
	while (*e && *e != '"')
		e += e[0] == '\\' && e[1] ? 2 : 1;
	if (!*e)
		return NULL;
	*len = (size_t)(e - s);
	*p = e + 1;
	return s;
}

/* The result line is "ok [..json array..] peak=N"; compares its strings with program_expect. */
static void check_program_result(const char *line)
{
	CHECK(strncmp(line, "ok [", 4) == 0);
	const char *p = line;
	for (int i = 0; program_expect[i]; i++) {
		size_t n;
		const char *s = next_string(&p, &n);
		if (!s) {
			fprintf(stderr, "  result ends before \"%s\"\n", program_expect[i]);
			CHECK(0);
			return;
		}
		if (n != strlen(program_expect[i]) || memcmp(s, program_expect[i], n) != 0) {
			fprintf(stderr, "  expected \"%s\", got \"%.*s\"\n", program_expect[i], (int)n, s);
			CHECK(0);
		}
	}
	CHECK(strncmp(p, "] peak=", 7) == 0);
}

TEST(the_sandbox_runs_under_confinement)
{
	kid k = start(child_program);
	if (expect_confined(&k) != 0) {
		CHECK(0);
		finish(&k, 1000);
		return;
	}
	char line[4096];
	int n = read_line(k.fd, line, sizeof line, 10000);
	CHECK(n > 0 && strstr(line, "note ") == line && strstr(line, "\"done\""));
	n = read_line(k.fd, line, sizeof line, 10000);
	if (n <= 0 || strncmp(line, "ok ", 3) != 0)
		fprintf(stderr, "  got: %s\n", line);
	check_program_result(line);
	expect_exit0(&k, 5000);
}

/* ---- memory -------------------------------------------------------------------------------- */

static const char grow[] =
	"local t = {}\n"
	"for i = 1, 400 do t[i] = string.rep(string.char(65 + i % 26), 100000) .. i end\n"
	"local big = string.rep('x', 8 * 1024 * 1024)\n"
	"local n = #big for i = 1, #t do n = n + #t[i] end\n"
	"local arr = {} for i = 1, 500000 do arr[i] = i end\n"
	"local small = {} for i = 1, 200000 do small[i] = { i } end\n"
	"return n + #arr + #small\n";

/* A table whose array part grows from 32 to 64 MiB: both above glibc's largest mmap threshold,
 * so realloc moves it with mremap. */
static const char grow_table[] =
	"local a = {} for i = 1, 3000000 do a[i] = i end return #a\n";

/* Tens of MB, three times in a row, then malloc's own view: the memory was given back. Also
 * malloc beyond RLIMIT_AS fails instead of killing. */
static void child_memory(int ch)
{
	for (int i = 0; i < 3; i++)
		exec_and_say(ch, grow, 10000, 128);
	exec_and_say(ch, grow_table, 10000, 160);
	struct mallinfo2 mi = mallinfo2();
	say(ch, "heap %zu %zu", mi.uordblks, mi.hblkhd);
	if (address_space) {
		void *p = malloc((size_t)address_space);
		say(ch, "malloc beyond RLIMIT_AS: %s", p ? "succeeded" : "NULL");
		free(p);
	} else {
		say(ch, "malloc beyond RLIMIT_AS: not tested");
	}
}

TEST(memory_grows_and_is_released)
{
	kid k = start(child_memory);
	if (expect_confined(&k) != 0) {
		CHECK(0);
		finish(&k, 1000);
		return;
	}
	char line[512];
	for (int i = 0; i < 3; i++) {
		read_line(k.fd, line, sizeof line, 20000);
		size_t peak = 0;
		const char *pk = strstr(line, "peak=");
		if (pk)
			peak = strtoull(pk + 5, NULL, 10);
		if (strncmp(line, "ok 49089700", 11) != 0 || peak < (40u << 20))
			fprintf(stderr, "  run %d: %s\n", i + 1, line);
		CHECK(strncmp(line, "ok 49089700 ", 12) == 0);
		CHECK(peak >= (40u << 20));
	}
	read_line(k.fd, line, sizeof line, 20000);
	if (strncmp(line, "ok 3000000 ", 11) != 0)
		fprintf(stderr, "  table growth: %s\n", line);
	CHECK(strncmp(line, "ok 3000000 ", 11) == 0);
	read_line(k.fd, line, sizeof line, 5000);
	size_t used = SIZE_MAX, mapped = SIZE_MAX;
	sscanf(line, "heap %zu %zu", &used, &mapped);
	if (used + mapped > (8u << 20))
		fprintf(stderr, "  after the runs: %s (in use, mmap'd)\n", line);
	CHECK(used + mapped <= (8u << 20));
	read_line(k.fd, line, sizeof line, 5000);
	if (address_space)
		CHECK_STR(line, "malloc beyond RLIMIT_AS: NULL");
	expect_exit0(&k, 5000);
}

/* ---- the deadline signal ------------------------------------------------------------------- */

static void child_loop(int ch)
{
	exec_and_say(ch, "mcp.log('info', 'looping') local i = 0 while true do i = i + 1 end", 700, 32);
}

TEST(the_deadline_signal_ends_a_loop_with_a_timeout)
{
	kid k = start(child_loop);
	if (expect_confined(&k) != 0) {
		CHECK(0);
		finish(&k, 1000);
		return;
	}
	char line[512];
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0 && strstr(line, "looping"));
	/* the pool's signal, a few times while the loop runs: each one runs the handler and returns
	 * through rt_sigreturn */
	for (int i = 0; i < 10; i++) {
		kill(k.pid, MB_SANDBOX_SIGNAL);
		struct timespec ts = { 0, 20000000 };
		nanosleep(&ts, NULL);
	}
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0);
	if (strncmp(line, "err timeout ", 12) != 0)
		fprintf(stderr, "  got: %s\n", line);
	CHECK(strncmp(line, "err timeout ", 12) == 0);
	expect_exit0(&k, 5000);
}

/* ---- the channel --------------------------------------------------------------------------- */

/* read, then recv (recvfrom) and recvmsg, each answered; the first read is interrupted by the
 * deadline signal, which must restart it. */
static void child_echo(int ch)
{
	char buf[64];
	ssize_t n = read(ch, buf, sizeof buf - 1);
	if (n <= 0)
		_exit(EXIT_CHILD_FAILED);
	buf[n] = 0;
	say(ch, "read %s", buf);
	n = recv(ch, buf, sizeof buf - 1, 0);
	if (n <= 0)
		_exit(EXIT_CHILD_FAILED);
	buf[n] = 0;
	say(ch, "recv %s", buf);
	struct iovec iov = { buf, sizeof buf - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	n = recvmsg(ch, &mh, 0);
	if (n <= 0)
		_exit(EXIT_CHILD_FAILED);
	buf[n] = 0;
	char out[96];
	int m = snprintf(out, sizeof out, "recvmsg %s\n", buf);
	struct iovec oiov = { out, (size_t)m };
	struct msghdr omh = { .msg_iov = &oiov, .msg_iovlen = 1 };
	if (sendmsg(ch, &omh, MSG_NOSIGNAL) != m)
		_exit(EXIT_CHILD_FAILED);
	struct iovec two[2] = { { "write", 5 }, { "v\n", 2 } };
	if (writev(ch, two, 2) != 7)
		_exit(EXIT_CHILD_FAILED);
	/* EOF: the parent closed its end */
	n = read(ch, buf, sizeof buf);
	_exit(n == 0 ? 0 : EXIT_CHILD_FAILED);
}

static void send_str(int fd, const char *s)
{
	CHECK(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
}

TEST(the_channel_reads_and_writes)
{
	kid k = start(child_echo);
	if (expect_confined(&k) != 0) {
		CHECK(0);
		finish(&k, 1000);
		return;
	}
	char line[128];
	struct timespec ts = { 0, 50000000 };
	nanosleep(&ts, NULL); /* the child is blocked in read now (or soon) */
	kill(k.pid, MB_SANDBOX_SIGNAL);
	nanosleep(&ts, NULL);
	send_str(k.fd, "one");
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0);
	CHECK_STR(line, "read one");
	send_str(k.fd, "two");
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0);
	CHECK_STR(line, "recv two");
	send_str(k.fd, "three");
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0);
	CHECK_STR(line, "recvmsg three");
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0);
	CHECK_STR(line, "writev");
	shutdown(k.fd, SHUT_WR);
	expect_exit0(&k, 5000);
}

/* stderr works for a pipe; when it is a regular file, RLIMIT_FSIZE makes the write fail with
 * EFBIG (the child is not killed by SIGXFSZ). */
static void child_stderr(int ch)
{
	fprintf(stderr, "line from a confined child\n");
	errno = 0;
	ssize_t n = write(2, "x", 1);
	say(ch, "write %zd %s", n, n < 0 ? strerror(errno) : "-");
}

TEST(stderr_stays_writable)
{
	int p[2];
	CHECK(pipe(p) == 0);
	kid k = start_with(child_stderr, address_space, p[1]);
	close(p[1]);
	char line[256];
	CHECK(expect_confined(&k) == 0);
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0);
	CHECK_STR(line, "write 1 -");
	expect_exit0(&k, 5000);
	CHECK(read_line(p[0], line, sizeof line, 1000) > 0);
	CHECK_STR(line, "line from a confined child");
	close(p[0]);

	char path[] = "/tmp/moonbox-confine-XXXXXX";
	int f = mkstemp(path);
	CHECK(f >= 0);
	unlink(path);
	k = start_with(child_stderr, address_space, f);
	CHECK(expect_confined(&k) == 0);
	CHECK(read_line(k.fd, line, sizeof line, 5000) > 0);
	CHECK_STR(line, "write -1 File too large");
	expect_exit0(&k, 5000);
	close(f);
}

/* ---- what kills --------------------------------------------------------------------------- */

static void try_open(int ch)
{
	(void)ch;
	int fd = open("/etc/passwd", O_RDONLY);
	dprintf(2, "  open returned %d\n", fd);
}
static void try_openat(int ch)
{
	(void)ch;
	syscall(SYS_openat, AT_FDCWD, "/etc/passwd", O_RDONLY);
}
static void try_socket(int ch)
{
	(void)ch;
	socket(AF_INET, SOCK_STREAM, 0);
}
static void try_socketpair(int ch)
{
	(void)ch;
	int sv[2];
	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
}
static void try_fork(int ch)
{
	(void)ch;
	pid_t p = fork();
	if (p == 0)
		_exit(0);
}
static void try_vfork(int ch)
{
	(void)ch;
	syscall(SYS_vfork);
}
static void try_clone3(int ch)
{
	(void)ch;
	syscall(SYS_clone3, NULL, 0);
}
static void try_execve(int ch)
{
	(void)ch;
	char *argv[] = { "/bin/true", NULL };
	char *envp[] = { NULL };
	execve("/bin/true", argv, envp);
}
static void try_write_stdout(int ch)
{
	(void)ch;
	(void)!write(1, "x", 1);
}
static void try_write_stdin(int ch)
{
	(void)ch;
	(void)!write(0, "x", 1);
}
static void try_write_fd_high_bits(int ch)
{
	/* the kernel reads the descriptor as an int: 2^32 + ch is ch to it, not to the filter */
	syscall(SYS_write, (long)((1ULL << 32) | (unsigned)ch), "x", 1L);
}
static void try_read_stdin(int ch)
{
	(void)ch;
	char c;
	(void)!read(0, &c, 1);
}
static void try_kill_parent(int ch)
{
	(void)ch;
	kill(parent_pid, 0);
}
static void try_tgkill_parent(int ch)
{
	(void)ch;
	syscall(SYS_tgkill, parent_pid, parent_pid, 0);
}
static void try_ptrace(int ch)
{
	(void)ch;
	syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0);
}
static void try_prctl(int ch)
{
	(void)ch;
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}
static void try_setrlimit(int ch)
{
	(void)ch;
	struct rlimit rl = { 1024, 1024 };
	setrlimit(RLIMIT_NOFILE, &rl);
}
static void try_close(int ch)
{
	close(ch);
}
static void try_mmap_stderr(int ch)
{
	(void)ch;
	mmap(NULL, 4096, PROT_READ, MAP_SHARED, 2, 0); /* a file mapping: reading fd 2 another way */
}
static void try_mmap_locked(int ch)
{
	(void)ch;
	mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_LOCKED, -1, 0);
}
static __attribute__((unused)) void try_madvise_other(int ch)
{
	(void)ch;
	static char page[8192] __attribute__((aligned(4096)));
	madvise(page, 4096, MADV_WILLNEED);
}
static void try_mprotect_exec(int ch)
{
	(void)ch;
	static char page[8192] __attribute__((aligned(4096)));
	mprotect(page, 4096, PROT_READ | PROT_EXEC);
}
static void try_sigaction(int ch)
{
	(void)ch;
	signal(SIGINT, SIG_IGN);
}
static void try_i386_abi(int ch)
{
	(void)ch;
	/* getpid through the 32-bit entry (number 20 there): another architecture to seccomp */
	long ret = 20;
	__asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
}
static void try_x32_abi(int ch)
{
	(void)ch;
	/* getpid with the x32 bit: same audit arch as x86_64, a different syscall table */
	syscall(0x40000000L | SYS_getpid);
}

static const struct {
	const char *what;
	child_fn fn;
} forbidden[] = {
	{ "open(\"/etc/passwd\")", try_open },
	{ "openat", try_openat },
	{ "socket(AF_INET)", try_socket },
	{ "socketpair", try_socketpair },
	{ "fork()", try_fork },
	{ "vfork", try_vfork },
	{ "clone3", try_clone3 },
	{ "execve(\"/bin/true\")", try_execve },
	{ "write(1) (stdout)", try_write_stdout },
	{ "write(0)", try_write_stdin },
	{ "write to 2^32 + channel", try_write_fd_high_bits },
	{ "read(0)", try_read_stdin },
	{ "kill(parent, 0)", try_kill_parent },
	{ "tgkill(parent)", try_tgkill_parent },
	{ "ptrace(TRACEME)", try_ptrace },
	{ "prctl after the filter", try_prctl },
	{ "setrlimit", try_setrlimit },
	{ "close(channel)", try_close },
	{ "mmap of fd 2", try_mmap_stderr },
	{ "mmap(MAP_LOCKED)", try_mmap_locked },
#ifndef UNDER_ASAN /* ASan's runtime needs madvise with other advice: allowed in its builds */
	{ "madvise(MADV_WILLNEED)", try_madvise_other },
#endif
	{ "mprotect(PROT_EXEC)", try_mprotect_exec },
	{ "rt_sigaction", try_sigaction },
	{ "a syscall through int 0x80 (i386)", try_i386_abi },
	{ "a syscall with the x32 bit", try_x32_abi },
};

TEST(forbidden_calls_kill_with_sigsys)
{
	for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++) {
		kid k = start(forbidden[i].fn);
		int confined = expect_confined(&k) == 0;
		char why[96];
		int st = finish(&k, 5000);
		int ok = confined && st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS;
		if (!ok)
			fprintf(stderr, "  %s: child %s, not killed by SIGSYS\n", forbidden[i].what,
				describe(st, why, sizeof why));
		CHECK(ok);
	}
}

static void child_abort(int ch)
{
	(void)ch;
	abort();
}

TEST(abort_still_ends_the_process)
{
	kid k = start(child_abort);
	CHECK(expect_confined(&k) == 0);
	char why[96];
	int st = finish(&k, 5000);
	/* tgkill to itself is allowed, so it is SIGABRT, as unconfined */
	if (!(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT))
		fprintf(stderr, "  abort(): child %s\n", describe(st, why, sizeof why));
	CHECK(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

/* ---- seen from outside --------------------------------------------------------------------- */

static void child_wait(int ch)
{
	char c;
	(void)!read(ch, &c, 1); /* until the parent has looked */
}

/* The value of a "Name:\t..." line of /proc/<pid>/status, or "" */
static const char *status_field(pid_t pid, const char *name, char *out, size_t size)
{
	char path[64], buf[8192];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	out[0] = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return out;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return out;
	buf[n] = 0;
	size_t len = strlen(name);
	for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (strncmp(l, name, len) == 0 && l[len] == ':') {
			const char *v = l + len + 1;
			while (*v == '\t' || *v == ' ')
				v++;
			size_t k = strcspn(v, "\n");
			snprintf(out, size, "%.*s", (int)k, v);
			break;
		}
	return out;
}

TEST(the_confinement_seen_from_outside)
{
	/* a stray descriptor the child inherits: mb_confine closes it */
	int stray = open("/dev/null", O_RDONLY);
	CHECK(stray >= 0 && dup2(stray, STRAY_FD) == STRAY_FD);
	close(stray);
	kid k = start(child_wait);
	close(STRAY_FD);
	if (expect_confined(&k) != 0) {
		CHECK(0);
		finish(&k, 1000);
		return;
	}
	char v[128];
	CHECK_STR(status_field(k.pid, "NoNewPrivs", v, sizeof v), "1");
	CHECK_STR(status_field(k.pid, "Seccomp", v, sizeof v), "2"); /* SECCOMP_MODE_FILTER */
	CHECK_STR(status_field(k.pid, "Seccomp_filters", v, sizeof v), "1");
	CHECK_STR(status_field(k.pid, "Threads", v, sizeof v), "1");

	struct rlimit rl;
	struct {
		int res;
		rlim_t want;
		const char *name;
	} lim[] = { { RLIMIT_CORE, 0, "RLIMIT_CORE" },
		    { RLIMIT_NPROC, 0, "RLIMIT_NPROC" },
		    { RLIMIT_FSIZE, 0, "RLIMIT_FSIZE" },
		    { RLIMIT_NOFILE, 0, "RLIMIT_NOFILE" },
		    { RLIMIT_AS, address_space ? address_space : RLIM_INFINITY, "RLIMIT_AS" } };
	for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
		if (prlimit(k.pid, lim[i].res, NULL, &rl) != 0) {
			fprintf(stderr, "  prlimit(%s): %s\n", lim[i].name, strerror(errno));
			CHECK(0);
			continue;
		}
		if (lim[i].res == RLIMIT_NOFILE) /* the channel's number + 1: no new descriptor */
			CHECK(rl.rlim_cur == rl.rlim_max && rl.rlim_cur <= 16);
		else if (rl.rlim_cur != lim[i].want || rl.rlim_max != lim[i].want) {
			fprintf(stderr, "  %s is %llu/%llu\n", lim[i].name,
				(unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
			CHECK(0);
		}
	}

	/* descriptors: 0, 1, 2 and the channel, nothing else (root reads a non-dumpable
	 * process's fd directory; another user cannot, and this check is then skipped) */
	char dir[64];
	int found = 0, stray_seen = 0, readable = 1;
	for (int fd = 0; fd < 1024; fd++) {
		snprintf(dir, sizeof dir, "/proc/%d/fd/%d", (int)k.pid, fd);
		char target[256];
		ssize_t n = readlink(dir, target, sizeof target);
		if (n < 0 && errno == EACCES)
			readable = 0;
		if (n >= 0) {
			found++;
			stray_seen |= fd == STRAY_FD;
		}
	}
	if (readable) {
		CHECK(found == 4);
		CHECK(!stray_seen);
	} else {
		printf("note: /proc/<pid>/fd of a non-dumpable process is not readable here; "
		       "descriptor check skipped\n");
	}
	send_str(k.fd, "x");
	expect_exit0(&k, 5000);
}

/* ---- kernels without Landlock or seccomp, simulated ---------------------------------------- */

/* An outer filter, loaded in the child before mb_confine, that answers the given calls as a kernel
 * without them would: landlock_create_ruleset with ll_errno; seccomp() with ENOSYS and
 * prctl(PR_SET_SECCOMP) with EINVAL when hide_seccomp. Everything else passes. */
static int ll_errno, hide_seccomp;

static void outer_filter(void)
{
	scmp_filter_ctx c = seccomp_init(SCMP_ACT_ALLOW);
	struct scmp_arg_cmp set_seccomp = { .arg = 0, .op = SCMP_CMP_EQ, .datum_a = PR_SET_SECCOMP,
					    .datum_b = 0 };
	int rc = c ? 0 : -1;
	if (rc == 0 && ll_errno)
		rc = seccomp_rule_add_array(c, SCMP_ACT_ERRNO((unsigned)ll_errno),
					    SCMP_SYS(landlock_create_ruleset), 0, NULL);
	if (rc == 0 && hide_seccomp)
		rc = seccomp_rule_add_array(c, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(seccomp), 0, NULL);
	if (rc == 0 && hide_seccomp)
		rc = seccomp_rule_add_array(c, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(prctl), 1, &set_seccomp);
	if (rc == 0)
		rc = seccomp_load(c);
	seccomp_release(c);
	if (rc != 0) {
		dprintf(2, "  child: the outer filter did not load\n");
		_exit(EXIT_CHILD_FAILED);
	}
}

/* Starts fn in a child behind the outer filter; returns its wait status (or -1). *report gets the
 * child's "confined" line when it was confined. */
static int run_behind_outer_filter(child_fn fn, char *report, size_t size)
{
	before_confine = outer_filter;
	kid k = start(fn);
	before_confine = NULL;
	report[0] = 0;
	if (read_line(k.fd, report, size, 5000) < 0)
		report[0] = 0;
	return finish(&k, 5000);
}

/* ENOSYS (not built) or EOPNOTSUPP (disabled at boot): landlock = 0, everything else holds. */
TEST(without_landlock_the_rest_still_holds)
{
	int errs[] = { ENOSYS, EOPNOTSUPP };
	for (int i = 0; i < 2; i++) {
		ll_errno = errs[i];
		char report[128], why[96];
		int st = run_behind_outer_filter(try_open, report, sizeof report);
		if (strcmp(report, "confined 1 0 1") != 0 || st == -1 || !WIFSIGNALED(st) ||
		    WTERMSIG(st) != SIGSYS)
			fprintf(stderr, "  landlock %s: \"%s\", child %s\n", strerror(errs[i]), report,
				describe(st, why, sizeof why));
		CHECK_STR(report, "confined 1 0 1");
		CHECK(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
	}
	/* any other Landlock error is a failure, not a silent downgrade */
	ll_errno = EPERM;
	char report[128];
	int st = run_behind_outer_filter(try_open, report, sizeof report);
	CHECK_STR(report, "refused landlock_create_ruleset(VERSION): Operation not permitted");
	CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_CONFINE_FAILED);
	ll_errno = 0;
}

/* A kernel without seccomp: mb_confine fails, the child never gets to run anything. */
TEST(without_seccomp_mb_confine_fails_simulated)
{
	hide_seccomp = 1;
	char report[128], why[96];
	int st = run_behind_outer_filter(try_open, report, sizeof report);
	hide_seccomp = 0;
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != EXIT_CONFINE_FAILED)
		fprintf(stderr, "  \"%s\", child %s\n", report, describe(st, why, sizeof why));
	CHECK(strncmp(report, "refused seccomp_load: ", 22) == 0);
	CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_CONFINE_FAILED);
}

/* ---- main ---------------------------------------------------------------------------------- */

/* Address space for the children: what this process maps now plus 512 MiB. */
static uint64_t pick_address_space(void)
{
#ifdef UNDER_ASAN
	return 0;
#else
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	unsigned long long pages = strtoull(buf, NULL, 10);
	return pages * (uint64_t)sysconf(_SC_PAGESIZE) + (512ull << 20);
#endif
}

static void child_unreachable(int ch)
{
	(void)ch;
	_exit(EXIT_CHILD_FAILED);
}

/* Without seccomp, mb_confine must refuse: never run code unconfined. */
TEST(without_seccomp_mb_confine_fails)
{
	kid k = start_with(child_unreachable, 0, -1);
	char why[96];
	int st = finish(&k, 5000);
	if (!(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_CONFINE_FAILED))
		fprintf(stderr, "  child %s\n", describe(st, why, sizeof why));
	CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_CONFINE_FAILED);
}

int main(void)
{
	atexit(reap_all);
	parent_pid = getpid();
	if (sandbox_setup(&cfg) != 0)
		return 1;
	tzset();
	char err[256];
	static unsigned char key[MB_PII_KEY_BYTES] = "test key for the confined child";
	mb_pii_detector *d = mb_pii_detector_new(NULL, err, sizeof err);
	if (!d) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	mb_sandbox_pii_set(d, key);
	address_space = pick_address_space();

	if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 && errno == EINVAL) {
		printf("skipped: the kernel has no seccomp (prctl(PR_GET_SECCOMP): EINVAL); checking "
		       "only that mb_confine refuses\n");
		RUN(without_seccomp_mb_confine_fails);
		mb_sandbox_pii_set(NULL, NULL);
		mb_pii_detector_free(d);
		return UNIT_END();
	}
#ifdef UNDER_ASAN
	printf("note: AddressSanitizer build: RLIMIT_AS is left unset in the children, and the "
	       "filter also allows what ASan's runtime needs (confine.c)\n");
#endif
	RUN(the_sandbox_runs_under_confinement);
	RUN(memory_grows_and_is_released);
	RUN(the_deadline_signal_ends_a_loop_with_a_timeout);
	RUN(the_channel_reads_and_writes);
	RUN(stderr_stays_writable);
	RUN(forbidden_calls_kill_with_sigsys);
	RUN(abort_still_ends_the_process);
	RUN(the_confinement_seen_from_outside);
	int abi = landlock_abi; /* the real kernel's, before the simulated ones */
	RUN(without_landlock_the_rest_still_holds);
	RUN(without_seccomp_mb_confine_fails_simulated);
	landlock_abi = abi;
	if (landlock_abi > 0)
		printf("note: Landlock ABI %d applied in the children\n", landlock_abi);
	else
		printf("note: no Landlock in this kernel (seccomp and rlimits only)\n");
	reap_all();
	mb_sandbox_thread_exit();
	mb_sandbox_pii_set(NULL, NULL);
	mb_pii_detector_free(d);
	return UNIT_END();
}
