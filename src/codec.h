/* codec.h - small encoders for data that agents move around: base64 and content hashes.
 *
 * Thin wrappers over libsodium: base64 is the original alphabet with padding (RFC 4648 section
 * 4), strict on input (no whitespace, no missing or extra padding, no non-zero trailing bits;
 * an error names the offset of the first bad byte); the content hash is BLAKE2b with a 16-byte
 * digest, written as 32 lowercase hex characters (a name for content, not a password hash).
 *
 * Thread rules: call mb_codec_init() once at start, before any thread (it runs sodium_init,
 * which picks the fastest implementation for this CPU); after that every function may be called
 * from any thread. Results are owned by the caller.
 */
#ifndef MB_CODEC_H
#define MB_CODEC_H

#include <stddef.h>

#include <lua.h>

#define MB_CODEC_HASH_BYTES 16
#define MB_CODEC_HASH_HEX (2 * MB_CODEC_HASH_BYTES + 1) /* with the NUL */

/// Initialises libsodium. Call once before threads start.
/// @returns 0, or -1 when libsodium cannot be used
int mb_codec_init(void);

/// Encodes bytes as base64 (original alphabet, padded).
/// @param data    the bytes
/// @param len     their number
/// @param out_len receives the length of the text (without the NUL)
/// @returns a malloc'd NUL-terminated string, or NULL when out of memory
char *mb_codec_base64_encode(const void *data, size_t len, size_t *out_len);

/// Decodes strict base64 (original alphabet, padded; nothing else allowed, not even spaces).
/// @param s       the text (need not be NUL-terminated)
/// @param len     its length
/// @param out     receives the malloc'd bytes (NUL-terminated for convenience)
/// @param out_len receives their number
/// @param err     receives e.g. "invalid base64 at offset 4: unexpected '!'"
/// @param errlen  size of err
/// @returns 0, -EINVAL for invalid input, -ENOMEM
int mb_codec_base64_decode(const char *s, size_t len, char **out, size_t *out_len, char *err,
			   size_t errlen);

/// BLAKE2b-128 of the bytes as 32 lowercase hex characters.
/// @param data the bytes
/// @param len  their number
/// @param hex  receives the text and a NUL
void mb_codec_hash_hex(const void *data, size_t len, char hex[MB_CODEC_HASH_HEX]);

/// Adds base64_encode(s) -> text, base64_decode(s) -> bytes | nil, message, and
/// hash(s) -> hex to the table on top of the stack. Long inputs are processed in slices with a
/// budget poll between them (mb_budget_poll), so they stay within the execution's deadline;
/// results are built in Lua memory (charged to a sandbox's budget).
/// @param L the state (sandbox or host)
void mb_codec_lua_open(lua_State *L);

#endif
