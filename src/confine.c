/* confine.c - the confinement a worker process puts itself under before it runs untrusted Lua
 * (isolation mode `process`; confine.h for the contract, docs/security.md "Process confinement"
 * for the threat model).
 *
 * Layers, in the order they are applied; each holds even if the ones after it were missing:
 *
 *   1. descriptors: everything above 2 but the channel is closed (close_range), so nothing the
 *      process held before can be reached;
 *   2. PR_SET_NO_NEW_PRIVS (no privilege gain through execve; Landlock and an unprivileged
 *      seccomp filter require it) and PR_SET_DUMPABLE 0 (no ptrace attach by the same user, no
 *      core dump, /proc/<pid> owned by root);
 *   3. rlimits: no core files, no processes, no file growth, no new descriptors, and an address-
 *      space cap when the caller gives one;
 *   4. Landlock: a ruleset that handles every access right the running kernel knows of and allows
 *      none, so no path can be opened, executed, created, renamed or removed, no TCP port bound or
 *      connected, no abstract unix socket outside the worker connected, no process outside it
 *      signalled - whatever system calls get through. A kernel without Landlock is tolerated
 *      (report.landlock = 0); any other Landlock failure is an error;
 *   5. seccomp-bpf (libseccomp): default action: kill the process; only the calls below pass.
 *
 * The allow-list was measured, not guessed: tests/unit/test_confine.c runs the real sandbox
 * (strings, tables, coroutines, errors, float formatting, os.time/date/clock, JSON, PCRE2 with
 * patterns JIT-compiled after confinement, PII scanning, tens of MB allocated and freed, the
 * deadline signal) in confined children, and every call those children made after the filter
 * was loaded was read from strace. x86_64 only: on another architecture mb_confine fails. Each
 * number is libseccomp's for x86_64; a call through another ABI (i386 by int 0x80, x32 numbers)
 * kills the process (SCMP_FLTATR_ACT_BADARCH). Arguments are compared as 64-bit values.
 *
 *   syscall         allowed when                    why (what made it in the measurement)
 *   read            fd == channel                   requests and host-call replies from the server
 *   recvfrom        fd == channel                   recv() on the channel
 *   recvmsg         fd == channel                   a reader that uses msghdr
 *   write           fd == channel or 2              results, notifications; fprintf(stderr) lines
 *   writev          fd == channel or 2              a frame header and its payload in one call
 *   sendto          fd == channel or 2              send(..., MSG_NOSIGNAL) on the channel
 *   sendmsg         fd == channel or 2              a writer that uses msghdr
 *   mmap            MAP_ANONYMOUS, no MAP_LOCKED,   malloc above its mmap threshold (an 8 MiB
 *                   no MAP_HUGETLB                  string), a state's 64 MiB arena region, PCRE2:
 *                                                   its JIT stack (512 KiB) and JIT code, mapped
 *                                                   read-write-execute in 64 KiB chunks whenever
 *                                                   sandbox code compiles a new pattern. No file
 *                                                   mapping: fd 2 cannot be mapped to read it
 *   munmap          any                             freeing all of the above
 *   mremap          any                             realloc of a mapped block (a table's array
 *                                                   growing from 32 to 64 MiB)
 *   madvise         advice == MADV_DONTNEED         the arena returns an execution's pages; no
 *                                                   other advice (MADV_HWPOISON from a worker
 *                                                   running as root would poison host pages)
 *   brk             any                             glibc malloc's main heap (most allocations)
 *   rt_sigreturn    -                               returning from the deadline signal's handler
 *   rt_sigprocmask  any                             abort() unblocks SIGABRT; raise() blocks
 *                                                   signals around its tgkill
 *   clock_gettime   any                             os.clock (CLOCK_THREAD_CPUTIME_ID is a real
 *                                                   system call, no vDSO); the vDSO's fallback for
 *                                                   the monotonic and real-time clocks
 *   nanosleep,      any                             sleeping reaches nothing and holds only this
 *   clock_nanosleep                                 worker, which the server kills at its
 *                                                   deadline anyway; the test build's stuck-in-C
 *                                                   fault (MOONBOX_TEST_STALL) sleeps
 *   getpid gettid   -                               abort() and raise(): glibc asks the kernel for
 *                                                   both before tgkill
 *   tgkill          tgid and tid are this process   abort() ends the process with SIGABRT as it
 *                                                   would unconfined; no other process or thread
 *   exit_group      -                               _exit, exit
 *
 * In AddressSanitizer builds (the tests' sanitizer runs) its runtime also needs: sigaltstack
 * with a NULL new stack (it asks whether it runs on the alternate stack whenever Lua longjmps
 * out of an error), getrandom (allocator seeds) and madvise with any advice. An ASan report in a
 * confined process is still cut short: printing it opens /proc/self/maps, which kills.
 *
 * Not allowed, so they kill: open, openat and every other path call, stat and fstat (stdio asks
 * only for buffered streams; stderr is unbuffered), socket, socketpair, connect, bind, pipe, dup,
 * fcntl, ioctl, close (nothing after initialisation closes a descriptor, and closing the channel
 * by mistake should be loud), execve, execveat, fork, vfork, clone, clone3, kill, tkill, tgkill to
 * anything else, ptrace, process_vm_readv/writev, prctl, seccomp, setrlimit, prlimit64,
 * rt_sigaction (handlers are installed before), mprotect (nothing measured needs it: sljit maps
 * its code executable from the start), poll and select (the worker blocks in read on its only
 * descriptor), nanosleep and clock_nanosleep (nothing sleeps), futex (one thread: glibc's locks
 * are never contended), getrandom, time and gettimeofday (served by the vDSO).
 */
#include "confine.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MB_CONFINE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MB_CONFINE_ASAN 1
#endif
#endif

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

#if defined(__x86_64__)

/* Access rights newer than the kernel headers Debian 12 ships (linux-libc-dev 6.1 knows Landlock
 * ABI 2); the values are the kernel's ABI, fixed once released. */
#define MB_LL_FS_ABI1 ((1ULL << 13) - 1) /* EXECUTE .. MAKE_SYM */
#define MB_LL_FS_REFER (1ULL << 13)      /* ABI 2 */
#define MB_LL_FS_TRUNCATE (1ULL << 14)   /* ABI 3 */
#define MB_LL_FS_IOCTL_DEV (1ULL << 15)  /* ABI 5 */
#define MB_LL_NET_BIND_TCP (1ULL << 0)   /* ABI 4 */
#define MB_LL_NET_CONNECT_TCP (1ULL << 1)
#define MB_LL_SCOPE_ABSTRACT_UNIX (1ULL << 0) /* ABI 6 */
#define MB_LL_SCOPE_SIGNAL (1ULL << 1)
/* ABI 7 (Linux 6.15) added only logging flags; a later ABI's new rights are not handled until
 * they are added here. */

/* struct landlock_ruleset_attr as of ABI 6; the kernel is told how much of it is meant. */
struct mb_ll_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};

/* The thread count from /proc/self/status; 0 when /proc cannot tell. */
static int thread_count(void)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	const char *t = strstr(buf, "\nThreads:");
	return t ? atoi(t + 9) : 0;
}

/* Closes every descriptor above 2 but keep. */
static int close_others(int keep, char *err, size_t errlen)
{
	if (keep > 3 && syscall(SYS_close_range, 3u, (unsigned)keep - 1, 0u) != 0)
		goto fallback;
	if (syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0)
		return 0;
fallback:
	if (errno != ENOSYS)
		return fail(err, errlen, "close_range: %s", strerror(errno));
	/* kernels before 5.9: every possible descriptor, up to the limit */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return fail(err, errlen, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
	for (rlim_t fd = 3; fd < rl.rlim_cur; fd++)
		if ((int)fd != keep)
			close((int)fd);
	return 0;
}

/* Sets the soft and hard limit to v, or to the hard limit when that is lower. */
static int set_limit(int res, const char *name, rlim_t v, char *err, size_t errlen)
{
	struct rlimit rl;
	if (getrlimit(res, &rl) != 0)
		return fail(err, errlen, "getrlimit(%s): %s", name, strerror(errno));
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < v)
		v = rl.rlim_max;
	rl.rlim_cur = rl.rlim_max = v;
	if (setrlimit(res, &rl) != 0)
		return fail(err, errlen, "setrlimit(%s, %llu): %s", name, (unsigned long long)v,
			    strerror(errno));
	return 0;
}

/* A ruleset that handles every right the kernel knows and allows none. *abi: the version it was
 * made for, 0 when the kernel has no Landlock (not an error). */
static int landlock(int *abi, char *err, size_t errlen)
{
	*abi = 0;
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (v < 0) {
		if (errno == ENOSYS || errno == EOPNOTSUPP) /* not built, or not enabled at boot */
			return 0;
		return fail(err, errlen, "landlock_create_ruleset(VERSION): %s", strerror(errno));
	}
	struct mb_ll_attr attr = { .handled_access_fs = MB_LL_FS_ABI1 };
	size_t size = sizeof attr.handled_access_fs;
	if (v >= 2)
		attr.handled_access_fs |= MB_LL_FS_REFER;
	if (v >= 3)
		attr.handled_access_fs |= MB_LL_FS_TRUNCATE;
	if (v >= 4) {
		attr.handled_access_net = MB_LL_NET_BIND_TCP | MB_LL_NET_CONNECT_TCP;
		size = offsetof(struct mb_ll_attr, scoped);
	}
	if (v >= 5)
		attr.handled_access_fs |= MB_LL_FS_IOCTL_DEV;
	if (v >= 6) {
		attr.scoped = MB_LL_SCOPE_ABSTRACT_UNIX | MB_LL_SCOPE_SIGNAL;
		size = sizeof attr;
	}
	int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0u);
	if (fd < 0)
		return fail(err, errlen, "landlock_create_ruleset (ABI %ld): %s", v, strerror(errno));
	/* no landlock_add_rule: no path and no port is allowed anything */
	long rc = syscall(SYS_landlock_restrict_self, fd, 0u);
	int saved = errno;
	close(fd);
	if (rc != 0)
		return fail(err, errlen, "landlock_restrict_self: %s", strerror(saved));
	*abi = (int)v;
	return 0;
}

enum arg_rule {
	ANY_ARGS,
	FD_CHANNEL,           /* argument 0 is the channel */
	FD_CHANNEL_OR_STDERR, /* argument 0 is the channel or 2 */
	SELF_THREAD,          /* arguments 0 and 1 are this process and its thread */
	ANON_MAP,             /* mmap flags: MAP_ANONYMOUS, neither MAP_LOCKED nor MAP_HUGETLB */
	DONTNEED,             /* madvise advice: MADV_DONTNEED */
	ARG0_NULL,            /* argument 0 is NULL */
};

/* The allow-list; the table at the top of this file says why each entry is here. */
static const struct {
	int nr;
	enum arg_rule rule;
} allowed[] = {
	{ SCMP_SYS(read), FD_CHANNEL },
	{ SCMP_SYS(recvfrom), FD_CHANNEL },
	{ SCMP_SYS(recvmsg), FD_CHANNEL },
	{ SCMP_SYS(write), FD_CHANNEL_OR_STDERR },
	{ SCMP_SYS(writev), FD_CHANNEL_OR_STDERR },
	{ SCMP_SYS(sendto), FD_CHANNEL_OR_STDERR },
	{ SCMP_SYS(sendmsg), FD_CHANNEL_OR_STDERR },
	{ SCMP_SYS(mmap), ANON_MAP },
	{ SCMP_SYS(munmap), ANY_ARGS },
	{ SCMP_SYS(mremap), ANY_ARGS },
#ifdef MB_CONFINE_ASAN
	{ SCMP_SYS(madvise), ANY_ARGS },
	{ SCMP_SYS(sigaltstack), ARG0_NULL },
	{ SCMP_SYS(getrandom), ANY_ARGS },
#else
	{ SCMP_SYS(madvise), DONTNEED },
#endif
	{ SCMP_SYS(brk), ANY_ARGS },
	{ SCMP_SYS(rt_sigreturn), ANY_ARGS },
	{ SCMP_SYS(rt_sigprocmask), ANY_ARGS },
	{ SCMP_SYS(clock_gettime), ANY_ARGS },
	{ SCMP_SYS(nanosleep), ANY_ARGS },
	{ SCMP_SYS(clock_nanosleep), ANY_ARGS },
	{ SCMP_SYS(getpid), ANY_ARGS },
	{ SCMP_SYS(gettid), ANY_ARGS },
	{ SCMP_SYS(tgkill), SELF_THREAD },
	{ SCMP_SYS(exit_group), ANY_ARGS },
};

/* Allows nr when its arguments pass every comparison in cmp. The values are 64-bit: glibc
 * sign-extends int arguments, so descriptor 2 arrives as 2, while a raw call with high bits set
 * (2^32 + 2, which the kernel reads as descriptor 2) matches no rule and kills. */
static int allow(scmp_filter_ctx ctx, int nr, unsigned n, const struct scmp_arg_cmp *cmp)
{
	return seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, n, cmp);
}

static struct scmp_arg_cmp arg_eq(unsigned arg, scmp_datum_t v)
{
	return (struct scmp_arg_cmp){ .arg = arg, .op = SCMP_CMP_EQ, .datum_a = v, .datum_b = 0 };
}

static int add_rule(scmp_filter_ctx ctx, int nr, enum arg_rule rule, int channel)
{
	struct scmp_arg_cmp c[2];
	int rc;
	switch (rule) {
	case ANY_ARGS:
		return allow(ctx, nr, 0, NULL);
	case FD_CHANNEL:
		c[0] = arg_eq(0, (scmp_datum_t)channel);
		return allow(ctx, nr, 1, c);
	case FD_CHANNEL_OR_STDERR:
		c[0] = arg_eq(0, (scmp_datum_t)channel);
		if ((rc = allow(ctx, nr, 1, c)) != 0)
			return rc;
		c[0] = arg_eq(0, 2);
		return allow(ctx, nr, 1, c);
	case SELF_THREAD: /* single-threaded: the thread id is the process id */
		c[0] = arg_eq(0, (scmp_datum_t)getpid());
		c[1] = arg_eq(1, (scmp_datum_t)syscall(SYS_gettid));
		return allow(ctx, nr, 2, c);
	case ANON_MAP:
		c[0] = (struct scmp_arg_cmp){ .arg = 3, .op = SCMP_CMP_MASKED_EQ,
					      .datum_a = MAP_ANONYMOUS | MAP_LOCKED | MAP_HUGETLB,
					      .datum_b = MAP_ANONYMOUS };
		return allow(ctx, nr, 1, c);
	case DONTNEED:
		c[0] = arg_eq(2, MADV_DONTNEED);
		return allow(ctx, nr, 1, c);
	case ARG0_NULL:
		c[0] = arg_eq(0, 0);
		return allow(ctx, nr, 1, c);
	}
	return -EINVAL;
}

static int seccomp_filter(int channel, char *err, size_t errlen)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
	if (!ctx)
		return fail(err, errlen, "seccomp_init failed (libseccomp or the kernel lacks "
					 "SECCOMP_RET_KILL_PROCESS)");
	int rc;
	if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) != 0 ||
	    (rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1)) != 0 ||
	    /* another thread, against the contract, would get the filter too */
	    (rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1)) != 0) {
		fail(err, errlen, "seccomp_attr_set: %s", strerror(-rc));
		goto out;
	}
	for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
		if ((rc = add_rule(ctx, allowed[i].nr, allowed[i].rule, channel)) != 0) {
			char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, allowed[i].nr);
			fail(err, errlen, "seccomp_rule_add(%s): %s", name ? name : "?", strerror(-rc));
			free(name);
			goto out;
		}
	/* libseccomp reports a kernel refusal as ECANCELED, whatever the kernel said */
	if ((rc = seccomp_load(ctx)) != 0)
		fail(err, errlen, "seccomp_load: %s (the kernel must have seccomp filters with "
				  "SECCOMP_RET_KILL_PROCESS, Linux 4.14)", strerror(-rc));
out:
	seccomp_release(ctx);
	return rc != 0 ? -1 : 0;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

int mb_confine(const mb_confine_opts *o, mb_confine_report *rep, char *err, size_t errlen)
{
	mb_confine_report r = { 0 };
	if (rep)
		*rep = r;
	if (!o || o->channel_fd < 3)
		return fail(err, errlen, "process confinement: the channel must be a descriptor above 2");
	if (fcntl(o->channel_fd, F_GETFD) < 0)
		return fail(err, errlen, "process confinement: channel %d: %s", o->channel_fd,
			    strerror(errno));
	/* no_new_privs and Landlock bind the calling thread only */
	int threads = thread_count();
	if (threads > 1)
		return fail(err, errlen, "process confinement: the process has %d threads; it must "
					 "confine itself while it has one", threads);
	if (close_others(o->channel_fd, err, errlen) != 0)
		return -1;
	/* With TZ unset, glibc stats /etc/localtime again on every mktime (os.time{...}) and
	 * strftime("%Z"), which the filter kills; with TZ set it compares the string and keeps the
	 * zone it loaded. ":/etc/localtime" is what an unset TZ means; tzset loads it now. */
	if (!getenv("TZ") && setenv("TZ", ":/etc/localtime", 1) != 0)
		return fail(err, errlen, "setenv(TZ): %s", strerror(errno));
	tzset();
	/* glibc's qsort asks the kernel for the machine's memory (sysinfo) the first time it sorts
	 * more than 1 KiB, to choose between a merge sort and an in-place one, and keeps the answer:
	 * ask now (the PII scanner sorts thousands of matches in one long text). */
	{
		static int warm[512];
		for (int i = 0; i < 512; i++)
			warm[i] = 511 - i;
		qsort(warm, 512, sizeof warm[0], cmp_int);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return fail(err, errlen, "prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
	r.no_new_privs = 1;
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		return fail(err, errlen, "prctl(PR_SET_DUMPABLE): %s", strerror(errno));
	/* A write to stderr when it is a regular file goes past RLIMIT_FSIZE 0 and raises SIGXFSZ,
	 * whose default action kills: ignored, such a write fails with EFBIG instead. */
	if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR)
		return fail(err, errlen, "signal(SIGXFSZ): %s", strerror(errno));
	if (set_limit(RLIMIT_CORE, "RLIMIT_CORE", 0, err, errlen) != 0 ||
	    set_limit(RLIMIT_NPROC, "RLIMIT_NPROC", 0, err, errlen) != 0 ||
	    set_limit(RLIMIT_FSIZE, "RLIMIT_FSIZE", 0, err, errlen) != 0)
		return -1;
	if (o->address_space &&
	    set_limit(RLIMIT_AS, "RLIMIT_AS", (rlim_t)o->address_space, err, errlen) != 0)
		return -1;
	/* the ruleset is a descriptor: made before RLIMIT_NOFILE forbids new ones */
	if (landlock(&r.landlock, err, errlen) != 0)
		return -1;
	if (set_limit(RLIMIT_NOFILE, "RLIMIT_NOFILE", (rlim_t)o->channel_fd + 1, err, errlen) != 0)
		return -1;
	if (seccomp_filter(o->channel_fd, err, errlen) != 0)
		return -1;
	r.seccomp = 1;
	if (rep)
		*rep = r;
	return 0;
}

#else /* not x86_64 */

int mb_confine(const mb_confine_opts *o, mb_confine_report *rep, char *err, size_t errlen)
{
	(void)o;
	if (rep)
		*rep = (mb_confine_report){ 0 };
	return fail(err, errlen, "process confinement: the system-call allow-list was measured on "
				 "x86_64 only; this build is for another architecture");
}

#endif
