-- mcp/server.lua - JSON-RPC dispatch and the MCP lifecycle (protocol revisions: src/protocol.h).
--
-- The file returns its entry table, the functions C calls (src/host.c; docs/host-api.md lists
-- them and every mb.* function): handle_line(line, session, exchange, tenant) for every incoming
-- message (each in its own coroutine, so a handler may yield in mb.wait while an execution runs),
-- handle_oversize(n) for a discarded over-long line, on_notify(job, kind, payload) for mcp.log /
-- mcp.progress from running sandbox code, on_host_call(job, seq, name, args) for a host call
-- (in its own coroutine), on_session_end(session), on_shutdown() and metrics_text(). No globals
-- are set. Per-session state (log level, initialized, tenant, requests in
-- flight) lives in `sessions`, keyed by the transport's session id; nothing else is kept per
-- connection, so a stateless protocol revision can be served from the same tables later.
-- Tools live in mcp/tools.lua; this file only knows the protocol.

local mb = mb
local null = mb.null
local host_api = {} -- returned at the end: what C calls (docs/host-api.md)
if mb.db.dialect == "postgres" then -- store_url: PostgreSQL (src/store_pg.c), shared by replicas
  require("mcp.store_pg").wrap(mb.db)
  mb.db.migrate(require("mcp.schema_pg"))
else
  mb.db.migrate(require("mcp.schema")) -- before anything reads the store
end
require("mcp.upstream_config").load(mb.config.mcp_servers) -- a bad mcpServers stops the start here
local tools = require("mcp.tools")
local ctext = require("mcp.catalog_text")
local modern = require("mcp.modern")
local auth = require("mcp.auth")
local tasks = require("mcp.tasks")
do -- tasks a process that died left unfinished are failed, with that reason
  local ok, err = pcall(tasks.recover)
  if not ok then mb.log("error", "tasks: recovering unfinished tasks: " .. tostring(err)) end
end
local clip = ctext.clip

-- the revisions served (src/protocol.h, newest first): initialize answers the client's when it
-- is one of them, else the newest
local LATEST = mb.protocol.served[1]
local SUPPORTED = {}
for _, v in ipairs(mb.protocol.served) do SUPPORTED[v] = true end

local LEVELS = modern.LEVELS

local PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR =
  -32700, -32600, -32601, -32602, -32603

local INSTRUCTIONS = [[
moonbox runs Lua 5.4 code for you in a fresh, restricted sandbox (execute_code) so that data can be
filtered, joined and summarised next to where it is, and only the small answer comes back.
Workflow: write one short Lua program per step; `return` the value you need (tables become JSON);
use print() for notes. Inside the sandbox you have the Lua standard library (string, table, math,
utf8, coroutine, os.time/clock/date), json.encode/json.decode, re.* (PCRE2 regex), mcp.log and
mcp.progress, data helpers (filter_by_field, summarize_list, aggregate_stats, format_output,
group_by, sort_by, pluck, count_by, unique, take), a workspace that persists between calls
(read_file, write_file, list_files, delete_file, json.read_file, json.write_file) and skills,
reusable Lua modules (require("skills.name"), save_skill, load_skill, list_skills).
Discover what exists instead of guessing: search_tools(query) finds tools and sandbox functions,
get_tool_definition(name) gives one in full with a Lua example, list_tool_categories() the areas.
Pass inputs with context_vars (they become globals). Limits (time, memory, instructions) are per
call; errors name the limit that stopped you.]]

-- Sessions: stdio has one (id 1); over HTTP each Mcp-Session-Id is one. A session holds the
-- client's log level, whether it is initialized, its tenant and its requests in flight. Every
-- message is sent with its session and exchange (the HTTP POST it answers; 0 for messages not
-- tied to one), and the final one of an exchange says so.
-- A request's id (an integer or a string, valid_id) is its key in inflight as it is: Lua keeps
-- 1 and "1" apart, so no key string is made per request.
local sessions = {}   -- session id -> { tenant, log_level, initialized, inflight = {id -> entry} }
local client_requests = {} -- our request id -> the coroutine waiting for the client's answer
-- our request id -> "session\0tenant" it was sent to: only an answer from there counts (the ids
-- are a counter; another session or tenant must not answer, e.g. approve another's write)
local client_request_peer = {}
local by_exchange = {} -- sessionless (2026-07-28 HTTP) exchange -> inflight entry: a disconnect cancels
local DEFERRED = {}    -- a handler's answer comes later, from another coroutine
local release          -- (request, entry): forgets what request registered for entry
local become_task      -- (entry, timeout_ms): answers the request with a CreateTaskResult
local answer_pending   -- (entry, key, msg): an input the execution waits for is answered
local next_client_request = 0
local by_job = {}     -- job id -> inflight entry (jobs are unique across sessions)

local function session(sid, tenant)
  local s = sessions[sid]
  if not s then
    s = { id = sid, tenant = tenant or "default", log_level = "info", initialized = false,
          inflight = {} }
    sessions[sid] = s
  end
  return s
end


-- ctx: anything with .session and .exchange (a request, or the context of a message)
-- A final message the transport refused because its client has not read earlier ones
-- (max_backlog_bytes, max_backlog_tenant_bytes) is replaced by a short error naming the limit;
-- the transport closes the connection of one too short to replace (MB_HTTP_BACKLOG_SHORT).
local BACKLOG_CODE = -32000
local function send_backlog_error(ctx, id, why)
  local limit = why:match("(max_backlog_[%w_]+)=") or "max_backlog_bytes"
  mb.send({ jsonrpc = "2.0", id = id == nil and null or id,
            error = { code = BACKLOG_CODE, message = clip(why, 1024), data = { limit = limit } } },
          ctx.session, ctx.exchange, true, ctx.session == 0 and modern.status_of(BACKLOG_CODE, false) or nil)
end

local function send_result(ctx, id, result)
  local ok, why = mb.send({ jsonrpc = "2.0", id = id, result = result }, ctx.session, ctx.exchange, true)
  if ok == false then send_backlog_error(ctx, id, why) end
end

-- Messages and the strings of data echo what the client sent (a uri, a method, a name): they
-- are clipped, so a 16 MB argument does not come back (a message keeps 1 KiB, a data string 256
-- bytes, with the full size noted).
-- status: the HTTP status of the answer to a sessionless (2026-07-28) request; by default 400
-- for errors about the message itself, else 200.
local function send_error(ctx, id, code, message, data, status)
  local err = { code = code, message = clip(message, 1024) }
  if type(data) == "table" then
    for k, v in pairs(data) do
      if type(v) == "string" then data[k] = clip(v, 256) end
    end
  end
  if data ~= nil then err.data = data end
  if status == nil and ctx.session == 0 then status = modern.status_of(code, false) end
  local ok, why = mb.send({ jsonrpc = "2.0", id = id == nil and null or id, error = err }, ctx.session,
                          ctx.exchange, true, status)
  if ok == false then send_backlog_error(ctx, id, why) end
end

local function notify(ctx, method, params)
  mb.send({ jsonrpc = "2.0", method = method, params = params }, ctx.session, ctx.exchange, false)
end

-- A JSON-RPC error raised from inside a handler: error(rpc_error(code, msg)).
local rpc_error_mt = {}
local function rpc_error(code, message, data)
  return setmetatable({ code = code, message = message, data = data }, rpc_error_mt)
end

local function is_object(v)
  return type(v) == "table" and getmetatable(v) ~= "json.array"
end

---------------------------------------------------------------------------------------------
-- methods

local methods = {}
local MODERN_ONLY = { ["server/discover"] = true, ["subscriptions/listen"] = true,
                      ["tasks/get"] = true, ["tasks/update"] = true, ["tasks/cancel"] = true }

local CAPABILITIES = { tools = { listChanged = true }, logging = {},
                       resources = { listChanged = true, subscribe = true },
                       prompts = { listChanged = true }, completions = {} }

function methods.initialize(params, request)
  local requested = params.protocolVersion
  if type(requested) ~= "string" then
    error(rpc_error(INVALID_PARAMS, "initialize: params.protocolVersion must be a string"))
  end
  local version = SUPPORTED[requested] and requested or LATEST
  request.sess.initialized = true
  request.sess.protocol_version = version
  request.sess.client_capabilities = is_object(params.capabilities) and params.capabilities or {}
  request.sess.client_info = is_object(params.clientInfo) and params.clientInfo or nil -- the audit trail's client
  return {
    protocolVersion = version,
    capabilities = CAPABILITIES,
    serverInfo = modern.SERVER_INFO,
    instructions = tools.upstream.instructions(INSTRUCTIONS),
  }
end

-- 2026-07-28: what initialize said, asked for without a handshake.
methods["server/discover"] = function()
  local caps = {}
  for k, v in pairs(CAPABILITIES) do caps[k] = v end
  caps.extensions = { [tasks.EXT] = {} } -- the tasks extension (2026-07-28 only; docs/tasks.md)
  return modern.discover(tools.upstream.instructions(INSTRUCTIONS), caps)
end

function methods.ping()
  return {}
end

-- Argument completion: moonbox has no completable arguments yet; the answer says so.
methods["completion/complete"] = function(params)
  if not is_object(params.ref) or not is_object(params.argument) then
    error(rpc_error(INVALID_PARAMS, "completion/complete: params.ref and params.argument must be objects"))
  end
  return { completion = { values = mb.array({}), total = 0, hasMore = false } }
end

-- Subscriptions to resource updates are recorded per session (updates are sent for resources
-- that change: published skill resources when their skill changes).
methods["resources/subscribe"] = function(params, request)
  if type(params.uri) ~= "string" then
    error(rpc_error(INVALID_PARAMS, "resources/subscribe: params.uri must be a string"))
  end
  request.sess.subscriptions = request.sess.subscriptions or {}
  request.sess.subscriptions[params.uri] = true
  return {}
end

methods["resources/unsubscribe"] = function(params, request)
  if type(params.uri) ~= "string" then
    error(rpc_error(INVALID_PARAMS, "resources/unsubscribe: params.uri must be a string"))
  end
  if request.sess.subscriptions then request.sess.subscriptions[params.uri] = nil end
  return {}
end

methods["logging/setLevel"] = function(params, request)
  local level = params.level
  if type(level) ~= "string" or LEVELS[level] == nil then
    error(rpc_error(INVALID_PARAMS,
      "logging/setLevel: level must be one of debug, info, notice, warning, error, critical, alert, emergency",
      { level = level == nil and null or level }))
  end
  request.sess.log_level = level
  return {}
end

methods["tools/list"] = function(params, request)
  local page = mb.config.tools_page_size
  local all = tools.all(request.tenant)
  if request.rights then -- an OAuth token sees only the tools its scopes let it call
    local mine = {}
    for _, t in ipairs(all) do
      if auth.allows(request.rights, auth.tool_right(t.definition.name)) then mine[#mine + 1] = t end
    end
    all = mine
  end
  local offset = 0
  if params.cursor ~= nil then -- checked against the list this request sees
    local n = type(params.cursor) == "string" and params.cursor:match("^mbc1%.(%d+)$")
    offset = n and tonumber(n)
    if not offset or offset >= #all then
      error(rpc_error(INVALID_PARAMS, "tools/list: invalid cursor", { cursor = params.cursor }))
    end
  end
  local out = {}
  for i = offset + 1, math.min(offset + page, #all) do
    out[#out + 1] = all[i].definition
  end
  local result = { tools = mb.array(out) }
  if offset + page < #all then
    result.nextCursor = "mbc1." .. tostring(offset + page)
  end
  return result
end

-- Tools of the code-execution servers agents come from, and where moonbox does the same: one
-- sentence in front of the unknown-tool error, so the model's next call is the right one.
local OTHER_SERVERS_TOOLS = {
  list_mcp_tools = "moonbox lists tools with search_tools (a query) and list_tool_categories.",
  get_mcp_tool_details = "moonbox gives a tool's schema and a Lua call example with "
    .. "get_tool_definition (tool_name from search_tools).",
  callMCPTool = "moonbox calls upstream tools from code: execute_code with "
    .. "servers.<server>.<tool>{...} (search_tools finds them).",
  call_mcp_tool = "moonbox calls upstream tools from code: execute_code with "
    .. "servers.<server>.<tool>{...} (search_tools finds them).",
}

-- Whether a tools/call runs as a task (docs/tasks.md): "required" (a skill's @task required),
-- "optional" (a skill's @task optional; execute_code asking for a timeout_ms above
-- max_timeout_ms; a call whose _meta says "moonbox/task": true), or nil.
local TASKABLE = { execute_code = true, run_workflow = true }
local function task_wanted(tool, args, params, request)
  local ex = tool.definition.execution
  local support = is_object(ex) and ex.taskSupport
  if support == "required" then return "required" end
  local meta = params._meta
  local asked = is_object(meta) and meta["moonbox/task"] == true
  if support == "optional" then return "optional" end
  if not (TASKABLE[tool.definition.name] or tool.skill) then return nil end
  if asked then return "optional" end
  if tool.definition.name == "execute_code" then
    local t = args.timeout_ms
    local s = args.timeout_seconds
    if (math.type(t) == "integer" and t > mb.config.max_timeout_ms)
        or (type(s) == "number" and s * 1000 > mb.config.max_timeout_ms) then
      return "optional"
    end
  end
end
local function task_timeout(tool, args)
  if tool.definition.name == "execute_code" then
    local t = args.timeout_ms
    if math.type(t) == "integer" and t > 0 then return math.min(t, mb.config.task_max_timeout_ms) end
    local s = args.timeout_seconds
    if type(s) == "number" and s > 0 then return math.min(math.ceil(s * 1000), mb.config.task_max_timeout_ms) end
    return mb.config.default_timeout_ms
  end
  return mb.config.task_max_timeout_ms
end

methods["tools/call"] = function(params, request)
  local name = params.name
  if type(name) ~= "string" then
    error(rpc_error(INVALID_PARAMS, "tools/call: params.name must be a string"))
  end
  local tool = tools.find(name, request.tenant)
  if not tool then
    -- the closest names first (edit distance, as get_tool_definition suggests), then a pointer
    -- to search_tools: upstream tools are called from code, not as MCP tools of moonbox
    local names, near = {}, {}
    local lname, max = name:lower(), math.max(2, math.min(#name // 3, 8))
    for _, t in ipairs(tools.all(request.tenant)) do
      local n = t.definition.name
      names[#names + 1] = n
      local d = #name <= 256 and ctext.levenshtein(lname, n:lower(), max) or max + 1
      if d <= max then near[#near + 1] = { n = n, d = d } end
    end
    table.sort(near, function(a, b) return a.d < b.d or (a.d == b.d and a.n < b.n) end)
    local closest = {}
    for i = 1, math.min(3, #near) do closest[i] = near[i].n end
    local other = OTHER_SERVERS_TOOLS[name]
    error(rpc_error(INVALID_PARAMS, other and string.format("Unknown tool: %s. %s", name, other)
      or string.format("Unknown tool: %s.%s Tools of upstream servers are "
      .. "called from execute_code (servers.<server>.<tool>{...}); search_tools finds them.",
      clip(name), #closest > 0 and (" Did you mean " .. table.concat(closest, ", ") .. "?") or ""),
      { available = mb.array(names), closest = mb.array(closest) }))
  end
  local args = params.arguments
  if args == nil or args == null then
    args = {}
  elseif not is_object(args) then
    error(rpc_error(INVALID_PARAMS, "tools/call: params.arguments must be an object"))
  end
  local want = task_wanted(tool, args, params, request)
  if want == "required" and not tasks.declared(request) then
    error(rpc_error(tasks.missing_capability("the tool " .. clip(name) .. " runs only as a task")))
  end
  if want and tasks.declared(request) then
    local ok, code, msg = become_task(request.entry, task_timeout(tool, args))
    if not ok then error(rpc_error(code, msg)) end
  end
  return tool.handler(args, request)
end

for name, fn in pairs(tools.methods) do methods[name] = fn end
tools.rpc_error = rpc_error

-- Sandbox code asking the client something (mcp.sample, mcp.elicit): the request goes to the
-- client on the session of the tools/call that runs the code; the code waits for the answer.
local CLIENT_METHODS = { ["sampling/createMessage"] = "sampling", ["elicitation/create"] = "elicitation",
                         ["roots/list"] = "roots" }
local function check_client_request(method, params)
  local capability = CLIENT_METHODS[method]
  if not capability then return nil, "mcp: the client cannot be asked " .. tostring(method) end
  if params ~= nil and params ~= null and not is_object(params) then
    return nil, method .. ": params must be an object"
  end
  return capability
end

local function client_error(method, err)
  return string.format("%s: %s", method, type(err) == "table" and tostring(err.message) or tostring(err))
end

tools.host_calls.client_request = function(a, request)
  local capability, err = check_client_request(a.method, a.params)
  if not capability then return nil, err end
  local result
  result, err = request:client_request(a.method, is_object(a.params) and a.params or {}, capability)
  if not result then return nil, client_error(a.method, err) end
  return result
end

-- mcp.ask({key = {method, params}, ...}): several questions at once (one input_required round
-- in 2026-07-28; one request after another in 2025-11-25). Answers {key = result}.
local INPUT_KEY = "^[%w_.%-]+$"
tools.host_calls.client_requests = function(a, request)
  if not is_object(a.inputs) or next(a.inputs) == nil then
    return nil, "mcp.ask: expects a table of {method=, params=} by key"
  end
  local list, n = {}, 0
  for key, q in pairs(a.inputs) do
    n = n + 1
    if type(key) ~= "string" or #key > 64 or not key:match(INPUT_KEY) then
      return nil, "mcp.ask: keys are names of 1-64 letters, digits, '_', '.' or '-'"
    end
    if not is_object(q) then return nil, "mcp.ask: " .. key .. " must be a table {method=, params=}" end
    local capability, err = check_client_request(q.method, q.params)
    if not capability then return nil, err end
    list[#list + 1] = { key = key, method = q.method, params = is_object(q.params) and q.params or {},
                        capability = capability }
  end
  if n > 16 then return nil, "mcp.ask: at most 16 questions at once" end
  table.sort(list, function(x, y) return x.key < y.key end)
  if request.modern then
    local answers, err = request:input_requests(list)
    if not answers then return nil, "mcp.ask: " .. client_error("input", err) end
    return answers
  end
  local answers = {}
  for _, q in ipairs(list) do
    local result, err = request:client_request(q.method, q.params, q.capability)
    if not result then return nil, string.format("mcp.ask %s: %s", q.key, client_error(q.method, err)) end
    answers[q.key] = result
  end
  return answers
end

-- mcp.client_capabilities(): what the client declared (initialize, or this request's _meta).
tools.host_calls.client_capabilities = function(_, request)
  local caps = request.sess.client_capabilities
  return is_object(caps) and next(caps) ~= nil and caps or mb.json_decode("{}")
end

-- mcp.task([message]): from here on the execution is a task (the request is answered with a
-- CreateTaskResult) when its client declared the tasks extension; message is its statusMessage.
tools.host_calls.task = function(a, request)
  local entry = request.entry
  if a.message ~= nil and type(a.message) ~= "string" then return nil, "mcp.task: message must be a string" end
  if not entry.task then
    if entry.method ~= "tools/call" or not tasks.declared(entry.request or request) then return false end
    local timeout = math.max(1, (entry.deadline or mb.now_ms()) - mb.now_ms())
    local ok, _, msg = become_task(entry, timeout)
    if not ok then return nil, "mcp.task: " .. tostring(msg) end
  end
  if a.message then tasks.set_message(entry.task, a.message) end
  return true
end

-- mcp.sleep(ms): a timer, not the CPU; never past the execution's own deadline
tools.host_calls.sleep = function(a, request)
  local ms = math.tointeger(a.ms)
  if not ms or ms < 0 then return nil, "mcp.sleep: ms must be a whole number >= 0" end
  local entry = request.entry
  if entry.deadline then ms = math.max(0, math.min(ms, entry.deadline - mb.now_ms())) end
  local co = coroutine.running()
  mb.timer(ms, function()
    local ok, err = coroutine.resume(co)
    if not ok then mb.log("error", "mcp.sleep: " .. tostring(err)) end
  end)
  coroutine.yield()
  return true
end

-- 2026-07-28 listeners (subscriptions/listen): each notification is tagged with the
-- subscription's id and goes on the listen request's own stream.
local function send_listener(l, method, params, final)
  params._meta = { [modern.K_SUB] = l.sub_id }
  mb.send({ jsonrpc = "2.0", method = method, params = params }, l.session, l.exchange, final or false)
end

-- Published skills changed: tools, prompts and resources may all have (clients re-list), and
-- so may the resources subscribed to (published skill resources, skill sources).
-- tenants: the set of tenants whose lists changed (nil: every tenant, e.g. workflows).
tools.list_changed = function(tenants)
  local function concerns(tenant) return tenants == nil or tenants[tenant or "default"] end
  local updated = {}
  for sid, s in pairs(sessions) do
    if s.initialized and concerns(s.tenant) then
      local ctx = { session = sid, exchange = 0 }
      notify(ctx, "notifications/tools/list_changed", {})
      notify(ctx, "notifications/prompts/list_changed", {})
      notify(ctx, "notifications/resources/list_changed", {})
      for uri in pairs(s.subscriptions or {}) do
        if not uri:find("^workspace://") then notify(ctx, "notifications/resources/updated", { uri = uri }) end
      end
    end
  end
  modern.notify_kind(send_listener, "toolsListChanged", "notifications/tools/list_changed", concerns)
  modern.notify_kind(send_listener, "promptsListChanged", "notifications/prompts/list_changed", concerns)
  modern.notify_kind(send_listener, "resourcesListChanged", "notifications/resources/list_changed", concerns)
  for _, l in pairs(modern.listeners) do
    for uri in pairs(concerns(l.tenant) and l.filter.uris or {}) do
      if not uri:find("^workspace://") then updated[#updated + 1] = { l, uri } end
    end
  end
  for _, u in ipairs(updated) do send_listener(u[1], "notifications/resources/updated", { uri = u[2] }) end
end

-- subscriptions/listen (2026-07-28): acknowledged at once, then open until the client cancels
-- it (closing the HTTP response; notifications/cancelled on stdio) or the server ends it.
methods["subscriptions/listen"] = function(params, request)
  local filter, err = modern.listen_filter(params)
  if not filter then error(rpc_error(INVALID_PARAMS, err)) end
  if filter.task_ids and not tasks.declared(request) then
    error(rpc_error(tasks.missing_capability("notifications.taskIds asks for task notifications")))
  end
  local l, lerr = modern.add_listener({ filter = filter, tenant = request.tenant, session = request.session,
                                        exchange = request.exchange, co = coroutine.running(),
                                        entry = request.entry })
  if not l then error(rpc_error(INVALID_PARAMS, lerr)) end
  l.sub_id = tostring(request.id)
  request.entry.listener = l
  -- params.notifications (the honored filter) is required; an empty params left clients that
  -- validate the acknowledgement with an empty honoredFilter
  send_listener(l, "notifications/subscriptions/acknowledged",
                { notifications = next(filter.honored) and filter.honored or mb.json_decode("{}") })
  coroutine.yield() -- resumed by a cancellation or at shutdown
  modern.remove_listener(l)
  return nil -- cancelled: not answered; at shutdown the cancellation was the last message
end

---------------------------------------------------------------------------------------------
-- notifications from the client

local notifications = {}

-- Stops what a request is doing: its execution, a listener's wait, input it waits for.
local function cancel_entry(entry)
  entry.cancelled = true
  if entry.job then mb.cancel(entry.job) end
  if entry.hold then modern.drop(entry.hold); entry.hold = nil end
  local l = entry.listener
  if l and l.co then
    local co = l.co
    l.co = nil
    modern.remove_listener(l)
    local ok, err = coroutine.resume(co)
    if not ok then mb.log("error", "subscriptions/listen: " .. tostring(err)) end
  end
end

notifications["notifications/initialized"] = function(params, sess) sess.initialized = true end

---------------------------------------------------------------------------------------------
-- the tasks extension (mcp/tasks.lua, docs/tasks.md): tasks/get, tasks/update, tasks/cancel

-- The task params.taskId names, when the client declared the extension and owns the task.
local function own_task(method, params, request)
  if not tasks.declared(request) then
    error(rpc_error(tasks.missing_capability(method .. " is part of it")))
  end
  local task, why = tasks.find(request, params.taskId)
  if not task then error(rpc_error(INVALID_PARAMS, why, { taskId = type(params.taskId) == "string" and params.taskId or null })) end
  return task
end

methods["tasks/get"] = function(params, request)
  return tasks.detailed(own_task("tasks/get", params, request))
end

-- Answers to the task's inputRequests, by key; keys it does not wait for are ignored. The
-- task is input_required until every one is answered (tasks/get shows those still open).
methods["tasks/update"] = function(params, request)
  local task = own_task("tasks/update", params, request)
  local responses = params.inputResponses
  if not is_object(responses) then
    error(rpc_error(INVALID_PARAMS, "Invalid params: tasks/update: params.inputResponses must be an object"))
  end
  if tasks.TERMINAL[task.status] then return {} end
  local entry = task.entry
  if not entry then
    error(rpc_error(INVALID_PARAMS, "Invalid params: tasks/update: this task runs in another moonbox process "
      .. "(replica): send tasks/update there (route on the Mcp-Name header, docs/deploy.md)"))
  end
  local answered = false
  for key, r in pairs(responses) do
    if entry.pending and entry.pending[key] and is_object(r) then
      answer_pending(entry, key, { result = r })
      answered = true
    end
  end
  if answered and not tasks.TERMINAL[task.status] then
    local open = {}
    for key, p in pairs(entry.pending or {}) do open[key] = { method = p.method, params = p.params } end
    tasks.set_inputs(task, open)
  end
  return {}
end

-- Cooperative: the execution is stopped and the task ends cancelled (a finished task stays as
-- it is). notifications/cancelled is never the way to stop a task.
methods["tasks/cancel"] = function(params, request)
  local task = own_task("tasks/cancel", params, request)
  if tasks.TERMINAL[task.status] then return {} end
  if task.entry then tasks.cancel_live(task) else tasks.request_cancel(task) end
  return {}
end

notifications["notifications/cancelled"] = function(params, sess)
  local rid = params.requestId
  if rid == nil or (type(rid) ~= "string" and math.type(rid) ~= "integer") then return end
  local entry = sess.inflight[rid]
  if not entry or entry.method == "initialize" then return end
  cancel_entry(entry)
end

tasks.cancel_live = function(task)
  task.cancelling = true
  local entry = task.entry
  if not entry then return end
  if entry.pending then
    for key in pairs(entry.pending) do
      answer_pending(entry, key, { error = { code = -32800, message = "the task was cancelled" } })
    end
  end
  cancel_entry(entry)
end

-- notifications/tasks (a DetailedTask) to the listens that asked for the task's id
tasks.on_change = function(task)
  for _, l in pairs(modern.listeners) do
    if l.filter.task_ids and l.filter.task_ids[task.id] and l.tenant == task.tenant then
      send_listener(l, "notifications/tasks", tasks.detailed(task))
    end
  end
end

---------------------------------------------------------------------------------------------
-- the request context handed to tool handlers

local request_mt = {}
request_mt.__index = request_mt

-- Starts an execution and waits for it; returns the result table, or nil when cancelled, or
-- nil, err, refusal when it could not start (refusal: the shaped result of that, error_type busy).
-- Each tenant's executions running or waiting for a worker, and their code and context bytes:
-- one tenant's share of the pool (max_queue_per_tenant, max_queue_bytes_per_tenant), so that it
-- cannot fill max_queue or max_queue_bytes for everyone.
local tenant_jobs, tenant_job_bytes = {}, {}

local function tenant_refusal(tenant, bytes)
  if not mb.config.tenants then return nil end -- one tenant: max_queue and max_queue_bytes alone
  local n, b = tenant_jobs[tenant] or 0, tenant_job_bytes[tenant] or 0
  if n >= mb.config.max_queue_per_tenant then
    return string.format("server busy: %d of your executions are already running or queued "
      .. "(max_queue_per_tenant=%d)", n, mb.config.max_queue_per_tenant)
  end
  if b + bytes > mb.config.max_queue_bytes_per_tenant then
    return string.format("server busy: your executions running or queued already hold %d bytes of "
      .. "code and context (max_queue_bytes_per_tenant=%d)", b, mb.config.max_queue_bytes_per_tenant)
  end
end

function request_mt:execute(spec)
  if self.entry.cancelled then return nil end
  local started = mb.wall_ms()
  local tenant = self.tenant
  spec.tenant = tenant
  local bytes = #spec.code + (spec.context_json and #spec.context_json or 0)
  local job, err, sj, sq, io
  local over = tenant_refusal(tenant, bytes)
  if over then
    job, err, sj, sq, io = mb.busy(over)
  else
    job, err, sj, sq, io = mb.submit(spec)
  end
  if not job then
    return nil, err, sj and { success = false, error_type = "busy", structured_json = sj,
                              structured_quoted = sq, io_meta = io }
  end
  tenant_jobs[tenant] = (tenant_jobs[tenant] or 0) + 1
  tenant_job_bytes[tenant] = (tenant_job_bytes[tenant] or 0) + bytes
  self.entry.job = job
  self.entry.tool = spec.tool -- the logger name of its log messages
  -- when the execution's own limit ends it: how long host calls may wait for (mcp/upstream.lua)
  self.entry.deadline = mb.now_ms() + (spec.timeout_ms or mb.config.default_timeout_ms)
  by_job[job] = self.entry
  local res = mb.wait(job)
  by_job[job] = nil
  local n = tenant_jobs[tenant] - 1
  tenant_jobs[tenant] = n > 0 and n or nil
  tenant_job_bytes[tenant] = n > 0 and tenant_job_bytes[tenant] - bytes or nil
  self:abandon_client_requests()
  tools.upstream.abandon(self.entry) -- cancels its upstream calls still in flight
  self.entry.job = nil
  if res.pii_found then tools.pii.after_execution(self.tenant, res) end -- vault, before the answer
  res.execution_id = tools.history.add(self.tenant, started, spec, res, self.entry.tools_called,
    self.principal)
  tools.audit.record("execution", self, res.execution_id, { tool = spec.tool or "execute_code",
    outcome = res.success and "ok" or (res.error_type or "runtime"), code_hash = res.code_hash })
  if self.entry.cancelled then return nil end
  return res
end

-- Runs an execution that no client asked for (a skill's examples after the watcher saw an edit):
-- a request of its own with no session (its logs go nowhere, it cannot ask a client), so that
-- the execution's host calls (require of other skills) are served; not journaled. Call it from
-- a coroutine. Returns the result table, or nil and the error when it could not start.
function tools.background_execute(tenant, spec)
  local entry = { method = "background", cancelled = false }
  local request = setmetatable({ id = 0, entry = entry, tenant = tenant, sess = { inflight = {} } },
                               request_mt)
  entry.request, entry.origin = request, request
  spec.tenant = tenant
  local job, err = mb.submit(spec)
  if not job then return nil, err end
  entry.job = job
  by_job[job] = entry
  local res = mb.wait(job)
  by_job[job] = nil
  request:abandon_client_requests()
  tools.upstream.abandon(entry)
  return res
end

-- Asks the client something (sampling/createMessage, elicitation/create, roots/list) for this
-- request's execution and waits (yields) for the answer. Returns result or nil, error. 2025-11-25:
-- a request to the client on this request's session and exchange. 2026-07-28: input_required
-- (input_request below).
-- Questions to clients waiting for their answers, per tenant (both eras): one tenant's code
-- cannot keep more than max_client_requests_per_tenant of them open.
local asking = {}
-- Whether n more questions of tenant fit (nil and the error that says why not).
local function ask_room(tenant, n)
  local mine = asking[tenant] or 0
  if mine + n > mb.config.max_client_requests_per_tenant then
    return nil, { code = -32603, message = string.format("%d of your questions to the client already "
      .. "wait for answers (max_client_requests_per_tenant=%d): answer some first", mine,
      mb.config.max_client_requests_per_tenant) }
  end
  return true
end
-- While an execution waits for a client's answer (a person may take minutes), its worker does
-- not count against `workers`: the pool runs others beside it, on up to held_workers more
-- workers (mb.hold; docs/configuration.md).
local function hold_job(entry, on)
  local n = (entry.client_waits or 0) + (on and 1 or -1)
  entry.client_waits = n
  if entry.job and n == (on and 1 or 0) then mb.hold(entry.job, on) end
end
local function ask_begin(tenant) asking[tenant] = (asking[tenant] or 0) + 1 end
local function ask_end(tenant)
  local n = (asking[tenant] or 1) - 1
  asking[tenant] = n > 0 and n or nil
end

function request_mt:client_request(method, params, capability)
  if self.modern then return self:input_request(method, params) end
  local caps = self.sess.client_capabilities or {}
  if capability and caps[capability] == nil then
    return nil, { code = -32601, message = string.format(
      "the client did not declare the %s capability, so moonbox cannot send it %s", capability, method) }
  end
  local room, full = ask_room(self.tenant, 1)
  if not room then return nil, full end
  ask_begin(self.tenant)
  next_client_request = next_client_request + 1
  local id = "mb-" .. next_client_request
  local co = coroutine.running()
  client_requests[id] = co
  client_request_peer[id] = string.format("%s\0%s", self.session, self.tenant)
  self.entry.client_requests = self.entry.client_requests or {}
  self.entry.client_requests[id] = true
  mb.send({ jsonrpc = "2.0", id = id, method = method, params = params }, self.session, self.exchange, false)
  hold_job(self.entry, true)
  local msg = coroutine.yield()
  hold_job(self.entry, false)
  ask_end(self.tenant)
  self.entry.client_requests[id] = nil
  if msg.error ~= nil then return nil, msg.error end
  return msg.result
end

-- 2026-07-28 (MRTR): the request being answered gets resultType "input_required" with every
-- input its execution waits for and a sealed requestState; the execution stays suspended in its
-- host call until the client's retry brings inputResponses (resume_inputs) or the hold expires.
-- entry.pending[key] = {method, params, done(msg)}: msg is {result = ...} or {error = ...}.
local next_input = 0
-- request no longer stands for entry: its in-flight id and its sessionless exchange are
-- forgotten, unless they already stand for something else (a reused id).
release = function(request, entry)
  if request.sess.inflight[request.id] == entry then request.sess.inflight[request.id] = nil end
  if request.session == 0 and by_exchange[request.exchange] == entry then by_exchange[request.exchange] = nil end
end

-- The request entry stands for is answered now with a CreateTaskResult (its record written
-- first, so tasks/get resolves at once, from any replica); the execution goes on as the task,
-- answered by tasks/get. Its id and exchange are the client's again: closing the response or
-- notifications/cancelled no longer stop it (tasks/cancel does).
become_task = function(entry, timeout_ms)
  local target = entry.request
  if entry.task then return true end
  local task, code, msg = tasks.create(target, timeout_ms)
  if not task then return nil, code, msg end
  task.entry = entry
  task.timeout_ms = timeout_ms
  entry.task = task
  release(target, entry)
  send_result(target, target.id, modern.decorate("tools/call", tasks.create_result(task)))
  -- host calls still need a request: one on no exchange (nothing is sent to the client)
  entry.request = setmetatable({ id = target.id, entry = entry, tenant = target.tenant, sess = target.sess,
                                 modern = true, session = target.session, exchange = 0,
                                 rights = target.rights, principal = target.principal, task = task },
                               request_mt)
  return true
end

answer_pending = function(entry, key, msg)
  local p = entry.pending[key]
  entry.pending[key] = nil
  p.done(msg)
end

local function ask_inputs(entry)
  local target = entry.request
  if not target or not next(entry.pending or {}) then return end
  local inputs = {}
  for key, p in pairs(entry.pending) do inputs[key] = { method = p.method, params = p.params } end
  if entry.task then -- a task: tasks/get shows them, tasks/update answers them
    return tasks.set_inputs(entry.task, inputs)
  end
  if entry.hold then modern.drop(entry.hold) end
  local hold, state = modern.hold(entry, target.tenant, entry.hold_name, inputs, function()
    -- nobody came back within mrtr_hold_ms: stop the execution
    entry.hold = nil
    mb.log("info", "an execution waiting for client input was stopped after mrtr_hold_ms="
      .. mb.config.mrtr_hold_ms)
    for key in pairs(entry.pending) do
      answer_pending(entry, key, { error = { code = -32603, message = string.format(
        "the client did not answer within mrtr_hold_ms=%d", mb.config.mrtr_hold_ms) } })
    end
    entry.cancelled = true
    if entry.job then mb.cancel(entry.job) end
  end)
  if not hold then
    for key in pairs(entry.pending) do answer_pending(entry, key, { error = { code = -32603, message = state } }) end
    return
  end
  entry.hold = hold
  entry.request = nil -- answered; the retry becomes the request to answer
  -- answered, its id and connection are the client's again (a stdio client may reuse the id)
  release(target, entry)
  send_result(target, target.id, modern.decorate(entry.method,
    { resultType = "input_required", inputRequests = inputs, requestState = state }))
end

-- Asks list = {{key, method, params, capability}}; waits for every answer. Returns {key =
-- result}, or nil and an error (the first one).
function request_mt:input_requests(list)
  local entry = self.entry
  local caps = self.sess.client_capabilities or {}
  for _, q in ipairs(list) do
    if caps[q.capability] == nil then
      -- the request cannot be served without it: it fails with -32021 (the execution is stopped)
      entry.fail_with = rpc_error(-32021, string.format("Missing required client capability: %s "
        .. "(the code asked the client for %s)", q.capability, q.method),
        { requiredCapabilities = { [q.capability] = {} } })
      if entry.job then mb.cancel(entry.job) end
      return nil, { message = entry.fail_with.message }
    end
  end
  local unanswered = 0
  for _, q in ipairs(list) do
    if not (entry.preset and is_object(entry.preset[q.key])) then unanswered = unanswered + 1 end
  end
  if unanswered > 0 then
    local room, full = ask_room(self.tenant, unanswered)
    if not room then return nil, full end
  end
  entry.pending = entry.pending or {}
  local co, waiting, answers, first_err = coroutine.running(), 0, {}, nil
  local tenant = self.tenant
  for _, q in ipairs(list) do
    local key = q.key
    if entry.pending[key] then key = key .. "." .. tostring(next_input + 1) end
    next_input = next_input + 1
    local preset = entry.preset and entry.preset[key]
    if is_object(preset) then -- answered already, in the first request's inputResponses
      entry.preset[key] = nil
      answers[q.key] = preset
    else
      waiting = waiting + 1
      ask_begin(tenant)
      local name = q.key
      entry.pending[key] = { method = q.method, params = q.params, done = function(msg)
        ask_end(tenant)
        if msg.error ~= nil then first_err = first_err or msg.error else answers[name] = msg.result end
        waiting = waiting - 1
        -- only once yielded below: ask_inputs may answer at once (mrtr_max_held reached), while
        -- this coroutine still runs
        if waiting == 0 and coroutine.status(co) == "suspended" then
          local ok, err = coroutine.resume(co)
          if not ok then mb.log("error", "input response: " .. tostring(err)) end
        end
      end }
    end
  end
  if waiting > 0 then
    ask_inputs(entry)
    -- (a yield after an immediate answer was never resumed: the execution hung to timeout_ms)
    if waiting > 0 then
      hold_job(entry, true)
      coroutine.yield()
      hold_job(entry, false)
    end
  end
  if first_err then return nil, first_err end
  return answers
end

function request_mt:input_request(method, params)
  next_input = next_input + 1
  local key = method:gsub("/.*$", "") .. "-" .. next_input
  local answers, err = self:input_requests({ { key = key, method = method, params = params,
                                               capability = CLIENT_METHODS[method] } })
  if not answers then return nil, err end
  return answers[key]
end

-- A retry (params.requestState, params.inputResponses) continues the held execution it names:
-- the retry becomes the request answered when the execution ends (or asks again). Answers that
-- are not objects do not count: that input is asked again.
local function resume_inputs(request, params, name)
  local hold, why = modern.find_hold(params.requestState, request.tenant, name)
  if not hold then error(rpc_error(INVALID_PARAMS, "Invalid params: " .. why)) end
  local responses = params.inputResponses
  if responses ~= nil and responses ~= null and not is_object(responses) then
    error(rpc_error(INVALID_PARAMS, "Invalid params: params.inputResponses must be an object"))
  end
  local entry = hold.entry
  modern.drop(hold)
  entry.hold = nil
  entry.request = request
  request.entry = entry
  if entry.finished then -- the execution ended meanwhile: its outcome answers the retry
    return entry.finished()
  end
  for key, r in pairs(is_object(responses) and responses or {}) do
    if entry.pending[key] and is_object(r) then answer_pending(entry, key, { result = r }) end
  end
  ask_inputs(entry) -- inputs still missing (or asked meanwhile) are asked again
  return DEFERRED
end

-- Ends the waits of client requests made for this request (the execution ended).
-- (Most executions asked nothing: no empty table is made to say so.)
function request_mt:abandon_client_requests()
  local entry = self.entry
  if entry.client_requests then
    for id in pairs(entry.client_requests) do
      local co = client_requests[id]
      client_requests[id], client_request_peer[id] = nil, nil
      if co then coroutine.resume(co, { error = { code = -32603, message = "the execution ended" } }) end
    end
  end
  if entry.pending then
    for key in pairs(entry.pending) do
      answer_pending(entry, key, { error = { code = -32603, message = "the execution ended" } })
    end
  end
end

-- 2026-07-28: only for requests whose _meta named a logLevel
function request_mt:log(level, data, logger)
  if self.entry.task then return end -- nobody listens on a task's closed request
  local min = self.sess.log_level
  if min and LEVELS[level] and LEVELS[level] >= LEVELS[min] then
    notify(self, "notifications/message", { level = level, logger = logger, data = data })
  end
end

function request_mt:progress(progress, total, message)
  local task = self.entry.task
  if task then -- a task's progress is its statusMessage (tasks/get)
    return tasks.set_message(task, type(message) == "string" and message
      or (total and string.format("%s of %s", tostring(progress), tostring(total))) or ("progress " .. tostring(progress)))
  end
  local token = self.entry.progress_token
  if token == nil then return end
  notify(self, "notifications/progress",
    { progressToken = token, progress = progress, total = total, message = message })
end

-- kind is "progress" or a log level name; payload is JSON text made by the sandbox engine.
function host_api.on_notify(job, kind, payload)
  local entry = by_job[job]
  if not entry or entry.cancelled or not entry.request then return end
  if kind == "progress" then
    local p = mb.json_decode(payload)
    if p then entry.request:progress(p.progress, p.total, p.message) end
  else
    -- log data is spliced into the notification as it came, without decoding it here
    entry.request:log(kind, mb.json_raw(payload), entry.tool or "execute_code")
  end
end

-- Runs a host-call handler; returns ok, value (the answer, or the message when not ok). A
-- handler answers value, or nil and a message; an error in it is logged as ours.
local function run_host_call(name, handler, args, request)
  local ok, value, message = pcall(handler, args, request)
  if not ok then
    mb.log("error", "host call " .. name .. ": " .. tostring(value))
    return false, name .. ": internal error: " .. tostring(value)
  elseif value == nil and message ~= nil then
    return false, tostring(message)
  end
  return true, value
end

-- A call from running sandbox code (skills, ...): runs in its own coroutine, always answers.
function host_api.on_host_call(job, seq, name, args)
  local entry = by_job[job]
  local handler = tools.host_calls[name]
  local ok, value
  if not entry or entry.cancelled then
    ok, value = false, "the execution has ended"
  elseif not entry.request then
    ok, value = false, "the execution is waiting for its client's input"
  elseif not auth.allows(entry.request.rights, auth.host_call_right(name)) then
    ok, value = false, name .. ": this execution's access token lacks the scope "
      .. auth.scope_of(auth.host_call_right(name))
    tools.audit.record("refused", entry.request, name, { scope = auth.scope_of(auth.host_call_right(name)), from = "code" })
  elseif tools.host_calls_raw[name] then -- arguments in the handler's own format, not JSON
    ok, value = run_host_call(name, tools.host_calls_raw[name], args, entry.request)
  elseif not handler then
    ok, value = false, "unknown server call " .. tostring(name)
  else
    local a, err = mb.json_decode(args)
    if a == nil then
      ok, value = false, name .. ": bad arguments: " .. tostring(err)
    else
      ok, value = run_host_call(name, handler, a, entry.origin)
    end
  end
  if ok then
    local eok, text = pcall(mb.json_encode, value == nil and null or value)
    if eok then return mb.host_reply(job, seq, true, text) end
    ok, value = false, name .. ": the reply cannot be encoded: " .. tostring(text)
  end
  mb.host_reply(job, seq, false, value)
end

---------------------------------------------------------------------------------------------
-- dispatch

local function valid_id(id)
  return type(id) == "string" or math.type(id) == "integer"
end

local function dispatch(msg, t0, ctx)
  if type(msg) ~= "table" then
    return send_error(ctx, nil, INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
  end
  if getmetatable(msg) == "json.array" then
    return send_error(ctx, nil, INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not supported")
  end
  local id, method = msg.id, msg.method
  local has_id = id ~= nil
  if has_id and not valid_id(id) then
    return send_error(ctx, nil, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
  end
  if msg.jsonrpc ~= "2.0" then
    return send_error(ctx, has_id and id or nil, INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
  end
  if method == nil then
    if msg.result ~= nil or msg.error ~= nil then -- a response to one of our requests
      local key = has_id and tostring(id)
      local waiting = key and client_requests[key]
      if waiting and client_request_peer[key] ~= string.format("%s\0%s", ctx.session, ctx.tenant) then
        waiting = nil -- sent to another session or tenant: not an answer from this one
      end
      if waiting then
        client_requests[key], client_request_peer[key] = nil, nil
        local ok, err = coroutine.resume(waiting, msg)
        if not ok then mb.log("error", "client response: " .. tostring(err)) end
      end
      return
    end
    return send_error(ctx, has_id and id or nil, INVALID_REQUEST, "Invalid Request: method is missing")
  end
  if type(method) ~= "string" then
    return send_error(ctx, has_id and id or nil, INVALID_REQUEST, "Invalid Request: method must be a string")
  end
  local params = msg.params
  if params == nil or params == null then
    params = {}
  elseif not is_object(params) then
    if not has_id then return end
    return send_error(ctx, id, INVALID_PARAMS, "Invalid params: params must be an object")
  end
  -- context_vars came as its own text (RAW_CONTEXT), passed to the worker as is; any other
  -- method or tool gets the table
  local args = params.arguments
  if type(args) == "table" and getmetatable(args.context_vars) == "json.raw"
      and not (method == "tools/call" and params.name == "execute_code") then
    args.context_vars = mb.json_decode(mb.json_raw_text(args.context_vars))
  end

  local base = ctx.session ~= 0 and session(ctx.session, ctx.tenant) or nil
  local is_modern = modern.era(ctx, base or {}, params) == "modern"
  if not has_id then
    local h = notifications[method]
    if h and (not is_modern or method == "notifications/cancelled") and base then
      local ok, err = pcall(h, params, base)
      if not ok then mb.log("error", "notification " .. method .. ": " .. tostring(err)) end
    end
    return
  end

  local handler, sess = methods[method], base
  if is_modern then
    if modern.REMOVED[method] then handler = nil end
    if not handler then
      return send_error(ctx, id, METHOD_NOT_FOUND, "Method not found: " .. clip(method)
        .. (modern.REMOVED[method] and " (removed in " .. modern.LATEST .. ")" or ""), nil, 404)
    end
    local info, e = modern.check(method, params, ctx.hdr)
    if info and ctx.hdr and method == "tools/call" and type(params.name) == "string" then
      local tool = tools.find(params.name, ctx.tenant)
      e = tool and modern.check_params(ctx.hdr.params, tool.definition.inputSchema, params.arguments)
      if e then info = nil end
    end
    if not info then return send_error(ctx, id, e.code, e.message, e.data, modern.status_of(e.code, true)) end
    sess = { tenant = ctx.tenant, log_level = info.log_level, client_capabilities = info.capabilities,
             client_info = is_object(info.client_info) and info.client_info or nil,
             inflight = base and base.inflight or {} }
  elseif MODERN_ONLY[method] then
    handler = nil
  end
  if not handler then
    return send_error(ctx, id, METHOD_NOT_FOUND, "Method not found: " .. clip(method))
  end
  local rights = auth.rights(ctx.hdr)
  if rights then -- an OAuth access token: its scopes decide (lua/mcp/auth.lua)
    local need = auth.method_right(method, params)
    if not auth.allows(rights, need) then
      local scope = auth.scope_of(need)
      tools.audit.record("refused", { tenant = sess.tenant, principal = ctx.hdr.principal, sess = sess },
        method == "tools/call" and clip(tostring(params.name)) or clip(method), { scope = scope, right = need })
      return send_error(ctx, id, -32000, "Forbidden: insufficient_scope: " .. clip(method)
        .. (method == "tools/call" and (" " .. clip(tostring(params.name))) or "") .. " needs the scope " .. scope,
        { scope = scope, right = need }, 403)
    end
  end
  if sess.inflight[id] then
    return send_error(ctx, id, INVALID_REQUEST, "Invalid Request: id " .. tostring(id) .. " is already in use")
  end
  local meta = params._meta
  -- made at the size it reaches (the nil fields are set later: request, origin, job, tool,
  -- ended), so it is not rehashed twice on the way
  local entry = { method = method, cancelled = false,
                  progress_token = is_object(meta) and valid_id(meta.progressToken) and meta.progressToken or nil,
                  request = nil, origin = nil, job = nil, tool = nil, ended = nil }
  local request = setmetatable({ id = id, entry = entry, tenant = sess.tenant, sess = sess,
                                  modern = is_modern, session = ctx.session, exchange = ctx.exchange,
                                  rights = rights, principal = ctx.hdr and ctx.hdr.principal },
                               request_mt)
  mb.exchange_pending() -- a response will come on this exchange
  entry.request, entry.origin = request, request
  if is_modern then -- what a held execution is found by (only 2026-07-28 requests are held)
    entry.hold_name = method .. ":" .. tostring(params.name or params.uri or "")
  end
  sess.inflight[id] = entry
  if is_modern and ctx.session == 0 then by_exchange[ctx.exchange] = entry end
  local ok, result
  if is_modern and params.requestState ~= nil and params.requestState ~= null then
    ok, result = pcall(resume_inputs, request, params, entry.hold_name)
    if ok and result == DEFERRED then -- answered when the held execution ends
      sess.inflight[id] = request.entry
      if ctx.session == 0 then by_exchange[ctx.exchange] = request.entry end
      return
    end
  else
    if is_modern and is_object(params.inputResponses) then entry.preset = params.inputResponses end
    ok, result = pcall(handler, params, request)
  end
  if entry.fail_with then ok, result = false, entry.fail_with end
  -- the request to answer: this one, or the retry that took over its held execution
  local target = entry.request
  release(request, entry)
  if target and target ~= request then release(target, entry) end
  if entry.task then -- answered with a CreateTaskResult: the outcome is the task's
    local outcome
    if entry.task.cancelling or (ok and result == nil) then
      outcome = { cancelled = true }
    elseif ok then
      outcome = { result = result }
    elseif getmetatable(result) == rpc_error_mt then
      outcome = { error = { code = result.code, message = clip(tostring(result.message), 1024), data = result.data } }
    else
      mb.log("error", "internal error in task " .. entry.task.id .. ": " .. tostring(result))
      outcome = { error = { code = INTERNAL_ERROR, message = "Internal error: " .. clip(tostring(result), 1024) } }
    end
    tasks.finish(entry.task, outcome)
    return
  end
  if entry.hold then -- answered input_required, and the execution ended before the retry came
    modern.hold_ended(entry.hold) -- its place is free at once; only the outcome waits for the retry
    local o_ok, o_result = ok, result
    entry.finished = function()
      if not o_ok then error(o_result, 0) end
      return o_result
    end
    return
  end
  if entry.cancelled or not target then return end -- the client asked us not to answer
  if ok then
    if result == nil then result = {} end
    if target.modern then modern.decorate(method, result) end
    send_result(target, target.id, result)
    if method == "tools/call" then tools.record_request(mb.now_ms() - t0, request.tenant) end
    return
  end
  if getmetatable(result) == rpc_error_mt then
    local code = result.code
    if target.modern and code == -32002 then code = INVALID_PARAMS end -- resource not found
    return send_error(target, target.id, code, result.message, result.data)
  end
  mb.log("error", "internal error in " .. method .. ": " .. tostring(result))
  return send_error(target, target.id, INTERNAL_ERROR, "Internal error: " .. tostring(result))
end

-- The id of a message that is valid JSON but cannot be served as sent (a repeated key, a key
-- holding NUL), read from a lenient decode so the error can still answer the client's id; nil
-- when there is none or it is ambiguous.
local function id_of_refused(text)
  local msg = mb.json_decode(text)
  if is_object(msg) and valid_id(msg.id) then return msg.id end
  if is_object(msg) and msg.id == nil and type(msg.method) == "string" then return nil, true end
end

-- A request whose key repeats ({"method":"ping","method":"tools/call"}) is refused rather than
-- read last-wins: a proxy or firewall in front may read the first one, and the two must not
-- disagree about what a request is. Keys with "\u0000" are valid JSON that jansson (and so
-- moonbox) cannot hold. Both get an answer to the request's id (docs/security.md, "Requests read one way").
local function refused(ctx, line, err)
  local key = err:match("^duplicate object key near '(.*)' at line")
  if key then
    -- when "id" itself repeats, which one the client meant is unknown: answer null
    local id, notification = nil, false
    if key ~= '"id"' then id, notification = id_of_refused(line) end
    if not notification then
      send_error(ctx, id, INVALID_REQUEST, "Invalid Request: duplicate object key " .. key
        .. " (each key may appear once in an object)")
    end
    return true
  end
  if err:find("^object keys containing \\u0000") then
    -- read the id from a copy where each \u0000 escape (an odd run of backslashes) is U+FFFD
    local text = line:gsub("(\\+)u0000", function(bs)
      if #bs % 2 == 1 then return bs .. "uFFFD" end
    end)
    local id, notification = id_of_refused(text)
    if not notification then
      send_error(ctx, id, INVALID_PARAMS, "Invalid params: object keys containing \\u0000 are not supported")
    end
    return true
  end
end

-- session: the session id (1 on stdio); exchange: the HTTP POST this message came on (0 on
-- stdio); tenant: the tenant of the session (HTTP tokens), "default" on stdio.
-- execute_code's context_vars is decoded on the worker, not here: the request decoder hands
-- params.arguments.context_vars on as a raw value of its text (checked like the rest)
local RAW_CONTEXT = true

-- hdr (HTTP only): {http = true, protocol_version, method, name} from the request's headers.
function host_api.handle_line(line, sid, exchange, tenant, hdr)
  local t0 = mb.now_ms()
  local ctx = { session = sid or 1, exchange = exchange or 0, tenant = tenant or "default", hdr = hdr }
  local msg, err = mb.json_decode(line, true, RAW_CONTEXT)
  if msg == nil then
    err = tostring(err)
    if refused(ctx, line, err) then return end
    return send_error(ctx, nil, PARSE_ERROR, "Parse error: " .. err)
  end
  return dispatch(msg, t0, ctx)
end

-- The session ended (HTTP DELETE or expiry): stop its executions, forget it.
function host_api.on_session_end(sid)
  local s = sessions[sid]
  if not s then return end
  for _, entry in pairs(s.inflight) do
    entry.cancelled = true
    if entry.job then mb.cancel(entry.job) end
  end
  sessions[sid] = nil
end

-- A sessionless request's connection closed before its answer: the client cancelled it.
function host_api.on_exchange_closed(exchange)
  local entry = by_exchange[exchange]
  if not entry then return end
  by_exchange[exchange] = nil
  cancel_entry(entry)
end

function host_api.on_shutdown()
  -- 2026-07-28 listeners are torn down with notifications/cancelled naming their request
  for _, l in pairs(modern.listeners) do
    mb.send({ jsonrpc = "2.0", method = "notifications/cancelled",
              params = { requestId = l.entry.origin.id, reason = "the server is shutting down" } },
            l.session, l.exchange, true)
    cancel_entry(l.entry)
  end
  tools.upstream.shutdown() -- stdin closed, SIGTERM, SIGKILL after upstream_shutdown_grace_ms
  tools.history.flush()
  tools.audit.flush()
end

-- A request that presented a token was refused (src/http.c): a failed sign-in in the audit trail.
function host_api.on_auth_failed(why, peer)
  tools.audit.sign_in_failed(why, peer)
end

-- Prometheus text the host adds to /metrics (upstream servers).
-- PostgreSQL store: statements, those run blocking, queued, failed; reconnects; connections
local function store_metrics()
  if not mb.db.stats then return "" end
  local st, out = mb.db.stats(), {}
  local function m(name, kind, help, v)
    out[#out + 1] = string.format("# HELP moonbox_store_%s %s\n# TYPE moonbox_store_%s %s\nmoonbox_store_%s %d\n",
      name, help, name, kind, name, v)
  end
  m("statements_total", "counter", "statements run on PostgreSQL without blocking the loop", st.statements)
  m("blocking_statements_total", "counter", "statements run blocking (code that cannot yield: start-up, timers)", st.blocking)
  m("queued_statements_total", "counter", "statements that waited for a free connection", st.waited)
  m("failed_statements_total", "counter", "statements that raised an error (SQL, connection lost, PostgreSQL unreachable)", st.failed)
  m("reconnects_total", "counter", "PostgreSQL connections reopened after a break", st.reconnects)
  m("connections", "gauge", "PostgreSQL connections open", st.connections)
  m("connections_down", "gauge", "PostgreSQL connections broken and being reopened", st.down)
  return table.concat(out)
end

function host_api.metrics_text()
  return tools.savings.metrics_text() .. tools.upstream.metrics_text() .. store_metrics()
end

-- id_json: the JSON text of the line's "id" as the transport found it in the line's first bytes
-- (a string or an integer), or nil: the answer goes to that id, so the caller's request ends.
function host_api.handle_oversize(bytes, id_json)
  local id = id_json and mb.json_decode(id_json)
  if not valid_id(id) then id = nil end
  send_error({ session = 1, exchange = 0 }, id, INVALID_REQUEST, string.format(
    "Invalid Request: message of %d bytes exceeds max_message_bytes=%d and was discarded",
    bytes, mb.config.max_message_bytes))
end

return host_api
