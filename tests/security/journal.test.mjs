// The execution journal across tenants, as an attacker holding one of two HTTP tokens would try
// it (the SDK's Streamable HTTP client, one server, tokens alpha and beta): beta's list, search
// (by alpha's code text, with LIKE/FTS/SQL syntax, NUL bytes, a huge string), fetch by id and
// rerun_id of alpha's executions all answer exactly as for an id that never existed, and alpha's
// journal is unchanged by any of it; ids are keyed hashes of a counter (64 bits), nothing a tenant could walk;
// and the server keeps serving both.
// Run: cd tests && MOONBOX=../build/moonbox node run-node.mjs security/journal.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { startHttp, toolErrText as errText, toolOk as ok } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const TA = "journal-token-alpha-0123456789", TB = "journal-token-beta-9876543210";

async function connect(url, token) {
  const transport = new StreamableHTTPClientTransport(new URL(url),
    { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  const client = new Client({ name: "moonbox-journal-attacker", version: "0.0.0" }, { capabilities: {} });
  await client.connect(transport);
  return client;
}

const call = (c, name, args) => c.callTool({ name, arguments: args });
const list = async (c, args = {}) => ok(await call(c, "list_executions", args)).executions;
const unknownText = (id) => `no execution ${id} in your journal (list_executions lists the ones kept: `
  + "the newest journal_max_rows=1000, none older than journal_max_age_s=2592000)";

describe("the journal does not cross tenants (HTTP, two tokens)", () => {
  let srv, alpha, beta;
  const secret = "alpha-only-marker-7f3a";
  before(async () => {
    srv = await startHttp(["--http-tokens", `${TA}=alpha,${TB}=beta`]);
    alpha = await connect(srv.url, TA);
    beta = await connect(srv.url, TB);
  });
  after(async () => {
    await alpha?.close();
    await beta?.close();
    await srv?.stop();
  });

  it("list, search, get and rerun all refuse the other tenant's executions", T, async () => {
    for (let i = 0; i < 3; i++) {
      const r = await call(alpha, "execute_code", { code: `local s = "${secret}" return s .. ${i}` });
      assert.equal(ok(r).result, `${secret}${i}`);
    }
    assert.equal(ok(await call(beta, "execute_code", { code: "return 'beta'" })).result, "beta");
    const mine = await list(alpha);
    assert.equal(mine.length, 3);
    const ids = mine.map((e) => e.id);

    // list and search: beta sees its one execution and nothing of alpha's
    assert.deepEqual((await list(beta)).map((e) => e.code), ["return 'beta'"]);
    const hostile = [secret, "alpha", "%", "_", "%alpha%", "' OR 1=1 --", "') OR tenant <> ('",
      "\" OR \"\"=\"", "* OR alpha", "NEAR(alpha marker)", "alpha\u0000", "\\", "return"];
    for (const query of hostile) {
      const found = await list(beta, { query });
      assert.ok(found.every((e) => e.code === "return 'beta'"), `query ${JSON.stringify(query)}: ${JSON.stringify(found)}`);
    }
    for (const tool of ["%", "' OR 1=1 --", "_"]) assert.deepEqual(await list(beta, { tool }), []);
    assert.match(errText(await call(beta, "list_executions", { query: secret.repeat(20000) })),
      /more than journal_max_code_bytes=65536/);
    assert.match(errText(await call(beta, "list_executions", { tenant: "alpha" })), /has no argument "tenant"/);

    // get and rerun by alpha's ids: the very answer an id that never existed gets
    for (const id of ids) {
      assert.equal(errText(await call(beta, "list_executions", { id })), unknownText(id));
      assert.equal(errText(await call(beta, "execute_code", { rerun_id: id })), unknownText(id));
      assert.equal(errText(await call(beta, "execute_code", { rerun_id: id.toUpperCase() })), unknownText(id));
    }
    const never = "0000000000000000";
    assert.equal(errText(await call(beta, "list_executions", { id: never })), unknownText(never));
    // before (paging, a search that was cut) by alpha's ids: the same answer, nothing listed
    for (const id of ids) {
      assert.equal(errText(await call(beta, "list_executions", { before: id })), unknownText(id));
      assert.equal(errText(await call(beta, "list_executions", { before: id, query: secret })), unknownText(id));
    }
    for (const before of [`${ids[0]}' OR '1'='1`, "%", ids[0].slice(0, 15)]) {
      assert.match(errText(await call(beta, "list_executions", { before })), /before must be an execution id/);
    }
    // ids that try to reach around the lookup are malformed, not searched
    for (const id of [`${ids[0]}' OR '1'='1`, "%", "*", ids[0].slice(0, 15), `${ids[0]}0`]) {
      assert.match(errText(await call(beta, "list_executions", { id })), /id must be an execution id from list_executions/);
    }

    // the ids look random, not like counters: no two share a long prefix, and none is small
    for (const id of ids) assert.match(id, /^[0-9a-f]{16}$/);
    const asNum = ids.map((id) => BigInt(`0x${id}`));
    assert.ok(asNum.every((n) => n > 0xffffffffn), `ids look like counters: ${ids}`);
    assert.equal(new Set(ids.map((id) => id.slice(0, 8))).size, 3);

    // alpha's journal is what it was, and alpha still reruns its own
    assert.deepEqual((await list(alpha)).map((e) => e.id), ids);
    assert.equal(ok(await call(alpha, "execute_code", { rerun_id: ids[0] })).result, `${secret}2`);
    assert.equal((await list(alpha)).length, 4);
    assert.equal((await list(beta)).length, 1);
    // and the stats of each count only its own rows
    const sa = ok(await call(alpha, "get_execution_stats", {})).history.recorded;
    const sb = ok(await call(beta, "get_execution_stats", {})).history.recorded;
    assert.deepEqual([sa, sb], [4, 1]);
  });
});
