/* unit.h - the tiny C unit-test harness: each test file defines tests with TEST(name) and lists
 * them in main() with RUN(name). CHECK records a failure with file and line and goes on; the run
 * ends with the plain "N passed, N failed" line and exits non-zero on any failure.
 * Also the file helpers several tests share: a temporary directory made and removed, a whole
 * file read. */
#ifndef MB_UNIT_H
#define MB_UNIT_H
#include <stdio.h>
#include <stdlib.h>
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

/* A new directory from the mkdtemp template tmpl ("/tmp/mb-x-XXXXXX"), its name in dir (cap
 * bytes); 0, or -1 after printing why. */
static inline int unit_tmpdir(char *dir, size_t cap, const char *tmpl)
{
	snprintf(dir, cap, "%s", tmpl);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return -1;
	}
	return 0;
}

/* Removes dir and everything below it (rm -rf); 0, or -1 after printing that it could not. */
static inline int unit_rmtree(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "  could not remove %s\n", dir);
		return -1;
	}
	return 0;
}

/* The whole file at path, NUL-terminated, in a malloc'd block (the caller frees it), its length
 * in *len; NULL when it cannot be read. */
static inline char *unit_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = n < 0 ? NULL : malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf)
		buf[n] = 0;
	*len = n < 0 ? 0 : (size_t)n;
	return buf;
}
#endif
