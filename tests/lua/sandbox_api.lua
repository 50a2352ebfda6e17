-- tests/lua/sandbox_api.lua - runs INSIDE the real sandbox (tests/unit/test_lua_sandbox.c feeds
-- it to mb_sandbox_run under ASan/UBSan): the data helpers with the real json module, json and
-- re together, and the replaced string/table functions, as an agent would use them.
-- Returns {passed = n, failed = n, failures = {...}}.
local passed, failed, failures = 0, 0, {}

local function eq(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do if not eq(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function check(name, got, want)
  if eq(got, want) then
    passed = passed + 1
  else
    failed = failed + 1
    failures[#failures + 1] = name .. ": got " .. json.encode(got == nil and json.null or got)
      .. ", want " .. json.encode(want == nil and json.null or want)
  end
end

local orders = json.decode([[
  [{"id": 1, "status": "paid", "total": 30, "customer": {"country": "DE"}},
   {"id": 2, "status": "open", "total": 5, "customer": {"country": "FR"}},
   {"id": 3, "status": "paid", "total": 12, "customer": {"country": "DE"}},
   {"id": 4, "status": "paid", "total": null, "customer": {"country": "US"}}]
]])

-- data helpers with the real json.null
check("filter_by_field", pluck(filter_by_field(orders, "status", "paid"), "id"), { 1, 3, 4 })
check("filter dotted", #filter_by_field(orders, "customer.country", "DE"), 2)
check("filter op", pluck(filter_by_field(orders, "total", 10, ">"), "id"), { 1, 3 })
local stats = aggregate_stats(orders, "total")
check("stats", { stats.count, stats.sum, stats.min, stats.max, stats.missing }, { 3, 47, 5, 30, 1 })
check("count_by", count_by(orders, "status"), { paid = 3, open = 1 })
check("sort_by", pluck(sort_by(orders, "total", true), "id"), { 1, 3, 2, 4 })
check("take", #take(orders, 2), 2)
check("unique", #unique(orders, "status"), 2)
check("group_by", #group_by(orders, "customer.country").DE, 2)
check("format_output csv", format_output({ { a = 1, b = "x,y" } }, "csv"), 'a,b\r\n1,"x,y"')
check("format_output json", json.decode(format_output({ a = { 1, 2 } }, "json")), { a = { 1, 2 } })
check("summarize_list", summarize_list(orders).count, 4)

-- json: exact integers, null, arrays
check("json int", json.decode("[9007199254740993]")[1], 9007199254740993)
check("json roundtrip", json.encode(json.decode('{"a":[],"b":null}')) == '{"a":[],"b":null}'
  or json.encode(json.decode('{"a":[],"b":null}')) == '{"b":null,"a":[]}', true)
check("json float", json.encode(1.0), "1.0")
check("json error", select(2, pcall(json.decode, "{")) ~= nil, true)
check("json strict function", (pcall(json.encode, { f = print })), false)

-- re with captures and flags
check("re.match", { re.match("key=value", "(\\w+)=(\\w+)") }, { "key", "value" })
check("re.find", { re.find("abc123", "\\d+") }, { 4, 6 })
check("re.gsub", { re.gsub("a-b-c", "-", "+") }, { "a+b+c", 2 })
check("re.split", re.split("a, b,c", ",\\s*"), { "a", "b", "c" })
check("re flags", re.match("HELLO", "hello", 1, "i"), "HELLO")
local words = {}
for w in re.gmatch("one two  three", "\\w+") do words[#words + 1] = w end
check("re.gmatch", words, { "one", "two", "three" })
check("re bad pattern", (pcall(re.find, "x", "(")), false)

-- replaced string and table functions behave like stock Lua
check("gsub", { ("hello world"):gsub("o", "0") }, { "hell0 w0rld", 2 })
check("gmatch", (function() local t = {} for k, v in ("a=1,b=2"):gmatch("(%w+)=(%w+)") do t[k] = v end return t end)(), { a = "1", b = "2" })
check("find plain", { ("a.b"):find(".", 1, true) }, { 2, 2 })
check("rep", ("ab"):rep(3, "-"), "ab-ab-ab")
check("upper", ("Straße"):upper(), "STRAßE")
check("sort", (function() local t = { 5, 2, 8, 1 } table.sort(t) return t end)(), { 1, 2, 5, 8 })
check("concat", table.concat({ 1, "a", 2.5 }, "|"), "1|a|2.5")
check("insert/remove", (function() local t = { 1, 3 } table.insert(t, 2, 2) table.remove(t, 1) return t end)(), { 2, 3 })
check("utf8.len", utf8.len("héllo"), 5)
check("coroutine.wrap", (function() local g = coroutine.wrap(function() coroutine.yield(1) coroutine.yield(2) end) return { g(), g() } end)(), { 1, 2 })

-- the environment
check("no io", io, nil)
check("no debug", debug, nil)
check("os subset", { type(os.time), os.exit, os.getenv }, { "function" })
check("load text", load("return 2 + 3")(), 5)

return { passed = passed, failed = failed, failures = json.array(failures) }
