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
 * Ownership: the pool owns jobs from mb_pool_submit until their on_done callback returns. All
 * callbacks run on the loop thread.
 */
#ifndef MB_POOL_H
#define MB_POOL_H

#include <stdio.h>
#include <uv.h>

#include "sandbox.h"

typedef struct mb_pool mb_pool;

typedef struct mb_job_callbacks {
	/* a notification from sandbox code (mcp.log / mcp.progress); json is valid during the call */
	void (*on_notify)(void *ud, uint64_t job_id, mb_notify_kind kind, int level, const char *json,
			  size_t len);
	/* sandbox code called the host (a skill, a workspace tool, an upstream server): answer with
	 * mb_pool_reply(job_id, seq, ...) now or later; name and args are valid during the call */
	void (*on_call)(void *ud, uint64_t job_id, uint64_t seq, const char *name, const char *args,
			size_t len);
	/* the job finished (or was abandoned, cancelled while queued, ...); res is valid during the call */
	void (*on_done)(void *ud, uint64_t job_id, const mb_exec_result *res);
	void *ud;
} mb_job_callbacks;

/// The queue limits both pools apply at submit: with idle workers free and queued jobs waiting,
/// a job of bytes code and context bytes is admitted (0) or refused with the limit named (-1).
static inline int mb_pool_admit(const mb_config *cfg, size_t queued, size_t idle, size_t qbytes,
				size_t bytes, char *err, size_t errlen)
{
	if (queued >= idle + (size_t)cfg->max_queue) {
		snprintf(err, errlen, "server busy: %zu executions already queued (max_queue=%lld)",
			 queued, (long long)cfg->max_queue);
		return -1;
	}
	if (qbytes + bytes > (size_t)cfg->max_queue_bytes) {
		snprintf(err, errlen, "server busy: queued executions already hold %zu bytes of code and "
			 "context (max_queue_bytes=%lld)", qbytes, (long long)cfg->max_queue_bytes);
		return -1;
	}
	return 0;
}

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

/// Number of jobs submitted and not yet reported done.
size_t mb_pool_pending(const mb_pool *p);

/// Counters for get_execution_stats.
typedef struct {
	size_t workers, busy, queued, abandoned;
	size_t threads, threads_peak; /* worker threads alive (stuck ones included), and the most */
	uint64_t submitted, completed, refused;
	/* isolation = process (worker_pool.h): processes alive, started, died on their own while
	 * running an execution, SIGKILLed at the deadline plus the grace; jobs sent ahead to a busy
	 * process and taken back before it started them (worker_pool.c, steal and cancel) */
	size_t processes;
	uint64_t processes_started, processes_crashed, processes_killed, jobs_taken_back;
} mb_pool_stats;
void mb_pool_get_stats(mb_pool *p, mb_pool_stats *out);

/// Stops the workers (after they finish their current job) and closes the loop handles; the
/// pool frees itself once its handles are closed. Call when no job is pending.
void mb_pool_close(mb_pool *p);

#endif
