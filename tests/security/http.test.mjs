// Hostile HTTP against the real binary (`--http 127.0.0.1:0`): the header, body, origin, session
// and token rules of the Streamable HTTP endpoint, each with the exact status, and a check that
// the server still serves a normal request afterwards. Raw sockets where fetch would fix up the
// request (Host, Content-Length).

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { MOONBOX, requireBinary } from "../lib/moonbox.mjs";

const T = { timeout: 30000 };
const TOKEN = "a-long-enough-token-for-tenant-x";
const INIT = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {
  protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "sec", version: "1" } } });

let srv;

async function start(args) {
  requireBinary();
  const dataDir = mkdtempSync(path.join(tmpdir(), "moonbox-httpsec-"));
  const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http", "127.0.0.1:0", ...args],
    { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  const url = await new Promise((resolve, reject) => {
    proc.stderr.on("data", (c) => {
      err += c;
      const m = err.match(/serving MCP over HTTP on (http:\/\/\S+\/mcp)/);
      if (m) resolve(m[1]);
    });
    proc.on("exit", (code) => reject(new Error(`exited ${code}: ${err}`)));
  });
  const u = new URL(url);
  return { url, port: Number(u.port), proc, dataDir };
}

const H = (extra = {}) => ({ "Content-Type": "application/json", Accept: "application/json, text/event-stream",
  Authorization: `Bearer ${TOKEN}`, ...extra });

async function post(body, headers = H()) {
  return fetch(srv.url, { method: "POST", headers, body });
}

async function session() {
  const r = await post(INIT);
  assert.equal(r.status, 200);
  return r.headers.get("mcp-session-id");
}

/** Sends raw bytes on a fresh connection; resolves with the status line's code. */
function raw(bytes) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(srv.port, "127.0.0.1");
    let data = "";
    sock.on("data", (c) => {
      data += c;
      const m = data.match(/^HTTP\/1\.1 (\d{3})/);
      if (m) { resolve(Number(m[1])); sock.destroy(); }
    });
    sock.on("error", reject);
    sock.on("close", () => { if (!/^HTTP/.test(data)) resolve(0); });
    sock.write(bytes);
  });
}

/**
 * Sends `pieces` (strings) on a fresh connection, `gapMs` apart, and resolves with everything
 * the server wrote until it closed (or 3 s passed).
 */
function rawPieces(pieces, gapMs = 0) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(srv.port, "127.0.0.1");
    let data = "";
    const done = () => { clearTimeout(timer); sock.destroy(); resolve(data); };
    const timer = setTimeout(done, 3000);
    sock.on("data", (c) => { data += c; });
    sock.on("error", reject);
    sock.on("close", done);
    sock.on("connect", async () => {
      for (const p of pieces) {
        if (sock.destroyed) return;
        sock.write(p);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
    });
  });
}

async function stillServes() {
  const sid = await session();
  const r = await post(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" }),
    H({ "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25" }));
  assert.equal(r.status, 200);
  assert.deepEqual((await r.json()).result, {});
}

describe("HTTP endpoint rules", () => {
  before(async () => { srv = await start(["--http-tokens", `${TOKEN}=x`, "--http-max-body-bytes", "4096",
    "--http-max-header-bytes", "2048", "--http-read-timeout-ms", "2000"]); });
  after(async () => {
    srv.proc.kill("SIGTERM");
    await new Promise((r) => srv.proc.on("exit", r));
    rmSync(srv.dataDir, { recursive: true, force: true });
  });

  it("tokens: none, wrong, malformed -> 401 with WWW-Authenticate", T, async () => {
    for (const auth of [undefined, "Bearer wrong-token-wrong-token-wrong", "Basic abc", "Bearer"]) {
      const h = H();
      if (auth === undefined) delete h.Authorization; else h.Authorization = auth;
      const r = await post(INIT, h);
      assert.equal(r.status, 401, String(auth));
      assert.match(r.headers.get("www-authenticate") ?? "", /^Bearer/);
    }
    await stillServes();
  });

  it("Origin and Host not allowed -> 403 (DNS rebinding)", T, async () => {
    assert.equal((await post(INIT, H({ Origin: "http://evil.example" }))).status, 403);
    const status = await raw(`POST /mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n` +
      `Accept: application/json, text/event-stream\r\nAuthorization: Bearer ${TOKEN}\r\n` +
      `Content-Length: ${Buffer.byteLength(INIT)}\r\n\r\n${INIT}`);
    assert.equal(status, 403);
    await stillServes();
  });

  it("Accept and Content-Type rules -> 406 and 415", T, async () => {
    assert.equal((await post(INIT, H({ Accept: "application/json" }))).status, 406);
    assert.equal((await post(INIT, H({ Accept: "*/*" }))).status, 406);
    assert.equal((await post(INIT, H({ "Content-Type": "text/plain" }))).status, 415);
    await stillServes();
  });

  it("sessions: missing -> 400, unknown -> 404, bad protocol version -> 400", T, async () => {
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 3, method: "ping" });
    // without a session a request is read as 2026-07-28: ping is a removed method (404), and a
    // request without _meta is told what it lacks (400, with its id)
    let r = await post(ping);
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.code, -32601);
    r = await post(JSON.stringify({ jsonrpc: "2.0", id: 4, method: "tools/list" }));
    assert.equal(r.status, 400);
    let e = await r.json();
    assert.equal(e.id, 4);
    assert.equal(e.error.code, -32602);
    assert.match(e.error.message, /initialize first for 2025-11-25/);
    assert.equal((await post(ping, H({ "MCP-Protocol-Version": "2025-11-25" }))).status, 400); // a 2025 request needs its session
    assert.equal((await post(ping, H({ "Mcp-Session-Id": "f".repeat(64) }))).status, 404);
    const sid = await session();
    // a version that is not a 2025 one is read the 2026-07-28 way (the session header ignored)
    const old = JSON.stringify({ jsonrpc: "2.0", id: 5, method: "tools/list", params: { _meta: {
      "io.modelcontextprotocol/protocolVersion": "1999-01-01", "io.modelcontextprotocol/clientCapabilities": {} } } });
    r = await post(old, H({ "Mcp-Session-Id": sid, "MCP-Protocol-Version": "1999-01-01", "Mcp-Method": "tools/list" }));
    assert.equal(r.status, 400);
    e = await r.json();
    assert.equal(e.id, 5);
    assert.equal(e.error.code, -32022);
    assert.equal(e.error.data.requested, "1999-01-01");
    assert.ok(e.error.data.supported.includes("2026-07-28") && e.error.data.supported.includes("2025-11-25"));
    r = await post(old, H({ "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list" }));
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.code, -32020); // the header and _meta disagree
    assert.equal((await fetch(srv.url, { method: "DELETE", headers: H({ "Mcp-Session-Id": sid }) })).status, 204);
    assert.equal((await post(ping, H({ "Mcp-Session-Id": sid }))).status, 404);
    await stillServes();
  });

  it("size limits: body -> 413, headers -> 431; other methods -> 405", T, async () => {
    assert.equal((await post("x".repeat(5000))).status, 413);
    assert.equal((await post(INIT, H({ "X-Pad": "y".repeat(3000) }))).status, 431);
    const r = await fetch(srv.url, { method: "PUT", headers: H(), body: "{}" });
    assert.equal(r.status, 405);
    assert.ok(r.headers.get("allow"));
    await stillServes();
  });

  it("smuggling (Content-Length with Transfer-Encoding, two Content-Lengths) is refused", T, async () => {
    const base = `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nContent-Type: application/json\r\n` +
      `Accept: application/json, text/event-stream\r\nAuthorization: Bearer ${TOKEN}\r\n`;
    const a = await raw(base + `Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`);
    const b = await raw(base + `Content-Length: 4\r\nContent-Length: 40\r\n\r\nabcd`);
    assert.ok(a === 400 || a === 0, `CL+TE got ${a}`);
    assert.ok(b === 400 || b === 0, `CL+CL got ${b}`);
    await stillServes();
  });

  it("header names with whitespace or non-token bytes, and obs-fold, are 400 (RFC 9112)", T, async () => {
    const base = `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nContent-Type: application/json\r\n` +
      `Accept: application/json, text/event-stream\r\nAuthorization: Bearer ${TOKEN}\r\n`;
    const len = `Content-Length: ${Buffer.byteLength(INIT)}\r\n`;
    const chunked = `${Buffer.byteLength(INIT).toString(16)}\r\n${INIT}\r\n0\r\n\r\n`;
    const NAME = /^HTTP\/1\.1 400 [^]*a header name holds a byte that is not a token character/;
    const FOLD = /^HTTP\/1\.1 400 [^]*continued on the next line \(obs-fold/;
    const cases = [
      // before this check http_parser read "Transfer-Encoding " as Transfer-Encoding: a proxy
      // that does not would see a different body
      [base + `Transfer-Encoding : chunked\r\n\r\n` + chunked, NAME],
      [base + `Transfer-Encoding\t: chunked\r\n\r\n` + chunked, /^HTTP\/1\.1 400 /], // (http_parser's own check)
      [base + `X Pad: 1\r\n` + len + `\r\n` + INIT, NAME],
      [base + `X-Pad\x7f: 1\r\n` + len + `\r\n` + INIT, /^HTTP\/1\.1 400 /],
      [base + `X-Pad: a\r\n b\r\n` + len + `\r\n` + INIT, FOLD],
      [base + `X-Pad: a\r\n\tb\r\n` + len + `\r\n` + INIT, FOLD],
    ];
    for (const [req, want] of cases) {
      assert.match(await rawPieces([req]), want, JSON.stringify(req.slice(base.length, base.length + 40)));
      // the same bytes a few at a time: the check does not depend on how reads fall
      const pieces = req.match(/[^]{1,3}/g);
      assert.match(await rawPieces(pieces, 1), want, `in pieces: ${JSON.stringify(req.slice(base.length, base.length + 40))}`);
    }
    // a long value arriving byte by byte is not a fold
    const ok = await rawPieces((base + `X-Pad: ${"v".repeat(200)}\r\n` + len + `\r\n` + INIT).match(/[^]{1,2}/g), 0);
    assert.match(ok, /^HTTP\/1\.1 200 /, ok.slice(0, 300));
    await stillServes();
  });

  it("error answers stay well-formed: after a HEAD, and quoting a header full of quotes (found by fuzz_http)", T, async () => {
    // a malformed request after a HEAD on the same connection was answered as a HEAD (no body)
    const r1 = await rawPieces([`HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\n\r\n` +
      `(GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\n\r\n`]);
    const second = r1.slice(r1.indexOf("HTTP/1.1", 8));
    assert.match(second, /^HTTP\/1\.1 400 /, r1);
    const len = Number(second.match(/Content-Length: (\d+)/)[1]);
    const body = second.slice(second.indexOf("\r\n\r\n") + 4);
    assert.equal(Buffer.byteLength(body), len, r1);
    assert.equal(JSON.parse(body).error.code, -32000);
    // a 403 quoting an Origin of 250 '"' was cut at 512 bytes: invalid JSON
    const r2 = await rawPieces([`OPTIONS /mcp HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nOrigin: ${'"'.repeat(250)}\r\n\r\n`]);
    assert.match(r2, /^HTTP\/1\.1 403 /, r2.slice(0, 200));
    const e = JSON.parse(r2.slice(r2.indexOf("\r\n\r\n") + 4));
    assert.equal(e.error.code, -32000);
    assert.ok(e.error.message.length > 0);
    await stillServes();
  });

  it("a JSON key repeated in a request is refused: 400 before a session, -32600 in one", T, async () => {
    const dupInit = INIT.replace('"method":"initialize"', '"method":"initialize","method":"ping"');
    const r = await post(dupInit);
    assert.equal(r.status, 400);
    const e1 = await r.json();
    assert.equal(e1.id, 1);
    assert.match(e1.error.message, /duplicate object key "method"/);
    const sid = await session();
    const r2 = await post('{"jsonrpc":"2.0","id":7,"method":"ping","method":"tools/list"}',
      H({ "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25" }));
    const text = await r2.text();
    const line = text.split("\n").map((l) => l.replace(/^data: /, "")).find((l) => l.startsWith("{"));
    assert.ok(line, text);
    const e = JSON.parse(line);
    assert.equal(e.id, 7);
    assert.equal(e.error.code, -32600);
    assert.match(e.error.message, /duplicate object key "method"/);
    await stillServes();
  });

  it("a slow client is cut by the read timeout (408 or closed)", T, async () => {
    const t0 = performance.now();
    const status = await raw(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\n`);
    const ms = performance.now() - t0;
    assert.ok(status === 408 || status === 0, `got ${status}`);
    assert.ok(ms < 5000, `took ${ms} ms`);
    await stillServes();
  });

  it("garbage bytes get a 400 and do not stop the server", T, async () => {
    const status = await raw("\x00\x01\x02 not http at all\r\n\r\n");
    assert.ok(status === 400 || status === 0, `got ${status}`);
    await stillServes();
  });
});
