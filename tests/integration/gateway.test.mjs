// The gateway (issue 8): upstream MCP servers from "mcpServers" called from sandbox code, driven
// by the official SDK client against the real binary, with the real reference servers installed
// in tests/node_modules (server-everything, server-filesystem, server-memory, run with this node,
// never npx) and tests/integration/fixtures/upstream_fixture.mjs for servers that misbehave
// (never answer, hang on calls, add tools, speak Streamable HTTP with spec-conforming 404s).
//
// Covered: discovery (search_tools, get_tool_definition, list_tool_categories), calls over stdio
// (identifier mapping, mcp.call, ':' calls), what a call returns (structuredContent, JSON text,
// text), tool errors and pcall, unknown tools and servers, chaining through filesystem and memory,
// mcp.parallel (specs, functions, order, 100 echoes, concurrency, upstream_max_parallel, first
// failure), allowedTools / deniedTools / allowWrites / maxCalls / upstream_max_calls, timeoutMs,
// upstream_timeout_ms and the execution deadline (notifications/cancelled upstream), hung and
// silent servers (the ping probe, init timeout, backoff), a missing command, a server killed in
// the middle of a call (restart), Streamable HTTP upstreams restarted on the same port, tool list
// changes, PII tokens crossing upstream calls, /metrics, config errors and clean shutdown.
// Every describe block starts its own moonbox with a fresh data directory and config.json.
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/gateway.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync, existsSync,
} from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CreateMessageRequestSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { Client as SdkClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import {
  MOONBOX, RawPeer, TESTS_DIR, UPSTREAM_JS, connectWithConfig, execute, makeDataDir, nodeServer,
  requireBinary, startHttp, tapProgress, toolErrText as errText, upstreamStats, waitUpstream,
} from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const FIXTURE = path.join(TESTS_DIR, "integration/fixtures/upstream_fixture.mjs");
const EVERYTHING = () => nodeServer(UPSTREAM_JS.everything, ["stdio"]);
const fixture = (mode, env = {}, extra = {}) => nodeServer(FIXTURE, [mode], { env, ...extra });
const TOKEN_RE = /\[EMAIL_[0-9a-f]{8}\]/;

/** A temporary directory (real path: server-filesystem compares resolved paths). */
const tempDir = (prefix) => realpathSync(mkdtempSync(path.join(tmpdir(), prefix)));

/** Starts moonbox with config; `ready` names the upstreams to wait for before returning. */
async function gateway(config, opts = {}, ready = []) {
  const s = await connectWithConfig(config, opts);
  try {
    for (const name of ready) await waitUpstream(s.client, name);
  } catch (e) {
    e.message += `\nmoonbox stderr (tail):\n${s.stderr().slice(-3000)}`;
    await s.close();
    throw e;
  }
  return s;
}

/** Adds moonbox's stderr tail to a failing test's message. */
function withStderr(getS, fn) {
  return async () => {
    try {
      await fn();
    } catch (e) {
      const s = getS();
      if (s) e.message += `\nmoonbox stderr (tail):\n${s.stderr().slice(-3000)}`;
      throw e;
    }
  };
}

/** execute_code; returns { sc: structuredContent, res: the CallToolResult, ms: wall time }. */
async function exec(s, code, extra = {}) {
  const t0 = Date.now();
  const res = await execute(s.client, { code, ...extra }, { timeout: 120000 });
  return { sc: res.structuredContent, res, ms: Date.now() - t0 };
}

/** The result of a successful execution. */
async function runOk(s, code, extra) {
  const { sc } = await exec(s, code, extra);
  assert.equal(sc.success, true, `execution failed: ${sc.error}\n${sc.traceback ?? ""}`);
  return sc.result;
}

/** [ok, value-or-message] of one pcall'd call, as the sandbox sees it. */
async function pcallOf(s, callExpr, extra) {
  return runOk(s, `return { pcall(function() return ${callExpr} end) }`, extra);
}

const call = (s, name, args) => s.client.callTool({ name, arguments: args });

function ok(res) {
  assert.notEqual(res.isError, true, `unexpected tool error: ${JSON.stringify(res).slice(0, 800)}`);
  return res.structuredContent;
}

/** Polls fn until it returns a truthy value; returns it, or throws after ms. */
async function until(fn, ms = 10000, what = "condition", step = 50) {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 < ms) {
    last = await fn();
    if (last) return last;
    await sleep(step);
  }
  throw new Error(`${what}: not met within ${ms} ms (last value ${JSON.stringify(last)?.slice(0, 500)})`);
}

/** Whether a process exists (a zombie counts as existing). */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === "EPERM";
  }
}

function procState(pid) {
  try {
    return readFileSync(`/proc/${pid}/status`, "utf8").match(/^State:\s*(.*)$/m)?.[1] ?? "?";
  } catch {
    return "gone";
  }
}

/** JSON lines of a fixture log (FIXTURE_LOG). */
function logLines(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts an HTTP upstream (server-everything streamableHttp, or the fixture in http mode) on
 * port; resolves once it listens. Returns { proc, port, stop() }.
 */
async function startHttpUpstream(kind, port, env = {}) {
  const args = kind === "everything" ? [UPSTREAM_JS.everything, "streamableHttp"] : [FIXTURE, "http", String(port)];
  const proc = spawn(process.execPath, args, {
    env: { ...process.env, PORT: String(port), ...env }, stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  proc.stdout.on("data", () => {});
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${kind} did not listen on ${port}: ${err}`)), 15000);
    proc.stderr.on("data", (c) => {
      err += c;
      if (/listening on port|fixture ready/.test(err)) {
        clearTimeout(timer);
        resolve();
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${kind} exited (${code}) before listening: ${err}`));
    });
  });
  return {
    proc, port,
    async stop(signal = "SIGKILL") {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      await exited;
    },
  };
}

// ---------------------------------------------------------------------------------------------

describe("gateway: discovery and calls over stdio (everything, filesystem, memory)", () => {
  let s;
  let fsDir;
  let memDir;
  const S = () => s;

  before(async () => {
    fsDir = tempDir("moonbox-gw-fs-");
    memDir = tempDir("moonbox-gw-mem-");
    s = await gateway({
      mcpServers: {
        everything: nodeServer(UPSTREAM_JS.everything, ["stdio"], { env: { GW_TEST_VAR: "from-config-env" } }),
        // the allowed directory given relative to "cwd"
        fs: nodeServer(UPSTREAM_JS.filesystem, ["."], { cwd: fsDir }),
        memory: nodeServer(UPSTREAM_JS.memory, [], { env: { MEMORY_FILE_PATH: path.join(memDir, "memory.jsonl") } }),
      },
    }, { env: { GW_NOT_PASSED: "moonbox-own-env" } }, ["everything", "fs", "memory"]);
  });
  after(async () => {
    await s?.close();
    rmSync(fsDir, { recursive: true, force: true });
    rmSync(memDir, { recursive: true, force: true });
  });

  it("reports each upstream in get_execution_stats", T, withStderr(S, async () => {
    // server-everything registers one more tool after initialize and says so with
    // notifications/tools/list_changed: the count settles at 15 (with its sampling and
    // elicitation tools, which it offers because moonbox declares those capabilities to relay)
    const ev = await waitUpstream(s.client, "everything", (u) => u?.tools === 15, 5000);
    const all = await upstreamStats(s.client);
    assert.deepEqual(Object.keys(all).sort(), ["everything", "fs", "memory"]);
    for (const [name, tools, server] of [["everything", 15, "mcp-servers/everything"],
      ["fs", 14, "secure-filesystem-server"], ["memory", 9, "memory-server"]]) {
      const u = all[name];
      assert.equal(u.state, "ready", name);
      assert.equal(u.transport, "stdio", name);
      assert.equal(Number.isInteger(u.pid) && u.pid > 0, true, `${name} pid ${u.pid}`);
      assert.equal(alive(u.pid), true, `${name} process ${u.pid}`);
      assert.equal(u.tools, tools, name);
      assert.equal(u.server, server, name);
      assert.match(u.protocol, /^\d{4}-\d{2}-\d{2}$/, name);
      assert.equal(u.restarts, 0, name);
      assert.equal(u.failed_calls, 0, name);
      assert.equal(u.timeouts, 0, name);
    }
    assert.equal(ev.callable_tools, 15);
  }));

  it("search_tools finds upstream tools by description words; get_tool_definition gives schema and a Lua example", T, withStderr(S, async () => {
    await waitUpstream(s.client, "everything", (u) => u?.tools === 15, 5000);
    const found = ok(await call(s, "search_tools", { query: "sum of two numbers" }));
    assert.ok(found.tools.some((t) => t.name === "get-sum" && t.category === "everything"),
      JSON.stringify(found.tools));
    const graph = ok(await call(s, "search_tools", { query: "knowledge graph entities", category: "memory" }));
    assert.ok(graph.count >= 1);
    assert.ok(graph.tools.every((t) => t.category === "memory"));
    assert.ok(graph.tools.some((t) => t.name === "create_entities"), JSON.stringify(graph.tools));

    const echo = ok(await call(s, "get_tool_definition", { tool_name: "echo", category: "everything" }));
    assert.equal(echo.name, "echo");
    assert.equal(echo.category, "everything");
    assert.equal(echo.kind, "tool");
    assert.equal(echo.server, "everything");
    assert.equal(echo.description, "Echoes back the input string");
    assert.equal(echo.inputSchema.properties.message.type, "string");
    assert.deepEqual(echo.inputSchema.required, ["message"]);
    assert.equal(echo.example,
      'local result = servers.everything.echo({\n  message = "<message>", -- string, required: Message to echo\n})');

    // a dotted name as written in code; a tool name that is not a Lua identifier
    const sum = ok(await call(s, "get_tool_definition", { tool_name: "everything.get-sum" }));
    assert.equal(sum.name, "get-sum");
    assert.match(sum.example, /^local result = (mcp\.call\("everything", "get-sum", |servers\.everything\.get_sum\()\{/);
    assert.match(sum.example, /\n  a = 0, -- number, required: First number\n/);
    const structured = ok(await call(s, "get_tool_definition", { tool_name: "get-structured-content", category: "everything" }));
    assert.equal(structured.outputSchema.properties.temperature.type, "number");

    const cats = ok(await call(s, "list_tool_categories", {}));
    const byName = Object.fromEntries(cats.categories.map((c) => [c.name, c]));
    assert.equal(byName.everything?.tools, 15);
    assert.equal(byName.fs?.tools, 14);
    assert.equal(byName.memory?.tools, 9);
  }));

  it("calls tools: identifier mapping, mcp.call, ':' calls, text results", T, withStderr(S, async () => {
    assert.equal(await runOk(s, 'return servers.everything.echo{message="hello gateway"}'), "Echo: hello gateway");
    assert.equal(await runOk(s, "return servers.everything.get_sum{a=2, b=40}"), "The sum of 2 and 40 is 42.");
    assert.equal(await runOk(s, 'return mcp.call("everything", "get-sum", {a=1.5, b=2})'), "The sum of 1.5 and 2 is 3.5.");
    assert.equal(await runOk(s, 'return servers.everything:echo{message="colon"}'), "Echo: colon");
    assert.equal(await runOk(s, 'return servers["everything"]["get-sum"]{a=-1, b=1}'), "The sum of -1 and 1 is 0.");
    // a local alias of a server table works like the global
    assert.equal(await runOk(s, 'local ev = servers.everything; local f = ev.echo; return f{message="alias"}'),
      "Echo: alias");
  }));

  it("starts a stdio server in its configured cwd", T, withStderr(S, async () => {
    assert.deepEqual(await runOk(s, "return servers.fs.list_allowed_directories{}"),
      { content: `Allowed directories:\n${fsDir}` });
  }));

  it("progress of an upstream call reaches a client that asked for progress", T, withStderr(S, async () => {
    // the last progress and the answer often leave moonbox in one write: read them off the wire
    // (tapProgress says why onprogress alone would lose it)
    const tap = tapProgress(s.client);
    let res;
    try {
      res = await execute(s.client, {
        code: "return servers.everything.trigger_long_running_operation{duration = 0.3, steps = 3}",
      }, { onprogress: () => {}, timeout: 30000 });
    } finally {
      tap.stop();
    }
    assert.equal(res.structuredContent.success, true, res.structuredContent.error);
    assert.equal(tap.tokens().length, 1, JSON.stringify(tap.seen));
    const { list, beforeResponse } = tap.progressOf(tap.tokens()[0]);
    assert.deepEqual(list.map((p) => [p.progress, p.total, p.message]), [
      [1, 3, "everything.trigger-long-running-operation"],
      [2, 3, "everything.trigger-long-running-operation"],
      [3, 3, "everything.trigger-long-running-operation"],
    ]);
    assert.ok(beforeResponse, `progress after the answer: ${JSON.stringify(tap.seen)}`);
  }));

  it("returns structuredContent as a table and JSON text decoded", T, withStderr(S, async () => {
    assert.deepEqual(await runOk(s, 'return servers.everything.get_structured_content{location="Chicago"}'),
      { temperature: 36, conditions: "Light rain / drizzle", humidity: 82 });
    // a table, not text: fields are usable in Lua
    assert.equal(await runOk(s,
      'local w = servers.everything.get_structured_content{location="Los Angeles"}; return w.temperature * 2 + #w.conditions'),
      146 + "Sunny / Clear".length);
    // get-env answers JSON as text (no structuredContent): decoded. The server's "env" reaches it;
    // moonbox's own environment does not (only PATH, HOME and a few others are passed on).
    assert.deepEqual(await runOk(s, `
      local env = servers.everything.get_env{}
      return { type = type(env), var = env.GW_TEST_VAR, leaked = env.GW_NOT_PASSED or false,
               has_path = type(env.PATH) == "string" }`),
    { type: "table", var: "from-config-env", leaked: false, has_path: true });
  }));

  it("a tool error raises with the tool's text; pcall catches it", T, withStderr(S, async () => {
    const before_ = (await upstreamStats(s.client)).everything.tool_errors;
    assert.deepEqual(await pcallOf(s, 'servers.everything.get_sum{a="x", b=3}'), [false,
      "everything.get-sum: MCP error -32602: Input validation error: Invalid arguments for tool get-sum: Invalid input: expected number, received string at a"]);
    assert.deepEqual(await pcallOf(s, 'servers.fs.read_text_file{path="/etc/passwd"}'), [false,
      `fs.read_text_file: Access denied - path outside allowed directories: /etc/passwd not in ${fsDir}`]);
    // uncaught: the execution fails with that message
    const { sc } = await exec(s, 'servers.fs.read_text_file{path="/etc/hostname"}; return 1');
    assert.equal(sc.success, false);
    assert.equal(sc.error_type, "runtime");
    assert.match(sc.error, /fs\.read_text_file: Access denied - path outside allowed directories: \/etc\/hostname not in /);
    const after_ = (await upstreamStats(s.client)).everything.tool_errors;
    assert.equal(after_, before_ + 1);
  }));

  it("unknown tools get suggestions; unknown servers list the configured ones; bad arguments are named", T, withStderr(S, async () => {
    assert.deepEqual(await pcallOf(s, "servers.everything.get_summ{a=1, b=2}"), [false,
      'server "everything" has no tool "get_summ"; did you mean get-sum? (search_tools lists them)']);
    assert.deepEqual(await pcallOf(s, 'mcp.call("everything", "no_such_tool_at_all", {})'), [false,
      'server "everything" has no tool "no_such_tool_at_all" (search_tools lists them)']);
    assert.deepEqual(await pcallOf(s, "servers.nope.anything{}"), [false,
      'unknown upstream server "nope"; configured: everything, fs, memory']);
    assert.deepEqual(await pcallOf(s, 'servers.everything.echo{"positional"}'), [false,
      "everything.echo: arguments must be a table of named fields"]);
    // errors raised by the sandbox's own functions carry the caller's position, as Lua's do
    assert.deepEqual(await pcallOf(s, 'servers.everything.echo({message="a"}, 2)'), [false,
      "code:1: servers.everything.echo: takes one table of arguments, got 2 values"]);
    const ro = await pcallOf(s, "(function() servers.everything = 1 end)()");
    assert.deepEqual(ro, [false, "code:1: servers is read-only: call servers.<server>.<tool>(args)"]);
  }));

  it("chains filesystem calls: write_file then read_text_file (and the file is on disk)", T, withStderr(S, async () => {
    const r = await runOk(s, `
      servers.fs.create_directory{path = dir .. "/notes"}
      local w = servers.fs.write_file{path = dir .. "/notes/a.txt", content = "line one\\nline two\\n"}
      local back = servers.fs.read_text_file{path = dir .. "/notes/a.txt"}
      local n = 0
      for _ in back.content:gmatch("[^\\n]+") do n = n + 1 end
      local listing = servers.fs.list_directory{path = dir .. "/notes"}
      return { wrote = w.content, lines = n, first = back.content:match("^[^\\n]+"), listing = listing.content }`,
    { context_vars: { dir: fsDir } });
    assert.deepEqual(r, {
      wrote: `Successfully wrote to ${fsDir}/notes/a.txt`, lines: 2, first: "line one", listing: "[FILE] a.txt",
    });
    assert.equal(readFileSync(path.join(fsDir, "notes/a.txt"), "utf8"), "line one\nline two\n");
  }));

  it("chains memory calls and filters in Lua so only a small answer returns", T, withStderr(S, async () => {
    const { sc, res } = await exec(s, `
      local ents = {}
      for i = 1, 40 do
        ents[i] = { name = "person" .. i, entityType = "person",
                    observations = { "team " .. (i % 3 == 0 and "blue" or "red"), "likes number " .. i } }
      end
      local created = servers.memory.create_entities{entities = ents}
      local graph = servers.memory.read_graph{}
      local blue = {}
      for _, e in ipairs(graph.entities) do
        for _, o in ipairs(e.observations) do if o == "team blue" then blue[#blue + 1] = e.name end end
      end
      table.sort(blue, function(a, b) return tonumber(a:sub(7)) < tonumber(b:sub(7)) end)
      local found = servers.memory.search_nodes{query = "likes number 27"}
      return { created = #created.entities, total = #graph.entities, blue = #blue, first = blue[1],
               last = blue[#blue], search = found.entities[1].name }`);
    assert.equal(sc.success, true, sc.error);
    assert.deepEqual(sc.result, { created: 40, total: 40, blue: 13, first: "person3", last: "person39", search: "person27" });
    assert.ok(res.content[0].text.length < 600, `answer of ${res.content[0].text.length} bytes`);
    const lines = readFileSync(path.join(memDir, "memory.jsonl"), "utf8").trim().split("\n");
    assert.equal(lines.length, 40);
    assert.deepEqual(JSON.parse(lines[2]), { type: "entity", name: "person3", entityType: "person",
      observations: ["team blue", "likes number 3"] });
  }));

  it("mcp.parallel: 100 echoes come back in order", T, withStderr(S, async () => {
    const r = await runOk(s, `
      local calls = {}
      for i = 1, 100 do calls[i] = {"everything", "echo", {message = "m" .. i}} end
      return mcp.parallel(calls)`);
    assert.deepEqual(r, Array.from({ length: 100 }, (_, i) => `Echo: m${i + 1}`));
  }));

  it("mcp.parallel: call specs and functions mixed, results in item order", T, withStderr(S, async () => {
    const r = await runOk(s, `
      return mcp.parallel{
        {"everything", "get-sum", {a = 1, b = 2}},
        function()
          local x = servers.everything.echo{message = "a"}
          return servers.everything.echo{message = x}   -- a second round
        end,
        {server = "everything", tool = "echo", args = {message = "z"}},
        function() return 42 end,                         -- no call at all
        function()
          local ok, e = pcall(servers.everything.get_sum, {a = "x", b = 3})
          return {ok = ok, e = e}
        end,
        function()
          local w = servers.everything.get_structured_content{location = "New York"}
          return w.humidity
        end,
      }`);
    assert.deepEqual(r, [
      "The sum of 1 and 2 is 3.",
      "Echo: Echo: a",
      "Echo: z",
      42,
      { ok: false, e: "everything.get-sum: MCP error -32602: Input validation error: Invalid arguments for tool get-sum: Invalid input: expected number, received string at a" },
      82,
    ]);
  }));

  it("mcp.parallel: calls run concurrently, results keep item order whatever finishes first", T, withStderr(S, async () => {
    const { sc, ms } = await exec(s, `
      local t0 = os.clock()
      return mcp.parallel{
        {"everything", "trigger-long-running-operation", {duration = 1.2, steps = 1}},
        {"everything", "echo", {message = "fast"}},
        {"everything", "trigger-long-running-operation", {duration = 1, steps = 1}},
        {"everything", "trigger-long-running-operation", {duration = 1, steps = 2}},
      }`, { timeout_ms: 10000 });
    assert.equal(sc.success, true, sc.error);
    assert.deepEqual(sc.result, [
      "Long running operation completed. Duration: 1.2 seconds, Steps: 1.",
      "Echo: fast",
      "Long running operation completed. Duration: 1 seconds, Steps: 1.",
      "Long running operation completed. Duration: 1 seconds, Steps: 2.",
    ]);
    // sequentially this is 3.2 s
    assert.ok(sc.execution_time_ms >= 1150 && sc.execution_time_ms < 2600,
      `execution_time_ms ${sc.execution_time_ms} (wall ${ms})`);
  }));

  it("mcp.parallel: the first failure in item order raises; pcall catches it", T, withStderr(S, async () => {
    assert.deepEqual(await pcallOf(s, `mcp.parallel{
        {"everything", "echo", {message = "ok"}},
        {"everything", "no_such_tool_at_all", {}},
        {"everything", "get-sum", {a = "x", b = 3}},
      }`), [false, 'code:1: mcp.parallel: item 2: server "everything" has no tool "no_such_tool_at_all" (search_tools lists them)']);
    assert.deepEqual(await pcallOf(s, `mcp.parallel{
        function() return servers.everything.echo{message = "fine"} end,
        function() return servers.everything.get_sum{a = "x", b = 3} end,
      }`), [false, "code:1: mcp.parallel: item 2: everything.get-sum: MCP error -32602: Input validation error: Invalid arguments for tool get-sum: Invalid input: expected number, received string at a"]);
    assert.deepEqual(await pcallOf(s, 'mcp.parallel{ 42 }'), [false,
      "code:1: mcp.parallel: item 1 must be a function or {server, tool, args}, got number"]);
    assert.deepEqual(await runOk(s, "return #mcp.parallel{}"), 0);
  }));

  it("mcp.tools and pairs(servers) show code what it may call", T, withStderr(S, async () => {
    const r = await runOk(s, `
      local servers_seen = {}
      for name, srv in pairs(servers) do servers_seen[#servers_seen + 1] = name .. ":" .. type(srv) end
      table.sort(servers_seen)
      local list = mcp.tools()
      local ev = mcp.tools("everything")
      local echo, names = nil, {}
      for _, t in ipairs(ev) do
        names[#names + 1] = t.name
        if t.name == "echo" then echo = t end
      end
      local ok, err = pcall(mcp.tools, "nope")
      return { seen = servers_seen, n = #list, first = list[1], count = #ev, echo = echo,
               sorted = table.concat(names, ",") == (function() table.sort(names) return table.concat(names, ",") end)(),
               via_pairs = servers.everything.echo{message = "p"}, err = err }`);
    assert.deepEqual(r.seen, ["everything:table", "fs:table", "memory:table"]);
    assert.equal(r.n, 3);
    assert.deepEqual(Object.keys(r.first).sort(), ["lua_name", "name", "state", "tools"]);
    assert.equal(r.count, 15);
    assert.equal(r.echo.lua_name, "echo");
    assert.equal(r.echo.read_only, true);
    assert.match(r.echo.summary, /^Echoes back the input/);
    assert.equal(r.sorted, true);
    assert.equal(r.via_pairs, "Echo: p");
    assert.match(r.err, /mcp\.tools: unknown upstream server "nope"; configured: everything, fs, memory/);
  }));

  it("counts calls per upstream", T, withStderr(S, async () => {
    const b = (await upstreamStats(s.client)).everything;
    await runOk(s, 'for i = 1, 5 do servers.everything.echo{message = "c" .. i} end pcall(servers.everything.get_sum, {a = "x", b = 3}) return 1');
    const a = (await upstreamStats(s.client)).everything;
    assert.equal(a.calls, b.calls + 6);
    assert.equal(a.tool_errors, b.tool_errors + 1);
    assert.equal(a.failed_calls, b.failed_calls);
    assert.equal(a.in_flight, 0);
    assert.equal(typeof a.mean_call_ms, "number");
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: allowedTools, deniedTools, allowWrites, maxCalls, upstream_max_calls (config via --config)", () => {
  let s;
  let fsDir;
  const S = () => s;

  before(async () => {
    fsDir = tempDir("moonbox-gw-pol-");
    writeFileSync(path.join(fsDir, "readme.txt"), "read me");
    s = await gateway({
      mcpServers: {
        everything: { ...EVERYTHING(), allowedTools: ["echo", "get-*"], deniedTools: ["get-env", "*-image"] },
        fs: nodeServer(UPSTREAM_JS.filesystem, [fsDir], { allowWrites: false, maxCalls: 2 }),
      },
    }, { viaFlag: true, args: ["--upstream-max-calls", "5"] }, ["everything", "fs"]);
  });
  after(async () => {
    await s?.close();
    rmSync(fsDir, { recursive: true, force: true });
  });

  it("refuses tools outside allowedTools or inside deniedTools, with exact messages", T, withStderr(S, async () => {
    assert.equal(await runOk(s, "return servers.everything.get_sum{a=1, b=1}"), "The sum of 1 and 1 is 2.");
    assert.deepEqual(await pcallOf(s, "servers.everything.trigger_long_running_operation{duration=0.1, steps=1}"),
      [false, 'tool "trigger-long-running-operation" of server "everything" is not in its allowedTools']);
    assert.deepEqual(await pcallOf(s, "servers.everything.get_env{}"),
      [false, 'tool "get-env" of server "everything" is in its deniedTools']);
    assert.deepEqual(await pcallOf(s, 'mcp.call("everything", "get-tiny-image", {})'),
      [false, 'tool "get-tiny-image" of server "everything" is in its deniedTools']);
    const u = (await upstreamStats(s.client)).everything;
    assert.equal(u.calls, 1, "refused calls are not sent");
  }));

  it("allowWrites=false refuses tools not marked read-only; read-only ones work", T, withStderr(S, async () => {
    assert.deepEqual(await runOk(s, "return servers.fs.read_text_file{path = dir .. '/readme.txt'}", { context_vars: { dir: fsDir } }),
      { content: "read me" });
    assert.deepEqual(await pcallOf(s, "servers.fs.write_file{path = dir .. '/x.txt', content = 'x'}", { context_vars: { dir: fsDir } }),
      [false, "tool \"write_file\" of server \"fs\" is not marked read-only (annotations.readOnlyHint) and the server's allowWrites is false"]);
    assert.equal(existsSync(path.join(fsDir, "x.txt")), false);
  }));

  it("refused tools are left out of the catalog", T, withStderr(S, async () => {
    const list = ok(await call(s, "search_tools", { query: "", category: "everything", detail_level: "name", limit: 50 }));
    assert.deepEqual(list.tools.map((t) => t.name).sort(), [
      "echo", "get-annotated-message", "get-resource-links", "get-resource-reference",
      "get-structured-content", "get-sum",
    ]);
    const fsTools = ok(await call(s, "search_tools", { query: "", category: "fs", detail_level: "name", limit: 50 }));
    const names = fsTools.tools.map((t) => t.name);
    assert.equal(names.includes("write_file"), false, names.join(","));
    assert.equal(names.includes("read_text_file"), true, names.join(","));
    assert.equal(names.length, 10, names.join(","));
    // (the workspace's write_file of the sandbox is the only one left)
    assert.equal(errText(await call(s, "get_tool_definition", { tool_name: "write_file", category: "fs" })),
      'no tool "write_file" in category "fs"; it exists in: sandbox.workspace');
    assert.equal((await upstreamStats(s.client)).fs.callable_tools, 10);
  }));

  it("maxCalls bounds the calls to one server per execution", T, withStderr(S, async () => {
    const r = await runOk(s, `
      local out = {}
      for i = 1, 3 do out[i] = { pcall(servers.fs.list_allowed_directories, {}) } end
      return out`);
    assert.equal(r[0][0], true);
    assert.equal(r[1][0], true);
    assert.deepEqual(r[2], [false, 'too many calls to server "fs" in one execution (mcpServers.fs.maxCalls=2)']);
    // the next execution starts again from zero
    assert.equal((await pcallOf(s, "servers.fs.list_allowed_directories{}"))[0], true);
  }));

  it("upstream_max_calls bounds all calls of one execution (also inside mcp.parallel)", T, withStderr(S, async () => {
    const r = await runOk(s, `
      local out = {}
      for i = 1, 6 do out[i] = { pcall(servers.everything.echo, {message = "n" .. i}) } end
      return out`);
    assert.deepEqual(r.slice(0, 5).map((x) => x[1]), ["Echo: n1", "Echo: n2", "Echo: n3", "Echo: n4", "Echo: n5"]);
    assert.deepEqual(r[5], [false, "too many upstream calls in one execution (upstream_max_calls=5)"]);
    assert.deepEqual(await pcallOf(s, `mcp.parallel{
        {"everything", "echo", {message = "1"}}, {"everything", "echo", {message = "2"}},
        {"everything", "echo", {message = "3"}}, {"everything", "echo", {message = "4"}},
        {"everything", "echo", {message = "5"}}, {"everything", "echo", {message = "6"}} }`),
    [false, "code:1: mcp.parallel: item 6: too many upstream calls in one execution (upstream_max_calls=5)"]);
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: timeoutMs, upstream_timeout_ms and the execution deadline", () => {
  let s;
  let logDir;
  const S = () => s;
  const hangLog = () => path.join(logDir, "hang.log");

  before(async () => {
    logDir = tempDir("moonbox-gw-log-");
    s = await gateway({
      upstream_timeout_ms: 1200,
      mcpServers: {
        everything: { ...EVERYTHING(), timeoutMs: 400 },
        hang: fixture("hang-calls", { FIXTURE_LOG: path.join(logDir, "hang.log") }),
      },
    }, {}, ["everything", "hang"]);
  });
  after(async () => {
    await s?.close();
    rmSync(logDir, { recursive: true, force: true });
  });

  it("timeoutMs of a server ends a slow call with a clear message; the server stays usable", T, withStderr(S, async () => {
    const { sc } = await exec(s, `
      local t0 = os.time()
      local ok, e = pcall(servers.everything.trigger_long_running_operation, {duration = 5, steps = 1})
      return {ok = ok, e = e, after = servers.everything.echo{message = "still here"}}`, { timeout_ms: 10000 });
    assert.equal(sc.success, true, sc.error);
    assert.deepEqual(sc.result, { ok: false, e: "everything.trigger-long-running-operation: no answer to tools/call within 400 ms (timeoutMs of mcpServers.everything, else upstream_timeout_ms)", after: "Echo: still here" });
    assert.ok(sc.execution_time_ms >= 390 && sc.execution_time_ms < 2000, `execution_time_ms ${sc.execution_time_ms}`);
    const u = await waitUpstream(s.client, "everything", (x) => x?.timeouts === 1 && x.in_flight === 0);
    assert.equal(u.state, "ready"); // it answered the ping probe
    assert.equal(u.failed_calls, 1);
    assert.equal(u.restarts, 0);
  }));

  it("upstream_timeout_ms applies to a server without timeoutMs; the call is cancelled upstream", T, withStderr(S, async () => {
    const { sc } = await exec(s, 'return { pcall(servers.hang.wait, {message = "never"}) }', { timeout_ms: 10000 });
    assert.equal(sc.success, true, sc.error);
    assert.deepEqual(sc.result, [false, "hang.wait: no answer to tools/call within 1200 ms (timeoutMs of mcpServers.hang, else upstream_timeout_ms)"]);
    assert.ok(sc.execution_time_ms >= 1190 && sc.execution_time_ms < 3000, `execution_time_ms ${sc.execution_time_ms}`);
    const lines = await until(() => {
      const l = logLines(hangLog());
      return l.some((m) => m.method === "notifications/cancelled") && l;
    }, 3000, "notifications/cancelled in the fixture's log");
    const callMsg = lines.find((m) => m.method === "tools/call" && m.params?.arguments?.message === "never");
    assert.ok(callMsg, "the fixture saw the call");
    assert.deepEqual(callMsg.params, { name: "wait", arguments: { message: "never" } });
    const cancel = lines.find((m) => m.method === "notifications/cancelled");
    assert.deepEqual(cancel.params, { requestId: callMsg.id,
      reason: "no answer to tools/call within 1200 ms (timeoutMs of mcpServers.hang, else upstream_timeout_ms)" });
    // it answers pings, so it is not restarted
    const u = await waitUpstream(s.client, "hang", (x) => x?.timeouts === 1 && lines.length > 0);
    await sleep(300);
    const u2 = (await upstreamStats(s.client)).hang;
    assert.equal(u2.state, "ready");
    assert.equal(u2.restarts, 0);
    assert.equal(u.pid, u2.pid);
    assert.ok(logLines(hangLog()).some((m) => m.method === "ping"), "a ping probe after the timeout");
  }));

  it("the execution deadline ends an upstream wait quickly and the call is cancelled; the server keeps serving", T, withStderr(S, async () => {
    const before_ = logLines(hangLog()).length;
    const { sc, ms } = await exec(s, 'servers.hang.wait{message = "deadline"} return "unreachable"', { timeout_ms: 400 });
    assert.equal(sc.success, false);
    assert.equal(sc.error_type, "timeout");
    assert.ok(ms < 1100, `the execution took ${ms} ms with timeout_ms=400 (upstream_timeout_ms is 1200)`);
    const lines = await until(() => {
      const l = logLines(hangLog()).slice(before_);
      return l.some((m) => m.method === "notifications/cancelled") && l;
    }, 3000, "notifications/cancelled after the deadline");
    const callMsg = lines.find((m) => m.method === "tools/call");
    const cancel = lines.find((m) => m.method === "notifications/cancelled");
    assert.deepEqual(cancel.params, { requestId: callMsg.id, reason: "the execution that made this call ended" });
    assert.equal(await runOk(s, 'return servers.everything.echo{message = "next"}'), "Echo: next");
    const u = (await upstreamStats(s.client)).hang;
    assert.equal(u.state, "ready");
    assert.equal(u.in_flight, 0);
  }));

  it("mcp.parallel waits end at the deadline too", T, withStderr(S, async () => {
    const { sc, ms } = await exec(s, `return mcp.parallel{
        {"hang", "wait", {message = "p1"}}, {"hang", "wait", {message = "p2"}},
        {"everything", "echo", {message = "p3"}} }`, { timeout_ms: 500 });
    assert.equal(sc.success, false);
    assert.equal(sc.error_type, "timeout");
    assert.ok(ms < 1200, `took ${ms} ms`);
    await until(async () => (await upstreamStats(s.client)).hang.in_flight === 0, 3000, "hang in_flight back to 0");
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: servers that never answer (init timeout, hung after a call)", () => {
  let s;
  const S = () => s;

  before(async () => {
    s = await gateway({
      upstream_init_timeout_ms: 3000,
      mcpServers: {
        silent: fixture("silent"),
        noping: { ...fixture("hang-calls", { FIXTURE_NO_PING: "1" }), timeoutMs: 300 },
        everything: EVERYTHING(),
      },
    }, {}, ["noping", "everything"]);
  });
  after(async () => {
    await s?.close();
  });

  it("a server that never answers initialize goes to backoff; calls fail fast with the reason", T, withStderr(S, async () => {
    const u = await waitUpstream(s.client, "silent", (x) => x?.state === "backoff", 8000);
    assert.equal(u.last_error, "initialize: no answer to initialize within 3000 ms (upstream_init_timeout_ms)");
    assert.equal(u.tools, 0);
    assert.equal(u.timeouts, 0, "timeouts counts tool calls only");
    const { sc, ms } = await exec(s, 'return { pcall(servers.silent.anything, {}) }');
    assert.equal(sc.success, true, sc.error);
    assert.equal(sc.result[0], false);
    // either still in backoff, or (if the restart began meanwhile) the wait ended in backoff again
    assert.match(sc.result[1], /^upstream server "silent" is (not available: initialize: no answer to initialize within 3000 ms \(upstream_init_timeout_ms\); restarting \(attempt \d+\) in \d+ ms|starting)$/);
    assert.ok(ms < 3600, `took ${ms} ms`);
    // others are unaffected
    assert.equal(await runOk(s, 'return servers.everything.echo{message = "fine"}'), "Echo: fine");
    assert.ok((await upstreamStats(s.client)).silent.rejected_while_down >= 1);
  }));

  it("a server that hangs after a call and does not answer the ping probe is restarted", T, withStderr(S, async () => {
    const first = (await upstreamStats(s.client)).noping;
    assert.equal(first.state, "ready");
    assert.deepEqual(await pcallOf(s, 'servers.noping.wait{message = "x"}'), [false,
      "noping.wait: no answer to tools/call within 300 ms (timeoutMs of mcpServers.noping, else upstream_timeout_ms)"]);
    const down = await waitUpstream(s.client, "noping", (x) => x?.restarts >= 1 || x?.state === "backoff", 8000);
    const u = await waitUpstream(s.client, "noping", (x) => x?.state === "ready" && x.restarts >= 1, 8000);
    assert.equal(u.last_error, "did not answer a ping after a call timed out (hung?): no answer to ping within 3000 ms (upstream_init_timeout_ms)",
      JSON.stringify(down));
    assert.notEqual(u.pid, first.pid);
    assert.equal(u.timeouts - first.timeouts, 1, "the call's timeout, not the ping's");
    assert.equal(alive(first.pid) && procState(first.pid)[0] !== "Z", false, `old process ${first.pid} is ${procState(first.pid)}`);
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: supervision (missing command, a server killed mid-call, upstream_max_parallel)", () => {
  let s;
  const S = () => s;
  const GHOST = "/nonexistent/moonbox-no-such-server";

  before(async () => {
    s = await gateway({
      upstream_restart_max_ms: 1000,
      mcpServers: {
        ghost: { command: GHOST, args: ["--x"] },
        everything: EVERYTHING(),
        off: { ...EVERYTHING(), disabled: true },
      },
    }, { args: ["--upstream-max-parallel", "2"] }, ["everything"]);
  });
  after(async () => {
    await s?.close();
  });

  it("a command that does not exist: backoff, last_error names it, calls fail fast, others work", T, withStderr(S, async () => {
    const u = await waitUpstream(s.client, "ghost", (x) => x?.state === "backoff" && x.restarts >= 2, 8000);
    assert.equal(u.last_error, `cannot start: spawn ${GHOST}: no such file or directory`);
    assert.equal(u.transport, "stdio");
    assert.equal(u.pid, undefined);
    const { sc, ms } = await exec(s, 'return { pcall(servers.ghost.anything, {}) }');
    assert.equal(sc.result[0], false);
    assert.match(sc.result[1], new RegExp(`^upstream server "ghost" is not available: cannot start: spawn ${GHOST}: no such file or directory; restarting \\(attempt \\d+\\) in \\d+ ms$`));
    assert.ok(ms < 500, `a call to a server in backoff took ${ms} ms`);
    assert.equal(await runOk(s, 'return servers.everything.echo{message = "ok"}'), "Echo: ok");
    // the backoff is capped by upstream_restart_max_ms=1000
    const later = await upstreamStats(s.client);
    assert.ok(later.ghost.next_attempt_in_ms <= 1000, JSON.stringify(later.ghost));
  }));

  it("a disabled server is not started and says so", T, withStderr(S, async () => {
    const u = (await upstreamStats(s.client)).off;
    assert.equal(u.state, "disabled");
    assert.equal(u.pid, undefined);
    assert.equal(u.calls, 0);
    assert.deepEqual(await pcallOf(s, 'servers.off.echo{message = "x"}'),
      [false, 'upstream server "off" is disabled in mcpServers']);
    const cats = ok(await call(s, "list_tool_categories", {}));
    assert.equal(cats.categories.some((c) => c.name === "off"), false);
  }));

  it("upstream_max_parallel bounds the calls of one mcp.parallel in flight", T, withStderr(S, async () => {
    const { sc } = await exec(s, `return mcp.parallel{
        {"everything", "trigger-long-running-operation", {duration = 0.6, steps = 1}},
        {"everything", "trigger-long-running-operation", {duration = 0.6, steps = 1}},
        {"everything", "trigger-long-running-operation", {duration = 0.6, steps = 1}},
        {"everything", "trigger-long-running-operation", {duration = 0.6, steps = 1}} }`, { timeout_ms: 10000 });
    assert.equal(sc.success, true, sc.error);
    assert.equal(sc.result.length, 4);
    // 2 at a time: two rounds of 0.6 s
    assert.ok(sc.execution_time_ms >= 1150 && sc.execution_time_ms < 2350, `execution_time_ms ${sc.execution_time_ms}`);
  }));

  it("an upstream killed with SIGKILL during a call: the call fails clearly, the server restarts, later calls work", T, withStderr(S, async () => {
    const before_ = await waitUpstream(s.client, "everything");
    const pending = exec(s, 'return { pcall(servers.everything.trigger_long_running_operation, {duration = 10, steps = 1}) }',
      { timeout_ms: 8000 });
    await waitUpstream(s.client, "everything", (x) => x?.in_flight === 1, 3000);
    process.kill(before_.pid, "SIGKILL");
    const { sc, ms } = await pending;
    assert.equal(sc.success, true, sc.error);
    assert.deepEqual(sc.result, [false,
      'everything.trigger-long-running-operation: upstream server "everything" failed: the process exited on signal 9']);
    assert.ok(ms < 4000, `the call failed after ${ms} ms`);
    const u = await waitUpstream(s.client, "everything", (x) => x?.state === "ready" && x.restarts >= 1, 10000);
    assert.equal(u.last_error, "the process exited on signal 9");
    assert.notEqual(u.pid, before_.pid);
    assert.equal(alive(u.pid), true);
    assert.equal(u.failed_calls, before_.failed_calls + 1);
    assert.equal(await runOk(s, 'return servers.everything.get_sum{a = 20, b = 22}'), "The sum of 20 and 22 is 42.");
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: tool list changes", () => {
  let s;
  const S = () => s;

  before(async () => {
    s = await gateway({ mcpServers: { grow: fixture("grow") } }, {}, ["grow"]);
  });
  after(async () => {
    await s?.close();
  });

  it("a tool added upstream (notifications/tools/list_changed) becomes searchable and callable", T, withStderr(S, async () => {
    assert.equal((await upstreamStats(s.client)).grow.tools, 1);
    const none = ok(await call(s, "search_tools", { query: "zebras savanna" }));
    assert.equal(none.tools.some((t) => t.name === "zebra_counter"), false);
    assert.match((await pcallOf(s, "servers.grow.zebra_counter{}"))[1], /^server "grow" has no tool "zebra_counter"/);
    assert.equal(await runOk(s, "return servers.grow.first{}"), "added zebra_counter");
    await waitUpstream(s.client, "grow", (x) => x?.tools === 2, 5000);
    const found = await until(async () => {
      const r = ok(await call(s, "search_tools", { query: "zebras savanna" }));
      return r.tools.find((t) => t.name === "zebra_counter");
    }, 5000, "zebra_counter in search_tools");
    assert.equal(found.category, "grow");
    assert.deepEqual(await runOk(s, "return servers.grow.zebra_counter{}"), { zebras: 7 });
    const def = ok(await call(s, "get_tool_definition", { tool_name: "zebra_counter" }));
    assert.equal(def.description, "Counts zebras crossing the savanna");
    const cats = ok(await call(s, "list_tool_categories", {}));
    const grow = cats.categories.find((c) => c.name === "grow");
    assert.deepEqual(grow, { name: "grow", description: "tools of the upstream MCP server grow (fixture-grow)", tools: 2 });
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: libcurl is loaded only for HTTP upstreams", () => {
  // Linked, libcurl brought ~30 shared libraries (OpenSSL, GnuTLS, Kerberos, ...) into every
  // start: 7 ms and ~6 MiB before main (docs/benchmarks.md). src/curl_load.c opens it at the
  // first HTTP request instead; the test below this one checks that it is there when needed.
  it("a server with no HTTP upstream never maps libcurl", T, async () => {
    const s = await gateway({ mcpServers: { everything: EVERYTHING() } }, {}, ["everything"]);
    try {
      assert.equal(await runOk(s, 'return servers.everything.echo{message = "stdio"}'), "Echo: stdio");
      const maps = readFileSync(`/proc/${s.pid}/maps`, "utf8");
      assert.equal(maps.includes("libcurl"), false, "libcurl is mapped");
      assert.equal(/libssl|libgnutls|libkrb5/.test(maps), false, "a TLS or Kerberos library is mapped");
    } finally {
      await s.close();
    }
  });
});

describe("gateway: HTTP upstream sessions at shutdown", () => {
  it("moonbox ends each HTTP upstream session with DELETE when it shuts down, and still exits promptly", T, async () => {
    const logDir = tempDir("moonbox-gw-del-");
    const fx = await startHttpUpstream("fixture", await freePort(), { FIXTURE_LOG: path.join(logDir, "d.log") });
    let s;
    try {
      s = await gateway({ mcpServers: { fx: { url: `http://127.0.0.1:${fx.port}/mcp` } } }, {}, ["fx"]);
      assert.equal(await runOk(s, 'return servers.fx.echo{message = "bye"}'), "Echo: bye");
      const libcurlLoaded = readFileSync(`/proc/${s.pid}/maps`, "utf8").includes("libcurl");
      const call = logLines(path.join(logDir, "d.log")).find((m) => m.method === "tools/call");
      assert.match(call.session, /^[0-9a-f-]{36}$/);
      const t0 = Date.now();
      await s.close();
      const ms = Date.now() - t0;
      s = undefined;
      assert.ok(libcurlLoaded, "libcurl is loaded once an HTTP upstream is used");
      const del = logLines(path.join(logDir, "d.log")).filter((m) => m.http === "DELETE");
      assert.deepEqual(del.map((m) => m.session), [call.session], "one DELETE of the session in use");
      assert.ok(ms < 2500, `moonbox took ${ms} ms to exit`);
    } finally {
      await s?.close();
      await fx.stop();
      rmSync(logDir, { recursive: true, force: true });
    }
  });
});

describe("gateway: Streamable HTTP upstreams", () => {
  let s;
  let ev;
  let fx;
  let slow;
  let logDir;
  const S = () => s;

  before(async () => {
    logDir = tempDir("moonbox-gw-http-");
    ev = await startHttpUpstream("everything", await freePort());
    fx = await startHttpUpstream("fixture", await freePort(), { FIXTURE_LOG: path.join(logDir, "a.log") });
    slow = await startHttpUpstream("fixture", await freePort(),
      { FIXTURE_LOG: path.join(logDir, "slow.log"), FIXTURE_INIT_DELAY_MS: "300" });
    s = await gateway({
      mcpServers: {
        web: { type: "http", url: `http://127.0.0.1:${ev.port}/mcp` },
        fx: { url: `http://127.0.0.1:${fx.port}/mcp`, headers: { "X-Gateway-Test": "yes" } },
        slowinit: { url: `http://127.0.0.1:${slow.port}/mcp` },
      },
    }, {}, ["web", "fx", "slowinit"]);
  });
  after(async () => {
    await s?.close();
    await ev?.stop();
    await fx?.stop();
    await slow?.stop();
    rmSync(logDir, { recursive: true, force: true });
  });

  it("calls tools of server-everything over HTTP", T, withStderr(S, async () => {
    const u = (await upstreamStats(s.client)).web;
    assert.equal(u.transport, "http");
    assert.equal(u.pid, undefined);
    assert.equal(u.server, "mcp-servers/everything");
    assert.equal(await runOk(s, 'return servers.web.echo{message = "over http"}'), "Echo: over http");
    assert.equal(await runOk(s, "return servers.web.get_sum{a = 3, b = 4}"), "The sum of 3 and 4 is 7.");
    assert.deepEqual(await runOk(s, 'return servers.web.get_structured_content{location = "New York"}'),
      { temperature: 33, conditions: "Cloudy", humidity: 82 });
    const r = await runOk(s, `
      local calls = {}
      for i = 1, 20 do calls[i] = {"web", "echo", {message = "h" .. i}} end
      return mcp.parallel(calls)`);
    assert.deepEqual(r, Array.from({ length: 20 }, (_, i) => `Echo: h${i + 1}`));
    // progress notifications of a call travel over the SSE answer without disturbing it
    assert.equal(await runOk(s, "return servers.web.trigger_long_running_operation{duration = 0.3, steps = 3}"),
      "Long running operation completed. Duration: 0.3 seconds, Steps: 3.");
  }));

  it("sends the configured headers and the session id", T, withStderr(S, async () => {
    assert.equal(await runOk(s, 'return servers.fx.echo{message = "hdr"}'), "Echo: hdr");
    const lines = logLines(path.join(logDir, "a.log"));
    const init = lines.find((m) => m.method === "initialize");
    assert.equal(init.session, null);
    assert.equal(init.hdr, "yes");
    assert.equal(init.proto, null);
    const echo = lines.find((m) => m.method === "tools/call");
    assert.match(echo.session, /^[0-9a-f-]{36}$/);
    assert.equal(echo.hdr, "yes");
    assert.equal(echo.proto, init.params.protocolVersion);
    assert.equal(echo.accept, "application/json, text/event-stream");
  }));

  it("over HTTP, notifications/initialized is accepted by the server before the next request is sent", T, withStderr(S, async () => {
    // Separate POSTs have no order on the wire: a client that does not wait for the 202 of
    // notifications/initialized can have tools/list arrive first (servers built on the Python SDK
    // reject requests before initialized). The fixture accepts the notification only after 300 ms.
    const lines = logLines(path.join(logDir, "slow.log"));
    const accepted = lines.find((m) => m.http === "initialized-accepted");
    const list = lines.find((m) => m.method === "tools/list");
    assert.ok(accepted && list, JSON.stringify(lines.map((m) => m.method ?? m.http)));
    assert.ok(list.at >= accepted.at,
      `tools/list arrived ${accepted.at - list.at} ms before notifications/initialized was accepted`);
  }));

  it("a spec-conforming server restarted on the same port (404 to the old session): moonbox initializes again and the call goes through", T, withStderr(S, async () => {
    const who1 = await runOk(s, "return servers.fx.whoami{}");
    assert.equal(who1.pid, fx.proc.pid);
    await fx.stop();
    fx = await startHttpUpstream("fixture", fx.port, { FIXTURE_LOG: path.join(logDir, "b.log") });
    const who2 = await runOk(s, "return servers.fx.whoami{}");
    assert.equal(who2.pid, fx.proc.pid);
    assert.notEqual(who2.session, who1.session);
    const lines = logLines(path.join(logDir, "b.log"));
    // (a DELETE of the old session may come in between: not counted; the order of
    // notifications/initialized and tools/list is the subject of another test)
    const seq = lines.map((m) => m.method ?? m.http).filter((m) => m !== "ping" && m !== "DELETE");
    assert.deepEqual(seq.slice(0, 2), ["tools/call", "initialize"]);
    assert.deepEqual(seq.slice(2, 4).sort(), ["notifications/initialized", "tools/list"]);
    assert.equal(seq[4], "tools/call");
    assert.equal(lines.filter((m) => m.method === "tools/call").length, 2, "the call was sent again after initialize");
    assert.equal((await upstreamStats(s.client)).fx.state, "ready");
  }));

  it("server-everything killed and restarted on the same port: calls fail while it is down, then work again", T, withStderr(S, async () => {
    assert.equal(await runOk(s, 'return servers.web.echo{message = "before"}'), "Echo: before");
    await ev.stop();
    const down = await pcallOf(s, 'servers.web.echo{message = "down"}');
    assert.equal(down[0], false);
    assert.match(down[1], /^(web\.echo: .*(connect|refused|Couldn't).*|upstream server "web" is not available: .*)$/i);
    ev = await startHttpUpstream("everything", ev.port);
    // server-everything answers 400 (not 404) to a session it does not know: moonbox has to
    // notice the restart some other way (connection failures, a 4xx naming the session)
    let last;
    const back = await until(async () => {
      last = await pcallOf(s, 'servers.web.echo{message = "after"}');
      return last[0] === true && last;
    }, 10000, "a call to the restarted server-everything succeeding", 300).catch((e) => {
      e.message += `; the last call answered ${JSON.stringify(last)}`;
      throw e;
    });
    assert.deepEqual(back, [true, "Echo: after"]);
    assert.equal((await upstreamStats(s.client)).web.state, "ready");
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: PII tokens across upstream calls", () => {
  let s;
  let fsDir;
  let memDir;
  const S = () => s;
  const EMAIL = "carol.gw@example.com";

  before(async () => {
    fsDir = tempDir("moonbox-gw-piifs-");
    memDir = tempDir("moonbox-gw-piimem-");
    writeFileSync(path.join(memDir, "memory.jsonl"), JSON.stringify({
      type: "entity", name: "Carol", entityType: "person", observations: [`reach her at ${EMAIL}`],
    }) + "\n");
    s = await gateway({
      mcpServers: {
        fs: nodeServer(UPSTREAM_JS.filesystem, [fsDir]),
        memory: nodeServer(UPSTREAM_JS.memory, [], { env: { MEMORY_FILE_PATH: path.join(memDir, "memory.jsonl") } }),
        everything: EVERYTHING(),
      },
    }, {}, ["fs", "memory", "everything"]);
  });
  after(async () => {
    await s?.close();
    rmSync(fsDir, { recursive: true, force: true });
    rmSync(memDir, { recursive: true, force: true });
  });

  let token;

  it("a real value flows from memory to filesystem while the model sees only a token", T, withStderr(S, async () => {
    const { sc, res } = await exec(s, `
      local g = servers.memory.open_nodes{names = {"Carol"}}
      local email = g.entities[1].observations[1]:match("[%w%.]+@[%w%.]+")
      servers.fs.write_file{path = dir .. "/carol.txt", content = "Carol: " .. email}
      local back = servers.fs.read_text_file{path = dir .. "/carol.txt"}.content
      return { email = email, back = back, real_inside = email:find("@", 1, true) ~= nil }`,
    { context_vars: { dir: fsDir } });
    assert.equal(sc.success, true, sc.error);
    assert.match(sc.result.email, new RegExp(`^${TOKEN_RE.source}$`));
    token = sc.result.email;
    assert.equal(sc.result.back, `Carol: ${token}`);
    assert.equal(sc.result.real_inside, true);
    assert.equal(JSON.stringify(res).includes(EMAIL), false, "the real address reached the client");
    assert.equal(readFileSync(path.join(fsDir, "carol.txt"), "utf8"), `Carol: ${EMAIL}`);
  }));

  it("a token written in the code reaches upstream tools as the real value, and only there", T, withStderr(S, async () => {
    // the token the model got for the address (the same one the previous test saw)
    const minted = await runOk(s, `return "${EMAIL}"`);
    assert.match(minted, new RegExp(`^${TOKEN_RE.source}$`));
    if (token) assert.equal(minted, token);
    token = minted;
    const { sc, res } = await exec(s, `
      servers.memory.create_entities{entities = {{name = "Dave", entityType = "person",
        observations = {"manager email: ${token}"}}}}
      servers.fs.write_file{path = dir .. "/dave.txt", content = "to: ${token}; unknown: [EMAIL_00000000]"}
      local echoed = servers.everything.echo{message = "${token}"}
      return { literal = "${token}", echoed = echoed, len = #("${token}") }`,
    { context_vars: { dir: fsDir } });
    assert.equal(sc.success, true, sc.error);
    // the code's own string stays a token; what comes back from the upstream is tokenized again
    assert.deepEqual(sc.result, { literal: token, echoed: `Echo: ${token}`, len: token.length });
    assert.equal(JSON.stringify(res).includes(EMAIL), false);
    assert.equal(readFileSync(path.join(fsDir, "dave.txt"), "utf8"), `to: ${EMAIL}; unknown: [EMAIL_00000000]`);
    const mem = readFileSync(path.join(memDir, "memory.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    assert.deepEqual(mem.find((e) => e.name === "Dave"),
      { type: "entity", name: "Dave", entityType: "person", observations: [`manager email: ${EMAIL}`] });
  }));

  // issue 31, bug 2: a token tokenize_pii made in this execution is not in the vault yet (the
  // vault gets the execution's values with its result); the upstream must still get the value
  it("a token tokenize_pii made in the same execution reaches the upstream as the real value, in calls and in mcp.parallel", T, withStderr(S, async () => {
    const CARL = "carl.gw31@example.com", DORA = "dora.gw31@example.com";
    const { sc, res } = await exec(s, `
      local t, map = tokenize_pii("${CARL}")
      local echoed = servers.everything.echo{message = t}
      local via_call = mcp.call("everything", "echo", {message = "to " .. t .. " and [EMAIL_00000000]"})
      local d = tokenize_pii("${DORA}")
      local par = mcp.parallel{ {"everything", "echo", {message = d}},
                                function() return servers.everything.echo{message = t} end }
      servers.fs.write_file{path = dir .. "/carl31.txt", content = "mail " .. t}
      return { token = t, echoed = echoed, via_call = via_call, par = par,
               upstream_saw_value = echoed == "Echo: ${CARL}" and par[1] == "Echo: ${DORA}"
                 and par[2] == "Echo: ${CARL}",
               known = map[t] == "${CARL}" }`,
    { context_vars: { dir: fsDir } });
    assert.equal(sc.success, true, sc.error);
    assert.match(sc.result.token, new RegExp(`^${TOKEN_RE.source}$`));
    const t = sc.result.token;
    assert.equal(sc.result.known, true);
    assert.equal(sc.result.upstream_saw_value, true, JSON.stringify(sc.result));
    // the answer the model gets is tokenized again: the upstream's echo of the value is the token
    assert.equal(sc.result.echoed, `Echo: ${t}`);
    assert.equal(sc.result.via_call, `Echo: to ${t} and [EMAIL_00000000]`);
    assert.equal(sc.result.par[1], `Echo: ${t}`);
    assert.match(sc.result.par[0], new RegExp(`^Echo: ${TOKEN_RE.source}$`));
    assert.notEqual(sc.result.par[0], `Echo: ${t}`);
    for (const v of [CARL, DORA]) assert.equal(JSON.stringify(res).includes(v), false, `${v} reached the client`);
    assert.equal(readFileSync(path.join(fsDir, "carl31.txt"), "utf8"), `mail ${CARL}`);
    // and the next execution's token (from the vault now) is restored too
    const again = await runOk(s, `return servers.everything.echo{message = "${t}"} == "Echo: ${CARL}"`);
    assert.equal(again, true);
  }));

  it("tool errors that carry personal data reach the model tokenized", T, withStderr(S, async () => {
    const { sc, res } = await exec(s, `
      local ok, e = pcall(servers.fs.read_text_file, {path = "/etc/${EMAIL}"})
      return e`);
    assert.equal(sc.success, true, sc.error);
    const m = sc.result.match(new RegExp(`^fs\\.read_text_file: Access denied - path outside allowed directories: /etc/(${TOKEN_RE.source}) not in (.*)$`));
    assert.ok(m, sc.result);
    assert.equal(m[2], fsDir);
    if (token) assert.equal(m[1], token);
    assert.equal(JSON.stringify(res).includes(EMAIL), false);
  }));
});

describe("gateway: --pii-restore 0 restores no token into upstream arguments", () => {
  let s;
  const S = () => s;
  before(async () => { s = await gateway({ mcpServers: { everything: EVERYTHING() } }, { args: ["--pii-restore", "0"] }, ["everything"]); });
  after(async () => { await s?.close(); });

  it("neither a token from the vault nor one tokenize_pii made in the same execution", T, withStderr(S, async () => {
    const EMAIL = "erin.gw31@example.com";
    const old = await runOk(s, `return "${EMAIL}"`); // now in the vault
    assert.match(old, new RegExp(`^${TOKEN_RE.source}$`));
    const r = await runOk(s, `
      local t = tokenize_pii("${EMAIL}")
      -- compared inside the sandbox: what leaves is tokenized either way
      return { same = t == "${old}", now = servers.everything.echo{message = t} == "Echo: " .. t,
               vault = servers.everything.echo{message = "${old}"} == "Echo: ${old}" }`);
    assert.deepEqual(r, { same: true, now: true, vault: true });
  }));
});

// ---------------------------------------------------------------------------------------------

describe("gateway: /metrics over HTTP", () => {
  it("has moonbox_upstream_up per server", T, async () => {
    requireBinary();
    const dataDir = makeDataDir();
    writeFileSync(path.join(dataDir, "config.json"), JSON.stringify({
      mcpServers: { everything: EVERYTHING(), ghost: { command: "/nonexistent/moonbox-metrics-ghost" } },
    }));
    const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http", "127.0.0.1:0"], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    proc.stderr.on("data", (c) => (stderr += c));
    const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
    try {
      const url = await until(() => stderr.match(/serving MCP over HTTP on (http:\/\/\S+)\/mcp/)?.[1], 10000, "listening line");
      const text = await until(async () => {
        const t = await (await fetch(`${url}/metrics`)).text();
        return t.includes('moonbox_upstream_up{server="everything"} 1') && t;
      }, 15000, "everything up in /metrics", 200);
      assert.match(text, /^moonbox_upstream_up\{server="ghost"\} 0$/m);
      assert.match(text, /^# TYPE moonbox_upstream_up gauge$/m);
      assert.match(text, /^moonbox_upstream_restarts_total\{server="ghost"\} \d+$/m);
      assert.match(text, /^moonbox_upstream_calls_total\{server="everything",outcome="ok"\} 0$/m);
    } catch (e) {
      e.message += `\nmoonbox stderr:\n${stderr.slice(-3000)}`;
      throw e;
    } finally {
      proc.kill("SIGTERM");
      const r = await exited;
      rmSync(dataDir, { recursive: true, force: true });
      assert.equal(r.code, 0, `exit ${JSON.stringify(r)}`);
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe("gateway: configuration errors stop the server at start", () => {
  const startWith = (config) => {
    requireBinary();
    const dataDir = makeDataDir();
    writeFileSync(path.join(dataDir, "config.json"), JSON.stringify(config));
    const r = spawnSync(MOONBOX, ["--data-dir", dataDir], { input: "", encoding: "utf8", timeout: 10000 });
    rmSync(dataDir, { recursive: true, force: true });
    return r;
  };

  it("an unknown key, the deprecated SSE type, both command and url", T, () => {
    for (const [server, text] of [
      [{ command: "x", autoStart: true }, 'mcpServers.a: unknown key "autoStart" (known: command, args, env, cwd, url, headers, type, allowedTools, deniedTools, allowWrites, timeoutMs, maxCalls, disabled, perTenant)'],
      [{ type: "sse", url: "http://127.0.0.1:1/sse" }, 'mcpServers.a.type "sse" is the deprecated HTTP+SSE transport, which moonbox does not speak; use a Streamable HTTP endpoint ("type": "http")'],
      [{ command: "x", url: "http://127.0.0.1:1/mcp" }, 'mcpServers.a has both "command" (stdio) and "url" (HTTP); give one'],
      [{ command: "x", timeoutMs: 0 }, "mcpServers.a.timeoutMs must be an integer in [1, 3600000], got 0"],
    ]) {
      const r = startWith({ mcpServers: { a: server } });
      assert.notEqual(r.status, 0, `started with ${JSON.stringify(server)}: ${r.stderr}`);
      assert.ok(r.stderr.includes(text), `stderr lacks ${JSON.stringify(text)}:\n${r.stderr}`);
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe("gateway: clean shutdown", () => {
  it("closing the client ends moonbox and every upstream child (SIGKILL after upstream_shutdown_grace_ms for one that ignores SIGTERM)", T, async () => {
    const fsDir = tempDir("moonbox-gw-shut-");
    const s = await gateway({
      upstream_shutdown_grace_ms: 300,
      mcpServers: {
        everything: EVERYTHING(),
        fs: nodeServer(UPSTREAM_JS.filesystem, [fsDir]),
        stubborn: fixture("hang-calls", { FIXTURE_IGNORE_TERM: "1" }),
      },
    }, {}, ["everything", "fs", "stubborn"]);
    const all = await upstreamStats(s.client);
    const pids = Object.fromEntries(Object.entries(all).map(([k, v]) => [k, v.pid]));
    for (const [k, pid] of Object.entries(pids)) assert.equal(alive(pid), true, `${k} ${pid}`);
    const t0 = Date.now();
    await s.close();
    const ms = Date.now() - t0;
    assert.equal(alive(s.pid), false, `moonbox ${s.pid} is ${procState(s.pid)}`);
    assert.ok(ms < 2000, `moonbox took ${ms} ms to exit after stdin closed (the SDK sends SIGTERM at 2000 ms)`);
    for (const [k, pid] of Object.entries(pids)) {
      assert.equal(alive(pid), false, `${k} (pid ${pid}) is ${procState(pid)} after moonbox exited`);
    }
    rmSync(fsDir, { recursive: true, force: true });
  });
});

// ---------------------------------------------------------------------------------------------

describe("gateway: an upstream server asks its client (sampling, elicitation) through moonbox", () => {
  it("server-everything's sampling and elicitation tools reach moonbox's client and get its answers; PII in the question is tokenized; without the capability the upstream gets an error", T, async () => {
    const asked = [];
    const s = await gateway({ mcpServers: { everything: EVERYTHING() } },
      { clientOptions: { capabilities: { sampling: {}, elicitation: {} } } }, ["everything"]);
    try {
      s.client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
        asked.push(req.params);
        return { role: "assistant", content: { type: "text", text: "Paris, says the model" }, model: "test-model" };
      });
      s.client.setRequestHandler(ElicitRequestSchema, async (req) => {
        asked.push(req.params);
        return { action: "accept", content: { color: "blue", number: 7, pets: "dogs" } };
      });
      const r = await runOk(s, `return servers.everything["trigger-sampling-request"]({ prompt = "capital of France? mail ann@example.com" })`);
      assert.match(JSON.stringify(r), /Paris, says the model/);
      const q = JSON.stringify(asked[0]);
      assert.match(q, /capital of France/);
      assert.doesNotMatch(q, /ann@example\.com/, "the address reached the client untokenized");
      assert.match(q, TOKEN_RE);
      const e = await runOk(s, `return servers.everything["trigger-elicitation-request"]({})`);
      assert.match(JSON.stringify(e), /blue/);
      assert.equal(asked.length, 2);
    } finally {
      await s.close();
    }
    // a client without the capabilities: the upstream's question fails, the call reports it
    const s2 = await gateway({ mcpServers: { everything: EVERYTHING() } }, {}, ["everything"]);
    try {
      const [ok, msg] = await pcallOf(s2, `servers.everything["trigger-sampling-request"]({ prompt = "x" })`);
      assert.equal(ok, false);
      assert.match(String(msg), /did not declare the sampling capability/);
    } finally {
      await s2.close();
    }
  });

  it("with calls of two tenants in flight to one upstream, its question is refused rather than sent to the latest caller's client (HTTP tokens)", T, async () => {
    // Over stdio nothing links an upstream's question to one of moonbox's calls: moonbox takes
    // the latest call in flight. With two tenants' calls in flight that may be the other
    // tenant's, whose client would see the question (another tenant's data) and answer it.
    const TA = "relay-token-alpha-0123456789ab", TB = "relay-token-beta-0123456789abc";
    const cfgDir = makeDataDir();
    const cfgFile = path.join(cfgDir, "relay-config.json");
    writeFileSync(cfgFile, JSON.stringify({ mcpServers: { asks: fixture("asks") } }));
    const srv = await startHttp(["--config", cfgFile, "--http-tokens", `${TA}=alpha,${TB}=beta`, "--workers", "2"]);
    const clients = [];
    const connect = async (token) => {
      const c = { asked: [], client: new SdkClient({ name: "relay-tenant", version: "0" }, { capabilities: { sampling: {} } }) };
      c.client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
        c.asked.push(req.params);
        return { role: "assistant", content: { type: "text", text: "answer of " + token.slice(12, 17) }, model: "m" };
      });
      await c.client.connect(new StreamableHTTPClientTransport(new URL(srv.url),
        { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
      clients.push(c);
      return c;
    };
    try {
      const a = await connect(TA), b = await connect(TB);
      await until(async () => (await a.client.callTool({ name: "get_execution_stats", arguments: {} }))
        .structuredContent.upstreams?.asks?.state === "ready", 20000, "asks ready");
      // beta's call asks once alpha's call has reached the upstream too (2 calls in all)
      const runB = b.client.callTool({ name: "execute_code", arguments: { timeout_ms: 30000,
        code: `return { pcall(function() return servers.asks.ask({ wait_calls = 2 }) end) }` } }, undefined, { timeout: 60000 });
      await sleep(50); // (order only: beta's call is sent first; the fixture waits for both either way)
      const runA = a.client.callTool({ name: "execute_code", arguments: { timeout_ms: 30000,
        code: `return servers.asks.hold({})` } }, undefined, { timeout: 60000 });
      const rb = (await runB).structuredContent;
      assert.equal(rb.success, true, JSON.stringify(rb));
      assert.match(JSON.stringify(rb.result), /more than one tenant/, JSON.stringify(rb.result));
      assert.deepEqual(a.asked, [], "alpha's client was asked beta's upstream's question");
      assert.deepEqual(b.asked, [], "nobody can tell it was beta's: not asked either");
      const ra = (await runA).structuredContent;
      assert.equal(ra.success, true, JSON.stringify(ra));
      // with one tenant's call in flight the question goes to that tenant's client
      const again = (await b.client.callTool({ name: "execute_code", arguments: {
        code: `return servers.asks.ask({ wait_calls = 1 })` } })).structuredContent;
      assert.match(JSON.stringify(again.result), /answer of beta/, JSON.stringify(again));
      assert.equal(b.asked.length, 1);
      assert.deepEqual(a.asked, []);
    } finally {
      for (const c of clients) await c.client.close().catch(() => {});
      await srv.stop();
      rmSync(cfgDir, { recursive: true, force: true });
    }
  });

  it("with a 2026-07-28 client the upstream's question becomes input_required, and the retry's answer goes back to the upstream", T, async () => {
    const dataDir = makeDataDir();
    writeFileSync(path.join(dataDir, "config.json"), JSON.stringify({ mcpServers: { everything: EVERYTHING() } }));
    const p = new RawPeer({ dataDir });
    try {
      const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { elicitation: {} } };
      const code = `return servers.everything["trigger-elicitation-request"]({})`;
      await until(async () => {
        const st = await p.request(`st${Date.now()}`, "tools/call", { _meta: meta, name: "get_execution_stats", arguments: {} });
        return st.result?.structuredContent?.upstreams?.everything?.state === "ready";
      }, 15000, "everything ready");
      const r1 = await p.request("c1", "tools/call", { _meta: meta, name: "execute_code", arguments: { code } });
      assert.equal(r1.result?.resultType, "input_required", JSON.stringify(r1).slice(0, 500));
      const [key, q] = Object.entries(r1.result.inputRequests)[0];
      assert.equal(q.method, "elicitation/create");
      const r2 = await p.request("c2", "tools/call", { _meta: meta, name: "execute_code", arguments: { code },
        requestState: r1.result.requestState, inputResponses: { [key]: { action: "accept", content: { color: "green" } } } });
      assert.equal(r2.result?.resultType, "complete", JSON.stringify(r2).slice(0, 500));
      assert.equal(r2.result.structuredContent.success, true, JSON.stringify(r2.result.structuredContent));
      assert.match(JSON.stringify(r2.result.structuredContent.result), /green/);
    } finally {
      await p.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
