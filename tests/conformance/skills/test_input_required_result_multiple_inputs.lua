--- Conformance fixture (2026-07-28 input_required): three questions in one round.
-- @tool Input required: several inputs
return function()
  local a = mcp.ask({
    user_name = { method = "elicitation/create", params = { message = "What is your name?",
      requestedSchema = { type = "object", properties = { name = { type = "string" } }, required = { "name" } } } },
    greeting = { method = "sampling/createMessage", params = { messages = { { role = "user",
      content = { type = "text", text = "Write a short greeting." } } }, maxTokens = 50 } },
    client_roots = { method = "roots/list" },
  })
  return { content = { { type = "text", text = "Got " .. tostring(a.user_name.action) .. ", a greeting and "
    .. tostring(#(a.client_roots.roots or {})) .. " roots" } } }
end
