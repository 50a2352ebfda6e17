// What agents trained on Python or JavaScript, or on other code-execution servers, send (issue
// 31, "what agents send"): code in a Markdown fence, Python and JavaScript forms that get a
// hint, re.match with Python's argument order, context_vars named like a built-in, the argument
// names and tool names of other servers, and limits sized for real data jobs. Through the real
// server and the SDK client.

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";

import { McpError } from "@modelcontextprotocol/sdk/types.js";

import { connectClient, execute, toolOk, toolErrText } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };

describe("what agents send", () => {
  let s;
  let client;
  before(async () => {
    s = await connectClient();
    client = s.client;
  });
  after(async () => { await s?.close(); });

  /** structuredContent of an execution (success or not). */
  const run = async (args) => {
    const res = await execute(client, typeof args === "string" ? { code: args } : args);
    assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 500));
    assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent);
    return res.structuredContent;
  };
  const hintOf = (sc) => (sc.error ?? "").match(/\(hint: (.*)\)$/)?.[1] ?? null;

  describe("Markdown fences", () => {
    it("one fence around the whole code is removed, and the answer says so", T, async () => {
      for (const code of ["```lua\nreturn 1 + 1\n```", "```\nreturn 1 + 1\n```\n", "\n```Lua\r\nreturn 1 + 1\r\n```  \n",
        "~~~lua\nreturn 1 + 1\n~~~"]) {
        const sc = await run(code);
        assert.equal(sc.success, true, `${JSON.stringify(code)}: ${sc.error}`);
        assert.equal(sc.result, 2);
        assert.match(sc.note, /Markdown fence/);
      }
    });

    it("line numbers stay those of the code as sent", T, async () => {
      const sc = await run("```lua\nlocal x = 1\nerror('boom')\n```");
      assert.equal(sc.success, false);
      assert.match(sc.error, /^code:3: boom/);
      assert.match(sc.note, /Markdown fence/);
    });

    it("backticks inside the code, and code that is not one whole fence, are left alone", T, async () => {
      let sc = await run("return '```' .. \"`\"");
      assert.equal(sc.result, "````");
      assert.equal(sc.note, undefined);
      sc = await run("local s = [[\n```lua\nx\n```\n]]\nreturn #s");
      assert.equal(sc.result, 13);
      assert.equal(sc.note, undefined);
      // two blocks, or text around one: not stripped, and the hint says what to send
      for (const code of ["```lua\nreturn 1\n```\n```lua\nreturn 2\n```", "```lua\nreturn 1\n```\nThis returns 1."]) {
        sc = await run(code);
        assert.equal(sc.error_type, "syntax");
        assert.equal(sc.note, undefined);
        assert.match(hintOf(sc), /without Markdown/, sc.error);
      }
    });

    it("Python or JavaScript in a fence gets the language hint", T, async () => {
      let sc = await run("```python\nimport json\nprint(json.dumps({}))\n```");
      assert.equal(sc.error_type, "syntax");
      assert.match(hintOf(sc), /looks like Python: there is no import/);
      assert.match(sc.note, /Markdown fence/);
      // no form of the code matches a rule: the tag says what it is
      sc = await run("```javascript\nclass A extends B {}\n```");
      assert.equal(sc.error_type, "syntax");
      assert.match(hintOf(sc), /fenced as JavaScript/, sc.error);
    });
  });

  describe("hints", () => {
    const syntax = [
      ["# count the rows\nreturn 1", /comments start with --, not #/],
      ["local x = 1\nx += 1\nreturn x", /there is no \+=/],
      ["if 1 != 2 then return 1 end", /not equal is ~=/],
      ["local t = json.loads(s) +", /json\.decode\(s\)/],
      ["local s = JSON.stringify(t) }", /json\.encode\(v\)/],
    ];
    for (const [code, want] of syntax) {
      it(`syntax error: ${JSON.stringify(code)}`, T, async () => {
        const sc = await run(code);
        assert.equal(sc.error_type, "syntax");
        assert.match(hintOf(sc) ?? "", want, sc.error);
      });
    }
    const runtime = [
      ["return len({1, 2})", /global 'len'/, /#t/],
      ["console.log('x')", /global 'console'/, /print\(/],
      ['local n = 3\nprint(f"{n} items")', /global 'f'/, /string\.format/],
      ["return json.loads('{}')", /field 'loads'/, /json\.decode/],
      ["return json.dumps({})", /field 'dumps'/, /json\.encode/],
      ["return JSON.parse('{}')", /global 'JSON'/, /json\.decode/],
      ["return JSON.stringify({})", /global 'JSON'/, /json\.encode/],
    ];
    for (const [code, msg, want] of runtime) {
      it(`run-time error: ${JSON.stringify(code)}`, T, async () => {
        const sc = await run(code);
        assert.equal(sc.error_type, "runtime");
        assert.match(sc.error, msg);
        assert.match(hintOf(sc) ?? "", want, sc.error);
      });
    }

    it("valid Lua with such text in strings and comments runs, and no error gets a hint from it", T, async () => {
      const text = `local s = "x += 1 != 2 # len(t) console.log json.loads JSON.stringify print(f\\"x\\")"
-- x += 1; if a != b: console.log(len(t))
--[[ # heading
json.dumps(t) ]]
local long = [[
# not a comment
i++
]]
return #s > 0 and #long > 0`;
      let sc = await run(text);
      assert.equal(sc.success, true, sc.error);
      assert.equal(sc.result, true);
      // the same text, then a real syntax error of another kind: Lua's message alone
      sc = await run(`${text}\nreturn return`);
      assert.equal(sc.error_type, "syntax");
      assert.equal(hintOf(sc), null, sc.error);
      // a run-time error of another kind
      sc = await run(`local s = "len(t) console.log" error("boom " .. #s)`);
      assert.equal(sc.error_type, "runtime");
      assert.equal(hintOf(sc), null, sc.error);
    });
  });

  describe("re.match with Python's argument order", () => {
    it("a call that would match with its arguments swapped gets a note", T, async () => {
      let sc = await run("return re.match('(\\\\d+)', 'order 12')");
      assert.equal(sc.success, true);
      assert.equal(sc.result, null);
      assert.match(sc.note, /^code:1: re\.match\(s, pattern\) found no match, but would with its first two arguments swapped/);
      sc = await run("local a, b = re.find('[a-z]+', 'order 12') return a");
      assert.match(sc.note, /re\.find\(s, pattern\)/);
    });

    it("no note for a right call, a plain no-match, or a swap that would not match either", T, async () => {
      for (const code of [
        "return re.match('order 12', '(\\\\d+)')",           // the right order: "12"
        "return re.match('order', '\\\\d+')",                 // no match, the subject has no regex syntax
        "return re.match('(\\\\d+)', 'no digits here')",      // no match either way
        "return re.match('(x)', 'order 12', 1)",             // an init: meant as written
      ]) {
        const sc = await run(code);
        assert.equal(sc.success, true, sc.error);
        assert.equal(sc.note, undefined, `${code}: ${sc.note}`);
      }
    });
  });

  describe("context_vars named like a built-in", () => {
    it("are refused with an error naming them and how to rename", T, async () => {
      let sc = await run({ code: "return json.encode({a = 1})", context_vars: { json: { a: 1 } } });
      assert.equal(sc.success, false);
      assert.match(sc.error, /context_vars "json" is the name of a global the sandbox provides/);
      assert.match(sc.error, /rename it/);
      sc = await run({ code: "return 1", context_vars: { rows: [1], re: "x", servers: 1, string: "s", mcp: 2, filter_by_field: 3 } });
      assert.equal(sc.success, false);
      for (const k of ["re", "servers", "string", "mcp", "filter_by_field"]) assert.match(sc.error, new RegExp(`"${k}"`));
      assert.doesNotMatch(sc.error, /"rows"/);
    });

    it("other names work as before", T, async () => {
      const sc = await run({ code: "return json.encode(data) .. re.match(text, '\\\\d+')", context_vars: { data: { a: 1 }, text: "n 7" } });
      assert.equal(sc.success, true, sc.error);
      assert.equal(sc.result, '{"a":1}7');
    });
  });

  describe("argument and tool names of other servers", () => {
    it("get_tool_definition takes name, as search_tools results call it", T, async () => {
      const found = toolOk(await client.callTool({ name: "search_tools", arguments: { query: "filter rows by a field" } }));
      const first = found.tools[0];
      assert.equal(typeof first.name, "string");
      const byName = toolOk(await client.callTool({ name: "get_tool_definition", arguments: { name: first.name } }));
      const byToolName = toolOk(await client.callTool({ name: "get_tool_definition", arguments: { tool_name: first.name } }));
      assert.deepEqual(byName, byToolName);
      assert.match(toolErrText(await client.callTool({ name: "get_tool_definition", arguments: { name: "a", tool_name: "a" } })),
        /give tool_name or name, not both/);
    });

    it("list_workspace_files takes path, and the file tools' schemas let filename through", T, async () => {
      toolOk(await client.callTool({ name: "write_workspace_file", arguments: { filename: "sub/a.txt", content: "x" } }));
      toolOk(await client.callTool({ name: "write_workspace_file", arguments: { path: "top.txt", content: "y" } }));
      const listed = toolOk(await client.callTool({ name: "list_workspace_files", arguments: { path: "sub" } }));
      assert.deepEqual(listed.files.map((f) => f.path), ["sub/a.txt"]);
      const { tools } = await client.listTools();
      for (const n of ["read_workspace_file", "write_workspace_file", "delete_workspace_file"]) {
        const schema = tools.find((t) => t.name === n).inputSchema;
        assert.ok(schema.properties.filename, `${n} shows filename`);
        assert.ok(!(schema.required ?? []).includes("path"), `${n}: path in required refuses {filename}`);
      }
      const list = tools.find((t) => t.name === "list_workspace_files").inputSchema;
      assert.ok(list.properties.path, "list_workspace_files shows path");
      const get = tools.find((t) => t.name === "get_tool_definition").inputSchema;
      assert.ok(get.properties.name && !(get.required ?? []).includes("tool_name"));
    });

    it("tools of other servers point to the moonbox way", T, async () => {
      for (const [name, want] of [["list_mcp_tools", /search_tools/], ["get_mcp_tool_details", /get_tool_definition/],
        ["callMCPTool", /servers\.<server>\.<tool>/]]) {
        const e = await client.callTool({ name, arguments: {} }).then(() => null, (err) => err);
        assert.ok(e instanceof McpError, `${name}: ${e}`);
        assert.match(e.message, new RegExp(`Unknown tool: ${name}\\. moonbox `));
        assert.match(e.message, want);
      }
    });
  });

  describe("limits for real data jobs", () => {
    it("defaults of 30 s and 256 MiB, timeout_seconds up to 300 s", T, async () => {
      const { tools } = await client.listTools();
      const exec = tools.find((t) => t.name === "execute_code");
      assert.match(exec.description, /timeout_ms \(default 30000, max 300000\), memory_mb \(default 256, max 1024\)/);
      const sc = await run({ code: "return 1", timeout_seconds: 120 });
      assert.equal(sc.success, true, sc.error);
    });

    it("a refusal names the maximum and the option that raises it", T, async () => {
      for (const [args, want] of [
        [{ timeout_seconds: 301 }, /timeout_seconds=301 exceeds the maximum max_timeout_ms=300000 \(300 s\).*--max-timeout-ms, MOONBOX_MAX_TIMEOUT_MS/],
        [{ timeout_ms: 300001 }, /timeout_ms=300001 exceeds the maximum max_timeout_ms=300000.*--max-timeout-ms/],
        [{ memory_mb: 1025 }, /memory_mb=1025 exceeds the maximum max_memory_mb=1024.*--max-memory-mb/],
      ]) {
        const res = await execute(client, { code: "return 1", ...args });
        assert.match(toolErrText(res), want);
      }
    });
  });
});
