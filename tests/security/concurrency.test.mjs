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

// stdio is one ordered stream: a ping answered while the ~20 MiB response (result plus its text
// block) is being written necessarily arrives after it (head-of-line blocking in the pipe, plus
// the client's own parsing of that line). So a ping must either arrive within 50 ms of being sent,
// or within 50 ms of the big response's arrival: the loop thread itself must never stall.
test("ping is answered within 50 ms (or 50 ms after the big line) while a 10 MiB result is delivered", async () => {
  const peer = await startPeer();
  try {
    const id = peer.send("tools/call", {
      name: "execute_code",
      arguments: { code: 'return ("x"):rep(2^10):rep(2^13 + 2^11)', timeout_ms: 5000 },
    });
    const t0 = performance.now();
    const pings = [];
    let answered = false;
    const done = peer.wait(id, 30000).then((r) => {
      answered = true;
      return r;
    });
    while (!answered && performance.now() - t0 < 20000) {
      const sent = performance.now();
      const { ms } = await peer.request("ping", undefined, 30000);
      pings.push({ sent, ms, arrived: sent + ms });
      await sleep(20);
    }
    const r = await done;
    const sc = r.msg.result?.structuredContent;
    assert.equal(sc?.success, true, `the 10 MiB result itself: ${brief(sc)}`);
    const big = r.at;
    // arrived within 10 ms of the big line = read in the same batch, i.e. queued behind it
    // A ping queued behind the big line may arrive after the client itself has parsed that
    // line (~20 MB of JSON, 50-70 ms on a 2-core machine): when the line's last piece fills the
    // pipe, the client reads the rest of it alone, parses it, and only then reads the ping
    // answer written right behind it (seen on the base build too, about 1 run in 10). So the
    // ping behind the line gets 150 ms after it; pings during the execution keep 50 ms. (In
    // session 11 the free(3) of the 20 MiB written buffer - a munmap since main.c's fixed
    // M_MMAP_THRESHOLD - came before the ping's write and made this the usual case: stdio now
    // frees such a buffer after the writes queued behind it, src/stdio_transport.c.)
    const AFTER_LINE_BOUND_MS = 150;
    const late = pings.filter((p) => p.arrived < big - 10 ? p.ms > PING_BOUND_MS
      : p.arrived - Math.max(p.sent, big) > AFTER_LINE_BOUND_MS);
    assert.deepEqual(late.map((p) => p.ms.toFixed(0)), [],
      `pings held back beyond ${PING_BOUND_MS} ms (the result line arrived ${(big - t0).toFixed(0)} ms after the call; ` +
      `pings: ${pings.map((p) => `${(p.sent - t0).toFixed(0)}+${p.ms.toFixed(0)}`).join(", ")})`);
  } finally {
    await peer.dispose();
  }
});
