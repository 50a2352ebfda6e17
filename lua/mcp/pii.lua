-- mcp/pii.lua - the PII vault and policy: tokens that stand for personal data, per tenant.
--
-- Detection and token minting are C (src/pii*.c): a value's token is its type plus a keyed
-- hash, so the same value gets the same token in every call and after restarts, and a token
-- reveals nothing without the vault. The vault (store table pii_vault) remembers which value a
-- token stands for, per tenant: a token minted for one tenant never restores for another.
--
-- Executions tokenize on their worker thread (pii_policy) and hand back what they replaced;
-- persist() stores it before the response leaves. A collision (the 8-hex-digit token already
-- bound to another value) gives the new value a longer token (12, then 16 digits) and the
-- response text is rewritten to use it. The tools sanitize_pii and restore_pii work on text the
-- client sends; restore_pii and detokenize_pii are refused when pii_restore is 0.

local mb = mb
local null = mb.null
local cfg = mb.config
local db = mb.db

local M = {}

local cache = {}      -- tenant -> { token -> value } of bindings known to be in the vault
local touched = {}    -- tenant -> { token -> ms } when last_seen was last written
local cache_n = 0
local CACHE_MAX = 50000
local TOUCH_MS = 60000 -- last_seen is refreshed at most once a minute per token

local function remember(tenant, token, value)
  if cache_n >= CACHE_MAX then cache, touched, cache_n = {}, {}, 0 end
  local t = cache[tenant]
  if not t then t = {} cache[tenant] = t end
  if t[token] == nil then cache_n = cache_n + 1 end
  t[token] = value
end

-- Whether last_seen of a binding seen again is due for a write.
local function touch_due(tenant, token, now)
  local t = touched[tenant]
  if not t then t = {} touched[tenant] = t end
  if t[token] and now - t[token] < TOUCH_MS then return false end
  t[token] = now
  return true
end

local function lookup(tenant, token)
  local t = cache[tenant]
  local v = t and t[token]
  if v ~= nil then return v end
  local row = db.row("SELECT value FROM pii_vault WHERE tenant = ? AND token = ?", tenant, token)
  if row then remember(tenant, token, row.value) return row.value end
end

-- A token for (type, value) that is free or already bound to this value, starting at `token`.
local function free_token(tenant, token, ttype, value)
  for _, hex in ipairs({ 8, 12, 16 }) do
    local t = hex == 8 and token or mb.pii_token(ttype, value, hex)
    local bound = lookup(tenant, t)
    if bound == nil or bound == value then return t, bound == nil end
  end
  return nil
end

-- Stores what an execution (or a tool) replaced. found: array of {token, type, value}.
-- Returns a map old token -> new token for values whose default token was taken, or nil.
function M.persist(tenant, found)
  if not found or #found == 0 then return nil end
  local now = mb.wall_ms()
  local inserts, remap = {}, nil
  for _, f in ipairs(found) do
    local token, new = free_token(tenant, f.token, f.type, f.value)
    if not token then
      -- every length is bound to other values: never answer with another value's token
      mb.log("error", "pii: no free token for a " .. f.type .. " value (16 hex digits taken)")
      remap = remap or {}
      remap[f.token] = "[" .. f.type .. "_withheld]"
    else
      if token ~= f.token then
        remap = remap or {}
        remap[f.token] = token
      end
      if new or touch_due(tenant, token, now) then inserts[#inserts + 1] = { token, f.type, f.value } end
      remember(tenant, token, f.value)
    end
  end
  if #inserts > 0 then
    db.tx(function()
      for _, r in ipairs(inserts) do
        db.run([[INSERT INTO pii_vault (tenant, token, type, value, first_seen, last_seen)
                 VALUES (?, ?, ?, ?, ?, ?)
                 ON CONFLICT (tenant, token) DO UPDATE SET last_seen = excluded.last_seen]],
          tenant, r[1], r[2], r[3], now, now)
      end
    end)
  end
  return remap
end

-- Replaces tokens in text by remap's new ones (plain text replace: tokens are distinctive).
function M.rewrite(text, remap)
  for old, new in pairs(remap) do
    local out, pos = {}, 1
    while true do
      local a, b = text:find(old, pos, true)
      if not a then break end
      out[#out + 1] = text:sub(pos, a - 1)
      out[#out + 1] = new
      pos = b + 1
    end
    out[#out + 1] = text:sub(pos)
    text = table.concat(out)
  end
  return text
end

-- Applies persist() to an execution's result and rewrites its answer on a collision.
function M.after_execution(tenant, res)
  local remap = M.persist(tenant, res.pii_found)
  res.pii_found = nil
  if not remap then return end
  for _, k in ipairs({ "structured_json", "structured_quoted" }) do
    if res[k] then res[k] = mb.json_raw(M.rewrite(mb.json_raw_text(res[k]), remap)) end
  end
  for _, k in ipairs({ "result_head", "output_head", "error_head" }) do -- the journal's copy
    if res[k] then res[k] = M.rewrite(res[k], remap) end
  end
end

-- Restores the tokens of this tenant's vault in text. Returns text, array of unknown tokens.
function M.restore(tenant, text)
  local unresolved, seen = {}, {}
  local out = text:gsub("%[[A-Z][A-Z0-9_]*_%x+%]", function(token)
    local hex = token:match("_(%x+)%]$")
    if #hex < 8 or #hex > 16 or hex:find("%u") then return nil end
    local v = lookup(tenant, token)
    if v ~= nil then return v end
    if not seen[token] then
      seen[token] = true
      unresolved[#unresolved + 1] = token
    end
    return nil
  end)
  return out, unresolved
end

-- Sanitizes text on the loop thread (tools, workspace reads). Returns sanitized, found, counts.
function M.sanitize(tenant, text, types)
  local function mint(ttype, value, token)
    local t = free_token(tenant, token, ttype, value)
    if not t then error("no free token for a " .. ttype .. " value (16 hex digits are taken)", 0) end
    return t
  end
  local sanitized, found, counts = mb.pii_sanitize(text, mint, types)
  M.persist(tenant, found)
  return sanitized, found, counts
end

-- The policy for text the server itself sends toward the model (workspace reads, resources).
function M.outbound(tenant, text)
  if cfg.pii_policy ~= 1 or type(text) ~= "string" or text == "" then return text end
  local ok, sanitized = pcall(M.sanitize, tenant, text)
  if ok then return sanitized end
  return "[withheld: personal-data scan failed: " .. tostring(sanitized) .. "]"
end

---------------------------------------------------------------------------------------------
-- tools

local TYPE_NAMES = "EMAIL, PHONE, SSN, CARD, IPV4, IPV6, SECRET, IBAN or a custom type"

function M.init(tools)
  local tool_error, structured = tools.tool_error, tools.structured_result

  local function bad_args(args, allowed, name)
    for k in pairs(args) do
      if not allowed[k] then
        return string.format("invalid arguments: %s has no argument %q", name, tostring(k))
      end
    end
  end

  tools.register({
    name = "sanitize_pii",
    title = "Replace personal data by tokens",
    description = "Find personal data and secrets in a text (" .. TYPE_NAMES .. ") and replace "
      .. "each value by a stable token such as [EMAIL_3f9a0c1b]. The same value always gets the "
      .. "same token; restore_pii turns tokens back into values where that is allowed.",
    inputSchema = {
      type = "object",
      properties = {
        text = { type = "string" },
        types = { type = "array", items = { type = "string" },
                  description = "Only these types (default: every enabled type)" },
      },
      required = mb.array({ "text" }),
      additionalProperties = false,
    },
    annotations = { title = "Replace personal data by tokens", readOnlyHint = false,
                    idempotentHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = bad_args(args, { text = true, types = true }, "sanitize_pii")
    if bad then return tool_error(bad) end
    if type(args.text) ~= "string" then return tool_error("invalid arguments: text must be a string") end
    local types = args.types
    if types == null then types = nil end
    if types ~= nil then
      if type(types) ~= "table" then return tool_error("invalid arguments: types must be an array of type names") end
      for _, t in ipairs(types) do
        if type(t) ~= "string" then return tool_error("invalid arguments: types must be an array of type names") end
      end
    end
    if #args.text > cfg.regex_max_subject_bytes then
      return tool_error(string.format("invalid arguments: text is %d bytes, above regex_max_subject_bytes=%d",
        #args.text, cfg.regex_max_subject_bytes))
    end
    local ok, sanitized, found, counts = pcall(M.sanitize, request.tenant or "default", args.text, types)
    if not ok then
      return tool_error(tostring(sanitized):gsub("^[^:]*:%d+: ", ""), nil)
    end
    local list = {}
    for i, f in ipairs(found) do list[i] = { type = f.type, token = f.token, count = f.count } end
    local total = 0
    for _, n in pairs(counts) do total = total + n end
    return structured({ sanitized_text = sanitized, pii_found = mb.array(list), counts = counts,
                        total = total })
  end)

  tools.register({
    name = "restore_pii",
    title = "Restore tokens to personal data",
    description = "Replace tokens made by sanitize_pii or by the automatic policy (such as "
      .. "[EMAIL_3f9a0c1b]) with the values they stand for. Tokens this server does not know "
      .. "for you are left as they are and listed in unresolved.",
    inputSchema = {
      type = "object",
      properties = { text = { type = "string" } },
      required = mb.array({ "text" }),
      additionalProperties = false,
    },
    annotations = { title = "Restore tokens to personal data", readOnlyHint = true,
                    openWorldHint = false },
  }, function(args, request)
    local bad = bad_args(args, { text = true }, "restore_pii")
    if bad then return tool_error(bad) end
    if cfg.pii_restore ~= 1 then
      return tool_error("restoring personal data is disabled by configuration (pii_restore=0)")
    end
    if type(args.text) ~= "string" then return tool_error("invalid arguments: text must be a string") end
    local restored, unresolved = M.restore(request.tenant or "default", args.text)
    return structured({ restored_text = restored, unresolved = mb.array(unresolved) })
  end)

  tools.host_calls.pii_restore = function(a, request)
    if cfg.pii_restore ~= 1 then
      return nil, "detokenize_pii: restoring personal data is disabled by configuration (pii_restore=0)"
    end
    if type(a.text) ~= "string" then return nil, "detokenize_pii: text must be a string" end
    local restored = M.restore(request.tenant or "default", a.text)
    return { text = restored }
  end

  -- The token a value minted in an execution gets when the code was also given its default
  -- token (src/sandbox_seen.c): the vault's choice, stored now, so the given token keeps its
  -- meaning and nothing needs rewriting. The worker sends the default token it computed; a
  -- worker process has no key, so it is checked here.
  tools.host_calls.pii_token = function(a, request)
    if type(a.type) ~= "string" or type(a.value) ~= "string" or type(a.token) ~= "string" then
      return nil, "pii_token: type, value and token must be strings"
    end
    local ok, want = pcall(mb.pii_token, a.type, a.value, 8)
    if not ok or want ~= a.token then return nil, "pii_token: the token is not the value's" end
    local remap = M.persist(request.tenant or "default", { { token = a.token, type = a.type, value = a.value } })
    local t = remap and remap[a.token]
    if t == nil or t:find("_withheld]", 1, true) then return a.token end -- withheld: the host's rewrite decides
    return t
  end

  tools.stats_providers.pii = function(tenant)
    local row = db.row("SELECT count(*) AS n FROM pii_vault WHERE tenant = ?", tenant)
    return { policy = cfg.pii_policy == 1, restore = cfg.pii_restore == 1,
             vault_tokens = row and row.n or 0 }
  end
end

return M
