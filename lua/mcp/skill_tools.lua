-- mcp/skill_tools.lua - the skill tools (save_skill, load_skill, list_skills, delete_skill,
-- skill_history, restore_skill), the host calls that sandbox code uses for skills, and the
-- tools that published skills become.
--
-- A published skill runs like execute_code: a fresh sandbox with the default limits, whose code
-- requires the skill and calls it with the tool arguments (the module itself if it returns a
-- function, else its `run`). Its return value becomes the tool result: MCP content blocks pass
-- through, a string becomes a text block, other values become structuredContent plus their JSON
-- as text. A Lua error becomes an isError result carrying the message.

local mb = mb
local null = mb.null
local cfg = mb.config
local skills = require("mcp.skills")
local fmt = require("mcp.skill_format")

local M = {}

local lint_mod = require("mcp.skill_lint")

local function obj(props, required)
  return { type = "object", properties = props, required = required and mb.array(required) or nil,
           additionalProperties = false }
end


local PARAMS_SCHEMA = {
  type = "array",
  description = "The skill's parameters, documented in its header and used for the tool schema",
  items = obj({ name = { type = "string" }, type = { type = "string" },
                description = { type = "string" }, optional = { type = "boolean" } }, { "name" }),
}

-- The tools whose success is a change the audit trail records (mcp/audit.lua).
local AUDITED = { save_skill = "skill_save", delete_skill = "skill_delete", restore_skill = "skill_restore" }

function M.init(tools)
  local check_args = tools.check_args
  local tool_error, structured = tools.tool_error, tools.structured_result

  local function wrap(name, allowed, fn)
    return function(args, request)
      local bad = check_args(args, allowed, name)
      if bad then return tool_error(bad) end
      local res, err, line = fn(args, request.tenant or "default", request)
      if res == nil then
        local sc = { error = err }
        if line then sc.error_line = line end
        return tool_error(err, sc)
      end
      local kind = AUDITED[name]
      if kind then tools.audit.record(kind, request, args.name, { version = res.version, via = name }) end
      return structured(res)
    end
  end

  tools.register({
    name = "save_skill",
    title = "Save a skill",
    description = "Save reusable Lua code as a skill, so later executions can call it with "
      .. "require(\"skills.<name>\") or skills.<name>. The code is a Lua module: it returns a "
      .. "function or a table of functions. It must compile; the file is written atomically to the "
      .. "skills directory and every version is kept (skill_history). tool=true also publishes it "
      .. "as an MCP tool called with its parameters.",
    inputSchema = obj({
      name = { type = "string", pattern = fmt.NAME_PATTERN, maxLength = 64 },
      code = { type = "string", description = "Lua 5.4 module source" },
      description = { type = "string", description = "What the skill does (first line is the summary)" },
      params = PARAMS_SCHEMA,
      returns = { type = "string", description = "What it returns" },
      tool = { type = "boolean", description = "Publish as an MCP tool" },
      title = { type = "string", description = "Tool title when published" },
      input_schema = { type = "object", description = "Tool input schema (default: from params)" },
      output_schema = { type = "object", description = "Tool output schema" },
      prompt = { type = "boolean", description = "Publish as an MCP prompt (params are its arguments)" },
      resource = { type = "string", description = "Publish as an MCP resource with this URI ({name} placeholders make a template)" },
      mime_type = { type = "string", description = "MIME type of the resource" },
      examples = { type = "array", description = "Examples the skill must pass before it is saved "
        .. "(also -- @example lines of the code's header): {input, output} calls the skill with input; "
        .. "{call = \"field\", input = [args...], output} calls that function of a table skill",
        items = obj({ input = { description = "the argument (with call: the array of arguments)" },
                      output = { description = "the value the skill must return (compared as JSON)" },
                      call = { type = "string" } }, { "input", "output" }) },
    }, { "name", "code", "description" }),
    annotations = { title = "Save a skill", readOnlyHint = false, destructiveHint = false,
                    idempotentHint = true, openWorldHint = false },
  }, wrap("save_skill", { name = true, code = true, description = true, params = true,
    returns = true, tool = true, title = true, input_schema = true, output_schema = true,
    prompt = true, resource = true, mime_type = true, examples = true },
    function(args, tenant, request)
      local res, err, line = skills.save(tenant, args, nil, function(spec) return request:execute(spec) end)
      if not res then return nil, err, line end
      -- luacheck's warnings on the file as written (its line numbers): only here, not for saves
      -- from sandbox code (mcp/skill_lint.lua says why)
      local saved = skills.load(tenant, res.name)
      local lint = saved and saved.code and lint_mod.check(saved.path or (res.name .. ".lua"), saved.code)
      if lint then
        res.warnings = mb.array(lint.warnings or {})
        res.warnings_note = lint.note
      end
      return res
    end))

  tools.register({
    name = "load_skill",
    title = "Load a skill",
    description = "A skill's source code (the version in use) and metadata: description, params, "
      .. "version, status (an edited file that does not compile shows its error and line while the "
      .. "last good version stays in use).",
    inputSchema = obj({ name = { type = "string" } }, { "name" }),
    annotations = { title = "Load a skill", readOnlyHint = true, openWorldHint = false },
  }, wrap("load_skill", { name = true }, function(args, tenant) return skills.load(tenant, args.name) end))

  tools.register({
    name = "list_skills",
    title = "List skills",
    description = "Skills with their one-line descriptions and parameters, optionally filtered by a "
      .. "query matched against names and descriptions; also files that could not be read as skills.",
    inputSchema = obj({ query = { type = "string" } }),
    annotations = { title = "List skills", readOnlyHint = true, openWorldHint = false },
  }, wrap("list_skills", { query = true }, function(args, tenant) return skills.list(tenant, args.query) end))

  tools.register({
    name = "delete_skill",
    title = "Delete a skill",
    description = "Delete a skill's file(s). Its versions stay in the history and restore_skill "
      .. "brings one back.",
    inputSchema = obj({ name = { type = "string" } }, { "name" }),
    annotations = { title = "Delete a skill", readOnlyHint = false, destructiveHint = true,
                    idempotentHint = false, openWorldHint = false },
  }, wrap("delete_skill", { name = true }, function(args, tenant) return skills.delete(tenant, args.name) end))

  tools.register({
    name = "skill_history",
    title = "Skill history",
    description = "Every saved or edited version of a skill (newest first), or with version=N "
      .. "that version's source.",
    inputSchema = obj({ name = { type = "string" }, version = { type = "integer", minimum = 1 } }, { "name" }),
    annotations = { title = "Skill history", readOnlyHint = true, openWorldHint = false },
  }, wrap("skill_history", { name = true, version = true },
    function(args, tenant) return skills.history(tenant, args.name, args.version) end))

  tools.register({
    name = "restore_skill",
    title = "Restore a skill version",
    description = "Write an earlier version of a skill back to its file (also after delete_skill); it "
      .. "becomes a new version. Only a version that compiled can be restored (skill_history marks them).",
    inputSchema = obj({ name = { type = "string" }, version = { type = "integer", minimum = 1 } },
      { "name", "version" }),
    annotations = { title = "Restore a skill version", readOnlyHint = false, destructiveHint = false,
                    idempotentHint = true, openWorldHint = false },
  }, wrap("restore_skill", { name = true, version = true },
    function(args, tenant) return skills.restore(tenant, args.name, args.version) end))

  -- host calls from sandbox code
  tools.host_calls.skill_source = function(a, request)
    return skills.source(request.tenant or "default", a.name, a.optional == true)
  end
  tools.host_calls.save_skill = function(a, request)
    local res, err, line = skills.save(request.tenant or "default", a)
    if not res then return nil, "save_skill: " .. err .. (line and "" or "") end
    tools.audit.record("skill_save", request, a.name, { version = res.version, via = "code" })
    return res
  end
  tools.host_calls.load_skill = function(a, request)
    local res, err = skills.load(request.tenant or "default", a.name)
    if not res then return nil, "load_skill: " .. err end
    return res
  end
  tools.host_calls.list_skills = function(a, request)
    local res, err = skills.list(request.tenant or "default", a.query)
    if not res then return nil, "list_skills: " .. err end
    return res
  end

  -- published skills as tools
  local defs = {} -- tenant/name@version -> tool entry (cached so tools/list does not rebuild them)
  tools.providers[#tools.providers + 1] = function(tenant)
    local out, keep = {}, {}
    skills.get_tenant(tenant) -- a tenant's skills are indexed on first use
    for _, e in ipairs(skills.published(tenant)) do
      local key = tenant .. "/" .. e.name .. "@" .. tostring(e.version)
      local t = defs[key] or M.tool_entry(tools, e)
      keep[key] = t
      out[#out + 1] = t
    end
    for k, v in pairs(defs) do -- other tenants' entries stay cached
      if k:sub(1, #tenant + 1) ~= tenant .. "/" then keep[k] = v end
    end
    defs = keep
    return out
  end
  tools.stats_providers.skills = function(tenant) return skills.count(tenant) end
  skills.start()
end

---------------------------------------------------------------------------------------------
-- running a published skill

local CONTENT_TYPES = { text = true, image = true, audio = true, resource = true, resource_link = true }

local function is_array(v)
  return type(v) == "table" and (getmetatable(v) == "json.array" or (#v > 0 and next(v, #v) == nil))
end

local function check_block(b, i)
  if type(b) ~= "table" or not CONTENT_TYPES[b.type] then
    return string.format("content block %d needs a type: text, image, audio, resource or resource_link", i)
  end
  if b.type == "text" and type(b.text) ~= "string" then
    return string.format("content block %d (text) needs a string text", i)
  end
  if (b.type == "image" or b.type == "audio") and (type(b.data) ~= "string" or type(b.mimeType) ~= "string") then
    return string.format("content block %d (%s) needs data (base64) and mimeType", i, b.type)
  end
  if b.type == "resource" and (type(b.resource) ~= "table" or type(b.resource.uri) ~= "string"
      or (type(b.resource.text) ~= "string" and type(b.resource.blob) ~= "string")) then
    return string.format("content block %d (resource) needs resource.uri and resource.text or resource.blob", i)
  end
  if b.type == "resource_link" and (type(b.uri) ~= "string" or type(b.name) ~= "string") then
    return string.format("content block %d (resource_link) needs uri and name", i)
  end
end

local function all_blocks(list)
  if not is_array(list) then return false end
  for _, b in ipairs(list) do
    if type(b) ~= "table" or not CONTENT_TYPES[b.type] then return false end
  end
  return true
end

-- Turns what a skill returned into a CallToolResult.
function M.shape(value, has_output_schema)
  local function err(msg) return { content = { { type = "text", text = msg } }, isError = true } end
  if value == nil or value == null then
    return { content = mb.array({}) }
  end
  if type(value) == "string" then
    return { content = { { type = "text", text = value } } }
  end
  if type(value) == "table" and not is_array(value) and is_array(value.content) then
    for i, b in ipairs(value.content) do
      local e = check_block(b, i)
      if e then return err("the skill returned an invalid result: " .. e) end
    end
    return { content = value.content, structuredContent = value.structuredContent,
             isError = value.isError == true }
  end
  if type(value) == "table" and not is_array(value) and CONTENT_TYPES[value.type] then
    local e = check_block(value, 1)
    if e then return err("the skill returned an invalid result: " .. e) end
    return { content = { value } }
  end
  if all_blocks(value) then
    for i, b in ipairs(value) do
      local e = check_block(b, i)
      if e then return err("the skill returned an invalid result: " .. e) end
    end
    return { content = value }
  end
  local text = mb.json_encode(value)
  local r = { content = { { type = "text", text = text } } }
  if type(value) == "table" and not is_array(value) then
    r.structuredContent = value
  elseif has_output_schema then
    r.structuredContent = { result = value }
  end
  return r
end

local JSON_TYPES = { string = "string", number = "number", integer = "number", boolean = "boolean",
                     object = "table", array = "table" }

-- Checks required arguments and the declared types of top-level properties.
local function validate(schema, args)
  if type(schema) ~= "table" then return end
  for _, r in ipairs(schema.required or {}) do
    if args[r] == nil or args[r] == null then
      return string.format("invalid arguments: %s is required", r)
    end
  end
  for k, v in pairs(args) do
    local p = schema.properties and schema.properties[k]
    if not p and schema.additionalProperties == false then
      return string.format("invalid arguments: unknown argument %q", tostring(k))
    end
    local want = p and type(p.type) == "string" and JSON_TYPES[p.type]
    if want and v ~= null and type(v) ~= want then
      return string.format("invalid arguments: %s must be %s %s", k,
        p.type:match("^[aeiou]") and "an" or "a", p.type)
    end
    if p and p.type == "integer" and type(v) == "number" and math.type(v) ~= "integer" then
      return string.format("invalid arguments: %s must be an integer", k)
    end
  end
end

M.CANCELLED = {}

-- Runs a published skill in a fresh sandbox with the default limits: requires it and calls it
-- (the module, or its `run`) with args. Returns its value, or nil and an error message, or
-- M.CANCELLED when the client cancelled the request.
function M.run_skill(tools, request, name, args)
  local code = string.format([[
local __args = __mb_tool_args
__mb_tool_args = nil
local m = require("skills.%s")
local f = m
if type(m) == "table" then f = m.run or m.main end
if type(f) ~= "function" then
  error("skill %s must return a function, or a table with a run function, to be called", 0)
end
return f(__args)
]], name, name)
  local ctx = mb.json_encode({ __mb_tool_args = args })
  local res, err = request:execute({
    code = code, context_json = ctx, context_internal = true, -- not the client's context_vars
    -- a task (the tasks extension, docs/tasks.md) may run up to task_max_timeout_ms
    timeout_ms = request.entry and request.entry.task and request.entry.task.timeout_ms or cfg.default_timeout_ms,
    memory_bytes = cfg.default_memory_mb * 1048576, instruction_limit = cfg.default_instruction_limit,
    tool = name,
  })
  if not res then
    if err then return nil, err end
    return M.CANCELLED
  end
  tools.record(res, request.tenant)
  local sc = res.structured_json and mb.json_decode(mb.json_raw_text(res.structured_json))
  if not sc then return nil, "the skill's result could not be read" end
  if not sc.success then
    local msg = tostring(sc.error or "error")
    if sc.output and sc.output ~= "" then msg = msg .. "\noutput:\n" .. sc.output end
    return nil, msg
  end
  if sc.result == null then return nil end
  return sc.result
end

function M.tool_entry(tools, e)
  local tool_error = tools.tool_error
  local input_schema = fmt.input_schema({ params = e.params or {}, tool = e.tool }, mb.array)
  local output_schema = e.tool.output_schema
  local definition = {
    name = e.name,
    title = e.tool.title or e.name,
    description = e.description or ("Skill " .. e.name),
    inputSchema = input_schema,
    outputSchema = output_schema,
    annotations = { title = e.tool.title or e.name, readOnlyHint = false, openWorldHint = false },
    -- @task optional|required: run as a task when the client declared the tasks extension
    execution = e.tool.task and { taskSupport = e.tool.task } or nil,
  }
  local function handler(args, request)
    local bad = validate(input_schema, args)
    if bad then return tool_error(bad) end
    local value, err = M.run_skill(tools, request, e.name, args)
    if err then return tool_error(err) end
    if value == M.CANCELLED then return nil end
    return M.shape(value, output_schema ~= nil)
  end
  return { definition = definition, handler = handler, skill = e.name }
end

return M
