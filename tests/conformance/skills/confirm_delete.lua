--- Conformance fixture (tasks extension): asks for a confirmation (elicitation/create), then
-- answers; as a task it is input_required until tasks/update brings the answer.
-- @param filename string the file to delete
-- @task optional
-- @tool Confirm delete
return function(args)
  local r = mcp.elicit({ message = "Delete " .. tostring(args.filename) .. "?", requestedSchema = {
    type = "object", properties = { confirm = { type = "boolean" } }, required = { "confirm" } } })
  local yes = r.action == "accept" and type(r.content) == "table" and r.content.confirm == true
  return { content = { { type = "text", text = (yes and "deleted " or "kept ") .. tostring(args.filename) } } }
end
