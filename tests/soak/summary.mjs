// Summarises the JSON lines of a soak or chaos run (build/soak.jsonl) into rows of `every`
// samples: answers, errors, p50/p99 of the answers, trivial p50, each server's RSS, its workers'
// RSS, descriptors and threads, the store's size. For docs/security.md "Soak and chaos".
//
// Usage (from tests/): node soak/summary.mjs ../build/soak.jsonl [every=5]

import { readFileSync } from "node:fs";

const [file, everyArg] = process.argv.slice(2);
const every = Number(everyArg || 5);
const samples = readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const mib = (b) => (b / 1048576).toFixed(1);
const med = (xs) => { const s = xs.filter((x) => x != null).sort((a, b) => a - b); return s.length ? s[Math.floor(s.length / 2)] : null; };
const max = (xs) => Math.max(...xs.filter((x) => x != null));
console.log("| minutes | answers | wrong/missing/error | p50 ms | p99 ms (max) | trivial p50 ms | HTTP server RSS MiB | its workers MiB | fds | threads | stdio server RSS MiB | its workers MiB | fds | threads | store MiB |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
for (let i = 0; i < samples.length; i += every) {
  const g = samples.slice(i, i + every);
  const sum = (k) => g.reduce((a, s) => a + (s[k] ?? 0), 0);
  const p = (n, f) => { const v = g.map((s) => (s.procs[n] ? f(s.procs[n]) : null)); return v.some((x) => x == null) ? "DEAD" : v.at(-1); };
  const row = [
    `${Math.round(g[0].t_s / 60 - (samples[1] ? (samples[1].t_s - samples[0].t_s) / 60 : 0))}-${Math.round(g.at(-1).t_s / 60)}`,
    sum("answers"), `${sum("wrong")}/${sum("missing")}/${sum("error")}`,
    med(g.map((s) => s.p50_ms))?.toFixed(0), max(g.map((s) => s.p99_ms))?.toFixed(0), med(g.map((s) => s.trivial_p50_ms))?.toFixed(0),
    mib(p("http", (x) => x.rss)), mib(p("http", (x) => x.workers_rss)), p("http", (x) => x.fds), p("http", (x) => x.threads),
    mib(p("stdio", (x) => x.rss)), mib(p("stdio", (x) => x.workers_rss)), p("stdio", (x) => x.fds), p("stdio", (x) => x.threads),
    g.at(-1).store_bytes == null ? "-" : mib(g.at(-1).store_bytes),
  ];
  console.log(`| ${row.join(" | ")} |`);
}
