-- mcp/skills.lua - skills: reusable Lua modules, edited by humans in skills/ and saved by agents.
--
-- The skills directory is the source of truth; the store (mb.db) indexes it and keeps every
-- version. Indexing a skill reads its file(s), hashes them, and when the hash is new compiles the
-- source and records a version: a source that compiles becomes the version in use; one that does
-- not is listed with its error and line while the last good version stays in use. A watcher on
-- the directory (and on each directory skill) re-indexes changed files after a short debounce.
-- save_skill writes the file atomically and indexes it at once, so the acknowledgement comes
-- after both the file and the version row are on disk.
--
-- Sandbox code reaches skills through host calls (src/sandbox_skills.c): skill_source (for
-- require), save_skill, load_skill, list_skills. Skills marked as tools (@tool) are published in
-- tools/list and run in a sandbox by tools/call; every change of that set sends
-- notifications/tools/list_changed.

local mb = mb
local null = mb.null
local cfg = mb.config
local db = mb.db
local fs = mb.fs
local fmt = require("mcp.skill_format")
local tests = require("mcp.skill_tests")
local function tools_mod() return require("mcp.tools") end
local clip = require("mcp.catalog_text").clip

local M = {}
local tenants = {}        -- tenant -> { tenant, dir, skills = {name -> entry}, problems = {} }
local published_sig = nil -- signature of the published tool set, for list_changed

-- On PostgreSQL the store is shared by replicas, so the files must be too: every tenant's skills
-- are under the one skills_dir the replicas share (docs/deploy.md), not under the replica's own
-- data_dir (a replica would otherwise find another's skills missing and mark them deleted).
local SHARED = db.dialect == "postgres"
local function tenant_dir(tenant)
  if tenant == "default" then return cfg.skills_dir end
  if SHARED then return cfg.skills_dir .. "/.tenants/" .. tenant end
  return cfg.data_dir .. "/tenants/" .. tenant .. "/skills"
end

-- Replicas: a change indexed here is announced (after its commit) so the others refresh their
-- entry from the store at once, instead of waiting for their own watcher (which a shared
-- network directory may not deliver). ORIGIN skips our own announcements.
local CHANNEL = "moonbox_skills"
local ORIGIN = string.format("%x%x", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
local function announce(t, name)
  if not db.notify then return end
  local ok, err = pcall(db.notify, CHANNEL, mb.json_encode({ origin = ORIGIN, tenant = t.tenant, name = name }))
  if not ok then mb.log("warning", "skills: could not tell the other replicas: " .. tostring(err)) end
end

local function decode(s) return mb.json_decode(s) end
local function encode(v) return mb.json_encode(v) end

local function params_json(params)
  return encode(mb.array(params or {}))
end

---------------------------------------------------------------------------------------------
-- reading a skill from disk

-- PostgreSQL's TEXT holds valid UTF-8 without NUL bytes (SQLite's holds any bytes): a skill that
-- has others is refused by save and listed as a problem, instead of failing in the store at
-- every scan after its file was written.
local UNSTORABLE = "is not valid UTF-8 or has a NUL byte, which the store on PostgreSQL cannot hold"
local function storable(s)
  return not SHARED or (not s:find("\0", 1, true) and utf8.len(s) ~= nil)
end

-- Returns { form, path, code, md?, mtime, size } or nil, message (nil, nil when absent).
local function read_source(t, name)
  local dir = t.dir
  local file = dir .. "/" .. name .. ".lua"
  local sdir = dir .. "/" .. name
  local st_dir = fs.stat(sdir .. "/SKILL.md")
  local st_file = fs.stat(file)
  if st_dir and st_dir.type == "file" then
    local md, err = fs.read(sdir .. "/SKILL.md", cfg.max_skill_bytes)
    if not md then return nil, err end
    local st_init = fs.stat(sdir .. "/init.lua")
    if not st_init then return nil, "skills/" .. name .. "/init.lua is missing (a directory skill needs SKILL.md and init.lua)" end
    local code, err2 = fs.read(sdir .. "/init.lua", cfg.max_skill_bytes)
    if not code then return nil, err2 end
    if not storable(md) then return nil, "skills/" .. name .. "/SKILL.md " .. UNSTORABLE end
    if not storable(code) then return nil, "skills/" .. name .. "/init.lua " .. UNSTORABLE end
    return { form = "dir", path = name .. "/init.lua", code = code, md = md,
             mtime = math.max(st_dir.mtime_ms, st_init.mtime_ms), size = st_dir.size + st_init.size,
             also_file = st_file ~= nil }
  end
  if st_file and st_file.type == "file" then
    local code, err = fs.read(file, cfg.max_skill_bytes)
    if not code then
      return nil, (err:gsub("is above the limit of (%d+)", "is above max_skill_bytes=%1"))
    end
    if not storable(code) then return nil, "skills/" .. name .. ".lua " .. UNSTORABLE end
    return { form = "file", path = name .. ".lua", code = code, mtime = st_file.mtime_ms, size = st_file.size }
  end
  return nil, nil
end

-- Metadata of a source: meta, or nil and a message.
local function analyse(name, src)
  local meta, err
  if src.form == "dir" then
    meta, err = fmt.parse_front_matter(src.md, decode)
    if not meta then return nil, err end
    if meta.front.name and meta.front.name ~= name then
      return nil, string.format("SKILL.md: name is %q but the directory is %q", meta.front.name, name)
    end
    local lua_meta = fmt.parse_header(src.code, decode)
    if lua_meta then
      meta.params = lua_meta.params
      meta.returns = lua_meta.returns
      meta.description = meta.description or lua_meta.description
    end
  else
    meta, err = fmt.parse_header(src.code, decode)
    if not meta then return nil, "skills/" .. name .. ".lua " .. err end
  end
  return meta
end

---------------------------------------------------------------------------------------------
-- the index

local function entry_from_row(row, version)
  local tool = row.tool and decode(row.tool) or nil
  local publish = row.publish and decode(row.publish) or {}
  return {
    name = row.name, description = row.description, params = row.params and decode(row.params) or {},
    returns = row.returns, tool = tool, path = row.path, form = row.form, hash = row.hash,
    status = row.status, error = row.error, error_line = row.error_line,
    version = row.good_version, code = version and version.code or nil,
    skill_md = version and version.skill_md or nil,
    mtime = row.mtime, size = row.size,
  }
end

local function load_entry(t, name)
  local row = db.row("SELECT * FROM skills WHERE tenant = ? AND name = ?", t.tenant, name)
  if not row or row.status == "deleted" then return nil end
  local v = row.good_version and db.row(
    "SELECT code, skill_md, description, params, tool, publish FROM skill_versions WHERE tenant = ? AND name = ? AND version = ?",
    t.tenant, name, row.good_version)
  local e = entry_from_row(row, v)
  if v then -- the version in use defines what callers see, even when the file is broken now
    e.description = v.description
    e.params = v.params and decode(v.params) or {}
    e.tool = v.tool and decode(v.tool) or nil
    local pub = v.publish and decode(v.publish) or {}
    e.prompt, e.resource = pub.prompt, pub.resource
  end
  t.skills[name] = e
  return e
end

-- The entry of a skill whose store row is `row`: the cached one when it is that row's content
-- (same hash, same version in use, same status), else read again from the store. The store is
-- shared: another process on the same data directory or store may have recorded a new version of
-- the file we just read, and finding "a row that matches the file" says nothing about what this
-- process has cached.
local function current(t, name, row)
  local e = t.skills[name]
  if e and e.hash == row.hash and e.version == row.good_version and e.status == row.status then
    return e
  end
  return load_entry(t, name)
end

-- Indexes one skill from disk. source: "file", "save" or "restore". force: read even when
-- mtime and size are unchanged. Returns the entry (nil when the skill is gone) and the version
-- created (nil when the content was already known).
local function index_skill(t, name, source, force)
  local src, err = read_source(t, name)
  local row = db.row("SELECT * FROM skills WHERE tenant = ? AND name = ?", t.tenant, name)
  local now = mb.wall_ms()
  if not src then
    if err then -- present but unreadable: keep what is in use, report the problem
      t.problems[name] = { name = name, error = err }
      return t.skills[name]
    end
    if row and row.status ~= "deleted" then
      db.run("UPDATE skills SET status = 'deleted', updated_at = ? WHERE tenant = ? AND name = ?",
        now, t.tenant, name)
      announce(t, name)
    end
    t.skills[name] = nil
    t.problems[name] = nil
    return nil
  end
  t.problems[name] = nil
  if src.also_file then
    t.problems[name .. ".lua"] = { name = name, error = "skills/" .. name .. ".lua is ignored: the directory skill skills/" .. name .. "/ has the same name" }
  end
  if row and row.status ~= "deleted" and not force and row.mtime == src.mtime and row.size == src.size then
    return current(t, name, row)
  end
  local hash = mb.hash((src.md or "") .. "\0" .. src.code)
  if row and row.status ~= "deleted" and row.hash == hash then
    if row.mtime ~= src.mtime or row.size ~= src.size then
      db.run("UPDATE skills SET mtime = ?, size = ? WHERE tenant = ? AND name = ?",
        src.mtime, src.size, t.tenant, name)
    end
    return current(t, name, row)
  end

  local meta, merr = analyse(name, src)
  local ok, cerr, cline = true, nil, nil
  if not meta then
    ok, cerr = false, merr
    meta = { params = {} }
  else
    ok, cerr, cline = fmt.compile(name, src.code)
  end
  local tool_json = meta.tool and encode(meta.tool) or nil
  local publish_json = (meta.prompt or meta.resource)
    and encode({ prompt = meta.prompt, resource = meta.resource }) or nil
  local pjson = params_json(meta.params)
  local version = db.tx(function()
    -- again inside the transaction: on PostgreSQL another indexing of this skill (the watcher's
    -- rescan of a file a save wrote, another replica) may have committed since `row` was read
    local cur = db.row("SELECT hash, status, good_version FROM skills WHERE tenant = ? AND name = ?",
      t.tenant, name)
    if cur and cur.status ~= "deleted" and cur.hash == hash then return nil end
    local last = db.row("SELECT max(version) AS v FROM skill_versions WHERE tenant = ? AND name = ?",
      t.tenant, name)
    local v = ((last and last.v) or 0) + 1
    db.run([[INSERT INTO skill_versions (tenant, name, version, code, skill_md, hash, description,
               params, tool, source, compiled, created_at, publish)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)]],
      t.tenant, name, v, src.code, src.md, hash, meta.description,
      pjson, tool_json, source, ok and 1 or 0, now, publish_json)
    local good = ok and v or (cur and cur.status ~= "deleted" and cur.good_version or nil)
    db.run([[INSERT INTO skills (tenant, name, path, form, description, params, returns, tool, hash,
               mtime, size, status, error, error_line, good_version, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (tenant, name) DO UPDATE SET path = excluded.path, form = excluded.form,
               description = excluded.description, params = excluded.params,
               returns = excluded.returns, tool = excluded.tool, hash = excluded.hash,
               mtime = excluded.mtime, size = excluded.size, status = excluded.status,
               error = excluded.error, error_line = excluded.error_line,
               good_version = excluded.good_version, updated_at = excluded.updated_at]],
      t.tenant, name, src.path, src.form, meta.description, pjson, meta.returns, tool_json, hash,
      src.mtime, src.size, ok and "ok" or "error", cerr, cline, good, now)
    return v
  end)
  if not version then return load_entry(t, name) end -- recorded meanwhile: what is in the store now
  if not ok then
    mb.log("warning", string.format("skill %s (%s) does not compile: %s", name, src.path, cerr))
  end
  announce(t, name)
  return load_entry(t, name), version
end

---------------------------------------------------------------------------------------------
-- published tools

-- tenant -> signature of its published set (names and versions of skills published as tools,
-- prompts or resources)
local function published_signatures()
  local out = {}
  for tenant, t in pairs(tenants) do
    local parts = {}
    for name, e in pairs(t.skills) do
      if (e.tool or e.prompt or e.resource) and e.code then
        parts[#parts + 1] = name .. "@" .. tostring(e.version)
      end
    end
    table.sort(parts)
    out[tenant] = table.concat(parts, ",")
  end
  return out
end

-- Tells the clients of the tenants whose published set changed (list_changed(tenants): only
-- their sessions and listeners hear of it; another tenant's skills are none of their business).
local function check_published()
  local sigs = published_signatures()
  if published_sig ~= nil then
    local changed = {}
    for tenant, sig in pairs(sigs) do
      if (published_sig[tenant] or "") ~= sig then changed[tenant] = true end
    end
    for tenant, sig in pairs(published_sig) do
      if sigs[tenant] == nil and sig ~= "" then changed[tenant] = true end
    end
    if next(changed) then
      published_sig = sigs
      require("mcp.tools").list_changed(changed)
    end
  end
  published_sig = sigs
end

---------------------------------------------------------------------------------------------
-- scanning and watching

local function skill_names_on_disk(t)
  local names, problems = {}, {}
  local list = fs.list(t.dir) or {}
  for _, e in ipairs(list) do
    local n = e.type == "file" and e.name:match("^(.*)%.lua$")
    if e.type == "dir" and fs.stat(t.dir .. "/" .. e.name .. "/SKILL.md") then n = e.name end
    if n then
      if fmt.valid_name(n) then
        names[n] = true
      else
        problems[#problems + 1] = { name = n, error = string.format(
          "skills/%s: %q is not a valid skill name (letters, digits and _, not starting with a digit)",
          e.name, n) }
      end
    end
  end
  return names, problems
end

local watch_subdirs

-- After an edit on disk compiled into version e.version: its examples run (in the background);
-- when one fails, the version before it (prev, nil for a new skill) is back in service and the
-- skill shows status "error" with the failed example, in list_skills, load_skill and the log.
-- Between the edit and the examples' answer (one execution) the new version is in use.
local function check_examples(t, name, e, prev)
  local meta = e.code and fmt.parse_header(e.code, decode)
  if not (meta and meta.examples) or not tools_mod().background_execute then return end
  local hash, version = e.hash, e.version
  mb.go(function() -- a request coroutine of its own: it waits for the execution (and the store)
    local okr, failed = pcall(tests.run_examples, function(spec)
      return tools_mod().background_execute(t.tenant, spec)
    end, name, nil, meta.examples)
    if not okr then
      mb.log("error", "skill " .. name .. ": running its examples: " .. tostring(failed))
      return
    end
    if not failed then return end
    local msg = tests.describe_failure(name, failed)
    local okd, derr = pcall(db.run, [[UPDATE skills SET status = 'error', error = ?, error_line = ?,
        good_version = ? WHERE tenant = ? AND name = ? AND hash = ? AND good_version = ?]],
      msg, failed.line, prev, t.tenant, name, hash, version)
    if not okd then
      mb.log("error", "skill " .. name .. ": recording its failed example: " .. tostring(derr))
      return
    end
    mb.log("warning", string.format("%s; %s", msg, prev and string.format("version %d stays in use", prev)
      or "the skill has no earlier version to use"))
    t.skills[name] = nil
    pcall(load_entry, t, name)
    announce(t, name)
    check_published()
  end)
end

local function scan(t, force_names)
  watch_subdirs(t) -- first, so a file written while we index is not missed
  local names, bad = skill_names_on_disk(t)
  for _, row in ipairs(db.query("SELECT name FROM skills WHERE tenant = ? AND status <> 'deleted'", t.tenant)) do
    names[row.name] = true
  end
  -- and what this process has cached: a skill another process deleted is in neither list above
  for n in pairs(t.skills) do names[n] = true end
  local sorted = {}
  for n in pairs(names) do sorted[#sorted + 1] = n end
  table.sort(sorted)
  for _, n in ipairs(sorted) do
    local edited = force_names and force_names[n]
    local before = edited and db.row("SELECT good_version FROM skills WHERE tenant = ? AND name = ? AND status <> 'deleted'",
      t.tenant, n)
    local ok, err, version = pcall(index_skill, t, n, "file", edited)
    if not ok then mb.log("error", "indexing skill " .. n .. ": " .. tostring(err)) end
    if ok and edited and version and err and err.version == version then
      check_examples(t, n, err, before and before.good_version)
    end
  end
  t.invalid = bad
  check_published()
end

local function schedule_scan(t, name)
  if name then
    t.dirty = t.dirty or {}
    t.dirty[name] = true
  end
  if t.pending then return end
  t.pending = mb.timer(100, function()
    t.pending = nil
    local dirty = t.dirty
    t.dirty = nil
    scan(t, dirty)
  end)
end

local function name_of_event(file)
  if not file then return nil end
  local n = file:match("^(.-)%.lua$") or file
  if n:match("^%.") then return nil end -- temporary files of atomic writes
  return n
end

function watch_subdirs(t)
  if not mb.watch then return end
  -- every subdirectory, not only known skills: a directory made now may get its SKILL.md later
  t.subwatch = t.subwatch or {}
  local present = {}
  for _, e in ipairs(fs.list(t.dir) or {}) do
    if e.type == "dir" and fmt.valid_name(e.name) then present[e.name] = true end
  end
  for name in pairs(present) do
    if not t.subwatch[name] then
      t.subwatch[name] = mb.watch(t.dir .. "/" .. name, function() schedule_scan(t, name) end) or false
    end
  end
  for name, h in pairs(t.subwatch) do
    if not present[name] then
      if h then h:close() end
      t.subwatch[name] = nil
    end
  end
end

local function get_tenant(tenant)
  local t = tenants[tenant]
  if t then return t end
  t = { tenant = tenant, dir = tenant_dir(tenant), skills = {}, problems = {}, invalid = {} }
  tenants[tenant] = t
  local ok, err = fs.mkdir(t.dir)
  if not ok then mb.log("error", "skills: " .. tostring(err)) end
  scan(t)
  if mb.watch then
    local h, werr = mb.watch(t.dir, function(file) schedule_scan(t, name_of_event(file)) end)
    if not h then mb.log("warning", "skills: not watching " .. t.dir .. ": " .. tostring(werr)) end
    t.watch = h
  end
  return t
end
M.get_tenant = get_tenant

---------------------------------------------------------------------------------------------
-- operations (shared by the MCP tools and the sandbox host calls)

local function check_name(name)
  if type(name) ~= "string" then return nil, "name must be a string" end
  if not fmt.valid_name(name) then
    return nil, string.format("invalid skill name %q: it must match ^[A-Za-z_][A-Za-z0-9_]*$ "
      .. "(at most 64 characters)", clip(name))
  end
  return name
end

local function public_params(params)
  local out = {}
  for i, p in ipairs(params or {}) do
    out[i] = { name = p.name, type = p.type, description = p.description, optional = p.optional }
  end
  return mb.array(out)
end

local function describe(e, with_code, t)
  local d = {
    name = e.name, description = e.description or "", params = public_params(e.params),
    returns = e.returns, version = e.version or null, status = e.status, path = e.path,
    form = e.form, tool = e.tool ~= nil, prompt = e.prompt ~= nil,
    resource = e.resource and e.resource.uri or nil,
  }
  if e.status == "error" then
    d.error = e.error
    d.error_line = e.error_line
  end
  if with_code then
    d.code = e.code or ""
    d.skill_md = e.skill_md
    local meta = e.code and fmt.parse_header(e.code, decode)
    if meta and meta.examples then
      local ex = {}
      for i, x in ipairs(meta.examples) do ex[i] = { call = x.call, input = x.input, output = x.output, line = x.line } end
      d.examples = mb.array(ex)
    end
    local tpath = t and (t.dir .. "/tests/" .. e.name .. "_test.lua")
    if tpath and fs.stat(tpath) then
      local src = fs.read(tpath, cfg.max_skill_bytes)
      if src then
        d.tests = src
        d.tests_path = "skills/tests/" .. e.name .. "_test.lua"
      end
    end
  end
  return d
end

-- Normalises params given to save_skill: an array of {name, type?, description?, optional?} or
-- an object name -> {type?, description?, optional?} or name -> "type description".
local function normalise_params(params)
  if params == nil or params == null then return {} end
  if type(params) ~= "table" then return nil, "params must be an array of {name, type, description}" end
  local out = {}
  if getmetatable(params) == "json.array" or #params > 0 then
    for i, p in ipairs(params) do
      if type(p) ~= "table" or type(p.name) ~= "string" or not p.name:match("^[%a_][%w_]*$") then
        return nil, string.format("params[%d] needs a name (an identifier)", i)
      end
      out[#out + 1] = { name = p.name, type = type(p.type) == "string" and p.type or "any",
        description = type(p.description) == "string" and p.description or "", optional = p.optional == true }
    end
  else
    local names = {}
    for k in pairs(params) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do
      local p = params[k]
      if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
        return nil, "params keys must be identifiers"
      end
      if type(p) == "string" then
        local ty, desc = p:match("^(%S+)%s*(.*)$")
        out[#out + 1] = { name = k, type = ty or "any", description = desc or "" }
      elseif type(p) == "table" then
        out[#out + 1] = { name = k, type = type(p.type) == "string" and p.type or "any",
          description = type(p.description) == "string" and p.description or "", optional = p.optional == true }
      else
        return nil, "params." .. k .. " must be a string or an object"
      end
    end
  end
  for _, p in ipairs(out) do p.type = p.type:gsub("[^%w_%.%[%]|]", "") end
  return out
end

-- The header save_skill writes, then the code, with a blank line between them when the code's
-- first line is a comment: the indexer would otherwise read that comment as part of the header
-- (its text would join the description) and the next save would strip it as a header line. A
-- leading block with tags the indexer reads ("-- @tool", "-- @param") is not code but the header
-- of a hand-written skill: strip_header has already replaced it.
local function with_header(header, body)
  if header ~= "" and body:match("^[ \t]*%-%-") then return header .. "\n" .. body end
  return header .. body
end

-- A skill's examples: the @example lines of code's leading comment block and those given to
-- save_skill as `examples` ([{input, output, call?}]). Returns the list, or nil and a message.
function M.examples_of(code, given)
  local out = {}
  local meta = fmt.parse_header(code, decode)
  for _, ex in ipairs(meta and meta.examples or {}) do out[#out + 1] = ex end
  if given == nil or given == null then return out end
  if type(given) ~= "table" or (next(given) ~= nil and given[1] == nil) then
    return nil, 'examples must be an array of {input = ..., output = ..., call = "field"?}'
  end
  for i, ex in ipairs(given) do
    if type(ex) ~= "table" or ex.input == nil or ex.output == nil then
      return nil, string.format("examples[%d] needs input and output (the expected value)", i)
    end
    if ex.call ~= nil and ex.call ~= null and (type(ex.call) ~= "string" or not ex.call:match("^[%a_][%w_]*$")) then
      return nil, string.format("examples[%d].call must be the name of the skill's function to call", i)
    end
    local call = ex.call ~= null and ex.call or nil
    if call and (type(ex.input) ~= "table" or (next(ex.input) ~= nil and ex.input[1] == nil)) then
      return nil, string.format("examples[%d].input must be an array of arguments for %s", i, call)
    end
    out[#out + 1] = { call = call, input = ex.input, output = ex.output }
  end
  return out
end

-- save(tenant, args): args = {name, code, description, params?, tool?, title?, input_schema?,
-- output_schema?, examples?}. execute (the save_skill tool's request:execute) runs the examples
-- first; saves from sandbox code pass none and run no examples (a second execution while the
-- first waits for this answer; `moonbox test` runs them). Returns the description of the saved
-- skill or nil, message.
function M.save(tenant, args, source, execute)
  local name, err = check_name(args.name)
  if not name then return nil, err end
  local code = args.code
  if type(code) ~= "string" then return nil, "code must be a string of Lua source" end
  if #code > cfg.max_skill_bytes then
    return nil, string.format("code is %d bytes, above max_skill_bytes=%d", #code, cfg.max_skill_bytes)
  end
  local description = args.description
  if description ~= nil and description ~= null and type(description) ~= "string" then
    return nil, "description must be a string"
  end
  if description == nil or description == null or description:match("^%s*$") then
    return nil, "description is required: one or two sentences saying what the skill does"
  end
  local params, perr = normalise_params(args.params)
  if not params then return nil, perr end
  local ok, cerr, cline = fmt.compile(name, code)
  if not ok then
    return nil, string.format("the code does not compile (nothing was saved): %s", cerr), cline
  end
  local examples, xerr = M.examples_of(code, args.examples)
  if not examples then return nil, xerr end
  local body = fmt.strip_header(code)
  local meta = { description = description, params = params, returns = type(args.returns) == "string" and args.returns or nil,
                 examples = #examples > 0 and examples or nil }
  local publish = args.tool
  if publish ~= nil and publish ~= null and type(publish) ~= "boolean" then
    return nil, "tool must be a boolean (true publishes the skill as an MCP tool)"
  end
  for _, k in ipairs({ "input_schema", "output_schema" }) do
    local v = args[k]
    if v ~= nil and v ~= null and (type(v) ~= "table" or getmetatable(v) == "json.array") then
      return nil, k .. " must be a JSON Schema object"
    end
  end
  if publish then
    if require("mcp.tools").by_name[name] then
      return nil, string.format("%q is the name of a built-in tool; choose another name to publish it", name)
    end
    meta.tool = { title = type(args.title) == "string" and args.title or nil,
      input_schema = args.input_schema ~= null and args.input_schema or nil,
      output_schema = args.output_schema ~= null and args.output_schema or nil }
    if meta.tool.input_schema and meta.tool.input_schema.type ~= "object" then
      return nil, 'input_schema must have type "object"'
    end
  end
  if args.prompt ~= nil and args.prompt ~= null then
    if type(args.prompt) ~= "boolean" then return nil, "prompt must be a boolean (true publishes the skill as an MCP prompt)" end
    if args.prompt then meta.prompt = { title = type(args.title) == "string" and args.title or nil } end
  end
  if args.resource ~= nil and args.resource ~= null then
    if type(args.resource) ~= "string" or not args.resource:match("^[%a][%w+.-]*:%S+$") then
      return nil, "resource must be a URI such as test://static-text (with {name} placeholders for a template)"
    end
    meta.resource = { uri = args.resource,
                      mimeType = type(args.mime_type) == "string" and args.mime_type or nil,
                      template = args.resource:find("{", 1, true) ~= nil }
  end
  local t = get_tenant(tenant)
  if execute and #examples > 0 then -- before anything is written: a failure keeps what is in use
    local failed = tests.run_examples(execute, name, code, examples)
    if failed then
      local cur = t.skills[name]
      return nil, tests.describe_failure(name, failed) .. "; nothing was saved"
        .. (cur and cur.version and string.format(" (version %d stays in use)", cur.version) or ""), failed.line
    end
  end
  local existing = read_source(t, name)
  local files -- { {path, content}, ... } written in this order
  if existing and existing.form == "dir" then
    local fm = fmt.parse_front_matter(existing.md, decode)
    local header = (#params > 0 or meta.examples) and fmt.make_header({ description = description,
      params = params, returns = meta.returns, examples = meta.examples }, encode) or ""
    files = { { t.dir .. "/" .. name .. "/init.lua", with_header(header, body) },
              { t.dir .. "/" .. name .. "/SKILL.md", fmt.make_skill_md(name, meta, fm and fm.body or "\n", encode) } }
  else
    files = { { t.dir .. "/" .. name .. ".lua", with_header(fmt.make_header(meta, encode), body) } }
  end
  for _, f in ipairs(files) do
    if not storable(f[2]) then return nil, "the skill " .. UNSTORABLE .. " (nothing was saved)" end
    if #f[2] > cfg.max_skill_bytes then
      return nil, string.format("the skill file would be %d bytes with its header, above max_skill_bytes=%d",
        #f[2], cfg.max_skill_bytes)
    end
  end
  local wok, werr = true, nil
  for _, f in ipairs(files) do
    wok, werr = fs.write_atomic(f[1], f[2])
    if not wok then break end
  end
  if not wok then return nil, "could not write the skill: " .. tostring(werr) end
  local iok, e, version = pcall(index_skill, t, name, source or "save", true)
  if not iok then -- the file is the source of truth: it is indexed at the next scan
    return nil, "the skill file was written, but the store did not record its version ("
      .. tostring(e) .. "); it is indexed from the file when the store answers again"
  end
  if not e then return nil, "the skill was written but could not be indexed" end
  check_published()
  local d = describe(e)
  d.saved_version = version or e.version
  return d
end

-- The entry of a skill as the store has it now. On SQLite another process on the same data
-- directory may have recorded a version since this one cached its entry (its file event still on
-- the way, or never coming: a watch that could not be set): one indexed read of the row at every
-- require and load makes the version that process acknowledged the one that runs here. On
-- PostgreSQL the replicas' announcements refresh the entry (on_announce).
local function fresh(t, name)
  local cached = t.skills[name]
  if SHARED then return cached end
  local row = db.row("SELECT * FROM skills WHERE tenant = ? AND name = ?", t.tenant, name)
  local e
  if row and row.status ~= "deleted" then
    e = current(t, name, row)
  else
    t.skills[name] = nil
  end
  if e ~= cached then check_published() end
  return e
end

function M.load(tenant, name)
  local n, err = check_name(name)
  if not n then return nil, err end
  local t = get_tenant(tenant)
  local e = fresh(t, n)
  if not e then return nil, M.not_found(t, n) end
  return describe(e, true, t)
end

function M.not_found(t, name)
  local close = {}
  for other in pairs(t.skills) do
    if other:lower():find(name:lower(), 1, true) or name:lower():find(other:lower(), 1, true) then
      close[#close + 1] = other
    end
  end
  table.sort(close)
  local msg = string.format("no skill named %q", name)
  if #close > 0 then msg = msg .. "; similar: " .. table.concat(close, ", ", 1, math.min(5, #close)) end
  local p = t.problems[name]
  if p then msg = msg .. " (" .. p.error .. ")" end
  return msg .. ". list_skills shows what exists."
end

function M.list(tenant, query)
  if query ~= nil and query ~= null and type(query) ~= "string" then
    return nil, "query must be a string"
  end
  local t = get_tenant(tenant)
  local q = (query ~= nil and query ~= null) and query:lower() or nil
  local names = {}
  for name in pairs(t.skills) do names[#names + 1] = name end
  table.sort(names)
  local out = {}
  for _, name in ipairs(names) do
    local e = t.skills[name]
    local hay = (name .. " " .. (e.description or "")):lower()
    if not q or hay:find(q, 1, true) then out[#out + 1] = describe(e) end
  end
  local problems = {}
  for _, p in pairs(t.problems) do problems[#problems + 1] = p end
  for _, p in ipairs(t.invalid or {}) do problems[#problems + 1] = p end
  table.sort(problems, function(a, b) return a.name < b.name end)
  return { skills = mb.array(out), count = #out, problems = mb.array(problems) }
end

function M.delete(tenant, name)
  local n, err = check_name(name)
  if not n then return nil, err end
  local t = get_tenant(tenant)
  local src = read_source(t, n)
  if not src and not t.skills[n] then return nil, M.not_found(t, n) end
  if src and src.form == "dir" then
    for _, f in ipairs({ "init.lua", "SKILL.md" }) do fs.remove(t.dir .. "/" .. n .. "/" .. f) end
    fs.remove(t.dir .. "/" .. n) -- only when empty
  elseif src then
    local ok, rerr = fs.remove(t.dir .. "/" .. n .. ".lua")
    if not ok then return nil, rerr end
  end
  index_skill(t, n, "file", true)
  if t.subwatch and t.subwatch[n] then t.subwatch[n]:close() t.subwatch[n] = nil end
  check_published()
  local c = db.row("SELECT count(*) AS n FROM skill_versions WHERE tenant = ? AND name = ?", t.tenant, n)
  return { name = n, deleted = true, versions_kept = c and c.n or 0 }
end

function M.history(tenant, name, version)
  local n, err = check_name(name)
  if not n then return nil, err end
  local t = get_tenant(tenant)
  if version ~= nil and version ~= null then
    if math.type(version) ~= "integer" then return nil, "version must be an integer" end
    local v = db.row("SELECT * FROM skill_versions WHERE tenant = ? AND name = ? AND version = ?",
      t.tenant, n, version)
    if not v then return nil, string.format("skill %q has no version %d", n, version) end
    return { name = n, version = v.version, code = v.code, skill_md = v.skill_md, created_at = v.created_at,
             source = v.source, compiled = v.compiled == 1, description = v.description }
  end
  local rows = db.query([[SELECT version, hash, description, source, compiled, created_at
                           FROM skill_versions WHERE tenant = ? AND name = ? ORDER BY version DESC]],
    t.tenant, n)
  if #rows == 0 then return nil, M.not_found(t, n) end
  local row = db.row("SELECT status, good_version FROM skills WHERE tenant = ? AND name = ?", t.tenant, n)
  local out = {}
  for i, r in ipairs(rows) do
    out[i] = { version = r.version, hash = r.hash, description = r.description, source = r.source,
               compiled = r.compiled == 1, created_at = r.created_at,
               in_use = row ~= nil and row.status ~= "deleted" and row.good_version == r.version }
  end
  return { name = n, status = row and row.status or "deleted", versions = mb.array(out) }
end

-- Why restore_skill refuses version v (a row of skill_versions that did not compile): its error
-- again, and the versions that did compile.
local function never_compiled(t, name, v)
  local src = { form = v.skill_md and "dir" or "file", code = v.code, md = v.skill_md }
  local meta, why = analyse(name, src)
  if meta then
    local _, cerr = fmt.compile(name, v.code)
    why = cerr
  end
  local good = {}
  for _, r in ipairs(db.query([[SELECT version FROM skill_versions WHERE tenant = ? AND name = ?
                                 AND compiled = 1 ORDER BY version DESC]], t.tenant, name)) do
    good[#good + 1] = tostring(r.version)
  end
  local msg = string.format("restore_skill: version %d of skill %q never compiled (%s), so restoring "
    .. "it would leave the skill broken; nothing was written. ", v.version, name, tostring(why or "no error recorded"))
  if #good == 0 then
    return msg .. "No version of it compiled: fix the file or save_skill code that compiles."
  end
  return msg .. "Versions that compiled: " .. table.concat(good, ", ", 1, math.min(#good, 20))
    .. (#good > 20 and ", ..." or "") .. " (skill_history shows their code)."
end

function M.restore(tenant, name, version)
  local n, err = check_name(name)
  if not n then return nil, err end
  if math.type(version) ~= "integer" then return nil, "version must be an integer" end
  local t = get_tenant(tenant)
  local v = db.row("SELECT * FROM skill_versions WHERE tenant = ? AND name = ? AND version = ?",
    t.tenant, n, version)
  if not v then return nil, string.format("skill %q has no version %d (skill_history lists them)", n, version) end
  if v.compiled ~= 1 then return nil, never_compiled(t, n, v) end
  local md, code = v.skill_md, v.code
  local ok, werr
  if md then
    fs.mkdir(t.dir .. "/" .. n)
    ok, werr = fs.write_atomic(t.dir .. "/" .. n .. "/init.lua", code)
    if ok then ok, werr = fs.write_atomic(t.dir .. "/" .. n .. "/SKILL.md", md) end
  else
    ok, werr = fs.write_atomic(t.dir .. "/" .. n .. ".lua", code)
  end
  if not ok then return nil, "could not write the skill: " .. tostring(werr) end
  local e, nv = index_skill(t, n, "restore", true)
  check_published()
  if not e then return nil, "the restored skill could not be indexed" end
  local d = describe(e)
  d.restored_from = version
  d.saved_version = nv or e.version
  return d
end

-- The source of a skill in use, for require inside the sandbox. optional (skills.<name>): a
-- skill that does not exist is {missing = true, message = why} instead of an error, so that
-- `skills.x == nil` can test for it; one whose file is there but cannot be read still raises.
function M.source(tenant, name, optional)
  local t = get_tenant(tenant)
  local e = fresh(t, name)
  if not e and optional and not t.problems[name] then
    return { name = name, missing = true, message = M.not_found(t, name) }
  end
  if not e then return nil, "require: " .. M.not_found(t, name) end
  if not e.code then
    return nil, string.format("require: skill %q does not compile (%s) and has no earlier good version",
      name, tostring(e.error))
  end
  return { name = name, version = e.version, code = e.code }
end

function M.count(tenant)
  local t = tenants[tenant or "default"]
  local n, errors, tools_n = 0, 0, 0
  if t then
    for _, e in pairs(t.skills) do
      n = n + 1
      if e.status == "error" then errors = errors + 1 end
      if e.tool and e.code then tools_n = tools_n + 1 end
    end
  end
  return { count = n, with_errors = errors, published_as_tools = tools_n }
end

-- Skills of a tenant published as prompts or resources (entries).
function M.published_as(tenant, kind)
  local t = tenants[tenant or "default"]
  local out = {}
  if not t then return out end
  local names = {}
  for name, e in pairs(t.skills) do
    if e[kind] and e.code then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do out[#out + 1] = t.skills[name] end
  return out
end

-- Published skills of a tenant as tool entries { definition, handler, skill }.
function M.published(tenant)
  local t = tenants[tenant or "default"]
  local out = {}
  if not t then return out end
  local names = {}
  for name, e in pairs(t.skills) do
    if e.tool and e.code then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do out[#out + 1] = t.skills[name] end
  return out
end

-- Another replica changed a skill: refresh the entry from the store (payload nil: the connection
-- was reopened and announcements may have been missed - rescan every tenant loaded here).
local function on_announce(_, payload)
  if payload == nil then
    for _, t in pairs(tenants) do schedule_scan(t) end
    return
  end
  local okd, m = pcall(mb.json_decode, payload)
  if not okd or type(m) ~= "table" or m.origin == ORIGIN or type(m.tenant) ~= "string"
    or type(m.name) ~= "string" or not fmt.valid_name(m.name) then return end
  local t = tenants[m.tenant]
  if not t then return end -- loaded from the store when first used here
  mb.log("debug", "skills: " .. m.name .. " changed through another replica")
  local ok, err = pcall(function()
    if not load_entry(t, m.name) then t.skills[m.name] = nil end
    check_published()
  end)
  if not ok then mb.log("warning", "skills: refreshing " .. m.name .. ": " .. tostring(err)) end
end

function M.start()
  if db.listen then db.listen(CHANNEL, on_announce) end
  get_tenant("default")
end

return M
