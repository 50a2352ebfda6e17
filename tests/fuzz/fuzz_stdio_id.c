/* fuzz_stdio_id.c - libFuzzer target for mb_stdio_scan_id (src/stdio_transport.c), which reads
 * the first bytes of an over-long stdio line - hostile, cut anywhere - to answer the request
 * under its own id. The invariant (tests/unit/stdio_id_check.h, against jansson): a found id lies
 * inside the input and is a string literal or an integer; when the input is a whole JSON object
 * the id found is its "id"; no prefix of such an object names another id. A violation aborts.
 * FUZZ_OPTIONS: -max_len=600
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../unit/stdio_id_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *why = stdio_id_violation((const char *)data, size);
	if (why) {
		fprintf(stderr, "fuzz_stdio_id: %s: %.*s\n", why, (int)size, (const char *)data);
		abort();
	}
	return 0;
}
