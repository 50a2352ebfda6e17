-- tests/lua/test_skills.lua - the skill formats (lua/mcp/skill_format.lua), the skill tools and
-- published-skill tools (lua/mcp/skill_tools.lua: argument checks, result shapes) and skills
-- published as prompts and resources (lua/mcp/skill_publish.lua), without a store or a sandbox:
-- the skill index is a stand-in and executions are scripted (tests/lua/harness.lua). The same
-- features end to end: tests/integration/skills.test.mjs, skill_publish.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_skills.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_match, check_has = H.check, H.check_match, H.check_has
local arr, NULL = H.arr, H.NULL

local m = H.new_mb()
local fmt = require("mcp.skill_format")
local jd = H.json_decode

---------------------------------------------------------------------------------------------
-- names

check("name simple", fmt.valid_name("orders_by_status"), true)
check("name underscore first", fmt.valid_name("_x1"), true)
check("name 64 bytes", fmt.valid_name(string.rep("a", 64)), true)
check("name 65 bytes", fmt.valid_name(string.rep("a", 65)), false)
check("name digit first", fmt.valid_name("1abc"), false)
check("name dash", fmt.valid_name("a-b"), false)
check("name dot (no module paths)", fmt.valid_name("a.b"), false)
check("name slash", fmt.valid_name("../etc"), false)
check("name empty", fmt.valid_name(""), false)
check("name not a string", fmt.valid_name(12), false)
check("name non-ASCII", fmt.valid_name("caf\xc3\xa9"), false)

---------------------------------------------------------------------------------------------
-- parse_header

local ORDERS = [[
--- Summarise a list of orders by status.
-- @param orders array the orders to summarise
-- @param field string? the field to group by (default "status")
-- @return table counts by status
-- @tool Order summary
return function(args) return {} end
]]
local meta = fmt.parse_header(ORDERS, jd)
check("header description", meta.description, "Summarise a list of orders by status.")
check("header params", meta.params, {
  { name = "orders", type = "array", description = "the orders to summarise", optional = false },
  { name = "field", type = "string", description = 'the field to group by (default "status")', optional = true },
})
check("header returns", meta.returns, "table counts by status")
check("header tool title", meta.tool, { title = "Order summary" })
check("header lines", meta.header_lines, 5)

meta = fmt.parse_header("--- First paragraph\n-- goes on.\n--\n-- Second one.\n-- @tool\nreturn 1\n", jd)
check("header blank comment line is a paragraph break", meta.description, "First paragraph\ngoes on.\n\nSecond one.")
check("header @tool without title", meta.tool, {})

meta = fmt.parse_header("\n\n#!/usr/bin/env lua\n--- After a shebang\nreturn 1", jd)
check("header skips blank lines and a shebang", meta.description, "After a shebang")
check("header lines count from the file's top", meta.header_lines, 4)

meta = fmt.parse_header("--- Desc\n--[[ a long comment\n-- @tool ]]\nreturn 1", jd)
check("header ends at a long comment", meta.tool, nil)
check("header before long comment", meta.description, "Desc")
meta = fmt.parse_header("--- Desc\n--[==[ level 2\n]==]\n-- @tool\n", jd)
check("header ends at a leveled long comment", meta.tool, nil)

meta = fmt.parse_header("--- A\n-- @tool\n-- text after the tags", jd)
check("header text after tags is not description", meta.description, "A")

meta = fmt.parse_header("return 1", jd)
check("no header", { meta.description, #meta.params, meta.header_lines, meta.tool }, { nil, 0, 0, nil })

meta = fmt.parse_header("--- Windows\r\n-- @param x number the x\r\n-- @tool T\r\nreturn 1\r\n", jd)
check("header CRLF description", meta.description, "Windows")
check("header CRLF title", meta.tool.title, "T")
check("header CRLF param", meta.params[1].description, "the x")

meta = fmt.parse_header(table.concat({
  "--- P",
  "-- @param a",                        -- name only: any type, required
  "-- @param b?",                       -- name only, optional
  "-- @param c number (optional) the c", -- "(optional)" text
  "-- @param d string|number? union",
  "-- @param e table[] list of rows",
  "-- @returns string the result",
}, "\n"), jd)
check("param forms", meta.params, {
  { name = "a", type = "any", description = "", optional = false },
  { name = "b", type = "any", description = "", optional = true },
  { name = "c", type = "number", description = "(optional) the c", optional = true },
  { name = "d", type = "string|number", description = "union", optional = true },
  { name = "e", type = "table[]", description = "list of rows", optional = false },
})
check("@returns is @return", meta.returns, "string the result")

local bad, err = fmt.parse_header("--- X\n-- @tool\n-- @param\n", jd)
check("@param without a name", { bad, err }, { nil, "line 3: @param needs a name: @param name type description" })
bad, err = fmt.parse_header("--- X\n-- @param !x string\n", jd)
check("@param with a bad name", err, "line 2: @param needs a name: @param name type description")

meta = fmt.parse_header("--- R\n-- @resource test://items/{id} application/json\n-- @prompt Ask it\n", jd)
check("@resource template", meta.resource, { uri = "test://items/{id}", mimeType = "application/json", template = true })
check("@prompt title", meta.prompt, { title = "Ask it" })
meta = fmt.parse_header("--- R\n-- @resource test://fixed\n-- @prompt\n", jd)
check("@resource plain", meta.resource, { uri = "test://fixed", template = false })
check("@prompt without title", meta.prompt, {})
bad, err = fmt.parse_header("--- R\n-- @resource\n", jd)
check("@resource without uri", err, "line 2: @resource needs a URI: @resource test://x [text/plain]")

meta = fmt.parse_header('--- S\n-- @input_schema {"type":"object","properties":{"q":{"type":"string"}}}\n', jd)
check("@input_schema publishes with the schema", meta.tool,
  { input_schema = { type = "object", properties = { q = { type = "string" } } } })
meta = fmt.parse_header('--- S\n-- @tool X\n-- @output_schema {"type":"object"}\n', jd)
check("@output_schema next to @tool", meta.tool, { title = "X", output_schema = { type = "object" } })
bad, err = fmt.parse_header('--- S\n-- @input_schema {"type":\n', jd)
check_match("@input_schema invalid JSON", err, "^line 2: @input_schema must be a JSON object on one line: .*expected")
bad, err = fmt.parse_header('--- S\n-- @output_schema 5\n', jd)
check("@output_schema not an object", { bad, err }, { nil, "line 2: @output_schema must be a JSON object on one line" })

---------------------------------------------------------------------------------------------
-- @example lines

meta = fmt.parse_header('--- D\n-- @example {"text": "a -> b"} -> {"n": 2}\n-- @example add [1, 2] -> 3\n'
  .. '-- @example "x->y"->"y"\nreturn 1', jd)
check("example: input and expected as JSON, split at the arrow outside strings", meta.examples[1],
  { input = { text = "a -> b" }, output = { n = 2 }, line = 2 })
check("example: a field called with an array of arguments", meta.examples[2],
  { call = "add", input = arr({ 1, 2 }), output = 3, line = 3 })
check("example: strings on both sides", meta.examples[3], { input = "x->y", output = "y", line = 4 })
local _, xerr = fmt.parse_header("--- D\n-- @example {\"a\": 1}\nreturn 1", jd)
check_match("example without an expected value", xerr, "^line 2: @example needs INPUT %-> EXPECTED")
_, xerr = fmt.parse_header('--- D\n-- @example f {"a": 1} -> 1\nreturn 1', jd)
check_match("example of a field needs an array", xerr, "@example f needs its arguments as a JSON array")
check("strip_header removes @example lines", fmt.strip_header("-- @example 1 -> 2\nreturn 1\n"), "return 1\n")

---------------------------------------------------------------------------------------------
-- make_header: what save_skill writes reads back the same

local function roundtrip(meta_in)
  local header = fmt.make_header(meta_in, H.json_encode)
  return fmt.parse_header(header .. "return 1\n", jd), header
end

local src = { description = "Line one.\n@not_a_tag here\n\nLine three.",
              params = { { name = "rows", type = "array", description = "the rows\nto read" },
                         { name = "limit", type = "integer", optional = true } },
              returns = "a table\nof counts", tool = { title = "Counter", input_schema = { type = "object" } },
              prompt = { title = "P" }, resource = { uri = "test://c/{x}", mimeType = "text/plain" },
              examples = { { input = { rows = arr({}) }, output = 0 }, { call = "f", input = arr({ "a" }), output = "A" } } }
local back, header = roundtrip(src)
check("roundtrip examples", { back.examples[1].output, back.examples[2].call, back.examples[2].input[1] }, { 0, "f", "a" })
check("roundtrip description (with a line starting with @)", back.description, src.description)
check("header escapes the @ line", header:match("\n(%-%-[^\n]*not_a_tag[^\n]*)"), "--  @not_a_tag here")
check("roundtrip params (descriptions on one line)", back.params, {
  { name = "rows", type = "array", description = "the rows to read", optional = false },
  { name = "limit", type = "integer", description = "", optional = true },
})
check("roundtrip returns on one line", back.returns, "a table of counts")
check("roundtrip tool", back.tool, { title = "Counter", input_schema = { type = "object" } })
check("roundtrip prompt", back.prompt, { title = "P" })
check("roundtrip resource", back.resource, { uri = "test://c/{x}", mimeType = "text/plain", template = true })

back = roundtrip({ description = "CR only\rsecond\r\nthird" })
check("make_header: a lone CR starts a line (Lua ends comments there)", back.description, "CR only\nsecond\nthird")
local code = fmt.make_header({ description = "a\rreturn 'injected'" }, H.json_encode) .. "return 'real'\n"
check("make_header: a CR in the description cannot inject code", load(code)(), "real")
check("make_header empty description", roundtrip({}).description, nil)

---------------------------------------------------------------------------------------------
-- strip_header

check("strip header", fmt.strip_header("--- d\n-- @tool\n\nreturn 1\n"), "return 1\n")
check("strip header, no trailing newline", fmt.strip_header("--- d\nreturn 1"), "return 1")
check("strip keeps plain comments", fmt.strip_header("-- plain\nreturn 1\n"), "-- plain\nreturn 1\n")
check("strip keeps a long comment", fmt.strip_header("--- d\n--[[ keep ]]\nreturn 1"), "--[[ keep ]]\nreturn 1")
check("strip after blank lines", fmt.strip_header("\n\n--- d\n\nreturn 2\n"), "return 2\n")
check("strip without header", fmt.strip_header("return 3"), "return 3")
check("strip a -- header with a tag", fmt.strip_header("-- Hand.\n-- @tool T\nreturn 4\n"), "return 4\n")
check("strip a -- header with @param", fmt.strip_header("--@param x any\n\nreturn 5\n"), "return 5\n")
check("strip keeps comments whose tags are not metadata", fmt.strip_header("-- note\n-- @todo later\nreturn 6\n"),
  "-- note\n-- @todo later\nreturn 6\n")

---------------------------------------------------------------------------------------------
-- compile

check("compile ok", fmt.compile("x", "return function() end"), true)
check("compile does not run the code", fmt.compile("x", "error('boom')"), true)
check("compile syntax error and line", { fmt.compile("x", "local a =\n\n\nfunction") },
  { false, "skills/x.lua:4: '(' expected near <eof>", 4 })
local ok, cerr = fmt.compile("x", string.dump(function() end))
check("compile refuses bytecode", { ok, cerr }, { false, "attempt to load a binary chunk (mode is 't')" })

---------------------------------------------------------------------------------------------
-- front matter (SKILL.md)

local md = table.concat({
  "---",
  "name: csv",
  "# a comment",
  "",
  'description: "Read CSV: quoted, with a colon"',
  "tool: true",
  "title: 'CSV reader'",
  'input_schema: {"type":"object","required":["text"]}',
  "prompt: yes",
  "resource: test://csv/{file}",
  "mime_type: text/csv",
  "---",
  "# CSV",
  "",
  "Body text.",
}, "\r\n")
local fm = fmt.parse_front_matter(md, jd)
check("front matter description unquoted", fm.description, "Read CSV: quoted, with a colon")
check("front matter tool", fm.tool, { title = "CSV reader", input_schema = { type = "object", required = { "text" } } })
check("front matter prompt", fm.prompt, { title = "CSV reader" })
check("front matter resource", fm.resource, { uri = "test://csv/{file}", mimeType = "text/csv", template = true })
check("front matter body", fm.body, "# CSV\n\nBody text.")
check("front matter keeps keys", fm.front.name, "csv")
check("front matter: tool false", fmt.parse_front_matter("---\ntool: false\n---\n", jd).tool, nil)

bad, err = fmt.parse_front_matter("name: x\n", jd)
check_has("front matter missing", err, "must start with front matter")
bad, err = fmt.parse_front_matter("---\nname: x\n", jd)
check("front matter not closed", err, "SKILL.md: front matter is not closed by a '---' line")
bad, err = fmt.parse_front_matter("---\nname: x\n  - a list item\n---\n", jd)
check("front matter multi-line value", err,
  "SKILL.md line 3: expected 'key: value' (multi-line YAML values are not supported)")
bad, err = fmt.parse_front_matter("---\noutput_schema: [1\n---\n", jd)
check_match("front matter bad schema", err, "^SKILL.md: output_schema must be a JSON object on one line: ")

local md2 = fmt.make_skill_md("csv", { description = "Two\nlines", tool = { title = "T", output_schema = { type = "object" } } },
  "body\n", H.json_encode)
check("make_skill_md", md2, "---\nname: csv\ndescription: Two lines\ntool: true\ntitle: T\noutput_schema: {\"type\":\"object\"}\n---\nbody\n")
fm = fmt.parse_front_matter(md2, jd)
check("make_skill_md reads back", { fm.description, fm.tool, fm.body },
  { "Two lines", { title = "T", output_schema = { type = "object" } }, "body" })

---------------------------------------------------------------------------------------------
-- input_schema

local schema = fmt.input_schema({ params = {
  { name = "s", type = "string", description = "text" },
  { name = "t", type = "table", description = "" },
  { name = "l", type = "list", description = "", optional = true },
  { name = "u", type = "string|number", description = "either" },
} }, arr)
check("input schema from params", schema, { type = "object", properties = {
  s = { type = "string", description = "text" }, t = { type = "object" }, l = { type = "array" },
  u = { description = "either" } }, required = { "s", "t", "u" } })
check("input schema required is an array", getmetatable(schema.required), "json.array")
check("input schema without required params", fmt.input_schema({ params = { { name = "o", type = "any", optional = true } } }, arr),
  { type = "object", properties = { o = {} } })
local declared = { type = "object", properties = {} }
check("declared input schema wins", fmt.input_schema({ params = { { name = "x" } }, tool = { input_schema = declared } }, arr) == declared, true)

---------------------------------------------------------------------------------------------
-- the skill tools (skill_tools.lua, loaded by the real tool registry)

local tools = H.load_tools()
local S = H.skills
check("skills started by init", S.started, true)

local function text_of(r) return r and r.content and r.content[1] and r.content[1].text end

local r = tools.by_name.save_skill.handler({ name = "x", code = "return 1", description = "d", bogus = 1 }, H.request())
check("save_skill unknown argument", r.isError, true)
check_has("save_skill unknown argument names it and the allowed ones", text_of(r),
  'invalid arguments: save_skill has no argument "bogus" (expected code, description, examples, input_schema, mime_type, name, '
  .. "output_schema, params, prompt, resource, returns, title, tool)")
check("save_skill refused before the index is touched", #S.saved, 0)

S.save_result = function() return nil, "skills/x.lua:3: syntax error", 3 end
r = tools.by_name.save_skill.handler({ name = "x", code = "return", description = "d" }, H.request("t1"))
check("save_skill error carries the line", { r.isError, r.structuredContent, text_of(r) },
  { true, { error = "skills/x.lua:3: syntax error", error_line = 3 }, "skills/x.lua:3: syntax error" })
check("save_skill passes the tenant", S.saved[1].tenant, "t1")
S.save_result = function(_, args) return { name = args.name, version = 2 } end
r = tools.by_name.save_skill.handler({ name = "x", code = "return 1", description = "d" }, H.request())
check("save_skill ok", { r.isError, r.structuredContent }, { false, { name = "x", version = 2 } })

r = tools.by_name.load_skill.handler({ name = "x", version = 1 }, H.request())
check_has("load_skill takes name only", text_of(r), 'load_skill has no argument "version" (expected name)')
r = tools.by_name.skill_history.handler({ name = "x", version = 3 }, H.request("t2"))
check("skill_history forwards name and version", r.structuredContent, { call = "history", tenant = "t2", args = { "x", 3 } })

S.save_result = function() return nil, "name is invalid" end
check("host call save_skill error", { tools.host_calls.save_skill({ name = "!" }, H.request()) },
  { nil, "save_skill: name is invalid" })
check("host call skill_source", tools.host_calls.skill_source({ name = "x" }, H.request("t3")),
  { call = "source", tenant = "t3", args = { "x", false } })
check("host call skill_source for skills.<name> (optional)",
  tools.host_calls.skill_source({ name = "x", optional = true }, H.request("t3")),
  { call = "source", tenant = "t3", args = { "x", true } })

-- a published skill as a tool: schema checks before any execution
local skill_tools = require("mcp.skill_tools")
local entry = skill_tools.tool_entry(tools, { name = "stats", description = "Counts.",
  params = { { name = "text", type = "string", description = "" },
             { name = "top", type = "integer", description = "", optional = true },
             { name = "opts", type = "object", description = "", optional = true } },
  tool = { title = "Stats" } })
check("published definition", { entry.definition.name, entry.definition.title, entry.definition.description,
  entry.definition.inputSchema.required }, { "stats", "Stats", "Counts.", { "text" } })

local function call(args, results)
  local req = H.request("default", results)
  return entry.handler(args, req), req
end
local res, req = call({})
check("published: required argument", text_of(res), "invalid arguments: text is required")
check("published: nothing executed on bad arguments", #req.specs, 0)
check("published: required null", text_of(call({ text = NULL })), "invalid arguments: text is required")
check("published: string type", text_of(call({ text = 5 })), "invalid arguments: text must be a string")
check("published: integer type", text_of(call({ text = "a", top = "3" })), "invalid arguments: top must be an integer")
check("published: integer, not a fraction", text_of(call({ text = "a", top = 1.5 })), "invalid arguments: top must be an integer")
check("published: object type", text_of(call({ text = "a", opts = "x" })), "invalid arguments: opts must be an object")
check("published: optional null passes", #select(2, call({ text = "a", top = NULL })).specs, 1)
check("published: undeclared argument passes (no additionalProperties)", #select(2, call({ text = "a", other = 1 })).specs, 1)

res, req = call({ text = "hello", top = 2 })
local spec = req.specs[1]
check("published: runs with the default limits", { spec.timeout_ms, spec.memory_bytes, spec.instruction_limit, spec.tool },
  { 5000, 64 * 1048576, 100000000, "stats" })
check_has("published: code requires the skill", spec.code, 'require("skills.stats")')
check("published: arguments travel as context", jd(spec.context_json), { __mb_tool_args = { text = "hello", top = 2 } })
check("published: null result is empty content", res, { content = {} })

local strict = skill_tools.tool_entry(tools, { name = "strict", params = {},
  tool = { input_schema = { type = "object", properties = { a = { type = "number" } }, additionalProperties = false } } })
check("declared schema: unknown argument", text_of(strict.handler({ b = 1 }, H.request())), 'invalid arguments: unknown argument "b"')
check("declared schema: number accepts an integer", #(function() local q = H.request() strict.handler({ a = 1 }, q) return q.specs end)(), 1)

local function ran(value_json, extra)
  local result = { success = true, result_json = value_json, output = "" }
  for k, v in pairs(extra or {}) do result[k] = v end
  return (call({ text = "x" }, { result }))
end
check("published: string result is text", ran('"hi"'), { content = { { type = "text", text = "hi" } } })
check("published: object result is structured", ran('{"n":2}'),
  { content = { { type = "text", text = '{"n":2}' } }, structuredContent = { n = 2 } })
check("published: array result is text only", ran("[1,2]"), { content = { { type = "text", text = "[1,2]" } } })
check("published: content passes through", ran('{"content":[{"type":"text","text":"a"}],"isError":true}'),
  { content = { { type = "text", text = "a" } }, isError = true })
check("published: invalid content block", ran('{"content":[{"type":"text"}]}'),
  { content = { { type = "text", text = "the skill returned an invalid result: content block 1 (text) needs a string text" } }, isError = true })
check("published: image block needs mimeType", text_of(ran('{"type":"image","data":"AA=="}')),
  "the skill returned an invalid result: content block 1 (image) needs data (base64) and mimeType")
check("published: array of blocks", ran('[{"type":"text","text":"a"},{"type":"resource_link","uri":"u","name":"n"}]'),
  { content = { { type = "text", text = "a" }, { type = "resource_link", uri = "u", name = "n" } } })
check("published: worker-shaped result", ran(nil, { structured_json = m.json_raw('{"success":true,"result":"w"}') }),
  { content = { { type = "text", text = "w" } } })
res = call({ text = "x" }, { { success = false, error = "boom", output = "partial\n" } })
check("published: failure carries the output", { res.isError, text_of(res) }, { true, "boom\noutput:\npartial\n" })
check("published: busy", text_of(call({ text = "x" }, { nil, "server busy: queue full" })), "server busy: queue full")
check("published: cancelled answers nothing", call({ text = "x" }, { nil, nil }), nil)

local shaped = skill_tools.shape(arr({ 1, 2 }), true)
check("shape: array with an output schema is structured as result", shaped.structuredContent, { result = { 1, 2 } })

-- the provider caches entries per tenant and version
S.published_list = { default = { { name = "p", version = 1, params = {}, tool = {} } } }
local provider = tools.providers[1]
local a1 = provider("default")[1]
check("provider lists published skills", a1.definition.name, "p")
check("provider caches the entry", provider("default")[1] == a1, true)
S.published_list.default[1].version = 2
check("provider rebuilds a new version", provider("default")[1] ~= a1, true)
check("tools.find sees published skills", tools.find("p", "default").definition.name, "p")
check("built-in tools win a name clash", (function()
  S.published_list.default[2] = { name = "execute_code", version = 1, params = {}, tool = {} }
  local n = 0
  for _, t in ipairs(tools.all("default")) do if t.definition.name == "execute_code" then n = n + 1 end end
  S.published_list.default[2] = nil
  return n
end)(), 1)

---------------------------------------------------------------------------------------------
-- prompts and resources (skill_publish.lua)

tools.rpc_error = function(code, message) return { rpc = true, code = code, message = message } end
local get = tools.methods["prompts/get"]
local function rpc_of(fn, ...)
  local okc, e = pcall(fn, ...)
  if okc then return { ok = e } end
  return e
end

S.published_list = { default = {
  { name = "greet", description = "Say hello.", prompt = { title = "Greeting" }, version = 1,
    params = { { name = "who", type = "string", description = "whom", optional = false },
               { name = "tone", type = "string", description = "", optional = true } } },
  { name = "item", description = "One item.", resource = { uri = "test://items/{id}.json", mimeType = "application/json", template = true } },
  { name = "readme", description = "The readme.", resource = { uri = "test://readme", template = false } },
} }

check("prompts/list", tools.methods["prompts/list"]({}, H.request()), { prompts = {
  { name = "greet", title = "Greeting", description = "Say hello.", arguments = {
    { name = "who", description = "whom", required = true }, { name = "tone", required = false } } } } })

check("prompts/get name type", rpc_of(get, { name = 5 }, H.request()),
  { rpc = true, code = -32602, message = "prompts/get: params.name must be a string" })
local long = string.rep("n", 300)
local e = rpc_of(get, { name = long }, H.request())
check("prompts/get unknown prompt, name clipped", { e.code, e.message },
  { -32602, "Unknown prompt: " .. string.rep("n", 96) .. "...(300 bytes)" })
check("prompts/get arguments type", rpc_of(get, { name = "greet", arguments = "x" }, H.request()).message,
  "prompts/get: params.arguments must be an object")
check("prompts/get missing argument", rpc_of(get, { name = "greet", arguments = { tone = "dry" } }, H.request()).message,
  "prompts/get greet: argument who is required")
check("prompts/get null argument", rpc_of(get, { name = "greet", arguments = { who = NULL } }, H.request()).message,
  "prompts/get greet: argument who is required")

local function prompt(result_json, results)
  local q = H.request("default", results or { { success = true, result_json = result_json, output = "" } })
  return rpc_of(get, { name = "greet", arguments = { who = "Ann" } }, q), q
end
local got, q = prompt('"Hello Ann"')
check("prompt string is one user message", got.ok, { description = "Say hello.",
  messages = { { role = "user", content = { type = "text", text = "Hello Ann" } } } })
check("prompt runs the skill with the arguments", jd(q.specs[1].context_json), { __mb_tool_args = { who = "Ann" } })
check("prompt content block", prompt('{"type":"text","text":"x"}').ok.messages,
  { { role = "user", content = { type = "text", text = "x" } } })
check("prompt messages array", prompt('[{"role":"assistant","content":{"type":"text","text":"y"}}]').ok.messages,
  { { role = "assistant", content = { type = "text", text = "y" } } })
check("prompt {messages, description}", prompt('{"description":"own","messages":[]}').ok, { description = "own", messages = {} })
check("prompt bad message", prompt('[{"role":"user","content":{"type":"text","text":"a"}},{"role":"system","content":{}}]'),
  { rpc = true, code = -32603, message = "prompts/get greet: message 2 needs role (user or assistant) and a content block" })
check("prompt number", prompt("42").message,
  "prompts/get greet: a prompt skill must return a string, a content block, messages, or {messages = ...}")
check("prompt skill error", prompt(nil, { { success = false, error = "oops", output = "" } }).message, "prompts/get greet: oops")
check("prompt cancelled", prompt(nil, { nil, nil }), { ok = nil })

local provider_r = tools.resource_providers[1]
check("resources list (plain ones)", provider_r.list("default"),
  { { uri = "test://readme", name = "readme", title = "readme", description = "The readme." } })
check("resource templates", provider_r.templates("default"),
  { { uriTemplate = "test://items/{id}.json", name = "item", title = "item", description = "One item.", mimeType = "application/json" } })

local function read(uri, result_json)
  local q2 = H.request("default", { { success = true, result_json = result_json, output = "" } })
  return rpc_of(provider_r.read, uri, q2), q2
end
got, q = read("test://items/42.json", '"{}"')
check("template read", got.ok, { { uri = "test://items/42.json", mimeType = "application/json", text = "{}" } })
check("template placeholders are arguments", jd(q.specs[1].context_json).__mb_tool_args, { uri = "test://items/42.json", id = "42" })
check("template dot is literal", read("test://items/42xjson", '"x"').ok, nil)
check("template placeholder does not cross /", read("test://items/a/b.json", '"x"').ok, nil)
check("plain resource, text/plain by default", read("test://readme", '"# hi"').ok,
  { { uri = "test://readme", mimeType = "text/plain", text = "# hi" } })
check("resource blob", read("test://readme", '{"blob":"AAE=","mimeType":"image/png"}').ok,
  { { uri = "test://readme", mimeType = "image/png", blob = "AAE=" } })
check("resource several contents", read("test://readme", '[{"text":"a"},{"uri":"test://other","text":"b"}]').ok,
  { { uri = "test://readme", text = "a" }, { uri = "test://other", text = "b" } })
check("resource bad content", read("test://readme", '[{"text":"a"},{"n":1}]').message,
  "resources/read test://readme: content 2 needs text or blob")
check("resource bad value", read("test://readme", "7").message,
  "resources/read test://readme: a resource skill must return a string, {text=} or {blob=}, or an array of them")
check("unknown uri is not ours", read("test://nope", '"x"').ok, nil)

H.done()
