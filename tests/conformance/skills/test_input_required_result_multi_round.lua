--- Conformance fixture (2026-07-28 input_required): two rounds, the second asked after the first is answered.
-- @tool Input required: two rounds
return function()
  local first = mcp.ask({ step1 = { method = "elicitation/create", params = { message = "Step 1: your name?",
    requestedSchema = { type = "object", properties = { name = { type = "string" } } } } } })
  local second = mcp.ask({ step2 = { method = "elicitation/create", params = { message = "Step 2: your city?",
    requestedSchema = { type = "object", properties = { city = { type = "string" } } } } } })
  return { content = { { type = "text", text = "Rounds done: " .. tostring(first.step1.action) .. ", "
    .. tostring(second.step2.action) } } }
end
