// moonbox spoken to as a raw newline-delimited JSON-RPC peer over stdio: framing, JSON-RPC
// error codes, id echo, notifications, hostile input (invalid UTF-8, oversized lines, deep
// nesting), version negotiation, tools/list pagination, logging/setLevel validation and
// shutdown on stdin EOF. Every test also checks that stdout held only JSON-RPC lines and that
// the server exits 0 when stdin closes.

import { describe, it, afterEach } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { spawnSync } from "node:child_process";

import { MOONBOX, spawnRaw } from "../lib/moonbox.mjs";

const T = { timeout: 30000 };

let peers = [];
function peer(opts) {
  const p = spawnRaw(opts);
  peers.push(p);
  return p;
}

/** Closes stdin, expects exit code 0 and a clean stdout. */
async function finish(p) {
  const { code, signal } = await p.close();
  assert.deepEqual(p.stdoutProblems(), []);
  assert.equal(signal, null, `moonbox died of ${signal}; stderr:\n${p.stderr.slice(-2000)}`);
  assert.equal(code, 0, `exit code; stderr:\n${p.stderr.slice(-2000)}`);
}

afterEach(async () => {
  for (const p of peers) await p.dispose();
  peers = [];
});

/** Asserts that msg is a JSON-RPC error response with this code (and no result). */
function expectError(msg, code) {
  assert.ok(msg && typeof msg === "object" && "error" in msg && !("result" in msg),
    `expected an error ${code}, got ${JSON.stringify(msg).slice(0, 500)}`);
  assert.equal(msg.error.code, code, JSON.stringify(msg).slice(0, 500));
  assert.equal(typeof msg.error.message, "string");
}

/** Errors (messages with "error") from index `from`. */
function errorsFrom(p, from) {
  return p.messages(from).filter((m) => m && typeof m === "object" && "error" in m);
}

/**
 * Sends `bytes` (a bad message), then a ping with id `pingId`; waits for the ping's answer and
 * for exactly one error response with id null. Returns that error response.
 */
async function badLineThenPing(p, bytes, pingId, { nullId = true } = {}) {
  const m = p.mark();
  await p.sendRaw(bytes);
  p.send({ jsonrpc: "2.0", id: pingId, method: "ping" });
  const pong = await p.response(pingId, { from: m, timeout: 10000 });
  assert.deepEqual(pong, { jsonrpc: "2.0", id: pingId, result: {} });
  await p.waitForLine((l) => l.msg && "error" in l.msg, { from: m, timeout: 5000, what: "an error response" });
  await sleep(50);
  const errs = errorsFrom(p, m);
  assert.equal(errs.length, 1, `exactly one error response: ${JSON.stringify(errs).slice(0, 1000)}`);
  const e = errs[0];
  assert.equal(e.jsonrpc, "2.0");
  if (nullId) assert.equal(e.id, null);
  assert.ok(Number.isInteger(e.error.code), `error code: ${JSON.stringify(e.error)}`);
  assert.equal(typeof e.error.message, "string");
  assert.ok(e.error.message.length > 0);
  return e;
}

describe("JSON-RPC error codes", () => {
  it("-32700 for malformed JSON, id null", T, async () => {
    const p = peer();
    await p.initialize();
    const e = await badLineThenPing(p, '{"jsonrpc":"2.0","id":1,"method":"ping"\n', 2);
    assert.equal(e.error.code, -32700);
    const e2 = await badLineThenPing(p, "not json at all\n", 3);
    assert.equal(e2.error.code, -32700);
    await finish(p);
  });

  it("a key holding \\u0000 (valid JSON moonbox cannot hold) is answered -32602 with the request's id", T, async () => {
    const p = peer();
    await p.initialize();
    const lines = [
      [21, '{"jsonrpc":"2.0","id":21,"method":"ping","params":{"a\\u0000b":1}}'],
      [22, '{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"execute_code","arguments":{"code\\u0000":"return 1"}}}'],
      // an escaped backslash before u0000 is not an escape: the id is kept as sent
      ["x\\u0000", '{"jsonrpc":"2.0","id":"x\\\\u0000","method":"ping","params":{"k\\u0000":1}}'],
    ];
    for (const [id, line] of lines) {
      const e = await badLineThenPing(p, line + "\n", 900, { nullId: false });
      expectError(e, -32602);
      assert.equal(e.id, id, line);
      assert.match(e.error.message, /object keys containing \\u0000 are not supported/);
    }
    // a notification with such a key gets no answer; the session goes on
    const m = p.mark();
    await p.sendRaw('{"jsonrpc":"2.0","method":"notifications/x","params":{"a\\u0000":1}}\n');
    p.send({ jsonrpc: "2.0", id: 23, method: "ping" });
    await p.response(23, { from: m, timeout: 10000 });
    await sleep(50);
    assert.deepEqual(errorsFrom(p, m), []);
    await finish(p);
  });

  it("a repeated key anywhere in a request is -32600 (no last-wins a proxy could read differently)", T, async () => {
    const p = peer();
    await p.initialize();
    const cases = [
      [31, '{"jsonrpc":"2.0","id":31,"method":"ping","method":"tools/call","params":{}}', '"method"'],
      [32, '{"jsonrpc":"2.0","id":32,"method":"ping","params":{},"params":{}}', '"params"'],
      [33, '{"jsonrpc":"2.0","jsonrpc":"2.0","id":33,"method":"ping"}', '"jsonrpc"'],
      // deeper: a filter in front may check the first "code" while the last would run
      [34, '{"jsonrpc":"2.0","id":34,"method":"tools/call","params":{"name":"execute_code",' +
        '"arguments":{"code":"return 1","code":"return os.exit()"}}}', '"code"'],
      [35, '{"jsonrpc":"2.0","id":35,"method":"ping","params":{"a":null,"a":null}}', '"a"'],
      // "id" itself repeats: which one was meant is unknown, so the answer's id is null
      [null, '{"jsonrpc":"2.0","id":36,"id":37,"method":"ping"}', '"id"'],
    ];
    for (const [id, line, key] of cases) {
      const e = await badLineThenPing(p, line + "\n", 900, { nullId: false });
      expectError(e, -32600);
      assert.equal(e.id, id, line);
      assert.ok(e.error.message.includes(`duplicate object key ${key}`), e.error.message);
    }
    // none of them ran: no answer to 36/37 other than the one error, and a plain ping still works
    const m = p.mark();
    p.send({ jsonrpc: "2.0", id: 38, method: "ping" });
    assert.deepEqual(await p.response(38, { from: m, timeout: 10000 }), { jsonrpc: "2.0", id: 38, result: {} });
    await finish(p);
  });

  it("-32600 for a batch array (one error object, not an array)", T, async () => {
    const p = peer();
    await p.initialize();
    const m = p.mark();
    const e = await badLineThenPing(p, '[{"jsonrpc":"2.0","id":5,"method":"ping"}]\n', 6);
    expectError(e, -32600);
    // the ping inside the batch was not executed
    assert.deepEqual(p.messages(m).filter((x) => x.id === 5), []);
    await finish(p);
  });

  it("-32600 for non-object messages", T, async () => {
    const p = peer();
    await p.initialize();
    let id = 10;
    for (const line of ["42", '"ping"', "null", "true"]) {
      const e = await badLineThenPing(p, line + "\n", id++);
      assert.equal(e.error.code, -32600, `for ${line}`);
    }
    await finish(p);
  });

  it("-32600 for a missing or wrong jsonrpc member, echoing the id", T, async () => {
    const p = peer();
    await p.initialize();
    for (const [id, msg] of [[20, { id: 20, method: "ping" }], [21, { jsonrpc: "1.0", id: 21, method: "ping" }]]) {
      const m = p.mark();
      p.send(msg);
      const line = await p.waitForLine((l) => l.msg && ("error" in l.msg || "result" in l.msg),
        { from: m, what: `the answer to ${JSON.stringify(msg)}` });
      assert.deepEqual({ id: line.msg.id, code: line.msg.error?.code, result: "result" in line.msg },
        { id, code: -32600, result: false }, line.raw);
    }
    assert.deepEqual(await p.request(22, "ping"), { jsonrpc: "2.0", id: 22, result: {} });
    await finish(p);
  });

  it("-32600 for an object id and a float id", T, async () => {
    const p = peer();
    await p.initialize();
    const e1 = await badLineThenPing(p, '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}\n', 30);
    expectError(e1, -32600);
    const e2 = await badLineThenPing(p, '{"jsonrpc":"2.0","id":1.5,"method":"ping"}\n', 31);
    expectError(e2, -32600);
    await finish(p);
  });

  it("-32601 for an unknown method, echoing string and integer ids with their type", T, async () => {
    const p = peer();
    await p.initialize();
    const a = await p.request("abc", "no/such_method");
    assert.equal(a.id, "abc");
    expectError(a, -32601);
    const b = await p.request(0, "no/such_method");
    assert.equal(b.id, 0);
    expectError(b, -32601);
    const c = await p.request(-7, "no/such_method");
    assert.equal(c.id, -7);
    expectError(c, -32601);
    // an id beyond 2^53 must come back digit for digit
    const m = p.mark();
    await p.sendRaw('{"jsonrpc":"2.0","id":9007199254740993,"method":"no/such_method"}\n');
    const line = await p.waitForLine((l) => /"id"\s*:\s*9007199254740993(?![0-9.eE])/.test(l.raw),
      { from: m, what: "the response with id 9007199254740993" });
    expectError(line.msg, -32601);
    // a string id that looks like a number stays a string
    const d = await p.request("42", "no/such_method");
    assert.equal(d.id, "42");
    await finish(p);
  });

  it("-32602 for tools/call with bad params", T, async () => {
    const p = peer();
    await p.initialize();
    const a = await p.request(40, "tools/call", {});
    expectError(a, -32602);
    const b = await p.request(41, "tools/call", { name: 42, arguments: {} });
    expectError(b, -32602);
    const c = await p.request(42, "tools/call", { name: "execute_code", arguments: "return 1" });
    expectError(c, -32602);
    await finish(p);
  });
});

describe("context_vars travel as the client wrote them", () => {
  it("the sandbox gets the values of the client's own text; other tools and shapes are still checked", T, async () => {
    const p = peer();
    await p.initialize();
    let m = p.mark();
    // number texts, spacing and escapes the encoder would write otherwise
    await p.sendRaw('{"jsonrpc":"2.0","id":60,"method":"tools/call","params":{"arguments":{"context_vars": ' +
      '{ "x" : 1E2, "y":[0.10,"\\u00e9\\n"], "z":{"a":null}, "big": 99999999999999999999 },' +
      '"code":"return {x, math.type(x), y[1], y[2], z.a == json.null, math.type(big)}"},' +
      '"name":"execute_code"}}\n');
    const a = await p.response(60, { from: m, timeout: 10000 });
    assert.deepEqual(a.result.structuredContent.result, [100, "float", 0.1, "\u00e9\n", true, "float"],
      JSON.stringify(a).slice(0, 500));
    // the same argument on another tool is that tool's unknown argument, not a crash
    const b = await p.request(61, "tools/call", { name: "search_tools", arguments: { query: "x", context_vars: { q: 1 } } });
    assert.equal(b.result.isError, true);
    assert.match(b.result.content[0].text, /unknown argument "context_vars"/);
    // not an object; a key repeated inside
    const c = await p.request(62, "tools/call", { name: "execute_code", arguments: { code: "return 1", context_vars: [1] } });
    assert.match(c.result.content[0].text, /context_vars must be an object/);
    m = p.mark();
    await p.sendRaw('{"jsonrpc":"2.0","id":63,"method":"tools/call","params":{"name":"execute_code",' +
      '"arguments":{"code":"return x","context_vars":{"x":1,"x":2}}}}\n');
    expectError(await p.response(63, { from: m, timeout: 10000 }), -32600);
    await finish(p);
  });
});

describe("errors echo at most a clip of what was sent", () => {
  it("a 6000-byte name, path, uri, method or level comes back cut, with its size", T, async () => {
    const p = peer();
    await p.initialize();
    const L = "Z".repeat(6000);
    const requests = [
      ["tools/call", { name: L, arguments: {} }],
      ["tools/call", { name: "load_skill", arguments: { name: L } }],
      ["tools/call", { name: "save_skill", arguments: { name: L, code: "return 1", description: "d" } }],
      ["tools/call", { name: "read_workspace_file", arguments: { path: L } }],
      ["tools/call", { name: "execute_code", arguments: { code: `return read_file("${L}")` } }],
      ["resources/read", { uri: "moonbox://workspace/" + L }],
      ["resources/read", { uri: "moonbox://skills/" + L }],
      ["resources/read", { uri: L }],
      ["prompts/get", { name: L }],
      [L, {}],
      ["logging/setLevel", { level: L }],
    ];
    let id = 100;
    for (const [method, params] of requests) {
      const m = p.mark();
      const res = await p.request(++id, method, params);
      const line = p.lines.slice(m).find((l) => l.msg?.id === id).raw;
      assert.ok(line.length < 2048, `${method} ${JSON.stringify(params).slice(0, 60)}: ${line.length} bytes: ${line.slice(0, 300)}`);
      const text = JSON.stringify(res);
      assert.ok(!text.includes("Z".repeat(300)), `${method}: the long value came back: ${text.slice(0, 300)}`);
      assert.match(text, /(\.\.\.\(6\d\d\d bytes\)|\.\.\.: the path is 6\d\d\d bytes)/, `${method}: ${text.slice(0, 400)}`);
    }
    await finish(p);
  });
});

describe("notifications", () => {
  it("are never answered, known or unknown", T, async () => {
    const p = peer();
    await p.initialize();
    const m = p.mark();
    p.notify("notifications/initialized");
    p.notify("no/such_notification", { x: 1 });
    p.notify("notifications/cancelled", { requestId: 12345, reason: "nothing to cancel" });
    p.notify("ping");
    const pong = await p.request(50, "ping");
    assert.deepEqual(pong, { jsonrpc: "2.0", id: 50, result: {} });
    await sleep(200);
    assert.deepEqual(p.messages(m), [pong]);
    await finish(p);
  });
});

describe("framing", () => {
  it("accepts CRLF line endings", T, async () => {
    const p = peer();
    await p.initialize();
    await p.sendRaw('{"jsonrpc":"2.0","id":60,"method":"ping"}\r\n');
    assert.deepEqual(await p.response(60), { jsonrpc: "2.0", id: 60, result: {} });
    await finish(p);
  });

  it("reassembles a message split across several delayed writes", T, async () => {
    const p = peer();
    await p.initialize();
    const m = p.mark();
    const msg = JSON.stringify({ jsonrpc: "2.0", id: 61, method: "tools/call",
      params: { name: "execute_code", arguments: { code: "return 'split'" } } }) + "\n";
    const cuts = [7, 30, 55, msg.length];
    let at = 0;
    for (const c of cuts) {
      await p.sendRaw(msg.slice(at, c));
      at = c;
      await sleep(60);
    }
    const r = await p.response(61);
    assert.equal(r.result.structuredContent.result, "split");
    assert.equal(p.messages(m).filter((x) => "error" in x).length, 0);
    await finish(p);
  });

  it("handles two messages in one write", T, async () => {
    const p = peer();
    await p.initialize();
    await p.sendRaw('{"jsonrpc":"2.0","id":62,"method":"ping"}\n{"jsonrpc":"2.0","id":63,"method":"ping"}\n');
    assert.deepEqual(await p.response(62), { jsonrpc: "2.0", id: 62, result: {} });
    assert.deepEqual(await p.response(63), { jsonrpc: "2.0", id: 63, result: {} });
    await finish(p);
  });

  it("invalid UTF-8 in a line gives an error and the server keeps serving", T, async () => {
    const p = peer();
    await p.initialize();
    const bad = Buffer.concat([
      Buffer.from('{"jsonrpc":"2.0","id":70,"method":"ping","params":{"s":"'),
      Buffer.from([0xff, 0xfe, 0xc3, 0x28]),
      Buffer.from('"}}\n'),
    ]);
    const e = await badLineThenPing(p, bad, 71, { nullId: false });
    assert.ok([-32700, -32600].includes(e.error.code), `code ${e.error.code}`);
    assert.ok(e.id === null || e.id === 70, `id ${e.id}`);
    await finish(p);
  });

  it("a line over --max-message-bytes gives an error naming the limit; the next request is answered", T, async () => {
    const p = peer({ args: ["--max-message-bytes", "1048576"] });
    await p.initialize();
    const big = '{"jsonrpc":"2.0","id":80,"method":"ping","params":{"pad":"' + "a".repeat(2 * 1048576) + '"}}\n';
    const e = await badLineThenPing(p, big, 81, { nullId: false });
    assert.equal(e.id, 80, "the error answers the request's own id (issue 31)");
    assert.ok([-32700, -32600].includes(e.error.code), `code ${e.error.code}`);
    assert.match(e.error.message, /1048576/);
    // a message just under the limit is still fine
    const ok = '{"jsonrpc":"2.0","id":82,"method":"ping","params":{"pad":"' + "b".repeat(1048576 - 200) + '"}}\n';
    await p.sendRaw(ok);
    assert.deepEqual(await p.response(82), { jsonrpc: "2.0", id: 82, result: {} });
    await finish(p);
  });

  it("an over-long line is answered under its id when its first bytes hold one at the top level", T, async () => {
    const p = peer({ args: ["--max-message-bytes", "65536"] });
    await p.initialize();
    const pad = "x".repeat(200000);
    // [the line's start, the id text the answer must carry (null: none can be told)]
    const cases = [
      ['{"jsonrpc":"2.0","method":"ping","id":"req-\\"7\\"-\\u00e9","params":{"pad":"', '"req-\\"7\\"-é"'],
      ['  {"id" : 9007199254740993 , "jsonrpc":"2.0","method":"tools/call","params":{"pad":"', "9007199254740993"],
      ['{"jsonrpc":"2.0","method":"ping","params":{"id":5,"pad":"', "null"], // nested: not the request's
      ['{"jsonrpc":"2.0","params":{"pad":"' + "y".repeat(5000) + '"},"id":6,"x":"', "null"], // beyond the scan
      ['{"id":1.5,"method":"ping","params":{"pad":"', "null"],
      ['{"id":null,"method":"ping","params":{"pad":"', "null"],
      ['{"id":{"a":1},"method":"ping","params":{"pad":"', "null"],
      ['{"id":1,"id":2,"method":"ping","params":{"pad":"', "null"], // twice: ambiguous
      ['{"a":"\\q","id":3,"params":{"pad":"', "null"], // a bad escape before it
      ['{"a":tru,"id":3,"params":{"pad":"', "null"], // a bad literal before it
      ['["id",4,{"pad":"', "null"],
      ['{"\\u0069d":"esc","method":"ping","params":{"pad":"', '"esc"'], // the key "id", escaped
      ['{"ids":8,"method":"ping","params":{"pad":"', "null"],
    ];
    let ping = 800;
    for (const [start, want] of cases) {
      const m = p.mark();
      await p.sendRaw(start + pad + '"}}\n');
      p.send({ jsonrpc: "2.0", id: ++ping, method: "ping" });
      await p.response(ping, { from: m });
      const line = await p.waitForLine((l) => l.msg && "error" in l.msg, { from: m, what: "the error answer" });
      assert.ok(line.raw.includes(`"id":${want}`), `${start.slice(0, 60)}: ${line.raw.slice(0, 300)}`);
      assert.equal(errorsFrom(p, m).length, 1);
      assert.match(line.msg.error.message, /max_message_bytes=65536/);
    }
    await finish(p);
  });

  it("deep nesting (100000 '[') gives an error and the server keeps serving", T, async () => {
    const p = peer();
    await p.initialize();
    const e = await badLineThenPing(p, "[".repeat(100000) + "\n", 90);
    assert.ok([-32700, -32600].includes(e.error.code), `code ${e.error.code}`);
    const e2 = await badLineThenPing(p, '{"jsonrpc":"2.0","id":91,"method":"ping","params":{"x":' +
      "[".repeat(100000) + "1" + "]".repeat(100000) + "}}\n", 92, { nullId: false });
    assert.ok([-32700, -32600].includes(e2.error.code), `code ${e2.error.code}`);
    await finish(p);
  });
});

describe("initialize version negotiation", () => {
  for (const [asked, expected] of [
    ["2025-11-25", "2025-11-25"],
    ["2025-06-18", "2025-06-18"],
    ["2025-03-26", "2025-03-26"],
    ["1999-01-01", "2025-11-25"],
  ]) {
    it(`${asked} -> ${expected}`, T, async () => {
      const p = peer();
      const r = await p.initialize(asked);
      assert.equal(r.protocolVersion, expected);
      assert.equal(r.serverInfo.name, "moonbox");
      assert.equal(typeof r.capabilities.tools, "object");
      assert.deepEqual(await p.request(1, "ping"), { jsonrpc: "2.0", id: 1, result: {} });
      await finish(p);
    });
  }
});

describe("--help names the revisions served", () => {
  it("every revision server/discover supports, and each one initialize or _meta accepts", T, async () => {
    const h = spawnSync(MOONBOX, ["--help"], { encoding: "utf8" });
    assert.equal(h.status, 0, h.stderr);
    const line = /Serves MCP ([^]*?)\s+on stdin\/stdout/.exec(h.stdout)?.[1];
    assert.ok(line, `--help says which revisions it serves:\n${h.stdout.slice(0, 600)}`);
    const named = [...line.matchAll(/\d{4}-\d\d-\d\d/g)].map((m) => m[0]);
    const p = peer();
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientCapabilities": {} };
    const disc = await p.request(1, "server/discover", { _meta: meta });
    assert.ok(disc.result?.supportedVersions, JSON.stringify(disc));
    assert.deepEqual([...named].sort(), [...disc.result.supportedVersions].sort(),
      `--help names ${named.join(", ")}; server/discover supports ${disc.result.supportedVersions.join(", ")}`);
    await finish(p);
    for (const v of named.filter((v) => v.startsWith("2025"))) {
      const q = peer();
      assert.equal((await q.initialize(v)).protocolVersion, v);
      await finish(q);
    }
  });
});

describe("tools/list pagination", () => {
  async function allTools(p, startId) {
    const pages = [];
    let cursor;
    let id = startId;
    for (let guard = 0; guard < 1000; guard++) {
      const r = await p.request(id++, "tools/list", cursor === undefined ? {} : { cursor });
      assert.ok(r.result, JSON.stringify(r));
      pages.push(r.result);
      if (r.result.nextCursor === undefined) break;
      assert.equal(typeof r.result.nextCursor, "string");
      cursor = r.result.nextCursor;
    }
    return pages;
  }

  it("--tools-page-size 1 gives one tool per page and the same set of tools", T, async () => {
    const ref = peer();
    await ref.initialize();
    const refNames = (await allTools(ref, 1)).flatMap((pg) => pg.tools.map((t) => t.name)).sort();
    assert.ok(refNames.includes("execute_code") && refNames.includes("get_execution_stats"), refNames.join());
    await finish(ref);

    const p = peer({ args: ["--tools-page-size", "1"] });
    await p.initialize();
    const pages = await allTools(p, 100);
    assert.equal(pages.length, refNames.length);
    for (const pg of pages) assert.equal(pg.tools.length, 1);
    for (const pg of pages.slice(0, -1)) assert.equal(typeof pg.nextCursor, "string");
    assert.equal(pages.at(-1).nextCursor, undefined);
    assert.deepEqual(pages.flatMap((pg) => pg.tools.map((t) => t.name)).sort(), refNames);

    const bad = await p.request(200, "tools/list", { cursor: "definitely-not-a-cursor" });
    expectError(bad, -32602);
    const bad2 = await p.request(201, "tools/list", { cursor: 5 });
    expectError(bad2, -32602);
    await finish(p);
  });
});

describe("logging/setLevel", () => {
  it("accepts a valid level and refuses an invalid one with -32602", T, async () => {
    const p = peer();
    await p.initialize();
    assert.deepEqual(await p.request(1, "logging/setLevel", { level: "debug" }), { jsonrpc: "2.0", id: 1, result: {} });
    const r = await p.request(2, "logging/setLevel", { level: "verbose" });
    expectError(r, -32602);
    const r2 = await p.request(3, "logging/setLevel", {});
    expectError(r2, -32602);
    await finish(p);
  });
});

describe("shutdown", () => {
  it("stdin EOF during an execution: its response is written, then exit 0", T, async () => {
    const p = peer();
    await p.initialize();
    p.send({ jsonrpc: "2.0", id: 300, method: "tools/call", params: { name: "execute_code",
      arguments: { code: "local t = os.clock()\nwhile os.clock() - t < 0.3 do end\nreturn 'finished'",
        timeout_ms: 5000, instruction_limit: 10_000_000_000 } } });
    await sleep(50);
    const t0 = performance.now();
    const { code, signal } = await p.close(10000);
    const dt = performance.now() - t0;
    assert.equal(signal, null);
    assert.equal(code, 0, `stderr:\n${p.stderr.slice(-2000)}`);
    assert.ok(dt < 3000, `exit took ${dt.toFixed(0)} ms`);
    const r = p.messages().find((m) => m && m.id === 300);
    assert.ok(r, "the in-flight execution was answered");
    assert.equal(r.result.structuredContent.success, true);
    assert.equal(r.result.structuredContent.result, "finished");
    assert.deepEqual(p.stdoutProblems(), []);
  });

  it("exits 0 promptly on stdin EOF when idle", T, async () => {
    const p = peer();
    await p.initialize();
    const t0 = performance.now();
    await finish(p);
    assert.ok(performance.now() - t0 < 2000);
  });
});

describe("progress", () => {
  it("notifications precede the response, in order, echoing integer and string tokens", T, async () => {
    const p = peer();
    await p.initialize();
    for (const [id, token] of [[400, 77], [401, "tok-401"]]) {
      const m = p.mark();
      const r = await p.request(id, "tools/call", { name: "execute_code", _meta: { progressToken: token },
        arguments: { code: 'mcp.progress(1, 3, "one")\nmcp.progress(2, 3, "two")\nmcp.progress(3, 3, "three")\nreturn 1' } });
      assert.equal(r.result.structuredContent.success, true, JSON.stringify(r));
      await sleep(100);
      const seen = p.messages(m);
      assert.deepEqual(seen.map((x) => x.method ?? `response ${x.id}`),
        ["notifications/progress", "notifications/progress", "notifications/progress", `response ${id}`]);
      assert.deepEqual(seen.slice(0, 3).map((x) => x.params), [
        { progressToken: token, progress: 1, total: 3, message: "one" },
        { progressToken: token, progress: 2, total: 3, message: "two" },
        { progressToken: token, progress: 3, total: 3, message: "three" },
      ]);
    }
    await finish(p);
  });

  it("message and total are optional (MCP ProgressNotification: total?, message?)", T, async () => {
    const p = peer();
    await p.initialize();
    const m = p.mark();
    const r = await p.request(410, "tools/call", { name: "execute_code", _meta: { progressToken: 5 },
      arguments: { code: "mcp.progress(1, 4)\nmcp.progress(2)\nreturn 1" } });
    assert.equal(r.result.structuredContent.success, true, JSON.stringify(r.result.structuredContent));
    await sleep(100);
    assert.deepEqual(p.notifications(m, "notifications/progress").map((x) => x.params), [
      { progressToken: 5, progress: 1, total: 4 },
      { progressToken: 5, progress: 2 },
    ]);
    await finish(p);
  });

  it("no progress is sent without a progress token", T, async () => {
    const p = peer();
    await p.initialize();
    const m = p.mark();
    const r = await p.request(402, "tools/call", { name: "execute_code", arguments: { code: 'mcp.progress(1, 2, "x")\nreturn 2' } });
    assert.equal(r.result.structuredContent.result, 2);
    await sleep(100);
    assert.deepEqual(p.messages(m).map((x) => x.method ?? `response ${x.id}`), ["response 402"]);
    await finish(p);
  });
});

describe("stdout hygiene", () => {
  it("stdout holds only JSON-RPC lines, whatever the sandbox prints or logs", T, async () => {
    const p = peer({ args: ["--log-level", "debug"] });
    await p.initialize();
    await p.request(1, "logging/setLevel", { level: "debug" });
    const r = await p.request(2, "tools/call", { name: "execute_code", _meta: { progressToken: "tok" },
      arguments: { code: 'print("not on stdout")\nprint("{\\"jsonrpc\\":\\"2.0\\"}")\n' +
        'mcp.log("debug", {a = 1})\nmcp.progress(1, 1, "p")\nreturn "x\\ny"' } });
    assert.equal(r.result.structuredContent.success, true, JSON.stringify(r));
    assert.equal(r.result.structuredContent.output, 'not on stdout\n{"jsonrpc":"2.0"}\n');
    assert.equal(r.result.structuredContent.result, "x\ny");
    const notes = p.notifications();
    const prog = notes.filter((n) => n.method === "notifications/progress");
    assert.deepEqual(prog.map((n) => n.params), [{ progressToken: "tok", progress: 1, total: 1, message: "p" }]);
    const logs = notes.filter((n) => n.method === "notifications/message" && n.params.level === "debug" &&
      JSON.stringify(n.params.data) === '{"a":1}');
    assert.equal(logs.length, 1, JSON.stringify(notes));
    // bad input too: the answers go to stdout as JSON-RPC, the rest only to stderr
    await p.sendRaw("garbage\n\n   \n");
    await p.request(3, "ping");
    assert.ok(p.lines.every((l) => l.raw.length > 0 && l.raw !== "not on stdout"));
    await finish(p);
  });
});

describe("flow control and queue limits", () => {
  it("a client pipelining far more calls than the queue holds gets every answer, none busy", T, async () => {
    const p = peer({ args: ["--workers", "1", "--max-queue", "4"] });
    await p.initialize();
    const m = p.mark();
    const n = 3000;
    let lines = "";
    for (let i = 0; i < n; i++) {
      lines += JSON.stringify({ jsonrpc: "2.0", id: 10000 + i, method: "tools/call",
        params: { name: "execute_code", arguments: { code: `return ${i}` } } }) + "\n";
    }
    await p.sendRaw(lines);
    await p.response(10000 + n - 1, { from: m, timeout: 20000 });
    await sleep(100);
    const answers = p.messages(m).filter((x) => x && x.id >= 10000);
    assert.equal(answers.length, n);
    const bad = answers.filter((x) => !x.result || x.result.isError || x.result.structuredContent.result !== x.id - 10000);
    assert.deepEqual(bad.slice(0, 3), []);
    await finish(p);
  });

  it("queued code beyond max_queue_bytes is answered busy, naming the limit", T, async () => {
    const p = peer({ args: ["--workers", "1", "--max-queue", "100", "--max-queue-bytes", "4096"] });
    await p.initialize();
    const m = p.mark();
    const busy = { code: "local t = os.clock() while os.clock() - t < 0.4 do end return 1",
      timeout_ms: 5000, instruction_limit: 10_000_000_000 };
    const pad = "--" + "x".repeat(3000) + "\nreturn 2";
    p.send({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "execute_code", arguments: busy } });
    await sleep(100); // the first call is running, not queued
    p.send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "execute_code", arguments: { code: pad } } });
    p.send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "execute_code", arguments: { code: pad } } });
    const r3 = await p.response(3, { from: m, timeout: 10000 });
    assert.equal(r3.result.isError, true);
    assert.equal(r3.result.structuredContent.error_type, "busy");
    assert.match(r3.result.structuredContent.error, /max_queue_bytes=4096/);
    const r2 = await p.response(2, { from: m, timeout: 10000 });
    assert.equal(r2.result.structuredContent.result, 2);
    const r1 = await p.response(1, { from: m, timeout: 10000 });
    assert.equal(r1.result.structuredContent.result, 1);
    await finish(p);
  });
});
