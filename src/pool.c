/* pool.c - worker threads, the execution queue, and supervision of the wall-clock limit.
 *
 * Shape: one mutex guards the job queue, the event queue and worker bookkeeping. Workers wait on
 * a condition variable for jobs, and while idle build the sandbox state for their next job
 * (mb_sandbox_prepare), so a request finds its environment ready. Everything a worker reports
 * (notifications, host calls, done) becomes an event appended to one FIFO and announced with
 * mb_wakeup_send (wakeup.h); the loop thread drains the FIFO and calls the callbacks in order. Every job has a uv_timer on
 * the loop thread, armed at submit; the worker writes the job's deadline when the code starts and
 * the timer re-arms itself until that deadline: then it signals the worker thread (MB_SANDBOX_SIGNAL, so
 * the count hook fires on the next instruction), and timeout_grace_ms later, if the job is still
 * running, it answers the job with a timeout and abandons the worker: the thread is replaced and
 * exits once its current C call returns. Jobs are freed only on the loop thread. A job whose
 * state ends large is answered first (EV_ANSWER) and freed after its state is closed (EV_DONE),
 * so that lua_close, which walks every object, does not count against timeout_grace_ms.
 */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "log.h"
#include "sandbox.h"
#include "worker_pool.h"
#include "wakeup.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_ABANDONED } job_state;
typedef enum { EV_NOTIFY, EV_CALL, EV_ANSWER, EV_DONE, EV_STUCK_EXIT } event_type;

typedef struct mb_worker mb_worker;
typedef struct mb_job mb_job;

struct mb_job {
	uint64_t id;
	mb_pool *pool;
	mb_exec_request req;
	char *code, *context;
	mb_budget budget;
	mb_exec_result res;
	job_state state;       /* guarded by pool->mu */
	mb_worker *worker;     /* guarded by pool->mu */
	uv_timer_t timer;      /* loop thread only */
	int timer_stage;       /* 1 waiting for the deadline, 2 waiting for the grace period */
	_Atomic uint64_t deadline_ns; /* written by the worker when the code starts (0 before) */
	int answered;          /* on_done already called (abandoned) */
	/* host calls: the worker waits on call_cv for the loop thread's reply (all under pool->mu) */
	uv_cond_t call_cv;
	uint64_t call_seq;     /* the call being waited for */
	int call_waiting, call_done, call_status;
	int held;              /* its host call waits for a client's answer (mb_pool_hold) */
	char *call_reply;
	size_t call_reply_len;
	uint64_t calls;        /* worker thread only */
	mb_job *next;          /* queue link, or pending-list link */
	mb_job *pending_next, *pending_prev;
};

typedef struct event {
	event_type type;
	mb_job *job;
	mb_notify_kind kind;
	int level;
	uint64_t seq;          /* EV_CALL */
	char *name;            /* EV_CALL */
	char *data;
	size_t len;
	struct mb_worker *worker; /* EV_STUCK_EXIT: the exiting thread's record, freed by the loop */
	struct event *next;
} event;

struct mb_worker {
	mb_pool *pool;
	uv_thread_t tid;
	mb_job *current;       /* guarded by pool->mu */
	int abandoned;         /* guarded by pool->mu */
	int exited;            /* guarded by pool->mu */
	mb_worker *next;
};

struct mb_pool {
	uv_loop_t *loop;
	const mb_config *cfg;
	mb_job_callbacks cb;
	uv_mutex_t mu;
	uv_cond_t cv;
	mb_job *q_head, *q_tail;
	size_t queued, queued_bytes;
	event *ev_head, *ev_tail;
	mb_wakeup wake;         /* announces events to the loop thread (not uv_async_t: wakeup.h) */
	mb_worker *workers;
	size_t live_workers, abandoned_alive, busy;
	size_t live_peak;       /* the most worker threads alive at once */
	int stopping;
	/* loop-thread only */
	mb_job *pending;        /* every job not yet freed */
	uint64_t next_id;
	uint64_t submitted, completed, refused;
	size_t unanswered;      /* submitted, on_done not yet called */
	mb_wpool *wp;           /* isolation = process: every call goes there */
};

static void worker_main(void *arg);

/* Jobs whose host call waits for a client's answer (a person may take minutes): they do not
 * take one of the `workers` places. Called with p->mu held. */
static size_t held_jobs(const mb_pool *p)
{
	size_t n = 0;
	for (const mb_worker *w = p->workers; w; w = w->next)
		n += w->current && !w->abandoned && w->current->held && w->current->call_waiting &&
		     !w->current->call_done;
	return n;
}

/* Whether an idle thread may start the next queued job: fewer than `workers` executions run
 * that are not held. Called with p->mu held. */
static int may_take(const mb_pool *p)
{
	size_t workers = (size_t)p->cfg->workers;
	return p->q_head && (p->busy < workers || p->busy - held_jobs(p) < workers);
}

static int spawn_worker(mb_pool *p)
{
	mb_worker *w = calloc(1, sizeof *w);
	if (!w)
		return -1;
	w->pool = p;
	/* max_c_stack_kb for nesting through C (checked by mb_budget_cstack_check), plus room for
	 * what one level of Lua's own C-call limit (200 nested calls) may take beyond the check */
	uv_thread_options_t opt = { UV_THREAD_HAS_STACK_SIZE,
				    ((size_t)p->cfg->max_c_stack_kb << 10) + MB_SANDBOX_STACK_RESERVE };
	uv_mutex_lock(&p->mu);
	w->next = p->workers;
	p->workers = w;
	p->live_workers++;
	if (p->live_workers > p->live_peak)
		p->live_peak = p->live_workers;
	uv_mutex_unlock(&p->mu);
	if (uv_thread_create_ex(&w->tid, &opt, worker_main, w) != 0) {
		uv_mutex_lock(&p->mu);
		p->workers = w->next; /* still the head: only the loop thread adds workers */
		p->live_workers--;
		uv_mutex_unlock(&p->mu);
		free(w);
		return -1;
	}
	return 0;
}

/* Appends an event and wakes the loop. Called with p->mu NOT held. */
static void post(mb_pool *p, event *e)
{
	uv_mutex_lock(&p->mu);
	if (p->ev_tail)
		p->ev_tail->next = e;
	else
		p->ev_head = e;
	p->ev_tail = e;
	uv_mutex_unlock(&p->mu);
	mb_wakeup_send(&p->wake);
}

static void post_simple(mb_pool *p, mb_job *j, event_type t)
{
	event *e = calloc(1, sizeof *e);
	if (!e) {
		mb_log(MB_LOG_CRIT, "pool: out of memory posting an event");
		abort(); /* losing a completion would hang a request forever */
	}
	e->type = t;
	e->job = j;
	post(p, e);
}

static void job_notify(void *ud, mb_notify_kind kind, int level, const char *json, size_t len)
{
	mb_job *j = ud;
	event *e = calloc(1, sizeof *e);
	char *d = malloc(len + 1);
	if (!e || !d) {
		free(e);
		free(d);
		return; /* a dropped notification is not fatal */
	}
	memcpy(d, json, len);
	d[len] = 0;
	e->type = EV_NOTIFY;
	e->job = j;
	e->kind = kind;
	e->level = level;
	e->data = d;
	e->len = len;
	post(j->pool, e);
}

/* Worker side of a host call: post the call to the loop, wait for the reply, the deadline or
 * cancellation (mb_pool_cancel and the deadline timer wake call_cv). */
static int job_host_call(void *ud, const char *name, const char *args, size_t len, char **reply,
			 size_t *reply_len)
{
	mb_job *j = ud;
	mb_pool *p = j->pool;
	*reply = NULL;
	*reply_len = 0;
	if (j->calls >= (uint64_t)p->cfg->max_host_calls) {
		char msg[MB_ERR_MAX];
		int n = snprintf(msg, sizeof msg, "too many calls to the server in one execution "
				 "(max_host_calls=%lld)", (long long)p->cfg->max_host_calls);
		*reply = strdup(msg);
		*reply_len = *reply ? (size_t)n : 0;
		return 1;
	}
	j->calls++;
	event *e = calloc(1, sizeof *e);
	char *d = malloc(len + 1), *nm = strdup(name);
	if (!e || !d || !nm) {
		free(e);
		free(d);
		free(nm);
		*reply = strdup("out of memory");
		*reply_len = *reply ? strlen(*reply) : 0;
		return 1;
	}
	memcpy(d, args, len);
	d[len] = 0;
	e->type = EV_CALL;
	e->job = j;
	e->name = nm;
	e->data = d;
	e->len = len;
	uv_mutex_lock(&p->mu);
	e->seq = ++j->call_seq;
	j->call_waiting = 1;
	j->call_done = 0;
	uv_mutex_unlock(&p->mu);
	post(p, e);

	int status;
	uv_mutex_lock(&p->mu);
	for (;;) {
		if (j->call_done) {
			status = j->call_status;
			*reply = j->call_reply;
			*reply_len = j->call_reply_len;
			j->call_reply = NULL;
			break;
		}
		if (mb_budget_check(&j->budget) != MB_STOP_NONE) {
			status = -1;
			break;
		}
		uint64_t now = mb_now_ns(), dl = j->budget.deadline_ns;
		uint64_t wait = dl > now ? dl - now : 1000000;
		if (wait > 100000000) /* re-check now and then; cancellation also signals */
			wait = 100000000;
		uv_cond_timedwait(&j->call_cv, &p->mu, wait);
	}
	j->call_waiting = 0;
	j->call_done = 0;
	uv_mutex_unlock(&p->mu);
	return status;
}

static void worker_main(void *arg)
{
	mb_worker *w = arg;
	mb_pool *p = w->pool;
	/* allocated up front: an abandoned thread must be able to announce its exit */
	event *exit_ev = calloc(1, sizeof *exit_ev);
	if (!exit_ev) {
		mb_log(MB_LOG_CRIT, "pool: out of memory starting a worker");
		abort(); /* as in post_simple: a stuck thread's exit must not go unannounced */
	}
	mb_sandbox_thread_init();
	/* The next execution's state is built while the thread would otherwise wait, so a request
	 * finds its libraries and environment ready. */
	mb_sandbox *next = mb_sandbox_prepare(p->cfg);
	for (;;) {
		uv_mutex_lock(&p->mu);
		while (!may_take(p) && !p->stopping && !w->abandoned)
			uv_cond_wait(&p->cv, &p->mu);
		if (w->abandoned || (p->stopping && !p->q_head)) {
			w->exited = 1;
			if (w->abandoned && exit_ev) {
				/* Announced while still counted in abandoned_alive: the pool and its
				 * wake-up stay alive until that count reaches 0 (wake_closed). */
				exit_ev->type = EV_STUCK_EXIT;
				exit_ev->worker = w; /* not touched by this thread after the unlock */
				if (p->ev_tail)
					p->ev_tail->next = exit_ev;
				else
					p->ev_head = exit_ev;
				p->ev_tail = exit_ev;
				exit_ev = NULL;
				mb_wakeup_send(&p->wake);
			}
			if (w->abandoned)
				p->abandoned_alive--;
			p->live_workers--;
			uv_mutex_unlock(&p->mu);
			free(exit_ev);
			/* p may be gone from here on (an abandoned thread outliving the pool's close):
			 * touch only what this thread owns. */
			mb_sandbox_discard(next);
			mb_sandbox_thread_exit();
			mb_arena_free_thread();
			return;
		}
		mb_job *j = p->q_head;
		mb_sandbox *big = NULL; /* a state whose close waits for the answer */
		p->q_head = j->next;
		if (!p->q_head)
			p->q_tail = NULL;
		p->queued--;
		p->queued_bytes -= j->req.code_len + j->req.context_len;
		j->next = NULL;
		j->state = JOB_RUNNING;
		j->worker = w;
		w->current = j;
		p->busy++;
		uv_mutex_unlock(&p->mu);

		/* The limit clock starts when the code starts, not when it was queued. */
		j->budget.deadline_ns = mb_now_ns() + j->budget.timeout_ms * 1000000ull;
		atomic_store(&j->deadline_ns, j->budget.deadline_ns); /* read by the loop's timer */
		if (atomic_load(&j->budget.cancel)) {
			mb_budget_trip(&j->budget, MB_STOP_CANCELLED);
			char msg[MB_ERR_MAX];
			memset(&j->res, 0, sizeof j->res);
			j->res.error = strdup(mb_budget_message(&j->budget, msg, sizeof msg));
			j->res.error_type = "cancelled";
			j->res.output = strdup("");
			mb_exec_result_shape(&j->res);
		} else {
			mb_sandbox_run_prepared_defer(next ? next : mb_sandbox_prepare(p->cfg), &j->req,
						      &j->budget, &j->res, &big);
			next = NULL;
		}

		uv_mutex_lock(&p->mu);
		if (j->state == JOB_RUNNING) { /* else abandoned: the loop already answered it */
			j->state = JOB_DONE;
			w->current = NULL;
			p->busy--;
		}
		uv_mutex_unlock(&p->mu);
		if (big) {
			/* A large state: answer first (EV_ANSWER), then close it - lua_close walks
			 * every object and must not push the answer past timeout_grace_ms. The job
			 * (its budget, which the allocator and native finalizers credit) lives until
			 * EV_DONE. */
			post_simple(p, j, EV_ANSWER);
			mb_sandbox_close_deferred(big);
			big = NULL;
		}
		post_simple(p, j, EV_DONE);
		uv_mutex_lock(&p->mu);
		int leaving = w->abandoned;
		uv_mutex_unlock(&p->mu);
		if (!next && !leaving)
			next = mb_sandbox_prepare(p->cfg);
	}
}

static void job_free(mb_job *j)
{
	mb_pool *p = j->pool;
	if (j->pending_prev)
		j->pending_prev->pending_next = j->pending_next;
	else
		p->pending = j->pending_next;
	if (j->pending_next)
		j->pending_next->pending_prev = j->pending_prev;
	mb_exec_result_free(&j->res);
	free(j->call_reply);
	uv_cond_destroy(&j->call_cv);
	free(j->code);
	free(j->context);
	free(j);
}

/* Whether the pool should start a worker thread: fewer than `workers` are in service (stuck
 * threads are not) and fewer than workers + max_abandoned threads are alive, stuck ones
 * included, so stuck threads never pile up past that. Called with p->mu held. */
static int wants_worker(const mb_pool *p)
{
	size_t in_service = p->live_workers - p->abandoned_alive;
	size_t cap = (size_t)p->cfg->workers + (size_t)p->cfg->max_abandoned;
	return !p->stopping && in_service < (size_t)p->cfg->workers && p->live_workers < cap;
}

/* Whether a held job needs a thread started beside the others: every thread in service is
 * busy and fewer than workers + min(held jobs, held_workers) are in service. Such threads stay
 * until the pool closes (at most held_workers of them); may_take keeps the executions that run
 * at `workers`. Called with p->mu held. */
static int wants_held_worker(const mb_pool *p)
{
	size_t in_service = p->live_workers - p->abandoned_alive, held = held_jobs(p);
	if (held > (size_t)p->cfg->held_workers)
		held = (size_t)p->cfg->held_workers;
	return !p->stopping && in_service <= p->busy && in_service < (size_t)p->cfg->workers + held;
}

static void timer_closed(uv_handle_t *h)
{
	job_free(h->data);
}

static void answer(mb_pool *p, mb_job *j, const mb_exec_result *res)
{
	if (j->answered)
		return;
	j->answered = 1;
	p->completed++;
	p->unanswered--;
	if (p->cb.on_done)
		p->cb.on_done(p->cb.ud, j->id, res);
}

static void on_timer(uv_timer_t *t)
{
	mb_job *j = t->data;
	mb_pool *p = j->pool;
	uv_mutex_lock(&p->mu);
	int running = j->state == JOB_RUNNING;
	mb_worker *w = j->worker;
	if (running && j->timer_stage == 1) {
		/* The timer was armed at submit; the deadline counts from the start of the code. */
		uint64_t dl = atomic_load(&j->deadline_ns), now = mb_now_ns();
		if (dl == 0 || dl > now) { /* 0: picked up a moment ago, deadline not written yet */
			uv_mutex_unlock(&p->mu);
			uv_timer_start(t, on_timer, dl ? (dl - now + 999999) / 1000000 : j->budget.timeout_ms, 0);
			return;
		}
		/* Deadline: make the hook fire on the next instruction, end a host-call wait. */
		pthread_kill((pthread_t)w->tid, MB_SANDBOX_SIGNAL);
		uv_cond_signal(&j->call_cv);
		uv_mutex_unlock(&p->mu);
		j->timer_stage = 2;
		uv_timer_start(t, on_timer, (uint64_t)p->cfg->timeout_grace_ms, 0);
		return;
	}
	if (running && j->timer_stage == 2) {
		/* Still inside one C call after the grace period: answer now, abandon the thread.
		 * It is replaced only while fewer than max_abandoned threads are stuck, so the
		 * process never holds more than workers + max_abandoned threads; past that the
		 * pool runs with fewer workers until a stuck thread exits (EV_STUCK_EXIT). */
		j->state = JOB_ABANDONED;
		w->abandoned = 1;
		/* nothing will join it: its stack and record are freed when it exits */
		pthread_detach((pthread_t)w->tid);
		p->abandoned_alive++;
		p->busy--;
		w->current = NULL;
		int replace = wants_worker(p);
		uv_mutex_unlock(&p->mu);
		/* The cause is whatever tripped first: a memory limit may have tripped before the
		 * deadline, and its message must not come with error_type "timeout". */
		mb_budget_trip(&j->budget, MB_STOP_TIMEOUT);
		mb_stop_reason why = (mb_stop_reason)atomic_load(&j->budget.stop);
		mb_log(MB_LOG_WARNING, "pool: execution %llu still running %lld ms after its deadline; "
		       "answering (%s) and %s", (unsigned long long)j->id,
		       (long long)p->cfg->timeout_grace_ms, mb_stop_name(why),
		       replace ? "replacing its worker thread"
			       : "leaving its worker thread unreplaced (max_abandoned reached)");
		mb_exec_result r;
		memset(&r, 0, sizeof r);
		char msg[MB_ERR_MAX];
		r.error = (char *)mb_budget_message(&j->budget, msg, sizeof msg);
		r.error_type = mb_stop_name(why);
		r.output = (char *)"";
		r.execution_time_ms = (double)j->budget.timeout_ms + (double)p->cfg->timeout_grace_ms;
		mb_exec_result_shape(&r);
		answer(p, j, &r);
		free(r.structured_json);
		free(r.structured_quoted);
		if (replace && spawn_worker(p) != 0)
			mb_log(MB_LOG_ERROR, "pool: could not start a replacement worker");
		return;
	}
	if (j->state == JOB_QUEUED) {
		/* still waiting for a worker: look again one timeout from now */
		uv_mutex_unlock(&p->mu);
		uv_timer_start(t, on_timer, j->budget.timeout_ms, 0);
		return;
	}
	uv_mutex_unlock(&p->mu);
}

/* A stuck thread exited: start workers until the pool has its configured number in service
 * again, within the cap. Loop thread only. */
static void top_up(mb_pool *p)
{
	for (;;) {
		uv_mutex_lock(&p->mu);
		int want = wants_worker(p);
		uv_mutex_unlock(&p->mu);
		if (!want)
			return;
		if (spawn_worker(p) != 0) {
			mb_log(MB_LOG_ERROR, "pool: could not start a replacement worker");
			return;
		}
	}
}

/* Unlinks and frees the record of an abandoned worker that has exited (its thread is detached,
 * so nothing joins it). Loop thread only: the only thread that changes the list's links. */
static void forget_worker(mb_pool *p, mb_worker *dead)
{
	uv_mutex_lock(&p->mu);
	for (mb_worker **pw = &p->workers; *pw; pw = &(*pw)->next) {
		if (*pw == dead) {
			*pw = dead->next;
			free(dead);
			break;
		}
	}
	uv_mutex_unlock(&p->mu);
}

static void drain(mb_wakeup *w)
{
	mb_pool *p = w->data;
	uv_mutex_lock(&p->mu);
	event *e = p->ev_head;
	p->ev_head = p->ev_tail = NULL;
	uv_mutex_unlock(&p->mu);
	while (e) {
		event *next = e->next;
		mb_job *j = e->job;
		switch (e->type) {
		case EV_NOTIFY:
			if (!j->answered && p->cb.on_notify)
				p->cb.on_notify(p->cb.ud, j->id, e->kind, e->level, e->data, e->len);
			free(e->data);
			break;
		case EV_CALL:
			if (!j->answered && p->cb.on_call)
				p->cb.on_call(p->cb.ud, j->id, e->seq, e->name, e->data, e->len);
			else
				mb_pool_reply(p, j->id, e->seq, 1, "the execution has ended", 23);
			free(e->name);
			free(e->data);
			break;
		case EV_STUCK_EXIT:
			forget_worker(p, e->worker);
			top_up(p);
			break;
		case EV_ANSWER: /* done; its state is still being closed (EV_DONE follows) */
			uv_timer_stop(&j->timer);
			answer(p, j, &j->res);
			break;
		case EV_DONE:
			uv_timer_stop(&j->timer);
			answer(p, j, &j->res);
			uv_close((uv_handle_t *)&j->timer, timer_closed);
			break;
		}
		free(e);
		e = next;
	}
}

mb_pool *mb_pool_new(uv_loop_t *loop, const mb_config *cfg, const mb_job_callbacks *cb)
{
	mb_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->loop = loop;
	p->cfg = cfg;
	p->cb = *cb;
	p->next_id = 1;
	if (strcmp(cfg->isolation, "process") == 0) {
		p->wp = mb_wpool_new(loop, cfg, cb);
		if (!p->wp) {
			mb_log(MB_LOG_ERROR, "pool: no worker process could be set up");
			free(p);
			return NULL;
		}
		return p;
	}
	if (uv_mutex_init(&p->mu) || uv_cond_init(&p->cv)) {
		free(p);
		return NULL;
	}
	if (mb_wakeup_init(loop, &p->wake, drain) != 0) {
		uv_mutex_destroy(&p->mu);
		uv_cond_destroy(&p->cv);
		free(p);
		return NULL;
	}
	p->wake.data = p;
	p->wake.poll.data = p;
	for (int64_t i = 0; i < cfg->workers; i++)
		if (spawn_worker(p) != 0) {
			mb_log(MB_LOG_ERROR, "pool: could not start worker thread %lld", (long long)i);
			break;
		}
	if (!p->live_workers) {
		mb_log(MB_LOG_ERROR, "pool: no worker thread could be started");
		return NULL;
	}
	return p;
}

static char *dup_bytes(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		if (n)
			memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

int mb_pool_submit(mb_pool *p, const mb_exec_request *req, uint64_t *id_out, char *err, size_t errlen)
{
	if (p->wp)
		return mb_wpool_submit(p->wp, req, id_out, err, errlen);
	uv_mutex_lock(&p->mu);
	size_t queued = p->queued, stuck = p->abandoned_alive, qbytes = p->queued_bytes;
	size_t live = p->live_workers, idle = live - stuck - p->busy;
	uv_mutex_unlock(&p->mu);
	/* also when no thread is in service at all (a replacement could not be started) */
	if (stuck > (size_t)p->cfg->max_abandoned || live == stuck) {
		snprintf(err, errlen, "server busy: %zu worker threads are stuck in long C calls "
			 "(max_abandoned=%lld); try again later", stuck, (long long)p->cfg->max_abandoned);
		p->refused++;
		return -1;
	}
	size_t bytes = req->code_len + (req->context_json ? req->context_len : 0);
	if (mb_pool_admit(p->cfg, queued, idle, qbytes, bytes, err, errlen) != 0) {
		p->refused++;
		return -1;
	}
	mb_job *j = calloc(1, sizeof *j);
	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	j->pool = p;
	j->id = p->next_id++;
	j->req = *req;
	j->code = dup_bytes(req->code, req->code_len);
	j->context = req->context_json ? dup_bytes(req->context_json, req->context_len) : NULL;
	if (!j->code || (req->context_json && !j->context)) {
		free(j->code);
		free(j->context);
		free(j);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	j->req.code = j->code;
	j->req.context_json = j->context;
	if (!j->context)
		j->req.context_len = 0;
	j->req.notify = job_notify;
	j->req.notify_ud = j;
	j->req.host_call = job_host_call;
	j->req.host_ud = j;
	if (uv_cond_init(&j->call_cv) != 0) {
		free(j->code);
		free(j->context);
		free(j);
		snprintf(err, errlen, "out of resources");
		return -1;
	}
	mb_budget_init(&j->budget, req->memory_bytes, req->instruction_limit, 0);
	j->budget.timeout_ms = req->timeout_ms;
	uv_timer_init(p->loop, &j->timer);
	j->timer.data = j;
	j->timer_stage = 1;
	uv_timer_start(&j->timer, on_timer, req->timeout_ms, 0);
	j->pending_next = p->pending;
	if (p->pending)
		p->pending->pending_prev = j;
	p->pending = j;
	p->submitted++;
	p->unanswered++;

	uv_mutex_lock(&p->mu);
	j->state = JOB_QUEUED;
	if (p->q_tail)
		p->q_tail->next = j;
	else
		p->q_head = j;
	p->q_tail = j;
	p->queued++;
	p->queued_bytes += bytes;
	uv_cond_signal(&p->cv);
	uv_mutex_unlock(&p->mu);
	*id_out = j->id;
	return 0;
}

int mb_pool_cancel(mb_pool *p, uint64_t job_id)
{
	if (p->wp)
		return mb_wpool_cancel(p->wp, job_id);
	for (mb_job *j = p->pending; j; j = j->pending_next) {
		if (j->id != job_id)
			continue;
		if (j->answered)
			return -1;
		atomic_store(&j->budget.cancel, 1);
		uv_mutex_lock(&p->mu);
		if (j->state == JOB_RUNNING) {
			pthread_kill((pthread_t)j->worker->tid, MB_SANDBOX_SIGNAL);
			uv_cond_signal(&j->call_cv);
		}
		uv_mutex_unlock(&p->mu);
		return 0;
	}
	return -1;
}

int mb_pool_hold(mb_pool *p, uint64_t job_id, int on)
{
	if (p->wp)
		return mb_wpool_hold(p->wp, job_id, on);
	for (mb_job *j = p->pending; j; j = j->pending_next) {
		if (j->id != job_id || j->answered)
			continue;
		uv_mutex_lock(&p->mu);
		j->held = on != 0;
		int want = on && wants_held_worker(p);
		if (on)
			uv_cond_broadcast(&p->cv); /* an idle thread may now start a queued job */
		uv_mutex_unlock(&p->mu);
		if (want && spawn_worker(p) != 0)
			mb_log(MB_LOG_ERROR, "pool: could not start a worker beside a held execution");
		return 0;
	}
	return -1;
}

int mb_pool_reply(mb_pool *p, uint64_t job_id, uint64_t seq, int status, const char *data, size_t len)
{
	if (p->wp)
		return mb_wpool_reply(p->wp, job_id, seq, status, data, len);
	for (mb_job *j = p->pending; j; j = j->pending_next) {
		if (j->id != job_id)
			continue;
		char *copy = malloc(len + 1);
		if (copy) {
			memcpy(copy, data, len);
			copy[len] = 0;
		}
		uv_mutex_lock(&p->mu);
		int taken = j->call_waiting && !j->call_done && j->call_seq == seq;
		if (taken) {
			free(j->call_reply);
			j->call_reply = copy ? copy : strdup("out of memory");
			j->call_reply_len = copy ? len : (j->call_reply ? 13 : 0);
			j->call_status = copy ? status : 1;
			j->call_done = 1;
		}
		uv_mutex_unlock(&p->mu);
		/* signalled after unlocking, so the woken worker does not block at once on p->mu; j
		 * and its condition variable are freed only on this (the loop) thread */
		if (taken)
			uv_cond_signal(&j->call_cv);
		else
			free(copy);
		return taken ? 0 : -1;
	}
	return -1;
}

size_t mb_pool_pending(const mb_pool *p)
{
	if (p->wp)
		return mb_wpool_pending(p->wp);
	return p->unanswered;
}

void mb_pool_get_stats(mb_pool *p, mb_pool_stats *out)
{
	if (p->wp) {
		mb_wpool_get_stats(p->wp, out);
		return;
	}
	uv_mutex_lock(&p->mu);
	out->workers = p->live_workers - p->abandoned_alive;
	out->busy = p->busy;
	out->held = held_jobs(p);
	out->queued = p->queued;
	out->abandoned = p->abandoned_alive;
	out->threads = p->live_workers;
	out->threads_peak = p->live_peak;
	uv_mutex_unlock(&p->mu);
	out->submitted = p->submitted;
	out->completed = p->completed;
	out->refused = p->refused;
}

static void wake_closed(uv_handle_t *h)
{
	mb_pool *p = h->data;
	uv_mutex_lock(&p->mu);
	size_t stuck = p->abandoned_alive; /* decremented by an exiting worker, under mu */
	uv_mutex_unlock(&p->mu);
	if (stuck)
		return; /* a stuck thread may still post to us: leave the pool (and its eventfd) to
			 * process exit */
	/* Join the workers that exited; abandoned ones are detached and left to finish. Before
	 * the wake-up's fd is closed: a worker may still be closing a large state whose execution
	 * was answered (EV_ANSWER), and posts its EV_DONE when that is over. */
	mb_worker *w = p->workers;
	while (w) {
		mb_worker *next = w->next;
		if (!w->abandoned) {
			uv_thread_join(&w->tid);
			free(w);
		}
		w = next;
	}
	mb_wakeup_release(&p->wake);
	uv_mutex_destroy(&p->mu);
	uv_cond_destroy(&p->cv);
	free(p);
}

void mb_pool_close(mb_pool *p)
{
	if (p->wp) {
		mb_wpool_close(p->wp);
		free(p);
		return;
	}
	uv_mutex_lock(&p->mu);
	p->stopping = 1;
	uv_cond_broadcast(&p->cv);
	uv_mutex_unlock(&p->mu);
	mb_wakeup_close(&p->wake, wake_closed);
}
