-- mcp/store_pg.lua - what the PostgreSQL store (src/store_pg.c) adds in Lua to `mb.db`: tx and
-- notify. Required by server.lua when mb.db.dialect == "postgres", before anything uses the store.
--
-- tx(fn, ...) runs fn(...) inside BEGIN ISOLATION LEVEL SERIALIZABLE .. COMMIT on a connection
-- pinned to the calling coroutine (a SAVEPOINT when nested) and returns fn's results. When fn
-- raises, the transaction (or savepoint) is rolled back and the error value re-raised unchanged.
-- Serializable transactions of concurrent requests or replicas may conflict: PostgreSQL then
-- fails one with SQLSTATE 40001 (or 40P01, a deadlock), and the outermost tx runs fn again from
-- the start, up to RETRIES times, after a random pause that doubles each time (2-4 ms, then up to
-- ~0.5 s in all, so contending replicas spread out) - so fn must do only store work. Unlike
-- SQLite, fn may wait (other requests run meanwhile on the other connections).

local M = {}
local RETRIES = 8

local function retryable(err)
  return type(err) == "string" and (err:find("SQLSTATE 40001", 1, true) or err:find("SQLSTATE 40P01", 1, true))
end

function M.wrap(db)
  local begin, commit, rollback, depth, pause = db._begin, db._commit, db._rollback, db._depth, db._pause
  function db.tx(fn, ...)
    if type(fn) ~= "function" then
      error("bad argument #1 to 'tx' (function expected, got " .. type(fn) .. ")", 2)
    end
    local outer = depth() == 0
    for attempt = 1, outer and RETRIES or 1 do
      begin()
      local r = table.pack(pcall(fn, ...))
      if r[1] then
        local ok, err = pcall(commit)
        if ok then return table.unpack(r, 2, r.n) end
        r = { false, err }
      else
        pcall(rollback) -- a broken connection: nothing to undo, the error below says what failed
      end
      if not (outer and retryable(r[2])) or attempt == RETRIES then error(r[2], 0) end
      local base = 2 << attempt -- 4, 8, ... 256 ms
      pause(math.random(base // 2, base))
    end
  end
  -- notify(channel, payload): delivered to every replica's listen(channel, fn) at commit (of the
  -- enclosing tx, or at once)
  function db.notify(channel, payload)
    db.row("SELECT pg_notify(?, ?) AS x", channel, payload)
  end
  -- Timer and watcher callbacks run in request coroutines, so their statements wait without
  -- blocking the loop (a blocking statement could also wait for a row lock held by a request
  -- that cannot go on until the loop does - a stall until statement_timeout).
  local timer, watch, go = mb.timer, mb.watch, mb.go
  if timer and go then
    mb.timer = function(ms, fn) return timer(ms, function(...) go(fn, ...) end) end
  end
  if watch and go then
    mb.watch = function(dir, fn) return watch(dir, function(...) go(fn, ...) end) end
  end
  return db
end

return M
