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

/// The worker's main: returns the process exit status (0 when the server closed the channel).
int mb_worker_main(void);

#endif
