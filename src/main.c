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
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "codec.h"
#include "config.h"
#include "config_doc.h"
#include "json.h"
#include "log.h"
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

int main(int argc, char **argv)
{
	static mb_config cfg;
	if (argc == 2 && strcmp(argv[1], MB_WORKER_FLAG) == 0)
		return mb_worker_main(); /* a worker process (isolation = process), worker_proc.h */
	if (argc == 2 && strcmp(argv[1], "--print-man") == 0) {
		mb_config_print_man(stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	if (argc == 2 && strcmp(argv[1], "--print-options") == 0) {
		mb_config_print_options(stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	int rc = mb_config_load(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	mb_log_set_level(cfg.log_level);
	if (make_dirs(cfg.data_dir) != 0) {
		mb_log(MB_LOG_CRIT, "cannot create data directory %s: %s", cfg.data_dir, strerror(errno));
		return 1;
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
	if (strcmp(cfg.isolation, "auto") == 0) {
		/* worker processes wherever this machine can start a confined one (docs/security.md,
		 * "Worker processes"); threads, said loudly, where it cannot */
		char why[MB_ERR_MAX];
		int ok = mb_worker_probe(&cfg, why, sizeof why) == 0;
		if (!ok)
			mb_log(MB_LOG_WARNING, "isolation: worker processes cannot run here (%s); "
			       "executions run on threads (--isolation thread says so; with --isolation process "
			       "every execution reports why it could not run)", why);
		snprintf(cfg.isolation, sizeof cfg.isolation, "%s", ok ? "process" : "thread");
	}
	if (cfg.log_level[0] == 'd')
		mb_config_dump(&cfg, stderr);
	return mb_server_run_stdio(&cfg);
}
