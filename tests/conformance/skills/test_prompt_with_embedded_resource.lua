--- Conformance fixture: a prompt that embeds the resource named by its argument.
-- @param resourceUri string URI of the resource to embed
-- @prompt Prompt with embedded resource
return function(args)
  return { messages = {
    { role = "user", content = { type = "resource", resource = { uri = args.resourceUri,
      mimeType = "text/plain", text = "Embedded resource content for testing." } } },
    { role = "user", content = { type = "text", text = "Please process the embedded resource above." } },
  } }
end
