--- Conformance fixture: asks the client for an LLM completion of the prompt.
-- @param prompt string The prompt to send to the LLM
-- @tool Sampling
return function(args)
  local res = mcp.sample({
    messages = { { role = "user", content = { type = "text", text = args.prompt } } },
    maxTokens = 100,
  })
  local text = type(res) == "table" and type(res.content) == "table" and res.content.text
  return { content = { { type = "text", text = "LLM response: " .. tostring(text or json.encode(res)) } } }
end
