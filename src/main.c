/* main.c - command line, configuration, start and stop.
 *
 * Loads the configuration (config.c refuses anything unknown or out of range), prepares the
 * data directory, initialises the process-wide pieces that must exist before any thread (JSON
 * allocator, sandbox signal handler and precompiled prelude), then serves MCP on stdio.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "codec.h"
#include "config.h"
#include "json.h"
#include "log.h"
#include "loop.h"
#include "sandbox.h"

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
	int rc = mb_config_load(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	mb_log_set_level(cfg.log_level);
	if (make_dirs(cfg.data_dir) != 0) {
		mb_log(MB_LOG_CRIT, "cannot create data directory %s: %s", cfg.data_dir, strerror(errno));
		return 1;
	}
	mb_json_global_init();
	if (mb_codec_init() != 0) {
		mb_log(MB_LOG_CRIT, "libsodium initialisation failed");
		return 1;
	}
	if (mb_sandbox_global_init() != 0) {
		mb_log(MB_LOG_CRIT, "sandbox initialisation failed");
		return 1;
	}
	if (cfg.log_level[0] == 'd')
		mb_config_dump(&cfg, stderr);
	return mb_server_run_stdio(&cfg);
}
