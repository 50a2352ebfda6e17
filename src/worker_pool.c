/* worker_pool.c - the execution pool of isolation = process: worker processes driven from the
 * loop thread (the mb_pool API of pool.h; pool.c hands every call here in that mode).
 *
 * Each worker process (worker_proc.c) has a uv_pipe on the loop over its channel. A job goes to
 * an idle worker as one W_JOB write; what the worker sends back arrives on the loop as it does
 * from a client: notifications and host calls go straight to the pool's callbacks (a host call is
 * answered when mb_pool_reply comes, as on a thread), a PII token is made at once, a workspace
 * operation runs on libuv's thread pool (it may touch the disk) and is answered from there, and
 * W_DONE is checked and shaped (on the thread pool when it is large, the worker being free
 * meanwhile to start its next job: J_FINISHING) and reported. So an
 * execution costs two wake-ups, as on a worker thread: the worker's and the loop's.
 *
 * Limits from outside: a timer per job, armed when the job is sent, signals the worker at the
 * deadline (and ends a host call it waits on), and SIGKILLs it timeout_grace_ms later if it has
 * not answered (when a worker thread would be answered and abandoned); the answer is then the limit that tripped first in the worker (its budget
 * is in the page it shares with us), else the deadline or the cancel. A worker that dies fails
 * only its job ("crashed", naming the signal). Dead and killed workers are replaced by starting
 * a new process on the thread pool (posix_spawn waits for the exec, so never on the loop);
 * queued jobs wait for it. A worker that cannot be started is retried after a pause.
 *
 * Held executions (mb_wpool_hold: a host call waiting for a client's answer) do not count
 * against `workers`: size_slots keeps workers + min(held, held_workers) slots in service,
 * starting a slot beside a held job and retiring an idle one (its process ends, the slot stays
 * for later) once the holds end; give_idle starts jobs only while fewer than `workers` run unheld.
 *
 * Under load a busy worker gets jobs ahead, as many as about AHEAD_WORK_NS of work by its recent
 * pace (AHEAD_MAX at most, none behind a job already running that long: ahead_room), so a
 * worker of short jobs goes from one to the next without waiting for the loop. An idle worker
 * with nothing queued takes back jobs sent ahead to a busy one that has not started them
 * (steal; a cancel does the same): both sides settle each job with a compare-and-swap on its
 * claim word in the page they share (worker_proc.h), and the worker skips a job taken back.
 *
 * Ownership: jobs belong to the pool from submit until their on_done returns and their timer is
 * closed; workers until their pipe is closed and the process reaped. Everything here runs on the
 * loop thread but the work callbacks, which touch only what their request holds.
 */
#include "worker_pool.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "codec.h"
#include "log.h"
#include "worker_int.h"
#include "worker_ops.h"
#include "worker_proc.h"

#define BIG_DONE (256u << 10)  /* a result this large is checked and shaped off the loop */
#define BIG_CALL (256u << 10)  /* host-call arguments this large are checked off the loop */
#define RESPAWN_PAUSE_MS 1000  /* after a worker failed to start */
#define READY_TIMEOUT_MS 10000 /* a worker's start: exec, Lua, PCRE2 JIT, confinement */
#define CLOSE_MIN_MS 1000      /* a large state's close (W_CLOSING) may take at least this long */
#define AHEAD_MAX 64           /* jobs sent ahead to one busy worker under load, at most */
#define AHEAD_WORK_NS 2000000  /* ... and about this much work by its recent pace (ahead_room) */
#define AHEAD_PACE_NS 500000   /* the pace of a worker that has not finished a job yet */

typedef struct wjob wjob;
typedef struct wproc wproc;

/* J_SENT: waits in its worker's channel. J_FINISHING: its worker sent a large W_DONE, which is
 * checked and shaped on the thread pool; the worker has moved on to its next job meanwhile. */
enum { J_QUEUED, J_SENT, J_RUNNING, J_FINISHING, J_DONE };
enum { P_SPAWNING, P_STARTING, P_IDLE, P_BUSY, P_DEAD };

struct wjob {
	mb_wpool *pp;
	uint64_t id;
	mb_exec_request req;
	char *code, *context;
	mb_budget budget;       /* limits (for messages), the deadline, the stop reason */
	uv_timer_t timer;
	int timer_stage;        /* 1: until the deadline; 2: until the kill */
	int state;
	wproc *proc;
	uint64_t t0, calls, notes, seq;
	uint64_t wseq;          /* its sequence number on its worker: its claim slot (steal) */
	uint64_t sent;          /* bytes of replies and workspace answers sent to it (finish) */
	uint64_t ws_pending, ws_total; /* its workspace operations unanswered, and in all (ws_frame) */
	int call_waiting, answered;
	int held;               /* its host call waits for a client's answer (mb_wpool_hold) */
	char tenant[72];
	wjob *next;             /* queue */
	wjob *all_next, *all_prev;
};

struct wproc {
	mb_wpool *pp;
	int state;
	mb_wspawn sp;           /* pid, fd (owned by pipe once open), shared page */
	uv_pipe_t pipe;
	int pipe_open;
	mb_wreader rd;
	char rbuf[65536];
	wjob *job;              /* running */
	wjob *ahead, *ahead_tail; /* sent ahead (linked by next), started in order (start_ahead) */
	int nahead;
	uint64_t seq_next;      /* the last job's sequence number sent to this process */
	uint64_t seq_done;      /* every job up to this one it has passed (run or skipped) */
	uint64_t pace_ns;       /* a running average of its jobs' times, start to W_DONE */
	uint64_t revoked[MB_WORKER_CLAIMS]; /* per slot: a job taken back, until its W_SKIP */
	uint64_t gen;           /* counts the processes of this slot (offload: the one that sent) */
	uv_work_t work;         /* the spawn */
	int spawn_rc;
	char spawn_err[MB_ERR_MAX];
	uv_timer_t retry;       /* a new start after a failed one; the wait for W_READY */
	int retry_open;
	int pause;              /* the last start failed: wait RESPAWN_PAUSE_MS before the next */
	char tenant[72];        /* the tenant whose code it ran ("": none yet): it serves no other */
	int closing;            /* between W_CLOSING and W_CLOSED: busy closing a large state */
	int retired;            /* out of service (size_slots): no process, not restarted */
	size_t unread;          /* replies in our write queue, not yet in the channel (send_frame) */
	const char *stop_why;   /* why we killed it (send_frame): what its end reports */
	wproc *next;
};

struct mb_wpool {
	uv_loop_t *loop;
	const mb_config *cfg;
	mb_job_callbacks cb;
	wproc *procs;
	wjob *q_head, *q_tail, *all;
	size_t queued, queued_bytes, busy, alive, handles, unanswered;
	size_t nslots, in_service; /* slots made, and those not retired (size_slots) */
	size_t marked;          /* jobs marked held (mb_wpool_hold) */
	uint64_t next_id, submitted, completed, refused, started, crashed, killed, stolen;
	int stopping;
	/* large W_DONE and W_CALL checks on the thread pool: at most max_result_checks run at
	 * once, the rest wait here in order (offload_frame) */
	struct offload *checks_head, *checks_tail;
	size_t checks_running, checks_waiting;
	uint64_t checks_done;
	mb_wops wops;           /* workspace operations, queued per tenant (worker_ops.c) */
	mb_wbuf wb;
	char start_failure[MB_ERR_MAX + 128]; /* why the last start failed ("" once a worker is ready) */
};

static void dispatch(mb_wpool *pp);
static void start_worker(mb_wpool *pp, wproc *w);
static void retry_fired(uv_timer_t *t);
static void finish(wjob *j, mb_exec_result *res);

/* ---- sending -------------------------------------------------------------------------------- */

typedef struct {
	uv_write_t req;
	char *buf;
	wproc *w;
	int reply;              /* a W_REPLY: counted in w->unread until written */
} wsend;

static void sent(uv_write_t *req, int status)
{
	(void)status; /* a worker gone: its end of file says so */
	wsend *s = (wsend *)req;
	if (s->reply)
		s->w->unread--;
	free(s->buf);
	free(s);
}

/* Replies a worker may leave unread in our write queue: its sandbox waits for each answer, so
 * a worker has at most max_workspace_ops_pending workspace answers and one call's coming (and
 * a stop's); one that asks on and reads nothing (a flood of W_MINT or workspace reads) would
 * grow the queue without bound. */
static size_t unread_max(const mb_wpool *pp)
{
	return (size_t)pp->cfg->max_workspace_ops_pending + 2;
}

/* Writes the frame in b to w (b's buffer is taken over): at once when the channel takes it all
 * (the usual case: no write request, and none of the epoll_ctl that uv_write's completion costs
 * at the next poll), else what is left with uv_write (uv_try_write refuses while earlier frames
 * wait, so the order holds). */
static void send_frame(wproc *w, mb_wbuf *b)
{
	if (b->failed || !w->pipe_open || w->state == P_DEAD)
		return;
	uint64_t n = b->len - 4;
	for (int i = 0; i < 4; i++)
		b->buf[i] = (char)(n >> (8 * i));
	uv_buf_t ub = uv_buf_init(b->buf, (unsigned)b->len);
	int k = uv_try_write((uv_stream_t *)&w->pipe, &ub, 1);
	if ((k >= 0 && (size_t)k == ub.len) || (k < 0 && k != UV_EAGAIN && k != UV_ENOSYS)) {
		free(b->buf); /* written, or the worker is gone (its end of file says so) */
		memset(b, 0, sizeof *b);
		return;
	}
	int reply = b->len > 4 && (unsigned char)b->buf[4] == W_REPLY;
	if (reply && w->unread >= unread_max(w->pp)) { /* it asks and does not read: stopped */
		free(b->buf);
		memset(b, 0, sizeof *b);
		if (!w->stop_why) {
			w->stop_why = "the worker process left its answers unread; it was stopped";
			w->pp->killed++;
			if (w->sp.pid > 0) /* (never 0: the whole process group) */
				kill(w->sp.pid, SIGKILL); /* its end of file ends it (died), with stop_why */
		}
		return;
	}
	wsend *s = malloc(sizeof *s);
	if (!s)
		return;
	s->w = w;
	s->reply = reply;
	w->unread += (size_t)reply;
	s->buf = b->buf;
	if (k > 0) {
		ub.base += k;
		ub.len -= (size_t)k;
	}
	memset(b, 0, sizeof *b);
	if (uv_write(&s->req, (uv_stream_t *)&w->pipe, &ub, 1, sent) != 0) {
		free(s->buf);
		free(s);
	}
}

/* ---- workers -------------------------------------------------------------------------------- */

/* One handle or request of the pool is done; the last one after mb_wpool_close frees it. */
static void pool_release(mb_wpool *pp)
{
	pp->handles--;
	if (!pp->stopping || pp->handles)
		return;
	for (wproc *w = pp->procs, *next; w; w = next) {
		next = w->next;
		mb_wreader_free(&w->rd);
		free(w);
	}
	mb_wbuf_free(&pp->wb);
	free(pp);
}

static void retry_closed(uv_handle_t *h)
{
	wproc *w = h->data;
	pool_release(w->pp);
}

static void proc_closed(uv_handle_t *h)
{
	wproc *w = h->data;
	mb_wpool *pp = w->pp;
	w->pipe_open = 0;
	w->sp.fd = -1; /* the pipe closed it */
	mb_worker_spawn_release(&w->sp);
	size_t max = w->rd.max;
	mb_wreader_free(&w->rd);
	w->rd.max = max;
	if (!pp->stopping && !w->retired) { /* the slot gets a new process; after a pause when the start failed */
		if (w->pause)
			uv_timer_start(&w->retry, retry_fired, RESPAWN_PAUSE_MS, 0);
		else
			start_worker(pp, w);
	}
	pool_release(pp);
}

/* Ends a worker: killed when sig, reaped; returns its wait status. The pipe closes after. */

/* w has no job running and none sent ahead (its W_DONE was read, its result is being
 * shaped, or the last job ahead was taken back): it is idle. */
static void settle(wproc *w)
{
	if (w->state == P_BUSY && !w->job && !w->ahead && !w->closing) {
		w->state = P_IDLE;
		w->pp->busy--;
	}
}

/* The jobs sent ahead to w, never started, go back to the head of the queue, in order (they
 * stay counted in queued): w died, or its job waits on the client (W_RECALL). */
static void requeue_ahead(wproc *w)
{
	if (!w->ahead)
		return;
	for (wjob *a = w->ahead; a; a = a->next) {
		a->state = J_QUEUED;
		a->proc = NULL;
	}
	w->ahead_tail->next = w->pp->q_head;
	w->pp->q_head = w->ahead;
	if (!w->pp->q_tail)
		w->pp->q_tail = w->ahead_tail;
	w->ahead = w->ahead_tail = NULL;
	w->nahead = 0;
}

static int end_worker(wproc *w, int sig)
{
	int st = -1;
	if (w->sp.pid > 0) {
		pid_t k = waitpid(w->sp.pid, &st, WNOHANG);
		if (k == 0) {
			kill(w->sp.pid, sig ? sig : SIGKILL);
			while (waitpid(w->sp.pid, &st, 0) < 0 && errno == EINTR)
				;
		}
		w->sp.pid = 0;
	}
	if (w->state == P_BUSY)
		w->pp->busy--;
	if (w->state != P_DEAD && w->state != P_SPAWNING)
		w->pp->alive--;
	w->state = P_DEAD;
	w->job = NULL;
	w->closing = 0;
	requeue_ahead(w);
	if (w->pipe_open && !uv_is_closing((uv_handle_t *)&w->pipe))
		uv_close((uv_handle_t *)&w->pipe, proc_closed);
	return st;
}

static void on_frame(wproc *w, mb_wmsg *m);
static void fail_queue(mb_wpool *pp);

/* Makes w's running code look at its budget now (the deadline, a cancel). Never with pid 0, which
 * kill(2) takes for the whole process group: a worker already ended has none. */
static void interrupt(wproc *w)
{
	if (w->sp.pid > 0)
		kill(w->sp.pid, MB_SANDBOX_SIGNAL);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	(void)hint;
	wproc *w = h->data;
	*buf = uv_buf_init(w->rbuf, sizeof w->rbuf);
}

static void died(wproc *w, const char *why)
{
	if (!why)
		why = w->stop_why;
	wjob *j = w->job;
	mb_wpool *pp = w->pp;
	int starting = w->state == P_STARTING;
	int st = end_worker(w, SIGKILL);
	if (starting) { /* it never became ready: say why, pause, and fail what waits for it */
		char how[MB_ERR_MAX];
		if (why)
			snprintf(how, sizeof how, "%s", why);
		else
			mb_worker_death_message(st, how, sizeof how);
		snprintf(pp->start_failure, sizeof pp->start_failure, "a worker process could not "
			 "start (isolation = process): %s; the server log says more", how);
		mb_log(MB_LOG_ERROR, "pool: %s; trying again in %d ms", pp->start_failure,
		       RESPAWN_PAUSE_MS);
		w->pause = 1;
		fail_queue(pp);
		return;
	}
	if (!j)
		return;
	mb_exec_result res;
	memset(&res, 0, sizeof res);
	char msg[MB_ERR_MAX];
	if (why) {
		snprintf(msg, sizeof msg, "%s", why);
	} else {
		mb_worker_death_message(st, msg, sizeof msg);
		pp->crashed++;
	}
	mb_log(MB_LOG_WARNING, "%s", msg);
	mb_worker_set_failure(&res, "crashed", msg);
	finish(j, &res);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	wproc *w = s->data;
	if (n < 0) {
		died(w, NULL);
		return;
	}
	if (n == 0)
		return;
	if (mb_wreader_feed(&w->rd, buf->base, (size_t)n) != 0) {
		died(w, "out of memory reading from a worker process");
		return;
	}
	mb_wmsg m;
	int k;
	while (w->state != P_DEAD && (k = mb_wreader_next(&w->rd, &m)) != 0) {
		if (k < 0) {
			died(w, "the worker process sent a message over the size limit (max_result_bytes "
			     "and max_output_bytes); it was stopped");
			return;
		}
		on_frame(w, &m);
		if (w->stop_why && w->state != P_DEAD) {
			died(w, NULL);
			return;
		}
	}
}

static void spawn_work(uv_work_t *req)
{
	wproc *w = req->data;
	w->spawn_rc = mb_worker_spawn(w->pp->cfg, 0, &w->sp, w->spawn_err, sizeof w->spawn_err);
}

static void retry_fired(uv_timer_t *t)
{
	wproc *w = t->data;
	if (w->pp->stopping)
		return;
	if (w->state == P_STARTING) { /* no W_READY in time */
		died(w, "it was not ready within 10 s");
		return;
	}
	if (w->state == P_DEAD && !w->pipe_open && !w->retired)
		start_worker(w->pp, w);
}

static void spawned(uv_work_t *req, int status)
{
	wproc *w = req->data;
	mb_wpool *pp = w->pp;
	if (pp->stopping) {
		if (status == 0 && w->spawn_rc == 0) {
			kill(w->sp.pid, SIGKILL);
			waitpid(w->sp.pid, NULL, 0);
			mb_worker_spawn_release(&w->sp);
		}
		w->state = P_DEAD;
		pool_release(pp);
		return;
	}
	pp->handles--;
	if (status != 0 || w->spawn_rc != 0) {
		snprintf(pp->start_failure, sizeof pp->start_failure, "a worker process could not start "
			 "(isolation = process): %s", status ? "the spawn was cancelled" : w->spawn_err);
		mb_log(MB_LOG_ERROR, "pool: %s; trying again in %d ms", pp->start_failure,
		       RESPAWN_PAUSE_MS);
		w->state = P_DEAD;
		uv_timer_start(&w->retry, retry_fired, RESPAWN_PAUSE_MS, 0);
		fail_queue(pp);
		return;
	}
	pp->started++;
	uv_pipe_init(pp->loop, &w->pipe, 0);
	w->pipe.data = w;
	if (uv_pipe_open(&w->pipe, w->sp.fd) != 0) {
		kill(w->sp.pid, SIGKILL);
		waitpid(w->sp.pid, NULL, 0);
		mb_worker_spawn_release(&w->sp);
		w->state = P_DEAD;
		uv_close((uv_handle_t *)&w->pipe, NULL);
		uv_timer_start(&w->retry, retry_fired, RESPAWN_PAUSE_MS, 0);
		return;
	}
	w->pipe_open = 1;
	pp->handles++;
	w->state = P_STARTING; /* until its W_READY */
	pp->alive++;
	uv_read_start((uv_stream_t *)&w->pipe, alloc_cb, read_cb);
	uv_timer_start(&w->retry, retry_fired, READY_TIMEOUT_MS, 0);
}

static void start_worker(mb_wpool *pp, wproc *w)
{
	w->state = P_SPAWNING;
	w->job = NULL;
	w->tenant[0] = 0;
	w->sp.fd = -1;
	w->sp.pid = 0;
	w->sp.shared = NULL;
	w->gen++;
	w->seq_next = w->seq_done = w->pace_ns = 0; /* a new process, a new page */
	w->stop_why = NULL;
	memset(w->revoked, 0, sizeof w->revoked);
	size_t max = w->rd.max;
	mb_wreader_free(&w->rd);
	w->rd.max = max;
	w->work.data = w;
	pp->handles++;
	if (uv_queue_work(pp->loop, &w->work, spawn_work, spawned) != 0) {
		pp->handles--;
		w->state = P_DEAD;
		uv_timer_start(&w->retry, retry_fired, RESPAWN_PAUSE_MS, 0);
	}
}

/* ---- jobs ----------------------------------------------------------------------------------- */

static void job_closed(uv_handle_t *h)
{
	wjob *j = h->data;
	mb_wpool *pp = j->pp;
	if (j->all_prev)
		j->all_prev->all_next = j->all_next;
	else
		pp->all = j->all_next;
	if (j->all_next)
		j->all_next->all_prev = j->all_prev;
	free(j->code);
	free(j->context);
	free(j);
	pool_release(pp);
}

/* Reports res as j's answer (shaped here), frees what it holds, and lets its worker take the
 * next job. */
static void finish(wjob *j, mb_exec_result *res)
{
	mb_wpool *pp = j->pp;
	if (j->answered)
		return;
	j->answered = 1;
	if (j->held) {
		j->held = 0;
		pp->marked--;
	}
	if (j->state == J_RUNNING && j->proc && j->proc->job == j) {
		j->proc->job = NULL;
		settle(j->proc); /* else it starts the next one */
	}
	j->state = J_DONE;
	pp->unanswered--;
	mb_codec_hash_hex(j->code, j->req.code_len, res->code_hash);
	if (!res->output)
		res->output = strdup("");
	if (res->success && !res->result_json) {
		res->result_json = strdup("null");
		res->result_len = res->result_json ? 4 : 0;
	}
	/* the worker's measure of its run, which leaves out the trip through the channel; never
	 * more than what the loop saw */
	double seen = j->t0 ? (double)(mb_now_ns() - j->t0) / 1e6 : 0;
	if (!(res->execution_time_ms > 0 && res->execution_time_ms <= seen)) /* 0: none reported */
		res->execution_time_ms = seen;
	/* what the worker says its code took in: never more than the server handed it, the
	 * context_vars apart (none when the server made them: the worker is not told) and the
	 * sources that came through the channel together */
	uint64_t left = j->sent;
	for (int i = 0; i < MB_IO_NSOURCES; i++) {
		uint64_t most = i != MB_IO_CONTEXT ? left : j->req.context_internal ? 0 : j->req.context_len;
		if (res->io.in_bytes[i] > most)
			res->io.in_bytes[i] = most;
		if (i != MB_IO_CONTEXT)
			left -= res->io.in_bytes[i];
		if (res->io.in_tokens[i] > res->io.in_bytes[i])
			res->io.in_tokens[i] = res->io.in_bytes[i];
	}
	mb_exec_result_shape(res);
	pp->completed++;
	if (pp->cb.on_done)
		pp->cb.on_done(pp->cb.ud, j->id, res);
	mb_exec_result_free(res);
	uv_timer_stop(&j->timer);
	uv_close((uv_handle_t *)&j->timer, job_closed);
	dispatch(pp);
}

/* The answer of a job stopped by a limit from outside (cancelled while queued, killed). */
static void finish_stopped(wjob *j, mb_stop_reason why)
{
	mb_budget_trip(&j->budget, why);
	char msg[MB_ERR_MAX];
	mb_budget_message(&j->budget, msg, sizeof msg);
	mb_exec_result res;
	memset(&res, 0, sizeof res);
	mb_worker_set_failure(&res, mb_stop_name(why), msg);
	finish(j, &res);
}

static void reply_stopped(wjob *j, mb_stop_reason why)
{
	if (!j->call_waiting || !j->proc)
		return;
	j->call_waiting = 0;
	const char *msg = why == MB_STOP_CANCELLED ? "cancelled" : "the deadline passed";
	j->sent += strlen(msg);
	mb_worker_reply(&j->pp->wb, 2, (uint64_t)why, msg, strlen(msg));
	send_frame(j->proc, &j->pp->wb);
}

static void on_timer(uv_timer_t *t)
{
	wjob *j = t->data;
	if (j->state != J_RUNNING || !j->proc)
		return;
	wproc *w = j->proc;
	if (w->job != j) {
		/* never (a running job is its worker's job until it is answered); were it lost, the
		 * slot may run another job in another process by now, which this timer must not
		 * signal or kill: the lost job is answered alone */
		mb_log(MB_LOG_ERROR, "pool: execution %llu lost its worker process",
		       (unsigned long long)j->id);
		j->proc = NULL;
		mb_exec_result res;
		memset(&res, 0, sizeof res);
		mb_worker_set_failure(&res, "crashed", "its worker process was lost");
		finish(j, &res);
		return;
	}
	if (j->timer_stage == 1) {
		/* the deadline: the worker's hook fires on its next instruction; a call it waits on
		 * ends */
		interrupt(w);
		reply_stopped(j, MB_STOP_TIMEOUT);
		j->timer_stage = 2;
		uv_timer_start(t, on_timer, (uint64_t)j->pp->cfg->timeout_grace_ms, 0);
		return;
	}
	/* still running timeout_grace_ms later (when a worker thread would be answered and
	 * abandoned): stuck in C, or compromised. The cause is what tripped first in it, when that
	 * was a limit. */
	int first = atomic_load(&w->sp.shared->stop);
	mb_exec_result res;
	memset(&res, 0, sizeof res);
	res.instructions = w->sp.shared->instructions;
	res.memory_peak_bytes = w->sp.shared->mem_peak > j->req.memory_bytes ? j->req.memory_bytes
									      : w->sp.shared->mem_peak;
	mb_log(MB_LOG_WARNING, "pool: execution %llu still running %lld ms after its deadline; "
	       "killing its worker process", (unsigned long long)j->id,
	       (long long)j->pp->cfg->timeout_grace_ms);
	j->proc = NULL;
	w->job = NULL;
	end_worker(w, SIGKILL);
	j->pp->killed++;
	if (first > MB_STOP_NONE && first <= MB_STOP_CANCELLED)
		mb_budget_trip(&j->budget, (mb_stop_reason)first);
	mb_stop_reason why = mb_budget_check(&j->budget);
	if (why == MB_STOP_NONE)
		why = MB_STOP_TIMEOUT;
	mb_budget_trip(&j->budget, why);
	char msg[MB_ERR_MAX];
	mb_budget_message(&j->budget, msg, sizeof msg);
	mb_worker_set_failure(&res, mb_stop_name(why), msg);
	finish(j, &res);
}

/* The job's code starts now: its clock and its timer. */
static void job_started(wproc *w, wjob *j)
{
	j->state = J_RUNNING;
	w->job = j;
	j->t0 = mb_now_ns();
	j->budget.deadline_ns = j->t0 + j->budget.timeout_ms * 1000000ull;
	j->timer_stage = 1;
	uv_timer_start(&j->timer, on_timer, j->budget.timeout_ms, 0);
}

static _Atomic uint64_t *claims_of(wproc *w)
{
	return ((mb_wpage *)w->sp.shared)->claim;
}

/* Whether w can take one more job: the claim slot it would use must be free, which it is once
 * w has passed the job sent in it MB_WORKER_CLAIMS jobs ago (jobs taken back hold their slot
 * until w skips them). */
static int slot_free(const wproc *w)
{
	return w->seq_next + 1 - w->seq_done <= MB_WORKER_CLAIMS;
}

/* Writes j to w. ahead: w is running another job, and j waits in the channel until that one
 * ends (ahead_room says how many may); it starts right after that one's W_DONE, and its clock
 * starts when we read that (start_ahead) - unless it is taken back first (steal). */
static void send_job(wproc *w, wjob *j, int ahead)
{
	mb_wpool *pp = w->pp;
	j->proc = w;
	snprintf(w->tenant, sizeof w->tenant, "%s", j->tenant);
	if (ahead) {
		j->state = J_SENT;
		j->next = NULL;
		if (w->ahead_tail)
			w->ahead_tail->next = j;
		else
			w->ahead = j;
		w->ahead_tail = j;
		w->nahead++;
	} else {
		w->state = P_BUSY;
		pp->busy++;
		/* the page is the running job's: set only for a job that starts at once */
		atomic_store(&w->sp.shared->cancel, atomic_load(&j->budget.cancel));
		atomic_store(&w->sp.shared->stop, MB_STOP_NONE);
	}
	j->wseq = ++w->seq_next;
	atomic_store(&claims_of(w)[j->wseq % MB_WORKER_CLAIMS], MB_CLAIM(j->wseq, MB_CLAIM_PENDING));
	mb_wbuf *b = &pp->wb;
	mb_wbuf_start(b, W_JOB);
	mb_wbuf_u64(b, (uint64_t)ahead);
	mb_wbuf_u64(b, j->id); /* what a cancel names (mb_budget.cancel_job) */
	mb_wbuf_u64(b, j->wseq);
	mb_wbuf_u64(b, j->req.timeout_ms);
	mb_wbuf_u64(b, j->req.memory_bytes);
	mb_wbuf_u64(b, j->req.instruction_limit);
	mb_wbuf_u64(b, (uint64_t)j->req.pii_policy);
	mb_wbuf_u64(b, j->req.workspace != NULL);
	mb_wbuf_u64(b, j->req.workspace ? (uint64_t)mb_workspace_limits_of(j->req.workspace)->max_file_bytes
					 : 0);
	mb_wbuf_bytes(b, j->code, j->req.code_len);
	mb_wbuf_u64(b, j->context != NULL);
	mb_wbuf_bytes(b, j->context, j->context ? j->req.context_len : 0);
	send_frame(w, b);
	if (!ahead)
		job_started(w, j);
}

/* The next queued job. One sent ahead stays counted in queued and queued_bytes (the limits of
 * mb_wpool_submit) until it starts. */
static wjob *pop(mb_wpool *pp)
{
	wjob *j = pp->q_head;
	pp->q_head = j->next;
	if (!pp->q_head)
		pp->q_tail = NULL;
	j->next = NULL;
	return j;
}

static void unqueue(mb_wpool *pp, wjob *j)
{
	pp->queued--;
	pp->queued_bytes -= j->req.code_len + j->req.context_len;
}

/* An idle worker for a job of this tenant: one that served it, else a fresh one. A worker
 * that ran another tenant's code is never given this one's (it may be compromised): when only
 * such workers are idle, one is replaced, and the job waits for the new process. */
static wproc *idle_for(mb_wpool *pp, const char *tenant)
{
	wproc *fresh = NULL, *other = NULL;
	int coming = 0;
	for (wproc *w = pp->procs; w; w = w->next) {
		coming |= w->state == P_SPAWNING || w->state == P_STARTING;
		if (w->state != P_IDLE || !slot_free(w))
			continue;
		if (strcmp(w->tenant, tenant) == 0)
			return w;
		if (!w->tenant[0])
			fresh = w;
		else
			other = w;
	}
	if (!fresh && other && !coming)
		end_worker(other, SIGKILL); /* its slot restarts clean (proc_closed) */
	return fresh;
}

/* Jobs sent ahead w may still take: about AHEAD_WORK_NS of work by its pace (AHEAD_MAX at
 * most), less what its running job has taken so far - none once that passes AHEAD_WORK_NS.
 * So a worker of trivial jobs keeps a deep queue (it goes from one to the next without waiting
 * for the loop, and the loop serves it in batches) while one of slow jobs gets none: another
 * tenant's job, or one sent behind a job that turns out long, waits about AHEAD_WORK_NS at most
 * for the jobs queued on a worker (and steal takes them back from one that is stuck). */
static int ahead_room(const wproc *w, uint64_t now)
{
	if (!slot_free(w))
		return 0;
	uint64_t ran = w->job && now > w->job->t0 ? now - w->job->t0 : 0;
	if (ran >= AHEAD_WORK_NS)
		return 0;
	uint64_t n = (AHEAD_WORK_NS - ran) / (w->pace_ns ? w->pace_ns : AHEAD_PACE_NS);
	if (n > AHEAD_MAX)
		n = AHEAD_MAX;
	return n > (uint64_t)w->nahead ? (int)(n - (uint64_t)w->nahead) : 0;
}

/* Takes j, sent ahead to w and not started, back from w: 1 when the server's compare-and-swap
 * on its claim won (w will skip it and say W_SKIP), 0 when w has started it. */
static int take_back(wproc *w, wjob *j)
{
	uint64_t want = MB_CLAIM(j->wseq, MB_CLAIM_PENDING);
	if (!atomic_compare_exchange_strong(&claims_of(w)[j->wseq % MB_WORKER_CLAIMS], &want,
					    MB_CLAIM(j->wseq, MB_CLAIM_REVOKED)))
		return 0;
	w->revoked[j->wseq % MB_WORKER_CLAIMS] = j->wseq;
	return 1;
}

/* Nothing is queued and a worker is idle: it takes back up to half of the jobs sent ahead to
 * the busy worker of its tenant that holds the most (a fresh worker: of any tenant), from the
 * last one, and they go to the head of the queue for it. So a job that runs long does not hold
 * up the ones sent after it, and the tail of a burst is shared. Returns whether any came. */
static int steal(mb_wpool *pp)
{
	int any = 0;
	for (wproc *a = pp->procs; a && !any; a = a->next)
		any = a->state == P_BUSY && a->nahead > 0;
	if (!any) /* the usual case under light load: one pass, not one per idle worker */
		return 0;
	any = 0;
	for (wproc *b = pp->procs; b; b = b->next) {
		if (b->state != P_IDLE || !slot_free(b))
			continue;
		wproc *v = NULL;
		for (wproc *a = pp->procs; a; a = a->next)
			if (a->state == P_BUSY && a->nahead > 0 && (!v || a->nahead > v->nahead) &&
			    (!b->tenant[0] || strcmp(a->tenant, b->tenant) == 0))
				v = a;
		if (!v)
			continue;
		wjob *list[AHEAD_MAX];
		int n = 0;
		for (wjob *a = v->ahead; a && n < AHEAD_MAX; a = a->next)
			list[n++] = a;
		int from = n;
		while (from > n / 2 && take_back(v, list[from - 1])) /* it starts them in order: the */
			from--;                                   /* first it has started ends this */
		if (from == n)
			continue;
		list[n - 1]->next = pp->q_head;
		pp->q_head = list[from];
		if (!pp->q_tail)
			pp->q_tail = list[n - 1];
		for (int i = from; i < n; i++) {
			list[i]->state = J_QUEUED; /* still counted in queued (unqueue at its start) */
			list[i]->proc = NULL;
		}
		if (from) {
			list[from - 1]->next = NULL;
			v->ahead_tail = list[from - 1];
		} else {
			v->ahead = v->ahead_tail = NULL;
		}
		v->nahead = from;
		settle(v);
		pp->stolen += (uint64_t)(n - from);
		any = 1;
	}
	return any;
}

/* Jobs whose host call waits for a client's answer (a person may take minutes): they do not
 * take one of the `workers` places. */
static size_t held_now(const mb_wpool *pp)
{
	size_t n = 0;
	for (const wproc *w = pp->procs; w; w = w->next)
		n += w->state == P_BUSY && w->job && w->job->held && w->job->call_waiting;
	return n;
}

static wproc *new_slot(mb_wpool *pp)
{
	const mb_config *cfg = pp->cfg;
	/* the largest frame a worker may send: a result with its output, or a file */
	uint64_t most = (uint64_t)cfg->max_result_bytes + (uint64_t)cfg->max_output_bytes * 6;
	if ((uint64_t)cfg->workspace_max_file_bytes > most)
		most = (uint64_t)cfg->workspace_max_file_bytes;
	if ((uint64_t)cfg->max_message_bytes > most)
		most = (uint64_t)cfg->max_message_bytes;
	wproc *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->pp = pp;
	w->rd.max = (size_t)most + (1u << 20);
	w->state = P_DEAD;
	uv_timer_init(pp->loop, &w->retry);
	w->retry.data = w;
	w->retry_open = 1;
	pp->handles++;
	w->next = pp->procs;
	pp->procs = w;
	pp->nslots++;
	pp->in_service++;
	return w;
}

/* Keeps workers + min(held, held_workers) slots in service: a held job gets a slot beside it
 * (a retired one restarted, else a new one, at most workers + held_workers in all), and an idle
 * one beyond that retires (its process ends; the slot stays for the next hold). */
static void size_slots(mb_wpool *pp, size_t held)
{
	if (pp->stopping)
		return;
	size_t extra = held < (size_t)pp->cfg->held_workers ? held : (size_t)pp->cfg->held_workers;
	size_t want = (size_t)pp->cfg->workers + extra;
	for (wproc *w = pp->procs; w && pp->in_service < want; w = w->next) {
		if (!w->retired)
			continue;
		w->retired = 0;
		pp->in_service++;
		if (!w->pipe_open && w->state == P_DEAD && !uv_is_active((uv_handle_t *)&w->retry))
			start_worker(pp, w); /* else proc_closed or the retry timer starts it */
	}
	while (pp->in_service < want && pp->nslots < (size_t)(pp->cfg->workers + pp->cfg->held_workers)) {
		wproc *w = new_slot(pp);
		if (!w)
			break;
		start_worker(pp, w);
	}
	for (wproc *w = pp->procs; w && pp->in_service > want; w = w->next)
		if (!w->retired && w->state == P_IDLE && !w->ahead && !w->closing) {
			w->retired = 1;
			pp->in_service--;
			end_worker(w, SIGKILL);
		}
}

/* Idle workers get a queued job first (of their tenant), while fewer than cap run. */
static void give_idle(mb_wpool *pp, size_t cap)
{
	size_t idle = 0;
	for (wproc *w = pp->procs; w; w = w->next)
		idle += w->state == P_IDLE;
	/* (with no idle worker the queue is not walked: under load this runs on every event) */
	for (wjob *j = idle ? pp->q_head : NULL, *prev = NULL, *next; j && idle && pp->busy < cap;
	     j = next) {
		next = j->next;
		wproc *w = idle_for(pp, j->tenant);
		if (!w) {
			prev = j;
			continue;
		}
		if (prev)
			prev->next = next;
		else
			pp->q_head = next;
		if (pp->q_tail == j)
			pp->q_tail = prev;
		j->next = NULL;
		unqueue(pp, j);
		send_job(w, j, 0);
		idle--;
	}
}

/* Idle workers get a job first (of their tenant), taking back jobs sent ahead to others when
 * nothing is queued (steal); then, while jobs still wait, each busy worker gets more of its
 * tenant's ahead (ahead_room), so under load a worker goes from one job to the next without
 * waiting for the loop. */
static void dispatch(mb_wpool *pp)
{
	size_t cap = (size_t)pp->cfg->workers;
	if (pp->marked || pp->in_service > cap) {
		size_t held = held_now(pp);
		size_slots(pp, held);
		cap += held;
	}
	give_idle(pp, cap);
	if (!pp->q_head && pp->busy < cap && steal(pp))
		give_idle(pp, cap);
	/* Sending ahead binds a job to one worker: not while another worker is starting (it takes
	 * the job in a moment), and never to one whose job waits in a host call (a question to the
	 * client may wait minutes for a person: input_required, docs/protocol.md) */
	if (!pp->q_head)
		return;
	for (wproc *w = pp->procs; w; w = w->next)
		if (w->state == P_SPAWNING || w->state == P_STARTING)
			return;
	uint64_t now = mb_now_ns();
	for (int more = 1; more && pp->q_head;) { /* one per busy worker per round */
		more = 0;
		for (wproc *w = pp->procs; w && pp->q_head; w = w->next)
			if (w->state == P_BUSY && !(w->job && w->job->call_waiting) &&
			    strcmp(w->tenant, pp->q_head->tenant) == 0 && ahead_room(w, now) > 0) {
				send_job(w, pop(pp), 1);
				more = 1;
			}
	}
}

/* ---- what a worker sends -------------------------------------------------------------------- */

typedef struct offload offload;
struct offload {
	uv_work_t work;
	mb_wpool *pp;
	uint64_t job_id;
	wproc *w;
	uint64_t gen;         /* w's process that sent the frame (w may have a new one by the end) */
	char *frame;          /* a copy of the payload */
	size_t len;
	int type;
	mb_workspace *ws;
	mb_exec_request req;  /* a copy: the job may be answered (killed) and freed meanwhile */
	mb_exec_result res;
	mb_wbuf out;
	int bad, untrusted;
	/* W_CALL: the call (its arguments are frame[args_at..len)), its job's call number, and
	 * the verdict of the check (why it is refused, "" when it is fine) */
	char name[65];
	size_t args_at;
	uint64_t seq;
	char why[256];
	offload *next;        /* waiting for a check slot */
	mb_wop qop;           /* W_WS: its place in the per-tenant queue (worker_ops.c) */
};

static void offload_work(uv_work_t *req)
{
	offload *o = req->data;
	mb_wmsg m = {o->type, (const unsigned char *)o->frame, (const unsigned char *)o->frame + o->len};
	if (o->type == W_WS) {
		o->bad = mb_worker_ws(&m, o->ws, &o->out) != 0;
	} else if (o->type == W_CALL) {
		if (mb_worker_valid_call(o->name, o->frame + o->args_at, o->len - o->args_at, o->req.cfg,
					 o->why, sizeof o->why))
			o->why[0] = '\0';
	} else {
		int rc = mb_worker_read_done(&m, &o->req, &o->res);
		o->bad = rc < 0;
		o->untrusted = rc > 0;
	}
}

/* The job still waiting for this answer, or NULL (it ended meanwhile). */
static wjob *live_job(mb_wpool *pp, uint64_t id, wproc *w, int type)
{
	for (wjob *j = pp->all; j; j = j->all_next)
		if (j->id == id) {
			if (type == W_DONE)
				return j->state == J_FINISHING && j->proc == w ? j : NULL;
			return j->state == J_RUNNING && j->proc == w && w->job == j ? j : NULL;
		}
	return NULL;
}

static void call_go(wproc *w, wjob *j, const char *nm, const char *args, size_t an,
		    const char *refusal);
static void offload_done(uv_work_t *req, int status);
static void ws_settled(mb_wpool *pp, offload *o);

/* Starts a check (W_DONE, W_CALL) when fewer than max_result_checks run, else queues it;
 * workspace operations start at once. @returns 0, or a libuv error */
static int offload_start(offload *o)
{
	mb_wpool *pp = o->pp;
	int check = o->type != W_WS;
	if (check && pp->checks_running >= (size_t)pp->cfg->max_result_checks) {
		o->next = NULL;
		if (pp->checks_tail)
			pp->checks_tail->next = o;
		else
			pp->checks_head = o;
		pp->checks_tail = o;
		pp->checks_waiting++;
		return 0;
	}
	int rc = uv_queue_work(pp->loop, &o->work, offload_work, offload_done);
	if (rc == 0 && check)
		pp->checks_running++;
	return rc;
}

static void offload_free(offload *o)
{
	mb_wpool *pp = o->pp;
	mb_exec_result_free(&o->res);
	mb_wbuf_free(&o->out);
	free(o->frame);
	free(o);
	pool_release(pp);
}

/* A check slot is free: the next waiting check starts (one that cannot is answered as if it
 * had failed, so its job is not left waiting). */
static void checks_next(mb_wpool *pp)
{
	while (pp->checks_head && pp->checks_running < (size_t)pp->cfg->max_result_checks) {
		offload *o = pp->checks_head;
		pp->checks_head = o->next;
		if (!pp->checks_head)
			pp->checks_tail = NULL;
		pp->checks_waiting--;
		if (uv_queue_work(pp->loop, &o->work, offload_work, offload_done) == 0) {
			pp->checks_running++;
			continue;
		}
		o->bad = 1;
		snprintf(o->why, sizeof o->why, "the server could not check the arguments");
		pp->checks_running++; /* offload_done gives it back */
		offload_done(&o->work, UV_ECANCELED);
	}
}

static void offload_done(uv_work_t *req, int status)
{
	offload *o = req->data;
	mb_wpool *pp = o->pp;
	if (o->type != W_WS) {
		pp->checks_running--;
		pp->checks_done++;
	}
	wjob *j = pp->stopping ? NULL : live_job(pp, o->job_id, o->w, o->type);
	/* the verdict on the process that sent the frame: if it has died meanwhile, its slot may
	 * run a new process, with another job (of any tenant: a fresh process takes any) */
	int same = o->w->gen == o->gen && o->w->state != P_DEAD;
	if (o->type == W_CALL) {
		/* the call goes on only if its job still waits for this very call (the deadline or a
		 * cancel may have answered it meanwhile) */
		if (j && same && j->call_waiting && j->seq == o->seq) {
			if (status != 0 && !o->why[0])
				snprintf(o->why, sizeof o->why, "the server could not check the arguments");
			call_go(o->w, j, o->name, o->frame + o->args_at, o->len - o->args_at,
				o->why[0] ? o->why : NULL);
		}
	} else if (j && status == 0 && !o->bad) {
		if (o->type == W_WS) {
			j->sent += o->out.len;
			send_frame(o->w, &o->out);
		} else {
			/* the process is stopped first: its next job, if it started one, fails with
			 * the reason, and finish cannot hand it a new one */
			if (o->untrusted && same)
				died(o->w, "the worker process sent a result it should not have; it was stopped");
			finish(j, &o->res);
			memset(&o->res, 0, sizeof o->res);
		}
	} else if (j) {
		if (o->type == W_DONE) { /* the job was detached from its worker: answer it here */
			mb_exec_result res;
			memset(&res, 0, sizeof res);
			mb_worker_set_failure(&res, "crashed", "the worker process broke the protocol; it was stopped");
			finish(j, &res);
		}
		if (same)
			died(o->w, "the worker process broke the protocol; it was stopped");
	}
	if (o->type == W_WS) {
		ws_settled(pp, o);
		mb_wops_finished(&pp->wops, &o->qop);
	}
	offload_free(o);
	checks_next(pp);
}

/* A copy of the frame's payload from 'from' (m->p when NULL) goes to the thread pool. */
static offload *offload_new(wproc *w, wjob *j, mb_wmsg *m, const unsigned char *from)
{
	offload *o = calloc(1, sizeof *o);
	const unsigned char *p = from ? from : m->p;
	size_t len = (size_t)(m->end - p);
	char *copy = o ? malloc(len ? len : 1) : NULL;
	if (!copy) {
		free(o);
		return NULL;
	}
	memcpy(copy, p, len);
	o->pp = w->pp;
	o->job_id = j->id;
	o->w = w;
	o->gen = w->gen;
	o->frame = copy;
	o->len = len;
	o->type = m->type;
	o->ws = j->req.workspace;
	o->req = j->req; /* read_done reads its limits only, never what its pointers point to */
	o->work.data = o;
	return o;
}

static int offload_submit(offload *o)
{
	mb_wpool *pp = o->pp;
	pp->handles++;
	if (offload_start(o) != 0) {
		pp->handles--;
		free(o->frame);
		free(o);
		return -1;
	}
	return 0;
}

static int offload_frame(wproc *w, wjob *j, mb_wmsg *m)
{
	offload *o = offload_new(w, j, m, NULL);
	return o ? offload_submit(o) : -1;
}

/* Workspace operations (W_WS) belong to their job: a job may have max_workspace_ops_pending
 * unanswered (its sandbox waits for each answer, so a worker that asks for more is compromised
 * and is stopped) and max_workspace_ops in all (more are answered with an error naming it, off
 * the thread pool); they wait in their tenant's queue for the thread pool (worker_ops.c), and
 * those of a job that has ended meanwhile are dropped, never started (ws_live). */
static void ws_settled(mb_wpool *pp, offload *o)
{
	for (wjob *j = pp->all; j; j = j->all_next)
		if (j->id == o->job_id) {
			if (j->ws_pending)
				j->ws_pending--;
			return;
		}
}

static int ws_live(void *ctx, void *data)
{
	mb_wpool *pp = ctx;
	offload *o = data;
	return !pp->stopping && o->w->gen == o->gen && live_job(pp, o->job_id, o->w, W_WS) != NULL;
}

static int ws_start(void *ctx, void *data)
{
	mb_wpool *pp = ctx;
	offload *o = data;
	return uv_queue_work(pp->loop, &o->work, offload_work, offload_done);
}

static void ws_fail(void *ctx, void *data)
{
	(void)ctx;
	offload *o = data;
	offload_done(&o->work, UV_ECANCELED);
}

static void ws_drop(void *ctx, void *data)
{
	offload *o = data;
	ws_settled(ctx, o);
	offload_free(o);
}

static int ws_frame(wproc *w, wjob *j, mb_wmsg *m)
{
	mb_wpool *pp = w->pp;
	const mb_config *cfg = pp->cfg;
	char msg[MB_ERR_MAX];
	if (j->ws_pending >= (uint64_t)cfg->max_workspace_ops_pending) {
		snprintf(msg, sizeof msg, "the worker process asked for more than %lld workspace "
			 "operations at once (max_workspace_ops_pending); it was stopped",
			 (long long)cfg->max_workspace_ops_pending);
		died(w, msg);
		return 0;
	}
	if (j->ws_total >= (uint64_t)cfg->max_workspace_ops) {
		int n = snprintf(msg, sizeof msg, "workspace: this execution has made its %lld "
				 "workspace operations (max_workspace_ops); do fewer, larger reads and "
				 "writes, or raise max_workspace_ops", (long long)cfg->max_workspace_ops);
		mb_wbuf_start(&pp->wb, W_REPLY);
		mb_wbuf_u64(&pp->wb, (uint64_t)(int64_t)-EDQUOT);
		mb_wbuf_bytes(&pp->wb, msg, (size_t)n);
		j->sent += (uint64_t)n;
		send_frame(w, &pp->wb);
		return 0;
	}
	offload *o = offload_new(w, j, m, NULL);
	if (!o)
		return -1;
	pp->handles++;
	j->ws_pending++;
	j->ws_total++;
	if (mb_wops_push(&pp->wops, j->tenant, &o->qop, o) != 0) {
		j->ws_pending--;
		pp->handles--;
		free(o->frame);
		free(o);
		return -1;
	}
	return 0;
}

/* The checked call goes to the host (pp->cb.on_call), or is refused with the reason. */
static void call_go(wproc *w, wjob *j, const char *nm, const char *args, size_t an,
		    const char *refusal)
{
	mb_wpool *pp = w->pp;
	if (refusal) {
		j->call_waiting = 0;
		j->sent += strlen(refusal);
		mb_worker_reply(&pp->wb, 1, 0, refusal, strlen(refusal));
		send_frame(w, &pp->wb);
		return;
	}
	if (w->nahead && (strncmp(nm, "client_request", 14) == 0 || strncmp(nm, "upstream_", 9) == 0)) {
		/* a question to the client (input_required may wait minutes for a person) or an
		 * upstream call: the jobs sent ahead go back to the queue for other workers; the
		 * worker, waiting for this call's reply, drops them before it can start one */
		mb_wbuf_start(&pp->wb, W_RECALL);
		send_frame(w, &pp->wb);
		requeue_ahead(w);
		dispatch(pp);
	}
	pp->cb.on_call(pp->cb.ud, j->id, j->seq, nm, args, an);
}

/* A host call: its arguments are checked (json_check.h, no tree, the worker encoder's bounds)
 * before the host decodes or splices them - here when small, on the thread pool when larger
 * than BIG_CALL (the worker waits for the reply either way, and may send nothing else) - and
 * the call counts against max_host_calls from the moment it is taken. */
static int on_call(wproc *w, wjob *j, mb_wmsg *m)
{
	mb_wpool *pp = w->pp;
	const char *name, *args;
	size_t nn, an;
	if (mb_wmsg_bytes(m, &name, &nn) || mb_wmsg_bytes(m, &args, &an) || nn == 0 || nn > 64 ||
	    memchr(name, 0, nn) || j->call_waiting)
		return -1;
	char nm[65];
	memcpy(nm, name, nn);
	nm[nn] = 0;
	char msg[256];
	j->call_waiting = 1;
	if (j->calls >= (uint64_t)pp->cfg->max_host_calls) {
		snprintf(msg, sizeof msg, "too many calls to the server in one execution "
			 "(max_host_calls=%lld)", (long long)pp->cfg->max_host_calls);
		call_go(w, j, nm, args, an, msg);
		return 0;
	}
	if (!pp->cb.on_call) {
		call_go(w, j, nm, args, an, "no server calls here");
		return 0;
	}
	j->calls++;
	j->seq++;
	if (an > BIG_CALL) {
		offload *o = offload_new(w, j, m, (const unsigned char *)args);
		if (!o)
			return -1;
		memcpy(o->name, nm, nn + 1);
		o->seq = j->seq;
		return offload_submit(o);
	}
	if (!mb_worker_valid_call(nm, args, an, pp->cfg, msg, sizeof msg)) {
		call_go(w, j, nm, args, an, msg);
		return 0;
	}
	call_go(w, j, nm, args, an, NULL);
	return 0;
}

/* mcp.log / mcp.progress. The sandbox sends at most max_notifications, each at most
 * max_output_bytes of valid JSON, of a known kind and level: anything else is a compromised
 * worker, stopped before its payload is parsed (a forged 17 MB progress was parsed twice on the
 * loop, and log payloads reached clients uncut). Returns -1 for those. */
static int on_notify(wproc *w, wjob *j, mb_wmsg *m)
{
	const mb_config *cfg = w->pp->cfg;
	uint64_t kind, level;
	const char *json;
	size_t n;
	if (mb_wmsg_u64(m, &kind) || mb_wmsg_u64(m, &level) || mb_wmsg_bytes(m, &json, &n))
		return -1;
	int lv = (int)(int64_t)level;
	if ((kind != MB_NOTIFY_LOG && kind != MB_NOTIFY_PROGRESS) || lv < -1 || lv > 7 ||
	    (kind == MB_NOTIFY_PROGRESS) != (lv == -1) || n > (size_t)cfg->max_output_bytes ||
	    ++j->notes > (uint64_t)cfg->max_notifications)
		return -1;
	if (!mb_worker_valid_json(json, n, cfg, 0, NULL))
		return -1;
	if (w->pp->cb.on_notify)
		w->pp->cb.on_notify(w->pp->cb.ud, j->id, (mb_notify_kind)kind, lv, json, n);
	return 0;
}

/* w's job has ended (its W_DONE was read): w starts the first job sent ahead to it at once (it
 * reads that frame right after sending the W_DONE), so that job runs from now - its clock and
 * timer start - without a word from the worker; one cancelled while it waited is stopped by
 * id as soon as it starts. */
static void start_ahead(wproc *w)
{
	mb_wpool *pp = w->pp;
	wjob *n = w->ahead;
	if (!n || w->job || w->state != P_BUSY || w->closing) /* closing: at W_CLOSED */
		return;
	w->ahead = n->next;
	if (!w->ahead)
		w->ahead_tail = NULL;
	w->nahead--;
	n->next = NULL;
	unqueue(pp, n);
	job_started(w, n);
	if (atomic_load(&n->budget.cancel)) { /* cancelled while it waited */
		atomic_store(&w->sp.shared->cancel_job, n->id);
		interrupt(w);
	}
}

/* w's W_DONE of j was read: w has passed every job up to j, and its pace (ahead_room) takes
 * j's time in. */
static void passed(wproc *w, wjob *j)
{
	if (j->wseq > w->seq_done)
		w->seq_done = j->wseq;
	uint64_t now = mb_now_ns(), took = now > j->t0 ? now - j->t0 : 0;
	w->pace_ns = w->pace_ns ? (w->pace_ns * 7 + took) / 8 : took;
}

/* A large W_DONE goes to the thread pool (offload_frame): the job is answered from there, and
 * its worker, which has sent all of it, is free now - it may already be starting a job sent
 * ahead (start_ahead), or take a new one. The job's timer stops: its code has ended. */
static void detach(wproc *w, wjob *j)
{
	mb_wpool *pp = w->pp;
	j->state = J_FINISHING;
	uv_timer_stop(&j->timer);
	w->job = NULL;
	settle(w);
	start_ahead(w);
	dispatch(pp);
}

/* A worker still closing a large state (W_CLOSING, no W_CLOSED) as long after its W_DONE as
 * the job itself could run: stuck or compromised. Its answer is out; it is killed and replaced. */
static void close_overdue(uv_timer_t *t)
{
	wproc *w = t->data;
	if (!w->closing || w->state != P_BUSY)
		return;
	mb_log(MB_LOG_WARNING, "pool: a worker process still closing a large state after its "
	       "execution's timeout_ms; killing it");
	w->pp->killed++;
	died(w, NULL);
}

static void on_frame(wproc *w, mb_wmsg *m)
{
	mb_wpool *pp = w->pp;
	if (w->state == P_STARTING) {
		if (m->type != W_READY) {
			died(w, NULL);
			return;
		}
		uint64_t sec = 0, ll = 0;
		mb_wmsg_u64(m, &sec);
		mb_wmsg_u64(m, &ll);
		static int told;
		if (!told) {
			told = 1;
			mb_log(MB_LOG_INFO, "worker processes: seccomp %s, Landlock %s",
			       sec ? "on" : "off", ll ? "on" : "not available in this kernel");
		}
		uv_timer_stop(&w->retry);
		w->pause = 0;
		pp->start_failure[0] = 0;
		w->state = P_IDLE;
		dispatch(pp);
		return;
	}
	if (m->type == W_SKIP) { /* a job taken back (steal, cancel): its slot is free */
		uint64_t seq;
		if (mb_wmsg_u64(m, &seq) || seq == 0 || w->revoked[seq % MB_WORKER_CLAIMS] != seq) {
			died(w, "the worker process broke the protocol; it was stopped");
			return;
		}
		w->revoked[seq % MB_WORKER_CLAIMS] = 0;
		if (seq > w->seq_done)
			w->seq_done = seq;
		dispatch(pp);
		return;
	}
	if (m->type == W_CLOSED) { /* its large state is closed: it reads jobs again */
		if (!w->closing || w->job) {
			died(w, "the worker process broke the protocol; it was stopped");
			return;
		}
		w->closing = 0;
		uv_timer_stop(&w->retry);
		settle(w);
		start_ahead(w);
		dispatch(pp);
		return;
	}
	wjob *j = w->job;
	if (!j) { /* nothing to say between jobs */
		died(w, NULL);
		return;
	}
	int bad = 0;
	switch (m->type) {
	case W_CLOSING: /* its W_DONE follows; the state is closed after it, until W_CLOSED */
		bad = w->closing;
		w->closing = 1;
		/* a worker that never says W_CLOSED is stopped: it gets as long as the job had */
		uv_timer_start(&w->retry, close_overdue,
			       j->req.timeout_ms > CLOSE_MIN_MS ? j->req.timeout_ms : CLOSE_MIN_MS, 0);
		break;
	case W_NOTIFY: bad = on_notify(w, j, m) != 0; break;
	case W_CALL: bad = on_call(w, j, m) != 0; break;
	case W_MINT:
		bad = mb_worker_mint(m, &pp->wb) != 0;
		if (!bad)
			send_frame(w, &pp->wb);
		break;
	case W_WS: bad = ws_frame(w, j, m) != 0; break;
	case W_DONE:
		passed(w, j);
		if ((size_t)(m->end - m->p) > BIG_DONE) {
			bad = offload_frame(w, j, m) != 0;
			if (!bad)
				detach(w, j);
		} else {
			mb_exec_result res;
			memset(&res, 0, sizeof res);
			int rc = mb_worker_read_done(m, &j->req, &res);
			bad = rc < 0;
			if (bad) {
				mb_exec_result_free(&res);
			} else if (rc > 0) {
				/* answered, but the worker is not to be trusted again: it ends first (the
				 * jobs sent ahead to it go back to the queue), so that finish, which lets
				 * the pool hand out work, never sees it idle and gives it a job that its
				 * end would then lose */
				end_worker(w, SIGKILL);
				finish(j, &res);
			} else {
				finish(j, &res);
				start_ahead(w);
			}
		}
		break;
	default: bad = 1;
	}
	if (bad)
		died(w, "the worker process broke the protocol; it was stopped");
}

/* No worker is in service and the last start failed: the queued jobs get that reason rather
 * than waiting for a worker that may never come. */
static void fail_queue(mb_wpool *pp)
{
	if (pp->alive || pp->stopping)
		return;
	while (pp->q_head) {
		wjob *j = pop(pp);
		unqueue(pp, j);
		mb_exec_result res;
		memset(&res, 0, sizeof res);
		mb_worker_set_failure(&res, "crashed", pp->start_failure);
		finish(j, &res);
	}
}

/* ---- the pool API --------------------------------------------------------------------------- */

mb_wpool *mb_wpool_new(uv_loop_t *loop, const mb_config *cfg, const mb_job_callbacks *cb)
{
	mb_wpool *pp = calloc(1, sizeof *pp);
	if (!pp)
		return NULL;
	pp->loop = loop;
	pp->cfg = cfg;
	pp->cb = *cb;
	pp->next_id = 1;
	pp->wops.per_tenant = (size_t)cfg->workspace_ops_per_tenant;
	pp->wops.ctx = pp;
	pp->wops.live = ws_live;
	pp->wops.start = ws_start;
	pp->wops.fail = ws_fail;
	pp->wops.drop = ws_drop;
	for (int64_t i = 0; i < cfg->workers; i++) {
		wproc *w = new_slot(pp);
		if (!w)
			break;
		start_worker(pp, w);
	}
	if (!pp->procs) {
		free(pp);
		return NULL;
	}
	return pp;
}

int mb_wpool_submit(mb_wpool *pp, const mb_exec_request *req, uint64_t *id_out, char *err,
		    size_t errlen)
{
	if (!pp->alive && pp->start_failure[0]) {
		pp->refused++;
		snprintf(err, errlen, "%s", pp->start_failure);
		return -1;
	}
	size_t idle = 0;
	for (wproc *w = pp->procs; w; w = w->next)
		idle += w->state != P_BUSY && !w->retired; /* a slot being (re)started takes a job soon */
	if (mb_pool_admit(pp->cfg, pp->queued, idle, pp->queued_bytes,
			  req->code_len + (req->context_json ? req->context_len : 0), err, errlen) != 0) {
		pp->refused++;
		return -1;
	}
	wjob *j = calloc(1, sizeof *j);
	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	j->pp = pp;
	j->id = pp->next_id++;
	j->req = *req;
	j->code = mb_wire_copy(req->code, req->code_len);
	j->context = req->context_json ? mb_wire_copy(req->context_json, req->context_len) : NULL;
	if (!j->code || (req->context_json && !j->context)) {
		free(j->code);
		free(j->context);
		free(j);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	snprintf(j->tenant, sizeof j->tenant, "%s", req->tenant ? req->tenant : "default");
	j->req.code = j->code;
	j->req.context_json = j->context;
	j->req.tenant = j->tenant;
	j->req.notify = NULL;
	j->req.host_call = NULL;
	mb_budget_init(&j->budget, req->memory_bytes, req->instruction_limit, 0);
	j->budget.timeout_ms = req->timeout_ms;
	uv_timer_init(pp->loop, &j->timer);
	j->timer.data = j;
	pp->handles++;
	j->all_next = pp->all;
	if (pp->all)
		pp->all->all_prev = j;
	pp->all = j;
	j->state = J_QUEUED;
	if (pp->q_tail)
		pp->q_tail->next = j;
	else
		pp->q_head = j;
	pp->q_tail = j;
	pp->queued++;
	pp->queued_bytes += req->code_len + req->context_len;
	pp->submitted++;
	pp->unanswered++;
	*id_out = j->id;
	dispatch(pp);
	return 0;
}

static wjob *find(mb_wpool *pp, uint64_t id)
{
	for (wjob *j = pp->all; j; j = j->all_next)
		if (j->id == id && !j->answered)
			return j;
	return NULL;
}

int mb_wpool_cancel(mb_wpool *pp, uint64_t id)
{
	wjob *j = find(pp, id);
	if (!j)
		return -1;
	atomic_store(&j->budget.cancel, 1);
	if (j->state == J_QUEUED) {
		wjob **pj = &pp->q_head, *prev = NULL;
		while (*pj && *pj != j) {
			prev = *pj;
			pj = &(*pj)->next;
		}
		if (*pj) {
			*pj = j->next;
			if (pp->q_tail == j)
				pp->q_tail = prev;
			pp->queued--;
			pp->queued_bytes -= j->req.code_len + j->req.context_len;
		}
		finish_stopped(j, MB_STOP_CANCELLED);
		return 0;
	}
	if (j->state == J_SENT && j->proc && take_back(j->proc, j)) { /* not started: taken back */
		wproc *w = j->proc;
		wjob **pj = &w->ahead, *prev = NULL;
		while (*pj != j) {
			prev = *pj;
			pj = &(*pj)->next;
		}
		*pj = j->next;
		if (w->ahead_tail == j)
			w->ahead_tail = prev;
		w->nahead--;
		settle(w);
		j->next = NULL;
		unqueue(pp, j);
		pp->stolen++;
		finish_stopped(j, MB_STOP_CANCELLED);
		return 0;
	}
	if (j->state == J_RUNNING && j->proc) {
		/* checked at its next instruction; by id, since the worker may have finished this job
		 * and started the next one sent ahead before we read its W_DONE */
		atomic_store(&j->proc->sp.shared->cancel_job, j->id);
		interrupt(j->proc);
		reply_stopped(j, MB_STOP_CANCELLED);
	} /* J_SENT that has started unseen: stopped by id (start_ahead) */
	return 0;
}

int mb_wpool_hold(mb_wpool *pp, uint64_t id, int on)
{
	wjob *j = find(pp, id);
	if (!j)
		return -1;
	on = on != 0;
	if (j->held != on) {
		j->held = on;
		if (on)
			pp->marked++;
		else
			pp->marked--;
	}
	dispatch(pp);
	return 0;
}

int mb_wpool_reply(mb_wpool *pp, uint64_t id, uint64_t seq, int status, const char *data, size_t len)
{
	wjob *j = find(pp, id);
	if (!j || j->state != J_RUNNING || !j->call_waiting || j->seq != seq || !j->proc)
		return -1;
	j->call_waiting = 0;
	j->sent += len;
	mb_worker_reply(&pp->wb, status ? 1 : 0, 0, data, len);
	send_frame(j->proc, &pp->wb);
	return 0;
}

size_t mb_wpool_pending(const mb_wpool *pp)
{
	return pp->unanswered;
}

void mb_wpool_get_stats(mb_wpool *pp, mb_pool_stats *out)
{
	memset(out, 0, sizeof *out);
	out->workers = pp->in_service;
	out->busy = pp->busy;
	out->held = held_now(pp);
	out->queued = pp->queued;
	out->submitted = pp->submitted;
	out->completed = pp->completed;
	out->refused = pp->refused;
	out->processes = pp->alive;
	out->processes_started = pp->started;
	out->processes_crashed = pp->crashed;
	out->processes_killed = pp->killed;
	out->jobs_taken_back = pp->stolen;
	out->workspace_ops_queued = pp->wops.queued;
	out->workspace_ops_running = pp->wops.running;
	out->workspace_ops_done = pp->wops.done;
	out->workspace_ops_dropped = pp->wops.dropped;
}

void mb_wpool_close(mb_wpool *pp)
{
	mb_wops_clear(&pp->wops); /* (before stopping: a drop's release cannot free pp here) */
	pp->stopping = 1;
	for (wproc *w = pp->procs; w; w = w->next) {
		if (w->retry_open) {
			uv_timer_stop(&w->retry);
			uv_close((uv_handle_t *)&w->retry, retry_closed);
			w->retry_open = 0;
		}
		if (w->state != P_SPAWNING)
			end_worker(w, SIGKILL);
	}
	for (wjob *j = pp->all; j; j = j->all_next)
		if (!uv_is_closing((uv_handle_t *)&j->timer))
			uv_close((uv_handle_t *)&j->timer, job_closed);
	pp->handles++; /* this call's own reference */
	pool_release(pp);
}
