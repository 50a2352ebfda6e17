/* log_capture.h - unit tests read back what the code under test logged (mb_log writes stderr):
 * unit_log_start redirects stderr into a temporary file, unit_log_text restores stderr and
 * returns what was written (cut to the caller's buffer). One capture at a time per test file. */
#ifndef MB_UNIT_LOG_CAPTURE_H
#define MB_UNIT_LOG_CAPTURE_H

#include <stdio.h>
#include <unistd.h>

typedef struct {
	FILE *file;
	int saved_stderr;
} unit_log;

static inline void unit_log_start(unit_log *lg)
{
	fflush(stderr);
	lg->file = tmpfile();
	lg->saved_stderr = dup(2);
	dup2(fileno(lg->file), 2);
}

static inline const char *unit_log_text(unit_log *lg, char *buf, size_t cap)
{
	fflush(stderr);
	dup2(lg->saved_stderr, 2);
	close(lg->saved_stderr);
	rewind(lg->file);
	size_t n = fread(buf, 1, cap - 1, lg->file);
	buf[n] = 0;
	fclose(lg->file);
	return buf;
}

#endif
