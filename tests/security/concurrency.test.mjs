// The loop thread must stay responsive whatever the workers are doing: while hostile scripts run
// long C calls on every worker, `ping` is answered within 50 ms; and one execution's result must
// not stall the loop for long either.

import { test } from "node:test";
import assert from "node:assert/strict";

import { startPeer, sleep } from "./peer.mjs";
import { brief } from "./harness.mjs";

const PING_BOUND_MS = 50;

/** Sends `count` pings `every` ms apart; returns their latencies in ms. */
async function pingSeries(peer, count, every) {
  const lat = [];
  for (let i = 0; i < count; i++) {
    const { msg, ms } = await peer.request("ping", undefined, 5000);
    assert.deepEqual(msg.result, {}, `ping answer: ${JSON.stringify(msg)}`);
    lat.push(ms);
    await sleep(every);
  }
  return lat;
}

test("ping is answered within 50 ms while hostile C-level scripts occupy every worker", async () => {
  const peer = await startPeer(["--workers", "2"]);
  try {
    const hostileCalls = [
      { code: 'return ("a"):rep(2000):find("a*a*b")', timeout_ms: 1500 },
      { code: "return table.move({}, 1, 1e12, 1)", timeout_ms: 1500 },
      { code: 'return #string.rep("x", 2e8)', timeout_ms: 1500, memory_mb: 512 },
    ];
    const ids = hostileCalls.map((args) => peer.send("tools/call", { name: "execute_code", arguments: args }));
    await sleep(100); // let the workers get into their C calls
    const lat = await pingSeries(peer, 20, 40);
    const worst = Math.max(...lat);
    for (const id of ids) await peer.wait(id, 15000);
    assert.ok(worst <= PING_BOUND_MS, `worst ping latency ${worst.toFixed(1)} ms (all: ${lat.map((x) => x.toFixed(0)).join(", ")})`);
    const { sc } = await peer.exec({ code: "return 1" });
    assert.equal(sc.result, 1, brief(sc));
  } finally {
    await peer.dispose();
  }
});

// Known gap (TODO): the loop thread still serializes a big result itself (the text block and
// the response around the spliced result JSON), so a 10 MiB result can hold a ping back for
// ~100 ms. Kept strict and reported as a todo until that work moves to the worker threads.
test("ping is answered within 50 ms while a 10 MiB result is being delivered", { todo: "big results are still serialized on the loop thread" }, async () => {
  const peer = await startPeer();
  try {
    const id = peer.send("tools/call", {
      name: "execute_code",
      arguments: { code: 'return ("x"):rep(2^10):rep(2^13 + 2^11)', timeout_ms: 5000 },
    });
    const t0 = performance.now();
    const lat = [];
    let answered = false;
    const done = peer.wait(id, 30000).then((r) => {
      answered = true;
      return r;
    });
    while (!answered && performance.now() - t0 < 20000) {
      const { ms } = await peer.request("ping", undefined, 30000);
      lat.push(ms);
      await sleep(20);
    }
    const r = await done;
    const sc = r.msg.result?.structuredContent;
    assert.equal(sc?.success, true, `the 10 MiB result itself: ${brief(sc)}`);
    const worst = Math.max(...lat);
    assert.ok(worst <= PING_BOUND_MS,
      `worst ping latency ${worst.toFixed(0)} ms while the result (execution ${sc.execution_time_ms.toFixed(0)} ms) was delivered ` +
      `${(r.at - t0).toFixed(0)} ms after the call (pings: ${lat.map((x) => x.toFixed(0)).join(", ")})`);
  } finally {
    await peer.dispose();
  }
});
