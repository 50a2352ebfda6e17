// gateway_ab.mjs - two moonbox binaries, the same upstream calls from code, measured in the same
// run: for comparing a change to the gateway (as docs/benchmarks.md, "mcp.parallel's scheduler
// in Lua", does). Each binary gets its own server-everything over stdio as upstream
// "everything"; every round runs each workload once on each binary, in alternating order, so
// that drifts of the machine hit both alike.
//
// Usage: node tests/bench/gateway_ab.mjs OLD_BINARY NEW_BINARY
// Knobs (environment): AB_REPS=60 AB_WARMUP=20
// Prints, per workload, the median round trip of execute_code (ms) and the median of moonbox's
// own execution_time_ms for each binary, and the median over rounds of new/old. Figures only.

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, cpus } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const [OLD, NEW] = process.argv.slice(2).map((p) => path.resolve(p));
if (!OLD || !NEW) {
  console.error("usage: node tests/bench/gateway_ab.mjs OLD_BINARY NEW_BINARY");
  process.exit(2);
}
const REPS = Number(process.env.AB_REPS ?? 60);
const WARMUP = Number(process.env.AB_WARMUP ?? 20);
const MODULES = path.join(ROOT, "tests/node_modules");
const EVERYTHING = path.join(MODULES, "@modelcontextprotocol/server-everything/dist/index.js");
const sdk = (p) => import(pathToFileURL(path.join(MODULES, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const WORKLOADS = {
  parallel100: [100, `local c = {} for i = 1, 100 do c[i] = {"everything", "echo", {message = "m" .. i}} end
                      return #mcp.parallel(c)`],
  parallel2: [2, `return #mcp.parallel{{"everything", "echo", {message = "a"}}, {"everything", "echo", {message = "b"}}}`],
  tasks50x2: [50, `local c = {} for i = 1, 50 do c[i] = function()
                     local a = servers.everything.echo{message = "a" .. i}
                     return servers.everything.echo{message = a} end end
                   return #mcp.parallel(c)`],
};

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const now = () => Number(process.hrtime.bigint()) / 1e6;

async function start(binary) {
  const dir = mkdtempSync(path.join(tmpdir(), "moonbox-bench-ab-"));
  writeFileSync(path.join(dir, "config.json"), JSON.stringify({
    mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, "stdio"] } },
  }));
  const transport = new StdioClientTransport({ command: binary, args: ["--data-dir", dir, "--log-level", "warning"],
    env: { ...process.env }, stderr: "ignore" });
  const client = new Client({ name: "bench-gateway-ab", version: "0.0.0" });
  await client.connect(transport);
  const t0 = now();
  for (;;) {
    const s = (await client.callTool({ name: "get_execution_stats", arguments: {} })).structuredContent;
    if (s.upstreams?.everything?.state === "ready") break;
    if (now() - t0 > 20000) throw new Error(`${binary}: upstream not ready after 20 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const exec = async (name) => {
    const [want, code] = WORKLOADS[name];
    const s = now();
    const r = await client.callTool({ name: "execute_code", arguments: { code, timeout_ms: 30000 } });
    const ms = now() - s;
    if (r.structuredContent?.result !== want) throw new Error(`${binary}: ${JSON.stringify(r).slice(0, 300)}`);
    return { ms, inside: r.structuredContent.execution_time_ms };
  };
  return { exec, close: async () => { await client.close(); rmSync(dir, { recursive: true, force: true }); } };
}

const a = await start(OLD);
const b = await start(NEW);
try {
  for (let i = 0; i < WARMUP; i++) for (const w of Object.keys(WORKLOADS)) { await a.exec(w); await b.exec(w); }
  const res = {};
  for (const w of Object.keys(WORKLOADS)) res[w] = { a: [], b: [], ai: [], bi: [] };
  for (let r = 0; r < REPS; r++) {
    for (const w of Object.keys(WORKLOADS)) {
      const first = r % 2 ? b : a;
      const second = r % 2 ? a : b;
      const x = await first.exec(w);
      const y = await second.exec(w);
      const [ra, rb] = r % 2 ? [y, x] : [x, y];
      res[w].a.push(ra.ms); res[w].b.push(rb.ms); res[w].ai.push(ra.inside); res[w].bi.push(rb.inside);
    }
  }
  console.log(`gateway A/B: ${REPS} rounds after ${WARMUP} warm-up rounds; ${cpus().length} CPUs`);
  console.log(`old: ${OLD}\nnew: ${NEW}`);
  console.log("| workload    | old ms | new ms | new/old (per round) | old inside ms | new inside ms | new/old |");
  console.log("|-------------|--------|--------|---------------------|---------------|---------------|---------|");
  for (const [w, v] of Object.entries(res)) {
    const per = median(v.b.map((x, i) => x / v.a[i]));
    const perIn = median(v.bi.map((x, i) => x / v.ai[i]));
    console.log(`| ${w.padEnd(11)} | ${median(v.a).toFixed(2).padStart(6)} | ${median(v.b).toFixed(2).padStart(6)} | ` +
      `${per.toFixed(3).padStart(19)} | ${median(v.ai).toFixed(3).padStart(13)} | ${median(v.bi).toFixed(3).padStart(13)} | ` +
      `${perIn.toFixed(3).padStart(7)} |`);
  }
} finally {
  await a.close();
  await b.close();
}
