/* log.h - logging to stderr (never stdout, which carries only MCP messages), and the error
 * messages that functions hand back to their callers (MB_ERR_MAX, mb_seterr).
 * Levels follow MCP/syslog names. The threshold is process-wide and set once at start. */
#ifndef MB_LOG_H
#define MB_LOG_H

#include <stdarg.h>
#include <stddef.h>

/* The size of an error-message buffer (`char err[MB_ERR_MAX]` passed on as err, errlen): the
 * largest a message needs - a workspace message quotes a path of up to 392 bytes as shown
 * (workspace.c), a start-up message a file path and SQLite's text - so no message is cut
 * shorter than by its own caps. A message that wraps another one may still be cut at this size. */
#define MB_ERR_MAX 1024

typedef enum {
	MB_LOG_DEBUG, MB_LOG_INFO, MB_LOG_NOTICE, MB_LOG_WARNING, MB_LOG_ERROR, MB_LOG_CRIT,
	MB_LOG_ALERT, MB_LOG_EMERG
} mb_log_level;

/// Sets the threshold from a level name; returns 0, or -1 for an unknown name.
int mb_log_set_level(const char *name);

/// Parses a level name; returns the level or -1.
int mb_log_level_from_name(const char *name);

/// The MCP name of a level ("debug" ... "emergency").
const char *mb_log_level_name(mb_log_level l);

/// Writes one line "moonbox: <level>: message" to stderr when l >= threshold.
void mb_log(mb_log_level l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/// Formats an error message into err (errlen bytes, cut to fit); does nothing when err is NULL
/// or errlen is 0, so callers may pass no buffer.
void mb_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/// mb_seterr with a va_list.
void mb_vseterr(char *err, size_t errlen, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

#endif
