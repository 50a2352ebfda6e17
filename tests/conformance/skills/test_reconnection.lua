--- Conformance fixture for server-sse-polling (SEP-1699): a call whose response comes over SSE.
-- @tool Reconnection
local function wait(seconds)
  local t = os.clock() + seconds
  while os.clock() < t do end
end
return function()
  mcp.log("info", "test_reconnection started")
  wait(0.05)
  return "Reconnection test completed"
end
