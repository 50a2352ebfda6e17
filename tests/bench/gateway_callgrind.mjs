// gateway_callgrind.mjs - instructions per upstream call, counted by callgrind (repeatable on a
// busy machine, unlike times): moonbox runs under `valgrind --tool=callgrind` with
// server-everything as its upstream "everything", and the client runs K executions of 100
// sequential calls (or one mcp.parallel of 100) after 3 warm-up executions; done for K = 5 and
// K = 15, the difference of the two totals divided by 1,000 is what one more upstream call costs
// in the whole process (all threads), without start-up and shutdown.
//
// Usage: node tests/bench/gateway_callgrind.mjs [MOONBOX_BINARY]   (default build/moonbox)
// Prints `gateway_callgrind_instructions_per_call_seq=N` and `..._parallel=N`. Slow (about a
// minute per mode). Needs valgrind and tests/node_modules (npm ci in tests/).

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const MOONBOX = path.resolve(process.argv[2] ?? path.join(ROOT, "build/moonbox"));
const MODULES = path.join(ROOT, "tests/node_modules");
const EVERYTHING = path.join(MODULES, "@modelcontextprotocol/server-everything/dist/index.js");
const sdk = (p) => import(pathToFileURL(path.join(MODULES, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const N = 100;
const CODE = {
  seq: `for i = 1, ${N} do servers.everything.echo{message = "m" .. i} end return ${N}`,
  parallel: `local c = {} for i = 1, ${N} do c[i] = {"everything", "echo", {message = "m" .. i}} end
             return #mcp.parallel(c)`,
};

async function total(mode, k) {
  const dir = mkdtempSync(path.join(tmpdir(), "moonbox-cg-gw-"));
  const out = path.join(dir, "callgrind.out");
  try {
    writeFileSync(path.join(dir, "config.json"), JSON.stringify({
      mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, "stdio"] } },
    }));
    const transport = new StdioClientTransport({
      command: "valgrind",
      args: ["--tool=callgrind", `--callgrind-out-file=${out}`, MOONBOX, "--data-dir", dir, "--log-level", "warning"],
      env: { ...process.env }, stderr: "ignore",
    });
    const client = new Client({ name: "gateway-callgrind", version: "0.0.0" });
    await client.connect(transport);
    const t0 = Date.now();
    for (;;) {
      const s = (await client.callTool({ name: "get_execution_stats", arguments: {} })).structuredContent;
      if (s.upstreams?.everything?.state === "ready") break;
      if (Date.now() - t0 > 120000) throw new Error("the upstream did not become ready under valgrind");
      await new Promise((r) => setTimeout(r, 200));
    }
    for (let i = 0; i < 3 + k; i++) {
      const r = await client.callTool({ name: "execute_code", arguments: { code: CODE[mode], timeout_ms: 60000 } });
      if (r.structuredContent?.result !== N) throw new Error(`execute_code failed: ${JSON.stringify(r).slice(0, 300)}`);
    }
    await client.close();
    for (let i = 0; i < 100; i++) { // valgrind writes the profile as the process exits
      try {
        const m = readFileSync(out, "utf8").match(/^(?:summary|totals):\s*(\d+)/m);
        if (m) return Number(m[1]);
      } catch {}
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error("no callgrind totals");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const mode of ["seq", "parallel"]) {
  const a = await total(mode, 5);
  const b = await total(mode, 15);
  console.log(`gateway_callgrind_instructions_per_call_${mode}=${Math.round((b - a) / (10 * N))}`);
}
