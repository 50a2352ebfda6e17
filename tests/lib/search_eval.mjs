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

import { setTimeout as sleep } from "node:timers/promises";

import { TESTS_DIR, UPSTREAM_JS, connectWithConfig, nodeServer } from "./moonbox.mjs";

export const QUERY_FILE = path.join(TESTS_DIR, "bench/search_queries.json");

/** The query set: [{query, expect: ["category/name", ...], part: "dev"|"heldout"}]. */
export function loadQueries(file = QUERY_FILE) {
  return JSON.parse(readFileSync(file, "utf8")).queries;
}

/** Starts moonbox (the binary of tests/lib/moonbox.mjs: $MOONBOX) with the fixture catalog and
 * the three upstreams, and waits until their tools are in the catalog. Returns {client, stderr(),
 * close}.
 * args: more command-line arguments (--store-url for the catalog on PostgreSQL). */
export async function startSearchServer({ args = [] } = {}) {
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
    }, { args: ["--catalog-dir", catalogDir, ...args] });
    // the upstreams' tools in the catalog (list_tool_categories; not get_execution_stats, whose
    // execution history is not on PostgreSQL yet); server-everything adds one tool after
    // initialize: wait for all 15
    const t0 = Date.now();
    for (;;) {
      const res = await s.client.callTool({ name: "list_tool_categories", arguments: {} });
      const n = Object.fromEntries((res.structuredContent?.categories ?? []).map((c) => [c.name, c.tools]));
      if (n.fs > 0 && n.memory > 0 && n.everything === 15) break;
      if (Date.now() - t0 > 15000) throw new Error(`upstream tools not in the catalog within 15 s: ${JSON.stringify(n)}`);
      await sleep(50);
    }
  } catch (e) {
    await s?.close();
    cleanup();
    throw e;
  }
  return {
    client: s.client,
    stderr: () => s.stderr?.() ?? "",
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
