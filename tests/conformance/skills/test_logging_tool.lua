--- Conformance fixture (2026-07-28): logs; without a logLevel in the request no log message is sent.
-- @tool Logging tool
return function()
  mcp.log("info", "a log line nobody asked for")
  mcp.log("error", "another one")
  return { content = { { type = "text", text = "logged twice" } } }
end
