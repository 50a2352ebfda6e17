--- Conformance fixture (tasks extension): a tool that never becomes a task.
-- @param name string who to greet
-- @tool Greet
return function(args)
  return { content = { { type = "text", text = "Hello, " .. tostring(args.name) .. "!" } } }
end
