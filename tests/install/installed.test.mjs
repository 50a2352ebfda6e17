// An installed moonbox, driven by the official TypeScript SDK client the way Claude Code starts
// it (`claude mcp add moonbox -- moonbox`: no flags, the user's HOME): the default data
// directory, the example skills and catalog files copied from PREFIX/share/moonbox on the first
// run and never again, `--share-dir none`, and the installed man page's source.
//
// MOONBOX_PREFIX names the installed prefix (the binary is PREFIX/bin/moonbox). It is set by
// tests/install/destdir.sh (a temporary DESTDIR) and tests/install/deb.sh (/usr, the package);
// without it the test is skipped. Run: cd tests && MOONBOX_PREFIX=... node --test install/

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, unlinkSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const PREFIX = process.env.MOONBOX_PREFIX;
const BIN = PREFIX && path.join(PREFIX, "bin/moonbox");
const SHARE = PREFIX && path.join(PREFIX, "share/moonbox");
const T = { timeout: 30000 };

/** Starts the installed binary with only HOME set (and PATH), connects the SDK client. */
async function start(home, args = []) {
  const transport = new StdioClientTransport({
    command: BIN,
    args,
    env: { HOME: home, PATH: process.env.PATH ?? "/usr/bin:/bin" },
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (c) => { stderr += c.toString("utf8"); });
  const client = new Client({ name: "moonbox-install-test", version: "0.0.0" });
  try {
    await client.connect(transport);
  } catch (e) {
    e.message += `\nmoonbox stderr:\n${stderr.slice(-2000)}`;
    throw e;
  }
  return { client, stderr: () => stderr, close: () => client.close() };
}

function ok(res) {
  assert.notEqual(res.isError, true, `unexpected tool error: ${JSON.stringify(res).slice(0, 800)}`);
  assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 500));
  return res.structuredContent;
}

async function skillNames(client) {
  const list = ok(await client.callTool({ name: "list_skills", arguments: {} }));
  return list.skills.map((k) => k.name).sort();
}

/** Relative paths of the regular files under dir, sorted. */
function files(dir) {
  const out = [];
  const walk = (d, rel) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(path.join(d, e.name), path.join(rel, e.name));
      else out.push(path.join(rel, e.name));
    }
  };
  walk(dir, "");
  return out.sort();
}

describe("installed moonbox", { skip: PREFIX ? false : "MOONBOX_PREFIX is not set" }, () => {
  let home;
  before(() => {
    assert.ok(existsSync(BIN), `${BIN} is installed`);
    home = mkdtempSync(path.join(tmpdir(), "moonbox-install-"));
  });
  after(() => rmSync(home, { recursive: true, force: true }));

  it("--version and --help work from the installed path", T, () => {
    const v = spawnSync(BIN, ["--version"], { encoding: "utf8" });
    assert.equal(v.status, 0, v.stderr);
    assert.match(v.stdout, /^moonbox \d+\.\d+\.\d+ \(Lua 5\.4/);
    const h = spawnSync(BIN, ["--help"], { encoding: "utf8" });
    assert.equal(h.status, 0, h.stderr);
    assert.match(h.stdout, /--share-dir/);
  });

  it("the shipped examples are in PREFIX/share/moonbox", T, () => {
    const shipped = files(SHARE);
    for (const f of ["skills/text_stats.lua", "skills/csv/SKILL.md", "skills/csv/init.lua", "catalog/README.md",
      "catalog/osv.json", "catalog/semgrep.json"])
      assert.ok(shipped.includes(f), `${f} in ${shipped.join(", ")}`);
  });

  it("first run: the default data directory gets a copy of the examples, which work", T, async () => {
    const data = path.join(home, ".local/share/moonbox");
    const s = await start(home);
    try {
      assert.deepEqual(files(path.join(data, "skills")), files(path.join(SHARE, "skills")));
      assert.deepEqual(files(path.join(data, "catalog")), files(path.join(SHARE, "catalog")));
      // (what is seeded: skills, catalog, workflows; share/moonbox/types and .luarc.json are for editors)
      for (const f of files(SHARE).filter((f) => /^(skills|catalog|workflows)\//.test(f)))
        assert.equal(readFileSync(path.join(data, f), "utf8"), readFileSync(path.join(SHARE, f), "utf8"), f);
      assert.ok(!existsSync(path.join(data, ".luarc.json")) && !existsSync(path.join(data, "types")), "editor files are not seeded");
      assert.equal(statSync(data).mode & 0o777, 0o700, "data directory mode");

      assert.deepEqual(await skillNames(s.client), ["csv", "text_stats"]);
      const res = ok(await s.client.callTool({ name: "execute_code", arguments: {
        code: 'local stats = require("skills.text_stats")\nreturn stats({ text = "moon box moon", top = 1 })' } }));
      assert.equal(res.success, true, res.error);
      assert.equal(res.result.words, 3);
      assert.deepEqual(res.result.top_words, [{ word: "moon", count: 2 }]);
      // @tool: the copied skill is published as a tool
      const tools = (await s.client.listTools()).tools.map((t) => t.name);
      assert.ok(tools.includes("execute_code") && tools.some((n) => n.includes("text_stats")), tools.join(", "));
      // the catalog answers (its index is built from the copied catalog_dir and the built-in API)
      const found = ok(await s.client.callTool({ name: "search_tools", arguments: { query: "regular expression" } }));
      assert.ok(JSON.stringify(found).includes("re."), JSON.stringify(found).slice(0, 300));
      // and the copied example catalog: a vulnerability tool of the OSV, Semgrep or GitHub server
      const vuln = ok(await s.client.callTool({ name: "search_tools", arguments: { query: "vulnerability" } }));
      assert.match(vuln.tools[0]?.category ?? "", /^example_(osv|semgrep|github)$/, JSON.stringify(vuln).slice(0, 300));

      // saving writes into the user's copy, never into the shipped directory
      ok(await s.client.callTool({ name: "save_skill", arguments: { name: "mine", code: "return 42\n", description: "Mine." } }));
      assert.ok(existsSync(path.join(data, "skills/mine.lua")));
      assert.ok(!existsSync(path.join(SHARE, "skills/mine.lua")));
    } finally {
      await s.close();
    }
  });

  it("later runs never copy again: a deleted example stays deleted", T, async () => {
    const data = path.join(home, ".local/share/moonbox");
    unlinkSync(path.join(data, "skills/text_stats.lua"));
    const s = await start(home);
    try {
      assert.deepEqual(await skillNames(s.client), ["csv", "mine"]);
      assert.ok(!existsSync(path.join(data, "skills/text_stats.lua")));
    } finally {
      await s.close();
    }
  });

  it("--share-dir none starts with empty skills and catalog directories", T, async () => {
    const other = mkdtempSync(path.join(tmpdir(), "moonbox-install-"));
    try {
      const s = await start(other, ["--share-dir", "none"]);
      try {
        assert.deepEqual(await skillNames(s.client), []);
        assert.deepEqual(files(path.join(other, ".local/share/moonbox/skills")), []);
      } finally {
        await s.close();
      }
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });
});
