// Context saved (issue 18): the bytes sandbox code takes in and returns, with their token
// estimate, in each execute_code result's _meta ("dev.moonbox/context"), per tenant in
// get_execution_stats and in /metrics. Driven with the SDK client against the real binary; the
// upstream is the fixture server (tests/integration/fixtures/upstream_fixture.mjs, mode "data").
//
// The estimate (src/tokest.c) is checked against a real tokenizer from npm,
// @anthropic-ai/tokenizer, on a mixed corpus (fixtures/tokens/corpus.mjs); js-tiktoken's
// o200k_base is measured beside it and printed, not bounded (the weights were fitted to the
// first). The bounds are those docs/sandbox.md states.

import assert from "node:assert/strict";
import { describe, it, before, after } from "node:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";

import { countTokens } from "@anthropic-ai/tokenizer";
import { getEncoding } from "js-tiktoken";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import {
  TESTS_DIR, connectClient, connectWithConfig, useServer, execute, toolOk, nodeServer,
  waitUpstream, startHttp, spawnRaw,
} from "../lib/moonbox.mjs";
import { rows } from "./fixtures/rows.mjs";
import { corpus } from "./fixtures/tokens/corpus.mjs";

const T = { timeout: 120000 };
const KEY = "dev.moonbox/context";
const FIXTURE = path.join(TESTS_DIR, "integration/fixtures/upstream_fixture.mjs");
const ROOT = path.resolve(TESTS_DIR, "..");

/** The _meta counts of a CallToolResult. */
function counts(res) {
  const m = res._meta?.[KEY];
  assert.ok(m, `no _meta["${KEY}"] in ${JSON.stringify(res).slice(0, 400)}`);
  return m;
}

const bytes = (s) => Buffer.byteLength(s, "utf8");

describe("context saved: the classic case (10,000 upstream rows filtered to 5)", () => {
  it("reports the rows' bytes in, the answer's bytes out and the tokens saved", T, async () => {
    await useServer(await connectWithConfig({ mcpServers: { data: nodeServer(FIXTURE, ["data"]) } }), async (s) => {
      await waitUpstream(s.client, "data");
      const res = await execute(s.client, {
        code: `local r = servers.data.rows{count = 10000}
local out = {}
for _, row in ipairs(r.rows) do
  if row.id % 2000 == 7 then out[#out + 1] = { id = row.id, name = row.name, amount_cents = row.amount_cents } end
end
return { matched = #out, of = #r.rows, rows = out }`,
      });
      const sc = toolOk(res);
      const all = rows(10000);
      assert.equal(sc.result.of, 10000);
      assert.equal(sc.result.matched, 5);
      assert.deepEqual(sc.result.rows.map((r) => r.id), [7, 2007, 4007, 6007, 8007]);

      const m = counts(res);
      // in: the upstream's answer as the code got it, {"v": structuredContent} in compact JSON
      // (src/sandbox_upstream.c); keys may come in another order, the length is the same
      const reply = JSON.stringify({ v: { rows: all } });
      assert.equal(m.in.upstream.bytes, bytes(reply), "upstream bytes = the rows' JSON");
      // mcp.tools-style catalog answers may add a little (none is made here); nothing else came in
      assert.deepEqual(Object.keys(m.in).filter((k) => k !== "upstream" && k !== "catalog"), []);
      assert.equal(m.bytes_in, Object.values(m.in).reduce((a, x) => a + x.bytes, 0));
      assert.equal(m.tokens_in, Object.values(m.in).reduce((a, x) => a + x.tokens, 0));
      // out: the result text the model gets (the text block is the structuredContent's JSON)
      assert.equal(m.bytes_out, bytes(res.content[0].text));
      assert.equal(m.tokens_saved, m.tokens_in - m.tokens_out);
      // the estimates against the real tokenizer, within docs/sandbox.md's bound for JSON
      const realIn = countTokens(reply), realOut = countTokens(res.content[0].text);
      const errIn = (m.in.upstream.tokens - realIn) / realIn, errOut = (m.tokens_out - realOut) / realOut;
      assert.ok(Math.abs(errIn) <= 0.2, `tokens in: estimate ${m.in.upstream.tokens}, tokenizer ${realIn}`);
      assert.ok(Math.abs(errOut) <= 0.3, `tokens out: estimate ${m.tokens_out}, tokenizer ${realOut}`);
      assert.ok(m.bytes_in > 100 * m.bytes_out, `${m.bytes_in} in vs ${m.bytes_out} out`);
      console.log(`# classic case: ${m.bytes_in} bytes in (~${m.tokens_in} tokens; tokenizer ${realIn}), ` +
        `${m.bytes_out} bytes out (~${m.tokens_out} tokens; tokenizer ${realOut}), ${m.tokens_saved} tokens saved`);

      // the same figures, summed for this tenant
      const st = toolOk(await s.client.callTool({ name: "get_execution_stats", arguments: {} })).context;
      assert.equal(st.bytes_in, m.bytes_in);
      assert.equal(st.tokens_saved, m.tokens_saved);
      assert.deepEqual(st.by_source.upstream, m.in.upstream);
      assert.equal(st.bytes_out, m.bytes_out);
    });
  });
});

describe("context saved: every source, every result", () => {
  it("counts context_vars, workspace reads and skill sources; failed runs and trivial ones too", T, async () => {
    await useServer(await connectClient(), async (s) => {
      const text = "name,amount\nann,12\nbob,7\n";
      mkdirSync(path.join(s.dataDir, "workspaces/default"), { recursive: true });
      writeFileSync(path.join(s.dataDir, "workspaces/default/t.csv"), text);
      toolOk(await execute(s.client, { code: 'save_skill("twice", "return function(x) return 2 * x end", "doubles")' }));

      const ctx = { who: "Ann", list: [1, 2, 3] };
      const r1 = await execute(s.client, {
        code: 'local t = read_file("t.csv"); local d = require("skills.twice"); return #t + d(#who) + #list',
        context_vars: ctx,
      });
      assert.equal(toolOk(r1).result, bytes(text) + 6 + 3);
      const m = counts(r1);
      assert.equal(m.in.workspace.bytes, bytes(text));
      assert.equal(m.in.context_vars.bytes, bytes(JSON.stringify(ctx)), "the client's own JSON text");
      assert.ok(m.in.skills.bytes >= bytes("return function(x) return 2 * x end"), JSON.stringify(m));
      // context_vars were written by the model: not counted as saved
      const others = m.tokens_in - m.in.context_vars.tokens;
      assert.equal(m.tokens_saved, Math.max(0, others - m.tokens_out));
      for (const src of Object.values(m.in)) assert.ok(src.tokens >= 1 && src.tokens <= src.bytes);

      const trivial = await execute(s.client, { code: "return 1+1" });
      const t = counts(trivial);
      assert.deepEqual({ ...t, bytes_out: 0, tokens_out: 0 },
        { bytes_in: 0, tokens_in: 0, bytes_out: 0, tokens_out: 0, tokens_saved: 0 });
      assert.equal(t.bytes_out, bytes(trivial.content[0].text));
      assert.ok(t.tokens_out > 0 && t.tokens_out <= t.bytes_out);

      // a failed execution still says what came in before it failed
      const bad = await execute(s.client, { code: 'local t = read_file("t.csv"); error("boom")' });
      assert.equal(bad.isError, true);
      assert.equal(counts(bad).in.workspace.bytes, bytes(text));
      assert.equal(counts(bad).bytes_out, bytes(bad.content[0].text));
    });
  });
});

describe("context saved: MCP 2026-07-28", () => {
  it("the result's _meta keeps the counts beside the serverInfo every modern result carries", T, async () => {
    const p = spawnRaw();
    try {
      const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities": {} };
      const r = await p.request(1, "tools/call", { name: "execute_code", arguments: {
        code: "return #x", context_vars: { x: "abc" } }, _meta: meta }, { timeout: 20000 });
      assert.equal(r.result?.structuredContent?.result, 3, JSON.stringify(r).slice(0, 400));
      const m = r.result._meta;
      assert.equal(typeof m["io.modelcontextprotocol/serverInfo"], "object", JSON.stringify(m));
      assert.deepEqual(m[KEY].in, { context_vars: { bytes: bytes('{"x":"abc"}'), tokens: m[KEY].in.context_vars.tokens } });
      assert.equal(m[KEY].bytes_out, bytes(r.result.content[0].text));
    } finally {
      await p.dispose();
    }
  });
});

describe("context saved: the token estimate against a real tokenizer", () => {
  it("stays within the bounds docs/sandbox.md states on a mixed corpus (JSON, prose, code, CSV, 13 languages)", T, async () => {
    const samples = corpus(ROOT, path.join(TESTS_DIR, "node_modules"), 1);
    assert.ok(samples.length >= 80, `corpus of ${samples.length} samples`);
    const o200 = getEncoding("o200k_base");
    await useServer(await connectClient(), async (s) => {
      const dir = path.join(s.dataDir, "workspaces/default/corpus");
      mkdirSync(dir, { recursive: true });
      samples.forEach((x, i) => writeFileSync(path.join(dir, `${i}.txt`), x.text));
      for (const [i, x] of samples.entries()) {
        const res = await execute(s.client, { code: `read_file("corpus/${i}.txt")` });
        const m = counts(res);
        assert.equal(m.in.workspace.bytes, bytes(x.text));
        x.est = m.in.workspace.tokens;
        x.claude = countTokens(x.text);
        x.o200 = o200.encode(x.text).length;
      }
    });
    const kinds = [...new Set(samples.map((x) => x.kind))];
    const summary = (key, list) => {
      const est = list.reduce((a, x) => a + x.est, 0), tru = list.reduce((a, x) => a + x[key], 0);
      const mean = list.reduce((a, x) => a + Math.abs(x.est - x[key]) / x[key], 0) / list.length;
      const worst = Math.max(...list.map((x) => Math.abs(x.est - x[key]) / x[key]));
      return { total: (est - tru) / tru, mean, worst, n: list.length };
    };
    const pct = (v) => `${(v * 100).toFixed(1)}%`;
    for (const key of ["claude", "o200"]) {
      const all = summary(key, samples);
      console.log(`# ${key === "claude" ? "@anthropic-ai/tokenizer" : "js-tiktoken o200k_base"}: ` +
        `all ${all.n} samples: total ${pct(all.total)}, mean |err| ${pct(all.mean)}, worst ${pct(all.worst)}`);
      for (const k of kinds) {
        const s = summary(key, samples.filter((x) => x.kind === k));
        console.log(`#   ${k.padEnd(5)} n=${String(s.n).padStart(3)} total ${pct(s.total).padStart(6)}  mean |err| ${pct(s.mean).padStart(5)}  worst ${pct(s.worst)}`);
      }
    }
    // the bounds (docs/sandbox.md, "Context saved"), against @anthropic-ai/tokenizer
    const all = summary("claude", samples);
    assert.ok(Math.abs(all.total) <= 0.05, `total error ${pct(all.total)} above 5%`);
    assert.ok(all.mean <= 0.10, `mean per-sample error ${pct(all.mean)} above 10%`);
    for (const k of kinds) {
      const s = summary("claude", samples.filter((x) => x.kind === k));
      assert.ok(Math.abs(s.total) <= 0.12, `${k}: total error ${pct(s.total)} above 12%`);
      assert.ok(s.worst <= 0.4, `${k}: a sample off by ${pct(s.worst)}, above 40%`);
    }
    // and bytes/4, the estimate this replaces, is far worse on the same corpus
    const b4 = samples.reduce((a, x) => a + Math.abs(bytes(x.text) / 4 - x.claude) / x.claude, 0) / samples.length;
    console.log(`# bytes/4 on the same samples: mean |err| ${pct(b4)}`);
    assert.ok(b4 > all.mean);
  });
});

describe("context saved: tenants over HTTP, and /metrics", () => {
  let srv;
  const TA = "tok-alpha-0123456789abcdef", TB = "tok-beta-0123456789abcdef";
  before(async () => { srv = await startHttp(["--http-tokens", `${TA}=alpha,${TB}=beta`]); });
  after(async () => { await srv?.stop(); });

  async function client(token) {
    const c = new Client({ name: "savings-test", version: "1.0.0" });
    await c.connect(new StreamableHTTPClientTransport(new URL(srv.url),
      { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    return c;
  }

  it("a tenant sees its own sums only; /metrics has the server's", T, async () => {
    const a = await client(TA), b = await client(TB);
    try {
      const ctx = { blob: "x".repeat(5000) };
      const ra = await execute(a, { code: "return #blob", context_vars: ctx });
      assert.equal(toolOk(ra).result, 5000);
      const ma = counts(ra);
      assert.equal(ma.in.context_vars.bytes, bytes(JSON.stringify(ctx)));
      const rb = await execute(b, { code: "return 'b'" });
      const mb = counts(rb);

      const sa = toolOk(await a.callTool({ name: "get_execution_stats", arguments: {} })).context;
      const sb = toolOk(await b.callTool({ name: "get_execution_stats", arguments: {} })).context;
      assert.equal(sa.bytes_in, ma.bytes_in);
      assert.equal(sa.bytes_out, ma.bytes_out);
      assert.equal(sb.bytes_in, 0, "beta sees nothing of alpha's input");
      assert.deepEqual(sb.by_source, {});
      assert.equal(sb.bytes_out, mb.bytes_out);

      const text = await (await fetch(srv.url.replace(/\/mcp$/, "/metrics"),
        { headers: { Authorization: `Bearer ${TB}` } })).text();
      const metric = (re) => Number(text.match(re)?.[1]);
      assert.equal(metric(/^moonbox_context_in_bytes_total\{source="context_vars"\} (\d+)$/m), ma.bytes_in);
      assert.equal(metric(/^moonbox_context_in_bytes_total\{source="upstream"\} (\d+)$/m), 0);
      assert.equal(metric(/^moonbox_context_out_bytes_total (\d+)$/m), ma.bytes_out + mb.bytes_out);
      assert.equal(metric(/^moonbox_context_out_tokens_total (\d+)$/m), ma.tokens_out + mb.tokens_out);
      assert.equal(metric(/^moonbox_context_saved_tokens_total (\d+)$/m), ma.tokens_saved + mb.tokens_saved);
      assert.doesNotMatch(text, /alpha|beta/, "no tenant label: every tenant's token reads /metrics");
    } finally {
      await a.close();
      await b.close();
    }
  });
});

// issue 31, bug 11: a published skill's arguments and a workflow's definition reach the sandbox
// the way context_vars do (as JSON text the server makes), but no client sent context_vars.
describe("context saved: context_vars only when a client sent them", () => {
  let srv, dir;
  before(async () => {
    dir = path.join(TESTS_DIR, `.tmp-savings-${process.pid}`);
    mkdirSync(path.join(dir, "skills"), { recursive: true });
    mkdirSync(path.join(dir, "workflows"), { recursive: true });
    writeFileSync(path.join(dir, "skills", "twice.lua"),
      "--- Doubles x.\n-- @param x number the value\n-- @tool\nreturn function(a) return a.x * 2 end\n");
    writeFileSync(path.join(dir, "workflows", "greet.json"), JSON.stringify({
      name: "greet", description: "Says hello.", tool: true,
      inputs: { who: { type: "string", required: true } },
      steps: [{ id: "hi", lua: "'hello ' .. inputs.who" }],
      output: { said: "${steps.hi}" },
    }));
    srv = await startHttp(["--skills-dir", path.join(dir, "skills"), "--share-dir", "none",
      "--workflows-dir", path.join(dir, "workflows")]);
  });
  after(async () => {
    await srv?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("skill tools, workflow tools and run_workflow add nothing to context_vars in /metrics; execute_code's context_vars do", T, async () => {
    const c = new Client({ name: "savings-test", version: "1.0.0" });
    await c.connect(new StreamableHTTPClientTransport(new URL(srv.url)));
    const metrics = async () => {
      const text = await (await fetch(srv.url.replace(/\/mcp$/, "/metrics"))).text();
      const v = (what) => Number(text.match(new RegExp(`^moonbox_context_in_${what}_total\\{source="context_vars"\\} (\\d+)$`, "m"))?.[1]);
      return { bytes: v("bytes"), tokens: v("tokens") };
    };
    try {
      assert.deepEqual(await metrics(), { bytes: 0, tokens: 0 });
      const names = (await c.listTools()).tools.map((t) => t.name);
      assert.ok(names.includes("twice") && names.includes("greet"), names.join(","));
      const r1 = await c.callTool({ name: "twice", arguments: { x: 21 } });
      assert.notEqual(r1.isError, true, JSON.stringify(r1));
      assert.equal(r1.structuredContent?.result ?? JSON.parse(r1.content[0].text), 42);
      const r2 = await c.callTool({ name: "greet", arguments: { who: "ann" } });
      assert.notEqual(r2.isError, true, JSON.stringify(r2));
      const r3 = await c.callTool({ name: "run_workflow", arguments: { name: "greet", inputs: { who: "bob" } } });
      assert.notEqual(r3.isError, true, JSON.stringify(r3));
      assert.match(JSON.stringify(r3.structuredContent ?? r3.content), /hello bob/);
      const r4 = toolOk(await execute(c, { code: "return 1" }));
      assert.equal(r4.result, 1);
      assert.deepEqual(await metrics(), { bytes: 0, tokens: 0 }, "no client sent context_vars");
      const stats = toolOk(await c.callTool({ name: "get_execution_stats", arguments: {} })).context;
      assert.equal(stats.by_source.context_vars, undefined, JSON.stringify(stats));

      const ctx = { n: 7 };
      const r5 = await execute(c, { code: "return n", context_vars: ctx });
      assert.equal(toolOk(r5).result, 7);
      assert.equal(counts(r5).in.context_vars.bytes, bytes(JSON.stringify(ctx)));
      const m = await metrics();
      assert.equal(m.bytes, bytes(JSON.stringify(ctx)));
      assert.equal(m.tokens, counts(r5).in.context_vars.tokens);
    } finally {
      await c.close();
    }
  });
});
