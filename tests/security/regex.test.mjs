// The `re` module (PCRE2): catastrophic backtracking, limits that scripts cannot raise, size
// caps, and time bounds. Skipped when the binary has no `re` (the module may be absent while it
// is being written). API assumed: re.find(subject, pattern [, init [, flags]]), re.gsub,
// re.gmatch, re.split, as in src/regex.h / docs.

import { test, describe } from "node:test";

import { startPeer } from "./peer.mjs";
import { hostile } from "./harness.mjs";

async function probeRe() {
  const peer = await startPeer();
  try {
    const { sc } = await peer.exec({ code: "return type(re), type(re) == 'table' and type(re.find) or 'none'" });
    return sc.success && sc.result[0] === "table" && sc.result[1] === "function";
  } finally {
    await peer.dispose();
  }
}

const haveRe = await probeRe();
const skip = haveRe ? false : "the binary has no `re` module (type(re) ~= 'table')";

const TIMEOUT = { success: false, error_type: "timeout", error: "timeout: execution exceeded timeout_ms=300" };
const pcallFails = (re) => ({
  success: true,
  check: (sc) => (Array.isArray(sc.result) && sc.result[0] === false && re.test(sc.result[1]) ? [] : [`want [false, ${re}], got ${JSON.stringify(sc.result)?.slice(0, 300)}`]),
});
const MATCH_LIMIT = /^re: match limit exceeded \(match_limit=100000\)/;

describe("re: catastrophic patterns", { skip }, () => {
  test("(a+)+$ on a 1 MiB subject stops at the match limit", () =>
    hostile({
      code: 'local s = ("a"):rep(2^20) .. "b" print("go") return pcall(re.find, s, "(a+)+$")',
      marker: "go", bound: 450, expect: pcallFails(MATCH_LIMIT),
    }));
  test("(a+)+$ on a 1 MiB subject retried forever under pcall times out in time", () =>
    hostile({
      code: 'local s = ("a"):rep(2^20) .. "b" print("go") while true do pcall(re.find, s, "(a+)+$") end',
      marker: "go", expect: TIMEOUT,
    }));
  test("(*LIMIT_MATCH=...) in the pattern cannot raise the configured match limit", () =>
    hostile({
      code: 'local s = ("a"):rep(2^20) .. "b" return pcall(re.find, s, "(*LIMIT_MATCH=1000000000)(*LIMIT_HEAP=1000000000)(*LIMIT_DEPTH=1000000000)(a+)+$")',
      bound: 450, expect: pcallFails(MATCH_LIMIT),
    }));
  test("(*NO_JIT) does not lift the limits either", () =>
    hostile({
      code: 'local s = ("a"):rep(2^16) .. "b" return pcall(re.find, s, "(*NO_JIT)(a+)+$")',
      bound: 450, expect: pcallFails(/^re: (match|depth|heap) limit exceeded/),
    }));
  test("JIT stack exhaustion is a clean error", () =>
    hostile({
      code: 'return pcall(re.find, ("ab"):rep(2^19), "^(?:(a)|b)*c")',
      bound: 450, expect: pcallFails(/^re: (JIT stack|match|depth|heap) limit exceeded/),
    }));
  test("gmatch over a 1 MiB subject in a loop times out in time", () =>
    hostile({
      code: 'local s = ("a"):rep(2^20) print("go") while true do for m in re.gmatch(s, "a") do end end',
      marker: "go", expect: TIMEOUT,
    }));
  test("split of a 2 MiB subject in a loop times out in time", () =>
    hostile({
      code: 'local s = ("a,"):rep(2^20) print("go") while true do re.split(s, ",") end',
      memory_mb: 256, marker: "go", expect: TIMEOUT,
    }));
  test("gsub amplification hits the memory cap", () =>
    hostile({
      code: 'return #re.gsub(("a"):rep(2^20), ".", ("$0"):rep(100))',
      memory_mb: 16, timeout_ms: 5000, bound: 3000,
      expect: { success: false, error_type: "memory", error: "memory limit: execution exceeded memory_mb=16 (16777216 bytes)" },
    }));
});

describe("re: size limits", { skip }, () => {
  test("a pattern over regex_max_pattern_bytes is refused", () =>
    hostile({ code: 'return pcall(re.find, "x", ("a"):rep(5000))', bound: 300, expect: pcallFails(/^re: pattern is 5000 bytes, over the limit max_pattern_bytes=4096$/) }));
  test("a subject over regex_max_subject_bytes is refused", () =>
    hostile({
      code: 'return pcall(re.find, ("a"):rep(2^12):rep(2^12 + 1), "a")',
      memory_mb: 128, timeout_ms: 2000, bound: 1500,
      expect: pcallFails(/^re: subject is 16781312 bytes, over the limit max_subject_bytes=4194304$/),
    }));
  test("deeply nested parentheses are refused at compile time", () =>
    hostile({ code: 'return pcall(re.find, "x", ("("):rep(1000) .. "x" .. (")"):rep(1000))', bound: 300, expect: pcallFails(/parens_nest_limit=50/) }));
  test("compiling thousands of distinct patterns is refused", () =>
    hostile({ code: 'for i = 1, 5000 do re.find("x", "x" .. i) end return 1', bound: 450, expect: { success: false, error_type: "runtime", error: /max_patterns=128/ } }));
});
