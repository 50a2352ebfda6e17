/* worker_wire.h - the messages between the server and a worker process (isolation = process).
 *
 * A frame on the SOCK_STREAM socketpair is a 4-byte little-endian length (of what follows), a
 * type byte and a payload of fields: unsigned 64-bit integers (8 bytes, little-endian) and byte
 * strings (a u64 length, then the bytes). Both sides read every field through a bounds-checked
 * cursor, so a short or lying frame is an error, never an overread; the server treats every
 * byte a worker sends as hostile (worker_relay.c). Who sends what:
 *
 *   server -> worker  W_INIT   the configuration (secrets blanked), once after the start
 *                     W_PROBE  instead of W_INIT, for isolation = auto's probe: the same
 *                              configuration; confine, report W_READY, run nothing
 *                     W_JOB    one execution: its id, its sequence number on this worker (its
 *                              claim slot), limits, code, context JSON, workspace quotas; or
 *                              one sent ahead, to start when the running one ends
 *                     W_REPLY  the answer to a W_CALL, W_WS or W_MINT: status, bytes
 *   worker -> server  W_READY  initialised and confined: what took effect
 *                     W_NOTIFY mcp.log / mcp.progress: kind, level, JSON
 *                     W_CALL   a host call: name, JSON arguments
 *                     W_WS     a workspace operation: op, path, data
 *                     W_MINT   a PII token for (type, value): the key stays in the server
 *                     W_DONE   the result's fields
 *                     W_CLOSING, W_DONE, W_CLOSED   for a state that ends large: the
 *                              answer goes out first, the close (lua_close) after it
 *                     W_SKIP   a job sent ahead that the server took back (its sequence
 *                              number): not run (worker_proc.h, claims)
 *
 * Thread rules: none of its own; a reader or buffer belongs to one thread.
 */
#ifndef MB_WORKER_WIRE_H
#define MB_WORKER_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum {
	W_INIT = 1, W_READY, W_JOB, W_REPLY, W_NOTIFY, W_CALL, W_WS, W_MINT, W_DONE,
	W_RECALL, /* server -> worker, only while it waits for a reply: drop the jobs sent ahead */
	W_PROBE,  /* server -> worker, first and only: confine, report, wait for the end */
	W_SKIP,   /* worker -> server: the job sent ahead with this sequence number was taken back */
	W_CLOSING, /* worker -> server, right before a W_DONE: it closes a large state after it */
	W_CLOSED,  /* worker -> server, after that W_DONE: the state is closed, it reads jobs again */
};

/* Workspace operations of W_WS (the sandbox's port, sandbox.h). */
enum { W_WS_READ = 1, W_WS_WRITE, W_WS_LIST, W_WS_DELETE, W_WS_STAT };

/* A frame being built. A failed allocation sets failed; later appends do nothing. */
typedef struct {
	char *buf;
	size_t len, cap;
	int failed;
} mb_wbuf;

/// Starts a frame of this type in b (reusing its memory).
void mb_wbuf_start(mb_wbuf *b, int type);
void mb_wbuf_u64(mb_wbuf *b, uint64_t v);
/// A byte string: its length, then the bytes (s may be NULL when n is 0).
void mb_wbuf_bytes(mb_wbuf *b, const void *s, size_t n);
void mb_wbuf_free(mb_wbuf *b);

/// Writes the frame in b to fd (whole, retrying short writes and EINTR).
/// @returns 0, or -1 (the peer is gone, or the frame failed to build)
int mb_wire_send(int fd, mb_wbuf *b);

/* A frame received: a cursor over its payload. */
typedef struct {
	int type;
	const unsigned char *p, *end;
} mb_wmsg;

/// Reads the next field; each returns 0, or -1 when the payload is too short.
int mb_wmsg_u64(mb_wmsg *m, uint64_t *v);
/// The bytes point into the frame (valid until the next read on the same reader).
int mb_wmsg_bytes(mb_wmsg *m, const char **s, size_t *n);

/* Reads frames from one descriptor; keeps a partial frame across calls. */
typedef struct {
	unsigned char *buf;
	size_t len, cap, need; /* need: bytes of the frame being read (0: header first) */
	size_t max;            /* largest payload accepted */
	uint64_t spin_ns;      /* look for data this long before sleeping (0: never) */
	int handed;            /* the frame at the start was handed out (dropped at the next call) */
} mb_wreader;

/// Reads until a whole frame is in, waiting at most timeout_ms (-1: no limit).
/// @returns 1 with *m set, 0 when the time ran out or a signal interrupted the wait (call again:
///          the partial frame is kept), -1 on end of file, a read error, or a frame over max
///          (errno EMSGSIZE)
int mb_wire_read(mb_wreader *r, int fd, int timeout_ms, mb_wmsg *m);
void mb_wreader_free(mb_wreader *r);

/// Appends n bytes read elsewhere (an event loop's read callback).
/// @returns 0, or -1 when out of memory
int mb_wreader_feed(mb_wreader *r, const char *data, size_t n);

/// The next whole frame among the bytes fed (the one handed out before is dropped first).
/// @returns 1 with *m set (valid until the next call), 0 when more bytes are needed, -1 for a
///          frame over max (errno EMSGSIZE)
int mb_wreader_next(mb_wreader *r, mb_wmsg *m);

/// A malloc'd NUL-terminated copy of n bytes of a field (which may hold NULs), or NULL.
char *mb_wire_copy(const char *s, size_t n);

#endif
