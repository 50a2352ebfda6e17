// Skills published as MCP prompts and resources (lua/mcp/skill_publish.lua), driven with the
// official SDK client: prompts/list and prompts/get with arguments, static resources, resource
// templates, what the skill returns and how errors come back, save_skill publishing, and the
// list_changed notifications.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { PromptListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { connectWithSkills } from "../lib/moonbox.mjs";

const T = { timeout: 30000 };

const SKILLS = {
  "greet.lua": `--- A greeting prompt.
-- @param who string whom to greet
-- @param style string? formal or casual
-- @prompt Greeting
return function(a) return "Say hello to " .. a.who .. (a.style and (" in a " .. a.style .. " way") or "") end
`,
  "conversation.lua": `--- Two messages.
-- @prompt
return function() return { description = "a chat", messages = {
  { role = "user", content = { type = "text", text = "Hi" } },
  { role = "assistant", content = { type = "text", text = "Hello!" } } } } end
`,
  "badprompt.lua": `--- Returns a number.
-- @prompt
return function() return 42 end
`,
  "static_text.lua": `--- Static text.
-- @resource test://static-text text/plain
return function() return "This is the content of the static text resource." end
`,
  "static_binary.lua": `--- A binary blob.
-- @resource test://static-binary image/png
return function() return { blob = "iVBORw0KGgo=", mimeType = "image/png" } end
`,
  "tmpl.lua": `--- Data by id.
-- @resource test://template/{id}/data application/json
return function(a) return { text = json.encode({ id = a.id, uri = a.uri }) } end
`,
};

async function withSkills(fn, opts = {}) {
  const s = await connectWithSkills({ skills: SKILLS, ...opts });
  try {
    await fn(s);
  } finally {
    await s.close();
  }
}

describe("skills published as prompts", () => {
  it("initialize advertises prompts and resources with listChanged", T, () => withSkills(async (s) => {
    const caps = s.client.getServerCapabilities();
    assert.deepEqual(caps.prompts, { listChanged: true });
    assert.equal(caps.resources.listChanged, true);
  }));

  it("prompts/list shows each @prompt skill with its params as arguments", T, () => withSkills(async (s) => {
    const { prompts } = await s.client.listPrompts();
    assert.deepEqual(prompts.map((p) => p.name), ["badprompt", "conversation", "greet"]);
    const greet = prompts.find((p) => p.name === "greet");
    assert.equal(greet.title, "Greeting");
    assert.equal(greet.description, "A greeting prompt.");
    assert.deepEqual(greet.arguments, [
      { name: "who", description: "whom to greet", required: true },
      { name: "style", description: "formal or casual", required: false },
    ]);
  }));

  it("prompts/get runs the skill with the arguments", T, () => withSkills(async (s) => {
    const r = await s.client.getPrompt({ name: "greet", arguments: { who: "Ann", style: "formal" } });
    assert.deepEqual(r.messages, [{ role: "user", content: { type: "text", text: "Say hello to Ann in a formal way" } }]);
    assert.equal(r.description, "A greeting prompt.");
    const c = await s.client.getPrompt({ name: "conversation" });
    assert.equal(c.description, "a chat");
    assert.deepEqual(c.messages.map((m) => m.role), ["user", "assistant"]);
  }));

  it("missing arguments, unknown prompts and bad returns are JSON-RPC errors", T, () => withSkills(async (s) => {
    await assert.rejects(s.client.getPrompt({ name: "greet", arguments: {} }),
      /-32602.*prompts\/get greet: argument who is required/);
    await assert.rejects(s.client.getPrompt({ name: "nope" }), /-32602.*Unknown prompt: nope/);
    await assert.rejects(s.client.getPrompt({ name: "badprompt" }),
      /-32603.*a prompt skill must return a string, a content block, messages/);
  }));
});

describe("skills published as resources", () => {
  it("resources/list has the static ones, templates/list the templates", T, () => withSkills(async (s) => {
    const { resources } = await s.client.listResources();
    const uris = resources.map((r) => r.uri);
    assert.ok(uris.includes("test://static-text"), uris.join(" "));
    assert.ok(uris.includes("test://static-binary"));
    assert.ok(!uris.some((u) => u.includes("{")), "templates are not resources");
    const { resourceTemplates } = await s.client.listResourceTemplates();
    const t = resourceTemplates.find((x) => x.uriTemplate === "test://template/{id}/data");
    assert.ok(t, JSON.stringify(resourceTemplates));
    assert.equal(t.mimeType, "application/json");
  }));

  it("resources/read runs the skill: text, blob, template arguments", T, () => withSkills(async (s) => {
    let r = await s.client.readResource({ uri: "test://static-text" });
    assert.deepEqual(r.contents, [{ uri: "test://static-text", mimeType: "text/plain",
      text: "This is the content of the static text resource." }]);
    r = await s.client.readResource({ uri: "test://static-binary" });
    assert.deepEqual(r.contents, [{ uri: "test://static-binary", mimeType: "image/png", blob: "iVBORw0KGgo=" }]);
    r = await s.client.readResource({ uri: "test://template/42/data" });
    assert.deepEqual(JSON.parse(r.contents[0].text), { id: "42", uri: "test://template/42/data" });
    assert.equal(r.contents[0].mimeType, "application/json");
    await assert.rejects(s.client.readResource({ uri: "test://template/42/other" }), /-32002/);
  }));
});

describe("publishing and unpublishing", () => {
  it("save_skill with prompt=true publishes a prompt and clients hear prompts/list_changed", T, () => withSkills(async (s) => {
    let changes = 0;
    s.client.setNotificationHandler(PromptListChangedNotificationSchema, () => { changes++; });
    const res = await s.client.callTool({ name: "save_skill", arguments: {
      name: "ask", code: "return function(a) return 'Ask about ' .. a.topic end", description: "Asks.",
      params: [{ name: "topic", type: "string" }], prompt: true } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    for (let i = 0; i < 20 && changes === 0; i++) await sleep(50);
    assert.ok(changes >= 1, "prompts/list_changed");
    const r = await s.client.getPrompt({ name: "ask", arguments: { topic: "Lua" } });
    assert.equal(r.messages[0].content.text, "Ask about Lua");
  }));

  it("a resource published by editing a file on disk appears live", T, () => withSkills(async (s) => {
    writeFileSync(path.join(s.skillsDir, "live.lua"),
      "--- Live.\n-- @resource test://live\nreturn function() return 'live!' end\n");
    let r;
    for (let i = 0; i < 40; i++) {
      try { r = await s.client.readResource({ uri: "test://live" }); break; } catch { await sleep(50); }
    }
    assert.ok(r, "test://live never appeared");
    assert.equal(r.contents[0].text, "live!");
  }));

  it("save_skill refuses a resource that is not a URI", T, () => withSkills(async (s) => {
    const res = await s.client.callTool({ name: "save_skill", arguments: {
      name: "r", code: "return function() return 'x' end", description: "R.", resource: "not a uri" } });
    assert.equal(res.isError, true);
    assert.match(res.content[0].text, /resource must be a URI such as test:\/\/static-text/);
  }));
});
