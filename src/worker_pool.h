/* worker_pool.h - the execution pool in worker processes (isolation = process), driven from the
 * loop thread: the mb_pool API of pool.h under another name. pool.c hands every call here when
 * the configuration asks for worker processes, so the rest of the server sees one pool; what
 * both share (callbacks, counters, admission) is pool_admit.h, below both.
 *
 * Thread rules: loop thread only.
 */
#ifndef MB_WORKER_POOL_H
#define MB_WORKER_POOL_H

#include <uv.h>

#include "pool_admit.h"

typedef struct mb_wpool mb_wpool;

/// Creates the pool and starts cfg->workers worker processes (in the background).
mb_wpool *mb_wpool_new(uv_loop_t *loop, const mb_config *cfg, const mb_job_callbacks *cb);
int mb_wpool_submit(mb_wpool *pp, const mb_exec_request *req, uint64_t *id_out, char *err,
		    size_t errlen);
int mb_wpool_cancel(mb_wpool *pp, uint64_t id);
int mb_wpool_hold(mb_wpool *pp, uint64_t id, int on);
int mb_wpool_reply(mb_wpool *pp, uint64_t id, uint64_t seq, int status, const char *data,
		   size_t len);
size_t mb_wpool_pending(const mb_wpool *pp);
void mb_wpool_get_stats(mb_wpool *pp, mb_pool_stats *out);
/// Kills the worker processes and closes the handles; frees itself once they are closed.
void mb_wpool_close(mb_wpool *pp);

/// isolation = auto: a worker process started to learn whether worker processes work here.
typedef struct mb_wprobe {
	struct mb_wspawn *spawn; /* NULL once finished */
	uint64_t until_ns;       /* it must be ready by then (5 s after the start) */
} mb_wprobe;

/// Starts the probe's worker process and returns at once, so that the rest of start-up runs
/// while it starts (main.c). Any thread, before the pool exists.
/// @returns 0, or -1 with why set (the spawn failed)
int mb_worker_probe_start(const mb_config *cfg, mb_wprobe *p, char *why, size_t n);

/// Waits (until 5 s after the start) for the probe's worker to report itself confined, then
/// stops it and frees the probe.
/// @returns 0 when worker processes work here, or -1 with why set (a kernel without seccomp,
///          a container that forbids what confine.c needs, a binary run under valgrind, ...)
int mb_worker_probe_finish(mb_wprobe *p, char *why, size_t n);

#endif
