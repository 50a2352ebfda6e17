// moonbox over Streamable HTTP (`--http 127.0.0.1:0`) driven by the official TypeScript SDK's
// StreamableHTTPClientTransport: initialize with a session, tools, progress and log notifications
// on an SSE answer, skills and the workspace, DELETE, bearer tokens mapped to tenants (each
// tenant's workspace, skills, vault and history are its own), and a clean exit on SIGTERM.

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { MOONBOX, requireBinary, sqlite3Cli, tapProgress } from "../lib/moonbox.mjs";

const T = { timeout: 30000 };

/** Starts moonbox on an ephemeral loopback port; resolves with {url, proc, dataDir, stop()}. */
async function startHttp(args = []) {
  requireBinary();
  const dataDir = mkdtempSync(path.join(tmpdir(), "moonbox-http-"));
  const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http", "127.0.0.1:0", ...args],
    { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line; stderr:\n${stderr}`)), 10000);
    proc.stderr.on("data", (c) => {
      stderr += c;
      const m = stderr.match(/serving MCP over HTTP on (http:\/\/\S+\/mcp)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on("exit", (code) => { clearTimeout(timer); reject(new Error(`exited ${code}: ${stderr}`)); });
  });
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  return {
    url, proc, dataDir, stderr: () => stderr, exited,
    async stop() {
      proc.kill("SIGTERM");
      const r = await exited;
      rmSync(dataDir, { recursive: true, force: true });
      return r;
    },
  };
}

async function connect(url, token, capabilities = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url),
    token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : {});
  const client = new Client({ name: "moonbox-http-test", version: "0.0.0" }, { capabilities });
  await client.connect(transport);
  return { client, transport };
}

const exec = async (client, code) =>
  (await client.callTool({ name: "execute_code", arguments: { code } })).structuredContent;

describe("Streamable HTTP with the SDK client (no tokens, loopback)", () => {
  let srv;
  before(async () => { srv = await startHttp(); });
  after(async () => { await srv.stop(); });

  it("initializes with a session id, lists tools and runs code", T, async () => {
    const { client, transport } = await connect(srv.url);
    try {
      assert.match(transport.sessionId, /^[0-9a-f]{64}$/);
      const { tools } = await client.listTools();
      assert.ok(tools.some((t) => t.name === "execute_code"));
      const sc = await exec(client, "return 6 * 7");
      assert.equal(sc.result, 42);
    } finally {
      await client.close();
    }
  });

  it("progress and log notifications arrive on the SSE answer of their request", T, async () => {
    const { client } = await connect(srv.url);
    try {
      const logs = [];
      client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params.data));
      const tap = tapProgress(client); // onprogress can lose progress sent with the answer
      const r = await client.callTool({ name: "execute_code", arguments: {
        code: 'mcp.log("info", "step one") mcp.progress(1, 2, "half") mcp.progress(2, 2) return "done"' } },
      undefined, { onprogress: () => {} });
      tap.stop();
      assert.equal(r.structuredContent.result, "done");
      assert.deepEqual(logs, ["step one"]);
      const { list, beforeResponse } = tap.progressOf(tap.tokens()[0]);
      assert.deepEqual(list.map((p) => p.progress), [1, 2]);
      assert.ok(beforeResponse, JSON.stringify(tap.seen));
    } finally {
      await client.close();
    }
  });

  it("two sessions are independent, and a session ended with DELETE is gone (404)", T, async () => {
    const a = await connect(srv.url);
    const b = await connect(srv.url);
    try {
      assert.notEqual(a.transport.sessionId, b.transport.sessionId);
      await a.client.setLoggingLevel("error");
      const logs = [];
      b.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params.data));
      await exec(b.client, 'mcp.log("info", "b hears this")');
      assert.deepEqual(logs, ["b hears this"], "a's log level does not apply to b");
      const sid = a.transport.sessionId;
      await a.transport.terminateSession();
      const res = await fetch(srv.url, { method: "POST", headers: {
        "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "ping" }) });
      assert.equal(res.status, 404);
    } finally {
      await a.client.close().catch(() => {});
      await b.client.close();
    }
  });

  it("the workspace and skills work over HTTP", T, async () => {
    const { client } = await connect(srv.url);
    try {
      await exec(client, 'write_file("h.txt", "over http")');
      const r = await client.callTool({ name: "read_workspace_file", arguments: { path: "h.txt" } });
      assert.equal(r.structuredContent.content, "over http");
      const s = await client.callTool({ name: "save_skill", arguments: {
        name: "hx", code: "return function(a) return a.n * 2 end", description: "Doubles.",
        params: [{ name: "n", type: "number" }], tool: true } });
      assert.notEqual(s.isError, true, JSON.stringify(s));
      const t = await client.callTool({ name: "hx", arguments: { n: 21 } });
      assert.equal(t.content[0].text, "42");
    } finally {
      await client.close();
    }
  });
});

describe("bearer tokens and tenants", () => {
  let srv;
  const TA = "token-for-tenant-a-0123456789", TB = "token-for-tenant-b-9876543210";
  before(async () => { srv = await startHttp(["--http-tokens", `${TA}=alpha,${TB}=beta`]); });
  after(async () => { await srv.stop(); });

  it("no token or a wrong one is 401 whose body and WWW-Authenticate say which header to send", T, async () => {
    for (const auth of [undefined, "Bearer nope-nope-nope-nope-nope"]) {
      const res = await fetch(srv.url, { method: "POST", headers: {
        "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        ...(auth ? { Authorization: auth } : {}) },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {
        protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "x", version: "1" } } }) });
      assert.equal(res.status, 401);
      const www = res.headers.get("www-authenticate") ?? "";
      assert.match(www, /^Bearer realm="moonbox"/);
      // a client that sees only "Bearer" starts OAuth (the Inspector CLI: "Interactive OAuth
      // requires a TTY"); until moonbox offers OAuth, the answer names the header to send
      const desc = /error_description="([^"]*)"/.exec(www)?.[1] ?? "";
      assert.match(desc, /Authorization: Bearer <token>/, www);
      assert.match(desc, /http_tokens/, www);
      // RFC 6750 3.1: invalid_token where a token was sent and refused; no error code without one
      if (auth) assert.match(www, /error="invalid_token"/);
      else assert.doesNotMatch(www, /error="/);
      const body = await res.json();
      assert.equal(body.error.code, -32000);
      assert.match(body.error.message, /send Authorization: Bearer <token> with a token of this server's http_tokens/);
    }
  });

  it("each tenant has its own workspace, skills, PII vault and history", T, async () => {
    const a = await connect(srv.url, TA);
    const b = await connect(srv.url, TB);
    try {
      await exec(a.client, 'write_file("secret.txt", "alpha only")');
      const rb = await b.client.callTool({ name: "read_workspace_file", arguments: { path: "secret.txt" } });
      assert.equal(rb.isError, true, "beta cannot read alpha's file");
      assert.match(rb.content[0].text, /no such file/);
      const rf = await exec(b.client, 'return read_file("secret.txt") == nil');
      assert.equal(rf.result, true, "beta's sandbox does not see alpha's file either");

      await a.client.callTool({ name: "save_skill", arguments: { name: "only_a", code: "return 1", description: "A's." } });
      const lb = await b.client.callTool({ name: "list_skills", arguments: {} });
      assert.deepEqual(lb.structuredContent.skills.map((s) => s.name), []);
      const la = await a.client.callTool({ name: "list_skills", arguments: {} });
      assert.deepEqual(la.structuredContent.skills.map((s) => s.name), ["only_a"]);
      const rq = await exec(b.client, 'return pcall(require, "skills.only_a")');
      assert.equal(rq.result[0], false);

      // a token minted for alpha does not restore for beta
      const tok = (await a.client.callTool({ name: "sanitize_pii", arguments: { text: "ann@example.org" } }))
        .structuredContent.sanitized_text;
      const back_a = (await a.client.callTool({ name: "restore_pii", arguments: { text: tok } })).structuredContent;
      const back_b = (await b.client.callTool({ name: "restore_pii", arguments: { text: tok } })).structuredContent;
      assert.equal(back_a.restored_text, "ann@example.org");
      assert.equal(back_b.restored_text, tok);
      assert.deepEqual(back_b.unresolved, [tok]);

      // history rows carry the tenant
      await exec(a.client, "return 1");
      await a.client.callTool({ name: "get_execution_stats", arguments: {} }); // flushes the history
      const rows = sqlite3Cli(path.join(srv.dataDir, "moonbox.db"),
        "SELECT tenant, count(*) FROM executions GROUP BY tenant ORDER BY tenant").stdout.trim();
      assert.match(rows, /^alpha\|\d+\nbeta\|\d+$/);
    } finally {
      await a.client.close();
      await b.client.close();
    }
  });

  it("get_execution_stats gives each tenant its own figures and no shared ones", T, async () => {
    // a server of its own, so the counts start at zero
    const own = await startHttp(["--http-tokens", `${TA}=alpha,${TB}=beta`]);
    const a = await connect(own.url, TA);
    const b = await connect(own.url, TB);
    const stats = async (c) => (await c.client.callTool({ name: "get_execution_stats", arguments: {} })).structuredContent;
    try {
      await exec(a.client, 'write_file("one.txt", "12345") write_file("two.txt", "678")');
      await exec(a.client, "return 1");
      await exec(a.client, "error('x')");
      await a.client.callTool({ name: "save_skill", arguments: { name: "a_only",
        code: "return function() return 1 end", description: "A's tool.", tool: true } });
      await a.client.callTool({ name: "sanitize_pii", arguments: { text: "ann@example.org and bob@example.org" } });
      await exec(b.client, 'write_file("b.txt", "b")');

      // no other output of beta's shows alpha's things
      const bt = async (name, args = {}) => JSON.stringify(await b.client.callTool({ name, arguments: args }));
      for (const [what, text] of [
        ["list_workspace_files", await bt("list_workspace_files")],
        ["list_skills", await bt("list_skills")],
        ["search_tools", JSON.stringify((await b.client.callTool({ name: "search_tools",
          arguments: { query: "a_only tool" } })).structuredContent.tools)],
        ["tools/list", JSON.stringify(await b.client.listTools())],
        ["resources/list", JSON.stringify(await b.client.listResources())],
      ]) {
        assert.ok(!/a_only|one\.txt|two\.txt/.test(text), `${what} shows alpha's: ${text.slice(0, 400)}`);
      }
      assert.match(await bt("list_workspace_files"), /b\.txt/);
      // the server's paths are the operator's: a token's tenant is not told where workflows live
      assert.equal("directory" in (await b.client.callTool({ name: "list_workflows", arguments: {} })).structuredContent, false);
      // asked by name, alpha's skill does not exist for beta (the answer only echoes the name)
      assert.match(await bt("load_skill", { name: "a_only" }), /"isError":true/);
      assert.match(await bt("load_skill", { name: "a_only" }), /no skill named/);
      const hist = await b.client.callTool({ name: "skill_history", arguments: { name: "a_only" } });
      assert.ok(hist.isError || (hist.structuredContent.versions ?? []).length === 0, JSON.stringify(hist));
      assert.ok(JSON.stringify(await a.client.listTools()).includes("a_only"), "alpha's own tool is listed for alpha");

      const sa = await stats(a);
      assert.deepEqual([sa.workspace.files, sa.workspace.bytes], [2, 8]);
      assert.equal(sa.skills.count, 1);
      assert.equal(sa.pii.vault_tokens, 2);
      assert.deepEqual([sa.executions, sa.succeeded, sa.failed], [3, 2, 1]);
      assert.equal(sa.history.recorded, 3);

      const sb = await stats(b);
      assert.deepEqual([sb.workspace.files, sb.workspace.bytes], [1, 1], "beta's workspace, not alpha's or default's");
      assert.equal(sb.skills.count, 0);
      assert.equal(sb.pii.vault_tokens, 0);
      assert.deepEqual([sb.executions, sb.succeeded, sb.failed], [1, 1, 0]);
      assert.equal(sb.history.recorded, 1);
      // shared parts count other tenants' work: not shown to a token's tenant (they are in
      // /metrics); upstreams come without counters (security/gateway.test.mjs)
      for (const st of [sa, sb]) {
        assert.deepEqual(["pool", "catalog"].filter((k) => k in st), []);
        assert.equal(typeof st.limits.max_memory_mb, "number");
      }
    } finally {
      await a.client.close();
      await b.client.close();
      await own.stop();
    }
  });

  it("a session is bound to its tenant: the other tenant's token gets 404 on it", T, async () => {
    const a = await connect(srv.url, TA);
    try {
      const res = await fetch(srv.url, { method: "POST", headers: {
        "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        Authorization: `Bearer ${TB}`, "Mcp-Session-Id": a.transport.sessionId,
        "MCP-Protocol-Version": "2025-11-25" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 5, method: "ping" }) });
      assert.equal(res.status, 404);
    } finally {
      await a.client.close();
    }
  });
});

describe("start-up and shutdown", () => {
  it("refuses a non-loopback address without tokens, naming http_tokens", T, async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), "moonbox-http-"));
    try {
      const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http", "0.0.0.0:0"], { stdio: ["ignore", "pipe", "pipe"] });
      let err = "";
      proc.stderr.on("data", (c) => { err += c; });
      const code = await new Promise((r) => proc.on("exit", r));
      assert.notEqual(code, 0);
      assert.match(err, /http_tokens/);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("SIGTERM finishes the running execution, then exits 0", T, async () => {
    const srv = await startHttp();
    const { client } = await connect(srv.url);
    const call = exec(client, "local t = os.clock() while os.clock() - t < 0.3 do end return 'finished'");
    await new Promise((r) => setTimeout(r, 100));
    srv.proc.kill("SIGTERM");
    const sc = await call.catch((e) => ({ error: e.message }));
    const r = await srv.exited;
    assert.equal(sc.result, "finished", JSON.stringify(sc));
    assert.equal(r.code, 0);
    rmSync(srv.dataDir, { recursive: true, force: true });
  });
});
