-- tests/lua/test_server.lua - JSON-RPC dispatch and the MCP lifecycle (lua/mcp/server.lua),
-- driven through the entry table C calls (handle_line, on_notify, on_host_call, on_session_end,
-- handle_oversize; docs/host-api.md). Each handle_line runs in its own coroutine, as in the host;
-- mb.wait yields it until the test resumes it with the execution's result, so cancellation,
-- notifications, host calls and requests to the client happen while an execution "runs". What
-- the server sends is recorded after a round trip through the JSON codec (tests/lua/harness.lua).
-- End to end: tests/integration/raw.test.mjs, client_requests.test.mjs, security/http.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_server.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_has, check_match = H.check, H.check_has, H.check_match
local NULL = H.NULL

local m = H.new_mb({ tools_page_size = 3 })
local jobs, cancelled, replies = {}, {}, {}
m.submit = function(spec)
  jobs[#jobs + 1] = spec
  return 100 + #jobs
end
m.wait = function(job) return coroutine.yield({ waiting = job }) end
m.cancel = function(job) cancelled[#cancelled + 1] = job return true end
m.host_reply = function(job, seq, ok, text) replies[#replies + 1] = { job = job, seq = seq, ok = ok, text = text } end

local globals_before = {}
for k in pairs(_G) do globals_before[k] = true end
local tools = H.load_tools()
local server = require("mcp.server")
local new_globals = {}
for k in pairs(_G) do if not globals_before[k] then new_globals[#new_globals + 1] = k end end
local function up_calls() return tools.upstream.calls end

check("entry table", { type(server.handle_line), type(server.handle_oversize), type(server.on_notify),
  type(server.on_host_call), type(server.on_session_end), type(server.on_shutdown), type(server.metrics_text) },
  { "function", "function", "function", "function", "function", "function", "function" })
check("migrations applied at load", m.migrated == require("mcp.schema"), true)
check("loading the policy sets no globals", new_globals, {})

-- Handles one line in a new coroutine; returns the coroutine (suspended when the handler waits).
local function handle(line, sid, exchange, tenant)
  local co = coroutine.create(server.handle_line)
  local ok, err = coroutine.resume(co, line, sid, exchange, tenant)
  if not ok then error("handle_line raised: " .. tostring(err), 2) end
  return co
end

-- Sends one line and returns the messages it produced.
local function exchange(line, sid, ex, tenant)
  local n = #m.sent
  handle(line, sid, ex, tenant)
  local out = {}
  for i = n + 1, #m.sent do out[#out + 1] = m.sent[i].msg end
  return out
end

-- The single answer to a line (or a description of what came instead).
local function answer(line, sid, ex, tenant)
  local out = exchange(line, sid, ex, tenant)
  if #out ~= 1 then return { count = #out, messages = out } end
  return out[1]
end

local function err_of(line, sid) local a = answer(line, sid) return { a.id, a.error and a.error.code, a.error and a.error.message } end

---------------------------------------------------------------------------------------------
-- the envelope

local pe = answer("{not json")
check("parse error", { pe.id, pe.error.code }, { NULL, -32700 })
check_match("parse error carries the decoder's message", pe.error.message, "^Parse error: .+ at line 1 column 2 %(position 2%)$")
check_match("parse error of an empty line", answer("").error.message, "^Parse error: ")
check("batch", err_of('[{"jsonrpc":"2.0","id":1,"method":"ping"}]'),
  { NULL, -32600, "Invalid Request: JSON-RPC batches are not supported" })
check("empty batch", err_of("[]"), { NULL, -32600, "Invalid Request: JSON-RPC batches are not supported" })
check("a string", err_of('"ping"'), { NULL, -32600, "Invalid Request: a message must be a JSON object" })
check("a number", err_of("42"), { NULL, -32600, "Invalid Request: a message must be a JSON object" })
check("null", err_of("null"), { NULL, -32600, "Invalid Request: a message must be a JSON object" })
check("id float", err_of('{"jsonrpc":"2.0","id":1.5,"method":"ping"}'),
  { NULL, -32600, "Invalid Request: id must be a string or an integer" })
check("id null", err_of('{"jsonrpc":"2.0","id":null,"method":"ping"}'),
  { NULL, -32600, "Invalid Request: id must be a string or an integer" })
check("id object", err_of('{"jsonrpc":"2.0","id":{},"method":"ping"}'),
  { NULL, -32600, "Invalid Request: id must be a string or an integer" })
check("id boolean", err_of('{"jsonrpc":"2.0","id":true,"method":"ping"}'),
  { NULL, -32600, "Invalid Request: id must be a string or an integer" })
check("jsonrpc missing", err_of('{"id":7,"method":"ping"}'), { 7, -32600, 'Invalid Request: jsonrpc must be "2.0"' })
check("jsonrpc 1.0", err_of('{"jsonrpc":"1.0","id":"a","method":"ping"}'), { "a", -32600, 'Invalid Request: jsonrpc must be "2.0"' })
check("jsonrpc number", err_of('{"jsonrpc":2.0,"id":8,"method":"ping"}'), { 8, -32600, 'Invalid Request: jsonrpc must be "2.0"' })
check("method missing", err_of('{"jsonrpc":"2.0","id":9}'), { 9, -32600, "Invalid Request: method is missing" })
check("method missing in a notification", err_of('{"jsonrpc":"2.0"}'), { NULL, -32600, "Invalid Request: method is missing" })
check("method not a string", err_of('{"jsonrpc":"2.0","id":10,"method":5}'), { 10, -32600, "Invalid Request: method must be a string" })
check("params array", err_of('{"jsonrpc":"2.0","id":11,"method":"ping","params":[1]}'),
  { 11, -32602, "Invalid params: params must be an object" })
check("params string", err_of('{"jsonrpc":"2.0","id":12,"method":"ping","params":"x"}'),
  { 12, -32602, "Invalid params: params must be an object" })
check("params null is none", answer('{"jsonrpc":"2.0","id":13,"method":"ping","params":null}'),
  { jsonrpc = "2.0", id = 13, result = {} })
check("notification with bad params: no answer", #exchange('{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}'), 0)
check("unknown method", err_of('{"jsonrpc":"2.0","id":14,"method":"tools/destroy"}'), { 14, -32601, "Method not found: tools/destroy" })
check("unknown method is clipped", err_of('{"jsonrpc":"2.0","id":15,"method":"' .. string.rep("m", 5000) .. '"}'),
  { 15, -32601, "Method not found: " .. string.rep("m", 96) .. "...(5000 bytes)" })
check("unknown notification: no answer", #exchange('{"jsonrpc":"2.0","method":"notifications/whatever"}'), 0)
check("a notification named like a method: no answer", #exchange('{"jsonrpc":"2.0","method":"ping"}'), 0)
local logs_before = #m.logs
check("a response nobody waits for: no answer", #exchange('{"jsonrpc":"2.0","id":"mb-999","result":{}}'), 0)
check("... and nothing logged", #m.logs, logs_before)
check("an error response nobody waits for: no answer", #exchange('{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"x"}}'), 0)

-- a repeated key is refused, not read last-wins; the answer goes to the id when it is clear
check("duplicate method", err_of('{"jsonrpc":"2.0","id":21,"method":"ping","method":"tools/list"}'),
  { 21, -32600, 'Invalid Request: duplicate object key "method" (each key may appear once in an object)' })
check("duplicate key nested in params", err_of('{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"a","name":"b"}}'),
  { "q", -32600, 'Invalid Request: duplicate object key "name" (each key may appear once in an object)' })
check("duplicate id: answered to null", err_of('{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}'),
  { NULL, -32600, 'Invalid Request: duplicate object key "id" (each key may appear once in an object)' })
check("duplicate key in a notification: no answer", #exchange('{"jsonrpc":"2.0","method":"x","params":{"a":1,"a":2}}'), 0)
check("NUL in a key", err_of('{"jsonrpc":"2.0","id":22,"method":"ping","params":{"a\\u0000b":1}}'),
  { 22, -32602, "Invalid params: object keys containing \\u0000 are not supported" })
check("NUL in a key, escaped backslash before u0000 is text", err_of('{"jsonrpc":"2.0","id":23,"method":"ping","params":{"\\\\u0000":1,"\\u0000":2}}'),
  { 23, -32602, "Invalid params: object keys containing \\u0000 are not supported" })
check("NUL in a notification's key: no answer", #exchange('{"jsonrpc":"2.0","method":"x","params":{"\\u0000":1}}'), 0)

-- the transport's session and exchange travel with the answer
handle('{"jsonrpc":"2.0","id":30,"method":"ping"}', 5, 77)
local s = m.sent[#m.sent]
check("answer on the message's session and exchange, final", { s.session, s.exchange, s.final }, { 5, 77, true })
local pending = m.pending
handle('{"jsonrpc":"2.0","method":"notifications/initialized"}', 5, 78)
check("a notification is not pending", m.pending, pending)
handle('{"jsonrpc":"2.0","id":31,"method":"ping"}', 5, 79)
check("a request is pending", m.pending, pending + 1)
handle('{"jsonrpc":"2.0","id":32,"method":"ping"}')
check("stdio defaults: session 1, exchange 0", { m.sent[#m.sent].session, m.sent[#m.sent].exchange }, { 1, 0 })

server.handle_oversize(20000000)
check("oversize line", { m.sent[#m.sent].msg.id, m.sent[#m.sent].msg.error.code, m.sent[#m.sent].msg.error.message, m.sent[#m.sent].session },
  { NULL, -32600, "Invalid Request: message of 20000000 bytes exceeds max_message_bytes=16777216 and was discarded", 1 })

---------------------------------------------------------------------------------------------
-- lifecycle and small methods

local init = answer('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}', 2)
check("initialize echoes a served revision", init.result.protocolVersion, "2025-06-18")
check("initialize server info", { init.result.serverInfo.name, init.result.serverInfo.version }, { "moonbox", "0.0.0-test" })
check("initialize capabilities", init.result.capabilities, { tools = { listChanged = true }, logging = {},
  resources = { listChanged = true, subscribe = true }, prompts = { listChanged = true }, completions = {} })
check_has("initialize instructions", init.result.instructions, "execute_code")
check("initialize answers the newest for an unknown revision",
  answer('{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}', 3).result.protocolVersion, "2025-11-25")
check("initialize without protocolVersion", err_of('{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}}', 3),
  { 3, -32602, "initialize: params.protocolVersion must be a string" })
check("initialize with a numeric protocolVersion", err_of('{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":20251125}}', 3),
  { 4, -32602, "initialize: params.protocolVersion must be a string" })

check("logging/setLevel bad", answer('{"jsonrpc":"2.0","id":5,"method":"logging/setLevel","params":{"level":"loud"}}').error,
  { code = -32602, message = "logging/setLevel: level must be one of debug, info, notice, warning, error, critical, alert, emergency",
    data = { level = "loud" } })
check("logging/setLevel missing level", answer('{"jsonrpc":"2.0","id":6,"method":"logging/setLevel","params":{}}').error.data,
  { level = NULL })
check("logging/setLevel long level is clipped in data", answer('{"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{"level":"'
  .. string.rep("x", 1000) .. '"}}').error.data.level, string.rep("x", 256) .. "...(1000 bytes)")
check("logging/setLevel ok", answer('{"jsonrpc":"2.0","id":8,"method":"logging/setLevel","params":{"level":"error"}}').result, {})

check("completion/complete", answer('{"jsonrpc":"2.0","id":9,"method":"completion/complete","params":{"ref":{},"argument":{}}}').result,
  { completion = { values = {}, total = 0, hasMore = false } })
check("completion/complete bad", answer('{"jsonrpc":"2.0","id":10,"method":"completion/complete","params":{"ref":[]}}').error.code, -32602)
check("resources/subscribe needs a uri", answer('{"jsonrpc":"2.0","id":11,"method":"resources/subscribe","params":{"uri":5}}').error.message,
  "resources/subscribe: params.uri must be a string")
check("resources/subscribe", answer('{"jsonrpc":"2.0","id":12,"method":"resources/subscribe","params":{"uri":"test://a"}}').result, {})
check("resources/unsubscribe", answer('{"jsonrpc":"2.0","id":13,"method":"resources/unsubscribe","params":{"uri":"test://a"}}').result, {})

-- tools/list pages (tools_page_size = 3)
local names = {}
for _, t in ipairs(tools.all("default")) do names[#names + 1] = t.definition.name end
local p1 = answer('{"jsonrpc":"2.0","id":20,"method":"tools/list"}').result
check("tools/list first page", { #p1.tools, p1.tools[1].name, p1.nextCursor }, { 3, names[1], "mbc1.3" })
local seen, cursor, pages = {}, nil, 0
repeat
  local params = cursor and ('{"cursor":"' .. cursor .. '"}') or "{}"
  local page = answer('{"jsonrpc":"2.0","id":21,"method":"tools/list","params":' .. params .. "}").result
  for _, t in ipairs(page.tools) do seen[#seen + 1] = t.name end
  cursor, pages = page.nextCursor, pages + 1
until not cursor or pages > 50
check("tools/list pages cover every tool once", seen, names)
check("tools/list bad cursor", answer('{"jsonrpc":"2.0","id":22,"method":"tools/list","params":{"cursor":"nope"}}').error,
  { code = -32602, message = "tools/list: invalid cursor", data = { cursor = "nope" } })
check("tools/list cursor past the end", answer('{"jsonrpc":"2.0","id":23,"method":"tools/list","params":{"cursor":"mbc1.' .. #names .. '"}}').error.code, -32602)
check("tools/list numeric cursor", answer('{"jsonrpc":"2.0","id":24,"method":"tools/list","params":{"cursor":3}}').error.code, -32602)

-- tools/call before any execution
check("tools/call name type", err_of('{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":1}}'),
  { 30, -32602, "tools/call: params.name must be a string" })
local unknown = answer('{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"execute_cod"}}').error
check("unknown tool suggests the closest", unknown.message, "Unknown tool: execute_cod. Did you mean execute_code? Tools of upstream "
  .. "servers are called from execute_code (servers.<server>.<tool>{...}); search_tools finds them.")
check("unknown tool lists what exists", { unknown.data.closest, #unknown.data.available }, { { "execute_code" }, #names })
unknown = answer('{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"name":"zzzzzzzzzzzzzzzzzzzzzzzzzzzzz"}}').error
check("unknown tool far from everything", { unknown.data.closest, unknown.message:find("Did you mean", 1, true) }, { {}, nil })
check("tools/call arguments array", err_of('{"jsonrpc":"2.0","id":33,"method":"tools/call","params":{"name":"execute_code","arguments":[]}}'),
  { 33, -32602, "tools/call: params.arguments must be an object" })
local r = answer('{"jsonrpc":"2.0","id":34,"method":"tools/call","params":{"name":"execute_code","arguments":null}}').result
check("tools/call arguments null: the tool says what is missing", { r.isError, r.content[1].text },
  { true, "invalid arguments: code is required (a string of Lua source), or rerun_id (an execution id from list_executions)" })
r = answer('{"jsonrpc":"2.0","id":35,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"x","timeout_seconds":-1}}}').result
check("tool argument errors are results, not protocol errors", { r.isError, r.content[1].text },
  { true, "invalid arguments: timeout_seconds must be a positive number of seconds" })

-- handler failures
tools.register({ name = "t_raise", inputSchema = { type = "object" } }, function() error("kaput") end)
tools.register({ name = "t_rpc", inputSchema = { type = "object" } }, function()
  error(tools.rpc_error(-32002, "resource missing", { uri = string.rep("u", 300) }))
end)
tools.register({ name = "t_nil", inputSchema = { type = "object" } }, function() return nil end)
local e = answer('{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"t_raise"}}').error
check("a handler's Lua error is an internal error", { e.code, e.message:match("^Internal error: .*kaput$") ~= nil }, { -32603, true })
check("... and is logged", m.logs[#m.logs][1], "error")
e = answer('{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"t_rpc"}}').error
check("a handler's rpc_error keeps its code, data clipped", { e.code, e.message, e.data.uri },
  { -32002, "resource missing", string.rep("u", 256) .. "...(300 bytes)" })
check("a handler answering nil answers {}", answer('{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"t_nil"}}').result, {})

---------------------------------------------------------------------------------------------
-- an execution in flight: progress, logs, host calls, cancellation

local function call_line(id, args, meta)
  return H.json_encode({ jsonrpc = "2.0", id = id, method = "tools/call",
    params = { name = "execute_code", arguments = args, _meta = meta } })
end

local co = handle(call_line(50, { code = "return 1" }, { progressToken = "tok" }), 9, 3, "acme")
check("execute waits", coroutine.status(co), "suspended")
local job = 100 + #jobs
check("the submitted spec carries the tenant", { jobs[#jobs].tenant, jobs[#jobs].code }, { "acme", "return 1" })
local n = #m.sent
server.on_notify(job, "progress", '{"progress":1,"total":4,"message":"a quarter"}')
check("progress notification", { m.sent[#m.sent].msg, m.sent[#m.sent].final, m.sent[#m.sent].exchange },
  { { jsonrpc = "2.0", method = "notifications/progress", params = { progressToken = "tok", progress = 1, total = 4, message = "a quarter" } },
    false, 3 })
server.on_notify(job, "info", '{"rows":3}')
check("log notification, data spliced", m.sent[#m.sent].msg.params, { level = "info", logger = "execute_code", data = { rows = 3 } })
server.on_notify(job, "debug", '"quiet"')
check("a level below the session's is dropped", #m.sent, n + 2)
server.on_notify(job, "loud", '"x"')
check("an unknown level is dropped", #m.sent, n + 2)
server.on_notify(999, "info", '"x"')
check("a notification for an unknown job is dropped", #m.sent, n + 2)

-- host calls while it runs
tools.host_calls.echo = function(a) return { got = a } end
tools.host_calls.fails = function() return nil, "no such thing" end
tools.host_calls.raises = function() error("bug here") end
tools.host_calls.cyclic = function() local t = {} t.t = t return t end
tools.host_calls.nothing = function() return nil end
tools.host_calls_raw.rawcall = function(text) return { len = #text } end
local function host(name, args, j)
  local hc = coroutine.create(server.on_host_call)
  assert(coroutine.resume(hc, j or job, #replies + 1, name, args))
  return replies[#replies], hc
end
check("host call answered", host("echo", '{"a":1}'), { job = job, seq = #replies, ok = true, text = '{"got":{"a":1}}' })
check("host call refused by its handler", { host("fails", "{}").ok, replies[#replies].text }, { false, "no such thing" })
local hr = host("raises", "{}")
check("host call handler error", { hr.ok, hr.text:match("^raises: internal error: .*bug here$") ~= nil }, { false, true })
check("host call reply that cannot be encoded", { host("cyclic", "{}").ok, replies[#replies].text:match("^cyclic: the reply cannot be encoded") ~= nil },
  { false, true })
check("host call answering nothing is null", host("nothing", "{}").text, "null")
check("host call with bad JSON", { host("echo", "{x").ok, replies[#replies].text:match("^echo: bad arguments: ") ~= nil }, { false, true })
check("unknown host call", host("nope", "{}").text, "unknown server call nope")
check("raw host call gets the bytes", host("rawcall", "not json at all").text, '{"len":15}')
check("host call for an unknown job", host("echo", "{}", 4242), { job = 4242, seq = #replies, ok = false, text = "the execution has ended" })

-- a second request may not reuse the id in flight; another id or type may
check("id in use", err_of(call_line(50, { code = "2" }), 9), { 50, -32600, "Invalid Request: id 50 is already in use" })
local co2 = handle(call_line("50", { code = "2" }), 9)
check("the string id \"50\" is another id", coroutine.status(co2), "suspended")
local job2 = 100 + #jobs

-- the first finishes
n = #m.sent
assert(coroutine.resume(co, H.shaped({ success = true, result_json = "[1]", output = "", execution_time_ms = 3, instructions = 5,
  memory_peak_bytes = 6, code_hash = "abc" })))
check("execution answered", { m.sent[#m.sent].msg.id, m.sent[#m.sent].msg.result.structuredContent.result, m.sent[#m.sent].final },
  { 50, { 1 }, true })
check("history recorded for the tenant", { m.history[#m.history][1], m.history[#m.history][4], m.history[#m.history][7] },
  { "acme", "ok", "abc" })
check("upstream calls of the request abandoned", up_calls()[#up_calls()][1], "abandon")
check("the job is forgotten", host("echo", "{}", job).text, "the execution has ended")
server.on_notify(job, "info", '"late"')
check("a late log is dropped", #m.sent, n + 1)
check("the id is free again", coroutine.status(handle(call_line(50, { code = "3" }), 9)), "suspended")
local job3 = 100 + #jobs

-- cancellation: no answer, the job is cancelled
handle(H.json_encode({ jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = "50", reason = "user" } }), 9)
check("cancel reaches the job", cancelled[#cancelled], job2)
n = #m.sent
assert(coroutine.resume(co2, { success = false, error_type = "cancelled", error = "cancelled" }))
check("a cancelled request is not answered", #m.sent, n)
check("cancelled with a bad requestId type is ignored", #exchange(H.json_encode({ jsonrpc = "2.0", method = "notifications/cancelled",
  params = { requestId = 1.5 } }), 9), 0)
handle(H.json_encode({ jsonrpc = "2.0", method = "notifications/cancelled", params = { requestId = 12345 } }), 9)
check("cancelling an unknown id does nothing", #cancelled, 1)

-- initialize cannot be cancelled
tools.upstream.instructions = function(base) local c = coroutine.running() return coroutine.yield({ initializing = c }) and base end
local ico = handle('{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25"}}', 11)
handle('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"i"}}', 11)
n = #m.sent
assert(coroutine.resume(ico, true))
check("initialize is answered even when cancelled", m.sent[#m.sent].msg.id, "i")
tools.upstream.instructions = function(base) return base end

-- the session ends: its executions are cancelled, its state forgotten
server.on_session_end(9)
check("session end cancels what runs", cancelled[#cancelled], job3)
server.on_session_end(12345) -- unknown: nothing happens
check("a new session with the same id starts at log level info", (function()
  handle('{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}', 13)
  local c = handle(call_line(2, { code = "x" }), 13)
  local k = #m.sent
  server.on_notify(100 + #jobs, "debug", '"d"')
  local got_debug = #m.sent == k + 1
  server.on_session_end(13)
  c = handle(call_line(2, { code = "x" }), 13)
  k = #m.sent
  server.on_notify(100 + #jobs, "debug", '"d"')
  return { got_debug, #m.sent == k }
end)(), { true, true })

---------------------------------------------------------------------------------------------
-- requests to the client (mcp.elicit and friends) during an execution

-- session 2 declared elicitation in initialize above
local eco = handle(call_line(60, { code = "x" }), 2)
local ejob = 100 + #jobs
local rep, hc = host("client_request", '{"method":"elicitation/create","params":{"message":"Name?"}}', ejob)
local asked = m.sent[#m.sent]
check("client request sent on the session, not final", { asked.msg.method, asked.msg.params, asked.session, asked.final, type(asked.msg.id) },
  { "elicitation/create", { message = "Name?" }, 2, false, "string" })
check("the host call waits for the client", coroutine.status(hc), "suspended")
check("its job is held while the client answers", m.holds[#m.holds], { ejob, true })
handle(H.json_encode({ jsonrpc = "2.0", id = asked.msg.id, result = { action = "accept", content = { name = "Ann" } } }), 2)
check("and no longer once the answer came", m.holds[#m.holds], { ejob, false })
check("the client's answer is the host call's reply", { replies[#replies].ok, H.json_decode(replies[#replies].text) },
  { true, { action = "accept", content = { name = "Ann" } } })

rep = host("client_request", '{"method":"sampling/createMessage","params":{}}', ejob)
check("a capability the client did not declare", { rep.ok, rep.text },
  { false, "sampling/createMessage: the client did not declare the sampling capability, so moonbox cannot send it sampling/createMessage" })
rep = host("client_request", '{"method":"tools/call"}', ejob)
check("a method the client cannot be asked", rep.text, "mcp: the client cannot be asked tools/call")
rep = host("client_request", '{"method":"elicitation/create","params":[1]}', ejob)
check("client request params must be an object", rep.text, "elicitation/create: params must be an object")

host("client_request", '{"method":"elicitation/create","params":{"message":"again?"}}', ejob)
local asked2 = m.sent[#m.sent].msg.id
handle(H.json_encode({ jsonrpc = "2.0", id = asked2, error = { code = -1, message = "user closed it" } }), 2)
check("the client's error is the host call's error", { replies[#replies].ok, replies[#replies].text },
  { false, "elicitation/create: user closed it" })

local _, hc3 = host("client_request", '{"method":"elicitation/create","params":{"message":"never answered"}}', ejob)
assert(coroutine.resume(eco, H.shaped({ success = true, result_json = "1", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
check("the execution's end ends the client request's wait", { coroutine.status(hc3), replies[#replies].ok, replies[#replies].text },
  { "dead", false, "elicitation/create: the execution ended" })
check("the execution was answered", m.sent[#m.sent].msg.id, 60)

---------------------------------------------------------------------------------------------
-- 2026-07-28: requests without a handshake (lua/mcp/modern.lua)

local V = "2026-07-28"
local META = { ["io.modelcontextprotocol/protocolVersion"] = V, ["io.modelcontextprotocol/clientCapabilities"] = {} }
local function with(t, k, v) local c = {} for a, b in pairs(t) do c[a] = b end c[k] = v return c end
local EMETA = with(META, "io.modelcontextprotocol/clientCapabilities", { elicitation = {} })
local function hdr(method, name, version) return { http = true, protocol_version = version or V, method = method, name = name } end
-- a sessionless HTTP request (session 0) with its headers; returns the coroutine
local function mhandle(msg, ex, h, tenant)
  local co = coroutine.create(server.handle_line)
  assert(coroutine.resume(co, H.json_encode(msg), 0, ex, tenant or "default", h))
  return co
end
local function manswer(msg, ex, h, tenant)
  local n0 = #m.sent
  mhandle(msg, ex, h, tenant)
  check("one answer to exchange " .. ex, #m.sent, n0 + 1)
  return m.sent[#m.sent]
end
local function req(id, method, params) return { jsonrpc = "2.0", id = id, method = method, params = params } end

local d = manswer(req(1, "server/discover", { _meta = META }), 201, hdr("server/discover"))
check("discover", { d.msg.result.resultType, d.msg.result.supportedVersions[1], d.msg.result.supportedVersions[2],
  d.msg.result.ttlMs, d.msg.result.cacheScope, d.msg.result._meta["io.modelcontextprotocol/serverInfo"].name, d.status },
  { "complete", V, "2025-11-25", H.CONFIG.cache_ttl_ms, "public", "moonbox", nil })
local tl = manswer(req(2, "tools/list", { _meta = META }), 202, hdr("tools/list")).msg.result
check("tools/list carries resultType, ttlMs and cacheScope", { tl.resultType, tl.ttlMs ~= nil, tl.cacheScope }, { "complete", true, "public" })
-- the envelope, in the order the spec checks it: method, _meta, headers, version
local e = manswer(req(3, "ping", { _meta = META }), 203, hdr("ping"))
check("removed method: 404 -32601", { e.msg.id, e.msg.error.code, e.status }, { 3, -32601, 404 })
e = manswer(req(4, "initialize", { protocolVersion = "2025-11-25" }), 204, hdr("initialize"))
check("initialize without a session is a removed method", { e.msg.error.code, e.status }, { -32601, 404 })
e = manswer(req(5, "tools/list", {}), 205, hdr("tools/list"))
check("no _meta: 400 -32602 with the id", { e.msg.id, e.msg.error.code, e.status }, { 5, -32602, 400 })
e = manswer(req(6, "tools/list", { _meta = with(META, "io.modelcontextprotocol/clientCapabilities", nil) }), 206, hdr("tools/list"))
check("no clientCapabilities: 400 -32602", { e.msg.error.code, e.status }, { -32602, 400 })
check_match("... naming it", e.msg.error.message, "clientCapabilities")
e = manswer(req(7, "tools/list", { _meta = with(META, "io.modelcontextprotocol/protocolVersion", "v9") }), 207, hdr("tools/list"))
check("header and _meta disagree: -32020", { e.msg.error.code, e.status }, { -32020, 400 })
e = manswer(req(8, "tools/list", { _meta = with(META, "io.modelcontextprotocol/protocolVersion", "v9") }), 208, hdr("tools/list", nil, "v9"))
check("unsupported version: -32022 with the supported list", { e.msg.error.code, e.status, e.msg.error.data.requested,
  e.msg.error.data.supported[1] }, { -32022, 400, "v9", V })
e = manswer(req(9, "tools/list", { _meta = META }), 209, hdr("tools/call"))
check("Mcp-Method disagrees: -32020", { e.msg.error.code, e.status }, { -32020, 400 })
e = manswer(req(10, "tools/call", { _meta = META, name = "execute_code", arguments = {} }), 210, hdr("tools/call", "other"))
check("Mcp-Name disagrees: -32020", { e.msg.error.code, e.status }, { -32020, 400 })
e = manswer(req(11, "tools/call", { _meta = META, name = "execute_code", arguments = {} }), 211, hdr("tools/call"))
check("Mcp-Name missing: -32020", { e.msg.error.code, e.status }, { -32020, 400 })
e = manswer(req(12, "subscriptions/listen", { _meta = META }), 212, hdr("subscriptions/listen"))
check("listen needs params.notifications", { e.msg.error.code, e.msg.id }, { -32602, 12 })
check("server/discover is not a 2025 method", err_of('{"jsonrpc":"2.0","id":14,"method":"server/discover"}', 2)[2], -32601)

-- SEP-2243: arguments mirrored in Mcp-Param-<Name> headers must agree with them
local modern = require("mcp.modern")
m.base64_decode = function(t) if t == "SGVsbG8=" then return "Hello" end return nil, "invalid base64" end
m.json_encode = H.json_encode
local SCHEMA = { type = "object", properties = { region = { type = "string", ["x-mcp-header"] = "Region" },
  n = { type = "integer", ["x-mcp-header"] = "N" }, plain = { type = "string" } } }
local function cp(lines, args) local r = modern.check_params(lines, SCHEMA, args) return r and r.code or "ok" end
check("Mcp-Param: equal values pass", cp("Region: eu-1\nN:5", { region = "eu-1", n = 5, plain = "x" }), "ok")
check("Mcp-Param: names are case-insensitive", cp("rEgIoN:eu-1", { region = "eu-1" }), "ok")
check("Mcp-Param: base64 decoded", cp("Region:=?base64?SGVsbG8=?=", { region = "Hello" }), "ok")
check("Mcp-Param: bad base64 refused", cp("Region:=?base64?SGVsbG8?=", { region = "Hello" }), -32020)
check("Mcp-Param: no wrapper end is literal", cp("Region:=?base64?SGVsbG8=", { region = "=?base64?SGVsbG8=" }), "ok")
check("Mcp-Param: missing header refused", cp(nil, { region = "eu-1" }), -32020)
check("Mcp-Param: different value refused", cp("Region:us", { region = "eu-1" }), -32020)
check("Mcp-Param: a number compared as JSON text", cp("N:6", { n = 5 }), -32020)
check("Mcp-Param: header without the argument refused", cp("Region:eu", {}), -32020)

-- stdio: a request with _meta is read the 2026-07-28 way until initialize; after it, 2025
local sd = answer(H.json_encode(req(15, "tools/list", { _meta = META })), 40)
check("stdio modern request answered with resultType", sd.result.resultType, "complete")
answer('{"jsonrpc":"2.0","id":16,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}', 40)
check("after initialize the same session is 2025 (no resultType)", answer(H.json_encode(req(17, "tools/list", { _meta = META })), 40).result.resultType, nil)

-- logs only for a request that named a logLevel
local lco = mhandle(req(18, "tools/call", { _meta = META, name = "execute_code", arguments = { code = "x" } }), 218, hdr("tools/call", "execute_code"))
local ljob = 100 + #jobs
n = #m.sent
server.on_notify(ljob, "error", '"no"')
check("no logLevel: no log message", #m.sent, n)
assert(coroutine.resume(lco, H.shaped({ success = true, result_json = "1", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
local lmeta = with(META, "io.modelcontextprotocol/logLevel", "warning")
lco = mhandle(req(19, "tools/call", { _meta = lmeta, name = "execute_code", arguments = { code = "x" } }), 219, hdr("tools/call", "execute_code"))
ljob = 100 + #jobs
n = #m.sent
server.on_notify(ljob, "info", '"below"')
server.on_notify(ljob, "error", '"yes"')
check("logLevel warning: the error is sent, the info not", { #m.sent - n, m.sent[#m.sent].msg.params.level }, { 1, "error" })
assert(coroutine.resume(lco, H.shaped({ success = true, result_json = "1", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
e = manswer(req(20, "tools/list", { _meta = with(META, "io.modelcontextprotocol/logLevel", "loud") }), 220, hdr("tools/list"))
check("a bad logLevel is -32602", e.msg.error.code, -32602)

-- a disconnect cancels
local dco = mhandle(req(21, "tools/call", { _meta = META, name = "execute_code", arguments = { code = "x" } }), 221, hdr("tools/call", "execute_code"))
local djob = 100 + #jobs
n = #m.sent
server.on_exchange_closed(221)
check("a closed exchange cancels its execution", cancelled[#cancelled], djob)
assert(coroutine.resume(dco, H.shaped({ success = false, error_type = "cancelled", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
check("... and is not answered", #m.sent, n)
server.on_exchange_closed(99999) -- unknown: nothing happens

-- input_required: the execution is held; the retry with the answer continues it
local timers = {}
m.timer = function(ms, fn) local t = { ms = ms, fn = fn, stop = function(self) self.stopped = true end } timers[#timers + 1] = t return t end
local sealed = {}
m.seal = function(text) sealed[#sealed + 1] = text return "S" .. #sealed end
m.unseal = function(tok) local i = tonumber(tostring(tok):match("^S(%d+)$")) if i and sealed[i] then return sealed[i] end return nil, "altered" end
local ico2 = mhandle(req(30, "tools/call", { _meta = EMETA, name = "execute_code", arguments = { code = "x" } }), 230, hdr("tools/call", "execute_code"), "acme")
local ijob = 100 + #jobs
n = #m.sent
local _, ihc = host("client_request", '{"method":"elicitation/create","params":{"message":"Name?"}}', ijob)
local ir = m.sent[#m.sent]
check("input_required answers the request", { #m.sent - n, ir.msg.id, ir.exchange, ir.msg.result.resultType, ir.final },
  { 1, 30, 230, "input_required", true })
local ikey = next(ir.msg.result.inputRequests)
check("the input request", ir.msg.result.inputRequests[ikey], { method = "elicitation/create", params = { message = "Name?" } })
check("the host call waits", coroutine.status(ihc), "suspended")
check("a hold timer of mrtr_hold_ms", timers[#timers].ms, H.CONFIG.mrtr_hold_ms)
local state = ir.msg.result.requestState
local retry = req(31, "tools/call", { _meta = EMETA, name = "execute_code", arguments = { code = "x" }, requestState = state,
  inputResponses = { [ikey] = { action = "accept", content = { name = "Ann" } } } })
e = manswer(with(retry, "params", with(retry.params, "requestState", "forged")), 231, hdr("tools/call", "execute_code"), "acme")
check("a forged requestState is refused", { e.msg.id, e.msg.error.code }, { 31, -32602 })
e = manswer(retry, 232, hdr("tools/call", "execute_code"), "bob")
check("another tenant's requestState is refused", { e.msg.error.code, e.msg.error.message:match("does not belong") ~= nil }, { -32602, true })
e = manswer(with(retry, "params", with(retry.params, "name", "get_execution_stats")), 233, hdr("tools/call", "get_execution_stats"), "acme")
check("a requestState for another tool is refused", e.msg.error.code, -32602)
n = #m.sent
mhandle(retry, 234, hdr("tools/call", "execute_code"), "acme")
check("the retry resumes the host call with the answer", { coroutine.status(ihc), replies[#replies].ok,
  H.json_decode(replies[#replies].text) }, { "dead", true, { action = "accept", content = { name = "Ann" } } })
check("the retry is not answered yet", #m.sent, n)
assert(coroutine.resume(ico2, H.shaped({ success = true, result_json = "2", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
check("the execution's result answers the retry", { m.sent[#m.sent].msg.id, m.sent[#m.sent].exchange,
  m.sent[#m.sent].msg.result.resultType }, { 31, 234, "complete" })
e = manswer(retry, 235, hdr("tools/call", "execute_code"), "acme")
check("a used requestState is refused", e.msg.error.code, -32602)

-- stdio: once answered input_required, the request's id is the client's again
local sco2 = handle(H.json_encode(req(7, "tools/call", { _meta = EMETA, name = "execute_code", arguments = { code = "x" } })), 42)
local sjob = 100 + #jobs
host("client_request", '{"method":"elicitation/create","params":{"message":"?"}}', sjob)
local sir = m.sent[#m.sent].msg
check("stdio: input_required for id 7", { sir.id, sir.result.resultType }, { 7, "input_required" })
local reuse = answer(H.json_encode(req(7, "tools/list", { _meta = META })), 42)
check("the id may be reused at once", { reuse.id, reuse.result and reuse.result.resultType }, { 7, "complete" })
local skey = next(sir.result.inputRequests)
handle(H.json_encode(req(8, "tools/call", { _meta = EMETA, name = "execute_code", arguments = { code = "x" },
  requestState = sir.result.requestState, inputResponses = { [skey] = { action = "accept" } } })), 42)
local busy7 = answer(H.json_encode(req(8, "tools/list", { _meta = META })), 42)
check("the retry's id is in use while its execution runs", busy7.error and busy7.error.code, -32600)
assert(coroutine.resume(sco2, H.shaped({ success = true, result_json = "5", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
check("the result answers the retry", m.sent[#m.sent].msg.id, 8)
check("and frees its id", answer(H.json_encode(req(8, "tools/list", { _meta = META })), 42).result.resultType, "complete")

-- mcp.ask: several inputs in one round; a missing answer is asked again; -32021 without the capability
local aco = mhandle(req(40, "tools/call", { _meta = with(EMETA, "io.modelcontextprotocol/clientCapabilities",
  { elicitation = {}, roots = {} }), name = "execute_code", arguments = { code = "x" } }), 240, hdr("tools/call", "execute_code"))
local ajob = 100 + #jobs
-- mcp.ask's own bounds, whatever the era
local function ask_err(inputs_json)
  local r = host("client_requests", inputs_json, ajob)
  return r.ok, r.text
end
local many = {}
for i = 1, 17 do many[#many + 1] = string.format('"k%d":{"method":"roots/list"}', i) end
check("mcp.ask: at most 16 questions", { ask_err("{\"inputs\":{" .. table.concat(many, ",") .. "}}") },
  { false, "mcp.ask: at most 16 questions at once" })
check("mcp.ask: a key must be a name", { ask_err('{"inputs":{"a b":{"method":"roots/list"}}}') },
  { false, "mcp.ask: keys are names of 1-64 letters, digits, '_', '.' or '-'" })
check("mcp.ask: a key of 65 characters", (ask_err('{"inputs":{"' .. string.rep("k", 65) .. '":{"method":"roots/list"}}}')), false)
check("mcp.ask: a question must be a table", { ask_err('{"inputs":{"a":5}}') },
  { false, "mcp.ask: a must be a table {method=, params=}" })
check("mcp.ask: only questions the client can be asked", { ask_err('{"inputs":{"a":{"method":"tools/call"}}}') },
  { false, "mcp: the client cannot be asked tools/call" })
check("mcp.ask: nothing to ask", { ask_err('{"inputs":{}}') }, { false, "mcp.ask: expects a table of {method=, params=} by key" })

local _, ahc = host("client_requests", '{"inputs":{"a":{"method":"elicitation/create","params":{"message":"?"}},"b":{"method":"roots/list"}}}', ajob)
local ar = m.sent[#m.sent].msg.result
check("both inputs in one round", { ar.resultType, ar.inputRequests.a.method, ar.inputRequests.b.method }, { "input_required", "elicitation/create", "roots/list" })
mhandle(req(41, "tools/call", { _meta = EMETA, name = "execute_code", arguments = { code = "x" }, requestState = ar.requestState,
  inputResponses = { a = { action = "decline" }, b = 12345 } }), 241, hdr("tools/call", "execute_code"))
local ar2 = m.sent[#m.sent].msg
check("an answer that is not an object is asked again", { ar2.id, ar2.result.resultType, ar2.result.inputRequests.b ~= nil,
  ar2.result.inputRequests.a, ar2.result.requestState ~= ar.requestState }, { 41, "input_required", true, nil, true })
mhandle(req(42, "tools/call", { _meta = EMETA, name = "execute_code", arguments = { code = "x" }, requestState = ar2.result.requestState,
  inputResponses = { b = { roots = {} } } }), 242, hdr("tools/call", "execute_code"))
check("all answered: the host call gets them by key", { coroutine.status(ahc), H.json_decode(replies[#replies].text) },
  { "dead", { a = { action = "decline" }, b = { roots = {} } } })
assert(coroutine.resume(aco, H.shaped({ success = true, result_json = "3", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
check("answered to the last retry", m.sent[#m.sent].msg.id, 42)

local cco = mhandle(req(43, "tools/call", { _meta = META, name = "execute_code", arguments = { code = "x" } }), 243, hdr("tools/call", "execute_code"))
local cjob = 100 + #jobs
host("client_request", '{"method":"sampling/createMessage","params":{}}', cjob)
check("the code's call fails", replies[#replies].ok, false)
check("and the execution is stopped", cancelled[#cancelled], cjob)
assert(coroutine.resume(cco, H.shaped({ success = false, error_type = "cancelled", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
e = m.sent[#m.sent]
check("a missing client capability is -32021 naming it", { e.msg.id, e.msg.error.code, e.status, e.msg.error.data.requiredCapabilities },
  { 43, -32021, 400, { sampling = {} } })

-- an abandoned hold: its timer stops the execution
local hco = mhandle(req(44, "tools/call", { _meta = EMETA, name = "execute_code", arguments = { code = "x" } }), 244, hdr("tools/call", "execute_code"))
local hjob = 100 + #jobs
local _, hhc = host("client_request", '{"method":"elicitation/create","params":{"message":"?"}}', hjob)
local hstate = m.sent[#m.sent].msg.result.requestState
timers[#timers].fn()
check("the expired hold ends the wait with an error and cancels", { coroutine.status(hhc), replies[#replies].ok,
  replies[#replies].text:match("mrtr_hold_ms") ~= nil, cancelled[#cancelled] }, { "dead", false, true, hjob })
assert(coroutine.resume(hco, H.shaped({ success = false, error_type = "cancelled", output = "", execution_time_ms = 1, instructions = 1, memory_peak_bytes = 1 })))
e = manswer(req(45, "tools/call", { _meta = EMETA, name = "execute_code", arguments = {}, requestState = hstate, inputResponses = {} }),
  245, hdr("tools/call", "execute_code"))
check("its requestState is no longer held", e.msg.error.code, -32602)

-- subscriptions/listen: acknowledged, tagged, filtered, cancelled by a disconnect
local sco = mhandle(req("L1", "subscriptions/listen", { _meta = META, notifications = { toolsListChanged = true } }), 250, hdr("subscriptions/listen"))
local ack = m.sent[#m.sent]
check("listen is acknowledged first, tagged, not final", { ack.msg.method, ack.msg.params._meta["io.modelcontextprotocol/subscriptionId"], ack.final, ack.exchange },
  { "notifications/subscriptions/acknowledged", "L1", false, 250 })
mhandle(req("L2", "subscriptions/listen", { _meta = META, notifications = { promptsListChanged = true } }), 251, hdr("subscriptions/listen"))
n = #m.sent
tools.list_changed()
local on250, on251 = {}, {}
for i = n + 1, #m.sent do
  local s2 = m.sent[i]
  if s2.exchange == 250 then on250[#on250 + 1] = s2.msg.method .. " " .. s2.msg.params._meta["io.modelcontextprotocol/subscriptionId"] end
  if s2.exchange == 251 then on251[#on251 + 1] = s2.msg.method end
end
check("each listener hears what it asked for, tagged", { on250, on251 },
  { { "notifications/tools/list_changed L1" }, { "notifications/prompts/list_changed" } })
server.on_exchange_closed(250)
check("a closed listen stream ends the listener (no answer)", coroutine.status(sco), "dead")
n = #m.sent
tools.list_changed()
local after = 0
for i = n + 1, #m.sent do if m.sent[i].exchange == 250 then after = after + 1 end end
check("nothing more goes to it", after, 0)
m.config.max_listeners = 1 -- L2 is open
e = manswer(req("L3", "subscriptions/listen", { _meta = META, notifications = { toolsListChanged = true } }), 252, hdr("subscriptions/listen"))
check("listens are bounded by max_listeners", { e.msg.error.code, e.msg.error.message:match("max_listeners=1") ~= nil }, { -32602, true })
m.config.max_listeners = 1000

---------------------------------------------------------------------------------------------
-- list_changed, shutdown, metrics

n = #m.sent
tools.list_changed()
local methods_sent = {}
for i = n + 1, #m.sent do methods_sent[#methods_sent + 1] = m.sent[i].session .. " " .. m.sent[i].msg.method end
table.sort(methods_sent)
check("list_changed goes to initialized sessions and listeners only", methods_sent, {
  "0 notifications/prompts/list_changed", -- the 2026-07-28 listener L2, on its own stream
  "11 notifications/prompts/list_changed", "11 notifications/resources/list_changed", "11 notifications/tools/list_changed",
  "2 notifications/prompts/list_changed", "2 notifications/resources/list_changed", "2 notifications/tools/list_changed",
  "3 notifications/prompts/list_changed", "3 notifications/resources/list_changed", "3 notifications/tools/list_changed",
  "40 notifications/prompts/list_changed", "40 notifications/resources/list_changed", "40 notifications/tools/list_changed",
  "5 notifications/prompts/list_changed", "5 notifications/resources/list_changed", "5 notifications/tools/list_changed" })

-- a change of one tenant's published skills goes to that tenant's sessions only
answer('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}', 70, 0, "zeta")
n = #m.sent
tools.list_changed({ zeta = true })
local to = {}
for i = n + 1, #m.sent do to[#to + 1] = m.sent[i].session end
check("list_changed for one tenant reaches its sessions only", to, { 70, 70, 70 })
n = #m.sent
tools.list_changed({ nobody = true })
check("... and nothing for a tenant without sessions", #m.sent, n)

local flushed = 0
m.history_flush = function() flushed = flushed + 1 end
n = #m.sent
server.on_shutdown()
check("shutdown closes upstreams and flushes the history", { up_calls()[#up_calls()][1], flushed }, { "shutdown", 1 })
check("shutdown tears the listener down with notifications/cancelled naming its request, final",
  { m.sent[n + 1].msg.method, m.sent[n + 1].msg.params.requestId, m.sent[n + 1].final, m.sent[n + 1].exchange },
  { "notifications/cancelled", "L2", true, 251 })
local metrics = server.metrics_text()
check("metrics text: the context saved, then the upstreams'",
  { metrics:match("^# HELP moonbox_context_in_bytes_total ") ~= nil,
    metrics:match("\nmoonbox_context_saved_tokens_total 0\n# upstream\n$") ~= nil }, { true, true })

H.done()
