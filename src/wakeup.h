/* wakeup.h - wakes the loop thread from another thread: an eventfd watched by a uv_poll handle.
 *
 * It does what uv_async_t does, without the busy-wait of libuv 1.44 (Debian 12): there the loop
 * thread spins (up to 997 `pause` instructions, then sched_yield) whenever a sending thread was
 * preempted between marking the handle busy and finishing its write - which on a 2-core machine
 * is every time the write itself wakes the loop thread onto the sender's core. perf on the
 * gateway benchmark found a large share of moonbox's CPU time in that spin (docs/benchmarks.md,
 * "After the eventfd wake-up and the fast decoder"; docs/architecture.md says why).
 *
 * Thread rules: mb_wakeup_send may be called from any thread, at any time before
 * mb_wakeup_release; everything else runs on the loop thread. Sends coalesce: any number of
 * sends before the callback runs produce at least one callback, and a send made while the
 * callback runs produces another one after it. What a sender hands over must be published under
 * a lock that the callback also takes (the pool's mutex), so that "the flag was still set" implies
 * "the callback that clears it has not taken the queue yet".
 */
#ifndef MB_WAKEUP_H
#define MB_WAKEUP_H

#include <stdatomic.h>
#include <uv.h>

typedef struct mb_wakeup mb_wakeup;
typedef void (*mb_wakeup_cb)(mb_wakeup *w);

struct mb_wakeup {
	uv_poll_t poll;      /* poll.data is free for the owner */
	int fd;              /* the eventfd */
	atomic_int pending;  /* 1 while a wake-up is written and not yet consumed */
	mb_wakeup_cb cb;
	void *data;          /* for the owner */
};

/// Creates the eventfd and starts watching it on loop.
/// @returns 0 or a negative errno
int mb_wakeup_init(uv_loop_t *loop, mb_wakeup *w, mb_wakeup_cb cb);

/// Makes the loop thread call w->cb soon. Any thread; never blocks on the loop thread.
void mb_wakeup_send(mb_wakeup *w);

/// Stops watching and closes the poll handle; close_cb gets &w->poll. The eventfd stays open
/// (a thread that outlives the owner may still send) until mb_wakeup_release.
void mb_wakeup_close(mb_wakeup *w, uv_close_cb close_cb);

/// Closes the eventfd. Only when no thread can send any more.
void mb_wakeup_release(mb_wakeup *w);

#endif
