// A minimal throwaway PostgreSQL cluster for the catalog tests on PostgreSQL (catalog.test.mjs,
// search_quality.test.mjs), written while the harness's tests/lib/pg.mjs was not on main yet; its
// API is a subset of that one (pgUnavailable, startPg, createDb, stop), so switching is one import.
//
// initdb into a fresh temporary directory, then `postgres` on a Unix socket in it only
// (listen_addresses=''; nothing on TCP), fsync off (a test cluster). As root, initdb and postgres
// run as the user `postgres` through setpriv, which execs: the postmaster is this process's own
// child, in its process group (tests/run-node.mjs kills the group if all else fails). stop() and
// an exit handler (also on SIGINT, SIGTERM, SIGHUP) shut it down at once (SIGQUIT) and remove the
// directory.

import { spawn, spawnSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const IS_ROOT = process.getuid?.() === 0;

function binDir() {
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return null;
  const v = readdirSync(base).filter((d) => existsSync(path.join(base, d, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return v.length ? path.join(base, v[0], "bin") : null;
}

/** Why a cluster cannot be started here, or null when it can. */
export function pgUnavailable() {
  if (!binDir()) return "PostgreSQL is not installed (Debian package postgresql)";
  if (IS_ROOT && spawnSync("id", ["-u", "postgres"]).status !== 0) return "no `postgres` user to run PostgreSQL as";
  if (IS_ROOT && spawnSync("setpriv", ["--version"]).status !== 0) return "setpriv (util-linux) not found";
  return null;
}

const live = new Set();
function alive(pid) {
  try { return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8")); } catch { return false; }
}
function stopSync(c) {
  if (c.stopped) return;
  c.stopped = true;
  live.delete(c);
  try { process.kill(c.pid, "SIGQUIT"); } catch { /* gone */ }
  const wait = new Int32Array(new SharedArrayBuffer(4));
  const t0 = Date.now();
  while (alive(c.pid) && Date.now() - t0 < 3000) Atomics.wait(wait, 0, 0, 20);
  try { process.kill(c.pid, "SIGKILL"); } catch { /* gone */ }
  rmSync(c.dir, { recursive: true, force: true, maxRetries: 5 });
}
let hooked = false;
function hook() {
  if (hooked) return;
  hooked = true;
  process.on("exit", () => { for (const c of [...live]) stopSync(c); });
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.once(sig, () => {
      for (const c of [...live]) stopSync(c);
      process.kill(process.pid, sig);
    });
  }
}

/** Starts a cluster; resolves to {dir, createDb(name) -> conninfo URL, psql(sql, db), stop()}. */
export async function startPg() {
  const why = pgUnavailable();
  if (why) throw new Error(why);
  const bin = binDir();
  const dir = mkdtempSync(path.join(tmpdir(), "moonbox-pg-"));
  const data = path.join(dir, "data");
  const as = (cmd, args) => (IS_ROOT
    ? ["setpriv", ["--reuid=postgres", "--regid=postgres", "--init-groups", "--", cmd, ...args]]
    : [cmd, args]);
  if (IS_ROOT) {
    const uid = Number(spawnSync("id", ["-u", "postgres"], { encoding: "utf8" }).stdout);
    const gid = Number(spawnSync("id", ["-g", "postgres"], { encoding: "utf8" }).stdout);
    chownSync(dir, uid, gid);
  }
  const init = spawnSync(...as(path.join(bin, "initdb"), ["-D", data, "-U", "postgres", "-A", "trust",
    "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]), { encoding: "utf8" });
  if (init.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${init.stderr}`);
  }
  hook();
  const child = spawn(...as(path.join(bin, "postgres"), ["-D", data, "-c", "listen_addresses=", "-k", dir,
    "-c", "fsync=off", "-c", "full_page_writes=off"]), { stdio: ["ignore", "ignore", "pipe"] });
  const c = { pid: child.pid, dir, stopped: false };
  live.add(c);
  let log = "";
  child.stderr.on("data", (d) => { log = (log + d).slice(-4000); });
  const psql = (sql, db = "postgres") => {
    const r = spawnSync(path.join(bin, "psql"), ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", dir,
      "-U", "postgres", "-d", db, "-c", sql], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`psql: ${r.stderr}`);
    return r.stdout.trim();
  };
  const t0 = Date.now();
  for (;;) {
    if (existsSync(path.join(dir, ".s.PGSQL.5432")) && spawnSync(path.join(bin, "pg_isready"),
      ["-q", "-h", dir, "-U", "postgres"]).status === 0) break;
    if (!alive(c.pid) || Date.now() - t0 > 30000) {
      stopSync(c);
      throw new Error(`postgres did not start: ${log}`);
    }
    await sleep(50);
  }
  return {
    dir,
    psql,
    /** Creates database name; returns its libpq URL (Unix socket in dir, user postgres). */
    createDb(name) {
      psql(`CREATE DATABASE ${name}`);
      return `postgresql:///${name}?host=${encodeURIComponent(dir)}&user=postgres`;
    },
    async stop() { stopSync(c); },
  };
}
