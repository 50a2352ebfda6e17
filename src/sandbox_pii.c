/* sandbox_pii.c - personal data inside the sandbox: pii.scan, tokenize_pii, detokenize_pii, and
 * the automatic policy that tokenizes what an execution returns toward the model.
 *
 * The detector and the token key are process-wide and read-only once set (mb_sandbox_pii_set,
 * before any worker starts); each worker thread keeps its own match scratch. Every value an
 * execution replaces by a token is recorded in the execution's found set (C memory, bounded by
 * MAX_FOUND values and MAX_FOUND_BYTES bytes): detokenize_pii looks there first, so a token minted
 * earlier in the same execution restores without a round trip, and at the end the set goes to
 * the host in the result (mb_exec_result.pii_found) to be stored in the tenant's vault. Tokens it
 * does not know are restored by the host (host call "pii_restore"), when pii_restore allows. The
 * same set restores the tokens in an upstream call's arguments (mb_sandbox_pii_restore_json,
 * sandbox_upstream.c) before they leave: the vault does not know this execution's tokens yet,
 * and the host restores the rest from it.
 *
 * Policy: with pii_policy on, mb_sandbox_pii_values replaces strings (values and keys, walked
 * with raw access, each table once) in the returned values before they are encoded, and
 * mb_sandbox_pii_finish replaces the captured output, the error text and the traceback; a
 * notification's table is walked as a copy (the code still holds the original). The
 * sanitizer runs in C without polling the budget, so every call is bounded by
 * regex_max_subject_bytes and the walk polls the budget between strings.
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "pii.h"
#include "sandbox_int.h"

#define MAX_FOUND 100000
#define MAX_FOUND_BYTES ((size_t)16 << 20)

static const mb_pii_detector *detector;              /* set once before threads start */
static unsigned char token_key[MB_PII_KEY_BYTES];
static mb_pii_mint_fn mint;                          /* a worker process: the server mints */
static _Thread_local mb_pii_scratch *scratch;

void mb_sandbox_pii_set(const mb_pii_detector *d, const unsigned char *key)
{
	detector = d;
	if (key)
		memcpy(token_key, key, sizeof token_key);
}

void mb_sandbox_pii_set_mint(mb_pii_mint_fn fn)
{
	mint = fn;
}

int mb_sandbox_pii_token(const char *type, const char *value, size_t len, int hexchars,
			 char out[MB_PII_TOKEN_MAX])
{
	return mb_pii_token(token_key, type, value, len, hexchars, out);
}

void mb_sandbox_pii_thread_exit(void)
{
	mb_pii_scratch_free(scratch);
	scratch = NULL;
}

static mb_pii_scratch *thread_scratch(void)
{
	if (!scratch && detector)
		scratch = mb_pii_scratch_new(detector);
	return scratch;
}

/* ---- the found set: token -> (type, value), open addressing ------------------------------- */

typedef struct mb_pii_found_set {
	mb_pii_found *items;
	size_t n, cap;
	size_t *slots;   /* index + 1, 0 = empty */
	size_t nslots;
	size_t bytes;
	size_t dropped;
} found_set;

static size_t hash_token(const char *t)
{
	size_t h = 1469598103934665603ull;
	for (; *t; t++)
		h = (h ^ (unsigned char)*t) * 1099511628211ull;
	return h;
}

static const mb_pii_found *set_find(const found_set *s, const char *token, size_t len)
{
	if (!s || !s->nslots)
		return NULL;
	char t[MB_PII_TOKEN_MAX];
	if (len >= sizeof t)
		return NULL;
	memcpy(t, token, len);
	t[len] = 0;
	for (size_t i = hash_token(t) & (s->nslots - 1);; i = (i + 1) & (s->nslots - 1)) {
		if (!s->slots[i])
			return NULL;
		const mb_pii_found *f = &s->items[s->slots[i] - 1];
		if (strcmp(f->token, t) == 0)
			return f;
	}
}

static void set_add(mb_sandbox_ctx *c, const mb_pii_found *f)
{
	found_set *s = c->pii_found;
	if (!s && !(s = c->pii_found = calloc(1, sizeof *s)))
		return;
	if (set_find(s, f->token, strlen(f->token)))
		return;
	if (s->n >= MAX_FOUND || s->bytes + f->value_len > MAX_FOUND_BYTES) {
		s->dropped++;
		return;
	}
	if ((s->n + 1) * 2 > s->nslots) {
		size_t ns = s->nslots ? s->nslots * 2 : 64;
		size_t *slots = calloc(ns, sizeof *slots);
		if (!slots)
			return;
		for (size_t k = 0; k < s->n; k++) {
			size_t i = hash_token(s->items[k].token) & (ns - 1);
			while (slots[i])
				i = (i + 1) & (ns - 1);
			slots[i] = k + 1;
		}
		free(s->slots);
		s->slots = slots;
		s->nslots = ns;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		mb_pii_found *items = realloc(s->items, cap * sizeof *items);
		if (!items)
			return;
		s->items = items;
		s->cap = cap;
	}
	mb_pii_found *d = &s->items[s->n];
	memset(d, 0, sizeof *d);
	memcpy(d->token, f->token, sizeof d->token);
	d->type = f->type;
	d->value = malloc(f->value_len + 1);
	if (!d->value)
		return;
	memcpy(d->value, f->value, f->value_len);
	d->value[f->value_len] = 0;
	d->value_len = f->value_len;
	d->count = f->count;
	size_t i = hash_token(d->token) & (s->nslots - 1);
	while (s->slots[i])
		i = (i + 1) & (s->nslots - 1);
	s->slots[i] = ++s->n;
	s->bytes += f->value_len;
}

void mb_sandbox_pii_free(mb_sandbox_ctx *c)
{
	found_set *s = c->pii_found;
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->items[i].value);
	free(s->items);
	free(s->slots);
	free(s);
	c->pii_found = NULL;
}

/* ---- minting ------------------------------------------------------------------------------ */

/* Asks the tenant's vault (host call "pii_token", lua/mcp/pii.lua) which token value gets,
 * starting from the default in token: the same one when it is free or already the value's, a
 * longer one when it stands for another value. token is left as it is when the answer is not a
 * token of this type or the call fails (then the host's rewrite at the end applies). */
static void vault_token(mb_sandbox_ctx *c, const char *type, const char *value, size_t len,
			char token[MB_PII_TOKEN_MAX])
{
	if (!c->req || !c->req->host_call)
		return;
	mb_json_field f[] = {
		{ .key = "type", .type = MB_JF_STRING, .s = type, .n = strlen(type) },
		{ .key = "value", .type = MB_JF_STRING, .s = value, .n = len },
		{ .key = "token", .type = MB_JF_STRING, .s = token, .n = strlen(token) },
	};
	size_t alen = 0, rlen = 0;
	char *args = mb_json_object(f, 3, &alen), *reply = NULL;
	if (!args)
		return;
	int rc = c->req->host_call(c->req->host_ud, "pii_token", args, alen, &reply, &rlen);
	free(args);
	if (rc == 0 && reply && rlen >= 2 && rlen - 2 < MB_PII_TOKEN_MAX && reply[0] == '"' &&
	    reply[rlen - 1] == '"' && mb_pii_token_check(reply + 1, rlen - 2, type) == rlen - 2) {
		memcpy(token, reply + 1, rlen - 2);
		token[rlen - 2] = 0;
	}
	free(reply);
}

typedef struct {
	mb_sandbox_ctx *c;
	struct mb_sandbox_seen *call; /* the tokens this sanitize call handed out (threads) */
} mint_ud;

/* The mint callback while the execution holds tokens from outside (or in a worker process,
 * where the server computes tokens): a default token that the code was also given is checked
 * with the vault first, so one token never stands for two values in the answer. */
static int sb_mint(void *ud, const char *type, const char *value, size_t len,
		   char token[MB_PII_TOKEN_MAX], char *err, size_t errlen)
{
	mint_ud *m = ud;
	if (mint && mint(NULL, type, value, len, token, err, errlen) != 0)
		return -1;
	if (mb_sandbox_seen_has(m->c->pii_seen, token, 1)) {
		const mb_pii_found *f = set_find(m->c->pii_found, token, strlen(token));
		if (!f || f->value_len != len || memcmp(f->value, value, len) != 0)
			vault_token(m->c, type, value, len, token);
	}
	if (mint)
		return 0;
	/* a worker thread has the key: a token this call gave another value gets longer, as
	 * mb_pii_sanitize does without a callback */
	for (int hx = MB_PII_HEX_MIN + 4; mb_sandbox_seen_has(m->call, token, 0); hx += 4) {
		if (hx > MB_PII_HEX_MAX) {
			snprintf(err, errlen, "pii: token collision beyond %d hex digits for type %s",
				 MB_PII_HEX_MAX, type);
			return -1;
		}
		if (mb_pii_token(token_key, type, value, len, hx, token) != 0) {
			snprintf(err, errlen, "pii: cannot make a token");
			return -1;
		}
	}
	mb_sandbox_seen_add(&m->call, token, strlen(token));
	return 0;
}

/* ---- sanitizing C text -------------------------------------------------------------------- */

/* Sanitizes s into a malloc'd result, recording what it replaced. Returns 0, or -1 with err. */
static int sanitize(mb_sandbox_ctx *c, const char *s, size_t len, mb_pii_result *res, char *err,
		    size_t errlen)
{
	memset(res, 0, sizeof *res);
	if (!detector) {
		snprintf(err, errlen, "personal-data detection is not available here");
		return -1;
	}
	size_t max = (size_t)c->cfg->regex_max_subject_bytes;
	if (len > max) {
		snprintf(err, errlen, "text of %zu bytes is longer than regex_max_subject_bytes=%zu",
			 len, max);
		return -1;
	}
	mint_ud m = { c, NULL };
	int wrap = mint || c->pii_seen;
	int rc = mb_pii_sanitize(detector, token_key, s, len, MB_PII_ALL, wrap ? sb_mint : NULL, &m,
				 thread_scratch(), res, err, errlen);
	mb_sandbox_seen_free(&m.call);
	if (rc != 0)
		return -1;
	for (size_t i = 0; i < res->nfound; i++)
		set_add(c, &res->found[i]);
	return 0;
}

/* The policy's sanitize: a text longer than regex_max_subject_bytes is done in pieces cut at a
 * line end (else a space or punctuation no detected value contains) near the limit, so a long
 * result or error is tokenized, not refused. Only a text with none of those in the last 64 KiB
 * before the limit is cut blindly, and a value could then be split. Polls the budget
 * between pieces. res gets the text and the total (its found list stays empty: the values are
 * in the execution's found set). */
static int sanitize_chunked(mb_sandbox_ctx *c, const char *s, size_t len, mb_pii_result *res,
			    char *err, size_t errlen)
{
	size_t max = (size_t)c->cfg->regex_max_subject_bytes;
	if (len <= max)
		return sanitize(c, s, len, res, err, errlen);
	memset(res, 0, sizeof *res);
	char *out = NULL;
	size_t olen = 0, ocap = 0, total = 0, pos = 0;
	while (pos < len) {
		size_t n = len - pos;
		if (n > max) {
			/* cut after a line end, else after a byte no detected value contains */
			size_t lo = max > 65536 ? max - 65536 : max / 2, k;
			for (k = max; k > lo && s[pos + k - 1] != '\n'; k--)
				;
			if (k == lo)
				for (k = max; k > lo && !strchr(" \t,;\"'<>()[]{}|", s[pos + k - 1]); k--)
					;
			n = k > lo ? k : max;
		}
		mb_pii_result r;
		if (sanitize(c, s + pos, n, &r, err, errlen) != 0) {
			free(out);
			return -1;
		}
		if (olen + r.len + 1 > ocap) {
			size_t cap = ocap ? ocap * 2 : len + 1;
			while (cap < olen + r.len + 1)
				cap *= 2;
			char *no = realloc(out, cap);
			if (!no) {
				mb_pii_result_free(&r);
				free(out);
				snprintf(err, errlen, "out of memory");
				return -1;
			}
			out = no;
			ocap = cap;
		}
		memcpy(out + olen, r.text, r.len);
		olen += r.len;
		out[olen] = 0;
		total += r.total;
		mb_pii_result_free(&r);
		pos += n;
		if (c->b && mb_budget_check(c->b) != MB_STOP_NONE) {
			free(out);
			snprintf(err, errlen, "stopped by a limit");
			return -1;
		}
	}
	res->text = out;
	res->len = olen;
	res->total = total;
	return 0;
}

/* Replaces a malloc'd C string by its sanitized form (policy on output and error texts). */
static void sanitize_owned(mb_sandbox_ctx *c, char **s, size_t *len)
{
	if (!*s || !**s)
		return;
	size_t n = len ? *len : strlen(*s);
	mb_pii_result r;
	char err[MB_ERR_MAX];
	if (sanitize_chunked(c, *s, n, &r, err, sizeof err) != 0) {
		/* cannot scan it (a match limit, memory): withhold it rather than leak it */
		free(*s);
		size_t m = strlen(err) + 64;
		*s = malloc(m);
		if (*s)
			snprintf(*s, m, "[withheld: personal-data scan failed: %s]", err);
		if (len)
			*len = *s ? strlen(*s) : 0;
		return;
	}
	if (r.total > 0) {
		free(*s);
		*s = r.text;
		r.text = NULL;
		if (len)
			*len = r.len;
	}
	mb_pii_result_free(&r);
}

/* ---- Lua functions ------------------------------------------------------------------------ */

typedef struct {
	mb_pii_result *res;
	int with_map;
} push_args;

/* Runs under lua_pcall: pushes the sanitized text (and the token -> value map). */
static int push_result(lua_State *L)
{
	push_args *a = lua_touserdata(L, 1);
	lua_pushlstring(L, a->res->text, a->res->len);
	if (!a->with_map)
		return 1;
	lua_createtable(L, 0, (int)a->res->nfound);
	for (size_t i = 0; i < a->res->nfound; i++) {
		lua_pushlstring(L, a->res->found[i].value, a->res->found[i].value_len);
		lua_setfield(L, -2, a->res->found[i].token);
	}
	return 2;
}

/* Sanitizes the string at idx and pushes the result (and the map); raises on failure. */
static int push_sanitized(lua_State *L, int idx, int with_map, const char *fname)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	size_t len;
	const char *s = lua_tolstring(L, idx, &len);
	mb_pii_result r;
	char err[MB_ERR_MAX];
	/* explicit calls (with the map) are bounded; the policy takes any length, in pieces */
	int rc = with_map ? sanitize(c, s, len, &r, err, sizeof err)
			  : sanitize_chunked(c, s, len, &r, err, sizeof err);
	if (rc != 0)
		return luaL_error(L, "%s: %s", fname, err);
	push_args a = { &r, with_map };
	lua_pushcfunction(L, push_result);
	lua_pushlightuserdata(L, &a);
	int status = lua_pcall(L, 1, with_map ? 2 : 1, 0);
	mb_pii_result_free(&r);
	if (status != LUA_OK) {
		mb_budget_poll(L);
		return lua_error(L);
	}
	return with_map ? 2 : 1;
}

/* tokenize_pii(text) -> sanitized text, {token = value, ...} */
static int sb_tokenize(lua_State *L)
{
	luaL_checkstring(L, 1);
	return push_sanitized(L, 1, 1, "tokenize_pii");
}

typedef struct {
	mb_pii_span *spans;
	size_t n;
	const mb_pii_detector *d;
} spans_args;

static int push_spans(lua_State *L)
{
	spans_args *a = lua_touserdata(L, 1);
	lua_createtable(L, (int)a->n, 0);
	for (size_t i = 0; i < a->n; i++) {
		lua_createtable(L, 0, 3);
		lua_pushstring(L, mb_pii_type_name(a->d, a->spans[i].type));
		lua_setfield(L, -2, "type");
		lua_pushinteger(L, (lua_Integer)a->spans[i].start + 1);
		lua_setfield(L, -2, "start");
		lua_pushinteger(L, (lua_Integer)a->spans[i].stop);
		lua_setfield(L, -2, "stop");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	mb_json_mark_array(L, -1);
	return 1;
}

/* pii.scan(text) -> array of {type, start, stop} (1-based, inclusive stop) */
static int sb_scan(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	if (!detector)
		return luaL_error(L, "pii.scan: personal-data detection is not available here");
	if (len > (size_t)c->cfg->regex_max_subject_bytes)
		return luaL_error(L, "pii.scan: text of %d bytes is longer than regex_max_subject_bytes=%d",
				  (int)len, (int)c->cfg->regex_max_subject_bytes);
	spans_args a = { NULL, 0, detector };
	char err[MB_ERR_MAX];
	if (mb_pii_scan(detector, s, len, MB_PII_ALL, thread_scratch(), &a.spans, &a.n, err, sizeof err) != 0)
		return luaL_error(L, "pii.scan: %s", err);
	lua_pushcfunction(L, push_spans);
	lua_pushlightuserdata(L, &a);
	int status = lua_pcall(L, 1, 1, 0);
	free(a.spans);
	if (status != LUA_OK) {
		mb_budget_poll(L);
		return lua_error(L);
	}
	return 1;
}

/* detokenize_pii(text) -> text with the tokens it may restore replaced by their values */
static int sb_detokenize(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	if (!c->cfg->pii_restore)
		return luaL_error(L, "detokenize_pii: restoring personal data is disabled by "
				  "configuration (pii_restore=0)");
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	size_t pos = 0, done = 0, tlen;
	int unknown = 0;
	while (mb_pii_token_next(s, len, &pos, &tlen)) {
		const mb_pii_found *f = set_find(c->pii_found, s + pos, tlen);
		luaL_addlstring(&b, s + done, pos - done);
		if (f) {
			luaL_addlstring(&b, f->value, f->value_len);
		} else {
			luaL_addlstring(&b, s + pos, tlen);
			unknown = 1;
		}
		pos += tlen;
		done = pos;
		mb_budget_poll(L);
	}
	luaL_addlstring(&b, s + done, len - done);
	luaL_pushresult(&b);
	if (!unknown)
		return 1;
	/* the rest are the tenant's vault's to restore */
	lua_createtable(L, 0, 1);
	lua_insert(L, -2);
	lua_setfield(L, -2, "text");
	mb_sandbox_host_call(L, "pii_restore");
	if (lua_type(L, -1) == LUA_TTABLE)
		lua_getfield(L, -1, "text");
	return 1;
}

/* ---- upstream arguments -------------------------------------------------------------------- */

static int put(char **buf, size_t *n, size_t *cap, const char *s, size_t len)
{
	if (*n + len + 1 > *cap) {
		size_t nc = *cap ? *cap : 256;
		while (nc < *n + len + 1)
			nc *= 2;
		char *p = realloc(*buf, nc);
		if (!p)
			return -1;
		*buf = p;
		*cap = nc;
	}
	memcpy(*buf + *n, s, len);
	*n += len;
	(*buf)[*n] = 0;
	return 0;
}

int mb_sandbox_pii_restore_json(mb_sandbox_ctx *c, const char *json, size_t len, size_t limit,
				char **out, size_t *outlen)
{
	*out = NULL;
	*outlen = 0;
	/* the same rule as the host's restore (lua/mcp/upstream.lua): values only where the policy
	 * makes tokens and values may be revealed at all */
	if (!c || !c->pii_found || !c->cfg->pii_policy || !c->cfg->pii_restore || !json)
		return 0;
	char *buf = NULL;
	size_t n = 0, cap = 0, pos = 0, done = 0, tlen;
	while (mb_pii_token_next(json, len, &pos, &tlen)) {
		/* JSON text has "[" followed by a capital letter only inside strings: every token
		 * found is (part of) a string, and its value goes in escaped as a string's content */
		const mb_pii_found *f = set_find(c->pii_found, json + pos, tlen);
		if (f) {
			size_t ql = 0;
			char *q = mb_json_quote(f->value, f->value_len, &ql);
			int bad = !q || ql < 2 || put(&buf, &n, &cap, json + done, pos - done) != 0 ||
				  put(&buf, &n, &cap, q + 1, ql - 2) != 0;
			free(q);
			if (bad) {
				free(buf);
				return -1;
			}
			done = pos + tlen;
			if (n > limit) {
				free(buf);
				return 1;
			}
		}
		pos += tlen;
	}
	if (!buf)
		return 0;
	if (put(&buf, &n, &cap, json + done, len - done) != 0) {
		free(buf);
		return -1;
	}
	if (n > limit) {
		free(buf);
		return 1;
	}
	*out = buf;
	*outlen = n;
	return 0;
}

/* ---- the policy ----------------------------------------------------------------------------- */

static const char walked_key = 0;

static void replace_number(lua_State *L, int idx);

/* Replaces the string at idx (absolute) by its sanitized form when that differs. */
static void replace_string(lua_State *L, int idx)
{
	size_t len;
	lua_tolstring(L, idx, &len);
	if (len == 0)
		return;
	mb_budget_poll(L);
	push_sanitized(L, idx, 0, "pii policy");
	lua_replace(L, idx);
}

static void walk_table(lua_State *L, int t, int depth)
{
	if (depth > mb_sandbox_ctx_of(L)->json_lim.max_depth)
		return; /* the encoder refuses it anyway */
	luaL_checkstack(L, 12, "pii policy");
	if (lua_getmetatable(L, t)) { /* the lazy globals are walked whole (json.h, sandbox_env.c) */
		lua_pop(L, 1);
		mb_json_expand(L, t);
	}
	lua_rawgetp(L, LUA_REGISTRYINDEX, &walked_key);
	lua_pushvalue(L, t);
	if (lua_rawget(L, -2) != LUA_TNIL) {
		lua_pop(L, 2);
		return;
	}
	lua_pop(L, 1);
	lua_pushvalue(L, t);
	lua_pushboolean(L, 1);
	lua_rawset(L, -3);
	lua_pop(L, 1);

	/* values first (allowed during traversal), string keys that change afterwards */
	lua_newtable(L);
	int rekey = lua_gettop(L);
	int nrekey = 0;
	lua_pushnil(L);
	while (lua_next(L, t)) {
		int v = lua_gettop(L);
		if (lua_type(L, v) == LUA_TSTRING) {
			lua_pushvalue(L, v);
			replace_string(L, lua_gettop(L));
			lua_pushvalue(L, v - 1);
			lua_insert(L, -2);
			lua_rawset(L, t);
		} else if (lua_type(L, v) == LUA_TTABLE) {
			walk_table(L, v, depth + 1);
		} else if (lua_type(L, v) == LUA_TNUMBER) {
			lua_pushvalue(L, v);
			replace_number(L, lua_gettop(L));
			if (lua_type(L, -1) == LUA_TSTRING) {
				lua_pushvalue(L, v - 1);
				lua_insert(L, -2);
				lua_rawset(L, t);
			} else {
				lua_pop(L, 1);
			}
		}
		lua_pop(L, 1);
		if (lua_type(L, -1) == LUA_TSTRING) {
			lua_pushvalue(L, -1);
			replace_string(L, lua_gettop(L));
			if (!lua_rawequal(L, -1, -2)) {
				lua_pushvalue(L, -2);
				lua_insert(L, -2);
				lua_rawset(L, rekey); /* rekey[old] = new */
				nrekey++;
			} else {
				lua_pop(L, 1);
			}
		}
	}
	if (nrekey) {
		lua_pushnil(L);
		while (lua_next(L, rekey)) {
			lua_pushvalue(L, -2);
			lua_rawget(L, t);    /* value under the old key */
			lua_pushvalue(L, -2);
			lua_insert(L, -2);
			lua_rawset(L, t);    /* t[new] = value */
			lua_pop(L, 1);
			lua_pushvalue(L, -1);
			lua_pushnil(L);
			lua_rawset(L, t);    /* t[old] = nil */
		}
	}
	lua_pop(L, 1);
}

/* A number with 9 or more digits may be a card, an SSN or a phone number written as a number:
 * scanned in its decimal form, and replaced by the token string when it is one. Integers are
 * scanned with their own digits (not through a float, which rounds above 2^53); a float only
 * when it is integral and in the integer range (casting any other is undefined). */
static void replace_number(lua_State *L, int idx)
{
	lua_Integer i;
	if (lua_isinteger(L, idx)) {
		i = lua_tointeger(L, idx);
	} else {
		lua_Number v = lua_tonumber(L, idx);
		if (!lua_numbertointeger(v, &i) || (lua_Number)i != v)
			return;
	}
	if (i < 100000000 && i > -100000000)
		return;
	lua_pushfstring(L, "%I", (LUAI_UACINT)i);
	int s = lua_gettop(L);
	push_sanitized(L, s, 0, "pii policy");
	if (!lua_rawequal(L, -1, s))
		lua_replace(L, idx);
	else
		lua_pop(L, 1);
	lua_pop(L, 1);
}

static void walk(lua_State *L, int idx, int depth)
{
	if (lua_type(L, idx) == LUA_TSTRING)
		replace_string(L, idx);
	else if (lua_type(L, idx) == LUA_TNUMBER)
		replace_number(L, idx);
	else if (lua_type(L, idx) == LUA_TTABLE)
		walk_table(L, idx, depth);
}

/* Runs under lua_pcall with the returned values as arguments; returns them sanitized. */
static int policy_values(lua_State *L)
{
	int n = lua_gettop(L);
	lua_newtable(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &walked_key);
	if (n == 0) {
		/* no return values: the result is the global `result` (read raw, like the capture) */
		lua_pushglobaltable(L);
		lua_pushliteral(L, "result");
		lua_rawget(L, -2);
		walk(L, lua_gettop(L), 0);
		lua_pushliteral(L, "result");
		lua_insert(L, -2);
		lua_rawset(L, -3);
		lua_pop(L, 1);
	}
	for (int i = 1; i <= n; i++)
		walk(L, i, 0);
	lua_pushnil(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &walked_key);
	return n;
}

int mb_sandbox_pii_values(lua_State *L, int base, int msgh)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (!c->req->pii_policy || !detector)
		return LUA_OK;
	int n = lua_gettop(L) - base;
	lua_pushcfunction(L, policy_values);
	lua_insert(L, base + 1);
	return lua_pcall(L, n, n, msgh);
}

/* A copy of the table at t, for the policy over a notification: its replacements must not reach
 * the code's own tables, which it goes on using after mcp.log. Raw reads; each table copied once
 * (seen: original -> copy), so shared and cyclic tables stay so; the metatable kept (it marks
 * arrays and raw values for the encoder); below the encoder's depth limit the original stays,
 * as the walk stops there too. Pushes the copy. */
static void copy_table(lua_State *L, int t, int seen, int depth)
{
	luaL_checkstack(L, 8, "pii policy");
	if (depth > mb_sandbox_ctx_of(L)->json_lim.max_depth) {
		lua_pushvalue(L, t);
		return;
	}
	if (lua_getmetatable(L, t)) { /* the lazy globals are copied whole (json.h, sandbox_env.c) */
		lua_pop(L, 1);
		mb_json_expand(L, t);
	}
	lua_pushvalue(L, t);
	if (lua_rawget(L, seen) == LUA_TTABLE)
		return;
	lua_pop(L, 1);
	lua_newtable(L);
	int c = lua_gettop(L);
	lua_pushvalue(L, t);
	lua_pushvalue(L, c);
	lua_rawset(L, seen);
	unsigned n = 0;
	lua_pushnil(L);
	while (lua_next(L, t)) {
		if (++n % 1024 == 0)
			mb_budget_poll(L);
		if (lua_type(L, -1) == LUA_TTABLE) {
			copy_table(L, lua_gettop(L), seen, depth + 1);
			lua_replace(L, -2);
		}
		lua_pushvalue(L, -2);
		lua_insert(L, -2);
		lua_rawset(L, c);
	}
	if (lua_getmetatable(L, t))
		lua_setmetatable(L, c);
}

/* Under lua_pcall: the policy over one value (an error object, a notification payload; a table
 * is walked as a copy, copy_table). */
static int policy_one(lua_State *L)
{
	if (lua_type(L, 1) == LUA_TTABLE) {
		lua_newtable(L);
		copy_table(L, 1, 2, 0);
		lua_replace(L, 1);
		lua_settop(L, 1);
	}
	lua_newtable(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &walked_key);
	walk(L, 1, 0);
	lua_pushnil(L);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &walked_key);
	lua_settop(L, 1);
	return 1;
}

void mb_sandbox_pii_top(lua_State *L)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (!c->req || !c->req->pii_policy || !detector)
		return;
	int t = lua_type(L, -1);
	if (t != LUA_TSTRING && t != LUA_TTABLE && t != LUA_TNUMBER)
		return;
	lua_pushcfunction(L, policy_one);
	lua_insert(L, -2);
	if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
		/* cannot scan it: withhold it rather than leak it */
		const char *why = lua_tostring(L, -1);
		if (why && strncmp(why, "pii policy: ", 12) == 0)
			why += 12;
		lua_pushfstring(L, "[withheld: personal-data scan failed: %s]", why ? why : "error");
		lua_remove(L, -2);
	}
}


void mb_sandbox_pii_finish(mb_sandbox_ctx *c, mb_exec_result *res)
{
	if (c->req && c->req->pii_policy && detector) {
		sanitize_owned(c, &res->output, &res->output_len);
		sanitize_owned(c, &res->error, NULL);
		sanitize_owned(c, &res->traceback, NULL);
	}
	found_set *s = c->pii_found;
	if (s && s->n) {
		res->pii_found = s->items;
		res->pii_nfound = s->n;
		s->items = NULL;
		s->n = 0;
	}
	mb_sandbox_pii_free(c);
}

int mb_sandbox_pii_open(lua_State *L)
{
	/* the globals table is at the top of the stack */
	lua_createtable(L, 0, 1);
	lua_pushcfunction(L, sb_scan);
	lua_setfield(L, -2, "scan");
	lua_setfield(L, -2, "pii");
	lua_pushcfunction(L, sb_tokenize);
	lua_setfield(L, -2, "tokenize_pii");
	lua_pushcfunction(L, sb_detokenize);
	lua_setfield(L, -2, "detokenize_pii");
	return 0;
}
