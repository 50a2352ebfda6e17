/* lang_hint.c - Markdown fences around code, and one-line hints when code looks like Python or
 * JavaScript (lang_hint.h says why).
 *
 * Syntax hints: line by line, each line first reduced to its code - Lua comments dropped, the
 * contents of Lua strings (short and long) dropped and their quotes kept, leading and trailing
 * whitespace cut - so that text inside a string or a comment never decides. The line Lua's
 * message names is looked at first, then the first line that matches a rule decides. Rules are
 * forms that are never valid Lua (`import x` or `const x =` as a statement, `def f(`, a block
 * header ending in ':', `+=`, `!=`, `===`, `=>`, a line that starts with `#`), so a hint on real
 * Lua code is unlikely; a wrong hint costs one misleading sentence next to Lua's own message.
 *
 * Run-time hints: the message of a run-time error names the nil value the code used ("global
 * 'len'", "field 'loads'"); a builtin of Python or JavaScript that Lua lacks gets the Lua way.
 * These fire only on an error, so valid code never gets one.
 */
#include "lang_hint.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_LINES 256
#define MAX_BYTES 65536
#define LINE_MAX_BYTES 2048 /* of a line's code that the rules see */

enum kind { PREFIX, CONTAINS, CALL, COLON_BLOCK, BRACE_BLOCK, HASH_COMMENT };

typedef struct {
	enum kind kind;
	const char *text;
	const char *hint;
} rule;

#define LUA "moonbox runs Lua 5.4: "
#define PY "moonbox runs Lua 5.4; this looks like Python: "
#define JS "moonbox runs Lua 5.4; this looks like JavaScript: "
#define IMPORT_HINT PY "there is no import - json, re, string and table are already loaded " \
		       "(json.decode(s)); skills come with require(\"skills.name\")"
#define FENCE_HINT LUA "send the Lua code alone, without Markdown (``` fences) or text around it"

static const rule RULES[] = {
	{PREFIX, "```", FENCE_HINT},
	{PREFIX, "~~~", FENCE_HINT},
	{PREFIX, "import ", IMPORT_HINT},
	{PREFIX, "from ", IMPORT_HINT},
	{PREFIX, "def ", PY "a function is `local function f(x) ... end`"},
	{PREFIX, "elif ", PY "write `elseif x then`, and end the block with `end`"},
	{HASH_COMMENT, NULL, PY "comments start with --, not #"},
	{CONTAINS, "!==", JS "compare with == and ~="},
	{CONTAINS, "===", JS "compare with == and ~="},
	{CONTAINS, "!=", LUA "not equal is ~= (and `not x` negates)"},
	{CONTAINS, "&&", LUA "the logical operators are and, or, not"},
	{CONTAINS, "||", LUA "the logical operators are and, or, not"},
	{CONTAINS, "+=", LUA "there is no += or -=: write x = x + 1"},
	{CONTAINS, "-=", LUA "there is no += or -=: write x = x - 1"},
	{CONTAINS, "*=", LUA "there is no *= or /=: write x = x * 2"},
	{CONTAINS, "/=", LUA "there is no *= or /=: write x = x / 2"},
	{CONTAINS, "++", LUA "there is no ++: write i = i + 1"},
	{COLON_BLOCK, NULL, PY "blocks are `if x then ... end` and `for i, v in ipairs(t) do ... end`"},
	{CONTAINS, "print(f\"", PY "format with string.format(\"%d items\", n) or \"..\" to join strings"},
	{CONTAINS, "print(f'", PY "format with string.format(\"%d items\", n) or \"..\" to join strings"},
	{CALL, "len(", PY "the length of a string or list is #x"},
	{PREFIX, "const ", JS "variables are `local x = ...`"},
	{PREFIX, "let ", JS "variables are `local x = ...`"},
	{PREFIX, "var ", JS "variables are `local x = ...`"},
	{PREFIX, "//", JS "comments start with --"},
	{CONTAINS, "json.loads", PY "json.decode(s) reads JSON and json.encode(v) writes it"},
	{CONTAINS, "json.dumps", PY "json.decode(s) reads JSON and json.encode(v) writes it"},
	{CONTAINS, "JSON.parse", JS "json.decode(s) reads JSON and json.encode(v) writes it"},
	{CONTAINS, "JSON.stringify", JS "json.decode(s) reads JSON and json.encode(v) writes it"},
	{CONTAINS, "console.log", JS "print(...) writes to the output; return the value you need"},
	{CONTAINS, "=>", JS "a function is `function(x) return x * 2 end`"},
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

/* p occurs in s[0..n) as a whole name: not preceded by a name character, '.' or ':' (len( but
 * not strlen( or t.len( or t:len(). */
static int has_name(const char *s, size_t n, const char *p)
{
	for (size_t k = strlen(p), i = 0; k <= n && i <= n - k; i++)
		if (memcmp(s + i, p, k) == 0 &&
		    (i == 0 || !(isalnum((unsigned char)s[i - 1]) || strchr("_.:", s[i - 1]))))
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
	case CALL:
		return has_name(s, n, r->text);
	case HASH_COMMENT: /* `# note` or a lone `#`; `#t` (a length, maybe continuing an expression
			    * from the line before) is Lua */
		return s[0] == '#' && (n == 1 || s[1] == ' ' || s[1] == '\t' || s[1] == '#' ||
				       s[1] == '!');
	case COLON_BLOCK:
		return n > 1 && s[n - 1] == ':' && block_header(s, n, py_blocks);
	case BRACE_BLOCK: /* (a Lua line like `function f() return {` opens a table) */
		return n > 1 && s[n - 1] == '{' && block_header(s, n, js_blocks) &&
		       !contains(s, n, "then") && !contains(s, n, " do") && !contains(s, n, "return") &&
		       !contains(s, n, "=");
	}
	return 0;
}

/* ---- the code of a line: Lua strings and comments masked ------------------------------------ */

enum { IN_CODE, IN_LONG_STRING, IN_LONG_COMMENT };

typedef struct {
	const char *p, *end; /* what is left to read */
	int state;           /* across lines: inside a long string or comment */
	size_t level;        /* its number of '=' */
	char buf[LINE_MAX_BYTES];
} scanner;

/* At p, an opening long bracket [=*[: returns its level, else -1. */
static long long_open(const char *p, const char *e)
{
	if (p >= e || *p != '[')
		return -1;
	const char *q = p + 1;
	while (q < e && *q == '=')
		q++;
	return q < e && *q == '[' ? (long)(q - p - 1) : -1;
}

/* At p, a closing long bracket of that level? */
static int long_close(const char *p, const char *e, size_t level)
{
	if ((size_t)(e - p) < level + 2 || p[0] != ']' || p[level + 1] != ']')
		return 0;
	for (size_t i = 1; i <= level; i++)
		if (p[i] != '=')
			return 0;
	return 1;
}

/* The next line's code into sc->buf, trimmed; returns its length, or -1 at the end. */
static long next_line(scanner *sc)
{
	if (sc->p >= sc->end)
		return -1;
	const char *nl = memchr(sc->p, '\n', (size_t)(sc->end - sc->p));
	const char *e = nl ? nl : sc->end, *i = sc->p;
	size_t n = 0;
#define EMIT(c) do { if (n < sizeof sc->buf) sc->buf[n++] = (c); } while (0)
	while (i < e) {
		if (sc->state != IN_CODE) {
			while (i < e && !long_close(i, e, sc->level))
				i++;
			if (i == e)
				break;
			i += sc->level + 2;
			if (sc->state == IN_LONG_STRING)
				EMIT('"');
			sc->state = IN_CODE;
			continue;
		}
		char c = *i;
		if (c == '-' && i + 1 < e && i[1] == '-') {
			long lv = long_open(i + 2, e);
			if (lv < 0)
				break; /* a comment to the end of the line */
			sc->state = IN_LONG_COMMENT;
			sc->level = (size_t)lv;
			i += 2 + (size_t)lv + 2;
			continue;
		}
		long lv = long_open(i, e);
		if (lv >= 0) {
			EMIT('"');
			sc->state = IN_LONG_STRING;
			sc->level = (size_t)lv;
			i += (size_t)lv + 2;
			continue;
		}
		if (c == '"' || c == '\'') {
			EMIT(c);
			for (i++; i < e && *i != c; i++)
				if (*i == '\\' && i + 1 < e)
					i++;
			if (i < e) {
				EMIT(c);
				i++;
			}
			continue;
		}
		EMIT(c);
		i++;
	}
#undef EMIT
	sc->p = nl ? nl + 1 : sc->end;
	size_t a = 0;
	while (a < n && (sc->buf[a] == ' ' || sc->buf[a] == '\t'))
		a++;
	while (n > a && (sc->buf[n - 1] == ' ' || sc->buf[n - 1] == '\t' || sc->buf[n - 1] == '\r'))
		n--;
	if (a)
		memmove(sc->buf, sc->buf + a, n - a);
	return (long)(n - a);
}

static void scan_init(scanner *sc, const char *code, size_t len)
{
	sc->p = code;
	sc->end = code + (len > MAX_BYTES ? MAX_BYTES : len);
	sc->state = IN_CODE;
	sc->level = 0;
}

static const char *line_hint(const char *s, size_t n)
{
	if (n)
		for (size_t i = 0; i < sizeof RULES / sizeof *RULES; i++)
			if (matches(&RULES[i], s, n))
				return RULES[i].hint;
	return NULL;
}

/* The hint of line `want` (1-based; 0: none) when it has one, else of the first line that has. */
static const char *scan_hint(const char *code, size_t len, long want)
{
	scanner *sc = malloc(sizeof *sc);
	if (!sc)
		return NULL;
	scan_init(sc, code, len);
	const char *first = NULL;
	long n;
	for (long line = 1; line <= MAX_LINES && (n = next_line(sc)) >= 0; line++) {
		const char *h = line_hint(sc->buf, (size_t)n);
		if (h && line == want) {
			first = h;
			break;
		}
		if (h && !first) {
			first = h;
			if (want <= 0 || want > MAX_LINES)
				break;
		}
	}
	free(sc);
	return first;
}

const char *mb_lang_hint(const char *code, size_t len)
{
	return scan_hint(code, len, 0);
}

/* "code:12: ..." -> 12 (the chunk is named "=code"); 0 when the message names no line. */
static long error_line(const char *error)
{
	if (!error || strncmp(error, "code:", 5) != 0 || !isdigit((unsigned char)error[5]))
		return 0;
	long v = strtol(error + 5, NULL, 10);
	return v > 0 ? v : 0;
}

const char *mb_lang_syntax_hint(const char *code, size_t len, const char *error)
{
	return scan_hint(code, len, error_line(error));
}

static int tag_is(const char *tag, size_t n, const char *const *names)
{
	for (; *names; names++)
		if (strlen(*names) == n && strncasecmp(tag, *names, n) == 0)
			return 1;
	return 0;
}

const char *mb_lang_tag_hint(const char *tag, size_t tag_len)
{
	static const char *const py[] = {"python", "py", "python3", "py3", NULL};
	static const char *const js[] = {"javascript", "js", "typescript", "ts", "node", "jsx", "tsx",
					 "mjs", NULL};
	if (!tag || !tag_len)
		return NULL;
	if (tag_is(tag, tag_len, py))
		return PY "the code was fenced as Python; write it in Lua (`local x = 1`, "
			  "`if x then ... end`, #t for a length, json.decode(s))";
	if (tag_is(tag, tag_len, js))
		return JS "the code was fenced as JavaScript; write it in Lua (`local x = 1`, "
			  "`if x then ... end`, #t for a length, json.decode(s))";
	return NULL;
}

/* ---- run-time errors ------------------------------------------------------------------------ */

typedef struct {
	const char *error; /* in the error message */
	const char *code;  /* and, when set, in the code (outside strings and comments) */
	const char *hint;
} runtime_rule;

#define RE_HINT LUA "re has match, find, gmatch, gsub and split, subject first: re.find(s, " \
		    "pattern), re.match(s, pattern) (docs/sandbox-regex.md)"
#define UPSTREAM_HINT LUA "call an upstream tool as servers.<server>.<tool>{...} (or mcp.call(" \
			  "server, tool, args)); search_tools and get_tool_definition find them"

static const runtime_rule RUNTIME_RULES[] = {
	{"(global 'len')", NULL, PY "the length of a string or list is #t"},
	{"(global 'console')", NULL, JS "print(...) writes to the output; return the value you need"},
	{"(global 'JSON')", NULL, JS "JSON is json here: json.decode(s) reads it, json.encode(v) writes it"},
	{"(field 'loads')", "json.loads", PY "json.decode(s) reads JSON and json.encode(v) writes it"},
	{"(field 'dumps')", "json.dumps", PY "json.decode(s) reads JSON and json.encode(v) writes it"},
	{"(field 'parse')", "json.parse", JS "json.decode(s) reads JSON and json.encode(v) writes it"},
	{"(field 'stringify')", "json.stringify", JS "json.decode(s) reads JSON and json.encode(v) writes it"},
	{"(global 'f')", "f\"", PY "there are no f-strings: string.format(\"%d items\", n), or .. to join strings"},
	{"(global 'f')", "f'", PY "there are no f-strings: string.format(\"%d items\", n), or .. to join strings"},
	{"(global 'range')", NULL, PY "count with `for i = 1, n do ... end`; walk a list with `for i, v in ipairs(t) do ... end`"},
	{"(global 'str')", NULL, PY "tostring(x) makes a string, tonumber(s) a number"},
	{"(global 'int')", NULL, PY "tonumber(s) makes a number (math.floor(x) an integer)"},
	{"(global 'enumerate')", NULL, PY "walk a list with `for i, v in ipairs(t) do ... end`"},
	{"(field 'append')", NULL, PY "append with table.insert(t, v) or t[#t + 1] = v"},
	{"(method 'append')", NULL, PY "append with table.insert(t, v) or t[#t + 1] = v"},
	{"(field 'push')", NULL, JS "append with table.insert(t, v) or t[#t + 1] = v"},
	{"(method 'push')", NULL, JS "append with table.insert(t, v) or t[#t + 1] = v"},
	{"(field 'search')", "re.search", RE_HINT},
	{"(field 'findall')", "re.findall", RE_HINT},
	{"(field 'sub')", "re.sub", RE_HINT},
	{"(field 'compile')", "re.compile", RE_HINT},
	{"(global 'callMCPTool')", NULL, UPSTREAM_HINT},
	{"(global 'call_mcp_tool')", NULL, UPSTREAM_HINT},
	{"(global 'list_mcp_tools')", NULL, UPSTREAM_HINT},
};

/* needle occurs in the code outside strings and comments, as a whole name */
static int code_has(const char *code, size_t len, const char *needle)
{
	scanner *sc = malloc(sizeof *sc);
	if (!sc)
		return 0;
	scan_init(sc, code, len);
	int found = 0;
	long n;
	for (int line = 0; !found && line < MAX_LINES && (n = next_line(sc)) >= 0; line++)
		found = has_name(sc->buf, (size_t)n, needle);
	free(sc);
	return found;
}

const char *mb_lang_runtime_hint(const char *code, size_t len, const char *error)
{
	if (!error || !strstr(error, "nil value"))
		return NULL;
	for (size_t i = 0; i < sizeof RUNTIME_RULES / sizeof *RUNTIME_RULES; i++) {
		const runtime_rule *r = &RUNTIME_RULES[i];
		if (strstr(error, r->error) && (!r->code || code_has(code, len, r->code)))
			return r->hint;
	}
	return NULL;
}

/* ---- Markdown fences ------------------------------------------------------------------------ */

static int blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The line at s[i..) (up to its '\n' or len) starts, after spaces and tabs, with at least k of
 * ch; *run gets how many. */
static int fence_line(const char *s, size_t len, size_t i, char ch, size_t k, size_t *run)
{
	while (i < len && (s[i] == ' ' || s[i] == '\t'))
		i++;
	size_t r = 0;
	while (i + r < len && s[i + r] == ch)
		r++;
	if (run)
		*run = r;
	return r >= k;
}

int mb_lang_fence_find(const char *code, size_t len, mb_lang_fence *f)
{
	size_t i = 0;
	while (i < len && blank(code[i]))
		i++;
	if (i == len || (code[i] != '`' && code[i] != '~'))
		return 0;
	char ch = code[i];
	size_t k = 0;
	while (i + k < len && code[i + k] == ch)
		k++;
	if (k < 3)
		return 0;
	const char *nl = memchr(code + i, '\n', len - i);
	if (!nl)
		return 0; /* one line: not a fence around code */
	size_t open_end = (size_t)(nl - code);
	size_t info = i + k;
	if (ch == '`' && memchr(code + info, '`', open_end - info))
		return 0; /* CommonMark: a backtick fence's info string has no backtick */
	/* the closing line: the last line that is not blank */
	size_t t = len;
	while (t > open_end && blank(code[t - 1]))
		t--;
	if (t <= open_end + 1)
		return 0;
	size_t c0 = t;
	while (c0 > open_end + 1 && code[c0 - 1] != '\n')
		c0--;
	if (code[c0 - 1] != '\n')
		return 0;
	size_t run;
	if (!fence_line(code, t, c0, ch, k, &run))
		return 0;
	size_t after = c0;
	while (after < t && (code[after] == ' ' || code[after] == '\t'))
		after++;
	if (after + run != t)
		return 0; /* the closing line holds more than the fence */
	/* no other fence line inside (of either kind): that would be several blocks, or text
	 * between them, and what runs could itself look fenced */
	for (size_t p = open_end + 1; p < c0;) {
		if (fence_line(code, c0, p, '`', 3, NULL) || fence_line(code, c0, p, '~', 3, NULL))
			return 0;
		const char *q = memchr(code + p, '\n', c0 - p);
		p = q ? (size_t)(q - code) + 1 : c0;
	}
	f->open_start = i;
	f->open_end = open_end > i && code[open_end - 1] == '\r' ? open_end - 1 : open_end;
	f->close_start = c0;
	f->close_end = t;
	size_t a = info;
	while (a < f->open_end && (code[a] == ' ' || code[a] == '\t'))
		a++;
	size_t b = a;
	while (b < f->open_end && (isalnum((unsigned char)code[b]) || strchr("_+-#.", code[b])))
		b++;
	f->tag = code + a;
	f->tag_len = b - a;
	return 1;
}
