/* http_auth.c - who may talk to the HTTP transport: the listen address, bearer tokens and the
 * Host/Origin/CORS allow-lists.
 *
 * Tokens from http_tokens ("token=tenant,...") are kept only as BLAKE2b-256 hashes keyed with a
 * random per-process key; a presented token is hashed the same way and compared with every
 * stored hash in constant time (crypto_verify_32, no early exit), so neither the comparison nor
 * the position of the match leaks through timing. Tenant names become directory and database
 * keys elsewhere, so they are restricted to [A-Za-z0-9_.-]. Host and Origin checks defend
 * against DNS rebinding: loopback names are always allowed, everything else must be listed.
 */
#include "http_int.h"

#include "log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

static const char default_tenant[] = "default";

int mb_http_parse_listen(const char *spec, struct sockaddr_storage *ss, int *loopback, char *err,
			 size_t errlen)
{
	char host[128] = "127.0.0.1";
	const char *port;
	memset(ss, 0, sizeof *ss);
	if (!spec[0]) {
		mb_seterr(err, errlen, "http_listen is empty");
		return -EINVAL;
	}
	if (spec[0] == '[') {
		const char *end = strchr(spec, ']');
		if (!end || end[1] != ':' || (size_t)(end - spec - 1) >= sizeof host) {
			mb_seterr(err, errlen, "http_listen \"%s\" is not [ipv6]:port", spec);
			return -EINVAL;
		}
		memcpy(host, spec + 1, (size_t)(end - spec - 1));
		host[end - spec - 1] = 0;
		port = end + 2;
	} else {
		const char *colon = strrchr(spec, ':');
		if (colon && colon != spec) {
			if ((size_t)(colon - spec) >= sizeof host || memchr(spec, ':', (size_t)(colon - spec))) {
				mb_seterr(err, errlen, "http_listen \"%s\" is not host:port (write IPv6 as "
					  "[addr]:port)", spec);
				return -EINVAL;
			}
			memcpy(host, spec, (size_t)(colon - spec));
			host[colon - spec] = 0;
			port = colon + 1;
		} else {
			port = colon ? colon + 1 : spec;
		}
	}
	char *end;
	errno = 0;
	long p = strtol(port, &end, 10);
	if (!*port || *end || errno || p < 0 || p > 65535 || !isdigit((unsigned char)*port)) {
		mb_seterr(err, errlen, "http_listen \"%s\": port must be 0..65535, got \"%s\"", spec, port);
		return -EINVAL;
	}
	if (strcasecmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)p);
		*loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)p);
		*loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
	} else {
		mb_seterr(err, errlen, "http_listen \"%s\": host \"%s\" is not an IP address or localhost",
			  spec, host);
		return -EINVAL;
	}
	return 0;
}

static void list_free(mb_http_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	memset(l, 0, sizeof *l);
}

/* Splits "a, b,c" into trimmed, lower-cased entries; "*" sets any. */
static int list_parse(mb_http_list *l, const char *s)
{
	memset(l, 0, sizeof *l);
	while (*s) {
		while (*s == ',' || *s == ' ' || *s == '\t')
			s++;
		const char *e = s;
		while (*e && *e != ',')
			e++;
		const char *t = e;
		while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		if (t > s) {
			if (t - s == 1 && *s == '*') {
				l->any = 1;
			} else {
				char **nv = realloc(l->v, (l->n + 1) * sizeof *nv);
				if (!nv)
					return -ENOMEM;
				l->v = nv;
				char *v = malloc((size_t)(t - s) + 1);
				if (!v)
					return -ENOMEM;
				for (size_t i = 0; i < (size_t)(t - s); i++)
					v[i] = (char)tolower((unsigned char)s[i]);
				v[t - s] = 0;
				l->v[l->n++] = v;
			}
		}
		s = e;
	}
	return 0;
}

static int list_has(const mb_http_list *l, const char *s, size_t len)
{
	for (size_t i = 0; i < l->n; i++)
		if (strlen(l->v[i]) == len && strncasecmp(l->v[i], s, len) == 0)
			return 1;
	return 0;
}

static int tenant_ok(const char *t, size_t n)
{
	return mb_oauth_tenant_ok(t, n); /* one rule for static and OAuth tenants */
}

static void hash_token(const mb_http_policy *p, const char *tok, size_t n,
		       unsigned char out[MB_HTTP_HASH_BYTES])
{
	crypto_generichash(out, MB_HTTP_HASH_BYTES, (const unsigned char *)tok, n, p->key, sizeof p->key);
}

static int parse_tokens(mb_http_policy *p, const char *s, char *err, size_t errlen)
{
	size_t idx = 0;
	while (*s) {
		const char *e = strchr(s, ',');
		if (!e)
			e = s + strlen(s);
		idx++;
		const char *a = s, *b = e;
		while (a < b && (*a == ' ' || *a == '\t'))
			a++;
		while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
			b--;
		if (a < b) {
			const char *eq = memchr(a, '=', (size_t)(b - a));
			if (!eq) {
				mb_seterr(err, errlen, "http_tokens entry %zu has no \"=tenant\" (expected token=tenant,...)",
					  idx);
				return -EINVAL;
			}
			size_t tl = (size_t)(eq - a), nl = (size_t)(b - eq - 1);
			for (size_t i = 0; i < tl; i++)
				if ((unsigned char)a[i] <= 0x20 || (unsigned char)a[i] >= 0x7f) {
					mb_seterr(err, errlen, "http_tokens entry %zu: the token must be visible ASCII "
						  "without spaces", idx);
					return -EINVAL;
				}
			if (tl < MB_HTTP_TOKEN_MIN || tl > MB_HTTP_TOKEN_MAX) {
				mb_seterr(err, errlen, "http_tokens entry %zu: a token must be %d..%d characters long",
					  idx, MB_HTTP_TOKEN_MIN, MB_HTTP_TOKEN_MAX);
				return -EINVAL;
			}
			char tenant[MB_HTTP_TENANT_MAX + 1];
			if (!tenant_ok(eq + 1, nl)) {
				mb_seterr(err, errlen, "http_tokens entry %zu: tenant must be 1-64 characters of "
					  "A-Z a-z 0-9 _ . - (not \".\" or \"..\")", idx);
				return -EINVAL;
			}
			memcpy(tenant, eq + 1, nl);
			tenant[nl] = 0;
			unsigned char h[MB_HTTP_HASH_BYTES];
			hash_token(p, a, tl, h);
			for (size_t i = 0; i < p->ntokens; i++)
				if (sodium_memcmp(h, p->tokens[i].hash, sizeof h) == 0) {
					mb_seterr(err, errlen, "http_tokens entry %zu repeats an earlier token", idx);
					return -EINVAL;
				}
			mb_http_token *nt = realloc(p->tokens, (p->ntokens + 1) * sizeof *nt);
			if (!nt)
				return -ENOMEM;
			p->tokens = nt;
			memcpy(nt[p->ntokens].hash, h, sizeof h);
			memcpy(nt[p->ntokens].tenant, tenant, nl + 1);
			p->ntokens++;
			sodium_memzero(h, sizeof h);
		}
		s = *e ? e + 1 : e;
	}
	return 0;
}

int mb_http_policy_init(mb_http_policy *p, const mb_config *cfg, const char *bound, char *err,
			size_t errlen)
{
	memset(p, 0, sizeof *p);
	if (sodium_init() < 0) {
		mb_seterr(err, errlen, "libsodium cannot be initialised");
		return -EINVAL;
	}
	randombytes_buf(p->key, sizeof p->key);
	int rc = parse_tokens(p, cfg->http_tokens, err, errlen);
	if (!rc)
		rc = list_parse(&p->hosts, cfg->http_allowed_hosts);
	if (!rc)
		rc = list_parse(&p->origins, cfg->http_allowed_origins);
	if (!rc)
		rc = list_parse(&p->cors, cfg->http_cors_origin);
	if (rc) {
		if (rc == -ENOMEM)
			mb_seterr(err, errlen, "out of memory reading http_* options");
		mb_http_policy_free(p);
		return rc;
	}
	snprintf(p->bound_host, sizeof p->bound_host, "%s", bound ? bound : "");
	return 0;
}

void mb_http_policy_free(mb_http_policy *p)
{
	sodium_memzero(p->key, sizeof p->key);
	free(p->tokens);
	list_free(&p->hosts);
	list_free(&p->origins);
	list_free(&p->cors);
	memset(p, 0, sizeof *p);
}

/* Splits "name[:port]" / "[v6][:port]" into the name (brackets kept for IPv6) and its length.
 * @returns 0 or -1 when malformed */
static int host_name(const char *h, size_t len, size_t *name_len)
{
	if (len == 0)
		return -1;
	size_t n;
	if (h[0] == '[') {
		const char *e = memchr(h, ']', len);
		if (!e)
			return -1;
		n = (size_t)(e - h) + 1;
	} else {
		const char *c = memchr(h, ':', len);
		n = c ? (size_t)(c - h) : len;
	}
	if (n < len) {
		if (h[n] != ':' || n + 1 == len)
			return -1;
		for (size_t i = n + 1; i < len; i++)
			if (!isdigit((unsigned char)h[i]))
				return -1;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)h[i] <= 0x20 || (unsigned char)h[i] >= 0x7f || h[i] == '/' || h[i] == '@')
			return -1;
	*name_len = n;
	return 0;
}

static int is_loopback_name(const char *h, size_t n)
{
	return (n == 9 && strncasecmp(h, "localhost", 9) == 0) || (n == 9 && memcmp(h, "127.0.0.1", 9) == 0) ||
	       (n == 5 && memcmp(h, "[::1]", 5) == 0);
}

int mb_http_host_allowed(const mb_http_policy *p, const char *host, size_t len)
{
	size_t n;
	if (host_name(host, len, &n) != 0)
		return 0;
	if (p->hosts.any || is_loopback_name(host, n))
		return 1;
	if (p->bound_host[0] && strlen(p->bound_host) == n && strncasecmp(p->bound_host, host, n) == 0)
		return 1;
	return list_has(&p->hosts, host, n) || list_has(&p->hosts, host, len);
}

int mb_http_origin_allowed(const mb_http_policy *p, const char *origin, size_t len)
{
	if (p->origins.any || list_has(&p->origins, origin, len) || list_has(&p->cors, origin, len))
		return 1;
	size_t skip;
	if (len > 7 && strncasecmp(origin, "http://", 7) == 0)
		skip = 7;
	else if (len > 8 && strncasecmp(origin, "https://", 8) == 0)
		skip = 8;
	else
		return 0;
	size_t n;
	if (host_name(origin + skip, len - skip, &n) != 0)
		return 0;
	return is_loopback_name(origin + skip, n);
}

int mb_http_cors_allowed(const mb_http_policy *p, const char *origin, size_t len)
{
	return p->cors.any || list_has(&p->cors, origin, len);
}

const char *mb_http_authenticate(const mb_http_policy *p, const char *authz, size_t len)
{
	if (!p->ntokens)
		return default_tenant;
	if (!authz || len < 7 || strncasecmp(authz, "Bearer", 6) != 0 || (authz[6] != ' ' && authz[6] != '\t'))
		return NULL;
	const char *t = authz + 7;
	size_t n = len - 7;
	while (n && (*t == ' ' || *t == '\t'))
		t++, n--;
	while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
		n--;
	if (n == 0 || n > MB_HTTP_TOKEN_MAX)
		return NULL;
	unsigned char h[MB_HTTP_HASH_BYTES];
	hash_token(p, t, n, h);
	size_t found = (size_t)-1;
	for (size_t i = 0; i < p->ntokens; i++) {
		/* every entry is compared; the selection is branch-free */
		size_t eq = (size_t)0 - (size_t)(crypto_verify_32(h, p->tokens[i].hash) == 0);
		found = (found & ~eq) | (i & eq);
	}
	sodium_memzero(h, sizeof h);
	return found == (size_t)-1 ? NULL : p->tokens[found].tenant;
}

int mb_http_scope_challenge(const mb_oauth *o, const char *json, size_t len, char *out, size_t cap)
{
	json_t *j = json_loadb(json, len, 0, NULL);
	json_t *e = json_is_object(j) ? json_object_get(j, "error") : NULL;
	json_t *d = json_is_object(e) ? json_object_get(e, "data") : NULL;
	json_t *sc = json_is_object(d) ? json_object_get(d, "scope") : NULL;
	int rc = -1;
	if (json_is_string(sc) && json_string_length(sc) > 0 && json_string_length(sc) < 256) {
		char scope[256];
		const char *s = json_string_value(sc);
		size_t i = 0;
		for (; s[i]; i++) /* scope-token characters and spaces only */
			scope[i] = (s[i] == ' ' || (s[i] > 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\')) ? s[i] : '?';
		scope[i] = 0;
		snprintf(out, cap, "WWW-Authenticate: Bearer resource_metadata=\"%s\", error=\"insufficient_scope\", "
			 "scope=\"%s\", error_description=\"this request needs the scope %s\"\r\n",
			 mb_oauth_metadata_url(o), scope, scope);
		rc = 0;
	}
	json_decref(j);
	return rc;
}
