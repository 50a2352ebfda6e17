--- Conformance fixture (2026-07-28 input_required): asks only what the client declared it can answer.
-- @tool Input required: capabilities
return function()
  local caps = mcp.client_capabilities()
  local r
  if caps.elicitation then
    r = mcp.elicit({ message = "Name?", requestedSchema = { type = "object", properties = { n = { type = "string" } } } })
  elseif caps.sampling then
    r = mcp.sample({ messages = { { role = "user", content = { type = "text", text = "Say hi." } } }, maxTokens = 20 })
  else
    return { content = { { type = "text", text = "the client can answer nothing" } } }
  end
  return { content = { { type = "text", text = "answered: " .. json.encode(r) } } }
end
