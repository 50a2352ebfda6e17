--- Conformance fixture: returns a simple text block.
-- @tool Simple text
return function()
  return { content = { { type = "text", text = "This is a simple text response for testing." } } }
end
