-- auth.lua - what an OAuth access token may do: the one place where rights are enforced
-- (docs/auth.md). The transport (src/http.c, src/auth_oauth.c) verifies the token and hands the
-- rights its scopes grant as hdr.rights ("execute skills admin" or a subset); a request without
-- hdr.rights (stdio, static http_tokens, no authentication) may do everything, as before.
--
--   execute  run code (execute_code), the catalog (search_tools, get_tool_definition,
--            list_tool_categories), skills read and run, workflows run, workspace files, PII
--            tools, the journal, and every method other than those below
--   skills   change skills: save_skill, delete_skill, restore_skill (also skills.save from
--            code, the save_skill host call)
--   admin    the server-wide sections of get_execution_stats (and /metrics, checked in C)
--
-- initialize, ping, tools/list, logging/setLevel and notifications need no right: a token
-- without the execute scope still connects and sees the tools it may call (tools/list lists
-- only those). A refused request is answered HTTP 403 with error.data.scope naming the scope
-- to ask for; the transport turns that into WWW-Authenticate: Bearer error="insufficient_scope".
local M = {}

local TOOL_RIGHT = { save_skill = "skills", delete_skill = "skills", restore_skill = "skills" }
local HOST_CALL_RIGHT = { save_skill = "skills" }
local FREE = { initialize = true, ping = true, ["tools/list"] = true, ["logging/setLevel"] = true }

-- right -> the first scope that grants it, from oauth_scopes ("scope=right,...")
local scope_names = {}
for scope, right in tostring(mb.config.oauth_scopes or ""):gmatch("([^,%s=]+)=(%a+)") do
  if not scope_names[right] then scope_names[right] = scope end
end

--- The rights of a request as a set, or nil when it is not limited (no OAuth token).
function M.rights(hdr)
  local text = hdr and hdr.rights
  if text == nil then return nil end
  local set = {}
  for r in text:gmatch("%a+") do set[r] = true end
  return set
end

--- The right a tool needs.
function M.tool_right(name)
  return TOOL_RIGHT[name] or "execute"
end

--- The right a request needs (nil: none).
function M.method_right(method, params)
  if FREE[method] then return nil end
  if method == "tools/call" and type(params.name) == "string" then return M.tool_right(params.name) end
  return "execute"
end

--- The right a host call from sandbox code needs beyond execute (nil: none).
function M.host_call_right(name)
  return HOST_CALL_RIGHT[name]
end

--- Whether rights (nil: everything) include right.
function M.allows(rights, right)
  return rights == nil or right == nil or rights[right] == true
end

--- Whether a request sees the server-wide figures and every tenant's records: the one tenant
--- of stdio or no tokens (also a static token's tenant "default"), or an OAuth token with the
--- admin right.
function M.is_admin(rights, tenant)
  if rights == nil then return (tenant or "default") == "default" end
  return rights.admin == true
end

--- The scope that grants right.
function M.scope_of(right)
  return scope_names[right] or right
end

return M
