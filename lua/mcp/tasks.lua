-- mcp/tasks.lua - the MCP tasks extension (io.modelcontextprotocol/tasks, SEP-2663): task
-- records, their state machine and the tasks/* answers. docs/tasks.md.
--
-- A task stands for one tools/call that server.lua answered with a CreateTaskResult instead of
-- its result; the execution behind it goes on in this process. Its record (tenant, principal,
-- status, statusMessage, inputRequests, the inlined result or error, when it expires) is in the
-- store (table `tasks`, SQLite migration 9 / PostgreSQL 5), written before the CreateTaskResult
-- is sent, so tasks/get answers from any replica sharing the store and after a restart. The
-- process that runs a task keeps it in `live` as well (fresher statusMessage, the execution's
-- entry for tasks/update and tasks/cancel) and refreshes its row every HEARTBEAT_MS; a task left
-- working by a process that died (its row not refreshed for STALE_MS, or at start-up on SQLite,
-- whose file one process owns) is `failed` with that reason.
-- States: working <-> input_required -> completed | failed | cancelled (terminal: never change).
-- `failed` is only for a JSON-RPC error of the request; a tool result with isError is completed.
-- Ids are unguessable: a BLAKE2b of a sealed text (mb.seal's key is 32 random bytes per process).
-- Every task request is checked against the task's owner (tenant and principal): another
-- owner's id answers exactly like an unknown one.

local mb = mb
local null = mb.null
local M = {}

M.EXT = "io.modelcontextprotocol/tasks"
local HEARTBEAT_MS, STALE_MS = 5000, 30000
local TERMINAL = { completed = true, failed = true, cancelled = true }
M.TERMINAL = TERMINAL

local live = {}        -- id -> task run by this process
M.live = live
local next_seq = 0
M.on_change = function(task) end -- set by the server: notifications/tasks to listeners

local function iso(ms)
  return os.date("!%Y-%m-%dT%H:%M:%S", ms // 1000) .. string.format(".%03dZ", ms % 1000)
end

local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end

-- whether the request's client declared the extension (its per-request capabilities)
function M.declared(request)
  local caps = request.sess and request.sess.client_capabilities
  local ext = is_object(caps) and caps.extensions
  return request.modern and is_object(ext) and ext[M.EXT] ~= nil and ext[M.EXT] ~= null
end

function M.missing_capability(what)
  return -32021, "Missing required client capability: the extension " .. M.EXT .. " (" .. what .. ")",
    { requiredCapabilities = { extensions = { [M.EXT] = {} } } }
end

local function save(task)
  task.updated = mb.wall_ms()
  mb.db.run([[UPDATE tasks SET status = ?, status_message = ?, input_requests = ?, result = ?,
      error = ?, updated_at = ?, expires_at = ? WHERE id = ?]],
    task.status, task.message, task.inputs and mb.json_encode(task.inputs) or nil, task.result,
    task.error and mb.json_encode(task.error) or nil, task.updated, task.expires, task.id)
end

local function changed(task)
  task.dirty = nil
  local ok, err = pcall(save, task)
  if not ok then mb.log("error", "tasks: writing task " .. task.id .. ": " .. tostring(err)) end
  local nok, nerr = pcall(M.on_change, task)
  if not nok then mb.log("error", "tasks: notifying: " .. tostring(nerr)) end
end

-- How many unfinished tasks a tenant has (every replica's, from the store).
function M.count_of(tenant)
  local r = mb.db.row("SELECT COUNT(*) AS n FROM tasks WHERE tenant = ? AND status IN ('working', 'input_required')", tenant)
  return r and tonumber(r.n) or 0
end

-- A new task for request (tenant, principal), running for at most timeout_ms. Returns the task,
-- or nil, code, message (task_max_per_tenant reached).
function M.create(request, timeout_ms)
  local cfg = mb.config
  local n = M.count_of(request.tenant)
  if n >= cfg.task_max_per_tenant then
    return nil, -32000, string.format("server busy: %d of your tasks are running or waiting for input "
      .. "(task_max_per_tenant=%d): let one finish or cancel it (tasks/cancel)", n, cfg.task_max_per_tenant)
  end
  next_seq = next_seq + 1
  local now = mb.wall_ms()
  local sealed = mb.seal(string.format("task|%d|%d|%d|%s", next_seq, now, math.random(0, 0x7fffffff), request.tenant))
  local id = "mbt-" .. mb.hash(sealed):sub(1, 32) -- 128 bits
  local task = { id = id, tenant = request.tenant, principal = request.principal or "", status = "working",
                 created = now, updated = now, expires = now + timeout_ms + cfg.task_result_ttl_ms,
                 poll = cfg.task_poll_interval_ms }
  mb.db.run([[INSERT INTO tasks (id, tenant, principal, status, created_at, updated_at, expires_at,
      poll_ms, heartbeat_at) VALUES (?, ?, ?, 'working', ?, ?, ?, ?, ?)]],
    id, task.tenant, task.principal, now, now, task.expires, task.poll, now)
  live[id] = task
  M.arm()
  return task
end

-- The Task fields every answer carries.
local function envelope(t, out)
  out.taskId = t.id
  out.status = t.status
  if t.message then out.statusMessage = t.message end
  out.createdAt = iso(t.created)
  out.lastUpdatedAt = iso(t.updated)
  out.ttlMs = math.max(1, t.expires - t.created)
  out.pollIntervalMs = t.poll
  return out
end

function M.create_result(task)
  return envelope(task, { resultType = "task" })
end

-- DetailedTask: the envelope plus inputRequests (input_required), result (completed) or error
-- (failed).
function M.detailed(t)
  local out = envelope(t, {})
  if t.status == "input_required" and t.inputs then out.inputRequests = t.inputs end
  if t.status == "completed" and t.result then out.result = mb.json_raw(t.result) end
  if t.status == "failed" and t.error then out.error = t.error end
  return out
end

local function from_row(r)
  local t = { id = r.id, tenant = r.tenant, principal = r.principal or "", status = r.status,
              message = r.status_message, created = tonumber(r.created_at), updated = tonumber(r.updated_at),
              expires = tonumber(r.expires_at), poll = tonumber(r.poll_ms), result = r.result,
              heartbeat = tonumber(r.heartbeat_at), cancel = tonumber(r.cancel_requested or 0) ~= 0 }
  if r.input_requests then t.inputs = mb.json_decode(r.input_requests) end
  if r.error then t.error = mb.json_decode(r.error) end
  return t
end

local UNKNOWN = "Invalid params: unknown task (no task of yours has this taskId, or it expired)"

-- The task request names, when it is the caller's; nil and the error message otherwise (the
-- same for a forged, an expired and another owner's id).
function M.find(request, id)
  if type(id) ~= "string" or #id > 128 then return nil, "Invalid params: params.taskId must be a string" end
  local now = mb.wall_ms()
  local t = live[id]
  if not t then
    local r = mb.db.row("SELECT * FROM tasks WHERE id = ?", id)
    if not r then return nil, UNKNOWN end
    t = from_row(r)
    if not TERMINAL[t.status] and (t.heartbeat or 0) < now - STALE_MS then
      -- the process that ran it stopped refreshing it: it died
      t.status, t.inputs, t.message = "failed", nil, nil
      t.error = { code = -32603, message = "the moonbox process running this task ended before it finished" }
      pcall(save, t)
    end
  end
  if t.tenant ~= request.tenant or t.principal ~= (request.principal or "") then return nil, UNKNOWN end
  if t.expires < now then return nil, UNKNOWN end
  return t
end

-- State changes of a live task (this process runs it).
function M.set_inputs(task, inputs)
  if TERMINAL[task.status] then return end
  task.inputs = inputs
  task.status = next(inputs) and "input_required" or "working"
  changed(task)
end

-- statusMessage from the running code (mcp.task(message), mcp.progress's message): written with
-- the next heartbeat, not at each call
function M.set_message(task, message)
  if TERMINAL[task.status] or type(message) ~= "string" then return end
  task.message = message:sub(1, 1024)
  task.updated = mb.wall_ms()
  task.dirty = true
end

-- The execution ended: outcome is {result = table} | {error = {code, message, data}} | {cancelled}.
function M.finish(task, outcome)
  if TERMINAL[task.status] then live[task.id] = nil return end
  task.inputs = nil
  if outcome.cancelled or task.cancelling then
    task.status = "cancelled"
    task.message = task.message or "cancelled by tasks/cancel"
  elseif outcome.error then
    task.status, task.error = "failed", outcome.error
  else
    task.status = "completed"
    task.result = mb.json_encode(outcome.result)
  end
  task.expires = mb.wall_ms() + mb.config.task_result_ttl_ms
  live[task.id] = nil
  changed(task)
end

-- tasks/cancel of a task another replica runs: recorded, that replica's heartbeat sees it.
function M.request_cancel(task)
  mb.db.run("UPDATE tasks SET cancel_requested = 1 WHERE id = ?", task.id)
end

-- Heartbeat of this process's tasks (their rows show they are alive), written statusMessages,
-- cancellations asked on other replicas, and expired rows deleted.
local timer
local function beat()
  timer = nil
  local now = mb.wall_ms()
  for id, t in pairs(live) do
    local ok, err = pcall(function()
      mb.db.run("UPDATE tasks SET heartbeat_at = ?" .. (t.dirty and ", status_message = ?, updated_at = ?" or "")
        .. " WHERE id = ?", now, table.unpack(t.dirty and { t.message, t.updated, id } or { id }))
      t.dirty = nil
      local r = mb.db.row("SELECT cancel_requested FROM tasks WHERE id = ?", id)
      if r and tonumber(r.cancel_requested or 0) ~= 0 and not t.cancelling then M.cancel_live(t) end
    end)
    if not ok then mb.log("error", "tasks: heartbeat: " .. tostring(err)) end
  end
  pcall(mb.db.run, "DELETE FROM tasks WHERE expires_at < ?", now)
  M.arm()
end
function M.arm()
  if timer or next(live) == nil then return end
  timer = mb.timer(HEARTBEAT_MS, beat)
end
M.cancel_live = function(task) end -- set by the server (stops the execution)

-- At start-up: a task left unfinished by a process that is gone is failed, with that reason.
-- SQLite: the file is this process's alone, every unfinished task is a dead one's. PostgreSQL:
-- those whose heartbeat stopped (other replicas' live tasks keep theirs).
function M.recover()
  local now = mb.wall_ms()
  local cut = mb.db.dialect == "postgres" and now - STALE_MS or now + 1
  mb.db.run([[UPDATE tasks SET status = 'failed', input_requests = NULL, updated_at = ?, error = ?,
      expires_at = ? WHERE status IN ('working', 'input_required') AND heartbeat_at < ?]],
    now, mb.json_encode({ code = -32603, message = "the moonbox process running this task ended "
      .. "(it stopped or was restarted) before the task finished" }), now + mb.config.task_result_ttl_ms, cut)
  mb.db.run("DELETE FROM tasks WHERE expires_at < ?", now)
end

return M
