// make soak (SOAK_S seconds, default 1800; `make test` runs it with SOAK_S=60): the load of
// tests/soak/harness.mjs against an HTTP and a stdio server on one data directory for SOAK_S
// seconds, a table line every SOAK_INTERVAL_S (default 60; 10 for runs under 10 minutes) and
// the same figures as JSON lines in SOAK_JSON (default build/soak.jsonl, relative to the
// repository). SOAK_STORE=pg puts the store in a throwaway PostgreSQL cluster; SOAK_SEED makes
// the mix repeatable (printed either way).
//
// It holds when: no answer was wrong, missing or an error; both servers lived to the end and
// exit 0 on SIGTERM / EOF; every acknowledged write is there (verifyLedger); nothing grew
// without bound after warm-up (RSS of each server and of its workers, descriptors, threads:
// MARGINS in harness.mjs); and the p50 latency of trivial executions in the last window is at
// most 3 x the first window's + 50 ms (windows of min(600 s, a third of the run after warm-up)).

import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import { mkdirSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { TESTS_DIR } from "../lib/moonbox.mjs";
import { startSetup, Load, Sampler, judgeSoak, verifyLedger, MARGINS, clientWarnings } from "./harness.mjs";

const DUR_S = Number(process.env.SOAK_S || 1800);
const INTERVAL_S = Number(process.env.SOAK_INTERVAL_S || (DUR_S < 600 ? 10 : 60));
const STORE = process.env.SOAK_STORE === "pg" ? "pg" : "sqlite";
const SEED = Number(process.env.SOAK_SEED || Math.floor(Math.random() * 1e9));
const JSON_PATH = path.resolve(TESTS_DIR, "..", process.env.SOAK_JSON || "build/soak.jsonl");
const WARM_S = Math.min(300, Math.max(10, Math.round(DUR_S * 0.25)));
const WINDOW_S = Math.min(600, Math.max(10, Math.round((DUR_S - WARM_S) / 3)));

test(`soak: ${DUR_S} s, store ${STORE}, seed ${SEED}`, { timeout: (DUR_S + 600) * 1000 }, async () => {
  const log = (s) => console.log(s);
  mkdirSync(path.dirname(JSON_PATH), { recursive: true });
  log(`soak: ${DUR_S} s, store ${STORE}, seed ${SEED} (SOAK_SEED), samples every ${INTERVAL_S} s to ${JSON_PATH}; warm-up ${WARM_S} s, latency windows ${WINDOW_S} s`);
  log(`soak: margins: RSS last third <= ${MARGINS.rssRatio} x first third + ${MARGINS.rssFloor >> 20} MiB (workers together: + ${MARGINS.workersFloor >> 20} MiB), descriptors + ${MARGINS.fds}, threads + ${MARGINS.threads}, trivial p50 last window <= ${MARGINS.latencyRatio} x first + ${MARGINS.latencyFloorMs} ms`);
  const setup = await startSetup({ store: STORE, log });
  let closed = false;
  try {
    const load = new Load(setup, { seed: SEED });
    const sampler = new Sampler(setup, load, { intervalMs: INTERVAL_S * 1000, jsonPath: JSON_PATH, log });
    const t0 = Date.now();
    sampler.t0 = t0;
    load.start();
    sampler.start();
    while (Date.now() - t0 < DUR_S * 1000) {
      await sleep(Math.min(1000, DUR_S * 1000 - (Date.now() - t0)));
      if (setup.http.exit || setup.stdio.exit) break;
    }
    sampler.stop();
    await load.stop();
    await sampler.sample();
    const problems = [];
    if (setup.http.exit) problems.push(`the HTTP server died: ${JSON.stringify(setup.http.exit)}\n${setup.http.stderr().slice(-1500)}`);
    if (setup.stdio.exit) problems.push(`the stdio server died\n${setup.stdio.stderr().slice(-1500)}`);
    for (const p of load.problems.slice(0, 20)) problems.push(`${p.outcome} ${p.op} (${p.client}) after ${p.ms.toFixed(0)} ms: ${String(p.text).slice(0, 300)}`);
    if (load.problems.length > 20) problems.push(`... and ${load.problems.length - 20} more wrong, missing or failed answers`);
    const judged = judgeSoak(sampler.samples, load.events, { t0, durS: DUR_S, warmS: WARM_S, windowS: WINDOW_S });
    problems.push(...judged.problems);
    const ver = await verifyLedger(setup, load.ledger);
    problems.push(...ver.problems);
    const byKind = {};
    for (const e of load.events) byKind[e.op] = (byKind[e.op] ?? 0) + 1;
    log(`soak: ${load.events.length} answers (${JSON.stringify(load.all)}); by kind ${JSON.stringify(byKind)}`);
    log(`soak: trend ${JSON.stringify(judged.summary)}`);
    log(`soak: acknowledged writes checked: ${JSON.stringify(ver.checked)}`);
    if (clientWarnings.maxListeners) log(`soak: the test client's MaxListenersExceededWarning ${clientWarnings.maxListeners} times (an SDK client leak, not the server's)`);
    closed = true;
    const exits = await setup.close();
    if (exits.http && (exits.http.code !== 0 || exits.http.signal)) problems.push(`the HTTP server did not exit 0 on SIGTERM: ${JSON.stringify(exits.http)}`);
    log(problems.length ? `soak: FAILED:\n  ${problems.join("\n  ")}` : "soak: held");
    assert.deepEqual(problems, []);
  } finally {
    if (!closed) await setup.close({ graceful: false });
  }
});
