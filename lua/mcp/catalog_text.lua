-- mcp/catalog_text.lua - the pure pieces of the tool catalog (no store, no I/O, no `mb`).
--
-- catalog.lua keeps the index in SQLite and serves the MCP tools; everything here is plain
-- functions over strings and tables, so tests/lua/test_catalog.lua runs them with a bare lua5.4:
--  * identifier-aware words: split_words("getHTTPResponse") -> get http response. The FTS5
--    tokenizer splits snake_case, dotted and kebab names at their separators; extra_words() adds
--    the parts of camelCase identifiers to indexed text, whose whole form stays too
--    (getUserProfile is found as getuserprofile and as get, user, profile);
--  * build_query(): a user's words -> safe FTS5 expressions (quoted prefix terms "word"* joined
--    with AND, and with OR), never raw FTS5 syntax; name_covered() for re-ranking;
--  * normalize(): the two catalog file shapes (category form, MCP form) -> categories and
--    entries, with errors that name the JSON path of the first problem;
--  * index_fields(): the five FTS columns of an entry; one_line(): the summary line;
--  * lua_example(): a Lua call for an upstream tool, placeholders taken from its input schema;
--  * levenshtein(), canonical_json(): closest-name suggestions; deterministic JSON text for
--    stored definitions and change detection;
--  * utf8_cut(), clip(): strings cut at a character boundary (clip for echoes in errors).
-- JSON values come from the host codec: arrays carry the metatable "json.array", null is a light
-- userdata (json.null / mb.null). Plain Lua sequences count as arrays too.

local M = {}

local type, pairs, ipairs, next, tostring, getmetatable = type, pairs, ipairs, next, tostring,
  getmetatable
local sfmt, ssub, slower, sfind, sgsub = string.format, string.sub, string.lower, string.find,
  string.gsub
local concat, sort = table.concat, table.sort

M.MAX_NAME_BYTES = 256       -- tool and category names
M.MAX_QUERY_TERMS = 32       -- FTS terms built from one query
M.SUMMARY_BYTES = 160        -- one-line descriptions

---------------------------------------------------------------------------------------------
-- JSON value helpers

local function is_null(v) return type(v) == "userdata" end

local function is_array(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  if mt == "json.array" then return true end
  if mt ~= nil then return false end
  return v[1] ~= nil or next(v) == nil
end

local function is_object(v)
  if type(v) ~= "table" then return false end
  if getmetatable(v) == "json.array" then return false end
  return v[1] == nil
end
M.is_array, M.is_object, M.is_null = is_array, is_object, is_null

local function mixed_less(a, b)
  if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
  return type(a) < type(b)
end

local function sorted_keys(t)
  local keys, all_strings = {}, true
  for k in pairs(t) do
    keys[#keys + 1] = k
    if type(k) ~= "string" then all_strings = false end
  end
  if all_strings then sort(keys) else sort(keys, mixed_less) end
  return keys
end
M.sorted_keys = sorted_keys

local function typename(v)
  if is_null(v) then return "null" end
  if type(v) == "table" then return is_array(v) and next(v) ~= nil and "array" or "object" end
  if type(v) == "number" then return math.type(v) == "integer" and "integer" or "number" end
  return type(v)
end

-- A path segment for error messages: keys that are identifiers as .key, others as ["key"].
local function seg(path, key)
  if type(key) == "number" then return sfmt("%s[%d]", path, key - 1) end -- 0-based like JSON
  if sfind(key, "^[%a_][%w_]*$") then return path == "" and key or path .. "." .. key end
  return sfmt('%s[%q]', path, key)
end

---------------------------------------------------------------------------------------------
-- identifier-aware words

-- Splits an identifier or phrase into lower-case words: snake_case, camelCase (with acronyms),
-- dotted, kebab and path-like names all come apart. Bytes >= 0x80 (UTF-8) stay in words.
function M.split_words(s)
  local out = {}
  for chunk in s:gmatch("[%w\128-\255]+") do
    if sfind(chunk, "%u") then
      chunk = sgsub(chunk, "(%l)(%u)", "%1 %2")
      chunk = sgsub(chunk, "(%u)(%u%l)", "%1 %2")
      chunk = sgsub(chunk, "(%d)(%u)", "%1 %2")
      for w in chunk:gmatch("%S+") do out[#out + 1] = slower(w) end
    else
      out[#out + 1] = chunk
    end
  end
  return out
end

local function camel(s)
  return sfind(s, "%l%u") ~= nil or sfind(s, "%u%u%l") ~= nil or sfind(s, "%d%u") ~= nil
end

-- True when a query token has parts worth searching separately: separators inside it, or case
-- changes (camelCase, acronyms).
local function compound(tok)
  return sfind(tok, "[_%.%-/:]") ~= nil or camel(tok)
end

-- The words the FTS5 tokenizer cannot find by itself. It splits at every character that is not
-- a letter or digit, so snake_case, dotted and kebab names come apart there, but it keeps
-- camelCase whole. Returns the parts of every camelCase run in s (each word once, in first-seen
-- order) as one space-separated string; "" when there are none.
function M.extra_words(s)
  if s == nil or not camel(s) then return "" end
  local out, seen = {}, {}
  for run in s:gmatch("[%w\128-\255]+") do
    if camel(run) then
      for _, w in ipairs(M.split_words(run)) do
        if not seen[w] then seen[w] = true; out[#out + 1] = w end
      end
    end
  end
  return concat(out, " ")
end

-- Text plus the words of its camelCase identifiers, for indexing: getUserProfile is then found
-- whole (getuserprofile) and by get, user and profile.
local function with_words(s)
  local x = M.extra_words(s)
  if x == "" then return s end
  return s .. "\n" .. x
end
M.with_words = with_words

-- Words that carry no meaning in a search ("how do I send a message to the channel"). Dropped
-- from a query unless nothing else is left.
local STOP = {}
for w in ([[a an the to of for in on at by with from into onto and or is are was be been do does
  how what which who that this these those i me my we our you your it its can could should would
  please want need some any all using via as than then there here when where]]):gmatch("%S+") do
  STOP[w] = true
end

function M.is_stop_word(w) return STOP[w] == true end

-- Code points beyond ASCII that the index's tokenizer (unicode61: letters, numbers and private
-- use make words) never keeps: blocks of punctuation, symbols and spaces in which every code point
-- is one. Blocks with letters or numbers among their symbols (Letterlike Symbols, Enclosed
-- Alphanumerics, ...) are not listed: a token with one of those stays a word.
local NONWORD = {
  { 0x80, 0xA9 }, { 0xAB, 0xB1 }, { 0xB4, 0xB4 }, { 0xB6, 0xB8 }, { 0xBB, 0xBB }, { 0xBF, 0xBF },
  { 0xD7, 0xD7 }, { 0xF7, 0xF7 },
  { 0x2000, 0x206F }, { 0x20A0, 0x20CF }, { 0x2190, 0x245F }, { 0x2500, 0x2775 },
  { 0x2794, 0x27FF }, { 0x2900, 0x2BFF }, { 0x3000, 0x3004 }, { 0x3008, 0x3020 },
  { 0xFE00, 0xFE1F }, { 0xFE30, 0xFE4F }, { 0xFF01, 0xFF0F }, { 0xFF1A, 0xFF20 },
  { 0xFF3B, 0xFF40 }, { 0xFF5B, 0xFF65 }, { 0x1F000, 0x1F0FF }, { 0x1F300, 0x1FAFF },
}

-- True when a query token has something the tokenizer keeps: an ASCII letter or digit, or a
-- character beyond ASCII outside NONWORD (invalid UTF-8 counts as one). "→" or "—" alone is no
-- word: as a term it would match nothing (and be reported as an unknown word).
local function has_word(tok)
  if sfind(tok, "%w") or not utf8.len(tok) then return true end
  for _, c in utf8.codes(tok) do
    if c >= 0x80 then
      local sep = false
      for _, r in ipairs(NONWORD) do
        if c >= r[1] and c <= r[2] then sep = true break end
      end
      if not sep then return true end
    end
  end
  return false
end

local function quote(t) return '"' .. sgsub(t, '"', '""') .. '"*' end
-- An alternative from the vocabulary: the exact word (stemmed by the index), not a prefix, so
-- that "sum" does not find "summary" nor "pr" every word that starts with it.
local function exact(t) return '"' .. sgsub(t, '"', '""') .. '"' end

-- The syntax of the query expressions build_query writes: FTS5 MATCH (SQLite, the default) or
-- PostgreSQL tsquery text (for to_tsquery). prefix(word) is a prefix term, exact(word) a whole
-- word, AND and OR the operators; parentheses are the same in both.
M.FTS5 = { prefix = quote, exact = exact, AND = " AND ", OR = " OR " }

-- Text as the PostgreSQL index sees it: the runs of letters and digits (and bytes >= 0x80) of s,
-- one space between them. FTS5's unicode61 tokenizer splits at every other character; PostgreSQL's
-- parser would keep "file.read" as a host name, "a/b" as a path and "foo-bar" whole as well as in
-- parts, so the catalog hands it words alone, in the index (index_fields' texts) and in queries.
function M.ts_words(s)
  return (sgsub(sgsub(s, "[^%w\128-\255]+", " "), "^ *(.-) *$", "%1"))
end

-- A tsquery operand: the word's runs quoted ('get file contents' is a phrase in to_tsquery, as
-- "get_file_contents" is in FTS5). ts_words leaves none of tsquery's syntax (quotes, backslash,
-- & | ! ( ) : * < >) in it, so what the user typed is never read as tsquery operators; "" (a
-- word of symbols alone, which build_query does not make) becomes a word no entry has.
local function ts_operand(t)
  local w = M.ts_words(t)
  if w == "" then w = "moonbox0empty0word" end
  return "'" .. w .. "'"
end
M.TSQUERY = {
  prefix = function(t) return ts_operand(t) .. ":*" end,
  exact = ts_operand,
  AND = " & ", OR = " | ",
}

-- The operands of a tsquery text made with M.TSQUERY, in order, repeats included: {text, prefix}
-- ("get file", true for 'get file':*).
function M.ts_operands(expr)
  local out = {}
  for w, star in expr:gmatch("'([^']*)'(:?%*?)") do out[#out + 1] = { w, star == ":*" } end
  return out
end

---------------------------------------------------------------------------------------------
-- the search vocabulary (lua/catalog/vocabulary.lua): synonyms added to query words

M.MAX_ALTERNATIVES = 12      -- alternatives added for one query word
M.MAX_ALT_TERMS = 48         -- alternatives added for a whole query
-- bm25 counts a term once per time it is written in the expression: a user's word that has
-- alternatives is written this many times, the alternatives once, so that an entry with the word
-- the user typed ranks above one that has only an alternative (a synonym is a guess; the word is
-- not). Only there: each extra term costs time for every matching entry.
M.USER_WORD_WEIGHT = 2

-- Compiles the vocabulary data ({groups = {{word, ...}, ...}, also = {word = {word, ...}}})
-- into {alts = word -> {alternative, ...}, phrases = "w1 w2" -> true, max_phrase = n}. Every word
-- of a group gets the others, in the order of the file; "also" adds one-way meanings. Words are
-- lower case; a phrase is words separated by single spaces.
function M.compile_vocabulary(data)
  local alts, seen, phrases, max_phrase = {}, {}, {}, 1
  local function norm(w)
    return (sgsub(sgsub(slower(w), "[^%w\128-\255]+", " "), "^ *(.-) *$", "%1"))
  end
  local function add(w, a)
    if w == a then return end
    local l = alts[w]
    if not l then l = {}; alts[w] = l; seen[w] = {} end
    if not seen[w][a] then seen[w][a] = true; l[#l + 1] = a end
  end
  local function note(w)
    if sfind(w, " ") then
      phrases[w] = true
      local n = select(2, sgsub(w, " ", " ")) + 1
      if n > max_phrase then max_phrase = n end
    end
  end
  for _, g in ipairs(data.groups or {}) do
    local words = {}
    for i, w in ipairs(g) do words[i] = norm(w); note(words[i]) end
    for _, w in ipairs(words) do
      for _, a in ipairs(words) do add(w, a) end
    end
  end
  for _, k in ipairs(sorted_keys(data.also or {})) do
    local w = norm(k)
    note(w)
    for _, a in ipairs(data.also[k]) do add(w, norm(a)) end
  end
  return { alts = alts, phrases = phrases, max_phrase = max_phrase }
end

-- Endings tried when a word is not in the vocabulary as it is ("removes" -> remove, "copies" ->
-- copy, "renaming" -> rename): a light stemmer for lookups only (the index has its own).
local ENDINGS = { { "ies", "y" }, { "es", "" }, { "s", "" }, { "ing", "" }, { "ing", "e" },
                  { "ed", "" }, { "ed", "e" }, { "ly", "" } }

-- The alternatives of a query word (lower case), or nil.
function M.alternatives(vocab, w)
  if not vocab then return nil end
  local l = vocab.alts[w]
  if l then return l end
  if #w < 3 then return nil end
  for _, e in ipairs(ENDINGS) do
    local suf = e[1]
    -- "prs" -> pr, "dbs" -> db; longer endings only on longer words
    if #w > #suf + (suf == "s" and 1 or 2) and ssub(w, -#suf) == suf then
      l = vocab.alts[ssub(w, 1, -#suf - 1) .. e[2]]
      if l then return l end
    end
  end
  return nil
end

-- Turns a user's query into two FTS5 MATCH expressions built only from quoted terms, so nothing
-- the user types is passed through as FTS5 syntax:
--  * all_words: every word joined with AND; a compound identifier matches whole or by all of its
--    words: ("get_file_contents"* OR ("get"* AND "file"* AND "contents"*)); a word the
--    vocabulary knows matches it or any of its alternatives: ("substitute"* OR "replace" OR ...);
--  * any_word: every word, every compound identifier whole and by its words, and the
--    alternatives, joined with OR.
-- The user's words are prefix terms ("word"*); alternatives are exact words. With a vocabulary,
-- words next to each other that make one of its phrases ("pull request", "how many") are one
-- query word. Stop words ("how do I ... the ...") are dropped unless nothing else is left.
-- opts (optional) looks at the catalog: classify(term) is "absent" for an alternative no entry
-- has (left out: it would cost time and find nothing), "common" for one in so many entries that
-- it says little about which one is meant (and costs the most to score), else nil; found(term)
-- tells whether some entry has the user's word. A common alternative is added only when the
-- user's word is not found.
-- Returns all_words, any_word, words (the lower-case words and identifiers searched for), groups
-- ({expr, word, alts} per query word: the parts of all_words, so that a word no entry has can be
-- left out) and alt_words (every alternative added); or nil when the query has no words.
function M.build_query(q, vocab, opts)
  local syn = opts and opts.syntax or M.FTS5
  local quote, exact = syn.prefix, syn.exact
  local toks = {}
  for tok in q:gmatch("[%w_%.%-/:\128-\255]+") do
    tok = sgsub(sgsub(tok, "^[_%.%-/:]+", ""), "[_%.%-/:]+$", "")
    if tok ~= "" and has_word(tok) then toks[#toks + 1] = tok end
  end
  if vocab and vocab.max_phrase > 1 then
    -- the longest phrase of the vocabulary that starts at each word
    local merged, i = {}, 1
    while i <= #toks do
      local took = false
      for n = math.min(vocab.max_phrase, #toks - i + 1), 2, -1 do
        local p = slower(concat(toks, " ", i, i + n - 1))
        if vocab.phrases[p] then
          merged[#merged + 1] = p
          i = i + n
          took = true
          break
        end
      end
      if not took then merged[#merged + 1] = toks[i]; i = i + 1 end
    end
    toks = merged
  end
  local keep = {}
  for _, tok in ipairs(toks) do
    local l = slower(tok)
    if not STOP[l] and #l > 1 or (#l == 1 and sfind(l, "%d")) then keep[#keep + 1] = tok end
  end
  if #keep == 0 then keep = toks end
  local all, any, words, groups, alt_words = {}, {}, {}, {}, {}
  local seen_all, seen_any, seen_alt = {}, {}, {}
  local nalt = 0
  local function add_any(t, term)
    if not seen_any[t] and #any < M.MAX_QUERY_TERMS + M.MAX_ALT_TERMS then
      seen_any[t] = true
      any[#any + 1] = term or quote(t)
      return true
    end
  end
  for _, tok in ipairs(keep) do
    if #all >= M.MAX_QUERY_TERMS or #words >= M.MAX_QUERY_TERMS then break end
    local whole = slower(tok)
    if not seen_all[whole] then
      seen_all[whole] = true
      local parts = {}
      -- a compound the vocabulary knows as a word ("PRs") is searched as that word
      if not sfind(whole, " ") and compound(tok) and not M.alternatives(vocab, whole) then
        for _, w in ipairs(M.split_words(tok)) do
          if (#w > 1 or sfind(w, "%d")) and w ~= whole then parts[#parts + 1] = w end
        end
      end
      if add_any(whole) then words[#words + 1] = whole end
      local alts
      if #parts == 0 then
        local terms = { quote(whole) }
        local list = M.alternatives(vocab, whole)
        if list then
          alts = {}
          local found -- whether some entry has the user's word (asked once, when needed)
          for _, a in ipairs(list) do
            if #alts >= M.MAX_ALTERNATIVES or nalt >= M.MAX_ALT_TERMS then break end
            local take = a ~= whole
            local kind = take and opts and opts.classify and opts.classify(exact(a))
            if kind == "absent" then
              take = false
            elseif kind == "common" then
              if found == nil then found = opts.found and opts.found(quote(whole)) and true or false end
              take = not found
            end
            if take then
              alts[#alts + 1] = a
              nalt = nalt + 1
              terms[#terms + 1] = exact(a)
              if not seen_alt[a] then seen_alt[a] = true; alt_words[#alt_words + 1] = a end
              add_any(a, exact(a))
            end
          end
        end
        if #terms > 1 then
          -- the user's word weighs more than its alternatives (see USER_WORD_WEIGHT)
          for _ = 2, M.USER_WORD_WEIGHT do terms[#terms + 1] = terms[1] end
        end
        all[#all + 1] = #terms == 1 and terms[1] or "(" .. concat(terms, syn.OR) .. ")"
      else
        local p = {}
        for i, w in ipairs(parts) do
          p[i] = quote(w)
          if add_any(w) then words[#words + 1] = w end
        end
        all[#all + 1] = "(" .. quote(whole) .. syn.OR .. "(" .. concat(p, syn.AND) .. "))"
      end
      groups[#groups + 1] = { expr = all[#all], word = whole, alts = alts }
    end
  end
  if #any == 0 then return nil end
  return concat(all, syn.AND), concat(any, syn.OR), words, groups, alt_words
end

-- True when every word of a tool's name (stop words aside) is among the query's words, a query
-- word being a prefix of it or it a prefix (3 letters or more) of a query word: the name then
-- says exactly what was asked for ("write a file" -> write_file rather than json.write_file).
-- Search puts such entries first among its best bm25 matches (those made of the user's own
-- words before those that need the vocabulary's alternatives).
local function covers(q, w)
  return ssub(w, 1, #q) == q or (#w >= 3 and ssub(q, 1, #w) == w)
end

local function among(w, list)
  for i = 1, #list do
    if covers(list[i], w) then return true end
  end
  return false
end

-- The words of a list of query words, phrases ("pull request") split into their words: what
-- name_tier compares names with (made once per search).
function M.flat_words(list)
  local out = {}
  for _, q in ipairs(list or {}) do
    if sfind(q, " ", 1, true) then
      for part in q:gmatch("%S+") do out[#out + 1] = part end
    else
      out[#out + 1] = q
    end
  end
  return out
end

-- 1 when every word of a tool's name (stop words aside) is among words (see name_covered), 2 when
-- it takes alts (the vocabulary's alternatives) too, else nil. words and alts come from
-- flat_words.
function M.name_tier(name, words, alts)
  local tier
  for _, w in ipairs(M.split_words(name)) do
    if not STOP[w] then
      if among(w, words) then
        tier = tier or 1
      elseif alts and among(w, alts) then
        tier = 2
      else
        return nil
      end
    end
  end
  return tier
end

function M.name_covered(name, words)
  return M.name_tier(name, M.flat_words(words)) == 1
end

-- True when the query is the entry's name, or category.name or category/name (case and spaces
-- around aside): such an entry comes first whatever else matches.
function M.is_exact_name(q, name, category)
  q = slower((sgsub(q, "^%s*(.-)%s*$", "%1")))
  return M.is_exact_name_of(q, name, category)
end

-- The same, q being trimmed and in lower case already.
function M.is_exact_name_of(q, name, category)
  local n = slower(name)
  if q == n then return true end
  local c = slower(category)
  return q == c .. "." .. n or q == c .. "/" .. n
end

---------------------------------------------------------------------------------------------
-- one-line summaries

-- Cuts s to at most n bytes at a UTF-8 character boundary.
local function utf8_cut(s, n)
  if #s <= n then return s end
  local i = n
  while i > 0 do
    local b = s:byte(i + 1)
    if not b or b < 0x80 or b >= 0xC0 then break end
    i = i - 1
  end
  return ssub(s, 1, i)
end
M.utf8_cut = utf8_cut

-- A client's string as an error message may echo it: at most n bytes (default 96), cut at a
-- character boundary, with "..." and the full size when it was longer. Error messages quote
-- what was wrong without sending a 16 MB argument back.
function M.clip(s, n)
  n = n or 96
  if type(s) ~= "string" or #s <= n then return s end
  return string.format("%s...(%d bytes)", utf8_cut(s, n), #s)
end

-- The first line of a description, at most SUMMARY_BYTES: the first sentence when the line is
-- longer, else cut at a word with "...".
function M.one_line(desc)
  if type(desc) ~= "string" or desc == "" then return "" end
  local line = desc:match("^%s*([^\r\n]*)") or ""
  line = sgsub(line, "%s+$", "")
  local max = M.SUMMARY_BYTES
  if #line <= max then return line end
  local best
  local from = 1
  while true do
    local s, e = sfind(line, "[%.!?]%s", from)
    if not s or e > max then break end
    best = s
    from = e + 1
  end
  if best and best >= 40 then return ssub(line, 1, best) end
  local cut = utf8_cut(line, max - 3)
  local sp = cut:match("^.*()%s")
  if sp and sp > max / 2 then cut = ssub(cut, 1, sp - 1) end
  return cut .. "..."
end

---------------------------------------------------------------------------------------------
-- validation helpers: each returns nil, "path: message" on the first problem

local function check_name(v, path, what)
  if type(v) ~= "string" then
    return nil, sfmt("%s: %s must be a string, got %s", path, what, typename(v))
  end
  if v == "" then return nil, sfmt("%s: %s must not be empty", path, what) end
  if #v > M.MAX_NAME_BYTES then
    return nil, sfmt("%s: %s is %d bytes, longer than %d", path, what, #v, M.MAX_NAME_BYTES)
  end
  if sfind(v, "[%c]") then return nil, sfmt("%s: %s contains a control character", path, what) end
  if sfind(v, "^%s") or sfind(v, "%s$") then
    return nil, sfmt("%s: %s has leading or trailing spaces", path, what)
  end
  return v
end

local function opt_string(t, key, path)
  local v = t[key]
  if v == nil or is_null(v) then return nil end
  if type(v) ~= "string" then
    return nil, sfmt("%s: expected a string, got %s", seg(path, key), typename(v))
  end
  return v
end

local function opt_object(t, key, path)
  local v = t[key]
  if v == nil or is_null(v) then return nil end
  if not is_object(v) then
    return nil, sfmt("%s: expected an object, got %s", seg(path, key), typename(v))
  end
  return v
end

local function opt_string_list(t, key, path)
  local v = t[key]
  if v == nil or is_null(v) then return nil end
  if type(v) == "string" then return { v } end
  if not is_array(v) then
    return nil, sfmt("%s: expected an array of strings, got %s", seg(path, key), typename(v))
  end
  for i, s in ipairs(v) do
    if type(s) ~= "string" then
      return nil, sfmt("%s: expected a string, got %s", seg(seg(path, key), i), typename(s))
    end
  end
  return v
end

-- functions (category form): an array of names or of {name, description, ...}, or an object
-- name -> description | {description, ...}. Normalized to an array of {name, description?, ...}.
local function opt_functions(t, path)
  local v = t.functions
  if v == nil or is_null(v) then return nil end
  local p = seg(path, "functions")
  local out = {}
  if is_array(v) then
    for i, f in ipairs(v) do
      if type(f) == "string" then
        out[#out + 1] = { name = f }
      elseif is_object(f) then
        local ok, err = check_name(f.name, seg(seg(p, i), "name"), "function name")
        if not ok then return nil, err end
        local _, derr = opt_string(f, "description", seg(p, i))
        if derr then return nil, derr end
        out[#out + 1] = f
      else
        return nil, sfmt("%s: expected a function name or object, got %s", seg(p, i), typename(f))
      end
    end
  elseif is_object(v) then
    for _, k in ipairs(sorted_keys(v)) do
      local f = v[k]
      if type(f) == "string" then
        out[#out + 1] = { name = k, description = f }
      elseif is_object(f) then
        local _, derr = opt_string(f, "description", seg(p, k))
        if derr then return nil, derr end
        local copy = { name = k }
        for fk, fv in pairs(f) do if fk ~= "name" then copy[fk] = fv end end
        out[#out + 1] = copy
      else
        return nil, sfmt("%s: expected a description or object, got %s", seg(p, k), typename(f))
      end
    end
  else
    return nil, sfmt("%s: expected an array or object, got %s", p, typename(v))
  end
  return out
end

-- parameters of a Lua function entry: an array of {name, type?, description?, optional?}.
local function opt_param_list(v, p)
  if not is_array(v) then
    return nil, sfmt("%s: expected an array of {name, type, description}, got %s", p, typename(v))
  end
  for i, prm in ipairs(v) do
    if not is_object(prm) then
      return nil, sfmt("%s: expected an object, got %s", seg(p, i), typename(prm))
    end
    local ok, err = check_name(prm.name, seg(seg(p, i), "name"), "parameter name")
    if not ok then return nil, err end
    for _, k in ipairs({ "type", "description" }) do
      local _, e = opt_string(prm, k, seg(p, i))
      if e then return nil, e end
    end
  end
  return v
end

local KINDS = { tool = true, ["function"] = true }

-- Fields of a tool object that make_entry reads; any other field is kept as it is ("extra").
local KNOWN = {}
for k in ([[name kind title description use_cases functions annotations example inputSchema
  input_schema outputSchema output_schema signature returns parameters mcp_server category source
  server]]):gmatch("%S+") do KNOWN[k] = true end

-- Builds one entry from a tool object. defaults: category-level {server=, kind=}.
local function make_entry(obj, name, category, source, path, defaults)
  local e = { name = name, category = category, source = source }
  local err
  e.kind, err = opt_string(obj, "kind", path)
  if err then return nil, err end
  e.kind = e.kind or defaults.kind or "tool"
  if not KINDS[e.kind] then
    return nil, sfmt('%s: must be "tool" or "function", got %q', seg(path, "kind"), e.kind)
  end
  e.title, err = opt_string(obj, "title", path)
  if err then return nil, err end
  e.description, err = opt_string(obj, "description", path)
  if err then return nil, err end
  e.description = e.description or ""
  e.use_cases, err = opt_string_list(obj, "use_cases", path)
  if err then return nil, err end
  e.functions, err = opt_functions(obj, path)
  if err then return nil, err end
  e.annotations, err = opt_object(obj, "annotations", path)
  if err then return nil, err end
  e.example, err = opt_string(obj, "example", path)
  if err then return nil, err end
  local schema_key = obj.inputSchema ~= nil and "inputSchema" or obj.input_schema ~= nil and "input_schema"
  if schema_key then
    e.inputSchema, err = opt_object(obj, schema_key, path)
    if err then return nil, err end
  end
  local out_key = obj.outputSchema ~= nil and "outputSchema" or obj.output_schema ~= nil and "output_schema"
  if out_key then
    e.outputSchema, err = opt_object(obj, out_key, path)
    if err then return nil, err end
  end
  if e.kind == "function" then
    e.signature, err = opt_string(obj, "signature", path)
    if err then return nil, err end
    e.returns, err = opt_string(obj, "returns", path)
    if err then return nil, err end
    if obj.parameters ~= nil and not is_null(obj.parameters) then
      e.parameters, err = opt_param_list(obj.parameters, seg(path, "parameters"))
      if err then return nil, err end
    end
    if not e.example and not e.signature then
      return nil, sfmt('%s: a "function" entry needs an example or a signature', path)
    end
  else
    local server
    server, err = opt_string(obj, "mcp_server", path)
    if err then return nil, err end
    e.server = server or defaults.server or category
    -- "parameters" is accepted as another name for the input schema
    if not e.inputSchema and obj.parameters ~= nil and not is_null(obj.parameters) then
      e.inputSchema, err = opt_object(obj, "parameters", path)
      if err then return nil, err end
    end
  end
  for k, v in pairs(obj) do
    if not KNOWN[k] then
      e.extra = e.extra or {}
      e.extra[k] = v
    end
  end
  if e.inputSchema then
    local props = e.inputSchema.properties
    if props ~= nil and not is_null(props) and not is_object(props) then
      return nil, sfmt("%s: expected an object, got %s", seg(seg(path, schema_key or "parameters"),
        "properties"), typename(props))
    end
  end
  return e
end

-- Category form: {"categories": {"<category>": {"description", "mcp_server"?, "kind"?,
-- "tools": {"<tool>": {...}}}}}.
local function category_form(doc, source)
  local cats = doc.categories
  if not is_object(cats) then
    return nil, nil, sfmt("categories: expected an object, got %s", typename(cats))
  end
  local categories, entries = {}, {}
  for _, cname in ipairs(sorted_keys(cats)) do
    local cpath = seg("categories", cname)
    local ok, err = check_name(cname, cpath, "category name")
    if not ok then return nil, nil, err end
    local c = cats[cname]
    if not is_object(c) then
      return nil, nil, sfmt("%s: expected an object, got %s", cpath, typename(c))
    end
    local desc, server, kind
    desc, err = opt_string(c, "description", cpath)
    if err then return nil, nil, err end
    server, err = opt_string(c, "mcp_server", cpath)
    if err then return nil, nil, err end
    kind, err = opt_string(c, "kind", cpath)
    if err then return nil, nil, err end
    if kind and not KINDS[kind] then
      return nil, nil, sfmt('%s: must be "tool" or "function", got %q', seg(cpath, "kind"), kind)
    end
    categories[#categories + 1] = { name = cname, description = desc }
    local tools = c.tools
    if tools ~= nil and not is_null(tools) then
      if not is_object(tools) then
        return nil, nil, sfmt("%s: expected an object of tools, got %s", seg(cpath, "tools"), typename(tools))
      end
      for _, tname in ipairs(sorted_keys(tools)) do
        local tpath = seg(seg(cpath, "tools"), tname)
        ok, err = check_name(tname, tpath, "tool name")
        if not ok then return nil, nil, err end
        local t = tools[tname]
        if not is_object(t) then
          return nil, nil, sfmt("%s: expected an object, got %s", tpath, typename(t))
        end
        local e
        e, err = make_entry(t, tname, cname, source, tpath, { server = server, kind = kind })
        if not e then return nil, nil, err end
        entries[#entries + 1] = e
      end
    end
  end
  return categories, entries
end

-- MCP form: {"server": "<name>", "description"?, "tools": [{name, title, description,
-- inputSchema, outputSchema, annotations}]} -- a tools/list result with the server's name.
local function mcp_form(doc, source)
  local server, err = check_name(doc.server, "server", "server name")
  if not server then return nil, nil, err end
  local desc, title
  desc, err = opt_string(doc, "description", "")
  if err then return nil, nil, err end
  title, err = opt_string(doc, "title", "")
  if err then return nil, nil, err end
  local tools = doc.tools
  if not is_array(tools) then
    return nil, nil, sfmt("tools: expected an array of tool definitions, got %s", typename(tools))
  end
  local categories = { { name = server, description = desc or title } }
  local entries, seen = {}, {}
  for i, t in ipairs(tools) do
    local tpath = seg("tools", i)
    if not is_object(t) then
      return nil, nil, sfmt("%s: expected an object, got %s", tpath, typename(t))
    end
    local name
    name, err = check_name(t.name, seg(tpath, "name"), "tool name")
    if not name then return nil, nil, err end
    if seen[name] then
      return nil, nil, sfmt("%s: tool %q is listed twice (first at tools[%d])", seg(tpath, "name"),
        name, seen[name] - 1)
    end
    seen[name] = i
    local e
    e, err = make_entry(t, name, server, source, tpath, { server = server })
    if not e then return nil, nil, err end
    entries[#entries + 1] = e
  end
  return categories, entries
end

-- Validates a decoded catalog document (either shape) and returns categories ({name,
-- description?}) and entries (see make_entry), or nil, nil, "path: problem".
function M.normalize(doc, source)
  if not is_object(doc) then
    return nil, nil, sfmt('expected a JSON object ({"categories": {...}} or {"server": "...", '
      .. '"tools": [...]}), got %s', typename(doc))
  end
  local has_c, has_s = doc.categories ~= nil, doc.server ~= nil or doc.tools ~= nil
  if has_c and has_s then
    return nil, nil, 'a catalog file has either "categories" (category form) or "server" and '
      .. '"tools" (MCP form), not both'
  end
  if has_c then return category_form(doc, source) end
  if has_s then return mcp_form(doc, source) end
  return nil, nil, 'expected "categories" (category form) or "server" and "tools" (MCP form) at '
    .. "the top level"
end

---------------------------------------------------------------------------------------------
-- index columns

-- Parameter names (with their words) and descriptions of a JSON schema (one level).
local function schema_words(schema, out)
  if not is_object(schema) then return end
  local props = schema.properties
  if not is_object(props) then return end
  for k, p in pairs(props) do
    out[#out + 1] = with_words(tostring(k))
    if is_object(p) then
      if type(p.description) == "string" then out[#out + 1] = with_words(p.description) end
      if type(p.title) == "string" then out[#out + 1] = with_words(p.title) end
    end
  end
end

-- The five FTS columns of an entry: name, category, description, params, use_cases, each with
-- the words of its camelCase identifiers added.
function M.index_fields(e)
  local name = e.name
  if e.title and e.title ~= e.name then name = name .. "\n" .. e.title end
  local cat = e.category
  if e.server and e.server ~= e.category then cat = cat .. "\n" .. e.server end
  local params = {}
  schema_words(e.inputSchema, params)
  if e.parameters then
    for _, p in ipairs(e.parameters) do
      params[#params + 1] = with_words(p.name)
      if type(p.description) == "string" then params[#params + 1] = with_words(p.description) end
    end
  end
  if e.functions then
    for _, f in ipairs(e.functions) do
      params[#params + 1] = with_words(f.name)
      if type(f.description) == "string" then params[#params + 1] = with_words(f.description) end
    end
  end
  if e.signature then params[#params + 1] = with_words(e.signature) end
  if e.returns then params[#params + 1] = with_words(e.returns) end
  local uses = e.use_cases and with_words(concat(e.use_cases, "\n")) or ""
  return with_words(name), with_words(cat), with_words(e.description or ""),
    concat(params, "\n"), uses
end

---------------------------------------------------------------------------------------------
-- Lua call examples for upstream tools

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or repeat
  return then true until while]]):gmatch("%S+") do KEYWORDS[w] = true end

local function is_ident(s)
  return type(s) == "string" and sfind(s, "^[%a_][%w_]*$") ~= nil and not KEYWORDS[s]
end
M.is_ident = is_ident

local function lua_string(s)
  return (sfmt("%q", s):gsub("\\\n", "\\n"))
end

-- A Lua literal for a JSON value (scalars; small tables as {}).
local function lua_literal(v)
  local t = type(v)
  if t == "string" then return lua_string(v) end
  if t == "number" then
    if math.type(v) == "integer" then return sfmt("%d", v) end
    return sfmt("%.14g", v)
  end
  if t == "boolean" then return tostring(v) end
  if is_null(v) then return "json.null" end
  return "{}"
end

-- A placeholder value for one property of an input schema.
local function placeholder(name, p)
  if not is_object(p) then return lua_string("<" .. name .. ">") end
  if p.default ~= nil and not is_null(p.default) and type(p.default) ~= "table" then
    return lua_literal(p.default)
  end
  if p.const ~= nil and type(p.const) ~= "table" then return lua_literal(p.const) end
  if is_array(p.enum) and p.enum[1] ~= nil and type(p.enum[1]) ~= "table" then
    return lua_literal(p.enum[1])
  end
  if is_array(p.examples) and p.examples[1] ~= nil and type(p.examples[1]) ~= "table" then
    return lua_literal(p.examples[1])
  end
  local ty = p.type
  if is_array(ty) then
    for _, x in ipairs(ty) do if x ~= "null" then ty = x break end end
    if type(ty) ~= "string" then ty = nil end
  end
  if ty == "integer" then
    return math.type(p.minimum) == "integer" and sfmt("%d", p.minimum) or "0"
  elseif ty == "number" then
    return type(p.minimum) == "number" and lua_literal(p.minimum) or "0"
  elseif ty == "boolean" then
    return "false"
  elseif ty == "array" then
    local items = p.items
    if is_object(items) and items.type == "string" then
      return "{" .. lua_string("<" .. name .. " item>") .. "}"
    end
    return "{}"
  elseif ty == "object" then
    return "{}"
  end
  return lua_string("<" .. name .. ">")
end

local function comment_text(p, required)
  local parts = {}
  if is_object(p) then
    local ty = p.type
    if is_array(ty) then
      local names = {}
      for _, x in ipairs(ty) do if type(x) == "string" then names[#names + 1] = x end end
      ty = concat(names, "|")
    end
    if type(ty) == "string" and ty ~= "" then parts[#parts + 1] = ty end
  end
  parts[#parts + 1] = required and "required" or "optional"
  local s = concat(parts, ", ")
  if is_object(p) and type(p.description) == "string" and p.description ~= "" then
    local d = p.description
    if #d > 70 or sfind(d, "[\r\n]") then
      d = M.one_line(d)
      if #d > 70 then d = utf8_cut(d, 67) .. "..." end
    end
    s = s .. ": " .. d
  end
  -- a comment ends at a line break: nothing from a schema may start a line of code
  return (s:gsub("%c", " "))
end

-- A Lua call for an upstream MCP tool: servers.<server>.<tool>({...}) when both names are Lua
-- identifiers, else mcp.call("<server>", "<tool>", {...}). Required properties get placeholder
-- values; optional ones are shown as comments (at most 12 lines of them).
function M.lua_example(e)
  if e.example then return e.example end
  if e.kind == "function" then return e.signature end
  local server = e.server or e.category
  local head
  if is_ident(server) and is_ident(e.name) then
    head = sfmt("local result = servers.%s.%s(", server, e.name)
  else
    head = sfmt("local result = mcp.call(%s, %s, ", lua_string(server), lua_string(e.name))
  end
  local schema = e.inputSchema
  local props = is_object(schema) and is_object(schema.properties) and schema.properties or nil
  if not props or next(props) == nil then return head .. "{})" end
  local req = {}
  if is_array(schema.required) then
    for _, r in ipairs(schema.required) do if type(r) == "string" then req[r] = true end end
  end
  local lines, optional = { head .. "{" }, {}
  for _, k in ipairs(sorted_keys(props)) do
    if type(k) == "string" then
      local key = is_ident(k) and k or "[" .. lua_string(k) .. "]"
      local line = sfmt("%s = %s, -- %s", key, placeholder(k, props[k]), comment_text(props[k], req[k]))
      if req[k] then lines[#lines + 1] = "  " .. line else optional[#optional + 1] = "  -- " .. line end
    end
  end
  for i = 1, math.min(#optional, 12) do lines[#lines + 1] = optional[i] end
  if #optional > 12 then
    lines[#lines + 1] = sfmt("  -- (%d more optional arguments in inputSchema)", #optional - 12)
  end
  lines[#lines + 1] = "})"
  return concat(lines, "\n")
end

---------------------------------------------------------------------------------------------
-- suggestions and change detection

-- Edit distance between a and b (bytes), or max + 1 once it is certainly above max.
function M.levenshtein(a, b, max)
  local la, lb = #a, #b
  if math.abs(la - lb) > max then return max + 1 end
  if la == 0 then return lb end
  if lb == 0 then return la end
  -- Only the band |i - j| <= max can hold a distance <= max (cells outside count as max + 1):
  -- O(len * max) work instead of O(len^2), whatever the names share.
  local big = max + 1
  local prev, cur = {}, {}
  for j = 0, lb do prev[j] = j <= max and j or big end
  for i = 1, la do
    local lo, hi = i - max, i + max
    if lo < 1 then lo = 1 end
    if hi > lb then hi = lb end
    cur[lo - 1] = (lo == 1) and (i <= max and i or big) or big
    local ca = a:byte(i)
    local rowmin = cur[lo - 1]
    for j = lo, hi do
      local v = (prev[j - 1] or big) + (ca == b:byte(j) and 0 or 1)
      local d = (prev[j] or big) + 1
      if d < v then v = d end
      d = cur[j - 1] + 1
      if d < v then v = d end
      if v > big then v = big end
      cur[j] = v
      if v < rowmin then rowmin = v end
    end
    if hi < lb then cur[hi + 1] = big end
    if rowmin > max then return big end
    prev, cur = cur, prev
  end
  local r = prev[lb] or big
  return r > big and big or r
end

-- Deterministic JSON text of a value (object keys sorted), so the same content always gives the
-- same text: used to store definitions and imported shapes, and to skip re-imports that change
-- nothing. enc(v) encodes the strings and floats that need escaping (the host's JSON codec);
-- plain ASCII strings and integers are written here.
local function canon(v, enc, buf, n, depth)
  local t = type(v)
  if t == "string" then
    n = n + 1
    if sfind(v, '[%c"\\\128-\255]') then buf[n] = enc(v) else buf[n] = '"' .. v .. '"' end
    return n
  elseif t == "table" then
    if depth > 200 then error("catalog: value nested more than 200 levels") end
    local mt = getmetatable(v)
    if mt == "json.array" or (mt == nil and v[1] ~= nil) then
      n = n + 1
      buf[n] = "["
      for i = 1, #v do
        if i > 1 then n = n + 1; buf[n] = "," end
        n = canon(v[i], enc, buf, n, depth + 1)
      end
      n = n + 1
      buf[n] = "]"
      return n
    end
    local keys = sorted_keys(v)
    n = n + 1
    buf[n] = "{"
    for i = 1, #keys do
      local k = keys[i]
      if i > 1 then n = n + 1; buf[n] = "," end
      local ks = type(k) == "string" and k or tostring(k)
      n = canon(ks, enc, buf, n, depth)
      n = n + 1
      buf[n] = ":"
      n = canon(v[k], enc, buf, n, depth + 1)
    end
    n = n + 1
    buf[n] = "}"
    return n
  elseif t == "number" then
    n = n + 1
    buf[n] = math.type(v) == "integer" and sfmt("%d", v) or enc(v)
    return n
  elseif t == "boolean" then
    n = n + 1
    buf[n] = v and "true" or "false"
    return n
  elseif v == nil or is_null(v) then
    n = n + 1
    buf[n] = "null"
    return n
  end
  error("catalog: cannot store a " .. t .. " in the catalog")
end

function M.canonical_json(value, enc)
  local buf = {}
  canon(value, enc, buf, 0, 0)
  return concat(buf)
end

return M
