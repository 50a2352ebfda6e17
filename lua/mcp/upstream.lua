-- mcp/upstream.lua - moonbox as an MCP client of the servers in "mcpServers": the gateway.
--
-- Each configured server gets a client object that starts its transport
-- (mcp/upstream_transport.lua), initializes, lists its tools (every page) into the catalog
-- (category = server name) and then serves `tools/call` for sandbox code: host calls
-- `upstream_call` (servers.<server>.<tool>(args), mcp.call) and `upstream_batch` (mcp.parallel)
-- arrive here, run in coroutines that yield until the upstream answers, and reply with the
-- tool's value or an error the sandbox raises.
--
-- Supervision: a client is starting, ready, or in backoff after a failure (the process exited,
-- initialize failed or timed out, a ping after a timed-out call went unanswered). In backoff it
-- restarts after 250 ms doubling up to upstream_restart_max_ms; calls meanwhile fail at once with
-- the reason and the time of the next attempt. A client's callbacks carry the generation they
-- were made for, so nothing from a replaced connection touches the new one.
--
-- Calls respect the execution: upstream_max_calls and a server's maxCalls bound them, the
-- server's timeoutMs (else upstream_timeout_ms) bounds each, and when the execution ends
-- (deadline, cancellation, error) its calls still in flight are cancelled upstream
-- (notifications/cancelled). With the PII policy on, tokens in the arguments are restored from
-- the tenant's vault here, on the way to the upstream only; what comes back goes to the sandbox
-- and leaves it through the execution's policy like any other value.
--
-- A server with `"perTenant": true` runs one instance per tenant: the configured client is the
-- `default` tenant's instance (started at start-up like any server, and the one the catalog,
-- the types and the workflows' checks read), and another tenant's first call starts that
-- tenant's own instance (placeholders such as ${tenant} replaced, mcp/upstream_config.lua). An
-- instance without a call for upstream_idle_ms is stopped (the default one keeps its tool list
-- and starts again at its next call); at most upstream_max_instances run per server.

local mb = mb
local null = mb.null
local cfg = mb.config
local sfmt = string.format
local ucfg = require("mcp.upstream_config")
local transport = require("mcp.upstream_transport")
local approval = require("mcp.upstream_approval")

local M = { by_name = {}, by_ident = {}, list = {} }
local tools, catalog, text -- set by init
local RELAYED -- set below: requests an upstream may send moonbox during a call
local arguments

local PROTOCOL = mb.protocol.served[1] -- what moonbox asks for (src/protocol.h)
local MAX_TOOLS, MAX_PAGES = 10000, 1000
local MAX_DESCRIPTION = 16384 -- bytes of a tool's description kept for the catalog

local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end

local function errtext(err)
  if type(err) == "table" then
    local m = err.message
    if type(m) ~= "string" then
      local ok, j = pcall(mb.json_encode, m == nil and "error without a message" or m)
      m = ok and j or "error"
    end
    if math.type(err.code) == "integer" and err.code ~= -32000 and err.code ~= -32001 then
      m = sfmt("%s (JSON-RPC error %d)", m, err.code)
    end
    return m
  end
  return tostring(err)
end

local function resume(co, ...)
  local ok, err = coroutine.resume(co, ...)
  if not ok then mb.log("error", "upstream: " .. tostring(err)) end
end

---------------------------------------------------------------------------------------------
-- one upstream server

local S = {}
S.__index = S

function S:log(level, fmt, ...)
  mb.log(level, sfmt("upstream %s: " .. fmt, self.label, ...))
end

-- The counters of a server: an instance of a perTenant server counts on the configured one.
function S:counts() return self.template or self end

-- Sends a request and yields until its answer, a timeout or a failure; result | nil, err table.
-- opts: on_progress(params), progress_token; opts.id is set to the request id before the wait.
function S:request(method, params, timeout_ms, opts)
  opts = opts or {}
  if not self.t then return nil, { message = "not connected" } end
  self.next_id = self.next_id + 1
  local id = self.next_id
  local msg = { jsonrpc = "2.0", id = id, method = method, params = params }
  local p = { co = coroutine.running(), msg = msg, method = method, on_progress = opts.on_progress,
              progress_token = opts.progress_token, request = opts.request }
  local ok, err = self.t:send(msg, nil, timeout_ms)
  if not ok then return nil, { message = "cannot send: " .. tostring(err) } end
  self.pending[id] = p
  if p.progress_token ~= nil then self.progress[p.progress_token] = p end
  opts.id = id
  p.timeout_ms = timeout_ms
  p.deadline = mb.now_ms() + timeout_ms
  self:arm_sweep(p.deadline)
  local resp = coroutine.yield()
  if resp.error ~= nil and resp.error ~= null then
    return nil, is_object(resp.error) and resp.error or { message = resp.error }
  end
  if resp.result == nil then return nil, { message = "the answer has neither result nor error" } end
  return resp.result
end

-- Ends the wait of request id with resp (a JSON-RPC response table).
function S:settle(id, resp)
  local p = self.pending[id]
  if not p then return end
  self.pending[id] = nil
  if p.progress_token ~= nil then self.progress[p.progress_token] = nil end
  resume(p.co, resp)
end

-- Timeouts: one timer per server, armed for the earliest deadline of its requests, instead of
-- a timer per request (a request that is answered costs no timer work at all).
function S:arm_sweep(deadline)
  if self.sweep_timer and self.sweep_at <= deadline then return end
  if self.sweep_timer then self.sweep_timer:stop() end
  self.sweep_at = deadline
  self.sweep_timer = mb.timer(math.max(0, math.ceil(deadline - mb.now_ms())), function()
    self.sweep_timer = nil
    local now, due, next_at = mb.now_ms(), {}, nil
    for id, p in pairs(self.pending) do
      if p.deadline and p.deadline <= now + 1 then
        due[#due + 1] = id
      elseif p.deadline and (not next_at or p.deadline < next_at) then
        next_at = p.deadline
      end
    end
    table.sort(due)
    for _, id in ipairs(due) do
      local p = self.pending[id]
      if p then self:timed_out(id, p.timeout_ms) end
    end
    if next_at then self:arm_sweep(next_at) end
  end)
end

function S:notify(method, params)
  if self.t then self.t:send({ jsonrpc = "2.0", method = method, params = params }) end
end

function S:cancel_request(id, reason)
  local p = self.pending[id]
  if not p then return end
  if p.method ~= "initialize" then -- MCP: initialize is never cancelled
    self:notify("notifications/cancelled", { requestId = id, reason = reason })
  end
  self:settle(id, { error = { code = -32001, message = reason } })
end

function S:timed_out(id, ms)
  local p = self.pending[id]
  if not p then return end
  -- `timeouts` counts tool calls; initialize, listing and ping timeouts end in a restart and
  -- show as last_error and restarts instead
  if p.method == "tools/call" then self:counts().timeouts = self:counts().timeouts + 1 end
  local limit = p.method == "tools/call" and sfmt("timeoutMs of mcpServers.%s, else upstream_timeout_ms", self.name)
    or "upstream_init_timeout_ms"
  self:cancel_request(id, sfmt("no answer to %s within %d ms (%s)", p.method, ms, limit))
  if p.method == "tools/call" then self:probe() end
end

-- After a call timed out: is the server alive at all? One ping; no answer means hung: restart.
function S:probe()
  if self.probing or self.state ~= "ready" then return end
  self.probing = true
  local gen = self.generation
  coroutine.wrap(function()
    local _, err = self:request("ping", {}, math.min(10000, cfg.upstream_init_timeout_ms))
    self.probing = false
    if err and gen == self.generation then
      self:failed("did not answer a ping after a call timed out (hung?): " .. errtext(err))
    end
  end)()
end

function S:fail_pending(reason)
  local ids = {}
  for id in pairs(self.pending) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do self:settle(id, { error = { code = -32000, message = reason } }) end
end

function S:wake_waiters()
  local list = self.waiters
  self.waiters = {}
  for _, w in ipairs(list) do
    if not w.done then
      w.done = true
      if w.timer then w.timer:stop() end
      resume(w.co)
    end
  end
end

-- Why calls cannot be made now, for an agent to act on.
function S:unavailable(waited)
  if self.state == "backoff" then
    return sfmt("upstream server %q is not available: %s; restarting (attempt %d) in %d ms",
      self.name, tostring(self.last_error), self.failures + 1,
      math.max(0, math.floor(self.retry_at - mb.now_ms())))
  elseif self.state == "disabled" then
    return sfmt("upstream server %q is disabled in mcpServers", self.name)
  elseif self.state == "stopped" or self.state == "idle" then
    return sfmt("upstream server %q is stopped (moonbox is shutting down)", self.name)
  elseif self.state == "starting" then
    -- waited: the caller waited for it as long as its execution could (its timeout_ms)
    return sfmt("upstream server %q is still starting%s (it has upstream_init_timeout_ms=%d to "
      .. "get ready); try again in a moment, or with a longer timeout_ms", self.name,
      waited and ", longer than this execution could wait" or "", cfg.upstream_init_timeout_ms)
  end
  return sfmt("upstream server %q is %s", self.name, self.state)
end

function S:failed(reason)
  if self.state == "stopped" then return end
  self:log("warning", "%s", reason)
  self.last_error = reason
  self.failures = self.failures + 1
  self.generation = self.generation + 1
  local t = self.t
  self.t = nil
  self.pid = nil
  if t then t:close(0) end
  self.resend = {}
  self.state = "backoff"
  M.changed()
  self:fail_pending(sfmt("upstream server %q failed: %s", self.name, reason))
  local delay = math.min(cfg.upstream_restart_max_ms, 250 * 2 ^ math.min(self.failures - 1, 20))
  delay = math.floor(delay)
  self.retry_at = mb.now_ms() + delay
  self.restart_timer = mb.timer(delay, function()
    self.restart_timer = nil
    self:counts().restarts = self:counts().restarts + 1
    self:start()
  end)
  self:wake_waiters()
end

local function valid_tool(t)
  return is_object(t) and type(t.name) == "string" and t.name ~= "" and #t.name <= 256
    and not t.name:find("[%c]") and not t.name:find("^%s") and not t.name:find("%s$")
end

-- Lists every page of tools; imports the callable ones into the catalog.
function S:refresh_tools(gen)
  local list, seen, cursor = {}, {}, nil
  local deadline = mb.now_ms() + cfg.upstream_init_timeout_ms -- for all pages together
  for page = 1, MAX_PAGES + 1 do
    if page > MAX_PAGES then
      self:log("warning", "tools/list: still a nextCursor after %d pages; the rest ignored", MAX_PAGES)
      break
    end
    local left = math.floor(deadline - mb.now_ms())
    if left <= 0 then
      return nil, sfmt("tools/list: the pages took longer than %d ms (upstream_init_timeout_ms)",
        cfg.upstream_init_timeout_ms)
    end
    local r, err = self:request("tools/list", cursor and { cursor = cursor } or {}, left)
    if gen ~= self.generation then return nil end
    if not r then return nil, "tools/list: " .. errtext(err) end
    if not is_object(r) or type(r.tools) ~= "table" then return nil, "tools/list: the result has no tools array" end
    for _, t in ipairs(r.tools) do
      if not valid_tool(t) then
        self:log("warning", "tools/list: skipped a tool without a usable name")
      elseif seen[t.name] then
        self:log("warning", "tools/list: tool %q listed twice; the first kept", t.name)
      elseif #list >= MAX_TOOLS then
        self:log("warning", "tools/list: more than %d tools; the rest ignored", MAX_TOOLS)
        break
      else
        seen[t.name] = true
        list[#list + 1] = t
      end
    end
    cursor = r.nextCursor
    if type(cursor) ~= "string" or cursor == "" then break end
  end
  local by_name, by_ident, shown = {}, {}, {}
  for i, t in ipairs(list) do
    -- calls need only the name and annotations; the definitions live in the catalog
    local keep = { name = t.name, annotations = is_object(t.annotations) and t.annotations or nil,
                   infer = not is_object(t.outputSchema) or nil } -- result shapes recorded (on_result)
    list[i] = keep
    by_name[t.name] = keep
    local id = ucfg.ident(t.name)
    if by_ident[id] == nil then by_ident[id] = keep else by_ident[id] = false end -- false: ambiguous
    if not ucfg.refusal(self.spec, t) then
      local d = type(t.description) == "string" and t.description or ""
      keep.summary = text.one_line(d)
      if #d > MAX_DESCRIPTION then
        d = d:sub(1, MAX_DESCRIPTION):gsub("[\128-\191]*$", ""):gsub("[\192-\255]$", "") .. " [cut]"
      end
      shown[#shown + 1] = { name = t.name, title = type(t.title) == "string" and t.title:sub(1, 256) or nil,
        description = d,
        inputSchema = is_object(t.inputSchema) and t.inputSchema or nil,
        outputSchema = is_object(t.outputSchema) and t.outputSchema or nil,
        annotations = is_object(t.annotations) and t.annotations or nil }
    end
  end
  self.tools, self.tool_by_name, self.tool_by_ident = list, by_name, by_ident
  self.callable = #shown
  local c = self.template
  if c then -- a tenant's instance: its list is the server's until the configured one has its own
    self.refresh_done = mb.now_ms()
    if c.refresh_done then return true end
    c.tools, c.tool_by_name, c.tool_by_ident, c.callable = list, by_name, by_ident, #shown
    c.server_info, c.instructions, c.protocol = self.server_info, self.instructions, self.protocol
  end
  local info = is_object(self.server_info) and self.server_info or {}
  local desc = type(self.instructions) == "string" and self.instructions:sub(1, 500)
    or sfmt("tools of the upstream MCP server %s (%s)", self.name, tostring(info.name or "?"))
  local t0 = mb.now_ms()
  local ok, err = catalog.import("upstream:" .. self.name,
    { server = self.name, description = desc, tools = mb.array(shown) }, "mcpServers." .. self.name)
  if not ok then self:log("warning", "catalog: %s", tostring(err)) end
  self.refresh_done = mb.now_ms()
  self.refresh_ms = self.refresh_done - t0
  if c then c.refresh_done, c.refresh_ms = self.refresh_done, self.refresh_ms end
  if self.state == "ready" or c then M.changed() end -- a list_changed refresh (at start: ready below)
  return true
end

-- Questions an upstream server may ask its client while moonbox calls one of its tools
-- (sampling/createMessage, elicitation/create: declared in initialize). moonbox asks its own
-- client on behalf of the execution that made the call (2025-11-25: a request on its stream;
-- 2026-07-28: input_required), with personal data in the question tokenized (it may reach a
-- model), and hands the answer back. Roots are not offered: an upstream such as
-- server-filesystem would take the client's roots as its own allowed directories.
RELAYED = { ["sampling/createMessage"] = "sampling", ["elicitation/create"] = "elicitation" }

function S:relay(msg)
  local function reply(result, err)
    if not self.t then return end
    if result ~= nil then
      self.t:send({ jsonrpc = "2.0", id = msg.id, result = result })
    else
      self.t:send({ jsonrpc = "2.0", id = msg.id, error = { code = -32603, message = tostring(err) } })
    end
  end
  -- the execution the question belongs to: the one whose call to this server is the latest in
  -- flight (over stdio nothing links a server's request to our call). When calls of more than
  -- one tenant are in flight, which one asked cannot be known: the question (another tenant's
  -- data) must not reach the wrong client, nor its answer the wrong call, so it is refused.
  local p, pid, tenant
  for id, q in pairs(self.pending) do
    if q.request then
      local t = q.request.tenant or "default"
      if tenant and t ~= tenant then
        return reply(nil, "moonbox has calls of more than one tenant in flight to this server and "
          .. "cannot tell whose question this is; ask again when the other calls have ended")
      end
      tenant = t
      if not pid or id > pid then p, pid = q, id end
    end
  end
  local request = p and p.request
  if not request or not request.entry or request.entry.ended or not request.client_request then
    return reply(nil, "moonbox has no call in flight to ask its client about")
  end
  local capability = RELAYED[msg.method]
  local caps = request.sess and request.sess.client_capabilities or {}
  if caps[capability] == nil then
    return reply(nil, sfmt("the client of moonbox did not declare the %s capability", capability))
  end
  local params = is_object(msg.params) and msg.params or {}
  local ok, text = pcall(mb.json_encode, params)
  if ok then
    local clean = mb.json_decode(tools.pii.outbound(request.tenant, text))
    if is_object(clean) then params = clean end
  end
  self:log_limited("log", sfmt("asks the client: %s", msg.method))
  local co = coroutine.create(function()
    local result, err = request:client_request(msg.method, params, capability)
    reply(result, result == nil and (is_object(err) and err.message or err) or nil)
  end)
  local rok, rerr = coroutine.resume(co)
  if not rok then reply(nil, "internal error: " .. tostring(rerr)) end
end

local function handlers(self, gen)
  local h = {}
  function h.message(msg)
    if gen ~= self.generation then return end
    if msg.method == nil then
      if msg.id ~= nil then self:settle(msg.id, msg) end
      return
    end
    if msg.id ~= nil then -- a request from the upstream: ping, and questions for the client
      if msg.method == "ping" then
        self.t:send({ jsonrpc = "2.0", id = msg.id, result = {} })
      elseif RELAYED[msg.method] then
        self:relay(msg)
      else
        self.t:send({ jsonrpc = "2.0", id = msg.id, error = { code = -32601,
          message = "moonbox does not serve " .. tostring(msg.method) .. " to upstream servers" } })
      end
      return
    end
    local params = is_object(msg.params) and msg.params or {}
    if msg.method == "notifications/tools/list_changed" then
      self:schedule_refresh()
    elseif msg.method == "notifications/progress" then
      local p = params.progressToken ~= nil and self.progress[params.progressToken]
      if p and p.on_progress then p.on_progress(params) end
    elseif msg.method == "notifications/message" then
      local data = params.data
      if type(data) ~= "string" then data = select(2, pcall(mb.json_encode, data)) end
      self:log_limited("log", sfmt("[%s] %s", tostring(params.level):sub(1, 20), tostring(data):sub(1, 2000)))
    end
  end
  function h.closed(reason)
    if gen ~= self.generation then return end
    self:failed(reason)
  end
  function h.bad(what)
    if gen ~= self.generation then return end
    self:log("warning", "%s", what)
  end
  function h.stderr(line)
    if gen ~= self.generation then return end
    self:log_limited("stderr", line)
  end
  function h.session_expired(msg)
    -- HTTP 404 to our session: the server forgot it. Initialize again, then send again what was
    -- in flight on the old session (once: a server that forgets the new session at once fails).
    local p = self.pending[msg.id]
    if not p or gen ~= self.generation then return end
    if p.resent then
      return self:failed("the server forgot a new session at once (HTTP 404 after re-initializing)")
    end
    if self.state ~= "ready" then return end
    self:log("info", "session expired (HTTP 404); initializing a new one")
    for id, q in pairs(self.pending) do
      if q.method ~= "initialize" and q.msg then
        q.resent = true
        self.resend[#self.resend + 1] = q.msg
      end
    end
    table.sort(self.resend, function(a, b) return a.id < b.id end)
    self.generation = self.generation + 1
    local t = self.t
    self.t = nil
    if t then t:close(0) end
    self:start()
  end
  return h
end

-- What an upstream writes to stderr or logs with notifications/message: at most 50 lines per
-- 10 seconds, then a count of what was left out.
function S:log_limited(kind, line)
  local now = mb.now_ms()
  local w = self.log_windows[kind]
  if not w then
    w = { start = now, count = 0, dropped = 0 }
    self.log_windows[kind] = w
  end
  if now - w.start > 10000 then
    if w.dropped > 0 then self:log("info", "(%d %s lines not shown)", w.dropped, kind) end
    w.start, w.count, w.dropped = now, 0, 0
  end
  w.count = w.count + 1
  if w.count <= 50 then
    -- control bytes escaped: an upstream cannot forge lines of our log
    line = line:gsub("%c", function(c) return sfmt("\\x%02x", c:byte()) end)
    self:log("info", "%s: %s", kind, line)
  else
    w.dropped = w.dropped + 1
  end
end

-- Re-lists after list_changed: debounced, and at least ten times the last listing's own time
-- apart, so a server that changes its list all the time cannot keep the loop busy importing.
function S:schedule_refresh()
  if self.refresh_timer then return end
  local wait = math.max(100, math.floor((self.refresh_ms or 0) * 10))
  wait = math.max(wait, math.floor((self.refresh_done or 0) + wait - mb.now_ms()))
  self.refresh_timer = mb.timer(math.min(wait, 60000), function()
    self.refresh_timer = nil
    if self.state ~= "ready" then return end
    local gen = self.generation
    coroutine.wrap(function()
      local ok, err = self:refresh_tools(gen)
      if ok then
        self:log("info", "tools changed: %d tools", #self.tools)
      elseif err then
        self:log("warning", "%s", err)
      end
    end)()
  end)
end

function S:start()
  self.generation = self.generation + 1
  local gen = self.generation
  self.state = "starting"
  self.last_used = mb.now_ms()
  local spec, xerr = ucfg.expand(self.spec, self.tenant) -- placeholders: ${tenant}, ${secret:...}
  if not spec then return self:failed("cannot start: " .. xerr) end
  if spec.tenant_dir and spec.transport == "stdio" then
    local okd, derr = mb.fs.mkdir(spec.tenant_dir)
    if not okd then return self:failed("cannot make its directory: " .. tostring(derr)) end
  end
  local okp, t, err = pcall(transport.open, spec, handlers(self, gen))
  if not okp then t, err = nil, t end
  if not t then return self:failed("cannot start: " .. tostring(err)) end
  self.t, self.pid = t, t.pid
  self:log("info", "starting (%s%s)", self.spec.transport, t.pid and (", pid " .. t.pid) or "")
  coroutine.wrap(function()
    -- protected: whatever goes wrong while starting ends in backoff, never in "starting" for good
    local okb, berr = pcall(self.handshake, self, gen, t)
    if not okb and gen == self.generation then self:failed("while starting: " .. tostring(berr)) end
  end)()
end

local PROTOCOLS = {} -- what an upstream may answer (src/protocol.h)
for _, v in ipairs(mb.protocol.upstream) do PROTOCOLS[v] = true end

-- initialize, initialized, tools/list; then ready (runs in the start coroutine).
function S:handshake(gen, t)
  do
    local r, ierr = self:request("initialize", {
      protocolVersion = PROTOCOL, capabilities = { sampling = {}, elicitation = {} }, -- relayed
      clientInfo = { name = "moonbox", title = "moonbox gateway", version = mb.version },
    }, cfg.upstream_init_timeout_ms)
    if gen ~= self.generation then return end
    if not r then return self:failed("initialize: " .. errtext(ierr)) end
    if not is_object(r) or type(r.protocolVersion) ~= "string" then
      return self:failed("initialize: the answer has no protocolVersion")
    end
    if not PROTOCOLS[r.protocolVersion] then -- MCP: a client that does not speak it disconnects
      return self:failed(sfmt("initialize: the server speaks protocol version %q, which moonbox "
        .. "does not (it speaks %s)", r.protocolVersion:sub(1, 40), table.concat(mb.protocol.upstream, ", ")))
    end
    self.protocol = r.protocolVersion
    t.protocol = r.protocolVersion
    self.server_info = r.serverInfo
    self.instructions = r.instructions
    if t.kind == "http" then
      -- separate POSTs have no order: tools/list must not overtake the notification
      local co = coroutine.running()
      local ok = t:send({ jsonrpc = "2.0", method = "notifications/initialized", params = {} },
        function() resume(co) end)
      if ok then coroutine.yield() end
      if gen ~= self.generation then return end
    else
      self:notify("notifications/initialized", {})
    end
    local ok, lerr = self:refresh_tools(gen)
    if gen ~= self.generation then return end
    if not ok then return self:failed(lerr) end
    self.state = "ready"
    self.ready_since = mb.now_ms()
    M.changed()
    self:log("info", "ready: %s %s, protocol %s, %d tools (%d callable from code)",
      tostring(is_object(r.serverInfo) and r.serverInfo.name or "?"),
      tostring(is_object(r.serverInfo) and r.serverInfo.version or "?"), r.protocolVersion,
      #self.tools, self.callable)
    if t.listen then t:listen() end
    local again = self.resend
    self.resend = {}
    for _, msg in ipairs(again) do
      if self.pending[msg.id] then t:send(msg) end
    end
    -- a server that stays up 30 s has recovered: the next failure restarts quickly again
    mb.timer(30000, function()
      if gen == self.generation and self.state == "ready" then self.failures = 0 end
    end)
    self:wake_waiters()
  end
end

-- Waits (yields) until a starting server is ready or failed; bounded by the init timeout and
-- by max_ms when given (the time left to the execution that waits).
function S:wait_ready(max_ms)
  local co = coroutine.running()
  local w = { co = co }
  self.waiters[#self.waiters + 1] = w
  local ms = cfg.upstream_init_timeout_ms + 1000
  if max_ms and max_ms < ms then ms = math.max(0, math.floor(max_ms)) end
  w.timer = mb.timer(ms, function()
    w.timer = nil
    if not w.done then
      w.done = true
      resume(co)
    end
  end)
  coroutine.yield()
end

---------------------------------------------------------------------------------------------
-- instances of perTenant servers

local function new_client(spec, tenant)
  return setmetatable({
    name = spec.name, ident = spec.ident, spec = spec, tenant = tenant,
    label = (spec.per_tenant and tenant) and sfmt("%s (tenant %s)", spec.name, tenant) or spec.name,
    state = spec.disabled and "disabled" or "starting",
    generation = 0, next_id = 0, pending = {}, progress = {}, waiters = {}, resend = {},
    tools = {}, tool_by_name = {}, tool_by_ident = {}, callable = 0,
    calls = 0, errors = 0, tool_errors = 0, timeouts = 0, rejected = 0, inflight = 0, call_ms = 0,
    restarts = 0, failures = 0, retry_at = 0, ready_since = 0, last_used = 0,
    log_windows = {},
  }, S)
end

-- Every client: the configured ones and the tenants' instances.
local function each_client(fn)
  for _, s in ipairs(M.list) do
    if s.instances then
      for _, inst in pairs(s.instances) do fn(inst) end
    else
      fn(s)
    end
  end
end

local function running(s)
  local n = 0
  for _, x in pairs(s.instances) do if x.state ~= "idle" then n = n + 1 end end
  return n
end

-- Stops an instance that has nothing in flight; the configured one keeps its tool list (the
-- catalog's), a tenant's instance is forgotten.
function S:stop_idle(why)
  self.generation = self.generation + 1
  self.state = "idle"
  if self.restart_timer then self.restart_timer:stop(); self.restart_timer = nil end
  local t = self.t
  self.t, self.pid = nil, nil
  if t then t:close(cfg.upstream_shutdown_grace_ms) end
  self:log("info", "stopped: %s", why)
  if self.template then self.template.instances[self.tenant] = nil end
end

local function quiet(x) return x.inflight == 0 and next(x.pending) == nil end

-- The client that serves tenant's calls to server s: s itself, or for a perTenant server the
-- tenant's instance, started (and another one stopped to stay within upstream_max_instances)
-- when it is not running. Returns the client | nil, message.
local function client_for(s, tenant)
  if not s.instances or s.state == "disabled" then return s end
  tenant = tenant or "default"
  local inst = s.instances[tenant]
  local now = mb.now_ms()
  if inst and inst.state ~= "idle" then
    inst.last_used = now
    return inst
  end
  if running(s) >= cfg.upstream_max_instances then
    local lru
    for _, x in pairs(s.instances) do
      -- a failing instance (in backoff) serves nobody: it may go first
      if (x.state == "ready" or x.state == "backoff") and quiet(x)
        and (not lru or x.last_used < lru.last_used) then lru = x end
    end
    if not lru then
      return nil, sfmt("upstream server %q runs %d instances (one per tenant), all busy "
        .. "(upstream_max_instances=%d); try again in a moment", s.name, running(s), cfg.upstream_max_instances)
    end
    lru:stop_idle(sfmt("to make room for tenant %s (upstream_max_instances=%d)", tenant, cfg.upstream_max_instances))
  end
  if not inst then
    inst = new_client(s.spec, tenant)
    inst.template = s
    s.instances[tenant] = inst
  end
  inst:start()
  return inst
end

-- Stops the instances without calls for upstream_idle_ms (a timer while perTenant servers exist).
local function sweep_idle()
  local now, idle = mb.now_ms(), cfg.upstream_idle_ms
  for _, s in ipairs(M.list) do
    if s.instances then
      local due = {}
      for _, x in pairs(s.instances) do
        if x.state == "ready" and quiet(x) and now - x.last_used >= idle then due[#due + 1] = x end
      end
      for _, x in ipairs(due) do x:stop_idle(sfmt("no call for %d ms (upstream_idle_ms)", idle)) end
    end
  end
end

---------------------------------------------------------------------------------------------
-- what others ask about the servers: workflows (mcp/workflows.lua) check theirs before they run

M.watchers = {}
-- fn() is called (on the loop, not in a coroutine of its own) whenever a server became ready,
-- failed, or listed its tools again.
function M.watch(fn) M.watchers[#M.watchers + 1] = fn end
function M.changed()
  for _, fn in ipairs(M.watchers) do
    local ok, err = pcall(fn)
    if not ok then mb.log("error", "upstream watcher: " .. tostring(err)) end
  end
end

-- Milliseconds the execution of request may still wait (nil: no deadline known), less a margin
-- so that the answer reaches the code before its deadline does.
function M.time_left(request)
  local e = request and request.entry
  if not (e and e.deadline) then return nil end
  return math.max(0, e.deadline - mb.now_ms() - 100)
end

local function content_text(content)
  if type(content) ~= "table" then return nil end
  local parts = {}
  for _, b in ipairs(content) do
    if is_object(b) and b.type == "text" and type(b.text) == "string" then parts[#parts + 1] = b.text end
  end
  if #parts == 0 then return nil end
  return table.concat(parts, "\n"), #parts == #content
end

-- structuredContent, else the text decoded as JSON when it is JSON, else the text, else blocks.
local function result_value(r)
  if not is_object(r) then return null end
  if r.structuredContent ~= nil and r.structuredContent ~= null then return r.structuredContent end
  local txt, all_text = content_text(r.content)
  if txt and all_text then
    local first = txt:match("^%s*(.)")
    if first == "{" or first == "[" or first == "\"" or first == "-" or (first and first:find("[%dtfn]")) then
      local v = mb.json_decode(txt)
      if v ~= nil then return v end
    end
    return txt
  end
  if type(r.content) == "table" then return r.content end
  return null
end

local function resolve_server(name)
  if type(name) ~= "string" then return nil, "the server name must be a string" end
  local s = M.by_name[name] or M.by_ident[name]
  if s then return s end
  local names = {}
  for _, x in ipairs(M.list) do names[#names + 1] = x.name end
  if #names == 0 then
    return nil, sfmt("unknown upstream server %q: no servers are configured (mcpServers, docs/gateway.md)", name)
  end
  return nil, sfmt("unknown upstream server %q; configured: %s", name, table.concat(names, ", "))
end

local function resolve_tool(s, name)
  if type(name) ~= "string" then return nil, "the tool name must be a string" end
  local t = s.tool_by_name[name]
  if t then return t end
  t = s.tool_by_ident[name]
  if t then return t end
  if t == false then
    local same = {}
    for _, x in ipairs(s.tools) do if ucfg.ident(x.name) == name then same[#same + 1] = sfmt("%q", x.name) end end
    return nil, sfmt("servers.%s.%s is ambiguous (tools %s); use mcp.call(%q, <exact name>, args)",
      s.ident, name, table.concat(same, ", "), s.name)
  end
  local best = {}
  -- suggestions are a courtesy: at most 64 bytes of each name, and a budget of work in all
  -- (a server with thousands of long look-alike names must not hold the loop)
  local want, budget = name:lower():sub(1, 64), 400000
  for _, x in ipairs(s.tools) do
    budget = budget - 9 * math.min(#x.name, 64)
    if budget < 0 then break end
    local d = text.levenshtein(want, x.name:lower():sub(1, 64), 4)
    if d <= 4 and not ucfg.refusal(s.spec, x) then best[#best + 1] = { d = d, n = x.name } end
  end
  table.sort(best, function(a, b) return a.d < b.d or (a.d == b.d and a.n < b.n) end)
  local hint = ""
  if #best > 0 then
    local names = {}
    for i = 1, math.min(3, #best) do names[i] = best[i].n end
    hint = "; did you mean " .. table.concat(names, ", ") .. "?"
  end
  return nil, sfmt("server %q has no tool %q%s (search_tools lists them)", s.name, name, hint)
end

-- Can code call tool tname of server sname? "ready"; "starting" (its first start, not failed
-- yet: its tools are not known); or nil and the reason (not configured, disabled, failing, no
-- such tool, or a tool allowedTools/allowWrites refuse).
function M.availability(sname, tname)
  local s, err = resolve_server(sname)
  if not s then return nil, err end
  if s.state == "starting" and s.failures == 0 then return "starting", s end
  -- idle: a perTenant server's default instance, stopped while unused; its tools are known
  if s.state ~= "ready" and s.state ~= "idle" then return nil, s:unavailable() end
  local tool
  tool, err = resolve_tool(s, tname)
  if not tool then return nil, err end
  local why = ucfg.refusal(s.spec, tool)
  if why then return nil, why end
  return "ready", s
end

-- Waits (yields) while server sname is starting, at most max_ms (nil: the init timeout).
function M.wait_starting(sname, max_ms)
  local s = M.by_name[sname] or M.by_ident[sname]
  if s and s.state == "starting" then s:wait_ready(max_ms) end
end

-- Tokens from the model become the values again, inside strings anywhere in args.
local function restore(tenant, v, depth)
  if type(v) == "string" then
    if v:find("[", 1, true) then return (tools.pii.restore(tenant, v)) end
    return v
  end
  if type(v) ~= "table" or depth > 200 then return v end
  local out = getmetatable(v) == "json.array" and mb.array({}) or {}
  for k, x in pairs(v) do
    local nk = type(k) == "string" and restore(tenant, k, depth + 1) or k
    out[nk] = restore(tenant, x, depth + 1)
  end
  return out
end

-- The arguments as sandbox code gave them: JSON text (host_calls_raw) or a table. Text without
-- anything that looks like a PII token goes to the upstream verbatim (mb.json_raw); otherwise it
-- is decoded and the tokens restored. Returns args | nil, message.
local TOKEN = "%[[A-Z][A-Z0-9_]*_%x%x%x%x%x%x%x%x+%]"
-- Tokens become values only when the policy makes them (pii_policy) and values may be revealed
-- at all (pii_restore): with pii_restore=0 an echoing upstream must not hand code the value.
local RESTORE = cfg.pii_policy == 1 and cfg.pii_restore == 1
arguments = function(request, args)
  if type(args) == "string" then
    local first = args:match("^%s*(.)")
    if first == nil or args:find("^%s*%[%s*%]%s*$") then return {} end
    if first ~= "{" then return nil, "arguments must be a table of named fields" end
    if not (RESTORE and args:find(TOKEN)) then return mb.json_raw(args) end
    local v, derr = mb.json_decode(args)
    if v == nil then return nil, "arguments: " .. tostring(derr) end
    args = v
  end
  if args == nil or args == null then return {} end
  if type(args) ~= "table" or (getmetatable(args) == "json.array" and next(args) ~= nil) then
    return nil, "arguments must be a table of named fields"
  end
  if getmetatable(args) == "json.array" then return {} end
  if RESTORE then args = restore(request.tenant, args, 0) end
  return args
end

-- "server\0tool\0args" (src/sandbox_upstream.c), args being JSON text or empty.
local function split_item(item)
  local a = item:find("\0", 1, true)
  local b = a and item:find("\0", a + 1, true)
  if not b then return nil end
  return item:sub(1, a - 1), item:sub(a + 1, b - 1), item:sub(b + 1)
end

-- One tools/call for an execution. Returns { v = value } | nil, message.
function M.call(request, sname, tname, args)
  local e = request.entry
  if e.ended then return nil, "the execution has ended" end
  local s, err = resolve_server(sname)
  if not s then return nil, err end
  local cs = s -- the counters
  e.upstream_calls = (e.upstream_calls or 0) + 1
  if e.upstream_calls > cfg.upstream_max_calls then
    return nil, sfmt("too many upstream calls in one execution (upstream_max_calls=%d)", cfg.upstream_max_calls)
  end
  e.upstream_by = e.upstream_by or {}
  local n = (e.upstream_by[s.name] or 0) + 1
  e.upstream_by[s.name] = n
  if s.spec.max_calls and n > s.spec.max_calls then
    return nil, sfmt("too many calls to server %q in one execution (mcpServers.%s.maxCalls=%d)",
      s.name, s.name, s.spec.max_calls)
  end
  s, err = client_for(s, request.tenant)
  if not s then
    cs.rejected = cs.rejected + 1
    return nil, err
  end
  if s.state == "starting" then
    s:wait_ready(M.time_left(request))
    if e.ended then return nil, "the execution has ended" end
  end
  if s.state ~= "ready" then
    cs.rejected = cs.rejected + 1
    return nil, s:unavailable(true)
  end
  local tool
  tool, err = resolve_tool(s, tname)
  if not tool then return nil, err end
  local why = ucfg.refusal(s.spec, tool)
  local subject = s.name .. "." .. tool.name
  if why then
    tools.audit.record("refused", request, subject, { why = why })
    return nil, why
  end
  local given = args
  args, err = arguments(request, args)
  if err then return nil, sfmt("%s.%s: %s", s.name, tool.name, err) end
  local writes = not ucfg.read_only(tool) -- the audit trail records every call that may write
  local allowed = writes and "allowWrites" or nil
  if ucfg.needs_approval(s.spec, tool) then -- allowWrites "ask": the person approves first
    local yes, no = approval.ask(request, s.name, tool.name, given)
    tools.audit.record("approval", request, subject, { approved = yes and true or false, why = not yes and no or nil })
    if not yes then return nil, sfmt("%s.%s: %s", s.name, tool.name, no) end
    allowed = "approved"
  end
  local called = e.tools_called or {} -- for the journal (mcp/history.lua)
  e.tools_called = called
  local key = (s.name .. "." .. tool.name):gsub("%c", "?") -- an upstream names its tools
  if not called[key] then called[key] = true; called[#called + 1] = key end
  local params = { name = tool.name, arguments = args }
  local opts = { request = request } -- whose client a question of the upstream goes to
  if e.progress_token ~= nil then
    M.progress_seq = M.progress_seq + 1
    opts.progress_token = "mb-" .. M.progress_seq
    params._meta = { progressToken = opts.progress_token }
    opts.on_progress = function(p)
      if e.ended or math.type(p.progress) == nil then return end
      -- MCP: progress must increase, and an execution sends at most max_notifications
      if e.up_progress and p.progress <= e.up_progress then return end
      e.up_progress_n = (e.up_progress_n or 0) + 1
      if e.up_progress_n > cfg.max_notifications then return end
      e.up_progress = p.progress
      local msg = sfmt("%s.%s", s.name, tool.name)
      if type(p.message) == "string" then msg = msg .. ": " .. tools.pii.outbound(request.tenant, p.message) end
      request:progress(p.progress, type(p.total) == "number" and p.total or nil, msg)
    end
  end
  e.upstream_pending = e.upstream_pending or {}
  e.upstream_pending[opts] = s
  cs.calls = cs.calls + 1
  s.inflight = s.inflight + 1
  local t0 = mb.now_ms()
  local r
  r, err = s:request("tools/call", params, s.spec.timeout_ms, opts)
  s.inflight = s.inflight - 1
  s.last_used = mb.now_ms()
  cs.call_ms = cs.call_ms + (s.last_used - t0)
  e.upstream_pending[opts] = nil
  if writes then
    tools.audit.record("upstream_call", request, subject, { allowed = allowed, ms = mb.now_ms() - t0,
      outcome = r == nil and "error" or (is_object(r) and r.isError == true) and "tool_error" or "ok" })
  end
  if r == nil then
    cs.errors = cs.errors + 1
    return nil, sfmt("%s.%s: %s", s.name, tool.name, errtext(err))
  end
  if not is_object(r) then
    cs.errors = cs.errors + 1
    return nil, sfmt("%s.%s: the upstream's answer is not a result object (got %s)", s.name, tool.name,
      r == null and "null" or type(r) == "table" and "an array" or type(r))
  end
  if r.isError == true then
    cs.tool_errors = cs.tool_errors + 1
    return nil, sfmt("%s.%s: %s", s.name, tool.name, content_text(r.content) or "the tool reported an error")
  end
  local v = result_value(r)
  if tool.infer and M.on_result then pcall(M.on_result, request.tenant, s.name, tool.name, v) end
  return { v = v }
end

-- The execution ended: cancel its calls still in flight.
function M.abandon(entry)
  entry.ended = true
  local pending = entry.upstream_pending
  if not pending then return end -- most executions call no upstream
  for opts, s in pairs(pending) do
    if opts.id then s:cancel_request(opts.id, "the execution that made this call ended") end
  end
  entry.upstream_pending = nil
end

-- Several calls at once, at most upstream_max_parallel in flight; results in order, each
-- { ok = true, v = value } or { ok = false, e = message }.
function M.batch(request, calls)
  if type(calls) ~= "table" then return nil, "mcp.parallel: calls must be a list" end
  local n = #calls
  local results = {}
  if n == 0 then return mb.array(results) end
  local parent, waiting = coroutine.running(), false
  local next_i, inflight, done = 1, 0, 0
  local function finish(i, ok, v, err)
    if ok and v then
      results[i] = { ok = true, v = v.v }
    else
      results[i] = { ok = false, e = tostring(ok and err or v) }
    end
    inflight, done = inflight - 1, done + 1
    if waiting then
      waiting = false
      resume(parent)
    end
  end
  while done < n do
    each_client(function(s) if s.t and s.t.cork then s.t:cork() end end)
    while inflight < cfg.upstream_max_parallel and next_i <= n do
      local i = next_i
      next_i = next_i + 1
      inflight = inflight + 1
      local c = calls[i]
      resume(coroutine.create(function()
        if not is_object(c) then return finish(i, true, nil, "each call must be {server, tool, args}") end
        local ok, v, err = pcall(M.call, request, c.server, c.tool, c.args)
        finish(i, ok, v, err)
      end))
    end
    each_client(function(s) if s.t and s.t.uncork then s.t:uncork() end end)
    if done < n then
      waiting = true
      coroutine.yield()
    end
  end
  return mb.array(results)
end

---------------------------------------------------------------------------------------------
-- stats, metrics, life cycle

-- brief: what a token's tenant sees (the servers and whether they are up); the counters and
-- errors also come from other tenants' calls, so only the default tenant gets them.
function M.stats(brief, tenant)
  local out = {}
  for _, s in ipairs(M.list) do
    local info = is_object(s.server_info) and s.server_info or {}
    local own = s -- a tenant sees its own instance of a perTenant server
    if s.instances then own = s.instances[tenant or "default"] or { state = "idle" } end
    local inflight = 0
    if s.instances then for _, x in pairs(s.instances) do inflight = inflight + x.inflight end end
    out[s.name] = brief and {
      state = own.state, per_tenant = s.instances and true or nil, transport = s.spec.transport, server = info.name, version = info.version,
      protocol = s.protocol, tools = #s.tools, callable_tools = s.callable,
    } or {
      state = s.state, transport = s.spec.transport, pid = s.pid,
      server = info.name, version = info.version, protocol = s.protocol,
      tools = #s.tools, callable_tools = s.callable, calls = s.calls, failed_calls = s.errors,
      tool_errors = s.tool_errors, timeouts = s.timeouts, rejected_while_down = s.rejected,
      in_flight = s.instances and inflight or s.inflight, restarts = s.restarts, last_error = s.last_error,
      per_tenant = s.instances and true or nil, instances = s.instances and running(s) or nil,
      mean_call_ms = s.calls > 0 and s.call_ms / s.calls or 0,
      ready_for_s = s.state == "ready" and math.floor((mb.now_ms() - s.ready_since) / 1000) or nil,
      next_attempt_in_ms = s.state == "backoff" and math.max(0, math.floor(s.retry_at - mb.now_ms())) or nil,
    }
  end
  return out
end

local function label(v) return (tostring(v):gsub("[\\\"\n]", function(c) return c == "\n" and "\\n" or "\\" .. c end)) end

function M.metrics_text()
  if #M.list == 0 then return "" end
  local up, calls, restarts, instances = {}, {}, {}, {}
  for _, s in ipairs(M.list) do
    local l = label(s.name)
    up[#up + 1] = sfmt('moonbox_upstream_up{server="%s"} %d', l, s.state == "ready" and 1 or 0)
    calls[#calls + 1] = sfmt('moonbox_upstream_calls_total{server="%s",outcome="ok"} %d', l,
      s.calls - s.errors - s.tool_errors)
    calls[#calls + 1] = sfmt('moonbox_upstream_calls_total{server="%s",outcome="tool_error"} %d', l, s.tool_errors)
    calls[#calls + 1] = sfmt('moonbox_upstream_calls_total{server="%s",outcome="failed"} %d', l, s.errors)
    calls[#calls + 1] = sfmt('moonbox_upstream_calls_total{server="%s",outcome="rejected"} %d', l, s.rejected)
    restarts[#restarts + 1] = sfmt('moonbox_upstream_restarts_total{server="%s"} %d', l, s.restarts)
    if s.instances then
      instances[#instances + 1] = sfmt('moonbox_upstream_instances{server="%s"} %d', l, running(s))
    end
  end
  local lines = {
    "# HELP moonbox_upstream_up 1 when the upstream MCP server is initialized and serving.",
    "# TYPE moonbox_upstream_up gauge", table.concat(up, "\n"),
    "# HELP moonbox_upstream_calls_total Tool calls to upstream servers by outcome.",
    "# TYPE moonbox_upstream_calls_total counter", table.concat(calls, "\n"),
    "# HELP moonbox_upstream_restarts_total Restarts of upstream servers after failures.",
    "# TYPE moonbox_upstream_restarts_total counter", table.concat(restarts, "\n") }
  if #instances > 0 then
    lines[#lines + 1] = "# HELP moonbox_upstream_instances Running instances of a perTenant upstream server (one per tenant)."
    lines[#lines + 1] = "# TYPE moonbox_upstream_instances gauge"
    lines[#lines + 1] = table.concat(instances, "\n")
  end
  lines[#lines + 1] = ""
  return table.concat(lines, "\n")
end

-- The server instructions, with a line about the configured upstream servers when there are any.
function M.instructions(base)
  if #M.list == 0 then return base end
  if not M.instructions_text then
    local names = {}
    for _, s in ipairs(M.list) do
      if s.state ~= "disabled" then names[#names + 1] = s.ident end
    end
    if #names == 0 then return base end
    M.instructions_text = base .. "\nTools of other MCP servers are callable from the code: "
      .. "servers.<server>.<tool>(args) returns the tool's result as Lua data, mcp.parallel{...} runs "
      .. "several calls at once. Servers: " .. table.concat(names, ", ")
      .. ". search_tools finds their tools (category = server); use them in code and return only "
      .. "what you need."
  end
  return M.instructions_text
end

function M.shutdown()
  each_client(function(s)
    s.generation = s.generation + 1
    s.state = "stopped"
    if s.restart_timer then s.restart_timer:stop() end
    s:fail_pending(sfmt("upstream server %q: moonbox is shutting down", s.name))
    s:wake_waiters()
    local t = s.t
    s.t = nil
    if t then t:close(cfg.upstream_shutdown_grace_ms) end
  end)
end

function M.init(t)
  tools = t
  approval.init(t)
  catalog = require("mcp.catalog")
  text = require("mcp.catalog_text")
  M.progress_seq = 0
  local specs = ucfg.load(cfg.mcp_servers) -- raises: the server does not start
  local per_tenant = false
  for _, spec in ipairs(specs) do
    local s = new_client(spec, spec.per_tenant and "default" or nil)
    if spec.per_tenant then
      s.instances = { default = s }
      per_tenant = true
    end
    M.list[#M.list + 1] = s
    M.by_name[s.name] = s
    M.by_ident[s.ident] = M.by_ident[s.ident] or s
  end
  tools.host_calls_raw.upstream_call = function(raw, request)
    local server, tool, args = split_item(raw)
    if not server then return nil, "upstream_call: malformed request" end
    return M.call(request, server, tool, args)
  end
  -- mcp.tools([server]) and pairs(servers) in sandbox code: the servers (name, Lua name,
  -- state, callable tools) or one server's callable tools (name, Lua name, summary, read_only)
  tools.host_calls.upstream_tools = function(a, request)
    local out = {}
    if a.server == nil then
      for _, s in ipairs(M.list) do
        local st = s.state
        if s.instances then -- the caller's own instance; idle: not running, starts at a call
          local x = s.instances[request.tenant or "default"]
          st = x and x.state or "idle"
        end
        out[#out + 1] = { name = s.name, lua_name = s.ident, state = st, tools = s.callable }
      end
      return mb.array(out)
    end
    local s, err = resolve_server(a.server)
    if not s then return nil, "mcp.tools: " .. err end
    local known = false -- a perTenant server: the caller's instance, else the list one listed
    if s.instances then
      local own = s.instances[request.tenant or "default"]
      if own and own.state == "ready" then s = own
      elseif s.refresh_done then known = true
      else
        s, err = client_for(s, request.tenant)
        if not s then return nil, "mcp.tools: " .. err end
      end
    end
    -- a starting server has no tools yet: wait for it rather than answer [] ("no tools")
    if s.state == "starting" then s:wait_ready(M.time_left(request)) end
    if s.state ~= "ready" and not known then
      return nil, "mcp.tools: " .. s:unavailable(true)
    end
    for _, t in ipairs(s.tools) do
      if not ucfg.refusal(s.spec, t) then
        local ann = is_object(t.annotations) and t.annotations or {}
        out[#out + 1] = { name = t.name, lua_name = ucfg.ident(t.name), summary = t.summary or "",
                          read_only = ann.readOnlyHint == true, ask = ucfg.needs_approval(s.spec, t) }
      end
    end
    table.sort(out, function(x, y) return x.name < y.name end)
    return mb.array(out)
  end
  tools.host_calls_raw.upstream_batch = function(raw, request)
    local calls, pos = {}, 1
    while pos <= #raw do
      local nl = raw:find("\n", pos, true) or (#raw + 1)
      local server, tool, args = split_item(raw:sub(pos, nl - 1))
      if not server then return nil, "upstream_batch: malformed request" end
      calls[#calls + 1] = { server = server, tool = tool, args = args }
      pos = nl + 1
    end
    return M.batch(request, calls)
  end
  tools.stats_providers.upstreams = function(tenant) return M.stats(tenant ~= "default", tenant) end
  if per_tenant and cfg.upstream_idle_ms > 0 then
    local every = math.max(100, math.min(60000, cfg.upstream_idle_ms // 4))
    local function tick()
      sweep_idle()
      mb.timer(every, tick)
    end
    mb.timer(every, tick)
  end
  tools.upstream = M
  -- Start after the first turn of the loop, so `initialize` from our own client is not delayed.
  if #M.list > 0 then
    mb.timer(0, function()
      for _, s in ipairs(M.list) do if s.state == "starting" then s:start() end end
    end)
  end
  -- Catalog entries of servers no longer configured go away.
  mb.timer(60, function()
    local ok, sources = pcall(catalog.sources, "upstream:")
    if not ok then return end
    for _, src in ipairs(sources) do
      if not M.by_name[src:sub(10)] then catalog.remove(src) end
    end
  end)
end

return M
