// A compromised worker's frames that cost the server (issue 30, items 5 and 6).
//
// The test build's __test.channel (src/sandbox_testhooks.c, -DMB_TEST_HOOKS) stands in for a
// worker process that a memory-safety bug has taken over and that writes forged frames to the
// server. Each frame is laid out as worker_wire.h says (string.pack: u32 length of type + payload,
// a type byte, u64 fields, byte strings as a u64 length and the bytes):
// - a million W_MINT requests (27 MB) whose answers it never reads: before, the answers queued
//   in the server without bound (458 MiB never given back); now the worker is stopped once more
//   than max_workspace_ops_pending + 2 answers wait unread, and the server stays small;
// - workspace reads of a 1 MiB file, four at a time (within max_workspace_ops_pending), whose
//   answers it never reads: the same;
// - a forged 17 MB progress notification, and a 21 MB log notification: the sandbox never sends
//   more than max_output_bytes, so the worker is stopped before the payload is parsed, and
//   nothing of it reaches the client (before: parsed twice on the loop, and 21 MB logs reached
//   the client).
// After each, the next execution is served. docs/security.md ("Worker processes").
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Peer } from "./peer.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const HOOKS = process.env.MOONBOX_HOOKS
  ? path.resolve(process.cwd(), process.env.MOONBOX_HOOKS)
  : path.resolve(HERE, "../../build-hooks/moonbox");
let SKIP = !existsSync(HOOKS) && "no test build";
if (!SKIP) {
  const probe = new Peer(["--isolation", "auto"], {}, HOOKS);
  await probe.initialize();
  if ((await probe.pool()).isolation !== "process") SKIP = "worker processes cannot run on this machine";
  await probe.dispose();
}

const T = { timeout: 120000 };
const rssMiB = (pid) => Number(readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]) / 1024;

// Lua that sends one frame of type t with the fields packed by fmt (after the type byte)
const FRAME = `local function frame(t, fmt, ...)
  local body = string.pack("<B" .. fmt, t, ...)
  return string.pack("<I4", #body) .. body
end`;

async function start(args = []) {
  const peer = new Peer(["--isolation", "process", "--workers", "1", ...args], {}, HOOKS);
  await peer.initialize();
  return peer;
}

async function stillServes(peer) {
  const { sc } = await peer.exec({ code: "return 6 * 7" });
  assert.equal(sc.result, 42, JSON.stringify(sc));
}

describe("a compromised worker's frames", { skip: SKIP }, () => {
  it("a million W_MINT requests whose answers it never reads: stopped, the server stays small", T, async () => {
    const peer = await start();
    try {
      await stillServes(peer);
      const base = rssMiB(peer.child.pid);
      const { sc } = await peer.exec({ instruction_limit: 1e10, timeout_ms: 60000, code: `${FRAME}
        local chunk = frame(8, "s8s8", "EMAIL", "a@b.c"):rep(10000)
        for i = 1, 100 do __test.channel(chunk) end
        while true do end` }, 90000);
      assert.equal(sc.success, false, JSON.stringify(sc));
      assert.equal(sc.error_type, "crashed", JSON.stringify(sc));
      assert.match(sc.error, /left its answers unread; it was stopped/, JSON.stringify(sc));
      const grown = rssMiB(peer.child.pid) - base;
      assert.ok(grown < 64, `the server grew by ${grown.toFixed(0)} MiB`);
      await stillServes(peer);
    } finally {
      await peer.dispose();
    }
  });

  it("workspace reads of a 1 MiB file whose answers it never reads: stopped", T, async () => {
    const peer = await start();
    try {
      const put = await peer.exec({ code: 'write_file("big.txt", ("x"):rep(1 << 20)) return 1' });
      assert.equal(put.sc.result, 1, JSON.stringify(put.sc));
      const base = rssMiB(peer.child.pid);
      // four reads (max_workspace_ops_pending) at a time, a pause for their answers, again
      const { sc } = await peer.exec({ instruction_limit: 1e10, timeout_ms: 60000, code: `${FRAME}
        local reads = frame(7, "I8s8I8s8", 1, "big.txt", 1, ""):rep(4)
        for round = 1, 200 do
          __test.channel(reads)
          local t = os.clock() + 0.1 while os.clock() < t do end
        end
        while true do end` }, 90000);
      assert.equal(sc.success, false, JSON.stringify(sc));
      // unread answers stop it; on a slow machine the reads of a round may not all be answered
      // within the pause, and the next round then passes max_workspace_ops_pending: stopped too
      assert.match(sc.error, /left its answers unread; it was stopped|max_workspace_ops_pending/, JSON.stringify(sc));
      const grown = rssMiB(peer.child.pid) - base;
      assert.ok(grown < 64, `the server grew by ${grown.toFixed(0)} MiB (200 rounds of 4 MiB unread)`);
      await stillServes(peer);
    } finally {
      await peer.dispose();
    }
  });

  for (const [what, kind, level, bytes] of [["a 17 MB progress", 2, -1, 17e6], ["a 21 MB log", 1, 6, 21e6]]) {
    it(`${what} notification: stopped before it is parsed, and nothing reaches the client`, T, async () => {
      const peer = await start();
      try {
        const from = peer.notes.length;
        const payload = kind === 2 ? `'{"progress":1,"message":"' .. ("m"):rep(${bytes}) .. '"}'`
          : `'"' .. ("m"):rep(${bytes}) .. '"'`;
        const { sc } = await peer.exec({ memory_mb: 256, timeout_ms: 60000, code: `${FRAME}
          local p = ${payload}
          local head = string.pack("<BI8i8I8", 5, ${kind}, ${level}, #p)
          __test.channel(table.concat({ string.pack("<I4", #head + #p), head, p }))
          while true do end` }, 90000);
        assert.equal(sc.success, false, JSON.stringify(sc));
        // (the 21 MB frame is over the reader's bound for any frame, the 17 MB one is not)
        assert.match(sc.error, /broke the protocol; it was stopped|over the size limit .*; it was stopped/, JSON.stringify(sc));
        const big = peer.notes.slice(from).filter((n) => JSON.stringify(n.msg).length > 65536);
        assert.equal(big.length, 0, "no over-long notification reached the client");
        // what the sandbox itself may send still comes through
        const ok = await peer.exec({ code: 'mcp.log("info", ("y"):rep(1000)) return 1' });
        assert.equal(ok.sc.result, 1, JSON.stringify(ok.sc));
        await stillServes(peer);
      } finally {
        await peer.dispose();
      }
    });
  }
});
