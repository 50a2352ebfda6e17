-- tests/lua/test_workflows.lua - loading and checking workflow files (lua/mcp/workflows.lua):
-- which files are read, every problem a definition can have and how it is reported, the
-- list_workflows and run_workflow tools (argument checks, limits, results) and workflows
-- published as tools, and the reload after a change. The directory, the watch and the timer are
-- scripted; executions too (tests/lua/harness.lua). The engine that runs a definition is tested
-- in test_workflow.lua; end to end in tests/integration/workflows.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_workflows.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_has = H.check, H.check_has
local arr, NULL = H.arr, H.NULL
local enc = H.json_encode

local DIR = "/srv/wf"
local m = H.new_mb({ workflows_dir = DIR })

-- the directory: name -> text (a table entry is a directory); read errors by name
local files, read_errors, yaml_docs = {}, {}, {}
local order = {} -- listing order
local function put(name, content) if files[name] == nil then order[#order + 1] = name end files[name] = content end
local made, watched, timers = {}, nil, {}
m.fs.stat = function(p) return p == DIR and made[DIR] and { type = "dir" } or nil end
m.fs.mkdir = function(p) made[p] = true return true end
m.fs.list = function(p)
  assert(p == DIR, "listed " .. tostring(p))
  local out = {}
  for _, n in ipairs(order) do
    if files[n] ~= nil then out[#out + 1] = { name = n, type = type(files[n]) == "table" and "dir" or "file", size = 1, mtime_ms = 1 } end
  end
  return out
end
m.fs.read = function(p, max)
  local n = p:match("^" .. DIR .. "/(.*)$")
  check("read with the 1 MiB limit", max, 1048576)
  if read_errors[n] then return nil, read_errors[n], "io" end
  return files[n]
end
m.yaml_decode = function(text)
  if yaml_docs[text] then return yaml_docs[text] end
  return nil, "line 1 column 1: did not find expected node content"
end
m.watch = function(dir, fn) watched = { dir = dir, fn = fn } return {} end
m.timer = function(ms, fn)
  local t = { ms = ms, fn = fn, stopped = false }
  t.stop = function() t.stopped = true end
  timers[#timers + 1] = t
  return t
end

local GOOD = { name = "good", description = "Does good.", tool = true, title = "Good one", timeout_ms = 1000,
  inputs = { q = { type = "string", description = "query", required = true }, n = { type = "integer" },
             a = { type = "array", required = true } },
  steps = { { id = "s1", call = { server = "crm", tool = "find", args = { q = "${inputs.q}" } } },
            { lua = "return 1", when = "inputs.n" }, { builtin = { name = "take" } } } }
put("good.json", enc(GOOD))
put("plain.yml", "plain")
yaml_docs.plain = { description = "From YAML, named by its file.", steps = { { skill = "double" } } }
put("form.yaml", "form")
yaml_docs.form = { name = "with_form", steps = { { form = { message = "Name?", schema = { type = "object" } } } } }
put(".hidden.json", "{")
put("notes.txt", "not a workflow")
put("sub.json", {})
put("broken.json", '{"name": "x",')
put("broken.yaml", "not yaml")
put("unreadable.json", "")
read_errors["unreadable.json"] = "cannot read " .. DIR .. "/unreadable.json: Permission denied"
put("bad-name.json", enc({ steps = { { lua = "1" } } }))
put("twin.json", enc({ name = "good", steps = { { lua = "1" } } }))
put("array.json", "[1]")
put("top.json", enc({ name = "1bad", description = 5, tool = "yes", timeout_ms = 0, memory_mb = 1.5,
  instruction_limit = "x", inputs = arr({}), steps = {} }))
put("steps.json", enc({ name = "steps_bad",
  inputs = { ["bad name"] = { type = "string" }, scalar = 5, odd = { type = "date" } },
  steps = { 5, { id = "1x", lua = "1" }, { id = "a", lua = "1" }, { id = "a", lua = "2" }, { when = "x" },
            { lua = "1", skill = "s" }, { form = { message = "m" } }, { call = { server = "s" } }, { lua = 5 },
            { skill = {} }, { lua = "1", when = true } } }))
put("nosteps.json", enc({ name = "nosteps", steps = { a = 1 } }))

local tools = H.load_tools({ keep_workflows = true })
local wf = require("mcp.workflows")
local changed = 0
tools.list_changed = function() changed = changed + 1 end

check("the directory is made when missing", made[DIR], true)
check("the directory is watched", watched and watched.dir, DIR)
local names = {}
for n in pairs(wf.by_name) do names[#names + 1] = n end
table.sort(names)
check("loaded workflows", names, { "good", "plain", "with_form" })
check("a workflow without a name takes the file's", wf.by_name.plain.def.name, "plain")
check("the file of each", { wf.by_name.good.file, wf.by_name.plain.file, wf.by_name.with_form.file },
  { "good.json", "plain.yml", "form.yaml" })

local expected = {
  "array.json: the file must hold an object (name, steps, ...)",
  "bad-name.json: name must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most 64), got bad-name",
  "broken.yaml: line 1 column 1: did not find expected node content",
  "nosteps.json: steps must be a non-empty list",
  "steps.json: input \"bad name\": names are identifiers",
  "steps.json: input odd: unknown type date",
  "steps.json: input scalar must be an object",
  "steps.json: step 1 must be an object",
  "steps.json: step 10: skill must be text",
  "steps.json: step 11: when must be a Lua expression",
  "steps.json: step 2: id must be an identifier",
  "steps.json: step 4: id a is used twice",
  "steps.json: step 5 needs exactly one of call, builtin, skill, lua, form (has none)",
  "steps.json: step 6 needs exactly one of call, builtin, skill, lua, form (has lua, skill)",
  "steps.json: step 7: form needs a schema (a flat JSON Schema object)",
  "steps.json: step 8: call needs server and tool",
  "steps.json: step 9: lua must be text",
  "top.json: description must be text",
  "top.json: inputs must be an object of name: {type, description, required}",
  "top.json: instruction_limit must be a positive integer",
  "top.json: memory_mb must be a positive integer",
  "top.json: name must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most 64), got 1bad",
  "top.json: steps must be a non-empty list",
  "top.json: timeout_ms must be a positive integer",
  "top.json: tool must be true or false",
  "twin.json: a workflow named good is also in good.json",
  "unreadable.json: cannot read unreadable.json: Permission denied",
}
-- the broken JSON's message comes from the codec: checked by prefix
local problems, broken = {}, nil
for _, p in ipairs(wf.problems) do
  if p:match("^broken%.json: ") then broken = p else problems[#problems + 1] = p end
end
check("problems, sorted, each naming its file", problems, expected)
check("a JSON syntax error names the file", broken ~= nil and broken:match("at line 1") ~= nil, true)
check("the problems are sorted", (function()
  for i = 2, #wf.problems do if wf.problems[i - 1] > wf.problems[i] then return false end end
  return true
end)(), true)
check("no problem shows the server's directory", (function()
  for _, p in ipairs(wf.problems) do if p:find(DIR, 1, true) then return p end end
end)(), nil)
check("problems are logged as warnings", (function()
  local n = 0
  for _, l in ipairs(m.logs) do if l[1] == "warning" and l[2]:match("^workflows: ") then n = n + 1 end end
  return n
end)(), #wf.problems)

---------------------------------------------------------------------------------------------
-- list_workflows

local list_tool = tools.by_name.list_workflows.handler
local function text_of(r) return r and r.content and r.content[1] and r.content[1].text end
check("list_workflows takes no arguments", text_of(list_tool({ name = "x" }, H.request())),
  'invalid arguments: list_workflows has no argument "name" (expected )')
local sc = list_tool({}, H.request()).structuredContent
check("list count and order", { sc.count, sc.workflows[1].name, sc.workflows[2].name, sc.workflows[3].name },
  { 3, "good", "plain", "with_form" })
check("list entry", sc.workflows[1], { name = "good", description = "Does good.", file = "good.json", tool = true,
  servers = { "crm" }, available = true, published = true,
  inputs = { type = "object", properties = { q = { type = "string", description = "query" }, n = { type = "integer" },
    a = { type = "array" } }, required = { "a", "q" } },
  steps = { { id = "s1", kind = "call" }, { kind = "lua" }, { kind = "builtin" } } })
check("list entry without inputs", sc.workflows[2].inputs, { type = "object", properties = {} })
check("list problems", #sc.problems, #wf.problems)
check("the directory for the default tenant", sc.directory, DIR)
check("no directory for another tenant", list_tool({}, H.request("acme")).structuredContent.directory, nil)

---------------------------------------------------------------------------------------------
-- run_workflow

local run_tool = tools.by_name.run_workflow.handler
local function run(args, results, tenant)
  local req = H.request(tenant, results)
  return run_tool(args, req), req.specs[1]
end
check("run_workflow unknown argument", text_of(run({ name = "good", input = {} })),
  'invalid arguments: run_workflow has no argument "input" (expected inputs, name)')
check("run_workflow name missing", text_of(run({})), "invalid arguments: name must be a string")
check("run_workflow unknown workflow", text_of(run({ name = "nope" })), "no workflow named nope (there are: good, plain, with_form)")
check("run_workflow unknown long name is clipped", text_of(run({ name = string.rep("w", 200) })),
  "no workflow named " .. string.rep("w", 96) .. "...(200 bytes) (there are: good, plain, with_form)")
check("run_workflow inputs array", text_of(run({ name = "good", inputs = arr({ 1 }) })), "invalid arguments: inputs must be an object")

local r, spec = run({ name = "good", inputs = { q = "x" } }, { { success = true, result_json = '{"saved":"a.json"}' } })
check("run spec", { spec.code, spec.timeout_ms, spec.memory_bytes, spec.instruction_limit, spec.tool },
  { "return run_workflow(__mb_workflow, __mb_inputs)", 1000, 64 * 1048576, 100000000, "good" })
local ctx = H.json_decode(spec.context_json)
check("the definition and the inputs travel as context", { ctx.__mb_inputs, ctx.__mb_workflow.name, #ctx.__mb_workflow.steps },
  { { q = "x" }, "good", 3 })
check("an object result is the structured content", { r.isError, r.structuredContent }, { false, { saved = "a.json" } })
r, spec = run({ name = "plain", inputs = NULL }, { { success = true, result_json = "42" } })
check("a scalar result is wrapped", r.structuredContent, { result = 42 })
check("null inputs are none", H.json_decode(spec.context_json).__mb_inputs, {})
r, spec = run({ name = "with_form" }, { { success = true, structured_json = m.json_raw('{"success":true,"result":[1]}') } })
check("a workflow with a form gets max_timeout_ms", spec.timeout_ms, 60000)
check("a worker-made result is read", r.structuredContent, { result = { 1 } })
r = run({ name = "good" }, { { success = false, error = "step 1 \"s1\": unknown upstream server \"crm\"" } })
check("a failed run is a tool error naming the step", { r.isError, text_of(r) }, { true, 'step 1 "s1": unknown upstream server "crm"' })
r = run({ name = "good" }, { { success = false, structured_json = m.json_raw('{"success":false}') } })
check("a failed run without a message", text_of(r), "error")
check("busy", text_of(run({ name = "good" }, { nil, "server busy" })), "server busy")
check("cancelled: no answer", run({ name = "good" }, { nil, nil }), nil)
check("runs are counted in the stats", tools.by_name.get_execution_stats.handler({}, (function()
  m.db.row = function() return { n = 0 } end
  m.db.query = function() return {} end
  return H.request()
end)()).structuredContent.executions, 5)

-- limits within the configured maxima
wf.by_name.big = { def = { name = "big", timeout_ms = 999999, memory_mb = 99999, instruction_limit = 10 ^ 12 // 1,
  steps = { { lua = "1" } } }, file = "big.json" }
_, spec = run({ name = "big" })
check("a workflow's own limits are capped", { spec.timeout_ms, spec.memory_bytes, spec.instruction_limit },
  { 60000, 512 * 1048576, 10000000000 })
wf.by_name.big = nil

---------------------------------------------------------------------------------------------
-- workflows as tools

local provider = tools.providers[#tools.providers]
local entries = provider()
check("only tool: true workflows are tools", #entries, 1)
check("the tool's definition", entries[1].definition, { name = "good", title = "Good one", description = "Does good. (workflow)",
  inputSchema = { type = "object", properties = { q = { type = "string", description = "query" }, n = { type = "integer" },
    a = { type = "array" } }, required = { "a", "q" } },
  annotations = { title = "Good one", readOnlyHint = false, openWorldHint = true } })
check("the entry is cached", provider()[1] == entries[1], true)
local req = H.request(nil, { { success = true, result_json = '"done"' } })
check("the tool runs the workflow with its arguments", { entries[1].handler({ q = "z" }, req).structuredContent,
  H.json_decode(req.specs[1].context_json).__mb_inputs }, { { result = "done" }, { q = "z" } })

---------------------------------------------------------------------------------------------
-- the servers a workflow calls: not published while one is missing, refused before it runs

local up = tools.upstream
local state = {} -- server -> "ready" | "starting" | reason it is not there
up.availability = function(server)
  local st = state[server] or ('unknown upstream server "' .. server .. '": no servers are configured')
  if st == "ready" or st == "starting" then return st end
  return nil, st
end
changed = 0
for _, fn in ipairs(up.watchers) do fn() end
check("a workflow whose server is not configured is not published", { #provider(), changed }, { 0, 1 })
sc = list_tool({}, H.request()).structuredContent
check("... and listed with the reason", { sc.workflows[1].available, sc.workflows[1].published, sc.workflows[1].unavailable },
  { false, false, { 'step 1 "s1" calls crm.find: unknown upstream server "crm": no servers are configured' } })
local req0 = H.request(nil, { { success = true, result_json = '"ran"' } })
r = run_tool({ name = "good" }, req0)
check("run_workflow refuses it before anything runs", { r.isError, #req0.specs, text_of(r) }, { true, 0,
  'workflow good cannot run: step 1 "s1" calls crm.find: unknown upstream server "crm": no servers are configured. '
  .. "Nothing was run or asked; list_workflows shows what each workflow needs." })
state.crm = "starting"
for _, fn in ipairs(up.watchers) do fn() end
check("a server on its first start: published", { #provider(), changed }, { 1, 2 })
state.crm = "ready"
for _, fn in ipairs(up.watchers) do fn() end
check("no list_changed when nothing published changed", changed, 2)
state.crm = 'server "crm" has no tool "find"'
for _, fn in ipairs(up.watchers) do fn() end
check("a tool the server does not have: not published", { #provider(), changed }, { 0, 3 })
state.crm = "ready"
for _, fn in ipairs(up.watchers) do fn() end
check("published again when it has it", { #provider(), changed }, { 1, 4 })
up.availability = nil

---------------------------------------------------------------------------------------------
-- reload after a change

changed = 0
put("plain.yml", "plain2")
yaml_docs.plain2 = { description = "Edited.", steps = { { lua = "2" } } }
watched.fn("plain.yml")
watched.fn("plain.yml")
check("changes are debounced", { #timers, timers[1].stopped, timers[2].stopped, timers[2].ms }, { 2, true, false, 100 })
timers[2].fn()
check("the edit is loaded", wf.by_name.plain.def.description, "Edited.")
check("a change to a workflow that is not a tool does not change the tool list", changed, 0)

files["good.json"] = enc({ name = "good", tool = true, description = "Better.", steps = { { lua = "1" } } })
watched.fn("good.json")
timers[#timers].fn()
check("a changed tool workflow changes the tool list", changed, 1)
check("the cached tool entry is rebuilt", provider()[1].definition.description, "Better. (workflow)")
files["good.json"] = enc({ name = "good", tool = false, description = "Better.", steps = { { lua = "1" } } })
watched.fn("good.json")
timers[#timers].fn()
check("a tool workflow that is no longer a tool changes the tool list", { changed, #provider() }, { 2, 0 })
files["good.json"] = enc({ name = "good", tool = true, steps = { { lua = "1" } } })
watched.fn("good.json")
timers[#timers].fn()
check("... and again when it is one again", { changed, #provider() }, { 3, 1 })
files["good.json"] = nil
watched.fn("good.json")
timers[#timers].fn()
check("a removed tool workflow changes the tool list", { changed, #provider() }, { 4, 0 })
check("the twin loads once the original is gone", wf.by_name.good and wf.by_name.good.file, "twin.json")

-- a directory that cannot be made: a warning, and no workflows
H.new_mb({ workflows_dir = "", data_dir = "/nowhere" })
mb.fs.stat = function() return nil end
mb.fs.mkdir = function(p) return nil, "Permission denied" end
mb.fs.list = function(p) return nil, "no such directory" end
local t2 = H.load_tools({ keep_workflows = true })
local wf2 = require("mcp.workflows")
check("the default directory is under data_dir", wf2.dir, "/nowhere/workflows")
check("cannot make it: a warning", mb.logs[1], { "warning", "workflows: cannot create /nowhere/workflows: Permission denied" })
check("no workflows, no problems", { next(wf2.by_name), #wf2.problems }, { nil, 0 })
check("no watch without mb.watch", wf2.watch, nil)
check("run_workflow with none says where to look", t2.by_name.run_workflow.handler({ name = "x" }, H.request()).content[1].text,
  "no workflow named x (there are: none; see list_workflows for files with problems)")

H.done()
