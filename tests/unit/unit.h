/* unit.h - the tiny C unit-test harness: each test file defines tests with TEST(name) and lists
 * them in main() with RUN(name). CHECK records a failure with file and line and goes on; the run
 * ends with the plain "N passed, N failed" line and exits non-zero on any failure. */
#ifndef MB_UNIT_H
#define MB_UNIT_H
#include <stdio.h>
#include <string.h>

static int unit_failed_checks;
static int unit_passed, unit_failed;

#define TEST(name) static void name(void)
#define CHECK(cond) do { if (!(cond)) { unit_failed_checks++; \
	fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_STR(a, b) do { const char *a_ = (a), *b_ = (b); \
	if (!a_ || !b_ || strcmp(a_, b_) != 0) { unit_failed_checks++; \
	fprintf(stderr, "  FAIL %s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); } } while (0)
#define RUN(name) do { int before_ = unit_failed_checks; name(); \
	if (unit_failed_checks == before_) { unit_passed++; printf("ok   %s\n", #name); } \
	else { unit_failed++; printf("FAIL %s\n", #name); } } while (0)
#define UNIT_END() (printf("%d passed, %d failed\n", unit_passed, unit_failed), unit_failed ? 1 : 0)
#endif
