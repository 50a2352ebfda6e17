/* pool_admit.h - what both execution pools share, below both: the thread pool (pool.c) and the
 * pool of worker processes (worker_pool.c), which pool.c hands every call to with isolation =
 * process. The callbacks a job reports through, the counters of get_execution_stats, and the
 * admission check at submit (the queue limits max_queue and max_queue_bytes).
 *
 * Kept apart so that worker_pool.c needs nothing of pool.c, which calls it: the two depended on
 * each other through pool.h (tests/arch/check.mjs counts includes as well as calls).
 *
 * Thread rules: the callbacks run on the loop thread; mb_pool_admit is a pure function.
 */
#ifndef MB_POOL_ADMIT_H
#define MB_POOL_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "sandbox.h"

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

/// Counters for get_execution_stats.
typedef struct {
	size_t workers, busy, queued, abandoned;
	size_t held;            /* busy ones whose execution waits for a client's answer */
	size_t threads, threads_peak; /* worker threads alive (stuck ones included), and the most */
	uint64_t submitted, completed, refused;
	/* isolation = process (worker_pool.h): processes alive, started, died on their own while
	 * running an execution, SIGKILLed at the deadline plus the grace; jobs sent ahead to a busy
	 * process and taken back before it started them (worker_pool.c, steal and cancel) */
	size_t processes;
	uint64_t processes_started, processes_crashed, processes_killed, jobs_taken_back;
	/* workspace operations of worker processes (worker_ops.c): waiting, on the thread pool,
	 * answered, dropped unstarted (their execution had ended) */
	uint64_t workspace_ops_queued, workspace_ops_running, workspace_ops_done, workspace_ops_dropped;
} mb_pool_stats;

/// The queue limits both pools apply at submit: with idle workers free and queued jobs waiting
/// (holding qbytes of code and context), a job of bytes code and context is admitted or
/// refused with the limit named in err.
/// @returns 0 when admitted, -1 when refused
int mb_pool_admit(const mb_config *cfg, size_t queued, size_t idle, size_t qbytes, size_t bytes,
		  char *err, size_t errlen);

#endif
