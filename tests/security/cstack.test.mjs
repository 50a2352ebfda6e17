// Recursion through C (issue 13, finding 1). Lua 5.4 counts nested C calls per coroutine and
// stops at 200 with "C stack overflow", but Debian's 5.4.4 restarts that count in
// lua_resetthread (coroutine.close), so __close handlers that close further coroutines could
// nest without bound: one execution overflowed the worker's C stack and killed the server
// (fixed upstream in 5.4.6). moonbox measures the real stack in every wrapper that calls back
// into Lua (mb_budget_cstack_check, max_c_stack_kb). Each script here nests one path as deep as
// it can and returns the error it caught; the test requires a clean "C stack overflow" answer
// and a server that keeps serving. None of these depends on the machine's speed: each script
// stops at a depth limit long before its timeout.

import { test, describe } from "node:test";

import { hostile } from "./harness.mjs";

const OVERFLOW = /C stack overflow/;

/** Expect the script to succeed and return text (or a table of texts) naming the overflow. */
const caught = (re = OVERFLOW) => ({
  success: true,
  check: (sc) => (re.test(JSON.stringify(sc.result)) ? [] : [`result ${JSON.stringify(sc.result)?.slice(0, 300)} does not match ${re}`]),
});

const run = (code, extra = {}) => hostile({ code, timeout_ms: 20000, bound: 20000, expect: caught(), ...extra });

// The red-team script: 20,000 coroutines, each closing the previous one from its __close handler.
const CLOSE_CHAIN = (inner = "") => `
local errs = {}
local prev
for i = 1, 20000 do
  local p = prev
  prev = coroutine.create(function()
    local x <close> = setmetatable({}, {__close = function()
      ${inner}
      if p then
        local ok, e = coroutine.close(p)
        if not ok then errs[#errs + 1] = e end
      end
    end})
    coroutine.yield()
  end)
  coroutine.resume(prev)
end
local ok, e = coroutine.close(prev)
return {top = e, first = errs[1], caught = #errs}`;

// A chain of n objects whose __tostring calls tostring on the next: n C levels of stock Lua
// (luaL_tolstring), which no moonbox wrapper sees.
const TOSTRING_CHAIN = `
local function chain(n)
  local inner = setmetatable({}, {__tostring = function() return "x" end})
  for i = 1, n do
    local nxt = inner
    inner = setmetatable({}, {__tostring = function() return tostring(nxt) end})
  end
  return inner
end`;

describe("C stack: nesting through C ends in a clean error, the server lives", () => {
  test("20,000 coroutines closing each other from __close (crashed the server before)", () =>
    run(CLOSE_CHAIN()));

  test("the same chain with 190 levels of __tostring at every step (the reserve past the check holds)", () =>
    run(`${TOSTRING_CHAIN}\nlocal deep = chain(190)\n${CLOSE_CHAIN("local _ = tostring(deep)")}`));

  test("the same chain with string.gsub callbacks nested at every step", () =>
    run(`local function g(n) if n == 0 then return "" end return (("a"):gsub("a", function() return g(n - 1) end)) end
${CLOSE_CHAIN("pcall(g, 150)")}`));

  test("coroutine.resume nested 100,000 deep", () =>
    run(`local function f(n)
  if n == 0 then return "bottom" end
  local ok, v = coroutine.resume(coroutine.create(f), n - 1)
  if not ok then error(v, 0) end
  return v
end
return select(2, pcall(f, 100000))`));

  test("coroutine.wrap nested 100,000 deep", () =>
    run(`local function f(n) if n == 0 then return "bottom" end return coroutine.wrap(f)(n - 1) end
return select(2, pcall(f, 100000))`));

  test("coroutine.close inside coroutine.resume inside __close, alternating", () =>
    run(`local errs = {}
local function f(n)
  if n == 0 then return end
  local co = coroutine.create(function()
    local x <close> = setmetatable({}, {__close = function()
      local ok, e = coroutine.resume(coroutine.create(f), n - 1)
      if not ok then errs[#errs + 1] = e end
    end})
    coroutine.yield()
  end)
  coroutine.resume(co)
  local ok, e = coroutine.close(co)
  if not ok then errs[#errs + 1] = e end
end
local ok, e = pcall(f, 50000)
return {e, errs[1]}`));

  test("__close handlers nested through function calls", () =>
    run(`local function f(n)
  local x <close> = setmetatable({}, {__close = function() if n > 0 then f(n - 1) end end})
end
return select(2, pcall(f, 100000))`));

  test("pcall and xpcall nested 100,000 deep", () =>
    run(`local function f(n) if n == 0 then return "bottom" end
  local ok, v
  if n % 2 == 0 then ok, v = pcall(f, n - 1) else ok, v = xpcall(f, function(m) return m end, n - 1) end
  if not ok then error(v, 0) end
  return v
end
return select(2, pcall(f, 100000))`));

  // Inside a coroutine a caught error unwinds the C stack to lua_resume, which then continues the
  // pcall's caller from there, so after the first "C stack overflow" the next calls nest deeper
  // in Lua without nesting in C: only the sandbox's own count stops them.
  test("pcall and xpcall nested in a coroutine stop at 200 levels (C does not bound them there)", () =>
    run(`local found, f
local function note(ok, e) if not ok and tostring(e):find("nested more than") then found = e end end
f = function()
  if found then return end
  note(pcall(f))
  if found then return end
  note(xpcall(f, function(m) return m end))
end
coroutine.resume(coroutine.create(function() pcall(f) end))
return found or "no limit was hit"`,
    { expect: caught(/pcall\/xpcall nested more than 200 deep in a coroutine in this sandbox/) }));

  // Found by fuzz_sandbox (this very program): unbounded pcall nesting in a
  // coroutine, then the deadline: Lua unwound level by level, walking the whole call chain each
  // time, and the worker ran on for seconds after the answer (2.2 s in-process at memory_mb=8,
  // 15 s at 64). hostile() requires the worker to be free within the overrun allowance.
  test("a pcall tree in a coroutine growing a string is stopped at the deadline, worker included", () =>
    hostile({
      code: `local s, f = '', nil
f = function()
  pcall(f)
  pcall(f)
  s = s .. 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'
end
local co = coroutine.create(function() pcall(f) end)
return coroutine.resume(co)`,
      memory_mb: 64, instruction_limit: 10000000000,
      expect: { check: (sc) => (sc.success === false && ["timeout", "memory"].includes(sc.error_type)) ||
        (sc.success === true) ? [] : [`unexpected ${JSON.stringify(sc).slice(0, 300)}`] },
    }));

  test("an error handler that fails while handling a C stack overflow (CVE-2022-33099's path)", () =>
    hostile({
      code: `local function loop() assert(pcall(loop)) end
local ok, e = xpcall(loop, loop)
return {ok, tostring(e)}`,
      timeout_ms: 20000,
      bound: 20000,
      expect: caught(/C stack overflow|error in error handling/),
    }));

  test("__index chains through table.concat, ipairs and table.unpack", () =>
    run(`local function chain(n, via)
  local inner = setmetatable({}, {__index = function() return "x" end})
  for i = 1, n do
    local nxt = inner
    inner = setmetatable({}, {__index = function(t, k) return via(nxt) end})
  end
  return inner
end
local vias = {
  function(t) return table.concat(t, ",", 1, 1) end,
  function(t) for _, v in ipairs(t) do return v end end,
  function(t) return (table.unpack(t, 1, 1)) end,
  function(t) return t[1] end,
}
local out = {}
for i, via in ipairs(vias) do out[i] = select(2, pcall(function() return chain(100000, via)[1] end)) end
return out`,
      { expect: { success: true, check: (sc) => (Array.isArray(sc.result) && sc.result.length === 4 && sc.result.every((r) => OVERFLOW.test(r)) ? [] : [`want 4 overflow errors, got ${JSON.stringify(sc.result)?.slice(0, 400)}`]) } }));

  test("table.sort comparators that sort again, 100,000 deep", () =>
    run(`local function f(n) if n == 0 then return end
  table.sort({2, 1}, function(a, b) f(n - 1) return a < b end)
end
return select(2, pcall(f, 100000))`));

  test("string.gsub and re.gsub callbacks nested 100,000 deep", () =>
    run(`local function g(n) if n == 0 then return "" end return (("a"):gsub("a", function() return g(n - 1) end)) end
local function r(n) if n == 0 then return "" end return (re.gsub("a", "a", function() return r(n - 1) end)) end
return {select(2, pcall(g, 100000)), select(2, pcall(r, 100000))}`,
      { expect: { success: true, check: (sc) => (Array.isArray(sc.result) && sc.result.every((r) => OVERFLOW.test(r)) ? [] : [`got ${JSON.stringify(sc.result)?.slice(0, 400)}`]) } }));

  test("tostring, print and string.format through __tostring chains", () =>
    run(`${TOSTRING_CHAIN}
local fmt = setmetatable({}, {__tostring = function() return "y" end})
for i = 1, 10000 do local nxt = fmt fmt = setmetatable({}, {__tostring = function() return string.format("%s", nxt) end}) end
local pr = setmetatable({}, {__tostring = function() return "z" end})
for i = 1, 10000 do local nxt = pr pr = setmetatable({}, {__tostring = function() print(nxt) return "z" end}) end
return {select(2, pcall(tostring, chain(10000))), select(2, pcall(tostring, fmt)), select(2, pcall(print, pr))}`,
      { expect: { success: true, check: (sc) => (Array.isArray(sc.result) && sc.result.length === 3 && sc.result.every((r) => OVERFLOW.test(r)) ? [] : [`got ${JSON.stringify(sc.result)?.slice(0, 400)}`]) } }));

  test("load: reader functions are refused and deeply nested source is a syntax error", () =>
    hostile({
      code: `local a, ea = pcall(load, function() return nil end)
local b, eb = load("return " .. ("("):rep(100000) .. "1" .. (")"):rep(100000))
local c, ec = load(("do "):rep(100000) .. ("end "):rep(100000))
return {a == false and ea or "reader accepted", b == nil and eb or "parsed", c == nil and ec or "parsed"}`,
      timeout_ms: 20000,
      bound: 20000,
      expect: {
        success: true,
        check: (sc) => {
          const r = sc.result;
          const p = [];
          if (!Array.isArray(r) || r.length !== 3) return [`got ${JSON.stringify(r)?.slice(0, 300)}`];
          if (!/only string chunks/.test(r[0])) p.push(`reader: ${r[0]}`);
          for (const e of r.slice(1)) if (!/C stack overflow|too many|overflow/.test(e)) p.push(`nesting: ${e.slice(0, 200)}`);
          return p;
        },
      },
    }));

  test("json.encode never calls metamethods and stops nesting at json_max_depth", () =>
    hostile({
      code: `local called = false
local mt = {__index = function() called = true end, __pairs = function() called = true end,
            __len = function() called = true return 5 end, __tostring = function() called = true return "" end}
local proxy = setmetatable({a = 1}, mt)
local plain = json.encode(proxy)
local t = {} local cur = t
for i = 1, 100000 do cur[1] = setmetatable({}, mt) cur = cur[1] end
local ok, e = pcall(json.encode, t)
return {called, plain, ok, e}`,
      timeout_ms: 20000,
      bound: 20000,
      expect: {
        success: true,
        check: (sc) => {
          const [called, plain, ok, e] = sc.result ?? [];
          const p = [];
          if (called !== false) p.push("a metamethod ran during json.encode");
          if (plain !== '{"a":1}') p.push(`encode of the proxy: ${plain}`);
          if (ok !== false || !/depth|json_max_depth/.test(e)) p.push(`deep encode: ${ok} ${e}`);
          return p;
        },
      },
    }));
});
