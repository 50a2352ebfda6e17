-- Tests of skills/csv (run them with `moonbox test csv`): test(name, fn) and the assertions
-- assert_eq(actual, expected), assert_true(value), assert_error(fn, pattern).
local csv = require("skills.csv")

test("a quoted field keeps its commas, quotes and newlines", function()
  local rows = csv.parse('name,note\n"Smith, J","said ""hi""\nthen left"\n')
  assert_eq(rows, { { name = "Smith, J", note = 'said "hi"\nthen left' } })
end)

test("CRLF line ends read like LF", function()
  assert_eq(csv.parse("a,b\r\n1,2\r\n"), { { a = "1", b = "2" } })
end)

test("encode then parse gives the rows back", function()
  local rows = { { id = "1", text = 'a "quoted", text' }, { id = "2", text = "plain" } }
  assert_eq(csv.parse(csv.encode(rows, { "id", "text" })), rows)
end)

test("an unterminated quote is an error that says where", function()
  assert_error(function() csv.parse('a\n"open') end, "unterminated quoted field")
end)
