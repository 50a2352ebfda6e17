--- Conformance fixture (2026-07-28 input_required): asks the client's model a question.
-- @tool Input required: sampling
return function()
  local r = mcp.sample({ messages = { { role = "user", content = { type = "text",
    text = "What is the capital of France?" } } }, maxTokens = 100 })
  local text = type(r.content) == "table" and r.content.text or json.encode(r)
  return { content = { { type = "text", text = "The model said: " .. tostring(text) } } }
end
