-- mcp/modern.lua - the 2026-07-28 revision (no handshake, no session) beside 2025-11-25.
--
-- server.lua's dispatch asks era() which revision a request speaks, then, for a modern one,
-- check() (the request's _meta and, over HTTP, the MCP-Protocol-Version / Mcp-Method / Mcp-Name
-- headers against the body), decorate() (resultType, serverInfo, ttlMs / cacheScope on every
-- result) and status_of() (the HTTP status of an error). The parts with state live here too:
--   * subscriptions/listen: a long-lived request; list changes and resource updates go to every
--     listener that asked for them, tagged with its subscription id (notify_*), and shutdown
--     tears them down with notifications/cancelled;
--   * input_required (MRTR): sandbox code (mcp.elicit / mcp.sample / mcp.roots) asking the client
--     something. The execution is held, suspended in its host call, against a sealed, expiring
--     requestState; the client's retry with inputResponses resumes it and adopts the answer.
--     docs/protocol.md says why a held execution rather than a re-run.
-- The revisions themselves come from src/protocol.h (mb.protocol.modern).

local mb = mb
local null = mb.null
local M = {}

local K_VERSION = "io.modelcontextprotocol/protocolVersion"
local K_CAPS = "io.modelcontextprotocol/clientCapabilities"
local K_INFO = "io.modelcontextprotocol/clientInfo"
local K_LEVEL = "io.modelcontextprotocol/logLevel"
local K_SERVER = "io.modelcontextprotocol/serverInfo"
local K_SUB = "io.modelcontextprotocol/subscriptionId"

local INVALID_PARAMS, HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_VERSION =
  -32602, -32020, -32021, -32022

local MODERN = {}
for _, v in ipairs(mb.protocol.modern) do MODERN[v] = true end
local SUPPORTED = {} -- every revision served, newest first (the -32022 error lists them)
for _, v in ipairs(mb.protocol.modern) do SUPPORTED[#SUPPORTED + 1] = v end
for _, v in ipairs(mb.protocol.served) do SUPPORTED[#SUPPORTED + 1] = v end
M.LATEST = mb.protocol.modern[1]

M.SERVER_INFO = {
  name = "moonbox", title = "moonbox", version = mb.version,
  description = "Code-execution MCP server: Lua 5.4 in a hardened sandbox",
}

-- every result carries it: encoded once, spliced as it is
local SERVER_INFO_RAW = mb.json_raw(mb.json_encode(M.SERVER_INFO))

-- Methods of 2025-11-25 that 2026-07-28 removed: a modern request for one is "not found".
M.REMOVED = { initialize = true, ping = true, ["logging/setLevel"] = true,
              ["resources/subscribe"] = true, ["resources/unsubscribe"] = true }
-- Methods whose Mcp-Name header carries params.name or params.uri.
local NAMED = { ["tools/call"] = "name", ["prompts/get"] = "name", ["resources/read"] = "uri" }
-- The tasks extension's requests: Mcp-Name carries params.taskId (for routing to the replica
-- that runs the task, docs/deploy.md); optional, but when sent it must match.
local NAMED_OPTIONAL = { ["tasks/get"] = "taskId", ["tasks/update"] = "taskId", ["tasks/cancel"] = "taskId" }
-- Results that say how long they may be cached.
local CACHED = { ["tools/list"] = true, ["prompts/list"] = true, ["resources/list"] = true,
                 ["resources/templates/list"] = true, ["resources/read"] = true,
                 ["server/discover"] = true }

local function is_object(v)
  return type(v) == "table" and getmetatable(v) ~= "json.array"
end

-- Which revision a request speaks: "modern" or "legacy". A sessionless HTTP request (session
-- 0) is modern; on a session that was initialized, legacy; otherwise a request that names a
-- protocol version in its _meta is modern (stdio serves both, chosen per request until an
-- initialize selects 2025-11-25 for the process).
function M.era(ctx, sess, params)
  if ctx.session == 0 then return "modern" end
  if sess.initialized then return "legacy" end
  local meta = params._meta
  if is_object(meta) and meta[K_VERSION] ~= nil then return "modern" end
  return "legacy"
end

local function err(code, message, data)
  return { code = code, message = message, data = data }
end

-- The request's _meta and headers. Returns info = {version, capabilities, client_info,
-- log_level}, or nil and an error {code, message, data}.
function M.check(method, params, hdr)
  local meta = params._meta
  if not is_object(meta) then
    return nil, err(INVALID_PARAMS, "Invalid params: a 2026-07-28 request carries params._meta with "
      .. K_VERSION .. " and " .. K_CAPS .. " (or send initialize first for 2025-11-25)")
  end
  local version = meta[K_VERSION]
  if type(version) ~= "string" then
    return nil, err(INVALID_PARAMS, "Invalid params: params._meta[\"" .. K_VERSION
      .. "\"] must be a string naming the protocol revision")
  end
  if hdr and hdr.http and hdr.protocol_version ~= version then
    return nil, err(HEADER_MISMATCH, hdr.protocol_version == nil
      and "Header mismatch: the MCP-Protocol-Version header is required"
      or string.format("Header mismatch: MCP-Protocol-Version %q but params._meta says %q",
                       hdr.protocol_version:sub(1, 64), version:sub(1, 64)))
  end
  if not MODERN[version] then
    return nil, err(UNSUPPORTED_VERSION, string.format(
      "Unsupported protocol version %q (supported: %s; 2025 revisions start with initialize)",
      version:sub(1, 64), table.concat(SUPPORTED, ", ")),
      { supported = mb.array(SUPPORTED), requested = version })
  end
  local caps = meta[K_CAPS]
  if not is_object(caps) then
    return nil, err(INVALID_PARAMS, "Invalid params: params._meta[\"" .. K_CAPS
      .. "\"] must be an object (the client's capabilities; {} for none)")
  end
  if hdr and hdr.http then
    if hdr.method ~= method then
      return nil, err(HEADER_MISMATCH, hdr.method == nil
        and "Header mismatch: the Mcp-Method header is required"
        or string.format("Header mismatch: Mcp-Method %q but the body's method is %q",
                         hdr.method:sub(1, 128), method:sub(1, 128)))
    end
    local field = NAMED[method]
    if not field and NAMED_OPTIONAL[method] and hdr.name ~= nil then field = NAMED_OPTIONAL[method] end
    if field and hdr.name ~= params[field] then
      return nil, err(HEADER_MISMATCH, hdr.name == nil
        and "Header mismatch: the Mcp-Name header is required for " .. method
        or string.format("Header mismatch: Mcp-Name %q but params.%s is %q", hdr.name:sub(1, 256),
                         field, tostring(params[field]):sub(1, 256)))
    end
  end
  local level = meta[K_LEVEL]
  if level ~= nil and (type(level) ~= "string" or not M.LEVELS[level]) then
    return nil, err(INVALID_PARAMS, "Invalid params: params._meta[\"" .. K_LEVEL
      .. "\"] must be one of debug, info, notice, warning, error, critical, alert, emergency")
  end
  return { version = version, capabilities = caps, client_info = meta[K_INFO], log_level = level }
end

-- SEP-2243: a tools/call argument whose input schema property says "x-mcp-header": "Name"
-- travels in the Mcp-Param-Name header too (for proxies that route on it); the two must agree.
-- lines: the transport's "Name:value" lines; a value "=?base64?...?=" is decoded (strictly).
-- Returns nil, or an error {code, message}.
local function header_value(v)
  local inner = v:match("^=%?[Bb][Aa][Ss][Ee]64%?(.*)%?=$")
  if not inner then return v end
  return mb.base64_decode(inner)
end

-- schema -> {property -> header name} of its x-mcp-header properties (false: none), made once
-- per tool definition (tools/call is hot; almost no tool has one)
local header_props = setmetatable({}, { __mode = "k" })
local function mirrored(schema)
  local m = header_props[schema]
  if m == nil then
    m = false
    local props = is_object(schema.properties) and schema.properties or {}
    for prop, def in pairs(props) do
      local hname = is_object(def) and def["x-mcp-header"]
      if type(hname) == "string" then
        m = m or {}
        m[prop] = hname
      end
    end
    header_props[schema] = m
  end
  return m
end

function M.check_params(lines, schema, args)
  local props = is_object(schema) and mirrored(schema)
  if not props then return nil end
  local given = {}
  for line in (lines or ""):gmatch("[^\n]+") do
    local name, value = line:match("^([^:]*):[ \t]*(.-)[ \t]*$")
    if name then given[name:lower()] = value end
  end
  args = is_object(args) and args or {}
  for prop, hname in pairs(props) do
    local v, h = args[prop], given[hname:lower()]
    if v == nil or v == null then
      if h ~= nil then
        return err(HEADER_MISMATCH, string.format("Header mismatch: Mcp-Param-%s is set but arguments.%s is absent",
          hname:sub(1, 64), tostring(prop):sub(1, 64)))
      end
    else
      if h == nil then
        return err(HEADER_MISMATCH, string.format("Header mismatch: the Mcp-Param-%s header is required "
          .. "(arguments.%s has x-mcp-header)", hname:sub(1, 64), tostring(prop):sub(1, 64)))
      end
      local decoded = header_value(h)
      if decoded == nil then
        return err(HEADER_MISMATCH, string.format("Header mismatch: Mcp-Param-%s is not valid base64",
          hname:sub(1, 64)))
      end
      local want = type(v) == "string" and v or (type(v) == "number" or type(v) == "boolean") and mb.json_encode(v)
      if decoded ~= want then
        return err(HEADER_MISMATCH, string.format("Header mismatch: Mcp-Param-%s does not match arguments.%s",
          hname:sub(1, 64), tostring(prop):sub(1, 64)))
      end
    end
  end
end

-- The HTTP status of a modern error answer (the spec's: 400 for what the request got wrong in
-- its envelope, 404 for an unknown method); nil = 200.
local STATUS = { [-32700] = 400, [-32600] = 400, [-32601] = 404, [HEADER_MISMATCH] = 400,
                 [MISSING_CAPABILITY] = 400, [UNSUPPORTED_VERSION] = 400 }
function M.status_of(code, envelope)
  if envelope and code == INVALID_PARAMS then return 400 end
  return STATUS[code]
end

-- Adds what every modern result carries. Lists and reads say how long they may be cached:
-- they vary per tenant, never per connection, so "private" when tokens make tenants.
function M.decorate(method, result)
  if result.resultType == nil then result.resultType = "complete" end
  local meta = result._meta
  if getmetatable(meta) == "json.raw" then -- made in C (execute_code's, mcp/savings.lua)
    meta = mb.json_decode(mb.json_raw_text(meta)); result._meta = meta
  end
  if not is_object(meta) then meta = {}; result._meta = meta end
  meta[K_SERVER] = SERVER_INFO_RAW
  if CACHED[method] then
    if result.ttlMs == nil then result.ttlMs = mb.config.cache_ttl_ms end
    if result.cacheScope == nil then
      result.cacheScope = mb.config.tenants and "private" or "public"
    end
  end
  return result
end

---------------------------------------------------------------------------------------------
-- server/discover

function M.discover(instructions, capabilities)
  return { supportedVersions = mb.array(SUPPORTED), capabilities = capabilities,
           instructions = instructions, serverInfo = M.SERVER_INFO }
end

---------------------------------------------------------------------------------------------
-- subscriptions/listen

local listeners = {} -- key -> listener {ctx, id, sub_id, tenant, kinds, uris, co}
M.listeners = listeners

-- Parses params.notifications: {toolsListChanged, promptsListChanged, resourcesListChanged:
-- booleans; resourceSubscriptions: array of uris}.
function M.listen_filter(params)
  local n = params.notifications
  if not is_object(n) then
    return nil, "subscriptions/listen: params.notifications must be an object"
  end
  -- honored: the filter the acknowledgement reports (its params.notifications is required by
  -- the schema; moonbox honours every kind it is asked for, and every resource uri)
  local kinds, uris, honored = {}, {}, {}
  for _, k in ipairs({ "toolsListChanged", "promptsListChanged", "resourcesListChanged" }) do
    local v = n[k]
    if v ~= nil and v ~= null and type(v) ~= "boolean" then
      return nil, "subscriptions/listen: notifications." .. k .. " must be a boolean"
    end
    kinds[k] = v == true
    if v == true then honored[k] = true end
  end
  local subs = n.resourceSubscriptions
  if subs ~= nil and subs ~= null then
    if type(subs) ~= "table" or getmetatable(subs) ~= "json.array" then
      return nil, "subscriptions/listen: notifications.resourceSubscriptions must be an array of uris"
    end
    if #subs > mb.config.max_resource_subscriptions then
      return nil, string.format("subscriptions/listen: %d resource subscriptions is above "
        .. "max_resource_subscriptions=%d", #subs, mb.config.max_resource_subscriptions)
    end
    for _, u in ipairs(subs) do
      if type(u) ~= "string" then
        return nil, "subscriptions/listen: notifications.resourceSubscriptions must be an array of uris"
      end
      uris[u] = true
    end
    honored.resourceSubscriptions = subs
  end
  -- the tasks extension: notifications/tasks for these task ids (the caller's own tasks only)
  local ids, task_ids = n.taskIds, nil
  if ids ~= nil and ids ~= null then
    if type(ids) ~= "table" or getmetatable(ids) ~= "json.array" or #ids > mb.config.max_resource_subscriptions then
      return nil, string.format("subscriptions/listen: notifications.taskIds must be an array of at most "
        .. "max_resource_subscriptions=%d task ids", mb.config.max_resource_subscriptions)
    end
    task_ids = {}
    for _, id in ipairs(ids) do
      if type(id) ~= "string" then return nil, "subscriptions/listen: notifications.taskIds must hold strings" end
      task_ids[id] = true
    end
    honored.taskIds = ids
  end
  return { kinds = kinds, uris = uris, honored = honored, task_ids = task_ids }
end

local next_listener, nlisteners = 0, 0
local tenant_listeners = {} -- tenant -> its listeners open (only tenants with some)
-- Registers a listener and returns it, or nil and why (max_listeners, or the tenant's share of
-- them, max_listeners_per_tenant: one tenant cannot take every listen of the server).
function M.add_listener(l)
  if nlisteners >= mb.config.max_listeners then
    return nil, string.format("subscriptions/listen: %d listens are open (max_listeners=%d)",
                              nlisteners, mb.config.max_listeners)
  end
  local mine = tenant_listeners[l.tenant] or 0
  if mb.config.tenants and mine >= mb.config.max_listeners_per_tenant then
    return nil, string.format("subscriptions/listen: your %d listens are open "
      .. "(max_listeners_per_tenant=%d); close one first", mine, mb.config.max_listeners_per_tenant)
  end
  nlisteners = nlisteners + 1
  tenant_listeners[l.tenant] = mine + 1
  next_listener = next_listener + 1
  l.key = next_listener
  listeners[l.key] = l
  return l
end

function M.remove_listener(l)
  if listeners[l.key] == l then
    listeners[l.key] = nil
    nlisteners = nlisteners - 1
    local n = tenant_listeners[l.tenant] - 1
    tenant_listeners[l.tenant] = n > 0 and n or nil
  end
end

-- Sends a notification to the listeners that asked for kind (e.g. "toolsListChanged") and whose
-- tenant concerns(tenant) says the change is about.
function M.notify_kind(send, kind, method, concerns)
  for _, l in pairs(listeners) do
    if l.filter.kinds[kind] and concerns(l.tenant) then
      send(l, method, {})
    end
  end
end

M.K_SUB = K_SUB

---------------------------------------------------------------------------------------------
-- input_required: executions held for the client's input

-- A hold is live while its execution waits for the retry: it counts against mrtr_max_held and
-- its tenant's mrtr_max_held_per_tenant. When the execution ends before the retry came, the hold
-- is freed at once (ended): it no longer counts, and only its outcome is kept for the retry,
-- until mrtr_hold_ms (at most mrtr_max_held such outcomes are kept, mrtr_max_held_per_tenant
-- of one tenant; beyond that the oldest is forgotten). Before, an ended hold
-- counted for its whole mrtr_hold_ms: six 300 ms executions of one tenant refused every other
-- tenant's questions for minutes.
local holds = {}   -- hold id -> hold (live or ended)
local nholds = 0   -- live holds
local tenant_holds = {} -- tenant -> its live holds
local ended = {}   -- ended holds, oldest first
local next_hold = 0
M.holds = holds

function M.held_count() return nholds end
function M.held_count_of(tenant) return tenant_holds[tenant] or 0 end

local function uncount(hold)
  if hold.ended then
    for i, h in ipairs(ended) do
      if h == hold then table.remove(ended, i) break end
    end
  else
    nholds = nholds - 1
    local n = tenant_holds[hold.tenant] - 1
    tenant_holds[hold.tenant] = n > 0 and n or nil
  end
end

local function drop(hold)
  if holds[hold.id] ~= hold then return end
  holds[hold.id] = nil
  uncount(hold)
  if hold.timer then hold.timer:stop(); hold.timer = nil end
end
M.drop = drop

-- The execution of hold ended before its retry came: the hold stops counting (its worker and
-- its place are free) and keeps only the outcome for the retry. The oldest kept outcomes are
-- forgotten beyond mrtr_max_held in all and mrtr_max_held_per_tenant per tenant.
function M.hold_ended(hold)
  if holds[hold.id] ~= hold or hold.ended then return end
  uncount(hold)
  hold.ended = true
  hold.inputs = nil
  ended[#ended + 1] = hold
  local mine = 0
  for i = #ended, 1, -1 do
    local h = ended[i]
    if h.tenant == hold.tenant then
      mine = mine + 1
      if mb.config.tenants and mine > mb.config.mrtr_max_held_per_tenant then drop(h) end
    end
  end
  while #ended > mb.config.mrtr_max_held do drop(ended[1]) end
end

-- A new hold for entry (the request's in-flight entry) waiting for the answers to inputs =
-- {key -> {method, params}}. Returns the hold and its requestState, or nil and why.
-- on_expire(hold) runs when no retry came within mrtr_hold_ms.
function M.hold(entry, tenant, tool, inputs, on_expire)
  if nholds >= mb.config.mrtr_max_held then
    return nil, string.format("%d executions already wait for their clients' input "
      .. "(mrtr_max_held=%d)", nholds, mb.config.mrtr_max_held)
  end
  local mine = tenant_holds[tenant] or 0
  if mb.config.tenants and mine >= mb.config.mrtr_max_held_per_tenant then
    return nil, string.format("%d of your executions already wait for your input "
      .. "(mrtr_max_held_per_tenant=%d): answer or cancel one first", mine, mb.config.mrtr_max_held_per_tenant)
  end
  next_hold = next_hold + 1
  local id = string.format("%x.%x", next_hold, math.random(0, 0x7fffffff))
  local ttl = mb.config.mrtr_hold_ms
  local hold = { id = id, entry = entry, tenant = tenant, tool = tool, inputs = inputs,
                 expires = mb.wall_ms() + ttl }
  holds[id] = hold
  nholds = nholds + 1
  tenant_holds[tenant] = mine + 1
  hold.timer = mb.timer(ttl, function()
    hold.timer = nil
    if holds[id] == hold then
      local was_ended = hold.ended
      drop(hold)
      if not was_ended then on_expire(hold) end
    end
  end)
  local state = mb.seal(string.format("%s|%s|%s|%d", id, tenant, tool or "", hold.expires))
  hold.state = state
  return hold, state
end

-- The hold a retry's requestState names, or nil and the reason (tampered, another tenant's,
-- expired, already answered).
function M.find_hold(state, tenant, tool)
  if type(state) ~= "string" then return nil, "params.requestState must be a string" end
  local text, why = mb.unseal(state)
  if not text then return nil, "requestState is " .. why end
  local id, t, name, expires = text:match("^([^|]+)|([^|]*)|([^|]*)|(%d+)$")
  if not id or t ~= tenant then return nil, "requestState does not belong to this client" end
  if name ~= (tool or "") then return nil, "requestState was issued for another request" end
  if tonumber(expires) < mb.wall_ms() then
    return nil, string.format("requestState expired (held for at most mrtr_hold_ms=%d)",
                              mb.config.mrtr_hold_ms)
  end
  local hold = holds[id]
  if not hold then
    return nil, "requestState is no longer held (answered already, stopped, or its execution ended "
      .. "and its outcome was forgotten: mrtr_max_held_per_tenant outcomes are kept)"
  end
  return hold
end

M.LEVELS = { debug = 0, info = 1, notice = 2, warning = 3, error = 4, critical = 5,
             alert = 6, emergency = 7 }

return M
