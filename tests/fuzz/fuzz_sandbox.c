/* fuzz_sandbox.c - libFuzzer target: the sandbox (src/sandbox.c, sandbox_env.c, budget.c,
 * arena.c, json.c, lpattern.c, regex.c, the lazy prelude) fed Lua programs built from the input.
 *
 * The input drives a small grammar (gen_block below): statements (locals, assignments, if,
 * bounded for/while, repeat, functions and closures, goto and labels, pcall/xpcall/error,
 * coroutines, to-be-closed variables, metatables with __index/__newindex/__call/__gc/__close/
 * __eq/__lt/__le/__concat/__len/__tostring/__mode, load of generated chunks, print, return) and
 * expressions (literals at the edges: maxinteger, -0.0, nan, huge strings; arithmetic, bitwise,
 * comparison and concatenation operators; calls into string, table, math, utf8, coroutine, os,
 * json, re, pii, tokenize_pii/detokenize_pii, select/rawlen/next/tostring/tonumber and the
 * prelude helpers; the lazy globals read raw, assigned, listed, given a metatable and encoded).
 * Every generated name
 * is declared first, so most programs run far enough to matter. With bit 0 of byte 0 set the
 * rest of the input is used as Lua source as it is (the parser and its limits).
 *
 * Each program runs with mb_sandbox_run, the real entry point a worker uses, under small limits
 * picked by byte 0: 8 MiB of memory, 50k to 2M instructions, a 100 ms deadline, small output and
 * result caps, sometimes a context object and the PII policy (the built-in detector is set, as
 * the server sets it before its workers start). Invariants, any violation aborts:
 *  - mb_sandbox_run fills the result (returns 0); success has a result that is valid JSON and no
 *    error; failure has an error type from the documented set and a non-empty message;
 *  - a limit that tripped decides the outcome (sticky: no pcall, coroutine, __close or __gc
 *    swallowed it), and the error type names it;
 *  - the structuredContent JSON (when built) is a valid JSON object;
 *  - the peak memory never exceeds the cap; the instruction count stays within twice the limit
 *    (after the limit trips, every pending __close handler still costs the one instruction
 *    whose hook raises again); the call returns within the deadline plus a generous 1.5 s
 *    (ASan, a loaded machine): a longer overrun is work that no hook interrupts. A thread sends
 *    the deadline signal as the pool does, so the hook fires at the next instruction (it found
 *    unbounded pcall nesting in coroutines overrunning by seconds: fixed, security/cstack);
 *  - afterwards every byte charged to the budget is given back (mem_used == 0), no arena block
 *    is live and no budget is left current on the thread.
 * FUZZ_SANDBOX_PRINT=1 build-fuzz/fuzz_sandbox <file> prints the program an input makes.
 * Build and run: tests/fuzz/run.sh fuzz_sandbox
 * FUZZ_OPTIONS: -timeout=20
 */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "budget.h"
#include "config.h"
#include "json.h"
#include "sandbox.h"
#include "sandbox_int.h"

#define FAIL(...) do { fprintf(stderr, "FUZZ INVARIANT: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static mb_config cfg;

/* ---- the generator ------------------------------------------------------------------------------ */

typedef struct {
	const uint8_t *p;
	size_t n, i;
	char *out;
	size_t len, cap;
	int depth, labels, funcs;
} gen;

static unsigned pick(gen *g, unsigned n)
{
	if (g->i >= g->n)
		return 0;
	return g->p[g->i++] % n;
}

static void emit(gen *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char tmp[512];
	int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	if ((size_t)k >= sizeof tmp)
		k = sizeof tmp - 1;
	if (g->len + (size_t)k + 1 > g->cap) {
		g->cap = (g->len + (size_t)k + 1) * 2;
		g->out = realloc(g->out, g->cap);
	}
	memcpy(g->out + g->len, tmp, (size_t)k);
	g->len += (size_t)k;
	g->out[g->len] = 0;
}

static const char *const VARS[] = { "a", "b", "c", "t", "u", "s", "f", "n" };
#define NVARS (sizeof VARS / sizeof *VARS)

static const char *const STRS[] = {
	"''", "'a'", "'hello world'", "'%d'", "'(.-)'", "'%a+'", "'[%w_]+'", "'\\0'", "'\\xff\\xfe'",
	"'caf\\u{E9}'", "'{\"a\":[1,2,{\"b\":null}]}'", "'[1,2,3'", "'%'", "'%b()'", "'%f[%w]%w+'",
	"'(a*)*b'", "'^(%d+)$'", "'\\u{10FFFF}'", "'x'", "'return 1'", "'return ...'", "'1e308'",
	"'0x7fffffffffffffff'", "'a,b,,c'", "'\\n'", "'i4'", "'<i8 z s1'", "'%q'", "'%5.2f'",
	"'%s=%s'", "'(\\\\d+)'", "'[a-z]+'", "'(?i)abc'", "'\\\\p{L}+'", "'((a+)+)+$'", "'.-'",
};
#define NSTRS (sizeof STRS / sizeof *STRS)

/* global names: lazy ones of each kind (base, library, json/re/mcp, a group, a prelude stub),
 * the eager ones, and names that are none */
static const char *const GLOBALS[] = {
	"math", "os", "json", "re", "mcp", "servers", "require", "skills", "pii", "read_file",
	"group_by", "take", "coroutine", "table", "utf8", "_G", "print", "pairs", "next", "rawget",
	"setmetatable", "getmetatable", "string", "_VERSION", "nope_", "a",
};
#define NGLOBALS (sizeof GLOBALS / sizeof *GLOBALS)

static void gen_expr(gen *g);
static void gen_block(gen *g, int n);

static void gen_var(gen *g)
{
	emit(g, "%s", VARS[pick(g, NVARS)]);
}

static void gen_args(gen *g, int n)
{
	for (int i = 0; i < n; i++) {
		if (i)
			emit(g, ", ");
		gen_expr(g);
	}
}

static void gen_call(gen *g)
{
	switch (pick(g, 50)) {
	case 0: emit(g, "string.rep("); gen_expr(g); emit(g, ", %u, ", pick(g, 64) * pick(g, 64)); gen_expr(g); emit(g, ")"); break;
	case 1: emit(g, "string.sub("); gen_args(g, 3); emit(g, ")"); break;
	case 2: emit(g, "string.format(%s, ", STRS[pick(g, NSTRS)]); gen_args(g, 2); emit(g, ")"); break;
	case 3: emit(g, "string.find("); gen_expr(g); emit(g, ", %s, ", STRS[pick(g, NSTRS)]); gen_expr(g); emit(g, ")"); break;
	case 4: emit(g, "string.gsub("); gen_expr(g); emit(g, ", %s, ", STRS[pick(g, NSTRS)]); gen_expr(g); emit(g, ")"); break;
	case 5: emit(g, "string.match("); gen_expr(g); emit(g, ", %s)", STRS[pick(g, NSTRS)]); break;
	case 6: emit(g, "select('#', string.byte("); gen_args(g, 3); emit(g, "))"); break;
	case 7: emit(g, "string.char(%u, %u)", pick(g, 256), pick(g, 256)); break;
	case 8: emit(g, "string.pack(%s, ", STRS[pick(g, NSTRS)]); gen_args(g, 2); emit(g, ")"); break;
	case 9: emit(g, "string.unpack(%s, ", STRS[pick(g, NSTRS)]); gen_expr(g); emit(g, ")"); break;
	case 10: emit(g, "utf8.char(%u, %u)", pick(g, 256) * 4351u, pick(g, 128)); break;
	case 11: emit(g, "utf8.len("); gen_expr(g); emit(g, ")"); break;
	case 12: emit(g, "table.concat("); gen_expr(g); emit(g, ", "); gen_expr(g); emit(g, ")"); break;
	case 13: emit(g, "table.unpack("); gen_expr(g); emit(g, ", 1, %u)", pick(g, 40)); break;
	case 14: emit(g, "table.insert("); gen_args(g, 2); emit(g, ")"); break;
	case 15: emit(g, "table.remove("); gen_expr(g); emit(g, ")"); break;
	case 16: emit(g, "table.sort("); gen_expr(g); emit(g, pick(g, 2) ? ", function(x, y) return " : ")");
		if (g->out[g->len - 1] != ')') { gen_expr(g); emit(g, " end)"); } break;
	case 17: emit(g, "table.move("); gen_args(g, 4); emit(g, ")"); break;
	case 18: emit(g, "math.floor("); gen_expr(g); emit(g, ")"); break;
	case 19: emit(g, "math.max("); gen_args(g, 2); emit(g, ")"); break;
	case 20: emit(g, "math.tointeger("); gen_expr(g); emit(g, ")"); break;
	case 21: emit(g, "math.fmod("); gen_args(g, 2); emit(g, ")"); break;
	case 22: emit(g, "tostring("); gen_expr(g); emit(g, ")"); break;
	case 23: emit(g, "tonumber("); gen_expr(g); emit(g, pick(g, 2) ? ", %u)" : ")", 2 + pick(g, 35)); break;
	case 24: emit(g, "json.encode("); gen_expr(g); emit(g, ")"); break;
	case 25: emit(g, "json.decode("); gen_expr(g); emit(g, ")"); break;
	case 26: emit(g, "re.match("); gen_expr(g); emit(g, ", %s)", STRS[pick(g, NSTRS)]); break;
	case 27: emit(g, "re.gsub("); gen_expr(g); emit(g, ", %s, ", STRS[pick(g, NSTRS)]); gen_expr(g); emit(g, ")"); break;
	case 28: emit(g, "re.split("); gen_expr(g); emit(g, ", %s)", STRS[pick(g, NSTRS)]); break;
	case 29: emit(g, "select("); gen_args(g, 3); emit(g, ")"); break;
	case 30: emit(g, "rawlen("); gen_expr(g); emit(g, ")"); break;
	case 31: emit(g, "next("); gen_expr(g); emit(g, ")"); break;
	case 32: emit(g, "type("); gen_expr(g); emit(g, ")"); break;
	case 33: emit(g, "os.date(%s, ", pick(g, 2) ? "'!%Y-%m-%dT%H:%M:%S'" : "'*t'"); gen_expr(g); emit(g, ")"); break;
	case 34: emit(g, "os.time()"); break;
	case 35: emit(g, "take("); gen_args(g, 2); emit(g, ")"); break;
	case 36: emit(g, "group_by("); gen_args(g, 2); emit(g, ")"); break;
	case 37: emit(g, "sort_by("); gen_args(g, 2); emit(g, ")"); break;
	case 38: emit(g, "coroutine.wrap(function(x) coroutine.yield(x) return "); gen_expr(g); emit(g, " end)("); gen_expr(g); emit(g, ")"); break;
	case 39: emit(g, "tokenize_pii("); gen_expr(g); emit(g, " .. ' jane@example.org +44 20 7946 0958')"); break;
	case 40: emit(g, "detokenize_pii(tokenize_pii("); gen_expr(g); emit(g, "))"); break;
	case 41: emit(g, "pii.scan("); gen_expr(g); emit(g, ")"); break;
	/* the lazy globals (sandbox_env.c): raw access, listing, metatables, the encoder over them */
	case 43: emit(g, "rawget(_G, '%s')", GLOBALS[pick(g, NGLOBALS)]); break;
	case 44: emit(g, "rawset(_ENV, '%s', ", GLOBALS[pick(g, NGLOBALS)]); gen_expr(g); emit(g, ")"); break;
	case 45: emit(g, "select('#', next(_G, %s))", pick(g, 2) ? "nil" : "'math'"); break;
	case 46: emit(g, "getmetatable(_ENV)"); break;
	case 47: emit(g, "_G[%s]", pick(g, 2) ? "'nope_'" : "1"); break;
	case 48: emit(g, "json.encode({g = %s})", pick(g, 2) ? "_G" : "rawget(_ENV, 'os')"); break;
	default: emit(g, "%s(", VARS[6]); gen_args(g, 2); emit(g, ")"); break;
	}
}

static void gen_func(gen *g)
{
	emit(g, "function(a, ...) ");
	g->depth++;
	gen_block(g, 1 + (int)pick(g, 3));
	g->depth--;
	emit(g, " return ");
	gen_expr(g);
	emit(g, " end");
}

static void gen_expr(gen *g)
{
	static const char *const BIN[] = { "+", "-", "*", "/", "//", "%", "^", "..", "==", "~=", "<", "<=",
					   ">", ">=", "and", "or", "&", "|", "~", "<<", ">>" };
	static const char *const LIT[] = { "0", "1", "-1", "math.maxinteger", "math.mininteger", "-0.0",
					   "(0/0)", "math.huge", "0.5", "1e308", "2^53", "255", "nil", "true",
					   "false", "json.null", "{}", "{1, 2, 3}", "{x = 1, y = 'z'}", "...",
					   "string.rep('ab', 1000)", "#t" };
	if (g->depth > 6 || g->len > 6000) {
		emit(g, "%s", LIT[pick(g, 19)]);
		return;
	}
	g->depth++;
	switch (pick(g, 14)) {
	case 0: emit(g, "%s", LIT[pick(g, sizeof LIT / sizeof *LIT)]); break;
	case 1: emit(g, "%u", pick(g, 256) * pick(g, 256)); break;
	case 2: emit(g, "%s", STRS[pick(g, NSTRS)]); break;
	case 3: case 4: gen_var(g); break;
	case 5: emit(g, "("); gen_expr(g); emit(g, " %s ", BIN[pick(g, sizeof BIN / sizeof *BIN)]); gen_expr(g); emit(g, ")"); break;
	case 6: emit(g, "(%s", (const char *[]){ "-", "not ", "#", "~" }[pick(g, 4)]); gen_expr(g); emit(g, ")"); break;
	case 7: emit(g, "{"); gen_args(g, (int)pick(g, 4)); emit(g, pick(g, 2) ? ", k = " : ", [%u] = ", pick(g, 8)); gen_expr(g); emit(g, "}"); break;
	case 8: case 9: gen_call(g); break;
	case 10: emit(g, "select(2, pcall("); gen_func(g); emit(g, ", "); gen_expr(g); emit(g, "))"); break;
	case 11: gen_func(g); break;
	case 12: gen_var(g); emit(g, "["); gen_expr(g); emit(g, "]"); break;
	default: emit(g, "(load("); gen_expr(g); emit(g, ") or %s)", VARS[6]); break;
	}
	g->depth--;
}

static void gen_metatable(gen *g)
{
	static const char *const MM[] = { "__index", "__newindex", "__call", "__gc", "__close", "__eq", "__lt",
					  "__le", "__concat", "__len", "__tostring", "__add", "__unm", "__name" };
	emit(g, "setmetatable(%s, {", VARS[pick(g, NVARS)]);
	int n = 1 + (int)pick(g, 3);
	for (int i = 0; i < n; i++) {
		emit(g, "%s = ", MM[pick(g, sizeof MM / sizeof *MM)]);
		if (pick(g, 4) == 0)
			emit(g, "%s", VARS[pick(g, NVARS)]);
		else
			gen_func(g);
		emit(g, ", ");
	}
	emit(g, pick(g, 3) == 0 ? "__mode = 'k'})" : "})");
}

static void gen_stmt(gen *g)
{
	if (g->depth > 5 || g->len > 6000) {
		emit(g, "%s = %u\n", VARS[pick(g, NVARS)], pick(g, 100));
		return;
	}
	g->depth++;
	switch (pick(g, 23)) {
	case 0: case 1: gen_var(g); emit(g, " = "); gen_expr(g); emit(g, "\n"); break;
	case 2: emit(g, "local %s = ", VARS[pick(g, NVARS)]); gen_expr(g); emit(g, "\n"); break;
	case 3: emit(g, "if "); gen_expr(g); emit(g, " then\n"); gen_block(g, 2); emit(g, "else\n"); gen_block(g, 1); emit(g, "end\n"); break;
	case 4: emit(g, "for i = 1, %u do\n", pick(g, 200)); gen_block(g, 2); emit(g, "end\n"); break;
	case 5: emit(g, "do local k_ = 0 while k_ < %u do k_ = k_ + 1\n", pick(g, 100)); gen_block(g, 2); emit(g, "end end\n"); break;
	case 6: emit(g, "f = "); gen_func(g); emit(g, "\n"); break;
	case 7: emit(g, "pcall(function()\n"); gen_block(g, 3); emit(g, "end)\n"); break;
	case 8: { int l = g->labels++; emit(g, "do goto L%d\n", l); gen_stmt(g); emit(g, "::L%d:: end\n", l); break; }
	case 9: emit(g, "do local co = coroutine.create("); gen_func(g); emit(g, ") local ok_, r_ = coroutine.resume(co, "); gen_expr(g);
		emit(g, ") %s = r_ %s end\n", VARS[pick(g, NVARS)], pick(g, 2) ? "coroutine.close(co)" : ""); break;
	case 10: gen_metatable(g); emit(g, "\n"); break;
	case 11: emit(g, "do local x_ <close> = setmetatable({}, {__close = "); gen_func(g); emit(g, "})\n"); gen_block(g, 1); emit(g, "end\n"); break;
	case 12: emit(g, "pcall(error, "); gen_expr(g); emit(g, ")\n"); break;
	case 13: emit(g, "print("); gen_args(g, 2); emit(g, ")\n"); break;
	case 14: gen_call(g); emit(g, "\n"); break;
	case 15: emit(g, "t["); gen_expr(g); emit(g, "] = "); gen_expr(g); emit(g, "\n"); break;
	case 16: emit(g, "repeat\n"); gen_block(g, 1); emit(g, "until true\n"); break;
	case 17: emit(g, "xpcall(%s, function(m) %s = m end, ", VARS[6], VARS[pick(g, NVARS)]); gen_expr(g); emit(g, ")\n"); break;
	case 18: emit(g, "for k_, v_ in pairs(t) do "); gen_stmt(g); emit(g, " end\n"); break;
	case 19: emit(g, "%s = ", GLOBALS[pick(g, NGLOBALS)]); gen_expr(g); emit(g, "\n"); break;
	case 20: emit(g, "for k_, v_ in pairs(_G) do "); gen_stmt(g); emit(g, " end\n"); break;
	case 21: emit(g, "setmetatable(_G, {__index = "); gen_func(g); emit(g, "})\n"); break;
	default: emit(g, "s = s .. tostring("); gen_expr(g); emit(g, ")\n"); break;
	}
	g->depth--;
}

static void gen_block(gen *g, int n)
{
	for (int i = 0; i < n && g->i < g->n; i++)
		gen_stmt(g);
}

/* ---- the deadline signal ------------------------------------------------------------------------
 * The pool signals a worker (MB_SANDBOX_SIGNAL) at its execution's deadline, so that the hook
 * fires at the next instruction instead of at the next count of HOOK_COUNT instructions (each of
 * which may be a long copy). Runs here in-process, so a thread does the same. */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t target;
	uint64_t deadline_ns; /* 0: disarmed */
} dl = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };

static void *deadline_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&dl.mu);
	for (;;) {
		if (!dl.deadline_ns) {
			pthread_cond_wait(&dl.cv, &dl.mu);
			continue;
		}
		uint64_t now = mb_now_ns();
		if (now >= dl.deadline_ns) {
			pthread_kill(dl.target, MB_SANDBOX_SIGNAL);
			dl.deadline_ns = 0;
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t wait = dl.deadline_ns - now, ns = (uint64_t)ts.tv_nsec + wait % 1000000000u;
		ts.tv_sec += (time_t)(wait / 1000000000u + ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&dl.cv, &dl.mu, &ts);
	}
	return NULL;
}

static void deadline_arm(uint64_t at_ns)
{
	pthread_mutex_lock(&dl.mu);
	dl.deadline_ns = at_ns;
	pthread_cond_signal(&dl.cv);
	pthread_mutex_unlock(&dl.mu);
}

/* ---- checks ------------------------------------------------------------------------------------- */

static int valid_json(const char *s, size_t n, int want_object)
{
	json_error_t e;
	json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!j && strstr(e.text, "NUL byte in object key"))
		return 1; /* valid JSON ("\u0000" in a key) that jansson does not take */
	int ok = j && (!want_object || json_is_object(j));
	json_decref(j);
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!cfg.max_code_bytes) {
		char *args[] = { "fuzz", "--data-dir", "/tmp/moonbox-fuzz-sandbox", "--max-output-bytes", "4096",
				 "--max-result-bytes", "65536", "--max-notifications", "50", NULL };
		if (mb_config_load(&cfg, 9, args) != 0)
			FAIL("configuration");
		mb_json_global_init();
		if (mb_sandbox_global_init() != 0 || mb_sandbox_thread_init() != 0)
			FAIL("sandbox set-up");
		/* the PII policy and pii.scan/tokenize_pii/detokenize_pii with the built-in rules */
		char err[256];
		static unsigned char key[MB_PII_KEY_BYTES] = "moonbox fuzz key, not a secret.";
		mb_pii_detector *d = mb_pii_detector_new(NULL, err, sizeof err);
		if (!d)
			FAIL("pii detector: %s", err);
		mb_sandbox_pii_set(d, key);
		dl.target = pthread_self();
		pthread_t th;
		if (pthread_create(&th, NULL, deadline_thread, NULL) != 0)
			FAIL("deadline thread");
		pthread_detach(th);
	}
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	gen g = { .p = data + 1, .n = size - 1 };
	char *code;
	size_t code_len;
	if (mode & 1) {
		code = malloc(size);
		memcpy(code, data + 1, size - 1);
		code_len = size - 1;
		code[code_len] = 0;
	} else {
		emit(&g, "local a, b, c, t, u, s, f, n = 1, 'str', 2.5, {1, 'x', {y = 2}}, {}, '', print, nil\n");
		gen_block(&g, 64);
		emit(&g, "return %s, t\n", VARS[(mode >> 5) % NVARS]);
		code = g.out;
		code_len = g.len;
	}

	if (getenv("FUZZ_SANDBOX_PRINT")) /* to reproduce a finding outside the fuzzer */
		fprintf(stderr, "---- program (mode 0x%02x)\n%.*s\n----\n", mode, (int)code_len, code);
	static const uint64_t instr[] = { 50000, 200000, 1000000, 2000000 };
	uint64_t limit = instr[(mode >> 1) & 3];
	uint64_t mem = (uint64_t)8 << 20, timeout = 100;
	mb_budget b;
	mb_budget_init(&b, mem, limit, timeout);
	static const char ctx[] = "{\"data\":[1,2,{\"a\":\"b\",\"n\":null}],\"name\":\"jane@example.org\"}";
	mb_exec_request req = { .code = code, .code_len = code_len, .timeout_ms = timeout, .memory_bytes = mem,
				.instruction_limit = limit, .cfg = &cfg,
				.context_json = (mode & 8) ? ctx : NULL, .context_len = (mode & 8) ? sizeof ctx - 1 : 0,
				.pii_policy = (mode >> 4) & 1 };
	mb_exec_result res;
	uint64_t t0 = mb_now_ns();
	deadline_arm(b.deadline_ns);
	int rc = mb_sandbox_run(&req, &b, &res);
	deadline_arm(0);
	uint64_t ms = (mb_now_ns() - t0) / 1000000;

	if (rc != 0)
		FAIL("mb_sandbox_run returned %d: %s", rc, res.error ? res.error : "");
	mb_stop_reason stop = (mb_stop_reason)atomic_load(&b.stop);
	if (res.success) {
		if (res.error || !res.result_json || !valid_json(res.result_json, res.result_len, 0))
			FAIL("success with an error (%s) or without a valid JSON result (%.*s):\n%s",
			     res.error ? res.error : "none", (int)(res.result_len > 300 ? 300 : res.result_len),
			     res.result_json ? res.result_json : "(null)", code);
		if (stop != MB_STOP_NONE)
			FAIL("a tripped limit (%s) was swallowed: the run succeeded\n%s", mb_stop_name(stop), code);
	} else {
		static const char *const types[] = { "syntax", "runtime", "timeout", "memory", "instructions",
						     "cancelled", "result" };
		int known = 0;
		for (size_t i = 0; i < sizeof types / sizeof *types; i++)
			known |= res.error_type && strcmp(res.error_type, types[i]) == 0;
		if (!known || !res.error || !res.error[0])
			FAIL("failure with error type %s and message \"%s\"", res.error_type ? res.error_type : "(none)",
			     res.error ? res.error : "(none)");
		if (stop != MB_STOP_NONE && strcmp(res.error_type, mb_stop_name(stop)) != 0)
			FAIL("limit %s tripped but the error type is %s: %s\n%s", mb_stop_name(stop), res.error_type,
			     res.error, code);
	}
	if (!res.structured_json || !valid_json(res.structured_json, res.structured_json_len, 1))
		FAIL("structuredContent is not a JSON object: %.*s",
		     (int)(res.structured_json_len > 500 ? 500 : res.structured_json_len),
		     res.structured_json ? res.structured_json : "(none)");
	if (!res.structured_quoted || !valid_json(res.structured_quoted, res.structured_quoted_len, 0))
		FAIL("the text form of structuredContent is not a JSON value");
	if (res.memory_peak_bytes > mem)
		FAIL("peak memory %zu above the cap %llu", res.memory_peak_bytes, (unsigned long long)mem);
	/* after the limit trips, each pending __close handler still costs the one instruction whose
	 * hook raises again (7,000 of them were seen unwinding deep recursion): allow for that */
	if (res.instructions > 2 * limit + 10000)
		FAIL("%llu instructions with a limit of %llu", (unsigned long long)res.instructions,
		     (unsigned long long)limit);
	if (ms > timeout + 1500)
		FAIL("the run took %llu ms with a deadline of %llu ms (a C call that does not poll?)\n%s",
		     (unsigned long long)ms, (unsigned long long)timeout, code);
	if (b.mem_used != 0)
		FAIL("%zu bytes still charged to the budget after the run\n%s", b.mem_used, code);
	if (mb_budget_current() != NULL)
		FAIL("a budget is left current on the thread");
	mb_arena_stats st;
	mb_arena_get_stats(mb_arena_thread(), &st);
	if (st.live_blocks != 0)
		FAIL("%zu arena blocks live after the run", st.live_blocks);
	mb_exec_result_free(&res);
	free(code);
	return 0;
}
