/* fuzz_pg_sql.c - libFuzzer target: the SQL text the PostgreSQL store sends (mb_pg_translate in
 * src/store_pg.c): `?` placeholders to $n outside quotes, identifiers, dollar quotes and nested
 * comments, and the refusal of transaction control. Any input: no crash, no read or write out of
 * bounds (ASan), an answer or a message; the parameter count within its bound; the output no
 * longer than six bytes per input byte; and text without a `?` comes back unchanged (nothing
 * but placeholders is ever rewritten).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_pg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1 << 16)
		return 0;
	char *sql = malloc(size + 1);
	if (!sql)
		return 0;
	memcpy(sql, data, size);
	sql[size] = 0;
	size_t len = strlen(sql); /* the store refuses SQL with a NUL byte before translating */
	char msg[512] = "";
	int n = -1;
	char *out = mb_pg_translate(sql, len, &n, msg, sizeof msg);
	if (!out) {
		if (!msg[0]) {
			fprintf(stderr, "fuzz_pg_sql: refused without a message\n");
			abort();
		}
	} else {
		size_t ol = strlen(out);
		if (n < 0 || n > 32767 || ol > len * 6) {
			fprintf(stderr, "fuzz_pg_sql: %d parameters, %zu bytes out of %zu\n", n, ol, len);
			abort();
		}
		if (!memchr(sql, '?', len) && (ol != len || memcmp(out, sql, len) != 0 || n != 0)) {
			fprintf(stderr, "fuzz_pg_sql: text without a placeholder was changed\n");
			abort();
		}
		free(out);
	}
	free(sql);
	return 0;
}
