/* json_check.c - one pass over JSON text that says whether it is one valid value and how many
 * values it holds, building nothing (json_check.h).
 *
 * A loop over three states - a value is expected, a key is expected, a value has ended - with
 * the open arrays and objects kept as one bit each in a fixed array (MB_JSON_CHECK_MAX_DEPTH
 * bits), so neither recursion nor the heap grows with the input. Strings are skipped 8 bytes at
 * a time over plain ASCII; escapes, surrogate pairs and UTF-8 follow json_dec.c's rules (which
 * are jansson's). Numbers follow the JSON grammar; an integer outside int64 is a real, as
 * mb_json_decode reads it; a real is valid unless it overflows a double (jansson refuses those),
 * which is decided from its decimal exponent without strtod except for exponents within one of
 * DBL_MAX's, where strtod decides on a copy of the text.
 *
 * The value count is checked as each value starts, so a document of 5 million values over a
 * limit of 100 stops after reading about 100 of them.
 */
#include "json_check.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define NUM_COPY 64 /* number texts shorter than this are copied to the stack for strtod */

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* Nonzero when one of the 8 bytes in w needs a closer look: < 0x20, '"', '\\' or >= 0x80. */
static inline uint64_t special8(uint64_t w)
{
	uint64_t q = w ^ (ONES * '"'), bs = w ^ (ONES * '\\');
	return (w | ((w - ONES * 0x20) & ~w) | ((q - ONES) & ~q) | ((bs - ONES) & ~bs)) & HIGHS;
}

typedef struct {
	const unsigned char *s, *p, *end;
	const char *why; /* what was wrong, for the message */
} ck;

static inline void skip_ws(ck *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
		c->p++;
}

/* The rest of a string whose opening quote is behind c->p; leaves c->p after the closing one. */
static int string_body(ck *c)
{
	const unsigned char *p = c->p, *end = c->end;
	for (;;) {
		while (end - p >= 8) {
			uint64_t w;
			memcpy(&w, p, 8);
			if (special8(w))
				break;
			p += 8;
		}
		while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
			p++;
		if (p >= end) {
			c->why = "a string is not closed";
			break;
		}
		unsigned ch = *p;
		if (ch == '"') {
			c->p = p + 1;
			return 1;
		}
		if (ch < 0x20) {
			c->why = "a control character in a string";
			break;
		}
		if (ch >= 0x80) {
			size_t bad, k = utf8_seq(p, (size_t)(end - p), &bad);
			if (!k) {
				c->why = "invalid UTF-8 in a string";
				break;
			}
			p += k;
			continue;
		}
		/* a backslash */
		if (end - p < 2) {
			c->why = "a string is not closed";
			break;
		}
		switch (p[1]) {
		case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
			p += 2;
			continue;
		case 'u': {
			unsigned cp, lo;
			if (end - p < 6 || !utf8_hex4(p + 2, &cp)) {
				c->why = "a \\u escape without four hex digits";
				goto fail;
			}
			p += 6;
			if (cp >= 0xDC00 && cp <= 0xDFFF) {
				c->why = "a low surrogate escape alone";
				goto fail;
			}
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !utf8_hex4(p + 2, &lo) ||
				    lo < 0xDC00 || lo > 0xDFFF) {
					c->why = "a high surrogate escape without its low surrogate";
					goto fail;
				}
				p += 6;
			}
			continue;
		}
		default:
			c->why = "an unknown escape in a string";
			goto fail;
		}
	}
fail:
	c->p = p;
	return 0;
}

/* Would strtod overflow on the number text t[0..n) (valid JSON grammar)? Decided from the
 * position of its first significant digit: a value below 10^308 cannot, one of 10^309 or more
 * always does; in between strtod decides (on a copy: the text need not end here). Returns 1
 * (overflows), 0 (fits) or -1 (out of memory). */
static int real_overflows(const unsigned char *t, size_t n)
{
	const unsigned char *p = t, *end = t + n;
	if (*p == '-')
		p++;
	long long pos = 0; /* decimal position of the first significant digit, before the exponent */
	int any = 0;
	const unsigned char *ip = p;
	while (p < end && *p >= '0' && *p <= '9')
		p++;
	size_t intlen = (size_t)(p - ip);
	if (!(intlen == 1 && *ip == '0')) { /* JSON: no leading zeros, so the first digit is it */
		any = 1;
		pos = intlen > (size_t)1 << 40 ? (long long)1 << 40 : (long long)intlen - 1;
	}
	if (p < end && *p == '.') {
		p++;
		const unsigned char *f = p;
		while (p < end && *p >= '0' && *p <= '9') {
			if (!any && *p != '0') {
				any = 1;
				pos = -(long long)(p - f) - 1;
			}
			p++;
		}
	}
	if (!any)
		return 0; /* zero, whatever the exponent */
	long long ex = 0;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		int neg = 0;
		if (*p == '+' || *p == '-')
			neg = *p++ == '-';
		for (; p < end && *p >= '0' && *p <= '9'; p++)
			if (ex < (long long)1 << 40)
				ex = ex * 10 + (*p - '0');
		if (neg)
			ex = -ex;
	}
	long long at = pos + ex;
	if (at <= 307)
		return 0;
	if (at >= 309)
		return 1;
	char small[NUM_COPY], *buf = n < NUM_COPY ? small : malloc(n + 1), *e;
	if (!buf)
		return -1;
	memcpy(buf, t, n);
	buf[n] = '\0';
	errno = 0;
	double v = strtod(buf, &e);
	int over = errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL);
	if (buf != small)
		free(buf);
	return over;
}

/* A number at c->p (its first byte is '-' or a digit, or it is not a number). Returns 1, 0 (not
 * JSON) or -1 (out of memory). */
static int number(ck *c)
{
	const unsigned char *s = c->p, *p = s, *end = c->end;
	int real = 0;
	if (p < end && *p == '-')
		p++;
	if (p >= end)
		goto bad;
	if (*p == '0') {
		p++;
	} else if (*p >= '1' && *p <= '9') {
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	} else {
		goto bad;
	}
	if (p < end && *p == '.') {
		real = 1;
		if (++p >= end || *p < '0' || *p > '9')
			goto bad;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		real = 1;
		if (++p < end && (*p == '+' || *p == '-'))
			p++;
		if (p >= end || *p < '0' || *p > '9')
			goto bad;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	c->p = p;
	size_t n = (size_t)(p - s), digits = n - (*s == '-');
	if (!real && digits <= 18)
		return 1; /* an integer that fits int64 */
	/* a real, or an integer of 19 digits or more (outside int64 it is read as a real) */
	int over = real_overflows(s, n);
	if (over < 0)
		return -1;
	if (over) {
		c->p = s;
		c->why = "a number too large for a double";
		return 0;
	}
	return 1;
bad:
	c->p = p;
	c->why = "a malformed number";
	return 0;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int mb_json_check(const char *text, size_t n, const mb_json_check_limits *lim, uint64_t *nodes,
		  char *err, size_t errlen)
{
	int max_depth = lim && lim->max_depth > 0 && lim->max_depth < MB_JSON_CHECK_MAX_DEPTH
				? lim->max_depth : MB_JSON_CHECK_MAX_DEPTH;
	uint64_t max_nodes = lim && lim->max_nodes ? lim->max_nodes : UINT64_MAX;
	unsigned char open[MB_JSON_CHECK_MAX_DEPTH / 8]; /* bit set: an object */
	int depth = 0, rc = MB_JSON_CHECK_INVALID;
	uint64_t count = 0;
	ck c = {(const unsigned char *)text, (const unsigned char *)text,
		(const unsigned char *)text + n, NULL};
	if (err && errlen)
		err[0] = '\0';

value:
	skip_ws(&c);
	if (c.p >= c.end) {
		c.why = "the text ends where a value should be";
		goto invalid;
	}
	if (++count > max_nodes) {
		rc = MB_JSON_CHECK_NODES;
		set_err(err, errlen, "JSON holds more than %llu values (%s=%llu)",
			(unsigned long long)max_nodes,
			lim->node_limit_name ? lim->node_limit_name : "max_nodes",
			(unsigned long long)max_nodes);
		goto out;
	}
	switch (*c.p) {
	case '{':
	case '[':
		if (depth >= max_depth) {
			rc = MB_JSON_CHECK_DEPTH;
			set_err(err, errlen, "JSON nesting exceeds %s=%d",
				lim && lim->depth_limit_name ? lim->depth_limit_name : "max_depth",
				max_depth);
			goto out;
		}
		if (*c.p == '{')
			open[depth >> 3] |= (unsigned char)(1u << (depth & 7));
		else
			open[depth >> 3] &= (unsigned char)~(1u << (depth & 7));
		depth++;
		c.p++;
		skip_ws(&c);
		if (open[(depth - 1) >> 3] & (1u << ((depth - 1) & 7))) {
			if (c.p < c.end && *c.p == '}') {
				c.p++;
				depth--;
				goto after;
			}
			goto key;
		}
		if (c.p < c.end && *c.p == ']') {
			c.p++;
			depth--;
			goto after;
		}
		goto value;
	case '"':
		c.p++;
		if (!string_body(&c))
			goto invalid;
		goto after;
	case 't':
	case 'f':
	case 'n': {
		const char *w = *c.p == 't' ? "true" : *c.p == 'f' ? "false" : "null";
		size_t wl = strlen(w);
		if ((size_t)(c.end - c.p) < wl || memcmp(c.p, w, wl) != 0) {
			c.why = "an unknown word";
			goto invalid;
		}
		c.p += wl;
		goto after;
	}
	default: {
		if (*c.p != '-' && (*c.p < '0' || *c.p > '9')) {
			c.why = "a value should be here";
			goto invalid;
		}
		int r = number(&c);
		if (r < 0) {
			rc = MB_JSON_CHECK_NOMEM;
			set_err(err, errlen, "out of memory while checking JSON");
			goto out;
		}
		if (!r)
			goto invalid;
		goto after;
	}
	}

key:
	/* at the first byte of a key (whitespace skipped) */
	if (c.p >= c.end || *c.p != '"') {
		c.why = "an object key should be here";
		goto invalid;
	}
	c.p++;
	if (!string_body(&c))
		goto invalid;
	skip_ws(&c);
	if (c.p >= c.end || *c.p != ':') {
		c.why = "':' should follow an object key";
		goto invalid;
	}
	c.p++;
	goto value;

after:
	skip_ws(&c);
	if (depth == 0) {
		if (c.p != c.end) {
			c.why = "text after the value";
			goto invalid;
		}
		rc = MB_JSON_CHECK_OK;
		goto out;
	}
	if (c.p >= c.end) {
		c.why = "the text ends inside an array or object";
		goto invalid;
	}
	if (open[(depth - 1) >> 3] & (1u << ((depth - 1) & 7))) {
		if (*c.p == ',') {
			c.p++;
			skip_ws(&c);
			goto key;
		}
		if (*c.p == '}') {
			c.p++;
			depth--;
			goto after;
		}
		c.why = "',' or '}' should be here";
		goto invalid;
	}
	if (*c.p == ',') {
		c.p++;
		goto value;
	}
	if (*c.p == ']') {
		c.p++;
		depth--;
		goto after;
	}
	c.why = "',' or ']' should be here";
	goto invalid;

invalid:
	rc = MB_JSON_CHECK_INVALID;
	set_err(err, errlen, "not JSON at byte %zu: %s", (size_t)(c.p - c.s),
		c.why ? c.why : "an unexpected byte");
out:
	if (nodes)
		*nodes = count;
	return rc;
}
