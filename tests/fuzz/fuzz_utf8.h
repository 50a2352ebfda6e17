/* fuzz_utf8.h - the fuzz targets' own UTF-8 check, written independently of src/utf8.h so that
 * an invariant "this text is valid UTF-8" does not trust the code under test: no overlong forms,
 * no surrogates, nothing above U+10FFFF. */
#ifndef MB_FUZZ_UTF8_H
#define MB_FUZZ_UTF8_H

#include <stddef.h>
#include <stdint.h>

static inline int fz_valid_utf8(const void *s, size_t n)
{
	const unsigned char *p = s;
	size_t i = 0;
	while (i < n) {
		unsigned c = p[i];
		size_t len;
		uint32_t cp;
		if (c < 0x80) { i++; continue; }
		else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
		else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
		else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
		else return 0;
		if (i + len > n)
			return 0;
		for (size_t k = 1; k < len; k++) {
			if ((p[i + k] & 0xC0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i + k] & 0x3F);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		    cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += len;
	}
	return 1;
}

#endif
