-- wrk script: tools/call execute_code ("return 1+1") over Streamable HTTP, on one MCP session
-- (2025-11-25; the session id comes from the SID environment variable, see
-- tests/bench/http_bench.sh) or, with MODE=stateless, as sessionless 2026-07-28 requests (each
-- carries its _meta and the Mcp-Method / Mcp-Name headers).
-- Request ids are unique across wrk's threads (a reused id in flight would be refused); answers
-- that are not a successful execution are counted and reported.
local threads = {}

setup = function(thread)
  thread:set("tid", #threads + 1)
  threads[#threads + 1] = thread
end

-- PACE_MS: each connection waits that long before each request (wrk's delay()), so that the
-- load is a rate below saturation (http_bench.sh's loop-thread share at ~20,000 req/s).
local pace = tonumber(os.getenv("PACE_MS") or "")
if pace then delay = function() return pace end end

local id, failed = 0, 0
local stateless = os.getenv("MODE") == "stateless"
local META = ',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientCapabilities":{}}'
init = function()
  wrk.method = "POST"
  -- AUTH: a bearer token (a static http_tokens one or an OAuth access token; oauth_bench.mjs)
  if os.getenv("AUTH") then wrk.headers["Authorization"] = "Bearer " .. os.getenv("AUTH") end
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  if stateless then
    wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
    wrk.headers["Mcp-Method"] = "tools/call"
    wrk.headers["Mcp-Name"] = "execute_code"
  else
    wrk.headers["Mcp-Session-Id"] = os.getenv("SID")
    wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
  end
end

request = function()
  id = id + 1
  local body = '{"jsonrpc":"2.0","id":"t' .. tid .. '-' .. id .. '","method":"tools/call","params":'
    .. '{"name":"execute_code","arguments":{"code":"return 1+1"}' .. (stateless and META or "") .. '}}'
  return wrk.format(nil, nil, nil, body)
end

response = function(status, headers, body)
  if status ~= 200 or not body:find('\\"success\\":true', 1, true) then
    failed = failed + 1
    wrk.thread:set("failed", failed)
  end
end

done = function(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do bad = bad + (t:get("failed") or 0) end
  io.write(string.format("wrk: %d requests, %.0f/s, p50 %.2f ms, p99 %.2f ms, non-2xx %d, "
    .. "socket errors %d, answers that were not a successful execution %d\n",
    summary.requests, summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, bad))
end
