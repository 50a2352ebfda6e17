--- Conformance fixture (2026-07-28 input_required): asks the user's name under the key user_name.
-- @tool Input required: elicitation
return function()
  local a = mcp.ask({ user_name = { method = "elicitation/create", params = {
    message = "What is your name?",
    requestedSchema = { type = "object", properties = { name = { type = "string" } }, required = { "name" } },
  } } })
  local r = a.user_name
  local name = type(r.content) == "table" and r.content.name or "stranger"
  return { content = { { type = "text", text = "Hello, " .. tostring(name) .. "!" } } }
end
