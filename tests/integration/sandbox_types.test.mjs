// The sandbox API's own LuaLS types (issue 35): moonbox://types/sandbox.lua, `moonbox types DIR`
// and get_tool_definition's lua_types for a sandbox function, all made from the catalog's
// lua/catalog/sandbox_api.lua (lua/mcp/sandbox_types.lua). The file must parse, and it must
// match the environment the sandbox really builds, both ways: every name sandbox code can reach
// beyond stock Lua 5.4 is declared, and every name declared is reachable.
// Run: cd tests && MOONBOX=../build/moonbox node run-node.mjs integration/sandbox_types.test.mjs
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { MOONBOX, connectClient } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const URI = "moonbox://types/sandbox.lua";

const has = (cmd) => spawnSync(cmd, ["-v"], { encoding: "utf8" }).status === 0;
function luaParseError(text) {
  const r = has("luac5.4") ? spawnSync("luac5.4", ["-p", "-"], { input: text, encoding: "utf8" })
    : spawnSync("lua5.4", ["-e", 'local f, e = load(io.read("a"), "=t", "t") if not f then io.stderr:write(e) os.exit(1) end'],
      { input: text, encoding: "utf8" });
  if (r.error) throw r.error;
  return r.status === 0 ? null : (r.stderr || `exit ${r.status}`);
}

// what code sees: globals, and one level into every library table (name.field)
const ENV = `local out = {}
for k, v in pairs(_G) do
  if type(v) == "table" and k ~= "_G" then
    for k2 in pairs(v) do out[#out + 1] = k .. "." .. tostring(k2) end
  else out[#out + 1] = k end
end
table.sort(out) return out`;

// the same in a stock Lua 5.4 state, for what LuaLS's own Lua 5.4 library already describes
function stockNames() {
  const r = spawnSync("lua5.4", ["-e", ENV.replace("return out", "print(table.concat(out, ' '))")], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return new Set(r.stdout.trim().split(/\s+/));
}

// names the meta file declares: `function a.b(`, `a.b = `, `a = `
function declared(text) {
  const out = new Set();
  for (const m of text.matchAll(/^function ([\w.]+)\(/gm)) out.add(m[1]);
  for (const m of text.matchAll(/^([\w.]+) = /gm)) out.add(m[1]);
  return out;
}

describe("the sandbox API's LuaLS types", () => {
  let s;
  before(async () => { s = await connectClient(); });
  after(async () => { await s?.close(); });

  it("moonbox://types/sandbox.lua is listed, parses and matches the sandbox's environment both ways", T, async () => {
    const list = await s.client.listResources();
    assert.ok(list.resources.some((r) => r.uri === URI), JSON.stringify(list.resources.map((r) => r.uri)));
    const text = (await s.client.readResource({ uri: URI })).contents[0].text;
    assert.match(text, /^---@meta sandbox/);
    assert.equal(luaParseError(text), null);
    const env = (await s.client.callTool({ name: "execute_code", arguments: { code: ENV } })).structuredContent.result;
    assert.ok(Array.isArray(env) && env.length > 100, JSON.stringify(env).slice(0, 300));
    const stock = stockNames();
    const decl = declared(text);
    const have = new Set([...env, ...env.filter((n) => n.includes(".")).map((n) => n.split(".")[0])]);
    // every name beyond stock Lua is declared ...
    const undeclared = env.filter((n) => !stock.has(n) && !decl.has(n));
    assert.deepEqual(undeclared, [], "names the sandbox builds that sandbox.lua does not declare");
    // ... and every declared one is there (servers is filled only with upstreams configured)
    const missing = [...decl].filter((n) => !have.has(n) && n !== "servers");
    assert.deepEqual(missing, [], "names sandbox.lua declares that the sandbox does not have");
    // the stock libraries the sandbox lacks are not declared, and .luarc.json disables them
    for (const gone of ["io.open", "os.execute", "os.getenv", "debug.getinfo", "package.loadlib", "dofile", "loadfile", "string.dump"])
      assert.ok(!decl.has(gone) && !have.has(gone), gone);
  });

  it("get_tool_definition gives a sandbox function's stub in format lua and both", T, async () => {
    for (const format of ["lua", "both"]) {
      const d = (await s.client.callTool({ name: "get_tool_definition",
        arguments: { tool_name: "json.encode", format } })).structuredContent;
      const stub = d.lua_types ?? d.extra?.lua_types;
      assert.match(stub ?? "", /---@param value any[^\n]*\n---@return string[^\n]*\nfunction json\.encode\(value\) end/, JSON.stringify(d).slice(0, 600));
      assert.equal(luaParseError(stub), null);
    }
    const plain = (await s.client.callTool({ name: "get_tool_definition",
      arguments: { tool_name: "json.encode" } })).structuredContent;
    assert.equal(plain.lua_types ?? plain.extra?.lua_types, undefined, "format json (the default) has no stub");
  });
});

describe("moonbox check", () => {
  const check = (args) => spawnSync(MOONBOX, ["check", ...args], { encoding: "utf8" });
  it("luacheck (Debian's lua-check, installed by make test-deps) is there", () => {
    assert.ok(has("luacheck") || spawnSync("luacheck", ["--version"]).status === 0, "luacheck is not installed");
  });

  it("passes the shipped skills, and every name the sandbox builds; flags what it does not have", T, async () => {
    const shipped = check([path.join(path.dirname(MOONBOX), "../skills")]);
    assert.equal(shipped.status, 0, shipped.stdout + shipped.stderr);
    // a file that reads every name of the real environment: no finding (the config is complete)
    const s = await connectClient();
    let env;
    try {
      env = (await s.client.callTool({ name: "execute_code", arguments: { code: ENV } })).structuredContent.result;
    } finally {
      await s.close();
    }
    const dir = mkdtempSync(path.join(tmpdir(), "moonbox-check-"));
    try {
      const all = path.join(dir, "all.lua");
      writeFileSync(all, env.filter((n) => /^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)?$/.test(n))
        .map((n) => `local _ = ${n}`).join("\n") + "\n");
      const r = check([all]);
      assert.equal(r.status, 0, r.stdout + r.stderr);
      // what the sandbox lacks, a misspelt global and a global set are findings in file:line:col form
      const bad = path.join(dir, "bad.lua");
      writeFileSync(bad, 'local t = tabel.concat({})\nresult = os.execute("ls")\nlocal d = string.dump\nreturn io.read(), dofile("x")\n');
      const b = check([bad]);
      assert.equal(b.status, 1, b.stdout + b.stderr);
      for (const want of [/bad\.lua:1:11: \(W113\) accessing undefined variable 'tabel'/,
        /bad\.lua:2:1: \(W111\) setting non-standard global variable 'result'/,
        /bad\.lua:2:10: \(W143\) accessing undefined field 'execute' of global 'os'/,
        /bad\.lua:3:\d+: \(W143\) accessing undefined field 'dump' of global 'string'/,
        /bad\.lua:4:8: \(W113\) accessing undefined variable 'io'/,
        /bad\.lua:4:\d+: \(W113\) accessing undefined variable 'dofile'/])
        assert.match(b.stdout, want);
      assert.equal(check([]).status, 2);
      assert.equal(check(["--nope"]).status, 2);
      // without luacheck on PATH: exit 4 naming the package to install
      const none = spawnSync(MOONBOX, ["check", bad], { encoding: "utf8", env: { ...process.env, PATH: dir } });
      assert.equal(none.status, 4, none.stderr);
      assert.match(none.stderr, /install Debian's lua-check/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("moonbox types DIR", () => {
  it("writes types/sandbox.lua (the resource's text) and a .luarc.json for lua-language-server", T, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "moonbox-types-"));
    try {
      const r = spawnSync(MOONBOX, ["types", dir], { encoding: "utf8" });
      assert.equal(r.status, 0, r.stderr);
      const text = readFileSync(path.join(dir, "types/sandbox.lua"), "utf8");
      assert.equal(luaParseError(text), null);
      const s = await connectClient();
      try {
        assert.equal((await s.client.readResource({ uri: URI })).contents[0].text, text);
      } finally {
        await s.close();
      }
      const rc = JSON.parse(readFileSync(path.join(dir, ".luarc.json"), "utf8"));
      assert.equal(rc["runtime.version"], "Lua 5.4");
      for (const lib of ["io", "debug", "package", "os"]) assert.equal(rc["runtime.builtin"][lib], "disable", lib);
      for (const g of ["json", "re", "mcp", "pii", "servers", "read_file", "tokenize_pii", "save_skill"])
        assert.ok(rc["diagnostics.globals"].includes(g), g);
      assert.deepEqual(rc["workspace.library"], ["types"]);
      // a directory that cannot be made: exit 1 naming it
      const under = path.join(dir, "types/sandbox.lua", "x");
      const no = spawnSync(MOONBOX, ["types", under], { encoding: "utf8" });
      assert.equal(no.status, 1, no.stderr);
      assert.match(no.stderr, /moonbox types: cannot create .*: Not a directory/);
      // a bad argument: usage and exit 2
      const bad = spawnSync(MOONBOX, ["types"], { encoding: "utf8" });
      assert.equal(bad.status, 2);
      assert.match(bad.stderr, /usage: moonbox types DIR/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
