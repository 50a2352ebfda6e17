--- Conformance fixture (2026-07-28 input_required): a confirmation whose requestState must come back unaltered.
-- @tool Input required: tamper check
return function()
  local r = mcp.elicit({ message = "OK?", requestedSchema = { type = "object",
    properties = { ok = { type = "boolean" } } } })
  return { content = { { type = "text", text = "action=" .. tostring(r.action) } } }
end
