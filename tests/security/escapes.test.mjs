// Sandbox escapes (the threat list of docs/security.md): bytecode, the load environment, the
// string metatable, global/library poisoning across executions, absent libraries, __gc, and
// error objects with metamethods. Each test runs on a fresh server and ends by checking that the
// server still runs `return 1`.

import { test, describe } from "node:test";
import assert from "node:assert/strict";

import { check, sequence, brief } from "./harness.mjs";

const ok = (result) => ({ success: true, result });
const runtime = (error) => ({ success: false, error_type: "runtime", error });

describe("bytecode cannot be loaded", () => {
  test("string.dump is gone, also through the string metatable", () =>
    check('return string.dump == nil, ("").dump == nil, ("x").dump == nil', ok([true, true, true])));

  test('load(s, nil, "b") is refused', () =>
    check('local f, e = load("\\27LuaT\\0\\25\\147\\r\\n\\26\\n", nil, "b") return f == nil, e',
      ok([true, "attempt to load a text chunk (mode is 'b'); binary chunks are not allowed in the sandbox"])));

  test('a binary chunk is refused in mode "bt" and in the default mode', () =>
    check('local f1, e1 = load("\\27LuaT\\0\\25\\147", "x", "bt") local f2, e2 = load("\\27LuaT\\0") ' +
      'return f1 == nil, e1, f2 == nil, e2',
      ok([true, "attempt to load a binary chunk (mode is 't')", true, "attempt to load a binary chunk (mode is 't')"])));

  test("text chunks still load, with and without an env", () =>
    check('return load("return 1 + 1")(), load("return x", "c", "t", {x = 7})(), load("return print", "c", "t", {})() == nil',
      ok([2, 7, true])));
});

describe("load without env sees only the sandbox globals", () => {
  test("the chunk's _ENV is the sandbox _G and dangerous names are nil", () =>
    check('x = 5 local f = load("return _ENV == _G, x, os.exit == nil, os.getenv == nil, io == nil, debug == nil, ' +
      'package == nil, not pcall(require, [[io]]), dofile == nil, loadfile == nil") return f()',
      ok([true, 5, true, true, true, true, true, true, true, true])));

  test("a chunk loaded inside a function with its own _ENV still gets the globals, not the local _ENV", () =>
    check('local function g() local _ENV = {load = load} return load("return os ~= nil and os.exit == nil")() end return g()', ok(true)));
});

describe("string metatable", () => {
  test('getmetatable("") is locked', () =>
    check('return getmetatable(""), getmetatable("abc") == false', ok([false, true])));

  test('getmetatable("").__index cannot be reached', () =>
    check('return getmetatable("").__index', runtime(/attempt to index a boolean value/)));

  test("the string metatable cannot be replaced", () =>
    check('return setmetatable("", {})', runtime(/bad argument #1 to .*\(table expected, got string\)/)));

  test("the setmetatable wrapper's argument errors name 'setmetatable' (agents must see which call failed)", () =>
    check('return setmetatable("", {})', runtime(/bad argument #1 to 'setmetatable' \(table expected, got string\)/)));

  test("string library writes (the metatable's __index) do not leak into the next execution", async () => {
    const [a, b] = await sequence([
      'string.upper = function() return "pwned" end string.format = nil rawset(string, "rep", nil) return ("a"):upper()',
      'return ("a"):upper(), string.format("%d", 5), ("ab"):rep(2)',
    ]);
    assert.equal(a.result, "pwned", `poisoning run: ${brief(a)}`);
    assert.deepEqual(b.result, ["A", "5", "abab"], `next run: ${brief(b)}`);
  });
});

describe("poisoning is confined to one execution", () => {
  test("setmetatable(_G, ...) is confined", async () => {
    const [a, b] = await sequence([
      'setmetatable(_G, {__index = function(_, k) return "leaked:" .. k end, __newindex = function() end}) ' +
        'newglobal = 1 return missing_global, rawget(_G, "newglobal") == nil',
      'return missing_global == nil, getmetatable(_G) == nil',
    ]);
    assert.deepEqual(a.result, ["leaked:missing_global", true], `poisoning run: ${brief(a)}`);
    assert.deepEqual(b.result, [true, true], `next run: ${brief(b)}`);
  });

  test("rawset on library tables and _G is confined", async () => {
    const [a, b] = await sequence([
      'rawset(table, "insert", function() return "pwned" end) rawset(math, "pi", 3) ' +
        'rawset(json, "encode", function() return "pwned" end) rawset(coroutine, "resume", nil) ' +
        'rawset(_G, "pcall", nil) rawset(os, "time", function() return 0 end) _G = nil return table.insert({}, 1)',
      'local t = {} table.insert(t, 9) return math.pi, json.encode({1}), type(coroutine.resume), type(pcall), os.time() > 0, t[1], type(_G)',
    ]);
    assert.equal(a.result, "pwned", `poisoning run: ${brief(a)}`);
    assert.deepEqual(b.result, [Math.PI, "[1]", "function", "function", true, 9, "table"], `next run: ${brief(b)}`);
  });

  test("a global set by one execution is not seen by the next", async () => {
    const [a, b] = await sequence(['secret = "s3cr3t" return secret', "return secret == nil"]);
    assert.equal(a.result, "s3cr3t");
    assert.equal(b.result, true, `next run: ${brief(b)}`);
  });
});

describe("the environment filled from the record of the stock libraries (issue 22)", () => {
  // Each state is filled from C data read once per process; nothing of it is a Lua value that
  // one execution could reach and change for the next.
  test("math.random's state and the library constants are new in each execution", async () => {
    const [a, b] = await sequence([
      'math.randomseed(7) local x = math.random(1, 1e9) rawset(math, "maxinteger", 0) ' +
        'rawset(utf8, "charpattern", "") string.pack = nil return x',
      'math.randomseed(7) return math.random(1, 1e9), math.maxinteger == 0x7fffffffffffffff, ' +
        '#utf8.charpattern > 0, type(string.pack)',
    ]);
    assert.equal(typeof a.result, "number", `poisoning run: ${brief(a)}`);
    assert.deepEqual(b.result, [a.result, true, true, "function"], `next run: ${brief(b)}`);
  });

  test("no library holds a value other than functions, numbers and strings (math.random's state is out of reach)", () =>
    check('for _, t in ipairs({string, table, math, utf8, coroutine, os}) do ' +
      'for k, v in pairs(t) do local ty = type(v) ' +
      'if ty ~= "function" and ty ~= "number" and ty ~= "string" then return k end end end ' +
      'return getmetatable(math) == nil and getmetatable(string) == nil and debug == nil and package == nil',
      ok(true)));

  test("the registry's loaded table stays unreachable: require knows only skills", () =>
    check('local r = {} for _, n in ipairs({"_G", "string", "math", "_LOADED"}) do ' +
      'r[#r + 1] = (pcall(require, n)) end return r', ok([false, false, false, false])));
});

describe("dangerous functions are absent or refused", () => {
  test("debug, io, package, dofile, loadfile, warn and most of os are nil; require loads only skills", () =>
    check('return debug == nil, io == nil, package == nil, not pcall(require, "io"), dofile == nil, loadfile == nil, warn == nil, ' +
      'os.execute == nil, os.exit == nil, os.getenv == nil, os.remove == nil, os.rename == nil, os.tmpname == nil, ' +
      'os.setlocale == nil, type(os.time), type(os.clock), type(os.date), type(os.difftime)',
      ok([true, true, true, true, true, true, true, true, true, true, true, true, true, true, "function", "function", "function", "function"])));

  for (const [name, code, msg] of [
    ["os.exit", "os.exit(1)", /attempt to call a nil value \(field 'exit'\)/],
    ["os.execute", 'os.execute("true")', /attempt to call a nil value \(field 'execute'\)/],
    ["os.getenv", 'return os.getenv("HOME")', /attempt to call a nil value \(field 'getenv'\)/],
    ["os.remove", 'os.remove("/tmp/x")', /attempt to call a nil value \(field 'remove'\)/],
    ["require", 'require("io")', /require: module 'io' not found: only skills can be required in the sandbox/],
    ["require of a path", 'require("skills.../../etc/passwd")', /require: module 'skills\.\.\.\/\.\.\/etc\/passwd' not found: only skills/],
    ["dofile", 'dofile("/etc/passwd")', /attempt to call a nil value \(global 'dofile'\)/],
    ["loadfile", 'loadfile("/etc/passwd")', /attempt to call a nil value \(global 'loadfile'\)/],
    ["io.open", 'io.open("/etc/passwd")', /attempt to index a nil value \(global 'io'\)/],
    ["debug.sethook", "debug.sethook()", /attempt to index a nil value \(global 'debug'\)/],
    ["package.loadlib", 'package.loadlib("libc.so.6", "system")', /attempt to index a nil value \(global 'package'\)/],
  ]) {
    test(`${name} fails with a clear error`, () => check(code, runtime(msg)));
  }

  for (const opt of ["collect", "step", "stop", "restart", "incremental", "generational", "setpause", "isrunning"]) {
    test(`collectgarbage("${opt}") is refused`, () =>
      check(`return collectgarbage("${opt}")`, runtime(/collectgarbage: only "count" is available in the sandbox/)));
  }

  test("collectgarbage() (default collect) is refused; collectgarbage(\"count\") works", async () => {
    await check("return collectgarbage()", runtime(/collectgarbage: only "count" is available in the sandbox/));
    await check('local n = collectgarbage("count") return math.type(n), n > 0', ok(["float", true]));
  });
});

describe("finalizers", () => {
  test("setmetatable with __gc is refused", () =>
    check("return setmetatable({}, {__gc = function() end})", runtime(/setmetatable: __gc metamethods are not allowed in the sandbox/)));

  test("setmetatable with __gc = false is refused too (the field's presence marks the object)", () =>
    check("return setmetatable({}, {__gc = false})", runtime(/__gc metamethods are not allowed/)));

  test("a __gc added after setmetatable never runs (not even at lua_close)", () =>
    check('local mt = {} local keep = {} for i = 1, 100 do keep[i] = setmetatable({}, mt) end ' +
      'mt.__gc = function() while true do end end local x = {} for i = 1, 1e5 do x[i] = {} end keep = nil x = nil return 1',
      ok(1), { timeout_ms: 300, bound: 300 }));
});

describe("error objects are described host-side without running their metamethods", () => {
  test("an error table with a looping __tostring", () =>
    check('error(setmetatable({msg = "boom"}, {__tostring = function() while true do end end}))',
      runtime('error object: {"msg":"boom"}'), { timeout_ms: 300, bound: 300 }));

  test("an error table with looping __index / __pairs / __len", () =>
    check('local loop = function() while true do end end ' +
      'error(setmetatable({code = 42}, {__index = loop, __pairs = loop, __len = loop, __tostring = loop, __name = "X"}))',
      runtime('error object: {"code":42}'), { timeout_ms: 300, bound: 300 }));

  test("a cyclic error table", () =>
    check("local t = {} t.self = t error(t)", runtime(/^error object/), { timeout_ms: 300, bound: 300 }));

  test("error(nil) and error(false)", async () => {
    await check("error(nil)", { success: false, error_type: "runtime" });
    await check("error(false)", { success: false, error_type: "runtime" });
  });
});

describe("output and addresses", () => {
  test("tostring and %p give strings (address hiding is not required)", () =>
    check('return type(tostring({})), type(string.format("%p", {}))', ok(["string", "string"])));

  test("print cannot inject JSON-RPC lines into stdout", () =>
    check('print(\'{"jsonrpc":"2.0","id":1,"result":{}}\') print("\\n{\\"jsonrpc\\":\\"2.0\\",\\"method\\":\\"x\\"}\\n") return 1',
      { success: true, result: 1, output: /^\{"jsonrpc":"2\.0","id":1,"result":\{\}\}\n/ }));

  test("invalid UTF-8 in output, result and error text becomes U+FFFD, stdout stays JSON", async () => {
    await check('print("\\xff\\xfe") return "\\xff", {["\\xfe"] = "\\xc0\\x80"}',
      { success: true, result: ["\uFFFD", { "\uFFFD": "\uFFFD\uFFFD" }], output: "\uFFFD\uFFFD\n" });
    await check('error("bad \\xff bytes")', runtime("code:1: bad \uFFFD bytes"));
  });
});
