// `moonbox run` (issue 35): one chunk in the sandbox from the shell, with the server's own
// configuration (a moonbox started for the run as a stdio server, this CLI its client). The
// result is printed as pretty JSON on stdout, output, errors and the limits used on stderr; the
// exit status says success (0), an error in the code (1), bad arguments (2), a limit (3). Also a
// skill by name with --args, context_vars from a file, and an upstream tool of the real
// server-everything configured with --config.
// Run: cd tests && MOONBOX=../build/moonbox node run-node.mjs integration/run_cli.test.mjs
import { describe, it, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { MOONBOX, TESTS_DIR, UPSTREAM_JS, nodeServer } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const dirs = [];
after(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });
function tmp() {
  const d = mkdtempSync(path.join(tmpdir(), "moonbox-run-"));
  dirs.push(d);
  return d;
}

/** Runs moonbox run with args (a fresh data directory first); resolves {status, stdout, stderr}. */
function run(args, dataDir = tmp()) {
  return new Promise((resolve, reject) => {
    const p = spawn(MOONBOX, ["run", "--data-dir", dataDir, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => { stdout += d; });
    p.stderr.on("data", (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill("SIGKILL"), 50000);
    p.on("error", reject);
    p.on("close", (status) => { clearTimeout(timer); resolve({ status, stdout, stderr }); });
  });
}

describe("moonbox run", () => {
  it("a file and -e: the result as JSON, the output, the limits used; exit 0", T, async () => {
    const dir = tmp();
    const file = path.join(dir, "job.lua");
    writeFileSync(file, 'print("counting")\nlocal n = 0 for _, r in ipairs(rows) do n = n + r end\nreturn { total = n, rows = #rows }\n');
    const ctx = path.join(dir, "ctx.json");
    writeFileSync(ctx, JSON.stringify({ rows: [1, 2, 3, 4] }));
    const r = await run([file, "--context-vars", `@${ctx}`]);
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), { total: 10, rows: 4 });
    assert.match(r.stderr, /--- output\ncounting\n/);
    assert.match(r.stderr, /ms, \d+ instructions, \d+ bytes of memory at most; context: \d+ bytes in/);
    const e = await run(["-e", "return x * 2", "--context-vars", '{"x": 21}']);
    assert.equal(e.status, 0, e.stderr);
    assert.equal(JSON.parse(e.stdout), 42);
  });

  it("an error exits 1 with the message and line; a limit exits 3 naming it; bad arguments exit 2", T, async () => {
    const err = await run(["-e", "local t = nil\nreturn t.x"]);
    assert.equal(err.status, 1, err.stderr);
    assert.equal(err.stdout, "");
    assert.match(err.stderr, /--- error \(runtime\)\ncode:2: attempt to index a nil value/);
    const lim = await run(["--default-timeout-ms", "200", "-e", "while true do end"]);
    assert.equal(lim.status, 3, lim.stderr);
    assert.match(lim.stderr, /--- error \(timeout\)\ntimeout: execution exceeded timeout_ms=200/);
    for (const bad of [[], ["-e"], ["a.lua", "b.lua"], ["-e", "return 1", "--context-vars", "[1]"],
      ["-e", "return 1", "--context-vars", "{nope"], ["--args", "{}", "-e", "return 1"], ["--http", "127.0.0.1:0", "-e", "1"],
      [path.join(tmp(), "missing.lua")]]) {
      const b = await run(bad);
      assert.equal(b.status, 2, `${JSON.stringify(bad)}: ${b.stderr}`);
      assert.ok(b.stderr.length > 0, JSON.stringify(bad));
    }
  });

  it("--skill NAME --args JSON runs a skill of --skills-dir as require(\"skills.NAME\")(args)", T, async () => {
    const r = await run(["--skills-dir", path.join(TESTS_DIR, "../skills"), "--skill", "text_stats",
      "--args", '{"text": "one two two"}']);
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout);
    assert.equal(out.words, 3, r.stdout);
    assert.deepEqual(out.top_words[0], { word: "two", count: 2 });
    const missing = await run(["--skills-dir", path.join(TESTS_DIR, "../skills"), "--skill", "no_such_skill"]);
    assert.equal(missing.status, 1, missing.stderr);
    assert.match(missing.stderr, /no_such_skill/);
  });

  it("calls an upstream tool of the server's --config (server-everything)", T, async () => {
    const dir = tmp();
    const cfg = path.join(dir, "config.json");
    writeFileSync(cfg, JSON.stringify({ mcpServers: { everything: nodeServer(UPSTREAM_JS.everything) } }));
    const r = await run(["--config", cfg, "-e", 'return servers.everything.echo({ message = "hi from run" })']);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /hi from run/);
  });
});
