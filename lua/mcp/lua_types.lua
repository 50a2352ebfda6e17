-- mcp/lua_types.lua - LuaLS annotations (a typed Lua API) generated from the JSON Schemas of tools.
--
-- For each tool that sandbox code can call (servers.<server>.<tool>(args)), stub() writes the
-- classes and aliases of its arguments and result and an empty function with ---@param and
-- ---@return, so that lua-language-server gives a Lua author completion and type checks; file()
-- joins the stubs of many tools under one ---@meta header (the resource moonbox://types/servers.lua).
--
-- Schemas come from upstream servers and are hostile: JSON Schema 2020-12 or draft-07 (type
-- arrays, enum, const, anyOf/oneOf/allOf, $ref into $defs/definitions of the same schema,
-- additionalProperties and patternProperties maps, prefixItems/tuple items), names that are not
-- Lua identifiers, descriptions with newlines, deep or recursive schemas, huge enums. Whatever the
-- input, the output is valid Lua (every line of it is a comment but the `servers` assignments and
-- the empty function definitions, whose names are Lua identifiers or quoted strings), and bounded:
-- text from a schema is one line with control bytes removed and at most DESC_BYTES, a tool visits
-- at most MAX_NODES schema nodes and nests at most MAX_DEPTH levels inline, an enum becomes an
-- alias of at most MAX_ENUM values, a class has at most MAX_FIELDS fields, a stub at most STUB_BYTES
-- (else an untyped one) and a class name NAME_BYTES; what is cut is said in
-- a comment. Class names are made of the server's and the tool's Lua names, unique in one output.
--
-- Pure Lua, no `mb`: JSON arrays are tables with the metatable "json.array", JSON null a userdata,
-- as the host codec makes them (tests/lua/test_lua_types.lua runs it in a plain lua5.4).

local sfmt, concat, sort = string.format, table.concat, table.sort

local M = {}

local MAX_NODES = 400     -- schema nodes visited for one tool
local MAX_DEPTH = 8       -- inline nesting (a $ref starts a named type and its own depth)
local MAX_ENUM = 64       -- values of one enum alias
local MAX_UNION = 16      -- alternatives of one anyOf/oneOf/type list
local MAX_FIELDS = 100    -- fields of one class
local MAX_KEY_BYTES = 128 -- longer property names are left out
local DESC_BYTES = 300    -- one description
local NAME_BYTES = 160    -- one class or alias name
local STUB_BYTES = 65536  -- one tool's stub; a larger one is replaced by an untyped stub
local MAX_MERGED = 4000   -- properties and required names copied by allOf merges for one tool
M.MAX_NODES, M.MAX_DEPTH, M.MAX_ENUM, M.MAX_FIELDS = MAX_NODES, MAX_DEPTH, MAX_ENUM, MAX_FIELDS

local function is_array(v) return type(v) == "table" and getmetatable(v) == "json.array" end
local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or repeat
  return then true until while]]):gmatch("%S+") do KEYWORDS[w] = true end

local function is_ident(s)
  return type(s) == "string" and s:find("^[%a_][%w_]*$") ~= nil and not KEYWORDS[s]
end
M.is_ident = is_ident

-- The Lua name of an MCP name, the rule of upstream_config.ident (sandbox calls resolve it).
local function ident(name)
  local s = name:gsub("[^%w_]", "_")
  if s:find("^%d") or s == "" then s = "_" .. s end
  return s
end
M.ident = ident

-- Valid UTF-8, or the bytes that are not replaced by "?".
local function utf8_clean(s)
  if utf8.len(s) then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local ok, c = pcall(utf8.codepoint, s, i)
    if ok then
      local ch = utf8.char(c)
      out[#out + 1] = ch
      i = i + #ch
    else
      out[#out + 1] = "?"
      i = i + 1
    end
  end
  return concat(out)
end

-- One line of text for a comment: control bytes (newlines too) become spaces, at most max bytes
-- cut on a character boundary. A comment line then cannot end early, whatever the text holds.
local function one_line(s, max)
  if type(s) ~= "string" then return "" end
  if #s > max * 4 then s = s:sub(1, max * 4) end
  s = utf8_clean(s):gsub("%c", " "):gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
  if #s > max then
    s = s:sub(1, max - 3):gsub("[\128-\191]*$", ""):gsub("[\192-\255]$", "") .. "..."
  end
  return s
end
M.one_line = one_line

-- A LuaLS string literal type for s, or nil when s cannot be written as one safely.
local function string_literal(s)
  if #s > 64 or s:find('[%c"\\]') or not utf8.len(s) then return nil end
  return '"' .. s .. '"'
end

local function number_literal(v)
  if math.type(v) == "integer" then return sfmt("%d", v) end
  if v ~= v or v == math.huge or v == -math.huge then return nil end
  return sfmt("%.17g", v)
end

local function literal(v)
  if type(v) == "string" then return string_literal(v) end
  if type(v) == "number" then return number_literal(v) end
  if type(v) == "boolean" then return tostring(v) end
  if type(v) == "userdata" then return "json.null" end
  return nil
end

local function base_type(v)
  if type(v) == "string" then return "string" end
  if math.type(v) == "integer" then return "integer" end
  if type(v) == "number" then return "number" end
  if type(v) == "boolean" then return "boolean" end
  if type(v) == "userdata" then return "json.null" end
  if is_array(v) then return "any[]" end
  return "table"
end

-- A class or alias name part: letters, digits and "_" only.
local function name_part(s)
  s = tostring(s):gsub("[^%w_]", "_")
  if s == "" then s = "_" end
  if #s > 64 then s = s:sub(1, 64) end
  return s
end

-- A field name in an annotation: the identifier, or ["quoted"] (nil when it cannot be written).
local function field_name(k)
  if is_ident(k) then return k, true end
  if type(k) ~= "string" or #k > MAX_KEY_BYTES or k:find("%c") or not utf8.len(k) then return nil end
  return '["' .. k:gsub('[\\"]', "\\%0") .. '"]', false
end

-- Union of type strings, duplicates dropped, "any" absorbing the rest.
local function union(list)
  local seen, out = {}, {}
  for _, t in ipairs(list) do
    if t == "any" then return "any" end
    if not seen[t] then seen[t] = true out[#out + 1] = t end
  end
  if #out == 0 then return "any" end
  return concat(out, "|")
end

local function wrap(t) -- for T[] and T? of a union
  if t:find("|", 1, true) then return "(" .. t .. ")" end
  return t
end

---------------------------------------------------------------------------------------------
-- one generation: the declarations (classes, aliases) a set of stubs needs, and their names

local Gen = {}
Gen.__index = Gen

local function new_gen(used)
  return setmetatable({ used = used or {}, decls = {}, merged = 0 }, Gen)
end

-- A name not used yet in this output: base, else base_2, base_3, ... The last suffix taken for
-- a base is kept as used[base] (a number, still true for "used"), so that the next search
-- starts there: many tools whose names share their first 64 bytes (name_part) cost one step
-- each, not one per earlier tool (names are never freed, so no smaller suffix is free).
function Gen:unique(base)
  if #base > NAME_BYTES then base = base:sub(1, NAME_BYTES) end
  local used = self.used
  local last = used[base]
  if not last then
    used[base] = true
    return base
  end
  local i = math.type(last) == "integer" and last or 1
  local name
  repeat
    i = i + 1
    name = base .. "_" .. i
  until not used[name]
  used[name] = true
  used[base] = i
  return name
end

-- The name for a class or alias made for hint: the name a $ref reserved (self.exact), else a new one.
function Gen:take(hint)
  if hint == self.exact then
    self.exact, self.claimed = nil, true
    return hint
  end
  return self:unique(hint)
end

function Gen:note(text) -- a comment line for the current tool
  self.notes[#self.notes + 1] = "-- " .. one_line(text, 200)
end

-- Resolves "#", "#/$defs/x", "#/definitions/x" within the root schema: schema, key or nil.
function Gen:resolve(ref)
  if ref == "#" then return self.root, "#" end
  local kind, name = ref:match("^#/(%$?[%w_]+)/(.+)$")
  if not kind or (kind ~= "$defs" and kind ~= "definitions") or name:find("/", 1, true) then return nil end
  name = name:gsub("~1", "/"):gsub("~0", "~")
  local defs = is_object(self.root) and self.root[kind]
  local s = is_object(defs) and defs[name]
  if s == nil then return nil end
  return s, kind .. "/" .. name, name
end

-- The type of schema s; hint names a class or alias made for it. A schema object typed before
-- under the same root gets the same type again, without more work: an allOf that merges a part
-- other allOfs merged already (a $ref) hands its fields' schemas over once more, and a nested
-- object of many keys would be collected and sorted once per merge.
function Gen:type(s, hint, depth)
  if type(s) ~= "table" then return self:type_of(s, hint, depth) end
  local t = self.typed[s]
  if t then return t end
  t = self:type_of(s, hint, depth)
  self.typed[s] = t
  return t
end

function Gen:type_of(s, hint, depth)
  self.nodes = self.nodes + 1
  if self.nodes > self.max_nodes then
    if not self.cut then
      self.cut = true
      self:note(sfmt("the schema is larger than %d nodes: the rest is typed any", self.max_nodes))
    end
    return "any"
  end
  if not is_object(s) then return "any" end
  if depth > MAX_DEPTH then
    if not self.deep then
      self.deep = true
      self:note(sfmt("nested deeper than %d levels: typed table below", MAX_DEPTH))
    end
    return "table"
  end
  if type(s["$ref"]) == "string" then return self:ref(s["$ref"]) end
  if s.const ~= nil then return literal(s.const) or base_type(s.const) end
  if is_array(s.enum) then return self:enum(s.enum, hint) end
  local alts = is_array(s.anyOf) and s.anyOf or is_array(s.oneOf) and s.oneOf or nil
  if alts and #alts > 0 then
    local out = {}
    for i = 1, math.min(#alts, MAX_UNION) do
      out[#out + 1] = self:type(alts[i], hint .. "_" .. i, depth + 1)
    end
    -- properties beside anyOf/oneOf belong to every alternative: keep them as a class too
    if is_object(s.properties) and next(s.properties) then out[#out + 1] = self:object(s, hint, depth) end
    return union(out)
  end
  if is_array(s.allOf) and #s.allOf > 0 then return self:all_of(s, hint, depth) end
  local ty = s.type
  if is_array(ty) then
    local out = {}
    for i = 1, math.min(#ty, MAX_UNION) do
      if type(ty[i]) == "string" then out[#out + 1] = self:simple(s, ty[i], hint, depth) end
    end
    return union(out)
  end
  if type(ty) == "string" then return self:simple(s, ty, hint, depth) end
  if is_object(s.properties) or s.additionalProperties ~= nil or is_object(s.patternProperties) then
    return self:simple(s, "object", hint, depth)
  end
  if s.items ~= nil or s.prefixItems ~= nil then return self:simple(s, "array", hint, depth) end
  return "any"
end

local SIMPLE = { string = "string", integer = "integer", number = "number", boolean = "boolean",
                 null = "json.null" }

function Gen:simple(s, ty, hint, depth)
  if SIMPLE[ty] then return SIMPLE[ty] end
  if ty == "array" then
    local items = s.items
    if is_array(items) or is_array(s.prefixItems) then -- a tuple: the union of its item types
      local list, out = is_array(s.prefixItems) and s.prefixItems or items, {}
      for i = 1, math.min(#list, MAX_UNION) do out[#out + 1] = self:type(list[i], hint .. "_" .. i, depth + 1) end
      return wrap(union(out)) .. "[]"
    end
    if is_object(items) then return wrap(self:type(items, hint .. "_item", depth + 1)) .. "[]" end
    return "any[]"
  end
  if ty == "object" then return self:object(s, hint, depth) end
  return "any"
end

-- An object: a class when it has properties, else a map table<string, T>.
function Gen:object(s, hint, depth)
  local props = is_object(s.properties) and s.properties or nil
  local extra -- type of the values of other keys
  local ap = s.additionalProperties
  if is_object(ap) then extra = self:type(ap, hint .. "_value", depth + 1) end
  if is_object(s.patternProperties) then
    local out = { extra }
    local keys = {}
    for k in pairs(s.patternProperties) do if type(k) == "string" then keys[#keys + 1] = k end end
    sort(keys)
    for i = 1, math.min(#keys, MAX_UNION) do
      out[#out + 1] = self:type(s.patternProperties[keys[i]], hint .. "_value", depth + 1)
    end
    extra = union(out)
  end
  if not props or next(props) == nil then return "table<string, " .. (extra or "any") .. ">" end
  local name = self:take(hint)
  self:class(name, s, props, extra, depth)
  return name
end

-- Writes the class `name` (the declaration goes in before the class's own nested types are
-- done, so that the output reads top down).
function Gen:class(name, s, props, extra, depth)
  local block = {}
  self.decls[#self.decls + 1] = block
  local req = {}
  if is_array(s.required) then
    for _, r in ipairs(s.required) do if type(r) == "string" then req[r] = true end end
  end
  local head = { "---@class " .. name }
  if type(s.description) == "string" and s.description ~= "" then
    table.insert(head, 1, "--- " .. one_line(s.description, DESC_BYTES):gsub("^@", "`@`"))
  end
  local keys = {}
  for k in pairs(props) do if type(k) == "string" then keys[#keys + 1] = k end end
  sort(keys)
  local skipped = 0
  local lines = {}
  for i, k in ipairs(keys) do
    if i > MAX_FIELDS then
      lines[#lines + 1] = sfmt("-- (%d more fields in the schema)", #keys - MAX_FIELDS)
      break
    end
    local fname, plain = field_name(k)
    if not fname then
      skipped = skipped + 1
    else
      local p = props[k]
      local t = self:type(p, name .. "." .. name_part(k), depth + 1)
      local line
      if req[k] then
        line = sfmt("---@field %s %s", fname, t)
      elseif plain then
        line = sfmt("---@field %s? %s", fname, t)
      else
        line = sfmt("---@field %s %s|nil", fname, t)
      end
      local d = is_object(p) and p.description
      if type(d) == "string" and d ~= "" then
        d = one_line(d, DESC_BYTES)
        -- text that could be read as more of the type (|nil, [], <...>) goes after "#"
        if d:find("^[^%w]") then d = "# " .. d end
        line = line .. " " .. d
      end
      lines[#lines + 1] = line
    end
  end
  if skipped > 0 then
    lines[#lines + 1] = sfmt("-- (%d fields whose names cannot be written here: control bytes, "
      .. "invalid UTF-8 or over %d bytes)", skipped, MAX_KEY_BYTES)
  end
  if extra then lines[#lines + 1] = "---@field [string] " .. extra end
  for _, l in ipairs(head) do block[#block + 1] = l end
  for _, l in ipairs(lines) do block[#block + 1] = l end
end

function Gen:enum(values, hint)
  local out, bases, dropped = {}, {}, 0
  for i, v in ipairs(values) do
    if i > MAX_ENUM then break end
    local l = literal(v)
    if l then out[#out + 1] = l else dropped = dropped + 1 end
    bases[#bases + 1] = base_type(v)
  end
  if #values > MAX_ENUM or dropped > 0 or #out == 0 then
    -- too many values, or values a literal type cannot show: their base types
    for i = MAX_ENUM + 1, math.min(#values, MAX_ENUM * 4) do bases[#bases + 1] = base_type(values[i]) end
    if #values > MAX_ENUM then
      self:note(sfmt("%s: an enum of %d values, typed by its values' types", hint, #values))
    end
    return union(bases)
  end
  local name = self:take(hint)
  self.decls[#self.decls + 1] = { "---@alias " .. name .. " " .. union(out) }
  return name
end

function Gen:ref(ref)
  local known = self.refs[ref]
  if known then return known end
  local s, key, defname = self:resolve(ref)
  if s == nil then
    self:note(sfmt("$ref %s is not in this schema: typed any", one_line(ref, 80)))
    return "any"
  end
  if key == "#" then
    self.root_used = true
    return self.root_name
  end
  local name = self:unique(self.base .. "." .. name_part(defname))
  self.refs[ref] = name
  -- a named type: a class when it is an object with properties, else an alias of its type
  local before = #self.decls
  local outer_exact, outer_claimed = self.exact, self.claimed
  self.exact, self.claimed = name, false
  local t = self:type(s, name, 1)
  local claimed = self.claimed
  self.exact, self.claimed = outer_exact, outer_claimed
  if t == name then return name end
  if claimed then return t end -- a class of that name is one part of t
  table.insert(self.decls, before + 1, { "---@alias " .. name .. " " .. t })
  return name
end

function Gen:all_of(s, hint, depth)
  -- objects (or $refs to objects) merge into one class; otherwise the first part's type. A part
  -- is merged once however often it is listed, and the properties and required names copied
  -- count against MAX_MERGED for the tool: $refs let a small schema name one large object many
  -- times (many parts, or many allOf nodes), which would otherwise copy it each time.
  local props, req, merged, seen = {}, {}, true, {}
  local function charge()
    self.merged = self.merged + 1
    if self.merged > MAX_MERGED then
      if not self.merge_cut then
        self.merge_cut = true
        self:note(sfmt("allOf merges more than %d properties: the rest typed by their first part", MAX_MERGED))
      end
      return false
    end
    return true
  end
  local function merge(p)
    if is_object(p.properties) then
      for k, v in pairs(p.properties) do
        if not charge() then return false end
        props[k] = v
      end
    end
    if is_array(p.required) then
      for _, r in ipairs(p.required) do
        if not charge() then return false end
        req[#req + 1] = r
      end
    end
    return true
  end
  for _, part in ipairs(s.allOf) do
    local p = part
    if is_object(p) and type(p["$ref"]) == "string" then p = self:resolve(p["$ref"]) end
    if not is_object(p) or not (is_object(p.properties) or p.type == "object") then merged = false break end
    if not seen[p] then
      seen[p] = true
      if not merge(p) then merged = false break end
    end
  end
  if merged and not merge(s) then merged = false end
  if not merged then return self:type(s.allOf[1], hint, depth + 1) end
  local arr = setmetatable(req, { __metatable = "json.array" })
  return self:object({ type = "object", properties = props, required = arr,
                       description = s.description }, hint, depth)
end

-- The type of a root schema (arguments, result) named hint; a "#" $ref inside refers to it.
function Gen:root_type(schema, hint)
  local name = self:unique(hint)
  self.root, self.refs, self.root_name, self.root_used, self.typed = schema, {}, name, false, {}
  self.exact, self.claimed = name, false
  local t = self:type(schema, name, 0)
  local claimed = self.claimed
  self.exact, self.claimed = nil, false
  if t ~= name and self.root_used and not claimed then
    self.decls[#self.decls + 1] = { "---@alias " .. name .. " " .. t }
    return name
  end
  return t
end

---------------------------------------------------------------------------------------------
-- stubs

-- The Lua expression sandbox code calls a tool with: servers.<server>.<tool> when the names are
-- Lua identifiers (or map to a unique one), else servers.<server>["<exact name>"].
local function call_path(server, tool, tool_ident_unique)
  local sid = ident(server)
  local path = is_ident(sid) and "servers." .. sid or sfmt("servers[%q]", server):gsub("\\\n", "\\n")
  local tid = ident(tool)
  if is_ident(tid) and tool_ident_unique ~= false then return path .. "." .. tid, true end
  return path .. "[" .. sfmt("%q", tool):gsub("\\\n", "\\n") .. "]", false
end
M.call_path = call_path

local function desc_lines(text, max_lines)
  local out = {}
  if type(text) ~= "string" then return out end
  for line in (utf8_clean(text):sub(1, DESC_BYTES * max_lines) .. "\n"):gmatch("(.-)\r?\n") do
    if #out >= max_lines then
      out[#out] = out[#out] .. " ..."
      break
    end
    line = one_line(line, DESC_BYTES)
    if line ~= "" then out[#out + 1] = "--- " .. line:gsub("^@", "`@`") end
  end
  return out
end

-- The stub of one tool. t = {server, name, description, inputSchema, outputSchema, inferred =
-- {schema, results} | nil}; opts.used: the set of names already used in this output (shared by
-- file()); opts.unique_ident: false when another tool of the server has the same Lua name;
-- opts.brief: without the title, description and error lines (get_tool_definition has them).
-- Returns the text (lines joined with "\n", ending with a newline).
function M.stub(t, opts)
  opts = opts or {}
  local g = new_gen(opts.used)
  g.max_nodes, g.nodes, g.notes = MAX_NODES, 0, {}
  local base = name_part(ident(t.server)) .. "." .. name_part(ident(t.name))
  g.base = base
  local path = call_path(t.server, t.name, opts.unique_ident)

  -- arguments
  local input = is_object(t.inputSchema) and t.inputSchema or { type = "object" }
  local args_t = g:root_type(input, base .. ".args")
  local has_required = is_array(input.required) and #input.required > 0
  if args_t:find("^table<string,") then args_t = "table<string, any>" end

  -- result
  local ret_t, ret_desc
  if is_object(t.outputSchema) then
    ret_t = g:root_type(t.outputSchema, base .. ".result")
    ret_desc = "its structuredContent (outputSchema)"
  elseif t.inferred and is_object(t.inferred.schema) then
    g.notes[#g.notes + 1] = sfmt("-- inferred: %s has no outputSchema; the result type below was "
      .. "inferred from %d successful result%s (field names and types only, not a schema)",
      one_line(t.server .. "." .. t.name, 200), t.inferred.results or 0, t.inferred.results == 1 and "" or "s")
    ret_t = g:root_type(t.inferred.schema, base .. ".inferred_result")
    ret_desc = "inferred from results seen, not declared by the server"
  else
    ret_t = "any"
    ret_desc = "no outputSchema: structuredContent, else JSON text decoded, else text"
  end

  local out = {}
  for _, l in ipairs(g.notes) do out[#out + 1] = l end
  for _, block in ipairs(g.decls) do
    for _, l in ipairs(block) do out[#out + 1] = l end
    out[#out + 1] = ""
  end
  local title = one_line(t.server, 200) .. "." .. one_line(t.name, 200)
  if not opts.brief then -- brief: the definition around the stub has the title and description
    out[#out + 1] = "--- " .. title .. (type(t.title) == "string" and t.title ~= "" and " - " .. one_line(t.title, 200) or "")
    for _, l in ipairs(desc_lines(t.description, 6)) do out[#out + 1] = l end
    out[#out + 1] = "--- Raises an error \"" .. title:gsub("%%", "%%%%") .. ": <message>\" when the call fails."
  end
  out[#out + 1] = sfmt("---@param args%s %s", has_required and "" or "?", args_t)
  out[#out + 1] = sfmt("---@return %s result %s", ret_t, ret_desc)
  local fn = path:find("^servers%.[%w_]+%.[%w_]+$") and "function " .. path .. "(args) end"
    or path .. " = function(args) end"
  out[#out + 1] = fn
  local text = concat(out, "\n") .. "\n"
  if #text > STUB_BYTES then
    return sfmt("-- %s: the types would take %d bytes, more than %d: see the JSON schemas\n"
      .. "---@param args? table<string, any>\n---@return any result\n%s\n", title, #text, STUB_BYTES, fn)
  end
  return text
end

-- The resource: a ---@meta file with the stubs of every tool. servers = { {name, tools = {t...}} }
-- in the order to write them; max_bytes bounds the text (tools past it are named in a comment).
function M.file(servers, max_bytes)
  local used = { ["json.null"] = true, ["moonbox.servers"] = true }
  local parts = {
    "---@meta",
    "-- The tools of the upstream MCP servers of moonbox as sandbox code calls them:",
    "-- servers.<server>.<tool>(args) returns the tool's result as Lua data. Generated from each",
    "-- tool's inputSchema and outputSchema; result types marked \"inferred\" come from results",
    "-- seen. Save this file where lua-language-server finds it (docs/catalog.md#lua-types).",
    "",
    "---@class json.null",
    "",
    "---@class moonbox.servers",
    "servers = {}",
    "",
  }
  local size, left = 0, {}
  for _, p in ipairs(parts) do size = size + #p + 1 end
  for _, srv in ipairs(servers) do
    local sid = ident(srv.name)
    local cls = used["servers." .. name_part(sid)] and nil or "servers." .. name_part(sid)
    cls = cls or (function() local n = "servers." .. name_part(sid) .. "_server" used[n] = true return n end)()
    used[cls] = true
    local path = is_ident(sid) and "servers." .. sid or (sfmt("servers[%q]", srv.name):gsub("\\\n", "\\n"))
    local head = "---@class " .. cls .. "\n" .. path .. " = {}\n"
    if #left > 0 or size + #head > max_bytes then
      left[#left + 1] = sfmt("%s (%d tools)", one_line(srv.name, 100), #srv.tools)
    else
      parts[#parts + 1] = "-- server " .. one_line(srv.name, 200)
      parts[#parts + 1] = head
      size = size + #head + #parts[#parts - 1] + 2
      local count = {}
      for _, t in ipairs(srv.tools) do local i = ident(t.name) count[i] = (count[i] or 0) + 1 end
      for _, t in ipairs(srv.tools) do
        local ok, text = false, nil
        if #left == 0 then -- once one did not fit, the rest are only named (no work spent on them)
          ok, text = pcall(M.stub, t, { used = used, unique_ident = count[ident(t.name)] == 1 })
          if not ok then
            text = "-- " .. one_line(srv.name .. "." .. t.name, 200) .. ": no stub (" .. one_line(tostring(text), 200) .. ")\n"
          end
        end
        if not text or size + #text + 1 > max_bytes then
          left[#left + 1] = one_line(srv.name .. "." .. t.name, 200)
        else
          parts[#parts + 1] = text
          size = size + #text + 1
        end
      end
    end
  end
  if #left > 0 then
    local names = {}
    for i = 1, math.min(#left, 50) do names[i] = left[i] end
    parts[#parts + 1] = sfmt("-- %d more left out: the file would be larger than %d bytes: %s%s",
      #left, max_bytes, concat(names, ", "), #left > 50 and ", ..." or "")
  end
  return concat(parts, "\n") .. "\n"
end

return M
