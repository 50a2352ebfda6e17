-- tests/lua/test_upstream_config.lua - the "mcpServers" block (lua/mcp/upstream_config.lua):
-- what a valid block becomes, every refusal and its message (which names the server and the key),
-- keys of other clients' configs that are ignored with a warning, Lua names of servers and their
-- clashes, and the per-server policy (allowedTools, deniedTools, allowWrites true / false / "ask")
-- in refusal() and needs_approval().
-- End to end: tests/integration/gateway.test.mjs, security/gateway.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_upstream_config.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_error = H.check, H.check_error

local m = H.new_mb()
local uc = require("mcp.upstream_config")

local function parse(t) return uc.parse(type(t) == "string" and t or H.json_encode(t)) end
local function servers(t) return parse({ s = t }) end
-- The message a block is refused with.
local function refused(t)
  local ok, err = pcall(parse, t)
  if ok then return "accepted" end
  return err
end
local function refused1(spec) return refused({ s = spec }) end

---------------------------------------------------------------------------------------------
-- valid blocks

check("empty option", parse(""), {})
check("nil option", uc.parse(nil), {})
check("empty object", parse("{}"), {})

local list = parse({
  fs = { command = "npx", args = { "-y", "server-filesystem", "/tmp" }, env = { TOKEN = "x" }, cwd = "/srv" },
  web = { type = "http", url = "https://example.com/mcp", headers = { Authorization = "Bearer t" }, timeoutMs = 1500,
          maxCalls = 0, allowWrites = false, disabled = true, allowedTools = { "get_*" }, deniedTools = { "*delete*" } },
})
check("sorted by name", { list[1].name, list[2].name }, { "fs", "web" })
check("stdio server", list[1], { name = "fs", ident = "fs", transport = "stdio", command = "npx",
  args = { "-y", "server-filesystem", "/tmp" }, env = { TOKEN = "x" }, cwd = "/srv", denied = {}, writes = "allow",
  timeout_ms = 30000, disabled = false })
check("http server", list[2], { name = "web", ident = "web", transport = "http", url = "https://example.com/mcp",
  headers = { Authorization = "Bearer t" }, allowed = { "^get_.*$" }, denied = { "^.*delete.*$" }, writes = "refuse",
  timeout_ms = 1500, max_calls = 0, disabled = true })
check("stdio defaults", servers({ command = "srv" })[1], { name = "s", ident = "s", transport = "stdio", command = "srv",
  args = {}, env = {}, denied = {}, writes = "allow", timeout_ms = 30000, disabled = false })
check("type stdio with command", servers({ type = "stdio", command = "srv" })[1].transport, "stdio")
for _, t in ipairs({ "http", "streamable-http", "streamableHttp" }) do
  check("type " .. t .. " with url", servers({ type = t, url = "http://localhost:3000/mcp" })[1].transport, "http")
end
check("empty args object is an empty list", servers({ command = "srv", args = {} })[1].args, {})
check("a pasted desktop config", parse({ mcpServers = { a = { command = "x" } } })[1].name, "a")
check("a desktop config with more keys is not unwrapped", refused({ mcpServers = { a = { command = "x" } }, other = {} }) ~= "accepted", true)

-- keys of other clients: a warning, not a refusal
local logs = #m.logs
check("foreign keys are accepted", servers({ command = "x", autoApprove = { "a" }, alwaysAllow = {}, timeout = 5,
  description = "d", transportType = "stdio" })[1].command, "x")
check("foreign keys are logged as warnings", { #m.logs - logs, m.logs[#m.logs][1] }, { 5, "warning" })
H.check_has("the warning names the server and the key", m.logs[logs + 1][2], "mcpServers.s: key ")

---------------------------------------------------------------------------------------------
-- refusals: each names the server and the key

check("not JSON", refused("{"):match("^mcpServers: not valid JSON: ") ~= nil, true)
check("not an object", refused("[]"), "mcpServers must be a JSON object of servers, got array")
check("a string", refused('"x"'), "mcpServers must be a JSON object of servers, got string")
check("server not an object", refused({ s = H.arr({}) }), "mcpServers.s must be an object, got array")
check("server null", refused('{"s":null}'), "mcpServers.s must be an object, got null")
check("unknown key", refused1({ command = "x", comand = "y" }), 'mcpServers.s: unknown key "comand" (known: command, args, env, '
  .. "cwd, url, headers, type, allowedTools, deniedTools, allowWrites, timeoutMs, maxCalls, disabled, perTenant)")
check("neither command nor url", refused1({ args = {} }),
  'mcpServers.s needs "command" (a stdio server) or "url" (a Streamable HTTP server)')
check("both command and url", refused1({ command = "x", url = "http://h" }),
  'mcpServers.s has both "command" (stdio) and "url" (HTTP); give one')
check("type sse", refused1({ type = "sse", url = "http://h/sse" }), 'mcpServers.s.type "sse" is the deprecated HTTP+SSE '
  .. 'transport, which moonbox does not speak; use a Streamable HTTP endpoint ("type": "http")')
check("type unknown", refused1({ type = "websocket", url = "ws://h" }), 'mcpServers.s.type must be "stdio" or "http", got "websocket"')
check("type not a string", refused1({ type = 1, command = "x" }), "mcpServers.s.type must be a string")
check("command with type http", refused1({ type = "http", command = "x" }), 'mcpServers.s: "command" needs type "stdio", got "http"')
check("command empty", refused1({ command = "" }), "mcpServers.s.command must be a non-empty string")
check("command not a string", refused1({ command = H.arr({ "npx" }) }), "mcpServers.s.command must be a non-empty string")
check("command with NUL", refused1({ command = "a\0b" }), "mcpServers.s.command must be a non-empty string")
check("args an object", refused1({ command = "x", args = { a = "b" } }), "mcpServers.s.args must be an array of strings, got object")
check("args a string", refused1({ command = "x", args = "-y" }), "mcpServers.s.args must be an array of strings, got string")
check("args with a number", refused1({ command = "x", args = { "a", 2 } }), "mcpServers.s.args[2] must be a string, got number")
check("args with NUL", refused1({ command = "x", args = { "a\0" } }), "mcpServers.s.args[1] contains a NUL byte")
check("env an array", refused1({ command = "x", env = H.arr({ "A=1" }) }), "mcpServers.s.env must be an object of strings, got array")
check("env value a number", refused1({ command = "x", env = { PORT = 80 } }), "mcpServers.s.env.PORT must be a string, got number")
check("env name with =", refused1({ command = "x", env = { ["A=B"] = "1" } }), 'mcpServers.s.env: "A=B" is not a valid environment variable name')
check("env name empty", refused1({ command = "x", env = { [""] = "1" } }), 'mcpServers.s.env: "" is not a valid environment variable name')
check("cwd empty", refused1({ command = "x", cwd = "" }), "mcpServers.s.cwd must be a non-empty string")
check("headers on a stdio server", refused1({ command = "x", headers = {} }), 'mcpServers.s: "headers" needs "url"')
check("url ftp", refused1({ url = "ftp://h/x" }), "mcpServers.s.url must be an http:// or https:// URL, got ftp://h/x")
check("url without host", refused1({ url = "http://" }), "mcpServers.s.url must be an http:// or https:// URL, got http://")
check("url with a space", refused1({ url = "http://h/a b" }), "mcpServers.s.url must be an http:// or https:// URL, got http://h/a b")
check("url with a line break", refused1({ url = "http://h/\r\nX: y" }):match("^mcpServers.s.url must be") ~= nil, true)
check("url not a string", refused1({ url = 5 }), "mcpServers.s.url must be an http:// or https:// URL, got 5")
check("header name with a space", refused1({ url = "http://h", headers = { ["X Y"] = "v" } }),
  "mcpServers.s.headers.X Y: header names need letters without spaces or colons, and values no line breaks")
check("header name with a colon", refused1({ url = "http://h", headers = { ["X:"] = "v" } }) ~= "accepted", true)
check("header value with a line break", refused1({ url = "http://h", headers = { X = "a\r\nEvil: 1" } }),
  "mcpServers.s.headers.X: header names need letters without spaces or colons, and values no line breaks")
check("header value not a string", refused1({ url = "http://h", headers = { X = true } }), "mcpServers.s.headers.X must be a string, got boolean")
for _, k in ipairs({ "args", "env", "cwd" }) do
  check(k .. " on an http server", refused1({ url = "http://h", [k] = k == "cwd" and "/" or {} }),
    string.format('mcpServers.s: "%s" is for stdio servers (with "command")', k))
end
check("timeoutMs zero", refused1({ command = "x", timeoutMs = 0 }), "mcpServers.s.timeoutMs must be an integer in [1, 3600000], got 0")
check("timeoutMs fraction", refused1({ command = "x", timeoutMs = 1.5 }), "mcpServers.s.timeoutMs must be an integer in [1, 3600000], got 1.5")
check("timeoutMs too large", refused1({ command = "x", timeoutMs = 3600001 }),
  "mcpServers.s.timeoutMs must be an integer in [1, 3600000], got 3600001")
check("maxCalls negative", refused1({ command = "x", maxCalls = -1 }), "mcpServers.s.maxCalls must be an integer in [0, 100000000], got -1")
check("allowWrites another string", refused1({ command = "x", allowWrites = "no" }),
  'mcpServers.s.allowWrites must be true, false or "ask", got "no"')
check("allowWrites is case-sensitive", refused1({ command = "x", allowWrites = "ASK" }),
  'mcpServers.s.allowWrites must be true, false or "ask", got "ASK"')
check("allowWrites a long string is cut in the message", refused1({ command = "x", allowWrites = string.rep("a", 500) }),
  'mcpServers.s.allowWrites must be true, false or "ask", got "' .. string.rep("a", 40) .. '"')
check("allowWrites a number", refused1({ command = "x", allowWrites = 1 }), 'mcpServers.s.allowWrites must be true, false or "ask", got number')
check("allowWrites null", refused('{"s":{"command":"x","allowWrites":null}}'), 'mcpServers.s.allowWrites must be true, false or "ask", got null')
check("allowWrites an object", refused1({ command = "x", allowWrites = { ask = true } }), 'mcpServers.s.allowWrites must be true, false or "ask", got object')
check("allowWrites true", servers({ command = "x", allowWrites = true })[1].writes, "allow")
check("allowWrites false", servers({ command = "x", allowWrites = false })[1].writes, "refuse")
check("allowWrites ask", servers({ command = "x", allowWrites = "ask" })[1].writes, "ask")
check("disabled a number", refused1({ command = "x", disabled = 1 }), "mcpServers.s.disabled must be true or false, got number")
check("allowedTools a string", refused1({ command = "x", allowedTools = "get_*" }),
  "mcpServers.s.allowedTools must be an array of strings, got string")
check("deniedTools with a number", refused1({ command = "x", deniedTools = { 1 } }), "mcpServers.s.deniedTools[1] must be a string, got number")

-- server names
check("name empty", refused({ [""] = { command = "x" } }),
  'mcpServers: server name "" must be 1-64 bytes without control characters or leading/trailing spaces')
check("name 65 bytes", refused({ [string.rep("n", 65)] = { command = "x" } }) ~= "accepted", true)
check("name 64 bytes", parse({ [string.rep("n", 64)] = { command = "x" } })[1].ident, string.rep("n", 64))
check("name with a tab", refused({ ["a\tb"] = { command = "x" } }) ~= "accepted", true)
check("name with a leading space", refused({ [" a"] = { command = "x" } }) ~= "accepted", true)
check("name with a trailing space", refused({ ["a "] = { command = "x" } }) ~= "accepted", true)
check("name with an inner space", parse({ ["my server"] = { command = "x" } })[1].ident, "my_server")
local clash = refused({ ["my-server"] = { command = "x" }, my_server = { command = "y" } })
check("two names, one Lua name", clash:match("^mcpServers: servers \"my[-_]server\" and \"my[-_]server\" both map to the Lua name servers.my_server; rename one$") ~= nil, true)

check("ident keeps identifiers", uc.ident("github_2"), "github_2")
check("ident replaces other bytes", uc.ident("a.b-c d"), "a_b_c_d")
check("ident leading digit", uc.ident("2fa"), "_2fa")
check("ident of UTF-8", uc.ident("caf\xc3\xa9"), "caf__")

-- load parses once
local first = uc.load(H.json_encode({ a = { command = "x" } }))
check("load keeps the first parse", uc.load(H.json_encode({ b = { command = "y" } })) == first, true)
check_error("a bad block raises at load", "mcpServers.s.command", function()
  H.new_mb()
  require("mcp.upstream_config").load(H.json_encode({ s = { command = "" } }))
end)

---------------------------------------------------------------------------------------------
-- refusal(): the per-server policy

local s = servers({ command = "x", allowedTools = { "get_*", "list.items", "a+b" }, deniedTools = { "get_secret*" }, allowWrites = false })[1]
local function ro(name) return { name = name, annotations = { readOnlyHint = true } } end
check("allowed and read-only", uc.refusal(s, ro("get_user")), nil)
check("not in allowedTools", uc.refusal(s, ro("set_user")), 'tool "set_user" of server "s" is not in its allowedTools')
check("glob dot is literal", uc.refusal(s, ro("listXitems")), 'tool "listXitems" of server "s" is not in its allowedTools')
check("glob dot matches itself", uc.refusal(s, ro("list.items")), nil)
check("glob plus is literal", uc.refusal(s, ro("a+b")), nil)
check("glob anchors both ends", uc.refusal(s, ro("xget_user")), 'tool "xget_user" of server "s" is not in its allowedTools')
check("denied wins over allowed", uc.refusal(s, ro("get_secret_key")), 'tool "get_secret_key" of server "s" is in its deniedTools')
check("allowWrites false: no annotations", uc.refusal(s, { name = "get_x" }),
  'tool "get_x" of server "s" is not marked read-only (annotations.readOnlyHint) and the server\'s allowWrites is false')
check("allowWrites false: readOnlyHint must be true, not truthy", uc.refusal(s, { name = "get_x", annotations = { readOnlyHint = "true" } }) ~= nil, true)
check("allowWrites false: annotations as an array", uc.refusal(s, { name = "get_x", annotations = H.arr({ true }) }) ~= nil, true)
local open = servers({ command = "x" })[1]
check("no lists, writes allowed: everything goes", uc.refusal(open, { name = "anything" }), nil)
check("writes allowed: nothing needs approval", uc.needs_approval(open, { name = "anything" }), false)
check("writes refused: nothing is asked about either (refused first)", uc.needs_approval(s, { name = "get_x" }), false)

-- needs_approval(): allowWrites "ask"
local ask = servers({ command = "x", allowWrites = "ask", deniedTools = { "drop_*" } })[1]
check("ask: a tool without annotations is callable", uc.refusal(ask, { name = "write" }), nil)
check("ask: a tool without annotations needs approval", uc.needs_approval(ask, { name = "write" }), true)
check("ask: readOnlyHint false needs approval", uc.needs_approval(ask, { name = "w", annotations = { readOnlyHint = false } }), true)
check("ask: readOnlyHint \"true\" (a string) needs approval", uc.needs_approval(ask, { name = "w", annotations = { readOnlyHint = "true" } }), true)
check("ask: annotations as an array needs approval", uc.needs_approval(ask, { name = "w", annotations = H.arr({ true }) }), true)
check("ask: destructiveHint alone does not make read-only", uc.needs_approval(ask, { name = "w", annotations = { destructiveHint = false } }), true)
check("ask: a read-only tool is never asked about", uc.needs_approval(ask, ro("read")), false)
check("ask: read_only()", { uc.read_only(ro("r")), uc.read_only({ name = "w" }) }, { true, false })
check("ask: deniedTools still refuse", uc.refusal(ask, { name = "drop_table" }), 'tool "drop_table" of server "s" is in its deniedTools')

---------------------------------------------------------------------------------------------
-- placeholders (expand): real files in a temporary secrets directory, read through a stand-in
-- for mb.fs.read with its (data | nil, message) contract

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir .. "/secrets/alice")
local function put(name, data)
  local f = assert(io.open(dir .. "/secrets/alice/" .. name, "wb"))
  f:write(data)
  f:close()
end
put("token", "s3cret\n")
put("two_lines", "a\nb\n")
m.config.data_dir, m.config.tenant_secrets_dir = "/data", dir .. "/secrets"
m.fs = { read = function(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local d = f:read("a")
  f:close()
  return d
end }
local pt = servers({ perTenant = true, url = "https://crm.example.com/${tenant}/mcp",
  headers = { Authorization = "Bearer ${secret:token}", ["X-Team"] = "${tenant}" } })[1]
local x = assert(uc.expand(pt, "alice"))
check("expand: ${tenant} in the url", x.url, "https://crm.example.com/alice/mcp")
check("expand: ${secret:} in a header, one trailing newline removed", x.headers.Authorization, "Bearer s3cret")
check("expand: the parsed spec keeps its placeholders", pt.headers.Authorization, "Bearer ${secret:token}")
local _, missing = uc.expand(pt, "bob")
check("expand: a missing secret names the file, not a value", missing:gsub(" %(.-%)", ""),
  'mcpServers.s.headers.Authorization: the secret "token" of tenant "bob" cannot be read: put it in '
  .. dir .. "/secrets/bob/token")
local ml = servers({ perTenant = true, url = "https://x.example/mcp", headers = { A = "${secret:two_lines}" } })[1]
local _, broken = uc.expand(ml, "alice")
check("expand: a secret with a line break cannot go into a header", broken,
  'mcpServers.s.headers.A: the secret "two_lines" of tenant "alice" has a line break or NUL byte, which a header cannot hold')
local sd = servers({ perTenant = true, command = "srv", args = { "--who=${tenant}" } })[1]
local y = assert(uc.expand(sd, "alice"))
check("expand: a stdio instance's cwd is its tenant_dir", { y.cwd, y.args[1] },
  { "/data/tenants/alice/upstreams/s", "--who=alice" })
local shared = servers({ command = "srv", env = { HOME_COPY = "${env:HOME}", NOPE = "${env:MOONBOX_TEST_UNSET_VAR}" } })[1]
local _, unset = uc.expand(shared, nil)
check("expand: a missing ${env:} variable is named", unset,
  "mcpServers.s.env.NOPE: ${env:MOONBOX_TEST_UNSET_VAR}: moonbox's environment has no MOONBOX_TEST_UNSET_VAR")
local plain = servers({ command = "srv", args = { "a" } })[1]
check("expand: a server without placeholders is used as it is", uc.expand(plain, nil) == plain, true)
os.execute("rm -rf " .. dir)

H.done()
