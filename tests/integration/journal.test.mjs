// The execution journal end to end through the official SDK client over stdio: list_executions
// lists, searches and fetches what execute_code ran (found at once, though the writer commits
// once a second; each answer's _meta names its id), execute_code's rerun_id runs a kept execution again with new context_vars and
// limits, the bounds (journal_max_code_bytes, journal_head_bytes) and their errors, hostile
// search text, the upstream tools an execution called (server-everything, a real upstream), PII
// kept only as the tokens the model saw (checked in the SQLite file itself), an id given out while
// another process holds the store's lock (named by list_executions, then found), and migration 5 on
// a data directory written before the journal existed.
// Run: cd tests && MOONBOX=../build/moonbox node run-node.mjs integration/journal.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";

import {
  UPSTREAM_JS, SQLITE_ONLY, connectClient, pgDbOf, testPg, connectWithConfig, execute, nodeServer, sqlite3Cli, toolErrText as errText,
  toolOk as ok, until, useServer, waitUpstream, withDataDir,
  spawnRaw,
} from "../lib/moonbox.mjs";
import { fillJournal } from "../lib/journal_rows.mjs";
import { spawn } from "node:child_process";

const T = { timeout: 60000 };
const ID_RE = /^[0-9a-f]{16}$/;

const list = async (client, args = {}) =>
  client.callTool({ name: "list_executions", arguments: args });
const listed = async (client, args) => ok(await list(client, args)).executions;
const run = async (client, args) => ok(await execute(client, args));

describe("list_executions and rerun_id (stdio, SDK client)", () => {
  it("lists what just ran, newest first, fetches one in full and reruns it with new context_vars", T, async () => {
    await useServer(await connectClient(), async ({ client }) => {
      const tools = (await client.listTools()).tools.map((t) => t.name);
      assert.ok(tools.includes("list_executions"));
      assert.equal((await run(client, { code: "return 1 + 1" })).result, 2);
      await run(client, { code: "print('hello ' .. (who or 'nobody'))\nreturn {n = n or 0, who = who}",
                          context_vars: { n: 7, who: "ann" } });
      const failed = await execute(client, { code: "error('boom')" });
      assert.equal(failed.isError, true);

      // answered a moment ago: found without waiting for the writer's second
      const all = await listed(client);
      assert.equal(all.length, 3);
      assert.deepEqual(all.map((e) => e.outcome), ["runtime", "ok", "ok"]);
      for (const e of all) {
        assert.match(e.id, ID_RE);
        assert.match(e.started_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
        assert.equal(typeof e.ms, "number");
      }
      assert.equal(all[1].code, "print('hello ' .. (who or 'nobody')) return {n = n or 0, who = who}");
      assert.equal(new Set(all.map((e) => e.id)).size, 3);

      const one = ok(await list(client, { id: all[1].id }));
      assert.equal(one.code, "print('hello ' .. (who or 'nobody'))\nreturn {n = n or 0, who = who}");
      assert.equal(one.code_kept, true);
      assert.deepEqual(one.result, { n: 7, who: "ann" });
      assert.equal(one.output, "hello ann\n");
      assert.equal(one.context_vars_bytes, JSON.stringify({ n: 7, who: "ann" }).length);
      assert.equal(one.outcome, "ok");
      assert.match(one.code_hash, /^[0-9a-f]{32}$/);
      const err = ok(await list(client, { id: all[0].id }));
      assert.match(err.error, /boom/);
      assert.equal(err.outcome, "runtime");

      // filters
      assert.deepEqual((await listed(client, { outcome: "failed" })).map((e) => e.id), [all[0].id]);
      assert.deepEqual((await listed(client, { query: "HELLO" })).map((e) => e.id), [all[1].id]);
      assert.deepEqual(await listed(client, { since: Date.now() + 3600000 }), []);
      assert.equal((await listed(client, { since: new Date(Date.now() - 3600000).toISOString().slice(0, 19) + "Z" })).length, 3);
      const page = ok(await list(client, { limit: 1 }));
      assert.deepEqual([page.executions.length, page.more], [1, true]);

      // each answer names its execution in _meta: the id the journal lists, for rerun_id
      const answered = await execute(client, { code: "return 'named'" });
      const named = answered._meta?.["dev.moonbox/execution_id"];
      assert.match(named, ID_RE, JSON.stringify(answered._meta));
      assert.equal(answered._meta["dev.moonbox/context"].bytes_out > 0, true); // beside the counts
      assert.equal((await listed(client, { limit: 1 }))[0].id, named);
      assert.equal(ok(await list(client, { id: named })).result, "named");
      assert.equal((await run(client, { rerun_id: named })).result, "named");
      assert.equal(failed._meta?.["dev.moonbox/execution_id"], all[0].id); // failures too

      // rerun: the kept code with new context_vars and limits
      const again = await run(client, { rerun_id: all[1].id, context_vars: { n: 8, who: "bob" }, timeout_ms: 2000 });
      assert.deepEqual(again.result, { n: 8, who: "bob" });
      assert.equal(again.output, "hello bob\n");
      const newest = (await listed(client, { limit: 1 }))[0];
      assert.notEqual(newest.id, all[1].id);
      assert.equal(ok(await list(client, { id: newest.id })).rerun_of, all[1].id);
      // the failed one reruns as it failed
      assert.match(errText(await execute(client, { rerun_id: all[0].id })), /boom/);

      // clear errors, and the server keeps serving
      assert.match(errText(await execute(client, { rerun_id: "0123456789abcdef" })),
        /^no execution 0123456789abcdef in your journal \(list_executions lists the ones kept: the newest journal_max_rows=1000, none older than journal_max_age_s=2592000\)$/);
      assert.equal(errText(await execute(client, { rerun_id: all[1].id, code: "return 1" })),
        "invalid arguments: give code or rerun_id, not both");
      assert.match(errText(await execute(client, { rerun_id: "../../etc" })), /rerun_id must be an execution id/);
      assert.match(errText(await list(client, { id: 12 })), /id must be an execution id from list_executions \(16 hex digits\), got number/);
      assert.equal((await run(client, { code: "return 'still serving'" })).result, "still serving");
    });
  });

  it("hostile search text is plain text, and a huge one is refused naming the option", T, async () => {
    await useServer(await connectClient(), async ({ client }) => {
      await run(client, { code: "return '100%'" });
      await run(client, { code: "return 'a_b'" });
      await run(client, { code: "return 'x\\0y'" });
      assert.deepEqual((await listed(client, { query: "%" })).map((e) => e.code), ["return '100%'"]);
      assert.deepEqual((await listed(client, { query: "_" })).map((e) => e.code), ["return 'a_b'"]);
      assert.deepEqual(await listed(client, { query: "' OR '1'='1" }), []);
      assert.deepEqual(await listed(client, { query: "NEAR(a b) OR *" }), []);
      assert.deepEqual(await listed(client, { query: "\u0000" }), []);
      assert.deepEqual(await listed(client, { tool: "%" }), []);
      const huge = "x".repeat(1 << 20);
      assert.equal(errText(await list(client, { query: huge })),
        "invalid arguments: query is 1048576 bytes, more than journal_max_code_bytes=65536 (the most of an execution's code the journal keeps)");
      assert.match(errText(await list(client, { outcome: "ok' --" })), /outcome must be ok, failed/);
      assert.match(errText(await list(client, { limit: 1001 })), /limit must be an integer from 1 to journal_max_rows=1000/);
      assert.match(errText(await list(client, { since: "2026-13-45T99:99:99Z" })), /since must be milliseconds since the epoch or a UTC time/);
      assert.equal((await listed(client)).length, 3);
    });
  });

  it("code over journal_max_code_bytes keeps its size only; heads are cut at journal_head_bytes", T, async () => {
    await useServer(await connectClient({ args: ["--journal-max-code-bytes", "64", "--journal-head-bytes", "16"] }),
      async ({ client }) => {
        const long = `return string.rep("é", 40) -- ${"padding ".repeat(8)}`;
        await run(client, { code: long });
        await run(client, { code: 'print(string.rep("out", 10)) return string.rep("é", 40)' });
        const [small, big] = await listed(client);
        assert.equal(big.code, `(${Buffer.byteLength(long)} bytes, not kept)`);
        const b = ok(await list(client, { id: big.id }));
        assert.deepEqual([b.code_kept, b.code, b.code_bytes, b.code_not_kept],
          [false, undefined, Buffer.byteLength(long), "more than journal_max_code_bytes=64"]);
        assert.equal(errText(await execute(client, { rerun_id: big.id })),
          `execution ${big.id}'s code was not kept: ${Buffer.byteLength(long)} bytes, more than journal_max_code_bytes=64`);
        const s = ok(await list(client, { id: small.id }));
        // 16 bytes of '"éééé…' cut before a split character: '"' and 7 é (15 bytes)
        assert.equal(s.result_json_head, '"' + "é".repeat(7));
        assert.equal(s.result_bytes, 82);
        assert.equal(s.result, undefined);
        assert.equal(s.output, "outoutoutoutouto");
        assert.equal(s.output_bytes, 31);
        assert.equal(s.output_truncated, true);
        // the small one can be rerun
        assert.equal((await run(client, { rerun_id: small.id })).result, "é".repeat(40));
      });
  });

  it("keeps only what the model saw: PII in the result, output and error is stored as tokens", T, async () => {
    await useServer(await connectClient(), async ({ client, dataDir }) => {
      // the code never holds the value whole: it is put together at run time
      const code = 'local e = "ann.lee" .. "@" .. "example.org"\nprint("mail " .. e)\nreturn {mail = e}';
      const r = await run(client, { code });
      assert.match(r.result.mail, /^\[EMAIL_[0-9a-f]{8}\]$/);
      const failed = await execute(client, { code: 'error("no " .. "ann.lee" .. "@" .. "example.org")' });
      assert.equal(failed.isError, true);
      const [bad, good] = await listed(client);
      const g = ok(await list(client, { id: good.id }));
      assert.deepEqual(g.result, { mail: r.result.mail });
      assert.equal(g.output, `mail ${r.result.mail}\n`);
      const b = ok(await list(client, { id: bad.id }));
      assert.ok(b.error.includes(r.result.mail), b.error);
      // the same SQL on either store (instr() is a SQL function of the PostgreSQL schema too)
      const db = path.join(dataDir, "moonbox.db");
      const pgdb = pgDbOf(dataDir);
      const count = (sql) => {
        if (pgdb) return testPg.psqlSync(sql, pgdb);
        const x = sqlite3Cli(db, sql);
        assert.equal(x.status, 0, x.stderr);
        return x.stdout.trim();
      };
      assert.equal(count("SELECT count(*) FROM executions WHERE result_head LIKE '%example.org%'"
        + " OR output_head LIKE '%example.org%' OR error LIKE '%example.org%'"), "0");
      assert.equal(count(`SELECT count(*) FROM executions WHERE instr(result_head, '${r.result.mail}') > 0`
        + ` AND instr(output_head, '${r.result.mail}') > 0`), "1");
    });
  });

  it("records the upstream tools an execution called (server-everything)", T, async () => {
    const s = await connectWithConfig({ mcpServers: { everything: nodeServer(UPSTREAM_JS.everything, ["stdio"]) } });
    await useServer(s, async ({ client }) => {
      await waitUpstream(client, "everything");
      await run(client, { code: "return 1" });
      const r = await run(client, { code: 'servers.everything.echo{message="hi"}\n'
        + 'servers.everything.echo{message="again"}\nreturn servers.everything.get_sum{a=1, b=2}' });
      assert.equal(r.result, "The sum of 1 and 2 is 3.");
      const found = await listed(client, { tool: "everything.get-sum" });
      assert.equal(found.length, 1);
      assert.deepEqual(found[0].tools_called, ["everything.echo", "everything.get-sum"]);
      assert.deepEqual(ok(await list(client, { id: found[0].id })).tools_called, ["everything.echo", "everything.get-sum"]);
      assert.deepEqual(await listed(client, { tool: "everything.add" }), []);
      assert.equal((await listed(client)).length, 2);
    });
  });

  it("an id given out while the journal cannot be written (a lock held by another process) is "
    + "kept: list_executions says why it is not there yet, then finds it", { ...T, skip: SQLITE_ONLY }, async () => {
    // make chaos found both halves: rows of a failed commit were dropped, and list_executions
    // said "no execution ... in your journal" of an id the client had just been given
    await withDataDir(async (dataDir) => {
      await useServer(await connectClient({ dataDir, args: ["--store-busy-timeout-ms", "50"] }), async ({ client }) => {
        await run(client, { code: "return 0" }); // the store exists
        // another process holds the write lock until its stdin closes
        const holder = spawn("sqlite3", [path.join(dataDir, "moonbox.db")], { stdio: ["pipe", "pipe", "pipe"] });
        const gone = new Promise((resolve) => holder.on("exit", resolve));
        try {
          // .timeout: the server's writer may be committing "return 0" right now; without it
          // BEGIN failed with "database is locked", the shell went on to print 'locked' holding
          // nothing, and the row was written (failed that way in a clean-clone CI run)
          holder.stdin.write(".timeout 20000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n");
          await new Promise((resolve) => holder.stdout.once("data", resolve));
          const res = await execute(client, { code: "return 'kept'" });
          const id = res._meta["dev.moonbox/execution_id"];
          assert.match(id, ID_RE);
          const why = await until(async () => {
            const r = await list(client, { id });
            return r.isError && /cannot be written just now/.test(errText(r)) && errText(r);
          }, 15000, "list_executions names the outage");
          assert.match(why, new RegExp(`^no execution ${id} in your journal yet: the journal cannot be written just now \\(database is locked\\); \\d+ rows wait`));
        } finally {
          holder.stdin.end("COMMIT;\n");
          await gone;
        }
        const row = await until(async () => {
          const r = await list(client, { id: (await listed(client, { query: "kept" }))[0]?.id ?? "0000000000000000" });
          return !r.isError && r.structuredContent;
        }, 15000, "the row written once the lock is free");
        assert.equal(row.result, "kept");
      });
    });
  });

  it("migrates a data directory written before the journal: old rows get ids, new rows journal", { ...T, skip: SQLITE_ONLY }, async () => {
    await withDataDir(async (dataDir) => {
      const db = path.join(dataDir, "moonbox.db");
      await useServer(await connectClient({ dataDir }), async ({ client }) => {
        await run(client, { code: "return 1" });
      });
      // back to the schema of user_version 4, with a row as the old writer made it
      const down = sqlite3Cli(db, ["DROP TABLE tasks", "DROP TABLE audit", "DROP INDEX executions_by_ref", "DROP INDEX executions_code_bytes",
        ...["ref", "code", "code_bytes", "context_bytes", "result_head", "result_bytes", "output_head",
          "output_bytes", "error", "tools_called", "rerun_of", "principal"].map((c) => `ALTER TABLE executions DROP COLUMN ${c}`),
        "DELETE FROM executions",
        "INSERT INTO executions (tenant, started_at, duration_ms, outcome, instructions, memory_peak, code_hash, tool)"
          + " VALUES ('default', 1700000000000, 2.5, 'ok', 10, 100, 'abc', 'execute_code')",
        "PRAGMA user_version = 4"].join(";\n"));
      assert.equal(down.status, 0, down.stderr);
      await useServer(await connectClient({ dataDir }), async ({ client }) => {
        const [old] = await listed(client);
        assert.match(old.id, ID_RE);
        assert.equal(old.started_at, "2023-11-14T22:13:20Z");
        assert.equal(old.code, "(recorded before the journal kept code)");
        assert.equal(errText(await execute(client, { rerun_id: old.id })),
          `execution ${old.id} was recorded before the journal kept code: it cannot be rerun`);
        await run(client, { code: "return 'new'" });
        const [fresh] = await listed(client, { query: "new" });
        assert.equal(ok(await list(client, { id: fresh.id })).result, "new");
      });
      assert.equal(sqlite3Cli(db, "PRAGMA user_version").stdout.trim(), "9");
    });
  });

  // The search reads at most journal_search_bytes of code per call, newest first (on SQLite on
  // the loop thread): before, each search of this journal read all 64 MB and a ping behind
  // five of them waited seconds (docs/journal.md, "Search"). No time is asserted: the answers
  // and the bound each search reports.
  it("a full journal of large rows: a ping behind several searches is answered; the bound is said and before goes on", { ...T, timeout: 120000 }, async () => {
    const p = spawnRaw({ args: ["--journal-max-rows", "2000"] }); // the oldest row is kept
    try {
      await p.initialize();
      const old = await p.request("old", "tools/call", { name: "execute_code", arguments: { code: "return 'NEEDLE old'" } });
      assert.equal(old.result?.structuredContent?.result, "NEEDLE old", JSON.stringify(old).slice(0, 300));
      await p.request("flush", "tools/call", { name: "list_executions", arguments: {} }); // its row first
      fillJournal(p.dataDir, 1000);
      const fresh = await p.request("new", "tools/call", { name: "execute_code", arguments: { code: "return 'needle new'" } });
      assert.equal(fresh.result?.structuredContent?.result, "needle new");
      const search = (id, args) => ({ jsonrpc: "2.0", id, method: "tools/call",
        params: { name: "list_executions", arguments: { query: "needle", ...args } } });
      for (let i = 0; i < 5; i++) p.send(search(`s${i}`));
      p.send({ jsonrpc: "2.0", id: "ping", method: "ping" });
      assert.deepEqual((await p.response("ping", { timeout: 60000 })).result, {});
      for (let i = 0; i < 5; i++) {
        const r = (await p.response(`s${i}`, { timeout: 60000 })).result.structuredContent;
        assert.deepEqual(r.executions.map((e) => e.code), ["return 'needle new'"]);
        const cut = r.search_cut;
        assert.ok(cut, JSON.stringify(r).slice(0, 400));
        assert.equal(cut.journal_search_bytes, 4194304);
        assert.ok(cut.searched_executions > 1 && cut.searched_executions < 1002, JSON.stringify(cut));
        // within the bound by at most the one row that crossed it
        assert.ok(cut.searched_code_bytes <= 4194304 + 65536, JSON.stringify(cut));
        assert.match(cut.before, /^[0-9a-f]{16}$/);
        assert.match(cut.note, /journal_search_bytes=4194304.*before/);
      }
      // going on with before, page after page, reaches the oldest one: what one unbounded
      // search found before
      const found = [];
      let before;
      let pages = 0;
      do {
        const r = (await p.request(`p${pages}`, "tools/call", { name: "list_executions",
          arguments: { query: "needle", ...(before ? { before } : {}) } })).result.structuredContent;
        found.push(...r.executions.map((e) => e.code));
        before = r.search_cut?.before;
        pages += 1;
      } while (before && pages < 100);
      assert.deepEqual(found, ["return 'needle new'", "return 'NEEDLE old'"]);
      assert.ok(pages > 2 && pages < 100, `${pages} pages`);
    } finally {
      await p.dispose();
    }
  });

  it("journal_search_bytes above the journal: one search finds everything, no cut", { ...T, timeout: 120000 }, async () => {
    const p = spawnRaw({ args: ["--journal-search-bytes", String(1 << 30)] });
    try {
      await p.initialize();
      await p.request("old", "tools/call", { name: "execute_code", arguments: { code: "return 'NEEDLE old'" } });
      await p.request("flush", "tools/call", { name: "list_executions", arguments: {} });
      fillJournal(p.dataDir, 200);
      await p.request("new", "tools/call", { name: "execute_code", arguments: { code: "return 'needle new'" } });
      const r = (await p.request("s", "tools/call", { name: "list_executions", arguments: { query: "needle" } })).result.structuredContent;
      assert.deepEqual(r.executions.map((e) => e.code), ["return 'needle new'", "return 'NEEDLE old'"]);
      assert.equal(r.search_cut, undefined);
    } finally {
      await p.dispose();
    }
  });
});
