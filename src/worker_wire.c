/* worker_wire.c - framing and fields of the server <-> worker process messages (worker_wire.h).
 *
 * Plain descriptors and poll(2): the worker runs no event loop, and the server side runs on a
 * pool thread that waits for one worker at a time. Lengths are checked before anything is
 * allocated or copied: a frame over the reader's max is refused, a field longer than what is
 * left of its frame is an error.
 */
#include "worker_wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HDR 5 /* u32 length + type */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void grow(mb_wbuf *b, size_t more)
{
	if (b->failed)
		return;
	if (more > SIZE_MAX / 2 - b->len) {
		b->failed = 1;
		return;
	}
	if (b->len + more <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + more)
		cap *= 2;
	char *nb = realloc(b->buf, cap);
	if (!nb) {
		b->failed = 1;
		return;
	}
	b->buf = nb;
	b->cap = cap;
}

void mb_wbuf_start(mb_wbuf *b, int type)
{
	b->len = 0;
	b->failed = 0;
	grow(b, HDR);
	if (b->failed)
		return;
	b->buf[4] = (char)type;
	b->len = HDR;
}

void mb_wbuf_u64(mb_wbuf *b, uint64_t v)
{
	grow(b, 8);
	if (b->failed)
		return;
	put_le((unsigned char *)b->buf + b->len, v, 8);
	b->len += 8;
}

void mb_wbuf_bytes(mb_wbuf *b, const void *s, size_t n)
{
	mb_wbuf_u64(b, n);
	grow(b, n);
	if (b->failed)
		return;
	if (n)
		memcpy(b->buf + b->len, s, n);
	b->len += n;
}

void mb_wbuf_free(mb_wbuf *b)
{
	free(b->buf);
	memset(b, 0, sizeof *b);
}

int mb_wire_send(int fd, mb_wbuf *b)
{
	if (b->failed || b->len < HDR || b->len - 4 > UINT32_MAX)
		return -1;
	put_le((unsigned char *)b->buf, b->len - 4, 4);
	size_t off = 0;
	while (off < b->len) { /* MSG_NOSIGNAL: a peer gone is an error here, not a SIGPIPE */
		ssize_t n = send(fd, b->buf + off, b->len - off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

int mb_wmsg_u64(mb_wmsg *m, uint64_t *v)
{
	if (m->end - m->p < 8)
		return -1;
	*v = get_le(m->p, 8);
	m->p += 8;
	return 0;
}

int mb_wmsg_bytes(mb_wmsg *m, const char **s, size_t *n)
{
	uint64_t len;
	if (mb_wmsg_u64(m, &len) != 0 || len > (uint64_t)(m->end - m->p))
		return -1;
	*s = (const char *)m->p;
	*n = (size_t)len;
	m->p += len;
	return 0;
}

#define READER_KEEP ((size_t)256 << 10) /* reader room kept between frames up to this size */

/* Makes room for want bytes of frame at the start of the buffer. */
static int reserve(mb_wreader *r, size_t want)
{
	if (r->cap >= want && r->cap >= 4096)
		return 0;
	size_t cap = r->cap ? r->cap : 4096;
	while (cap < want)
		cap *= 2;
	unsigned char *nb = realloc(r->buf, cap);
	if (!nb) {
		errno = ENOMEM;
		return -1;
	}
	r->buf = nb;
	r->cap = cap;
	return 0;
}

int mb_wreader_next(mb_wreader *r, mb_wmsg *m)
{
	if (r->handed) { /* the previous frame was handed out: drop it */
		memmove(r->buf, r->buf + r->need, r->len - r->need);
		r->len -= r->need;
		r->need = 0;
		r->handed = 0;
		if (r->cap > READER_KEEP && r->len <= READER_KEEP / 2) {
			/* a large frame's room is not kept for ever (a result of 16 MB held 16 MB per
			 * worker in the server after it was answered) */
			unsigned char *nb = realloc(r->buf, READER_KEEP);
			if (nb) {
				r->buf = nb;
				r->cap = READER_KEEP;
			}
		}
	}
	if (!r->need && r->len >= 4) { /* the header's length is in: check it */
		uint64_t n = get_le(r->buf, 4);
		if (n < 1 || n > r->max + 1) {
			errno = EMSGSIZE;
			return -1;
		}
		r->need = 4 + (size_t)n;
	}
	if (!r->need || r->len < r->need)
		return 0;
	m->type = r->buf[4];
	m->p = r->buf + HDR;
	m->end = r->buf + r->need;
	r->handed = 1;
	return 1;
}

int mb_wreader_feed(mb_wreader *r, const char *data, size_t n)
{
	if (n > r->cap - r->len && reserve(r, r->len + n) != 0)
		return -1;
	memcpy(r->buf + r->len, data, n);
	r->len += n;
	return 0;
}

int mb_wire_read(mb_wreader *r, int fd, int timeout_ms, mb_wmsg *m)
{
	for (;;) {
		int k = mb_wreader_next(r, m);
		if (k != 0)
			return k;
		if (reserve(r, r->need ? r->need : 4) != 0)
			return -1;
		/* A reply or a short execution's result is often microseconds away: look again for
		 * a moment before sleeping, which saves a sleep and a wake-up on each side. */
		if (r->spin_ns) {
			uint64_t t0 = now_ns();
			ssize_t n;
			while ((n = recv(fd, r->buf + r->len, r->cap - r->len, MSG_DONTWAIT)) < 0 &&
			       (errno == EAGAIN || errno == EWOULDBLOCK) && now_ns() - t0 < r->spin_ns)
				__builtin_ia32_pause();
			if (n > 0) {
				r->len += (size_t)n;
				continue;
			}
			if (n == 0)
				return -1;
		}
		if (timeout_ms >= 0) {
			struct pollfd pf = {fd, POLLIN, 0};
			int k2 = poll(&pf, 1, timeout_ms);
			if (k2 <= 0) {
				if (k2 < 0 && errno != EINTR)
					return -1;
				return 0;
			}
		}
		/* as much as there is room for: a following frame's bytes stay for the next call */
		ssize_t n = read(fd, r->buf + r->len, r->cap - r->len);
		if (n < 0 && errno == EINTR) {
			if (timeout_ms >= 0)
				return 0;
			continue;
		}
		if (n <= 0)
			return -1;
		r->len += (size_t)n;
	}
}

char *mb_wire_copy(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

void mb_wreader_free(mb_wreader *r)
{
	free(r->buf);
	memset(r, 0, sizeof *r);
}
