/* server.c - the server struct and the libuv loop that owns it.
 *
 * Wiring: stdio lines -> host (Lua dispatch) -> pool (worker threads) -> host (resume the
 * request coroutine) -> stdio writes. On stdin EOF the server stops reading, lets every in-flight
 * execution finish and its response be written, then closes the pool, the host and the transport
 * and returns 0. All of this runs on the loop thread; only the pool's workers run elsewhere.
 */
#include "server.h"

#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "history.h"
#include "http.h"
#include "host.h"
#include "log.h"
#include "pii_config.h"
#include "pool.h"
#include "sandbox.h"
#include "stdio_transport.h"
#include "store.h"
#include "store_pg.h"
#include "workspace.h"

typedef struct mb_server {
	const mb_config *cfg;
	uv_loop_t loop;
	mb_stdio *io;
	mb_host *host;
	mb_pool *pool;
	mb_store *store;
	mb_workspaces *workspaces;
	mb_pg *pg;                  /* the store on PostgreSQL (store_url), instead of store */
	mb_history *history;
	mb_pii_detector *pii;
	unsigned char pii_key[MB_PII_KEY_BYTES];
	size_t stuck;
	mb_http *http;              /* Streamable HTTP instead of stdio (http_listen); NULL once closed */
	int http_mode;
	uv_signal_t sigint, sigterm;
	uv_timer_t drain;           /* after a signal: waits for in-flight requests */
	uint64_t drain_until;
	char metrics[2048];
	char *metrics_all;          /* metrics plus the host's text; freed at the next /metrics */
	int eof;
	int closing;
	size_t pause_at;   /* executions in flight at which stdin reading pauses */
	uv_timer_t reclaim; /* after large messages: give their memory back (server_reclaim) */
	int reclaim_on;
} mb_server;

/* Memory given back after large answers. Such an answer leaves a few copies of its text behind
 * in the host state (the result's raw values, the encoded message) that an idle server would not
 * collect until its next allocations start a cycle, and what glibc frees stays in its heaps. A
 * moment after the last large message, a full collection of the host state and malloc_trim hand
 * it back (most large blocks are their own mappings already: main.c sets M_MMAP_THRESHOLD). */
#define RECLAIM_MESSAGE ((size_t)1 << 20) /* messages this large start the timer */
#define RECLAIM_DELAY_MS 200

static void on_reclaim(uv_timer_t *t)
{
	mb_server *s = t->data;
	mb_host_collect(s->host);
	malloc_trim(0);
}

static void note_large(mb_server *s, size_t len)
{
	if (len < RECLAIM_MESSAGE || !s->reclaim_on || uv_is_active((uv_handle_t *)&s->reclaim))
		return;
	uv_timer_start(&s->reclaim, on_reclaim, RECLAIM_DELAY_MS, 0);
}

static void maybe_finish(mb_server *s)
{
	if (!s->eof || s->closing)
		return;
	if (mb_host_inflight(s->host) || mb_pool_pending(s->pool) ||
	    (s->io && mb_stdio_pending_writes(s->io)))
		return;
	s->closing = 1;
	mb_log(MB_LOG_DEBUG, "stdin closed and all work answered; exiting");
	mb_host_shutdown(s->host);
	mb_pool_stats st;
	mb_pool_get_stats(s->pool, &st);
	s->stuck = st.abandoned; /* such threads may still use the PII detector after we return */
	mb_pool_close(s->pool);
	if (s->io)
		mb_stdio_close(s->io);
	if (s->http_mode) {
		uv_close((uv_handle_t *)&s->sigint, NULL);
		uv_close((uv_handle_t *)&s->sigterm, NULL);
	}
}

/* Flow control: once enough executions are in flight, stop reading stdin so a client that
 * pipelines faster than we execute is slowed down by its pipe instead of getting "busy" errors;
 * read again when half of them are done. Lines already read are still handled. */
static void on_line(void *ud, const char *line, size_t len)
{
	mb_server *s = ud;
	mb_host_handle_line(s->host, line, len);
	if (mb_pool_pending(s->pool) >= s->pause_at)
		mb_stdio_pause(s->io);
}

static void on_oversize(void *ud, size_t bytes, const char *id, size_t id_len)
{
	mb_server *s = ud;
	mb_host_handle_oversize(s->host, bytes, id, id_len);
}

static void on_eof(void *ud)
{
	mb_server *s = ud;
	s->eof = 1;
	maybe_finish(s);
}

static void on_drain(void *ud)
{
	maybe_finish(ud);
}

static int host_send(void *ud, uint64_t session, uint64_t exchange, int final, int status, char *data,
		     size_t len, char *err, size_t errlen)
{
	mb_server *s = ud;
	note_large(s, len);
	if (s->http_mode) {
		if (!s->http) { /* closed: in-flight answers have nowhere to go */
			free(data);
			return 0;
		}
		/* one JSON message per send; the transport frames it (JSON body or SSE event) */
		return mb_http_send(s->http, session, exchange, final, status, data,
				    len && data[len - 1] == '\n' ? len - 1 : len, err, errlen);
	}
	/* stdio: one session, no exchanges */
	int rc = mb_stdio_write(s->io, data, len, err, errlen);
	if (rc == -ENOBUFS) {
		mb_log(MB_LOG_NOTICE, "stdout: %s", err);
		return rc;
	}
	if (rc)
		mb_log(MB_LOG_ERROR, "stdout: %s", uv_strerror(rc));
	return 0;
}

/* What get_execution_stats shows of the backlog (the transport's) */
static void host_backlog(void *ud, uint64_t out[3])
{
	mb_server *s = ud;
	if (s->http) {
		mb_http_stats_t st;
		mb_http_stats(s->http, &st);
		out[0] = st.backlog_bytes;
		out[1] = st.backlog_peak;
		out[2] = st.backlog_refused;
	} else if (s->io) {
		mb_stdio_backlog b;
		mb_stdio_get_backlog(s->io, &b);
		out[0] = b.bytes;
		out[1] = b.peak;
		out[2] = b.refused;
	}
}

static void job_notify(void *ud, uint64_t job, mb_notify_kind kind, int level, const char *json,
		       size_t len)
{
	mb_server *s = ud;
	mb_host_job_notify(s->host, job, kind, level, json, len);
}

static void job_call(void *ud, uint64_t job, uint64_t seq, const char *name, const char *args,
		     size_t len)
{
	mb_server *s = ud;
	mb_host_job_call(s->host, job, seq, name, args, len);
}

static void job_done(void *ud, uint64_t job, const mb_exec_result *res)
{
	mb_server *s = ud;
	mb_host_job_done(s->host, job, res);
	if (s->io && mb_pool_pending(s->pool) <= s->pause_at / 2)
		mb_stdio_resume(s->io);
	maybe_finish(s);
}

/* ---- Streamable HTTP --------------------------------------------------------------------- */

static int http_message(void *ud, uint64_t session, uint64_t exchange, const char *tenant,
			const char *body, size_t len, const mb_http_req *req)
{
	mb_server *s = ud;
	return mb_host_handle_message(s->host, session, exchange, tenant, body, len, req->protocol_version,
				      req->method, req->name, req->params, req->principal, req->rights);
}

static void http_exchange_closed(void *ud, uint64_t exchange)
{
	mb_server *s = ud;
	mb_host_exchange_closed(s->host, exchange);
}

static void http_auth_failed(void *ud, const char *why, const char *peer)
{
	mb_server *s = ud;
	mb_host_auth_failed(s->host, why, peer);
}

static void http_session_end(void *ud, uint64_t session)
{
	mb_server *s = ud;
	mb_host_end_session(s->host, session);
}

static const char *http_metrics(void *ud)
{
	mb_server *s = ud;
	mb_pool_stats st;
	mb_pool_get_stats(s->pool, &st);
	snprintf(s->metrics, sizeof s->metrics,
		 "# HELP moonbox_executions_total Executions submitted, completed and refused.\n"
		 "# TYPE moonbox_executions_total counter\n"
		 "moonbox_executions_total{state=\"submitted\"} %llu\n"
		 "moonbox_executions_total{state=\"completed\"} %llu\n"
		 "moonbox_executions_total{state=\"refused\"} %llu\n"
		 "# HELP moonbox_workers Workers (threads or processes) by state: busy, in service, stuck, held (waiting for a client's answer).\n"
		 "# TYPE moonbox_workers gauge\n"
		 "moonbox_workers{state=\"busy\"} %zu\n"
		 "moonbox_workers{state=\"total\"} %zu\n"
		 "moonbox_workers{state=\"stuck\"} %zu\n"
		 "moonbox_workers{state=\"held\"} %zu\n"
		 "# HELP moonbox_queued_executions Executions waiting for a worker.\n"
		 "# TYPE moonbox_queued_executions gauge\n"
		 "moonbox_queued_executions %zu\n"
		 "# HELP moonbox_workspace_ops Workspace operations of worker processes waiting for or on the thread pool (isolation = process).\n"
		 "# TYPE moonbox_workspace_ops gauge\n"
		 "moonbox_workspace_ops{state=\"queued\"} %llu\n"
		 "moonbox_workspace_ops{state=\"running\"} %llu\n"
		 "# HELP moonbox_workspace_ops_total Workspace operations of worker processes answered, and dropped unstarted (their execution had ended).\n"
		 "# TYPE moonbox_workspace_ops_total counter\n"
		 "moonbox_workspace_ops_total{state=\"done\"} %llu\n"
		 "moonbox_workspace_ops_total{state=\"dropped\"} %llu\n",
		 (unsigned long long)st.submitted, (unsigned long long)st.completed,
		 (unsigned long long)st.refused, st.busy, st.workers, st.abandoned, st.held, st.queued,
		 (unsigned long long)st.workspace_ops_queued, (unsigned long long)st.workspace_ops_running,
		 (unsigned long long)st.workspace_ops_done, (unsigned long long)st.workspace_ops_dropped);
	free(s->metrics_all);
	s->metrics_all = NULL;
	char *extra = mb_host_metrics(s->host);
	if (!extra)
		return s->metrics;
	size_t a = strlen(s->metrics), b = strlen(extra);
	s->metrics_all = malloc(a + b + 1);
	if (s->metrics_all) {
		memcpy(s->metrics_all, s->metrics, a);
		memcpy(s->metrics_all + a, extra, b + 1);
	}
	free(extra);
	return s->metrics_all ? s->metrics_all : s->metrics;
}

/* After a signal: once no request is in flight (or the longest execution plus its grace has
 * passed), close the endpoint and finish like stdio's EOF. */
static void drain_check(uv_timer_t *t)
{
	mb_server *s = t->data;
	if ((mb_host_inflight(s->host) || mb_pool_pending(s->pool)) && uv_now(&s->loop) < s->drain_until)
		return;
	uv_timer_stop(t);
	uv_close((uv_handle_t *)t, NULL);
	if (s->http) {
		mb_http_close(s->http);
		s->http = NULL;
	}
	s->eof = 1;
	maybe_finish(s);
}

/* SIGINT / SIGTERM in HTTP mode: answer what is running, then close and exit 0. */
static void on_signal(uv_signal_t *h, int sig)
{
	mb_server *s = h->data;
	mb_log(MB_LOG_INFO, "signal %d: finishing in-flight requests, then closing the HTTP endpoint", sig);
	uv_signal_stop(&s->sigint);
	uv_signal_stop(&s->sigterm);
	s->drain_until = uv_now(&s->loop) + (uint64_t)s->cfg->max_timeout_ms +
			 (uint64_t)s->cfg->timeout_grace_ms + 1000;
	uv_timer_init(&s->loop, &s->drain);
	s->drain.data = s;
	uv_timer_start(&s->drain, drain_check, 0, 20);
}

/* The PII detector (PCRE2 JIT of every rule; its share of start-up is in docs/benchmarks.md,
 * "Session 2") is built on its own thread while the store opens and the host loads: start-up is
 * what a desktop client waits for. */
typedef struct {
	const mb_config *cfg;
	mb_pii_detector *d;
	unsigned char *key;
	char err[MB_ERR_MAX];
	int rc;
} pii_build;

static void build_pii(void *arg)
{
	pii_build *b = arg;
	b->rc = mb_pii_from_config(b->cfg, &b->d, b->key, b->err, sizeof b->err);
}

int mb_server_run_stdio(const mb_config *cfg, void (*before_pool)(void *ud), void *ud)
{
	mb_server *s = calloc(1, sizeof *s);
	if (!s)
		return 1;
	s->cfg = cfg;
	signal(SIGPIPE, SIG_IGN);
	if (uv_loop_init(&s->loop)) {
		free(s);
		return 1;
	}
	char err[MB_ERR_MAX], path[4200];
	pii_build pb = { cfg, NULL, s->pii_key, "", 0 };
	uv_thread_t pii_thread;
	int pii_threaded = uv_thread_create(&pii_thread, build_pii, &pb) == 0;
	if (!pii_threaded)
		build_pii(&pb);
	snprintf(path, sizeof path, "%s/moonbox.db", cfg->data_dir);
	if (cfg->store_url[0] ? mb_pg_open(&s->pg, &s->loop, cfg->store_url, (int)cfg->store_pg_connections,
					   cfg->store_timeout_ms, err, sizeof err)
			      : mb_store_open(&s->store, path, (int)cfg->store_busy_timeout_ms, err,
					      sizeof err)) {
		mb_log(MB_LOG_CRIT, "store: %s", err);
		if (pii_threaded)
			uv_thread_join(&pii_thread);
		return 1;
	}
	if (cfg->workspace_dir[0])
		snprintf(path, sizeof path, "%s", cfg->workspace_dir);
	else
		snprintf(path, sizeof path, "%s/workspaces", cfg->data_dir);
	mb_workspace_limits wl = { cfg->workspace_max_file_bytes, cfg->workspace_max_bytes,
				   cfg->workspace_max_files };
	s->workspaces = mb_workspaces_new(path, &wl, err, sizeof err);
	if (!s->workspaces) {
		mb_log(MB_LOG_CRIT, "workspaces: %s", err);
		return 1;
	}
	mb_host_io hio = { host_send, s, host_backlog };
	uv_timer_init(&s->loop, &s->reclaim);
	uv_unref((uv_handle_t *)&s->reclaim);
	s->reclaim.data = s;
	s->reclaim_on = 1;
	mb_host_deps deps = { &s->loop, s->store, s->workspaces, NULL, NULL, s->pg };
	s->host = mb_host_new(cfg, &hio, &deps);
	if (pii_threaded)
		uv_thread_join(&pii_thread);
	if (!s->host) {
		mb_store_close(s->store); /* no checkpoint into a refused file: see mb_store_migrate */
		return 1;
	}
	if (pb.rc != 0) {
		mb_log(MB_LOG_CRIT, "%s", pb.err); /* the message names the option or file */
		return 1;
	}
	s->pii = pb.d;
	mb_sandbox_pii_set(s->pii, s->pii_key); /* before any worker thread exists */
	mb_host_set_pii(s->host, s->pii, s->pii_key);
	/* after the host: its start-up applied the schema the writer needs */
	snprintf(path, sizeof path, "%s/moonbox.db", cfg->data_dir);
	mb_history_limits hl = { cfg->history_max_rows, cfg->journal_max_rows,
				 cfg->journal_max_age_s * 1000, cfg->journal_max_code_bytes,
				 cfg->max_queue_bytes };
	mb_history_store hs = { path, cfg->store_url,
				(int)(cfg->store_url[0] ? cfg->store_timeout_ms : cfg->store_busy_timeout_ms) };
	s->history = mb_history_open(&hs, &hl, err, sizeof err);
	if (!s->history) {
		mb_log(MB_LOG_CRIT, "store: %s", err);
		return 1;
	}
	mb_host_set_history(s->host, s->history);
	if (before_pool)
		before_pool(ud);
	mb_job_callbacks jcb = { job_notify, job_call, job_done, s };
	s->pool = mb_pool_new(&s->loop, cfg, &jcb);
	if (!s->pool)
		return 1;
	mb_host_set_pool(s->host, s->pool);
	s->pause_at = (size_t)cfg->workers + (size_t)cfg->max_queue / 2;
	if (s->pause_at < 1)
		s->pause_at = 1;
	if (cfg->http_listen[0]) {
		mb_http_callbacks hcb = { .on_message = http_message,
					  .on_session_end = http_session_end, .on_exchange_closed = http_exchange_closed,
					  .metrics_extra = http_metrics, .on_auth_failed = http_auth_failed, .ud = s };
		s->http_mode = 1;
		s->http = mb_http_start(&s->loop, cfg, &hcb, err, sizeof err);
		if (!s->http) {
			mb_log(MB_LOG_CRIT, "http: %s", err);
			return 1;
		}
		uv_signal_init(&s->loop, &s->sigint);
		uv_signal_init(&s->loop, &s->sigterm);
		s->sigint.data = s->sigterm.data = s;
		uv_signal_start(&s->sigint, on_signal, SIGINT);
		uv_signal_start(&s->sigterm, on_signal, SIGTERM);
	} else {
		mb_stdio_callbacks scb = { on_line, on_oversize, on_eof, on_drain, s };
		s->io = mb_stdio_open(&s->loop, (size_t)cfg->max_message_bytes, &scb);
		if (!s->io)
			return 1;
		mb_stdio_set_backlog(s->io, (size_t)cfg->max_backlog_bytes);
		mb_log(MB_LOG_INFO, "serving MCP on stdio (%lld workers, data dir %s)",
		       (long long)cfg->workers, cfg->data_dir);
	}
	uv_run(&s->loop, UV_RUN_DEFAULT);
	s->reclaim_on = 0;
	uv_close((uv_handle_t *)&s->reclaim, NULL); /* before the host it uses goes */
	mb_host_free(s->host);
	uv_run(&s->loop, UV_RUN_NOWAIT); /* close callbacks of handles closed by lua_close */
	mb_history_close(s->history);
	mb_store_close(s->store);
	mb_pg_close(s->pg);
	uv_run(&s->loop, UV_RUN_NOWAIT); /* its handles' close callbacks */
	if (!s->stuck)
		mb_pii_detector_free(s->pii); /* a stuck worker may still be scanning */
	mb_workspaces_free(s->workspaces);
	free(s->metrics_all);
	if (uv_loop_close(&s->loop) != 0)
		mb_log(MB_LOG_DEBUG, "loop closed with handles still open (stuck worker threads)");
	free(s);
	return 0;
}
