/* json_dec.c - JSON text straight to Lua values: the fast path of mb_json_decode (json_dec.h).
 *
 * A recursive-descent reader over the input bytes. Every function returns 1 after pushing what
 * it read, or 0 to decline; a decline travels up unchanged and mb_json_dec_fast drops whatever
 * was pushed. Declining is always safe - jansson then parses the same input - so whenever a rule
 * here is not certainly the same as jansson's (JSON_DECODE_ANY | JSON_ALLOW_NUL), this file
 * declines rather than decides. Integers are exact int64; outside int64 they become reals, as
 * json.c makes jansson read them ("<digits>e0"); reals go through strtod like jansson's and an
 * overflow is declined (an underflow gives strtod's value, as in jansson). Strings must be valid
 * UTF-8 with well-formed escapes and surrogate pairs; keys must not hold NUL.
 */
#include "json_dec.h"

#include <errno.h>
#include <math.h>
#include <lauxlib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define POLL_MASK 2047u /* budget check every 2048 values, as in json.c */
#define NUM_MAX 64      /* longer number texts are copied to the heap for strtod */

typedef struct {
	lua_State *L;
	const unsigned char *p, *end;
	int max_depth, mt, unique_keys;
	mb_budget *b;
	unsigned values;
	const mb_json_raw_at *raw; /* or NULL */
} rd;

static int read_value(rd *r, int depth, int lvl);

static inline void skip_ws(rd *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
		r->p++;
}

/* \uXXXX (and its low surrogate) at r->p, just after the backslash and 'u'; adds the UTF-8. */
static int read_unicode(rd *r, luaL_Buffer *B)
{
	unsigned cp, lo;
	if (r->end - r->p < 4 || !utf8_hex4(r->p, &cp))
		return 0;
	r->p += 4;
	if (cp >= 0xDC00 && cp <= 0xDFFF)
		return 0; /* a low surrogate alone */
	if (cp >= 0xD800 && cp <= 0xDBFF) {
		if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' || !utf8_hex4(r->p + 2, &lo) ||
		    lo < 0xDC00 || lo > 0xDFFF)
			return 0;
		r->p += 6;
		cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
	}
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	luaL_addlstring(B, u, n);
	return 1;
}

/* A string whose opening quote is behind r->p; pushes it. Plain ASCII without escapes (most
 * strings in protocol messages) is pushed straight from the input. */
static int read_string(rd *r, int is_key)
{
	const unsigned char *s = r->p, *p = s, *end = r->end;
	while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80)
		p++;
	if (p < end && *p == '"') {
		lua_pushlstring(r->L, (const char *)s, (size_t)(p - s));
		r->p = p + 1;
		return 1;
	}
	luaL_Buffer B;
	luaL_buffinit(r->L, &B);
	luaL_addlstring(&B, (const char *)s, (size_t)(p - s));
	for (;;) {
		const unsigned char *run = p;
		while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80)
			p++;
		if (p > run)
			luaL_addlstring(&B, (const char *)run, (size_t)(p - run));
		if (p >= end || *p < 0x20)
			return 0;
		if (*p == '"')
			break;
		if (*p >= 0x80) {
			size_t bad, k = utf8_seq(p, (size_t)(end - p), &bad);
			if (!k)
				return 0;
			luaL_addlstring(&B, (const char *)p, k);
			p += k;
			continue;
		}
		/* a backslash */
		if (end - p < 2)
			return 0;
		char c;
		switch (p[1]) {
		case '"': c = '"'; break;
		case '\\': c = '\\'; break;
		case '/': c = '/'; break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'u':
			r->p = p + 2;
			if (!read_unicode(r, &B))
				return 0;
			p = r->p;
			continue;
		default:
			return 0;
		}
		luaL_addchar(&B, c);
		p += 2;
	}
	luaL_pushresult(&B);
	if (is_key) {
		size_t n;
		const char *k = lua_tolstring(r->L, -1, &n);
		if (memchr(k, '\0', n))
			return 0; /* jansson decides about NUL in keys */
	}
	r->p = p + 1;
	return 1;
}

static int read_number(rd *r)
{
	const unsigned char *s = r->p, *p = s, *end = r->end;
	int real = 0;
	if (p < end && *p == '-')
		p++;
	if (p >= end)
		return 0;
	if (*p == '0') {
		p++;
	} else if (*p >= '1' && *p <= '9') {
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	} else {
		return 0;
	}
	if (p < end && *p == '.') {
		real = 1;
		if (++p >= end || *p < '0' || *p > '9')
			return 0;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		real = 1;
		if (++p < end && (*p == '+' || *p == '-'))
			p++;
		if (p >= end || *p < '0' || *p > '9')
			return 0;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	size_t n = (size_t)(p - s);
	if (!real) {
		const unsigned char *d = s + (*s == '-');
		uint64_t v = 0;
		int big = 0;
		for (; d < p && !big; d++) {
			if (v > (UINT64_MAX - 9) / 10)
				big = 1;
			else
				v = v * 10 + (uint64_t)(*d - '0');
		}
		if (!big && v <= (uint64_t)INT64_MAX + (*s == '-')) {
			lua_pushinteger(r->L, *s == '-' ? (lua_Integer)(0 - v) : (lua_Integer)v);
			r->p = p;
			return 1;
		}
		/* outside int64: a real, as json.c makes of it for jansson ("<digits>e0") */
	}
	/* strtod as jansson's jsonp_strtod: an overflow is an error (declined: jansson words it),
	 * an underflow is the value strtod gives */
	char small[NUM_MAX], *buf = n < NUM_MAX ? small : mb_budget_malloc(n + 1), *e;
	if (!buf)
		return 0;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	double v = strtod(buf, &e);
	int ok = e == buf + n && !(errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL));
	if (buf != small)
		mb_budget_free(buf);
	if (!ok)
		return 0;
	lua_pushnumber(r->L, (lua_Number)v);
	r->p = p;
	return 1;
}

static int read_literal(rd *r, const char *word, size_t n)
{
	if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
		return 0;
	r->p += n;
	return 1;
}

/* Arrays and objects gather their items on the Lua stack (at most CHUNK at a time) and go into
 * a table made with the right size, instead of growing an empty table one rehash at a time:
 * an insert into a full Lua table costs ~900 instructions, most of the decode of a small
 * protocol message. The table sits at base + 1 (a nil until the first flush). */
#define CHUNK 32

static void flush_array(lua_State *L, int base, int n, lua_Integer *next)
{
	if (lua_isnil(L, base + 1)) {
		lua_createtable(L, n, 0);
		lua_replace(L, base + 1);
	}
	for (int i = n; i >= 1; i--) /* the top is the last item */
		lua_rawseti(L, base + 1, *next + i - 1);
	*next += n;
}

static int read_array(rd *r, int depth)
{
	lua_State *L = r->L;
	int base = lua_gettop(L), n = 0;
	lua_Integer next = 1;
	lua_pushnil(L);
	skip_ws(r);
	if (r->p < r->end && *r->p == ']') {
		r->p++;
	} else {
		for (;;) {
			if (!read_value(r, depth + 1, -1))
				return 0;
			if (++n == CHUNK) {
				flush_array(L, base, n, &next);
				n = 0;
			}
			skip_ws(r);
			if (r->p >= r->end)
				return 0;
			if (*r->p == ']') {
				r->p++;
				break;
			}
			if (*r->p != ',')
				return 0;
			r->p++;
		}
	}
	flush_array(L, base, n, &next);
	lua_pushvalue(L, r->mt);
	lua_setmetatable(L, -2);
	return 1;
}

/* Returns 0 (decline) on a repeated key when unique_keys is set. */
static int flush_object(lua_State *L, int base, int n, int unique_keys)
{
	if (lua_isnil(L, base + 1)) {
		lua_createtable(L, 0, n);
		lua_replace(L, base + 1);
	}
	for (int i = 0; i < n; i++) { /* in order: of duplicate keys the last one wins */
		if (unique_keys) { /* (null decodes to a light userdata, so a nil means "not seen") */
			lua_pushvalue(L, base + 2 + 2 * i);
			int seen = lua_rawget(L, base + 1) != LUA_TNIL;
			lua_pop(L, 1);
			if (seen)
				return 0;
		}
		lua_pushvalue(L, base + 2 + 2 * i);
		lua_pushvalue(L, base + 3 + 2 * i);
		lua_rawset(L, base + 1);
	}
	lua_settop(L, base + 1);
	return 1;
}

/* The path level of the value under the key at r->p (just after its opening quote) in an object
 * at level lvl: lvl + 1 when the key is the next one of r->raw's path, else -1. Compared as raw
 * bytes before the key is read: a key written with escapes is not the path (its value is then
 * decoded as usual, which is always correct). */
static int child_level(const rd *r, int lvl)
{
	if (lvl < 0)
		return -1;
	const char *want = r->raw->path[lvl];
	size_t n = r->raw->len[lvl];
	return (size_t)(r->end - r->p) > n && memcmp(r->p, want, n) == 0 && r->p[n] == '"' ? lvl + 1
											    : -1;
}

/* lvl: how many keys of r->raw's path lead to this object (-1: off the path). */
static int read_object(rd *r, int depth, int lvl)
{
	lua_State *L = r->L;
	int base = lua_gettop(L), n = 0;
	lua_pushnil(L);
	skip_ws(r);
	if (r->p < r->end && *r->p == '}') {
		r->p++;
		return flush_object(L, base, 0, 0);
	}
	for (;;) {
		if (r->p >= r->end || *r->p != '"')
			return 0;
		r->p++;
		int child = child_level(r, lvl);
		if (!read_string(r, 1))
			return 0;
		skip_ws(r);
		if (r->p >= r->end || *r->p != ':')
			return 0;
		r->p++;
		if (child >= 0 && !r->raw->path[child]) {
			/* the value at the end of the path: read (and checked) as any other, then
			 * replaced by a stand-in holding its text, when it is an object */
			skip_ws(r);
			const unsigned char *start = r->p;
			if (!read_value(r, depth + 1, -1))
				return 0;
			if (*start == '{') {
				lua_pop(r->L, 1);
				r->raw->push(r->L, (const char *)start, (size_t)(r->p - start));
			}
		} else if (!read_value(r, depth + 1, child)) {
			return 0;
		}
		if (++n == CHUNK) {
			if (!flush_object(L, base, n, r->unique_keys))
				return 0;
			n = 0;
		}
		skip_ws(r);
		if (r->p >= r->end)
			return 0;
		if (*r->p == '}') {
			r->p++;
			return flush_object(L, base, n, r->unique_keys);
		}
		if (*r->p != ',')
			return 0;
		r->p++;
		skip_ws(r);
	}
}

static int read_value(rd *r, int depth, int lvl)
{
	if ((++r->values & POLL_MASK) == 0 && r->b && mb_budget_check(r->b) != MB_STOP_NONE)
		return 0;
	skip_ws(r);
	if (r->p >= r->end)
		return 0;
	switch (*r->p) {
	case '{':
	case '[':
		if (depth >= r->max_depth || !lua_checkstack(r->L, 2 * CHUNK + 8))
			return 0;
		return *r->p++ == '{' ? read_object(r, depth, lvl) : read_array(r, depth);
	case '"':
		r->p++;
		return read_string(r, 0);
	case 't':
		if (!read_literal(r, "true", 4))
			return 0;
		lua_pushboolean(r->L, 1);
		return 1;
	case 'f':
		if (!read_literal(r, "false", 5))
			return 0;
		lua_pushboolean(r->L, 0);
		return 1;
	case 'n':
		if (!read_literal(r, "null", 4))
			return 0;
		lua_pushlightuserdata(r->L, NULL);
		return 1;
	default:
		return read_number(r);
	}
}

int mb_json_dec_fast(lua_State *L, const char *buf, size_t len, int max_depth, int unique_keys,
		     mb_budget *b, int mt, const mb_json_raw_at *raw)
{
	int top = lua_gettop(L);
	if (!lua_checkstack(L, 6))
		return 0;
	rd r = {L, (const unsigned char *)buf, (const unsigned char *)buf + len, max_depth,
		lua_absindex(L, mt), unique_keys != 0, b, 0, raw};
	if (read_value(&r, 0, raw && raw->path && raw->path[0] ? 0 : -1)) {
		skip_ws(&r);
		if (r.p == r.end)
			return 1;
	}
	lua_settop(L, top);
	return 0;
}
