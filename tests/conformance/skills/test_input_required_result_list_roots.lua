--- Conformance fixture (2026-07-28 input_required): asks the client for its roots.
-- @tool Input required: roots
return function()
  local r = mcp.roots()
  local uris = {}
  for _, root in ipairs(r.roots or {}) do uris[#uris + 1] = root.uri end
  return { content = { { type = "text", text = "Roots: " .. table.concat(uris, ", ") } } }
end
