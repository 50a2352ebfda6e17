// Answers nobody reads (issue 30, item 3): clients that post execute_code with large results and
// never read them. The server holds at most max_backlog_bytes for them (max_backlog_tenant_bytes
// for one HTTP tenant); answers beyond it are replaced by an error naming the limit, and once
// the clients are gone the memory goes back (VmRSS near its baseline). Raw sockets for HTTP (a
// fetch would read), a raw stdio peer whose stdout is not read for stdio. Every socket, child
// and server is closed at the end.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { MOONBOX, makeDataDir, requireBinary, startHttp, until } from "../lib/moonbox.mjs";
import { bodyOf, initSession, postUnread, readShort } from "../lib/unread.mjs";

const T = { timeout: 120000 };
const MiB = 1 << 20;
const RSS_MARGIN = 64 * MiB; // what a server may keep above its idle baseline once clients are gone
const ACCEPT = "application/json, text/event-stream";
const ISOLATION = process.env.MOONBOX_ISOLATION ? ["--isolation", process.env.MOONBOX_ISOLATION] : [];

function rssOf(pid) {
  return Number(readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]) * 1024;
}

const bigCode = (n) => `return string.rep("x", ${n})`;
// a long deadline: on a loaded machine the ten executions must finish, not time out
const callBody = (id, code) => JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call",
  params: { name: "execute_code", arguments: { code, timeout_ms: 60000 } } });

async function metrics(srv, token) {
  const r = await fetch(srv.url.replace(/\/mcp$/, "/metrics"),
    { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  if (r.status !== 200) return null; // 503 while the backlog has no room even for it
  const m = {};
  for (const line of (await r.text()).split("\n")) {
    const x = line.match(/^(moonbox_[a-z_]+(?:\{[^}]*\})?) (\d+)$/);
    if (x) m[x[1]] = Number(x[2]);
  }
  return m;
}

describe("backlog of answers clients do not read", () => {
  it("HTTP: ten unread 32 MB answers: at most max_backlog_bytes held, the rest refused by name, RSS back after", T, async () => {
    const CAP = 100_000_000;
    const srv = await startHttp(["--max-backlog-bytes", String(CAP), "--workers", "2", ...ISOLATION]);
    const socks = [];
    try {
      const sid = await initSession(srv);
      await sleep(300);
      const base = rssOf(srv.proc.pid);
      for (let i = 0; i < 10; i++) socks.push(postUnread(srv, sid, callBody(100 + i, bigCode(16_000_000))));
      const m = await until(async () => {
        const x = await metrics(srv);
        return x && x['moonbox_executions_total{state="completed"}'] >= 10 ? x : null;
      }, 90000, "all ten executions completed");
      assert.ok(m.moonbox_http_backlog_peak_bytes <= CAP, `backlog peak ${m.moonbox_http_backlog_peak_bytes} > ${CAP}`);
      assert.ok(m.moonbox_http_backlog_bytes > 0 && m.moonbox_http_backlog_bytes <= CAP);
      assert.ok(m.moonbox_http_backlog_refused_total >= 6, `refused ${m.moonbox_http_backlog_refused_total}`);
      // what the executions left settles; what stays is the backlog
      await until(() => rssOf(srv.proc.pid) <= base + CAP + RSS_MARGIN, 10000,
        `RSS within the backlog and ${RSS_MARGIN / MiB} MiB of the ${Math.round(base / MiB)} MiB baseline while held`);
      // the refused ones got an error naming the limit, under their own id
      const answers = await Promise.all(socks.map(readShort));
      const errors = answers.map(bodyOf).filter((b) => b?.error);
      assert.ok(errors.length >= 6, `errors: ${errors.length}`);
      for (const e of errors) {
        assert.match(e.error.message, /max_backlog_bytes=100000000/);
        assert.equal(e.error.data.limit, "max_backlog_bytes");
        assert.ok(e.id >= 100 && e.id < 110);
      }
      // the clients are gone: the backlog is empty and the memory given back
      await until(async () => (await metrics(srv))?.moonbox_http_backlog_bytes === 0, 10000, "backlog empty");
      await until(() => rssOf(srv.proc.pid) <= base + RSS_MARGIN, 10000,
        `RSS back within ${RSS_MARGIN / MiB} MiB of the ${Math.round(base / MiB)} MiB baseline`);
      // and the server still answers a large result to a client that reads
      const r = await fetch(srv.url, { method: "POST", headers: { "Content-Type": "application/json", Accept: ACCEPT,
        "Mcp-Session-Id": sid }, body: callBody(200, bigCode(4_000_000)) });
      const j = await r.json();
      assert.equal(j.result.structuredContent.result.length, 4_000_000);
    } finally {
      for (const s of socks) s.destroy();
      await srv.stop();
    }
  });

  it("HTTP: one tenant's unread answers stop at max_backlog_tenant_bytes; another tenant is still answered", T, async () => {
    const A = "alice-token-0123456789abcdef", B = "bob-token-0123456789abcdefgh";
    const TCAP = 20_000_000;
    const srv = await startHttp(["--http-tokens", `${A}=alice,${B}=bob`, "--max-backlog-tenant-bytes", String(TCAP),
      "--max-backlog-bytes", "200000000", "--workers", "2", ...ISOLATION]);
    const socks = [];
    try {
      const sa = await initSession(srv, A);
      const sb = await initSession(srv, B);
      for (let i = 0; i < 6; i++) socks.push(postUnread(srv, sa, callBody(300 + i, bigCode(4_000_000)), A));
      const m = await until(async () => {
        const x = await metrics(srv, A);
        return x && x['moonbox_executions_total{state="completed"}'] >= 6 ? x : null;
      }, 60000, "alice's six executions completed");
      assert.ok(m.moonbox_http_backlog_peak_bytes <= TCAP, `peak ${m.moonbox_http_backlog_peak_bytes}`);
      assert.ok(m.moonbox_http_backlog_refused_total >= 4);
      // bob reads his 8 MB answer while alice's stay queued
      const r = await fetch(srv.url, { method: "POST", headers: { "Content-Type": "application/json", Accept: ACCEPT,
        Authorization: `Bearer ${B}`, "Mcp-Session-Id": sb }, body: callBody(400, bigCode(4_000_000)) });
      const j = await r.json();
      assert.equal(j.result.structuredContent.result.length, 4_000_000);
      const answers = (await Promise.all(socks.map(readShort))).map(bodyOf).filter((b) => b?.error);
      assert.ok(answers.length >= 4);
      for (const e of answers) {
        assert.match(e.error.message, /tenant "alice".*max_backlog_tenant_bytes=20000000/);
        assert.equal(e.error.data.limit, "max_backlog_tenant_bytes");
      }
    } finally {
      for (const s of socks) s.destroy();
      await srv.stop();
    }
  });

  it("stdio: a client that does not read stdout: one answer held, the rest refused by name, RSS back after", T, async () => {
    requireBinary();
    const CAP = 40_000_000;
    const dataDir = makeDataDir();
    const proc = spawn(MOONBOX, ["--data-dir", dataDir, "--max-backlog-bytes", String(CAP), "--workers", "2",
      ...ISOLATION], { stdio: ["pipe", "pipe", "pipe"] });
    const exited = new Promise((r) => proc.on("exit", r));
    let stderr = "";
    proc.stderr.on("data", (c) => { stderr += c; });
    let out = "";
    const onOut = (c) => { out += c; };
    try {
      proc.stdout.on("data", onOut);
      proc.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {
        protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "b", version: "1" } } }) + "\n");
      await until(() => out.includes('"id":1'), 10000, "initialize answered");
      proc.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
      await sleep(300);
      const base = rssOf(proc.pid);
      proc.stdout.pause(); // from here on nobody reads stdout
      proc.stdout.off("data", onOut);
      for (let i = 0; i < 6; i++) proc.stdin.write(callBody(10 + i, bigCode(16_000_000)) + "\n");
      await until(() => (stderr.match(/max_backlog_bytes=40000000/g) ?? []).length >= 5, 90000,
        "five answers refused for max_backlog_bytes");
      await until(() => rssOf(proc.pid) <= base + CAP + RSS_MARGIN, 10000,
        `RSS within the backlog and ${RSS_MARGIN / MiB} MiB of the ${Math.round(base / MiB)} MiB baseline while held`);
      // read again: one result, five errors naming the limit
      out = "";
      proc.stdout.on("data", onOut);
      proc.stdout.resume();
      const lines = await until(() => {
        const got = out.split("\n").filter(Boolean);
        return got.length >= 6 ? got.map((l) => JSON.parse(l)) : null;
      }, 30000, "six answers");
      const errors = lines.filter((l) => l.error);
      assert.equal(errors.length, 5);
      for (const e of errors) assert.match(e.error.message, /max_backlog_bytes=40000000/);
      assert.equal(lines.filter((l) => l.result).length, 1);
      out = "";
      proc.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 99, method: "tools/call",
        params: { name: "get_execution_stats", arguments: {} } }) + "\n");
      const stats = await until(() => {
        const l = out.split("\n").find((x) => x.includes('"id":99'));
        return l ? JSON.parse(l).result.structuredContent : null;
      }, 10000, "stats");
      assert.ok(stats.backlog.peak_bytes <= CAP, `peak ${stats.backlog.peak_bytes}`);
      assert.equal(stats.backlog.refused, 5);
      await until(() => rssOf(proc.pid) <= base + RSS_MARGIN, 10000,
        `RSS back within ${RSS_MARGIN / MiB} MiB of the ${Math.round(base / MiB)} MiB baseline`);
    } finally {
      proc.stdin.end();
      const t = setTimeout(() => proc.kill("SIGKILL"), 10000);
      await exited;
      clearTimeout(t);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
