/* http_int.h - internals shared by http.c (server, connections, sessions), http_auth.c (listen
 * address, tokens, Host/Origin/CORS allow-lists) and http_metrics.c (Prometheus text). Not for
 * other modules; tests may use it. Everything runs on the loop thread; a policy is read-only
 * after mb_http_policy_init.
 */
#ifndef MB_HTTP_INT_H
#define MB_HTTP_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "http.h"

#define MB_HTTP_HASH_BYTES 32      /* BLAKE2b-256 of a token, keyed per process */
#define MB_HTTP_TENANT_MAX 64      /* tenant names: [A-Za-z0-9_.-]{1,64} */
#define MB_HTTP_TOKEN_MIN 16
#define MB_HTTP_TOKEN_MAX 512

typedef struct mb_http_token {
	unsigned char hash[MB_HTTP_HASH_BYTES];
	char tenant[MB_HTTP_TENANT_MAX + 1];
} mb_http_token;

/* A comma-separated list split into lower-cased entries; any = it contained "*". */
typedef struct mb_http_list {
	char **v;
	size_t n;
	int any;
} mb_http_list;

typedef struct mb_http_policy {
	unsigned char key[32];         /* random key for token hashes (never leaves memory) */
	mb_http_token *tokens;         /* NULL when no tokens: tenant "default", no auth */
	size_t ntokens;
	mb_http_list hosts;            /* http_allowed_hosts */
	mb_http_list origins;          /* http_allowed_origins */
	mb_http_list cors;             /* http_cors_origin */
	char bound_host[64];           /* the bound IP literal (also an allowed Host), or "" */
} mb_http_policy;

/// Parses "[host:]port" ("8080", ":8080", "127.0.0.1:8080", "[::1]:8080", "localhost:8080").
/// @param spec    the http_listen value
/// @param ss      receives the address
/// @param loopback receives 1 for 127.0.0.0/8 or ::1
/// @returns 0 or -EINVAL with err naming the value
int mb_http_parse_listen(const char *spec, struct sockaddr_storage *ss, int *loopback, char *err,
			 size_t errlen);

/// Builds the policy from cfg (tokens hashed, lists split). bound is the IP literal listened on.
/// @returns 0 or -EINVAL / -ENOMEM with err naming the option
int mb_http_policy_init(mb_http_policy *p, const mb_config *cfg, const char *bound, char *err,
			size_t errlen);
void mb_http_policy_free(mb_http_policy *p);

/// Host header check: loopback names (localhost, 127.0.0.1, [::1]) with any port, the bound
/// literal, and http_allowed_hosts entries (name = any port, name:port = that port).
int mb_http_host_allowed(const mb_http_policy *p, const char *host, size_t len);

/// Origin header check: http(s) origins on loopback names, http_allowed_origins and
/// http_cors_origin entries (exact, case-insensitive), or "*".
int mb_http_origin_allowed(const mb_http_policy *p, const char *origin, size_t len);

/// Whether CORS headers are sent for this (already allowed) origin.
int mb_http_cors_allowed(const mb_http_policy *p, const char *origin, size_t len);

/// Authenticates an Authorization header value (NULL when absent).
/// @returns the tenant name (owned by the policy, or the static "default" when no tokens are
///          configured), or NULL: missing or wrong token
const char *mb_http_authenticate(const mb_http_policy *p, const char *authz, size_t len);

/// Index of a status code in mb_http_stats_t.requests columns (last = other).
int mb_http_status_index(int status);

/// Renders the Prometheus text for st plus extra (may be NULL).
/// @returns malloc'd text or NULL when out of memory; *len its length
char *mb_http_metrics_render(const mb_http_stats_t *st, const char *extra, size_t *len);

#endif
