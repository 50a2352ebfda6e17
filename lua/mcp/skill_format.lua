-- mcp/skill_format.lua - reading and writing the two skill file formats (no I/O here).
--
-- A skill is either `<name>.lua`, whose leading comment block documents it:
--
--   --- Summarise a list of orders by status.
--   -- @param orders array the orders to summarise
--   -- @param field string? the field to group by (default "status")
--   -- @return table counts by status
--   -- @tool Order summary
--
-- or a directory `<name>/` holding `SKILL.md` (front matter `name`, `description`, as in Agent
-- Skills, plus optional `tool`, `title`, `input_schema`, `output_schema`) and `init.lua`.
-- `@tool` (or `tool: true`) publishes the skill as an MCP tool; its input schema is generated
-- from the @param lines unless `@input_schema {json}` gives one. This module parses both forms
-- into one metadata table, generates the header that save_skill writes, and compiles source to
-- report syntax errors with their line. `-- @example` lines are examples the skill must pass
-- (M.parse_example; run by mcp/skill_tests.lua).

local M = {}

M.NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"

function M.valid_name(name)
  return type(name) == "string" and #name <= 64 and name:match(M.NAME_PATTERN) ~= nil
end

local TYPE_SCHEMA = {
  string = "string", number = "number", integer = "integer", boolean = "boolean",
  table = "object", object = "object", array = "array", list = "array",
}

-- Splits text into lines (without their line ends).
local function lines(text)
  local out, pos = {}, 1
  while pos <= #text do
    local nl = text:find("\n", pos, true)
    local line = text:sub(pos, (nl or #text + 1) - 1)
    out[#out + 1] = line:gsub("\r$", "")
    if not nl then break end
    pos = nl + 1
  end
  return out
end

-- Parses "@param name type description" (type may end in "?", or the name may, or the text may
-- start with "(optional)"). Returns the param table or nil.
local function parse_param(rest)
  local name, ptype, desc = rest:match("^([%w_]+%??)%s+([%w_%.%[%]|]+%??)%s*(.*)$")
  if not name then
    name = rest:match("^([%w_]+%??)%s*$")
    if not name then return nil end
    ptype, desc = "any", ""
  end
  local optional = false
  if name:sub(-1) == "?" then name, optional = name:sub(1, -2), true end
  if ptype:sub(-1) == "?" then ptype, optional = ptype:sub(1, -2), true end
  if desc:match("^%(optional%)") then optional = true end
  return { name = name, type = ptype, description = desc, optional = optional }
end

-- Parses "@example [FIELD] INPUT -> EXPECTED": INPUT and EXPECTED are JSON (on one line). Without
-- FIELD the skill (a function, or its run) is called with INPUT; with FIELD (an identifier) its
-- field FIELD is called with the elements of INPUT, a JSON array, as arguments. The split is
-- at the first " -> " where both sides are JSON (a string may hold "->" itself).
-- Returns {call?, input, output} or nil, message.
function M.parse_example(rest, json_decode)
  local call, body = rest:match("^([%a_][%w_]*)%s+(.*)$")
  if not call or body:match("^%-%>") then call, body = nil, rest end
  local from = 1
  while true do
    local a, b = body:find("%s*%->%s*", from)
    if not a then break end
    local left, right = body:sub(1, a - 1), body:sub(b + 1)
    local input = left:match("%S") and json_decode(left)
    local output, oerr = nil, nil
    if input ~= nil then output, oerr = json_decode(right) end
    if input ~= nil and output ~= nil and not oerr then
      if call and (type(input) ~= "table" or (next(input) ~= nil and input[1] == nil)) then
        return nil, "@example " .. call .. " needs its arguments as a JSON array: @example "
          .. call .. ' ["a,b"] -> ...'
      end
      return { call = call, input = input, output = output }
    end
    from = b + 1
  end
  return nil, '@example needs INPUT -> EXPECTED, both JSON on one line: @example {"text": "a b"} -> {"words": 2}'
    .. ' (or FIELD [ARGS...] -> EXPECTED for a table of functions)'
end

-- Parses the leading comment block of Lua source. Returns meta, or nil and a message with the
-- line number. meta = { description, params = {...}, returns, tool = {title?, input_schema?,
-- output_schema?} or nil, header_lines = n }
function M.parse_header(code, json_decode)
  local meta = { params = {}, header_lines = 0 }
  local desc = {}
  local tags_started = false
  local ls = lines(code)
  local i = 1
  while i <= #ls and ls[i]:match("^%s*$") do i = i + 1 end
  if ls[i] and ls[i]:match("^#!") then i = i + 1 end
  while i <= #ls do
    local line = ls[i]
    local body = line:match("^%s*%-%-%-?(.*)$")
    if not body or line:match("^%s*%-%-%[=*%[") then break end
    body = body:gsub("^ ", "")
    local tag, rest = body:match("^@([%w_]+)%s*(.-)%s*$")
    if tag then
      tags_started = true
      if tag == "param" then
        local p = parse_param(rest)
        if not p then return nil, string.format("line %d: @param needs a name: @param name type description", i) end
        meta.params[#meta.params + 1] = p
      elseif tag == "return" or tag == "returns" then
        meta.returns = rest
      elseif tag == "tool" then
        meta.tool = meta.tool or {}
        if rest ~= "" then meta.tool.title = rest end
      elseif tag == "prompt" then
        meta.prompt = { title = rest ~= "" and rest or nil }
      elseif tag == "resource" then
        -- @resource <uri or uri template> [mimeType]
        local uri, mime = rest:match("^(%S+)%s*(%S*)")
        if not uri then
          return nil, string.format("line %d: @resource needs a URI: @resource test://x [text/plain]", i)
        end
        meta.resource = { uri = uri, mimeType = mime ~= "" and mime or nil,
                          template = uri:find("{", 1, true) ~= nil }
      elseif tag == "task" then
        -- @task optional|required: a published tool that runs as a task of the tasks extension
        if rest ~= "optional" and rest ~= "required" then
          return nil, string.format("line %d: @task must be optional or required", i)
        end
        meta.tool = meta.tool or {}
        meta.tool.task = rest
      elseif tag == "example" then
        local ex, eerr = M.parse_example(rest, json_decode)
        if not ex then return nil, string.format("line %d: %s", i, eerr) end
        ex.line = i
        meta.examples = meta.examples or {}
        meta.examples[#meta.examples + 1] = ex
      elseif tag == "input_schema" or tag == "output_schema" then
        local v, err = json_decode(rest)
        if type(v) ~= "table" then
          return nil, string.format("line %d: @%s must be a JSON object on one line%s", i, tag,
            err and (": " .. err) or "")
        end
        meta.tool = meta.tool or {}
        meta.tool[tag] = v
      end
    elseif not tags_started then
      desc[#desc + 1] = body:gsub("^ @", "@") -- make_header's escape of a line starting with "@"
    end
    meta.header_lines = i
    i = i + 1
  end
  -- the description is the text before the first tag; blank comment lines become line breaks
  local text = table.concat(desc, "\n"):gsub("^%s+", ""):gsub("%s+$", "")
  meta.description = text ~= "" and text or nil
  return meta
end

-- Splits "---\nkey: value\n---\nbody" front matter (a flat key: value subset of YAML).
function M.parse_front_matter(md, json_decode)
  local ls = lines(md)
  if ls[1] ~= "---" then
    return nil, "SKILL.md must start with front matter: a line '---', 'key: value' lines, a line '---'"
  end
  local fm, close = {}, nil
  for i = 2, #ls do
    local line = ls[i]
    if line == "---" then close = i break end
    if line:match("%S") and not line:match("^%s*#") then
      local k, v = line:match("^([%w_%-]+):%s*(.-)%s*$")
      if not k then
        return nil, string.format("SKILL.md line %d: expected 'key: value' (multi-line YAML values are not supported)", i)
      end
      local q = v:match('^"(.*)"$') or v:match("^'(.*)'$")
      fm[k] = q or v
    end
  end
  if not close then return nil, "SKILL.md: front matter is not closed by a '---' line" end
  local meta = { description = fm.description, params = {}, front = fm }
  if fm.tool == "true" or fm.tool == "yes" then
    meta.tool = { title = fm.title }
  end
  if fm.prompt == "true" or fm.prompt == "yes" then
    meta.prompt = { title = fm.title }
  end
  if fm.resource and fm.resource ~= "" then
    meta.resource = { uri = fm.resource, mimeType = fm.mime_type,
                      template = fm.resource:find("{", 1, true) ~= nil }
  end
  for _, key in ipairs({ "input_schema", "output_schema" }) do
    if fm[key] and fm[key] ~= "" then
      local v, err = json_decode(fm[key])
      if type(v) ~= "table" then
        return nil, string.format("SKILL.md: %s must be a JSON object on one line%s", key,
          err and (": " .. err) or "")
      end
      meta.tool = meta.tool or {}
      meta.tool[key] = v
    end
  end
  meta.body = table.concat(ls, "\n", close + 1)
  return meta
end

-- The input schema of a published skill: the declared one, else one made from @param lines.
function M.input_schema(meta, array)
  if meta.tool and meta.tool.input_schema then return meta.tool.input_schema end
  local props, required = {}, {}
  for _, p in ipairs(meta.params) do
    local s = { description = p.description ~= "" and p.description or nil }
    s.type = TYPE_SCHEMA[p.type]
    props[p.name] = s
    if not p.optional then required[#required + 1] = p.name end
  end
  local schema = { type = "object", properties = props }
  if #required > 0 then schema.required = array(required) end
  return schema
end

-- Compiles source without running it. Returns true, or false, message, line.
function M.compile(name, code)
  local f, err = load(code, "=skills/" .. name .. ".lua", "t", {})
  if f then return true end
  return false, err, tonumber(err:match("^skills/[%w_]+%.lua:(%d+):"))
end

-- The tags parse_header reads as metadata.
local META_TAGS = { param = true, ["return"] = true, returns = true, tool = true, prompt = true,
                    resource = true, input_schema = true, output_schema = true, example = true }

local function comment_line(line)
  return line:match("^%s*%-%-") and not line:match("^%s*%-%-%[=*%[")
end

-- Removes a leading documentation block from code: one that starts with "---", or a block of
-- "--" lines that has a tag parse_header reads (a hand-written "-- @tool" header: kept, it would
-- stand below the new header and write @tool twice). Other leading comments are code.
function M.strip_header(code)
  local ls = lines(code)
  local i = 1
  while i <= #ls and ls[i]:match("^%s*$") do i = i + 1 end
  if not (ls[i] and comment_line(ls[i])) then return code end
  local doc = ls[i]:match("^%s*%-%-%-") ~= nil
  local j = i
  while j <= #ls and comment_line(ls[j]) do
    local tag = ls[j]:match("^%s*%-%-%-? ?@([%w_]+)")
    if tag and META_TAGS[tag] then doc = true end
    j = j + 1
  end
  if not doc then return code end
  i = j
  while i <= #ls and ls[i]:match("^%s*$") do i = i + 1 end
  return table.concat(ls, "\n", i) .. (code:sub(-1) == "\n" and "\n" or "")
end

local function one_line(s)
  return (tostring(s):gsub("[\r\n]+", " "))
end

-- The header save_skill writes above the code.
function M.make_header(meta, json_encode)
  local out = {}
  local first = true
  -- Lua ends a comment at "\r" as at "\n": every line break of the description starts a line
  local desc = (meta.description or ""):gsub("\r\n?", "\n")
  for line in (desc .. "\n"):gmatch("([^\n]*)\n") do
    -- a line starting with "@" would read as a tag: one more space (parse_header removes it)
    if line:sub(1, 1) == "@" then line = " " .. line end
    out[#out + 1] = (first and "--- " or "-- ") .. line
    first = false
  end
  for _, p in ipairs(meta.params or {}) do
    out[#out + 1] = string.format("-- @param %s %s%s%s", p.name, p.type or "any",
      p.optional and "?" or "", (p.description and p.description ~= "") and (" " .. one_line(p.description)) or "")
  end
  if meta.returns and meta.returns ~= "" then out[#out + 1] = "-- @return " .. one_line(meta.returns) end
  if meta.tool then
    out[#out + 1] = "-- @tool" .. (meta.tool.title and (" " .. one_line(meta.tool.title)) or "")
    if meta.tool.task then out[#out + 1] = "-- @task " .. meta.tool.task end
    if meta.tool.input_schema then out[#out + 1] = "-- @input_schema " .. json_encode(meta.tool.input_schema) end
    if meta.tool.output_schema then out[#out + 1] = "-- @output_schema " .. json_encode(meta.tool.output_schema) end
  end
  for _, ex in ipairs(meta.examples or {}) do
    out[#out + 1] = "-- @example " .. (ex.call and (ex.call .. " ") or "") .. json_encode(ex.input)
      .. " -> " .. json_encode(ex.output)
  end
  if meta.prompt then
    out[#out + 1] = "-- @prompt" .. (meta.prompt.title and (" " .. one_line(meta.prompt.title)) or "")
  end
  if meta.resource then
    out[#out + 1] = "-- @resource " .. meta.resource.uri .. (meta.resource.mimeType and (" " .. meta.resource.mimeType) or "")
  end
  return table.concat(out, "\n") .. "\n"
end

-- SKILL.md text for a directory skill, keeping an existing markdown body.
function M.make_skill_md(name, meta, body, json_encode)
  local out = { "---", "name: " .. name, "description: " .. one_line(meta.description or "") }
  if meta.tool then
    out[#out + 1] = "tool: true"
    if meta.tool.title then out[#out + 1] = "title: " .. one_line(meta.tool.title) end
    if meta.tool.input_schema then out[#out + 1] = "input_schema: " .. json_encode(meta.tool.input_schema) end
    if meta.tool.output_schema then out[#out + 1] = "output_schema: " .. json_encode(meta.tool.output_schema) end
  end
  out[#out + 1] = "---"
  return table.concat(out, "\n") .. "\n" .. (body or "")
end

return M
