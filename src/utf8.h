/* utf8.h - strict UTF-8 sequence checks shared by the JSON encoder (json.c) and decoder
 * (json_dec.c): overlong forms, UTF-16 surrogates and code points above U+10FFFF are invalid;
 * and where to cut a text at a byte bound without splitting a character (utf8_cut: the journal's
 * heads in host.c, a long error message in sandbox.c).
 */
#ifndef MB_UTF8_H
#define MB_UTF8_H

#include <stddef.h>

/* Bounds of the second byte after lead byte c (0 when c cannot start a sequence); *need is the
 * total sequence length. Rejects overlongs, surrogates and code points above U+10FFFF. */
static inline int utf8_lead(unsigned c, unsigned *lo, unsigned *hi)
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
static inline size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad)
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

/* s[0..n) cut to at most max bytes without splitting a UTF-8 sequence: the length to keep
 * (steps back over at most three continuation bytes at the cut). */
static inline size_t utf8_cut(const char *s, size_t n, size_t max)
{
	if (n <= max)
		return n;
	size_t k = max;
	for (int i = 0; i < 3 && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80; i++)
		k--;
	return k;
}

/* The four hex digits of a JSON \uXXXX escape at p into *out; 0 when one is not a hex digit.
 * Shared by the fast decoder (json_dec.c) and the tree-free checker (json_check.c). */
static inline int utf8_hex4(const unsigned char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		unsigned c = p[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (c | 0x20) - 'a' + 10;
		else
			return 0;
		v = v << 4 | d;
	}
	*out = v;
	return 1;
}

#endif
