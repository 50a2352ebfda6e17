-- mcp/savings.lua - context saved: what sandbox code took in and what went back to the model.
--
-- The worker counts the bytes every execution takes in, per source, where they arrive (host-call
-- replies, workspace reads, context_vars), estimates their tokens (src/tokest.c), and does the
-- same for the result it returns (mb_exec_result_shape); the host hands the counts over with the
-- result, its _meta written as raw JSON by mb_exec_result_meta (src/host.c, push_io). They are summed
-- per tenant, in the tenant's counters of tools.lua (get_execution_stats shows a tenant its own
-- sums) and, for /metrics, over all tenants (without a tenant label: every tenant's token may
-- read /metrics). docs/sandbox.md ("Context saved") says what is counted and how good the
-- estimate is.

local M = {}

-- The key of the result's _meta (MCP: a prefix in reverse-DNS form, not one MCP reserves);
-- src/sandbox.c writes the _meta (mb_exec_result_meta), tools.lua puts it in the result.
M.KEY = "dev.moonbox/context"

-- the sources in the order src/tokest.h declares them
local SOURCES = { "upstream", "workspace", "context_vars", "skills", "catalog", "client" }

-- every tenant's sums, for /metrics (tenants come from the configured tokens: few)
local all = {}

-- A tenant's sums (tools.lua keeps them with its other counters and adds bytes_out and
-- tokens_out itself: that is all most executions need, and it runs for every one).
function M.sums()
  local s = { bytes_out = 0, tokens_out = 0, tokens_saved = 0, by_source = {} }
  all[#all + 1] = s
  return s
end

-- Adds what an execution took in (res.io_in, from the host: source -> {bytes, tokens}) to a
-- tenant's sums.
function M.add_in(s, res)
  s.tokens_saved = s.tokens_saved + res.tokens_saved
  local by = s.by_source
  for name, v in pairs(res.io_in) do
    local b = by[name]
    if not b then
      b = { bytes = 0, tokens = 0 }
      by[name] = b
    end
    b.bytes = b.bytes + v.bytes
    b.tokens = b.tokens + v.tokens
  end
end

-- get_execution_stats' section: a tenant's sums.
function M.stats(s)
  local by_source, bytes_in, tokens_in = {}, 0, 0
  for _, name in ipairs(SOURCES) do
    local b = s.by_source[name]
    if b then
      by_source[name] = { bytes = b.bytes, tokens = b.tokens }
      bytes_in, tokens_in = bytes_in + b.bytes, tokens_in + b.tokens
    end
  end
  return {
    bytes_in = bytes_in, tokens_in = tokens_in, bytes_out = s.bytes_out,
    tokens_out = s.tokens_out, tokens_saved = s.tokens_saved, by_source = by_source,
    tokens = "estimated (docs/sandbox.md, \"Context saved\")",
  }
end

-- Prometheus text for /metrics: the server's sums.
function M.metrics_text()
  local server = { bytes_out = 0, tokens_out = 0, tokens_saved = 0, by_source = {} }
  for _, name in ipairs(SOURCES) do server.by_source[name] = { bytes = 0, tokens = 0 } end
  for _, t in ipairs(all) do
    server.bytes_out = server.bytes_out + t.bytes_out
    server.tokens_out = server.tokens_out + t.tokens_out
    server.tokens_saved = server.tokens_saved + t.tokens_saved
    for name, b in pairs(t.by_source) do
      local sb = server.by_source[name]
      if sb then sb.bytes, sb.tokens = sb.bytes + b.bytes, sb.tokens + b.tokens end
    end
  end
  local lines = {
    "# HELP moonbox_context_in_bytes_total Bytes sandbox code took in, by source.",
    "# TYPE moonbox_context_in_bytes_total counter",
  }
  for _, name in ipairs(SOURCES) do
    lines[#lines + 1] = string.format('moonbox_context_in_bytes_total{source="%s"} %d', name,
      server.by_source[name].bytes)
  end
  lines[#lines + 1] = "# HELP moonbox_context_in_tokens_total Estimated tokens of what sandbox code "
    .. "took in, by source."
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
  one("moonbox_context_out_tokens_total",
    "Estimated tokens of execute_code results returned to the model.", server.tokens_out)
  one("moonbox_context_saved_tokens_total",
    "Estimated tokens kept out of the model's context: taken in (but context_vars) less "
      .. "returned, per execution.",
    server.tokens_saved)
  lines[#lines + 1] = ""
  return table.concat(lines, "\n")
end

return M
