// Upstream servers per tenant (issue 34, docs/tenants.md): a server marked "perTenant": true runs
// one instance per tenant, with ${tenant}, ${tenant_dir} and ${secret:NAME} replaced for that
// tenant. Three tenants over HTTP with static tokens and the official SDK client, against the
// real server-memory (a stateful server: one process for everyone let bob read alice's entities)
// and server-everything (get-env shows what environment an instance got; a long-running
// operation holds an instance busy).
//
// Checked: server-memory's graph and file are per tenant; each tenant's instance gets its own
// secret and tenant name, a tenant without the secret gets an error that names the file and no
// value, and no secret reaches the store or the log; /metrics counts the instances; an idle
// instance stops after upstream_idle_ms and its tenant's next call starts it again (the data
// kept); upstream_max_instances refuses a call while every instance is busy and makes room by
// stopping an idle one; placeholders are checked at start.
//
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/tenants.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { MOONBOX, TEST_STORE, UPSTREAM_JS, makeDataDir, nodeServer, requireBinary, startHttp, until } from "../lib/moonbox.mjs";

const T = { timeout: 90000 };
const TOK = { alice: "tenant-token-alice-0123456789", bob: "tenant-token-bob-01234567890", carol: "tenant-token-carol-0123456789" };
const TOKENS = Object.entries(TOK).map(([t, k]) => `${k}=${t}`).join(",");
const SECRET = { alice: "alice-s3cret-7f1d2c9a0b", bob: "bob-s3cret-e4a8b6d2c1f0" };

/** A config dir with config.json and tenant secrets (alice and bob have api_key, carol none). */
function configDir(extra = {}) {
  const dir = makeDataDir();
  for (const [t, v] of Object.entries(SECRET)) {
    mkdirSync(path.join(dir, "secrets", t), { recursive: true });
    writeFileSync(path.join(dir, "secrets", t, "api_key"), v + "\n", { mode: 0o600 });
  }
  writeFileSync(path.join(dir, "config.json"), JSON.stringify({
    tenant_secrets_dir: path.join(dir, "secrets"),
    mcpServers: {
      crm: nodeServer(UPSTREAM_JS.memory, [], { perTenant: true, env: { MEMORY_FILE_PATH: "${tenant_dir}/memory.jsonl" } }),
      ev: nodeServer(UPSTREAM_JS.everything, ["stdio"], { perTenant: true,
        env: { API_KEY: "${secret:api_key}", WHO: "${tenant}", HOME_DIR: "${tenant_dir}", FROM: "${env:TENANTS_TEST_VAR}" } }),
    },
    ...extra,
  }));
  return dir;
}

const start = (cfg) => startHttp(["--config", path.join(cfg, "config.json"), "--http-tokens", TOKENS],
  { env: { TENANTS_TEST_VAR: "from moonbox's environment" } });

async function connect(url, tenant) {
  const client = new Client({ name: `tenants-${tenant}`, version: "0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url),
    { requestInit: { headers: { Authorization: `Bearer ${TOK[tenant]}` } } }));
  return client;
}

async function run(client, code, opts = {}) {
  const res = await client.callTool({ name: "execute_code", arguments: { code, timeout_ms: 30000 } }, undefined,
    { timeout: 60000, ...opts });
  return res.structuredContent;
}

async function ok(client, code) {
  const r = await run(client, code);
  assert.equal(r.success, true, JSON.stringify(r));
  return r.result;
}

async function metric(srv, name) {
  const res = await fetch(new URL("/metrics", srv.url), { headers: { Authorization: `Bearer ${TOK.alice}` } });
  const text = await res.text();
  const m = text.match(new RegExp(`^${name.replace(/[{}"]/g, "\\$&")} (\\d+)$`, "m"));
  return m ? Number(m[1]) : null;
}

describe("upstreams per tenant (perTenant: true)", () => {
  let srv, cfg, clients = {};
  before(async () => {
    cfg = configDir();
    srv = await start(cfg);
    for (const t of Object.keys(TOK)) clients[t] = await connect(srv.url, t);
  });
  after(async () => {
    for (const c of Object.values(clients)) await c.close().catch(() => {});
    await srv?.stop();
    if (cfg) rmSync(cfg, { recursive: true, force: true });
  });

  it("server-memory's graph is each tenant's own: bob never reads what alice created", T, async () => {
    await ok(clients.alice, `return servers.crm.create_entities{ entities = {
      { name = "AliceCorp", entityType = "org", observations = { "renewal due in March" } } } }`);
    await ok(clients.bob, `return servers.crm.create_entities{ entities = {
      { name = "BobCorp", entityType = "org", observations = { "new lead" } } } }`);
    const names = (g) => (g.entities ?? []).map((e) => e.name).sort();
    assert.deepEqual(names(await ok(clients.alice, "return servers.crm.read_graph{}")), ["AliceCorp"]);
    assert.deepEqual(names(await ok(clients.bob, "return servers.crm.read_graph{}")), ["BobCorp"]);
    assert.deepEqual(names(await ok(clients.carol, "return servers.crm.read_graph{}")), []);
    const search = await ok(clients.bob, `return servers.crm.search_nodes{ query = "AliceCorp" }`);
    assert.deepEqual(names(search), [], JSON.stringify(search));
    // each instance's file is in its own tenant directory
    const file = (t) => path.join(srv.dataDir, "tenants", t, "upstreams", "crm", "memory.jsonl");
    assert.match(readFileSync(file("alice"), "utf8"), /AliceCorp/);
    assert.doesNotMatch(readFileSync(file("alice"), "utf8"), /BobCorp/);
    assert.match(readFileSync(file("bob"), "utf8"), /BobCorp/);
    assert.doesNotMatch(readFileSync(file("bob"), "utf8"), /AliceCorp/);
    // one instance per tenant that called it, plus the default tenant's started at start-up
    assert.equal(await metric(srv, 'moonbox_upstream_instances{server="crm"}'), 4);
  });

  it("each instance gets its tenant's secret and name; a tenant without the secret gets an error that names the file, never a value", T, async () => {
    const code = `local e = servers.ev.get_env{}
      return { who = e.WHO, dir = e.HOME_DIR, from = e.FROM, key_len = #(e.API_KEY or ""), key_head = (e.API_KEY or ""):sub(1, 6) }`;
    const a = await ok(clients.alice, code), b = await ok(clients.bob, code);
    assert.deepEqual([a.who, a.key_len, a.key_head], ["alice", SECRET.alice.length, SECRET.alice.slice(0, 6)]);
    assert.deepEqual([b.who, b.key_len, b.key_head], ["bob", SECRET.bob.length, SECRET.bob.slice(0, 6)]);
    assert.equal(a.dir, path.join(srv.dataDir, "tenants", "alice", "upstreams", "ev"));
    assert.equal(a.from, "from moonbox's environment");
    const c = await run(clients.carol, "return servers.ev.get_env{}");
    assert.equal(c.success, false, JSON.stringify(c));
    assert.match(c.error, /the secret "api_key" of tenant "carol" cannot be read .*secrets\/carol\/api_key/, c.error);
    for (const v of Object.values(SECRET)) assert.ok(!c.error.includes(v), c.error);
    // sandbox code cannot see the configuration: no secret in what it can reach
    const seen = await ok(clients.alice, `return { cfg = type(mb), tools = mcp.tools("ev")[1] ~= nil }`);
    assert.deepEqual(seen, { cfg: "nil", tools: true });
    // no secret in the log or the store
    await new Promise((r) => setTimeout(r, 1200)); // the journal writes within history's flush
    for (const v of Object.values(SECRET)) {
      assert.ok(!srv.stderr().includes(v), "a secret is in the log");
      if (TEST_STORE === "sqlite") {
        for (const f of readdirSync(srv.dataDir).filter((n) => n.startsWith("moonbox.db"))) {
          assert.ok(!readFileSync(path.join(srv.dataDir, f)).includes(v), `a secret is in ${f}`);
        }
      }
    }
  });
});

describe("perTenant instances: idle stop and the bound", () => {
  it("an instance without calls for upstream_idle_ms stops; its tenant's next call starts it again with the data kept", T, async () => {
    const cfg = configDir({ upstream_idle_ms: 300 });
    const srv = await start(cfg);
    const alice = await connect(srv.url, "alice");
    try {
      await ok(alice, `return servers.crm.create_entities{ entities = { { name = "Kept", entityType = "t", observations = { "kept" } } } }`);
      await until(async () => await metric(srv, 'moonbox_upstream_instances{server="crm"}') === 0, 15000, "every crm instance idle");
      assert.match(srv.stderr(), /upstream crm \(tenant alice\): stopped: no call for 300 ms \(upstream_idle_ms\)/);
      const g = await ok(alice, "return servers.crm.read_graph{}");
      assert.deepEqual(g.entities.map((e) => e.name), ["Kept"]);
      assert.equal(await metric(srv, 'moonbox_upstream_instances{server="crm"}'), 1);
      // the default tenant's instance went idle too and keeps the tool list: the catalog has it
      const found = await alice.callTool({ name: "search_tools", arguments: { query: "read graph", category: "crm" } });
      assert.match(JSON.stringify(found), /read_graph/);
    } finally {
      await alice.close().catch(() => {});
      await srv.stop();
      rmSync(cfg, { recursive: true, force: true });
    }
  });

  it("upstream_max_instances: a call is refused while every instance is busy, and gets one once another is idle", T, async () => {
    const cfg = configDir({ upstream_max_instances: 1, upstream_idle_ms: 0 });
    const srv = await start(cfg);
    const alice = await connect(srv.url, "alice"), bob = await connect(srv.url, "bob");
    const ac = new AbortController();
    try {
      // alice's long call holds the only instance (the default one, failing for want of a
      // secret, was stopped to make room); her first progress says it is in flight
      let progressed;
      const inFlight = new Promise((r) => { progressed = r; });
      const long = run(alice, "return servers.ev.trigger_long_running_operation{ duration = 60, steps = 600 }",
        { onprogress: () => progressed(), signal: ac.signal }).catch((e) => e);
      const early = await Promise.race([inFlight.then(() => null), long]);
      assert.equal(early, null, `alice's call ended before any progress: ${JSON.stringify(early)}`);
      const refused = await run(bob, "return servers.ev.echo{ message = 'hi' }");
      assert.equal(refused.success, false, JSON.stringify(refused));
      assert.match(refused.error, /upstream server "ev" runs 1 instances \(one per tenant\), all busy \(upstream_max_instances=1\); try again in a moment/);
      ac.abort(); // cancels alice's execution and its upstream call
      await long;
      const echoed = await until(async () => {
        const r = await run(bob, "return servers.ev.echo{ message = 'hi' }");
        return r.success ? r.result : null;
      }, 15000, "bob's call once alice's instance is quiet");
      assert.match(JSON.stringify(echoed), /Echo: hi/);
      assert.match(srv.stderr(), /upstream ev \(tenant alice\): stopped: to make room for tenant bob \(upstream_max_instances=1\)/);
      assert.equal(await metric(srv, 'moonbox_upstream_instances{server="ev"}'), 1);
    } finally {
      ac.abort();
      await alice.close().catch(() => {});
      await bob.close().catch(() => {});
      await srv.stop();
      rmSync(cfg, { recursive: true, force: true });
    }
  });
});

describe("perTenant placeholders are checked at start", () => {
  it("${tenant} without perTenant, ${secret:} in args, an unknown placeholder, a bad secret name", T, () => {
    requireBinary();
    for (const [server, text] of [
      [{ command: "x", args: ["${tenant}"] }, 'mcpServers.a.args[1]: ${tenant} needs "perTenant": true'],
      [{ command: "x", perTenant: true, args: ["--key=${secret:k}"] }, "mcpServers.a.args[1]: ${secret:...} is allowed in env and headers only"],
      [{ command: "x", perTenant: true, env: { K: "${input:k}" } }, "mcpServers.a.env.K: unknown placeholder ${input:k} (known: ${tenant}, ${tenant_dir}, ${secret:NAME}, ${env:NAME})"],
      [{ command: "x", perTenant: true, env: { K: "${secret:../k}" } }, "mcpServers.a.env.K: ${secret:../k}: the name must be letters, digits, _ . or -"],
      [{ command: "x", perTenant: "yes" }, "mcpServers.a.perTenant must be true or false, got string"],
    ]) {
      const dataDir = makeDataDir();
      writeFileSync(path.join(dataDir, "config.json"), JSON.stringify({ mcpServers: { a: server } }));
      const r = spawnSync(MOONBOX, ["--data-dir", dataDir], { input: "", encoding: "utf8", timeout: 10000 });
      rmSync(dataDir, { recursive: true, force: true });
      assert.notEqual(r.status, 0, `started with ${JSON.stringify(server)}: ${r.stderr}`);
      assert.ok(r.stderr.includes(text), `stderr lacks ${JSON.stringify(text)}:\n${r.stderr}`);
    }
  });
});
