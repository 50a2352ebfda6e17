-- mcp/workspace_tools.lua - the workspace as MCP tools and as MCP resources.
--
-- Tools: write_workspace_file, read_workspace_file, list_workspace_files, delete_workspace_file
-- (text as UTF-8, anything else with encoding="base64"). Resources: every workspace file as
-- moonbox://workspace/<path> and every skill as moonbox://skills/<name>, with templates for both,
-- so clients can browse what the agent built. The files themselves are handled by the C
-- workspace module (src/workspace.c: kernel-enforced confinement and quotas); this file only
-- shapes arguments and results.
--
-- File names pass the PII policy like file contents (docs/pii.md, "File names"): listings and
-- resources show a path with its personal data as tokens (customers/[EMAIL_3f9a0c1b]/r.txt),
-- and every tool and resources/read take that path back, its tokens restored from the calling
-- tenant's vault (a write only when pii_restore allows: it would name a new file after a value).

local mb = mb
local null = mb.null
local cfg = mb.config
local ws = mb.workspace
local skills = require("mcp.skills")
local pii = require("mcp.pii")

local M = {}

local WS_PREFIX = "moonbox://workspace/"
local SKILL_PREFIX = "moonbox://skills/"

local function obj(props, required)
  return { type = "object", properties = props, required = required and mb.array(required) or nil,
           additionalProperties = false }
end

-- A file tool's schema: path or its alias filename, so neither is in required (a client that
-- checks arguments against the schema lets filename through; the handler asks for one). Not
-- anyOf of two required lists: some model APIs refuse anyOf at the top of a tool's schema.
local function file_obj(props, required)
  props.path.description = (props.path.description or "Relative path")
    .. " (required, or give it as filename)"
  return obj(props, required)
end

local MIME = {
  txt = "text/plain", md = "text/markdown", json = "application/json", csv = "text/csv",
  lua = "text/x-lua", html = "text/html", xml = "application/xml", yaml = "application/yaml",
  yml = "application/yaml", png = "image/png", jpg = "image/jpeg", jpeg = "image/jpeg",
  gif = "image/gif", svg = "image/svg+xml", pdf = "application/pdf", wav = "audio/wav",
  mp3 = "audio/mpeg", log = "text/plain", tsv = "text/tab-separated-values",
}

local function mime_of(path)
  local ext = path:match("%.([%w]+)$")
  return ext and MIME[ext:lower()] or "application/octet-stream"
end

-- Percent-encodes a workspace path for a URI (keeps "/" and unreserved characters).
local function uri_encode(path)
  return (path:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function uri_decode(s)
  if s:find("%%[^%x]") or s:find("%%%x?$") then return nil end
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end


-- File names and the PII policy. shown: the path as the client sees it (tokens for values).
-- real: the path a client gave, with this tenant's tokens restored (none without the policy,
-- since listings then show the values; for a new file only when pii_restore allows it).
local POLICY = cfg.pii_policy == 1
local function shown(tenant, path)
  if not POLICY then return path end
  return pii.outbound(tenant, path)
end
local function real(tenant, path, creating)
  if not POLICY or not path:find("[", 1, true) or (creating and cfg.pii_restore ~= 1) then return path end
  return (pii.restore(tenant, path))
end
-- Runs op(path) on the restored path, and on the path as given when that is a different file
-- that exists (a name that holds a token's text itself). Returns what op returns.
local function on_real(tenant, path, creating, op)
  local r = real(tenant, path, creating)
  if r == path then return op(path) end
  local a, b, c = op(r)
  if a == nil and c == "not_found" or a == false then
    local a2, b2, c2 = op(path)
    if a2 ~= nil and a2 ~= false then return a2, b2, c2 end
  end
  return a, b, c
end
-- An error about a path the client named: the real path in it becomes its tokens again.
local function shown_err(tenant, err)
  if not POLICY or type(err) ~= "string" then return err end
  return pii.outbound(tenant, err)
end

local function encoding_arg(args)
  local e = args.encoding
  if e == nil or e == null then return "utf8" end
  if e ~= "utf8" and e ~= "base64" then return nil, 'invalid arguments: encoding must be "utf8" or "base64"' end
  return e
end

-- Argument names other code-execution servers use, accepted as documented aliases
-- (docs/workspace.md): filename for path, subpath for dir, and path for dir where a tool takes
-- no path (list_workspace_files: every other workspace tool calls its place path). Renames them
-- in args (the request's own table), or returns nil and an error when both names are given.
local ALIASES = { { "filename", "path" }, { "subpath", "dir" }, { "path", "dir" } }
local function canonical(args, allowed)
  for _, a in ipairs(ALIASES) do
    local alias, name = a[1], a[2]
    if allowed[name] and not allowed[alias] and args[alias] ~= nil then
      if args[name] ~= nil then
        return nil, string.format("invalid arguments: give %s or %s, not both", name, alias)
      end
      args[name], args[alias] = args[alias], nil
    end
  end
  return args
end

function M.init(tools)
  local tool_error, structured = tools.tool_error, tools.structured_result
  -- tools.check_args, after the aliases are renamed
  local function check_args(args, allowed, tool)
    local ok, err = canonical(args, allowed)
    if not ok then return err end
    return tools.check_args(args, allowed, tool)
  end

  local function with_path(args)
    if type(args.path) ~= "string" then
      return nil, args.path == nil and "invalid arguments: path is required (or filename)"
        or "invalid arguments: path must be a string"
    end
    return args.path
  end

  tools.register({
    name = "write_workspace_file",
    title = "Write a workspace file",
    description = "Create or replace a file in your workspace (kept between calls; sandbox code "
      .. "reads it with read_file). Paths are relative, '/' separated. The write is atomic. "
      .. string.format("Limits: %d bytes per file, %d bytes and %d files in all.",
        cfg.workspace_max_file_bytes, cfg.workspace_max_bytes, cfg.workspace_max_files),
    inputSchema = file_obj({
      path = { type = "string", description = "Relative path, e.g. data/orders.json" },
      filename = { type = "string", description = "Another name for path" },
      content = { type = "string", description = "The file content (UTF-8 text, or base64)" },
      encoding = { type = "string", enum = mb.array({ "utf8", "base64" }), default = "utf8" },
    }, { "content" }),
    annotations = { title = "Write a workspace file", readOnlyHint = false, destructiveHint = true,
                    idempotentHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = check_args(args, { path = true, content = true, encoding = true }, "write_workspace_file")
    if bad then return tool_error(bad) end
    local path, perr = with_path(args)
    if not path then return tool_error(perr) end
    if type(args.content) ~= "string" then return tool_error("invalid arguments: content must be a string") end
    local enc, eerr = encoding_arg(args)
    if not enc then return tool_error(eerr) end
    local data = args.content
    if enc == "base64" then
      local d, derr = mb.base64_decode(data)
      if not d then return tool_error("invalid arguments: content is not valid base64: " .. tostring(derr)) end
      data = d
    end
    local tenant = request.tenant or "default"
    local ok, err = ws.write(tenant, real(tenant, path, true), data)
    if not ok then
      err = shown_err(tenant, err)
      return tool_error(err, { error = err })
    end
    return structured({ path = path, bytes = #data })
  end)

  tools.register({
    name = "read_workspace_file",
    title = "Read a workspace file",
    description = "Read a file from your workspace. Text comes back as UTF-8; use "
      .. "encoding=\"base64\" for binary files.",
    inputSchema = file_obj({
      path = { type = "string", description = "Relative path, e.g. data/orders.json" },
      filename = { type = "string", description = "Another name for path" },
      encoding = { type = "string", enum = mb.array({ "utf8", "base64" }), default = "utf8" },
    }),
    annotations = { title = "Read a workspace file", readOnlyHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = check_args(args, { path = true, encoding = true }, "read_workspace_file")
    if bad then return tool_error(bad) end
    local path, perr = with_path(args)
    if not path then return tool_error(perr) end
    local enc, eerr = encoding_arg(args)
    if not enc then return tool_error(eerr) end
    local tenant = request.tenant or "default"
    local data, err = on_real(tenant, path, false, function(p) return ws.read(tenant, p) end)
    if not data then
      err = shown_err(tenant, err)
      return tool_error(err, { error = err })
    end
    local mime = mime_of(path)
    if not mime:match("^image/") and not mime:match("^audio/") then
      -- what goes toward the model passes the PII policy, text or not (base64 is no way around it)
      data = require("mcp.pii").outbound(request.tenant or "default", data)
    end
    if enc == "utf8" and not utf8.len(data) then
      return tool_error(string.format("%s is not UTF-8 text (%d bytes); read it with encoding=\"base64\"",
        path, #data))
    end
    return structured({ path = path, encoding = enc, bytes = #data,
                        content = enc == "base64" and mb.base64_encode(data) or data })
  end)

  tools.register({
    name = "list_workspace_files",
    title = "List workspace files",
    description = "Files in your workspace (or under a sub-directory) with sizes and modification "
      .. "times, and the workspace's usage against its quotas."
      .. (POLICY and " Personal data in a name is shown as a token ([EMAIL_3f9a0c1b]); the "
        .. "workspace tools take the name as listed." or ""),
    inputSchema = obj({ dir = { type = "string", description = "Sub-directory to list (default: all)" },
                        path = { type = "string", description = "Another name for dir" },
                        subpath = { type = "string", description = "Another name for dir" } }),
    annotations = { title = "List workspace files", readOnlyHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = check_args(args, { dir = true }, "list_workspace_files")
    if bad then return tool_error(bad) end
    local dir = args.dir
    if dir == null then dir = nil end
    if dir ~= nil and type(dir) ~= "string" then return tool_error("invalid arguments: dir must be a string") end
    local tenant = request.tenant or "default"
    local files, err
    if dir == nil then
      files, err = ws.list(tenant)
    else
      -- a directory that does not exist lists as empty: then the name as given, if it is one
      files, err = on_real(tenant, dir, false, function(d)
        local l, e, c = ws.list(tenant, d)
        if l and #l == 0 then return false end
        return l, e, c
      end)
      if files == false then files = mb.array({}) end
    end
    if not files then
      err = shown_err(tenant, err)
      return tool_error(err, { error = err })
    end
    for _, f in ipairs(files) do f.path = shown(tenant, f.path) end
    local usage = ws.usage(tenant) or {}
    return structured({ files = mb.array(files), count = #files, usage = {
      files = usage.files, bytes = usage.bytes, max_files = cfg.workspace_max_files,
      max_bytes = cfg.workspace_max_bytes, max_file_bytes = cfg.workspace_max_file_bytes } })
  end)

  tools.register({
    name = "delete_workspace_file",
    title = "Delete a workspace file",
    description = "Delete a file from your workspace.",
    inputSchema = file_obj({ path = { type = "string", description = "Relative path" },
                             filename = { type = "string", description = "Another name for path" } }),
    annotations = { title = "Delete a workspace file", readOnlyHint = false, destructiveHint = true,
                    idempotentHint = true, openWorldHint = false },
  }, function(args, request)
    local bad = check_args(args, { path = true }, "delete_workspace_file")
    if bad then return tool_error(bad) end
    local path, perr = with_path(args)
    if not path then return tool_error(perr) end
    local tenant = request.tenant or "default"
    local ok, err = on_real(tenant, path, false, function(p) return ws.delete(tenant, p) end)
    if ok == nil then
      err = shown_err(tenant, err)
      return tool_error(err, { error = err })
    end
    if ok == false then
      return tool_error(string.format("no file %s in the workspace", path), { path = path, deleted = false })
    end
    return structured({ path = path, deleted = true })
  end)

  tools.stats_providers.workspace = function(tenant)
    local u = ws.usage(tenant) or {}
    return { files = u.files, bytes = u.bytes, max_files = cfg.workspace_max_files,
             max_bytes = cfg.workspace_max_bytes, max_file_bytes = cfg.workspace_max_file_bytes }
  end

  -----------------------------------------------------------------------------------------
  -- resources

  local function all_resources(tenant)
    local out = {}
    for _, s in ipairs(skills.list(tenant).skills) do
      out[#out + 1] = { uri = SKILL_PREFIX .. s.name, name = "skills/" .. s.name,
        title = s.name, description = s.description, mimeType = "text/x-lua" }
    end
    for _, f in ipairs(ws.list(tenant) or {}) do
      local p = shown(tenant, f.path)
      out[#out + 1] = { uri = WS_PREFIX .. uri_encode(p), name = p, mimeType = mime_of(p), size = f.size }
    end
    for _, p in ipairs(tools.resource_providers) do
      for _, r in ipairs(p.list(tenant)) do out[#out + 1] = r end
    end
    return out
  end

  tools.methods["resources/list"] = function(params, request)
    local all = all_resources(request.tenant or "default")
    local page, offset = cfg.tools_page_size, 0
    if params.cursor ~= nil then
      local n = type(params.cursor) == "string" and params.cursor:match("^mbr1%.(%d+)$")
      offset = n and tonumber(n)
      if not offset or offset >= #all then
        error(tools.rpc_error(-32602, "resources/list: invalid cursor", { cursor = params.cursor }))
      end
    end
    local out = {}
    for i = offset + 1, math.min(offset + page, #all) do out[#out + 1] = all[i] end
    local result = { resources = mb.array(out) }
    if offset + page < #all then result.nextCursor = "mbr1." .. tostring(offset + page) end
    return result
  end

  tools.methods["resources/templates/list"] = function(params, request)
    local out = {
      { uriTemplate = WS_PREFIX .. "{+path}", name = "workspace-file", title = "Workspace file",
        description = "A file in the workspace, by relative path" },
      { uriTemplate = SKILL_PREFIX .. "{name}", name = "skill", title = "Skill source",
        description = "The source of a skill in use", mimeType = "text/x-lua" },
    }
    for _, p in ipairs(tools.resource_providers) do
      for _, t in ipairs(p.templates(request.tenant or "default")) do out[#out + 1] = t end
    end
    return { resourceTemplates = mb.array(out) }
  end

  tools.methods["resources/read"] = function(params, request)
    local uri = params.uri
    if type(uri) ~= "string" then
      error(tools.rpc_error(-32602, "resources/read: params.uri must be a string"))
    end
    local tenant = request.tenant or "default"
    local function not_found(msg)
      error(tools.rpc_error(-32002, "Resource not found: " .. msg, { uri = uri }))
    end
    if uri:sub(1, #SKILL_PREFIX) == SKILL_PREFIX then
      local name = uri:sub(#SKILL_PREFIX + 1)
      local s, err = skills.load(tenant, name)
      if not s then not_found(err) end
      return { contents = { { uri = uri, mimeType = "text/x-lua", text = s.code } } }
    end
    if uri:sub(1, #WS_PREFIX) == WS_PREFIX then
      local path = uri_decode(uri:sub(#WS_PREFIX + 1))
      if not path then
        error(tools.rpc_error(-32602, "resources/read: bad percent-encoding in the uri", { uri = uri }))
      end
      local data, err, code = on_real(tenant, path, false, function(p) return ws.read(tenant, p) end)
      if not data then
        err = shown_err(tenant, err)
        if code == "not_found" then not_found(err) end
        error(tools.rpc_error(-32602, "resources/read: " .. tostring(err), { uri = uri }))
      end
      local mime = mime_of(path)
      if not mime:match("^image/") and not mime:match("^audio/") then
        data = require("mcp.pii").outbound(tenant, data)
      end
      if utf8.len(data) and not mime:match("^image/") and not mime:match("^audio/") then
        return { contents = { { uri = uri, mimeType = mime, text = data } } }
      end
      return { contents = { { uri = uri, mimeType = mime, blob = mb.base64_encode(data) } } }
    end
    for _, p in ipairs(tools.resource_providers) do
      local contents = p.read(uri, request)
      if contents then return { contents = contents } end
    end
    not_found("no resource has this uri (workspace files are " .. WS_PREFIX .. "<path>, skills "
      .. SKILL_PREFIX .. "<name>)")
  end
end

return M
