/* sandbox.h - runs one piece of untrusted Lua in a fresh, restricted lua_State.
 *
 * The request and the result are plain data (strings and numbers), so the same execution can run
 * on a worker thread today and in a separate worker process later: this is the narrow,
 * serializable interface docs/architecture.md describes. The only channel back to the host
 * while code runs is the `notify` callback (mcp.log, mcp.progress), which carries a kind and a
 * JSON payload.
 *
 * Thread rules: mb_sandbox_run runs entirely on the calling thread and touches no shared state
 * except the budget's atomics (cancel) and the notify callback, which must be thread-safe.
 */
#ifndef MB_SANDBOX_H
#define MB_SANDBOX_H

#include <stddef.h>
#include <stdint.h>

#include "budget.h"
#include "config.h"
#include "pii.h"
#include "tokest.h"
#include "workspace.h"

typedef enum {
	MB_NOTIFY_LOG = 1,      /* payload: the data as JSON; level 0..7 (debug..emergency) */
	MB_NOTIFY_PROGRESS = 2, /* payload {"progress":n, "total":n?, "message":s?}; level -1 */
} mb_notify_kind;

/* The workspace as sandbox code reaches it (sandbox_workspace.c) when it is not a local
 * mb_workspace: in a worker process, the same operations over its channel (worker_proc.c).
 * Contracts and return codes are those of workspace.h; read allocates with mb_budget_malloc,
 * list's entries are freed with mb_workspace_entries_free. */
typedef struct mb_ws_port {
	int (*read)(void *ud, const char *path, size_t plen, char **data, size_t *n, char *err,
		    size_t errlen);
	int (*write)(void *ud, const char *path, size_t plen, const void *data, size_t n, char *err,
		     size_t errlen);
	int (*list)(void *ud, const char *dir, size_t dlen, mb_workspace_entry **e, size_t *n,
		    char *err, size_t errlen);
	int (*del)(void *ud, const char *path, size_t plen, char *err, size_t errlen);
	int (*stat)(void *ud, const char *path, size_t plen, mb_workspace_info *info, char *err,
		    size_t errlen);
} mb_ws_port;

typedef struct mb_exec_request {
	const char *code;
	size_t code_len;
	const char *context_json;   /* JSON object text or NULL: becomes globals */
	size_t context_len;
	/* 1: context_json is the server's own (a published skill's arguments, a workflow and its
	 * inputs), not context_vars a client sent: it is not counted as the context_vars source */
	int context_internal;
	uint64_t timeout_ms;
	uint64_t memory_bytes;
	uint64_t instruction_limit;
	const mb_config *cfg;
	/* host calls: may be NULL; called on the executing thread; must copy what it keeps */
	void (*notify)(void *ud, mb_notify_kind kind, int level, const char *json, size_t len);
	void *notify_ud;
	/* A call from sandbox code to the host (skills; later upstream tools): a name and JSON
	 * arguments in, JSON out. Blocks the executing thread until the host answers, or the
	 * execution's deadline passes or it is cancelled. Returns 0 with *reply the answer (JSON
	 * text), 1 with *reply an error message from the host, -1 when the budget stopped the wait
	 * (the budget is tripped; *reply NULL). *reply is malloc'd; the caller frees it. May be NULL
	 * (no host: such calls fail with a clear error). */
	int (*host_call)(void *ud, const char *name, const char *args, size_t args_len, char **reply,
			 size_t *reply_len);
	void *host_ud;
	/* The tenant's workspace (workspace.h; thread-safe), or NULL when there is none. */
	struct mb_workspace *workspace;
	/* Without a workspace: a port to one elsewhere (a worker process's channel) and the
	 * quota json.read_file / json.write_file apply, or NULL. */
	const mb_ws_port *ws_port;
	void *ws_ud;
	int64_t ws_max_file_bytes;
	/* 1: personal data in the result, output and error text is replaced by tokens */
	int pii_policy;
	/* who submitted it (NULL: "default"); a worker process serves one tenant only */
	const char *tenant;
} mb_exec_request;

typedef struct mb_exec_result {
	int success;
	char *result_json;          /* malloc'd JSON text of the result ("null" when none) */
	size_t result_len;
	char *output;               /* malloc'd captured print output (valid UTF-8 not guaranteed) */
	size_t output_len;
	char *error;                /* malloc'd message, NULL on success */
	char *traceback;            /* malloc'd short traceback or NULL */
	const char *error_type;     /* static: syntax runtime timeout memory instructions cancelled result */
	/* malloc'd notes for the agent about how its code was taken ('\n' between notes, at most
	 * MB_EXEC_NOTE_MAX bytes; no data of the execution in them), or NULL: a Markdown fence
	 * removed, a call that looks like it has its arguments swapped */
	char *note;
	double execution_time_ms;
	char code_hash[33];         /* BLAKE2b-128 of the code, hex ("" when it did not run) */
	uint64_t instructions;
	size_t memory_peak_bytes;
	/* The whole structuredContent object of execute_code as JSON text, and the same text as a
	 * JSON string literal (for the text content block), built by mb_exec_result_shape - the one
	 * owner of that shape - on the thread that made the result, so the loop thread only splices
	 * them. NULL only when memory ran out. */
	char *structured_json, *structured_quoted;
	size_t structured_json_len, structured_quoted_len;
	/* values this execution replaced by tokens (policy and tokenize_pii), for the vault */
	mb_pii_found *pii_found;
	size_t pii_nfound;
	/* bytes and estimated tokens the code took in, per source, and the result's (out, set by
	 * mb_exec_result_shape): the result's _meta (mb_exec_result_meta) */
	mb_exec_io io;
} mb_exec_result;

/* Room for the largest _meta mb_exec_result_meta writes: 17 counts of 20 digits and their keys
 * (633 bytes). */
#define MB_EXEC_META_MAX 768

/* The longest note of one execution (mb_exec_result.note). */
#define MB_EXEC_NOTE_MAX 1024

/// A fresh sandbox state built ahead of time: libraries, restricted environment, prelude stubs.
/// Owned by the thread that prepared it; it runs exactly one execution.
typedef struct mb_sandbox mb_sandbox;

/// Builds a state on the calling thread, so that a worker can do this while idle and keep it
/// off the request's path. @returns the state, or NULL when even that failed (out of memory)
mb_sandbox *mb_sandbox_prepare(const mb_config *cfg);

/// Runs req in a prepared state and closes it (sb is consumed, also on failure).
/// Same contract as mb_sandbox_run.
int mb_sandbox_run_prepared(mb_sandbox *sb, const mb_exec_request *req, mb_budget *b,
			    mb_exec_result *res);

/// Same, but a state that holds at least MB_SANDBOX_DEFER_CLOSE_BYTES at its end is not closed
/// here: *deferred gets it (else NULL), res is complete, and the caller answers first and then
/// calls mb_sandbox_close_deferred - lua_close walks every object, 0.1-0.2 s for a state of
/// millions, which must not delay the answer past timeout_grace_ms (docs/security.md). b and
/// req must stay alive until that close: the allocator and native finalizers still credit b.
int mb_sandbox_run_prepared_defer(mb_sandbox *sb, const mb_exec_request *req, mb_budget *b,
				  mb_exec_result *res, mb_sandbox **deferred);

/// Closes a state handed back by mb_sandbox_run_prepared_defer (NULL: nothing).
void mb_sandbox_close_deferred(mb_sandbox *sb);

/// What a state must hold at its end for its close to be deferred. A trivial execution's state
/// holds about 11 KB, far below; closing costs about 12 ms per MiB of small objects on a loaded
/// 2-core machine (docs/security.md), so a state of 2 MiB closes well within timeout_grace_ms.
#define MB_SANDBOX_DEFER_CLOSE_BYTES ((size_t)2 << 20)

/// Closes a prepared state that will not run (thread exit).
void mb_sandbox_discard(mb_sandbox *sb);

/// Runs req under budget b (initialised by the caller with the request's limits): prepare and
/// run in one call.
/// @param req  the code, globals and limits
/// @param b    the execution budget; its cancel flag may be set from another thread
/// @param res  filled on return; release with mb_exec_result_free
/// @returns 0 when res is filled (success or a script error), -1 when the state could not be
///          created at all (res->error says why)
int mb_sandbox_run(const mb_exec_request *req, mb_budget *b, mb_exec_result *res);

/// Frees the strings of a result (not the struct).
void mb_exec_result_free(mb_exec_result *res);

/// Per-thread setup for the deadline signal; call once on each thread that runs executions.
int mb_sandbox_thread_init(void);

/// Frees what a thread kept for executions; call before the thread exits.
void mb_sandbox_thread_exit(void);

/// Builds res->structured_json and res->structured_quoted from the other fields: the one owner
/// of execute_code's result shape (mb_sandbox_run* call it; so do the pool and the host for the
/// results they make themselves: cancelled, timed out while stuck, busy). Any thread; no Lua
/// state. Leaves both NULL when out of memory.
void mb_exec_result_shape(mb_exec_result *res);

/// The tokens an execution kept out of the model's context: what the code took in from every
/// source but context_vars (which the model wrote, so had in its context already), less what it
/// returned; 0 when it returned more.
uint64_t mb_exec_io_saved(const mb_exec_io *io);

/// Writes the result's _meta object as JSON text (docs/sandbox.md, "Context saved"): the counts in
/// res->io under the key "dev.moonbox/context". Any thread; no allocation.
/// @returns its length (at most MB_EXEC_META_MAX)
size_t mb_exec_result_meta(const mb_exec_result *res, char buf[MB_EXEC_META_MAX]);

/// Makes the execution running on the calling thread check its budget at its next instruction,
/// as the deadline signal does. Async-signal-safe (a worker process's cancel signal).
void mb_sandbox_interrupt(void);

/// Process-wide setup (signal handler); call once before starting worker threads.
int mb_sandbox_global_init(void);

/// Sets the process-wide PII detector and token key the sandboxes use (sandbox_pii.c): once,
/// before any worker thread exists; NULL detector: PII functions off.
struct mb_pii_detector;
void mb_sandbox_pii_set(const struct mb_pii_detector *d, const unsigned char *key);

/// A worker process holds no key: every token its sanitizer makes comes from fn (a round trip
/// to the server, worker_proc.c). Set once, before the first execution.
void mb_sandbox_pii_set_mint(mb_pii_mint_fn fn);

/// The token of (type, value) under the process's key (hexchars hex digits): the server's side
/// of a worker process's mint, and its check of the tokens a worker reports.
/// @returns 0, or MB_PII_ERR for a bad type name or hexchars
int mb_sandbox_pii_token(const char *type, const char *value, size_t len, int hexchars,
			 char out[MB_PII_TOKEN_MAX]);

/* The pool's side of the contract: a worker thread's stack is max_c_stack_kb plus this reserve
 * (what Lua's own limit of 200 nested C calls can use after the last mb_budget_cstack_check, with
 * room for error handling; measured in docs/security.md, "C stack"), and the pool sends a worker
 * MB_SANDBOX_SIGNAL at its execution's deadline or on cancellation. */
#define MB_SANDBOX_STACK_RESERVE ((size_t)6 << 20)
#define MB_SANDBOX_SIGNAL (SIGRTMIN + 1)

#endif
