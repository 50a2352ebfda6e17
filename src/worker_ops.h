/* worker_ops.h - the queue of workspace operations that worker processes ask for (worker_ops.c). */
#ifndef MB_WORKER_OPS_H
#define MB_WORKER_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct mb_wops_tenant mb_wops_tenant;

/// One operation, embedded in its owner's struct; data is handed to the callbacks.
typedef struct mb_wop {
	struct mb_wop *next;
	mb_wops_tenant *t;
	void *data;
} mb_wop;

/// The callbacks: live says whether the operation's job still waits for it (0: it ended, the
/// operation is dropped unstarted: drop frees it); start puts it on the thread pool (0, or a
/// negative error: then fail answers it as failed, as if it had run). Each operation started
/// must be given back with mb_wops_finished once its work is done.
typedef struct mb_wops {
	mb_wops_tenant *tenants, *cursor; /* a ring of the tenants with operations; the next to serve */
	size_t per_tenant;                /* operations of one tenant running at once, at most */
	size_t queued, running;
	uint64_t done, dropped;
	void *ctx;
	int (*live)(void *ctx, void *data);
	int (*start)(void *ctx, void *data);
	void (*fail)(void *ctx, void *data);
	void (*drop)(void *ctx, void *data);
} mb_wops;

/// Queues op of tenant and starts what may start. @returns 0, or -ENOMEM (op not queued)
int mb_wops_push(mb_wops *q, const char *tenant, mb_wop *op, void *data);

/// op (started) has done its work: its tenant's turn may start another. Call before freeing op.
void mb_wops_finished(mb_wops *q, mb_wop *op);

/// Drops every queued operation (the pool stops); running ones still call mb_wops_finished.
void mb_wops_clear(mb_wops *q);

#endif
