-- tests/lua/test_lua_types.lua - the LuaLS stub generator (lua/mcp/lua_types.lua) and the
-- recorder of result shapes (lua/mcp/result_shapes.lua).
--
-- Standalone: `lua5.4 tests/lua/test_lua_types.lua` from the repo root. The stub of a known
-- schema (tests/lua/expected/lua_types_known.json) must equal the checked-in
-- tests/lua/expected/lua_types_known.lua byte for byte (after a deliberate change to the
-- generator, regenerate it with `lua5.4 tests/lua/test_lua_types.lua --write-expected` and read
-- the diff). Hostile schemas (names that are not identifiers, comment injection, deep and
-- recursive schemas, huge enums and objects, invalid UTF-8) must give bounded text that parses
-- as Lua (load in text mode, as luac -p would) and carries no line that escapes its comment.
-- The recorder keeps types and field names only, never values, per tenant, within its bounds.
-- Ends with "N passed, N failed"; exits 1 on any failure.

local H = dofile((arg and arg[0] and arg[0]:match("^(.*)tests/lua/[^/]*$") or "") .. "tests/lua/harness.lua")
local ROOT = H.ROOT
local check, check_has, check_match, arr, NULL = H.check, H.check_has, H.check_match, H.arr, H.NULL

local m = H.new_mb({ inferred_shape_max_nodes = 50, inferred_shape_total_nodes = 400 })
local T = require("mcp.lua_types")

local function read(path)
  local f = assert(io.open(ROOT .. path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function parses(name, text)
  local fn, err = load(text, "=" .. name, "t", {})
  check(name .. ": parses as Lua", fn ~= nil and true or err, true)
end

-- Every line is empty, a comment, `servers... = {}` or `... = function(args) end` or
-- `function servers.x.y(args) end`: nothing from a schema became code.
local function only_stub_code(name, text)
  local bad
  for line in text:gmatch("([^\n]*)\n") do
    if not (line == "" or line:find("^%-%-") or line:find("^servers[%w_.%[%]\"\\ ]* = {}$")
        or line:find("^function servers%.[%w_]+%.[%w_]+%(args%) end$")
        or line:find("^servers[^\n]* = function%(args%) end$")) then
      bad = line
      break
    end
  end
  check(name .. ": only comments and stub code", bad, nil)
end

---------------------------------------------------------------------------------------------
-- the known schema: exact match with the checked-in file

do
  local tool = H.json_decode(read("tests/lua/expected/lua_types_known.json"))
  local got = T.stub(tool)
  if arg[1] == "--write-expected" then
    local f = assert(io.open(ROOT .. "tests/lua/expected/lua_types_known.lua", "wb"))
    f:write(got)
    f:close()
  end
  local want = read("tests/lua/expected/lua_types_known.lua")
  check("known schema: the expected file", got, want)
  parses("known schema", got)
  only_stub_code("known schema", got)
  -- the same stub twice in one file: names stay unique
  local used = {}
  local a, b = T.stub(tool, { used = used }), T.stub(tool, { used = used })
  check_has("second stub gets new class names", b, "---@class issue_tracker.create_issue.args_2")
  check("first stub unchanged", a, want)
end

---------------------------------------------------------------------------------------------
-- draft-07 forms and the calling convention

do
  local s = T.stub({ server = "weather", name = "get_forecast", inputSchema = H.json_decode([[{
    "type": "object", "properties": {
      "days": {"type": "integer", "description": "number of days"},
      "units": {"$ref": "#/definitions/Units"},
      "point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}]},
      "meta": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
      "both": {"allOf": [{"$ref": "#/definitions/A"}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}
    },
    "definitions": {"Units": {"enum": ["metric", "imperial"]},
                    "A": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
  }]]) })
  check_has("draft-07 definitions enum alias", s, '---@alias weather.get_forecast.Units "metric"|"imperial"')
  check_has("field refers to the alias", s, "---@field units? weather.get_forecast.Units")
  check_has("tuple items", s, "---@field point? number[]")
  check_has("patternProperties map", s, "---@field meta? table<string, string>")
  check_has("allOf merged: a", s, "---@field a integer")
  check_has("allOf merged: b", s, "---@field b string")
  check_has("no required argument: args optional", s, "---@param args? weather.get_forecast.args")
  check_has("no outputSchema, nothing seen: any", s, "---@return any result")
  check_has("identifier call", s, "function servers.weather.get_forecast(args) end")
  parses("draft-07", s)

  check_has("names mapped as the sandbox maps them",
    T.stub({ server = "my server", name = "get-sum" }), "function servers.my_server.get_sum(args) end")
  local kw = T.stub({ server = "end", name = "return" })
  check_has("keyword names quoted", kw, 'servers["end"]["return"] = function(args) end')
  parses("keywords", kw)
  check_has("an ambiguous Lua name uses the exact name",
    T.stub({ server = "s", name = "a-b" }, { unique_ident = false }), 'servers.s["a-b"] = function(args) end')
  check("ident is upstream_config's rule", T.ident("9lives-x.y"), "_9lives_x_y")
end

---------------------------------------------------------------------------------------------
-- hostile schemas

local function hostile(name, tool, max_bytes)
  local ok, s = pcall(T.stub, tool)
  check(name .. ": no error", ok and true or s, true)
  if not ok then return "" end
  parses(name, s)
  only_stub_code(name, s)
  check(name .. ": bounded (" .. #s .. " bytes)", #s <= (max_bytes or 200000), true)
  return s
end

do
  local evil = "x\n]]--[[\nos.exit(1) --\r\n]==]\0\27zz" .. string.rep("é", 5) .. "\255\254"
  local s = hostile("comment injection", {
    server = "evil\nserver", name = "tool\n]]\nos.exit(1)", title = evil, description = evil .. "\n@param x number",
    inputSchema = { type = "object", properties = {
      [evil] = { type = "string", description = evil },
      ["a\"b\\c"] = { type = "string", description = "quote" },
      ["ok"] = { enum = arr({ evil, "fine", 'q"uote' }), description = evil },
      typ = { type = "string", description = "|integer[] trailing" },
    }, description = evil },
  })
  check("no raw newline from a name or text", s:find("os.exit(1)\n", 1, true) == nil and s:find("\nos%.exit") == nil, true)
  check_has("quotes in a field name escaped", s, '---@field ["a\\"b\\\\c"] string|nil quote')
  check_has("a description line never starts an annotation", s, "--- `@`param x number")
  check_has("a description that could extend the type follows #", s, "---@field typ? string # |integer[] trailing")
  check_match("an enum with unsafe strings is typed by its base type", s, "---@field ok%? string ")
end

do -- recursion and depth
  local s = hostile("self-recursive root", { server = "r", name = "t", inputSchema = H.json_decode(
    [[{"type":"object","properties":{"self":{"$ref":"#"},"loop":{"$ref":"#/$defs/L"}},
       "$defs":{"L":{"$ref":"#/$defs/M"},"M":{"$ref":"#/$defs/L"}}}]]) })
  check_has("a $ref cycle without an object ends", s, "---@class r.t.args")
  check_has("$ref # is the root's class", s, "---@field self? r.t.args")
  check_has("a recursive array root is an alias", T.stub({ server = "r", name = "a",
    outputSchema = { type = "array", items = { ["$ref"] = "#" } } }), "---@alias r.a.result r.a.result[]")
  local deep = { type = "string" }
  for i = 1, 150 do deep = { type = "object", properties = { ["n" .. i] = deep } } end
  local d = hostile("150 levels", { server = "d", name = "t", inputSchema = deep })
  check_has("depth cut said", d, "nested deeper than " .. T.MAX_DEPTH)
  local _, classes = d:gsub("---@class", "")
  check("classes bounded by the depth", classes <= T.MAX_DEPTH + 1, true)
  check_has("unknown $ref", hostile("remote ref", { server = "d", name = "u", inputSchema = {
    type = "object", properties = { x = { ["$ref"] = "https://example.com/s.json" } } } }), "is not in this schema")
end

do -- size
  local enum = {}
  for i = 1, 100000 do enum[i] = "v" .. i end
  local s = hostile("100,000-value enum", { server = "e", name = "t", inputSchema = {
    type = "object", properties = { x = { enum = arr(enum) } } } }, 20000)
  check_has("huge enum: its values' type", s, "---@field x? string")
  local props = {}
  local function five() -- a table of its own each time, as decoded JSON has
    return { a = { type = "string", description = string.rep("d", 10000) }, b = { type = "string" },
      c = { type = "string" }, d = { type = "string" }, e = { type = "string" } }
  end
  for i = 1, 5000 do props["p" .. i] = { type = "object", properties = five() } end
  local p = hostile("5,000 properties", { server = "e", name = "p", inputSchema = { type = "object", properties = props } }, 200000)
  check_has("fields cut said", p, "more fields in the schema")
  check_has("node budget said", p, "larger than " .. T.MAX_NODES .. " nodes")
  local alts = {}
  for i = 1, 1000 do alts[i] = { type = "object", properties = { ["k" .. i] = { type = "string" } } } end
  local a = hostile("1,000 alternatives", { server = "e", name = "a", inputSchema = { type = "object",
    properties = { x = { anyOf = arr(alts) } } } }, 50000)
  local _, n = a:gsub("---@class", "")
  check("alternatives bounded", n <= 17 + 1, true)
  -- long names everywhere: names are cut, the stub is replaced when it would be too large
  local long = string.rep("n", 60)
  local function wide(d)
    if d == 0 then return { type = "string" } end
    local alts = {}
    for i = 1, 16 do alts[i] = { type = "object", properties = { [long .. i] = wide(d - 1) } } end
    return { anyOf = arr(alts) }
  end
  local w = hostile("long names and wide unions", { server = long, name = long, inputSchema = { type = "object",
    properties = { [long] = wide(3) } } }, 70000)
  check_match("replaced by an untyped stub when too large", w, "^%-%- [^\n]*: the types would take %d+ bytes, more than 65536")
  local chain = { type = "string" }
  for i = 1, 8 do chain = { type = "object", properties = { [long .. i] = chain } } end
  local c = hostile("long nested names", { server = long, name = long, inputSchema = chain }, 20000)
  local longest, classes = 0, 0
  for name in c:gmatch("---@class (%S+)") do longest, classes = math.max(longest, #name), classes + 1 end
  check("nested classes written", classes, 8)
  check("class names bounded (" .. longest .. ")", longest <= 170, true)
  hostile("schema of wrong types", { server = "e", name = "w", inputSchema = { type = 7, properties = "no",
    required = { "x" }, enum = 3, anyOf = "x", items = false }, outputSchema = { type = arr({ 1, true, "string" }) } })
end

do -- work that small hostile schemas could multiply (counted, not timed)
  -- tools whose names share their first 64 bytes get the same class names: each takes the next
  -- free suffix without trying every earlier one (a file of 10,000 such tools took the loop 17 s)
  local reads, backing = 0, {}
  local used = setmetatable({}, { __index = function(_, k) reads = reads + 1 return backing[k] end,
                                  __newindex = backing })
  local prefix = string.rep("a", 64)
  local last
  for i = 1, 2000 do
    last = T.stub({ server = "s", name = prefix .. i, inputSchema = { type = "object", properties = {
      x = { type = "object", properties = { y = { type = "string" } } } } } }, { used = used })
  end
  check_has("the 2000th tool's class", last, "---@class s." .. prefix .. ".args_2000\n")
  check("names looked up per tool bounded (" .. reads .. " for 2000 tools)", reads <= 2000 * 20, true)
  -- allOf naming one large object by $ref many times, or in many fields: each copy counted
  local iterations = 0
  local function big(n, key)
    local b = {}
    for i = 1, n do b[key .. i] = { type = "string" } end
    -- one key is really in the table (for next()); pairs() goes through all of them, counted
    return setmetatable({ [key .. 1] = b[key .. 1] }, { __index = b, __pairs = function()
      local k, v
      return function() k, v = next(b, k) if k ~= nil then iterations = iterations + 1 end return k, v end
    end })
  end
  local parts = {}
  for i = 1, 500 do parts[i] = { ["$ref"] = "#/$defs/big" } end
  local s = hostile("allOf of 500 $refs to one object of 1,000 properties", { server = "m", name = "a",
    inputSchema = { ["$defs"] = { big = { type = "object", properties = big(1000, "p") } },
      type = "object", properties = { x = { allOf = arr(parts) } } } })
  check_has("merged once", s, "---@field p1? string")
  check("properties copied bounded (" .. iterations .. ")", iterations <= 5000, true)
  iterations = 0
  local fields = {}
  for i = 1, 200 do fields["f" .. i] = { allOf = arr({ { ["$ref"] = "#/$defs/big" } }) } end
  s = hostile("200 allOf fields naming one object of 1,000 unwritable properties", { server = "m", name = "b",
    inputSchema = { ["$defs"] = { big = { type = "object", properties = big(1000, "p\n") } },
      type = "object", properties = fields } })
  check("properties copied bounded (" .. iterations .. ")", iterations <= 8000, true)
  check_has("the cut said", s, "allOf merges more than")
  -- a merged part's own fields are typed once, not once per allOf that merges it: an inline
  -- object of many keys (here all unwritable, so they cost no node) was collected and sorted again
  iterations = 0
  fields = {}
  for i = 1, 200 do fields["f" .. i] = { allOf = arr({ { ["$ref"] = "#/$defs/big" } }) } end
  s = hostile("200 allOf fields merging one object with a nested object of 1,000 keys", { server = "m", name = "c",
    inputSchema = { ["$defs"] = { big = { type = "object", properties = {
      x = { type = "object", properties = big(1000, "p\n") } } } }, type = "object", properties = fields } })
  check("nested keys collected once (" .. iterations .. ")", iterations <= 2000, true)
  check_has("the nested class is shared", s, "---@field x? m.c.args.f1.x")
  check_has("... by every merged field", s, "---@class m.c.args.f10\n---@field x? m.c.args.f1.x")
end

do -- file(): one ---@meta file, bounded
  local servers = { { name = "a", tools = { { server = "a", name = "x-y" }, { server = "a", name = "x_y" } } },
                    { name = "b-b", tools = { { server = "b-b", name = "y", outputSchema = { type = "string" } } } } }
  local f = T.file(servers, 100000)
  parses("file", f)
  only_stub_code("file", f)
  check_match("file is ---@meta", f, "^%-%-%-@meta\n")
  check_has("server table", f, "servers.b_b = {}")
  check_has("tools with the same Lua name keep their exact names", f, 'servers.a["x-y"] = function(args) end')
  check_has("... both of them", f, 'servers.a["x_y"] = function(args) end')
  local small = T.file(servers, 600)
  parses("cut file", small)
  check_match("what is left out is said", small, "%-%- %d+ more left out: the file would be larger than 600 bytes")
  check("cut file bounded", #small <= 600 + 400, true)
end

---------------------------------------------------------------------------------------------
-- result shapes

local shapes = require("mcp.result_shapes")

do
  shapes.reset()
  local v1 = H.json_decode([[{"id": 41, "name": "Alice Example", "email": "alice@example.com",
    "tags": ["vip", "x"], "address": {"city": "Oslo"}, "score": 1.5, "extra": null}]])
  local v2 = H.json_decode([[{"id": 42, "name": "Bob", "tags": [], "score": 2, "active": true}]])
  shapes.observe("alpha", "crm", "get_user", v1)
  shapes.observe("alpha", "crm", "get_user", v2)
  local sch, n = shapes.schema("alpha", "crm", "get_user")
  check("results counted", n, 2)
  local props = sch.properties
  check("fields of both", (function() local k = {} for x in pairs(props) do k[#k + 1] = x end table.sort(k) return table.concat(k, ",") end)(),
    "active,address,email,extra,id,name,score,tags")
  check("required: in every result", sch.required, arr({ "id", "name", "score", "tags" }))
  check("integer and number merge", props.score, { type = "number" })
  check("null kept as a type", props.extra, { type = "null" })
  check("nested object", props.address.properties.city, { type = "string" })
  check("array items", props.tags.items, { type = "string" })
  local text = H.json_encode(sch)
  for _, value in ipairs({ "Alice", "alice@example.com", "Oslo", "vip", "41", "1.5", "Bob" }) do
    check("no value in the shape: " .. value, text:find(value, 1, true), nil)
  end
  check("another tenant sees nothing", shapes.schema("beta", "crm", "get_user"), nil)
  local stub = T.stub({ server = "crm", name = "get_user", inferred = { schema = sch, results = n } })
  check_has("stub marked inferred", stub, "-- inferred: crm.get_user has no outputSchema")
  check_has("inferred class", stub, "---@return crm.get_user.inferred_result result inferred")
  check_has("optional inferred field", stub, "---@field email? string")
  parses("inferred stub", stub)
end

do -- the version a cached type file checks changes with the shape only
  shapes.reset()
  local v0 = shapes.version("a")
  shapes.observe("a", "s", "t", { x = 1, y = "s" })
  local v1 = shapes.version("a")
  check("first result: changed", v1 ~= v0, true)
  shapes.observe("a", "s", "t", { x = 2, y = "other" })
  check("same shape, other values: unchanged", shapes.version("a"), v1)
  shapes.observe("a", "s", "t", { x = 3 })
  local v2 = shapes.version("a")
  check("a field missing (now optional): changed", v2 ~= v1, true)
  shapes.observe("a", "s", "t", { x = 4 })
  check("optional stays optional: unchanged", shapes.version("a"), v2)
  shapes.observe("a", "s", "t", { x = 4.5 })
  check("a new type: changed", shapes.version("a") ~= v2, true)
  local vb = shapes.version("b")
  shapes.observe("a", "s", "t", { z = true })
  check("another tenant's version unchanged", shapes.version("b"), vb)
end

do -- keys that look like data make a map without names
  shapes.reset()
  shapes.observe("t", "s", "by_email", H.json_decode([[{"alice@example.com": {"n": 1}, "bob@example.com": {"n": 2}}]]))
  shapes.observe("t", "s", "by_id", H.json_decode([[{"user_12345": 1, "user_12346": 2}]]))
  shapes.observe("t", "s", "by_name", H.json_decode([[{"Alice Smith": 1}]]))
  shapes.observe("t", "s", "by_handle", H.json_decode([[{"@alice": 1}]]))
  for _, tool in ipairs({ "by_email", "by_id", "by_name", "by_handle" }) do
    local sch = shapes.schema("t", "s", tool)
    check(tool .. ": a map, no names", sch.properties, nil)
    check(tool .. ": map values typed", sch.additionalProperties ~= nil, true)
    local text = H.json_encode(sch)
    for _, w in ipairs({ "alice", "bob", "12345", "Alice" }) do check(tool .. ": no key " .. w, text:find(w, 1, true), nil) end
  end
  -- generated ids: letters and digits mixed within one word (Slack's U024BE7LH, nanoid, hex)
  for _, k in ipairs({ "U024BE7LH", "a1b2c3d4e5f6", "V1StGXR8_Z5jdHi6B", "ord_7f3a9c2e" }) do
    shapes.observe("t", "s", "gen_" .. k, { [k] = { n = 1 } })
    local sch = shapes.schema("t", "s", "gen_" .. k)
    check("generated id " .. k .. ": a map", sch.properties, nil)
    check("generated id " .. k .. ": not in the shape", H.json_encode(sch):find(k, 1, true), nil)
  end
  for _, k in ipairs({ "utf8", "sha256", "base64_data", "x509Cert", "ipv4_address", "s3", "v2", "h264_stream" }) do
    check("a field name with digits stays a name: " .. k, shapes.good_name(k), true)
  end
  -- a record whose field set keeps growing becomes a map too
  m.config.inferred_shape_max_nodes = 200
  for i = 1, 80 do shapes.observe("t", "s", "grow", { ["f" .. i] = i }) end
  check("more than 64 distinct fields: a map", shapes.schema("t", "s", "grow").properties, nil)
  check("... whose values are typed", shapes.schema("t", "s", "grow").additionalProperties, { type = "integer" })
  m.config.inferred_shape_max_nodes = 50
  -- the PII detector, when configured, vets names too
  m.pii_scan = function(s) return s == "ssn_4ever" and { { type = "SSN", start = 1, stop = 4 } } or {} end
  shapes.observe("t", "s", "pii", { ssn_4ever = 1 })
  check("a name the detector flags: a map", shapes.schema("t", "s", "pii").properties, nil)
  m.pii_scan = nil
end

do -- keys that are not names are not remembered: a hostile upstream's 100 KB keys, one per
  -- result, stayed in the memo of checked names (up to 10,000 of them, any size)
  shapes.reset()
  collectgarbage() collectgarbage()
  local before = collectgarbage("count")
  for i = 1, 100 do shapes.observe("t", "s", "long" .. i, { [string.rep("k", 100000) .. i] = 1 }) end
  shapes.reset()
  collectgarbage() collectgarbage()
  local grew = collectgarbage("count") - before
  check(string.format("long keys not kept (%.0f KB more)", grew), grew < 2048, true)
  shapes.observe("t", "s", "long", { [string.rep("k", 65)] = 1 })
  check("a key over 64 bytes: a map", shapes.schema("t", "s", "long").properties, nil)
end

do -- bounds
  shapes.reset()
  local wide = {}
  for i = 1, 40 do wide["f" .. string.char(96 + (i % 26) + 1) .. (i // 26)] = { a = { b = { c = 1 } } } end
  shapes.observe("t", "s", "wide", wide)
  local sch = shapes.schema("t", "s", "wide")
  check_has("cut said", sch.description, "cut at inferred_shape_max_nodes=50")
  check("nodes per shape bounded", shapes.stats().nodes <= 50, true)
  local deep = 1
  for _ = 1, 100 do deep = { d = deep } end
  shapes.observe("t", "s", "deep", deep)
  local big = {}
  for i = 1, 100000 do big[i] = { a = i, b = { c = "x" } } end
  shapes.observe("t", "s", "big", arr(big))
  for i = 1, 30 do shapes.observe("t" .. i, "s", "x", { a = { b = 1 } }) end
  check("total bounded (evicted oldest)", shapes.stats().nodes <= 400, true)
  check("the newest shape is kept", shapes.schema("t30", "s", "x") ~= nil, true)
  m.config.inferred_shape_max_nodes = 0
  shapes.reset()
  shapes.observe("t", "s", "off", { a = 1 })
  check("0: nothing recorded", shapes.schema("t", "s", "off"), nil)
end

H.done()
