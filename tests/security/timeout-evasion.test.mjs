// Timeout evasion (the threat list of docs/security.md): scripts that try to catch, swallow or replace
// the limit error. Every one runs with timeout_ms=300 and must be answered as a timeout naming
// timeout_ms=300 within 300 + ANSWER_SLACK_MS ms, its worker must really stop (no abandoned thread running
// past 300 + 100 ms), and the server must run `return 1` afterwards.

import { test, describe } from "node:test";

import { hostile } from "./harness.mjs";

const TIMEOUT = { success: false, error_type: "timeout", error: "timeout: execution exceeded timeout_ms=300" };

const cases = [
  ["pcall around an endless loop, retried forever",
    "while true do pcall(function() while true do end end) end"],
  ["nested pcall, each level retrying",
    "while true do pcall(function() while true do pcall(function() while true do end end) end end) end"],
  ["pcall(error, ...) in a tight loop (the catch is in C)",
    'while true do pcall(error, "x") end'],
  ["xpcall whose handler swallows the error",
    "while true do xpcall(function() while true do end end, function(e) return e end) end"],
  ["xpcall whose handler loops forever (error raised by the limit inside the body)",
    "while true do xpcall(function() while true do end end, function(e) while true do end end) end"],
  ["xpcall whose handler loops forever (after an ordinary error)",
    "return xpcall(error, function(e) while true do end end)"],
  ["xpcall whose handler retries the body",
    "local function body() while true do end end local function h(e) return select(2, xpcall(body, h)) end while true do xpcall(body, h) end"],
  ["coroutine loop; main continues after resume returns false",
    "while true do local co = coroutine.create(function() while true do end end) local ok, e = coroutine.resume(co) end"],
  ["nested coroutines restarting their children forever",
    "local function level(n) return function() while true do if n > 0 then coroutine.resume(coroutine.create(level(n - 1))) " +
    "else for i = 1, 1e5 do end end end end end while true do coroutine.resume(coroutine.create(level(3))) end"],
  ["coroutine.wrap loop under pcall",
    "while true do pcall(coroutine.wrap(function() while true do end end)) end"],
  ["coroutine.wrap nested in coroutine.wrap",
    "while true do pcall(coroutine.wrap(function() while true do pcall(coroutine.wrap(function() while true do end end)) end end)) end"],
  ["yield-based scheduler that keeps resuming",
    "local co = coroutine.wrap(function() while true do coroutine.yield() end end) while true do pcall(co) end"],
  ["coroutine.close of a coroutine whose __close loops",
    "while true do local co = coroutine.create(function() local x <close> = setmetatable({}, {__close = function() while true do end end}) " +
    "coroutine.yield() end) coroutine.resume(co) pcall(coroutine.close, co) end"],
  ["__close handler looping forever",
    "while true do pcall(function() local x <close> = setmetatable({}, {__close = function() while true do end end}) while true do end end) end"],
  ["__close replacing the error with a table, retried",
    "while true do pcall(function() local x <close> = setmetatable({}, {__close = function() error({fake = true}) end}) while true do end end) end"],
  ["__close replacing the error with a table, then returning normally",
    'local ok, e = pcall(function() local x <close> = setmetatable({}, {__close = function() error({fake = true}) end}) while true do end end) return "escaped", ok, e'],
  ["__close replacing the error with a string that looks like success",
    'local ok, e = pcall(function() local x <close> = setmetatable({}, {__close = function() error("not a timeout", 0) end}) while true do end end) return "escaped"'],
  ["pcall inside a coroutine that yielded across it (error recovered after resume), __close looping",
    "local co = coroutine.wrap(function() while true do pcall(function() " +
    "local x <close> = setmetatable({}, {__close = function() while true do end end}) coroutine.yield() while true do end end) end end) " +
    "co() while true do pcall(co) end"],
  ["load of endless code, called under pcall, in a loop",
    'while true do pcall(load("while true do end")) pcall(load, "x = 1") end'],
  ["gsub callback looping, under pcall",
    'while true do pcall(string.gsub, "aaa", "a", function() while true do end end) end'],
  ["table.sort comparator looping, under pcall",
    "while true do pcall(table.sort, {3, 2, 1, 5, 4}, function(a, b) while true do end end) end"],
  ["__tostring looping inside print, under pcall",
    "while true do pcall(print, setmetatable({}, {__tostring = function() while true do end end})) end"],
  ["__index function looping, under pcall",
    "local t = setmetatable({}, {__index = function() while true do end end}) while true do pcall(function() return t.x end) end"],
  ["error objects with looping __tostring raised in a pcall loop",
    "while true do pcall(error, setmetatable({}, {__tostring = function() while true do end end})) end"],
  ["pcall(error, 'not enough memory', 0) forgery in a loop",
    'while true do pcall(error, "not enough memory", 0) end'],
];

describe("timeout evasion: the limit error cannot be swallowed", () => {
  for (const [name, code] of cases) {
    test(name, () => hostile({ code, timeout_ms: 300, expect: TIMEOUT }));
  }
});

describe("other catch points", () => {
  test("load with a reader function is refused with a clear message", () =>
    hostile({
      code: "return pcall(load, function() while true do end end)",
      timeout_ms: 300,
      bound: 300,
      expect: { success: true, result: [false, "load: only string chunks are allowed in the sandbox"] },
    }));

  test('error("not enough memory", 0) is a runtime error, not a memory error', () =>
    hostile({
      code: 'error("not enough memory", 0)',
      timeout_ms: 300,
      bound: 300,
      expect: { success: false, error_type: "runtime", error: "not enough memory" },
    }));

  test('pcall catches the forged memory error and the script goes on normally', () =>
    hostile({
      code: 'local ok, e = pcall(error, "not enough memory", 0) return ok, e',
      timeout_ms: 300,
      bound: 300,
      expect: { success: true, result: [false, "not enough memory"] },
    }));

  test("the instruction limit cannot be swallowed by pcall either", () =>
    hostile({
      code: "while true do pcall(function() while true do end end) end",
      timeout_ms: 5000,
      bound: 3000,
      instruction_limit: 100000,
      expect: { success: false, error_type: "instructions", error: "instruction limit: execution exceeded instruction_limit=100000" },
    }));

  test("the instruction limit inside a coroutine stops the whole execution", () =>
    hostile({
      code: 'local co = coroutine.wrap(function() while true do end end) pcall(co) return "continued"',
      timeout_ms: 5000,
      bound: 3000,
      instruction_limit: 100000,
      expect: { success: false, error_type: "instructions", error: /instruction_limit=100000/ },
    }));
});
