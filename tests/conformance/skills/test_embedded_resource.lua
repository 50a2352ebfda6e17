--- Conformance fixture: returns an embedded text resource.
-- @tool Embedded resource
return function()
  return { content = { { type = "resource", resource = {
    uri = "test://embedded-resource", mimeType = "text/plain",
    text = "This is an embedded resource content." } } } }
end
