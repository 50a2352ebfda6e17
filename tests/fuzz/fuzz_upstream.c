/* fuzz_upstream.c - libFuzzer target: a hostile upstream MCP server's stdout, fed to moonbox's
 * MCP client (lua/mcp/upstream.lua, upstream_transport.lua, and the catalog import of the tools
 * it lists).
 *
 * The host runs with one stdio upstream in mcpServers. mb.spawn is replaced, in the host state,
 * by a stand-in that records the options the transport passes (on_line, on_stderr, on_exit) and
 * returns a process object whose stdin is a buffer; everything above it is the real client:
 * upstream_transport.open_stdio's line handler (JSON decode, "not JSON-RPC" reports), the
 * handshake (initialize, notifications/initialized, paged tools/list, catalog import), requests
 * from the upstream (ping and the rest), notifications (progress, log, list_changed), and tool
 * calls made as sandbox code makes them (upstream.call, upstream.batch, upstream.abandon).
 *
 * Every input restarts the client (a new generation, request ids from 1, timers stopped). The
 * input is the child's stdout, cut into lines as src/host_proc.c does (at "\n", one trailing
 * "\r" removed, a line above max_message_bytes=1024 reported as dropped). A line starting with
 * byte 0x01 is an event of the harness instead: "C<tool>" a tool call from code, "B" two calls
 * in one mcp.parallel batch, "A" the execution ends (its calls are cancelled), "E<text>" a
 * stderr line, "X<byte>" the process exits with that status. Invariants, any violation aborts:
 *  - no Lua error escapes or is swallowed into the log ("upstream: ..." from the coroutine
 *    runner), and the client never ends in backoff because of a Lua runtime error of its own
 *    ("while starting: <file>.lua:N: ...");
 *  - the client's state is one of starting, ready, backoff; everything it writes to the
 *    child's stdin is lines of JSON-RPC 2.0 objects;
 *  - every tool call answers {v = value} with a value that encodes as JSON, or nil and a
 *    message; statistics and metrics text render, the metrics without raw newlines in labels;
 *  - the catalog answers search_tools and list_tool_categories with valid JSON (checked through
 *    the protocol by fuzz_host.h's io.send).
 * Build and run: tests/fuzz/run.sh fuzz_upstream
 * FUZZ_OPTIONS: -detect_leaks=0
 * (the host keeps the client and catalog between inputs; ASan still checks every access)
 */
#include "fuzz_host.h"

static const char setup[] =
	"FZ_TIMERS = {}\n"
	"local real_timer = mb.timer\n"
	"mb.timer = function(ms, fn)\n"
	"  local h = real_timer(ms, fn)\n"
	"  FZ_TIMERS[#FZ_TIMERS + 1] = h\n"
	"  return h\n"
	"end\n"
	"mb.spawn = function(opts)\n"
	"  FZ_OPTS = opts\n"
	"  FZ_WRITTEN = FZ_WRITTEN or {}\n"
	"  local p = {}\n"
	"  function p:pid() return 4242 end\n"
	"  function p:write(data) FZ_WRITTEN[#FZ_WRITTEN + 1] = data return true end\n"
	"  function p:queued_bytes() return 0 end\n"
	"  function p:close() FZ_CLOSED = true end\n"
	"  function p:kill() FZ_CLOSED = true return true end\n"
	"  function p:running() return not FZ_CLOSED end\n"
	"  return p\n"
	"end\n"
	"local up = require('mcp.upstream')\n"
	"FZ_S = assert(up.by_name.up, 'no upstream configured')\n"
	"return true\n";

/* Ends what the previous input left (pending calls, timers) and starts a fresh client. */
static const char restart[] =
	"local s = FZ_S\n"
	"s.generation = s.generation + 1\n"
	"for _, h in ipairs(FZ_TIMERS) do h:stop() end\n"
	"FZ_TIMERS = {}\n"
	"s.restart_timer, s.sweep_timer, s.refresh_timer = nil, nil, nil\n"
	"s:fail_pending('the fuzz harness restarts the client')\n"
	"s:wake_waiters()\n"
	"s.t, s.pid = nil, nil\n"
	"s.next_id, s.failures, s.resend = 0, 0, {}\n"
	"require('mcp.catalog').remove('upstream:up') -- each input imports its tools afresh\n"
	"s.tools, s.tool_by_name, s.tool_by_ident, s.callable = {}, {}, {}, 0\n"
	"FZ_WRITTEN, FZ_CLOSED, FZ_OPTS, FZ_RESULTS = {}, false, nil, {}\n"
	"FZ_ENTRY = { }\n"
	"FZ_REQUEST = { entry = FZ_ENTRY, tenant = 'default', progress = function() end }\n"
	"s:start()\n"
	"if not FZ_OPTS then return 'SPAWN NOT CALLED: ' .. tostring(s.state) .. ' ' .. tostring(s.last_error) end\n"
	"return 'ok'\n";

/* One harness event (FZ_EV = the line after the 0x01 byte). */
static const char event[] =
	"local up = require('mcp.upstream')\n"
	"local ev = FZ_EV\n"
	"local k, rest = ev:sub(1, 1), ev:sub(2)\n"
	"local function record(ok, v, err)\n"
	"  FZ_RESULTS[#FZ_RESULTS + 1] = { ok = ok, v = v, err = err }\n"
	"end\n"
	"if k == 'C' then\n"
	"  coroutine.wrap(function() record(pcall(up.call, FZ_REQUEST, 'up', rest, '{\"q\":\"[EMAIL_0123abcd]\"}')) end)()\n"
	"elseif k == 'B' then\n"
	"  coroutine.wrap(function()\n"
	"    local ok, v, err = pcall(up.batch, FZ_REQUEST, { { server = 'up', tool = rest, args = '{}' },\n"
	"      { server = 'up', tool = 'echo', args = '[]' }, 'not a call' })\n"
	"    FZ_RESULTS[#FZ_RESULTS + 1] = { ok = ok, batch = v, err = err }\n"
	"  end)()\n"
	"elseif k == 'A' then\n"
	"  up.abandon(FZ_ENTRY)\n"
	"elseif k == 'E' then\n"
	"  FZ_OPTS.on_stderr(rest)\n"
	"elseif k == 'X' then\n"
	"  FZ_OPTS.on_exit(rest:byte(1) or 0, 0)\n"
	"end\n"
	"return 'ok'\n";

static const char check[] =
	"local s = FZ_S\n"
	"if s.state ~= 'starting' and s.state ~= 'ready' and s.state ~= 'backoff' then\n"
	"  return 'STATE ' .. tostring(s.state)\n"
	"end\n"
	"if type(s.last_error) == 'string' and s.last_error:find('%.lua:%d+:') then\n"
	"  return 'LUA ERROR IN THE CLIENT: ' .. s.last_error\n"
	"end\n"
	"for _, chunk in ipairs(FZ_WRITTEN) do\n"
	"  if chunk:sub(-1) ~= '\\n' then return 'WRITE WITHOUT A LINE END' end\n"
	"  for line in chunk:gmatch('([^\\n]*)\\n') do\n"
	"    local m = mb.json_decode(line)\n"
	"    if type(m) ~= 'table' or m.jsonrpc ~= '2.0' or (m.method == nil and m.id == nil) then\n"
	"      return 'BAD OUTGOING LINE ' .. line:sub(1, 300)\n"
	"    end\n"
	"  end\n"
	"end\n"
	"for i, r in ipairs(FZ_RESULTS) do\n"
	"  if not r.ok then return 'CALL RAISED ' .. tostring(r.v) end\n"
	"  if r.batch then\n"
	"    for _, b in ipairs(r.batch) do\n"
	"      if b.ok and not pcall(mb.json_encode, { v = b.v }) then return 'BATCH VALUE DOES NOT ENCODE' end\n"
	"      if not b.ok and type(b.e) ~= 'string' then return 'BATCH ERROR IS NOT A STRING' end\n"
	"    end\n"
	"  elseif r.v ~= nil then\n"
	"    if type(r.v) ~= 'table' then return 'CALL RESULT IS A ' .. type(r.v) end\n"
	"    local eok, e = pcall(mb.json_encode, r.v)\n"
	"    if not eok then return 'CALL VALUE DOES NOT ENCODE: ' .. tostring(e) end\n"
	"  elseif type(r.err) ~= 'string' or r.err == '' then\n"
	"    return 'CALL FAILED WITHOUT A MESSAGE'\n"
	"  end\n"
	"end\n"
	"local up = require('mcp.upstream')\n"
	"local ok, st = pcall(up.stats)\n"
	"if not ok then return 'STATS RAISED ' .. tostring(st) end\n"
	"if not pcall(mb.json_encode, st) then return 'STATS DO NOT ENCODE' end\n"
	"local mok, mt = pcall(up.metrics_text)\n"
	"if not mok then return 'METRICS RAISED ' .. tostring(mt) end\n"
	"for line in mt:gmatch('[^\\n]+') do\n"
	"  if not (line:find('^#') or line:find('^moonbox_upstream_[%w_]+{.-} %-?%d+$')) then\n"
	"    return 'BAD METRICS LINE ' .. line\n"
	"  end\n"
	"end\n"
	"return 'ok'\n";

static void run(const char *chunk, const char *what)
{
	const char *r = fz_lua(chunk);
	if (strcmp(r, "ok") != 0)
		FZ_FAIL("%s: %s", what, r);
	fz_check_bad(what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fz.host) {
		char *extra[] = { "--max-message-bytes", "1024", "--mcp-servers",
				  "{\"up\":{\"command\":\"/bin/false\",\"allowedTools\":[\"*\"],"
				  "\"deniedTools\":[\"forbidden*\"],\"maxCalls\":50,\"timeoutMs\":60000}}", NULL };
		fz_host_start("upstream", extra);
		if (strcmp(fz_lua(setup), "true") != 0)
			FZ_FAIL("setup");
	}
	fz_begin();
	run(restart, "restart");
	lua_State *L = mb_host_state(fz.host);
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		size_t m = n;
		if (m && p[m - 1] == '\r')
			m--;
		if (m && p[0] == 1) {
			lua_pushlstring(L, p + 1, m - 1);
			lua_setglobal(L, "FZ_EV");
			run(event, "event");
		} else {
			/* what host_proc.c hands on_line: the line, or nil and a message when too long */
			lua_getglobal(L, "FZ_OPTS");
			lua_getfield(L, -1, "on_line");
			if (m > (size_t)fz.cfg.max_message_bytes) {
				lua_pushnil(L);
				lua_pushliteral(L, "a line of more than 1024 bytes was discarded (max_message_bytes=1024)");
			} else {
				lua_pushlstring(L, p, m);
				lua_pushnil(L);
			}
			if (lua_pcall(L, 2, 0, 0) != LUA_OK)
				FZ_FAIL("on_line raised: %s", lua_tostring(L, -1));
			lua_pop(L, 1);
			fz_check_bad("on_line");
		}
		p += n + 1;
	}
	run(check, "after the input");
	fz_line("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"search_tools\","
		"\"arguments\":{\"query\":\"echo\",\"category\":\"up\"}}}");
	fz_line("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"list_tool_categories\","
		"\"arguments\":{}}}");
	fz_check_bad("catalog after the upstream");
	uv_run(uv_default_loop(), UV_RUN_NOWAIT); /* closes the timers stopped at the restart */
	return 0;
}
