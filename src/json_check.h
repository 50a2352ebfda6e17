/* json_check.h - is this text one JSON value, and how many values does it hold? Answered in one
 * pass over the bytes, without building anything.
 *
 * The server checks JSON text it did not make itself before it splices it into a message or
 * decodes it: what a worker process sends (the result, host-call and upstream arguments, log
 * data). jansson builds a tree to answer that - a 15 MB result of 5 million empty tables took
 * over 1 GB of the server's memory per check - so this checker walks the text once with a small
 * fixed stack (one bit per open array or object) and counts values as it goes, stopping as soon
 * as a count, depth or syntax rule fails.
 *
 * What counts as valid is what mb_json_decode accepts (json.h; jansson 2.14 with JSON_DECODE_ANY
 * | JSON_ALLOW_NUL, integers outside int64 read as reals), plus "\u0000" in object keys (valid
 * JSON that the sandbox's encoder writes; jansson refuses to hold it but the text is spliced, not
 * decoded), and minus a raw NUL byte anywhere (jansson takes "42\0" for 42: the NUL ends its
 * input; spliced into an answer the byte would go with it). tests/unit/test_json_check.c and tests/fuzz/fuzz_json_check.c compare it with
 * jansson. A value is an object, array, string, number, true, false or null; keys are not
 * values. Thread rules: none (no state, no allocation except a copy of a number of 64 bytes or
 * more that could overflow a double).
 */
#ifndef MB_JSON_CHECK_H
#define MB_JSON_CHECK_H

#include <stddef.h>
#include <stdint.h>

#define MB_JSON_CHECK_MAX_DEPTH 2048 /* jansson's own parsing depth */

typedef struct {
	int max_depth;               /* arrays and objects nested; 0 or above the cap: the cap */
	uint64_t max_nodes;          /* values; 0 = no limit */
	const char *node_limit_name; /* named in the message (static), e.g. "max_result_nodes" */
	const char *depth_limit_name;/* e.g. "json_max_depth" (static) */
} mb_json_check_limits;

enum {
	MB_JSON_CHECK_OK = 0,
	MB_JSON_CHECK_INVALID = -1, /* not JSON text */
	MB_JSON_CHECK_NODES = -2,   /* more than max_nodes values */
	MB_JSON_CHECK_DEPTH = -3,   /* nested deeper than max_depth */
	MB_JSON_CHECK_NOMEM = -4,   /* out of memory (a long number's copy) */
};

/// Checks that s[0..n) is exactly one JSON value (whitespace around it allowed) within the limits.
/// @param s      the text (need not be NUL-terminated)
/// @param n      its length
/// @param lim    limits, or NULL for none but the depth cap
/// @param nodes  set to the values counted (when the text is valid: all of them); may be NULL
/// @param err    receives a message on failure, e.g. "not JSON at byte 12: ..." or
///               "JSON holds more than 100 values (max_result_nodes=100)"; may be NULL
/// @param errlen its size
/// @returns MB_JSON_CHECK_OK or one of the negative MB_JSON_CHECK_* codes
int mb_json_check(const char *s, size_t n, const mb_json_check_limits *lim, uint64_t *nodes,
		  char *err, size_t errlen);

#endif
