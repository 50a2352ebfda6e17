// Executions that wait for a client's answer (2026-07-28 input_required, a 2025-11-25
// elicitation) do not take the workers' places: with --workers 1, a client that leaves its
// questions unanswered does not stop everyone else's code for the execution's timeout. The pool
// starts up to held_workers more workers beside held executions and retires them when the holds
// end; beyond held_workers a held execution keeps its worker as before. Both isolation modes.
// docs/configuration.md (held_workers), docs/protocol.md.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { startHttp, until, connectClient } from "../lib/moonbox.mjs";

const T = { timeout: 90000 };
const V = "2026-07-28";
const META = { "io.modelcontextprotocol/protocolVersion": V,
  "io.modelcontextprotocol/clientCapabilities": { elicitation: {} } };
const ELICIT = `return mcp.elicit({ message = "name?", requestedSchema = { type = "object",
  properties = { n = { type = "string" } } } }).content.n`;

async function call(srv, body) {
  const res = await fetch(srv.url, { method: "POST", headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": V, "Mcp-Method": body.method, "Mcp-Name": body.params.name },
    body: JSON.stringify(body) });
  const text = await res.text();
  const lines = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).filter(Boolean);
  return JSON.parse(lines.length ? lines.at(-1) : text);
}

const exec = (srv, id, code, more = {}) => call(srv, { jsonrpc: "2.0", id, method: "tools/call",
  params: { name: "execute_code", arguments: { code, timeout_ms: 60000 }, _meta: META, ...more } });

async function metric(srv, re) {
  const text = await (await fetch(srv.url.replace(/\/mcp$/, "/metrics"))).text();
  const m = text.match(re);
  assert.ok(m, `${re} in /metrics`);
  return Number(m[1]);
}

for (const isolation of ["process", "thread"]) {
  describe(`held executions beside --workers 1 (isolation ${isolation})`, () => {
    let srv;
    before(async () => {
      srv = await startHttp(["--workers", "1", "--held-workers", "2", "--mrtr-max-held", "8",
        "--mrtr-hold-ms", "60000", "--isolation", isolation]);
    });
    after(async () => { await srv?.stop(); });

    it("three unanswered questions do not stop other code; past held_workers the next waits for an answer", T, async () => {
      // before held workers, the second question waited for the first execution's timeout
      // (60 s here, past this test's client): one worker, held
      const held = [];
      for (let i = 0; i < 3; i++) {
        const r = await exec(srv, `h${i}`, ELICIT);
        assert.equal(r.result?.resultType, "input_required", `hold ${i}: ${JSON.stringify(r).slice(0, 300)}`);
        held.push(r.result);
      }
      assert.equal(await metric(srv, /^moonbox_workers\{state="held"\} (\d+)$/m), 3);
      // 1 worker + 2 held workers, all three held: plain code waits for a place ...
      let plainDone = false;
      const plain = exec(srv, "plain", "return 6 * 7").then((r) => { plainDone = true; return r; });
      await sleep(300);
      assert.equal(plainDone, false, "the plain execution waits while every worker is held");
      // ... which the first answered question gives it
      const [key] = Object.keys(held[0].inputRequests);
      const done = await exec(srv, "r0", ELICIT, { requestState: held[0].requestState,
        inputResponses: { [key]: { action: "accept", content: { n: "ann" } } } });
      assert.equal(done.result?.structuredContent?.result, "ann", JSON.stringify(done).slice(0, 300));
      const p = await plain;
      assert.equal(p.result?.structuredContent?.result, 42, JSON.stringify(p).slice(0, 300));
      // the others answered too: every execution ends, and the pool is back to one worker
      for (const i of [1, 2]) {
        const [k] = Object.keys(held[i].inputRequests);
        const r = await exec(srv, `r${i}`, ELICIT, { requestState: held[i].requestState,
          inputResponses: { [k]: { action: "accept", content: { n: `n${i}` } } } });
        assert.equal(r.result?.structuredContent?.result, `n${i}`, JSON.stringify(r).slice(0, 300));
      }
      assert.equal(await metric(srv, /^moonbox_workers\{state="busy"\} (\d+)$/m), 0);
      assert.equal(await metric(srv, /^moonbox_workers\{state="held"\} (\d+)$/m), 0);
      if (isolation === "process") // (threads started for holds stay until the server exits)
        await until(async () => (await metric(srv, /^moonbox_workers\{state="total"\} (\d+)$/m)) === 1, 20000,
          "the held workers' processes retire");
      const after = await exec(srv, "after", "return 'still serving'");
      assert.equal(after.result?.structuredContent?.result, "still serving");
    });
  });
}

describe("a 2025-11-25 elicitation left unanswered (stdio, --workers 1)", () => {
  it("other requests' code runs while the question waits", T, async () => {
    const s = await connectClient({ args: ["--workers", "1"],
      clientOptions: { capabilities: { elicitation: {} } } });
    try {
      let asked;
      const question = new Promise((resolve) => { asked = resolve; });
      let answer;
      s.client.setRequestHandler(ElicitRequestSchema, () => {
        asked();
        return new Promise((resolve) => { answer = resolve; });
      });
      const waiting = s.client.callTool({ name: "execute_code", arguments: { code: ELICIT, timeout_ms: 60000 } },
        undefined, { timeout: 80000 });
      await question;
      const r = await s.client.callTool({ name: "execute_code", arguments: { code: "return 6 * 7" } },
        undefined, { timeout: 20000 });
      assert.equal(r.structuredContent?.result, 42, JSON.stringify(r.structuredContent));
      answer({ action: "accept", content: { n: "bo" } });
      const w = await waiting;
      assert.equal(w.structuredContent?.result, "bo", JSON.stringify(w.structuredContent));
    } finally {
      await s.close();
    }
  });
});
