-- mcp/tools.lua - the tool registry: each tool is a definition (name, schemas, annotations) and a
-- handler(args, request). Handlers validate their arguments and report problems as tool errors
-- (isError), so the model can correct itself; only protocol faults are JSON-RPC errors.
-- execute_code turns its arguments into a plain-data request for the sandbox engine (src/), waits
-- for the result and shapes it as structuredContent plus the same JSON as a text block.

local mb = mb
local null = mb.null
local cfg = mb.config
local clip = require("mcp.catalog_text").clip

-- stats_providers[name] = fn(tenant) -> table: each adds a section about that tenant to
-- get_execution_stats; server_stats_providers[name] = fn() -> table: sections about the whole
-- server (other tenants' activity shows in them), given only to the default tenant and in
-- /metrics.
-- host_calls[name] = fn(args, request) -> value | nil, message: calls from sandbox code.
-- host_calls_raw[name]: the same, given the argument bytes as they came (upstream calls).
-- history: the execution log in the store (mcp/history.lua).
-- methods[name] = fn(params, request): protocol methods beyond tools (resources/*); handlers
-- raise M.rpc_error(code, message, data) (set by the server) for JSON-RPC errors.
-- resource_providers[i] = {list(tenant), templates(tenant), read(uri, request)}: resources
-- beyond the workspace and skill sources (skills published as resources).
local M = { list = {}, by_name = {}, stats_providers = {}, server_stats_providers = {},
            host_calls = {}, host_calls_raw = {}, methods = {},
            resource_providers = {},
            history = require("mcp.history"), savings = require("mcp.savings") }
M.stats_providers.history = function(tenant) return M.history.summary(tenant) end
M.stats_providers.context = function(tenant) return M.savings.stats(M.stats_of(tenant).context) end

local function register(definition, handler)
  local t = { definition = definition, handler = handler }
  M.list[#M.list + 1] = t
  M.by_name[definition.name] = t
end
M.register = register

-- providers[i] = fn() -> array of { definition, handler }: tools that come and go (published
-- skills). Built-in tools come first and win on a name clash.
M.providers = {}
function M.all(tenant)
  local out = {}
  for i = 1, #M.list do out[i] = M.list[i] end
  for _, provider in ipairs(M.providers) do
    for _, t in ipairs(provider(tenant or "default")) do
      if not M.by_name[t.definition.name] then out[#out + 1] = t end
    end
  end
  return out
end

function M.find(name, tenant)
  local t = M.by_name[name]
  if t then return t end
  for _, provider in ipairs(M.providers) do
    for _, d in ipairs(provider(tenant or "default")) do
      if d.definition.name == name then return d end
    end
  end
end

-- Set by the server: sends notifications/tools/list_changed.
M.list_changed = function() end

-- A tool-level error result: isError with a text block, and structuredContent when given.
local function tool_error(message, structured)
  return {
    content = { { type = "text", text = message } },
    structuredContent = structured,
    isError = true,
  }
end

local function structured_result(sc, is_error)
  return {
    content = { { type = "text", text = mb.json_encode(sc) } },
    structuredContent = sc,
    isError = is_error or false,
  }
end
M.tool_error = tool_error
M.structured_result = structured_result

-- The answer to an execution: the worker shaped its structuredContent (mb_exec_result_shape in
-- src/sandbox.c, the one owner of that shape) and its text form: splice both. Without them
-- (memory ran out shaping it) a plain error.
-- _meta: what came in and went out (raw JSON made on the worker, mcp/savings.lua) and, when the
-- journal kept the execution, its id ("dev.moonbox/execution_id": what rerun_id and
-- list_executions take), spliced in front as text.
function M.shaped_result(res, err)
  if not (res and res.structured_json) then
    return tool_error(err or "out of memory: the execution's result could not be built")
  end
  local meta, id = res.io_meta, res.execution_id
  if id then
    meta = meta and mb.json_raw('{"dev.moonbox/execution_id":"' .. id .. '",'
      .. mb.json_raw_text(meta):sub(2)) or { ["dev.moonbox/execution_id"] = id }
  end
  return {
    content = { { type = "text", text = res.structured_quoted } },
    structuredContent = res.structured_json,
    isError = not res.success,
    _meta = meta,
  }
end

-- An argument the tool does not take: the message the model gets, or nil when all are known.
function M.check_args(args, allowed, tool)
  for k in pairs(args) do
    if not allowed[k] then
      local names = {}
      for a in pairs(allowed) do names[#names + 1] = a end
      table.sort(names)
      return string.format("invalid arguments: %s has no argument %q (expected %s)", tool,
        tostring(k), table.concat(names, ", "))
    end
  end
end

local function is_object(v)
  return type(v) == "table" and getmetatable(v) ~= "json.array"
end

-- The refusal of a limit above its maximum: names the maximum and the server option that
-- raises it (the agent cannot, but can tell the person who runs the server).
local function over_max(name, shown, max_name, max, unit)
  local flag = "--" .. max_name:gsub("_", "-")
  return string.format("invalid arguments: %s=%s exceeds the maximum %s=%d%s; ask for at most "
    .. "that, or have the server started with a higher %s (%s, MOONBOX_%s or config.json)",
    name, shown, max_name, max, unit or "", max_name, flag, max_name:upper())
end

-- Reads an optional integer argument within [1, max]; returns value or nil, message.
local function int_arg(args, name, default, max, unit, max_name)
  max_name = max_name or ("max_" .. name)
  local v = args[name]
  if v == nil or v == null then return default end
  if type(v) ~= "number" or v ~= v or v ~= math.floor(v) then
    return nil, string.format("invalid arguments: %s must be an integer%s", name, unit or "")
  end
  if v < 1 then -- (before the 64-bit check: -1e300 is below 1, not above the maximum)
    return nil, string.format("invalid arguments: %s must be at least 1", name)
  end
  local iv = math.tointeger(v)
  if not iv then -- integral but beyond 64 bits
    return nil, over_max(name, string.format("%g", v), max_name, max)
  end
  v = iv
  if v > max then
    return nil, over_max(name, tostring(v), max_name, max)
  end
  return v
end

---------------------------------------------------------------------------------------------
-- execute_code

local ERROR_TYPES = mb.array({ "syntax", "runtime", "timeout", "memory", "instructions",
                               "cancelled", "result", "busy" })

local EXECUTE_ARGS = { code = true, context_vars = true, timeout_ms = true, memory_mb = true,
                       instruction_limit = true, timeout_seconds = true, rerun_id = true }

-- timeout_seconds: the name other code-execution servers use, accepted as an alias of
-- timeout_ms (a number of seconds, fractions allowed). Returns milliseconds, or nil (not given),
-- or false and an error.
local function timeout_seconds_arg(args, max, max_name)
  local s = args.timeout_seconds
  if s == nil or s == null then return nil end
  if args.timeout_ms ~= nil and args.timeout_ms ~= null then
    return false, "invalid arguments: give timeout_ms or timeout_seconds, not both"
  end
  if type(s) ~= "number" or s ~= s or s <= 0 or s == math.huge then
    return false, "invalid arguments: timeout_seconds must be a positive number of seconds"
  end
  local ms = math.ceil(s * 1000)
  if ms > max then
    return false, over_max("timeout_seconds", string.format("%g", s), max_name,
      max, string.format(" (%g s)", max / 1000))
  end
  return math.tointeger(ms)
end

-- Execution counters, one set per tenant (tenants are the configured tokens' ones, so few):
-- a tenant's get_execution_stats shows its own executions only.
local tenant_stats = {}
local function stats_of(tenant)
  tenant = tenant or "default"
  local stats = tenant_stats[tenant]
  if not stats then
    stats = { executions = 0, succeeded = 0, failed = 0, by_error_type = {},
              total_ms = 0, max_ms = 0, recent = {}, recent_pos = 0,
              requests = {}, requests_pos = 0, request_max_ms = 0, context = M.savings.sums() }
    tenant_stats[tenant] = stats
  end
  return stats
end
M.stats_of = stats_of

-- Time inside the server for one tools/call: from the line being read to the response being
-- handed to the transport (the last 1000 calls of the tenant).
function M.record_request(ms, tenant)
  local stats = stats_of(tenant)
  stats.requests_pos = stats.requests_pos % 1000 + 1
  stats.requests[stats.requests_pos] = ms
  if ms > stats.request_max_ms then stats.request_max_ms = ms end
end

local function record(res, tenant)
  local stats = stats_of(tenant)
  stats.executions = stats.executions + 1
  if res.success then
    stats.succeeded = stats.succeeded + 1
  else
    stats.failed = stats.failed + 1
    local t = res.error_type or "runtime"
    stats.by_error_type[t] = (stats.by_error_type[t] or 0) + 1
  end
  local ms = res.execution_time_ms or 0
  stats.total_ms = stats.total_ms + ms
  if ms > stats.max_ms then stats.max_ms = ms end
  stats.recent_pos = stats.recent_pos % 1000 + 1
  stats.recent[stats.recent_pos] = ms
  local c, out = stats.context, res.bytes_out -- context saved (mcp/savings.lua), inline: cheap
  if out then
    c.bytes_out, c.tokens_out = c.bytes_out + out, c.tokens_out + res.tokens_out
    if res.io_in then M.savings.add_in(c, res) end
  end
end

register({
  name = "execute_code",
  title = "Execute Lua code",
  description = "Run Lua 5.4 code in a fresh sandbox and get back only what it returns. "
    .. "The chunk's return value (or the global `result`) is the result; print() output is "
    .. "captured. Available: string, table, math, utf8, coroutine, os.time/clock/date, json, re "
    .. "(PCRE2), mcp.log/mcp.progress, data helpers (filter_by_field, summarize_list, "
    .. "aggregate_stats, format_output, group_by, sort_by, pluck, count_by, unique, take), the "
    .. "workspace (read_file, write_file, list_files, delete_file, json.read_file/write_file), "
    .. "skills (require(\"skills.name\"), save_skill, load_skill, list_skills) and personal data "
    .. "(pii.scan, tokenize_pii, detokenize_pii" .. (cfg.pii_policy == 1
      and "; personal data in what you return is replaced by tokens). " or "). ")
    .. string.format("Limits per call: timeout_ms (default %d, max %d), memory_mb (default %d, max %d), "
      .. "instruction_limit (default %d, max %d).",
      cfg.default_timeout_ms, cfg.max_timeout_ms, cfg.default_memory_mb, cfg.max_memory_mb,
      cfg.default_instruction_limit, cfg.max_instruction_limit),
  inputSchema = {
    type = "object",
    properties = {
      code = { type = "string", description = "Lua 5.4 source code" },
      rerun_id = { type = "string", description = "Instead of code: run again the code of this "
                   .. "execution (an id from list_executions, or the dev.moonbox/execution_id in an "
                   .. "earlier result's _meta), with this call's context_vars and limits" },
      context_vars = { type = "object", description = "Values that become global variables "
                       .. "(not named like a built-in: json, re, mcp, servers, string, ...)" },
      timeout_ms = { type = "integer", minimum = 1, maximum = cfg.max_timeout_ms,
                     description = "Wall-clock limit in milliseconds" },
      timeout_seconds = { type = "number", exclusiveMinimum = 0, maximum = cfg.max_timeout_ms / 1000,
                          description = "The same limit in seconds (instead of timeout_ms)" },
      memory_mb = { type = "integer", minimum = 1, maximum = cfg.max_memory_mb,
                    description = "Memory limit in MiB" },
      instruction_limit = { type = "integer", minimum = 1, maximum = cfg.max_instruction_limit,
                            description = "Lua VM instruction budget" },
    },
    additionalProperties = false, -- code or rerun_id: the handler says which is missing
  },
  outputSchema = {
    type = "object",
    properties = {
      success = { type = "boolean" },
      result = { description = "The returned value (any JSON value; null when nothing was returned)" },
      output = { type = "string", description = "Captured print() output" },
      note = { type = "string", description = "How the code was taken, when that needs saying "
               .. "(a Markdown fence removed, a call that looks like it has its arguments swapped)" },
      error = { type = "string" },
      error_type = { type = "string", enum = ERROR_TYPES },
      traceback = { type = "string" },
      execution_time_ms = { type = "number" },
      instructions = { type = "integer" },
      memory_peak_bytes = { type = "integer" },
    },
    required = mb.array({ "success", "result", "output", "execution_time_ms", "instructions",
                          "memory_peak_bytes" }),
  },
  annotations = { title = "Execute Lua code", readOnlyHint = false, destructiveHint = false,
                  idempotentHint = false, openWorldHint = false },
}, function(args, request)
  for k in pairs(args) do
    if not EXECUTE_ARGS[k] then
      return tool_error(string.format("invalid arguments: unknown argument %q (expected code, "
        .. "context_vars, timeout_ms or timeout_seconds, memory_mb, instruction_limit, rerun_id)", clip(tostring(k))))
    end
  end
  local code, rerun_of = args.code, nil
  if args.rerun_id ~= nil and args.rerun_id ~= null then -- the journal's code (mcp/journal.lua)
    if code ~= nil then return tool_error("invalid arguments: give code or rerun_id, not both") end
    code, rerun_of = M.journal.code_for(request.tenant, args.rerun_id)
    if not code then return tool_error(rerun_of) end
  end
  if type(code) ~= "string" then
    return tool_error(code == nil and "invalid arguments: code is required (a string of Lua source), "
      .. "or rerun_id (an execution id from list_executions)"
      or "invalid arguments: code must be a string, got " .. (code == null and "null" or type(code)))
  end
  local context = args.context_vars
  local context_json
  if getmetatable(context) == "json.raw" then
    context_json = mb.json_raw_text(context) -- the client's own text (server.lua RAW_CONTEXT)
  elseif context ~= nil and context ~= null then
    if not is_object(context) then
      return tool_error("invalid arguments: context_vars must be an object")
    end
    context_json = mb.json_encode(context) -- a message the fast decoder declined
  end
  -- run as a task (the tasks extension, docs/tasks.md), an execution may take up to
  -- task_max_timeout_ms; interactively up to max_timeout_ms
  local as_task = request.entry and request.entry.task
  local tmax = as_task and cfg.task_max_timeout_ms or cfg.max_timeout_ms
  local tname = as_task and "task_max_timeout_ms" or "max_timeout_ms"
  local timeout_ms, e1 = timeout_seconds_arg(args, tmax, tname)
  if timeout_ms == nil then
    timeout_ms, e1 = int_arg(args, "timeout_ms", cfg.default_timeout_ms, tmax, nil, tname)
  end
  if not timeout_ms then return tool_error(e1) end
  local memory_mb, e2 = int_arg(args, "memory_mb", cfg.default_memory_mb, cfg.max_memory_mb)
  if not memory_mb then return tool_error(e2) end
  local instruction_limit, e3 = int_arg(args, "instruction_limit", cfg.default_instruction_limit,
    cfg.max_instruction_limit)
  if not instruction_limit then return tool_error(e3) end

  local res, err, refusal = request:execute({
    code = code, context_json = context_json, timeout_ms = timeout_ms,
    memory_bytes = memory_mb * 1048576, instruction_limit = instruction_limit,
    tenant = request.tenant, -- (set by execute too: here the table is made with room for it)
    rerun_of = rerun_of,
  })
  if not res and not err then return nil end -- cancelled: no response
  res = res or refusal
  record(res or { success = false, error_type = "busy" }, request.tenant)
  return M.shaped_result(res, err)
end)

---------------------------------------------------------------------------------------------
-- get_execution_stats

local function percentile(sorted, p)
  if #sorted == 0 then return 0 end
  local i = math.max(1, math.ceil(p * #sorted))
  return sorted[i]
end

M.record = record

register({
  name = "get_execution_stats",
  title = "Execution statistics",
  description = "Your counters on this moonbox server: executions by outcome, timing percentiles "
    .. "of the last 1000 executions (execution_ms) and tools/call requests inside the server "
    .. "(request_ms: line read to response written), the configured limits, workspace usage, "
    .. "skills, the PII vault, the recorded execution history, uptime and version; on stdio (or "
    .. "HTTP without tokens) also the worker pool, upstream servers and the tool catalog.",
  inputSchema = { type = "object", additionalProperties = false },
  annotations = { title = "Execution statistics", readOnlyHint = true, openWorldHint = false },
}, function(args, request)
  if next(args) ~= nil then
    return tool_error("invalid arguments: get_execution_stats takes no arguments")
  end
  local tenant = request and request.tenant or "default"
  local stats = stats_of(tenant)
  local sorted, req = {}, {}
  for i = 1, #stats.recent do sorted[i] = stats.recent[i] end
  for i = 1, #stats.requests do req[i] = stats.requests[i] end
  table.sort(sorted)
  table.sort(req)
  local by_type = {}
  for k, v in pairs(stats.by_error_type) do by_type[k] = v end
  local sc = {
    executions = stats.executions,
    succeeded = stats.succeeded,
    failed = stats.failed,
    failed_by_type = by_type,
    execution_ms = {
      mean = stats.executions > 0 and stats.total_ms / stats.executions or 0,
      p50 = percentile(sorted, 0.5), p95 = percentile(sorted, 0.95), max = stats.max_ms,
    },
    request_ms = { p50 = percentile(req, 0.5), p95 = percentile(req, 0.95), max = stats.request_max_ms },
    limits = {
      default_timeout_ms = cfg.default_timeout_ms, max_timeout_ms = cfg.max_timeout_ms,
      default_memory_mb = cfg.default_memory_mb, max_memory_mb = cfg.max_memory_mb,
      default_instruction_limit = cfg.default_instruction_limit,
      max_instruction_limit = cfg.max_instruction_limit, max_output_bytes = cfg.max_output_bytes,
      max_result_bytes = cfg.max_result_bytes, max_code_bytes = cfg.max_code_bytes,
      max_notifications = cfg.max_notifications, max_host_calls = cfg.max_host_calls,
      max_skill_bytes = cfg.max_skill_bytes, workspace_max_file_bytes = cfg.workspace_max_file_bytes,
      workspace_max_bytes = cfg.workspace_max_bytes, workspace_max_files = cfg.workspace_max_files,
      history_max_rows = cfg.history_max_rows, workers = cfg.workers, max_queue = cfg.max_queue,
      upstream_timeout_ms = cfg.upstream_timeout_ms, upstream_max_calls = cfg.upstream_max_calls,
      upstream_max_parallel = cfg.upstream_max_parallel,
    },
    version = mb.version,
    uptime_s = mb.pool_stats().uptime_s,
  }
  for name, provider in pairs(M.stats_providers) do sc[name] = provider(tenant) end
  -- the pool, the upstreams and the catalog are shared: what they count includes the other
  -- tenants' work, so a token's tenant does not see them (they are in /metrics)
  -- server-wide sections: the one tenant of stdio / no tokens (also a static token's tenant
  -- "default"), or an OAuth token with the admin right (docs/auth.md)
  if require("mcp.auth").is_admin(request and request.rights, tenant) then
    sc.pool = mb.pool_stats()
    if mb.backlog then -- bytes queued for clients that have not read them (max_backlog_bytes)
      local b = mb.backlog()
      sc.backlog = { bytes = b.bytes, peak_bytes = b.peak, refused = b.refused,
                     max_bytes = cfg.max_backlog_bytes, max_tenant_bytes = cfg.max_backlog_tenant_bytes }
    end
    for name, provider in pairs(M.server_stats_providers) do sc[name] = provider() end
  end
  return structured_result(sc)
end)

M.pii = require("mcp.pii")
M.pii.init(M)
require("mcp.skill_tools").init(M)
require("mcp.workspace_tools").init(M)
require("mcp.skill_publish").init(M)
require("mcp.catalog").init(M)
require("mcp.workflows").init(M)
require("mcp.upstream").init(M)
require("mcp.tool_stubs").init(M)
require("mcp.journal").init(M)
require("mcp.audit").init(M)

return M
