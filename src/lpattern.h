/* lpattern.h - budget-aware Lua 5.4 pattern matching for the sandbox's string table.
 *
 * The stock string.find/match/gmatch/gsub run inside C where the count hook cannot reach them,
 * so a hostile pattern ("a*a*b" on a long subject) can run for hours. This module provides
 * replacements with the same results and error messages that poll the execution budget every
 * few thousand matcher steps and stop with the budget's limit error.
 */
#ifndef MB_LPATTERN_H
#define MB_LPATTERN_H

#include <lua.h>

/// Replaces find, match, gmatch and gsub in the table at index `idx` (the sandbox's string
/// table) with the budget-aware versions. In a state with no budget attached (host states) the
/// functions behave like the stock ones, without any time limit.
/// @param L    the state owning the table
/// @param idx  stack index of the string table (relative or absolute)
/// @returns nothing; raises a Lua error only on memory exhaustion while setting the fields
void mb_lpattern_register(lua_State *L, int idx);

/// The budget-aware replacement of the string function `name` ("find", "match", "gmatch" or
/// "gsub"), or NULL for any other name (the sandbox builds its string table from these).
lua_CFunction mb_lpattern_function(const char *name);

#endif
