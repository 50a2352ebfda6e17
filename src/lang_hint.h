/* lang_hint.h - a one-line hint when code that failed to parse looks like Python or JavaScript.
 *
 * Agents that used other code-execution servers send `import json` or `const x = ...`; Lua's own
 * message ("unexpected symbol near 'json'") does not tell them that moonbox runs Lua 5.4, nor
 * what to write instead. The sandbox appends this hint to syntax errors only (sandbox.c). Pure
 * function over the code's bytes, any thread.
 */
#ifndef MB_LANG_HINT_H
#define MB_LANG_HINT_H

#include <stddef.h>

/// Looks at the first lines of code (at most 256 lines, 64 KiB) for a Python or JavaScript form
/// and returns a static hint naming the language and the Lua idiom, e.g. "moonbox runs Lua 5.4;
/// this looks like Python: there is no import, json and re are already loaded (json.decode(s))".
/// @param code the source (need not be NUL-terminated)
/// @param len  its length
/// @returns the hint, or NULL when nothing looks foreign
const char *mb_lang_hint(const char *code, size_t len);

#endif
