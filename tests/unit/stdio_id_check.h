/* stdio_id_check.h - the invariant of mb_stdio_scan_id (src/stdio_transport.c) that
 * tests/unit/test_stdio_scan.c and tests/fuzz/fuzz_stdio_id.c both check, against jansson:
 *   - a found id lies inside the input and is a string literal or an integer;
 *   - when the whole input is a JSON object (jansson, duplicate keys refused) the id found is
 *     its "id" member, equal as JSON;
 *   - every prefix of such an object gives either no id or that same one (what an over-long
 *     line's first bytes can show never names another id).
 * stdio_id_violation returns NULL, or what was violated. */
#ifndef MB_STDIO_ID_CHECK_H
#define MB_STDIO_ID_CHECK_H

#include <jansson.h>
#include <string.h>

#include "stdio_transport.h"

static const char *stdio_id_span_ok(const char *p, size_t n, size_t off, size_t len)
{
	if (len == 0 || off > n || len > n - off)
		return "the id lies outside the input";
	char a = p[off], z = p[off + len - 1];
	if (a == '"' ? (len < 2 || z != '"') : !((a == '-' || (a >= '0' && a <= '9')) && z >= '0' && z <= '9'))
		return "the id is neither a string literal nor an integer";
	return NULL;
}

static const char *stdio_id_violation(const char *p, size_t n)
{
	size_t off = 0, len = 0;
	int found = mb_stdio_scan_id(p, n, &off, &len) == 0;
	if (found) {
		const char *why = stdio_id_span_ok(p, n, off, len);
		if (why)
			return why;
	}
	json_t *doc = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL);
	if (!doc)
		return NULL;
	const char *why = NULL;
	json_t *id = json_is_object(doc) ? json_object_get(doc, "id") : NULL;
	if (found) {
		json_t *got = json_loadb(p + off, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (!id || !got || !json_equal(got, id))
			why = "the id found is not the object's \"id\"";
		json_decref(got);
	}
	if (!why && id && (json_is_string(id) || json_is_integer(id))) {
		for (size_t k = 0; k < n && !why; k++) {
			size_t o2, l2;
			if (mb_stdio_scan_id(p, k, &o2, &l2) != 0)
				continue;
			if (stdio_id_span_ok(p, k, o2, l2)) {
				why = "a prefix gives an id outside it";
				break;
			}
			json_t *got = json_loadb(p + o2, l2, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
			if (!got || !json_equal(got, id))
				why = "a prefix of the object names another id";
			json_decref(got);
		}
	}
	json_decref(doc);
	return why;
}

#endif
