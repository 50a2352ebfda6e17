-- tests/lua/harness.lua - what the policy module tests (tests/lua/test_*.lua) share: checks, a
-- stand-in for the host's `mb` table, a JSON codec that decodes the way the host's does, and a
-- store backed by the sqlite3 shell or by psql on a throwaway PostgreSQL cluster.
--
-- The policy modules (lua/mcp/*.lua) run in the host state of the real binary, where C provides
-- `mb` (docs/host-api.md). Here they run in a plain lua5.4 (as tests/run-lua.sh runs every test)
-- with a Lua `mb` that keeps the contract's shapes: JSON null is a light userdata, JSON arrays
-- carry the metatable "json.array", json_decode(text, true) refuses repeated keys with jansson's
-- message, and mb.send records each message after a round trip through the codec, so a test
-- sees what the client would read. What C does (executions, processes, detection) is scripted
-- by each test. Loaded with dofile; not a test file itself (run-lua.sh runs test_*.lua only).

local H = {}

H.ROOT = (arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$")) or ""
package.path = H.ROOT .. "lua/?.lua;" .. package.path

---------------------------------------------------------------------------------------------
-- values

-- A light userdata, like the host's JSON null (debug.upvalueid is the pure-Lua way to get one).
local NULL = debug.upvalueid(function() return H end, 1)
H.NULL = NULL

local ARRAY_MT = { __metatable = "json.array" }
function H.arr(t)
  local mt = getmetatable(t)
  if mt == "json.array" then return t end
  if mt ~= nil then error("json.array: the table already has a metatable", 2) end
  return setmetatable(t or {}, ARRAY_MT)
end

local RAW_MT = { __metatable = "json.raw" }
local function raw(text) return setmetatable({ text = text }, RAW_MT) end
local function is_raw(v) return type(v) == "table" and getmetatable(v) == "json.raw" end

---------------------------------------------------------------------------------------------
-- checks

local passed, failed = 0, 0

local function show(v, depth)
  depth = depth or 0
  if v == NULL then return "null" end
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" then
    return math.type(v) == "integer" and string.format("%d", v) or string.format("%.17g", v)
  end
  if is_raw(v) then return "raw(" .. v.text .. ")" end
  if type(v) ~= "table" then return tostring(v) end
  if depth > 6 then return "{...}" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) ~= type(b) then return type(a) < type(b) end
    if type(a) == "number" or type(a) == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = "[" .. show(k, depth + 1) .. "]=" .. show(v[k], depth + 1) end
  return (getmetatable(v) == "json.array" and "arr{" or "{") .. table.concat(parts, ", ") .. "}"
end
H.show = show

local function deep_eq(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  if is_raw(a) or is_raw(b) then return is_raw(a) and is_raw(b) and a.text == b.text end
  for k, v in pairs(a) do if not deep_eq(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
H.deep_eq = deep_eq

local function fail(name, lines)
  failed = failed + 1
  print("FAIL " .. name .. "\n  " .. table.concat(lines, "\n  "))
end

-- got equals want (deeply; tables compare by contents, not by metatable)
function H.check(name, got, want)
  if deep_eq(got, want) then passed = passed + 1
  else fail(name, { "got:  " .. show(got), "want: " .. show(want) }) end
end

-- got is a string that contains the Lua pattern
function H.check_match(name, got, pattern)
  if type(got) == "string" and got:find(pattern) then passed = passed + 1
  else fail(name, { "got:  " .. show(got), "want pattern: " .. pattern }) end
end

-- got is a string that contains plain text
function H.check_has(name, got, text)
  if type(got) == "string" and got:find(text, 1, true) then passed = passed + 1
  else fail(name, { "got:  " .. show(got), "want text: " .. show(text) }) end
end

-- fn raises an error whose message contains plain text
function H.check_error(name, text, fn, ...)
  local ok, err = pcall(fn, ...)
  if not ok and type(err) == "string" and err:find(text, 1, true) then passed = passed + 1
  elseif ok then fail(name, { "no error", "want error with: " .. show(text) })
  else fail(name, { "error: " .. show(err), "want error with: " .. show(text) }) end
end

-- Prints the summary run-lua.sh reads and exits 1 on any failure.
function H.done()
  print(string.format("%d passed, %d failed", passed, failed))
  os.exit(failed == 0 and 0 or 1)
end

---------------------------------------------------------------------------------------------
-- JSON, the host's way

local function encode(v, out, depth)
  depth = depth or 0
  if depth > 64 then error("json encode: nesting too deep", 0) end
  local t = type(v)
  if v == nil or v == NULL or t == "function" then out[#out + 1] = "null"
  elseif t == "boolean" then out[#out + 1] = tostring(v)
  elseif t == "number" then
    if math.type(v) == "integer" then out[#out + 1] = string.format("%d", v)
    elseif v ~= v or v == math.huge or v == -math.huge then error("json encode: number is not finite", 0)
    else
      local f = string.format("%.17g", v)
      out[#out + 1] = f:find("[%.eEn]") and f or f .. ".0" -- a float stays a float, as in json.c
    end
  elseif t == "string" then
    out[#out + 1] = '"' .. v:gsub('[%c"\\]', function(c)
      local e = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
      return e[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
  elseif is_raw(v) then out[#out + 1] = v.text
  elseif t == "table" then
    local n = #v
    local array = getmetatable(v) == "json.array"
    if not array and n > 0 then
      array = true
      for k in pairs(v) do
        if math.type(k) ~= "integer" or k < 1 or k > n then array = false break end
      end
    end
    if array then
      out[#out + 1] = "["
      for i = 1, n do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out, depth + 1)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = tostring(k) end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        encode(k, out, depth + 1)
        out[#out + 1] = ":"
        local val = v[k]
        if val == nil then val = v[math.tointeger(tonumber(k)) or k] end
        encode(val, out, depth + 1)
      end
      out[#out + 1] = "}"
    end
  else
    error("json encode: cannot encode a " .. t, 0)
  end
end

-- Keys in sorted order, so tests can compare texts.
function H.json_encode(v)
  local out = {}
  encode(v, out)
  return table.concat(out)
end

-- Decodes like src/json.c: integers stay integers, null is NULL, arrays get "json.array";
-- with unique_keys a repeated key is refused with jansson's message ("duplicate object key
-- near '"k"' at line 1 column C (position P)"); a key holding \u0000 is always refused.
-- Returns value, or nil and a message.
function H.json_decode(text, unique_keys)
  if type(text) ~= "string" then error("bad argument #1 to 'json_decode' (string expected)", 2) end
  local pos = 1
  local function fail_at(msg, at)
    at = at or pos
    local line, col = 1, 0
    for i = 1, at - 1 do
      if text:byte(i) == 10 then line, col = line + 1, 0 else col = col + 1 end
    end
    error({ string.format("%s at line %d column %d (position %d)", msg, line, col + 1, at) }, 0)
  end
  local function ws() pos = text:find("[^ \t\r\n]", pos) or #text + 1 end
  local value
  local function str()
    local start = pos
    pos = pos + 1
    local out = {}
    while true do
      local c = text:sub(pos, pos)
      if c == "" then fail_at("premature end of input", start) end
      if c == '"' then pos = pos + 1 break end
      if c:byte() < 32 then fail_at("control character in string") end
      if c == "\\" then
        local e = text:sub(pos + 1, pos + 1)
        local map = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
        if map[e] then out[#out + 1] = map[e]; pos = pos + 2
        elseif e == "u" then
          local h = text:match("^%x%x%x%x", pos + 2)
          if not h then fail_at("invalid escape") end
          local cp = tonumber(h, 16)
          pos = pos + 6
          if cp >= 0xD800 and cp <= 0xDBFF then
            local l = text:match("^\\u(%x%x%x%x)", pos)
            local lo = l and tonumber(l, 16)
            if not lo or lo < 0xDC00 or lo > 0xDFFF then fail_at("invalid Unicode surrogate") end
            cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
            pos = pos + 6
          elseif cp >= 0xDC00 and cp <= 0xDFFF then fail_at("invalid Unicode surrogate") end
          out[#out + 1] = utf8.char(cp)
        else fail_at("invalid escape") end
      else
        out[#out + 1] = c
        pos = pos + 1
      end
    end
    return table.concat(out), text:sub(start, pos - 1)
  end
  local function num()
    local s = text:match("^%-?%d+", pos)
    if not s or s:match("^%-?0%d") then fail_at("invalid token") end
    local e = pos + #s
    local frac = text:match("^%.%d+", e)
    if frac then e = e + #frac end
    local exp = text:match("^[eE][+-]?%d+", e)
    if exp then e = e + #exp end
    local tok = text:sub(pos, e - 1)
    pos = e
    if frac or exp then return tonumber(tok) end
    return math.tointeger(tonumber(tok)) or tonumber(tok)
  end
  function value(depth)
    if depth > 64 then fail_at("maximum parsing depth reached") end
    ws()
    local c = text:sub(pos, pos)
    if c == "{" then
      pos = pos + 1
      local obj, seen = {}, {}
      ws()
      if text:sub(pos, pos) == "}" then pos = pos + 1 return obj end
      while true do
        ws()
        if text:sub(pos, pos) ~= '"' then fail_at("string or '}' expected") end
        local kpos = pos
        local k, ksrc = str()
        if k:find("%z") then
          error({ string.format("object keys containing \\u0000 are not supported (line 1 column %d, position %d)", kpos, kpos) }, 0)
        end
        if unique_keys and seen[k] then fail_at("duplicate object key near '" .. ksrc .. "'", kpos) end
        seen[k] = true
        ws()
        if text:sub(pos, pos) ~= ":" then fail_at("':' expected") end
        pos = pos + 1
        obj[k] = value(depth + 1)
        ws()
        c = text:sub(pos, pos)
        pos = pos + 1
        if c == "}" then return obj end
        if c ~= "," then fail_at("'}' expected", pos - 1) end
      end
    elseif c == "[" then
      pos = pos + 1
      local a = H.arr({})
      ws()
      if text:sub(pos, pos) == "]" then pos = pos + 1 return a end
      while true do
        a[#a + 1] = value(depth + 1)
        ws()
        c = text:sub(pos, pos)
        pos = pos + 1
        if c == "]" then return a end
        if c ~= "," then fail_at("']' expected", pos - 1) end
      end
    elseif c == '"' then return (str())
    elseif text:find("^true", pos) then pos = pos + 4 return true
    elseif text:find("^false", pos) then pos = pos + 5 return false
    elseif text:find("^null", pos) then pos = pos + 4 return NULL
    elseif c:match("[%-%d]") then return num()
    elseif c == "" then fail_at("'[' or '{' expected near end of file")
    end
    fail_at("invalid token")
  end
  local ok, v = pcall(function()
    local r = value(0)
    ws()
    if pos <= #text then fail_at("end of file expected") end
    return r
  end)
  if ok then return v end
  if type(v) == "table" then return nil, v[1] end
  error(v, 0)
end

---------------------------------------------------------------------------------------------
-- the mb stand-in

H.CONFIG = {
  default_timeout_ms = 5000, max_timeout_ms = 60000, default_memory_mb = 64, max_memory_mb = 512,
  default_instruction_limit = 100000000, max_instruction_limit = 10000000000,
  max_message_bytes = 16777216, tools_page_size = 50, regex_max_subject_bytes = 4194304,
  cache_ttl_ms = 60000, mrtr_hold_ms = 300000, task_max_timeout_ms = 3600000, task_result_ttl_ms = 3600000,
  task_max_per_tenant = 16, task_poll_interval_ms = 1000, mrtr_max_held = 64, max_resource_subscriptions = 1000,
  max_listeners = 1000, max_listeners_per_tenant = 100, mrtr_max_held_per_tenant = 16,
  max_client_requests_per_tenant = 64, max_queue_per_tenant = 256, max_queue_bytes_per_tenant = 67108864,
  pii_policy = 1, pii_restore = 1, mcp_servers = "", upstream_timeout_ms = 30000,
  history_max_rows = 100000, journal_max_rows = 1000, journal_max_age_s = 2592000,
  journal_max_code_bytes = 65536, journal_head_bytes = 1024, journal_search_bytes = 4194304, workflows_dir = "", data_dir = "/data", skills_dir = "/data/skills",
  catalog_dir = "", max_output_bytes = 1048576, max_result_bytes = 4194304, max_code_bytes = 1048576,
  max_notifications = 1000, max_host_calls = 10000, max_skill_bytes = 262144, luacheck_timeout_ms = 5000,
  workspace_max_file_bytes = 10485760, workspace_max_bytes = 104857600, workspace_max_files = 10000,
  workers = 2, max_queue = 256, upstream_max_calls = 1000, upstream_max_parallel = 16,
  inferred_shape_max_nodes = 200, inferred_shape_total_nodes = 200000, upstream_ask_args_bytes = 2048,
  -- the audit trail is off here (it needs the store and a timer); integration/audit.test.mjs
  audit_max_age_s = 7776000, audit_flush_ms = 1000, audit_max_queued = 0, audit_sign_in_records = 60,
}

-- A fresh `mb` as the global the modules read, with config overrides; every lua/mcp module is
-- forgotten so the next require loads it against this mb. Records what modules send and log:
-- m.sent[i] = {msg (as the client decodes it), session, exchange, final}, m.logs[i] = {level,
-- text}, m.history[i] = the arguments of history_add. Functions a test does not script raise.
function H.new_mb(config)
  for name in pairs(package.loaded) do
    if name:match("^mcp%.") or name:match("^catalog%.") then package.loaded[name] = nil end
  end
  local cfg = {}
  for k, v in pairs(H.CONFIG) do cfg[k] = v end
  for k, v in pairs(config or {}) do cfg[k] = v end
  local function unscripted(name) return function() error("mb." .. name .. " is not scripted in this test", 2) end end
  local m
  m = {
    null = NULL, config = cfg, version = "0.0.0-test",
    protocol = { modern = { "2026-07-28" }, served = { "2025-11-25", "2025-06-18", "2025-03-26" },
                 upstream = { "2025-11-25" } },
    array = H.arr, json_encode = H.json_encode, json_decode = H.json_decode, json_raw = raw,
    json_raw_text = function(r) return r.text end,
    yaml_decode = unscripted("yaml_decode"),
    sent = {}, logs = {}, history = {}, pending = 0, clock = 1000, wall = 1700000000000,
    send = function(msg, session, exchange, final, status)
      local text = H.json_encode(msg)
      m.sent[#m.sent + 1] = { msg = assert(H.json_decode(text)), text = text, session = session,
                              exchange = exchange, final = final, status = status }
    end,
    exchange_pending = function() m.pending = m.pending + 1 end,
    log = function(level, text) m.logs[#m.logs + 1] = { level, text } end,
    now_ms = function() return m.clock end,
    wall_ms = function() return m.wall end,
    history_add = function(...) m.history[#m.history + 1] = table.pack(...) end,
    history_flush = function() return 0, 0 end,
    pool_stats = function() return { workers = cfg.workers, busy = 0, queued = 0, uptime_s = 7 } end,
    submit = unscripted("submit"), wait = unscripted("wait"), cancel = unscripted("cancel"),
    -- the pool's held mark (mb_pool_hold): recorded as {job, on}
    holds = {}, hold = function(job, on) m.holds[#m.holds + 1] = { job, on } return true end,
    host_reply = unscripted("host_reply"),
    db = { migrate = function(list) m.migrated = list return true end,
           exec = unscripted("db.exec"), query = unscripted("db.query"), row = unscripted("db.row"),
           run = unscripted("db.run"), tx = function(fn, ...) return fn(...) end },
    fs = { list = unscripted("fs.list"), stat = unscripted("fs.stat"), read = unscripted("fs.read"),
           mkdir = unscripted("fs.mkdir"), write_atomic = unscripted("fs.write_atomic"),
           remove = unscripted("fs.remove") },
    timer = unscripted("timer"),
  }
  _G.mb = m
  return m
end

-- The last message sent (as the client decodes it), and how many were sent.
function H.last(m) local s = m.sent[#m.sent] return s and s.msg, #m.sent end

-- Stand-ins for modules a test does not exercise: package.loaded[name] = t.
function H.stub(name, t) package.loaded[name] = t return t end

-- The real tool registry (lua/mcp/tools.lua) with the modules that need a store, files or
-- processes at init replaced: skills (H.skills, a scriptable stand-in), workspace_tools, catalog
-- and upstream (whose stand-in is tools.upstream); workflows too unless keep_workflows. pii,
-- skill_tools, skill_publish and history are the real ones. Call after H.new_mb.
function H.load_tools(opts)
  opts = opts or {}
  local S = { published_list = {}, saved = {} }
  H.skills = S
  S.start = function() S.started = true end
  S.get_tenant = function(t) return t end
  S.published = function(tenant) return S.published_list[tenant] or S.published_list.default or {} end
  S.published_as = function(tenant, kind)
    local out = {}
    for _, e in ipairs(S.published(tenant)) do if e[kind] then out[#out + 1] = e end end
    return out
  end
  S.count = function() return { skills = 0 } end
  S.save = function(tenant, args) S.saved[#S.saved + 1] = { tenant = tenant, args = args } return S.save_result(tenant, args) end
  S.save_result = function(_, args) return { name = args.name, version = 1 } end
  for _, f in ipairs({ "load", "list", "delete", "history", "restore", "source" }) do
    S[f] = function(tenant, ...) return { call = f, tenant = tenant, args = { ... } } end
  end
  H.stub("mcp.skills", S)
  H.stub("mcp.workspace_tools", { init = function() end })
  H.stub("mcp.catalog", { init = function() end })
  local up = { calls = {}, watchers = {} }
  function up.init(t) t.upstream = up end
  function up.watch(fn) up.watchers[#up.watchers + 1] = fn end -- (availability: set by a test)
  function up.instructions(base) return base end
  function up.abandon(entry) up.calls[#up.calls + 1] = { "abandon", entry } end
  function up.shutdown() up.calls[#up.calls + 1] = { "shutdown" } end
  function up.metrics_text() return "# upstream\n" end
  H.stub("mcp.upstream", up)
  if not opts.keep_workflows then H.stub("mcp.workflows", { init = function() end }) end
  return require("mcp.tools")
end

-- A worker's result as mb.wait gives it: the fields the host reads plus structured_json and
-- structured_quoted, shaped here the way mb_exec_result_shape (src/sandbox.c, the one owner of
-- that shape; tests/unit/test_sandbox.c checks it) shapes them from result_json, output, error,
-- error_type and traceback. A result that has structured_json already (false: none) is left as
-- it is.
function H.shaped(res)
  if type(res) ~= "table" or res.structured_json ~= nil then return res end
  local sc = { success = res.success, result = raw(res.success and res.result_json or "null"),
    output = res.output or "", execution_time_ms = res.execution_time_ms or 0,
    instructions = res.instructions or 0, memory_peak_bytes = res.memory_peak_bytes or 0 }
  if not res.success then
    sc.error, sc.error_type, sc.traceback = res.error or "error", res.error_type or "runtime", res.traceback
  end
  local out = {}
  for k, v in pairs(res) do
    if k ~= "result_json" and k ~= "output" and k ~= "error" and k ~= "traceback" then out[k] = v end
  end
  local text = H.json_encode(sc)
  out.structured_json, out.structured_quoted = raw(text), raw(H.json_encode(text))
  return out
end

-- A request as server.lua hands handlers: execute(spec) records the spec and answers with
-- results[1] (shaped by H.shaped), results[2], results[3] (default: a success whose result is
-- `null`).
function H.request(tenant, results)
  local r = { tenant = tenant or "default", specs = {} }
  function r:execute(spec)
    self.specs[#self.specs + 1] = spec
    if results then return H.shaped(results[1]), results[2], H.shaped(results[3]) end
    return H.shaped({ success = true, result_json = "null", output = "", execution_time_ms = 1,
                      instructions = 10, memory_peak_bytes = 100 })
  end
  return r
end

---------------------------------------------------------------------------------------------
-- a store on the sqlite3 shell

local function sql_literal(v)
  if v == nil or v == NULL then return "NULL" end
  if type(v) == "number" then return math.type(v) == "integer" and string.format("%d", v) or string.format("%.17g", v) end
  if type(v) == "boolean" then return v and "1" or "0" end
  return "'" .. tostring(v):gsub("'", "''") .. "'"
end

-- Replaces each ? outside quotes with the next parameter as a literal.
local function bind(sql, ...)
  local params, i = table.pack(...), 0
  local out, quote = {}, nil
  for c in sql:gmatch(".") do
    if quote then
      if c == quote then quote = nil end
      out[#out + 1] = c
    elseif c == "'" or c == '"' then quote = c; out[#out + 1] = c
    elseif c == "?" then
      i = i + 1
      out[#out + 1] = sql_literal(params[i])
    else out[#out + 1] = c end
  end
  if i ~= params.n then error(string.format("sql: %d placeholders, %d parameters", i, params.n), 3) end
  return table.concat(out)
end

-- An mb.db on a fresh database file, each call one run of the sqlite3 shell (so a test should
-- keep to tens of calls); nil when the shell is missing. tx runs fn without a transaction.
-- migrate applies the list the way src/store.c does: step i when user_version is i-1.
function H.sqlite_db()
  if not io.popen("command -v sqlite3 2>/dev/null"):read("l") then return nil end
  local path = os.tmpname()
  local sqlfile = os.tmpname()
  local db = { dialect = "sqlite", path = path, statements = {} }
  local function shell(sql)
    local f = assert(io.open(sqlfile, "wb"))
    f:write(sql)
    f:close()
    local p = io.popen(string.format("sqlite3 -bail -json '%s' < '%s' 2>&1", path, sqlfile))
    local out = p:read("a")
    local ok = p:close()
    if not ok or out:find("^Error") or out:find("^Parse error") or out:find("\nError") then
      error("sqlite: " .. out:gsub("%s+$", "") .. "\n  in: " .. sql, 3)
    end
    local rows = {}
    -- -json prints one array per statement that returns rows
    for chunk in out:gmatch("%b[]") do
      local a = assert(H.json_decode(chunk))
      for _, r in ipairs(a) do rows[#rows + 1] = r end
    end
    return rows
  end
  function db.exec(sql) shell(sql) end
  function db.query(sql, ...)
    db.statements[#db.statements + 1] = sql
    return shell(bind(sql, ...) .. ";")
  end
  function db.row(sql, ...) return db.query(sql, ...)[1] end
  function db.run(sql, ...)
    db.statements[#db.statements + 1] = sql
    local r = shell(bind(sql, ...) .. "; SELECT changes() AS c, last_insert_rowid() AS id;")
    local last = r[#r]
    return last.c, last.id
  end
  function db.tx(fn, ...) return fn(...) end
  function db.migrate(list)
    local v = shell("PRAGMA user_version;")[1].user_version
    if v > #list then error("database from a newer moonbox", 2) end
    for i = v + 1, #list do
      shell("BEGIN;\n" .. list[i] .. "\nPRAGMA user_version = " .. i .. ";\nCOMMIT;")
    end
    return true
  end
  function db.close() os.remove(path) os.remove(sqlfile) end
  return db
end

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function sh_line(cmd)
  local p = io.popen(cmd)
  local l = p:read("l")
  p:close()
  return l
end

-- The directory of PostgreSQL's server programs (initdb, pg_ctl, postgres), or nil.
local function pg_bindir()
  local best
  local p = io.popen("ls -d /usr/lib/postgresql/*/bin 2>/dev/null")
  for d in p:lines() do
    local v = tonumber(d:match("/postgresql/(%d+)/bin$"))
    if v and io.open(d .. "/initdb", "rb") and (not best or v > best.v) then best = { v = v, d = d } end
  end
  p:close()
  if best then return best.d end
  local d = sh_line("pg_config --bindir 2>/dev/null")
  if d and io.open(d .. "/initdb", "rb") then return d end
  local i = sh_line("command -v initdb 2>/dev/null")
  return i and i:match("^(.*)/initdb$") or nil
end

-- An mb.db on a throwaway PostgreSQL cluster (the dialect "postgres" of the host's mb.db, see
-- docs/store.md): initdb into a temporary directory, the server on a Unix socket in it only (no
-- TCP), run as the user postgres when this runs as root (PostgreSQL refuses root). Each call is one
-- run of psql; rows come back as JSON (row_to_json), with NULL left out and booleans as 1/0 as the
-- host's backend gives them. run() answers changes (rows the statement touched) and, for a
-- statement with RETURNING, the first returned column of the first row. tx runs fn without a
-- transaction; migrate applies the list, keeping the version in moonbox_schema.
-- The cluster is stopped (pg_ctl -m immediate) and its directory removed by db.close(), when the
-- db is collected (an error that ends the test closes the Lua state), and by a watchdog shell
-- that does it within a second of this Lua process ending any other way (a signal, os.exit).
-- Returns nil, reason when the PostgreSQL binaries are absent or the cluster does not start.
function H.pg_db()
  local bindir = pg_bindir()
  if not bindir then return nil, "PostgreSQL binaries (initdb, pg_ctl) not found" end
  local psql = io.open(bindir .. "/psql", "rb") and bindir .. "/psql" or sh_line("command -v psql 2>/dev/null")
  if not psql then return nil, "psql not found" end
  local root = sh_line("id -u") == "0"
  if root and not sh_line("id -u postgres 2>/dev/null") then
    return nil, "running as root and there is no user postgres to run the server as"
  end
  local dir = sh_line("mktemp -d /tmp/moonbox-pg-XXXXXX")
  if not dir then return nil, "mktemp failed" end
  local as = root and "runuser -u postgres -- " or ""
  local data, sqlfile = dir .. "/data", dir .. "/stmt.sql"
  local function stop_cmd()
    return string.format("if [ -f %s/postmaster.pid ]; then %s%s -D %s -m immediate -w stop; fi; "
      .. "rm -rf %s || { sleep 1; rm -rf %s; }",
      sh_quote(data), as, sh_quote(bindir .. "/pg_ctl"), sh_quote(data), sh_quote(dir), sh_quote(dir))
  end
  if root then os.execute("chown postgres " .. sh_quote(dir)) end
  local log = dir .. "/initdb.log"
  local ok = os.execute(string.format("%s%s -D %s -U postgres -A trust -E UTF8 --locale=C.UTF-8 -N > %s 2>&1",
    as, sh_quote(bindir .. "/initdb"), sh_quote(data), sh_quote(log)))
  if ok then
    ok = os.execute(string.format("%s%s -D %s -l %s -w -o %s start > /dev/null 2>&1", as,
      sh_quote(bindir .. "/pg_ctl"), sh_quote(data), sh_quote(dir .. "/server.log"),
      sh_quote("-c listen_addresses='' -k " .. dir .. " -c fsync=off -c full_page_writes=off")))
  end
  -- the watchdog: this Lua process's pid is the parent of the shell io.popen runs
  local lua_pid = sh_line("echo $PPID")
  os.execute(string.format("(while kill -0 %s 2>/dev/null && [ -d %s ]; do sleep 1; done; %s) "
    .. "< /dev/null > /dev/null 2>&1 &", lua_pid, sh_quote(dir), stop_cmd()))
  local closed = false
  local function close()
    if closed then return end
    closed = true
    os.execute("{ " .. stop_cmd() .. "; } > /dev/null 2>&1")
  end
  if not ok then
    local f = io.open(dir .. "/server.log") or io.open(log)
    local why = f and f:read("a") or ""
    if f then f:close() end
    close()
    return nil, "the throwaway PostgreSQL cluster did not start: " .. why:sub(-600)
  end
  local db = { dialect = "postgres", dir = dir, statements = {} }
  -- closed when collected: an error that ends the test closes the Lua state
  db.guard = setmetatable({}, { __gc = close })
  local function shell(sql)
    local f = assert(io.open(sqlfile, "wb"))
    f:write(sql)
    f:close()
    local p = io.popen(string.format("%s -X -q -A -t -v ON_ERROR_STOP=1 -h %s -U postgres -d postgres -f %s 2>&1",
      sh_quote(psql), sh_quote(dir), sh_quote(sqlfile)))
    local out = p:read("a")
    local okp = p:close()
    if not okp or out:find("ERROR:") then
      error("postgres: " .. out:gsub("%s+$", "") .. "\n  in: " .. sql, 3)
    end
    local rows = {}
    for line in out:gmatch("[^\n]+") do
      if line:sub(1, 1) == "{" then
        local r = assert(H.json_decode(line))
        for k, v in pairs(r) do
          if v == NULL then r[k] = nil
          elseif v == true then r[k] = 1 elseif v == false then r[k] = 0 end
        end
        rows[#rows + 1] = r
      end
    end
    return rows
  end
  function db.exec(sql) shell(sql) end
  function db.query(sql, ...)
    db.statements[#db.statements + 1] = sql
    return shell("SELECT row_to_json(moonbox_r) FROM (" .. bind(sql, ...) .. ") moonbox_r;")
  end
  function db.row(sql, ...) return db.query(sql, ...)[1] end
  function db.run(sql, ...)
    db.statements[#db.statements + 1] = sql
    local s = bind(sql, ...)
    if not s:match("^%s*[IiUuDd][NnPpEe][SsDdLl][EeAa][RrTt]") then shell(s .. ";") return 0 end
    local ret = s:match("[Rr][Ee][Tt][Uu][Rr][Nn][Ii][Nn][Gg]%s+([%w_]+)%s*$")
    local rows = shell("WITH moonbox_r AS (" .. s .. (ret and "" or " RETURNING 1 AS moonbox_one")
      .. ") SELECT row_to_json(moonbox_r) FROM moonbox_r;")
    return #rows, ret and rows[1] and rows[1][ret] or nil
  end
  function db.tx(fn, ...) return fn(...) end
  function db.migrate(list)
    shell("CREATE TABLE IF NOT EXISTS moonbox_schema (version integer NOT NULL); "
      .. "INSERT INTO moonbox_schema SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM moonbox_schema);")
    local v = db.row("SELECT version FROM moonbox_schema").version
    if v > #list then error("database from a newer moonbox", 2) end
    for i = v + 1, #list do
      shell("BEGIN;\n" .. list[i] .. "\nUPDATE moonbox_schema SET version = " .. i .. ";\nCOMMIT;")
    end
    return true
  end
  db.close = close
  return db
end

return H
