// moonbox's HTTP endpoint as an OAuth 2.1 resource server (issue 32, docs/auth.md), against a
// real authorization server: oidc-provider (OpenID Certified, from npm) started in this process
// on a loopback port, with resource indicators on, issuing JWT access tokens for moonbox's
// resource through the client_credentials grant. moonbox discovers its keys (OpenID discovery:
// oidc-provider does not serve the RFC 8414 document, so that fallback is exercised too).
//
// Checked: the RFC 9728 metadata documents, 401 with resource_metadata, a provider-issued token
// running execute_code through the official SDK client, the tenant taken from the claim, hostile
// tokens (wrong audience, wrong issuer, expired, not yet valid, alg none, HS256 keyed with the
// public key, unknown kid, tampered signature, a bad tenant value, an opaque token, a token in
// the query string, an opaque token that introspection says is not active or is for another
// resource) each 401 invalid_token, an opaque token introspected (RFC 7662) and run, ES256 and EdDSA tokens signed with keys the provider
// publishes, a rotated key (the provider restarted with a new key set) picked up, scopes (tools
// a token may not call are not listed; calling one is 403 insufficient_scope naming the scope;
// /metrics needs the admin scope), static http_tokens at the same time, no token in the log,
// and the start refused for an http:// issuer that is not on loopback.
//
// And the TypeScript SDK's own OAuth client (OAuthClientProvider on StreamableHTTPClientTransport)
// doing the authorization-code + PKCE flow end to end: 401 -> resource metadata -> the issuer's
// discovery -> authorization request with resource and S256 -> sign-in and consent (automated
// by an interaction handler on the provider) -> code exchange -> execute_code.
//
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/oauth.test.mjs

import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn, spawnSync } from "node:child_process";
import crypto from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import Provider from "oidc-provider";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { bodyOf, initSession, postUnread, readShort } from "../lib/unread.mjs";
import { MOONBOX, NODE22, TESTS_DIR, TEST_STORE, makeDataDir, requireBinary, startHttp } from "../lib/moonbox.mjs";

const INSPECTOR = path.join(TESTS_DIR, "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");

const T = { timeout: 60000 };
const SCOPES = "moonbox:execute moonbox:skills moonbox:admin";
const STATIC = "static-token-0123456789abcdef";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A free loopback port (the resource URL must be known before moonbox starts). */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

const b64u = (b) => Buffer.from(b).toString("base64url");

/** A key pair with its private JWK (for the provider) and kid. */
function keyPair(kind, kid) {
  const { privateKey, publicKey } = kind === "rsa"
    ? crypto.generateKeyPairSync("rsa", { modulusLength: 2048 })
    : kind === "ec" ? crypto.generateKeyPairSync("ec", { namedCurve: "P-256" })
      : crypto.generateKeyPairSync("ed25519");
  const jwk = { ...privateKey.export({ format: "jwk" }), kid, use: "sig" };
  return { privateKey, publicKey, jwk, kid };
}

/** Signs a compact JWS with node:crypto (the test's own tokens, beside the provider's). */
function sign(header, claims, key, alg = header.alg) {
  const input = `${b64u(JSON.stringify(header))}.${b64u(JSON.stringify(claims))}`;
  let sig;
  if (alg === "RS256") sig = crypto.sign("sha256", Buffer.from(input), key);
  else if (alg === "PS256") sig = crypto.sign("sha256", Buffer.from(input), { key, padding: crypto.constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 });
  else if (alg === "ES256") sig = crypto.sign("sha256", Buffer.from(input), { key, dsaEncoding: "ieee-p1363" });
  else if (alg === "EdDSA") sig = crypto.sign(null, Buffer.from(input), key);
  else if (alg === "HS256") sig = crypto.createHmac("sha256", key).update(input).digest();
  else sig = Buffer.alloc(0);
  return `${input}.${b64u(sig)}`;
}

const REDIRECT = "http://127.0.0.1:1/callback"; // never served: the test reads the code off the redirect

/** Starts oidc-provider on port with these keys; resolves with {issuer, token(scope, resource), close()}.
 * Its interaction pages are replaced by a handler that signs "alice" in and consents to whatever
 * the client asked for (automated consent for the SDK's authorization-code flow). */
async function startProvider(port, keys, resource) {
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    clients: [{
      client_id: "agent", client_secret: "agent-secret-0123456789", grant_types: ["client_credentials"],
      redirect_uris: [], response_types: [], token_endpoint_auth_method: "client_secret_post", scope: SCOPES,
    }, { // its access tokens are opaque: moonbox introspects them
      client_id: "agent-opaque", client_secret: "agent-secret-0123456789", grant_types: ["client_credentials"],
      redirect_uris: [], response_types: [], token_endpoint_auth_method: "client_secret_post", scope: SCOPES,
    }, { // a public client of the SDK's OAuth flow (authorization code + PKCE)
      client_id: "sdk-client", redirect_uris: [REDIRECT], grant_types: ["authorization_code"],
      response_types: ["code"], token_endpoint_auth_method: "none",
    }, { // the client moonbox introspects as (HTTP Basic)
      client_id: "moonbox-rs", client_secret: "moonbox-rs-secret-0123456789", grant_types: ["client_credentials"],
      redirect_uris: [], response_types: [], token_endpoint_auth_method: "client_secret_basic",
    }],
    jwks: { keys: keys.map((k) => k.jwk) },
    scopes: SCOPES.split(" "),
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator, client) => ({
          scope: SCOPES, audience: indicator, accessTokenTTL: 300,
          accessTokenFormat: client.clientId === "agent-opaque" ? "opaque" : "jwt",
          jwt: { sign: { alg: "RS256" } },
        }),
      },
    },
  });
  const callback = provider.callback();
  const server = http.createServer(async (req, res) => {
    if (!req.url.startsWith("/interaction/")) return callback(req, res);
    try {
      const { prompt, params, session } = await provider.interactionDetails(req, res);
      if (prompt.name === "login") {
        await provider.interactionFinished(req, res, { login: { accountId: "alice" } }, { mergeWithLastSubmission: false });
        return;
      }
      const grant = new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
      if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(" "));
      for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
        grant.addResourceScope(indicator, scopes.join(" "));
      }
      await provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true });
    } catch (e) {
      res.writeHead(500).end(String(e));
    }
  });
  await new Promise((resolve, reject) => { server.once("error", reject); server.listen(port, "127.0.0.1", resolve); });
  return {
    issuer,
    async token(scope, res = resource, client = "agent") {
      const r = await fetch(`${issuer}/token`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: "client_credentials", client_id: client,
          client_secret: "agent-secret-0123456789", scope, resource: res }),
      });
      const body = await r.json();
      assert.equal(r.status, 200, JSON.stringify(body));
      return body.access_token;
    },
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(() => resolve()); }),
  };
}

const claimsOf = (tok) => JSON.parse(Buffer.from(tok.split(".")[1], "base64url").toString());

/** POST a JSON-RPC request to /mcp (2025-11-25, with a session when given). */
async function post(url, token, body, session) {
  const headers = { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (session) headers["Mcp-Session-Id"] = session;
  const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, www: r.headers.get("www-authenticate"), text, session: r.headers.get("mcp-session-id") };
}

const INIT = { jsonrpc: "2.0", id: 1, method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "oauth-test", version: "0" } } };

/** POSTs initialize with token over a raw socket, the body 500 ms after the headers (which alone
 * start the token's introspection); resolves with the whole response text. */
function lateBody(port, tok) {
  const body = JSON.stringify(INIT);
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, "127.0.0.1", () => {
      sock.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${tok}\r\n` +
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
        `MCP-Protocol-Version: 2025-11-25\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`);
      setTimeout(() => sock.write(body), 500);
    });
    let got = "";
    sock.on("data", (d) => { got += d; });
    sock.on("end", () => resolve(got));
    sock.on("error", reject);
  });
}

async function connect(url, token) {
  const transport = new StreamableHTTPClientTransport(new URL(url),
    { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  const client = new Client({ name: "moonbox-oauth-test", version: "0.0.0" }, { capabilities: {} });
  await client.connect(transport);
  return { client, transport };
}

describe("OAuth resource server against oidc-provider", () => {
  let idp, mb, resource, mbPort, idpPort;
  const rsa = keyPair("rsa", "rsa-1"), ec = keyPair("ec", "ec-1"), ed = keyPair("ed25519", "ed-1");
  const rotated = keyPair("rsa", "rsa-2");
  const stranger = keyPair("rsa", "stranger");

  /** A token the test signs itself with one of the provider's keys (valid unless overridden). */
  const own = (over = {}, key = rsa, alg = "RS256", header = {}) => {
    const now = Math.floor(Date.now() / 1000);
    return sign({ alg, typ: "at+jwt", kid: key.kid, ...header },
      { iss: idp.issuer, aud: resource, sub: "own-subject", client_id: "agent", scope: SCOPES,
        iat: now, exp: now + 300, ...over }, key.privateKey, alg);
  };

  before(async () => {
    requireBinary();
    [mbPort, idpPort] = [await freePort(), await freePort()];
    resource = `http://127.0.0.1:${mbPort}/mcp`;
    idp = await startProvider(idpPort, [rsa, ec, ed], resource);
    mb = await startHttp(["--oauth-issuer", idp.issuer, "--oauth-resource", resource, "--http-tokens", `${STATIC}=statictenant`,
      "--oauth-jwks-refresh-ms", "1000", "--log-level", "debug", "--oauth-client-id", "moonbox-rs",
      "--oauth-client-secret", "moonbox-rs-secret-0123456789"], { listen: `127.0.0.1:${mbPort}` });
  });
  after(async () => {
    await mb?.stop(); // normally stopped by the last test, which checks the exit
    await idp?.close();
  });

  it("serves the RFC 9728 metadata, root and path-suffixed, without a token", T, async () => {
    for (const p of ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"]) {
      const r = await fetch(`http://127.0.0.1:${mbPort}${p}`);
      assert.equal(r.status, 200, p);
      const doc = await r.json();
      assert.deepEqual(doc.authorization_servers, [idp.issuer]);
      assert.equal(doc.resource, resource);
      assert.deepEqual(doc.bearer_methods_supported, ["header"]);
      assert.deepEqual(doc.scopes_supported, SCOPES.split(" "));
    }
  });

  it("answers a request without a token 401 with resource_metadata", T, async () => {
    const r = await post(resource, null, INIT);
    assert.equal(r.status, 401);
    assert.match(r.www, /^Bearer resource_metadata="http:\/\/127\.0\.0\.1:\d+\/\.well-known\/oauth-protected-resource\/mcp"/);
    assert.doesNotMatch(r.www, /error=/);
  });

  it("runs execute_code with a provider-issued JWT through the SDK client; the tenant is the sub claim", T, async () => {
    const tok = await idp.token(SCOPES);
    const claims = claimsOf(tok);
    assert.equal(claims.aud, resource);
    const { client } = await connect(resource, tok);
    try {
      const res = await client.callTool({ name: "execute_code", arguments: { code: "return 6 * 7" } });
      assert.equal(res.structuredContent.result, 42);
      await client.callTool({ name: "write_workspace_file", arguments: { path: "who.txt", content: "me" } });
      assert.ok(existsSync(path.join(mb.dataDir, "workspaces", claims.sub, "who.txt")),
        `the workspace of tenant ${claims.sub} holds the file`);
    } finally {
      await client.close();
    }
    assert.equal(mb.stderr().includes(tok), false, "the token is not in the log");
  });

  it("accepts ES256 and EdDSA tokens signed with keys the provider publishes", T, async () => {
    for (const [key, alg] of [[ec, "ES256"], [ed, "EdDSA"]]) {
      const r = await post(resource, own({ sub: `sub-${alg}` }, key, alg), INIT);
      assert.equal(r.status, 200, `${alg}: ${r.text}`);
    }
  });

  it("refuses hostile tokens with 401 invalid_token", T, async () => {
    const now = Math.floor(Date.now() / 1000);
    const pubPem = rsa.publicKey.export({ type: "spki", format: "pem" });
    const good = await idp.token(SCOPES);
    const [h, p] = good.split(".");
    const cases = {
      "wrong audience": await idp.token(SCOPES, "http://127.0.0.1:1/other"),
      "wrong issuer": own({ iss: "http://127.0.0.1:1" }),
      expired: own({ exp: now - 3600, iat: now - 7200 }),
      "not yet valid": own({ nbf: now + 3600 }),
      "alg none": `${b64u(JSON.stringify({ alg: "none", kid: rsa.kid }))}.${p}.`,
      "HS256 keyed with the public key": own({}, { ...rsa, privateKey: pubPem }, "HS256"),
      "unknown kid": own({}, stranger),
      "tampered signature": `${h}.${p}.${b64u(Buffer.alloc(256, 7))}`,
      "tampered payload": `${h}.${b64u(JSON.stringify({ ...claimsOf(good), sub: "someone-else" }))}.${good.split(".")[2]}`,
      "a tenant that is not a name": own({ sub: "../../etc" }),
      "the reserved tenant default": own({ sub: "default" }),
      "an opaque token the issuer does not know (introspection: not active)": "opaque-token-0123456789abcdef",
      "an opaque token for another resource": await idp.token(SCOPES, "http://127.0.0.1:1/other", "agent-opaque"),
    };
    for (const [what, tok] of Object.entries(cases)) {
      const r = await post(resource, tok, INIT);
      assert.equal(r.status, 401, `${what}: ${r.text}`);
      assert.match(r.www, /resource_metadata="[^"]+"/, what);
      assert.match(r.www, /error="invalid_token", error_description="[^"]+"/, what);
    }
    // only the Authorization header counts: a token in the query string is not read
    const q = await fetch(`${resource}?access_token=${good}`, { method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
      body: JSON.stringify(INIT) });
    assert.equal(q.status, 401);
    assert.doesNotMatch(q.headers.get("www-authenticate"), /error=/);
  });

  it("introspects an opaque access token (RFC 7662, the discovery document's endpoint) and runs execute_code", T, async () => {
    const tok = await idp.token("moonbox:execute", resource, "agent-opaque");
    assert.equal(tok.split(".").length, 1, "an opaque token");
    const { client } = await connect(resource, tok);
    try {
      const res = await client.callTool({ name: "execute_code", arguments: { code: "return 'opaque'" } });
      assert.equal(res.structuredContent.result, "opaque");
      const names = (await client.listTools()).tools.map((t) => t.name);
      assert.equal(names.includes("save_skill"), false, "the scopes of the introspection answer count");
    } finally {
      await client.close();
    }
    assert.equal(mb.stderr().includes(tok), false, "the token is not in the log");
    assert.equal(mb.stderr().includes("moonbox-rs-secret"), false, "the client secret is not in the log");
  });

  it("an opaque token whose body comes after its introspection answered gets that answer (200, or 401)", T, async () => {
    const late = (tok) => lateBody(mbPort, tok);
    const ok = await late(await idp.token("moonbox:execute", resource, "agent-opaque"));
    assert.match(ok, /^HTTP\/1\.1 200 /, ok.slice(0, 300));
    assert.match(ok, /"protocolVersion":"2025-11-25"/);
    const no = await late("opaque-late-body-0123456789"); // not active: refused, not cached
    assert.match(no, /^HTTP\/1\.1 401 /, no.slice(0, 300));
    assert.match(no, /error="invalid_token", error_description="the token is not active/);
  });

  it("lists only the tools a token's scopes allow; a call beyond them is 403 insufficient_scope", T, async () => {
    const tok = await idp.token("moonbox:execute");
    const init = await post(resource, tok, INIT);
    assert.equal(init.status, 200, init.text);
    const sid = init.session;
    await post(resource, tok, { jsonrpc: "2.0", method: "notifications/initialized" }, sid);
    const list = await post(resource, tok, { jsonrpc: "2.0", id: 2, method: "tools/list" }, sid);
    const names = JSON.parse(list.text).result.tools.map((t) => t.name);
    assert.ok(names.includes("execute_code"));
    assert.equal(names.includes("save_skill"), false, "save_skill is not listed without moonbox:skills");
    // a cursor is checked against the list this token sees, not the whole one
    const past = await post(resource, tok, { jsonrpc: "2.0", id: 5, method: "tools/list",
      params: { cursor: `mbc1.${names.length}` } }, sid);
    assert.equal(JSON.parse(past.text).error?.code, -32602, past.text);
    const call = await post(resource, tok, { jsonrpc: "2.0", id: 3, method: "tools/call",
      params: { name: "save_skill", arguments: { name: "x", code: "return 1" } } }, sid);
    assert.equal(call.status, 403, call.text);
    assert.match(call.www, /error="insufficient_scope"/);
    assert.match(call.www, /scope="moonbox:skills"/);
    assert.equal(JSON.parse(call.text).error.data.scope, "moonbox:skills");
    // save_skill from code is refused the same way (the save_skill host call)
    const code = await post(resource, tok, { jsonrpc: "2.0", id: 4, method: "tools/call",
      params: { name: "execute_code", arguments: { code: 'return save_skill("y", "return 1", "a skill")' } } }, sid);
    assert.equal(code.status, 200);
    assert.match(code.text, /lacks the scope moonbox:skills/);
    // /metrics needs moonbox:admin
    const m1 = await fetch(`http://127.0.0.1:${mbPort}/metrics`, { headers: { Authorization: `Bearer ${tok}` } });
    assert.equal(m1.status, 403);
    assert.match(m1.headers.get("www-authenticate"), /insufficient_scope.*scope="moonbox:admin"/);
    const admin = await idp.token("moonbox:execute moonbox:admin");
    const m2 = await fetch(`http://127.0.0.1:${mbPort}/metrics`, { headers: { Authorization: `Bearer ${admin}` } });
    assert.equal(m2.status, 200);
    const metrics = await m2.text();
    assert.match(metrics, /^moonbox_oauth_tokens_verified_total [1-9]\d*$/m);
    assert.match(metrics, /^moonbox_oauth_tokens_refused_total [1-9]\d*$/m);
    assert.match(metrics, /^moonbox_oauth_token_cache_hits_total [1-9]\d*$/m);
    assert.match(metrics, /^moonbox_oauth_jwks_fetches_total [1-9]\d*$/m);
    // with moonbox:skills the tool is listed and runs
    const full = await idp.token(SCOPES);
    const { client } = await connect(resource, full);
    try {
      const all = (await client.listTools()).tools.map((t) => t.name);
      assert.ok(all.includes("save_skill"));
    } finally {
      await client.close();
    }
  });

  it("static http_tokens keep working beside OAuth", T, async () => {
    const { client } = await connect(resource, STATIC);
    try {
      const res = await client.callTool({ name: "execute_code", arguments: { code: "return 'static'" } });
      assert.equal(res.structuredContent.result, "static");
    } finally {
      await client.close();
    }
  });

  it("picks up a rotated key: the provider restarted with a new key set", T, async () => {
    await idp.close();
    idp = await startProvider(idpPort, [rotated], resource);
    await sleep(1100); // past oauth_jwks_refresh_ms since the last fetch (not a timing assertion)
    const tok = await idp.token(SCOPES);
    const [h] = tok.split(".");
    assert.equal(JSON.parse(Buffer.from(h, "base64url")).kid, "rsa-2");
    const r = await post(resource, tok, INIT);
    assert.equal(r.status, 200, r.text);
    assert.equal(mb.stderr().includes(tok), false, "the token is not in the log");
  });

  it("exits cleanly on SIGTERM", T, async () => {
    const r = await mb.stop();
    mb = null;
    assert.deepEqual(r, { code: 0, signal: null });
  });
});

/** Follows an authorization URL through the provider's (automated) sign-in and consent, as a
 * browser would (cookies kept), up to the redirect to REDIRECT; resolves with its code. */
async function consent(url) {
  const jar = new Map();
  for (let hop = 0; hop < 20; hop++) {
    const r = await fetch(url, { redirect: "manual",
      headers: { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join("; ") } });
    for (const c of r.headers.getSetCookie?.() ?? []) {
      const [kv] = c.split(";");
      const i = kv.indexOf("=");
      jar.set(kv.slice(0, i), kv.slice(i + 1));
    }
    const loc = r.headers.get("location");
    assert.ok(r.status >= 300 && r.status < 400 && loc, `hop ${hop}: ${r.status} ${await r.text()}`);
    const next = new URL(loc, url);
    if (next.href.startsWith(REDIRECT)) {
      assert.equal(next.searchParams.get("error"), null, next.href);
      return next.searchParams.get("code");
    }
    url = next;
  }
  throw new Error("too many redirects");
}

/** The SDK's OAuthClientProvider for a pre-registered public client; the "browser" is consent(). */
class TestOAuthProvider {
  constructor(issuer) { this.issuer = issuer; }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return { client_name: "moonbox oauth test", redirect_uris: [REDIRECT], grant_types: ["authorization_code"],
      response_types: ["code"], token_endpoint_auth_method: "none" };
  }
  clientInformation() { return { client_id: "sdk-client" }; }
  tokens() { return this.saved; }
  saveTokens(t) { this.saved = t; }
  redirectToAuthorization(url) { this.authUrl = url; }
  saveCodeVerifier(v) { this.verifier = v; }
  codeVerifier() { return this.verifier; }
}

describe("OAuth: the SDK's own client flow (authorization code + PKCE) against oidc-provider", () => {
  let idp, mb, resource;
  const rsa = keyPair("rsa", "rsa-1");
  before(async () => {
    const [mbPort, idpPort] = [await freePort(), await freePort()];
    resource = `http://127.0.0.1:${mbPort}/mcp`;
    idp = await startProvider(idpPort, [rsa], resource);
    mb = await startHttp(["--oauth-issuer", idp.issuer, "--oauth-resource", resource], { listen: `127.0.0.1:${mbPort}` });
  });
  after(async () => {
    await mb?.stop();
    await idp?.close();
  });

  it("the SDK reads the metadata, signs in with PKCE (automated consent), and runs execute_code", T, async () => {
    const authProvider = new TestOAuthProvider(idp.issuer);
    const first = new StreamableHTTPClientTransport(new URL(resource), { authProvider });
    const c1 = new Client({ name: "moonbox-oauth-flow", version: "0.0.0" }, { capabilities: {} });
    await assert.rejects(c1.connect(first), /Unauthorized/);
    assert.ok(authProvider.authUrl, "the SDK started the authorization flow");
    const au = authProvider.authUrl;
    assert.equal(au.origin, idp.issuer, "at the issuer named by the resource metadata");
    assert.equal(au.searchParams.get("code_challenge_method"), "S256");
    assert.equal(au.searchParams.get("resource"), resource, "RFC 8707 resource indicator");
    const code = await consent(au);
    await first.finishAuth(code);
    const tok = authProvider.saved.access_token;
    assert.equal(claimsOf(tok).aud, resource);
    assert.equal(claimsOf(tok).sub, "alice");
    const client = new Client({ name: "moonbox-oauth-flow", version: "0.0.0" }, { capabilities: {} });
    await client.connect(new StreamableHTTPClientTransport(new URL(resource), { authProvider }));
    try {
      const res = await client.callTool({ name: "execute_code", arguments: { code: "return 'signed in'" } });
      assert.equal(res.structuredContent.result, "signed in");
    } finally {
      await client.close();
    }
  });
});

describe("OAuth: a JWKS that hangs or is huge", () => {
  let keys, srv, port;
  const hanging = new Set();
  before(async () => {
    port = await freePort();
    keys = http.createServer((req, res) => {
      if (req.url === "/huge") {
        res.writeHead(200, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ keys: [], pad: "x".repeat(1 << 20) }));
      } else {
        hanging.add(res); // never answered
      }
    });
    await new Promise((resolve) => keys.listen(port, "127.0.0.1", resolve));
  });
  after(async () => {
    await srv?.stop();
    for (const res of hanging) res.destroy();
    keys.closeAllConnections?.();
    await new Promise((resolve) => keys.close(() => resolve()));
  });

  const jwt = sign({ alg: "RS256", kid: "k" }, { iss: "x", aud: "y", exp: 9999999999 }, keyPair("rsa", "k").privateKey);

  it("a request waiting for a JWKS that does not answer does not hold others up, then gets 503", T, async () => {
    const mbPort = await freePort();
    const resource = `http://127.0.0.1:${mbPort}/mcp`;
    srv = await startHttp(["--oauth-issuer", `http://127.0.0.1:${port}`, "--oauth-resource", resource,
      "--oauth-jwks-url", `http://127.0.0.1:${port}/hang`, "--oauth-fetch-timeout-ms", "3000"], { listen: `127.0.0.1:${mbPort}` });
    const order = [];
    const waiting = post(resource, jwt, INIT).then((r) => { order.push("token"); return r; });
    const health = fetch(`http://127.0.0.1:${mbPort}/healthz`).then((r) => { order.push("healthz"); return r; });
    const meta = fetch(`http://127.0.0.1:${mbPort}/.well-known/oauth-protected-resource`).then((r) => { order.push("metadata"); return r; });
    assert.equal((await health).status, 200);
    assert.equal((await meta).status, 200);
    const r = await waiting;
    assert.deepEqual(order, ["healthz", "metadata", "token"], "the loop answered others while the keys were fetched");
    assert.equal(r.status, 503, r.text);
    assert.match(srv.stderr(), /the issuer's keys could not be fetched: GET http:\/\/127\.0\.0\.1:\d+\/hang: /);
    assert.deepEqual(await srv.stop(), { code: 0, signal: null });
    srv = null;
  });

  it("a JWKS above oauth_jwks_max_bytes is refused", T, async () => {
    const mbPort = await freePort();
    const resource = `http://127.0.0.1:${mbPort}/mcp`;
    srv = await startHttp(["--oauth-issuer", `http://127.0.0.1:${port}`, "--oauth-resource", resource,
      "--oauth-jwks-url", `http://127.0.0.1:${port}/huge`], { listen: `127.0.0.1:${mbPort}` });
    const r = await post(resource, jwt, INIT);
    assert.equal(r.status, 503, r.text);
    assert.match(srv.stderr(), /the response is above 262144 bytes/);
    assert.deepEqual(await srv.stop(), { code: 0, signal: null });
    srv = null;
  });
});

describe("OAuth: who ran it, beside the tenant (oauth_tenant_claim org_id)", () => {
  let idp, mb, resource, mbPort;
  const TCAP = 20_000_000;
  const rsa = keyPair("rsa", "rsa-1");
  const token = (sub, org = "acme") => {
    const now = Math.floor(Date.now() / 1000);
    return sign({ alg: "RS256", typ: "at+jwt", kid: rsa.kid },
      { iss: idp.issuer, aud: resource, sub, org_id: org, client_id: "agent", scope: SCOPES,
        iat: now, exp: now + 300 }, rsa.privateKey);
  };
  before(async () => {
    requireBinary();
    let idpPort;
    [mbPort, idpPort] = [await freePort(), await freePort()];
    resource = `http://127.0.0.1:${mbPort}/mcp`;
    idp = await startProvider(idpPort, [rsa], resource);
    mb = await startHttp(["--oauth-issuer", idp.issuer, "--oauth-resource", resource, "--oauth-tenant-claim", "org_id",
      "--http-tokens", `${STATIC}=acme`, "--max-backlog-tenant-bytes", String(TCAP), "--max-backlog-bytes", "200000000",
      "--workers", "2"], { listen: `127.0.0.1:${mbPort}` });
  });
  after(async () => {
    await mb?.stop();
    await idp?.close();
  });

  const run = async (tok, code) => {
    const { client } = await connect(resource, tok);
    try {
      return await client.callTool({ name: "execute_code", arguments: { code } });
    } finally {
      await client.close();
    }
  };

  it("the journal records each execution's principal; list_executions shows and filters by it", T, async () => {
    const alice = token("alice@acme"), bob = token("bob@acme");
    assert.equal((await run(alice, "return 'from alice'")).structuredContent.result, "from alice");
    assert.equal((await run(bob, "return 'from bob'")).structuredContent.result, "from bob");
    assert.equal((await run(STATIC, "return 'from the static token'")).structuredContent.result, "from the static token");
    const { client } = await connect(resource, alice);
    try {
      const all = (await client.callTool({ name: "list_executions", arguments: {} })).structuredContent;
      const by = Object.fromEntries(all.executions.map((e) => [e.code, e]));
      assert.equal(by["return 'from alice'"]?.principal, "alice@acme", JSON.stringify(all));
      assert.equal(by["return 'from bob'"]?.principal, "bob@acme", "one tenant (org_id acme), two principals");
      assert.ok(by["return 'from the static token'"], "the static token's run is in the same tenant");
      assert.equal(by["return 'from the static token'"].principal, undefined, "a static token has no principal");
      const bobs = (await client.callTool({ name: "list_executions", arguments: { principal: "bob@acme" } })).structuredContent;
      assert.deepEqual(bobs.executions.map((e) => e.code), ["return 'from bob'"]);
      const one = (await client.callTool({ name: "list_executions", arguments: { id: by["return 'from bob'"].id } })).structuredContent;
      assert.equal(one.principal, "bob@acme");
      const bad = await client.callTool({ name: "list_executions", arguments: { principal: 7 } });
      assert.equal(bad.isError, true);
      assert.match(bad.content[0].text, /principal must be a string/);
    } finally {
      await client.close();
    }
    // another organisation's principal sees none of acme's executions
    const { client: other } = await connect(resource, token("alice@acme", "globex"));
    try {
      const theirs = (await other.callTool({ name: "list_executions", arguments: { principal: "alice@acme" } })).structuredContent;
      assert.deepEqual(theirs.executions, []);
    } finally {
      await other.close();
    }
    if (TEST_STORE === "sqlite") { // the token itself is kept nowhere: not in the store, not in the log
      const file = path.join(mb.dataDir, "moonbox.db"); // and its write-ahead log
      const db = Buffer.concat([file, `${file}-wal`].filter((f) => existsSync(f)).map((f) => readFileSync(f)));
      assert.ok(db.includes(Buffer.from("bob@acme")), "the principal is in the store file");
      for (const t of [alice, bob]) assert.equal(db.includes(Buffer.from(t.split(".")[2])), false, "no token signature in the store");
    }
    assert.equal(mb.stderr().includes(alice.split(".")[2]), false, "no token in the log");
  });

  it("each OAuth tenant has its own max_backlog_tenant_bytes: one's unread answers do not stop another's", T, async () => {
    const acme = token("dave@acme"), globex = token("erin@globex", "globex");
    const call = (id) => JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call",
      params: { name: "execute_code", arguments: { code: 'return string.rep("x", 4000000)', timeout_ms: 60000 } } });
    const socks = [];
    try {
      const sa = await initSession(mb, acme), sg = await initSession(mb, globex);
      const stat = async (re) => {
        const r = await fetch(`http://127.0.0.1:${mbPort}/metrics`, { headers: { Authorization: `Bearer ${acme}` } });
        return r.status === 200 ? Number((await r.text()).match(re)?.[1] ?? 0) : 0;
      };
      const COMPLETED = /^moonbox_executions_total\{state="completed"\} (\d+)$/m;
      const before = await stat(COMPLETED), refusedBefore = await stat(/^moonbox_http_backlog_refused_total (\d+)$/m);
      for (let i = 0; i < 6; i++) socks.push(postUnread(mb, sa, call(300 + i), acme));
      const t0 = Date.now();
      while (await stat(COMPLETED) < before + 6) {
        assert.ok(Date.now() - t0 < 50000, "acme's six executions did not complete");
        await sleep(100);
      }
      // about two 8 MB answers fit in acme's 20 MB; the others are refused
      assert.ok(await stat(/^moonbox_http_backlog_refused_total (\d+)$/m) >= refusedBefore + 4);
      const r = await fetch(resource, { method: "POST", headers: { "Content-Type": "application/json",
        Accept: "application/json, text/event-stream", Authorization: `Bearer ${globex}`, "Mcp-Session-Id": sg }, body: call(400) });
      const j = await r.json();
      assert.equal(j.result?.structuredContent?.result?.length, 4_000_000, JSON.stringify(j).slice(0, 400));
      const errors = (await Promise.all(socks.map(readShort))).map(bodyOf).filter((b) => b?.error);
      assert.ok(errors.length >= 4, `${errors.length} refused`);
      for (const e of errors) assert.match(e.error.message, /tenant "acme".*max_backlog_tenant_bytes=20000000/);
    } finally {
      for (const x of socks) x.destroy();
    }
  });

  it("http_max_sessions_per_tenant counts an OAuth tenant's sessions", T, async () => {
    const port = await freePort();
    const res2 = `http://127.0.0.1:${port}/mcp`;
    const srv = await startHttp(["--oauth-issuer", idp.issuer, "--oauth-resource", res2, "--oauth-tenant-claim", "org_id",
      "--http-max-sessions-per-tenant", "2"], { listen: `127.0.0.1:${port}` });
    try {
      const now = Math.floor(Date.now() / 1000);
      const tok = (sub, org) => sign({ alg: "RS256", typ: "at+jwt", kid: rsa.kid },
        { iss: idp.issuer, aud: res2, sub, org_id: org, client_id: "agent", scope: SCOPES, iat: now, exp: now + 300 }, rsa.privateKey);
      assert.equal((await post(res2, tok("a1", "acme"), INIT)).status, 200);
      assert.equal((await post(res2, tok("a2", "acme"), INIT)).status, 200);
      const third = await post(res2, tok("a3", "acme"), INIT);
      assert.equal(third.status, 503, third.text);
      assert.match(third.text, /http_max_sessions_per_tenant=2/);
      assert.equal((await post(res2, tok("g1", "globex"), INIT)).status, 200, "another tenant still opens one");
    } finally {
      await srv.stop();
    }
  });

  it("the client's token reaches no upstream server: an HTTP upstream gets its own configured credential only", T, async () => {
    const logDir = mkdtempSync(path.join(tmpdir(), "moonbox-oauth-up-"));
    const log = path.join(logDir, "up.log");
    const [upPort, port] = [await freePort(), await freePort()];
    const up = spawn(process.execPath, [path.join(TESTS_DIR, "integration/fixtures/upstream_fixture.mjs"), "http", String(upPort)],
      { env: { ...process.env, FIXTURE_LOG: log }, stdio: ["ignore", "ignore", "pipe"] });
    const upExit = new Promise((r) => up.on("exit", r));
    let srv;
    try {
      await new Promise((resolve, reject) => {
        let err = "";
        up.stderr.on("data", (c) => { err += c; if (/fixture ready/.test(err)) resolve(); });
        up.on("exit", (code) => reject(new Error(`the upstream fixture exited (${code}): ${err}`)));
      });
      const res2 = `http://127.0.0.1:${port}/mcp`;
      srv = await startHttp(["--oauth-issuer", idp.issuer, "--oauth-resource", res2, "--oauth-tenant-claim", "org_id",
        "--mcp-servers", JSON.stringify({ fx: { url: `http://127.0.0.1:${upPort}/mcp`,
          headers: { Authorization: "Bearer the-upstreams-own-credential" } } })], { listen: `127.0.0.1:${port}` });
      const now = Math.floor(Date.now() / 1000);
      const tok = sign({ alg: "RS256", typ: "at+jwt", kid: rsa.kid },
        { iss: idp.issuer, aud: res2, sub: "frank@acme", org_id: "acme", client_id: "agent", scope: SCOPES,
          iat: now, exp: now + 300 }, rsa.privateKey);
      const { client } = await connect(res2, tok);
      try {
        const r = await client.callTool({ name: "execute_code", arguments: { code: 'return servers.fx.echo{text = "hi"}' } });
        assert.equal(r.structuredContent?.success, true, JSON.stringify(r).slice(0, 500));
      } finally {
        await client.close();
      }
      const lines = readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
      const calls = lines.filter((m) => m.method === "tools/call");
      assert.equal(calls.length, 1, "the upstream was called");
      for (const m of lines.filter((x) => x.method)) {
        assert.equal(m.authorization, "Bearer the-upstreams-own-credential", `${m.method} carried ${m.authorization}`);
      }
      assert.equal(readFileSync(log, "utf8").includes(tok.split(".")[2]), false, "no part of the client's token upstream");
    } finally {
      await srv?.stop();
      up.kill("SIGKILL");
      await upExit;
      rmSync(logDir, { recursive: true, force: true });
    }
  });

  it("the Inspector CLI signs in with a bearer token header and runs execute_code", T, async () => {
    // asynchronously: the authorization server runs in this process and must keep answering
    const scratch = mkdtempSync(path.join(tmpdir(), "moonbox-inspector-"));
    const inspector = (args) => new Promise((resolve) => {
      execFile(NODE22, [INSPECTOR, "--cli", resource, "--transport", "http", ...args, "--format", "json"], {
        timeout: 45000, maxBuffer: 16 << 20,
        env: { ...process.env, MCP_INSPECTOR_SECRET_STORE: "memory", MCP_CATALOG_PATH: path.join(scratch, "catalog.json"), HOME: scratch },
      }, (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
    });
    try {
      const r = await inspector(["--header", `Authorization: Bearer ${token("carol@acme")}`,
        "--method", "tools/call", "--tool-name", "execute_code", "--tool-arg", "code=return 6*7"]);
      assert.equal(r.code, 0, `inspector exit ${r.code}\n${r.stdout}\n${r.stderr}`);
      const out = JSON.parse(r.stdout);
      assert.equal(out.result.structuredContent.result, 42, r.stdout);
      const none = await inspector(["--method", "tools/list"]);
      assert.notEqual(none.code, 0, "without a token the Inspector is refused");
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

describe("OAuth options checked at start", () => {
  const refused = (args) => {
    requireBinary();
    const r = spawnSync(MOONBOX, ["--data-dir", makeDataDir(), "--http", "127.0.0.1:0", ...args],
      { encoding: "utf8", timeout: 10000, stdio: ["ignore", "pipe", "pipe"] });
    assert.notEqual(r.status, 0);
    return r.stderr;
  };
  it("refuses an http:// issuer off loopback, a missing resource, introspection without a client", T, () => {
    assert.match(refused(["--oauth-issuer", "http://auth.example.com", "--oauth-resource", "https://mcp.example.com/mcp"]),
      /oauth_issuer "http:\/\/auth\.example\.com": an http:\/\/ URL is accepted only on a loopback host/);
    assert.match(refused(["--oauth-issuer", "https://auth.example.com"]), /oauth_issuer needs oauth_resource/);
    assert.match(refused(["--oauth-issuer", "https://auth.example.com", "--oauth-resource", "https://m.example.com/mcp",
      "--oauth-introspection-url", "https://auth.example.com/introspect"]), /oauth_introspection_url needs oauth_client_id/);
  });
});

