/* test_json.c - unit tests of src/json.c: exact round trips, the null and array conventions,
 * UTF-8 rules, every limit (depth, cycles, output and input size, memory and time budgets), no
 * metamethod ever running, error messages with paths and configurable limit names, raw values,
 * tables whose keys collide as text, mixed tables, and the text of reals against a printf
 * reference. Each test runs Lua snippets in a state that has the codec as the global `json`
 * (host-like states also get raw() and lenient()); budgeted tests attach an mb_budget to the
 * state the way the sandbox does and check that every byte charged to it is given back. */
#include "budget.h"
#include "json.h"
#include "unit.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

static char result_buf[4096];

static lua_State *new_state(mb_budget *b, const mb_json_limits *lim)
{
	lua_State *L = luaL_newstate();
	*(mb_budget **)lua_getextraspace(L) = b;
	luaL_openlibs(L);
	mb_json_open(L, lim);
	lua_setglobal(L, "json");
	return L;
}

/* A Lua allocator that charges the budget, as the sandbox's does (src/arena.c): decoded values
 * are Lua values, so their memory counts only through it. */
static void *charged_alloc(void *ud, void *p, size_t osize, size_t nsize)
{
	mb_budget *b = ud;
	if (nsize == 0) {
		if (p)
			mb_budget_credit(b, osize);
		free(p);
		return NULL;
	}
	size_t old = p ? osize : 0;
	if (nsize > old && mb_budget_charge(b, nsize - old) != 0)
		return NULL;
	void *q = realloc(p, nsize);
	if (!q) {
		if (nsize > old)
			mb_budget_credit(b, nsize - old);
		return NULL;
	}
	if (nsize < old)
		mb_budget_credit(b, old - nsize);
	return q;
}

static lua_State *new_charged_state(mb_budget *b)
{
	lua_State *L = lua_newstate(charged_alloc, b);
	*(mb_budget **)lua_getextraspace(L) = b;
	luaL_openlibs(L);
	mb_json_open(L, NULL);
	lua_setglobal(L, "json");
	return L;
}

/* Runs code (chunk name "t", so errors raised by json.* read "t:1: json.encode: ..."); returns its string result, "ERR: <message>" on error, or "<type>" otherwise. */
static const char *run(lua_State *L, const char *code)
{
	int top = lua_gettop(L);
	if (luaL_loadbuffer(L, code, strlen(code), "=t") != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
		snprintf(result_buf, sizeof result_buf, "ERR: %s", lua_tostring(L, -1));
	else if (lua_type(L, -1) == LUA_TSTRING)
		snprintf(result_buf, sizeof result_buf, "%s", lua_tostring(L, -1));
	else
		snprintf(result_buf, sizeof result_buf, "<%s>", luaL_typename(L, -1));
	lua_settop(L, top);
	return result_buf;
}

static int starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

TEST(exact_integers)
{
	lua_State *L = new_state(NULL, NULL);
	CHECK_STR(run(L, "return json.encode(123456789012345678)"), "123456789012345678");
	CHECK_STR(run(L, "return json.encode(9007199254740993)"), "9007199254740993");
	CHECK_STR(run(L, "return json.encode(math.maxinteger)"), "9223372036854775807");
	CHECK_STR(run(L, "return json.encode(math.mininteger)"), "-9223372036854775808");
	CHECK_STR(run(L, "local v = json.decode('9007199254740993') "
			 "return math.type(v) .. ' ' .. tostring(v == 9007199254740993)"), "integer true");
	CHECK_STR(run(L, "return tostring(json.decode('[123456789012345678]')[1])"), "123456789012345678");
	CHECK_STR(run(L, "local a = json.decode('[9223372036854775807,-9223372036854775808]') "
			 "return tostring(a[1] == math.maxinteger and a[2] == math.mininteger)"), "true");
	/* outside int64: floats */
	CHECK_STR(run(L, "local a = json.decode('[12345678901234567890,-9223372036854775809,1,\"9999999999999999999999\"]') "
			 "return math.type(a[1]) .. ' ' .. string.format('%.17g', a[1]) .. ' ' .. math.type(a[2]) "
			 ".. ' ' .. math.type(a[3]) .. ' ' .. a[4]"),
		  "float 1.2345678901234567e+19 float integer 9999999999999999999999");
	CHECK_STR(run(L, "return json.encode(json.decode('{\"n\":100000000000000000000000}'))"), "{\"n\":1e23}");
	lua_close(L);
}

TEST(floats)
{
	lua_State *L = new_state(NULL, NULL);
	CHECK_STR(run(L, "return json.encode(1.0)"), "1.0");
	CHECK_STR(run(L, "return json.encode({0.1, 0.5, -0.0, 1e300, 2^53})"), "[0.1,0.5,-0.0,1e300,9007199254740992.0]");
	CHECK_STR(run(L, "return json.encode(1/3)"), "0.3333333333333333");
	CHECK_STR(run(L, "local v = json.decode('1.0') return math.type(v) .. ' ' .. json.encode(v)"), "float 1.0");
	CHECK_STR(run(L, "local v = json.decode('1e2') return math.type(v)"), "float");
	CHECK_STR(run(L, "for _, x in ipairs({0.1, 1/3, 2/3, 1e-300, 5e-324, 123.456, -1.5e-7, math.pi}) do "
			 "  local y = json.decode(json.encode(x)) "
			 "  if y ~= x or math.type(y) ~= 'float' then return 'mismatch ' .. x end "
			 "end return 'ok'"), "ok");
	CHECK_STR(run(L, "return json.encode(0/0)"), "ERR: t:1: json.encode: cannot encode NaN (JSON has no NaN or infinity) at value");
	CHECK_STR(run(L, "return json.encode({x = {math.huge}})"), "ERR: t:1: json.encode: cannot encode inf (JSON has no NaN or infinity) at value.x[1]");
	CHECK_STR(run(L, "return json.decode('[1e400]')"), "ERR: t:1: json.decode: real number overflow near '1e400' at line 1 column 6 (position 6)");
	/* lenient: null */
	CHECK(luaL_dostring(L, "return {1, 0/0, -math.huge, print}") == LUA_OK);
	char err[256];
	size_t len;
	char *s = mb_json_encode(L, -1, NULL, MB_JSON_LENIENT, &len, err, sizeof err);
	CHECK_STR(s, "[1,null,null,null]");
	CHECK(s && len == 18);
	free(s);
	lua_pop(L, 1);
	lua_close(L);
}

TEST(null_and_containers)
{
	lua_State *L = new_state(NULL, NULL);
	CHECK_STR(run(L, "return tostring(json.null == nil) .. type(json.null)"), "falseuserdata");
	CHECK_STR(run(L, "return tostring(json.decode('null') == json.null)"), "true");
	CHECK_STR(run(L, "local v = json.decode('[null,1,null]') return #v .. tostring(v[1] == json.null and v[3] == json.null)"), "3true");
	CHECK_STR(run(L, "local v = json.decode('{\"a\":null}') return tostring(v.a == json.null)"), "true");
	CHECK_STR(run(L, "return json.encode(json.decode('{\"b\":[null]}'))"), "{\"b\":[null]}");
	CHECK_STR(run(L, "return json.encode(json.decode('[]'))"), "[]");
	CHECK_STR(run(L, "return json.encode(json.decode('{}'))"), "{}");
	CHECK_STR(run(L, "return json.encode({})"), "{}");
	CHECK_STR(run(L, "return json.encode(json.array({}))"), "[]");
	CHECK_STR(run(L, "local t = {} return tostring(json.array(t) == t)"), "true");
	CHECK_STR(run(L, "return json.encode({a = json.decode('[]'), b = json.decode('{}')})"),
		  run(L, "return json.encode({a = json.array({}), b = {}})"));
	CHECK_STR(run(L, "return getmetatable(json.decode('[1]'))"), "json.array");
	CHECK_STR(run(L, "return getmetatable(json.decode('{}'))"), "<nil>");
	CHECK(starts_with(run(L, "return setmetatable(json.decode('[1]'), {})"), "ERR: t:1: cannot change a protected metatable"));
	CHECK_STR(run(L, "return json.array(setmetatable({}, {}))"), "ERR: t:1: json.array: the table already has a metatable");
	CHECK_STR(run(L, "return json.array(1)"), "ERR: t:1: bad argument #1 to 'array' (table expected, got number)");
	CHECK_STR(run(L, "return json.encode(nil)"), "null");
	CHECK_STR(run(L, "return json.encode({true, false, 'x', 1, 2.5})"), "[true,false,\"x\",1,2.5]");
	/* an array with holes (marked) encodes its border with nulls */
	CHECK_STR(run(L, "local a = json.decode('[1,2,3]') a[2] = nil return json.encode(a)"), "[1,null,3]");
	lua_close(L);
}

TEST(nested_round_trip)
{
	lua_State *L = new_state(NULL, NULL);
	const char *msg = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"execute_code\","
			  "\"arguments\":{\"code\":\"return 1+1\",\"list\":[1,[2,[3,[]]],{},{\"k\":[true,false,null]}]}}}";
	lua_pushstring(L, msg);
	lua_setglobal(L, "MSG");
	/* key order follows the Lua table, so compare a second round trip and the size */
	CHECK_STR(run(L, "local function eq(x, y) "
			 "  if type(x) ~= type(y) or getmetatable(x) ~= getmetatable(y) then return false end "
			 "  if type(x) ~= 'table' then return x == y and math.type(x) == math.type(y) end "
			 "  for k, v in pairs(x) do if not eq(v, y[k]) then return false end end "
			 "  for k in pairs(y) do if x[k] == nil then return false end end return true "
			 "end "
			 "local a = json.encode(json.decode(MSG)) "
			 "return tostring(#a == #MSG and eq(json.decode(MSG), json.decode(a)))"), "true");
	CHECK_STR(run(L, "local v = json.decode(MSG) return v.params.arguments.code .. v.params.arguments.list[2][2][1] "
			 ".. #v.params.arguments.list[2][2][2] .. v.jsonrpc .. math.type(v.id)"), "return 1+130" "2.0integer");
	lua_close(L);
}

TEST(strings)
{
	lua_State *L = new_state(NULL, NULL);
	/* NUL kept both ways */
	CHECK_STR(run(L, "local s = json.decode('\"a\\\\u0000b\"') return #s .. (s == 'a\\0b' and 'y' or 'n')"), "3y");
	CHECK_STR(run(L, "return json.encode('a\\0b')"), "\"a\\u0000b\"");
	/* escapes: no raw control character ever, so no raw newline */
	CHECK_STR(run(L, "return json.encode('l1\\nl2\\r\\t\"\\\\\\1\\31')"), "\"l1\\nl2\\r\\t\\\"\\\\\\u0001\\u001F\"");
	CHECK_STR(run(L, "local t = {} for i = 0, 31 do t[#t+1] = string.char(i) end "
			 "local s = json.encode({k = table.concat(t)}) "
			 "return s:find('[%z\\1-\\31]') and 'raw control char' or 'clean'"), "clean");
	/* unicode escapes decode to UTF-8, including surrogate pairs; output stays UTF-8 */
	CHECK_STR(run(L, "return json.decode('\"\\\\u00e9\\\\ud83d\\\\ude00\\\\u20ac\"')"), "\xc3\xa9\xf0\x9f\x98\x80\xe2\x82\xac");
	CHECK_STR(run(L, "return json.encode('\\u{e9}\\u{1F600}')"), "\"\xc3\xa9\xf0\x9f\x98\x80\"");
	CHECK_STR(run(L, "return json.decode('\"\\\\ud800\"')"),
		  "ERR: t:1: json.decode: invalid Unicode '\\uD800' near '\"\\ud800\"' at line 1 column 8 (position 8)");
	/* NUL in an object key: jansson refuses it */
	CHECK_STR(run(L, "return json.decode('{\"a\\\\u0000\":1}')"),
		  "ERR: t:1: json.decode: object keys containing \\u0000 are not supported (line 1 column 10, position 10)");
	lua_close(L);
}

TEST(invalid_utf8)
{
	lua_State *L = new_state(NULL, NULL);
	char err[256];
	size_t len;
	CHECK_STR(run(L, "return json.encode({'ok', 'ab\\xff'})"), "ERR: t:1: json.encode: string is not valid UTF-8 (byte 3) at value[2]");
	CHECK_STR(run(L, "return json.encode({['k\\xc0'] = 1})"), "ERR: t:1: json.encode: object key is not valid UTF-8 (byte 2) at value[\"k?\"]");
	/* overlong, surrogate, beyond U+10FFFF, truncated */
	CHECK(starts_with(run(L, "return json.encode('\\xc0\\x80')"), "ERR: t:1: json.encode: string is not valid UTF-8"));
	CHECK(starts_with(run(L, "return json.encode('\\xed\\xa0\\x80')"), "ERR: t:1: json.encode: string is not valid UTF-8"));
	CHECK(starts_with(run(L, "return json.encode('\\xf4\\x90\\x80\\x80')"), "ERR: t:1: json.encode: string is not valid UTF-8"));
	CHECK(starts_with(run(L, "return json.encode('abc\\xe2\\x82')"), "ERR: t:1: json.encode: string is not valid UTF-8 (byte 4)"));
	/* lenient: each maximal invalid subsequence becomes U+FFFD */
	CHECK(luaL_dostring(L, "return {'ab\\xffc', 'x\\xe2\\x82', ['k\\xc0'] = '\\xf0\\x9f\\x98\\x80\\xed\\xa0\\x80'}") == LUA_OK);
	char *s = mb_json_encode(L, -1, NULL, MB_JSON_LENIENT, &len, err, sizeof err);
	CHECK(s != NULL);
	if (s) {
		CHECK(strstr(s, "\"1\":\"ab\xef\xbf\xbd" "c\"") != NULL);
		CHECK(strstr(s, "\"2\":\"x\xef\xbf\xbd\"") != NULL);
		CHECK(strstr(s, "\"k\xef\xbf\xbd\":\"\xf0\x9f\x98\x80\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"") != NULL);
	}
	free(s);
	lua_pop(L, 1);
	/* decode rejects invalid UTF-8 with jansson's message and position */
	CHECK_STR(run(L, "return json.decode('[\"ab\\xff\"]')"),
		  "ERR: t:1: json.decode: unable to decode byte 0xff near '\"ab' at line 1 column 4 (position 4)");
	lua_close(L);
}

TEST(depth_limit)
{
	lua_State *L = new_state(NULL, NULL);
	const char *nest = "local function nest(n) local t = {} for i = 1, n - 1 do t = {t} end return t end ";
	char code[512];
	snprintf(code, sizeof code, "%s return #json.encode(nest(128))", nest);
	CHECK_STR(run(L, code), "<number>");
	snprintf(code, sizeof code, "%s return json.encode(nest(129))", nest);
	CHECK_STR(run(L, code), "ERR: t:1: json.encode: JSON nesting exceeds json_max_depth=128 (a deeper table, or a table that contains itself)");
	CHECK_STR(run(L, "return type(json.decode(string.rep('[', 128) .. string.rep(']', 128)))"), "table");
	CHECK_STR(run(L, "return json.decode(string.rep('[', 129) .. string.rep(']', 129))"), "ERR: t:1: json.decode: JSON nesting exceeds json_max_depth=128");
	CHECK_STR(run(L, "return json.decode(string.rep('{\"a\":', 129) .. '1' .. string.rep('}', 129))"), "ERR: t:1: json.decode: JSON nesting exceeds json_max_depth=128");
	/* deeper than jansson's own parser limit: same message */
	CHECK_STR(run(L, "return json.decode(string.rep('[', 100000))"), "ERR: t:1: json.decode: JSON nesting exceeds json_max_depth=128");
	/* brackets inside strings do not count */
	CHECK_STR(run(L, "return json.decode('[\"' .. string.rep('[', 500) .. '\\\\\\\"\"]')[1]:sub(-3)"), "[[\"");
	/* cycles hit the depth limit */
	CHECK_STR(run(L, "local t = {} t.self = t return json.encode(t)"),
		  "ERR: t:1: json.encode: JSON nesting exceeds json_max_depth=128 (a deeper table, or a table that contains itself)");
	CHECK(starts_with(run(L, "local a, b = {}, {} a[1] = b b[1] = a return json.encode(a)"), "ERR: t:1: json.encode: JSON nesting exceeds json_max_depth=128"));
	lua_close(L);

	mb_json_limits lim = {.max_depth = 3};
	L = new_state(NULL, &lim);
	CHECK_STR(run(L, "return json.encode({{{1}}})"), "[[[1]]]");
	CHECK_STR(run(L, "return json.encode({{{{}}}})"), "ERR: t:1: json.encode: JSON nesting exceeds json_max_depth=3 (a deeper table, or a table that contains itself)");
	CHECK_STR(run(L, "return json.decode('[[[{}]]]')"), "ERR: t:1: json.decode: JSON nesting exceeds json_max_depth=3");
	lua_close(L);
}

/* unique_keys (client requests): a repeated key in any object is an error, in the fast path
 * (also across its 32-item chunks) and in jansson's; NUL in a key has its own message */
TEST(unique_keys)
{
	mb_json_limits strict = {.unique_keys = 1};
	lua_State *L = new_state(NULL, NULL);
	char err[300];
	const char *dups[] = {
		"{\"a\":1,\"a\":2}", "{\"x\":{\"b\":null,\"b\":null}}", "[{\"k\":[],\"k\":{}}]",
		/* the second "a" after 40 other keys: it meets the first in the table, not the chunk */
		"{\"a\":0,\"k1\":1,\"k2\":1,\"k3\":1,\"k4\":1,\"k5\":1,\"k6\":1,\"k7\":1,\"k8\":1,\"k9\":1,"
		"\"k10\":1,\"k11\":1,\"k12\":1,\"k13\":1,\"k14\":1,\"k15\":1,\"k16\":1,\"k17\":1,\"k18\":1,"
		"\"k19\":1,\"k20\":1,\"k21\":1,\"k22\":1,\"k23\":1,\"k24\":1,\"k25\":1,\"k26\":1,\"k27\":1,"
		"\"k28\":1,\"k29\":1,\"k30\":1,\"k31\":1,\"k32\":1,\"k33\":1,\"k34\":1,\"k35\":1,\"k36\":1,"
		"\"k37\":1,\"k38\":1,\"k39\":1,\"k40\":1,\"a\":2}",
		/* 1e400 makes the fast path decline: jansson must refuse the repeat itself */
		"{\"n\":1,\"n\":2,\"big\":123456789012345678901234567890}",
	};
	for (size_t i = 0; i < sizeof dups / sizeof *dups; i++) {
		int top = lua_gettop(L);
		CHECK(mb_json_decode(L, dups[i], strlen(dups[i]), &strict, err, sizeof err) == -1);
		CHECK(starts_with(err, "duplicate object key near '\""));
		CHECK(lua_gettop(L) == top);
		CHECK(mb_json_decode(L, dups[i], strlen(dups[i]), NULL, err, sizeof err) == 0);
		lua_pop(L, 1);
	}
	const char *ok = "{\"a\":1,\"b\":{\"a\":2},\"c\":[{\"a\":3},{\"a\":4}]}";
	CHECK(mb_json_decode(L, ok, strlen(ok), &strict, err, sizeof err) == 0);
	lua_pop(L, 1);
	const char *nul = "{\"a\\u0000\":1}";
	CHECK(mb_json_decode(L, nul, strlen(nul), NULL, err, sizeof err) == -1);
	CHECK(starts_with(err, "object keys containing \\u0000 are not supported (line 1"));
	lua_close(L);
}

TEST(size_limits)
{
	mb_json_limits lim = {.max_output_bytes = 10, .max_input_bytes = 20};
	lua_State *L = new_state(NULL, &lim);
	CHECK_STR(run(L, "return json.encode('12345678')"), "\"12345678\"");
	CHECK_STR(run(L, "return json.encode('123456789')"), "ERR: t:1: json.encode: JSON output exceeds max_output_bytes=10");
	CHECK_STR(run(L, "return json.encode({1,2,3,4,5,6})"), "ERR: t:1: json.encode: JSON output exceeds max_output_bytes=10");
	CHECK_STR(run(L, "return json.encode({a=1,b=2})"), "ERR: t:1: json.encode: JSON output exceeds max_output_bytes=10");
	CHECK_STR(run(L, "return json.encode({1,2,3,4})"), "[1,2,3,4]");
	CHECK_STR(run(L, "return #json.decode('[1,2,3,4,5,6,7,8,9]')"), "<number>");
	CHECK_STR(run(L, "return json.decode('[1,2,3,4,5,6,7,8,9,10]')"), "ERR: t:1: json.decode: JSON input is 22 bytes, exceeds max_input_bytes=20");
	lua_close(L);
}

TEST(tables_mixed_sparse)
{
	lua_State *L = new_state(NULL, NULL);
	CHECK_STR(run(L, "return json.encode({[1]=1,[3]=3})"), run(L, "return json.encode({['1']=1,['3']=3})"));
	CHECK_STR(run(L, "local s = json.encode({[1]=1,[3]=3}) return tostring(s == '{\"1\":1,\"3\":3}' or s == '{\"3\":3,\"1\":1}')"), "true");
	CHECK_STR(run(L, "local v = json.decode(json.encode({1, 2, x = 3})) return getmetatable(v) == nil and (v['1'] + v['2'] + v.x)"), "<number>");
	CHECK_STR(run(L, "local v = json.decode(json.encode({1, 2, x = 3})) return tostring(v['1'] + v['2'] + v.x)"), "6");
	CHECK_STR(run(L, "return json.encode({[1.5] = 'a'})"), "{\"1.5\":\"a\"}");
	CHECK_STR(run(L, "return json.encode({[-2] = 'a'})"), "{\"-2\":\"a\"}");
	CHECK_STR(run(L, "return json.encode({[0] = 'a'})"), "{\"0\":\"a\"}");
	CHECK_STR(run(L, "return json.encode({1, 2, 3})"), "[1,2,3]");
	CHECK_STR(run(L, "return json.encode({[2] = 2, [1] = 1})"), "[1,2]");
	CHECK_STR(run(L, "return json.encode({[true] = 1})"), "ERR: t:1: json.encode: cannot encode a table key of type boolean at value");
	CHECK_STR(run(L, "return json.encode({a = {[{}] = 1}})"), "ERR: t:1: json.encode: cannot encode a table key of type table at value.a");
	CHECK_STR(run(L, "return json.encode({result = {items = {1, 2, print}}})"), "ERR: t:1: json.encode: cannot encode function at value.result.items[3]");
	CHECK_STR(run(L, "return json.encode({['a b'] = {coroutine.create(print)}})"), "ERR: t:1: json.encode: cannot encode thread at value[\"a b\"][1]");
	CHECK_STR(run(L, "return json.encode({[7] = io.stdout})"), "ERR: t:1: json.encode: cannot encode userdata at value[7]");
	/* lenient: bad keys skipped, bad values null; C API root name */
	CHECK(luaL_dostring(L, "return {[true] = 1, [print] = 2, ok = print}") == LUA_OK);
	char err[256];
	size_t len;
	char *s = mb_json_encode(L, -1, NULL, MB_JSON_LENIENT, &len, err, sizeof err);
	CHECK_STR(s, "{\"ok\":null}");
	free(s);
	mb_json_limits lim = {.root_name = "result"};
	s = mb_json_encode(L, -1, &lim, 0, &len, err, sizeof err);
	CHECK(s == NULL);
	CHECK(starts_with(err, "cannot encode"));
	lua_pop(L, 1);
	CHECK(luaL_dostring(L, "return {items = {1, 2, print}}") == LUA_OK);
	s = mb_json_encode(L, -1, &lim, 0, &len, err, sizeof err);
	CHECK(s == NULL);
	CHECK_STR(err, "cannot encode function at result.items[3]");
	lua_pop(L, 1);
	CHECK(lua_gettop(L) == 0);
	lua_close(L);
}

TEST(no_metamethods)
{
	lua_State *L = new_state(NULL, NULL);
	const char *code =
		"CALLED = false "
		"local mt = {} "
		"for _, k in ipairs({'__index', '__newindex', '__pairs', '__len', '__tostring', '__eq', '__lt', "
		"                    '__le', '__call', '__concat', '__name', '__close', '__mode'}) do "
		"  mt[k] = function() CALLED = k return 1 end "
		"end "
		"mt.__name = nil mt.__mode = nil mt.__metatable = 'locked' "
		"local arr = setmetatable({1, 2}, mt) "
		"local obj = setmetatable({x = 1}, mt) "
		"local empty = setmetatable({}, mt) "
		"local s = json.encode({arr, obj, empty}) "
		"return s .. ' ' .. tostring(CALLED)";
	CHECK_STR(run(L, code), "[[1,2],{\"x\":1},{}] false");
	lua_close(L);
}

TEST(malformed)
{
	lua_State *L = new_state(NULL, NULL);
	CHECK_STR(run(L, "return json.decode('[1,')"), "ERR: t:1: json.decode: ']' expected near end of file at line 1 column 3 (position 3)");
	CHECK_STR(run(L, "return json.decode('')"), "ERR: t:1: json.decode: unexpected token near end of file at line 1 column 0 (position 0)");
	CHECK_STR(run(L, "return json.decode('{\"a\"}')"), "ERR: t:1: json.decode: ':' expected near '}' at line 1 column 5 (position 5)");
	CHECK_STR(run(L, "return json.decode('tru')"), "ERR: t:1: json.decode: invalid token near 'tru' at line 1 column 3 (position 3)");
	CHECK_STR(run(L, "return json.decode('[1] x')"), "ERR: t:1: json.decode: end of file expected near 'x' at line 1 column 5 (position 5)");
	CHECK_STR(run(L, "return json.decode('{\"a\":1,}')"), "ERR: t:1: json.decode: string or '}' expected near '}' at line 1 column 8 (position 8)");
	CHECK_STR(run(L, "return json.decode('[01]')"), "ERR: t:1: json.decode: invalid token near '0' at line 1 column 2 (position 2)");
	CHECK_STR(run(L, "return json.decode('\\n\\n[\"\\1\"]')"), "ERR: t:1: json.decode: control character 0x1 near '\"' at line 3 column 2 (position 4)");
	CHECK_STR(run(L, "return json.decode(12)"), "ERR: t:1: bad argument #1 to 'decode' (string expected, got number)");
	/* widening big integers must not disturb strings or reals */
	CHECK_STR(run(L, "return json.encode(json.decode('[\"12345678901234567890\",12345678901234567890,1.5e3,-0,\"\\\\\"99999999999999999999\"]'))"),
		  "[\"12345678901234567890\",1.2345678901234567e19,1500.0,0,\"\\\"99999999999999999999\"]");
	lua_close(L);
}

/* Budgeted tests: a sandbox-like state whose jansson allocations are charged to b. */

TEST(memory_cap_dag)
{
	mb_budget b;
	/* the output buffer is what grows (about 4 bytes per table here): 2^25 tables would make
	 * 200 MB of text, the cap stops it when the buffer would pass 8 MB */
	mb_budget_init(&b, 8u << 20, 0, 10000);
	lua_State *L = new_state(&b, NULL);
	uint64_t t0 = mb_now_ns();
	const char *r = run(L, "local t = {1} for i = 1, 25 do t = {t, t} end return json.encode(t)");
	CHECK_STR(r, "ERR: memory limit: execution exceeded memory_mb=8 (8388608 bytes)");
	CHECK(b.mem_used == 0);
	CHECK(mb_now_ns() - t0 < 2000000000ull);
	fprintf(stderr, "  DAG encode hit the 8 MB cap after %llu ms\n",
		(unsigned long long)((mb_now_ns() - t0) / 1000000));
	lua_close(L);

	mb_budget_init(&b, 64u << 20, 0, 10000);
	L = new_state(&b, NULL);
	r = run(L, "local s = string.rep('x', 1 << 20) local t = {} for i = 1, 1000 do t[i] = s end return json.encode(t)");
	CHECK_STR(r, "ERR: memory limit: execution exceeded memory_mb=64 (67108864 bytes)");
	CHECK(b.mem_used == 0);
	/* sticky: the next call fails the same way */
	CHECK_STR(run(L, "return json.encode(1)"), "ERR: memory limit: execution exceeded memory_mb=64 (67108864 bytes)");
	lua_close(L);

	/* decode under a small cap: the decoded values are what fills it (fast path, json_dec.c),
	 * and so is jansson's tree when the fast path declines (here: an integer beyond int64) */
	const char *big[] = {
		"local s = '[' .. string.rep('{\"a\":[1,2,3]},', 50000) .. '1]' return json.decode(s)",
		"local s = '[' .. string.rep('{\"a\":[1,2,3]},', 50000) .. '1e999999999999999999]' return json.decode(s)",
		"local s = '[' .. string.rep('{\"a\":[1,2,3]},', 50000) .. '99999999999999999999]' return json.decode(s)",
	};
	for (int k = 0; k < 3; k++) {
		mb_budget_init(&b, 4u << 20, 0, 10000);
		L = new_charged_state(&b);
		r = run(L, big[k]);
		CHECK_STR(r, "ERR: memory limit: execution exceeded memory_mb=4 (4194304 bytes)");
		lua_close(L);
		CHECK(b.mem_used == 0);
	}

	/* A long document the fast path gives up on near its end: what it built is collected before
	 * jansson parses (review finding: a 120,000-item document with a syntax error at the end
	 * was a memory error at 64 MB instead of the syntax error). Big integers and underflowing
	 * reals at the end are read by the fast path itself now (they used to be handed to jansson). */
	{
		const char *tails[] = {"1] x", "99999999999999999999]", "1e-400]"};
		const char *want[] = {"ERR: t:1: json.decode: end of file expected near 'x' at line 1 column",
				      "<table>", "<table>"};
		for (int k = 0; k < 3; k++) {
			mb_budget_init(&b, 64u << 20, 0, 10000);
			L = new_charged_state(&b);
			char code[256];
			snprintf(code, sizeof code, "local s = '[' .. string.rep('{\"a\":1,\"b\":\"xy\"},', 120000) .. '%s' "
				 "return json.decode(s)", tails[k]);
			r = run(L, code);
			CHECK(strncmp(r, want[k], strlen(want[k])) == 0);
			if (strncmp(r, want[k], strlen(want[k])) != 0)
				fprintf(stderr, "  tail %s: %s\n", tails[k], r);
			lua_close(L);
			CHECK(b.mem_used == 0);
		}
	}

	/* normal use gives back every byte charged */
	mb_budget_init(&b, 64u << 20, 0, 10000);
	L = new_state(&b, NULL);
	CHECK_STR(run(L, "local v = json.decode('{\"a\":[1,2,{\"b\":\"c\"}],\"d\":12345678901234567890}') return json.encode(v.a)"), "[1,2,{\"b\":\"c\"}]");
	CHECK(b.mem_used == 0);
	CHECK(b.mem_peak > 0);
	CHECK(mb_budget_current() == NULL);
	lua_close(L);
}

TEST(timeout_huge_encode)
{
	mb_budget b;
	lua_State *L = new_state(NULL, NULL);
	/* built before the budget starts: 1000 x 1000 x 1000 leaves, shared */
	CHECK_STR(run(L, "local leaf = {} for i = 1, 1000 do leaf[i] = false end "
			 "local mid = {} for i = 1, 1000 do mid[i] = leaf end "
			 "BIG = {} for i = 1, 1000 do BIG[i] = mid end return 'built'"), "built");
	mb_budget_init(&b, 1u << 30, 0, 200);
	*(mb_budget **)lua_getextraspace(L) = &b;
	uint64_t t0 = mb_now_ns();
	const char *r = run(L, "return json.encode(BIG)");
	uint64_t ms = (mb_now_ns() - t0) / 1000000;
	CHECK_STR(r, "ERR: timeout: execution exceeded timeout_ms=200");
	CHECK(ms < 300);
	CHECK(b.mem_used == 0);
	fprintf(stderr, "  huge encode stopped after %llu ms (deadline 200)\n", (unsigned long long)ms);

	/* decode: a large input through the polling reader, then conversion */
	CHECK_STR(run(L, "return json.encode(1)"), "ERR: timeout: execution exceeded timeout_ms=200"); /* sticky */
	*(mb_budget **)lua_getextraspace(L) = NULL;
	CHECK_STR(run(L, "BIGTEXT = '[' .. string.rep('{\"abc\":[1,2.5,\"x\",null,true]},', 2000000) .. '1]' return 'built'"), "built");
	mb_budget_init(&b, 1u << 30, 0, 200);
	*(mb_budget **)lua_getextraspace(L) = &b;
	t0 = mb_now_ns();
	r = run(L, "while true do json.decode(BIGTEXT) end"); /* repeated: speed-independent */
	ms = (mb_now_ns() - t0) / 1000000;
	CHECK_STR(r, "ERR: timeout: execution exceeded timeout_ms=200");
	CHECK(ms < 300);
	CHECK(b.mem_used == 0);
	fprintf(stderr, "  huge decode stopped after %llu ms (deadline 200)\n", (unsigned long long)ms);
	*(mb_budget **)lua_getextraspace(L) = NULL;
	lua_close(L);
}

TEST(c_api)
{
	lua_State *L = new_state(NULL, NULL);
	char err[256];
	size_t len = 99;
	int top = lua_gettop(L);
	CHECK(mb_json_decode(L, "{\"a\":[1,2]}", 11, NULL, err, sizeof err) == 0);
	CHECK(lua_gettop(L) == top + 1 && lua_istable(L, -1));
	char *s = mb_json_encode(L, -1, NULL, 0, &len, err, sizeof err);
	CHECK_STR(s, "{\"a\":[1,2]}");
	CHECK(len == 11);
	free(s);
	lua_pop(L, 1);
	CHECK(mb_json_decode(L, "[1,", 3, NULL, err, sizeof err) == -1);
	CHECK(lua_gettop(L) == top);
	CHECK_STR(err, "']' expected near end of file at line 1 column 3 (position 3)");
	/* not NUL-terminated input */
	CHECK(mb_json_decode(L, "[7]garbage", 3, NULL, err, sizeof err) == 0);
	lua_pop(L, 1);
	mb_json_push_null(L);
	CHECK(lua_islightuserdata(L, -1) && lua_touserdata(L, -1) == NULL);
	lua_pop(L, 1);
	lua_newtable(L);
	CHECK(mb_json_mark_array(L, -1) == 0);
	CHECK(mb_json_mark_array(L, -1) == 0);
	s = mb_json_encode(L, -1, NULL, 0, &len, err, sizeof err);
	CHECK_STR(s, "[]");
	free(s);
	lua_pop(L, 1);
	/* mb_budget_current() is used when the state has no budget of its own */
	mb_budget b;
	mb_budget_init(&b, 100, 0, 0);
	mb_budget_set_current(&b);
	/* jansson's tree is charged to it when the fast path declines (an integer beyond int64) */
	CHECK(mb_json_decode(L, "[[1,2,3],[4,5,6],{\"a\":99999999999999999999}]", 45, NULL, err, sizeof err) == -1);
	CHECK_STR(err, "memory limit: execution exceeded memory_mb=0 (100 bytes)");
	CHECK(mb_budget_current() == &b);
	CHECK(b.mem_used == 0);
	mb_budget_set_current(NULL);
	CHECK(lua_gettop(L) == top);
	lua_close(L);
}

/* lenient(v): mb_json_encode(v, MB_JSON_LENIENT) for tests written in Lua */
static int l_lenient(lua_State *L)
{
	char err[256];
	size_t len;
	lua_settop(L, 1);
	char *s = mb_json_encode(L, 1, NULL, MB_JSON_LENIENT, &len, err, sizeof err);
	if (!s)
		return luaL_error(L, "%s", err);
	lua_pushlstring(L, s, len);
	free(s);
	return 1;
}

/* A host-like state: json plus raw() (mb_json_raw_lua) and lenient() as globals. */
static lua_State *new_host_state(mb_budget *b, const mb_json_limits *lim)
{
	lua_State *L = new_state(b, lim);
	lua_pushcfunction(L, mb_json_raw_lua);
	lua_setglobal(L, "raw");
	lua_pushcfunction(L, l_lenient);
	lua_setglobal(L, "lenient");
	return L;
}

TEST(raw_values)
{
	lua_State *L = new_host_state(NULL, NULL);
	char err[256];
	size_t len;
	/* the json table itself has no raw() */
	CHECK_STR(run(L, "return tostring(json.raw)"), "nil");
	/* top level, array items, object values, nested, strict and lenient */
	CHECK_STR(run(L, "return json.encode(raw('{\"a\":[1,2]}'))"), "{\"a\":[1,2]}");
	CHECK_STR(run(L, "return json.encode({1, raw('[true,{}]'), 'x'})"), "[1,[true,{}],\"x\"]");
	CHECK_STR(run(L, "return json.encode({r = raw('{\"x\":null}')})"), "{\"r\":{\"x\":null}}");
	CHECK_STR(run(L, "return json.encode(json.array({raw('1'), raw('\"s\"')}))"), "[1,\"s\"]");
	CHECK_STR(run(L, "return json.encode({a = {b = {raw('2.50'), raw('\"\\\\u00e9\"')}}})"), "{\"a\":{\"b\":[2.50,\"\\u00e9\"]}}");
	CHECK_STR(run(L, "return lenient({raw('[1]'), print})"), "[[1],null]");
	CHECK_STR(run(L, "local r = raw('7') return json.encode({r, r, {r}})"), "[7,7,[7]]");
	/* line breaks (whitespace in valid JSON) become spaces: no raw newline in the output */
	CHECK_STR(run(L, "return json.encode({raw('{\\n  \"a\": 1\\r\\n}')})"), "[{   \"a\": 1  }]");
	/* a protected userdata */
	CHECK_STR(run(L, "local r = raw('1') return type(r) .. ' ' .. getmetatable(r)"), "userdata json.raw");
	CHECK(starts_with(run(L, "return setmetatable(raw('1'), {})"), "ERR: t:1: bad argument #1 to 'setmetatable' (table expected, got userdata)"));
	CHECK_STR(run(L, "return raw(1)"), "ERR: t:1: bad argument #1 to 'raw' (string expected, got number)");
	CHECK_STR(run(L, "return raw('')"), "ERR: t:1: bad argument #1 to 'raw' (JSON text expected, got an empty string)");
	/* other userdata is still not encodable */
	CHECK_STR(run(L, "return json.encode({raw('1'), io.stdout})"), "ERR: t:1: json.encode: cannot encode userdata at value[2]");
	/* C API: length-bounded copy; an empty raw value is written as null */
	mb_json_push_raw(L, "[1]garbage", 3);
	char *s = mb_json_encode(L, -1, NULL, 0, &len, err, sizeof err);
	CHECK_STR(s, "[1]");
	free(s);
	lua_pop(L, 1);
	mb_json_push_raw(L, "", 0);
	s = mb_json_encode(L, -1, NULL, 0, &len, err, sizeof err);
	CHECK_STR(s, "null");
	free(s);
	lua_pop(L, 1);
	CHECK(lua_gettop(L) == 0);
	lua_close(L);

	/* raw text counts toward max_output_bytes and the memory budget */
	mb_json_limits lim = {.max_output_bytes = 10};
	L = new_host_state(NULL, &lim);
	CHECK_STR(run(L, "return json.encode({raw('12345678')})"), "[12345678]");
	CHECK_STR(run(L, "return json.encode({raw('123456789')})"), "ERR: t:1: json.encode: JSON output exceeds max_output_bytes=10");
	lua_close(L);
	mb_budget b;
	mb_budget_init(&b, 64u << 20, 0, 10000);
	L = new_host_state(&b, NULL);
	CHECK_STR(run(L, "local r = raw(string.rep('1', 1000)) local t = {} for i = 1, 100 do t[i] = r end return #json.encode(t)"), "<number>");
	CHECK_STR(run(L, "local r = raw(string.rep('1', 1000)) local t = {} for i = 1, 100 do t[i] = r end return tostring(#json.encode(t))"), "100101");
	CHECK(b.mem_used == 0);
	lua_close(L);
}

TEST(limit_names)
{
	mb_json_limits lim = {.max_output_bytes = 10, .max_input_bytes = 20,
			      .input_limit_name = "max_message_bytes", .output_limit_name = "max_result_bytes"};
	lua_State *L = new_state(NULL, &lim);
	CHECK_STR(run(L, "return json.encode('123456789')"), "ERR: t:1: json.encode: JSON output exceeds max_result_bytes=10");
	CHECK_STR(run(L, "return json.encode({'12', '34', '56'})"), "ERR: t:1: json.encode: JSON output exceeds max_result_bytes=10");
	CHECK_STR(run(L, "return json.decode('[1,2,3,4,5,6,7,8,9,10]')"), "ERR: t:1: json.decode: JSON input is 22 bytes, exceeds max_message_bytes=20");
	CHECK_STR(run(L, "return json.encode({1,2,3,4})"), "[1,2,3,4]");
	lua_close(L);
	/* exactly at the limit is fine, one more byte is not */
	mb_json_limits lim2 = {.max_output_bytes = 5};
	L = new_state(NULL, &lim2);
	CHECK_STR(run(L, "return json.encode('abc')"), "\"abc\"");
	CHECK_STR(run(L, "return json.encode('abcd')"), "ERR: t:1: json.encode: JSON output exceeds max_output_bytes=5");
	CHECK_STR(run(L, "return json.encode(12345)"), "12345");
	CHECK_STR(run(L, "return json.encode(123456)"), "ERR: t:1: json.encode: JSON output exceeds max_output_bytes=5");
	CHECK_STR(run(L, "return json.encode('\\n\\n')"), "ERR: t:1: json.encode: JSON output exceeds max_output_bytes=5");
	lua_close(L);
}

/* Reference in Lua for tables whose keys collide as text: each text once, at the place of its
 * first key in next() order, with the value of its last (what a jansson object did). text(k)
 * gives the key text, or false to skip the key. */
static const char *expect_lua =
	"function EXPECT(t, text, enc) "
	"  local order, val = {}, {} "
	"  for k, v in next, t do "
	"    local s = tostring(k) "
	"    if text then s = text(k) end "
	"    if s and val[s] == nil then order[#order + 1] = s end "
	"    if s then val[s] = v end "
	"  end "
	"  local parts = {} "
	"  for i, s in ipairs(order) do "
	"    local v = val[s] "
	"    parts[i] = '\"' .. s .. '\":' .. (type(v) == 'table' and EXPECT(v, text, enc) or (enc or json.encode)(v)) "
	"  end "
	"  return '{' .. table.concat(parts, ',') .. '}' "
	"end ";

TEST(colliding_keys)
{
	lua_State *L = new_host_state(NULL, NULL);
	CHECK(luaL_dostring(L, expect_lua) == LUA_OK);
	CHECK_STR(run(L, "local t = {[1] = 'a', ['1'] = 'b'} return json.encode(t)"), run(L, "return EXPECT({[1] = 'a', ['1'] = 'b'})"));
	CHECK_STR(run(L, "local t = {[1] = 'a', ['1'] = 'b'} return tostring(#json.encode(t))"), "9");
	CHECK_STR(run(L, "local t = {[1] = 'a', ['1'] = 'b', x = 1, [2] = 'c', ['2'] = 'd', y = {[5] = 1, ['5'] = 2, z = 3}} "
			 "return tostring(json.encode(t) == EXPECT(t))"), "true");
	/* many collisions, negative and hash-part keys */
	CHECK_STR(run(L, "local t = {} for i = -50, 1000 do t[i] = i t[tostring(i)] = -i end "
			 "local s = json.encode(t) return tostring(s == EXPECT(t)) .. ' ' .. #json.decode(s) .. select(2, s:gsub(':', ''))"), "true 01051");
	/* a DAG of such tables: each occurrence is written the same way */
	CHECK_STR(run(L, "local inner = {[1] = 'a', ['1'] = 'b', [2] = true} local t = {inner, inner, {inner}, x = inner} "
			 "local e = EXPECT(inner) local s = json.encode({inner, inner, {inner}}) "
			 "return tostring(s == '[' .. e .. ',' .. e .. ',[' .. e .. ']]')"), "true");
	/* strict mode still reports other key types */
	CHECK_STR(run(L, "return json.encode({[1] = 1, ['1'] = 2, [true] = 3})"), "ERR: t:1: json.encode: cannot encode a table key of type boolean at value");
	CHECK_STR(run(L, "return json.encode({a = {[3] = 1, ['3'] = 2, [4] = 4, f = print}})"), "ERR: t:1: json.encode: cannot encode function at value.a.f");
	/* lenient: keys that become the same text once U+FFFD replaces invalid bytes */
	CHECK_STR(run(L, "local t = {['a\\xff'] = 1, ['a\\xfe'] = 2, ['a\\xef\\xbf\\xbd'] = 3, b = 4, [true] = 5} "
			 "local function text(k) return type(k) == 'string' and (k:gsub('[\\xfe\\xff]', '\\xef\\xbf\\xbd')) end "
			 "return tostring(lenient(t) == EXPECT(t, text)) .. ' ' .. #lenient(t)"), "true 16");
	/* a float key and its decimal text */
	CHECK_STR(run(L, "local t = {[1.5] = 'f', ['1.5'] = 's'} return tostring(json.encode(t) == EXPECT(t))"), "true");
	lua_close(L);
}

TEST(arrays_and_mixed_tables)
{
	lua_State *L = new_host_state(NULL, NULL);
	CHECK_STR(run(L, "return json.encode({1, 2, x = 3})"), "{\"1\":1,\"2\":2,\"x\":3}");
	CHECK_STR(run(L, "return json.encode({1, 2, nil, 4})"), run(L, "return json.encode({['1'] = 1, ['2'] = 2, ['4'] = 4})"));
	CHECK_STR(run(L, "return json.encode(table.pack(1, 2))"), run(L, "return json.encode({['1'] = 1, ['2'] = 2, n = 2})"));
	/* integer keys 1..n in any storage order are an array */
	CHECK_STR(run(L, "local t = {} for i = 5, 1, -1 do t[i] = i end return json.encode(t)"), "[1,2,3,4,5]");
	CHECK_STR(run(L, "local t = {x = 1, y = 2} t[3] = 3 t[2] = 2 t[1] = 1 t.x = nil t.y = nil return json.encode(t)"), "[1,2,3]");
	CHECK_STR(run(L, "local t = {} for i = 1, 100 do t[i] = i end t[50] = nil t[50] = 50 return json.encode(t) == json.encode(json.decode(json.encode(t))) and 'same'"), "same");
	CHECK_STR(run(L, "local t = {[2] = 'b', [1] = 'a', [3] = 'c'} return json.encode(t)"), "[\"a\",\"b\",\"c\"]");
	CHECK_STR(run(L, "return json.encode({[2] = 'b'})"), "{\"2\":\"b\"}");
	/* a mixed table shared many times, and a deep chain of them, stay linear in time */
	CHECK_STR(run(L, "local m = {1, 2, x = 3} local t = {m, m, {m, m}} return json.encode(t)"),
		  "[{\"1\":1,\"2\":2,\"x\":3},{\"1\":1,\"2\":2,\"x\":3},[{\"1\":1,\"2\":2,\"x\":3},{\"1\":1,\"2\":2,\"x\":3}]]");
	uint64_t t0 = mb_now_ns();
	CHECK_STR(run(L, "local t = {1} for i = 1, 12 do t = {t, t, x = i} end return json.encode(t):sub(1, 20)"), "{\"1\":{\"1\":{\"1\":{\"1\":");
	CHECK(mb_now_ns() - t0 < 1000000000ull);
	CHECK_STR(run(L, "local t = {1} for i = 1, 120 do t = {t, x = i} end local s = json.encode(t) return #s .. ' ' .. s:sub(-12)"), "1575 19},\"x\":120}");
	/* nested arrays in every position */
	CHECK_STR(run(L, "return json.encode({{}, {{1}}, {a = {1, {2, {3}}}}, json.array({})})"), "[{},[[1]],{\"a\":[1,[2,[3]]]},[]]");
	lua_close(L);
}

/* The reference float text: "%.{p}g" with the fewest p of 15..17 that reads back, then ".0"
 * when it would read as an integer, no '+' and no leading zeros in the exponent. */
static const char *float_ref_lua =
	"function REF(x) "
	"  local s "
	"  for p = 15, 17 do s = string.format('%.' .. p .. 'g', x) if tonumber(s) == x then break end end "
	"  if not s:find('[.e]') then s = s .. '.0' end "
	"  s = s:gsub('e%+', 'e'):gsub('e(%-?)0+(%d)', 'e%1%2') "
	"  return s "
	"end ";

TEST(float_text)
{
	lua_State *L = new_host_state(NULL, NULL);
	CHECK(luaL_dostring(L, float_ref_lua) == LUA_OK);
	/* every value prints with its own shortest precision */
	CHECK_STR(run(L, "return json.encode({0.1, 1/3, 0.05, 2^53, 1e15, 1e-5, 123.456, -0.0001, 1e21})"),
		  "[0.1,0.3333333333333333,0.05,9007199254740992.0,1e15,1e-5,123.456,-0.0001,1e21]");
	CHECK_STR(run(L, "return json.encode({5e-324, -1.7976931348623157e308, 0.30000000000000004, 100.0, -3.0})"),
		  "[4.94065645841247e-324,-1.7976931348623157e308,0.30000000000000004,100.0,-3.0]");
	/* random doubles of every magnitude, and short decimals (the printf-free path) */
	CHECK_STR(run(L, "math.randomseed(42) "
			 "for i = 1, 200000 do "
			 "  local x "
			 "  if i % 3 == 0 then x = string.unpack('d', string.pack('i8', math.random(math.mininteger, math.maxinteger))) "
			 "  elseif i % 3 == 1 then x = math.random(-10^9, 10^9) / 10^math.random(0, 12) "
			 "  else x = (math.random() - 0.5) * 10^math.random(-6, 17) end "
			 "  if x == x and x ~= math.huge and x ~= -math.huge and math.type(x) == 'float' then "
			 "    local s = json.encode(x) "
			 "    if s ~= REF(x) then return 'mismatch ' .. s .. ' ' .. REF(x) end "
			 "    if json.decode(s) ~= x then return 'no round trip ' .. s end "
			 "  end "
			 "end return 'ok'"), "ok");
	lua_close(L);
}

TEST(timeout_in_long_string)
{
	/* one string value: only the escape loop's polls can stop it */
	mb_budget b;
	lua_State *L = new_state(NULL, NULL);
	CHECK_STR(run(L, "S = string.rep('abcdefghijklmnopqrstuvwxyz\"0123456789', 2000000) return 'built'"), "built");
	mb_budget_init(&b, 1u << 30, 0, 5);
	*(mb_budget **)lua_getextraspace(L) = &b;
	uint64_t t0 = mb_now_ns();
	const char *r = run(L, "while true do json.encode(S) end"); /* repeated: speed-independent */
	uint64_t ms = (mb_now_ns() - t0) / 1000000;
	CHECK_STR(r, "ERR: timeout: execution exceeded timeout_ms=5");
	CHECK(ms < 50);
	CHECK(b.mem_used == 0);
	fprintf(stderr, "  74 MB string encode stopped after %llu ms (deadline 5)\n", (unsigned long long)ms);
	*(mb_budget **)lua_getextraspace(L) = NULL;
	CHECK_STR(run(L, "return tostring(#json.encode(S))"), "76000002");
	lua_close(L);
}

/* Objects and strings built from C (mb_json_object, mb_json_quote): the encoder's escaping,
 * lenient UTF-8 and number texts, raw values spliced with CR/LF turned to spaces. */
TEST(c_documents)
{
	mb_json_field f[] = {
		{.key = "s", .type = MB_JF_STRING, .s = "a\"b\\\n\x01\xff\xc3\xa9", .n = 9},
		{.key = "r", .type = MB_JF_RAW, .s = "[1,\n2]", .n = 6},
		{.key = "e", .type = MB_JF_RAW, .s = "", .n = 0},
		{.key = "i", .type = MB_JF_INT, .i = -9007199254740993LL},
		{.key = "d", .type = MB_JF_REAL, .d = 0.1},
		{.key = "w", .type = MB_JF_REAL, .d = 5.0},
		{.key = "inf", .type = MB_JF_REAL, .d = 1.0 / 0.0},
		{.key = "t", .type = MB_JF_BOOL, .i = 1},
		{.key = "f", .type = MB_JF_BOOL, .i = 0},
		{.key = "n\"k", .type = MB_JF_NULL},
	};
	size_t len = 0;
	char *j = mb_json_object(f, sizeof f / sizeof *f, &len);
	CHECK(j != NULL);
	CHECK_STR(j, "{\"s\":\"a\\\"b\\\\\\n\\u0001\xef\xbf\xbd\xc3\xa9\",\"r\":[1, 2],\"e\":null,"
		     "\"i\":-9007199254740993,\"d\":0.1,\"w\":5.0,\"inf\":null,\"t\":true,"
		     "\"f\":false,\"n\\\"k\":null}");
	CHECK(len == strlen(j));
	size_t qlen = 0;
	char *q = mb_json_quote(j, len, &qlen);
	CHECK(q != NULL && qlen == strlen(q));
	/* the quoted text decodes back to the object text exactly */
	lua_State *L = new_state(NULL, NULL);
	CHECK(mb_json_decode(L, q, qlen, NULL, result_buf, sizeof result_buf) == 0);
	CHECK(lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), j) == 0);
	lua_close(L);
	free(q);
	free(j);
	char *empty = mb_json_object(NULL, 0, &len);
	CHECK_STR(empty, "{}");
	free(empty);
	q = mb_json_quote(NULL, 0, &qlen);
	CHECK_STR(q, "\"\"");
	free(q);
}

/* raw_path: the object at the path is handed on as a raw value of its exact text, checked like
 * the rest; anything else decodes as usual. */
static const char *decode_kept(lua_State *L, const char *text, const char *check)
{
	static const char *const path[] = {"params", "arguments", "context_vars", NULL};
	mb_json_limits lim = {.unique_keys = 1, .raw_path = path};
	char err[256];
	if (mb_json_decode(L, text, strlen(text), &lim, err, sizeof err) != 0) {
		snprintf(result_buf, sizeof result_buf, "ERR: %s", err);
		return result_buf;
	}
	lua_setglobal(L, "m");
	return run(L, check);
}

TEST(raw_path)
{
	lua_State *L = new_host_state(NULL, NULL);
	const char *kind = "local v = m.params.arguments.context_vars "
			   "return type(v) .. ' ' .. tostring(getmetatable(v)) .. ' ' .. json.encode(v)";
	/* kept as sent: spacing, number texts, escapes */
	CHECK_STR(decode_kept(L, "{\"params\":{\"arguments\":{\"context_vars\": {\"x\" : 1E2, "
				 "\"y\":[0.10,\"\\u00e9\"]} ,\"code\":\"c\"}}}", kind),
		  "userdata json.raw {\"x\" : 1E2, \"y\":[0.10,\"\\u00e9\"]}");
	CHECK_STR(run(L, "return m.params.arguments.code"), "c");
	/* not an object there: decoded as usual */
	CHECK_STR(decode_kept(L, "{\"params\":{\"arguments\":{\"context_vars\":[1]}}}", kind),
		  "table json.array [1]");
	/* the same key elsewhere is not the path */
	CHECK_STR(decode_kept(L, "{\"params\":{\"context_vars\":{\"a\":1}}}",
			      "return type(m.params.context_vars)"), "table");
	CHECK_STR(decode_kept(L, "{\"arguments\":{\"context_vars\":{\"a\":1}}}",
			      "return type(m.arguments.context_vars)"), "table");
	CHECK_STR(decode_kept(L, "[{\"params\":{\"arguments\":{\"context_vars\":{}}}}]",
			      "return type(m[1].params.arguments.context_vars)"), "table");
	/* checked like the rest: a repeated key inside, bad UTF-8 inside, a syntax error inside */
	CHECK(starts_with(decode_kept(L, "{\"params\":{\"arguments\":{\"context_vars\":{\"a\":1,\"a\":2}}}}",
				      "return 1"), "ERR: duplicate object key"));
	CHECK(starts_with(decode_kept(L, "{\"params\":{\"arguments\":{\"context_vars\":{\"a\":\"\xff\"}}}}",
				      "return 1"), "ERR: "));
	CHECK(starts_with(decode_kept(L, "{\"params\":{\"arguments\":{\"context_vars\":{\"a\":}}}}",
				      "return 1"), "ERR: "));
	/* an integer beyond int64 (read as a real by both decoders) is kept as sent */
	CHECK_STR(decode_kept(L, "{\"params\":{\"arguments\":{\"context_vars\":{\"a\":99999999999999999999}}}}",
			      kind), "userdata json.raw {\"a\":99999999999999999999}");
	lua_close(L);
}

int main(void)
{
	mb_json_global_init();
	RUN(exact_integers);
	RUN(floats);
	RUN(null_and_containers);
	RUN(nested_round_trip);
	RUN(strings);
	RUN(invalid_utf8);
	RUN(depth_limit);
	RUN(size_limits);
	RUN(tables_mixed_sparse);
	RUN(no_metamethods);
	RUN(malformed);
	RUN(memory_cap_dag);
	RUN(timeout_huge_encode);
	RUN(c_api);
	RUN(raw_values);
	RUN(limit_names);
	RUN(unique_keys);
	RUN(colliding_keys);
	RUN(arrays_and_mixed_tables);
	RUN(float_text);
	RUN(timeout_in_long_string);
	RUN(c_documents);
	RUN(raw_path);
	return UNIT_END();
}
