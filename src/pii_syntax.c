/* pii_syntax.c - what a token looks like: "[" TYPE "_" hex "]" (pii.h), and where tokens are in
 * a text. The lowest unit of the PII code, with no state: the scanner (pii_detect.c) uses it to
 * leave existing tokens alone and the tokenizer (pii_token.c) to build and find them, so neither
 * of the two depends on the other for the syntax (tokenizing runs above scanning, one way).
 */
#include "pii.h"

#include <string.h>

static int is_name_char(unsigned char c, int first)
{
	return (c >= 'A' && c <= 'Z') || (!first && ((c >= '0' && c <= '9') || c == '_'));
}

int mb_pii_type_name_valid(const char *t, size_t n)
{
	if (n == 0 || n > MB_PII_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!is_name_char((unsigned char)t[i], i == 0))
			return 0;
	return 1;
}

size_t mb_pii_token_check(const char *s, size_t len, const char *type)
{
	if (len < 11 || s[0] != '[')
		return 0;
	size_t max = len < 51 ? len : 51, i = 1, us = 0;
	while (i < max && s[i] != ']') {
		unsigned char c = (unsigned char)s[i];
		if (c == '_')
			us = i;
		else if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
		i++;
	}
	if (i >= max || us == 0)
		return 0;
	size_t nl = us - 1, hl = i - us - 1;
	if (!mb_pii_type_name_valid(s + 1, nl) || hl < MB_PII_HEX_MIN || hl > MB_PII_HEX_MAX)
		return 0;
	for (size_t k = us + 1; k < i; k++) {
		unsigned char c = (unsigned char)s[k];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
	}
	if (type && (strlen(type) != nl || memcmp(type, s + 1, nl) != 0))
		return 0;
	return i + 1;
}

int mb_pii_token_next(const char *text, size_t len, size_t *pos, size_t *tlen)
{
	size_t p = *pos;
	while (p < len) {
		const char *b = memchr(text + p, '[', len - p);
		if (!b)
			return 0;
		p = (size_t)(b - text);
		size_t t = mb_pii_token_check(text + p, len - p, NULL);
		if (t) {
			*pos = p;
			*tlen = t;
			return 1;
		}
		p++;
	}
	return 0;
}
