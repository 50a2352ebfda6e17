-- mcp/catalog.lua - the tool catalog: progressive discovery over full-text search (SQLite FTS5,
-- or a weighted tsvector on PostgreSQL: mb.db.dialect picks the SQL, docs/catalog.md "On
-- PostgreSQL"; everything else is the same Lua on both).
--
-- An agent facing thousands of tools asks for the few it needs (search_tools), reads one
-- definition with a Lua call example (get_tool_definition), or looks at the categories
-- (list_tool_categories), instead of loading every definition up front.
--
-- Sources, each a set of entries (a tool or a Lua function, identified by category + name):
--  * "moonbox": the sandbox API, compiled into the binary (lua/catalog/sandbox_api.lua);
--  * "file:<name>.json": every *.json file in catalog_dir, in either shape (category form or MCP
--    form, see catalog_text.normalize). Imported at start and re-imported 100 ms after the file
--    changes (mb.watch + mb.timer). A file that fails to parse or validate is logged with its path
--    and the position or JSON path of the problem; its last good content stays indexed;
--  * any other name: catalog.import(source, shape) from other host modules (upstream servers).
--    These live for one run: they are dropped at start and imported again by their owner.
-- The start-up import runs 50 ms after start or at the first use of the catalog, in one
-- transaction. The store (schema migration 2) keeps sources, categories, entries with their full
-- definition as JSON (with its Lua example), and the FTS5 index. A source whose content did not
-- change is not re-indexed. When two sources define the same category + name, the one that takes
-- precedence wins whatever the order of imports: moonbox, then files (by name), then other
-- sources (by name); the other entry is counted as skipped and comes back when the winner goes.
-- Search (catalog_text.build_query): the entries that have every word of the query (each word a
-- quoted prefix term), or, when none has them all, the entries with any of them; ranked by bm25
-- with column weights (name first; on PostgreSQL ts_rank per term times bm25's idf); among the best matches, entries whose name is made of the
-- query's words first; ties broken by name and category. Answers are JSON text built in a fixed
-- key order, so the same catalog and query give the same bytes.

local mb = mb
local null = mb.null
local text = require("mcp.catalog_text")
-- synonyms of the words people use for tools, added to queries (lua/catalog/vocabulary.lua)
local VOCABULARY = text.compile_vocabulary(require("catalog.vocabulary"))

local M = {}

local BUILTIN = "moonbox"
local DEFAULT_LIMIT, MAX_LIMIT = 10, 200
local MAX_QUERY_BYTES = 1000
local DEBOUNCE_MS = 100
local START_DELAY_MS = 50    -- the start-up import waits this long unless the catalog is used
local RERANK_WINDOW = 20     -- extra bm25 matches looked at when putting name matches first
local SUGGEST_CELLS = 2000000 -- edit-distance cells computed for the suggestions of one unknown name
-- A vocabulary alternative in more entries than this (the larger of a count and a share of all
-- entries) is added to a query only when the user's word itself is in none (see common_term).
local COMMON_MIN, COMMON_SHARE = 100, 0.05
local FILE_PATTERN = "^[^.#~][^/]*%.json$"
-- bm25 column weights: name, category, description, params, use_cases
local WEIGHTS = "10.0, 3.0, 2.0, 1.0, 2.0"

local state = {
  ready = false,       -- the store is usable and the start-up import ran
  error = nil,         -- why not, for tool errors
  dir = nil,           -- catalog_dir
  watch = nil,         -- mb.watch handle
  pending = {},        -- file name -> debounce timer
  search_ms = {}, search_pos = 0,
  last_import = nil,   -- {source=, tools=, ms=}
  start_ms = nil,      -- duration of the start-up import
  df = {},             -- FTS term -> number of entries that have it (cleared on every change)
  entries = nil,       -- number of entries (nil after a change)
}
M.state = state

local function log(level, fmt, ...)
  mb.log(level, "catalog: " .. string.format(fmt, ...))
end

---------------------------------------------------------------------------------------------
-- SQL (constant strings: the store caches one prepared statement per text)

local SQL = {
  source = "SELECT source, content, status FROM catalog_sources WHERE source = ?",
  sources = "SELECT source, origin, status, error, tools, skipped FROM catalog_sources ORDER BY source",
  blocked = "SELECT source, content FROM catalog_sources WHERE skipped > 0 AND content IS NOT NULL",
  tool_at = "SELECT id, source FROM catalog_tools WHERE category = ? AND name = ?",
  insert_tool = "INSERT INTO catalog_tools (category, name, source, summary, definition) "
    .. "VALUES (?, ?, ?, ?, ?)",
  insert_fts = "INSERT INTO catalog_fts (rowid, name, category, description, params, use_cases) "
    .. "VALUES (?, ?, ?, ?, ?, ?)",
  delete_tool = "DELETE FROM catalog_tools WHERE id = ?",
  delete_fts = "DELETE FROM catalog_fts WHERE rowid = ?",
  delete_source_fts = "DELETE FROM catalog_fts WHERE rowid IN "
    .. "(SELECT id FROM catalog_tools WHERE source = ?)",
  delete_source_tools = "DELETE FROM catalog_tools WHERE source = ?",
  delete_source_cats = "DELETE FROM catalog_categories WHERE source = ?",
  delete_source = "DELETE FROM catalog_sources WHERE source = ?",
  insert_cat = "INSERT INTO catalog_categories (category, source, description) VALUES (?, ?, ?) "
    .. "ON CONFLICT (category, source) DO UPDATE SET description = excluded.description",
  source_ok = "INSERT INTO catalog_sources (source, origin, content, status, error, tools, "
    .. "skipped, updated_at) VALUES (?, ?, ?, 'ok', NULL, ?, ?, ?) ON CONFLICT (source) DO UPDATE "
    .. "SET origin = coalesce(excluded.origin, catalog_sources.origin), "
    .. "content = excluded.content, "
    .. "status = 'ok', error = NULL, "
    .. "tools = excluded.tools, skipped = excluded.skipped, updated_at = excluded.updated_at",
  source_error = "INSERT INTO catalog_sources (source, origin, content, status, error, tools, "
    .. "skipped, updated_at) VALUES (?, ?, NULL, 'error', ?, 0, 0, ?) ON CONFLICT (source) DO "
    .. "UPDATE SET origin = excluded.origin, status = 'error', error = excluded.error, "
    .. "updated_at = excluded.updated_at",
  source_status_ok = "UPDATE catalog_sources SET status = 'ok', error = NULL WHERE source = ?",
  displaced = "UPDATE catalog_sources SET skipped = skipped + 1, tools = tools - 1 WHERE source = ?",
  count_tools = "SELECT count(*) AS n FROM catalog_tools",
  count_categories = "SELECT count(DISTINCT category) AS n FROM catalog_tools",
  count_sources = "SELECT count(*) AS n, sum(CASE WHEN status = 'error' THEN 1 ELSE 0 END) AS errors "
    .. "FROM catalog_sources",
  by_name = "SELECT category, definition FROM catalog_tools WHERE name = ? ORDER BY category",
  by_name_cat = "SELECT category, definition FROM catalog_tools WHERE name = ? AND category = ?",
  categories = "SELECT category, count(*) AS n FROM catalog_tools GROUP BY category",
  category_descs = "SELECT category, source, description FROM catalog_categories",
  has_match = "SELECT rowid FROM catalog_fts WHERE catalog_fts MATCH ? LIMIT 1",
  category_exists = "SELECT 1 AS x FROM catalog_categories WHERE category = ? LIMIT 1",
  category_names = "SELECT DISTINCT category FROM catalog_categories",
  names_from = "SELECT name, category FROM catalog_tools WHERE name >= ? AND name < ? LIMIT 2000",
  term_count = "SELECT count(*) AS n FROM catalog_fts WHERE catalog_fts MATCH ?",
  fts_names = "SELECT t.name, t.category FROM catalog_fts JOIN catalog_tools t ON "
    .. "t.id = catalog_fts.rowid WHERE catalog_fts MATCH ? ORDER BY bm25(catalog_fts, " .. WEIGHTS
    .. "), t.name, t.category LIMIT 10",
}
local SQL_SQLITE = SQL

-- PostgreSQL (mb.db.dialect "postgres"): catalog_tools.fts, a tsvector, is the index (schema_pg.lua).
-- It is written with the row, from the five texts FTS5 gets, each weighted as bm25's column
-- weights: name A (10), category B (3), description and use_cases C (2), params D (1); TS_WEIGHTS
-- gives ts_rank those figures (scaled by 0.1, in the order D, C, B, A). Queries are tsquery texts
-- (catalog_text.TSQUERY) handed to to_tsquery as parameters. Statements without an entry here are
-- SQLite's, which run on both; the FTS5 rows (insert_fts, delete_fts, delete_source_fts) have
-- nothing to do.
local TS_CONFIG = "'moonbox_catalog'::regconfig"
local TS_WEIGHTS = "'{0.1, 0.2, 0.3, 1.0}'"
local TS_MATCH = "fts @@ to_tsquery(" .. TS_CONFIG .. ", ?)"
local function tsv(weight) return "setweight(to_tsvector(" .. TS_CONFIG .. ", ?), '" .. weight .. "')" end
local SQL_PG = setmetatable({
  insert_tool = "INSERT INTO catalog_tools (category, name, source, summary, definition, fts) "
    .. "VALUES (?, ?, ?, ?, ?, " .. tsv("A") .. " || " .. tsv("B") .. " || " .. tsv("C") .. " || "
    .. tsv("D") .. " || " .. tsv("C") .. ") RETURNING id",
  has_match = "SELECT id FROM catalog_tools WHERE " .. TS_MATCH .. " LIMIT 1",
  term_count = "SELECT count(*) AS n FROM catalog_tools WHERE " .. TS_MATCH,
}, { __index = SQL })
local PG = false -- the store is PostgreSQL (set by use_dialect)
-- A text of the index on PostgreSQL is at most this long (to_tsvector refuses a tsvector over
-- 1 MB; a catalog entry's texts are far shorter, but an upstream's schema is not ours to bound).
local TS_COLUMN_BYTES = 200000

-- Search statements by detail level, category filter and query.
local LEVEL_COLUMNS = {
  name = "t.name, t.category",
  summary = "t.name, t.category, t.summary",
  full = "t.name, t.category, t.definition",
}
local SEARCH = {}
for level, cols in pairs(LEVEL_COLUMNS) do
  SEARCH[level] = {
    fts = "SELECT " .. cols .. ", bm25(catalog_fts, " .. WEIGHTS .. ") AS score FROM catalog_fts "
      .. "JOIN catalog_tools t ON t.id = catalog_fts.rowid WHERE catalog_fts MATCH ? "
      .. "ORDER BY score, t.name, t.category LIMIT ?",
    fts_cat = "SELECT " .. cols .. ", bm25(catalog_fts, " .. WEIGHTS .. ") AS score FROM "
      .. "catalog_fts JOIN catalog_tools t ON t.id = catalog_fts.rowid WHERE catalog_fts MATCH ? "
      .. "AND t.category = ? ORDER BY score, t.name, t.category LIMIT ?",
    -- the best matches by score alone, then their rows (see run() in search)
    top = "SELECT " .. cols .. ", f.score FROM (SELECT rowid AS id, bm25(catalog_fts, " .. WEIGHTS
      .. ") AS score FROM catalog_fts WHERE catalog_fts MATCH ? ORDER BY score LIMIT ?) f "
      .. "JOIN catalog_tools t ON t.id = f.id ORDER BY f.score, t.name, t.category",
    all = "SELECT " .. cols .. " FROM catalog_tools t ORDER BY t.category, t.name LIMIT ?",
    all_cat = "SELECT " .. cols .. " FROM catalog_tools t WHERE t.category = ? "
      .. "ORDER BY t.category, t.name LIMIT ?",
  }
end

-- Search on PostgreSQL: bm25 is FTS5's; here each term of the query (a tsquery operand, once per
-- time it is written, as bm25 counts it) adds ts_rank of that term alone - a weighted, saturating
-- count of its occurrences (the column weights of TS_WEIGHTS) - times the term's inverse document
-- frequency, bm25's idf, from the number of entries that have it (kept in state.df). Negated, so
-- that lower is better as bm25's scores are. One statement per level, category filter and number
-- of terms, made of constant pieces; the terms and their idf are parameters. Summed in float8
-- (ts_rank answers a float4): no more ties than among bm25's doubles.
local TS_NORM = 0 -- ts_rank normalization (0: the entry's length does not count)
local PG_SEARCH = {}
local pg_search -- (below, with search)
local function pg_search_sql(level, cat, nterms)
  local key = level .. (cat and "/cat/" or "/") .. nterms
  local sql = PG_SEARCH[key]
  if sql then return sql end
  local parts = {}
  for i = 1, nterms do
    parts[i] = "ts_rank(" .. TS_WEIGHTS .. ", t.fts, to_tsquery(" .. TS_CONFIG .. ", ?), " .. TS_NORM
      .. ")::float8 * ?::float8"
  end
  sql = "SELECT " .. LEVEL_COLUMNS[level] .. ", -(" .. table.concat(parts, " + ") .. ") AS score "
    .. "FROM catalog_tools t WHERE t." .. TS_MATCH .. (cat and " AND t.category = ?" or "")
    .. " ORDER BY score, t.name, t.category LIMIT ?"
  PG_SEARCH[key] = sql
  return sql
end

---------------------------------------------------------------------------------------------
-- definitions

local function enc(v) return mb.json_encode(v) end

-- A JSON string; plain ASCII without escapes is written here, the rest by the codec.
local function jstr(s)
  if string.find(s, '[%c"\\\128-\255]') then return enc(s) end
  return '"' .. s .. '"'
end

-- A tool result whose structuredContent is the JSON text made from parts: answers are built as
-- text in a fixed key order, so the same catalog and query give the same bytes in every run.
local function json_result(parts)
  local json = table.concat(parts)
  return {
    content = { { type = "text", text = json } },
    structuredContent = mb.json_raw(json),
    isError = false,
  }
end

local function canonical(v) return text.canonical_json(v, enc) end

-- The order of the fields of a definition (anything else follows, sorted).
local FIELDS = { "name", "title", "category", "kind", "server", "source", "description", "signature",
                 "parameters", "returns", "inputSchema", "outputSchema", "annotations", "functions",
                 "use_cases", "example" }

-- The full definition of an entry as JSON text (stored, and spliced into answers): the fields in
-- the order of FIELDS, then any extra fields sorted by name; objects inside with sorted keys.
local function definition_json(e)
  local parts = {}
  local example = text.lua_example(e)
  for _, k in ipairs(FIELDS) do
    local v = e[k]
    if k == "example" then v = example end
    if v ~= nil then parts[#parts + 1] = '"' .. k .. '":' .. canonical(v) end
  end
  if e.extra then
    for _, k in ipairs(text.sorted_keys(e.extra)) do
      parts[#parts + 1] = jstr(tostring(k)) .. ":" .. canonical(e.extra[k])
    end
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

---------------------------------------------------------------------------------------------
-- precedence between sources

local function rank(source)
  if source == BUILTIN then return 0 end
  if source:sub(1, 5) == "file:" then return 1 end
  return 2
end

-- True when source a takes precedence over source b.
local function outranks(a, b)
  local ra, rb = rank(a), rank(b)
  if ra ~= rb then return ra < rb end
  return a < b
end

---------------------------------------------------------------------------------------------
-- import and removal (loop thread; each in one transaction)

-- Counts that search keeps about the catalog are stale once it changes.
local function changed()
  state.df = {}
  state.entries = nil
end

-- PostgreSQL: the replicas that share the catalog drop their counts when one of them changes it
-- (a notification at commit; listened to from ensure_started).
local NOTIFY_CHANNEL = "moonbox_catalog"

local function delete_rows(db, source)
  changed()
  if PG and db.notify then db.notify(NOTIFY_CHANNEL, "") end
  if not PG then db.run(SQL.delete_source_fts, source) end
  db.run(SQL.delete_source_tools, source)
  db.run(SQL.delete_source_cats, source)
end

-- Replaces the rows of `source` with `entries`. content is the text the entries came from (kept
-- so that the source can be imported again when a clash goes away). Returns indexed, skipped.
local function store_entries(source, origin, content, categories, entries, quiet)
  local db = mb.db
  return db.tx(function()
    delete_rows(db, source)
    local indexed, skipped = 0, 0
    for _, c in ipairs(categories) do
      db.run(SQL.insert_cat, c.name, source, c.description)
    end
    for _, e in ipairs(entries) do
      local row = db.row(SQL.tool_at, e.category, e.name)
      local take = true
      if row then
        if outranks(source, row.source) then
          if not PG then db.run(SQL.delete_fts, row.id) end
          db.run(SQL.delete_tool, row.id)
          db.run(SQL.displaced, row.source)
        else
          take = false
          skipped = skipped + 1
          if not quiet then
            log("warning", "%s: %s/%s is already defined by %s, which takes precedence; skipped",
              origin or source, e.category, e.name, row.source)
          end
        end
      end
      if take then
        local def = definition_json(e)
        local summary = text.one_line(e.description ~= "" and e.description or e.title or "")
        if PG then
          local cols = table.pack(text.index_fields(e))
          for i = 1, 5 do cols[i] = text.ts_words(text.utf8_cut(cols[i], TS_COLUMN_BYTES)) end
          db.run(SQL.insert_tool, e.category, e.name, source, summary, def, table.unpack(cols, 1, 5))
        else
          local _, id = db.run(SQL.insert_tool, e.category, e.name, source, summary, def)
          local n, c, d, p, u = text.index_fields(e)
          db.run(SQL.insert_fts, id, n, c, d, p, u)
        end
        indexed = indexed + 1
      end
    end
    db.run(SQL.source_ok, source, origin, content, indexed, skipped, math.floor(mb.now_ms()))
    return indexed, skipped
  end)
end

-- Parses content (JSON text of either shape) and stores it. Returns indexed, skipped or nil, err.
local function import_text(source, origin, content, quiet)
  local doc, jerr = mb.json_decode(content)
  if doc == nil then return nil, jerr end
  local cats, entries, verr = text.normalize(doc, source)
  if not cats then return nil, verr end
  return store_entries(source, origin, content, cats, entries, quiet)
end

local function record_error(source, origin, message)
  mb.db.run(SQL.source_error, source, origin, message, math.floor(mb.now_ms()))
end

local function remove_source(source)
  local db = mb.db
  return db.tx(function()
    local had = db.row(SQL.source, source) ~= nil
    delete_rows(db, source)
    db.run(SQL.delete_source, source)
    return had
  end)
end

-- Imports again, from their stored content, the sources that have entries hidden by another
-- source, highest precedence first, so that an entry whose winner went away comes back.
local function resolve()
  local visited = {}
  while true do
    local rows = mb.db.query(SQL.blocked)
    local pick
    for _, r in ipairs(rows) do
      if not visited[r.source] and (not pick or outranks(r.source, pick.source)) then pick = r end
    end
    if not pick then return end
    visited[pick.source] = true
    local ok, indexed, err = pcall(import_text, pick.source, nil, pick.content, true)
    if not ok or indexed == nil then
      log("error", "re-importing %s: %s", pick.source, tostring(ok and err or indexed))
    end
  end
end

local function with_resolve(fn, ...)
  local r = table.pack(fn(...))
  resolve()
  return table.unpack(r, 1, r.n)
end

-- Imports one catalog file by name; returns "imported", "unchanged", "removed" or "error".
local function import_file(name)
  local source = "file:" .. name
  local path = state.dir .. "/" .. name
  local limit = mb.config.max_message_bytes
  local content, rerr, code = mb.fs.read(path, limit)
  if not content then
    if code == "not_found" then
      if remove_source(source) then
        log("info", "%s is gone: its entries were removed", path)
        return "removed"
      end
      return "unchanged"
    end
    local msg = "catalog file " .. path .. ": " .. tostring(rerr)
    if code == "too_large" then msg = msg .. " (max_message_bytes)" end
    record_error(source, path, msg)
    log("error", "%s", msg:sub(9))
    return "error"
  end
  local old = mb.db.row(SQL.source, source)
  if old and old.content == content then
    if old.status ~= "ok" then mb.db.run(SQL.source_status_ok, source) end
    return "unchanged"
  end
  local t0 = mb.now_ms()
  local ok, indexed, skipped = pcall(import_text, source, path, content)
  if not ok or indexed == nil then
    local why = ok and skipped or indexed
    local msg = string.format("catalog file %s: %s", path, tostring(why))
    record_error(source, path, msg)
    log("error", "%s%s", msg:sub(9), old and old.content and "; its last good content stays in use" or "")
    return "error"
  end
  local ms = mb.now_ms() - t0
  state.last_import = { source = source, tools = indexed, ms = ms }
  -- at start one summary line is enough; a live reload says what it did
  log(state.ready and "info" or "debug", "imported %s: %d entries%s in %.1f ms", path, indexed,
    skipped > 0 and string.format(" (%d skipped)", skipped) or "", ms)
  return "imported"
end

-- The *.json files of a directory (regular files), sorted; nil, err when it cannot be listed.
local function list_json_files(dir)
  local list, err = mb.fs.list(dir)
  if not list then return nil, err end
  local out = {}
  for _, e in ipairs(list) do
    if e.type == "file" and e.name:match(FILE_PATTERN) then out[#out + 1] = e.name end
  end
  table.sort(out)
  return out
end

-- Imports every file of the directory and drops the file sources whose file is gone.
local function scan_dir()
  local files, err = list_json_files(state.dir)
  local present = {}
  if files then
    for _, name in ipairs(files) do
      present["file:" .. name] = true
      local ok, e = pcall(import_file, name)
      if not ok then log("error", "importing %s/%s: %s", state.dir, name, tostring(e)) end
    end
  else
    log("info", "catalog_dir %s cannot be listed (%s): no catalog files", state.dir, tostring(err))
  end
  for _, r in ipairs(mb.db.query(SQL.sources)) do
    if r.source:sub(1, 5) == "file:" and not present[r.source] then
      remove_source(r.source)
      log("info", "%s/%s is gone: its entries were removed", state.dir, r.source:sub(6))
    end
  end
end

local function import_builtin()
  local shape = require("catalog.sandbox_api")
  local content = canonical(shape)
  local old = mb.db.row(SQL.source, BUILTIN)
  if old and old.content == content and old.status == "ok" then return end
  local cats, entries, err = text.normalize(shape, BUILTIN)
  if not cats then error("built-in sandbox API entries: " .. err) end
  store_entries(BUILTIN, "built in", content, cats, entries)
end

-- A debounced reload of one file (or of the whole directory when name is nil).
local function schedule(name)
  local key = name or "*"
  local t = state.pending[key]
  if t then t:stop() end
  state.pending[key] = mb.timer(DEBOUNCE_MS, function()
    state.pending[key] = nil
    local ok, err = pcall(function()
      mb.db.tx(function()
        if name then import_file(name) else scan_dir() end
        resolve()
      end)
    end)
    if not ok then log("error", "reloading %s: %s", name or state.dir, tostring(err)) end
  end)
end

local function on_change(name)
  if name == nil then return schedule(nil) end
  if type(name) == "string" and name:match(FILE_PATTERN) then schedule(name) end
end

-- catalog_dir is created when the host starts, not with the delayed import, so that the data
-- directory's layout does not change under a client that has already been answered.
local function make_dir()
  state.dir = state.dir or mb.config.catalog_dir or (mb.config.data_dir .. "/catalog")
  if not mb.fs.stat(state.dir) then -- (start() tries again if it failed at init)
    local ok, err = mb.fs.mkdir(state.dir)
    if ok then log("info", "created catalog_dir %s", state.dir)
    else log("warning", "cannot create catalog_dir: %s", tostring(err)) end
  end
end

local function start()
  if type(mb.db) ~= "table" then error("the store (mb.db) is not available") end
  local t0 = mb.now_ms()
  make_dir()
  -- one transaction (one fsync) for the whole start-up import; each source is a savepoint
  mb.db.tx(function()
    import_builtin()
    -- sources from catalog.import live for one run: their owners import them again
    for _, r in ipairs(mb.db.query(SQL.sources)) do
      if r.source ~= BUILTIN and r.source:sub(1, 5) ~= "file:" then remove_source(r.source) end
    end
    scan_dir()
    resolve()
  end)
  state.ready = true
  collectgarbage() -- the decoded files and index texts are garbage now: give the memory back
  state.start_ms = mb.now_ms() - t0
  if mb.watch then
    local ok, h, err = pcall(mb.watch, state.dir, on_change)
    if ok and h then
      state.watch = h
    else
      log("info", "not watching %s for changes: %s", state.dir, tostring(ok and err or h))
    end
  end
  local s = M.counts()
  log("info", "%d entries in %d categories from %d sources (%.1f ms)", s.tools, s.categories,
    s.sources, state.start_ms)
end

-- The start-up import runs START_DELAY_MS after the host starts (so that `initialize` is not
-- kept waiting for it), or at the first use of the catalog, whichever comes first.
-- The SQL and query syntax of the store's engine (mb.db.dialect), looked at on every use: a test
-- may hand the module another store.
local function use_dialect()
  PG = type(mb.db) == "table" and mb.db.dialect == "postgres"
  SQL = PG and SQL_PG or SQL_SQLITE
end

-- Runs fn(...) for its results. On PostgreSQL the catalog's writes run on the store's blocking
-- connection (called from a coroutine the host does not own, they do not yield): a write holds row
-- locks until it commits, and one that yielded with them could stall, for store_timeout_ms, a
-- blocking statement of the loop (a timer's reload, an upstream's import) that waits for them.
-- They are short and rare (start, a file saved, an upstream's tools changed), as on SQLite, whose
-- store is all blocking. Errors come out unchanged.
local function blocking(fn, ...)
  if not PG then return fn(...) end
  local co = coroutine.create(fn)
  local r = table.pack(coroutine.resume(co, ...))
  if not r[1] then error(r[2], 0) end
  if coroutine.status(co) ~= "dead" then error("catalog: a store call yielded on the blocking path", 0) end
  return table.unpack(r, 2, r.n)
end

local function ensure_started()
  use_dialect()
  if state.started then return end
  state.started = true
  if state.start_timer then
    state.start_timer:stop()
    state.start_timer = nil
  end
  if PG and mb.db.listen then
    local lok, lerr = pcall(mb.db.listen, NOTIFY_CHANNEL, function() changed() end)
    if not lok then log("warning", "not listening for other replicas' changes: %s", tostring(lerr)) end
  end
  local ok, err = pcall(blocking, start)
  if not ok then
    state.error = tostring(err)
    log("error", "%s", state.error)
  end
end

---------------------------------------------------------------------------------------------
-- public API for other host modules

-- Imports (or replaces) the entries of a source from a table of either shape. Returns true,
-- {tools = indexed, skipped = n} or nil, err. Unchanged content is not re-indexed.
function M.import(source, shape, origin)
  if type(source) ~= "string" or source == "" or #source > 256 then
    return nil, "catalog.import: source must be a non-empty string of at most 256 bytes"
  end
  if source == BUILTIN or source:sub(1, 5) == "file:" then
    return nil, string.format("catalog.import: source name %q is reserved", source)
  end
  ensure_started()
  if not state.ready then return nil, "catalog unavailable: " .. tostring(state.error) end
  local okc, content = pcall(canonical, shape)
  if not okc then return nil, "catalog.import: " .. tostring(content) end
  local old = mb.db.row(SQL.source, source)
  if old and old.content == content and old.status == "ok" then
    local r = mb.db.row("SELECT tools, skipped FROM catalog_sources WHERE source = ?", source)
    return true, { tools = r.tools, skipped = r.skipped, unchanged = true }
  end
  local cats, entries, err = text.normalize(shape, source)
  if not cats then
    local msg = string.format("catalog.import %s: %s", source, err)
    record_error(source, origin, msg)
    return nil, msg
  end
  local ok, indexed, skipped = pcall(blocking, with_resolve, store_entries, source, origin, content, cats,
    entries)
  if not ok then return nil, "catalog.import " .. source .. ": " .. tostring(indexed) end
  return true, { tools = indexed, skipped = skipped }
end

-- Removes a source imported with catalog.import; returns true when it existed.
function M.remove(source)
  if type(source) ~= "string" or source == BUILTIN or source:sub(1, 5) == "file:" then
    return nil, "catalog.remove: not a source imported with catalog.import"
  end
  ensure_started()
  if not state.ready then return nil, "catalog unavailable: " .. tostring(state.error) end
  return blocking(with_resolve, remove_source, source)
end

-- Names of the sources imported with catalog.import whose name starts with prefix.
function M.sources(prefix)
  ensure_started()
  if not state.ready then return {} end
  local out = {}
  for _, r in ipairs(mb.db.query("SELECT source FROM catalog_sources ORDER BY source")) do
    if r.source:sub(1, #prefix) == prefix then out[#out + 1] = r.source end
  end
  return out
end

-- Counts for get_execution_stats.
function M.counts()
  use_dialect()
  local db = mb.db
  local s = db.row(SQL.count_sources)
  return {
    tools = db.row(SQL.count_tools).n,
    categories = db.row(SQL.count_categories).n,
    sources = s.n,
    source_errors = s.errors or 0,
  }
end

---------------------------------------------------------------------------------------------
-- argument checks

local function arg_error(fmt, ...)
  return "invalid arguments: " .. string.format(fmt, ...)
end

local function typename(v)
  if v == null then return "null" end
  if type(v) == "table" then return getmetatable(v) == "json.array" and "array" or "object" end
  return type(v)
end

local function check_unknown(args, allowed, list)
  for k in pairs(args) do
    if not allowed[k] then
      return arg_error("unknown argument %q (expected %s)", tostring(k), list)
    end
  end
end

-- An optional string argument: value (nil when absent or null) or nil, message.
local function opt_string(args, key, max)
  local v = args[key]
  if v == nil or v == null then return nil end
  if type(v) ~= "string" then return nil, arg_error("%s must be a string, got %s", key, typename(v)) end
  if #v > max then
    return nil, arg_error("%s is %d bytes, longer than the maximum %d", key, #v, max)
  end
  return v
end

local function percentile(sorted, p)
  if #sorted == 0 then return 0 end
  return sorted[math.max(1, math.ceil(p * #sorted))]
end

local function record_search(ms)
  state.search_pos = state.search_pos % 1000 + 1
  state.search_ms[state.search_pos] = ms
end

local function unavailable(tools)
  return tools.tool_error("catalog unavailable: " .. tostring(state.error))
end

-- Up to n closest names for an unknown tool: edit distance over the names that start alike,
-- plus the best full-text matches of its words; "name (category)" strings.
local function suggestions(name, n)
  local lname = name:lower()
  -- spellings further away than max are not suggested (at most 8 edits, as tools/call's); the
  -- band of cells computed for all candidates has a budget, as upstream.lua's suggestions have:
  -- 2,000 long look-alike names (an upstream names its tools) must not hold the loop
  local max = math.max(2, math.min(#lname // 3, 8))
  local budget, cost = SUGGEST_CELLS, #lname * (2 * max + 1)
  local cands, seen = {}, {}
  local function add(r, fts_rank)
    local key = r.category .. "\0" .. r.name
    local c = seen[key]
    if not c then
      local d = max + 1
      if budget >= cost then
        budget = budget - cost
        d = text.levenshtein(lname, r.name:lower(), max)
      end
      c = { name = r.name, category = r.category, d = d, fts = math.huge }
      seen[key] = c
      cands[#cands + 1] = c
    end
    if fts_rank then c.fts = math.min(c.fts, fts_rank) end
  end
  -- names that start like this one (first two characters, either case of the first)
  local head = name:sub(1, #name >= 4 and 2 or 1)
  local variants = { head:sub(1, 1):lower() .. head:sub(2), head:sub(1, 1):upper() .. head:sub(2) }
  for i, f in ipairs(variants) do
    if f ~= "" and (i == 1 or f ~= variants[1]) and f:byte(-1) < 255 then
      local nxt = f:sub(1, -2) .. string.char(f:byte(-1) + 1)
      for _, r in ipairs(mb.db.query(SQL.names_from, f, nxt)) do add(r) end
    end
  end
  local _, q = text.build_query(name, nil, PG and { syntax = text.TSQUERY } or nil)
  if q then
    local rows = PG and pg_search("name", q, nil, 10) or mb.db.query(SQL.fts_names, q)
    for i, r in ipairs(rows) do add(r, i) end
  end
  -- close spellings first (nearest first), then the full-text matches in their order
  local out = {}
  for _, c in ipairs(cands) do
    if c.fts < math.huge or c.d <= max then out[#out + 1] = c end
  end
  table.sort(out, function(a, b)
    if a.d ~= b.d then return a.d < b.d end
    if a.fts ~= b.fts then return a.fts < b.fts end
    if a.name ~= b.name then return a.name < b.name end
    return a.category < b.category
  end)
  local res = {}
  for i = 1, math.min(n, #out) do res[i] = out[i].name .. " (" .. out[i].category .. ")" end
  return res
end

local function category_suggestions(cat)
  local out = {}
  for _, r in ipairs(mb.db.query(SQL.category_names)) do
    out[#out + 1] = { name = r.category, d = text.levenshtein(cat:lower(), r.category:lower(), 64) }
  end
  table.sort(out, function(a, b)
    if a.d ~= b.d then return a.d < b.d end
    return a.name < b.name
  end)
  local res = {}
  for i = 1, math.min(8, #out) do res[i] = out[i].name end
  return res
end

local function check_category(tools, cat)
  if mb.db.row(SQL.category_exists, cat) then return nil end
  local s = category_suggestions(cat)
  return tools.tool_error(string.format("unknown category %q. %s (list_tool_categories shows them all)",
    cat, #s > 0 and "Closest categories: " .. table.concat(s, ", ") .. "." or "The catalog is empty."))
end

---------------------------------------------------------------------------------------------
-- the MCP tools

local LEVELS = { name = true, summary = true, full = true }
local SEARCH_ARGS = { query = true, category = true, detail_level = true, limit = true }

local function unknown_json(list)
  local out = {}
  for i, w in ipairs(list) do out[i] = jstr(w) end
  return out
end

-- "absent" when no entry has a vocabulary alternative (an FTS5 term): it would cost time and find
-- nothing; "common" when it is in so many entries that it says little about which one is meant
-- and costs more than it helps (bm25 reads every entry that has a term, and weighs it little).
-- The counts are kept until the catalog changes; the vocabulary bounds how many there are.
local function classify_term(term)
  local n = state.df[term]
  if n == nil then
    n = mb.db.row(SQL.term_count, term).n
    state.df[term] = n
  end
  if n == 0 then return "absent" end
  if n <= COMMON_MIN then return nil end
  if not state.entries then state.entries = mb.db.row(SQL.count_tools).n end
  return n > state.entries * COMMON_SHARE and "common" or nil
end

local function term_found(term)
  return mb.db.row(SQL.has_match, term) ~= nil
end

local QUERY_OPTS = { classify = classify_term, found = term_found }
local QUERY_OPTS_PG = { classify = classify_term, found = term_found, syntax = text.TSQUERY }

-- Within the best bm25 matches: an entry whose name is the query first; then entries whose name
-- is made of the query's words (catalog_text.name_covered); then those whose name is made of the
-- query's words and their alternatives from the vocabulary; otherwise bm25 order, then name and
-- category.
local function rerank(rows, q, words, alt_words, match)
  local names = match == "all"
  local lq = q:match("^%s*(.-)%s*$"):lower()
  local flat = text.flat_words(words)
  local alts = #alt_words > 0 and text.flat_words(alt_words) or nil
  for _, r in ipairs(rows) do
    local t = text.is_exact_name_of(lq, r.name, r.category) and 0
      or text.name_tier(r.name, flat, names and alts or nil) or 3
    r.tier = t
  end
  table.sort(rows, function(a, b)
    if a.tier ~= b.tier then return a.tier < b.tier end
    if a.score ~= b.score then return a.score < b.score end
    if a.name ~= b.name then return a.name < b.name end
    return a.category < b.category
  end)
end

-- bm25's inverse document frequency of a term (FTS5's: never below 1e-6).
local function idf(term)
  local n = state.df[term]
  if n == nil then
    n = mb.db.row(SQL.term_count, term).n
    state.df[term] = n
  end
  if not state.entries then state.entries = mb.db.row(SQL.count_tools).n end
  local x = math.log((state.entries - n + 0.5) / (n + 0.5))
  return x > 0 and x or 1e-6
end

-- The best `limit` entries that match a tsquery text (PostgreSQL), scored as pg_search_sql says.
pg_search = function(level, expr, cat, limit)
  local terms, order = {}, {}
  for _, o in ipairs(text.ts_operands(expr)) do
    local t = "'" .. o[1] .. "'" .. (o[2] and ":*" or "")
    if not terms[t] then terms[t] = 0; order[#order + 1] = t end
    terms[t] = terms[t] + 1
  end
  local params = {}
  for _, t in ipairs(order) do
    params[#params + 1] = t
    params[#params + 1] = terms[t] * idf(t)
  end
  params[#params + 1] = expr
  if cat then params[#params + 1] = cat end
  params[#params + 1] = limit
  return mb.db.query(pg_search_sql(level, cat, #order), table.unpack(params))
end

local function search(tools, args)
  local err = check_unknown(args, SEARCH_ARGS, "query, category, detail_level, limit")
  if err then return tools.tool_error(err) end
  local q = args.query
  if q == nil or q == null then
    return tools.tool_error('invalid arguments: query is required (a string; "" lists every entry)')
  end
  q, err = opt_string(args, "query", MAX_QUERY_BYTES)
  if err then return tools.tool_error(err) end
  local cat
  cat, err = opt_string(args, "category", text.MAX_NAME_BYTES)
  if err then return tools.tool_error(err) end
  local level
  level, err = opt_string(args, "detail_level", 16)
  if err then return tools.tool_error(err) end
  level = level or "summary"
  if not LEVELS[level] then
    return tools.tool_error(string.format('invalid arguments: detail_level must be "name", '
      .. '"summary" or "full", got %q', level))
  end
  local limit = args.limit
  if limit == nil or limit == null then
    limit = DEFAULT_LIMIT
  elseif type(limit) ~= "number" or limit ~= limit or limit ~= math.floor(limit) then
    return tools.tool_error(arg_error("limit must be an integer from 1 to %d, got %s", MAX_LIMIT,
      type(limit) == "number" and tostring(limit) or typename(limit)))
  elseif limit < 1 or limit > MAX_LIMIT then
    return tools.tool_error(arg_error("limit must be from 1 to %d, got %s", MAX_LIMIT,
      math.tointeger(limit) and string.format("%d", math.tointeger(limit)) or string.format("%.17g", limit)))
  end
  limit = math.tointeger(limit)
  ensure_started()
  if not state.ready then return unavailable(tools) end
  if cat then
    local r = check_category(tools, cat)
    if r then return r end
  end

  local all_words, any_word, words, groups, alt_words
  if q:find("%S") then
    all_words, any_word, words, groups, alt_words = text.build_query(q, VOCABULARY,
      PG and QUERY_OPTS_PG or QUERY_OPTS)
    if not all_words then
      return tools.tool_error(string.format("query %q has no words to search for (letters or "
        .. "digits); use \"\" to list every entry", q))
    end
  end
  local sql = SEARCH[level]
  local syn = PG and text.TSQUERY or text.FTS5
  local rows, match, unknown
  local window = limit + RERANK_WINDOW
  local function run(expr)
    if PG then return pg_search(level, expr, cat, window) end
    if cat then return mb.db.query(sql.fts_cat, expr, cat, window) end
    -- Scoring alone first, then only the best rows are read (bm25 is most of the cost and reading
    -- every match's row would double it). When the last two of window + 1 scores are equal, which
    -- of them is in the window would depend on rowids: the full query then decides by name.
    local r = mb.db.query(sql.top, expr, window + 1)
    if #r <= window then return r end
    local worst, n = r[#r].score, 0
    for i = 1, #r do if r[i].score == worst then n = n + 1 end end
    if n > 1 then return mb.db.query(sql.fts, expr, window) end
    r[#r] = nil
    return r
  end
  if all_words then
    -- the entries that have every word; else every word some entry has; else any word
    rows, match = run(all_words), "all"
    local kept, missing = {}, {}
    if #rows == 0 and #groups > 1 then
      for _, g in ipairs(groups) do
        if mb.db.row(SQL.has_match, g.expr) then kept[#kept + 1] = g.expr
        else missing[#missing + 1] = g.word end
      end
      if #missing > 0 and #kept > 0 then rows = run(table.concat(kept, syn.AND)) end
    end
    if #rows == 0 and #kept >= 3 and #kept <= 6 then
      -- entries that have all the words but one (cheap: each part is an intersection)
      local alts = {}
      for i = 1, #kept do
        local part = {}
        for j = 1, #kept do if j ~= i then part[#part + 1] = kept[j] end end
        alts[i] = "(" .. table.concat(part, syn.AND) .. ")"
      end
      rows, match = run(table.concat(alts, syn.OR)), "most"
    end
    if #rows > 0 and #missing > 0 then unknown = missing end
    if #rows == 0 and any_word ~= all_words then rows, match = run(any_word), "any" end
    rerank(rows, q, words, alt_words, match)
  elseif cat then
    rows = mb.db.query(sql.all_cat, cat, limit + 1)
  else
    rows = mb.db.query(sql.all, limit + 1)
  end
  local items = {}
  for i = 1, math.min(limit, #rows) do
    local r = rows[i]
    if level == "full" then
      items[i] = r.definition
    elseif level == "summary" then
      items[i] = '{"name":' .. jstr(r.name) .. ',"category":' .. jstr(r.category)
        .. ',"description":' .. jstr(r.summary) .. "}"
    else
      items[i] = '{"name":' .. jstr(r.name) .. ',"category":' .. jstr(r.category) .. "}"
    end
  end
  local more = #rows > limit
  local hint
  if #items == 0 then
    hint = cat and "nothing matched in this category; try other words or no category"
      or "nothing matched; try fewer or other words, or list_tool_categories"
  elseif more then
    hint = "more entries match: raise limit, add words, or pass a category"
  elseif match == "all" and #items < limit and any_word ~= all_words then
    hint = "these entries have every word of the query; fewer words find more"
  end
  return json_result({
    '{"query":', jstr(q),
    cat and ',"category":' .. jstr(cat) or "",
    ',"detail_level":"', level, '"',
    match and ',"match":"' .. match .. '"' or "",
    unknown and ',"unknown_words":[' .. table.concat(unknown_json(unknown), ",") .. "]" or "",
    ',"count":', string.format("%d", #items),
    ',"more":', more and "true" or "false",
    ',"tools":[', table.concat(items, ","), "]",
    hint and ',"hint":' .. jstr(hint) or "",
    "}",
  })
end

local GET_ARGS = { tool_name = true, name = true, category = true, format = true }
local FORMATS = { json = true, lua = true, both = true }
local FIELD_SET = {}
for _, k in ipairs(FIELDS) do FIELD_SET[k] = true end

-- The definition as answered for format: "json" as stored; "both" with lua_types (the tool's
-- LuaLS stub, mcp/tool_stubs.lua) and, for an upstream tool without outputSchema whose results
-- were seen, inferredOutputSchema; "lua" the same without inputSchema and outputSchema.
local function with_lua_types(def, format, tenant)
  if format == "json" then return def end
  local d = mb.json_decode(def)
  if type(d) ~= "table" or (d.kind ~= "tool" and d.kind ~= "function") then return def end
  local stubs = require("mcp.tool_stubs")
  local stub, inferred
  if d.kind == "function" then -- the sandbox API (mcp/sandbox_types.lua)
    stub = stubs.for_function(d)
    if not stub then return def end
  else
    stub, inferred = stubs.for_entry(d, tenant)
  end
  if format == "lua" then d.inputSchema, d.outputSchema = nil, nil end
  local extra = {}
  for k, v in pairs(d) do if not FIELD_SET[k] then extra[k] = v end end
  extra.lua_types, extra.inferredOutputSchema = stub, inferred
  d.extra = extra
  return definition_json(d)
end

local function get_definition(tools, args, request)
  local err = check_unknown(args, GET_ARGS, "tool_name (or name), category, format")
  if err then return tools.tool_error(err) end
  -- name: what search_tools' results call it, so a model passes it on as it read it
  if args.name ~= nil and args.name ~= null then
    if args.tool_name ~= nil and args.tool_name ~= null then
      return tools.tool_error("invalid arguments: give tool_name or name, not both")
    end
    args.tool_name, args.name = args.name, nil
  end
  local name = args.tool_name
  if name == nil or name == null then
    return tools.tool_error("invalid arguments: tool_name is required (a name from search_tools; "
      .. "name works too)")
  end
  name, err = opt_string(args, "tool_name", text.MAX_NAME_BYTES)
  if err then return tools.tool_error(err) end
  if name == "" then return tools.tool_error("invalid arguments: tool_name must not be empty") end
  local cat
  cat, err = opt_string(args, "category", text.MAX_NAME_BYTES)
  if err then return tools.tool_error(err) end
  local format
  format, err = opt_string(args, "format", 16)
  if err then return tools.tool_error(err) end
  format = format or "json"
  if not FORMATS[format] then
    return tools.tool_error(string.format('invalid arguments: format must be "json", "lua" or '
      .. '"both", got %q', format))
  end
  ensure_started()
  if not state.ready then return unavailable(tools) end

  local rows
  if cat then
    rows = mb.db.query(SQL.by_name_cat, name, cat)
    if #rows == 0 then
      local elsewhere = mb.db.query(SQL.by_name, name)
      if #elsewhere > 0 then
        local cats = {}
        for i, r in ipairs(elsewhere) do cats[i] = r.category end
        return tools.tool_error(string.format("no tool %q in category %q; it exists in: %s",
          name, cat, table.concat(cats, ", ")))
      end
    end
  else
    rows = mb.db.query(SQL.by_name, name)
    if #rows == 0 then
      -- "category.tool" or "category/tool", as in servers.<server>.<tool>
      for _, sep in ipairs({ "/", "." }) do
        local i = name:find(sep, 1, true)
        while i and #rows == 0 do
          rows = mb.db.query(SQL.by_name_cat, name:sub(i + 1), name:sub(1, i - 1))
          i = name:find(sep, i + 1, true)
        end
        if #rows > 0 then break end
      end
    end
  end
  if #rows > 1 then
    local cats = {}
    for i, r in ipairs(rows) do cats[i] = r.category end
    return tools.tool_error(string.format("tool %q exists in %d categories: %s. Pass category to "
      .. "choose one.", name, #rows, table.concat(cats, ", ")))
  end
  if #rows == 0 then
    local s = suggestions(name, 5)
    return tools.tool_error(string.format("unknown tool %q%s. %s", name,
      cat and string.format(" in category %q", cat) or "",
      #s > 0 and "Closest matches: " .. table.concat(s, ", ") .. "."
        or "Nothing similar; use search_tools to find tools."))
  end
  return json_result({ with_lua_types(rows[1].definition, format, request and request.tenant or "default") })
end

local function list_categories(tools, args)
  if next(args) ~= nil then
    return tools.tool_error("invalid arguments: list_tool_categories takes no arguments")
  end
  ensure_started()
  if not state.ready then return unavailable(tools) end
  local counts, total = {}, 0
  for _, r in ipairs(mb.db.query(SQL.categories)) do
    counts[r.category] = r.n
    total = total + r.n
  end
  -- the description of the source that takes precedence (and has one)
  local descs = {}
  for _, r in ipairs(mb.db.query(SQL.category_descs)) do
    if counts[r.category] == nil then counts[r.category] = 0 end
    if r.description and r.description ~= "" then
      local cur = descs[r.category]
      if not cur or outranks(r.source, cur.source) then descs[r.category] = r end
    end
  end
  local names = {}
  for c in pairs(counts) do names[#names + 1] = c end
  table.sort(names)
  local out = {}
  for i, c in ipairs(names) do
    out[i] = '{"name":' .. jstr(c) .. ',"description":'
      .. jstr(descs[c] and descs[c].description or "") .. ',"tools":' .. string.format("%d", counts[c]) .. "}"
  end
  local problems = {}
  for _, r in ipairs(mb.db.query(SQL.sources)) do
    if r.status == "error" then
      problems[#problems + 1] = '{"source":' .. jstr(r.source) .. ',"error":' .. jstr(r.error or "") .. "}"
    end
  end
  return json_result({
    '{"categories":[', table.concat(out, ","), '],"total_tools":', string.format("%d", total),
    #problems > 0 and ',"problems":[' .. table.concat(problems, ",") .. "]" or "", "}",
  })
end

---------------------------------------------------------------------------------------------
-- registration

local TOOL_ITEM = {
  type = "object",
  properties = {
    name = { type = "string" },
    category = { type = "string" },
    description = { type = "string", description = "one line (summary level)" },
  },
  required = mb.array({ "name", "category" }),
}

local DEFINITION = {
  type = "object",
  properties = {
    name = { type = "string" },
    title = { type = "string" },
    category = { type = "string" },
    kind = { type = "string", enum = mb.array({ "tool", "function" }),
             description = "tool: an MCP tool of an upstream server; function: a Lua function "
               .. "available inside execute_code" },
    server = { type = "string" },
    source = { type = "string" },
    description = { type = "string" },
    signature = { type = "string" },
    inputSchema = { type = "object" },
    outputSchema = { type = "object" },
    example = { type = "string", description = "Lua code for execute_code" },
    lua_types = { type = "string", description = "format lua or both: the tool's LuaLS stub "
      .. "(---@class, ---@param, ---@return) for servers.<server>.<tool>(args)" },
    inferredOutputSchema = { type = "object", description = "a tool without outputSchema: the "
      .. "shape of its results seen so far (types and field names only), not declared by the server" },
  },
  required = mb.array({ "name", "category", "kind", "description", "example" }),
}

-- Registers the catalog tools and the stats section, and schedules the start-up import (then
-- catalog_dir is watched). A store failure leaves the tools registered; they answer with the
-- reason.
function M.init(tools)
  tools.register({
    name = "search_tools",
    title = "Search the tool catalog",
    description = "Find tools of the connected MCP servers and the Lua functions available inside "
      .. "execute_code, by words or names (prefix matching; snake_case, camelCase and dotted names "
      .. "are split into words; common synonyms count too: \"substitute\" finds replace, \"PR\" "
      .. "pull request). Ranked best first, an exact name first. detail_level: \"name\" (name and category), "
      .. "\"summary\" (plus a one-line description, default) or \"full\" (whole definitions with "
      .. "schemas and a Lua call example). Start with summary, then get_tool_definition for the "
      .. "one you need. To list every tool (what list_mcp_tools gives elsewhere), pass an empty "
      .. "query with a category, or call mcp.tools(server) from execute_code.",
    inputSchema = {
      type = "object",
      properties = {
        query = { type = "string", maxLength = MAX_QUERY_BYTES,
                  description = "What you want to do, or a tool name; \"\" lists every entry" },
        category = { type = "string", description = "Only this category (see list_tool_categories)" },
        detail_level = { type = "string", enum = mb.array({ "name", "summary", "full" }),
                         default = "summary" },
        limit = { type = "integer", minimum = 1, maximum = MAX_LIMIT, default = DEFAULT_LIMIT },
      },
      required = mb.array({ "query" }),
      additionalProperties = false,
    },
    outputSchema = {
      type = "object",
      properties = {
        query = { type = "string" },
        category = { type = "string" },
        detail_level = { type = "string" },
        match = { type = "string", enum = mb.array({ "all", "most", "any" }),
                  description = "all: the entries have every word of the query (but unknown_words); "
                    .. "most: no entry had them all, these lack one; any: these have some" },
        unknown_words = { type = "array", items = { type = "string" },
                          description = "words of the query that no entry has; left out" },
        count = { type = "integer" },
        more = { type = "boolean", description = "more entries match than were returned" },
        tools = { type = "array", items = { type = "object" } },
        hint = { type = "string" },
      },
      required = mb.array({ "query", "detail_level", "count", "more", "tools" }),
    },
    annotations = { title = "Search the tool catalog", readOnlyHint = true, openWorldHint = false },
  }, function(args)
    local t0 = mb.now_ms()
    local ok, res = pcall(search, tools, args)
    record_search(mb.now_ms() - t0)
    if not ok then return tools.tool_error("search_tools failed: " .. tostring(res)) end
    return res
  end)

  tools.register({
    name = "get_tool_definition",
    title = "Get a tool definition",
    description = "The full definition of one catalog entry (a tool of an MCP server or a Lua "
      .. "function of the sandbox): description, input and output schemas, and a Lua example of "
      .. "calling it from execute_code. Pass category when the name exists in several. "
      .. "format \"lua\" gives the tool's types as Lua annotations instead of JSON schemas "
      .. "(with the result type inferred from earlier calls when the server declares none).",
    inputSchema = {
      type = "object",
      properties = {
        tool_name = { type = "string", description = "A name from search_tools (required, or "
                      .. "give it as name)" },
        name = { type = "string", description = "Another name for tool_name (search_tools "
                 .. "results call it name)" },
        category = { type = "string", description = "The entry's category" },
        format = { type = "string", enum = mb.array({ "json", "lua", "both" }), default = "json",
                   description = "json: the JSON schemas; lua: a LuaLS stub (lua_types) instead "
                     .. "of them; both: the schemas and the stub" },
      },
      additionalProperties = false,
    },
    outputSchema = DEFINITION,
    annotations = { title = "Get a tool definition", readOnlyHint = true, openWorldHint = false },
  }, function(args, request)
    local ok, res = pcall(get_definition, tools, args, request)
    if not ok then return tools.tool_error("get_tool_definition failed: " .. tostring(res)) end
    return res
  end)

  tools.register({
    name = "list_tool_categories",
    title = "List tool categories",
    description = "The categories of the tool catalog (one per MCP server, and sandbox.* for the "
      .. "Lua functions inside execute_code) with descriptions and entry counts.",
    inputSchema = { type = "object", additionalProperties = false },
    outputSchema = {
      type = "object",
      properties = {
        categories = { type = "array", items = {
          type = "object",
          properties = { name = { type = "string" }, description = { type = "string" },
                         tools = { type = "integer" } },
          required = mb.array({ "name", "description", "tools" }),
        } },
        total_tools = { type = "integer" },
        problems = { type = "array", description = "catalog sources that failed to load" },
      },
      required = mb.array({ "categories", "total_tools" }),
    },
    annotations = { title = "List tool categories", readOnlyHint = true, openWorldHint = false },
  }, function(args)
    local ok, res = pcall(list_categories, tools, args)
    if not ok then return tools.tool_error("list_tool_categories failed: " .. tostring(res)) end
    return res
  end)

  tools.server_stats_providers.catalog = function()
    ensure_started()
    if not state.ready then return { available = false, error = tostring(state.error) } end
    local s = M.counts()
    local sorted = {}
    for i = 1, #state.search_ms do sorted[i] = state.search_ms[i] end
    table.sort(sorted)
    s.search_ms = { p50 = percentile(sorted, 0.5), p95 = percentile(sorted, 0.95),
                    count = #sorted }
    s.start_import_ms = state.start_ms
    s.last_import = state.last_import
    return s
  end

  pcall(make_dir)
  if mb.timer then
    state.start_timer = mb.timer(START_DELAY_MS, ensure_started)
  else
    ensure_started()
  end
  return M
end

return M
