/* sandbox_upstream.c - tools of upstream MCP servers, called from sandbox code.
 *
 * `servers.<server>.<tool>(args)` and `mcp.call(server, tool, args)` are host calls
 * ("upstream_call") answered by lua/mcp/upstream.lua on the loop thread, which sends the
 * upstream's tools/call and replies with the tool's value (or an error the call raises here).
 * Names may be written as Lua identifiers: the host maps servers.my_server.get_sum to "my-server"
 * and "get-sum" when no exact name matches.
 *
 * `mcp.tools([server])` lists the servers, or one server's callable tools, and `pairs(servers)`
 * walks the servers (host call "upstream_tools"), so code can see what it may call.
 *
 * `mcp.parallel{...}` runs several calls at once. Items are call specs ({server, tool, args} or
 * {server=, tool=, args=}) or functions. Each function runs in a coroutine (made and resumed with
 * the sandbox's own coroutine functions, captured when mcp is made, so the budget hook and the deadline
 * signal follow it); an upstream call inside one yields the call's spec to the scheduler instead
 * of waiting. The scheduler sends every spec collected in a round as one "upstream_batch" host
 * call, so the upstream sees them concurrently, resumes each function with its answer, and
 * repeats until all are done. Results come back in order (a function's first return value).
 * The first failure, in item order, raises after its round. A call made where a yield is not
 * possible (a metamethod, a nested coroutine of the user's) simply waits.
 *
 * Tokens that tokenize_pii (or the policy) made earlier in the same execution are restored in
 * the arguments here, from the execution's own set (sandbox_pii.c); the host restores the
 * tokens its vault knows (lua/mcp/upstream.lua).
 */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#include "log.h"
#include "sandbox_int.h"

static const char task_key = 0;   /* registry: weak-keyed set of coroutines run by mcp.parallel */
static const char marker = 0;     /* yielded (as a light userdata) with a call spec by a task */
static const char proxy_key = 0;  /* a private key set in the metatable of servers.<server> tables */

#define MAX_PARALLEL_ITEMS 100000

/* Pushes a new table {server=, tool=, args=} from the values at the given indices. */
static void push_spec(lua_State *L, int server, int tool, int args)
{
	lua_createtable(L, 0, 3);
	lua_pushvalue(L, server);
	lua_setfield(L, -2, "server");
	lua_pushvalue(L, tool);
	lua_setfield(L, -2, "tool");
	if (!lua_isnoneornil(L, args)) {
		lua_pushvalue(L, args);
		lua_setfield(L, -2, "args");
	}
}

/* The arguments of the upstream host calls are not JSON objects but "server\0tool\0args" (args
 * is the JSON text of the table, or empty), items of a batch separated by "\n": the host then
 * passes args on to the upstream verbatim instead of decoding and encoding them again (our
 * encoder never writes a raw newline). Names with NUL or newline are refused here. */
typedef struct {
	char *p;
	size_t n, cap, limit;
	uint64_t nodes; /* JSON values of the args so far (max_call_nodes bounds them together) */
} rbuf;

/* The buffer lives in a userdata on the Lua stack, so an error raised while it is being filled
 * (a memory error, the deadline) leaves it to the garbage collector instead of leaking it. */
static int rbuf_gc(lua_State *L)
{
	rbuf *b = lua_touserdata(L, 1);
	free(b->p);
	b->p = NULL;
	return 0;
}

static rbuf *rbuf_new(lua_State *L)
{
	rbuf *b = lua_newuserdatauv(L, sizeof *b, 0);
	memset(b, 0, sizeof *b);
	if (luaL_newmetatable(L, "mb.rbuf")) {
		lua_pushcfunction(L, rbuf_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_setmetatable(L, -2);
	/* the host reads these bytes as one message: the same bound, and no unbounded malloc
	 * outside the execution's memory budget */
	b->limit = (size_t)mb_sandbox_ctx_of(L)->cfg->max_message_bytes;
	return b;
}

/* Hands the bytes to the caller (who frees them) and empties the box. */
static char *rbuf_take(rbuf *b, size_t *n)
{
	char *p = b->p;
	*n = b->n;
	b->p = NULL;
	b->n = b->cap = 0;
	return p;
}

static int rb_put(rbuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

/* Pushes t[k] without metamethods. */
static int raw_field(lua_State *L, int t, const char *k)
{
	lua_pushstring(L, k);
	return lua_rawget(L, t);
}

/* Appends the item for the spec table at idx (read raw: a spec handed over by a task is not
 * trusted to be the table do_call made); raises with a clear message on any problem. */
/* Frees the buffer at once (not at the next collection) and raises msg. */
static void put_fail(lua_State *L, rbuf *b, const char *msg)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
	mb_budget_poll(L);
	luaL_error(L, "%s", msg);
}

static void put_item(lua_State *L, int idx, rbuf *b)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	char err[MB_ERR_MAX] = "out of memory", msg[MB_ERR_MAX];
	size_t sl = 0, tl = 0, al = 0;
	if (lua_type(L, idx) != LUA_TTABLE)
		put_fail(L, b, "mcp.parallel: a call must be {server, tool, args}");
	raw_field(L, idx, "server");
	raw_field(L, idx, "tool");
	raw_field(L, idx, "args");
	if (lua_type(L, -3) != LUA_TSTRING || lua_type(L, -2) != LUA_TSTRING ||
	    !(lua_isnil(L, -1) || lua_istable(L, -1)))
		put_fail(L, b, "upstream calls take a server name, a tool name (strings) and a table");
	const char *server = lua_tolstring(L, -3, &sl), *tool = lua_tolstring(L, -2, &tl);
	if (memchr(server, 0, sl) || memchr(server, '\n', sl) || memchr(tool, 0, tl) ||
	    memchr(tool, '\n', tl))
		put_fail(L, b, "upstream server and tool names are strings without NUL or newline characters");
	char *args = NULL;
	if (!lua_isnil(L, -1)) {
		/* bounded by what it expands to (a table written twice counts twice), so it stops
		 * as soon as the calls' arguments together pass the host's bounds */
		uint64_t most = (uint64_t)c->cfg->max_call_nodes, used = 0;
		mb_json_limits lim = c->json_lim;
		lim.max_nodes = b->nodes < most ? most - b->nodes : 1;
		lim.node_limit_name = "max_call_nodes";
		size_t room = b->n + sl + tl + 3 < b->limit ? b->limit - b->n - sl - tl - 3 : 0;
		lim.max_output_bytes = room ? room : 1;
		lim.output_limit_name = "max_message_bytes";
		args = mb_json_encode_n(L, lua_gettop(L), &lim, 0, &al, &used, err, sizeof err);
		if (!args && strstr(err, "max_message_bytes")) {
			snprintf(msg, sizeof msg, "%.100s.%.100s: the arguments of the upstream calls add "
				 "up to more than %zu bytes (max_message_bytes)", server, tool, b->limit);
			put_fail(L, b, msg);
		}
		if (!args && strstr(err, "max_call_nodes")) {
			snprintf(msg, sizeof msg, "%.100s.%.100s: the arguments of the upstream calls are "
				 "too large: %s", server, tool, err);
			put_fail(L, b, msg);
		}
		if (!args) {
			snprintf(msg, sizeof msg, "%.100s.%.100s: arguments: %s", server, tool, err);
			put_fail(L, b, msg);
		}
		/* tokens minted in this execution: the vault learns them only when it ends */
		char *restored = NULL;
		size_t rl = 0;
		int rc = mb_sandbox_pii_restore_json(c, args, al, b->limit, &restored, &rl);
		if (rc != 0) {
			free(args);
			if (rc < 0)
				put_fail(L, b, "out of memory");
			snprintf(msg, sizeof msg, "%.100s.%.100s: the arguments of the upstream calls add up to "
				 "more than %zu bytes (max_message_bytes) once their tokens are restored",
				 server, tool, b->limit);
			put_fail(L, b, msg);
		}
		if (restored) {
			free(args);
			args = restored;
			al = rl;
		}
		b->nodes += used;
	}
	if (b->n + sl + tl + al + 3 > b->limit) {
		free(args);
		snprintf(msg, sizeof msg, "%.100s.%.100s: the arguments of the upstream calls add up to "
			 "more than %zu bytes (max_message_bytes)", server, tool, b->limit);
		put_fail(L, b, msg);
	}
	int bad = (b->n && rb_put(b, "\n", 1)) || rb_put(b, server, sl) || rb_put(b, "", 1) ||
		  rb_put(b, tool, tl) || rb_put(b, "", 1) || (args && rb_put(b, args, al));
	free(args);
	if (bad)
		put_fail(L, b, err);
	lua_pop(L, 3);
}

static int in_task(lua_State *L)
{
	if (!lua_isyieldable(L))
		return 0;
	lua_rawgetp(L, LUA_REGISTRYINDEX, &task_key);
	if (!lua_istable(L, -1)) {
		lua_pop(L, 1);
		return 0;
	}
	lua_pushthread(L);
	int yes = lua_rawget(L, -2) == LUA_TBOOLEAN;
	lua_pop(L, 2);
	return yes;
}

/* Resumed by the scheduler with (ok, value | message). */
static int call_cont(lua_State *L, int status, lua_KContext ctx)
{
	(void)status;
	(void)ctx;
	if (!lua_toboolean(L, -2))
		return lua_error(L); /* the message at the top */
	return 1;
}

/* The call: server, tool and args at 1..3 */
static int do_call(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TSTRING);
	luaL_checktype(L, 2, LUA_TSTRING);
	if (!lua_isnoneornil(L, 3))
		luaL_checktype(L, 3, LUA_TTABLE);
	if (in_task(L)) {
		lua_pushlightuserdata(L, (void *)&marker);
		push_spec(L, 1, 2, 3);
		return lua_yieldk(L, 2, 0, call_cont);
	}
	push_spec(L, 1, 2, 3);
	rbuf *b = rbuf_new(L);
	put_item(L, lua_gettop(L) - 1, b);
	size_t n;
	char *payload = rbuf_take(b, &n);
	mb_sandbox_host_call_raw(L, "upstream_call", payload, n);
	lua_getfield(L, -1, "v");
	return 1;
}

/* mcp.call(server, tool, args) */
static int sb_call(lua_State *L)
{
	lua_settop(L, 3);
	return do_call(L);
}

/* servers.<server>.<tool>(args), also servers.<server>:<tool>(args) */
static int tool_fn(lua_State *L)
{
	if (lua_istable(L, 1) && lua_getmetatable(L, 1)) { /* called with ':' */
		int is_proxy = lua_rawgetp(L, -1, &proxy_key) == LUA_TBOOLEAN;
		lua_pop(L, 2);
		if (is_proxy)
			lua_remove(L, 1);
	}
	if (!lua_isnoneornil(L, 1) && !lua_istable(L, 1))
		return luaL_typeerror(L, 1, "table");
	if (lua_gettop(L) > 1)
		return luaL_error(L, "servers.%s.%s: takes one table of arguments, got %d values",
				  lua_tostring(L, lua_upvalueindex(1)), lua_tostring(L, lua_upvalueindex(2)),
				  lua_gettop(L));
	lua_settop(L, 1);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_pushvalue(L, lua_upvalueindex(2));
	lua_rotate(L, 1, 2); /* server, tool, args */
	return do_call(L);
}

/* servers.<server>.<tool> -> a function */
static int proxy_index(lua_State *L)
{
	if (lua_type(L, 2) != LUA_TSTRING)
		return luaL_error(L, "servers.%s[...]: tool names are strings",
				  lua_tostring(L, lua_upvalueindex(1)));
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_pushvalue(L, 2);
	lua_pushcclosure(L, tool_fn, 2);
	return 1;
}

static int readonly(lua_State *L)
{
	return luaL_error(L, "servers is read-only: call servers.<server>.<tool>(args)");
}

/* servers.<server> -> a table whose fields are the server's tools */
static int servers_index(lua_State *L)
{
	if (lua_type(L, 2) != LUA_TSTRING)
		return luaL_error(L, "servers[...]: server names are strings");
	lua_newtable(L);
	lua_createtable(L, 0, 4);
	lua_pushvalue(L, 2);
	lua_pushcclosure(L, proxy_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, readonly);
	lua_setfield(L, -2, "__newindex");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_pushboolean(L, 1);
	lua_rawsetp(L, -2, &proxy_key); /* tells tool_fn that a ':' call passed this table */
	lua_setmetatable(L, -2);
	return 1;
}

/* mcp.tools([server]): without a server, the configured servers ({name, lua_name, state,
 * tools}); with one, its callable tools ({name, lua_name, summary, read_only}), by name. */
static int sb_tools(lua_State *L)
{
	return mb_sandbox_host_call_opt(L, "upstream_tools", "server");
}

/* pairs(servers): each configured server's name and its table (as servers.<name> gives it) */
static int servers_pairs(lua_State *L)
{
	lua_settop(L, 1);
	lua_pushcfunction(L, sb_tools);
	lua_call(L, 0, 1); /* [2] the list of servers */
	lua_newtable(L);   /* [3] name -> proxy */
	lua_Integer n = (lua_Integer)luaL_len(L, 2);
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, 2, i);
		if (lua_getfield(L, -1, "name") == LUA_TSTRING) {
			lua_pushcfunction(L, servers_index);
			lua_pushvalue(L, 1);
			lua_pushvalue(L, -3);
			lua_call(L, 2, 1);
			lua_rawset(L, 3);
		} else {
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
	}
	lua_pushvalue(L, lua_upvalueindex(1)); /* next, taken when the sandbox was opened */
	lua_pushvalue(L, 3);
	lua_pushnil(L);
	return 3;
}

/* Normalizes a spec item ({server, tool, args} or named fields) at idx; pushes the spec. */
static void item_spec(lua_State *L, int idx, lua_Integer i)
{
	int s = lua_getfield(L, idx, "server");
	if (s == LUA_TNIL) {
		lua_pop(L, 1);
		lua_rawgeti(L, idx, 1);
		lua_rawgeti(L, idx, 2);
		lua_rawgeti(L, idx, 3);
	} else {
		lua_getfield(L, idx, "tool");
		lua_getfield(L, idx, "args");
	}
	if (lua_type(L, -3) != LUA_TSTRING || lua_type(L, -2) != LUA_TSTRING ||
	    !(lua_isnil(L, -1) || lua_istable(L, -1)))
		luaL_error(L, "mcp.parallel: item %d must be a function or {server, tool, args} "
			   "(strings and a table)", (int)i);
	int top = lua_gettop(L);
	push_spec(L, top - 2, top - 1, top);
	lua_replace(L, top - 2);
	lua_pop(L, 2);
}

/* mcp.parallel(list): upvalues 1 = coroutine.create, 2 = coroutine.resume (the sandbox's) */
static int sb_parallel(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
	if (n > MAX_PARALLEL_ITEMS)
		return luaL_error(L, "mcp.parallel: %d items, more than %d", (int)n, MAX_PARALLEL_ITEMS);
	lua_createtable(L, (int)n, 0); /* 2: results, a JSON array even when empty or with holes */
	if (mb_json_mark_array(L, -1) != 0)
		return luaL_error(L, "mcp.parallel: could not mark the results as an array");
	lua_createtable(L, (int)n, 0); /* 3: i -> coroutine (functions) */
	lua_createtable(L, (int)n, 0); /* 4: i -> spec waiting for its answer */
	lua_createtable(L, (int)n, 0); /* 5: i -> {ok, value} to resume with */
	mb_sandbox_registry_weak(L, &task_key); /* 6: task set */
	for (lua_Integer i = 1; i <= n; i++) {
		int t = lua_rawgeti(L, 1, i);
		if (t == LUA_TFUNCTION) {
			lua_pushvalue(L, lua_upvalueindex(1));
			lua_insert(L, -2);
			lua_call(L, 1, 1); /* coroutine.create(fn) */
			lua_pushvalue(L, -1);
			lua_pushboolean(L, 1);
			lua_rawset(L, 6);
			lua_rawseti(L, 3, i);
			lua_createtable(L, 1, 0); /* start it with no arguments */
			lua_rawseti(L, 5, i);
		} else if (t == LUA_TTABLE) {
			item_spec(L, lua_gettop(L), i);
			lua_rawseti(L, 4, i);
			lua_pop(L, 1);
		} else {
			return luaL_error(L, "mcp.parallel: item %d must be a function or {server, tool, args}, "
					  "got %s", (int)i, luaL_typename(L, -1));
		}
	}
	for (;;) {
		/* run every function that has something to resume with */
		for (lua_Integer i = 1; i <= n; i++) {
			if (lua_rawgeti(L, 5, i) != LUA_TTABLE) {
				lua_pop(L, 1);
				continue;
			}
			int resume_args = lua_gettop(L);
			lua_pushnil(L);
			lua_rawseti(L, 5, i);
			lua_pushvalue(L, lua_upvalueindex(2));
			lua_rawgeti(L, 3, i);
			int nargs = (int)lua_rawlen(L, resume_args);
			for (int k = 1; k <= nargs; k++)
				lua_rawgeti(L, resume_args, k);
			int base = lua_gettop(L) - nargs - 2;
			lua_call(L, nargs + 1, LUA_MULTRET); /* resume(co, ...) -> ok, ... */
			int nres = lua_gettop(L) - base;
			if (!lua_toboolean(L, base + 1)) {
				if (lua_type(L, base + 2) == LUA_TSTRING)
					return luaL_error(L, "mcp.parallel: item %d: %s", (int)i, lua_tostring(L, base + 2));
				lua_pushvalue(L, base + 2);
				return lua_error(L);
			}
			lua_rawgeti(L, 3, i);
			int dead = lua_status(lua_tothread(L, -1)) != LUA_YIELD;
			lua_pop(L, 1);
			if (!dead && nres == 3 && lua_touserdata(L, base + 2) == (void *)&marker) {
				lua_pushvalue(L, base + 3);
				lua_rawseti(L, 4, i); /* it waits for this call */
			} else if (!dead) {
				return luaL_error(L, "mcp.parallel: item %d yielded something that is not an "
						  "upstream call (do not yield from its function directly)", (int)i);
			} else {
				if (nres >= 2)
					lua_pushvalue(L, base + 2);
				else
					lua_pushnil(L);
				lua_rawseti(L, 2, i);
			}
			lua_settop(L, resume_args - 1);
		}
		/* collect the calls of this round */
		lua_newtable(L); /* batch calls */
		int calls = lua_gettop(L);
		lua_newtable(L); /* k -> i */
		int which = calls + 1;
		lua_Integer k = 0;
		for (lua_Integer i = 1; i <= n; i++) {
			if (lua_rawgeti(L, 4, i) == LUA_TTABLE) {
				k++;
				lua_rawseti(L, calls, k);
				lua_pushinteger(L, i);
				lua_rawseti(L, which, k);
				lua_pushnil(L);
				lua_rawseti(L, 4, i);
			} else {
				lua_pop(L, 1);
			}
		}
		if (k == 0) {
			lua_settop(L, 2);
			return 1;
		}
		rbuf *b = rbuf_new(L);
		for (lua_Integer j = 1; j <= k; j++) {
			lua_rawgeti(L, calls, j);
			put_item(L, lua_gettop(L), b);
			lua_pop(L, 1);
		}
		size_t plen;
		char *payload = rbuf_take(b, &plen);
		lua_pop(L, 1); /* the empty box */
		mb_sandbox_host_call_raw(L, "upstream_batch", payload, plen);
		int replies = lua_gettop(L);
		for (lua_Integer j = 1; j <= k; j++) {
			lua_rawgeti(L, which, j);
			lua_Integer i = lua_tointeger(L, -1);
			lua_pop(L, 1);
			if (lua_rawgeti(L, replies, j) != LUA_TTABLE)
				return luaL_error(L, "mcp.parallel: bad reply from the server");
			int r = lua_gettop(L);
			lua_getfield(L, r, "ok");
			int ok = lua_toboolean(L, -1);
			lua_pop(L, 1);
			lua_getfield(L, r, ok ? "v" : "e");
			int is_fn = lua_rawgeti(L, 3, i) == LUA_TTHREAD;
			lua_pop(L, 1);
			if (is_fn) {
				lua_createtable(L, 2, 0);
				lua_pushboolean(L, ok);
				lua_rawseti(L, -2, 1);
				lua_rotate(L, -2, 1);
				lua_rawseti(L, -2, 2);
				lua_rawseti(L, 5, i);
			} else if (ok) {
				lua_rawseti(L, 2, i);
			} else {
				return luaL_error(L, "mcp.parallel: item %d: %s", (int)i,
						  lua_isstring(L, -1) ? lua_tostring(L, -1) : "failed");
			}
			lua_settop(L, r - 1);
		}
		lua_settop(L, 6);
	}
}

void mb_sandbox_upstream_mcp(lua_State *L)
{
	/* [mcp, create, resume] at the top of the stack */
	lua_pushcfunction(L, sb_call);
	lua_setfield(L, -4, "call");
	lua_pushcclosure(L, sb_parallel, 2);
	lua_setfield(L, -2, "parallel");
	lua_pushcfunction(L, sb_tools);
	lua_setfield(L, -2, "tools");
}

int mb_sandbox_mcp_open(lua_State *L)
{
	/* [the globals table (or the table they are made in), the sandbox's next] */
	lua_newtable(L);
	lua_createtable(L, 0, 4);
	lua_pushcfunction(L, servers_index);
	lua_setfield(L, -2, "__index");
	lua_pushvalue(L, -3);
	lua_pushcclosure(L, servers_pairs, 1);
	lua_setfield(L, -2, "__pairs");
	lua_pushcfunction(L, readonly);
	lua_setfield(L, -2, "__newindex");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	lua_setfield(L, -3, "servers");
	lua_pop(L, 1); /* next */
	return 0;
}
