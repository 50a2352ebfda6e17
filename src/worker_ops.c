/* worker_ops.c - the queue of workspace operations that worker processes ask for.
 *
 * A worker process's workspace operation (W_WS) may touch the disk (a write is fsynced), so it
 * runs on libuv's thread pool, which every tenant's operations, worker starts and large-result
 * checks share (4 threads by default). A compromised worker could otherwise fill it with
 * thousands of tiny fsynced writes and make another tenant's wait behind them. Here each
 * tenant's operations wait in their own queue; at most per_tenant (workspace_ops_per_tenant) of
 * one tenant run at once, and the tenants take turns (round robin), so one tenant's flood delays
 * another's operation by at most per_tenant operations per tenant. An operation whose job has
 * ended meanwhile is dropped, never started (the callbacks say which: live). The per-job bounds
 * (pending and total) are the pool's (worker_pool.c), which knows the jobs.
 *
 * Runs on the loop thread only. A tenant's entry lives while it has operations queued or
 * running, so the entries are bounded by the operations.
 */
#include "worker_ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mb_wops_tenant {
	char name[72];
	mb_wop *head, *tail;
	size_t queued, running;
	mb_wops_tenant *next; /* the ring */
};

static mb_wops_tenant *tenant_get(mb_wops *q, const char *name)
{
	mb_wops_tenant *t = q->tenants;
	if (t) {
		do {
			if (strcmp(t->name, name) == 0)
				return t;
			t = t->next;
		} while (t != q->tenants);
	}
	t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	snprintf(t->name, sizeof t->name, "%s", name);
	if (!q->tenants) {
		t->next = t;
		q->tenants = q->cursor = t;
	} else { /* behind the cursor: served last in this round */
		mb_wops_tenant *p = q->tenants;
		while (p->next != q->cursor)
			p = p->next;
		p->next = t;
		t->next = q->cursor;
	}
	return t;
}

/* Frees t when it has nothing queued or running. */
static void tenant_maybe_free(mb_wops *q, mb_wops_tenant *t)
{
	if (t->queued || t->running)
		return;
	if (t->next == t) {
		q->tenants = q->cursor = NULL;
	} else {
		mb_wops_tenant *p = t;
		while (p->next != t)
			p = p->next;
		p->next = t->next;
		if (q->tenants == t)
			q->tenants = t->next;
		if (q->cursor == t)
			q->cursor = t->next;
	}
	free(t);
}

static mb_wop *pop(mb_wops *q, mb_wops_tenant *t)
{
	mb_wop *op = t->head;
	t->head = op->next;
	if (!t->head)
		t->tail = NULL;
	t->queued--;
	q->queued--;
	op->next = NULL;
	return op;
}

/* Starts operations while some tenant with a queued one has a free turn, taking tenants in
 * turn from the cursor. */
static void pump(mb_wops *q)
{
	for (;;) {
		mb_wops_tenant *t = q->cursor, *found = NULL;
		if (!t)
			return;
		do {
			if (t->queued && t->running < q->per_tenant) {
				found = t;
				break;
			}
			t = t->next;
		} while (t != q->cursor);
		if (!found)
			return;
		q->cursor = found->next; /* the next tenant's turn comes next */
		mb_wop *op = pop(q, found);
		if (!q->live(q->ctx, op->data)) {
			q->dropped++;
			q->drop(q->ctx, op->data); /* may not free found: it is freed below when empty */
			tenant_maybe_free(q, found);
			continue;
		}
		found->running++;
		q->running++;
		if (q->start(q->ctx, op->data) != 0)
			q->fail(q->ctx, op->data); /* calls mb_wops_finished, as a finished one does */
	}
}

int mb_wops_push(mb_wops *q, const char *tenant, mb_wop *op, void *data)
{
	mb_wops_tenant *t = tenant_get(q, tenant ? tenant : "");
	if (!t)
		return -ENOMEM;
	op->next = NULL;
	op->t = t;
	op->data = data;
	if (t->tail)
		t->tail->next = op;
	else
		t->head = op;
	t->tail = op;
	t->queued++;
	q->queued++;
	pump(q);
	return 0;
}

void mb_wops_finished(mb_wops *q, mb_wop *op)
{
	mb_wops_tenant *t = op->t;
	if (!t)
		return;
	op->t = NULL;
	t->running--;
	q->running--;
	q->done++;
	tenant_maybe_free(q, t);
	pump(q);
}

void mb_wops_clear(mb_wops *q)
{
	while (q->queued) {
		mb_wops_tenant *t = q->cursor;
		while (!t->queued)
			t = t->next;
		mb_wop *op = pop(q, t);
		op->t = NULL;
		q->dropped++;
		q->drop(q->ctx, op->data);
		tenant_maybe_free(q, t);
	}
}
