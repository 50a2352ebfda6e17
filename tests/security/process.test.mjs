// isolation = process (issue 15): executions in confined worker processes.
//
// A memory-safety bug in the Lua VM or in one of moonbox's C bindings would give sandbox code
// native execution. These tests stand in for that bug with the test build's __test global
// (src/sandbox_testhooks.c, compiled only with -DMB_TEST_HOOKS: `make test-security` builds it
// as $MOONBOX_HOOKS) and show what such code still cannot do in a worker process: crash anyone
// but its own execution, read /etc/passwd or the data directory, write a file, start a process,
// open a socket. Stuck workers are killed at the deadline, and the server keeps serving.

import { test, describe, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Peer, MOONBOX } from "./peer.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const HOOKS = process.env.MOONBOX_HOOKS
  ? path.resolve(process.cwd(), process.env.MOONBOX_HOOKS)
  : path.resolve(HERE, "../../build-hooks/moonbox");
const PROC = ["--isolation", "process"];

const peers = [];
async function start(binary, args = [], env = {}) {
  const p = new Peer([...PROC, ...args], env, binary);
  peers.push(p);
  await p.initialize();
  return p;
}
after(async () => {
  for (const p of peers) await p.dispose();
});

/** The pids of the worker processes of the server with this pid. */
function workers(serverPid) {
  return readdirSync("/proc").filter((d) => /^\d+$/.test(d)).filter((d) => {
    try {
      const st = readFileSync(`/proc/${d}/stat`, "utf8");
      return st.slice(st.lastIndexOf(")") + 2).split(" ")[1] === String(serverPid);
    } catch {
      return false;
    }
  }).map(Number);
}

/** The pool stats once `started` worker processes have been started (the replacement of a dead
 * one starts in the background), within 10 s. */
async function refilled(p, started) {
  const t0 = performance.now();
  for (;;) {
    const pool = await p.pool();
    if (pool.processes_started >= started) return pool;
    assert.ok(performance.now() - t0 < 10000, `no replacement started: ${JSON.stringify(pool)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** An execution that must end as a crash of its worker by this signal. */
function crashedBy(sc, signal) {
  assert.equal(sc.success, false, JSON.stringify(sc));
  assert.equal(sc.error_type, "crashed", JSON.stringify(sc));
  assert.match(sc.error, new RegExp(`died of ${signal}`), JSON.stringify(sc));
}

/* Worker processes need seccomp (and a kernel that lets this user load a filter). Where the
 * machine cannot confine a worker, isolation = auto falls back to threads with a warning: then
 * these tests say so and skip, rather than fail on what the machine lacks. */
const probe = new Peer(["--isolation", "auto"], {}, MOONBOX); // (whatever MOONBOX_ISOLATION says)
await probe.initialize();
const CONFINED = (await probe.pool()).isolation === "process";
const probeLog = probe.stderr;
await probe.dispose();
const NO_WORKERS = !CONFINED && `worker processes cannot run on this machine: ${
  (/isolation: worker processes cannot run here \(([^)]*)\)/.exec(probeLog) || [])[1] || "see the log"}`;
const NO_HOOKS = !existsSync(HOOKS) && "no test build";

test("isolation = auto chose worker processes here, or said in the log why not", () => {
  if (!CONFINED) assert.match(probeLog, /isolation: worker processes cannot run here/);
});

describe("the shipped binary", { skip: NO_WORKERS }, () => {
  test("has no __test functions, and runs executions in worker processes", async () => {
    const p = await start(MOONBOX);
    const { sc } = await p.exec({ code: "return type(__test), 1 + 1" });
    assert.deepEqual(sc.result, ["nil", 2], JSON.stringify(sc));
    const pool = await p.pool();
    assert.equal(pool.isolation, "process");
    assert.ok(pool.processes_started >= 1, JSON.stringify(pool));
  });
});

describe("a crash fails only its own execution", { skip: NO_WORKERS || NO_HOOKS }, () => {
  for (const [how, signal] of [["null", "SIGSEGV"], ["abort", "SIGABRT|SIGSYS"], ["recurse", "SIGSEGV"]]) {
    test(`${how}: error_type crashed naming ${signal}; a parallel execution finishes; the next one runs`, async () => {
      const p = await start(HOOKS, ["--workers", "2"]);
      // a long execution on the other worker, started first
      const longRun = p.exec({ code: "local n = 0 for i = 1, 3e7 do n = n + i end return n", timeout_ms: 30000 }, 60000);
      const { sc } = await p.exec({ code: `__test.crash("${how}")` });
      crashedBy(sc, signal);
      const long = await longRun;
      assert.equal(long.sc.success, true, JSON.stringify(long.sc));
      assert.equal(long.sc.result, 450000015000000);
      const next = await p.exec({ code: "return 'still here'" });
      assert.equal(next.sc.result, "still here", JSON.stringify(next.sc));
      const pool = await refilled(p, 3);
      assert.ok(pool.processes_crashed >= 1, JSON.stringify(pool));
    });
  }
});

describe("a compromised worker cannot reach outside", { skip: NO_WORKERS || NO_HOOKS }, () => {
  test("no environment but TZ, no descriptor but its channel and stdio, confined (seen from /proc)", async () => {
    const p = await start(HOOKS, ["--workers", "1"], { MOONBOX_SECRET_FOR_TEST: "hunter2" });
    const { sc } = await p.exec({ code: "return __test.env()" });
    assert.equal(sc.success, true, JSON.stringify(sc));
    assert.equal(sc.result, 1, "one variable: the TZ confine.c sets");
    const kids = workers(p.child.pid);
    assert.equal(kids.length, 1, `one worker process: ${kids}`);
    const pid = kids[0];
    const environ = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter(Boolean);
    assert.deepEqual(environ, [], "the worker was started with an empty environment");
    assert.deepEqual(readdirSync(`/proc/${pid}/fd`).map(Number).sort((a, b) => a - b), [0, 1, 2, 3]);
    assert.equal(readlinkSync(`/proc/${pid}/fd/0`), "/dev/null");
    assert.equal(readlinkSync(`/proc/${pid}/fd/1`), "/dev/null");
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    assert.match(status, /^Seccomp:\s+2$/m);
    assert.match(status, /^Threads:\s+1$/m);
  });

  const attempts = [
    ["reads /etc/passwd", `return __test.open("/etc/passwd")`],
    ["reads the data directory's store", `return __test.open(DATA .. "/moonbox.db")`],
    ["reads the PII key", `return __test.open(DATA .. "/pii.key")`],
    ["writes a file", `return __test.open("/tmp/moonbox-escape-test", "w")`],
    ["starts a process (execve)", `return __test.exec("/bin/sh")`],
    ["starts a process (fork)", `return __test.fork()`],
    ["opens a socket", `return __test.socket()`],
  ];
  for (const [what, code] of attempts) {
    test(`cannot: ${what} (the worker dies of SIGSYS; the server keeps serving)`, async () => {
      const p = await start(HOOKS);
      writeFileSync(path.join(p.dataDir, "pii.key.probe"), "x"); // the directory exists and is readable to the server
      const { sc } = await p.exec({ code: `local DATA = ${JSON.stringify(p.dataDir)} ${code}` });
      crashedBy(sc, "SIGSYS");
      assert.ok(!existsSync("/tmp/moonbox-escape-test"), "no file was written");
      const next = await p.exec({ code: "return 2" });
      assert.equal(next.sc.result, 2);
    });
  }
});

// Frames as worker_wire.h lays them out (for the tests of a worker that forges them): u32 length
// (of type + payload), type, then fields: u64 little-endian, byte strings as a u64 length and the bytes.
const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
const bytes = (t) => Buffer.concat([u64(Buffer.byteLength(t)), Buffer.from(t)]);
const frame = (type, ...fields) => {
  const body = Buffer.concat([Buffer.from([type]), ...fields]);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(body.length);
  return Buffer.concat([len, body]);
};

describe("a compromised worker that forges frames", { skip: NO_WORKERS || NO_HOOKS }, () => {
  const W_DONE = 9;
  const lua = (buf) => `__test.channel("${[...buf].map((c) => "\\" + c).join("")}") while true do end`;
  // io: bytes and tokens per source (src/tokest.h: upstream, workspace, context_vars, skills,
  // catalog, client), then the result's token estimate; then the note for the agent
  const NO_IO = Array.from({ length: 13 }, () => u64(0));
  const done = (result, io = NO_IO, note = "") => frame(W_DONE, u64(1), bytes(""), bytes(""), bytes(""), u64(1), bytes(result),
    bytes(""), u64(0), u64(0), u64(0), u64(0), ...io, bytes(note));

  for (const [what, buf, check] of [
    ["a frame over the size limit", Buffer.from([0xff, 0xff, 0xff, 0x7f, 9]),
      (sc) => assert.match(sc.error, /over the size limit/)],
    ["a frame of an unknown type", frame(77, u64(1)),
      (sc) => assert.match(sc.error, /broke the protocol/)],
    ["a result that is not JSON (it would be spliced into the answer)", done('1}, "isError": false, "x": {'),
      (sc) => assert.deepEqual([sc.error_type, sc.error], ["result", "the worker process returned a result that is not JSON"])],
    ["a W_SKIP for a job the server did not take back", frame(12, u64(1)),
      (sc) => assert.match(sc.error, /broke the protocol/)],
    ["a W_CLOSED with no W_CLOSING before (it would make the worker take jobs early)", frame(14),
      (sc) => assert.match(sc.error, /broke the protocol/)],
    ["a second W_CLOSING", Buffer.concat([frame(13), frame(13)]),
      (sc) => assert.match(sc.error, /broke the protocol/)],
    ["a short W_DONE", frame(W_DONE, u64(1)),
      (sc) => assert.match(sc.error, /broke the protocol/)],
    ["a W_DONE without the counts of what came in", frame(W_DONE, u64(1), bytes(""), bytes(""), bytes(""),
      u64(1), bytes("1"), bytes(""), u64(0), u64(0), u64(0), u64(0)),
      (sc) => assert.match(sc.error, /broke the protocol/)],
    ["a W_DONE without the note field", frame(W_DONE, u64(1), bytes(""), bytes(""), bytes(""), u64(1), bytes("1"),
      bytes(""), u64(0), u64(0), u64(0), u64(0), ...NO_IO),
      (sc) => assert.match(sc.error, /broke the protocol/)],
    ["a W_DONE with a note longer than a sandbox makes (MB_EXEC_NOTE_MAX)", done("1", NO_IO, "n".repeat(1024)),
      (sc) => assert.match(sc.error, /broke the protocol/)],
  ]) {
    test(`${what}: the execution fails clearly, the worker is replaced, the server serves`, async () => {
      const p = await start(HOOKS, ["--workers", "1"]);
      const { sc, msg } = await p.exec({ code: lua(buf), timeout_ms: 5000, instruction_limit: 1e10 });
      assert.equal(sc.success, false, JSON.stringify(sc));
      check(sc);
      assert.equal(msg.result.isError, true);
      // the forging worker is not trusted with the next job: a fresh one answers it
      assert.equal((await p.exec({ code: "return 8" })).sc.result, 8);
      assert.ok((await refilled(p, 2)).processes_started >= 2);
    });
  }

  test("a result that is not JSON with a job sent ahead to the same worker: that job runs on a fresh worker", async () => {
    const p = await start(HOOKS, ["--workers", "1"]);
    assert.equal((await p.exec({ code: "return 1" })).sc.result, 1); // the worker is up: jobs go ahead to it
    const bad = p.send("tools/call", { name: "execute_code",
      arguments: { code: lua(done('1}, "x": {')), timeout_ms: 5000, instruction_limit: 1e10 } });
    const next = p.send("tools/call", { name: "execute_code", arguments: { code: "return 9" } });
    const b = (await p.wait(bad, 20000)).msg.result.structuredContent;
    assert.equal(b.error_type, "result", JSON.stringify(b));
    const n = (await p.wait(next, 20000)).msg.result.structuredContent;
    assert.equal(n.result, 9, JSON.stringify(n));
    assert.ok((await refilled(p, 2)).processes_started >= 2);
  });

  test("a result that is not JSON with a job queued behind it (not sent ahead): that job runs on a fresh worker, once", async () => {
    // the bad result makes the worker idle for a moment (its job answered) before it is
    // stopped: the queued job must not be given to it then, and lost with it (it ran into its
    // deadline, and that timer then killed whatever process its worker slot had by then)
    const p = await start(HOOKS, ["--workers", "1"]);
    assert.equal((await p.exec({ code: "return 1" })).sc.result, 1);
    const spin = "local t = os.clock() while os.clock() - t < 0.3 do end "; // the next one is queued meanwhile
    const bad = p.send("tools/call", { name: "execute_code",
      arguments: { code: spin + lua(done('1}, "x": {')), timeout_ms: 5000, instruction_limit: 1e10 } });
    await new Promise((r) => setTimeout(r, 50)); // (well past the 2 ms of jobs sent ahead)
    const next = p.send("tools/call", { name: "execute_code", arguments: { code: "return 9", timeout_ms: 3000 } });
    const b = (await p.wait(bad, 20000)).msg.result.structuredContent;
    assert.equal(b.error_type, "result", JSON.stringify(b));
    const n = (await p.wait(next, 20000)).msg.result.structuredContent;
    assert.equal(n.result, 9, JSON.stringify(n));
    const pool = await refilled(p, 2);
    assert.equal(pool.processes_killed, 0, JSON.stringify(pool));
    assert.equal(pool.busy, 0, JSON.stringify(pool));
  });
});

describe("a compromised worker's large result that is not JSON, checked off the loop", { skip: NO_WORKERS || NO_HOOKS }, () => {
  // The worker sends a large result that is not JSON (checked on the thread pool, the worker
  // detached meanwhile) and dies at once; its slot gets a new process, which runs the next job
  // before the check ends. The check's verdict (stop that worker) is about the process that
  // sent the result, never the one that has its slot now.
  test("stops only the process that sent it: the next job, on the new process, is answered", async () => {
    const p = await start(HOOKS, ["--workers", "1"]);
    assert.equal((await p.exec({ code: "return 1" })).sc.result, 1);
    const N = 4000000; // "[1,1,1,..." unterminated: 8 MB that take the check a while to refuse
    const resultLen = 1 + 2 * N;
    const head = Buffer.concat([Buffer.from([9]), u64(1), bytes(""), bytes(""), bytes(""), u64(1), u64(resultLen)]);
    const tail = Buffer.concat([bytes(""), u64(0), u64(0), u64(0), u64(0), ...Array.from({ length: 13 }, () => u64(0))]);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(head.length + resultLen + tail.length);
    const esc = (buf) => [...buf].map((c) => "\\" + c).join("");
    const code = `__test.channel("${esc(Buffer.concat([len, head]))}" .. "[" .. ("1,"):rep(${N}) .. "${esc(tail)}") ` +
      `__test.crash("null")`;
    const bad = p.send("tools/call", { name: "execute_code",
      arguments: { code, timeout_ms: 10000, instruction_limit: 1e10, memory_mb: 64 } });
    await refilled(p, 2); // the new process of the slot is started
    const next = p.send("tools/call", { name: "execute_code",
      arguments: { code: "local t = os.clock() while os.clock() - t < 1 do end return 5", timeout_ms: 10000 } });
    const b = (await p.wait(bad, 30000)).msg.result.structuredContent;
    assert.equal(b.error_type, "result", JSON.stringify(b));
    const n = (await p.wait(next, 30000)).msg.result.structuredContent;
    assert.equal(n.result, 5, JSON.stringify(n));
  });
});

describe("a compromised worker that inflates its context-saved counts", { skip: NO_WORKERS || NO_HOOKS }, () => {
  // every source claims 10^12 bytes and as many tokens, the result 10^12 tokens
  const huge = Array.from({ length: 13 }, () => u64(1e12));
  const buf = frame(9, u64(1), bytes(""), bytes(""), bytes(""), u64(1), bytes("42"), bytes(""),
    u64(0), u64(0), u64(0), u64(0), ...huge, bytes("")); // (the last: no note)
  const forge = (before = "") => `${before} __test.channel("${[...buf].map((c) => "\\" + c).join("")}") while true do end`;
  // (what the forging worker answers next is not checked here: a worker serves one tenant,
  // whose results it can forge anyway; the point is that it cannot make the counts larger than
  // what it got)

  test("with nothing sent to it, only its context_vars' own bytes may be claimed", async () => {
    const p = await start(HOOKS, ["--workers", "1"]);
    const { sc, msg } = await p.exec({ code: forge(), timeout_ms: 5000, instruction_limit: 1e10, context_vars: { a: "xyz" } });
    assert.equal(sc.result, 42);
    const m = msg.result._meta["dev.moonbox/context"];
    assert.deepEqual(m.in, { context_vars: { bytes: 11, tokens: 11 } }, JSON.stringify(m));
    assert.ok(m.tokens_out <= m.bytes_out, JSON.stringify(m));
    assert.equal(m.tokens_saved, 0);
  });

  test("after one real call, the sources share what its reply was, once", async () => {
    const p = await start(HOOKS, ["--workers", "1"]);
    const honest = await p.exec({ code: "local s = list_skills() return 1" });
    const got = honest.msg.result._meta["dev.moonbox/context"].in.skills.bytes;
    assert.ok(got > 0);
    const { sc, msg } = await p.exec({ code: forge("local s = list_skills()"), timeout_ms: 5000, instruction_limit: 1e10 });
    assert.equal(sc.result, 42);
    const m = msg.result._meta["dev.moonbox/context"];
    const total = Object.values(m.in).reduce((a, x) => a + x.bytes, 0);
    assert.equal(total, got, JSON.stringify(m));
  });
  test("a result whose token estimate it understates counts as what it is (tokens_out not shrunk, tokens_saved not grown)", async () => {
    const p = await start(HOOKS, ["--workers", "1"]);
    const long = "word ".repeat(2000);
    const honest = (await p.exec({ code: `local s = list_skills() return ("word "):rep(2000)` })).msg.result._meta["dev.moonbox/context"];
    // the same result, with the worker's own estimate of it said to be 1 token
    const small = frame(9, u64(1), bytes(""), bytes(""), bytes(""), u64(1), bytes(JSON.stringify(long)), bytes(""),
      u64(0), u64(0), u64(0), u64(0), ...Array.from({ length: 12 }, () => u64(0)), u64(1), bytes(""));
    const code = `local s = list_skills() __test.channel("${[...small].map((c) => "\\" + c).join("")}") while true do end`;
    const { sc, msg } = await p.exec({ code, timeout_ms: 5000, instruction_limit: 1e10 });
    assert.equal(sc.result, long);
    const m = msg.result._meta["dev.moonbox/context"];
    // (the two answers differ only in their timing and memory figures: a few bytes)
    assert.ok(Math.abs(m.bytes_out - honest.bytes_out) < 40, JSON.stringify([m, honest]));
    assert.ok(Math.abs(m.tokens_out - honest.tokens_out) < 20, JSON.stringify([m, honest]));
  });
});

describe("a worker serves one tenant", { skip: NO_WORKERS }, () => {
  test("with one worker, alice, alice, bob, alice: a new process each time the tenant changes", async () => {
    const tokens = { alice: "token-alice-0123456789", bob: "token-bob-0123456789ab", default: "token-default-01234567" };
    const dataDir = mkdtempSync(path.join(tmpdir(), "moonbox-tenants-"));
    const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--http", "127.0.0.1:0", "--workers", "1", ...PROC,
      "--http-tokens", Object.entries(tokens).map(([t, k]) => `${k}=${t}`).join(",")], { stdio: ["ignore", "ignore", "pipe"] });
    try {
      let log = "";
      const url = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no URL in ${log}`)), 10000);
        proc.stderr.on("data", (c) => {
          log += c;
          const m = /serving MCP over HTTP on (\S+)/.exec(log);
          if (m) { clearTimeout(timer); resolve(m[1]); }
        });
      });
      let id = 1;
      const rpc = async (tenant, sid, body) => {
        const headers = { "content-type": "application/json", accept: "application/json, text/event-stream",
          authorization: `Bearer ${tokens[tenant]}`, "mcp-protocol-version": "2025-11-25" };
        if (sid) headers["mcp-session-id"] = sid;
        const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
        const text = await r.text();
        const data = text.split("\n").find((l) => l.startsWith("data:"));
        return { sid: r.headers.get("mcp-session-id"), msg: data ? JSON.parse(data.slice(5)) : text ? JSON.parse(text) : null };
      };
      const sessions = {};
      for (const t of Object.keys(tokens)) {
        const { sid } = await rpc(t, null, { jsonrpc: "2.0", id: id++, method: "initialize",
          params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } });
        await rpc(t, sid, { jsonrpc: "2.0", method: "notifications/initialized" });
        sessions[t] = sid;
      }
      const call = async (t, name, args) => (await rpc(t, sessions[t], { jsonrpc: "2.0", id: id++, method: "tools/call",
        params: { name, arguments: args } })).msg.result.structuredContent;
      const started = async (want) => { // the replacement starts in the background
        const t0 = performance.now();
        for (;;) {
          const pool = (await call("default", "get_execution_stats", {})).pool;
          if (pool.processes_started >= want) return pool.processes_started;
          assert.ok(performance.now() - t0 < 10000, JSON.stringify(pool));
          await new Promise((r) => setTimeout(r, 20));
        }
      };
      const runs = [];
      for (const t of ["alice", "alice", "bob", "alice"]) {
        assert.equal((await call(t, "execute_code", { code: "return 1" })).result, 1);
        runs.push(await started(0));
      }
      assert.equal(runs[1], runs[0], "the same tenant keeps its worker");
      assert.ok(runs[2] > runs[1] && runs[3] > runs[2], `a new worker when the tenant changed: ${runs}`);
    } finally {
      proc.kill("SIGTERM");
      await new Promise((r) => proc.exitCode !== null || proc.signalCode ? r() : proc.on("exit", r));
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("results too large to shape on the loop", { skip: NO_WORKERS }, () => {
  // A W_DONE over 256 KiB is checked and shaped on the thread pool; meanwhile its worker starts
  // the job sent ahead to it (and used to say W_START, which was taken for a protocol break: the
  // worker was killed and every pipelined execution but the last failed).
  test("pipelined on one worker, large and small results all arrive intact", async () => {
    const p = await start(MOONBOX, ["--workers", "1"]);
    const size = (i) => (i % 3 ? 400000 : 10);
    const ids = [];
    for (let i = 1; i <= 12; i++) {
      ids.push(p.send("tools/call", { name: "execute_code",
        arguments: { code: `return ('x'):rep(${size(i)}) .. ${i}` } }));
    }
    for (let i = 1; i <= 12; i++) {
      const { msg } = await p.wait(ids[i - 1], 30000);
      const sc = msg.result?.structuredContent;
      assert.equal(sc?.success, true, JSON.stringify(sc).slice(0, 300));
      assert.equal(sc.result, "x".repeat(size(i)) + i);
    }
    const pool = await p.pool();
    assert.equal(pool.processes_crashed + pool.processes_killed, 0, JSON.stringify(pool));
    assert.doesNotMatch(p.stderr, /broke the protocol/);
  });
});

describe("jobs sent ahead to a busy worker", { skip: NO_WORKERS }, () => {
  // Under load a busy worker gets jobs ahead (worker_pool.c ahead_room), and an idle one takes
  // back those a busy one has not started (steal: a compare-and-swap on the job's claim in the
  // page they share). So a job that turns out long holds up nothing sent after it.
  const loop = { code: "while true do end", timeout_ms: 4000, instruction_limit: 1e10 };

  test("a long job holds up none of the short ones sent after it: they all answer before it ends", async () => {
    const p = await start(MOONBOX, ["--workers", "2"]);
    await refilled(p, 2); // both workers up: the short ones go ahead to both
    p.child.stdin.cork(); // one write: some short ones go ahead behind the long one (it has just started)
    const long = p.send("tools/call", { name: "execute_code", arguments: loop });
    const shorts = [];
    for (let i = 1; i <= 40; i++) {
      shorts.push(p.send("tools/call", { name: "execute_code", arguments: { code: `return ${i}` } }));
    }
    p.child.stdin.uncork();
    const done = [];
    for (let i = 1; i <= 40; i++) {
      const { msg, at } = await p.wait(shorts[i - 1], 20000);
      assert.equal(msg.result?.structuredContent?.result, i, JSON.stringify(msg).slice(0, 300));
      done.push(at);
    }
    const { msg, at } = await p.wait(long, 20000);
    assert.equal(msg.result.structuredContent.error_type, "timeout", JSON.stringify(msg).slice(0, 300));
    assert.ok(Math.max(...done) < at, "every short job answered before the long one ended");
    const pool = await p.pool();
    assert.ok(pool.jobs_taken_back >= 1, JSON.stringify(pool));
    assert.equal(pool.processes_crashed + pool.processes_killed, 0, JSON.stringify(pool));
    assert.doesNotMatch(p.stderr, /broke the protocol/);
  });

  test("a job sent ahead and then cancelled is taken back at once; the worker goes on", async () => {
    const p = await start(MOONBOX, ["--workers", "1"]);
    await refilled(p, 1);
    // one write: the server reads the three together, so the two short ones go ahead while the
    // long one has just started (ahead_room sends none behind a job that ran 2 ms already: three
    // separate writes were read too far apart on a busy machine, and then nothing was sent ahead)
    p.child.stdin.cork();
    const long = p.send("tools/call", { name: "execute_code", arguments: { ...loop, timeout_ms: 6000 } });
    const ahead = p.send("tools/call", { name: "execute_code", arguments: { code: "return 1" } });
    const after = p.send("tools/call", { name: "execute_code", arguments: { code: "return 2" } });
    p.child.stdin.uncork();
    await new Promise((r) => setTimeout(r, 100));
    p.notify("notifications/cancelled", { requestId: ahead, reason: "test" });
    const t0 = performance.now();
    for (;;) { // taken back while the long job still runs (it ends at its 6 s deadline)
      const pool = await p.pool();
      if (pool.jobs_taken_back >= 1) break;
      assert.ok(performance.now() - t0 < 10000, JSON.stringify(pool));
      await new Promise((r) => setTimeout(r, 20));
    }
    const l = await p.wait(long, 20000);
    assert.equal(l.msg.result.structuredContent.error_type, "timeout");
    const a = await p.wait(after, 20000);
    assert.ok(a.at >= l.at); // (the same read when equal: lines come in order)
    assert.equal(a.msg.result.structuredContent.result, 2, JSON.stringify(a.msg).slice(0, 300));
    assert.equal(p.responses.has(ahead), false, "a cancelled request gets no answer");
    assert.doesNotMatch(p.stderr, /broke the protocol/);
  });

  test("pipelined jobs of mixed lengths on two workers: each answer is its own job's", async () => {
    const p = await start(MOONBOX, ["--workers", "2"]);
    await refilled(p, 2);
    const n = 600;
    const ids = [];
    for (let i = 1; i <= n; i++) {
      const spin = i % 13 === 0 ? 300000 : i % 5 === 0 ? 20000 : 10;
      ids.push(p.send("tools/call", { name: "execute_code",
        arguments: { code: `local s = 0 for k = 1, ${spin} do s = s + 1 end return {i = ${i}, s = s}` } }));
    }
    for (let i = 1; i <= n; i++) {
      const sc = (await p.wait(ids[i - 1], 60000)).msg.result?.structuredContent;
      assert.equal(sc?.result?.i, i, JSON.stringify(sc).slice(0, 300));
    }
    const pool = await p.pool();
    // and no worker was left counted busy with nothing to run (all it had ahead taken back)
    assert.equal(pool.busy, 0, JSON.stringify(pool));
    assert.equal(pool.processes_crashed + pool.processes_killed, 0, JSON.stringify(pool));
    assert.doesNotMatch(p.stderr, /broke the protocol/);
  });
});

describe("cancels racing the claims of jobs sent ahead", { skip: NO_WORKERS }, () => {
  // A cancel takes back a job sent ahead with a compare-and-swap on its claim while the worker
  // may be claiming it; idle workers steal meanwhile. Whoever wins, each job runs once or not
  // at all, and every answer is its own job's.
  test("pipelined jobs with every few cancelled: each answer is its own, the counters settle", async () => {
    const p = await start(MOONBOX, ["--workers", "2"]);
    await refilled(p, 2);
    for (let round = 0; round < 3; round++) {
      const n = 300, ids = [], cancelled = new Set();
      p.child.stdin.cork();
      for (let i = 1; i <= n; i++) {
        const spin = i % 17 === 0 ? 200000 : i % 3 === 0 ? 3000 : 10;
        ids.push(p.send("tools/call", { name: "execute_code",
          arguments: { code: `local s = 0 for k = 1, ${spin} do s = s + 1 end return {i = ${i}, s = s}` } }));
      }
      p.child.stdin.uncork();
      for (let i = 1; i <= n; i += 1 + (i % 4)) {
        if (i % 2 === 0) await new Promise((r) => setImmediate(r)); // some after others ran
        p.notify("notifications/cancelled", { requestId: ids[i - 1], reason: "test" });
        cancelled.add(i);
      }
      for (let i = 1; i <= n; i++) {
        if (cancelled.has(i)) continue;
        const sc = (await p.wait(ids[i - 1], 60000)).msg.result?.structuredContent;
        assert.equal(sc?.result?.i, i, JSON.stringify(sc).slice(0, 300));
      }
      const t0 = performance.now();
      let pool;
      for (;;) { // the cancelled ones that had started end soon after
        pool = await p.pool();
        if (pool.busy === 0 && pool.queued === 0) break;
        assert.ok(performance.now() - t0 < 10000, JSON.stringify(pool));
        await new Promise((r) => setTimeout(r, 20));
      }
      for (const i of cancelled) { // (a cancelled request may still be answered, with its own result)
        const r = p.responses.get(ids[i - 1]);
        const sc = r?.msg.result?.structuredContent;
        if (r) assert.ok(sc?.result?.i === i || sc?.error_type === "cancelled", JSON.stringify(sc));
      }
      assert.equal(pool.completed, pool.submitted, JSON.stringify(pool)); // each answered once
      assert.equal(pool.processes_crashed + pool.processes_killed, 0, JSON.stringify(pool));
    }
    assert.doesNotMatch(p.stderr, /broke the protocol|not the server's|lost its worker/);
  });
});

describe("workers that cannot start", { skip: NO_WORKERS || NO_HOOKS }, () => {
  test("an execution gets the reason, new ones are refused at once, the server keeps serving", async () => {
    const p = await start(HOOKS, ["--workers", "1"], { MOONBOX_TEST_WORKER_FAIL: "1" });
    const { sc } = await p.exec({ code: "return 1" });
    assert.equal(sc.success, false, JSON.stringify(sc));
    assert.match(sc.error, /a worker process could not start \(isolation = process\)/, JSON.stringify(sc));
    const t0 = performance.now();
    const again = await p.exec({ code: "return 1" });
    assert.match(again.sc.error, /could not start/, JSON.stringify(again.sc));
    assert.ok(performance.now() - t0 < 1000, "refused at once, not after waiting for a worker");
    const ping = await p.request("ping", {});
    assert.deepEqual(ping.msg.result, {});
    assert.match(p.stderr, /test: failing at start/);
  });
});

describe("isolation = auto where workers cannot start", { skip: NO_WORKERS || NO_HOOKS }, () => {
  test("falls back to threads, says why in the log, and serves", async () => {
    const p = new Peer(["--isolation", "auto"], { MOONBOX_TEST_WORKER_FAIL: "1" }, HOOKS);
    peers.push(p);
    await p.initialize();
    assert.equal((await p.pool()).isolation, "thread");
    assert.match(p.stderr, /isolation: worker processes cannot run here \(.+\); executions run on threads/);
    assert.equal((await p.exec({ code: "return 7" })).sc.result, 7);
  });
});

describe("limits from outside the worker", { skip: NO_WORKERS }, () => {
  test("a long C call ends at the deadline by SIGKILL, and the worker is replaced", async () => {
    const p = await start(MOONBOX, ["--workers", "1"], { MOONBOX_TEST_STALL_MS: "5000" });
    const t0 = performance.now();
    const { sc } = await p.exec({ code: "-- MOONBOX_TEST_STALL\nreturn 1", timeout_ms: 200 });
    const ms = performance.now() - t0;
    assert.deepEqual([sc.success, sc.error_type], [false, "timeout"], JSON.stringify(sc));
    assert.ok(ms < 5000, `answered after ${ms.toFixed(0)} ms, not after the 5 s stall`);
    const next = await p.exec({ code: "return 3" });
    assert.equal(next.sc.result, 3, JSON.stringify(next.sc));
    const pool = await refilled(p, 2);
    assert.ok(pool.processes_killed >= 1, JSON.stringify(pool));
  });

  test("a memory limit that tripped before a stuck C call is answered as memory", async () => {
    const p = await start(MOONBOX, ["--workers", "1"], { MOONBOX_TEST_STALL_MS: "5000" });
    const { sc } = await p.exec({
      code: `-- MOONBOX_TEST_STALL\nlocal t = {} while true do t[#t + 1] = ("x"):rep(1000) .. #t end`,
      memory_mb: 8, timeout_ms: 500,
    });
    assert.equal(sc.error_type, "memory", JSON.stringify(sc));
    assert.match(sc.error, /^memory limit: execution exceeded memory_mb=8 /);
  });

  test("a pathological pattern ends at its deadline", async () => {
    const p = await start(MOONBOX, ["--workers", "1"]);
    const { sc } = await p.exec({
      code: `return string.find(string.rep("a", 40), string.rep("a?", 40) .. string.rep("a", 40))`,
      timeout_ms: 300, instruction_limit: 1e10,
    });
    // either finished (a fast machine) or stopped at its limit - never a crash or a hang
    assert.ok(sc.success || ["timeout", "instructions"].includes(sc.error_type), JSON.stringify(sc));
    assert.equal((await p.exec({ code: "return 4" })).sc.result, 4);
  });

  test("a memory bomb in C leaves the server responsive", { skip: NO_WORKERS || NO_HOOKS }, async () => {
    const p = await start(HOOKS, ["--workers", "1"]);
    const { sc } = await p.exec({ code: `return __test.crash("malloc")`, timeout_ms: 10000 }, 60000);
    // the address-space limit makes malloc fail (a number of MiB comes back), or the worker dies
    assert.ok(sc.success ? Number.isInteger(sc.result) : sc.error_type === "crashed", JSON.stringify(sc));
    assert.equal((await p.exec({ code: "return 5" })).sc.result, 5);
  });

  test("cancelling an execution stops its worker's loop", async () => {
    const p = await start(MOONBOX, ["--workers", "1"]);
    const id = p.send("tools/call", { name: "execute_code", arguments: { code: "while true do end", timeout_ms: 20000, instruction_limit: 1e10 } });
    await new Promise((r) => setTimeout(r, 200));
    p.notify("notifications/cancelled", { requestId: id, reason: "test" });
    const t0 = performance.now();
    const next = await p.exec({ code: "return 6" }, 10000);
    assert.equal(next.sc.result, 6);
    assert.ok(performance.now() - t0 < 5000, "the worker was free again soon after the cancel");
  });
});
