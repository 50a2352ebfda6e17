-- lua/prelude/workflow.lua - runs a declarative workflow inside the sandbox: run_workflow(def, inputs).
--
-- A workflow (docs/workflows.md) is data - named inputs, a list of steps, an output - written as
-- JSON or YAML by people who do not write Lua. The host (lua/mcp/workflows.lua) loads and checks
-- the files and runs a workflow as an execution whose code calls this function, so every step
-- runs under the execution's limits, PII policy and upstream policies, like any code would.
-- Steps:
--   call    = {server =, tool =, args =}   a tool of an upstream server (mcp.call)
--   builtin = {name =, args = {...}}       a sandbox function from a fixed list (BUILTINS)
--   skill   = name, args = {...}           require("skills.<name>") called with args
--   lua     = "expression or chunk"        evaluated with inputs and steps in scope
--   form    = {message =, schema =, retries =}  ask the person (mcp.elicit), validate, re-ask
-- Any step may have `when` (a Lua expression: skipped when false). Strings "${inputs.x}" and
-- "${steps.id.field}" in args, messages and the output are replaced by those values (the value
-- itself when the string is just one reference). An error names the workflow, the step and its kind.
-- Like the other prelude files, it runs in a private environment whose __index is the sandbox's
-- globals, and defines only its one global.

local type, next, error, tostring, tonumber, pcall = type, next, error, tostring, tonumber, pcall
local setmetatable, getmetatable, tointeger, mtype = setmetatable, getmetatable, math.tointeger, math.type
local sformat, sfind, sgsub, smatch, ssub = string.format, string.find, string.gsub, string.match, string.sub
local concat, ulen = table.concat, utf8.len
local G = _ENV -- the private environment: reads reach the sandbox's globals
local json_null = json and json.null
local json_array = json and json.array
local json_encode = json and json.encode
local mcp_call, mcp_elicit, mcp_tools = mcp and mcp.call, mcp and mcp.elicit, mcp and mcp.tools
local sandbox_load, sandbox_require = load, require

local BUILTINS = {
	read_file = true, write_file = true, delete_file = true, list_files = true, file_exists = true,
	["json.read_file"] = true, ["json.write_file"] = true, ["json.encode"] = true, ["json.decode"] = true,
	tokenize_pii = true, detokenize_pii = true, filter_by_field = true, summarize_list = true,
	aggregate_stats = true, format_output = true, group_by = true, sort_by = true, pluck = true,
	count_by = true, unique = true, take = true,
}
local KINDS = { "call", "builtin", "skill", "lua", "form" }

local function is_null(v) return v == nil or (json_null ~= nil and v == json_null) end

-- ${path}: inputs.a.b, steps.id.field, with integer segments for lists
local function lookup(ctx, path)
	local v = ctx
	for seg in sgsub(path, "%s", ""):gmatch("[^%.]+") do
		if type(v) ~= "table" then return nil end
		local n = tointeger(tonumber(seg))
		local x = v[seg]
		if x == nil and n then x = v[n] end
		v = x
	end
	return v
end

local function text_of(v)
	if type(v) == "string" then return v end
	if type(v) == "table" and json_encode then return json_encode(v) end
	if is_null(v) then return "" end
	return tostring(v)
end

local function render(v, ctx, depth)
	depth = depth or 0
	if depth > 32 then error("values nested deeper than 32 levels", 0) end
	if type(v) == "string" then
		local whole = smatch(v, "^%${([^}]+)}$")
		if whole then return lookup(ctx, whole) end
		return (sgsub(v, "%${([^}]+)}", function(p) return text_of(lookup(ctx, p)) end))
	end
	if type(v) ~= "table" or is_null(v) then return v end
	local out = {}
	for k, x in next, v do out[k] = render(x, ctx, depth + 1) end
	local mt = getmetatable(v)
	if mt == "json.array" and json_array then json_array(out) end
	return out
end

-- A Lua expression (or a chunk with its own return) with inputs and steps in scope.
local function eval(code, ctx, what)
	if type(code) ~= "string" then error(what .. " must be a string of Lua", 0) end
	local env = setmetatable({ inputs = ctx.inputs, steps = ctx.steps }, { __index = G })
	local f, err = sandbox_load("return " .. code, "=" .. what, "t", env)
	if not f then f, err = sandbox_load(code, "=" .. what, "t", env) end
	if not f then error(err, 0) end
	return f()
end

-- ---- forms: MCP elicitation with a flat schema, checked here as well ----------------------

local function check_value(name, v, p)
	local t = p.type
	if t == "string" then
		if type(v) ~= "string" then return name .. " must be text" end
		local n = ulen(v) or #v
		if p.minLength and n < p.minLength then return sformat("%s needs at least %d characters", name, p.minLength) end
		if p.maxLength and n > p.maxLength then return sformat("%s allows at most %d characters", name, p.maxLength) end
		if p.format == "email" and not sfind(v, "^[^%s@]+@[^%s@]+%.[^%s@]+$") then return name .. " must be an e-mail address" end
		if p.pattern and G.re and not G.re.find(v, p.pattern) then return name .. " does not have the expected form" end
		if type(p.enum) == "table" then
			for _, e in next, p.enum do if e == v then return nil end end
			return name .. " must be one of " .. concat(p.enum, ", ")
		end
	elseif t == "integer" or t == "number" then
		if type(v) ~= "number" or (t == "integer" and mtype(v) ~= "integer" and not tointeger(v)) then
			return sformat("%s must be %s", name, t == "integer" and "a whole number" or "a number")
		end
		if p.minimum and v < p.minimum then return sformat("%s must be at least %s", name, tostring(p.minimum)) end
		if p.maximum and v > p.maximum then return sformat("%s must be at most %s", name, tostring(p.maximum)) end
	elseif t == "boolean" then
		if type(v) ~= "boolean" then return name .. " must be yes or no" end
	end
	return nil
end

local function check_form(schema, content)
	local problems = {}
	local props = type(schema.properties) == "table" and schema.properties or {}
	if type(content) ~= "table" then return { "the answer is not a form" } end
	for _, name in next, (type(schema.required) == "table" and schema.required or {}) do
		if is_null(content[name]) or content[name] == "" then problems[#problems + 1] = name .. " is required" end
	end
	for name, p in next, props do
		local v = content[name]
		if not is_null(v) and v ~= "" and type(p) == "table" then -- ("" counts as not given)
			local why = check_value(name, v, p)
			if why then problems[#problems + 1] = why end
		end
	end
	G.table.sort(problems)
	return problems
end

local function run_form(form, ctx)
	if type(form) ~= "table" or type(form.schema) ~= "table" then error("form needs a schema", 0) end
	if not mcp_elicit then error("forms need mcp.elicit", 0) end
	local message = text_of(render(form.message or "Please fill in the form", ctx))
	local tries = 1 + (tointeger(form.retries) or 2)
	local ask = message
	for attempt = 1, tries do
		local r = mcp_elicit({ message = ask, requestedSchema = form.schema })
		if type(r) ~= "table" or r.action ~= "accept" then
			error(sformat("the person did not fill in the form (%s)", type(r) == "table" and tostring(r.action) or "no answer"), 0)
		end
		local problems = check_form(form.schema, r.content)
		if #problems == 0 then return r.content end
		if attempt == tries then
			error(sformat("the answer was still not valid after %d tries: %s", tries, concat(problems, "; ")), 0)
		end
		ask = message .. "\n\nPlease correct: " .. concat(problems, "; ") .. "."
	end
end

-- ---- steps ---------------------------------------------------------------------------------

local function kind_of(st)
	local found
	for _, k in next, KINDS do
		if st[k] ~= nil then
			if found then error(sformat("has both %s and %s (one kind per step)", found, k), 0) end
			found = k
		end
	end
	if not found then error("has none of call, builtin, skill, lua, form", 0) end
	return found
end

local function builtin_fn(name)
	if not BUILTINS[name] then error(sformat("builtin %q is not one of the functions workflows may use", tostring(name)), 0) end
	local f = G
	for seg in name:gmatch("[^%.]+") do f = f[seg] end
	return f
end

local RUN = {}
function RUN.call(st, ctx)
	local c = render(st.call, ctx)
	if type(c) ~= "table" or type(c.server) ~= "string" or type(c.tool) ~= "string" then
		error("call needs server and tool", 0)
	end
	return mcp_call(c.server, c.tool, c.args or {})
end
function RUN.builtin(st, ctx)
	local b = st.builtin
	local name = type(b) == "table" and b.name or b
	local f = builtin_fn(name)
	local args = render(type(b) == "table" and b.args or st.args or {}, ctx)
	if type(args) ~= "table" then args = { args } end
	return f(G.table.unpack(args, 1, #args))
end
function RUN.skill(st, ctx)
	if type(st.skill) ~= "string" then error("skill must be a skill name", 0) end
	local m = sandbox_require("skills." .. st.skill)
	local f = m
	if type(m) == "table" then f = m.run or m.main end
	if type(f) ~= "function" then error("skill " .. st.skill .. " is not callable", 0) end
	return f(render(st.args or {}, ctx))
end
function RUN.lua(st, ctx, label) return eval(st.lua, ctx, label) end
function RUN.form(st, ctx) return run_form(st.form, ctx) end

local function check_inputs(def, inputs)
	local spec = def.inputs
	if type(spec) ~= "table" then return end
	for name, p in next, spec do
		local v = inputs[name]
		if is_null(v) and type(p) == "table" and p.default ~= nil then
			inputs[name] = p.default
		elseif is_null(v) and type(p) == "table" and p.required == true then
			error(sformat("workflow %s: input %s is required", tostring(def.name), name), 0)
		elseif not is_null(v) and type(p) == "table" then
			local why = check_value(name, v, p)
			if why then error(sformat("workflow %s: input %s", tostring(def.name), why), 0) end
		end
	end
end

-- Before the first step (before anyone is asked anything): every call step whose server and
-- tool are written out (no ${...}) names a configured server that has that tool, callable
-- here. mcp.tools waits for a server that is still starting, within the execution's time.
local function check_calls(def, name)
	if not mcp_tools then return end
	local listed = {}
	for i = 1, #def.steps do
		local st = def.steps[i]
		local c = type(st) == "table" and st.call or nil
		if type(c) == "table" and type(c.server) == "string" and type(c.tool) == "string"
			and not sfind(c.server, "${", 1, true) and not sfind(c.tool, "${", 1, true) then
			local label = sformat("workflow %s, step %d%s (call)", name, i,
				st.id ~= nil and sformat(" %q", tostring(st.id)) or "")
			local list = listed[c.server]
			if list == nil then
				local ok, r = pcall(mcp_tools, c.server)
				if not ok then
					r = tostring(r):gsub("^mcp%.tools: ", "")
					error(sformat("%s: %s; nothing was run (a workflow checks its servers and tools first)", label, r), 0)
				end
				list = {}
				for _, t in next, r do
					if type(t) == "table" then
						if t.name ~= nil then list[t.name] = true end
						if t.lua_name ~= nil then list[t.lua_name] = true end
					end
				end
				listed[c.server] = list
			end
			if not list[c.tool] then
				error(sformat("%s: server %q has no tool %q that code may call (search_tools lists them); "
					.. "nothing was run (a workflow checks its servers and tools first)", label, c.server, c.tool), 0)
			end
		end
	end
end

function run_workflow(def, inputs)
	if type(def) ~= "table" or type(def.steps) ~= "table" then
		error("run_workflow: the definition must be a table with steps", 2)
	end
	inputs = type(inputs) == "table" and inputs or {}
	check_inputs(def, inputs)
	local name = tostring(def.name or "workflow")
	check_calls(def, name)
	local ctx = { inputs = inputs, steps = {} }
	local last
	for i = 1, #def.steps do
		local st = def.steps[i]
		local id = type(st) == "table" and st.id or nil
		local label = sformat("workflow %s, step %d%s", name, i, id and sformat(" %q", tostring(id)) or "")
		if type(st) ~= "table" then error(label .. ": a step must be an object", 0) end
		local ok, kind = pcall(kind_of, st)
		if not ok then error(label .. " " .. kind, 0) end
		local run = true
		if st.when ~= nil then
			local wok, w = pcall(eval, st.when, ctx, label .. " when")
			if not wok then error(sformat("%s (when): %s", label, tostring(w)), 0) end
			run = w ~= false and w ~= nil and not is_null(w)
		end
		if run then
			local sok, v = pcall(RUN[kind], st, ctx, label)
			if not sok then
				error(sformat("%s (%s): %s", label, kind, type(v) == "string" and v or text_of(v)), 0)
			end
			last = v
			if id ~= nil then ctx.steps[id] = v end
		end
	end
	if def.output ~= nil then return render(def.output, ctx) end
	return last
end
