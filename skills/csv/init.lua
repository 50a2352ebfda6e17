--- Parse and write CSV (RFC 4180: quoted fields, "" inside quotes, CRLF or LF line ends).
-- @param text string CSV text (for parse)
-- @return table the module: parse(text, opts), encode(rows, columns, opts)
-- @example parse ["id,status\n1,paid\n2,\"due, late\""] -> [{"id": "1", "status": "paid"}, {"id": "2", "status": "due, late"}]
-- @example parse ["a;b\n1;2", {"separator": ";", "header": false}] -> [["a", "b"], ["1", "2"]]
-- @example encode [[{"a": "1", "b": "x,y"}], ["a", "b"]] -> "a,b\n1,\"x,y\"\n"

local M = {}

-- Splits one record starting at pos; returns the fields and the position after the record.
local function record(text, pos, sep)
  local fields = {}
  local n = #text
  while true do
    local field
    if text:sub(pos, pos) == '"' then
      local buf, i = {}, pos + 1
      while true do
        local q = text:find('"', i, true)
        if not q then error("csv: unterminated quoted field starting at byte " .. pos, 0) end
        buf[#buf + 1] = text:sub(i, q - 1)
        if text:sub(q + 1, q + 1) == '"' then
          buf[#buf + 1] = '"'
          i = q + 2
        else
          pos = q + 1
          break
        end
      end
      field = table.concat(buf)
    else
      local stop = pos
      while stop <= n do
        local c = text:sub(stop, stop)
        if c == sep or c == "\n" or c == "\r" then break end
        stop = stop + 1
      end
      field = text:sub(pos, stop - 1)
      pos = stop
    end
    fields[#fields + 1] = field
    local c = text:sub(pos, pos)
    if c == sep then
      pos = pos + 1
    else
      if c == "\r" then pos = pos + 1 end
      if text:sub(pos, pos) == "\n" then pos = pos + 1 end
      return fields, pos
    end
  end
end

function M.parse(text, opts)
  opts = opts or {}
  local sep = opts.separator or ","
  local with_header = opts.header ~= false
  local rows, pos, header = {}, 1, nil
  while pos <= #text do
    local fields
    fields, pos = record(text, pos, sep)
    if with_header and not header then
      header = fields
    elseif with_header then
      local row = {}
      for i, name in ipairs(header) do row[name] = fields[i] end
      rows[#rows + 1] = row
    else
      rows[#rows + 1] = fields
    end
  end
  return rows
end

local function quote(v, sep)
  local s = tostring(v == nil and "" or v)
  if s:find('[' .. sep .. '"\r\n]') then s = '"' .. s:gsub('"', '""') .. '"' end
  return s
end

function M.encode(rows, columns, opts)
  local sep = (opts and opts.separator) or ","
  if not columns then
    columns = {}
    for k in pairs(rows[1] or {}) do columns[#columns + 1] = k end
    table.sort(columns)
  end
  local out = {}
  local line = {}
  for i, c in ipairs(columns) do line[i] = quote(c, sep) end
  out[1] = table.concat(line, sep)
  for _, row in ipairs(rows) do
    line = {}
    for i, c in ipairs(columns) do line[i] = quote(row[c], sep) end
    out[#out + 1] = table.concat(line, sep)
  end
  return table.concat(out, "\n") .. "\n"
end

return M
