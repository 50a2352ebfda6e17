--- Conformance fixture (2026-07-28 input_required): one confirmation; the answer comes back with the requestState.
-- @tool Input required: request state
return function()
  local r = mcp.elicit({ message = "Confirm?", requestedSchema = { type = "object",
    properties = { ok = { type = "boolean" } } } })
  return { content = { { type = "text", text = "state-ok: action=" .. tostring(r.action) } } }
end
