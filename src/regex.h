/* regex.h - the sandbox's `re` module: Perl-compatible regular expressions (PCRE2, JIT).
 *
 * mb_regex_open pushes a table with five functions (match, find, gmatch, gsub, split; see
 * docs/sandbox-regex.md) whose patterns and subjects are bounded by an mb_regex_limits. Every
 * match is also bounded in time: patterns are compiled with automatic callouts that poll the
 * execution budget of the calling state (mb_budget_of), so a pathological pattern stops with the
 * budget's timeout error within one pattern item of the deadline, even inside one PCRE2 call
 * (docs/sandbox-regex.md, "Time", has the measurements; one item is O(subject length), so keep
 * max_subject_bytes at a few MiB).
 *
 * Memory: everything PCRE2 allocates (compiled patterns, JIT compile scratch, match data and
 * interpreter frames) goes through mb_budget_malloc and is charged to the execution's budget;
 * JIT executable code (its size) and the JIT stack (512 KiB) are charged by hand. Compiled
 * patterns are cached per module instance for the life of the lua_State and freed by a __gc
 * when the state closes, so the state must be closed before its budget goes away (the same rule
 * as for the Lua heap).
 *
 * Thread rules: one module instance belongs to one lua_State and is used by the thread running
 * that state. Nothing is shared between states.
 */
#ifndef MB_REGEX_H
#define MB_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/* Limits of one `re` module instance. A field of 0 selects the default in brackets. Every limit
 * error names the field and its value, e.g. "re: match limit exceeded (match_limit=100000) ...". */
typedef struct {
	size_t max_pattern_bytes;   /* longest pattern source [4096] */
	size_t max_subject_bytes;   /* longest subject string [4 MiB] */
	uint32_t match_limit;       /* PCRE2 match limit, per start position [100000] */
	uint32_t heap_limit_kb;     /* PCRE2 heap limit for interpreter frames, KiB [4096] */
	uint32_t depth_limit;       /* PCRE2 depth limit (interpreter only) [0 = match_limit] */
	int max_patterns;           /* distinct (pattern, flags) pairs compiled per state [128] */
	uint32_t parens_nest_limit; /* nesting depth of parentheses in a pattern [50] */
	/* told, once per state, when re.match or re.find found nothing but would have with its
	 * first two arguments swapped (Python's re.match(pattern, s)); NULL: nobody is told */
	void (*note)(lua_State *L, const char *msg);
} mb_regex_limits;

/// Pushes the `re` module table onto L. Its functions use a copy of *lim (taken now; NULL means
/// all defaults) and share one pattern cache that lives as long as the state.
/// Allocates with Lua's allocator, so it can raise a memory error: call it in protected mode.
/// @param L   the (sandbox or host) state; limits are enforced only against the budget found
///            with mb_budget_of(L) when the functions run (none for host states).
/// @param lim the limits, copied; NULL or fields of 0 select the defaults.
/// @returns 0, with the table pushed.
int mb_regex_open(lua_State *L, const mb_regex_limits *lim);

#endif
