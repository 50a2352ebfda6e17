--- Word, line and character counts of a text, with its most frequent words.
-- Published as an MCP tool: call it with {text = "...", top = 5}.
-- @param text string the text to measure
-- @param top integer? how many frequent words to return (default 10)
-- @return table {lines, words, characters, top_words = {{word, count}, ...}}
-- @tool Text statistics
-- @example {"text": "one two two"} -> {"lines": 1, "words": 3, "characters": 11, "top_words": [{"word": "two", "count": 2}, {"word": "one", "count": 1}]}
-- @example {"text": "The cat and the hat\n", "top": 1} -> {"lines": 1, "words": 5, "characters": 20, "top_words": [{"word": "cat", "count": 1}]}

local STOP = { the = true, a = true, an = true, ["and"] = true, ["or"] = true, of = true,
               to = true, ["in"] = true, is = true, it = true, on = true, ["for"] = true }

return function(args)
  local text = args.text
  local top = args.top or 10
  local counts, words = {}, 0
  for word in text:lower():gmatch("[%a][%w']*") do
    words = words + 1
    if not STOP[word] then counts[word] = (counts[word] or 0) + 1 end
  end
  local list = {}
  for word, n in pairs(counts) do list[#list + 1] = { word = word, count = n } end
  table.sort(list, function(a, b)
    if a.count ~= b.count then return a.count > b.count end
    return a.word < b.word
  end)
  local _, newlines = text:gsub("\n", "")
  mcp.log("debug", { words = words })
  return {
    lines = (#text > 0 and newlines + (text:sub(-1) == "\n" and 0 or 1)) or 0,
    words = words,
    characters = utf8.len(text) or #text,
    top_words = take(list, top),
  }
end
