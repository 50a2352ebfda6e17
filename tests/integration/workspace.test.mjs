// The workspace end to end through the official SDK client: the four workspace tools (text and
// base64), sub-directories, quotas, hostile paths and planted symlinks (checked on the real
// filesystem), the sandbox's read_file/write_file/... seeing the same files, and the MCP
// resources that expose workspace files and skills. Every test starts its own server with a
// fresh --data-dir (and --skills-dir).
// Run: cd tests && MOONBOX=../build/moonbox node --test integration/workspace.test.mjs

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync, readFileSync, writeFileSync, readdirSync, mkdtempSync, rmSync, symlinkSync,
  lstatSync, readlinkSync, mkdirSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { McpError } from "@modelcontextprotocol/sdk/types.js";

import {
  connectWithSkills, execute, spawnRaw, toolErrText as errText, toolOk as ok, useServer,
} from "../lib/moonbox.mjs";

const T = { timeout: 30000 };

async function withServer(opts, fn) {
  const s = await connectWithSkills(opts);
  s.ws = path.join(s.dataDir, "workspaces", "default");
  return useServer(s, fn);
}

function call(s, name, args) {
  return s.client.callTool({ name, arguments: args });
}

const write = (s, p, content, encoding) =>
  call(s, "write_workspace_file", encoding ? { path: p, content, encoding } : { path: p, content });
const read = (s, p, encoding) =>
  call(s, "read_workspace_file", encoding ? { path: p, encoding } : { path: p });
const del = (s, p) => call(s, "delete_workspace_file", { path: p });
const list = (s, dir) => call(s, "list_workspace_files", dir === undefined ? {} : { dir });

async function runOk(s, code) {
  const res = await execute(s.client, { code });
  const sc = res.structuredContent;
  assert.equal(sc.success, true, `execution failed: ${sc.error}`);
  return sc.result;
}

/** Every path under dir (relative, sorted; directories end in "/"; symlinks are not followed). */
function tree(dir) {
  const out = [];
  const walk = (rel) => {
    for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        out.push(r + "/");
        walk(r);
      } else {
        out.push(r);
      }
    }
  };
  walk("");
  return out.sort();
}

// ---------------------------------------------------------------------------------------------

describe("workspace tools", () => {
  it("write, read, list and delete round trip", T, async () => {
    await withServer({}, async (s) => {
      assert.deepEqual(ok(await write(s, "notes.txt", "héllo\nworld")), { path: "notes.txt", bytes: 12 });
      assert.equal(readFileSync(path.join(s.ws, "notes.txt"), "utf8"), "héllo\nworld");
      assert.deepEqual(ok(await read(s, "notes.txt")),
        { path: "notes.txt", encoding: "utf8", bytes: 12, content: "héllo\nworld" });
      const l = ok(await list(s));
      assert.equal(l.count, 1);
      assert.equal(l.files.length, 1);
      assert.equal(l.files[0].path, "notes.txt");
      assert.equal(l.files[0].size, 12);
      assert.ok(Math.abs(l.files[0].modified - Date.now()) < 60000, `modified ${l.files[0].modified}`);
      assert.deepEqual(l.usage, { files: 1, bytes: 12, max_files: 10000, max_bytes: 104857600, max_file_bytes: 10485760 });

      // replacing a file
      assert.deepEqual(ok(await write(s, "notes.txt", "v2")), { path: "notes.txt", bytes: 2 });
      assert.equal(ok(await read(s, "notes.txt")).content, "v2");
      assert.deepEqual(ok(await list(s)).usage.bytes, 2);
      // an empty file
      assert.deepEqual(ok(await write(s, "empty.txt", "")), { path: "empty.txt", bytes: 0 });
      assert.equal(ok(await read(s, "empty.txt")).content, "");

      assert.deepEqual(ok(await del(s, "notes.txt")), { path: "notes.txt", deleted: true });
      assert.equal(existsSync(path.join(s.ws, "notes.txt")), false);
      assert.equal(errText(await read(s, "notes.txt")), "read notes.txt: no such file or directory");
      const again = await del(s, "notes.txt");
      assert.equal(errText(again), "no file notes.txt in the workspace");
      assert.deepEqual(again.structuredContent, { path: "notes.txt", deleted: false });
      assert.deepEqual(ok(await list(s)).files.map((f) => f.path), ["empty.txt"]);
    });
  });

  it("argument errors name the argument", T, async () => {
    await withServer({}, async (s) => {
      assert.equal(errText(await call(s, "write_workspace_file", { content: "x" })), "invalid arguments: path is required (or filename)");
      assert.equal(errText(await call(s, "write_workspace_file", { path: 1, content: "x" })), "invalid arguments: path must be a string");
      assert.equal(errText(await call(s, "write_workspace_file", { path: "a" })), "invalid arguments: content must be a string");
      assert.equal(errText(await call(s, "read_workspace_file", { path: "a", encoding: "hex" })),
        'invalid arguments: encoding must be "utf8" or "base64"');
      assert.equal(errText(await call(s, "read_workspace_file", { path: "a", mode: 1 })),
        'invalid arguments: read_workspace_file has no argument "mode" (expected encoding, path)');
      assert.equal(errText(await call(s, "list_workspace_files", { dir: 3 })), "invalid arguments: dir must be a string");
      assert.equal(errText(await call(s, "delete_workspace_file", {})), "invalid arguments: path is required (or filename)");
    });
  });

  it("filename and subpath are accepted for path and dir (names other servers use)", T, async () => {
    await withServer({}, async (s) => {
      assert.equal(ok(await call(s, "write_workspace_file", { filename: "d/a.txt", content: "hi" })).path, "d/a.txt");
      assert.equal(ok(await call(s, "read_workspace_file", { filename: "d/a.txt" })).content, "hi");
      assert.deepEqual(ok(await call(s, "list_workspace_files", { subpath: "d" })).files.map((f) => f.path), ["d/a.txt"]);
      assert.equal(errText(await call(s, "read_workspace_file", { filename: "d/a.txt", path: "d/a.txt" })),
        "invalid arguments: give path or filename, not both");
      assert.match(errText(await call(s, "list_workspace_files", { filename: "d" })), /has no argument "filename"/);
      assert.equal(ok(await call(s, "delete_workspace_file", { filename: "d/a.txt" })).deleted, true);
    });
  });

  it("sub-directories are created on write and listed by dir", T, async () => {
    await withServer({}, async (s) => {
      ok(await write(s, "top.txt", "t"));
      ok(await write(s, "d/e/deep.txt", "deep"));
      ok(await write(s, "d/side.txt", "side"));
      assert.equal(readFileSync(path.join(s.ws, "d/e/deep.txt"), "utf8"), "deep");
      assert.deepEqual(ok(await list(s)).files.map((f) => [f.path, f.size]),
        [["d/e/deep.txt", 4], ["d/side.txt", 4], ["top.txt", 1]]);
      assert.deepEqual(ok(await list(s, "d")).files.map((f) => f.path), ["d/e/deep.txt", "d/side.txt"]);
      assert.deepEqual(ok(await list(s, "d/e")).files.map((f) => f.path), ["d/e/deep.txt"]);
      const none = ok(await list(s, "nope"));
      assert.deepEqual([none.count, none.files], [0, []]);
      assert.equal(ok(await read(s, "d/e/deep.txt")).content, "deep");
      assert.equal(errText(await read(s, "d")), "read d: is a directory");
      assert.equal(errText(await write(s, "d", "x")), "write d: is a directory");
      assert.equal(errText(await del(s, "d")), "delete d: is a directory (only files are deleted)");
      assert.equal(errText(await write(s, "top.txt/x", "x")), "write top.txt/x: a parent of the path is not a directory");
      ok(await del(s, "d/e/deep.txt"));
      assert.deepEqual(ok(await list(s)).files.map((f) => f.path), ["d/side.txt", "top.txt"]);
    });
  });

  it("base64: a binary file with NUL and 0xFF bytes round trips", T, async () => {
    await withServer({}, async (s) => {
      const bytes = Buffer.alloc(256);
      for (let i = 0; i < 256; i++) bytes[i] = (i * 7 + 255) & 0xff; // starts with 0xFF, has 0x00
      assert.equal(bytes[0], 0xff);
      assert.ok(bytes.includes(0));
      const b64 = bytes.toString("base64");
      assert.deepEqual(ok(await write(s, "bin/all.dat", b64, "base64")), { path: "bin/all.dat", bytes: 256 });
      assert.deepEqual(readFileSync(path.join(s.ws, "bin/all.dat")), bytes);
      assert.deepEqual(ok(await read(s, "bin/all.dat", "base64")),
        { path: "bin/all.dat", encoding: "base64", bytes: 256, content: b64 });
      assert.equal(errText(await read(s, "bin/all.dat")),
        'bin/all.dat is not UTF-8 text (256 bytes); read it with encoding="base64"');
      // NUL alone is valid UTF-8 and comes back as text
      ok(await write(s, "nul.txt", Buffer.from([0x61, 0x00, 0x62]).toString("base64"), "base64"));
      assert.equal(ok(await read(s, "nul.txt")).content, "a\u0000b");
      // text read as base64
      ok(await write(s, "t.txt", "héllo"));
      assert.equal(ok(await read(s, "t.txt", "base64")).content, Buffer.from("héllo").toString("base64"));
      assert.equal(errText(await write(s, "b.dat", "!!!!", "base64")),
        "invalid arguments: content is not valid base64: invalid base64 at offset 0: unexpected '!'");
      assert.equal(existsSync(path.join(s.ws, "b.dat")), false);
    });
  });
});

describe("workspace quotas", () => {
  it("--workspace-max-file-bytes 100 and --workspace-max-bytes 300", T, async () => {
    await withServer({ args: ["--workspace-max-file-bytes", "100", "--workspace-max-bytes", "300"] }, async (s) => {
      assert.equal(errText(await write(s, "big.txt", "x".repeat(101))),
        "write big.txt: 101 bytes is above workspace_max_file_bytes=100");
      assert.equal(errText(await write(s, "big.bin", Buffer.alloc(101).toString("base64"), "base64")),
        "write big.bin: 101 bytes is above workspace_max_file_bytes=100");
      ok(await write(s, "a.txt", "a".repeat(100)));
      ok(await write(s, "b.txt", "b".repeat(100)));
      ok(await write(s, "c.txt", "c".repeat(100)));
      assert.equal(errText(await write(s, "d.txt", "d")),
        "write d.txt: workspace_max_bytes=300 would be exceeded (in use 300, writing 1)");
      assert.equal(errText(await write(s, "a.txt", "a".repeat(100) + "!")),
        "write a.txt: 101 bytes is above workspace_max_file_bytes=100");
      // replacing a file counts only the difference
      ok(await write(s, "b.txt", "B".repeat(100)));
      ok(await write(s, "a.txt", "a".repeat(50)));
      ok(await write(s, "d.txt", "d".repeat(50)));
      assert.equal(errText(await write(s, "e.txt", "e")),
        "write e.txt: workspace_max_bytes=300 would be exceeded (in use 300, writing 1)");
      assert.deepEqual(tree(s.ws), ["a.txt", "b.txt", "c.txt", "d.txt"]);
      const u = ok(await list(s)).usage;
      assert.deepEqual(u, { files: 4, bytes: 300, max_files: 10000, max_bytes: 300, max_file_bytes: 100 });
      // deleting frees room
      ok(await del(s, "c.txt"));
      ok(await write(s, "e.txt", "e".repeat(100)));
      // the sandbox hits the same quotas
      const r = await runOk(s, 'local ok, e = pcall(write_file, "f.txt", "f") return e');
      assert.equal(r, "write f.txt: workspace_max_bytes=300 would be exceeded (in use 300, writing 1)");
      const r2 = await runOk(s, 'local ok, e = pcall(write_file, "g.txt", string.rep("g", 101)) return e');
      assert.equal(r2, "write g.txt: 101 bytes is above workspace_max_file_bytes=100");
    });
  });

  it("--workspace-max-files 2", T, async () => {
    await withServer({ args: ["--workspace-max-files", "2"] }, async (s) => {
      ok(await write(s, "x.txt", "1"));
      ok(await write(s, "sub/y.txt", "2"));
      assert.equal(errText(await write(s, "z.txt", "3")), "write z.txt: workspace_max_files=2 reached");
      assert.equal(existsSync(path.join(s.ws, "z.txt")), false);
      ok(await write(s, "x.txt", "replacing is fine"));
      ok(await del(s, "x.txt"));
      ok(await write(s, "z.txt", "3"));
      assert.deepEqual(ok(await list(s)).usage.files, 2);
    });
  });
});

describe("workspace confinement", () => {
  // The catalog's import is delayed after start; its directory must not be: a listing of the
  // data directory taken after the first answer stays true (this test raced in CI before).
  it("the data directory's layout is complete when initialize is answered", T, async () => {
    const peer = spawnRaw();
    try {
      await peer.initialize();
      assert.equal(existsSync(path.join(peer.dataDir, "catalog")), true, tree(peer.dataDir).join(" "));
    } finally {
      await peer.dispose();
    }
  });

  it("hostile paths through the MCP tools are refused and nothing is created outside", T, async () => {
    const outside = mkdtempSync(path.join(tmpdir(), "moonbox-outside-"));
    try {
      await withServer({}, async (s) => {
        ok(await write(s, "keep.txt", "k"));
        const before = tree(s.dataDir);
        const abs = path.join(outside, "abs.txt");
        const long = "x".repeat(300);
        const longPath = "y/".repeat(1000); // 2000 characters
        assert.equal(longPath.length, 2000);
        const cases = [
          ["../x", "%s ../x: '.' and '..' are not allowed as path components"],
          ["a/../../x", "%s a/../../x: '.' and '..' are not allowed as path components"],
          ["./keep.txt", "%s ./keep.txt: '.' and '..' are not allowed as path components"],
          ["..", "%s ..: '.' and '..' are not allowed as path components"],
          ["/etc/passwd", "%s /etc/passwd: the path must be relative to the workspace (it starts with /)"],
          [abs, `%s ${abs}: the path must be relative to the workspace (it starts with /)`],
          ["a\u0000b", "%s a\\x00b: the path contains a NUL byte at offset 1"],
          ["keep.txt\u0000.png", "%s keep.txt\\x00.png: the path contains a NUL byte at offset 8"],
          ["a\nb", "%s a\\x0ab: the path contains a control character (0x0a) at offset 1"],
          [long, `%s ${"x".repeat(96)}...: a path component is 300 bytes, above the limit of 255`],
          [longPath, `%s ${longPath.slice(0, 96)}...: the path is 2000 bytes, above the limit of 1024`],
          ["", "%s: the path is empty"],
          ["a//b", "%s a//b: the path has an empty component (// or a trailing /)"],
          ["dir/", "%s dir/: the path has an empty component (// or a trailing /)"],
          [".mb-tmp-x", "%s .mb-tmp-x: names starting with .mb-tmp- are reserved for temporary files"],
        ];
        for (const [p, msg] of cases) {
          assert.equal(errText(await read(s, p)), msg.replace("%s", "read"), `read ${JSON.stringify(p)}`);
          assert.equal(errText(await write(s, p, "pwned")), msg.replace("%s", "write"), `write ${JSON.stringify(p)}`);
          assert.equal(errText(await del(s, p)), msg.replace("%s", "delete"), `delete ${JSON.stringify(p)}`);
        }
        assert.equal(errText(await list(s, "../")), "list ../: '.' and '..' are not allowed as path components");
        assert.equal(errText(await list(s, "..")), "list ..: '.' and '..' are not allowed as path components");
        assert.equal(errText(await list(s, "/etc")), "list /etc: the path must be relative to the workspace (it starts with /)");
        // a 255-byte component is the longest allowed
        ok(await write(s, "n".repeat(255), "ok"));
        assert.deepEqual(tree(s.dataDir), [...before, "workspaces/default/" + "n".repeat(255)].sort());
        assert.deepEqual(readdirSync(outside), []);
        assert.equal(existsSync(path.join(s.dataDir, "workspaces", "x")), false);
        assert.equal(existsSync(path.join(s.dataDir, "x")), false);
        assert.equal(readFileSync("/etc/passwd", "utf8").includes("pwned"), false);
      });
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it("symlinks planted inside the workspace are refused for read, write, delete and list", T, async () => {
    const outside = mkdtempSync(path.join(tmpdir(), "moonbox-outside-"));
    try {
      const secret = path.join(outside, "secret.txt");
      writeFileSync(secret, "SECRET");
      await withServer({}, async (s) => {
        ok(await write(s, "real.txt", "r"));
        symlinkSync("/etc", path.join(s.ws, "link_etc"));
        symlinkSync(outside, path.join(s.ws, "link_dir"));
        symlinkSync(secret, path.join(s.ws, "link_file"));
        mkdirSync(path.join(s.ws, "sub"));
        symlinkSync("../../../", path.join(s.ws, "sub", "up"));
        const refused = (op, p) => `${op} ${p}: symbolic links are not followed in the workspace`;

        for (const p of ["link_etc/passwd", "link_file", "link_dir/secret.txt", "sub/up/workspaces/default/real.txt"]) {
          assert.equal(errText(await read(s, p)), refused("read", p));
          assert.equal(errText(await read(s, p, "base64")), refused("read", p));
        }
        for (const p of ["link_file", "link_dir/secret.txt", "link_dir/new.txt", "link_etc/moonbox-never.txt", "sub/up/x.txt"]) {
          assert.equal(errText(await write(s, p, "pwned")), refused("write", p));
        }
        for (const p of ["link_file", "link_dir/secret.txt", "sub/up/workspaces/default/real.txt"]) {
          assert.equal(errText(await del(s, p)), refused("delete", p));
        }
        assert.equal(errText(await list(s, "link_dir")), refused("list", "link_dir"));
        // the full listing shows only the real file, not what the links point to
        assert.deepEqual(ok(await list(s)).files.map((f) => f.path), ["real.txt"]);

        // the sandbox functions refuse them the same way
        const r = await runOk(s, `
          local out = {}
          for _, c in ipairs({
            { read_file, "link_file" },
            { write_file, "link_file", "pwned" },
            { write_file, "link_dir/new.txt", "pwned" },
            { delete_file, "link_file" },
            { json.read_file, "link_file" },
            { json.write_file, "link_dir/x.json", {1} },
            { list_files, "link_dir" },
            { read_file, "link_etc/passwd" },
            { file_exists, "link_file" },
          }) do
            local ok, e = pcall(table.unpack(c))
            out[#out + 1] = ok and "ALLOWED" or e
          end
          return out`);
        assert.deepEqual(r, [refused("read", "link_file"), refused("write", "link_file"),
          refused("write", "link_dir/new.txt"), refused("delete", "link_file"), refused("read", "link_file"),
          refused("write", "link_dir/x.json"), refused("list", "link_dir"), refused("read", "link_etc/passwd"),
          refused("stat", "link_file")]);

        // resources/read refuses too
        await assert.rejects(s.client.readResource({ uri: "moonbox://workspace/link_file" }), (e) => {
          assert.ok(e instanceof McpError);
          assert.equal(e.code, -32602);
          assert.match(e.message, /resources\/read: read link_file: symbolic links are not followed in the workspace/);
          return true;
        });

        // nothing outside changed, and the links themselves are intact
        assert.equal(readFileSync(secret, "utf8"), "SECRET");
        assert.deepEqual(readdirSync(outside), ["secret.txt"]);
        assert.equal(existsSync("/etc/moonbox-never.txt"), false);
        assert.equal(readlinkSync(path.join(s.ws, "link_file")), secret);
        assert.ok(lstatSync(path.join(s.ws, "link_dir")).isSymbolicLink());
        assert.ok(lstatSync(path.join(s.ws, "link_file")).isSymbolicLink());
        assert.equal(existsSync(path.join(s.dataDir, "x.txt")), false);
      });
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });
});

describe("sandbox file functions and the MCP tools share the workspace", () => {
  it("read_file / write_file / list_files / delete_file / file_exists / json.*", T, async () => {
    await withServer({}, async (s) => {
      ok(await write(s, "from_mcp.txt", "written by the tool"));
      ok(await write(s, "data/in.json", '{"n": 41, "tags": ["a", "b"]}'));
      const r = await runOk(s, `
        local text = read_file("from_mcp.txt")
        local data = json.read_file("data/in.json")
        write_file("from_sandbox.txt", text .. " and read by code")
        json.write_file("data/out.json", { n = data.n + 1 })
        json.write_file("data/pretty.json", { list = { 1, 2 } }, true)
        local missing, why = read_file("nope.txt")
        local names = {}
        for _, f in ipairs(list_files()) do names[#names + 1] = f.path .. ":" .. f.size end
        local sub = {}
        for _, f in ipairs(list_files("data")) do sub[#sub + 1] = f.path end
        return { text = text, n = data.n, tag2 = data.tags[2], missing = missing == nil, why = why,
                 names = names, sub = sub,
                 exists = { file_exists("from_mcp.txt"), file_exists("nope.txt"), file_exists("data") } }`);
      assert.equal(r.text, "written by the tool");
      assert.equal(r.n, 41);
      assert.equal(r.tag2, "b");
      assert.equal(r.missing, true);
      assert.equal(r.why, "read nope.txt: no such file or directory");
      assert.deepEqual(r.sub, ["data/in.json", "data/out.json", "data/pretty.json"]);
      assert.deepEqual(r.exists, [true, false, false]);
      // returned as they come, the nil and the reason stay in place (not {"2": "read ..."})
      assert.deepEqual(await runOk(s, 'return read_file("nope.txt")'), [null, "read nope.txt: no such file or directory"]);

      // what the sandbox wrote, the tools read
      assert.equal(ok(await read(s, "from_sandbox.txt")).content, "written by the tool and read by code");
      assert.equal(ok(await read(s, "data/out.json")).content, '{"n":42}');
      assert.equal(ok(await read(s, "data/pretty.json")).content, '{\n  "list": [\n    1,\n    2\n  ]\n}\n');
      const sizes = Object.fromEntries(ok(await list(s)).files.map((f) => [f.path, f.size]));
      assert.deepEqual(sizes, { "data/in.json": 29, "data/out.json": 8, "data/pretty.json": 33,
        "from_mcp.txt": 19, "from_sandbox.txt": 36 });
      assert.deepEqual(r.names, Object.entries(sizes).map(([p, n]) => `${p}:${n}`));

      // delete from the sandbox, gone for the tools; delete by tool, gone for the sandbox
      assert.deepEqual(await runOk(s, 'return { delete_file("from_mcp.txt"), delete_file("from_mcp.txt") }'), [true, false]);
      assert.equal(errText(await read(s, "from_mcp.txt")), "read from_mcp.txt: no such file or directory");
      ok(await del(s, "from_sandbox.txt"));
      assert.deepEqual(await runOk(s, 'return { file_exists("from_sandbox.txt"), read_file("from_sandbox.txt") == nil }'), [false, true]);

      // binary written by the tool is read byte for byte by the sandbox
      ok(await write(s, "b.bin", Buffer.from([0, 255, 10, 0]).toString("base64"), "base64"));
      assert.deepEqual(await runOk(s, 'local d = read_file("b.bin") return { #d, d:byte(1, -1) }'), [4, 0, 255, 10, 0]);
      // and binary written by the sandbox is read by the tool
      await runOk(s, 'write_file("c.bin", "\\0\\255\\1")');
      assert.equal(ok(await read(s, "c.bin", "base64")).content, Buffer.from([0, 255, 1]).toString("base64"));

      // sandbox path errors are the same messages
      assert.equal(await runOk(s, 'local ok, e = pcall(read_file, "../x") return e'),
        "read ../x: '.' and '..' are not allowed as path components");
      assert.equal(await runOk(s, 'local ok, e = pcall(write_file, "/tmp/x", "y") return e'),
        "write /tmp/x: the path must be relative to the workspace (it starts with /)");
      assert.match(await runOk(s, 'local ok, e = pcall(json.read_file, "c.bin") return e'),
        /^json\.read_file c\.bin: invalid /);
    });
  });
});

describe("resources", () => {
  const SKILL = "--- Greets someone.\nreturn function(n) return 'hi ' .. n end\n";

  it("resources/list and resources/templates/list", T, async () => {
    await withServer({ skills: { "greet.lua": SKILL } }, async (s) => {
      ok(await write(s, "a b.txt", "spaced"));
      ok(await write(s, "img/p.png", Buffer.from([0x89, 0x50, 0x4e, 0x47]).toString("base64"), "base64"));
      ok(await write(s, "ü.json", "{}"));
      const { resources, nextCursor } = await s.client.listResources();
      assert.equal(nextCursor, undefined);
      assert.deepEqual(resources, [
        { uri: "moonbox://skills/greet", name: "skills/greet", title: "greet", description: "Greets someone.", mimeType: "text/x-lua" },
        { uri: "moonbox://workspace/a%20b.txt", name: "a b.txt", mimeType: "text/plain", size: 6 },
        { uri: "moonbox://workspace/img/p.png", name: "img/p.png", mimeType: "image/png", size: 4 },
        { uri: "moonbox://workspace/%C3%BC.json", name: "ü.json", mimeType: "application/json", size: 2 },
        // the sandbox API's types (mcp/sandbox_types.lua), always listed
        { uri: "moonbox://types/sandbox.lua", name: "types/sandbox.lua", title: "Lua types of the sandbox API",
          description: "LuaLS annotations (---@meta) of every function sandbox code can call (json, re, mcp, pii, "
            + "the workspace and data helpers, skills), for lua-language-server; `moonbox types DIR` writes it with a .luarc.json",
          mimeType: "text/x-lua" },
      ]);
      const { resourceTemplates } = await s.client.listResourceTemplates();
      assert.deepEqual(resourceTemplates.map((t) => t.uriTemplate).sort(),
        ["moonbox://skills/{name}", "moonbox://workspace/{+path}"]);
      for (const t of resourceTemplates) assert.equal(typeof t.name, "string");
    });
  });

  it("resources/read: a skill's code, a text file, a binary blob, percent-encoded paths", T, async () => {
    await withServer({ skills: { "greet.lua": SKILL } }, async (s) => {
      assert.deepEqual(await s.client.readResource({ uri: "moonbox://skills/greet" }), {
        contents: [{ uri: "moonbox://skills/greet", mimeType: "text/x-lua", text: SKILL }],
      });
      ok(await write(s, "notes/today.md", "# Today\n"));
      assert.deepEqual(await s.client.readResource({ uri: "moonbox://workspace/notes/today.md" }), {
        contents: [{ uri: "moonbox://workspace/notes/today.md", mimeType: "text/markdown", text: "# Today\n" }],
      });
      const bin = Buffer.from([0x00, 0xff, 0xfe, 0x41]);
      ok(await write(s, "blob.dat", bin.toString("base64"), "base64"));
      assert.deepEqual(await s.client.readResource({ uri: "moonbox://workspace/blob.dat" }), {
        contents: [{ uri: "moonbox://workspace/blob.dat", mimeType: "application/octet-stream", blob: bin.toString("base64") }],
      });
      // an image is a blob even when its bytes happen to be UTF-8
      ok(await write(s, "fake.png", "PNG"));
      assert.deepEqual(await s.client.readResource({ uri: "moonbox://workspace/fake.png" }), {
        contents: [{ uri: "moonbox://workspace/fake.png", mimeType: "image/png", blob: Buffer.from("PNG").toString("base64") }],
      });
      // percent-encoded names round trip through list and read
      ok(await write(s, "a b.txt", "spaced out"));
      ok(await write(s, "dir x/ü %.txt", "odd"));
      const uris = (await s.client.listResources()).resources.map((r) => r.uri);
      assert.ok(uris.includes("moonbox://workspace/a%20b.txt"), uris.join(" "));
      assert.ok(uris.includes("moonbox://workspace/dir%20x/%C3%BC%20%25.txt"), uris.join(" "));
      assert.equal((await s.client.readResource({ uri: "moonbox://workspace/a%20b.txt" })).contents[0].text, "spaced out");
      assert.equal((await s.client.readResource({ uri: "moonbox://workspace/dir%20x/%C3%BC%20%25.txt" })).contents[0].text, "odd");
      // a skill edited through save_skill is what resources/read gives
      ok(await call(s, "save_skill", { name: "greet", code: "return 1\n", description: "Changed." }));
      assert.equal((await s.client.readResource({ uri: "moonbox://skills/greet" })).contents[0].text, "--- Changed.\nreturn 1\n");
    });
  });

  it("resources/read errors: unknown uris are -32002, bad paths -32602", T, async () => {
    await withServer({}, async (s) => {
      const expectErr = async (uri, code, message) => {
        await assert.rejects(s.client.readResource({ uri }), (e) => {
          assert.ok(e instanceof McpError, `not an McpError: ${e}`);
          assert.equal(e.code, code, `${uri}: ${e.message}`);
          assert.equal(e.message, `MCP error ${code}: ${message}`);
          return true;
        });
      };
      await expectErr("moonbox://workspace/nope.txt", -32002, "Resource not found: read nope.txt: no such file or directory");
      await expectErr("moonbox://skills/nope", -32002, 'Resource not found: no skill named "nope". list_skills shows what exists.');
      await expectErr("file:///etc/passwd", -32002,
        "Resource not found: no resource has this uri (workspace files are moonbox://workspace/<path>, skills moonbox://skills/<name>)");
      await expectErr("moonbox://workspace/%2e%2e/x", -32602, "resources/read: read ../x: '.' and '..' are not allowed as path components");
      await expectErr("moonbox://workspace/%2Fetc%2Fpasswd", -32602,
        "resources/read: read /etc/passwd: the path must be relative to the workspace (it starts with /)");
      await expectErr("moonbox://workspace/a%00b", -32602, "resources/read: read a\\x00b: the path contains a NUL byte at offset 1");
      await expectErr("moonbox://workspace/%zz", -32602, "resources/read: bad percent-encoding in the uri");
      await expectErr("moonbox://skills/../x", -32002, `Resource not found: invalid skill name "../x": it must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most 64 characters)`);
    });
  });
});

describe("get_execution_stats reports the workspace", () => {
  it("files and bytes follow writes and deletes", T, async () => {
    await withServer({}, async (s) => {
      const stats = async () => ok(await call(s, "get_execution_stats", {}));
      let st = await stats();
      assert.equal(st.workspace.files, 0);
      assert.equal(st.workspace.bytes, 0);
      assert.equal(st.workspace.max_files, 10000);
      ok(await write(s, "one.txt", "12345"));
      await runOk(s, 'write_file("two/three.txt", "abc") return 1');
      st = await stats();
      assert.equal(st.workspace.files, 2);
      assert.equal(st.workspace.bytes, 8);
      assert.equal(st.history.recorded, 1);
      assert.equal(st.skills.count, 0);
      assert.equal(typeof st.pool.uptime_s, "number");
      ok(await del(s, "one.txt"));
      st = await stats();
      assert.equal(st.workspace.files, 1);
      assert.equal(st.workspace.bytes, 3);
    });
  });
});
