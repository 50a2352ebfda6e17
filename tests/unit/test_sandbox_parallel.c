/* test_sandbox_parallel.c - mcp.parallel in-process, against a stand-in host that answers the
 * upstream host calls at once: result order and shapes, how calls are batched per round, the
 * error messages (and where they point), argument checks and limits, yields and coroutine games
 * inside tasks, and sandbox code trying to tamper with the scheduler (replacing the globals it
 * could use, before its first use and after). The real upstream path is in
 * tests/integration/gateway.test.mjs and tests/security/gateway.test.mjs.
 *
 * The stand-in answers every call of tool "fail" with the error "<server>.fail: it failed",
 * "nil" with null, and any other with its arguments (or "<server>.<tool>" without any). */
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "config.h"
#include "json.h"
#include "sandbox.h"
#include "sandbox_setup.h"
#include "unit.h"

static mb_config cfg;

typedef struct {
	int calls;
	char log[16384]; /* one line per host call: name, then the items with NUL shown as '|' */
	size_t log_len;
} host;

static void logf_(host *h, const char *s, size_t n)
{
	if (h->log_len + n + 1 >= sizeof h->log)
		return;
	for (size_t i = 0; i < n; i++)
		h->log[h->log_len++] = s[i] ? s[i] : '|';
	h->log[h->log_len] = 0;
}

/* Appends the answer to the item "server\0tool\0args" to b (as a batch entry when batch). */
static void answer(const char *item, size_t n, int batch, char *b, size_t cap, int *failed)
{
	const char *server = item, *tool = server + strlen(server) + 1;
	const char *args = tool + strlen(tool) + 1;
	size_t al = n - (size_t)(args - item);
	size_t len = strlen(b);
	*failed = strcmp(tool, "fail") == 0;
	if (*failed)
		snprintf(b + len, cap - len, batch ? "{\"ok\":false,\"e\":\"%s.fail: it failed\"}" : "%s.fail: it failed",
			 server);
	else if (strcmp(tool, "nil") == 0)
		snprintf(b + len, cap - len, batch ? "{\"ok\":true,\"v\":null}" : "{\"v\":null}");
	else if (al)
		snprintf(b + len, cap - len, batch ? "{\"ok\":true,\"v\":%.*s}" : "{\"v\":%.*s}", (int)al, args);
	else
		snprintf(b + len, cap - len, batch ? "{\"ok\":true,\"v\":\"%s.%s\"}" : "{\"v\":\"%s.%s\"}",
			 server, tool);
}

static int fake_host(void *ud, const char *name, const char *args, size_t len, char **reply,
		     size_t *reply_len)
{
	host *h = ud;
	h->calls++;
	logf_(h, name, strlen(name));
	logf_(h, ":", 1);
	logf_(h, args, len);
	logf_(h, "\n", 1);
	size_t cap = 64 + len * 2 + 64 * (len + 1);
	char *b = calloc(1, cap);
	int failed = 0;
	if (strcmp(name, "upstream_call") == 0) {
		char *item = malloc(len + 1);
		memcpy(item, args, len);
		item[len] = 0;
		answer(item, len, 0, b, cap, &failed);
		free(item);
	} else if (strcmp(name, "upstream_batch") == 0) {
		strcpy(b, "[");
		size_t pos = 0;
		while (pos < len) {
			const char *nl = memchr(args + pos, '\n', len - pos);
			size_t end = nl ? (size_t)(nl - args) : len;
			char *item = malloc(end - pos + 1);
			memcpy(item, args + pos, end - pos);
			item[end - pos] = 0;
			if (pos)
				strcat(b, ",");
			answer(item, end - pos, 1, b, cap, &failed);
			free(item);
			failed = 0;
			pos = end + 1;
		}
		strcat(b, "]");
	} else {
		strcpy(b, "unexpected host call");
		failed = 1;
	}
	*reply = b;
	*reply_len = strlen(b);
	return failed ? 1 : 0;
}

typedef struct {
	mb_exec_result r;
	host h;
} run_out;

static run_out *run_with(const char *code, uint64_t instr)
{
	static run_out o;
	memset(&o, 0, sizeof o);
	mb_budget b;
	mb_budget_init(&b, 32u << 20, instr, 5000);
	mb_exec_request req = { .code = code, .code_len = strlen(code), .timeout_ms = 5000,
				.memory_bytes = 32u << 20, .instruction_limit = instr, .cfg = &cfg,
				.host_call = fake_host, .host_ud = &o.h };
	mb_sandbox_run(&req, &b, &o.r);
	return &o;
}

static run_out *run(const char *code)
{
	return run_with(code, 50000000);
}

static void expect_result(const char *code, const char *json)
{
	run_out *o = run(code);
	if (!o->r.success || !o->r.result_json || strcmp(o->r.result_json, json) != 0)
		fprintf(stderr, "  code: %s\n  got: %s\n", code, o->r.success ? o->r.result_json : o->r.error);
	CHECK(o->r.success);
	CHECK_STR(o->r.result_json, json);
	mb_exec_result_free(&o->r);
}

/* The whole error message of a failed run. */
static void expect_error(const char *code, const char *type, const char *msg)
{
	run_out *o = run(code);
	if (o->r.success || strcmp(o->r.error_type, type) != 0 || strcmp(o->r.error, msg) != 0)
		fprintf(stderr, "  code: %s\n  got %s: %s\n", code, o->r.success ? "success" : o->r.error_type,
			o->r.success ? o->r.result_json : o->r.error);
	CHECK(!o->r.success);
	CHECK_STR(o->r.error_type, type);
	CHECK_STR(o->r.error, msg);
	mb_exec_result_free(&o->r);
}

TEST(results_in_item_order_one_host_call_per_round)
{
	run_out *o = run("return mcp.parallel{"
			 "  {'a', 'echo', {n = 1}},"
			 "  function() local x = servers.b.echo{n = 2} return servers.b.echo{n = x.n + 10} end,"
			 "  {server = 'c', tool = 'echo', args = {n = 3}},"
			 "  function() return 42 end,"
			 "  function() return pcall(servers.d.fail, {}) end,"
			 "  {'e', 'bare'},"
			 "  function() return end,"
			 "  {'f', 'nil', {}},"
			 "}");
	CHECK(o->r.success);
	/* the results are a JSON array, holes (item 7 returned nothing) as null (issue 31) */
	CHECK_STR(o->r.result_json, "[{\"n\":1},{\"n\":12},{\"n\":3},42,false,\"e.bare\",null,null]");
	CHECK(o->h.calls == 2);
	/* round 1: the specs and the tasks' first calls, in item order; round 2: the second call */
	CHECK_STR(o->h.log, "upstream_batch:a|echo|{\"n\":1}\nb|echo|{\"n\":2}\nc|echo|{\"n\":3}\n"
			    "d|fail|{}\ne|bare|\nf|nil|{}\n"
			    "upstream_batch:b|echo|{\"n\":12}\n");
	mb_exec_result_free(&o->r);
	expect_result("local r = mcp.parallel{} return {#r, next(r) == nil}", "[0,true]");
	expect_result("local r = mcp.parallel{function() end, function() return 1, 2 end} return {#r, r[2]}",
		      "[2,1]");
	/* no calls at all: no host call */
	o = run("return #mcp.parallel{function() return 1 end}");
	CHECK(o->r.success && o->h.calls == 0);
	mb_exec_result_free(&o->r);
	/* 300 tasks of 3 rounds each: three host calls */
	o = run("local c = {} for i = 1, 300 do c[i] = function() local s = 0 "
		"for k = 1, 3 do s = s + servers.x.echo{k = k}.k end return s + i end end "
		"local r = mcp.parallel(c) local ok = true for i = 1, 300 do ok = ok and r[i] == 6 + i end "
		"return {#r, ok}");
	CHECK_STR(o->r.result_json, "[300,true]");
	CHECK(o->h.calls == 3);
	mb_exec_result_free(&o->r);
}

TEST(first_failure_in_item_order)
{
	expect_error("return mcp.parallel{{'a', 'echo'}, {'b', 'fail'}, {'c', 'fail'}}", "runtime",
		     "code:1: mcp.parallel: item 2: b.fail: it failed");
	expect_error("return mcp.parallel{function() return servers.a.echo{} end,\n"
		     "function() return servers.b.fail{} end, {'c', 'fail'}}", "runtime",
		     "code:1: mcp.parallel: item 3: c.fail: it failed");
	expect_error("local x = 1\nreturn mcp.parallel{function() return servers.a.echo{} end,\n"
		     "function() return servers.b.fail{} end}", "runtime",
		     "code:2: mcp.parallel: item 2: b.fail: it failed");
	expect_error("return mcp.parallel{function() error('boom') end}", "runtime",
		     "code:1: mcp.parallel: item 1: code:1: boom");
	/* through pcall the caller is pcall: no position */
	expect_result("return {pcall(mcp.parallel, {{'a', 'echo'}, {'b', 'fail'}})}",
		      "[false,\"mcp.parallel: item 2: b.fail: it failed\"]");
	expect_result("local p = mcp.parallel return {pcall(function() return p{{'b', 'fail'}} end)}",
		      "[false,\"code:1: mcp.parallel: item 1: b.fail: it failed\"]");
	/* error values that are not strings pass through untouched */
	expect_result("local e = {code = 7} local ok, got = pcall(mcp.parallel, {function() error(e) end}) "
		      "return {ok, got == e}", "[false,true]");
	expect_result("return {pcall(mcp.parallel, {function() error(12) end})}", "[false,12]");
	expect_result("local e = setmetatable({}, {__concat = function() return 'concat ran' end, "
		      "__tostring = function() return 'tostring ran' end}) "
		      "local ok, got = pcall(mcp.parallel, {function() error(e) end}) return {ok, got == e}",
		      "[false,true]");
	/* a failed task stops the others: later items are not resumed */
	expect_result("local n = 0 local ok, e = pcall(mcp.parallel, {function() error('x', 0) end, "
		      "function() n = n + 1 end}) return {ok, e, n}",
		      "[false,\"mcp.parallel: item 1: x\",0]");
}

TEST(argument_checks_and_limits)
{
	expect_error("return mcp.parallel()", "runtime", "code:1: bad argument #1 to 'parallel' (table expected, got no value)");
	expect_error("return mcp.parallel('x')", "runtime", "code:1: bad argument #1 to 'parallel' (table expected, got string)");
	expect_error("return mcp.parallel{42}", "runtime",
		     "code:1: mcp.parallel: item 1 must be a function or {server, tool, args}, got number");
	expect_error("return mcp.parallel{function() end, 'x'}", "runtime",
		     "code:1: mcp.parallel: item 2 must be a function or {server, tool, args}, got string");
	expect_error("return mcp.parallel{{server = 1, tool = 'x'}}", "runtime",
		     "code:1: mcp.parallel: item 1 must be a function or {server, tool, args} (strings and a table)");
	expect_error("return mcp.parallel{{'a', 'b', 'c'}}", "runtime",
		     "code:1: mcp.parallel: item 1 must be a function or {server, tool, args} (strings and a table)");
	expect_error("return mcp.parallel{{'a'}}", "runtime",
		     "code:1: mcp.parallel: item 1 must be a function or {server, tool, args} (strings and a table)");
	expect_error("local c = {} for i = 1, 100001 do c[i] = 1 end return mcp.parallel(c)", "runtime",
		     "code:1: mcp.parallel: 100001 items, more than 100000");
	expect_error("return mcp.parallel{{'a\\nb', 'echo'}}", "runtime",
		     "code:1: upstream server and tool names are strings without NUL or newline characters");
	expect_error("return mcp.parallel{{'a', 'echo', {f = print}}}", "runtime",
		     "code:1: a.echo: arguments: cannot encode function at value.f");
	/* the list is read raw: its metatable is not consulted */
	expect_result("local l = setmetatable({{'a', 'echo', {n = 1}}}, {__len = function() return 5 end, "
		      "__index = function() error('read through __index') end}) return mcp.parallel(l)",
		      "[{\"n\":1}]");
	/* named fields of a spec may come through __index, as for any table read */
	expect_result("local spec = setmetatable({}, {__index = {server = 'a', tool = 'echo', args = {k = 1}}}) "
		      "return mcp.parallel{spec}", "[{\"k\":1}]");
	/* the arguments of a batch are bounded by max_message_bytes */
	int64_t keep = cfg.max_message_bytes;
	cfg.max_message_bytes = 4096;
	expect_error("local big = {s = ('x'):rep(1000)} local c = {} for i = 1, 10 do c[i] = {'a', 'echo', big} end "
		     "return mcp.parallel(c)", "runtime",
		     "code:1: a.echo: the arguments of the upstream calls add up to more than 4096 bytes (max_message_bytes)");
	cfg.max_message_bytes = keep;
}

TEST(yields_and_coroutine_games)
{
	expect_error("return mcp.parallel{function() coroutine.yield(1) end}", "runtime",
		     "code:1: mcp.parallel: item 1 yielded something that is not an upstream call (do not yield "
		     "from its function directly)");
	expect_error("return mcp.parallel{function() coroutine.yield(setmetatable({}, {__eq = function() return true end}), "
		     "{server = 'a', tool = 'b'}) end}", "runtime",
		     "code:1: mcp.parallel: item 1 yielded something that is not an upstream call (do not yield "
		     "from its function directly)");
	/* a nested mcp.parallel inside a task, and a call from a coroutine of the task's own, wait */
	run_out *o = run("return mcp.parallel{function() return mcp.parallel{{'a', 'echo', {a = 1}}, "
			 "function() return servers.b.echo{b = 2} end} end, "
			 "function() return coroutine.wrap(function() return servers.c.echo{c = 3} end)() end, "
			 "{'d', 'echo', {d = 4}}}");
	CHECK_STR(o->r.result_json, "[[{\"a\":1},{\"b\":2}],{\"c\":3},{\"d\":4}]");
	CHECK_STR(o->h.log, "upstream_batch:a|echo|{\"a\":1}\nb|echo|{\"b\":2}\n"
			    "upstream_call:c|echo|{\"c\":3}\n"
			    "upstream_batch:d|echo|{\"d\":4}\n");
	mb_exec_result_free(&o->r);
	/* a task resuming another task's coroutine (forging its answer), or closing it */
	expect_error("local T return mcp.parallel({ function() T = coroutine.running() return servers.a.echo({}) end, "
		     "function() return coroutine.resume(T, true, 'forged') end })", "runtime",
		     "code:1: mcp.parallel: item 1: cannot resume dead coroutine");
	expect_error("local T return mcp.parallel({ function() T = coroutine.running() return servers.a.echo({}) end, "
		     "function() return coroutine.close(T) end })", "runtime",
		     "code:1: mcp.parallel: item 1: cannot resume dead coroutine");
	/* a task that steals the marker and yields a forged spec: read raw, refused */
	expect_error("local A return mcp.parallel({ function() A = coroutine.running() mcp.call('a', 't', {}) "
		     "mcp.call('a', 't', {}) end, function() local _, m = coroutine.resume(A, true, 1) "
		     "coroutine.yield(m, setmetatable({}, { __index = function() error('boom') end })) end })",
		     "runtime", "code:1: upstream calls take a server name, a tool name (strings) and a table");
	/* ... or a forged spec that is not a table: that task is dropped */
	expect_result("local A return mcp.parallel({ function() A = coroutine.running() mcp.call('a', 't', {}) "
		      "mcp.call('a', 't', {}) end, function() local _, m = coroutine.resume(A, true, 1) "
		      "coroutine.yield(m, 5) end, function() return 3 end })", "[null,null,3]");
	/* a task's own pcall catches its call's failure, and the error is the host's message */
	expect_result("return mcp.parallel{function() return {pcall(servers.a.fail, {})} end}",
		      "[[false,\"a.fail: it failed\"]]");
	/* the tasks run as coroutines of the sandbox: limits stop them */
	run_out *l = run_with("return mcp.parallel{function() while true do end end}", 2000000);
	CHECK(!l->r.success);
	CHECK_STR(l->r.error_type, "instructions");
	mb_exec_result_free(&l->r);
	l = run_with("return mcp.parallel{function() return pcall(function() while true do end end) end, "
		     "function() return 1 end}", 2000000);
	CHECK(!l->r.success);
	CHECK_STR(l->r.error_type, "instructions");
	mb_exec_result_free(&l->r);
}

/* Sandbox code replaces everything the scheduler could use - before the first mcp.parallel of
 * the execution (when it may be loaded) and after - and the scheduler works as before. */
#define TAMPER \
	"local real = {resume = coroutine.resume, create = coroutine.create} " \
	"local err = error local function boom() err('tampered function called', 0) end " \
	"coroutine.create, coroutine.resume, coroutine.status, coroutine.wrap = boom, boom, boom, boom " \
	"coroutine.running, coroutine.isyieldable, coroutine.yield = boom, boom, boom " \
	"type, rawget, rawlen, rawset, rawequal, select, error, pcall, xpcall = boom, boom, boom, boom, boom, boom, boom, boom, boom " \
	"next, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable = boom, boom, boom, boom, boom, boom, boom " \
	"string.format, string.sub, string.rep, table.concat, table.insert, table.unpack = boom, boom, boom, boom, boom, boom " \
	"json = nil servers_backup = servers "
#define WORK "mcp.parallel{ {'a', 'echo', {n = 1}}, function() return servers.b.echo{n = servers.b.echo{n = 2}.n + 1} end, " \
	"function() return 7 end }"

TEST(tampering_with_the_scheduler)
{
	static const char *const forms[] = {
		/* before the first use */
		"local setmt = setmetatable " TAMPER " local r = " WORK " return {r[1].n, r[2].n, r[3]}",
		/* after a first use */
		"local first = " WORK " " TAMPER " local r = " WORK " return {r[1].n, r[2].n, r[3]}",
		/* globals that raise when read or written */
		"local setmt, mcpp, P = setmetatable, mcp, mcp.parallel " TAMPER " setmt(_G, {__index = function(_, k) "
		"return boom() end, __newindex = boom}) local r = P{ {'a', 'echo', {n = 1}}, function() "
		"return servers_backup.b.echo{n = servers_backup.b.echo{n = 2}.n + 1} end, function() return 7 end } "
		"return {r[1].n, r[2].n, r[3]}",
	};
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
		run_out *o = run(forms[i]);
		if (!o->r.success || strcmp(o->r.result_json, "[1,3,7]") != 0)
			fprintf(stderr, "  form %zu: %s\n", i, o->r.success ? o->r.result_json : o->r.error);
		CHECK(o->r.success);
		CHECK_STR(o->r.result_json, "[1,3,7]");
		mb_exec_result_free(&o->r);
	}
	/* error messages are made without the replaced functions */
	expect_result("local P = mcp.parallel " TAMPER " local r = {} "
		      "local co = real.create(function() return P{{'a', 'fail'}} end) "
		      "local ok, e = real.resume(co) return {ok, e}",
		      "[false,\"code:1: mcp.parallel: item 1: a.fail: it failed\"]");
	expect_result("local P = mcp.parallel " TAMPER " local co = real.create(function() return P{42} end) "
		      "return {real.resume(co)}",
		      "[false,\"code:1: mcp.parallel: item 1 must be a function or {server, tool, args}, got number\"]");
	/* the string metatable's methods are not used */
	expect_result("local mt = getmetatable('') local s = string "
		      "for k in next, s do s[k] = function() error('string.' .. k .. ' called', 0) end end "
		      "local ok, e = pcall(mcp.parallel, {{'a', 'fail'}}) return {ok, e}",
		      "[false,\"mcp.parallel: item 1: a.fail: it failed\"]");
}

int main(void)
{
	if (sandbox_setup(&cfg) != 0)
		return 1;
	RUN(results_in_item_order_one_host_call_per_round);
	RUN(first_failure_in_item_order);
	RUN(argument_checks_and_limits);
	RUN(yields_and_coroutine_games);
	RUN(tampering_with_the_scheduler);
	return UNIT_END();
}
