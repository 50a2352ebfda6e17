/* test_json_check.c - the tree-free JSON checker (src/json_check.c): hand-picked cases, the
 * limits and their messages, and generated and mutated documents compared with jansson
 * (json_check_ref.h), which is what it replaced as the check of what worker processes send. */
#include "json_check_ref.h"

#include <time.h>

#include "unit.h"

static int check(const char *s)
{
	return mb_json_check(s, strlen(s), NULL, NULL, NULL, 0);
}

static int same_as_jansson(const char *s, size_t n)
{
	char why[300] = "";
	int rc = json_check_ref_compare(s, n, why, sizeof why);
	if (rc == JSON_CHECK_REF_DIFFERENT)
		fprintf(stderr, "  differs from jansson on %.80s: %s\n", s, why);
	return rc != JSON_CHECK_REF_DIFFERENT;
}

TEST(edge_cases)
{
	static const char *valid[] = {
		"0", "-0", " 1 ", "-1.5e-3", "1E+2", "9223372036854775807", "-9223372036854775808",
		"99999999999999999999", "1.7976931348623157e308", "0e99999999999999999999",
		"1e-99999", "0.0000000001e-400", "[]", "{}", "[[]]", " {\"a\" : [1, {\"b\": null}] } ",
		"\"\"", "\"\\u0000\"", "{\"\\u0000\":1}", "\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"",
		"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "true", "false", "null", "\t\r\n[1,2]\n",
	};
	static const char *invalid[] = {
		"", " ", "[1,]", "{\"a\":1,}", "{\"a\"}", "{\"a\" 1}", "{1:2}", "01", "1.", ".5", "+1",
		"-", "1e", "1e+", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\x01\"",
		"\"\xff\"", "\"\xed\xa0\x80\"", "\"\xc0\x80\"", "[1]x", "[1] [2]", "tru", "nul",
		"NaN", "Infinity", "\"abc", "[", "{", "{\"a\":1 \"b\":2}", "\"\\x\"", "\"\\u12\"",
		"1.8e308", "-1e309", "[1,,2]", "[,1]", "\xef\xbb\xbf{}",
		/* jansson stops at a NUL key and says so; the old check took that as valid and let the
		 * rest through, which was then spliced into the answer */
		"{\"\\u0000\":1}, \"isError\": false, \"x\": {",
	};
	for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) {
		if (check(valid[i]) != MB_JSON_CHECK_OK)
			fprintf(stderr, "  should be valid: %s\n", valid[i]);
		CHECK(check(valid[i]) == MB_JSON_CHECK_OK);
		CHECK(same_as_jansson(valid[i], strlen(valid[i])));
	}
	for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
		if (check(invalid[i]) != MB_JSON_CHECK_INVALID)
			fprintf(stderr, "  should be invalid: %s\n", invalid[i]);
		CHECK(check(invalid[i]) == MB_JSON_CHECK_INVALID);
		CHECK(same_as_jansson(invalid[i], strlen(invalid[i])));
	}
	/* a NUL byte in the text, inside and outside a string */
	CHECK(mb_json_check("\"a\0b\"", 5, NULL, NULL, NULL, 0) == MB_JSON_CHECK_INVALID);
	CHECK(same_as_jansson("\"a\0b\"", 5));
	CHECK(mb_json_check("[1]\0", 4, NULL, NULL, NULL, 0) == MB_JSON_CHECK_INVALID);
	CHECK(same_as_jansson("[1]\0", 4));
	/* jansson takes "42\0" for 42 (the NUL ends its input); the checker does not, since the
	 * text would be spliced into an answer with the NUL byte in it */
	CHECK(mb_json_check("42\0", 3, NULL, NULL, NULL, 0) == MB_JSON_CHECK_INVALID);
	json_error_t je;
	json_t *j = json_loadb("42\0", 3, JSON_DECODE_ANY, &je);
	CHECK(j != NULL);
	json_decref(j);
	/* the message says where */
	char err[200];
	CHECK(mb_json_check("[1,]", 4, NULL, NULL, err, sizeof err) == MB_JSON_CHECK_INVALID);
	CHECK_STR(err, "not JSON at byte 3: a value should be here");
}

/* Numbers near DBL_MAX go through strtod (on a copy); far from it they are decided by their
 * exponent, also when the text is long. */
TEST(long_numbers)
{
	char b[1200];
	/* DBL_MAX written out in full (309 digits): valid; one more digit: overflow */
	snprintf(b, sizeof b, "%.0f", 1.7976931348623157e308);
	CHECK(strlen(b) == 309);
	CHECK(check(b) == MB_JSON_CHECK_OK && same_as_jansson(b, strlen(b)));
	strcat(b, "0");
	CHECK(check(b) == MB_JSON_CHECK_INVALID && same_as_jansson(b, strlen(b)));
	/* "18" and 307 zeros: 1.8e308 overflows */
	memset(b, '0', 309);
	b[0] = '1', b[1] = '8', b[309] = 0;
	CHECK(check(b) == MB_JSON_CHECK_INVALID && same_as_jansson(b, strlen(b)));
	/* 0.000...1 with 1000 zeros, and 1000 digits of fraction */
	b[0] = '0', b[1] = '.';
	memset(b + 2, '0', 1000);
	b[1002] = '1', b[1003] = 0;
	CHECK(check(b) == MB_JSON_CHECK_OK && same_as_jansson(b, strlen(b)));
	/* 1.000...e308 with many zeros: borderline exponent, strtod on a heap copy */
	b[0] = '1', b[1] = '.';
	memset(b + 2, '0', 200);
	strcpy(b + 202, "e308");
	CHECK(check(b) == MB_JSON_CHECK_OK && same_as_jansson(b, strlen(b)));
	strcpy(b + 202, "e309");
	CHECK(check(b) == MB_JSON_CHECK_INVALID && same_as_jansson(b, strlen(b)));
}

TEST(limits)
{
	char err[200];
	uint64_t n = 0;
	mb_json_check_limits lim = {.max_nodes = 4, .node_limit_name = "max_result_nodes"};
	CHECK(mb_json_check("[{},{},{}]", 10, &lim, &n, err, sizeof err) == MB_JSON_CHECK_OK && n == 4);
	CHECK(mb_json_check("[{},{},{},{}]", 13, &lim, &n, err, sizeof err) == MB_JSON_CHECK_NODES);
	CHECK_STR(err, "JSON holds more than 4 values (max_result_nodes=4)");
	/* keys are not values; strings, numbers and literals are */
	const char *obj = "{\"a\":1,\"b\":\"x\",\"c\":null}";
	CHECK(mb_json_check(obj, strlen(obj), &lim, &n, NULL, 0) == MB_JSON_CHECK_OK && n == 4);
	/* it stops at the limit: 5 million values over a limit of 100 read about 100 of them */
	size_t big = 1 + 3 * 5000000;
	char *s = malloc(big + 1);
	s[0] = '[';
	for (size_t i = 0; i < 5000000; i++)
		memcpy(s + 1 + 3 * i, "{},", 3);
	s[big - 1] = ']';
	lim.max_nodes = 100;
	CHECK(mb_json_check(s, big, &lim, &n, err, sizeof err) == MB_JSON_CHECK_NODES && n == 101);
	/* and without a limit it counts them all, building nothing: the time it takes (figures) */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(mb_json_check(s, big, NULL, &n, NULL, 0) == MB_JSON_CHECK_OK && n == 5000001);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	json_error_t je;
	struct timespec t2;
	json_t *j = json_loadb(s, big, JSON_DECODE_ANY, &je);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	double jms = (double)(t2.tv_sec - t1.tv_sec) * 1e3 + (double)(t2.tv_nsec - t1.tv_nsec) / 1e6;
	CHECK(j != NULL);
	json_decref(j);
	printf("  15 MB of 5,000,001 values: checked in %.0f ms (jansson's parse, tree kept: %.0f ms)\n", ms, jms);
	free(s);
	/* depth: max_depth open arrays are fine, one more is not; the cap is jansson's 2048 */
	lim = (mb_json_check_limits){.max_depth = 3, .depth_limit_name = "json_max_depth"};
	CHECK(mb_json_check("[[[1]]]", 7, &lim, NULL, NULL, 0) == MB_JSON_CHECK_OK);
	CHECK(mb_json_check("[[{\"a\":[1]}]]", 13, &lim, NULL, err, sizeof err) == MB_JSON_CHECK_DEPTH);
	CHECK_STR(err, "JSON nesting exceeds json_max_depth=3");
	char deep[4200];
	for (int d = 2047; d <= 2049; d++) {
		memset(deep, '[', (size_t)d);
		memset(deep + d, ']', (size_t)d);
		int rc = mb_json_check(deep, 2 * (size_t)d, NULL, NULL, NULL, 0);
		CHECK((rc == MB_JSON_CHECK_OK) == (d <= 2048));
		CHECK(same_as_jansson(deep, 2 * (size_t)d));
	}
}

/* ---- generated documents, as in test_json_dec.c, and their mutations ---------------------- */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

typedef struct {
	char *p;
	size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}
static void puts_(buf *b, const char *s)
{
	put(b, s, strlen(s));
}
#define PUTS(b, s) puts_(b, s)

static void ws(buf *b)
{
	static const char *w[] = {"", "", "", " ", "\n", "\t", "\r\n  "};
	PUTS(b, w[rnd(7)]);
}

static void gen_string(buf *b)
{
	static const char *pieces[] = {
		"a", "Z", "hello", " ", "0", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t",
		"\\u0000", "\\u001f", "\\u00e9", "\\u20ac", "\\uFFFF", "\\ud83d\\ude00", "\\uDBFF\\uDFFF",
		"\xc3\xa9", "\xe2\x82\xac", "\xef\xbf\xbf", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "{}[],:",
		"\\u0041", "true", "abcdefghijklmnopqrstuvwxyz",
	};
	PUTS(b, "\"");
	for (uint32_t i = rnd(6); i > 0; i--)
		PUTS(b, pieces[rnd(sizeof pieces / sizeof *pieces)]);
	PUTS(b, "\"");
}

static void gen_number(buf *b)
{
	static const char *fixed[] = {
		"0", "-0", "1", "-1", "9223372036854775807", "-9223372036854775808", "0.5", "-0.0",
		"1e10", "2.5E-3", "1.7976931348623157e308", "2.2250738585072014e-308", "123.456e+7",
		"18446744073709551616", "1e308", "9.99e307", "1e-400", "17976931348623158e292",
	};
	char t[64];
	switch (rnd(3)) {
	case 0:
		PUTS(b, fixed[rnd(sizeof fixed / sizeof *fixed)]);
		return;
	case 1:
		snprintf(t, sizeof t, "%s%llu", rnd(2) ? "-" : "",
			 (unsigned long long)(((uint64_t)rnd(1u << 31) << 32 | rnd(1u << 31)) >> rnd(60)));
		PUTS(b, t);
		return;
	default:
		snprintf(t, sizeof t, "%s%u.%u%s", rnd(2) ? "-" : "", rnd(100000), rnd(1000),
			 rnd(2) ? "" : rnd(2) ? "e12" : "E-7");
		PUTS(b, t);
	}
}

static void gen_value(buf *b, int depth)
{
	switch (rnd(depth > 6 ? 6 : 8)) {
	case 0: case 5: gen_string(b); break;
	case 1: gen_number(b); break;
	case 2: PUTS(b, "true"); break;
	case 3: PUTS(b, "false"); break;
	case 4: PUTS(b, "null"); break;
	case 6: {
		PUTS(b, "[");
		ws(b);
		for (uint32_t i = 0, n = rnd(5); i < n; i++) {
			if (i)
				PUTS(b, ",");
			ws(b);
			gen_value(b, depth + 1);
			ws(b);
		}
		PUTS(b, "]");
		break;
	}
	default: {
		PUTS(b, "{");
		ws(b);
		for (uint32_t i = 0, n = rnd(5); i < n; i++) {
			if (i)
				PUTS(b, ",");
			ws(b);
			gen_string(b);
			ws(b);
			PUTS(b, ":");
			ws(b);
			gen_value(b, depth + 1);
			ws(b);
		}
		PUTS(b, "}");
	}
	}
}

TEST(generated_and_mutated)
{
	static const char special[] = {'\0', '"', '\\', 'u', ',', ':', '[', ']', '{', '}', '0', '-', 'e',
				       '.', ' ', '\n', (char)0x80, (char)0xC0, (char)0xED, (char)0xF4,
				       (char)0xFF, 'd', '8', 'n', '9', 'E', '+'};
	buf b = {0}, m = {0};
	int generated = 0, valid = 0, mutated_valid = 0, mutated_invalid = 0, different = 0;
	for (int doc = 0; doc < 4000; doc++) {
		b.n = 0;
		ws(&b);
		gen_value(&b, 0);
		ws(&b);
		char why[300] = "";
		generated++;
		int rc = json_check_ref_compare(b.p, b.n, why, sizeof why);
		if (rc == JSON_CHECK_REF_VALID)
			valid++;
		else if (different++ < 5)
			fprintf(stderr, "  generated document (%d, %s): %.200s\n", rc, why, b.p);
		for (int k = 0; k < 20; k++) {
			m.n = 0;
			put(&m, b.p, b.n);
			for (uint32_t e = 1 + rnd(3); e > 0 && m.n > 0; e--) {
				size_t at = rnd((uint32_t)m.n);
				char c = rnd(3) ? special[rnd(sizeof special)] : (char)rnd(256);
				switch (rnd(3)) {
				case 0: m.p[at] = c; break;
				case 1: memmove(m.p + at, m.p + at + 1, m.n - at - 1); m.n--; break;
				default:
					put(&m, " ", 1);
					memmove(m.p + at + 1, m.p + at, m.n - at - 1);
					m.p[at] = c;
				}
			}
			rc = json_check_ref_compare(m.p, m.n, why, sizeof why);
			if (rc == JSON_CHECK_REF_VALID)
				mutated_valid++;
			else if (rc == JSON_CHECK_REF_INVALID)
				mutated_invalid++;
			else if (different++ < 5)
				fprintf(stderr, "  mutation: %s: %.200s\n", why, m.p);
		}
	}
	printf("  generated %d, valid %d; mutations valid %d, invalid %d, all as jansson says\n",
	       generated, valid, mutated_valid, mutated_invalid);
	CHECK(valid == generated);
	CHECK(different == 0);
	CHECK(mutated_valid > 5000 && mutated_invalid > 10000);
	free(b.p);
	free(m.p);
}

int main(void)
{
	mb_json_global_init();
	RUN(edge_cases);
	RUN(long_numbers);
	RUN(limits);
	RUN(generated_and_mutated);
	return UNIT_END();
}
