-- tests/lua/test_upstream_approval.lua - the approval question of allowWrites "ask"
-- (lua/mcp/upstream_approval.lua) with a scripted request: the question's shape, the arguments
-- as shown (re-encoded, PII policy applied, hidden characters escaped, cut at a character
-- boundary), how each answer is read, remembered approvals (per execution entry, per tool), two
-- calls waiting for one question, the execution ending meanwhile, capabilities, and the key of
-- a 2026-07-28 question. The PII policy is a stand-in here (it replaces e-mail addresses); the
-- real one, the clients and both protocol eras: tests/integration/approvals.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_upstream_approval.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_has = H.check, H.check_has

H.new_mb({ upstream_ask_args_bytes = 64 })
local ap = require("mcp.upstream_approval")
local outbound_calls = {}
ap.init({ pii = { outbound = function(tenant, text)
  outbound_calls[#outbound_calls + 1] = tenant
  return (text:gsub("[%w.]+@[%w.]+%.%a+", "[EMAIL_0123abcd]"))
end } })

-- A request whose questions are answered by the test: each question yields the coroutine that
-- asked; answer(i, result, err) resumes it.
local function new_request(opts)
  opts = opts or {}
  local r = { tenant = opts.tenant or "t1", modern = opts.modern or false, entry = opts.entry or {},
              sess = { client_capabilities = opts.caps or { elicitation = {} } }, asked = {} }
  function r:client_request(method, params, capability)
    local q = { method = method, params = params, capability = capability, co = coroutine.running() }
    self.asked[#self.asked + 1] = q
    return coroutine.yield()
  end
  function r:input_requests(list)
    local q = { list = list, co = coroutine.running(), modern = true }
    self.asked[#self.asked + 1] = q
    local result, err = coroutine.yield()
    if result == nil then return nil, err end
    return { [list[1].key] = result }
  end
  return r
end

-- Runs approval.ask in a coroutine; returns a table that gets .done, .ok, .why.
local function ask(req, server, tool, given)
  local out = {}
  local co = coroutine.create(function()
    out.ok, out.why = ap.ask(req, server or "mem", tool or "write", given or '{"a":1}')
    out.done = true
  end)
  assert(coroutine.resume(co))
  return out
end

local function answer(req, i, result, err)
  local ok, e = coroutine.resume(req.asked[i].co, result, err)
  assert(ok, e)
end

---------------------------------------------------------------------------------------------
-- the question

local req = new_request()
local q = ap.question(req, "memory", "create_entities", '{"entities":[{"name":"x","mail":"ann@example.com"}]}')
check_has("names the server", q.message, "\nserver: memory\n")
check_has("names the tool", q.message, "\ntool: create_entities (not marked read-only)\n")
check_has("names the policy", q.message, 'mcpServers.memory.allowWrites is "ask"')
check_has("arguments with PII tokenized", q.message, '"mail":"[EMAIL_0123abcd]"')
check("no e-mail address left", q.message:find("ann@example.com", 1, true), nil)
check("the PII policy of the request's tenant", outbound_calls[#outbound_calls], "t1")
check("schema: one optional boolean, default false", q.requestedSchema, {
  type = "object", properties = { remember = { type = "boolean", default = false,
    title = "Also allow every later call to create_entities in this run",
    description = "Calls to the tool create_entities of memory made by the same execution are not asked about again; "
      .. "the next execution asks again." } } })
check("no mode (form is the default; 2025-06-18 clients know no mode)", q.mode, nil)
check_has("names what runs the code", ap.question(new_request({ entry = { tool = "my_skill" } }), "m", "t", "{}").message,
  "Code run by my_skill makes this call")

check_has("a tool name's hidden characters are escaped too",
  ap.question(req, "memory", "read\u{202E}etirw", "{}").message, "tool: read\\u202eetirw (not marked")

-- arguments as shown
check("empty text is {}", ap.shown_arguments("t", ""), "{}")
check("a table is encoded", ap.shown_arguments("t", { a = "b" }), '{"a":"b"}')
check("text is re-encoded (spaces and escapes normalized)", ap.shown_arguments("t", '{ "a" :\t"\\u0041" }'), '{"a":"A"}')
check("not JSON", ap.shown_arguments("t", '{"a":'), "(arguments that are not valid JSON)")
check("a line break stays escaped", ap.shown_arguments("t", '{"a":"x\\ny"}'), '{"a":"x\\ny"}')
check("bidi override and zero-width space escaped", ap.shown_arguments("t", { a = "\u{202E}x\u{200B}" }), '{"a":"\\u202ex\\u200b"}')
check("isolates, ALM, BOM escaped", ap.shown_arguments("t", { a = "\u{2066}\u{2069}\u{61C}\u{FEFF}" }),
  '{"a":"\\u2066\\u2069\\u061c\\ufeff"}')
check("line and paragraph separators and NEL escaped (they start a line where rendered)",
  ap.shown_arguments("t", { a = "x\u{2028}server: evil\u{2029}y\u{85}z" }), '{"a":"x\\u2028server: evil\\u2029y\\u0085z"}')
check("word joiner, invisible operators and soft hyphen escaped (zero-width too)",
  ap.shown_arguments("t", { a = "/safe\u{2060}\u{2064}x\u{AD}y" }), '{"a":"/safe\\u2060\\u2064x\\u00ady"}')
check("a tool name cannot start a line of the question with U+2028",
  ap.question(req, "memory", "read\u{2028}arguments: {}", "{}").message:find("\u{2028}", 1, true), nil)
check("ordinary punctuation kept (en dash, quotes)", ap.shown_arguments("t", { a = "a\u{2013}b \u{201C}c\u{201D}" }),
  '{"a":"a\u{2013}b \u{201C}c\u{201D}"}')
local long = ap.shown_arguments("t", { a = string.rep("\u{00E9}", 100) })
check("cut at upstream_ask_args_bytes, at a character boundary, saying so", long,
  '{"a":"' .. string.rep("\u{00E9}", 29) .. ' ... [cut: 208 bytes in all, upstream_ask_args_bytes=64]')
check("the cut text is valid UTF-8", utf8.len(long) ~= nil, true)

---------------------------------------------------------------------------------------------
-- answers

local function one(result, err, opts)
  local r = new_request(opts)
  local out = ask(r)
  check("asked once", #r.asked, 1)
  answer(r, 1, result, err)
  return out, r
end

local POLICY = 'mcpServers.mem.allowWrites is "ask"'
local out = one({ action = "accept" })
check("accept", { out.done, out.ok, out.why }, { true, true, nil })
out = one({ action = "decline" })
check("decline", { out.ok, out.why }, { nil, "the person declined the call (" .. POLICY .. "); it was not made" })
out = one({ action = "cancel" })
check("cancel", { out.ok, out.why }, { nil, "the person dismissed the approval question without answering (cancel; "
  .. POLICY .. "); the call was not made" })
for _, bad in ipairs({ "accept", 1, true, H.arr({ { action = "accept" } }), {}, { action = 1 }, { action = { "accept" } }, mb.null }) do
  out = one(bad)
  check("not a result: " .. H.show(bad), out.why, "the client's answer to the approval question is not an elicitation "
    .. "result (no action); the call was not made")
end
out = one({ action = "Accept" })
check("unknown action", out.why, 'the client\'s answer to the approval question has an unknown action "Accept"; the call was not made')
out = one({ action = "a\n\0" .. string.rep("\u{00E9}", 30) })
check("unknown action: control characters replaced, cut at a character boundary", out.why,
  'the client\'s answer to the approval question has an unknown action "a??' .. string.rep("\u{00E9}", 18)
  .. '"; the call was not made')
out = one(nil, { code = -1, message = "closed" })
check("an error", out.why, "the approval question got no answer (closed); the call was not made")
out = one(nil, { code = -1 })
check("an error without a message", out.why,
  "the approval question got no answer (the client answered with an error without a message); the call was not made")

---------------------------------------------------------------------------------------------
-- remembering

local entry = {}
local r1 = new_request({ entry = entry })
out = ask(r1)
answer(r1, 1, { action = "accept", content = { remember = true } })
check("remember: accepted", out.ok, true)
out = ask(r1)
check("remember: the next call is not asked about", { out.done, out.ok, #r1.asked }, { true, true, 1 })
out = ask(r1, "mem", "other")
check("remember: another tool is asked about", { out.done, #r1.asked }, { nil, 2 })
answer(r1, 2, { action = "decline" })
out = ask(r1, "mem2", "write")
check("remember: the same tool of another server is asked about", { out.done, #r1.asked }, { nil, 3 })
answer(r1, 3, { action = "accept" })
local r2 = new_request()
out = ask(r2)
check("remember: another execution (entry) is asked", { out.done, #r2.asked }, { nil, 1 })
answer(r2, 1, { action = "accept" })

for _, content in ipairs({ { remember = "true" }, { remember = 1 }, "remember", { Remember = true }, H.arr({ true }) }) do
  local r = new_request()
  out = ask(r)
  answer(r, 1, { action = "accept", content = content })
  out = ask(r)
  check("not remembered: " .. H.show(content), { out.done, #r.asked }, { nil, 2 })
  answer(r, 2, { action = "accept" })
end

-- two calls to the same tool at once (mcp.parallel): one question
local rp = new_request()
local a1, a2 = ask(rp), ask(rp)
check("parallel: one question while the first is open", #rp.asked, 1)
answer(rp, 1, { action = "accept", content = { remember = true } })
check("parallel: remember lets both go", { a1.ok, a2.done, a2.ok, #rp.asked }, { true, true, true, 1 })
rp = new_request()
a1, a2 = ask(rp), ask(rp)
answer(rp, 1, { action = "accept" })
check("parallel: accept once lets the first go; the second asks its own question", { a1.ok, a2.done, #rp.asked }, { true, nil, 2 })
answer(rp, 2, { action = "decline" })
check("parallel: the second declined", { a2.done, a2.ok ~= true }, { true, true })
rp = new_request()
a1, a2 = ask(rp), ask(rp)
answer(rp, 1, nil, { message = "the execution ended" })
check("parallel: a failed question fails the waiting call too, without a new question",
  { a1.why, a2.why, #rp.asked }, { "the approval question got no answer (the execution ended); the call was not made",
    "the approval question got no answer (the execution ended); the call was not made", 1 })

-- the execution ended while the person was asked: an accept does not let the call go
local re = new_request()
out = ask(re)
re.entry.ended = true
answer(re, 1, { action = "accept", content = { remember = true } })
check("ended meanwhile", { out.ok, out.why }, { nil, "the execution has ended" })
out = ask(re)
check("ended: nothing asked any more", { out.why, #re.asked }, { "the execution has ended", 1 })

---------------------------------------------------------------------------------------------
-- capabilities and eras

for _, c in ipairs({ { {}, false }, { { sampling = {} }, false }, { { elicitation = mb.null }, false },
                     { { elicitation = { url = {} } }, false }, { { elicitation = {} }, true },
                     { { elicitation = { form = {} } }, true }, { { elicitation = { form = {}, url = {} } }, true } }) do
  local r = new_request({ caps = c[1] })
  out = ask(r)
  check("capabilities " .. H.show(c[1]), #r.asked == 1, c[2])
  if c[2] then
    answer(r, 1, { action = "accept" })
  else
    check_has("refusal names the policy", out.why, 'mcpServers.mem.allowWrites is "ask"')
    check_has("refusal names the capability", out.why, "did not declare the elicitation capability (form mode)")
  end
end

local rm = new_request({ modern = true })
out = ask(rm)
check("2026-07-28: one input request", #rm.asked[1].list, 1)
local q1 = rm.asked[1].list[1]
check("2026-07-28: an elicitation", { q1.method, q1.capability }, { "elicitation/create", "elicitation" })
check("2026-07-28: a key nobody can guess", q1.key:match("^moonbox%-approval%-%d+%-%x%x%x%x%x%x%x%x$") ~= nil, true)
answer(rm, 1, { action = "accept" })
check("2026-07-28: accepted", out.ok, true)
out = ask(rm)
check("2026-07-28: keys differ per question", rm.asked[2].list[1].key ~= q1.key, true)
answer(rm, 2, nil, { message = "the client did not answer within mrtr_hold_ms=1000" })
check("2026-07-28: the hold's limit fails the call", out.why,
  "the approval question got no answer (the client did not answer within mrtr_hold_ms=1000); the call was not made")

H.done()
