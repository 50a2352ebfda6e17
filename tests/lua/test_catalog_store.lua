-- tests/lua/test_catalog_store.lua - the parts of the tool catalog (lua/mcp/catalog.lua) that
-- need the store, on both engines: a real SQLite through the sqlite3 shell (H.sqlite_db) and a
-- throwaway PostgreSQL cluster through psql (H.pg_db; the catalog's tsvector index, its tsquery
-- translation and ranking, docs/catalog.md "On PostgreSQL"). An engine whose programs are missing
-- is skipped with the reason printed. Covered: the suggestions for an unknown tool name, search
-- (exact names first, prefix terms, camelCase and snake_case parts, the vocabulary, column weights,
-- category filter, all/most/any, unknown words), query text that is FTS5 or tsquery syntax, and
-- re-import and removal keeping the index in step.
--
-- Standalone: `lua5.4 tests/lua/test_catalog_store.lua` from the repo root. Work is measured in
-- Lua instructions (a count hook), not time, so the bound holds on any machine.
-- Ends with "N passed, N failed"; exits 1 on any failure.

local H = dofile((arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$") or "") .. "tests/lua/harness.lua")
local check = H.check

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

-- A small catalog whose right answers are clear-cut (category form).
local CATALOG = {
  categories = {
    files = { description = "Files on disk", tools = {
      read_file = { description = "Read the whole content of a file as text.",
        inputSchema = { type = "object", properties = { path = { type = "string", description = "Path of the file" } } } },
      write_file = { description = "Write text to a file, replacing it.",
        inputSchema = { type = "object", properties = { path = { type = "string" }, content = { type = "string" } } } },
      list_directory = { description = "List the entries of a directory.",
        inputSchema = { type = "object", properties = { path = { type = "string" } } } },
    } },
    people = { description = "User accounts", tools = {
      getUserProfile = { description = "The profile of one user: name, email, avatar." },
      update_user = { description = "Change fields of a user account." },
    } },
    text = { description = "Text helpers", tools = {
      ["re.gsub"] = { description = "Replace every match of a regular expression." },
      ["str.trim"] = { description = "Remove whitespace at both ends of a string." },
      zebra_stripes = { description = "Colour alternate rows; mentions a file only here." },
    } },
  },
}

local function suite(engine)
  local db, why
  if engine == "postgres" then db, why = H.pg_db() else db = H.sqlite_db() end
  if not db then
    print(string.format("skip (%s): %s", engine, why or "sqlite3 shell not found; the catalog store tests need it"))
    return
  end
  if engine == "sqlite" then
    local shell_query = db.query
    function db.query(...) -- src/store.c leaves a NULL column out of its row
      local rows = shell_query(...)
      for _, r in ipairs(rows) do
        for k, v in pairs(r) do if v == H.NULL then r[k] = nil end end
      end
      return rows
    end
    function db.row(...) return db.query(...)[1] end
  end
  local ok, err = pcall(function()
    local m = H.new_mb({})
    m.db = db
    m.timer = nil
    db.migrate(require(engine == "postgres" and "mcp.schema_pg" or "mcp.schema"))

    local catalog = require("mcp.catalog")
    catalog.state.started, catalog.state.ready = true, true -- no start-up import: the rows are below
    local handlers = {}
    catalog.init({
      register = function(def, fn) handlers[def.name] = fn end,
      tool_error = function(msg) return { isError = true, content = { { type = "text", text = msg } } } end,
      server_stats_providers = {},
    })
    local function label(s) return engine .. ": " .. s end

    -------------------------------------------------------------------------------------------
    -- search

    assert(catalog.import("test:small", CATALOG))
    local function search(args)
      args.detail_level = args.detail_level or "name"
      local res = handlers.search_tools(args)
      if res.isError then return nil, res.content[1].text end
      return H.json_decode(res.content[1].text)
    end
    local function names(q, extra)
      local args = extra or {}
      args.query = q
      local r, e = search(args)
      if not r then return "error: " .. e end
      local out = {}
      for i, t in ipairs(r.tools) do out[i] = t.category .. "/" .. t.name end
      return table.concat(out, " "), r
    end
    local function first(q, extra) return (names(q, extra):match("^(%S*)")) end

    check(label("an exact name comes first"), first("read_file"), "files/read_file")
    check(label("category.name is an exact name"), first("text.re.gsub"), "text/re.gsub")
    check(label("a prefix of a word finds it"), first("direc"), "files/list_directory")
    check(label("camelCase parts are words"), first("user profile"), "people/getUserProfile")
    check(label("the whole camelCase name too"), first("getuserprofile"), "people/getUserProfile")
    check(label("a stemmed form finds the word"), first("listing directories"), "files/list_directory")
    check(label("the vocabulary: substitute finds replace"), first("substitute"), "text/re.gsub")
    -- "file" is in three names and in zebra_stripes' description: names weigh more
    local list = names("file")
    check(label("a word in the name ranks above the same word in a description"),
      list:find("text/zebra_stripes", 1, true) > list:find("files/write_file", 1, true), true)
    check(label("names made of the query's words first"), first("write file"), "files/write_file")
    check(label("category filter"), names("file", { category = "text" }), "text/zebra_stripes")
    local _, r = names("read file nonexistentword")
    check(label("a word no entry has is left out and reported"), r.unknown_words, { "nonexistentword" })
    check(label("... the others still match"), r.tools[1].name, "read_file")
    _, r = names("remove whitespace string directory")
    check(label("no entry has every word: those lacking one (most)"), r.match, "most")
    check(label("... the right one first"), r.tools[1].name, "str.trim")

    -- what the user types is never query syntax: FTS5's and tsquery's operators, quotes,
    -- backslashes, prefix marks, phrase operators
    local nasty = {
      "read & file", "read | !file", "file:*", "'read' file", "read\\ file", "read <-> file",
      "(read) (file", 'read" OR "x', "NEAR(read file)", "read*", "-read +file", "read:A file",
      "'' \\' :* & | ! < > ( )", "file)) OR ((", "fi'le", "\"", "read\0file",
    }
    for _, q in ipairs(nasty) do
      local got, e = search({ query = q })
      local fine = got ~= nil or (e and e:match("has no words to search for") ~= nil)
      check(label("query syntax in the text is plain text: " .. string.format("%q", q)), fine, true)
    end
    check(label("'read & file' is the words read and file"), names("read & file"), names("read file"))
    check(label("'file:*' is the word file"), names("file:*"), names("file"))
    check(label("'read | !file' is the words read and file"), names("read | !file"), names("read file"))

    -------------------------------------------------------------------------------------------
    -- the index follows re-imports and removals

    local changed = H.json_decode(H.json_encode(CATALOG))
    changed.categories.files.tools.read_file = nil
    changed.categories.files.tools.fetch_document = { description = "Fetch a document by its path." }
    assert(catalog.import("test:small", changed))
    check(label("an entry gone from a source is not found"), names("read_file"):find("files/read_file", 1, true), nil)
    check(label("a new entry is found"), first("fetch document"), "files/fetch_document")
    check(label("an unchanged entry is still found"), first("write_file"), "files/write_file")
    assert(catalog.import("test:other", { categories = { files = { tools = {
      fetch_document = { description = "Also fetches (skipped: test:other does not take precedence)." } } } } }))
    check(label("the clash leaves one entry"), names("fetch_document"), "files/fetch_document")
    assert(catalog.remove("test:small"))
    check(label("the skipped entry comes back when the winner goes"), names("fetches"), "files/fetch_document")
    assert(catalog.remove("test:other"))
    check(label("a removed source's entries are not found"), names("document"), "")
    check(label("a bad source is refused"), select(2, catalog.import("test:bad", { categories = 5 })),
      "catalog.import test:bad: categories: expected an object, got integer")
    local c = catalog.counts()
    check(label("counts, a source in error among them"), { c.tools, c.sources, c.source_errors }, { 0, 1, 1 })

    -------------------------------------------------------------------------------------------
    -- suggestions: a catalog of 2,000 long look-alike names (an upstream names its tools) and an
    -- unknown name like them held the loop ~4 s: every candidate's edit distance in a band a third
    -- of the name wide. Now the distance suggested is at most 8 (as tools/call's) and the work for
    -- all candidates has a budget (as upstream.lua's for servers.<server>.<tool>).

    if engine == "postgres" then
      db.exec([[INSERT INTO catalog_tools (category, name, source, summary, definition)
        SELECT 'lookalike', 'ab' || repeat('x', 200) || lpad(i::text, 54, '0'),
          'upstream:lookalike', '', '{}' FROM generate_series(1, 2000) AS i]])
    else
      db.exec([[WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
        INSERT INTO catalog_tools (category, name, source, summary, definition)
        SELECT 'lookalike', 'ab' || replace(printf('%200s', ''), ' ', 'x') || printf('%054d', i),
          'upstream:lookalike', '', '{}' FROM n]])
    end
    local wanted = "ab" .. string.rep("x", 200) .. string.format("%054d", 1)
    local res, used = counted(400, handlers.get_tool_definition, { tool_name = "ab" .. string.rep("x", 254) },
      { tenant = "default" })
    local text = res[1] and res[2] and res[2].content[1].text or tostring(res[2])
    check(label("unknown look-alike name answered within the instruction budget (" .. used .. "M used)"),
      text:find("budget exceeded", 1, true), nil)
    check(label("... as an unknown tool"), text:match("^unknown tool") ~= nil, true)
    -- a near miss is still suggested
    res = counted(400, handlers.get_tool_definition, { tool_name = wanted:sub(1, -2) .. "x" }, { tenant = "default" })
    text = res[1] and res[2] and res[2].content[1].text or tostring(res[2])
    check(label("a near miss is suggested"), text:find("Closest matches: " .. wanted .. " (lookalike)", 1, true) ~= nil, true)
  end)
  check(engine .. ": the suite ran to its end", ok or tostring(err), true)
  db.close()
end

suite("sqlite")
suite("postgres")
H.done()
