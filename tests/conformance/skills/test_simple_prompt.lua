--- Conformance fixture: a simple prompt without arguments.
-- @prompt Simple prompt
return function()
  return { messages = { { role = "user", content = { type = "text", text = "This is a simple prompt for testing." } } } }
end
