/* json_check_ref.h - compares the tree-free JSON checker (src/json_check.c) with jansson, the
 * reference: shared by tests/unit/test_json_check.c and tests/fuzz/fuzz_json_check.c.
 *
 * json_check_ref_compare(buf, len) runs mb_json_check (no value limit, jansson's depth) and
 * jansson's json_loadb with the flags json.c uses (JSON_DECODE_ANY | JSON_ALLOW_NUL), retried
 * like json.c when jansson reports an integer outside int64 (json_ref_widen). jansson refuses
 * "\u0000" in an object key, which the checker accepts (it is valid JSON, and jansson stops at
 * the key without reading the rest), so the reference reads a copy where every "\u0000" is
 * "\u0001" (the same validity otherwise). jansson also takes a raw NUL byte right after a
 * number or literal at the end of the text ("null\0", "1\0") for the end of its input; the
 * checker refuses every raw NUL byte (spliced into an answer it would be one), so a text with
 * one may be refused by the checker alone. The rule otherwise: both say valid or both say invalid, and when
 * valid the checker's value count is the number of values in jansson's tree (at least that
 * many when a key repeats: the checker counts every value written, the tree keeps the last).
 */
#ifndef MB_JSON_CHECK_REF_H
#define MB_JSON_CHECK_REF_H

#include "json_ref.h"
#include "json_check.h"

/* (json_ref.h's own comparison is not used here) */
static inline void *json_check_ref_unused_(void)
{
	return (void *)json_ref_compare;
}

static uint64_t json_check_ref_count(json_t *j)
{
	uint64_t n = 1;
	if (json_is_array(j)) {
		for (size_t i = 0; i < json_array_size(j); i++)
			n += json_check_ref_count(json_array_get(j, i));
	} else if (json_is_object(j)) {
		const char *k;
		json_t *v;
		json_object_foreach(j, k, v)
			n += json_check_ref_count(v);
	}
	return n;
}

/* jansson's verdict on buf (with the two adjustments above, and JSON_REJECT_DUPLICATES in
 * flags when asked); the tree or NULL. */
static json_t *json_check_ref_load(const char *buf, size_t len, size_t flags, json_error_t *je)
{
	char *copy = malloc(len + 1);
	if (!copy)
		abort();
	memcpy(copy, buf, len);
	for (size_t i = 0; i + 6 <= len; i++)
		if (memcmp(copy + i, "\\u0000", 6) == 0)
			copy[i + 5] = '1';
	json_t *j = json_loadb(copy, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | flags, je);
	if (!j && json_error_code(je) == json_error_numeric_overflow && strncmp(je->text, "too big", 7) == 0) {
		size_t wlen;
		char *w = json_ref_widen(copy, len, &wlen);
		if (w) {
			j = json_loadb(w, wlen, JSON_DECODE_ANY | JSON_ALLOW_NUL | flags, je);
			free(w);
		}
	}
	free(copy);
	return j;
}

enum { JSON_CHECK_REF_VALID = 1, JSON_CHECK_REF_INVALID = 0, JSON_CHECK_REF_DIFFERENT = -1 };

/// @returns JSON_CHECK_REF_VALID or _INVALID when both agree, else _DIFFERENT (why says how)
static int json_check_ref_compare(const char *buf, size_t len, char *why, size_t whylen)
{
	uint64_t nodes = 0;
	char err[256];
	int rc = mb_json_check(buf, len, NULL, &nodes, err, sizeof err);
	if (rc == MB_JSON_CHECK_NOMEM) {
		snprintf(why, whylen, "out of memory");
		return JSON_CHECK_REF_DIFFERENT;
	}
	json_error_t je;
	json_t *j = json_check_ref_load(buf, len, 0, &je);
	/* a repeated key leaves one value in the tree; the checker counts every value written */
	uint64_t want = 0;
	int exact = 1;
	if (j) {
		want = json_check_ref_count(j);
		json_t *u = json_check_ref_load(buf, len, JSON_REJECT_DUPLICATES, &je);
		exact = u != NULL;
		json_decref(u);
	}
	int out;
	if (rc == MB_JSON_CHECK_OK && !j) {
		snprintf(why, whylen, "accepted what jansson rejects (%s)", je.text);
		out = JSON_CHECK_REF_DIFFERENT;
	} else if (rc != MB_JSON_CHECK_OK && j && memchr(buf, 0, len)) {
		out = JSON_CHECK_REF_INVALID; /* jansson's NUL quirk (top of this file) */
	} else if (rc != MB_JSON_CHECK_OK && j) {
		snprintf(why, whylen, "rejected what jansson accepts (%s)", err);
		out = JSON_CHECK_REF_DIFFERENT;
	} else if (j && (exact ? nodes != want : nodes < want)) {
		snprintf(why, whylen, "counted %llu values, jansson's tree has %llu", (unsigned long long)nodes,
			 (unsigned long long)want);
		out = JSON_CHECK_REF_DIFFERENT;
	} else {
		out = j ? JSON_CHECK_REF_VALID : JSON_CHECK_REF_INVALID;
	}
	json_decref(j);
	return out;
}

#endif
