/* fuzz_json.c - libFuzzer target for the JSON codec (src/json.c, src/json_enc.c).
 *
 * Each input is decoded under a fresh budget (16 MB, 2 s). When it decodes, the value must
 * re-encode strictly, the text must decode again to a structurally equal value (same types,
 * integers exact, same array marks), and a third encode must give the same length. Whether or
 * not it decodes, the raw bytes are also encoded as a Lua string: strictly that succeeds exactly
 * when the bytes are valid UTF-8, leniently it always succeeds and decodes back to a string.
 * Then a table is built from the bytes (pieces as string keys, which may be invalid UTF-8 and
 * collide once U+FFFD replaces their bad bytes, and small integer keys that may collide with
 * "1", "2"...): its lenient encoding must be valid JSON text that decodes (unless a key holds
 * "\u0000", which jansson refuses), and splicing that
 * text as a raw value must reproduce it inside an array. Every error message must itself be
 * valid UTF-8 (it goes out inside JSON), and every byte charged to the budget must be given
 * back after each call. Any violation aborts.
 *
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -iquote src $(pkg-config --cflags
 *        lua5.4 jansson) tests/fuzz/fuzz_json.c src/json*.c src/budget.c $(pkg-config --libs
 *        lua5.4 jansson) -lm -o build/fuzz_json
 */
#include "budget.h"
#include "fuzz_utf8.h"
#include "json.h"

#include <lauxlib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf(stderr, "fuzz_json: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static lua_State *state;
static mb_budget budget;

static int same(lua_State *L, int a, int b)
{
	a = lua_absindex(L, a);
	b = lua_absindex(L, b);
	int t = lua_type(L, a);
	if (t != lua_type(L, b))
		return 0;
	if (t == LUA_TNUMBER && lua_isinteger(L, a) != lua_isinteger(L, b))
		return 0;
	if (t != LUA_TTABLE)
		return lua_rawequal(L, a, b);
	int ma = lua_getmetatable(L, a), mb = lua_getmetatable(L, b);
	int ok = ma == mb && (!ma || lua_rawequal(L, -1, -2));
	lua_pop(L, ma + mb);
	if (!ok)
		return 0;
	size_t na = 0, nb = 0;
	lua_pushnil(L);
	while (lua_next(L, a)) {
		na++;
		lua_pushvalue(L, -2);
		lua_rawget(L, b);
		if (!same(L, -1, -2)) {
			lua_pop(L, 3);
			return 0;
		}
		lua_pop(L, 2);
	}
	lua_pushnil(L);
	while (lua_next(L, b)) {
		nb++;
		lua_pop(L, 1);
	}
	return na == nb;
}

static void check_budget(const char *when)
{
	if (budget.mem_used != 0)
		FAIL("%zu bytes still charged after %s", budget.mem_used, when);
	if (mb_budget_current() != NULL)
		FAIL("current budget left set after %s", when);
}

static void check_message(const char *err)
{
	if (!fz_valid_utf8(err, strlen(err)))
		FAIL("error message is not valid UTF-8: %s", err);
	if (err[0] == '\0')
		FAIL("empty error message");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const mb_json_limits lim = {.max_depth = 64, .max_input_bytes = 1 << 20, .root_name = "value"};
	char err[256];
	size_t len, len2, len3;
	if (!state) {
		mb_json_global_init();
		state = luaL_newstate();
		*(mb_budget **)lua_getextraspace(state) = &budget;
	}
	lua_State *L = state;
	lua_settop(L, 0);
	mb_budget_init(&budget, 16u << 20, 0, 2000);

	if (mb_json_decode(L, (const char *)data, size, &lim, err, sizeof err) == 0) {
		check_budget("decode");
		char *s = mb_json_encode(L, 1, &lim, 0, &len, err, sizeof err);
		check_budget("encode");
		if (!s)
			FAIL("decoded value does not re-encode: %s", err);
		if (memchr(s, '\n', len) || strlen(s) != len || !fz_valid_utf8(s, len))
			FAIL("encoded text has a raw newline, a NUL or invalid UTF-8");
		if (mb_json_decode(L, s, len, &lim, err, sizeof err) != 0)
			FAIL("re-encoded text does not decode: %s\n%s", err, s);
		check_budget("second decode");
		if (!same(L, 1, 2))
			FAIL("round trip changed the value: %.*s -> %s", (int)size, (const char *)data, s);
		char *s2 = mb_json_encode(L, 2, &lim, 0, &len2, err, sizeof err);
		if (!s2 || len2 != len)
			FAIL("second encode differs in length");
		free(s2);
		free(s);
		check_budget("third encode");
	} else {
		check_budget("failed decode");
		check_message(err);
		if (lua_gettop(L) != 0)
			FAIL("failed decode left values on the stack");
	}

	/* the raw bytes as a Lua string */
	lua_settop(L, 0);
	lua_pushlstring(L, (const char *)data, size);
	char *s = mb_json_encode(L, 1, &lim, 0, &len, err, sizeof err);
	check_budget("string encode");
	if ((s != NULL) != fz_valid_utf8(data, size))
		FAIL("strict string encode %s valid UTF-8", s ? "accepted in" : "rejected");
	if (!s)
		check_message(err);
	free(s);
	s = mb_json_encode(L, 1, &lim, MB_JSON_LENIENT, &len3, err, sizeof err);
	check_budget("lenient string encode");
	if (!s)
		FAIL("lenient string encode failed: %s", err);
	if (!fz_valid_utf8(s, len3) || mb_json_decode(L, s, len3, &lim, err, sizeof err) != 0 ||
	    lua_type(L, -1) != LUA_TSTRING)
		FAIL("lenient string encode gave bad JSON: %s", s);
	if (fz_valid_utf8(data, size) && !lua_rawequal(L, 1, -1))
		FAIL("valid string changed by lenient encode");
	free(s);
	lua_settop(L, 0);
	check_budget("lenient decode");

	/* a Lua-built table from the bytes */
	lua_newtable(L);
	for (size_t i = 0, k = 0; i < size; k++) {
		size_t n = data[i] % 8;
		i++;
		if (n > size - i)
			n = size - i;
		if (k % 3 == 2)
			lua_pushinteger(L, data[i - 1] % 5);
		else
			lua_pushlstring(L, (const char *)data + i, n);
		if (k % 4 == 3)
			lua_pushinteger(L, (lua_Integer)k);
		else
			lua_pushlstring(L, (const char *)data + i, n);
		lua_rawset(L, 1);
		i += n;
	}
	s = mb_json_encode(L, 1, &lim, MB_JSON_LENIENT, &len, err, sizeof err);
	check_budget("table encode");
	if (!s)
		FAIL("lenient table encode failed: %s", err);
	if (memchr(s, '\n', len) || strlen(s) != len || !fz_valid_utf8(s, len))
		FAIL("table text has a raw newline, a NUL or invalid UTF-8");
	if (mb_json_decode(L, s, len, &lim, err, sizeof err) == 0) {
		if (lua_type(L, -1) != LUA_TTABLE)
			FAIL("table text decodes to a %s", luaL_typename(L, -1));
	} else if (!strstr(err, "object keys containing \\u0000")) { /* jansson refuses "\u0000" in keys */
		FAIL("table text does not decode: %s\n%s", err, s);
	}
	check_budget("table decode");
	lua_settop(L, 0);
	lua_createtable(L, 1, 0);
	mb_json_push_raw(L, s, len);
	lua_rawseti(L, 1, 1);
	char *r = mb_json_encode(L, 1, &lim, 0, &len2, err, sizeof err);
	if (!r || len2 != len + 2 || r[0] != '[' || memcmp(r + 1, s, len) != 0 || r[len + 1] != ']')
		FAIL("raw splice changed the text: %s -> %s", s, r ? r : err);
	free(r);
	free(s);
	lua_settop(L, 0);
	check_budget("raw encode");
	return 0;
}
