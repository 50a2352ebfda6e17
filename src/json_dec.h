/* json_dec.h - the fast path of mb_json_decode: JSON text straight to Lua values, no tree.
 *
 * jansson (json.c) stays the authority on what JSON is: this decoder accepts a subset of what
 * jansson accepts and produces the same Lua value for it, and gives up ("declines") on anything
 * else - a syntax error, a real that overflows, nesting beyond the limit, invalid UTF-8, a NUL
 * in an object key, a tripped budget - leaving the input
 * to jansson, which then produces the value or the error message exactly as before (integers
 * outside int64 become reals here, as json.c's widening makes jansson read them). Errors are
 * rare, so they cost a second parse (json.c collects the garbage of a long declined prefix
 * first); valid messages cost one pass with no allocation outside the Lua state, but for a
 * number text of 64 bytes or more (a budgeted copy for strtod). tests/unit/test_json_dec.c and the json_dec fuzz target compare both decoders.
 *
 * What this path saves is measured in docs/benchmarks.md ("After the eventfd wake-up and the
 * fast decoder"); docs/json.md explains it.
 */
#ifndef MB_JSON_DEC_H
#define MB_JSON_DEC_H

#include <lua.h>
#include <stddef.h>

#include "budget.h"

/// A value the decoder keeps as text: the object at the end of path (keys from the root, e.g.
/// params, arguments, context_vars; NULL-terminated) is read and checked like any value, then
/// replaced by what push makes of its exact text (json.c: a raw value). A value there that is
/// not an object is left as decoded.
typedef struct {
	const char *const *path;
	const size_t *len; /* strlen of each key of path */
	void (*push)(lua_State *L, const char *text, size_t len);
} mb_json_raw_at;

/// Decodes buf into a Lua value. Must run inside a protected call: Lua memory errors propagate.
/// @param L         the state to push on
/// @param buf       the JSON text (need not be NUL-terminated)
/// @param len       its length
/// @param max_depth nesting limit of arrays and objects (declines beyond it)
/// @param unique_keys nonzero: declines on a key repeated in one object (jansson's
///                  JSON_REJECT_DUPLICATES then words the error); zero: the last one wins
/// @param b         budget polled every 2048 values, or NULL
/// @param mt        stack index of the array metatable (set on every decoded array)
/// @param raw       a value to keep as text, or NULL
/// @returns 1 with the value pushed, or 0 with the stack as it was (declined)
int mb_json_dec_fast(lua_State *L, const char *buf, size_t len, int max_depth, int unique_keys,
		     mb_budget *b, int mt, const mb_json_raw_at *raw);

#endif
