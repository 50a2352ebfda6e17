-- mcp/journal.lua - the execution journal as a tool: list_executions lists and searches a
-- tenant's recent executions (by code text, outcome, upstream tool called, time) and, given an
-- id, fetches one; execute_code's rerun_id finds its code here (code_for). The rows are the
-- execution log's (mcp/history.lua, written by src/history.c); this file shapes arguments and
-- answers. One tool with an optional id costs the model less context in tools/list than two.
-- Every lookup is scoped to the caller's tenant, and an id of another tenant gets the same
-- answer as an id that never existed. docs/journal.md says what is kept and for how long.

local mb = mb
local null = mb.null
local cfg = mb.config
local history = require("mcp.history")
local clip = require("mcp.catalog_text").clip

local M = {}

local DEFAULT_LIMIT = 20
local PREVIEW = 100 -- characters of code shown per listed execution
local ID_PATTERN = "^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$"
local OUTCOMES = { ok = true, failed = true, syntax = true, runtime = true, timeout = true, memory = true,
                   instructions = true, cancelled = true, result = true, busy = true }

-- Bytes that are not UTF-8 (print output may hold any) become U+FFFD, so the answer encodes.
local utf8_text = history.utf8_text

local function iso(ms)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", ms // 1000)
end

-- Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
local function days(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = y // 400
  local yoe = y - era * 400
  local doy = (153 * (m > 2 and m - 3 or m + 9) + 2) // 5 + d - 1
  return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
end

-- A time argument: ms since the epoch, or "YYYY-MM-DD[THH:MM[:SS[.fff]]][Z|+00:00]" in UTC.
local function time_arg(args, name)
  local v = args[name]
  if v == nil or v == null then return nil end
  if math.type(v) == "integer" then return v end
  if type(v) == "string" and #v <= 40 then
    local y, mo, d, rest = v:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)(.*)$")
    local h, mi, s = 0, 0, 0
    if rest and rest ~= "" and rest ~= "Z" then
      local tail
      h, mi, s, tail = rest:match("^[T ](%d%d):(%d%d):?(%d?%d?)(.*)$")
      if s == "" then s = 0 end
      if not (tail and (tail:find("^%.%d+Z?$") or tail:find("^%.?%d*%+00:?00$") or tail == "" or tail == "Z")) then
        h = nil
      end
    end
    y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
    if y and h and mo >= 1 and mo <= 12 and d >= 1 and d <= 31 and h < 24 and mi < 60 and s < 61 then
      return ((days(y, mo, d) * 24 + h) * 60 + mi) * 60000 + s * 1000
    end
  end
  return nil, string.format("invalid arguments: %s must be milliseconds since the epoch or a UTC time "
    .. "such as \"2026-11-26T01:30:00Z\"", name)
end

-- A text filter: a string no longer than journal_max_code_bytes (longer cannot match anything kept)
-- nor MAX_SEARCH_BYTES. The match (LIKE on SQLite, instr() before) compares the whole text at every position of the code,
-- on the loop thread: a 32 KiB query against a tenant's 1000 rows of 64 KiB code held the server
-- for about 12 s; at 256 bytes the worst case is a few times the scan itself.
local MAX_SEARCH_BYTES = 256
local function text_arg(args, name)
  local v = args[name]
  if v == nil or v == null then return nil end
  if type(v) ~= "string" then return nil, string.format("invalid arguments: %s must be a string", name) end
  if #v > cfg.journal_max_code_bytes then
    return nil, string.format("invalid arguments: %s is %d bytes, more than journal_max_code_bytes=%d "
      .. "(the most of an execution's code the journal keeps)", name, #v, cfg.journal_max_code_bytes)
  end
  if #v > MAX_SEARCH_BYTES then
    return nil, string.format("invalid arguments: %s is %d bytes, more than the %d a search text may have; "
      .. "search for a shorter part of it", name, #v, MAX_SEARCH_BYTES)
  end
  return v ~= "" and v or nil
end

-- An execution id argument: nil, message when malformed (never echoed unclipped).
M.time_arg = time_arg

function M.check_id(v, name)
  if type(v) ~= "string" or not v:find(ID_PATTERN) then
    return nil, string.format("invalid arguments: %s must be an execution id from list_executions "
      .. "(16 hex digits), got %s", name, type(v) == "string" and string.format("%q", clip(v, 40)) or type(v))
  end
  return v:lower()
end

local function not_found(id)
  -- the writer is down: a row of an id just given out may still wait in its queue
  local _, _, queued, why = history.flush()
  if queued then
    return string.format("no execution %s in your journal yet: the journal cannot be written just now (%s); "
      .. "%d rows wait and are written when it can, so try again shortly", id, clip(tostring(why), 300), queued)
  end
  return string.format("no execution %s in your journal (list_executions lists the ones kept: the newest "
    .. "journal_max_rows=%d, none older than journal_max_age_s=%d)", id, cfg.journal_max_rows,
    cfg.journal_max_age_s)
end

-- execute_code's rerun_id: the code of the tenant's execution id, or nil, message.
function M.code_for(tenant, v)
  local id, err = M.check_id(v, "rerun_id")
  if not id then return nil, err end
  if cfg.history_max_rows == 0 then return nil, "the journal is off (history_max_rows=0): nothing can be rerun" end
  local row = history.get(tenant, id)
  if not row then return nil, not_found(id) end
  if row.tool ~= "execute_code" then -- its code is that tool's wrapper, fed by the tool's arguments
    return nil, string.format("execution %s ran the tool %s, not execute_code: call %s again instead", id,
      clip(tostring(row.tool), 100), clip(tostring(row.tool), 100))
  end
  if row.code == nil and row.code_bytes == nil then -- a row older than the journal (migration 5)
    return nil, string.format("execution %s was recorded before the journal kept code: it cannot be rerun", id)
  end
  if row.code == nil then
    return nil, string.format("execution %s's code was not kept: %d bytes, more than journal_max_code_bytes=%d",
      id, row.code_bytes or 0, cfg.journal_max_code_bytes)
  end
  return row.code, id
end

local function lines(s)
  if not s then return mb.array({}) end
  local out = {}
  for l in s:gmatch("[^\n]+") do out[#out + 1] = l end
  return mb.array(out)
end

-- One execution in full: what it ran and what the model saw of its answer.
local function detail(r)
  local out = {
    id = r.ref, started_at = iso(r.started_at), duration_ms = r.duration_ms, outcome = r.outcome,
    tool = r.tool, instructions = r.instructions, memory_peak_bytes = r.memory_peak,
    code_bytes = r.code_bytes, code_kept = r.code ~= nil, code = utf8_text(r.code),
    code_hash = r.code_hash, context_vars_bytes = r.context_bytes, error = utf8_text(r.error),
    output = utf8_text(r.output_head), output_bytes = r.output_head and r.output_bytes or nil,
    tools_called = r.tools_called and lines(r.tools_called) or nil, rerun_of = r.rerun_of,
    principal = r.principal,
  }
  if out.code_bytes and not out.code_kept then out.code_not_kept = string.format(
    "more than journal_max_code_bytes=%d", cfg.journal_max_code_bytes) end
  local head = r.result_head
  if head then
    out.result_bytes = r.result_bytes
    if (r.result_bytes or #head) <= #head then
      local v = mb.json_decode(head)
      if v ~= nil then out.result = v else out.result_json = utf8_text(head) end
    else
      out.result_json_head = utf8_text(head) -- cut at journal_head_bytes: JSON text, not a value
    end
  end
  if out.output and r.output_bytes and r.output_bytes > #r.output_head then out.output_truncated = true end
  return out
end

local function summary(r)
  local code = r.code and utf8_text(r.code):gsub("%s+", " ")
  if code and utf8.len(code) > PREVIEW then code = code:sub(1, utf8.offset(code, PREVIEW + 1) - 1) .. "..." end
  return { id = r.ref, started_at = iso(r.started_at), ms = r.duration_ms, outcome = r.outcome,
           code = code or (r.code_bytes and string.format("(%d bytes, not kept)", r.code_bytes)
             or "(recorded before the journal kept code)"),
           tool = r.tool ~= "execute_code" and r.tool or nil, principal = r.principal,
           tools_called = r.tools_called and lines(r.tools_called) or nil }
end

local ARGS = { id = true, query = true, outcome = true, tool = true, since = true, ["until"] = true,
               limit = true, before = true, principal = true }

function M.init(tools)
  tools.journal = M
  tools.register({
    name = "list_executions",
    title = "Execution journal",
    description = "Your recent execute_code runs, newest first, to pick up where you left off: "
      .. "id, time, outcome, the start of the code. Filters: query (text in the code), outcome "
      .. "(ok, failed or an error type), tool (an upstream tool it called, e.g. \"server.tool\"), "
      .. "since/until (UTC time or ms since the epoch), before (an id: only older ones), principal "
      .. "(who ran it, when the server signs people in with OAuth), limit. "
      .. "A query searches the newest executions' code up to a bound; search_cut in the answer says "
      .. "where it stopped and the before to go on with. Give id to get one execution in "
      .. "full: code, error, the start of its result and output as you saw them, tools called. "
      .. "Rerun one with execute_code {rerun_id = id, context_vars = ...}.",
    inputSchema = {
      type = "object",
      properties = {
        id = { type = "string", description = "An execution id: return that execution in full" },
        query = { type = "string", maxLength = MAX_SEARCH_BYTES, description = "Text the code contains (ASCII case ignored)" },
        outcome = { type = "string", description = "ok, failed, or an error type (runtime, timeout, ...)" },
        tool = { type = "string", maxLength = MAX_SEARCH_BYTES, description = "Text of an upstream tool it called (server.tool)" },
        since = { type = mb.array({ "string", "integer" }), description = "Started at or after (UTC time or epoch ms)" },
        ["until"] = { type = mb.array({ "string", "integer" }), description = "Started before (UTC time or epoch ms)" },
        principal = { type = "string", maxLength = MAX_SEARCH_BYTES, description = "Who ran it: the signed-in principal (an OAuth token's sub), exactly" },
        before = { type = "string", description = "An execution id: only executions recorded before it (to page on, or to go on with a search that was cut)" },
        limit = { type = "integer", minimum = 1, maximum = cfg.journal_max_rows,
                  description = "At most this many (default " .. DEFAULT_LIMIT .. ")" },
      },
      additionalProperties = false,
    },
    annotations = { title = "Execution journal", readOnlyHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = tools.check_args(args, ARGS, "list_executions")
    if bad then return tools.tool_error(bad) end
    local tenant = request and request.tenant or "default"
    if cfg.history_max_rows == 0 then
      return tools.tool_error("the journal is off on this server (history_max_rows=0)")
    end
    if args.id ~= nil and args.id ~= null then
      local id, err = M.check_id(args.id, "id")
      if not id then return tools.tool_error(err) end
      local row = history.get(tenant, id)
      if not row then return tools.tool_error(not_found(id)) end
      return tools.structured_result(detail(row))
    end
    local f, err = {}, nil
    f.query, err = text_arg(args, "query")
    if err then return tools.tool_error(err) end
    f.tool, err = text_arg(args, "tool")
    if err then return tools.tool_error(err) end
    f.principal, err = text_arg(args, "principal")
    if err then return tools.tool_error(err) end
    local o = args.outcome
    if o ~= nil and o ~= null then
      if type(o) ~= "string" or not OUTCOMES[o] then
        return tools.tool_error("invalid arguments: outcome must be ok, failed, syntax, runtime, timeout, "
          .. "memory, instructions, cancelled, result or busy")
      end
      f.outcome = o
    end
    f.since_ms, err = time_arg(args, "since")
    if err then return tools.tool_error(err) end
    f.until_ms, err = time_arg(args, "until")
    if err then return tools.tool_error(err) end
    if args.before ~= nil and args.before ~= null then
      local id, berr = M.check_id(args.before, "before")
      if not id then return tools.tool_error(berr) end
      f.before_id = history.id_of(tenant, id)
      if not f.before_id then return tools.tool_error(not_found(id)) end
    end
    local limit = args.limit
    if limit == nil or limit == null then
      limit = math.min(DEFAULT_LIMIT, cfg.journal_max_rows)
    elseif math.type(limit) ~= "integer" or limit < 1 or limit > cfg.journal_max_rows then
      return tools.tool_error(string.format("invalid arguments: limit must be an integer from 1 to "
        .. "journal_max_rows=%d", cfg.journal_max_rows))
    end
    f.limit = limit
    local rows, more, cut = history.list(tenant, f)
    local out = {}
    for i, r in ipairs(rows) do out[i] = summary(r) end
    local answer = { executions = mb.array(out), more = more }
    if cut then
      answer.search_cut = {
        searched_executions = cut.rows, searched_code_bytes = cut.bytes, before = cut.before,
        journal_search_bytes = cfg.journal_search_bytes,
        note = string.format("only the newest %d executions' code was searched (journal_search_bytes=%d); "
          .. "older ones may match: call again with before = %q", cut.rows, cfg.journal_search_bytes, cut.before),
      }
    end
    return tools.structured_result(answer)
  end)
end

return M
