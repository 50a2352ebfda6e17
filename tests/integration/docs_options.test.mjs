// docs/configuration.md against the option table of the binary (`moonbox --print-options`, the
// same table that makes --help and the man page): every option is documented, nothing
// documented is gone, and each integer option's default and range are the binary's.
// Run: cd tests && node --test integration/docs_options.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";

import { MOONBOX, TESTS_DIR, requireBinary } from "../lib/moonbox.mjs";

const T = { timeout: 10000 };

/** The binary's options: name -> { flag, env, type, def, min, max }. */
function binaryOptions() {
  requireBinary();
  const r = spawnSync(MOONBOX, ["--print-options"], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const out = new Map();
  for (const line of r.stdout.split("\n").filter(Boolean)) {
    const [name, flag, env, type, def, min, max] = line.split("\t");
    out.set(name, { flag, env, type, def, min, max });
  }
  return out;
}

/** Reads a number as the docs write it: 5000, 2^30, 10^6, 2^62-1, "0 (= CPUs)". */
function docNumber(text) {
  const m = /^(\d+)(?:\^(\d+))?(?:\s*-\s*(\d+))?/.exec(text.trim());
  if (!m) return undefined;
  let v = BigInt(m[1]);
  if (m[2] !== undefined) v **= BigInt(m[2]);
  if (m[3] !== undefined) v -= BigInt(m[3]);
  return v;
}

/** The rows of the "## Options" table: name -> { def, range } (cells as written). */
function documentedOptions() {
  const md = readFileSync(path.join(TESTS_DIR, "../docs/configuration.md"), "utf8");
  const section = md.split(/^## Options$/m)[1]?.split(/^## /m)[0];
  assert.ok(section, "docs/configuration.md has an ## Options section");
  const out = new Map();
  for (const line of section.split("\n")) {
    const m = /^\| `([a-z0-9_]+)`[^|]*\|([^|]*)\|([^|]*)\|/.exec(line);
    if (!m) continue;
    assert.ok(!out.has(m[1]), `docs/configuration.md lists ${m[1]} twice`);
    out.set(m[1], { def: m[2].trim(), range: m[3].trim() });
  }
  return out;
}

describe("docs/configuration.md matches the option table", () => {
  it("the same options", T, () => {
    const bin = [...binaryOptions().keys()].sort();
    const doc = [...documentedOptions().keys()].sort();
    assert.deepEqual(doc.filter((n) => !bin.includes(n)), [], "documented but not an option of the binary");
    assert.deepEqual(bin.filter((n) => !doc.includes(n)), [], "options of the binary missing from the docs");
  });

  it("the same defaults and ranges for integer options", T, () => {
    const doc = documentedOptions();
    const wrong = [];
    for (const [name, o] of binaryOptions()) {
      if (o.type !== "int" || !doc.has(name)) continue;
      const d = doc.get(name);
      const def = docNumber(d.def);
      if (def !== BigInt(o.def)) wrong.push(`${name}: default documented "${d.def}", binary ${o.def}`);
      const [lo, hi] = d.range.split(/\s+-\s+/);
      if (docNumber(lo ?? "") !== BigInt(o.min) || docNumber(hi ?? "") !== BigInt(o.max))
        wrong.push(`${name}: range documented "${d.range}", binary ${o.min} - ${o.max}`);
    }
    assert.deepEqual(wrong, []);
  });

  it("the flag and the variable follow from the name", T, () => {
    for (const [name, o] of binaryOptions()) {
      const flag = name === "config_file" ? "--config" : `--${name.replaceAll("_", "-")}`;
      const env = name === "config_file" ? "MOONBOX_CONFIG" : `MOONBOX_${name.toUpperCase()}`;
      assert.equal(o.flag, flag, name);
      assert.equal(o.env, env, name);
    }
  });
});
