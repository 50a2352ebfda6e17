// Crash safety of the store and the skills directory (issue 4): "an acknowledged write survives
// kill -9 of the server at any moment, and the database passes PRAGMA integrity_check afterwards".
//
// A save storm: one data directory (and its skills/ directory) is reused across several rounds.
// Each round starts moonbox, keeps a window of save_skill requests in flight (raw JSON-RPC,
// pipelined: a new request goes out as soon as one is answered), and kills the process with
// SIGKILL at a random moment 10-300 ms after the first acknowledgement. A save counts as
// acknowledged when its successful response was written by moonbox (read from the pipe, also
// after the kill). After each kill:
//   - `sqlite3 moonbox.db "PRAGMA integrity_check"` prints "ok" (on odd rounds the shell runs on
//     the file itself and so recovers the WAL; on even rounds it runs on a copy of moonbox.db and
//     its WAL, so that moonbox has to recover the WAL itself at the next start);
//   - the next start serves, and EVERY save acknowledged in any round so far is there: the file
//     holds exactly the generated header plus the code sent, load_skill returns that code (and the
//     body after the header equals the code sent), skill_history lists the acknowledged version as
//     a compiled "save", and skill_history(name, version) returns the same source;
//   - a save that was in flight and not acknowledged is wholly present or wholly absent (its file
//     is either missing or complete), never half-written;
//   - temporary files of interrupted atomic writes (".<name>.lua.tmp-XXXXXX") may remain, but are
//     never listed as skills or as problems by list_skills.
// A second test does the same with execute_code calls whose sandbox code calls save_skill twice
// (host calls from the sandbox): an acknowledged execution means both of its saves are durable.
// The output reports how many saves were acknowledged and how many kills were done.

import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { makeDataDir, spawnRaw, sqlite3Cli } from "../lib/moonbox.mjs";

const WINDOW = 48;          // requests kept in flight during a storm
const KILL_MIN_MS = 10;     // kill this long after the first acknowledgement ...
const KILL_MAX_MS = 300;    // ... at most this long
const FIRST_ACK_TIMEOUT_MS = 15000;

/**
 * Dispatches the responses of one RawPeer by id without rescanning every line for every waiter
 * (verification sends thousands of requests). `onResponse` sees every response in order.
 */
class Rpc {
  constructor(peer) {
    this.peer = peer;
    this.cursor = 0;
    this.waiting = new Map();
    this.onResponse = null;
    // RawPeer registered its stdout listener first, so the lines are parsed when this runs.
    peer.child.stdout.on("data", () => this.drain());
    // "close" comes after the last stdout data event, also when the process was killed.
    // A failed spawn (e.g. the binary being rebuilt) emits "error"; report it instead of crashing.
    this.spawnError = null;
    this.closed = new Promise((resolve) => {
      const done = () => {
        this.drain();
        const why = this.spawnError ? `could not run moonbox: ${this.spawnError.message}` : "moonbox exited";
        for (const [id, w] of this.waiting) w.reject(new Error(`${why} before answering ${id}; stderr:\n${peer.stderr.slice(-2000)}`));
        this.waiting.clear();
        resolve();
      };
      peer.child.once("close", done);
      peer.child.once("error", (e) => {
        this.spawnError = e;
        done();
      });
    });
  }

  drain() {
    const lines = this.peer.lines;
    while (this.cursor < lines.length) {
      const m = lines[this.cursor++].msg;
      if (!m || typeof m !== "object" || !("id" in m) || !("result" in m || "error" in m)) continue;
      const w = this.waiting.get(m.id);
      if (w) {
        this.waiting.delete(m.id);
        w.resolve(m);
      }
      if (this.onResponse) this.onResponse(m);
    }
  }

  /** Sends tools/call without waiting. */
  send(id, name, args) {
    this.peer.send({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });
  }

  /** Sends tools/call and resolves with the response message. */
  call(id, name, args) {
    const p = new Promise((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    this.send(id, name, args);
    return p;
  }
}

/** Starts moonbox on dataDir and initializes it. */
async function start(dataDir) {
  const peer = spawnRaw({ dataDir, args: ["--log-level", "warning"] });
  const rpc = new Rpc(peer);
  try {
    await Promise.race([peer.initialize(), rpc.closed.then(() => {
      if (rpc.spawnError) throw new Error(`could not run moonbox: ${rpc.spawnError.message}`);
    })]);
  } catch (e) {
    peer.child.kill("SIGKILL");
    await rpc.closed;
    throw e;
  }
  return { peer, rpc };
}

/** The file save_skill writes for a skill saved with this description and code. */
const fileText = (e) => `--- ${e.description}\n${e.code}`;

/** The source after a leading "---" documentation block (what save_skill was given). */
function stripHeader(src) {
  const lines = src.split("\n");
  let i = 0;
  if (!/^\s*---/.test(lines[0] ?? "")) return src;
  while (i < lines.length && /^\s*--/.test(lines[i])) i++;
  while (i < lines.length && /^\s*$/.test(lines[i])) i++;
  return lines.slice(i).join("\n");
}

const clip = (v, n = 500) => {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s.length > n ? `${s.slice(0, n)}... (${s.length} chars)` : s;
};

/**
 * One round of the storm: keeps WINDOW requests in flight and kills moonbox with SIGKILL
 * KILL_MIN_MS..KILL_MAX_MS after the first acknowledgement.
 *
 * kind "tool": each request is save_skill {name, code, description}.
 * kind "exec": each request is execute_code whose Lua code calls save_skill twice.
 * Returns { acked: [{name, code, description, version}], unacked: [...same without version],
 *           failures: [messages], inFlightAtKill, delay, sent }.
 */
async function stormRound(dataDir, round, kind) {
  const { peer, rpc } = await start(dataDir);
  const pending = new Map(); // id -> [{name, code, description}]
  const acked = [];
  const failures = [];
  let sent = 0;
  let answered = 0;
  let stopped = false;
  let firstAck;
  const gotFirstAck = new Promise((resolve) => (firstAck = resolve));

  const sendOne = () => {
    const i = sent++;
    const id = `${kind}${round}_${i}`;
    const value = round * 10000 + i;
    if (kind === "tool") {
      const e = { name: `s${round}_${i}`, code: `return ${value}`, description: `storm save ${round}/${i}` };
      pending.set(id, [e]);
      rpc.send(id, "save_skill", e);
    } else {
      const a = { name: `e${round}_${i}_a`, code: `return ${value}`, description: `exec save ${round}/${i} a` };
      const b = { name: `e${round}_${i}_b`, code: `return {${value}}`, description: `exec save ${round}/${i} b` };
      pending.set(id, [a, b]);
      const lua = (e) => `save_skill(${JSON.stringify(e.name)}, ${JSON.stringify(e.code)}, ${JSON.stringify(e.description)})`;
      rpc.send(id, "execute_code", { code: `local a = ${lua(a)}\nlocal b = ${lua(b)}\nreturn { a = a, b = b }` });
    }
  };

  rpc.onResponse = (m) => {
    const saves = pending.get(m.id);
    if (!saves) return;
    pending.delete(m.id);
    answered++;
    const sc = m.result?.structuredContent;
    let versions = null;
    if (kind === "tool") {
      if (m.result && m.result.isError === false && sc && Number.isInteger(sc.saved_version)) versions = [sc.saved_version];
    } else if (m.result && m.result.isError === false && sc && sc.success === true && sc.result &&
        Number.isInteger(sc.result.a?.saved_version) && Number.isInteger(sc.result.b?.saved_version)) {
      versions = [sc.result.a.saved_version, sc.result.b.saved_version];
    }
    if (versions) {
      saves.forEach((e, k) => acked.push({ ...e, version: versions[k] }));
      firstAck();
    } else {
      failures.push(`${m.id}: ${clip(m)}`);
    }
    if (!stopped) sendOne();
  };

  for (let k = 0; k < WINDOW; k++) sendOne();
  const ac = new AbortController();
  const timeout = sleep(FIRST_ACK_TIMEOUT_MS, "timeout", { signal: ac.signal }).catch(() => "aborted");
  const first = await Promise.race([gotFirstAck.then(() => "ack"), rpc.closed.then(() => "exit"), timeout]);
  ac.abort(); // do not keep the test process alive for the rest of the timeout
  if (first !== "ack") {
    peer.child.kill("SIGKILL");
    await rpc.closed;
    throw new Error(`round ${round}: no save was acknowledged (${first}); failures: ${failures.slice(0, 3).join("; ")}; stderr:\n${peer.stderr.slice(-2000)}`);
  }
  const delay = Math.round(KILL_MIN_MS + Math.random() * (KILL_MAX_MS - KILL_MIN_MS));
  await sleep(delay);
  stopped = true;
  const inFlightAtKill = sent - answered;
  const alive = peer.exitCode === undefined && !peer.exitSignal;
  peer.child.kill("SIGKILL");
  await rpc.closed;
  assert.ok(alive, `round ${round}: moonbox exited by itself during the storm (code ${peer.exitCode}); stderr:\n${peer.stderr.slice(-2000)}`);
  assert.equal(peer.exitSignal, "SIGKILL", `round ${round}: moonbox ended by ${peer.exitSignal ?? `exit code ${peer.exitCode}`}, not by our SIGKILL`);
  const unacked = [...pending.values()].flat();
  return { acked, unacked, failures, inFlightAtKill, delay, sent, stderr: peer.stderr };
}

/** PRAGMA integrity_check after a kill: on the file itself (odd rounds) or on a copy of the
 * database and its WAL (even rounds, leaving the WAL recovery to moonbox). */
function integrityAfterKill(dataDir, round) {
  const db = path.join(dataDir, "moonbox.db");
  let target = db;
  let scratch;
  if (round % 2 === 0) {
    scratch = mkdtempSync(path.join(tmpdir(), "moonbox-crash-copy-"));
    target = path.join(scratch, "moonbox.db");
    copyFileSync(db, target);
    if (existsSync(`${db}-wal`)) copyFileSync(`${db}-wal`, `${target}-wal`);
  }
  try {
    const r = sqlite3Cli(target, "PRAGMA integrity_check");
    assert.equal(r.status, 0, `round ${round}: sqlite3 failed: ${r.stderr}`);
    assert.equal(r.stdout.trim(), "ok", `round ${round}: integrity_check of ${target} after kill -9:\n${r.stdout}${r.stderr}`);
  } finally {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  }
}

/** Temporary files of atomic writes left in the skills directory. */
function tempFiles(skillsDir) {
  return readdirSync(skillsDir).filter((f) => /^\..*\.tmp-/.test(f));
}

/**
 * Checks, on a freshly started server, every acknowledged save so far and every unacknowledged
 * one of the last round. Sends its requests in batches.
 */
async function verify(rpc, dataDir, acked, unacked, label) {
  const skillsDir = path.join(dataDir, "skills");
  const problems = [];
  let seq = 0;
  const id = () => `v_${label}_${seq++}`;

  // list_skills: every acknowledged save listed with its version; nothing else than our names;
  // no temporary file listed as a skill or a problem.
  const list = await rpc.call(id(), "list_skills", {});
  const lsc = list.result?.structuredContent;
  assert.ok(lsc && list.result.isError === false, `${label}: list_skills failed: ${clip(list)}`);
  const listed = new Map(lsc.skills.map((s) => [s.name, s]));
  for (const s of lsc.skills) {
    if (!/^(s\d+_\d+|e\d+_\d+_[ab])$/.test(s.name)) problems.push(`list_skills lists an unexpected skill ${JSON.stringify(s.name)}`);
  }
  assert.deepEqual(lsc.problems, [], `${label}: list_skills reports problems (temporary files of interrupted writes must not show up): ${clip(lsc.problems)}`);
  for (const e of acked) {
    const s = listed.get(e.name);
    if (!s) problems.push(`acknowledged save ${e.name} (version ${e.version}) is not listed by list_skills`);
    else if (s.version !== e.version || s.status !== "ok") problems.push(`${e.name}: list_skills shows version ${s.version} status ${s.status}, acknowledged version ${e.version}`);
  }

  const BATCH = 150;
  for (let k = 0; k < acked.length; k += BATCH) {
    const chunk = acked.slice(k, k + BATCH);
    const answers = await Promise.all(chunk.map((e) => Promise.all([
      rpc.call(id(), "load_skill", { name: e.name }),
      rpc.call(id(), "skill_history", { name: e.name }),
      rpc.call(id(), "skill_history", { name: e.name, version: e.version }),
    ])));
    chunk.forEach((e, j) => {
      const [load, hist, ver] = answers[j];
      const want = fileText(e);
      const l = load.result?.structuredContent;
      if (!l || load.result.isError !== false) {
        problems.push(`acknowledged save ${e.name}: load_skill failed: ${clip(load, 300)}`);
      } else {
        if (l.code !== want) problems.push(`${e.name}: load_skill code ${JSON.stringify(l.code)}, expected ${JSON.stringify(want)}`);
        if (stripHeader(l.code ?? "") !== e.code) problems.push(`${e.name}: load_skill body after the header is ${JSON.stringify(stripHeader(l.code ?? ""))}, sent ${JSON.stringify(e.code)}`);
        if (l.version !== e.version) problems.push(`${e.name}: load_skill version ${l.version}, acknowledged ${e.version}`);
      }
      const h = hist.result?.structuredContent;
      const hv = h?.versions?.find((v) => v.version === e.version);
      if (!h || hist.result.isError !== false) problems.push(`acknowledged save ${e.name}: skill_history failed: ${clip(hist, 300)}`);
      else if (!hv) problems.push(`${e.name}: skill_history lacks acknowledged version ${e.version}: ${clip(h.versions, 300)}`);
      else if (hv.source !== "save" || hv.compiled !== true || hv.in_use !== true) problems.push(`${e.name}: skill_history version ${e.version} is ${clip(hv, 300)}; expected source "save", compiled, in use`);
      const v = ver.result?.structuredContent;
      if (!v || ver.result.isError !== false) problems.push(`${e.name}: skill_history version ${e.version} failed: ${clip(ver, 300)}`);
      else if (v.code !== want) problems.push(`${e.name}: skill_history version ${e.version} code ${JSON.stringify(v.code)}, expected ${JSON.stringify(want)}`);
      const file = path.join(skillsDir, `${e.name}.lua`);
      let text;
      try {
        text = readFileSync(file, "utf8");
      } catch (err) {
        problems.push(`acknowledged save ${e.name}: ${file} is missing (${err.code})`);
      }
      if (text !== undefined && text !== want) problems.push(`${file} holds ${JSON.stringify(text)}, expected ${JSON.stringify(want)}`);
    });
    if (problems.length > 20) break;
  }

  // In flight when killed: wholly present (complete file, and if indexed, the same code) or
  // wholly absent.
  for (const e of unacked) {
    const file = path.join(skillsDir, `${e.name}.lua`);
    if (existsSync(file)) {
      const text = readFileSync(file, "utf8");
      if (text !== fileText(e)) problems.push(`unacknowledged save ${e.name} left a partial file: ${JSON.stringify(text)}`);
    }
    if (listed.has(e.name)) {
      const load = await rpc.call(id(), "load_skill", { name: e.name });
      const code = load.result?.structuredContent?.code;
      if (code !== fileText(e)) problems.push(`unacknowledged save ${e.name} is listed but load_skill gives ${clip(load, 300)}`);
    }
  }
  assert.deepEqual(problems.slice(0, 20), [], `${label}: ${problems.length} problem(s) after restart`);
}

async function runStorm(t, kind, rounds) {
  const dataDir = makeDataDir();
  const skillsDir = path.join(dataDir, "skills");
  const acked = [];
  let unacked = [];
  let kills = 0;
  let sent = 0;
  const delays = [];
  const inFlight = [];
  let maxTemp = 0;
  try {
    for (let round = 1; round <= rounds; round++) {
      const r = await stormRound(dataDir, round, kind);
      kills++;
      sent += r.sent;
      delays.push(r.delay);
      inFlight.push(r.inFlightAtKill);
      assert.deepEqual(r.failures.slice(0, 5), [], `round ${round}: requests failed during the storm (stderr:\n${r.stderr.slice(-1500)})`);
      assert.ok(r.inFlightAtKill > 0, `round ${round}: nothing was in flight when moonbox was killed`);
      assert.ok(r.acked.length > 0, `round ${round}: no acknowledged save`);
      acked.push(...r.acked);
      unacked = r.unacked;
      integrityAfterKill(dataDir, round);
      maxTemp = Math.max(maxTemp, tempFiles(skillsDir).length);

      // Restart and check everything acknowledged so far.
      const { peer, rpc } = await start(dataDir);
      try {
        await verify(rpc, dataDir, acked, unacked, `after kill ${round}`);
      } finally {
        if (round === rounds) {
          const { code, signal } = await peer.close(10000);
          await rpc.closed;
          assert.equal(signal, null, `final clean stop: moonbox died of ${signal}; stderr:\n${peer.stderr.slice(-2000)}`);
          assert.equal(code, 0, `final clean stop: exit code ${code}; stderr:\n${peer.stderr.slice(-2000)}`);
        } else {
          peer.child.kill("SIGKILL"); // the next round starts the storm on a fresh process
          await rpc.closed;
        }
      }
    }
    const db = path.join(dataDir, "moonbox.db");
    const ic = sqlite3Cli(db, "PRAGMA integrity_check");
    assert.equal(ic.stdout.trim(), "ok", `integrity_check after the final clean stop: ${ic.stdout}${ic.stderr}`);
    const saves = sqlite3Cli(db, "SELECT count(*) FROM skill_versions WHERE source = 'save'");
    assert.ok(Number(saves.stdout.trim()) >= acked.length,
      `skill_versions holds ${saves.stdout.trim()} saved versions, fewer than the ${acked.length} acknowledged`);
    const summary = `${kind === "tool" ? "save_skill" : "execute_code -> save_skill"} storm: ` +
      `${acked.length} acknowledged saves (of ${kind === "tool" ? sent : sent * 2} sent) all present after ${kills} kill -9; ` +
      `kill delays after first ack ${delays.join(",")} ms; requests in flight at each kill ${inFlight.join(",")}; ` +
      `at most ${maxTemp} temp file(s) left by a kill`;
    t.diagnostic(summary);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

test("save_skill storm: every acknowledged save survives repeated kill -9, integrity_check ok", { timeout: 120000 }, async (t) => {
  await runStorm(t, "tool", 8);
});

test("execute_code storm (sandbox save_skill host calls): acknowledged executions' saves survive kill -9", { timeout: 120000 }, async (t) => {
  await runStorm(t, "exec", 5);
});
