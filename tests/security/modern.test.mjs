// Hostile 2026-07-28 (sessionless) requests over HTTP with two tenants: a requestState stolen
// from another tenant, forged, oversized or replayed; headers that lie about the body; huge or
// odd _meta; listen floods and oversized filters; executions left held by a client that walks
// away. After each, the server answers clearly and keeps serving. docs/protocol.md,
// docs/security.md ("2026-07-28 requests").
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { startHttp, until } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const V = "2026-07-28";
const ALICE = "alice-token-long-enough-0001";
const BOB = "bob-token-long-enough-00000002";
const META = (caps = {}, extra = {}) => ({ "io.modelcontextprotocol/protocolVersion": V,
  "io.modelcontextprotocol/clientCapabilities": caps, ...extra });
const ELICIT = `return mcp.elicit({ message = "name?", requestedSchema = { type = "object",
  properties = { n = { type = "string" } } } }).content.n`;

let srv;

/** A sessionless request; headers follow the body unless overridden. Answers {status, msg}. */
async function call(token, body, headers = {}, signal) {
  const name = body.params?.name ?? body.params?.uri;
  const res = await fetch(srv.url, { method: "POST", signal, headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${token}`, "MCP-Protocol-Version": V, "Mcp-Method": body.method,
    ...(typeof name === "string" && name.length < 900 ? { "Mcp-Name": name } : {}), ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await res.text();
  const lines = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).filter(Boolean);
  const last = lines.length ? lines.at(-1) : text;
  return { status: res.status, msg: last ? JSON.parse(last) : undefined };
}

const exec = (token, id, code, caps = {}, more = {}) => call(token, { jsonrpc: "2.0", id, method: "tools/call",
  params: { name: "execute_code", arguments: { code, timeout_ms: 30000 }, _meta: META(caps), ...more } });

/** Busy workers, from /metrics (a tenant's get_execution_stats does not show the pool). */
async function busy() {
  const r = await fetch(srv.url.replace(/\/mcp$/, "/metrics"), { headers: { Authorization: `Bearer ${ALICE}` } });
  const m = (await r.text()).match(/^moonbox_workers\{state="busy"\} (\d+)$/m);
  assert.ok(m, "moonbox_workers busy in /metrics");
  return Number(m[1]);
}

async function stillServes() {
  const r = await exec(ALICE, "alive", "return 6 * 7");
  assert.equal(r.msg?.result?.structuredContent?.result, 42, JSON.stringify(r).slice(0, 300));
}

describe("2026-07-28 requests under attack", () => {
  // workers enough for the held executions and the rest (a held one keeps its worker)
  before(async () => {
    srv = await startHttp(["--http-tokens", `${ALICE}=alice,${BOB}=bob`, "--mrtr-max-held", "3",
      "--mrtr-hold-ms", "60000", "--workers", "6"]);
  });
  after(async () => { await srv?.stop(); });

  it("a requestState is good only for its tenant, its tool and once; forged and huge ones are refused", T, async () => {
    const held = await exec(ALICE, 1, ELICIT, { elicitation: {} });
    assert.equal(held.msg.result.resultType, "input_required", JSON.stringify(held).slice(0, 300));
    const state = held.msg.result.requestState;
    const [key] = Object.keys(held.msg.result.inputRequests);
    const answer = { [key]: { action: "accept", content: { n: "mallory" } } };
    // bob replays alice's state: refused, and alice's execution is still held for her
    const stolen = await exec(BOB, 2, ELICIT, { elicitation: {} }, { requestState: state, inputResponses: answer });
    assert.equal(stolen.msg.error?.code, -32602, JSON.stringify(stolen));
    assert.match(stolen.msg.error.message, /does not belong/);
    // the state altered one character at a time in its text and its MAC
    const dot = state.lastIndexOf(".");
    for (const i of [6, dot - 2, dot + 3, state.length - 1]) {
      const t = state.slice(0, i) + (state[i] === "A" ? "B" : "A") + state.slice(i + 1);
      const r = await exec(ALICE, `t${i}`, ELICIT, { elicitation: {} }, { requestState: t, inputResponses: answer });
      assert.equal(r.msg.error?.code, -32602, `altered at ${i}: ${JSON.stringify(r)}`);
    }
    for (const bad of ["", "mbs1.", "mbs1.a.b", "x".repeat(100000), 12, { s: state }, [state]]) {
      const r = await exec(ALICE, "bad", ELICIT, { elicitation: {} }, { requestState: bad, inputResponses: answer });
      assert.ok(r.msg.error?.code === -32602, `${JSON.stringify(bad).slice(0, 40)}: ${JSON.stringify(r).slice(0, 300)}`);
    }
    // the state for another tool
    const other = await call(ALICE, { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "get_execution_stats",
      arguments: {}, _meta: META({ elicitation: {} }), requestState: state, inputResponses: answer } });
    assert.equal(other.msg.error?.code, -32602);
    // alice's own retry works, once
    const ok = await exec(ALICE, 4, ELICIT, { elicitation: {} }, { requestState: state, inputResponses: answer });
    assert.equal(ok.msg.result?.structuredContent?.result, "mallory", JSON.stringify(ok).slice(0, 300));
    const again = await exec(ALICE, 5, ELICIT, { elicitation: {} }, { requestState: state, inputResponses: answer });
    assert.equal(again.msg.error?.code, -32602);
    await stillServes();
  });

  it("a client that walks away from held executions cannot hold more than mrtr_max_held; a disconnect cancels", T, async () => {
    const states = [];
    for (let i = 0; i < 3; i++) {
      const r = await exec(BOB, `h${i}`, ELICIT, { elicitation: {} });
      assert.equal(r.msg.result?.resultType, "input_required", JSON.stringify(r).slice(0, 300));
      states.push(r.msg.result);
    }
    const fourth = await exec(BOB, "h3", ELICIT, { elicitation: {} });
    assert.equal(fourth.msg.result?.structuredContent?.success, false, JSON.stringify(fourth).slice(0, 300));
    assert.match(fourth.msg.result.structuredContent.error, /mrtr_max_held=3/);
    // answering one frees its place
    const [key] = Object.keys(states[0].inputRequests);
    const done = await exec(BOB, "r0", ELICIT, { elicitation: {} }, { requestState: states[0].requestState,
      inputResponses: { [key]: { action: "accept", content: { n: "x" } } } });
    assert.equal(done.msg.result?.structuredContent?.result, "x");
    // a request whose connection is cut: its execution is cancelled (its worker comes back long
    // before the loop's own end); the two still held keep theirs
    const base = await busy();
    const ac = new AbortController();
    const cut = call(BOB, { jsonrpc: "2.0", id: "loop", method: "tools/call", params: { name: "execute_code",
      arguments: { code: "local t = os.clock() + 50 while os.clock() < t do end return 1", timeout_ms: 60000 },
      _meta: META() } }, {}, ac.signal).catch((e) => e);
    await until(async () => (await busy()) > base, 20000, "the loop runs");
    ac.abort();
    await cut;
    await until(async () => (await busy()) === base, 20000, "the cut execution stops");
    await stillServes();
  });

  it("headers that lie about the body are refused with the request's id", T, async () => {
    const body = { jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "execute_code",
      arguments: { code: "return 1" }, _meta: META() } };
    for (const h of [{ "Mcp-Method": "tools/list" }, { "Mcp-Name": "get_execution_stats" },
      { "Mcp-Name": "=?base64?Z2V0X2V4ZWN1dGlvbl9zdGF0cw==?=" }, { "Mcp-Name": "=?base64?%%%?=" },
      { "MCP-Protocol-Version": "2026-07-29" }]) {
      const r = await call(ALICE, body, h);
      assert.equal(r.status, 400, `${JSON.stringify(h)}: ${r.status}`);
      assert.equal(r.msg.id, 9, `${JSON.stringify(h)}: ${JSON.stringify(r.msg)}`);
      assert.ok([-32020, -32000].includes(r.msg.error.code), JSON.stringify(r.msg));
    }
    // a 2025 version without a session cannot be a 2026 request: the session is missing
    const legacy = await call(ALICE, body, { "MCP-Protocol-Version": "2025-11-25" });
    assert.equal(legacy.status, 400);
    assert.match(legacy.msg.error.message, /Mcp-Session-Id header is required/);
    // the Mcp-Name header of the right tool, base64-wrapped, is accepted
    const ok = await call(ALICE, body, { "Mcp-Name": "=?base64?ZXhlY3V0ZV9jb2Rl?=" });
    assert.equal(ok.msg.result?.structuredContent?.result, 1, JSON.stringify(ok));
    await stillServes();
  });

  it("odd and huge _meta, params and listen filters get clear errors", T, async () => {
    const cases = [
      { _meta: null }, { _meta: [] }, { _meta: "x" },
      { _meta: { "io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": [] } },
      { _meta: META({}, { "io.modelcontextprotocol/logLevel": 3 }) },
      { _meta: META({ elicitation: { deep: JSON.parse("[".repeat(100) + "]".repeat(100)) } }) },
    ];
    for (const params of cases) {
      const r = await call(ALICE, { jsonrpc: "2.0", id: "m", method: "tools/list", params });
      assert.ok(r.status === 400 || r.msg?.result, `${JSON.stringify(params).slice(0, 80)}: ${r.status}`);
      if (r.status === 400) assert.equal(r.msg.id, "m");
    }
    const uris = Array.from({ length: 1001 }, (_, i) => `skill://s${i}`);
    const big = await call(ALICE, { jsonrpc: "2.0", id: "l", method: "subscriptions/listen",
      params: { _meta: META(), notifications: { resourceSubscriptions: uris } } });
    assert.equal(big.msg.error?.code, -32602);
    assert.match(big.msg.error.message, /max_resource_subscriptions=1000/);
    for (const n of [null, [], "x", { toolsListChanged: "yes" }, { resourceSubscriptions: [1] }]) {
      const r = await call(ALICE, { jsonrpc: "2.0", id: "l2", method: "subscriptions/listen", params: { _meta: META(), notifications: n } });
      assert.equal(r.msg.error?.code, -32602, `${JSON.stringify(n)}: ${JSON.stringify(r.msg)}`);
    }
    await stillServes();
  });

  it("listens are bounded and a dropped listen stream is forgotten", T, async () => {
    // open listens and drop them: each closed connection ends its listener (else max_listeners would fill)
    for (let round = 0; round < 3; round++) {
      const controllers = [];
      const pending = [];
      for (let i = 0; i < 20; i++) {
        const ac = new AbortController();
        controllers.push(ac);
        const res = fetch(srv.url, { method: "POST", signal: ac.signal, headers: {
          "Content-Type": "application/json", Accept: "application/json, text/event-stream",
          Authorization: `Bearer ${ALICE}`, "MCP-Protocol-Version": V, "Mcp-Method": "subscriptions/listen" },
          body: JSON.stringify({ jsonrpc: "2.0", id: `L${round}-${i}`, method: "subscriptions/listen",
            params: { _meta: META(), notifications: { toolsListChanged: true } } }) });
        pending.push(res.then(async (r) => {
          const reader = r.body.getReader();
          const { value } = await reader.read(); // the acknowledgement
          return new TextDecoder().decode(value);
        }));
      }
      const acks = await Promise.all(pending);
      for (const a of acks) assert.match(a, /notifications\/subscriptions\/acknowledged/);
      for (const ac of controllers) ac.abort();
    }
    await stillServes();
    const m = await fetch(srv.url.replace(/\/mcp$/, "/metrics"), { headers: { Authorization: `Bearer ${ALICE}` } });
    assert.equal(m.status, 200);
  });
});
