--- Conformance fixture: sends three info log messages about 50 ms apart.
-- @tool Tool with logging
local function wait(seconds)
  local t = os.clock() + seconds
  while os.clock() < t do end
end
return function()
  mcp.log("info", "Tool execution started")
  wait(0.05)
  mcp.log("info", "Tool processing data")
  wait(0.05)
  mcp.log("info", "Tool execution completed")
  return { content = { { type = "text", text = "Tool with logging executed successfully" } } }
end
