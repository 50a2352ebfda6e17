// SSE event ids and Last-Event-ID resumption against the real binary (`--http 127.0.0.1:0`),
// spoken to in raw HTTP (node:http) so that a stream can be cut where the test wants: a POST
// whose answer is SSE (execute_code sending progress, then working on, then answering) is cut
// after its first message; a GET with Last-Event-ID gets the rest exactly once and in order,
// including the response the execution produced while nobody listened. Also: the priming event
// and retry field, 204 once a stream is over, the refusals (malformed 400, foreign/unknown/
// dropped 409, no session 400, another tenant's session 404), the session's GET stream resumed
// in its place, the replay bound (http_replay_bytes), and that the server serves on after each.

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { startHttp as startHttpServer, until } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const PROTO = "2025-11-25";

/** moonbox over HTTP (tests/lib); stop() also checks it exited cleanly. */
async function startHttp(args = []) {
  const srv = await startHttpServer(args);
  return {
    url: srv.url,
    async stop() {
      const r = await srv.stop();
      assert.equal(r.code, 0, `moonbox exited ${r.code} ${r.signal}: ${srv.stderr().slice(-2000)}`);
    },
  };
}

/** An HTTP response read as it arrives: SSE events parsed (comments skipped), or the whole body. */
class Reply {
  constructor(req, res) {
    this.req = req;
    this.res = res;
    this.status = res.statusCode;
    this.headers = res.headers;
    this.text = "";
    this.events = [];
    this.ended = false;
    this._buf = "";
    this._wake = null;
    res.setEncoding("utf8");
    res.on("data", (c) => { this.text += c; this._buf += c; this._parse(); this._poke(); });
    const end = () => { this.ended = true; this._poke(); };
    res.on("end", end);
    res.on("error", end);
    res.on("close", end);
  }

  _poke() { const w = this._wake; this._wake = null; w?.(); }

  _parse() {
    let i;
    while ((i = this._buf.indexOf("\n\n")) >= 0) {
      const block = this._buf.slice(0, i);
      this._buf = this._buf.slice(i + 2);
      const ev = {};
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "data") ev.data = ev.data === undefined ? v : `${ev.data}\n${v}`;
        else ev[field] = v;
      }
      if (Object.keys(ev).length) this.events.push(ev);
    }
  }

  /** The next SSE event, or null when the response ended first. */
  async next(ms = 15000) {
    const deadline = Date.now() + ms;
    while (!this.events.length && !this.ended) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no SSE event within ${ms} ms; got so far: ${JSON.stringify(this.text)}`);
      await new Promise((r) => { this._wake = r; setTimeout(r, Math.min(left, 200)); });
    }
    return this.events.length ? this.events.shift() : null;
  }

  /** Every event until the response ends. */
  async rest(ms = 15000) {
    const out = [];
    for (let ev; (ev = await this.next(ms)) !== null;) out.push(ev);
    return out;
  }

  /** Waits for the end of the response; resolves with its text. */
  async body(ms = 15000) {
    const deadline = Date.now() + ms;
    while (!this.ended) {
      if (Date.now() > deadline) throw new Error(`response not ended within ${ms} ms`);
      await new Promise((r) => { this._wake = r; setTimeout(r, 200); });
    }
    return this.text;
  }

  /** Cuts the connection (the client goes away mid-stream). */
  cut() { this.req.destroy(); this.res.destroy(); }
}

/** One request on its own connection; resolves at the response head. */
function request(url, { method = "GET", headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, agent: false }, (res) => resolve(new Reply(req, res)));
    req.on("error", reject);
    req.end(body);
  });
}

const postHeaders = (sid, extra = {}) => ({
  "Content-Type": "application/json", Accept: "application/json, text/event-stream",
  ...(sid ? { "Mcp-Session-Id": sid, "MCP-Protocol-Version": PROTO } : {}), ...extra,
});

async function post(url, sid, msg, extra = {}) {
  return request(url, { method: "POST", headers: postHeaders(sid, extra), body: JSON.stringify(msg) });
}

/** A GET on the session, with Last-Event-ID when given. */
function get(url, sid, lastId, extra = {}) {
  const headers = { Accept: "text/event-stream", "MCP-Protocol-Version": PROTO, ...extra };
  if (sid) headers["Mcp-Session-Id"] = sid;
  if (lastId !== undefined) headers["Last-Event-ID"] = lastId;
  return request(url, { headers });
}

/** initialize + notifications/initialized; resolves with the session id. */
async function session(url, extra = {}) {
  const r = await post(url, null, { jsonrpc: "2.0", id: 1, method: "initialize", params: {
    protocolVersion: PROTO, capabilities: {}, clientInfo: { name: "resume-test", version: "1" } } }, extra);
  assert.equal(r.status, 200, await r.body());
  await r.body();
  const sid = r.headers["mcp-session-id"];
  assert.match(sid, /^[0-9a-f]{64}$/);
  const n = await post(url, sid, { jsonrpc: "2.0", method: "notifications/initialized" }, extra);
  assert.equal(n.status, 202);
  await n.body();
  return sid;
}

/** A JSON-RPC error answer: status, id null, and a message matching re. */
async function refused(reply, status, re) {
  const text = await reply.body();
  assert.equal(reply.status, status, text);
  const j = JSON.parse(text);
  assert.equal(j.id, null);
  assert.match(j.error.message, re);
}

/** The server serves on: a ping answers. */
async function servesOn(url, sid, extra = {}) {
  const r = await post(url, sid, { jsonrpc: "2.0", id: 99, method: "ping" }, extra);
  assert.equal(r.status, 200);
  assert.deepEqual(JSON.parse(await r.body()).result, {});
}

/** The value of a /metrics line. */
async function metric(url, name, headers = {}) {
  const r = await request(url.replace(/\/mcp$/, "/metrics"), { headers });
  const m = (await r.body()).match(new RegExp(`^${name} (\\d+)$`, "m"));
  assert.ok(m, `${name} in /metrics`);
  return Number(m[1]);
}

/** An execute_code call with a progress token: its progress and log messages come as SSE. */
const callCode = (id, code) => ({ jsonrpc: "2.0", id, method: "tools/call",
  params: { name: "execute_code", arguments: { code }, _meta: { progressToken: `p${id}` } } });

const SLOW = `
mcp.progress(1, 5, "one")
mcp.progress(2, 5, "two")
local t = os.clock() while os.clock() - t < 0.4 do end
mcp.progress(3, 5, "three")
mcp.log("info", "four")
return "done"`;

const idParts = (id) => {
  const m = /^([0-9a-f]{8})-(\d+)-(\d+)$/.exec(id);
  assert.ok(m, `event id ${id}`);
  return { tag: m[1], stream: Number(m[2]), seq: Number(m[3]) };
};
const withSeq = (id, seq) => id.replace(/-\d+$/, `-${seq}`);

describe("SSE resumption (Last-Event-ID)", () => {
  let srv;
  before(async () => { srv = await startHttp(); });
  after(async () => { await srv.stop(); });

  it("a POST's stream cut after its first message is resumed: the rest arrives once, in order", T, async () => {
    const sid = await session(srv.url);
    const p = await post(srv.url, sid, callCode(2, SLOW));
    assert.equal(p.status, 200);
    assert.match(p.headers["content-type"], /^text\/event-stream/);
    const prime = await p.next();
    assert.equal(prime.data, "", "the priming event has empty data");
    assert.equal(prime.retry, "1000");
    assert.equal(idParts(prime.id).seq, 0);
    const first = await p.next();
    assert.equal(first.id, withSeq(prime.id, 1));
    assert.equal(JSON.parse(first.data).params.progress, 1);
    p.cut();

    const g = await get(srv.url, sid, first.id);
    assert.equal(g.status, 200);
    assert.match(g.headers["content-type"], /^text\/event-stream/);
    const rest = await g.rest();
    assert.deepEqual(rest.map((e) => e.id), [2, 3, 4, 5].map((n) => withSeq(prime.id, n)));
    const msgs = rest.map((e) => JSON.parse(e.data));
    assert.deepEqual(msgs.slice(0, 2).map((m) => m.params.progress), [2, 3]);
    assert.equal(msgs[2].method, "notifications/message");
    assert.equal(msgs[2].params.data, "four");
    assert.equal(msgs[3].id, 2);
    assert.equal(msgs[3].result.structuredContent.result, "done");
    assert.ok(rest.every((e) => e.event === "message"));

    // the stream is over: from its last event there is nothing left
    const again = await get(srv.url, sid, rest.at(-1).id);
    assert.equal(again.status, 204);
    await again.body();
    // from the priming event, the whole stream again
    const all = await get(srv.url, sid, prime.id);
    assert.deepEqual((await all.rest()).map((e) => e.id), [1, 2, 3, 4, 5].map((n) => withSeq(prime.id, n)));
    assert.equal(await metric(srv.url, "moonbox_http_exchanges_active"), 0);
    assert.equal(await metric(srv.url, "moonbox_http_streams_active"), 0);
    await servesOn(srv.url, sid);
  });

  it("a stream resumed while the execution runs goes on live; the response ends it", T, async () => {
    const sid = await session(srv.url);
    const p = await post(srv.url, sid, callCode(3, `
      mcp.progress(1)
      local t = os.clock() while os.clock() - t < 0.8 do end
      mcp.progress(2)
      return 7`));
    const prime = await p.next();
    const first = await p.next();
    p.cut();
    // parked (or, on a very slow machine, already answered: then the rest is all replayed)
    await until(async () => (await metric(srv.url, "moonbox_http_exchanges_detached")) === 1 ||
      (await metric(srv.url, "moonbox_http_exchanges_active")) === 0, 15000, "the exchange parked");
    const g = await get(srv.url, sid, first.id);
    assert.equal(g.status, 200);
    const rest = await g.rest();
    assert.deepEqual(rest.map((e) => e.id), [withSeq(prime.id, 2), withSeq(prime.id, 3)]);
    assert.equal(JSON.parse(rest[0].data).params.progress, 2);
    assert.equal(JSON.parse(rest[1].data).result.structuredContent.result, 7);
    assert.equal(await metric(srv.url, "moonbox_http_exchanges_detached"), 0);
    assert.equal(await metric(srv.url, "moonbox_http_exchanges_active"), 0);
    assert.equal(await metric(srv.url, "moonbox_http_streams_active"), 0);
    assert.ok(await metric(srv.url, "moonbox_http_streams_resumed_total") >= 1);
    await servesOn(srv.url, sid);
  });

  it("stale, foreign and malformed ids are refused with a JSON-RPC error and no stream", T, async () => {
    const a = await session(srv.url), b = await session(srv.url);
    const p = await post(srv.url, b, callCode(4, "mcp.progress(1) return 1"));
    const prime = await p.next();
    const events = await p.rest();
    assert.equal(events.length, 2);
    const { tag } = idParts(prime.id);
    await refused(await get(srv.url, a, "garbage"), 400, /Last-Event-ID "garbage" is not an event id of this server/);
    await refused(await get(srv.url, a, `${tag}-01-1`), 400, /not an event id/);
    await refused(await get(srv.url, a, "x".repeat(200)), 400, /too long/);
    // b's id on a: foreign
    await refused(await get(srv.url, a, events[0].id), 409, /no stream of this session has that event/);
    // an unknown stream, an event never sent
    await refused(await get(srv.url, b, `${tag}-999-1`), 409, /no stream of this session has that event/);
    await refused(await get(srv.url, b, withSeq(prime.id, 50)), 409, /no stream of this session has that event/);
    // the session comes first: none 400, an unknown one 404
    await refused(await get(srv.url, null, prime.id), 400, /Mcp-Session-Id header is required/);
    await refused(await get(srv.url, "0".repeat(64), prime.id), 404, /Session not found/);
    // b's own id still works
    const ok = await get(srv.url, b, prime.id);
    assert.equal(ok.status, 200);
    assert.deepEqual((await ok.rest()).map((e) => e.id), events.map((e) => e.id));
    assert.equal(await metric(srv.url, "moonbox_http_streams_active"), 0);
    await servesOn(srv.url, a);
    await servesOn(srv.url, b);
  });

  it("the session's GET stream, broken, is resumed in its place with what came meanwhile", T, async () => {
    const sid = await session(srv.url);
    const saveTool = async (name, id) => {
      const r = await post(srv.url, sid, { jsonrpc: "2.0", id, method: "tools/call", params: {
        name: "save_skill", arguments: { name, code: "return function() return 1 end", description: "One.",
          params: [], tool: true } } });
      assert.equal(r.status, 200);
      assert.ok(!JSON.parse(await r.body()).result.isError);
    };
    let g = await get(srv.url, sid);
    assert.equal(g.status, 200);
    const prime = await g.next();
    assert.equal(prime.data, "");
    await saveTool("resume_one", 10);
    const changed = [await g.next(), await g.next(), await g.next()];
    assert.deepEqual(changed.map((e) => JSON.parse(e.data).method), ["notifications/tools/list_changed",
      "notifications/prompts/list_changed", "notifications/resources/list_changed"]);
    assert.deepEqual(changed.map((e) => idParts(e.id).seq), [1, 2, 3]);
    g.cut();
    await until(async () => (await metric(srv.url, "moonbox_http_streams_active")) === 0, 15000, "the stream closed");
    await saveTool("resume_two", 11); // sent while the stream is broken: kept
    g = await get(srv.url, sid, changed[0].id);
    assert.equal(g.status, 200);
    const replayed = [];
    for (let i = 0; i < 5; i++) replayed.push(await g.next());
    assert.deepEqual(replayed.map((e) => idParts(e.id).seq), [2, 3, 4, 5, 6]);
    assert.equal(JSON.parse(replayed[2].data).method, "notifications/tools/list_changed");
    // it is the session's GET stream again: a second one is refused, and new messages come on it
    await refused(await get(srv.url, sid), 409, /already has an open GET stream/);
    await saveTool("resume_three", 12);
    assert.equal(idParts((await g.next()).id).seq, 7);
    g.cut();
    await servesOn(srv.url, sid);
  });
});

describe("SSE resumption bounds and tenants", () => {
  let srv;
  const TA = "resume-token-alice-0123456789", TB = "resume-token-bob-9876543210";
  before(async () => {
    srv = await startHttp(["--http-replay-bytes", "4096", "--http-tokens", `${TA}=alice,${TB}=bob`]);
  });
  after(async () => { await srv.stop(); });
  const auth = (t) => ({ Authorization: `Bearer ${t}` });

  it("over http_replay_bytes the oldest events are dropped; resuming before them is refused", T, async () => {
    const sid = await session(srv.url, auth(TA));
    const p = await post(srv.url, sid, callCode(5, `
      mcp.progress(0)
      local t = os.clock() while os.clock() - t < 0.3 do end
      for i = 1, 30 do mcp.progress(i, 30, string.rep("m", 300)) end
      return "bounded"`), auth(TA));
    const prime = await p.next();
    const first = await p.next();
    p.cut();
    await until(async () => (await metric(srv.url, "moonbox_http_exchanges_active", auth(TA))) === 0,
      15000, "the execution done");
    assert.ok(await metric(srv.url, "moonbox_http_replay_bytes", auth(TA)) <= 4096);
    assert.ok(await metric(srv.url, "moonbox_http_replay_dropped_total", auth(TA)) > 0);
    await refused(await get(srv.url, sid, first.id, auth(TA)), 409,
      /were dropped from the session's replay buffer \(http_replay_bytes=4096\)/);
    // the newest events are still there: the last progress (seq 31) and the response (seq 32)
    const g = await get(srv.url, sid, withSeq(prime.id, 30), auth(TA));
    assert.equal(g.status, 200);
    const rest = await g.rest();
    assert.deepEqual(rest.map((e) => idParts(e.id).seq), [31, 32]);
    assert.equal(JSON.parse(rest[1].data).result.structuredContent.result, "bounded");
    await servesOn(srv.url, sid, auth(TA));
  });

  it("another tenant cannot resume a session's stream", T, async () => {
    const sid = await session(srv.url, auth(TA));
    const p = await post(srv.url, sid, callCode(6, "mcp.progress(1) return 2"), auth(TA));
    const prime = await p.next();
    await p.rest();
    await refused(await get(srv.url, sid, prime.id, auth(TB)), 404, /Session not found/);
    const own = await get(srv.url, sid, prime.id, auth(TA));
    assert.equal(own.status, 200);
    assert.equal((await own.rest()).length, 2);
    await servesOn(srv.url, sid, auth(TA));
  });
});
