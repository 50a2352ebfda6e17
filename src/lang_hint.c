/* lang_hint.c - a one-line hint when code that failed to parse looks like Python or JavaScript
 * (lang_hint.h says why). Line by line, leading whitespace skipped, Lua comment lines skipped,
 * the first line that matches a rule decides. Rules are forms that are never valid Lua at the
 * start of a statement (`import x`, `const x =`, `def f(`, a block header ending in ':'), or
 * operators Lua lacks (`=>`, `===`), so a hint on real Lua code is unlikely; a wrong hint costs
 * one misleading sentence next to Lua's own message, which is always kept.
 */
#include "lang_hint.h"

#include <ctype.h>
#include <string.h>

#define MAX_LINES 256
#define MAX_BYTES 65536

enum kind { PREFIX, CONTAINS, CALL, COLON_BLOCK, BRACE_BLOCK };

typedef struct {
	enum kind kind;
	const char *text;
	const char *hint;
} rule;

#define PY "moonbox runs Lua 5.4; this looks like Python: "
#define JS "moonbox runs Lua 5.4; this looks like JavaScript: "

static const rule RULES[] = {
	{PREFIX, "import ", PY "there is no import - json, re, string and table are already loaded "
			   "(json.decode(s)); skills come with require(\"skills.name\")"},
	{PREFIX, "from ", PY "there is no import - json, re, string and table are already loaded "
			 "(json.decode(s)); skills come with require(\"skills.name\")"},
	{PREFIX, "def ", PY "a function is `local function f(x) ... end`"},
	{PREFIX, "elif ", PY "write `elseif x then`, and end the block with `end`"},
	{COLON_BLOCK, NULL, PY "blocks are `if x then ... end` and `for i, v in ipairs(t) do ... end`"},
	{CONTAINS, "print(f\"", PY "format with string.format(\"%d items\", n) or \"..\" to join strings"},
	{CALL, "len(", PY "the length of a string or list is #x"},
	{PREFIX, "const ", JS "variables are `local x = ...`"},
	{PREFIX, "let ", JS "variables are `local x = ...`"},
	{PREFIX, "var ", JS "variables are `local x = ...`"},
	{PREFIX, "//", JS "comments start with --"},
	{CONTAINS, "console.log", JS "print(...) writes to the output; return the value you need"},
	{CONTAINS, "=>", JS "a function is `function(x) return x * 2 end`"},
	{CONTAINS, "===", JS "compare with == and ~="},
	{CONTAINS, "!==", JS "compare with == and ~="},
	{BRACE_BLOCK, NULL, JS "blocks end with `end`, not braces: `if x then ... end`"},
};

static int starts(const char *s, size_t n, const char *p)
{
	size_t k = strlen(p);
	return n >= k && memcmp(s, p, k) == 0;
}

static int contains(const char *s, size_t n, const char *p)
{
	size_t k = strlen(p);
	for (size_t i = 0; k <= n && i <= n - k; i++)
		if (memcmp(s + i, p, k) == 0)
			return 1;
	return 0;
}

static int block_header(const char *s, size_t n, const char *const *words)
{
	for (; *words; words++)
		if (starts(s, n, *words))
			return 1;
	return 0;
}

static int matches(const rule *r, const char *s, size_t n)
{
	static const char *const py_blocks[] = {"if ", "for ", "while ", "else", "try", "class ",
						 "with ", NULL};
	static const char *const js_blocks[] = {"function", "if ", "if(", "for ", "for(", "while",
						 "} else", NULL};
	switch (r->kind) {
	case PREFIX:
		return starts(s, n, r->text);
	case CONTAINS:
		return contains(s, n, r->text);
	case CALL: /* the name as a whole word: len( but not strlen( or t.len( */
		for (size_t k = strlen(r->text), i = 0; k <= n && i <= n - k; i++)
			if (memcmp(s + i, r->text, k) == 0 &&
			    (i == 0 || !(isalnum((unsigned char)s[i - 1]) || strchr("_.:", s[i - 1]))))
				return 1;
		return 0;
	case COLON_BLOCK:
		return n > 1 && s[n - 1] == ':' && block_header(s, n, py_blocks);
	case BRACE_BLOCK: /* (a Lua line like `function f() return {` opens a table) */
		return n > 1 && s[n - 1] == '{' && block_header(s, n, js_blocks) &&
		       !contains(s, n, "then") && !contains(s, n, " do") && !contains(s, n, "return") &&
		       !contains(s, n, "=");
	}
	return 0;
}

const char *mb_lang_hint(const char *code, size_t len)
{
	if (len > MAX_BYTES)
		len = MAX_BYTES;
	const char *p = code, *end = code + len;
	for (int line = 0; line < MAX_LINES && p < end; line++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		const char *s = p;
		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		const char *t = e;
		while (t > s && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r'))
			t--;
		size_t n = (size_t)(t - s);
		if (n && !starts(s, n, "--"))
			for (size_t i = 0; i < sizeof RULES / sizeof *RULES; i++)
				if (matches(&RULES[i], s, n))
					return RULES[i].hint;
		p = nl ? nl + 1 : end;
	}
	return NULL;
}
