/* sandbox_setup.h - the process set-up every in-process sandbox test or benchmark needs:
 * configuration with its defaults, the JSON allocator, the sandbox's signal handler and prelude,
 * and this thread's execution state. Returns 0, or -1 after printing why. */
#ifndef MB_SANDBOX_SETUP_H
#define MB_SANDBOX_SETUP_H
#include <stdio.h>

#include "config.h"
#include "json.h"
#include "sandbox.h"

static inline int sandbox_setup(mb_config *cfg)
{
	char *args[] = { "test", "--data-dir", "/tmp/moonbox-unit", NULL };
	if (mb_config_load(cfg, 3, args) != 0)
		return -1;
	mb_json_global_init();
	if (mb_sandbox_global_init() != 0) {
		fprintf(stderr, "sandbox initialisation failed\n");
		return -1;
	}
	return mb_sandbox_thread_init();
}
#endif
