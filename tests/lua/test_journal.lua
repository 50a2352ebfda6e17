-- tests/lua/test_journal.lua - the execution journal (lua/mcp/journal.lua over lua/mcp/history.lua)
-- against a real SQLite through the sqlite3 shell (skipped when it is missing): migration 5 on a
-- database that already has execution rows (each gets a ref), list_executions with every filter,
-- hostile search text (LIKE and FTS syntax, quotes, a string longer than journal_max_code_bytes)
-- that matches only itself, tenants that never see each other's rows (list, search, get, rerun
-- all answer as for an unknown id), the fetch of one execution (complete and cut results, code
-- not kept), and execute_code's rerun_id (the code found, the new context_vars submitted, the
-- ref recorded as rerun_of). Rows are inserted as the writer thread (src/history.c) inserts them.
-- End to end with the real binary: tests/integration/journal.test.mjs,
-- tests/security/journal.test.mjs. Standalone: `lua5.4 tests/lua/test_journal.lua`.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_has = H.check, H.check_has
local NULL = H.NULL

local db = H.sqlite_db()
if not db then
  print("skip: sqlite3 shell not found; the journal tests need it")
  H.done()
end

-- src/store.c leaves a NULL column out of its row; the shell's JSON gives null: drop those
local shell_query = db.query
function db.query(...)
  local rows = shell_query(...)
  for _, r in ipairs(rows) do
    for k, v in pairs(r) do if v == NULL then r[k] = nil end end
  end
  return rows
end
function db.row(...) return db.query(...)[1] end

local m = H.new_mb({ journal_max_code_bytes = 200, journal_max_rows = 50 })
m.db = db
local flushes = 0
m.history_flush = function() flushes = flushes + 1 return 0, 0 end
local migrations = require("mcp.schema")

---------------------------------------------------------------------------------------------
-- migration 5 on a database with rows

local before = {}
for i = 1, 4 do before[i] = migrations[i] end
db.migrate(before)
db.exec([[INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions, memory_peak, code_hash, tool)
  VALUES ('default', 1, 1, 'ok', 1, 1, 'h', 'execute_code'), ('default', 2, 1, 'ok', 1, 1, 'h', 'execute_code')]])
db.migrate(migrations)
check("old rows get a 16-hex-digit ref each", db.row([[SELECT count(DISTINCT ref) AS n FROM executions
  WHERE length(ref) = 16 AND ref NOT GLOB '*[^0-9a-f]*']]).n, 2)
db.exec("DELETE FROM executions")

---------------------------------------------------------------------------------------------
-- rows as the writer inserts them

local T0 = 1764120000000 -- 2025-11-26T01:20:00Z
local function put(tenant, ref, at, outcome, code, extra)
  extra = extra or {}
  db.run([[INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions, memory_peak,
    code_hash, tool, ref, code, code_bytes, context_bytes, result_head, result_bytes, output_head,
    output_bytes, error, tools_called, rerun_of) VALUES (?, ?, 1.5, ?, 10, 20, 'hash', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)]],
    tenant, at, outcome, extra.tool or "execute_code", ref, code, extra.code_bytes or (code and #code) or 0,
    extra.context_bytes or 0, extra.result_head, extra.result_bytes, extra.output_head, extra.output_bytes,
    extra.error, extra.tools, extra.rerun_of)
end
put("alice", "00000000000000a6", T0 - 60000, "ok", "return require('skills.text_stats')(__mb_tool_args)",
  { tool = "text_stats" })
put("alice", "00000000000000a1", T0, "ok", "return 1 + 1", { result_head = "2", result_bytes = 1 })
put("alice", "00000000000000a2", T0 + 60000, "runtime", "error('boom')  -- 100% of_it", { error = "boom" })
put("alice", "00000000000000a3", T0 + 120000, "ok", "return servers.srv.echo{ msg = 'x' }",
  { tools = "srv.echo\nsrv.add", result_head = '{"a":[1,2,3],"b":"', result_bytes = 5000,
    output_head = "printed", output_bytes = 7, context_bytes = 42 })
put("alice", "00000000000000a4", T0 + 180000, "ok", nil, { code_bytes = 9000 })
put("alice", "00000000000000a5", T0 + 240000, "timeout", "while true do end -- it's \"quoted\" NEAR(a b) *")
put("bob", "00000000000000b1", T0 + 30000, "ok", "return 'bob secret'", { result_head = '"bob"' })

local tools = H.load_tools()
local list = tools.by_name.list_executions.handler
local exec = tools.by_name.execute_code.handler
local function req(tenant) return H.request(tenant) end
local function ids(r)
  if r.isError then return "error: " .. r.content[1].text end
  local out = {}
  for i, e in ipairs(r.structuredContent.executions) do out[i] = e.id:sub(-2) end
  return out
end
local function err(r) return r.isError and r.content[1].text or "not an error" end

---------------------------------------------------------------------------------------------
-- listing and filters

check("all of a tenant, newest first", ids(list({}, req("alice"))), { "a5", "a4", "a3", "a2", "a1", "a6" })
check("the list flushes the writer first", flushes > 0, true)
local first = list({ limit = 2 }, req("alice")).structuredContent
check("limit and more", { #first.executions, first.more }, { 2, true })
check("a listed execution", first.executions[2], { id = "00000000000000a4", started_at = "2025-11-26T01:23:00Z",
  ms = 1.5, outcome = "ok", code = "(9000 bytes, not kept)" })
check("code preview on one line", list({ query = "servers" }, req("alice")).structuredContent.executions[1].code,
  "return servers.srv.echo{ msg = 'x' }")
check("query: text in the code, ASCII case folded", ids(list({ query = "ERROR(" }, req("alice"))), { "a2" })
check("outcome", ids(list({ outcome = "ok" }, req("alice"))), { "a4", "a3", "a1", "a6" })
check("outcome failed", ids(list({ outcome = "failed" }, req("alice"))), { "a5", "a2" })
check("tool called", ids(list({ tool = "srv.add" }, req("alice"))), { "a3" })
check("a published tool's execution shows the tool", list({ query = "text_stats" }, req("alice")).structuredContent.executions[1].tool,
  "text_stats")
check("since (ISO) and until (ms)", ids(list({ since = "2025-11-26T01:21:00Z", ["until"] = T0 + 180000 }, req("alice"))),
  { "a3", "a2" })
check("since with a fraction and an offset", #ids(list({ since = "2025-11-26T01:21:00.000Z", ["until"] = "2025-11-26T01:22:00+00:00" },
  req("alice"))), 1)
check("a time in another zone is refused", err(list({ since = "2025-11-26T01:21:00+02:00" }, req("alice"))):match("^invalid arguments: since") ~= nil, true)
check("since a date", #ids(list({ since = "2025-11-26" }, req("alice"))), 6)
check("filters together", ids(list({ query = "return", outcome = "ok", since = T0 + 1 }, req("alice"))), { "a3" })

---------------------------------------------------------------------------------------------
-- hostile search text is plain text

check("% is a literal, not a wildcard", ids(list({ query = "%" }, req("alice"))), { "a2" })
check("_ is a literal", ids(list({ query = "of_it" }, req("alice"))), { "a2" })
check("_ does not match any character", ids(list({ query = "of_i_" }, req("alice"))), {})
check("quotes", ids(list({ query = "it's \"quoted\"" }, req("alice"))), { "a5" })
check("FTS syntax", ids(list({ query = "NEAR(a b) *" }, req("alice"))), { "a5" })
check("SQL in the query", ids(list({ query = "' OR 1=1 --" }, req("alice"))), {})
check("SQL in the tool filter", ids(list({ tool = "%' OR tenant = 'bob" }, req("alice"))), {})
check("a query longer than journal_max_code_bytes", err(list({ query = string.rep("x", 201) }, req("alice"))),
  "invalid arguments: query is 201 bytes, more than journal_max_code_bytes=200 (the most of an execution's code the journal keeps)")
do -- a search text is at most 256 bytes whatever journal_max_code_bytes is (instr's cost)
  local keep = m.config.journal_max_code_bytes
  m.config.journal_max_code_bytes = 65536
  check("a query longer than 256 bytes", err(list({ query = string.rep("a", 257) }, req("alice"))),
    "invalid arguments: query is 257 bytes, more than the 256 a search text may have; search for a shorter part of it")
  check("a tool text longer than 256 bytes", err(list({ tool = string.rep("a", 300) }, req("alice"))),
    "invalid arguments: tool is 300 bytes, more than the 256 a search text may have; search for a shorter part of it")
  check("a query of 256 bytes is taken", ids(list({ query = string.rep("a", 256) }, req("alice"))), {})
  m.config.journal_max_code_bytes = keep
end
check("a bad outcome", err(list({ outcome = "ok' OR '1" }, req("alice"))):match("^invalid arguments: outcome must be") ~= nil, true)
check("a bad time", err(list({ since = "yesterday" }, req("alice"))),
  'invalid arguments: since must be milliseconds since the epoch or a UTC time such as "2026-11-26T01:30:00Z"')
check("limit above journal_max_rows", err(list({ limit = 51 }, req("alice"))),
  "invalid arguments: limit must be an integer from 1 to journal_max_rows=50")
check("an unknown argument", err(list({ tenant = "bob" }, req("alice"))):match('has no argument "tenant"') ~= nil, true)

check("a backslash is a literal", ids(list({ query = "\\%" }, req("alice"))), {})
check("NUL matches nothing", ids(list({ query = "\0" }, req("alice"))), {})

---------------------------------------------------------------------------------------------
-- the search budget: journal_search_bytes of code, newest first; search_cut says where it
-- stopped and before goes on from there until everything was searched

do
  local keep = m.config.journal_search_bytes
  m.config.journal_search_bytes = 60 -- a5 (46 bytes) and a4 (9000, not kept), then cut
  local r = list({ query = "return" }, req("alice")).structuredContent
  check("nothing found in the newest two", ids(list({ query = "return" }, req("alice"))), {})
  check("the cut is said, with where to go on", { r.search_cut.searched_executions,
    r.search_cut.searched_code_bytes, r.search_cut.before, r.search_cut.journal_search_bytes, r.more },
    { 2, 46 + 9000, "00000000000000a4", 60, false })
  check("and in words", r.search_cut.note, 'only the newest 2 executions\' code was searched '
    .. '(journal_search_bytes=60); older ones may match: call again with before = "00000000000000a4"')
  local found, pages, before = {}, 0, nil
  repeat
    pages = pages + 1
    local page = list({ query = "return", before = before }, req("alice")).structuredContent
    for _, e in ipairs(page.executions) do found[#found + 1] = e.id:sub(-2) end
    before = page.search_cut and page.search_cut.before
  until not before or pages > 10
  check("going on with before finds what one unbounded search found", found, { "a3", "a1", "a6" })
  m.config.journal_search_bytes = 1 << 40
  check("unbounded: all at once, no cut", { ids(list({ query = "return" }, req("alice"))),
    list({ query = "return" }, req("alice")).structuredContent.search_cut }, { { "a3", "a1", "a6" }, nil })
  m.config.journal_search_bytes = keep
end
check("before pages a list", ids(list({ before = "00000000000000a3" }, req("alice"))), { "a2", "a1", "a6" })
check("before of an unknown id", err(list({ before = "00000000000000ff" }, req("alice"))):match("^no execution 00000000000000ff") ~= nil, true)
check("before of another tenant's id is unknown", err(list({ before = "00000000000000b1" }, req("alice"))):match("^no execution") ~= nil, true)
check("a bad before", err(list({ before = "x" }, req("alice"))):match("^invalid arguments: before must be an execution id") ~= nil, true)

---------------------------------------------------------------------------------------------
-- tenants

check("bob sees only his", ids(list({}, req("bob"))), { "b1" })
check("bob's search does not reach alice's code", ids(list({ query = "return" }, req("bob"))), { "b1" })
check("alice's search does not reach bob's code", ids(list({ query = "bob secret" }, req("alice"))), {})
local unknown = "no execution 00000000000000b1 in your journal (list_executions lists the ones kept: the newest "
  .. "journal_max_rows=50, none older than journal_max_age_s=2592000)"
check("alice cannot get bob's execution", err(list({ id = "00000000000000b1" }, req("alice"))), unknown)
check("an id that never existed gets the same answer", err(list({ id = "00000000000000f9" }, req("alice"))),
  unknown:gsub("b1 in", "f9 in"))
check("alice cannot rerun bob's execution", err(exec({ rerun_id = "00000000000000b1" }, req("alice"))), unknown)
check("the default tenant sees no token tenant's rows", ids(list({}, req("default"))), {})

---------------------------------------------------------------------------------------------
-- one execution in full

local one = list({ id = "00000000000000A3" }, req("alice")).structuredContent
check("an execution in full (ids in any case)", one, {
  id = "00000000000000a3", started_at = "2025-11-26T01:22:00Z", duration_ms = 1.5, outcome = "ok",
  tool = "execute_code", instructions = 10, memory_peak_bytes = 20, code_bytes = 36, code_kept = true,
  code = "return servers.srv.echo{ msg = 'x' }", code_hash = "hash", context_vars_bytes = 42,
  output = "printed", output_bytes = 7, tools_called = { "srv.echo", "srv.add" },
  result_bytes = 5000, result_json_head = '{"a":[1,2,3],"b":"' })
check("a complete result is a value", list({ id = "00000000000000a1" }, req("alice")).structuredContent.result, 2)
local big = list({ id = "00000000000000a4" }, req("alice")).structuredContent
check("code not kept", { big.code_kept, big.code, big.code_bytes, big.code_not_kept },
  { false, nil, 9000, "more than journal_max_code_bytes=200" })
check("a malformed id", err(list({ id = "a3" }, req("alice"))),
  'invalid arguments: id must be an execution id from list_executions (16 hex digits), got "a3"')

---------------------------------------------------------------------------------------------
-- rerun

local r = req("alice")
exec({ rerun_id = "00000000000000a1", context_vars = { x = 5 }, timeout_ms = 100 }, r)
check("rerun submits the kept code with the new context and limits", { r.specs[1].code, r.specs[1].context_json,
  r.specs[1].timeout_ms, r.specs[1].rerun_of }, { "return 1 + 1", '{"x":5}', 100, "00000000000000a1" })
check("rerun of code not kept", err(exec({ rerun_id = "00000000000000a4" }, req("alice"))),
  "execution 00000000000000a4's code was not kept: 9000 bytes, more than journal_max_code_bytes=200")
-- a row recorded before the journal (migration 5): no code and no size
db.run([[INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions, memory_peak, code_hash,
  tool, ref) VALUES ('carol', 1, 1, 'ok', 1, 1, 'h', 'execute_code', '00000000000000c1')]])
check("rerun of a row recorded before the journal says so (not '0 bytes, more than ...')",
  err(exec({ rerun_id = "00000000000000c1" }, req("carol"))),
  "execution 00000000000000c1 was recorded before the journal kept code: it cannot be rerun")
check("listed as recorded before the journal", list({}, req("carol")).structuredContent.executions[1].code,
  "(recorded before the journal kept code)")
check("rerun of a published tool's execution", err(exec({ rerun_id = "00000000000000a6" }, req("alice"))),
  "execution 00000000000000a6 ran the tool text_stats, not execute_code: call text_stats again instead")
check("rerun of an unknown id", err(exec({ rerun_id = "00000000000000ff" }, req("alice"))), unknown:gsub("b1 in", "ff in"))

---------------------------------------------------------------------------------------------
-- the journal off

local m2 = H.new_mb({ history_max_rows = 0 })
m2.db = db
local tools2 = H.load_tools()
check("journal off: list", err(tools2.by_name.list_executions.handler({}, req("alice"))),
  "the journal is off on this server (history_max_rows=0)")
check("journal off: rerun", err(tools2.by_name.execute_code.handler({ rerun_id = "00000000000000a1" }, req("alice"))),
  "the journal is off (history_max_rows=0): nothing can be rerun")

db.close()
H.done()
