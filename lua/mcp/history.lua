-- mcp/history.lua - the execution log: one row per execution in the store, bounded.
--
-- Rows are buffered and written in one transaction per second (sooner only if 20000 pile up),
-- so logging costs the request path a table insert, not an fsync: at 25,000 executions a second
-- that is one commit a second, not one per execution. The price is that up to a second of
-- history can be lost if the process is killed (skills and other acknowledged writes are
-- committed before their response). After each flush only the newest history_max_rows rows are
-- kept.

local mb = mb
local db = mb.db
local cfg = mb.config

local M = {}
local buffer = {}
local timer = nil

function M.flush()
  if timer then timer:stop() timer = nil end
  if #buffer == 0 then return end
  local rows = buffer
  buffer = {}
  local first = math.max(1, #rows - cfg.history_max_rows + 1) -- older ones would be dropped anyway
  local ok, err = pcall(db.tx, function()
    for i = first, #rows do
      local r = rows[i]
      db.run([[INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions,
                 memory_peak, code_hash, tool) VALUES (?, ?, ?, ?, ?, ?, ?, ?)]],
        r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8])
    end
    local last = db.row("SELECT max(id) AS id FROM executions")
    if last and last.id and last.id > cfg.history_max_rows then
      db.run("DELETE FROM executions WHERE id <= ?", last.id - cfg.history_max_rows)
    end
  end)
  if not ok then mb.log("error", "history: " .. tostring(err)) end
end

-- add(tenant, started_at_ms, spec, res): spec is what was submitted (code, tool), res the result.
function M.add(tenant, started, spec, res)
  if cfg.history_max_rows == 0 then return end
  buffer[#buffer + 1] = {
    tenant or "default", started, res.execution_time_ms or 0,
    res.success and "ok" or (res.error_type or "runtime"),
    res.instructions, res.memory_peak_bytes, mb.hash(spec.code or ""), spec.tool or "execute_code",
  }
  if #buffer >= 20000 then
    M.flush()
  elseif not timer then
    timer = mb.timer(1000, function() timer = nil M.flush() end)
  end
end

-- Summary for get_execution_stats: rows kept and outcomes over them.
function M.summary(tenant)
  M.flush()
  local total = db.row("SELECT count(*) AS n, min(started_at) AS since FROM executions WHERE tenant = ?",
    tenant or "default")
  local by = {}
  for _, r in ipairs(db.query("SELECT outcome, count(*) AS n FROM executions WHERE tenant = ? GROUP BY outcome",
      tenant or "default")) do
    by[r.outcome] = r.n
  end
  return { recorded = total and total.n or 0, since_ms = total and total.since, by_outcome = by,
           max_rows = cfg.history_max_rows }
end

return M
