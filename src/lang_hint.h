/* lang_hint.h - what code written as for another language or wrapped for a chat gets told.
 *
 * Agents that used other code-execution servers send `import json`, `const x = ...`, `x += 1`
 * or `len(t)`, and models often wrap the code in a Markdown fence (```lua ... ```). Lua's own
 * message ("unexpected symbol near 'json'", "attempt to call a nil value (global 'len')") does
 * not tell them that moonbox runs Lua 5.4, nor what to write instead. This module finds:
 *  - a Markdown fence around the whole code (sandbox.c runs the code without it and says so);
 *  - a one-line hint for a syntax error, from the form of the code (Python or JavaScript);
 *  - a one-line hint for a run-time error whose message names a Python or JavaScript builtin
 *    (global 'len', global 'console', field 'loads' of json, ...).
 * The sandbox appends hints to the error (sandbox.c). Lua's message is always kept. Pure
 * functions over the code's bytes, any thread.
 */
#ifndef MB_LANG_HINT_H
#define MB_LANG_HINT_H

#include <stddef.h>

/// A Markdown code fence around the whole code: the opening line (``` and its info string) and
/// the closing line, as byte ranges without their line breaks; the info string's first word.
typedef struct {
	size_t open_start, open_end;   /* the opening fence line */
	size_t close_start, close_end; /* the closing fence line */
	const char *tag;               /* the language tag ("lua", "python"; points into the code) */
	size_t tag_len;                /* 0: no tag */
} mb_lang_fence;

/// Finds one fence around the whole code: only whitespace before the opening fence (three or
/// more backticks or tildes, an info string without backticks, a line break) and after the
/// closing one (at least as many of the same character alone on the last line), and no other
/// fence line between them. Code that starts with a backtick or a tilde is never valid Lua, so
/// valid Lua is never taken for fenced code.
/// @param code the source (need not be NUL-terminated)
/// @param len  its length
/// @param f    filled when found
/// @returns 1 when the code is fenced, else 0
int mb_lang_fence_find(const char *code, size_t len, mb_lang_fence *f);

/// Looks at the first lines of code (at most 256 lines, 64 KiB) for a Python or JavaScript form
/// (outside Lua strings and comments) and returns a static hint naming the language and the Lua
/// idiom, e.g. "moonbox runs Lua 5.4; this looks like Python: there is no import, json and re
/// are already loaded (json.decode(s))".
/// @param code the source (need not be NUL-terminated)
/// @param len  its length
/// @returns the hint, or NULL when nothing looks foreign
const char *mb_lang_hint(const char *code, size_t len);

/// The same for a syntax error: the line Lua's message names ("code:3: ...") is looked at
/// first, then the others.
/// @param error Lua's message (NUL-terminated), or NULL
const char *mb_lang_syntax_hint(const char *code, size_t len, const char *error);

/// The hint for code fenced with a Python or JavaScript tag when no rule matched (the tag says
/// what the code is), or NULL for any other tag.
const char *mb_lang_tag_hint(const char *tag, size_t tag_len);

/// A hint for a run-time error whose message names a builtin of Python or JavaScript that Lua
/// lacks ("attempt to call a nil value (global 'len')": the length is #t), or NULL. A rule that
/// needs the code to be sure (field 'loads' is json.loads only when the code says json.loads)
/// looks at it outside strings and comments.
/// @param error the error message (NUL-terminated)
const char *mb_lang_runtime_hint(const char *code, size_t len, const char *error);

#endif
