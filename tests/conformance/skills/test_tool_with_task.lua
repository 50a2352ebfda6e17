--- Conformance fixture (tasks extension + input_required): asks the user's name in an
-- input_required round first, then goes on as a task (mcp.task) whose result names the user.
-- @tool Input required, then a task
return function()
  local a = mcp.ask({ user_name = { method = "elicitation/create", params = {
    message = "What is your name?",
    requestedSchema = { type = "object", properties = { name = { type = "string" } }, required = { "name" } },
  } } })
  local r = a.user_name
  local name = type(r.content) == "table" and r.content.name or "stranger"
  mcp.task("greeting " .. tostring(name))
  return { content = { { type = "text", text = "Hello, " .. tostring(name) .. "!" } } }
end
