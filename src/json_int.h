/* json_int.h - what the two halves of the JSON codec share: json_enc.c defines these, json.c
 * (decoding, Lua-facing functions) uses them. Private to the json module (src/json*). */
#ifndef MB_JSON_INT_H
#define MB_JSON_INT_H

#include <lua.h>
#include <stddef.h>

#include "budget.h"
#include "json.h"

#define POLL_MASK 2047u /* budget check every 2048 nodes or values */

/// The limits with their defaults filled in (see mb_json_limits).
mb_json_limits json_norm_limits(const mb_json_limits *lim);

/// The budget a codec call on L charges: the state's own (sandbox) or the thread's current one.
mb_budget *json_pick_budget(lua_State *L);

/// "out of memory while <what> JSON", or the budget's limit message when a limit tripped.
void json_oom_message(mb_budget *b, char *err, size_t errlen, const char *what);

/// The nesting-limit message of the encoder (encoding != 0) or the decoder.
void json_depth_message(char *err, size_t errlen, int max_depth, int encoding);

/// Pushes the shared array metatable (made on first use; may raise a Lua memory error).
void json_push_array_mt(lua_State *L);

/// Replaces the bytes of msg that are not valid UTF-8 with '?', in place (jansson quotes input
/// text in its messages), so every error message can itself be sent as JSON.
void json_clean_message(char *msg);

/// Raises err as "<chunk>:<line>: <fn>: <err>", or the budget's sticky error when a limit
/// tripped (the Lua-facing functions of json.c and json_enc.c).
int json_raise(lua_State *L, const char *fn, const char *err);

/// json.encode(v) for mb_json_open's table (upvalue 1: the limits).
int json_l_encode(lua_State *L);

#endif
