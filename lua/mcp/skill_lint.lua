-- mcp/skill_lint.lua - luacheck's warnings on a saved skill, for the save_skill tool's answer.
--
-- Runs Debian's luacheck (lua-check) as a child process from the event loop (mb.spawn: nothing
-- blocks; the request coroutine yields until luacheck exits) with the configuration `moonbox
-- check` uses (sandbox_types.luacheckrc: the sandbox's globals read-only, no global writes),
-- written once per process to DATA_DIR/luacheckrc. The skill's source goes in on stdin, named
-- skills/<path>, so the warnings read `skills/x.lua:3:13: (W113) accessing undefined variable
-- 'tabel'`. luacheck_timeout_ms bounds the wait (luacheck is killed past it); 0 turns it off.
-- Only the save_skill *tool* runs it: saves from sandbox code (a loop saving hundreds of skills)
-- would each pay one process start (~60 ms); `moonbox check` covers them.

local M = {}

local rc_path -- the configuration file, once written

local function config_file()
  if rc_path then return rc_path end
  local st, api = require("mcp.sandbox_types"), require("catalog.sandbox_api")
  local path = mb.config.data_dir .. "/luacheckrc"
  local ok, err = mb.fs.write_atomic(path, st.luacheckrc(api))
  if not ok then return nil, "cannot write " .. path .. ": " .. tostring(err) end
  rc_path = path
  return path
end

-- Checks source (named skills/<path>). Must run in a request coroutine: it yields until
-- luacheck answers. Returns {warnings = {"file:line:col: (Wnnn) message", ...}} or
-- {note = why there are none} (luacheck missing, killed past the time limit, failed).
function M.check(path, source)
  local limit = mb.config.luacheck_timeout_ms or 0
  if limit <= 0 then return nil end
  local rc, rerr = config_file()
  if not rc then return { note = "luacheck did not run: " .. rerr } end
  local co = coroutine.running()
  local lines, errs, done, timer, p = {}, {}, false, nil, nil
  local status, timed_out
  local function finish()
    if done then return end
    done = true
    if timer then timer:close() end
    local ok, err = coroutine.resume(co)
    if not ok then mb.log("error", "luacheck: " .. tostring(err)) end
  end
  local err
  p, err = mb.spawn({
    command = "luacheck",
    args = { "--config", rc, "--formatter", "plain", "--codes", "--filename", "skills/" .. path, "-" },
    max_line_bytes = 65536,
    on_line = function(line) if line and #lines < 200 then lines[#lines + 1] = line end end,
    on_stderr = function(line) if #errs < 5 then errs[#errs + 1] = line end end,
    on_exit = function(code) status = code; finish() end,
  })
  if not p then
    if tostring(err):find("no such file", 1, true) then
      return { note = "luacheck is not installed, so there are no lint warnings (install Debian's "
        .. "lua-check; `moonbox check` runs the same check)" }
    end
    return { note = "luacheck did not run: " .. tostring(err) }
  end
  timer = mb.timer(limit, function()
    timed_out = true
    p:kill("KILL")
  end)
  p:write(source)
  p:close_stdin()
  if not done then coroutine.yield() end
  if timed_out then
    return { note = string.format("luacheck did not answer within luacheck_timeout_ms=%d and was stopped", limit) }
  end
  if status ~= 0 and status ~= 1 and status ~= 2 then
    return { note = "luacheck failed (exit " .. tostring(status) .. ")" .. (errs[1] and (": " .. errs[1]) or "") }
  end
  return { warnings = lines }
end

return M
