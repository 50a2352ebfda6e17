/* worker_relay.h - the server's side of one worker process (isolation = process).
 *
 * A pool thread owns one relay and, in process mode, runs each execution through it instead of
 * in its own Lua state: the relay starts the worker (the moonbox binary re-executed with
 * --worker, an empty environment, /dev/null on 0 and 1, its channel on 3 and nothing else),
 * sends the job, answers the worker's host calls, workspace operations and PII mints on this
 * thread, and turns what comes back into an mb_exec_result it checked and shaped itself. It
 * enforces the deadline from outside: the deadline signal at the deadline, SIGKILL at the
 * deadline plus half of timeout_grace_ms; a worker that dies fails only its own execution
 * (error_type "crashed", naming the signal). Refill happens on the pool thread while it would
 * otherwise wait (mb_relay_ready), never on the loop.
 *
 * Thread rules: a relay belongs to one pool thread. The counters are process-wide atomics.
 */
#ifndef MB_WORKER_RELAY_H
#define MB_WORKER_RELAY_H

#include <stdint.h>

#include "budget.h"
#include "config.h"
#include "sandbox.h"

typedef struct mb_relay mb_relay;

/// A relay for cfg (no process yet).
mb_relay *mb_relay_new(const mb_config *cfg);

/// Starts the worker process when there is none and waits until it is confined and ready.
/// @returns 0, or -1 with err set
int mb_relay_ready(mb_relay *r, char *err, size_t errlen);

/// Runs req in the worker process: the contract of mb_sandbox_run (b's deadline_ns set by the
/// caller; b->cancel is read). res is always filled and shaped.
/// @returns 0, or -1 when no worker process could be started (res says why)
int mb_relay_run(mb_relay *r, const mb_exec_request *req, mb_budget *b, mb_exec_result *res);

/// Kills and reaps the worker process and frees the relay. NULL is ignored.
void mb_relay_free(mb_relay *r);

typedef struct {
	uint64_t started;  /* worker processes started */
	uint64_t crashed;  /* died on their own (a signal or an exit) while running an execution */
	uint64_t killed;   /* SIGKILLed at the deadline plus the grace */
} mb_relay_stats;

/// The process-wide counters.
void mb_relay_stats_get(mb_relay_stats *s);

#endif
