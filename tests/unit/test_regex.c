/* test_regex.c - unit tests for the sandbox `re` module (src/regex.c).
 *
 * Each test makes a plain lua_State (stock allocator, standard libraries for the test code), ties
 * an mb_budget to it through the extra space, installs the module as the global `re` with
 * mb_regex_open and runs Lua snippets. `show(...)` in the state serialises values (strings quoted,
 * everything else with tostring) so a whole result list can be compared with one exact string.
 * Covered: every function and its edge cases (init, unset groups, empty matches, UTF-8), the
 * replacement forms of gsub, flags, exact error messages for bad patterns, flags, templates and
 * each limit, catastrophic patterns on ~1 MB subjects against a 200 ms deadline (must stop within
 * 300 ms), budget accounting (PCRE2 memory is charged and fully credited when the state closes),
 * the pattern cache, and reentrancy from gsub callbacks.
 */
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdlib.h>

#include "budget.h"
#include "regex.h"
#include "unit.h"

static const char prelude[] =
	"function show(...)\n"
	"  local t, o = table.pack(...), {}\n"
	"  for i = 1, t.n do\n"
	"    local v = t[i]\n"
	"    o[i] = type(v) == 'string' and ('\"' .. v .. '\"') or tostring(v)\n"
	"  end\n"
	"  return table.concat(o, ',')\n"
	"end\n"
	"function all(it)\n"
	"  local o = {}\n"
	"  while true do\n"
	"    local t = table.pack(it())\n"
	"    if t[1] == nil then break end\n"
	"    o[#o + 1] = show(table.unpack(t, 1, t.n))\n"
	"  end\n"
	"  return table.concat(o, ' ')\n"
	"end\n"
	"function list(t) return show(table.unpack(t)) end\n";

static lua_State *new_state(mb_budget *b, const mb_regex_limits *lim)
{
	lua_State *L = luaL_newstate();
	if (!L)
		abort();
	luaL_openlibs(L);
	*(mb_budget **)lua_getextraspace(L) = b;
	mb_regex_open(L, lim);
	lua_setglobal(L, "re");
	if (luaL_dostring(L, prelude) != LUA_OK)
		abort();
	return L;
}

/* Runs a chunk and returns its first result as a string, or "ERR: <message>". */
static char out[4096];
static const char *run(lua_State *L, const char *code)
{
	lua_settop(L, 0);
	if (luaL_loadstring(L, code) != LUA_OK) {
		snprintf(out, sizeof out, "LOADERR: %s", lua_tostring(L, -1));
		return out;
	}
	if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
		const char *m = lua_tostring(L, -1);
		snprintf(out, sizeof out, "ERR: %s", m ? m : "(non-string error)");
		return out;
	}
	const char *r = luaL_tolstring(L, -1, NULL);
	snprintf(out, sizeof out, "%s", r);
	lua_settop(L, 0);
	return out;
}

static int starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Checks that r is an error whose message (after Lua's "chunk:line:" prefix) is exactly msg. */
#define CHECK_ERR(r, msg) do { const char *r_ = (r), *m_ = (msg); size_t rl_ = strlen(r_), ml_ = strlen(m_); \
	int ok_ = starts_with(r_, "ERR: ") && rl_ >= ml_ && strcmp(r_ + rl_ - ml_, m_) == 0 && \
		(rl_ - ml_ == 5 || strncmp(r_ + rl_ - ml_ - 2, ": ", 2) == 0); \
	if (!ok_) fprintf(stderr, "  got:  %s\n  want: ...%s\n", r_, m_); \
	CHECK(ok_); } while (0)

#define WITH_STATE(lim)                                                   \
	mb_budget b;                                                      \
	mb_budget_init(&b, 0, 0, 0);                                      \
	lua_State *L = new_state(&b, lim)

TEST(test_match)
{
	WITH_STATE(NULL);
	CHECK_STR(run(L, "return show(re.match('hello world', 'o w'))"), "\"o w\"");
	CHECK_STR(run(L, "return show(re.match('key=val', '(\\\\w+)=(\\\\w+)'))"), "\"key\",\"val\"");
	CHECK_STR(run(L, "return show(re.match('abc', 'x'))"), "nil");
	CHECK_STR(run(L, "return show(re.match('b', '(a)?(b)'))"), "false,\"b\"");
	CHECK_STR(run(L, "return show(re.match('abcabc', 'b.', 3))"), "\"bc\"");
	CHECK_STR(run(L, "return show(re.match('abcabc', 'b.', -3))"), "\"bc\"");
	CHECK_STR(run(L, "return show(re.match('abc', '^b', 2))"), "nil");
	CHECK_STR(run(L, "return show(re.match('abc', '\\\\Gb', 2))"), "\"b\"");
	CHECK_STR(run(L, "return show(re.match('abc', '', 4))"), "\"\"");
	CHECK_STR(run(L, "return show(re.match('abc', '', 5))"), "nil");
	CHECK_STR(run(L, "return show(re.match('a\\0b', 'a\\0(.)'))"), "\"b\"");
	CHECK_STR(run(L, "return show(re.match(12345, '3(4)'))"), "\"4\"");
	lua_close(L);
}

TEST(test_find)
{
	WITH_STATE(NULL);
	CHECK_STR(run(L, "return show(re.find('hello', 'l+'))"), "3,4");
	CHECK_STR(run(L, "return show(re.find('a=1', '(\\\\w)=(\\\\d)'))"), "1,3,\"a\",\"1\"");
	CHECK_STR(run(L, "return show(re.find('abc', 'x*'))"), "1,0");
	CHECK_STR(run(L, "return show(re.find('abcabc', 'b', -2))"), "5,5");
	CHECK_STR(run(L, "return show(re.find('abcabc', 'b', -100))"), "2,2");
	CHECK_STR(run(L, "return show(re.find('abc', '', 4))"), "4,3");
	CHECK_STR(run(L, "return show(re.find('abc', 'c', 0))"), "3,3");
	CHECK_STR(run(L, "return show(re.find('abc', 'x'))"), "nil");
	CHECK_STR(run(L, "return show(re.find('aXb', 'x', nil, 'i'))"), "2,2");
	lua_close(L);
}

TEST(test_gmatch)
{
	WITH_STATE(NULL);
	CHECK_STR(run(L, "return all(re.gmatch('one two  three', '\\\\w+'))"),
		  "\"one\" \"two\" \"three\"");
	CHECK_STR(run(L, "return all(re.gmatch('a=1, b=2', '(\\\\w)=(\\\\d)'))"),
		  "\"a\",\"1\" \"b\",\"2\"");
	/* empty matches: one at every position, and never twice at the same one */
	CHECK_STR(run(L, "return all(re.gmatch('abc', 'x*'))"), "\"\" \"\" \"\" \"\"");
	CHECK_STR(run(L, "return all(re.gmatch('baaac', 'a*'))"), "\"\" \"aaa\" \"\" \"\"");
	CHECK_STR(run(L, "return all(re.gmatch('', ''))"), "\"\"");
	/* UTF-8: with 'u' an empty match advances by a character, without it by a byte */
	CHECK_STR(run(L, "local n = 0 for _ in re.gmatch('h\\u{e9}llo', '', 'u') do n = n + 1 end return n"), "6");
	CHECK_STR(run(L, "local n = 0 for _ in re.gmatch('h\\u{e9}llo', '') do n = n + 1 end return n"), "7");
	CHECK_STR(run(L, "return all(re.gmatch('h\\u{e9}\\u{1F600}!', '.', 'u'))"),
		  "\"h\" \"\xc3\xa9\" \"\xf0\x9f\x98\x80\" \"!\"");
	CHECK_STR(run(L, "return all(re.gmatch('\\u{1F600}\\u{1F600}', 'x*', 'u'))"), "\"\" \"\" \"\"");
	/* the iterator keeps returning nil once done, and keeps its subject alive */
	CHECK_STR(run(L, "local it = re.gmatch(('x'):rep(3) .. 'y', 'y') collectgarbage() "
			 "return show(it(), it(), (it()))"), "\"y\",nil,nil");
	lua_close(L);
}

TEST(test_gsub)
{
	WITH_STATE(NULL);
	CHECK_STR(run(L, "return show(re.gsub('hello world', 'o', '0'))"), "\"hell0 w0rld\",2");
	CHECK_STR(run(L, "return show(re.gsub('John Smith', '(\\\\w+) (\\\\w+)', '$2, $1'))"),
		  "\"Smith, John\",1");
	CHECK_STR(run(L, "return show(re.gsub('2024-01-15', '(?<y>\\\\d+)-(?<m>\\\\d+)-(?<d>\\\\d+)', "
			 "'${d}/${m}/${y}'))"), "\"15/01/2024\",1");
	CHECK_STR(run(L, "return show(re.gsub('cost: 5', '\\\\d', '$$$0'))"), "\"cost: $5\",1");
	CHECK_STR(run(L, "return show(re.gsub('abcdefghijk', '(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)', "
			 "'${11}${10}$9'))"), "\"kji\",1");
	/* unset group expands to nothing; duplicate names take the group that is set */
	CHECK_STR(run(L, "return show(re.gsub('b', '(a)?b', '[$1]'))"), "\"[]\",1");
	CHECK_STR(run(L, "return show(re.gsub('x2', '(?J)(?:(?<n>\\\\d)|(?<n>x))', '<${n}>'))"),
		  "\"<x><2>\",2");
	/* table and function replacements; false/nil keep the match */
	CHECK_STR(run(L, "return show(re.gsub('$name is $age', '\\\\$(\\\\w+)', {name = 'Bob', age = 42}))"),
		  "\"Bob is 42\",2");
	CHECK_STR(run(L, "return show(re.gsub('a b c', '\\\\w', {a = 1, b = false}))"), "\"1 b c\",3");
	CHECK_STR(run(L, "return show(re.gsub('a b c', '\\\\w', function(c) if c == 'b' then return nil end "
			 "return c:upper() end))"), "\"A b C\",3");
	CHECK_STR(run(L, "return show(re.gsub('k=v;x=y', '(\\\\w)=(\\\\w)', function(k, v) return v .. '=' .. k end))"),
		  "\"v=k;y=x\",2");
	/* max, counts, empty matches, flags */
	CHECK_STR(run(L, "return show(re.gsub('aaa', 'a', 'b', 2))"), "\"bba\",2");
	CHECK_STR(run(L, "return show(re.gsub('aaa', 'a', 'b', 0))"), "\"aaa\",0");
	CHECK_STR(run(L, "return show(re.gsub('aaa', 'a', 'b', -1))"), "\"aaa\",0");
	CHECK_STR(run(L, "return show(re.gsub('abc', '', '-'))"), "\"-a-b-c-\",4");
	CHECK_STR(run(L, "return show(re.gsub('baaac', 'a*', '-'))"), "\"-b--c-\",4");
	CHECK_STR(run(L, "return show(re.gsub('ABC abc', 'abc', 'x', nil, 'i'))"), "\"x x\",2");
	CHECK_STR(run(L, "return show(re.gsub('h\\u{e9}', '', '.', nil, 'u'))"), "\".h.\xc3\xa9.\",3");
	CHECK_STR(run(L, "return show(re.gsub('abc', 'b', 7))"), "\"a7c\",1");
	/* template and value errors */
	CHECK_ERR(run(L, "return re.gsub('abc', 'b', '$x')"),
		  "re: invalid replacement: '$' at byte 1 must be followed by a digit, {number}, {name} or $");
	CHECK_ERR(run(L, "return re.gsub('abc', 'b', 'x$')"),
		  "re: invalid replacement: '$' at the end (write $$ for a literal $)");
	CHECK_ERR(run(L, "return re.gsub('abc', '(b)', '$2')"),
		  "re: invalid replacement: it refers to group 2 but the pattern has 1 capture group");
	CHECK_ERR(run(L, "return re.gsub('abc', '(?<x>b)', '${y}')"),
		  "re: invalid replacement: the pattern has no group named 'y'");
	CHECK_ERR(run(L, "return re.gsub('abc', 'b', '${x')"),
		  "re: invalid replacement: '${' at byte 1 needs a group number or name and a closing '}'");
	CHECK_ERR(run(L, "return re.gsub('zzz', 'b', '$7')"),   /* checked even without a match */
		  "re: invalid replacement: it refers to group 7 but the pattern has 0 capture groups");
	CHECK_ERR(run(L, "return re.gsub('abc', 'b', function() return {} end)"),
		  "re: invalid replacement value (a table); the function must give a string, a number, false or nil");
	CHECK_ERR(run(L, "return re.gsub('abc', 'b', true)"),
		  "bad argument #3 to 'gsub' (string/function/table expected, got boolean)");
	lua_close(L);
}

TEST(test_split)
{
	WITH_STATE(NULL);
	CHECK_STR(run(L, "return list(re.split('a,b,,c', ','))"), "\"a\",\"b\",\"\",\"c\"");
	CHECK_STR(run(L, "return list(re.split('a, b ,c', '\\\\s*,\\\\s*'))"), "\"a\",\"b\",\"c\"");
	CHECK_STR(run(L, "return list(re.split('a,b,c', ',', 1))"), "\"a\",\"b,c\"");
	CHECK_STR(run(L, "return list(re.split('a,b,c', ',', 0))"), "\"a,b,c\"");
	CHECK_STR(run(L, "return list(re.split('', ','))"), "\"\"");
	CHECK_STR(run(L, "return list(re.split('abc', ''))"), "\"\",\"a\",\"b\",\"c\",\"\"");
	CHECK_STR(run(L, "return list(re.split(' a b ', ' '))"), "\"\",\"a\",\"b\",\"\"");
	CHECK_STR(run(L, "return list(re.split('aXbxc', 'x', nil, 'i'))"), "\"a\",\"b\",\"c\"");
	CHECK_STR(run(L, "return list(re.split('1(2)3', '(\\\\()'))"), "\"1\",\"2)3\"");
	lua_close(L);
}

TEST(test_flags)
{
	WITH_STATE(NULL);
	CHECK_STR(run(L, "return show(re.match('Hello', 'hello', 1, 'i'))"), "\"Hello\"");
	CHECK_STR(run(L, "return show(re.match('a\\nb', '^b$'))"), "nil");
	CHECK_STR(run(L, "return show(re.match('a\\nb', '^b$', 1, 'm'))"), "\"b\"");
	CHECK_STR(run(L, "return show(re.match('a\\nb', 'a.b'))"), "nil");
	CHECK_STR(run(L, "return show(re.match('a\\nb', 'a.b', 1, 's'))"), "\"a\nb\"");
	CHECK_STR(run(L, "return show(re.match('ab', 'a b # comment', 1, 'x'))"), "\"ab\"");
	CHECK_STR(run(L, "return show(re.match('\\u{e9}t\\u{e9}', '^\\\\w+$', 1, 'u'))"), "\"\xc3\xa9t\xc3\xa9\"");
	CHECK_STR(run(L, "return show(re.match('\\u{e9}t\\u{e9}', '^\\\\w+$'))"), "nil");
	CHECK_STR(run(L, "return show(re.match('\\u{c9}', '\\u{e9}', 1, 'iu'))"), "\"\xc3\x89\"");
	CHECK_STR(run(L, "return show(re.match('x', 'x', 1, ''))"), "\"x\"");
	CHECK_ERR(run(L, "return re.match('x', 'x', 1, 'iq')"),
		  "re: invalid flag 'q' in \"iq\" (valid flags: i m s x u)");
	CHECK_ERR(run(L, "return re.match('x', 'x', 1, 'g')"),
		  "re: invalid flag 'g' in \"g\" (valid flags: i m s x u)");
	lua_close(L);
}

TEST(test_utf8_errors)
{
	WITH_STATE(NULL);
	CHECK_ERR(run(L, "return re.match('a\\xffb', 'b', 1, 'u')"),
		  "re: subject is not valid UTF-8 at byte 2: UTF-8 error: illegal byte (0xfe or 0xff) "
		  "(without the 'u' flag patterns match bytes)");
	CHECK_STR(run(L, "return show(re.match('a\\xffb', 'b'))"), "\"b\"");
	CHECK_ERR(run(L, "return re.find('\\u{e9}', '', 2, 'u')"),
		  "re: start position 2 is inside a UTF-8 character");
	CHECK_ERR(run(L, "return re.match('x', '(*UTF)x')"),
		  "re: invalid pattern at offset 6: using UTF is disabled by the application "
		  "(pass the 'u' flag for UTF-8 mode instead of (*UTF)/(*UCP))");
	lua_close(L);
}

TEST(test_invalid_patterns)
{
	WITH_STATE(NULL);
	CHECK_ERR(run(L, "return re.match('x', '(ab')"),
		  "re: invalid pattern at offset 3: missing closing parenthesis");
	CHECK_ERR(run(L, "return re.find('x', 'a[b')"),
		  "re: invalid pattern at offset 3: missing terminating ] for character class");
	CHECK_ERR(run(L, "return re.gsub('x', '*', '')"),
		  "re: invalid pattern at offset 0: quantifier does not follow a repeatable item");
	CHECK_ERR(run(L, "return re.split('x', 'a\\\\C')"),
		  "re: invalid pattern at offset 3: using \\C is disabled by the application "
		  "(\\C is not allowed in the sandbox)");
	CHECK_ERR(run(L, "return re.gmatch('x', '(?<n>a)(?<n>b)')"),
		  "re: invalid pattern at offset 12: two named subpatterns have the same name (PCRE2_DUPNAMES not set)");
	CHECK_ERR(run(L, "return re.match('x', {})"), "bad argument #2 to 'match' (string expected, got table)");
	/* a bad pattern is not cached and does not count against max_patterns */
	CHECK_STR(run(L, "for i = 1, 300 do pcall(re.match, 'x', '(') end return show(re.match('x', 'x'))"),
		  "\"x\"");
	lua_close(L);
}

TEST(test_limit_messages)
{
	mb_regex_limits lim = { .max_pattern_bytes = 10, .max_subject_bytes = 100, .max_patterns = 3,
				.parens_nest_limit = 3 };
	WITH_STATE(&lim);
	CHECK_ERR(run(L, "return re.match('x', ('a'):rep(11))"),
		  "re: pattern is 11 bytes, over the limit max_pattern_bytes=10");
	CHECK_STR(run(L, "return show(re.match('aaaaaaaaaa', ('a'):rep(10)))"), "\"aaaaaaaaaa\"");
	CHECK_ERR(run(L, "return re.match(('x'):rep(101), 'x')"),
		  "re: subject is 101 bytes, over the limit max_subject_bytes=100");
	CHECK_ERR(run(L, "return re.gsub(('x'):rep(101), 'x', '')"),
		  "re: subject is 101 bytes, over the limit max_subject_bytes=100");
	CHECK_ERR(run(L, "return re.match('a', '((((a))))')"),
		  "re: invalid pattern at offset 4: parentheses are too deeply nested (parens_nest_limit=3)");
	/* 'aaaaaaaaaa' above was the first distinct pattern; two more fit, with reuse */
	CHECK_STR(run(L, "for i = 1, 1000 do re.find('ab', 'a'); re.find('ab', 'b'); re.find('ab', ('a'):rep(10)) end "
			 "return 'ok'"), "ok");
	CHECK_ERR(run(L, "return re.find('ab', 'a', 1, 'i')"),
		  "re: too many distinct patterns in one execution (max_patterns=3); reuse patterns "
		  "instead of building new ones in a loop");
	lua_close(L);
}

TEST(test_match_limits)
{
	mb_regex_limits lim = { .heap_limit_kb = 64 };
	WITH_STATE(&lim);
	/* match limit: per start position, JIT and interpreter */
	CHECK_ERR(run(L, "return re.find(('a'):rep(25) .. '!', '^(a+)+$')"),
		  "re: match limit exceeded (match_limit=100000): the pattern backtracks too much; "
		  "avoid nested quantifiers such as (a+)+ and make it more specific");
	CHECK_ERR(run(L, "return re.find(('a'):rep(25) .. '!', '(*NO_JIT)^(a+)+$')"),
		  "re: match limit exceeded (match_limit=100000): the pattern backtracks too much; "
		  "avoid nested quantifiers such as (a+)+ and make it more specific");
	/* heap limit (interpreter frames) */
	CHECK_ERR(run(L, "return re.find(('a'):rep(5000) .. 'ced', '(*NO_JIT)(?:(a)|b)*cd')"),
		  "re: heap limit exceeded (heap_limit_kb=64): the pattern keeps too many "
		  "backtracking points; simplify it");
	/* JIT stack */
	CHECK_ERR(run(L, "return re.find(('a'):rep(200000) .. 'ced', '(?:(a)|b)*cd')"),
		  "re: JIT stack limit exceeded (jit_stack_kb=512): the pattern nests or repeats "
		  "groups too deeply; simplify it");
	/* the same patterns on short subjects work */
	CHECK_STR(run(L, "return show(re.find('aac', '(*NO_JIT)(?:(a)|b)*c'))"), "1,3,\"a\"");
	CHECK_STR(run(L, "return show(re.find('aac', '(?:(a)|b)*c'))"), "1,3,\"a\"");
	lua_close(L);

	mb_regex_limits lim2 = { .depth_limit = 100 };
	mb_budget_init(&b, 0, 0, 0);
	L = new_state(&b, &lim2);
	CHECK_ERR(run(L, "return re.find(('a'):rep(1000) .. 'ced', '(*NO_JIT)(?:(a)|b)*cd')"),
		  "re: depth limit exceeded (depth_limit=100): the pattern nests backtracking too "
		  "deeply; simplify it");
	lua_close(L);
}

/* Runs setup (building the subject, unbounded) and then code against a fresh 200 ms budget, and
 * checks that code fails with one of the expected errors within 300 ms of the budget's start.
 * The code is repeated until something stops it: on a fast machine one call may finish before
 * the deadline, and what is checked is that no single call runs past it, not that the machine
 * is slow. */
static void check_bounded(const mb_regex_limits *lim, const char *setup, const char *code,
			  const char *want1, const char *want2)
{
	mb_budget b;
	mb_budget_init(&b, 0, 0, 0);
	lua_State *L = new_state(&b, lim);
	CHECK_STR(run(L, setup), "nil");
	static char looped[8192];
	snprintf(looped, sizeof looped, "local f = function() %s end while true do f() end", code);
	mb_budget_init(&b, 0, 0, 200);
	uint64_t t0 = mb_now_ns();
	const char *r = run(L, looped);
	double ms = (double)(mb_now_ns() - t0) / 1e6;
	int ok = strstr(r, want1) || (want2 && strstr(r, want2));
	if (!ok || ms > 300)
		fprintf(stderr, "  bounded: %.1f ms: %s\n    -> %.200s\n", ms, code, r);
	CHECK(ok);
	CHECK(ms <= 300);
	printf("     %6.1f ms  %-62.62s -> %.50s\n", ms, code, r);
	lua_close(L);
}

TEST(test_catastrophic_bounded)
{
	const char *TO = "timeout: execution exceeded timeout_ms=200";
	const char *ML = "re: match limit exceeded";
	mb_regex_limits big = { .match_limit = 100000000 };
	/* the brief's case: 40000 x (21 a + !), ~880 KB: the match limit fires, or with a huge
	 * limit the deadline */
	const char *s880 = "S = (('a'):rep(21) .. '!'):rep(40000)";
	check_bounded(NULL, s880, "return re.find(S, '(a+)+$')", ML, TO);
	check_bounded(&big, s880, "return re.find(S, '(a+)+$')", TO, NULL);
	/* per-position cost just under the default match limit, so only the deadline can stop it */
	const char *s14 = "S = (('a'):rep(14) .. '!'):rep(70000)";
	check_bounded(NULL, s14, "return re.find(S, '(a+)+$')", TO, NULL);
	check_bounded(NULL, s14, "return re.gsub(S, '(a+)+$', '')", TO, NULL);
	check_bounded(NULL, s14, "return re.split(S, '(?:a|a)+$')", TO, NULL);
	check_bounded(NULL, s14, "local n = 0 for m in re.gmatch(S, '(a|aa)+$') do n = n + 1 end return n",
		      TO, NULL);
	/* O(n) work per item inside one start position: the match limit alone takes seconds */
	const char *s1m = "S = ('a'):rep(1000000) .. 'cb'";
	check_bounded(NULL, s1m, "return re.find(S, '(?:(?=\\\\w*$)a)*b')", TO, ML);
	check_bounded(NULL, s1m, "return re.find(S, '(*NO_JIT)(?:(?=\\\\w*$)a)*b')", TO, ML);
	check_bounded(&big, s1m, "return re.find(S, '^(?:(?=[a-z]++$)a)*+b')", TO, NULL);
	/* one item costs O(n) without moving the match position: a backreference compare that fails
	 * at its last byte, 200 of them in one attempt (needs a clock check at every callout) */
	char alt[3000] = "";
	for (int i = 0; i < 200; i++)
		strcat(alt, i ? "|\\\\1x" : "\\\\1x");
	static char big_code[4000];
	snprintf(big_code, sizeof big_code, "return re.find(S, '^(a*+)#(?:%s)', 1, 'i')", alt);
	check_bounded(NULL, "local h = ('a'):rep(1900000) S = h .. '#' .. h:sub(2) .. 'b'", big_code,
		      TO, NULL);
	/* a huge replacement template whose references expand to nothing */
	check_bounded(NULL, "T = ('$2'):rep(20000000)", "return re.gsub(('a'):rep(1000), '(a)(x)?', T)",
		      TO, NULL);
	/* quadratic scanning: every start position scans to the end */
	check_bounded(NULL, "S = ('a'):rep(1000000) .. '!@'", "return re.find(S, '\\\\w+@')", TO, NULL);
	check_bounded(NULL, "S = ('ab'):rep(500000)", "return re.find(S, '(\\\\w+)\\\\s+\\\\1', 1, 'u')",
		      TO, NULL);
	/* many cheap matches: gsub polls between matches */
	check_bounded(NULL, "S = ('a'):rep(4000000)",
		      "local n = 0 while true do n = n + select(2, re.gsub(S, '', '')) end", TO, NULL);
}

TEST(test_sticky_timeout)
{
	mb_budget b;
	mb_budget_init(&b, 0, 0, 0);
	lua_State *L = new_state(&b, NULL);
	mb_budget_init(&b, 0, 0, 50);
	const char *r = run(L, "return re.find((('a'):rep(14) .. '!'):rep(70000), '(a+)+$')");
	CHECK(strstr(r, "timeout: execution exceeded timeout_ms=50") != NULL);
	/* pcall cannot swallow it: the next call fails at once */
	uint64_t t0 = mb_now_ns();
	CHECK_STR(run(L, "local ok, e = pcall(re.match, 'a', 'a') return e"),
		  "timeout: execution exceeded timeout_ms=50");
	CHECK(mb_now_ns() - t0 < 10000000ull);
	lua_close(L);
}

TEST(test_budget_memory)
{
	mb_budget b;
	mb_budget_init(&b, 64u << 20, 0, 0);
	lua_State *L = new_state(&b, NULL);
	size_t base = b.mem_used;
	CHECK_STR(run(L, "return show(re.match('abc', 'b'))"), "\"b\"");
	size_t one = b.mem_used;
	/* compiled pattern + JIT code + JIT stack (512 KiB) + match data are charged */
	CHECK(one >= base + 512 * 1024 + 200);
	/* a cache hit charges nothing more */
	CHECK_STR(run(L, "for i = 1, 10000 do re.match('abc', 'b') end return 'ok'"), "ok");
	CHECK(b.mem_used == one);
	/* a second pattern costs its code but no second JIT stack */
	CHECK_STR(run(L, "return show(re.match('abc', '(a)(b)(c)'))"), "\"a\",\"b\",\"c\"");
	CHECK(b.mem_used > one && b.mem_used < one + 64 * 1024);
	/* interpreter frames (kept in the match data) are charged too */
	size_t before_frames = b.mem_used;
	CHECK_STR(run(L, "return show(re.find(('a'):rep(300) .. 'ced', '(*NO_JIT)(?:(a)|b)*cd'))"), "nil");
	CHECK(b.mem_used > before_frames + 20 * 1024);
	printf("     charged: first pattern %zu bytes, after frames %zu bytes\n", one - base, b.mem_used);
	lua_close(L);
	/* everything charged was credited back when the state closed */
	CHECK(b.mem_used == 0);
}

TEST(test_budget_memory_limit)
{
	mb_budget b;
	mb_budget_init(&b, 256 * 1024, 0, 0);
	lua_State *L = new_state(&b, NULL);
	CHECK_ERR(run(L, "return re.match('abc', 'b')"),
		  "memory limit: execution exceeded memory_mb=0 (262144 bytes)");
	CHECK(atomic_load(&b.stop) == MB_STOP_MEMORY);
	lua_close(L);
	CHECK(b.mem_used == 0);

	/* enough for the JIT stack but not for a big pattern's code */
	mb_budget_init(&b, 600 * 1024, 0, 0);
	L = new_state(&b, NULL);
	CHECK_STR(run(L, "return show(re.match('abc', 'b'))"), "\"b\"");
	CHECK_ERR(run(L, "return re.match('abc', ('(?:a|b|c|d)'):rep(300))"),
		  "memory limit: execution exceeded memory_mb=0 (614400 bytes)");
	lua_close(L);
	CHECK(b.mem_used == 0);
}

TEST(test_reentrancy)
{
	WITH_STATE(NULL);
	/* the callback uses re with a pattern of many groups, which replaces the shared match data */
	CHECK_STR(run(L, "local inner = ('(.)'):rep(20) "
			 "return show(re.gsub('a1 b2 c3', '(\\\\w)(\\\\d)', function(l, d) "
			 "  local x = re.gsub(('z'):rep(20), inner, '${20}') "
			 "  return d .. l .. x .. select(2, re.find('q' .. l, '(q)(.)')) end))"),
		  "\"1az2 2bz2 3cz2\",3");
	CHECK_STR(run(L, "local t = setmetatable({}, {__index = function(_, k) "
			 "  return re.gsub(k, '(((((((((((.)))))))))))', '<${11}>') end}) "
			 "return show(re.gsub('ab', '.', t))"), "\"<a><b>\",2");
	/* nested gmatch loops over the same pattern */
	CHECK_STR(run(L, "local o = {} for a in re.gmatch('xy', '.') do for b in re.gmatch('xy', '.') do "
			 "o[#o + 1] = a .. b end end return table.concat(o, ',')"), "xx,xy,yx,yy");
	lua_close(L);
}

TEST(test_host_state)
{
	/* no budget attached: limits from PCRE2 still apply, nothing is charged */
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	*(mb_budget **)lua_getextraspace(L) = NULL;  /* the main thread's extra space starts undefined */
	mb_regex_open(L, NULL);
	lua_setglobal(L, "re");
	CHECK_STR(run(L, "return (re.gsub('a-b', '-', '+'))"), "a+b");
	CHECK(strstr(run(L, "return re.find(('a'):rep(25) .. '!', '^(a+)+$')"),
		     "re: match limit exceeded (match_limit=100000)") != NULL);
	lua_close(L);
}

int main(void)
{
	RUN(test_match);
	RUN(test_find);
	RUN(test_gmatch);
	RUN(test_gsub);
	RUN(test_split);
	RUN(test_flags);
	RUN(test_utf8_errors);
	RUN(test_invalid_patterns);
	RUN(test_limit_messages);
	RUN(test_match_limits);
	RUN(test_catastrophic_bounded);
	RUN(test_sticky_timeout);
	RUN(test_budget_memory);
	RUN(test_budget_memory_limit);
	RUN(test_reentrancy);
	RUN(test_host_state);
	return UNIT_END();
}
