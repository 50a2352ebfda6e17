/* main.c - command line, configuration, start and stop.
 *
 * Loads the configuration (config.c refuses anything unknown or out of range), prepares the
 * data directory (an installed moonbox copies its example skills and catalog files into a new
 * one, seed.c), initialises the process-wide pieces that must exist before any thread (JSON
 * allocator, sandbox signal handler and precompiled prelude), then serves MCP on stdio. Two
 * hidden flags print documentation generated from the option table for the build
 * (config_doc.c).
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "codec.h"
#include "audit.h"
#include "config.h"
#include "config_doc.h"
#include "json.h"
#include "log.h"
#include "run_cli.h"
#include "types_cli.h"
#include "server.h"
#include "sandbox.h"
#include "seed.h"
#include "worker_pool.h"
#include "worker_proc.h"

/* mkdir -p with mode 0700 for directories we create. */
static int make_dirs(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof buf)
		return -1;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, 0700) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* isolation = auto: worker processes wherever this machine can start a confined one
 * (docs/security.md, "Worker processes"); threads, said loudly, where it cannot. */
static void decide_isolation(mb_config *cfg, int ok, const char *why)
{
	if (!ok)
		mb_log(MB_LOG_WARNING, "isolation: worker processes cannot run here (%s); "
		       "executions run on threads (--isolation thread says so; with --isolation process "
		       "every execution reports why it could not run)", why);
	snprintf(cfg->isolation, sizeof cfg->isolation, "%s", ok ? "process" : "thread");
}

typedef struct {
	mb_config *cfg;
	mb_wprobe p;
	int pending; /* started, not yet awaited */
	char why[MB_ERR_MAX];
} isolation_probe;

/* Called by the server before it makes its pool: awaits the probe started in main. */
static void settle_isolation(void *ud)
{
	isolation_probe *probe = ud;
	if (!probe->pending)
		return;
	probe->pending = 0;
	decide_isolation(probe->cfg, mb_worker_probe_finish(&probe->p, probe->why, sizeof probe->why) == 0,
			 probe->why);
	if (probe->cfg->log_level[0] == 'd')
		mb_config_dump(probe->cfg, stderr);
}

/* Blocks of at least this size get their own mapping, given back to the kernel when freed.
 * glibc's default threshold starts at 128 KiB but rises to the size of every mapped block freed
 * (up to 32 MiB), after which large answers come from its heaps and what they leave is held: ten
 * 32 MB answers to clients that did not read them left the server at 241 MiB after they closed
 * (issue 30). Fixed, it also stops glibc's heap-trim threshold from rising. */
#define MMAP_THRESHOLD ((int)1 << 20)

int main(int argc, char **argv)
{
	static mb_config cfg;
	mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
	if (argc == 2 && strcmp(argv[1], MB_WORKER_FLAG) == 0)
		return mb_worker_main(); /* a worker process (isolation = process), worker_proc.h */
	if (argc == 2 && strcmp(argv[1], "--print-man") == 0) {
		mb_config_print_man(stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	if (argc >= 2 && strcmp(argv[1], "check") == 0)
		return mb_check_main(argc, argv);
	if (argc >= 2 && (strcmp(argv[1], "run") == 0 || strcmp(argv[1], "test") == 0))
		return mb_run_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "types") == 0) {
		if (argc != 3) {
			fprintf(stderr, "usage: moonbox types DIR (writes DIR/types/sandbox.lua and DIR/.luarc.json)\n");
			return 2;
		}
		return mb_types_main(argv[2]);
	}
	if (argc == 2 && strcmp(argv[1], "--print-options") == 0) {
		mb_config_print_options(stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--verify-audit") == 0) { /* the server's options, less this one */
			memmove(argv + i, argv + i + 1, sizeof *argv * (size_t)(argc - i));
			return mb_audit_verify_main(argc - 1, argv);
		}
	int rc = mb_config_load(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	mb_log_set_level(cfg.log_level);
	if (make_dirs(cfg.data_dir) != 0) {
		mb_log(MB_LOG_CRIT, "cannot create data directory %s: %s", cfg.data_dir, strerror(errno));
		return 1;
	}
	static isolation_probe probe;
	probe.cfg = &cfg;
	if (strcmp(cfg.isolation, "auto") == 0) {
		/* the probe's worker process starts while the rest of start-up runs (the store, the
		 * host, the PII detector); its answer is awaited just before the pool (settle_isolation). posix_spawn makes no
		 * thread here, and a probe left by an early return below ends at its channel's EOF */
		probe.pending = mb_worker_probe_start(&cfg, &probe.p, probe.why, sizeof probe.why) == 0;
		if (!probe.pending)
			decide_isolation(&cfg, 0, probe.why);
	}
	mb_seed_examples(&cfg);
	mb_json_global_init();
	if (mb_codec_init() != 0) {
		mb_log(MB_LOG_CRIT, "libsodium initialisation failed");
		return 1;
	}
	if (mb_sandbox_global_init() != 0) {
		mb_log(MB_LOG_CRIT, "sandbox initialisation failed");
		return 1;
	}
	if (!probe.pending && cfg.log_level[0] == 'd')
		mb_config_dump(&cfg, stderr);
	rc = mb_server_run_stdio(&cfg, settle_isolation, &probe);
	if (probe.pending) /* the server stopped before its pool: the probe's process must not outlive us */
		settle_isolation(&probe);
	return rc;
}
