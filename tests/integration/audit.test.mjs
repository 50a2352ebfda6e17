// The audit trail (docs/audit.md, lua/mcp/audit.lua, src/audit.c): records of who did what,
// chained by keyed hashes, read with the audit_log tool and checked by `moonbox --verify-audit`.
//
// Checked with real server processes and the SDK client: an execution, skill changes (through
// the tools and from code), an upstream call that may write and a refused one (deniedTools) are
// recorded with the tenant and the client, in order, each record's prev the hash of the one
// before; JSON lines export; tenants over HTTP see only their own records, another tenant's are
// refused, the admin (the default tenant's token) reads every tenant's and the failed sign-ins
// (a refused token, with the peer address; never the token); --verify-audit holds on an honest
// trail (also on PostgreSQL under make test-pg) and names the record after an edited one
// (sqlite3 UPDATE), the record after a deleted one, and refuses to run without the key file.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { MOONBOX, SQLITE_ONLY, TESTS_DIR, connectClient, makeDataDir, requireBinary, sqlite3Cli, startHttp,
  storeArgs, toolErrText, toolOk, useServer } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const FIXTURE = path.join(TESTS_DIR, "integration/fixtures/upstream_fixture.mjs");

function verify(dataDir, extra = []) {
  requireBinary();
  const r = spawnSync(MOONBOX, ["--verify-audit", "--data-dir", dataDir, ...storeArgs(dataDir), ...extra],
    { encoding: "utf8", timeout: 30000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

async function auditLog(client, args = {}) {
  return toolOk(await client.callTool({ name: "audit_log", arguments: args }));
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

async function startFixture(port, log) {
  const proc = spawn(process.execPath, [FIXTURE, "http", String(port)], { env: { ...process.env, FIXTURE_LOG: log,
    FIXTURE_WRITES: "echo" },
    stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise((r) => proc.on("exit", r));
  await new Promise((resolve, reject) => {
    let err = "";
    proc.stderr.on("data", (c) => { err += c; if (/fixture ready/.test(err)) resolve(); });
    proc.on("exit", (code) => reject(new Error(`fixture exited ${code}: ${err}`)));
  });
  return { async stop() { proc.kill("SIGKILL"); await exited; } };
}

describe("audit trail", () => {
  it("records executions, skill changes and upstream calls in a chain; audit_log reads it; --verify-audit holds", T, async () => {
    const dataDir = makeDataDir();
    const port = await freePort();
    const fx = await startFixture(port, path.join(dataDir, "fixture.log"));
    try {
      const servers = { fx: { url: `http://127.0.0.1:${port}/mcp`, deniedTools: ["whoami"] } };
      await useServer(await connectClient({ dataDir, name: "audit-test-client",
        args: ["--mcp-servers", JSON.stringify(servers), "--audit-flush-ms", "50"] }), async ({ client }) => {
        const ex = await client.callTool({ name: "execute_code", arguments: { code: "return 6 * 7" } });
        assert.equal(ex.structuredContent.result, 42);
        const execId = ex._meta?.["dev.moonbox/execution_id"];
        toolOk(await client.callTool({ name: "save_skill", arguments: { name: "double", code: "return args.x * 2",
          description: "doubles x" } }));
        const fromCode = await client.callTool({ name: "execute_code", arguments: {
          code: 'save_skill("triple", "return args.x * 3", "triples x") return servers.fx.echo{text = "hi"}' } });
        assert.equal(fromCode.structuredContent.success, true, JSON.stringify(fromCode.structuredContent));
        const denied = await client.callTool({ name: "execute_code", arguments: { code: "return servers.fx.whoami{}" } });
        assert.equal(denied.structuredContent.success, false);
        toolOk(await client.callTool({ name: "delete_skill", arguments: { name: "double" } }));

        const log = await auditLog(client);
        const kinds = log.records.map((r) => `${r.kind}:${r.subject ?? ""}`);
        assert.deepEqual(kinds, [`execution:${execId}`, "skill_save:double", "skill_save:triple", "upstream_call:fx.echo",
          `execution:${log.records[4].subject}`, "refused:fx.whoami", `execution:${log.records[6].subject}`,
          "skill_delete:double"], JSON.stringify(log.records, null, 1));
        for (const r of log.records) {
          assert.equal(r.tenant, "default");
          assert.equal(r.client, "audit-test-client/0.0.0");
          assert.match(r.hash, /^[0-9a-f]{64}$/);
        }
        assert.equal(log.records[0].prev, undefined, "the first record has no prev");
        for (let i = 1; i < log.records.length; i++) assert.equal(log.records[i].prev, log.records[i - 1].hash);
        assert.deepEqual(log.records[0].detail, { tool: "execute_code", outcome: "ok", code_hash: log.records[0].detail.code_hash });
        assert.equal(log.records[2].detail.via, "code");
        assert.equal(log.records[3].detail.allowed, "allowWrites");
        assert.equal(log.records[3].detail.outcome, "ok");
        assert.match(log.records[5].detail.why, /whoami/);
        assert.equal(log.records[6].detail.outcome, "runtime");

        const saves = await auditLog(client, { kind: "skill_save", limit: 1 });
        assert.deepEqual(saves.records.map((r) => r.subject), ["double"]);
        assert.equal(saves.more, true);
        const next = await auditLog(client, { kind: "skill_save", after: saves.next_after });
        assert.deepEqual(next.records.map((r) => r.subject), ["triple"]);
        const jsonl = await client.callTool({ name: "audit_log", arguments: { format: "jsonl" } });
        const lines = jsonl.content[0].text.trim().split("\n").map((l) => JSON.parse(l));
        assert.deepEqual(lines.map((r) => r.hash), log.records.map((r) => r.hash));
        assert.match(toolErrText(await client.callTool({ name: "audit_log", arguments: { kind: "nonsense" } })),
          /kind must be one of/);
      });
      const v = verify(dataDir);
      assert.equal(v.code, 0, v.err);
      assert.match(v.out, /^audit chain holds: 8 records, ids \d+\.\.\d+, last hash [0-9a-f]{64}$/m);
    } finally {
      await fx.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("--verify-audit names an edited record and the record after a deleted one; it needs the key", { ...T, skip: SQLITE_ONLY }, async () => {
    const dataDir = makeDataDir();
    try {
      await useServer(await connectClient({ dataDir, args: ["--audit-flush-ms", "20"] }), async ({ client }) => {
        for (let i = 0; i < 4; i++) await client.callTool({ name: "execute_code", arguments: { code: `return ${i}` } });
        assert.equal((await auditLog(client)).records.length, 4);
      });
      const db = path.join(dataDir, "moonbox.db");
      const ids = sqlite3Cli(db, "SELECT id FROM audit ORDER BY id").stdout.trim().split("\n").map(Number);
      assert.equal(verify(dataDir).code, 0);
      const saved = sqlite3Cli(db, `SELECT detail FROM audit WHERE id = ${ids[1]}`).stdout.trim();
      assert.equal(sqlite3Cli(db, `UPDATE audit SET detail = '{"tool":"execute_code","outcome":"ok"}' WHERE id = ${ids[1]}`).status, 0);
      let v = verify(dataDir);
      assert.equal(v.code, 1, v.out + v.err);
      assert.match(v.err, new RegExp(`audit record ${ids[1]} \\(kind execution, tenant default\\) does not match its hash: it was edited`));
      // put it back: the chain holds again; then delete one in the middle
      assert.equal(sqlite3Cli(db, `UPDATE audit SET detail = '${saved}' WHERE id = ${ids[1]}`).status, 0);
      assert.equal(verify(dataDir).code, 0);
      assert.equal(sqlite3Cli(db, `DELETE FROM audit WHERE id = ${ids[2]}`).status, 0);
      v = verify(dataDir);
      assert.equal(v.code, 1);
      assert.match(v.err, new RegExp(`audit record ${ids[3]} does not follow record ${ids[1]}: a record between them was deleted`));
      // the chain is keyed with pii.key: without it nothing can be verified (and no key is made)
      rmSync(path.join(dataDir, "pii.key"));
      v = verify(dataDir);
      assert.equal(v.code, 2);
      assert.match(v.err, /no key file .*pii\.key/);
      assert.equal(existsSync(path.join(dataDir, "pii.key")), false);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("records past audit_max_queued are counted in one dropped record", T, async () => {
    // a flush only when audit_log reads (audit_flush_ms 60 s): four executions meet a queue of two
    await useServer(await connectClient({ args: ["--audit-max-queued", "2", "--audit-flush-ms", "60000"] }), async ({ client }) => {
      for (let i = 0; i < 4; i++) await client.callTool({ name: "execute_code", arguments: { code: `return ${i}` } });
      const log = await auditLog(client);
      assert.deepEqual(log.records.map((r) => r.kind), ["execution", "execution"]);
      // stdio's default tenant is the admin: "*" shows the server's own records too
      const all = await auditLog(client, { tenant: "*" });
      assert.deepEqual(all.records.map((r) => `${r.tenant}:${r.kind}`), ["default:execution", "default:execution", "(server):dropped"]);
      assert.equal(all.records[2].detail.records, 2);
      assert.match(all.records[2].detail.why, /audit_max_queued=2/);
    });
  });

  it("over HTTP: each tenant reads its own records; the admin reads all and the failed sign-ins", T, async () => {
    const A = "alice-audit-token-0123456789", B = "bob-audit-token-01234567890", ADM = "admin-audit-token-0123456789";
    const srv = await startHttp(["--http-tokens", `${A}=alice,${B}=bob,${ADM}=default`, "--audit-flush-ms", "20",
      "--audit-sign-in-records", "1"]);
    const clients = [];
    const clientOf = async (tok) => {
      const c = new Client({ name: "raw", version: "1" }, { capabilities: {} });
      await c.connect(new StreamableHTTPClientTransport(new URL(srv.url), { requestInit: { headers: { Authorization: `Bearer ${tok}` } } }));
      clients.push(c);
      return c;
    };
    const call = async (tok, name, args) => ({ status: 200, body: { result: await (await clientOf(tok)).callTool({ name, arguments: args }) } });
    try {
      assert.equal((await call(A, "execute_code", { code: "return 'a'" })).status, 200);
      assert.equal((await call(B, "execute_code", { code: "return 'b'" })).status, 200);
      for (let i = 0; i < 3; i++) { // one recorded (audit_sign_in_records=1), the other two counted
        const wrong = await fetch(srv.url, { method: "POST", headers: { "Content-Type": "application/json",
          Accept: "application/json, text/event-stream", Authorization: `Bearer not-a-token-of-this-server-00${i}` },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25",
          capabilities: {}, clientInfo: { name: "intruder", version: "0" } } }) });
        assert.equal(wrong.status, 401);
      }
      const mine = (await call(A, "audit_log", {})).body.result.structuredContent;
      assert.deepEqual(mine.records.map((r) => [r.tenant, r.kind, r.client]), [["alice", "execution", "raw/1"]]);
      const refused = (await call(B, "audit_log", { tenant: "alice" })).body.result;
      assert.equal(refused.isError, true);
      assert.match(refused.content[0].text, /only an admin/);
      const all = (await call(ADM, "audit_log", { tenant: "*" })).body.result.structuredContent;
      const seen = all.records.map((r) => `${r.tenant}:${r.kind}`);
      assert.ok(seen.includes("alice:execution") && seen.includes("bob:execution"), seen.join(", "));
      const failed = all.records.filter((r) => r.kind === "sign_in_failed");
      assert.equal(failed.length, 2, JSON.stringify(all.records));
      assert.equal(failed[0].tenant, "(none)");
      assert.equal(failed[0].detail.why, "the bearer token is not one of http_tokens");
      assert.equal(failed[0].detail.peer, "127.0.0.1");
      assert.equal(failed[1].tenant, "(none)");
      assert.equal(failed[1].detail.more, 2);
      assert.match(failed[1].detail.why, /audit_sign_in_records=1/);
      assert.equal(JSON.stringify(all).includes("not-a-token-of-this-server"), false, "no token in the trail");
    } finally {
      for (const c of clients) await c.close();
      await srv.stop();
    }
  });
});
