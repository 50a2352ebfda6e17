/* test_codec.c - base64 (RFC 4648 test vectors, strict refusal of invalid input with the offset
 * of the problem, slices longer than one chunk) and the BLAKE2b-128 content hash, through the C
 * API and through the Lua functions of mb_codec_lua_open. */
#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "codec.h"
#include "unit.h"

static const char *const vectors[][2] = {
	{ "", "" },           { "f", "Zg==" },          { "fo", "Zm8=" },
	{ "foo", "Zm9v" },    { "foob", "Zm9vYg==" },   { "fooba", "Zm9vYmE=" },
	{ "foobar", "Zm9vYmFy" },
};

TEST(rfc4648_vectors)
{
	for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
		size_t n;
		char *e = mb_codec_base64_encode(vectors[i][0], strlen(vectors[i][0]), &n);
		CHECK_STR(e, vectors[i][1]);
		CHECK(n == strlen(vectors[i][1]));
		free(e);
		char *d, err[200];
		CHECK(mb_codec_base64_decode(vectors[i][1], strlen(vectors[i][1]), &d, &n, err, sizeof err) == 0);
		CHECK(n == strlen(vectors[i][0]));
		CHECK_STR(d, vectors[i][0]);
		free(d);
	}
}

TEST(binary_round_trip)
{
	unsigned char all[256];
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)i;
	size_t n;
	char *e = mb_codec_base64_encode(all, sizeof all, &n);
	CHECK(n == 344);
	char *d, err[200];
	CHECK(mb_codec_base64_decode(e, n, &d, &n, err, sizeof err) == 0);
	CHECK(n == 256 && memcmp(d, all, 256) == 0);
	free(d);
	free(e);
	/* '+' and '/' are the original alphabet; the URL-safe ones are refused */
	CHECK(mb_codec_base64_decode("+/8=", 4, &d, &n, err, sizeof err) == 0);
	CHECK(n == 2 && (unsigned char)d[0] == 0xfb && (unsigned char)d[1] == 0xff);
	free(d);
}

static void expect_invalid(const char *in, size_t len, const char *msg)
{
	char *d = (char *)1, err[200] = "";
	size_t n = 99;
	int rc = mb_codec_base64_decode(in, len, &d, &n, err, sizeof err);
	if (rc != -22 || strcmp(err, msg) != 0)
		fprintf(stderr, "  input \"%.*s\": rc %d, \"%s\" (wanted \"%s\")\n", (int)len, in, rc, err, msg);
	CHECK(rc == -22);
	CHECK(d == NULL && n == 0);
	CHECK_STR(err, msg);
}

TEST(invalid_input)
{
	expect_invalid("Zm9v!", 5, "invalid base64 at offset 4: unexpected '!'");
	expect_invalid(" Zg==", 5, "invalid base64 at offset 0: unexpected byte 0x20");
	expect_invalid("Zg==\n", 5, "invalid base64 at offset 4: unexpected byte 0x0a");
	expect_invalid("Zm9v\nYmFy", 9, "invalid base64 at offset 4: unexpected byte 0x0a");
	expect_invalid("Zg==Zg==", 8, "invalid base64 at offset 4: unexpected 'Z'");
	expect_invalid("Zg", 2, "invalid base64 at offset 2: the input ends without the '=' padding it needs");
	expect_invalid("Zg=", 3, "invalid base64 at offset 3: the input ends without the '=' padding it needs");
	expect_invalid("Zg=a", 4, "invalid base64 at offset 3: unexpected 'a' (padding '=' expected)");
	expect_invalid("Zh==", 4, "invalid base64 at offset 2: the last group is incomplete or has non-zero unused bits");
	expect_invalid("Z===", 4, "invalid base64 at offset 1: the last group is incomplete or has non-zero unused bits");
	expect_invalid("Zm9v-_", 6, "invalid base64 at offset 4: unexpected '-'");
	expect_invalid("Zm\0v", 4, "invalid base64 at offset 2: unexpected byte 0x00");
}

TEST(hash_vectors)
{
	char hex[MB_CODEC_HASH_HEX];
	mb_codec_hash_hex("abc", 3, hex);
	CHECK_STR(hex, "cf4ab791c62b8d2b2109c90275287816");
	mb_codec_hash_hex("", 0, hex);
	CHECK_STR(hex, "cae66941d9efbd404e4d88758ea67670");
	CHECK(strlen(hex) == 32);
}

static lua_State *new_lua(void)
{
	lua_State *L = luaL_newstate();
	*(mb_budget **)lua_getextraspace(L) = NULL; /* a host state: no budget */
	luaL_openlibs(L);
	lua_newtable(L);
	mb_codec_lua_open(L);
	lua_setglobal(L, "codec");
	return L;
}

static void lua_expect(lua_State *L, const char *code, const char *want)
{
	int ok = luaL_dostring(L, code) == LUA_OK;
	const char *got = lua_tostring(L, -1);
	if (!ok || !got || strcmp(got, want) != 0)
		fprintf(stderr, "  %s -> %s (wanted %s)\n", code, got ? got : "(nil)", want);
	CHECK(ok);
	CHECK_STR(got, want);
	lua_settop(L, 0);
}

TEST(lua_functions)
{
	lua_State *L = new_lua();
	lua_expect(L, "return codec.base64_encode('foobar')", "Zm9vYmFy");
	lua_expect(L, "return codec.base64_encode('')", "");
	lua_expect(L, "return codec.base64_decode('Zm9vYg==')", "foob");
	lua_expect(L, "return tostring(#codec.base64_decode(codec.base64_encode('a\\0b')))", "3");
	lua_expect(L, "local v, e = codec.base64_decode('Zm9v!') return tostring(v) .. '|' .. e",
		   "nil|invalid base64 at offset 4: unexpected '!'");
	lua_expect(L, "return codec.hash('abc')", "cf4ab791c62b8d2b2109c90275287816");
	lua_expect(L, "local ok, e = pcall(function() return codec.hash() end) return (e:gsub('^.-:1: ', ''))",
		   "bad argument #1 to 'hash' (string expected, got no value)");
	/* several slices: 10 MiB of varied bytes round-trip, and hashing in slices matches C */
	lua_expect(L, "local t = {} for i = 0, 255 do t[#t+1] = string.char(i) end "
		      "local s = string.rep(table.concat(t), 40961) "
		      "local e = codec.base64_encode(s) "
		      "return tostring(#s == 10486016 and #e == (#s + 2) // 3 * 4 and codec.base64_decode(e) == s)",
		   "true");
	/* padding inside the text is refused even when it falls at the edge of a slice */
	lua_expect(L, "local e = string.rep('A', 4 * 1024 * 1024 - 4) .. 'Zg==' .. 'Zm9v' "
		      "local v, err = codec.base64_decode(e) return tostring(v) .. '|' .. err",
		   "nil|invalid base64 at offset 4194302: unexpected '='");
	lua_close(L);

	char *big = malloc(9 << 20), hex[MB_CODEC_HASH_HEX];
	for (size_t i = 0; i < (9u << 20); i++)
		big[i] = (char)(i * 7);
	mb_codec_hash_hex(big, 9 << 20, hex);
	L = new_lua();
	lua_getglobal(L, "codec");
	lua_getfield(L, -1, "hash");
	lua_pushlstring(L, big, 9 << 20);
	lua_call(L, 1, 1);
	CHECK_STR(lua_tostring(L, -1), hex);
	lua_close(L);
	free(big);
}

/* Long inputs poll the budget between slices: a cancelled execution stops inside the call. */
TEST(budget_polled_between_slices)
{
	lua_State *L = new_lua();
	mb_budget b;
	mb_budget_init(&b, 0, 0, 0);
	*(mb_budget **)lua_getextraspace(L) = &b;
	atomic_store(&b.cancel, 1);
	lua_expect(L, "local ok, e = pcall(codec.base64_encode, ('x'):rep(1000)) return tostring(ok)", "true");
	const char *const calls[] = { "codec.base64_encode(s)", "codec.base64_decode(('AAAA'):rep(2 * 1024 * 1024))",
				      "codec.hash(s)" };
	for (int i = 0; i < 3; i++) {
		char code[200];
		snprintf(code, sizeof code, "local s = ('x'):rep(8 * 1024 * 1024) local ok, e = pcall(function() return %s end) "
			 "return tostring(ok) .. '|' .. e", calls[i]);
		lua_expect(L, code, "false|cancelled: the client cancelled this request");
	}
	*(mb_budget **)lua_getextraspace(L) = NULL;
	lua_close(L);
}

int main(void)
{
	if (mb_codec_init() != 0) {
		fprintf(stderr, "libsodium cannot be initialised\n");
		return 1;
	}
	RUN(rfc4648_vectors);
	RUN(binary_round_trip);
	RUN(invalid_input);
	RUN(hash_vectors);
	RUN(lua_functions);
	RUN(budget_polled_between_slices);
	return UNIT_END();
}
