-- Tests of skills/text_stats (run them with `moonbox test text_stats`).
local stats = require("skills.text_stats")

test("an empty text has no lines and no words", function()
  local r = stats({ text = "" })
  assert_eq({ r.lines, r.words, r.characters }, { 0, 0, 0 })
end)

test("stop words are counted as words but not listed", function()
  local r = stats({ text = "the the the cat" })
  assert_eq(r.words, 4)
  assert_eq(r.top_words, { { word = "cat", count = 1 } })
end)

test("characters are counted in UTF-8 characters", function()
  assert_eq(stats({ text = "héllo" }).characters, 5)
end)
