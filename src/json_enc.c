/* json_enc.c - the encoder of the JSON codec (json.h): Lua values -> JSON text directly, raw
 * values, objects built from C, and the helpers json.c's decoding shares (json_int.h).
 *
 * Encoding (enc_*, put_*, out_*) walks the Lua value with raw access only (lua_rawgeti,
 * lua_next, lua_getmetatable - no metamethod can run) and writes the text straight into one
 * growing buffer whose capacity is charged to the budget; there is no intermediate tree. The
 * walk runs inside lua_pcall (enc_run/enc_protected); a table with a metatable is first handed to
 * the registry's mb_json_expand_key function when there is one (the sandbox's lazy globals are
 * filled before they are walked; our C, not a metamethod). Every failure (a limit, an unencodable
 * value, a budget stop, a Lua memory error) is a Lua error that unwinds to enc_run, which frees
 * the buffer and reports the message kept in the enc struct. A stop therefore costs one free(),
 * whatever the size of the value. Strings are escaped and their UTF-8 checked in one pass
 * (8 bytes at a time over plain ASCII); long strings go in chunks with a budget poll after each,
 * and the walk polls every 2048 nodes. A table is classified as array or object in the same
 * traversal that writes it (enc_table). The rare tables that need a second look - a mixed table
 * that started like an array, an object whose keys collide once turned into text
 * ({[1] = 1, ["1"] = 2}, written once each by enc_object_dedup) - have their text so far dropped
 * and are remembered in a memo for the rest of the call. Raw values (mb_json_push_raw: a
 * userdata with the "json.raw" metatable) are copied verbatim. Objects built from C
 * (mb_json_object, mb_json_quote) use the same writers with a jmp_buf in place of a Lua state.
 *
 * Budget: mb_budget_of(L) (or mb_budget_current() for host states) is charged for the output
 * buffer while it is built; the returned buffer is credited back when ownership passes to the
 * caller.
 *
 * Numbers: Lua integers -> JSON integers (exact int64); Lua floats -> JSON reals, each printed
 * with the fewest of 15, 16 or 17 significant digits that reads back as the same double.
 */
#include "json.h"
#include "json_int.h"

#include "budget.h"
#include "utf8.h"

#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Registry key of the shared array metatable (its address is the key; never written). */
static const char array_mt_key = 'A';
const char mb_json_expand_key = 'E';

void mb_json_expand(lua_State *L, int idx)
{
	idx = lua_absindex(L, idx);
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &mb_json_expand_key) != LUA_TFUNCTION) {
		lua_pop(L, 1);
		return;
	}
	lua_pushvalue(L, idx);
	lua_call(L, 1, 0);
}
/* Registry key of the shared raw-value metatable. */
static const char raw_mt_key = 'R';

#define KEY_SHOWN 40                  /* key bytes shown in an error path */
#define OUT_INITIAL 1024u             /* first capacity of the output buffer */
#define STR_CHUNK (16u * 1024)        /* string bytes escaped between budget polls */
#define RAW_CHUNK (1u << 20)          /* raw bytes copied between budget polls */
#define SHRINK_SLACK (64u * 1024)     /* unused tail worth giving back to malloc */

/* ---- shared helpers ------------------------------------------------------------------------ */

mb_json_limits json_norm_limits(const mb_json_limits *lim)
{
	mb_json_limits l = {0};
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
	if (!l.input_limit_name)
		l.input_limit_name = "max_input_bytes";
	if (!l.output_limit_name)
		l.output_limit_name = "max_output_bytes";
	if (!l.node_limit_name)
		l.node_limit_name = "max_nodes";
	return l;
}

mb_budget *json_pick_budget(lua_State *L)
{
	mb_budget *b = mb_budget_of(L);
	return b ? b : mb_budget_current();
}

/* Message for an allocation failure: the budget's limit message when a limit tripped. */
void json_oom_message(mb_budget *b, char *err, size_t errlen, const char *what)
{
	if (b && mb_budget_check(b) != MB_STOP_NONE)
		mb_budget_message(b, err, errlen);
	else
		snprintf(err, errlen, "out of memory while %s JSON", what);
}

void json_depth_message(char *err, size_t errlen, int max_depth, int encoding)
{
	snprintf(err, errlen, "JSON nesting exceeds json_max_depth=%d%s", max_depth,
		 encoding ? " (a deeper table, or a table that contains itself)" : "");
}

void json_push_array_mt(lua_State *L)
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

/* Replaces bytes of msg that are not valid UTF-8 (jansson quotes input text in its messages)
 * with '?', so every error message can itself be sent as JSON. */
void json_clean_message(char *msg)
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

/* ---- encoding: Lua value -> JSON text -------------------------------------------------------- */

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
	int push;         /* enc_protected pushes the text as a Lua string (json.encode) */
	int amt_loaded, rmt_loaded; /* SLOT_AMT / SLOT_RMT hold the metatables */
	int has_memo;     /* SLOT_MEMO holds a table */
	unsigned nodes;
	uint64_t values, max_values; /* values written (a dropped text's values uncounted) */
	char *buf;        /* the output: realloc'd, its capacity charged to b */
	size_t len, cap, max;
	int failed;       /* err holds the message; the Lua error on the stack is ours */
	char *err;
	size_t errlen;
	jmp_buf *jb;      /* documents built from C (mb_json_object): failures jump here, no L */
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

/* Every failure ends here: err is set, then a Lua error unwinds to enc_run's lua_pcall, which
 * frees the output. */
static _Noreturn void enc_throw(enc *e)
{
	e->failed = 1;
	if (e->jb)
		longjmp(*e->jb, 1);
	lua_pushlightuserdata(e->L, e);
	lua_error(e->L);
	__builtin_unreachable();
}

/* Fails with the message, then " at <root><path>". */
static _Noreturn void enc_fail(enc *e, const seg *path, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(e->err, e->errlen, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < e->errlen) {
		size_t at = path_append(e->err, e->errlen, (size_t)n, " at ", 4);
		at = path_append(e->err, e->errlen, at, e->lim->root_name, strlen(e->lim->root_name));
		path_write(path, e->err, e->errlen, at);
	}
	enc_throw(e);
}

static _Noreturn void enc_oom(enc *e)
{
	json_oom_message(e->b, e->err, e->errlen, "encoding");
	enc_throw(e);
}

static _Noreturn void enc_stop(enc *e)
{
	mb_budget_message(e->b, e->err, e->errlen);
	enc_throw(e);
}

static _Noreturn void enc_too_big(enc *e)
{
	snprintf(e->err, e->errlen, "JSON output exceeds %s=%zu", e->lim->output_limit_name,
		 e->lim->max_output_bytes);
	enc_throw(e);
}

static inline void enc_poll(enc *e)
{
	if (e->b && mb_budget_check(e->b) != MB_STOP_NONE)
		enc_stop(e);
}

/* Counts a node and polls the budget every POLL_MASK + 1 nodes. */
static inline void enc_tick(enc *e)
{
	if ((++e->nodes & POLL_MASK) == 0)
		enc_poll(e);
}

/* ---- the output buffer ---- */

static void out_grow(enc *e, size_t need)
{
	if (need > SIZE_MAX / 4 - e->len)
		enc_oom(e);
	size_t want = e->len + need, cap = e->cap ? e->cap : OUT_INITIAL;
	while (cap < want)
		cap *= 2;
	/* no need to grow far past the output limit: the write that crosses it fails */
	if (e->max < SIZE_MAX / 4 && cap > e->max + need + 1)
		cap = e->max + need + 1 > want ? e->max + need + 1 : want;
	if (mb_budget_charge(e->b, cap - e->cap) != 0)
		enc_stop(e);
	char *nb = realloc(e->buf, cap);
	if (!nb) {
		mb_budget_credit(e->b, cap - e->cap);
		enc_oom(e);
	}
	e->buf = nb;
	e->cap = cap;
}

/* Room for need more bytes; returns where they go. */
static inline char *out_reserve(enc *e, size_t need)
{
	if (need > e->cap - e->len)
		out_grow(e, need);
	return e->buf + e->len;
}

static inline void out_commit(enc *e, size_t n)
{
	e->len += n;
	if (e->len > e->max)
		enc_too_big(e);
}

static inline void out_byte(enc *e, char c)
{
	*out_reserve(e, 1) = c;
	out_commit(e, 1);
}

static inline void out_mem(enc *e, const char *s, size_t n)
{
	memcpy(out_reserve(e, n), s, n);
	out_commit(e, n);
}

/* ---- scalars ---- */

/* Decimal digits of u at out; returns their count (at most 20). */
static size_t fmt_uint(char *out, uint64_t u)
{
	char tmp[20];
	size_t n = 0, o = 0;
	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	while (n)
		out[o++] = tmp[--n];
	return o;
}

static size_t fmt_int(char *out, lua_Integer v)
{
	if (v >= 0)
		return fmt_uint(out, (uint64_t)v);
	out[0] = '-';
	return 1 + fmt_uint(out + 1, 0 - (uint64_t)v);
}

static const double pow10_tab[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
				   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
				   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Formats a finite double as a JSON real (at most 32 bytes at out); returns the length. The text
 * is "%.{p}g" with p the fewest of 15/16/17 digits that reads back as d (real_precision), with
 * ".0" added when it would read as an integer, no '+' and no leading zeros in the exponent.
 * Two fast paths give the same text without printf: integral values below 1e15 ("5.0", "-0.0"),
 * and values in [1e-4, 1e15) that are m / 10^k for an integer m < 1e15 (then "%.15g" prints
 * exactly that decimal, because it is the only 15-digit decimal within half an ulp of d). */
static size_t fmt_real(char *out, double d)
{
	double a = fabs(d);
	size_t o = 0;
	if (a < 1e15 && a == floor(a)) {
		if (signbit(d))
			out[o++] = '-';
		o += fmt_uint(out + o, (uint64_t)a);
		out[o++] = '.';
		out[o++] = '0';
		return o;
	}
	if (a >= 1e-4 && a < 1e15) {
		for (int k = 1; k <= 19; k++) {
			double m = nearbyint(a * pow10_tab[k]);
			if (m >= 1e15)
				break;
			if (m / pow10_tab[k] != a)
				continue;
			uint64_t u = (uint64_t)m;
			while (u % 10 == 0) { /* cannot reach 0: a is not integral */
				u /= 10;
				k--;
			}
			char dig[20];
			size_t nd = fmt_uint(dig, u), kk = (size_t)k;
			if (signbit(d))
				out[o++] = '-';
			if (nd > kk) {
				memcpy(out + o, dig, nd - kk);
				o += nd - kk;
				out[o++] = '.';
				memcpy(out + o, dig + nd - kk, kk);
				return o + kk;
			}
			out[o++] = '0';
			out[o++] = '.';
			memset(out + o, '0', kk - nd);
			o += kk - nd;
			memcpy(out + o, dig, nd);
			return o + nd;
		}
	}
	char buf[40];
	int n = snprintf(buf, sizeof buf, "%.*g", real_precision(d), d);
	int has_dot = 0, has_e = 0;
	for (int i = 0; i < n; i++) {
		char c = buf[i];
		if (c == 'e') {
			has_e = 1;
			out[o++] = 'e';
			i++;
			if (buf[i] == '-')
				out[o++] = '-';
			else if (buf[i] != '+')
				i--;
			while (i + 1 < n - 1 && buf[i + 1] == '0') /* keep the last digit */
				i++;
		} else if ((c >= '0' && c <= '9') || c == '-') {
			out[o++] = c;
		} else { /* the decimal point, whatever the locale */
			has_dot = 1;
			out[o++] = '.';
		}
	}
	if (!has_dot && !has_e) {
		out[o++] = '.';
		out[o++] = '0';
	}
	return o;
}

static void put_real(enc *e, double d, const seg *path)
{
	if (!isfinite(d)) {
		if (e->lenient) {
			out_mem(e, "null", 4);
			return;
		}
		enc_fail(e, path, "cannot encode %s (JSON has no NaN or infinity)",
			 isnan(d) ? "NaN" : d > 0 ? "inf" : "-inf");
	}
	char *o = out_reserve(e, 40);
	out_commit(e, fmt_real(o, d));
}

static inline void put_int(enc *e, lua_Integer v)
{
	char *o = out_reserve(e, 24);
	out_commit(e, fmt_int(o, v));
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* Nonzero when one of the 8 bytes in w needs attention: < 0x20, '"', '\\' or >= 0x80. */
static inline uint64_t special8(uint64_t w)
{
	uint64_t q = w ^ (ONES * '"'), bs = w ^ (ONES * '\\');
	return (w | ((w - ONES * 0x20) & ~w) | ((q - ONES) & ~q) | ((bs - ONES) & ~bs)) & HIGHS;
}

/* Byte classes in strings: 0 copied as is, 1 escaped, 2 starts a UTF-8 sequence (or is invalid). */
static const unsigned char byte_class[256] = {
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
};

/* Writes lead (unless 0), then s as a JSON string, then ':' when it is an object key. '"', '\\'
 * and control characters are escaped (\n \r \t \b \f, others \u00XX), everything else is copied
 * (8 bytes at a time over plain ASCII). UTF-8 is checked on the way: strict mode fails at the
 * first invalid byte, lenient mode writes U+FFFD for each maximal invalid subsequence. Long
 * strings go in chunks with a budget poll after each. Returns 1 when something was replaced. */
static int put_string(enc *e, char lead, const char *str, size_t n, const seg *path, int is_key)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, bad, end = n > STR_CHUNK ? STR_CHUNK : n;
	int replaced = 0;
	if (e->max - e->len < 2 || n > e->max - e->len - 2)
		enc_too_big(e);
	/* room for the chunk at 6 bytes per input byte (\u00XX), lead, quotes and ':' */
	char *o = out_reserve(e, end * 6 + 4);
	if (lead)
		*o++ = lead;
	*o++ = '"';
	for (;;) {
		while (i < end) {
			while (end - i >= 8) {
				uint64_t w;
				memcpy(&w, s + i, 8);
				if (special8(w))
					break;
				memcpy(o, &w, 8);
				o += 8;
				i += 8;
			}
			while (i < end && byte_class[s[i]] == 0)
				*o++ = (char)s[i++];
			if (i >= end)
				break;
			unsigned c = s[i];
			switch (byte_class[c]) {
			case 1:
				*o++ = '\\';
				i++;
				switch (c) {
				case '"': *o++ = '"'; break;
				case '\\': *o++ = '\\'; break;
				case '\n': *o++ = 'n'; break;
				case '\r': *o++ = 'r'; break;
				case '\t': *o++ = 't'; break;
				case '\b': *o++ = 'b'; break;
				case '\f': *o++ = 'f'; break;
				default:
					memcpy(o, "u00", 3);
					o[3] = hex[c >> 4];
					o[4] = hex[c & 15];
					o += 5;
					break;
				}
				continue;
			default:
				break;
			}
			/* 2-byte and common 3-byte sequences inline, the rest by utf8_seq */
			if (c >= 0xC2 && c <= 0xDF && n - i >= 2 && (s[i + 1] & 0xC0) == 0x80) {
				o[0] = (char)c;
				o[1] = (char)s[i + 1];
				o += 2;
				i += 2;
				continue;
			}
			if (c >= 0xE1 && c <= 0xEC && n - i >= 3 && (s[i + 1] & 0xC0) == 0x80 &&
			    (s[i + 2] & 0xC0) == 0x80) {
				o[0] = (char)c;
				o[1] = (char)s[i + 1];
				o[2] = (char)s[i + 2];
				o += 3;
				i += 3;
				continue;
			}
			size_t k = utf8_seq(s + i, n - i, &bad);
			if (k) { /* may end past the chunk: at most 4 bytes out for 1..4 in */
				memcpy(o, s + i, k);
				o += k;
				i += k;
				continue;
			}
			if (!e->lenient)
				enc_fail(e, path, is_key ? "object key is not valid UTF-8 (byte %zu)"
						      : "string is not valid UTF-8 (byte %zu)", i + 1);
			memcpy(o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += bad;
			replaced = 1;
		}
		if (i >= n)
			break;
		out_commit(e, (size_t)(o - (e->buf + e->len)));
		enc_poll(e);
		end = n - i > STR_CHUNK ? i + STR_CHUNK : n;
		o = out_reserve(e, (end - i) * 6 + 4);
	}
	*o++ = '"';
	if (is_key)
		*o++ = ':';
	out_commit(e, (size_t)(o - (e->buf + e->len)));
	return replaced;
}

/* A raw value's bytes (mb_json_push_raw), copied in chunks with budget polls; CR and LF (only
 * whitespace in valid JSON) become spaces so the output still never has a raw newline. */
static void put_raw(enc *e, const char *p, size_t n)
{
	if (n == 0) {
		out_mem(e, "null", 4);
		return;
	}
	if (n > e->max - e->len)
		enc_too_big(e);
	while (n) {
		size_t k = n > RAW_CHUNK ? RAW_CHUNK : n;
		char *o = out_reserve(e, k), *q;
		memcpy(o, p, k);
		for (q = o; (q = memchr(q, '\n', k - (size_t)(q - o))) != NULL; q++)
			*q = ' ';
		for (q = o; (q = memchr(q, '\r', k - (size_t)(q - o))) != NULL; q++)
			*q = ' ';
		out_commit(e, k);
		p += k;
		n -= k;
		if (n)
			enc_poll(e);
	}
}

/* ---- tables ---- */

static void enc_value(enc *e, int idx, const seg *path, int depth);

/* Formats a numeric table key as JSON object key text; returns its length. */
static size_t num_key(lua_State *L, int idx, char *buf, size_t cap)
{
	if (lua_isinteger(L, idx)) {
		size_t n = fmt_int(buf, lua_tointeger(L, idx));
		buf[n] = '\0';
		return n;
	}
	double d = lua_tonumber(L, idx);
	return (size_t)snprintf(buf, cap, "%.*g", real_precision(d), d);
}

/* Stack slots set up by enc_protected: the array and raw metatables (fetched from the registry
 * on first need; nil when the state has none) and the memo set of enc_object_dedup tables. */
#define SLOT_AMT 3
#define SLOT_RMT 4
#define SLOT_MEMO 5

static int slot_mt(enc *e, int slot, const char *key, int *loaded)
{
	if (!*loaded) {
		lua_rawgetp(e->L, LUA_REGISTRYINDEX, key);
		lua_replace(e->L, slot);
		*loaded = 1;
	}
	return slot;
}

/* Does the table at idx (with no array metatable) have exactly the keys 1..n? Sets *n. */
static int enc_classify(enc *e, int idx, lua_Integer *n)
{
	lua_State *L = e->L;
	lua_Integer count = 0, maxk = 0;
	lua_pushnil(L);
	while (lua_next(L, idx)) { /* stop at the first key that rules it out */
		lua_pop(L, 1);
		count++;
		lua_Integer k = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
		if (k < 1) {
			lua_pop(L, 1);
			return 0;
		}
		if (k > maxk)
			maxk = k;
		enc_tick(e);
	}
	*n = count;
	return count > 0 && maxk == count;
}

static void enc_array(enc *e, int idx, lua_Integer n, const seg *path, int depth)
{
	lua_State *L = e->L;
	seg s = {path, NULL, 0, NULL, 0};
	out_byte(e, '[');
	for (lua_Integer i = 1; i <= n; i++) {
		if (i > 1)
			out_byte(e, ',');
		lua_rawgeti(L, idx, i);
		s.idx = i;
		enc_value(e, lua_gettop(L), &s, depth);
		lua_pop(L, 1);
	}
	out_byte(e, ']');
}

/* Pushes the JSON text of the string or number key at idx: a number's decimal form, the string
 * itself, or (lenient, invalid UTF-8) a copy with U+FFFD for each maximal invalid subsequence. */
static void push_key_text(enc *e, int idx)
{
	lua_State *L = e->L;
	size_t n, i = 0, k, bad;
	idx = lua_absindex(L, idx);
	if (lua_type(L, idx) == LUA_TNUMBER) {
		char num[48];
		n = num_key(L, idx, num, sizeof num);
		lua_pushlstring(L, num, n);
		return;
	}
	const char *s = lua_tolstring(L, idx, &n);
	if (!e->lenient || utf8_check(s, n) == n) {
		lua_pushvalue(L, idx);
		return;
	}
	luaL_Buffer B;
	luaL_buffinit(L, &B);
	while (i < n) {
		size_t run = i;
		while (run < n && ((unsigned char)s[run] < 0x80 ||
				   (k = utf8_seq((const unsigned char *)s + run, n - run, &bad)) != 0))
			run += (unsigned char)s[run] < 0x80 ? 1 : k;
		luaL_addlstring(&B, s + i, run - i);
		if (run < n) {
			utf8_seq((const unsigned char *)s + run, n - run, &bad);
			luaL_addlstring(&B, "\xEF\xBF\xBD", 3);
			run += bad;
		}
		i = run;
	}
	luaL_pushresult(&B);
}

/* Writes lead (unless 0) and an object key with its ':': the string key of s (escaped and
 * checked like any string), or the decimal text num of a number key (nothing to escape). Returns
 * 1 when a lenient string key had invalid UTF-8 replaced. */
static int put_key(enc *e, char lead, const seg *s, const char *num, size_t nlen)
{
	if (s->key)
		return put_string(e, lead, s->key, s->klen, s, 1);
	char *o = out_reserve(e, nlen + 4), *p = o;
	if (lead)
		*p++ = lead;
	*p++ = '"';
	memcpy(p, num, nlen);
	p += nlen;
	*p++ = '"';
	*p++ = ':';
	out_commit(e, (size_t)(p - o));
	return 0;
}

/* The object at idx when two of its keys have the same JSON text ({[1] = 'a', ['1'] = 'b'}, or
 * two invalid keys that both become "\uFFFD" in lenient mode). A JSON object cannot repeat a key,
 * so - as a jansson object built in table order did - each text appears once, at the place of
 * its first key, with the value of its last key (whose path errors name). Builds text -> last key
 * and first keys in order as Lua tables, so this path costs memory (charged like any Lua
 * allocation); only such tables take it. Keys of other types stay in the order list so strict
 * mode reports them in place. Values that a later key shadows are never written, so strict mode
 * does not report their errors. */
static void enc_object_dedup(enc *e, int idx, const seg *path, int depth)
{
	lua_State *L = e->L;
	seg s = {path, NULL, 0, NULL, 0};
	char num[48], num1[48];
	size_t n1len = 0;
	lua_Integer n = 0;
	luaL_checkstack(L, 12, "JSON nesting");
	lua_newtable(L);
	int map = lua_gettop(L);
	lua_newtable(L);
	int ord = map + 1;
	lua_pushnil(L);
	while (lua_next(L, idx)) { /* k v */
		enc_tick(e);
		lua_pop(L, 1);
		int kt = lua_type(L, -1);
		if (kt == LUA_TSTRING || kt == LUA_TNUMBER) {
			push_key_text(e, -1); /* k T */
			lua_pushvalue(L, -1);
			if (lua_rawget(L, map) == LUA_TNIL) {
				lua_pushvalue(L, -3);
				lua_rawseti(L, ord, ++n);
			}
			lua_pop(L, 1);
			lua_pushvalue(L, -2);
			lua_rawset(L, map); /* map[T] = k */
		} else if (!e->lenient) {
			lua_pushvalue(L, -1);
			lua_rawseti(L, ord, ++n);
		}
	}
	out_byte(e, '{');
	for (lua_Integer i = 1; i <= n; i++) {
		seg first = {path, NULL, 0, NULL, 0};
		int kt = lua_rawgeti(L, ord, i); /* K1 */
		if (kt == LUA_TSTRING) {
			first.key = lua_tolstring(L, -1, &first.klen);
		} else if (kt == LUA_TNUMBER) {
			n1len = num_key(L, -1, num1, sizeof num1);
			first.num = num1;
		} else {
			enc_fail(e, path, "cannot encode a table key of type %s", lua_typename(L, kt));
		}
		push_key_text(e, -1);
		lua_rawget(L, map); /* K1 K2: the last key with this text */
		if (lua_type(L, -1) == LUA_TSTRING) {
			s.key = lua_tolstring(L, -1, &s.klen);
			s.num = NULL;
		} else {
			num_key(L, -1, num, sizeof num);
			s.key = NULL, s.klen = 0, s.num = num;
		}
		put_key(e, i > 1 ? ',' : 0, &first, num1, n1len);
		lua_pushvalue(L, -1);
		lua_rawget(L, idx); /* K1 K2 v */
		enc_value(e, lua_gettop(L), &s, depth);
		lua_pop(L, 3);
	}
	out_byte(e, '}');
	lua_pop(L, 2);
}

/* The memo: tables whose text was dropped once in this call (enc_table, enc_object), so they go
 * the slow way at once wherever else they appear. Without it a DAG of such tables would be
 * rewritten an exponential number of times; with it each table is dropped at most once, and a
 * value nested inside d such tables is written at most d + 1 times. Only tables built in Lua can
 * trigger a drop (decoded JSON never does), and the budget bounds the time it costs. */
enum { MEMO_NONE, MEMO_CLASSIFY, MEMO_DEDUP };

static int memo_get(enc *e, int idx)
{
	lua_pushvalue(e->L, idx);
	lua_rawget(e->L, SLOT_MEMO);
	int m = (int)lua_tointeger(e->L, -1);
	lua_pop(e->L, 1);
	return m;
}

static void memo_set(enc *e, int idx, int m)
{
	lua_State *L = e->L;
	if (!e->has_memo) {
		lua_newtable(L);
		lua_replace(L, SLOT_MEMO);
		e->has_memo = 1;
	}
	lua_pushvalue(L, idx);
	lua_pushinteger(L, m);
	lua_rawset(L, SLOT_MEMO);
}

/* Writes the object at idx in table order; when primed, its first key and value are already on
 * the stack (enc_table looked at them). Keys with the same text are rare and need
 * enc_object_dedup: a number key whose decimal form is also a string key of the table is found
 * by a raw lookup, a lenient key that needed U+FFFD may equal another such key. Then the text
 * written so far for this object is dropped, the table goes in the memo, and the object is
 * written again by enc_object_dedup. */
static void enc_object(enc *e, int idx, const seg *path, int depth, int primed)
{
	lua_State *L = e->L;
	size_t start = e->len;
	uint64_t values = e->values;
	char num[48];
	size_t nlen = 0;
	seg s = {path, NULL, 0, NULL, 0};
	int first = 1;
	out_byte(e, '{');
	if (!primed) {
		lua_pushnil(L);
		if (!lua_next(L, idx)) {
			out_byte(e, '}');
			return;
		}
	}
	int v = lua_gettop(L), k = v - 1;
	do {
		int kt = lua_type(L, k);
		if (kt == LUA_TSTRING) {
			s.key = lua_tolstring(L, k, &s.klen);
			s.num = NULL;
		} else if (kt == LUA_TNUMBER) {
			nlen = num_key(L, k, num, sizeof num);
			s.key = NULL, s.klen = 0, s.num = num;
			lua_pushlstring(L, num, nlen);
			int clash = lua_rawget(L, idx) != LUA_TNIL;
			lua_pop(L, 1);
			if (clash)
				goto dedup;
		} else {
			if (!e->lenient)
				enc_fail(e, path, "cannot encode a table key of type %s", lua_typename(L, kt));
			lua_pop(L, 1);
			enc_tick(e);
			continue;
		}
		if (put_key(e, first ? 0 : ',', &s, num, nlen))
			goto dedup;
		first = 0;
		enc_value(e, v, &s, depth);
		lua_pop(L, 1);
	} while (lua_next(L, idx));
	out_byte(e, '}');
	return;
dedup:
	lua_pop(L, 2);
	e->len = start;
	e->values = values;
	memo_set(e, idx, MEMO_DEDUP);
	enc_object_dedup(e, idx, path, depth);
}

/* Arrays: tables with the array metatable (keys 1..rawlen, holes as null), or whose keys are
 * exactly 1..n (n > 0); everything else is an object. One traversal usually decides: a first key
 * that is not a positive integer makes an object, and keys 1, 2, ... n in traversal order (a
 * table whose array part holds all its keys) are written as array items as they come. Only a
 * table that starts 1, 2, ... and then goes astray (a mixed table, or integer keys stored in the
 * hash part) has its text so far dropped, goes in the memo, and is classified by counting its
 * keys (enc_classify). */
static void enc_table(enc *e, int idx, const seg *path, int depth)
{
	lua_State *L = e->L;
	lua_Integer n;
	if (depth >= e->lim->max_depth) {
		json_depth_message(e->err, e->errlen, e->lim->max_depth, 1);
		enc_throw(e);
	}
	if (!lua_checkstack(L, 8))
		enc_oom(e);
	depth++;
	if (lua_getmetatable(L, idx)) {
		int marked = lua_rawequal(L, -1, slot_mt(e, SLOT_AMT, &array_mt_key, &e->amt_loaded));
		lua_pop(L, 1);
		if (marked) {
			enc_array(e, idx, (lua_Integer)lua_rawlen(L, idx), path, depth);
			return;
		}
		mb_json_expand(L, idx);
	}
	int memo = e->has_memo ? memo_get(e, idx) : MEMO_NONE;
	if (memo == MEMO_DEDUP) {
		enc_object_dedup(e, idx, path, depth);
		return;
	}
	if (memo == MEMO_CLASSIFY)
		goto classify;
	lua_pushnil(L);
	if (!lua_next(L, idx)) {
		out_mem(e, "{}", 2);
		return;
	}
	if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1) {
		enc_object(e, idx, path, depth, 1);
		return;
	}
	if (lua_tointeger(L, -2) != 1) {
		lua_pop(L, 2);
		goto classify;
	}
	size_t start = e->len;
	uint64_t values = e->values;
	seg s = {path, NULL, 0, NULL, 0};
	int v = lua_gettop(L);
	out_byte(e, '[');
	for (lua_Integer i = 1;; i++) {
		s.idx = i;
		enc_value(e, v, &s, depth);
		lua_pop(L, 1);
		if (!lua_next(L, idx))
			break;
		if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) != i + 1) {
			lua_pop(L, 2);
			e->len = start;
			e->values = values;
			memo_set(e, idx, MEMO_CLASSIFY);
			goto classify;
		}
		out_byte(e, ',');
	}
	out_byte(e, ']');
	return;
classify:
	if (enc_classify(e, idx, &n))
		enc_array(e, idx, n, path, depth);
	else
		enc_object(e, idx, path, depth, 0);
}

static void enc_unencodable(enc *e, int type, const seg *path)
{
	if (!e->lenient)
		enc_fail(e, path, "cannot encode %s", lua_typename(e->L, type));
	out_mem(e, "null", 4);
}

static void enc_value(enc *e, int idx, const seg *path, int depth)
{
	lua_State *L = e->L;
	enc_tick(e);
	if (++e->values > e->max_values)
		enc_fail(e, path, "more than %llu JSON values (%s=%llu)",
			 (unsigned long long)e->max_values, e->lim->node_limit_name,
			 (unsigned long long)e->max_values);
	int t = lua_type(L, idx);
	switch (t) {
	case LUA_TNIL:
		out_mem(e, "null", 4);
		return;
	case LUA_TBOOLEAN:
		if (lua_toboolean(L, idx))
			out_mem(e, "true", 4);
		else
			out_mem(e, "false", 5);
		return;
	case LUA_TNUMBER:
		if (lua_isinteger(L, idx))
			put_int(e, lua_tointeger(L, idx));
		else
			put_real(e, lua_tonumber(L, idx), path);
		return;
	case LUA_TSTRING: {
		size_t n;
		const char *s = lua_tolstring(L, idx, &n);
		put_string(e, 0, s, n, path, 0);
		return;
	}
	case LUA_TTABLE:
		enc_table(e, idx, path, depth);
		return;
	case LUA_TLIGHTUSERDATA:
		if (lua_touserdata(L, idx) == NULL) {
			out_mem(e, "null", 4);
			return;
		}
		break;
	case LUA_TUSERDATA:
		if (lua_getmetatable(L, idx)) {
			int raw = lua_rawequal(L, -1, slot_mt(e, SLOT_RMT, &raw_mt_key, &e->rmt_loaded));
			lua_pop(L, 1);
			if (raw) {
				put_raw(e, lua_touserdata(L, idx), lua_rawlen(L, idx));
				return;
			}
		}
		break;
	default:
		break;
	}
	enc_unencodable(e, t, path);
}

/* lua_pcall'd: [1] = enc*, [2] = the value. Leaves the NUL-terminated text in e->buf and, when
 * e->push, returns it as a Lua string. */
static int enc_protected(lua_State *L)
{
	enc *e = lua_touserdata(L, 1);
	lua_settop(L, SLOT_MEMO); /* nil slots, see SLOT_AMT */
	enc_value(e, 2, NULL, 0);
	*out_reserve(e, 1) = '\0';
	if (!e->push)
		return 0;
	lua_pushlstring(L, e->buf, e->len);
	return 1;
}

/* Runs the encoder on the value at idx; on success returns 0 with e->buf/e->len set (and the
 * string pushed when e->push), else -1 with e->err set. The buffer's charge is always credited
 * back; on failure the buffer is freed. */
static int enc_run(enc *e, int idx)
{
	lua_State *L = e->L;
	int top = lua_gettop(L);
	if (e->errlen)
		e->err[0] = '\0';
	idx = lua_absindex(L, idx);
	if (!lua_checkstack(L, 8)) {
		json_oom_message(e->b, e->err, e->errlen, "encoding");
		return -1;
	}
	if (e->b && mb_budget_check(e->b) != MB_STOP_NONE) {
		mb_budget_message(e->b, e->err, e->errlen);
		return -1;
	}
	lua_pushcfunction(L, enc_protected);
	lua_pushlightuserdata(L, e);
	lua_pushvalue(L, idx);
	int st = lua_pcall(L, 2, e->push, 0);
	mb_budget_credit(e->b, e->cap);
	if (st == LUA_OK) {
		if (e->cap - e->len > SHRINK_SLACK) { /* give back a mostly empty tail */
			char *nb = realloc(e->buf, e->len + 1);
			if (nb)
				e->buf = nb;
		}
		return 0;
	}
	if (!e->failed) { /* a Lua error: memory, or a C stack overflow */
		if (e->b && mb_budget_check(e->b) != MB_STOP_NONE)
			mb_budget_message(e->b, e->err, e->errlen);
		else if (st == LUA_ERRMEM)
			json_oom_message(e->b, e->err, e->errlen, "encoding");
		else
			snprintf(e->err, e->errlen, "%s", lua_type(L, -1) == LUA_TSTRING ?
				 lua_tostring(L, -1) : "error while encoding JSON");
	}
	lua_settop(L, top);
	free(e->buf);
	e->buf = NULL;
	if (e->errlen)
		json_clean_message(e->err);
	return -1;
}

char *mb_json_encode_n(lua_State *L, int idx, const mb_json_limits *lim, int flags, size_t *len,
		       uint64_t *nodes, char *err, size_t errlen)
{
	mb_json_limits l = json_norm_limits(lim);
	enc e = {.L = L, .b = json_pick_budget(L), .lim = &l, .lenient = (flags & MB_JSON_LENIENT) != 0,
		 .max = l.max_output_bytes, .max_values = l.max_nodes ? l.max_nodes : UINT64_MAX,
		 .err = err, .errlen = errlen};
	*len = 0;
	if (enc_run(&e, idx) != 0)
		return NULL;
	*len = e.len;
	if (nodes)
		*nodes = e.values;
	return e.buf;
}

char *mb_json_encode(lua_State *L, int idx, const mb_json_limits *lim, int flags, size_t *len,
		     char *err, size_t errlen)
{
	return mb_json_encode_n(L, idx, lim, flags, len, NULL, err, errlen);
}

/* ---- documents built from C ------------------------------------------------------------------ */

/* The encoder's writers without a Lua state: a failure (only out of memory here - nothing is
 * charged, nothing is limited, strings are lenient) jumps back to the setjmp, which frees. */
static char *c_doc(const mb_json_field *f, size_t nf, const char *quote, size_t qlen, size_t *len)
{
	static const mb_json_limits lim = {.root_name = "value"};
	char err[8];
	jmp_buf jb;
	enc e = {.lim = &lim, .lenient = 1, .max = SIZE_MAX / 8, .err = err, .errlen = sizeof err,
		 .jb = &jb};
	*len = 0;
	if (setjmp(jb)) {
		free(e.buf);
		return NULL;
	}
	if (quote) {
		put_string(&e, 0, quote, qlen, NULL, 0);
	} else {
		out_byte(&e, '{');
		for (size_t i = 0; i < nf; i++) {
			put_string(&e, i ? ',' : 0, f[i].key, strlen(f[i].key), NULL, 1);
			switch (f[i].type) {
			case MB_JF_STRING: put_string(&e, 0, f[i].s, f[i].n, NULL, 0); break;
			case MB_JF_RAW: put_raw(&e, f[i].s, f[i].n); break;
			case MB_JF_INT: put_int(&e, f[i].i); break;
			case MB_JF_REAL: put_real(&e, f[i].d, NULL); break;
			case MB_JF_BOOL: out_mem(&e, f[i].i ? "true" : "false", f[i].i ? 4 : 5); break;
			default: out_mem(&e, "null", 4); break;
			}
		}
		out_byte(&e, '}');
	}
	*out_reserve(&e, 1) = '\0';
	*len = e.len;
	return e.buf;
}

char *mb_json_object(const mb_json_field *f, size_t nf, size_t *len)
{
	return c_doc(f, nf, NULL, 0, len);
}

char *mb_json_quote(const char *s, size_t n, size_t *len)
{
	return c_doc(NULL, 0, s ? s : "", s ? n : 0, len);
}

/* ---- raw values ---- */

static void push_raw_mt(lua_State *L)
{
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &raw_mt_key) == LUA_TTABLE)
		return;
	lua_pop(L, 1);
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "json.raw");
	lua_setfield(L, -2, "__metatable");
	lua_pushvalue(L, -1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, &raw_mt_key);
}

void mb_json_push_raw(lua_State *L, const char *json, size_t len)
{
	void *p = lua_newuserdatauv(L, len, 0);
	if (len)
		memcpy(p, json, len);
	push_raw_mt(L);
	lua_setmetatable(L, -2);
}

int mb_json_raw_lua(lua_State *L)
{
	size_t len;
	luaL_checktype(L, 1, LUA_TSTRING);
	const char *s = lua_tolstring(L, 1, &len);
	luaL_argcheck(L, len > 0, 1, "JSON text expected, got an empty string");
	mb_json_push_raw(L, s, len);
	return 1;
}

/* Raises err as "<chunk>:<line>: <fn>: <err>", or the budget's sticky error when a limit tripped. */
int json_raise(lua_State *L, const char *fn, const char *err)
{
	mb_budget *b = mb_budget_of(L);
	if (b && mb_budget_check(b) != MB_STOP_NONE)
		return mb_budget_raise(L, b);
	return luaL_error(L, "%s: %s", fn, err);
}

/* json.encode(v) of mb_json_open's table; the text is pushed inside the encoder's lua_pcall, so
 * a memory error cannot leak it. */
int json_l_encode(lua_State *L)
{
	const mb_json_limits *lim = lua_touserdata(L, lua_upvalueindex(1));
	char err[256];
	lua_settop(L, 1);
	enc e = {.L = L, .b = json_pick_budget(L), .lim = lim, .push = 1, .max = lim->max_output_bytes,
		 .max_values = lim->max_nodes ? lim->max_nodes : UINT64_MAX, .err = err,
		 .errlen = sizeof err};
	if (enc_run(&e, 1) != 0)
		return json_raise(L, "json.encode", err);
	free(e.buf);
	return 1;
}
