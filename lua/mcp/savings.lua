-- mcp/savings.lua - context saved: what sandbox code took in and what went back to the model.
--
-- The worker counts the bytes every execution takes in, per source, where they arrive (host-call
-- replies, workspace reads, context_vars), estimates their tokens (src/tokest.c), and does the
-- same for the result it returns; mb_exec_result_shape writes the result's _meta value from them
-- and the host hands the counts over with the result (src/host.c, push_io). Here they are summed
-- per tenant (get_execution_stats shows a tenant its own sums) and for the whole server
-- (/metrics, without a tenant label: every tenant's token may read /metrics). docs/sandbox.md
-- ("Context saved") says what is counted and how good the estimate is.

local mb = mb

local M = {}

-- The key of the result's _meta (MCP: a prefix in reverse-DNS form, not one MCP reserves).
M.KEY = "dev.moonbox/context"

-- the sources in the order src/tokest.h declares them
local SOURCES = { "upstream", "workspace", "context_vars", "skills", "catalog", "client" }

local function new_sums()
  local s = { executions = 0, bytes_in = 0, tokens_in = 0, bytes_out = 0, tokens_out = 0,
              tokens_saved = 0, by_source = {} }
  for _, name in ipairs(SOURCES) do s.by_source[name] = { bytes = 0, tokens = 0 } end
  return s
end

local by_tenant = {}   -- tenant -> sums (tenants come from the configured tokens: few)
local server = new_sums()

local function add(s, res)
  s.executions = s.executions + 1
  s.bytes_out = s.bytes_out + res.bytes_out
  s.tokens_out = s.tokens_out + res.tokens_out
  local io_in = res.io_in
  if not io_in then return end -- nothing came in (most executions)
  s.tokens_saved = s.tokens_saved + (res.tokens_saved or 0)
  for name, v in pairs(io_in) do
    local b = s.by_source[name]
    if b then
      b.bytes = b.bytes + v.bytes
      b.tokens = b.tokens + v.tokens
      s.bytes_in = s.bytes_in + v.bytes
      s.tokens_in = s.tokens_in + v.tokens
    end
  end
end

-- Counts one execution's result (a table from mb.wait) for its tenant and the server. Results
-- made without the counts (memory ran out shaping them, refusals) are left out.
function M.add(tenant, res)
  if not (res and res.bytes_out) then return end
  tenant = tenant or "default"
  local s = by_tenant[tenant]
  if not s then
    s = new_sums()
    by_tenant[tenant] = s
  end
  add(s, res)
  add(server, res)
end

-- The result's _meta, or nil when the result has no counts.
function M.meta(res)
  if res.io_meta then return { [M.KEY] = res.io_meta } end
end

-- get_execution_stats' section for one tenant.
function M.stats(tenant)
  local s = by_tenant[tenant or "default"] or new_sums()
  local by_source = {}
  for _, name in ipairs(SOURCES) do
    local b = s.by_source[name]
    if b.bytes > 0 then by_source[name] = { bytes = b.bytes, tokens = b.tokens } end
  end
  return {
    executions = s.executions, bytes_in = s.bytes_in, tokens_in = s.tokens_in,
    bytes_out = s.bytes_out, tokens_out = s.tokens_out, tokens_saved = s.tokens_saved,
    by_source = by_source,
    tokens = "estimated (docs/sandbox.md, \"Context saved\")",
  }
end

-- Prometheus text for /metrics: the server's sums.
function M.metrics_text()
  local lines = {
    "# HELP moonbox_context_in_bytes_total Bytes sandbox code took in, by source.",
    "# TYPE moonbox_context_in_bytes_total counter",
  }
  for _, name in ipairs(SOURCES) do
    lines[#lines + 1] = string.format('moonbox_context_in_bytes_total{source="%s"} %d', name,
      server.by_source[name].bytes)
  end
  lines[#lines + 1] = "# HELP moonbox_context_in_tokens_total Estimated tokens of what sandbox code took in, by source."
  lines[#lines + 1] = "# TYPE moonbox_context_in_tokens_total counter"
  for _, name in ipairs(SOURCES) do
    lines[#lines + 1] = string.format('moonbox_context_in_tokens_total{source="%s"} %d', name,
      server.by_source[name].tokens)
  end
  local function one(name, help, v)
    lines[#lines + 1] = "# HELP " .. name .. " " .. help
    lines[#lines + 1] = "# TYPE " .. name .. " counter"
    lines[#lines + 1] = string.format("%s %d", name, v)
  end
  one("moonbox_context_out_bytes_total", "Bytes of execute_code results returned to the model.",
    server.bytes_out)
  one("moonbox_context_out_tokens_total", "Estimated tokens of execute_code results returned to the model.",
    server.tokens_out)
  one("moonbox_context_saved_tokens_total",
    "Estimated tokens kept out of the model's context: taken in (but context_vars) less returned, per execution.",
    server.tokens_saved)
  lines[#lines + 1] = ""
  return table.concat(lines, "\n")
end

return M
