// bench_gateway.mjs - the gateway benchmark of issue 8: what calling an upstream MCP server from
// sandbox code costs, against calling it directly.
//
// Usage: node tests/bench/bench_gateway.mjs [MOONBOX_BINARY]   (default build/moonbox)
// Knobs (environment): GATEWAY_REPS=15 GATEWAY_CALLS=100 GATEWAY_WARMUP=25 (rounds not counted)
//
// One server-everything over stdio is configured as moonbox's upstream "everything"; a second
// server-everything is spawned for the direct client (the official SDK Client over stdio, as an
// agent would use it). In each round, alternating so that load on the machine hits all alike:
//   (a) direct, sequential: GATEWAY_CALLS echo calls, each awaited before the next;
//   (b) direct, pipelined:  GATEWAY_CALLS echo calls at once (Promise.all);
//   (c) through moonbox, one execute_code doing GATEWAY_CALLS sequential
//       servers.everything.echo{message=...} in a loop (client round trip of the execute_code);
//   (d) through moonbox, one execute_code with mcp.parallel of GATEWAY_CALLS echoes.
//   (e), (f) the same 100 calls through @karashiiro/my-cool-proxy 1.6.2 (a Lua code-mode gateway
//       in Node; installed into tests/bench/node_modules by `make bench`, skipped when missing or
//       with GATEWAY_NO_PROXY=1): one `execute` script awaiting each everything.echo in turn, and
//       one that starts all 100 and then awaits them (its way of running calls concurrently).
// Prints the median of each over the rounds, the ratios c/a and d/b (of the medians, and the
// median of the ratios within each round; the targets: c within 1.3x of a, d within 1.5x
// of b), the per-call cost, moonbox's own execution_time_ms for (c) and
// (d), moonbox's CPU time per upstream call in (c) and (d) (all its threads, /proc/<pid>/stat,
// 10 ms ticks summed over the rounds), and its RSS (VmRSS, VmHWM) with the upstream connected. Figures only:
// no pass/fail; exits non-zero only when it cannot measure.

import { existsSync, readFileSync, rmSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir, cpus } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const MOONBOX = path.resolve(process.argv[2] ?? path.join(ROOT, "build/moonbox"));
const REPS = Number(process.env.GATEWAY_REPS ?? 15);
const N = Number(process.env.GATEWAY_CALLS ?? 100);
const WARMUP = Number(process.env.GATEWAY_WARMUP ?? 25);
const MODULES = path.join(ROOT, "tests/node_modules");
const EVERYTHING = path.join(MODULES, "@modelcontextprotocol/server-everything/dist/index.js");
const PROXY_JS = path.join(ROOT, "tests/bench/node_modules/@karashiiro/my-cool-proxy/bin/my-cool-proxy.mjs");
const HAVE_PROXY = !process.env.GATEWAY_NO_PROXY && existsSync(PROXY_JS);

// the SDK installed for the tests (tests/bench/node_modules may hold another version)
const sdk = (p) => import(pathToFileURL(path.join(MODULES, "@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const now = () => Number(process.hrtime.bigint()) / 1e6;

/** CPU time (user + system, all threads) of a process in ms; 10 ms ticks. */
function cpuMs(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return NaN;
  }
}

function procStatus(pid, key) {
  try {
    const m = readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${key}:\\s*(\\d+) kB`, "m"));
    return m ? Number(m[1]) : NaN;
  } catch {
    return NaN;
  }
}

async function connect(command, args, env = {}) {
  const transport = new StdioClientTransport({ command, args, env: { ...process.env, ...env }, stderr: "pipe" });
  let stderr = "";
  transport.stderr?.on("data", (c) => {
    if (stderr.length < 1 << 16) stderr += c;
  });
  const client = new Client({ name: "bench-gateway", version: "0.0.0" });
  try {
    await client.connect(transport);
  } catch (e) {
    throw new Error(`${command} ${args.join(" ")}: ${e.message}\n${stderr}`);
  }
  return { client, transport, stderr: () => stderr };
}

const dataDir = mkdtempSync(path.join(tmpdir(), "moonbox-bench-gw-"));
writeFileSync(path.join(dataDir, "config.json"), JSON.stringify({
  mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, "stdio"] } },
}));

let mb;
let direct;
let proxy;
try {
  mb = await connect(MOONBOX, ["--data-dir", dataDir, "--log-level", "warning"]);
  direct = await connect(process.execPath, [EVERYTHING, "stdio"]);

  const stats = async () => (await mb.client.callTool({ name: "get_execution_stats", arguments: {} })).structuredContent;
  const t0 = now();
  for (;;) {
    const u = (await stats()).upstreams?.everything;
    if (u?.state === "ready") break;
    if (now() - t0 > 20000) throw new Error(`upstream not ready after 20 s: ${JSON.stringify(u)}\n${mb.stderr()}`);
    await new Promise((r) => setTimeout(r, 50));
  }

  // my-cool-proxy: the same upstream in its config; an agent must call tool-details on a tool
  // before scripts may call it.
  if (HAVE_PROXY) {
    writeFileSync(path.join(dataDir, "proxy.json"), JSON.stringify({
      transport: "stdio",
      mcpClients: { everything: { type: "stdio", command: process.execPath, args: [EVERYTHING, "stdio"] } },
      logging: { console: { level: "warn" }, file: { level: "warn" } },
    }));
    const x = (k) => path.join(dataDir, `proxy-${k}`);
    proxy = await connect(process.execPath, [PROXY_JS], { CONFIG_PATH: path.join(dataDir, "proxy.json"),
      XDG_CONFIG_HOME: x("config"), XDG_DATA_HOME: x("data"), XDG_STATE_HOME: x("state"), XDG_CACHE_HOME: x("cache") });
    const p0 = now();
    for (;;) {
      const r = await proxy.client.callTool({ name: "list-servers", arguments: {} });
      if (/\[\*\] everything/.test(r.content?.[0]?.text ?? "")) break;
      if (now() - p0 > 20000) throw new Error(`my-cool-proxy: upstream not connected after 20 s\n${proxy.stderr()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    await proxy.client.callTool({ name: "tool-details", arguments: { luaServerName: "everything", luaToolName: "echo" } });
  }
  const PSEQ = `local n = 0 for i = 1, ${N} do everything.echo({message = "m" .. i}):await() n = n + 1 end result(n)`;
  const PCON = `local p = {} for i = 1, ${N} do p[i] = everything.echo({message = "m" .. i}) end
                local n = 0 for i = 1, ${N} do p[i]:await() n = n + 1 end result(n)`;
  const proxyExec = async (script) => {
    const s = now();
    const res = await proxy.client.callTool({ name: "execute", arguments: { script } });
    const ms = now() - s;
    const text = res.content?.[0]?.text ?? "";
    if (res.isError || !text.includes(`Result:\n${N}`)) throw new Error(`my-cool-proxy execute failed: ${text.slice(0, 500)}`);
    return ms;
  };

  const SEQ = `for i = 1, ${N} do servers.everything.echo{message = "m" .. i} end return ${N}`;
  const PAR = `local c = {} for i = 1, ${N} do c[i] = {"everything", "echo", {message = "m" .. i}} end
               return #mcp.parallel(c)`;
  const cpu = { seq: 0, par: 0 };
  const execCode = async (code, account) => {
    const c0 = cpuMs(mb.transport.pid);
    const s = now();
    const res = await mb.client.callTool({ name: "execute_code", arguments: { code, timeout_ms: 60000 } });
    const ms = now() - s;
    const sc = res.structuredContent;
    if (!sc?.success || sc.result !== N) throw new Error(`execute_code failed: ${JSON.stringify(sc).slice(0, 500)}`);
    if (account) cpu[account] += cpuMs(mb.transport.pid) - c0;
    return { ms, inside: sc.execution_time_ms };
  };
  const echo = (i) => direct.client.callTool({ name: "echo", arguments: { message: `m${i}` } });
  const directSeq = async () => {
    const s = now();
    for (let i = 1; i <= N; i++) await echo(i);
    return now() - s;
  };
  const directPar = async () => {
    const s = now();
    await Promise.all(Array.from({ length: N }, (_, i) => echo(i + 1)));
    return now() - s;
  };

  // warm-up: JIT of both node servers and of the client (their times keep falling for the
  // first ~20 rounds), moonbox's pools
  for (let i = 0; i < WARMUP; i++) {
    await directSeq();
    await directPar();
    await execCode(SEQ);
    await execCode(PAR);
    if (proxy) {
      await proxyExec(PSEQ);
      await proxyExec(PCON);
    }
  }

  const A = [], B = [], C = [], D = [], Cin = [], Din = [], E = [], F = [];
  for (let r = 0; r < REPS; r++) {
    A.push(await directSeq());
    const c = await execCode(SEQ, "seq");
    C.push(c.ms);
    Cin.push(c.inside);
    B.push(await directPar());
    const d = await execCode(PAR, "par");
    D.push(d.ms);
    Din.push(d.inside);
    if (proxy) {
      E.push(await proxyExec(PSEQ));
      F.push(await proxyExec(PCON));
    }
  }

  const pid = mb.transport.pid;
  const rss = procStatus(pid, "VmRSS");
  const hwm = procStatus(pid, "VmHWM");
  const up = (await stats()).upstreams.everything;
  const upRss = procStatus(up.pid, "VmRSS");

  const a = median(A), b = median(B), c = median(C), d = median(D);
  const f = (x) => x.toFixed(1);
  console.log(`gateway bench: ${REPS} rounds (after ${WARMUP} warm-up rounds) of ${N} echo calls to server-everything over stdio; ${cpus().length} CPUs`);
  console.log(`gateway_direct_seq_ms=${f(a)}`);
  console.log(`gateway_direct_pipelined_ms=${f(b)}`);
  console.log(`gateway_code_seq_ms=${f(c)}`);
  console.log(`gateway_code_parallel_ms=${f(d)}`);
  console.log(`gateway_code_seq_inside_ms=${f(median(Cin))}`);
  console.log(`gateway_code_parallel_inside_ms=${f(median(Din))}`);
  console.log(`gateway_ratio_seq=${(c / a).toFixed(2)}`);
  console.log(`gateway_ratio_parallel=${(d / b).toFixed(2)}`);
  // the same ratios taken within each round (a and c, b and d run back to back), then the
  // median: drifts of the machine's speed over the run cancel out
  const perRound = (X, Y) => median(X.map((x, i) => x / Y[i]));
  console.log(`gateway_ratio_seq_per_round=${perRound(C, A).toFixed(2)}`);
  console.log(`gateway_ratio_parallel_per_round=${perRound(D, B).toFixed(2)}`);
  const perCall = (k) => (cpu[k] / (REPS * N) * 1000).toFixed(0);
  console.log(`gateway_moonbox_cpu_us_per_call_seq=${perCall("seq")}`);
  console.log(`gateway_moonbox_cpu_us_per_call_parallel=${perCall("par")}`);
  const proxyRss = proxy ? procStatus(proxy.transport.pid, "VmRSS") : NaN;
  const e = median(E), fc = median(F);
  if (proxy) {
    console.log(`gateway_proxy_seq_ms=${f(e)}`);
    console.log(`gateway_proxy_concurrent_ms=${f(fc)}`);
    console.log(`gateway_proxy_ratio_seq=${(e / a).toFixed(2)}`);
    console.log(`gateway_proxy_ratio_concurrent=${(fc / b).toFixed(2)}`);
    console.log(`gateway_proxy_rss_kb=${proxyRss}`);
  }
  console.log(`gateway_moonbox_rss_kb=${rss}`);
  console.log(`gateway_moonbox_hwm_kb=${hwm}`);
  console.log(`gateway_upstream_rss_kb=${upRss}`);
  console.log();
  const row = (label, v) => console.log(`| ${label.padEnd(68)} | ${v.padStart(14)} |`);
  console.log(`| ${"figure (medians)".padEnd(68)} | ${"value".padStart(14)} |`);
  console.log(`|${"-".repeat(70)}|${"-".repeat(16)}|`);
  row(`(a) direct SDK client, ${N} sequential echo calls`, `${f(a)} ms`);
  row(`(b) direct SDK client, ${N} pipelined echo calls`, `${f(b)} ms`);
  row(`(c) one execute_code, ${N} sequential servers.everything.echo`, `${f(c)} ms`);
  row(`(d) one execute_code, mcp.parallel of ${N} echoes`, `${f(d)} ms`);
  row("c/a (issue: within 1.3x)", `${(c / a).toFixed(2)}x`);
  row("c/a, d/b: median of the ratios within each round", `${perRound(C, A).toFixed(2)}x / ${perRound(D, B).toFixed(2)}x`);
  row("d/b (issue: within 1.5x)", `${(d / b).toFixed(2)}x`);
  row("per upstream call: direct sequential / through code", `${(a / N * 1000).toFixed(0)} / ${(c / N * 1000).toFixed(0)} us`);
  row("(c) execution_time_ms inside moonbox", `${f(median(Cin))} ms`);
  row("(d) execution_time_ms inside moonbox", `${f(median(Din))} ms`);
  row("moonbox CPU per upstream call, (c) / (d) (all threads)", `${perCall("seq")} / ${perCall("par")} us`);
  row("moonbox RSS with the upstream connected (VmRSS)", `${(rss / 1024).toFixed(1)} MiB`);
  row("moonbox peak RSS (VmHWM)", `${(hwm / 1024).toFixed(1)} MiB`);
  row("server-everything RSS (for scale)", `${(upRss / 1024).toFixed(1)} MiB`);
  if (proxy) {
    row(`(e) my-cool-proxy 1.6.2, ${N} sequential echo calls in one execute`, `${f(e)} ms`);
    row(`(f) my-cool-proxy 1.6.2, ${N} concurrent echo calls in one execute`, `${f(fc)} ms`);
    row("e/a, f/b (the same ratios for my-cool-proxy)", `${(e / a).toFixed(2)}x / ${(fc / b).toFixed(2)}x`);
    row("moonbox vs my-cool-proxy: c/e, d/f", `${(c / e).toFixed(2)} / ${(d / fc).toFixed(2)}`);
    row("my-cool-proxy RSS with the upstream connected (VmRSS)", `${(proxyRss / 1024).toFixed(1)} MiB`);
  } else {
    console.log("my-cool-proxy: skipped (tests/bench/node_modules has no @karashiiro/my-cool-proxy; `make bench` installs it)");
  }
} catch (e) {
  console.error(`bench_gateway: ${e.stack ?? e}`);
  process.exitCode = 1;
} finally {
  await direct?.client.close().catch(() => {});
  await mb?.client.close().catch(() => {});
  await proxy?.client.close().catch(() => {});
  rmSync(dataDir, { recursive: true, force: true });
}
