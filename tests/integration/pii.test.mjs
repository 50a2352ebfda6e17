// PII end to end through the official SDK client: the sanitize_pii and restore_pii tools, the
// automatic policy on what execute_code returns (result, output, errors, tracebacks, table keys),
// the sandbox functions tokenize_pii / detokenize_pii / pii.scan, the SQLite vault (rows, restarts,
// the per-data-dir key), collisions planted in the vault, workspace reads and resources, published
// skills, and the pii_* options. Every test starts its own server on its own temporary data
// directory; tests that restart a server reuse that directory.
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/pii.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";

import {
  MOONBOX, connectClient, pgDbOf, testPg, connectWithSkills, execute, makeDataDir, requireBinary, sqlite3Cli,
  toolErrText as errText, toolOk as ok, useServer, withDataDir,
} from "../lib/moonbox.mjs";

const T = { timeout: 30000 };

// One value of every built-in type, each detected on its own and inside SENTENCE.
const SAMPLES = {
  EMAIL: "ann@example.com",
  PHONE: "415-555-0132",
  SSN: "123-45-6789",
  CARD: "4111 1111 1111 1111",
  IPV4: "192.168.1.20",
  IPV6: "2001:db8::1",
  SECRET: "AKIAIOSFODNN7EXAMPLE",
  IBAN: "DE89370400440532013000",
};
const TYPES = Object.keys(SAMPLES);
const SENTENCE = "mail {EMAIL} call {PHONE} ssn {SSN} card {CARD} ip {IPV4} v6 {IPV6} key {SECRET} iban {IBAN}";
const fill = (tpl, map) => tpl.replace(/\{([A-Z0-9_]+)\}/g, (_, k) => map[k]);
const RAW_SENTENCE = fill(SENTENCE, SAMPLES);
const BOB = "bob@example.com";
const UNKNOWN = "[EMAIL_00000000]";
const KNOWN_TYPES = "EMAIL, PHONE, SSN, CARD, IPV4, IPV6, SECRET, IBAN";

const tokenRe = (type, hex = 8) => new RegExp(`^\\[${type}_[0-9a-f]{${hex}}\\]$`);
const hexOf = (token) => token.match(/_([0-9a-f]+)\]$/)[1];

// ---------------------------------------------------------------------------------------------
// servers

/**
 * Starts moonbox on dataDir (a fresh one, removed on close, when not given) and connects the SDK
 * client. opts: { dataDir, args, env, skills (relative path -> text for a --skills-dir) }.
 */
async function start(opts = {}) {
  const connect = opts.skills ? connectWithSkills : connectClient;
  const s = await connect({ ...opts, name: "moonbox-pii-test" });
  return { ...s, db: path.join(s.dataDir, "moonbox.db") };
}

/** Starts a server, runs fn(s), always closes it (adding stderr to a failure). */
async function withServer(opts, fn) {
  return useServer(await start(opts), fn);
}

/** Runs the binary with stdin closed (it serves nothing and exits); for start-up checks. */
function startOnce(args, dataDir) {
  requireBinary();
  const dir = dataDir ?? makeDataDir();
  try {
    const r = spawnSync(MOONBOX, ["--data-dir", dir, ...args], { input: "", encoding: "utf8", timeout: 10000 });
    return { status: r.status, stderr: r.stderr };
  } finally {
    if (!dataDir) rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// calls

function call(s, name, args) {
  return s.client.callTool({ name, arguments: args });
}

const sanitize = async (s, text, types) => ok(await call(s, "sanitize_pii", types ? { text, types } : { text }));
const restore = async (s, text) => ok(await call(s, "restore_pii", { text }));

/** The token sanitize_pii gives value (asserting it is the whole, single replacement). */
async function tokenOf(s, value) {
  const sc = await sanitize(s, value);
  assert.equal(sc.total, 1, `one value in ${JSON.stringify(value)}: ${JSON.stringify(sc)}`);
  assert.equal(sc.pii_found.length, 1);
  assert.equal(sc.sanitized_text, sc.pii_found[0].token, `${JSON.stringify(value)} is replaced whole`);
  return sc.sanitized_text;
}

/** Tokens of SAMPLES, by type. */
async function sampleTokens(s) {
  const t = {};
  for (const [type, v] of Object.entries(SAMPLES)) {
    t[type] = await tokenOf(s, v);
    assert.match(t[type], tokenRe(type));
  }
  return t;
}

/** execute_code: the whole CallToolResult, after checking that the text block is the JSON of
 * structuredContent. */
async function exec(s, code, extra = {}) {
  const res = await execute(s.client, { code, ...extra });
  assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 500));
  assert.equal(res.content[0].type, "text");
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent);
  return res;
}

async function runOk(s, code, extra) {
  const res = await exec(s, code, extra);
  const sc = res.structuredContent;
  assert.equal(sc.success, true, `execution failed: ${sc.error}`);
  return sc.result;
}

/** Asserts that none of values occurs anywhere in what (serialized as JSON). */
function assertAbsent(what, values, label = "response") {
  const text = typeof what === "string" ? what : JSON.stringify(what);
  for (const v of values) {
    assert.ok(!text.includes(v), `${label} leaks ${JSON.stringify(v)}: ${text.slice(0, 1200)}`);
  }
}

/** Vault rows as objects, ordered by value (db: DATA_DIR/moonbox.db; under MOONBOX_TEST_STORE=pg
 * the PostgreSQL database of that data directory). */
function vaultRows(db) {
  const pgdb = pgDbOf(path.dirname(db));
  if (pgdb) {
    return JSON.parse(testPg.psqlSync("SELECT coalesce(json_agg(json_build_object('tenant', tenant, 'token', token, " +
      "'type', type, 'value', convert_from(value, 'UTF8'), 'first_seen', first_seen, 'last_seen', last_seen) " +
      "ORDER BY value, token), '[]') FROM pii_vault", pgdb));
  }
  const r = sqlite3Cli(db, "SELECT json_group_array(json_object('tenant', tenant, 'token', token, " +
    "'type', type, 'value', value, 'first_seen', first_seen, 'last_seen', last_seen)) " +
    "FROM (SELECT * FROM pii_vault ORDER BY value, token)", { readonly: true });
  assert.equal(r.status, 0, `sqlite3: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** Rebinds a vault token to another value (server stopped): the way to plant a collision. */
function plant(db, token, value) {
  const pgdb = pgDbOf(path.dirname(db));
  if (pgdb) {
    assert.equal(testPg.psqlSync(`WITH u AS (UPDATE pii_vault SET value = convert_to('${value}', 'UTF8') ` +
      `WHERE token = '${token}' RETURNING 1) SELECT count(*) FROM u`, pgdb), "1", `exactly one row bound to ${token}`);
    return;
  }
  const r = sqlite3Cli(db, `UPDATE pii_vault SET value = '${value}' WHERE token = '${token}'; SELECT changes();`);
  assert.equal(r.status, 0, `sqlite3: ${r.stderr}`);
  assert.equal(r.stdout.trim(), "1", `exactly one row bound to ${token}`);
}

// ---------------------------------------------------------------------------------------------

describe("sanitize_pii", () => {
  it("replaces every type by [TYPE_8hex], counts per type, never returns a value", T, async () => {
    await withServer({}, async (s) => {
      const res = await call(s, "sanitize_pii", { text: RAW_SENTENCE });
      const sc = ok(res);
      assertAbsent(res, Object.values(SAMPLES));
      assert.equal(sc.pii_found.length, TYPES.length);
      const byType = {};
      for (const f of sc.pii_found) {
        assert.deepEqual(Object.keys(f).sort(), ["count", "token", "type"], `no value field: ${JSON.stringify(f)}`);
        assert.match(f.token, tokenRe(f.type));
        assert.equal(f.count, 1);
        assert.equal(byType[f.type], undefined, `one entry per type: ${f.type}`);
        byType[f.type] = f.token;
      }
      assert.deepEqual(Object.keys(byType).sort(), [...TYPES].sort());
      // in order of first appearance
      assert.deepEqual(sc.pii_found.map((f) => f.type), TYPES);
      assert.equal(sc.sanitized_text, fill(SENTENCE, byType));
      assert.deepEqual(sc.counts, Object.fromEntries(TYPES.map((t) => [t, 1])));
      assert.equal(sc.total, TYPES.length);
      // each value alone gets the token it got in the sentence
      assert.deepEqual(await sampleTokens(s), byType);
    });
  });

  it("counts occurrences: one pii_found entry per distinct value, counts per type", T, async () => {
    await withServer({}, async (s) => {
      const text = `${SAMPLES.EMAIL}, ${BOB}; again ${SAMPLES.EMAIL} and ${SAMPLES.PHONE}`;
      const sc = await sanitize(s, text);
      const [a, b, p] = sc.pii_found;
      assert.equal(sc.pii_found.length, 3);
      assert.deepEqual([a.type, a.count, b.type, b.count, p.type, p.count], ["EMAIL", 2, "EMAIL", 1, "PHONE", 1]);
      assert.notEqual(a.token, b.token);
      assert.equal(sc.sanitized_text, `${a.token}, ${b.token}; again ${a.token} and ${p.token}`);
      assert.deepEqual(sc.counts, { EMAIL: 3, PHONE: 1 });
      assert.equal(sc.total, 4);
    });
  });

  it("types filter: only the listed types are replaced", T, async () => {
    await withServer({}, async (s) => {
      const tok = await sampleTokens(s);
      const sc = await sanitize(s, RAW_SENTENCE, ["EMAIL", "SSN"]);
      assert.equal(sc.sanitized_text, fill(SENTENCE, { ...SAMPLES, EMAIL: tok.EMAIL, SSN: tok.SSN }));
      assert.deepEqual(sc.counts, { EMAIL: 1, SSN: 1 });
      assert.equal(sc.total, 2);
      assert.deepEqual(sc.pii_found.map((f) => f.type), ["EMAIL", "SSN"]);
      // an empty list replaces nothing
      const none = await sanitize(s, RAW_SENTENCE, []);
      assert.equal(none.sanitized_text, RAW_SENTENCE);
      assert.equal(none.total, 0);
      assert.deepEqual(none.pii_found, []);
    });
  });

  it("an unknown type name is a tool error listing the known types", T, async () => {
    await withServer({}, async (s) => {
      assert.equal(errText(await call(s, "sanitize_pii", { text: "x", types: ["EMAIL", "FOO"] })),
        `pii: unknown type 'FOO' (known: ${KNOWN_TYPES})`);
      assert.equal(errText(await call(s, "sanitize_pii", { text: "x", types: "EMAIL" })),
        "invalid arguments: types must be an array of type names");
      assert.equal(errText(await call(s, "sanitize_pii", { text: "x", types: [1] })),
        "invalid arguments: types must be an array of type names");
      assert.equal(errText(await call(s, "sanitize_pii", { text: 5 })), "invalid arguments: text must be a string");
      assert.equal(errText(await call(s, "sanitize_pii", { text: "x", extra: 1 })),
        'invalid arguments: sanitize_pii has no argument "extra"');
    });
  });

  it("is idempotent: the sanitized text comes back unchanged with nothing found", T, async () => {
    await withServer({}, async (s) => {
      const text = `${RAW_SENTENCE}\n{"to":"${BOB}","cc":"${SAMPLES.EMAIL}"} password=hunter2hunter2`;
      const once = await sanitize(s, text);
      assert.ok(once.total >= TYPES.length + 2, JSON.stringify(once));
      const twice = await sanitize(s, once.sanitized_text);
      assert.equal(twice.sanitized_text, once.sanitized_text);
      assert.equal(twice.total, 0);
      assert.deepEqual(twice.pii_found, []);
      assert.deepEqual(twice.counts, {});
      // and the text of a single token
      const t = await sanitize(s, once.pii_found[0].token);
      assert.equal(t.sanitized_text, once.pii_found[0].token);
      assert.equal(t.total, 0);
    });
  });

  it("same value, same token: across calls and a restart on the same data dir (key file 0600)", T, async () => {
    await withDataDir(async (dir) => {
      let tok;
      await withServer({ dataDir: dir }, async (s) => {
        tok = await sampleTokens(s);
        assert.deepEqual(await sampleTokens(s), tok);
        assert.equal((await sanitize(s, RAW_SENTENCE)).sanitized_text, fill(SENTENCE, tok));
      });
      const key = statSync(path.join(dir, "pii.key"));
      assert.ok(key.isFile());
      assert.equal(key.mode & 0o777, 0o600, `pii.key mode ${(key.mode & 0o777).toString(8)}`);
      assert.equal(key.size, 32);
      const keyBytes = readFileSync(path.join(dir, "pii.key"));
      await withServer({ dataDir: dir }, async (s) => {
        assert.deepEqual(await sampleTokens(s), tok);
        assert.equal((await restore(s, fill(SENTENCE, tok))).restored_text, RAW_SENTENCE);
      });
      assert.deepEqual(readFileSync(path.join(dir, "pii.key")), keyBytes, "the key is not replaced on restart");
      // another data dir has another key: every token differs
      await withServer({}, async (s) => {
        const other = await sampleTokens(s);
        for (const t of TYPES) assert.notEqual(other[t], tok[t], `${t} token differs across keys`);
        assert.notDeepEqual(readFileSync(path.join(s.dataDir, "pii.key")), keyBytes);
      });
    });
  });
});

describe("restore_pii", () => {
  it("restores tokens from sanitize_pii and from executions; unknown ones are listed once", T, async () => {
    await withServer({}, async (s) => {
      const tA = await tokenOf(s, SAMPLES.EMAIL);
      const tB = await runOk(s, `return '${BOB}'`);
      assert.match(tB, tokenRe("EMAIL"));
      const tP = await runOk(s, `return {phone = '${SAMPLES.PHONE}'}`);
      const sc = await restore(s, `${tA} and ${tB} call ${tP.phone}; ${UNKNOWN}, [PHONE_0123abcd] ${UNKNOWN}`);
      assert.equal(sc.restored_text,
        `${SAMPLES.EMAIL} and ${BOB} call ${SAMPLES.PHONE}; ${UNKNOWN}, [PHONE_0123abcd] ${UNKNOWN}`);
      assert.deepEqual(sc.unresolved, [UNKNOWN, "[PHONE_0123abcd]"]);
      // text without tokens, and things that only look like tokens
      const plain = await restore(s, "no tokens [EMAIL_XYZ] [EMAIL_ABCDEF12] [EMAIL_1234567] here");
      assert.equal(plain.restored_text, "no tokens [EMAIL_XYZ] [EMAIL_ABCDEF12] [EMAIL_1234567] here");
      assert.deepEqual(plain.unresolved, []);
      assert.equal(errText(await call(s, "restore_pii", { text: "x", extra: 1 })),
        'invalid arguments: restore_pii has no argument "extra"');
    });
  });

  it("a token minted under another data dir is unresolved", T, async () => {
    let foreign;
    await withServer({}, async (s) => { foreign = await tokenOf(s, SAMPLES.EMAIL); });
    await withServer({}, async (s) => {
      const sc = await restore(s, `who is ${foreign}?`);
      assert.equal(sc.restored_text, `who is ${foreign}?`);
      assert.deepEqual(sc.unresolved, [foreign]);
      assert.equal(await runOk(s, `return detokenize_pii('${foreign}')`), foreign);
    });
  });

  it("--pii-restore 0: restore_pii and detokenize_pii are refused naming pii_restore=0", T, async () => {
    await withServer({ args: ["--pii-restore", "0"] }, async (s) => {
      const t = await tokenOf(s, SAMPLES.EMAIL); // sanitizing still works
      const msg = errText(await call(s, "restore_pii", { text: t }));
      assert.equal(msg, "restoring personal data is disabled by configuration (pii_restore=0)");
      assertAbsent(msg, [SAMPLES.EMAIL]);
      // from the vault, and a token minted in the same execution: both refused
      for (const code of [`return detokenize_pii('${t}')`,
        `local t = tokenize_pii('${BOB}') return detokenize_pii(t)`,
        "return detokenize_pii('no tokens at all')"]) {
        const res = await exec(s, code);
        const sc = res.structuredContent;
        assert.equal(sc.success, false, code);
        assert.equal(sc.error_type, "runtime");
        assert.equal(sc.error,
          "code:1: detokenize_pii: restoring personal data is disabled by configuration (pii_restore=0)");
        assertAbsent(res, [SAMPLES.EMAIL, BOB]);
      }
      const stats = ok(await call(s, "get_execution_stats", {}));
      assert.equal(stats.pii.restore, false);
      assert.equal(stats.pii.policy, true);
    });
  });
});

describe("the automatic policy on execute_code", () => {
  it("a returned string of every type comes back as the tokens sanitize_pii gives", T, async () => {
    await withServer({}, async (s) => {
      const tok = await sampleTokens(s);
      const res = await exec(s, `return [[${RAW_SENTENCE}]]`);
      assert.equal(res.structuredContent.result, fill(SENTENCE, tok));
      assertAbsent(res, Object.values(SAMPLES));
    });
  });

  it("tables: values, e-mail keys and nested tables are tokenized; other values kept", T, async () => {
    await withServer({}, async (s) => {
      const tok = await sampleTokens(s);
      const tBob = await tokenOf(s, BOB);
      const res = await exec(s, `return {
        email = '${SAMPLES.EMAIL}',
        list = { '${SAMPLES.PHONE}', { deep = { card = '${SAMPLES.CARD}' } } },
        ['${BOB}'] = { ssn = '${SAMPLES.SSN}', n = 5, ok = true },
        text = 'key ${SAMPLES.SECRET} from ${SAMPLES.IPV4}',
        plain = 'nothing here', n = 42,
      }`);
      assert.deepEqual(res.structuredContent.result, {
        email: tok.EMAIL,
        list: [tok.PHONE, { deep: { card: tok.CARD } }],
        [tBob]: { ssn: tok.SSN, n: 5, ok: true },
        text: `key ${tok.SECRET} from ${tok.IPV4}`,
        plain: "nothing here", n: 42,
      });
      assertAbsent(res, [...Object.values(SAMPLES), BOB]);
    });
  });

  it("the global result (no return statement) is tokenized too", T, async () => {
    await withServer({}, async (s) => {
      const tE = await tokenOf(s, SAMPLES.EMAIL);
      const res = await exec(s, `result = { who = '${SAMPLES.EMAIL}' }`);
      assert.equal(res.structuredContent.success, true);
      assertAbsent(res, [SAMPLES.EMAIL], "result from the global `result`");
      assert.deepEqual(res.structuredContent.result, { who: tE });
    });
  });

  it("print output, error messages, error objects and tracebacks are tokenized", T, async () => {
    await withServer({}, async (s) => {
      const tE = await tokenOf(s, SAMPLES.EMAIL);
      const tP = await tokenOf(s, SAMPLES.PHONE);
      let res = await exec(s, `print('hello ${SAMPLES.EMAIL}', '${SAMPLES.PHONE}')\nerror('leak ${SAMPLES.EMAIL}')`);
      let sc = res.structuredContent;
      assert.equal(sc.success, false);
      assert.equal(sc.output, `hello ${tE}\t${tP}\n`);
      assert.equal(sc.error, `code:2: leak ${tE}`);
      assert.ok(sc.traceback.startsWith(`code:2: leak ${tE}\nstack traceback:`), sc.traceback);
      assertAbsent(res, [SAMPLES.EMAIL, SAMPLES.PHONE]);

      res = await exec(s, `local function f(x) error({ who = x, n = 1 }) end\nf('${SAMPLES.EMAIL}')`);
      sc = res.structuredContent;
      assert.ok(sc.error.startsWith("error object: "), sc.error);
      assert.deepEqual(JSON.parse(sc.error.slice("error object: ".length)), { who: tE, n: 1 });
      assertAbsent(res, [SAMPLES.EMAIL]);

      // an error message made by the VM that quotes the value (a field name)
      res = await exec(s, `local t = {}\nt['${SAMPLES.EMAIL}'].x = 1`);
      sc = res.structuredContent;
      assert.equal(sc.error, `code:2: attempt to index a nil value (field '${tE}')`);
      assertAbsent(res, [SAMPLES.EMAIL]);
      // a syntax error quoting the value
      res = await exec(s, `x = '${SAMPLES.EMAIL}' '${SAMPLES.EMAIL}'`);
      sc = res.structuredContent;
      assert.equal(sc.error_type, "syntax");
      assert.equal(sc.error, `code:1: unexpected symbol near ''${tE}''`);
      assertAbsent(res, [SAMPLES.EMAIL]);
    });
  });

  it("a value returned twice gets the same token everywhere", T, async () => {
    await withServer({}, async (s) => {
      const res = await exec(s,
        `print('${SAMPLES.EMAIL}') return '${SAMPLES.EMAIL}', { x = '${SAMPLES.EMAIL}', ['${SAMPLES.EMAIL}'] = '${SAMPLES.EMAIL}' }`);
      const [a, t] = res.structuredContent.result;
      assert.match(a, tokenRe("EMAIL"));
      assert.deepEqual(t, { x: a, [a]: a });
      assert.equal(res.structuredContent.output, `${a}\n`);
      assert.equal(await tokenOf(s, SAMPLES.EMAIL), a);
      assertAbsent(res, [SAMPLES.EMAIL]);
    });
  });

  it("--pii-policy 0 returns raw values (result, keys, output, errors) and stores nothing", T, async () => {
    await withServer({ args: ["--pii-policy", "0"] }, async (s) => {
      let sc = (await exec(s, `print('${SAMPLES.EMAIL}') return { ['${BOB}'] = [[${RAW_SENTENCE}]] }`)).structuredContent;
      assert.equal(sc.success, true);
      assert.deepEqual(sc.result, { [BOB]: RAW_SENTENCE });
      assert.equal(sc.output, `${SAMPLES.EMAIL}\n`);
      sc = (await exec(s, `error('leak ${SAMPLES.EMAIL}')`)).structuredContent;
      assert.equal(sc.error, `code:1: leak ${SAMPLES.EMAIL}`);
      assert.deepEqual(vaultRows(s.db), []);
      const stats = ok(await call(s, "get_execution_stats", {}));
      assert.deepEqual(stats.pii, { policy: false, restore: true, vault_tokens: 0 });
      // the explicit tools still work
      const tE = await tokenOf(s, SAMPLES.EMAIL);
      assert.equal((await restore(s, tE)).restored_text, SAMPLES.EMAIL);
      const r = await runOk(s, `local t, m = tokenize_pii('${SAMPLES.EMAIL}') return { t = t, v = m[t] }`);
      assert.deepEqual(r, { t: tE, v: SAMPLES.EMAIL });
    });
  });
});

describe("tokenize_pii, detokenize_pii and pii.scan in the sandbox", () => {
  it("tokenize_pii returns the sanitized text and a token -> value map", T, async () => {
    await withServer({}, async (s) => {
      const tE = await tokenOf(s, SAMPLES.EMAIL);
      const tS = await tokenOf(s, SAMPLES.SSN);
      const r = await runOk(s, `
        local t, m = tokenize_pii('to ${SAMPLES.EMAIL}, ssn ${SAMPLES.SSN}, again ${SAMPLES.EMAIL}')
        local n = 0 for _ in pairs(m) do n = n + 1 end
        local e, s = t:match('%[EMAIL_%x+%]'), t:match('%[SSN_%x+%]')
        local t2, m2 = tokenize_pii('nothing here')
        return { text = t, n = n, email = m[e] == '${SAMPLES.EMAIL}', ssn = m[s] == '${SAMPLES.SSN}',
                 plain = t2, empty = next(m2) == nil }`);
      assert.deepEqual(r, {
        text: `to ${tE}, ssn ${tS}, again ${tE}`, n: 2, email: true, ssn: true,
        plain: "nothing here", empty: true,
      });
    });
  });

  it("detokenize_pii restores tokens of this execution and of the vault; the answer is re-tokenized", T, async () => {
    await withServer({}, async (s) => {
      const tE = await tokenOf(s, SAMPLES.EMAIL);                 // minted by the tool
      const tP = await runOk(s, `return '${SAMPLES.PHONE}'`);     // minted by an earlier execution
      const res = await exec(s, `
        local t = tokenize_pii('x ${BOB} y')
        local same = detokenize_pii(t)
        local vault = detokenize_pii('${tE} / ${tP} / ${UNKNOWN}')
        return { same == 'x ${BOB} y', vault == '${SAMPLES.EMAIL} / ${SAMPLES.PHONE} / ${UNKNOWN}', same, vault }`);
      const tB = await tokenOf(s, BOB);
      assert.deepEqual(res.structuredContent.result, [true, true, `x ${tB} y`, `${tE} / ${tP} / ${UNKNOWN}`]);
      assertAbsent(res, [SAMPLES.EMAIL, SAMPLES.PHONE, BOB]);
    });
  });

  it("tokens that come from the model stay tokens until code asks", T, async () => {
    await withServer({}, async (s) => {
      const tE = await tokenOf(s, SAMPLES.EMAIL);
      const r = await runOk(s, "return { tok == want, #tok, tok:find('@', 1, true) == nil, detokenize_pii(tok) == real }",
        { context_vars: { tok: tE, want: tE, real: SAMPLES.EMAIL } });
      assert.deepEqual(r, [true, tE.length, true, true]);
    });
  });

  it("pii.scan returns {type, start, stop} with 1-based inclusive byte offsets", T, async () => {
    await withServer({}, async (s) => {
      const text = `é ${SAMPLES.EMAIL}, ${SAMPLES.SSN}`; // é is two bytes
      const res = await exec(s, `
        local r = pii.scan(text)
        local subs = {}
        for i, sp in ipairs(r) do subs[i] = text:sub(sp.start, sp.stop) == want[i] end
        return { spans = r, subs = subs, none = pii.scan('nothing 1.2.3 here'), tok = pii.scan(tok) }`,
      { context_vars: { text, want: [SAMPLES.EMAIL, SAMPLES.SSN], tok: await tokenOf(s, SAMPLES.EMAIL) } });
      assert.deepEqual(res.structuredContent.result, {
        spans: [{ type: "EMAIL", start: 4, stop: 18 }, { type: "SSN", start: 21, stop: 31 }],
        subs: [true, true], none: [], tok: [],
      });
    });
  });
});

describe("the vault", () => {
  it("holds (tenant, token, type, value, first_seen <= last_seen) for what the policy replaced", T, async () => {
    await withServer({}, async (s) => {
      const t0 = Date.now();
      const r = await runOk(s, `tokenize_pii('carl@example.com') return { '${SAMPLES.EMAIL}', '${SAMPLES.EMAIL}', '${SAMPLES.PHONE}' }`);
      const t1 = Date.now();
      const rows = vaultRows(s.db);
      assert.deepEqual(rows.map((x) => [x.tenant, x.token, x.type, x.value]), [
        ["default", r[2], "PHONE", SAMPLES.PHONE],
        ["default", r[0], "EMAIL", SAMPLES.EMAIL],
        ["default", rows[2].token, "EMAIL", "carl@example.com"],
      ]);
      assert.equal(r[0], r[1]);
      assert.match(rows[2].token, tokenRe("EMAIL"));
      for (const x of rows) {
        assert.ok(Number.isInteger(x.first_seen) && Number.isInteger(x.last_seen), JSON.stringify(x));
        assert.ok(x.first_seen <= x.last_seen, JSON.stringify(x));
        assert.ok(x.first_seen >= t0 - 1000 && x.last_seen <= t1 + 1000, `${JSON.stringify(x)} within [${t0}, ${t1}]`);
      }
      const stats = ok(await call(s, "get_execution_stats", {}));
      assert.deepEqual(stats.pii, { policy: true, restore: true, vault_tokens: 3 });
    });
  });

  it("last_seen advances when a stored value is seen again", T, async () => {
    await withServer({}, async (s) => {
      const tok = await runOk(s, `return '${SAMPLES.EMAIL}'`);
      const before = vaultRows(s.db).find((x) => x.token === tok);
      await new Promise((r) => setTimeout(r, 30));
      await runOk(s, `return '${SAMPLES.EMAIL}'`);
      await tokenOf(s, SAMPLES.EMAIL);
      const after = vaultRows(s.db).find((x) => x.token === tok);
      assert.equal(after.first_seen, before.first_seen);
      assert.ok(after.last_seen >= before.first_seen + 30,
        `last_seen ${after.last_seen} should have moved past ${before.first_seen} + 30 ms`);
    });
  });

  it("tokens survive a restart: restore_pii and detokenize_pii read the stored rows", T, async () => {
    await withDataDir(async (dir) => {
      let r;
      await withServer({ dataDir: dir }, async (s) => {
        r = await runOk(s, `return { '${SAMPLES.EMAIL}', '${SAMPLES.CARD}' }`);
      });
      const rows = vaultRows(path.join(dir, "moonbox.db"));
      assert.deepEqual(rows.map((x) => x.token).sort(), [...r].sort());
      await withServer({ dataDir: dir }, async (s) => {
        assert.deepEqual(await restore(s, `${r[0]} pays with ${r[1]}`),
          { restored_text: `${SAMPLES.EMAIL} pays with ${SAMPLES.CARD}`, unresolved: [] });
        assert.equal(await runOk(s, `return detokenize_pii('${r[1]}') == '${SAMPLES.CARD}'`), true);
        assert.equal(await runOk(s, `return '${SAMPLES.EMAIL}'`), r[0]);
      });
      const ident = (x) => [x.tenant, x.token, x.type, x.value, x.first_seen];
      assert.deepEqual(vaultRows(path.join(dir, "moonbox.db")).map(ident), rows.map(ident),
        "no new row after the restart");
    });
  });
});

describe("collisions planted in the vault", () => {
  it("sanitize_pii: a taken token gives the value 12, then 16 hex digits; restore tells them apart", T, async () => {
    await withDataDir(async (dir) => {
      const db = path.join(dir, "moonbox.db");
      let t8, t12, t16;
      await withServer({ dataDir: dir }, async (s) => { t8 = await tokenOf(s, SAMPLES.EMAIL); });
      plant(db, t8, "someone-else@x.org");
      await withServer({ dataDir: dir }, async (s) => {
        t12 = await tokenOf(s, SAMPLES.EMAIL);
        assert.match(t12, tokenRe("EMAIL", 12));
        assert.ok(hexOf(t12).startsWith(hexOf(t8)), `${t12} extends ${t8}`);
        assert.equal(await tokenOf(s, SAMPLES.EMAIL), t12, "stable once chosen");
        const sc = await sanitize(s, `${SAMPLES.EMAIL} ${SAMPLES.EMAIL}`);
        assert.equal(sc.sanitized_text, `${t12} ${t12}`);
        assert.deepEqual(sc.pii_found, [{ type: "EMAIL", token: t12, count: 2 }]);
        assert.deepEqual(await restore(s, `${t12} / ${t8}`),
          { restored_text: `${SAMPLES.EMAIL} / someone-else@x.org`, unresolved: [] });
      });
      await withServer({ dataDir: dir }, async (s) => {
        assert.equal(await tokenOf(s, SAMPLES.EMAIL), t12, "the longer token is in the vault");
      });
      plant(db, t12, "third@x.org");
      await withServer({ dataDir: dir }, async (s) => {
        t16 = await tokenOf(s, SAMPLES.EMAIL);
        assert.match(t16, tokenRe("EMAIL", 16));
        assert.ok(hexOf(t16).startsWith(hexOf(t12)), `${t16} extends ${t12}`);
        assert.deepEqual(await restore(s, `${t16} ${t12} ${t8}`),
          { restored_text: `${SAMPLES.EMAIL} third@x.org someone-else@x.org`, unresolved: [] });
      });
    });
  });

  it("when 8, 12 and 16 hex digits are all taken the answer never uses another value's token", T, async () => {
    await withDataDir(async (dir) => {
      const db = path.join(dir, "moonbox.db");
      const taken = [];
      for (const other of ["x1@x.org", "x2@x.org", "x3@x.org"]) {
        await withServer({ dataDir: dir }, async (s) => { taken.push(await tokenOf(s, SAMPLES.EMAIL)); });
        plant(db, taken[taken.length - 1], other);
      }
      await withServer({ dataDir: dir }, async (s) => {
        for (const res of [await call(s, "sanitize_pii", { text: SAMPLES.EMAIL }),
          await execute(s.client, { code: `return '${SAMPLES.EMAIL}'` })]) {
          const text = JSON.stringify(res);
          assertAbsent(res, [SAMPLES.EMAIL]);
          for (const t of taken) {
            assert.ok(!text.includes(t), `the answer uses ${t}, which restores to another value: ${text.slice(0, 600)}`);
          }
        }
      });
    });
  });

  it("execute_code: the worker's token is taken, the host rewrites result, keys, output and errors", T, async () => {
    await withDataDir(async (dir) => {
      const db = path.join(dir, "moonbox.db");
      let t8;
      await withServer({ dataDir: dir }, async (s) => { t8 = await runOk(s, `return '${BOB}'`); });
      assert.match(t8, tokenRe("EMAIL"));
      plant(db, t8, "someone-else@x.org");
      await withServer({ dataDir: dir }, async (s) => {
        let res = await exec(s, `print('to ${BOB}') return { ['${BOB}'] = '${BOB}', s = 'x ${BOB} y' }`);
        const sc = res.structuredContent;
        const t12 = sc.result.s.slice(2, -2);
        assert.match(t12, tokenRe("EMAIL", 12));
        assert.ok(hexOf(t12).startsWith(hexOf(t8)));
        assert.deepEqual(sc.result, { [t12]: t12, s: `x ${t12} y` });
        assert.equal(sc.output, `to ${t12}\n`);
        assert.ok(!JSON.stringify(res).includes(t8), `no ${t8} in ${JSON.stringify(res)}`);
        assertAbsent(res, [BOB]);

        res = await exec(s, `error('no ${BOB}')`);
        assert.equal(res.structuredContent.error, `code:1: no ${t12}`);
        assert.ok(!JSON.stringify(res).includes(t8), JSON.stringify(res));

        assert.deepEqual(await restore(s, `${t12} ${t8}`),
          { restored_text: `${BOB} someone-else@x.org`, unresolved: [] });
        assert.equal(await runOk(s, `return detokenize_pii('${t12}') == '${BOB}', detokenize_pii('${t8}') == 'someone-else@x.org'`)
          .then((r) => r.join()), "true,true");
        assert.equal(await tokenOf(s, BOB), t12);
      });
    });
  });

  it("a token the code was given is not rewritten when a collision renames another value", T, async () => {
    await withDataDir(async (dir) => {
      const db = path.join(dir, "moonbox.db");
      let t8;
      await withServer({ dataDir: dir }, async (s) => { t8 = await tokenOf(s, BOB); });
      plant(db, t8, "someone-else@x.org"); // t8 now stands for someone-else
      await withServer({ dataDir: dir }, async (s) => {
        // the model refers to someone-else by t8 and the code also returns bob, whose token collides
        const r = await runOk(s, `return { given = tok, mine = '${BOB}' }`, { context_vars: { tok: t8 } });
        assert.match(r.mine, tokenRe("EMAIL", 12));
        assert.equal(r.given, t8, `the given token ${t8} was rewritten to ${r.given}, which restores to ${BOB}`);
        assert.deepEqual(await restore(s, `${r.given} ${r.mine}`),
          { restored_text: `someone-else@x.org ${BOB}`, unresolved: [] });
        // the same when the token is in the code, tokenize_pii mints, and both are printed
        const res = await exec(s, `local t, map = tokenize_pii('${BOB}')
          print('${t8} ' .. t) return { given = '${t8}', minted = t, known = map[t] == '${BOB}',
                                        back = detokenize_pii(t) == '${BOB}' }`);
        const sc = res.structuredContent;
        assert.equal(sc.success, true, JSON.stringify(sc));
        assert.deepEqual(sc.result, { given: t8, minted: r.mine, known: true, back: true });
        assert.equal(sc.output, `${t8} ${r.mine}\n`);
        assertAbsent(res, [BOB]);
      });
    });
  });
});

describe("workspace reads and resources", () => {
  const RAW = `contact ${SAMPLES.EMAIL} or ${SAMPLES.PHONE}\n`;

  it("a file written by sandbox code reads back as tokens (utf8, base64, resources/read)", T, async () => {
    await withServer({}, async (s) => {
      const tE = await tokenOf(s, SAMPLES.EMAIL);
      const tP = await tokenOf(s, SAMPLES.PHONE);
      const want = `contact ${tE} or ${tP}\n`;
      assert.equal(await runOk(s, `write_file('notes/c.txt', [[${RAW}]]) return read_file('notes/c.txt') == [[${RAW}]]`), true);
      // the file itself keeps the values
      assert.equal(readFileSync(path.join(s.dataDir, "workspaces", "default", "notes", "c.txt"), "utf8"), RAW);

      let res = await call(s, "read_workspace_file", { path: "notes/c.txt" });
      assert.equal(ok(res).content, want);
      assertAbsent(res, [SAMPLES.EMAIL, SAMPLES.PHONE]);
      res = await call(s, "read_workspace_file", { path: "notes/c.txt", encoding: "base64" });
      assert.equal(Buffer.from(ok(res).content, "base64").toString("utf8"), want);
      const rr = await s.client.readResource({ uri: "moonbox://workspace/notes/c.txt" });
      assert.deepEqual(rr.contents, [{ uri: "moonbox://workspace/notes/c.txt", mimeType: "text/plain", text: want }]);
      assertAbsent(rr, [SAMPLES.EMAIL, SAMPLES.PHONE]);

      // a file written through the tool is read back the same way
      ok(await call(s, "write_workspace_file", { path: "w.txt", content: RAW }));
      assert.equal(ok(await call(s, "read_workspace_file", { path: "w.txt" })).content, want);
    });
  });

  it("--pii-policy 0: workspace reads return the values", T, async () => {
    await withServer({ args: ["--pii-policy", "0"] }, async (s) => {
      await runOk(s, `write_file('c.txt', [[${RAW}]])`);
      assert.equal(ok(await call(s, "read_workspace_file", { path: "c.txt" })).content, RAW);
      assert.equal(Buffer.from(ok(await call(s, "read_workspace_file", { path: "c.txt", encoding: "base64" })).content,
        "base64").toString("utf8"), RAW);
      const rr = await s.client.readResource({ uri: "moonbox://workspace/c.txt" });
      assert.equal(rr.contents[0].text, RAW);
    });
  });
});

describe("published skills", () => {
  const skills = {
    "leaky.lua": "--- Leaks.\n-- @tool\nreturn function()\n  print('looking up " + SAMPLES.EMAIL + "')\n" +
      "  return { who = '" + SAMPLES.EMAIL + "', note = 'call " + SAMPLES.PHONE + "' }\nend\n",
    "failing.lua": "--- Fails.\n-- @param x string\n-- @tool\nreturn function(a)\n" +
      "  print('about to fail for ' .. a.x)\n  error('bad input: ' .. a.x)\nend\n",
  };

  it("a skill tool's result, output and error carry tokens, not values", T, async () => {
    await withServer({ skills }, async (s) => {
      const tE = await tokenOf(s, SAMPLES.EMAIL);
      const tP = await tokenOf(s, SAMPLES.PHONE);
      let res = await call(s, "leaky", {});
      assert.notEqual(res.isError, true, JSON.stringify(res));
      assert.deepEqual(res.structuredContent, { who: tE, note: `call ${tP}` });
      assertAbsent(res, [SAMPLES.EMAIL, SAMPLES.PHONE]);

      res = await call(s, "failing", { x: BOB });
      const text = errText(res);
      const tB = await tokenOf(s, BOB);
      assert.ok(text.includes(`bad input: ${tB}`), text);
      assert.ok(text.includes(`about to fail for ${tB}`), text);
      assertAbsent(res, [BOB]);

      // and through execute_code
      const r = await exec(s, "return skills.leaky()");
      assert.deepEqual(r.structuredContent.result, { who: tE, note: `call ${tP}` });
      assertAbsent(r, [SAMPLES.EMAIL, SAMPLES.PHONE]);
    });
  });
});

describe("configuration", () => {
  it("--pii-disabled-types EMAIL leaves e-mail addresses alone, other types still tokenized", T, async () => {
    await withServer({ args: ["--pii-disabled-types", "EMAIL"] }, async (s) => {
      const tP = await tokenOf(s, SAMPLES.PHONE);
      const sc = await sanitize(s, `${SAMPLES.EMAIL} ${SAMPLES.PHONE}`);
      assert.equal(sc.sanitized_text, `${SAMPLES.EMAIL} ${tP}`);
      assert.deepEqual(sc.counts, { PHONE: 1 });
      assert.deepEqual(await runOk(s, `return { '${SAMPLES.EMAIL}', '${SAMPLES.PHONE}' }`), [SAMPLES.EMAIL, tP]);
      assert.deepEqual(await runOk(s, `return pii.scan('${SAMPLES.EMAIL}')`), []);
    });
  });

  it("MOONBOX_PII_DISABLED_TYPES in the environment works the same way", T, async () => {
    await withServer({ env: { MOONBOX_PII_DISABLED_TYPES: "email, phone" } }, async (s) => {
      const sc = await sanitize(s, `${SAMPLES.EMAIL} ${SAMPLES.PHONE} ${SAMPLES.SSN}`);
      assert.deepEqual(sc.counts, { SSN: 1 });
      assert.ok(sc.sanitized_text.startsWith(`${SAMPLES.EMAIL} ${SAMPLES.PHONE} [SSN_`), sc.sanitized_text);
    });
  });

  it("an unknown type in pii_disabled_types: the server refuses to start, naming the option", T, async () => {
    const r = startOnce(["--pii-disabled-types", "EMAIL,FOO"]);
    assert.notEqual(r.status, 0);
    assert.ok(r.stderr.includes(`pii_disabled_types: unknown type "FOO" (known: ${KNOWN_TYPES})`), r.stderr);
  });

  it("--pii-custom-patterns adds a type: tokens, counts, types filter, scan and restore", T, async () => {
    const patterns = JSON.stringify({ EMPLOYEE_ID: "EMP-[0-9]{6}", customer: "cust=(C[0-9]{4})" });
    await withServer({ args: ["--pii-custom-patterns", patterns] }, async (s) => {
      const sc = await sanitize(s, `badge EMP-123456, not EMP-12345; cust=C1234 and ${SAMPLES.EMAIL}`);
      const [emp, cust, email] = sc.pii_found;
      assert.match(emp.token, tokenRe("EMPLOYEE_ID"));
      assert.match(cust.token, tokenRe("CUSTOMER"));
      assert.equal(email.type, "EMAIL");
      // the capture group is the value: the "cust=" prefix stays
      assert.equal(sc.sanitized_text, `badge ${emp.token}, not EMP-12345; cust=${cust.token} and ${email.token}`);
      assert.deepEqual(sc.counts, { EMPLOYEE_ID: 1, CUSTOMER: 1, EMAIL: 1 });
      assert.equal((await sanitize(s, "EMP-123456 ann@example.com", ["employee_id"])).sanitized_text,
        `${emp.token} ann@example.com`);
      assert.equal(errText(await call(s, "sanitize_pii", { text: "x", types: ["BOGUS"] })),
        `pii: unknown type 'BOGUS' (known: ${KNOWN_TYPES}, EMPLOYEE_ID, CUSTOMER)`);
      const res = await exec(s, "return { 'EMP-123456', pii.scan('id EMP-654321') }");
      assert.deepEqual(res.structuredContent.result, [emp.token, [{ type: "EMPLOYEE_ID", start: 4, stop: 13 }]]);
      assertAbsent(res, ["EMP-123456"]);
      assert.equal((await restore(s, `${emp.token} ${cust.token}`)).restored_text, "EMP-123456 C1234");
    });
  });

  it("a bad custom pattern: refused at start naming pii_custom_patterns and the pattern", T, async () => {
    let r = startOnce(["--pii-custom-patterns", '{"EMPLOYEE_ID":"EMP-([0-9]{6}"}']);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /pii_custom_patterns: .*custom pattern EMPLOYEE_ID \(#1\): missing closing parenthesis at offset 13/);
    r = startOnce(["--pii-custom-patterns", '{"9x":"a"}']);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /pii_custom_patterns: .*invalid name "9x"/);
    r = startOnce(["--pii-custom-patterns", '["EMP-[0-9]{6}"]']);
    assert.notEqual(r.status, 0);
    assert.ok(r.stderr.includes('pii_custom_patterns must be a JSON object {"NAME": "pattern"}'), r.stderr);
    r = startOnce(["--pii-custom-patterns", '{"A":']);
    assert.notEqual(r.status, 0);
    assert.ok(r.stderr.includes("pii_custom_patterns must be a JSON object"), r.stderr);
  });

  it("custom patterns as a JSON object (or a string) in DATA_DIR/config.json", T, async () => {
    for (const value of [{ EMPLOYEE_ID: "EMP-[0-9]{6}" }, JSON.stringify({ EMPLOYEE_ID: "EMP-[0-9]{6}" })]) {
      await withDataDir(async (dir) => {
        writeFileSync(path.join(dir, "config.json"), JSON.stringify({ pii_custom_patterns: value, pii_disabled_types: "IPV4" }));
        await withServer({ dataDir: dir }, async (s) => {
          const sc = await sanitize(s, `EMP-123456 ${SAMPLES.IPV4}`);
          assert.match(sc.sanitized_text, /^\[EMPLOYEE_ID_[0-9a-f]{8}\] 192\.168\.1\.20$/);
          assert.deepEqual(sc.counts, { EMPLOYEE_ID: 1 });
        });
      });
    }
    await withDataDir(async (dir) => {
      writeFileSync(path.join(dir, "config.json"), JSON.stringify({ pii_custom_patterns: { EMPLOYEE_ID: 5 } }));
      const r = startOnce([], dir);
      assert.notEqual(r.status, 0);
      assert.ok(r.stderr.includes("pii_custom_patterns: the pattern of EMPLOYEE_ID must be a string"), r.stderr);
    });
  });

  it("pii_policy and pii_restore accept only 0 and 1", T, async () => {
    for (const [flag, name] of [["--pii-policy", "pii_policy"], ["--pii-restore", "pii_restore"]]) {
      const r = startOnce([flag, "2"]);
      assert.notEqual(r.status, 0);
      assert.ok(r.stderr.includes(`${name}=2 is out of range [0, 1]`), r.stderr);
    }
  });
});
