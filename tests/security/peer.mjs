// Minimal raw JSON-RPC peer for the security suite: spawns the real moonbox binary with a fresh
// temporary --data-dir, writes newline-delimited JSON-RPC requests to its stdin and matches
// responses by id. No dependencies beyond node: the suite must keep working while node_modules
// or tests/lib are being changed by others.
//
// The binary is $MOONBOX (resolved against the current directory) or ../../build/moonbox
// relative to this file.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** Absolute path of the moonbox binary under test. */
export const MOONBOX = process.env.MOONBOX
  ? path.resolve(process.cwd(), process.env.MOONBOX)
  : path.resolve(HERE, "../../build/moonbox");

export class Peer {
  /**
   * @param {string[]} [args] extra command-line arguments (after --data-dir DIR)
   * @param {object} [env] extra environment variables
   * @param {string} [binary] another moonbox binary (the test build of process.test.mjs)
   */
  constructor(args = [], env = {}, binary = MOONBOX) {
    if (!existsSync(binary)) throw new Error(`moonbox binary not found at ${binary} (run make)`);
    this.dataDir = mkdtempSync(path.join(tmpdir(), "moonbox-sec-"));
    this.child = spawn(binary, ["--data-dir", this.dataDir, ...args], { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, ...env } });
    this.nextId = 1;
    this.waiting = new Map(); // id -> {resolve, reject, timer}
    this.responses = new Map(); // id -> {msg, at}
    this.stderr = "";
    this.badLines = [];
    this.notes = []; // notifications from the server: {msg, at}
    this.noteWaiters = new Set();
    this.exit = undefined;
    this._parts = [];
    this.child.stdin.on("error", () => {});
    this.child.stdout.setEncoding("utf8");
    this.child.stdout.on("data", (chunk) => this._onData(chunk));
    this.child.stderr.setEncoding("utf8");
    this.child.stderr.on("data", (c) => {
      if (this.stderr.length < 1 << 20) this.stderr += c;
    });
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => {
        this.exit = { code, signal };
        for (const [id, w] of this.waiting) {
          clearTimeout(w.timer);
          w.reject(new Error(`moonbox exited (code ${code}, signal ${signal}) before answering id ${id}; stderr:\n${this.stderr.slice(-2000)}`));
        }
        this.waiting.clear();
        resolve(this.exit);
      });
    });
  }

  _onData(chunk) {
    const at = performance.now();
    // Only the new chunk is searched for newlines, so a 20 MB line costs O(size), not O(size^2).
    let start = 0;
    let nl;
    while ((nl = chunk.indexOf("\n", start)) !== -1) {
      this._parts.push(chunk.slice(start, nl));
      const line = this._parts.join("");
      this._parts = [];
      start = nl + 1;
      this._onLine(line, at);
    }
    if (start < chunk.length) this._parts.push(chunk.slice(start));
  }

  _onLine(line, at) {
    try {
      this._handleLine(line, at);
    } finally {
      for (const w of [...this.noteWaiters]) w();
    }
  }

  _handleLine(line, at) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      this.badLines.push(line.slice(0, 300));
      return;
    }
    if (msg && msg.method !== undefined && msg.id === undefined) {
      this.notes.push({ msg, at });
      return;
    }
    if (msg && msg.id !== undefined && ("result" in msg || "error" in msg)) {
      const w = this.waiting.get(msg.id);
      if (w) {
        clearTimeout(w.timer);
        this.waiting.delete(msg.id);
        w.resolve({ msg, at });
      } else {
        this.responses.set(msg.id, { msg, at });
      }
    }
  }

  /** Writes one request; returns its id. */
  send(method, params) {
    const id = this.nextId++;
    const msg = { jsonrpc: "2.0", id, method };
    if (params !== undefined) msg.params = params;
    this.child.stdin.write(JSON.stringify(msg) + "\n");
    return id;
  }

  /** Waits for the response to id: {msg, at} (at = performance.now() when its line arrived). */
  wait(id, timeout = 10000) {
    const done = this.responses.get(id);
    if (done) {
      this.responses.delete(id);
      return Promise.resolve(done);
    }
    if (this.exit) return Promise.reject(new Error(`moonbox already exited: ${JSON.stringify(this.exit)}; stderr:\n${this.stderr.slice(-2000)}`));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new Error(`no response to id ${id} within ${timeout} ms; stderr:\n${this.stderr.slice(-2000)}`));
      }, timeout);
      this.waiting.set(id, { resolve, reject, timer });
    });
  }

  /**
   * Waits for the first notification (from index `from`) for which pred(msg) is true.
   * Resolves {msg, at}, or rejects after `timeout` ms or when stopAt() returns true.
   */
  waitNote(pred, { from = 0, timeout = 10000, stop } = {}) {
    return new Promise((resolve, reject) => {
      let timer;
      const check = () => {
        for (let i = from; i < this.notes.length; i++) {
          if (pred(this.notes[i].msg)) {
            cleanup();
            resolve(this.notes[i]);
            return;
          }
        }
        if (stop?.()) {
          cleanup();
          reject(new Error("stopped waiting for a notification"));
        }
      };
      const cleanup = () => {
        clearTimeout(timer);
        this.noteWaiters.delete(check);
      };
      timer = setTimeout(() => {
        cleanup();
        reject(new Error(`no matching notification within ${timeout} ms`));
      }, timeout);
      this.noteWaiters.add(check);
      check();
    });
  }

  /** Writes a notification (no id). */
  notify(method, params) {
    const msg = { jsonrpc: "2.0", method };
    if (params !== undefined) msg.params = params;
    this.child.stdin.write(JSON.stringify(msg) + "\n");
  }

  /** Sends a request and waits for its response; returns {msg, ms} (ms = wall time). */
  async request(method, params, timeout = 10000) {
    const t0 = performance.now();
    const { msg, at } = await this.wait(this.send(method, params), timeout);
    return { msg, ms: at - t0 };
  }

  /** initialize + notifications/initialized. */
  async initialize() {
    const { msg } = await this.request("initialize", {
      protocolVersion: "2025-11-25",
      capabilities: {},
      clientInfo: { name: "moonbox-security-test", version: "0.0.0" },
    });
    if (!msg.result) throw new Error(`initialize failed: ${JSON.stringify(msg)}`);
    this.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
    return msg.result;
  }

  /**
   * Calls execute_code. Returns {sc, ms, msg}: sc is structuredContent (throws when missing),
   * ms the wall time between writing the request and reading the response line.
   */
  async exec(args, timeout = 20000) {
    const { msg, ms } = await this.request("tools/call", { name: "execute_code", arguments: args }, timeout);
    const sc = msg.result?.structuredContent;
    if (!sc) throw new Error(`execute_code gave no structuredContent: ${JSON.stringify(msg).slice(0, 1000)}`);
    return { sc, ms, msg };
  }

  /** The pool part of get_execution_stats ({workers, busy, stuck_threads, ...}). */
  async pool() {
    const { msg } = await this.request("tools/call", { name: "get_execution_stats", arguments: {} });
    const pool = msg.result?.structuredContent?.pool;
    if (!pool) throw new Error(`get_execution_stats gave no pool: ${JSON.stringify(msg).slice(0, 1000)}`);
    return pool;
  }

  /** Kills the process if still running and removes the data directory. */
  async dispose() {
    if (!this.exit) {
      this.child.stdin.end();
      const t = setTimeout(() => this.child.kill("SIGKILL"), 500);
      await this.exited;
      clearTimeout(t);
    }
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** Spawns a server (extra environment variables in env) and initializes it. */
export async function startPeer(args = [], env = {}) {
  const p = new Peer(args, env);
  await p.initialize();
  return p;
}

export { sleep };
