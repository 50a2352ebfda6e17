/* stdio_transport.c - newline-delimited JSON-RPC framing on stdin/stdout.
 *
 * stdin may be a pipe, a terminal or a regular file; stdout a pipe, a terminal, or anything else
 * (then written with blocking write(2)). Incoming bytes accumulate in one growing buffer; lines
 * are cut at '\n' (scanning only new bytes, so a long line costs O(n)), a trailing '\r' is
 * dropped, and a line longer than max_line switches to discard mode until its newline, after
 * which on_oversize reports how many bytes were dropped and the request's id when its first
 * MB_STDIO_ID_SCAN bytes (kept when the discarding starts) hold one: mb_stdio_scan_id reads them
 * as the start of a JSON object and finds a top-level "id" member, so the caller gets its answer
 * under its own id. Outgoing messages try uv_try_write first and queue the rest, so a slow reader
 * never stalls the loop.
 */
#include "stdio_transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

struct mb_stdio {
	uv_loop_t *loop;
	mb_stdio_callbacks cb;
	size_t max_line;
	union {
		uv_pipe_t pipe;
		uv_tty_t tty;
	} in, out;
	int in_kind, out_kind; /* uv_handle_type of each; UV_FILE means fs reads / blocking writes */
	uv_fs_t fs_req;
	char rbuf[65536];
	char *buf;
	size_t len, cap, scan;
	int discarding;
	size_t discarded;
	char head[MB_STDIO_ID_SCAN]; /* the first bytes of the line being discarded */
	size_t head_len;
	size_t pending_writes;
	/* Messages written during one loop iteration are batched and flushed together from an
	 * idle handle: one write(2) for many responses under pipelined load. An idle handle (not a
	 * check handle) because while it is active the loop does not block in poll, so a message
	 * written from a timer callback leaves at once too. */
	char *obuf;
	size_t olen, ocap;
	size_t queued;    /* bytes in write requests not yet done (the batch is olen) */
	size_t backlog_max; /* 0 = none */
	mb_stdio_backlog bl;
	uv_idle_t flusher;
	char *spent;      /* a large written message's buffer, freed by the flusher (write_cb) */
	int eof;
	int paused;
	char *held;       /* bytes read but not yet cut into lines because we paused */
	size_t held_len;
	int fs_reading;   /* a uv_fs_read is in flight (stdin is a file) */
	int open_handles;
};

typedef struct {
	uv_write_t req;
	char *data;
	size_t len;
	mb_stdio *s;
} write_req;

#define OBUF_KEEP ((size_t)1 << 20) /* batch buffer kept between writes up to this size */
#define SPENT_LATER ((size_t)1 << 20) /* written buffers this large are freed after the next write */

/* Appends bytes to the held (not yet cut) input, keeping their order. */
static int hold(mb_stdio *s, const char *data, size_t n)
{
	char *h = realloc(s->held, s->held_len + n);
	if (!h) {
		mb_log(MB_LOG_WARNING, "stdio: out of memory while pausing; reading on");
		return -1;
	}
	memcpy(h + s->held_len, data, n);
	s->held = h;
	s->held_len += n;
	return 0;
}

/* ---- the id of an over-long request ---------------------------------------------------- */

static size_t skip_ws(const char *p, size_t n, size_t i)
{
	while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
		i++;
	return i;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A JSON string starting at p[i] == '"'. Returns the index after its closing quote, or 0 when
 * it is not complete and well-formed within n (escapes checked, no raw control bytes). When
 * is_id is given, sets it to whether the decoded string is exactly "id" (escapes of ASCII
 * letters decoded; anything else makes it not "id"). */
static size_t scan_string(const char *p, size_t n, size_t i, int *is_id)
{
	char dec[3];
	size_t dn = 0;
	int plain = 1; /* decoded so far fits dec and is ASCII */
	i++;
	while (i < n) {
		unsigned char c = (unsigned char)p[i];
		char d;
		if (c == '"') {
			if (is_id)
				*is_id = plain && dn == 2 && dec[0] == 'i' && dec[1] == 'd';
			return i + 1;
		}
		if (c < 0x20)
			return 0;
		if (c == '\\') {
			if (i + 1 >= n)
				return 0;
			char e = p[i + 1];
			switch (e) {
			case '"': case '\\': case '/': d = e; i += 2; break;
			case 'b': case 'f': case 'n': case 'r': case 't': d = 0; i += 2; break;
			case 'u': {
				if (i + 6 > n)
					return 0;
				int v = 0;
				for (int k = 2; k < 6; k++) {
					int h = hexval(p[i + k]);
					if (h < 0)
						return 0;
					v = v * 16 + h;
				}
				d = v > 0 && v < 0x80 ? (char)v : 0;
				i += 6;
				break;
			}
			default:
				return 0;
			}
		} else {
			d = c < 0x80 ? (char)c : 0;
			i++;
		}
		if (!d || dn == sizeof dec)
			plain = 0;
		else
			dec[dn++] = d;
	}
	return 0;
}

/* A JSON integer (-?(0|[1-9][0-9]*)) at p[i], followed by what may end a value. Returns the
 * index after it, or 0 (not an integer: a fraction, an exponent, a leading zero, cut short). At
 * most 20 characters: longer does not fit a 64-bit id (the host checks the value's range). */
static size_t scan_integer(const char *p, size_t n, size_t i)
{
	size_t start = i;
	if (i < n && p[i] == '-')
		i++;
	if (i >= n || p[i] < '0' || p[i] > '9')
		return 0;
	if (p[i] == '0' && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '9')
		return 0;
	while (i < n && p[i] >= '0' && p[i] <= '9')
		i++;
	if (i >= n || i - start > 20)
		return 0;
	char c = p[i];
	if (c == ',' || c == '}' || c == ' ' || c == '\t' || c == '\n' || c == '\r')
		return i;
	return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* true, false, null or a JSON number at p[i], with at least one byte after it in p. Returns the
 * index after it, or 0. */
static size_t scan_scalar(const char *p, size_t n, size_t i)
{
	static const char *const lit[] = { "true", "false", "null" };
	for (int k = 0; k < 3; k++) {
		size_t l = strlen(lit[k]);
		if (i + l < n && memcmp(p + i, lit[k], l) == 0)
			return i + l;
	}
	if (i < n && p[i] == '-')
		i++;
	if (i >= n || !is_digit(p[i]))
		return 0;
	if (p[i] == '0')
		i++;
	else
		while (i < n && is_digit(p[i]))
			i++;
	if (i < n && p[i] == '.') {
		i++;
		if (i >= n || !is_digit(p[i]))
			return 0;
		while (i < n && is_digit(p[i]))
			i++;
	}
	if (i < n && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < n && (p[i] == '+' || p[i] == '-'))
			i++;
		if (i >= n || !is_digit(p[i]))
			return 0;
		while (i < n && is_digit(p[i]))
			i++;
	}
	return i < n ? i : 0;
}

#define SCAN_MAX_DEPTH 64

/* Skips one JSON value (any kind) at p[i]; returns the index after it, or 0 when it is not
 * complete within n or nests deeper than SCAN_MAX_DEPTH. Strings, literals, numbers and the
 * nesting of brackets are checked exactly (so what is inside a value can never be taken for a
 * top-level member); the order of commas and colons inside is not. */
static size_t skip_value(const char *p, size_t n, size_t i)
{
	char stack[SCAN_MAX_DEPTH];
	int depth = 0;
	for (;;) {
		i = skip_ws(p, n, i);
		if (i >= n)
			return 0;
		char c = p[i];
		if (c == '"') {
			i = scan_string(p, n, i, NULL);
			if (!i)
				return 0;
		} else if (c == '{' || c == '[') {
			if (depth == SCAN_MAX_DEPTH)
				return 0;
			stack[depth++] = c == '{' ? '}' : ']';
			i++;
			continue;
		} else if (c == '}' || c == ']') {
			if (!depth || stack[depth - 1] != c)
				return 0;
			depth--;
			i++;
		} else if (c == ',' || c == ':') {
			if (!depth)
				return 0;
			i++;
			continue;
		} else {
			i = scan_scalar(p, n, i);
			if (!i)
				return 0;
		}
		if (!depth)
			return i;
	}
}

int mb_stdio_scan_id(const char *p, size_t n, size_t *off, size_t *len)
{
	size_t i = skip_ws(p, n, 0);
	int found = 0;
	if (i >= n || p[i] != '{')
		return -1;
	i++;
	for (;;) {
		i = skip_ws(p, n, i);
		if (i >= n || p[i] != '"')
			break;
		int is_id = 0;
		i = scan_string(p, n, i, &is_id);
		if (!i)
			break;
		i = skip_ws(p, n, i);
		if (i >= n || p[i] != ':')
			break;
		i = skip_ws(p, n, i + 1);
		if (i >= n)
			break;
		size_t vstart = i;
		if (is_id) {
			if (found)
				return -1; /* "id" twice: which one a parser keeps is not ours to guess */
			if (p[i] == '"')
				i = scan_string(p, n, i, NULL);
			else
				i = scan_integer(p, n, i);
			if (!i)
				return -1; /* null, a fraction, an object, or cut short: no id to answer */
			*off = vstart;
			*len = i - vstart;
			found = 1;
		} else {
			i = skip_value(p, n, i);
			if (!i)
				break;
		}
		i = skip_ws(p, n, i);
		if (i >= n || p[i] != ',')
			break;
		i++;
	}
	return found ? 0 : -1;
}

/* Keeps the first bytes of a line that starts being discarded: what was buffered, then data. */
static void keep_head(mb_stdio *s, const char *data, size_t take)
{
	size_t a = s->len < sizeof s->head ? s->len : sizeof s->head;
	memcpy(s->head, s->buf, a);
	size_t b = take < sizeof s->head - a ? take : sizeof s->head - a;
	memcpy(s->head + a, data, b);
	s->head_len = a + b;
}

static void report_oversize(mb_stdio *s)
{
	size_t off = 0, len = 0;
	int has = mb_stdio_scan_id(s->head, s->head_len, &off, &len) == 0;
	if (s->cb.on_oversize)
		s->cb.on_oversize(s->cb.ud, s->discarded, has ? s->head + off : NULL, has ? len : 0);
	s->head_len = 0;
}

static void deliver(mb_stdio *s, const char *data, size_t n)
{
	while (n) {
		if (s->paused && hold(s, data, n) == 0)
			return; /* the rest waits for mb_stdio_resume */
		const char *nl = memchr(data, '\n', n);
		size_t take = nl ? (size_t)(nl - data) : n;
		if (s->discarding) {
			s->discarded += take + (nl ? 1 : 0);
			if (nl) {
				s->discarding = 0;
				report_oversize(s);
				s->discarded = 0;
			}
		} else if (s->len + take > s->max_line) {
			s->discarding = 1;
			s->discarded = s->len + take + (nl ? 1 : 0);
			keep_head(s, data, take);
			s->len = 0;
			if (nl) {
				s->discarding = 0;
				report_oversize(s);
				s->discarded = 0;
			}
		} else {
			if (s->len + take + 1 > s->cap) {
				size_t cap = s->cap ? s->cap : 4096;
				while (cap < s->len + take + 1)
					cap *= 2;
				char *nb = realloc(s->buf, cap);
				if (!nb) {
					mb_log(MB_LOG_ERROR, "stdio: out of memory for a %zu-byte line; discarding it",
					       s->len + take);
					s->discarding = 1;
					s->discarded = s->len + take;
					keep_head(s, data, take);
					s->len = 0;
					data += take;
					n -= take;
					continue;
				}
				s->buf = nb;
				s->cap = cap;
			}
			memcpy(s->buf + s->len, data, take);
			s->len += take;
			if (nl) {
				size_t l = s->len;
				if (l && s->buf[l - 1] == '\r')
					l--;
				s->buf[l] = 0;
				size_t i = 0;
				while (i < l && (s->buf[i] == ' ' || s->buf[i] == '\t'))
					i++;
				s->len = 0;
				if (i < l)
					s->cb.on_line(s->cb.ud, s->buf, l);
			}
		}
		if (!nl)
			break;
		data = nl + 1;
		n -= take + 1;
	}
}

static void finish_input(mb_stdio *s)
{
	if (s->eof == 1)
		return;
	if (s->held) {
		s->eof = 2; /* finish once the held lines are handled (mb_stdio_resume) */
		return;
	}
	s->eof = 1;
	/* A last line without a newline still counts. */
	if (s->discarding) {
		report_oversize(s);
	} else if (s->len) {
		deliver(s, "\n", 1);
	}
	if (s->cb.on_eof)
		s->cb.on_eof(s->cb.ud);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	mb_stdio *s = h->data;
	*buf = uv_buf_init(s->rbuf, sizeof s->rbuf);
}

static void read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	mb_stdio *s = st->data;
	if (n > 0) {
		deliver(s, buf->base, (size_t)n);
	} else if (n < 0) {
		if (n != UV_EOF)
			mb_log(MB_LOG_ERROR, "stdio: read error: %s", uv_strerror((int)n));
		uv_read_stop(st);
		finish_input(s);
	}
}

static void fs_read_cb(uv_fs_t *req);

static void fs_read_next(mb_stdio *s)
{
	uv_buf_t b = uv_buf_init(s->rbuf, sizeof s->rbuf);
	s->fs_reading = 1;
	if (uv_fs_read(s->loop, &s->fs_req, 0, &b, 1, -1, fs_read_cb) != 0) {
		s->fs_reading = 0;
		finish_input(s);
	}
}

static void fs_read_cb(uv_fs_t *req)
{
	mb_stdio *s = req->data;
	ssize_t n = req->result;
	uv_fs_req_cleanup(req);
	s->fs_reading = 0;
	if (n > 0) {
		deliver(s, s->rbuf, (size_t)n);
		if (!s->paused)
			fs_read_next(s);
		return;
	}
	if (n < 0)
		mb_log(MB_LOG_ERROR, "stdio: read error: %s", uv_strerror((int)n));
	finish_input(s);
}

static int open_stream(mb_stdio *s, uv_file fd, int readable, int *kind, void *handle)
{
	uv_handle_type t = uv_guess_handle(fd);
	int rc;
	if (t == UV_NAMED_PIPE) {
		rc = uv_pipe_init(s->loop, handle, 0);
		if (!rc)
			rc = uv_pipe_open(handle, fd);
	} else if (t == UV_TTY) {
		rc = uv_tty_init(s->loop, handle, fd, readable);
	} else {
		*kind = UV_FILE;
		return 0;
	}
	if (rc)
		return rc;
	*kind = t;
	((uv_handle_t *)handle)->data = s;
	s->open_handles++;
	return 0;
}

mb_stdio *mb_stdio_open(uv_loop_t *loop, size_t max_line, const mb_stdio_callbacks *cb)
{
	mb_stdio *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->loop = loop;
	s->cb = *cb;
	s->max_line = max_line;
	int rc = open_stream(s, 0, 1, &s->in_kind, &s->in);
	if (!rc)
		rc = open_stream(s, 1, 0, &s->out_kind, &s->out);
	if (rc) {
		mb_log(MB_LOG_ERROR, "stdio: cannot open stdin/stdout: %s", uv_strerror(rc));
		return NULL;
	}
	uv_idle_init(loop, &s->flusher);
	s->flusher.data = s;
	s->open_handles++;
	if (s->in_kind == UV_FILE) {
		s->fs_req.data = s;
		fs_read_next(s);
		rc = 0;
	} else {
		rc = uv_read_start((uv_stream_t *)&s->in, alloc_cb, read_cb);
	}
	if (rc) {
		mb_log(MB_LOG_ERROR, "stdio: cannot read stdin: %s", uv_strerror(rc));
		return NULL;
	}
	return s;
}

static void flush(uv_idle_t *h);

static void write_cb(uv_write_t *req, int status)
{
	write_req *w = (write_req *)req;
	mb_stdio *s = w->s;
	if (status)
		mb_log(MB_LOG_ERROR, "stdio: write error: %s", uv_strerror(status));
	s->queued -= w->len;
	/* libuv starts the next queued write only in the loop's next iteration, after this callback.
	 * Freeing a large buffer is a munmap (main.c's M_MMAP_THRESHOLD), ~2.5 ms for a 20 MiB
	 * answer: meanwhile the client reads the end of that line alone and parses it before it
	 * reads the small answers queued behind it (a ping came 50-70 ms after a 10 MiB result's line
	 * instead of with it). With more output waiting, the buffer is freed by the flusher, which
	 * runs after that iteration's writes (the idle phase follows libuv's pending writes). */
	if (!status && w->len >= SPENT_LATER && (s->pending_writes > 1 || s->olen)) {
		free(s->spent);
		s->spent = w->data;
		uv_idle_start(&s->flusher, flush);
	} else {
		free(w->data);
	}
	free(w);
	s->pending_writes--;
	if (!s->pending_writes && s->cb.on_drain)
		s->cb.on_drain(s->cb.ud);
}

/* Hands the batch to libuv: as much as the pipe takes now, the rest as one queued write. */
static void flush_batch(mb_stdio *s)
{
	if (!s->olen)
		return;
	uv_stream_t *st = (uv_stream_t *)&s->out;
	uv_buf_t b = uv_buf_init(s->obuf, (unsigned)s->olen);
	if (!s->pending_writes) {
		int n = uv_try_write(st, &b, 1);
		if (n == (int)s->olen) {
			s->olen = 0;
			if (s->ocap > OBUF_KEEP) {
				free(s->obuf);
				s->obuf = NULL;
				s->ocap = 0;
			}
			if (s->cb.on_drain)
				s->cb.on_drain(s->cb.ud);
			return;
		}
		if (n > 0) {
			b.base += n;
			b.len -= (size_t)n;
		} else if (n != UV_EAGAIN) {
			mb_log(MB_LOG_ERROR, "stdio: write error: %s", uv_strerror(n));
			s->olen = 0;
			return;
		}
	}
	write_req *w = malloc(sizeof *w);
	char *copy = w ? malloc(b.len) : NULL;
	if (!copy) {
		free(w);
		mb_log(MB_LOG_ERROR, "stdio: out of memory queueing %zu bytes of output", (size_t)b.len);
		s->olen = 0;
		return;
	}
	memcpy(copy, b.base, b.len);
	s->olen = 0;
	if (s->ocap > OBUF_KEEP) { /* a large answer's buffer is not kept for ever */
		free(s->obuf);
		s->obuf = NULL;
		s->ocap = 0;
	}
	w->data = copy;
	w->len = b.len;
	s->queued += b.len;
	w->s = s;
	b.base = copy;
	int rc = uv_write(&w->req, st, &b, 1, write_cb);
	if (rc) {
		mb_log(MB_LOG_ERROR, "stdio: write error: %s", uv_strerror(rc));
		s->queued -= w->len;
		free(copy);
		free(w);
		return;
	}
	s->pending_writes++;
}

/* The idle handle: the batch, then a spent buffer (write_cb) once the writes have been made. */
static void flush(uv_idle_t *h)
{
	mb_stdio *s = h->data;
	uv_idle_stop(h);
	flush_batch(s);
	free(s->spent);
	s->spent = NULL;
}

void mb_stdio_set_backlog(mb_stdio *s, size_t max)
{
	s->backlog_max = max;
}

void mb_stdio_get_backlog(const mb_stdio *s, mb_stdio_backlog *out)
{
	*out = s->bl;
	out->bytes = s->queued + s->olen;
}

int mb_stdio_write(mb_stdio *s, char *data, size_t len, char *err, size_t errlen)
{
	size_t held = s->queued + s->olen;
	if (s->backlog_max && s->out_kind != UV_FILE && (len > s->backlog_max || held > s->backlog_max - len)) {
		if (err && errlen)
			snprintf(err, errlen, "the answer (%zu bytes) was not sent: %zu bytes of earlier messages wait "
				 "for the client to read its stdout, and max_backlog_bytes=%zu bounds what the server "
				 "holds for it; read pending answers, ask for a smaller result, or retry later",
				 len, held, s->backlog_max);
		s->bl.refused++;
		free(data);
		return -ENOBUFS;
	}
	if (s->out_kind == UV_FILE) {
		size_t off = 0;
		while (off < len) {
			ssize_t n = write(1, data + off, len - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				free(data);
				return n < 0 ? -errno : -EIO;
			}
			off += (size_t)n;
		}
		free(data);
		return 0;
	}
	if (s->olen + len > s->ocap) {
		size_t cap = s->ocap ? s->ocap : 65536;
		while (cap < s->olen + len)
			cap *= 2;
		char *nb = realloc(s->obuf, cap);
		if (!nb) {
			free(data);
			return UV_ENOMEM;
		}
		s->obuf = nb;
		s->ocap = cap;
	}
	memcpy(s->obuf + s->olen, data, len);
	s->olen += len;
	if (s->queued + s->olen > s->bl.peak)
		s->bl.peak = s->queued + s->olen;
	free(data);
	uv_idle_start(&s->flusher, flush);
	return 0;
}

void mb_stdio_pause(mb_stdio *s)
{
	if (s->paused || s->eof == 1)
		return;
	s->paused = 1;
	if (s->in_kind != UV_FILE)
		uv_read_stop((uv_stream_t *)&s->in);
}

void mb_stdio_resume(mb_stdio *s)
{
	if (!s->paused)
		return;
	s->paused = 0;
	if (s->held) {
		char *h = s->held;
		size_t n = s->held_len;
		s->held = NULL;
		s->held_len = 0;
		deliver(s, h, n);
		free(h);
		if (s->paused)
			return; /* paused again while handling what was held */
	}
	if (s->eof) {
		if (s->eof == 2)
			finish_input(s);
		return;
	}
	if (s->in_kind == UV_FILE) {
		if (!s->fs_reading)
			fs_read_next(s);
	} else {
		int rc = uv_read_start((uv_stream_t *)&s->in, alloc_cb, read_cb);
		if (rc)
			mb_log(MB_LOG_ERROR, "stdio: cannot resume reading: %s", uv_strerror(rc));
	}
}

size_t mb_stdio_pending_writes(const mb_stdio *s)
{
	return s->pending_writes + (s->olen ? 1 : 0);
}

static void closed(uv_handle_t *h)
{
	mb_stdio *s = h->data;
	if (--s->open_handles == 0) {
		free(s->buf);
		free(s->held);
		free(s->obuf);
		free(s->spent);
		free(s);
	}
}

void mb_stdio_close(mb_stdio *s)
{
	if (s->open_handles == 0) {
		free(s->buf);
		free(s->held);
		free(s);
		return;
	}
	if (s->in_kind != UV_FILE)
		uv_close((uv_handle_t *)&s->in, closed);
	if (s->out_kind != UV_FILE)
		uv_close((uv_handle_t *)&s->out, closed);
	uv_close((uv_handle_t *)&s->flusher, closed);
}
