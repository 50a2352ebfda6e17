/* budget.h - the resource budget of one sandbox execution.
 *
 * Every execution owns one mb_budget. It holds the limits (memory, instructions, wall-clock
 * deadline), the counters, and the sticky "stop" reason. Everything that can spend resources on
 * behalf of sandbox code consults it: the Lua allocator, the count hook, and every native builtin
 * that can run long inside C (patterns, sort, JSON, regex). Once stop is set it never clears, so
 * no pcall, coroutine or __close handler can swallow a tripped limit.
 *
 * Thread rules: a budget is used by the worker thread that runs the execution. The only fields
 * another thread may touch are `cancel` (set by the loop thread) and the deadline signal path,
 * both atomics. Native code finds the budget of the running state with mb_budget_of(L) (it lives
 * in the state's extra space); code with no lua_State (allocators handed to jansson or PCRE2) uses
 * the thread-local mb_budget_current().
 */
#ifndef MB_BUDGET_H
#define MB_BUDGET_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/* Why an execution stopped. Ordered: the first reason set wins. */
typedef enum {
	MB_STOP_NONE = 0,
	MB_STOP_TIMEOUT,      /* wall-clock deadline passed */
	MB_STOP_MEMORY,       /* allocator refused growth beyond the cap */
	MB_STOP_INSTRUCTIONS, /* instruction budget spent */
	MB_STOP_CANCELLED,    /* the client cancelled the request */
} mb_stop_reason;

typedef struct mb_budget {
	/* limits, fixed before the execution starts */
	size_t mem_limit;             /* bytes; 0 = unlimited (host use only) */
	uint64_t instruction_limit;   /* VM instructions; 0 = unlimited */
	uint64_t deadline_ns;         /* CLOCK_MONOTONIC; 0 = none */
	uint64_t timeout_ms;          /* for messages */
	/* counters */
	size_t mem_used;
	size_t mem_peak;
	uint64_t instructions;
	/* C stack: nested C calls of this execution may use cstack_limit bytes below cstack_base
	 * (the frame that started the run, on the worker thread); 0 = unchecked */
	uintptr_t cstack_base;
	size_t cstack_limit;
	/* the sandbox's hook also takes call events (the __concat guard, sandbox.c) */
	int hook_calls;
	/* the call hook raised an error (the __concat guard): Lua runs the message handler that
	 * error reaches with hooks off, so sb_xpcall_handler skips the code's handler; cleared by
	 * that handler and wherever the error can end without one (pcall, a resume) */
	int hook_raised;
	/* sticky stop state */
	atomic_int stop;              /* mb_stop_reason */
	atomic_int cancel;            /* set by the loop thread */
	/* a worker process's page serves its jobs one after another, and the server may learn that
	 * one ended only after the next began: it cancels a running job by naming it (cancel_job =
	 * the job's id), and only the job the page holds now (job_id, set by the worker when the
	 * job starts) stops. 0 = none (worker threads: each job has its own budget) */
	uint64_t job_id;
	_Atomic uint64_t cancel_job;
} mb_budget;

/* Monotonic clock in nanoseconds. */
uint64_t mb_now_ns(void);

/* CPU time of the calling thread in nanoseconds. */
uint64_t mb_thread_cpu_ns(void);

/* Initialise a budget; limits of 0 mean unlimited. timeout_ms 0 = no deadline. */
void mb_budget_init(mb_budget *b, size_t mem_limit, uint64_t instruction_limit, uint64_t timeout_ms);

/* Record a stop reason (first one wins). */
void mb_budget_trip(mb_budget *b, mb_stop_reason why);

/* Returns the stop reason, checking cancellation and the clock. Cheap enough to call every few
 * thousand steps of a C loop: one atomic load and one vDSO clock read. */
mb_stop_reason mb_budget_check(mb_budget *b);

/* Raises the sticky limit error on L (never returns). The message names the limit and its
 * value, e.g. "timeout: execution exceeded timeout_ms=5000". */
int mb_budget_raise(lua_State *L, mb_budget *b);

/* Writes the human message for a stop reason into buf; returns buf. */
const char *mb_budget_message(const mb_budget *b, char *buf, size_t len);

/* Returns a short name for a stop reason: "timeout", "memory", "instructions", "cancelled". */
const char *mb_stop_name(mb_stop_reason why);

/* The budget attached to a lua_State (stored in lua_getextraspace), or NULL for host states. */
static inline mb_budget *mb_budget_of(lua_State *L)
{
	return *(mb_budget **)lua_getextraspace(L);
}

/* Convenience for native builtins: call every N iterations of a long C loop. If the budget has
 * tripped, raises the limit error on L and does not return. Does nothing for host states. */
void mb_budget_poll(lua_State *L);

/* Guard for every native function that calls back into Lua (protected calls, coroutine
 * resume/close/wrap, sort comparators, gsub callbacks, metamethods reached through C): raises
 * "C stack overflow" on L when the execution's C stack use passed b->cstack_limit. Lua counts
 * its own nested C calls per coroutine, and 5.4.4's lua_resetthread (coroutine.close) restarts
 * that count, so __close handlers that close coroutines can recurse without bound; measuring the
 * real stack catches every such path. Does nothing for host states. */
void mb_budget_cstack_check(lua_State *L);

/* Thread-local budget for allocations made without a lua_State (jansson, PCRE2). NULL means
 * "not in an execution": allocations are unaccounted. Set around calls into those libraries. */
mb_budget *mb_budget_current(void);
void mb_budget_set_current(mb_budget *b);

/* Counted allocation for libraries with malloc/free-style hooks. Each block carries a small
 * header recording its size and the budget it was charged to (possibly NULL), so a block freed
 * later, or on another thread, credits the right budget. Returns NULL (and trips MB_STOP_MEMORY)
 * when the current budget would exceed its cap. */
void *mb_budget_malloc(size_t n);
void mb_budget_free(void *p);

/* Account a change of n bytes against b; returns 0 or -1 when growth would exceed the cap (and
 * then trips MB_STOP_MEMORY). Used by the Lua allocator and by mb_budget_malloc; inline because
 * the arena allocator calls them on every allocation. A NULL budget accounts nothing. */
static inline int mb_budget_charge(mb_budget *b, size_t n)
{
	if (!b)
		return 0;
	size_t lim = b->mem_limit;
	if (lim && (n > lim || b->mem_used > lim - n)) {
		mb_budget_trip(b, MB_STOP_MEMORY);
		return -1;
	}
	b->mem_used += n;
	if (b->mem_used > b->mem_peak)
		b->mem_peak = b->mem_used;
	return 0;
}

static inline void mb_budget_credit(mb_budget *b, size_t n)
{
	if (b)
		b->mem_used = n > b->mem_used ? 0 : b->mem_used - n;
}

#endif
