--- Conformance fixture (2026-07-28): needs sampling; a client without it gets -32021.
-- @tool Needs sampling
return function()
  local r = mcp.sample({ messages = { { role = "user", content = { type = "text", text = "Hi" } } }, maxTokens = 10 })
  return { content = { { type = "text", text = json.encode(r) } } }
end
