--- Conformance fixture: asks the user (through the client) for a username and an email.
-- @param message string The message to show the user
-- @tool Elicitation
return function(args)
  local res = mcp.elicit({
    message = args.message,
    requestedSchema = {
      type = "object",
      properties = {
        username = { type = "string", description = "User's response" },
        email = { type = "string", description = "User's email address" },
      },
      required = { "username", "email" },
    },
  })
  return { content = { { type = "text", text = "User response: action=" .. tostring(res.action)
    .. ", content=" .. json.encode(res.content or {}) } } }
end
