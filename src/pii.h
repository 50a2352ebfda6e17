/* pii.h - detection and tokenization of personal data and secrets.
 *
 * Three pieces, used in this order:
 *   1. A detector (mb_pii_detector_new) compiles the built-in rules and the configured custom
 *      patterns once, with the PCRE2 JIT. mb_pii_scan finds spans of personal data in a text:
 *      e-mail addresses, phone numbers, US SSNs, payment cards, IPv4/IPv6 addresses, secrets
 *      (key=value credentials, cloud/source-hosting/chat tokens, JWTs, PEM private keys) and
 *      IBANs, each checked beyond its shape (Luhn, mod-97, SSN ranges, octet ranges, ...).
 *      Overlaps are resolved deterministically: earliest start, then longest, then type priority
 *      (custom types in configuration order, then SECRET, EMAIL, IBAN, CARD, SSN, PHONE, IPV6,
 *      IPV4). Text inside an existing token ("[EMAIL_3f9a0c1b]") is never reported.
 *   2. A per-installation secret key (mb_pii_secret_load, DATA_DIR/pii.key, 32 random bytes,
 *      mode 0600) keys the token hash: a value's token is "[" TYPE "_" hex "]" with the first
 *      8 (or, after a collision, more) hex digits of HMAC-SHA256(key, TYPE || 0x00 || value).
 *   3. mb_pii_sanitize replaces every span by its token, asking an optional mint callback for
 *      each distinct value (the vault uses it to persist the binding and to lengthen a token
 *      that is already bound to another value). Sanitizing is idempotent: it rescans its own
 *      output until nothing new is found, so sanitize(sanitize(x)) == sanitize(x).
 * docs/pii.md describes what is and is not detected, the token format and the threat model.
 *
 * Offsets: spans are 0-based byte offsets with an exclusive stop (text[start..stop)). The Lua
 * functions (pii_lua.c) convert to 1-based start and inclusive stop, like string.find.
 *
 * Ownership and threads: a detector is immutable after mb_pii_detector_new and may be shared by
 * any number of threads; every scan needs its own match data, which lives in an mb_pii_scratch.
 * A scratch belongs to one detector and is used by one thread at a time; functions that take a
 * scratch accept NULL and then make a temporary one for the call. Everything a function returns
 * is malloc'd and owned by the caller (free spans with free(), results with
 * mb_pii_result_free). Nothing here allocates through the sandbox budget: callers inside a
 * sandbox bound the input size first.
 */
#ifndef MB_PII_H
#define MB_PII_H

#include <stddef.h>
#include <stdint.h>

/* Error codes (functions return 0 or one of these, with a message in err). */
enum {
	MB_PII_ERR = -1,      /* invalid argument, bad pattern, bad key file, callback error */
	MB_PII_ENOMEM = -2,   /* out of memory */
	MB_PII_ELIMIT = -3,   /* a PCRE2 limit stopped a match (the message names the rule) */
};

/* Built-in types. The value is the type's index (mb_pii_type_name) and its bit in type masks
 * is 1 << value. Custom types get the indexes after MB_PII_NBUILTIN. */
enum mb_pii_builtin {
	MB_PII_EMAIL,
	MB_PII_PHONE,
	MB_PII_SSN,
	MB_PII_CARD,
	MB_PII_IPV4,
	MB_PII_IPV6,
	MB_PII_SECRET,
	MB_PII_IBAN,
	MB_PII_NBUILTIN
};

#define MB_PII_ALL UINT64_MAX        /* type mask: every type of the detector */
#define MB_PII_MAX_TYPES 64          /* built-in plus distinct custom type names */
#define MB_PII_NAME_MAX 32           /* longest type name */
#define MB_PII_KEY_BYTES 32          /* HMAC key */
#define MB_PII_HEX_MIN 8             /* hex digits in a token: default and minimum */
#define MB_PII_HEX_MAX 16            /* ... and maximum */
#define MB_PII_TOKEN_MAX 52          /* "[" name "_" 16 hex "]" and a NUL */

/* A custom pattern: the type name (upper-cased; must then match ^[A-Z][A-Z0-9_]{0,31}$; the name
 * of a built-in type adds a pattern to that type) and a PCRE2 pattern (byte mode, no flags; use
 * (?i) and the like inside). When the pattern has capture groups, the first group that took
 * part in a match is the value; otherwise the whole match is. */
typedef struct {
	const char *name;
	const char *pattern;
} mb_pii_custom;

/* Detector options. Zero fields select the defaults in brackets. */
typedef struct {
	uint64_t disabled;            /* bits (1 << MB_PII_*) of built-in types NOT to detect [0] */
	const mb_pii_custom *custom;  /* custom patterns, copied [none] */
	size_t ncustom;
	uint32_t match_limit;         /* PCRE2 match limit, per start position [100000] */
	size_t max_pattern_bytes;     /* longest custom pattern source [4096] */
} mb_pii_options;

/* One detected span: text[start..stop). */
typedef struct {
	size_t start, stop;
	int type;          /* type index: MB_PII_* or a custom type (mb_pii_type_name) */
	const char *rule;  /* the rule that found it ("email", "jwt", "card", or the custom type
	                    * name); a static string or owned by the detector */
} mb_pii_span;

/* One distinct value replaced by mb_pii_sanitize. */
typedef struct {
	char token[MB_PII_TOKEN_MAX];  /* "[EMAIL_3f9a0c1b]" */
	int type;                      /* type index */
	char *value;                   /* the original bytes, NUL-terminated (may contain NULs) */
	size_t value_len;
	size_t count;                  /* occurrences replaced */
} mb_pii_found;

/* What mb_pii_sanitize produced. Free with mb_pii_result_free. */
typedef struct {
	char *text;            /* sanitized text, NUL-terminated */
	size_t len;
	mb_pii_found *found;   /* distinct (type, value) pairs in order of first appearance */
	size_t nfound;
	size_t *counts;        /* occurrences replaced per type index; ntypes entries */
	size_t ntypes;
	size_t total;          /* sum of counts */
} mb_pii_result;

/* The token callback of mb_pii_sanitize, called once per distinct (type, value) in a call.
 * token holds the default token (8 hex digits) on entry; the callback may replace it with
 * another token of the same type ("[" type "_" 8..16 lowercase hex "]"), e.g. a longer one
 * when the vault already binds the default token to another value. Returns 0, or a negative
 * value after writing a message to err, which stops the sanitize call with MB_PII_ERR. */
typedef int (*mb_pii_mint_fn)(void *ud, const char *type, const char *value, size_t len,
			      char token[MB_PII_TOKEN_MAX], char *err, size_t errlen);

typedef struct mb_pii_detector mb_pii_detector;
typedef struct mb_pii_scratch mb_pii_scratch;

/// Compiles the enabled built-in rules and the custom patterns (JIT where available).
/// @param opt    options, or NULL for all built-in types and no custom patterns
/// @param err    receives why it failed, e.g. "pii: custom pattern CUSTOMER_ID (#2): missing
///               closing parenthesis at offset 7" or "pii: invalid custom type name "9x" ..."
/// @param errlen size of err
/// @returns the detector (free with mb_pii_detector_free), or NULL
mb_pii_detector *mb_pii_detector_new(const mb_pii_options *opt, char *err, size_t errlen);

/// Frees a detector. Every scratch made for it must be freed first. NULL is ignored.
/// @param d the detector
void mb_pii_detector_free(mb_pii_detector *d);

/// Number of types (built-in, enabled or not, then custom).
/// @param d the detector
/// @returns MB_PII_NBUILTIN + the number of distinct custom type names
int mb_pii_type_count(const mb_pii_detector *d);

/// Name of a type index.
/// @param d    the detector, or NULL for built-in names only
/// @param type the index
/// @returns "EMAIL", ..., a custom name, or NULL when out of range
const char *mb_pii_type_name(const mb_pii_detector *d, int type);

/// Finds a type by name (case-insensitive).
/// @param d    the detector, or NULL for built-in names only
/// @param name the name
/// @returns the type index, or -1
int mb_pii_type_find(const mb_pii_detector *d, const char *name);

/// Whether the detector looks for a type (a built-in type can be disabled).
/// @param d    the detector
/// @param type the index
/// @returns 1 or 0
int mb_pii_type_enabled(const mb_pii_detector *d, int type);

/// Makes the match data one thread needs to scan with d. Cheap; reuse it across calls.
/// @param d the detector; it must outlive the scratch
/// @returns the scratch, or NULL when out of memory
mb_pii_scratch *mb_pii_scratch_new(const mb_pii_detector *d);

/// Frees a scratch. NULL is ignored.
/// @param s the scratch
void mb_pii_scratch_free(mb_pii_scratch *s);

/// Finds the spans of personal data in text, after overlap resolution, in text order.
/// @param d       the detector
/// @param text    the text (any bytes; need not be NUL-terminated or valid UTF-8)
/// @param len     its length
/// @param types   mask of type indexes to report (1 << type); MB_PII_ALL for all
/// @param scratch a scratch of d used by this thread only, or NULL for a temporary one
/// @param out     receives a malloc'd array (NULL when there are none); free() it
/// @param n       receives the number of spans
/// @param err     receives the reason on failure, e.g. "pii: rule CUSTOMER_ID stopped by the
///                PCRE2 match limit (match_limit=100000) at byte 12345"
/// @param errlen  size of err
/// @returns 0, MB_PII_ENOMEM or MB_PII_ELIMIT (then *out is NULL and *n is 0)
int mb_pii_scan(const mb_pii_detector *d, const char *text, size_t len, uint64_t types,
		mb_pii_scratch *scratch, mb_pii_span **out, size_t *n, char *err, size_t errlen);

/// Replaces every span by its token. Each distinct (type, value) is minted once per call:
/// the default token is computed with mb_pii_token (8 hex digits) and then handed to mint,
/// if given. The output is scanned again until no span is left (idempotence).
/// @param d       the detector
/// @param key     the HMAC key (MB_PII_KEY_BYTES)
/// @param text    the text
/// @param len     its length
/// @param types   mask of type indexes to replace; MB_PII_ALL for all
/// @param mint    token callback, or NULL for the default tokens
/// @param ud      passed to mint
/// @param scratch a scratch of d used by this thread only, or NULL
/// @param res     receives the result (zeroed on failure); free with mb_pii_result_free
/// @param err     receives the reason on failure (the callback's message, a scan error, or
///                "pii: mint returned "[X]" for type EMAIL; expected [EMAIL_<8-16 hex>]")
/// @param errlen  size of err
/// @returns 0, MB_PII_ERR, MB_PII_ENOMEM or MB_PII_ELIMIT
int mb_pii_sanitize(const mb_pii_detector *d, const unsigned char key[MB_PII_KEY_BYTES],
		    const char *text, size_t len, uint64_t types, mb_pii_mint_fn mint, void *ud,
		    mb_pii_scratch *scratch, mb_pii_result *res, char *err, size_t errlen);

/// Frees what a result holds and zeroes it. NULL is ignored.
/// @param res the result
void mb_pii_result_free(mb_pii_result *res);

/// Computes a token: "[" type "_" + the first hexchars hex digits of
/// HMAC-SHA256(key, type || 0x00 || value) + "]".
/// @param key      the HMAC key (MB_PII_KEY_BYTES)
/// @param type     the type name (^[A-Z][A-Z0-9_]{0,31}$)
/// @param value    the value bytes
/// @param len      their length
/// @param hexchars MB_PII_HEX_MIN..MB_PII_HEX_MAX
/// @param out      receives the NUL-terminated token (MB_PII_TOKEN_MAX bytes)
/// @returns 0, or MB_PII_ERR for a bad type name or hexchars
int mb_pii_token(const unsigned char key[MB_PII_KEY_BYTES], const char *type, const char *value,
		 size_t len, int hexchars, char out[MB_PII_TOKEN_MAX]);

/// Whether t (n bytes) is a valid type name: [A-Z][A-Z0-9_]*, at most MB_PII_NAME_MAX (pii_syntax.c).
int mb_pii_type_name_valid(const char *t, size_t n);

/// Checks the token syntax "[" NAME "_" hex "]" (NAME ^[A-Z][A-Z0-9_]{0,31}$, 8..16 lowercase
/// hex digits) at the start of s.
/// @param s    the text
/// @param len  bytes available at s
/// @param type when not NULL, the token's type name must equal it
/// @returns the token's length, or 0 when s does not start with a token
size_t mb_pii_token_check(const char *s, size_t len, const char *type);

/// Finds the next token in text at or after *pos.
/// @param text  the text
/// @param len   its length
/// @param pos   in: where to start; out: the token's start
/// @param tlen  receives the token's length
/// @returns 1 when a token was found, 0 otherwise
int mb_pii_token_next(const char *text, size_t len, size_t *pos, size_t *tlen);

/// Loads the installation's HMAC key from DATA_DIR/pii.key, creating it on first use with
/// MB_PII_KEY_BYTES random bytes and mode 0600 (written to a temporary file and linked into
/// place, so a crash never leaves a short key and concurrent starts agree on one key). Refuses
/// a key file that is not a regular file, not owned by this user, readable or writable by
/// group or others, or not exactly MB_PII_KEY_BYTES long.
/// @param data_dir the data directory (must exist)
/// @param key      receives the key
/// @param err      receives the reason, e.g. "pii: key file /d/pii.key has mode 0644; it must
///                 not be accessible by group or others (chmod 600 /d/pii.key)"
/// @param errlen   size of err
/// @returns 0 or MB_PII_ERR
int mb_pii_secret_load(const char *data_dir, unsigned char key[MB_PII_KEY_BYTES], char *err,
		       size_t errlen);

/// mb_pii_secret_load for a key file anywhere (the pii_key_file option): the temporary file is
/// made in that file's directory, which must exist; the same checks apply.
/// @param path   the key file (a relative path is relative to the working directory)
/// @param key    receives the key
/// @param err    receives the reason
/// @param errlen size of err
/// @returns 0 or MB_PII_ERR
int mb_pii_secret_load_file(const char *path, unsigned char key[MB_PII_KEY_BYTES], char *err,
			    size_t errlen);

/* ---- Lua ---------------------------------------------------------------------------------- */

struct lua_State;

/// Adds pii_scan and pii_sanitize to the table on top of the stack (the host's `mb` table or a
/// sandbox module table):
///   pii_scan(text [, types]) -> array of {type=, start=, stop=} (1-based start, inclusive
///     stop, like string.find)
///   pii_sanitize(text [, mint_fn [, types]]) -> sanitized, found, counts: found is an array of
///     {token=, type=, value=, count=} (one per distinct value), counts a table type -> n (types
///     with n > 0 only). mint_fn(type, value, default_token) returns the token to use (nil for
///     the default); its errors propagate unchanged.
///   types is nil (all), a type name, or an array of names; an unknown name is an error listing
///   the known ones. Arrays are marked as JSON arrays (mb_json_mark_array).
/// Uses the Lua allocator for the closures and malloc for scan results (freed before return,
/// also on errors). Call in protected mode (it can raise a memory error).
/// @param L   the state; the target table is at the top of the stack and stays there
/// @param d   the detector; must outlive the state
/// @param key the HMAC key (copied), or NULL: then pii_sanitize raises an error
void mb_pii_lua_open(struct lua_State *L, const mb_pii_detector *d, const unsigned char *key);

/* ---- validators, exposed for tests ----------------------------------------------------- */

/// Luhn check over the digits of s (spaces and dashes are skipped; any other byte fails).
/// @returns 1 when there are 13..19 digits and the check digit is right, else 0
int mb_pii_luhn_ok(const char *s, size_t len);

/// IBAN check: a known country code, that country's length, and mod-97 == 1 (single spaces
/// between characters allowed; letters must be upper case).
/// @returns 1 or 0
int mb_pii_iban_ok(const char *s, size_t len);

/// US SSN ranges: area not 000, 666 or 9xx; group not 00; serial not 0000. s is "AAA-GG-SSSS",
/// "AAA GG SSSS" or 9 digits.
/// @returns 1 or 0
int mb_pii_ssn_ok(const char *s, size_t len);

/// IPv4 dotted quad with every octet 0..255 and no leading zeros.
/// @returns 1 or 0
int mb_pii_ipv4_ok(const char *s, size_t len);

#endif
