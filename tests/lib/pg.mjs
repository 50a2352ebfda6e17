// A throwaway PostgreSQL cluster for tests (tests/replicas, `make test-pg`).
//
// startPg() runs initdb into a fresh temporary directory and starts `postgres` on a Unix socket
// only (listen_addresses='', the socket in that directory): nothing listens on TCP, nothing
// outside the test can reach it, and every cluster has its own socket directory so the port
// number never collides. PostgreSQL refuses to run as root: as root, initdb and postgres run as
// the `postgres` user through `setpriv` (util-linux; it execs, so the pid we hold is the
// postmaster's own, which `runuser` - a parent that waits - would hide), on directories chowned
// to it. moonbox and psql may run as root: root reaches the socket whatever its directory's mode.
//
// Speed: initdb --no-sync, and fsync=off unless { durable: true }. fsync=off loses nothing
// unless the machine itself crashes: a commit is still written to the WAL (synchronous_commit
// stays on), so an acknowledged write survives a SIGKILL of moonbox and an immediate restart of
// PostgreSQL (crash recovery replays the WAL from the page cache).
//
// Nothing is left running: stop() shuts down at once (SIGQUIT, "immediate"); every cluster
// still running when the process exits (normally, on SIGINT/SIGTERM/SIGHUP, or when node's test
// runner cancels a file) is shut down the same way and its directory removed. The postmaster
// stays in the test process's group, so tests/run-node.mjs kills it too if all else fails; its
// backends exit on their own when it dies.
//
//   const pg = await startPg();
//   const url = await pg.createDb("skills1");   // postgresql:///skills1?host=...&port=...&user=postgres
//   await pg.psql("SELECT count(*) FROM skills", "skills1");  // -> "3" (unaligned, tuples only)
//   await pg.restart();                          // immediate stop + start on the same data
//   await pg.stop();

import { spawn, spawnSync, execFile } from "node:child_process";
import { chownSync, chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { hookExit, live } from "./cleanup.mjs";

const IS_ROOT = process.getuid?.() === 0;

/** The bin directory of the newest installed PostgreSQL ($PG_BIN overrides), or null. */
export function pgBinDir() {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return null;
  const versions = readdirSync(base).filter((v) => existsSync(path.join(base, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length ? path.join(base, versions[0], "bin") : null;
}

/** Why a cluster cannot be started here, or null when it can. */
export function pgUnavailable() {
  const bin = pgBinDir();
  if (!bin) return "PostgreSQL is not installed (Debian package postgresql; make test-deps)";
  if (IS_ROOT && spawnSync("id", ["-u", "postgres"]).status !== 0) return "no `postgres` user to run PostgreSQL as";
  return null;
}

// ---- stopping a cluster (every live one at exit: ./cleanup.mjs) ------------------------------

/** Whether pid runs (a zombie - dead, not yet reaped: the loop does not run in an exit handler -
 * does not). */
function alive(pid) {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

function killSync(pid, ms = 3000) {
  try { process.kill(pid, "SIGQUIT"); } catch { return; }
  const wait = new Int32Array(new SharedArrayBuffer(4));
  const t0 = Date.now();
  for (;;) {
    if (!alive(pid)) return;
    if (Date.now() - t0 > ms) break;
    Atomics.wait(wait, 0, 0, 20);
  }
  try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
}

/** The command line that runs `cmd args` as the cluster's owner. */
function asOwner(cmd, args) {
  return IS_ROOT
    ? ["setpriv", ["--reuid=postgres", "--regid=postgres", "--init-groups", "--", cmd, ...args]]
    : [cmd, args];
}

function run(cmd, args, opts = {}) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20, ...opts }, (err, stdout, stderr) => {
      if (err) {
        err.message = `${cmd} ${args.join(" ").slice(0, 300)}: ${err.message}\n${stderr}`.trim();
        err.stdout = stdout;
        err.stderr = stderr;
        reject(err);
      } else {
        resolve({ stdout, stderr });
      }
    });
  });
}

class PgCluster {
  constructor({ durable = false, port = 5432, settings = {} } = {}) {
    this.bin = pgBinDir();
    this.root = mkdtempSync(path.join(tmpdir(), "moonbox-pg-"));
    this.dataDir = path.join(this.root, "data");
    this.socketDir = this.root;
    this.port = port;
    this.durable = durable;
    this.settings = settings;
    this.proc = null;
    this.log = "";
    this.starts = 0;
  }

  async _init() {
    chmodSync(this.root, 0o755);
    if (IS_ROOT) {
      chownSync(this.root, Number(spawnSync("id", ["-u", "postgres"], { encoding: "utf8" }).stdout),
        Number(spawnSync("id", ["-g", "postgres"], { encoding: "utf8" }).stdout));
    }
    const [cmd, args] = asOwner(path.join(this.bin, "initdb"), [
      "-D", this.dataDir, "--auth=trust", "--no-sync", "-U", "postgres", "-E", "UTF8", "--locale=C",
      "--no-instructions",
    ]);
    await run(cmd, args, { cwd: this.root });
  }

  /** Starts the postmaster on the cluster's data and waits until it accepts connections. */
  async start() {
    if (this.proc) throw new Error("PostgreSQL is already running");
    const settings = {
      listen_addresses: "", // no TCP at all
      unix_socket_directories: this.socketDir,
      port: String(this.port),
      fsync: this.durable ? "on" : "off",
      full_page_writes: this.durable ? "on" : "off",
      shared_buffers: "32MB",
      max_connections: "200",
      logging_collector: "off",
      log_min_messages: "warning",
      ...this.settings,
    };
    const pgArgs = ["-D", this.dataDir];
    for (const [k, v] of Object.entries(settings)) pgArgs.push("-c", `${k}=${v}`);
    const [cmd, args] = asOwner(path.join(this.bin, "postgres"), pgArgs);
    const proc = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"], cwd: this.root });
    this.proc = proc;
    this.starts++;
    live.add(this);
    const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
    proc.exitedP = exited;
    // the cluster does not keep the test process alive: when the tests are done it exits, and the
    // exit hook stops the cluster (moonbox.mjs's per-file cluster under MOONBOX_TEST_STORE=pg)
    proc.unref();
    proc.stderr.unref();
    proc.stderr.on("data", (c) => {
      this.log += c.toString("utf8");
      if (this.log.length > 1 << 20) this.log = this.log.slice(-(1 << 19));
    });
    exited.then(() => { if (this.proc === proc) this.proc = null; });
    const t0 = Date.now();
    for (;;) {
      if (this.proc !== proc) {
        throw new Error(`postgres exited before accepting connections:\n${this.log.slice(-3000)}`);
      }
      const r = spawnSync(path.join(this.bin, "pg_isready"), ["-q", "-h", this.socketDir, "-p", String(this.port), "-U", "postgres"]);
      if (r.status === 0) break;
      if (Date.now() - t0 > 30000) {
        await this.stop();
        throw new Error(`postgres did not accept connections within 30 s:\n${this.log.slice(-3000)}`);
      }
      await sleep(30);
    }
    return this;
  }

  /** Shuts the cluster down at once (SIGQUIT: "immediate"; the next start recovers from the WAL);
   * mode "fast" (SIGINT) rolls back open transactions and checkpoints instead. */
  async stop(mode = "immediate") {
    const proc = this.proc;
    if (!proc) return;
    proc.kill(mode === "fast" ? "SIGINT" : "SIGQUIT");
    const killer = setTimeout(() => proc.kill("SIGKILL"), 10000);
    await proc.exitedP;
    clearTimeout(killer);
    this.proc = null;
  }

  /** stop() then start() on the same data directory. */
  async restart(mode = "immediate") {
    await this.stop(mode);
    await this.start();
  }

  get running() {
    return this.proc !== null;
  }

  get pid() {
    return this.proc?.pid;
  }

  /** A libpq URI for database `db` over the cluster's socket. */
  url(db = "postgres") {
    return `postgresql:///${encodeURIComponent(db)}?host=${encodeURIComponent(this.socketDir)}&port=${this.port}&user=postgres`;
  }

  /** psql's arguments for database db: unaligned, tuples only, stop at the first error. */
  _psqlArgs(sql, db) {
    return ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", this.socketDir, "-p", String(this.port),
      "-U", "postgres", "-d", db, "-c", sql];
  }

  /** Runs sql with psql on database db; resolves with its output (trimmed: rows one per line,
   * columns separated by "|"); rejects with psql's error. */
  async psql(sql, db = "postgres") {
    const { stdout } = await run(path.join(this.bin, "psql"), this._psqlArgs(sql, db), { timeout: 60000 });
    return stdout.trim();
  }

  /** The same, synchronously (for set-up code that cannot wait). */
  psqlSync(sql, db = "postgres") {
    const r = spawnSync(path.join(this.bin, "psql"), this._psqlArgs(sql, db), { encoding: "utf8", timeout: 60000 });
    if (r.status !== 0) throw new Error(`psql ${JSON.stringify(sql).slice(0, 200)} on ${db}: ${r.error?.message ?? ""}${r.stderr}`);
    return r.stdout.trim();
  }

  /** Creates database `name` (letters, digits, _); resolves with its url(). */
  async createDb(name) {
    checkName(name);
    await this.psql(`CREATE DATABASE "${name}"`);
    return this.url(name);
  }

  createDbSync(name) {
    checkName(name);
    this.psqlSync(`CREATE DATABASE "${name}"`);
    return this.url(name);
  }

  _cleanupSync() {
    live.delete(this);
    if (this.proc) killSync(this.proc.pid);
    this.proc = null;
    rmSync(this.root, { recursive: true, force: true });
  }

  /** Stops the cluster (immediately) and removes its directory. Safe to call twice. */
  async destroy() {
    await this.stop();
    live.delete(this);
    rmSync(this.root, { recursive: true, force: true });
  }
}

function checkName(name) {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) throw new Error(`not a plain database name: ${name}`);
}

/**
 * Starts a throwaway cluster.
 * @param {object} [opts]
 * @param {boolean} [opts.durable] keep fsync on (default off: see the top of this file)
 * @param {number} [opts.port] the socket's port number (default 5432; the socket directory is private)
 * @param {object} [opts.settings] more postgres -c settings
 * @returns {Promise<PgCluster>} with url(db), createDb(name), psql(sql, db), stop(mode),
 *   restart(mode), destroy(), pid, running, log
 */
export async function startPg(opts = {}) {
  const why = pgUnavailable();
  if (why) throw new Error(why);
  hookExit();
  const c = new PgCluster(opts);
  live.add(c);
  try {
    await c._init();
    await c.start();
  } catch (e) {
    c._cleanupSync();
    throw e;
  }
  return c;
}
