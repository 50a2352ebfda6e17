/* test_json_dec.c - the fast JSON decoder (src/json_dec.c) against jansson (tests/unit/json_ref.h):
 * hand-picked edge cases with the expected outcome (accepted, or declined so that jansson
 * decides), 4,000 generated documents that must all be accepted with jansson's value, and
 * 80,000 mutations of them (bytes flipped, inserted, deleted) where anything accepted must be
 * accepted by jansson with the same value. Then the public entry, mb_json_decode, on inputs the
 * fast path declines: values and error messages come from jansson as before. */
#include "json_ref.h"
#include "unit.h"

#include <lualib.h>
#include <stdint.h>
#include <stdlib.h>

static lua_State *state(void)
{
	lua_State *L = luaL_newstate();
	*(void **)lua_getextraspace(L) = NULL;
	return L;
}

static int cmp(lua_State *L, const char *s)
{
	char why[200] = "";
	int rc = json_ref_compare(L, s, strlen(s), why, sizeof why);
	if (rc == JSON_REF_DIFFERENT)
		fprintf(stderr, "  %s: %s\n", s, why);
	return rc;
}

TEST(edge_cases)
{
	lua_State *L = state();
	const char *accepted[] = {
		"0", "-0", "-0.0", "0.0", "1e5", "1E+5", "1e-5", "-1.5e-3", "123456789012345678",
		"9223372036854775807", "-9223372036854775808", "1.7976931348623157e308",
		"\"\"", "\"a\\u0000b\"", "\"\\ud83d\\ude00\"", "\"\\u00e9\\u20AC\"", "\"caf\xc3\xa9\"",
		"\"\xf0\x9f\x98\x80\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "true", "false", "null",
		" \t\r\n[ 1 , 2 ]\n", "[]", "{}", "[[],{}]", "{\"a\":1,\"a\":2}", "{\"\":[]}",
		"{\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"Echo: m1\"}]},\"jsonrpc\":\"2.0\",\"id\":5}",
		/* integers outside int64 are reals (json.c widens them for jansson), underflows too */
		"9223372036854775808", "-9223372036854775809", "99999999999999999999", "[1,-99999999999999999999]",
		"1e-400", "4.9e-324", "-2.5e-330",
		/* (fuzz find, in the reference: a big exponent is not a big integer) */
		"[0.1e-55555555000000000000005,555555555200000000100010,0e-3]",
		/* a number text longer than the stack copy (64 bytes) */
		"0.1234567890123456789012345678901234567890123456789012345678901234567890123456789",
		"123456789012345678901234567890123456789012345678901234567890123456789012345678901",
	};
	for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
		int rc = cmp(L, accepted[i]);
		if (rc != JSON_REF_SAME)
			fprintf(stderr, "  expected accepted: %s (rc %d)\n", accepted[i], rc);
		CHECK(rc == JSON_REF_SAME);
	}
	const char *declined[] = {
		"", " ", "01", "-", "1.", ".5", "+1", "1e", "1e+", "0x10", "NaN", "Infinity", "tru",
		"truex", "nul", "[1,]", "[1 2]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{a:1}", "[", "]",
		"{", "\"abc", "\"a\nb\"", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"",
		"\"\\ud800\\u0041\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xff\"",
		"\"\xe2\x82\"", "1 2", "[] []", "1e400", "-1e400", "{\"a\\u0000\":1}",
		"1234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890e9",
		"[1]x", "\xef\xbb\xbf[]", "'a'", "[\"a\",\x00]",
	};
	for (size_t i = 0; i < sizeof declined / sizeof *declined; i++) {
		int rc = cmp(L, declined[i]);
		if (rc != JSON_REF_DECLINED)
			fprintf(stderr, "  expected declined: %s (rc %d)\n", declined[i], rc);
		CHECK(rc == JSON_REF_DECLINED);
	}
	/* more items than one chunk of the stack (32): arrays in order, objects with a key repeated
	 * across chunks (the last one wins, as in jansson) */
	static char big[8192];
	for (int n = 31; n <= 100; n += 23) {
		size_t at = 0;
		at += (size_t)snprintf(big + at, sizeof big - at, "[");
		for (int i = 0; i < n; i++)
			at += (size_t)snprintf(big + at, sizeof big - at, "%s%d", i ? "," : "", i * 7);
		snprintf(big + at, sizeof big - at, "]");
		CHECK(cmp(L, big) == JSON_REF_SAME);
		at = (size_t)snprintf(big, sizeof big, "{");
		for (int i = 0; i < n; i++)
			at += (size_t)snprintf(big + at, sizeof big - at, "%s\"k%d\":%d", i ? "," : "",
					       i % 40, i);
		snprintf(big + at, sizeof big - at, "}");
		CHECK(cmp(L, big) == JSON_REF_SAME);
	}
	/* nesting: the limit (128 by default) is accepted, one more is declined */
	char deep[400];
	for (int d = 127; d <= 129; d++) {
		memset(deep, '[', (size_t)d);
		memset(deep + d, ']', (size_t)d);
		deep[2 * d] = '\0';
		CHECK(cmp(L, deep) == (d <= 128 ? JSON_REF_SAME : JSON_REF_DECLINED));
	}
	lua_close(L);
}

/* ---- generated documents ------------------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
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

/* a key never holds \u0000: jansson rejects NUL in keys, and the fast path declines them */
static void gen_string(buf *b, int key)
{
	static const char *pieces[] = {
		"a", "Z", "hello", " ", "0", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t",
		"\\u0000", "\\u001f", "\\u00e9", "\\u20ac", "\\uFFFF", "\\ud83d\\ude00", "\\uDBFF\\uDFFF",
		"\xc3\xa9", "\xe2\x82\xac", "\xef\xbf\xbf", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "{}[],:",
		"\\u0041", "true",
	};
	PUTS(b, "\"");
	for (uint32_t i = rnd(6); i > 0; i--) {
		const char *p = pieces[rnd(sizeof pieces / sizeof *pieces)];
		if (!(key && strcmp(p, "\\u0000") == 0))
			PUTS(b, p);
	}
	PUTS(b, "\"");
}

static void gen_number(buf *b)
{
	static const char *fixed[] = {
		"0", "-0", "1", "-1", "9223372036854775807", "-9223372036854775808", "0.5", "-0.0",
		"1e10", "2.5E-3", "1.7976931348623157e308", "2.2250738585072014e-308", "123.456e+7",
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
	uint32_t k = rnd(depth > 6 ? 6 : 8);
	switch (k) {
	case 0: gen_string(b, 0); break;
	case 1: gen_number(b); break;
	case 2: PUTS(b, "true"); break;
	case 3: PUTS(b, "false"); break;
	case 4: PUTS(b, "null"); break;
	case 5: gen_string(b, 0); break;
	case 6: {
		PUTS(b, "[");
		ws(b);
		uint32_t n = rnd(5);
		for (uint32_t i = 0; i < n; i++) {
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
		uint32_t n = rnd(5);
		for (uint32_t i = 0; i < n; i++) {
			if (i)
				PUTS(b, ",");
			ws(b);
			if (rnd(4) == 0)
				PUTS(b, "\"dup\"");
			else
				gen_string(b, 1);
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
	lua_State *L = state();
	static const char special[] = {'\0', '"', '\\', 'u', ',', ':', '[', ']', '{', '}', '0', '-', 'e',
				       '.', ' ', '\n', (char)0x80, (char)0xC0, (char)0xED, (char)0xF4,
				       (char)0xFF, 'd', '8', 'n'};
	buf b = {0}, m = {0};
	int generated = 0, same = 0, mutated_same = 0, mutated_declined = 0, different = 0;
	for (int doc = 0; doc < 4000; doc++) {
		b.n = 0;
		ws(&b);
		gen_value(&b, 0);
		ws(&b);
		char why[200] = "";
		generated++;
		int rc = json_ref_compare(L, b.p, b.n, why, sizeof why);
		if (rc == JSON_REF_SAME) {
			same++;
		} else if (different++ < 5) {
			fprintf(stderr, "  generated document not accepted (%d, %s): ", rc, why);
			for (size_t i = 0; i < b.n && i < 200; i++)
				fprintf(stderr, b.p[i] >= 0x20 && b.p[i] < 0x7f ? "%c" : "\\x%02x", (unsigned char)b.p[i]);
			fprintf(stderr, "\n");
		}
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
			rc = json_ref_compare(L, m.p, m.n, why, sizeof why);
			if (rc == JSON_REF_SAME)
				mutated_same++;
			else if (rc == JSON_REF_DECLINED)
				mutated_declined++;
			else if (different++ < 5)
				fprintf(stderr, "  mutation: %s: %.200s\n", why, m.p);
		}
	}
	printf("  generated %d, accepted with jansson's value %d; mutations accepted %d, declined %d\n",
	       generated, same, mutated_same, mutated_declined);
	CHECK(same == generated);
	CHECK(different == 0);
	/* the mutations reach both outcomes, so neither rule is tested vacuously */
	CHECK(mutated_same > 5000 && mutated_declined > 10000);
	free(b.p);
	free(m.p);
	lua_close(L);
}

/* mb_json_decode still answers through jansson where the fast path declines */
TEST(fallback_through_jansson)
{
	lua_State *L = state();
	char err[256];
	/* an integer beyond int64 becomes a real (json.c widens it for jansson) */
	CHECK(mb_json_decode(L, "[99999999999999999999]", 22, NULL, err, sizeof err) == 0);
	lua_rawgeti(L, -1, 1);
	CHECK(!lua_isinteger(L, -1) && lua_tonumber(L, -1) == 1e20);
	lua_pop(L, 2);
	/* a real that underflows is accepted, as jansson does */
	CHECK(mb_json_decode(L, "4.9e-324", 8, NULL, err, sizeof err) == 0);
	CHECK(lua_tonumber(L, -1) > 0);
	lua_pop(L, 1);
	/* messages are jansson's, with position */
	CHECK(mb_json_decode(L, "[1,]", 4, NULL, err, sizeof err) == -1);
	CHECK(strstr(err, "position") != NULL);
	CHECK(mb_json_decode(L, "\"\xff\"", 3, NULL, err, sizeof err) == -1);
	CHECK(strstr(err, "position") != NULL);
	CHECK(lua_gettop(L) == 0);
	lua_close(L);
}

int main(void)
{
	mb_json_global_init();
	RUN(edge_cases);
	RUN(generated_and_mutated);
	RUN(fallback_through_jansson);
	return UNIT_END();
}
