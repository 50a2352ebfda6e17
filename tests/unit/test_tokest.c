/* test_tokest.c - the token estimate (src/tokest.c): its bounds on any bytes, values worked out by
 * hand from the weights, the split the result's shaping relies on, and the sources of host calls.
 * The estimate's error against a real tokenizer is measured in
 * tests/integration/savings.test.mjs. */
#include "unit.h"

#include "../../src/tokest.h"

#define EST(s) mb_tokest((s), sizeof(s) - 1)

TEST(test_bounds)
{
	CHECK(mb_tokest("", 0) == 0);
	CHECK(EST("a") == 1);
	CHECK(EST(" ") == 1);
	/* never more tokens than bytes, never none for some bytes, whatever the bytes */
	unsigned s = 7;
	char buf[64];
	for (int round = 0; round < 20000; round++) {
		size_t n = 1 + (size_t)(round % 63);
		for (size_t i = 0; i < n; i++) {
			s = s * 1103515245u + 12345u;
			buf[i] = (char)(s >> 16);
		}
		uint64_t t = mb_tokest(buf, n);
		CHECK(t >= 1 && t <= n);
	}
	/* a sequence cut at the end is read no further than the end (ASan builds check it) */
	char *cut = malloc(2);
	memcpy(cut, "\xE3\x81", 2);
	CHECK(mb_tokest(cut, 2) == 2); /* 1.943 + 0.980 rounds to 3, at most 2 bytes */
	free(cut);
}

TEST(test_values)
{
	/* a word 1.199 + 5 x 0.055, a space run 0.298, a word after one space 1.199 - 0.623 +
	 * 5 x 0.055: 2.623 */
	CHECK(EST("hello world") == 3);
	/* three punctuation runs 3 x 0.319, five marks 5 x 0.250, a word 1.254, digits 0.782 +
	 * 5 x 0.391: 6.253 */
	CHECK(EST("{\"id\":12345}") == 6);
	/* a long word: 1.199 + 16 x 0.055 */
	CHECK(EST("internationalize") == 2);
	/* CJK: a run 1.943 plus 0.980 per character: 4 characters 5.863 */
	CHECK(EST("日本語文") == 6);
	/* a line-break run counts once (1.442), whatever spaces follow it */
	CHECK(EST("\n        ") == 1);
	CHECK(EST("\n\n\n\n") == 1);
}

/* The result is shaped as {"success":true,"result":<result>,...}: its estimate is the sum of the
 * frame before it, the result and the frame after it (sandbox.c, io_meta), exact when the cuts
 * fall between a mark and a value, as they do in JSON. */
TEST(test_split_sums)
{
	const char *head = "{\"success\":true,\"result\":";
	const char *results[] = {"2", "[1,2,3]", "{\"name\":\"Ann\",\"city\":\"Paris\"}", "\"text with words\"",
				 "null", "-12.5e3"};
	const char *tail = ",\"output\":\"\",\"execution_time_ms\":0.12,\"instructions\":0}";
	for (size_t i = 0; i < sizeof results / sizeof *results; i++) {
		char all[256];
		snprintf(all, sizeof all, "%s%s%s", head, results[i], tail);
		uint64_t whole = mb_tokest(all, strlen(all));
		uint64_t parts = mb_tokest(head, strlen(head)) + mb_tokest(results[i], strlen(results[i])) +
				 mb_tokest(tail, strlen(tail));
		/* each part rounds on its own: at most one token apart per cut */
		CHECK(whole + 2 >= parts && parts + 2 >= whole);
	}
}

TEST(test_sources)
{
	CHECK(mb_io_source_of_call("upstream_call") == MB_IO_UPSTREAM);
	CHECK(mb_io_source_of_call("upstream_batch") == MB_IO_UPSTREAM);
	CHECK(mb_io_source_of_call("upstream_tools") == MB_IO_CATALOG);
	CHECK(mb_io_source_of_call("skill_source") == MB_IO_SKILLS);
	CHECK(mb_io_source_of_call("list_skills") == MB_IO_SKILLS);
	CHECK(mb_io_source_of_call("client_request") == MB_IO_CLIENT);
	CHECK(mb_io_source_of_call("pii_restore") == MB_IO_CLIENT);
	CHECK_STR(mb_io_source_name(MB_IO_CONTEXT), "context_vars");
	CHECK_STR(mb_io_source_name(MB_IO_NSOURCES), "client");
	mb_exec_io io;
	memset(&io, 0, sizeof io);
	mb_io_add(&io, MB_IO_WORKSPACE, "hello world", 11);
	mb_io_add(&io, MB_IO_WORKSPACE, "hello world", 11);
	mb_io_add(&io, MB_IO_UPSTREAM, "", 0);
	mb_io_add(NULL, MB_IO_UPSTREAM, "x", 1);
	CHECK(io.in_bytes[MB_IO_WORKSPACE] == 22 && io.in_tokens[MB_IO_WORKSPACE] == 6);
	CHECK(io.in_bytes[MB_IO_UPSTREAM] == 0 && io.in_tokens[MB_IO_UPSTREAM] == 0);
}

int main(void)
{
	RUN(test_bounds);
	RUN(test_values);
	RUN(test_split_sums);
	RUN(test_sources);
	return UNIT_END();
}
