-- mcp/upstream_transport.lua - how moonbox talks to one upstream MCP server: a child process
-- speaking newline-delimited JSON-RPC on stdio (mb.spawn, src/host_proc.c), or a Streamable HTTP
-- endpoint (mb.http_request, src/host_http_client.c: libcurl on the loop).
--
-- Both give the client (mcp/upstream.lua) the same object: t:send(msg) -> true | nil, err;
-- t:close(grace_ms); t.pid (stdio). Incoming traffic goes to the handlers given to open:
-- message(msg) for every decoded JSON-RPC message, closed(reason) once when the connection is
-- gone for good (process exit), stderr(line), bad(text) for a line or event that is not JSON-RPC,
-- and for HTTP session_expired(msg) when the server answered 404 to our session (the client then
-- re-initializes and sends msg again). An HTTP failure of a request becomes a JSON-RPC error
-- response for its id, so the client has a single path for answers.

local mb = mb
local cfg = mb.config
local sfmt = string.format

local M = { deleting = {} }

-- The environment of a stdio child: a few variables of ours that programs need to run (as the
-- MCP SDK's stdio client does), then the server's "env". Our own secrets (MOONBOX_HTTP_TOKENS,
-- ...) are not passed on.
local INHERITED = { "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR",
                    "TZ", "NODE_PATH", "NODE_OPTIONS", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE",
                    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
                    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "npm_config_cache" }

function M.child_env(extra)
  local env = {}
  for _, k in ipairs(INHERITED) do
    local v = os.getenv(k)
    if v then env[k] = v end
  end
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

---------------------------------------------------------------------------------------------
-- stdio

function M.open_stdio(s, h)
  local proc, err = mb.spawn({
    command = s.command, args = s.args, env = M.child_env(s.env), cwd = s.cwd,
    max_line_bytes = cfg.max_message_bytes,
    on_line = function(line, lerr)
      if not line then -- over-long: the C side dropped it
        return h.bad(sfmt("a stdout line above %d bytes was dropped (max_message_bytes)",
          cfg.max_message_bytes))
      end
      if line == "" then return end
      local msg, derr = mb.json_decode(line)
      if type(msg) ~= "table" then
        return h.bad(sfmt("stdout line is not JSON-RPC (%s): %s", tostring(derr or "not an object"),
          line:sub(1, 200)))
      end
      h.message(msg)
    end,
    on_stderr = h.stderr,
    on_exit = function(status, signal)
      if signal and signal ~= 0 then
        h.closed(sfmt("the process exited on signal %d", signal))
      else
        h.closed(sfmt("the process exited with status %d", status or -1))
      end
    end,
  })
  if not proc then return nil, err end
  local t = { pid = proc:pid(), kind = "stdio" }
  local corked -- while corked, lines are gathered and written at uncork in one write
  function t:send(msg)
    local ok, line = pcall(mb.json_encode, msg)
    if not ok then return nil, "cannot encode the message: " .. tostring(line) end
    if corked then
      corked[#corked + 1] = line
      corked[#corked + 1] = "\n"
      if #corked >= 16 then -- every 8 requests: the upstream starts on them while we go on
        local c = corked
        corked = {}
        return t:write(table.concat(c))
      end
      return true
    end
    return t:write(line .. "\n")
  end
  -- An upstream that does not read its stdin (while it keeps sending us requests, say) must not
  -- grow our memory: beyond twice max_message_bytes queued, the connection is given up.
  local limit = 2 * cfg.max_message_bytes
  function t:write(data)
    local ok, err = proc:write(data)
    if ok and proc:queued_bytes() > limit then
      h.closed(sfmt("it does not read its stdin (%d bytes waiting, above 2 x max_message_bytes)",
        proc:queued_bytes()))
      return nil, "the upstream does not read its stdin"
    end
    return ok, err
  end
  -- mcp.parallel sends many requests in one go: one write per 8 requests (fewer wake-ups of the
  -- upstream's reader than one per request; the upstream starts before the last is encoded).
  function t:cork() corked = corked or {} end
  function t:uncork()
    local c = corked
    corked = nil
    if c and #c > 0 then
      local ok, err = t:write(table.concat(c))
      if not ok then h.bad("write: " .. tostring(err)) end
    end
  end
  function t:close(grace_ms) proc:close(grace_ms or 2000) end
  function t:kill() proc:kill("KILL") end
  return t
end

---------------------------------------------------------------------------------------------
-- Streamable HTTP

-- Feeds SSE bytes; calls deliver(data) for each complete event with data lines.
local function sse_feed(st, chunk, deliver, bad)
  local buf = (st.pending or "") .. chunk
  while true do
    local s, e = buf:find("\r?\n\r?\n")
    if not s then break end
    local event = buf:sub(1, s - 1)
    buf = buf:sub(e + 1)
    local data = {}
    for line in (event .. "\n"):gmatch("(.-)\r?\n") do
      local v = line:match("^data: ?(.*)$")
      if v then data[#data + 1] = v end
    end
    -- an event without data, or with empty data (the priming event a resumable server sends
    -- before its messages), carries no message
    local payload = table.concat(data, "\n")
    if payload:find("%S") then deliver(payload) end
  end
  if #buf > cfg.max_message_bytes then
    bad(sfmt("an SSE event above %d bytes (max_message_bytes) was dropped", cfg.max_message_bytes))
    buf = ""
  end
  st.pending = buf
end

-- The URL for messages: without user:password@, query or fragment (they can hold secrets).
local function safe_url(url)
  local scheme, rest = url:match("^(%a[%w+.-]*://)(.*)$")
  if not scheme then return "(url)" end
  rest = rest:gsub("^[^/?#]*@", ""):gsub("[?#].*$", "")
  return scheme .. rest
end
M.safe_url = safe_url

local function excerpt(parts)
  local s = table.concat(parts):gsub("%s+", " ")
  if #s > 200 then s = s:sub(1, 200) .. "..." end
  return s
end

function M.open_http(s, h)
  local t = { kind = "http", active = {}, closed = false }

  local function deliver_text(text)
    local msg, derr = mb.json_decode(text)
    if type(msg) ~= "table" then return h.bad("a response is not JSON-RPC: " .. tostring(derr)) end
    if getmetatable(msg) == "json.array" then
      for _, m in ipairs(msg) do if type(m) == "table" then h.message(m) end end
    else
      h.message(msg)
    end
  end

  local function fail(msg, text)
    if msg.id ~= nil then
      h.message({ jsonrpc = "2.0", id = msg.id, error = { code = -32000, message = text } })
    else
      h.bad(sfmt("%s: %s", tostring(msg.method), text))
    end
  end

  local function headers()
    local hd = {}
    for k, v in pairs(s.headers) do hd[k] = v end
    hd["Content-Type"] = "application/json"
    hd["Accept"] = "application/json, text/event-stream"
    if t.session then hd["Mcp-Session-Id"] = t.session end
    if t.protocol then hd["MCP-Protocol-Version"] = t.protocol end
    return hd
  end

  -- sent(err): optional, called once the server answered the POST (or it failed); for a
  -- notification that must be accepted before the next message (notifications/initialized).
  -- timeout_ms: the request's own timeout; the transfer is given up a second after it, so a
  -- server that never answers does not keep a connection per call (others: 30 s).
  function t:send(msg, sent, timeout_ms)
    if t.closed then return nil, "the connection is closed" end
    local ok, body = pcall(mb.json_encode, msg)
    if not ok then return nil, "cannot encode the message: " .. tostring(body) end
    local st, parts, req = { status = 0 }, {}, nil
    local had_session = t.session ~= nil
    req, ok = mb.http_request({
      method = "POST", url = s.url, headers = headers(), body = body,
      connect_timeout_ms = cfg.upstream_init_timeout_ms,
      timeout_ms = sent and cfg.upstream_init_timeout_ms or (timeout_ms and timeout_ms + 1000) or 30000,
      max_response_bytes = cfg.max_message_bytes,
      on_headers = function(status, hd)
        st.status = status
        st.sse = (hd["content-type"] or ""):find("text/event-stream", 1, true) ~= nil
        if msg.method == "initialize" and status == 200 then t.session = hd["mcp-session-id"] end
      end,
      on_data = function(chunk)
        if st.status >= 200 and st.status < 300 and st.sse then
          sse_feed(st, chunk, deliver_text, h.bad)
        else
          parts[#parts + 1] = chunk
        end
      end,
      on_done = function(err, status)
        t.active[req] = nil
        if sent then sent(err) end
        if t.closed then return end
        status = status or st.status
        if err then return fail(msg, err) end
        if had_session and msg.method ~= "initialize" and (status == 404
            or (status == 400 and excerpt(parts):lower():find("session", 1, true))) then
          return h.session_expired(msg) -- 400 "No valid session ID": servers that do not say 404
        end
        if status >= 400 then
          return fail(msg, sfmt("HTTP %d from %s: %s", status, safe_url(s.url), excerpt(parts)))
        end
        if not st.sse and #parts > 0 then deliver_text(table.concat(parts)) end
      end,
    })
    if not req then return nil, ok end
    t.active[req] = true
    return true
  end

  -- The GET stream carries what the server sends on its own (list changes, pings). A server
  -- without one answers 405, and that is fine.
  function t:listen()
    if t.closed or t.listening then return end
    local hd = headers()
    hd["Content-Type"] = nil
    hd["Accept"] = "text/event-stream"
    local st, req = { status = 0 }, nil
    t.listening = true
    req = mb.http_request({
      method = "GET", url = s.url, headers = hd,
      connect_timeout_ms = cfg.upstream_init_timeout_ms,
      max_response_bytes = 0, -- a stream without end; each event is bounded in sse_feed
      on_headers = function(status) st.status = status end,
      on_data = function(chunk)
        if st.status == 200 then sse_feed(st, chunk, deliver_text, h.bad) end
      end,
      on_done = function()
        t.active[req] = nil
        t.listening = false
        if not t.closed and st.status == 200 then mb.timer(1000, function() t:listen() end) end
      end,
    })
    if req then t.active[req] = true else t.listening = false end
  end

  function t:close()
    if t.closed then return end
    t.closed = true
    for req in pairs(t.active) do req:cancel() end
    t.active = {}
    if t.session then -- end the session on the server; nobody waits for the answer
      local hd = { ["Mcp-Session-Id"] = t.session }
      for k, v in pairs(s.headers) do hd[k] = v end
      local d
      d = mb.http_request({ method = "DELETE", url = s.url, headers = hd, timeout_ms = 2000,
                            on_done = function() M.deleting[d] = nil end })
      if d then M.deleting[d] = true end -- a request object that is collected is cancelled
    end
  end
  t.kill = t.close
  return t
end

function M.open(s, h)
  if s.transport == "stdio" then return M.open_stdio(s, h) end
  return M.open_http(s, h)
end

return M
