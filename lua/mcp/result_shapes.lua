-- mcp/result_shapes.lua - the shapes of upstream tool results, for tools without an outputSchema.
--
-- When a call to an upstream tool that declares no outputSchema succeeds, upstream.lua hands the
-- value sandbox code got (structuredContent, else the decoded JSON text, else the text, else the
-- content blocks) to observe(). What is kept is its shape only: the JSON types seen at each place
-- and the names of object fields, never a value. Shapes of successive calls merge (a field seen in
-- some results only becomes optional; two types become a union), and schema() gives the merged
-- shape as a JSON Schema, which lua_types turns into the tool's "inferred" result type.
--
-- Field names come from an upstream server and may be data rather than names (a map keyed by
-- e-mail addresses, user names, ids): a key is recorded only when it looks like a field name
-- (an identifier-like word of at most 64 bytes without a run of 4 digits, nor digits in two
-- places of one word, as generated ids have) and, when PII detection
-- is configured, mb.pii_scan finds nothing in it. An object with any other key, or with more than
-- MAX_FIELDS distinct keys over time, is recorded as a map (table<string, T>) with no key names.
-- Shapes are kept per tenant (one tenant never sees names from another's results), in memory for
-- the run, bounded: inferred_shape_max_nodes per tool and tenant (0: nothing recorded), nesting
-- MAX_DEPTH, arrays and maps sampled (SAMPLE items per result), and inferred_shape_total_nodes
-- for all shapes together (the least recently updated shapes are dropped first).

local mb = mb
local cfg = mb.config

local M = {}

local MAX_DEPTH = 10
local MAX_FIELDS = 64
local SAMPLE = 16
local VISITS = 4000 -- nodes walked for one result at most

local shapes = {}   -- key (tenant \0 server \0 tool) -> { root, nodes, results, seq, cut }
local count, total, seq = 0, 0, 0
local versions, epoch = {}, 0 -- tenant -> changes of its shapes (what a cached type file checks)
local name_ok = {}  -- key name -> true/false (bounded memo of the checks below)
local name_n = 0

local function is_array(v) return type(v) == "table" and getmetatable(v) == "json.array" end

local function plausible_name(k)
  if type(k) ~= "string" or #k == 0 or #k > 64 then return false end
  if not k:find("^[%a_$][%w_%-]*$") then return false end
  if k:find("%d%d%d%d") then return false end
  -- digits in two places of one word (between "_" and "-"): a generated id (U024BE7LH, a1b2c3),
  -- not a name (utf8, sha256, x509Cert keep theirs in one place)
  for word in k:gmatch("[^_%-]+") do
    if word:find("%d%D+%d") then return false end
  end
  return true
end

-- Whether key k may be recorded as a field name. Only plausible names (at most 64 bytes) are
-- remembered: a key of any size from an upstream's result must not outlive the result.
local function good_name(k)
  if not plausible_name(k) then return false end
  local v = name_ok[k]
  if v ~= nil then return v end
  v = true
  if mb.pii_scan then
    local ok, found = pcall(mb.pii_scan, k)
    v = ok and type(found) == "table" and #found == 0
  end
  if name_n >= 10000 then name_ok, name_n = {}, 0 end
  name_ok[k], name_n = v, name_n + 1
  return v
end
M.good_name = good_name

local function kind(v)
  local t = type(v)
  if t == "string" or t == "boolean" then return t end
  if t == "number" then return math.type(v) == "integer" and "integer" or "number" end
  if t == "userdata" then return "null" end
  if t == "table" then return is_array(v) and "array" or "object" end
  return nil
end

-- nodes: { kinds = {kind = true}, objects = n, props = {name -> {node, n}} | nil, nprops,
--          map = node | nil, items = node | nil }

local function size(node)
  if not node then return 0 end
  local n = 1
  if node.props then for _, p in pairs(node.props) do n = n + size(p.node) end end
  n = n + size(node.map) + size(node.items)
  return n
end

local Rec = {}
Rec.__index = Rec

function Rec:new_node()
  if self.shape.nodes >= self.max then
    if not self.shape.cut then self.changed = true end
    self.shape.cut = true
    return nil
  end
  self.changed = true
  self.shape.nodes = self.shape.nodes + 1
  total = total + 1
  return { kinds = {}, objects = 0 }
end

function Rec:to_map(node)
  local freed = 0
  for _, p in pairs(node.props) do freed = freed + size(p.node) end
  node.props, node.nprops = nil, nil
  self.changed = true
  self.shape.nodes = self.shape.nodes - freed
  total = total - freed
  node.map = node.map or self:new_node()
end

function Rec:walk(v, node, depth)
  if self.visits <= 0 then return end
  self.visits = self.visits - 1
  local k = kind(v)
  if not k then return end
  if not node.kinds[k] then
    node.kinds[k] = true
    self.changed = true
  end
  if depth >= MAX_DEPTH then return end
  if k == "array" then
    if v[1] == nil then return end
    node.items = node.items or self:new_node()
    if not node.items then return end
    local n = #v
    local step = n <= SAMPLE and 1 or n / SAMPLE
    for i = 1, math.min(n, SAMPLE) do
      self:walk(v[math.floor((i - 1) * step) + 1], node.items, depth + 1)
    end
  elseif k == "object" then
    node.objects = node.objects + 1
    if not node.map then
      local keys, all_good = 0, true
      for key in pairs(v) do
        keys = keys + 1
        if keys > MAX_FIELDS or not good_name(key) then all_good = false break end
      end
      if all_good then
        node.props = node.props or {}
        node.nprops = node.nprops or 0
        for key in pairs(v) do
          if not node.props[key] then node.nprops = node.nprops + 1 end
        end
        if node.nprops > MAX_FIELDS then all_good = false
        else
          for key, x in pairs(v) do
            local p = node.props[key]
            if not p then
              local nn = self:new_node()
              if nn then
                -- a field first seen now was missing from the objects before
                p = { node = nn, n = 0 }
                node.props[key] = p
              else
                node.nprops = node.nprops - 1
              end
            end
            if p then
              p.n = p.n + 1
              self:walk(x, p.node, depth + 1)
            end
          end
          -- a field every earlier object had and this one lacks becomes optional
          for key, p in pairs(node.props) do
            if v[key] == nil and p.n == node.objects - 1 then self.changed = true end
          end
          return
        end
      end
      if node.props then self:to_map(node) else node.map = node.map or self:new_node() end
    end
    if not node.map then return end
    local i = 0
    for _, x in pairs(v) do
      i = i + 1
      if i > SAMPLE then break end
      self:walk(x, node.map, depth + 1)
    end
  end
end

local function evict()
  -- drop the least recently updated shapes until a tenth of the budget is free
  local list = {}
  for key, s in pairs(shapes) do list[#list + 1] = { key = key, seq = s.seq, nodes = s.nodes } end
  table.sort(list, function(a, b) return a.seq < b.seq end)
  local goal = math.floor(cfg.inferred_shape_total_nodes * 0.9)
  for _, e in ipairs(list) do
    if total <= goal then break end
    local tenant = e.key:match("^(.-)%z")
    versions[tenant] = (versions[tenant] or 0) + 1
    shapes[e.key] = nil
    count = count - 1
    total = total - e.nodes
  end
end

-- Records the shape of value, a successful result of tool of server for tenant.
function M.observe(tenant, server, tool, value)
  local max = cfg.inferred_shape_max_nodes
  if not max or max <= 0 then return end
  tenant = tostring(tenant)
  local key = tenant .. "\0" .. server .. "\0" .. tool
  local s = shapes[key]
  if not s then
    s = { nodes = 0, results = 0 }
    shapes[key] = s
    count = count + 1
  end
  seq = seq + 1
  s.seq = seq
  local r = setmetatable({ shape = s, max = max, visits = VISITS }, Rec)
  s.root = s.root or r:new_node()
  if s.root then r:walk(value, s.root, 0) end
  s.results = s.results + 1
  if r.changed or s.results == 1 then versions[tenant] = (versions[tenant] or 0) + 1 end
  if total > cfg.inferred_shape_total_nodes then evict() end
end

local function schema_of(node, depth)
  if not node then return {} end
  local alts = {}
  local k = node.kinds
  for _, t in ipairs({ "string", "integer", "number", "boolean", "null" }) do
    if k[t] and not (t == "integer" and k.number) then alts[#alts + 1] = { type = t } end
  end
  if k.object then
    local o = { type = "object" }
    if node.props then
      local props, req = {}, {}
      local names = {}
      for name in pairs(node.props) do names[#names + 1] = name end
      table.sort(names)
      for _, name in ipairs(names) do
        local p = node.props[name]
        props[name] = schema_of(p.node, depth + 1)
        if p.n >= node.objects then req[#req + 1] = name end
      end
      o.properties = props
      o.required = mb.array(req)
    elseif node.map then
      o.additionalProperties = schema_of(node.map, depth + 1)
    end
    alts[#alts + 1] = o
  end
  if k.array then
    alts[#alts + 1] = { type = "array", items = node.items and schema_of(node.items, depth + 1) or nil }
  end
  if #alts == 0 then return {} end
  if #alts == 1 then return alts[1] end
  return { anyOf = mb.array(alts) }
end

-- The merged shape of a tool's results for tenant as a JSON Schema, and the number of results
-- it comes from, or nil when none was recorded.
function M.schema(tenant, server, tool)
  local s = shapes[tostring(tenant) .. "\0" .. server .. "\0" .. tool]
  if not s or not s.root or s.results == 0 then return nil end
  local sch = schema_of(s.root, 0)
  sch.description = string.format("inferred from %d successful result%s of this tenant's calls "
    .. "(types and field names only)%s", s.results, s.results == 1 and "" or "s",
    s.cut and string.format("; cut at inferred_shape_max_nodes=%d", cfg.inferred_shape_max_nodes) or "")
  return sch, s.results
end

-- Changes whenever a shape of tenant changes (the result counts in descriptions excepted).
function M.version(tenant)
  return epoch .. "." .. (versions[tostring(tenant)] or 0)
end

function M.stats()
  return { shapes = count, nodes = total }
end

function M.reset()
  shapes, count, total, seq, versions, epoch = {}, 0, 0, 0, {}, epoch + 1
end

return M
