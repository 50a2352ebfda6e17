--- Conformance fixture: elicitation whose schema has defaults for every primitive type (SEP-1034).
-- @tool Elicitation with defaults
return function()
  local res = mcp.elicit({
    message = "Please review and update the form fields with defaults",
    requestedSchema = {
      type = "object",
      properties = {
        name = { type = "string", description = "User name", default = "John Doe" },
        age = { type = "integer", description = "User age", default = 30 },
        score = { type = "number", description = "User score", default = 95.5 },
        status = { type = "string", description = "User status",
                   enum = { "active", "inactive", "pending" }, default = "active" },
        verified = { type = "boolean", description = "Verification status", default = true },
      },
    },
  })
  return { content = { { type = "text", text = "Elicitation completed: action=" .. tostring(res.action)
    .. ", content=" .. json.encode(res.content or {}) } } }
end
