--- Conformance fixture: returns a 1x1 red PNG image block.
-- @tool Image content
return function()
  return { content = { { type = "image", data = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC", mimeType = "image/png" } } }
end
