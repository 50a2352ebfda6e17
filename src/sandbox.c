/* sandbox.c - one execution of untrusted Lua: state, allocator, hook, run, result capture.
 *
 * mb_sandbox_run creates a fresh lua_State whose allocator (arena.c) charges the execution's mb_budget,
 * installs the count hook before any code is loaded, builds the restricted environment
 * (sandbox_env.c) inside a protected call, loads the user's chunk as text only, runs it under a
 * message handler that never invokes user metamethods, and turns what happened into plain data:
 * the result as JSON text, the captured output, an error with its type and a short traceback, and
 * the counters. Whether a limit stopped the run is decided from the budget's sticky flag, never
 * from a status code or an error object, which sandbox code can forge.
 *
 * The deadline is enforced three ways: the count hook reads the clock every HOOK_COUNT
 * instructions; the pool sends this thread MB_SANDBOX_SIGNAL at the deadline, whose handler
 * re-arms the hook to fire on the very next instruction (so one slow instruction such as a long
 * string comparison cannot stretch the interval); and native builtins poll the budget inside
 * their own loops.
 */
#include "sandbox.h"

#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec.h"
#include "embedded.h"
#include "log.h"
#include "json.h"
#include "lang_hint.h"
#include "sandbox_int.h"
#include "arena.h"

#define HOOK_COUNT 1000

/* The state currently executing on this thread (main state or a coroutine), for the deadline
 * signal handler. Written only by this thread. */
static _Thread_local lua_State *volatile running_state;

/* Precompiled prelude bytecode, built once by mb_sandbox_global_init before any worker thread
 * starts and read-only afterwards. */
typedef struct {
	const char *name;
	char *code;
	size_t len;
	char **exports;  /* global function names the chunk defines, NULL-terminated */
} prelude_chunk;
static prelude_chunk prelude[16];
static int prelude_count;

/* Fault injection for tests only (docs/testing.md): with MOONBOX_TEST_STALL_MS=N in the
 * environment, an execution whose code contains the text MOONBOX_TEST_STALL sleeps N ms in C
 * after its code has run, ignoring its budget, as a C call that cannot be interrupted would.
 * The watchdog, abandoned threads and max_abandoned are tested with it without depending on
 * how fast some builtin is on the machine. Read once by mb_sandbox_global_init. */
static long test_stall_ms;

static void test_stall(const mb_exec_request *req)
{
	if (!test_stall_ms || !memmem(req->code, req->code_len, "MOONBOX_TEST_STALL", 18))
		return;
	struct timespec ts = { test_stall_ms / 1000, (test_stall_ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0) /* the deadline signal interrupts: sleep on */
		;
}

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
	    (caller->u.l.savedpc[-1] & 0x7F) == OP544_CONCAT)
		luaL_error(L, "__concat metamethods are not allowed in this sandbox (the Lua it runs, "
			      "5.4.4 as patched by Debian, can corrupt memory after one: upstream "
			      "603b2c64)");
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

static void deadline_signal(int sig)
{
	(void)sig;
	lua_State *L = running_state;
	/* lua_sethook is documented as safe to call from a signal handler. */
	if (L) /* keeping the call events of the __concat guard */
		lua_sethook(L, sb_hook, lua_gethookmask(L) | LUA_MASKCOUNT, 1);
}

/* With a loaded chunk at the top, makes a fresh table whose __index is the globals, sets it as
 * the chunk's _ENV, and leaves [env, chunk] on the stack: running the chunk then defines its
 * globals in env, not in the state's global table. */
static void bind_private_env(lua_State *L)
{
	lua_newtable(L);
	lua_newtable(L);
	lua_pushglobaltable(L);
	lua_setfield(L, -2, "__index");
	lua_setmetatable(L, -2);
	lua_pushvalue(L, -1);
	lua_setupvalue(L, -3, 1);
	lua_insert(L, -2);
}

typedef struct {
	char *data;
	size_t len, cap;
} dump_buf;

static int dump_writer(lua_State *L, const void *p, size_t n, void *ud)
{
	(void)L;
	dump_buf *d = ud;
	if (d->len + n > d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4096;
		while (cap < d->len + n)
			cap *= 2;
		char *nd = realloc(d->data, cap);
		if (!nd)
			return 1;
		d->data = nd;
		d->cap = cap;
	}
	memcpy(d->data + d->len, p, n);
	d->len += n;
	return 0;
}

int mb_sandbox_global_init(void)
{
	const char *stall = getenv("MOONBOX_TEST_STALL_MS");
	test_stall_ms = stall ? strtol(stall, NULL, 10) : 0;
	if (test_stall_ms < 0 || test_stall_ms > 600000)
		test_stall_ms = 0;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = deadline_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(MB_SANDBOX_SIGNAL, &sa, NULL) != 0)
		return -1;

	/* Compile the prelude once; each sandbox loads this trusted bytecode instead of parsing. */
	lua_State *L = luaL_newstate();
	if (!L)
		return -1;
	luaL_openlibs(L);
	for (const mb_embedded_file *f = mb_embedded_lua; f->name; f++) {
		if (strncmp(f->name, "prelude.", 8) != 0)
			continue;
		if (prelude_count == (int)(sizeof prelude / sizeof prelude[0])) {
			fprintf(stderr, "moonbox: too many prelude modules\n");
			lua_close(L);
			return -1;
		}
		if (luaL_loadbufferx(L, f->data, f->len, f->name, "b") != LUA_OK) {
			fprintf(stderr, "moonbox: prelude %s: %s\n", f->name, lua_tostring(L, -1));
			lua_close(L);
			return -1;
		}
		dump_buf d = { 0 };
		if (lua_dump(L, dump_writer, &d, 0) != 0) {
			free(d.data);
			lua_close(L);
			return -1;
		}
		/* Run it once in a scratch environment to learn which globals it defines. */
		bind_private_env(L);
		if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
			fprintf(stderr, "moonbox: prelude %s: %s\n", f->name, lua_tostring(L, -1));
			free(d.data);
			lua_close(L);
			return -1;
		}
		size_t n = 0;
		char **names = calloc(64, sizeof *names);
		lua_pushnil(L);
		while (names && lua_next(L, -2)) {
			if (lua_type(L, -2) == LUA_TSTRING && lua_isfunction(L, -1) && n < 63)
				names[n++] = strdup(lua_tostring(L, -2));
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
		if (!names) {
			free(d.data);
			lua_close(L);
			return -1;
		}
		prelude[prelude_count].exports = names;
		prelude[prelude_count].name = f->name;
		prelude[prelude_count].code = d.data;
		prelude[prelude_count].len = d.len;
		prelude_count++;
	}
	lua_close(L);
	return 0;
}

int mb_sandbox_thread_init(void)
{
	running_state = NULL;
	return 0;
}

/* ---- context --------------------------------------------------------------------------- */

static const char ctx_key = 0;

mb_sandbox_ctx *mb_sandbox_ctx_of(lua_State *L)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &ctx_key);
	mb_sandbox_ctx *c = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return c;
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

static char *output_join(mb_sandbox_ctx *c, size_t *len)
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
 * quadratic time in it (measured on 1 MiB chunks of Debian's 5.4.4: a chain of `or` 51 s, of
 * `and` 35 s, of `elseif` 6 s; thousands of labels). Rather than guess every such construct,
 * the text is handed to the parser in small pieces and the budget is polled between pieces, so
 * a parse stops at the deadline like any other work. A piece holds at most a few dozen tokens,
 * and no single token costs more than one pass over the chunk's jump or label lists. */
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
 * shifting the rest, O(k^2) inside that one token (32,700 breaks in one loop: 0.3 s). So the
 * chunk's goto and break keywords and labels are counted first, outside strings and comments,
 * and more than max_code_jumps is refused: at 4,096 the worst token costs a few ms. */
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
 * one scan of the function's code per link (upstream 7923dbbf). `a.y.y.y...` with 150,000 links
 * overflowed the worker thread's C stack, which killed the server, and 60,000 links kept one C
 * call busy 1.5 s. So no expression may chain more than MAX_INDEX_CHAIN field accesses (a.b,
 * a[k]); a chunk of 4 KiB holds at most 2,048, which cost a few ms and a few hundred KiB of
 * stack, so smaller chunks are not scanned. The scan follows Lua's tokens: strings, comments
 * and numbers are skipped, a call ends a chain (an error names a call's result without looking
 * further), parentheses do not, and the chains inside brackets count on their own. */
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

/* ---- running --------------------------------------------------------------------------- */

/* Message handler: keeps the error value and records a short traceback, without calling any
 * metamethod of the error object. */
static int sb_msgh(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (c && mb_budget_check(c->b) == MB_STOP_NONE && !c->traceback) {
		const char *msg = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
		luaL_traceback(L, L, msg, 1);
		size_t n;
		const char *tb = lua_tolstring(L, -1, &n);
		if (n > 4096)
			n = 4096;
		c->traceback = malloc(n + 1);
		if (c->traceback) {
			memcpy(c->traceback, tb, n);
			c->traceback[n] = 0;
		}
		lua_pop(L, 1);
	}
	lua_settop(L, 1);
	return 1;
}

static const mb_json_limits *json_limits(mb_sandbox_ctx *c)
{
	return &c->json_lim;
}

/* The prelude helpers are loaded lazily: loading ~800 lines of bytecode costs more than the
 * rest of an execution, and most executions use none of them. Each exported name starts as this
 * stub; the first call runs the chunk in a private environment (whose __index is the sandbox's
 * globals, so the chunk cannot overwrite the user's globals) and every stub then forwards to the
 * real function found there. */
static const char prelude_key = 0;

static int prelude_stub(lua_State *L)
{
	int i = (int)lua_tointeger(L, lua_upvalueindex(1));
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &prelude_key) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_newtable(L);
		lua_pushvalue(L, -1);
		lua_rawsetp(L, LUA_REGISTRYINDEX, &prelude_key);
	}
	if (lua_rawgeti(L, -1, i) != LUA_TTABLE) {
		lua_pop(L, 1);
		if (luaL_loadbufferx(L, prelude[i].code, prelude[i].len, prelude[i].name, "b") != LUA_OK)
			return lua_error(L);
		bind_private_env(L);
		lua_call(L, 0, 0);
		lua_pushvalue(L, -1);
		lua_rawseti(L, -3, i);
	}
	lua_pushvalue(L, lua_upvalueindex(2));
	lua_rawget(L, -2);
	lua_replace(L, -3);
	lua_pop(L, 1);
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

/* Runs inside lua_pcall while preparing: libraries, the restricted environment, prelude stubs. */
static int sb_setup(lua_State *L)
{
	if (mb_sandbox_env_open(L) != 0)
		return luaL_error(L, "sandbox: environment setup failed");
	lua_pushglobaltable(L);
	for (int i = 0; i < prelude_count; i++) {
		for (char **e = prelude[i].exports; *e; e++) {
			lua_pushinteger(L, i);
			lua_pushstring(L, *e);
			lua_pushcclosure(L, prelude_stub, 2);
			lua_setfield(L, -2, *e);
		}
	}
	lua_pop(L, 1);
	return 0;
}

/* Runs inside lua_pcall when the execution starts: context_vars become globals. */
static int sb_context(lua_State *L)
{
	mb_sandbox_ctx *c = lua_touserdata(L, 1);
	char err[256];
	if (mb_json_decode(L, c->req->context_json, c->req->context_len, json_limits(c), err,
			   sizeof err) != 0)
		return luaL_error(L, "context_vars: %s", err);
	if (!lua_istable(L, -1))
		return luaL_error(L, "context_vars must be an object");
	lua_pushglobaltable(L);
	lua_pushnil(L);
	while (lua_next(L, -3)) {
		if (lua_type(L, -2) == LUA_TSTRING) {
			lua_pushvalue(L, -2);
			lua_insert(L, -2);
			lua_rawset(L, -4);
		} else {
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 2);
	return 0;
}

static char *xstrdup(const char *s)
{
	if (!s)
		return NULL;
	size_t n = strlen(s);
	char *d = malloc(n + 1);
	if (d)
		memcpy(d, s, n + 1);
	return d;
}

/* Error messages are capped: a script can raise a string of any size. */
#define MAX_ERROR_BYTES 65536

static void set_error(mb_exec_result *res, const char *type, const char *msg)
{
	res->success = 0;
	res->error_type = type;
	free(res->error);
	size_t n = strlen(msg);
	if (n <= MAX_ERROR_BYTES) {
		res->error = xstrdup(msg);
		return;
	}
	char tail[96];
	int t = snprintf(tail, sizeof tail, "... [error message truncated: %zu bytes, at most %d kept]",
			 n, MAX_ERROR_BYTES);
	size_t keep = MAX_ERROR_BYTES - (size_t)t;
	while (keep && ((unsigned char)msg[keep] & 0xC0) == 0x80)
		keep--; /* do not cut a UTF-8 sequence */
	res->error = malloc(keep + (size_t)t + 1);
	if (!res->error)
		return;
	memcpy(res->error, msg, keep);
	memcpy(res->error + keep, tail, (size_t)t + 1);
}

/* Turns the error value at the top of the stack into a message, without metamethods. */
static void describe_error(lua_State *L, mb_sandbox_ctx *c, mb_exec_result *res, const char *type)
{
	const char *msg = NULL;
	mb_sandbox_pii_top(L); /* scanned before anything cuts it */
	char buf[256];
	if (lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER) {
		msg = lua_tostring(L, -1);
	} else if (lua_type(L, -1) == LUA_TNIL) {
		msg = "error called with nil";
	} else {
		size_t n;
		char jerr[128];
		char *j = mb_json_encode(L, -1, json_limits(c), MB_JSON_LENIENT, &n, jerr, sizeof jerr);
		if (j && n < 4000) {
			snprintf(buf, sizeof buf, "error object: %s", j);
			msg = buf;
		} else {
			snprintf(buf, sizeof buf, "error object of type %s", luaL_typename(L, -1));
			msg = buf;
		}
		free(j);
	}
	set_error(res, type, msg);
}

/* A syntax error in code that looks like Python or JavaScript gets a hint (lang_hint.h). */
static void add_lang_hint(mb_exec_result *res, const char *code, size_t len)
{
	const char *hint = res->error_type && strcmp(res->error_type, "syntax") == 0 && res->error
				   ? mb_lang_hint(code, len) : NULL;
	if (!hint)
		return;
	size_t n = strlen(res->error) + strlen(hint) + 16;
	char *msg = malloc(n);
	if (!msg)
		return;
	snprintf(msg, n, "%s (hint: %s)", res->error, hint);
	set_error(res, "syntax", msg);
	free(msg);
}

static void capture_result(lua_State *L, mb_sandbox_ctx *c, int base, mb_exec_result *res)
{
	int n = lua_gettop(L) - base;
	if (n == 0) {
		lua_pushglobaltable(L);
		lua_pushliteral(L, "result");
		lua_rawget(L, -2); /* raw: no user __index runs at capture time */
		lua_remove(L, -2);
	} else if (n > 1) {
		/* several values are one JSON array and a nil among them is null, so positions hold:
		 * `return nil, "why"` is [null, "why"], not {"2": "why"} */
		lua_createtable(L, n, 0);
		for (int i = 1; i <= n; i++) {
			if (lua_isnil(L, base + i))
				mb_json_push_null(L);
			else
				lua_pushvalue(L, base + i);
			lua_rawseti(L, -2, i);
		}
		mb_json_mark_array(L, -1);
	}
	char err[256];
	size_t len = 0;
	mb_json_limits lim = *json_limits(c);
	lim.root_name = "result";
	lim.max_output_bytes = (size_t)c->req->cfg->max_result_bytes;
	lim.output_limit_name = "max_result_bytes";
	char *j = mb_json_encode(L, -1, &lim, MB_JSON_LENIENT, &len, err, sizeof err);
	if (!j && strstr(err, "max_result_bytes")) {
		char msg[300];
		snprintf(msg, sizeof msg, "result is too large: %s", err);
		set_error(res, "result", msg);
		return;
	}
	if (!j) {
		if (mb_budget_check(c->b) != MB_STOP_NONE)
			return; /* reported from the budget */
		char msg[400];
		snprintf(msg, sizeof msg, "result cannot be returned as JSON: %s", err);
		set_error(res, "result", msg);
		return;
	}
	res->result_json = j;
	res->result_len = len;
	res->success = 1;
}

struct mb_sandbox {
	lua_State *L;
	mb_arena_ud aud;      /* the allocator's view: arena and the budget it charges */
	mb_budget prep;       /* charged while preparing; moved onto the execution's budget */
	mb_sandbox_ctx c;     /* the registry points here, so it lives on the heap */
	int msgh;             /* stack index of the message handler */
	int setup_failed;
};

static void ctx_free(mb_sandbox_ctx *c)
{
	mb_sandbox_pii_free(c);
	free(c->traceback);
	free(c->head);
	free(c->tail);
}

mb_sandbox *mb_sandbox_prepare(const mb_config *cfg)
{
	mb_sandbox *sb = calloc(1, sizeof *sb);
	if (!sb)
		return NULL;
	mb_sandbox_ctx *c = &sb->c;
	c->cfg = cfg;
	c->b = &sb->prep;
	c->json_lim.max_depth = (int)cfg->json_max_depth;
	c->json_lim.max_output_bytes = 0; /* bounded by the memory cap; the result is checked */
	c->json_lim.max_input_bytes = (size_t)cfg->max_message_bytes;
	c->json_lim.input_limit_name = "max_message_bytes";
	c->head_cap = (size_t)cfg->max_output_bytes / 2;
	c->tail_cap = (size_t)cfg->max_output_bytes - c->head_cap;
	c->head = malloc(c->head_cap);
	c->tail = malloc(c->tail_cap);
	/* Preparation may use up to the largest cap a call can ask for; the execution's own cap is
	 * applied when it starts (the environment then counts against it). */
	mb_budget_init(&sb->prep, (size_t)cfg->max_memory_mb << 20, 0, 0);
	sb->aud.a = mb_arena_thread();
	sb->aud.b = &sb->prep;
	lua_State *L = c->head && c->tail ? lua_newstate(mb_arena_lua_alloc, &sb->aud) : NULL;
	if (!L) {
		ctx_free(c);
		free(sb);
		return NULL;
	}
	sb->L = L;
	*(mb_budget **)lua_getextraspace(L) = &sb->prep;
	lua_setwarnf(L, NULL, NULL);
	mb_sandbox_sethook(L);
	lua_pushlightuserdata(L, c);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &ctx_key);
	lua_pushcfunction(L, sb_msgh);
	sb->msgh = lua_gettop(L);
	lua_pushcfunction(L, sb_setup);
	mb_budget_set_current(&sb->prep);
	/* Nothing made during setup is garbage: collecting while building the environment is
	 * wasted work. The memory cap still applies. */
	lua_gc(L, LUA_GCSTOP);
	int status = lua_pcall(L, 0, 0, 0);
	lua_gc(L, LUA_GCRESTART);
	mb_budget_set_current(NULL);
	if (status != LUA_OK) {
		mb_log(MB_LOG_ERROR, "sandbox: preparing a state failed: %s",
		       lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(error object)");
		sb->setup_failed = 1;
	}
	lua_settop(L, sb->msgh);
	/* os.clock's zero: read here, off the request's path (a worker prepares the state, then
	 * waits for the job without using CPU) */
	c->cpu_start_ns = mb_thread_cpu_ns();
	return sb;
}

static void close_state(mb_sandbox *sb)
{
	if (sb->L) {
		lua_close(sb->L);
		mb_arena_trim(sb->aud.a);
	}
	ctx_free(&sb->c);
	free(sb);
}

void mb_sandbox_discard(mb_sandbox *sb)
{
	if (!sb)
		return;
	/* the state may still be charged to the prep budget only */
	sb->aud.b = &sb->prep;
	close_state(sb);
}

int mb_sandbox_run_prepared(mb_sandbox *sb, const mb_exec_request *req, mb_budget *b,
			    mb_exec_result *res)
{
	memset(res, 0, sizeof *res);
	uint64_t t0 = mb_now_ns();
	const mb_config *cfg = req->cfg;
	mb_codec_hash_hex(req->code, req->code_len, res->code_hash); /* for the history, off the loop */
	if (!sb) {
		set_error(res, "memory", "sandbox: out of host memory");
		res->output = xstrdup("");
		return -1;
	}
	lua_State *L = sb->L;
	mb_sandbox_ctx *c = &sb->c;
	int status;
	c->req = req;
	c->cfg = cfg;
	c->b = b;

	/* From here on every byte, including the environment already built, is the execution's. */
	if (sb->setup_failed) {
		set_error(res, "runtime", "sandbox: the environment could not be built (see the server log)");
		goto finish;
	}
	if (mb_budget_charge(b, sb->prep.mem_used) != 0)
		goto finish; /* the cap is below what the environment needs: a memory error */
	sb->prep.mem_used = 0;
	sb->aud.b = b;
	/* nesting through C is measured from here (mb_budget_cstack_check) */
	b->cstack_base = (uintptr_t)__builtin_frame_address(0);
	b->cstack_limit = (size_t)cfg->max_c_stack_kb << 10;
	*(mb_budget **)lua_getextraspace(L) = b;
	mb_budget_set_current(b);
	mb_sandbox_set_running(L);

	if (req->context_json && req->context_len) {
		lua_pushcfunction(L, sb_context);
		lua_pushlightuserdata(L, c);
		if (lua_pcall(L, 1, 0, sb->msgh) != LUA_OK) {
			describe_error(L, c, res, "runtime");
			goto finish;
		}
	}
	if (req->code_len > (size_t)cfg->max_code_bytes) {
		char msg[160];
		snprintf(msg, sizeof msg, "code is too large: %zu bytes, max_code_bytes=%lld",
			 req->code_len, (long long)cfg->max_code_bytes);
		set_error(res, "syntax", msg);
		goto finish;
	}
	status = mb_sandbox_load_text(L, req->code, req->code_len, "=code");
	if (status != LUA_OK) {
		describe_error(L, c, res, status == LUA_ERRSYNTAX ? "syntax" : "runtime");
		add_lang_hint(res, req->code, req->code_len);
		goto finish;
	}
	status = lua_pcall(L, 0, LUA_MULTRET, sb->msgh);
	if (status == LUA_OK && mb_budget_check(b) == MB_STOP_NONE)
		status = mb_sandbox_pii_values(L, sb->msgh, sb->msgh); /* pii_policy */
	if (status == LUA_OK && mb_budget_check(b) == MB_STOP_NONE) {
		capture_result(L, c, sb->msgh, res);
	} else if (status != LUA_OK) {
		describe_error(L, c, res, "runtime");
		res->traceback = c->traceback;
		c->traceback = NULL;
	}

finish:
	test_stall(req);
	if (mb_budget_check(b) != MB_STOP_NONE) {
		/* A limit decides the outcome, whatever the script made of it. */
		char msg[160];
		mb_budget_message(b, msg, sizeof msg);
		set_error(res, mb_stop_name((mb_stop_reason)atomic_load(&b->stop)), msg);
		free(res->traceback);
		res->traceback = NULL;
		free(res->result_json);
		res->result_json = NULL;
	}
	mb_sandbox_set_running(NULL);
	res->instructions = b->instructions;
	res->output = output_join(c, &res->output_len);
	mb_sandbox_pii_finish(c, res); /* policy on output and error texts; found values out */
	close_state(sb); /* the allocator still charges b: the budget outlives the state */
	mb_budget_set_current(NULL);
	res->memory_peak_bytes = b->mem_peak;
	if (!res->result_json && res->success) {
		res->result_json = xstrdup("null");
		res->result_len = 4;
	}
	res->execution_time_ms = (double)(mb_now_ns() - t0) / 1e6;
	mb_exec_result_shape(res);
	return 0;
}

int mb_sandbox_run(const mb_exec_request *req, mb_budget *b, mb_exec_result *res)
{
	return mb_sandbox_run_prepared(mb_sandbox_prepare(req->cfg), req, b, res);
}

/* ---- the structuredContent of a result, built off the loop thread -------------------------- */

/* A plain trusted state per worker thread, used only to serialize results with the shared JSON
 * encoder (the sandbox state is closed by then). */
static _Thread_local lua_State *scratch;

void mb_sandbox_thread_exit(void)
{
	if (scratch)
		lua_close(scratch);
	scratch = NULL;
	mb_sandbox_pii_thread_exit();
}

static void set_str(lua_State *S, const char *k, const char *v, size_t n)
{
	lua_pushlstring(S, v, n);
	lua_setfield(S, -2, k);
}

static int shape_protected(lua_State *S)
{
	mb_exec_result *res = lua_touserdata(S, 1);
	lua_createtable(S, 0, 9);
	lua_pushboolean(S, res->success);
	lua_setfield(S, -2, "success");
	if (res->success && res->result_json)
		mb_json_push_raw(S, res->result_json, res->result_len);
	else
		mb_json_push_null(S);
	lua_setfield(S, -2, "result");
	set_str(S, "output", res->output ? res->output : "", res->output ? res->output_len : 0);
	if (!res->success) {
		set_str(S, "error", res->error ? res->error : "error", res->error ? strlen(res->error) : 5);
		set_str(S, "error_type", res->error_type ? res->error_type : "runtime",
			strlen(res->error_type ? res->error_type : "runtime"));
		if (res->traceback)
			set_str(S, "traceback", res->traceback, strlen(res->traceback));
	}
	lua_pushnumber(S, res->execution_time_ms);
	lua_setfield(S, -2, "execution_time_ms");
	lua_pushinteger(S, (lua_Integer)res->instructions);
	lua_setfield(S, -2, "instructions");
	lua_pushinteger(S, (lua_Integer)res->memory_peak_bytes);
	lua_setfield(S, -2, "memory_peak_bytes");
	char err[200];
	res->sc_json = mb_json_encode(S, -1, NULL, MB_JSON_LENIENT, &res->sc_json_len, err, sizeof err);
	if (!res->sc_json)
		return 0;
	lua_pushlstring(S, res->sc_json, res->sc_json_len);
	res->sc_text = mb_json_encode(S, -1, NULL, MB_JSON_LENIENT, &res->sc_text_len, err, sizeof err);
	return 0;
}

void mb_exec_result_shape(mb_exec_result *res)
{
	if (!scratch) {
		scratch = luaL_newstate();
		if (!scratch)
			return;
		*(mb_budget **)lua_getextraspace(scratch) = NULL;
	}
	lua_pushcfunction(scratch, shape_protected);
	lua_pushlightuserdata(scratch, res);
	if (lua_pcall(scratch, 1, 0, 0) != LUA_OK)
		lua_pop(scratch, 1);
	if (!res->sc_text) {
		free(res->sc_json);
		res->sc_json = NULL;
	}
	lua_settop(scratch, 0);
	lua_gc(scratch, LUA_GCSTEP, 0);
}

void mb_exec_result_free(mb_exec_result *res)
{
	free(res->sc_json);
	free(res->sc_text);
	free(res->result_json);
	free(res->output);
	free(res->error);
	free(res->traceback);
	for (size_t i = 0; i < res->pii_nfound; i++)
		free(res->pii_found[i].value);
	free(res->pii_found);
	memset(res, 0, sizeof *res);
}
