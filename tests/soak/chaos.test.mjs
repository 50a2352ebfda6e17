// make chaos (CHAOS_S seconds, default 600; `make test` runs a short one): the load of
// tests/soak/harness.mjs while faults are injected one after another at seeded random moments
// (CHAOS_SEED, printed): worker processes SIGKILLed; upstream servers SIGKILLed and hung
// (SIGSTOP, then SIGCONT); with SOAK_STORE=pg, PostgreSQL stopped and restarted, and its
// postmaster killed with -9; the data directory's disk filled up (a small tmpfs, or a loop-mounted
// ext4 file, mounted by the test when it runs as root and may mount; else that fault is skipped,
// saying so); a client dropping its connection mid-answer (a 2025 session's SSE answer and a
// 2026-07-28 one); the clock of a held execution running out (an elicitation the client never
// answers, a 2026-07-28 input_required never retried, past mrtr_hold_ms).
//
// It holds when: neither server ever dies (and both exit 0 at the end); no answer is wrong or
// missing; every error a request got names one of the injected causes (EXPECTED below; any other
// text fails) and came while a fault was on or being recovered from; every acknowledged write is
// there afterwards (skills, workspace files, PII tokens that restore, journal rows); and after each
// fault ends, service comes back by itself within RECOVERY_S (30 s; each one measured and printed).

import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import http from "node:http";
import { mkdirSync, readFileSync, openSync, writeSync, closeSync, rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { TESTS_DIR } from "../lib/moonbox.mjs";
import { startSetup, Load, Sampler, verifyLedger, rng, int, childrenOf, httpClient, TOKENS, ElicitRequestSchema,
  CLIENT_TIMEOUT_MS, clientWarnings } from "./harness.mjs";

const DUR_S = Number(process.env.CHAOS_S || 600);
const STORE = process.env.SOAK_STORE === "pg" ? "pg" : "sqlite";
const SEED = Number(process.env.CHAOS_SEED || Math.floor(Math.random() * 1e9));
const INTERVAL_S = Number(process.env.SOAK_INTERVAL_S || (DUR_S < 600 ? 10 : 60));
const JSON_PATH = path.resolve(TESTS_DIR, "..", process.env.CHAOS_JSON || "build/chaos.jsonl");
const RECOVERY_S = 30;
const GRACE_MS = 3000; // an error may still arrive this long after its fault's recovery

/** The causes an error may name, one per injected fault (any other error text fails). */
const EXPECTED = [
  ["worker killed", /the worker process running this execution (died of SIGKILL|was lost)|its worker process was lost/],
  ["upstream killed or hung", /upstream server "(everything|memory)" (failed|is not available)|no answer to tools\/call within \d+ ms \(timeoutMs of mcpServers\.(everything|memory)/],
  ["store down", /PostgreSQL/],
  ["disk full", /No space left on device|database or disk is full/],
  // list_executions of an id given out while the history writer is down (either of the above)
  ["journal waits for the store", /in your journal yet: the journal cannot be written just now/],
];

test(`chaos: ${DUR_S} s, store ${STORE}, seed ${SEED}`, { timeout: (DUR_S + 600) * 1000 }, async () => {
  const log = (s) => console.log(s);
  mkdirSync(path.dirname(JSON_PATH), { recursive: true });
  const R = rng(SEED);
  log(`chaos: ${DUR_S} s, store ${STORE}, seed ${SEED} (CHAOS_SEED), samples every ${INTERVAL_S} s to ${JSON_PATH}; recovery bound ${RECOVERY_S} s`);
  const setup = await startSetup({ store: STORE, disk: true, diskMb: 64, log, httpArgs: ["--mrtr-hold-ms", "1000"] });
  const skipped = [];
  if (!setup.dirs.mount) skipped.push(`disk_full: ${setup.dirs.why}`);
  else log(`chaos: data directory on a ${setup.dirs.mount.kind} of ${setup.dirs.mount.size >> 20} MiB (${setup.dirs.mount.dir})`);
  if (STORE !== "pg") skipped.push("pg_stop, pg_kill9: the store is SQLite (SOAK_STORE=pg for PostgreSQL)");
  for (const s of skipped) log(`chaos: skipped ${s}`);
  let closed = false;
  // the client that never answers an elicitation (its own session of tenant bob)
  const mute = await httpClient(setup.url, TOKENS.bob, "chaos-mute", { elicitation: {} });
  mute.setRequestHandler(ElicitRequestSchema, () => new Promise(() => {}));
  try {
    const load = new Load(setup, { seed: SEED });
    const sampler = new Sampler(setup, load, { intervalMs: INTERVAL_S * 1000, jsonPath: JSON_PATH, log });
    const faults = [];
    const problems = [];
    const byServer = (name) => setup.clients.find((c) => c.server === name);
    const serverPid = (name) => (name === "http" ? setup.http.pid : setup.stdio.pid);

    // ---- probes: is the service back? -----------------------------------------------------
    const probes = {
      async exec(c) {
        const a = int(R, 1, 1e6);
        const res = await c.tool("execute_code", { code: "return a + 1", context_vars: { a } });
        return res.structuredContent?.success && res.structuredContent.result === a + 1;
      },
      async upstream(c, which) {
        const code = which === "memory" ? "return #servers.memory.read_graph{}.entities >= 0" : "return servers.everything.get_sum{a = 1, b = 2}";
        const res = await c.tool("execute_code", { code });
        return res.structuredContent?.success === true;
      },
      async write(c) {
        const n = int(R, 1, 1e9);
        const w = await c.tool("write_workspace_file", { path: "chaos/probe.txt", content: `probe ${n}` });
        const s = await c.tool("save_skill", { name: "chaos_probe", code: `return ${n}`, description: "probe" });
        return !w.isError && !s.isError;
      },
    };

    async function recover(probe) {
      const t0 = Date.now();
      for (;;) {
        try {
          if (await probe()) return Date.now() - t0;
        } catch { /* not yet */ }
        if (Date.now() - t0 > RECOVERY_S * 1000) return null;
        await sleep(100);
      }
    }

    // ---- the faults ---------------------------------------------------------------------------
    const hold = () => int(R, 1500, 4000);
    const FAULTS = {
      async worker_kill() {
        // a worker that runs an execution (state R in /proc) when there is one within a second,
        // and some of the others: killing only idle workers would test nothing but the respawn
        const srv = R() < 0.5 ? "http" : "stdio";
        let ws = [], running = [];
        for (let i = 0; i < 100 && !running.length; i++) {
          ws = childrenOf(serverPid(srv)).workers;
          running = ws.filter((w) => procState(w) === "R");
          if (!running.length) await sleep(10);
        }
        if (!ws.length) return { detail: `${srv}: no worker process to kill` };
        const victims = new Set([...running.slice(0, 1), ...ws.filter(() => R() < 0.3)]);
        if (!victims.size) victims.add(ws[int(R, 0, ws.length - 1)]);
        for (const w of victims) { try { process.kill(w, "SIGKILL"); } catch { /* gone */ } }
        return { detail: `${srv}: SIGKILL ${victims.size} of ${ws.length} workers (${running.length ? "one running" : "none was running"})`, probe: () => probes.exec(byServer(srv)) };
      },
      async upstream_kill() {
        const srv = R() < 0.5 ? "http" : "stdio", which = R() < 0.5 ? "everything" : "memory";
        const u = childrenOf(serverPid(srv)).upstreams.find((x) => x.name === which);
        if (!u) return { detail: `${srv}: no ${which} process` };
        process.kill(u.pid, "SIGKILL");
        return { detail: `${srv}: SIGKILL upstream ${which}`, probe: () => probes.upstream(byServer(srv), which) };
      },
      async upstream_hang() {
        const srv = R() < 0.5 ? "http" : "stdio", which = R() < 0.5 ? "everything" : "memory";
        const u = childrenOf(serverPid(srv)).upstreams.find((x) => x.name === which);
        if (!u) return { detail: `${srv}: no ${which} process` };
        const ms = hold();
        process.kill(u.pid, "SIGSTOP");
        await sleep(ms);
        try { process.kill(u.pid, "SIGCONT"); } catch { /* restarted meanwhile */ }
        return { detail: `${srv}: upstream ${which} stopped ${ms} ms`, probe: () => probes.upstream(byServer(srv), which) };
      },
      async pg_stop() {
        const ms = hold();
        await setup.pg.stop("fast");
        await sleep(ms);
        await setup.pg.start();
        return { detail: `PostgreSQL stopped (fast) for ${ms} ms`, probe: async () => (await probes.write(byServer("http"))) && probes.write(byServer("stdio")) };
      },
      async pg_kill9() {
        const ms = int(R, 500, 2000);
        const pid = setup.pg.pid;
        process.kill(pid, "SIGKILL");
        await sleep(ms);
        // its backends notice the postmaster's death and exit; until then a new one refuses to start
        const t0 = Date.now();
        for (;;) {
          try {
            await setup.pg.start();
            break;
          } catch (e) {
            if (Date.now() - t0 > 30000) throw e;
            await sleep(300);
          }
        }
        return { detail: `PostgreSQL postmaster SIGKILLed, restarted after ${Date.now() - t0 + ms} ms`, probe: async () => (await probes.write(byServer("http"))) && probes.write(byServer("stdio")) };
      },
      async disk_full() {
        const file = path.join(setup.dirs.mount.dir, "filler");
        const fd = openSync(file, "w");
        let bytes = 0;
        const big = Buffer.alloc(1 << 20, 0x61), small = Buffer.alloc(4096, 0x61);
        try {
          for (const b of [big, small]) {
            for (;;) {
              try { bytes += writeSync(fd, b); } catch (e) { if (e.code === "ENOSPC") break; throw e; }
            }
          }
        } finally {
          closeSync(fd);
        }
        const ms = hold();
        await sleep(ms);
        rmSync(file, { force: true });
        return { detail: `data directory's disk filled (${(bytes / 1048576).toFixed(1)} MiB of filler) for ${ms} ms`,
          probe: async () => (await probes.write(byServer("http"))) && probes.write(byServer("stdio")) };
      },
      async client_drop() {
        const modern = R() < 0.5;
        const dropped = await dropMidAnswer(setup.url, TOKENS.carol, modern);
        return { detail: `a client dropped its connection mid-answer (${modern ? "2026-07-28" : "2025-11-25 session, SSE"}; ${dropped})`, probe: () => probes.exec(byServer("http")) };
      },
      async held_timeout() {
        // an elicitation the client never answers: the execution's own clock runs out
        const res = await mute.callTool({ name: "execute_code", arguments: { timeout_ms: 1500, code:
          'return mcp.elicit{message = "never answered", requestedSchema = {type = "object", properties = {}}}' } }, undefined, { timeout: CLIENT_TIMEOUT_MS });
        const sc = res.structuredContent;
        if (sc?.error_type !== "timeout" || !/timeout_ms=1500/.test(sc.error)) problems.push(`held_timeout: an unanswered elicitation ended ${JSON.stringify(sc).slice(0, 300)}, not with the timeout naming timeout_ms=1500`);
        // a 2026-07-28 execution held for input that is never retried: gone after mrtr_hold_ms
        const first = await postModern(setup.url, TOKENS.bob, "execute_code", { timeout_ms: 60000, code:
          'return mcp.elicit{message = "never retried", requestedSchema = {type = "object", properties = {}}}' }, { elicitation: {} });
        const ir = first.result;
        if (ir?.resultType !== "input_required") {
          problems.push(`held_timeout: the 2026-07-28 elicitation was answered ${JSON.stringify(first).slice(0, 300)}, not input_required`);
        } else {
          await sleep(2500); // mrtr_hold_ms=1000 on the HTTP server, and the sweep
          const [key] = Object.keys(ir.inputRequests);
          const late = await postModern(setup.url, TOKENS.bob, "execute_code", { timeout_ms: 60000, code:
            'return mcp.elicit{message = "never retried", requestedSchema = {type = "object", properties = {}}}' }, { elicitation: {} },
          { requestState: ir.requestState, inputResponses: { [key]: { action: "accept", content: {} } } });
          if (late.error?.code !== -32602 || !/no longer held|expired|mrtr_hold_ms/.test(late.error.message)) {
            problems.push(`held_timeout: the retry after mrtr_hold_ms was answered ${JSON.stringify(late).slice(0, 300)}, not -32602 naming the expired hold`);
          }
        }
        return { detail: "an elicitation never answered (timeout_ms=1500); an input_required never retried (mrtr_hold_ms=1000)", probe: () => probes.exec(byServer("http")) };
      },
    };
    const enabled = Object.keys(FAULTS).filter((f) => !skipped.some((s) => s.split(/[:,]/).map((x) => x.trim()).includes(f)));

    const t0 = Date.now();
    sampler.t0 = t0;
    load.start();
    sampler.start();
    await sleep(Math.min(5000, DUR_S * 100));
    let bag = [];
    while (Date.now() - t0 < DUR_S * 1000 - 10000) { // the last 10 s without a new fault
      if (!bag.length) bag = [...enabled].sort(() => R() - 0.5);
      const name = bag.shift();
      const start = Date.now();
      let f;
      try {
        f = await FAULTS[name]();
      } catch (e) {
        problems.push(`fault ${name} could not be injected: ${e.stack}`);
        break;
      }
      const ended = Date.now();
      const recovery = f.probe ? await recover(f.probe) : 0;
      const rec = { name, at_s: Math.round((start - t0) / 1000), fault_ms: ended - start, recovery_ms: recovery, detail: f.detail,
        window: [start, ended + (recovery ?? RECOVERY_S * 1000) + GRACE_MS] };
      faults.push(rec);
      log(`chaos: fault ${name} at ${rec.at_s} s: ${f.detail}; ${recovery == null ? `NOT back within ${RECOVERY_S} s` : `service back ${recovery} ms after its end`}`);
      if (recovery == null) problems.push(`${name} (${f.detail}): service not back within ${RECOVERY_S} s`);
      if (setup.http.exit || setup.stdio.exit) break;
      await sleep(int(R, 1000, 4000));
    }
    while (Date.now() - t0 < DUR_S * 1000 && !setup.http.exit && !setup.stdio.exit) await sleep(200);
    sampler.stop();
    await load.stop();
    await sampler.sample();
    // the end: service on both servers before the check of what was acknowledged
    const finalBack = await recover(async () => (await probes.exec(byServer("http"))) && (await probes.exec(byServer("stdio")))
      && (await probes.write(byServer("http"))) && probes.write(byServer("stdio")));
    if (finalBack == null) problems.push(`service not back within ${RECOVERY_S} s at the end`);

    if (setup.http.exit) problems.push(`the HTTP server died: ${JSON.stringify(setup.http.exit)}\n${setup.http.stderr().slice(-2000)}`);
    if (setup.stdio.exit) problems.push(`the stdio server died\n${setup.stdio.stderr().slice(-2000)}`);
    const causes = {};
    const unexplained = [];
    for (const e of load.problems) {
      if (e.outcome !== "error") { unexplained.push(`${e.outcome} ${e.op} (${e.client}): ${String(e.text).slice(0, 300)}`); continue; }
      const cause = EXPECTED.find(([, re]) => re.test(e.text));
      const during = faults.some((f) => e.t >= f.window[0] && e.t - e.ms <= f.window[1]);
      if (!cause) unexplained.push(`error naming no injected cause, ${e.op} (${e.client}) at ${((e.t - t0) / 1000).toFixed(1)} s: ${String(e.text).slice(0, 300)}`);
      else if (!during) unexplained.push(`error outside every fault, ${e.op} (${e.client}) at ${((e.t - t0) / 1000).toFixed(1)} s: ${String(e.text).slice(0, 300)}`);
      else causes[cause[0]] = (causes[cause[0]] ?? 0) + 1;
    }
    const texts = {};
    for (const e of load.problems) {
      const k = `${e.outcome}: ${String(e.text).replace(/\d+/g, "N").slice(0, 160)}`;
      texts[k] = (texts[k] ?? 0) + 1;
    }
    log(`chaos: distinct error texts (digits as N):\n  ${Object.entries(texts).sort((a, b) => b[1] - a[1]).slice(0, 30).map(([k, n]) => `${n} x ${k}`).join("\n  ")}`);
    problems.push(...unexplained.slice(0, 25));
    if (unexplained.length > 25) problems.push(`... and ${unexplained.length - 25} more`);
    const ver = await verifyLedger(setup, load.ledger, { journalCheck: 600 }) // of journal_max_rows=1000 per tenant: room for the probes;
    problems.push(...ver.problems.slice(0, 40));
    const rec = faults.filter((f) => f.recovery_ms != null).map((f) => f.recovery_ms);
    log(`chaos: ${faults.length} faults (${JSON.stringify(faults.reduce((a, f) => ({ ...a, [f.name]: (a[f.name] ?? 0) + 1 }), {}))}); recovery max ${Math.max(0, ...rec)} ms`);
    log(`chaos: ${load.events.length} answers (${JSON.stringify(load.all)}); errors by cause ${JSON.stringify(causes)}`);
    log(`chaos: acknowledged writes checked: ${JSON.stringify(ver.checked)}`);
    if (clientWarnings.maxListeners) log(`chaos: the test client's MaxListenersExceededWarning ${clientWarnings.maxListeners} times (an SDK client leak, not the server's)`);
    closed = true;
    await mute.close().catch(() => {});
    const exits = await setup.close();
    if (exits.http && (exits.http.code !== 0 || exits.http.signal)) problems.push(`the HTTP server did not exit 0 on SIGTERM: ${JSON.stringify(exits.http)}`);
    log(problems.length ? `chaos: FAILED:\n  ${problems.join("\n  ")}` : "chaos: held");
    assert.deepEqual(problems, []);
  } finally {
    if (!closed) {
      await mute.close().catch(() => {});
      await setup.close({ graceful: false });
    }
  }
});

function procState(pid) {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, "utf8");
    return st.slice(st.lastIndexOf(")") + 2, st.lastIndexOf(")") + 3);
  } catch {
    return null;
  }
}

/** A 2026-07-28 tools/call over raw HTTP; resolves with the JSON-RPC message. */
async function postModern(url, token, name, args, caps = {}, extra = {}) {
  const body = { jsonrpc: "2.0", id: `c${Date.now()}`, method: "tools/call", params: { name, arguments: args, ...extra,
    _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps } } };
  const res = await fetch(url, { method: "POST", signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS), headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream", Authorization: `Bearer ${token}`,
    "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name }, body: JSON.stringify(body) });
  const text = await res.text();
  if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
    return text.split("\n").filter((l) => l.startsWith("data:") && l.length > 5).map((l) => JSON.parse(l.slice(5))).at(-1);
  }
  return text ? JSON.parse(text) : { status: res.status };
}

/** POSTs one raw request and resolves with {status, headers, body}. */
function rawPost(url, headers, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream", ...headers } }, (res) => {
      let b = "";
      res.on("data", (c) => { b += c; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: b }));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

/**
 * Starts an execution whose answer streams (log notifications over SSE, then a result) and drops
 * the connection once the first bytes of the answer have arrived. 2025: in a session of its own
 * (initialize first); 2026-07-28: sessionless (closing the connection cancels it).
 */
async function dropMidAnswer(url, token, modern) {
  const auth = { Authorization: `Bearer ${token}` };
  let headers;
  const code = `for i = 1, 6 do mcp.log("info", "tick " .. i) local t = os.clock() while os.clock() - t < 0.1 do end end return "done"`;
  let body;
  if (modern) {
    headers = { ...auth, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "execute_code" };
    body = { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "execute_code", arguments: { code },
      _meta: { progressToken: 1, "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/logLevel": "info" } } };
  } else {
    const init = await rawPost(url, { ...auth, "MCP-Protocol-Version": "2025-11-25" }, { jsonrpc: "2.0", id: 0, method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "chaos-drop", version: "0" } } });
    const sid = init.headers["mcp-session-id"];
    if (!sid) throw new Error(`initialize: ${init.status} ${init.body.slice(0, 200)}`);
    headers = { ...auth, "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": sid };
    await rawPost(url, headers, { jsonrpc: "2.0", method: "notifications/initialized" });
    body = { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "execute_code", arguments: { code }, _meta: { progressToken: 1 } } };
  }
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { req.destroy(); resolve("no answer bytes within 20 s; dropped anyway"); }, 20000);
    const req = http.request(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream", ...headers } }, (res) => {
      res.once("data", (c) => {
        clearTimeout(timer);
        req.destroy();
        resolve(`HTTP ${res.statusCode} ${res.headers["content-type"]}, dropped after ${c.length} bytes`);
      });
      res.on("error", () => {});
    });
    req.on("error", (e) => { if (!req.destroyed) reject(e); });
    req.end(JSON.stringify(body));
  });
}
