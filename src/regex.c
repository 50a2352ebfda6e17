/* regex.c - the sandbox's `re` module on PCRE2 (8-bit, JIT).
 *
 * Pieces, in file order:
 *  - re_state: one full userdata per module instance (an upvalue of every function). It holds the
 *    copied limits, the PCRE2 contexts (general context allocating through mb_budget_malloc, a
 *    compile context with the pattern-length and nesting limits, a match context with the match,
 *    heap and depth limits, the deadline callout and a private JIT stack), one shared match-data
 *    block, and an inline array of compiled patterns. Its user value is the cache index:
 *    cache[flags + 1][pattern] = slot. Slots are never evicted: max_patterns caps the number of
 *    distinct (pattern, flags) pairs per state, which also bounds JIT code memory. __gc frees it
 *    all when the state closes.
 *  - Time: every pattern is compiled with PCRE2_AUTO_CALLOUT. The callout runs between pattern
 *    items (JIT and interpreter alike) and compares the coarse clock with the deadline, so one
 *    pcre2_match on a long subject stops within one item of the deadline. The match limit alone
 *    cannot ensure that: it restarts at every start position, and a single start position can
 *    spend O(subject) time per counted step (seconds on a 100 KB subject before the limit).
 *    Callouts cost time too, and a single item stays O(subject length), which is why
 *    max_subject_bytes must stay moderate (docs/sandbox-regex.md has the figures).
 *  - re_exec runs one match and turns every PCRE2 failure into a Lua error naming the limit.
 *    Reentrancy: gsub calls back into Lua, which may use `re` again and replace the shared match
 *    data, so callers copy the offsets they need before any Lua call and never keep ovector
 *    pointers across one.
 *  - The five Lua functions. Global iteration (gmatch, gsub, split) follows Perl: after an empty
 *    match the next attempt at the same position must be non-empty (PCRE2_NOTEMPTY_ATSTART), and
 *    PCRE2 itself advances by one character (UTF-8 aware under the 'u' flag).
 */
#include "regex.h"

#include "budget.h"
#include "log.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define RE_DEF_PATTERN_BYTES 4096
#define RE_DEF_SUBJECT_BYTES (4u << 20)
#define RE_DEF_MATCH_LIMIT 100000
#define RE_DEF_HEAP_LIMIT_KB 4096
#define RE_DEF_MAX_PATTERNS 128
#define RE_DEF_PARENS_NEST 50
#define RE_MAX_MAX_PATTERNS 65536

#define RE_JIT_STACK_START (32u * 1024)
#define RE_JIT_STACK_MAX (512u * 1024)
#define RE_CALLOUT_FULL 64   /* full budget check every this many callouts */
#define RE_COARSE_SLACK_NS 10000000ull /* precise checks this close to the deadline (> 1 tick) */
#define RE_POLL_EVERY 64     /* gsub/split: poll the budget every this many matches */
#define RE_TPL_POLL_EVERY 4096 /* ... and every this many items of a replacement template */

enum { F_CASELESS = 1, F_MULTILINE = 2, F_DOTALL = 4, F_EXTENDED = 8, F_UTF = 16, F_COUNT = 32 };

typedef struct {
	pcre2_code *code;
	uint32_t ncap;      /* number of capture groups */
	uint32_t flags;     /* F_* */
	size_t jit_bytes;   /* JIT code size charged to jit_owner (0 = not JIT compiled) */
	mb_budget *jit_owner;
} re_pattern;

typedef struct {
	mb_regex_limits lim;
	int closed;
	int npatterns;
	pcre2_general_context *gctx;
	pcre2_compile_context *cctx;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jstack;
	mb_budget *jstack_owner;  /* budget charged RE_JIT_STACK_MAX for jstack */
	pcre2_match_data *md;     /* shared; replaced by a larger one when a pattern needs it */
	uint32_t md_pairs;
	int swap_tries;           /* calls tried with their arguments swapped (re_swap_check) */
	int swap_noted;
	/* callout state of the running pcre2_match */
	mb_budget *cb_budget;
	unsigned cb_ticks;
	re_pattern pat[];         /* lim.max_patterns slots */
} re_state;

/* ---- allocation and budget helpers --------------------------------------------------------- */

static void *re_malloc(PCRE2_SIZE n, void *ud)
{
	(void)ud;
	return mb_budget_malloc(n);
}

static void re_free(void *p, void *ud)
{
	(void)ud;
	mb_budget_free(p);
}

/* luaL_error with snprintf formats (lua_pushfstring knows no %zu, %u or %x). */
static int re_errorf(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int re_errorf(lua_State *L, const char *fmt, ...)
{
	char msg[MB_ERR_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return luaL_error(L, "%s", msg);
}

/* Raises the budget's sticky error when it has tripped; returns otherwise. */
static void re_raise_if_tripped(lua_State *L, mb_budget *b)
{
	if (b && mb_budget_check(b) != MB_STOP_NONE)
		mb_budget_raise(L, b);
}

static int re_nomem(lua_State *L, mb_budget *b, const char *what)
{
	re_raise_if_tripped(L, b);
	return re_errorf(L, "re: out of memory (%s)", what);
}

/* ---- the state userdata -------------------------------------------------------------------- */

static int re_callout(pcre2_callout_block *cb, void *data);

/* The PCRE2 contexts are made on first use: most executions never touch re, and making them
 * in mb_regex_open cost a tenth of an execution's set-up. */
static void re_make_contexts(lua_State *L, re_state *st)
{
	st->gctx = pcre2_general_context_create(re_malloc, re_free, NULL);
	if (st->gctx) {
		st->cctx = pcre2_compile_context_create(st->gctx);
		st->mctx = pcre2_match_context_create(st->gctx);
	}
	if (!st->gctx || !st->cctx || !st->mctx)
		re_errorf(L, "re: out of memory (contexts)");       /* __gc frees what was made */
	pcre2_set_max_pattern_length(st->cctx, st->lim.max_pattern_bytes);
	pcre2_set_parens_nest_limit(st->cctx, st->lim.parens_nest_limit);
	pcre2_set_match_limit(st->mctx, st->lim.match_limit);
	pcre2_set_heap_limit(st->mctx, st->lim.heap_limit_kb);
	pcre2_set_depth_limit(st->mctx, st->lim.depth_limit);
	pcre2_set_callout(st->mctx, re_callout, st);
}

static re_state *re_get_state(lua_State *L)
{
	re_state *st = lua_touserdata(L, lua_upvalueindex(1));
	if (st->closed)
		re_errorf(L, "re: module used after its state was closed");
	if (!st->mctx)
		re_make_contexts(L, st);
	return st;
}

static int re_state_gc(lua_State *L)
{
	re_state *st = lua_touserdata(L, 1);
	if (st->closed)
		return 0;
	st->closed = 1;
	for (int i = 0; i < st->npatterns; i++) {
		re_pattern *p = &st->pat[i];
		if (p->jit_bytes)
			mb_budget_credit(p->jit_owner, p->jit_bytes);
		pcre2_code_free(p->code);
		p->code = NULL;
	}
	st->npatterns = 0;
	pcre2_match_data_free(st->md);
	st->md = NULL;
	if (st->jstack) {
		pcre2_jit_stack_free(st->jstack);
		mb_budget_credit(st->jstack_owner, RE_JIT_STACK_MAX);
		st->jstack = NULL;
	}
	pcre2_match_context_free(st->mctx);
	pcre2_compile_context_free(st->cctx);
	pcre2_general_context_free(st->gctx);
	st->mctx = NULL;
	st->cctx = NULL;
	st->gctx = NULL;
	return 0;
}

/* The deadline callout: PCRE2 calls it before every pattern item, tens of millions of times a
 * second, so it must be cheap, yet one item can take milliseconds on a long subject (a
 * backreference compare that fails at its last byte, a possessive \X*+ scan) without moving the
 * match position. So every callout compares the coarse clock (a vDSO read of the last timer
 * tick, lagging by one tick: 4 ms at HZ=250) with the deadline and switches to the precise check
 * in the last RE_COARSE_SLACK_NS; every RE_CALLOUT_FULL callouts it runs the full budget check
 * (precise clock, cancellation, instruction budget) anyway. */
static int re_callout(pcre2_callout_block *cb, void *data)
{
	(void)cb;
	re_state *st = data;
	mb_budget *b = st->cb_budget;
	if (!b)
		return 0;
	int stop = 0;
	if (++st->cb_ticks >= RE_CALLOUT_FULL) {
		st->cb_ticks = 0;
		stop = mb_budget_check(b) != MB_STOP_NONE;
	} else if (b->deadline_ns) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
		uint64_t coarse = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		if (coarse + RE_COARSE_SLACK_NS >= b->deadline_ns)
			stop = mb_budget_check(b) != MB_STOP_NONE;
	}
	return stop ? PCRE2_ERROR_CALLOUT : 0;
}

/* ---- compiling and caching ------------------------------------------------------------------- */

static uint32_t re_parse_flags(lua_State *L, int arg)
{
	size_t n;
	const char *s = luaL_optlstring(L, arg, "", &n);
	uint32_t f = 0;
	for (size_t i = 0; i < n; i++) {
		switch (s[i]) {
		case 'i': f |= F_CASELESS; break;
		case 'm': f |= F_MULTILINE; break;
		case 's': f |= F_DOTALL; break;
		case 'x': f |= F_EXTENDED; break;
		case 'u': f |= F_UTF; break;
		default:
			if ((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f)
				re_errorf(L, "re: invalid flag '%c' in \"%s\" (valid flags: i m s x u)", s[i], s);
			re_errorf(L, "re: invalid flag byte 0x%02x (valid flags: i m s x u)", (unsigned char)s[i]);
		}
	}
	return f;
}

/* Makes sure the shared match data has at least `pairs` ovector pairs. */
static void re_ensure_md(lua_State *L, re_state *st, uint32_t pairs, mb_budget *b)
{
	if (st->md && st->md_pairs >= pairs)
		return;
	if (pairs < 16)
		pairs = 16;
	mb_budget *prev = mb_budget_current();
	mb_budget_set_current(b);
	pcre2_match_data *md = pcre2_match_data_create(pairs, st->gctx);
	mb_budget_set_current(prev);
	if (!md)
		re_nomem(L, b, "match data");
	pcre2_match_data_free(st->md);
	st->md = md;
	st->md_pairs = pairs;
}

/* Creates the JIT stack on first use; its whole reserved size is charged to the budget. */
static void re_ensure_jit_stack(lua_State *L, re_state *st, mb_budget *b)
{
	if (st->jstack)
		return;
	if (mb_budget_charge(b, RE_JIT_STACK_MAX) != 0)
		mb_budget_raise(L, b);
	mb_budget *prev = mb_budget_current();
	mb_budget_set_current(b);
	st->jstack = pcre2_jit_stack_create(RE_JIT_STACK_START, RE_JIT_STACK_MAX, st->gctx);
	mb_budget_set_current(prev);
	if (!st->jstack) {
		mb_budget_credit(b, RE_JIT_STACK_MAX);
		re_nomem(L, b, "JIT stack");
	}
	st->jstack_owner = b;
	pcre2_jit_stack_assign(st->mctx, NULL, st->jstack);
}

static int re_compile_error(lua_State *L, re_state *st, int code, PCRE2_SIZE off, uint32_t flags)
{
	char msg[MB_ERR_MAX];
	if (pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof msg) < 0)
		snprintf(msg, sizeof msg, "error %d", code);
	const char *hint = "";
	char lim[64] = "";
	if (code == PCRE2_ERROR_PARENTHESES_NEST_TOO_DEEP)
		snprintf(lim, sizeof lim, " (parens_nest_limit=%u)", (unsigned)st->lim.parens_nest_limit);
	else if (code == PCRE2_ERROR_PATTERN_STRING_TOO_LONG)
		snprintf(lim, sizeof lim, " (max_pattern_bytes=%zu)", st->lim.max_pattern_bytes);
	else if ((code == PCRE2_ERROR_UTF_IS_DISABLED || code == PCRE2_ERROR_UCP_IS_DISABLED) &&
		 !(flags & F_UTF))
		hint = " (pass the 'u' flag for UTF-8 mode instead of (*UTF)/(*UCP))";
	else if (code == PCRE2_ERROR_BACKSLASH_C_CALLER_DISABLED)
		hint = " (\\C is not allowed in the sandbox)";
	return re_errorf(L, "re: invalid pattern at offset %zu: %s%s%s", (size_t)off, msg, lim, hint);
}

static uint32_t re_compile_opts(uint32_t flags)
{
	uint32_t opts = PCRE2_NEVER_BACKSLASH_C;
	if (flags & F_CASELESS) opts |= PCRE2_CASELESS;
	if (flags & F_MULTILINE) opts |= PCRE2_MULTILINE;
	if (flags & F_DOTALL) opts |= PCRE2_DOTALL;
	if (flags & F_EXTENDED) opts |= PCRE2_EXTENDED;
	opts |= (flags & F_UTF) ? PCRE2_UTF | PCRE2_UCP : PCRE2_NEVER_UTF | PCRE2_NEVER_UCP;
	return opts;
}

/* Returns the compiled pattern for the string at stack index parg and flags, compiling and
 * caching it on a miss. Raises on invalid patterns and exhausted limits. */
static re_pattern *re_get_pattern(lua_State *L, re_state *st, int parg, uint32_t flags)
{
	size_t plen;
	const char *p = luaL_checklstring(L, parg, &plen);
	lua_getiuservalue(L, lua_upvalueindex(1), 1);             /* cache */
	if (lua_rawgeti(L, -1, (lua_Integer)flags + 1) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_newtable(L);
		lua_pushvalue(L, -1);
		lua_rawseti(L, -3, (lua_Integer)flags + 1);
	}                                                         /* cache, bucket */
	lua_pushvalue(L, parg);
	if (lua_rawget(L, -2) == LUA_TNUMBER) {
		lua_Integer slot = lua_tointeger(L, -1);
		lua_pop(L, 3);
		return &st->pat[slot];
	}
	lua_pop(L, 1);                                            /* cache, bucket */

	if (plen > st->lim.max_pattern_bytes)
		re_errorf(L, "re: pattern is %zu bytes, over the limit max_pattern_bytes=%zu",
			   plen, st->lim.max_pattern_bytes);
	if (st->npatterns >= st->lim.max_patterns)
		re_errorf(L, "re: too many distinct patterns in one execution (max_patterns=%d); "
			   "reuse patterns instead of building new ones in a loop", st->lim.max_patterns);
	mb_budget *b = mb_budget_of(L);
	re_raise_if_tripped(L, b);

	uint32_t opts = PCRE2_AUTO_CALLOUT | re_compile_opts(flags);
	int err;
	PCRE2_SIZE off;
	mb_budget *prev = mb_budget_current();
	mb_budget_set_current(b);
	pcre2_code *code = pcre2_compile((PCRE2_SPTR)p, plen, opts, &err, &off, st->cctx);
	mb_budget_set_current(prev);
	if (!code) {
		re_raise_if_tripped(L, b);
		re_compile_error(L, st, err, off, flags);
	}
	re_pattern *rp = &st->pat[st->npatterns];
	memset(rp, 0, sizeof *rp);
	rp->code = code;
	rp->flags = flags;
	pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &rp->ncap);
	int slot = st->npatterns++;                               /* owned by the state from here */

	/* JIT is an optimisation: when it fails (unsupported item, no executable memory) the
	 * interpreter runs the pattern under the same limits. */
	mb_budget_set_current(b);
	int jr = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
	mb_budget_set_current(prev);
	re_raise_if_tripped(L, b);
	if (jr == 0) {
		size_t jsize = 0;
		pcre2_pattern_info(code, PCRE2_INFO_JITSIZE, &jsize);
		if (mb_budget_charge(b, jsize) != 0)
			mb_budget_raise(L, b);
		rp->jit_bytes = jsize;
		rp->jit_owner = b;
		re_ensure_jit_stack(L, st, b);
	}
	re_ensure_md(L, st, rp->ncap + 1, b);

	lua_pushvalue(L, parg);
	lua_pushinteger(L, slot);
	lua_rawset(L, -3);
	lua_pop(L, 2);
	return rp;
}

/* ---- matching ---------------------------------------------------------------------------- */

static int re_match_error(lua_State *L, re_state *st, int rc, mb_budget *b, size_t start)
{
	re_raise_if_tripped(L, b);
	char msg[MB_ERR_MAX];
	switch (rc) {
	case PCRE2_ERROR_MATCHLIMIT:
		return re_errorf(L, "re: match limit exceeded (match_limit=%u): the pattern backtracks "
				  "too much; avoid nested quantifiers such as (a+)+ and make it more specific",
				  (unsigned)st->lim.match_limit);
	case PCRE2_ERROR_HEAPLIMIT:
		return re_errorf(L, "re: heap limit exceeded (heap_limit_kb=%u): the pattern keeps too "
				  "many backtracking points; simplify it", (unsigned)st->lim.heap_limit_kb);
	case PCRE2_ERROR_DEPTHLIMIT:
		return re_errorf(L, "re: depth limit exceeded (depth_limit=%u): the pattern nests "
				  "backtracking too deeply; simplify it", (unsigned)st->lim.depth_limit);
	case PCRE2_ERROR_JIT_STACKLIMIT:
		return re_errorf(L, "re: JIT stack limit exceeded (jit_stack_kb=%u): the pattern nests "
				  "or repeats groups too deeply; simplify it", RE_JIT_STACK_MAX / 1024);
	case PCRE2_ERROR_NOMEMORY:
		return re_nomem(L, b, "matching");
	case PCRE2_ERROR_BADUTFOFFSET:
		return re_errorf(L, "re: start position %zu is inside a UTF-8 character", start + 1);
	case PCRE2_ERROR_CALLOUT:
		return re_errorf(L, "re: match stopped by the execution budget");
	default:
		if (pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg) < 0)
			snprintf(msg, sizeof msg, "error %d", rc);
		if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
			return re_errorf(L, "re: subject is not valid UTF-8 at byte %zu: %s (without the "
					  "'u' flag patterns match bytes)",
					  (size_t)pcre2_get_startchar(st->md) + 1, msg);
		return re_errorf(L, "re: match failed: %s", msg);
	}
}

/* Runs one match of rp against s[0..len) from start. Returns 1 on a match (offsets in st->md)
 * or 0 for no match; raises on every error, with the budget's own error when it has tripped. */
static int re_exec(lua_State *L, re_state *st, re_pattern *rp, const char *s, size_t len,
		   size_t start, uint32_t opts)
{
	mb_budget *b = mb_budget_of(L);
	st->cb_budget = b;
	st->cb_ticks = 0;
	mb_budget *prev = mb_budget_current();
	mb_budget_set_current(b);
	int rc = pcre2_match(rp->code, (PCRE2_SPTR)s, len, start, opts, st->md, st->mctx);
	mb_budget_set_current(prev);
	st->cb_budget = NULL;
	if (rc > 0) {
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
		if (ov[1] < ov[0])
			re_errorf(L, "re: match ends before it starts (\\K in a lookaround is not supported)");
		return 1;
	}
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	if (rc == 0)  /* cannot happen: the match data is sized for every cached pattern */
		re_errorf(L, "re: internal error: match data too small");
	return re_match_error(L, st, rc, b, start);
}

/* Pushes capture i (1-based) of the current match, or false when the group did not take part. */
static void re_push_capture(lua_State *L, re_state *st, const char *s, uint32_t i)
{
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
	if (ov[2 * i] == PCRE2_UNSET)
		lua_pushboolean(L, 0);
	else
		lua_pushlstring(L, s + ov[2 * i], ov[2 * i + 1] - ov[2 * i]);
}

/* Pushes all captures, or the whole match when the pattern has none (if whole is set).
 * Returns the number of values pushed. */
static int re_push_captures(lua_State *L, re_state *st, re_pattern *rp, const char *s, int whole)
{
	if (rp->ncap == 0) {
		if (!whole)
			return 0;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
		lua_pushlstring(L, s + ov[0], ov[1] - ov[0]);
		return 1;
	}
	luaL_checkstack(L, (int)rp->ncap, "re: too many captures");
	for (uint32_t i = 1; i <= rp->ncap; i++)
		re_push_capture(L, st, s, i);
	return (int)rp->ncap;
}

/* Checks the subject length against the limit and returns it. */
static const char *re_check_subject(lua_State *L, re_state *st, int arg, size_t *len)
{
	const char *s = luaL_checklstring(L, arg, len);
	if (*len > st->lim.max_subject_bytes)
		re_errorf(L, "re: subject is %zu bytes, over the limit max_subject_bytes=%zu",
			   *len, st->lim.max_subject_bytes);
	return s;
}

/* string.find-style init: 1-based, negative counts from the end. Returns 0 when init is past
 * the end + 1 (then there can be no match), else 1 with the 0-based offset in *off. */
static int re_init(lua_State *L, int arg, size_t len, size_t *off)
{
	lua_Integer i = luaL_optinteger(L, arg, 1);
	if (i > 0) {
		if ((lua_Unsigned)i - 1 > len)
			return 0;
		*off = (size_t)i - 1;
	} else if (i == 0 || (lua_Unsigned)-(i + 1) >= len) {
		*off = 0;
	} else {
		*off = len - (size_t)-(i + 1) - 1;
	}
	return 1;
}

/* ---- re.match / re.find ------------------------------------------------------------------ */

/* Python's re.match(pattern, s) and re.search(pattern, s) take the pattern first; moonbox's re
 * takes the subject first, as string.match does. re.match("(\\d+)", "order 12") finds nothing
 * and says nothing, so the agent sees null and does not know why. When a call finds nothing,
 * its subject looks like a pattern (it has regex syntax) and the swapped call would match, the
 * answer gets a note (docs/sandbox-regex.md says why a note and not an error: a subject that
 * happens to be a pattern is data, and valid code must keep working). At most RE_SWAP_TRIES
 * calls of an execution are tried, each a compile of at most RE_SWAP_MAX_BYTES outside the
 * pattern cache and one interpreted match under the same limits, and one note is enough. */
#define RE_SWAP_TRIES 8
#define RE_SWAP_MAX_BYTES 256

static void re_swap_check(lua_State *L, re_state *st, const char *s, size_t len, int parg,
			  uint32_t flags, const char *fn)
{
	if (!st->lim.note || st->swap_noted || st->swap_tries >= RE_SWAP_TRIES ||
	    len > RE_SWAP_MAX_BYTES || !len)
		return;
	int syntax = 0;
	for (size_t i = 0; i < len && !syntax; i++)
		syntax = strchr("\\()[]{}^$*+?|", s[i]) != NULL && s[i] != 0;
	size_t plen;
	const char *p = lua_tolstring(L, parg, &plen);
	if (!syntax || !p || plen > st->lim.max_subject_bytes)
		return;
	st->swap_tries++;
	mb_budget *b = mb_budget_of(L);
	mb_budget *prev = mb_budget_current();
	mb_budget_set_current(b);
	int err, rc = 0;
	PCRE2_SIZE off;
	pcre2_code *code = pcre2_compile((PCRE2_SPTR)s, len, re_compile_opts(flags), &err, &off,
					 st->cctx);
	if (code) {
		pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, st->gctx);
		if (md)
			rc = pcre2_match(code, (PCRE2_SPTR)p, plen, 0, 0, md, st->mctx);
		pcre2_match_data_free(md);
		pcre2_code_free(code);
	}
	mb_budget_set_current(prev);
	if (rc <= 0)
		return;
	st->swap_noted = 1;
	/* where: the line, in the execution's own code only (a chunk name given to load is the
	 * code's text, and the note does not pass the PII policy) */
	char where[32] = "";
	lua_Debug ar;
	if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar) && ar.currentline > 0 &&
	    strcmp(ar.source, "=code") == 0)
		snprintf(where, sizeof where, "code:%d: ", ar.currentline);
	char msg[320];
	snprintf(msg, sizeof msg, "%sre.%s(s, pattern) found no match, but would with its first two "
		 "arguments swapped: moonbox's re takes the subject first, re.%s(s, pattern), as "
		 "string.%s does (Python's order is the other way round)", where, fn, fn, fn);
	st->lim.note(L, msg);
}

static int re_find_aux(lua_State *L, int find)
{
	re_state *st = re_get_state(L);
	mb_budget_poll(L);
	size_t len, off;
	const char *s = re_check_subject(L, st, 1, &len);
	uint32_t flags = re_parse_flags(L, 4);
	re_pattern *rp = re_get_pattern(L, st, 2, flags);
	if (!re_init(L, 3, len, &off) || !re_exec(L, st, rp, s, len, off, 0)) {
		if (lua_isnoneornil(L, 3))
			re_swap_check(L, st, s, len, 2, flags, find ? "find" : "match");
		lua_pushnil(L);
		return 1;
	}
	if (!find)
		return re_push_captures(L, st, rp, s, 1);
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
	lua_pushinteger(L, (lua_Integer)ov[0] + 1);
	lua_pushinteger(L, (lua_Integer)ov[1]);
	return 2 + re_push_captures(L, st, rp, s, 0);
}

static int re_match(lua_State *L)
{
	return re_find_aux(L, 0);
}

static int re_find(lua_State *L)
{
	return re_find_aux(L, 1);
}

/* ---- re.gmatch --------------------------------------------------------------------------- */

typedef struct {
	int slot;
	int done;
	size_t pos;     /* where the next search starts */
	uint32_t opts;  /* NO_UTF_CHECK after the first search; NOTEMPTY_ATSTART after an empty match */
} re_iter;

static int re_gmatch_next(lua_State *L)
{
	re_state *st = re_get_state(L);
	re_iter *it = lua_touserdata(L, lua_upvalueindex(3));
	if (it->done)
		return 0;
	size_t len;
	const char *s = lua_tolstring(L, lua_upvalueindex(2), &len);
	re_pattern *rp = &st->pat[it->slot];
	if (it->pos > len || !re_exec(L, st, rp, s, len, it->pos, it->opts)) {
		it->done = 1;
		return 0;
	}
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
	it->opts = PCRE2_NO_UTF_CHECK | (ov[0] == ov[1] ? PCRE2_NOTEMPTY_ATSTART : 0);
	it->pos = ov[1];
	return re_push_captures(L, st, rp, s, 1);
}

static int re_gmatch(lua_State *L)
{
	re_state *st = re_get_state(L);
	mb_budget_poll(L);
	size_t len;
	re_check_subject(L, st, 1, &len);
	uint32_t flags = re_parse_flags(L, 3);
	re_pattern *rp = re_get_pattern(L, st, 2, flags);
	lua_settop(L, 1);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);                                         /* state, subject */
	re_iter *it = lua_newuserdatauv(L, sizeof *it, 0);
	it->slot = (int)(rp - st->pat);
	it->done = 0;
	it->pos = 0;
	it->opts = 0;
	lua_pushcclosure(L, re_gmatch_next, 3);
	return 1;
}

/* ---- re.gsub ----------------------------------------------------------------------------- */

/* One piece of a replacement template: literal text, a group number, or a group name. */
enum { T_END, T_TEXT, T_GROUP, T_NAME };

typedef struct {
	int kind;
	const char *p;    /* T_TEXT, T_NAME */
	size_t n;
	uint32_t group;   /* T_GROUP */
} re_tpl_item;

/* Reads the next template item at *i. Returns its kind, or -1 with a message in err. */
static int re_tpl_next(const char *t, size_t tl, size_t *i, re_tpl_item *it, char *err, size_t errn)
{
	size_t k = *i;
	if (k >= tl)
		return it->kind = T_END;
	if (t[k] != '$') {
		size_t e = k;
		while (e < tl && t[e] != '$')
			e++;
		it->p = t + k;
		it->n = e - k;
		*i = e;
		return it->kind = T_TEXT;
	}
	if (k + 1 >= tl) {
		snprintf(err, errn, "'$' at the end (write $$ for a literal $)");
		return -1;
	}
	char c = t[k + 1];
	if (c == '$') {
		it->p = t + k;
		it->n = 1;
		*i = k + 2;
		return it->kind = T_TEXT;
	}
	if (c >= '0' && c <= '9') {
		it->group = (uint32_t)(c - '0');
		*i = k + 2;
		return it->kind = T_GROUP;
	}
	if (c == '{') {
		size_t e = k + 2;
		while (e < tl && t[e] != '}')
			e++;
		size_t n = e - (k + 2);
		if (e >= tl || n == 0 || n > 32) {
			snprintf(err, errn, "'${' at byte %zu needs a group number or name and a closing '}'",
				 k + 1);
			return -1;
		}
		const char *p = t + k + 2;
		int digits = 1, name = !(p[0] >= '0' && p[0] <= '9');
		for (size_t j = 0; j < n; j++) {
			unsigned char ch = (unsigned char)p[j];
			int d = ch >= '0' && ch <= '9';
			int w = d || ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
			digits &= d;
			name &= w;
		}
		*i = e + 1;
		if (digits) {
			uint32_t g = 0;
			for (size_t j = 0; j < n && g <= 65535; j++)
				g = g * 10 + (uint32_t)(p[j] - '0');
			it->group = g;
			return it->kind = T_GROUP;
		}
		if (name) {
			it->p = p;
			it->n = n;
			return it->kind = T_NAME;
		}
		snprintf(err, errn, "invalid group name '%.*s'", (int)n, p);
		return -1;
	}
	snprintf(err, errn, "'$' at byte %zu must be followed by a digit, {number}, {name} or $",
		 k + 1);
	return -1;
}

/* Finds the name table entries for a group name. Returns the entry size and sets *first and
 * *last, or returns <= 0 when the pattern has no group of that name. */
static int re_name_entries(re_pattern *rp, const char *name, size_t n, PCRE2_SPTR *first,
			   PCRE2_SPTR *last)
{
	char buf[40];
	if (n >= sizeof buf)
		return 0;
	memcpy(buf, name, n);
	buf[n] = '\0';
	return pcre2_substring_nametable_scan(rp->code, (PCRE2_SPTR)buf, first, last);
}

/* Validates a whole template against the pattern before any matching. */
static void re_tpl_check(lua_State *L, re_pattern *rp, const char *t, size_t tl)
{
	size_t i = 0;
	re_tpl_item it;
	char err[MB_ERR_MAX];
	for (unsigned items = 1;; items++) {
		int k = re_tpl_next(t, tl, &i, &it, err, sizeof err);
		if (k == T_END)
			return;
		if (items % RE_TPL_POLL_EVERY == 0)
			mb_budget_poll(L);
		if (k < 0)
			re_errorf(L, "re: invalid replacement: %s", err);
		if (k == T_GROUP && it.group > rp->ncap)
			re_errorf(L, "re: invalid replacement: it refers to group %u but the pattern has %u "
				   "capture group%s", (unsigned)it.group, (unsigned)rp->ncap,
				   rp->ncap == 1 ? "" : "s");
		PCRE2_SPTR f, l;
		if (k == T_NAME && re_name_entries(rp, it.p, it.n, &f, &l) <= 0)
			re_errorf(L, "re: invalid replacement: the pattern has no group named '%.*s'",
				   (int)it.n, it.p);
	}
}

/* Appends group g of the current match (nothing when unset) to the buffer. */
static void re_add_group(luaL_Buffer *B, re_state *st, const char *s, uint32_t g)
{
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
	if (ov[2 * g] != PCRE2_UNSET)
		luaL_addlstring(B, s + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
}

/* Expands a (checked) template for the current match into the buffer. No Lua code runs here,
 * so the match data stays valid throughout. A template can be long (it is any Lua string), so
 * the budget is polled every RE_TPL_POLL_EVERY items. */
static void re_tpl_expand(lua_State *L, luaL_Buffer *B, re_state *st, re_pattern *rp,
			  const char *s, const char *t, size_t tl)
{
	size_t i = 0;
	re_tpl_item it;
	char err[8];
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
	for (unsigned items = 1;; items++) {
		int k = re_tpl_next(t, tl, &i, &it, err, sizeof err);
		if (k == T_END || k < 0)
			return;
		if (items % RE_TPL_POLL_EVERY == 0)
			mb_budget_poll(L);
		if (k == T_TEXT) {
			luaL_addlstring(B, it.p, it.n);
		} else if (k == T_GROUP) {
			re_add_group(B, st, s, it.group);
		} else {
			/* With duplicate names ((?J)), use the first group of that name that is set. */
			PCRE2_SPTR f, l;
			int size = re_name_entries(rp, it.p, it.n, &f, &l);
			for (PCRE2_SPTR e = f; size > 0 && e <= l; e += size) {
				uint32_t g = ((uint32_t)e[0] << 8) | e[1];
				if (ov[2 * g] != PCRE2_UNSET) {
					re_add_group(B, st, s, g);
					break;
				}
			}
		}
	}
}

static int re_gsub(lua_State *L)
{
	re_state *st = re_get_state(L);
	mb_budget_poll(L);
	mb_budget_cstack_check(L); /* the replacement function or table's __index runs Lua */
	size_t len, tl = 0;
	const char *s = re_check_subject(L, st, 1, &len);
	int rt = lua_type(L, 3);
	luaL_argexpected(L, rt == LUA_TNUMBER || rt == LUA_TSTRING || rt == LUA_TFUNCTION ||
			 rt == LUA_TTABLE, 3, "string/function/table");
	lua_Integer max = luaL_optinteger(L, 4, LUA_MAXINTEGER);
	uint32_t flags = re_parse_flags(L, 5);
	re_pattern *rp = re_get_pattern(L, st, 2, flags);
	const char *t = NULL;
	if (rt == LUA_TNUMBER || rt == LUA_TSTRING) {
		t = lua_tolstring(L, 3, &tl);
		re_tpl_check(L, rp, t, tl);
	}
	lua_settop(L, 3);

	luaL_Buffer B;
	luaL_buffinit(L, &B);
	size_t copied = 0, search = 0;
	uint32_t opts = 0;
	lua_Integer n = 0;
	while (n < max && search <= len && re_exec(L, st, rp, s, len, search, opts)) {
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
		size_t ms = ov[0], me = ov[1];
		n++;
		luaL_addlstring(&B, s + copied, ms - copied);
		if (t) {
			re_tpl_expand(L, &B, st, rp, s, t, tl);
		} else {
			/* Lua code may run from here on (the callback, __index): use ms/me only. */
			if (rt == LUA_TFUNCTION) {
				lua_pushvalue(L, 3);
				int na = re_push_captures(L, st, rp, s, 1);
				lua_call(L, na, 1);
			} else {
				if (rp->ncap == 0)
					lua_pushlstring(L, s + ms, me - ms);
				else
					re_push_capture(L, st, s, 1);
				lua_gettable(L, 3);
			}
			int vt = lua_type(L, -1);
			if (vt == LUA_TNIL || (vt == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
				lua_pop(L, 1);
				luaL_addlstring(&B, s + ms, me - ms);
			} else if (vt == LUA_TSTRING || vt == LUA_TNUMBER) {
				luaL_addvalue(&B);
			} else {
				return re_errorf(L, "re: invalid replacement value (a %s); the %s must give a "
						  "string, a number, false or nil", luaL_typename(L, -1),
						  rt == LUA_TFUNCTION ? "function" : "table");
			}
		}
		copied = me;
		search = me;
		opts = PCRE2_NO_UTF_CHECK | (ms == me ? PCRE2_NOTEMPTY_ATSTART : 0);
		if ((n % RE_POLL_EVERY) == 0)
			mb_budget_poll(L);
	}
	luaL_addlstring(&B, s + copied, len - copied);
	luaL_pushresult(&B);
	lua_pushinteger(L, n);
	return 2;
}

/* ---- re.split ---------------------------------------------------------------------------- */

static int re_split(lua_State *L)
{
	re_state *st = re_get_state(L);
	mb_budget_poll(L);
	size_t len;
	const char *s = re_check_subject(L, st, 1, &len);
	lua_Integer max = luaL_optinteger(L, 3, LUA_MAXINTEGER);
	uint32_t flags = re_parse_flags(L, 4);
	re_pattern *rp = re_get_pattern(L, st, 2, flags);
	lua_settop(L, 2);
	lua_newtable(L);
	size_t piece = 0, search = 0;
	uint32_t opts = 0;
	lua_Integer n = 0;
	while (n < max && search <= len && re_exec(L, st, rp, s, len, search, opts)) {
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
		size_t ms = ov[0], me = ov[1];
		n++;
		lua_pushlstring(L, s + piece, ms - piece);
		lua_rawseti(L, 3, n);
		piece = me;
		search = me;
		opts = PCRE2_NO_UTF_CHECK | (ms == me ? PCRE2_NOTEMPTY_ATSTART : 0);
		if ((n % RE_POLL_EVERY) == 0)
			mb_budget_poll(L);
	}
	lua_pushlstring(L, s + piece, len - piece);
	lua_rawseti(L, 3, n + 1);
	return 1;
}

/* ---- opening ----------------------------------------------------------------------------- */

static void re_fill_defaults(mb_regex_limits *l)
{
	if (!l->max_pattern_bytes) l->max_pattern_bytes = RE_DEF_PATTERN_BYTES;
	if (!l->max_subject_bytes) l->max_subject_bytes = RE_DEF_SUBJECT_BYTES;
	if (!l->match_limit) l->match_limit = RE_DEF_MATCH_LIMIT;
	if (!l->heap_limit_kb) l->heap_limit_kb = RE_DEF_HEAP_LIMIT_KB;
	if (!l->depth_limit) l->depth_limit = l->match_limit;
	if (l->max_patterns <= 0) l->max_patterns = RE_DEF_MAX_PATTERNS;
	if (l->max_patterns > RE_MAX_MAX_PATTERNS) l->max_patterns = RE_MAX_MAX_PATTERNS;
	if (!l->parens_nest_limit) l->parens_nest_limit = RE_DEF_PARENS_NEST;
}

int mb_regex_open(lua_State *L, const mb_regex_limits *lim)
{
	static const luaL_Reg fns[] = {
		{"match", re_match}, {"find", re_find}, {"gmatch", re_gmatch},
		{"gsub", re_gsub}, {"split", re_split}, {NULL, NULL},
	};
	mb_regex_limits l;
	if (lim)
		l = *lim;
	else
		memset(&l, 0, sizeof l);
	re_fill_defaults(&l);

	lua_createtable(L, 0, 5);                                /* module */
	size_t size = sizeof(re_state) + (size_t)l.max_patterns * sizeof(re_pattern);
	re_state *st = lua_newuserdatauv(L, size, 1);
	memset(st, 0, sizeof *st); /* a slot is cleared when a pattern takes it (re_get_pattern) */
	st->lim = l;
	lua_createtable(L, 0, 1);                                /* metatable */
	lua_pushcfunction(L, re_state_gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);
	lua_createtable(L, F_COUNT, 0);                          /* cache index */
	lua_setiuservalue(L, -2, 1);

	/* The PCRE2 contexts are made on first use (re_get_state). */
	luaL_setfuncs(L, fns, 1);                                /* state is the upvalue */
	return 0;
}
