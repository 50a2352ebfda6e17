-- lua/prelude/data.lua - the data helpers every sandbox gets.
--
-- Runs once in each fresh sandbox state, after the restricted environment is built, and defines
-- the helper globals (filter_by_field, summarize_list, aggregate_stats, format_output, group_by,
-- sort_by, pluck, count_by, unique, take) and nothing else: everything internal is local.
-- The helpers are plain Lua, so the instruction and wall-clock budgets interrupt them like any
-- sandbox code; sorting is a merge sort written here (stable, hooked) instead of table.sort.
-- Library functions and `json` are captured when this file runs, so a script that later
-- reassigns `string`, `type` or `json` does not change how the helpers behave.
--
-- Conventions shared by every helper (docs/sandbox-helpers.md is the reference for agents):
--  * a list is an array table, items at 1..rawlen(list); __len and __index are not followed;
--  * a field is a key, a dotted path ("user.address.city", digit segments also try integer
--    keys), an integer, or a function(item) returning the value;
--  * nil and json.null both mean "missing";
--  * errors name the helper and the argument, and point (error level) at the caller's line;
--  * a list a helper returns is marked with json.array, so it is a JSON array even when empty
--    (`[]`, not `{}`), like the arrays json.decode makes.
--    Internal functions take `lvl`, the level to pass to error() from inside themselves.

local type, next, error, tostring, tonumber, pcall = type, next, error, tostring, tonumber, pcall
local rawlen = rawlen or function(t) return #t end
local rawget = rawget or function(t, k) return t[k] end
local rawequal = rawequal or function(a, b) return a == b end
local sfind, sformat, ssub, sbyte, sgsub, srep =
	string.find, string.format, string.sub, string.byte, string.gsub, string.rep
local concat = table.concat
local mtype, sqrt, huge, tointeger = math.type, math.sqrt, math.huge, math.tointeger
local ulen, uoffset = utf8.len, utf8.offset
local json_encode = type(json) == "table" and json.encode or nil
local NULL = type(json) == "table" and json.null or nil
if NULL == nil then NULL = {} end -- a private sentinel: nothing in the data can equal it
local json_array = type(json) == "table" and json.array or nil
local getmetatable = getmetatable

local MISSING = "(missing)" -- group key for items whose field is nil or json.null
local UMISS, UNAN = {}, {}  -- unique() keys for missing and NaN values

-- ---- small shared pieces -------------------------------------------------------------------

-- A new list the helpers return: marked as a JSON array where json.array exists.
local function new_list()
	local t = {}
	if json_array then json_array(t) end
	return t
end

local function typename(v)
	if rawequal(v, NULL) then return "json.null" end
	return type(v)
end

local function is_missing(v)
	return v == nil or rawequal(v, NULL)
end

-- A short printable form of an argument for error messages.
local function show(v)
	if type(v) == "string" then
		if #v > 40 then v = ssub(v, 1, 40) .. "..." end
		return "'" .. v .. "'"
	end
	if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
	return typename(v)
end

local function fmt_num(v)
	if mtype(v) == "integer" then return sformat("%d", v) end
	if v ~= v then return "nan" end
	if v == huge then return "inf" end
	if v == -huge then return "-inf" end
	return sformat("%.14g", v)
end

-- Stable merge sort of a[1..n] in place; less(x, y) is a strict order. Written in Lua so that
-- the hook can interrupt it, unlike table.sort.
local function msort(a, n, less)
	local RUN = 8
	for lo = 1, n, RUN do -- insertion sort of short runs
		local hi = lo + RUN - 1
		if hi > n then hi = n end
		for i = lo + 1, hi do
			local v, j = a[i], i - 1
			while j >= lo and less(v, a[j]) do
				a[j + 1] = a[j]
				j = j - 1
			end
			a[j + 1] = v
		end
	end
	local src, dst, width = a, {}, RUN
	while width < n do
		for lo = 1, n, 2 * width do
			local mid, hi = lo + width - 1, lo + 2 * width - 1
			if mid > n then mid = n end
			if hi > n then hi = n end
			local i, j, k = lo, mid + 1, lo
			while i <= mid and j <= hi do
				if less(src[j], src[i]) then
					dst[k], j = src[j], j + 1
				else
					dst[k], i = src[i], i + 1
				end
				k = k + 1
			end
			for x = i, mid do dst[k], k = src[x], k + 1 end
			for x = j, hi do dst[k], k = src[x], k + 1 end
		end
		src, dst, width = dst, src, width * 2
	end
	if src ~= a then
		for i = 1, n do a[i] = src[i] end
	end
	return a
end

-- Sort rank of a value: numbers < strings < booleans < other types; nil for missing and NaN.
local function rank(v)
	local t = type(v)
	if t == "number" then return v == v and 1 or nil end
	if t == "string" then return 2 end
	if t == "boolean" then return 3 end
	if is_missing(v) then return nil end
	return 4
end

local function before(a, ra, b, rb)
	if ra ~= rb then return ra < rb end
	if ra == 3 then return not a and b end
	if ra == 4 then return false end
	return a < b
end

local function key_before(a, b)
	return before(a, rank(a) or 4, b, rank(b) or 4)
end

-- Returns the length of list, or raises when it is not an array table.
local function check_list(name, list, lvl)
	if type(list) ~= "table" then
		error(sformat("%s: list must be a table, got %s", name, typename(list)), lvl)
	end
	local n = rawlen(list)
	if n == 0 and next(list) ~= nil then
		error(name .. ": list must be an array (items at 1..n), got a table with keys but no item 1", lvl)
	end
	return n
end

local function bad_item(name, i, item, lvl)
	error(sformat("%s: item %d must be a table, got %s", name, i, typename(item)), lvl)
end

-- Returns a function(item) -> value for `field`, or nil when field is nil and `optional`
-- (the caller then uses the items themselves).
local function getter(name, field, lvl, optional, arg)
	arg = arg or "field"
	local tf = type(field)
	if field == nil then
		if optional then return nil end
		error(sformat("%s: %s is required", name, arg), lvl)
	end
	if tf == "function" then return field end
	if tf == "number" then
		if field ~= field then error(sformat("%s: %s must not be NaN", name, arg), lvl) end
		return function(item) return item[field] end
	end
	if tf ~= "string" then
		error(sformat("%s: %s must be a string, number or function, got %s", name, arg, typename(field)), lvl)
	end
	if not sfind(field, ".", 1, true) then
		return function(item) return item[field] end
	end
	local segs, alts, n, pos = {}, {}, 0, 1
	while true do
		local dot = sfind(field, ".", pos, true)
		local seg = ssub(field, pos, (dot or 0) - 1)
		if seg == "" then
			error(sformat("%s: bad %s path %s (empty segment)", name, arg, show(field)), lvl)
		end
		n = n + 1
		segs[n] = seg
		alts[n] = sfind(seg, "^%d+$") and tointeger(tonumber(seg)) or false
		if not dot then break end
		pos = dot + 1
	end
	return function(item)
		local v = item[field] -- a key that itself contains dots wins
		if v ~= nil then return v end
		v = item
		for i = 1, n do
			if type(v) ~= "table" then return nil end
			local nv = v[segs[i]]
			if nv == nil and alts[i] then nv = v[alts[i]] end
			v = nv
		end
		return v
	end
end

-- The values of field for every item (or the items themselves when field is nil), in a table
-- indexed 1..n (it may hold nils).
local function values_of(name, list, n, field, lvl, arg)
	local get = getter(name, field, lvl + 1, true, arg)
	if not get then return list end
	local need_table = type(field) ~= "function"
	local vals = {}
	for i = 1, n do
		local item = rawget(list, i)
		if need_table and type(item) ~= "table" then bad_item(name, i, item, lvl + 1) end
		vals[i] = get(item)
	end
	return vals
end

local function group_key(v)
	if is_missing(v) then return MISSING end
	if v ~= v then return "nan" end
	return v
end

-- ---- filter_by_field -----------------------------------------------------------------------

local ORDER_OPS = { ["<"] = true, ["<="] = true, [">"] = true, [">="] = true }

-- Returns function(v, item) -> boolean for a comparison against `value` with operator `op`.
local function matcher(value, op, lvl)
	local name = "filter_by_field"
	if op == nil then
		if type(value) == "function" then return value end
		op = "=="
	end
	if is_missing(value) then value = nil end
	if op == "==" then
		return function(v)
			if rawequal(v, NULL) then v = nil end
			return v == value
		end
	elseif op == "~=" then
		return function(v)
			if rawequal(v, NULL) then v = nil end
			return v ~= value
		end
	elseif ORDER_OPS[op] then
		local tv = type(value)
		if tv ~= "number" and tv ~= "string" then
			error(sformat("%s: op '%s' needs a number or string value, got %s", name, op, typename(value)), lvl)
		end
		return function(v)
			if type(v) ~= tv then return false end
			if op == "<" then return v < value
			elseif op == "<=" then return v <= value
			elseif op == ">" then return v > value
			else return v >= value end
		end
	elseif op == "contains" then
		if value == nil then error(name .. ": op 'contains' needs a value, got nil", lvl) end
		return function(v)
			if type(v) == "string" then
				return type(value) == "string" and sfind(v, value, 1, true) ~= nil
			elseif type(v) == "table" then
				for j = 1, rawlen(v) do
					if rawget(v, j) == value then return true end
				end
			end
			return false
		end
	elseif op == "matches" then
		if type(value) ~= "string" then
			error(sformat("%s: op 'matches' needs a Lua pattern string, got %s", name, typename(value)), lvl)
		end
		return function(v)
			if type(v) ~= "string" then return false end
			local ok, r = pcall(sfind, v, value)
			if not ok then
				error(sformat("%s: bad pattern %s: %s", name, show(value), tostring(r)), 3)
			end
			return r ~= nil
		end
	elseif op == "in" then
		if type(value) ~= "table" then
			error(sformat("%s: op 'in' needs a list of values, got %s", name, typename(value)), lvl)
		end
		local set, want_missing = {}, false
		for j = 1, rawlen(value) do
			local x = rawget(value, j)
			if is_missing(x) then want_missing = true elseif x == x then set[x] = true end
		end
		return function(v)
			if is_missing(v) then return want_missing end
			return set[v] == true
		end
	end
	error(sformat("%s: unknown op %s (expected ==, ~=, <, <=, >, >=, contains, matches or in)", name, show(op)), lvl)
end

function filter_by_field(list, field, value, op)
	local n = check_list("filter_by_field", list, 3)
	local get = getter("filter_by_field", field, 3)
	local test = matcher(value, op, 3)
	local need_table = type(field) ~= "function"
	local out, m = new_list(), 0
	for i = 1, n do
		local item = rawget(list, i)
		if need_table and type(item) ~= "table" then bad_item("filter_by_field", i, item, 3) end
		if test(get(item), item) then
			m = m + 1
			out[m] = item
		end
	end
	return out
end

-- ---- aggregate_stats -----------------------------------------------------------------------

local function num_less(a, b) return a < b end

-- Statistics of acc = {vals, n, missing, skipped}; vals holds numbers that are not NaN.
local function finish_stats(acc)
	local vals, n = acc.vals, acc.n
	local r = { count = n, sum = 0, missing = acc.missing, skipped = acc.skipped }
	if n == 0 then return r end
	local isum, fsum, exact, floats = 0, 0.0, true, false
	local lo, hi = vals[1], vals[1]
	for i = 1, n do
		local v = vals[i]
		if exact and mtype(v) == "integer" then
			local s = isum + v
			if (v >= 0) == (s >= isum) then isum = s else exact, fsum = false, fsum + v end
		else
			fsum, floats = fsum + v, floats or mtype(v) == "float"
		end
		if v < lo then lo = v end
		if v > hi then hi = v end
	end
	local sum = (exact and not floats) and isum or isum + fsum
	local mean = sum / n
	local sq = 0.0
	for i = 1, n do
		local d = vals[i] - mean
		sq = sq + d * d
	end
	local sorted = {}
	for i = 1, n do sorted[i] = vals[i] end
	msort(sorted, n, num_less)
	local median
	if n % 2 == 1 then
		median = sorted[(n + 1) // 2]
	else
		median = sorted[n // 2] / 2 + sorted[n // 2 + 1] / 2
	end
	r.sum, r.mean, r.min, r.max, r.median, r.stddev = sum, mean, lo, hi, median, sqrt(sq / n)
	return r
end

local function new_acc() return { vals = {}, n = 0, missing = 0, skipped = 0 } end

local function add_value(acc, v)
	if type(v) == "number" and v == v then
		acc.n = acc.n + 1
		acc.vals[acc.n] = v
	elseif is_missing(v) then
		acc.missing = acc.missing + 1
	else
		acc.skipped = acc.skipped + 1
	end
end

-- aggregate_stats(records) with no field: the stats of every field that holds a number in some
-- record (the call form other servers' helpers have), as { field = stats }.
local function stats_per_field(list, n)
	local accs, names, nf = {}, {}, 0
	for i = 1, n do
		local item = rawget(list, i)
		if type(item) == "table" then
			for k, v in next, item do
				if type(v) == "number" and not accs[k] then
					accs[k] = true
					nf = nf + 1
					names[nf] = k
				end
			end
		end
	end
	local out = {}
	for j = 1, nf do
		local k, acc = names[j], new_acc()
		for i = 1, n do
			local item = rawget(list, i)
			add_value(acc, type(item) == "table" and rawget(item, k) or nil)
		end
		out[k] = finish_stats(acc)
	end
	return out
end

function aggregate_stats(list, field, group_by_field)
	local name = "aggregate_stats"
	local n = check_list(name, list, 3)
	if field == nil and group_by_field == nil then
		for i = 1, n do -- records (tables) rather than plain numbers: every numeric field
			local item = rawget(list, i)
			if type(item) == "table" and not rawequal(item, NULL) then return stats_per_field(list, n) end
			if not is_missing(item) then break end
		end
	end
	local vals = values_of(name, list, n, field, 3)
	if group_by_field == nil then
		local acc = new_acc()
		for i = 1, n do add_value(acc, vals[i]) end
		return finish_stats(acc)
	end
	local keys = values_of(name, list, n, group_by_field, 3, "group_by")
	local accs = {}
	for i = 1, n do
		local k = group_key(keys[i])
		local acc = accs[k]
		if not acc then
			acc = new_acc()
			accs[k] = acc
		end
		add_value(acc, vals[i])
	end
	local out = {}
	for k, acc in next, accs do out[k] = finish_stats(acc) end
	return out
end

-- ---- small list helpers --------------------------------------------------------------------

function group_by(list, field)
	local n = check_list("group_by", list, 3)
	local keys = values_of("group_by", list, n, field, 3)
	local out = {}
	for i = 1, n do
		local k = group_key(keys[i])
		local g = out[k]
		if not g then
			g = new_list()
			out[k] = g
		end
		g[#g + 1] = rawget(list, i)
	end
	return out
end

function count_by(list, field)
	local n = check_list("count_by", list, 3)
	local keys = values_of("count_by", list, n, field, 3)
	local out = {}
	for i = 1, n do
		local k = group_key(keys[i])
		out[k] = (out[k] or 0) + 1
	end
	return out
end

function sort_by(list, field, descending)
	local n = check_list("sort_by", list, 3)
	if descending ~= nil and type(descending) ~= "boolean" then
		error("sort_by: descending must be true, false or nil, got " .. typename(descending), 2)
	end
	local keys = values_of("sort_by", list, n, field, 3)
	-- Bucket item indexes by rank, sort each bucket with a plain comparator (ties keep input
	-- order), then concatenate; missing (bucket 5) comes last in both directions.
	local buckets, counts = { {}, {}, {}, {}, {} }, { 0, 0, 0, 0, 0 }
	for i = 1, n do
		local r = rank(keys[i]) or 5
		local c = counts[r] + 1
		counts[r], buckets[r][c] = c, i
	end
	local less
	if descending then
		less = function(i, j) return keys[j] < keys[i] end
	else
		less = function(i, j) return keys[i] < keys[j] end
	end
	msort(buckets[1], counts[1], less)
	msort(buckets[2], counts[2], less)
	msort(buckets[3], counts[3], function(i, j)
		if descending then return keys[i] and not keys[j] end
		return not keys[i] and keys[j]
	end)
	local order = descending and { 4, 3, 2, 1, 5 } or { 1, 2, 3, 4, 5 }
	local out, m = new_list(), 0
	for _, r in next, order do
		local b = buckets[r]
		for k = 1, counts[r] do
			m = m + 1
			out[m] = rawget(list, b[k])
		end
	end
	return out
end

function pluck(list, field)
	local n = check_list("pluck", list, 3)
	if field == nil then error("pluck: field is required", 2) end
	local vals = values_of("pluck", list, n, field, 3)
	local out, m = new_list(), 0
	for i = 1, n do
		local v = vals[i]
		if not is_missing(v) then
			m = m + 1
			out[m] = v
		end
	end
	return out
end

function unique(list, field)
	local n = check_list("unique", list, 3)
	local keys = values_of("unique", list, n, field, 3)
	local seen, out, m = {}, new_list(), 0
	for i = 1, n do
		local k = keys[i]
		if is_missing(k) then k = UMISS elseif k ~= k then k = UNAN end
		if not seen[k] then
			seen[k] = true
			m = m + 1
			out[m] = rawget(list, i)
		end
	end
	return out
end

function take(list, count)
	local n = check_list("take", list, 3)
	local k = mtype(count) == "integer" and count or (mtype(count) == "float" and tointeger(count))
	if not k or k < 0 then
		error("take: n must be a non-negative integer, got " .. show(count), 2)
	end
	if k > n then k = n end
	local out = new_list()
	for i = 1, k do out[i] = rawget(list, i) end
	return out
end

-- ---- summarize_list ------------------------------------------------------------------------

local SAMPLE_DEPTH, SAMPLE_ITEMS, SAMPLE_KEYS = 3, 10, 20

-- Cuts s to at most max bytes at a UTF-8 character boundary and says how much was cut.
local function clip(s, max)
	if #s <= max then return s end
	local e = max
	while e > 0 do
		local c = sbyte(s, e + 1)
		if c < 0x80 or c >= 0xC0 then break end
		e = e - 1
	end
	return sformat("%s...(+%d bytes)", ssub(s, 1, e), #s - e)
end

-- A bounded copy of v for the samples: long strings clipped, nesting and sizes limited.
local function sample_copy(v, depth, max_string)
	local t = type(v)
	if t == "string" then return clip(v, max_string) end
	if t == "number" or t == "boolean" or rawequal(v, NULL) then return v end
	if t ~= "table" then return "<" .. t .. ">" end
	if depth >= SAMPLE_DEPTH then return "{...}" end
	local out, n = {}, rawlen(v)
	if n > 0 or getmetatable(v) == "json.array" then
		out = new_list()
		local m = n < SAMPLE_ITEMS and n or SAMPLE_ITEMS
		for i = 1, m do out[i] = sample_copy(rawget(v, i), depth + 1, max_string) end
		if n > m then out[m + 1] = sformat("...(+%d items)", n - m) end
		return out
	end
	local keys, nk = {}, 0
	for k in next, v do
		local tk = type(k)
		if tk == "string" or tk == "number" or tk == "boolean" then
			nk = nk + 1
			keys[nk] = k
		end
	end
	msort(keys, nk, key_before)
	for i = 1, (nk < SAMPLE_KEYS and nk or SAMPLE_KEYS) do
		local k = keys[i]
		out[k] = sample_copy(rawget(v, k), depth + 1, max_string)
	end
	if nk > SAMPLE_KEYS then out["..."] = sformat("(+%d keys)", nk - SAMPLE_KEYS) end
	return out
end

local function summarize(name, list, opts, lvl)
	local n = check_list(name, list, lvl + 1)
	local o = { samples = 3, max_fields = 50, max_string = 80 }
	if opts ~= nil then
		if type(opts) ~= "table" then
			error(sformat("%s: opts must be a table, got %s", name, typename(opts)), lvl)
		end
		for k, v in next, opts do
			if o[k] == nil then
				error(sformat("%s: unknown option %s (expected samples, max_fields or max_string)",
					name, show(k)), lvl)
			end
			local iv = mtype(v) == "integer" and v or (mtype(v) == "float" and tointeger(v))
			if not iv or iv < 0 then
				error(sformat("%s: opts.%s must be a non-negative integer, got %s", name, k, show(v)), lvl)
			end
			o[k] = iv
		end
	end
	local types, fields, sums, names, nf = {}, {}, {}, {}, 0
	for i = 1, n do
		local item = rawget(list, i)
		local ti = rawequal(item, NULL) and "null" or type(item)
		types[ti] = (types[ti] or 0) + 1
		if ti == "table" then
			for k, v in next, item do
				local tk = type(k)
				if tk == "string" or tk == "number" then
					local key = tk == "string" and k or fmt_num(k)
					local f = fields[key]
					if not f then
						f = { count = 0, types = {} }
						fields[key], sums[key] = f, { 0.0, 0 }
						nf = nf + 1
						names[nf] = key
					end
					f.count = f.count + 1
					local tv = rawequal(v, NULL) and "null" or type(v)
					f.types[tv] = (f.types[tv] or 0) + 1
					if tv == "number" and v == v then
						if f.min == nil or v < f.min then f.min = v end
						if f.max == nil or v > f.max then f.max = v end
						local s = sums[key]
						s[1], s[2] = s[1] + v, s[2] + 1
					end
				end
			end
		end
	end
	for key, s in next, sums do
		if s[2] > 0 then fields[key].mean = s[1] / s[2] end
	end
	local r = { count = n, types = types, fields = fields, samples = new_list() }
	if nf > o.max_fields then -- keep the most frequent fields, ties by name
		msort(names, nf, function(a, b)
			local ca, cb = fields[a].count, fields[b].count
			if ca ~= cb then return ca > cb end
			return a < b
		end)
		local kept = {}
		for i = 1, o.max_fields do kept[names[i]] = fields[names[i]] end
		r.fields, r.fields_omitted = kept, nf - o.max_fields
	end
	for i = 1, (n < o.samples and n or o.samples) do
		r.samples[i] = sample_copy(rawget(list, i), 0, o.max_string)
	end
	return r
end

function summarize_list(list, opts)
	-- summarize_list(list, n): n samples (the call form other servers' helpers have)
	if mtype(opts) == "integer" or (mtype(opts) == "float" and tointeger(opts)) then
		opts = { samples = opts }
	end
	local r = summarize("summarize_list", list, opts, 3)
	return r
end

-- ---- format_output -------------------------------------------------------------------------

local MAX_DEPTH = 1000

local function path_text(stack, depth)
	local parts = { "data" }
	for i = 1, depth do
		local k = stack[i]
		if type(k) == "string" and sfind(k, "^[%a_][%w_]*$") then
			parts[i + 1] = "." .. k
		elseif type(k) == "string" then
			parts[i + 1] = "[" .. sformat("%q", k) .. "]"
		elseif type(k) == "number" then
			parts[i + 1] = "[" .. fmt_num(k) .. "]"
		else
			parts[i + 1] = "[" .. typename(k) .. "]"
		end
	end
	return concat(parts)
end

-- Depth-first walk; returns an error message for a cycle or too deep nesting, else nil.
-- state[t] is 1 while t is on the path, 2 once t and everything under it is known acyclic,
-- so shared (non-cyclic) subtables are walked once.
local function find_cycle(v, state, stack, depth)
	local s = state[v]
	if s == 2 then return nil end
	if s == 1 then return "format_output: data contains a cycle at " .. path_text(stack, depth) end
	if depth >= MAX_DEPTH then
		return sformat("format_output: data is nested deeper than %d levels", MAX_DEPTH)
	end
	state[v] = 1
	for k, x in next, v do
		if type(x) == "table" then
			stack[depth + 1] = k
			local err = find_cycle(x, state, stack, depth + 1)
			if err then return err end
		end
	end
	stack[depth + 1] = nil
	state[v] = 2
	return nil
end

local function encode(v, lvl)
	if not json_encode then error("format_output: json.encode is not available", lvl) end
	local ok, s = pcall(json_encode, v)
	if not ok then error("format_output: json.encode failed: " .. tostring(s), lvl) end
	if type(s) ~= "string" then
		error("format_output: json.encode returned " .. typename(s) .. ", not a string", lvl)
	end
	return s
end

local function cell(v, lvl)
	local t = type(v)
	if t == "string" then return v end
	if t == "number" then return fmt_num(v) end
	if t == "boolean" then return v and "true" or "false" end
	if is_missing(v) then return "" end
	if t == "table" then
		local s = encode(v, lvl + 1) -- not a tail call: lvl counts this frame
		return s
	end
	return "<" .. t .. ">"
end

-- Returns rows, n, columns (sorted union of keys) for the tabular formats.
local function tabulate(data, format, lvl)
	if type(data) ~= "table" then
		error(sformat("format_output: format '%s' needs a list of records (tables), got %s",
			format, typename(data)), lvl)
	end
	local rows, n = data, rawlen(data)
	if n == 0 and next(data) ~= nil then rows, n = { data }, 1 end -- a single record
	local seen, cols, nc = {}, {}, 0
	for i = 1, n do
		local row = rawget(rows, i)
		if type(row) ~= "table" then
			error(sformat("format_output: row %d must be a table for format '%s', got %s",
				i, format, typename(row)), lvl)
		end
		for k in next, row do
			if not seen[k] then
				seen[k] = true
				nc = nc + 1
				cols[nc] = k
			end
		end
	end
	msort(cols, nc, key_before)
	return rows, n, cols, nc
end

local CTRL_ESC = { ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
local function esc_ctrl(c) return CTRL_ESC[c] or sformat("\\x%02x", sbyte(c)) end
local MD_ESC = { ["|"] = "\\|", ["\n"] = "<br>", ["\r"] = "" }

local function rtrim(s)
	local e = #s
	while e > 0 and sbyte(s, e) == 32 do e = e - 1 end
	return ssub(s, 1, e)
end

local function grid(rows, n, cols, nc, lvl, fix)
	local g = { {} }
	for c = 1, nc do g[1][c] = fix(cell(cols[c], lvl + 1)) end
	for i = 1, n do
		local row, line = rawget(rows, i), {}
		for c = 1, nc do line[c] = fix(cell(rawget(row, cols[c]), lvl + 1)) end
		g[i + 1] = line
	end
	return g
end

local function render_table(data, lvl)
	local rows, n, cols, nc = tabulate(data, "table", lvl + 1)
	if nc == 0 then return "" end
	local g = grid(rows, n, cols, nc, lvl + 1, function(s) return (sgsub(s, "%c", esc_ctrl)) end)
	local widths = {}
	for c = 1, nc do
		local w = 0
		for r = 1, n + 1 do
			local s = g[r][c]
			local sw = ulen(s) or #s
			if sw > w then w = sw end
		end
		widths[c] = w
	end
	local function line(cells)
		local parts = {}
		for c = 1, nc do
			local s = cells[c]
			parts[c] = c < nc and s .. srep(" ", widths[c] - (ulen(s) or #s)) or s
		end
		return rtrim(concat(parts, "  "))
	end
	local out, dashes = { line(g[1]) }, {}
	for c = 1, nc do dashes[c] = srep("-", widths[c]) end
	out[2] = line(dashes)
	for r = 2, n + 1 do out[r + 1] = line(g[r]) end
	return concat(out, "\n")
end

local function render_csv(data, lvl)
	local rows, n, cols, nc = tabulate(data, "csv", lvl + 1)
	if nc == 0 then return "" end
	local g = grid(rows, n, cols, nc, lvl + 1, function(s)
		if sfind(s, '[,"\r\n]') then return '"' .. sgsub(s, '"', '""') .. '"' end
		return s
	end)
	local out = {}
	for r = 1, n + 1 do out[r] = concat(g[r], ",") end
	return concat(out, "\r\n")
end

local function render_markdown(data, lvl)
	local rows, n, cols, nc = tabulate(data, "markdown", lvl + 1)
	if nc == 0 then return "" end
	local g = grid(rows, n, cols, nc, lvl + 1, function(s) return (sgsub(s, "[|\r\n]", MD_ESC)) end)
	local out, dashes = {}, {}
	for c = 1, nc do dashes[c] = "---" end
	out[1] = "| " .. concat(g[1], " | ") .. " |"
	out[2] = "| " .. concat(dashes, " | ") .. " |"
	for r = 2, n + 1 do out[r + 1] = "| " .. concat(g[r], " | ") .. " |" end
	return concat(out, "\n")
end

local function sorted_keys(t)
	local keys, n = {}, 0
	for k in next, t do
		n = n + 1
		keys[n] = k
	end
	return msort(keys, n, key_before), n
end

local function counts_text(t)
	local keys, n = sorted_keys(t)
	local parts = {}
	for i = 1, n do parts[i] = keys[i] .. " " .. fmt_num(t[keys[i]]) end
	return concat(parts, ", ")
end

local function render_summary(data, lvl)
	local s = summarize("format_output", data, nil, lvl + 1)
	local out = { "count: " .. fmt_num(s.count) }
	if s.count > 0 then out[#out + 1] = "types: " .. counts_text(s.types) end
	local names, nf = sorted_keys(s.fields)
	if nf > 0 then
		out[#out + 1] = "fields:"
		for i = 1, nf do
			local f = s.fields[names[i]]
			local l = sformat("  %s: %s (%s)", names[i], fmt_num(f.count), counts_text(f.types))
			if f.min ~= nil then
				l = l .. sformat(" min=%s max=%s mean=%s", fmt_num(f.min), fmt_num(f.max), fmt_num(f.mean))
			end
			out[#out + 1] = l
		end
		if s.fields_omitted then out[#out + 1] = sformat("  (+%d more fields)", s.fields_omitted) end
	end
	if #s.samples > 0 then
		out[#out + 1] = "samples:"
		for i = 1, #s.samples do out[#out + 1] = "  " .. encode(s.samples[i], lvl + 1) end
	end
	return concat(out, "\n")
end

local RENDER = { table = render_table, csv = render_csv, markdown = render_markdown,
	summary = render_summary }

-- At most max characters of s (UTF-8), "..." at the end when cut.
local function cut_chars(s, max)
	local n = ulen(s)
	if (n or #s) <= max then return s end
	local keep = max > 3 and max - 3 or max
	local i = n and uoffset(s, keep + 1) or keep + 1
	return ssub(s, 1, i - 1) .. (max > 3 and "..." or "")
end

function format_output(data, format, max_chars)
	-- format_output(data, n): JSON cut to n characters (the call form other servers' helpers have)
	if type(format) == "number" and max_chars == nil then format, max_chars = "json", format end
	if max_chars ~= nil and not (mtype(max_chars) == "integer" or tointeger(max_chars)) or
	   (max_chars ~= nil and max_chars < 1) then
		error("format_output: max_chars must be a positive integer, got " .. show(max_chars), 2)
	end
	if format == nil then format = "json" end
	if format ~= "json" and not (type(format) == "string" and RENDER[format]) then
		error("format_output: unknown format " .. show(format) ..
			" (expected json, table, csv, markdown or summary)", 2)
	end
	if type(data) == "table" then
		local err = find_cycle(data, {}, {}, 0)
		if err then error(err, 2) end
	end
	local s
	if format == "json" then s = encode(data, 3) else s = RENDER[format](data, 3) end
	if max_chars then s = cut_chars(s, tointeger(max_chars)) end
	return s
end
