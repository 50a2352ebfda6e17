/* test_wakeup.c - src/wakeup.c: no wake-up is lost when 4 threads each queue 50,000 items and
 * send after every one (the loop must see all 200,000 items without a timer to rescue it), sends
 * coalesce (fewer callbacks than sends), a send from the callback itself brings another
 * callback, and the handle closes cleanly with the eventfd released afterwards. */
#include "unit.h"
#include "wakeup.h"

#include <fcntl.h>
#include <stdint.h>

#define THREADS 4
#define PER_THREAD 50000

typedef struct {
	mb_wakeup w;
	uv_mutex_t mu;
	uint64_t queued;   /* under mu */
	uint64_t seen;     /* loop thread */
	uint64_t callbacks;
	int resend;        /* callbacks that send again from inside the callback */
	uv_timer_t guard;
	int timed_out;
} ctx;

static void on_wake(mb_wakeup *w)
{
	ctx *c = w->data;
	c->callbacks++;
	uv_mutex_lock(&c->mu);
	c->seen = c->queued; /* take everything queued so far */
	uv_mutex_unlock(&c->mu);
	if (c->resend > 0) {
		c->resend--;
		mb_wakeup_send(w);
		return;
	}
	if (c->seen == (uint64_t)THREADS * PER_THREAD) {
		uv_timer_stop(&c->guard);
		mb_wakeup_close(w, NULL);
		uv_close((uv_handle_t *)&c->guard, NULL);
	}
}

static void on_guard(uv_timer_t *t)
{
	ctx *c = t->data;
	c->timed_out = 1;
	mb_wakeup_close(&c->w, NULL);
	uv_close((uv_handle_t *)t, NULL);
}

static void producer(void *arg)
{
	ctx *c = arg;
	for (int i = 0; i < PER_THREAD; i++) {
		uv_mutex_lock(&c->mu);
		c->queued++;
		uv_mutex_unlock(&c->mu);
		mb_wakeup_send(&c->w);
	}
}

/* A loop with the wake-up under test and a guard timer that ends the run after guard_ms (a
 * lost wake-up would otherwise hang the test). */
static void setup(uv_loop_t *loop, ctx *c, uint64_t guard_ms)
{
	uv_loop_init(loop);
	uv_mutex_init(&c->mu);
	CHECK(mb_wakeup_init(loop, &c->w, on_wake) == 0);
	c->w.data = c;
	uv_timer_init(loop, &c->guard);
	c->guard.data = c;
	uv_timer_start(&c->guard, on_guard, guard_ms, 0);
}

TEST(no_lost_wakeups)
{
	uv_loop_t loop;
	ctx c = {0};
	setup(&loop, &c, 20000);
	uv_thread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		uv_thread_create(&t[i], producer, &c);
	uv_run(&loop, UV_RUN_DEFAULT);
	for (int i = 0; i < THREADS; i++)
		uv_thread_join(&t[i]);
	CHECK(!c.timed_out);
	CHECK(c.seen == (uint64_t)THREADS * PER_THREAD);
	CHECK(c.callbacks >= 1 && c.callbacks < (uint64_t)THREADS * PER_THREAD);
	printf("  %llu items seen in %llu callbacks\n", (unsigned long long)c.seen,
	       (unsigned long long)c.callbacks);
	int fd = c.w.fd;
	CHECK(fcntl(fd, F_GETFD) != -1); /* closing the handle keeps the eventfd for late senders */
	mb_wakeup_send(&c.w);             /* a late send after close is harmless */
	mb_wakeup_release(&c.w);
	CHECK(c.w.fd == -1);
	CHECK(uv_loop_close(&loop) == 0);
	uv_mutex_destroy(&c.mu);
}

TEST(send_from_the_callback)
{
	uv_loop_t loop;
	ctx c = {0};
	setup(&loop, &c, 5000);
	c.resend = 3;
	c.queued = (uint64_t)THREADS * PER_THREAD; /* so the 4th callback closes */
	mb_wakeup_send(&c.w);
	mb_wakeup_send(&c.w); /* coalesces with the first */
	uv_run(&loop, UV_RUN_DEFAULT);
	CHECK(!c.timed_out);
	CHECK(c.callbacks == 4);
	mb_wakeup_release(&c.w);
	CHECK(uv_loop_close(&loop) == 0);
	uv_mutex_destroy(&c.mu);
}

int main(void)
{
	RUN(no_lost_wakeups);
	RUN(send_from_the_callback);
	return UNIT_END();
}
