--- Conformance fixture: a prompt holding an image.
-- @prompt Prompt with image
return function()
  return { messages = {
    { role = "user", content = { type = "image", data = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC", mimeType = "image/png" } },
    { role = "user", content = { type = "text", text = "Please analyze the image above." } },
  } }
end
