// A first run shows something: on a fresh data directory, the first search_tools finds a
// relevant tool in the shipped example catalog (catalog/*.json), whichever way moonbox was
// started - with `make run`'s flags (the repository's skills, catalog and workflows directories)
// or as an installed moonbox, whose empty catalog directory starts as a copy of
// SHARE_DIR/catalog (src/seed.c; the share directory is built here the way `make install`
// lays it out). The official SDK client drives the real binary.
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/first_run.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { TESTS_DIR, connectClient } from "../lib/moonbox.mjs";

const T = { timeout: 30000 };
const REPO = path.resolve(TESTS_DIR, "..");

/** The tools of the example catalog that answer "vulnerability": category/name. */
const VULNERABILITY_TOOLS = new Set([
  "example_osv/query_vulnerability", "example_osv/query_vulnerabilities_batch", "example_osv/get_vulnerability",
  "example_semgrep/security_check", "example_semgrep/semgrep_scan", "example_semgrep/semgrep_scan_with_custom_rule",
  "example_semgrep/semgrep_findings", "example_github/list_dependabot_alerts", "example_github/get_dependabot_alert",
  "example_github/list_code_scanning_alerts",
]);

async function firstSearch(s) {
  const res = await s.client.callTool({ name: "search_tools", arguments: { query: "vulnerability" } });
  assert.equal(res.isError, false, JSON.stringify(res.content));
  const found = res.structuredContent;
  assert.ok(found.count >= 1, `search_tools("vulnerability") found nothing: ${JSON.stringify(found).slice(0, 400)}`);
  const top = `${found.tools[0].category}/${found.tools[0].name}`;
  assert.ok(VULNERABILITY_TOOLS.has(top), `the first result ${top} is about vulnerabilities: ${JSON.stringify(found.tools)}`);
  // its definition says how code calls it, on the server the category names
  const def = await s.client.callTool({ name: "get_tool_definition",
    arguments: { tool_name: found.tools[0].name, category: found.tools[0].category } });
  assert.equal(def.isError, false, JSON.stringify(def.content));
  assert.match(def.structuredContent.example, new RegExp(`servers\\.${def.structuredContent.server}\\.${found.tools[0].name}\\(`));
  assert.equal(typeof def.structuredContent.inputSchema, "object");
  return found;
}

describe("a fresh data directory's first search_tools", () => {
  it("with make run's flags finds a vulnerability tool in ./catalog", T, async () => {
    const s = await connectClient({ args: ["--skills-dir", path.join(REPO, "skills"),
      "--catalog-dir", path.join(REPO, "catalog"), "--workflows-dir", path.join(REPO, "workflows")] });
    try {
      await firstSearch(s);
    } finally {
      await s.close();
    }
  });

  it("installed: the catalog copied from SHARE_DIR on the first run finds one too", T, async () => {
    // SHARE_DIR as `make install` fills it: skills/, catalog/ and workflows/ of the repository
    const share = mkdtempSync(path.join(tmpdir(), "moonbox-share-"));
    try {
      for (const d of ["skills", "catalog", "workflows"]) cpSync(path.join(REPO, d), path.join(share, d), { recursive: true });
      const s = await connectClient({ args: ["--share-dir", share] });
      try {
        const catalogDir = path.join(s.dataDir, "catalog");
        assert.ok(existsSync(catalogDir), "the data directory has a catalog directory");
        assert.deepEqual(readdirSync(catalogDir).sort(), readdirSync(path.join(share, "catalog")).sort(),
          "the catalog directory is a copy of SHARE_DIR/catalog");
        await firstSearch(s);
      } finally {
        await s.close();
      }
    } finally {
      rmSync(share, { recursive: true, force: true });
    }
  });
});
