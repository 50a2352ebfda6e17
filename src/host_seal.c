/* host_seal.c - sealed tokens for the host Lua state: text the server hands a client and must
 * get back unchanged (the requestState of an input_required result, lua/mcp/modern.lua).
 *
 * mb.seal(text) returns "mbs1." .. base64url(text) .. "." .. base64url(HMAC-SHA-256(key, text));
 * mb.unseal(token) returns the text when the MAC matches (compared in constant time), else nil
 * and a reason. The key is 32 random bytes made when the host state opens the library; it never
 * leaves the process, so a token is good only on the process that made it (which is also the
 * one holding what the token names). Sealing proves origin, not secrecy: the text is readable.
 */
#include "host_seal.h"

#include <lauxlib.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "mbs1."
#define SEAL_MAX 4096 /* longest text sealed (the token is about 4/3 of it) */

typedef struct seal_key {
	unsigned char k[crypto_auth_hmacsha256_KEYBYTES];
} seal_key;

static int l_seal(lua_State *L)
{
	const seal_key *key = lua_touserdata(L, lua_upvalueindex(1));
	size_t n;
	const char *text = luaL_checklstring(L, 1, &n);
	luaL_argcheck(L, n <= SEAL_MAX, 1, "text too long to seal");
	unsigned char mac[crypto_auth_hmacsha256_BYTES];
	crypto_auth_hmacsha256(mac, (const unsigned char *)text, n, key->k);
	const int v = sodium_base64_VARIANT_URLSAFE_NO_PADDING;
	size_t tl = sodium_base64_ENCODED_LEN(n, v), ml = sodium_base64_ENCODED_LEN(sizeof mac, v);
	luaL_Buffer b;
	char *p = luaL_buffinitsize(L, &b, sizeof PREFIX + tl + ml);
	memcpy(p, PREFIX, sizeof PREFIX - 1);
	size_t o = sizeof PREFIX - 1;
	sodium_bin2base64(p + o, tl, (const unsigned char *)text, n, v);
	o += strlen(p + o);
	p[o++] = '.';
	sodium_bin2base64(p + o, ml, mac, sizeof mac, v);
	o += strlen(p + o);
	luaL_pushresultsize(&b, o);
	return 1;
}

static int refuse(lua_State *L, const char *why)
{
	lua_pushnil(L);
	lua_pushstring(L, why);
	return 2;
}

static int l_unseal(lua_State *L)
{
	const seal_key *key = lua_touserdata(L, lua_upvalueindex(1));
	size_t n;
	const char *tok = lua_tolstring(L, 1, &n);
	if (!tok || lua_type(L, 1) != LUA_TSTRING)
		return refuse(L, "not a string");
	if (n < sizeof PREFIX || n > 2 * SEAL_MAX || memcmp(tok, PREFIX, sizeof PREFIX - 1) != 0)
		return refuse(L, "not a token of this server");
	const char *body = tok + sizeof PREFIX - 1, *dot = memchr(body, '.', n - (sizeof PREFIX - 1));
	if (!dot)
		return refuse(L, "malformed");
	const int v = sodium_base64_VARIANT_URLSAFE_NO_PADDING;
	unsigned char *text = malloc((size_t)(dot - body) + 1);
	unsigned char mac[crypto_auth_hmacsha256_BYTES];
	size_t tl = 0, ml = 0;
	const char *end = NULL;
	int ok = text && sodium_base642bin(text, (size_t)(dot - body) + 1, body, (size_t)(dot - body), NULL,
					   &tl, NULL, v) == 0;
	ok = ok && sodium_base642bin(mac, sizeof mac, dot + 1, (size_t)(tok + n - dot - 1), NULL, &ml, &end,
				     v) == 0 && ml == sizeof mac && end == tok + n;
	ok = ok && crypto_auth_hmacsha256_verify(mac, text, tl, key->k) == 0;
	if (ok)
		lua_pushlstring(L, (const char *)text, tl);
	free(text);
	return ok ? 1 : refuse(L, "altered or not made by this server");
}

void mb_host_seal_open(lua_State *L)
{
	if (sodium_init() < 0)
		luaL_error(L, "libsodium cannot start");
	seal_key *key = lua_newuserdatauv(L, sizeof *key, 0);
	randombytes_buf(key->k, sizeof key->k);
	lua_pushvalue(L, -1);
	lua_pushcclosure(L, l_seal, 1);
	lua_setfield(L, -3, "seal");
	lua_pushcclosure(L, l_unseal, 1);
	lua_setfield(L, -2, "unseal");
}
