// The watchdog and stuck worker threads (issue 13, findings 2 and 4). A worker still inside one
// C call timeout_grace_ms after its deadline is answered from the loop and abandoned; at most
// max_abandoned stuck threads get a replacement, so the process never holds more than
// workers + max_abandoned worker threads, and a stuck thread that exits is replaced at once.
//
// Every C call a script can make polls its budget, so no script can hold a worker on purpose.
// These tests use the server's test-only fault injection instead (docs/testing.md): with
// MOONBOX_TEST_STALL_MS=N, an execution whose code contains MOONBOX_TEST_STALL sleeps N ms in C
// after its code ran, ignoring its budget. That keeps them independent of the machine's speed.

import { test, describe } from "node:test";
import assert from "node:assert/strict";

import { startPeer, sleep } from "./peer.mjs";

// These are the worker-thread watchdog's rules (stuck threads abandoned and replaced): with
// isolation = process a stuck worker is killed instead (tests/security/process.test.mjs).
const THREADS = ["--isolation", "thread"];

const STALL = "-- MOONBOX_TEST_STALL\n";

/** Waits until `return 1` succeeds again and the pool is back to `workers` threads, none stuck. */
async function recovered(peer, workers, withinMs = 20000) {
  const t0 = performance.now();
  for (;;) {
    const { sc } = await peer.exec({ code: "return 1" }, 30000);
    const pool = await peer.pool();
    if (sc.success && pool.stuck_threads === 0 && pool.threads === workers) return pool;
    if (!sc.success) assert.equal(sc.error_type, "busy", JSON.stringify(sc));
    assert.ok(performance.now() - t0 < withinMs, `not recovered after ${withinMs} ms: ${JSON.stringify(pool)}`);
    await sleep(50);
  }
}

describe("watchdog: one cause, one message", () => {
  test("a memory limit tripped before a stuck C call is answered as memory, not timeout", async () => {
    const peer = await startPeer([...THREADS], { MOONBOX_TEST_STALL_MS: "3000" });
    try {
      const { sc, ms } = await peer.exec({
        code: `${STALL}local t = {} while true do t[#t + 1] = ("x"):rep(1000) .. #t end`,
        memory_mb: 8, timeout_ms: 1000,
      }, 30000);
      assert.equal(sc.success, false);
      assert.equal(sc.error_type, "memory", JSON.stringify(sc));
      assert.match(sc.error, /^memory limit: execution exceeded memory_mb=8 /);
      assert.ok(ms < 1000 + 50 + 500, `answered after ${ms.toFixed(0)} ms (deadline 1000 + grace 50)`);
      const pool = await peer.pool();
      assert.equal(pool.stuck_threads, 1, "the stalled worker was abandoned");
      assert.match(peer.stderr, /answering \(memory\)/);
    } finally {
      await peer.dispose();
    }
  });

  test("a stuck call with nothing tripped before is answered as timeout with the timeout text", async () => {
    const peer = await startPeer([...THREADS], { MOONBOX_TEST_STALL_MS: "3000" });
    try {
      const { sc, ms } = await peer.exec({ code: `${STALL}return 1`, timeout_ms: 200 }, 30000);
      assert.deepEqual([sc.success, sc.error_type, sc.error], [false, "timeout", "timeout: execution exceeded timeout_ms=200"]);
      assert.ok(ms < 200 + 50 + 500, `answered after ${ms.toFixed(0)} ms`);
    } finally {
      await peer.dispose();
    }
  });
});

describe("max_abandoned caps the threads", () => {
  test("a burst of 12 stuck executions never holds more than workers + max_abandoned threads", async () => {
    const workers = 2, maxAbandoned = 2;
    const peer = await startPeer([...THREADS, "--workers", String(workers), "--max-abandoned", String(maxAbandoned)],
      { MOONBOX_TEST_STALL_MS: "1500" });
    try {
      const calls = [];
      for (let i = 0; i < 12; i++) calls.push(peer.exec({ code: `${STALL}return ${i}`, timeout_ms: 100 }, 60000));
      const answers = await Promise.all(calls);
      for (const { sc } of answers) {
        // every request gets its answer: the timeout from the watchdog (all were queued before
        // any thread was stuck, so none is refused)
        assert.deepEqual([sc.success, sc.error_type], [false, "timeout"], JSON.stringify(sc));
      }
      const pool = await peer.pool();
      assert.ok(pool.threads_peak <= workers + maxAbandoned,
        `${pool.threads_peak} worker threads alive at once, at most ${workers + maxAbandoned} allowed`);
      assert.ok(pool.threads_peak > workers, `no replacement was ever started: ${JSON.stringify(pool)}`);
      const after = await recovered(peer, workers);
      assert.ok(after.threads_peak <= workers + maxAbandoned, JSON.stringify(after));
    } finally {
      await peer.dispose();
    }
  });

  test("max_abandoned=0: a stuck thread is not replaced, new work is refused as busy, then served once it exits", async () => {
    const peer = await startPeer([...THREADS, "--workers", "1", "--max-abandoned", "0"], { MOONBOX_TEST_STALL_MS: "1000" });
    try {
      const first = await peer.exec({ code: `${STALL}return 1`, timeout_ms: 100 });
      assert.equal(first.sc.error_type, "timeout");
      const refused = await peer.exec({ code: "return 1" });
      assert.equal(refused.sc.error_type, "busy", JSON.stringify(refused.sc));
      assert.match(refused.sc.error, /max_abandoned=0/);
      let pool = await peer.pool();
      assert.equal(pool.threads, 1, `the stuck thread was replaced: ${JSON.stringify(pool)}`);
      pool = await recovered(peer, 1);
      assert.equal(pool.threads_peak, 1, JSON.stringify(pool));
    } finally {
      await peer.dispose();
    }
  });
});
