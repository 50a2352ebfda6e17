--- Conformance fixture: the static text resource.
-- @resource test://static-text text/plain
return function()
  return { text = "This is the content of the static text resource.", mimeType = "text/plain" }
end
