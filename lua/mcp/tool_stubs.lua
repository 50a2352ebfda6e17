-- mcp/tool_stubs.lua - the typed Lua API of the upstream tools, as served to agents and authors.
--
-- Two places give the LuaLS stubs of mcp/lua_types.lua: get_tool_definition (format "lua" or
-- "both": the stub of one tool beside or instead of its JSON schemas, see docs/catalog.md) and the
-- resource moonbox://types/servers.lua (listed when upstream servers are configured), the stubs
-- of every tool sandbox code can call, to save next to skills for lua-language-server. A tool
-- without an outputSchema gets the result type inferred from the tenant's own successful calls
-- (mcp/result_shapes.lua), marked inferred; the resource is therefore built per tenant, at read.
-- The tools are those of upstream.lua's servers that sandbox code may call; their schemas come
-- from the catalog.

local mb = mb
local cfg = mb.config
local types = require("mcp.lua_types")
local shapes = require("mcp.result_shapes")

local M = {}

M.URI = "moonbox://types/servers.lua"

-- Built files, per tenant: a file of 10,000 tools takes the loop 0.2 to 1 s to build,
-- so a read gives the same text again while nothing it comes from changed (the servers' tool
-- lists, the tenant's result shapes) and it is younger than CACHE_MS (catalog files that take
-- precedence over an upstream's entry are not tracked). At most CACHE_TENANTS files and
-- CACHE_BYTES in all are kept, or one file alone when it is larger (max_message_bytes over 64 MiB).
local CACHE_MS, CACHE_TENANTS, CACHE_BYTES = 10000, 16, 32 * 1048576
local cache, cached, cached_bytes = {}, 0, 0

local SQL_ENTRY = "SELECT definition FROM catalog_tools WHERE category = ? AND name = ?"

local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end

-- upstream: the entry is a callable tool of that upstream server (its results are recorded).
local function stub_input(d, tenant, upstream)
  local server = upstream or d.server or d.category
  local inferred
  if not is_object(d.outputSchema) and (upstream or type(d.source) == "string" and d.source:find("^upstream:")) then
    local sch, n = shapes.schema(tenant, server, d.name)
    if sch then inferred = { schema = sch, results = n } end
  end
  return { server = server, name = d.name, title = d.title, description = d.description,
           inputSchema = d.inputSchema, outputSchema = d.outputSchema, inferred = inferred }
end

-- The stub of one catalog entry (a decoded definition of kind "tool") for tenant, without the
-- title and description the definition already has: the text and the inferred output schema
-- when there is one.
function M.for_entry(d, tenant)
  local t = stub_input(d, tenant)
  return types.stub(t, { brief = true }), t.inferred and t.inferred.schema or nil
end

-- The whole file for tenant: every tool sandbox code may call (listed by its server and not
-- refused by mcpServers' policies), typed from its catalog entry (the upstream's, or a catalog
-- file's that takes precedence), untyped when it has none; bounded by half of max_message_bytes
-- (it travels in one message).
function M.file(up, tenant)
  local ucfg = require("mcp.upstream_config")
  local servers = {}
  for _, s in ipairs(up.list) do
    local srv = { name = s.name, tools = {} }
    for _, t in ipairs(s.tools) do
      if not ucfg.refusal(s.spec, t) then
        local ok, row = pcall(mb.db.row, SQL_ENTRY, s.name, t.name)
        local d = ok and row and mb.json_decode(row.definition)
        if is_object(d) and d.kind == "tool" then
          d.name = t.name
          srv.tools[#srv.tools + 1] = stub_input(d, tenant, s.name)
        else
          srv.tools[#srv.tools + 1] = stub_input({ name = t.name }, tenant, s.name)
        end
      end
    end
    table.sort(srv.tools, function(a, b) return a.name < b.name end)
    if #srv.tools > 0 then servers[#servers + 1] = srv end
  end
  return types.file(servers, cfg.max_message_bytes // 2)
end

-- The sandbox API's own types (mcp/sandbox_types.lua), made once: they depend on nothing but
-- the binary.
local sandbox_file
function M.sandbox_file()
  sandbox_file = sandbox_file or require("mcp.sandbox_types").file(require("catalog.sandbox_api"))
  return sandbox_file
end

-- The stub of one sandbox function's catalog entry (get_tool_definition, format lua or both)
function M.for_function(d)
  local api = require("catalog.sandbox_api")
  for _, cat in pairs(api.categories) do
    local t = cat.tools[d.name]
    if t then return require("mcp.sandbox_types").stub(d.name, t) end
  end
  return nil
end

function M.init(tools)
  local ST = require("mcp.sandbox_types")
  tools.resource_providers[#tools.resource_providers + 1] = {
    list = function()
      return { { uri = ST.URI, name = "types/sandbox.lua", title = "Lua types of the sandbox API",
                 description = "LuaLS annotations (---@meta) of every function sandbox code can call "
                   .. "(json, re, mcp, pii, the workspace and data helpers, skills), for "
                   .. "lua-language-server; `moonbox types DIR` writes it with a .luarc.json",
                 mimeType = "text/x-lua" } }
    end,
    templates = function() return {} end,
    read = function(uri)
      if uri ~= ST.URI then return nil end
      return { { uri = ST.URI, mimeType = "text/x-lua", text = M.sandbox_file() } }
    end,
  }
  tools.resource_providers[#tools.resource_providers + 1] = {
    list = function()
      local up = tools.upstream
      if not up or #up.list == 0 then return {} end
      return { { uri = M.URI, name = "types/servers.lua", title = "Lua types of the upstream tools",
                 description = "LuaLS annotations (---@class, ---@param, ---@return) of every tool "
                   .. "callable as servers.<server>.<tool>(args), for lua-language-server",
                 mimeType = "text/x-lua" } }
    end,
    templates = function() return {} end,
    read = function(uri, request)
      if uri ~= M.URI then return nil end
      local up = tools.upstream
      if not up or #up.list == 0 then return nil end
      local tenant = request.tenant or "default"
      local sig = { shapes.version(tenant) }
      for _, s in ipairs(up.list) do sig[#sig + 1] = tostring(s.refresh_done) .. #s.tools end
      sig = table.concat(sig, ",")
      local c = cache[tenant]
      if not (c and c.sig == sig and mb.now_ms() - c.at < CACHE_MS) then
        local text = M.file(up, tenant)
        if c then cached, cached_bytes = cached - 1, cached_bytes - #c.text end
        if cached >= CACHE_TENANTS or cached_bytes + #text > CACHE_BYTES then
          cache, cached, cached_bytes = {}, 0, 0
        end
        c = { sig = sig, at = mb.now_ms(), text = text }
        cache[tenant] = c
        cached, cached_bytes = cached + 1, cached_bytes + #text
      end
      return { { uri = M.URI, mimeType = "text/x-lua", text = c.text } }
    end,
  }
  tools.server_stats_providers.inferred_types = function() return shapes.stats() end
  if tools.upstream then tools.upstream.on_result = shapes.observe end
end

return M
