-- tests/lua/test_sandbox_types.lua - the sandbox API's LuaLS file (lua/mcp/sandbox_types.lua).
--
-- Standalone: `lua5.4 tests/lua/test_sandbox_types.lua` from the repo root. The file made from
-- lua/catalog/sandbox_api.lua parses, declares every catalog entry once, and keeps text from an
-- entry inside its comments (newlines, control bytes); a parameter name that is not an
-- identifier becomes argN; returns texts map to LuaLS types. The check against the environment
-- the sandbox really builds is tests/integration/sandbox_types.test.mjs.
-- Ends with "N passed, N failed"; exits 1 on any failure.

local H = dofile((arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$") or "") .. "tests/lua/harness.lua")
local check, check_match = H.check, H.check_match
local ST = require("mcp.sandbox_types")
local api = require("catalog.sandbox_api")

local function parses(name, text)
  local fn, err = load(text, "=" .. name, "t", {})
  check(name .. ": parses as Lua", fn ~= nil and true or err, true)
  return fn
end

local file = ST.file(api)
parses("sandbox.lua", file)
check_match("meta header", file, "^%-%-%-@meta sandbox\n")
local n = 0
for _, cat in pairs(api.categories) do
  for name in pairs(cat.tools) do
    n = n + 1
    local _, count = file:gsub("\nfunction " .. name:gsub("%.", "%%.") .. "%(", "")
    local _, const = file:gsub("\n" .. name:gsub("%.", "%%.") .. " = nil", "")
    check(name .. " declared once", count + const, 1)
  end
end
check("names: catalog entries plus the stock extras", #ST.names(api), n + #ST.EXTRA)

-- hostile text stays in its comment; odd parameter names; return types
local stub = ST.stub("x.y", { signature = "x.y(a)\nos.exit(1)",
  description = "line one\nos.exit(1) --[[ \r\0 ]] end",
  parameters = { { name = "a", type = "string|integer" }, { name = "not ok", type = "weird" },
                 { name = "end", type = "table", optional = true } },
  returns = "array of things\nerror()" })
local env = { x = {} }
local fn = load(stub, "=stub", "t", env)
check("hostile stub parses", fn ~= nil, true)
fn()
check("the stub defines only x.y", type(env.x.y), "function")
check_match("a's union type", stub, "\n%-%-%-@param a string|integer\n")
check_match("a bad name becomes arg2, a bad type any", stub, "\n%-%-%-@param arg2 any\n")
check_match("a keyword name becomes arg3, optional", stub, "\n%-%-%-@param arg3%? table\n")
check_match("array return", stub, "\n%-%-%-@return any%[%] # array of things error%(%)\n")
for l in stub:gmatch("[^\n]+") do
  if not l:find("^%-%-") then check("only the definition is code: " .. l, l, "function x.y(a, arg2, arg3) end") end
end
check_match("a constant", ST.stub("json.null", { signature = "json.null", description = "null" }),
  "\n%-%-%-@type lightuserdata\njson%.null = nil$")
check("returns nothing: no @return", ST.stub("f", { signature = "f()", returns = "nothing" }):find("@return"), nil)

-- .luarc.json: JSON with the globals
local rc = ST.luarc(api)
check_match("luarc version", rc, '"runtime%.version": "Lua 5%.4"')
check_match("luarc io off", rc, '"io": "disable"')
check_match("luarc a global", rc, '"read_file"')

H.done()
