-- mcp/audit.lua - the audit trail: append-only records of who did what, chained by keyed hashes.
--
-- A record says who (tenant, principal - an OAuth token's sub -, client - the session's
-- clientInfo), when, what kind (below) and about what (subject: an execution id, "server.tool",
-- a skill's name), with a JSON detail. Records are queued here and written once every
-- audit_flush_ms in one transaction (and at shutdown, and before a read), so the request path
-- pays a table insert. Each written record's prev is the hash of the record before it in the
-- store and its hash is mb.audit_hash(prev, fields...): a keyed BLAKE2b (src/audit.c, key derived
-- from pii.key), so an edited or deleted record breaks the chain that `moonbox --verify-audit`
-- walks. Writers of one store take turns for the chain's tail: SQLite's BEGIN IMMEDIATE, an
-- advisory transaction lock on PostgreSQL (replicas).
--
-- Kinds: execution (execute_code, a published skill or workflow run as a tool), upstream_call
-- (a call of a tool not marked read-only, with how it was allowed), approval (a person's answer
-- to allowWrites "ask"), skill_save / skill_delete / skill_restore (through the tools or from
-- code; a hand edit of a file under skills_dir is a new version in skill_history, not an audit
-- record), refused (a scope or an upstream policy said no), sign_in_failed (a token
-- refused; at most audit_sign_in_records a minute, the rest counted in one record a flush), dropped
-- (records lost because the queue was full). Nothing of a token is ever recorded.
-- docs/audit.md.

local auth = require("mcp.auth")
local mb = mb
local db = mb.db
local cfg = mb.config

local M = {}

local PG = db.dialect == "postgres"
local LOCK = 0x6d62617564697401 -- "mbaudit" 1: the chain's tail, one writer at a time (PostgreSQL)
local DETAIL_MAX = 4096         -- bytes of a record's detail JSON; longer ones are cut (said so)

local queue, dropped, timer = {}, 0, nil
local signin = { minute = 0, n = 0, over = 0 }
local last_trim = 0

local function text(v, max)
  if v == nil or v == mb.null then return nil end
  v = tostring(v)
  if max and #v > max then v = v:sub(1, max) end
  return v
end

local function write(batch)
  db.tx(function()
    if PG then db.row("SELECT pg_advisory_xact_lock(?) AS l", LOCK) end
    local last = db.row("SELECT hash FROM audit ORDER BY id DESC LIMIT 1")
    local prev = last and last.hash or nil
    for _, r in ipairs(batch) do
      local h = mb.audit_hash(prev, tostring(r.at), r.tenant, r.principal, r.client, r.kind, r.subject, r.detail)
      db.run("INSERT INTO audit (at, tenant, principal, client, kind, subject, detail, prev, hash)"
        .. " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", r.at, r.tenant, r.principal, r.client, r.kind,
        r.subject, r.detail, prev, h)
      prev = h
    end
  end)
end

-- Drops records older than audit_max_age_s, at most once a minute (the chain then starts at the
-- oldest record kept: docs/audit.md).
local function trim()
  if cfg.audit_max_age_s == 0 then return end
  local now = mb.wall_ms()
  if now - last_trim < 60000 then return end
  last_trim = now
  db.run("DELETE FROM audit WHERE at < ?", now - cfg.audit_max_age_s * 1000)
end

-- On PostgreSQL a flush's statements yield, so another flush (a read's, the timer's) can start
-- while one is writing: it waits for that one (a read must see what was queued before it),
-- then writes what came since.
local flushing, flush_waiters = false, {}

local function end_flush()
  flushing = false
  local ws = flush_waiters
  flush_waiters = {}
  for _, co in ipairs(ws) do
    local ok, err = coroutine.resume(co)
    if not ok then mb.log("error", "audit: " .. tostring(err)) end
  end
end

--- Writes what is queued. Returns true, or nil and the error (the records stay queued).
function M.flush()
  if flushing then
    local co, main = coroutine.running()
    if main then return nil, "audit: another flush is writing" end -- shutdown: cannot wait
    flush_waiters[#flush_waiters + 1] = co
    coroutine.yield() -- resumed by end_flush
  end
  if signin.over > 0 then -- the refused tokens past audit_sign_in_records since the last flush
    M.record("sign_in_failed", { tenant = "(none)" }, nil, { more = signin.over,
      why = string.format("more refused tokens in a minute than audit_sign_in_records=%d",
        cfg.audit_sign_in_records) })
    signin.over = 0
  end
  if timer then timer:close(); timer = nil end
  if dropped > 0 then
    queue[#queue + 1] = { at = mb.wall_ms(), tenant = "(server)", kind = "dropped",
      detail = mb.json_encode({ records = dropped, why = string.format(
        "the audit queue was full (audit_max_queued=%d)", cfg.audit_max_queued) }) }
    dropped = 0
  end
  if #queue == 0 then return true end
  local batch = queue
  queue = {}
  flushing = true
  local ok, err = pcall(write, batch)
  if not ok then
    -- kept for the next flush (a store that is down comes back), within the queue's bound
    for i = #batch, 1, -1 do
      if #queue < cfg.audit_max_queued then table.insert(queue, 1, batch[i]) else dropped = dropped + 1 end
    end
    mb.log("warning", "audit: the records could not be written (kept for the next try): " .. tostring(err))
    M.schedule()
    end_flush()
    return nil, err
  end
  pcall(trim)
  end_flush()
  return true
end

function M.schedule()
  if timer then return end
  timer = mb.timer(cfg.audit_flush_ms, function()
    timer = nil
    M.flush()
  end)
end

--- Queues one record. who: a request (tenant, principal, sess.client_info) or a table with
--- tenant; detail: a table (JSON-encoded, cut at DETAIL_MAX bytes) or nil.
function M.record(kind, who, subject, detail)
  if cfg.audit_max_queued == 0 then return end
  if #queue >= cfg.audit_max_queued then dropped = dropped + 1; return end
  local client
  local info = who and who.sess and who.sess.client_info
  if type(info) == "table" and type(info.name) == "string" then
    client = info.name .. (type(info.version) == "string" and ("/" .. info.version) or "")
  elseif who and type(who.client) == "string" then
    client = who.client
  end
  local d = detail and mb.json_encode(detail) or nil
  if d and #d > DETAIL_MAX then
    d = mb.json_encode({ cut = true, bytes = #d, head = d:sub(1, DETAIL_MAX - 100) })
  end
  queue[#queue + 1] = { at = mb.wall_ms(), tenant = text(who and who.tenant, 64) or "default",
    principal = text(who and who.principal, 256), client = text(client, 256), kind = kind,
    subject = text(subject, 512), detail = d }
  M.schedule()
end

--- A refused token (src/http.c): recorded, at most audit_sign_in_records a minute.
function M.sign_in_failed(why, peer)
  local minute = mb.wall_ms() // 60000
  if minute ~= signin.minute then signin.minute, signin.n = minute, 0 end
  signin.n = signin.n + 1
  if signin.n > cfg.audit_sign_in_records then -- counted, written as one record at the next flush
    signin.over = signin.over + 1
    M.schedule()
    return
  end
  M.record("sign_in_failed", { tenant = "(none)" }, nil, { why = why, peer = peer ~= "" and peer or nil })
end

-- The records a caller may read: its tenant's, or (admin) any tenant's or all.
local KIND_LIST = { "execution", "upstream_call", "approval", "skill_save", "skill_delete",
  "skill_restore", "refused", "sign_in_failed", "dropped" }
local KINDS = {}
for _, k in ipairs(KIND_LIST) do KINDS[k] = true end

function M.list(f)
  M.flush()
  local where, args = {}, {}
  local function add(cond, v) where[#where + 1] = cond; args[#args + 1] = v end
  if f.tenant then add("tenant = ?", f.tenant) end
  if f.kind then add("kind = ?", f.kind) end
  if f.principal then add("principal = ?", f.principal) end
  if f.since_ms then add("at >= ?", f.since_ms) end
  if f.after_id then add("id > ?", f.after_id) end
  args[#args + 1] = f.limit + 1
  local rows = db.query("SELECT id, at, tenant, principal, client, kind, subject, detail, prev, hash FROM audit"
    .. (#where > 0 and (" WHERE " .. table.concat(where, " AND ")) or "") .. " ORDER BY id LIMIT ?",
    table.unpack(args, 1, #args))
  local more = #rows > f.limit
  if more then rows[#rows] = nil end
  return rows, more
end

local function iso(ms)
  return os.date("!%Y-%m-%dT%H:%M:%S", ms // 1000) .. string.format(".%03dZ", ms % 1000)
end

function M.init(tools)
  tools.audit = M
  tools.register({
    name = "audit_log",
    title = "Audit trail",
    description = "Who did what, oldest first: executions, upstream calls that may write and "
      .. "their approvals, skill changes, refusals, failed sign-ins, each with "
      .. "tenant, principal (who signed in), client and time, chained by hashes "
      .. "(moonbox --verify-audit checks the chain). Your tenant's records; an admin may give "
      .. "tenant, or \"*\" for every tenant and the server's own records. Filters: kind, "
      .. "principal, since (UTC time or ms since the epoch), after (a record id: only later "
      .. "ones), limit. format \"jsonl\" gives the records as JSON lines (an export).",
    inputSchema = {
      type = "object",
      properties = {
        tenant = { type = "string", maxLength = 64, description = "Admin only: a tenant, or \"*\" for all" },
        kind = { type = "string", enum = mb.array(KIND_LIST), description = "What kind of record" },
        principal = { type = "string", maxLength = 256, description = "Who: a principal (an OAuth token's sub)" },
        since = { type = mb.array({ "string", "integer" }), description = "At or after (UTC time or epoch ms)" },
        after = { type = "integer", minimum = 0, description = "Only records with a larger id (to page on)" },
        limit = { type = "integer", minimum = 1, maximum = 1000, description = "At most this many (default 100)" },
        format = { type = "string", enum = mb.array({ "json", "jsonl" }), description = "json (default) or jsonl" },
      },
      additionalProperties = false,
    },
    annotations = { title = "Audit trail", readOnlyHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = tools.check_args(args, { tenant = true, kind = true, principal = true, since = true,
      after = true, limit = true, format = true }, "audit_log")
    if bad then return tools.tool_error(bad) end
    local f = { limit = 100 }
    local mine = request and request.tenant or "default"
    local t = args.tenant
    if t ~= nil and t ~= mb.null then
      if type(t) ~= "string" then return tools.tool_error("invalid arguments: tenant must be a string") end
      if t ~= mine and not auth.is_admin(request and request.rights, mine) then
        return tools.tool_error("audit_log: only an admin (the moonbox:admin scope) reads another tenant's records")
      end
      if t ~= "*" then f.tenant = t end
    else
      f.tenant = mine
    end
    local k = args.kind
    if k ~= nil and k ~= mb.null then
      if type(k) ~= "string" or not KINDS[k] then
        return tools.tool_error("invalid arguments: kind must be one of " .. table.concat(KIND_LIST, ", "))
      end
      f.kind = k
    end
    if args.principal ~= nil and args.principal ~= mb.null then
      if type(args.principal) ~= "string" then return tools.tool_error("invalid arguments: principal must be a string") end
      f.principal = args.principal
    end
    local err
    f.since_ms, err = tools.journal.time_arg(args, "since")
    if err then return tools.tool_error(err) end
    if args.after ~= nil and args.after ~= mb.null then
      if math.type(args.after) ~= "integer" or args.after < 0 then
        return tools.tool_error("invalid arguments: after must be a record id (a non-negative integer)")
      end
      f.after_id = args.after
    end
    if args.limit ~= nil and args.limit ~= mb.null then
      if math.type(args.limit) ~= "integer" or args.limit < 1 or args.limit > 1000 then
        return tools.tool_error("invalid arguments: limit must be an integer from 1 to 1000")
      end
      f.limit = args.limit
    end
    local ok, rows, more = pcall(M.list, f)
    if not ok then return tools.tool_error("audit_log: the store could not be read: " .. tostring(rows)) end
    local out = {}
    for i, r in ipairs(rows) do
      out[i] = { id = r.id, at = iso(r.at), tenant = r.tenant, principal = r.principal, client = r.client,
        kind = r.kind, subject = r.subject, detail = r.detail and mb.json_decode(r.detail) or nil,
        prev = r.prev, hash = r.hash }
    end
    if args.format == "jsonl" then
      local lines = {}
      for i, r in ipairs(out) do lines[i] = mb.json_encode(r) end
      return { content = { { type = "text", text = table.concat(lines, "\n") .. (#lines > 0 and "\n" or "") } },
               isError = false }
    end
    return tools.structured_result({ records = mb.array(out), more = more,
      next_after = more and out[#out].id or nil })
  end)
end

return M
