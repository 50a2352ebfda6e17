/* auth_oauth.c - the OAuth 2.1 resource server behind the HTTP endpoint (auth_oauth.h).
 *
 * Key set life cycle. A fetch goes through up to three steps: the RFC 8414 document
 * (<origin>/.well-known/oauth-authorization-server<issuer path>), else the OpenID one
 * (<issuer>/.well-known/openid-configuration), whose issuer must equal oauth_issuer and whose
 * jwks_uri is kept; then the JWKS. With oauth_jwks_url set, only the last. At most one fetch
 * runs at a time; waiters queued during it are all woken when it ends, whatever the outcome. A
 * failed fetch keeps the previous key set (and its error is what a token that needed the new
 * one hears). last_attempt rate-limits fetches: a stream of tokens with made-up kids costs one
 * fetch per oauth_jwks_refresh_ms, not one each.
 *
 * Introspection. An opaque token (not a JWS) goes to the introspection endpoint when one is
 * known: one fetch per token (an `intro` in o->intros) whose waiters are the requests carrying
 * it; when it answers, the outcome is kept in the intro while they are woken (they check again
 * synchronously and find it), an active answer goes into the token cache, and the intro is freed.
 * Closing aborts them; the object is freed by whichever callback ends last.
 *
 * Token cache. A direct-mapped table of oauth_token_cache slots (rounded up to a power of two)
 * indexed by the token's keyed BLAKE2b-256 hash; a slot holds the hash and the principal and is
 * valid until the token's exp. A collision replaces the older entry; the cost is one more
 * verification. The key is random per process, so a hash says nothing about the token.
 */
#include "auth_oauth.h"

#include <ctype.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth_fetch.h"
#include "auth_jwt.h"
#include "log.h"

#define MAX_SCOPES 16
#define HASH_BYTES 32

enum { ST_IDLE, ST_RFC8414, ST_OIDC, ST_JWKS };

typedef struct tslot {
	unsigned char hash[HASH_BYTES];
	mb_oauth_principal p;
	int64_t until;         /* valid while now < until (a JWT: exp + skew; introspected: capped) */
	int used;
} tslot;

/* One introspection in flight (RFC 7662): the token's hash, the requests waiting for it, and
 * its outcome once done (kept while those are woken, which check again synchronously). */
typedef struct intro {
	struct intro *next;
	struct mb_oauth *o;
	unsigned char hash[HASH_BYTES];
	mb_auth_fetch *fetch;
	mb_oauth_waiter *waiters;
	int done, rc;          /* rc: MB_OAUTH_OK / _REFUSED / _UNAVAILABLE once done */
	mb_oauth_principal p;
	char why[200];
} intro;

#define MAX_INTROS 64      /* introspections in flight at once; more are answered 503 */
#define INTRO_CACHE_MAX_S 300 /* an active answer is remembered at most this long (and never past exp) */

struct mb_oauth {
	uv_loop_t *loop;
	const mb_config *cfg;
	char issuer[1024], resource[1024];
	char jwks_url[1024];
	char intro_url[1024];  /* oauth_introspection_url, or the discovery document's (with a client id) */
	intro *intros;
	size_t nintros;
	char md_url[1200], md_path[1100];
	char *metadata;
	size_t metadata_len;
	struct {
		char name[128];
		unsigned right;
	} scopes[MAX_SCOPES];
	size_t nscopes;
	mb_jwks *keys;
	uint64_t fetched_at;   /* uv_now of the key set's arrival */
	uint64_t last_attempt; /* uv_now when the last fetch started (0: never) */
	int stage;             /* ST_*: the fetch running */
	mb_auth_fetch *fetch;
	char last_err[300];
	mb_oauth_waiter *waiters;
	tslot *cache;
	size_t cache_mask;
	unsigned char key[32];
	int closing;
	mb_oauth_stats st;
};

/* ---- options --------------------------------------------------------------------------------- */

/* Splits an http(s) URL: *scheme_https, the authority [a, a+alen), the path start. @returns 0/-1 */
static int url_parts(const char *u, int *https, const char **auth, size_t *alen, const char **path)
{
	const char *rest;
	if (strncasecmp(u, "https://", 8) == 0)
		*https = 1, rest = u + 8;
	else if (strncasecmp(u, "http://", 7) == 0)
		*https = 0, rest = u + 7;
	else
		return -1;
	size_t n = strcspn(rest, "/?#");
	if (n == 0 || memchr(rest, '@', n) || strpbrk(u, "#"))
		return -1;
	for (const char *p = u; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == '"' || *p == '\\')
			return -1;
	*auth = rest;
	*alen = n;
	*path = rest + n;
	return 0;
}

static int loopback_host(const char *a, size_t n)
{
	size_t h = n;
	if (a[0] == '[') {
		const char *e = memchr(a, ']', n);
		h = e ? (size_t)(e - a) + 1 : n;
		return h == 5 && memcmp(a, "[::1]", 5) == 0;
	}
	const char *c = memchr(a, ':', n);
	if (c)
		h = (size_t)(c - a);
	if (h == 9 && strncasecmp(a, "localhost", 9) == 0)
		return 1;
	return h > 4 && memcmp(a, "127.", 4) == 0 && strspn(a, "0123456789.") >= h;
}

/* An https URL, or http on a loopback host. @returns 0 or -1 with err naming the option */
static int check_url(const char *opt, const char *u, int allow_query, char *err, size_t errlen)
{
	int https;
	const char *a, *path;
	size_t alen;
	if (url_parts(u, &https, &a, &alen, &path) != 0 || (!allow_query && strchr(u, '?'))) {
		mb_seterr(err, errlen, "%s \"%s\" is not an absolute http(s) URL without user info, query or fragment",
			  opt, u);
		return -1;
	}
	if (!https && !loopback_host(a, alen)) {
		mb_seterr(err, errlen, "%s \"%s\": an http:// URL is accepted only on a loopback host (127.0.0.1, "
			  "[::1], localhost); use https://", opt, u);
		return -1;
	}
	return 0;
}

static int right_of(const char *s, size_t n)
{
	if (n == 7 && memcmp(s, "execute", 7) == 0)
		return MB_RIGHT_EXECUTE;
	if (n == 6 && memcmp(s, "skills", 6) == 0)
		return MB_RIGHT_SKILLS;
	if (n == 5 && memcmp(s, "admin", 5) == 0)
		return MB_RIGHT_ADMIN;
	return 0;
}

/* RFC 6749 scope-token characters: %x21 / %x23-5B / %x5D-7E. */
static int scope_char(unsigned char ch)
{
	return ch == 0x21 || (ch >= 0x23 && ch <= 0x5b) || (ch >= 0x5d && ch <= 0x7e);
}

static int parse_scopes(mb_oauth *o, const char *s, char *err, size_t errlen)
{
	while (*s) {
		while (*s == ',' || *s == ' ')
			s++;
		if (!*s)
			break;
		size_t n = strcspn(s, ", ");
		const char *eq = memchr(s, '=', n);
		size_t sn = eq ? (size_t)(eq - s) : 0;
		int r = eq ? right_of(eq + 1, n - sn - 1) : 0;
		int ok = eq && r && sn > 0 && sn < sizeof o->scopes[0].name && o->nscopes < MAX_SCOPES;
		for (size_t i = 0; ok && i < sn; i++)
			ok = scope_char((unsigned char)s[i]) && s[i] != '=';
		if (!ok) {
			mb_seterr(err, errlen, "oauth_scopes entry \"%.*s\" is not scope=right (right: execute, skills or "
				  "admin; at most %d entries; a scope is 1-127 visible characters without \" \\ or =)",
				  (int)n, s, MAX_SCOPES);
			return -1;
		}
		memcpy(o->scopes[o->nscopes].name, s, sn);
		o->scopes[o->nscopes].name[sn] = 0;
		o->scopes[o->nscopes++].right = (unsigned)r;
		s += n;
	}
	return 0;
}

int mb_oauth_tenant_ok(const char *t, size_t n)
{
	if (n == 0 || n > MB_OAUTH_TENANT_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)t[i]) && t[i] != '_' && t[i] != '-' && t[i] != '.')
			return 0;
	return !(n <= 2 && t[0] == '.' && (n == 1 || t[1] == '.')); /* not "." or ".." */
}

static int build_metadata(mb_oauth *o)
{
	json_t *doc = json_object(), *as = json_array(), *sc = json_array(), *bm = json_array();
	if (!doc || !as || !sc || !bm) {
		json_decref(doc), json_decref(as), json_decref(sc), json_decref(bm);
		return -1;
	}
	json_array_append_new(as, json_string(o->issuer));
	for (size_t i = 0; i < o->nscopes; i++)
		json_array_append_new(sc, json_string(o->scopes[i].name));
	json_array_append_new(bm, json_string("header"));
	json_object_set_new(doc, "resource", json_string(o->resource));
	json_object_set_new(doc, "authorization_servers", as);
	json_object_set_new(doc, "scopes_supported", sc);
	json_object_set_new(doc, "bearer_methods_supported", bm);
	json_object_set_new(doc, "resource_name", json_string("moonbox"));
	char *text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	/* jansson's allocator may be the server's (budget.c): copy into plain malloc memory */
	json_malloc_t jm;
	json_free_t jf;
	json_get_alloc_funcs(&jm, &jf);
	o->metadata = text ? strdup(text) : NULL;
	if (text)
		jf(text);
	if (!o->metadata)
		return -1;
	o->metadata_len = strlen(o->metadata);
	return 0;
}

mb_oauth *mb_oauth_new(uv_loop_t *loop, const mb_config *cfg, char *err, size_t errlen)
{
	if (errlen)
		err[0] = 0;
	if (!cfg->oauth_issuer[0]) {
		if (cfg->oauth_resource[0] || cfg->oauth_jwks_url[0])
			mb_seterr(err, errlen, "oauth_resource and oauth_jwks_url need oauth_issuer");
		return NULL;
	}
	if (check_url("oauth_issuer", cfg->oauth_issuer, 0, err, errlen) != 0)
		return NULL;
	if (!cfg->oauth_resource[0]) {
		mb_seterr(err, errlen, "oauth_issuer needs oauth_resource: this server's canonical URL, e.g. "
			  "https://mcp.example.com/mcp (the audience its tokens must name)");
		return NULL;
	}
	if (check_url("oauth_resource", cfg->oauth_resource, 0, err, errlen) != 0)
		return NULL;
	if (strlen(cfg->oauth_resource) > 256) {
		/* its metadata URL goes into every 401's WWW-Authenticate, which must fit a response head */
		mb_seterr(err, errlen, "oauth_resource is above 256 characters");
		return NULL;
	}
	if (cfg->oauth_jwks_url[0] && check_url("oauth_jwks_url", cfg->oauth_jwks_url, 1, err, errlen) != 0)
		return NULL;
	if (cfg->oauth_introspection_url[0] &&
	    check_url("oauth_introspection_url", cfg->oauth_introspection_url, 0, err, errlen) != 0)
		return NULL;
	if (cfg->oauth_introspection_url[0] && !cfg->oauth_client_id[0]) {
		mb_seterr(err, errlen, "oauth_introspection_url needs oauth_client_id and oauth_client_secret (the "
			  "credentials moonbox introspects with)");
		return NULL;
	}
	size_t cl = strlen(cfg->oauth_tenant_claim);
	if (!cl || strspn(cfg->oauth_tenant_claim, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/") != cl) {
		mb_seterr(err, errlen, "oauth_tenant_claim \"%s\" is not a claim name", cfg->oauth_tenant_claim);
		return NULL;
	}
	mb_oauth *o = calloc(1, sizeof *o);
	if (!o) {
		mb_seterr(err, errlen, "out of memory");
		return NULL;
	}
	o->loop = loop;
	o->cfg = cfg;
	snprintf(o->issuer, sizeof o->issuer, "%s", cfg->oauth_issuer);
	snprintf(o->resource, sizeof o->resource, "%s", cfg->oauth_resource);
	snprintf(o->jwks_url, sizeof o->jwks_url, "%s", cfg->oauth_jwks_url);
	snprintf(o->intro_url, sizeof o->intro_url, "%s", cfg->oauth_introspection_url);
	if (parse_scopes(o, cfg->oauth_scopes, err, errlen) != 0)
		goto fail;
	/* RFC 9728 section 3.1: the well-known path goes between the host and the resource's path */
	int https;
	const char *a, *path;
	size_t alen;
	url_parts(o->resource, &https, &a, &alen, &path);
	size_t pl = strlen(path);
	while (pl && path[pl - 1] == '/')
		pl--;
	snprintf(o->md_path, sizeof o->md_path, "/.well-known/oauth-protected-resource%.*s", (int)pl, path);
	snprintf(o->md_url, sizeof o->md_url, "%.*s%s", (int)(a + alen - o->resource), o->resource, o->md_path);
	size_t slots = 1;
	while (slots < (size_t)cfg->oauth_token_cache)
		slots <<= 1;
	if (cfg->oauth_token_cache > 0 && !(o->cache = calloc(slots, sizeof *o->cache))) {
		mb_seterr(err, errlen, "out of memory for oauth_token_cache");
		goto fail;
	}
	o->cache_mask = slots - 1;
	randombytes_buf(o->key, sizeof o->key);
	if (build_metadata(o) != 0) {
		mb_seterr(err, errlen, "out of memory");
		goto fail;
	}
	return o;
fail:
	free(o->cache);
	free(o->metadata);
	free(o);
	return NULL;
}

/* ---- fetching the keys ----------------------------------------------------------------------- */

static void fetch_step(mb_oauth *o, int stage);

static void wake_all(mb_oauth *o)
{
	/* first off the queue, all of them: a ready callback may close another waiter's
	 * connection (whose memory lasts until the loop's close phase; its ready returns at once) */
	mb_oauth_waiter *w = o->waiters;
	o->waiters = NULL;
	for (mb_oauth_waiter *x = w; x; x = x->next)
		x->queued = 0;
	while (w) {
		mb_oauth_waiter *next = w->next;
		w->prev = w->next = NULL;
		w->ready(w);
		w = next;
	}
}

static void oauth_free(mb_oauth *o)
{
	wake_all(o);
	free(o->cache);
	free(o->metadata);
	mb_jwks_free(o->keys);
	sodium_memzero(o->key, sizeof o->key);
	free(o);
}

static void fetch_end(mb_oauth *o, const char *err)
{
	o->stage = ST_IDLE;
	o->fetch = NULL;
	if (err) {
		o->st.jwks_failures++;
		snprintf(o->last_err, sizeof o->last_err, "%s", err);
		if (!o->closing) /* an abort at shutdown is not news */
			mb_log(MB_LOG_WARNING, "oauth: the issuer's keys could not be fetched: %s", err);
	} else {
		o->last_err[0] = 0;
	}
	wake_all(o);
	if (o->closing && !o->nintros)
		oauth_free(o); /* else the last introspection's callback does */
}

/* The discovery document's jwks_uri, after checking its issuer. @returns 0 or -1 with err */
static int read_discovery(mb_oauth *o, const char *body, size_t len, char *err, size_t errlen)
{
	json_error_t je;
	json_t *d = json_loadb(body, len, 0, &je);
	json_t *iss = json_is_object(d) ? json_object_get(d, "issuer") : NULL;
	json_t *ju = json_is_object(d) ? json_object_get(d, "jwks_uri") : NULL;
	int rc = -1;
	if (!json_is_object(d))
		mb_seterr(err, errlen, "the discovery document is not a JSON object");
	else if (!json_is_string(iss) || strcmp(json_string_value(iss), o->issuer) != 0)
		mb_seterr(err, errlen, "the discovery document's issuer is not %s", o->issuer);
	else if (!json_is_string(ju) || json_string_length(ju) >= sizeof o->jwks_url)
		mb_seterr(err, errlen, "the discovery document has no jwks_uri");
	else if (check_url("jwks_uri", json_string_value(ju), 1, err, errlen) == 0) {
		snprintf(o->jwks_url, sizeof o->jwks_url, "%s", json_string_value(ju));
		rc = 0;
		json_t *ie = json_object_get(d, "introspection_endpoint");
		char ierr[300];
		if (!o->intro_url[0] && o->cfg->oauth_client_id[0] && json_is_string(ie) &&
		    json_string_length(ie) < sizeof o->intro_url &&
		    check_url("introspection_endpoint", json_string_value(ie), 0, ierr, sizeof ierr) == 0)
			snprintf(o->intro_url, sizeof o->intro_url, "%s", json_string_value(ie));
	}
	json_decref(d);
	return rc;
}

static void on_fetched(void *ud, int status, const char *body, size_t len, const char *ferr, int aborted)
{
	mb_oauth *o = ud;
	char err[400] = "";
	if (aborted || o->closing) {
		fetch_end(o, ferr ? ferr : "aborted");
		return;
	}
	int stage = o->stage;
	if (!ferr && status != 200)
		snprintf(err, sizeof err, "%s answered HTTP %d",
			 stage == ST_JWKS ? "the JWKS URL" : "the discovery URL", status);
	else if (ferr)
		snprintf(err, sizeof err, "%s", ferr);
	if (stage == ST_RFC8414 || stage == ST_OIDC) {
		if (!err[0] && read_discovery(o, body, len, err, sizeof err) == 0) {
			fetch_step(o, ST_JWKS);
			return;
		}
		if (stage == ST_RFC8414) {
			mb_log(MB_LOG_DEBUG, "oauth: RFC 8414 discovery: %s; trying OpenID discovery", err);
			fetch_step(o, ST_OIDC);
			return;
		}
		fetch_end(o, err);
		return;
	}
	mb_jwks *k = NULL;
	if (!err[0] && mb_jwks_parse(body, len, &k, err, sizeof err) == 0) {
		mb_jwks_free(o->keys);
		o->keys = k;
		o->fetched_at = uv_now(o->loop);
		o->st.jwks_fetches++;
		mb_log(MB_LOG_INFO, "oauth: %zu signing key(s) of %s", mb_jwks_count(k), o->issuer);
		fetch_end(o, NULL);
		return;
	}
	fetch_end(o, err);
}

static void fetch_step(mb_oauth *o, int stage)
{
	char url[2200], err[300];
	if (stage == ST_RFC8414) {
		int https;
		const char *a, *path;
		size_t alen;
		url_parts(o->issuer, &https, &a, &alen, &path);
		size_t pl = strlen(path);
		while (pl && path[pl - 1] == '/')
			pl--;
		snprintf(url, sizeof url, "%.*s/.well-known/oauth-authorization-server%.*s", (int)(a + alen - o->issuer),
			 o->issuer, (int)pl, path);
	} else if (stage == ST_OIDC) {
		size_t il = strlen(o->issuer);
		while (il && o->issuer[il - 1] == '/')
			il--;
		snprintf(url, sizeof url, "%.*s/.well-known/openid-configuration", (int)il, o->issuer);
	} else {
		snprintf(url, sizeof url, "%s", o->jwks_url);
	}
	o->stage = stage;
	mb_auth_fetch_req r = { .url = url, .max_bytes = (size_t)o->cfg->oauth_jwks_max_bytes,
				.timeout_ms = (long)o->cfg->oauth_fetch_timeout_ms };
	o->fetch = mb_auth_fetch_start(o->loop, &r, on_fetched, o, err, sizeof err);
	if (!o->fetch)
		fetch_end(o, err);
}

/* Starts a fetch unless one runs or the last one started less than oauth_jwks_refresh_ms ago.
 * @returns 1 when a fetch runs now */
static int maybe_fetch(mb_oauth *o)
{
	if (o->closing)
		return 0;
	if (o->stage != ST_IDLE)
		return 1;
	uint64_t now = uv_now(o->loop);
	if (o->last_attempt && now - o->last_attempt < (uint64_t)o->cfg->oauth_jwks_refresh_ms)
		return 0;
	o->last_attempt = now ? now : 1;
	fetch_step(o, o->jwks_url[0] ? ST_JWKS : ST_RFC8414);
	return o->stage != ST_IDLE;
}

void mb_oauth_start(mb_oauth *o)
{
	if (o)
		maybe_fetch(o);
}

/* ---- checking a token ------------------------------------------------------------------------ */

static void queue_on(mb_oauth_waiter **head, mb_oauth_waiter *w)
{
	if (w->queued)
		return;
	w->prev = NULL;
	w->next = *head;
	if (*head)
		(*head)->prev = w;
	*head = w;
	w->head = head;
	w->queued = 1;
}

static void queue(mb_oauth *o, mb_oauth_waiter *w)
{
	queue_on(&o->waiters, w);
}

void mb_oauth_unwait(mb_oauth *o, mb_oauth_waiter *w)
{
	if (!o || !w->queued)
		return;
	if (w->prev)
		w->prev->next = w->next;
	else
		*w->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	w->prev = w->next = NULL;
	w->queued = 0;
}

/* The token's rights from scope (a space-separated string) or scp (an array, or a string). */
static unsigned rights_of(const mb_oauth *o, json_t *claims)
{
	unsigned r = 0;
	json_t *sc = json_object_get(claims, "scope");
	if (!json_is_string(sc))
		sc = json_object_get(claims, "scp");
	if (json_is_string(sc)) {
		const char *s = json_string_value(sc);
		while (*s) {
			while (*s == ' ')
				s++;
			size_t n = strcspn(s, " ");
			for (size_t i = 0; n && i < o->nscopes; i++)
				if (strlen(o->scopes[i].name) == n && memcmp(o->scopes[i].name, s, n) == 0)
					r |= o->scopes[i].right;
			s += n;
		}
		return r;
	}
	size_t i;
	json_t *v;
	if (json_is_array(sc))
		json_array_foreach(sc, i, v)
			for (size_t k = 0; json_is_string(v) && k < o->nscopes; k++)
				if (strcmp(o->scopes[k].name, json_string_value(v)) == 0)
					r |= o->scopes[k].right;
	return r;
}

/* The principal of verified claims. @returns 0 or -1 with why */
static int principal_of(const mb_oauth *o, json_t *claims, mb_oauth_principal *p, char *why, size_t whylen)
{
	memset(p, 0, sizeof *p);
	const char *cname = o->cfg->oauth_tenant_claim;
	json_t *t = json_object_get(claims, cname);
	json_t *sub = json_object_get(claims, "sub");
	if (!sub)
		sub = json_object_get(claims, "client_id"); /* a client's own token (client credentials) */
	if (!t && strcmp(cname, "sub") == 0)
		t = sub;
	char num[32];
	const char *tv = NULL;
	size_t tl = 0;
	if (json_is_string(t)) {
		tv = json_string_value(t);
		tl = json_string_length(t);
	} else if (json_is_integer(t)) {
		snprintf(num, sizeof num, "%lld", (long long)json_integer_value(t));
		tv = num;
		tl = strlen(num);
	}
	if (!tv || !mb_oauth_tenant_ok(tv, tl)) {
		mb_seterr(why, whylen, "the token's %s claim is %s (a tenant is 1-64 characters of A-Z a-z 0-9 _ . -)",
			  cname, tv ? "not a tenant name" : "missing");
		return -1;
	}
	if (tl == 7 && memcmp(tv, "default", 7) == 0) {
		/* the tenant of stdio and of HTTP without tokens, whose skills are skills_dir itself: a
		 * claim value (which the authorization server's users may choose) does not get it */
		mb_seterr(why, whylen, "the token's %s claim is default, the tenant reserved for stdio and "
			  "unauthenticated HTTP", cname);
		return -1;
	}
	memcpy(p->tenant, tv, tl);
	p->tenant[tl] = 0;
	if (json_is_string(sub)) {
		const char *s = json_string_value(sub);
		size_t i = 0;
		for (; s[i] && i < MB_OAUTH_SUB_MAX; i++)
			p->sub[i] = (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f && s[i] != '"' && s[i] != '\\'
					    ? s[i]
					    : '?';
		p->sub[i] = 0;
	}
	p->rights = rights_of(o, claims);
	p->exp = (int64_t)json_number_value(json_object_get(claims, "exp"));
	return 0;
}

/* ---- introspection (RFC 7662) ---------------------------------------------------------------- */

static tslot *slot_of(mb_oauth *o, const unsigned char h[HASH_BYTES])
{
	if (!o->cache)
		return NULL;
	uint64_t ix;
	memcpy(&ix, h, sizeof ix);
	return &o->cache[ix & o->cache_mask];
}

/* The outcome of an introspection answer. @returns MB_OAUTH_OK (p set) or MB_OAUTH_REFUSED */
static int read_introspection(mb_oauth *o, const char *body, size_t len, mb_oauth_principal *p, char *why,
			      size_t whylen)
{
	json_error_t je;
	json_t *d = json_loadb(body, len, 0, &je);
	int rc = MB_OAUTH_REFUSED;
	json_t *iss = json_is_object(d) ? json_object_get(d, "iss") : NULL;
	json_t *aud = json_is_object(d) ? json_object_get(d, "aud") : NULL;
	json_t *exp = json_is_object(d) ? json_object_get(d, "exp") : NULL;
	int64_t now = (int64_t)time(NULL);
	int aud_ok = 0;
	if (json_is_string(aud))
		aud_ok = strcmp(json_string_value(aud), o->resource) == 0;
	size_t i;
	json_t *v;
	if (json_is_array(aud))
		json_array_foreach(aud, i, v)
			aud_ok |= json_is_string(v) && strcmp(json_string_value(v), o->resource) == 0;
	if (!json_is_object(d))
		mb_seterr(why, whylen, "the introspection answer is not a JSON object");
	else if (!json_is_true(json_object_get(d, "active")))
		mb_seterr(why, whylen, "the token is not active (introspection)");
	else if (iss && (!json_is_string(iss) || strcmp(json_string_value(iss), o->issuer) != 0))
		mb_seterr(why, whylen, "the token's issuer is not %s", o->issuer);
	else if (!aud_ok)
		mb_seterr(why, whylen, "the token's audience does not include %s", o->resource);
	else if (exp && (!json_is_number(exp) || json_number_value(exp) + (double)o->cfg->oauth_clock_skew_s <= (double)now))
		mb_seterr(why, whylen, "the token has expired");
	else if (principal_of(o, d, p, why, whylen) == 0) {
		/* remembered until exp, at most INTRO_CACHE_MAX_S (a revoked token is refused after that) */
		int64_t until = now + INTRO_CACHE_MAX_S;
		if (!exp)
			until = now + 1; /* no lifetime given: not cached beyond the requests that waited */
		else if ((int64_t)json_number_value(exp) < until)
			until = (int64_t)json_number_value(exp);
		p->exp = until;
		rc = MB_OAUTH_OK;
	}
	json_decref(d);
	return rc;
}

static void intro_free(intro *x)
{
	sodium_memzero(x->hash, sizeof x->hash);
	free(x);
}

static void on_introspected(void *ud, int status, const char *body, size_t len, const char *ferr, int aborted)
{
	intro *x = ud;
	mb_oauth *o = x->o;
	x->fetch = NULL;
	x->done = 1;
	if (ferr || aborted || status != 200) {
		x->rc = MB_OAUTH_UNAVAILABLE;
		if (ferr)
			mb_seterr(x->why, sizeof x->why, "introspection failed: %s", ferr);
		else
			mb_seterr(x->why, sizeof x->why, "introspection failed: HTTP %d", status);
		mb_log(MB_LOG_WARNING, "oauth: %s", x->why);
	} else {
		x->rc = read_introspection(o, body, len, &x->p, x->why, sizeof x->why);
		tslot *slot = x->rc == MB_OAUTH_OK ? slot_of(o, x->hash) : NULL;
		if (slot) {
			memcpy(slot->hash, x->hash, sizeof x->hash);
			slot->p = x->p;
			slot->until = x->p.exp;
			slot->used = 1;
		}
		if (x->rc == MB_OAUTH_OK) {
			o->st.verified++;
			mb_log(MB_LOG_INFO, "oauth: an opaque token of %s introspected (tenant %s)",
			       x->p.sub[0] ? x->p.sub : "(no sub)", x->p.tenant);
		}
		else
			o->st.refused++;
	}
	/* the waiters check again now, finding x done (two passes, as wake_all) */
	mb_oauth_waiter *w = x->waiters;
	x->waiters = NULL;
	for (mb_oauth_waiter *y = w; y; y = y->next)
		y->queued = 0;
	while (w) {
		mb_oauth_waiter *next = w->next;
		w->prev = w->next = NULL;
		w->ready(w);
		w = next;
	}
	for (intro **pp = &o->intros; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	o->nintros--;
	intro_free(x);
	if (o->closing && !o->nintros && !o->fetch)
		oauth_free(o);
}

/* Percent-encodes s (n bytes) into out (cap bytes). @returns 0 or -1 when it does not fit */
static int form_encode(const char *s, size_t n, char *out, size_t cap)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
			if (k + 1 >= cap)
				return -1;
			out[k++] = (char)ch;
		} else {
			if (k + 3 >= cap)
				return -1;
			out[k++] = '%';
			out[k++] = "0123456789ABCDEF"[ch >> 4];
			out[k++] = "0123456789ABCDEF"[ch & 15];
		}
	}
	out[k] = 0;
	return 0;
}

static int introspect(mb_oauth *o, const char *tok, size_t n, const unsigned char h[HASH_BYTES], mb_oauth_waiter *w,
		      mb_oauth_principal *out, char *why, size_t whylen)
{
	for (intro *x = o->intros; x; x = x->next) {
		if (sodium_memcmp(x->hash, h, HASH_BYTES) != 0)
			continue;
		if (x->done) {
			if (x->rc == MB_OAUTH_OK)
				*out = x->p;
			else
				mb_seterr(why, whylen, "%s", x->why);
			return x->rc;
		}
		if (!w) {
			mb_seterr(why, whylen, "the token's introspection has not answered");
			return MB_OAUTH_UNAVAILABLE;
		}
		queue_on(&x->waiters, w);
		return MB_OAUTH_WAIT;
	}
	if (!w || o->closing) {
		mb_seterr(why, whylen, "the token could not be introspected");
		return MB_OAUTH_UNAVAILABLE;
	}
	if (o->nintros >= MAX_INTROS) {
		mb_seterr(why, whylen, "%d introspections are in flight already", MAX_INTROS);
		return MB_OAUTH_UNAVAILABLE;
	}
	char body[3 * 8192 + 64];
	memcpy(body, "token_type_hint=access_token&token=", 35);
	if (form_encode(tok, n, body + 35, sizeof body - 35) != 0) {
		o->st.refused++;
		mb_seterr(why, whylen, "the token is too long");
		return MB_OAUTH_REFUSED;
	}
	intro *x = calloc(1, sizeof *x);
	if (!x) {
		mb_seterr(why, whylen, "out of memory");
		return MB_OAUTH_UNAVAILABLE;
	}
	x->o = o;
	memcpy(x->hash, h, HASH_BYTES);
	char err[300];
	mb_auth_fetch_req r = { .url = o->intro_url, .post = body, .user = o->cfg->oauth_client_id,
				.secret = o->cfg->oauth_client_secret, .max_bytes = 65536,
				.timeout_ms = (long)o->cfg->oauth_fetch_timeout_ms };
	x->fetch = mb_auth_fetch_start(o->loop, &r, on_introspected, x, err, sizeof err);
	sodium_memzero(body, sizeof body);
	if (!x->fetch) {
		intro_free(x);
		mb_seterr(why, whylen, "the token could not be introspected: %s", err);
		return MB_OAUTH_UNAVAILABLE;
	}
	x->next = o->intros;
	o->intros = x;
	o->nintros++;
	queue_on(&x->waiters, w);
	return MB_OAUTH_WAIT;
}

int mb_oauth_check(mb_oauth *o, const char *tok, size_t n, mb_oauth_waiter *w, mb_oauth_principal *out,
		   char *why, size_t whylen)
{
	int64_t now = (int64_t)time(NULL);
	unsigned char h[HASH_BYTES];
	crypto_generichash(h, sizeof h, (const unsigned char *)tok, n, o->key, sizeof o->key);
	tslot *slot = NULL;
	if (o->cache) {
		uint64_t ix;
		memcpy(&ix, h, sizeof ix);
		slot = &o->cache[ix & o->cache_mask];
		if (slot->used && sodium_memcmp(slot->hash, h, sizeof h) == 0) {
			if (slot->until > now) {
				*out = slot->p;
				o->st.cache_hits++;
				return MB_OAUTH_OK;
			}
			slot->used = 0;
		}
	}
	/* a key set older than oauth_jwks_max_age_ms is fetched again; the old one serves meanwhile */
	if (o->keys && uv_now(o->loop) - o->fetched_at > (uint64_t)o->cfg->oauth_jwks_max_age_ms)
		maybe_fetch(o);
	if (!mb_jwt_is_jws(tok, n)) {
		if (!o->intro_url[0]) {
			o->st.refused++;
			mb_seterr(why, whylen, "the token is not a JWT access token (opaque tokens need introspection, "
				  "which is not configured)");
			return MB_OAUTH_REFUSED;
		}
		return introspect(o, tok, n, h, w, out, why, whylen);
	}
	mb_jwt_expect ex = { .issuer = o->issuer, .audience = o->resource, .now = now,
			     .skew = o->cfg->oauth_clock_skew_s };
	json_t *claims = NULL;
	int rc = mb_jwt_verify(tok, n, o->keys, &ex, &claims, why, whylen);
	if (rc == MB_JWT_NOKEY) {
		if (w && maybe_fetch(o)) {
			queue(o, w);
			return MB_OAUTH_WAIT;
		}
		if (!o->keys) {
			mb_seterr(why, whylen, "the issuer's signing keys are not available%s%s",
				  o->last_err[0] ? ": " : "", o->last_err);
			return MB_OAUTH_UNAVAILABLE;
		}
		o->st.refused++;
		return MB_OAUTH_REFUSED;
	}
	if (rc != MB_JWT_OK) {
		o->st.refused++;
		return MB_OAUTH_REFUSED;
	}
	mb_oauth_principal p;
	int pr = principal_of(o, claims, &p, why, whylen);
	json_decref(claims);
	if (pr != 0) {
		o->st.refused++;
		return MB_OAUTH_REFUSED;
	}
	o->st.verified++;
	char rights[32];
	mb_oauth_rights_text(p.rights, rights, sizeof rights);
	mb_log(MB_LOG_INFO, "oauth: a token of %s verified (tenant %s, rights: %s)", p.sub[0] ? p.sub : "(no sub)",
	       p.tenant, rights[0] ? rights : "none"); /* once per token while cached: who, never the token */
	if (slot) {
		memcpy(slot->hash, h, sizeof h);
		slot->p = p;
		slot->until = p.exp + o->cfg->oauth_clock_skew_s;
		slot->used = 1;
	}
	sodium_memzero(h, sizeof h);
	*out = p;
	return MB_OAUTH_OK;
}

/* ---- the rest -------------------------------------------------------------------------------- */

const char *mb_oauth_metadata(const mb_oauth *o, size_t *len)
{
	*len = o->metadata_len;
	return o->metadata;
}

const char *mb_oauth_metadata_url(const mb_oauth *o)
{
	return o->md_url;
}

int mb_oauth_is_metadata_path(const mb_oauth *o, const char *path, size_t n)
{
	static const char base[] = "/.well-known/oauth-protected-resource";
	size_t bl = sizeof base - 1;
	if (n == bl && memcmp(path, base, bl) == 0)
		return 1;
	if (n == bl + 4 && memcmp(path, base, bl) == 0 && memcmp(path + bl, "/mcp", 4) == 0)
		return 1;
	return n == strlen(o->md_path) && memcmp(path, o->md_path, n) == 0;
}

const char *mb_oauth_scope_of(const mb_oauth *o, unsigned right)
{
	for (size_t i = 0; i < o->nscopes; i++)
		if (o->scopes[i].right == right)
			return o->scopes[i].name;
	return NULL;
}

void mb_oauth_scopes_text(const mb_oauth *o, unsigned rights, char *out, size_t cap)
{
	size_t n = 0;
	out[0] = 0;
	for (unsigned r = 1; r <= MB_RIGHT_ADMIN; r <<= 1) {
		const char *s = (rights & r) ? mb_oauth_scope_of(o, r) : NULL;
		if (s && n + strlen(s) + 2 < cap)
			n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " " : "", s);
	}
}

void mb_oauth_rights_text(unsigned rights, char *out, size_t cap)
{
	snprintf(out, cap, "%s%s%s", rights & MB_RIGHT_EXECUTE ? " execute" : "", rights & MB_RIGHT_SKILLS ? " skills" : "",
		 rights & MB_RIGHT_ADMIN ? " admin" : "");
	if (out[0] == ' ')
		memmove(out, out + 1, strlen(out));
}

void mb_oauth_get_stats(const mb_oauth *o, mb_oauth_stats *out)
{
	*out = o->st;
}

void mb_oauth_close(mb_oauth *o)
{
	if (!o || o->closing)
		return;
	o->closing = 1;
	for (intro *x = o->intros; x; x = x->next)
		mb_auth_fetch_abort(x->fetch); /* on_introspected runs for each */
	if (o->fetch) {
		mb_auth_fetch_abort(o->fetch); /* fetch_end frees o */
		return;
	}
	if (o->nintros)
		return; /* the last on_introspected frees o */
	oauth_free(o);
}
