/* pool.h - where executions run: a fixed set of worker threads fed from a bounded queue (or,
 * with isolation = process, worker processes: worker_pool.h, behind the same functions).
 *
 * The loop thread submits jobs; a worker thread runs each in a fresh sandbox (built ahead while
 * the worker is idle); events (notifications, completion) come back to the loop thread through one ordered queue and
 * an eventfd wake-up (wakeup.h), so callbacks always run on the loop thread, in order, notifications of a job
 * before its completion. The pool also supervises the wall-clock limit from outside the worker:
 * at the deadline it signals the worker (the hook then fires on the next instruction), and at
 * deadline + timeout_grace_ms it answers the job with a timeout and abandons the thread, which
 * exits when its C call finally returns; a fresh worker takes its place.
 *
 * An execution whose host call waits for a client's answer (mb_pool_hold: input_required, an
 * elicitation, an approval; a person may take minutes) does not take one of the `workers`
 * places: up to held_workers more threads (processes) are started beside held executions, and
 * an idle worker starts a queued job only while fewer than `workers` executions run unheld.
 *
 * Ownership: the pool owns jobs from mb_pool_submit until their on_done callback returns. All
 * callbacks run on the loop thread. The callbacks, the counters and the admission check are
 * pool_admit.h's, which worker_pool.c shares without depending on this file.
 */
#ifndef MB_POOL_H
#define MB_POOL_H

#include <uv.h>

#include "pool_admit.h"
#include "sandbox.h"

typedef struct mb_pool mb_pool;

/// Creates the pool and starts cfg->workers threads.
/// @returns the pool, or NULL on failure (message logged)
mb_pool *mb_pool_new(uv_loop_t *loop, const mb_config *cfg, const mb_job_callbacks *cb);

/// Queues an execution. Copies code and context.
/// @param id_out  receives the job id used by callbacks and mb_pool_cancel
/// @param err     receives a message when the job is refused (queue full, too many stuck workers)
/// @returns 0, or -1 when refused
int mb_pool_submit(mb_pool *p, const mb_exec_request *req, uint64_t *id_out, char *err, size_t errlen);

/// Asks a job to stop; its on_done still arrives (with error_type "cancelled").
/// @returns 0, or -1 when the id is unknown or already done
int mb_pool_cancel(mb_pool *p, uint64_t job_id);

/// Answers a host call (loop thread). status 0: data is the JSON reply; 1: data is an error
/// message. A reply that comes after the execution stopped waiting (deadline, cancel, end) is
/// dropped. @returns 0 when delivered, -1 when dropped
int mb_pool_reply(mb_pool *p, uint64_t job_id, uint64_t seq, int status, const char *data, size_t len);

/// Marks a job whose host call waits for a client's answer (on = 1) or no longer (0): while
/// held, it does not count against `workers`, and up to held_workers more workers are started
/// for the queue (the wait may take minutes for a person). The mark counts only while the
/// job's host call is unanswered. @returns 0, or -1 when the id is unknown or already done
int mb_pool_hold(mb_pool *p, uint64_t job_id, int on);

/// Number of jobs submitted and not yet reported done.
size_t mb_pool_pending(const mb_pool *p);

/// Counters for get_execution_stats (mb_pool_stats: pool_admit.h).
void mb_pool_get_stats(mb_pool *p, mb_pool_stats *out);

/// Stops the workers (after they finish their current job) and closes the loop handles; the
/// pool frees itself once its handles are closed. Call when no job is pending.
void mb_pool_close(mb_pool *p);

#endif
