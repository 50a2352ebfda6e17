--- Conformance fixture: returns text, image and resource blocks.
-- @tool Multiple content types
return function()
  return { content = {
    { type = "text", text = "Multiple content types test:" },
    { type = "image", data = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC", mimeType = "image/png" },
    { type = "resource", resource = { uri = "test://mixed-content-resource",
      mimeType = "application/json", text = '{"test":"data","value":123}' } },
  } }
end
