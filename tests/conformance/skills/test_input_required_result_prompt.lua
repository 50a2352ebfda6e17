--- Conformance fixture (2026-07-28 input_required): a prompt that asks the user for context first.
-- @prompt Prompt needing input
return function()
  local a = mcp.ask({ user_context = { method = "elicitation/create", params = { message = "Some context?",
    requestedSchema = { type = "object", properties = { context = { type = "string" } } } } } })
  local ctx = type(a.user_context.content) == "table" and a.user_context.content.context or ""
  return { messages = { { role = "user", content = { type = "text", text = "Context: " .. tostring(ctx) } } } }
end
