// Replicas sharing one workspace directory (--workspace-dir), each with its own data directory:
// the per-tenant quota holds across the processes. Two moonbox servers run execute_code calls at
// once (four each, in parallel) that write far more than workspace_max_bytes into the same
// tenant; together they never commit more than the quota (what is on disk, counted here), every
// byte on disk is one some call was told it wrote, and a delete through one server makes room
// for a write through the other. Run with the default isolation (worker processes: the
// workspace operations run on the server's libuv thread pool) and with threads.
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/workspace_replicas.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { connectWithSkills, execute } from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const MAX = 20000;
const SIZE = 700;

/** Sum of sizes and number of the regular files under dir (temporary files left out). */
function usageOnDisk(dir) {
  let bytes = 0, files = 0;
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && !e.name.startsWith(".mb-tmp-")) {
        bytes += statSync(p).size;
        files++;
      }
    }
  };
  walk(dir);
  return { bytes, files };
}

const writer = (id) => `
local ok, refused = 0, 0
for i = 1, 40 do
  local good, err = pcall(write_file, string.format("w/${id}_%d.bin", i), string.rep("x", ${SIZE}))
  if good then ok = ok + 1
  elseif tostring(err):find("workspace_max_bytes", 1, true) then refused = refused + 1
  else error(err) end
end
return { ok = ok, refused = refused }`;

async function run(s, code) {
  const res = await execute(s.client, { code });
  const sc = res.structuredContent;
  assert.equal(sc.success, true, `execution failed: ${sc.error}`);
  return sc.result;
}

async function twoReplicas(isolation, fn) {
  const shared = mkdtempSync(path.join(tmpdir(), "moonbox-shared-ws-"));
  const args = ["--workspace-dir", shared, "--workspace-max-bytes", String(MAX),
    "--workspace-max-file-bytes", "10000", ...(isolation ? ["--isolation", isolation] : [])];
  const servers = [];
  try {
    servers.push(await connectWithSkills({ args }));
    servers.push(await connectWithSkills({ args }));
    await fn(servers, path.join(shared, "default"));
  } catch (e) {
    for (const s of servers) e.message += `\nmoonbox stderr (tail):\n${s.stderr().slice(-1000)}`;
    throw e;
  } finally {
    for (const s of servers) await s.close();
    rmSync(shared, { recursive: true, force: true });
  }
}

for (const isolation of [undefined, "thread"]) {
  describe(`replicas on one workspace_dir (isolation ${isolation ?? "default"})`, () => {
    it("concurrent writers through two servers stay within workspace_max_bytes together", T, async () => {
      await twoReplicas(isolation, async ([a, b], ws) => {
        const calls = [];
        for (let i = 0; i < 4; i++) {
          calls.push(run(a, writer(`a${i}`)));
          calls.push(run(b, writer(`b${i}`)));
        }
        const results = await Promise.all(calls);
        const ok = results.reduce((n, r) => n + r.ok, 0);
        const refused = results.reduce((n, r) => n + r.refused, 0);
        assert.equal(ok + refused, 8 * 40);
        const disk = usageOnDisk(ws);
        assert.ok(disk.bytes <= MAX, `on disk ${disk.bytes} bytes, above the quota ${MAX}`);
        assert.equal(disk.bytes, ok * SIZE, "every byte on disk was acknowledged, and only those");
        assert.equal(ok, Math.floor(MAX / SIZE), "the quota is filled, not undershot");
        assert.ok(results.some((r) => r.ok > 0) && refused > 0);
        // both servers see the same usage: a write through either is refused now
        for (const s of [a, b]) {
          const r = await execute(s.client, { code: `write_file("one-more", "${"y".repeat(SIZE)}")` });
          assert.match(r.structuredContent.error ?? "", /workspace_max_bytes=20000 would be exceeded \(in use \d+/);
        }
        // a delete through one makes room for a write through the other
        await run(a, `for i = 1, 40 do for _, p in ipairs({"a0","a1","a2","a3","b0","b1","b2","b3"}) do
          delete_file(string.format("w/%s_%d.bin", p, i)) end end return true`);
        assert.deepEqual(usageOnDisk(ws), { bytes: 0, files: 0 });
        assert.deepEqual(await run(b, writer("again")), { ok: 28, refused: 12 });
        assert.equal(usageOnDisk(ws).bytes, 28 * SIZE);
      });
    });
  });
}
