-- mcp/tool_stubs.lua - the typed Lua API of the upstream tools, as served to agents and authors.
--
-- Two places give the LuaLS stubs of mcp/lua_types.lua: get_tool_definition (format "lua" or
-- "both": the stub of one tool beside or instead of its JSON schemas, see docs/catalog.md) and the
-- resource moonbox://types/servers.lua (listed when upstream servers are configured), the stubs
-- of every tool sandbox code can call, to save next to skills for lua-language-server. A tool
-- without an outputSchema gets the result type inferred from the tenant's own successful calls
-- (mcp/result_shapes.lua), marked inferred; the resource is therefore built per tenant, at read.
-- The tools come from the catalog's upstream sources (the callable tools, with their schemas).

local mb = mb
local cfg = mb.config
local types = require("mcp.lua_types")
local shapes = require("mcp.result_shapes")

local M = {}

M.URI = "moonbox://types/servers.lua"

local SQL_UPSTREAM = "SELECT category, definition FROM catalog_tools WHERE source LIKE 'upstream:%' "
  .. "ORDER BY category, name"

local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end

local function stub_input(d, tenant)
  local inferred
  if not is_object(d.outputSchema) and type(d.source) == "string" and d.source:find("^upstream:") then
    local sch, n = shapes.schema(tenant, d.server or d.category, d.name)
    if sch then inferred = { schema = sch, results = n } end
  end
  return { server = d.server or d.category, name = d.name, title = d.title, description = d.description,
           inputSchema = d.inputSchema, outputSchema = d.outputSchema, inferred = inferred }
end

-- The stub of one catalog entry (a decoded definition of kind "tool") for tenant, without the
-- title and description the definition already has: the text and the inferred output schema
-- when there is one.
function M.for_entry(d, tenant)
  local t = stub_input(d, tenant)
  return types.stub(t, { brief = true }), t.inferred and t.inferred.schema or nil
end

-- The whole file for tenant, bounded by half of max_message_bytes (it travels in one message).
function M.file(tenant)
  local servers, by = {}, {}
  local ok, rows = pcall(mb.db.query, SQL_UPSTREAM)
  if not ok then rows = {} end
  for _, r in ipairs(rows) do
    local d = mb.json_decode(r.definition)
    if is_object(d) and d.kind == "tool" and type(d.name) == "string" then
      local sname = type(d.server) == "string" and d.server or r.category
      local srv = by[sname]
      if not srv then
        srv = { name = sname, tools = {} }
        by[sname] = srv
        servers[#servers + 1] = srv
      end
      srv.tools[#srv.tools + 1] = stub_input(d, tenant)
    end
  end
  return types.file(servers, cfg.max_message_bytes // 2)
end

function M.init(tools)
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
      return { { uri = M.URI, mimeType = "text/x-lua", text = M.file(request.tenant or "default") } }
    end,
  }
  tools.server_stats_providers.inferred_types = function() return shapes.stats() end
  if tools.upstream then tools.upstream.on_result = shapes.observe end
end

return M
