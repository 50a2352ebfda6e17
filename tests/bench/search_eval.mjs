// search_eval.mjs - search quality of search_tools over the paraphrased query set (issue 18).
//
// Usage: MOONBOX=build/moonbox node tests/bench/search_eval.mjs [--part dev|heldout] [--misses]
// Starts the real server with the fixture catalog and the real upstream servers
// (tests/lib/search_eval.mjs), sends every query of tests/bench/search_queries.json through
// search_tools, and prints recall@1, recall@3, recall@10 and MRR per part of the set and overall
// (key=value lines, then a Markdown table). --misses lists the queries whose expected entry is not
// in the top 3, with what came instead. Figures, not a pass/fail test (the floor is in
// tests/integration/search_quality.test.mjs).

import { loadQueries, metrics, runQueries, startSearchServer } from "../lib/search_eval.mjs";

const argv = process.argv.slice(2);
const partArg = argv.includes("--part") ? argv[argv.indexOf("--part") + 1] : undefined;
const showMisses = argv.includes("--misses");

let queries = loadQueries();
if (partArg) queries = queries.filter((q) => q.part === partArg);
const server = await startSearchServer();
let results;
try {
  results = await runQueries(server.client, queries);
} finally {
  await server.close();
}

const pct = (x) => (100 * x).toFixed(1);
const rows = [];
for (const part of [...new Set(results.map((r) => r.part)), "all"]) {
  const rs = part === "all" ? results : results.filter((r) => r.part === part);
  const m = metrics(rs);
  rows.push([part, m]);
  console.log(`search_${part}_n=${m.n} search_${part}_recall1=${pct(m.r1)} search_${part}_recall3=${pct(m.r3)} ` +
    `search_${part}_recall10=${pct(m.r10)} search_${part}_mrr=${m.mrr.toFixed(3)}`);
}
console.log("\n| part | queries | recall@1 | recall@3 | recall@10 | MRR |\n|---|---:|---:|---:|---:|---:|");
for (const [part, m] of rows) {
  console.log(`| ${part} | ${m.n} | ${pct(m.r1)}% | ${pct(m.r3)}% | ${pct(m.r10)}% | ${m.mrr.toFixed(3)} |`);
}
if (showMisses) {
  console.log("\nmisses (expected entry not in the top 3):");
  for (const r of results.filter((x) => x.rank === 0 || x.rank > 3)) {
    console.log(`  [${r.part}] ${JSON.stringify(r.query)} -> want ${r.expect.join(" | ")}; rank ${r.rank || "-"}; ` +
      `got ${r.got.slice(0, 3).join(", ") || "(nothing)"}`);
  }
}
