-- tests/lua/test_store.lua - the store's schema (lua/mcp/schema.lua) and the SQL the policy
-- modules send it, against a real SQLite through the sqlite3 shell (skipped when it is missing):
-- the migrations apply in order to an empty database and leave user_version at their count;
-- every constant SQL statement in lua/mcp/*.lua (string literals, and literals joined with "..")
-- compiles against that schema (EXPLAIN, so a renamed column or a typo fails here rather than at
-- the first request that runs it); the execution log's summary (lua/mcp/history.lua) counts real
-- rows. Statements assembled from variables (the catalog's search statements) are not seen here;
-- tests/integration/catalog.test.mjs runs them.
-- Standalone: `lua5.4 tests/lua/test_store.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check = H.check

local db = H.sqlite_db()
if not db then
  print("skip: sqlite3 shell not found; the store tests need it")
  H.done()
end

---------------------------------------------------------------------------------------------
-- migrations

local m = H.new_mb()
m.db = db
local migrations = require("mcp.schema")
check("migrations are a list of SQL texts", (function()
  for i, s in ipairs(migrations) do if type(s) ~= "string" then return i end end
  return #migrations > 0 and next(migrations, #migrations) == nil
end)(), true)
db.migrate(migrations)
check("user_version is the number of migrations", db.row("PRAGMA user_version").user_version, #migrations)
local tables = {}
for _, r in ipairs(db.query("SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'catalog_fts_%' AND name NOT LIKE 'sqlite_%' ORDER BY name")) do
  tables[#tables + 1] = r.name
end
check("tables and indexes", tables, { "audit", "audit_by_at", "audit_by_tenant", "catalog_categories", "catalog_fts", "catalog_sources", "catalog_tools",
  "catalog_tools_by_name", "catalog_tools_by_source", "executions", "executions_by_ref", "executions_by_tenant",
  "executions_code_bytes",
  "pii_vault", "skill_versions", "skills", "tasks", "tasks_by_expiry", "tasks_by_tenant" })
check("migration 4 added publish", { db.row("SELECT count(*) AS n FROM pragma_table_info('skills') WHERE name = 'publish'").n,
  db.row("SELECT count(*) AS n FROM pragma_table_info('skill_versions') WHERE name = 'publish'").n }, { 1, 1 })
db.migrate(migrations)
check("migrating again changes nothing", db.row("PRAGMA user_version").user_version, #migrations)

---------------------------------------------------------------------------------------------
-- every constant statement of the policy compiles against the schema

-- The string literals of Lua source in order: {text, s, e} (comments skipped).
local function literals(src)
  local out, i, n = {}, 1, #src
  local ESC = { n = "\n", t = "\t", r = "\r", ['"'] = '"', ["'"] = "'", ["\\"] = "\\" }
  while i <= n do
    local c = src:sub(i, i)
    if src:sub(i, i + 1) == "--" then
      local eq = src:match("^%-%-%[(=*)%[", i)
      local e = eq and select(2, src:find("]" .. eq .. "]", i, true)) or src:find("\n", i, true)
      i = (e or n) + 1
    elseif c == '"' or c == "'" then
      local j, buf = i + 1, {}
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then buf[#buf + 1] = ESC[src:sub(j + 1, j + 1)] or src:sub(j + 1, j + 1); j = j + 2
        elseif d == c then break
        else buf[#buf + 1] = d; j = j + 1 end
      end
      out[#out + 1] = { text = table.concat(buf), s = i, e = j }
      i = j + 1
    elseif src:match("^%[=*%[", i) then
      local eq = src:match("^%[(=*)%[", i)
      local from = i + #eq + 2
      local _, e = src:find("]" .. eq .. "]", from, true)
      out[#out + 1] = { text = src:sub(from, e - #eq - 2):gsub("^\n", ""), s = i, e = e }
      i = e + 1
    else
      i = i + 1
    end
  end
  return out
end

-- SQL statements: literals, and chains of literals joined by "..", that start with a statement
-- keyword; a chain that also joins a variable is dynamic and left out.
local function statements(src)
  local lits, out = literals(src), {}
  local k = 1
  while k <= #lits do
    local first, last = k, k
    while lits[last + 1] and src:sub(lits[last].e + 1, lits[last + 1].s - 1):match("^%s*%.%.%s*$") do last = last + 1 end
    local dynamic = src:sub(1, lits[first].s - 1):match("%.%.%s*$") or src:match("^%s*%.%.", lits[last].e + 1)
    local parts = {}
    for x = first, last do parts[#parts + 1] = lits[x].text end
    local sql = table.concat(parts)
    local kw = sql:match("^%s*(%u+)%s")
    if not dynamic and kw and ({ SELECT = 1, INSERT = 1, UPDATE = 1, DELETE = 1, WITH = 1, REPLACE = 1 })[kw] then
      out[#out + 1] = sql
    end
    k = last + 1
  end
  return out
end

local all, by_file = {}, {}
for _, f in ipairs({ "catalog", "history", "journal", "pii", "skills", "skill_tools", "skill_publish", "tools", "upstream",
                     "upstream_config", "upstream_transport", "workflows", "workspace_tools", "server", "catalog_text", "tool_stubs" }) do
  local fh = assert(io.open(H.ROOT .. "lua/mcp/" .. f .. ".lua", "rb"))
  local list = statements(fh:read("a"))
  fh:close()
  by_file[f] = #list
  for _, s in ipairs(list) do all[#all + 1] = { file = f, sql = s } end
end
-- the extractor finds what is there (so that an empty list cannot pass)
check("statements found per module", { by_file.pii, by_file.history, by_file.skills >= 12, by_file.catalog >= 30,
  by_file.tool_stubs }, { 3, 5, true, true, 1 })

-- one shell run: EXPLAIN each statement on its own line, parameters as NULL
local lines = {}
for i, st in ipairs(all) do
  local one = st.sql:gsub("%s+", " "):gsub("%?", "NULL")
  lines[i] = "EXPLAIN " .. one .. ";"
end
local sqlfile = os.tmpname()
local fh = assert(io.open(sqlfile, "wb"))
fh:write(table.concat(lines, "\n"), "\n")
fh:close()
local p = io.popen(string.format("sqlite3 '%s' < '%s' 2>&1 >/dev/null", db.path, sqlfile))
local errors = p:read("a")
p:close()
os.remove(sqlfile)
local bad = {}
for line_no, msg in errors:gmatch("near line (%d+): ([^\n]*)") do
  local st = all[tonumber(line_no)]
  bad[#bad + 1] = (st and st.file or "?") .. ": " .. msg .. " in: " .. (st and st.sql:gsub("%s+", " ") or "?")
end
if errors ~= "" and #bad == 0 then bad[1] = errors end
check("every constant statement compiles against the schema (" .. #all .. " statements)", bad, {})

---------------------------------------------------------------------------------------------
-- the execution log's summary on real rows

db.exec([[
INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions, memory_peak, code_hash, tool) VALUES
  ('default', 1000, 1.5, 'ok', 10, 100, 'h1', 'execute_code'),
  ('default', 900, 2.0, 'ok', 10, 100, 'h2', 'execute_code'),
  ('default', 1100, 3.0, 'timeout', 10, 100, 'h3', 'stats'),
  ('t1', 500, 1.0, 'memory', 10, 100, 'h4', 'execute_code');
]])
local history = require("mcp.history")
m.history_flush = function() return 2, 0 end
check("history summary", history.summary("default"),
  { recorded = 3, since_ms = 900, by_outcome = { ok = 2, timeout = 1 }, max_rows = 100000, tenant_max_rows = 1000,
    max_age_s = 2592000, dropped = 2, write_failures = 0 })
check("history summary of another tenant", history.summary("t1").by_outcome, { memory = 1 })
check("history summary of no tenant is the default's", history.summary(nil).recorded, 3)

db.close()
H.done()
