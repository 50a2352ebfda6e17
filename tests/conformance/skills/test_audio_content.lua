--- Conformance fixture: returns a short silent WAV audio block.
-- @tool Audio content
return function()
  return { content = { { type = "audio", data = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YRAAAACAgICAgICAgICAgICAgICA", mimeType = "audio/wav" } } }
end
