-- mcp/sandbox_types.lua - LuaLS definitions (a ---@meta file) of the sandbox API itself.
--
-- Made from the one source the catalog has for it, lua/catalog/sandbox_api.lua, so the types,
-- get_tool_definition and search_tools cannot drift apart: every entry becomes a function stub
-- (or a field, for a constant such as json.null) with its description, ---@param per parameter
-- and ---@return; moonbox's libraries (json, re, mcp, pii) become classes. Beside them, what the
-- sandbox keeps of the stock libraries that lua-language-server's own Lua 5.4 library does not
-- describe or describes too widely: os is cut to clock, date, difftime and time (LuaLS's builtin
-- os is disabled by the .luarc.json below), math keeps Lua 5.2's pow, atan2, cosh, sinh, tanh,
-- frexp, ldexp and log10. The sandbox's environment is checked against this file both ways by
-- tests/integration/lua_types.test.mjs (every name it builds is declared, every name declared
-- is there).
--
-- Served as the resource moonbox://types/sandbox.lua, written by `moonbox types DIR` with a
-- .luarc.json, installed under share/moonbox/types/; luacheckrc() is the configuration
-- `moonbox check` runs luacheck with (the same names, read-only, no global set). Pure Lua, no `mb`.

local sfmt, concat = string.format, table.concat

local M = {}

M.URI = "moonbox://types/sandbox.lua"

-- moonbox's libraries: each a class and a global table
local LIBS = { json = "JSON encode and decode", re = "PCRE2 regular expressions",
               mcp = "the MCP client: other tools, the client, notifications",
               pii = "personal data detection" }

-- Stock functions the sandbox keeps that LuaLS's Lua 5.4 library lacks (or disables here)
local EXTRA = {
  { "os.clock", "CPU time used by the execution, in seconds", {}, "number" },
  { "os.date", "Formats a time (UTC or local as the server's); \"*t\" gives a table",
    { { "format", "string", true }, { "time", "integer", true } }, "string|osdate" },
  { "os.difftime", "Seconds between two times", { { "t2", "integer" }, { "t1", "integer", true } }, "number" },
  { "os.time", "The current time, or the time of a date table, in seconds since the epoch",
    { { "date", "osdateparam", true } }, "integer" },
  { "math.pow", "x to the power y (Lua 5.2 compatibility; x ^ y is the same)", { { "x", "number" }, { "y", "number" } }, "number" },
  { "math.atan2", "The arc tangent of y/x (Lua 5.2 compatibility; math.atan(y, x))", { { "y", "number" }, { "x", "number" } }, "number" },
  { "math.cosh", "Hyperbolic cosine (Lua 5.2 compatibility)", { { "x", "number" } }, "number" },
  { "math.sinh", "Hyperbolic sine (Lua 5.2 compatibility)", { { "x", "number" } }, "number" },
  { "math.tanh", "Hyperbolic tangent (Lua 5.2 compatibility)", { { "x", "number" } }, "number" },
  { "math.frexp", "m and e with x = m * 2^e (Lua 5.2 compatibility)", { { "x", "number" } }, "number, integer" },
  { "math.ldexp", "m * 2^e (Lua 5.2 compatibility)", { { "m", "number" }, { "e", "integer" } }, "number" },
  { "math.log10", "Base-10 logarithm (Lua 5.2 compatibility; math.log(x, 10))", { { "x", "number" } }, "number" },
}
M.EXTRA = EXTRA

-- The LuaLS type of a catalog parameter type ("string|integer|function", "array", ...)
local TYPES = { any = "any", string = "string", integer = "integer", number = "number",
                boolean = "boolean", table = "table", ["function"] = "function", array = "any[]",
                object = "table", ["nil"] = "nil" }
local function lua_type(t)
  if type(t) ~= "string" then return "any" end
  local out = {}
  for part in t:gmatch("[^|]+") do
    local lt = TYPES[part:match("^%s*(.-)%s*$")]
    if not lt then return "any" end
    out[#out + 1] = lt
  end
  return #out > 0 and concat(out, "|") or "any"
end

-- One line of text for a comment (newlines and control bytes become spaces)
local function line(s)
  return (tostring(s or ""):gsub("%c", " "):gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))
end

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or repeat
  return then true until while]]):gmatch("%S+") do KEYWORDS[w] = true end
local function ident(s) return type(s) == "string" and s:find("^[%a_][%w_]*$") ~= nil and not KEYWORDS[s] end

-- The return annotation of a catalog "returns" text ("string: JSON text" -> "string # JSON
-- text", "array of ..." -> "any[] # array of ...", "nothing" -> none)
local function returns(text)
  if type(text) ~= "string" or text == "" or text == "nothing" then return nil end
  if TYPES[text] then return TYPES[text] end
  local head, rest = text:match("^([%w_|%[%]]+):%s*(.*)$")
  if head and lua_type(head) ~= "any" then return lua_type(head) .. " # " .. line(rest) end
  local lead = text:match("^(%a+)")
  if lead and TYPES[lead] and lead ~= "any" then return TYPES[lead] .. " # " .. line(text) end
  if text:find("^true") or text:find("^false") then return "boolean # " .. line(text) end
  if text:find("^array of") or text:find("^a new") or text:find("^a list") then
    return "any[] # " .. line(text)
  end
  if text:find("^{") then return "table # " .. line(text) end
  return "any # " .. line(text)
end

-- The stub of one catalog entry (name as the sandbox spells it): comment lines and a definition
function M.stub(name, t)
  local out = {}
  out[#out + 1] = "--- " .. line(t.description)
  if t.signature then out[#out + 1] = "--- `" .. line(t.signature) .. "`" end
  local params = t.parameters or {}
  if #params == 0 and t.signature and not t.signature:find("%(") then -- a constant (json.null)
    out[#out + 1] = "---@type " .. (name == "json.null" and "lightuserdata" or "any")
    out[#out + 1] = name .. " = nil"
    return concat(out, "\n")
  end
  local names = {}
  for _, p in ipairs(params) do
    local pn = ident(p.name) and p.name or "arg" .. (#names + 1)
    names[#names + 1] = pn
    out[#out + 1] = (sfmt("---@param %s%s %s %s", pn, p.optional and "?" or "", lua_type(p.type),
                          line(p.description)):gsub(" $", ""))
  end
  local r = returns(t.returns)
  if r then out[#out + 1] = "---@return " .. r end
  out[#out + 1] = sfmt("function %s(%s) end", name, concat(names, ", "))
  return concat(out, "\n")
end

-- Every entry of the API as {name = ..., def = entry}, sorted by name
local function entries(api)
  local list = {}
  for _, cat in pairs(api.categories) do
    for name, t in pairs(cat.tools) do list[#list + 1] = { name = name, def = t } end
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  return list
end

-- The names the file declares (globals and library.field), for the completeness test
function M.names(api)
  local out = {}
  for _, e in ipairs(entries(api)) do out[#out + 1] = e.name end
  for _, x in ipairs(EXTRA) do out[#out + 1] = x[1] end
  table.sort(out)
  return out
end

-- The whole ---@meta file
function M.file(api)
  local out = { "---@meta sandbox",
    "-- moonbox sandbox API (Lua 5.4): what execute_code and skills can call, made from the catalog",
    "-- (lua/catalog/sandbox_api.lua). Use with the .luarc.json that `moonbox types DIR` writes;",
    "-- servers.<server>.<tool> are typed in servers.lua. Do not edit: it is generated.", "" }
  local libs = {}
  for lib in pairs(LIBS) do libs[#libs + 1] = lib end
  table.sort(libs)
  for _, lib in ipairs(libs) do
    out[#out + 1] = sfmt("--- %s\n---@class moonbox.%s\n%s = {}\n", LIBS[lib], lib, lib)
  end
  out[#out + 1] = "--- Upstream MCP servers' tools: servers.<server>.<tool>(args) (typed in servers.lua)\n"
    .. "---@type table<string, table<string, fun(args?: table): any>>\nservers = {}\n"
  for _, e in ipairs(entries(api)) do out[#out + 1] = M.stub(e.name, e.def) .. "\n" end
  out[#out + 1] = "-- the stock libraries as the sandbox keeps them (beyond LuaLS's Lua 5.4 library)\n"
  out[#out + 1] = "---@class oslib\nos = {}\n"
  for _, x in ipairs(EXTRA) do
    local t = { description = x[2], parameters = {}, returns = x[4] .. ": " .. x[2] }
    for _, p in ipairs(x[3]) do t.parameters[#t.parameters + 1] = { name = p[1], type = p[2], optional = p[3] } end
    local s = M.stub(x[1], t):gsub("---@return [^\n]*", "---@return " .. x[4])
    out[#out + 1] = s .. "\n"
  end
  return concat(out, "\n")
end

-- What the sandbox keeps of stock Lua 5.4 (tests/integration/sandbox_types.test.mjs checks that
-- this, the catalog's entries and EXTRA are the sandbox's environment, exactly)
M.STOCK = {
  globals = { "_G", "_VERSION", "assert", "collectgarbage", "error", "getmetatable", "ipairs", "load",
              "next", "pairs", "pcall", "print", "rawequal", "rawget", "rawlen", "rawset", "select",
              "setmetatable", "tonumber", "tostring", "type", "xpcall" },
  coroutine = { "close", "create", "isyieldable", "resume", "running", "status", "wrap", "yield" },
  math = { "abs", "acos", "asin", "atan", "ceil", "cos", "deg", "exp", "floor", "fmod", "huge", "log",
           "max", "maxinteger", "min", "mininteger", "modf", "pi", "rad", "random", "randomseed", "sin",
           "sqrt", "tan", "tointeger", "type", "ult" },
  string = { "byte", "char", "find", "format", "gmatch", "gsub", "len", "lower", "match", "pack",
             "packsize", "rep", "reverse", "sub", "unpack", "upper" },
  table = { "concat", "insert", "move", "pack", "remove", "sort", "unpack" },
  utf8 = { "char", "charpattern", "codepoint", "codes", "len", "offset" },
}

-- Every name code can reach, as {global = {field = true} or true}: stock, catalog, EXTRA
function M.env(api)
  local env = {}
  for _, g in ipairs(M.STOCK.globals) do env[g] = true end
  for lib, fields in pairs(M.STOCK) do
    if lib ~= "globals" then
      env[lib] = env[lib] or {}
      for _, f in ipairs(fields) do env[lib][f] = true end
    end
  end
  local function add(name)
    local lib, field = name:match("^([%w_]+)%.([%w_]+)$")
    if lib then
      if type(env[lib]) ~= "table" then env[lib] = {} end
      env[lib][field] = true
    else
      env[name] = env[name] or true
    end
  end
  for _, e in ipairs(entries(api)) do add(e.name) end
  for _, x in ipairs(EXTRA) do add(x[1]) end
  return env
end

-- The globals of a skill's test file, skills/tests/NAME_test.lua (mcp/skill_tests.lua).
M.TEST_HELPERS = { "assert_eq", "assert_error", "assert_true", "test" }

-- A luacheck configuration (Debian's lua-check) that knows the sandbox: its globals read-only,
-- fields of its libraries checked (string.dump, os.execute and io are "undefined"), servers and
-- its subtables open, and no global may be set (a skill returns its value; globals of one
-- execution do not outlive it).
function M.luacheckrc(api)
  local env = M.env(api)
  local names = {}
  for k in pairs(env) do names[#names + 1] = k end
  table.sort(names)
  local out = { "-- luacheck configuration for moonbox's sandbox (generated by `moonbox check`)",
    "stds.moonbox = { read_globals = {" }
  for _, k in ipairs(names) do
    if env[k] == true then
      out[#out + 1] = sfmt("  %q,", k)
    else
      local fs = {}
      for f in pairs(env[k]) do fs[#fs + 1] = sfmt("%q", f) end
      table.sort(fs)
      out[#out + 1] = sfmt("  [%q] = { fields = { %s } },", k, concat(fs, ", "))
    end
  end
  out[#out + 1] = '  servers = { other_fields = true },'
  out[#out + 1] = "} }"
  out[#out + 1] = 'std = "moonbox"'
  out[#out + 1] = "allow_defined = false"
  out[#out + 1] = "allow_defined_top = false"
  out[#out + 1] = "max_line_length = false"
  out[#out + 1] = "-- a skill's tests (moonbox test) also have the assertion helpers of mcp/skill_tests.lua"
  local th = {}
  for _, n in ipairs(M.TEST_HELPERS) do th[#th + 1] = sfmt("%q", n) end
  out[#out + 1] = 'files["/**/tests/*_test.lua"] = { read_globals = { ' .. concat(th, ", ") .. " } }"
  out[#out + 1] = ""
  return concat(out, "\n")
end

-- The .luarc.json for lua-language-server: Lua 5.4, the stock libraries the sandbox lacks
-- disabled (io, debug, package, os - os is declared in sandbox.lua as the sandbox keeps it),
-- moonbox's globals known.
function M.luarc(api)
  local globals = { "servers" }
  for lib in pairs(LIBS) do globals[#globals + 1] = lib end
  for _, e in ipairs(entries(api)) do
    if not e.name:find("%.") then globals[#globals + 1] = e.name end
  end
  for _, n in ipairs(M.TEST_HELPERS) do globals[#globals + 1] = n end -- in tests/*_test.lua
  table.sort(globals)
  local q = {}
  for _, g in ipairs(globals) do q[#q + 1] = '"' .. g .. '"' end
  return concat({ "{",
    '  "$schema": "https://raw.githubusercontent.com/LuaLS/vscode-lua/master/setting/schema.json",',
    '  "runtime.version": "Lua 5.4",',
    '  "runtime.builtin": { "io": "disable", "debug": "disable", "package": "disable", "os": "disable" },',
    '  "workspace.library": [ "types" ],',
    '  "diagnostics.globals": [ ' .. concat(q, ", ") .. " ]",
    "}", "" }, "\n")
end

return M
