/* sandbox_env.c - the restricted environment: what sandbox code may see.
 *
 * Built by adding, not removing: only base, string, table, math, utf8, coroutine and four os
 * functions are put in a state (filled from a record of the stock libraries read once per
 * process, below), and every function that could escape, swallow a tripped limit or run
 * unbounded inside C is replaced:
 *   - pcall, xpcall, coroutine.resume/close/wrap re-raise a tripped limit after the protected call;
 *   - guards for Lua bugs fixed after 5.4.4 (docs/security.md): coroutine.close refuses a coroutine
 *     suspended inside xpcall, setmetatable keeps replaced metatables marked and turns on the
 *     __concat guard (sandbox.c), utf8.codes is the fixed iterator;
 *   - load takes text only, from a string (no reader functions), with a size cap;
 *   - setmetatable refuses __gc (finalizers run with hooks off, also inside lua_close);
 *   - collectgarbage answers "count" only; print is captured; warn, dofile, loadfile are absent;
 *   - string.dump is gone (also through the string metatable, which is locked); string.rep
 *     refuses the empty-string trick; find/match/gmatch/gsub are the budget-aware matcher;
 *   - table.sort, move, insert and remove are reimplemented with budget polls, since __len can
 *     make the stock versions loop 2^62 times inside C.
 * Then json, re and mcp (log, progress) are added, and the other files' globals (skills, PII,
 * workspace, servers, the prelude stubs). All of it but the string library and `next` is built
 * lazily, on a name's first touch, and whole as soon as code could list or inspect the globals
 * (below, "the lazy environment"). docs/sandbox.md is the reference for agents.
 */
#include <lauxlib.h>
#include <lualib.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"
#include "lpattern.h"
#include "sandbox_int.h"
#include "workspace.h"

#define POLL_EVERY 1024
#define MAX_STRING_BYTES ((size_t)0x7fffffff)  /* Lua 5.4's own limit for string.rep */
#define MAX_QUOTED_BYTES (1 << 18) /* 1 MiB came too close to the grace (docs/security.md) */
#define MAX_DATE_FORMAT 1024

/* ---- protected calls that cannot swallow a tripped limit -------------------------------- */

static int finish_pcall(lua_State *L, int status, lua_KContext extra)
{
	mb_budget *b = mb_budget_of(L);
	if (b)
		b->hook_raised = 0; /* a guard error ends here, if it went no further */
	mb_budget_poll(L);
	if (status != LUA_OK && status != LUA_YIELD) {
		lua_pushboolean(L, 0);
		lua_pushvalue(L, -2);
		return 2;
	}
	return lua_gettop(L) - (int)extra;
}

/* Inside a coroutine pcall does not nest C calls (Lua runs it as a continuation, and an error
 * unwinds to lua_resume, which resumes the pcall's caller from there), so neither Lua's limit of
 * 200 C calls nor max_c_stack_kb bounds how deep protected calls go: `f = function() pcall(f)
 * pcall(f) end` in a coroutine went hundreds of thousands of levels deep, and unwinding them at
 * a limit cost Lua a walk of the whole call chain per level (luaD_shrinkstack, findpcall): the
 * worker ran on for seconds after its deadline (found by fuzz_sandbox; security/cstack.test.mjs). So a
 * coroutine counts its pcalls and xpcalls in flight (a weak-keyed registry table; the main
 * thread is bounded by the C limits) and refuses more than MAX_PCALL_DEPTH, as deep as the main
 * thread can go. */
#define MAX_PCALL_DEPTH 200
static const char pcall_depth_key = 0;

/* Adds delta to the count of L's own thread when it is a coroutine; returns the new count (0 on
 * the main thread). Needs 4 free slots. */
static lua_Integer pcall_depth_add(lua_State *L, lua_Integer delta)
{
	if (lua_pushthread(L)) { /* the main thread */
		lua_pop(L, 1);
		return 0;
	}
	mb_sandbox_registry_weak(L, &pcall_depth_key);
	lua_pushvalue(L, -2);
	lua_rawget(L, -2);
	lua_Integer n = lua_tointeger(L, -1) + delta;
	lua_pop(L, 1);
	lua_pushvalue(L, -2);
	if (n > 0)
		lua_pushinteger(L, n);
	else
		lua_pushnil(L);
	lua_rawset(L, -3);
	lua_pop(L, 2);
	return n;
}

static void pcall_enter(lua_State *L)
{
	luaL_checkstack(L, 5, "pcall");
	if (pcall_depth_add(L, 1) > MAX_PCALL_DEPTH) {
		pcall_depth_add(L, -1);
		luaL_error(L, "pcall/xpcall nested more than %d deep in a coroutine in this sandbox",
			   MAX_PCALL_DEPTH);
	}
}

static int finish_pcall_counted(lua_State *L, int status, lua_KContext extra)
{
	luaL_checkstack(L, 5, "pcall");
	pcall_depth_add(L, -1);
	return finish_pcall(L, status, extra);
}

static int sb_pcall(lua_State *L)
{
	luaL_checkany(L, 1);
	mb_budget_cstack_check(L);
	mb_budget_poll(L);
	pcall_enter(L);
	lua_pushboolean(L, 1);
	lua_insert(L, 1);
	int status = lua_pcallk(L, lua_gettop(L) - 2, LUA_MULTRET, 0, 0, finish_pcall_counted);
	return finish_pcall_counted(L, status, 0);
}

/* The user's message handler, called only while no limit has tripped. An error raised by the
 * count hook runs the handler before unwinding, while Lua still has hooks disabled, so a looping
 * handler would never be interrupted: once the budget has tripped the handler is skipped. So is
 * it for the error the call hook raises (the __concat guard, hook_raised): no limit has tripped
 * then, and the handler ran with no count hook and no deadline. */
static int sb_xpcall_handler(lua_State *L)
{
	mb_budget *b = mb_budget_of(L);
	if (b && b->hook_raised) {
		b->hook_raised = 0;
		return 1;
	}
	if (b && mb_budget_check(b) != MB_STOP_NONE)
		return 1;
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* Lua before 5.4.8 keeps a coroutine's message handler (the position of xpcall's handler in its
 * stack) when coroutine.close runs its pending __close handlers, whose locals overwrite that
 * slot (upstream 3fe7be95). An error raised there then calls whatever value sits in the slot as
 * the handler; raised by the count hook at a limit, it runs with hooks off: a function stored in
 * that local looped forever and its worker thread never came back. So the sandbox counts, per
 * coroutine, the xpcalls it is inside (a weak-keyed registry table), and coroutine.close refuses
 * a coroutine suspended inside one. */
#define CLOSE_GUARD (LUA_VERSION_RELEASE_NUM < 50408)
static const char xpcall_depth_key = 0;
static const char errerr_key = 0;

/* Adds delta to the count of the thread at idx (delta 0: reads it). Needs 4 free slots. */
static lua_Integer xpcall_depth_add(lua_State *L, int idx, lua_Integer delta)
{
	idx = lua_absindex(L, idx);
	lua_rawgetp(L, LUA_REGISTRYINDEX, &xpcall_depth_key);
	lua_pushvalue(L, idx);
	lua_pushvalue(L, -1);
	lua_rawget(L, -3);
	lua_Integer n = lua_tointeger(L, -1) + delta;
	lua_pop(L, 1);
	if (delta == 0) {
		lua_pop(L, 2);
		return n;
	}
	if (n > 0)
		lua_pushinteger(L, n);
	else
		lua_pushnil(L);
	lua_rawset(L, -3);
	lua_pop(L, 1);
	return n;
}

static void xpcall_depth_self(lua_State *L, lua_Integer delta)
{
	if (!CLOSE_GUARD)
		return;
	luaL_checkstack(L, 5, "xpcall");
	lua_pushthread(L);
	xpcall_depth_add(L, -1, delta);
	lua_pop(L, 1);
}

static int finish_xpcall(lua_State *L, int status, lua_KContext extra)
{
	xpcall_depth_self(L, -1);
	return finish_pcall_counted(L, status, extra);
}

static int sb_xpcall(lua_State *L)
{
	int n = lua_gettop(L);
	luaL_checktype(L, 2, LUA_TFUNCTION);
	mb_budget_poll(L);
	mb_budget_cstack_check(L);
	pcall_enter(L);
	xpcall_depth_self(L, 1);
	lua_pushvalue(L, 2);
	lua_pushcclosure(L, sb_xpcall_handler, 1);
	lua_replace(L, 2);
	lua_pushboolean(L, 1);
	lua_pushvalue(L, 1);
	lua_rotate(L, 3, 2);
	int status = lua_pcallk(L, n - 2, LUA_MULTRET, 2, 2, finish_xpcall);
	return finish_xpcall(L, status, 2);
}

/* coroutines an error raised inside a hook killed (hooks off for good): weak keys */
static const char hooks_off_key = 0;

/* Calls the original function in upvalue 1 with all arguments, under lua_pcall so that the
 * running-thread marker is always restored, then re-raises errors and tripped limits. co: the
 * coroutine it runs on, argument 1 (or NULL). */
static int call_original_on(lua_State *L, lua_State *co)
{
	mb_budget_poll(L);
	mb_budget_cstack_check(L);
	lua_State *prev = mb_sandbox_running();
	int base = 0;
	if (co) {
		mb_sandbox_sync_hook(co); /* a coroutine made before the __concat guard was on */
		mb_sandbox_set_running(co);
		lua_pushvalue(L, 1); /* co stays anchored through the call (below) */
		lua_insert(L, 1);
		base = 1;
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, base + 1);
	int status = lua_pcall(L, lua_gettop(L) - base - 1, LUA_MULTRET, 0);
	mb_budget *b = mb_budget_of(L);
	if (b && b->hook_raised) {
		/* a guard error on co ended at its resume, with no handler. When it killed co, co
		 * still has hooks off (Lua restores them only where a pcall catches the error):
		 * coroutine.close would run its pending __close handlers unhooked */
		b->hook_raised = 0;
		if (co && lua_status(co) != LUA_OK && lua_status(co) != LUA_YIELD) {
			luaL_checkstack(L, 4, "resume");
			mb_sandbox_registry_weak(L, &hooks_off_key);
			lua_pushvalue(L, 1);
			lua_pushboolean(L, 1);
			lua_rawset(L, -3);
			lua_pop(L, 1);
		}
	}
	mb_sandbox_set_running(prev);
	mb_sandbox_sync_hook(L); /* the coroutine may have turned it on */
	mb_budget_poll(L);
	if (status != LUA_OK)
		return lua_error(L);
	return lua_gettop(L) - base;
}

static int sb_resume(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);
	luaL_argexpected(L, co, 1, "coroutine");
	return call_original_on(L, co);
}

static int sb_close(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);
	luaL_argexpected(L, co, 1, "coroutine");
	if (CLOSE_GUARD && lua_status(co) == LUA_YIELD && xpcall_depth_add(L, 1, 0) > 0)
		return luaL_error(L, "cannot close a coroutine suspended inside xpcall in this sandbox "
				     "(Lua before 5.4.8 can run a stale message handler with hooks off: "
				     "upstream 3fe7be95)");
	luaL_checkstack(L, 4, "coroutine.close");
	int hooks_off = 0;
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &hooks_off_key) == LUA_TTABLE) { /* made by a guard error */
		lua_pushvalue(L, 1);
		hooks_off = lua_rawget(L, -2) != LUA_TNIL;
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	if (hooks_off)
		return luaL_error(L, "cannot close a coroutine that the __concat guard stopped in this "
				     "sandbox (its __close handlers would run with hooks off)");
	/* its pending __close handlers run on co: the deadline signal must re-arm co's hook */
	return call_original_on(L, co);
}

/* coroutine.wrap: the stock one resumes from C without our wrapper; rebuild it on resume. */
static int sb_wrap_call(lua_State *L)
{
	lua_pushvalue(L, lua_upvalueindex(2)); /* the coroutine */
	lua_insert(L, 1);
	lua_pushvalue(L, lua_upvalueindex(1)); /* our resume */
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	if (!lua_toboolean(L, 1)) {
		if (lua_type(L, 2) == LUA_TSTRING) {
			luaL_where(L, 1);
			lua_insert(L, 2);
			lua_concat(L, 2);
		}
		lua_settop(L, 2);
		return lua_error(L);
	}
	return lua_gettop(L) - 1;
}

static int sb_wrap(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TFUNCTION);
	lua_State *co = lua_newthread(L);
	lua_pushvalue(L, 1);
	lua_xmove(L, co, 1);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, -2);
	lua_pushcclosure(L, sb_wrap_call, 2);
	return 1;
}

/* ---- base ---------------------------------------------------------------------------- */

static int sb_load(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (lua_type(L, 1) != LUA_TSTRING)
		return luaL_error(L, "load: only string chunks are allowed in the sandbox");
	size_t len;
	const char *s = lua_tolstring(L, 1, &len);
	const char *name = luaL_optstring(L, 2, s);
	const char *mode = luaL_optstring(L, 3, "t");
	int env = !lua_isnone(L, 4) ? 4 : 0;
	if (!strchr(mode, 't')) {
		luaL_pushfail(L);
		lua_pushfstring(L, "attempt to load a text chunk (mode is '%s'); binary chunks are not "
				   "allowed in the sandbox", mode);
		return 2;
	}
	if (len > (size_t)c->cfg->max_code_bytes) {
		luaL_pushfail(L);
		lua_pushfstring(L, "load: chunk is too large: %d bytes, max_code_bytes=%d", (int)len,
				(int)c->cfg->max_code_bytes);
		return 2;
	}
	int status = mb_sandbox_load_text(L, s, len, name);
	mb_budget_poll(L);
	if (status != LUA_OK) {
		luaL_pushfail(L);
		lua_insert(L, -2);
		return 2;
	}
	if (env) {
		lua_pushvalue(L, env);
		if (!lua_setupvalue(L, -2, 1))
			lua_pop(L, 1);
	}
	return 1;
}

/* Upvalue 2: a weak-keyed table, table -> the metatable given to it after it had one. Lua up to
 * 5.4.8 visits an all-weak table (__mode "kv") once in a collection's propagate phase and never
 * again, so a metatable set on it after that visit was not marked and was freed while in use
 * (upstream 1b0f943d: getmetatable returned freed memory). Each table that has had a metatable
 * keeps its next one in that table too, and the entry marks it for as long as the table lives.
 * Tables getting their first metatable, the usual case, pay one lookup. */
static int sb_setmetatable(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	mb_sandbox_env_expand(L, 1); /* the lazy globals: made whole, then as before */
	luaL_argexpected(L, lua_type(L, 2) == LUA_TNIL || lua_type(L, 2) == LUA_TTABLE, 2, "nil or table");
	if (lua_type(L, 2) == LUA_TTABLE) {
		lua_pushliteral(L, "__gc");
		if (lua_rawget(L, 2) != LUA_TNIL)
			return luaL_error(L, "setmetatable: __gc metamethods are not allowed in the sandbox");
		lua_pop(L, 1);
		/* the only way sandbox code can define __concat: turn the guard on (sandbox.c) */
		if (!(lua_gethookmask(L) & LUA_MASKCALL))
			mb_sandbox_hook_calls(L);
	}
	lua_settop(L, 2);
	int had = lua_getmetatable(L, 1);
	if (had)
		lua_pop(L, 1);
	lua_pushvalue(L, 1);
	if (had || lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) {
		lua_settop(L, 2);
		lua_pushvalue(L, 1);
		if (lua_isnil(L, 2))
			lua_pushboolean(L, 1); /* had one: anchor whatever comes next */
		else
			lua_pushvalue(L, 2);
		lua_rawset(L, lua_upvalueindex(2));
	}
	lua_settop(L, 2);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, 2, 1);
	return 1;
}

static int sb_collectgarbage(lua_State *L)
{
	const char *opt = luaL_optstring(L, 1, "collect");
	if (strcmp(opt, "count") != 0)
		return luaL_error(L, "collectgarbage: only \"count\" is available in the sandbox");
	int kb = lua_gc(L, LUA_GCCOUNT), b = lua_gc(L, LUA_GCCOUNTB);
	lua_pushnumber(L, (lua_Number)kb + (lua_Number)b / 1024);
	return 1;
}

static int sb_print(lua_State *L)
{
	mb_budget_cstack_check(L); /* __tostring */
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	int n = lua_gettop(L);
	if (c->req && c->req->pii_policy) {
		/* the whole line is scanned before it is captured (and maybe cut), so the cut can
		 * never leave half of a value behind */
		luaL_Buffer b;
		luaL_buffinit(L, &b);
		for (int i = 1; i <= n; i++) {
			if (i > 1)
				luaL_addchar(&b, '\t');
			luaL_tolstring(L, i, NULL);
			luaL_addvalue(&b);
		}
		luaL_pushresult(&b);
		mb_sandbox_pii_top(L);
		size_t len;
		const char *s = lua_tolstring(L, -1, &len);
		mb_sandbox_output(c, s, len);
		mb_sandbox_output(c, "\n", 1);
		return 0;
	}
	for (int i = 1; i <= n; i++) {
		size_t len;
		const char *s = luaL_tolstring(L, i, &len);
		if (i > 1)
			mb_sandbox_output(c, "\t", 1);
		mb_sandbox_output(c, s, len);
		lua_pop(L, 1);
	}
	mb_sandbox_output(c, "\n", 1);
	return 0;
}

/* ---- string -------------------------------------------------------------------------- */

/* string.rep: the stock one copies the string n times (one memcpy per copy, 2e8 one-byte
 * copies for rep("x", 2e8)) without any poll. This one fills the result by doubling, so the
 * copying is a few large memcpy calls, and polls the budget between them. */
static int sb_rep(lua_State *L)
{
	size_t l, lsep;
	const char *s = luaL_checklstring(L, 1, &l);
	lua_Integer n = luaL_checkinteger(L, 2);
	const char *sep = luaL_optlstring(L, 3, "", &lsep);
	if (n <= 0 || l + lsep == 0) {
		lua_pushliteral(L, "");
		return 1;
	}
	size_t unit = l + lsep;
	if (unit < l || (lua_Unsigned)n > (MAX_STRING_BYTES + lsep) / unit)
		return luaL_error(L, "resulting string too large");
	size_t total = (size_t)n * unit - lsep;
	luaL_Buffer b;
	char *p = luaL_buffinitsize(L, &b, total);
	memcpy(p, s, l);
	if (lsep && n > 1)
		memcpy(p + l, sep, lsep);
	size_t done = n > 1 ? unit : l;
	while (done < total) {
		size_t k = done < total - done ? done : total - done;
		memcpy(p + done, p, k);
		done += k;
		mb_budget_poll(L);
	}
	luaL_pushresultsize(&b, total);
	return 1;
}

/* upper, lower, reverse: the stock ones walk the whole string in one C loop (long enough to miss
 * the deadline on the largest strings: docs/benchmarks.md, "Figures behind limits in the code");
 * these poll the budget every MiB. */
#define CHUNK ((size_t)1 << 20)

static int map_string(lua_State *L, int (*f)(int), int reverse)
{
	size_t n;
	const char *s = luaL_checklstring(L, 1, &n);
	luaL_Buffer b;
	char *p = luaL_buffinitsize(L, &b, n);
	for (size_t i = 0; i < n; i++) {
		if ((i & (CHUNK - 1)) == CHUNK - 1)
			mb_budget_poll(L);
		p[i] = reverse ? s[n - 1 - i] : (char)f((unsigned char)s[i]);
	}
	luaL_pushresultsize(&b, n);
	return 1;
}

static int sb_upper(lua_State *L) { return map_string(L, toupper, 0); }
static int sb_lower(lua_State *L) { return map_string(L, tolower, 0); }
static int sb_reverse(lua_State *L) { return map_string(L, NULL, 1); }

/* utf8.len over a long range: the stock function is called on slices of about a MiB that end
 * just before a character start, with a budget poll between slices. Results are identical:
 * the count is additive over characters that start inside each slice, and an invalid byte is
 * reported at the same position. */
static int sb_utf8_len(lua_State *L)
{
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	lua_Integer i = luaL_optinteger(L, 2, 1), j = luaL_optinteger(L, 3, -1);
	int lax = lua_toboolean(L, 4);
	lua_Integer li = (lua_Integer)len;
	if (i < 0)
		i = -i > li ? 0 : li + i + 1;
	if (j < 0)
		j = -j > li ? 0 : li + j + 1;
	if (len <= CHUNK || i < 1 || j > li || j - i < (lua_Integer)CHUNK) {
		lua_pushvalue(L, lua_upvalueindex(1));
		lua_insert(L, 1);
		lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
		return lua_gettop(L);
	}
	lua_Integer total = 0;
	while (i <= j) {
		lua_Integer stop = j;
		if (j - i > (lua_Integer)CHUNK) {
			stop = i + (lua_Integer)CHUNK;
			while (stop > i && ((unsigned char)s[stop] & 0xC0) == 0x80)
				stop--; /* s[stop] (1-based stop+1) starts a character */
		}
		lua_pushvalue(L, lua_upvalueindex(1));
		lua_pushvalue(L, 1);
		lua_pushinteger(L, i);
		lua_pushinteger(L, stop);
		lua_pushboolean(L, lax);
		lua_call(L, 4, 2);
		if (lua_isnil(L, -2) || lua_type(L, -2) == LUA_TBOOLEAN)
			return 2; /* fail, position of the invalid byte */
		total += lua_tointeger(L, -2);
		lua_pop(L, 2);
		i = stop + 1;
		mb_budget_poll(L);
	}
	lua_pushinteger(L, total);
	return 1;
}

#if LUA_VERSION_RELEASE_NUM < 50405
/* utf8.codes: Lua 5.4.4's skips continuation bytes that follow a character or start the
 * string, so "in\x80valid" passed as valid UTF-8 (upstream a1089b41, 5.4.5). This is the fixed
 * iterator: the string may not start with a continuation byte and none may follow a character.
 * It costs what the stock one does: one C call per character. Lead bytes 0xFE and 0xFF are
 * refused before decoding (a shift past 31 bits in Lua's decoder, upstream 10eb89d1). */
#define UTF8_CONT(c) (((unsigned char)(c) & 0xC0) == 0x80)

static const char *utf8_decode(const char *s, uint32_t *val, int strict)
{
	static const uint32_t limits[] = { ~(uint32_t)0, 0x80, 0x800, 0x10000u, 0x200000u, 0x4000000u };
	unsigned int c = (unsigned char)s[0];
	uint32_t res = 0;
	if (c < 0x80) {
		res = c;
	} else if (c >= 0xFE) {
		return NULL;
	} else {
		int count = 0;
		for (; c & 0x40; c <<= 1) {
			unsigned int cc = (unsigned char)s[++count];
			if (!UTF8_CONT(cc))
				return NULL;
			res = (res << 6) | (cc & 0x3F);
		}
		res |= (uint32_t)(c & 0x7F) << (count * 5);
		if (count > 5 || res > 0x7FFFFFFFu || res < limits[count])
			return NULL;
		s += count;
	}
	if (strict && (res > 0x10FFFFu || (res >= 0xD800u && res <= 0xDFFFu)))
		return NULL;
	*val = res;
	return s + 1;
}

static int utf8_iter(lua_State *L, int strict)
{
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	lua_Unsigned n = (lua_Unsigned)lua_tointeger(L, 2);
	if (n < len) {
		while (UTF8_CONT(s[n])) { /* the rest of the last character (long only when called by hand) */
			if ((++n & (CHUNK - 1)) == 0)
				mb_budget_poll(L);
		}
	}
	if (n >= len)
		return 0;
	uint32_t code;
	const char *next = utf8_decode(s + n, &code, strict);
	if (next == NULL || UTF8_CONT(*next))
		return luaL_error(L, "invalid UTF-8 code");
	lua_pushinteger(L, (lua_Integer)n + 1);
	lua_pushinteger(L, (lua_Integer)code);
	return 2;
}

static int utf8_iter_strict(lua_State *L) { return utf8_iter(L, 1); }
static int utf8_iter_lax(lua_State *L) { return utf8_iter(L, 0); }

static int sb_utf8_codes(lua_State *L)
{
	int lax = lua_toboolean(L, 2);
	const char *s = luaL_checkstring(L, 1);
	luaL_argcheck(L, !UTF8_CONT(*s), 1, "invalid UTF-8 code");
	lua_pushcfunction(L, lax ? utf8_iter_lax : utf8_iter_strict);
	lua_pushvalue(L, 1);
	lua_pushinteger(L, 0);
	return 3;
}
#endif

/* string.format: "%q" escapes with one snprintf per control byte; bound the bytes quoted by one
 * call, all its %q arguments together (docs/security.md, "Single C calls and the deadline", and
 * docs/benchmarks.md, "Figures behind limits in the code", have the figures). */
static int sb_format(lua_State *L)
{
	mb_budget_cstack_check(L); /* %s calls __tostring */
	size_t fl;
	const char *f = luaL_checklstring(L, 1, &fl);
	int arg = 1;
	size_t quoted = 0;
	for (size_t i = 0; i + 1 < fl; i++) {
		if (f[i] != '%')
			continue;
		if (f[i + 1] == '%') {
			i++;
			continue;
		}
		arg++;
		size_t j = i + 1;
		while (j < fl && strchr("-+ #0123456789.", f[j]))
			j++;
		if (j < fl && f[j] == 'q' && lua_type(L, arg) == LUA_TSTRING) {
			quoted += lua_rawlen(L, arg);
			if (quoted > MAX_QUOTED_BYTES)
				return luaL_error(L, "bad argument #%d to 'format' (%%q of strings over %d "
						  "bytes in one call is not allowed in the sandbox)", arg,
						  MAX_QUOTED_BYTES);
		}
		i = j;
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* string.pack: one call copies its strings and zero-fills 'cN' fields inside C with no poll
 * ('c600000000' is a 600 MB memset; "s4" of a 64 MB string in a loop overran the deadline).
 * An upper bound of the output is computed from the format and the arguments first, and a call
 * that would make more than MAX_PACK_BYTES is refused. */
#define MAX_PACK_BYTES ((size_t)16 << 20)

static size_t pack_count(const char *f, size_t fl, size_t *i, size_t dflt)
{
	if (*i >= fl || !isdigit((unsigned char)f[*i]))
		return dflt;
	size_t n = 0;
	while (*i < fl && isdigit((unsigned char)f[*i])) {
		if (n < MAX_PACK_BYTES + 1)
			n = n * 10 + (size_t)(f[*i] - '0');
		(*i)++;
	}
	return n;
}

/* A format is walked in C by the stock functions (and by the estimate below) with no poll:
 * 30 MiB of '<' kept string.unpack busy 0.25 s. No real format comes near this. */
#define MAX_PACK_FORMAT 65536

static const char *pack_format(lua_State *L, size_t *fl, const char *fname)
{
	const char *f = luaL_checklstring(L, 1, fl);
	if (*fl > MAX_PACK_FORMAT)
		luaL_error(L, "bad argument #1 to '%s' (format longer than %d bytes is not allowed in the "
			      "sandbox)", fname, MAX_PACK_FORMAT);
	return f;
}

/* string.unpack and string.packsize: the stock ones, once the format's length is checked. */
static int sb_pack_format_only(lua_State *L)
{
	size_t fl;
	pack_format(L, &fl, lua_tostring(L, lua_upvalueindex(2)));
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

static int sb_pack(lua_State *L)
{
	size_t fl;
	const char *f = pack_format(L, &fl, "pack");
	size_t total = 0;
	int arg = 1;
	for (size_t i = 0; i < fl && total <= MAX_PACK_BYTES;) {
		char op = f[i++];
		size_t n = pack_count(f, fl, &i, 0);
		switch (op) {
		case ' ': case '<': case '>': case '=': case '!':
			break;
		case 'x':
			total += 1;
			break;
		case 'X': /* aligns to the next option's size: at most 16 bytes of padding */
			if (i < fl)
				i++;
			pack_count(f, fl, &i, 0);
			total += 16;
			break;
		case 'c':
			arg++;
			total += n + 16;
			break;
		case 's': case 'z':
			arg++;
			/* a number is converted to its text: at most a few dozen bytes */
			total += 16 + (lua_type(L, arg) == LUA_TSTRING ? lua_rawlen(L, arg) : 64);
			break;
		default: /* numbers: at most 16 bytes, plus alignment */
			arg++;
			total += 32;
			break;
		}
	}
	if (total > MAX_PACK_BYTES)
		return luaL_error(L, "string.pack: the result would exceed %d bytes, which is not allowed in "
				  "the sandbox (build large strings with string.rep or table.concat)",
				  (int)MAX_PACK_BYTES);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* os.clock: the stock one is the whole process's CPU time, which tells one tenant how busy the
 * others keep the server. This one is the CPU time of this execution (its thread, since the
 * code started). */
static int sb_clock(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	uint64_t now = mb_thread_cpu_ns();
	lua_pushnumber(L, (lua_Number)(now > c->cpu_start_ns ? now - c->cpu_start_ns : 0) / 1e9);
	return 1;
}

/* os.date: each conversion is a strftime call; a huge format is the only way to make it slow. */
static int sb_date(lua_State *L)
{
	size_t n = 0;
	if (lua_type(L, 1) == LUA_TSTRING)
		lua_tolstring(L, 1, &n);
	if (n > MAX_DATE_FORMAT)
		return luaL_error(L, "bad argument #1 to 'date' (format longer than %d bytes)", MAX_DATE_FORMAT);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* ---- table: the loops that __len can make endless, with budget polls ----------------- */

static lua_Integer checked_len(lua_State *L, int idx)
{
	mb_budget_cstack_check(L); /* every table function: __len, __index, __newindex */
	luaL_checktype(L, idx, LUA_TTABLE);
	return luaL_len(L, idx);
}

static int sb_insert(lua_State *L)
{
	lua_Integer e = checked_len(L, 1) + 1; /* first empty slot */
	lua_Integer pos;
	switch (lua_gettop(L)) {
	case 2:
		pos = e;
		break;
	case 3:
		pos = luaL_checkinteger(L, 2);
		luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2, "position out of bounds");
		for (lua_Integer i = e; i > pos; i--) {
			if ((i & (POLL_EVERY - 1)) == 0)
				mb_budget_poll(L);
			lua_geti(L, 1, i - 1);
			lua_seti(L, 1, i);
		}
		break;
	default:
		return luaL_error(L, "wrong number of arguments to 'insert'");
	}
	lua_seti(L, 1, pos);
	return 0;
}

static int sb_remove(lua_State *L)
{
	lua_Integer size = checked_len(L, 1);
	lua_Integer pos = luaL_optinteger(L, 2, size);
	if (pos != size)
		luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
	lua_geti(L, 1, pos);
	for (; pos < size; pos++) {
		if ((pos & (POLL_EVERY - 1)) == 0)
			mb_budget_poll(L);
		lua_geti(L, 1, pos + 1);
		lua_seti(L, 1, pos);
	}
	lua_pushnil(L);
	lua_seti(L, 1, pos);
	return 1;
}

static int sb_move(lua_State *L)
{
	lua_Integer f = luaL_checkinteger(L, 2);
	lua_Integer e = luaL_checkinteger(L, 3);
	lua_Integer t = luaL_checkinteger(L, 4);
	int tt = !lua_isnoneornil(L, 5) ? 5 : 1;
	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_checktype(L, tt, LUA_TTABLE);
	if (e >= f) {
		luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
		lua_Integer n = e - f + 1;
		luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
		if (t > e || t <= f || (tt != 1 && !lua_rawequal(L, 1, tt))) {
			for (lua_Integer i = 0; i < n; i++) {
				if ((i & (POLL_EVERY - 1)) == POLL_EVERY - 1)
					mb_budget_poll(L);
				lua_geti(L, 1, f + i);
				lua_seti(L, tt, t + i);
			}
		} else {
			for (lua_Integer i = n - 1; i >= 0; i--) {
				if ((i & (POLL_EVERY - 1)) == 0)
					mb_budget_poll(L);
				lua_geti(L, 1, f + i);
				lua_seti(L, tt, t + i);
			}
		}
	}
	lua_pushvalue(L, tt);
	return 1;
}

static int sb_concat(lua_State *L)
{
	luaL_Buffer b;
	mb_budget_cstack_check(L); /* __index, __len */
	luaL_checktype(L, 1, LUA_TTABLE);
	size_t lsep;
	const char *sep = luaL_optlstring(L, 2, "", &lsep);
	lua_Integer i = luaL_optinteger(L, 3, 1);
	lua_Integer last = lua_isnoneornil(L, 4) ? luaL_len(L, 1) : luaL_checkinteger(L, 4);
	luaL_buffinit(L, &b);
	for (; i <= last; i++) {
		if ((i & (POLL_EVERY - 1)) == 0)
			mb_budget_poll(L);
		lua_geti(L, 1, i);
		if (!lua_isstring(L, -1))
			return luaL_error(L, "invalid value (at index %I) in table for 'concat'", (LUAI_UACINT)i);
		luaL_addvalue(&b);
		if (i != last)
			luaL_addlstring(&b, sep, lsep);
		if (i == LUA_MAXINTEGER)
			break;
	}
	luaL_pushresult(&b);
	return 1;
}

/* Heapsort on t[1..n]: O(n log n) in the worst case, no recursion, a budget poll every few
 * comparisons (one comparison of two long strings can take milliseconds). */
typedef struct {
	lua_State *L;
	int has_cmp;
	unsigned polls;
} sorter;

static int sort_less(sorter *s, lua_Integer a, lua_Integer b)
{
	lua_State *L = s->L;
	if ((++s->polls & 3) == 0) /* one comparison of long strings can take milliseconds */
		mb_budget_poll(L);
	int r;
	if (s->has_cmp) {
		lua_pushvalue(L, 2);
		lua_geti(L, 1, a);
		lua_geti(L, 1, b);
		lua_call(L, 2, 1);
		r = lua_toboolean(L, -1);
		lua_pop(L, 1);
	} else {
		lua_geti(L, 1, a);
		lua_geti(L, 1, b);
		r = lua_compare(L, -2, -1, LUA_OPLT);
		lua_pop(L, 2);
	}
	return r;
}

static void sort_swap(lua_State *L, lua_Integer a, lua_Integer b)
{
	lua_geti(L, 1, a);
	lua_geti(L, 1, b);
	lua_seti(L, 1, a);
	lua_seti(L, 1, b);
}

static void sift_down(sorter *s, lua_Integer root, lua_Integer n)
{
	for (;;) {
		lua_Integer child = 2 * root;
		if (child > n)
			return;
		if (child < n && sort_less(s, child, child + 1))
			child++;
		if (!sort_less(s, root, child))
			return;
		sort_swap(s->L, root, child);
		root = child;
	}
}

static int sb_sort(lua_State *L)
{
	lua_Integer n = checked_len(L, 1);
	luaL_argcheck(L, n < INT32_MAX, 1, "array too big");
	sorter s = { L, 0, 0 };
	if (!lua_isnoneornil(L, 2)) {
		luaL_checktype(L, 2, LUA_TFUNCTION);
		s.has_cmp = 1;
	}
	lua_settop(L, 2);
	for (lua_Integer i = n / 2; i >= 1; i--)
		sift_down(&s, i, n);
	for (lua_Integer end = n; end > 1; end--) {
		sort_swap(L, 1, end);
		sift_down(&s, 1, end - 1);
	}
	return 0;
}

/* ---- mcp: the host calls ------------------------------------------------------------- */

static const char *const log_levels[] = { "debug", "info", "notice", "warning", "error",
					  "critical", "alert", "emergency", NULL };

static void notify(lua_State *L, mb_sandbox_ctx *c, mb_notify_kind kind, int level, const char *fname)
{
	if (c->notifications >= (uint64_t)c->cfg->max_notifications)
		luaL_error(L, "%s: notification limit reached (max_notifications=%d)", fname,
			   (int)c->cfg->max_notifications);
	/* the payload table is at the top of the stack */
	mb_sandbox_pii_top(L); /* notifications go toward the model too */
	char err[MB_ERR_MAX];
	size_t len;
	char *j = mb_json_encode(L, -1, &c->json_lim, MB_JSON_LENIENT, &len, err, sizeof err);
	if (!j) {
		mb_budget_poll(L);
		luaL_error(L, "%s: %s", fname, err);
	}
	if (len > (size_t)c->cfg->max_output_bytes) {
		free(j);
		luaL_error(L, "%s: message is too large: %d bytes, max_output_bytes=%d", fname, (int)len,
			   (int)c->cfg->max_output_bytes);
	}
	c->notifications++;
	if (c->req->notify)
		c->req->notify(c->req->notify_ud, kind, level, j, len);
	free(j);
}

static int sb_mcp_log(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	int level = luaL_checkoption(L, 1, NULL, log_levels);
	luaL_checkany(L, 2);
	lua_settop(L, 2);
	notify(L, c, MB_NOTIFY_LOG, level, "mcp.log");
	return 0;
}

static int sb_mcp_progress(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	lua_settop(L, 3);
	lua_Number p = luaL_checknumber(L, 1);
	luaL_argcheck(L, isfinite(p), 1, "progress must be a finite number");
	if (c->has_progress && !(p > c->last_progress))
		return luaL_error(L, "mcp.progress: progress must increase (last %f, got %f)",
				  c->last_progress, p);
	lua_createtable(L, 0, 3);
	lua_pushvalue(L, 1);
	lua_setfield(L, -2, "progress");
	if (!lua_isnoneornil(L, 2)) {
		lua_Number t = luaL_checknumber(L, 2);
		luaL_argcheck(L, isfinite(t), 2, "total must be a finite number");
		lua_pushvalue(L, 2);
		lua_setfield(L, -2, "total");
	}
	if (!lua_isnoneornil(L, 3)) {
		luaL_checkstring(L, 3);
		lua_pushvalue(L, 3);
		lua_setfield(L, -2, "message");
	}
	notify(L, c, MB_NOTIFY_PROGRESS, -1, "mcp.progress");
	c->has_progress = 1;
	c->last_progress = p;
	return 0;
}

/* ---- the stock libraries, read once per process --------------------------------------------
 *
 * Opening the stock libraries in every fresh state (luaL_requiref, luaopen_*) made each one, its
 * functions and its names, and then the policy above replaced or removed a third of what they had
 * made: os alone made eleven functions to keep four. mb_sandbox_env_init opens them once, in a
 * scratch state, and records what each table holds (the C function behind each name, the
 * constants), with the policy already applied; each fresh state is then filled from that record
 * in one pass into presized tables, each name made once (docs/benchmarks.md, "Issue 22").
 * The tables hold the same names and values as before: the stock C functions (light functions,
 * as luaL_setfuncs makes them), our replacements, the same constants, math.random and
 * math.randomseed sharing a new state with a seed of its own (next_seed). Anything of another shape
 * in a stock table (a Lua other than the one this was written for) fails the start, rather than
 * being copied wrongly. */

/* next, pairs, rawget, rawset, getmetatable: the stock ones, seeing the lazy globals whole
 * (below, after the lazy environment) */
static int sb_pairs(lua_State *L);
static int sb_rawget(lua_State *L);
static int sb_rawset(lua_State *L);
static int sb_getmetatable(lua_State *L);

enum { R_KEEP, R_DROP, R_OWN, R_WRAP, R_WRAP_NAMED };
typedef struct {
	const char *name;
	unsigned char how; /* R_OWN: f instead of the stock function; R_WRAP: f with the stock one as
			    * upvalue 1; R_WRAP_NAMED: also the name as upvalue 2 */
	lua_CFunction f;
} env_rule;

enum { E_FUNC, E_WRAP, E_WRAP_NAMED, E_RANDOM, E_INT, E_NUM, E_STR, E_BOOL, E_REF };
typedef struct {
	char *name;
	size_t len;
	unsigned char kind;
	lua_CFunction f, stock; /* E_FUNC, E_RANDOM: f; E_WRAP*: f closing over stock */
	lua_Integer i;          /* E_INT, E_BOOL */
	lua_Number n;           /* E_NUM */
	char *s;                /* E_STR */
	size_t slen;
} env_entry;

typedef struct {
	const char *name;   /* its global name; NULL for the string metatable */
	lua_CFunction open; /* NULL: the string metatable, read after string */
	const env_rule *rules;
	int keep_unlisted;  /* 0: only the names listed in rules */
	int loaded;         /* listed in the registry's loaded table, as luaL_requiref did */
	int extra;          /* fields the assembly adds after the record */
	env_entry *e;
	int n;
	size_t random_size; /* the state math.random and math.randomseed share */
} env_lib;

static const env_rule base_rules[] = {
	{ "dofile", R_DROP, NULL },	{ "loadfile", R_DROP, NULL },
	{ "warn", R_DROP, NULL },	{ "require", R_DROP, NULL },
	{ "load", R_OWN, sb_load },	{ "pcall", R_OWN, sb_pcall },
	{ "xpcall", R_OWN, sb_xpcall }, { "collectgarbage", R_OWN, sb_collectgarbage },
	{ "print", R_OWN, sb_print },	{ "next", R_OWN, mb_sandbox_next },
	{ "pairs", R_OWN, sb_pairs },	{ "rawget", R_OWN, sb_rawget },
	{ "rawset", R_OWN, sb_rawset },	{ "getmetatable", R_OWN, sb_getmetatable },
	{ NULL, 0, NULL },
};
static const env_rule string_rules[] = {
	{ "dump", R_DROP, NULL },
	{ "rep", R_OWN, sb_rep },
	{ "upper", R_OWN, sb_upper },
	{ "lower", R_OWN, sb_lower },
	{ "reverse", R_OWN, sb_reverse },
	{ "format", R_WRAP, sb_format },
	{ "pack", R_WRAP, sb_pack },
	{ "unpack", R_WRAP_NAMED, sb_pack_format_only },
	{ "packsize", R_WRAP_NAMED, sb_pack_format_only },
	/* find, match, gmatch, gsub: mb_lpattern_function */
	{ NULL, 0, NULL },
};
static const env_rule table_rules[] = {
	{ "sort", R_OWN, sb_sort },	{ "move", R_OWN, sb_move },	{ "insert", R_OWN, sb_insert },
	{ "remove", R_OWN, sb_remove }, { "concat", R_OWN, sb_concat }, { NULL, 0, NULL },
};
static const env_rule utf8_rules[] = {
	{ "len", R_WRAP, sb_utf8_len },
#if LUA_VERSION_RELEASE_NUM < 50405
	{ "codes", R_OWN, sb_utf8_codes },
#endif
	{ NULL, 0, NULL },
};
/* coroutine.wrap closes over our resume: made by the assembly */
static const env_rule coroutine_rules[] = {
	{ "resume", R_WRAP, sb_resume }, { "close", R_WRAP, sb_close }, { NULL, 0, NULL },
};
/* os: only these, in a fresh table (the full library is never in the state) */
static const env_rule os_rules[] = {
	{ "time", R_KEEP, NULL },  { "difftime", R_KEEP, NULL },
	{ "date", R_WRAP, sb_date }, { "clock", R_OWN, sb_clock },
	{ NULL, 0, NULL },
};
static const env_rule none_rules[] = { { NULL, 0, NULL } };

enum { LIB_BASE, LIB_STRING, LIB_STRMETA, LIB_TABLE, LIB_MATH, LIB_UTF8, LIB_CO, LIB_OS, LIB_N };
static env_lib env_libs[LIB_N] = {
	[LIB_BASE] = { LUA_GNAME, luaopen_base, base_rules, 1, 1, 0, NULL, 0, 0 },
	[LIB_STRING] = { LUA_STRLIBNAME, luaopen_string, string_rules, 1, 1, 0, NULL, 0, 0 },
	[LIB_STRMETA] = { NULL, NULL, none_rules, 1, 0, 1 /* __metatable */, NULL, 0, 0 },
	[LIB_TABLE] = { LUA_TABLIBNAME, luaopen_table, table_rules, 1, 1, 0, NULL, 0, 0 },
	[LIB_MATH] = { LUA_MATHLIBNAME, luaopen_math, none_rules, 1, 1, 0, NULL, 0, 0 },
	[LIB_UTF8] = { LUA_UTF8LIBNAME, luaopen_utf8, utf8_rules, 1, 1, 0, NULL, 0, 0 },
	[LIB_CO] = { LUA_COLIBNAME, luaopen_coroutine, coroutine_rules, 1, 1, 0, NULL, 0, 0 },
	[LIB_OS] = { "os", luaopen_os, os_rules, 0, 0, 0, NULL, 0, 0 },
};
static int env_ready;
static uint64_t seed_base; /* math.random's seeds start here (next_seed) */

static const env_rule *find_rule(const env_lib *lib, const char *name)
{
	for (const env_rule *r = lib->rules; r->name; r++)
		if (strcmp(r->name, name) == 0)
			return r;
	return NULL;
}

static char *dup_bytes(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

/* Records the table at the top of H's stack into lib (ref: the index of the table a field may
 * name, E_REF: _G itself, the string metatable's __index). Returns 0, or -1 with a message. */
static int read_lib(lua_State *H, env_lib *lib, int ref, char *err, size_t errlen)
{
	int t = lua_gettop(H);
	int cap = 0;
	const void *random_state = NULL;
	const char *what = lib->name ? lib->name : "string metatable";
	lua_pushnil(H);
	while (lua_next(H, t)) {
		if (lua_type(H, -2) != LUA_TSTRING) {
			snprintf(err, errlen, "%s: a key that is not a string", what);
			return -1;
		}
		size_t len;
		const char *name = lua_tolstring(H, -2, &len);
		const env_rule *r = find_rule(lib, name);
		env_rule lp = { name, R_OWN, mb_lpattern_function(name) };
		if (lib == &env_libs[LIB_STRING] && lp.f)
			r = &lp;
		if ((r && r->how == R_DROP) || (!r && !lib->keep_unlisted)) {
			lua_pop(H, 1);
			continue;
		}
		if (lib->n == cap) {
			cap = cap ? 2 * cap : 32;
			env_entry *e = realloc(lib->e, (size_t)cap * sizeof *e);
			if (!e)
				goto oom;
			lib->e = e;
		}
		env_entry *e = &lib->e[lib->n];
		memset(e, 0, sizeof *e);
		if (!(e->name = dup_bytes(name, len)))
			goto oom;
		e->len = len;
		lib->n++;
		switch (lua_type(H, -1)) {
		case LUA_TFUNCTION: {
			lua_CFunction f = lua_tocfunction(H, -1);
			if (!f) {
				snprintf(err, errlen, "%s.%s is not a C function", what, name);
				return -1;
			}
			if (lua_getupvalue(H, -1, 1)) {
				/* luaopen_math: random and randomseed share a plain userdata */
				int ok = lib == &env_libs[LIB_MATH] && r == NULL &&
					 (strcmp(name, "random") == 0 || strcmp(name, "randomseed") == 0) &&
					 lua_type(H, -1) == LUA_TUSERDATA;
				if (ok && lua_getmetatable(H, -1)) {
					ok = 0;
					lua_pop(H, 1);
				}
				if (ok) {
					ok = lua_getiuservalue(H, -1, 1) == LUA_TNONE;
					lua_pop(H, 1);
				}
				if (ok && lua_getupvalue(H, -2, 2)) {
					ok = 0;
					lua_pop(H, 1);
				}
				ok = ok && (!random_state || random_state == lua_topointer(H, -1));
				random_state = lua_topointer(H, -1);
				lib->random_size = lua_rawlen(H, -1);
				lua_pop(H, 1);
				if (!ok) {
					snprintf(err, errlen, "%s.%s has upvalues", what, name);
					return -1;
				}
				e->kind = E_RANDOM;
				e->f = f;
				break;
			}
			e->kind = !r || r->how == R_KEEP || r->how == R_OWN ? E_FUNC
				  : r->how == R_WRAP ? E_WRAP : E_WRAP_NAMED;
			e->f = r && r->how != R_KEEP ? r->f : f;
			e->stock = f;
			break;
		}
		case LUA_TNUMBER:
			if (lua_isinteger(H, -1)) {
				e->kind = E_INT;
				e->i = lua_tointeger(H, -1);
			} else {
				e->kind = E_NUM;
				e->n = lua_tonumber(H, -1);
			}
			break;
		case LUA_TSTRING: {
			const char *s = lua_tolstring(H, -1, &e->slen);
			if (!(e->s = dup_bytes(s, e->slen)))
				goto oom;
			e->kind = E_STR;
			break;
		}
		case LUA_TBOOLEAN:
			e->kind = E_BOOL;
			e->i = lua_toboolean(H, -1);
			break;
		case LUA_TTABLE:
			if (lua_rawequal(H, -1, ref)) {
				e->kind = E_REF;
				break;
			}
			/* fall through */
		default:
			snprintf(err, errlen, "%s.%s: a %s", what, name, luaL_typename(H, -1));
			return -1;
		}
		if (r && r->how != R_KEEP && e->kind != E_FUNC && e->kind != E_WRAP &&
		    e->kind != E_WRAP_NAMED) {
			snprintf(err, errlen, "%s.%s: not a function to replace", what, name);
			return -1;
		}
		lua_pop(H, 1);
	}
	if (random_state && lib->random_size == 0) {
		snprintf(err, errlen, "math: no random state");
		return -1;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

/* Seeds for math.random, one pair per fresh state: splitmix64 over a per-thread start, the
 * process's random base (getrandom once in mb_sandbox_env_init, before a worker process is
 * confined: its seccomp filter refuses getrandom) mixed with the thread's own address.
 * luaopen_math seeds from the time and the state's address, and the arena gives consecutive
 * states one address, so executions on one worker within a second drew the same numbers. */
static uint64_t next_seed(void)
{
	static _Thread_local uint64_t s;
	static _Thread_local int ready;
	if (!ready) {
		s = seed_base ^ (uint64_t)(uintptr_t)&s;
		ready = 1;
	}
	uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Pushes the value of one recorded entry (ref: the table an E_REF names; rnd: the index of the
 * random state an E_RANDOM closes over). */
static void push_entry(lua_State *L, const env_entry *e, int ref, int rnd)
{
	switch (e->kind) {
	case E_FUNC:
		lua_pushcfunction(L, e->f);
		break;
	case E_WRAP:
		lua_pushcfunction(L, e->stock);
		lua_pushcclosure(L, e->f, 1);
		break;
	case E_WRAP_NAMED:
		lua_pushcfunction(L, e->stock);
		lua_pushlstring(L, e->name, e->len);
		lua_pushcclosure(L, e->f, 2);
		break;
	case E_RANDOM:
		lua_pushvalue(L, rnd);
		lua_pushcclosure(L, e->f, 1);
		break;
	case E_INT:
		lua_pushinteger(L, e->i);
		break;
	case E_NUM:
		lua_pushnumber(L, e->n);
		break;
	case E_STR:
		lua_pushlstring(L, e->s, e->slen);
		break;
	case E_BOOL:
		lua_pushboolean(L, (int)e->i);
		break;
	default: /* E_REF */
		lua_pushvalue(L, ref);
		break;
	}
}

static void fill_lib(lua_State *L, const env_lib *lib, int t, int ref)
{
	int rnd = 0;
	if (lib->random_size) {
		lua_newuserdatauv(L, lib->random_size, 0);
		rnd = lua_gettop(L);
	}
	for (int i = 0; i < lib->n; i++) {
		const env_entry *e = &lib->e[i];
		lua_pushlstring(L, e->name, e->len);
		push_entry(L, e, ref, rnd);
		lua_rawset(L, t);
	}
	if (rnd) { /* a seed of its own: math.randomseed(a, b) */
		lua_getfield(L, t, "randomseed");
		lua_pushinteger(L, (lua_Integer)next_seed());
		lua_pushinteger(L, (lua_Integer)next_seed());
		lua_call(L, 2, 0);
		lua_remove(L, rnd);
	}
}

static const env_entry *find_entry(const env_lib *lib, const char *name)
{
	for (int i = 0; i < lib->n; i++)
		if (strcmp(lib->e[i].name, name) == 0)
			return &lib->e[i];
	return NULL;
}

static void set_field(lua_State *L, const char *name, lua_CFunction f)
{
	lua_pushcfunction(L, f);
	lua_setfield(L, -2, name);
}

/* ---- the lazy environment -------------------------------------------------------------------
 *
 * Filling every library into every fresh state was most of an execution's cost (`return 1+1`:
 * ~62% of its instructions in mb_sandbox_env_open), and most executions touch a few names. So a
 * state starts with only the string library (the string metatable's __index must be a plain
 * table), `next`, and the registry's loaded table; every other global name - base functions,
 * libraries, json, re, mcp, the extension globals, the prelude stubs - is *pending*: listed in
 * a process-wide table of names (lazy_names, made by mb_sandbox_env_init and
 * mb_sandbox_env_add_stub) and in a per-state byte array (lazy_state), and absent from the
 * globals table. The globals carry a metatable (the lazy metatable) whose __index builds a
 * pending name on first read, exactly as the eager assembly built it, stores it with rawset and
 * clears its byte; its __newindex clears the byte of a pending name the code assigns (so
 * `math = nil` stays nil). Once nothing is pending the metatable is removed and the globals are
 * a plain table, as before.
 *
 * Every way to observe the globals other than by reading a name materialises everything first
 * (expand_all), so sandbox code sees the eager table: getmetatable or setmetatable on it,
 * next/pairs on it (the only ways to list its keys), the JSON encoder, json.array and the PII
 * policy walking it (through mb_json_expand_key / mb_sandbox_env_expand); rawget of a pending
 * name makes that name, rawset of one claims it. `_G` is an ordinary lazy name (the globals
 * themselves), so `_G.math` costs what `math` does. Misses (reads of names
 * that are not globals) and assignments to new names go through C while the metatable is on;
 * after LAZY_MISSES of them everything is materialised, so a loop reading an undefined global
 * pays a bounded cost. The lazy metatable, its functions and lazy_state are reachable only from
 * the registry and from C; the functions check their arguments (the globals table; a string key
 * to make a name, any other key is a miss) and do nothing otherwise. A name is stored only once fully built: a memory error while
 * building leaves it pending and the globals unchanged. */

#define LAZY_MAX 160
#define LAZY_HASH 512 /* a power of two, over twice LAZY_MAX */
#define LAZY_MISSES 1000

enum { LZ_BASE, LZ_SETMT, LZ_LIB, LZ_JSON, LZ_RE, LZ_MCP, LZ_GROUP, LZ_STUB };
typedef struct {
	char *name;
	size_t len;
	unsigned char kind;
	int arg;          /* LZ_BASE: entry of the base record; LZ_LIB: env_libs index; LZ_GROUP:
			   * lazy_groups index; LZ_STUB: the stub's first upvalue */
	lua_CFunction f;  /* LZ_STUB: the stub, closing over (arg, name) */
} lazy_name;

static lazy_name lazy_names[LAZY_MAX];
static int lazy_count;
static size_t lazy_maxlen; /* the longest name: a longer key is none, found without hashing it */
static short lazy_slots[LAZY_HASH]; /* index + 1 into lazy_names; 0: empty */

static int servers_open(lua_State *L)
{
	lua_pushcfunction(L, mb_sandbox_next);
	return mb_sandbox_mcp_open(L);
}

/* The extension globals, by file: each adds its names to the table at the top of the stack.
 * mb_sandbox_env_init learns their names by running each once in a scratch state. */
static const lua_CFunction lazy_groups[] = {
	mb_sandbox_host_open,      /* require, skills, save_skill, load_skill, list_skills */
	mb_sandbox_pii_open,       /* pii, tokenize_pii, detokenize_pii */
	mb_sandbox_ws_open,        /* read_file, write_file, list_files, delete_file, file_exists */
	servers_open,              /* servers */
	mb_sandbox_testhooks_open, /* __test, in the test build only */
};

typedef struct {
	int pending_count;
	unsigned misses;
	mb_regex_limits rl; /* re's limits, taken from the configuration the state was prepared for */
	unsigned char pending[LAZY_MAX];
} lazy_state;

static const char lazy_key = 0;      /* registry: the lazy_state userdata */
static const char lazy_mt_key = 0;   /* registry: the lazy metatable */
static const char co_resume_key = 0; /* registry: coroutine.resume as built (mcp.parallel's too) */

static uint32_t lazy_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static int lazy_find(const char *s, size_t n)
{
	if (n > lazy_maxlen) /* sandbox code's key may be hundreds of MB: no pass over it in C */
		return -1;
	for (uint32_t h = lazy_hash(s, n);; h++) {
		int k = lazy_slots[h & (LAZY_HASH - 1)];
		if (k == 0)
			return -1;
		const lazy_name *z = &lazy_names[k - 1];
		if (z->len == n && memcmp(z->name, s, n) == 0)
			return k - 1;
	}
}

/* Adds a name (or redefines it: a later definition wins, as a later rawset did when the
 * environment was assembled eagerly). Returns 0, or -1 when full or out of memory. */
static int lazy_add(const char *name, size_t len, int kind, int arg, lua_CFunction f)
{
	int i = lazy_find(name, len);
	if (i < 0) {
		if (lazy_count == LAZY_MAX)
			return -1;
		char *d = dup_bytes(name, len);
		if (!d)
			return -1;
		i = lazy_count++;
		lazy_names[i].name = d;
		lazy_names[i].len = len;
		if (len > lazy_maxlen)
			lazy_maxlen = len;
		uint32_t h = lazy_hash(name, len);
		while (lazy_slots[h & (LAZY_HASH - 1)])
			h++;
		lazy_slots[h & (LAZY_HASH - 1)] = (short)(i + 1);
	}
	lazy_names[i].kind = (unsigned char)kind;
	lazy_names[i].arg = arg;
	lazy_names[i].f = f;
	return 0;
}

int mb_sandbox_env_add_stub(const char *name, lua_CFunction f, int arg)
{
	size_t n = strlen(name);
	if (strcmp(name, "next") == 0 || strcmp(name, LUA_STRLIBNAME) == 0)
		return -1; /* eager names (mb_sandbox_env_open) */
	return lazy_add(name, n, LZ_STUB, arg, f);
}

/* The names of the eager assembly, in its order. */
static int lazy_init(char *err, size_t errlen)
{
	const env_lib *base = &env_libs[LIB_BASE];
	for (int i = 0; i < base->n; i++) {
		const env_entry *e = &base->e[i];
		if (strcmp(e->name, "next") == 0)
			continue; /* eager */
		int kind = strcmp(e->name, "setmetatable") == 0 ? LZ_SETMT : LZ_BASE;
		if (lazy_add(e->name, e->len, kind, i, NULL) != 0)
			goto full;
	}
	for (int i = 0; i < LIB_N; i++)
		if (i != LIB_BASE && i != LIB_STRING && i != LIB_STRMETA &&
		    lazy_add(env_libs[i].name, strlen(env_libs[i].name), LZ_LIB, i, NULL) != 0)
			goto full;
	if (lazy_add("json", 4, LZ_JSON, 0, NULL) || lazy_add("re", 2, LZ_RE, 0, NULL) ||
	    lazy_add("mcp", 3, LZ_MCP, 0, NULL))
		goto full;
	if (!find_entry(&env_libs[LIB_CO], "create") || !find_entry(&env_libs[LIB_CO], "resume")) {
		snprintf(err, errlen, "coroutine: no create or resume for mcp.parallel");
		return -1;
	}
	lua_State *H = luaL_newstate();
	if (!H) {
		snprintf(err, errlen, "cannot make a Lua state");
		return -1;
	}
	int ok = 1;
	for (int g = 0; ok && g < (int)(sizeof lazy_groups / sizeof lazy_groups[0]); g++) {
		lua_newtable(H);
		lazy_groups[g](H);
		lua_pushnil(H);
		while (ok && lua_next(H, -2)) {
			lua_pop(H, 1);
			size_t n;
			const char *k = lua_tolstring(H, -1, &n);
			ok = lua_type(H, -1) == LUA_TSTRING && lazy_add(k, n, LZ_GROUP, g, NULL) == 0;
		}
		lua_settop(H, 0);
	}
	lua_close(H);
	if (!ok)
		goto full;
	return 0;
full:
	snprintf(err, errlen, "more than %d lazy global names", LAZY_MAX);
	return -1;
}

int mb_sandbox_env_init(void)
{
	if (env_ready)
		return 0;
	if (getrandom(&seed_base, sizeof seed_base, 0) != (ssize_t)sizeof seed_base)
		seed_base = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&seed_base;
	char err[160] = "cannot make a Lua state";
	lua_State *H = luaL_newstate();
	int ok = H != NULL;
	for (int i = 0; ok && i < LIB_N; i++) {
		env_lib *lib = &env_libs[i];
		if (i == LIB_STRMETA) { /* the string table is at the top */
			lua_pushliteral(H, "");
			ok = lua_getmetatable(H, -1);
			lua_remove(H, -2);
			ok = ok && read_lib(H, lib, lua_gettop(H) - 1, err, sizeof err) == 0;
			lua_settop(H, 0);
			continue;
		}
		luaL_requiref(H, lib->name, lib->open, 0);
		ok = read_lib(H, lib, lua_gettop(H), err, sizeof err) == 0;
		if (i != LIB_STRING)
			lua_settop(H, 0);
	}
	if (H)
		lua_close(H);
	if (ok && lazy_init(err, sizeof err) != 0)
		ok = 0;
	if (!ok) {
		mb_log(MB_LOG_ERROR, "sandbox: reading the stock Lua libraries: %s", err);
		return -1;
	}
	env_ready = 1;
	return 0;
}

static lazy_state *lazy_of(lua_State *L)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &lazy_key);
	lazy_state *st = lua_touserdata(L, -1); /* anchored by the registry */
	lua_pop(L, 1);
	return st;
}

/* Is the table at idx the globals while they are lazy? (The lazy metatable is never on another
 * table: getmetatable hands it to no one.) */
static int is_lazy(lua_State *L, int idx)
{
	if (!lua_getmetatable(L, idx))
		return 0;
	lua_rawgetp(L, LUA_REGISTRYINDEX, &lazy_mt_key);
	int r = lua_rawequal(L, -1, -2);
	lua_pop(L, 2);
	return r;
}

static int is_globals(lua_State *L, int idx)
{
	lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
	int r = lua_rawequal(L, -1, idx);
	lua_pop(L, 1);
	return r;
}

/* Name i is no longer pending; with nothing pending the globals become a plain table. Neither
 * step allocates. */
static void lazy_clear(lua_State *L, int g, lazy_state *st, int i)
{
	if (!st->pending[i])
		return;
	st->pending[i] = 0;
	if (--st->pending_count > 0)
		return;
	lua_pushnil(L);
	lua_setmetatable(L, g);
	lua_pushnil(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &mb_json_expand_key);
}

/* Pushes library li's table: the one in the loaded table if it was made already (the coroutine
 * library, for mcp), else a new one, recorded there. */
static void push_lib(lua_State *L, int li)
{
	const env_lib *lib = &env_libs[li];
	lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	if (lib->loaded) {
		if (lua_getfield(L, -1, lib->name) == LUA_TTABLE) {
			lua_remove(L, -2);
			return;
		}
		lua_pop(L, 1);
	}
	lua_createtable(L, 0, lib->n + lib->extra + (li == LIB_CO));
	int t = lua_gettop(L);
	fill_lib(L, lib, t, t);
	if (li == LIB_CO) { /* wrap closes over our resume, which mcp.parallel shares */
		lua_getfield(L, t, "resume");
		lua_pushvalue(L, -1);
		lua_rawsetp(L, LUA_REGISTRYINDEX, &co_resume_key);
		lua_pushcclosure(L, sb_wrap, 1);
		lua_setfield(L, t, "wrap");
	}
	if (lib->loaded) {
		lua_pushvalue(L, t);
		lua_setfield(L, t - 1, lib->name);
	}
	lua_remove(L, t - 1);
}

/* Pushes the value of pending name i, built as the eager assembly built it. g: the globals. */
static void lazy_build(lua_State *L, int g, lazy_state *st, int i)
{
	const lazy_name *z = &lazy_names[i];
	switch (z->kind) {
	case LZ_BASE:
		push_entry(L, &env_libs[LIB_BASE].e[z->arg], g, 0);
		break;
	case LZ_SETMT: /* over the stock one and its metatable anchors */
		lua_pushcfunction(L, env_libs[LIB_BASE].e[z->arg].f);
		mb_sandbox_weak_keys(L);
		lua_pushcclosure(L, sb_setmetatable, 2);
		break;
	case LZ_LIB:
		push_lib(L, z->arg);
		break;
	case LZ_JSON:
		mb_json_open(L, &mb_sandbox_ctx_of(L)->json_lim);
		mb_sandbox_ws_json(L); /* json.read_file, json.write_file */
		break;
	case LZ_RE:
		mb_regex_open(L, &st->rl);
		break;
	case LZ_MCP: {
		/* log, progress; sample, elicit, roots, ask, client_capabilities: sandbox_skills.c;
		 * call, parallel, tools: sandbox_upstream.c, over the coroutine library's own create
		 * and resume (not whatever the code made of the coroutine table) */
		lua_createtable(L, 0, 10);
		set_field(L, "log", sb_mcp_log);
		set_field(L, "progress", sb_mcp_progress);
		mb_sandbox_host_mcp(L);
		push_lib(L, LIB_CO);
		lua_pop(L, 1);
		lua_pushcfunction(L, find_entry(&env_libs[LIB_CO], "create")->f);
		lua_rawgetp(L, LUA_REGISTRYINDEX, &co_resume_key);
		mb_sandbox_upstream_mcp(L);
		break;
	}
	case LZ_STUB:
		lua_pushinteger(L, z->arg);
		lua_pushlstring(L, z->name, z->len);
		lua_pushcclosure(L, z->f, 2);
		break;
	default: /* LZ_GROUP: materialise() */
		lua_pushnil(L);
		break;
	}
}

/* Stores a value for pending name i: first everything it needs is made (a memory error leaves
 * the name pending and the globals as they were), then the rawset, then the byte is cleared.
 * Pushes the value. A group's other pending names are stored with it. */
static void materialise(lua_State *L, int g, lazy_state *st, int i)
{
	luaL_checkstack(L, 12, "globals");
	const lazy_name *z = &lazy_names[i];
	if (z->kind == LZ_GROUP) {
		lua_createtable(L, 0, 8);
		int s = lua_gettop(L);
		lazy_groups[z->arg](L);
		for (int j = 0; j < lazy_count; j++) {
			const lazy_name *y = &lazy_names[j];
			if (j == i || !st->pending[j] || y->kind != LZ_GROUP || y->arg != z->arg)
				continue;
			lua_pushlstring(L, y->name, y->len);
			lua_pushvalue(L, -1);
			lua_rawget(L, s);
			lua_rawset(L, g);
			lazy_clear(L, g, st, j);
		}
		lua_pushlstring(L, z->name, z->len);
		lua_rawget(L, s);
		lua_remove(L, s);
	} else {
		lazy_build(L, g, st, i);
	}
	lua_pushlstring(L, z->name, z->len);
	lua_pushvalue(L, -2);
	lua_rawset(L, g);
	lazy_clear(L, g, st, i);
}

/* Materialises every pending name: the globals become the table the eager assembly made, less
 * what the code assigned, and a plain table again. */
static void expand_all(lua_State *L, int g, lazy_state *st)
{
	for (int i = 0; i < lazy_count && st->pending_count > 0; i++) {
		if (st->pending[i]) {
			materialise(L, g, st, i);
			lua_pop(L, 1);
		}
	}
}

void mb_sandbox_env_expand(lua_State *L, int idx)
{
	if (lua_type(L, idx) != LUA_TTABLE || !is_lazy(L, idx))
		return;
	lazy_state *st = lazy_of(L);
	if (st)
		expand_all(L, lua_absindex(L, idx), st);
}

/* The registry's mb_json_expand_key while the globals are lazy (the encoder calls it on a
 * table with a metatable before walking it). */
static int lazy_expand(lua_State *L)
{
	mb_sandbox_env_expand(L, 1);
	return 0;
}

int mb_sandbox_env_reserved(const char *name, size_t len)
{
	return lazy_find(name, len) >= 0 || (len == 4 && memcmp(name, "next", 4) == 0) ||
	       (len == 6 && memcmp(name, LUA_STRLIBNAME, 6) == 0);
}

void mb_sandbox_env_claim(lua_State *L, int key)
{
	if (lua_type(L, key) != LUA_TSTRING)
		return;
	size_t n;
	const char *s = lua_tolstring(L, key, &n);
	int i = lazy_find(s, n);
	if (i < 0)
		return;
	lazy_state *st = lazy_of(L);
	if (!st || !st->pending[i])
		return;
	lua_pushglobaltable(L);
	lazy_clear(L, lua_gettop(L), st, i);
	lua_pop(L, 1);
}

/* Reading name k (a string at idx k) of the lazy globals at g: materialises it when pending.
 * Returns 1 when it did. */
static int lazy_touch(lua_State *L, int g, int k, lazy_state *st)
{
	size_t n;
	const char *s = lua_tolstring(L, k, &n);
	int i = lazy_find(s, n);
	if (i < 0 || !st->pending[i])
		return 0;
	materialise(L, g, st, i);
	lua_pop(L, 1);
	return 1;
}

/* A miss or a new name while lazy: past LAZY_MISSES, the globals stop being lazy. */
static void lazy_miss(lua_State *L, int g, lazy_state *st)
{
	if (++st->misses > LAZY_MISSES)
		expand_all(L, g, st);
}

/* __index of the lazy metatable (upvalue 1: the lazy_state). */
static int lazy_index(lua_State *L)
{
	lazy_state *st = lua_touserdata(L, lua_upvalueindex(1));
	lua_settop(L, 2);
	if (!st || !is_globals(L, 1) || !is_lazy(L, 1)) {
		lua_pushnil(L);
		return 1;
	}
	/* a key that is not a string (`_G[i]`) is a miss too: counted, or such reads would go
	 * through C for the rest of the execution */
	if (lua_type(L, 2) != LUA_TSTRING || !lazy_touch(L, 1, 2, st))
		lazy_miss(L, 1, st);
	lua_rawget(L, 1);
	return 1;
}

/* __newindex: the code's value wins over a pending name, which is then never made. */
static int lazy_newindex(lua_State *L)
{
	lazy_state *st = lua_touserdata(L, lua_upvalueindex(1));
	lua_settop(L, 3);
	if (!st || !is_globals(L, 1))
		return 0;
	lua_pushvalue(L, 2);
	lua_pushvalue(L, 3);
	lua_rawset(L, 1); /* raises as rawset would: a nil or NaN key */
	if (!is_lazy(L, 1))
		return 0;
	mb_sandbox_env_claim(L, 2);
	lazy_miss(L, 1, st);
	return 0;
}

/* ---- base functions that see the lazy globals whole ----------------------------------------- */

int mb_sandbox_next(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	if (lua_getmetatable(L, 1)) { /* a plain table pays this one check */
		lua_pop(L, 1);
		mb_sandbox_env_expand(L, 1);
	}
	lua_settop(L, 2);
	if (lua_next(L, 1))
		return 2;
	lua_pushnil(L);
	return 1;
}

static int pairs_cont(lua_State *L, int status, lua_KContext k)
{
	(void)L;
	(void)status;
	(void)k;
	return 3;
}

/* pairs: the stock one, returning the sandbox's next */
static int sb_pairs(lua_State *L)
{
	luaL_checkany(L, 1);
	if (luaL_getmetafield(L, 1, "__pairs") == LUA_TNIL) {
		lua_pushcfunction(L, mb_sandbox_next);
		lua_pushvalue(L, 1);
		lua_pushnil(L);
	} else {
		lua_pushvalue(L, 1);
		lua_callk(L, 1, 3, 0, pairs_cont);
	}
	return 3;
}

static int sb_rawget(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_checkany(L, 2);
	lua_settop(L, 2);
	if (lua_type(L, 2) == LUA_TSTRING && is_lazy(L, 1)) {
		lazy_state *st = lazy_of(L);
		if (st)
			lazy_touch(L, 1, 2, st);
	}
	lua_rawget(L, 1);
	return 1;
}

static int sb_rawset(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_checkany(L, 2);
	luaL_checkany(L, 3);
	lua_settop(L, 3);
	int lazy = lua_type(L, 2) == LUA_TSTRING && is_lazy(L, 1);
	lua_pushvalue(L, 2);
	lua_pushvalue(L, 3);
	lua_rawset(L, 1);
	if (lazy)
		mb_sandbox_env_claim(L, 2);
	lua_settop(L, 1);
	return 1;
}

static int sb_getmetatable(lua_State *L)
{
	luaL_checkany(L, 1);
	if (lua_type(L, 1) == LUA_TTABLE)
		mb_sandbox_env_expand(L, 1);
	if (!lua_getmetatable(L, 1)) {
		lua_pushnil(L);
		return 1;
	}
	luaL_getmetafield(L, 1, "__metatable");
	return 1;
}

/* ---- assembly ------------------------------------------------------------------------ */

int mb_sandbox_env_open(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (!env_ready)
		return luaL_error(L, "sandbox: the stock libraries were not read (mb_sandbox_env_init)");
	/* Room for every name (56, and the code's own): with few names made, a smaller table saved
	 * ~300 instructions, and cost ~9,000 more whenever all of them were made (rehashes). */
	lua_createtable(L, 0, 64);
	lua_pushvalue(L, -1);
	lua_rawseti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
	int g = lua_gettop(L);
	/* The registry's loaded table, as luaL_requiref left it: luaL_traceback and luaL_argerror
	 * look functions up there for their names ("function 'string.format'"). Not reachable from
	 * sandbox code. A library is added when it is made (push_lib). */
	lua_createtable(L, 0, LIB_N);
	lua_pushvalue(L, -1);
	lua_setfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	lua_pushvalue(L, g);
	lua_setfield(L, -2, LUA_GNAME);

	/* eager: next (pairs hands it out without a global read) and string with its metatable */
	lua_pushcfunction(L, mb_sandbox_next);
	lua_setfield(L, g, "next");
	const env_lib *lib = &env_libs[LIB_STRING];
	lua_createtable(L, 0, lib->n + lib->extra);
	fill_lib(L, lib, lua_gettop(L), lua_gettop(L));
	lua_pushvalue(L, -1);
	lua_setfield(L, -3, lib->name);
	lua_pushvalue(L, -1);
	lua_setfield(L, g, lib->name);
	lib = &env_libs[LIB_STRMETA];
	lua_createtable(L, 0, lib->n + lib->extra);
	fill_lib(L, lib, lua_gettop(L), lua_gettop(L) - 1);
	/* locked: getmetatable("") is false */
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_pushliteral(L, "");
	lua_insert(L, -2);
	lua_setmetatable(L, -2);
	lua_settop(L, g);

	/* coroutine -> xpcalls it is inside (sb_xpcall, sb_close): weak keys */
	mb_sandbox_weak_keys(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &xpcall_depth_key);
	/* Lua before 5.4.8 makes the string "error in error handling" where no error may be raised,
	 * when a coroutine dies or is closed with that status; made then under the memory cap it
	 * raised a memory error with nothing to catch it (upstream 25da574f). Kept alive here, the
	 * string is found interned and never allocated again. */
	lua_pushliteral(L, "error in error handling");
	lua_rawsetp(L, LUA_REGISTRYINDEX, &errerr_key);

	/* everything else is pending: the lazy state and metatable */
	lazy_state *st = lua_newuserdatauv(L, sizeof *st, 0);
	st->pending_count = lazy_count;
	st->misses = 0;
	st->rl = (mb_regex_limits){
		.max_pattern_bytes = (size_t)c->cfg->regex_max_pattern_bytes,
		.max_subject_bytes = (size_t)c->cfg->regex_max_subject_bytes,
		.match_limit = (uint32_t)c->cfg->regex_match_limit,
		.heap_limit_kb = (uint32_t)c->cfg->regex_heap_limit_kb,
		.depth_limit = (uint32_t)c->cfg->regex_match_limit,
		.max_patterns = 128,
		.parens_nest_limit = 50,
		.note = mb_sandbox_note,
	};
	memset(st->pending, 1, (size_t)lazy_count);
	lua_pushvalue(L, -1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &lazy_key);
	lua_createtable(L, 0, 2);
	lua_pushvalue(L, -2);
	lua_pushcclosure(L, lazy_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushvalue(L, -2);
	lua_pushcclosure(L, lazy_newindex, 1);
	lua_setfield(L, -2, "__newindex");
	lua_pushvalue(L, -1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &lazy_mt_key);
	lua_setmetatable(L, g);
	lua_pushcfunction(L, lazy_expand);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &mb_json_expand_key);
	lua_settop(L, g - 1);
	return 0;
}
