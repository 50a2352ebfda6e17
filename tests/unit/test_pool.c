/* test_pool.c - src/pool.c driven directly on a libuv loop with real sandbox executions: jobs
 * complete with their results, notifications arrive before their job's completion, cancelling a
 * running and a queued job, the deadline, a host call answered and one answered after the
 * deadline (dropped), and the watchdog with the test-only stall (MOONBOX_TEST_STALL_MS, see
 * docs/testing.md): a stuck worker is answered on time, replaced only within max_abandoned,
 * and the pool is topped up again once the stuck thread exits. */
#include "unit.h"
#include "sandbox_setup.h"

#include <stdlib.h>
#include <string.h>

#include "pool.h"

#define MAX_JOBS 32

typedef struct {
	uv_loop_t loop;
	mb_pool *pool;
	mb_config cfg;
	uint64_t ids[MAX_JOBS];
	int njobs, ndone;
	int success[MAX_JOBS];
	char result[MAX_JOBS][64];
	char error_type[MAX_JOBS][16];
	double answered_ms[MAX_JOBS];
	int notes_before_done[MAX_JOBS];
	uint64_t started_ns;
	/* behaviour of the callbacks */
	int cancel_on_note;          /* cancel the job that sent a notification */
	int reply_calls;             /* answer host calls at once */
	int hold_calls;              /* mark the job of an unanswered call held (mb_pool_hold) */
	uint64_t call_job, call_seq; /* the last host call, when not answered */
	int calls;
	uv_timer_t guard;
	int timed_out;
} ctx;

static int slot_of(ctx *c, uint64_t id)
{
	for (int i = 0; i < c->njobs; i++)
		if (c->ids[i] == id)
			return i;
	return -1;
}

static void on_notify(void *ud, uint64_t id, mb_notify_kind kind, int level, const char *json, size_t len)
{
	(void)kind, (void)level, (void)json, (void)len;
	ctx *c = ud;
	int i = slot_of(c, id);
	if (i >= 0)
		c->notes_before_done[i]++;
	if (c->cancel_on_note)
		CHECK(mb_pool_cancel(c->pool, id) == 0);
}

static void on_call(void *ud, uint64_t id, uint64_t seq, const char *name, const char *args, size_t len)
{
	(void)len;
	ctx *c = ud;
	c->calls++;
	CHECK_STR(name, "skill_source");
	CHECK(strstr(args, "\"answer\"") != NULL);
	if (c->reply_calls) {
		const char *reply = "{\"code\":\"return 40 + 2\"}";
		CHECK(mb_pool_reply(c->pool, id, seq, 0, reply, strlen(reply)) == 0);
	} else {
		c->call_job = id;
		c->call_seq = seq;
		if (c->hold_calls)
			CHECK(mb_pool_hold(c->pool, id, 1) == 0);
	}
}

static void on_done(void *ud, uint64_t id, const mb_exec_result *res)
{
	ctx *c = ud;
	int i = slot_of(c, id);
	CHECK(i >= 0);
	if (i < 0)
		return;
	c->success[i] = res->success;
	snprintf(c->result[i], sizeof c->result[i], "%.*s", (int)(res->result_len < 60 ? res->result_len : 60),
		 res->result_json ? res->result_json : "");
	snprintf(c->error_type[i], sizeof c->error_type[i], "%s", res->error_type ? res->error_type : "");
	c->answered_ms[i] = (double)(mb_now_ns() - c->started_ns) / 1e6;
	c->ndone++;
	if (c->ndone == c->njobs)
		uv_stop(&c->loop);
}

static void on_guard(uv_timer_t *t)
{
	ctx *c = t->data;
	c->timed_out = 1;
	uv_stop(&c->loop);
}

static ctx *start(int workers, int max_abandoned)
{
	ctx *c = calloc(1, sizeof *c);
	if (sandbox_setup(&c->cfg) != 0)
		return NULL;
	c->cfg.workers = workers;
	c->cfg.max_abandoned = max_abandoned;
	uv_loop_init(&c->loop);
	mb_job_callbacks cb = { on_notify, on_call, on_done, c };
	c->pool = mb_pool_new(&c->loop, &c->cfg, &cb);
	uv_timer_init(&c->loop, &c->guard);
	c->guard.data = c;
	c->started_ns = mb_now_ns();
	return c;
}

static int submit(ctx *c, const char *code, uint64_t timeout_ms)
{
	mb_exec_request req = { 0 };
	req.code = code;
	req.code_len = strlen(code);
	req.timeout_ms = timeout_ms;
	req.memory_bytes = 64u << 20;
	req.instruction_limit = 1000000000;
	req.cfg = &c->cfg;
	char err[256];
	int i = c->njobs;
	if (mb_pool_submit(c->pool, &req, &c->ids[i], err, sizeof err) != 0) {
		fprintf(stderr, "  refused: %s\n", err);
		return -1;
	}
	c->njobs++;
	return i;
}

/* Runs the loop until every submitted job is done (or 20 s pass). */
static void run(ctx *c)
{
	uv_timer_start(&c->guard, on_guard, 20000, 0);
	uv_run(&c->loop, UV_RUN_DEFAULT);
	uv_timer_stop(&c->guard);
	CHECK(!c->timed_out);
}

/* Waits (running the loop) until cond holds or ms pass; returns whether it held. */
static int wait_for(ctx *c, int (*cond)(ctx *), int ms)
{
	uint64_t end = mb_now_ns() + (uint64_t)ms * 1000000u;
	while (!cond(c) && mb_now_ns() < end) {
		uv_run(&c->loop, UV_RUN_NOWAIT);
		uv_sleep(5);
	}
	return cond(c);
}

static void finish(ctx *c)
{
	mb_pool_close(c->pool);
	uv_close((uv_handle_t *)&c->guard, NULL);
	uv_run(&c->loop, UV_RUN_DEFAULT);
	uv_loop_close(&c->loop);
	free(c);
}

TEST(jobs_complete_in_order_with_their_results)
{
	ctx *c = start(2, 4);
	CHECK(c && c->pool);
	if (!c || !c->pool)
		return;
	for (int i = 0; i < 8; i++) {
		char code[96];
		snprintf(code, sizeof code, "mcp.log('info', 'a') mcp.log('info', 'b') return %d * 2", i);
		CHECK(submit(c, code, 5000) == i);
	}
	run(c);
	for (int i = 0; i < 8; i++) {
		char want[16];
		snprintf(want, sizeof want, "%d", i * 2);
		CHECK(c->success[i]);
		CHECK_STR(c->result[i], want);
		CHECK(c->notes_before_done[i] == 2); /* both notifications came before the answer */
	}
	mb_pool_stats s;
	mb_pool_get_stats(c->pool, &s);
	CHECK(s.submitted == 8 && s.completed == 8 && s.abandoned == 0 && s.threads == 2);
	finish(c);
}

TEST(cancel_running_and_queued)
{
	ctx *c = start(1, 4);
	if (!c || !c->pool)
		return;
	c->cancel_on_note = 1; /* the running job announces itself, then loops */
	CHECK(submit(c, "mcp.log('info', 'go') while true do end", 10000) == 0);
	CHECK(submit(c, "return 1", 10000) == 1);
	CHECK(mb_pool_cancel(c->pool, c->ids[1]) == 0); /* still queued behind job 0 */
	run(c);
	CHECK_STR(c->error_type[0], "cancelled");
	CHECK_STR(c->error_type[1], "cancelled");
	CHECK(c->answered_ms[0] < 5000);
	CHECK(mb_pool_cancel(c->pool, c->ids[0]) == -1); /* already answered */
	finish(c);
}

TEST(deadline)
{
	ctx *c = start(1, 4);
	if (!c || !c->pool)
		return;
	CHECK(submit(c, "while true do end", 100) == 0);
	run(c);
	CHECK(!c->success[0]);
	CHECK_STR(c->error_type[0], "timeout");
	CHECK(c->answered_ms[0] >= 100 && c->answered_ms[0] < 100 + 50 + 1000);
	finish(c);
}

TEST(host_call_answered)
{
	ctx *c = start(1, 4);
	if (!c || !c->pool)
		return;
	c->reply_calls = 1;
	CHECK(submit(c, "return require('skills.answer')", 5000) == 0);
	run(c);
	CHECK(c->calls == 1);
	CHECK(c->success[0]);
	CHECK_STR(c->result[0], "42");
	finish(c);
}

TEST(host_call_reply_after_the_deadline_is_dropped)
{
	ctx *c = start(1, 4);
	if (!c || !c->pool)
		return;
	CHECK(submit(c, "return require('skills.answer')", 200) == 0);
	run(c);
	CHECK(c->calls == 1);
	CHECK_STR(c->error_type[0], "timeout");
	const char *reply = "{\"code\":\"return 1\"}";
	CHECK(mb_pool_reply(c->pool, c->call_job, c->call_seq, 0, reply, strlen(reply)) == -1);
	finish(c);
}

static int one_done(ctx *c)
{
	return c->ndone >= 1;
}

/* One worker, its job waiting for a client's answer (held): with held_workers 1 a second job
 * runs on a thread started beside it; with 0 the second waits for the answer. */
TEST(held_job_does_not_take_the_workers_place)
{
	for (int extra = 1; extra >= 0; extra--) {
		ctx *c = start(1, 4);
		if (!c || !c->pool)
			return;
		c->cfg.held_workers = extra; /* read at each hold */
		c->hold_calls = 1;
		CHECK(submit(c, "return require('skills.answer')", 10000) == 0);
		CHECK(submit(c, "return 7", 10000) == 1);
		if (extra) {
			CHECK(wait_for(c, one_done, 5000));
			CHECK(c->success[1]);
			CHECK_STR(c->result[1], "7");
			mb_pool_stats s;
			mb_pool_get_stats(c->pool, &s);
			CHECK(s.held == 1);
			CHECK(s.threads == 2);
		} else {
			CHECK(!wait_for(c, one_done, 300)); /* its only worker is held */
			CHECK(c->calls == 1);
		}
		const char *reply = "{\"code\":\"return 40 + 2\"}";
		CHECK(mb_pool_reply(c->pool, c->call_job, c->call_seq, 0, reply, strlen(reply)) == 0);
		run(c);
		CHECK(c->success[0]);
		CHECK_STR(c->result[0], "42");
		CHECK(c->success[1]);
		finish(c);
	}
}

static int back_in_service(ctx *c)
{
	mb_pool_stats s;
	mb_pool_get_stats(c->pool, &s);
	return s.abandoned == 0 && s.threads == (size_t)c->cfg.workers;
}

TEST(stuck_worker_answered_replaced_within_cap_and_topped_up)
{
	ctx *c = start(1, 1);
	if (!c || !c->pool)
		return;
	/* stalled 400 ms after the code ran; deadline 50 ms: answered at 50 + grace */
	for (int i = 0; i < 4; i++)
		CHECK(submit(c, "-- MOONBOX_TEST_STALL\nreturn 1", 50) == i);
	run(c);
	for (int i = 0; i < 4; i++)
		CHECK_STR(c->error_type[i], "timeout");
	CHECK(c->answered_ms[0] < 50 + 50 + 300); /* from the watchdog, long before the stall ends */
	mb_pool_stats s;
	mb_pool_get_stats(c->pool, &s);
	CHECK(s.threads_peak <= 2); /* workers + max_abandoned */
	CHECK(s.threads_peak == 2); /* the first stuck thread was replaced */
	CHECK(wait_for(c, back_in_service, 5000));
	c->njobs = c->ndone = 0;
	CHECK(submit(c, "return 7", 1000) == 0);
	run(c);
	CHECK(c->success[0]);
	CHECK_STR(c->result[0], "7");
	finish(c);
}

int main(void)
{
	setenv("MOONBOX_TEST_STALL_MS", "400", 1); /* read by mb_sandbox_global_init */
	RUN(jobs_complete_in_order_with_their_results);
	RUN(cancel_running_and_queued);
	RUN(deadline);
	RUN(host_call_answered);
	RUN(host_call_reply_after_the_deadline_is_dropped);
	RUN(stuck_worker_answered_replaced_within_cap_and_topped_up);
	RUN(held_job_does_not_take_the_workers_place);
	return UNIT_END();
}
