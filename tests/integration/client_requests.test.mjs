// Sandbox code asking the client: mcp.sample (sampling/createMessage) and mcp.elicit
// (elicitation/create) go to the SDK client on the session of the tools/call that runs the code,
// and the code gets the client's answer. Also: a client without the capability gets no request,
// a client error becomes a Lua error, a client that never answers is bounded by the deadline, and
// completion/complete and resources/subscribe answer.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { CreateMessageRequestSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { connectClient } from "../lib/moonbox.mjs";

const T = { timeout: 30000 };

async function exec(client, code, extra = {}) {
  const r = await client.callTool({ name: "execute_code", arguments: { code, ...extra } });
  return r.structuredContent;
}

describe("mcp.sample and mcp.elicit", () => {
  it("mcp.sample sends sampling/createMessage and returns the client's answer", T, async () => {
    const s = await connectClient({ clientOptions: { capabilities: { sampling: {} } } });
    try {
      const seen = [];
      s.client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
        seen.push(req.params);
        return { model: "test-model", role: "assistant",
          content: { type: "text", text: "sampled: " + req.params.messages[0].content.text } };
      });
      const sc = await exec(s.client, `
        local r = mcp.sample({ messages = { { role = "user", content = { type = "text", text = "hi" } } },
                               maxTokens = 50 })
        return { text = r.content.text, model = r.model }`);
      assert.equal(sc.success, true, JSON.stringify(sc));
      assert.deepEqual(sc.result, { text: "sampled: hi", model: "test-model" });
      assert.equal(seen.length, 1);
      assert.equal(seen[0].maxTokens, 50);
    } finally {
      await s.close();
    }
  });

  it("mcp.elicit sends elicitation/create and returns the user's answer", T, async () => {
    const s = await connectClient({ clientOptions: { capabilities: { elicitation: {} } } });
    try {
      s.client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: { name: "Ann" } }));
      const sc = await exec(s.client, `
        local r = mcp.elicit({ message = "Your name?", requestedSchema = { type = "object",
          properties = { name = { type = "string" } } } })
        return r.action .. ":" .. r.content.name`);
      assert.equal(sc.success, true, JSON.stringify(sc));
      assert.equal(sc.result, "accept:Ann");
    } finally {
      await s.close();
    }
  });

  it("without the client capability, the code gets an error and nothing is sent", T, async () => {
    const s = await connectClient();
    try {
      const sc = await exec(s.client, `return mcp.sample({ messages = {}, maxTokens = 1 })`);
      assert.equal(sc.success, false);
      assert.match(sc.error, /sampling\/createMessage: the client did not declare the sampling capability/);
    } finally {
      await s.close();
    }
  });

  it("a client error becomes a catchable Lua error", T, async () => {
    const s = await connectClient({ clientOptions: { capabilities: { sampling: {} } } });
    try {
      s.client.setRequestHandler(CreateMessageRequestSchema, async () => { throw new Error("user declined"); });
      const sc = await exec(s.client, `
        local ok, err = pcall(mcp.sample, { messages = json.array({}), maxTokens = 1 })
        return ok, err`);
      assert.equal(sc.success, true, JSON.stringify(sc));
      assert.equal(sc.result[0], false);
      assert.match(sc.result[1], /sampling\/createMessage: .*user declined/);
    } finally {
      await s.close();
    }
  });

  it("a client that never answers is bounded by the execution's deadline", T, async () => {
    const s = await connectClient({ clientOptions: { capabilities: { sampling: {} } } });
    try {
      s.client.setRequestHandler(CreateMessageRequestSchema, () => new Promise(() => {}));
      const t0 = performance.now();
      const sc = await exec(s.client, `return mcp.sample({ messages = json.array({}), maxTokens = 1 })`, { timeout_ms: 300 });
      const ms = performance.now() - t0;
      assert.equal(sc.error_type, "timeout");
      assert.ok(ms < 300 + 400, `answered after ${ms} ms`);
      const again = await exec(s.client, "return 1");
      assert.equal(again.result, 1);
    } finally {
      await s.close();
    }
  });
});

describe("completion and subscriptions", () => {
  it("completion/complete answers with no values; resources/subscribe and unsubscribe answer", T, async () => {
    const s = await connectClient();
    try {
      const caps = s.client.getServerCapabilities();
      assert.deepEqual(caps.completions, {});
      assert.equal(caps.resources.subscribe, true);
      const c = await s.client.complete({ ref: { type: "ref/prompt", name: "x" }, argument: { name: "a", value: "b" } });
      assert.deepEqual(c.completion, { values: [], total: 0, hasMore: false });
      assert.deepEqual(await s.client.subscribeResource({ uri: "test://x" }), {});
      assert.deepEqual(await s.client.unsubscribeResource({ uri: "test://x" }), {});
    } finally {
      await s.close();
    }
  });
});
