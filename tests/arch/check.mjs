// tests/arch/check.mjs - the structure rules of src/ that a reviewer would otherwise have to
// catch (make test-arch, part of make test; docs/architecture.md, "Dependencies"):
//
//  1. A private header (src/<module>_int.h) is included only by that module's own files
//     (src/<module>*.c and .h). Tests may include internals; src/ may not.
//  2. No cycles between the C files. File A depends on file B when A calls a function defined
//     in B (from the object files' symbols, nm: what each defines and what it uses) or when A
//     includes B's header src/B.h, directly or through other headers: a header brings types and
//     static inline functions that leave no symbol behind (worker_pool.c took mb_pool_admit, an
//     inline function, and the types mb_pool_stats and mb_job_callbacks from pool.h while pool.c
//     called worker_pool.c: a cycle nm alone could not see). Any strongly connected group of two
//     or more files is reported with the calls and includes that close it. The files of one
//     family (sandbox*, http*, worker*: the name up to its first "_") share their public headers,
//     so between them only calls count.
//
// Usage: node tests/arch/check.mjs BUILD/obj   (exit 1 with the problems listed)

import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";

const objDir = process.argv[2];
if (!objDir) {
  console.error("usage: check.mjs BUILD/obj");
  process.exit(2);
}
const SRC = path.join(path.dirname(new URL(import.meta.url).pathname), "../../src");
const problems = [];

// ---- 1. private headers
const files = readdirSync(SRC).filter((f) => /\.[ch]$/.test(f));
const privates = files.filter((f) => f.endsWith("_int.h")).map((h) => ({ h, module: h.slice(0, -"_int.h".length) }));
for (const f of files) {
  const text = readFileSync(path.join(SRC, f), "utf8");
  for (const m of text.matchAll(/^#\s*include\s+"([^"]+)"/gm)) {
    const p = privates.find((x) => x.h === m[1]);
    if (p && !f.startsWith(p.module)) problems.push(`src/${f} includes ${p.h}, private to src/${p.module}*`);
  }
}

// ---- 2. cycles between files, from the symbols of the objects
const defs = new Map();
const uses = new Map();
for (const o of readdirSync(objDir).filter((f) => f.endsWith(".o"))) {
  const file = o.slice(0, -2);
  if (file === "main" || file === "embedded_lua") continue; // the program's top; generated data
  const out = execFileSync("nm", [path.join(objDir, o)], { encoding: "utf8" });
  const used = new Set();
  for (const line of out.split("\n")) {
    const m = line.match(/^\s*[0-9a-f]*\s+([A-Za-z])\s+(\S+)$/);
    if (!m) continue;
    if ("TDRBC".includes(m[1])) defs.set(m[2], file);
    else if (m[1] === "U") used.add(m[2]);
  }
  uses.set(file, used);
}
if (uses.size < 10) problems.push(`only ${uses.size} object files in ${objDir}: build first`);
// what each file includes of src/, and through those headers, transitively
const includes = new Map();
for (const f of files) {
  const text = readFileSync(path.join(SRC, f), "utf8");
  includes.set(f, [...text.matchAll(/^#\s*include\s+"([^"]+)"/gm)].map((m) => m[1]).filter((h) => files.includes(h)));
}
function headersOf(f, seen = new Map(), via = null) {
  for (const h of includes.get(f) ?? []) {
    if (seen.has(h)) continue;
    seen.set(h, via ? `${via} -> ${h}` : h);
    headersOf(h, seen, seen.get(h));
  }
  return seen;
}
const family = (f) => f.split("_")[0];
const edges = new Map();
for (const [file, used] of uses) {
  const to = new Map();
  for (const s of used) {
    const d = defs.get(s);
    if (d && d !== file && !to.has(d)) to.set(d, `calls ${s}`);
  }
  // src/B.h is B.c's header when B.c exists (not a module's _int.h, protocol.h, utf8.h, ...).
  // The files of one family (the name up to its first "_": sandbox*, http*, worker*, json*)
  // share their public headers - sandbox.h gives sandbox_core.c its types, worker_pool.h
  // declares worker_relay.c's probe - so within a family only calls count.
  for (const [h, chain] of headersOf(`${file}.c`)) {
    const b = h.slice(0, -2);
    if (b !== file && uses.has(b) && family(b) !== family(file) && !to.has(b)) to.set(b, `includes ${chain}`);
  }
  edges.set(file, to);
}
// Tarjan's strongly connected components
let counter = 0;
const index = new Map(), low = new Map(), stack = [], onStack = new Set(), groups = [];
function visit(v) {
  index.set(v, counter); low.set(v, counter); counter++;
  stack.push(v); onStack.add(v);
  for (const w of edges.get(v)?.keys() ?? []) {
    if (!index.has(w)) { visit(w); low.set(v, Math.min(low.get(v), low.get(w))); }
    else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
  }
  if (low.get(v) === index.get(v)) {
    const g = [];
    let w;
    do { w = stack.pop(); onStack.delete(w); g.push(w); } while (w !== v);
    if (g.length > 1) groups.push(g.sort());
  }
}
for (const v of edges.keys()) if (!index.has(v)) visit(v);
for (const g of groups) {
  const calls = [];
  for (const a of g) for (const [b, why] of edges.get(a)) if (g.includes(b)) calls.push(`${a}.c -> ${b}.c (${why})`);
  problems.push(`a cycle between ${g.map((x) => x + ".c").join(", ")}: ${calls.join("; ")}`);
}

if (problems.length) {
  for (const p of problems) console.log(`arch: ${p}`);
  process.exit(1);
}
console.log(`arch: ${files.length} files of src/, ${uses.size} objects: private headers stay private, no cycles of calls or includes`);
