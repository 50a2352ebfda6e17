/* worker_int.h - the server's side of the worker-process protocol, shared by worker_pool.c (the
 * loop-driven pool of worker processes) and worker_relay.c (starting a worker, and checking
 * everything a worker sends). Private to src/worker*.
 */
#ifndef MB_WORKER_INT_H
#define MB_WORKER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "budget.h"
#include "config.h"
#include "sandbox.h"
#include "worker_wire.h"

/* A worker process just started: its pid, our end of its channel, the page holding its budget. */
typedef struct mb_wspawn {
	pid_t pid;
	int fd;
	mb_budget *shared;
} mb_wspawn;

/// Starts `/proc/self/exe --worker` (empty environment, /dev/null on 0 and 1, the channel on 3,
/// the shared page on 4, nothing else) and sends it W_INIT, or W_PROBE when probe is set (a
/// worker that only confines itself and reports). Blocks for the spawn: call it off the loop
/// (the thread pool). @returns 0, or -1 with err set
int mb_worker_spawn(const mb_config *cfg, int probe, mb_wspawn *out, char *err, size_t errlen);

/// Unmaps the shared page and closes the descriptor of a spawn whose process is gone.
void mb_worker_spawn_release(mb_wspawn *w);

/// Whether n bytes are one JSON value (json_check.h: one pass, no tree; a key holding \u0000
/// counts as valid) nested at most cfg->json_max_depth deep with at most max_nodes values (0:
/// any number). Sets *nodes to the values counted when nodes is not NULL.
int mb_worker_valid_json(const char *s, size_t n, const mb_config *cfg, uint64_t max_nodes,
			 uint64_t *nodes);

/// Whether the arguments of a host call named name are what the server may splice or decode:
/// JSON, or for upstream calls "server\0tool\0args" items whose args are JSON or empty, with
/// at most cfg->max_call_nodes values in all (what the worker's encoder allows). Sets why to
/// what was wrong. @returns 1 or 0
int mb_worker_valid_call(const char *name, const char *args, size_t n, const mb_config *cfg,
			 char *why, size_t whylen);

/// W_DONE into res (zeroed by the caller; code_hash and the time are the caller's): the result
/// JSON checked, the error type one of the known ones, the reported tokens recomputed with the
/// key (mismatches dropped). @returns 0; 1 when res says what was wrong with it but the worker
/// is not to be trusted again (a result that is not JSON, or holds more values than
/// max_result_nodes or is nested deeper than json_max_depth, which its encoder refuses); -1
/// for a malformed frame
int mb_worker_read_done(mb_wmsg *m, const mb_exec_request *req, mb_exec_result *res);

/// Makes res a failure of this type with this message (what it had is freed).
void mb_worker_set_failure(mb_exec_result *res, const char *type, const char *msg);

/// "the worker process running this execution died of SIGSEGV (...)" from a wait status.
void mb_worker_death_message(int status, char *msg, size_t n);

/// W_MINT: the token under the server's key, as a W_REPLY in out. @returns 0, or -1 malformed
int mb_worker_mint(mb_wmsg *m, mb_wbuf *out);

/// W_WS: the operation on ws (thread-safe; may block on the disk) with its W_REPLY in out.
/// @returns 0, or -1 malformed
int mb_worker_ws(mb_wmsg *m, struct mb_workspace *ws, mb_wbuf *out);

/// Starts a W_REPLY to a host call: status 0 (data is the answer), 1 (an error message) or 2
/// (the wait ended: extra is the stop reason).
void mb_worker_reply(mb_wbuf *out, uint64_t status, uint64_t extra, const char *data, size_t n);

#endif
