-- tests/lua/test_tools.lua - the tool registry (lua/mcp/tools.lua): execute_code's argument
-- checks (unknown arguments, types, limits, the timeout_seconds alias) and how it shapes what the
-- engine returns, get_execution_stats and its per-tenant counters, check_args, and the execution
-- log (lua/mcp/history.lua). Executions are scripted: the request's execute() records the spec it
-- would submit (tests/lua/harness.lua). End to end: tests/integration/sdk.test.mjs, raw.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_tools.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_has = H.check, H.check_has
local arr, NULL = H.arr, H.NULL

local m = H.new_mb()
local tools = H.load_tools()
local exec = tools.by_name.execute_code.handler

local function text_of(r) return r and r.content and r.content[1] and r.content[1].text end

-- Runs execute_code with args; returns the tool result, and the spec it submitted (or nil).
local function run(args, results, tenant)
  local req = H.request(tenant, results)
  local r = exec(args, req)
  return r, req.specs[1]
end

-- The error text of a refused call (and checks that nothing was submitted).
local function refused(args)
  local r, spec = run(args)
  if spec then return "submitted: " .. H.show(spec) end
  if not (r and r.isError) then return "not an error: " .. H.show(r) end
  return text_of(r)
end

---------------------------------------------------------------------------------------------
-- the definition follows the configuration

local def = tools.by_name.execute_code.definition
check_has("description names the limits", def.description,
  "timeout_ms (default 5000, max 60000), memory_mb (default 64, max 512), instruction_limit (default 100000000, max 10000000000)")
check_has("description mentions the PII policy when on", def.description, "personal data in what you return is replaced by tokens")
check("schema maxima", { def.inputSchema.properties.timeout_ms.maximum, def.inputSchema.properties.memory_mb.maximum,
  def.inputSchema.properties.timeout_seconds.maximum }, { 60000, 512, 60 })
check("schema: code or rerun_id, neither required by the schema", { def.inputSchema.required,
  def.inputSchema.properties.rerun_id.type }, { nil, "string" })
check("output error types", def.outputSchema.properties.error_type.enum,
  { "syntax", "runtime", "timeout", "memory", "instructions", "cancelled", "result", "busy" })
check("built-in tools first", { tools.list[1].definition.name, tools.list[2].definition.name },
  { "execute_code", "get_execution_stats" })

---------------------------------------------------------------------------------------------
-- execute_code: arguments

local _, spec = run({ code = "return 1" })
check("defaults", spec, { code = "return 1", timeout_ms = 5000, memory_bytes = 64 * 1048576, instruction_limit = 100000000,
                        tenant = "default" })
check("defaults are integers", { math.type(spec.timeout_ms), math.type(spec.memory_bytes), math.type(spec.instruction_limit) },
  { "integer", "integer", "integer" })

check("unknown argument", refused({ code = "x", timeout = 5 }),
  'invalid arguments: unknown argument "timeout" (expected code, context_vars, timeout_ms or timeout_seconds, memory_mb, instruction_limit, rerun_id)')
check("unknown argument name is clipped", refused({ code = "x", [string.rep("k", 200)] = 1 }),
  'invalid arguments: unknown argument "' .. string.rep("k", 96) .. '...(200 bytes)" (expected code, context_vars, '
  .. "timeout_ms or timeout_seconds, memory_mb, instruction_limit, rerun_id)")
check("unknown argument checked before code", refused({ extra = true }):match("unknown argument") ~= nil, true)
check("code missing", refused({}), "invalid arguments: code is required (a string of Lua source), "
  .. "or rerun_id (an execution id from list_executions)")
check("code and rerun_id", refused({ code = "x", rerun_id = "0123456789abcdef" }),
  "invalid arguments: give code or rerun_id, not both")
check("rerun_id malformed", refused({ rerun_id = "1; DROP TABLE executions" }),
  'invalid arguments: rerun_id must be an execution id from list_executions (16 hex digits), got "1; DROP TABLE executions"')
check("rerun_id not a string", refused({ rerun_id = 5 }),
  "invalid arguments: rerun_id must be an execution id from list_executions (16 hex digits), got number")
check("code null", refused({ code = NULL }), "invalid arguments: code must be a string, got null")
check("code number", refused({ code = 5 }), "invalid arguments: code must be a string, got number")
check("code object", refused({ code = { "return 1" } }), "invalid arguments: code must be a string, got table")
check("code empty is allowed", select(2, run({ code = "" })).code, "")

check("context_vars array", refused({ code = "x", context_vars = arr({ 1 }) }), "invalid arguments: context_vars must be an object")
check("context_vars empty array", refused({ code = "x", context_vars = arr({}) }), "invalid arguments: context_vars must be an object")
check("context_vars string", refused({ code = "x", context_vars = "a=1" }), "invalid arguments: context_vars must be an object")
check("context_vars null is none", select(2, run({ code = "x", context_vars = NULL })).context_json, nil)
check("context_vars encoded", H.json_decode(select(2, run({ code = "x", context_vars = { a = 1, b = { "s" } } })).context_json),
  { a = 1, b = { "s" } })
check("context_vars empty object", select(2, run({ code = "x", context_vars = {} })).context_json, "{}")

check("timeout_ms string", refused({ code = "x", timeout_ms = "100" }), "invalid arguments: timeout_ms must be an integer")
check("timeout_ms fraction", refused({ code = "x", timeout_ms = 1.5 }), "invalid arguments: timeout_ms must be an integer")
check("timeout_ms zero", refused({ code = "x", timeout_ms = 0 }), "invalid arguments: timeout_ms must be at least 1")
check("timeout_ms negative", refused({ code = "x", timeout_ms = -3 }), "invalid arguments: timeout_ms must be at least 1")
check("timeout_ms above max", refused({ code = "x", timeout_ms = 60001 }),
  "invalid arguments: timeout_ms=60001 exceeds the maximum max_timeout_ms=60000; ask for at most that, or have the server started with a higher max_timeout_ms (--max-timeout-ms, MOONBOX_MAX_TIMEOUT_MS or config.json)")
check("timeout_ms beyond 64 bits", refused({ code = "x", timeout_ms = 1e300 }),
  "invalid arguments: timeout_ms=1e+300 exceeds the maximum max_timeout_ms=60000; ask for at most that, or have the server started with a higher max_timeout_ms (--max-timeout-ms, MOONBOX_MAX_TIMEOUT_MS or config.json)")
check("timeout_ms hugely negative is below 1, not above the maximum", refused({ code = "x", timeout_ms = -1e300 }),
  "invalid arguments: timeout_ms must be at least 1")
check("timeout_ms integral float", select(2, run({ code = "x", timeout_ms = 250.0 })).timeout_ms, 250)
check("timeout_ms integral float becomes an integer", math.type(select(2, run({ code = "x", timeout_ms = 250.0 })).timeout_ms), "integer")
check("timeout_ms at max", select(2, run({ code = "x", timeout_ms = 60000 })).timeout_ms, 60000)
check("timeout_ms null is the default", select(2, run({ code = "x", timeout_ms = NULL })).timeout_ms, 5000)

check("timeout_seconds", select(2, run({ code = "x", timeout_seconds = 2.5 })).timeout_ms, 2500)
check("timeout_seconds rounds up", select(2, run({ code = "x", timeout_seconds = 0.0001 })).timeout_ms, 1)
check("timeout_seconds integer", math.type(select(2, run({ code = "x", timeout_seconds = 3 })).timeout_ms), "integer")
check("timeout_seconds at max", select(2, run({ code = "x", timeout_seconds = 60 })).timeout_ms, 60000)
check("timeout_seconds above max", refused({ code = "x", timeout_seconds = 60.001 }),
  "invalid arguments: timeout_seconds=60.001 exceeds the maximum max_timeout_ms=60000 (60 s); ask for at most that, or have the server started with a higher max_timeout_ms (--max-timeout-ms, MOONBOX_MAX_TIMEOUT_MS or config.json)")
check("timeout_seconds zero", refused({ code = "x", timeout_seconds = 0 }),
  "invalid arguments: timeout_seconds must be a positive number of seconds")
check("timeout_seconds negative", refused({ code = "x", timeout_seconds = -1 }),
  "invalid arguments: timeout_seconds must be a positive number of seconds")
check("timeout_seconds string", refused({ code = "x", timeout_seconds = "5" }),
  "invalid arguments: timeout_seconds must be a positive number of seconds")
check("timeout_seconds and timeout_ms", refused({ code = "x", timeout_seconds = 1, timeout_ms = 1000 }),
  "invalid arguments: give timeout_ms or timeout_seconds, not both")
check("timeout_seconds with timeout_ms null", select(2, run({ code = "x", timeout_seconds = 1, timeout_ms = NULL })).timeout_ms, 1000)
check("timeout_seconds null, timeout_ms given", select(2, run({ code = "x", timeout_seconds = NULL, timeout_ms = 7 })).timeout_ms, 7)

check("memory_mb", select(2, run({ code = "x", memory_mb = 1 })).memory_bytes, 1048576)
check("memory_mb above max", refused({ code = "x", memory_mb = 513 }),
  "invalid arguments: memory_mb=513 exceeds the maximum max_memory_mb=512; ask for at most that, or have the server started with a higher max_memory_mb (--max-memory-mb, MOONBOX_MAX_MEMORY_MB or config.json)")
check("memory_mb zero", refused({ code = "x", memory_mb = 0 }), "invalid arguments: memory_mb must be at least 1")
check("memory_mb boolean", refused({ code = "x", memory_mb = true }), "invalid arguments: memory_mb must be an integer")
check("instruction_limit", select(2, run({ code = "x", instruction_limit = 1000 })).instruction_limit, 1000)
check("instruction_limit above max", refused({ code = "x", instruction_limit = 10000000001 }),
  "invalid arguments: instruction_limit=10000000001 exceeds the maximum max_instruction_limit=10000000000; ask for at most that, or have the server started with a higher max_instruction_limit (--max-instruction-limit, MOONBOX_MAX_INSTRUCTION_LIMIT or config.json)")
check("instruction_limit 2^63 as a float", refused({ code = "x", instruction_limit = 2.0 ^ 63 }),
  "invalid arguments: instruction_limit=9.22337e+18 exceeds the maximum max_instruction_limit=10000000000; ask for at most that, or have the server started with a higher max_instruction_limit (--max-instruction-limit, MOONBOX_MAX_INSTRUCTION_LIMIT or config.json)")
check("limits are checked in order", refused({ code = "x", timeout_ms = 0, memory_mb = 0 }),
  "invalid arguments: timeout_ms must be at least 1")

---------------------------------------------------------------------------------------------
-- execute_code: results

-- the worker's shape (H.shaped stands in for mb_exec_result_shape) is spliced as it came
local worker = H.shaped({ success = true, result_json = '{"a":[1,2]}', output = "hi\n",
  execution_time_ms = 1.5, instructions = 42, memory_peak_bytes = 2048 })
local r = run({ code = "return 1" }, { worker })
check("success: the worker's texts are spliced, not decoded", r, { content = { { type = "text",
  text = worker.structured_quoted } }, structuredContent = worker.structured_json, isError = false })
check("text block is the same JSON", H.json_decode(H.json_decode(m.json_raw_text(worker.structured_quoted))),
  { success = true, result = { a = { 1, 2 } }, output = "hi\n", execution_time_ms = 1.5, instructions = 42,
    memory_peak_bytes = 2048 })
r = run({ code = "error()" }, { { success = false, error = "boom", traceback = "tb" } })
check("failure is isError", { r.isError, H.json_decode(m.json_raw_text(r.structuredContent)).error }, { true, "boom" })
r = run({ code = "x" }, { { success = false, error_type = "memory" } })
check("failure type", H.json_decode(m.json_raw_text(r.structuredContent)).error_type, "memory")
-- no shape (memory ran out shaping it; false keeps H.shaped off): a plain tool error
r = run({ code = "x" }, { { success = true, structured_json = false } })
check("unshaped result", r, { content = { { type = "text",
  text = "out of memory: the execution's result could not be built" } }, isError = true })

-- a refused submit: the host shaped the refusal (error_type busy); without it, the message
local busy = H.shaped({ success = false, error = "server busy: 256 executions queued", error_type = "busy" })
r = run({ code = "x" }, { nil, "server busy: 256 executions queued", busy })
check("busy", { r.isError, r.structuredContent, H.json_decode(m.json_raw_text(r.structuredContent)).error_type },
  { true, busy.structured_json, "busy" })
r = run({ code = "x" }, { nil, "no execution pool" })
check("busy without a shape", { r.isError, text_of(r) }, { true, "no execution pool" })
check("cancelled: no response", run({ code = "x" }, { nil, nil }), nil)

---------------------------------------------------------------------------------------------
-- get_execution_stats

-- the providers that read the store: scripted
m.db.row = function(sql, tenant)
  if sql:find("FROM executions") then return { n = 3, since = 5 } end
  if sql:find("FROM pii_vault") then return { n = tenant == "t1" and 1 or 0 } end
end
m.db.query = function(sql) return { { outcome = "ok", n = 2 }, { outcome = "timeout", n = 1 } } end

local stats = tools.by_name.get_execution_stats.handler
check("stats takes no arguments", text_of(stats({ x = 1 }, H.request())), "invalid arguments: get_execution_stats takes no arguments")

-- fresh counters: a new registry
m = H.new_mb()
tools = H.load_tools()
exec, stats = tools.by_name.execute_code.handler, tools.by_name.get_execution_stats.handler
m.db.row = function(sql, tenant)
  if sql:find("FROM executions") then return { n = 3, since = 5 } end
  return { n = tenant == "t1" and 1 or 0 }
end
m.db.query = function() return { { outcome = "ok", n = 2 }, { outcome = "timeout", n = 1 } } end
tools.server_stats_providers.shared = function() return { x = 1 } end

for i = 1, 10 do
  run({ code = "x" }, { { success = i <= 8, error_type = i == 9 and "timeout" or nil, execution_time_ms = i } })
end
run({ code = "x" }, { nil, "busy" })
run({ code = "x" }, { { success = true, execution_time_ms = 100 } }, "t1")
for i = 1, 20 do tools.record_request(i, "default") end

local sc = stats({}, H.request()).structuredContent
check("stats counts", { sc.executions, sc.succeeded, sc.failed, sc.failed_by_type },
  { 11, 8, 3, { timeout = 1, runtime = 1, busy = 1 } })
check("stats execution percentiles", sc.execution_ms, { mean = 55 / 11, p50 = 5, p95 = 10, max = 10 })
check("stats request percentiles", sc.request_ms, { p50 = 10, p95 = 19, max = 20 })
check("stats limits", { sc.limits.max_timeout_ms, sc.limits.default_memory_mb, sc.limits.workers }, { 60000, 64, 2 })
check("stats history section", sc.history, { recorded = 3, since_ms = 5, by_outcome = { ok = 2, timeout = 1 },
  max_rows = 100000, tenant_max_rows = 1000, max_age_s = 2592000, dropped = 0, write_failures = 0 })
check("stats pii section", sc.pii, { policy = true, restore = true, vault_tokens = 0 })
check("stats default tenant sees the pool and shared sections", { sc.pool ~= nil, sc.shared }, { true, { x = 1 } })
check("stats version", sc.version, "0.0.0-test")

sc = stats({}, H.request("t1")).structuredContent
check("stats of another tenant are its own", { sc.executions, sc.succeeded, sc.execution_ms.max, sc.request_ms.max },
  { 1, 1, 100, 0 })
check("another tenant does not see the pool or shared sections", { sc.pool, sc.shared }, { nil, nil })
check("another tenant's pii section", sc.pii.vault_tokens, 1)

for i = 1, 1000 do tools.record_request(100, "t2") end
for i = 1, 1000 do tools.record_request(1, "t2") end
sc = stats({}, H.request("t2")).structuredContent
check("request times: percentiles of the last 1000, max of all", sc.request_ms, { p50 = 1, p95 = 1, max = 100 })
sc = stats({}, H.request("t3")).structuredContent
check("empty stats", { sc.executions, sc.execution_ms, sc.request_ms }, { 0, { mean = 0, p50 = 0, p95 = 0, max = 0 }, { p50 = 0, p95 = 0, max = 0 } })

---------------------------------------------------------------------------------------------
-- check_args, find, all

check("check_args ok", tools.check_args({ a = 1 }, { a = true, b = true }, "t"), nil)
check("check_args message", tools.check_args({ c = 1 }, { b = true, a = true }, "t"),
  'invalid arguments: t has no argument "c" (expected a, b)')
check("check_args none allowed", tools.check_args({ c = 1 }, {}, "t"), 'invalid arguments: t has no argument "c" (expected )')
tools.providers[#tools.providers + 1] = function(tenant)
  return { { definition = { name = "dyn_" .. tenant } } }
end
check("find a provider's tool for its tenant", tools.find("dyn_t1", "t1").definition.name, "dyn_t1")
check("find nothing for another tenant", tools.find("dyn_t1", "t2"), nil)
check("all: built-ins then providers", tools.all("t9")[#tools.all("t9")].definition.name, "dyn_t9")

---------------------------------------------------------------------------------------------
-- history

local history = require("mcp.history")
history.add(nil, 123, {}, { success = true, execution_time_ms = 2.5, instructions = 7, memory_peak_bytes = 9, code_hash = "h" })
history.add("t1", 124, { tool = "stats" }, { success = false, error_type = "memory" })
history.add("t1", 125, {}, { success = false })
check("history row of a success", m.history[#m.history - 2],
  { n = 18, "default", 123, 2.5, "ok", 7, 9, "h", "execute_code", nil, 0 })
check("history row of a failure", m.history[#m.history - 1],
  { n = 18, "t1", 124, 0, "memory", 0, 0, nil, "stats", nil, 0 })
check("history failure without a type is runtime", m.history[#m.history][4], "runtime")
history.add("t2", 126, { code = "return x", context_json = '{"x":12}', rerun_of = "00000000000000aa" },
  { success = false, error_type = "runtime", result_head = "[1,2", result_bytes = 900, output_head = "hi",
    error_head = "boom" }, { "srv.a", "srv.b", srv = true })
check("journal fields of a row", m.history[#m.history],
  { n = 18, "t2", 126, 0, "runtime", 0, 0, nil, "execute_code", "return x", 8, "[1,2", 900, "hi", nil, "boom",
    "srv.a\nsrv.b", "00000000000000aa" })
local many = {}
for i = 1, 200 do many[i] = string.format("server%03d.tool", i) end
history.add("t2", 127, {}, { success = true }, many)
check("tools called are cut at journal_head_bytes", #m.history[#m.history][16] <= m.config.journal_head_bytes
  and m.history[#m.history][16]:sub(1, 15), "server001.tool\n")
local flushed = 0
m.history_flush = function() flushed = flushed + 1 return 4, 1 end
m.db.row = function() return nil end
m.db.query = function() return {} end
check("history summary of an empty log", history.summary("t5"),
  { recorded = 0, by_outcome = {}, max_rows = 100000, tenant_max_rows = 1000, max_age_s = 2592000, dropped = 4,
    write_failures = 1 })
check("summary flushes first", flushed, 1)

-- execute_code adds no history itself (the server does, after the wait): a refused call adds none
local before = #m.history
run({ code = 5 })
check("refused call adds no history", #m.history, before)

---------------------------------------------------------------------------------------------
-- the policy text follows pii_policy

m = H.new_mb({ pii_policy = 0 })
tools = H.load_tools()
check("description without the PII policy", tools.by_name.execute_code.definition.description:find("replaced by tokens", 1, true), nil)

H.done()
