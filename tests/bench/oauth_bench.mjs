// oauth_bench.mjs - requests/s of execute_code ("return 1+1", sessionless 2026-07-28 requests,
// 50 connections, wrk with http_wrk.lua) authenticated by a static http_tokens token and by an
// OAuth JWT access token (RS256, verified once, then found in the validated-token cache), in the
// same run and on the same server, alternating, 3 rounds of OAUTH_BENCH_S (default 5) s each;
// prints the median of each and their ratio. The JWKS is served by this script. Figures, not
// pass/fail. Usage: cd tests && node bench/oauth_bench.mjs [moonbox]
import { spawn, execFileSync } from "node:child_process";
import crypto from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";

const BIN = path.resolve(process.argv[2] ?? "../build/moonbox");
const DUR = Number(process.env.OAUTH_BENCH_S || 5);
const STATIC = "static-bench-token-0123456789";
const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
const jwk = { ...crypto.createPublicKey(privateKey).export({ format: "jwk" }), kid: "bench", use: "sig", alg: "RS256" };
const keys = http.createServer((req, res) => { res.writeHead(200, { "Content-Type": "application/json" }); res.end(JSON.stringify({ keys: [jwk] })); });
await new Promise((r) => keys.listen(0, "127.0.0.1", r));
const issuer = `http://127.0.0.1:${keys.address().port}`;
const free = await new Promise((r) => { const s = http.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => r(p)); }); });
const resource = `http://127.0.0.1:${free}/mcp`;
const b64u = (x) => Buffer.from(x).toString("base64url");
const now = Math.floor(Date.now() / 1000);
const input = `${b64u(JSON.stringify({ alg: "RS256", typ: "at+jwt", kid: "bench" }))}.${b64u(JSON.stringify({ iss: issuer, aud: resource, sub: "bench", scope: "moonbox:execute", iat: now, exp: now + 3600 }))}`;
const jwt = `${input}.${b64u(crypto.sign("sha256", Buffer.from(input), privateKey))}`;
const dir = mkdtempSync(path.join(tmpdir(), "moonbox-oauth-bench-"));
const mb = spawn(BIN, ["--data-dir", dir, "--http", `127.0.0.1:${free}`, "--http-tokens", `${STATIC}=bench`, "--max-queue", "100000",
  "--oauth-issuer", issuer, "--oauth-resource", resource, "--oauth-jwks-url", `${issuer}/jwks`], { stdio: ["ignore", "ignore", "pipe"] });
await new Promise((r) => mb.stderr.on("data", (c) => { if (String(c).includes("signing key")) r(); }));
const rates = { static: [], jwt: [] };
for (let round = 0; round < 3; round++) {
  for (const [name, tok] of [["static", STATIC], ["jwt", jwt]]) {
    const out = execFileSync("wrk", ["-t2", "-c50", `-d${DUR}s`, "--timeout", "10s", "-s", "bench/http_wrk.lua", resource],
      { env: { ...process.env, MODE: "stateless", AUTH: tok }, encoding: "utf8" });
    const m = /wrk: \d+ requests, (\d+)\/s, p50 ([\d.]+) ms.*not a successful execution (\d+)/.exec(out);
    rates[name].push(Number(m[1]));
    if (Number(m[3])) console.log(`  ${name}: ${m[3]} answers were not a successful execution`);
  }
}
const med = (a) => a.slice().sort((x, y) => x - y)[1];
console.log(`oauth bench: static token median ${med(rates.static)} req/s, OAuth JWT median ${med(rates.jwt)} req/s ` +
  `(ratio ${(med(rates.jwt) / med(rates.static)).toFixed(2)}; rounds static ${rates.static.join(", ")}, jwt ${rates.jwt.join(", ")})`);
mb.kill("SIGTERM");
await new Promise((r) => mb.on("exit", r));
keys.close();
rmSync(dir, { recursive: true, force: true });
