// The tool catalog (lua/mcp/catalog.lua) driven by the official SDK client against the real
// binary: search_tools, get_tool_definition and list_tool_categories over a realistic multi-server
// catalog (tests/integration/fixtures/catalog: github, gitlab, slack and atlassian in the MCP form,
// business.json in the category form) plus moonbox's own sandbox API; ranking, detail levels,
// argument errors, suggestions, determinism, live reload, bad files and precedence between files.
// Every server gets a fresh temporary data directory and a temporary --catalog-dir.
// Every test runs twice: on the SQLite store (FTS5) and on PostgreSQL (--store-url, a database of
// its own per server in a throwaway cluster; the tsvector index, docs/catalog.md "On PostgreSQL").
// The PostgreSQL half is skipped, saying why, only when PostgreSQL is not installed.
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/catalog.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { TESTS_DIR, connectClient } from "../lib/moonbox.mjs";
import { pgUnavailable, startPg } from "../lib/pg.mjs";

const T = { timeout: 30000 };
const FIXTURES = path.join(TESTS_DIR, "integration/fixtures/catalog");

/**
 * Starts moonbox with --catalog-dir and connects the SDK client.
 * @param {object} [opts]
 * @param {boolean} [opts.fixtures=true] copy the fixture catalog into the catalog dir first
 * @param {string} [opts.dataDir] reuse a data directory (kept on close)
 * @param {string} [opts.catalogDir] reuse a catalog directory (kept on close)
 * @param {Record<string, string>} [opts.files] extra files to write into the catalog dir first
 * @param {string} [opts.storeUrl] PostgreSQL: this database (another server's) instead of a new one
 */
async function startOn(engine, opts = {}) {
  const storeArgs = engine === "postgres" ? ["--store-url", opts.storeUrl ?? await pgDatabase(opts.dataDir)] : [];
  const ownCatalog = !opts.catalogDir;
  const catalogDir = opts.catalogDir ?? mkdtempSync(path.join(tmpdir(), "moonbox-cat-dir-"));
  if (ownCatalog && opts.fixtures !== false) cpSync(FIXTURES, catalogDir, { recursive: true });
  for (const [name, content] of Object.entries(opts.files ?? {})) {
    writeFileSync(path.join(catalogDir, name), content);
  }
  const removeCatalog = () => { if (ownCatalog) rmSync(catalogDir, { recursive: true, force: true }); };
  let s;
  try {
    s = await connectClient({ dataDir: opts.dataDir,
      args: ["--catalog-dir", catalogDir, ...storeArgs, ...(opts.args ?? [])], name: "moonbox-catalog-test" });
    if (engine === "postgres" && !opts.dataDir) databases.set(s.dataDir, storeArgs[1]);
  } catch (e) {
    removeCatalog();
    throw e;
  }
  return {
    ...s,
    catalogDir,
    async close() {
      await s.close();
      removeCatalog();
    },
  };
}

// PostgreSQL: one cluster for the file, one database per server; a server started again on the
// same data directory gets the same database (the restart test).
let pg;
const databases = new Map(); // data dir -> store_url
let ndb = 0;
async function pgDatabase(dataDir) {
  if (dataDir && databases.has(dataDir)) return databases.get(dataDir);
  pg ??= await startPg();
  return pg.createDb(`catalog_${++ndb}`);
}
after(async () => { await pg?.stop(); });

function call(client, name, args) {
  return client.callTool({ name, arguments: args });
}

/** structuredContent of a successful result; also checks the text block is the same JSON. */
function ok(res) {
  assert.equal(res.isError, false, `unexpected error: ${JSON.stringify(res.content)}`);
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent);
  return res.structuredContent;
}

/** The text of a tool error. */
function err(res) {
  assert.equal(res.isError, true, `expected a tool error: ${JSON.stringify(res).slice(0, 400)}`);
  assert.equal(res.structuredContent, undefined);
  return res.content.map((c) => c.text).join("\n");
}

const search = async (client, args) => ok(await call(client, "search_tools", args));
const define = async (client, args) => ok(await call(client, "get_tool_definition", args));
const qualified = (t) => `${t.category}/${t.name}`;

/** Polls fn until it returns a truthy value or `ms` pass; returns the value (or the last one). */
async function until(fn, ms = 2000, step = 25) {
  const t0 = Date.now();
  let v;
  while (Date.now() - t0 < ms) {
    v = await fn();
    if (v) return v;
    await sleep(step);
  }
  return v;
}

const fixture = (name) => JSON.parse(readFileSync(path.join(FIXTURES, name), "utf8"));

for (const engine of ["sqlite", "postgres"]) {
const skip = engine === "postgres" ? pgUnavailable() ?? false : false;
const start = (opts) => startOn(engine, opts);

describe(`tool catalog (${engine})`, { skip }, () => {
  let s;
  let client;

  before(async () => {
    s = await start();
    client = s.client;
  });
  after(async () => {
    await s?.close();
  });

  it("lists the three catalog tools with schemas", T, async () => {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    for (const n of ["search_tools", "get_tool_definition", "list_tool_categories"]) {
      assert.ok(byName[n], `${n} is listed`);
      assert.equal(byName[n].inputSchema.type, "object");
      assert.equal(byName[n].annotations.readOnlyHint, true);
      assert.ok(byName[n].outputSchema, `${n} has an output schema`);
    }
    assert.deepEqual(byName.search_tools.inputSchema.required, ["query"]);
    assert.deepEqual(byName.search_tools.inputSchema.properties.detail_level.enum, ["name", "summary", "full"]);
  });

  describe("ranking: the obviously right entry comes first", () => {
    const cases = [
      ["create a pull request", "github/create_pull_request"],
      ["merge pull request", "github/merge_pull_request"],
      ["post a message to a slack channel", "slack/slack_post_message"],
      ["jira create issue", "atlassian/jira_create_issue"],
      ["move jira ticket to done", "atlassian/jira_transition_issue"],
      ["run a SQL query on postgres", "postgres/query"],
      ["SOQL query salesforce", "salesforce/query"],
      ["schedule a meeting", "calendar/create_event"],
      ["upload a file to google drive", "google_drive/upload_file"],
      ["send an email", "gmail/send_email"],
      ["add emoji reaction", "slack/slack_add_reaction"],
      ["create a github issue", "github/create_issue"],
      ["get_file_contents github", "github/get_file_contents"],
      ["listChannels", "slack/slack_list_channels"],
      ["create merge request", "gitlab/create_merge_request"],
      ["free time in calendar", "calendar/find_free_time"],
      ["describe table columns", "postgres/describe_table"],
      ["change opportunity stage", "salesforce/update_record"],
      ["push several files in one commit", "gitlab/push_files"],
      ["regex replace", "sandbox.regex/re.gsub"],
      ["parse json string", "sandbox.json/json.decode"],
      ["count items per status", "sandbox.data/count_by"],
      ["filter rows where field equals value", "sandbox.data/filter_by_field"],
      ["write a file to the workspace", "sandbox.workspace/write_file"],
      ["mask email addresses personal data", "sandbox.pii/tokenize_pii"],
    ];
    for (const [query, want] of cases) {
      it(`${JSON.stringify(query)} -> ${want}`, T, async () => {
        const sc = await search(client, { query, limit: 5 });
        assert.ok(sc.count >= 1, `no result for ${query}`);
        assert.equal(qualified(sc.tools[0]), want, `got ${sc.tools.map(qualified).join(", ")}`);
      });
    }

    // issue 18: paraphrases that share no word with the entry (the vocabulary's synonyms)
    for (const [query, want] of [
      ["substitute", "sandbox.regex/re.gsub"],
      ["regular expression substitute", "sandbox.regex/re.gsub"],
      ["open a PR", "github/create_pull_request"],
      ["get rid of a workspace file", "sandbox.workspace/delete_file"],
    ]) {
      it(`${JSON.stringify(query)} -> ${want} in the top 3`, T, async () => {
        const sc = await search(client, { query, limit: 3 });
        assert.ok(sc.tools.map(qualified).includes(want), `got ${sc.tools.map(qualified).join(", ")}`);
      });
    }

    it("every entry's exact name finds it first, whatever the synonyms of its words find", T, async () => {
      const all = await search(client, { query: "", detail_level: "name", limit: 200 });
      assert.ok(all.count > 100, `${all.count} entries`);
      const wrong = [];
      for (const t of all.tools) {
        for (const query of [t.name, `${t.category}.${t.name}`]) {
          const sc = await search(client, { query, detail_level: "name", limit: 3 });
          // a name in several categories: one of them first, and the qualified name finds its own
          const ok = query === t.name ? sc.tools[0]?.name === t.name : qualified(sc.tools[0] ?? {}) === qualified(t);
          if (!ok) wrong.push(`${query} -> ${sc.tools.map(qualified).join(", ")}`);
        }
      }
      assert.deepEqual(wrong, []);
    });

    it("a query made of synonyms stays bounded: an answer, not an error", T, async () => {
      // every word has alternatives in the vocabulary, and phrases: the expansion is capped
      const words = "get fetch find search delete remove create add update edit list show pull request " +
        "how many look up at once regular expression substitute replace open close move copy ";
      const query = words.repeat(10).slice(0, 1000);
      for (const detail_level of ["name", "summary"]) {
        const sc = await search(client, { query, detail_level, limit: 200 });
        assert.ok(["all", "most", "any"].includes(sc.match), sc.match);
        assert.ok(sc.count > 0);
      }
      const stats = (await call(client, "get_execution_stats", {})).structuredContent;
      assert.ok(stats.catalog.tools > 100);
    });

    it("words no entry has are left out and named", T, async () => {
      // (the vocabulary knows "ticket" and "move": made-up words are the ones no entry has)
      const sc = await search(client, { query: "zebra jira create issue quasar", limit: 3 });
      assert.equal(sc.match, "all");
      assert.deepEqual(sc.unknown_words, ["zebra", "quasar"]);
      assert.equal(qualified(sc.tools[0]), "atlassian/jira_create_issue");
      const all = await search(client, { query: "jira create issue", limit: 3 });
      assert.equal(all.match, "all");
      assert.equal(all.unknown_words, undefined);
    });

    it("no entry has all the words: entries that lack only one", T, async () => {
      const sc = await search(client, { query: "slack message merge", detail_level: "name", limit: 20 });
      assert.equal(sc.match, "most");
      assert.ok(sc.count > 0);
      assert.ok(sc.tools.every((t) => t.category === "slack"), sc.tools.map(qualified).join(", "));
      const u = await search(client, { query: "slack message merge zebra", detail_level: "name" });
      assert.equal(u.match, "most");
      assert.deepEqual(u.unknown_words, ["zebra"]);
    });

    it("no entry has all the words: entries with any of them", T, async () => {
      const sc = await search(client, { query: "gmail merge", detail_level: "name", limit: 20 });
      assert.equal(sc.match, "any");
      assert.equal(sc.unknown_words, undefined);
      const cats = new Set(sc.tools.map((t) => t.category));
      assert.ok(cats.has("gmail") && (cats.has("github") || cats.has("gitlab")), [...cats].join(", "));
    });

    it("nothing matches: empty list and a hint", T, async () => {
      const sc = await search(client, { query: "xylophone quasar" });
      assert.deepEqual(sc.tools, []);
      assert.equal(sc.count, 0);
      assert.equal(sc.more, false);
      assert.match(sc.hint, /nothing matched/);
    });
  });

  describe("detail levels", () => {
    it("name: only name and category", T, async () => {
      const sc = await search(client, { query: "pull request", detail_level: "name", limit: 3 });
      assert.equal(sc.detail_level, "name");
      assert.equal(sc.tools.length, 3);
      for (const t of sc.tools) assert.deepEqual(Object.keys(t).sort(), ["category", "name"]);
    });

    it("summary (the default): plus a one-line description", T, async () => {
      const sc = await search(client, { query: "create pull request" });
      assert.equal(sc.detail_level, "summary");
      assert.deepEqual(sc.tools[0], { name: "create_pull_request", category: "github",
        description: "Create a new pull request in a GitHub repository." });
      for (const t of sc.tools) assert.ok(!t.description.includes("\n"));
    });

    it("full: whole definitions with schemas and a Lua example", T, async () => {
      const sc = await search(client, { query: "create pull request", detail_level: "full", limit: 1 });
      const t = sc.tools[0];
      const want = fixture("github.json").tools.find((x) => x.name === "create_pull_request");
      assert.equal(t.name, "create_pull_request");
      assert.equal(t.kind, "tool");
      assert.equal(t.server, "github");
      assert.deepEqual(t.inputSchema, want.inputSchema);
      assert.deepEqual(t.annotations, want.annotations);
      assert.match(t.example, /^local result = servers\.github\.create_pull_request\(\{\n/);
    });

    it("sizes grow with the level", T, async () => {
      const size = async (detail_level) =>
        JSON.stringify(await search(client, { query: "issue", detail_level, limit: 10 })).length;
      const [n, s1, f] = [await size("name"), await size("summary"), await size("full")];
      assert.ok(n < s1 && s1 < f, `name ${n} < summary ${s1} < full ${f}`);
    });

    it("limit and more", T, async () => {
      const sc = await search(client, { query: "issue", limit: 2 });
      assert.equal(sc.count, 2);
      assert.equal(sc.more, true);
      assert.match(sc.hint, /more entries match/);
    });
  });

  describe("empty query and categories", () => {
    it("empty query lists every entry by category then name", T, async () => {
      const sc = await search(client, { query: "", detail_level: "name", limit: 200 });
      const got = sc.tools.map(qualified);
      const sorted = [...sc.tools].sort((a, b) =>
        a.category < b.category ? -1 : a.category > b.category ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
      assert.deepEqual(got, sorted.map(qualified));
      const cats = ok(await call(client, "list_tool_categories", {}));
      assert.equal(sc.count, cats.total_tools);
      assert.equal(sc.more, false);
      assert.equal(sc.match, undefined);
    });

    it("whitespace-only query lists too; category narrows it", T, async () => {
      const sc = await search(client, { query: "  ", category: "slack", detail_level: "name", limit: 50 });
      assert.equal(sc.count, 8);
      assert.ok(sc.tools.every((t) => t.category === "slack"));
    });

    it("category filter on a search", T, async () => {
      const sc = await search(client, { query: "create", category: "gitlab", limit: 20 });
      assert.ok(sc.count >= 3);
      assert.ok(sc.tools.every((t) => t.category === "gitlab"), sc.tools.map(qualified).join(", "));
      const other = await search(client, { query: "create issue", category: "atlassian" });
      assert.equal(qualified(other.tools[0]), "atlassian/jira_create_issue");
    });

    it("list_tool_categories: every category, its description and count", T, async () => {
      const sc = ok(await call(client, "list_tool_categories", {}));
      const by = Object.fromEntries(sc.categories.map((c) => [c.name, c]));
      const names = sc.categories.map((c) => c.name);
      assert.deepEqual(names, [...names].sort());
      assert.deepEqual(by.github, { name: "github", tools: 17,
        description: "GitHub: repositories, issues, pull requests, code search" });
      assert.deepEqual(by.gitlab, { name: "gitlab", tools: 6,
        description: "GitLab API: projects, issues, merge requests, files" });
      assert.equal(by.slack.tools, 8);
      assert.equal(by.atlassian.tools, 9);
      assert.deepEqual(by.google_drive, { name: "google_drive", tools: 6, description: "Google Drive files and folders" });
      assert.equal(by.salesforce.tools, 5);
      assert.equal(by.calendar.tools, 4);
      assert.equal(by.gmail.tools, 5);
      assert.equal(by.postgres.tools, 4);
      for (const c of ["sandbox.json", "sandbox.regex", "sandbox.workspace", "sandbox.skills",
        "sandbox.pii", "sandbox.mcp", "sandbox.data"]) {
        assert.ok(by[c], `${c} is listed`);
        assert.ok(by[c].description.length > 20, `${c} has a description`);
      }
      assert.equal(by["sandbox.data"].tools, 10);
      assert.equal(by["sandbox.regex"].tools, 5);
      assert.equal(sc.total_tools, sc.categories.reduce((n, c) => n + c.tools, 0));
      assert.equal(sc.total_tools, 17 + 6 + 8 + 9 + 24 + 46); // 46 sandbox API entries
      assert.equal(sc.problems, undefined);
    });

    it("get_execution_stats reports catalog counts", T, async () => {
      const st = ok(await call(client, "get_execution_stats", {}));
      assert.equal(st.catalog.tools, 110);
      assert.equal(st.catalog.categories, 16);
      assert.equal(st.catalog.sources, 6);
      assert.equal(st.catalog.source_errors, 0);
      assert.ok(st.catalog.search_ms.count > 0);
      assert.equal(typeof st.catalog.search_ms.p50, "number");
    });
  });

  describe("get_tool_definition", () => {
    it("an MCP-form tool: its schemas and a generated Lua call", T, async () => {
      const d = await define(client, { tool_name: "slack_post_message" });
      const want = fixture("slack.json").tools.find((x) => x.name === "slack_post_message");
      assert.equal(d.name, "slack_post_message");
      assert.equal(d.category, "slack");
      assert.equal(d.server, "slack");
      assert.equal(d.kind, "tool");
      assert.equal(d.source, "file:slack.json");
      assert.equal(d.description, want.description);
      assert.deepEqual(d.inputSchema, want.inputSchema);
      assert.equal(d.example, [
        "local result = servers.slack.slack_post_message({",
        '  channel_id = "<channel_id>", -- string, required: The ID of the channel to post to',
        '  text = "<text>", -- string, required: The message text to post',
        "})"].join("\n"));
    });

    it("a category-form tool: mcp_server, use_cases, optional arguments as comments", T, async () => {
      const d = await define(client, { tool_name: "upload_file" });
      assert.equal(d.category, "google_drive");
      assert.equal(d.server, "gdrive");
      assert.deepEqual(d.use_cases, ["store a report in drive", "upload a document"]);
      assert.equal(d.example, [
        "local result = servers.gdrive.upload_file({",
        '  content = "<content>", -- string, required: File content (base64 for binary)',
        '  name = "<name>", -- string, required: File name',
        '  -- folder_id = "<folder_id>", -- string, optional: Destination folder ID',
        '  -- mime_type = "<mime_type>", -- string, optional: MIME type',
        "})"].join("\n"));
    });

    it("placeholders from defaults and enums", T, async () => {
      const d = await define(client, { tool_name: "share_file" });
      assert.match(d.example, /-- role = "reader", -- string, optional/);
      const l = await define(client, { tool_name: "slack_list_channels" });
      assert.match(l.example, /-- limit = 100, -- integer, optional/);
    });

    it("a sandbox API function: signature, parameters, example", T, async () => {
      const d = await define(client, { tool_name: "re.gsub" });
      assert.equal(d.kind, "function");
      assert.equal(d.category, "sandbox.regex");
      assert.equal(d.source, "moonbox");
      assert.equal(d.signature, "re.gsub(s, pattern, repl [, max [, flags]])");
      assert.deepEqual(d.parameters.map((p) => p.name), ["s", "pattern", "repl", "max", "flags"]);
      assert.match(d.example, /re\.gsub\("2024-01-15"/);
      assert.equal(d.server, undefined);
    });

    it("a name in two categories needs the category", T, async () => {
      const e = err(await call(client, "get_tool_definition", { tool_name: "create_issue" }));
      assert.equal(e, 'tool "create_issue" exists in 2 categories: github, gitlab. Pass category to choose one.');
      const d = await define(client, { tool_name: "create_issue", category: "gitlab" });
      assert.equal(d.category, "gitlab");
      assert.match(d.example, /^local result = servers\.gitlab\.create_issue\(/);
    });

    it("category.tool and category/tool name one entry", T, async () => {
      assert.equal((await define(client, { tool_name: "github.create_issue" })).category, "github");
      assert.equal((await define(client, { tool_name: "gitlab/create_issue" })).category, "gitlab");
    });

    it("wrong category for an existing name says where it is", T, async () => {
      const e = err(await call(client, "get_tool_definition", { tool_name: "jira_search", category: "github" }));
      assert.equal(e, 'no tool "jira_search" in category "github"; it exists in: atlassian');
    });

    it("unknown tool: the closest matches", T, async () => {
      const e = err(await call(client, "get_tool_definition", { tool_name: "get_file_contens" }));
      assert.match(e, /^unknown tool "get_file_contens"\. Closest matches: get_file_contents \((github|gitlab)\), get_file_contents \((github|gitlab)\), /);
      assert.ok(e.includes("(github)") && e.includes("(gitlab)"), e);
      const e2 = err(await call(client, "get_tool_definition", { tool_name: "slack_post_msg" }));
      assert.match(e2, /Closest matches: slack_post_message \(slack\)/);
      const e3 = err(await call(client, "get_tool_definition", { tool_name: "qqqqqqqqqqqq" }));
      assert.equal(e3, 'unknown tool "qqqqqqqqqqqq". Nothing similar; use search_tools to find tools.');
    });
  });

  describe("argument errors", () => {
    const cases = [
      ["search_tools", {}, 'invalid arguments: query is required (a string; "" lists every entry)'],
      ["search_tools", { query: 5 }, "invalid arguments: query must be a string, got number"],
      ["search_tools", { query: "x", bogus: 1 },
        'invalid arguments: unknown argument "bogus" (expected query, category, detail_level, limit)'],
      ["search_tools", { query: "x", limit: 0 }, "invalid arguments: limit must be from 1 to 200, got 0"],
      ["search_tools", { query: "x", limit: 201 }, "invalid arguments: limit must be from 1 to 200, got 201"],
      ["search_tools", { query: "x", limit: 2.5 }, "invalid arguments: limit must be an integer from 1 to 200, got 2.5"],
      ["search_tools", { query: "x", limit: "5" }, "invalid arguments: limit must be an integer from 1 to 200, got string"],
      ["search_tools", { query: "x", detail_level: "verbose" },
        'invalid arguments: detail_level must be "name", "summary" or "full", got "verbose"'],
      ["search_tools", { query: "x", detail_level: 1 }, "invalid arguments: detail_level must be a string, got number"],
      ["search_tools", { query: "x", category: ["a"] }, "invalid arguments: category must be a string, got array"],
      ["search_tools", { query: "x".repeat(1001) },
        "invalid arguments: query is 1001 bytes, longer than the maximum 1000"],
      ["search_tools", { query: "?!* ()" },
        'query "?!* ()" has no words to search for (letters or digits); use "" to list every entry'],
      ["get_tool_definition", {}, "invalid arguments: tool_name is required (a name from search_tools; name works too)"],
      ["get_tool_definition", { tool_name: "" }, "invalid arguments: tool_name must not be empty"],
      ["get_tool_definition", { tool_name: {} }, "invalid arguments: tool_name must be a string, got object"],
      ["get_tool_definition", { tool_name: "x", extra: true },
        'invalid arguments: unknown argument "extra" (expected tool_name (or name), category, format)'],
      ["list_tool_categories", { x: 1 }, "invalid arguments: list_tool_categories takes no arguments"],
    ];
    for (const [tool, args, want] of cases) {
      it(`${tool} ${JSON.stringify(args).slice(0, 60)}`, T, async () => {
        assert.equal(err(await call(client, tool, args)), want);
      });
    }

    it("unknown category: the closest ones", T, async () => {
      const e = err(await call(client, "search_tools", { query: "x", category: "githib" }));
      assert.match(e, /^unknown category "githib"\. Closest categories: github, gitlab, /);
      assert.match(e, /list_tool_categories/);
    });
  });

  describe("determinism", () => {
    it("the same query gives the same answer, here and in another server", T, async () => {
      const queries = ["issue", "create", "file", "list", "message channel", ""];
      const run = async (c) => {
        const out = [];
        for (const query of queries) {
          for (const detail_level of ["name", "summary", "full"]) {
            out.push(await call(c, "search_tools", { query, detail_level, limit: 50 }));
          }
        }
        return out;
      };
      const a = await run(client);
      const b = await run(client);
      assert.deepEqual(a, b);
      const other = await start();
      try {
        assert.deepEqual(await run(other.client), a);
      } finally {
        await other.close();
      }
    });

    it("entries with equal scores come in name order, whatever the order they were stored in", T, async () => {
      // 40 entries that score the same for "gadget", stored in reverse name order
      const tools = [];
      for (let i = 40; i >= 1; i--) {
        tools.push({ name: `gadget_${String(i).padStart(2, "0")}`, description: "Same text for every gadget." });
      }
      const t = await start({ fixtures: false, files: { "gadgets.json": JSON.stringify({ server: "gadgets", tools }) } });
      try {
        for (const limit of [1, 5, 39]) {
          const sc = await search(t.client, { query: "gadget", detail_level: "name", limit });
          const want = Array.from({ length: limit }, (_, i) => `gadget_${String(i + 1).padStart(2, "0")}`);
          assert.deepEqual(sc.tools.map((x) => x.name), want, `limit ${limit}`);
          assert.equal(sc.more, true);
        }
      } finally {
        await t.close();
      }
    });

    it("ties are broken by name then category", T, async () => {
      const sc = await search(client, { query: "create_issue", detail_level: "name", limit: 10 });
      const i = sc.tools.findIndex((t) => t.category === "github" && t.name === "create_issue");
      const j = sc.tools.findIndex((t) => t.category === "gitlab" && t.name === "create_issue");
      assert.ok(i >= 0 && j >= 0, sc.tools.map(qualified).join(", "));
    });
  });
});

describe(`catalog files: live reload, bad files, precedence (${engine})`, { skip }, () => {
  it("a new, changed and deleted file is picked up within 2 s", T, async () => {
    const s = await start({ fixtures: false });
    try {
      const notion = {
        server: "notion", description: "Notion workspace",
        tools: [{ name: "create_page", description: "Create a new page in a Notion database.",
          inputSchema: { type: "object", properties: { title: { type: "string" } }, required: ["title"] } }],
      };
      const file = path.join(s.catalogDir, "notion.json");
      writeFileSync(file, JSON.stringify(notion));
      const found = await until(async () => {
        const sc = await search(s.client, { query: "notion page" });
        return sc.count > 0 && sc.tools[0];
      });
      assert.deepEqual(found, { name: "create_page", category: "notion",
        description: "Create a new page in a Notion database." });

      // an editor's save: write a temporary file, rename it over the old one
      notion.tools[0].name = "create_notion_page";
      writeFileSync(path.join(s.catalogDir, ".notion.json.tmp"), JSON.stringify(notion));
      renameSync(path.join(s.catalogDir, ".notion.json.tmp"), file);
      const renamed = await until(async () => {
        const sc = await search(s.client, { query: "notion page", detail_level: "name" });
        return sc.tools.length === 1 && sc.tools[0].name === "create_notion_page" && sc;
      });
      assert.ok(renamed, "the renamed tool replaced the old one");
      assert.match(s.stderr(), /catalog: imported .*notion\.json: 1 entries/);

      unlinkSync(file);
      const gone = await until(async () => (await search(s.client, { query: "notion" })).count === 0);
      assert.ok(gone, "the deleted file's tools are gone");
      assert.match(s.stderr(), /notion\.json is gone: its entries were removed/);
    } finally {
      await s.close();
    }
  });

  it("a file with a syntax error is named with its position; the others load", T, async () => {
    const s = await start({ files: { "broken.json": '{"server": "broken",\n  "tools": [\n    {"name": "x",}\n  ]\n}\n' } });
    try {
      const file = path.join(s.catalogDir, "broken.json");
      const sc = await search(s.client, { query: "create pull request", limit: 1 });
      assert.equal(qualified(sc.tools[0]), "github/create_pull_request");
      assert.match(s.stderr(), new RegExp(`moonbox: error: catalog: file ${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: .* at line 3 column \\d+ \\(position \\d+\\)`));
      const cats = ok(await call(s.client, "list_tool_categories", {}));
      assert.equal(cats.problems.length, 1);
      assert.equal(cats.problems[0].source, "file:broken.json");
      assert.match(cats.problems[0].error, /^catalog file .*broken\.json: .*line 3 column/);
      const st = ok(await call(s.client, "get_execution_stats", {}));
      assert.equal(st.catalog.source_errors, 1);
    } finally {
      await s.close();
    }
  });

  it("a file of the wrong shape names the JSON path of the problem", T, async () => {
    const s = await start({
      fixtures: false,
      files: {
        "shape.json": JSON.stringify({ server: "svc", tools: [{ name: "ok" }, { name: 42 }] }),
        "neither.json": JSON.stringify({ tools_by_server: {} }),
        "deep.json": JSON.stringify({ categories: { crm: { tools: { find: { use_cases: ["a", 7] } } } } }),
        "good.json": JSON.stringify({ server: "good", tools: [{ name: "fine_tool", description: "Works" }] }),
      },
    });
    try {
      await call(s.client, "list_tool_categories", {}); // the start-up import has run
      const log = s.stderr();
      assert.match(log, /catalog: file .*shape\.json: tools\[1\]\.name: tool name must be a string, got integer/);
      assert.match(log, /neither\.json: expected "categories" \(category form\) or "server" and "tools" \(MCP form\) at the top level/);
      assert.match(log, /deep\.json: categories\.crm\.tools\.find\.use_cases\[1\]: expected a string, got integer/);
      const sc = await search(s.client, { query: "fine tool" });
      assert.equal(qualified(sc.tools[0]), "good/fine_tool");
      assert.equal((await search(s.client, { query: "ok", category: "good" })).count, 0);
    } finally {
      await s.close();
    }
  });

  it("a file that becomes invalid keeps its last good content until fixed", T, async () => {
    const s = await start({ fixtures: false, files: {
      "svc.json": JSON.stringify({ server: "svc", tools: [{ name: "alpha_tool", description: "First" }] }) } });
    try {
      const file = path.join(s.catalogDir, "svc.json");
      assert.equal(qualified((await search(s.client, { query: "alpha" })).tools[0]), "svc/alpha_tool");
      writeFileSync(file, '{"server": "svc", "tools": [');
      const logged = await until(async () => /svc\.json: .*last good content stays in use/.test(s.stderr()));
      assert.ok(logged, `error logged: ${s.stderr().slice(-500)}`);
      assert.equal(qualified((await search(s.client, { query: "alpha" })).tools[0]), "svc/alpha_tool");
      const cats = ok(await call(s.client, "list_tool_categories", {}));
      assert.equal(cats.problems[0].source, "file:svc.json");

      writeFileSync(file, JSON.stringify({ server: "svc", tools: [{ name: "beta_tool", description: "Second" }] }));
      const fixed = await until(async () => (await search(s.client, { query: "beta" })).count === 1);
      assert.ok(fixed);
      assert.equal((await search(s.client, { query: "alpha" })).count, 0);
      assert.equal(ok(await call(s.client, "list_tool_categories", {})).problems, undefined);
    } finally {
      await s.close();
    }
  });

  it("the same category and name in two files: the first file by name wins, the other returns when it goes", T, async () => {
    const tool = (description) => JSON.stringify({ server: "dup", tools: [{ name: "thing", description }] });
    const s = await start({ fixtures: false, files: { "b.json": tool("from b"), "a.json": tool("from a") } });
    try {
      assert.equal((await define(s.client, { tool_name: "thing" })).description, "from a");
      assert.match(s.stderr(), /b\.json: dup\/thing is already defined by file:a\.json, which takes precedence; skipped/);
      unlinkSync(path.join(s.catalogDir, "a.json"));
      const back = await until(async () => {
        const r = await call(s.client, "get_tool_definition", { tool_name: "thing" });
        return !r.isError && r.structuredContent.description === "from b";
      });
      assert.ok(back, "b.json's entry is back");
      // and a file cannot override the sandbox API
      writeFileSync(path.join(s.catalogDir, "c.json"), JSON.stringify({ categories: { "sandbox.json": {
        tools: { "json.encode": { description: "fake" } } } } }));
      await until(async () => /c\.json: sandbox\.json\/json\.encode is already defined by moonbox/.test(s.stderr()));
      assert.notEqual((await define(s.client, { tool_name: "json.encode" })).description, "fake");
    } finally {
      await s.close();
    }
  });

  it("PostgreSQL: a file imported through one replica is found through another, vocabulary included", { ...T,
    skip: engine !== "postgres" || skip }, async () => {
    const a = await start({ fixtures: false });
    let b;
    try {
      b = await start({ fixtures: false, storeUrl: databases.get(a.dataDir) });
      // b counts the entries that have "issue" (an alternative of "defect"): none yet
      assert.equal((await search(b.client, { query: "defect", detail_level: "name" })).tools
        .some((t) => t.name === "file_issue"), false);
      writeFileSync(path.join(a.catalogDir, "tracker.json"), JSON.stringify({ server: "tracker",
        tools: [{ name: "file_issue", description: "File an issue in the tracker." }] }));
      // a imports it; b's counts are dropped by the notification, so "defect" finds it through "issue"
      const found = await until(async () => (await search(b.client, { query: "defect", detail_level: "name" }))
        .tools.some((t) => t.name === "file_issue"), 3000);
      assert.ok(found, "found through the other replica");
      assert.equal(qualified((await search(b.client, { query: "file_issue" })).tools[0]), "tracker/file_issue");
    } finally {
      await b?.close();
      await a.close();
    }
  });

  it("a restart keeps the same answers (unchanged files are not re-indexed)", T, async () => {
    const first = await start({ fixtures: true });
    const dataDir = first.dataDir;
    const catalogDir = first.catalogDir;
    const q = { query: "issue", detail_level: "full", limit: 20 };
    let before;
    try {
      before = await call(first.client, "search_tools", q);
    } finally {
      await first.client.close();
    }
    const second = await start({ dataDir, catalogDir, args: ["--log-level", "debug"] });
    try {
      assert.deepEqual(await call(second.client, "search_tools", q), before);
      assert.doesNotMatch(second.stderr(), /catalog: imported /);
    } finally {
      await second.close();
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(catalogDir, { recursive: true, force: true });
    }
  });
});
}
