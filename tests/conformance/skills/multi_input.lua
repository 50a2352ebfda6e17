--- Conformance fixture (tasks extension): two questions at once (mcp.ask), so a task waits for
-- two inputs; answered one at a time with tasks/update.
-- @task optional
-- @tool Multi input
return function()
  local schema = { type = "object", properties = { name = { type = "string" }, confirm = { type = "boolean" } } }
  local a = mcp.ask({
    first = { method = "elicitation/create", params = { message = "First name?", requestedSchema = schema } },
    second = { method = "elicitation/create", params = { message = "Second name?", requestedSchema = schema } },
  })
  local function name(r) return type(r.content) == "table" and tostring(r.content.name) or "?" end
  return { content = { { type = "text", text = "got " .. name(a.first) .. " and " .. name(a.second) } } }
end
