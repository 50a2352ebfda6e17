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
 * The hook, the deadline signal, output capture and loading text under the budget are in
 * sandbox_core.c, below this file and the environment's files.
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
#include "utf8.h"

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
static int prelude_stub(lua_State *L);

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

/* The head of a successful result's structuredContent (mb_json_object writes the fields in the
 * order mb_exec_result_shape gives them) and its estimate, made once by mb_sandbox_global_init. */
static const char result_head[] = "{\"success\":true,\"result\":";
static uint64_t result_head_tokens;

int mb_sandbox_global_init(void)
{
	const char *stall = getenv("MOONBOX_TEST_STALL_MS");
	test_stall_ms = stall ? strtol(stall, NULL, 10) : 0;
	if (test_stall_ms < 0 || test_stall_ms > 600000)
		test_stall_ms = 0;
	if (mb_sandbox_core_init() != 0 || mb_sandbox_env_init() != 0)
		return -1;
	result_head_tokens = mb_tokest(result_head, sizeof result_head - 1);

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
	/* each exported name is a lazy global: its stub, made on first touch (sandbox_env.c) */
	for (int i = 0; i < prelude_count; i++)
		for (char **e = prelude[i].exports; *e; e++)
			if (mb_sandbox_env_add_stub(*e, prelude_stub, i) != 0) {
				fprintf(stderr, "moonbox: prelude %s: cannot export %s\n", prelude[i].name, *e);
				return -1;
			}
	return 0;
}

int mb_sandbox_thread_init(void)
{
	mb_sandbox_set_running(NULL);
	return 0;
}

/* ---- running --------------------------------------------------------------------------- */

/* Message handler: keeps the error value and records a short traceback, without calling any
 * metamethod of the error object. */
static int sb_msgh(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (c && mb_budget_check(c->b) == MB_STOP_NONE && !c->traceback) {
		mb_sandbox_skills_explain(L, 1); /* skills.boom() of a skill that does not exist */
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

/* Runs inside lua_pcall while preparing: the restricted environment, whose globals (the prelude
 * stubs too, registered by mb_sandbox_global_init) are made on first touch. */
static int sb_setup(lua_State *L)
{
	if (mb_sandbox_env_open(L) != 0)
		return luaL_error(L, "sandbox: environment setup failed");
	return 0;
}

/* Runs inside lua_pcall when the execution starts: context_vars become globals. */
/* A context variable named like a global the sandbox provides would replace it (`json` as a
 * context variable makes json.encode "attempt to index a number value"): refused, naming every
 * such key and how to rename, rather than renamed - the code was written for that name, and
 * whichever meaning a rename kept, half of the code would get the other one. */
static void refuse_reserved(lua_State *L, int t)
{
	char names[256];
	size_t used = 0;
	int n = 0;
	lua_pushnil(L);
	while (lua_next(L, t)) {
		lua_pop(L, 1);
		size_t len;
		if (lua_type(L, -1) != LUA_TSTRING)
			continue;
		const char *k = lua_tolstring(L, -1, &len);
		if (!mb_sandbox_env_reserved(k, len))
			continue;
		/* (reserved names are short: each fits, and the list stops where the room does) */
		if (used + len + 5 < sizeof names) {
			if (n) {
				memcpy(names + used, ", ", 2);
				used += 2;
			}
			names[used++] = '"';
			memcpy(names + used, k, len);
			used += len;
			names[used++] = '"';
		}
		n++;
	}
	if (n == 0)
		return;
	names[used] = 0;
	luaL_error(L, "invalid arguments: context_vars %s %s the name%s of %s the sandbox provides "
		      "(json, re, mcp, servers, skills, pii, string, table, the base functions, the "
		      "workspace and data helpers) and would replace %s; rename %s (for example "
		      "json_data, or put your values in one table: context_vars = {ctx = {...}})",
		   names, n == 1 ? "is" : "are", n == 1 ? "" : "s", n == 1 ? "a global" : "globals",
		   n == 1 ? "it" : "them", n == 1 ? "it" : "them");
}

static int sb_context(lua_State *L)
{
	mb_sandbox_ctx *c = lua_touserdata(L, 1);
	char err[MB_ERR_MAX];
	if (mb_json_decode(L, c->req->context_json, c->req->context_len, json_limits(c), err,
			   sizeof err) != 0)
		return luaL_error(L, "context_vars: %s", err);
	if (!lua_istable(L, -1))
		return luaL_error(L, "context_vars must be an object");
	refuse_reserved(L, lua_gettop(L));
	lua_pushglobaltable(L);
	lua_pushnil(L);
	while (lua_next(L, -3)) {
		if (lua_type(L, -2) == LUA_TSTRING) {
			lua_pushvalue(L, -2);
			lua_insert(L, -2);
			lua_rawset(L, -4); /* (no lazy global has its name: refuse_reserved) */
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
	size_t keep = utf8_cut(msg, n, MAX_ERROR_BYTES - (size_t)t);
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
		char jerr[MB_ERR_MAX];
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

/* A syntax error in code that looks like Python or JavaScript gets a hint, and so does a
 * run-time error that names a builtin of those languages (lang_hint.h); fenced code's tag
 * decides when no form does. */
static void add_lang_hint(mb_exec_result *res, const char *code, size_t len,
			  const mb_lang_fence *fence)
{
	if (!res->error_type || !res->error)
		return;
	const char *hint = NULL;
	if (strcmp(res->error_type, "syntax") == 0) {
		hint = mb_lang_syntax_hint(code, len, res->error);
		if (!hint && fence)
			hint = mb_lang_tag_hint(fence->tag, fence->tag_len);
	} else if (strcmp(res->error_type, "runtime") == 0) {
		hint = mb_lang_runtime_hint(code, len, res->error);
	}
	if (!hint)
		return;
	size_t n = strlen(res->error) + strlen(hint) + 16;
	char *msg = malloc(n);
	if (!msg)
		return;
	snprintf(msg, n, "%s (hint: %s)", res->error, hint);
	set_error(res, res->error_type, msg);
	free(msg);
}

/* Code sent inside a Markdown fence (```lua ... ```, which models often write) runs without
 * the fence: a copy with the two fence lines blanked, so that line numbers stay the agent's.
 * Returns the copy (malloc'd; the caller frees it) or NULL when the code is not fenced (or
 * memory ran out: then it runs as sent, and Lua's error says what is wrong). */
static char *unfence(mb_sandbox_ctx *c, const char *code, size_t len, mb_lang_fence *f)
{
	if (!mb_lang_fence_find(code, len, f))
		return NULL;
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return NULL;
	memcpy(copy, code, len);
	memset(copy + f->open_start, ' ', f->open_end - f->open_start);
	memset(copy + f->close_start, ' ', f->close_end - f->close_start);
	mb_sandbox_ctx_note(c, "the code came inside a Markdown fence (```); it ran without the "
			       "fence lines - send the Lua code alone");
	return copy;
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
	char err[MB_ERR_MAX];
	size_t len = 0;
	mb_json_limits lim = *json_limits(c);
	lim.root_name = "result";
	lim.max_output_bytes = (size_t)c->req->cfg->max_result_bytes;
	lim.output_limit_name = "max_result_bytes";
	lim.max_nodes = (uint64_t)c->req->cfg->max_result_nodes;
	lim.node_limit_name = "max_result_nodes";
	char *j = mb_json_encode(L, -1, &lim, MB_JSON_LENIENT, &len, err, sizeof err);
	if (!j && (strstr(err, "max_result_bytes") || strstr(err, "max_result_nodes"))) {
		char msg[MB_ERR_MAX + 64]; /* a short prefix and err */
		snprintf(msg, sizeof msg, "result is too large: %s", err);
		set_error(res, "result", msg);
		return;
	}
	if (!j) {
		if (mb_budget_check(c->b) != MB_STOP_NONE)
			return; /* reported from the budget */
		char msg[MB_ERR_MAX + 64];
		snprintf(msg, sizeof msg, "result cannot be returned as JSON: %s", err);
		set_error(res, "result", msg);
		return;
	}
	res->result_json = j;
	res->result_len = len;
	res->success = 1;
	res->io.result_tokens = mb_tokest(j, len);
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
	mb_sandbox_seen_free(&c->pii_seen);
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
	mb_sandbox_ctx_bind(L, c);
	lua_pushcfunction(L, sb_msgh);
	sb->msgh = lua_gettop(L);
	lua_pushcfunction(L, sb_setup);
	mb_budget_set_current(&sb->prep);
	/* Nothing made during setup is garbage: collecting while building the environment is
	 * wasted work. The memory cap still applies. */
	lua_gc(L, LUA_GCSTOP);
	int status = lua_pcall(L, 0, 0, 0);
	lua_gc(L, LUA_GCRESTART);
	/* Restarted, the collector would begin a cycle at the very next allocation and walk the
	 * whole environment, all of it alive (about 20K instructions, most of a `return 1+1`'s
	 * load). It starts instead once the code has allocated as much again as the environment
	 * holds: the pause Lua itself leaves after a cycle (setpause, pause 200%), so the pace
	 * of collection from there on is the stock one. */
	lua_gc(L, LUA_GCSTEP, -(int)(sb->prep.mem_used >> 10));
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

void mb_sandbox_close_deferred(mb_sandbox *sb)
{
	if (!sb)
		return;
	mb_budget *b = sb->aud.b;
	size_t held = b->mem_used;
	uint64_t t0 = mb_now_ns();
	mb_budget_set_current(b);
	close_state(sb);
	mb_budget_set_current(NULL);
	mb_log(MB_LOG_DEBUG, "sandbox: closed a state of %zu MiB in %.1f ms, after its answer",
	       held >> 20, (double)(mb_now_ns() - t0) / 1e6);
}

int mb_sandbox_run_prepared(mb_sandbox *sb, const mb_exec_request *req, mb_budget *b,
			    mb_exec_result *res)
{
	return mb_sandbox_run_prepared_defer(sb, req, b, res, NULL);
}

int mb_sandbox_run_prepared_defer(mb_sandbox *sb, const mb_exec_request *req, mb_budget *b,
				  mb_exec_result *res, mb_sandbox **deferred)
{
	if (deferred)
		*deferred = NULL;
	memset(res, 0, sizeof *res);
	uint64_t t0 = mb_now_ns();
	const mb_config *cfg = req->cfg;
	mb_codec_hash_hex(req->code, req->code_len, res->code_hash); /* for the history, off the loop */
	if (!sb) {
		set_error(res, "memory", "sandbox: out of host memory");
		res->output = xstrdup("");
		mb_exec_result_shape(res);
		return -1;
	}
	lua_State *L = sb->L;
	mb_sandbox_ctx *c = &sb->c;
	int status;
	c->req = req;
	c->cfg = cfg;
	c->b = b;
	c->io = &res->io;

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

	/* tokens the code was given (sandbox_seen.c) */
	mb_sandbox_seen_add(&c->pii_seen, req->code, req->code_len);
	mb_sandbox_seen_add(&c->pii_seen, req->context_json, req->context_json ? req->context_len : 0);
	if (req->context_json && req->context_len) {
		if (!req->context_internal)
			mb_io_add(&res->io, MB_IO_CONTEXT, req->context_json, req->context_len);
		lua_pushcfunction(L, sb_context);
		lua_pushlightuserdata(L, c);
		if (lua_pcall(L, 1, 0, sb->msgh) != LUA_OK) {
			describe_error(L, c, res, "runtime");
			goto finish;
		}
	}
	if (req->code_len > (size_t)cfg->max_code_bytes) {
		char msg[MB_ERR_MAX];
		snprintf(msg, sizeof msg, "code is too large: %zu bytes, max_code_bytes=%lld",
			 req->code_len, (long long)cfg->max_code_bytes);
		set_error(res, "syntax", msg);
		goto finish;
	}
	mb_lang_fence fence;
	char *unfenced = unfence(c, req->code, req->code_len, &fence);
	status = mb_sandbox_load_text(L, unfenced ? unfenced : req->code, req->code_len, "=code");
	if (status != LUA_OK) {
		describe_error(L, c, res, status == LUA_ERRSYNTAX ? "syntax" : "runtime");
		add_lang_hint(res, unfenced ? unfenced : req->code, req->code_len,
			      unfenced ? &fence : NULL);
		free(unfenced);
		goto finish;
	}
	free(unfenced);
	status = lua_pcall(L, 0, LUA_MULTRET, sb->msgh);
	if (status == LUA_OK && mb_budget_check(b) == MB_STOP_NONE)
		status = mb_sandbox_pii_values(L, sb->msgh, sb->msgh); /* pii_policy */
	if (status == LUA_OK && mb_budget_check(b) == MB_STOP_NONE) {
		capture_result(L, c, sb->msgh, res);
	} else if (status != LUA_OK) {
		describe_error(L, c, res, "runtime");
		if (mb_budget_check(b) == MB_STOP_NONE)
			add_lang_hint(res, req->code, req->code_len, NULL);
		res->traceback = c->traceback;
		c->traceback = NULL;
	}

finish:
	test_stall(req);
	if (mb_budget_check(b) != MB_STOP_NONE) {
		/* A limit decides the outcome, whatever the script made of it. */
		char msg[MB_ERR_MAX];
		mb_budget_message(b, msg, sizeof msg);
		set_error(res, mb_stop_name((mb_stop_reason)atomic_load(&b->stop)), msg);
		free(res->traceback);
		res->traceback = NULL;
		free(res->result_json);
		res->result_json = NULL;
	}
	mb_sandbox_set_running(NULL);
	if (c->note_len)
		res->note = xstrdup(c->note);
	res->instructions = b->instructions;
	res->output = mb_sandbox_output_join(c, &res->output_len);
	mb_sandbox_pii_finish(c, res); /* policy on output and error texts; found values out */
	if (deferred && b->mem_used >= MB_SANDBOX_DEFER_CLOSE_BYTES)
		*deferred = sb; /* closed by the caller once the answer is out */
	else
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

void mb_sandbox_thread_exit(void)
{
	mb_sandbox_pii_thread_exit();
}

#define FIELD_STR(k, v, len) {.key = k, .type = MB_JF_STRING, .s = (v), .n = (len)}

static char *put_u64(char *p, uint64_t v)
{
	char d[20];
	int n = 0;
	do
		d[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	while (n)
		*p++ = d[--n];
	return p;
}

static char *put_str(char *p, const char *s)
{
	size_t n = strlen(s);
	memcpy(p, s, n);
	return p + n;
}

uint64_t mb_exec_io_saved(const mb_exec_io *io)
{
	uint64_t in = 0;
	for (int i = 0; i < MB_IO_NSOURCES; i++)
		if (i != MB_IO_CONTEXT) /* the model wrote them: they were in its context already */
			in += io->in_tokens[i];
	return in > io->out_tokens ? in - io->out_tokens : 0;
}

/* out: the structuredContent text just made. A result's own estimate was made by the worker that
 * made the result (result_tokens): here only the frame around it is read. */
static void io_out(mb_exec_result *res)
{
	mb_exec_io *io = &res->io;
	const char *sj = res->structured_json;
	size_t sn = sj ? res->structured_json_len : 0;
	const size_t hn = sizeof result_head - 1;
	io->out_bytes = sn;
	if (res->success && res->result_json && io->result_tokens && sn > hn + res->result_len &&
	    memcmp(sj, result_head, hn) == 0)
		io->out_tokens = (result_head_tokens ? result_head_tokens : mb_tokest(sj, hn)) +
				 io->result_tokens +
				 mb_tokest(sj + hn + res->result_len, sn - hn - res->result_len);
	else
		io->out_tokens = sj ? mb_tokest(sj, sn) : 0;
}

size_t mb_exec_result_meta(const mb_exec_result *res, char buf[MB_EXEC_META_MAX])
{
	const mb_exec_io *io = &res->io;
	uint64_t bytes = 0, tokens = 0;
	for (int i = 0; i < MB_IO_NSOURCES; i++) {
		bytes += io->in_bytes[i];
		tokens += io->in_tokens[i];
	}
	char *p = buf;
	p = put_u64(put_str(p, "{\"dev.moonbox/context\":{\"bytes_in\":"), bytes);
	p = put_u64(put_str(p, ",\"tokens_in\":"), tokens);
	p = put_u64(put_str(p, ",\"bytes_out\":"), io->out_bytes);
	p = put_u64(put_str(p, ",\"tokens_out\":"), io->out_tokens);
	p = put_u64(put_str(p, ",\"tokens_saved\":"), mb_exec_io_saved(io));
	if (bytes) {
		p = put_str(p, ",\"in\":{");
		int first = 1;
		for (int i = 0; i < MB_IO_NSOURCES; i++) {
			if (!io->in_bytes[i])
				continue;
			p = put_str(p, first ? "\"" : ",\"");
			first = 0;
			p = put_str(p, mb_io_source_name((mb_io_source)i));
			p = put_u64(put_str(p, "\":{\"bytes\":"), io->in_bytes[i]);
			p = put_u64(put_str(p, ",\"tokens\":"), io->in_tokens[i]);
			*p++ = '}';
		}
		*p++ = '}';
	}
	*p++ = '}';
	*p++ = '}';
	return (size_t)(p - buf);
}

void mb_exec_result_shape(mb_exec_result *res)
{
	free(res->structured_json);
	free(res->structured_quoted);
	res->structured_json = res->structured_quoted = NULL;
	const char *err = res->error ? res->error : "error";
	const char *type = res->error_type ? res->error_type : "runtime";
	mb_json_field f[10];
	size_t n = 0;
	f[n++] = (mb_json_field){.key = "success", .type = MB_JF_BOOL, .i = res->success};
	if (res->success && res->result_json)
		f[n++] = (mb_json_field){.key = "result", .type = MB_JF_RAW, .s = res->result_json,
					  .n = res->result_len};
	else
		f[n++] = (mb_json_field){.key = "result", .type = MB_JF_NULL};
	f[n++] = (mb_json_field)FIELD_STR("output", res->output ? res->output : "",
					  res->output ? res->output_len : 0);
	if (res->note)
		f[n++] = (mb_json_field)FIELD_STR("note", res->note, strlen(res->note));
	if (!res->success) {
		f[n++] = (mb_json_field)FIELD_STR("error", err, strlen(err));
		f[n++] = (mb_json_field)FIELD_STR("error_type", type, strlen(type));
		if (res->traceback)
			f[n++] = (mb_json_field)FIELD_STR("traceback", res->traceback,
							  strlen(res->traceback));
	}
	f[n++] = (mb_json_field){.key = "execution_time_ms", .type = MB_JF_REAL,
				  .d = res->execution_time_ms};
	f[n++] = (mb_json_field){.key = "instructions", .type = MB_JF_INT,
				  .i = (long long)res->instructions};
	f[n++] = (mb_json_field){.key = "memory_peak_bytes", .type = MB_JF_INT,
				  .i = (long long)res->memory_peak_bytes};
	res->structured_json = mb_json_object(f, n, &res->structured_json_len);
	if (res->structured_json)
		res->structured_quoted = mb_json_quote(res->structured_json, res->structured_json_len,
							 &res->structured_quoted_len);
	if (!res->structured_quoted) {
		free(res->structured_json);
		res->structured_json = NULL;
	}
	io_out(res);
}

void mb_exec_result_free(mb_exec_result *res)
{
	free(res->structured_json);
	free(res->structured_quoted);
	free(res->result_json);
	free(res->output);
	free(res->error);
	free(res->traceback);
	free(res->note);
	for (size_t i = 0; i < res->pii_nfound; i++)
		free(res->pii_found[i].value);
	free(res->pii_found);
	memset(res, 0, sizeof *res);
}
