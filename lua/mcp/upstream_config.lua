-- mcp/upstream_config.lua - the "mcpServers" block: parsed and checked once at start.
--
-- The block has the shape desktop agents use (`command`, `args`, `env`, `cwd` for a stdio server;
-- `url`, `headers` for a Streamable HTTP server), so an existing block can be pasted in, plus
-- moonbox's per-server policy keys. Anything wrong stops the server at start with a message that
-- names the server and the key; keys other programs add (autoApprove, ...) are ignored with a
-- warning. docs/gateway.md is the reference.
--
-- The policy for tools not marked read-only (annotations.readOnlyHint) is `allowWrites`: true
-- (the default) calls them, false refuses them (they are not even listed), "ask" calls them only
-- after the person behind the client approved (mcp/upstream_approval.lua asks).
--
-- Placeholders in args, env, cwd, url and headers are replaced when a server (or, with
-- `"perTenant": true`, one tenant's instance of it) starts, never earlier: `${env:NAME}` (the
-- variable of moonbox's environment), and for perTenant servers `${tenant}`, `${tenant_dir}` (the
-- instance's own directory, DATA_DIR/tenants/TENANT/upstreams/SERVER, also its default cwd) and
-- `${secret:NAME}` (env and headers only: the file TENANT_SECRETS_DIR/TENANT/NAME). The values
-- live only in this process's Lua state and the child's environment or request headers: never in
-- the store, the log, the catalog or a sandbox (docs/tenants.md).

local mb = mb
local null = mb.null
local sfmt = string.format

local M = {}

-- Keys of other MCP clients' configs that mean nothing here: accepted, ignored, logged.
local FOREIGN = { autoApprove = true, alwaysAllow = true, transportType = true, description = true,
                  timeout = true }

local KNOWN = { command = true, args = true, env = true, cwd = true, url = true, headers = true,
                type = true, allowedTools = true, deniedTools = true, allowWrites = true,
                timeoutMs = true, maxCalls = true, disabled = true, perTenant = true }

local function typename(v)
  if v == null then return "null" end
  if type(v) == "table" then return getmetatable(v) == "json.array" and "array" or "object" end
  return type(v)
end

local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end

local function string_list(v, where)
  if v == nil then return nil end
  if type(v) ~= "table" or (getmetatable(v) ~= "json.array" and next(v) ~= nil) then
    error(sfmt("%s must be an array of strings, got %s", where, typename(v)), 0)
  end
  local out = {}
  for i, s in ipairs(v) do
    if type(s) ~= "string" then error(sfmt("%s[%d] must be a string, got %s", where, i, typename(s)), 0) end
    if s:find("%z") then error(sfmt("%s[%d] contains a NUL byte", where, i), 0) end
    out[i] = s
  end
  return out
end

local function string_map(v, where, what)
  if v == nil then return {} end
  if not is_object(v) then error(sfmt("%s must be an object of strings, got %s", where, typename(v)), 0) end
  local out = {}
  for k, s in pairs(v) do
    if type(s) ~= "string" then
      error(sfmt("%s.%s must be a string, got %s", where, k, typename(s)), 0)
    end
    if what == "env" and (k == "" or k:find("[=%z]")) then
      error(sfmt("%s: %q is not a valid environment variable name", where, k), 0)
    end
    if what == "headers" and (k == "" or k:find("[%c:%s]") or s:find("[\r\n%z]")) then
      error(sfmt("%s.%s: header names need letters without spaces or colons, and values no line breaks", where, k), 0)
    end
    out[k] = s
  end
  return out
end

local function integer(v, where, lo, hi)
  if v == nil then return nil end
  if math.type(v) ~= "integer" or v < lo or v > hi then
    error(sfmt("%s must be an integer in [%d, %d], got %s", where, lo, hi, tostring(v)), 0)
  end
  return v
end

local function boolean(v, where, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then error(sfmt("%s must be true or false, got %s", where, typename(v)), 0) end
  return v
end

-- allowWrites: true | false | "ask" -> "allow" | "refuse" | "ask"
local function writes_policy(v, where)
  if v == nil or v == true then return "allow" end
  if v == false then return "refuse" end
  if v == "ask" then return "ask" end
  error(sfmt('%s must be true, false or "ask", got %s', where,
    type(v) == "string" and sfmt("%q", v:sub(1, 40)) or typename(v)), 0)
end

-- "*" matches any run of characters; everything else literally.
local function glob_pattern(g)
  return "^" .. g:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*") .. "$"
end

local function globs(list)
  if not list then return nil end
  local out = {}
  for i, g in ipairs(list) do out[i] = glob_pattern(g) end
  return out
end

local function matches_any(pats, name)
  for _, p in ipairs(pats) do if name:find(p) then return true end end
  return false
end

-- Lua identifier for an MCP name: every other byte becomes "_", a leading digit gets "_".
function M.ident(name)
  local s = name:gsub("[^%w_]", "_")
  if s:find("^%d") or s == "" then s = "_" .. s end
  return s
end

local function one(name, spec)
  local where = sfmt("mcpServers.%s", name)
  if not is_object(spec) then error(sfmt("%s must be an object, got %s", where, typename(spec)), 0) end
  for k in pairs(spec) do
    if not KNOWN[k] then
      if FOREIGN[k] == nil then
        error(sfmt("%s: unknown key %q (known: command, args, env, cwd, url, headers, type, "
          .. "allowedTools, deniedTools, allowWrites, timeoutMs, maxCalls, disabled, perTenant)", where, k), 0)
      end
      mb.log("warning", sfmt("%s: key %q is not used by moonbox; ignored", where, k))
    end
  end
  local s = { name = name, ident = M.ident(name) }
  local t = spec.type
  if t ~= nil and type(t) ~= "string" then error(sfmt("%s.type must be a string", where), 0) end
  if t == "sse" then
    error(sfmt('%s.type "sse" is the deprecated HTTP+SSE transport, which moonbox does not speak; '
      .. 'use a Streamable HTTP endpoint ("type": "http")', where), 0)
  end
  if t ~= nil and t ~= "stdio" and t ~= "http" and t ~= "streamable-http" and t ~= "streamableHttp" then
    error(sfmt('%s.type must be "stdio" or "http", got %q', where, t), 0)
  end
  if spec.command ~= nil and spec.url ~= nil then
    error(sfmt('%s has both "command" (stdio) and "url" (HTTP); give one', where), 0)
  end
  if spec.command ~= nil then
    if t ~= nil and t ~= "stdio" then error(sfmt('%s: "command" needs type "stdio", got %q', where, t), 0) end
    if type(spec.command) ~= "string" or spec.command == "" or spec.command:find("%z") then
      error(sfmt("%s.command must be a non-empty string", where), 0)
    end
    s.transport = "stdio"
    s.command = spec.command
    s.args = string_list(spec.args, where .. ".args") or {}
    s.env = string_map(spec.env, where .. ".env", "env")
    if spec.cwd ~= nil and (type(spec.cwd) ~= "string" or spec.cwd == "") then
      error(sfmt("%s.cwd must be a non-empty string", where), 0)
    end
    s.cwd = spec.cwd
    if spec.url ~= nil or spec.headers ~= nil then error(sfmt('%s: "headers" needs "url"', where), 0) end
  elseif spec.url ~= nil then
    if type(spec.url) ~= "string" or not (spec.url:find("^https?://[^/%s]+") ) or spec.url:find("[%s%c]") then
      error(sfmt("%s.url must be an http:// or https:// URL, got %s", where, tostring(spec.url)), 0)
    end
    s.transport = "http"
    s.url = spec.url
    s.headers = string_map(spec.headers, where .. ".headers", "headers")
    for _, k in ipairs({ "args", "env", "cwd" }) do
      if spec[k] ~= nil then error(sfmt('%s: %q is for stdio servers (with "command")', where, k), 0) end
    end
  else
    error(sfmt('%s needs "command" (a stdio server) or "url" (a Streamable HTTP server)', where), 0)
  end
  s.allowed = globs(string_list(spec.allowedTools, where .. ".allowedTools"))
  s.denied = globs(string_list(spec.deniedTools, where .. ".deniedTools")) or {}
  s.writes = writes_policy(spec.allowWrites, where .. ".allowWrites")
  s.timeout_ms = integer(spec.timeoutMs, where .. ".timeoutMs", 1, 3600000) or mb.config.upstream_timeout_ms
  s.max_calls = integer(spec.maxCalls, where .. ".maxCalls", 0, 100000000)
  s.disabled = boolean(spec.disabled, where .. ".disabled", false)
  s.per_tenant = boolean(spec.perTenant, where .. ".perTenant", false) or nil
  M.check_placeholders(s, where)
  return s
end

---------------------------------------------------------------------------------------------
-- placeholders

local NAME = "^[%w_.%-]+$" -- a secret's or variable's name (a file name: no "/", not "." or "..")
local SECRET_FIELDS = { env = true, headers = true }

-- Calls fn(field, where, text) for every string of a spec that may hold placeholders; a string
-- fn returns replaces the text.
local function each_text(s, where, fn)
  local function list(field, t)
    for i, v in ipairs(t or {}) do t[i] = fn(field, sfmt("%s.%s[%d]", where, field, i), v) or v end
  end
  local function map(field, t)
    for k, v in pairs(t or {}) do t[k] = fn(field, sfmt("%s.%s.%s", where, field, k), v) or v end
  end
  list("args", s.args)
  map("env", s.env)
  map("headers", s.headers)
  if s.cwd then s.cwd = fn("cwd", where .. ".cwd", s.cwd) or s.cwd end
  if s.url then s.url = fn("url", where .. ".url", s.url) or s.url end
end

-- At parse time: every ${...} is one moonbox knows, allowed where it stands.
function M.check_placeholders(s, where)
  each_text(s, where, function(field, at, v)
    for body in v:gmatch("%${([^}]*)}") do
      s.placeholders = true
      local kind, name = body:match("^(%a+):(.*)$")
      if body == "tenant" or body == "tenant_dir" or kind == "secret" then
        if not s.per_tenant then
          error(sfmt('%s: ${%s} needs "perTenant": true (there is one instance for every tenant)', at, body), 0)
        end
      end
      if kind == "secret" and not SECRET_FIELDS[field] then
        error(sfmt("%s: ${secret:...} is allowed in env and headers only (arguments show in process "
          .. "lists, URLs in logs)", at), 0)
      end
      if kind == "secret" or kind == "env" then
        if not name:find(NAME) or name == "." or name == ".." then
          error(sfmt("%s: ${%s:%s}: the name must be letters, digits, _ . or -", at, kind, name:sub(1, 40)), 0)
        end
      elseif body ~= "tenant" and body ~= "tenant_dir" then
        error(sfmt("%s: unknown placeholder ${%s} (known: ${tenant}, ${tenant_dir}, ${secret:NAME}, "
          .. "${env:NAME})", at, body:sub(1, 40)), 0)
      end
    end
  end)
end

local function copy(v)
  if type(v) ~= "table" then return v end
  local out = setmetatable({}, getmetatable(v))
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

-- The directory of tenant's instance of a perTenant server.
function M.tenant_dir(s, tenant)
  return sfmt("%s/tenants/%s/upstreams/%s", mb.config.data_dir, tenant, s.ident)
end

-- The spec with its placeholders replaced for tenant (nil: a server shared by all tenants).
-- Returns the new spec | nil, message (a missing secret or variable; never its value).
function M.expand(s, tenant)
  if not s.per_tenant and not s.placeholders then return s end
  local out, failure = copy(s), nil
  local dir = tenant and M.tenant_dir(s, tenant)
  local secrets = mb.config.tenant_secrets_dir ~= "" and mb.config.tenant_secrets_dir
    or (mb.config.data_dir .. "/secrets")
  each_text(out, "mcpServers." .. s.name, function(field, at, v)
    if not v:find("${", 1, true) then return nil end
    return (v:gsub("%${([^}]*)}", function(body)
      if failure then return "" end
      if body == "tenant" then return tenant end
      if body == "tenant_dir" then return dir end
      local kind, name = body:match("^(%a+):(.*)$")
      if kind == "env" then
        local x = os.getenv(name)
        if x == nil then failure = sfmt("%s: ${env:%s}: moonbox's environment has no %s", at, name, name) end
        return x or ""
      end
      local path = sfmt("%s/%s/%s", secrets, tenant, name)
      local data, err = mb.fs.read(path, 65536)
      if not data then
        failure = sfmt("%s: the secret %q of tenant %q cannot be read (%s): put it in %s", at, name,
          tenant, tostring(err), path)
        return ""
      end
      data = data:gsub("\r?\n$", "")
      if field == "headers" and data:find("[\r\n%z]") then
        failure = sfmt("%s: the secret %q of tenant %q has a line break or NUL byte, which a header cannot hold", at, name, tenant)
        return ""
      end
      return data
    end))
  end)
  if failure then return nil, failure end
  if tenant and out.transport == "stdio" and not out.cwd then out.cwd = dir end
  out.tenant_dir = dir
  return out
end

-- Why a tool may not be called from code, or nil when it may.
function M.refusal(s, tool)
  local name = tool.name
  if s.allowed and not matches_any(s.allowed, name) then
    return sfmt("tool %q of server %q is not in its allowedTools", name, s.name)
  end
  if matches_any(s.denied, name) then
    return sfmt("tool %q of server %q is in its deniedTools", name, s.name)
  end
  if s.writes == "refuse" and not M.read_only(tool) then
    return sfmt("tool %q of server %q is not marked read-only (annotations.readOnlyHint) and the "
      .. "server's allowWrites is false", name, s.name)
  end
  return nil
end

-- Whether the upstream marked the tool read-only: annotations.readOnlyHint exactly true.
function M.read_only(tool)
  local a = tool.annotations
  return is_object(a) and a.readOnlyHint == true
end

-- Whether a call to the tool (one refusal() lets through) needs the person's approval first.
function M.needs_approval(s, tool)
  return s.writes == "ask" and not M.read_only(tool)
end

-- Parses mb.config.mcp_servers (JSON text, "" = none). Returns an array of server specs sorted
-- by name; raises with a message naming the server and key.
function M.parse(text)
  if text == nil or text == "" then return {} end
  local doc, err = mb.json_decode(text)
  if doc == nil then error("mcpServers: not valid JSON: " .. tostring(err), 0) end
  if not is_object(doc) then error("mcpServers must be a JSON object of servers, got " .. typename(doc), 0) end
  -- a whole desktop config pasted into the option: {"mcpServers": {...}}
  if is_object(doc.mcpServers) and next(doc, next(doc)) == nil then doc = doc.mcpServers end
  local list, idents = {}, {}
  for name, spec in pairs(doc) do
    if name == "" or #name > 64 or name:find("[%c]") or name:find("^%s") or name:find("%s$") then
      error(sfmt("mcpServers: server name %q must be 1-64 bytes without control characters or "
        .. "leading/trailing spaces", name), 0)
    end
    local s = one(name, spec)
    if idents[s.ident] then
      error(sfmt("mcpServers: servers %q and %q both map to the Lua name servers.%s; rename one",
        idents[s.ident], name, s.ident), 0)
    end
    idents[s.ident] = name
    list[#list + 1] = s
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  return list
end

-- Parses once (at start, before anything else is set up) and keeps the result.
function M.load(text)
  if not M.specs then M.specs = M.parse(text) end
  return M.specs
end

return M
