-- mcp/history.lua - the execution log: one row per execution in the store, bounded.
--
-- Rows go to the history writer thread (src/history.c), which commits them once a second on its
-- own connection and keeps the newest history_max_rows: the request path pays a buffer append,
-- never an INSERT or an fsync. Up to a second of history can be lost if the process is killed
-- (skills and other acknowledged writes are committed before their response).

local mb = mb
local db = mb.db
local cfg = mb.config

local M = {}

function M.flush()
  return mb.history_flush()
end

-- add(tenant, started_at_ms, spec, res): spec is what was submitted (tool), res the result
-- (its code_hash was computed on the worker thread).
function M.add(tenant, started, spec, res)
  mb.history_add(tenant or "default", started, res.execution_time_ms or 0,
    res.success and "ok" or (res.error_type or "runtime"), res.instructions or 0,
    res.memory_peak_bytes or 0, res.code_hash, spec.tool or "execute_code")
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
           max_rows = cfg.history_max_rows, dropped = dropped, write_failures = failed }
end

return M
