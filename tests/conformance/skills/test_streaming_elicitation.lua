--- Conformance fixture (2026-07-28): asks the user something; the question comes as input_required, never as a request on the stream.
-- @tool Streaming elicitation
return function()
  local r = mcp.elicit({ message = "Continue?", requestedSchema = { type = "object",
    properties = { ok = { type = "boolean" } } } })
  return { content = { { type = "text", text = "action=" .. tostring(r.action) } } }
end
