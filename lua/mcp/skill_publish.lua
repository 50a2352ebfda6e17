-- mcp/skill_publish.lua - skills published as MCP prompts and resources.
--
-- A skill marked `@prompt` (SKILL.md: `prompt: true`) is listed by prompts/list, with its
-- @param lines as the prompt's arguments; prompts/get runs it in a fresh sandbox with the
-- arguments and turns what it returns into messages: a string is one user message, a content
-- block is one user message holding it, an array of {role, content} is the messages, and a table
-- with `messages` passes through (with its `description`).
--
-- A skill marked `@resource <uri> [mimeType]` (SKILL.md: `resource: <uri>`, `mime_type:`) is a
-- resource; a URI with {placeholders} (RFC 6570 level 1) is a resource template. resources/read
-- runs the skill with {uri = ..., <placeholder> = value, ...}: a string is the text, a table
-- {text = ...} or {blob = <base64>} gives that content (with its mimeType), and an array of such
-- tables is several contents.
--
-- The resource methods of mcp/workspace_tools.lua ask tools.resource_providers, so this module
-- only adds a provider.

local mb = mb
local null = mb.null
local skills = require("mcp.skills")
local skill_tools = require("mcp.skill_tools")
local clip = require("mcp.catalog_text").clip

local M = {}

local function is_array(v)
  return type(v) == "table" and (getmetatable(v) == "json.array" or (#v > 0 and next(v, #v) == nil))
end

-- "test://template/{id}/data" -> Lua pattern and the placeholder names
local function template_pattern(uri)
  local names = {}
  local pat = uri:gsub("([%^%$%(%)%%%.%[%]%*%+%-%?])", "%%%1")
  pat = pat:gsub("{([%w_]+)}", function(name)
    names[#names + 1] = name
    return "([^/]+)"
  end)
  return "^" .. pat .. "$", names
end

local function prompt_messages(value)
  local function user(content) return { role = "user", content = content } end
  if type(value) == "string" then
    return { messages = { user({ type = "text", text = value }) } }
  end
  if type(value) ~= "table" then
    return nil, "a prompt skill must return a string, a content block, messages, or {messages = ...}"
  end
  if not is_array(value) and is_array(value.messages) then
    return { description = value.description, messages = value.messages }
  end
  if not is_array(value) and type(value.type) == "string" then
    return { messages = { user(value) } }
  end
  if is_array(value) then
    for i, m in ipairs(value) do
      if type(m) ~= "table" or (m.role ~= "user" and m.role ~= "assistant") or type(m.content) ~= "table" then
        return nil, string.format("message %d needs role (user or assistant) and a content block", i)
      end
    end
    return { messages = value }
  end
  return nil, "a prompt skill must return a string, a content block, messages, or {messages = ...}"
end

local function resource_contents(uri, mime, value)
  local function one(v)
    if type(v) == "string" then return { uri = uri, mimeType = mime or "text/plain", text = v } end
    if type(v) == "table" and (type(v.text) == "string" or type(v.blob) == "string") then
      return { uri = v.uri or uri, mimeType = v.mimeType or mime, text = v.text, blob = v.blob }
    end
  end
  if is_array(value) then
    local out = {}
    for i, v in ipairs(value) do
      out[i] = one(v)
      if not out[i] then return nil, string.format("content %d needs text or blob", i) end
    end
    return out
  end
  local c = one(value)
  if not c then return nil, "a resource skill must return a string, {text=} or {blob=}, or an array of them" end
  return { c }
end

function M.init(tools)
  local rpc = function(...) return tools.rpc_error(...) end

  tools.methods["prompts/list"] = function(params, request)
    local out = {}
    for _, e in ipairs(skills.published_as(request.tenant or "default", "prompt")) do
      local args = {}
      for _, p in ipairs(e.params or {}) do
        args[#args + 1] = { name = p.name, description = p.description ~= "" and p.description or nil,
                            required = not p.optional }
      end
      out[#out + 1] = { name = e.name, title = e.prompt.title, description = e.description,
                        arguments = mb.array(args) }
    end
    return { prompts = mb.array(out) }
  end

  tools.methods["prompts/get"] = function(params, request)
    local name = params.name
    if type(name) ~= "string" then error(rpc(-32602, "prompts/get: params.name must be a string")) end
    local entry
    for _, e in ipairs(skills.published_as(request.tenant or "default", "prompt")) do
      if e.name == name then entry = e end
    end
    if not entry then error(rpc(-32602, "Unknown prompt: " .. clip(name))) end
    local args = params.arguments
    if args == nil or args == null then args = {} end
    if type(args) ~= "table" then error(rpc(-32602, "prompts/get: params.arguments must be an object")) end
    for _, p in ipairs(entry.params or {}) do
      if not p.optional and (args[p.name] == nil or args[p.name] == null) then
        error(rpc(-32602, string.format("prompts/get %s: argument %s is required", name, p.name)))
      end
    end
    local value, err = skill_tools.run_skill(tools, request, name, args)
    if value == skill_tools.CANCELLED then return nil end
    if err then error(rpc(-32603, "prompts/get " .. name .. ": " .. err)) end
    local result, serr = prompt_messages(value)
    if not result then error(rpc(-32603, "prompts/get " .. name .. ": " .. serr)) end
    if result.description == nil then result.description = entry.description end
    return result
  end

  tools.resource_providers[#tools.resource_providers + 1] = {
    list = function(tenant)
      local out = {}
      for _, e in ipairs(skills.published_as(tenant, "resource")) do
        if not e.resource.template then
          out[#out + 1] = { uri = e.resource.uri, name = e.name, title = e.name,
                            description = e.description, mimeType = e.resource.mimeType }
        end
      end
      return out
    end,
    templates = function(tenant)
      local out = {}
      for _, e in ipairs(skills.published_as(tenant, "resource")) do
        if e.resource.template then
          out[#out + 1] = { uriTemplate = e.resource.uri, name = e.name, title = e.name,
                            description = e.description, mimeType = e.resource.mimeType }
        end
      end
      return out
    end,
    -- returns contents, or nil when no skill serves this uri
    read = function(uri, request)
      for _, e in ipairs(skills.published_as(request.tenant or "default", "resource")) do
        local args
        if e.resource.template then
          local pat, names = template_pattern(e.resource.uri)
          local caps = { uri:match(pat) }
          if caps[1] then
            args = { uri = uri }
            for i, n in ipairs(names) do args[n] = caps[i] end
          end
        elseif e.resource.uri == uri then
          args = { uri = uri }
        end
        if args then
          local value, err = skill_tools.run_skill(tools, request, e.name, args)
          if value == skill_tools.CANCELLED then return nil end
          if err then error(rpc(-32603, "resources/read " .. uri .. ": " .. err)) end
          local contents, cerr = resource_contents(uri, e.resource.mimeType, value)
          if not contents then error(rpc(-32603, "resources/read " .. uri .. ": " .. cerr)) end
          return contents
        end
      end
    end,
  }
end

return M
