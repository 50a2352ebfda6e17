// Skill examples and tests (issue 35): `-- @example INPUT -> EXPECTED` lines in a skill's header
// and skills/tests/NAME_test.lua files; `moonbox test [NAME...]` runs them in the sandbox and
// prints TAP (exit 1 on a failure); save_skill runs a skill's examples before it writes anything
// and keeps the version in use when one fails; an edited file whose examples fail puts the
// previous version back in service and shows the failed example. The shipped skills pass their own.
// save_skill answers with luacheck's warnings (a child process the loop does not wait on), with a
// note when luacheck is missing or stopped past luacheck_timeout_ms.
// Run: cd tests && MOONBOX=../build/moonbox node run-node.mjs integration/skill_tests.test.mjs
import { describe, it, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import {
  MOONBOX, TESTS_DIR, connectWithSkills, execute, makeSkillsDir, storeArgs, toolErrText, toolOk, useServer,
} from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const SHIPPED = path.resolve(TESTS_DIR, "../skills");
const dirs = [];
after(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });
function tmp() {
  const d = mkdtempSync(path.join(tmpdir(), "moonbox-stest-"));
  dirs.push(d);
  return d;
}

/** moonbox test with args (a fresh data directory); resolves {status, stdout, stderr}. */
function mbTest(args) {
  const dataDir = tmp();
  return new Promise((resolve, reject) => {
    const p = spawn(MOONBOX, ["test", "--data-dir", dataDir, ...storeArgs(dataDir), ...args],
      { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => { stdout += d; });
    p.stderr.on("data", (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill("SIGKILL"), 50000);
    p.on("error", reject);
    p.on("close", (status) => { clearTimeout(timer); resolve({ status, stdout, stderr }); });
  });
}

const DOUBLE = `--- Doubles a number.
-- @param n number the number
-- @example {"n": 2} -> 4
-- @example {"n": -1.5} -> -3
return function(args) return args.n * 2 end
`;

describe("moonbox test", () => {
  it("the shipped skills pass their examples and tests (TAP, exit 0)", T, async () => {
    const r = await mbTest(["--skills-dir", SHIPPED]);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /^TAP version 13\n1\.\.(\d+)\n/);
    const n = Number(r.stdout.match(/^1\.\.(\d+)$/m)[1]);
    assert.ok(n >= 10, r.stdout);
    assert.equal((r.stdout.match(/^ok \d+ - /gm) || []).length, n, r.stdout);
    assert.match(r.stdout, /^ok \d+ - csv example 1 \(line \d+\)$/m);
    assert.match(r.stdout, /^ok \d+ - text_stats example 1 /m);
    assert.match(r.stdout, /^ok \d+ - csv test a quoted field keeps its commas/m);
    assert.match(r.stdout, new RegExp(`^# ${n} passed, 0 failed$`, "m"));
  });

  it("a failing example, a failing test, a test file that does not load: not ok with why, exit 1", T, async () => {
    const skills = makeSkillsDir({
      "double.lua": DOUBLE.replace('-> -3', '-> -4'),
      "tests/double_test.lua": `local double = require("skills.double")
test("zero", function() assert_eq(double({n = 0}), 0) end)
test("wrong on purpose", function() assert_eq(double({n = 5}), 11, "five") end)
test("raises", function() assert_error(function() double({}) end, "arithmetic") end)
`,
      "lib.lua": `--- A table of functions.
-- @example add [1, 2] -> 3
-- @example nope [1] -> 1
local M = {}
function M.add(a, b) return a + b end
return M
`,
      "tests/lib_test.lua": "test('x', function() end\n",
    });
    dirs.push(path.dirname(skills));
    const r = await mbTest(["--skills-dir", skills, "double", "lib"]);
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stdout, /^ok \d+ - double example 1 \(line 3\)$/m);
    assert.match(r.stdout, /^not ok \d+ - double example 2 \(line 4\)\n {2}---\n {2}message: "expected -4, got -3(\.0)?"\n {2}\.\.\.$/m);
    assert.match(r.stdout, /^ok \d+ - double test zero$/m);
    assert.match(r.stdout, /^not ok \d+ - double test wrong on purpose\n {2}---\n {2}message: "skills\/tests\/double_test\.lua:3: five: expected 11, got 10"/m);
    assert.match(r.stdout, /^ok \d+ - double test raises$/m);
    assert.match(r.stdout, /^ok \d+ - lib example 1 /m);
    assert.match(r.stdout, /^not ok \d+ - lib example 2 .*\n.*\n {2}message: "raised: the skill has no function nope"/m);
    assert.match(r.stdout, /^not ok \d+ - lib skills\/tests\/lib_test\.lua\n.*\n {2}message: ".*skills\/tests\/lib_test\.lua:2:/m);
    assert.match(r.stdout, /^# 4 passed, 4 failed$/m);
  });

  it("an unknown skill is not ok; a bad name exits 2", T, async () => {
    const r = await mbTest(["--skills-dir", SHIPPED, "nosuch"]);
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stdout, /^not ok 1 - nosuch loads\n.*\n {2}message: "load_skill: no skill named \\"nosuch\\"/m);
    const b = await mbTest(["--skills-dir", SHIPPED, "no-such"]);
    assert.equal(b.status, 2);
    assert.match(b.stderr, /no-such is not a skill name/);
  });
});

describe("save_skill runs the examples", () => {
  it("a failing example saves nothing and says which; the version in use stays; passing ones are written", T, async () => {
    await useServer(await connectWithSkills(), async (s) => {
      const saved = toolOk(await s.client.callTool({ name: "save_skill", arguments: {
        name: "double", description: "Doubles a number.", code: "return function(a) return a.n * 2 end",
        examples: [{ input: { n: 2 }, output: 4 }],
      } }));
      assert.equal(saved.saved_version, 1);
      const file = readFileSync(path.join(s.skillsDir, "double.lua"), "utf8");
      assert.match(file, /^-- @example \{"n":2\} -> 4$/m);
      // the example lines of the header come back in load_skill, and count when saved again
      const loaded = toolOk(await s.client.callTool({ name: "load_skill", arguments: { name: "double" } }));
      assert.deepEqual(loaded.examples.map((e) => [e.input, e.output]), [[{ n: 2 }, 4]]);

      const bad = await s.client.callTool({ name: "save_skill", arguments: {
        name: "double", description: "Doubles a number.", code: file.replace("a.n * 2", "a.n * 3"),
      } });
      assert.equal(bad.isError, true);
      assert.match(toolErrText(bad), /^skill double: example 1 \(line \d+\) failed: expected 4, got 6; nothing was saved \(version 1 stays in use\)/);
      assert.equal(readFileSync(path.join(s.skillsDir, "double.lua"), "utf8"), file);
      const res = await execute(s.client, { code: "return skills.double({n = 5})" });
      assert.equal(res.structuredContent.result, 10);

      const raised = await s.client.callTool({ name: "save_skill", arguments: {
        name: "double", description: "Doubles a number.", code: "return function(a) return a.x.y end",
        examples: [{ input: { n: 1 }, output: 2 }],
      } });
      assert.match(toolErrText(raised), /example 1 failed: raised: skills\/double\.lua:1: attempt to index a nil value \(field 'x'\)/);

      const badArg = await s.client.callTool({ name: "save_skill", arguments: {
        name: "other", description: "x", code: "return {}", examples: [{ call: "f", input: { a: 1 }, output: 1 }],
      } });
      assert.match(toolErrText(badArg), /examples\[1\]\.input must be an array of arguments for f/);
    });
  });

  it("an edited file whose example fails: the previous version stays in service, the failure is shown", T, async () => {
    await useServer(await connectWithSkills({ skills: { "double.lua": DOUBLE } }), async (s) => {
      const first = await execute(s.client, { code: "return skills.double({n = 4})" });
      assert.equal(first.structuredContent.result, 8);
      writeFileSync(path.join(s.skillsDir, "double.lua"), DOUBLE.replace("args.n * 2", "args.n * 2 + 1"));
      let d;
      for (let i = 0; i < 100; i++) {
        d = toolOk(await s.client.callTool({ name: "load_skill", arguments: { name: "double" } }));
        if (d.status === "error") break;
        await sleep(100);
      }
      assert.equal(d.status, "error", JSON.stringify(d));
      assert.match(d.error, /^skill double: example 1 \(line 3\) failed: expected 4, got 5/);
      assert.equal(d.error_line, 3);
      assert.equal(d.version, 1);
      const res = await execute(s.client, { code: "return skills.double({n = 4})" });
      assert.equal(res.structuredContent.result, 8);
      // fixed again: the new version passes and is in service
      writeFileSync(path.join(s.skillsDir, "double.lua"), DOUBLE.replace("args.n * 2", "2 * args.n"));
      for (let i = 0; i < 100; i++) {
        d = toolOk(await s.client.callTool({ name: "load_skill", arguments: { name: "double" } }));
        if (d.status === "ok" && d.version === 3) break;
        await sleep(100);
      }
      assert.equal(d.status, "ok", JSON.stringify(d));
      assert.equal(d.version, 3);
    });
  });
});

describe("save_skill answers with luacheck's warnings", () => {
  it("a misspelt global and a global write are reported with their lines; clean code has none", T, async () => {
    await useServer(await connectWithSkills(), async (s) => {
      const r = toolOk(await s.client.callTool({ name: "save_skill", arguments: {
        name: "typo", description: "Has a typo.",
        code: "return function(t)\n  result = tabel.concat(t, \",\")\n  return result\nend\n",
      } }));
      assert.equal(r.saved_version, 1);
      assert.equal(r.warnings_note, undefined);
      // the file has a one-line header above the code: the lines are the file's
      assert.deepEqual(r.warnings, [
        "skills/typo.lua:3:3: (W111) setting non-standard global variable 'result'",
        "skills/typo.lua:3:12: (W113) accessing undefined variable 'tabel'",
        "skills/typo.lua:4:10: (W113) accessing undefined variable 'result'",
      ]);
      const clean = toolOk(await s.client.callTool({ name: "save_skill", arguments: {
        name: "fine", description: "Clean.", code: "return function(t) return table.concat(t, json.encode(1)) end",
      } }));
      assert.deepEqual(clean.warnings, []);
      // saves from sandbox code are not linted (a loop of saves would pay a process each)
      const fromCode = await execute(s.client, { code: 'return save_skill("c", "return function() return tabel end", "From code.")' });
      assert.equal(fromCode.structuredContent.success, true, fromCode.structuredContent.error);
      assert.equal(fromCode.structuredContent.result.warnings, undefined);
    });
  });

  it("without luacheck the answer says so; one that hangs is stopped at luacheck_timeout_ms and the loop serves others meanwhile", T, async () => {
    const bin = tmp();
    await useServer(await connectWithSkills({ env: { PATH: bin } }), async (s) => {
      const r = toolOk(await s.client.callTool({ name: "save_skill", arguments: {
        name: "x", description: "X.", code: "return 1" } }));
      assert.deepEqual(r.warnings, []);
      assert.match(r.warnings_note, /^luacheck is not installed, so there are no lint warnings \(install Debian's lua-check/);
    });
    writeFileSync(path.join(bin, "luacheck"), "#!/bin/sh\nexec sleep 60\n");
    chmodSync(path.join(bin, "luacheck"), 0o755);
    await useServer(await connectWithSkills({ env: { PATH: `${bin}:/usr/bin:/bin` }, args: ["--luacheck-timeout-ms", "3000"] }), async (s) => {
      let saved = false;
      const save = s.client.callTool({ name: "save_skill", arguments: { name: "x", description: "X.", code: "return 1" } })
        .then((res) => { saved = true; return res; });
      const other = await execute(s.client, { code: "return 6 * 7" });
      assert.equal(other.structuredContent.result, 42);
      assert.equal(saved, false, "execute_code answered while save_skill waited for luacheck");
      const r = toolOk(await save);
      assert.equal(r.saved_version, 1);
      assert.equal(r.warnings_note, "luacheck did not answer within luacheck_timeout_ms=3000 and was stopped");
    });
  });
});
