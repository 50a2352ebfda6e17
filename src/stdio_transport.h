/* stdio.h - the stdio transport: newline-delimited JSON-RPC on stdin/stdout through libuv.
 *
 * Reads lines of any length up to max_line bytes (a longer line is discarded and reported once
 * through on_oversize, with its JSON-RPC id when its first MB_STDIO_ID_SCAN bytes hold one),
 * strips a trailing CR, skips blank lines, and hands each line to on_line.
 * Writes are queued in order and never block the loop. on_eof fires once when stdin ends; the
 * owner then finishes in-flight work, waits for mb_stdio_pending_writes() to reach zero (on_drain),
 * and closes. Ownership: lines passed to on_line are valid only during the call.
 */
#ifndef MB_STDIO_H
#define MB_STDIO_H

#include <stddef.h>
#include <uv.h>

typedef struct mb_stdio mb_stdio;

/* How many bytes at the start of an over-long line are searched for its id. */
#define MB_STDIO_ID_SCAN 4096

typedef struct mb_stdio_callbacks {
	void (*on_line)(void *ud, const char *line, size_t len);
	/* bytes: the discarded line's length; id, id_len: the JSON text of its top-level "id" (a
	 * string literal or an integer, valid only during the call), or NULL, 0 */
	void (*on_oversize)(void *ud, size_t bytes, const char *id, size_t id_len);
	void (*on_eof)(void *ud);
	void (*on_drain)(void *ud); /* all queued writes are done */
	void *ud;
} mb_stdio_callbacks;

/// Opens fd 0 and 1 on the loop and starts reading.
/// @returns the transport or NULL (message logged)
mb_stdio *mb_stdio_open(uv_loop_t *loop, size_t max_line, const mb_stdio_callbacks *cb);

/// Queues data (a whole message including its trailing newline) for stdout; takes ownership of
/// the malloc'd buffer. A message that would take the backlog (bytes written and not yet taken
/// by the pipe) above the bound set by mb_stdio_set_backlog is refused: freed, with err naming
/// max_backlog_bytes. @returns 0, -ENOBUFS (refused), or a negative libuv error
int mb_stdio_write(mb_stdio *s, char *data, size_t len, char *err, size_t errlen);

/// Bounds the backlog (max_backlog_bytes; 0 = no bound, the default).
void mb_stdio_set_backlog(mb_stdio *s, size_t max);

typedef struct mb_stdio_backlog {
	uint64_t bytes;   /* written for stdout and not yet taken by it */
	uint64_t peak;    /* the most bytes has been */
	uint64_t refused; /* messages refused for the bound */
} mb_stdio_backlog;

/// Fills out with the backlog's figures.
void mb_stdio_get_backlog(const mb_stdio *s, mb_stdio_backlog *out);

/// Stops reading stdin (flow control: the client's writes then block in the pipe) and starts
/// again. Idempotent.
void mb_stdio_pause(mb_stdio *s);
void mb_stdio_resume(mb_stdio *s);

/// Finds the top-level "id" member in p[0..n), the first bytes of a JSON object that may be cut
/// anywhere: members before it must be complete and well-formed there; its value must be a
/// string (complete, valid escapes) or an integer. Bounded by n, never reads past it, no
/// allocation. A second "id" before the end of p gives none (ambiguous).
/// @returns 0 with the value's text at p[*off .. *off + *len), or -1 (none found)
int mb_stdio_scan_id(const char *p, size_t n, size_t *off, size_t *len);

/// Writes still in flight.
size_t mb_stdio_pending_writes(const mb_stdio *s);

/// Closes the handles; frees s when they are closed.
void mb_stdio_close(mb_stdio *s);

#endif
