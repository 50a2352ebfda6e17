/* test_lang_hint.c - src/lang_hint.c: Python and JavaScript forms get their hint, Lua code
 * (including lines that merely resemble them, and such text in strings and comments) gets none,
 * run-time errors that name a foreign builtin get theirs, a Markdown fence around the whole
 * code is found and nothing else is, and the scan stops at its bounds. */
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
	CHECK(says("# count the rows\nreturn #rows", "Python", "comments start with --"));
	CHECK(says("#\nreturn 1", "Python", "comments start with --"));
	CHECK(says("data = json.loads(s)\nif x:", "Python", "json.decode"));
	CHECK(says("x = json.dumps(t) def", "Python", "json.encode"));
}

TEST(operators)
{
	CHECK(says("local x = 1\nx += 1", "Lua 5.4", "x = x + 1"));
	CHECK(says("n -= 2", "Lua 5.4", "x = x - 1"));
	CHECK(says("n *= 2", "Lua 5.4", "x = x * 2"));
	CHECK(says("i++", "Lua 5.4", "i = i + 1"));
	CHECK(says("if a != b then end", "Lua 5.4", "~="));
	CHECK(says("if a && b then end", "Lua 5.4", "and, or, not"));
	CHECK(says("if a || b then end", "Lua 5.4", "and, or, not"));
}

TEST(the_error_line_first)
{
	/* the first line matches a rule too, but Lua's message names line 3 */
	const char *code = "i++\nlocal a = 1\nif a != 2 then end";
	const char *h = mb_lang_syntax_hint(code, strlen(code), "code:3: 'then' expected near '!'");
	CHECK(h && strstr(h, "~="));
	h = mb_lang_syntax_hint(code, strlen(code), "no line here");
	CHECK(h && strstr(h, "i = i + 1"));
	h = mb_lang_syntax_hint(code, strlen(code), NULL);
	CHECK(h && strstr(h, "i = i + 1"));
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
	CHECK(says("const s = JSON.stringify(t)", "JavaScript", "local x"));
	CHECK(says("s = JSON.stringify(t) }", "JavaScript", "json.encode"));
	CHECK(says("t = JSON.parse(s) }", "JavaScript", "json.decode"));
	CHECK(says("```lua\nreturn 1\n```\nmore text", "Lua 5.4", "without Markdown"));
}

TEST(lua_gets_no_hint)
{
	const char *lua[] = {
		"local n = strlen(s)", "local n = t.len(s) + obj:len(x)", "function f() return {",
		"local t = {", "if x then t = {", "::continue::", "-- import json", "-- const x = 1",
		"local s = 'a' .. 'b'", "for i = 1, 10 do", "return x >= 1 and y <= 2",
		"local f = function(x) return x end", "", "   \n\t\n", "local x <const> = 1",
		"return 7 // 2",
		/* such text inside strings and comments */
		"local s = \"x += 1 != 2 && y || z\"", "local s = 'print(f\"{x}\")' -- x += 1",
		"local s = [[\n# heading\nx += 1\ndef f(x):\n]]", "--[[ i++\n != \n]] return 1",
		"--[==[ a\n]] still a comment: x += 1\n]==] return 1", "local q = \"a\\\" x += 1\"",
		"local t = {\"json.loads\", 'JSON.stringify', [=[console.log(1)]=]}",
		"local n = 1 +\n  #t", "return #t", "local a = [[\nconst x = 1\n]]",
	};
	for (size_t i = 0; i < sizeof lua / sizeof *lua; i++) {
		const char *h = hint(lua[i]);
		if (h)
			fprintf(stderr, "  hint for Lua %s: %s\n", lua[i], h);
		CHECK(h == NULL);
	}
}

TEST(runtime)
{
	const char *len = "code:1: attempt to call a nil value (global 'len')";
	const char *h = mb_lang_runtime_hint("return len(t)", 13, len);
	CHECK(h && strstr(h, "#t"));
	h = mb_lang_runtime_hint("console.log(1)", 14, "code:1: attempt to index a nil value (global 'console')");
	CHECK(h && strstr(h, "print("));
	h = mb_lang_runtime_hint("JSON.parse(s)", 13, "code:1: attempt to index a nil value (global 'JSON')");
	CHECK(h && strstr(h, "json.decode"));
	const char *loads = "code:1: attempt to call a nil value (field 'loads')";
	h = mb_lang_runtime_hint("return json.loads(s)", 20, loads);
	CHECK(h && strstr(h, "json.decode"));
	/* field 'loads' of another table: only json.loads in the code says it is Python's */
	CHECK(mb_lang_runtime_hint("return pickle.loads(s)", 22, loads) == NULL);
	CHECK(mb_lang_runtime_hint("local s = 'json.loads' return x.loads(s)", 40, loads) == NULL);
	const char *f = "code:1: attempt to call a nil value (global 'f')";
	h = mb_lang_runtime_hint("print(f\"{n} items\")", 19, f);
	CHECK(h && strstr(h, "string.format"));
	CHECK(mb_lang_runtime_hint("return f(1)", 11, f) == NULL);
	h = mb_lang_runtime_hint("t.append(1)", 11, "code:1: attempt to call a nil value (field 'append')");
	CHECK(h && strstr(h, "table.insert"));
	h = mb_lang_runtime_hint("return re.search('a', s)", 24, "code:1: attempt to call a nil value (field 'search')");
	CHECK(h && strstr(h, "subject first"));
	h = mb_lang_runtime_hint("callMCPTool('a__b', {})", 23, "code:1: attempt to call a nil value (global 'callMCPTool')");
	CHECK(h && strstr(h, "servers.<server>.<tool>"));
	/* other errors: none */
	CHECK(mb_lang_runtime_hint("return len(t)", 13, "code:1: boom") == NULL);
	CHECK(mb_lang_runtime_hint("error('len(t)')", 15, "code:1: len(t)") == NULL);
	CHECK(mb_lang_runtime_hint("x", 1, NULL) == NULL);
}

static int fenced(const char *code, const char *inner, const char *tag)
{
	mb_lang_fence f;
	if (!mb_lang_fence_find(code, strlen(code), &f))
		return 0;
	/* what runs: the code between the fence lines */
	size_t a = f.open_end, b = f.close_start;
	while (a < b && (code[a] == '\r' || code[a] == '\n'))
		a++;
	while (b > a && (code[b - 1] == '\r' || code[b - 1] == '\n'))
		b--;
	int ok = strlen(inner) == b - a && memcmp(code + a, inner, b - a) == 0 &&
		 strlen(tag) == f.tag_len && memcmp(f.tag, tag, f.tag_len) == 0;
	if (!ok)
		fprintf(stderr, "  fence of %s: inner '%.*s' tag '%.*s'\n", code, (int)(b - a), code + a,
			(int)f.tag_len, f.tag);
	return ok;
}

TEST(fences)
{
	CHECK(fenced("```lua\nreturn 1\n```", "return 1", "lua"));
	CHECK(fenced("```\nreturn 1\n```\n", "return 1", ""));
	CHECK(fenced("\n  ```python \r\nx = 1\r\n```  \n\n", "x = 1", "python"));
	CHECK(fenced("~~~lua\nlocal s = \"```\"\nreturn s\n~~~", "local s = \"```\"\nreturn s", "lua"));
	CHECK(fenced("````lua\nreturn 1\n`````", "return 1", "lua"));
	CHECK(fenced("```lua {.numberLines}\nreturn '`'\n```", "return '`'", "lua"));
	CHECK(fenced("```lua\n```", "", "lua"));
	CHECK(mb_lang_tag_hint("Python", 6) && strstr(mb_lang_tag_hint("Python", 6), "Python"));
	CHECK(mb_lang_tag_hint("js", 2) && strstr(mb_lang_tag_hint("js", 2), "JavaScript"));
	CHECK(mb_lang_tag_hint("lua", 3) == NULL);
	CHECK(mb_lang_tag_hint("", 0) == NULL);
	const char *not_fenced[] = {
		"return '```'",                      /* a backtick in a Lua string */
		"local s = [[\n```lua\nx\n```\n]]\nreturn s", /* a fence inside a long string */
		"```lua\nreturn 1",                  /* never closed */
		"```return 1```",                    /* one line */
		"``\nreturn 1\n``",                  /* two backticks */
		"Here:\n```lua\nreturn 1\n```",      /* text before */
		"```lua\nreturn 1\n```\nThat is it.", /* text after */
		"```lua\nreturn 1\n```\n```lua\nreturn 2\n```", /* two blocks */
		"```lua\nreturn 1\n``",              /* a shorter closing run */
		"```lua\nreturn 1\n~~~",             /* another character */
		"```lu`a\nreturn 1\n```",            /* a backtick in the info string */
		"```lua\nreturn 1\n``` x",           /* more on the closing line */
		"```\n~~~lua\nreturn 1\n~~~\n```",    /* a fence of the other kind inside */
		"",
	};
	for (size_t i = 0; i < sizeof not_fenced / sizeof *not_fenced; i++) {
		mb_lang_fence f;
		int got = mb_lang_fence_find(not_fenced[i], strlen(not_fenced[i]), &f);
		if (got)
			fprintf(stderr, "  fenced: %s\n", not_fenced[i]);
		CHECK(!got);
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
	RUN(operators);
	RUN(the_error_line_first);
	RUN(javascript);
	RUN(lua_gets_no_hint);
	RUN(runtime);
	RUN(fences);
	RUN(bounds);
	return UNIT_END();
}
