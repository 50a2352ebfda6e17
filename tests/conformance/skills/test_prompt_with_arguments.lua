--- Conformance fixture: a prompt with two required arguments.
-- @param arg1 string First test argument
-- @param arg2 string Second test argument
-- @prompt Prompt with arguments
return function(args)
  return { messages = { { role = "user", content = { type = "text",
    text = string.format("Prompt with arguments: arg1='%s', arg2='%s'", args.arg1, args.arg2) } } } }
end
