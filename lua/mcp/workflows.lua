-- mcp/workflows.lua - declarative workflows: files in workflows_dir, checked, reloaded when they
-- change, listed and run as MCP tools (docs/workflows.md).
--
-- A workflow file (*.json, *.yaml, *.yml; YAML through libyaml, src/yaml.c) describes named
-- inputs, steps and an output. This module only loads and checks definitions; running one is an
-- execution whose code calls run_workflow (lua/prelude/workflow.lua) with the definition and the
-- inputs as context, so a workflow has exactly the limits, PII policy and upstream policies of
-- execute_code. Tools: list_workflows, run_workflow, and each workflow with `tool: true` under
-- its own name. Workflows are the server's (like the catalog), shared by every tenant; what they
-- touch (workspace, skills, vault) is the calling tenant's.
--
-- The upstream servers a workflow calls are checked before it is published and before it runs:
-- a workflow whose server is not configured, is failing, or lacks the tool is listed with the
-- reason and not published as a tool; it is published when the server comes up with the tool
-- (mcp/upstream.lua tells us of every change). A run waits for a server that is still starting
-- and refuses, before any step (so before any form asks the person anything), when a server or
-- tool is missing.

local mb = mb
local null = mb.null
local cfg = mb.config
local sfmt = string.format
local clip = require("mcp.catalog_text").clip

local M = { by_name = {}, problems = {} }
local MAX_BYTES = 1048576
local KINDS = { call = true, builtin = true, skill = true, lua = true, form = true }
local INPUT_TYPES = { string = true, number = true, integer = true, boolean = true, object = true, array = true }

local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end
local function is_array(v)
  return type(v) == "table" and (getmetatable(v) == "json.array" or (next(v) == nil or v[1] ~= nil))
end
local function valid_name(n) return type(n) == "string" and #n <= 64 and n:match("^[A-Za-z_][A-Za-z0-9_]*$") ~= nil end

-- The problems of a definition, as "where: what" texts (empty when it is fine).
local function check(def, file)
  local p = {}
  local function bad(fmt, ...) p[#p + 1] = sfmt(fmt, ...) end
  if not is_object(def) then return { file .. ": the file must hold an object (name, steps, ...)" } end
  if not valid_name(def.name) then bad("name must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most 64), got %s", tostring(def.name)) end
  if def.description ~= nil and type(def.description) ~= "string" then bad("description must be text") end
  if def.tool ~= nil and type(def.tool) ~= "boolean" then bad("tool must be true or false") end
  for _, k in ipairs({ "timeout_ms", "memory_mb", "instruction_limit" }) do
    if def[k] ~= nil and (math.type(def[k]) ~= "integer" or def[k] < 1) then bad("%s must be a positive integer", k) end
  end
  if def.inputs ~= nil then
    if not is_object(def.inputs) then bad("inputs must be an object of name: {type, description, required}")
    else
      for name, spec in pairs(def.inputs) do
        if not valid_name(name) then bad("input %q: names are identifiers", tostring(name))
        elseif not is_object(spec) then bad("input %s must be an object", name)
        elseif spec.type ~= nil and not INPUT_TYPES[spec.type] then bad("input %s: unknown type %s", name, tostring(spec.type)) end
      end
    end
  end
  if not is_array(def.steps) or #def.steps == 0 then
    bad("steps must be a non-empty list")
  else
    local ids = {}
    for i, st in ipairs(def.steps) do
      local where = sfmt("step %d", i)
      if not is_object(st) then bad("%s must be an object", where)
      else
        if st.id ~= nil then
          if not valid_name(st.id) then bad("%s: id must be an identifier", where)
          elseif ids[st.id] then bad("%s: id %s is used twice", where, st.id) end
          ids[st.id or ""] = true
          where = sfmt("step %d %q", i, tostring(st.id))
        end
        local kinds = {}
        for k in pairs(st) do if KINDS[k] then kinds[#kinds + 1] = k end end
        table.sort(kinds)
        if #kinds ~= 1 then
          bad("%s needs exactly one of call, builtin, skill, lua, form (has %s)", where,
            #kinds == 0 and "none" or table.concat(kinds, ", "))
        elseif kinds[1] == "form" and not (is_object(st.form) and is_object(st.form.schema)) then
          bad("%s: form needs a schema (a flat JSON Schema object)", where)
        elseif kinds[1] == "call" and not (is_object(st.call) and type(st.call.server) == "string" and type(st.call.tool) == "string") then
          bad("%s: call needs server and tool", where)
        elseif (kinds[1] == "lua" or kinds[1] == "skill") and type(st[kinds[1]]) ~= "string" then
          bad("%s: %s must be text", where, kinds[1])
        end
        if st.when ~= nil and type(st.when) ~= "string" then bad("%s: when must be a Lua expression", where) end
      end
    end
  end
  for i, s in ipairs(p) do p[i] = file .. ": " .. s end
  return p
end

local function has_form(def)
  for _, st in ipairs(def.steps) do if is_object(st) and st.form ~= nil then return true end end
  return false
end

local function input_schema(def)
  local props, req = {}, {}
  for name, spec in pairs(def.inputs or {}) do
    local p = {}
    for k, v in pairs(spec) do if k ~= "required" then p[k] = v end end
    props[name] = p
    if spec.required == true then req[#req + 1] = name end
  end
  table.sort(req)
  return { type = "object", properties = props, required = #req > 0 and mb.array(req) or nil }
end

---------------------------------------------------------------------------------------------
-- the upstream servers and tools a workflow needs

-- The call steps whose server and tool are written out (no ${...}): {i, id, server, tool}.
local function needs(def)
  local out = {}
  for i, st in ipairs(def.steps) do
    local c = is_object(st) and st.call
    if is_object(c) and type(c.server) == "string" and type(c.tool) == "string"
      and not c.server:find("${", 1, true) and not c.tool:find("${", 1, true) then
      out[#out + 1] = { i = i, id = st.id, server = c.server, tool = c.tool }
    end
  end
  return out
end

local function step_label(n)
  return sfmt("step %d%s", n.i, n.id and sfmt(" %q", tostring(n.id)) or "")
end

-- Whether def's servers and tools are there: nil, or a list of "step N: reason" texts, and the
-- servers still starting (for a run to wait for). Without the gateway (the unit tests' stand-in)
-- nothing is checked.
local function missing(def)
  local up = M.tools and M.tools.upstream
  if not (up and up.availability) then return nil, {} end
  local out, starting = {}, {}
  for _, n in ipairs(needs(def)) do
    local st, why = up.availability(n.server, n.tool)
    if st == "starting" then starting[#starting + 1] = n.server
    elseif not st then out[#out + 1] = sfmt("%s calls %s.%s: %s", step_label(n), n.server, n.tool, why) end
  end
  return #out > 0 and out or nil, starting
end

local function servers_of(def)
  local seen, out = {}, {}
  for _, n in ipairs(needs(def)) do
    if not seen[n.server] then seen[n.server] = true; out[#out + 1] = n.server end
  end
  table.sort(out)
  return out
end

-- The names of the workflows published as tools now, as one text (to notice a change).
local function published_key()
  local names = {}
  for name, w in pairs(M.by_name) do
    if w.def.tool == true and not missing(w.def) then names[#names + 1] = name end
  end
  table.sort(names)
  return table.concat(names, "\n")
end

-- After a change of the upstream servers (or of the files): tools/list_changed when the set of
-- published workflows changed.
local function republish(force)
  local key = published_key()
  if force or key ~= M.published then
    M.published = key
    if M.tools then M.tools.list_changed() end
  end
end

---------------------------------------------------------------------------------------------
-- loading

local function parse(name, text)
  if name:match("%.json$") then return mb.json_decode(text) end
  return mb.yaml_decode(text)
end

local function scan()
  local dir = M.dir
  local by_name, problems = {}, {}
  for _, e in ipairs(mb.fs.list(dir) or {}) do
    local n = e.name
    if e.type == "file" and not n:match("^%.") and (n:match("%.json$") or n:match("%.ya?ml$")) then
      local path = dir .. "/" .. n
      local text, err = mb.fs.read(path, MAX_BYTES)
      local def
      if text then def, err = parse(n, text) end
      if def == nil then
        -- (the file's name only: the server's paths are not for the clients to see)
        err = tostring(err)
        local at = err:find(path, 1, true)
        if at then err = err:sub(1, at - 1) .. n .. err:sub(at + #path) end
        problems[#problems + 1] = sfmt("%s: %s", n, err)
      else
        if is_object(def) and def.name == nil then def.name = n:match("^(.-)%.[^.]+$") end
        local p = check(def, n)
        if #p == 0 and by_name[def.name] then p = { sfmt("%s: a workflow named %s is also in %s", n, def.name, by_name[def.name].file) } end
        if #p > 0 then
          for _, x in ipairs(p) do problems[#problems + 1] = x end
        else
          by_name[def.name] = { def = def, file = n }
        end
      end
    end
  end
  table.sort(problems)
  for _, x in ipairs(problems) do mb.log("warning", "workflows: " .. x) end
  local before = {}
  for name, w in pairs(M.by_name) do if w.def.tool then before[name] = mb.json_encode(w.def) end end
  M.by_name, M.problems = by_name, problems
  local changed = false
  for name, w in pairs(by_name) do
    if w.def.tool then -- (a tool that is no longer one stays in before: a change)
      if before[name] ~= mb.json_encode(w.def) then changed = true end
      before[name] = nil
    end
  end
  republish(changed or next(before) ~= nil)
end

local timer
local function schedule_scan()
  if timer then timer:stop() end
  timer = mb.timer(100, function() timer = nil; scan() end)
end

---------------------------------------------------------------------------------------------
-- running

local RUN_CODE = "return run_workflow(__mb_workflow, __mb_inputs)"

-- Runs def with inputs for request. Returns the value, or nil and the error message, or
-- M.CANCELLED when the client cancelled.
M.CANCELLED = {}
function M.run(request, def, inputs)
  -- the workflow's own limits, within the configured maxima; a form waits for a person, so a
  -- workflow with one gets max_timeout_ms unless it says otherwise
  local timeout = math.min(def.timeout_ms or (has_form(def) and cfg.max_timeout_ms or cfg.default_timeout_ms),
    cfg.max_timeout_ms)
  -- its servers and tools first, before any step runs (a form would ask the person for nothing);
  -- a server still starting is waited for, within the workflow's timeout
  local gone, starting = missing(def)
  if not gone and #starting > 0 then
    local t0 = mb.now_ms()
    for _, name in ipairs(starting) do
      M.tools.upstream.wait_starting(name, math.max(0, timeout - (mb.now_ms() - t0)))
    end
    gone, starting = missing(def)
    if not gone and #starting > 0 then
      gone = { sfmt("upstream server %q is still starting after %d ms (the workflow's timeout_ms); "
        .. "try again in a moment", starting[1], timeout) }
    end
  end
  if gone then
    return nil, sfmt("workflow %s cannot run: %s. Nothing was run or asked; list_workflows shows "
      .. "what each workflow needs.", def.name, table.concat(gone, "; "))
  end
  local res, err = request:execute({
    code = RUN_CODE, context_json = mb.json_encode({ __mb_workflow = def, __mb_inputs = inputs or {} }),
    context_internal = true, -- the server's definition, not context_vars a client sent
    timeout_ms = timeout,
    memory_bytes = math.min(def.memory_mb or cfg.default_memory_mb, cfg.max_memory_mb) * 1048576,
    instruction_limit = math.min(def.instruction_limit or cfg.default_instruction_limit, cfg.max_instruction_limit),
    tool = def.name,
  })
  if not res then
    if err then return nil, err end
    return M.CANCELLED
  end
  M.tools.record(res, request.tenant)
  local sc = res.structured_json and mb.json_decode(mb.json_raw_text(res.structured_json))
  if not sc then return nil, "the workflow's result could not be read" end
  if not sc.success then return nil, tostring(sc.error or "error") end
  return sc.result
end

local function answer(tools, value, err)
  if value == M.CANCELLED then return nil end
  if err then return tools.tool_error(err) end
  local sc = is_object(value) and value or { result = value }
  return tools.structured_result(sc)
end

local function entry(tools, w)
  local def = w.def
  return {
    definition = {
      name = def.name, title = def.title or def.name,
      description = (def.description or ("Workflow " .. def.name)) .. " (workflow)",
      inputSchema = input_schema(def),
      annotations = { title = def.title or def.name, readOnlyHint = false, openWorldHint = true },
    },
    handler = function(args, request)
      return answer(tools, M.run(request, def, args))
    end,
    workflow = def.name,
  }
end

function M.init(tools)
  M.tools = tools
  M.dir = cfg.workflows_dir ~= "" and cfg.workflows_dir or (cfg.data_dir .. "/workflows")
  if not mb.fs.stat(M.dir) then
    local ok, err = mb.fs.mkdir(M.dir)
    if not ok then mb.log("warning", "workflows: cannot create " .. M.dir .. ": " .. tostring(err)) end
  end
  scan()
  if mb.watch then
    local h, werr = mb.watch(M.dir, schedule_scan)
    if not h then mb.log("info", "workflows: not watching " .. M.dir .. ": " .. tostring(werr)) end
    M.watch = h
  end

  local cache = {}
  -- upstream servers coming up, failing or changing their tools change what is published
  local up = require("mcp.upstream")
  if up.watch then up.watch(function() republish(false) end) end
  M.published = published_key()

  tools.providers[#tools.providers + 1] = function()
    local out = {}
    for name, w in pairs(M.by_name) do
      if w.def.tool == true and not missing(w.def) then
        if not cache[name] or cache[name].w ~= w then cache[name] = { w = w, e = entry(tools, w) } end
        out[#out + 1] = cache[name].e
      end
    end
    table.sort(out, function(a, b) return a.definition.name < b.definition.name end)
    return out
  end

  tools.register({
    name = "list_workflows",
    title = "List workflows",
    description = "The declarative workflows (JSON or YAML files in workflows_dir, for people who "
      .. "do not write Lua): name, description, inputs, steps and whether each is published as a "
      .. "tool; and the files that have problems. run_workflow runs one.",
    inputSchema = { type = "object", additionalProperties = false },
    annotations = { title = "List workflows", readOnlyHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = tools.check_args(args, {}, "list_workflows")
    if bad then return tools.tool_error(bad) end
    local list = {}
    for name, w in pairs(M.by_name) do
      local steps = {}
      for i, st in ipairs(w.def.steps) do
        local kind
        for k in pairs(KINDS) do if st[k] ~= nil then kind = k end end
        steps[i] = { id = st.id, kind = kind }
      end
      local gone = missing(w.def)
      list[#list + 1] = { name = name, description = w.def.description, file = w.file,
        tool = w.def.tool == true, inputs = input_schema(w.def), steps = mb.array(steps),
        servers = mb.array(servers_of(w.def)), available = not gone,
        unavailable = gone and mb.array(gone) or nil,
        published = w.def.tool == true and not gone }
    end
    table.sort(list, function(a, b) return a.name < b.name end)
    return tools.structured_result({ workflows = mb.array(list), count = #list,
      problems = mb.array(M.problems),
      -- the server's path, for its own user only (stdio, HTTP without tokens), as in get_execution_stats
      directory = (request.tenant or "default") == "default" and M.dir or nil })
  end)

  tools.register({
    name = "run_workflow",
    title = "Run a workflow",
    description = "Run a declarative workflow by name with its inputs (list_workflows shows them). "
      .. "It runs in the sandbox with the execute_code limits; form steps ask the user through "
      .. "the client (elicitation). Errors name the step.",
    inputSchema = { type = "object", properties = {
      name = { type = "string", description = "the workflow's name" },
      inputs = { type = "object", description = "its named inputs" },
    }, required = mb.array({ "name" }), additionalProperties = false },
    annotations = { title = "Run a workflow", readOnlyHint = false, openWorldHint = true },
  }, function(args, request)
    local bad = tools.check_args(args, { name = true, inputs = true }, "run_workflow")
    if bad then return tools.tool_error(bad) end
    if type(args.name) ~= "string" then return tools.tool_error("invalid arguments: name must be a string") end
    local w = M.by_name[args.name]
    if not w then
      local names = {}
      for n in pairs(M.by_name) do names[#names + 1] = n end
      table.sort(names)
      return tools.tool_error(sfmt("no workflow named %s (there are: %s)", clip(args.name),
        #names > 0 and table.concat(names, ", ") or "none; see list_workflows for files with problems"))
    end
    local inputs = args.inputs
    if inputs ~= nil and inputs ~= null and not is_object(inputs) then
      return tools.tool_error("invalid arguments: inputs must be an object")
    end
    return answer(tools, M.run(request, w.def, inputs ~= null and inputs or nil))
  end)
end

return M
