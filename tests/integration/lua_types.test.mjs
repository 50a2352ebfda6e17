// The typed Lua API of upstream tools (issue 18): LuaLS stubs generated from the schemas of real
// upstream servers (server-everything, server-filesystem, server-memory, run with this node) in
// get_tool_definition (format "json", "lua", "both") and in the resource
// moonbox://types/servers.lua; every stub must parse (luac5.4 -p, else lua5.4's load). Result
// types inferred from calls to tools without an outputSchema appear after a call, marked
// inferred, with field names and types only (no value of the results), per tenant (HTTP tokens);
// a fixture upstream with hostile schemas and result keys that are data (e-mail addresses) still
// gives a file that parses and holds none of them.
// Run: cd tests && MOONBOX=../build/moonbox node run-node.mjs integration/lua_types.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import {
  TESTS_DIR, UPSTREAM_JS, connectWithConfig, nodeServer, startHttp, upstreamStats, waitUpstream,
} from "../lib/moonbox.mjs";

const T = { timeout: 90000 };
const URI = "moonbox://types/servers.lua";
const FIXTURE = path.join(TESTS_DIR, "integration/fixtures/upstream_fixture.mjs");
const SERVERS = ["everything", "fs", "memory"];

const has = (cmd) => spawnSync(cmd, ["-v"], { encoding: "utf8" }).status === 0;
const LUAC = has("luac5.4") ? "luac5.4" : null;

/** Parses Lua text as luac -p does (luac5.4 when installed, else lua5.4's load); returns the error or null. */
function luaParseError(text) {
  const r = LUAC ? spawnSync(LUAC, ["-p", "-"], { input: text, encoding: "utf8" })
    : spawnSync("lua5.4", ["-e", 'local f, e = load(io.read("a"), "=stub", "t") if not f then io.stderr:write(e) os.exit(1) end'],
      { input: text, encoding: "utf8" });
  if (r.error) throw r.error;
  return r.status === 0 ? null : (r.stderr || `exit ${r.status}`);
}

function ok(res) {
  assert.notEqual(res.isError, true, `unexpected tool error: ${JSON.stringify(res).slice(0, 800)}`);
  return res.structuredContent;
}

const definition = async (client, tool_name, category, format) =>
  ok(await client.callTool({ name: "get_tool_definition", arguments: { tool_name, category, ...(format ? { format } : {}) } }));

async function listTools(client, category) {
  const r = ok(await client.callTool({ name: "search_tools", arguments: { query: "", category, detail_level: "name", limit: 200 } }));
  return r.tools.map((t) => t.name);
}

async function exec(client, code) {
  const sc = ok(await client.callTool({ name: "execute_code", arguments: { code } }));
  assert.equal(sc.success, true, `execution failed: ${sc.error}`);
  return sc.result;
}

const readTypes = async (client) => {
  const r = await client.readResource({ uri: URI });
  assert.equal(r.contents.length, 1);
  assert.equal(r.contents[0].mimeType, "text/x-lua");
  return r.contents[0].text;
};

describe("Lua types of real upstream servers (everything, filesystem, memory)", () => {
  let s;
  let dir;
  const SECRET = `s3cr3t-${process.pid}-value`;

  before(async () => {
    dir = realpathSync(mkdtempSync(path.join(tmpdir(), "moonbox-types-")));
    s = await connectWithConfig({
      mcpServers: {
        everything: nodeServer(UPSTREAM_JS.everything, ["stdio"], { env: { TYPES_TEST_SECRET: SECRET } }),
        fs: nodeServer(UPSTREAM_JS.filesystem, [dir], { allowWrites: false }),
        memory: nodeServer(UPSTREAM_JS.memory, [], { env: { MEMORY_FILE_PATH: path.join(dir, "memory.jsonl") } }),
      },
    });
    for (const name of SERVERS) await waitUpstream(s.client, name);
    // server-everything adds a tool after initialize (list_changed): wait for the settled list
    await waitUpstream(s.client, "everything", (u) => u?.tools === 15, 10000);
  });
  after(async () => {
    await s?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("every tool's stub parses, in each format; lua drops the schemas; figures of their size", T, async (t) => {
    const sizes = { json: 0, lua: 0, both: 0 };
    let n = 0;
    for (const cat of SERVERS) {
      const names = await listTools(s.client, cat);
      assert.ok(names.length >= 9, `${cat}: ${names.length} tools`);
      for (const name of names) {
        const json = await definition(s.client, name, cat);
        const lua = await definition(s.client, name, cat, "lua");
        const both = await definition(s.client, name, cat, "both");
        assert.equal(json.lua_types, undefined, `${cat}.${name}: json has no stub`);
        assert.deepEqual(both.inputSchema, json.inputSchema, `${cat}.${name}: both keeps the schema`);
        assert.equal(lua.inputSchema, undefined, `${cat}.${name}: lua drops inputSchema`);
        assert.equal(lua.outputSchema, undefined, `${cat}.${name}: lua drops outputSchema`);
        assert.equal(lua.lua_types, both.lua_types);
        const stub = lua.lua_types;
        assert.equal(typeof stub, "string");
        assert.equal(luaParseError(stub), null, `${cat}.${name}: the stub does not parse:\n${stub}`);
        assert.match(stub, /^---@param args\?? \S.*$/m, `${cat}.${name}`);
        assert.match(stub, /^---@return \S+ result /m, `${cat}.${name}`);
        // the call the stub documents is the one sandbox code makes
        const m = stub.match(/^function (servers\.\w+\.\w+)\(args\) end$/m) ?? stub.match(/^(servers.*) = function\(args\) end$/m);
        assert.ok(m, `${cat}.${name}: no function in\n${stub}`);
        const typ = await exec(s.client, `return type(${m[1]})`);
        assert.equal(typ, "function", `${m[1]} is what sandbox code calls`);
        if (json.outputSchema) assert.match(stub, /^---@return \S+\.result result its structuredContent/m, `${cat}.${name}`);
        for (const f of ["json", "lua", "both"]) sizes[f] += JSON.stringify(f === "json" ? json : f === "lua" ? lua : both).length;
        n++;
      }
    }
    t.diagnostic(`${n} tools; definition bytes in all: json ${sizes.json}, lua ${sizes.lua}, both ${sizes.both}`);
    // context cost: "lua" replaces the schemas at about their cost (at most 10% more for these
    // pinned servers); "both" is the dearest
    assert.ok(sizes.lua <= sizes.json * 1.1, `lua ${sizes.lua} vs json ${sizes.json}`);
    assert.ok(sizes.both > sizes.lua && sizes.both > sizes.json, JSON.stringify(sizes));
  });

  it("a known tool's stub: arguments, enum alias and declared result", T, async () => {
    const d = await definition(s.client, "read_graph", "memory", "lua");
    assert.match(d.lua_types, /^---@return memory\.read_graph\.result result its structuredContent \(outputSchema\)$/m);
    assert.match(d.lua_types, /^---@class memory\.read_graph\.result\.entities_item$/m);
    assert.match(d.lua_types, /^function servers\.memory\.read_graph\(args\) end$/m);
    const sum = await definition(s.client, "get-sum", "everything", "lua");
    assert.match(sum.lua_types, /^---@field a number First number$/m);
    assert.match(sum.lua_types, /^function servers\.everything\.get_sum\(args\) end$/m);
    const ann = await definition(s.client, "get-annotated-message", "everything", "lua");
    assert.match(ann.lua_types, /^---@alias everything\.get_annotated_message\.args\.messageType "error"\|"success"\|"debug"$/m);
  });

  it("the resource is listed, holds one stub per callable tool and parses as a whole", T, async () => {
    const list = await s.client.listResources();
    const r = list.resources.find((x) => x.uri === URI);
    assert.ok(r, `not listed: ${list.resources.map((x) => x.uri)}`);
    assert.equal(r.mimeType, "text/x-lua");
    const text = await readTypes(s.client);
    assert.match(text, /^---@meta\n/);
    assert.equal(luaParseError(text), null);
    const stats = await upstreamStats(s.client);
    const callable = SERVERS.reduce((a, n) => a + stats[n].callable_tools, 0);
    const fns = text.match(/^(function servers\..*\(args\) end|servers.* = function\(args\) end)$/mg) ?? [];
    assert.equal(fns.length, callable, `functions in the file vs callable tools`);
    // tools refused by the policy (allowWrites: false) are not offered
    assert.ok(stats.fs.callable_tools < stats.fs.tools, JSON.stringify(stats.fs));
    assert.equal(/servers\.fs\.write_file\b/.test(text), false);
    assert.match(text, /^function servers\.fs\.read_text_file\(args\) end$/m);
    for (const cat of SERVERS) {
      for (const name of await listTools(s.client, cat)) assert.ok(text.includes(`\n--- ${cat}.${name}`), `${cat}.${name} missing`);
    }
  });

  it("a tool without outputSchema gets an inferred result type after a call, holding no value", T, async () => {
    const before = await definition(s.client, "get-env", "everything", "lua");
    assert.equal(before.inferredOutputSchema, undefined);
    assert.match(before.lua_types, /^---@return any result /m);
    // get-env answers with the environment as JSON text: sandbox code gets a table of strings
    const env = await exec(s.client, "return servers.everything.get_env({})");
    assert.equal(env.TYPES_TEST_SECRET, SECRET);
    const echoed = await exec(s.client, `return servers.everything.echo({ message = "${SECRET}" })`);
    assert.match(echoed, new RegExp(SECRET));

    const after = await definition(s.client, "get-env", "everything", "both");
    assert.equal(after.inferredOutputSchema?.type, "object", JSON.stringify(after.inferredOutputSchema));
    assert.match(after.inferredOutputSchema.description, /inferred from 1 successful result/);
    assert.deepEqual(after.inferredOutputSchema.properties.TYPES_TEST_SECRET, { type: "string" });
    assert.match(after.lua_types, /^-- inferred: everything\.get-env has no outputSchema/m);
    assert.match(after.lua_types, /^---@return everything\.get_env\.inferred_result result inferred from results seen/m);
    assert.match(after.lua_types, /^---@field TYPES_TEST_SECRET string$/m);
    assert.equal(luaParseError(after.lua_types), null);
    const echo = await definition(s.client, "echo", "everything", "lua");
    assert.match(echo.lua_types, /^---@return string result inferred/m);

    const text = await readTypes(s.client);
    assert.equal(luaParseError(text), null);
    assert.match(text, /^---@class everything\.get_env\.inferred_result$/m);
    for (const doc of [text, JSON.stringify(after), JSON.stringify(echo)]) {
      assert.equal(doc.includes(SECRET), false, "a value of a result was recorded");
      assert.equal(doc.includes(dir), false, "a value (a path) was recorded");
    }
    // a tool with an outputSchema is typed by it, not by inference
    await exec(s.client, `return servers.fs.list_allowed_directories({})`);
    const fsd = await definition(s.client, "list_allowed_directories", "fs", "both");
    assert.equal(fsd.inferredOutputSchema, undefined);
  });

  it("bad format values are refused with the allowed ones, and the server keeps serving", T, async () => {
    for (const format of ["xml", 7, ""]) {
      const res = await s.client.callTool({ name: "get_tool_definition", arguments: { tool_name: "echo", category: "everything", format } });
      assert.equal(res.isError, true, JSON.stringify(format));
      assert.match(res.content[0].text, /format must be/);
    }
    await definition(s.client, "echo", "everything", "lua");
  });
});

describe("Lua types from a hostile upstream (fixture with crafted schemas and results)", () => {
  let s;
  let dir;
  const evil = "x\n]]--[[ \n os.exit(1) --\r\n]==] \u001b @param y string";
  const deep = (n) => (n === 0 ? { type: "string" } : { type: "object", properties: { [`n${n}`]: deep(n - 1) } });
  const tools = [
    {
      name: 'evil name]]"\\', description: evil, annotations: { readOnlyHint: true },
      inputSchema: {
        type: "object", description: evil,
        properties: {
          [evil]: { type: "string", description: evil },
          'quo"te\\': { enum: ["a", 'b"', "c\nd"] },
          many: { enum: Array.from({ length: 5000 }, (_, i) => `v${i}`) },
          self: { $ref: "#" }, loop: { $ref: "#/$defs/L" }, deep: deep(60),
        },
        $defs: { L: { type: "object", properties: { next: { $ref: "#/$defs/L" } } } },
      },
      result: { content: [{ type: "text", text: "{}" }], structuredContent: { ok: true } },
    },
    {
      name: "end", description: "a keyword", inputSchema: { type: "object" }, annotations: { readOnlyHint: true },
      result: {
        content: [{ type: "text", text: "x" }],
        structuredContent: {
          "alice@example.com": { phone: "+1 555 0100" }, "bob@example.com": { phone: "+1 555 0101" },
        },
      },
    },
    {
      name: "people", description: "rows with a field named like data", inputSchema: { type: "object" },
      annotations: { readOnlyHint: true },
      result: { content: [{ type: "text", text: JSON.stringify({ rows: [{ id: 7, "4111 1111 1111 1111": "card" }], meta: { "user 12345": 1 } }) }] },
    },
  ];

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "moonbox-types-evil-"));
    const file = path.join(dir, "tools.json");
    writeFileSync(file, JSON.stringify(tools));
    s = await connectWithConfig({ mcpServers: { "evil srv": nodeServer(FIXTURE, ["typed"], { env: { FIXTURE_TOOLS: file } }) } });
    try {
      await waitUpstream(s.client, "evil srv");
    } catch (e) {
      e.message += `\nmoonbox stderr (tail):\n${s.stderr().slice(-3000)}`;
      throw e;
    }
  });
  after(async () => {
    await s?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("stubs of hostile schemas parse, stay bounded and keep schema text inside comments", T, async () => {
    await exec(s.client, 'local r = mcp.call("evil srv", "end", {}) return servers.evil_srv.people({}).rows[1].id');
    const text = await readTypes(s.client);
    assert.equal(luaParseError(text), null, text.slice(0, 3000));
    assert.ok(text.length < 200000, `${text.length} bytes`);
    for (const line of text.split("\n")) {
      assert.ok(line === "" || line.startsWith("--") || /^servers(\.\w+|\[".*"\])* = (\{\}|function\(args\) end)$/.test(line)
        || /^function servers\.\w+\.\w+\(args\) end$/.test(line), `a line of code that is not a stub: ${JSON.stringify(line)}`);
    }
    assert.match(text, /^servers\.evil_srv\["end"\] = function\(args\) end$/m);
    assert.match(text, /^function servers\.evil_srv\.evil_name____\(args\) end$/m);
    assert.equal(/^---\s*@param y/m.test(text), false, "a description became an annotation");
    // the inferred shapes: a map for the e-mail keys, no key or value of the results
    assert.match(text, /^---@return table<string, evil_srv\.end\.inferred_result_value> result inferred/m);
    for (const v of ["alice@example.com", "bob@example.com", "555", "4111", "12345", "card"]) {
      assert.equal(text.includes(v), false, `${v} reached the types`);
    }
    const d = await definition(s.client, "people", "evil srv", "lua");
    assert.deepEqual(d.inferredOutputSchema.properties.rows.items,
      { type: "object", additionalProperties: { anyOf: [{ type: "string" }, { type: "integer" }] } });
    assert.deepEqual(d.inferredOutputSchema.properties.meta, { type: "object", additionalProperties: { type: "integer" } });
  });
});

describe("inferred types are per tenant (HTTP tokens)", () => {
  let srv;
  const TA = "token-for-types-alpha-0123456789", TB = "token-for-types-beta-9876543210";
  before(async () => {
    const servers = JSON.stringify({ everything: nodeServer(UPSTREAM_JS.everything, ["stdio"]) });
    srv = await startHttp(["--http-tokens", `${TA}=alpha,${TB}=beta`, "--mcp-servers", servers]);
  });
  after(async () => { await srv?.stop(); });

  async function connect(token) {
    const transport = new StreamableHTTPClientTransport(new URL(srv.url),
      { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
    const client = new Client({ name: "moonbox-types-test", version: "0.0.0" });
    await client.connect(transport);
    return client;
  }

  it("one tenant's calls shape its own types only", T, async () => {
    const a = await connect(TA);
    const b = await connect(TB);
    try {
      await waitUpstream(a, "everything");
      await exec(a, "return servers.everything.get_env({})");
      const da = await definition(a, "get-env", "everything", "lua");
      assert.equal(da.inferredOutputSchema?.type, "object");
      const db = await definition(b, "get-env", "everything", "lua");
      assert.equal(db.inferredOutputSchema, undefined, "beta sees alpha's inferred type");
      assert.match(db.lua_types, /^---@return any result /m);
      const ta = await readTypes(a);
      const tb = await readTypes(b);
      assert.match(ta, /everything\.get_env\.inferred_result/);
      assert.equal(tb.includes("inferred_result"), false);
      assert.equal(luaParseError(tb), null);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
