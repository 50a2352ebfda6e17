-- mcp/skill_tests.lua - running a skill's examples and tests in the sandbox.
--
-- A skill's `-- @example` lines (skill_format.parse_example) say what it returns for an input;
-- `skills/tests/<name>_test.lua` holds tests written with test(name, fn) and a few assertions
-- (assert_eq, assert_true, assert_error). M.RUNNER is the one sandbox chunk that runs both: it
-- is the code of `moonbox test` (src/run_cli.c, which reads it from this module in a plain Lua
-- state), of save_skill before it writes a skill with examples, and of the watcher after an
-- edited file with examples compiled. Its inputs are context variables: `__mb_tests`, a list of
-- {name, code?, examples, tests?} (code: a candidate source, loaded in place of the version in
-- service), or `__mb_test_names` (names to look up with load_skill; empty: every skill). It
-- returns {tap = TAP text, passed, failed, results = [{skill, kind, n, ok, message}]}.
-- M.run_examples (host side) runs it and answers nil when every example passed, or the
-- first failure: {n, line, message}.

local M = {}

M.RUNNER = [==[
local specs, names = __mb_tests, __mb_test_names
__mb_tests, __mb_test_names = nil, nil
local results, lines = {}, {}
local function show(v)
  local ok, s = pcall(json.encode, v)
  s = ok and s or tostring(v)
  if #s > 400 then s = s:sub(1, 400) .. "..." end
  return s
end
local function normal(v) return json.decode(json.encode(v)) end
local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
local function add(skill, kind, n, desc, ok, message)
  results[#results + 1] = { skill = skill, kind = kind, n = n, ok = ok, message = message }
  local i = #results
  lines[#lines + 1] = (ok and "ok " or "not ok ") .. i .. " - " .. skill .. " " .. desc
  if not ok then
    lines[#lines + 1] = "  ---"
    lines[#lines + 1] = "  message: " .. json.encode(tostring(message))
    lines[#lines + 1] = "  ..."
  end
end
local function module_of(s)
  if not s.code then return require("skills." .. s.name) end
  local f, err = load(s.code, "=skills/" .. s.name .. ".lua", "t")
  if not f then error(err, 0) end
  return f()
end
local function run_example(m, s, ex)
  local f
  if ex.call then
    f = type(m) == "table" and m[ex.call]
    if type(f) ~= "function" then error("the skill has no function " .. ex.call, 0) end
    local args = ex.input
    return f(table.unpack(args, 1, #args))
  end
  f = m
  if type(m) == "table" then f = m.run or m.main end
  if type(f) ~= "function" then
    error("the skill returns no function (nor a table with run) to call with the example's input;"
      .. " name the function: @example FIELD [ARGS...] -> EXPECTED", 0)
  end
  return f(ex.input)
end
local function assertions()
  local list = {}
  local env = setmetatable({}, { __index = _ENV })
  env.test = function(name, fn)
    if type(name) ~= "string" or type(fn) ~= "function" then
      error("test(name, fn): a name and a function", 2)
    end
    list[#list + 1] = { name = name, fn = fn }
  end
  env.assert_eq = function(actual, expected, msg)
    if not same(normal(actual), normal(expected)) then
      error((msg and (msg .. ": ") or "") .. "expected " .. show(expected) .. ", got " .. show(actual), 2)
    end
  end
  env.assert_true = function(v, msg)
    if not v then error(msg or ("expected a true value, got " .. show(v)), 2) end
    return v
  end
  env.assert_error = function(fn, pattern, msg)
    local ok, err = pcall(fn)
    if ok then error(msg or "expected an error, none was raised", 2) end
    if pattern and not tostring(err):find(pattern) then
      error((msg and (msg .. ": ") or "") .. "the error " .. show(tostring(err)) .. " does not match "
        .. show(pattern), 2)
    end
    return err
  end
  return env, list
end
if not specs then
  specs = {}
  if not names or #names == 0 then
    names = {}
    for _, s in ipairs(list_skills().skills) do names[#names + 1] = s.name end
  end
  for _, n in ipairs(names) do
    local ok, d = pcall(load_skill, n)
    if ok then
      specs[#specs + 1] = { name = n, examples = d.examples or {}, tests = d.tests,
                            tests_path = d.tests_path }
    else
      add(n, "load", 0, "loads", false, tostring(d))
    end
  end
end
for _, s in ipairs(specs) do
  local okm, m = pcall(module_of, s)
  if not okm then
    add(s.name, "load", 0, "loads", false, tostring(m))
  else
    for i, ex in ipairs(s.examples or {}) do
      local desc = "example " .. i .. (ex.line and (" (line " .. ex.line .. ")") or "")
      local ok, got = pcall(run_example, m, s, ex)
      if not ok then
        add(s.name, "example", i, desc, false, "raised: " .. tostring(got))
      else
        local okn, norm = pcall(normal, got)
        if okn and same(norm, ex.output) then
          add(s.name, "example", i, desc, true)
        else
          add(s.name, "example", i, desc, false, "expected " .. show(ex.output) .. ", got " .. show(got))
        end
      end
    end
    if s.tests then
      local env, list = assertions()
      local path = s.tests_path or ("skills/tests/" .. s.name .. "_test.lua")
      local f, err = load(s.tests, "=" .. path, "t", env)
      local okl, lerr = true, nil
      if f then okl, lerr = pcall(f) else okl, lerr = false, err end
      if not okl then
        add(s.name, "test", 0, path, false, tostring(lerr))
      elseif #list == 0 then
        add(s.name, "test", 0, path, false, path .. " defines no test (call test(name, fn))")
      end
      for i, t in ipairs(list) do
        local ok, terr = pcall(t.fn)
        add(s.name, "test", i, "test " .. t.name, ok, not ok and tostring(terr) or nil)
      end
    end
    if #(s.examples or {}) == 0 and not s.tests then
      lines[#lines + 1] = "# " .. s.name .. ": no examples and no tests"
    end
  end
end
local passed, failed = 0, 0
for _, r in ipairs(results) do if r.ok then passed = passed + 1 else failed = failed + 1 end end
table.insert(lines, 1, "1.." .. #results)
table.insert(lines, 1, "TAP version 13")
lines[#lines + 1] = string.format("# %d passed, %d failed", passed, failed)
return { tap = table.concat(lines, "\n") .. "\n", passed = passed, failed = failed,
         results = json.array(results) }
]==]

-- Runs a skill's examples in a fresh sandbox with the default limits. execute(spec) runs an
-- execution and answers its result (request:execute of the save_skill call, or
-- tools.background_execute for the watcher; both yield: call this from a coroutine). code: the
-- candidate source (nil: the version in service). Returns nil when every example passed, or
-- {n, line, message} of the first that failed (n = 0: the module did not load, or the run
-- itself failed).
function M.run_examples(execute, name, code, examples)
  local cfg = mb.config
  local ex = {}
  for i, e in ipairs(examples) do ex[i] = { call = e.call, input = e.input, output = e.output, line = e.line } end
  local ctx = mb.json_encode({ __mb_tests = mb.array({ { name = name, code = code, examples = mb.array(ex) } }) })
  local res, err = execute({
    code = M.RUNNER, context_json = ctx, context_internal = true,
    timeout_ms = cfg.default_timeout_ms, memory_bytes = cfg.default_memory_mb * 1048576,
    instruction_limit = cfg.default_instruction_limit, tool = "skill_examples",
  })
  if not res then return { n = 0, message = "the examples could not run: " .. tostring(err or "cancelled") } end
  local sc = res.structured_json and mb.json_decode(mb.json_raw_text(res.structured_json))
  if not sc or not sc.success then
    return { n = 0, message = "the examples could not run: " .. tostring(sc and sc.error or "no result") }
  end
  for _, r in ipairs(sc.result.results or {}) do
    if not r.ok then
      local e = examples[r.n]
      return { n = r.n, line = e and e.line, message = tostring(r.message) }
    end
  end
  return nil
end

-- The words of an answer or a log line about a failed example.
function M.describe_failure(name, f)
  if f.n == 0 then return string.format("skill %s: %s", name, f.message) end
  return string.format("skill %s: example %d%s failed: %s", name, f.n,
    f.line and string.format(" (line %d)", f.line) or "", f.message)
end

return M
