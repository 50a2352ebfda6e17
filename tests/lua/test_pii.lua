-- tests/lua/test_pii.lua - the PII vault and policy (lua/mcp/pii.lua) on a real SQLite store made
-- from lua/mcp/schema.lua through the sqlite3 shell (skipped when it is missing): bindings per
-- tenant, collisions that get longer tokens, the answer rewritten after a collision, restore
-- (which tokens are looked up at all), the outbound policy, last_seen refreshes, and the
-- sanitize_pii / restore_pii tools and detokenize_pii host call with their argument checks.
-- Detection and token minting are C (src/pii*.c); here mb.pii_token and mb.pii_sanitize are
-- stand-ins that find e-mail addresses and mint "[EMAIL_<hex>]" from a hash, and a test can force
-- a token to collide. End to end: tests/integration/pii.test.mjs, security/pii.test.mjs.
-- Standalone: `lua5.4 tests/lua/test_pii.lua` from the repo root.

local H = dofile((arg[0]:match("^(.*/)") or "./") .. "harness.lua")
local check, check_has = H.check, H.check_has
local NULL = H.NULL

local db = H.sqlite_db()
if not db then
  print("skip: sqlite3 shell not found; the PII vault tests need it")
  H.done()
end

local forced = {} -- value .. ":" .. hexchars -> token, to make collisions
local function hex_of(value)
  local h1, h2 = 2166136261, 5381
  for i = 1, #value do
    h1 = ((h1 ~ value:byte(i)) * 16777619) & 0xffffffff
    h2 = ((h2 * 33) + value:byte(i)) & 0xffffffff
  end
  return string.format("%08x%08x", h1, h2)
end

local m
local function fresh(config)
  m = H.new_mb(config)
  m.db = db
  m.pii_token = function(ttype, value, hex)
    return forced[value .. ":" .. hex] or ("[" .. ttype .. "_" .. hex_of(value):sub(1, hex) .. "]")
  end
  -- finds e-mail addresses; mint(type, value, default) picks each token, as src/pii_lua.c does
  m.pii_sanitize = function(text, mint, types)
    if types then
      local on = false
      for _, t in ipairs(types) do if t == "EMAIL" then on = true end end
      if not on then return text, {}, {} end
    end
    local found, by_value, counts = {}, {}, {}
    local out = text:gsub("[%w%.]+@[%w]+%.%a+", function(v)
      local f = by_value[v]
      if not f then
        f = { type = "EMAIL", value = v, token = mint("EMAIL", v, m.pii_token("EMAIL", v, 8)), count = 0 }
        by_value[v] = f
        found[#found + 1] = f
      end
      f.count = f.count + 1
      counts.EMAIL = (counts.EMAIL or 0) + 1
      return f.token
    end)
    return out, found, counts
  end
  local tools = H.load_tools()
  return tools, tools.pii
end

local tools, pii = fresh()
db.migrate(require("mcp.schema"))
local T8 = function(v) return m.pii_token("EMAIL", v, 8) end
local T12 = function(v) return m.pii_token("EMAIL", v, 12) end
local function vault(tenant, token)
  local r = db.row("SELECT type, value, first_seen, last_seen FROM pii_vault WHERE tenant = ? AND token = ?", tenant, token)
  return r
end

---------------------------------------------------------------------------------------------
-- persist and restore

local ann = "ann@example.com"
check("token shape", T8(ann):match("^%[EMAIL_%x%x%x%x%x%x%x%x%]$") ~= nil, true)
check("new binding: no remap", pii.persist("default", { { token = T8(ann), type = "EMAIL", value = ann } }), nil)
check("new binding stored", vault("default", T8(ann)), { type = "EMAIL", value = ann, first_seen = m.wall, last_seen = m.wall })
check("nothing to persist", pii.persist("default", {}), nil)
check("nil to persist", pii.persist("default", nil), nil)

local restored, unresolved = pii.restore("default", "write to " .. T8(ann) .. " and " .. T8(ann))
check("restore", { restored, unresolved }, { "write to " .. ann .. " and " .. ann, {} })
restored, unresolved = pii.restore("other", "write to " .. T8(ann) .. ", " .. T8(ann))
check("another tenant's token does not restore", { restored, unresolved },
  { "write to " .. T8(ann) .. ", " .. T8(ann), { T8(ann) } })

-- which bracketed texts count as tokens
local hex = T8(ann):match("_(%x+)%]")
local upper = "[EMAIL_" .. hex:upper() .. "]"
local seven, seventeen = "[EMAIL_1234567]", "[EMAIL_12345678901234567]"
restored, unresolved = pii.restore("default", table.concat({ upper, seven, seventeen, "[email_" .. hex .. "]",
  "[MY_TYPE_abcdef12]", "[MY_TYPE_abcdef12]", "[EMAIL_1234567890abcdef]" }, " "))
check("only 8-16 lowercase hex digits after an upper-case type are tokens",
  unresolved, { "[MY_TYPE_abcdef12]", "[EMAIL_1234567890abcdef]" })
check("non-tokens are left as they are", restored, table.concat({ upper, seven, seventeen, "[email_" .. hex .. "]",
  "[MY_TYPE_abcdef12]", "[MY_TYPE_abcdef12]", "[EMAIL_1234567890abcdef]" }, " "))

-- the vault, not only the cache: a fresh module instance reads the store
tools, pii = fresh()
check("restore from the store after a restart", pii.restore("default", T8(ann)), ann)

---------------------------------------------------------------------------------------------
-- collisions

local bob, carl = "bob@example.com", "carl@example.com"
forced[bob .. ":8"] = T8(ann) -- bob's default token is ann's
local remap = pii.persist("default", { { token = T8(ann), type = "EMAIL", value = bob } })
check("collision: a longer token", remap, { [T8(ann)] = T12(bob) })
check("collision: 12 hex digits", #(T12(bob):match("^%[EMAIL_(%x+)%]$") or ""), 12)
check("collision: the new binding", vault("default", T12(bob)).value, bob)
check("collision: the old binding is untouched", vault("default", T8(ann)).value, ann)
check("collision in another tenant is no collision", pii.persist("t2", { { token = T8(ann), type = "EMAIL", value = bob } }), nil)
check("... and binds the short token there", pii.restore("t2", T8(ann)), bob)

-- every length taken: the value is withheld, never answered with another value's token
forced[carl .. ":8"] = T8(ann)
forced[carl .. ":12"] = T12(bob)
forced[carl .. ":16"] = T8(ann)
local logs = #m.logs
remap = pii.persist("default", { { token = T8(ann), type = "EMAIL", value = carl } })
check("all lengths taken: withheld", remap, { [T8(ann)] = "[EMAIL_withheld]" })
check("... logged as an error", { #m.logs, m.logs[#m.logs] and m.logs[#m.logs][1] }, { logs + 1, "error" })
check("... and nothing stored for it", db.row("SELECT count(*) AS n FROM pii_vault WHERE value = ?", carl).n, 0)

-- rewrite and after_execution
check("rewrite", pii.rewrite("a [X_11111111] b [X_11111111] [Y_22222222]", { ["[X_11111111]"] = "[X_11111111aaaa]",
  ["[Y_22222222]"] = "[Y_withheld]" }), "a [X_11111111aaaa] b [X_11111111aaaa] [Y_withheld]")
check("rewrite is plain text, not a pattern", pii.rewrite("%a.b", { ["%a."] = "x" }), "xb")

local dave = "dave@example.com"
forced[dave .. ":8"] = T8(ann)
local res = { pii_found = { { token = T8(ann), type = "EMAIL", value = dave } },
  structured_json = m.json_raw('{"result":"' .. T8(ann) .. '","output":"mail ' .. T8(ann) .. '"}'),
  structured_quoted = m.json_raw('"{\\"result\\":\\"' .. T8(ann) .. '\\"}"'),
  result_head = '"' .. T8(ann) .. '"', output_head = "mail " .. T8(ann), error_head = "no " .. T8(ann) }
pii.after_execution("default", res)
check("after_execution rewrites the journal's heads too", { res.result_head, res.output_head, res.error_head },
  { '"' .. T12(dave) .. '"', "mail " .. T12(dave), "no " .. T12(dave) })
check("after_execution rewrites both texts of the answer", { m.json_raw_text(res.structured_json),
  m.json_raw_text(res.structured_quoted), res.pii_found },
  { '{"result":"' .. T12(dave) .. '","output":"mail ' .. T12(dave) .. '"}',
    '"{\\"result\\":\\"' .. T12(dave) .. '\\"}"', nil })
res = { pii_found = { { token = T8("eve@example.com"), type = "EMAIL", value = "eve@example.com" } }, output = "o" }
pii.after_execution("default", res)
check("after_execution without a collision changes nothing", { res.output, res.pii_found }, { "o", nil })
check("... but stores the binding", pii.restore("default", T8("eve@example.com")), "eve@example.com")

---------------------------------------------------------------------------------------------
-- last_seen: refreshed at most once a minute per token

tools, pii = fresh()
local fay = "fay@example.com"
local w0 = m.wall
pii.persist("default", { { token = T8(fay), type = "EMAIL", value = fay } })
m.wall = w0 + 10
pii.persist("default", { { token = T8(fay), type = "EMAIL", value = fay } })
check("seen again: last_seen written", vault("default", T8(fay)).last_seen, w0 + 10)
m.wall = w0 + 20
pii.persist("default", { { token = T8(fay), type = "EMAIL", value = fay } })
check("seen again within a minute: not written", vault("default", T8(fay)).last_seen, w0 + 10)
m.wall = w0 + 70011
pii.persist("default", { { token = T8(fay), type = "EMAIL", value = fay } })
check("seen again a minute later: written", vault("default", T8(fay)), { type = "EMAIL", value = fay, first_seen = w0, last_seen = w0 + 70011 })

---------------------------------------------------------------------------------------------
-- sanitize and the outbound policy

local gus = "gus@example.com"
forced[gus .. ":8"] = T8(ann)
local sanitized, found, counts = pii.sanitize("default", "from " .. gus .. " to " .. gus .. " and " .. ann)
check("sanitize: a colliding value gets its longer token", sanitized, "from " .. T12(gus) .. " to " .. T12(gus) .. " and " .. T8(ann))
check("sanitize: found and counts", { #found, counts }, { 2, { EMAIL = 3 } })
check("sanitize: stored", pii.restore("default", sanitized), "from " .. gus .. " to " .. gus .. " and " .. ann)
check("outbound with the policy on", pii.outbound("default", "cc " .. ann), "cc " .. T8(ann))
check("outbound of empty text", pii.outbound("default", ""), "")
check("outbound of a non-string", pii.outbound("default", 5), 5)
check("outbound when no token is free", pii.outbound("default", "to " .. carl),
  "[withheld: personal-data scan failed: no free token for a EMAIL value (16 hex digits are taken)]")

---------------------------------------------------------------------------------------------
-- the tools

local function text_of(r) return r and r.content and r.content[1] and r.content[1].text end
local sanitize_tool = tools.by_name.sanitize_pii.handler
local restore_tool = tools.by_name.restore_pii.handler

check("sanitize_pii unknown argument", text_of(sanitize_tool({ text = "x", mode = 1 }, H.request())),
  'invalid arguments: sanitize_pii has no argument "mode"')
check("sanitize_pii text missing", text_of(sanitize_tool({}, H.request())), "invalid arguments: text must be a string")
check("sanitize_pii types not a list", text_of(sanitize_tool({ text = "x", types = "EMAIL" }, H.request())),
  "invalid arguments: types must be an array of type names")
check("sanitize_pii types with a number", text_of(sanitize_tool({ text = "x", types = H.arr({ "EMAIL", 1 }) }, H.request())),
  "invalid arguments: types must be an array of type names")
local r = sanitize_tool({ text = "hi " .. ann .. ", " .. ann, types = NULL }, H.request())
check("sanitize_pii result", r.structuredContent, { sanitized_text = "hi " .. T8(ann) .. ", " .. T8(ann),
  pii_found = { { type = "EMAIL", token = T8(ann), count = 2 } }, counts = { EMAIL = 2 }, total = 2 })
r = sanitize_tool({ text = "hi " .. ann, types = H.arr({ "PHONE" }) }, H.request())
check("sanitize_pii with other types", { r.structuredContent.sanitized_text, r.structuredContent.total }, { "hi " .. ann, 0 })
r = sanitize_tool({ text = "to " .. carl }, H.request())
check("sanitize_pii when no token is free", { r.isError, text_of(r) },
  { true, "no free token for a EMAIL value (16 hex digits are taken)" })

check("restore_pii unknown argument", text_of(restore_tool({ text = "x", tenant = "t2" }, H.request())),
  'invalid arguments: restore_pii has no argument "tenant"')
check("restore_pii text type", text_of(restore_tool({ text = 1 }, H.request())), "invalid arguments: text must be a string")
r = restore_tool({ text = T8(ann) .. " [EMAIL_00000000]" }, H.request())
check("restore_pii result", r.structuredContent, { restored_text = ann .. " [EMAIL_00000000]", unresolved = { "[EMAIL_00000000]" } })
check("restore_pii for the request's tenant", restore_tool({ text = T8(ann) }, H.request("t2")).structuredContent.restored_text, bob)
check("detokenize_pii host call", tools.host_calls.pii_restore({ text = T8(ann) }, H.request()), { text = ann })
check("detokenize_pii text type", { tools.host_calls.pii_restore({}, H.request()) }, { nil, "detokenize_pii: text must be a string" })
check("vault size in the stats", tools.stats_providers.pii("t2"), { policy = true, restore = true, vault_tokens = 1 })

-- pii_restore = 0, pii_policy = 0
tools, pii = fresh({ pii_restore = 0, pii_policy = 0 })
restore_tool = tools.by_name.restore_pii.handler
check("restore_pii disabled", text_of(restore_tool({ text = T8(ann) }, H.request())),
  "restoring personal data is disabled by configuration (pii_restore=0)")
check("restore_pii disabled: bad arguments are named first", text_of(restore_tool({ x = 1 }, H.request())),
  'invalid arguments: restore_pii has no argument "x"')
check("detokenize_pii disabled", { tools.host_calls.pii_restore({ text = T8(ann) }, H.request()) },
  { nil, "detokenize_pii: restoring personal data is disabled by configuration (pii_restore=0)" })
check("outbound with the policy off", pii.outbound("default", "cc " .. ann), "cc " .. ann)
check("stats with both off", tools.stats_providers.pii("nobody"), { policy = false, restore = false, vault_tokens = 0 })

-- the long subject limit
tools, pii = fresh({ regex_max_subject_bytes = 1024 })
check("sanitize_pii text above regex_max_subject_bytes", text_of(tools.by_name.sanitize_pii.handler({ text = string.rep("a", 1025) }, H.request())),
  "invalid arguments: text is 1025 bytes, above regex_max_subject_bytes=1024")

db.close()
H.done()
