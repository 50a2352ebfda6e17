-- tests/lua/test_upstream_transport.lua - the two byte pipes to an upstream MCP server
-- (lua/mcp/upstream_transport.lua) with the C side scripted: a child process (mb.spawn: lines
-- in, writes out, the queue limit, corked writes, the child's environment) and Streamable HTTP
-- (mb.http_request: SSE split across any chunk boundary, CRLF, priming events, oversized events,
-- JSON and batch answers, the session id and its expiry, HTTP errors turned into JSON-RPC errors
-- for the id, URLs without secrets in messages, the DELETE at close). The client on top
-- (lua/mcp/upstream.lua) is tested end to end in tests/integration/gateway.test.mjs and
-- tests/security/gateway.test.mjs. Standalone: `lua5.4 tests/lua/test_upstream_transport.lua`.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_has = H.check, H.check_has

local m = H.new_mb({ max_message_bytes = 4096, upstream_init_timeout_ms = 7000 })
local ut = require("mcp.upstream_transport")

-- the handlers a client gives open(): each records what it got
local got
local function handlers()
  got = { messages = {}, bad = {}, closed = {}, stderr = {}, expired = {} }
  return {
    message = function(msg) got.messages[#got.messages + 1] = msg end,
    bad = function(text) got.bad[#got.bad + 1] = text end,
    closed = function(reason) got.closed[#got.closed + 1] = reason end,
    stderr = function(line) got.stderr[#got.stderr + 1] = line end,
    session_expired = function(msg) got.expired[#got.expired + 1] = msg end,
  }
end

---------------------------------------------------------------------------------------------
-- stdio

local spawned, proc
m.spawn = function(opts)
  spawned = opts
  proc = { written = {}, queued = 0, closed_with = nil }
  function proc:pid() return 4242 end
  function proc:write(data) self.written[#self.written + 1] = data return true end
  function proc:queued_bytes() return self.queued end
  function proc:close(g) self.closed_with = g end
  function proc:kill(sig) self.killed = sig end
  return proc
end

local t = ut.open({ transport = "stdio", command = "srv", args = { "-x" }, env = { API_KEY = "k" }, cwd = "/w" }, handlers())
check("spawned with the server's command", { spawned.command, spawned.args, spawned.cwd, spawned.max_line_bytes },
  { "srv", { "-x" }, "/w", 4096 })
check("the server's env is added", spawned.env.API_KEY, "k")
check("pid and kind", { t.pid, t.kind }, { 4242, "stdio" })

local env = ut.child_env({ X = "1" })
check("child env: the extra variables", env.X, "1")
check("child env: PATH is passed on", env.PATH, os.getenv("PATH"))
check("child env: nothing else of ours", (function()
  for k in pairs(env) do
    if k ~= "X" and not ({ PATH = 1, HOME = 1, USER = 1, LOGNAME = 1, SHELL = 1, TERM = 1, LANG = 1, LC_ALL = 1, TMPDIR = 1, TZ = 1,
      NODE_PATH = 1, NODE_OPTIONS = 1, NODE_EXTRA_CA_CERTS = 1, SSL_CERT_FILE = 1, HTTP_PROXY = 1, HTTPS_PROXY = 1, NO_PROXY = 1,
      http_proxy = 1, https_proxy = 1, no_proxy = 1, XDG_CACHE_HOME = 1, XDG_CONFIG_HOME = 1, npm_config_cache = 1 })[k] then
      return k
    end
  end
end)(), nil)

spawned.on_line('{"jsonrpc":"2.0","id":1,"result":{}}')
spawned.on_line("")
spawned.on_line("Server started on stdio")
spawned.on_line('"just a string"')
spawned.on_line(nil, "too long")
check("a JSON-RPC line is a message", got.messages, { { jsonrpc = "2.0", id = 1, result = {} } })
check("an empty line is nothing", #got.bad, 3)
check_has("a log line on stdout is bad", got.bad[1], "stdout line is not JSON-RPC (")
check_has("... and quoted", got.bad[1], "): Server started on stdio")
check("a JSON string is not a message", got.bad[2], 'stdout line is not JSON-RPC (not an object): "just a string"')
check("an over-long line", got.bad[3], "a stdout line above 4096 bytes was dropped (max_message_bytes)")
spawned.on_line("x" .. string.rep("y", 500))
check("a bad line is quoted up to 200 bytes", #got.bad[4] - #got.bad[4]:match("^(.-%): )"), 200)
spawned.on_stderr("warn: x")
check("stderr lines", got.stderr, { "warn: x" })
spawned.on_exit(3, 0)
spawned.on_exit(nil, 9)
check("exit reasons", got.closed, { "the process exited with status 3", "the process exited on signal 9" })

check("send writes one line", { t:send({ jsonrpc = "2.0", id = 2, method = "ping" }), proc.written[#proc.written] },
  { true, '{"id":2,"jsonrpc":"2.0","method":"ping"}\n' })
local cyc = {}
cyc.self = cyc
local ok, err = t:send(cyc)
check("a message that cannot be encoded", { ok, err and err:match("^cannot encode the message: ") ~= nil }, { nil, true })

local n = #proc.written
t:cork()
for i = 1, 9 do t:send({ id = i }) end
check("corked: one write per 8 messages", { #proc.written - n, proc.written[#proc.written] },
  { 1, ('{"id":1}\n{"id":2}\n{"id":3}\n{"id":4}\n{"id":5}\n{"id":6}\n{"id":7}\n{"id":8}\n') })
t:uncork()
check("uncork writes the rest", { #proc.written - n, proc.written[#proc.written] }, { 2, '{"id":9}\n' })
t:uncork()
check("uncork with nothing corked writes nothing", #proc.written - n, 2)

proc.queued = 2 * 4096 + 1
got.closed = {}
ok, err = t:send({ id = 10 })
check("an upstream that does not read its stdin is given up", { ok, err, got.closed },
  { nil, "the upstream does not read its stdin", { "it does not read its stdin (8193 bytes waiting, above 2 x max_message_bytes)" } })
t:close()
check("close with the default grace", proc.closed_with, 2000)
t:kill()
check("kill", proc.killed, "KILL")

m.spawn = function() return nil, "spawn srv: No such file or directory" end
check("a command that cannot start", { ut.open({ transport = "stdio", command = "srv" }, handlers()) },
  { nil, "spawn srv: No such file or directory" })

---------------------------------------------------------------------------------------------
-- Streamable HTTP

check("safe url drops user and password", ut.safe_url("https://me:secret@api.example.com/mcp?key=1#x"), "https://api.example.com/mcp")
check("safe url of a plain url", ut.safe_url("http://localhost:3000/mcp"), "http://localhost:3000/mcp")
check("safe url of something else", ut.safe_url("not a url"), "(url)")

local requests = {}
m.http_request = function(opts)
  local req = { opts = opts }
  function req:cancel() self.cancelled = true end
  requests[#requests + 1] = req
  return req
end
local timers = {}
m.timer = function(ms, fn) timers[#timers + 1] = { ms = ms, fn = fn } return {} end

local S = { transport = "http", url = "https://u:p@h.example/mcp?token=t", headers = { Authorization = "Bearer x" } }
t = ut.open(S, handlers())
check("kind", t.kind, "http")

-- initialize: JSON answer, the session id is kept
t:send({ jsonrpc = "2.0", id = 1, method = "initialize", params = {} })
local r = requests[#requests]
check("POST with the server's headers", { r.opts.method, r.opts.url, r.opts.headers }, { "POST", S.url, {
  Authorization = "Bearer x", ["Content-Type"] = "application/json", Accept = "application/json, text/event-stream" } })
check("POST limits", { r.opts.max_response_bytes, r.opts.connect_timeout_ms, r.opts.timeout_ms }, { 4096, 7000, 30000 })
r.opts.on_headers(200, { ["content-type"] = "application/json", ["mcp-session-id"] = "sess-1" })
r.opts.on_data('{"jsonrpc":"2.0","id":1,')
r.opts.on_data('"result":{}}')
r.opts.on_done(nil, 200)
check("a JSON answer in pieces", got.messages, { { jsonrpc = "2.0", id = 1, result = {} } })
check("the session id is kept", t.session, "sess-1")

t.protocol = "2025-11-25"
t:send({ jsonrpc = "2.0", id = 2, method = "tools/list" }, nil, 5000)
r = requests[#requests]
check("later requests carry the session and the revision", { r.opts.headers["Mcp-Session-Id"], r.opts.headers["MCP-Protocol-Version"] },
  { "sess-1", "2025-11-25" })
check("a request's own timeout, plus a second", r.opts.timeout_ms, 6000)
check("the request is active", t.active[r], true)

-- SSE, cut at every byte
local stream = ': comment\r\n\r\nid: 0\r\ndata:\r\n\r\nevent: message\r\ndata: {"jsonrpc":"2.0",\r\ndata: "id":2,"result":{"n":1}}\r\n\r\n'
  .. 'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
local expected = { { jsonrpc = "2.0", id = 2, result = { n = 1 } }, { jsonrpc = "2.0", method = "notifications/progress", params = {} } }
for cut = 1, #stream do
  got.messages, got.bad = {}, {}
  t:send({ jsonrpc = "2.0", id = 2, method = "tools/list" })
  r = requests[#requests]
  r.opts.on_headers(200, { ["content-type"] = "text/event-stream; charset=utf-8" })
  r.opts.on_data(stream:sub(1, cut))
  r.opts.on_data(stream:sub(cut + 1))
  r.opts.on_done(nil, 200)
  if not H.deep_eq(got.messages, expected) or #got.bad > 0 then
    check("SSE cut after byte " .. cut, { got.messages, got.bad }, { expected, {} })
    break
  end
  if cut == #stream then check("SSE split at any byte: the same two messages, priming events skipped", got.messages, expected) end
end
check("done requests are no longer active", t.active[r], nil)

-- one byte at a time, and a batch answer
got.messages = {}
t:send({ jsonrpc = "2.0", id = 3, method = "x" })
r = requests[#requests]
r.opts.on_headers(200, { ["content-type"] = "text/event-stream" })
for c in ('data: [{"id":3,"result":1},5,{"id":4,"result":2}]\n\n'):gmatch(".") do r.opts.on_data(c) end
r.opts.on_done(nil, 200)
check("an SSE batch, byte by byte; non-objects skipped", got.messages, { { id = 3, result = 1 }, { id = 4, result = 2 } })

-- an event larger than max_message_bytes is dropped, the stream goes on
got.messages, got.bad = {}, {}
t:send({ jsonrpc = "2.0", id = 5, method = "x" })
r = requests[#requests]
r.opts.on_headers(200, { ["content-type"] = "text/event-stream" })
r.opts.on_data("data: " .. string.rep("x", 5000))
r.opts.on_data('\n\ndata: {"id":5,"result":0}\n\n')
check("an oversized SSE event is dropped, the next one read", { got.bad, got.messages },
  { { "an SSE event above 4096 bytes (max_message_bytes) was dropped" }, { { id = 5, result = 0 } } })
r.opts.on_done(nil, 200)

got.bad = {}
t:send({ jsonrpc = "2.0", id = 6, method = "x" })
r = requests[#requests]
r.opts.on_headers(200, { ["content-type"] = "application/json" })
r.opts.on_data("<html>")
r.opts.on_done(nil, 200)
check_has("an answer that is not JSON", got.bad[1], "a response is not JSON-RPC: ")
t:send({ jsonrpc = "2.0", method = "notifications/initialized" })
r = requests[#requests]
r.opts.on_headers(202, {})
r.opts.on_done(nil, 202)
check("202 without a body is nothing", #got.bad, 1)

-- failures become answers for the id
got.messages = {}
t:send({ jsonrpc = "2.0", id = 7, method = "tools/call" })
r = requests[#requests]
r.opts.on_headers(500, { ["content-type"] = "text/plain" })
r.opts.on_data("internal\n\n   error " .. string.rep("z", 300))
r.opts.on_done(nil, 500)
local e = got.messages[1]
check("HTTP 500 is an error for the id", { e.id, e.error.code }, { 7, -32000 })
check("the message has no secrets of the url and an excerpt", e.error.message,
  "HTTP 500 from https://h.example/mcp: internal error " .. string.rep("z", 185) .. "...")
t:send({ jsonrpc = "2.0", id = 8, method = "tools/call" })
requests[#requests].opts.on_done("Connection refused", nil)
check("a transfer error is an error for the id", got.messages[2], { jsonrpc = "2.0", id = 8, error = { code = -32000, message = "Connection refused" } })
t:send({ jsonrpc = "2.0", method = "notifications/cancelled" })
requests[#requests].opts.on_done("Connection refused", nil)
check("a failed notification is reported as bad", got.bad[#got.bad], "notifications/cancelled: Connection refused")

-- the session expires: 404, or 400 that says so
t:send({ jsonrpc = "2.0", id = 9, method = "tools/list" })
r = requests[#requests]
r.opts.on_headers(404, {})
r.opts.on_done(nil, 404)
check("404 with a session: expired", got.expired[1].id, 9)
t:send({ jsonrpc = "2.0", id = 10, method = "tools/list" })
r = requests[#requests]
r.opts.on_headers(400, {})
r.opts.on_data("Bad Request: No valid Session ID provided")
r.opts.on_done(nil, 400)
check("400 about the session: expired", got.expired[2].id, 10)
t:send({ jsonrpc = "2.0", id = 11, method = "tools/list" })
r = requests[#requests]
r.opts.on_headers(400, {})
r.opts.on_data("bad params")
r.opts.on_done(nil, 400)
check("another 400 is an error", { #got.expired, got.messages[#got.messages].id }, { 2, 11 })

-- the GET stream
t:listen()
r = requests[#requests]
check("listen: GET for SSE with the session", { r.opts.method, r.opts.headers.Accept, r.opts.headers["Content-Type"],
  r.opts.headers["Mcp-Session-Id"], r.opts.max_response_bytes }, { "GET", "text/event-stream", nil, "sess-1", 0 })
local before = #requests
t:listen()
check("one GET stream at a time", #requests, before)
got.messages = {}
r.opts.on_headers(200)
r.opts.on_data('data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n')
check("a message on the GET stream", got.messages[1].method, "notifications/tools/list_changed")
r.opts.on_done()
check("a stream that ends is opened again a second later", { #timers, timers[1].ms }, { 1, 1000 })
timers[1].fn()
r = requests[#requests]
r.opts.on_headers(405)
r.opts.on_data("Method Not Allowed")
r.opts.on_done()
check("405: no stream, no retry, nothing bad", { #timers, #got.bad }, { 1, 2 })

-- close cancels what is in flight and ends the session
t:send({ jsonrpc = "2.0", id = 12, method = "tools/list" })
local inflight = requests[#requests]
t:close()
check("close cancels requests in flight", inflight.cancelled, true)
r = requests[#requests]
check("close deletes the session", { r.opts.method, r.opts.headers, r.opts.timeout_ms },
  { "DELETE", { ["Mcp-Session-Id"] = "sess-1", Authorization = "Bearer x" }, 2000 })
check("the DELETE is kept alive until done", ut.deleting[r], true)
r.opts.on_done()
check("... then forgotten", ut.deleting[r], nil)
check("send after close", { t:send({ id = 13 }) }, { nil, "the connection is closed" })
local n_msgs = #got.messages
inflight.opts.on_done("cancelled", nil)
check("an answer after close is dropped", #got.messages, n_msgs)

-- a server without sessions: a 404 is an error, and close sends no DELETE
t = ut.open({ transport = "http", url = "http://h/mcp", headers = {} }, handlers())
t:send({ jsonrpc = "2.0", id = 1, method = "initialize" })
requests[#requests].opts.on_headers(200, { ["content-type"] = "application/json" })
requests[#requests].opts.on_data('{"jsonrpc":"2.0","id":1,"result":{}}')
requests[#requests].opts.on_done(nil, 200)
check("no session id given", t.session, nil)
t:send({ jsonrpc = "2.0", id = 2, method = "tools/list" })
requests[#requests].opts.on_headers(404, {})
requests[#requests].opts.on_done(nil, 404)
check("404 without a session is an error, not an expiry", { #got.expired, got.messages[2] and got.messages[2].error.message },
  { 0, "HTTP 404 from http://h/mcp: " })
before = #requests
t:close()
check("no session, no DELETE", #requests, before)

H.done()
