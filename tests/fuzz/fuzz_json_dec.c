/* fuzz_json_dec.c - libFuzzer target: the fast JSON decoder (src/json_dec.c) against jansson.
 *
 * Every input goes through tests/unit/json_ref.h: when the fast path accepts it, jansson must
 * accept it too and hold the same value (types, exact integers, reals bit for bit, strings byte
 * for byte, array marks, keys). A difference aborts. Declining is always allowed: mb_json_decode
 * then hands the input to jansson. fuzz_json.c covers the public codec (with this fast path in
 * it) for crashes, budgets and round trips.
 */
#include "../unit/json_ref.h"

#include <lualib.h>
#include <stdint.h>
#include <stdlib.h>

static lua_State *state;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!state) {
		mb_json_global_init();
		state = luaL_newstate();
		*(void **)lua_getextraspace(state) = NULL;
	}
	char why[200];
	if (json_ref_compare(state, (const char *)data, size, why, sizeof why) == JSON_REF_DIFFERENT) {
		fprintf(stderr, "fuzz_json_dec: %s\n", why);
		abort();
	}
	if (lua_gettop(state) != 0)
		abort();
	return 0;
}
