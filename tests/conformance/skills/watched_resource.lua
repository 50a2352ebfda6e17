--- Conformance fixture: a resource clients subscribe to.
-- @resource test://watched-resource text/plain
return function()
  return { text = "Watched resource content", mimeType = "text/plain" }
end
