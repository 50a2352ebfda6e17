// The store at startup (issue 4): "a corrupt or unreadable database gives a clear startup error
// that names the file; the server never silently starts empty over existing data".
//
// Every refusal case starts moonbox with stdin already closed: a server that wrongly starts
// would exit 0 at EOF, so a refusal must be a non-zero exit, within STARTUP_BOUND_MS, with
// nothing on stdout (the protocol channel), and a stderr message that names the full path of
// moonbox.db. The database file must be byte-identical afterwards.
//
// Cases: garbage bytes (random, text, a valid SQLite magic followed by garbage); a real moonbox
// database with a page overwritten by garbage (page 2, the root page of skill_versions) or cut
// short; the same with a hot WAL left by kill -9 (the WAL must not be checkpointed into the
// refused file); moonbox.db being a directory; a schema newer than this moonbox (user_version
// 999) in WAL and in rollback-journal mode, and a foreign database whose tables clash with the
// schema; an unreadable, a read-only, and a non-writable-directory database (as a non-root user:
// when the tests run as root they use setpriv to run moonbox as nobody, and skip when that is
// not possible); a valid database from a previous run (starts and keeps every version and the
// execution history); the file modes of moonbox.db and its WAL files (0600, even with umask 0).
// Finally the execution history: bounded by --history-max-rows and kept across restarts.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync,
  readdirSync, rmSync, statSync, closeSync, writeSync, writeFileSync, lstatSync, truncateSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";

import { MOONBOX, makeDataDir, requireBinary, spawnRaw, sqlite3Cli } from "../lib/moonbox.mjs";

const STARTUP_BOUND_MS = 3000; // "exits non-zero promptly"
const PAGE = 4096;
const NOBODY = 65534;

const dirs = [];
function dataDir() {
  const d = makeDataDir();
  dirs.push(d);
  return d;
}
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const sha = (file) => createHash("sha256").update(readFileSync(file)).digest("hex");
const dbOf = (dir) => path.join(dir, "moonbox.db");

/**
 * Runs moonbox to completion with stdin closed. user "nobody" runs it through setpriv.
 * @returns {{status, signal, stdout, stderr, ms}}
 */
function runMoonbox(dir, { args = [], user } = {}) {
  requireBinary();
  const argv = ["--data-dir", dir, ...args];
  const cmd = user ? "setpriv" : MOONBOX;
  const full = user ? [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups", MOONBOX, ...argv] : argv;
  const t0 = performance.now();
  const r = spawnSync(cmd, full, { input: "", encoding: "utf8", timeout: 15000 });
  if (r.error) throw r.error;
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr, ms: performance.now() - t0 };
}

/** A refusal: non-zero exit, promptly, nothing on stdout, stderr naming the file and matching want. */
function expectRefused(r, file, want, label) {
  const ctx = `${label}: exit ${r.status} signal ${r.signal} after ${r.ms.toFixed(0)} ms; stderr:\n${r.stderr}`;
  assert.equal(r.signal, null, ctx);
  assert.notEqual(r.status, 0, `${label}: moonbox started over the database (exit 0 at stdin EOF); stderr:\n${r.stderr}`);
  assert.ok(r.ms < STARTUP_BOUND_MS, `${label}: took ${r.ms.toFixed(0)} ms to refuse (bound ${STARTUP_BOUND_MS} ms)`);
  assert.equal(r.stdout, "", `${label}: wrote to stdout: ${JSON.stringify(r.stdout.slice(0, 300))}`);
  assert.ok(r.stderr.includes(file), `${label}: stderr does not name ${file}:\n${r.stderr}`);
  for (const re of [want].flat()) assert.match(r.stderr, re, ctx);
}

const WILL_NOT_START = /moonbox will not start over it/;

/** Writes count bytes of garbage at offset into file (deterministic per seed). */
function overwrite(file, offset, count, seed) {
  const bytes = createHash("sha512").update(String(seed)).digest();
  const buf = Buffer.alloc(count);
  for (let i = 0; i < count; i++) buf[i] = bytes[i % bytes.length] ^ (i * 131 & 0xff);
  const fd = openSync(file, "r+");
  try {
    writeSync(fd, buf, 0, count, offset);
  } finally {
    closeSync(fd);
  }
}

/** integrity_check of a copy of file (and its WAL when present): the shell's output. */
function integrityOfCopy(file) {
  const scratch = mkdtempSync(path.join(tmpdir(), "moonbox-store-copy-"));
  try {
    const copy = path.join(scratch, "copy.db");
    copyFileSync(file, copy);
    if (existsSync(`${file}-wal`)) copyFileSync(`${file}-wal`, `${copy}-wal`);
    const r = sqlite3Cli(copy, "PRAGMA integrity_check");
    return (r.stdout + r.stderr).trim();
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** A tools/call over a RawPeer; returns structuredContent, asserting success. */
async function call(peer, id, name, args) {
  const m = await peer.request(id, "tools/call", { name, arguments: args });
  assert.ok(m.result && m.result.isError === false, `${name} ${JSON.stringify(args).slice(0, 200)} failed: ${JSON.stringify(m).slice(0, 600)}`);
  return m.result.structuredContent;
}

/** Closes stdin and expects a clean exit. */
async function stop(peer) {
  const { code, signal } = await peer.close(10000);
  assert.equal(signal, null, `moonbox died of ${signal}; stderr:\n${peer.stderr.slice(-2000)}`);
  assert.equal(code, 0, `moonbox exit code ${code}; stderr:\n${peer.stderr.slice(-2000)}`);
}

/**
 * Fills dir with a real moonbox database: n skills (a few hundred bytes each, so the tables span
 * several pages) and a couple of executions; stops moonbox cleanly.
 */
async function makeRealDb(dir, n = 40) {
  const peer = spawnRaw({ dataDir: dir, args: ["--log-level", "warning"] });
  try {
    await peer.initialize();
    for (let i = 0; i < n; i++) {
      await call(peer, `s${i}`, "save_skill", {
        name: `real_${i}`, description: `real skill ${i}`,
        code: `-- ${"padding ".repeat(40)}\nreturn function(x) return x + ${i} end`,
      });
    }
    await call(peer, "x1", "execute_code", { code: "return 1" });
    // the catalog's start-up import runs 50 ms after start or at first use: make it happen here,
    // so that a later session (the hot-WAL test) finds nothing to write into catalog_tools
    // (a session shorter than 50 ms left it to the next one, and the WAL then held the page the
    // hot-WAL test damages: a CI failure)
    await call(peer, "c1", "list_tool_categories", {});
    await stop(peer);
  } finally {
    await peer.dispose();
  }
  assert.equal(existsSync(`${dbOf(dir)}-wal`), false, "the WAL should be checkpointed and removed by a clean stop");
}

/** Asserts that a WAL file beside file, if any, holds nothing (nothing was written). */
function assertNoWalWrites(file, label) {
  const wal = `${file}-wal`;
  if (existsSync(wal)) assert.equal(statSync(wal).size, 0, `${label}: ${wal} has ${statSync(wal).size} bytes after the refusal`);
}

// ---- (a) garbage -------------------------------------------------------------------------------

test("(a) moonbox.db holding garbage bytes: refused, file named, file byte-identical", async (t) => {
  const cases = [
    ["16 KiB of random bytes", Buffer.concat([Buffer.from("X"), randomBytes(16383)])],
    ["a short text file", Buffer.from("these are my notes, not a database\n")],
    ["the SQLite magic followed by garbage", Buffer.concat([Buffer.from("SQLite format 3\0"), randomBytes(8192)])],
  ];
  for (const [what, bytes] of cases) {
    await t.test(what, () => {
      const dir = dataDir();
      const db = dbOf(dir);
      writeFileSync(db, bytes);
      const before = sha(db);
      const r = runMoonbox(dir);
      expectRefused(r, db, [WILL_NOT_START, /not a database|corrupt/], what);
      assert.equal(sha(db), before, `${what}: ${db} was modified`);
      assertNoWalWrites(db, what);
    });
  }
});

// ---- (b) a real database with a damaged page -----------------------------------------------------

test("(b) a real moonbox database with a page overwritten by garbage or cut short: refused, file byte-identical", async (t) => {
  const damage = [
    ["page 2 overwritten", (db) => overwrite(db, PAGE, PAGE, 2)],
    ["the root page of skill_versions overwritten", (db) => {
      const r = sqlite3Cli(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'skill_versions'", { readonly: true });
      const root = Number(r.stdout.trim());
      assert.ok(root > 1, `rootpage of skill_versions: ${r.stdout}${r.stderr}`);
      overwrite(db, (root - 1) * PAGE, PAGE, root);
    }],
    ["the file cut to half its size", (db) => truncateSync(db, Math.floor(statSync(db).size / PAGE / 2) * PAGE)],
  ];
  for (const [what, corrupt] of damage) {
    await t.test(what, async () => {
      const dir = dataDir();
      const db = dbOf(dir);
      await makeRealDb(dir);
      corrupt(db);
      const check = integrityOfCopy(db);
      assert.notEqual(check, "ok", `precondition: the damage (${what}) must be visible to integrity_check`);
      const before = sha(db);
      const r = runMoonbox(dir);
      expectRefused(r, db, [WILL_NOT_START, /corrupt|malformed|not a database/], what);
      assert.equal(sha(db), before, `${what}: ${db} was modified by the refusal`);
      assertNoWalWrites(db, what);
    });
  }
});

test("(b) a damaged database with a hot WAL (left by kill -9): refused, neither the file nor its WAL is modified", async () => {
  const dir = dataDir();
  const db = dbOf(dir);
  await makeRealDb(dir, 5);
  const root = Number(sqlite3Cli(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'catalog_tools'", { readonly: true }).stdout.trim());
  assert.ok(root > 1, "rootpage of catalog_tools");
  // Commit more saves, then kill -9: they stay in the WAL (no checkpoint).
  const peer = spawnRaw({ dataDir: dir, args: ["--log-level", "warning"] });
  try {
    await peer.initialize();
    for (let i = 0; i < 5; i++) await call(peer, `h${i}`, "save_skill", { name: `hot_${i}`, code: `return ${i}`, description: "in the WAL" });
    peer.child.kill("SIGKILL");
    await peer.exited;
  } finally {
    await peer.dispose();
  }
  const wal = `${db}-wal`;
  assert.ok(existsSync(wal) && statSync(wal).size > 0, "precondition: kill -9 leaves a non-empty WAL");
  overwrite(db, (root - 1) * PAGE, PAGE, 77); // a page the WAL does not hold
  assert.notEqual(integrityOfCopy(db), "ok", "precondition: the damage must be visible to integrity_check");
  const beforeDb = sha(db);
  const beforeWal = sha(wal);
  const r = runMoonbox(dir);
  expectRefused(r, db, [WILL_NOT_START, /corrupt|malformed/], "hot WAL");
  // A refusal must not checkpoint the WAL into the damaged file (or delete the WAL): whoever
  // salvages the database needs both exactly as they were.
  assert.ok(existsSync(wal), `${wal} was removed by the refusal (checkpointed into the refused file)`);
  assert.equal(sha(wal), beforeWal, `${wal} was modified by the refusal`);
  assert.equal(sha(db), beforeDb, `${db} was modified by the refusal (the WAL was checkpointed into it)`);
});

// ---- (c) a directory ------------------------------------------------------------------------------

test("(c) moonbox.db is a directory: clear error naming it, directory left alone", () => {
  const dir = dataDir();
  const db = dbOf(dir);
  mkdirSync(db);
  writeFileSync(path.join(db, "keep"), "x");
  const r = runMoonbox(dir);
  expectRefused(r, db, [/is a directory/, WILL_NOT_START], "directory");
  assert.ok(lstatSync(db).isDirectory(), "moonbox.db is still a directory");
  assert.deepEqual(readdirSync(db), ["keep"]);
});

// ---- (d) a newer schema ----------------------------------------------------------------------------

test("(d) a database with a newer schema (user_version 999): refused with a message naming the file", async () => {
  const dir = dataDir();
  const db = dbOf(dir);
  await makeRealDb(dir, 3);
  const set = sqlite3Cli(db, "PRAGMA user_version = 999");
  assert.equal(set.status, 0, set.stderr);
  assert.equal(sqlite3Cli(db, "PRAGMA user_version").stdout.trim(), "999");
  const before = sha(db);
  const r = runMoonbox(dir);
  expectRefused(r, db, [/schema version 999 is newer than this moonbox knows/, /upgrade moonbox/], "user_version 999");
  assert.equal(sha(db), before, `${db} was modified`);
  assert.equal(sqlite3Cli(db, "PRAGMA user_version").stdout.trim(), "999", "user_version changed");
  assert.equal(sqlite3Cli(db, "SELECT count(*) FROM skill_versions").stdout.trim(), "3", "the data is still there");
});

test("(d) a refused database in rollback-journal mode is left byte-identical (newer schema; foreign schema)", async (t) => {
  const cases = [
    ["user_version 999, created by the sqlite3 shell", "CREATE TABLE t (x); INSERT INTO t VALUES (42); PRAGMA user_version = 999;",
      [/schema version 999 is newer than this moonbox knows/]],
    ["a foreign database whose skills table clashes with the schema", "CREATE TABLE skills (x); INSERT INTO skills VALUES (42);",
      [/not a moonbox database \(it has tables but no moonbox schema version\)/]],
    ["a foreign database whose tables would not clash", "CREATE TABLE notes (x); INSERT INTO notes VALUES ('mine');",
      [/not a moonbox database/, /will not add its tables to it/]],
  ];
  for (const [what, sql, want] of cases) {
    await t.test(what, () => {
      const dir = dataDir();
      const db = dbOf(dir);
      const mk = sqlite3Cli(db, sql);
      assert.equal(mk.status, 0, mk.stderr);
      assert.equal(sqlite3Cli(db, "PRAGMA journal_mode").stdout.trim(), "delete", "precondition: rollback-journal mode");
      const before = sha(db);
      const r = runMoonbox(dir);
      expectRefused(r, db, want, what);
      assert.equal(sqlite3Cli(db, "PRAGMA journal_mode").stdout.trim(), "delete",
        `${what}: moonbox switched the refused database to WAL mode`);
      assert.equal(sha(db), before, `${what}: ${db} was modified by the refusal`);
    });
  }
});

// ---- (e) permissions ------------------------------------------------------------------------------

/** How to run moonbox as a user the kernel checks permissions for, or why we cannot. */
function unprivileged() {
  if (typeof process.getuid === "function" && process.getuid() !== 0) return { user: undefined };
  const probe = spawnSync("setpriv", [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups", MOONBOX, "--version"], { encoding: "utf8" });
  if (probe.error || probe.status !== 0) {
    return { skip: `running as root and cannot run moonbox as nobody with setpriv (${probe.error?.message ?? probe.stderr.trim()}); permission checks do not apply to root` };
  }
  return { user: "nobody" };
}

function chownTree(p, uid, gid) {
  chownSync(p, uid, gid);
  if (lstatSync(p).isDirectory()) for (const e of readdirSync(p)) chownTree(path.join(p, e), uid, gid);
}

test("(e) an unreadable, read-only or non-writable-directory database is refused as a non-root user", async (t) => {
  const how = unprivileged();
  if (how.skip) {
    t.diagnostic(`skipped: ${how.skip}`);
    t.skip(how.skip);
    return;
  }
  if (how.user) t.diagnostic("running as root: moonbox runs as nobody (setpriv) for these cases");
  const cases = [
    ["mode 000", (dir, db) => chmodSync(db, 0o000), [/cannot open for reading and writing/, /Permission denied/, WILL_NOT_START]],
    ["mode 0400 (read-only)", (dir, db) => chmodSync(db, 0o400), [/cannot open for reading and writing/, WILL_NOT_START]],
    ["data directory not writable (WAL files cannot be created)", (dir) => chmodSync(dir, 0o500), [/cannot open for reading and writing|readonly|read-only/, WILL_NOT_START]],
  ];
  for (const [what, restrict, want] of cases) {
    await t.test(what, async () => {
      const dir = dataDir();
      const db = dbOf(dir);
      await makeRealDb(dir, 3);
      if (how.user) chownTree(dir, NOBODY, NOBODY);
      const before = sha(db);
      restrict(dir, db);
      try {
        const r = runMoonbox(dir, { user: how.user });
        expectRefused(r, db, want, what);
      } finally {
        chmodSync(dir, 0o700);
        chmodSync(db, 0o600);
      }
      assert.equal(sha(db), before, `${what}: ${db} was modified`);
    });
  }
});

// ---- (f) a valid database from a previous run ---------------------------------------------------

test("(f) a valid database from a previous run starts and keeps every version and the history", async () => {
  const dir = dataDir();
  const db = dbOf(dir);
  const v1 = "return function() return 'first' end";
  const v2 = "return function() return 'second' end";
  let p = spawnRaw({ dataDir: dir, args: ["--log-level", "warning"] });
  try {
    await p.initialize();
    assert.equal((await call(p, 1, "save_skill", { name: "kept", code: v1, description: "kept skill" })).saved_version, 1);
    assert.equal((await call(p, 2, "save_skill", { name: "kept", code: v2, description: "kept skill" })).saved_version, 2);
    await call(p, 3, "save_skill", { name: "other", code: "return 3", description: "other skill" });
    assert.equal((await call(p, 4, "execute_code", { code: "return skills.kept()" })).result, "second");
    const failed = await p.request(5, "tools/call", { name: "execute_code", arguments: { code: "error('on purpose')" } });
    assert.equal(failed.result?.structuredContent?.success, false, JSON.stringify(failed).slice(0, 400));
    await stop(p);
  } finally {
    await p.dispose();
  }
  const ino = statSync(db).ino;
  p = spawnRaw({ dataDir: dir, args: ["--log-level", "warning"] });
  try {
    await p.initialize();
    const list = await call(p, 10, "list_skills", {});
    assert.deepEqual(list.skills.map((s) => [s.name, s.version]), [["kept", 2], ["other", 1]]);
    const kept = await call(p, 11, "load_skill", { name: "kept" });
    assert.equal(kept.code, `--- kept skill\n${v2}`);
    const hist = await call(p, 12, "skill_history", { name: "kept" });
    assert.deepEqual(hist.versions.map((v) => [v.version, v.source, v.in_use]), [[2, "save", true], [1, "save", false]]);
    assert.equal((await call(p, 13, "skill_history", { name: "kept", version: 1 })).code, `--- kept skill\n${v1}`);
    assert.equal((await call(p, 14, "execute_code", { code: "return skills.kept()" })).result, "second");
    const stats = await call(p, 15, "get_execution_stats", {});
    // two executions of the first run survive the restart (plus the one just made)
    assert.equal(stats.history?.recorded, 3, `history after restart: ${JSON.stringify(stats.history)}`);
    await stop(p);
  } finally {
    await p.dispose();
  }
  assert.equal(statSync(db).ino, ino, "moonbox.db was replaced by a new file");
  assert.equal(sqlite3Cli(db, "PRAGMA integrity_check").stdout.trim(), "ok");
  assert.equal(sqlite3Cli(db, "SELECT count(*) FROM skill_versions WHERE name = 'kept'").stdout.trim(), "2");
});

// ---- (g) file modes ------------------------------------------------------------------------------

test("(g) moonbox.db and its WAL files are mode 0600 (even with umask 0)", async () => {
  const dir = dataDir();
  const db = dbOf(dir);
  const old = process.umask(0);
  let p;
  try {
    p = spawnRaw({ dataDir: dir, args: ["--log-level", "warning"] });
  } finally {
    process.umask(old);
  }
  try {
    await p.initialize();
    await call(p, 1, "save_skill", { name: "m", code: "return 1", description: "mode check" });
    for (const f of [db, `${db}-wal`, `${db}-shm`]) {
      assert.ok(existsSync(f), `${f} exists while moonbox runs`);
      const mode = statSync(f).mode & 0o777;
      assert.equal(mode.toString(8), "600", `${f} has mode ${mode.toString(8)}`);
    }
    await stop(p);
  } finally {
    await p.dispose();
  }
  assert.equal((statSync(db).mode & 0o777).toString(8), "600", `${db} mode after a clean stop`);
});

// ---- execution history -------------------------------------------------------------------------

test("execution history is bounded by --history-max-rows and survives restarts", async () => {
  const dir = dataDir();
  const db = dbOf(dir);
  const args = ["--history-max-rows", "5", "--log-level", "warning"];
  let p = spawnRaw({ dataDir: dir, args });
  try {
    await p.initialize();
    // 7 successes, then 5 failures: the 5 newest rows kept must be the failures.
    for (let i = 1; i <= 12; i++) {
      const m = await p.request(i, "tools/call", { name: "execute_code", arguments: { code: i <= 7 ? `return ${i}` : `error("boom ${i}")` } });
      assert.equal(m.result?.structuredContent?.success, i <= 7, JSON.stringify(m).slice(0, 400));
    }
    await stop(p);
  } finally {
    await p.dispose();
  }
  assert.equal(sqlite3Cli(db, "SELECT count(*) FROM executions").stdout.trim(), "5");
  assert.equal(sqlite3Cli(db, "SELECT count(*) FROM executions WHERE outcome = 'ok'").stdout.trim(), "0",
    "the rows kept are not the newest ones");

  p = spawnRaw({ dataDir: dir, args });
  try {
    await p.initialize();
    const stats = await call(p, "st", "get_execution_stats", {});
    const h = stats.history;
    assert.ok(h, `get_execution_stats has no history: ${JSON.stringify(stats).slice(0, 500)}`);
    assert.equal(h.recorded, 5, JSON.stringify(h));
    assert.equal(h.max_rows, 5, JSON.stringify(h));
    assert.equal(h.by_outcome.ok, undefined, JSON.stringify(h));
    assert.equal(Object.values(h.by_outcome).reduce((a, b) => a + b, 0), 5, JSON.stringify(h));
    for (let i = 1; i <= 3; i++) await call(p, `ok${i}`, "execute_code", { code: `return ${i}` });
    const after = (await call(p, "st2", "get_execution_stats", {})).history;
    assert.equal(after.recorded, 5, JSON.stringify(after));
    assert.equal(after.by_outcome.ok, 3, JSON.stringify(after));
    await stop(p);
  } finally {
    await p.dispose();
  }
  assert.equal(sqlite3Cli(db, "SELECT count(*) FROM executions").stdout.trim(), "5");
  assert.equal(sqlite3Cli(db, "SELECT group_concat(outcome = 'ok', '') FROM (SELECT outcome FROM executions ORDER BY id)").stdout.trim(),
    "00111", "the newest 5 executions: 2 failures then 3 successes");
});
