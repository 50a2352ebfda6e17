// Hostile upstream MCP servers (and hostile sandbox code calling them) against the gateway:
// the real binary, the official SDK client, and tests/security/fixtures/hostile_upstream.mjs as
// the upstream (a small stdio server whose misbehaviour is chosen by its mode and tool names).
//
// Each block starts one moonbox with a fresh data directory and a config.json holding hostile
// servers next to a well-behaved one ("good"), and checks that moonbox answers with a clear
// error (the exact text from lua/mcp/upstream.lua where there is one), keeps serving (a later
// `return 1+1` works and "good" still answers), and reports the right state in
// get_execution_stats.upstreams. Memory checks read VmRSS/VmHWM of the moonbox process.
//
// Covered: garbage, oversized, invalid-UTF-8 and too-deep lines on stdout; unknown, duplicate
// and malformed answers (result and error, error null, error objects, results that are not
// objects, wrong content blocks, structuredContent above max_result_bytes); hostile tools/list
// (20,000 tools, bad and duplicate names, schemas that are not objects, injection through
// descriptions and schemas, a cursor that never ends, pages that come slowly, descriptions of
// megabytes, a 10,000-tool list that changes every 150 ms); floods of log, progress and
// list_changed notifications, of stderr lines and of requests from an upstream that does not read
// its stdin; requests from the upstream (sampling, roots, elicitation); a server that dies after
// initialize or in the middle of calls, one that never answers initialize, answers after the
// call's timeout; cancellation at the execution's deadline and by the client; the child's
// environment and descriptors; credentials in an HTTP upstream's URL; policy bypass attempts
// from sandbox code (name mapping, readOnlyHint that is not true, argument types, maxCalls,
// mcp.parallel limits, yields and coroutine games inside tasks); edit-distance cost of an
// unknown tool name; PII tokens restored only in upstream arguments, never across tenants, not
// with pii_policy=0, and pii_restore=0.
//
// A comment above a test names the place in moonbox it guards (and the bug it found, if any).
//
// Run: cd tests && node --test security/gateway.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import http from "node:http";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { MOONBOX, requireBinary } from "../lib/moonbox.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIXTURE = path.join(HERE, "fixtures/hostile_upstream.mjs");
const T = { timeout: 30000 };

const tmp = (prefix) => mkdtempSync(path.join(tmpdir(), prefix));

/** An mcpServers entry running the hostile fixture in `mode` with this node. */
function hostile(mode, extra = {}, env = {}) {
  return { command: process.execPath, args: [FIXTURE, mode], ...extra, env: { ...(extra.env ?? {}), ...env } };
}

/** The records of a fixture's HOSTILE_LOG file. */
function readLog(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}
const received = (file, pred = () => true) => readLog(file).filter((r) => r.rx && pred(r.rx)).map((r) => r.rx);

const clip = (v, n = 400) => {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s === undefined ? "undefined" : s.length > n ? `${s.slice(0, n)}... (${s.length} chars)` : s;
};

/** VmRSS and VmHWM of a process, in kB. */
function mem(pid) {
  const t = readFileSync(`/proc/${pid}/status`, "utf8");
  return { rss: Number(t.match(/VmRSS:\s+(\d+)/)[1]), hwm: Number(t.match(/VmHWM:\s+(\d+)/)[1]) };
}

/**
 * Starts moonbox over stdio with `servers` as its mcpServers (in DATA_DIR/config.json, or in
 * MOONBOX_MCP_SERVERS with opts.viaEnv) and connects the SDK client. Stderr is counted per line
 * pattern (lines are kept up to 2 MB). opts: { args, env, dataDir (kept), viaEnv, ready: names to
 * wait for (default: every server that is not disabled), readyTimeout }.
 */
async function gateway(servers, opts = {}) {
  requireBinary();
  const ownDir = !opts.dataDir;
  const dataDir = opts.dataDir ?? tmp("moonbox-gwsec-");
  const env = { ...process.env, ...(opts.env ?? {}) };
  if (opts.viaEnv) env.MOONBOX_MCP_SERVERS = JSON.stringify(servers);
  else writeFileSync(path.join(dataDir, "config.json"), JSON.stringify({ mcpServers: servers }, null, 2));
  const transport = new StdioClientTransport({
    command: MOONBOX, args: ["--data-dir", dataDir, ...(opts.args ?? [])], env, stderr: "pipe",
  });
  const g = {
    dataDir, transport, lines: [], kept: 0, stderrBytes: 0, part: "",
    requestsFromServer: [], notes: [],
  };
  transport.stderr?.on("data", (c) => {
    const s = g.part + c.toString("utf8");
    g.stderrBytes += c.length;
    const parts = s.split("\n");
    g.part = parts.pop();
    for (const l of parts) {
      if (g.kept < 2 << 20) {
        g.lines.push(l);
        g.kept += l.length;
      } else g.dropped = (g.dropped ?? 0) + 1;
      // lines of an upstream carrying the payload of a flood (format-independent)
      g.counted = g.counted ?? new Map();
      const m = l.match(/^moonbox: \w+: upstream (\S+): .*(dddddddddddddddddddd|stderr flood line)/);
      if (m) g.counted.set(`${m[1]} ${m[2]}`, (g.counted.get(`${m[1]} ${m[2]}`) ?? 0) + 1);
    }
  });
  const client = new Client({ name: "moonbox-gateway-security", version: "0.0.0" });
  client.fallbackRequestHandler = async (req) => {
    g.requestsFromServer.push(req);
    throw new Error("the test client serves nothing");
  };
  client.fallbackNotificationHandler = async (n) => {
    g.notes.push(n);
  };
  g.client = client;
  g.stderr = () => g.lines.join("\n");
  /** Lines logged for server with a flood's payload: kind "notify" (notifications/message) or "stderr". */
  g.count = (server, kind) => g.counted?.get(`${server} ${kind === "notify" ? "d".repeat(20) : "stderr flood line"}`) ?? 0;
  g.close = async () => {
    await client.close().catch(() => {});
    if (ownDir) rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    await client.connect(transport);
  } catch (e) {
    await g.close();
    e.message += `\nmoonbox stderr:\n${g.stderr().slice(-2000)}`;
    throw e;
  }
  g.pid = transport.pid;
  g.mem = () => mem(g.pid);
  /** execute_code; returns { sc, ms }. */
  g.exec = async (code, extra = {}, reqOpts = {}) => {
    const t0 = performance.now();
    const res = await client.callTool({ name: "execute_code", arguments: { timeout_ms: 5000, ...extra, code } },
      undefined, { timeout: 60000, ...reqOpts });
    const sc = res.structuredContent;
    if (!sc) throw new Error(`execute_code gave no structuredContent: ${clip(res, 1000)}`);
    return { sc, ms: performance.now() - t0 };
  };
  /** The result of a successful execution (fails the test otherwise). */
  g.ok = async (code, extra) => {
    const { sc } = await g.exec(code, extra);
    assert.equal(sc.success, true, `execution failed: ${clip(sc.error, 600)}\ncode: ${code}`);
    return sc.result;
  };
  /** The error of a failed execution (fails the test when it succeeded). */
  g.err = async (code, extra) => {
    const { sc } = await g.exec(code, extra);
    assert.equal(sc.success, false, `execution succeeded with ${clip(sc.result)}; expected an error\ncode: ${code}`);
    return sc.error;
  };
  g.stats = async () => {
    const r = await client.callTool({ name: "get_execution_stats", arguments: {} });
    return r.structuredContent?.upstreams ?? {};
  };
  g.tool = async (name, args) => client.callTool({ name, arguments: args });
  /** Polls the stats until pred(upstreams[name]) holds; returns that entry. */
  g.waitFor = async (name, pred, timeout = 10000) => {
    const t0 = Date.now();
    let all;
    for (;;) {
      all = await g.stats();
      if (pred(all[name])) return all[name];
      if (Date.now() - t0 > timeout) {
        throw new Error(`upstream ${name}: condition not met within ${timeout} ms; stats: ${clip(all[name] ?? all, 1500)}` +
          `\nstderr:\n${g.stderr().slice(-2000)}`);
      }
      await sleep(25);
    }
  };
  try {
    const ready = opts.ready ?? Object.keys(servers).filter((k) => !servers[k].disabled);
    for (const name of ready) await g.waitFor(name, (u) => u?.state === "ready", opts.readyTimeout ?? 15000);
  } catch (e) {
    await g.close();
    throw e;
  }
  return g;
}

/**
 * moonbox still runs code and the well-behaved server still answers (and was never restarted,
 * unless anyRestarts: under load a node child may miss a short upstream_init_timeout_ms).
 */
async function stillServes(g, good = "good", { anyRestarts = false } = {}) {
  const { sc } = await g.exec("return 1+1", { timeout_ms: 2000 });
  assert.deepEqual([sc.success, sc.result], [true, 2], `follow-up "return 1+1": ${clip(sc)}`);
  const r = await g.ok(`return servers.${good}.echo({ ping = "pong" })`);
  assert.deepEqual(r, { args: { ping: "pong" } });
  const u = (await g.stats())[good];
  assert.equal(u.state, "ready");
  if (!anyRestarts) assert.equal(u.restarts, 0);
}

/** Runs fn with moonbox's stderr tail added to a failure. */
const withLog = (get, fn) => async (t) => {
  try {
    await fn(t);
  } catch (e) {
    const g = get();
    if (g) e.message += `\n--- moonbox stderr (tail):\n${g.stderr().split("\n").slice(-25).join("\n").slice(-3000)}`;
    throw e;
  }
};

// ---------------------------------------------------------------------------------------------

const DROPPED = /upstream evil: .*line (of more than|above) 1048576 bytes (was )?(discarded|dropped)/;

describe("gateway security: what an upstream writes on stdout", () => {
  let g;
  const get = () => g;
  before(async () => {
    g = await gateway({ evil: hostile("evil", { timeoutMs: 800 }), good: hostile("good") },
      { args: ["--max-message-bytes", "1048576", "--max-result-bytes", "65536"] });
  });
  after(() => g?.close());

  it("garbage before the initialize answer is skipped and logged; the server becomes ready", T, withLog(get, async () => {
    const u = (await g.stats()).evil;
    assert.equal(u.state, "ready");
    assert.equal(u.tools, 32);
    assert.equal(u.callable_tools, 32);
    assert.equal(u.restarts, 0);
    const log = g.stderr();
    for (const want of [
      "upstream evil: stdout line is not JSON-RPC (not an object): 42",
      "upstream evil: stdout line is not JSON-RPC (not an object): null",
      "upstream evil: stdout line is not JSON-RPC (JSON nesting exceeds json_max_depth=128): [[[[",
      "upstream evil: stdout line is not JSON-RPC (unable to decode byte 0xff",
    ]) assert.ok(log.includes(want), `stderr lacks ${JSON.stringify(want)}`);
  }));

  it("garbage lines in the middle of a call do not disturb its answer", T, withLog(get, async () => {
    assert.deepEqual(await g.ok("return servers.evil.garbage()"), { survived: true });
  }));

  it("a 20 MB line (above max_message_bytes) is skipped without being buffered", T, withLog(get, async () => {
    const before = g.mem();
    assert.deepEqual(await g.ok("return servers.evil.bigline({ bytes = 20 * 1024 * 1024 })"), { after_bigline: true });
    const grew = g.mem().hwm - before.hwm;
    assert.ok(grew < 12 * 1024, `peak RSS grew by ${grew} kB for a 20 MB line that must be skipped`);
    const t0 = Date.now();
    while (!DROPPED.test(g.stderr()) && Date.now() - t0 < 3000) await sleep(20);
    assert.match(g.stderr(), DROPPED);
  }));

  it("the warning for a dropped line names the setting an operator can change (max_message_bytes)", T, withLog(get, async () => {
    // (before eeef4dc the warning named the spawn option max_line_bytes)
    const line = g.lines.find((l) => DROPPED.test(l));
    assert.ok(line, "no dropped-line warning in stderr");
    assert.match(line, /max_message_bytes/, `the warning names no configuration option: ${line}`);
  }));

  it("an answer above max_message_bytes is dropped and the call ends at its timeout, the server stays up", T, withLog(get, async () => {
    const before = (await g.stats()).evil.timeouts;
    const e = await g.err("return servers.evil.bigresp({ bytes = 2 * 1024 * 1024 })");
    assert.equal(e, "evil.bigresp: no answer to tools/call within 800 ms (timeoutMs of mcpServers.evil, else upstream_timeout_ms)");
    const u = await g.waitFor("evil", (x) => x.timeouts === before + 1 && x.in_flight === 0);
    assert.equal(u.state, "ready");
    assert.equal(u.restarts, 0, "the ping after the timeout was answered: no restart");
  }));

  it("an answer with invalid UTF-8 is dropped; the good answer that follows is used", T, withLog(get, async () => {
    assert.deepEqual(await g.ok("return servers.evil.badutf8()"), { v: "good answer" });
  }));

  it("an answer nested 100,000 deep is dropped; the good answer that follows is used", T, withLog(get, async () => {
    assert.deepEqual(await g.ok("return servers.evil.deep({ depth = 100000 })"), { v: "good answer" });
  }));

  it("a value nested just inside json_max_depth reaches the code intact", T, withLog(get, async () => {
    const d = await g.ok("local v = servers.evil.nested({ depth = 125 }).v local d = 0 " +
      "while type(v) == 'table' do d = d + 1 v = v[1] end return d");
    assert.equal(d, 125);
  }));

  it("answers to ids never sent (other numbers, the id as a string, null, an object) are ignored", T, withLog(get, async () => {
    assert.deepEqual(await g.ok("return servers.evil.unknown_id()"), { right: true });
  }));

  it("a duplicate answer: the first counts, the second does not leak into the next call", T, withLog(get, async () => {
    assert.deepEqual(await g.ok("return { servers.evil.dup(), servers.evil.echo({ n = 3 }), servers.evil.dup() }"),
      [{ n: 1 }, { args: { n: 3 } }, { n: 1 }]);
  }));

  it("an answer with both result and error is an error", T, withLog(get, async () => {
    assert.equal(await g.err("return servers.evil.both()"), "evil.both: boom (JSON-RPC error -1)");
  }));

  it("an error that is a plain string is shown as it is", T, withLog(get, async () => {
    assert.equal(await g.err("return servers.evil.error_str()"), "evil.error_str: a plain string error");
  }));

  // Regression (fixed in eeef4dc): S:request took `error: null` for an error (the null sentinel
  // is not nil) and errtext printed tostring() of messages that are not strings.
  it('"error": null next to a result does not produce an error text like "userdata: (nil)"', T, withLog(get, async () => {
    const { sc } = await g.exec("return servers.evil.error_null()");
    if (sc.success) assert.deepEqual(sc.result, { from: "result" });
    else {
      assert.match(sc.error, /^evil\.error_null: /);
      assert.doesNotMatch(sc.error, /userdata|table: 0x|: nil$/, `unclear error: ${sc.error}`);
    }
  }));

  it("an error whose message is an object does not print a Lua table address", T, withLog(get, async () => {
    const e = await g.err("return servers.evil.error_weird()");
    assert.match(e, /^evil\.error_weird: /);
    assert.doesNotMatch(e, /table: 0x|userdata/, `unclear error: ${e}`);
  }));

  // A tools/call result must be an object (CallToolResult). Regression (eeef4dc): M.call gave
  // "server.tool: nil" for false or a missing result, and 42, "x", [1], null became nil silently.
  for (const name of ["noresult", "result_false", "result_num", "result_str", "result_array", "result_null"]) {
    it(`a tools/call answer that is not a result object (${name}) is a clear error`, T, withLog(get, async () => {
      const { sc } = await g.exec(`return servers.evil.${name}()`);
      assert.equal(sc.success, false, `the protocol violation passed silently as ${clip(sc.result)}`);
      assert.match(sc.error, new RegExp(`^evil\\.${name}: `));
      assert.doesNotMatch(sc.error, /: nil$|userdata|table: 0x/, `unclear error: ${sc.error}`);
    }));
  }

  it("content blocks of the wrong types come back as the block list, unchanged", T, withLog(get, async () => {
    assert.deepEqual(await g.ok("return servers.evil.blocks()"),
      [1, null, "s", { type: "text", text: 5 }, { type: "image", data: "AAAA", mimeType: "image/png" }]);
  }));

  it("structuredContent above max_result_bytes: usable in code, a clear error when returned", T, withLog(get, async () => {
    assert.equal(await g.ok("return #servers.evil.huge_sc({ bytes = 200000 }).data"), 200000);
    assert.equal(await g.err("return servers.evil.huge_sc({ bytes = 200000 })"),
      "result is too large: JSON output exceeds max_result_bytes=65536");
  }));

  it("after all of it: evil is ready and was never restarted, good still answers", T, withLog(get, async () => {
    const u = (await g.stats()).evil;
    assert.deepEqual([u.state, u.restarts, u.in_flight], ["ready", 0, 0]);
    await stillServes(g);
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: hostile tools/list", () => {
  let g;
  const get = () => g;
  before(async () => {
    g = await gateway({
      many: hostile("many"),
      weird: hostile("weird", { deniedTools: ["delete_all"] }),
      endless: hostile("endless"),
      good: hostile("good"),
    }, { readyTimeout: 20000 });
  });
  after(() => g?.close());

  it("20,000 tools: 10,000 kept with one warning, the rest not callable", T, withLog(get, async () => {
    const u = (await g.stats()).many;
    assert.deepEqual([u.state, u.tools, u.callable_tools], ["ready", 10000, 10000]);
    const warnings = g.lines.filter((l) => l.includes("upstream many: tools/list: more than 10000 tools; the rest ignored"));
    assert.equal(warnings.length, 1);
    assert.deepEqual(await g.ok("return servers.many.t09999({})"), { called: "t09999", args: {} });
    assert.match(await g.err("return servers.many.t10000({})"), /^server "many" has no tool "t10000"/);
  }));

  it("tools with unusable names are skipped, duplicates keep the first, the rest stay callable", T, withLog(get, async () => {
    const u = (await g.stats()).weird;
    // 15 usable distinct names; delete_all is denied
    assert.deepEqual([u.state, u.tools, u.callable_tools], ["ready", 15, 14]);
    assert.deepEqual(await g.ok('return mcp.call("weird", string.rep("x", 256), {})'), { called: "x".repeat(256), args: {} });
    for (const bad of ['string.rep("L", 300)', '"bad\\1ctl"', '"new\\nline"', '" lead"', '"trail "']) {
      // refused by the host ("has no tool") or, for NUL and newline, already in the sandbox
      assert.match(await g.err(`return mcp.call("weird", ${bad}, {})`),
        /^server "weird" has no tool |^code:1: upstream server and tool names are strings without NUL or newline characters$/, bad);
    }
    assert.ok(g.stderr().includes('upstream weird: tools/list: tool "ok_tool" listed twice; the first kept'));
    const def = (await g.tool("get_tool_definition", { tool_name: "ok_tool", category: "weird" })).structuredContent;
    assert.equal(def.description, "hostile tool ok_tool");
  }));

  it("a schema, outputSchema or annotations that is not an object is left out of the catalog", T, withLog(get, async () => {
    const def = (await g.tool("get_tool_definition", { tool_name: "schema_str", category: "weird" })).structuredContent;
    assert.equal(def?.name, "schema_str");
    assert.equal(def.inputSchema, undefined);
    assert.equal(def.outputSchema, undefined);
    assert.equal(def.annotations, undefined);
    assert.equal(def.example, "local result = servers.weird.schema_str({})");
  }));

  it("descriptions with FTS and Lua syntax are only data: found, shown verbatim, nothing breaks", T, withLog(get, async () => {
    const desc = 'MATCH "x" OR * NEAR( ]] os.exit() --[[ \'; DROP TABLE catalog_entries; -- zebrafish';
    const r = (await g.tool("search_tools", { query: "zebrafish" })).structuredContent;
    assert.deepEqual(r.tools.map((t) => [t.name, t.category, t.description]), [["inject_desc", "weird", desc]]);
    const q = await g.tool("search_tools", { query: desc });
    assert.notEqual(q.isError, true, clip(q));
    const all = (await g.tool("search_tools", { query: "hostile tool", limit: 200 })).structuredContent;
    assert.ok(all.count >= 10, `the catalog lost entries: ${clip(all)}`);
  }));

  // Regression (eeef4dc): catalog_text.lua comment_text put the schema's "type" into the
  // `-- comment` of the example as it was, so a newline in it started a line of code in the
  // example the model copies.
  it("a schema cannot inject lines of code into the Lua example", T, withLog(get, async () => {
    const def = (await g.tool("get_tool_definition", { tool_name: "inject_schema", category: "weird" })).structuredContent;
    const lines = def.example.split(/\r?\n|\r/);
    const bad = lines.filter((l) => /^\s*(servers\.|os\.exit)/.test(l));
    assert.deepEqual(bad, [], `example:\n${def.example}`);
    assert.equal(lines[0], "local result = servers.weird.inject_schema({");
  }));

  it("a nextCursor that never ends stops at 1000 pages, and says so in the log", T, withLog(get, async () => {
    const u = (await g.stats()).endless;
    assert.deepEqual([u.state, u.tools], ["ready", 1000]);
    assert.deepEqual(await g.ok("return servers.endless.p1000({})"), { called: "p1000", args: {} });
    // refresh_tools ends the loop after MAX_PAGES silently: the list was cut without a word
    assert.ok(g.lines.some((l) => /upstream endless: .*1000 pages/.test(l)), "no warning that the tool list was cut at 1000 pages");
  }));

  it("the well-behaved server is unaffected", T, withLog(get, () => stillServes(g)));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: servers that die, never initialize, or list slowly", () => {
  let g;
  const get = () => g;
  const dir = tmp("moonbox-gwsec-logs-");
  const DIES = path.join(dir, "dies.log");
  const SILENT = path.join(dir, "silent.log");
  let t0;
  before(async () => {
    t0 = Date.now();
    g = await gateway({
      dies: hostile("exitinit", {}, { HOSTILE_LOG: DIES }),
      silent: hostile("silent", {}, { HOSTILE_LOG: SILENT }),
      slowpages: hostile("endless", {}, { HOSTILE_PAGE_DELAY_MS: "150" }),
      good: hostile("good"),
    }, { args: ["--upstream-init-timeout-ms", "1000"], ready: ["good"] });
  });
  after(async () => {
    await g?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  // Regression (eeef4dc): upstream_init_timeout_ms bounded each tools/list page, not the listing:
  // 1000 pages at 150 ms kept the server "starting" for 150 s, and calls waited until their deadline.
  it("a server whose tools/list pages come slowly is not 'starting' much longer than upstream_init_timeout_ms", T, withLog(get, async () => {
    // with the bound, the first attempt fails ~1000 ms after its start and the server goes to backoff
    const u = await g.waitFor("slowpages", (x) => x.state === "backoff", 4000 - (Date.now() - t0)).catch((e) => e);
    assert.ok(!(u instanceof Error), `never left "starting" within 4 s of the start (init timeout 1000 ms, pages at 150 ms): ${u.message?.split("\n")[0]}`);
    assert.match(u.last_error, /upstream_init_timeout_ms/);
    const { sc, ms } = await g.exec("return servers.slowpages.p1({})", { timeout_ms: 4000 });
    assert.equal(sc.success, false);
    assert.ok(ms < 2500, `the call waited ${ms.toFixed(0)} ms: ${sc.error}`);
  }));

  it("a server that exits after initialize: restarts with a growing pause, calls fail at once", T, withLog(get, async () => {
    const u = await g.waitFor("dies", (x) => x.restarts >= 3, 8000);
    assert.equal(u.last_error, "the process exited with status 3");
    const starts = () => readLog(DIES).filter((r) => r.start).map((r) => r.at);
    const w0 = Date.now();
    while (starts().length < 4 && Date.now() - w0 < 5000) await sleep(20);
    assert.ok(starts().length >= 4, `${starts().length} starts logged by the fixture; stats ${clip((await g.stats()).dies)}; ` +
      `moonbox: ${g.lines.filter((l) => /upstream dies/.test(l)).join(" | ")}`);
    // pauses of 250, 500, 1000 ms (plus the time node needs to start, which load only adds to;
    // a child killed before it logged makes a gap span two pauses, which keeps the bound)
    const at = starts();
    const gaps = at.slice(1, 4).map((t, i) => t - at[i]);
    gaps.forEach((gap, i) => assert.ok(gap >= 250 * 2 ** i - 15, `restart ${i + 1} came ${gap} ms after the previous start (gaps ${gaps.join(", ")} ms); the pause should be ${250 * 2 ** i} ms`));
    const s0 = await g.waitFor("dies", (x) => x.state === "backoff");
    const { sc, ms } = await g.exec("return servers.dies.anything({})");
    assert.equal(sc.success, false);
    assert.match(sc.error, /^upstream server "dies" is not available: the process exited with status 3; restarting \(attempt \d+\) in \d+ ms$/);
    assert.ok(ms < 1500, `a call to a server that is down took ${ms.toFixed(0)} ms`);
    const s1 = (await g.stats()).dies;
    assert.equal(s1.rejected_while_down, s0.rejected_while_down + 1);
    assert.equal(s1.calls, 0);
  }));

  it("a server that never answers initialize fails after upstream_init_timeout_ms, calls say why", T, withLog(get, async () => {
    const u = await g.waitFor("silent", (x) => x.state === "backoff", 5000);
    assert.equal(u.last_error, "initialize: no answer to initialize within 1000 ms (upstream_init_timeout_ms)");
    assert.ok(received(SILENT, (m) => m.method === "initialize").length >= 1);
    assert.deepEqual(received(SILENT, (m) => m.method === "tools/list"), []);
    const e = await g.err("return servers.silent.x({})");
    assert.match(e, /^upstream server "silent" is not available: initialize: no answer to initialize within 1000 ms \(upstream_init_timeout_ms\); restarting \(attempt \d+\) in \d+ ms$/);
  }));

  it("the well-behaved server is unaffected", T, withLog(get, () => stillServes(g, "good", { anyRestarts: true })));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: floods from an upstream", () => {
  let g;
  const get = () => g;
  const dir = tmp("moonbox-gwsec-logs-");
  const EVIL = path.join(dir, "evil.log");
  const FLOOD = path.join(dir, "flood.log");
  before(async () => {
    g = await gateway({
      evil: hostile("evil", {}, { HOSTILE_LOG: EVIL }),
      flood: hostile("evil", {}, { HOSTILE_LOG: FLOOD }),
      good: hostile("good"),
    }, { args: ["--max-message-bytes", "1048576"] });
  });
  after(async () => {
    await g?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("requests from the upstream: roots and unknown get -32601; sampling and elicitation are refused for a client without those capabilities; ping is answered", T, withLog(get, async () => {
    const r = await g.ok("return servers.evil.request_back({})");
    const a = r.answers;
    for (const m of ["roots/list", "x/unknown"]) {
      assert.deepEqual(a[m]?.error, { code: -32601, message: `moonbox does not serve ${m} to upstream servers` }, `${m}: ${clip(a[m])}`);
      assert.equal(a[m].result, undefined);
    }
    // relayed to moonbox's client when it can answer (integration/gateway.test.mjs); this one cannot
    for (const [m, cap] of [["sampling/createMessage", "sampling"], ["elicitation/create", "elicitation"]]) {
      assert.deepEqual(a[m]?.error, { code: -32603, message: `the client of moonbox did not declare the ${cap} capability` },
        `${m}: ${clip(a[m])}`);
      assert.equal(a[m].result, undefined);
    }
    assert.deepEqual(a.ping.result, {});
    assert.deepEqual(g.requestsFromServer, [], "a request of the upstream reached the client");
  }));

  it("100,000 notifications/message: moonbox keeps serving", T, withLog(get, async () => {
    const { sc, ms } = await g.exec("return servers.evil.notify_flood({ n = 100000, bytes = 200 })", { timeout_ms: 20000 });
    assert.deepEqual(sc.result, { flooded: 100000 }, clip(sc));
    assert.ok(ms < 15000, `took ${ms} ms`);
    await stillServes(g);
  }));

  // Regression (eeef4dc): every notifications/message was logged at info, without the rate limit
  // of stderr lines (50 per 10 s), so an upstream could write unbounded log volume.
  it("notifications/message from an upstream are rate-limited in moonbox's log like its stderr", T, withLog(get, async () => {
    const n = g.count("evil", "notify");
    assert.ok(n <= 1000, `${n} log lines from one upstream's notifications/message (${g.stderrBytes} bytes of stderr)`);
  }));

  it("100,000 stderr lines: at most 50 are logged per 10 s", T, withLog(get, async () => {
    const before = g.count("evil", "stderr");
    assert.deepEqual(await g.ok("return servers.evil.stderr_flood({ n = 100000 })"), { flooded: 100000 });
    await sleep(300);
    const n = g.count("evil", "stderr") - before;
    assert.ok(n >= 1 && n <= 50, `${n} stderr lines logged`);
  }));

  it("10,000 list_changed notifications cause at most two new listings (debounced)", T, withLog(get, async () => {
    const before = received(EVIL, (m) => m.method === "tools/list").length;
    assert.deepEqual(await g.ok("return servers.evil.listchanged_flood({ n = 10000 })"), { flooded: 10000 });
    await sleep(600);
    const lists = received(EVIL, (m) => m.method === "tools/list").length - before;
    assert.ok(lists >= 1 && lists <= 2, `${lists} tools/list requests after the flood`);
    const u = (await g.stats()).evil;
    assert.deepEqual([u.state, u.tools], ["ready", 32]);
  }));

  describe("progress notifications from the upstream", () => {
    let got, sc;
    before(async () => {
      got = [];
      const res = await g.client.callTool({ name: "execute_code", arguments: {
        code: "return servers.evil.progress_flood({ n = 5000 })", timeout_ms: 10000 } },
      undefined, { onprogress: (p) => got.push(p), timeout: 30000 });
      sc = res.structuredContent;
    });

    it("unknown progress tokens are ignored and the call succeeds", T, () => {
      assert.equal(sc.success, true, clip(sc));
      assert.match(sc.result.own, /^mb-\d+$/, "moonbox passes its own token, not the client's");
      assert.ok(got.every((p) => typeof p.progress === "number" && p.progress <= 5001), clip(got.slice(0, 3)));
    });

    it("personal data in a progress message is tokenized", T, () => {
      const texts = got.map((p) => p.message ?? "").join("\n");
      assert.ok(!texts.includes("carol.secret@example.org"), "the e-mail reached the client");
      assert.match(texts, /evil\.progress_flood: mail leak: \[EMAIL_[0-9a-f]{8,16}\]/);
    });

    // upstream.lua on_progress forwards every notification: no cap like max_notifications for
    // the sandbox's own mcp.progress, and no check that progress increases.
    it("forwarded progress is bounded by max_notifications (1000)", T, () => {
      assert.ok(got.length <= 1000, `${got.length} progress notifications forwarded for one call`);
    });

    it("forwarded progress values increase (MCP: progress MUST increase with each notification)", T, () => {
      const bad = got.findIndex((p, i) => i > 0 && !(p.progress > got[i - 1].progress));
      assert.equal(bad, -1, bad === -1 ? "" : `progress went from ${got[bad - 1].progress} to ${got[bad].progress}`);
    });
  });

  // Regression (eeef4dc): p:write queues without bound and every request of the upstream is
  // answered, so an upstream that sends requests and never reads its stdin grew moonbox's memory
  // without end (1M requests: +290 MB). Now the connection is given up above 2 x max_message_bytes.
  it("an upstream that floods requests and never reads its stdin cannot grow moonbox's memory without bound", { timeout: 45000 }, withLog(get, async () => {
    const before = g.mem();
    assert.deepEqual(await g.ok("return servers.flood.request_flood({ n = 400000 })"), { flooding: 400000 });
    // the fixture finishes its flood, or moonbox gives the connection up first
    const t0 = Date.now();
    const done = async () => readLog(FLOOD).some((r) => r.flood_done) || (await g.stats()).flood.restarts > 0;
    while (!(await done()) && Date.now() - t0 < 30000) await sleep(100);
    assert.ok(await done(), "the fixture did not finish its flood within 30 s and moonbox kept the connection");
    await sleep(300);
    const after = g.mem();
    const grew = after.hwm - before.hwm;
    assert.ok(grew < 64 * 1024, `peak RSS grew by ${(grew / 1024).toFixed(0)} MB (RSS now ${(after.rss / 1024).toFixed(0)} MB) ` +
      "after 400,000 requests from an upstream that does not read its stdin");
    const u = (await g.stats()).flood;
    if (u.restarts > 0) assert.match(u.last_error, /stdin/, "given up, but the reason does not say why");
    await stillServes(g);
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: tool definitions of unbounded size", () => {
  let g;
  const get = () => g;
  let t0;
  before(async () => {
    t0 = Date.now();
    g = await gateway({ big: hostile("endless", {}, { HOSTILE_DESC_BYTES: String(1 << 20), HOSTILE_PAGES: "10" }) },
      { readyTimeout: 30000 });
  });
  after(() => g?.close());

  // Regression (eeef4dc): refresh_tools kept every page (each up to max_message_bytes, up to 1000
  // pages) and catalog.import indexed descriptions of any size: 10 tools with 1 MB descriptions
  // cost ~65 MB of peak RSS and ~2 s of the loop thread; 100 MB of pages cost 500 MB.
  it("10 tools with 1 MB descriptions do not cost moonbox tens of MB", { timeout: 30000 }, withLog(get, async () => {
    const u = (await g.stats()).big;
    assert.deepEqual([u.state, u.tools], ["ready", 10]);
    const m = g.mem();
    assert.ok(m.hwm < 60 * 1024, `moonbox's peak RSS is ${(m.hwm / 1024).toFixed(0)} MB after listing 10 MB of tool ` +
      `definitions (ready after ${Date.now() - t0} ms)`);
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: an upstream that keeps changing a big tool list", () => {
  let g;
  const get = () => g;
  before(async () => {
    g = await gateway({
      churn: hostile("many", {}, { HOSTILE_TOOLS: "10000", HOSTILE_CHURN_MS: "150" }),
      good: hostile("good"),
    }, { readyTimeout: 20000 });
  });
  after(() => g?.close());

  // Regression (eeef4dc): schedule_refresh debounced list_changed by 100 ms only; each refresh of
  // 10,000 tools (refresh_tools + catalog.import) takes ~1 s of the loop thread, so a server that
  // sent list_changed every 150 ms with a slightly different list kept the loop busy.
  it("list_changed every 150 ms on 10,000 tools does not stall other executions", { timeout: 30000 }, withLog(get, async () => {
    const lat = [];
    const t0 = Date.now();
    while (Date.now() - t0 < 3000) {
      const { sc, ms } = await g.exec("return 1+1", { timeout_ms: 2000 });
      assert.equal(sc.result, 2);
      lat.push(ms);
      await sleep(20);
    }
    lat.sort((a, b) => a - b);
    const p90 = lat[Math.floor(lat.length * 0.9)];
    assert.ok(p90 < 250, `"return 1+1" took ${p90.toFixed(0)} ms at the 90th percentile (max ${lat.at(-1).toFixed(0)} ms, ` +
      `${lat.length} runs in 3 s) while an upstream re-lists 10,000 tools every 150 ms`);
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: timeouts, late answers and cancellation", () => {
  let g;
  const get = () => g;
  const dir = tmp("moonbox-gwsec-logs-");
  const LATE = path.join(dir, "late.log");
  const SLOW = path.join(dir, "slow.log");
  before(async () => {
    g = await gateway({
      late: hostile("evil", { timeoutMs: 400 }, { HOSTILE_LOG: LATE }),
      slowsrv: hostile("evil", {}, { HOSTILE_LOG: SLOW }),
      crash: hostile("evil"),
      good: hostile("good"),
    });
  });
  after(async () => {
    await g?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("an answer after the call's timeout is ignored; the next call gets its own answer", T, withLog(get, async () => {
    // timeline (ms): late sent at 0, times out at 400 (cancel + ping); slow sent at ~400 and
    // answered at ~700; the late answer arrives at ~550, while slow is waiting
    const r = await g.ok('local ok, e = pcall(servers.late.late, { ms = 550, tag = "a" }) ' +
      'local r = servers.late.slow({ ms = 300, tag = "b" }) return { ok, e, r }');
    assert.deepEqual(r, [false,
      "late.late: no answer to tools/call within 400 ms (timeoutMs of mcpServers.late, else upstream_timeout_ms)",
      { late: true, tag: "b" }]);
    const msgs = received(LATE);
    const call = msgs.find((m) => m.method === "tools/call" && m.params.name === "late");
    const cancels = msgs.filter((m) => m.method === "notifications/cancelled");
    assert.deepEqual(cancels.map((m) => m.params), [{ requestId: call.id,
      reason: "no answer to tools/call within 400 ms (timeoutMs of mcpServers.late, else upstream_timeout_ms)" }]);
    assert.ok(msgs.some((m) => m.method === "ping"), "no ping after the timeout");
    const u = (await g.stats()).late;
    assert.deepEqual([u.state, u.timeouts, u.restarts, u.in_flight], ["ready", 1, 0, 0]);
  }));

  it("the execution's deadline cancels every call still in flight, upstream too", T, withLog(get, async () => {
    const { sc, ms } = await g.exec("local c = {} for i = 1, 20 do c[i] = { 'slowsrv', 'slow', { ms = 5000 } } end " +
      "c[21] = function() return servers.slowsrv.slow({ ms = 5000 }) end return mcp.parallel(c)", { timeout_ms: 500 });
    assert.equal(sc.success, false);
    assert.equal(sc.error_type, "timeout");
    assert.ok(ms < 1500, `answered after ${ms} ms`);
    await sleep(200);
    const msgs = received(SLOW);
    const ids = msgs.filter((m) => m.method === "tools/call").map((m) => m.id).sort((a, b) => a - b);
    const cancelled = msgs.filter((m) => m.method === "notifications/cancelled");
    assert.equal(ids.length, 21);
    assert.deepEqual(cancelled.map((m) => m.params.requestId).sort((a, b) => a - b), ids);
    assert.ok(cancelled.every((m) => m.params.reason === "the execution that made this call ended"), clip(cancelled[0]));
    const u = (await g.stats()).slowsrv;
    assert.deepEqual([u.state, u.in_flight, u.calls, u.failed_calls, u.restarts], ["ready", 0, 21, 21, 0]);
  }));

  it("a server that exits in the middle of calls fails them with the reason and comes back", T, withLog(get, async () => {
    const r = await g.ok('return { pcall(mcp.parallel, { { "crash", "slow", { ms = 5000 } }, { "crash", "exit", { status = 5 } } }) }');
    assert.deepEqual(r, [false, 'mcp.parallel: item 1: crash.slow: upstream server "crash" failed: the process exited with status 5']);
    const u = await g.waitFor("crash", (x) => x.state === "ready" && x.restarts === 1, 5000);
    assert.deepEqual([u.in_flight, u.last_error], [0, "the process exited with status 5"]);
    assert.deepEqual(await g.ok('return servers.crash.echo({ back = true })'), { args: { back: true } });
  }));

  it("the client cancelling execute_code cancels its upstream calls", T, withLog(get, async () => {
    const before = received(SLOW, (m) => m.method === "notifications/cancelled").length;
    const calls = received(SLOW, (m) => m.method === "tools/call").length;
    const ac = new AbortController();
    const p = g.client.callTool({ name: "execute_code", arguments: {
      code: "return mcp.parallel({ { 'slowsrv', 'slow', { ms = 5000 } }, { 'slowsrv', 'slow', { ms = 5000 } } })", timeout_ms: 10000 } },
    undefined, { signal: ac.signal });
    const t0 = Date.now();
    while (received(SLOW, (m) => m.method === "tools/call").length < calls + 2 && Date.now() - t0 < 5000) await sleep(20);
    ac.abort("test");
    await p.catch(() => {});
    const u = await g.waitFor("slowsrv", (x) => x.in_flight === 0, 3000);
    assert.equal(u.state, "ready");
    await sleep(100);
    assert.equal(received(SLOW, (m) => m.method === "notifications/cancelled").length - before, 2);
  }));

  it("the well-behaved server is unaffected", T, withLog(get, () => stillServes(g)));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: what a child process inherits", () => {
  let g;
  const get = () => g;
  const dir = tmp("moonbox-gwsec-logs-");
  const LOG = path.join(dir, "env.log");
  const SECRETS = {
    MOONBOX_HTTP_TOKENS: "tok-abcdefghijklmnopqrstuvwxyz=tenantx",
    MY_SECRET_API_KEY: "sk-live-never-pass-this-on-0123456789",
  };
  const HEADER_SECRET = "Bearer hdr-secret-of-another-server-42";
  before(async () => {
    g = await gateway({
      good: hostile("good", { env: { FROM_CONFIG: "yes", HOSTILE_LOG: LOG } }),
      vault: { url: "http://127.0.0.1:9/mcp", headers: { Authorization: HEADER_SECRET }, disabled: true },
    }, { viaEnv: true, env: SECRETS });
  });
  after(async () => {
    await g?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the child sees the config's env and PATH, none of moonbox's secrets or settings", T, withLog(get, async () => {
    const start = readLog(LOG).find((r) => r.start);
    assert.ok(start, "no start record");
    const env = start.env;
    assert.equal(env.FROM_CONFIG, "yes");
    assert.equal(env.PATH, process.env.PATH);
    const leaked = Object.keys(env).filter((k) => k.startsWith("MOONBOX_") || k === "MY_SECRET_API_KEY");
    assert.deepEqual(leaked, []);
    const text = JSON.stringify(start);
    for (const s of [...Object.values(SECRETS), HEADER_SECRET, "hdr-secret"]) {
      assert.ok(!text.includes(s), `the child can read ${JSON.stringify(s)}`);
    }
  }));

  it("the child inherits no descriptor of moonbox's (database, sockets)", T, withLog(get, async () => {
    const start = readLog(LOG).find((r) => r.start);
    const fds = start.fds;
    // 0, 1 and 2 are the stdio pipes moonbox made (libuv makes them with socketpair)
    const bad = Object.entries(fds).filter(([fd, t]) => Number(fd) > 2 && (t.includes(g.dataDir) || /^socket:/.test(t) || /moonbox/.test(t)));
    assert.deepEqual(bad, [], clip(fds));
  }));

  it("a disabled server is reported as such and calls to it say so", T, withLog(get, async () => {
    const u = (await g.stats()).vault;
    assert.equal(u.state, "disabled");
    assert.equal(await g.err("return servers.vault.x({})"), 'upstream server "vault" is disabled in mcpServers');
    assert.ok(!g.stderr().includes("hdr-secret"), "the header secret was logged");
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: credentials in an upstream's URL", () => {
  let g, srv, port;
  const get = () => g;
  before(async () => {
    srv = http.createServer((req, res) => {
      res.writeHead(401, { "Content-Type": "text/plain" });
      res.end("bad credentials");
    });
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    port = srv.address().port;
    g = await gateway({
      h: { url: `http://user:pw-secret-1@127.0.0.1:${port}/mcp?api_key=q-secret-2` },
      good: hostile("good"),
    }, { ready: ["good"], args: ["--upstream-init-timeout-ms", "2000"] });
  });
  after(async () => {
    await g?.close();
    srv?.close();
  });

  // Regression (eeef4dc): upstream_transport.lua open_http wrote "HTTP %d from <s.url>" with the
  // configured URL as it was, into last_error (get_execution_stats), call errors and the log;
  // user:password@ and the query string carry credentials (hosted MCP servers take ?api_key=...).
  it("an HTTP error names the server without the URL's password or query string", T, withLog(get, async () => {
    const u = await g.waitFor("h", (x) => x?.state === "backoff");
    assert.match(u.last_error, new RegExp(`^initialize: HTTP 401 from http://127\\.0\\.0\\.1:${port}/mcp\\b.*bad credentials`), u.last_error);
    const e = await g.err("return servers.h.anything({})");
    const leaks = [u.last_error, e, g.stderr()].filter((t) => /pw-secret-1|q-secret-2/.test(t));
    assert.deepEqual(leaks, [], "the URL's credentials reached the stats, the model or the log");
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: a slow name lookup does not hold the loop", () => {
  // libcurl's threaded resolver: cancelling a transfer whose lookup still runs used to join the
  // resolver thread on the loop (curl_multi_remove_handle), so one slow DNS answer froze the whole
  // server - every client, every execution - for as long as getaddrinfo took (a review found an
  // 8 s exit delay at shutdown). CURLOPT_QUICK_EXIT detaches it. The shim makes "slowhost" take
  // 3 s to resolve; initialize gives up after 500 ms and the transfer is cancelled mid-lookup.
  it("while a cancelled lookup is still running, moonbox keeps answering at once", T, async () => {
    const dir = tmp("moonbox-dns-");
    let g;
    try {
      const so = path.join(dir, "slow_dns.so");
      const cc = spawnSync("cc", ["-shared", "-fPIC", "-o", so, path.join(HERE, "fixtures/slow_dns.c"), "-ldl"],
        { encoding: "utf8" });
      assert.equal(cc.status, 0, `cc: ${cc.stderr}`);
      const t0 = Date.now();
      g = await gateway({ slow: { url: "http://slowhost:9/mcp" } },
        { ready: [], env: { LD_PRELOAD: so, SLOW_DNS_MS: "3000" }, args: ["--upstream-init-timeout-ms", "500"] });
      let worst = 0;
      while (Date.now() - t0 < 3800) {
        const p0 = Date.now();
        await g.client.ping();
        worst = Math.max(worst, Date.now() - p0);
        await sleep(25);
      }
      const u = (await g.stats()).slow;
      // moonbox's 500 ms initialize timer and libcurl's own 500 ms transfer timeout race: either
      // may end the attempt (what matters here is that the loop answered pings meanwhile)
      assert.match(u.last_error ?? "", /no answer to initialize within 500 ms|Resolving timed out after \d+ milliseconds/,
        JSON.stringify(u));
      assert.ok(worst < 500, `a ping took ${worst} ms while the cancelled lookup ran (the loop was blocked)`);
    } finally {
      await g?.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("gateway security: HTTPS upstreams are verified", () => {
  // A man in the middle with a certificate nobody vouches for: libcurl's defaults (peer and host
  // verification) must stay on. The certificate is self-signed for 127.0.0.1 (openssl, a Debian
  // package the Makefile installs for tests); the server counts every request it gets.
  let g, srv, port, dir, requests = 0;
  const get = () => g;
  before(async () => {
    dir = tmp("moonbox-tls-");
    const key = path.join(dir, "key.pem"), cert = path.join(dir, "cert.pem");
    const r = spawn("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
      "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], { stdio: "ignore" });
    const code = await new Promise((resolve) => r.on("exit", resolve));
    assert.equal(code, 0, "openssl could not make a test certificate");
    const https = await import("node:https");
    srv = https.createServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => {
      requests++;
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: 0, result: {} }));
    });
    await new Promise((res) => srv.listen(0, "127.0.0.1", res));
    port = srv.address().port;
    g = await gateway({ tls: { url: `https://127.0.0.1:${port}/mcp` }, good: hostile("good") },
      { ready: ["good"], args: ["--upstream-init-timeout-ms", "3000"] });
  });
  after(async () => {
    await g?.close();
    srv?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("a self-signed certificate is refused before any request is sent, with the reason", T, withLog(get, async () => {
    const u = await g.waitFor("tls", (x) => x?.state === "backoff", 10000);
    assert.match(u.last_error, new RegExp(`^initialize: .*https://127\\.0\\.0\\.1:${port}/mcp.*certificate`, "i"), u.last_error);
    assert.equal(requests, 0, "the server got a request through an unverified connection");
    assert.match(await g.err("return servers.tls.anything({})"), /^upstream server "tls" is (not available: initialize: .*certificate.*|starting)/i);
    await stillServes(g);
  }));
});

describe("gateway security: policy bypass attempts from sandbox code", () => {
  let g;
  const get = () => g;
  before(async () => {
    g = await gateway({
      pol: hostile("weird", { deniedTools: ["delete_all", "get-*"], allowWrites: false }),
      good: hostile("good"),
      capped: hostile("good", { maxCalls: 3 }),
      ln: hostile("longnames", { env: { HOSTILE_TOOLS: "2000" } }),
    }, { args: ["--upstream-max-calls", "50"] });
  });
  after(() => g?.close());

  const denied = 'tool "delete_all" of server "pol" is in its deniedTools';
  const notRO = (t) => `tool "${t}" of server "pol" is not marked read-only (annotations.readOnlyHint) and the server's allowWrites is false`;

  it("a denied tool stays denied however its name is written", T, withLog(get, async () => {
    assert.equal(await g.err("return servers.pol.delete_all({})"), denied);
    assert.equal(await g.err("return servers.pol:delete_all({})"), denied);
    assert.equal(await g.err('return mcp.call("pol", "delete_all", {})'), denied);
    assert.equal(await g.err('return mcp.parallel({ { "pol", "delete_all", {} } })'), `code:1: mcp.parallel: item 1: ${denied}`);
    assert.equal(await g.err('return mcp.parallel({ function() return servers.pol.delete_all({}) end })'),
      `code:1: mcp.parallel: item 1: ${denied}`);
    assert.match(await g.err('return mcp.call("pol", "delete_all ", {})'), /^server "pol" has no tool "delete_all "/);
    assert.match(await g.err('return mcp.call("pol", "delete-all", {})'), /^server "pol" has no tool "delete-all"/);
    // a glob denies through the identifier mapping too: servers.pol.get_sum is "get-sum"
    assert.equal(await g.err("return servers.pol.get_sum({})"), 'tool "get-sum" of server "pol" is in its deniedTools');
    assert.equal(await g.err("return servers.pol.a_b({})"),
      'servers.pol.a_b is ambiguous (tools "a-b", "a.b"); use mcp.call("pol", <exact name>, args)');
    assert.deepEqual(await g.ok('return mcp.call("pol", "a.b", {})'), { called: "a.b", args: {} });
    // "Delete_All" is a different tool of the upstream, read-only, so it may be called
    assert.deepEqual(await g.ok("return servers.pol.Delete_All({})"), { called: "Delete_All", args: {} });
  }));

  it("allowWrites=false: readOnlyHint must be the boolean true", T, withLog(get, async () => {
    for (const t of ["readonly_str", "readonly_one", "readonly_arr", "schema_str"]) {
      assert.equal(await g.err(`return servers.pol.${t}({})`), notRO(t));
    }
    const r = (await g.tool("search_tools", { query: "readonly_str" })).structuredContent;
    assert.deepEqual(r.tools.filter((t) => t.category === "pol").map((t) => t.name), []);
    const u = (await g.stats()).pol;
    assert.equal(u.calls, 2, "only Delete_All and a.b reached the upstream");
  }));

  it("server and tool names must be strings; argument types are checked with clear errors", T, withLog(get, async () => {
    assert.equal(await g.err('return mcp.call(1, "x")'), "code:1: bad argument #1 to 'call' (string expected, got number)");
    assert.equal(await g.err('return mcp.call("good", {})'), "code:1: bad argument #2 to 'call' (string expected, got table)");
    assert.equal(await g.err("return servers[1]"), "code:1: servers[...]: server names are strings");
    assert.equal(await g.err("return servers.good[true]"), "code:1: servers.good[...]: tool names are strings");
    assert.equal(await g.err("return servers.good.echo({ 1, 2 })"), "good.echo: arguments must be a table of named fields");
    assert.match(await g.err("local t = {} t.t = t return servers.good.echo(t)"),
      /^code:1: (good\.echo: arguments|upstream_call): JSON nesting exceeds json_max_depth=128 \(a deeper table, or a table that contains itself\)$/);
    assert.match(await g.err("return servers.good.echo({ f = print })"),
      /^code:1: (good\.echo: arguments|upstream_call): cannot encode function at value\.(args\.)?f$/);
    assert.equal(await g.err("return servers.good.echo({}, 2)"), "code:1: servers.good.echo: takes one table of arguments, got 2 values");
    assert.equal(await g.err("servers.x = 1"), "code:1: servers is read-only: call servers.<server>.<tool>(args)");
    assert.equal(await g.ok("return getmetatable(servers)"), false);
    assert.deepEqual(await g.ok("return servers.good:echo({ a = 1 })"), { args: { a: 1 } });
    assert.deepEqual(await g.ok("return servers.good.echo({})"), { args: {} });
  }));

  // Regression: sandbox_upstream.c tool_fn -> do_call checked the args at stack index 3 (after server
  // and tool were inserted), so the message named argument #3 of a call that took one argument.
  it("a non-table argument to servers.x.y names the argument the code passed (#1)", T, withLog(get, async () => {
    assert.match(await g.err('return servers.good.echo("s")'), /bad argument #1 to 'echo' \(table expected, got string\)/);
  }));

  it("huge arguments are bounded by the sandbox's memory, not the host", T, withLog(get, async () => {
    const { sc } = await g.exec('local s = string.rep("x", 64 * 1024 * 1024) return servers.good.echo({ s = s, t = s })', { memory_mb: 32 });
    assert.equal(sc.success, false);
    assert.equal(sc.error_type, "memory", clip(sc));
    await stillServes(g);
  }));

  // Found in review: the call payload was a plain malloc outside the sandbox's memory budget, so
  // one 4 MB table used by 200 items made the process peak at 3.7 GB for a 12 MB sandbox. The
  // payload is now bounded by max_message_bytes (16 MiB here) and freed on every error.
  it("mcp.parallel: one big argument table repeated in many items is refused at max_message_bytes", T, withLog(get, async () => {
    const before = g.mem().hwm;
    assert.equal(await g.err('local big = { s = string.rep("x", 4 * 1024 * 1024) } local c = {} ' +
      'for i = 1, 200 do c[i] = { "good", "echo", big } end return mcp.parallel(c)'),
      "code:1: good.echo: the arguments of the upstream calls add up to more than 16777216 bytes (max_message_bytes)");
    const grew = g.mem().hwm - before;
    assert.ok(grew < 120 * 1024, `peak RSS grew by ${Math.round(grew / 1024)} MB for a refused 800 MB payload`);
    assert.deepEqual(await g.ok("return 1 + 1"), 2);
  }));

  // Found in review: a task could hand the scheduler a forged spec whose __index raised while the
  // payload buffer was held (it leaked, ~1 MB per call). Specs are read without metamethods now.
  it("a forged spec from a task is read without metamethods and leaks nothing", T, withLog(get, async () => {
    const code = 'local big = { s = string.rep("x", 1024 * 1024) } local n = 0 ' +
      'for r = 1, 100 do local A local ok = pcall(mcp.parallel, { { "nosuch", "t", big }, ' +
      'function() A = coroutine.running() mcp.call("nosuch", "t", {}) mcp.call("nosuch", "t", {}) end, ' +
      'function() local _, m = coroutine.resume(A, true, 1) ' +
      'coroutine.yield(m, setmetatable({}, { __index = function() error("boom") end })) end }) ' +
      'if not ok then n = n + 1 end end return n';
    await g.ok(code, { timeout_ms: 20000, memory_mb: 256 });
    const after1 = g.mem().rss;
    await g.ok(code, { timeout_ms: 20000, memory_mb: 256 });
    await g.ok(code, { timeout_ms: 20000, memory_mb: 256 });
    const grew = g.mem().rss - after1;
    assert.ok(grew < 40 * 1024, `RSS grew by ${Math.round(grew / 1024)} MB over two more executions`);
  }));

  it("mcp.parallel: 10,000 items stop at upstream_max_calls; 100,001 items are refused", T, withLog(get, async () => {
    assert.equal(await g.err('local c = {} for i = 1, 10000 do c[i] = { "good", "echo", { i = i } } end return mcp.parallel(c)'),
      "code:1: mcp.parallel: item 51: too many upstream calls in one execution (upstream_max_calls=50)");
    assert.equal(await g.err('local c = {} for i = 1, 100001 do c[i] = 1 end return mcp.parallel(c)'),
      "code:1: mcp.parallel: 100001 items, more than 100000");
    assert.equal(await g.err("return mcp.parallel({ 1 })"),
      "code:1: mcp.parallel: item 1 must be a function or {server, tool, args}, got number");
    assert.equal(await g.err('return mcp.parallel({ { server = 1, tool = "x" } })'),
      "code:1: mcp.parallel: item 1 must be a function or {server, tool, args} (strings and a table)");
  }));

  it("maxCalls cannot be escaped with pcall or mcp.parallel", T, withLog(get, async () => {
    const r = await g.ok("local n = 0 for i = 1, 10 do if pcall(servers.capped.echo, {}) then n = n + 1 end end " +
      'local ok, e = pcall(mcp.parallel, { { "capped", "echo" } }) return { n, e }');
    assert.deepEqual(r, [3, 'mcp.parallel: item 1: too many calls to server "capped" in one execution (mcpServers.capped.maxCalls=3)']);
  }));

  it("yields, nested parallels and coroutine games inside tasks", T, withLog(get, async () => {
    assert.equal(await g.err("return mcp.parallel({ function() coroutine.yield(1) end })"),
      "code:1: mcp.parallel: item 1 yielded something that is not an upstream call (do not yield from its function directly)");
    assert.deepEqual(await g.ok('return mcp.parallel({ function() return mcp.parallel({ { "good", "echo", { a = 1 } }, ' +
      'function() return servers.good.echo({ b = 2 }) end }) end, function() return servers.good.echo({ c = 3 }) end })'),
    [[{ args: { a: 1 } }, { args: { b: 2 } }], { args: { c: 3 } }]);
    assert.deepEqual(await g.ok("return mcp.parallel({ function() return coroutine.wrap(function() " +
      "return servers.good.echo({ x = 1 }) end)() end })"), [{ args: { x: 1 } }]);
    // a task resuming another task's coroutine (forging its answer), or closing it
    assert.equal(await g.err("local T return mcp.parallel({ function() T = coroutine.running() return servers.good.echo({}) end, " +
      'function() return coroutine.resume(T, true, "forged") end })'), "code:1: mcp.parallel: item 1: cannot resume dead coroutine");
    assert.equal(await g.err("local T return mcp.parallel({ function() T = coroutine.running() return servers.good.echo({}) end, " +
      "function() return coroutine.close(T) end })"), "code:1: mcp.parallel: item 1: cannot resume dead coroutine");
    assert.equal(await g.err('return mcp.parallel({ function() error("boom") end })'), "code:1: mcp.parallel: item 1: code:1: boom");
    assert.deepEqual(await g.ok("return mcp.parallel({ function() return pcall(servers.good.nope, {}) end })"), [false]);
    await stillServes(g);
  }));

  // lua/prelude/parallel.lua runs in the sandbox's own state, loaded at the first mcp.parallel of
  // an execution: it must not pick up anything sandbox code replaced before (or after) that,
  // nor let a replaced global bypass a policy or change its messages.
  it("mcp.parallel's scheduler cannot be tampered with through globals", T, withLog(get, async () => {
    const tamper = "local err, P, S = error, mcp.parallel, servers " +
      "local function boom() err('tampered function called', 0) end " +
      "coroutine.create, coroutine.resume, coroutine.status, coroutine.wrap, coroutine.yield = boom, boom, boom, boom, boom " +
      "type, rawget, rawlen, rawequal, select, error, pcall, next, tostring, getmetatable = boom, boom, boom, boom, boom, boom, boom, boom, boom, boom " +
      "string.format, string.sub, table.concat, table.unpack = boom, boom, boom, boom ";
    const work = "P({ { 'good', 'echo', { a = 1 } }, function() return S.good.echo({ b = S.good.echo({ c = 2 }).args.c }) end, " +
      "{ server = 'good', tool = 'echo' } })";
    const want = [{ args: { a: 1 } }, { args: { b: 2 } }, { args: {} }];
    assert.deepEqual(await g.ok(`${tamper} return ${work}`), want);
    assert.deepEqual(await g.ok(`local first = mcp.parallel({ { 'good', 'echo', {} } }) ${tamper} return ${work}`), want);
    // globals that raise on any read or write, set after taking what the code itself needs
    assert.deepEqual(await g.ok(`local setmt = setmetatable ${tamper} setmt(_G, { __index = boom, __newindex = boom }) return ${work}`), want);
    // policies and messages are unchanged
    assert.equal(await g.err(`${tamper} return P({ { 'pol', 'delete_all', {} } })`), `code:1: mcp.parallel: item 1: ${denied}`);
    assert.equal(await g.err(`${tamper} return P({ 42 })`),
      "code:1: mcp.parallel: item 1 must be a function or {server, tool, args}, got number");
    assert.equal(await g.err(`${tamper} return P({ function() return S.pol.delete_all({}) end })`),
      `code:1: mcp.parallel: item 1: ${denied}`);
    await stillServes(g);
  }));

  // upstream.lua resolve_tool runs catalog_text.levenshtein against every tool for a name it does
  // not know; the early exit (rowmin > max) never fires for names that share a long prefix, so
  // each comparison fills the whole table in Lua on the loop thread. Cutting names at 64 bytes
  // (eeef4dc) still costs 4096 cells per tool: ~1.2 s for 2000 tools, ~6 s for 10,000, during
  // which no other session is served. A band of |i - j| <= max (or a cap on the work) fixes it.
  it("an unknown tool name on a server with long similar names is answered quickly", T, withLog(get, async () => {
    const { sc, ms } = await g.exec('return mcp.call("ln", string.rep("a", 240) .. "0000x", {})', { timeout_ms: 1000 });
    assert.ok(ms < 500, `the unknown-tool answer took ${ms.toFixed(0)} ms (2000 tools; execution timeout_ms=1000): ${clip(sc.error)}`);
    assert.equal(sc.success, false);
    assert.match(sc.error, /^server "ln" has no tool "a{240}0000x"/);
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: PII tokens and upstream arguments", () => {
  const dir = tmp("moonbox-gwsec-pii-");
  const dataDir = path.join(dir, "data");
  const LOG = path.join(dir, "echo.log");
  const EMAIL = "alice.pii@example.com";
  const servers = { good: hostile("good", {}, { HOSTILE_LOG: LOG }) };
  let token;
  let g;
  const get = () => g;
  /** Runs fn with a moonbox on the shared data directory; always closes it. */
  async function session(args, fn) {
    g = await gateway(servers, { dataDir, args });
    try {
      await fn();
    } finally {
      await g.close();
    }
  }
  before(() => mkdirSync(dataDir));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const lastArgs = () => received(LOG, (m) => m.method === "tools/call").at(-1).params.arguments;

  it("a token in the code is restored only in the upstream's arguments; the result shows the token again", T, withLog(get, () => session([], async () => {
    token = await g.ok(`return "${EMAIL}"`);
    assert.match(token, /^\[EMAIL_[0-9a-f]{8,16}\]$/);
    const { sc } = await g.exec(`return servers.good.echo({ to = "${token}", list = { "x ${token} y" }, ["${token}"] = 1, ` +
      'unknown = "[EMAIL_deadbeef]" })');
    assert.equal(sc.success, true, clip(sc));
    assert.deepEqual(lastArgs(), { to: EMAIL, list: [`x ${EMAIL} y`], [EMAIL]: 1, unknown: "[EMAIL_deadbeef]" });
    assert.ok(!JSON.stringify(sc).includes(EMAIL), `the value reached the model: ${clip(sc)}`);
    assert.deepEqual(sc.result, { args: { to: token, list: [`x ${token} y`], [token]: 1, unknown: "[EMAIL_deadbeef]" } });
    // an upstream tool error that quotes the value: tokenized on the way out too
    const e = await g.err(`return servers.good.fail({ to = "${token}" })`);
    assert.ok(!e.includes(EMAIL) && e.includes(token), e);
  })));

  // docs/pii.md: "set pii_restore=0: then nothing the server offers turns a token back into a
  // value". Regression (eeef4dc): tokens in upstream arguments were restored whenever
  // pii_policy=1, whatever pii_restore said, so any echoing tool gave the value to sandbox code,
  // which can reshape it past the output detector.
  it("pii_restore=0: an echoing upstream cannot be used to read a token's value", T, withLog(get, () => session(["--pii-restore", "0"], async () => {
    assert.ok(token, "needs the token of the first test");
    const { sc } = await g.exec(`local r = servers.good.echo({ s = "${token}" }) return (r.args.s:gsub(".", "%0 "))`);
    const spaced = EMAIL.split("").join(" ");
    assert.ok(!JSON.stringify(sc).includes(spaced.slice(0, 20)), `the value came out reshaped: ${clip(sc)}`);
  })));

  it("pii_policy=0: tokens in arguments are passed as written", T, withLog(get, () => session(["--pii-policy", "0"], async () => {
    assert.ok(token, "needs the token of the first test");
    await g.ok(`return servers.good.echo({ s = "${token}" })`);
    assert.deepEqual(lastArgs(), { s: token });
  })));
});

// ---------------------------------------------------------------------------------------------

describe("gateway security: tenants over HTTP", () => {
  const TOK_A = "tenant-a-token-0123456789abcdef";
  const TOK_B = "tenant-b-token-0123456789abcdef";
  const EMAIL = "bob.tenant@example.net";
  const dir = tmp("moonbox-gwsec-http-");
  const LOG = path.join(dir, "echo.log");
  let proc, url, a, b, stderr = "";
  const get = () => ({ stderr: () => stderr });

  async function connect(token) {
    const c = new Client({ name: "moonbox-gateway-security-http", version: "0.0.0" });
    const t = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
    await c.connect(t);
    return c;
  }
  async function run(c, code) {
    const r = await c.callTool({ name: "execute_code", arguments: { code, timeout_ms: 5000 } });
    return r.structuredContent;
  }

  before(async () => {
    requireBinary();
    const dataDir = path.join(dir, "data");
    mkdirSync(dataDir);
    writeFileSync(path.join(dataDir, "config.json"), JSON.stringify({ mcpServers: { good: hostile("good", {}, { HOSTILE_LOG: LOG }) } }));
    proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http-listen", "127.0.0.1:0", "--http-tokens", `${TOK_A}=alice,${TOK_B}=bob`],
      { stdio: ["ignore", "ignore", "pipe"] });
    url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no listening line: ${stderr}`)), 10000);
      proc.stderr.on("data", (c) => {
        if (stderr.length < 1 << 20) stderr += c;
        const m = stderr.match(/serving MCP over HTTP on (http:\/\/\S+\/mcp)/);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      proc.on("exit", (code) => reject(new Error(`moonbox exited ${code}: ${stderr}`)));
    });
    a = await connect(TOK_A);
    b = await connect(TOK_B);
    const t0 = Date.now();
    for (;;) {
      const r = await a.callTool({ name: "get_execution_stats", arguments: {} });
      if (r.structuredContent?.upstreams?.good?.state === "ready") {
        // a token's tenant sees the server and its state, not counters other tenants' calls moved
        assert.deepEqual(["calls", "failed_calls", "last_error", "in_flight", "pid"]
          .filter((k) => k in r.structuredContent.upstreams.good), []);
        break;
      }
      if (Date.now() - t0 > 10000) throw new Error(`good not ready: ${clip(r)}`);
      await sleep(25);
    }
  });
  after(async () => {
    await a?.close().catch(() => {});
    await b?.close().catch(() => {});
    if (proc && proc.exitCode === null) {
      proc.kill("SIGTERM");
      await new Promise((r) => proc.once("exit", r));
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it("a token of another tenant is not restored in upstream arguments", T, withLog(get, async () => {
    const sa = await run(a, `return "${EMAIL}"`);
    const token = sa.result;
    assert.match(token, /^\[EMAIL_[0-9a-f]{8,16}\]$/);
    const sb = await run(b, `return servers.good.echo({ s = "${token}" })`);
    assert.equal(sb.success, true, clip(sb));
    let args = received(LOG, (m) => m.method === "tools/call").at(-1).params.arguments;
    assert.deepEqual(args, { s: token }, "tenant bob's call carried alice's value");
    assert.ok(!JSON.stringify(sb).includes(EMAIL));
    const sa2 = await run(a, `return servers.good.echo({ s = "${token}" })`);
    assert.equal(sa2.success, true, clip(sa2));
    args = received(LOG, (m) => m.method === "tools/call").at(-1).params.arguments;
    assert.deepEqual(args, { s: EMAIL }, "the owning tenant's token is restored");
    assert.deepEqual(sa2.result, { args: { s: token } });
  }));

  it("the child holds no socket of moonbox's (the HTTP listener)", T, withLog(get, async () => {
    const start = readLog(LOG).find((r) => r.start);
    const socks = Object.entries(start.fds).filter(([fd, t]) => Number(fd) > 2 && /^socket:/.test(t));
    assert.deepEqual(socks, []);
  }));
});
