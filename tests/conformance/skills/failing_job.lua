--- Conformance fixture (tasks extension): runs only as a task, and reports a tool error after
-- about a second (a completed task whose result has isError).
-- @task required
-- @tool Failing job
return function()
  mcp.sleep(1000)
  return { content = { { type = "text", text = "the job failed: nothing to process" } }, isError = true }
end
