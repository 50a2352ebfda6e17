--- Conformance fixture: elicitation whose schema has the five enum variants (SEP-1330).
-- @tool Elicitation with enums
return function()
  local res = mcp.elicit({
    message = "Please select options from the enum fields",
    requestedSchema = {
      type = "object",
      properties = {
        untitledSingle = { type = "string", description = "Select one option",
                           enum = { "option1", "option2", "option3" } },
        titledSingle = { type = "string", description = "Select one option with titles",
                         oneOf = { { const = "value1", title = "First Option" },
                                   { const = "value2", title = "Second Option" },
                                   { const = "value3", title = "Third Option" } } },
        legacyEnum = { type = "string", description = "Select one option (legacy)",
                       enum = { "opt1", "opt2", "opt3" },
                       enumNames = { "Option One", "Option Two", "Option Three" } },
        untitledMulti = { type = "array", description = "Select multiple options",
                          items = { type = "string", enum = { "option1", "option2", "option3" } } },
        titledMulti = { type = "array", description = "Select multiple options with titles",
                        items = { anyOf = { { const = "value1", title = "First Choice" },
                                            { const = "value2", title = "Second Choice" },
                                            { const = "value3", title = "Third Choice" } } } },
      },
    },
  })
  return { content = { { type = "text", text = "Elicitation completed: action=" .. tostring(res.action)
    .. ", content=" .. json.encode(res.content or {}) } } }
end
