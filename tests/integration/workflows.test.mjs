// Declarative workflows (docs/workflows.md) end to end with the official SDK client: the shipped
// example workflows/customer_intake.yaml fills a form by elicitation (the client answers wrongly
// first, is asked again with the problems, then answers well), looks the company up in the
// official server-memory as "crm", and writes the record to the workspace; workflows published
// as tools, run_workflow and list_workflows; errors that name the step; a declined form; limits;
// YAML and JSON files; a file added, changed and broken while the server runs.

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

import { TESTS_DIR, UPSTREAM_JS, connectClient, connectWithConfig, nodeServer, waitUpstream } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const REPO = path.resolve(TESTS_DIR, "..");

const HELLO_JSON = {
  name: "hello", description: "Greets", tool: true,
  inputs: { who: { type: "string", required: true }, times: { type: "integer", default: 1, minimum: 1 } },
  steps: [
    { id: "greet", lua: "('hello ' .. inputs.who .. '! '):rep(inputs.times)" },
    { id: "loud", lua: "steps.greet:upper()", when: "inputs.times > 1" },
  ],
  output: { text: "${steps.greet}", loud: "${steps.loud}", summary: "said ${steps.greet}to ${inputs.who}" },
};

const BROKEN_YAML = `name: broken
description: calls a server that is not configured
steps:
  - id: first
    lua: "1 + 1"
  - id: lookup
    call: { server: nowhere, tool: find, args: { q: "\${steps.first}" } }
`;

const HUGE = "# " + "x".repeat(1 << 20) + "\nname: huge\nsteps:\n  - lua: \"1\"\n";

const SPIN_YAML = `name: spin
timeout_ms: 300
instruction_limit: 10000000000
steps:
  - id: forever
    lua: "while true do end"
`;

describe("workflows", () => {
  let s, wdir, memFile;
  const answers = [];
  const asked = [];
  const changed = [];

  before(async () => {
    wdir = mkdtempSync(path.join(tmpdir(), "moonbox-workflows-"));
    copyFileSync(path.join(REPO, "workflows/customer_intake.yaml"), path.join(wdir, "customer_intake.yaml"));
    writeFileSync(path.join(wdir, "hello.json"), JSON.stringify(HELLO_JSON));
    writeFileSync(path.join(wdir, "broken.yaml"), BROKEN_YAML);
    writeFileSync(path.join(wdir, "spin.yml"), SPIN_YAML);
    writeFileSync(path.join(wdir, "bad.yaml"), "name: bad\nsteps:\n  - id: x\n    lua: 1\n    form: {}\n");
    // above the 1 MiB a workflow file may have: reported, not read
    writeFileSync(path.join(wdir, "huge.yaml"), HUGE);
    memFile = path.join(wdir, "..", `${path.basename(wdir)}-crm.jsonl`);
    writeFileSync(memFile, JSON.stringify({ type: "entity", name: "Example Corp", entityType: "company",
      observations: ["domain example.com", "customer since 2019"] }) + "\n");
    s = await connectWithConfig({
      mcpServers: { crm: nodeServer(UPSTREAM_JS.memory, [], { env: { MEMORY_FILE_PATH: memFile } }) },
    }, { args: ["--workflows-dir", wdir], clientOptions: { capabilities: { elicitation: {} } } });
    s.client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      return answers.shift() ?? { action: "cancel" };
    });
    s.client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed.push(Date.now()); });
    await waitUpstream(s.client, "crm");
  });
  after(async () => {
    await s?.close();
    rmSync(wdir, { recursive: true, force: true });
    rmSync(memFile, { force: true });
  });

  const call = (name, args) => s.client.callTool({ name, arguments: args }, undefined, { timeout: 60000 });

  it("the shipped customer_intake: a form asked twice, a CRM lookup, a record in the workspace", T, async () => {
    asked.length = 0;
    answers.push(
      { action: "accept", content: { name: "A", email: "not-an-address", plan: "gold" } },
      { action: "accept", content: { name: "Ann Lee", email: "ann@Example.com", plan: "team", seats: 5 } },
    );
    const r = await call("customer_intake", { account: "acme" });
    assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 800));
    assert.equal(asked.length, 2);
    assert.equal(asked[0].message, "New customer for account acme");
    assert.deepEqual(asked[0].requestedSchema.required, ["name", "email", "plan"]);
    assert.equal(asked[1].message, "New customer for account acme\n\nPlease correct: email must be an " +
      "e-mail address; name needs at least 2 characters; plan must be one of free, team, enterprise.");
    // the PII policy applies as to any execution: the e-mail reaches the model as a token
    const { email, ...rest } = r.structuredContent.customer;
    assert.deepEqual(rest, { account: "acme", name: "Ann Lee", plan: "team", seats: 5, company: "Example Corp" });
    assert.match(email, /^\[EMAIL_[0-9a-f]{8,16}\]$/);
    assert.equal(r.structuredContent.saved, "customers/acme/example.com.json");
    const back = await call("restore_pii", { text: email });
    assert.equal(back.structuredContent.restored_text, "ann@Example.com");
    const file = await call("read_workspace_file", { path: "customers/acme/example.com.json" });
    assert.deepEqual(JSON.parse(file.structuredContent.content), r.structuredContent.customer);
  });

  it("a declined form ends the workflow with an error naming the form step", T, async () => {
    answers.push({ action: "decline" });
    const r = await call("customer_intake", { account: "acme" });
    assert.equal(r.isError, true);
    assert.equal(r.content[0].text,
      'workflow customer_intake, step 1 "details" (form): the person did not fill in the form (decline)');
  });

  it("inputs are checked against their schema before any step", T, async () => {
    const r = await call("customer_intake", { account: "Not Valid!" });
    assert.equal(r.isError, true);
    assert.equal(r.content[0].text, "workflow customer_intake: input account does not have the expected form");
    assert.equal((await call("customer_intake", {})).content[0].text, "workflow customer_intake: input account is required");
  });

  it("run_workflow, defaults, when, and ${...} in the output (JSON file)", T, async () => {
    let r = await call("run_workflow", { name: "hello", inputs: { who: "bo" } });
    assert.deepEqual(r.structuredContent, { text: "hello bo! ", summary: "said hello bo! to bo" });
    r = await call("hello", { who: "bo", times: 2 });
    assert.deepEqual(r.structuredContent, { text: "hello bo! hello bo! ", loud: "HELLO BO! HELLO BO! ",
      summary: "said hello bo! hello bo! to bo" });
    r = await call("run_workflow", { name: "nope" });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /^no workflow named nope \(there are: broken, customer_intake, hello, spin\)$/);
  });

  it("an error names the workflow, the step and its kind; limits apply as to any execution", T, async () => {
    let r = await call("run_workflow", { name: "broken" });
    assert.equal(r.isError, true);
    // checked before any step runs: the servers and tools first (issue 31)
    assert.match(r.content[0].text,
      /^workflow broken cannot run: step 2 "lookup" calls nowhere\.find: unknown upstream server "nowhere"; configured: crm\. Nothing was run or asked/);
    const t0 = performance.now();
    r = await call("run_workflow", { name: "spin" });
    assert.equal(r.isError, true);
    assert.equal(r.content[0].text, "timeout: execution exceeded timeout_ms=300");
    assert.ok(performance.now() - t0 < 5000);
  });

  it("list_workflows shows the workflows, their steps and the files with problems", T, async () => {
    const r = (await call("list_workflows", {})).structuredContent;
    assert.deepEqual(r.workflows.map((w) => [w.name, w.file, w.tool]), [
      ["broken", "broken.yaml", false], ["customer_intake", "customer_intake.yaml", true],
      ["hello", "hello.json", true], ["spin", "spin.yml", false]]);
    const ci = r.workflows.find((w) => w.name === "customer_intake");
    assert.deepEqual(ci.steps.map((x) => `${x.id}:${x.kind}`),
      ["details:form", "domain:lua", "lookup:call", "record:lua", "save:builtin"]);
    assert.deepEqual(r.problems, [
      "bad.yaml: step 1 \"x\" needs exactly one of call, builtin, skill, lua, form (has form, lua)",
      `huge.yaml: read huge.yaml: ${HUGE.length} bytes is above the limit of 1048576`]);
    assert.equal(r.directory, wdir); // stdio: the default tenant sees where the files are
    const tools = (await s.client.listTools()).tools.map((t) => t.name);
    assert.ok(tools.includes("customer_intake") && tools.includes("hello") && !tools.includes("broken"), tools.join());
  });

  it("files added, changed and broken while the server runs are picked up", T, async () => {
    const before = changed.length;
    writeFileSync(path.join(wdir, "later.yaml"), "name: later\ntool: true\nsteps:\n  - lua: \"'v1'\"\n");
    const until = async (what, pred) => {
      for (let i = 0; i < 200; i++) {
        if (await pred()) return;
        await sleep(25);
      }
      assert.fail(`timed out waiting for ${what}`);
    };
    await until("later to be listed", async () => (await s.client.listTools()).tools.some((t) => t.name === "later"));
    assert.ok(changed.length > before, "tools/list_changed was sent");
    assert.deepEqual((await call("later", {})).structuredContent, { result: "v1" });
    writeFileSync(path.join(wdir, "later.yaml"), "name: later\ntool: true\nsteps:\n  - lua: \"'v2'\"\n");
    await until("v2", async () => JSON.stringify((await call("later", {})).structuredContent) === '{"result":"v2"}');
    writeFileSync(path.join(wdir, "later.yaml"), "name: later\nsteps: [ {lua: 1\n");
    await until("the broken file to be reported", async () =>
      (await call("list_workflows", {})).structuredContent.problems.some((p) => p.startsWith("later.yaml: line ")));
    assert.ok(!(await s.client.listTools()).tools.some((t) => t.name === "later"));
  });
});

// Issue 31, bug 5: a workflow whose servers or tools are not there is listed with the reason and
// not published, is refused before any step (so no form asks the person for nothing), and is
// published once its server has the tool.
describe("workflows whose servers or tools are missing", () => {
  const FIXTURE = path.join(TESTS_DIR, "integration/fixtures/upstream_fixture.mjs");
  const ZEBRAS = "name: zebras\ntool: true\nsteps:\n  - id: count\n    call: { server: grow, tool: zebra_counter, args: {} }\n";
  const FORM_FIRST = `name: form_first
tool: true
steps:
  - id: who
    form: { message: "Who?", schema: { type: object, properties: { name: { type: string } } } }
  - id: find
    call: { server: grow, tool: no_such_tool, args: { q: "\${steps.who.name}" } }
`;
  let bare, gw, wdir;
  const asked = [];
  const changed = [];

  before(async () => {
    wdir = mkdtempSync(path.join(tmpdir(), "moonbox-workflows-missing-"));
    copyFileSync(path.join(REPO, "workflows/customer_intake.yaml"), path.join(wdir, "customer_intake.yaml"));
    writeFileSync(path.join(wdir, "zebras.yaml"), ZEBRAS);
    writeFileSync(path.join(wdir, "form_first.yaml"), FORM_FIRST);
    const clientOptions = { capabilities: { elicitation: {} } };
    // as on a fresh install: no mcpServers at all
    bare = await connectWithConfig({}, { args: ["--workflows-dir", wdir], clientOptions });
    gw = await connectWithConfig({ mcpServers: { grow: nodeServer(FIXTURE, ["grow"]) } },
      { args: ["--workflows-dir", wdir], clientOptions });
    for (const c of [bare.client, gw.client]) {
      c.setRequestHandler(ElicitRequestSchema, async (req) => {
        asked.push(req.params);
        return { action: "accept", content: { name: "Ann" } };
      });
    }
    gw.client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed.push(Date.now()); });
    await waitUpstream(gw.client, "grow");
  });
  after(async () => {
    await bare?.close();
    await gw?.close();
    rmSync(wdir, { recursive: true, force: true });
  });

  const toolNames = async (client) => (await client.listTools()).tools.map((t) => t.name);
  const listed = async (client, name) =>
    (await client.callTool({ name: "list_workflows", arguments: {} })).structuredContent.workflows.find((w) => w.name === name);

  it("customer_intake on an install without a crm server: listed with the reason, not a tool, refused before the form", T, async () => {
    assert.ok(!(await toolNames(bare.client)).includes("customer_intake"));
    const ci = await listed(bare.client, "customer_intake");
    assert.equal(ci.tool, true);
    assert.equal(ci.published, false);
    assert.equal(ci.available, false);
    assert.deepEqual(ci.servers, ["crm"]);
    assert.deepEqual(ci.unavailable, ['step 3 "lookup" calls crm.search_nodes: unknown upstream server "crm": ' +
      "no servers are configured (mcpServers, docs/gateway.md)"]);
    asked.length = 0;
    const r = await bare.client.callTool({ name: "run_workflow", arguments: { name: "customer_intake", inputs: { account: "acme" } } });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /^workflow customer_intake cannot run: step 3 "lookup" calls crm\.search_nodes: unknown upstream server "crm"/);
    assert.equal(asked.length, 0, "nobody was asked to fill in a form");
    // published under its own name it is not: the call is an unknown tool
    await assert.rejects(bare.client.callTool({ name: "customer_intake", arguments: { account: "acme" } }), /Unknown tool/);
  });

  it("a tool the server does not have: not published, refused before the form; sandbox run_workflow checks too", T, async () => {
    assert.ok(!(await toolNames(gw.client)).includes("form_first"));
    const ff = await listed(gw.client, "form_first");
    assert.equal(ff.published, false);
    assert.match(ff.unavailable[0], /^step 2 "find" calls grow\.no_such_tool: server "grow" has no tool "no_such_tool"/);
    asked.length = 0;
    let r = await gw.client.callTool({ name: "run_workflow", arguments: { name: "form_first" } });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /^workflow form_first cannot run: step 2 "find" calls grow\.no_such_tool/);
    // the same definition run from code: the sandbox's run_workflow checks before its first step
    r = await gw.client.callTool({ name: "execute_code", arguments: { code: `return run_workflow({ name = "inline", steps = {
      { id = "who", form = { message = "Who?", schema = { type = "object", properties = { name = { type = "string" } } } } },
      { id = "find", call = { server = "grow", tool = "no_such_tool", args = {} } } } })` } });
    assert.equal(r.isError, true);
    assert.match(r.structuredContent.error, /^workflow inline, step 2 "find" \(call\): server "grow" has no tool "no_such_tool".*nothing was run/);
    assert.equal(asked.length, 0, "nobody was asked to fill in a form");
  });

  it("published when the server comes to have the tool (tools/list_changed), and then it runs", T, async () => {
    assert.ok(!(await toolNames(gw.client)).includes("zebras"));
    assert.equal((await listed(gw.client, "zebras")).published, false);
    const before = changed.length;
    // calling "first" makes the fixture add zebra_counter and send notifications/tools/list_changed
    const r = await gw.client.callTool({ name: "execute_code", arguments: { code: "return servers.grow.first({})" } });
    assert.notEqual(r.isError, true, JSON.stringify(r));
    for (let i = 0; i < 400 && !(await toolNames(gw.client)).includes("zebras"); i++) await sleep(25);
    assert.ok((await toolNames(gw.client)).includes("zebras"), "zebras is published");
    assert.ok(changed.length > before, "tools/list_changed was sent to the client");
    const z = await gw.client.callTool({ name: "zebras", arguments: {} });
    assert.deepEqual(z.structuredContent, { zebras: 7 });
    assert.equal((await listed(gw.client, "zebras")).available, true);
  });
});

// "Done when ... a fresh data directory's first workflow does something useful" (issue 31): a
// new data directory seeded from the repository's examples (--share-dir: skills/, catalog/ and
// workflows/, as `make install` ships them) publishes csv_report, which needs no upstream server,
// and not customer_intake, whose crm server is not configured.
describe("a fresh data directory's first workflow", () => {
  let s;
  before(async () => {
    s = await connectClient({ args: ["--share-dir", REPO] });
  });
  after(async () => { await s?.close(); });

  it("csv_report is published and describes a CSV table; customer_intake is listed as needing crm", T, async () => {
    const tools = (await s.client.listTools()).tools.map((t) => t.name);
    assert.ok(tools.includes("csv_report"), tools.join());
    assert.ok(!tools.includes("customer_intake"), tools.join());
    const list = (await s.client.callTool({ name: "list_workflows", arguments: {} })).structuredContent;
    const byName = Object.fromEntries(list.workflows.map((w) => [w.name, w]));
    assert.equal(byName.csv_report.published, true);
    assert.equal(byName.customer_intake.published, false);
    assert.match(byName.customer_intake.unavailable[0], /crm/);

    const csv = "region,amount,note\nnorth,10,first\nsouth,5,\"a, b\"\nnorth,7.5,third\n";
    let r = await s.client.callTool({ name: "csv_report", arguments: { csv, group_by: "region", save_as: "reports/sales.json" } });
    assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 800));
    const rep = r.structuredContent.report;
    assert.equal(rep.rows, 3);
    assert.deepEqual(rep.columns, ["amount", "note", "region"]);
    assert.deepEqual(rep.numeric, { amount: { sum: 22.5, mean: 7.5, min: 5, max: 10, count: 3 } });
    assert.deepEqual(rep.counts, { north: 2, south: 1 });
    assert.equal(rep.sample[1].note, "a, b");
    assert.equal(r.structuredContent.saved, "reports/sales.json");
    const saved = await s.client.callTool({ name: "read_workspace_file", arguments: { path: "reports/sales.json" } });
    assert.deepEqual(JSON.parse(saved.structuredContent.content), rep);

    // from a workspace file, without the optional steps
    await s.client.callTool({ name: "write_workspace_file", arguments: { path: "in/orders.csv", content: "id,status\n1,paid\n2,open\n" } });
    r = await s.client.callTool({ name: "run_workflow", arguments: { name: "csv_report", inputs: { path: "in/orders.csv" } } });
    assert.notEqual(r.isError, true, JSON.stringify(r).slice(0, 800));
    assert.deepEqual(r.structuredContent.report, { rows: 2, columns: ["id", "status"], numeric: { id: { sum: 3, mean: 1.5, min: 1, max: 2, count: 2 } },
      sample: [{ id: "1", status: "paid" }, { id: "2", status: "open" }], source: "in/orders.csv" });
    // neither given: the error says what to give
    r = await s.client.callTool({ name: "csv_report", arguments: {} });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /give csv \(the CSV text\) or path/);
  });
});
