-- Found by tests/fuzz/fuzz_sandbox.c (reported, not fixed yet). Errors caught inside a
-- coroutine while a string fills the memory cap: the execution overruns its deadline by far
-- more than the watchdog's grace (in-process, deadline 100 ms: 0.85 s with memory_mb=8, 3.2 s
-- with 16, 12.7 s with 64; the time goes to Lua 5.4.4's luaD_shrinkstack, reached from
-- lua_resume's recovery of an error inside the coroutine, where no hook runs). The server answers
-- at deadline + grace and abandons the worker thread, which went on for more than 14 s with
-- memory_mb=64, so a few of these at once use up max_abandoned (docs/security.md, "Fuzzing").
local s, f = '', nil
f = function()
  pcall(f)
  pcall(f)
  s = s .. 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'
end
local co = coroutine.create(function() pcall(f) end)
return coroutine.resume(co)
