// bench_catalog.mjs - figures for the tool catalog (issue 6), reported in docs/benchmarks.md.
//
// Usage: node tests/bench/bench_catalog.mjs [MOONBOX_BINARY]   (default build/moonbox)
// Knobs (environment): CATALOG_TOOLS=10000 CATALOG_PER_SERVER=50 CATALOG_QUERIES=2000
//   CATALOG_STORE=postgres: the store on a throwaway PostgreSQL cluster (tests/lib/pg.mjs,
//   --store-url; the tsvector index of docs/catalog.md "On PostgreSQL") instead of SQLite (FTS5)
//
// 1. Generates a catalog of CATALOG_TOOLS tools: CATALOG_PER_SERVER tools per server, one MCP-form
//    file per server, with names, descriptions and input schemas built from a domain vocabulary
//    (deterministic: a fixed seed), into a temporary --catalog-dir.
// 2. Import: a fresh data directory (everything indexed), the same again (nothing changed: files
//    compared with what is stored), and one file changed while the server runs (live re-import).
//    Times are the server's own (get_execution_stats.catalog: start_import_ms, last_import.ms).
// 3. Search: CATALOG_QUERIES queries written the way an agent asks for a tool it has in mind
//    (words of a real tool's name, sometimes with the vendor, filler words, a word no tool has,
//    or words of unrelated domains that no tool has together), sent one at a time over stdio.
//    Reports the client round trip and the time inside the server (catalog.search_ms of
//    get_execution_stats: the search_tools handler, last 1000 calls) per detail level, and
//    pipelined throughput.
// 4. Sizes: every definition as tools/list would send them up front, against a typical
//    search_tools answer (summary, limit 10) and a get_tool_definition answer; tokens ~ bytes / 4.
// Prints key=value lines (for scripts) and a Markdown table. Figures, not a pass/fail test.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const MOONBOX = path.resolve(process.argv[2] ?? path.join(ROOT, "build/moonbox"));
const NTOOLS = Number(process.env.CATALOG_TOOLS ?? 10000);
const PER = Number(process.env.CATALOG_PER_SERVER ?? 50);
const NQUERIES = Number(process.env.CATALOG_QUERIES ?? 2000);
const STORE = process.env.CATALOG_STORE ?? "sqlite";

// ---- a deterministic generator ---------------------------------------------------------------
let seed = 12345;
function rnd() { // xorshift32
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rnd() * a.length)];

const DOMAINS = {
  crm: "account contact lead opportunity deal pipeline stage campaign territory quote",
  billing: "invoice payment refund subscription plan coupon charge customer payout dispute",
  devops: "deployment build pipeline job artifact release environment cluster node container",
  code: "repository branch commit pull_request issue review tag fork workflow gist",
  chat: "channel message thread reaction user group emoji bookmark reminder huddle",
  docs: "document page folder comment revision template space attachment block database",
  support: "ticket macro agent queue satisfaction sla escalation article conversation tag",
  hr: "employee department position candidate interview offer timesheet leave payroll review",
  calendar: "event calendar attendee room availability reminder invitation schedule slot",
  storage: "bucket object file folder share permission version upload download quota",
  analytics: "report dashboard metric chart query dataset segment funnel cohort alert",
  commerce: "order product inventory cart shipment warehouse return catalog price discount",
  security: "secret key certificate policy role audit alert incident finding vulnerability",
  email: "message draft label thread attachment contact filter signature mailbox alias",
  data: "table row column schema index view query migration backup snapshot",
  marketing: "campaign audience email list segment template newsletter landing_page form ad",
};
const VERBS = "get list create update delete search find archive restore export import sync assign " +
  "close reopen approve reject publish schedule cancel duplicate move merge tag share";
const ADJ = "recent archived shared public private pending active open closed draft starred overdue";
const PARAM_POOL = ["id", "name", "query", "limit", "cursor", "owner", "project_id", "status",
  "title", "body", "email", "start", "end", "page", "sort", "filter", "fields", "workspace_id",
  "include_deleted", "tags"];
const VENDORS = "acme globex initech umbrella hooli stark wayne wonka cyberdyne soylent tyrell " +
  "aperture oscorp vandelay pied_piper gringotts monarch dunder duff krusty";

function generate() {
  const servers = [];
  const vendors = VENDORS.split(" ");
  const domainNames = Object.keys(DOMAINS);
  for (let s = 0; servers.length * PER < NTOOLS; s++) {
    const domain = domainNames[s % domainNames.length];
    const name = `${vendors[s % vendors.length]}_${domain}${s >= vendors.length ? Math.floor(s / vendors.length) : ""}`;
    const nouns = DOMAINS[domain].split(" ");
    const tools = [];
    const seen = new Set();
    while (tools.length < PER && tools.length + servers.length * PER < NTOOLS) {
      const v = pick(VERBS.split(" "));
      const o = pick(nouns);
      let tn = `${v}_${o}${rnd() < 0.5 ? "s" : ""}`;
      if (rnd() < 0.25) tn += `_${pick(ADJ.split(" "))}`;
      if (rnd() < 0.1) tn = tn.replace(/_([a-z])/g, (_, c) => c.toUpperCase()); // camelCase
      if (seen.has(tn)) continue;
      seen.add(tn);
      const obj = o.replace(/_/g, " ");
      const other = pick(nouns).replace(/_/g, " ");
      const props = {};
      const n = 1 + Math.floor(rnd() * 5);
      for (let j = 0; j < n; j++) {
        const p = pick(PARAM_POOL);
        props[p] = { type: pick(["string", "string", "integer", "boolean", "array"]),
          description: `The ${p.replace(/_/g, " ")} of the ${obj}` };
        if (props[p].type === "array") props[p].items = { type: "string" };
      }
      tools.push({
        name: tn,
        title: `${v[0].toUpperCase()}${v.slice(1)} ${obj}`,
        description: `${v[0].toUpperCase()}${v.slice(1)} ${pick(ADJ.split(" "))} ${obj}s in ${name.replace(/_/g, " ")}. ` +
          `Returns the ${obj} with its ${other}; paginated with cursor and limit.`,
        inputSchema: { type: "object", properties: props, required: Object.keys(props).slice(0, 1) },
        annotations: { readOnlyHint: ["get", "list", "search", "find", "export"].includes(v) },
      });
    }
    servers.push({ server: name, description: `${name.replace(/_/g, " ")}: ${domain} API`, tools });
  }
  return servers;
}

// A query the way an agent asks for a tool it has in mind.
function makeQuery(servers) {
  const sv = pick(servers);
  const t = pick(sv.tools);
  const words = t.name.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase().split("_");
  const r = rnd();
  if (r < 0.35) return words.join(" "); // "create invoice archived"
  if (r < 0.55) return `${words[0]} ${words[1]} ${sv.server.split("_")[0]}`; // with the vendor
  if (r < 0.75) return `how do I ${words[0]} the ${words[1]}`; // filler words
  if (r < 0.9) return t.name; // the exact name
  if (r < 0.95) return `${words[0]} ${pick(["quickly", "spreadsheet", "kanban", "gizmo"])} ${words[1]}`; // a word nobody has
  // words of two unrelated domains: no tool has them all, so tools with any of them
  const other = pick(servers).tools;
  return `${words[1]} ${pick(other).name.split("_")[1] ?? "report"} ${pick(["payroll", "shipment", "huddle", "cohort"])}`;
}

// ---- talking to moonbox over stdio -----------------------------------------------------------
class Peer {
  constructor(args) {
    this.child = spawn(MOONBOX, args, { stdio: ["pipe", "pipe", "pipe"] });
    this.buf = "";
    this.waiting = new Map();
    this.stderr = "";
    this.child.stdout.on("data", (d) => {
      this.buf += d.toString("utf8");
      let i;
      while ((i = this.buf.indexOf("\n")) >= 0) {
        const line = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 1);
        const msg = JSON.parse(line);
        const w = this.waiting.get(msg.id);
        if (w) {
          this.waiting.delete(msg.id);
          w({ msg, bytes: Buffer.byteLength(line), at: process.hrtime.bigint() });
        }
      }
    });
    this.child.stderr.on("data", (d) => { if (this.stderr.length < 1 << 20) this.stderr += d; });
    this.nextId = 1;
  }
  send(method, params) {
    const id = this.nextId++;
    const p = new Promise((res) => this.waiting.set(id, res));
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    return p;
  }
  async call(name, args) {
    const r = await this.send("tools/call", { name, arguments: args });
    if (r.msg.error) throw new Error(JSON.stringify(r.msg.error));
    return r;
  }
  async init() {
    await this.send("initialize", { protocolVersion: "2025-11-25", capabilities: {},
      clientInfo: { name: "bench-catalog", version: "0" } });
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
  }
  // get_execution_stats' catalog section; when it does not answer within 5 s (on PostgreSQL it
  // waits for the execution history, whose writer is not there yet), what the log says: the
  // start-up import's and the last live import's times, no search_ms.
  async stats() {
    const r = await Promise.race([this.call("get_execution_stats", {}),
      new Promise((res) => setTimeout(res, 5000, null))]);
    if (r) return r.msg.result.structuredContent.catalog;
    const start = [...this.stderr.matchAll(/catalog: (\d+) entries in .*\(([\d.]+) ms\)/g)].pop();
    const last = [...this.stderr.matchAll(/catalog: imported .*\/([^/]+): (\d+) entries.* in ([\d.]+) ms/g)].pop();
    return { tools: start && Number(start[1]), start_import_ms: start && Number(start[2]),
      last_import: last && { source: `file:${last[1]}`, tools: Number(last[2]), ms: Number(last[3]) },
      search_ms: {} };
  }
  close() {
    this.child.stdin.end();
    const killer = setTimeout(() => this.child.kill("SIGKILL"), 5000);
    return new Promise((res) => this.child.on("exit", () => { clearTimeout(killer); res(); }));
  }
}

// Share of all CPUs that other processes used over one second (this script is idle then).
async function busyPct() {
  const read = () => {
    try {
      const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
      return { total: f.reduce((a, b) => a + b, 0), idle: f[3] + f[4] };
    } catch {
      return undefined;
    }
  };
  const a = read();
  await new Promise((r) => setTimeout(r, 1000));
  const b = read();
  if (!a || !b || b.total <= a.total) return undefined;
  return Math.round(100 * (1 - (b.idle - a.idle) / (b.total - a.total)));
}

const pct = (sorted, p) => sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)];
const ms = (ns) => Number(ns) / 1e6;
const fmt = (x, d = 2) => (x === undefined ? "-" : x.toFixed(d));

async function main() {
  const busyBefore = await busyPct();
  const work = mkdtempSync(path.join(tmpdir(), "moonbox-bench-catalog-"));
  const catalogDir = path.join(work, "catalog");
  const dataDir = path.join(work, "data");
  mkdirSync(catalogDir);
  mkdirSync(dataDir);
  const servers = generate();
  let fileBytes = 0;
  for (const s of servers) {
    const text = JSON.stringify(s, null, 1);
    fileBytes += text.length;
    writeFileSync(path.join(catalogDir, `${s.server}.json`), text);
  }
  const ntools = servers.reduce((n, s) => n + s.tools.length, 0);
  // what a client loads when every tool is listed up front (tools/list, all pages)
  const fullListBytes = Buffer.byteLength(JSON.stringify({ tools: servers.flatMap((s) =>
    s.tools.map((t) => ({ ...t, name: `${s.server}__${t.name}` }))) }));
  const args = ["--data-dir", dataDir, "--catalog-dir", catalogDir];
  let pg;
  if (STORE === "postgres") {
    const { startPg } = await import("../lib/pg.mjs");
    pg = await startPg();
    args.push("--store-url", pg.createDbSync("bench_catalog"));
  }
  try {
    await run(args, servers, catalogDir, fileBytes, ntools, fullListBytes, busyBefore, work);
  } finally {
    await pg?.stop();
  }
}

async function run(args, servers, catalogDir, fileBytes, ntools, fullListBytes, busyBefore, work) {
  const out = {};

  // ---- import --------------------------------------------------------------------------------
  let peer = new Peer(args);
  await peer.init();
  const t0 = process.hrtime.bigint();
  await peer.call("list_tool_categories", {});
  out.first_call_ms = ms(process.hrtime.bigint() - t0);
  let st = await peer.stats();
  out.tools = st.tools;
  out.import_fresh_ms = st.start_import_ms;
  await peer.close();

  peer = new Peer(args);
  await peer.init();
  await peer.call("list_tool_categories", {});
  st = await peer.stats();
  out.import_unchanged_ms = st.start_import_ms;

  // one file changed while running: the watcher re-imports it
  const changed = servers[0];
  changed.tools[0].description += " Changed.";
  writeFileSync(path.join(catalogDir, `${changed.server}.json`), JSON.stringify(changed, null, 1));
  const tw = Date.now();
  for (;;) {
    st = await peer.stats();
    if (st.last_import && st.last_import.source === `file:${changed.server}.json`) break;
    if (Date.now() - tw > 5000) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  out.reimport_file_ms = st.last_import?.ms;
  out.reimport_file_tools = st.last_import?.tools;
  out.reimport_seen_ms = Date.now() - tw; // includes the 100 ms debounce

  // ---- search --------------------------------------------------------------------------------
  const queries = Array.from({ length: NQUERIES }, () => makeQuery(servers));
  let hits = 0;
  const levels = {};
  for (const level of ["summary", "name", "full"]) {
    const rt = [];
    const sizes = [];
    let anyMatch = 0;
    const qs = level === "summary" ? queries : queries.slice(0, 1000);
    for (const q of qs) {
      const a = process.hrtime.bigint();
      const r = await peer.call("search_tools", { query: q, detail_level: level });
      rt.push(ms(r.at - a));
      sizes.push(r.bytes);
      const sc = r.msg.result.structuredContent;
      if (sc.match !== "all") anyMatch++;
      if (level === "summary" && sc.tools.length > 0) hits++;
    }
    st = await peer.stats(); // search_ms covers the last 1000 search_tools calls: this level's
    rt.sort((x, y) => x - y);
    sizes.sort((x, y) => x - y);
    levels[level] = { rt_p50: pct(rt, 0.5), rt_p95: pct(rt, 0.95), server_p50: st.search_ms.p50,
      server_p95: st.search_ms.p95, bytes_p50: pct(sizes, 0.5), any_share: anyMatch / qs.length };
  }
  out.queries = NQUERIES;
  out.queries_with_results = hits;

  // pipelined: all queries written at once
  const tp = process.hrtime.bigint();
  await Promise.all(queries.map((q) => peer.call("search_tools", { query: q })));
  out.pipelined_per_s = NQUERIES / (ms(process.hrtime.bigint() - tp) / 1000);

  // a typical definition answer
  const defSizes = [];
  for (let i = 0; i < 200; i++) {
    const s = pick(servers);
    const r = await peer.call("get_tool_definition", { tool_name: pick(s.tools).name, category: s.server });
    defSizes.push(r.bytes);
  }
  defSizes.sort((x, y) => x - y);
  out.definition_bytes_p50 = pct(defSizes, 0.5);
  await peer.close();
  rmSync(work, { recursive: true, force: true });
  const busyAfter = await busyPct();

  // ---- report --------------------------------------------------------------------------------
  const S = levels.summary;
  const kv = {
    catalog_store: STORE, catalog_tools: out.tools, catalog_servers: servers.length, catalog_file_bytes: fileBytes,
    catalog_import_fresh_ms: fmt(out.import_fresh_ms, 0), catalog_import_unchanged_ms: fmt(out.import_unchanged_ms, 1),
    catalog_reimport_file_ms: fmt(out.reimport_file_ms, 1), catalog_reimport_seen_ms: out.reimport_seen_ms,
    catalog_first_call_ms: fmt(out.first_call_ms, 0),
  };
  for (const [level, v] of Object.entries(levels)) {
    kv[`catalog_search_${level}_server_p50_ms`] = fmt(v.server_p50, 3);
    kv[`catalog_search_${level}_server_p95_ms`] = fmt(v.server_p95, 3);
    kv[`catalog_search_${level}_rt_p50_ms`] = fmt(v.rt_p50, 3);
    kv[`catalog_search_${level}_rt_p95_ms`] = fmt(v.rt_p95, 3);
    kv[`catalog_search_${level}_bytes_p50`] = v.bytes_p50;
    kv[`catalog_search_${level}_any_share`] = fmt(v.any_share, 2);
  }
  kv.catalog_search_pipelined_per_s = fmt(out.pipelined_per_s, 0);
  kv.catalog_queries_with_results = `${out.queries_with_results}/${NQUERIES}`;
  kv.catalog_full_list_bytes = fullListBytes;
  kv.catalog_definition_bytes_p50 = out.definition_bytes_p50;
  kv.catalog_busy_before_pct = busyBefore ?? "-";
  kv.catalog_busy_after_pct = busyAfter ?? "-";
  for (const [k, v] of Object.entries(kv)) console.log(`${k}=${v}`);

  const tok = (b) => Math.round(b / 4).toLocaleString("en-US");
  console.log(`
| catalog figure (${out.tools.toLocaleString("en-US")} tools, ${servers.length} servers, ${STORE}) | value |
|---|---:|
| import, fresh data directory (everything indexed) | ${fmt(out.import_fresh_ms, 0)} ms |
| import at start, nothing changed | ${fmt(out.import_unchanged_ms, 1)} ms |
| live re-import of one changed file (${out.reimport_file_tools} tools) | ${fmt(out.reimport_file_ms, 1)} ms (seen ${out.reimport_seen_ms} ms after the write, 100 ms debounce included) |
| search_tools p50 / p95 inside the server, summary | ${fmt(S.server_p50, 3)} / ${fmt(S.server_p95, 3)} ms |
| search_tools p50 / p95 inside the server, name | ${fmt(levels.name.server_p50, 3)} / ${fmt(levels.name.server_p95, 3)} ms |
| search_tools p50 / p95 inside the server, full | ${fmt(levels.full.server_p50, 3)} / ${fmt(levels.full.server_p95, 3)} ms |
| search_tools round trip p50 / p95 (stdio, one at a time), summary | ${fmt(S.rt_p50, 3)} / ${fmt(S.rt_p95, 3)} ms |
| search_tools pipelined | ${fmt(out.pipelined_per_s, 0)} /s |
| queries answered with entries that have every (known) word / fewer words | ${fmt(100 * (1 - S.any_share), 0)}% / ${fmt(100 * S.any_share, 0)}% |
| every definition up front (tools/list of all tools) | ${fullListBytes.toLocaleString("en-US")} bytes ~ ${tok(fullListBytes)} tokens |
| one search_tools answer, summary, limit 10 (median) | ${S.bytes_p50.toLocaleString("en-US")} bytes ~ ${tok(S.bytes_p50)} tokens |
| one search_tools answer, name, limit 10 (median) | ${levels.name.bytes_p50.toLocaleString("en-US")} bytes ~ ${tok(levels.name.bytes_p50)} tokens |
| one get_tool_definition answer (median) | ${out.definition_bytes_p50.toLocaleString("en-US")} bytes ~ ${tok(out.definition_bytes_p50)} tokens |
| a search plus one definition, against every definition up front | ${fmt(fullListBytes / (S.bytes_p50 + out.definition_bytes_p50), 0)}x fewer bytes |

Other load on the machine: ${busyBefore ?? "-"}% of all CPUs busy just before, ${busyAfter ?? "-"}% just after (1 s each).`);
}

main().catch((e) => {
  console.error(`bench_catalog: ${e.stack || e}`);
  process.exit(1);
});
