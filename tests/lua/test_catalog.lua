-- tests/lua/test_catalog.lua - tests for the pure pieces of the tool catalog
-- (lua/mcp/catalog_text.lua) and for the embedded sandbox API entries (lua/catalog/sandbox_api.lua).
--
-- Standalone: `lua5.4 tests/lua/test_catalog.lua` from the repo root. catalog_text uses no `mb`,
-- so it runs here as it is; JSON arrays are tables with the metatable "json.array" and JSON null
-- a light userdata, as the host codec makes them. The FTS5 expressions built from queries are
-- also run against a real FTS5 table through the sqlite3 command-line shell (skipped when it is
-- missing) to prove that no input produces an FTS5 syntax error. The store-backed parts (import,
-- search, reload) are tested against the real binary in tests/integration/catalog.test.mjs.
-- Ends with "N passed, N failed"; exits 1 on any failure.

local ROOT = (arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$")) or ""
package.path = ROOT .. "lua/?.lua;" .. package.path
local text = require("mcp.catalog_text")

local H = dofile(ROOT .. "tests/lua/harness.lua")
local NULL, arr, show, check, check_match = H.NULL, H.arr, H.show, H.check, H.check_match

-- A small JSON encoder for scalars, standing in for mb.json_encode in canonical_json.
local function enc(v)
  if type(v) == "number" then
    return math.type(v) == "integer" and string.format("%d", v) or string.format("%.17g", v)
  end
  return '"' .. v:gsub('[%c"\\]', function(c)
    local e = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
    return e[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

---------------------------------------------------------------------------------------------
-- words

check("split snake", text.split_words("create_issue"), { "create", "issue" })
check("split camel", text.split_words("getUserProfile"), { "get", "user", "profile" })
check("split acronym", text.split_words("getHTTPResponse"), { "get", "http", "response" })
check("split dotted", text.split_words("json.read_file"), { "json", "read", "file" })
check("split kebab", text.split_words("send-email"), { "send", "email" })
check("split digits", text.split_words("oauth2Token base64"), { "oauth2", "token", "base64" })
check("split digits before lower case stay", text.split_words("v2api s3Bucket"), { "v2api", "s3", "bucket" })
check("split SCREAMING", text.split_words("MAX_PAGE_SIZE"), { "max", "page", "size" })
check("split utf8 kept", text.split_words("créer_tâche"), { "créer", "tâche" })
check("split empty", text.split_words(""), {})
check("extra words camel only", text.extra_words("slack_post_message postMessage plain words"),
  "post message")
check("extra words none", text.extra_words("just plain words, snake_case and json.encode."), "")
check("extra words acronyms once", text.extra_words("use getItems or getHTTPItems"),
  "get items http")
check("with words", text.with_words("Call listChannels first"), "Call listChannels first\nlist channels")
check("with words untouched", text.with_words("list_channels"), "list_channels")

---------------------------------------------------------------------------------------------
-- queries

do
  local all, any, words = text.build_query("create a github issue")
  check("query all", all, '"create"* AND "github"* AND "issue"*')
  check("query any", any, '"create"* OR "github"* OR "issue"*')
  check("query words", words, { "create", "github", "issue" })
end
do
  local all, any = text.build_query("createIssue")
  check("query camel all", all, '("createissue"* OR ("create"* AND "issue"*))')
  check("query camel any", any, '"createissue"* OR "create"* OR "issue"*')
  all = text.build_query("GitHub")
  check("query brand in camel case", all, '("github"* OR ("git"* AND "hub"*))')
end
do
  local all, any = text.build_query("get_file_contents github")
  check("query snake all", all, '("get_file_contents"* OR ("get"* AND "file"* AND "contents"*)) AND "github"*')
  check("query snake any", any, '"get_file_contents"* OR "get"* OR "file"* OR "contents"* OR "github"*')
  all = text.build_query("a_b")
  check("query one-letter parts", all, '"a_b"*')
  local groups
  all, _, _, groups = text.build_query("re.gsub regex")
  check("query dotted", all, '("re.gsub"* OR ("re"* AND "gsub"*)) AND "regex"*')
  check("query groups", groups, { { expr = '("re.gsub"* OR ("re"* AND "gsub"*))', word = "re.gsub" },
    { expr = '"regex"*', word = "regex" } })
end
do
  local all = text.build_query("how do I do the thing")
  check("query stop words dropped", all, '"thing"*')
  all = text.build_query("the of")
  check("query only stop words kept", all, '"the"* AND "of"*')
  all = text.build_query("  a  ")
  check("query single letter kept when alone", all, '"a"*')
  all = text.build_query("s3 x")
  check("query one-letter word dropped, digits kept", all, '"s3"*')
  all = text.build_query("issue issue ISSUE")
  check("query words once", all, '"issue"*')
end
check("query no words", text.build_query("?! ... --- ()"), nil)
check("query empty", text.build_query(""), nil)
do
  -- non-ASCII punctuation and symbols are not words either: the tokenizer finds nothing in them,
  -- so "→" was an AND term no entry has (reported in unknown_words) and "—" alone a search
  for _, q in ipairs({ "—", "→ … «»", "\u{1F600}", "· × ÷ ¿", "“ ” ‘ ’" }) do
    check("query no words: " .. q, text.build_query(q), nil)
  end
  local all, _, words = text.build_query("json encode → string")
  check("an arrow between words is no word", all, '"json"* AND "encode"* AND "string"*')
  check("... nor among the words", words, { "json", "encode", "string" })
  -- letters and numbers outside ASCII stay words, as do tokens with punctuation inside
  check("non-ASCII letters are words", text.build_query("café über ½ ²"), '"café"* AND "über"* AND "½"* AND "²"*')
  check("quoted word keeps its letters", text.build_query("«json»"), '"«json»"*')
end
do
  -- FTS5 syntax in the query is only ever inside quotes
  local all, any = text.build_query('foo" OR bar NEAR(x y) * ^col: "')
  check("query syntax neutralized all", all, '"foo"* AND "bar"* AND "near"* AND "col"*')
  check("query syntax neutralized any", any, '"foo"* OR "bar"* OR "near"* OR "col"*')
end
do
  local many = {}
  for i = 1, 100 do many[i] = "word" .. i end
  local all, any, words = text.build_query(table.concat(many, " "))
  check("query terms capped", #words, text.MAX_QUERY_TERMS)
  check("query any capped", select(2, any:gsub(" OR ", "")), text.MAX_QUERY_TERMS - 1)
  check("query all capped", select(2, all:gsub(" AND ", "")), text.MAX_QUERY_TERMS - 1)
end

---------------------------------------------------------------------------------------------
-- the search vocabulary: compiling it, looking words up, expanding queries

local VOCAB_DATA = {
  groups = { { "replace", "Substitute", "swap" }, { "pull request", "pr" }, { "delete", "remove" },
             { "copy", "duplicate" }, { "rename", "move" } },
  also = { close = { "update", "state" }, ["how many"] = { "count" } },
}
local V = text.compile_vocabulary(VOCAB_DATA)
check("vocab group both ways", { V.alts.replace, V.alts.substitute, V.alts.swap },
  { { "substitute", "swap" }, { "replace", "swap" }, { "replace", "substitute" } })
check("vocab also one way", { V.alts.close, V.alts.update }, { { "update", "state" }, nil })
check("vocab phrases", { V.phrases["pull request"], V.phrases["how many"], V.max_phrase },
  { true, true, 2 })
check("vocab lookup as is", text.alternatives(V, "pr"), { "pull request" })
check("vocab lookup endings", { text.alternatives(V, "removes"), text.alternatives(V, "copies"),
  text.alternatives(V, "renaming"), text.alternatives(V, "replaced"), text.alternatives(V, "prs") },
  { { "delete" }, { "duplicate" }, { "move" }, { "substitute", "swap" }, { "pull request" } })
check("vocab lookup unknown", { text.alternatives(V, "zebra"), text.alternatives(V, "s"),
  text.alternatives(nil, "replace") }, { nil, nil, nil })

do
  local all, any, words, groups, alts = text.build_query("regex substitute", V)
  -- the user's word twice (it weighs more in bm25), alternatives once and exact (no prefix)
  check("expand all", all, '"regex"* AND ("substitute"* OR "replace" OR "swap" OR "substitute"*)')
  check("expand any", any, '"regex"* OR "substitute"* OR "replace" OR "swap"')
  check("expand words", { words, alts }, { { "regex", "substitute" }, { "replace", "swap" } })
  check("expand group", groups[2], { expr = '("substitute"* OR "replace" OR "swap" OR "substitute"*)',
    word = "substitute", alts = { "replace", "swap" } })
  -- without a vocabulary: as before
  check("no vocab", text.build_query("regex substitute"), '"regex"* AND "substitute"*')
end
do
  -- words next to each other that make a phrase of the vocabulary are one query word
  local all, _, words = text.build_query("open a Pull Request", V)
  check("phrase merged", all, '"open"* AND ("pull request"* OR "pr" OR "pull request"*)')
  check("phrase word", words, { "open", "pull request" })
  all = text.build_query("how many tickets", V)
  check("phrase of stop words", all, '("how many"* OR "count" OR "how many"*) AND "tickets"*')
  all = text.build_query("pull the request", V)
  check("phrase only when adjacent", all, '"pull"* AND "request"*')
  -- a compound the vocabulary knows as a word is that word, not its camelCase parts
  all = text.build_query("PRs", V)
  check("compound known", all, '("prs"* OR "pull request" OR "prs"*)')
  all = text.build_query("get_pr", V)
  check("compound unknown split", all, '("get_pr"* OR ("get"* AND "pr"*))')
end
do
  -- opts: alternatives no entry has are left out; common ones only when the user's word is in none
  local asked = {}
  local opts = {
    classify = function(term)
      if term == '"swap"' then return "absent" end
      if term == '"replace"' then return "common" end
    end,
    found = function(term) asked[#asked + 1] = term; return term == '"substitute"*' end,
  }
  local all = text.build_query("substitute", V, opts)
  check("opts absent and common left out", { all, asked }, { '"substitute"*', { '"substitute"*' } })
  all = text.build_query("swap", V, opts)
  check("opts common kept when the word is in none", all,
    '("swap"* OR "replace" OR "substitute" OR "swap"*)')
end
do
  -- bounds: alternatives per word and per query
  local big = { groups = { {} } }
  for i = 1, 40 do big.groups[1][i] = "w" .. i end
  local B = text.compile_vocabulary(big)
  local _, _, _, groups = text.build_query("w1", B)
  check("alternatives per word capped", #groups[1].alts, text.MAX_ALTERNATIVES)
  local q = {}
  for i = 1, 30 do q[i] = "w" .. i end
  local all, any, _, _, alts = text.build_query(table.concat(q, " "), B)
  check("alternatives per query capped", #alts <= text.MAX_ALT_TERMS, true)
  local n = 0
  for _ in any:gmatch(" OR ") do n = n + 1 end
  check("any capped", n + 1 <= text.MAX_QUERY_TERMS + text.MAX_ALT_TERMS, true)
  n = 0
  for _ in all:gmatch('"') do n = n + 1 end
  check("all bounded", n // 2 <= text.MAX_QUERY_TERMS * text.USER_WORD_WEIGHT + text.MAX_ALT_TERMS, true)
end

-- names: exact, made of the user's words (1), with alternatives (2)
check("exact name", { text.is_exact_name(" Re.GSUB ", "re.gsub", "sandbox.regex"),
  text.is_exact_name("sandbox.regex/re.gsub", "re.gsub", "sandbox.regex"),
  text.is_exact_name("github.create_issue", "create_issue", "github"),
  text.is_exact_name("create issue", "create_issue", "github") }, { true, true, true, false })
check("flat words", text.flat_words({ "open", "pull request" }), { "open", "pull", "request" })
do
  local w, a = text.flat_words({ "open", "pr" }), text.flat_words({ "pull request", "create" })
  check("name tiers", { text.name_tier("get_pr", w, a), text.name_tier("create_pull_request", w, a),
    text.name_tier("create_pull_request", w), text.name_tier("list_issues", w, a),
    text.name_tier("open_the_pr", w, a) }, { nil, 2, nil, nil, 1 })
  check("name covered (user words only)", { text.name_covered("write_file", { "write", "file" }),
    text.name_covered("create_pull_request", { "create", "pull request" }) }, { true, true })
end

-- the real vocabulary: well formed, and its keys can be typed (a stop word is dropped from a query
-- before it is looked up, so it would never be found)
do
  local data = dofile(ROOT .. "lua/catalog/vocabulary.lua")
  local bad = {}
  local function word_ok(w, where)
    if type(w) ~= "string" or not w:match("^[%l%d][%l%d ]*$") or w:find("  ", 1, true)
      or w:sub(-1) == " " then
      bad[#bad + 1] = where .. ": " .. tostring(w)
    end
  end
  for gi, g in ipairs(data.groups) do
    local seen = {}
    if #g < 2 then bad[#bad + 1] = "group " .. gi .. " has one word" end
    for _, w in ipairs(g) do
      word_ok(w, "group " .. gi)
      if seen[w] then bad[#bad + 1] = "group " .. gi .. ": " .. w .. " twice" end
      seen[w] = true
      if not w:find(" ") and text.is_stop_word(w) then bad[#bad + 1] = "stop word " .. w end
    end
  end
  for k, list in pairs(data.also) do
    word_ok(k, "also key")
    if not k:find(" ") and text.is_stop_word(k) then bad[#bad + 1] = "stop word " .. k end
    for _, w in ipairs(list) do word_ok(w, "also." .. k) end
  end
  check("vocabulary well formed", bad, {})
  local VV = text.compile_vocabulary(data)
  local all = text.build_query("regular expression substitute", VV)
  check("vocabulary: regular expression is one word, substitute finds replace",
    { all:find('("regular expression"*', 1, true) ~= nil, all:find('"replace"', 1, true) ~= nil },
    { true, true })
end

---------------------------------------------------------------------------------------------
-- one-line summaries

check("one line first line", text.one_line("Create an issue.\nMore text"), "Create an issue.")
check("one line trims", text.one_line("  Spaces around   \n"), "Spaces around")
check("one line empty", text.one_line(""), "")
check("one line nil", text.one_line(nil), "")
do
  local long = "Search for issues and pull requests across all repositories that you can see. "
    .. "Supports the full GitHub search syntax with qualifiers such as repo, is, label, author "
    .. "and more."
  check("one line first sentence", text.one_line(long),
    "Search for issues and pull requests across all repositories that you can see.")
  local nosentence = string.rep("word ", 60)
  local cut = text.one_line(nosentence)
  check("one line cut at a word", { #cut <= text.SUMMARY_BYTES, cut:sub(-3), cut:sub(-4, -4) ~= " " },
    { true, "...", true })
  local utf = string.rep("é", 200)
  local u = text.one_line(utf)
  check("one line utf8 boundary", { #u <= text.SUMMARY_BYTES, utf8.len(u) ~= nil }, { true, true })
end

---------------------------------------------------------------------------------------------
-- clip and utf8_cut: what error messages echo of a client's string

check("clip non-strings pass", { text.clip(nil), text.clip(5), text.clip(false) }, { nil, 5, false })
check("clip short", text.clip("tools/lis"), "tools/lis")
check("clip exactly 96 bytes", text.clip(string.rep("x", 96)), string.rep("x", 96))
check("clip 97 bytes", text.clip(string.rep("x", 97)), string.rep("x", 96) .. "...(97 bytes)")
check("clip 16 MB keeps 96 bytes", #text.clip(string.rep("x", 16777216)), 96 + #"...(16777216 bytes)")
check("clip with a size", text.clip("abcdef", 3), "abc...(6 bytes)")
check("clip never cuts a character", text.clip(string.rep("a", 95) .. "é" .. "b"), string.rep("a", 95) .. "...(98 bytes)")
check("clip keeps a character that fits", text.clip(string.rep("a", 94) .. "é" .. "bc"), string.rep("a", 94) .. "é...(98 bytes)")
do
  local emoji = "\xf0\x9f\x98\x80" -- 4 bytes
  for cut = 1, 3 do
    local s = string.rep("a", 96 - cut) .. emoji .. "z"
    check("clip before a 4-byte character cut at byte " .. cut, text.clip(s), string.rep("a", 96 - cut) .. "..." .. "(" .. #s .. " bytes)")
  end
end
check("utf8_cut at 0", text.utf8_cut("abc", 0), "")
check("utf8_cut longer than the text", text.utf8_cut("abc", 10), "abc")
check("utf8_cut of continuation bytes only", text.utf8_cut(string.rep("\x80", 10), 5), "")
check("utf8_cut result is valid UTF-8", (function()
  local s = string.rep("日本語", 40)
  for n = 0, #s do if not utf8.len(text.utf8_cut(s, n)) then return n end end
  return true
end)(), true)

---------------------------------------------------------------------------------------------
-- normalize: MCP form

do
  local doc = {
    server = "github", description = "GitHub API",
    tools = arr({
      { name = "create_issue", title = "Create issue", description = "Create a new issue.",
        inputSchema = { type = "object", properties = { title = { type = "string" } },
                        required = arr({ "title" }) },
        annotations = { readOnlyHint = false }, _meta = { x = 1 } },
      { name = "get_me" },
    }),
  }
  local cats, entries, err = text.normalize(doc, "file:github.json")
  check("mcp form ok", err, nil)
  check("mcp form category", cats, { { name = "github", description = "GitHub API" } })
  check("mcp form entries", #entries, 2)
  local e = entries[1]
  check("mcp form entry", { e.name, e.category, e.server, e.kind, e.title, e.description, e.source },
    { "create_issue", "github", "github", "tool", "Create issue", "Create a new issue.", "file:github.json" })
  check("mcp form extra kept", e.extra, { _meta = { x = 1 } })
  check("mcp form no description", entries[2].description, "")
end

local function nerr(doc) return select(3, text.normalize(doc, "s")) end

check("mcp form title as description",
  select(1, text.normalize({ server = "s", title = "Svc", tools = arr({}) }, "s")),
  { { name = "s", description = "Svc" } })
check("not an object", nerr(arr({ 1 })),
  'expected a JSON object ({"categories": {...}} or {"server": "...", "tools": [...]}), got array')
check("string doc", nerr("x"),
  'expected a JSON object ({"categories": {...}} or {"server": "...", "tools": [...]}), got string')
check("neither shape", nerr({ foo = 1 }),
  'expected "categories" (category form) or "server" and "tools" (MCP form) at the top level')
check("both shapes", nerr({ categories = {}, server = "x", tools = arr({}) }),
  'a catalog file has either "categories" (category form) or "server" and "tools" (MCP form), not both')
check("server missing", nerr({ tools = arr({}) }), "server: server name must be a string, got nil")
check("server empty", nerr({ server = "", tools = arr({}) }), "server: server name must not be empty")
check("server control char", nerr({ server = "a\nb", tools = arr({}) }),
  "server: server name contains a control character")
check("server spaces", nerr({ server = " a", tools = arr({}) }),
  "server: server name has leading or trailing spaces")
check("server too long", nerr({ server = string.rep("x", 300), tools = arr({}) }),
  "server: server name is 300 bytes, longer than 256")
check("tools not array", nerr({ server = "s", tools = { a = 1 } }),
  "tools: expected an array of tool definitions, got object")
check("tool not object", nerr({ server = "s", tools = arr({ "x" }) }),
  "tools[0]: expected an object, got string")
check("tool name missing", nerr({ server = "s", tools = arr({ { description = "d" } }) }),
  "tools[0].name: tool name must be a string, got nil")
check("tool name number", nerr({ server = "s", tools = arr({ { name = 5 } }) }),
  "tools[0].name: tool name must be a string, got integer")
check("tool twice", nerr({ server = "s", tools = arr({ { name = "a" }, { name = "b" }, { name = "a" } }) }),
  'tools[2].name: tool "a" is listed twice (first at tools[0])')
check("description type", nerr({ server = "s", tools = arr({ { name = "a", description = 1.5 } }) }),
  "tools[0].description: expected a string, got number")
check("description null ok", select(2, text.normalize({ server = "s",
  tools = arr({ { name = "a", description = NULL } }) }, "s"))[1].description, "")
check("schema type", nerr({ server = "s", tools = arr({ { name = "a", inputSchema = "x" } }) }),
  "tools[0].inputSchema: expected an object, got string")
check("schema array", nerr({ server = "s", tools = arr({ { name = "a", inputSchema = arr({ 1 }) } }) }),
  "tools[0].inputSchema: expected an object, got array")
check("schema properties type", nerr({ server = "s",
  tools = arr({ { name = "a", inputSchema = { type = "object", properties = arr({ 1 }) } } }) }),
  "tools[0].inputSchema.properties: expected an object, got array")
check("output schema type", nerr({ server = "s", tools = arr({ { name = "a", outputSchema = true } }) }),
  "tools[0].outputSchema: expected an object, got boolean")
check("annotations type", nerr({ server = "s", tools = arr({ { name = "a", annotations = 3 } }) }),
  "tools[0].annotations: expected an object, got integer")
check("use_cases type", nerr({ server = "s", tools = arr({ { name = "a", use_cases = arr({ "x", 2 }) } }) }),
  "tools[0].use_cases[1]: expected a string, got integer")
check("kind bad", nerr({ server = "s", tools = arr({ { name = "a", kind = "widget" } }) }),
  'tools[0].kind: must be "tool" or "function", got "widget"')
check("odd key path", nerr({ categories = { ["my cat"] = { tools = { ["a b"] = { title = 1 } } } } }),
  'categories["my cat"].tools["a b"].title: expected a string, got integer')

---------------------------------------------------------------------------------------------
-- normalize: category form

do
  local doc = {
    categories = {
      crm = {
        description = "CRM", mcp_server = "salesforce",
        tools = {
          query = { description = "Run SOQL", use_cases = arr({ "find accounts" }),
                    parameters = { type = "object", properties = { soql = { type = "string" } } },
                    functions = arr({ "query", { name = "query_all", description = "all rows" } }),
                    owner = "sales-team" },
          lead = { description = "Leads", mcp_server = "hubspot", use_cases = "one use case" },
        },
      },
      docs = { description = "no tools" },
      lua = { kind = "function", tools = { helper = { signature = "helper(x)", description = "h" } } },
    },
  }
  local cats, entries, err = text.normalize(doc, "file:b.json")
  check("category form ok", err, nil)
  check("category form categories sorted", cats, {
    { name = "crm", description = "CRM" }, { name = "docs", description = "no tools" },
    { name = "lua" } })
  check("category form entries sorted", { entries[1].name, entries[2].name, entries[3].name },
    { "lead", "query", "helper" })
  check("tool server overrides category server", entries[1].server, "hubspot")
  check("category server default", entries[2].server, "salesforce")
  check("use_cases string", entries[1].use_cases, { "one use case" })
  check("parameters as input schema", entries[2].inputSchema,
    { type = "object", properties = { soql = { type = "string" } } })
  check("functions normalized", entries[2].functions,
    { { name = "query" }, { name = "query_all", description = "all rows" } })
  check("extra field kept", entries[2].extra, { owner = "sales-team" })
  check("function kind from category", { entries[3].kind, entries[3].server, entries[3].signature },
    { "function", nil, "helper(x)" })
end
do
  local _, entries = text.normalize({ categories = { c = { tools = {
    t = { functions = { run = "Run it", stop = { description = "Stop it", since = "2.0" } } } } } } }, "s")
  check("functions object form", entries[1].functions,
    { { name = "run", description = "Run it" }, { name = "stop", description = "Stop it", since = "2.0" } })
  check("server defaults to category", entries[1].server, "c")
end
check("categories not object", nerr({ categories = arr({ 1 }) }), "categories: expected an object, got array")
check("category not object", nerr({ categories = { c = 1 } }), "categories.c: expected an object, got integer")
check("category tools not object", nerr({ categories = { c = { tools = arr({ 1 }) } } }),
  "categories.c.tools: expected an object of tools, got array")
check("category tool not object", nerr({ categories = { c = { tools = { t = "x" } } } }),
  "categories.c.tools.t: expected an object, got string")
check("category kind bad", nerr({ categories = { c = { kind = "x", tools = {} } } }),
  'categories.c.kind: must be "tool" or "function", got "x"')
check("category mcp_server type", nerr({ categories = { c = { mcp_server = 1 } } }),
  "categories.c.mcp_server: expected a string, got integer")
check("function needs example or signature",
  nerr({ categories = { c = { tools = { f = { kind = "function", description = "d" } } } } }),
  'categories.c.tools.f: a "function" entry needs an example or a signature')
check("function parameters shape",
  nerr({ categories = { c = { tools = { f = { kind = "function", signature = "f()",
    parameters = arr({ { type = "string" } }) } } } } }),
  "categories.c.tools.f.parameters[0].name: parameter name must be a string, got nil")
check("functions bad item", nerr({ categories = { c = { tools = { t = { functions = arr({ 1 }) } } } } }),
  "categories.c.tools.t.functions[0]: expected a function name or object, got integer")
check("functions bad type", nerr({ categories = { c = { tools = { t = { functions = 1 } } } } }),
  "categories.c.tools.t.functions: expected an array or object, got integer")
check("category name empty", nerr({ categories = { [""] = {} } }),
  'categories[""]: category name must not be empty')

---------------------------------------------------------------------------------------------
-- index fields

do
  local _, entries = text.normalize({ server = "slack", tools = arr({ {
    name = "slack_post_message", title = "Post message", description = "Post a message to a channel_id.",
    inputSchema = { type = "object", properties = {
      channel_id = { type = "string", description = "The channel" },
      threadTs = { type = "string", title = "Thread" } } } } }) }, "s")
  local n, c, d, p, u = text.index_fields(entries[1])
  check("index name", n, "slack_post_message\nPost message")
  check("index category", c, "slack")
  check("index description", d, "Post a message to a channel_id.")
  local plines = {}
  for l in p:gmatch("[^\n]+") do plines[#plines + 1] = l end
  table.sort(plines)
  check("index params", plines, { "The channel", "Thread", "channel_id", "thread ts", "threadTs" })
  check("index use cases empty", u, "")
end

---------------------------------------------------------------------------------------------
-- Lua examples

do
  local e = { name = "create_issue", category = "github", server = "github", kind = "tool",
    inputSchema = { type = "object", properties = {
      owner = { type = "string", description = "Repository owner" },
      title = { type = "string" },
      state = { type = "string", enum = arr({ "open", "closed" }) },
      count = { type = "integer", minimum = 1 },
      ratio = { type = "number", default = 0.5 },
      draft = { type = "boolean" },
      labels = { type = "array", items = { type = "string" } },
      extra = { type = "object" },
      ["x-flag"] = { type = arr({ "string", "null" }) },
    }, required = arr({ "owner", "title", "count", "x-flag" }) } }
  check("example tool", text.lua_example(e), table.concat({
    "local result = servers.github.create_issue({",
    '  count = 1, -- integer, required',
    '  owner = "<owner>", -- string, required: Repository owner',
    '  title = "<title>", -- string, required',
    '  ["x-flag"] = "<x-flag>", -- string|null, required',
    '  -- draft = false, -- boolean, optional',
    '  -- extra = {}, -- object, optional',
    '  -- labels = {"<labels item>"}, -- array, optional',
    '  -- ratio = 0.5, -- number, optional',
    '  -- state = "open", -- string, optional',
    "})" }, "\n"))
  check("example no schema", text.lua_example({ name = "ping", category = "s", kind = "tool" }),
    "local result = servers.s.ping({})")
  check("example not identifiers", text.lua_example({ name = "get-thing", category = "my server",
    kind = "tool", server = "my-server" }), 'local result = mcp.call("my-server", "get-thing", {})')
  check("example keyword name", text.lua_example({ name = "end", category = "s", kind = "tool" }),
    'local result = mcp.call("s", "end", {})')
  check("example given", text.lua_example({ name = "x", category = "s", kind = "tool", example = "x()" }),
    "x()")
  check("example function signature", text.lua_example({ name = "f", category = "s", kind = "function",
    signature = "f(a)" }), "f(a)")
  local props, req = {}, {}
  for i = 1, 15 do props[string.format("p%02d", i)] = { type = "string", description = string.rep("d", 100) } end
  local ex = text.lua_example({ name = "t", category = "s", kind = "tool",
    inputSchema = { type = "object", properties = props, required = arr(req) } })
  local lines = {}
  for l in ex:gmatch("[^\n]+") do lines[#lines + 1] = l end
  check("example optional capped", { #lines, lines[14] }, { 15, "  -- (3 more optional arguments in inputSchema)" })
  check_match("example long description cut", lines[2], '^  %-%- p01 = "<p01>", %-%- string, optional: d+%.%.%.$')
  check("example comment length", #lines[2] <= 120, true)
end

---------------------------------------------------------------------------------------------
-- levenshtein and canonical JSON

check("lev equal", text.levenshtein("abc", "abc", 5), 0)
check("lev one", text.levenshtein("create_isue", "create_issue", 5), 1)
check("lev empty", text.levenshtein("", "abcd", 5), 4)
check("lev capped by length", text.levenshtein("a", "abcdefghij", 3), 4)
do -- the banded distance agrees with the plain O(n*m) algorithm (capped at max + 1)
  local function plain(a, b)
    local d = {}
    for i = 0, #a do d[i] = { [0] = i } end
    for j = 0, #b do d[0][j] = j end
    for i = 1, #a do
      for j = 1, #b do
        local c = a:byte(i) == b:byte(j) and 0 or 1
        d[i][j] = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + c)
      end
    end
    return d[#a][#b]
  end
  local seed, mismatches = 12345, {}
  local function rnd(n) seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n end
  local function word()
    local t = {}
    for i = 1, rnd(10) do t[i] = string.char(97 + rnd(4)) end
    return table.concat(t)
  end
  for _ = 1, 5000 do
    local a, b, max = word(), word(), rnd(6)
    local want = math.min(plain(a, b), max + 1)
    local got = text.levenshtein(a, b, max)
    if got ~= want and #mismatches < 3 then mismatches[#mismatches + 1] = { a, b, max, want, got } end
  end
  check("lev banded = plain on 5000 random pairs", mismatches, {})
  -- look-alike long names: the work is bounded by the band, not by the shared prefix
  local long = string.rep("a", 64)
  check("lev long look-alikes", text.levenshtein(long, long:sub(1, 62) .. "bc", 4), 2)
end
check("lev capped by rows", text.levenshtein("aaaaaaaa", "bbbbbbbb", 3), 4)
check("lev transposition", text.levenshtein("ab", "ba", 5), 2)

check("canonical sorted", text.canonical_json({ b = 1, a = { d = true, c = "x" } }, enc),
  '{"a":{"c":"x","d":true},"b":1}')
check("canonical arrays", text.canonical_json({ 1, 2.5, "q\"", NULL }, enc), '[1,2.5,"q\\"",null]')
check("canonical empty table is object", text.canonical_json({}, enc), "{}")
check("canonical marked empty array", text.canonical_json(arr({}), enc), "[]")
check("canonical escapes", text.canonical_json({ k = "a\nb", u = "é" }, function(v)
  return "<" .. tostring(v) .. ">" end), '{"k":<a\nb>,"u":<é>}')
check("canonical mixed keys", text.canonical_json({ [1] = "a", x = "b" }, enc), '[\"a\"]')
check("canonical number keys", text.canonical_json({ [2] = "a", [10] = "b" }, enc), '{"2":"a","10":"b"}')
check("canonical rejects functions", pcall(text.canonical_json, { f = print }, enc), false)
do
  local deep = {}
  local cur = deep
  for _ = 1, 300 do cur.x = {}; cur = cur.x end
  local ok, err = pcall(text.canonical_json, deep, enc)
  check_match("canonical depth", not ok and err, "nested more than 200 levels")
end

---------------------------------------------------------------------------------------------
-- the embedded sandbox API

do
  local api = require("catalog.sandbox_api")
  local cats, entries, err = text.normalize(api, "moonbox")
  check("sandbox api valid", err, nil)
  local names, problems = {}, {}
  for _, e in ipairs(entries) do
    names[e.name] = e.category
    if e.kind ~= "function" then problems[#problems + 1] = e.name .. ": kind" end
    if not e.example or e.example == "" then problems[#problems + 1] = e.name .. ": example" end
    if not e.signature then problems[#problems + 1] = e.name .. ": signature" end
    if e.description == "" then problems[#problems + 1] = e.name .. ": description" end
    if not e.use_cases then problems[#problems + 1] = e.name .. ": use_cases" end
    if not e.category:match("^sandbox%.") then problems[#problems + 1] = e.name .. ": category" end
    local ok, perr = load(e.example, "=example", "t")
    -- examples are fragments; they must at least not be binary or empty
    if not ok and perr:find("binary") then problems[#problems + 1] = e.name .. ": " .. perr end
  end
  check("sandbox api entries complete", problems, {})
  for _, cat in ipairs(cats) do
    if not cat.description or cat.description == "" then problems[#problems + 1] = cat.name end
  end
  check("sandbox api categories described", problems, {})
  local want = { "json.encode", "json.decode", "json.null", "json.array", "re.match", "re.find",
    "re.gmatch", "re.gsub", "re.split", "read_file", "write_file", "list_files", "delete_file",
    "file_exists", "json.read_file", "json.write_file", "require", "save_skill", "load_skill",
    "list_skills", "tokenize_pii", "detokenize_pii", "pii.scan", "mcp.log", "mcp.progress",
    "mcp.sample", "mcp.elicit", "mcp.roots", "mcp.ask", "mcp.client_capabilities", "mcp.task", "mcp.sleep", "mcp.call",
    "mcp.parallel", "mcp.tools", "run_workflow",
    "filter_by_field", "summarize_list", "aggregate_stats", "format_output", "group_by", "sort_by",
    "pluck", "count_by", "unique", "take" }
  local missing = {}
  for _, n in ipairs(want) do if not names[n] then missing[#missing + 1] = n end end
  check("sandbox api covers the sandbox", missing, {})
  check("sandbox api count", #entries, #want)
end

---------------------------------------------------------------------------------------------
-- FTS5: every expression build_query makes is valid FTS5 on a table configured as the schema's

do
  local sqlite = io.popen("command -v sqlite3 2>/dev/null"):read("l")
  if not sqlite then
    print("skip: sqlite3 shell not found; FTS5 expression check not run")
  else
    local inputs = { "create issue", 'a"b', "NEAR(a b)", "x OR y AND NOT z", "col:name", "^start",
      "a*b", "(((", ")))", "'single'", "emoji 😀 word", "日本語 テキスト", "é", "—", "a-b-c",
      "a.b.c", "x:y:z", "_leading trailing_", "12345", "s3", "json.encode", "getHTTPResponse",
      "\t tabs \n newlines", "+plus -minus", "{col1 col2}: x", "a\0b" }
    local seed = 7
    for _ = 1, 100 do
      local parts = {}
      for i = 1, 1 + seed % 8 do
        seed = (seed * 1103515245 + 12345) % 2147483648
        local c = seed % 96 + 32
        parts[i] = string.char(c)
        if seed % 5 == 0 then parts[i] = parts[i] .. "\226\128\148" end
      end
      inputs[#inputs + 1] = table.concat(parts)
    end
    local tmp = os.tmpname()
    local f = assert(io.open(tmp, "w"))
    f:write([[CREATE VIRTUAL TABLE t USING fts5(name, category, description, params, use_cases,
      tokenize = "porter unicode61", prefix = '2 3');
      INSERT INTO t VALUES ('create_issue create issue', 'github', 'Create an issue', '', '');
      ]])
    local n = 0
    local vocab = text.compile_vocabulary(dofile(ROOT .. "lua/catalog/vocabulary.lua"))
    for _, q in ipairs({ "open a pull request", "how many rows", "get rid of the PRs",
      "substitute swap \"replace\"", "look up knowledge graph", "regular expression" }) do
      inputs[#inputs + 1] = q
    end
    for _, q in ipairs(inputs) do
      local all, any = text.build_query(q)
      local vall, vany = text.build_query(q, vocab)
      for _, expr in ipairs({ all or false, any or false, vall or false, vany or false }) do
        if expr then
          n = n + 1
          f:write("SELECT count(*) FROM t WHERE t MATCH '", (expr:gsub("'", "''")), "';\n")
        end
      end
    end
    f:close()
    local p = io.popen(sqlite .. " :memory: < " .. tmp .. " 2>&1")
    local out = p:read("a")
    p:close()
    os.remove(tmp)
    local errors = {}
    for line in out:gmatch("[^\n]+") do
      if not line:match("^%d+$") then errors[#errors + 1] = line end
    end
    check("fts5 accepts every built expression (" .. n .. ")", errors, {})
    local count = 0
    for _ in out:gmatch("[^\n]+") do count = count + 1 end
    check("fts5 ran every expression", count, n)
  end
end

H.done()
