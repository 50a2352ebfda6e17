/* fuzz_json_check.c - libFuzzer target: the tree-free JSON checker (src/json_check.c) against
 * jansson.
 *
 * Every input goes through tests/unit/json_check_ref.h: the checker and jansson (with json.c's
 * retry for integers outside int64, "\u0000" in keys allowed) must both call it valid or both
 * invalid, and on valid text the checker's value count must be the number of values in
 * jansson's tree. A difference aborts. Then the limits: with a value limit of half the count the
 * checker must stop with MB_JSON_CHECK_NODES having counted exactly one more than the limit, and
 * with a depth limit of 2 it must never say valid for text that nests deeper.
 */
#include "../unit/json_check_ref.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int init;
	if (!init) {
		mb_json_global_init();
		init = 1;
	}
	const char *s = (const char *)data;
	char why[300];
	int rc = json_check_ref_compare(s, size, why, sizeof why);
	if (rc == JSON_CHECK_REF_DIFFERENT) {
		fprintf(stderr, "fuzz_json_check: %s\n", why);
		abort();
	}
	if (rc != JSON_CHECK_REF_VALID)
		return 0;
	uint64_t all = 0, n = 0;
	if (mb_json_check(s, size, NULL, &all, NULL, 0) != MB_JSON_CHECK_OK)
		abort();
	if (all >= 2) {
		mb_json_check_limits lim = {.max_nodes = all / 2, .node_limit_name = "x"};
		if (mb_json_check(s, size, &lim, &n, NULL, 0) != MB_JSON_CHECK_NODES || n != all / 2 + 1)
			abort();
	}
	mb_json_check_limits shallow = {.max_depth = 2};
	int deep = 0, d = 0, in_str = 0;
	for (size_t i = 0; i < size; i++) { /* the nesting, outside strings */
		char c = s[i];
		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = 0;
		} else if (c == '"') {
			in_str = 1;
		} else if (c == '[' || c == '{') {
			if (++d > deep)
				deep = d;
		} else if (c == ']' || c == '}') {
			d--;
		}
	}
	if ((mb_json_check(s, size, &shallow, NULL, NULL, 0) == MB_JSON_CHECK_OK) != (deep <= 2))
		abort();
	return 0;
}
