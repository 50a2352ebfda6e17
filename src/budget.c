/* budget.c - limits, counters and the sticky stop state of one sandbox execution.
 *
 * See budget.h for the model. The memory counter here is authoritative for the whole execution:
 * the Lua allocator, jansson's nodes and PCRE2's match data all charge the same mb_budget, so the
 * memory cap covers what sandbox code can make native libraries allocate. Blocks handed to
 * libraries carry a 16-byte header (size + owning budget). Invariant: every block charged to a
 * budget is freed before that budget goes away (library objects never outlive the call that made
 * them), which is asserted in debug builds by mem_used returning to its pre-call value.
 */
#include "budget.h"

#include "log.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Thread_local mb_budget *current_budget;

uint64_t mb_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t mb_thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mb_budget_init(mb_budget *b, size_t mem_limit, uint64_t instruction_limit, uint64_t timeout_ms)
{
	b->mem_limit = mem_limit;
	b->instruction_limit = instruction_limit;
	b->timeout_ms = timeout_ms;
	b->deadline_ns = timeout_ms ? mb_now_ns() + timeout_ms * 1000000ull : 0;
	b->mem_used = 0;
	b->mem_peak = 0;
	b->instructions = 0;
	b->cstack_base = 0; /* set by the sandbox when the run starts */
	b->cstack_limit = 0;
	b->hook_calls = 0;
	b->hook_raised = 0;
	atomic_init(&b->stop, MB_STOP_NONE);
	atomic_init(&b->cancel, 0);
	b->job_id = 0;
	atomic_init(&b->cancel_job, 0);
}

void mb_budget_trip(mb_budget *b, mb_stop_reason why)
{
	int expected = MB_STOP_NONE;
	atomic_compare_exchange_strong(&b->stop, &expected, (int)why);
}

mb_stop_reason mb_budget_check(mb_budget *b)
{
	int s = atomic_load_explicit(&b->stop, memory_order_relaxed);
	if (s != MB_STOP_NONE)
		return (mb_stop_reason)s;
	if (atomic_load_explicit(&b->cancel, memory_order_relaxed) ||
	    (b->job_id && atomic_load_explicit(&b->cancel_job, memory_order_relaxed) == b->job_id))
		mb_budget_trip(b, MB_STOP_CANCELLED);
	else if (b->deadline_ns && mb_now_ns() >= b->deadline_ns)
		mb_budget_trip(b, MB_STOP_TIMEOUT);
	else if (b->instruction_limit && b->instructions >= b->instruction_limit)
		mb_budget_trip(b, MB_STOP_INSTRUCTIONS);
	return (mb_stop_reason)atomic_load(&b->stop);
}

const char *mb_stop_name(mb_stop_reason why)
{
	switch (why) {
	case MB_STOP_TIMEOUT: return "timeout";
	case MB_STOP_MEMORY: return "memory";
	case MB_STOP_INSTRUCTIONS: return "instructions";
	case MB_STOP_CANCELLED: return "cancelled";
	default: return "none";
	}
}

const char *mb_budget_message(const mb_budget *b, char *buf, size_t len)
{
	switch ((mb_stop_reason)atomic_load(&b->stop)) {
	case MB_STOP_TIMEOUT:
		snprintf(buf, len, "timeout: execution exceeded timeout_ms=%llu",
			 (unsigned long long)b->timeout_ms);
		break;
	case MB_STOP_MEMORY:
		snprintf(buf, len, "memory limit: execution exceeded memory_mb=%zu (%zu bytes)",
			 b->mem_limit >> 20, b->mem_limit);
		break;
	case MB_STOP_INSTRUCTIONS:
		snprintf(buf, len, "instruction limit: execution exceeded instruction_limit=%llu",
			 (unsigned long long)b->instruction_limit);
		break;
	case MB_STOP_CANCELLED:
		snprintf(buf, len, "cancelled: the client cancelled this request");
		break;
	default:
		snprintf(buf, len, "stopped");
		break;
	}
	return buf;
}

int mb_budget_raise(lua_State *L, mb_budget *b)
{
	char msg[MB_ERR_MAX];
	mb_budget_message(b, msg, sizeof msg);
	lua_pushstring(L, msg);
	return lua_error(L);
}

void mb_budget_poll(lua_State *L)
{
	mb_budget *b = mb_budget_of(L);
	if (b && mb_budget_check(b) != MB_STOP_NONE)
		mb_budget_raise(L, b);
}

void mb_budget_cstack_check(lua_State *L)
{
	mb_budget *b = mb_budget_of(L);
	if (!b || !b->cstack_base)
		return;
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);
	if (here < b->cstack_base && b->cstack_base - here > b->cstack_limit)
		luaL_error(L, "C stack overflow: calls nested through C (coroutine.close/resume/wrap, "
			      "pcall, metamethods, callbacks) exceed max_c_stack_kb=%d",
			   (int)(b->cstack_limit >> 10));
}

mb_budget *mb_budget_current(void)
{
	return current_budget;
}

void mb_budget_set_current(mb_budget *b)
{
	current_budget = b;
}

typedef struct {
	size_t size;
	mb_budget *owner;
} block_header;

_Static_assert(sizeof(block_header) == 16, "header keeps 16-byte alignment");

void *mb_budget_malloc(size_t n)
{
	mb_budget *b = current_budget;
	if (n > SIZE_MAX - sizeof(block_header))
		return NULL;
	if (b && mb_budget_charge(b, n + sizeof(block_header)) != 0)
		return NULL;
	block_header *h = malloc(sizeof(block_header) + n);
	if (!h) {
		mb_budget_credit(b, n + sizeof(block_header));
		return NULL;
	}
	h->size = n;
	h->owner = b;
	return h + 1;
}

void mb_budget_free(void *p)
{
	if (!p)
		return;
	block_header *h = (block_header *)p - 1;
	mb_budget_credit(h->owner, h->size + sizeof(block_header));
	free(h);
}
