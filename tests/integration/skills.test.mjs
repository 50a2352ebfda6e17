// Skills end to end through the official SDK client: the skill tools (save/load/list/delete/
// history/restore), skills inside execute_code (require, skills.x, cycles, limits), live editing
// of the skills directory, skills published as MCP tools (list_changed, schemas, result shapes,
// log and progress) and the shipped example skills. Every test starts its own server with a
// fresh --data-dir and its own --skills-dir.
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/skills.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync, readFileSync, writeFileSync, readdirSync, mkdirSync, rmSync,
} from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import {
  ToolListChangedNotificationSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

import {
  connectClient, connectWithSkills, execute, makeDataDir, makeSkillsDir, TEST_STORE, TESTS_DIR,
  toolErrText as errText, toolOk as ok, useServer,
} from "../lib/moonbox.mjs";

const T = { timeout: 30000 };
const MAX_INSTR = 10_000_000_000;
const NAME_RULE = "it must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most 64 characters)";
const SHIPPED_SKILLS = path.resolve(TESTS_DIR, "../skills");

/** Starts a server with its own data and skills directories, runs fn(s), always closes. */
async function withServer(opts, fn) {
  return useServer(await connectWithSkills(opts), fn);
}

function call(s, name, args, options) {
  return s.client.callTool({ name, arguments: args }, undefined, options);
}

/** Runs code with execute_code and returns structuredContent (success or not). */
async function run(s, code, extra = {}) {
  const res = await execute(s.client, { code, ...extra });
  assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 500));
  return res.structuredContent;
}

async function runOk(s, code, extra) {
  const sc = await run(s, code, extra);
  assert.equal(sc.success, true, `execution failed: ${sc.error}`);
  return sc.result;
}

/** Polls fn() every 100 ms until it returns a truthy value; fails after `ms`. */
async function until(what, fn, ms = 2000) {
  const t0 = Date.now();
  let last;
  for (;;) {
    last = await fn();
    if (last) return { value: last, ms: Date.now() - t0 };
    if (Date.now() - t0 > ms) assert.fail(`not within ${ms} ms: ${what}`);
    await sleep(100);
  }
}

async function listSkills(s, query) {
  return ok(await call(s, "list_skills", query === undefined ? {} : { query }));
}

function skillNamed(list, name) {
  return list.skills.find((k) => k.name === name);
}

/** Collects notifications/tools/list_changed on s.client. */
function watchListChanged(s) {
  const seen = [];
  s.client.setNotificationHandler(ToolListChangedNotificationSchema, (n) => seen.push(n));
  return seen;
}

async function waitCount(arr, n, what, ms = 2000) {
  await until(`${what} (have ${arr.length}, want ${n})`, () => arr.length >= n, ms);
}

// ---------------------------------------------------------------------------------------------

describe("skill tools are listed and the capabilities advertised", () => {
  it("initialize: tools.listChanged=true and resources", T, async () => {
    await withServer({}, async (s) => {
      const caps = s.client.getServerCapabilities();
      assert.equal(caps.tools.listChanged, true);
      assert.equal(typeof caps.resources, "object");
      assert.notEqual(caps.resources, null);
    });
  });

  it("tools/list has every skill and workspace tool with an input schema", T, async () => {
    await withServer({}, async (s) => {
      const { tools } = await s.client.listTools();
      const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
      const expectRequired = {
        save_skill: ["name", "code", "description"],
        load_skill: ["name"],
        list_skills: undefined,
        delete_skill: ["name"],
        skill_history: ["name"],
        restore_skill: ["name", "version"],
        // path or its alias filename: neither is required by the schema (the tool asks for one)
        write_workspace_file: ["content"],
        read_workspace_file: undefined,
        list_workspace_files: undefined,
        delete_workspace_file: undefined,
      };
      for (const [name, required] of Object.entries(expectRequired)) {
        const t = byName[name];
        assert.ok(t, `${name} in tools/list: ${Object.keys(byName).join(", ")}`);
        assert.equal(t.inputSchema.type, "object", name);
        assert.equal(typeof t.inputSchema.properties, "object", name);
        assert.deepEqual(t.inputSchema.required, required, `${name} required`);
        assert.ok(t.description.length > 20, `${name} has a description`);
      }
      assert.deepEqual(Object.keys(byName.save_skill.inputSchema.properties).sort(),
        ["code", "description", "examples", "input_schema", "mime_type", "name", "output_schema", "params", "prompt", "resource", "returns", "title", "tool"]);
      assert.equal(byName.save_skill.inputSchema.properties.name.pattern, "^[A-Za-z_][A-Za-z0-9_]*$");
      assert.equal(byName.save_skill.inputSchema.properties.params.type, "array");
      assert.equal(byName.skill_history.inputSchema.properties.version.type, "integer");
      assert.deepEqual(byName.read_workspace_file.inputSchema.properties.encoding.enum, ["utf8", "base64"]);
      assert.deepEqual(byName.write_workspace_file.inputSchema.properties.encoding.enum, ["utf8", "base64"]);
      assert.equal(byName.list_workspace_files.inputSchema.properties.dir.type, "string");
    });
  });
});

describe("save_skill", () => {
  it("writes <skills-dir>/<name>.lua with the generated header and the code", T, async () => {
    await withServer({}, async (s) => {
      const code = "return function(args)\n  return args.a + (args.b or 0)\nend\n";
      const sc = ok(await call(s, "save_skill", {
        name: "add", code, description: "Adds two numbers.",
        params: [{ name: "a", type: "number", description: "the first" },
          { name: "b", type: "number", description: "the second", optional: true }],
        returns: "number the sum",
      }));
      assert.equal(sc.name, "add");
      assert.equal(sc.version, 1);
      assert.equal(sc.saved_version, 1);
      assert.equal(sc.status, "ok");
      assert.equal(sc.path, "add.lua");
      assert.equal(sc.form, "file");
      assert.equal(sc.tool, false);
      assert.equal(sc.description, "Adds two numbers.");
      assert.equal(sc.returns, "number the sum");
      assert.deepEqual(sc.params, [
        { name: "a", type: "number", description: "the first", optional: false },
        { name: "b", type: "number", description: "the second", optional: true },
      ]);
      assert.equal(readFileSync(path.join(s.skillsDir, "add.lua"), "utf8"),
        "--- Adds two numbers.\n" +
        "-- @param a number the first\n" +
        "-- @param b number? the second\n" +
        "-- @return number the sum\n" + code);
      assert.deepEqual(readdirSync(s.skillsDir), ["add.lua"], "no temporary file is left behind");
      assert.equal(await runOk(s, 'return require("skills.add")({a = 2, b = 3})'), 5);
    });
  });

  it("replaces a documentation header already in the code", T, async () => {
    await withServer({}, async (s) => {
      ok(await call(s, "save_skill", {
        name: "hdr", code: "--- Old text.\n-- @param z any old\n\nreturn 7\n", description: "New text.",
      }));
      assert.equal(readFileSync(path.join(s.skillsDir, "hdr.lua"), "utf8"), "--- New text.\nreturn 7\n");
      const sk = ok(await call(s, "load_skill", { name: "hdr" }));
      assert.equal(sk.description, "New text.");
      assert.deepEqual(sk.params, []);
    });
  });

  it("over a hand-written skill whose header is -- comments with @tool: one @tool line, and saving again changes nothing", T, async () => {
    const hand = "-- Greets someone.\n-- @param who string who to greet\n-- @tool Greeter\n"
      + "return function(a) return 'hello ' .. a.who end\n";
    await withServer({ skills: { "greet.lua": hand } }, async (s) => {
      const file = path.join(s.skillsDir, "greet.lua");
      const sk = ok(await call(s, "load_skill", { name: "greet" }));
      assert.equal(sk.tool, true);
      assert.equal(sk.description, "Greets someone.");
      const args = { name: "greet", code: sk.code, description: sk.description, params: sk.params, tool: true, title: "Greeter" };
      const first = ok(await call(s, "save_skill", args));
      const text = readFileSync(file, "utf8");
      assert.equal(text.match(/@tool/g).length, 1, text);
      assert.equal(text.match(/@param/g).length, 1, text);
      assert.equal(text, "--- Greets someone.\n-- @param who string who to greet\n-- @tool Greeter\n"
        + "return function(a) return 'hello ' .. a.who end\n");
      // the same save again: the same file, no new version
      const again = ok(await call(s, "save_skill", { ...args, code: ok(await call(s, "load_skill", { name: "greet" })).code }));
      assert.equal(readFileSync(file, "utf8"), text);
      assert.equal(again.version, first.version);
      const h = ok(await call(s, "skill_history", { name: "greet" }));
      assert.equal(h.versions.length, 2, "the hand-written version and one save");
      const r = await s.client.callTool({ name: "greet", arguments: { who: "Ann" } });
      assert.deepEqual(r.content, [{ type: "text", text: "hello Ann" }], "still published as a tool");
      // a plain leading comment without tags is code, kept below the header
      ok(await call(s, "save_skill", { name: "plain", code: "-- just a note\nreturn 1\n", description: "Plain." }));
      assert.equal(readFileSync(path.join(s.skillsDir, "plain.lua"), "utf8"), "--- Plain.\n\n-- just a note\nreturn 1\n");
    });
  });

  it("refuses invalid names with the rule in the message and writes nothing", T, async () => {
    await withServer({}, async (s) => {
      for (const name of ["1abc", "a-b", "../x", "", "a b", "x.y", "a/b", "é", "a".repeat(65)]) {
        const text = errText(await call(s, "save_skill", { name, code: "return 1", description: "d" }));
        assert.equal(text, `invalid skill name ${JSON.stringify(name)}: ${NAME_RULE}`);
      }
      const text = errText(await call(s, "save_skill", { name: 5, code: "return 1", description: "d" }));
      assert.equal(text, "name must be a string");
      assert.deepEqual(readdirSync(s.skillsDir), []);
      assert.equal(existsSync(path.join(s.skillsDir, "..", "x.lua")), false);
      // 64 characters is the longest name allowed
      ok(await call(s, "save_skill", { name: "a".repeat(64), code: "return 1", description: "d" }));
      assert.deepEqual(readdirSync(s.skillsDir), ["a".repeat(64) + ".lua"]);
    });
  });

  it("refuses code that does not compile, with the line, and writes nothing", T, async () => {
    await withServer({}, async (s) => {
      const res = await call(s, "save_skill", { name: "bad", code: "local x = 1\nlocal y = = 2\nreturn y", description: "d" });
      assert.equal(errText(res),
        "the code does not compile (nothing was saved): skills/bad.lua:2: unexpected symbol near '='");
      assert.equal(res.structuredContent.error_line, 2);
      assert.deepEqual(readdirSync(s.skillsDir), []);
      assert.equal((await listSkills(s)).count, 0);
      // a broken save does not touch an existing skill
      ok(await call(s, "save_skill", { name: "good", code: "return 1\n", description: "Good." }));
      const before = readFileSync(path.join(s.skillsDir, "good.lua"), "utf8");
      errText(await call(s, "save_skill", { name: "good", code: "return (", description: "Good." }));
      assert.equal(readFileSync(path.join(s.skillsDir, "good.lua"), "utf8"), before);
      const h = ok(await call(s, "skill_history", { name: "good" }));
      assert.equal(h.versions.length, 1);
    });
  });

  it("requires a description and checks argument types", T, async () => {
    await withServer({}, async (s) => {
      const need = "description is required: one or two sentences saying what the skill does";
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: "return 1" })), need);
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: "return 1", description: "  \n" })), need);
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: "return 1", description: 3 })),
        "description must be a string");
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: 3, description: "x" })),
        "code must be a string of Lua source");
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: "return 1", description: "x", tool: "yes" })),
        "tool must be a boolean (true publishes the skill as an MCP tool)");
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: "return 1", description: "x", params: "a" })),
        "params must be an array of {name, type, description}");
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: "return 1", description: "x", params: [{ type: "number" }] })),
        "params[1] needs a name (an identifier)");
      assert.equal(errText(await call(s, "save_skill", { name: "d", code: "return 1", description: "x", bogus: 1 })),
        'invalid arguments: save_skill has no argument "bogus" (expected code, description, examples, input_schema, mime_type, name, output_schema, params, prompt, resource, returns, title, tool)');
      assert.deepEqual(readdirSync(s.skillsDir), []);
    });
  });

  it("takes params as an object: name -> 'type description' or {type, description, optional}", T, async () => {
    await withServer({}, async (s) => {
      const sc = ok(await call(s, "save_skill", {
        name: "objp", code: "return function(a) return a end\n", description: "Object params.",
        params: { b: { type: "string", description: "the label", optional: true }, a: "integer how many" },
      }));
      const expected = [
        { name: "a", type: "integer", description: "how many", optional: false },
        { name: "b", type: "string", description: "the label", optional: true },
      ];
      assert.deepEqual(sc.params, expected);
      assert.equal(readFileSync(path.join(s.skillsDir, "objp.lua"), "utf8"),
        "--- Object params.\n-- @param a integer how many\n-- @param b string? the label\n" +
        "return function(a) return a end\n");
      assert.deepEqual(ok(await call(s, "load_skill", { name: "objp" })).params, expected);
    });
  });

  it("saving again creates version 2", T, async () => {
    await withServer({}, async (s) => {
      assert.equal(ok(await call(s, "save_skill", { name: "v", code: "return 1\n", description: "One." })).saved_version, 1);
      const sc = ok(await call(s, "save_skill", { name: "v", code: "return 2\n", description: "Two." }));
      assert.equal(sc.saved_version, 2);
      assert.equal(sc.version, 2);
      assert.equal(readFileSync(path.join(s.skillsDir, "v.lua"), "utf8"), "--- Two.\nreturn 2\n");
      assert.equal(await runOk(s, 'return require("skills.v")'), 2);
      // the same content again is not a new version
      const same = ok(await call(s, "save_skill", { name: "v", code: "return 2\n", description: "Two." }));
      assert.equal(same.version, 2);
      assert.equal(ok(await call(s, "skill_history", { name: "v" })).versions.length, 2);
    });
  });

  it("--max-skill-bytes 1000: a 2000-byte skill is refused naming max_skill_bytes", T, async () => {
    await withServer({ args: ["--max-skill-bytes", "1000"] }, async (s) => {
      const code = "return " + JSON.stringify("x".repeat(1990)) + "\n";
      assert.equal(code.length, 2000);
      assert.equal(errText(await call(s, "save_skill", { name: "big", code, description: "Big." })),
        "code is 2000 bytes, above max_skill_bytes=1000");
      assert.deepEqual(readdirSync(s.skillsDir), []);
      const fits = "return " + JSON.stringify("y".repeat(890)) + "\n";
      assert.equal(fits.length, 900);
      assert.equal(ok(await call(s, "save_skill", { name: "fits", code: fits, description: "F" })).version, 1);
      assert.equal((await runOk(s, 'return #require("skills.fits")')), 890);
      // a file on disk above the limit is listed as a problem, not loaded
      writeFileSync(path.join(s.skillsDir, "huge.lua"), "return " + JSON.stringify("z".repeat(1490)) + "\n");
      const l = (await until("huge.lua in problems", async () => {
        const x = await listSkills(s);
        return x.problems.length > 0 && x;
      })).value;
      assert.deepEqual(l.problems, [{ name: "huge",
        error: `read ${path.join(s.skillsDir, "huge.lua")}: 1500 bytes is above max_skill_bytes=1000` }]);
      assert.deepEqual(l.skills.map((k) => k.name), ["fits"]);
    });
  });

  it("--max-skill-bytes 1000: code of exactly 1000 bytes is saved or refused before anything is written", {
    ...T,
  }, async () => {
    await withServer({ args: ["--max-skill-bytes", "1000"] }, async (s) => {
      const code = "return " + JSON.stringify("y".repeat(990)) + "\n";
      assert.equal(code.length, 1000);
      const res = await call(s, "save_skill", { name: "edge", code, description: "F" });
      if (res.isError) {
        assert.match(errText(res), /max_skill_bytes=1000/);
        assert.deepEqual(readdirSync(s.skillsDir), [], "a refused save writes nothing");
      } else {
        assert.equal(res.structuredContent.version, 1);
        assert.equal((await listSkills(s)).count, 1);
      }
    });
  });

  // PostgreSQL's TEXT cannot hold a NUL byte: the save was written to the file, then failed in
  // the store, and every scan failed again on the file without listing it as a problem
  it("a NUL byte: saved on SQLite; on PostgreSQL refused before anything is written, a file with one is a problem", T, async () => {
    await withServer({}, async (s) => {
      const res = await call(s, "save_skill", { name: "nul", code: "return 'a\u0000b'", description: "N." });
      if (TEST_STORE !== "pg") {
        assert.equal(ok(res).version, 1);
        return;
      }
      assert.equal(errText(res), "the skill is not valid UTF-8 or has a NUL byte, which the store on "
        + "PostgreSQL cannot hold (nothing was saved)");
      assert.deepEqual(readdirSync(s.skillsDir), []);
      writeFileSync(path.join(s.skillsDir, "nulf.lua"), "--- N.\nreturn 'a\u0000b'\n");
      const l = (await until("nulf in problems", async () => {
        const x = await listSkills(s);
        return x.problems.length > 0 && x;
      })).value;
      assert.deepEqual(l.problems, [{ name: "nulf", error: "skills/nulf.lua is not valid UTF-8 or has a NUL "
        + "byte, which the store on PostgreSQL cannot hold" }]);
    });
  });
});

describe("load, list, delete, history, restore", () => {
  it("load_skill returns code and metadata; unknown names suggest similar ones", T, async () => {
    await withServer({}, async (s) => {
      ok(await call(s, "save_skill", {
        name: "hello", code: "return function(a) return 'hi ' .. a.x end\n", description: "Says hi.",
        params: [{ name: "x", type: "string", description: "who" }],
      }));
      ok(await call(s, "save_skill", { name: "hello_world", code: "return 1\n", description: "HW." }));
      const sk = ok(await call(s, "load_skill", { name: "hello" }));
      assert.equal(sk.name, "hello");
      assert.equal(sk.code, "--- Says hi.\n-- @param x string who\nreturn function(a) return 'hi ' .. a.x end\n");
      assert.equal(sk.description, "Says hi.");
      assert.deepEqual(sk.params, [{ name: "x", type: "string", description: "who", optional: false }]);
      assert.equal(sk.version, 1);
      assert.equal(sk.status, "ok");
      assert.equal(sk.path, "hello.lua");
      assert.equal(sk.form, "file");
      assert.equal(sk.tool, false);
      assert.equal(sk.error, undefined);
      assert.equal(errText(await call(s, "load_skill", { name: "hell" })),
        'no skill named "hell"; similar: hello, hello_world. list_skills shows what exists.');
      assert.equal(errText(await call(s, "load_skill", { name: "zzz" })),
        'no skill named "zzz". list_skills shows what exists.');
      assert.equal(errText(await call(s, "load_skill", { name: "../hello" })),
        `invalid skill name "../hello": ${NAME_RULE}`);
      assert.equal(errText(await call(s, "load_skill", {})), "name must be a string");
    });
  });

  it("list_skills with and without a query", T, async () => {
    await withServer({}, async (s) => {
      ok(await call(s, "save_skill", { name: "parse_dates", code: "return 1\n", description: "Parse ISO dates." }));
      ok(await call(s, "save_skill", { name: "csv_tools", code: "return 2\n", description: "Helpers for CSV files." }));
      ok(await call(s, "save_skill", { name: "alpha", code: "return 3\n", description: "First letter of the alphabet." }));
      const all = await listSkills(s);
      assert.equal(all.count, 3);
      assert.deepEqual(all.skills.map((k) => k.name), ["alpha", "csv_tools", "parse_dates"]);
      assert.deepEqual(all.problems, []);
      const one = all.skills[1];
      assert.deepEqual(one, { name: "csv_tools", description: "Helpers for CSV files.", params: [], version: 1,
        status: "ok", path: "csv_tools.lua", form: "file", tool: false, prompt: false });
      // matched against the name and the description, case-insensitively
      assert.deepEqual((await listSkills(s, "CSV")).skills.map((k) => k.name), ["csv_tools"]);
      assert.deepEqual((await listSkills(s, "iso")).skills.map((k) => k.name), ["parse_dates"]);
      assert.deepEqual((await listSkills(s, "t")).skills.map((k) => k.name), ["alpha", "csv_tools", "parse_dates"]);
      assert.deepEqual((await listSkills(s, "")).skills.map((k) => k.name), ["alpha", "csv_tools", "parse_dates"]);
      const none = await listSkills(s, "nothing-matches");
      assert.equal(none.count, 0);
      assert.deepEqual(none.skills, []);
      assert.equal(errText(await call(s, "list_skills", { query: 5 })), "query must be a string");
    });
  });

  it("delete_skill removes the file and keeps the history; restore_skill brings a version back", T, async () => {
    await withServer({}, async (s) => {
      ok(await call(s, "save_skill", { name: "gone", code: "return 'v1'\n", description: "Version one." }));
      ok(await call(s, "save_skill", { name: "gone", code: "return 'v2'\n", description: "Version two." }));
      const del = ok(await call(s, "delete_skill", { name: "gone" }));
      assert.deepEqual(del, { name: "gone", deleted: true, versions_kept: 2 });
      assert.equal(existsSync(path.join(s.skillsDir, "gone.lua")), false);
      assert.equal((await listSkills(s)).count, 0);
      assert.equal(errText(await call(s, "load_skill", { name: "gone" })),
        'no skill named "gone". list_skills shows what exists.');
      const r = await run(s, 'return require("skills.gone")');
      assert.equal(r.success, false);
      assert.match(r.error, /no skill named "gone"/);

      const h = ok(await call(s, "skill_history", { name: "gone" }));
      assert.equal(h.status, "deleted");
      assert.deepEqual(h.versions.map((v) => [v.version, v.in_use, v.description, v.source, v.compiled]),
        [[2, false, "Version two.", "save", true], [1, false, "Version one.", "save", true]]);

      const v1 = ok(await call(s, "skill_history", { name: "gone", version: 1 }));
      assert.equal(v1.code, "--- Version one.\nreturn 'v1'\n");
      assert.equal(v1.version, 1);
      assert.equal(v1.compiled, true);

      const rs = ok(await call(s, "restore_skill", { name: "gone", version: 1 }));
      assert.equal(rs.restored_from, 1);
      assert.equal(rs.saved_version, 3);
      assert.equal(rs.version, 3);
      assert.equal(rs.description, "Version one.");
      assert.equal(readFileSync(path.join(s.skillsDir, "gone.lua"), "utf8"), "--- Version one.\nreturn 'v1'\n");
      assert.equal(await runOk(s, 'return require("skills.gone")'), "v1");
      const h2 = ok(await call(s, "skill_history", { name: "gone" }));
      assert.equal(h2.status, "ok");
      assert.deepEqual(h2.versions.map((v) => [v.version, v.in_use, v.source]),
        [[3, true, "restore"], [2, false, "save"], [1, false, "save"]]);

      assert.equal(errText(await call(s, "delete_skill", { name: "never" })),
        'no skill named "never". list_skills shows what exists.');
    });
  });

  it("skill_history lists versions newest first with in_use; version=N gives that code", T, async () => {
    await withServer({}, async (s) => {
      for (let i = 1; i <= 3; i++) {
        ok(await call(s, "save_skill", { name: "hist", code: `return ${i}\n`, description: `V${i}.` }));
      }
      const h = ok(await call(s, "skill_history", { name: "hist" }));
      assert.equal(h.name, "hist");
      assert.equal(h.status, "ok");
      assert.deepEqual(h.versions.map((v) => v.version), [3, 2, 1]);
      assert.deepEqual(h.versions.map((v) => v.in_use), [true, false, false]);
      for (const v of h.versions) {
        assert.match(v.hash, /^[0-9a-f]{16,}$/);
        assert.equal(typeof v.created_at, "number");
      }
      assert.equal(new Set(h.versions.map((v) => v.hash)).size, 3);
      assert.equal(ok(await call(s, "skill_history", { name: "hist", version: 2 })).code, "--- V2.\nreturn 2\n");
      assert.equal(errText(await call(s, "skill_history", { name: "hist", version: 9 })), 'skill "hist" has no version 9');
      assert.equal(errText(await call(s, "skill_history", { name: "hist", version: 1.5 })), "version must be an integer");
      assert.equal(errText(await call(s, "skill_history", { name: "nope" })),
        'no skill named "nope". list_skills shows what exists.');

      // restore version 1: a new version 4 in use; the file holds version 1's text
      const rs = ok(await call(s, "restore_skill", { name: "hist", version: 1 }));
      assert.equal(rs.saved_version, 4);
      assert.equal(await runOk(s, 'return require("skills.hist")'), 1);
      const h2 = ok(await call(s, "skill_history", { name: "hist" }));
      assert.deepEqual(h2.versions.map((v) => [v.version, v.in_use]), [[4, true], [3, false], [2, false], [1, false]]);
      assert.equal(errText(await call(s, "restore_skill", { name: "hist", version: 9 })),
        'skill "hist" has no version 9 (skill_history lists them)');
      assert.equal(errText(await call(s, "restore_skill", { name: "hist" })), "version must be an integer");
    });
  });
  it("restore_skill refuses a version that never compiled, also after delete_skill, and names those that did", T, async () => {
    await withServer({}, async (s) => {
      const file = path.join(s.skillsDir, "fragile.lua");
      ok(await call(s, "save_skill", { name: "fragile", code: "return 'good 1'\n", description: "Good one." }));
      writeFileSync(file, "--- Broken by hand.\nlocal x = = 1\nreturn x\n");
      await until("version 2 (broken) recorded", async () =>
        ok(await call(s, "skill_history", { name: "fragile" })).versions.length === 2);
      ok(await call(s, "save_skill", { name: "fragile", code: "return 'good 3'\n", description: "Good three." }));
      const before = readFileSync(file, "utf8");
      const h = ok(await call(s, "skill_history", { name: "fragile" }));
      assert.deepEqual(h.versions.map((v) => [v.version, v.compiled]), [[3, true], [2, false], [1, true]]);

      const refusal = 'restore_skill: version 2 of skill "fragile" never compiled '
        + "(skills/fragile.lua:2: unexpected symbol near '='), so restoring it would leave the skill "
        + "broken; nothing was written. Versions that compiled: 3, 1 (skill_history shows their code).";
      let res = await call(s, "restore_skill", { name: "fragile", version: 2 });
      assert.equal(errText(res), refusal);
      assert.equal(res.structuredContent.error, refusal);
      assert.equal(readFileSync(file, "utf8"), before, "the file is untouched");
      assert.equal(await runOk(s, 'return require("skills.fragile")'), "good 3");
      assert.equal(ok(await call(s, "skill_history", { name: "fragile" })).versions.length, 3, "no new version");

      // after delete_skill: the same refusal, and the skill stays deleted (no entry with version null)
      ok(await call(s, "delete_skill", { name: "fragile" }));
      assert.equal(errText(await call(s, "restore_skill", { name: "fragile", version: 2 })), refusal);
      assert.equal(existsSync(file), false);
      assert.equal(skillNamed(await listSkills(s), "fragile"), undefined);
      const rs = ok(await call(s, "restore_skill", { name: "fragile", version: 1 }));
      assert.equal(rs.version, 4);
      assert.equal(await runOk(s, 'return require("skills.fragile")'), "good 1");

      // a skill none of whose versions compiled
      writeFileSync(path.join(s.skillsDir, "hopeless.lua"), "--- Never.\nreturn (\n");
      await until("hopeless recorded", async () => skillNamed(await listSkills(s), "hopeless"));
      assert.equal(errText(await call(s, "restore_skill", { name: "hopeless", version: 1 })),
        'restore_skill: version 1 of skill "hopeless" never compiled (skills/hopeless.lua:3: unexpected '
        + "symbol near <eof>), so restoring it would leave the skill broken; nothing was written. "
        + "No version of it compiled: fix the file or save_skill code that compiles.");
    });
  });
});

describe("skills inside execute_code", () => {
  it("require(\"skills.x\") and skills.x load a skill; both give the same module", T, async () => {
    await withServer({ skills: { "mathx.lua": "--- Math helpers.\nlocal M = {}\nfunction M.sq(x) return x * x end\nreturn M\n" } }, async (s) => {
      assert.deepEqual(await runOk(s,
        'local a = require("skills.mathx")\nlocal b = skills.mathx\nreturn { a.sq(3), b.sq(4), a == b }'), [9, 16, true]);
      // the module runs once per execution
      ok(await call(s, "save_skill", { name: "counter", code: "n_loaded = (n_loaded or 0) + 1\nreturn {}\n", description: "Counts loads." }));
      assert.equal(await runOk(s, 'require("skills.counter"); require("skills.counter"); local _ = skills.counter; return n_loaded'), 1);
      // skills is read-only
      const r = await run(s, "skills.x = 1");
      assert.equal(r.success, false);
      assert.match(r.error, /skills is read-only: save a skill with save_skill\(name, code, description\)/);
    });
  });

  it("a skill can use another skill", T, async () => {
    await withServer({}, async (s) => {
      ok(await call(s, "save_skill", { name: "base", code: "return { k = 10 }\n", description: "Base." }));
      ok(await call(s, "save_skill", { name: "derived", code: 'local b = require("skills.base")\nreturn function(x) return x * b.k + skills.base.k end\n', description: "Derived." }));
      assert.equal(await runOk(s, 'return require("skills.derived")(4)'), 50);
    });
  });

  it("a cycle a -> b -> a gives a clear error", T, async () => {
    await withServer({
      skills: {
        "a.lua": '--- A.\nlocal b = require("skills.b")\nreturn { b = b }\n',
        "b.lua": '--- B.\nlocal a = require("skills.a")\nreturn { a = a }\n',
      },
    }, async (s) => {
      const r = await run(s, 'return require("skills.a")');
      assert.equal(r.success, false);
      assert.equal(r.error_type, "runtime");
      assert.ok(r.error.includes("cycle between skills: skills.a -> skills.b -> skills.a"), r.error);
      // a cycle through skills.x indexing as well, starting from b
      const r2 = await run(s, "return skills.b");
      assert.equal(r2.success, false);
      assert.ok(r2.error.includes("cycle between skills: skills.b -> skills.a -> skills.b"), r2.error);
      // a skill requiring itself
      ok(await call(s, "save_skill", { name: "selfish", code: 'return require("skills.selfish")\n', description: "Self." }));
      const r3 = await run(s, 'return require("skills.selfish")');
      assert.ok(r3.error.includes("cycle between skills: skills.selfish -> skills.selfish"), r3.error);
    });
  });

  it("require of anything but a skill, and of a missing skill, fail clearly", T, async () => {
    await withServer({ skills: { "nosuch_like.lua": "--- Similar.\nreturn 1\n" } }, async (s) => {
      for (const mod of ["os", "io", "debug", "skills.", "skills.a-b", "skills.../x"]) {
        const r = await run(s, `return require(${JSON.stringify(mod)})`);
        assert.equal(r.success, false, mod);
        assert.ok(r.error.includes(`require: module '${mod}' not found: only skills can be required in the sandbox, as require("skills.<name>")`), r.error);
      }
      const r = await run(s, 'return require("skills.no_such")');
      assert.equal(r.success, false);
      assert.ok(r.error.includes('require: no skill named "no_such". list_skills shows what exists.'), r.error);
      // skills.<name> of a missing skill is nil; using it says why
      const r2 = await run(s, "return skills.nosuch()");
      assert.equal(r2.success, false);
      assert.equal(r2.error, "code:1: attempt to call a nil value (field 'nosuch') (hint: skills.nosuch is nil: "
        + 'no skill named "nosuch"; similar: nosuch_like. list_skills shows what exists.)');
      // an invalid name through indexing is just absent
      assert.equal(await runOk(s, 'return skills["a-b"] == nil and skills[1] == nil'), true);
    });
  });

  it("skills.<name> of a skill that does not exist is nil, so code can test for one", T, async () => {
    await withServer({ skills: { "here.lua": "--- Here.\nreturn { run = function() return 'h' end }\n",
      "broken.lua": "--- Broken.\nreturn (\n" } }, async (s) => {
      await until("broken listed", async () => skillNamed(await listSkills(s), "broken"));
      assert.deepEqual(await runOk(s, `
        return { missing = skills.boom == nil, differs = skills.boom ~= nil, here = skills.here ~= nil,
                 twice = skills.boom == nil and skills.boom == nil,
                 picked = (skills.boom or skills.here).run() }`),
        { missing: true, differs: false, here: true, twice: true, picked: "h" });
      // indexing the nil, a method call, and require all say there is no such skill
      let r = await run(s, "return skills.boom.run()");
      assert.equal(r.error, "code:1: attempt to index a nil value (field 'boom') (hint: skills.boom is nil: "
        + 'no skill named "boom". list_skills shows what exists.)');
      r = await run(s, "local x = 1\nreturn skills:boom()");
      assert.equal(r.error, "code:2: attempt to call a nil value (method 'boom') (hint: skills.boom is nil: "
        + 'no skill named "boom". list_skills shows what exists.)');
      r = await run(s, 'return require("skills.boom")');
      assert.ok(r.error.includes('require: no skill named "boom". list_skills shows what exists.'), r.error);
      // a field of another name is not blamed on skills
      r = await run(s, "local _ = skills.boom\nlocal t = {}\nreturn t.other()");
      assert.equal(r.error, "code:3: attempt to call a nil value (field 'other')");
      // a skill that exists but never compiled still raises: it is there, and broken
      r = await run(s, "return skills.broken == nil");
      assert.equal(r.success, false);
      assert.match(r.error, /skill "broken" does not compile/);
      // saved in the same execution: found after the earlier miss
      assert.equal(await runOk(s, `
        local before = skills.later == nil
        save_skill("later", "return 'now'", "Saved while running.")
        return before and skills.later`), "now");
    });
  });

  it("save_skill, load_skill and list_skills are callable from sandbox code", T, async () => {
    await withServer({}, async (s) => {
      const res = await runOk(s, `
        local saved = save_skill("sb", "return function(x) return x + 1 end", "Saved from the sandbox.")
        local saved2 = save_skill{ name = "sb2", code = "return 'two'", description = "Table form.",
                                   params = { { name = "q", type = "string" } } }
        local loaded = load_skill("sb")
        local listed = list_skills("sandbox")
        local all = list_skills(nil)
        local ok, err = pcall(save_skill, "1x", "return 1", "bad")
        local ok2, err2 = pcall(load_skill, "missing")
        local ok3, err3 = pcall(save_skill, "broken", "return (", "bad")
        return { v = saved.saved_version, name = saved.name, v2 = saved2.version, code = loaded.code,
                 n = listed.count, first = listed.skills[1].name, all = all.count,
                 call = require("skills.sb")(41), two = skills.sb2, err = err, err2 = err2, err3 = err3 }`);
      assert.equal(res.v, 1);
      assert.equal(res.name, "sb");
      assert.equal(res.v2, 1);
      assert.equal(res.code, "--- Saved from the sandbox.\nreturn function(x) return x + 1 end");
      assert.equal(res.n, 1);
      assert.equal(res.first, "sb");
      assert.equal(res.all, 2);
      assert.equal(res.call, 42);
      assert.equal(res.two, "two");
      assert.equal(res.err, `save_skill: invalid skill name "1x": ${NAME_RULE}`);
      assert.equal(res.err2, 'load_skill: no skill named "missing". list_skills shows what exists.');
      assert.match(res.err3, /^save_skill: the code does not compile \(nothing was saved\): skills\/broken\.lua:1: /);
      assert.equal(readFileSync(path.join(s.skillsDir, "sb2.lua"), "utf8"), "--- Table form.\n-- @param q string\nreturn 'two'");
      assert.equal(existsSync(path.join(s.skillsDir, "broken.lua")), false);
      // the MCP tools see what sandbox code saved
      assert.equal(ok(await call(s, "load_skill", { name: "sb" })).description, "Saved from the sandbox.");
    });
  });

  it("list_skills() with no argument works in sandbox code; a non-string query is refused", T, async () => {
    await withServer({ skills: { "one.lua": "--- One.\nreturn 1\n", "two.lua": "--- Two.\nreturn 2\n" } }, async (s) => {
      assert.deepEqual(await runOk(s, "return { list_skills().count, list_skills(nil).count, list_skills('two').count }"), [2, 2, 1]);
      const r = await run(s, "return list_skills({})");
      assert.equal(r.success, false);
      assert.match(r.error, /bad argument #1 to 'list_skills' \(string expected, got table\)/);
    });
  });

  it("a skill that runs forever is stopped by the caller's limits", T, async () => {
    await withServer({ skills: { "spin.lua": "--- Spins.\nreturn function() while true do end end\n",
      "spin_load.lua": "--- Spins while loading.\nwhile true do end\n",
      "hog.lua": "--- Eats memory.\nreturn function() local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 1000) .. i end end\n" } }, async (s) => {
      let t0 = performance.now();
      let r = await run(s, 'require("skills.spin")()', { timeout_ms: 300, instruction_limit: MAX_INSTR });
      assert.equal(r.success, false);
      assert.equal(r.error_type, "timeout");
      assert.match(r.error, /timeout_ms=300\b/);
      assert.ok(performance.now() - t0 < 2000, `took ${performance.now() - t0} ms`);
      t0 = performance.now();
      r = await run(s, 'return skills.spin_load', { timeout_ms: 300, instruction_limit: MAX_INSTR });
      assert.equal(r.error_type, "timeout");
      assert.match(r.error, /timeout_ms=300\b/);
      // a pcall around require does not swallow the limit
      r = await run(s, 'local ok = pcall(require, "skills.spin_load") return "escaped"', { timeout_ms: 300, instruction_limit: MAX_INSTR });
      assert.equal(r.success, false);
      assert.equal(r.error_type, "timeout");
      r = await run(s, 'require("skills.spin")()', { instruction_limit: 1000000 });
      assert.equal(r.error_type, "instructions");
      assert.match(r.error, /instruction_limit=1000000\b/);
      r = await run(s, 'require("skills.hog")()', { memory_mb: 8 });
      assert.equal(r.error_type, "memory");
      assert.match(r.error, /memory_mb=8\b/);
      // the server still answers
      assert.equal(await runOk(s, "return 1"), 1);
    });
  });

  it("a skill's runtime error carries skills/<name>.lua:<line>:", T, async () => {
    await withServer({ skills: { "boom.lua": "--- Explodes.\nlocal M = {}\nfunction M.go()\n  error('kaboom')\nend\nreturn M\n",
      "loadboom.lua": "--- Fails when loaded.\n\nerror('at load')\n" } }, async (s) => {
      const r = await run(s, "skills.boom.go()");
      assert.equal(r.success, false);
      assert.equal(r.error_type, "runtime");
      assert.equal(r.error, "skills/boom.lua:4: kaboom");
      assert.match(r.traceback, /\n\tskills\/boom\.lua:4: in /);
      const r2 = await run(s, 'local ok, e = pcall(require, "skills.loadboom") return e');
      assert.equal(r2.success, true);
      assert.equal(r2.result, "skills/loadboom.lua:3: at load");
      // a failed load is not cached as loaded: requiring again fails again
      const r3 = await run(s, 'pcall(require, "skills.loadboom") return require("skills.loadboom")');
      assert.equal(r3.success, false);
      assert.equal(r3.error, "skills/loadboom.lua:3: at load");
    });
  });
});

describe("live editing of the skills directory", () => {
  it("a new file is picked up, edits replace it, a broken edit keeps the last good version", T, async () => {
    await withServer({}, async (s) => {
      const file = path.join(s.skillsDir, "fresh.lua");
      writeFileSync(file, "--- Fresh skill.\nreturn { v = 1 }\n");
      await until("fresh listed", async () => skillNamed(await listSkills(s), "fresh"));
      assert.equal(await runOk(s, 'return require("skills.fresh").v'), 1);
      let sk = ok(await call(s, "load_skill", { name: "fresh" }));
      assert.equal(sk.description, "Fresh skill.");
      assert.equal(sk.version, 1);

      writeFileSync(file, "--- Fresh skill, edited.\nreturn { v = 2 }\n");
      await until("version 2 in use", async () => ok(await call(s, "load_skill", { name: "fresh" })).version === 2);
      assert.equal(await runOk(s, 'return require("skills.fresh").v'), 2);
      assert.equal(ok(await call(s, "load_skill", { name: "fresh" })).description, "Fresh skill, edited.");

      writeFileSync(file, "--- Fresh skill, broken.\nlocal x = = 1\nreturn { v = 3 }\n");
      const listed = (await until("status error", async () => {
        const e = skillNamed(await listSkills(s), "fresh");
        return e && e.status === "error" && e;
      })).value;
      assert.equal(listed.error, "skills/fresh.lua:2: unexpected symbol near '='");
      assert.equal(listed.error_line, 2);
      assert.equal(listed.version, 2, "the version in use is still 2");
      sk = ok(await call(s, "load_skill", { name: "fresh" }));
      assert.equal(sk.status, "error");
      assert.equal(sk.error, "skills/fresh.lua:2: unexpected symbol near '='");
      assert.equal(sk.error_line, 2);
      assert.equal(sk.code, "--- Fresh skill, edited.\nreturn { v = 2 }\n", "load_skill gives the last good code");
      assert.equal(sk.description, "Fresh skill, edited.");
      assert.equal(await runOk(s, 'return require("skills.fresh").v'), 2, "require runs the last good version");
      const h = ok(await call(s, "skill_history", { name: "fresh" }));
      assert.equal(h.status, "error");
      assert.deepEqual(h.versions.map((v) => [v.version, v.compiled, v.in_use, v.source]),
        [[3, false, false, "file"], [2, true, true, "file"], [1, true, false, "file"]]);

      writeFileSync(file, "--- Fresh skill, fixed.\nreturn { v = 4 }\n");
      await until("fixed", async () => ok(await call(s, "load_skill", { name: "fresh" })).status === "ok");
      sk = ok(await call(s, "load_skill", { name: "fresh" }));
      assert.equal(sk.version, 4);
      assert.equal(sk.code, "--- Fresh skill, fixed.\nreturn { v = 4 }\n");
      assert.equal(sk.error, undefined);
      assert.equal(sk.error_line, undefined);
      assert.equal(await runOk(s, 'return require("skills.fresh").v'), 4);

      // removing the file removes the skill
      rmSync(file);
      await until("fresh gone", async () => !skillNamed(await listSkills(s), "fresh"));
    });
  });

  it("a new file is requireable within 2 s (polling every 100 ms)", T, async () => {
    await withServer({}, async (s) => {
      writeFileSync(path.join(s.skillsDir, "quick.lua"), "--- Quick.\nreturn 'q'\n");
      const { ms } = await until("quick requireable", async () => (await run(s, 'return require("skills.quick")')).result === "q");
      assert.ok(ms <= 2000, `${ms} ms`);
    });
  });

  it("a file that never compiled is listed with its error; require explains", T, async () => {
    await withServer({}, async (s) => {
      writeFileSync(path.join(s.skillsDir, "never.lua"), "--- Never good.\nreturn (\n");
      const e = (await until("never listed", async () => skillNamed(await listSkills(s), "never"))).value;
      assert.equal(e.status, "error");
      assert.equal(e.error_line, 3);
      assert.equal(e.version, null, JSON.stringify(e));
      const r = await run(s, 'return require("skills.never")');
      assert.equal(r.success, false);
      assert.ok(r.error.includes(`require: skill "never" does not compile (${e.error}) and has no earlier good version`), r.error);
    });
  });

  it("a directory skill (SKILL.md + init.lua) edited live is picked up", T, async () => {
    await withServer({
      skills: {
        "dsk/SKILL.md": "---\nname: dsk\ndescription: A directory skill.\n---\n# dsk\n\nUsage notes.\n",
        "dsk/init.lua": "return { v = 1 }\n",
      },
    }, async (s) => {
      const e = skillNamed(await listSkills(s), "dsk");
      assert.ok(e, "dsk listed at start");
      assert.equal(e.form, "dir");
      assert.equal(e.path, "dsk/init.lua");
      assert.equal(e.description, "A directory skill.");
      let sk = ok(await call(s, "load_skill", { name: "dsk" }));
      assert.equal(sk.code, "return { v = 1 }\n");
      assert.equal(sk.skill_md, "---\nname: dsk\ndescription: A directory skill.\n---\n# dsk\n\nUsage notes.\n");
      assert.equal(await runOk(s, 'return require("skills.dsk").v'), 1);

      writeFileSync(path.join(s.skillsDir, "dsk/init.lua"), "return { v = 2 }\n");
      await until("dsk v2", async () => ok(await call(s, "load_skill", { name: "dsk" })).code === "return { v = 2 }\n");
      assert.equal(await runOk(s, "return skills.dsk.v"), 2);

      writeFileSync(path.join(s.skillsDir, "dsk/SKILL.md"), "---\nname: dsk\ndescription: Described anew.\n---\n");
      await until("dsk description", async () => ok(await call(s, "load_skill", { name: "dsk" })).description === "Described anew.");

      // a broken init.lua keeps version in use
      writeFileSync(path.join(s.skillsDir, "dsk/init.lua"), "return {\n");
      await until("dsk error", async () => ok(await call(s, "load_skill", { name: "dsk" })).status === "error");
      assert.equal(await runOk(s, "return skills.dsk.v"), 2);
    });
  });

  it("a directory skill created while the server runs is picked up", T, async () => {
    await withServer({}, async (s) => {
      mkdirSync(path.join(s.skillsDir, "newdir"));
      writeFileSync(path.join(s.skillsDir, "newdir/SKILL.md"), "---\nname: newdir\ndescription: Made live.\n---\n");
      writeFileSync(path.join(s.skillsDir, "newdir/init.lua"), "return 'nd'\n");
      await until("newdir listed", async () => skillNamed(await listSkills(s), "newdir"));
      assert.equal(await runOk(s, 'return require("skills.newdir")'), "nd");
    });
  });

  it("a directory whose files are written a while after it was made is picked up", {
    ...T,
  }, async () => {
    await withServer({}, async (s) => {
      mkdirSync(path.join(s.skillsDir, "slowdir"));
      await sleep(500); // an editor: create the folder, then save the files
      writeFileSync(path.join(s.skillsDir, "slowdir/SKILL.md"), "---\nname: slowdir\ndescription: Slow.\n---\n");
      writeFileSync(path.join(s.skillsDir, "slowdir/init.lua"), "return 'sd'\n");
      await until("slowdir listed", async () => skillNamed(await listSkills(s), "slowdir"));
    });
  });

  it("a file with an invalid name appears in list_skills problems", T, async () => {
    await withServer({ skills: { "9lives.lua": "return 9\n" } }, async (s) => {
      let l = await listSkills(s);
      assert.deepEqual(l.problems, [{ name: "9lives",
        error: 'skills/9lives.lua: "9lives" is not a valid skill name (letters, digits and _, not starting with a digit)' }]);
      writeFileSync(path.join(s.skillsDir, "bad-name.lua"), "--- Bad.\nreturn 1\n");
      l = (await until("bad-name in problems", async () => {
        const x = await listSkills(s);
        return x.problems.length === 2 && x;
      })).value;
      assert.deepEqual(l.problems, [
        { name: "9lives", error: 'skills/9lives.lua: "9lives" is not a valid skill name (letters, digits and _, not starting with a digit)' },
        { name: "bad-name", error: 'skills/bad-name.lua: "bad-name" is not a valid skill name (letters, digits and _, not starting with a digit)' },
      ]);
      assert.equal(l.count, 0);
    });
  });
});

describe("two servers on one data directory and skills directory", () => {
  // Claude Desktop and Claude Code both default to ~/.local/share/moonbox: two processes share the
  // store and the files. Each version saved through one is what the other runs within about a
  // second, whichever process saved it; a deletion and a hand edit reach both.
  async function withTwo(fn) {
    const dataDir = makeDataDir();
    const skillsDir = makeSkillsDir();
    const opts = { dataDir, args: ["--skills-dir", skillsDir] };
    try {
      const a = await connectClient(opts);
      await useServer(a, async () => {
        const b = await connectClient(opts);
        await useServer(b, () => fn(a, b, skillsDir));
      });
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(path.dirname(skillsDir), { recursive: true, force: true });
    }
  }

  /** Polls server s running `code` until it gives `want` (2 s at most); returns the ms it took. */
  async function sees(s, code, want, what) {
    return (await until(`${what}: ${code} gives ${JSON.stringify(want)}`, async () => {
      const sc = await run(s, code);
      return sc.success === true && sc.result === want;
    }, 2000)).ms;
  }

  it("each version saved through A runs in B; a deletion through A reaches B; a hand edit reaches both", T, async () => {
    await withTwo(async (a, b, skillsDir) => {
      const code = 'return require("skills.shared")()';
      for (let v = 1; v <= 3; v++) {
        const saved = ok(await call(a, "save_skill", {
          name: "shared", code: `return function() return "v${v}" end\n`, description: `Version ${v}.`,
        }));
        assert.equal(saved.saved_version, v);
        assert.equal(await runOk(a, code), `v${v}`, "A runs what it saved");
        if (TEST_STORE === "sqlite") { // B reads the skill's row at require: no waiting for its watcher
          assert.equal(await runOk(b, code), `v${v}`, `B's first run after A saved v${v}`);
        }
        await sees(b, code, `v${v}`, `B after A saved v${v}`);
        assert.equal(ok(await call(b, "load_skill", { name: "shared" })).version, v, "B's load_skill");
        assert.equal(ok(await call(b, "load_skill", { name: "shared" })).description, `Version ${v}.`);
      }
      // published as a tool through A: in B's tools/list, and B's client is told
      const changed = watchListChanged(b);
      ok(await call(a, "save_skill", { name: "pub", code: "return function() return 'p' end\n", description: "Pub.", tool: true }));
      await until("pub in B's tools/list", async () => (await b.client.listTools()).tools.some((t) => t.name === "pub"), 2000);
      await waitCount(changed, 1, "list_changed on B");
      assert.deepEqual((await b.client.callTool({ name: "pub", arguments: {} })).content, [{ type: "text", text: "p" }]);

      // and the other way round: B saves, A sees it
      ok(await call(b, "save_skill", { name: "shared", code: 'return function() return "from B" end\n', description: "From B." }));
      await sees(a, code, "from B", "A after B saved");

      // a hand edit of the file: both run it
      writeFileSync(path.join(skillsDir, "shared.lua"), '--- Edited by hand.\nreturn function() return "hand" end\n');
      await sees(a, code, "hand", "A after the hand edit");
      await sees(b, code, "hand", "B after the hand edit");

      // deleted through A: gone for B too
      ok(await call(a, "delete_skill", { name: "shared" }));
      await until("B no longer lists shared", async () => !skillNamed(await listSkills(b), "shared"), 2000);
      const r = await run(b, code);
      assert.equal(r.success, false);
      assert.match(r.error, /no skill named "shared"/);

      // restored through B after the deletion: A runs it again
      const h = ok(await call(b, "skill_history", { name: "shared" }));
      const v2 = h.versions.find((x) => x.description === "Version 2.");
      ok(await call(b, "restore_skill", { name: "shared", version: v2.version }));
      await sees(a, code, "v2", "A after B restored version 2");
    });
  });

  it("with their own data directories and one skills directory, each runs what the other saved", T, async () => {
    const skillsDir = makeSkillsDir();
    const opts = { args: ["--skills-dir", skillsDir] };
    try {
      const a = await connectClient(opts);
      await useServer(a, async () => {
        const b = await connectClient(opts);
        await useServer(b, async () => {
          const code = 'return require("skills.own")()';
          for (let v = 1; v <= 3; v++) {
            ok(await call(a, "save_skill", { name: "own", code: `return function() return "v${v}" end\n`, description: `V${v}.` }));
            await sees(b, code, `v${v}`, `B after A saved v${v}`);
          }
          ok(await call(a, "delete_skill", { name: "own" }));
          await until("B no longer lists own", async () => !skillNamed(await listSkills(b), "own"), 2000);
        });
      });
    } finally {
      rmSync(path.dirname(skillsDir), { recursive: true, force: true });
    }
  });
});

describe("skills published as MCP tools", () => {
  const DOUBLER = "return function(a)\n  return { doubled = a.x * 2, label = a.label }\nend\n";

  it("save_skill tool=true: list_changed, tools/list entry with a schema from params, tools/call", T, async () => {
    await withServer({}, async (s) => {
      const changed = watchListChanged(s);
      // not a tool: no notification
      ok(await call(s, "save_skill", { name: "plain", code: "return 1\n", description: "Plain." }));
      const sc = ok(await call(s, "save_skill", {
        name: "doubler", code: DOUBLER, description: "Doubles x.", tool: true, title: "Doubler",
        params: [{ name: "x", type: "number", description: "the value" },
          { name: "label", type: "string", optional: true }],
      }));
      assert.equal(sc.tool, true);
      await waitCount(changed, 1, "list_changed after publishing");
      await sleep(200);
      assert.equal(changed.length, 1, "exactly one list_changed");
      assert.equal(readFileSync(path.join(s.skillsDir, "doubler.lua"), "utf8"),
        "--- Doubles x.\n-- @param x number the value\n-- @param label string?\n-- @tool Doubler\n" + DOUBLER);

      const { tools } = await s.client.listTools();
      const t = tools.find((x) => x.name === "doubler");
      assert.ok(t, tools.map((x) => x.name).join(", "));
      assert.equal(tools.find((x) => x.name === "plain"), undefined);
      assert.equal(t.title, "Doubler");
      assert.equal(t.description, "Doubles x.");
      assert.deepEqual(t.inputSchema, {
        type: "object",
        properties: { x: { type: "number", description: "the value" }, label: { type: "string" } },
        required: ["x"],
      });

      const res = await call(s, "doubler", { x: 21, label: "hi" });
      assert.notEqual(res.isError, true);
      assert.deepEqual(res.structuredContent, { doubled: 42, label: "hi" });
      assert.equal(res.content.length, 1);
      assert.equal(res.content[0].type, "text");
      assert.deepEqual(JSON.parse(res.content[0].text), { doubled: 42, label: "hi" });

      assert.equal(errText(await call(s, "doubler", {})), "invalid arguments: x is required");
      assert.equal(errText(await call(s, "doubler", { x: "seven" })), "invalid arguments: x must be a number");

      // a new version of a published skill is announced too
      ok(await call(s, "save_skill", { name: "doubler", code: DOUBLER.replace("* 2", "* 3"), description: "Triples x.", tool: true,
        params: [{ name: "x", type: "number" }] }));
      await waitCount(changed, 2, "list_changed after a new version");
      assert.deepEqual((await call(s, "doubler", { x: 2 })).structuredContent, { doubled: 6 });

      // the execution is recorded like any other
      const st = ok(await call(s, "get_execution_stats", {}));
      assert.equal(st.skills.published_as_tools, 1);
    });
  });

  it("result shapes: string, content blocks, invalid blocks, array, nil", T, async () => {
    await withServer({
      skills: {
        "s_text.lua": "--- Text.\n-- @tool\nreturn function() return 'just text' end\n",
        "s_image.lua": "--- Image.\n-- @tool\nreturn function() return { content = { { type = 'image', data = 'iVBORw0KGgo=', mimeType = 'image/png' } } } end\n",
        "s_res.lua": "--- Resource.\n-- @tool\nreturn function() return { content = { { type = 'resource', resource = { uri = 'moonbox://workspace/x.txt', mimeType = 'text/plain', text = 'hello' } }, { type = 'text', text = 'and text' } } } end\n",
        "s_block.lua": "--- One block.\n-- @tool\nreturn function() return { type = 'audio', data = 'AAAA', mimeType = 'audio/wav' } end\n",
        "s_badimg.lua": "--- Bad image.\n-- @tool\nreturn function() return { content = { { type = 'image', data = 'AAAA' } } } end\n",
        "s_badtype.lua": "--- Bad type.\n-- @tool\nreturn function() return { content = { { type = 'video', data = 'x' } } } end\n",
        "s_array.lua": "--- Array.\n-- @tool\nreturn function() return { 1, 2, 3 } end\n",
        "s_nil.lua": "--- Nothing.\n-- @tool\nreturn { run = function() end }\n",
        "s_iserr.lua": "--- Error result.\n-- @tool\nreturn function() return { content = { { type = 'text', text = 'no good' } }, isError = true } end\n",
        "s_notfn.lua": "--- Not callable.\n-- @tool\nreturn { value = 1 }\n",
      },
    }, async (s) => {
      const names = (await s.client.listTools()).tools.map((t) => t.name);
      for (const n of ["s_text", "s_image", "s_res", "s_block", "s_badimg", "s_badtype", "s_array", "s_nil", "s_iserr", "s_notfn"]) {
        assert.ok(names.includes(n), `${n} published: ${names.join(", ")}`);
      }
      let r = await call(s, "s_text", {});
      assert.deepEqual(r.content, [{ type: "text", text: "just text" }]);
      assert.notEqual(r.isError, true);
      assert.equal(r.structuredContent, undefined);

      r = await call(s, "s_image", {});
      assert.deepEqual(r.content, [{ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" }]);
      assert.notEqual(r.isError, true);

      r = await call(s, "s_res", {});
      assert.deepEqual(r.content, [
        { type: "resource", resource: { uri: "moonbox://workspace/x.txt", mimeType: "text/plain", text: "hello" } },
        { type: "text", text: "and text" },
      ]);

      r = await call(s, "s_block", {});
      assert.deepEqual(r.content, [{ type: "audio", data: "AAAA", mimeType: "audio/wav" }]);

      assert.equal(errText(await call(s, "s_badimg", {})),
        "the skill returned an invalid result: content block 1 (image) needs data (base64) and mimeType");
      assert.equal(errText(await call(s, "s_badtype", {})),
        "the skill returned an invalid result: content block 1 needs a type: text, image, audio, resource or resource_link");

      r = await call(s, "s_array", {});
      assert.deepEqual(r.content, [{ type: "text", text: "[1,2,3]" }]);
      assert.equal(r.structuredContent, undefined);

      r = await call(s, "s_nil", {});
      assert.deepEqual(r.content, []);

      r = await call(s, "s_iserr", {});
      assert.equal(r.isError, true);
      assert.deepEqual(r.content, [{ type: "text", text: "no good" }]);

      assert.equal(errText(await call(s, "s_notfn", {})),
        "skill s_notfn must return a function, or a table with a run function, to be called");
    });
  });

  it("a Lua error in a published skill is an isError result with the message and output", T, async () => {
    await withServer({
      skills: { "failing.lua": "--- Fails.\n-- @param x integer\n-- @tool\nreturn function(a)\n  print('about to fail')\n  error('bad input: ' .. a.x)\nend\n" },
    }, async (s) => {
      const text = errText(await call(s, "failing", { x: 5 }));
      assert.equal(text, "skills/failing.lua:6: bad input: 5\noutput:\nabout to fail\n");
      assert.equal(errText(await call(s, "failing", { x: 1.5 })), "invalid arguments: x must be an integer");
    });
  });

  it("mcp.log and mcp.progress from a published skill reach the client", T, async () => {
    await withServer({
      args: ["--default-instruction-limit", String(MAX_INSTR)],
      skills: {
        "chatty.lua": "--- Talks.\n-- @param n integer\n-- @tool\nreturn function(a)\n" +
          "  mcp.log('info', { step = 'start', n = a.n })\n" +
          "  mcp.progress(1, 2, 'half')\n  mcp.progress(2, 2, 'done')\n" +
          "  mcp.log('warning', 'almost')\n" +
          // SDK 1.32.2 drops progress that arrives in the same read as the response (see sdk.test.mjs)
          "  local t = os.clock() while os.clock() - t < 0.2 do end\n" +
          "  return 'talked'\nend\n",
      },
    }, async (s) => {
      const logs = [];
      s.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
      const progress = [];
      const r = await call(s, "chatty", { n: 3 }, { onprogress: (p) => progress.push(p) });
      assert.deepEqual(r.content, [{ type: "text", text: "talked" }]);
      await until("two log messages", () => logs.length >= 2);
      assert.deepEqual(logs.map((l) => [l.level, l.data]), [["info", { step: "start", n: 3 }], ["warning", "almost"]]);
      assert.deepEqual(progress, [
        { progress: 1, total: 2, message: "half" },
        { progress: 2, total: 2, message: "done" },
      ]);
    });
  });

  it("unpublishing (save without tool, delete) sends list_changed and removes the tool", T, async () => {
    await withServer({}, async (s) => {
      const changed = watchListChanged(s);
      ok(await call(s, "save_skill", { name: "pub", code: "return function() return 'p' end\n", description: "P.", tool: true }));
      await waitCount(changed, 1, "publish");
      assert.ok((await s.client.listTools()).tools.some((t) => t.name === "pub"));
      ok(await call(s, "save_skill", { name: "pub", code: "return function() return 'p' end\n", description: "P." }));
      await waitCount(changed, 2, "unpublish by saving without tool");
      assert.equal((await s.client.listTools()).tools.some((t) => t.name === "pub"), false);
      const err = await call(s, "pub", {}).then((r) => r, (e) => e);
      assert.equal(err.code, -32602, `calling an unpublished tool: ${JSON.stringify(err)}`);

      ok(await call(s, "save_skill", { name: "pub", code: "return function() return 'p' end\n", description: "P.", tool: true }));
      await waitCount(changed, 3, "publish again");
      ok(await call(s, "delete_skill", { name: "pub" }));
      await waitCount(changed, 4, "unpublish by delete");
      assert.equal((await s.client.listTools()).tools.some((t) => t.name === "pub"), false);
      // a built-in tool's name cannot be published
      assert.equal(errText(await call(s, "save_skill", { name: "execute_code", code: "return 1", description: "x", tool: true })),
        '"execute_code" is the name of a built-in tool; choose another name to publish it');
    });
  });

  it("a @tool header written directly to disk publishes the skill (list_changed)", T, async () => {
    await withServer({}, async (s) => {
      const changed = watchListChanged(s);
      writeFileSync(path.join(s.skillsDir, "ondisk.lua"),
        "--- Squares x.\n-- @param x number the value\n-- @tool Squarer\nreturn function(a) return { sq = a.x * a.x } end\n");
      await waitCount(changed, 1, "list_changed after writing a @tool file");
      const t = (await s.client.listTools()).tools.find((x) => x.name === "ondisk");
      assert.ok(t);
      assert.equal(t.title, "Squarer");
      assert.deepEqual(t.inputSchema, { type: "object", properties: { x: { type: "number", description: "the value" } }, required: ["x"] });
      assert.deepEqual((await call(s, "ondisk", { x: 7 })).structuredContent, { sq: 49 });
      // removing @tool on disk unpublishes
      writeFileSync(path.join(s.skillsDir, "ondisk.lua"), "--- Squares x.\nreturn function(a) return a.x * a.x end\n");
      await waitCount(changed, 2, "list_changed after removing @tool");
      assert.equal((await s.client.listTools()).tools.some((x) => x.name === "ondisk"), false);
    });
  });

  it("the shipped example skills: text_stats as a tool, csv via require", T, async () => {
    // the shipped skills directory, copied file by file into the test's own skills dir
    const files = {};
    for (const rel of ["text_stats.lua", "csv/SKILL.md", "csv/init.lua"]) {
      files[rel] = readFileSync(path.join(SHIPPED_SKILLS, rel), "utf8");
    }
    assert.deepEqual(readdirSync(SHIPPED_SKILLS).sort(), ["csv", "tests", "text_stats.lua"]);
    {
      await withServer({ skills: files }, async (s) => {
        const l = await listSkills(s);
        assert.deepEqual(l.problems, []);
        assert.deepEqual(l.skills.map((k) => [k.name, k.status, k.form, k.tool]),
          [["csv", "ok", "dir", false], ["text_stats", "ok", "file", true]]);
        const t = (await s.client.listTools()).tools.find((x) => x.name === "text_stats");
        assert.ok(t, "text_stats is published");
        assert.equal(t.title, "Text statistics");
        assert.deepEqual(t.inputSchema.required, ["text"]);
        assert.equal(t.inputSchema.properties.text.type, "string");
        assert.equal(t.inputSchema.properties.top.type, "integer");
        const r = await call(s, "text_stats", { text: "the cat and the dog\nthe cat", top: 2 });
        assert.notEqual(r.isError, true, JSON.stringify(r));
        assert.deepEqual(r.structuredContent, {
          lines: 2, words: 7, characters: 27,
          top_words: [{ word: "cat", count: 2 }, { word: "dog", count: 1 }],
        });
        const csv = await runOk(s, `
          local csv = require("skills.csv")
          local rows = csv.parse('id,name\\n1,"a,b"\\n2,"say ""hi"""\\n')
          return { n = #rows, second = rows[2].name, first = rows[1].name,
                   out = csv.encode(rows, { "id", "name" }) }`);
        assert.deepEqual(csv, { n: 2, first: "a,b", second: 'say "hi"', out: 'id,name\n1,"a,b"\n2,"say ""hi"""\n' });
      });
    }
  });
});

describe("get_execution_stats", () => {
  it("includes workspace, skills, history and pool.uptime_s", T, async () => {
    await withServer({ skills: { "one.lua": "--- One.\nreturn 1\n", "two.lua": "--- Two.\nreturn (\n" } }, async (s) => {
      ok(await call(s, "write_workspace_file", { path: "a.txt", content: "12345" }));
      ok(await call(s, "write_workspace_file", { path: "d/b.txt", content: "abc" }));
      await runOk(s, "return 1");
      await run(s, "error('x')");
      const st = ok(await call(s, "get_execution_stats", {}));
      assert.equal(st.workspace.files, 2);
      assert.equal(st.workspace.bytes, 8);
      assert.equal(st.skills.count, 2);
      assert.equal(st.skills.with_errors, 1);
      assert.equal(st.skills.published_as_tools, 0);
      assert.equal(st.history.recorded, 2);
      assert.deepEqual(st.history.by_outcome, { ok: 1, runtime: 1 });
      assert.equal(typeof st.pool.uptime_s, "number");
      assert.ok(st.pool.uptime_s > 0 && st.pool.uptime_s < 60, `uptime_s ${st.pool.uptime_s}`);
      assert.equal(typeof st.uptime_s, "number");
      assert.ok(st.uptime_s > 0 && st.uptime_s < 60, `uptime_s ${st.uptime_s}`);
      assert.equal(st.limits.max_skill_bytes, 262144);
      assert.equal(st.limits.workspace_max_files, 10000);
      assert.equal(st.executions, 2);
    });
  });
});
