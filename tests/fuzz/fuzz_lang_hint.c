/* fuzz_lang_hint.c - libFuzzer target: src/lang_hint.c over the code an agent sends.
 *
 * Input layout: byte 0 picks how the error message is made (none, "code:N: ..." with N from
 * byte 1, or a run-time message naming a nil global or field taken from the rest); the rest is
 * the code. Every entry point runs on it: the fence finder, the syntax hint with and without
 * the message, the run-time hint, the tag hint of a fence that was found. Invariants (a
 * violation aborts): a found fence's ranges are in bounds and ordered (opening line, then the
 * closing line), its tag lies inside the opening line, code that starts (after whitespace) with
 * neither a backtick nor a tilde is never fenced, and the code with the fence lines blanked (what
 * sandbox.c runs) is not fenced again; every hint is NULL or a NUL-terminated sentence that
 * starts with "moonbox runs Lua 5.4". ASan and UBSan watch the line scanner's fixed buffer and
 * its long-bracket state across lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang_hint.h"

static void check_hint(const char *h)
{
	if (h && strncmp(h, "moonbox runs Lua 5.4", 20) != 0) {
		fprintf(stderr, "hint without the prefix: %s\n", h);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	unsigned mode = data[0] % 3, line = data[1];
	const char *code = (const char *)data + 2;
	size_t len = size - 2;
	char err[160];
	const char *error = NULL;
	if (mode == 1) {
		snprintf(err, sizeof err, "code:%u: syntax error near 'x'", line);
		error = err;
	} else if (mode == 2) {
		static const char *const names[] = {"global 'len'", "global 'f'", "field 'loads'",
						    "global 'JSON'", "field 'search'", "method 'append'"};
		snprintf(err, sizeof err, "code:1: attempt to call a nil value (%s)", names[line % 6]);
		error = err;
	}
	check_hint(mb_lang_hint(code, len));
	check_hint(mb_lang_syntax_hint(code, len, error));
	if (error)
		check_hint(mb_lang_runtime_hint(code, len, error));

	mb_lang_fence f;
	if (!mb_lang_fence_find(code, len, &f))
		return 0;
	if (!(f.open_start < f.open_end && f.open_end < f.close_start && f.close_start < f.close_end &&
	      f.close_end <= len)) {
		fprintf(stderr, "fence ranges out of order: %zu %zu %zu %zu of %zu\n", f.open_start,
			f.open_end, f.close_start, f.close_end, len);
		abort();
	}
	if (f.tag < code + f.open_start || f.tag + f.tag_len > code + f.open_end)
		abort();
	for (size_t i = 0; i < f.open_start; i++)
		if (!strchr(" \t\r\n", code[i]) || code[i] == 0)
			abort(); /* something but whitespace before the fence */
	if (code[f.open_start] != '`' && code[f.open_start] != '~')
		abort();
	check_hint(mb_lang_tag_hint(f.tag, f.tag_len));
	char *copy = malloc(len);
	if (!copy)
		return 0;
	memcpy(copy, code, len);
	memset(copy + f.open_start, ' ', f.open_end - f.open_start);
	memset(copy + f.close_start, ' ', f.close_end - f.close_start);
	mb_lang_fence again;
	if (mb_lang_fence_find(copy, len, &again)) {
		fprintf(stderr, "unfenced code is fenced again\n");
		abort();
	}
	free(copy);
	return 0;
}
