/* test_lpattern.c - unit tests for the budget-aware pattern functions (src/lpattern.c).
 *
 * Differential: two states run the same Lua driver; the "stock" state keeps Lua's own string
 * library, the "mine" state has find/match/gmatch/gsub replaced by mb_lpattern_register and a
 * budget attached. Every case (a fixed table of tricky cases, then a few thousand random ones
 * from a fixed seed) is serialised in both states (all returned values with their types, every
 * gmatch iteration, or the error message) and the two strings must be equal. A random case is
 * run on "mine" first under a short deadline and skipped if it times out, so a pathological
 * random pattern cannot hang the stock matcher. Hostile: patterns that take seconds to hours in
 * the stock matcher must stop with the timeout error within deadline + 100 ms, and a cancelled
 * budget must stop them with "cancelled".
 */
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdlib.h>

#include "budget.h"
#include "lpattern.h"
#include "unit.h"

/* The driver, loaded into both states. run(op, ...) returns one string describing the outcome.
 * Ops: find, match, gmatch (all iterations), gsub (string/number replacement), gsubT (table
 * replacement), gsubF (function replacement). It avoids pattern functions itself. */
static const char driver[] =
	"local find, match, gmatch, gsub = string.find, string.match, string.gmatch, string.gsub\n"
	"local fmt, concat, pack, unpack = string.format, table.concat, table.pack, table.unpack\n"
	"local function ser(t, i, j)\n"
	"  local o = {}\n"
	"  for k = i, j do\n"
	"    local v = t[k]\n"
	"    local ty = type(v)\n"
	"    if ty == 'string' then o[#o + 1] = fmt('%q', v)\n"
	"    elseif ty == 'number' then o[#o + 1] = math.type(v) .. ':' .. tostring(v)\n"
	"    else o[#o + 1] = tostring(v) end\n"
	"  end\n"
	"  return concat(o, ',')\n"
	"end\n"
	"local RT = setmetatable({}, {__index = function(_, k)\n"
	"  if k == 'a' then return false end\n"
	"  if k == 'b' then return {} end\n"
	"  if math.type(k) == 'integer' then return k * 10 end\n"
	"  if type(k) == 'string' and #k % 2 == 1 then return '<' .. k .. '>' end\n"
	"  return nil end})\n"
	"local function RF(...)\n"
	"  local n = select('#', ...)\n"
	"  local a = ...\n"
	"  if a == 'a' then return nil end\n"
	"  if a == 'b' then return true end\n"
	"  if a == 'c' then return 1.5 end\n"
	"  local o = {}\n"
	"  for i = 1, n do o[i] = tostring((select(i, ...))) end\n"
	"  return '[' .. n .. ':' .. concat(o, '|') .. ']'\n"
	"end\n"
	"local ops = {\n"
	"  find = function(...) return find(...) end,\n"
	"  match = function(...) return match(...) end,\n"
	"  gsub = function(...) return gsub(...) end,\n"
	"  gsubT = function(s, p, _, n) return gsub(s, p, RT, n) end,\n"
	"  gsubF = function(s, p, _, n) return gsub(s, p, RF, n) end,\n"
	"  gmatch = function(...)\n"
	"    local it = gmatch(...)\n"
	"    local o = {}\n"
	"    for k = 1, 2000 do\n"
	"      local r = pack(it())\n"
	"      if r.n == 0 then break end\n"
	"      o[#o + 1] = '{' .. ser(r, 1, r.n) .. '}'\n"
	"    end\n"
	"    local r = pack(it())\n" /* once exhausted, stays exhausted */
	"    o[#o + 1] = 'end' .. r.n\n"
	"    return concat(o, ' ')\n"
	"  end,\n"
	"}\n"
	"function run(op, ...)\n"
	"  local r = pack(pcall(ops[op], ...))\n"
	"  if r[1] then return 'ok ' .. ser(r, 2, r.n) end\n"
	"  return 'err ' .. tostring(r[2])\n"
	"end\n"
	"function runcase(i)\n"
	"  local c = CASES[i]\n"
	"  return run(unpack(c, 1, c.n))\n"
	"end\n";

/* The fixed differential cases: C(op, subject, pattern, arg3, arg4). */
static const char cases[] =
	"CASES = {}\n"
	"local function C(...) CASES[#CASES + 1] = table.pack(...) end\n"
	"local long = ('x'):rep(300)\n"
	/* find: plain, literal fast path, init */
	"C('find', 'hello world', 'o w')\n"
	"C('find', 'hello world', 'l')\n"
	"C('find', 'hello world', 'l', 5)\n"
	"C('find', 'hello world', 'l', -2)\n"
	"C('find', 'hello world', 'l', -100)\n"
	"C('find', 'hello world', 'l', 0)\n"
	"C('find', 'hello world', '', 12)\n"
	"C('find', 'hello world', '', 13)\n"
	"C('find', 'hello world', '', 100)\n"
	"C('find', '', '')\n"
	"C('find', '', '', 1)\n"
	"C('find', '', '', 2)\n"
	"C('find', '', 'a')\n"
	"C('find', 'a.b', '.', 1, true)\n"
	"C('find', 'a.b', '.', 1, false)\n"
	"C('find', 'a.b', '%.', 1, 1)\n"
	"C('find', 'a(b', '(', 1, true)\n"
	"C('find', 'a)b', ')')\n"        /* no specials: plain, no error */
	"C('match', 'a)b', ')')\n"       /* matcher: invalid pattern capture */
	"C('find', 'a]b', ']')\n"
	"C('find', 'a\\0b\\0c', '\\0c')\n"
	"C('find', 'a\\0b\\0c', '%z')\n"
	"C('find', 'a\\0b\\0c', '[\\0]', 3)\n"
	"C('find', 'a\\0b\\0c', '.\\0', -3)\n"
	"C('find', 12345, 34)\n"
	"C('find', 12345, 3.0)\n"
	"C('find', 'abc', 'b', 1.0)\n"
	"C('find', 'abc', 'b', 1.5)\n"
	"C('find', 'abc', 'b', '2')\n"
	"C('find', 'abc', 'b', 'x')\n"
	"C('find', nil, 'b')\n"
	"C('find', 'abc', nil)\n"
	"C('find', 'abc', {})\n"
	"C('find', 'abc', 'b', math.maxinteger)\n"
	"C('find', 'abc', 'b', math.mininteger)\n"
	"C('find', 'abc', '^b', math.mininteger)\n"
	/* find with captures and anchors */
	"C('find', 'hello world', '(o)(r)')\n"
	"C('find', 'hello world', '()ll()')\n"
	"C('find', 'hello', '^h')\n"
	"C('find', 'hello', '^e')\n"
	"C('find', 'hello', '^e', 2)\n"
	"C('find', 'hello', 'o$')\n"
	"C('find', 'hello', 'l$')\n"
	"C('find', 'hel$lo', 'l$l')\n"
	"C('find', 'a^b', 'a^b')\n"
	"C('find', 'a^b', '^^')\n"
	"C('find', '^a', '^^a')\n"
	"C('find', 'a$', '$$')\n"
	"C('find', 'a$', '%$$')\n"
	"C('find', 'abc', '$')\n"
	"C('find', 'abc', '^$')\n"
	"C('find', '', '^$')\n"
	"C('find', 'abc', '^')\n"
	/* match: classes */
	"C('match', 'key = value', '(%w+)%s*=%s*(%w+)')\n"
	"C('match', '  trim  ', '^%s*(.-)%s*$')\n"
	"C('match', 'x = 0x1F;', '%x+', 5)\n"
	"C('match', 'ABCdef123', '%u+')\n"
	"C('match', 'ABCdef123', '%l+')\n"
	"C('match', 'ABCdef123', '%U+')\n"
	"C('match', 'ABCdef123', '%D+')\n"
	"C('match', 'a\\tb\\1c', '%c')\n"
	"C('match', 'a\\tb\\1c', '%C+')\n"
	"C('match', 'hi there!', '%p')\n"
	"C('match', 'hi there!', '%P+$')\n"
	"C('match', ' \\t\\nx', '%g')\n"
	"C('match', 'ab cd', '%G')\n"
	"C('match', 'a_b', '%W')\n"
	"C('match', 'zzz', '%z+')\n"
	"C('match', 'a.b', '%.')\n"
	"C('match', 'a%b', '%%')\n"
	"C('match', '\\200\\255abc', '[\\128-\\255]+')\n"
	"C('match', '\\200\\255abc', '%a+')\n"
	"C('match', '\\200\\255abc', '.')\n"
	/* sets */
	"C('match', 'abc-def', '[a-c]+')\n"
	"C('match', 'abc-def', '[%a-]+')\n"
	"C('match', 'abc-def', '[^%a]')\n"
	"C('match', 'a]b', '[]]')\n"
	"C('match', 'a]b', '[^]]+')\n"
	"C('match', 'a^b', '[b^]+')\n"
	"C('match', 'a-b', '[-]')\n"
	"C('match', 'a-b', '[a-]+')\n"
	"C('match', 'a-b', '[z-a]')\n"
	"C('match', 'a%]b', '[%]]')\n"
	"C('match', 'a%]b', '[%%]')\n"
	"C('match', 'x5y', '[%d]')\n"
	"C('match', 'x5y', '[%D]+')\n"
	"C('match', 'abc', '[a-]')\n"
	"C('match', 'a-c', '[%a-c]+')\n"
	"C('match', '-', '[a-%]')\n"
	/* quantifiers */
	"C('match', 'aaab', 'a*')\n"
	"C('match', 'aaab', 'a-b')\n"
	"C('match', 'aaab', 'a-')\n"
	"C('match', 'aaab', 'a+b')\n"
	"C('match', 'b', 'a+b')\n"
	"C('match', 'ab', 'a?b')\n"
	"C('match', 'b', 'a?b')\n"
	"C('match', 'aab', 'a?ab')\n"
	"C('match', '<a><b>', '<.->')\n"
	"C('match', '<a><b>', '<.*>')\n"
	"C('match', '[[x]]', '%[(.-)%]')\n"
	"C('match', 'aaa', '(a*(.))')\n"
	"C('match', 'a*b', 'a%*b')\n"
	"C('match', '*a', '*a')\n"
	"C('match', '+a', '+a')\n"
	"C('match', '?', '?' .. '?')\n"
	"C('match', '-a', '-a')\n"
	/* captures */
	"C('match', 'hello', '()')\n"
	"C('match', 'hello', '()', 6)\n"
	"C('match', 'hello', '()', 7)\n"
	"C('match', 'hello', '(h)(e)(l)(l)(o)')\n"
	"C('match', 'hello', '((h)(e))')\n"
	"C('match', 'hello', '()(l+)()')\n"
	"C('match', 'hello', '(')\n"
	"C('match', 'hello', '(h')\n"
	"C('find', 'hello', '(h')\n"
	"C('match', 'hello', 'h)')\n"
	"C('match', 'hello', '())')\n"
	"C('match', 'hello', '(()')\n"
	"C('match', 'hello', ('()'):rep(32))\n"
	"C('match', 'hello', ('()'):rep(33))\n"
	"C('match', 'hello', ('('):rep(33))\n"
	"C('match', 'hello', 'x' .. ('('):rep(33))\n"
	/* back-references */
	"C('match', 'abcabc', '(abc)%1')\n"
	"C('match', 'xyzxyz!', '(.+)%1')\n"
	"C('match', 'say \"hi\" now', '([\"\\'])(.-)%1')\n"
	"C('match', 'aa', '(a)%2')\n"
	"C('match', 'aa', '(a%1)')\n"
	"C('match', 'aa', '%1')\n"
	"C('match', 'aa', '%0')\n"
	"C('match', 'aa', '()%1')\n"
	"C('match', 'aa', '(a)%1%1')\n"
	"C('match', 'aa', 'b%1')\n"
	"C('match', 'aa', '(a)(a)%2%1')\n"
	/* %b */
	"C('match', 'f(a(b)c)d)', '%b()')\n"
	"C('match', 'f(a(b c)d', '%b()')\n"
	"C('match', 'xaaay', '%baa')\n"
	"C('match', '[[x]]', '%b[]')\n"
	"C('match', 'abc', '%b')\n"
	"C('match', 'abc', '%b(')\n"
	"C('match', '', '%b()')\n"
	"C('match', 'x', 'y%b')\n"
	"C('find', 'if (a) then (b) end', '%b()', 8)\n"
	"C('match', '((((', '%b()')\n"
	"C('gmatch', '(a)(b)((c))', '%b()')\n"
	"C('match', 'a\\0b\\0', '%b\\0\\0')\n"
	/* %f */
	"C('gmatch', 'THE (quick) fox', '%f[%a]%a+')\n"
	"C('gmatch', 'THE (quick) fox', '%f[%a]')\n"
	"C('gmatch', 'THE (quick) fox', '%f[%A]')\n"
	"C('find', 'abc', '%f[%z]')\n"
	"C('find', 'abc', '%f[\\0]')\n"
	"C('find', 'abc', '%f[%a]')\n"
	"C('find', 'abc', '%f[^%a]')\n"
	"C('find', '', '%f[^%a]')\n"
	"C('find', '', '%f[%a]')\n"
	"C('match', 'abc', '%f')\n"
	"C('match', 'abc', '%fa')\n"
	"C('match', 'abc', '%f[a')\n"
	"C('match', 'a b', '%f[%s]()')\n"
	/* malformed patterns (errors are raised only where the matcher gets) */
	"C('match', 'abc', '%')\n"
	"C('match', 'abc', 'x%')\n"
	"C('match', 'xbc', 'x%')\n"
	"C('match', 'abc', '[a')\n"
	"C('match', 'abc', '[')\n"
	"C('match', 'abc', '[^')\n"
	"C('match', 'abc', '[]')\n"
	"C('match', 'abc', '[^]')\n"
	"C('match', 'abc', '[%')\n"
	"C('match', 'abc', '[a%]')\n"
	"C('match', 'abc', 'a[')\n"
	"C('find', 'abc', '%')\n"
	"C('gmatch', 'abc', '%')\n"
	"C('gsub', 'abc', '%', 'x')\n"
	"C('gsub', '', '%', 'x')\n"
	"C('gsub', 'abc', 'b(', 'x')\n"
	"C('gsub', 'abc', 'b(', '%1')\n"
	"C('gsubF', 'abc', 'b(')\n"
	"C('gsubT', 'abc', 'b(')\n"
	/* depth limit */
	"C('match', ('a'):rep(300), ('a?'):rep(300))\n"
	"C('match', ('a'):rep(199), ('a?'):rep(199))\n"
	"C('match', ('a'):rep(200), ('a?'):rep(200))\n"
	"C('match', ('a'):rep(201), ('a?'):rep(201))\n"
	"C('match', '', ('a?'):rep(300))\n"
	"C('match', long, ('x*'):rep(250))\n"
	"C('match', long, ('%w-'):rep(250) .. '$')\n"
	"C('match', ('('):rep(20) .. (')'):rep(20), ('%b()'):rep(3))\n"
	"C('match', 'ab', ('()'):rep(31) .. 'a?b')\n"
	/* gmatch */
	"C('gmatch', 'hello world from Lua', '%a+')\n"
	"C('gmatch', 'k1=v1, k2=v2', '(%w+)=(%w+)')\n"
	"C('gmatch', 'abc', '')\n"
	"C('gmatch', '', '')\n"
	"C('gmatch', 'abc', 'x*')\n"
	"C('gmatch', 'abc', '%a*')\n"
	"C('gmatch', 'a,b,,c', '([^,]*)')\n"
	"C('gmatch', 'abc', '()')\n"
	"C('gmatch', 'abc', '.-')\n"
	"C('gmatch', 'abc', '^a')\n"
	"C('gmatch', '^a^a', '^a')\n"
	"C('gmatch', 'aaa', '^')\n"
	"C('gmatch', 'abc', 'c$')\n"
	"C('gmatch', 'abc', '$')\n"
	"C('gmatch', 'hello world', '%a+', 3)\n"
	"C('gmatch', 'hello world', '%a+', -3)\n"
	"C('gmatch', 'hello world', '%a+', -100)\n"
	"C('gmatch', 'hello world', '%a+', 0)\n"
	"C('gmatch', 'hello world', '%a+', 12)\n"
	"C('gmatch', 'hello world', '', 12)\n"
	"C('gmatch', 'hello world', '', 13)\n"
	"C('gmatch', 'hello world', '', math.maxinteger)\n"
	"C('gmatch', 'hello', 'l*', 2)\n"
	"C('gmatch', 'a\\0b\\0c', '%Z')\n"
	"C('gmatch', 'a\\0b\\0c', '[^%z]')\n"
	"C('gmatch', 'aXbXc', '%u()')\n"
	"C('gmatch', 'abc', '(a')\n"
	"C('gmatch', nil, 'a')\n"
	"C('gmatch', 'abc', 'a', 'x')\n"
	/* gsub with a string */
	"C('gsub', 'hello world', 'o', '0')\n"
	"C('gsub', 'hello world', 'o', '0', 1)\n"
	"C('gsub', 'hello world', 'o', '0', 0)\n"
	"C('gsub', 'hello world', 'o', '0', -1)\n"
	"C('gsub', 'hello world', 'o', '0', 1.0)\n"
	"C('gsub', 'hello world', 'o', '0', 1.5)\n"
	"C('gsub', 'hello world', 'x', '0')\n"
	"C('gsub', 'hello world', '(o)', '[%1%1]')\n"
	"C('gsub', 'hello world', 'o', '[%0]')\n"
	"C('gsub', 'hello world', 'o', '[%1]')\n"
	"C('gsub', 'hello world', 'o', '[%2]')\n"
	"C('gsub', 'hello world', '(o)', '[%2]')\n"
	"C('gsub', 'hello world', 'o', '%%')\n"
	"C('gsub', 'hello world', 'o', '%')\n"
	"C('gsub', 'hello world', 'o', '%x')\n"
	"C('gsub', 'hello world', 'o', 'a%')\n"
	"C('gsub', 'hello world', 'x', '%')\n"
	"C('gsub', 'hello world', '()o()', '%1-%2')\n"
	"C('gsub', 'hello world', '(l)(l)', '%2%1%0')\n"
	"C('gsub', 'abc', '', '-')\n"
	"C('gsub', '', '', '-')\n"
	"C('gsub', 'abc', '%w*', '-')\n"
	"C('gsub', 'abc d', '%w*', '-')\n"
	"C('gsub', 'abc', 'b*', '-')\n"
	"C('gsub', 'abc', '.-', '-')\n"
	"C('gsub', 'abc', '^', '>')\n"
	"C('gsub', 'abc', '$', '<')\n"
	"C('gsub', 'abc', '^a', 'A')\n"
	"C('gsub', 'abc', '^b', 'B')\n"
	"C('gsub', 'aaa', '^a', 'A')\n"
	"C('gsub', 'abc', '^', '>', 0)\n"
	"C('gsub', '  a  b  ', '%s+', ' ')\n"
	"C('gsub', 'a\\0b\\0c', '%z', '%%0')\n"
	"C('gsub', 'a\\0b\\0c', '\\0', '\\0\\0')\n"
	"C('gsub', 'abc', 'b', 42)\n"
	"C('gsub', 'abc', 'b', 4.5)\n"
	"C('gsub', 123, 2, 9)\n"
	"C('gsub', 123, 7, 9)\n"
	"C('gsub', 'abc', 'b', nil)\n"
	"C('gsub', 'abc', 'b', true)\n"
	"C('gsub', 'abc', 'b', true, 'x')\n"
	"C('gsub', 'abc', 'b')\n"
	"C('gsub', 'hello world', '%w+', '%0 %0', 1)\n"
	"C('gsub', 'abc', '(a)(b)(c)', '%3%2%1%9')\n"
	"C('gsub', long, 'x', 'yy')\n"
	/* gsub with a table / function */
	"C('gsubT', 'a b c d aa bb', '%w+')\n"
	"C('gsubT', 'a c', '%w+')\n"
	"C('gsubT', 'xyz ab', '%w+')\n"
	"C('gsubT', 'b', '%w+')\n"
	"C('gsubT', 'xyz', '()')\n"
	"C('gsubT', 'xyz', '(x)(y)')\n"
	"C('gsubT', 'a a a', 'a', nil, 2)\n"
	"C('gsubF', 'a b c d aa', '%w+')\n"
	"C('gsubF', 'x=1, y=2', '(%w+)=(%w+)')\n"
	"C('gsubF', 'xyz', '()(.)()')\n"
	"C('gsubF', 'xyz', '')\n"
	"C('gsubF', 'abc', '%w')\n"
	"C('gsubF', 'a', '(a')\n"
	"C('gsubF', 'abc', '%w', nil, 2)\n";

typedef struct pair {
	lua_State *stock; /* real string library */
	lua_State *mine;  /* lpattern functions + budget */
	mb_budget budget;
} pair;

static lua_State *new_state(int with_lpattern, mb_budget *b)
{
	lua_State *L = luaL_newstate();
	if (!L)
		return NULL;
	luaL_openlibs(L);
	if (with_lpattern) {
		*(mb_budget **)lua_getextraspace(L) = b;
		lua_getglobal(L, "string");
		mb_lpattern_register(L, -1);
		lua_pop(L, 1);
	}
	if (luaL_dostring(L, driver) != LUA_OK || luaL_dostring(L, cases) != LUA_OK) {
		fprintf(stderr, "driver: %s\n", lua_tostring(L, -1));
		lua_close(L);
		return NULL;
	}
	return L;
}

static int pair_open(pair *p)
{
	mb_budget_init(&p->budget, 0, 0, 0);
	p->stock = new_state(0, NULL);
	p->mine = new_state(1, &p->budget);
	return p->stock && p->mine ? 0 : -1;
}

static void pair_close(pair *p)
{
	if (p->stock)
		lua_close(p->stock);
	if (p->mine)
		lua_close(p->mine);
}

/* Calls the global function fn in L with the values pushed by push(); returns a malloc'd copy of
 * the string result. */
typedef void (*pusher)(lua_State *L, const void *arg);

static char *call_str(lua_State *L, const char *fn, pusher push, const void *arg, size_t *len)
{
	lua_getglobal(L, fn);
	int n0 = lua_gettop(L);
	push(L, arg);
	int nargs = lua_gettop(L) - n0;
	char *out = NULL;
	if (lua_pcall(L, nargs, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING) {
		size_t l;
		const char *s = lua_tolstring(L, -1, &l);
		out = malloc(l + 1);
		if (out) {
			memcpy(out, s, l + 1);
			*len = l;
		}
	} else {
		fprintf(stderr, "driver call failed: %s\n", lua_tostring(L, -1));
	}
	lua_settop(L, 0);
	return out;
}

static void push_index(lua_State *L, const void *arg)
{
	lua_pushinteger(L, *(const int *)arg);
}

/* Runs case i in both states; returns 1 when they agree. */
static int compare_case(pair *p, int i, int quiet_timeout, int *skipped)
{
	size_t la = 0, lb = 0;
	mb_budget_init(&p->budget, 0, 0, 2000);
	char *b = call_str(p->mine, "runcase", push_index, &i, &lb);
	if (b && quiet_timeout && strstr(b, "timeout")) {
		(*skipped)++;
		free(b);
		return 1;
	}
	char *a = call_str(p->stock, "runcase", push_index, &i, &la);
	int same = a && b && la == lb && memcmp(a, b, la) == 0;
	if (!same)
		fprintf(stderr, "  case %d differs:\n    stock: %s\n    mine:  %s\n", i, a ? a : "(null)",
			b ? b : "(null)");
	free(a);
	free(b);
	return same;
}

TEST(differential_table)
{
	pair p;
	CHECK(pair_open(&p) == 0);
	if (!p.stock || !p.mine) {
		pair_close(&p);
		return;
	}
	lua_getglobal(p.stock, "CASES");
	int n = (int)luaL_len(p.stock, -1);
	lua_settop(p.stock, 0);
	CHECK(n > 250);
	int bad = 0, skipped = 0;
	for (int i = 1; i <= n; i++)
		bad += !compare_case(&p, i, 0, &skipped);
	CHECK(bad == 0);
	/* the functions were really replaced (and the string metatable reaches them) */
	static const char *const names[] = {"find", "match", "gmatch", "gsub"};
	for (int i = 0; i < 4; i++) {
		lua_getglobal(p.stock, "string");
		lua_getfield(p.stock, -1, names[i]);
		lua_getglobal(p.mine, "string");
		lua_getfield(p.mine, -1, names[i]);
		CHECK(lua_tocfunction(p.mine, -1) != NULL);
		CHECK(lua_tocfunction(p.mine, -1) != lua_tocfunction(p.stock, -1));
		lua_settop(p.stock, 0);
		lua_settop(p.mine, 0);
	}
	CHECK(luaL_dostring(p.mine, "return getmetatable('').__index.find == string.find") == LUA_OK);
	CHECK(lua_toboolean(p.mine, -1));
	lua_settop(p.mine, 0);
	pair_close(&p);
}

/* ---- randomised differential ------------------------------------------------------------ */

typedef struct rng {
	uint64_t s;
} rng;

static uint32_t rnd(rng *r, uint32_t n)
{
	r->s ^= r->s << 13;
	r->s ^= r->s >> 7;
	r->s ^= r->s << 17;
	return (uint32_t)(r->s % n);
}

typedef struct rcase {
	const char *op;
	char subject[32];
	size_t slen;
	char pattern[64];
	size_t plen;
	int has_init;
	int init;
	const char *repl; /* gsub only */
	int max;          /* gsub max; 0 = none */
} rcase;

static void push_rcase(lua_State *L, const void *arg)
{
	const rcase *c = arg;
	lua_pushstring(L, c->op);
	lua_pushlstring(L, c->subject, c->slen);
	lua_pushlstring(L, c->pattern, c->plen);
	if (c->repl)
		lua_pushstring(L, c->repl);
	else if (c->has_init)
		lua_pushinteger(L, c->init);
	else
		lua_pushnil(L);
	if (c->max)
		lua_pushinteger(L, c->max);
}

static void make_rcase(rng *r, rcase *c)
{
	static const char *const ops[] = {"find", "match", "gmatch", "gsub", "gsubT", "gsubF"};
	static const char *const toks[] = {
		"a", "b", "c", ".", "%a", "%d", "%w", "%s", "%S", "%p", "%%", "%.", "[ab]", "[^a]",
		"[a-c]", "[%a_]", "[]", "(", ")", "()", "%1", "%2", "%bab", "%b()", "%f[a]", "%f[%w]",
		"%f[^a]", "*", "+", "-", "?", "^", "$", "[", "]", "%", "%b", "%f", "%x", "%z", " ",
		"a*", "b-", ".-", "(a*)", "(.)", "%f[%z]", "\0"};
	static const char *const repls[] = {"x", "%0", "%1", "%%", "%2", "<%1>", "%", "", "%9"};
	static const char alpha[] = "aab c(0)_A.\0";
	c->op = ops[rnd(r, 6)];
	c->slen = rnd(r, 17);
	for (size_t i = 0; i < c->slen; i++)
		c->subject[i] = alpha[rnd(r, sizeof alpha)]; /* includes the NUL */
	c->plen = 0;
	int ntok = (int)rnd(r, 8);
	for (int i = 0; i < ntok; i++) {
		const char *t = toks[rnd(r, sizeof toks / sizeof toks[0])];
		size_t tl = t[0] ? strlen(t) : 1;
		if (c->plen + tl > sizeof c->pattern)
			break;
		memcpy(c->pattern + c->plen, t, tl);
		c->plen += tl;
	}
	c->has_init = rnd(r, 3) == 0;
	c->init = (int)rnd(r, 41) - 20;
	c->repl = strcmp(c->op, "gsub") == 0 ? repls[rnd(r, 9)] : NULL;
	c->max = rnd(r, 4) == 0 ? (int)rnd(r, 5) - 1 : 0;
}

TEST(differential_random)
{
	pair p;
	CHECK(pair_open(&p) == 0);
	if (!p.stock || !p.mine) {
		pair_close(&p);
		return;
	}
	rng r = {0x9E3779B97F4A7C15ull};
	int bad = 0, skipped = 0, errors = 0;
	for (int it = 0; it < 5000 && bad < 10; it++) {
		rcase c;
		make_rcase(&r, &c);
		size_t la = 0, lb = 0;
		mb_budget_init(&p.budget, 0, 0, 100);
		char *b = call_str(p.mine, "run", push_rcase, &c, &lb);
		if (b && strstr(b, "timeout")) {
			skipped++;
			free(b);
			continue;
		}
		char *a = call_str(p.stock, "run", push_rcase, &c, &la);
		if (a && strncmp(a, "err", 3) == 0)
			errors++;
		if (!a || !b || la != lb || memcmp(a, b, la) != 0) {
			bad++;
			fprintf(stderr, "  random case %d (%s, s=%zu bytes, p=\"%.*s\") differs:\n"
				"    stock: %s\n    mine:  %s\n", it, c.op, c.slen, (int)c.plen, c.pattern,
				a ? a : "(null)", b ? b : "(null)");
		}
		free(a);
		free(b);
	}
	printf("     random: 5000 cases, %d errors compared, %d skipped (timeout)\n", errors, skipped);
	CHECK(bad == 0);
	CHECK(skipped < 50);
	CHECK(errors > 100); /* the generator does reach the error paths */
	pair_close(&p);
}

/* ---- hostile inputs ---------------------------------------------------------------------- */

/* Runs code in a fresh state with lpattern and budget b; returns the error message (static
 * buffer) or NULL when the code succeeded; *ms gets the milliseconds since t0 (taken just before
 * the budget was initialised). */
static const char *run_hostile(mb_budget *b, const char *code, uint64_t t0, double *ms)
{
	static char msg[256];
	lua_State *L = luaL_newstate();
	if (!L)
		return "no state";
	luaL_openlibs(L);
	*(mb_budget **)lua_getextraspace(L) = b;
	lua_getglobal(L, "string");
	mb_lpattern_register(L, -1);
	lua_pop(L, 1);
	int rc = luaL_dostring(L, code);
	*ms = (double)(mb_now_ns() - t0) / 1e6;
	const char *res = NULL;
	if (rc != LUA_OK) {
		snprintf(msg, sizeof msg, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
		res = msg;
	}
	lua_close(L);
	return res;
}

/* The code is repeated until something stops it, so the check is that no single call runs past
 * the deadline, whatever the machine's speed. */
static void expect_timeout(const char *code)
{
	mb_budget b;
	static char looped[4096];
	snprintf(looped, sizeof looped, "local f = function() %s end while true do f() end", code);
	uint64_t t0 = mb_now_ns();
	mb_budget_init(&b, 0, 0, 200);
	double ms = 0;
	const char *err = run_hostile(&b, looped, t0, &ms);
	CHECK(err != NULL);
	CHECK(err && strstr(err, "timeout") != NULL);
	CHECK(ms >= 200 && ms < 300);
	printf("     stopped after %.1f ms (deadline 200 ms)\n", ms);
	if (!err || !strstr(err, "timeout") || ms >= 300 || ms < 200)
		fprintf(stderr, "  %s -> %s after %.1f ms\n", code, err ? err : "(ok)", ms);
}

TEST(hostile_find_aab)
{
	expect_timeout("return string.rep('a', 2000):find('a*a*b')");
}

TEST(hostile_find_lazy)
{
	expect_timeout("return ('a'):rep(500):find('.-.-.-b')");
}

TEST(hostile_match_method)
{
	expect_timeout("local s = ('a'):rep(3000) return s:match('(a*)(a*)(a*)c')");
}

TEST(hostile_gsub)
{
	expect_timeout("return ('a'):rep(3000):gsub('a-a-a-c', 'x')");
}

TEST(hostile_gmatch)
{
	expect_timeout("for x in ('a'):rep(2000):gmatch('a*a*b') do end");
}

TEST(hostile_balance)
{
	expect_timeout("return ('('):rep(300000):find('%b()')");
}

TEST(hostile_backref)
{
	expect_timeout("return ('a'):rep(100000):find('(a*)%1%1b')");
}

TEST(hostile_under_pcall)
{
	/* pcall may catch the error, but the budget stays tripped: the next poll raises again */
	expect_timeout("local ok = pcall(string.find, ('a'):rep(2000), 'a*a*b')\n"
		       "return ('a'):rep(2000):find('a*a*b')");
}

TEST(cancelled)
{
	mb_budget b;
	uint64_t t0 = mb_now_ns();
	mb_budget_init(&b, 0, 0, 10000);
	atomic_store(&b.cancel, 1);
	double ms = 0;
	const char *err = run_hostile(&b, "return ('a'):rep(2000):find('a*a*b')", t0, &ms);
	CHECK(err && strstr(err, "cancelled") != NULL);
	CHECK(ms < 100);
}

TEST(ordinary_patterns_within_budget)
{
	mb_budget b;
	uint64_t t0 = mb_now_ns();
	mb_budget_init(&b, 0, 0, 5000);
	double ms = 0;
	const char *err = run_hostile(&b,
		"local s = ('word  '):rep(20000)\n"
		"local r, n = s:gsub('%s+', ' ')\n"
		"assert(n == 20000 and #r == 100000)\n"
		"local c = 0 for w in s:gmatch('%w+') do c = c + 1 end\n"
		"assert(c == 20000)\n"
		"assert(s:find('^word') == 1 and s:find('d  $') == 119998)\n"
		"assert(select('#', s:find('(w)(o)')) == 4)\n", t0, &ms);
	CHECK(err == NULL);
	if (err)
		fprintf(stderr, "  %s\n", err);
	CHECK(ms < 1000);
}

TEST(host_state_without_budget)
{
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_getglobal(L, "string");
	mb_lpattern_register(L, -1);
	lua_pop(L, 1);
	CHECK(luaL_dostring(L, "return ('key=val'):match('(%w+)=(%w+)')") == LUA_OK);
	CHECK_STR(lua_tostring(L, -2), "key");
	CHECK_STR(lua_tostring(L, -1), "val");
	lua_close(L);
}

int main(void)
{
	RUN(differential_table);
	RUN(differential_random);
	RUN(hostile_find_aab);
	RUN(hostile_find_lazy);
	RUN(hostile_match_method);
	RUN(hostile_gsub);
	RUN(hostile_gmatch);
	RUN(hostile_balance);
	RUN(hostile_backref);
	RUN(hostile_under_pcall);
	RUN(cancelled);
	RUN(ordinary_patterns_within_budget);
	RUN(host_state_without_budget);
	return UNIT_END();
}
