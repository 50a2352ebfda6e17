-- mcp/upstream_approval.lua - asks the person behind the client before code calls an upstream
-- tool that may change data (mcpServers.<server>.allowWrites = "ask").
--
-- The question is an elicitation in form mode: its message names the server, the tool and the
-- arguments (PII tokenized by the server's policy, re-encoded from the decoded JSON so sandbox
-- bytes cannot shape the text, cut at upstream_ask_args_bytes; in all three, characters that
-- reorder or hide text or break a line are escaped), and its requestedSchema offers one boolean, `remember`: approve
-- every call to this tool for the rest of this execution. With a 2025 client the question is an
-- elicitation/create request on the stream of the tools/call that runs the code; with a
-- 2026-07-28 client it is an input_required round (server.lua's request:client_request and
-- request:input_requests do both). Only action "accept" lets the call go; "decline", "cancel",
-- an answer that is not an elicitation result, an error from the client or the end of the
-- execution (its deadline, a cancellation, mrtr_hold_ms) fail the call with a message that says
-- which. A client that did not declare elicitation (form mode) is not asked: the call fails.
--
-- Approvals to remember live in the execution's own entry (entry.approvals), so they end with
-- it and are never seen by another execution or tenant. Two calls to the same tool waiting at
-- once (mcp.parallel) ask one question: the second waits for the first's answer.

local mb = mb
local null = mb.null
local cfg = mb.config
local sfmt = string.format
local utf8_cut = require("mcp.catalog_text").utf8_cut -- at a character boundary

local M = {}

local tools -- set by init (the PII policy)
local next_key = 0

local function is_object(v) return type(v) == "table" and getmetatable(v) ~= "json.array" end

local function resume(co, ...)
  local ok, err = coroutine.resume(co, ...)
  if not ok then mb.log("error", "upstream approval: " .. tostring(err)) end
end

-- Whether the client can be asked a form-mode elicitation: it declared `elicitation`, and not
-- only its url mode ({} and {form = {}} are form mode; 2025-11-25).
local function form_capable(request)
  local caps = request.sess and request.sess.client_capabilities
  local e = is_object(caps) and caps.elicitation or nil
  if e == nil or e == null then return false end
  if is_object(e) and e.form == nil and e.url ~= nil then return false end
  return true
end

-- Characters that reorder or hide text (bidi controls, zero-width marks, BOM) as \u escapes:
-- an argument must not be able to make the question read as something else.
local HIDDEN = {
  ["\216\156"] = "\\u061c", ["\239\187\191"] = "\\ufeff",
}
for cp = 0x200B, 0x200F do HIDDEN[utf8.char(cp)] = sfmt("\\u%04x", cp) end
for cp = 0x202A, 0x202E do HIDDEN[utf8.char(cp)] = sfmt("\\u%04x", cp) end
for cp = 0x2066, 0x2069 do HIDDEN[utf8.char(cp)] = sfmt("\\u%04x", cp) end
for cp = 0x2060, 0x2064 do HIDDEN[utf8.char(cp)] = sfmt("\\u%04x", cp) end -- word joiner, invisible operators
-- and characters that break a line where a client renders them (line and paragraph separators,
-- NEL): no text in the question may start a line of its own
HIDDEN["\226\128\168"], HIDDEN["\226\128\169"], HIDDEN["\194\133"] = "\\u2028", "\\u2029", "\\u0085"
HIDDEN["\194\173"] = "\\u00ad" -- soft hyphen: invisible unless a line breaks there

local function escape_hidden(s)
  s = s:gsub("\226[\128\129][\139-\175\166-\169]", function(c) return HIDDEN[c] end)
  return (s:gsub("\216\156", HIDDEN["\216\156"]):gsub("\239\187\191", HIDDEN["\239\187\191"])
    :gsub("\194[\133\173]", HIDDEN))
end


-- The arguments as the person sees them: JSON text made by moonbox from the decoded value,
-- PII tokenized, hidden characters escaped, cut at upstream_ask_args_bytes.
function M.shown_arguments(tenant, given)
  local v = given
  if type(v) == "string" and v:find("^%s*$") then v = {} end
  if type(v) == "string" then v = mb.json_decode(v) or false end
  if v == nil or v == null then v = {} end
  local ok, text = false, nil
  if v ~= false then ok, text = pcall(mb.json_encode, v) end
  if not ok then return "(arguments that are not valid JSON)" end
  text = escape_hidden(tools.pii.outbound(tenant, text))
  local max = cfg.upstream_ask_args_bytes
  if #text > max then
    text = sfmt("%s ... [cut: %d bytes in all, upstream_ask_args_bytes=%d]", utf8_cut(text, max), #text, max)
  end
  return text
end

-- The elicitation/create params of the question.
function M.question(request, server, tool, given)
  local who = escape_hidden(request.entry and request.entry.tool or "execute_code")
  server, tool = escape_hidden(server), escape_hidden(tool)
  local message = sfmt('Approve a call that may change data?\n\nserver: %s\ntool: %s (not marked read-only)\n'
    .. 'arguments: %s\n\nCode run by %s makes this call; mcpServers.%s.allowWrites is "ask". Accept to let '
    .. 'this call run, decline to refuse it.', server, tool, M.shown_arguments(request.tenant, given), who, server)
  return {
    message = message,
    requestedSchema = {
      type = "object",
      properties = {
        remember = {
          type = "boolean", default = false,
          title = sfmt("Also allow every later call to %s in this run", tool),
          description = sfmt("Calls to the tool %s of %s made by the same execution are not asked about "
            .. "again; the next execution asks again.", tool, server),
        },
      },
    },
  }
end

-- Sends the question and waits. Returns the client's answer (any value) or nil, error message.
local function send(request, params)
  local result, err
  if request.modern then
    -- a key nobody can guess: only an answer to this question counts, not one a client put in
    -- its first request's inputResponses before anything was asked
    next_key = next_key + 1
    local key = sfmt("moonbox-approval-%d-%08x", next_key, math.random(0, 0x7fffffff))
    local answers
    answers, err = request:input_requests({ { key = key, method = "elicitation/create", params = params,
                                              capability = "elicitation" } })
    result = answers and answers[key]
  else
    result, err = request:client_request("elicitation/create", params, "elicitation")
  end
  if result == nil then
    local m = is_object(err) and err.message or err
    return nil, type(m) == "string" and m or "the client answered with an error without a message"
  end
  return result
end

-- Asks whether the call may go. Returns true, or nil and why not. The caller prefixes the
-- message with "server.tool: ".
function M.ask(request, server, tool, given)
  local entry = request.entry
  local key = server .. "\0" .. tool
  local a = entry.approvals
  if not a then
    a = { allowed = {}, asking = {} }
    entry.approvals = a
  end
  while true do
    if entry.ended then return nil, "the execution has ended" end
    if a.allowed[key] then return true end
    local waiting = a.asking[key]
    if not waiting then break end
    -- the same tool is being asked about for this execution: wait for that answer
    waiting[#waiting + 1] = coroutine.running()
    local failed = coroutine.yield()
    if failed then return nil, failed end
  end
  local policy = sfmt('mcpServers.%s.allowWrites is "ask"', server)
  if not form_capable(request) then
    return nil, sfmt("the call needs the approval of the person (%s; the tool is not marked read-only), "
      .. "and the client did not declare the elicitation capability (form mode) to be asked; the call "
      .. "was not made", policy)
  end
  local waiting = {}
  a.asking[key] = waiting
  mb.log("info", sfmt("upstream %s: asking the client to approve a call to %s", server, tool))
  local r, err = send(request, M.question(request, server, tool, given))
  local ok, why, failed = nil, nil, nil
  if r == nil then
    why = sfmt("the approval question got no answer (%s); the call was not made", err)
    failed = why -- the others waiting for it fail the same way (the execution ended, mostly)
  elseif not is_object(r) or type(r.action) ~= "string" then
    why = "the client's answer to the approval question is not an elicitation result (no action); "
      .. "the call was not made"
  elseif r.action == "accept" then
    ok = true
    if is_object(r.content) and r.content.remember == true then a.allowed[key] = true end
  elseif r.action == "decline" then
    why = sfmt("the person declined the call (%s); it was not made", policy)
  elseif r.action == "cancel" then
    why = sfmt("the person dismissed the approval question without answering (cancel; %s); the call "
      .. "was not made", policy)
  else
    why = sfmt("the client's answer to the approval question has an unknown action %q; the call was not "
      .. "made", (utf8_cut(r.action, 40):gsub("%c", "?")))
  end
  a.asking[key] = nil
  for _, co in ipairs(waiting) do
    if coroutine.status(co) == "suspended" then resume(co, failed) end
  end
  if entry.ended and ok then return nil, "the execution has ended" end
  return ok, why
end

function M.init(t) tools = t end

return M
