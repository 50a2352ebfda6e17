// Search quality (issue 18): the paraphrased query set of tests/bench/search_queries.json (177
// task descriptions written as a new user would ask, each with the entries that answer it) run
// through the real server's search_tools, with the fixture catalog, the sandbox API and three
// real upstream servers (tests/lib/search_eval.mjs). Fails when recall@3 or MRR drops below a
// floor, on both stores.
//
// How the floors were chosen: on the commit that added the vocabulary (lua/catalog/vocabulary.lua)
// the set measured recall@3 92.7% and MRR 0.862 over all 177 queries (dev 94.1% / 0.874, held-out
// 89.8% / 0.838); before it, 79.1% and 0.710 (docs/benchmarks.md). The floors sit about 5 points
// below the measured figures: an edit that moves a query or two (a new fixture tool, a reworded
// sandbox description, a vocabulary change) passes, one that loses query expansion or name ranking
// (back toward 79% / 0.71) fails. Search is deterministic (same catalog and query, same bytes), so
// the figures do not vary from run to run; no timing is measured here. When a deliberate change
// moves the figures, run tests/bench/search_eval.mjs --misses, update docs/benchmarks.md and, if
// it improved, raise the floors.
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/search_quality.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";

import { loadQueries, metrics, runQueries, startSearchServer } from "../lib/search_eval.mjs";
import { pgUnavailable, startPg } from "../lib/pg.mjs";

const T = { timeout: 60000 };
const FLOOR = { r3: 0.88, mrr: 0.80 };

// The same floors on both stores: FTS5 on SQLite, the tsvector index on PostgreSQL (--store-url,
// a throwaway cluster; docs/catalog.md, "On PostgreSQL"), where the set measured recall@3 92.1%
// and MRR 0.854 when it was added. The PostgreSQL run is skipped, saying why, only when
// PostgreSQL is not installed.
for (const engine of ["sqlite", "postgres"]) {
  const skip = engine === "postgres" ? pgUnavailable() ?? false : false;
  describe(`search quality over the paraphrased query set (${engine})`, { skip }, () => {
    let server;
    let pg;
    let results;

    before(async () => {
      let args = [];
      if (engine === "postgres") {
        pg = await startPg();
        args = ["--store-url", pg.createDbSync("search_quality")];
      }
      server = await startSearchServer({ args });
      results = await runQueries(server.client, loadQueries());
    });
    after(async () => {
      await server?.close();
      await pg?.stop();
    });

    it("has at least 150 queries, each with expected entries that exist in the catalog", T, async () => {
      assert.ok(results.length >= 150, `${results.length} queries`);
      const all = await server.client.callTool({ name: "search_tools",
        arguments: { query: "", detail_level: "name", limit: 200 } });
      const names = new Set(all.structuredContent.tools.map((t) => `${t.category}/${t.name}`));
      const missing = results.flatMap((r) => r.expect.filter((e) => !names.has(e)).map((e) => `${r.query}: ${e}`));
      assert.deepEqual(missing, []);
      assert.ok(results.filter((r) => r.part === "heldout").length >= 50);
    });

    it(`recall@3 >= ${FLOOR.r3} and MRR >= ${FLOOR.mrr}`, T, () => {
      const m = metrics(results);
      const misses = results.filter((r) => r.rank === 0 || r.rank > 3)
        .map((r) => `${r.query} -> ${r.got.slice(0, 3).join(", ")} (want ${r.expect.join(" | ")})`);
      const parts = ["dev", "heldout"].map((p) => {
        const x = metrics(results.filter((r) => r.part === p));
        return `${p}: recall@3 ${x.r3.toFixed(3)}, MRR ${x.mrr.toFixed(3)}`;
      }).join("; ");
      const why = `recall@3 ${m.r3.toFixed(3)}, MRR ${m.mrr.toFixed(3)} (${parts}); not in the top 3:\n  ${misses.join("\n  ")}`;
      console.log(`${engine}: recall@1 ${m.r1.toFixed(3)}, recall@3 ${m.r3.toFixed(3)}, MRR ${m.mrr.toFixed(3)} (${parts})`);
      assert.ok(m.r3 >= FLOOR.r3, why);
      assert.ok(m.mrr >= FLOOR.mrr, why);
    });
  });
}
