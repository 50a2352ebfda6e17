/* auth_oauth.h - the HTTP endpoint as an OAuth 2.1 resource server (MCP authorization; RFC 9728
 * metadata, RFC 9068 JWT access tokens, RFC 8414 / OpenID discovery): docs/auth.md.
 *
 * One mb_oauth per HTTP transport, made from the oauth_* options. It knows the issuer, this
 * server's resource URL (the audience), the scope names of the three rights, and it keeps:
 *
 *   - the issuer's key set, fetched from oauth_jwks_url or the jwks_uri of the discovery
 *     document (auth_fetch.c: off the loop thread, bounded in time and size); fetched again
 *     when a token names a kid it does not have (at most once per oauth_jwks_refresh_ms) and in
 *     the background when older than oauth_jwks_max_age_ms;
 *   - opaque tokens' RFC 7662 introspections in flight (one per token, at most 64; the requests
 *     of that token wait for it), with their answers remembered like JWTs (at most 300 s);
 *   - validated tokens, by a keyed BLAKE2b hash (the token itself is never stored), with their
 *     principal until their exp: a token is verified once (oauth_token_cache entries).
 *
 * mb_oauth_check answers at once when it can (cached token, known key, a refusal); a token that
 * needs a key set not fetched yet makes it WAIT: the caller's waiter is queued and its ready
 * callback runs once, on the loop thread, when the fetch ends (then check again, without a
 * waiter: the answer is final). Nothing here blocks the loop.
 *
 * Threads: the loop thread only. Ownership: mb_oauth_close frees the object once no fetch runs.
 */
#ifndef MB_AUTH_OAUTH_H
#define MB_AUTH_OAUTH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"

#define MB_OAUTH_TENANT_MAX 64
#define MB_OAUTH_SUB_MAX 128

/* The rights a scope can grant (oauth_scopes maps scope names to them). */
enum { MB_RIGHT_EXECUTE = 1, MB_RIGHT_SKILLS = 2, MB_RIGHT_ADMIN = 4 };

typedef struct mb_oauth mb_oauth;

typedef struct mb_oauth_principal {
	char tenant[MB_OAUTH_TENANT_MAX + 1]; /* from oauth_tenant_claim */
	char sub[MB_OAUTH_SUB_MAX + 1];       /* the subject, printable ASCII (others as '?') */
	unsigned rights;                      /* MB_RIGHT_* from the token's scope */
	int64_t exp;                          /* seconds since the epoch */
} mb_oauth_principal;

enum {
	MB_OAUTH_OK = 0,
	MB_OAUTH_WAIT = 1,        /* the waiter is queued */
	MB_OAUTH_REFUSED = -1,    /* 401 invalid_token: why says what is wrong with it */
	MB_OAUTH_UNAVAILABLE = -2 /* the issuer's keys cannot be had: why says why (503) */
};

typedef struct mb_oauth_waiter mb_oauth_waiter;
struct mb_oauth_waiter {
	mb_oauth_waiter *prev, *next;
	mb_oauth_waiter **head; /* the queue it is on (the key fetch's or an introspection's) */
	void (*ready)(mb_oauth_waiter *w);
	int queued;
};

/// Checks the oauth_* options and builds the resource server. Refused at start: an issuer,
/// resource or JWKS URL that is not https:// (http:// is accepted on a loopback host only), a
/// missing oauth_resource, a bad oauth_scopes or oauth_tenant_claim, oauth_introspection_url
/// without oauth_client_id.
/// @returns the object; NULL with err empty when oauth_issuer is not set; NULL with err set
mb_oauth *mb_oauth_new(uv_loop_t *loop, const mb_config *cfg, char *err, size_t errlen);

/// Starts fetching the issuer's keys now, so the first request does not wait for them.
void mb_oauth_start(mb_oauth *o);

/// Checks a bearer token.
/// @param tok, n the token (without "Bearer ")
/// @param w      a waiter to queue when the answer needs a fetch, or NULL: never WAIT
/// @param out    receives the principal on MB_OAUTH_OK
/// @param why    receives the reason on a refusal (no quotes or backslashes)
/// @returns MB_OAUTH_OK, MB_OAUTH_WAIT, MB_OAUTH_REFUSED or MB_OAUTH_UNAVAILABLE
int mb_oauth_check(mb_oauth *o, const char *tok, size_t n, mb_oauth_waiter *w, mb_oauth_principal *out,
		   char *why, size_t whylen);

/// Takes a queued waiter off the queue (its connection closed); nothing when not queued.
void mb_oauth_unwait(mb_oauth *o, mb_oauth_waiter *w);

/// The RFC 9728 metadata document (JSON) and its length.
const char *mb_oauth_metadata(const mb_oauth *o, size_t *len);

/// The metadata URL that WWW-Authenticate names (resource_metadata).
const char *mb_oauth_metadata_url(const mb_oauth *o);

/// Whether path (length n, no query) is one where the metadata document is served:
/// /.well-known/oauth-protected-resource, the same followed by /mcp, or by the resource's path.
int mb_oauth_is_metadata_path(const mb_oauth *o, const char *path, size_t n);

/// The scope name that grants right (the first in oauth_scopes), or NULL.
const char *mb_oauth_scope_of(const mb_oauth *o, unsigned right);

/// The scope names of rights, space-separated, into out.
void mb_oauth_scopes_text(const mb_oauth *o, unsigned rights, char *out, size_t cap);

/// Rights as the words the host reads ("execute skills admin"), into out.
void mb_oauth_rights_text(unsigned rights, char *out, size_t cap);

/// Whether s (n bytes) is a tenant name: [A-Za-z0-9_.-]{1,64}, not "." or "..".
int mb_oauth_tenant_ok(const char *s, size_t n);

/// Counters for /metrics and tests.
typedef struct mb_oauth_stats {
	uint64_t verified, cache_hits, refused, jwks_fetches, jwks_failures;
} mb_oauth_stats;
void mb_oauth_get_stats(const mb_oauth *o, mb_oauth_stats *out);

/// Aborts running fetches, wakes the waiters (they get UNAVAILABLE from a new check) and frees
/// the object once the last fetch callback has run. NULL is allowed.
void mb_oauth_close(mb_oauth *o);

#endif
