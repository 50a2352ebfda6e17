-- tests/lua/test_savings.lua - context saved (lua/mcp/savings.lua) as execute_code and
-- get_execution_stats use it: the result's _meta is the worker's raw JSON, the counts are summed
-- per tenant (a tenant sees its own), /metrics sums all tenants without a label. The counts
-- themselves are made in C (src/tokest.c, tests/unit/test_tokest.c); end to end:
-- tests/integration/savings.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_savings.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check = H.check

H.new_mb()
local tools = H.load_tools()
local exec = tools.by_name.execute_code.handler

local META = '{"dev.moonbox/context":{"bytes_in":1000,"tokens_in":300,"bytes_out":100,"tokens_out":30,"tokens_saved":270}}'

-- an execution that took in `io_in` and returned 100 bytes (30 tokens)
local function run(tenant, io_in, saved)
  local res = { success = true, result_json = "1", output = "", execution_time_ms = 1,
                instructions = 0, memory_peak_bytes = 1, io_meta = mb.json_raw(META),
                bytes_out = 100, tokens_out = 30, io_in = io_in, tokens_saved = saved }
  return exec({ code = "return 1" }, H.request(tenant, { res }))
end

local r = run("alice", { upstream = { bytes = 900, tokens = 280 }, context_vars = { bytes = 100, tokens = 20 } }, 250)
check("the result's _meta is the worker's JSON, untouched", r._meta and r._meta.text, META)
run("alice", nil, nil)
run("bob", { workspace = { bytes = 50, tokens = 12 } }, 0)

-- the journal's id of the execution (server.lua sets it from history.add) goes in front of the
-- worker's _meta, which stays JSON; without the worker's part it is a table of its own
local shaped = tools.shaped_result({ success = true, structured_json = mb.json_raw("{}"),
  structured_quoted = mb.json_raw('"{}"'), io_meta = mb.json_raw(META), execution_id = "0123456789abcdef" })
check("the execution id leads the _meta", shaped._meta.text,
  '{"dev.moonbox/execution_id":"0123456789abcdef",' .. META:sub(2))
check("... which stays one JSON object", H.json_decode(shaped._meta.text)["dev.moonbox/execution_id"],
  "0123456789abcdef")
shaped = tools.shaped_result({ success = true, structured_json = mb.json_raw("{}"),
  structured_quoted = mb.json_raw('"{}"'), execution_id = "fedcba9876543210" })
check("an id without the counts", shaped._meta, { ["dev.moonbox/execution_id"] = "fedcba9876543210" })
shaped = tools.shaped_result({ success = true, structured_json = mb.json_raw("{}"),
  structured_quoted = mb.json_raw('"{}"'), io_meta = mb.json_raw(META) })
check("no id (history off): the worker's _meta as it was", shaped._meta.text, META)

-- the section get_execution_stats shows the tenant (its other sections need a store)
local function ctx(tenant) return tools.stats_providers.context(tenant) end
local a = ctx("alice")
check("alice's sums", { a.bytes_in, a.tokens_in, a.bytes_out, a.tokens_out, a.tokens_saved },
  { 1000, 300, 200, 60, 250 })
check("alice's sources", a.by_source, { upstream = { bytes = 900, tokens = 280 }, context_vars = { bytes = 100, tokens = 20 } })
local b = ctx("bob")
check("bob sees his own only", { b.bytes_in, b.bytes_out, b.by_source.upstream, b.by_source.workspace.bytes },
  { 50, 100, nil, 50 })
local d = ctx("default")
check("a tenant with no executions", { d.bytes_out, d.bytes_in, next(d.by_source) }, { 0, 0, nil })

-- a refused submit and a result without counts (memory ran out shaping it) are not counted
exec({ code = "return 1" }, H.request("bob", { nil, "server busy: queue full", { success = false, error_type = "busy" } }))
check("a refusal is not counted", ctx("bob").bytes_out, 100)

local m = tools.savings.metrics_text()
local function metric(pat) return tonumber(m:match(pat)) end
check("/metrics: all tenants, by source", {
  metric('moonbox_context_in_bytes_total{source="upstream"} (%d+)'),
  metric('moonbox_context_in_bytes_total{source="workspace"} (%d+)'),
  metric('moonbox_context_in_tokens_total{source="context_vars"} (%d+)'),
  metric('moonbox_context_in_bytes_total{source="catalog"} (%d+)'),
  metric("\nmoonbox_context_out_bytes_total (%d+)"),
  metric("\nmoonbox_context_out_tokens_total (%d+)"),
  metric("\nmoonbox_context_saved_tokens_total (%d+)"),
}, { 900, 50, 20, 0, 300, 90, 250 })
check("/metrics: no tenant label", { m:find("alice", 1, true), m:find("bob", 1, true) }, {})

H.done()
