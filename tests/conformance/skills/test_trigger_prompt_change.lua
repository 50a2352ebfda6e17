--- Conformance fixture (2026-07-28): changes the published prompts (saves conf_changing_prompt), so listeners hear of it.
-- @tool Trigger a prompt list change
return function()
  save_skill({ name = "conf_changing_prompt", prompt = true,
    code = "return function() return 'changed at " .. os.time() .. " " .. os.clock() .. "' end",
    description = "Conformance fixture: a prompt that test_trigger_prompt_change rewrites" })
  return { content = { { type = "text", text = "prompts changed" } } }
end
