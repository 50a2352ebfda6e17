/* test_worker_ops.c - unit tests for the per-tenant queue of worker processes' workspace
 * operations (src/worker_ops.c), with callbacks that stand in for libuv's thread pool: "start"
 * only records the operation as running, and the test finishes running ones in the order it
 * chooses. Checked: at most per_tenant operations of one tenant run at once; a tenant with one
 * operation behind another tenant's flood of 1,000 gets the next free turn (round robin), not
 * the 1,001st; operations whose job has ended are dropped, never started; a failed start is
 * answered and gives its turn back; clear drops what waits; tenants' entries are freed.
 */
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "worker_ops.h"

typedef struct op {
	mb_wop q;
	int tenant;   /* 0 alice, 1 bob, 2 carol */
	int id;
	int live;     /* 0: its job has ended */
	int started, dropped, failed;
} op;

typedef struct world {
	op *running[64];
	int nrunning;
	int start_fails;
	int started, dropped;
	int order[4096]; /* tenants in the order their operations started */
} world;

static int cb_live(void *ctx, void *data)
{
	(void)ctx;
	return ((op *)data)->live;
}

static int cb_start(void *ctx, void *data)
{
	world *w = ctx;
	op *o = data;
	if (w->start_fails)
		return -1;
	o->started = 1;
	w->order[w->started++ % 4096] = o->tenant;
	w->running[w->nrunning++] = o;
	return 0;
}

static mb_wops *the_q;

static void cb_fail(void *ctx, void *data)
{
	(void)ctx;
	op *o = data;
	o->failed = 1;
	mb_wops_finished(the_q, &o->q);
}

static void cb_drop(void *ctx, void *data)
{
	world *w = ctx;
	((op *)data)->dropped = 1;
	w->dropped++;
}

static void setup(mb_wops *q, world *w, size_t per_tenant)
{
	memset(q, 0, sizeof *q);
	memset(w, 0, sizeof *w);
	q->per_tenant = per_tenant;
	q->ctx = w;
	q->live = cb_live;
	q->start = cb_start;
	q->fail = cb_fail;
	q->drop = cb_drop;
	the_q = q;
}

/* Finishes the oldest running operation. */
static void finish_one(mb_wops *q, world *w)
{
	op *o = w->running[0];
	memmove(w->running, w->running + 1, (size_t)(w->nrunning - 1) * sizeof w->running[0]);
	w->nrunning--;
	mb_wops_finished(q, &o->q);
}

static const char *NAMES[] = {"alice", "bob", "carol"};

static op *push(mb_wops *q, op *o, int tenant, int id)
{
	memset(o, 0, sizeof *o);
	o->tenant = tenant;
	o->id = id;
	o->live = 1;
	CHECK(mb_wops_push(q, NAMES[tenant], &o->q, o) == 0);
	return o;
}

TEST(test_per_tenant_bound_and_round_robin)
{
	mb_wops q;
	world w;
	setup(&q, &w, 2);
	static op alice[1000], bob[1];
	for (int i = 0; i < 1000; i++)
		push(&q, &alice[i], 0, i);
	CHECK(w.nrunning == 2); /* only two of alice's at once */
	CHECK(q.queued == 998 && q.running == 2);
	push(&q, &bob[0], 1, 0);
	CHECK(bob[0].started); /* bob has a free turn of his own: at once */
	CHECK(w.nrunning == 3);
	/* alice never has more than two running, whatever finishes */
	for (int k = 0; k < 50; k++) {
		finish_one(&q, &w);
		int a = 0;
		for (int i = 0; i < w.nrunning; i++)
			a += w.running[i]->tenant == 0;
		CHECK(a <= 2);
	}
	while (w.nrunning)
		finish_one(&q, &w);
	CHECK(w.started == 1001 && q.done == 1001 && q.queued == 0 && q.running == 0);
	CHECK(q.tenants == NULL); /* every tenant's entry freed */
}

TEST(test_turns_alternate_when_both_wait)
{
	mb_wops q;
	world w;
	setup(&q, &w, 1);
	static op a[100], b[100];
	for (int i = 0; i < 100; i++)
		push(&q, &a[i], 0, i);
	for (int i = 0; i < 100; i++)
		push(&q, &b[i], 1, i);
	/* alice's first and bob's first run; then each finished turn goes to the tenants in turn */
	CHECK(w.nrunning == 2);
	while (w.nrunning)
		finish_one(&q, &w);
	CHECK(w.started == 200);
	/* in any window of 4 starts, both tenants appear (no tenant waits behind the other's flood) */
	for (int i = 0; i + 4 <= 200; i++) {
		int seen[2] = {0, 0};
		for (int k = i; k < i + 4; k++)
			seen[w.order[k]] = 1;
		CHECK(seen[0] && seen[1]);
	}
}

TEST(test_ended_jobs_dropped_unstarted)
{
	mb_wops q;
	world w;
	setup(&q, &w, 1);
	static op a[10];
	for (int i = 0; i < 10; i++)
		push(&q, &a[i], 0, i);
	CHECK(a[0].started && w.nrunning == 1);
	for (int i = 0; i < 10; i++)
		a[i].live = 0; /* the job ended */
	finish_one(&q, &w);
	for (int i = 1; i < 10; i++)
		CHECK(!a[i].started && a[i].dropped);
	CHECK(q.dropped == 9 && q.queued == 0 && q.running == 0 && q.tenants == NULL);
}

TEST(test_failed_start_answered_and_turn_given_back)
{
	mb_wops q;
	world w;
	setup(&q, &w, 1);
	w.start_fails = 1;
	static op a[3];
	for (int i = 0; i < 3; i++)
		push(&q, &a[i], 0, i);
	for (int i = 0; i < 3; i++)
		CHECK(a[i].failed && !a[i].started);
	CHECK(q.running == 0 && q.queued == 0 && q.tenants == NULL);
}

TEST(test_clear_drops_waiting)
{
	mb_wops q;
	world w;
	setup(&q, &w, 1);
	static op a[5], c[5];
	for (int i = 0; i < 5; i++) {
		push(&q, &a[i], 0, i);
		push(&q, &c[i], 2, i);
	}
	CHECK(w.nrunning == 2);
	mb_wops_clear(&q);
	CHECK(q.queued == 0 && w.dropped == 8);
	while (w.nrunning)
		finish_one(&q, &w);
	CHECK(q.running == 0 && q.tenants == NULL);
}

int main(void)
{
	RUN(test_per_tenant_bound_and_round_robin);
	RUN(test_turns_alternate_when_both_wait);
	RUN(test_ended_jobs_dropped_unstarted);
	RUN(test_failed_start_answered_and_turn_given_back);
	RUN(test_clear_drops_waiting);
	return UNIT_END();
}
