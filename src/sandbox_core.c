/* sandbox_core.c - the machinery of a running execution, below everything else of the sandbox:
 * the count hook and the deadline signal, the Lua thread running on this OS thread, the
 * execution's context in the registry, output capture, and loading text under the budget.
 *
 * sandbox.c (prepare, run, result) and the environment (sandbox_env.c and the host-call files
 * sandbox_skills.c, sandbox_upstream.c, sandbox_pii.c, sandbox_workspace.c) all build on this file, and it
 * calls none of them, so the sandbox's files depend one way (docs/architecture.md).
 *
 * The deadline is enforced three ways: the count hook reads the clock every HOOK_COUNT
 * instructions; the pool sends this thread MB_SANDBOX_SIGNAL at the deadline, whose handler
 * re-arms the hook to fire on the very next instruction (so one slow instruction such as a long
 * string comparison cannot stretch the interval); and native builtins poll the budget inside
 * their own loops.
 */
#include <lauxlib.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox_int.h"

#define HOOK_COUNT 1000

/* The state currently executing on this thread (main state or a coroutine), for the deadline
 * signal handler. Written only by this thread. */
static _Thread_local lua_State *volatile running_state;

/* Debian's Lua 5.4.4 carries the fix for CVE-2022-33099 (upstream 42d40581), which made
 * luaV_concat keep a pointer into the Lua stack across the call of a __concat metamethod; a
 * metamethod that grows or shrinks the stack (any call deep enough, or a GC step) leaves
 * luaV_concat reading and writing the freed old stack: `x .. t .. y` with such a __concat
 * crashed the server. Upstream fixed it in 603b2c64 (5.4.5). Lua offers no hook on concatenation,
 * so once sandbox code has set a metatable (the only way it can define __concat, see
 * sb_setmetatable) the hook also gets call events, and a call made by the OP_CONCAT instruction
 * of its caller, which can only be the metamethod, is refused. Which instruction the caller runs
 * is read from Lua 5.4.4's CallInfo (lstate.h), mirrored here: only built against that release. */
#if LUA_VERSION_NUM == 504 && LUA_VERSION_RELEASE_NUM == 50404
#define MB_CONCAT_GUARD 1
struct mb_callinfo544 {
	void *func, *top;
	struct mb_callinfo544 *previous, *next;
	union {
		struct { const uint32_t *savedpc; volatile sig_atomic_t trap; int nextraargs; } l;
		struct { void *k; ptrdiff_t old_errfunc; intptr_t ctx; } c;
	} u;
	union { int funcidx, nyield, nres; struct { unsigned short ftransfer, ntransfer; } t; } u2;
	short nresults;
	unsigned short callstatus;
};
_Static_assert(sizeof(struct mb_callinfo544) == 64 &&
		       offsetof(struct mb_callinfo544, previous) == 16 &&
		       offsetof(struct mb_callinfo544, u.l.savedpc) == 32 &&
		       offsetof(struct mb_callinfo544, callstatus) == 62,
	       "Lua 5.4.4's CallInfo layout (x86-64, aarch64)");
#define CI544_C (1 << 1)      /* CIST_C: running a C function */
#define CI544_HOOKED (1 << 3) /* CIST_HOOKED: running a hook */
#define CI544_FIN (1 << 7)    /* CIST_FIN: "called" a finalizer */
#define OP544_CONCAT 53       /* OP_CONCAT in lopcodes.h */

static void concat_guard(lua_State *L, lua_Debug *ar)
{
	const struct mb_callinfo544 *ci = (const struct mb_callinfo544 *)(void *)ar->i_ci;
	const struct mb_callinfo544 *caller = ci ? ci->previous : NULL;
	if (caller && !(caller->callstatus & (CI544_C | CI544_HOOKED | CI544_FIN)) &&
	    (caller->u.l.savedpc[-1] & 0x7F) == OP544_CONCAT) {
		mb_budget *b = mb_budget_of(L);
		if (b)
			b->hook_raised = 1; /* raised inside the hook: see sb_xpcall_handler */
		luaL_error(L, "__concat metamethods are not allowed in this sandbox (the Lua it runs, "
			      "5.4.4 as patched by Debian, can corrupt memory after one: upstream "
			      "603b2c64)");
	}
}
#endif

static void sb_hook(lua_State *L, lua_Debug *ar)
{
#ifdef MB_CONCAT_GUARD
	if (ar->event != LUA_HOOKCOUNT) {
		concat_guard(L, ar);
		return;
	}
#else
	(void)ar;
#endif
	mb_budget *b = mb_budget_of(L);
	int count = lua_gethookcount(L);
	int mask = lua_gethookmask(L) | LUA_MASKCOUNT;
	b->instructions += (uint64_t)count;
	if (mb_budget_check(b) != MB_STOP_NONE) {
		/* Fire on every instruction from now on: handlers that catch the error get nowhere. */
		lua_sethook(L, sb_hook, mask, 1);
		mb_budget_raise(L, b);
	}
	if (count != HOOK_COUNT) /* re-armed by a signal meant for another moment: go back */
		lua_sethook(L, sb_hook, mask, HOOK_COUNT);
}

void mb_sandbox_hook_calls(lua_State *L)
{
#ifdef MB_CONCAT_GUARD
	mb_budget *b = mb_budget_of(L);
	if (b)
		b->hook_calls = 1;
	mb_sandbox_sync_hook(L);
#else
	(void)L;
#endif
}

void mb_sandbox_sync_hook(lua_State *L)
{
#ifdef MB_CONCAT_GUARD
	int mask = lua_gethookmask(L);
	mb_budget *b = mb_budget_of(L);
	if (!(mask & LUA_MASKCALL) && b && b->hook_calls)
		lua_sethook(L, sb_hook, mask | LUA_MASKCOUNT | LUA_MASKCALL, lua_gethookcount(L));
#else
	(void)L;
#endif
}

void mb_sandbox_set_running(lua_State *L)
{
	running_state = L;
}

lua_State *mb_sandbox_running(void)
{
	return running_state;
}

void mb_sandbox_sethook(lua_State *L)
{
	lua_sethook(L, sb_hook, LUA_MASKCOUNT, HOOK_COUNT);
}

void mb_sandbox_interrupt(void)
{
	lua_State *L = running_state;
	/* lua_sethook is documented as safe to call from a signal handler. */
	if (L) /* keeping the call events of the __concat guard */
		lua_sethook(L, sb_hook, lua_gethookmask(L) | LUA_MASKCOUNT, 1);
}

static void deadline_signal(int sig)
{
	(void)sig;
	mb_sandbox_interrupt();
}

int mb_sandbox_core_init(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = deadline_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	return sigaction(MB_SANDBOX_SIGNAL, &sa, NULL) != 0 ? -1 : 0;
}

/* ---- context --------------------------------------------------------------------------- */

static const char ctx_key = 0;

void mb_sandbox_ctx_bind(lua_State *L, mb_sandbox_ctx *c)
{
	lua_pushlightuserdata(L, c);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &ctx_key);
}

mb_sandbox_ctx *mb_sandbox_ctx_of(lua_State *L)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &ctx_key);
	mb_sandbox_ctx *c = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return c;
}

void mb_sandbox_ctx_note(mb_sandbox_ctx *c, const char *msg)
{
	size_t n = strlen(msg), have = c->note_len;
	if (!n || (have && memmem(c->note, have, msg, n)))
		return;
	size_t need = n + (have ? 1 : 0);
	if (have + need >= sizeof c->note)
		return;
	if (have)
		c->note[have++] = '\n';
	memcpy(c->note + have, msg, n);
	c->note_len = have + n;
	c->note[c->note_len] = 0;
}

void mb_sandbox_note(lua_State *L, const char *msg)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (c && c->req)
		mb_sandbox_ctx_note(c, msg);
}

/* Output capture: the first half of the cap is kept as it comes, then a ring buffer keeps the
 * last half; what falls between is counted and marked. */
void mb_sandbox_output(mb_sandbox_ctx *c, const char *s, size_t n)
{
	size_t head_room = c->head_cap - c->head_len;
	size_t k = n < head_room ? n : head_room;
	memcpy(c->head + c->head_len, s, k);
	c->head_len += k;
	s += k;
	n -= k;
	if (!n || !c->tail_cap)
		return;
	/* ring of tail_cap bytes; tail_pos is where the next byte goes. Only the last tail_cap
	 * bytes of this write can survive, so skip the rest at once. */
	if (n > c->tail_cap) {
		c->dropped += c->tail_len + (n - c->tail_cap);
		c->tail_len = 0;
		s += n - c->tail_cap;
		n = c->tail_cap;
	}
	size_t overflow = c->tail_len + n > c->tail_cap ? c->tail_len + n - c->tail_cap : 0;
	c->dropped += overflow;
	c->tail_len += n - overflow;
	while (n) {
		size_t k = c->tail_cap - c->tail_pos;
		if (k > n)
			k = n;
		memcpy(c->tail + c->tail_pos, s, k);
		c->tail_pos = (c->tail_pos + k) % c->tail_cap;
		s += k;
		n -= k;
	}
}

char *mb_sandbox_output_join(mb_sandbox_ctx *c, size_t *len)
{
	char marker[128];
	int mlen = 0;
	if (c->dropped)
		mlen = snprintf(marker, sizeof marker,
				"\n[... %zu bytes of output omitted: max_output_bytes=%zu ...]\n",
				c->dropped, c->head_cap + c->tail_cap);
	size_t total = c->head_len + (size_t)mlen + c->tail_len;
	char *out = malloc(total + 1);
	if (!out)
		return NULL;
	memcpy(out, c->head, c->head_len);
	memcpy(out + c->head_len, marker, (size_t)mlen);
	char *t = out + c->head_len + mlen;
	size_t start = c->tail_len == c->tail_cap ? c->tail_pos : 0;
	for (size_t i = 0; i < c->tail_len; i++)
		t[i] = c->tail[(start + i) % (c->tail_cap ? c->tail_cap : 1)];
	out[total] = 0;
	*len = total;
	return out;
}

/* ---- loading text under the budget ---------------------------------------------------- */

/* Lua's parser runs inside one C call, out of the count hook's reach, and some constructs cost
 * quadratic time in it (a chain of `or`, `and` or `elseif`, thousands of labels: many seconds
 * for 1 MiB; docs/security.md, "Single C calls and the deadline", has the figures). Rather than
 * guess every such construct, the text is handed to the parser in small pieces and the budget is
 * polled between pieces, so a parse stops at the deadline like any other work. A piece holds at
 * most a few dozen tokens, and no single token costs more than one pass over the chunk's jump or
 * label lists. */
#define LOAD_PIECE 64

typedef struct {
	const char *s;
	size_t left;
	int started;
} piece_reader;

static const char *read_piece(lua_State *L, void *ud, size_t *size)
{
	piece_reader *r = ud;
	if (!r->left) {
		*size = 0;
		return NULL;
	}
	if (r->started)
		mb_budget_poll(L); /* an error here ends the parse (lua_load is protected) */
	r->started = 1;
	size_t n = r->left < LOAD_PIECE ? r->left : LOAD_PIECE;
	const char *piece = r->s;
	r->s += n;
	r->left -= n;
	*size = n;
	return piece;
}

/* One token can still cost more than the pieces can bound: in 5.4.4 a label that resolves k
 * pending gotos, or a loop's `end` that resolves k pending breaks, removes each from the list by
 * shifting the rest, O(k^2) inside that one token. So the chunk's goto and break keywords and
 * labels are counted first, outside strings and comments, and more than max_code_jumps is
 * refused (what the worst token costs below and above it: docs/security.md, "Single C calls"). */
static int long_bracket(const char *s, size_t n, size_t i, size_t *level)
{
	size_t j = i + 1; /* s[i] == '[' */
	while (j < n && s[j] == '=')
		j++;
	if (j < n && s[j] == '[') {
		*level = j - i - 1;
		return 1;
	}
	return 0;
}

static size_t skip_long(const char *s, size_t n, size_t i, size_t level)
{
	for (i += level + 2; i < n; i++) {
		if (s[i] != ']')
			continue;
		size_t j = i + 1;
		while (j < n && s[j] == '=')
			j++;
		if (j < n && s[j] == ']' && j - i - 1 == level)
			return j + 1;
	}
	return n;
}

static int ident_char(unsigned char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A quoted string starting at s[i]; returns the index after it. "\z" skips the white space after
 * it, newlines included, and a backslash escapes a newline, as in Lua's lexer (stopping at the
 * newline instead let one line of code look like a string to the scans below). */
static size_t skip_short_string(const char *s, size_t n, size_t i)
{
	char q = s[i];
	for (i++; i < n && s[i] != q && s[i] != '\n' && s[i] != '\r'; i++) {
		if (s[i] != '\\' || i + 1 >= n)
			continue;
		i++;
		if (s[i] == 'z') {
			while (i + 1 < n && (s[i + 1] == ' ' || (s[i + 1] >= '\t' && s[i + 1] <= '\r')))
				i++;
		} else if ((s[i] == '\n' || s[i] == '\r') && i + 1 < n &&
			   (s[i + 1] == '\n' || s[i + 1] == '\r') && s[i + 1] != s[i]) {
			i++; /* "\r\n" and "\n\r" are one newline */
		}
	}
	return i + 1;
}

static size_t count_jumps(const char *s, size_t n)
{
	size_t count = 0, colons = 0, i = 0, level;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		if (c == '-' && i + 1 < n && s[i + 1] == '-') { /* comment */
			i += 2;
			if (i < n && s[i] == '[' && long_bracket(s, n, i, &level))
				i = skip_long(s, n, i, level);
			else
				while (i < n && s[i] != '\n')
					i++;
		} else if (c == '"' || c == '\'') {
			i = skip_short_string(s, n, i);
		} else if (c == '[' && long_bracket(s, n, i, &level)) {
			i = skip_long(s, n, i, level);
		} else if (c == ':' && i + 1 < n && s[i + 1] == ':') {
			colons++; /* a label is ::name:: */
			i += 2;
		} else if (ident_char(c)) {
			size_t j = i;
			while (j < n && ident_char((unsigned char)s[j]))
				j++;
			if ((j - i == 4 && memcmp(s + i, "goto", 4) == 0) ||
			    (j - i == 5 && memcmp(s + i, "break", 5) == 0))
				count++;
			i = j;
		} else {
			i++;
		}
	}
	return count + (colons + 1) / 2;
}

#if LUA_VERSION_RELEASE_NUM < 50407
/* Lua before 5.4.7 names the operand of an error message ("attempt to ... (field 'y')", also
 * in tracebacks) by recursion over the chain of field accesses that produced it: one C frame and
 * one scan of the function's code per link (upstream 7923dbbf). A long enough `a.y.y.y...`
 * overflowed the worker thread's C stack, which killed the server, and a shorter one kept one C
 * call busy for seconds (docs/security.md, the 7923dbbf row, has the figures). So no expression
 * may chain more than MAX_INDEX_CHAIN field accesses (a.b, a[k]); a chunk of 4 KiB holds at most
 * 2,048, too few to harm, so smaller chunks are not scanned. The scan follows Lua's tokens:
 * strings, comments and numbers are skipped, a call ends a chain (an error names a call's result
 * without looking further), parentheses do not, and the chains inside brackets count on their
 * own. */
#define MAX_INDEX_CHAIN 200

static int lua_keyword(const char *w, size_t n)
{
	static const char *const kw[] = { "and", "break", "do", "else", "elseif", "end", "false",
					  "for", "function", "goto", "if", "in", "local", "nil",
					  "not", "or", "repeat", "return", "then", "true", "until",
					  "while", NULL };
	for (int k = 0; kw[k]; k++)
		if (strlen(kw[k]) == n && memcmp(kw[k], w, n) == 0)
			return 1;
	return 0;
}

static size_t longest_index_chain(const char *s, size_t n)
{
	enum { OTHER, NAME, DOT, CLOSE };              /* what the previous token was */
	enum { B_INDEX, B_CALL, B_GROUP, B_OTHER };    /* what a bracket opened */
	enum { MAXD = 256 };                           /* deeper nesting does not parse anyway */
	size_t run[MAXD], best = 0, i = 0, level;
	unsigned char kind[MAXD];
	int d = 0, prev = OTHER, lost = 0;
	run[0] = 0;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		if (c == ' ' || (c >= '\t' && c <= '\r')) {
			i++;
		} else if (c == '-' && i + 1 < n && s[i + 1] == '-') { /* comment */
			i += 2;
			if (i < n && s[i] == '[' && long_bracket(s, n, i, &level))
				i = skip_long(s, n, i, level);
			else
				while (i < n && s[i] != '\n' && s[i] != '\r')
					i++;
		} else if (c == '"' || c == '\'' || (c == '[' && long_bracket(s, n, i, &level))) {
			i = c == '[' ? skip_long(s, n, i, level) : skip_short_string(s, n, i);
			run[d] = 0; /* a string, or a call with one: f"x".y starts a chain */
			prev = CLOSE;
		} else if ((c >= '0' && c <= '9') || (c == '.' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9')) {
			for (i++; i < n; i++) { /* a numeral, as Lua reads it: 1.5e+3, 0x1p-4 */
				if ((s[i] == '+' || s[i] == '-') && s[i - 1] && strchr("eEpP", s[i - 1]))
					continue;
				if (!ident_char((unsigned char)s[i]) && s[i] != '.')
					break;
			}
			run[d] = 0;
			prev = OTHER;
		} else if (ident_char(c)) {
			size_t j = i;
			while (j < n && ident_char((unsigned char)s[j]))
				j++;
			if (lua_keyword(s + i, j - i)) {
				run[d] = 0;
				prev = OTHER;
			} else {
				run[d] = prev == DOT ? run[d] + 1 : 0;
				prev = NAME;
			}
			i = j;
		} else if (c == '.') {
			if (i + 1 < n && s[i + 1] == '.') { /* .. and ... */
				while (i < n && s[i] == '.')
					i++;
				run[d] = 0;
				prev = OTHER;
			} else {
				i++;
				prev = DOT;
			}
		} else if (c == '[' || c == '(' || c == '{') {
			int suffix = prev == NAME || prev == CLOSE;
			if (d + 1 < MAXD) {
				d++;
				kind[d] = c == '{' ? B_OTHER : c == '[' ? (suffix ? B_INDEX : B_OTHER)
								: (suffix ? B_CALL : B_GROUP);
				run[d] = 0;
			} else {
				lost++;
			}
			i++;
			prev = OTHER;
		} else if (c == ']' || c == ')' || c == '}') {
			if (lost) {
				lost--;
			} else if (d > 0) {
				size_t inner = run[d];
				int k = kind[d--];
				run[d] = k == B_INDEX ? run[d] + 1 : k == B_GROUP ? inner : 0;
			}
			i++;
			prev = CLOSE;
		} else {
			run[d] = 0;
			i++;
			prev = OTHER;
		}
		if (run[d] > best)
			best = run[d];
	}
	return best;
}
#endif

int mb_sandbox_load_text(lua_State *L, const char *s, size_t len, const char *name)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (c && len > 4096) { /* fewer than 4096 bytes cannot hold 4096 of them */
		size_t jumps = count_jumps(s, len);
		if (jumps > (size_t)c->cfg->max_code_jumps) {
			lua_pushfstring(L, "too many goto/break statements and labels in one chunk: %d, "
					   "at most max_code_jumps=%d (the parser resolves them in "
					   "quadratic time)", (int)jumps, (int)c->cfg->max_code_jumps);
			return LUA_ERRSYNTAX;
		}
#if LUA_VERSION_RELEASE_NUM < 50407
		size_t chain = longest_index_chain(s, len);
		if (chain > MAX_INDEX_CHAIN) {
			lua_pushfstring(L, "an expression chains %d field accesses (a.b.c...), at most %d "
					   "in this sandbox (Lua before 5.4.7 can overflow the C stack naming "
					   "such a chain in an error message: upstream 7923dbbf)",
					(int)chain, MAX_INDEX_CHAIN);
			return LUA_ERRSYNTAX;
		}
#endif
	}
	piece_reader r = { s, len, 0 };
	return lua_load(L, read_piece, &r, name, "t");
}
