/* http.c - the Streamable HTTP server: what a request means and the transport's lifecycle.
 *
 * Routing. All header checks (Host, Origin, token, method, Content-Type, Accept, protocol
 * version, session) run in on_headers_complete, so a rejected request's body is discarded, never
 * buffered (http_conn.c collects the request; a rejection is recorded and answered once the
 * message is complete). A complete request is dispatched by route and method: /healthz,
 * /metrics, OPTIONS, and on /mcp POST (a new exchange for the host, or a new session for
 * `initialize`), GET (the session's SSE stream; with Last-Event-ID, the resumption of a broken
 * stream) and DELETE (ends the session).
 *
 * Time. One repeating timer sweeps connections (read timeout, idle keep-alive, drain linger,
 * SSE heartbeats) and sessions (idle expiry, finished streams' replay records); deadlines use
 * uv_now.
 *
 * The public API of http.h: start (listener, timer, parser settings), send (to an exchange -
 * attached to its POST, or parked after its POST connection closed -, a session's GET stream, or
 * every GET stream), stats, address, close.
 *
 * The top of the transport: it builds on http_session.c (sessions, exchanges, SSE, resumption),
 * http_conn.c (connections, parsing, writes) and http_replay.c (the replay buffer), which never
 * call it; http_auth.c and http_metrics.c (policy, counters) are below all of them. Everything
 * runs on the loop thread (http.h).
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include "http_int.h"
#include "protocol.h"
#include "log.h"

#define HEARTBEAT_MS 15000        /* SSE comment on GET streams, for proxies */
#define REPLAY_KEEP_MS 60000      /* a finished stream stays resumable this long (at most the idle time) */

/* ---- routing --------------------------------------------------------------------------------- */

/* Case-insensitive compare of a media type (up to ';', trimmed) with t. */
static int media_is(const char *s, size_t n, const char *t)
{
	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	const char *semi = memchr(s, ';', n);
	if (semi)
		n = (size_t)(semi - s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	return n == strlen(t) && strncasecmp(s, t, n) == 0;
}

/* Whether an Accept list names the media type t (exactly; wildcards do not count). */
static int accepts(const char *v, size_t len, const char *t)
{
	while (len) {
		const char *comma = memchr(v, ',', len);
		size_t n = comma ? (size_t)(comma - v) : len;
		if (media_is(v, n, t))
			return 1;
		if (!comma)
			break;
		len -= n + 1;
		v = comma + 1;
	}
	return 0;
}

/* Records the answer to a request whose body will be discarded. msg may quote one value. */
static void reject(conn *c, int status, int rpc, const char *extra, const char *msg, const char *a)
{
	if (!c->reject) {
		c->reject = status;
		c->reject_rpc = rpc;
		c->reject_hdr = extra;
		snprintf(c->msg, sizeof c->msg, msg, a ? a : "");
	}
}

/* Whether v is one of the 2025 revisions (served with sessions). */
static int is_legacy_version(const char *v)
{
	for (const char *const *p = mb_protocol_served; *p; p++)
		if (strcmp(v, *p) == 0)
			return 1;
	return 0;
}

/* The 401 answers. WWW-Authenticate: Bearer makes an MCP client start OAuth (which moonbox does
 * not offer yet: the Inspector CLI then says "Interactive OAuth requires a TTY"), so both the
 * header's error_description and the body say which header to send instead. RFC 6750 section
 * 3.1: error="invalid_token" when a bearer token was sent and refused, no error code when none
 * was sent. */
static const char auth_none[] =
	"WWW-Authenticate: Bearer realm=\"moonbox\", error_description=\"send the header "
	"Authorization: Bearer <token> with a token of this server's http_tokens (OAuth is not "
	"offered)\"\r\n";
static const char auth_refused[] =
	"WWW-Authenticate: Bearer realm=\"moonbox\", error=\"invalid_token\", error_description=\""
	"the bearer token is not one of this server's http_tokens: send Authorization: Bearer "
	"<token> with a configured token (OAuth is not offered)\"\r\n";
static const char auth_msg_none[] =
	"Unauthorized: send Authorization: Bearer <token> with a token of this server's http_tokens "
	"(moonbox does not offer OAuth: configure the client to send that header)";
static const char auth_msg_refused[] =
	"Unauthorized: the bearer token is not valid: send Authorization: Bearer <token> with a token "
	"of this server's http_tokens (moonbox does not offer OAuth)";
static const char auth_msg_scheme[] =
	"Unauthorized: the Authorization header must be Bearer <token> with a token of this server's "
	"http_tokens (moonbox does not offer OAuth)";

/* Whether an Authorization value carries a bearer token: the scheme Bearer, then a space, a
 * tab or nothing. */
static int is_bearer(const char *v, size_t n)
{
	return n >= 6 && strncasecmp(v, "Bearer", 6) == 0 && (n == 6 || v[6] == ' ' || v[6] == '\t');
}

static const char allow_mcp[] = "Allow: GET, POST, DELETE, OPTIONS\r\n";
static const char allow_get[] = "Allow: GET\r\n";

/* ---- OAuth (auth_oauth.h) -------------------------------------------------------------------- */

/* Writes the WWW-Authenticate line of a 401 into c->auth_hdr: resource_metadata always (so an
 * MCP client finds the authorization server), the scopes an agent normally needs, and error /
 * error_description when a token was sent and refused (RFC 6750 section 3.1). */
static void oauth_challenge(conn *c, const char *error, const char *why)
{
	mb_http *h = c->h;
	char scopes[300];
	mb_oauth_scopes_text(h->oauth, MB_RIGHT_EXECUTE | MB_RIGHT_SKILLS, scopes, sizeof scopes);
	int n = snprintf(c->auth_hdr, sizeof c->auth_hdr, "WWW-Authenticate: Bearer resource_metadata=\"%s\"",
			 mb_oauth_metadata_url(h->oauth));
	if (scopes[0] && n > 0 && (size_t)n < sizeof c->auth_hdr)
		n += snprintf(c->auth_hdr + n, sizeof c->auth_hdr - (size_t)n, ", scope=\"%s\"", scopes);
	if (error && n > 0 && (size_t)n < sizeof c->auth_hdr)
		n += snprintf(c->auth_hdr + n, sizeof c->auth_hdr - (size_t)n, ", error=\"%s\", error_description=\"%s\"",
			      error, why);
	if (n < 0 || (size_t)n + 3 > sizeof c->auth_hdr)
		n = (int)sizeof c->auth_hdr - 3; /* cannot happen: the parts are bounded */
	memcpy(c->auth_hdr + n, "\r\n", 3);
}

/* 403 insufficient_scope for a right the token lacks (step-up: the client asks for the scope). */
static void scope_reject(conn *c, unsigned right, const char *what)
{
	mb_http *h = c->h;
	const char *scope = mb_oauth_scope_of(h->oauth, right);
	snprintf(c->auth_hdr, sizeof c->auth_hdr,
		 "WWW-Authenticate: Bearer resource_metadata=\"%s\", error=\"insufficient_scope\", scope=\"%s\", "
		 "error_description=\"%s needs the scope %s\"\r\n",
		 mb_oauth_metadata_url(h->oauth), scope ? scope : "", what, scope ? scope : "(none configured)");
	reject(c, 403, -32000, c->auth_hdr, "Forbidden: insufficient_scope: this request needs the scope %s",
	       scope ? scope : "(none configured)");
}

static void on_oauth_ready(mb_oauth_waiter *w);

/* Counts a refused request; one that presented a token (why != NULL) is also a failed sign-in
 * for the audit trail (on_auth_failed, with the peer's address). */
static void auth_failed(conn *c, const char *why)
{
	mb_http *h = c->h;
	h->st.auth_failures++;
	if (!why || !h->cb.on_auth_failed)
		return;
	struct sockaddr_storage sa;
	int len = sizeof sa;
	char ip[INET6_ADDRSTRLEN] = "";
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) == 0)
		uv_ip_name((struct sockaddr *)&sa, ip, sizeof ip);
	h->cb.on_auth_failed(h->cb.ud, why, ip);
}
static void after_auth(conn *c);

/* Authenticates the request: a static token of http_tokens, else (with oauth_issuer) an OAuth
 * access token, else none when neither is configured. Only the Authorization header counts
 * (a token in the query string is never read).
 * @returns 0 (c->tenant set), 1 (waiting for the issuer's keys: c->auth_wait) or -1 (rejected) */
static int authenticate(conn *c, int may_wait)
{
	mb_http *h = c->h;
	const char *authz = c->hcount[H_AUTH] ? hval(c, H_AUTH) : NULL;
	if (!h->oauth) {
		c->tenant = c->hover[H_AUTH] ? NULL : mb_http_authenticate(&h->pol, authz, c->hlen[H_AUTH]);
		mb_http_set_slot(c, mb_http_tenant_slot(h, c->tenant));
		if (c->tenant)
			return 0;
		auth_failed(c, !c->hcount[H_AUTH] ? NULL
			    : c->hover[H_AUTH] ? "the Authorization header is too long"
			    : is_bearer(hval(c, H_AUTH), c->hlen[H_AUTH]) ? "the bearer token is not one of http_tokens"
									 : "the Authorization header is not Bearer <token>");
		if (!c->hcount[H_AUTH])
			reject(c, 401, -32000, auth_none, auth_msg_none, NULL);
		else if (c->hover[H_AUTH] || is_bearer(hval(c, H_AUTH), c->hlen[H_AUTH]))
			reject(c, 401, -32000, auth_refused, auth_msg_refused, NULL);
		else
			reject(c, 401, -32000, auth_none, auth_msg_scheme, NULL);
		return -1;
	}
	c->tenant = NULL;
	if (h->pol.ntokens && !c->hover[H_AUTH] && authz &&
	    (c->tenant = mb_http_authenticate(&h->pol, authz, c->hlen[H_AUTH])) != NULL) {
		mb_http_set_slot(c, mb_http_tenant_slot(h, c->tenant));
		return 0; /* a static token: every right */
	}
	if (!authz) {
		auth_failed(c, NULL); /* no token: a client finding out how to sign in, not a failure */
		oauth_challenge(c, NULL, NULL);
		reject(c, 401, -32000, c->auth_hdr, "Unauthorized: send Authorization: Bearer <access token> (the "
		       "authorization server is named in the WWW-Authenticate header's resource_metadata)%s", NULL);
		return -1;
	}
	const char *t = authz + 6;
	size_t n = c->hlen[H_AUTH] >= 6 ? c->hlen[H_AUTH] - 6 : 0;
	while (n && (*t == ' ' || *t == '\t'))
		t++, n--;
	if (c->hover[H_AUTH] || !is_bearer(authz, c->hlen[H_AUTH]) || n == 0) {
		auth_failed(c, c->hover[H_AUTH] ? "the Authorization header is too long"
						: "the Authorization header is not Bearer <token>");
		oauth_challenge(c, "invalid_request", c->hover[H_AUTH] ? "the Authorization header is too long"
								       : "the Authorization header must be Bearer <token>");
		reject(c, 401, -32000, c->auth_hdr, "Unauthorized: the Authorization header must be Bearer <access "
		       "token>%s", NULL);
		return -1;
	}
	mb_oauth_principal pr;
	char why[200] = "";
	c->aw.ready = on_oauth_ready;
	int rc = mb_oauth_check(h->oauth, t, n, may_wait ? &c->aw : NULL, &pr, why, sizeof why);
	if (rc == MB_OAUTH_WAIT) {
		c->auth_wait = 1;
		return 1;
	}
	if (rc == MB_OAUTH_OK) {
		memcpy(c->otenant, pr.tenant, sizeof c->otenant);
		memcpy(c->osub, pr.sub, sizeof c->osub);
		c->tenant = c->otenant;
		c->rights = pr.rights;
		c->oauth = 1;
		mb_http_set_slot(c, mb_http_oauth_slot(h, c, c->tenant));
		return 0;
	}
	auth_failed(c, rc == MB_OAUTH_UNAVAILABLE ? NULL : why); /* 503: the issuer's keys, not the token */
	if (rc == MB_OAUTH_UNAVAILABLE) {
		mb_log(MB_LOG_NOTICE, "http: a request is refused: %s", why);
		reject(c, 503, -32000, "Retry-After: 5\r\n",
		       "Service Unavailable: the authorization server's signing keys cannot be fetched now; try again "
		       "later%s", NULL);
		return -1;
	}
	oauth_challenge(c, "invalid_token", why);
	reject(c, 401, -32000, c->auth_hdr, "Unauthorized: invalid_token: %s", why);
	return -1;
}

static void handle_request(conn *c);

/* The issuer's keys arrived (or could not be had) for a token that waited for them: when its
 * request is complete (C_AUTH) it is authenticated again, now without waiting, and handled. */
static void on_oauth_ready(mb_oauth_waiter *w)
{
	conn *c = container_of(w, conn, aw);
	if (!c->auth_wait || (c->state != C_READING && c->state != C_AUTH))
		return; /* closed, or that request already ended otherwise */
	/* decided now, while the answer (an introspection's is kept only during this call) is there;
	 * a request whose body is still coming goes on reading and is handled when complete */
	c->auth_wait = 0;
	if (authenticate(c, 0) == 0)
		after_auth(c);
	if (c->state == C_AUTH) {
		c->state = C_READING;
		handle_request(c);
	}
}

/* The checks that follow authentication: method, media types, protocol version, session (whose
 * tenant must be the token's). */
static void after_auth(conn *c)
{
	mb_http *h = c->h;
	if (c->route == R_METRICS) {
		if (c->method != M_GET)
			reject(c, 405, -32000, allow_get, "method not allowed on /metrics (use GET)", NULL);
		else if (c->oauth && !(c->rights & MB_RIGHT_ADMIN))
			scope_reject(c, MB_RIGHT_ADMIN, "/metrics");
		return;
	}
	/* /mcp */
	if (c->method != M_GET && c->method != M_POST && c->method != M_DELETE) {
		reject(c, 405, -32000, allow_mcp, "Method Not Allowed: /mcp takes POST, GET and DELETE", NULL);
		return;
	}
	if (c->hcount[H_PROTO] && !is_legacy_version(hval(c, H_PROTO))) {
		/* the 2026-07-28 revision (or a version the host refuses with the request's id) */
		if (c->method != M_POST) {
			reject(c, 405, -32000, "Allow: POST\r\n",
			       "Method Not Allowed: with MCP-Protocol-Version \"%s\" /mcp takes POST only "
			       "(subscriptions/listen streams notifications)", hval(c, H_PROTO));
			return;
		}
		c->modern = 1;
	}
	if (c->method == M_POST) {
		if (!c->hcount[H_CTYPE] || !media_is(hval(c, H_CTYPE), c->hlen[H_CTYPE], "application/json")) {
			reject(c, 415, -32000, NULL,
			       "Unsupported Media Type: Content-Type must be application/json", NULL);
			return;
		}
		if (!accepts(hval(c, H_ACCEPT), c->hlen[H_ACCEPT], "application/json") ||
		    !accepts(hval(c, H_ACCEPT), c->hlen[H_ACCEPT], "text/event-stream")) {
			reject(c, 406, -32000, NULL,
			       "Not Acceptable: Accept must list both application/json and text/event-stream",
			       NULL);
			return;
		}
	} else if (c->method == M_GET) {
		if (!accepts(hval(c, H_ACCEPT), c->hlen[H_ACCEPT], "text/event-stream")) {
			reject(c, 406, -32000, NULL, "Not Acceptable: Accept must list text/event-stream", NULL);
			return;
		}
	}
	if (c->modern) {
		/* sessionless: Mcp-Session-Id is ignored */
	} else if (c->hcount[H_SESSION]) {
		const char *v = hval(c, H_SESSION);
		size_t n = c->hlen[H_SESSION];
		session *s = c->hover[H_SESSION] ? NULL : mb_http_session_by_id(h, v, n);
		if (!s || strcmp(s->tenant, c->tenant) != 0) {
			reject(c, 404, -32001, NULL, "Session not found", NULL);
			return;
		}
		c->sess_num = s->num;
	} else if (c->method != M_POST) {
		reject(c, 400, -32000, NULL, "Bad Request: Mcp-Session-Id header is required", NULL);
		return;
	}
}

static int on_headers_complete(http_parser *p)
{
	conn *c = p->data;
	mb_http *h = c->h;
	if (c->url_over)
		return mb_http_bad(c, 414, "request URL above %s bytes", "2048");
	if (p->http_major != 1)
		return mb_http_bad(c, 400, "Bad Request: only HTTP/1.0 and HTTP/1.1 are served%s", NULL);
	c->http10 = p->http_major < 1 || (p->http_major == 1 && p->http_minor == 0);
	c->has_body = (p->flags & F_CHUNKED) || (p->content_length > 0 && p->content_length != ULLONG_MAX);
	c->expect_continue = c->hcount[H_EXPECT] && !c->http10 &&
			     strcasecmp(hval(c, H_EXPECT), "100-continue") == 0;
	size_t plen = strcspn(c->url, "?#");
	if (plen == 4 && memcmp(c->url, "/mcp", 4) == 0)
		c->route = R_MCP;
	else if (plen == 8 && memcmp(c->url, "/healthz", 8) == 0)
		c->route = R_HEALTH;
	else if (plen == 8 && memcmp(c->url, "/metrics", 8) == 0)
		c->route = R_METRICS;
	else if (h->oauth && mb_oauth_is_metadata_path(h->oauth, c->url, plen))
		c->route = R_PRM;
	else
		c->route = R_NOTFOUND;
	char num[32];
	for (int i = 0; i < NHDR; i++) { /* values may end in whitespace */
		char *v = (char *)&c->hv + mb_http_hdr_def[i].off;
		while (c->hlen[i] && (v[c->hlen[i] - 1] == ' ' || v[c->hlen[i] - 1] == '\t'))
			v[--c->hlen[i]] = 0;
	}

	if (c->route == R_HEALTH) {
		if (c->method != M_GET)
			reject(c, 405, -32000, allow_get, "method not allowed on /healthz (use GET)", NULL);
		goto checked;
	}
	for (int i = 0; i < NHDR; i++) {
		if (c->hover[i] && i != H_ACCEPT && i != H_ORIGIN && i != H_HOST && i != H_AUTH && i != H_SESSION &&
		    i != H_MNAME)
			return mb_http_bad(c, 400, "header %s is too long", mb_http_hdr_def[i].name);
		if (c->hcount[i] > 1 && i != H_ACCEPT && i != H_MPARAM)
			return mb_http_bad(c, 400, "duplicate %s header", mb_http_hdr_def[i].name);
	}
	if (!c->hcount[H_HOST])
		return mb_http_bad(c, 400, "missing Host header%s", NULL);
	if (c->hover[H_HOST] || !mb_http_host_allowed(&h->pol, hval(c, H_HOST), c->hlen[H_HOST])) {
		reject(c, 403, -32000, NULL,
		       "Forbidden: Host \"%s\" is not allowed (loopback names and http_allowed_hosts are)",
		       c->hover[H_HOST] ? "(too long)" : hval(c, H_HOST));
		goto checked;
	}
	if (c->hcount[H_ORIGIN] &&
	    (c->hover[H_ORIGIN] || !mb_http_origin_allowed(&h->pol, hval(c, H_ORIGIN), c->hlen[H_ORIGIN]))) {
		reject(c, 403, -32000, NULL,
		       "Forbidden: Origin \"%s\" is not allowed (loopback origins and http_allowed_origins are)",
		       c->hover[H_ORIGIN] ? "(too long)" : hval(c, H_ORIGIN));
		goto checked;
	}
	c->cors = c->hcount[H_ORIGIN] && mb_http_cors_allowed(&h->pol, hval(c, H_ORIGIN), c->hlen[H_ORIGIN]);
	if (c->route == R_NOTFOUND) {
		reject(c, 404, -32000, NULL, "Not Found: the MCP endpoint is /mcp", NULL);
		goto checked;
	}
	if (c->method == M_OPTIONS) {
		c->route = R_OPTIONS;
		goto checked;
	}
	if (c->route == R_PRM) {
		if (c->method != M_GET)
			reject(c, 405, -32000, allow_get, "method not allowed on the protected resource metadata (use GET)",
			       NULL);
		goto checked; /* no token: clients read it to find the authorization server */
	}
	if (authenticate(c, 1) == 0)
		after_auth(c);
checked:
	if (c->has_body && !(p->flags & F_CHUNKED) && p->content_length > h->max_body) {
		if (!c->reject) {
			snprintf(num, sizeof num, "%zu", h->max_body);
			return mb_http_bad(c, 413, "Content Too Large: the body is above http_max_body_bytes=%s", num);
		}
		c->fatal = 1; /* answer the rejection now rather than read a body that large */
		return -1;
	}
	if (c->reject && c->expect_continue) {
		c->fatal = 1; /* the client waits before sending its body: answer now and close */
		return -1;
	}
	if (c->expect_continue) {
		wreq *w = mb_http_wreq_get(h, c);
		if (!w)
			return mb_http_bad(c, 503, "out of memory%s", NULL);
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		memcpy(w->head, cont, sizeof cont - 1);
		w->bufs[0] = uv_buf_init(w->head, sizeof cont - 1);
		mb_http_wreq_send(c, w, 1);
		if (c->state == C_CLOSED)
			return -1;
	}
	return 0;
}

/* ---- request handlers ------------------------------------------------------------------------ */

/* The OAuth counters as Prometheus text, then the host's (which may be NULL); malloc'd or NULL. */
static char *oauth_metrics(const mb_oauth *o, const char *host)
{
	mb_oauth_stats st;
	mb_oauth_get_stats(o, &st);
	size_t hl = host ? strlen(host) : 0, cap = hl + 1200;
	char *t = malloc(cap);
	if (!t)
		return NULL;
	int n = snprintf(t, cap,
			 "# HELP moonbox_oauth_tokens_verified_total OAuth access tokens verified (signature or "
			 "introspection), not counting cache hits.\n# TYPE moonbox_oauth_tokens_verified_total counter\n"
			 "moonbox_oauth_tokens_verified_total %llu\n"
			 "# HELP moonbox_oauth_token_cache_hits_total Requests whose token was found in the validated-token cache.\n"
			 "# TYPE moonbox_oauth_token_cache_hits_total counter\nmoonbox_oauth_token_cache_hits_total %llu\n"
			 "# HELP moonbox_oauth_tokens_refused_total OAuth access tokens refused (401 invalid_token).\n"
			 "# TYPE moonbox_oauth_tokens_refused_total counter\nmoonbox_oauth_tokens_refused_total %llu\n"
			 "# HELP moonbox_oauth_jwks_fetches_total Key sets fetched from the issuer.\n"
			 "# TYPE moonbox_oauth_jwks_fetches_total counter\nmoonbox_oauth_jwks_fetches_total %llu\n"
			 "# HELP moonbox_oauth_jwks_failures_total Key set fetches that failed.\n"
			 "# TYPE moonbox_oauth_jwks_failures_total counter\nmoonbox_oauth_jwks_failures_total %llu\n",
			 (unsigned long long)st.verified, (unsigned long long)st.cache_hits, (unsigned long long)st.refused,
			 (unsigned long long)st.jwks_fetches, (unsigned long long)st.jwks_failures);
	if (n < 0 || (size_t)n >= cap - hl) {
		free(t);
		return NULL;
	}
	if (host)
		memcpy(t + n, host, hl + 1);
	return t;
}

static void handle_metrics(conn *c)
{
	mb_http *h = c->h;
	const char *extra = h->cb.metrics_extra ? h->cb.metrics_extra(h->cb.ud) : NULL;
	char *with_oauth = h->oauth ? oauth_metrics(h->oauth, extra) : NULL;
	if (with_oauth)
		extra = with_oauth;
	size_t len = 0;
	char *text = mb_http_metrics_render(&h->st, extra, &len), m[512];
	free(with_oauth);
	if (!text) {
		mb_http_respond_error(c, 500, -32603, "out of memory rendering /metrics", NULL);
		return;
	}
	if (mb_http_backlog_admit(c, len, m, sizeof m) != 0) {
		free(text);
		mb_http_respond_error(c, 503, -32000, m, NULL);
		return;
	}
	mb_http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, text, len, text);
}

static void handle_options(conn *c)
{
	char extra[512];
	hb b = { extra, 0, sizeof extra - 1 };
	hb_str(&b, c->route == R_OPTIONS && c->cors ? "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\n"
		   "Access-Control-Allow-Headers: Content-Type, Accept, Authorization, Mcp-Session-Id, "
		   "Mcp-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name\r\n"
		   "Access-Control-Max-Age: 86400\r\n" : "");
	hb_str(&b, allow_mcp);
	extra[b.n] = 0;
	mb_http_respond(c, 204, NULL, extra, NULL, 0, NULL);
}

static void handle_delete(conn *c)
{
	mb_http *h = c->h;
	session *s = session_by_num(h, c->sess_num);
	if (!s) {
		mb_http_respond_error(c, 404, -32001, "Session not found", NULL);
		return;
	}
	mb_http_session_end(h, s, END_DELETE); /* ended before the client hears so */
	mb_http_respond(c, 204, NULL, NULL, NULL, 0, NULL);
}

static void handle_get(conn *c)
{
	mb_http *h = c->h;
	session *s = session_by_num(h, c->sess_num);
	if (!s) {
		mb_http_respond_error(c, 404, -32001, "Session not found", NULL);
		return;
	}
	if (c->hcount[H_LASTID]) {
		mb_http_resume(c, s); /* a broken stream (this GET stream, or a POST's) picked up again */
		return;
	}
	if (s->stream) {
		mb_http_respond_error(c, 409, -32000, "Conflict: this session already has an open GET stream", NULL);
		return;
	}
	char head[HEAD_MAX];
	hb b = { head, 0, sizeof head };
	mb_http_sse_head(c, &b, NULL);
	mb_http_stream_open(c, s, 0, &b); /* a new GET stream: its record and priming event */
	mb_http_write_head(c, head, b.n);
	if (c->state == C_CLOSED)
		return;
	c->state = C_STREAM;
	c->ssession = s->num;
	s->stream = c;
	s->last_used = uv_now(h->loop);
	h->st.streams_active++;
}

/* Decodes a header value of the form =?base64?...?= in place (SEP-2243); others are left. */
static void header_unwrap(char *v)
{
	size_t n = strlen(v);
	if (n < 11 || strncasecmp(v, "=?base64?", 9) != 0 || memcmp(v + n - 2, "?=", 2) != 0)
		return;
	size_t out = 0;
	if (sodium_base642bin((unsigned char *)v, n, v + 9, n - 11, NULL, &out, NULL,
			      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    memchr(v, 0, out))
		out = 0; /* not base64 (or holding NUL): an empty value, which the host refuses */
	v[out] = 0;
}

/* Whether a sessionless body is an initialize request (which starts a 2025 session). */
static int is_initialize(conn *c, int *bad)
{
	json_error_t je;
	json_t *j = json_loadb(c->body ? c->body : "", c->blen, JSON_REJECT_DUPLICATES, &je);
	*bad = !j;
	json_t *method = json_is_object(j) ? json_object_get(j, "method") : NULL;
	json_t *id = json_is_object(j) ? json_object_get(j, "id") : NULL;
	int init = json_is_string(method) && strcmp(json_string_value(method), "initialize") == 0 && id &&
		   !json_is_null(id);
	json_decref(j);
	return init;
}

static void handle_post(conn *c)
{
	mb_http *h = c->h;
	session *s = NULL;
	int init = 0, bad = 0;
	if (!c->sess_num && !c->modern) {
		/* no session: initialize starts one; any other request is the 2026-07-28 revision's,
		 * unless the client named a 2025 one */
		init = is_initialize(c, &bad);
		if (!init && c->hcount[H_PROTO]) {
			mb_http_respond_error(c, 400, -32000,
				      "Bad Request: Mcp-Session-Id header is required (only initialize may come without it)",
				      NULL);
			return;
		}
		c->modern = !init;
	}
	if (init) {
		if (h->st.sessions_active >= (uint64_t)h->cfg->http_max_sessions) {
			char m[160];
			snprintf(m, sizeof m, "Service Unavailable: %llu sessions are open (http_max_sessions=%lld); "
				 "retry later", (unsigned long long)h->st.sessions_active,
				 (long long)h->cfg->http_max_sessions);
			mb_http_respond_error(c, 503, -32000, m, "Retry-After: 5\r\n");
			return;
		}
		/* one tenant's share (only where http_tokens or OAuth make tenants): counted only when the
		 * server holds that many sessions at all */
		if ((h->cfg->http_tokens[0] || h->oauth) &&
		    h->st.sessions_active >= (uint64_t)h->cfg->http_max_sessions_per_tenant) {
			uint64_t mine = 0;
			for (session *o = h->sessions; o; o = o->next)
				mine += strcmp(o->tenant, c->tenant) == 0;
			if (mine >= (uint64_t)h->cfg->http_max_sessions_per_tenant) {
				char m[200];
				snprintf(m, sizeof m, "Service Unavailable: %llu sessions of yours are open "
					 "(http_max_sessions_per_tenant=%lld); end one (DELETE) or retry later",
					 (unsigned long long)mine, (long long)h->cfg->http_max_sessions_per_tenant);
				mb_http_respond_error(c, 503, -32000, m, "Retry-After: 5\r\n");
				return;
			}
		}
		s = mb_http_session_new(h, c->tenant);
		if (!s) {
			mb_http_respond_error(c, 503, -32000, "Service Unavailable: out of memory", "Retry-After: 5\r\n");
			return;
		}
	} else if (c->modern) {
		(void)bad; /* a body that is not JSON: the host answers -32700 */
		if (c->hover[H_MNAME]) {
			mb_http_respond_error(c, 400, -32020, "Bad Request: the Mcp-Name header is above 1023 bytes",
					      NULL);
			return;
		}
	} else if (!(s = session_by_num(h, c->sess_num))) {
		mb_http_respond_error(c, 404, -32001, "Session not found", NULL);
		return;
	}
	uint64_t x = ++h->next_exchange;
	uint64_t snum = s ? s->num : MB_HTTP_SESSIONLESS;
	c->xnode.key = x;
	htab_put(&h->exchanges, &c->xnode);
	c->xsession = snum;
	c->xinit = init;
	c->xsse = 0;
	c->xstatus = 0;
	c->state = C_BUSY;
	if (s) {
		s->exchanges++;
		s->last_used = uv_now(h->loop);
	}
	h->st.exchanges_active++;
	if (c->bcap < c->blen + 1) { /* the body is handed over NUL-terminated */
		char *nb = realloc(c->body, c->blen + 1);
		if (!nb) {
			mb_http_exchange_finish(c);
			c->state = C_READING;
			mb_http_respond_error(c, 503, -32000, "Service Unavailable: out of memory", NULL);
			return;
		}
		c->body = nb;
		c->bcap = c->blen + 1;
	}
	c->body[c->blen] = 0;
	mb_http_req req = { 0 };
	req.sessionless = !s;
	if (c->hcount[H_PROTO])
		req.protocol_version = hval(c, H_PROTO);
	if (c->hcount[H_MMETHOD]) {
		header_unwrap((char *)hval(c, H_MMETHOD));
		req.method = hval(c, H_MMETHOD);
	}
	if (c->hcount[H_MNAME]) {
		header_unwrap((char *)hval(c, H_MNAME));
		req.name = hval(c, H_MNAME);
	}
	if (c->hcount[H_MPARAM])
		req.params = hval(c, H_MPARAM); /* decoded by the host: a bad encoding is its error */
	char rights[32];
	if (c->oauth) {
		mb_oauth_rights_text(c->rights, rights, sizeof rights);
		req.rights = rights;
		req.principal = c->osub;
	}
	int r = h->cb.on_message(h->cb.ud, s ? snum : 0, x, c->tenant, c->body, c->blen, &req);
	if (c->state != C_BUSY || c->xnode.key != x || !c->xsession)
		return; /* answered (or the connection closed) during the call */
	if (!r) {
		mb_http_exchange_finish(c);
		mb_http_respond(c, 202, NULL, NULL, NULL, 0, NULL);
		if (init && (s = session_by_num(h, snum)))
			mb_http_session_end(h, s, END_INIT_FAILED);
		mb_http_request_done(c);
	}
}

static void handle_prm(conn *c)
{
	size_t len;
	const char *doc = mb_oauth_metadata(c->h->oauth, &len);
	mb_http_respond(c, 200, "application/json", "Cache-Control: max-age=3600\r\n", doc, len, NULL);
}

static void handle_request(conn *c)
{
	if (c->auth_wait && c->reject) { /* refused for another reason meanwhile (its body's size) */
		mb_oauth_unwait(c->h->oauth, &c->aw);
		c->auth_wait = 0;
	}
	if (c->auth_wait) {
		c->state = C_AUTH; /* on_oauth_ready goes on; pipelined input waits */
		return;
	}
	if (c->reject) {
		mb_http_answer_reject(c);
	} else {
		switch (c->route) {
		case R_HEALTH:
			mb_http_respond(c, 200, "text/plain; charset=utf-8", NULL, "ok\n", 3, NULL);
			break;
		case R_METRICS:
			handle_metrics(c);
			break;
		case R_OPTIONS:
			handle_options(c);
			break;
		case R_PRM:
			handle_prm(c);
			break;
		default:
			if (c->method == M_POST)
				handle_post(c);
			else if (c->method == M_GET)
				handle_get(c);
			else
				handle_delete(c);
			if (c->state != C_READING)
				return; /* waiting for the host or streaming, or already answered */
		}
	}
	mb_http_request_done(c);
}

/* The parser's last callback (the others, which collect the request, are in http_conn.c). */
static int on_message_complete(http_parser *p)
{
	conn *c = p->data;
	c->keep_alive = http_should_keep_alive(p) && !p->upgrade && !c->h->closing;
	handle_request(c);
	http_parser_pause(p, 1);
	return 0;
}

/* ---- the sweep ------------------------------------------------------------------------------- */

static void on_sweep(uv_timer_t *t)
{
	mb_http *h = t->data;
	uint64_t now = uv_now(h->loop);
	int beat = now >= h->next_heartbeat;
	if (beat)
		h->next_heartbeat = now + HEARTBEAT_MS;
	for (conn *c = h->conns, *next; c; c = next) {
		next = c->next;
		size_t q = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
		if (q != c->wq_last || !q) {
			c->wq_last = q;
			c->wq_since = now;
		} else if (now - c->wq_since >= 3 * h->read_timeout) {
			mb_log(MB_LOG_NOTICE, "http: a client has not read its responses for %llu ms; closing it",
			       (unsigned long long)(now - c->wq_since));
			mb_http_conn_close(c); /* output queued and not moving: the client stopped reading */
			continue;
		}
		switch (c->state) {
		case C_IDLE:
			if (now >= c->deadline && c->writes == 0)
				mb_http_conn_close(c); /* idle keep-alive connection */
			break;
		case C_READING:
			if (now >= c->deadline) {
				char num[32];
				snprintf(num, sizeof num, "%llu", (unsigned long long)h->read_timeout);
				h->st.read_timeouts++;
				c->keep_alive = 0;
				char m[128];
				snprintf(m, sizeof m, "Request Timeout: not read within http_read_timeout_ms=%s", num);
				mb_http_respond_error(c, 408, -32000, m, NULL);
				mb_http_request_done(c);
			}
			break;
		case C_DRAIN:
			if (now >= c->deadline)
				mb_http_conn_close(c);
			break;
		case C_STREAM:
		case C_BUSY:
			if (beat && (c->state == C_STREAM || c->xsse))
				mb_http_sse_write(c, NULL, 0, NULL, 0, 0);
			break;
		default:
			break;
		}
	}
	if (now >= h->next_session_sweep) {
		h->next_session_sweep = now + h->tick * 4;
		for (session *s = h->sessions, *next; s; s = next) {
			next = s->next;
			if (!s->stream && !s->exchanges && !s->resumed && now - s->last_used >= h->idle_ms)
				mb_http_session_end(h, s, END_EXPIRED); /* parked exchanges too: bounded by this */
			else if (s->rp.first)
				mb_http_replay_sweep(h, s, now);
		}
	}
}

/* ---- public API ------------------------------------------------------------------------------ */

static void on_handle_closed(uv_handle_t *hd)
{
	mb_http *h = hd->data;
	h->handles--;
	mb_http_maybe_free(h);
}

/* Creates the listening socket (bound, listening) and records the address it got.
 * @returns the fd, or a negative errno with err set */
static int open_listener(mb_http *h, const struct sockaddr_storage *ss, char *err, size_t errlen)
{
	const char *spec = h->cfg->http_listen;
	socklen_t sl = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "http_listen \"%s\": socket: %s", spec, strerror(e));
		return -e;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (const struct sockaddr *)ss, sl) != 0 || listen(fd, 511) != 0) {
		int e = errno;
		snprintf(err, errlen, "cannot listen on %s (http_listen): %s", spec, strerror(e));
		close(fd);
		return -e;
	}
	struct sockaddr_storage got;
	socklen_t gl = sizeof got;
	char ip[INET6_ADDRSTRLEN] = "?";
	if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0) {
		if (got.ss_family == AF_INET) {
			struct sockaddr_in *a = (struct sockaddr_in *)&got;
			inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
			h->port = ntohs(a->sin_port);
			snprintf(h->addr, sizeof h->addr, "%s:%d", ip, h->port);
		} else {
			struct sockaddr_in6 *a = (struct sockaddr_in6 *)&got;
			inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
			h->port = ntohs(a->sin6_port);
			snprintf(h->addr, sizeof h->addr, "[%s]:%d", ip, h->port);
		}
	}
	return fd;
}

/* One backlog counter per tenant: slot 0 is "default" (no tokens), else one per distinct tenant
 * of http_tokens, which each token records (tokens of one tenant share it). */
static int tenants_init(mb_http *h)
{
	mb_http_policy *p = &h->pol;
	size_t own = h->oauth ? (size_t)h->cfg->oauth_backlog_tenants : 0;
	h->tenants = calloc((p->ntokens ? p->ntokens : 1) + 1 + own, sizeof *h->tenants);
	if (!h->tenants)
		return -ENOMEM;
	if (!p->ntokens) {
		snprintf(h->tenants[0].name, sizeof h->tenants[0].name, "default");
		h->ntenants = 1;
	}
	for (size_t i = 0; i < p->ntokens; i++) {
		size_t k = 0;
		while (k < h->ntenants && strcmp(h->tenants[k].name, p->tokens[i].tenant) != 0)
			k++;
		if (k == h->ntenants)
			snprintf(h->tenants[h->ntenants++].name, sizeof h->tenants[0].name, "%s", p->tokens[i].tenant);
		p->tokens[i].slot = (uint32_t)k;
	}
	/* OAuth tenants are not known ahead: each takes a counter of its own while it has a request
	 * or an unread answer, and they share this one when all are taken (docs/auth.md) */
	h->oauth_slot = (uint32_t)h->ntenants;
	snprintf(h->tenants[h->ntenants++].name, sizeof h->tenants[0].name, "(OAuth tenants)");
	h->oauth_first = (uint32_t)h->ntenants;
	h->ntenants += own;
	return 0;
}

mb_http *mb_http_start(uv_loop_t *loop, const mb_config *cfg, const mb_http_callbacks *cb,
		       char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	int loopback = 0;
	char bound[INET6_ADDRSTRLEN + 2] = "";
	if (!cb || !cb->on_message) {
		snprintf(err, errlen, "mb_http_start: on_message callback is required");
		return NULL;
	}
	if (mb_http_parse_listen(cfg->http_listen, &ss, &loopback, err, errlen) != 0)
		return NULL;
	if (!cfg->http_tokens[0] && !cfg->oauth_issuer[0] && !loopback && !cfg->http_trust_proxy) {
		snprintf(err, errlen, "refusing to listen on %s without http_tokens or oauth_issuer; set http_trust_proxy=1 "
			 "if an authenticating proxy is in front", cfg->http_listen);
		return NULL;
	}
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		if (a->sin_addr.s_addr != htonl(INADDR_ANY))
			inet_ntop(AF_INET, &a->sin_addr, bound, sizeof bound);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		if (!IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr)) {
			bound[0] = '[';
			inet_ntop(AF_INET6, &a->sin6_addr, bound + 1, sizeof bound - 2);
			strcat(bound, "]");
		}
	}
	mb_http *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, errlen, "out of memory starting the HTTP transport");
		return NULL;
	}
	h->loop = loop;
	h->cfg = cfg;
	h->cb = *cb;
	h->max_body = (size_t)(cfg->http_max_body_bytes > 0 ? cfg->http_max_body_bytes : cfg->max_message_bytes);
	h->max_header = (size_t)cfg->http_max_header_bytes;
	h->read_timeout = (uint64_t)cfg->http_read_timeout_ms;
	h->idle_ms = (uint64_t)cfg->http_session_idle_ms;
	h->replay_max = (size_t)cfg->http_replay_bytes;
	h->replay_total_max = (size_t)cfg->http_replay_total_bytes;
	h->replay_keep = h->idle_ms < REPLAY_KEEP_MS ? h->idle_ms : REPLAY_KEEP_MS;
	uint64_t m = h->read_timeout < h->idle_ms ? h->read_timeout : h->idle_ms;
	h->tick = m / 8 < 10 ? 10 : m / 8 > 1000 ? 1000 : m / 8;
	if (mb_http_policy_init(&h->pol, cfg, bound, err, errlen) != 0) {
		free(h);
		return NULL;
	}
	h->oauth = mb_oauth_new(loop, cfg, err, errlen);
	if (!h->oauth && err[0]) {
		mb_http_policy_free(&h->pol);
		free(h);
		return NULL;
	}
	h->backlog_max = (size_t)cfg->max_backlog_bytes;
	h->backlog_tenant_max = (size_t)cfg->max_backlog_tenant_bytes;
	if (tenants_init(h) != 0 || htab_init(&h->by_num, 64) || htab_init(&h->by_id, 64) ||
	    htab_init(&h->exchanges, 64) || htab_init(&h->parked, 64)) {
		snprintf(err, errlen, "out of memory starting the HTTP transport");
		goto fail;
	}
	int fd = open_listener(h, &ss, err, errlen);
	if (fd < 0)
		goto fail;
	int rc = uv_tcp_init(loop, &h->listener);
	if (rc) {
		close(fd);
		snprintf(err, errlen, "http_listen \"%s\": %s", cfg->http_listen, uv_strerror(rc));
		goto fail;
	}
	h->listener.data = h;
	if ((rc = uv_tcp_open(&h->listener, fd)) != 0)
		close(fd);
	if (rc || (rc = uv_listen((uv_stream_t *)&h->listener, 511, mb_http_on_connection)) != 0) {
		snprintf(err, errlen, "cannot listen on %s (http_listen): %s", cfg->http_listen, uv_strerror(rc));
		h->handles = 1; /* h is freed when the listener is closed (the caller's loop runs it) */
		h->closing = 1;
		uv_close((uv_handle_t *)&h->listener, on_handle_closed);
		return NULL;
	}
	h->handles = 3;
	uv_timer_init(loop, &h->sweeper);
	h->sweeper.data = h;
	uv_timer_start(&h->sweeper, on_sweep, h->tick, h->tick);
	uv_idle_init(loop, &h->deferred);
	h->deferred.data = h;
	h->next_heartbeat = uv_now(loop) + HEARTBEAT_MS;
	http_parser_settings_init(&h->settings);
	h->settings.on_message_begin = mb_http_on_message_begin;
	h->settings.on_url = mb_http_on_url;
	h->settings.on_header_field = mb_http_on_header_field;
	h->settings.on_header_value = mb_http_on_header_value;
	h->settings.on_headers_complete = on_headers_complete;
	h->settings.on_body = mb_http_on_body;
	h->settings.on_message_complete = on_message_complete;
	mb_log(MB_LOG_INFO, "serving MCP over HTTP on http://%s/mcp (%s)", h->addr,
	       h->oauth ? (h->pol.ntokens ? "OAuth access tokens or static bearer tokens required"
					  : "OAuth access tokens required")
	       : h->pol.ntokens ? "bearer tokens required" : loopback ? "no authentication: loopback only"
								   : "no authentication: http_trust_proxy=1");
	if (h->oauth) {
		mb_log(MB_LOG_INFO, "OAuth: tokens of %s for %s (metadata: %s)", cfg->oauth_issuer, cfg->oauth_resource,
		       mb_oauth_metadata_url(h->oauth));
		mb_oauth_start(h->oauth); /* the keys are fetched now, not at the first request */
	}
	return h;
fail:
	mb_oauth_close(h->oauth);
	free(h->tenants);
	free(h->by_num.b);
	free(h->by_id.b);
	free(h->exchanges.b);
	free(h->parked.b);
	mb_http_policy_free(&h->pol);
	free(h);
	return NULL;
}

/* A message for conn c (NULL: none, it is only kept for a resume) that the backlog cannot take
 * is refused: freed, and when it was the final one of c's exchange and too short to be replaced
 * by an error, c is closed so the exchange does not wait for ever. */
static int refuse_over_backlog(conn *c, int final, char *data, size_t len, char *err, size_t errlen)
{
	char m[512];
	if (!c || mb_http_backlog_admit(c, len, m, sizeof m) == 0)
		return 0;
	mb_log(MB_LOG_NOTICE, "http: %s", m);
	if (err && errlen)
		snprintf(err, errlen, "%s", m);
	free(data);
	if (final && len <= MB_HTTP_BACKLOG_SHORT)
		mb_http_conn_close(c);
	return -ENOBUFS;
}

int mb_http_send(mb_http *h, uint64_t session_num, uint64_t exchange, int final, int status,
		 char *data, size_t len, char *err, size_t errlen)
{
	if (!h || h->closing || !data) {
		free(data);
		return 0;
	}
	while (len && (data[len - 1] == '\n' || data[len - 1] == '\r'))
		len--;
	if (exchange) {
		hnode *x = htab_get(&h->exchanges, exchange);
		conn *c = x ? container_of(x, conn, xnode) : NULL;
		rstream *r = c ? NULL : mb_http_replay_parked(h, exchange);
		if (r && (!session_num || r->s->num == session_num)) {
			if (refuse_over_backlog(r->c, final, data, len, err, errlen))
				return -ENOBUFS;
			mb_http_parked_send(h, r, final, data, len); /* its POST connection is gone */
			return 0;
		}
		if (!c || c->state != C_BUSY || (session_num && c->xsession != session_num)) {
			h->st.messages_dropped++;
			free(data);
			return 0;
		}
		if (refuse_over_backlog(c, final, data, len, err, errlen))
			return -ENOBUFS;
		if (final)
			c->xstatus = status;
		mb_http_exchange_send(c, final, data, len);
		return 0;
	}
	if (session_num) {
		session *s = session_by_num(h, session_num);
		if (!s) {
			h->st.messages_dropped++;
			free(data);
			return 0;
		}
		if (refuse_over_backlog(mb_http_session_writer(s), 0, data, len, err, errlen))
			return -ENOBUFS;
		mb_http_session_push(h, s, data, len); /* its GET stream, or kept for its resume */
		return 0;
	}
	/* broadcast: a copy for every session's GET stream but the last, which takes data; a
	 * stream whose client is behind on reading gets none */
	size_t left = 0;
	for (session *s = h->sessions; s; s = s->next)
		left += (size_t)mb_http_session_listens(s);
	if (!left)
		h->st.messages_dropped++;
	for (session *s = h->sessions, *next; s && left; s = next) {
		next = s->next;
		if (!mb_http_session_listens(s))
			continue;
		conn *w = mb_http_session_writer(s);
		if (w && mb_http_backlog_admit(w, len, NULL, 0) != 0) {
			left--;
			continue;
		}
		char *copy = --left ? malloc(len ? len : 1) : data;
		if (!copy) {
			h->st.messages_dropped++;
			continue;
		}
		if (copy != data)
			memcpy(copy, data, len);
		else
			data = NULL;
		mb_http_session_push(h, s, copy, len);
	}
	free(data);
	return 0;
}

void mb_http_stats(mb_http *h, mb_http_stats_t *out)
{
	*out = h->st;
}

int mb_http_address(mb_http *h, char *buf, size_t len)
{
	if (!h)
		return -1;
	if (buf && len)
		snprintf(buf, len, "%s", h->addr);
	return h->port;
}

void mb_http_close(mb_http *h)
{
	if (!h || h->closing)
		return;
	h->closing = 1;
	uv_close((uv_handle_t *)&h->listener, on_handle_closed);
	uv_close((uv_handle_t *)&h->sweeper, on_handle_closed);
	uv_close((uv_handle_t *)&h->deferred, on_handle_closed);
	while (h->conns)
		mb_http_conn_close(h->conns);
	while (h->nended) {
		struct mb_http_later e = h->ended[--h->nended];
		if (e.kind == END_LATER && h->cb.on_session_end)
			h->cb.on_session_end(h->cb.ud, e.v);
	}
	while (h->sessions)
		mb_http_session_end(h, h->sessions, END_SHUTDOWN);
	mb_oauth_close(h->oauth); /* after the connections: no waiter is left */
	h->oauth = NULL;
}
