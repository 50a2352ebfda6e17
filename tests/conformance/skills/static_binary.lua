--- Conformance fixture: the static binary resource (a 1x1 red PNG).
-- @resource test://static-binary image/png
return function()
  return { blob = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC", mimeType = "image/png" }
end
