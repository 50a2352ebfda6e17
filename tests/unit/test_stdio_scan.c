/* test_stdio_scan.c - mb_stdio_scan_id (src/stdio_transport.c): the id of an over-long stdio
 * line found in its first bytes. Cases: ids of each kind and place, what must not be taken for
 * the request's id (nested, after a bad member, null, fractions, twice, cut short), and a
 * deterministic mutation run (bytes flipped, inserted, cut) over JSON-RPC messages checking the
 * invariant of stdio_id_check.h against jansson. tests/fuzz/fuzz_stdio_id.c fuzzes the same. */
#include <stdint.h>

#include "stdio_id_check.h"
#include "unit.h"

/* The id text found in s (static buffer), or "-" when none. */
static const char *scan(const char *s)
{
	static char out[256];
	size_t off, len;
	if (mb_stdio_scan_id(s, strlen(s), &off, &len) != 0)
		return "-";
	snprintf(out, sizeof out, "%.*s", (int)len, s + off);
	return out;
}

TEST(ids_found)
{
	CHECK_STR(scan("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\""), "7");
	CHECK_STR(scan("{\"id\":\"abc\""), "\"abc\"");
	CHECK_STR(scan(" \t\r\n{ \"id\" :\n -12 ,"), "-12");
	CHECK_STR(scan("{\"id\":0}"), "0");
	CHECK_STR(scan("{\"id\":9223372036854775807,"), "9223372036854775807");
	CHECK_STR(scan("{\"id\":\"a\\\"b\\\\c\\u00e9\","), "\"a\\\"b\\\\c\\u00e9\"");
	CHECK_STR(scan("{\"method\":\"x\",\"params\":{\"id\":1,\"a\":[{\"id\":2}]},\"id\":3,\"pad\":\"..."), "3");
	CHECK_STR(scan("{\"\\u0069\\u0064\":5,"), "5");          /* the key "id", escaped */
	CHECK_STR(scan("{\"a\":[1,2.5e-3,true,false,null,\"]\"],\"id\":4,"), "4");
}

TEST(ids_refused)
{
	CHECK_STR(scan(""), "-");
	CHECK_STR(scan("[{\"id\":1}]"), "-");                      /* not an object */
	CHECK_STR(scan("{\"params\":{\"id\":1},\"pad\":\"...."), "-"); /* nested only */
	CHECK_STR(scan("{\"id\":null,"), "-");
	CHECK_STR(scan("{\"id\":1.5,"), "-");
	CHECK_STR(scan("{\"id\":1e3,"), "-");
	CHECK_STR(scan("{\"id\":01,"), "-");
	CHECK_STR(scan("{\"id\":{\"a\":1},"), "-");
	CHECK_STR(scan("{\"id\":12"), "-");                        /* cut short: 12 or 123? */
	CHECK_STR(scan("{\"id\":\"ab"), "-");                      /* cut inside the string */
	CHECK_STR(scan("{\"id\":123456789012345678901,"), "-");    /* more than 20 characters */
	CHECK_STR(scan("{\"id\":1,\"id\":2,"), "-");               /* twice */
	CHECK_STR(scan("{\"a\":\"\\q\",\"id\":1,"), "-");          /* a bad escape before it */
	CHECK_STR(scan("{\"a\":tru,\"id\":1,"), "-");              /* a bad literal before it */
	CHECK_STR(scan("{\"a\":\"x\ny\",\"id\":1,"), "-");         /* a raw control byte */
	CHECK_STR(scan("{\"a\":[1,{\"b\":]},\"id\":1,"), "-");     /* mismatched brackets */
	CHECK_STR(scan("{\"a\" 1,\"id\":1,"), "-");                /* no colon */
	CHECK_STR(scan("{\"ids\":1,\"i\":2,"), "-");
	CHECK_STR(scan("{\"id\":\"\\u12\","), "-");
	char deep[400];
	size_t k = 0;
	k += (size_t)snprintf(deep, sizeof deep, "{\"a\":");
	for (int i = 0; i < 70; i++)
		deep[k++] = '[';
	for (int i = 0; i < 70; i++)
		deep[k++] = ']';
	snprintf(deep + k, sizeof deep - k, ",\"id\":1,");
	CHECK_STR(scan(deep), "-");                                /* deeper than it follows */
}

TEST(never_reads_past_n)
{
	/* the same text cut at every length, in a buffer of exactly that length (ASan sees a read
	 * past it) */
	const char *s = "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"a\":[1,{\"b\":\"\\u00e9\"}]},\"id\":\"x\\\"y\",\"z\":1}";
	size_t n = strlen(s);
	for (size_t k = 0; k <= n; k++) {
		char *b = malloc(k ? k : 1);
		CHECK(b != NULL);
		if (!b)
			return;
		memcpy(b, s, k);
		size_t off, len;
		if (mb_stdio_scan_id(b, k, &off, &len) == 0)
			CHECK(off + len <= k && memcmp(b + off, "\"x\\\"y\"", len) == 0);
		free(b);
	}
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

TEST(mutations_keep_the_invariant)
{
	static const char *const seeds[] = {
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
		"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"x\",\"id\":9},\"id\":\"r-1\"}",
		"{\"id\":-5,\"params\":[{\"id\":2},[[]],{}],\"x\":\"\\\"\\\\\\u0041\"}",
		"{\"a\":{\"b\":{\"c\":[true,false,null,1.5e2]}},\"id\":\"\\u0069d\"}",
	};
	static const char alphabet[] = "{}[]\":,\\ 0123456789-.eEidtrufalsn\xc3\xa9\x01";
	char buf[512];
	int violations = 0;
	for (int round = 0; round < 20000; round++) {
		const char *seed = seeds[round % 4];
		size_t n = strlen(seed);
		memcpy(buf, seed, n);
		int edits = 1 + (int)(next_rand() % 4);
		for (int e = 0; e < edits; e++) {
			size_t at = n ? next_rand() % n : 0;
			char c = alphabet[next_rand() % (sizeof alphabet - 1)];
			switch (next_rand() % 3) {
			case 0: if (n) buf[at] = c; break;                                   /* flip */
			case 1: if (n + 1 < sizeof buf) { memmove(buf + at + 1, buf + at, n - at); buf[at] = c; n++; } break;
			default: if (n) { memmove(buf + at, buf + at + 1, n - at - 1); n--; } break; /* cut */
			}
		}
		const char *why = stdio_id_violation(buf, n);
		if (why) {
			if (violations++ < 5)
				fprintf(stderr, "  %s: %.*s\n", why, (int)n, buf);
		}
	}
	CHECK(violations == 0);
	for (int i = 0; i < 4; i++)
		CHECK(stdio_id_violation(seeds[i], strlen(seeds[i])) == NULL);
}

int main(void)
{
	RUN(ids_found);
	RUN(ids_refused);
	RUN(never_reads_past_n);
	RUN(mutations_keep_the_invariant);
	return UNIT_END();
}
