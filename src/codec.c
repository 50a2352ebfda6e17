/* codec.c - base64 and content hashes over libsodium, for C callers and for Lua states.
 *
 * The C functions (mb_codec_base64_encode/decode, mb_codec_hash_hex) and the Lua ones share one
 * core per job that works in slices (3 MiB of input for encoding, 4 MiB for decoding and
 * hashing). Between slices the Lua versions poll the calling state's budget, so a sandbox
 * encoding a few hundred MiB still stops at its deadline; the C versions pass no state and run
 * straight through. Base64 decoding is strict: libsodium reports where it stopped and why (via
 * errno), and decode_slice turns that into a message naming the offset; slices other than the
 * last must be whole groups without padding, so "Zg==Zg==" is refused even across a slice edge.
 */
#include "codec.h"

#include <errno.h>
#include <lauxlib.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "log.h"

#define VARIANT sodium_base64_VARIANT_ORIGINAL
#define ENC_SLICE ((size_t)3 << 20)  /* input bytes per encode slice (a multiple of 3) */
#define DEC_SLICE ((size_t)4 << 20)  /* input characters per decode slice (a multiple of 4) */
#define HASH_SLICE ((size_t)4 << 20)

int mb_codec_init(void)
{
	return sodium_init() < 0 ? -1 : 0;
}

/* ---- cores ------------------------------------------------------------------------------ */

/* Text length of n bytes (without the NUL), or SIZE_MAX when it would overflow. */
static size_t encoded_len(size_t n)
{
	if (n > (SIZE_MAX - 8) / 4 * 3)
		return SIZE_MAX;
	return (n + 2) / 3 * 4;
}

/* Encodes n bytes into out (encoded_len(n) + 1 bytes, NUL included), polling L between slices
 * when L is not NULL. */
static void encode_run(char *out, const unsigned char *in, size_t n, lua_State *L)
{
	size_t done = 0, o = 0;
	do {
		size_t k = n - done < ENC_SLICE ? n - done : ENC_SLICE;
		size_t elen = encoded_len(k);
		sodium_bin2base64(out + o, elen + 1, in + done, k, VARIANT);
		o += elen;
		done += k;
		if (L && done < n)
			mb_budget_poll(L);
	} while (done < n);
	out[o] = 0;
}

static void describe_byte(char *buf, size_t cap, unsigned char c)
{
	if (c > 0x20 && c < 0x7F)
		snprintf(buf, cap, "'%c'", c);
	else
		snprintf(buf, cap, "byte 0x%02x", c);
}

/* Decodes s[0..len) into bin (capacity len / 4 * 3 + 3). Returns 0 with *bin_len, or -EINVAL
 * with a message naming the offset of the problem. */
static int decode_run(unsigned char *bin, const char *s, size_t len, size_t *bin_len,
		      lua_State *L, char *err, size_t errlen)
{
	size_t done = 0, o = 0;
	char what[16];
	while (done < len || done == 0) {
		size_t k = len - done < DEC_SLICE ? len - done : DEC_SLICE;
		int last = done + k == len;
		const char *end = NULL;
		size_t got = 0;
		errno = 0;
		int rc = sodium_base642bin(bin + o, k / 4 * 3 + 3, s + done, k, NULL, &got, &end,
					   VARIANT);
		int e = errno;
		size_t pos = done + (end ? (size_t)(end - (s + done)) : 0);
		if (rc == 0 && pos < done + k) {
			describe_byte(what, sizeof what, (unsigned char)s[pos]);
			snprintf(err, errlen, "invalid base64 at offset %zu: unexpected %s", pos, what);
			return -EINVAL;
		}
		if (rc != 0) {
			if (e == EINVAL && pos < len) {
				describe_byte(what, sizeof what, (unsigned char)s[pos]);
				snprintf(err, errlen, "invalid base64 at offset %zu: unexpected %s (padding "
					 "'=' expected)", pos, what);
			} else if (e == ERANGE || (e == EINVAL && pos >= len)) {
				snprintf(err, errlen, "invalid base64 at offset %zu: the input ends without "
					 "the '=' padding it needs", pos);
			} else if (pos < len && s[pos] != '=') {
				describe_byte(what, sizeof what, (unsigned char)s[pos]);
				snprintf(err, errlen, "invalid base64 at offset %zu: unexpected %s", pos, what);
			} else {
				snprintf(err, errlen, "invalid base64 at offset %zu: the last group is "
					 "incomplete or has non-zero unused bits", pos);
			}
			return -EINVAL;
		}
		if (!last && got != k / 4 * 3) {
			const char *eq = memchr(s + done, '=', k);
			snprintf(err, errlen, "invalid base64 at offset %zu: unexpected '='",
				 eq ? (size_t)(eq - s) : done);
			return -EINVAL;
		}
		o += got;
		done += k;
		if (last)
			break;
		if (L)
			mb_budget_poll(L);
	}
	*bin_len = o;
	return 0;
}

static void hash_run(const unsigned char *in, size_t n, char hex[MB_CODEC_HASH_HEX], lua_State *L)
{
	crypto_generichash_state st;
	unsigned char digest[MB_CODEC_HASH_BYTES];
	crypto_generichash_init(&st, NULL, 0, sizeof digest);
	size_t done = 0;
	while (done < n) {
		size_t k = n - done < HASH_SLICE ? n - done : HASH_SLICE;
		crypto_generichash_update(&st, in + done, k);
		done += k;
		if (L && done < n)
			mb_budget_poll(L);
	}
	crypto_generichash_final(&st, digest, sizeof digest);
	sodium_bin2hex(hex, MB_CODEC_HASH_HEX, digest, sizeof digest);
}

/* ---- C API ------------------------------------------------------------------------------- */

char *mb_codec_base64_encode(const void *data, size_t len, size_t *out_len)
{
	size_t elen = encoded_len(len);
	if (elen == SIZE_MAX)
		return NULL;
	char *out = malloc(elen + 1);
	if (!out)
		return NULL;
	encode_run(out, data, len, NULL);
	*out_len = elen;
	return out;
}

int mb_codec_base64_decode(const char *s, size_t len, char **out, size_t *out_len, char *err,
			   size_t errlen)
{
	*out = NULL;
	*out_len = 0;
	unsigned char *bin = malloc(len / 4 * 3 + 4);
	if (!bin) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	size_t n;
	int rc = decode_run(bin, s, len, &n, NULL, err, errlen);
	if (rc) {
		free(bin);
		return rc;
	}
	bin[n] = 0;
	*out = (char *)bin;
	*out_len = n;
	return 0;
}

void mb_codec_hash_hex(const void *data, size_t len, char hex[MB_CODEC_HASH_HEX])
{
	hash_run(data, len, hex, NULL);
}

/* ---- Lua --------------------------------------------------------------------------------- */

static int l_base64_encode(lua_State *L)
{
	size_t n;
	const char *s = luaL_checklstring(L, 1, &n);
	size_t elen = encoded_len(n);
	if (elen == SIZE_MAX || elen > (size_t)INT32_MAX * 2)
		return luaL_error(L, "base64_encode: the input is too large");
	luaL_Buffer b;
	char *p = luaL_buffinitsize(L, &b, elen + 1);
	encode_run(p, (const unsigned char *)s, n, L);
	luaL_pushresultsize(&b, elen);
	return 1;
}

static int l_base64_decode(lua_State *L)
{
	size_t n;
	const char *s = luaL_checklstring(L, 1, &n);
	char err[MB_ERR_MAX];
	luaL_Buffer b;
	unsigned char *p = (unsigned char *)luaL_buffinitsize(L, &b, n / 4 * 3 + 3);
	size_t got;
	if (decode_run(p, s, n, &got, L, err, sizeof err) != 0) {
		luaL_pushfail(L);
		lua_pushstring(L, err);
		return 2;
	}
	luaL_pushresultsize(&b, got);
	return 1;
}

static int l_hash(lua_State *L)
{
	size_t n;
	const char *s = luaL_checklstring(L, 1, &n);
	char hex[MB_CODEC_HASH_HEX];
	hash_run((const unsigned char *)s, n, hex, L);
	lua_pushlstring(L, hex, MB_CODEC_HASH_HEX - 1);
	return 1;
}

void mb_codec_lua_open(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{ "base64_encode", l_base64_encode },
		{ "base64_decode", l_base64_decode },
		{ "hash", l_hash },
		{ NULL, NULL },
	};
	luaL_setfuncs(L, fns, 0);
}
