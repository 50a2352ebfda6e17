-- tests/lua/test_data.lua - tests for the sandbox data helpers (lua/prelude/data.lua).
--
-- Standalone: `lua5.4 tests/lua/test_data.lua` from the repo root. The prelude is loaded into a
-- fresh environment that mimics the sandbox (base functions, string, table, math, utf8 and a
-- small stand-in `json`), and the tests call the helpers from that environment. Error tests run
-- one-line chunks named "user" so the expected messages also check that each error points at
-- the caller's line ("user:1: ..."). Ends with "N passed, N failed"; exits 1 on any failure.

local ROOT = (arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$")) or ""
local PRELUDE = ROOT .. "lua/prelude/data.lua"

-- ---- harness -------------------------------------------------------------------------------

local passed, failed = 0, 0

-- A light userdata, like the real json.null (debug.upvalueid is the one pure-Lua way to get one).
local NULL = debug.upvalueid(function() return passed end, 1)

local function show(v, depth)
	depth = depth or 0
	if v == NULL then return "json.null" end
	if type(v) == "string" then return string.format("%q", v) end
	if type(v) == "number" then return math.type(v) == "integer" and string.format("%d", v) or string.format("%.17g", v) end
	if type(v) ~= "table" then return tostring(v) end
	if depth > 6 then return "{...}" end
	local keys = {}
	for k in pairs(v) do keys[#keys + 1] = k end
	table.sort(keys, function(a, b)
		if type(a) ~= type(b) then return type(a) < type(b) end
		if type(a) == "number" or type(a) == "string" then return a < b end
		return tostring(a) < tostring(b)
	end)
	local parts = {}
	for _, k in ipairs(keys) do parts[#parts + 1] = "[" .. show(k, depth + 1) .. "]=" .. show(v[k], depth + 1) end
	return "{" .. table.concat(parts, ", ") .. "}"
end

local function deep_eq(a, b)
	if a == b then return true end
	if a ~= a and b ~= b then return true end -- NaN
	if type(a) ~= "table" or type(b) ~= "table" or a == NULL or b == NULL then return false end
	for k, v in pairs(a) do
		if not deep_eq(v, b[k]) then return false end
	end
	for k in pairs(b) do
		if a[k] == nil then return false end
	end
	return true
end

local function check(name, got, want)
	if deep_eq(got, want) then
		passed = passed + 1
	else
		failed = failed + 1
		print("FAIL " .. name .. "\n  got:  " .. show(got) .. "\n  want: " .. show(want))
	end
end

-- ---- the sandbox stand-in ------------------------------------------------------------------

local function json_encode(v, seen)
	seen = seen or {}
	local t = type(v)
	if v == nil or v == NULL then return "null" end
	if t == "boolean" then return tostring(v) end
	if t == "number" then
		if math.type(v) == "integer" then return string.format("%d", v) end
		return string.format("%.14g", v)
	end
	if t == "string" then
		return '"' .. v:gsub('[%c"\\]', function(c)
			local e = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
			return e[c] or string.format("\\u%04x", c:byte())
		end) .. '"'
	end
	if t ~= "table" then error("cannot encode " .. t, 0) end
	if seen[v] then error("stand-in json.encode: cycle", 0) end
	seen[v] = true
	local parts = {}
	if rawlen(v) > 0 or next(v) == nil then
		for i = 1, rawlen(v) do parts[i] = json_encode(v[i], seen) end
		seen[v] = nil
		return "[" .. table.concat(parts, ",") .. "]"
	end
	local keys = {}
	for k in pairs(v) do keys[#keys + 1] = tostring(k) end
	table.sort(keys)
	for i, k in ipairs(keys) do
		local val = v[k]
		if val == nil then val = v[tonumber(k)] end
		parts[i] = json_encode(k) .. ":" .. json_encode(val, seen)
	end
	seen[v] = nil
	return "{" .. table.concat(parts, ",") .. "}"
end

local SOURCE
do
	local f = assert(io.open(PRELUDE, "rb"), "cannot open " .. PRELUDE .. " (run from the repo root)")
	SOURCE = f:read("a")
	f:close()
end

local BASE = { "assert", "error", "ipairs", "next", "pairs", "select", "tonumber", "tostring", "type",
	"rawequal", "rawlen", "rawget", "rawset", "getmetatable", "setmetatable", "pcall", "xpcall", "_VERSION" }

-- A fresh sandbox-like environment with the prelude loaded; with_json = false leaves json out.
local function new_env(with_json)
	local env = {}
	for _, k in ipairs(BASE) do env[k] = _G[k] end
	for _, lib in ipairs({ "string", "table", "math", "utf8" }) do
		local copy = {}
		for k, v in pairs(_G[lib]) do copy[k] = v end
		env[lib] = copy
	end
	if with_json ~= false then env.json = { encode = function(v) return json_encode(v) end, null = NULL } end
	env._G = env
	local before = {}
	for k in pairs(env) do before[k] = true end
	local chunk = assert(load(SOURCE, "@" .. PRELUDE, "t", env))
	chunk()
	local added = {}
	for k in pairs(env) do
		if not before[k] then added[#added + 1] = k end
	end
	table.sort(added)
	return env, added
end

local E, ADDED = new_env()

-- Runs `code` as a one-line user chunk in env and returns the error message (or "no error").
local function user_err(code, env)
	local chunk = assert(load("local r = " .. code, "=user", "t", env or E))
	local ok, err = pcall(chunk)
	if ok then return "no error" end
	return err
end

local function check_err(code, want, env)
	check("error: " .. code, user_err(code, env), "user:1: " .. want)
end

local function names(list)
	local out = {}
	for i = 1, #list do out[i] = list[i].name end
	return out
end

-- ---- data ----------------------------------------------------------------------------------

local people = {
	{ name = "ann", age = 31, city = "Oslo", tags = { "a", "b" }, user = { address = { city = "Oslo" } } },
	{ name = "bob", age = 25, city = "Rome", tags = { "b" }, user = { address = { city = "Rome" } } },
	{ name = "cid", age = NULL, city = "Oslo", tags = {}, user = {} },
	{ name = "dee", age = 40, city = "Paris" },
	{ name = "eve", age = "n/a", city = "Rome" },
}

-- ---- the environment -----------------------------------------------------------------------

check("globals added by the prelude", ADDED, { "aggregate_stats", "count_by", "filter_by_field",
	"format_output", "group_by", "pluck", "sort_by", "summarize_list", "take", "unique" })

-- ---- filter_by_field -----------------------------------------------------------------------

local F = E.filter_by_field
check("filter ==", names(F(people, "city", "Oslo")), { "ann", "cid" })
check("filter keeps the item tables", F(people, "city", "Paris")[1] == people[4], true)
check("filter returns a new list", F(people, "city", "Oslo") ~= people, true)
check("filter empty list", F({}, "a", 1), {})
check("filter predicate", names(F(people, "age", function(v) return type(v) == "number" and v > 30 end)),
	{ "ann", "dee" })
do
	local seen = {}
	F(people, "name", function(v, item) seen[#seen + 1] = (item.name == v) end)
	check("predicate gets value and item", seen, { true, true, true, true, true })
end
check("filter >", names(F(people, "age", 30, ">")), { "ann", "dee" })
check("filter >=", names(F(people, "age", 31, ">=")), { "ann", "dee" })
check("filter <", names(F(people, "age", 31, "<")), { "bob" })
check("filter <=", names(F(people, "age", 25, "<=")), { "bob" })
check("filter > on strings", names(F(people, "name", "bob", ">")), { "cid", "dee", "eve" })
check("filter ~=", names(F(people, "city", "Oslo", "~=")), { "bob", "dee", "eve" })
check("filter == nil matches missing and null", names(F(people, "age", nil)), { "cid" })
check("filter == json.null", names(F(people, "age", NULL)), { "cid" })
check("filter ~= json.null", names(F(people, "age", NULL, "~=")), { "ann", "bob", "dee", "eve" })
check("filter == nil on absent field", names(F(people, "tags", nil, "==")), { "dee", "eve" })
check("filter 1 == 1.0", #F({ { a = 1 } }, "a", 1.0), 1)
check("filter contains substring", names(F(people, "city", "me", "contains")), { "bob", "eve" })
check("filter contains is plain", names(F(people, "city", "O.", "contains")), {})
check("filter contains array member", names(F(people, "tags", "b", "contains")), { "ann", "bob" })
check("filter contains number never matches strings", #F({ { a = "a1" } }, "a", 1, "contains"), 0)
check("filter matches", names(F(people, "name", "^[ab]", "matches")), { "ann", "bob" })
check("filter matches non-strings", #F({ { a = 12 } }, "a", "%d", "matches"), 0)
check("filter in", names(F(people, "city", { "Rome", "Paris" }, "in")), { "bob", "dee", "eve" })
check("filter in with json.null", names(F(people, "age", { NULL, 25 }, "in")), { "bob", "cid" })
check("filter in empty", #F(people, "city", {}, "in"), 0)
check("filter dotted path", names(F(people, "user.address.city", "Oslo")), { "ann" })
check("filter path digit segment", names(F(people, "tags.1", "b")), { "bob" })
check("filter path through string stops", #F({ { a = "xyz" } }, "a.len", nil, "~="), 0)
check("filter key with dots wins", #F({ { ["a.b"] = 1, a = { b = 2 } } }, "a.b", 1), 1)
check("filter integer field", F({ { 1, "x" }, { 2, "y" } }, 2, "y"), { { 2, "y" } })
check("filter function field, scalar items", F({ 1, 2, 3, 4 }, function(x) return x end, 2, ">"), { 3, 4 })
do
	local proxy = setmetatable({}, { __len = function() return math.huge end,
		__index = function(_, i) return { a = i } end })
	check("filter does not follow __len/__index", F(proxy, "a", 1), {})
end

check_err('filter_by_field("x", "a", 1)', "filter_by_field: list must be a table, got string")
check_err('filter_by_field(nil, "a", 1)', "filter_by_field: list must be a table, got nil")
check_err('filter_by_field(json.null, "a", 1)', "filter_by_field: list must be a table, got json.null")
check_err('filter_by_field({a = 1}, "a", 1)',
	"filter_by_field: list must be an array (items at 1..n), got a table with keys but no item 1")
check_err('filter_by_field({}, nil, 1)', "filter_by_field: field is required")
check_err('filter_by_field({}, true, 1)', "filter_by_field: field must be a string, number or function, got boolean")
check_err('filter_by_field({}, "a..b", 1)', "filter_by_field: bad field path 'a..b' (empty segment)")
check_err('filter_by_field({}, ".a", 1)', "filter_by_field: bad field path '.a' (empty segment)")
check_err('filter_by_field({}, 0/0, 1)', "filter_by_field: field must not be NaN")
check_err('filter_by_field({{a = 1}, "x"}, "a", 1)', "filter_by_field: item 2 must be a table, got string")
check_err('filter_by_field({json.null}, "a", 1)', "filter_by_field: item 1 must be a table, got json.null")
check_err('filter_by_field({}, "a", 1, "like")',
	"filter_by_field: unknown op 'like' (expected ==, ~=, <, <=, >, >=, contains, matches or in)")
check_err('filter_by_field({}, "a", 1, 5)',
	"filter_by_field: unknown op 5 (expected ==, ~=, <, <=, >, >=, contains, matches or in)")
check_err('filter_by_field({}, "a", {}, "<")', "filter_by_field: op '<' needs a number or string value, got table")
check_err('filter_by_field({}, "a", nil, ">=")', "filter_by_field: op '>=' needs a number or string value, got nil")
check_err('filter_by_field({}, "a", "x", "in")', "filter_by_field: op 'in' needs a list of values, got string")
check_err('filter_by_field({}, "a", 1, "matches")', "filter_by_field: op 'matches' needs a Lua pattern string, got number")
check_err('filter_by_field({}, "a", nil, "contains")', "filter_by_field: op 'contains' needs a value, got nil")
check_err('filter_by_field({{a = "x"}}, "a", "[a", "matches")',
	"filter_by_field: bad pattern '[a': malformed pattern (missing ']')")
check_err('filter_by_field({{a = "x"}}, "a", "%", "matches")',
	"filter_by_field: bad pattern '%': malformed pattern (ends with '%')")

-- ---- aggregate_stats -----------------------------------------------------------------------

local A = E.aggregate_stats
do
	local s = A(people, "age")
	check("stats", s, { count = 3, sum = 96, mean = 32.0, min = 25, max = 40, median = 31,
		stddev = math.sqrt(38), missing = 1, skipped = 1 })
	check("stats integer sum", math.type(s.sum), "integer")
	check("stats float mean", math.type(s.mean), "float")
end
check("stats of the items", A({ 1, 2, 3, 4 }), { count = 4, sum = 10, mean = 2.5, min = 1, max = 4,
	median = 2.5, stddev = math.sqrt(1.25), missing = 0, skipped = 0 })
check("stats floats", A({ 1.5, 2.5 }), { count = 2, sum = 4.0, mean = 2.0, min = 1.5, max = 2.5,
	median = 2.0, stddev = 0.5, missing = 0, skipped = 0 })
check("stats float sum type", math.type(A({ 1.5, 2.5 }).sum), "float")
do
	local s = A({ math.maxinteger, 1 })
	check("stats integer overflow goes float", { math.type(s.sum), s.sum }, { "float", 2.0 ^ 63 })
	check("stats overflow min/max exact", { s.min, s.max }, { 1, math.maxinteger })
	local n = A({ math.mininteger, -1 })
	check("stats negative overflow goes float", { math.type(n.sum), n.sum }, { "float", -(2.0 ^ 63) - 1 })
end
check("stats empty", A({}), { count = 0, sum = 0, missing = 0, skipped = 0 })
check("stats nothing numeric", A({ "a", NULL }), { count = 0, sum = 0, missing = 1, skipped = 1 })
check("stats NaN skipped", A({ 0 / 0, 1 }), { count = 1, sum = 1, mean = 1.0, min = 1, max = 1, median = 1,
	stddev = 0.0, missing = 0, skipped = 1 })
check("stats numeric strings skipped", A({ "5", 5 }).skipped, 1)
check("stats median odd unsorted", A({ 9, 1, 5 }).median, 5)
check("stats dotted field", A(people, "user.address.city").skipped, 2)
check("stats grouped", A(people, "age", "city"), {
	Oslo = { count = 1, sum = 31, mean = 31.0, min = 31, max = 31, median = 31, stddev = 0.0, missing = 1, skipped = 0 },
	Rome = { count = 1, sum = 25, mean = 25.0, min = 25, max = 25, median = 25, stddev = 0.0, missing = 0, skipped = 1 },
	Paris = { count = 1, sum = 40, mean = 40.0, min = 40, max = 40, median = 40, stddev = 0.0, missing = 0, skipped = 0 },
})
check("stats grouped missing key", A({ { v = 1 }, { v = 2, g = NULL } }, "v", "g"), {
	["(missing)"] = { count = 2, sum = 3, mean = 1.5, min = 1, max = 2, median = 1.5, stddev = 0.5, missing = 0, skipped = 0 },
})
-- records with no field: every field that holds a number somewhere (the form other servers use)
check("stats per numeric field", A({ { a = 1, b = "x", c = 2.5 }, { a = 3, c = 0.5 }, { a = "no", b = "y" } }), {
	a = { count = 2, sum = 4, mean = 2.0, min = 1, max = 3, median = 2.0, stddev = 1.0, missing = 0, skipped = 1 },
	c = { count = 2, sum = 3.0, mean = 1.5, min = 0.5, max = 2.5, median = 1.5, stddev = 1.0, missing = 1, skipped = 0 },
})
check("stats per field after leading missing items", A({ NULL, { v = 2 } }).v.count, 1)
check("stats of plain numbers unchanged", A({ 1, 2, 3 }).sum, 6)
check_err('aggregate_stats(5)', "aggregate_stats: list must be a table, got number")
check_err('aggregate_stats({}, {})', "aggregate_stats: field must be a string, number or function, got table")
check_err('aggregate_stats({}, "a", true)', "aggregate_stats: group_by must be a string, number or function, got boolean")
check_err('aggregate_stats({}, "a", "x..y")', "aggregate_stats: bad group_by path 'x..y' (empty segment)")
check_err('aggregate_stats({1, 2}, "x")', "aggregate_stats: item 1 must be a table, got number")
check_err('aggregate_stats({{x = 1}, 2}, "x", "g")', "aggregate_stats: item 2 must be a table, got number")

-- ---- group_by, count_by --------------------------------------------------------------------

do
	local g = E.group_by(people, "city")
	check("group_by", { names(g.Oslo), names(g.Rome), names(g.Paris) }, { { "ann", "cid" }, { "bob", "eve" }, { "dee" } })
	check("group_by keys", E.count_by(people, "city"), { Oslo = 2, Rome = 2, Paris = 1 })
end
check("group_by items", E.group_by({ "a", "b", "a" }), { a = { "a", "a" }, b = { "b" } })
check("group_by booleans and missing", E.group_by({ { ok = true }, { ok = false }, {} }, "ok"),
	{ [true] = { { ok = true } }, [false] = { { ok = false } }, ["(missing)"] = { {} } })
check("count_by mixed values", E.count_by(people, "age"), { [31] = 1, [25] = 1, [40] = 1, ["(missing)"] = 1, ["n/a"] = 1 })
check("count_by NaN and 1.0", E.count_by({ 0 / 0, 1.0, 1 }), { nan = 1, [1] = 2 })
check("count_by empty", E.count_by({}, "a"), {})
check_err('group_by({}, false)', "group_by: field must be a string, number or function, got boolean")
check_err('group_by({1}, "a")', "group_by: item 1 must be a table, got number")
check_err('count_by("abc", "a")', "count_by: list must be a table, got string")
check_err('count_by({{}, true}, "a")', "count_by: item 2 must be a table, got boolean")

-- ---- sort_by -------------------------------------------------------------------------------

local S = E.sort_by
check("sort_by numbers, strings after, missing last", names(S(people, "age")), { "bob", "ann", "dee", "eve", "cid" })
check("sort_by descending, missing still last", names(S(people, "age", true)), { "eve", "dee", "ann", "bob", "cid" })
check("sort_by stable", names(S(people, "city")), { "ann", "cid", "dee", "bob", "eve" })
check("sort_by stable descending", names(S(people, "city", true)), { "bob", "eve", "dee", "ann", "cid" })
check("sort_by false is ascending", names(S(people, "city", false)), { "ann", "cid", "dee", "bob", "eve" })
check("sort_by items", S({ 3, 1, 2 }), { 1, 2, 3 })
check("sort_by mixed types", S({ true, "b", 2, false, "a", 1 }), { 1, 2, "a", "b", false, true })
check("sort_by mixed types descending", S({ true, "b", 2, false, "a", 1 }, nil, true), { true, false, "b", "a", 2, 1 })
do
	local t1, t2 = {}, {}
	local r = S({ t2, 1, t1, NULL })
	check("sort_by tables keep input order after scalars", { r[1], r[2] == t2, r[3] == t1, r[4] }, { 1, true, true, NULL })
end
check("sort_by NaN last", S({ 0 / 0, 2, 1 }), { 1, 2, 0 / 0 })
check("sort_by dotted", names(S(people, "user.address.city", true)), { "bob", "ann", "cid", "dee", "eve" })
check("sort_by function field", S({ "ccc", "a", "bb" }, function(s) return #s end), { "a", "bb", "ccc" })
do
	local orig = { 3, 1, 2 }
	S(orig)
	check("sort_by leaves the input alone", orig, { 3, 1, 2 })
	local big, n = {}, 20000
	for i = 1, n do big[i] = { k = (i * 7919) % 13, i = i } end
	local sorted = S(big, "k")
	local ok = #sorted == n
	for j = 2, n do
		local a, b = sorted[j - 1], sorted[j]
		if a.k > b.k or (a.k == b.k and a.i >= b.i) then ok = false break end
	end
	check("sort_by 20000 records sorted and stable", ok, true)
end
check_err('sort_by({}, "a", "desc")', "sort_by: descending must be true, false or nil, got string")
check_err('sort_by({}, 1.5 < 1)', "sort_by: field must be a string, number or function, got boolean")
check_err('sort_by({{a = 1}, 1}, "a")', "sort_by: item 2 must be a table, got number")

-- ---- pluck, unique, take -------------------------------------------------------------------

check("pluck", E.pluck(people, "name"), { "ann", "bob", "cid", "dee", "eve" })
check("pluck skips missing", E.pluck(people, "age"), { 31, 25, 40, "n/a" })
check("pluck path", E.pluck(people, "user.address.city"), { "Oslo", "Rome" })
check_err('pluck({}, nil)', "pluck: field is required")
check_err('pluck({{}, 3}, "a")', "pluck: item 2 must be a table, got number")

check("unique items", E.unique({ 1, 2, 1, 3, 2 }), { 1, 2, 3 })
check("unique by field keeps first item", names(E.unique(people, "city")), { "ann", "bob", "dee" })
check("unique missing is one key", E.unique({ { a = 1 }, {}, { a = NULL }, { a = 1 } }, "a"), { { a = 1 }, {} })
check("unique NaN is one key", #E.unique({ 0 / 0, 0 / 0, 1 }), 2)
check("unique tables by reference", #E.unique({ people[1], people[1], {} }), 2)
check_err('unique({a = 1})', "unique: list must be an array (items at 1..n), got a table with keys but no item 1")

check("take", names(E.take(people, 2)), { "ann", "bob" })
check("take more than there is", #E.take(people, 10), 5)
check("take 0", E.take(people, 0), {})
check("take float integer", #E.take(people, 2.0), 2)
check_err('take({}, -1)', "take: n must be a non-negative integer, got -1")
check_err('take({}, 1.5)', "take: n must be a non-negative integer, got 1.5")
check_err('take({}, "2")', "take: n must be a non-negative integer, got '2'")
check_err('take({})', "take: n must be a non-negative integer, got nil")
check_err('take(nil, 1)', "take: list must be a table, got nil")

-- ---- summarize_list ------------------------------------------------------------------------

local SUM = E.summarize_list
check("summarize", SUM(people), {
	count = 5,
	types = { table = 5 },
	fields = {
		name = { count = 5, types = { string = 5 } },
		age = { count = 5, types = { number = 3, null = 1, string = 1 }, min = 25, max = 40, mean = 32.0 },
		city = { count = 5, types = { string = 5 } },
		tags = { count = 3, types = { table = 3 } },
		user = { count = 3, types = { table = 3 } },
	},
	samples = {
		{ name = "ann", age = 31, city = "Oslo", tags = { "a", "b" }, user = { address = { city = "Oslo" } } },
		{ name = "bob", age = 25, city = "Rome", tags = { "b" }, user = { address = { city = "Rome" } } },
		{ name = "cid", age = NULL, city = "Oslo", tags = {}, user = {} },
	},
})
check("summarize samples are copies", SUM(people).samples[1] ~= people[1], true)
check("summarize samples option", #SUM(people, { samples = 1 }).samples, 1)
check("summarize with a number of samples", #SUM(people, 2).samples, 2)
check("summarize samples 0", SUM(people, { samples = 0 }).samples, {})
check("summarize empty", SUM({}), { count = 0, types = {}, fields = {}, samples = {} })
check("summarize scalars", SUM({ 1, "a", NULL }), { count = 3, types = { number = 1, string = 1, null = 1 },
	fields = {}, samples = { 1, "a", NULL } })
check("summarize clips strings", SUM({ { s = string.rep("x", 100) } }, { max_string = 10 }).samples[1].s,
	"xxxxxxxxxx...(+90 bytes)")
check("summarize clips at utf-8 boundary", SUM({ "ééééé" }, { max_string = 5 }).samples[1], "éé...(+6 bytes)")
do
	local long = {}
	for i = 1, 15 do long[i] = i end
	check("summarize long arrays", SUM({ { a = long } }).samples[1].a, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, "...(+5 items)" })
	local wide = {}
	for i = 1, 25 do wide[string.format("k%02d", i)] = i end
	local w = SUM({ wide }).samples[1]
	local nk = 0
	for _ in pairs(w) do nk = nk + 1 end
	check("summarize wide maps", { nk, w.k01, w.k20, w.k21, w["..."] }, { 21, 1, 20, nil, "(+5 keys)" })
end
check("summarize nesting limit", SUM({ { a = { b = { c = { d = 1 } } } } }).samples[1], { a = { b = { c = "{...}" } } })
check("summarize functions", SUM({ { f = print } }).samples[1], { f = "<function>" })
do
	local s = SUM({ { a = 1, b = 1, c = 1 }, { a = 2, b = 2 }, { a = 3 } }, { max_fields = 2 })
	check("summarize max_fields keeps most frequent", s.fields, {
		a = { count = 3, types = { number = 3 }, min = 1, max = 3, mean = 2.0 },
		b = { count = 2, types = { number = 2 }, min = 1, max = 2, mean = 1.5 } })
	check("summarize fields_omitted", s.fields_omitted, 1)
	local t = SUM({ { b = 1, a = 1 } }, { max_fields = 1 })
	check("summarize max_fields ties by name", t.fields, { a = { count = 1, types = { number = 1 }, min = 1, max = 1, mean = 1.0 } })
end
do
	local cyc = {}
	cyc.self = cyc
	check("summarize survives cycles", SUM({ cyc }).samples[1], { self = { self = { self = "{...}" } } })
end
check_err('summarize_list("x")', "summarize_list: list must be a table, got string")
check_err('summarize_list({}, "x")', "summarize_list: opts must be a table, got string")
check_err('summarize_list({}, {sample = 1})',
	"summarize_list: unknown option 'sample' (expected samples, max_fields or max_string)")
check_err('summarize_list({}, {samples = -1})', "summarize_list: opts.samples must be a non-negative integer, got -1")
check_err('summarize_list({}, {max_string = "9"})', "summarize_list: opts.max_string must be a non-negative integer, got '9'")

-- ---- format_output -------------------------------------------------------------------------

local FO = E.format_output
check("json default", FO({ a = 1, b = { 1, 2 } }), '{"a":1,"b":[1,2]}')
check("json explicit", FO({ 1, NULL, "x" }, "json"), '[1,null,"x"]')
check("json scalar", FO("hi"), '"hi"')
check("json nil", FO(nil), "null")
do
	local shared = { 1 }
	check("json shared subtable is not a cycle", FO({ shared, shared }), "[[1],[1]]")
end
check("table", FO({ { name = "ann", age = 31 }, { name = "bob", age = NULL, x = true } }, "table"),
	"age  name  x\n---  ----  ----\n31   ann\n     bob   true")
check("table utf-8 widths", FO({ { a = "é", b = 1 }, { a = "xy", b = 22 } }, "table"), "a   b\n--  --\né   1\nxy  22")
check("table control characters", FO({ { a = "x\ny\t" } }, "table"), "a\n------\nx\\ny\\t")
check("table nested cells and numbers", FO({ { a = { 1, 2 }, b = 0.5, c = 3.0, d = 1 / 0, e = print } }, "table"),
	"a      b    c  d    e\n-----  ---  -  ---  ----------\n[1,2]  0.5  3  inf  <function>")
check("table single record", FO({ b = 2, a = 1 }, "table"), "a  b\n-  -\n1  2")
check("table empty", FO({}, "table"), "")
check("table integer keys first", FO({ { "x", "y", z = 1 } }, "table"), "1  2  z\n-  -  -\nx  y  1")
check("csv", FO({ { a = 'he said "hi"', b = "x,y", c = "plain", d = "l1\nl2" }, { a = 1 } }, "csv"),
	'a,b,c,d\r\n"he said ""hi""","x,y",plain,"l1\nl2"\r\n1,,,')
check("csv empty", FO({}, "csv"), "")
check("markdown", FO({ { a = "x|y", b = "l1\r\nl2" }, { a = 1 } }, "markdown"),
	"| a | b |\n| --- | --- |\n| x\\|y | l1<br>l2 |\n| 1 |  |")
check("summary", FO(people, "summary"), table.concat({
	"count: 5",
	"types: table 5",
	"fields:",
	"  age: 5 (null 1, number 3, string 1) min=25 max=40 mean=32",
	"  city: 5 (string 5)",
	"  name: 5 (string 5)",
	"  tags: 3 (table 3)",
	"  user: 3 (table 3)",
	"samples:",
	'  {"age":31,"city":"Oslo","name":"ann","tags":["a","b"],"user":{"address":{"city":"Oslo"}}}',
	'  {"age":25,"city":"Rome","name":"bob","tags":["b"],"user":{"address":{"city":"Rome"}}}',
	'  {"age":null,"city":"Oslo","name":"cid","tags":[],"user":[]}',
}, "\n"))
check("summary empty", FO({}, "summary"), "count: 0")
do
	local rows = {}
	for i = 1, 52 do rows[i] = { a = true, [string.format("f%02d", i)] = i } end
	local text = FO(rows, "summary")
	local fields = text:match("fields:\n(.-)\nsamples:")
	local lines = {}
	for l in (fields .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
	check("summary keeps 50 fields, most frequent first", { #lines, lines[1], lines[50], lines[51] },
		{ 51, "  a: 52 (boolean 52)", "  f49: 1 (number 1) min=49 max=49 mean=49", "  (+3 more fields)" })
end
check("summary scalars", FO({ 1.5, "x" }, "summary"), 'count: 2\ntypes: number 1, string 1\nsamples:\n  1.5\n  "x"')

check_err('format_output({}, "xml")', "format_output: unknown format 'xml' (expected json, table, csv, markdown or summary)")
check("format_output(data, n): JSON cut to n characters", FO({ a = 1, b = "long text here" }, 12), '{"a":1,"b...')
check("format_output(data, n) short enough: whole", FO({ 1, 2 }, 60), "[1,2]")
check("format_output cut counts characters", FO("h\195\169llo w\195\182rld", 8), '"h\195\169ll...') -- 5 characters, the quote included
check("format_output(data, fmt, n)", FO({ { a = 1 }, { a = 2 } }, "csv", 5), "a\r...")
check_err('format_output({}, 0)', "format_output: max_chars must be a positive integer, got 0")
check_err('format_output({}, 2.5)', "format_output: max_chars must be a positive integer, got 2.5")
check_err('format_output({}, "JSON")', "format_output: unknown format 'JSON' (expected json, table, csv, markdown or summary)")
check_err('format_output((function() local t = {a = {}} t.a.b = t return t end)())',
	"format_output: data contains a cycle at data.a.b")
check_err('format_output((function() local t = {} t[1] = t return t end)(), "table")',
	"format_output: data contains a cycle at data[1]")
check_err('format_output((function() local t = {} t["a b"] = {t} return t end)(), "summary")',
	'format_output: data contains a cycle at data["a b"][1]')
check_err('format_output("x", "table")', "format_output: format 'table' needs a list of records (tables), got string")
check_err('format_output({{a = 1}, "x"}, "csv")', "format_output: row 2 must be a table for format 'csv', got string")
check_err('format_output({1}, "markdown")', "format_output: row 1 must be a table for format 'markdown', got number")
check_err('format_output("x", "summary")', "format_output: list must be a table, got string")
check_err('format_output({f = function() end})', "format_output: json.encode failed: cannot encode function")
check_err('format_output({{a = {f = function() end}}}, "table")', "format_output: json.encode failed: cannot encode function")
do
	local function chain(n)
		local root = {}
		local t = root
		for _ = 2, n do
			local c = {}
			t[1] = c
			t = c
		end
		return root
	end
	E.chain = chain
	check("1000 levels of nesting pass the check", #user_err("format_output(chain(1000), 'csv')") > 0, true)
	check("1000 levels: no depth error", user_err("format_output(chain(1000), 'csv')"):find("deeper") == nil, true)
	check_err("format_output(chain(1001))", "format_output: data is nested deeper than 1000 levels")
	E.chain = nil
end

-- ---- isolation -----------------------------------------------------------------------------

do
	local env = new_env()
	env.string, env.table, env.type, env.json, env.rawlen, env.pairs = nil, nil, nil, nil, nil, nil
	check("helpers keep working after the script clears globals",
		env.format_output(env.sort_by({ { a = 2 }, { a = 1 } }, "a"), "csv"), "a\r\n1\r\n2")
	check("json captured at load", env.format_output({ 1 }), "[1]")
end
do
	local env, added = new_env(false)
	check("no json: same globals", added, ADDED)
	check_err("format_output({})", "format_output: json.encode is not available", env)
	check("no json: stats still work", env.aggregate_stats({ 1, 3 }).mean, 2.0)
	check("no json: table format of scalars works", env.format_output({ { a = 1 } }, "table"), "a\n-\n1")
end

-- ---- large inputs and the instruction hook ---------------------------------------------------

do
	local n = 100000
	local big = {}
	for i = 1, n do big[i] = { id = i, group = "g" .. (i % 10), score = (i * 37) % 1000, note = (i % 3 == 0) and NULL or "x" } end
	local t0 = os.clock()
	local kept = E.filter_by_field(big, "score", 500, ">=")
	local t1 = os.clock()
	local sorted = E.sort_by(big, "score", true)
	local t2 = os.clock()
	local stats = E.aggregate_stats(big, "score", "group")
	local t3 = os.clock()
	local summary = E.summarize_list(big)
	local t4 = os.clock()
	local csv = E.format_output(E.take(sorted, 1000), "csv")
	local t5 = os.clock()
	check("large filter", #kept, 50000)
	check("large sort first/last", { sorted[1].score, sorted[n].score, sorted[1].id, sorted[2].id }, { 999, 0, 27, 1027 })
	check("large grouped stats", { stats.g0.count, stats.g0.min, stats.g0.max }, { 10000, 0, 990 })
	check("large summary", { summary.count, summary.fields.note.count, summary.fields.note.types.null }, { n, n, 33333 })
	check("large csv rows", select(2, csv:gsub("\r\n", "")), 1000)
	print(string.format("timing (100000 records): filter %.0f ms, sort_by %.0f ms, grouped stats %.0f ms, " ..
		"summarize %.0f ms, csv of 1000 rows %.0f ms",
		(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3, (t5 - t4) * 1e3))

	-- The helpers are plain Lua: a count hook (the sandbox's budget) stops them mid-way.
	local ok, err = pcall(function()
		debug.sethook(function() error("budget exceeded", 0) end, "", 1000000)
		E.sort_by(big, "score")
	end)
	debug.sethook()
	check("count hook interrupts sort_by", { ok, err }, { false, "budget exceeded" })
end

-- Timing of loading the prelude itself (it runs in every fresh sandbox).
do
	local t0, reps = os.clock(), 200
	for _ = 1, reps do new_env() end
	print(string.format("timing: loading the prelude (parse + run, with env setup) %.0f us", (os.clock() - t0) / reps * 1e6))
end

print(string.format("%d passed, %d failed", passed, failed))
if failed > 0 then os.exit(1) end
