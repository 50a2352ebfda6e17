/* auth_jwt.h - JWT access tokens (RFC 9068) checked against a JSON Web Key Set (RFC 7517), with
 * OpenSSL's libcrypto doing every signature check.
 *
 * A key set is parsed once (mb_jwks_parse) into public keys: RSA (2048 bits or more), EC P-256
 * and Ed25519, each with its kid and the alg it may be used with. A token is verified
 * (mb_jwt_verify) only with RS256, PS256, ES256 or EdDSA: "none" and the HMAC algorithms are
 * refused before any key is looked at, so a public key can never be used as an HMAC secret. The
 * key is chosen by kid (a token without kid is tried with the keys of the right type when the
 * set has exactly one such key); then iss must equal the issuer, aud must name the audience,
 * exp must be in the future and nbf in the past (both with the given skew).
 *
 * Pure functions: no I/O, no globals; thread-safe (a key set is read-only once parsed).
 */
#ifndef MB_AUTH_JWT_H
#define MB_AUTH_JWT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define MB_JWKS_MAX_KEYS 64 /* a larger set is refused */

typedef struct mb_jwks mb_jwks;

/* What mb_jwt_verify checks beside the signature. */
typedef struct mb_jwt_expect {
	const char *issuer;   /* iss must equal it */
	const char *audience; /* aud (a string or an array) must contain it */
	int64_t now;          /* seconds since the epoch */
	int64_t skew;         /* seconds of clock difference allowed for exp and nbf */
} mb_jwt_expect;

enum {
	MB_JWT_OK = 0,
	MB_JWT_INVALID = -1, /* refused: err says why */
	MB_JWT_NOKEY = -2,   /* the kid is not in the set: a fresher set may have it */
};

/// Parses a JWKS document ({"keys": [...]}). Keys that are not for signatures (use other than
/// "sig"), of unknown types or curves, or RSA keys below 2048 bits are skipped; none left is an
/// error.
/// @param json, len the document
/// @param out       receives the key set (mb_jwks_free)
/// @returns 0, or -1 with err set
int mb_jwks_parse(const char *json, size_t len, mb_jwks **out, char *err, size_t errlen);

/// Frees a key set (NULL is allowed).
void mb_jwks_free(mb_jwks *k);

/// Number of usable keys in the set.
size_t mb_jwks_count(const mb_jwks *k);

/// Verifies a compact JWS access token and its claims.
/// @param tok, len  the token (three base64url parts)
/// @param keys      the key set (may be NULL: every token is MB_JWT_NOKEY once it parses)
/// @param exp       the expected issuer, audience and time
/// @param claims    receives the payload on success (json_decref it), else NULL
/// @param err       receives a short reason without quotes or backslashes (fit for
///                  error_description)
/// @returns MB_JWT_OK, MB_JWT_INVALID or MB_JWT_NOKEY
int mb_jwt_verify(const char *tok, size_t len, const mb_jwks *keys, const mb_jwt_expect *exp,
		  json_t **claims, char *err, size_t errlen);

/// Whether a bearer token looks like a JWS (three non-empty base64url parts, the first of which
/// decodes to a JSON object): opaque tokens do not.
int mb_jwt_is_jws(const char *tok, size_t len);

#endif
