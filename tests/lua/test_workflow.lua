-- tests/lua/test_workflow.lua - the workflow engine (lua/prelude/workflow.lua) in a plain Lua 5.4,
-- with stand-ins for what the sandbox gives it (mcp.call, mcp.elicit, require, json, re): the
-- ${...} references, when, every step kind, forms asked again with the problems, input checks,
-- the builtin list, and errors that name the step. The end-to-end run is in
-- tests/integration/workflows.test.mjs. Standalone: `lua5.4 tests/lua/test_workflow.lua` from
-- the repo root. Ends with "N passed, N failed"; exits 1 on any failure.

local ROOT = (arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$")) or ""
local H = dofile(ROOT .. "tests/lua/harness.lua")
local check = H.check

local NULL = setmetatable({}, { __tostring = function() return "null" end })
local calls, answers, asked = {}, {}, {}

-- a sandbox-like environment with the engine loaded
local env = {}
for _, k in ipairs({ "assert", "error", "ipairs", "next", "pairs", "select", "tonumber", "tostring",
	"type", "rawget", "rawequal", "getmetatable", "setmetatable", "pcall", "load" }) do env[k] = _G[k] end
for _, lib in ipairs({ "string", "table", "math", "utf8" }) do env[lib] = _G[lib] end
env.json = { null = NULL, array = function(t) return t end,
	encode = function(v) return type(v) == "table" and "{json}" or tostring(v) end }
env.re = { find = function(s, p) return s:find(p == "^[a-z]+$" and "^[a-z]+$" or p) end }
env.mcp = {
	call = function(server, tool, args)
		calls[#calls + 1] = { server = server, tool = tool, args = args }
		if server == "down" then error("unknown upstream server \"down\"", 0) end
		return { echoed = args }
	end,
	elicit = function(params)
		asked[#asked + 1] = params.message
		return table.remove(answers, 1) or { action = "cancel" }
	end,
}
env.require = function(name)
	if name == "skills.double" then return function(a) return a.n * 2 end end
	if name == "skills.tbl" then return { run = function(a) return "run " .. a.x end } end
	error("module '" .. name .. "' not found", 0)
end
env.write_file = function(p, d) calls[#calls + 1] = { write = p, data = d } return true end
env._G = env
do -- the engine runs in a private environment whose __index is the sandbox's globals
	local f = assert(io.open(ROOT .. "lua/prelude/workflow.lua", "rb"), "run from the repo root")
	local penv = setmetatable({}, { __index = env })
	assert(load(f:read("a"), "@workflow.lua", "t", penv))()
	f:close()
	local defined = {}
	for k in pairs(penv) do defined[#defined + 1] = k end
	check("defines run_workflow only", defined, { "run_workflow" })
	env.run_workflow = penv.run_workflow
end
local run = env.run_workflow

local function err(def, inputs)
	local ok, e = pcall(run, def, inputs)
	return ok and "no error" or e
end

-- references and output
check("output with references", run({ name = "w", steps = {
	{ id = "a", lua = "inputs.x + 1" },
	{ id = "b", lua = "{ n = steps.a * 2, list = { 'p', 'q' } }" },
}, output = { whole = "${steps.b}", text = "a=${steps.a} second=${steps.b.list.2}", missing = "${steps.zz.y}" } },
	{ x = 4 }), { whole = { n = 10, list = { "p", "q" } }, text = "a=5 second=q" })
check("no output: the last step's value", run({ steps = { { lua = "1" }, { lua = "'last'" } } }), "last")
check("a chunk with its own return", run({ steps = { { lua = "local t = 0 for i = 1, 3 do t = t + i end return t" } } }), 6)

-- when
check("when false skips, when true runs", run({ steps = {
	{ id = "a", lua = "1", when = "inputs.go" }, { id = "b", lua = "2", when = "not inputs.go" },
}, output = { a = "${steps.a}", b = "${steps.b}" } }, { go = false }), { b = 2 })

-- kinds
calls = {}
check("call", run({ steps = { { call = { server = "s", tool = "t", args = { q = "${inputs.q}" } } } } }, { q = "x" }),
	{ echoed = { q = "x" } })
check("call received rendered args", calls[1], { server = "s", tool = "t", args = { q = "x" } })
check("skill (a function)", run({ steps = { { skill = "double", args = { n = "${inputs.n}" } } } }, { n = 21 }), 42)
check("skill (a table with run)", run({ steps = { { skill = "tbl", args = { x = "y" } } } }), "run y")
calls = {}
check("builtin", run({ steps = { { builtin = { name = "write_file", args = { "f.txt", "${inputs.t}" } } } } }, { t = "hi" }), true)
check("builtin got its args in order", calls[1], { write = "f.txt", data = "hi" })

-- errors name the step and its kind
check("call error", err({ name = "w", steps = { { id = "a", lua = "1" }, { id = "look", call = { server = "down", tool = "x" } } } }),
	'workflow w, step 2 "look" (call): unknown upstream server "down"')
check("lua error", err({ name = "w", steps = { { lua = "nil + 1" } } }):match("^workflow w, step 1 %(lua%): ") ~= nil, true)
check("builtin outside the list", err({ name = "w", steps = { { id = "b", builtin = { name = "os.exit" } } } }),
	'workflow w, step 1 "b" (builtin): builtin "os.exit" is not one of the functions workflows may use')
check("two kinds", err({ name = "w", steps = { { id = "x", lua = "1", form = {} } } }),
	'workflow w, step 1 "x" has both lua and form (one kind per step)')
check("no kind", err({ name = "w", steps = { { id = "x" } } }),
	'workflow w, step 1 "x" has none of call, builtin, skill, lua, form')
check("missing skill", err({ name = "w", steps = { { skill = "nope" } } }),
	"workflow w, step 1 (skill): module 'skills.nope' not found")
check("bad when", err({ name = "w", steps = { { lua = "1", when = "(" } } }):match("^workflow w, step 1 %(when%): ") ~= nil, true)
check("not a definition", select(2, pcall(run, "x")):match("run_workflow: the definition must be a table with steps") ~= nil, true)

-- inputs
local def_in = { name = "w", inputs = {
	who = { type = "string", required = true, minLength = 2 },
	n = { type = "integer", default = 3, minimum = 1 },
	slug = { type = "string", pattern = "^[a-z]+$" },
}, steps = { { lua = "inputs.who .. inputs.n" } } }
check("input default", run(def_in, { who = "ann" }), "ann3")
check("input required", err(def_in, {}), "workflow w: input who is required")
check("input too short", err(def_in, { who = "a" }), "workflow w: input who needs at least 2 characters")
check("input type", err(def_in, { who = "ann", n = 1.5 }), "workflow w: input n must be a whole number")
check("input pattern", err(def_in, { who = "ann", slug = "Not Ok" }), "workflow w: input slug does not have the expected form")

-- forms: checked here, asked again with the problems, declines end the workflow
local form = { name = "f", steps = { { id = "d", form = { message = "Hello ${inputs.who}", retries = 1, schema = {
	type = "object", required = { "email" },
	properties = { email = { type = "string", format = "email" }, age = { type = "integer", minimum = 18 },
		plan = { type = "string", enum = { "a", "b" } } } } } } }, output = "${steps.d.email}" }
asked, answers = {}, { { action = "accept", content = { email = "nope", age = 12, plan = "c" } },
	{ action = "accept", content = { email = "x@y.org", age = 30 } } }
check("form accepted on the second try", run(form, { who = "Ann" }), "x@y.org")
check("the second ask lists the problems", asked, { "Hello Ann",
	"Hello Ann\n\nPlease correct: age must be at least 18; email must be an e-mail address; plan must be one of a, b." })
asked, answers = {}, { { action = "accept", content = {} }, { action = "accept", content = { email = "" } } }
check("form still invalid after its tries", err(form, { who = "A" }),
	'workflow f, step 1 "d" (form): the answer was still not valid after 2 tries: email is required')
answers = { { action = "decline" } }
check("form declined", err(form, { who = "A" }), 'workflow f, step 1 "d" (form): the person did not fill in the form (decline)')

H.done()
