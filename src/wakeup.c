/* wakeup.c - the loop thread's wake-up from other threads (see wakeup.h for why not uv_async_t).
 *
 * The pending flag makes sends cheap and coalescing: only the send that turns it from 0 to 1
 * writes to the eventfd. The loop thread reads the eventfd, clears the flag, and only then calls
 * the callback, so whatever a sender queued after the callback took its work finds the flag
 * clear and writes again: no wake-up is lost, and no thread ever waits for another.
 */
#include "wakeup.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static void on_readable(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	mb_wakeup *w = (mb_wakeup *)h;
	uint64_t n;
	while (read(w->fd, &n, sizeof n) < 0 && errno == EINTR)
		;
	atomic_store(&w->pending, 0);
	w->cb(w);
}

int mb_wakeup_init(uv_loop_t *loop, mb_wakeup *w, mb_wakeup_cb cb)
{
	w->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->fd < 0)
		return -errno;
	atomic_init(&w->pending, 0);
	w->cb = cb;
	int rc = uv_poll_init(loop, &w->poll, w->fd);
	if (rc == 0)
		rc = uv_poll_start(&w->poll, UV_READABLE, on_readable);
	if (rc != 0) {
		close(w->fd);
		w->fd = -1;
	}
	return rc;
}

void mb_wakeup_send(mb_wakeup *w)
{
	if (atomic_load(&w->pending) || atomic_exchange(&w->pending, 1))
		return; /* a wake-up is already on its way and will see what was queued */
	uint64_t one = 1;
	while (write(w->fd, &one, sizeof one) < 0 && errno == EINTR)
		;
	/* EAGAIN would mean the counter is near 2^64: the fd is readable anyway */
}

void mb_wakeup_close(mb_wakeup *w, uv_close_cb close_cb)
{
	uv_poll_stop(&w->poll);
	uv_close((uv_handle_t *)&w->poll, close_cb);
}

void mb_wakeup_release(mb_wakeup *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
}
