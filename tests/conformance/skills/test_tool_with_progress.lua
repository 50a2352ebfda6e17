--- Conformance fixture: reports progress 0/100, 50/100, 100/100 about 50 ms apart.
-- @tool Tool with progress
local function wait(seconds)
  local t = os.clock() + seconds
  while os.clock() < t do end
end
return function()
  mcp.progress(0, 100)
  wait(0.05)
  mcp.progress(50, 100)
  wait(0.05)
  mcp.progress(100, 100)
  return { content = { { type = "text", text = "Tool with progress executed successfully" } } }
end
