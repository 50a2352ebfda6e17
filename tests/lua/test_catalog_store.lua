-- tests/lua/test_catalog_store.lua - the parts of the tool catalog (lua/mcp/catalog.lua) that
-- need the store, on a real SQLite through the sqlite3 shell (skipped without it): the
-- suggestions for an unknown tool name.
--
-- Standalone: `lua5.4 tests/lua/test_catalog_store.lua` from the repo root. Work is measured in
-- Lua instructions (a count hook), not time, so the bound holds on any machine.
-- Ends with "N passed, N failed"; exits 1 on any failure.

local H = dofile((arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$") or "") .. "tests/lua/harness.lua")
local check = H.check

local db = H.sqlite_db()
if not db then
  print("skip: sqlite3 shell not found; the catalog store tests need it")
  H.done()
end
local shell_query = db.query
function db.query(...) -- src/store.c leaves a NULL column out of its row
  local rows = shell_query(...)
  for _, r in ipairs(rows) do
    for k, v in pairs(r) do if v == H.NULL then r[k] = nil end end
  end
  return rows
end
function db.row(...) return db.query(...)[1] end

local m = H.new_mb({})
m.db = db
m.timer = nil
db.migrate(require("mcp.schema"))

local catalog = require("mcp.catalog")
catalog.state.started, catalog.state.ready = true, true -- no start-up import: the rows are below
local handlers = {}
catalog.init({
  register = function(def, fn) handlers[def.name] = fn end,
  tool_error = function(msg) return { isError = true, content = { { type = "text", text = msg } } } end,
  server_stats_providers = {},
})

-- Runs fn under a budget of Lua instructions (millions); returns its results and the millions used.
local function counted(limit, fn, ...)
  local used = 0
  debug.sethook(function()
    used = used + 1
    if used > limit then error("instruction budget exceeded", 0) end
  end, "", 1000000)
  local r = table.pack(pcall(fn, ...))
  debug.sethook()
  return r, used
end

---------------------------------------------------------------------------------------------
-- suggestions: a catalog of 2,000 long look-alike names (an upstream names its tools) and an
-- unknown name like them held the loop ~4 s: every candidate's edit distance in a band a third
-- of the name wide. Now the distance suggested is at most 8 (as tools/call's) and the work for
-- all candidates has a budget (as upstream.lua's for servers.<server>.<tool>).

do
  db.exec([[WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
    INSERT INTO catalog_tools (category, name, source, summary, definition)
    SELECT 'lookalike', 'ab' || replace(printf('%200s', ''), ' ', 'x') || printf('%054d', i),
      'upstream:lookalike', '', '{}' FROM n]])
  local wanted = "ab" .. string.rep("x", 200) .. string.format("%054d", 1)
  local r, used = counted(400, handlers.get_tool_definition, { tool_name = "ab" .. string.rep("x", 254) },
    { tenant = "default" })
  local text = r[1] and r[2] and r[2].content[1].text or tostring(r[2])
  check("unknown look-alike name answered within the instruction budget (" .. used .. "M used)",
    text:find("budget exceeded", 1, true), nil)
  check("... as an unknown tool", text:match("^unknown tool") ~= nil, true)
  -- a near miss is still suggested
  r = counted(400, handlers.get_tool_definition, { tool_name = wanted:sub(1, -2) .. "x" }, { tenant = "default" })
  text = r[1] and r[2] and r[2].content[1].text or tostring(r[2])
  check("a near miss is suggested", text:find("Closest matches: " .. wanted .. " (lookalike)", 1, true) ~= nil, true)
end

db.close()
H.done()
