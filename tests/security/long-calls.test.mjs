// Single C calls that did not check the deadline (issue 13, finding 3), and os.clock as a side
// channel (finding 7). Each test fails on the code before the fix: the call ran for seconds
// (the parser on a chain of `or` took 51 s on a 1 MiB chunk), overran deadline + grace, or
// succeeded when it must be refused. None depends on the machine's speed: loops run until the
// limit trips, and refusals happen before any work.

import { test, describe } from "node:test";
import assert from "node:assert/strict";

import { hostile, cancelProbe } from "./harness.mjs";
import { startPeer } from "./peer.mjs";

const TIMEOUT = (ms) => ({ success: false, error_type: "timeout", error: `timeout: execution exceeded timeout_ms=${ms}` });

// Chains the parser handles in quadratic time (Debian's Lua 5.4.4, 1 MiB: `or` 51 s, `and` 35 s,
// `elseif` 6 s), built inside the sandbox to just under 1 MiB.
const CHAINS = {
  or: `"local x local y = x" .. (" or x"):rep(200000)`,
  and: `"local x local y = x" .. (" and x"):rep(170000)`,
  elseif: `"local x if x then " .. ("elseif x then "):rep(70000) .. "end"`,
  labels: `(function() local t = {} for i = 1, 60000 do t[i] = "::l" .. i .. ":: x = 1 " end return table.concat(t) end)()`,
};

describe("the parser stops at the deadline", () => {
  for (const [name, expr] of Object.entries(CHAINS)) {
    test(`load() of a 1 MiB ${name} chain, in a loop`, () =>
      hostile({ code: `local src = ${expr} print("go") while true do load(src) end`, marker: "go", expect: TIMEOUT(300) }));
  }

  test("execute_code whose own code is a 1 MiB chain of `or`", () => {
    const code = "local x local y = x" + " or x".repeat(200000);
    return hostile({ code, timeout_ms: 1000, expect: TIMEOUT(1000) });
  });

  // One token can still cost O(k^2): a loop's `end` resolving k pending breaks, a label
  // resolving k gotos (review: 4 loops of 32,700 breaks kept load() busy 1.25 s, abandoned).
  test("a chunk with more goto/break/labels than max_code_jumps is refused before parsing", () =>
    hostile({
      code: `local s = ("while 1 do " .. ("break "):rep(32700) .. "end "):rep(4)
local g = ("goto x "):rep(20000) .. "::x::"
print("go")
local f, e = load(s)
local f2, e2 = load(g)
local ok = load("local t = {" .. ("'break goto ::x::', "):rep(20000) .. "} return #t")
while true do load(s) load(g) end`,
      marker: "go", expect: TIMEOUT(300),
      after: async (peer) => {
        const { sc } = await peer.exec({ code: `local s = ("while 1 do " .. ("break "):rep(32700) .. "end "):rep(4)
local f, e = load(s) local ok = load("local t = {" .. ("'break goto ::x::', "):rep(20000) .. "} return #t")
return {e, ok and ok()}` });
        const [e, n] = sc.result ?? [];
        const p = [];
        if (!/too many goto\/break statements and labels in one chunk: 130800, at most max_code_jumps=4096/.test(e)) p.push(`load error: ${e}`);
        if (n !== 20000) p.push(`keywords inside strings were counted: ${JSON.stringify(sc.result)}`);
        return p;
      },
    }));

  test("parsing in pieces changes nothing for normal code: syntax errors keep their line", () =>
    hostile({
      code: `local f, e = load("local a = 1\\n" .. ("local b = 2\\n"):rep(100) .. "x = = 1")
local g = load("local v " .. ("v = 1 "):rep(5000) .. "return v")
return {e, g()}`,
      expect: { success: true, result: ['[string "local a = 1..."]:102: unexpected symbol near \'=\'', 1] },
    }));
});

describe("string.format %q is bounded per call", () => {
  test("sixty arguments of ~1 MiB each are refused, naming the limit (ran 2.8 s before)", () =>
    hostile({
      code: `local s = ("\\1"):rep(2^20 - 16) local a = {} for i = 1, 60 do a[i] = s end
return string.format(("%q"):rep(60), table.unpack(a))`,
      timeout_ms: 30000, bound: 2000, memory_mb: 256,
      expect: { success: false, error_type: "runtime", error: /%q of strings over 262144 bytes in one call is not allowed/ },
    }));
  test("several small %q arguments still work", () =>
    hostile({ code: `return string.format("%q %q %q", "a\\n", "b", 1)`, expect: { success: true, result: '"a\\\n" "b" 1' } }));
});

describe("plain string.find polls the budget", () => {
  test("plain find on a 100 MB subject in a loop stops within 100 ms of cancellation", () =>
    cancelProbe({
      setup: `local s = ("a"):rep(2^20):rep(100)`,
      call: `while true do s:find("aaaab", 1, true) end`,
      memory_mb: 256,
    }));
  test("plain find still finds matches across its search windows", () =>
    hostile({
      code: `local s = ("a"):rep(2^20 + 3) .. "needle" .. ("b"):rep(2^21)
local long = ("a"):rep(2^20 + 1) .. "needle"
local r = {}
for _, t in ipairs{{s:find("needle", 1, true)}, {s:find("needle", 2^20 + 5, true)}, {s:find(long, 1, true)},
                   {s:find("bbbc", 1, true)}, {("abc"):find("", 2, true)}, {s:find("b", 1, true)}} do
  r[#r + 1] = "[" .. table.concat(t, ",") .. "]"
end
return table.concat(r, " ")`,
      memory_mb: 64,
      // what stock Lua 5.4 answers (lua5.4 -e with the same code)
      expect: { success: true, result: "[1048580,1048585] [] [3,1048585] [] [2,1] [1048586,1048586]" },
    }));
});

describe("string.pack output is capped", () => {
  test('string.pack("s4", 64 MB) in a loop is refused at once', () =>
    hostile({
      code: `local s = ("x"):rep(2^26) while true do string.pack("s4", s) end`,
      memory_mb: 512, args: ["--max-memory-mb", "1024"], timeout_ms: 5000, bound: 2000,
      expect: { success: false, error_type: "runtime", error: /string\.pack: the result would exceed 16777216 bytes/ },
    }));
  test("huge pack formats are refused by pack, unpack and packsize (30 MiB of '<' took 0.25 s in unpack)", () =>
    hostile({
      code: `local f = ("<"):rep(30 * 2^20)
local r = {}
for _, fn in ipairs{string.pack, string.unpack, string.packsize} do r[#r + 1] = select(2, pcall(fn, f, "")) end
return r`,
      memory_mb: 256, timeout_ms: 20000, bound: 5000,
      expect: { success: true, check: (sc) => {
        const r = sc.result ?? [];
        const p = [];
        for (const [i, name] of ["pack", "unpack", "packsize"].entries())
          if (!new RegExp(`bad argument #1 to '${name}' \\(format longer than 65536 bytes`).test(r[i])) p.push(`${name}: ${r[i]}`);
        return p;
      } },
    }));
  test("string.pack of ordinary records still round-trips", () =>
    hostile({
      code: `local p = string.pack("<i4 s2 z c3 d", -7, "hi", "zt", "abc", 1.5) return {#p, string.unpack("<i4 s2 z c3 d", p)}`,
      expect: { success: true, result: [22, -7, "hi", "zt", "abc", 1.5, 23] }, // as stock Lua 5.4
    }));
});

describe("os.clock is the execution's own CPU time", () => {
  test("an execution does not see CPU time spent by earlier executions", async () => {
    const peer = await startPeer(["--workers", "1"]);
    try {
      // The first execution burns at least 50 ms of its own CPU (measured by itself).
      const first = await peer.exec({ code: "local t0 = os.clock() while os.clock() - t0 < 0.05 do end return os.clock() - t0", timeout_ms: 10000 });
      assert.equal(first.sc.success, true, JSON.stringify(first.sc));
      assert.ok(first.sc.result >= 0.05);
      // The next one, on the same worker thread, starts near zero: before, os.clock() was the
      // process's CPU time and so at least the 50 ms above.
      const next = await peer.exec({ code: "return os.clock()" });
      assert.ok(next.sc.result >= 0 && next.sc.result < 0.05, `os.clock() at the start of an execution: ${next.sc.result}`);
      const grows = await peer.exec({ code: "local a = os.clock() local x = 0 for i = 1, 1e6 do x = x + i end return os.clock() > a" });
      assert.equal(grows.sc.result, true);
    } finally {
      await peer.dispose();
    }
  });
});
