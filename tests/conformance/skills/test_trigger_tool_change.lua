--- Conformance fixture (2026-07-28): changes the published tools (saves conf_changing_tool), so listeners hear of it.
-- @tool Trigger a tool list change
return function()
  save_skill({ name = "conf_changing_tool", tool = true,
    code = "return function() return " .. os.time() .. " + " .. os.clock() .. " end",
    description = "Conformance fixture: a tool that test_trigger_tool_change rewrites" })
  return { content = { { type = "text", text = "tools changed" } } }
end
