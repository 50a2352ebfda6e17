/* test_lang_hint.c - src/lang_hint.c: Python and JavaScript forms get their hint, Lua code
 * (including lines that merely resemble them) gets none, and the scan stops at its bounds. */
#include "unit.h"
#include "lang_hint.h"

#include <stdlib.h>
#include <string.h>

static const char *hint(const char *code)
{
	return mb_lang_hint(code, strlen(code));
}

static int says(const char *code, const char *lang, const char *idiom)
{
	const char *h = hint(code);
	return h && strstr(h, lang) && strstr(h, idiom);
}

TEST(python)
{
	CHECK(says("import json\ndata = json.loads(s)", "Python", "there is no import"));
	CHECK(says("from collections import Counter", "Python", "there is no import"));
	CHECK(says("  def f(x):\n    return x", "Python", "local function f(x)"));
	CHECK(says("if x > 1:\n  y = 2", "Python", "if x then"));
	CHECK(says("for x in range(3):\n  print(x)", "Python", "ipairs"));
	CHECK(says("print(len([1,2,3]))", "Python", "#x"));
	CHECK(says("if a then\nelif b then", "Python", "elseif"));
	CHECK(says("print(f\"{n} items\")", "Python", "string.format"));
}

TEST(javascript)
{
	CHECK(says("const x = [1, 2].map(v => v * 2)", "JavaScript", "local x"));
	CHECK(says("let y = 1", "JavaScript", "local x"));
	CHECK(says("console.log(1)", "JavaScript", "print"));
	CHECK(says("return a === b", "JavaScript", "== and ~="));
	CHECK(says("// note\nreturn 1", "JavaScript", "--"));
	CHECK(says("function f(a) {\n  return a\n}", "JavaScript", "not braces"));
	CHECK(says("\r\n\t  if (x) {\r\n", "JavaScript", "not braces"));
}

TEST(lua_gets_no_hint)
{
	const char *lua[] = {
		"local n = strlen(s)", "local n = t.len(s) + obj:len(x)", "function f() return {",
		"local t = {", "if x then t = {", "::continue::", "-- import json", "-- const x = 1",
		"local s = 'a' .. 'b'", "for i = 1, 10 do", "return x >= 1 and y <= 2",
		"local f = function(x) return x end", "", "   \n\t\n", "local x <const> = 1",
		"return 7 // 2",
	};
	for (size_t i = 0; i < sizeof lua / sizeof *lua; i++) {
		const char *h = hint(lua[i]);
		if (h)
			fprintf(stderr, "  hint for Lua %s: %s\n", lua[i], h);
		CHECK(h == NULL);
	}
}

TEST(bounds)
{
	/* the first 256 lines only */
	size_t n = 300 * 2 + 32;
	char *code = malloc(n);
	memset(code, 0, n);
	for (int i = 0; i < 300; i++)
		strcat(code, "x\n");
	strcat(code, "import json\n");
	CHECK(hint(code) == NULL);
	free(code);
	/* a length that stops mid-line: nothing past it is read */
	CHECK(mb_lang_hint("import json", 3) == NULL);
	CHECK(mb_lang_hint("import json", 8) != NULL);
}

int main(void)
{
	RUN(python);
	RUN(javascript);
	RUN(lua_gets_no_hint);
	RUN(bounds);
	return UNIT_END();
}
