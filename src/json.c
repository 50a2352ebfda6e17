/* json.c - the JSON codec of moonbox: Lua values <-> JSON text through jansson trees.
 *
 * Encoding walks the Lua value with raw access only (lua_rawgeti, lua_next, lua_getmetatable -
 * no metamethod can run), builds a jansson tree (enc_*), then dumps it compactly through a
 * callback into a growing buffer (out_*) that enforces max_output_bytes. Decoding bounds the
 * input size, scans the nesting depth (so jansson's recursive parser stays within max_depth),
 * lets jansson parse it (through a reader callback that polls the budget for inputs over 64 KB),
 * then converts the tree to Lua (dec_*) inside lua_pcall, so that a Lua error (memory,
 * timeout) never unwinds past a live jansson tree: the tree is freed first, then the error is
 * reported. No error ever longjmps across jansson; every path frees what it holds and reports a
 * message, and only the Lua-facing functions (l_*) turn that message into a Lua error.
 *
 * Budget: mb_budget_of(L) (or mb_budget_current() for host states) is made current while jansson
 * runs, so its allocations (routed through mb_budget_malloc by mb_json_global_init) count against
 * the execution's memory cap; conversion loops call mb_budget_check every 2048 nodes so a huge
 * value stops soon after the deadline. The output buffer is charged while it is being built and
 * credited when ownership passes to the caller.
 *
 * Numbers: Lua integers <-> JSON integers (jansson's json_int_t is long long); Lua floats <-> JSON
 * reals, printed with the fewest of 15, 16 or 17 significant digits that round-trip every real in
 * the document. Integers outside int64 in input are retried as reals (jansson rejects them).
 */
#include "json.h"

#include "budget.h"

#include <jansson.h>
#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Registry key of the shared array metatable (its address is the key; never written). */
static const char array_mt_key = 'A';

#define POLL_MASK 2047u               /* budget check every 2048 nodes */
#define STREAM_THRESHOLD (64u * 1024) /* decode larger inputs through the polling reader */
#define KEY_SHOWN 40                  /* key bytes shown in an error path */

/* ---- shared helpers ------------------------------------------------------------------------ */

static mb_json_limits norm_limits(const mb_json_limits *lim)
{
	mb_json_limits l = {0, 0, 0, NULL};
	if (lim)
		l = *lim;
	if (l.max_depth <= 0)
		l.max_depth = MB_JSON_DEFAULT_DEPTH;
	if (l.max_depth > MB_JSON_MAX_DEPTH)
		l.max_depth = MB_JSON_MAX_DEPTH;
	if (l.max_output_bytes == 0)
		l.max_output_bytes = SIZE_MAX - 1;
	if (l.max_input_bytes == 0)
		l.max_input_bytes = SIZE_MAX;
	if (!l.root_name)
		l.root_name = "value";
	return l;
}

static mb_budget *pick_budget(lua_State *L)
{
	mb_budget *b = mb_budget_of(L);
	return b ? b : mb_budget_current();
}

/* Message for an allocation failure: the budget's limit message when a limit tripped. */
static void oom_message(mb_budget *b, char *err, size_t errlen, const char *what)
{
	if (b && mb_budget_check(b) != MB_STOP_NONE)
		mb_budget_message(b, err, errlen);
	else
		snprintf(err, errlen, "out of memory while %s JSON", what);
}

static void depth_message(char *err, size_t errlen, int max_depth, int encoding)
{
	snprintf(err, errlen, "JSON nesting exceeds json_max_depth=%d%s", max_depth,
		 encoding ? " (a deeper table, or a table that contains itself)" : "");
}

static void push_array_mt(lua_State *L)
{
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key) == LUA_TTABLE)
		return;
	lua_pop(L, 1);
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "json.array");
	lua_setfield(L, -2, "__metatable");
	lua_pushvalue(L, -1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &array_mt_key);
}

/* Shortest of %.15g/%.16g/%.17g that reads back as d. */
static int real_precision(double d)
{
	char buf[40];
	if (d == floor(d) && fabs(d) < 1e15)
		return 15;
	for (int p = 15; p < 17; p++) {
		snprintf(buf, sizeof buf, "%.*g", p, d);
		if (strtod(buf, NULL) == d)
			return p;
	}
	return 17;
}

/* ---- UTF-8 --------------------------------------------------------------------------------- */

/* Bounds of the second byte after lead byte c (0 when c cannot start a sequence); *need is the
 * total sequence length. Rejects overlongs, surrogates and code points above U+10FFFF. */
static int utf8_lead(unsigned c, unsigned *lo, unsigned *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF)
		return 2;
	if (c >= 0xE0 && c <= 0xEF) {
		if (c == 0xE0)
			*lo = 0xA0;
		if (c == 0xED)
			*hi = 0x9F;
		return 3;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		if (c == 0xF0)
			*lo = 0x90;
		if (c == 0xF4)
			*hi = 0x8F;
		return 4;
	}
	return 0;
}

/* Length of the valid sequence at s[0..n), or 0 when invalid; *bad is the length of the maximal
 * invalid prefix to replace (at least 1) when it returns 0. */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned lo, hi;
	size_t need = (size_t)utf8_lead(s[0], &lo, &hi), i = 1;
	*bad = 1;
	if (need == 0)
		return 0;
	for (; i < need && i < n; i++) {
		unsigned c = s[i];
		if (i == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80)
			break;
	}
	if (i == need)
		return need;
	*bad = i;
	return 0;
}

/* Offset of the first invalid byte, or n when s is valid UTF-8. */
static size_t utf8_check(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, bad;
	while (i < n) {
		if (n - i >= 8) {
			uint64_t w;
			memcpy(&w, s + i, 8);
			if (!(w & 0x8080808080808080ull)) {
				i += 8;
				continue;
			}
		}
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		size_t k = utf8_seq(s + i, n - i, &bad);
		if (!k)
			return i;
		i += k;
	}
	return n;
}

/* Copies s with each maximal invalid subsequence replaced by U+FFFD into a buffer from
 * mb_budget_malloc (*outlen set); NULL when out of memory. */
static char *utf8_sanitize(const char *str, size_t n, size_t *outlen)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, size = 0, k, bad;
	while (i < n) {
		k = s[i] < 0x80 ? 1 : utf8_seq(s + i, n - i, &bad);
		size += k ? k : 3;
		i += k ? k : bad;
	}
	char *out = mb_budget_malloc(size + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (i = 0; i < n;) {
		k = s[i] < 0x80 ? 1 : utf8_seq(s + i, n - i, &bad);
		if (k) {
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += bad;
		}
	}
	out[o] = '\0';
	*outlen = o;
	return out;
}

/* Replaces bytes of msg that are not valid UTF-8 (jansson quotes input text in its messages)
 * with '?', so every error message can itself be sent as JSON. */
static void clean_message(char *msg)
{
	size_t n = strlen(msg), i = 0, k, bad;
	while (i < n) {
		unsigned char c = (unsigned char)msg[i];
		if (c < 0x80) {
			i++;
		} else if ((k = utf8_seq((const unsigned char *)msg + i, n - i, &bad)) != 0) {
			i += k;
		} else {
			memset(msg + i, '?', bad);
			i += bad;
		}
	}
}

/* ---- encoding: Lua -> jansson tree ----------------------------------------------------------- */

/* One step of the path from the root to the value being encoded, on the C stack. */
typedef struct seg {
	const struct seg *up;
	const char *key;  /* string key, or NULL */
	size_t klen;
	const char *num;  /* formatted numeric key shown as [num], or NULL */
	lua_Integer idx;  /* array index shown as [idx] when key and num are NULL */
} seg;

typedef struct {
	lua_State *L;
	mb_budget *b;
	const mb_json_limits *lim;
	int lenient;
	int amt;          /* stack index of the array metatable, 0 when none exists */
	unsigned nodes;
	int prec;         /* real precision needed so far */
	size_t est;       /* lower bound of the output size */
	int failed;
	char *err;
	size_t errlen;
} enc;

static size_t path_append(char *dst, size_t cap, size_t at, const char *s, size_t n)
{
	if (at + 1 >= cap)
		return at;
	if (n > cap - 1 - at)
		n = cap - 1 - at;
	memcpy(dst + at, s, n);
	dst[at + n] = '\0';
	return at + n;
}

static int is_ident(const char *k, size_t n)
{
	if (n == 0 || n > KEY_SHOWN || (k[0] >= '0' && k[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = k[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_'))
			return 0;
	}
	return 1;
}

static size_t path_write(const seg *s, char *dst, size_t cap, size_t at)
{
	if (!s)
		return at;
	at = path_write(s->up, dst, cap, at);
	if (!s->key) {
		char idx[32];
		const char *num = s->num;
		if (!num) {
			snprintf(idx, sizeof idx, LUA_INTEGER_FMT, (LUAI_UACINT)s->idx);
			num = idx;
		}
		at = path_append(dst, cap, at, "[", 1);
		at = path_append(dst, cap, at, num, strlen(num));
		return path_append(dst, cap, at, "]", 1);
	}
	if (is_ident(s->key, s->klen)) {
		at = path_append(dst, cap, at, ".", 1);
		return path_append(dst, cap, at, s->key, s->klen);
	}
	/* ["key"]: control bytes, quotes and invalid UTF-8 shown as '?', long keys cut with "..." */
	char shown[KEY_SHOWN + 8];
	size_t n = 0, i = 0, k, bad;
	while (i < s->klen && n < KEY_SHOWN) {
		const unsigned char *c = (const unsigned char *)s->key + i;
		if (*c >= 0x80 && (k = utf8_seq(c, s->klen - i, &bad)) != 0) {
			if (n + k > KEY_SHOWN)
				break;
			memcpy(shown + n, c, k);
			n += k;
			i += k;
			continue;
		}
		shown[n++] = (*c < 0x20 || *c == '"' || *c == '\\' || *c >= 0x7f) ? '?' : (char)*c;
		i++;
	}
	if (i < s->klen) {
		memcpy(shown + n, "...", 3);
		n += 3;
	}
	at = path_append(dst, cap, at, "[\"", 2);
	at = path_append(dst, cap, at, shown, n);
	return path_append(dst, cap, at, "\"]", 2);
}

/* Records the first failure: message, then " at <root><path>". */
static void enc_fail(enc *e, const seg *path, const char *fmt, ...)
{
	if (e->failed)
		return;
	e->failed = 1;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(e->err, e->errlen, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= e->errlen)
		return;
	size_t at = path_append(e->err, e->errlen, (size_t)n, " at ", 4);
	at = path_append(e->err, e->errlen, at, e->lim->root_name, strlen(e->lim->root_name));
	path_write(path, e->err, e->errlen, at);
}

static void enc_oom(enc *e)
{
	if (e->failed)
		return;
	e->failed = 1;
	oom_message(e->b, e->err, e->errlen, "encoding");
}

/* Counts a node and polls the budget now and then; 0 when encoding may go on. */
static int enc_tick(enc *e)
{
	if ((++e->nodes & POLL_MASK) == 0 && e->b && mb_budget_check(e->b) != MB_STOP_NONE) {
		if (!e->failed) {
			e->failed = 1;
			mb_budget_message(e->b, e->err, e->errlen);
		}
		return -1;
	}
	return 0;
}

static int enc_grow(enc *e, size_t n)
{
	if (n > e->lim->max_output_bytes - e->est) {
		if (!e->failed) {
			e->failed = 1;
			snprintf(e->err, e->errlen, "JSON output exceeds max_output_bytes=%zu",
				 e->lim->max_output_bytes);
		}
		return -1;
	}
	e->est += n;
	return 0;
}

static json_t *enc_value(enc *e, int idx, const seg *path, int depth);

static json_t *enc_string(enc *e, const char *s, size_t n, const seg *path)
{
	json_t *j;
	if (enc_grow(e, n + 2))
		return NULL;
	size_t bad = utf8_check(s, n);
	if (bad == n) {
		j = json_stringn_nocheck(s, n);
	} else if (!e->lenient) {
		enc_fail(e, path, "string is not valid UTF-8 (byte %zu)", bad + 1);
		return NULL;
	} else {
		size_t clean_len;
		char *clean = utf8_sanitize(s, n, &clean_len);
		if (!clean) {
			enc_oom(e);
			return NULL;
		}
		j = json_stringn_nocheck(clean, clean_len);
		mb_budget_free(clean);
	}
	if (!j)
		enc_oom(e);
	return j;
}

/* Formats a numeric table key as JSON object key text; returns its length. */
static size_t num_key(lua_State *L, int idx, char *buf, size_t cap)
{
	if (lua_isinteger(L, idx))
		return (size_t)snprintf(buf, cap, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, idx));
	double d = lua_tonumber(L, idx);
	return (size_t)snprintf(buf, cap, "%.*g", real_precision(d), d);
}

/* Is the table at idx a JSON array? Sets *n to its length. -1 on budget stop. */
static int enc_classify(enc *e, int idx, lua_Integer *n)
{
	lua_State *L = e->L;
	if (lua_getmetatable(L, idx)) {
		int marked = e->amt && lua_rawequal(L, -1, e->amt);
		lua_pop(L, 1);
		if (marked) {
			*n = (lua_Integer)lua_rawlen(L, idx);
			return 1;
		}
	}
	/* an array has exactly the keys 1..n; stop at the first key that rules it out */
	lua_Integer count = 0, maxk = 0;
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		lua_pop(L, 1);
		count++;
		lua_Integer k = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
		if (k < 1) {
			lua_pop(L, 1);
			return 0;
		}
		if (k > maxk)
			maxk = k;
		if (enc_tick(e)) {
			lua_pop(L, 1);
			return -1;
		}
	}
	*n = count;
	return count > 0 && maxk == count;
}

static json_t *enc_array(enc *e, int idx, lua_Integer n, const seg *path, int depth)
{
	lua_State *L = e->L;
	json_t *arr = json_array();
	seg s = {path, NULL, 0, NULL, 0};
	if (!arr) {
		enc_oom(e);
		return NULL;
	}
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, idx, i);
		s.idx = i;
		json_t *v = enc_value(e, lua_gettop(L), &s, depth);
		lua_pop(L, 1);
		if (!v || json_array_append_new(arr, v)) {
			if (v)
				enc_oom(e);
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

static json_t *enc_object(enc *e, int idx, const seg *path, int depth)
{
	lua_State *L = e->L;
	json_t *obj = json_object();
	char num[48];
	seg s = {path, NULL, 0, NULL, 0};
	if (!obj) {
		enc_oom(e);
		return NULL;
	}
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		/* key at -2, value at -1 */
		const char *k;
		size_t klen;
		int kt = lua_type(L, -2);
		char *clean = NULL;
		if (kt == LUA_TSTRING) {
			k = lua_tolstring(L, -2, &klen);
			s.key = k, s.klen = klen, s.num = NULL;
			size_t bad = utf8_check(k, klen);
			if (bad != klen) {
				if (!e->lenient) {
					enc_fail(e, &s, "object key is not valid UTF-8 (byte %zu)", bad + 1);
					goto fail;
				}
				clean = utf8_sanitize(k, klen, &klen);
				if (!clean) {
					enc_oom(e);
					goto fail;
				}
				k = clean;
			}
		} else if (kt == LUA_TNUMBER) {
			klen = num_key(L, -2, num, sizeof num);
			k = num;
			s.key = NULL, s.klen = 0, s.num = num;
		} else {
			if (!e->lenient) {
				enc_fail(e, path, "cannot encode a table key of type %s", lua_typename(L, kt));
				goto fail;
			}
			lua_pop(L, 1);
			if (enc_tick(e)) {
				lua_pop(L, 1);
				json_decref(obj);
				return NULL;
			}
			continue;
		}
		if (enc_grow(e, klen + 3)) {
			mb_budget_free(clean);
			goto fail;
		}
		json_t *v = enc_value(e, lua_gettop(L), &s, depth);
		int rc = v ? json_object_setn_new_nocheck(obj, k, klen, v) : -1;
		mb_budget_free(clean);
		if (rc) {
			if (v)
				enc_oom(e);
			goto fail;
		}
		lua_pop(L, 1);
	}
	return obj;
fail:
	lua_pop(L, 2);
	json_decref(obj);
	return NULL;
}

static json_t *enc_table(enc *e, int idx, const seg *path, int depth)
{
	lua_State *L = e->L;
	lua_Integer n;
	if (depth >= e->lim->max_depth) {
		if (!e->failed) {
			e->failed = 1;
			depth_message(e->err, e->errlen, e->lim->max_depth, 1);
		}
		return NULL;
	}
	if (!lua_checkstack(L, 4)) {
		enc_oom(e);
		return NULL;
	}
	if (enc_grow(e, 2))
		return NULL;
	int kind = enc_classify(e, idx, &n);
	if (kind < 0)
		return NULL;
	return kind ? enc_array(e, idx, n, path, depth + 1) : enc_object(e, idx, path, depth + 1);
}

static json_t *enc_unencodable(enc *e, int type, const seg *path)
{
	if (e->lenient)
		return json_null();
	enc_fail(e, path, "cannot encode %s", lua_typename(e->L, type));
	return NULL;
}

static json_t *enc_value(enc *e, int idx, const seg *path, int depth)
{
	lua_State *L = e->L;
	json_t *j;
	if (enc_tick(e))
		return NULL;
	int t = lua_type(L, idx);
	switch (t) {
	case LUA_TNIL:
		return enc_grow(e, 4) ? NULL : json_null();
	case LUA_TBOOLEAN:
		return enc_grow(e, 4) ? NULL : json_boolean(lua_toboolean(L, idx));
	case LUA_TNUMBER:
		if (enc_grow(e, 1))
			return NULL;
		if (lua_isinteger(L, idx)) {
			j = json_integer((json_int_t)lua_tointeger(L, idx));
		} else {
			double d = lua_tonumber(L, idx);
			if (!isfinite(d)) {
				if (e->lenient)
					return json_null();
				enc_fail(e, path, "cannot encode %s (JSON has no NaN or infinity)",
					 isnan(d) ? "NaN" : d > 0 ? "inf" : "-inf");
				return NULL;
			}
			int p = real_precision(d);
			if (p > e->prec)
				e->prec = p;
			j = json_real(d);
		}
		if (!j)
			enc_oom(e);
		return j;
	case LUA_TSTRING: {
		size_t n;
		const char *s = lua_tolstring(L, idx, &n);
		return enc_string(e, s, n, path);
	}
	case LUA_TLIGHTUSERDATA:
		if (lua_touserdata(L, idx) == NULL)
			return enc_grow(e, 4) ? NULL : json_null();
		return enc_unencodable(e, t, path);
	case LUA_TTABLE:
		return enc_table(e, idx, path, depth);
	default:
		return enc_unencodable(e, t, path);
	}
}

/* ---- encoding: jansson tree -> text ------------------------------------------------------------ */

typedef struct {
	char *buf;
	size_t len, cap;
	size_t max;
	mb_budget *b;
	unsigned calls;
	int why;          /* 0, 1 = output limit, 2 = budget stop, 3 = out of memory */
} outbuf;

static int out_write(const char *p, size_t n, void *data)
{
	outbuf *o = data;
	if (n > o->max - o->len) {
		o->why = 1;
		return -1;
	}
	if (n >= o->cap - o->len) {
		size_t want = o->len + n + 1, cap = o->cap ? o->cap : 256;
		while (cap < want)
			cap = cap > SIZE_MAX / 2 ? want : cap * 2;
		if (mb_budget_charge(o->b, cap - o->cap)) {
			o->why = 2;
			return -1;
		}
		char *nb = realloc(o->buf, cap);
		if (!nb) {
			mb_budget_credit(o->b, cap - o->cap);
			o->why = 3;
			return -1;
		}
		o->buf = nb;
		o->cap = cap;
	}
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	if ((++o->calls & POLL_MASK) == 0 && o->b && mb_budget_check(o->b) != MB_STOP_NONE) {
		o->why = 2;
		return -1;
	}
	return 0;
}

char *mb_json_encode(lua_State *L, int idx, const mb_json_limits *lim, int flags, size_t *len,
		     char *err, size_t errlen)
{
	mb_json_limits l = norm_limits(lim);
	mb_budget *prev = mb_budget_current(), *b = pick_budget(L);
	int top = lua_gettop(L);
	enc e = {L, b, &l, (flags & MB_JSON_LENIENT) != 0, 0, 0, 15, 0, 0, err, errlen};
	outbuf o = {NULL, 0, 0, l.max_output_bytes, b, 0, 0};
	char *result = NULL;
	json_t *root = NULL;

	*len = 0;
	if (errlen)
		err[0] = '\0';
	idx = lua_absindex(L, idx);
	mb_budget_set_current(b);
	if (!lua_checkstack(L, 8)) {
		oom_message(b, err, errlen, "encoding");
		goto done;
	}
	if (b && mb_budget_check(b) != MB_STOP_NONE) {
		mb_budget_message(b, err, errlen);
		goto done;
	}
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key) == LUA_TTABLE)
		e.amt = lua_gettop(L);
	root = enc_value(&e, idx, NULL, 0);
	if (!root)
		goto done;
	if (json_dump_callback(root, out_write, &o,
			       JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(e.prec)) != 0) {
		if (o.why == 1)
			snprintf(err, errlen, "JSON output exceeds max_output_bytes=%zu", l.max_output_bytes);
		else if (o.why == 2 && b && mb_budget_check(b) != MB_STOP_NONE)
			mb_budget_message(b, err, errlen);
		else
			oom_message(b, err, errlen, "encoding");
		goto done;
	}
	if (!o.buf && out_write("", 0, &o) != 0) { /* cannot happen: the dump wrote something */
		oom_message(b, err, errlen, "encoding");
		goto done;
	}
	o.buf[o.len] = '\0';
	result = o.buf;
	*len = o.len;
	o.buf = NULL;
done:
	json_decref(root);
	free(o.buf);
	mb_budget_credit(b, o.cap);
	mb_budget_set_current(prev);
	lua_settop(L, top);
	if (!result && errlen)
		clean_message(err);
	return result;
}

/* ---- decoding: text -> jansson tree -> Lua ----------------------------------------------------- */

typedef struct {
	const char *p;
	size_t left;
	mb_budget *b;
	int stopped;
} reader;

static size_t read_chunk(void *buffer, size_t buflen, void *data)
{
	reader *r = data;
	if (r->b && mb_budget_check(r->b) != MB_STOP_NONE) {
		r->stopped = 1;
		return (size_t)-1;
	}
	size_t n = buflen < r->left ? buflen : r->left;
	memcpy(buffer, r->p, n);
	r->p += n;
	r->left -= n;
	return n;
}

/* Does the integer literal s[0..n) (optional '-', digits) overflow int64? */
static int int_overflows(const char *s, size_t n)
{
	int neg = s[0] == '-';
	const char *d = s + neg;
	size_t nd = n - (size_t)neg;
	const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
	if (nd != 19)
		return nd > 19;
	return memcmp(d, lim, 19) > 0;
}

/* Copy of buf where every integer literal outside int64 gets "e0" appended, making it a real.
 * From mb_budget_malloc; NULL when out of memory. Only called after jansson reported one. */
static char *widen_big_ints(const char *buf, size_t len, size_t *outlen)
{
	size_t extra = 0, i, j;
	for (int pass = 0; pass < 2; pass++) {
		char *out = NULL;
		size_t o = 0;
		if (pass == 1 && !(out = mb_budget_malloc(len + extra + 1)))
			return NULL;
		int in_str = 0;
		for (i = 0; i < len; i = j) {
			char c = buf[i];
			j = i + 1;
			if (in_str) {
				if (c == '\\' && j < len)
					j++;
				else if (c == '"')
					in_str = 0;
			} else if (c == '"') {
				in_str = 1;
			} else if (c == '-' || (c >= '0' && c <= '9')) {
				int plain = 1;
				for (j = i; j < len; j++) {
					char d = buf[j];
					if (d == '.' || d == 'e' || d == 'E' || d == '+' || (d == '-' && j > i))
						plain = 0;
					else if (!(d >= '0' && d <= '9') && d != '-')
						break;
				}
				if (plain && j - i > 1 && int_overflows(buf + i, j - i)) {
					if (pass == 0) {
						extra += 2;
					} else {
						memcpy(out + o, buf + i, j - i);
						o += j - i;
						memcpy(out + o, "e0", 2);
						o += 2;
						continue;
					}
				}
			}
			if (pass == 1) {
				memcpy(out + o, buf + i, j - i);
				o += j - i;
			}
		}
		if (pass == 1) {
			out[o] = '\0';
			*outlen = o;
			return out;
		}
	}
	return NULL;
}

/* Checks the nesting of buf before jansson sees it, so jansson's recursive parser never goes
 * deeper than max_depth (its own limit is 2048 levels of C recursion). Returns 0, -1 when too
 * deep, -2 when the budget stopped. Text inside strings is skipped; malformed input is left to
 * jansson to report. */
static int depth_scan(const char *buf, size_t len, int max_depth, mb_budget *b)
{
	int depth = 0, in_str = 0;
	size_t i = 0, next_poll = 0;
	while (i < len) {
		if (i >= next_poll) {
			next_poll = i + 65536;
			if (b && mb_budget_check(b) != MB_STOP_NONE)
				return -2;
		}
		if (in_str) {
			char c = buf[i];
			i += c == '\\' ? 2 : 1;
			in_str = c != '"';
			continue;
		}
		switch (buf[i++]) {
		case '"':
			in_str = 1;
			break;
		case '[':
		case '{':
			if (++depth > max_depth)
				return -1;
			break;
		case ']':
		case '}':
			if (depth > 0)
				depth--;
			break;
		default:
			break;
		}
	}
	return 0;
}

static json_t *parse(const char *buf, size_t len, mb_budget *b, int *stopped, json_error_t *je)
{
	const size_t fl = JSON_DECODE_ANY | JSON_ALLOW_NUL;
	if (len <= STREAM_THRESHOLD || !b)
		return json_loadb(buf, len, fl, je);
	reader r = {buf, len, b, 0};
	json_t *j = json_load_callback(read_chunk, &r, fl, je);
	*stopped = r.stopped;
	return j;
}

typedef struct {
	json_t *root;
	const mb_json_limits *lim;
	mb_budget *b;
	unsigned nodes;
} dec;

static void dec_value(lua_State *L, dec *d, json_t *j, int depth)
{
	if ((++d->nodes & POLL_MASK) == 0 && d->b && mb_budget_check(d->b) != MB_STOP_NONE)
		mb_budget_raise(L, d->b);
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		const char *k;
		json_t *v;
		if (depth >= d->lim->max_depth)
			goto too_deep;
		luaL_checkstack(L, 4, "JSON nesting");
		lua_createtable(L, 0, (int)json_object_size(j));
		for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
			k = json_object_iter_key(it);
			v = json_object_iter_value(it);
			lua_pushlstring(L, k, json_object_iter_key_len(it));
			dec_value(L, d, v, depth + 1);
			lua_rawset(L, -3);
		}
		return;
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(j);
		if (depth >= d->lim->max_depth)
			goto too_deep;
		luaL_checkstack(L, 4, "JSON nesting");
		lua_createtable(L, n > INT_MAX ? INT_MAX : (int)n, 0);
		for (size_t i = 0; i < n; i++) {
			dec_value(L, d, json_array_get(j, i), depth + 1);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		lua_pushvalue(L, 2); /* the array metatable */
		lua_setmetatable(L, -2);
		return;
	}
	case JSON_STRING:
		lua_pushlstring(L, json_string_value(j), json_string_length(j));
		return;
	case JSON_INTEGER:
		lua_pushinteger(L, (lua_Integer)json_integer_value(j));
		return;
	case JSON_REAL:
		lua_pushnumber(L, (lua_Number)json_real_value(j));
		return;
	case JSON_TRUE:
	case JSON_FALSE:
		lua_pushboolean(L, json_is_true(j));
		return;
	default:
		lua_pushlightuserdata(L, NULL);
		return;
	}
too_deep: {
	char msg[96];
	depth_message(msg, sizeof msg, d->lim->max_depth, 0);
	lua_pushstring(L, msg);
	lua_error(L);
}
}

/* lua_pcall'd: [1] = dec*; pushes the converted value. */
static int dec_protected(lua_State *L)
{
	dec *d = lua_touserdata(L, 1);
	push_array_mt(L); /* index 2 */
	dec_value(L, d, d->root, 0);
	return 1;
}

int mb_json_decode(lua_State *L, const char *buf, size_t len, const mb_json_limits *lim,
		   char *err, size_t errlen)
{
	mb_json_limits l = norm_limits(lim);
	mb_budget *prev = mb_budget_current(), *b = pick_budget(L);
	json_error_t je;
	json_t *root = NULL;
	char *widened = NULL;
	int stopped = 0, rc = -1;

	if (errlen)
		err[0] = '\0';
	if (len > l.max_input_bytes) {
		snprintf(err, errlen, "JSON input is %zu bytes, exceeds max_input_bytes=%zu", len,
			 l.max_input_bytes);
		return -1;
	}
	mb_budget_set_current(b);
	if (b && mb_budget_check(b) != MB_STOP_NONE) {
		mb_budget_message(b, err, errlen);
		goto done;
	}
	int scan = depth_scan(buf, len, l.max_depth, b);
	if (scan != 0) {
		if (scan == -1)
			depth_message(err, errlen, l.max_depth, 0);
		else
			mb_budget_message(b, err, errlen);
		goto done;
	}
	root = parse(buf, len, b, &stopped, &je);
	if (!root && !stopped && json_error_code(&je) == json_error_numeric_overflow &&
	    strncmp(je.text, "too big", 7) == 0) {
		size_t wlen;
		widened = widen_big_ints(buf, len, &wlen);
		if (!widened) {
			oom_message(b, err, errlen, "decoding");
			goto done;
		}
		root = parse(widened, wlen, b, &stopped, &je);
	}
	if (!root) {
		enum json_error_code code = json_error_code(&je);
		if (stopped || (b && mb_budget_check(b) != MB_STOP_NONE))
			mb_budget_message(b, err, errlen);
		else if (code == json_error_stack_overflow)
			depth_message(err, errlen, l.max_depth, 0);
		else if (code == json_error_out_of_memory)
			oom_message(b, err, errlen, "decoding");
		else
			snprintf(err, errlen, "%s at line %d column %d (position %d)", je.text, je.line,
				 je.column, je.position);
		goto done;
	}
	if (!lua_checkstack(L, 4)) {
		oom_message(b, err, errlen, "decoding");
		goto done;
	}
	dec d = {root, &l, b, 0};
	lua_pushcfunction(L, dec_protected);
	lua_pushlightuserdata(L, &d);
	if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
		if (b && mb_budget_check(b) != MB_STOP_NONE)
			mb_budget_message(b, err, errlen);
		else
			snprintf(err, errlen, "%s",
				 lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error while decoding JSON");
		lua_pop(L, 1);
		goto done;
	}
	rc = 0;
done:
	json_decref(root);
	mb_budget_free(widened);
	mb_budget_set_current(prev);
	if (rc && errlen)
		clean_message(err);
	return rc;
}

/* ---- Lua-facing functions ------------------------------------------------------------------ */

/* Raises err as "<chunk>:<line>: <fn>: <err>", or the budget's sticky error when a limit tripped. */
static int raise_err(lua_State *L, const char *fn, const char *err)
{
	mb_budget *b = mb_budget_of(L);
	if (b && mb_budget_check(b) != MB_STOP_NONE)
		return mb_budget_raise(L, b);
	return luaL_error(L, "%s: %s", fn, err);
}

typedef struct {
	const char *s;
	size_t len;
} text;

static int push_text(lua_State *L)
{
	const text *t = lua_touserdata(L, 1);
	lua_pushlstring(L, t->s, t->len);
	return 1;
}

static int l_encode(lua_State *L)
{
	const mb_json_limits *lim = lua_touserdata(L, lua_upvalueindex(1));
	char err[256];
	text t;
	lua_settop(L, 1);
	char *s = mb_json_encode(L, 1, lim, 0, &t.len, err, sizeof err);
	if (!s)
		return raise_err(L, "json.encode", err);
	t.s = s;
	/* push through pcall so a memory error cannot leak s */
	lua_pushcfunction(L, push_text);
	lua_pushlightuserdata(L, &t);
	int st = lua_pcall(L, 1, 1, 0);
	free(s);
	if (st != LUA_OK) {
		mb_budget *b = mb_budget_of(L);
		if (b && mb_budget_check(b) != MB_STOP_NONE)
			return mb_budget_raise(L, b);
		return lua_error(L);
	}
	return 1;
}

static int l_decode(lua_State *L)
{
	const mb_json_limits *lim = lua_touserdata(L, lua_upvalueindex(1));
	char err[256];
	size_t len;
	luaL_checktype(L, 1, LUA_TSTRING);
	const char *s = lua_tolstring(L, 1, &len);
	if (mb_json_decode(L, s, len, lim, err, sizeof err) != 0)
		return raise_err(L, "json.decode", err);
	return 1;
}

static int l_array(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	if (mb_json_mark_array(L, 1) != 0)
		return luaL_error(L, "json.array: the table already has a metatable");
	return 1;
}

int mb_json_mark_array(lua_State *L, int idx)
{
	idx = lua_absindex(L, idx);
	push_array_mt(L);
	if (lua_getmetatable(L, idx)) {
		int same = lua_rawequal(L, -1, -2);
		lua_pop(L, 2);
		return same ? 0 : -1;
	}
	lua_setmetatable(L, idx);
	return 0;
}

void mb_json_push_null(lua_State *L)
{
	lua_pushlightuserdata(L, NULL);
}

int mb_json_open(lua_State *L, const mb_json_limits *lim)
{
	lua_createtable(L, 0, 4);
	mb_json_limits *u = lua_newuserdatauv(L, sizeof *u, 0);
	*u = norm_limits(lim);
	lua_pushvalue(L, -1);
	lua_pushcclosure(L, l_encode, 1);
	lua_setfield(L, -3, "encode");
	lua_pushcclosure(L, l_decode, 1);
	lua_setfield(L, -2, "decode");
	mb_json_push_null(L);
	lua_setfield(L, -2, "null");
	lua_pushcfunction(L, l_array);
	lua_setfield(L, -2, "array");
	push_array_mt(L);
	lua_pop(L, 1);
	return 1;
}

void mb_json_global_init(void)
{
	json_set_alloc_funcs(mb_budget_malloc, mb_budget_free);
	json_object_seed(0);
}
