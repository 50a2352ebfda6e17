--- Conformance fixture (tasks extension): fails with a JSON-RPC error - it asks the client for its
-- roots, a capability the conformance client does not declare (-32021): a failed task.
-- @task optional
-- @tool Protocol error job
return function()
  mcp.roots()
  return { content = { { type = "text", text = "unreachable" } } }
end
