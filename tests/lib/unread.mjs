// Clients that do not read their answers, over raw HTTP sockets (a fetch would read): the
// backlog tests (security/backlog.test.mjs, integration/oauth.test.mjs) share these.

import assert from "node:assert/strict";
import net from "node:net";

const ACCEPT = "application/json, text/event-stream";

/** Initializes a 2025-11-25 session with token (or none); resolves with its id. */
export async function initSession(srv, token) {
  const auth = token ? { Authorization: `Bearer ${token}` } : {};
  const r = await fetch(srv.url, { method: "POST", headers: { "Content-Type": "application/json", Accept: ACCEPT, ...auth },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {
      protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "backlog", version: "1" } } }) });
  assert.equal(r.status, 200);
  await r.text();
  return r.headers.get("mcp-session-id");
}

/** A raw POST whose answer is not read: the socket is paused at once. */
export function postUnread(srv, sid, body, token) {
  const s = net.connect(srv.port, "127.0.0.1");
  s.on("error", () => {});
  s.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: ${ACCEPT}\r\n` +
    (token ? `Authorization: Bearer ${token}\r\n` : "") +
    `Mcp-Session-Id: ${sid}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  s.pause();
  return s;
}

/** Reads a socket's answer when it is short (an error); a large one is cut after 64 KiB. */
export function readShort(s) {
  return new Promise((resolve) => {
    const chunks = [];
    let n = 0;
    const done = () => { s.destroy(); resolve(Buffer.concat(chunks).toString("latin1")); };
    s.on("data", (c) => {
      chunks.push(c);
      n += c.length;
      const text = Buffer.concat(chunks).toString("latin1");
      const head = text.indexOf("\r\n\r\n");
      const len = text.match(/content-length: (\d+)/i);
      if ((head >= 0 && len && n >= head + 4 + Number(len[1])) || n > 65536) done();
    });
    s.on("close", done);
    s.resume();
  });
}

export function bodyOf(text) {
  const i = text.indexOf("\r\n\r\n");
  try { return JSON.parse(text.slice(i + 4)); } catch { return null; }
}
