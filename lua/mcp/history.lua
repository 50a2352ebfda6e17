-- mcp/history.lua - the execution log and journal: one row per execution in the store, bounded.
--
-- Rows go to the history writer thread (src/history.c), which commits them once a second on its
-- own connection, gives each its random 16-hex-digit ref, and keeps the newest journal_max_rows
-- of each tenant (history_max_rows in all, nothing older than journal_max_age_s): the request
-- path pays a buffer append, never an INSERT or an fsync. Up to a second of history can be lost
-- if the process is killed (skills and other acknowledged writes are committed before their
-- response). The journal's fields (docs/journal.md) are what the model saw: the code it sent
-- (up to journal_max_code_bytes), the first journal_head_bytes of the result, output and error
-- after pii_policy tokenized them, the upstream tools called. Every read here is by tenant, and
-- flushes first, so an execution answered a moment ago is found.

local mb = mb
local db = mb.db
local cfg = mb.config

local M = {}

function M.flush()
  return mb.history_flush()
end

-- The upstream tools an execution called ("server.tool", in order of first call), as lines,
-- cut at journal_head_bytes like the other texts.
local function tools_text(called)
  if not called or #called == 0 then return nil end
  local out, n = {}, 0
  for i = 1, #called do
    n = n + #called[i] + 1
    if n - 1 > cfg.journal_head_bytes then break end
    out[i] = called[i]
  end
  return #out > 0 and table.concat(out, "\n") or nil
end

-- add(tenant, started_at_ms, spec, res, called, principal): spec is what was submitted (tool, code,
-- context_json, rerun_of), res the result (its code_hash was computed on the worker thread, its
-- heads cut there: src/host.c push_heads), called the upstream tools of the execution, principal
-- who ran it (an OAuth token's sub; nil for stdio and static tokens).
-- Returns the row's id (what list_executions and rerun_id know it by), or nil when history is
-- off or the row was dropped.
function M.add(tenant, started, spec, res, called, principal)
  local ctx = spec.context_json
  return mb.history_add(tenant or "default", started, res.execution_time_ms or 0,
    res.success and "ok" or (res.error_type or "runtime"), res.instructions or 0,
    res.memory_peak_bytes or 0, res.code_hash, spec.tool or "execute_code",
    spec.code, ctx and #ctx or 0, res.result_head, res.result_bytes, res.output_head,
    res.output_bytes, res.error_head, tools_text(called), spec.rerun_of, principal)
end

-- Summary for get_execution_stats: rows kept and outcomes over them.
function M.summary(tenant)
  local dropped, failed = M.flush()
  local total = db.row("SELECT count(*) AS n, min(started_at) AS since FROM executions WHERE tenant = ?",
    tenant or "default")
  local by = {}
  for _, r in ipairs(db.query("SELECT outcome, count(*) AS n FROM executions WHERE tenant = ? GROUP BY outcome",
      tenant or "default")) do
    by[r.outcome] = r.n
  end
  return { recorded = total and total.n or 0, since_ms = total and total.since, by_outcome = by,
           max_rows = cfg.history_max_rows, tenant_max_rows = cfg.journal_max_rows,
           max_age_s = cfg.journal_max_age_s, dropped = dropped, write_failures = failed }
end

-- The newest rows of tenant matching f (all optional): query (text in the code, ASCII case
-- folded), outcome ("ok", "failed" or an error type), tool (text in the tools called), principal
-- (who ran it, exactly), since_ms,
-- until_ms, before_id (rows recorded before that one); at most f.limit rows. Every value is a
-- bound parameter and matched with instr(), so `%`, `_`, quotes and FTS syntax in them are plain
-- text. Returns rows, more (bool), cut: with a query, the code searched is bounded by
-- journal_search_bytes (newest first); when older rows were left unsearched, cut = {rows,
-- bytes, before} says how much was searched and the ref to continue from (before = the oldest
-- row searched). The search runs in the statement, on the loop thread with SQLite: unbounded,
-- 1,000 rows of 64 KiB code cost about 0.7 s per call there and a ping behind five searches
-- waited 4.3 s (docs/journal.md, "Search").
-- s with every byte that is not part of valid UTF-8 replaced by U+FFFD (nil stays nil).
function M.utf8_text(s)
  if s == nil or utf8.len(s) then return s end
  local out, i = {}, 1
  while i <= #s do
    local ok, bad = utf8.len(s, i)
    if ok then out[#out + 1] = s:sub(i) break end
    out[#out + 1] = s:sub(i, bad - 1)
    out[#out + 1] = "\u{FFFD}"
    i = bad + 1
  end
  return table.concat(out)
end

-- PostgreSQL text holds valid UTF-8 without NUL bytes: the history writer stores such bytes as
-- U+FFFD there, so search text and ids are made the same way (as given on SQLite).
local PG = db.dialect == "postgres"
local function as_text(s)
  if not PG then return s end
  return (M.utf8_text(s):gsub("%z", "\u{FFFD}"))
end

local LIST_COLS = "ref, started_at, duration_ms, outcome, tool, substr(code, 1, 200) AS code,"
  .. " code_bytes, tools_called, principal"
function M.list(tenant, f)
  M.flush()
  local where, args = { "tenant = ?" }, { tenant or "default" }
  local function add(cond, v) where[#where + 1] = cond; if v ~= nil then args[#args + 1] = v end end
  if f.outcome == "failed" then add("outcome <> 'ok'")
  elseif f.outcome then add("outcome = ?", as_text(f.outcome)) end
  if f.tool then add("instr(tools_called, ?) > 0", as_text(f.tool)) end
  if f.principal then add("principal = ?", as_text(f.principal)) end
  if f.since_ms then add("started_at >= ?", f.since_ms) end
  if f.until_ms then add("started_at < ?", f.until_ms) end
  if f.before_id then add("id < ?", f.before_id) end
  local cut
  if f.query then
    -- the first row (newest first) the budget leaves out, and what comes before it: over the
    -- tenant's rows (before_id too, not the other filters), from the index executions_code_bytes
    local b_where, b_args = "tenant = ?", { tenant or "default" }
    if f.before_id then b_where, b_args[2] = b_where .. " AND id < ?", f.before_id end
    b_args[#b_args + 1] = cfg.journal_search_bytes
    cut = db.row("SELECT id, before_id, before_rows, before_bytes FROM (SELECT id, "
      .. "LAG(id) OVER w AS before_id, CAST(COUNT(*) OVER w - 1 AS BIGINT) AS before_rows, "
      .. "CAST(SUM(COALESCE(code_bytes, 0)) OVER w - COALESCE(code_bytes, 0) AS BIGINT) AS before_bytes "
      .. "FROM executions WHERE " .. b_where .. " WINDOW w AS (ORDER BY id DESC)) AS s "
      .. "WHERE before_bytes >= ? ORDER BY id DESC LIMIT 1", table.unpack(b_args, 1, #b_args))
    if cut then
      add("id > ?", cut.id)
      cut.before = db.row("SELECT ref FROM executions WHERE id = ?", cut.before_id).ref
    end
    if PG then
      add("instr(lower(code), lower(?)) > 0", as_text(f.query))
    elseif f.query:find("%z") then
      add("0") -- no code holds NUL (JSON strings cannot bring it); LIKE would stop at it
    else
      -- SQLite's LIKE folds ASCII case as lower() does and finds the text ~8x faster than
      -- instr(lower(code), ...), which copies every code to lower it
      add("code LIKE ? ESCAPE '\\'", "%" .. f.query:gsub("[\\%%_]", "\\%0") .. "%")
    end
  end
  args[#args + 1] = f.limit + 1
  local rows = db.query("SELECT " .. LIST_COLS .. " FROM executions WHERE " .. table.concat(where, " AND ")
    .. " ORDER BY id DESC LIMIT ?", table.unpack(args, 1, #args))
  local more = #rows > f.limit
  if more then rows[#rows] = nil end
  -- a search that found more than limit stopped before the budget's end: nothing was left out
  if cut and not more then
    return rows, false, { rows = cut.before_rows, bytes = cut.before_bytes, before = cut.before }
  end
  return rows, more
end

-- The store's id of tenant's row ref (for list_executions' before), or nil.
function M.id_of(tenant, ref)
  M.flush()
  local r = db.row("SELECT id FROM executions WHERE tenant = ? AND ref = ?", tenant or "default", as_text(ref))
  return r and r.id
end

-- One row of tenant by its ref, or nil (unknown, or another tenant's: the same answer).
function M.get(tenant, ref)
  M.flush()
  return db.row([[SELECT ref, started_at, duration_ms, outcome, tool, instructions, memory_peak, code_hash,
    code, code_bytes, context_bytes, result_head, result_bytes, output_head, output_bytes, error,
    tools_called, rerun_of, principal FROM executions WHERE tenant = ? AND ref = ?]], tenant or "default", as_text(ref))
end

return M
