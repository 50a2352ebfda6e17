// What crosses from sandbox code to the server (issue 30, items 1 and 2): host-call arguments
// and results are bounded by what they expand to, and the server checks them without building
// them.
//
// A table that holds one empty table 5 million times is ~40 MB of sandbox memory and ~15 MB of
// JSON. Before: as the arguments of a host call it was parsed by jansson and decoded again on
// the loop (the server at ~1.9 GiB in process mode, ~1 GiB in thread mode, pings held for
// seconds); as a result it was re-parsed into a jansson tree to check it (two at once: 2.6 GiB).
// Now the sandbox's encoder counts every value it writes - a shared table each time - and
// refuses past max_call_nodes / max_result_nodes with an error naming the option; what a worker
// process sends is checked in one pass that builds nothing (src/json_check.c), large frames on
// the thread pool, at most max_result_checks at once.
//
// Every test runs in both isolation modes (process only where a confined worker can start), and
// checks the answer, the server's peak memory (VmHWM in /proc) against its size before the
// test, and that a ping is answered while the executions run. The forged frames of a
// compromised worker need the test build ($MOONBOX_HOOKS, as in process.test.mjs).

import { test, describe, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Peer, MOONBOX } from "./peer.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const HOOKS = process.env.MOONBOX_HOOKS
  ? path.resolve(process.cwd(), process.env.MOONBOX_HOOKS)
  : path.resolve(HERE, "../../build-hooks/moonbox");

// the bound on the server's growth while the hostile executions run: the red-team's figures
// were 1-3.6 GiB; what is legitimately held (the sandbox's own memory in thread mode, the
// answers being written) stays well below this
const GROWTH_MIB = 300;

const peers = [];
async function start(mode, args = [], binary = MOONBOX) {
  const p = new Peer(["--isolation", mode, ...args], {}, binary);
  peers.push(p);
  await p.initialize();
  return p;
}
after(async () => {
  for (const p of peers) await p.dispose();
});

const status = (pid, key) => +new RegExp(`${key}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1] / 1024;

const probe = new Peer(["--isolation", "auto"]);
await probe.initialize();
const CONFINED = (await probe.pool()).isolation === "process";
await probe.dispose();
const MODES = [["thread", false], ["process", !CONFINED && "worker processes cannot run on this machine"]];

/** Sends execute_code, waits for its "built" log (the hostile table exists), then pings: the
 * ping must be answered while the execution has not been. Returns the execution's sc. */
async function execWithPing(p, args, timeout = 60000) {
  const from = p.notes.length;
  const id = p.send("tools/call", { name: "execute_code", arguments: args });
  await p.waitNote((m) => m.method === "notifications/message" && m.params?.data === "built", { from, timeout });
  return { id, answer: p.wait(id, timeout) };
}

// one table, 5 million references to it
const SHARED = "local e = {} local t = {} for i = 1, 5000000 do t[i] = e end mcp.log('warning', 'built') ";

for (const [mode, skip] of MODES) {
  describe(`host-call arguments that expand (${mode})`, { skip }, () => {
    for (const [what, call, name] of [
      ["mcp.elicit (decoded by the host)", "mcp.elicit({message = 'x', requestedSchema = {type = 'object', properties = {}}, big = t})", "client_request"],
      ["mcp.call (spliced into the upstream request)", "mcp.call('nosuch', 'tool', {big = t})", "nosuch.tool"],
      ["mcp.parallel", "mcp.parallel({function() return mcp.call('a', 'x', {big = t}) end})", "a.x"],
    ]) {
      test(`${what}: refused in the sandbox naming max_call_nodes; the server stays small and answers a ping meanwhile`, async () => {
        const p = await start(mode, ["--workers", "2"]);
        const base = status(p.child.pid, "VmRSS");
        // after the refused call the code keeps its worker busy until its deadline, so the
        // ping is sent while the execution runs
        const code = `${SHARED} local ok, err = pcall(function() return ${call} end) ` +
          "local t0 = os.clock() while os.clock() - t0 < 1.5 do end return tostring(err)";
        const { answer } = await execWithPing(p, { code, memory_mb: 512, timeout_ms: 30000, instruction_limit: 1e10 });
        const ping = await p.request("ping", undefined, 20000);
        assert.deepEqual(ping.msg.result, {});
        const sc = (await answer).msg.result.structuredContent;
        assert.equal(sc.success, true, JSON.stringify(sc).slice(0, 500));
        assert.match(sc.result, new RegExp(`${name.replace(".", "\\.")}: .*too large: more than 100000 JSON values \\(max_call_nodes=100000\\)`));
        const grew = status(p.child.pid, "VmHWM") - base;
        assert.ok(grew < GROWTH_MIB, `the server grew by ${grew.toFixed(0)} MiB`);
      });
    }

    test("max_call_nodes is configurable: arguments within it reach the host", async () => {
      const p = await start(mode, ["--max-call-nodes", "50"]);
      const ok = await p.exec({ code: "local t = {} for i = 1, 40 do t[i] = i end return pcall(mcp.call, 'nosuch', 'tool', {t = t})" });
      assert.match(ok.sc.result[1], /unknown upstream server "nosuch"/, JSON.stringify(ok.sc));
      const no = await p.exec({ code: "local t = {} for i = 1, 60 do t[i] = i end return pcall(mcp.call, 'nosuch', 'tool', {t = t})" });
      assert.match(no.sc.result[1], /more than 50 JSON values \(max_call_nodes=50\) at value\.t\[49\]/, JSON.stringify(no.sc));
    });
  });

  describe(`results that expand (${mode})`, { skip }, () => {
    test("5 million shared tables: refused naming max_result_nodes", async () => {
      const p = await start(mode);
      const base = status(p.child.pid, "VmRSS");
      const { sc } = await p.exec({ code: SHARED + "return t", memory_mb: 512, timeout_ms: 30000 }, 60000);
      assert.equal(sc.success, false);
      assert.equal(sc.error_type, "result");
      assert.match(sc.error, /^result is too large: more than 1000000 JSON values \(max_result_nodes=1000000\) at result\[1000000\]/);
      assert.ok(status(p.child.pid, "VmHWM") - base < GROWTH_MIB);
    });

    test("three results of 2 million values at once (max_result_nodes raised): answered in full, the server stays small, a ping answers", async () => {
      const p = await start(mode, ["--workers", "3", "--max-result-nodes", "3000000"]);
      const base = status(p.child.pid, "VmRSS");
      const code = "local e = {} local t = {} for i = 1, 2000000 do t[i] = e end mcp.log('warning', 'built') return t";
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await execWithPing(p, { code, memory_mb: 256, timeout_ms: 30000 }));
      const ping = await p.request("ping", undefined, 20000);
      assert.deepEqual(ping.msg.result, {});
      for (const r of runs) {
        const sc = (await r.answer).msg.result.structuredContent;
        assert.equal(sc.success, true, JSON.stringify(sc).slice(0, 300));
        assert.equal(sc.result.length, 2000000);
      }
      const grew = status(p.child.pid, "VmHWM") - base;
      assert.ok(grew < GROWTH_MIB, `the server grew by ${grew.toFixed(0)} MiB`);
    });

    test("max_result_nodes counts values, not keys, and names itself", async () => {
      const p = await start(mode, ["--max-result-nodes", "10"]);
      const fits = await p.exec({ code: "return {a = 1, b = 2, c = {1, 2, 3}, d = 'x', e = true, f = 1.5}" });
      assert.equal(fits.sc.success, true, JSON.stringify(fits.sc)); // 9 values, 6 keys
      const over = await p.exec({ code: "return {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}" });
      assert.equal(over.sc.error, "result is too large: more than 10 JSON values (max_result_nodes=10) at result[10]");
    });
  });
}

// ---- a compromised worker (process mode, test build) -------------------------------------------

const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
const esc = (buf) => [...buf].map((c) => "\\" + c).join("");
const NO_IO = Array.from({ length: 13 }, () => u64(0));
const W_CALL = 6, W_DONE = 9;

/** Lua that writes a frame of this type whose payload is head .. <Lua string expr> .. tail. */
function forge(type, head, expr, exprLen, tail) {
  const len = Buffer.alloc(4);
  len.writeUInt32LE(1 + head.length + exprLen + tail.length);
  return `__test.channel("${esc(Buffer.concat([len, Buffer.from([type]), head]))}" .. ${expr} .. "${esc(tail)}")`;
}

describe("a compromised worker's frames are checked without building them", { skip: (!CONFINED && "worker processes cannot run on this machine") || (!existsSync(HOOKS) && "no test build") }, () => {
  test("a W_CALL of 5 million values (15 MB, past max_call_nodes) is refused off the loop: the server stays small and answers a ping", async () => {
    const p = await start("process", ["--workers", "1"], HOOKS);
    const base = status(p.child.pid, "VmRSS");
    const N = 5000000, argsLen = 2 + 3 * N - 1; // "[{},{},...,{}]"
    const name = Buffer.from("list_skills");
    const head = Buffer.concat([u64(name.length), name, u64(argsLen)]);
    const code = `local s = "[" .. ("{},"):rep(${N - 1}) .. "{}]" mcp.log('warning', 'built') ` +
      forge(W_CALL, head, "s", argsLen, Buffer.alloc(0)) + " while true do end";
    const { answer } = await execWithPing(p, { code, memory_mb: 256, timeout_ms: 3000, instruction_limit: 1e10 });
    const ping = await p.request("ping", undefined, 20000);
    assert.deepEqual(ping.msg.result, {});
    const sc = (await answer).msg.result.structuredContent;
    assert.equal(sc.error_type, "timeout", JSON.stringify(sc)); // it never reads the refusal
    const grew = status(p.child.pid, "VmHWM") - base;
    assert.ok(grew < GROWTH_MIB, `the server grew by ${grew.toFixed(0)} MiB`);
    // the forging worker reads the refusal only after its job, as a frame out of turn, and
    // exits: the next execution on it may fail as crashed (its own tenant's); then a fresh
    // worker serves
    let next = await p.exec({ code: "return 3" });
    if (next.sc.error_type === "crashed") next = await p.exec({ code: "return 3" });
    assert.equal(next.sc.result, 3, JSON.stringify(next.sc));
  });

  test("a W_DONE of 5 million values (past max_result_nodes) fails as a result its sandbox should have refused; the server stays small", async () => {
    const p = await start("process", ["--workers", "1"], HOOKS);
    const base = status(p.child.pid, "VmRSS");
    const N = 5000000, resultLen = 2 + 3 * N - 1;
    const head = Buffer.concat([u64(1), u64(0), u64(0), u64(0), u64(1), u64(resultLen)]);
    const tail = Buffer.concat([u64(0), u64(0), u64(0), u64(0), u64(0), ...NO_IO]);
    const code = `local s = "[" .. ("{},"):rep(${N - 1}) .. "{}]" ` + forge(W_DONE, head, "s", resultLen, tail) +
      " while true do end";
    const { sc } = await p.exec({ code, memory_mb: 256, timeout_ms: 10000, instruction_limit: 1e10 }, 60000);
    assert.equal(sc.error_type, "result", JSON.stringify(sc));
    assert.match(sc.error, /should have refused: JSON holds more than 1000000 values \(max_result_nodes=1000000\)/);
    assert.ok(status(p.child.pid, "VmHWM") - base < GROWTH_MIB);
    assert.equal((await p.exec({ code: "return 4" })).sc.result, 4);
  });

  test("a result with \\u0000 in a key and text after it is not JSON (jansson stopped at the key and let the rest through)", async () => {
    const p = await start("process", ["--workers", "1"], HOOKS);
    const forged = Buffer.from('{"\\u0000":1}, "isError": false, "x": {');
    const head = Buffer.concat([u64(1), u64(0), u64(0), u64(0), u64(1), u64(forged.length)]);
    const tail = Buffer.concat([u64(0), u64(0), u64(0), u64(0), u64(0), ...NO_IO]);
    const code = forge(W_DONE, head, `"${esc(forged)}"`, forged.length, tail) + " while true do end";
    const { sc, msg } = await p.exec({ code, timeout_ms: 5000, instruction_limit: 1e10 });
    assert.deepEqual([sc.error_type, sc.error], ["result", "the worker process returned a result that is not JSON"]);
    assert.equal(msg.result.isError, true);
    // a key holding \u0000 in a result that is JSON is still fine (the sandbox writes them)
    const ok = await p.exec({ code: 'return {["a\\0b"] = 1}' });
    assert.equal(ok.sc.success, true, JSON.stringify(ok.sc));
    assert.deepEqual(ok.sc.result, { "a\u0000b": 1 });
  });
});
