// Hostile sandbox code against the host-call interface (skills from the sandbox): floods,
// oversized arguments, deep and cyclic requires, hostile names, cancellation and the deadline
// while calls are in flight, and a published skill that tries to escape its limits.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { check, cancelProbe, hostile, sequence } from "./harness.mjs";
import { startPeer } from "./peer.mjs";

describe("host-call floods and limits", () => {
  test("a flood of host calls stops at max_host_calls with an error naming the limit", () =>
    check("for i = 1, 1000000 do list_skills() end", {
      success: false, error_type: "runtime",
      error: /too many calls to the server in one execution \(max_host_calls=50\)/,
    }, { args: ["--max-host-calls", "50"] }));

  test("max_host_calls cannot be swallowed by pcall to go on calling", () =>
    check("local n = 0 for i = 1, 200 do if pcall(list_skills) then n = n + 1 end end return n", {
      success: true, result: 20,
    }, { args: ["--max-host-calls", "20"] }));

  test("a flood of host calls is stopped by the deadline, on time", () =>
    hostile({
      code: "while true do list_skills() end", timeout_ms: 300,
      expect: { success: false, error_type: "timeout", error: /timeout_ms=300/ },
      args: ["--max-host-calls", "100000000"],
    }));

  test("cancelling during a flood of host calls frees the worker at once", () =>
    cancelProbe({ setup: "", call: "while true do list_skills() end", args: ["--max-host-calls", "100000000"] }));

  test("save_skill with code above max_skill_bytes is refused naming the limit", () =>
    check('return save_skill("big", "return " .. string.rep("1+", 3000) .. "1", "big")', {
      success: false, error_type: "runtime", error: /above max_skill_bytes=4096/,
    }, { args: ["--max-skill-bytes", "4096"] }));

  test("huge host-call arguments are bounded by the sandbox memory cap, not the host", () =>
    check('local s = string.rep("x", 200 * 1024 * 1024) return save_skill("big", s, "d")', {
      success: false, error_type: "memory",
    }, { memory_mb: 16 }));
});

describe("require cannot be turned into a file or module loader", () => {
  for (const [name, mod] of [
    ["a path", "skills/../../etc/passwd"],
    ["a dotted path", "skills.a.b"],
    ["an empty skill name", "skills."],
    ["a NUL byte", "skills.a\\0b"],
    ["a Lua library", "string"],
    ["a C module name", "lpeg"],
  ]) {
    test(`require of ${name} is refused`, () =>
      check(`return require("${mod}")`, { success: false, error_type: "runtime", error: /not found: only skills can be required/ }));
  }

  test("skills.<non-identifier> is nil, not a lookup", () =>
    check('return skills["../x"] == nil, skills[1] == nil', { success: true, result: [true, true] }));

  test("the skills table is read-only and its metatable is locked", () =>
    check("local ok = pcall(function() skills.x = 1 end) return ok, getmetatable(skills)", {
      success: true, result: [false, false],
    }));
});

describe("cycles and depth", () => {
  test("a self-requiring skill reports the cycle", async () => {
    const [save, run] = await sequence([
      'return save_skill("selfish", "return require(\\"skills.selfish\\")", "requires itself").status',
      'return require("skills.selfish")',
    ]);
    assert.equal(save.result, "ok");
    assert.equal(run.success, false);
    assert.match(run.error, /cycle between skills: skills\.selfish -> skills\.selfish/);
  });

  test("a chain of 300 skills each requiring the next ends with a clean error, not a crash", async () => {
    const saves = [];
    for (let i = 0; i < 300; i++) {
      saves.push(`save_skill("c${i}", "return require(\\"skills.c${i + 1}\\")", "chain ${i}")`);
    }
    saves.push('save_skill("c300", "return 300", "end of chain")');
    const [made, run, after] = await sequence([
      { code: saves.join("\n") + "\nreturn true", timeout_ms: 20000 },
      { code: 'return require("skills.c0")', timeout_ms: 5000 },
      "return 1",
    ]);
    assert.equal(made.success, true, JSON.stringify(made.error));
    assert.equal(run.success, false);
    assert.match(run.error, /stack overflow|C stack overflow/);
    assert.equal(after.result, 1);
  });
});

describe("a published skill cannot escape the sandbox", () => {
  test("a published tool that loops forever is stopped by the default timeout", async () => {
    // the instruction budget is raised so the deadline, not the budget, is what stops it on a
    // fast machine (100M instructions took under 300 ms in CI)
    const peer = await startPeer(["--default-timeout-ms", "300", "--default-instruction-limit", "10000000000"]);
    try {
      const { sc } = await peer.exec({
        code: 'return save_skill{name = "spin", code = "return function() while true do end end", ' +
          'description = "spins", tool = true}.status',
      });
      assert.equal(sc.result, "ok");
      const { msg: r, ms } = await peer.request("tools/call", { name: "spin", arguments: {} }, 5000);
      assert.equal(r.result.isError, true);
      assert.match(r.result.content[0].text, /timeout: execution exceeded timeout_ms=300/);
      assert.ok(ms < 300 + 1000, `answered after ${ms} ms`); // (a loaded machine adds latency)
    } finally {
      await peer.dispose();
    }
  });

  test("a published tool sees the same restricted globals as execute_code", async () => {
    const peer = await startPeer();
    try {
      await peer.exec({
        code: 'return save_skill{name = "probe", code = "return function() return {io == nil, os.execute == nil, ' +
          'debug == nil, package == nil, string.dump == nil} end", description = "probe", tool = true}',
      });
      const { msg: r } = await peer.request("tools/call", { name: "probe", arguments: {} }, 5000);
      assert.notEqual(r.result.isError, true, JSON.stringify(r));
      assert.equal(r.result.content[0].text, "[true,true,true,true,true]");
    } finally {
      await peer.dispose();
    }
  });
});
