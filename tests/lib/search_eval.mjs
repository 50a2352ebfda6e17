// Search quality over a query set (tests/bench/search_queries.json): the real moonbox binary with
// the fixture catalog and three real upstream MCP servers (server-everything, server-filesystem as
// "fs", server-memory), asked every query through search_tools with the official SDK client.
// Used by tests/bench/search_eval.mjs (prints figures) and tests/integration/search_quality.test.mjs
// (a regression floor).
//
// A query's rank is the position (1-based) of the first of its expected entries in the answer
// (limit 10), or 0 when none is there. recall@k = share of queries with 0 < rank <= k;
// MRR = mean of 1/rank (0 counts as 0).

import { cpSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { TESTS_DIR, UPSTREAM_JS, connectWithConfig, nodeServer, waitUpstream } from "./moonbox.mjs";

export const QUERY_FILE = path.join(TESTS_DIR, "bench/search_queries.json");

/** The query set: [{query, expect: ["category/name", ...], part: "dev"|"heldout"}]. */
export function loadQueries(file = QUERY_FILE) {
  return JSON.parse(readFileSync(file, "utf8")).queries;
}

/** Starts moonbox (the binary of tests/lib/moonbox.mjs: $MOONBOX) with the fixture catalog and
 * the three upstreams, and waits until their tools are in the catalog. Returns {client, close}. */
export async function startSearchServer() {
  const catalogDir = mkdtempSync(path.join(tmpdir(), "moonbox-search-cat-"));
  cpSync(path.join(TESTS_DIR, "integration/fixtures/catalog"), catalogDir, { recursive: true });
  const fsDir = realpathSync(mkdtempSync(path.join(tmpdir(), "moonbox-search-fs-")));
  const memDir = mkdtempSync(path.join(tmpdir(), "moonbox-search-mem-"));
  const cleanup = () => {
    for (const d of [catalogDir, fsDir, memDir]) rmSync(d, { recursive: true, force: true });
  };
  let s;
  try {
    s = await connectWithConfig({
      mcpServers: {
        everything: nodeServer(UPSTREAM_JS.everything, ["stdio"]),
        fs: nodeServer(UPSTREAM_JS.filesystem, [fsDir]),
        memory: nodeServer(UPSTREAM_JS.memory, [], { env: { MEMORY_FILE_PATH: path.join(memDir, "memory.jsonl") } }),
      },
    }, { args: ["--catalog-dir", catalogDir] });
    for (const name of ["fs", "memory"]) await waitUpstream(s.client, name);
    // server-everything adds one tool after initialize: wait for all 15
    await waitUpstream(s.client, "everything", (u) => u?.state === "ready" && u.tools === 15);
  } catch (e) {
    await s?.close();
    cleanup();
    throw e;
  }
  return {
    client: s.client,
    async close() {
      await s.close();
      cleanup();
    },
  };
}

/** Runs every query; returns [{query, expect, part, rank, got: ["category/name", ...]}]. */
export async function runQueries(client, queries, limit = 10) {
  const out = [];
  for (const q of queries) {
    const res = await client.callTool({ name: "search_tools",
      arguments: { query: q.query, detail_level: "name", limit } });
    if (res.isError) throw new Error(`search_tools ${JSON.stringify(q.query)}: ${res.content[0].text}`);
    const got = res.structuredContent.tools.map((t) => `${t.category}/${t.name}`);
    const i = got.findIndex((g) => q.expect.includes(g));
    out.push({ ...q, rank: i + 1, got });
  }
  return out;
}

/** {n, r1, r3, r10, mrr} of results (shares from 0 to 1). */
export function metrics(results) {
  const n = results.length;
  const at = (k) => results.filter((r) => r.rank > 0 && r.rank <= k).length / n;
  const mrr = results.reduce((s, r) => s + (r.rank > 0 ? 1 / r.rank : 0), 0) / n;
  return { n, r1: at(1), r3: at(3), r10: at(10), mrr };
}
