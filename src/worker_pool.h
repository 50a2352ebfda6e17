/* worker_pool.h - the execution pool in worker processes (isolation = process), driven from the
 * loop thread: the mb_pool API of pool.h under another name. pool.c hands every call here when
 * the configuration asks for worker processes, so the rest of the server sees one pool.
 *
 * Thread rules: loop thread only.
 */
#ifndef MB_WORKER_POOL_H
#define MB_WORKER_POOL_H

#include <uv.h>

#include "pool.h"

typedef struct mb_wpool mb_wpool;

/// Creates the pool and starts cfg->workers worker processes (in the background).
mb_wpool *mb_wpool_new(uv_loop_t *loop, const mb_config *cfg, const mb_job_callbacks *cb);
int mb_wpool_submit(mb_wpool *pp, const mb_exec_request *req, uint64_t *id_out, char *err,
		    size_t errlen);
int mb_wpool_cancel(mb_wpool *pp, uint64_t id);
int mb_wpool_reply(mb_wpool *pp, uint64_t id, uint64_t seq, int status, const char *data,
		   size_t len);
size_t mb_wpool_pending(const mb_wpool *pp);
void mb_wpool_get_stats(mb_wpool *pp, mb_pool_stats *out);
/// Kills the worker processes and closes the handles; frees itself once they are closed.
void mb_wpool_close(mb_wpool *pp);

/// isolation = auto: starts one worker process and waits (at most 5 s) until it reports itself
/// confined, then stops it. Any thread, before the pool exists.
/// @returns 0 when worker processes work here, or -1 with why set (a kernel without seccomp,
///          a container that forbids what confine.c needs, a binary run under valgrind, ...)
int mb_worker_probe(const mb_config *cfg, char *why, size_t n);

#endif
