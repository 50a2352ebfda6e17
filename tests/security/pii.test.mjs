// Attacks on the PII policy and vault: texts too large to scan, output that is cut before it is
// scanned, channels toward the client that the policy might miss (notifications, numbers,
// binary files, file names), proxies and deep tables, another tenant's vault rows, floods of
// detokenize_pii host calls, a key file others can read, and tokens that look like other types.
// Each test starts its own server on a fresh temporary data directory.
// Run: cd tests && MOONBOX=../build/moonbox node --test security/pii.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import {
  MOONBOX, RawPeer, connectClient, execute, requireBinary, sqlite3Cli, useServer,
  withDataDir,
} from "../lib/moonbox.mjs";

const T = { timeout: 60000 };
const EMAIL = "ann.person@example.com";
const CARD = "4111 1111 1111 1111";
const LIMIT = 4096; // --regex-max-subject-bytes for the size tests

// ---------------------------------------------------------------------------------------------

async function withClient(args, fn) {
  return useServer(await connectClient({ args }), fn);
}

const call = (s, name, args) => s.client.callTool({ name, arguments: args });

async function exec(s, code, extra = {}) {
  const res = await execute(s.client, { code, ...extra });
  assert.equal(typeof res.structuredContent, "object", JSON.stringify(res).slice(0, 500));
  return res;
}

async function tokenOf(s, value) {
  const res = await call(s, "sanitize_pii", { text: value });
  assert.notEqual(res.isError, true, JSON.stringify(res));
  assert.equal(res.structuredContent.total, 1, JSON.stringify(res));
  return res.structuredContent.sanitized_text;
}

/** Asserts that none of values occurs anywhere in what (JSON-serialized unless a string). */
function assertAbsent(what, values, label = "response") {
  const text = typeof what === "string" ? what : JSON.stringify(what);
  for (const v of values) {
    const at = text.indexOf(v);
    assert.ok(at < 0, `${label} leaks ${JSON.stringify(v)}: ...${text.slice(Math.max(0, at - 200), at + 200)}...`);
  }
}

/** Runs the binary with stdin closed; for start-up checks. */
function startOnce(dataDir, args = []) {
  requireBinary();
  const r = spawnSync(MOONBOX, ["--data-dir", dataDir, ...args], { input: "", encoding: "utf8", timeout: 10000 });
  return { status: r.status, stderr: r.stderr };
}

// ---------------------------------------------------------------------------------------------

describe("texts above regex_max_subject_bytes", () => {
  const args = ["--regex-max-subject-bytes", String(LIMIT)];

  it("tokenize_pii, pii.scan and sanitize_pii refuse them with an error naming the limit", T, async () => {
    await withClient(args, async (s) => {
      for (const [fn, name] of [["tokenize_pii", "tokenize_pii"], ["pii.scan", "pii.scan"]]) {
        const res = await exec(s, `return ${fn}('${EMAIL} ' .. string.rep('a', 5000))`);
        const sc = res.structuredContent;
        assert.equal(sc.success, false);
        assert.equal(sc.error_type, "runtime");
        assert.equal(sc.error, `code:1: ${name}: text of ${EMAIL.length + 5001} bytes is longer than regex_max_subject_bytes=${LIMIT}`);
        assertAbsent(res, [EMAIL]);
      }
      // exactly at the limit is scanned
      const pad = LIMIT - EMAIL.length - 1;
      const ok = await exec(s, `local t = tokenize_pii('${EMAIL} ' .. string.rep('a', ${pad})) return #t < ${LIMIT}, #pii.scan('${EMAIL} ' .. string.rep('a', ${pad}))`);
      assert.deepEqual(ok.structuredContent.result, [true, 1]);
      const res = await call(s, "sanitize_pii", { text: `${EMAIL} ${"a".repeat(5000)}` });
      assert.equal(res.isError, true);
      assert.equal(res.content[0].text,
        `invalid arguments: text is ${EMAIL.length + 5001} bytes, above regex_max_subject_bytes=${LIMIT}`);
      assertAbsent(res, [EMAIL]);
    });
  });

  it("at the default limit (4 MiB) a 5 MiB text is refused by name too", T, async () => {
    await withClient([], async (s) => {
      const res = await exec(s, "return tokenize_pii(string.rep('a', 5 * 1024 * 1024))");
      assert.equal(res.structuredContent.error,
        "code:1: tokenize_pii: text of 5242880 bytes is longer than regex_max_subject_bytes=4194304");
    });
  });

  it("a result string longer than the scan window is tokenized in pieces, never leaked", T, async () => {
    await withClient(args, async (s) => {
      // a space every 100 bytes: pieces are cut at a space near regex_max_subject_bytes
      const big = `'${EMAIL} ' .. string.rep(string.rep('a', 99) .. ' ', 50) .. '${EMAIL}'`;
      for (const code of [`return ${big}`, `return { x = ${big} }`, `return { [${big}] = 1 }`,
        `return { { { ${big} } } }`]) {
        const res = await exec(s, code);
        const sc = res.structuredContent;
        assert.equal(sc.success, true, code);
        const text = JSON.stringify(sc.result);
        assert.equal((text.match(/\[EMAIL_[0-9a-f]{8}\]/g) || []).length, 2, code);
        assertAbsent(res, [EMAIL]);
      }
    });
  });

  it("without line ends or spaces, a piece is cut after punctuation, not through an address", T, async () => {
    await withClient(args, async (s) => {
      // a blind cut at regex_max_subject_bytes would fall inside the address after the comma
      const res = await exec(s, `return string.rep('a', ${LIMIT} - 6) .. ',${EMAIL},' .. string.rep('b', 2000)`);
      const sc = res.structuredContent;
      assert.equal(sc.success, true);
      // the whole address became one token: no fragment of it is left before or after
      assert.match(sc.result, /^a+,\[EMAIL_[0-9a-f]{8}\],b+$/);
      assertAbsent(res, [EMAIL]);
    });
  });

  it("output and error text longer than the scan window are tokenized in pieces, never leaked", T, async () => {
    await withClient(args, async (s) => {
      const long = `'${EMAIL} ' .. string.rep(string.rep('a', 99) .. ' ', 50) .. '${EMAIL}'`;
      let res = await exec(s, `print(${long}) return 1`);
      let sc = res.structuredContent;
      assert.equal(sc.success, true);
      assert.equal((sc.output.match(/\[EMAIL_[0-9a-f]{8}\]/g) || []).length, 2);
      assertAbsent(res, [EMAIL]);

      res = await exec(s, `error(${long})`);
      sc = res.structuredContent;
      assert.equal(sc.success, false);
      assert.match(sc.error, /^code:1: \[EMAIL_[0-9a-f]{8}\] a{99} /);
      assertAbsent(res, [EMAIL]);
    });
  });
});

describe("text cut to a size limit is scanned after the cut (no fragments of values)", () => {
  it("print output cut by max_output_bytes does not leave part of an address", T, async () => {
    await withClient(["--max-output-bytes", "256"], async (s) => {
      // the head keeps 128 bytes: the cut falls inside the address
      const res = await exec(s, `print(string.rep('x', 110) .. ' ${EMAIL} ' .. string.rep('y', 1000))`);
      assert.match(res.structuredContent.output, /omitted: max_output_bytes=256/);
      assertAbsent(res, ["ann.person@", "4111 1111"], "the output head");
      const res2 = await exec(s, `print(string.rep('x', 110) .. ' ${CARD} ' .. string.rep('y', 1000))`);
      assertAbsent(res2, ["4111 1111 1111"], "the output head");
    });
  });

  it("an error object cut to its message size does not leave part of an address", T, async () => {
    await withClient([], async (s) => {
      const res = await exec(s, `error({ string.rep('x', 220) .. ' ${EMAIL}' })`);
      assert.match(res.structuredContent.error, /^error object: /);
      assertAbsent(res, ["ann.person@"], "the error object");
    });
  });

  it("an error message cut at 65536 bytes does not leave part of an address", T, async () => {
    await withClient([], async (s) => {
      // choose the padding so that the kept part ends inside an address
      const unit = `${EMAIL} `;
      const count = 4000;
      let found = null;
      for (let pad = 0; pad < unit.length && !found; pad++) {
        const n = "code:1: ".length + pad + unit.length * count;
        const tail = `... [error message truncated: ${n} bytes, at most 65536 kept]`;
        const keep = 65536 - tail.length;
        const inUnit = (keep - "code:1: ".length - pad) % unit.length;
        if (inUnit >= "ann.person@e".length && inUnit < EMAIL.length - 2) found = pad;
      }
      assert.notEqual(found, null);
      const res = await exec(s, `error(string.rep('x', ${found}) .. string.rep('${unit}', ${count}))`);
      assert.match(res.structuredContent.error, /error message truncated/);
      assertAbsent(res, ["ann.person@"], "the cut error message");
    });
  });
});

describe("channels toward the client besides the result", () => {
  it("mcp.log and mcp.progress notifications carry tokens, not values", T, async () => {
    const p = new RawPeer();
    try {
      await p.initialize();
      const lv = await p.request("lv", "logging/setLevel", { level: "debug" });
      assert.ok(lv.result, JSON.stringify(lv));
      const from = p.mark();
      const res = await p.request("x", "tools/call", {
        name: "execute_code",
        _meta: { progressToken: "tok-1" },
        arguments: {
          code: `mcp.log('info', 'log ${EMAIL}') mcp.log('warning', { who = '${EMAIL}' })
                 mcp.progress(1, 2, 'working on ${EMAIL}') return 1`,
        },
      });
      assert.equal(res.result.structuredContent.success, true, JSON.stringify(res));
      await sleep(100);
      const notes = p.notifications(from);
      assert.equal(notes.filter((n) => n.method === "notifications/message").length, 2, JSON.stringify(notes));
      assert.equal(notes.filter((n) => n.method === "notifications/progress").length, 1, JSON.stringify(notes));
      for (const l of p.lines.slice(from)) assertAbsent(l.raw, [EMAIL], "a stdout line");
    } finally {
      await p.dispose();
    }
  });

  it("numbers that are card numbers, SSNs or phone numbers are not sent as numbers", T, async () => {
    await withClient([], async (s) => {
      const res = await exec(s, "return { card = 4111111111111111, list = { 4012888888881881 } }");
      assert.equal(res.structuredContent.success, true);
      assertAbsent(res, ["4111111111111111", "4012888888881881"], "a numeric result");
    });
  });

  it("a workspace file that is not UTF-8 does not bypass the policy (base64, resources/read)", T, async () => {
    await withClient([], async (s) => {
      // Latin-1 CSV: one byte that is not UTF-8 turns the whole file into "binary"
      const w = await exec(s, `write_file('people.csv', 'name,email\\nM\\252ller,${EMAIL}\\n') return 1`);
      assert.equal(w.structuredContent.success, true);
      const res = await call(s, "read_workspace_file", { path: "people.csv", encoding: "base64" });
      assert.notEqual(res.isError, true, JSON.stringify(res));
      assertAbsent(Buffer.from(res.structuredContent.content, "base64").toString("latin1"), [EMAIL], "the decoded base64 content");
      const rr = await s.client.readResource({ uri: "moonbox://workspace/people.csv" });
      const c = rr.contents[0];
      assertAbsent(c.text ?? Buffer.from(c.blob, "base64").toString("latin1"), [EMAIL], "the resource");
    });
  });

  it("workspace file names made by code are tokenized in listings, and the listed names work", T, async () => {
    await withClient([], async (s) => {
      const w = await exec(s, `write_file('customers/${EMAIL}/report.txt', 'report of ${EMAIL}')
        write_file('customers/${EMAIL}/notes.txt', 'n') return list_files()`);
      assert.equal(w.structuredContent.success, true, JSON.stringify(w));
      assertAbsent(w, [EMAIL], "list_files() returned by the execution");
      const t = await tokenOf(s, EMAIL);
      const shown = `customers/${t}/report.txt`;

      const l = await call(s, "list_workspace_files", {});
      assertAbsent(l, [EMAIL], "list_workspace_files");
      assert.deepEqual(l.structuredContent.files.map((f) => f.path).sort(), [`customers/${t}/notes.txt`, shown]);
      const ld = await call(s, "list_workspace_files", { dir: `customers/${t}` });
      assertAbsent(ld, [EMAIL], "list_workspace_files of a tokenized dir");
      assert.equal(ld.structuredContent.count, 2, JSON.stringify(ld));

      const rl = await s.client.listResources();
      assertAbsent(rl, [EMAIL], "resources/list");
      const r = rl.resources.find((x) => x.name === shown);
      assert.ok(r, JSON.stringify(rl.resources));
      assert.equal(r.uri, `moonbox://workspace/customers/${encodeURIComponent(t)}/report.txt`);
      assertAbsent(await s.client.listResourceTemplates(), [EMAIL], "resources/templates/list");

      // the listed names are usable: the tools and resources/read restore the caller's tokens
      const rd = await call(s, "read_workspace_file", { path: shown });
      assert.notEqual(rd.isError, true, JSON.stringify(rd));
      assert.deepEqual(rd.structuredContent, { path: shown, encoding: "utf8", bytes: `report of ${t}`.length, content: `report of ${t}` });
      const rr = await s.client.readResource({ uri: r.uri });
      assert.deepEqual(rr.contents, [{ uri: r.uri, mimeType: "text/plain", text: `report of ${t}` }]);
      assertAbsent([rd, rr], [EMAIL], "reads by the listed name");
      // a write under the listed directory lands beside the others, under the real name
      const wr = await call(s, "write_workspace_file", { path: `customers/${t}/more.txt`, content: "m" });
      assert.deepEqual(wr.structuredContent, { path: `customers/${t}/more.txt`, bytes: 1 });
      assert.equal(await exec(s, `return read_file('customers/${EMAIL}/more.txt')`).then((x) => x.structuredContent.result), "m");
      const del = await call(s, "delete_workspace_file", { path: `customers/${t}/notes.txt` });
      assert.deepEqual(del.structuredContent, { path: `customers/${t}/notes.txt`, deleted: true });
      // errors name the path as the client sees it
      const missing = await call(s, "read_workspace_file", { path: `customers/${t}/notes.txt` });
      assert.equal(missing.isError, true);
      assertAbsent(missing, [EMAIL], "the error of a read by a listed name");
      assert.match(JSON.stringify(missing), new RegExp(t.replace(/[[\]]/g, "\\$&")));
      assert.deepEqual((await call(s, "list_workspace_files", {})).structuredContent.files.map((f) => f.path).sort(),
        [`customers/${t}/more.txt`, shown]);
    });
  });

  it("--pii-restore 0: a listed name still reads; a write names no new file after a value", T, async () => {
    await withClient(["--pii-restore", "0"], async (s) => {
      await exec(s, `write_file('c/${EMAIL}.txt', 'x') return 1`);
      const t = await tokenOf(s, EMAIL);
      // reading what exists works (nothing is revealed: the listing already shows the token)
      const rd = await call(s, "read_workspace_file", { path: `c/${t}.txt` });
      assert.equal(rd.structuredContent.content, "x", JSON.stringify(rd));
      // a new file is named as given: the server does not turn a token into a name code can list
      await call(s, "write_workspace_file", { path: `d/${t}.txt`, content: "y" });
      const names = await exec(s, `local out = {} for _, f in ipairs(list_files('d')) do out[#out + 1] = f.path end return out`);
      assert.deepEqual(names.structuredContent.result, [`d/${t}.txt`]);
    });
  });

  it("a value detokenized by code and written to the workspace is read back as its token", T, async () => {
    await withClient([], async (s) => {
      const t = await tokenOf(s, EMAIL);
      const w = await exec(s, `write_file('x.txt', detokenize_pii('${t}')) return read_file('x.txt') == '${EMAIL}'`);
      assert.equal(w.structuredContent.result, true);
      const res = await call(s, "read_workspace_file", { path: "x.txt" });
      assert.equal(res.structuredContent.content, t);
    });
  });
});

describe("tables that try to hide values from the walk", () => {
  it("metamethods (__pairs, __index, __tostring) neither hide nor produce values", T, async () => {
    await withClient([], async (s) => {
      let res = await exec(s, `
        local hidden = { who = '${EMAIL}' }
        return setmetatable({}, {
          __index = hidden,
          __pairs = function(t) return next, hidden, nil end,
          __tostring = function() return '${EMAIL}' end,
        })`);
      assert.equal(res.structuredContent.success, true);
      assert.deepEqual(res.structuredContent.result, {});
      assertAbsent(res, [EMAIL]);
      // a real entry under a metatable is still tokenized
      res = await exec(s, `return setmetatable({ who = '${EMAIL}' }, { __newindex = function() end, __metatable = false })`);
      assert.match(res.structuredContent.result.who, /^\[EMAIL_[0-9a-f]{8}\]$/);
      // an error object with __tostring is described without calling it
      res = await exec(s, `error(setmetatable({}, { __tostring = function() return '${EMAIL}' end }))`);
      assert.equal(res.structuredContent.success, false);
      assertAbsent(res, [EMAIL]);
    });
  });

  it("cycles, shared tables and tables deeper than json_max_depth leak nothing", T, async () => {
    await withClient([], async (s) => {
      let res = await exec(s, `local t = { '${EMAIL}' } for i = 1, 200 do t = { t } end return t`);
      assert.equal(res.structuredContent.success, false);
      assert.match(res.structuredContent.error, /json_max_depth=128/);
      assertAbsent(res, [EMAIL]);
      res = await exec(s, `local t = { e = '${EMAIL}' } t.self = t return t`);
      assert.equal(res.structuredContent.success, false);
      assertAbsent(res, [EMAIL]);
      res = await exec(s, `local inner = { e = '${EMAIL}' } return { a = inner, b = inner, c = { inner } }`);
      const r = res.structuredContent.result;
      assert.match(r.a.e, /^\[EMAIL_[0-9a-f]{8}\]$/);
      assert.deepEqual(r, { a: r.a, b: r.a, c: [r.a] });
      assertAbsent(res, [EMAIL]);
    });
  });
});

describe("the vault across tenants and data dirs", () => {
  it("rows of another tenant never restore; unknown tokens come back unchanged", T, async () => {
    await withDataDir(async (dir) => {
      // a first start creates the schema and the key
      const first = startOnce(dir);
      assert.equal(first.status, 0, first.stderr);
      const db = path.join(dir, "moonbox.db");
      const ins = sqlite3Cli(db, "INSERT INTO pii_vault (tenant, token, type, value, first_seen, last_seen) " +
        "VALUES ('other', '[EMAIL_deadbeef]', 'EMAIL', 'victim@x.org', 1, 1)");
      assert.equal(ins.status, 0, ins.stderr);
      const p = new RawPeer({ dataDir: dir });
      try {
        await p.initialize();
        const r = await p.request(1, "tools/call", { name: "restore_pii", arguments: { text: "[EMAIL_deadbeef]" } });
        assert.deepEqual(r.result.structuredContent, { restored_text: "[EMAIL_deadbeef]", unresolved: ["[EMAIL_deadbeef]"] });
        const e = await p.request(2, "tools/call", {
          name: "execute_code",
          arguments: { code: "return { detokenize_pii('[EMAIL_deadbeef] [PHONE_0123abcd]') }" },
        });
        assert.deepEqual(e.result.structuredContent.result, ["[EMAIL_deadbeef] [PHONE_0123abcd]"]);
        for (const l of p.lines) assertAbsent(l.raw, ["victim@x.org"], "a stdout line");
      } finally {
        await p.dispose();
      }
    });
  });
});

describe("detokenize_pii host calls", () => {
  it("a flood of detokenize_pii calls stops at max_host_calls with an error naming it", T, async () => {
    await withClient(["--max-host-calls", "50"], async (s) => {
      let sc = (await exec(s, "for i = 1, 1000000 do detokenize_pii('[EMAIL_00000000]') end")).structuredContent;
      assert.equal(sc.success, false);
      assert.equal(sc.error_type, "runtime");
      assert.match(sc.error, /too many calls to the server in one execution \(max_host_calls=50\)/);
      // pcall cannot swallow the limit and go on calling
      sc = (await exec(s, "local n = 0 for i = 1, 200 do if pcall(detokenize_pii, '[EMAIL_00000000]') then n = n + 1 end end return n")).structuredContent;
      assert.equal(sc.result, 50);
    });
  });

  it("tokens minted in the same execution and texts without tokens need no host call", T, async () => {
    await withClient(["--max-host-calls", "0"], async (s) => {
      const sc = (await exec(s, `
        local t = tokenize_pii('${EMAIL}')
        local ok = 0
        for i = 1, 1000 do if detokenize_pii(t) == '${EMAIL}' and detokenize_pii('plain') == 'plain' then ok = ok + 1 end end
        return ok`)).structuredContent;
      assert.equal(sc.success, true, sc.error);
      assert.equal(sc.result, 1000);
    });
  });
});

describe("the key file", () => {
  async function withKey(fn) {
    await withDataDir(async (dir) => {
      const r = startOnce(dir);
      assert.equal(r.status, 0, r.stderr);
      await fn(dir, path.join(dir, "pii.key"));
    });
  }

  for (const mode of [0o644, 0o640, 0o604, 0o660]) {
    it(`mode 0${mode.toString(8)} is refused at start with a message naming the file`, T, async () => {
      await withKey(async (dir, key) => {
        chmodSync(key, mode);
        const r = startOnce(dir);
        assert.notEqual(r.status, 0);
        assert.ok(r.stderr.includes(`key file ${key} has mode 0${mode.toString(8)}; it must not be accessible by group or others (chmod 600 ${key})`), r.stderr);
        chmodSync(key, 0o600);
        assert.equal(startOnce(dir).status, 0);
      });
    });
  }

  it("a short key, a symlink and a directory are refused naming the file; the key is not replaced", T, async () => {
    await withKey(async (dir, key) => {
      const bytes = readFileSync(key);
      writeFileSync(key, bytes.subarray(0, 16), { mode: 0o600 });
      let r = startOnce(dir);
      assert.notEqual(r.status, 0);
      assert.ok(r.stderr.includes(`key file ${key} is 16 bytes; it must be exactly 32`), r.stderr);
      assert.equal(readFileSync(key).length, 16, "a bad key is left for the operator, not overwritten");

      rmSync(key);
      const elsewhere = path.join(dir, "elsewhere.key");
      writeFileSync(elsewhere, bytes, { mode: 0o600 });
      symlinkSync(elsewhere, key);
      r = startOnce(dir);
      assert.notEqual(r.status, 0);
      assert.ok(r.stderr.includes(`key file ${key} is a symbolic link; it must be a regular file`), r.stderr);

      rmSync(key);
      mkdirSync(key);
      r = startOnce(dir);
      assert.notEqual(r.status, 0);
      assert.ok(r.stderr.includes(`key file ${key} is not a regular file`), r.stderr);
    });
  });
});

describe("tokens are never re-tokenized", () => {
  // tokens whose hex digits look like a card, a phone number, an SSN, an IPv6 address; tokens
  // next to key=value forms and inside addresses
  const LOOKALIKES = [
    "[CARD_4111111111111111]", "[PHONE_4155550132]", "[SSN_123456789]", "[IPV6_20010db800000001]",
    "[EMAIL_4111111111111111]", "[X_4012888888881881]", "password=[EMAIL_539c25d6]",
    "api_key: [SECRET_0123abcd]", "token=[SECRET_05d1d95a]", "[EMAIL_539c25d6]@example.com",
    "x[EMAIL_539c25d6]@example.com", "ann@[IPV4_0afa3884]", "[IBAN_de8937040044]",
  ];

  it("sanitize_pii, pii.scan, tokenize_pii and the policy leave them as they are", T, async () => {
    await withClient([], async (s) => {
      for (const t of LOOKALIKES) {
        const res = await call(s, "sanitize_pii", { text: t });
        assert.equal(res.structuredContent.sanitized_text, t, `sanitize_pii(${t})`);
        assert.equal(res.structuredContent.total, 0, t);
      }
      const res = await exec(s, `
        local out = {}
        for i, t in ipairs(texts) do
          local s, m = tokenize_pii(t)
          out[i] = { s == t, #pii.scan(t), next(m) == nil }
        end
        return { out = out, same = texts }`, { context_vars: { texts: LOOKALIKES } });
      assert.deepEqual(res.structuredContent.result.out, LOOKALIKES.map(() => [true, 0, true]));
      assert.deepEqual(res.structuredContent.result.same, LOOKALIKES);
    });
  });
});
