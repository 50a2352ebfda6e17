// The soak and chaos harness (make soak, make chaos; docs/testing.md, docs/security.md "Soak and
// chaos"). Both run the same load against two moonbox servers on one data directory at once: one
// over Streamable HTTP with three tenants (http_tokens: alice, bob, carol, each driven by the
// official SDK client, plus raw 2026-07-28 POSTs), one over stdio (the SDK client, the default
// tenant). Each server has the real upstream servers server-everything and server-memory (from
// tests/node_modules, as tests/integration/gateway.test.mjs configures them) and, with
// SOAK_STORE=pg, its store in a throwaway PostgreSQL cluster (tests/lib/pg.mjs).
//
// The load (Load, below): every client runs a few loops of operations drawn from a seeded mix:
// trivial and heavy executions, sorting, failing ones (runtime and syntax errors), ones that trip
// a limit (instructions, memory, time), upstream calls (get-sum; an entity created, read and
// deleted in server-memory), skills saved (in the sandbox and with the tool) and loaded again,
// workspace writes and reads (in the sandbox and with the tools), tokenize_pii and restore_pii,
// the journal, and raw 2026-07-28 requests. The answer of every operation is computed by the
// client and checked: each is counted as `ok` (the right result, or the expected error of a
// failing or limit-tripping one), `wrong` (an answer that is not the computed one), `missing`
// (no answer within CLIENT_TIMEOUT_MS) or `error` (an error the operation should not have had:
// its text is kept, so that chaos can check it against the causes it injected).
//
// What the clients were told is kept in a ledger (skills and workspace files acknowledged, with
// the writes after them that failed and so may or may not have happened; PII tokens; execution
// ids from _meta): verifyLedger() checks afterwards that every acknowledged write is there.
//
// Sampler records, every interval, per server: RSS, open descriptors (/proc/PID/fd), threads; the
// worker processes' RSS (children running `moonbox --worker`, /proc); the store's size (SQLite
// files, or pg_database_size); the answers and errors of the interval by kind, p50/p99 latency.
// Each sample is printed as a table line and written as a JSON line to a file.
//
// Everything started here stays in the test file's process group (tests/run-node.mjs kills the
// group when the file ends or is interrupted) and is also killed by close() and at exit.

import { spawn, spawnSync } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync,
  rmSync, statSync, writeFileSync, openSync, writeSync, closeSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { isDeepStrictEqual } from "node:util";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { MOONBOX, UPSTREAM_JS, nodeServer, requireBinary } from "../lib/moonbox.mjs";
import { hookExit, live } from "../lib/cleanup.mjs";

export const CLIENT_TIMEOUT_MS = 60000;

// The SDK's HTTP client leaves an abort listener behind on its transport's one AbortSignal now and
// then (about 1,500 after 200,000 requests in a 30-minute soak): Node warns once per listener
// beyond 1,500, thousands of lines. That is the test client's, not the server's: counted, and
// said once.
export const clientWarnings = { maxListeners: 0 };
process.removeAllListeners("warning");
process.on("warning", (w) => {
  if (w.name === "MaxListenersExceededWarning") {
    if (clientWarnings.maxListeners++ === 0) console.log(`client warning (the test client's, counted from here on): ${w.message}`);
    return;
  }
  console.error(w);
});
const MiB = 1 << 20;

// ---- small tools ------------------------------------------------------------------------------

/** A seeded PRNG (mulberry32): () => [0, 1). */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const int = (r, lo, hi) => lo + Math.floor(r() * (hi - lo + 1));

export function quantile(xs, q) {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

export const median = (xs) => quantile(xs, 0.5);

// ---- /proc ------------------------------------------------------------------------------------

function procStatus(pid) {
  try {
    const t = readFileSync(`/proc/${pid}/status`, "utf8");
    const rss = Number(/VmRSS:\s+(\d+)/.exec(t)?.[1] ?? 0) * 1024;
    const threads = Number(/Threads:\s+(\d+)/.exec(t)?.[1] ?? 0);
    return { rss, threads };
  } catch {
    return null;
  }
}

function procFds(pid) {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return null;
  }
}

/** pid -> [child pids], from /proc/PID/stat of every process. */
function childrenMap() {
  const map = new Map();
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const st = readFileSync(`/proc/${e}/stat`, "utf8");
      const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
      if (f[0] === "Z") continue;
      const ppid = Number(f[1]);
      if (!map.has(ppid)) map.set(ppid, []);
      map.get(ppid).push(Number(e));
    } catch { /* gone */ }
  }
  return map;
}

function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
  } catch {
    return [];
  }
}

/** The worker processes (`moonbox --worker`) and upstream servers (node ...) of server pid. */
export function childrenOf(pid, map = childrenMap()) {
  const workers = [], upstreams = [];
  for (const c of map.get(pid) ?? []) {
    const cl = cmdline(c);
    if (cl.includes("--worker")) workers.push(c);
    else if (cl.some((a) => a.includes("server-everything"))) upstreams.push({ pid: c, name: "everything" });
    else if (cl.some((a) => a.includes("server-memory"))) upstreams.push({ pid: c, name: "memory" });
  }
  return { workers, upstreams };
}

// ---- servers ----------------------------------------------------------------------------------

export const TOKENS = { alice: "soak-token-alice-0123456789", bob: "soak-token-bob-0123456789ab",
  carol: "soak-token-carol-0123456789" };

/**
 * Makes the data directory: a plain temporary directory, or with disk: true one on a small
 * filesystem of its own the test can fill (a tmpfs when root and permitted, else a loop-mounted
 * ext4 file; else none, with the reason). Returns {root, dataDir, mount: {kind, dir, size} | null,
 * why, cleanup()}.
 */
export function makeDataDirs({ disk = false, diskMb = 64 } = {}) {
  const root = mkdtempSync(path.join(tmpdir(), "moonbox-soak-"));
  const side = path.join(root, "side"); // upstream files, configs: never on the small disk
  mkdirSync(side);
  let mount = null, why = disk ? null : "not asked for";
  if (disk) {
    const mnt = path.join(root, "disk");
    mkdirSync(mnt);
    if (process.getuid?.() !== 0) {
      why = "not root: cannot mount a small filesystem for the data directory";
    } else {
      const t = spawnSync("mount", ["-t", "tmpfs", "-o", `size=${diskMb}m,mode=0755`, "tmpfs", mnt], { encoding: "utf8" });
      if (t.status === 0) {
        mount = { kind: "tmpfs", dir: mnt, size: diskMb * MiB };
      } else {
        const img = path.join(root, "disk.img");
        const mk = spawnSync("sh", ["-c", `truncate -s ${diskMb}M '${img}' && mkfs.ext4 -q -F '${img}' && mount -o loop '${img}' '${mnt}'`], { encoding: "utf8" });
        if (mk.status === 0) mount = { kind: "loop ext4", dir: mnt, size: diskMb * MiB };
        else why = `mount refused: tmpfs (${t.stderr.trim()}), loop file (${mk.stderr.trim()})`;
      }
    }
  }
  const dataDir = path.join(mount ? mount.dir : root, "data");
  mkdirSync(dataDir, { recursive: true });
  // A SIGKILL of this process (tests/run-node.mjs kills the group on a time-out or an interrupt)
  // runs no exit handler: a watchdog in a process group of its own unmounts the filesystem once
  // this process is gone, then exits (it never outlives this process by more than ~0.2 s).
  let watchdog = null;
  if (mount) {
    const script = `const [ppid, mnt, root] = process.argv.slice(1); const { spawnSync } = require("child_process");
      setInterval(() => { try { process.kill(Number(ppid), 0); } catch {
        for (let i = 0; i < 20 && spawnSync("umount", [mnt]).status !== 0; i++) spawnSync("umount", ["-l", mnt]);
        require("fs").rmSync(root, { recursive: true, force: true }); process.exit(0); } }, 200);`;
    watchdog = spawn(process.execPath, ["-e", script, String(process.pid), mount.dir, root], { detached: true, stdio: "ignore" });
    watchdog.unref();
  }
  const cleanup = () => {
    if (watchdog) {
      try { process.kill(watchdog.pid, "SIGKILL"); } catch { /* gone */ }
      watchdog = null;
    }
    if (mount) {
      for (let i = 0; i < 20; i++) {
        const u = spawnSync("umount", [mount.dir]);
        if (u.status === 0) break;
        spawnSync("umount", ["-l", mount.dir]);
        const again = spawnSync("mountpoint", ["-q", mount.dir]);
        if (again.status !== 0) break;
      }
      mount = null;
    }
    rmSync(root, { recursive: true, force: true });
  };
  return { root, side, dataDir, get mount() { return mount; }, why, cleanup };
}

function serverConfig(side, name, extra = {}) {
  const memDir = path.join(side, `memory-${name}`);
  mkdirSync(memDir, { recursive: true });
  return {
    mcpServers: {
      everything: nodeServer(UPSTREAM_JS.everything, ["stdio"], { timeoutMs: 3000 }),
      memory: nodeServer(UPSTREAM_JS.memory, [], { timeoutMs: 3000, env: { MEMORY_FILE_PATH: path.join(memDir, "memory.jsonl") } }),
    },
    ...extra,
  };
}

function writeConfig(side, name, cfg) {
  const p = path.join(side, `config-${name}.json`);
  writeFileSync(p, JSON.stringify(cfg, null, 2), { mode: 0o600 });
  return p;
}

/**
 * Starts the two servers on one data directory and connects the clients. Returns the set-up:
 * {http: {pid, url, proc, exited, stderr()}, stdio: {pid, client, transport, stderr()},
 *  clients: [Cl...], pg, dirs, storeSize(), close()}.
 *
 * @param {object} o
 * @param {string} o.store "sqlite" or "pg"
 * @param {boolean} [o.disk] the data directory on a small filesystem of its own (chaos)
 * @param {string[]} [o.args] more server arguments (both)
 * @param {(s: string) => void} [o.log]
 */
export async function startSetup(o) {
  requireBinary();
  const log = o.log ?? console.log;
  const dirs = makeDataDirs({ disk: o.disk, diskMb: o.diskMb });
  const procs = new Set();
  const killAll = () => {
    for (const p of procs) { try { process.kill(p, "SIGKILL"); } catch { /* gone */ } }
  };
  const holder = { _cleanupSync() { live.delete(holder); killAll(); dirs.cleanup(); } };
  hookExit();
  live.add(holder);
  let pg = null;
  const storeArgs = [];
  try {
    if (o.store === "pg") {
      pg = await (await import("../lib/pg.mjs")).startPg();
      await pg.createDb("soak");
      storeArgs.push("--store-url", pg.url("soak"));
    }
    const common = ["--data-dir", dirs.dataDir, "--share-dir", "none", "--workers", "4", ...storeArgs, ...(o.args ?? [])];
    const tokens = Object.entries(TOKENS).map(([t, n]) => `${n}=${t}`).join(",");
    const httpCfg = writeConfig(dirs.side, "http", serverConfig(dirs.side, "http", { http_tokens: tokens }));
    const stdioCfg = writeConfig(dirs.side, "stdio", serverConfig(dirs.side, "stdio"));

    // HTTP server
    const hproc = spawn(MOONBOX, [...common, "--config", httpCfg, "--http", "127.0.0.1:0", ...(o.httpArgs ?? [])],
      { stdio: ["ignore", "ignore", "pipe"] });
    procs.add(hproc.pid);
    let hstderr = "";
    const hexited = new Promise((resolve) => hproc.on("exit", (code, signal) => { procs.delete(hproc.pid); resolve({ code, signal }); }));
    const url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`HTTP server: no listening line; stderr:\n${hstderr}`)), 20000);
      hproc.stderr.on("data", (c) => {
        hstderr += c;
        if (hstderr.length > 4 * MiB) hstderr = hstderr.slice(-2 * MiB);
        const m = hstderr.match(/serving MCP over HTTP on (http:\/\/\S+\/mcp)/);
        if (m) { clearTimeout(timer); resolve(m[1]); }
      });
      hproc.on("exit", (code) => { clearTimeout(timer); reject(new Error(`HTTP server exited ${code}: ${hstderr}`)); });
    });
    const http = { pid: hproc.pid, url, proc: hproc, exited: hexited, stderr: () => hstderr, exit: null };
    hexited.then((r) => { http.exit = r; });

    // stdio server (the SDK spawns it)
    const transport = new StdioClientTransport({ command: MOONBOX, args: [...common, "--config", stdioCfg], stderr: "pipe", env: process.env });
    let sstderr = "";
    transport.stderr?.on("data", (c) => { sstderr += c; if (sstderr.length > 4 * MiB) sstderr = sstderr.slice(-2 * MiB); });
    const sclient = new Client({ name: "soak-stdio", version: "0.0.0" }, {});
    await sclient.connect(transport);
    procs.add(transport.pid);
    const stdio = { pid: transport.pid, client: sclient, transport, stderr: () => sstderr, exit: null };
    const sdkOnclose = transport.onclose; // the SDK's own (it rejects what is pending): kept
    transport.onclose = () => { stdio.exit = stdio.exit ?? { closed: true }; sdkOnclose?.(); };

    const clients = [new Cl("stdio", "default", sclient, "stdio")];
    for (const [tenant, token] of Object.entries(TOKENS)) {
      clients.push(new Cl(tenant, tenant, await httpClient(url, token, `soak-${tenant}`), "http", token, url));
    }
    for (const c of clients) await waitUpstreams(c);

    const setup = {
      http, stdio, clients, pg, dirs, url, log,
      servers: () => [["http", http.pid], ["stdio", stdio.pid]],
      async storeSize() {
        if (pg) {
          if (!pg.running) return null;
          try { return Number(await pg.psql("SELECT pg_database_size('soak')")); } catch { return null; }
        }
        let n = 0;
        for (const f of ["moonbox.db", "moonbox.db-wal", "moonbox.db-shm"]) {
          try { n += statSync(path.join(dirs.dataDir, f)).size; } catch { /* none */ }
        }
        return n;
      },
      /** Stops both servers the way a service manager would (SIGTERM; stdin closed for stdio)
       * and resolves with their exits; then removes everything. */
      async close({ graceful = true } = {}) {
        const res = {};
        for (const c of clients.slice(1)) await c.client.close().catch(() => {});
        if (graceful && !http.exit) {
          hproc.kill("SIGTERM");
          const k = setTimeout(() => hproc.kill("SIGKILL"), 15000);
          res.http = await hexited;
          clearTimeout(k);
        }
        if (graceful && !stdio.exit?.code) {
          const sp = transport.pid;
          const gone = new Promise((resolve) => {
            const t0 = Date.now();
            const tick = () => (procStatus(sp) === null || Date.now() - t0 > 15000 ? resolve() : setTimeout(tick, 50));
            tick();
          });
          await sclient.close().catch(() => {});
          await gone;
        }
        killAll();
        if (pg) await pg.destroy().catch(() => {});
        live.delete(holder);
        dirs.cleanup();
        return res;
      },
    };
    return setup;
  } catch (e) {
    killAll();
    if (pg) await pg.destroy().catch(() => {});
    live.delete(holder);
    dirs.cleanup();
    throw e;
  }
}

export async function httpClient(url, token, name, capabilities = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  const client = new Client({ name, version: "0.0.0" }, { capabilities });
  await client.connect(transport);
  return client;
}

async function waitUpstreams(c) {
  const t0 = Date.now();
  for (;;) {
    const r = await c.client.callTool({ name: "get_execution_stats", arguments: {} });
    const up = r.structuredContent?.upstreams ?? {};
    if (up.everything?.state === "ready" && up.memory?.state === "ready") return;
    if (Date.now() - t0 > 30000) throw new Error(`upstreams not ready for ${c.name}: ${JSON.stringify(up).slice(0, 800)}`);
    await sleep(100);
  }
}

/** One client: an SDK Client over stdio or HTTP, its tenant, and (HTTP) its token for raw POSTs. */
export class Cl {
  constructor(name, tenant, client, server, token, url) {
    Object.assign(this, { name, tenant, client, server, token, url });
  }

  tool(name, args) {
    return this.client.callTool({ name, arguments: args }, undefined, { timeout: CLIENT_TIMEOUT_MS });
  }
}

// ---- operations -------------------------------------------------------------------------------

export class Wrong extends Error {}
class Unexpected extends Error {}

const errText = (res) => (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

/** The structuredContent of a successful execute_code, else Unexpected with its error. */
function execOk(res) {
  const sc = res.structuredContent;
  if (res.isError || !sc?.success) throw new Unexpected(sc?.error ? `${sc.error_type}: ${sc.error}` : errText(res).slice(0, 400));
  return sc;
}

/** An execute_code answer that must be the error of errorType naming `mention`. */
function execFails(res, errorType, mention) {
  const sc = res.structuredContent;
  if (sc?.success) throw new Wrong(`expected error ${errorType}, got success ${JSON.stringify(sc.result).slice(0, 200)}`);
  if (sc?.error_type !== errorType) {
    if (sc?.error_type && ["syntax", "runtime", "timeout", "memory", "instructions"].includes(sc.error_type)) {
      throw new Wrong(`expected error ${errorType}, got ${sc.error_type}: ${sc.error}`);
    }
    throw new Unexpected(sc?.error ? `${sc.error_type}: ${sc.error}` : errText(res).slice(0, 400));
  }
  if (!String(sc.error).includes(mention)) throw new Wrong(`error ${errorType} does not name ${mention}: ${sc.error}`);
  return sc;
}

function toolOk(res) {
  if (res.isError) throw new Unexpected(errText(res).slice(0, 400));
  return res.structuredContent;
}

const eq = (a, b, what) => {
  if (!isDeepStrictEqual(a, b)) throw new Wrong(`${what}: got ${JSON.stringify(a)?.slice(0, 200)}, expected ${JSON.stringify(b)?.slice(0, 200)}`);
};

/** The ledger of what clients were told. */
export class Ledger {
  constructor() {
    this.skills = new Map(); // "client/name" -> {acked, after: Set}
    this.files = new Map();  // "client/path" -> {acked, after: Set}
    this.tokens = [];        // {client, token, value}
    this.execIds = new Map(); // client -> [ids]
  }

  _slot(map, key) {
    if (!map.has(key)) map.set(key, { acked: undefined, after: new Set() });
    return map.get(key);
  }

  attempt(map, key, value) { this._slot(map, key).after.add(value); }

  ack(map, key, value) {
    const s = this._slot(map, key);
    s.acked = value;
    s.after = new Set();
  }

  execId(client, res) {
    const id = res?._meta?.["dev.moonbox/execution_id"];
    if (!id) return;
    if (!this.execIds.has(client.name)) this.execIds.set(client.name, []);
    this.execIds.get(client.name).push(id);
  }
}

const memoryTurns = new Map();
async function memoryTurn(server, fn) {
  const prev = memoryTurns.get(server) ?? Promise.resolve();
  const p = prev.then(fn, fn);
  memoryTurns.set(server, p.catch(() => {}));
  return p;
}

const SKILL_NAMES = 4, FILES = 4;

/**
 * The operations. Each takes (c, r, ledger, seq) and resolves when the answer was checked;
 * throws Wrong (a wrong answer) or Unexpected (an error it should not have had).
 */
export const OPS = {
  async trivial(c, r, L) {
    const a = int(r, -1e9, 1e9), b = int(r, -1e9, 1e9);
    const res = await c.tool("execute_code", { code: "return a + b", context_vars: { a, b } });
    L.execId(c, res);
    eq(execOk(res).result, a + b, "a + b");
  },
  async heavy(c, r, L) {
    const n = int(r, 100000, 300000);
    const res = await c.tool("execute_code", { code: `local s = 0 for i = 1, ${n} do s = (s + i * i) % 1000003 end
      local t = {} for i = 1, 2000 do t[i] = tostring(i % 97) end
      return { s = s, len = #table.concat(t, ",") }` });
    L.execId(c, res);
    let s = 0;
    for (let i = 1; i <= n; i++) s = (s + i * i) % 1000003;
    let len = 0;
    for (let i = 1; i <= 2000; i++) len += String(i % 97).length;
    eq(execOk(res).result, { s, len: len + 1999 }, "heavy");
  },
  async sort(c, r, L) {
    const xs = Array.from({ length: 3000 }, () => int(r, -1e6, 1e6));
    const res = await c.tool("execute_code", { code: `table.sort(xs)
      local h = 0 for i = 1, #xs do h = (h * 31 + xs[i]) % 1000000007 end
      return { xs[1], xs[#xs], h }`, context_vars: { xs } });
    L.execId(c, res);
    const s = [...xs].sort((a, b) => a - b);
    let h = 0n;
    for (const x of s) h = (((h * 31n + BigInt(x)) % 1000000007n) + 1000000007n) % 1000000007n;
    // Lua's % is floored (non-negative for a positive modulus), as the BigInt fix-up above
    eq(execOk(res).result, [s[0], s[s.length - 1], Number(h)], "sort");
  },
  async fail(c, r, L) {
    const n = int(r, 1, 1e9);
    const res = await c.tool("execute_code", { code: `local function f(x) error("soak-fail-" .. x) end f(${n})` });
    L.execId(c, res);
    execFails(res, "runtime", `soak-fail-${n}`);
  },
  async syntax(c, r, L) {
    const res = await c.tool("execute_code", { code: "return 1 +" });
    L.execId(c, res);
    execFails(res, "syntax", "unexpected symbol");
  },
  async limit_instructions(c, r, L) {
    const res = await c.tool("execute_code", { code: "local x = 0 while true do x = x + 1 end", instruction_limit: 1000000 });
    L.execId(c, res);
    execFails(res, "instructions", "instruction_limit=1000000");
  },
  async limit_memory(c, r, L) {
    const res = await c.tool("execute_code", { code: `local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1000) .. i end`, memory_mb: 8 });
    L.execId(c, res);
    execFails(res, "memory", "memory_mb=8");
  },
  async limit_time(c, r, L) {
    const res = await c.tool("execute_code", { code: "local x = 0 while true do x = x + 1 end", timeout_ms: 250, instruction_limit: 1e10 });
    L.execId(c, res);
    execFails(res, "timeout", "timeout_ms=250");
  },
  async upstream_sum(c, r, L) {
    const a = int(r, 1, 1e6), b = int(r, 1, 1e6);
    const res = await c.tool("execute_code", { code: `return servers.everything.get_sum{a = ${a}, b = ${b}}` });
    L.execId(c, res);
    eq(execOk(res).result, `The sum of ${a} and ${b} is ${a + b}.`, "get-sum");
  },
  async upstream_memory(c, r, L, seq) {
    const name = `${c.name}-e${seq}`, obs = `o${int(r, 1, 1e9)}`;
    // server-memory reads and rewrites its whole file per call: two calls at once lose one's
    // change (its own race, not moonbox's), so the clients of one moonbox take turns with it, and
    // what is checked is what each call answers (a call that timed out while the server was
    // stopped may still run when it goes on, and undo a later one)
    const res = await memoryTurn(c.server, () => c.tool("execute_code", { code: `
      local made = servers.memory.create_entities{entities = {{name = ${JSON.stringify(name)}, entityType = "soak", observations = {${JSON.stringify(obs)}}}}}
      local e = made.entities and made.entities[1]
      servers.memory.delete_entities{entityNames = {${JSON.stringify(name)}}}
      return { n = #made.entities, name = e and e.name, obs = e and e.observations[1] }` }));
    L.execId(c, res);
    eq(execOk(res).result, { n: 1, name, obs }, "server-memory create_entities");
  },
  async skill_save(c, r, L, seq) {
    const name = `${c.owner}_s${int(r, 1, SKILL_NAMES)}`, v = seq * 1000 + int(r, 0, 999);
    const key = `${c.name}/${name}`;
    L.attempt(L.skills, key, v);
    const viaTool = r() < 0.5;
    const code = `return { v = ${v} }`;
    if (viaTool) {
      toolOk(await c.tool("save_skill", { name, code, description: `soak skill ${name}` }));
    } else {
      const res = await c.tool("execute_code", { code: `save_skill(${JSON.stringify(name)}, ${JSON.stringify(code)}, "soak skill") return true` });
      L.execId(c, res);
      eq(execOk(res).result, true, "save_skill");
    }
    L.ack(L.skills, key, v);
  },
  async skill_load(c, r, L) {
    const name = `${c.owner}_s${int(r, 1, SKILL_NAMES)}`, key = `${c.name}/${name}`;
    const slot = L.skills.get(key);
    if (!slot || slot.acked === undefined || slot.after.size) return OPS.trivial(c, r, L);
    const res = await c.tool("execute_code", { code: `return require("skills.${name}").v` });
    L.execId(c, res);
    eq(execOk(res).result, slot.acked, `skill ${name}`);
  },
  async ws_write(c, r, L, seq) {
    const p = `soak/${c.owner}-f${int(r, 1, FILES)}.txt`, key = `${c.name}/${p}`;
    const data = `${c.name} ${seq} ${"z".repeat(int(r, 0, 4000))} ${int(r, 0, 1e9)}`;
    L.attempt(L.files, key, data);
    if (r() < 0.5) {
      toolOk(await c.tool("write_workspace_file", { path: p, content: data }));
    } else {
      const res = await c.tool("execute_code", { code: `write_file(${JSON.stringify(p)}, data) return #data`, context_vars: { data } });
      L.execId(c, res);
      eq(execOk(res).result, Buffer.byteLength(data), "write_file");
    }
    L.ack(L.files, key, data);
  },
  async ws_read(c, r, L) {
    const p = `soak/${c.owner}-f${int(r, 1, FILES)}.txt`, key = `${c.name}/${p}`;
    const slot = L.files.get(key);
    if (!slot || slot.acked === undefined || slot.after.size) return OPS.trivial(c, r, L);
    const res = await c.tool("execute_code", { code: `return read_file(${JSON.stringify(p)})` });
    L.execId(c, res);
    eq(execOk(res).result, slot.acked, `file ${p}`);
  },
  async pii(c, r, L, seq) {
    const value = `soak.${c.name}.${seq}.${int(r, 1, 1e9)}@example.com`;
    const res = await c.tool("execute_code", { code: "local s = tokenize_pii(text) return s", context_vars: { text: `mail ${value} now` } });
    L.execId(c, res);
    const s = execOk(res).result;
    const m = /^mail (\[EMAIL_[0-9a-f]+\]) now$/.exec(s);
    if (!m) throw new Wrong(`tokenize_pii: ${JSON.stringify(s)}`);
    L.tokens.push({ client: c.name, token: m[1], value });
    const back = toolOk(await c.tool("restore_pii", { text: s }));
    eq(back.restored_text, `mail ${value} now`, "restore_pii");
  },
  async journal(c, r, L) {
    const ids = L.execIds.get(c.name) ?? [];
    if (!ids.length) return OPS.trivial(c, r, L);
    const id = ids[ids.length - 1 - int(r, 0, Math.min(20, ids.length - 1))];
    const row = toolOk(await c.tool("list_executions", { id }));
    eq(row.id, id, "list_executions id");
  },
  async modern_raw(c, r, L) {
    if (c.server !== "http") return OPS.trivial(c, r, L);
    const a = int(r, 1, 1e6);
    const body = { jsonrpc: "2.0", id: `m${a}`, method: "tools/call", params: { name: "execute_code", arguments: { code: `return a * 2`, context_vars: { a } },
      _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } };
    const res = await fetch(c.url, { method: "POST", signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS), headers: {
      "Content-Type": "application/json", Accept: "application/json, text/event-stream", Authorization: `Bearer ${c.token}`,
      "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "execute_code" }, body: JSON.stringify(body) });
    const text = await res.text();
    let msg;
    if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
      msg = text.split("\n").filter((l) => l.startsWith("data:") && l.length > 5).map((l) => JSON.parse(l.slice(5))).at(-1);
    } else {
      msg = text ? JSON.parse(text) : undefined;
    }
    if (!msg?.result) throw new Unexpected(`HTTP ${res.status}: ${text.slice(0, 300)}`);
    L.execId(c, msg.result);
    eq(execOk(msg.result).result, a * 2, "2026-07-28 execute_code");
  },
};

export const MIX = { trivial: 26, heavy: 8, sort: 5, fail: 6, syntax: 2, limit_instructions: 3, limit_memory: 3,
  limit_time: 2, upstream_sum: 7, upstream_memory: 4, skill_save: 4, skill_load: 5, ws_write: 4, ws_read: 5,
  pii: 4, journal: 2, modern_raw: 4 };

function pick(r, mix) {
  const total = Object.values(mix).reduce((a, b) => a + b, 0);
  let x = r() * total;
  for (const [k, w] of Object.entries(mix)) {
    if ((x -= w) < 0) return k;
  }
  return "trivial";
}

// ---- the load ---------------------------------------------------------------------------------

/**
 * Runs `loops` loops per client until stop(). Every answer is recorded in `events`
 * ({t, op, client, ms, outcome, text}) for the sampler; outcomes: ok, wrong, missing, error.
 */
export class Load {
  constructor(setup, { seed, loops = 2, thinkMs = [5, 40] }) {
    Object.assign(this, { setup, seed, loops, thinkMs });
    this.ledger = new Ledger();
    this.events = [];
    this.all = { ok: 0, wrong: 0, missing: 0, error: 0 };
    this.problems = []; // wrong and missing answers, errors (their texts)
    this.running = false;
    this.seq = 0;
    this.paused = new Set(); // client names whose loops wait (verification)
  }

  start() {
    this.running = true;
    this.done = Promise.all(this.setup.clients.flatMap((c, ci) =>
      Array.from({ length: this.loops }, (_, li) => {
        // each loop writes skills and files of its own (owner): two writes of one name in flight
        // at once would leave no order to check against
        const lc = Object.create(c);
        lc.owner = `${c.name}${li}`;
        return this._loop(lc, rng(this.seed * 1000 + ci * 10 + li));
      })));
  }

  async stop() {
    this.running = false;
    await this.done;
  }

  record(e) {
    this.events.push(e);
    this.all[e.outcome]++;
    if (e.outcome !== "ok") this.problems.push(e);
  }

  async _loop(c, r) {
    while (this.running) {
      const op = pick(r, MIX);
      const seq = ++this.seq;
      const t0 = performance.now();
      let outcome = "ok", text;
      try {
        await OPS[op](c, r, this.ledger, seq);
      } catch (e) {
        if (e instanceof Wrong) outcome = "wrong";
        else if (/timed out|timeout/i.test(e.message) && e.code === -32001) outcome = "missing";
        else if (e.name === "TimeoutError") outcome = "missing";
        else outcome = "error";
        text = e.message;
      }
      this.record({ t: Date.now(), op, client: c.name, ms: performance.now() - t0, outcome, text });
      await sleep(int(r, this.thinkMs[0], this.thinkMs[1]));
    }
  }
}

// ---- the sampler ------------------------------------------------------------------------------

const mib = (b) => (b == null ? "-" : (b / MiB).toFixed(1));

export class Sampler {
  constructor(setup, load, { intervalMs, jsonPath, log }) {
    Object.assign(this, { setup, load, intervalMs, jsonPath, log });
    this.samples = [];
    this.from = 0;
    this.t0 = Date.now();
    if (jsonPath) writeFileSync(jsonPath, "");
  }

  header() {
    this.log("   t_s | answers   ok wrong miss  err | p50_ms p99_ms triv50 | http_MiB wrk_MiB(n)  fd thr | stdio_MiB wrk_MiB(n)  fd thr | store_MiB");
  }

  /** One sample of the processes and of the answers since the previous one. */
  async sample() {
    const now = Date.now();
    const evs = this.load.events.slice(this.from);
    this.from = this.load.events.length;
    const lat = evs.filter((e) => e.outcome === "ok").map((e) => e.ms);
    const triv = evs.filter((e) => e.outcome === "ok" && e.op === "trivial").map((e) => e.ms);
    const byKind = {}, errors = {};
    for (const e of evs) {
      byKind[e.op] = (byKind[e.op] ?? 0) + 1;
      if (e.outcome !== "ok") errors[`${e.outcome}:${e.op}`] = (errors[`${e.outcome}:${e.op}`] ?? 0) + 1;
    }
    const map = childrenMap();
    const procs = {};
    for (const [name, pid] of this.setup.servers()) {
      const st = procStatus(pid);
      const ch = childrenOf(pid, map);
      const ws = ch.workers.map((w) => ({ pid: w, rss: procStatus(w)?.rss ?? 0 }));
      procs[name] = st ? { pid, rss: st.rss, threads: st.threads, fds: procFds(pid),
        workers: ws, workers_rss: ws.reduce((a, w) => a + w.rss, 0),
        upstreams: ch.upstreams.map((u) => ({ ...u, rss: procStatus(u.pid)?.rss ?? 0 })) } : null;
    }
    const s = {
      t_s: Math.round((now - this.t0) / 1000), at: new Date(now).toISOString(),
      answers: evs.length, ok: evs.filter((e) => e.outcome === "ok").length,
      wrong: evs.filter((e) => e.outcome === "wrong").length, missing: evs.filter((e) => e.outcome === "missing").length,
      error: evs.filter((e) => e.outcome === "error").length,
      p50_ms: quantile(lat, 0.5), p99_ms: quantile(lat, 0.99), trivial_p50_ms: quantile(triv, 0.5),
      by_kind: byKind, errors, procs, store_bytes: await this.setup.storeSize(), ...(this.extra?.() ?? {}),
    };
    this.samples.push(s);
    if (this.jsonPath) appendFileSync(this.jsonPath, JSON.stringify(s) + "\n");
    const f = (v, w) => String(v ?? "-").padStart(w);
    const ms = (v) => (v == null ? "-" : v.toFixed(0));
    const pr = (p) => (p ? `${f(mib(p.rss), 8)} ${f(`${mib(p.workers_rss)}(${p.workers.length})`, 10)} ${f(p.fds, 3)} ${f(p.threads, 3)}` : f("DEAD", 26));
    this.log(`${f(s.t_s, 6)} | ${f(s.answers, 7)} ${f(s.ok, 4)} ${f(s.wrong, 5)} ${f(s.missing, 4)} ${f(s.error, 4)} | ${f(ms(s.p50_ms), 6)} ${f(ms(s.p99_ms), 6)} ${f(ms(s.trivial_p50_ms), 6)} | ${pr(procs.http)} | ${f(pr(procs.stdio), 9 + 17)} | ${f(mib(s.store_bytes), 8)}`);
    return s;
  }

  start() {
    this.header();
    this.timer = setInterval(() => { this.sample().catch((e) => this.log(`sample failed: ${e.message}`)); }, this.intervalMs);
  }

  stop() { clearInterval(this.timer); }
}

// ---- the criteria -----------------------------------------------------------------------------

/** The soak's margins (docs/security.md "Soak and chaos" states them). */
export const MARGINS = {
  rssRatio: 1.25, rssFloor: 24 * MiB,            // a server's RSS: last third <= 1.25 x first third + 24 MiB
  workersRatio: 1.25, workersFloor: 48 * MiB,    // all its workers' RSS together, the same way
  fds: 16, threads: 8,                           // descriptors and threads: at most this many more
  latencyRatio: 3, latencyFloorMs: 50,           // p50 of the last window <= 3 x the first's + 50 ms
};

/**
 * Judges a soak run from its samples and events: returns {problems: [...], summary: {...}}.
 * Warm-up: the first warmS seconds are not compared. The growth check compares the median of
 * the first third of the later samples with the median of the last third; the latency check the
 * p50 of trivial executions in the first and last windows (windowS seconds each).
 */
export function judgeSoak(samples, events, { t0, durS, warmS, windowS }) {
  const problems = [], summary = {};
  const after = samples.filter((s) => s.t_s >= warmS);
  const third = Math.max(1, Math.floor(after.length / 3));
  const first = after.slice(0, third), last = after.slice(-third);
  for (const name of ["http", "stdio"]) {
    const val = (set, f) => median(set.map((s) => (s.procs[name] ? f(s.procs[name]) : NaN)).filter((x) => !Number.isNaN(x)));
    const dead = samples.filter((s) => !s.procs[name]).length;
    if (dead) problems.push(`${name} server: missing (dead) in ${dead} samples`);
    const rows = [
      ["rss", (p) => p.rss, (a) => a * MARGINS.rssRatio + MARGINS.rssFloor, mib],
      ["workers_rss", (p) => p.workers_rss, (a) => a * MARGINS.workersRatio + MARGINS.workersFloor, mib],
      ["fds", (p) => p.fds, (a) => a + MARGINS.fds, String],
      ["threads", (p) => p.threads, (a) => a + MARGINS.threads, String],
    ];
    for (const [k, f, bound, fmt] of rows) {
      const a = val(first, f), b = val(last, f);
      const peak = Math.max(...samples.map((s) => (s.procs[name] ? f(s.procs[name]) : 0)));
      // least-squares slope over the samples after warm-up, per hour (a trend, not a criterion)
      const pts = after.filter((s) => s.procs[name]).map((s) => [s.t_s / 3600, f(s.procs[name])]);
      let slope = null;
      if (pts.length >= 3) {
        const mx = pts.reduce((q, p) => q + p[0], 0) / pts.length, my = pts.reduce((q, p) => q + p[1], 0) / pts.length;
        const sxx = pts.reduce((q, p) => q + (p[0] - mx) ** 2, 0);
        slope = sxx ? pts.reduce((q, p) => q + (p[0] - mx) * (p[1] - my), 0) / sxx : 0;
      }
      summary[`${name}.${k}`] = { first: fmt(a), last: fmt(b), peak: fmt(peak), bound: fmt(bound(a)),
        per_hour: slope == null ? null : (k.includes("rss") ? `${(slope / MiB).toFixed(2)} MiB` : slope.toFixed(1)) };
      if (a != null && b != null && b > bound(a)) problems.push(`${name} ${k} grew: ${fmt(a)} after warm-up, ${fmt(b)} at the end (bound ${fmt(bound(a))})`);
    }
  }
  const end = t0 + durS * 1000;
  const inWin = (lo, hi) => events.filter((e) => e.outcome === "ok" && e.op === "trivial" && e.t >= lo && e.t < hi).map((e) => e.ms);
  const w1 = inWin(t0 + warmS * 1000, t0 + (warmS + windowS) * 1000), w2 = inWin(end - windowS * 1000, end + 1);
  const p1 = median(w1), p2 = median(w2);
  summary.latency = { first_p50_ms: p1?.toFixed(1), last_p50_ms: p2?.toFixed(1), first_n: w1.length, last_n: w2.length,
    bound_ms: p1 == null ? null : (p1 * MARGINS.latencyRatio + MARGINS.latencyFloorMs).toFixed(1) };
  if (p1 == null || p2 == null) problems.push(`latency: no trivial answers in a window (first ${w1.length}, last ${w2.length})`);
  else if (p2 > p1 * MARGINS.latencyRatio + MARGINS.latencyFloorMs) problems.push(`latency: p50 of the last ${windowS} s ${p2.toFixed(1)} ms > ${MARGINS.latencyRatio} x ${p1.toFixed(1)} + ${MARGINS.latencyFloorMs} ms (first ${windowS} s after warm-up)`);
  return { problems, summary };
}

/**
 * Checks every acknowledged write through the servers: skills (require), workspace files
 * (read_file), PII tokens (restore_pii), journal rows (list_executions {id}, the newest
 * `journalCheck` per client: the journal keeps journal_max_rows per tenant). Returns problems.
 */
export async function verifyLedger(setup, L, { journalCheck = 300 } = {}) {
  const problems = [];
  const byName = new Map(setup.clients.map((c) => [c.name, c]));
  const checked = { skills: 0, files: 0, tokens: 0, journal: 0, retried: 0 };
  // a store error right after a fault (a pooled PostgreSQL connection that broke fails its next
  // statement once) is retried; a wrong value never is
  const STORE_ERR = /PostgreSQL|store: |database is locked|cannot be written just now/;
  const tool = async (c, name, args) => {
    for (let i = 0; ; i++) {
      let res, err;
      try { res = await c.tool(name, args); } catch (e) { err = e; }
      const text = err ? err.message : res.isError ? errText(res) : res.structuredContent?.success === false ? String(res.structuredContent.error) : null;
      if (text === null || i >= 10 || !STORE_ERR.test(text)) {
        if (err) throw err;
        return res;
      }
      checked.retried++;
      await sleep(300);
    }
  };
  const run = async (c, code, vars) => {
    const res = await tool(c, "execute_code", { code, context_vars: vars });
    const sc = res.structuredContent;
    if (!sc?.success) throw new Error(sc?.error ?? errText(res));
    return sc.result;
  };
  for (const [kind, map, code] of [["skill", L.skills, (k) => `return require("skills.${k}").v`],
    ["file", L.files, (k) => `return read_file(${JSON.stringify(k)})`]]) {
    for (const [key, slot] of map) {
      if (slot.acked === undefined) continue;
      const [cn, ...rest] = key.split("/");
      const k = rest.join("/");
      let got;
      try {
        got = await run(byName.get(cn), code(k));
      } catch (e) {
        problems.push(`${kind} ${key}: acknowledged ${JSON.stringify(slot.acked).slice(0, 60)} but reading it failed: ${e.message.slice(0, 200)}`);
        continue;
      }
      if (got !== slot.acked && !slot.after.has(got)) problems.push(`${kind} ${key}: acknowledged ${JSON.stringify(slot.acked).slice(0, 60)}, found ${JSON.stringify(got).slice(0, 60)}`);
      checked[kind === "skill" ? "skills" : "files"]++;
    }
  }
  const tokensBy = new Map();
  for (const t of L.tokens) {
    if (!tokensBy.has(t.client)) tokensBy.set(t.client, []);
    tokensBy.get(t.client).push(t);
  }
  for (const [cn, list] of tokensBy) {
    for (let i = 0; i < list.length; i += 40) {
      const part = list.slice(i, i + 40);
      const res = await tool(byName.get(cn), "restore_pii", { text: part.map((t) => t.token).join(" ") });
      if (res.isError) { problems.push(`restore_pii for ${cn}: ${errText(res).slice(0, 200)}`); continue; }
      const want = part.map((t) => t.value).join(" ");
      if (res.structuredContent.restored_text !== want) {
        const got = res.structuredContent.restored_text.split(" ");
        part.forEach((t, j) => { if (got[j] !== t.value) problems.push(`vault ${cn}: token ${t.token} acknowledged for ${t.value} restores as ${got[j]}`); });
      }
      checked.tokens += part.length;
    }
  }
  await Promise.all([...L.execIds].map(async ([cn, ids]) => { // the clients at once
    for (const id of ids.slice(-journalCheck)) {
      const res = await tool(byName.get(cn), "list_executions", { id });
      if (res.isError) problems.push(`journal ${cn}: execution ${id} was answered but has no row: ${errText(res).slice(0, 160)}`);
      checked.journal++;
    }
  }));
  return { problems, checked };
}

export const fmtMiB = mib;
export { procStatus, procFds, childrenMap, existsSync, readlinkSync, openSync, writeSync, closeSync, unlinkSync, ElicitRequestSchema };
