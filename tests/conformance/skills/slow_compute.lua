--- Conformance fixture (tasks extension): waits `seconds` (mcp.sleep, no CPU) and answers; a task
-- when the client declared io.modelcontextprotocol/tasks.
-- @param seconds number how long to wait
-- @param label string? a label echoed in the result
-- @task optional
-- @tool Slow compute
return function(args)
  local s = tonumber(args.seconds) or 0
  mcp.task("computing " .. tostring(args.label or ""))
  if s > 0 then mcp.sleep(math.floor(s * 1000)) end
  return { content = { { type = "text", text = "computed " .. tostring(args.label or "") .. " after " .. s .. " s" } } }
end
