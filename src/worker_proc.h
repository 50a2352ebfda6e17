/* worker_proc.h - the worker process of isolation = process: `moonbox --worker`, started by the
 * server (worker_relay.c) with its channel on descriptor 3.
 *
 * It reads the configuration (secrets blanked) from the channel, builds what executions need
 * (Lua, the prelude, the PII detector without a key), confines itself (confine.h: seccomp,
 * Landlock, rlimits, no descriptors but the channel and stderr) and then runs one execution at a
 * time: everything it needs from outside - host calls, the workspace, PII tokens,
 * notifications - crosses the channel (worker_wire.h). It never opens a file, a socket or a
 * process, and holds no key, no store and no other tenant's data.
 */
#ifndef MB_WORKER_PROC_H
#define MB_WORKER_PROC_H

#define MB_WORKER_FD 3     /* the channel */
#define MB_WORKER_SHM_FD 4 /* at start only: one page shared with the server, which holds the
			    * running execution's budget (the server sets its cancel flag and
			    * reads its stop reason when it has to kill); closed once mapped */
#define MB_WORKER_SHM_BYTES 4096
#define MB_WORKER_FLAG "--worker"

#include <stdatomic.h>
#include <stdint.h>

#include "budget.h"

/* Jobs sent ahead to a busy worker can be taken back until it starts them (worker_pool.c,
 * steal): each W_JOB carries the worker's sequence number of it, and the claim word
 * claim[seq % MB_WORKER_CLAIMS] of the shared page, which the server sets to
 * MB_CLAIM(seq, MB_CLAIM_PENDING) before sending, goes to STARTED (the worker, when it starts
 * the job) or to REVOKED (the server, taking it back) by a compare-and-swap: exactly one of
 * them wins. A worker that meets a revoked job skips it and says so (W_SKIP), which frees the
 * slot; the server reuses a slot only once the job sent in it is known to be passed. */
#define MB_WORKER_CLAIMS 128
enum { MB_CLAIM_PENDING = 0, MB_CLAIM_STARTED = 1, MB_CLAIM_REVOKED = 2 };
#define MB_CLAIM(seq, state) (((uint64_t)(seq) << 2) | (uint64_t)(state))

/* The page shared with a worker: the running execution's budget, then the claims. */
typedef struct mb_wpage {
	mb_budget budget;
	_Atomic uint64_t claim[MB_WORKER_CLAIMS];
} mb_wpage;

/// The worker's main: returns the process exit status (0 when the server closed the channel).
int mb_worker_main(void);

#endif
