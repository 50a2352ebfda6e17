/* yaml.h - YAML text to Lua values, with libyaml (Debian's libyaml-0-2), for the host only.
 *
 * Workflow files (lua/mcp/workflows.lua) may be YAML. The result has the same shape as a JSON
 * decode (json.h): mappings become tables with string keys, sequences tables marked as JSON
 * arrays, null json.null; plain scalars are resolved as YAML 1.2's core schema does (null, true,
 * false, integers, floats), quoted ones stay strings. One document per text; aliases are refused
 * (a few lines of aliases can expand to gigabytes) and nesting is bounded. Loop thread; the
 * input is trusted configuration but is still bounded by its caller (workflow_max_bytes).
 */
#ifndef MB_YAML_H
#define MB_YAML_H

#include <lua.h>
#include <stddef.h>

/// Decodes one YAML document and pushes its value. Does not raise (memory errors aside, which
/// propagate as Lua errors: call it from a protected context).
/// @param L         the state
/// @param buf       the YAML text (need not be NUL-terminated)
/// @param len       its length
/// @param max_depth nesting limit of mappings and sequences
/// @param err       receives "line L column C: problem" on failure
/// @param errlen    size of err
/// @returns 0 with the value pushed, or -1 with err set and nothing pushed
int mb_yaml_decode(lua_State *L, const char *buf, size_t len, int max_depth, char *err, size_t errlen);

/// lua_CFunction for the host's mb table: yaml_decode(text) -> value | nil, err.
int mb_yaml_decode_lua(lua_State *L);

#endif
