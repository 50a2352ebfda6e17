// isolation.mjs - thread and process isolation measured in the same run (issue 15; make bench).
//
//   node tests/bench/isolation.mjs MOONBOX [BENCH_CLIENT] [ROUNDS]
//
// Prints, for both modes, the medians over ROUNDS interleaved rounds of bench_client's
// sequential round trip p50 and pipelined executions/s (2 workers), and their ratio; then, for
// process mode, how long a request waits for a replaced worker after a kill (refill), the RSS
// of an idle worker process, and the cost of one call across the worker boundary: a workspace
// operation (a direct call on a thread, a round trip in process mode) and a host call answered
// by the loop (a round trip in both). Figures are medians; the machine is shared, so compare
// within one run only.

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const [, , MOONBOX, CLIENT, ROUNDS = "5"] = process.argv;
if (!MOONBOX) {
  console.error("usage: node isolation.mjs MOONBOX [BENCH_CLIENT] [ROUNDS]");
  process.exit(2);
}
const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN;
};

function clientRound(mode) {
  const dir = mkdtempSync(path.join(tmpdir(), "mb-iso-"));
  const r = spawnSync(CLIENT, ["-n", "2000", "-u", "200", "-P", "0", "-m", "20000", "-w", "256", "-s", "0", "--",
    MOONBOX, "--data-dir", dir, "--isolation", mode, "--workers", "2"], { encoding: "utf8" });
  rmSync(dir, { recursive: true, force: true });
  const kv = Object.fromEntries(r.stdout.split("\n").filter((l) => l.includes("=")).map((l) => l.split("=")));
  return { p50: Number(kv.seq_p50_us), pipe: Number(kv.pipe_execs_per_s) };
}

/** A raw stdio peer: request() resolves with the response of its id. */
function peer(mode, args = [], env = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), "mb-iso-"));
  const child = spawn(MOONBOX, ["--data-dir", dir, "--isolation", mode, ...args],
    { stdio: ["pipe", "pipe", "ignore"], env: { ...process.env, ...env } });
  const waiting = new Map();
  let buf = "", next = 1;
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (c) => {
    buf += c;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const m = JSON.parse(line);
      const w = waiting.get(m.id);
      if (w) { waiting.delete(m.id); w(m); }
    }
  });
  const request = (method, params) => new Promise((resolve) => {
    const id = next++;
    waiting.set(id, resolve);
    child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
  });
  const exec = async (code, extra = {}) =>
    (await request("tools/call", { name: "execute_code", arguments: { code, ...extra } })).result.structuredContent;
  const close = async () => {
    child.stdin.end();
    await new Promise((r) => child.on("exit", r));
    rmSync(dir, { recursive: true, force: true });
  };
  return { child, request, exec, close,
    init: () => request("initialize", { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bench", version: "1" } }) };
}

const fmt = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "n/a");

const modes = { thread: { p50: [], pipe: [] }, process: { p50: [], pipe: [] } };
if (CLIENT) {
  for (let r = 0; r < Number(ROUNDS); r++) {
    for (const m of ["thread", "process"]) {
      const x = clientRound(m);
      modes[m].p50.push(x.p50);
      modes[m].pipe.push(x.pipe);
    }
  }
  const t = modes.thread, p = modes.process;
  console.log(`isolation: sequential p50 thread ${fmt(median(t.p50))} us, process ${fmt(median(p.p50))} us ` +
    `(x${fmt(median(p.p50) / median(t.p50), 2)}); pipelined thread ${fmt(median(t.pipe), 0)}/s, ` +
    `process ${fmt(median(p.pipe), 0)}/s (${fmt(100 * median(p.pipe) / median(t.pipe), 0)}%); ${ROUNDS} rounds, 2 workers`);
}

// refill: one worker; a stuck execution is killed at its deadline, the next request waits for
// the replacement. Wait = its round trip minus a normal round trip.
{
  const s = peer("process", ["--workers", "1"], { MOONBOX_TEST_STALL_MS: "2000" });
  await s.init();
  const normal = [], after = [];
  for (let i = 0; i < 10; i++) {
    let t0 = performance.now();
    await s.exec("return 1");
    normal.push(performance.now() - t0);
    await s.exec("-- MOONBOX_TEST_STALL\nreturn 1", { timeout_ms: 20 });
    t0 = performance.now();
    await s.exec("return 1");
    after.push(performance.now() - t0);
  }
  console.log(`isolation: refill after a kill: the next request waits ${fmt(median(after) - median(normal), 2)} ms ` +
    `for the new worker process (median of 10)`);
  // RSS of the idle worker process(es)
  const kids = readdirSync("/proc").filter((d) => /^\d+$/.test(d)).filter((d) => {
    try { return readFileSync(`/proc/${d}/stat`, "utf8").split(") ")[1].split(" ")[1] === String(s.child.pid); } catch { return false; }
  });
  const rss = kids.map((d) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${d}/status`, "utf8"))?.[1]));
  console.log(`isolation: idle worker process RSS ${rss.map((k) => fmt(k / 1024, 1)).join(", ")} MiB`);
  await s.close();
}

// the cost of one crossing: N calls in one execution, minus an empty execution, per call
for (const m of ["thread", "process"]) {
  const s = peer(m, ["--workers", "1", "--max-host-calls", "100000"]);
  await s.init();
  const N = 2000, per = { ws: [], host: [] };
  for (let i = 0; i < 5; i++) {
    const base = (await s.exec("return 1")).execution_time_ms;
    const ws = (await s.exec(`for i = 1, ${N} do file_exists("x") end return 1`)).execution_time_ms;
    const host = (await s.exec(`for i = 1, ${N} do mcp.tools() end return 1`)).execution_time_ms;
    per.ws.push(((ws - base) * 1000) / N);
    per.host.push(((host - base) * 1000) / N);
  }
  console.log(`isolation: ${m}: one workspace call ${fmt(median(per.ws), 2)} us, one host call answered by the loop ` +
    `${fmt(median(per.host), 2)} us`);
  await s.close();
}
