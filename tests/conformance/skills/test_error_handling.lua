--- Conformance fixture: always returns a tool error.
-- @tool Error handling
return function()
  return { content = { { type = "text", text = "This tool intentionally returns an error for testing" } },
           isError = true }
end
