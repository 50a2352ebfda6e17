/* log.c - the stderr logger. stdout belongs to the MCP transport; every diagnostic goes here,
 * one line each, prefixed with the level so a supervising client can filter it. Also the one
 * helper that writes an error message into a caller's buffer. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static const char *const names[] = { "debug", "info", "notice", "warning", "error", "critical",
				     "alert", "emergency" };
/* Set once at start-up before threads exist; read by all threads. */
static atomic_int threshold = MB_LOG_INFO;

int mb_log_level_from_name(const char *name)
{
	for (int i = 0; i < 8; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

int mb_log_set_level(const char *name)
{
	int l = mb_log_level_from_name(name);
	if (l < 0)
		return -1;
	atomic_store(&threshold, l);
	return 0;
}

const char *mb_log_level_name(mb_log_level l)
{
	return (unsigned)l < 8 ? names[l] : "info";
}

void mb_log(mb_log_level l, const char *fmt, ...)
{
	if ((int)l < atomic_load(&threshold))
		return;
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	fprintf(stderr, "moonbox: %s: %s\n", names[l], buf);
}

void mb_vseterr(char *err, size_t errlen, const char *fmt, va_list ap)
{
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
}

void mb_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	mb_vseterr(err, errlen, fmt, ap);
	va_end(ap);
}
