/* worker_proc.c - the worker process: `moonbox --worker` runs executions for one pool slot of
 * the server, confined (worker_proc.h says what it holds and what it cannot do).
 *
 * Start-up, before any untrusted byte: read W_INIT (the configuration with every secret
 * blanked, worker_relay.c), raise the stack limit to what a worker thread of the server gets
 * (so deep recursion meets the same C-stack limit), initialise the JSON allocator, libsodium
 * (code hashes), the sandbox's signal handler and precompiled prelude, the PII detector without
 * a key, map the page shared with the server, prepare the first state, and confine the process
 * (confine.h: seccomp, Landlock, rlimits; one thread, the filter takes no more). Then W_READY.
 *
 * One execution: W_JOB gives its id, the code, the context JSON, the limits and the workspace
 * quota (and whether it was sent ahead: it starts right after the W_DONE of the one before,
 * which is how the server knows). Before it runs a job the worker claims it in the shared page
 * (worker_proc.h): a job the server has taken back meanwhile is skipped with W_SKIP. The request's host calls,
 * notifications, workspace port and PII mint are round trips on the channel; the server answers
 * each with W_REPLY (a job sent ahead may arrive first: it is kept). The execution's budget
 * lives in the page shared with the server (MB_WORKER_SHM_FD): the server sets its cancel flag
 * (or, for a job that may have started unseen, the id of the job to cancel) there and sends MB_SANDBOX_SIGNAL at the deadline or on cancellation, exactly as on a worker
 * thread, and reads the stop reason there when it has to kill a worker stuck in C - so a memory
 * limit that tripped first is still answered as memory. At the end W_DONE carries the result's
 * fields; the server checks and shapes them. A state that ends large (MB_SANDBOX_DEFER_CLOSE_BYTES)
 * is closed after its W_DONE, between W_CLOSING (before the W_DONE) and W_CLOSED: the answer
 * does not wait for lua_close, and the server gives the worker nothing to start meanwhile. A protocol error, or the server gone, ends the
 * process.
 */
#include "worker_proc.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"
#include "codec.h"
#include "confine.h"
#include "json.h"
#include "log.h"
#include "pii_config.h"
#include "sandbox.h"
#include "worker_wire.h"

_Static_assert(sizeof(mb_wpage) <= MB_WORKER_SHM_BYTES, "the shared page holds a budget and the claims");

/* A reply to a call is often microseconds away (a workspace operation, a token): look for it
 * this long before sleeping. Not while waiting for the next job (that would burn CPU the other
 * executions need). */
#define REPLY_SPIN_NS 20000

static mb_config cfg;
static mb_wreader rd;
static mb_wbuf wb;
static mb_wpage *shared_page; /* shared with the server: the budget, the claims */

static _Noreturn void die(const char *what)
{
	mb_log(MB_LOG_ERROR, "worker process: %s; exiting", what);
	_exit(3);
}

static void send_or_die(void)
{
	if (mb_wire_send(MB_WORKER_FD, &wb) != 0)
		_exit(wb.failed ? 3 : 0); /* out of memory, or the server is gone */
}

/* The server's answer to the request just sent (nothing else may come in between). */
/* Jobs the server sent ahead while this one waited for a reply, in order. */
typedef struct kept_job {
	struct kept_job *next;
	size_t len;
	char data[];
} kept_job;
static kept_job *kept_head, *kept_tail;

/* The server's answer to the request just sent. A job sent ahead may come first: it is kept
 * for when this one ends, unless W_RECALL takes the kept ones back (the call may wait long). */
static mb_wmsg wait_reply(void)
{
	mb_wmsg m;
	for (;;) {
		rd.spin_ns = REPLY_SPIN_NS;
		int got = mb_wire_read(&rd, MB_WORKER_FD, -1, &m);
		rd.spin_ns = 0;
		if (got < 0)
			_exit(0);
		if (m.type == W_REPLY)
			return m;
		if (m.type == W_RECALL) { /* this job may wait long: the server gives them to others */
			while (kept_head) {
				kept_job *k = kept_head;
				kept_head = k->next;
				free(k);
			}
			kept_tail = NULL;
			continue;
		}
		if (m.type != W_JOB)
			die("the server sent something else than a reply");
		size_t len = (size_t)(m.end - m.p);
		kept_job *k = malloc(sizeof *k + len);
		if (!k)
			die("out of memory keeping a job sent ahead");
		k->next = NULL;
		k->len = len;
		memcpy(k->data, m.p, len);
		if (kept_tail)
			kept_tail->next = k;
		else
			kept_head = k;
		kept_tail = k;
	}
}

static int bytes_or_die(mb_wmsg *m, const char **s, size_t *n)
{
	if (mb_wmsg_bytes(m, s, n) != 0)
		die("a short frame from the server");
	return 0;
}

static uint64_t u64_or_die(mb_wmsg *m)
{
	uint64_t v;
	if (mb_wmsg_u64(m, &v) != 0)
		die("a short frame from the server");
	return v;
}

/* ---- what the execution asks of the server ------------------------------------------------ */

static void chan_notify(void *ud, mb_notify_kind kind, int level, const char *json, size_t len)
{
	(void)ud;
	mb_wbuf_start(&wb, W_NOTIFY);
	mb_wbuf_u64(&wb, (uint64_t)kind);
	mb_wbuf_u64(&wb, (uint64_t)(int64_t)level);
	mb_wbuf_bytes(&wb, json, len);
	send_or_die();
}

static int chan_call(void *ud, const char *name, const char *args, size_t len, char **reply,
		     size_t *reply_len)
{
	mb_budget *b = ud;
	mb_wbuf_start(&wb, W_CALL);
	mb_wbuf_bytes(&wb, name, strlen(name));
	mb_wbuf_bytes(&wb, args, len);
	send_or_die();
	mb_wmsg m = wait_reply();
	uint64_t status = u64_or_die(&m), why = u64_or_die(&m);
	const char *s;
	size_t n;
	bytes_or_die(&m, &s, &n);
	*reply = NULL;
	*reply_len = 0;
	if (status == 2) { /* the server's budget stopped the wait: trip ours the same way */
		mb_budget_trip(b, why >= MB_STOP_TIMEOUT && why <= MB_STOP_CANCELLED ? (mb_stop_reason)why
										    : MB_STOP_TIMEOUT);
		return -1;
	}
	*reply = mb_wire_copy(s, n);
	if (!*reply) {
		*reply = strdup("out of memory");
		*reply_len = *reply ? strlen(*reply) : 0;
		return 1;
	}
	*reply_len = n;
	return status == 0 ? 0 : 1;
}

static int chan_mint(void *ud, const char *type, const char *value, size_t len,
		     char token[MB_PII_TOKEN_MAX], char *err, size_t errlen)
{
	(void)ud;
	mb_wbuf_start(&wb, W_MINT);
	mb_wbuf_bytes(&wb, type, strlen(type));
	mb_wbuf_bytes(&wb, value, len);
	send_or_die();
	mb_wmsg m = wait_reply();
	uint64_t status = u64_or_die(&m);
	(void)u64_or_die(&m);
	const char *s;
	size_t n;
	bytes_or_die(&m, &s, &n);
	if (status != 0 || n == 0 || n >= MB_PII_TOKEN_MAX) {
		snprintf(err, errlen, "pii: %.*s", (int)(n > 200 ? 200 : n), s);
		return -1;
	}
	memcpy(token, s, n);
	token[n] = 0;
	return 0;
}

/* Sends a workspace operation; returns the reply positioned after rc and the message. */
static int ws_round(int op, const char *path, size_t plen, const void *data, size_t n,
		    mb_wmsg *m, char *err, size_t errlen)
{
	mb_wbuf_start(&wb, W_WS);
	mb_wbuf_u64(&wb, (uint64_t)op);
	mb_wbuf_bytes(&wb, path ? path : "", path ? plen : 0);
	mb_wbuf_u64(&wb, path != NULL);
	mb_wbuf_bytes(&wb, data, n);
	send_or_die();
	*m = wait_reply();
	int rc = (int)(int64_t)u64_or_die(m);
	const char *s;
	size_t k;
	bytes_or_die(m, &s, &k);
	snprintf(err, errlen, "%.*s", (int)k, s);
	return rc;
}

static int ws_read(void *ud, const char *path, size_t plen, char **data, size_t *n, char *err,
		   size_t errlen)
{
	(void)ud;
	mb_wmsg m;
	int rc = ws_round(W_WS_READ, path, plen, NULL, 0, &m, err, errlen);
	if (rc)
		return rc;
	const char *s;
	size_t k;
	bytes_or_die(&m, &s, &k);
	*data = mb_budget_malloc(k + 1);
	if (!*data) {
		snprintf(err, errlen, "read_file %.*s: out of memory", (int)(plen > 200 ? 200 : plen), path);
		return -ENOMEM;
	}
	memcpy(*data, s, k);
	(*data)[k] = 0;
	*n = k;
	return 0;
}

static int ws_write(void *ud, const char *path, size_t plen, const void *data, size_t n, char *err,
		    size_t errlen)
{
	(void)ud;
	mb_wmsg m;
	return ws_round(W_WS_WRITE, path, plen, data, n, &m, err, errlen);
}

static int ws_list(void *ud, const char *dir, size_t dlen, mb_workspace_entry **e, size_t *n,
		   char *err, size_t errlen)
{
	(void)ud;
	mb_wmsg m;
	*e = NULL;
	*n = 0;
	int rc = ws_round(W_WS_LIST, dir, dlen, NULL, 0, &m, err, errlen);
	if (rc)
		return rc;
	uint64_t count = u64_or_die(&m);
	if (count > (uint64_t)(m.end - m.p) / 24) /* each entry holds at least 24 bytes */
		die("a short frame from the server");
	*e = calloc(count ? count : 1, sizeof **e);
	if (!*e) {
		snprintf(err, errlen, "list_files: out of memory");
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < count; i++) {
		const char *s;
		size_t k;
		bytes_or_die(&m, &s, &k);
		(*e)[i].path = mb_wire_copy(s, k);
		(*e)[i].size = (int64_t)u64_or_die(&m);
		(*e)[i].mtime_ms = (int64_t)u64_or_die(&m);
		*n = i + 1;
		if (!(*e)[i].path) {
			snprintf(err, errlen, "list_files: out of memory");
			return -ENOMEM;
		}
	}
	return 0;
}

static int ws_delete(void *ud, const char *path, size_t plen, char *err, size_t errlen)
{
	(void)ud;
	mb_wmsg m;
	return ws_round(W_WS_DELETE, path, plen, NULL, 0, &m, err, errlen);
}

static int ws_stat(void *ud, const char *path, size_t plen, mb_workspace_info *info, char *err,
		   size_t errlen)
{
	(void)ud;
	mb_wmsg m;
	int rc = ws_round(W_WS_STAT, path, plen, NULL, 0, &m, err, errlen);
	if (rc)
		return rc;
	info->size = (int64_t)u64_or_die(&m);
	info->mtime_ms = (int64_t)u64_or_die(&m);
	info->is_dir = (int)u64_or_die(&m);
	return 0;
}

static const mb_ws_port chan_ws = {ws_read, ws_write, ws_list, ws_delete, ws_stat};

/* ---- one execution ------------------------------------------------------------------------- */

static void send_done(const mb_exec_result *res)
{
	mb_wbuf_start(&wb, W_DONE);
	mb_wbuf_u64(&wb, (uint64_t)res->success);
	const char *t = res->error_type ? res->error_type : "";
	mb_wbuf_bytes(&wb, t, strlen(t));
	mb_wbuf_bytes(&wb, res->error ? res->error : "", res->error ? strlen(res->error) : 0);
	mb_wbuf_bytes(&wb, res->traceback ? res->traceback : "", res->traceback ? strlen(res->traceback) : 0);
	mb_wbuf_u64(&wb, res->result_json != NULL);
	mb_wbuf_bytes(&wb, res->result_json, res->result_json ? res->result_len : 0);
	mb_wbuf_bytes(&wb, res->output, res->output ? res->output_len : 0);
	mb_wbuf_u64(&wb, res->instructions);
	mb_wbuf_u64(&wb, res->memory_peak_bytes);
	uint64_t ms_bits;
	memcpy(&ms_bits, &res->execution_time_ms, sizeof ms_bits);
	mb_wbuf_u64(&wb, ms_bits);
	mb_wbuf_u64(&wb, res->pii_nfound);
	for (size_t i = 0; i < res->pii_nfound; i++) {
		mb_wbuf_bytes(&wb, res->pii_found[i].token, strlen(res->pii_found[i].token));
		mb_wbuf_bytes(&wb, res->pii_found[i].value, res->pii_found[i].value_len);
	}
	for (int i = 0; i < MB_IO_NSOURCES; i++) { /* what the code took in (the server checks it) */
		mb_wbuf_u64(&wb, res->io.in_bytes[i]);
		mb_wbuf_u64(&wb, res->io.in_tokens[i]);
	}
	mb_wbuf_u64(&wb, res->io.result_tokens);
	mb_wbuf_bytes(&wb, res->note ? res->note : "", res->note ? strlen(res->note) : 0);
	send_or_die();
}

static mb_sandbox *run_job(mb_wmsg *m, mb_sandbox *sb)
{
	mb_exec_request req;
	memset(&req, 0, sizeof req);
	int ahead = (int)u64_or_die(m);
	uint64_t job_id = u64_or_die(m);
	uint64_t seq = u64_or_die(m);
	req.timeout_ms = u64_or_die(m);
	req.memory_bytes = u64_or_die(m);
	req.instruction_limit = u64_or_die(m);
	req.pii_policy = (int)u64_or_die(m);
	int has_ws = (int)u64_or_die(m);
	req.ws_max_file_bytes = (int64_t)u64_or_die(m);
	bytes_or_die(m, &req.code, &req.code_len);
	int has_context = (int)u64_or_die(m);
	bytes_or_die(m, &req.context_json, &req.context_len);
	if (!has_context) {
		req.context_json = NULL;
		req.context_len = 0;
	}
	req.cfg = &cfg;
	req.notify = chan_notify;
	req.host_call = chan_call;
	if (has_ws)
		req.ws_port = &chan_ws;

	/* the job is ours unless the server took it back first (worker_proc.h, claims) */
	uint64_t want = MB_CLAIM(seq, MB_CLAIM_PENDING);
	if (!atomic_compare_exchange_strong(&shared_page->claim[seq % MB_WORKER_CLAIMS], &want,
					    MB_CLAIM(seq, MB_CLAIM_STARTED))) {
		if (want != MB_CLAIM(seq, MB_CLAIM_REVOKED))
			die("a job's claim in the shared page is not the server's");
		mb_wbuf_start(&wb, W_SKIP);
		mb_wbuf_u64(&wb, seq);
		send_or_die();
		return sb; /* the state prepared for it serves the next one */
	}
	mb_budget *b = &shared_page->budget;
	/* a job that starts at once may be cancelled already (the server set the flag); one sent
	 * ahead is cancelled by id (the server takes it as started when it reads the W_DONE before
	 * it, which may be before or after this): the id it names survives the reset */
	int cancelled = ahead ? 0 : atomic_load(&b->cancel);
	uint64_t cancel_job = atomic_load(&b->cancel_job);
	mb_budget_init(b, req.memory_bytes, req.instruction_limit, 0);
	atomic_store(&b->cancel, cancelled);
	atomic_store(&b->cancel_job, cancel_job);
	b->job_id = job_id;
	b->timeout_ms = req.timeout_ms;
	b->deadline_ns = mb_now_ns() + req.timeout_ms * 1000000ull;
	req.host_ud = b;
	mb_exec_result res;
	mb_sandbox *big = NULL;
	mb_sandbox_run_prepared_defer(sb, &req, b, &res, &big);
	if (big) { /* the server keeps this worker busy until W_CLOSED */
		mb_wbuf_start(&wb, W_CLOSING);
		send_or_die();
	}
	send_done(&res);
	if (big) {
		/* a large state is closed after the answer is out (lua_close walks every object,
		 * which must not count against timeout_grace_ms); b, in the shared page, is
		 * re-initialised only by the next W_JOB, read after this */
		mb_sandbox_close_deferred(big);
		mb_wbuf_start(&wb, W_CLOSED);
		send_or_die();
	}
	mb_exec_result_free(&res);
	return mb_sandbox_prepare(&cfg);
}

/* Confines the process and serves jobs until the server closes the channel. */
/* Confines this process (confine.c) and tells the server what took effect (W_READY). */
static void confine_and_report(void)
{
	char err[MB_ERR_MAX];
	mb_confine_report rep;
	/* the address space as a backstop to the allocator's cap: the largest memory_mb, the C
	 * stack and 1 GiB for the rest (code, PCRE2's JIT, the next state being prepared) */
	mb_confine_opts co = {.channel_fd = MB_WORKER_FD,
			      .address_space = ((uint64_t)cfg.max_memory_mb << 20) +
					       ((uint64_t)cfg.max_c_stack_kb << 10) +
					       MB_SANDBOX_STACK_RESERVE + ((uint64_t)1 << 30)};
	if (mb_confine(&co, &rep, err, sizeof err) != 0)
		die(err);
	mb_wbuf_start(&wb, W_READY);
	mb_wbuf_u64(&wb, (uint64_t)rep.seccomp);
	mb_wbuf_u64(&wb, (uint64_t)rep.landlock);
	mb_wbuf_u64(&wb, (uint64_t)rep.no_new_privs);
	send_or_die();
}

static _Noreturn void serve(void)
{
	mb_sandbox_thread_init();
	mb_sandbox *sb = mb_sandbox_prepare(&cfg);
	confine_and_report();

	for (;;) {
		mb_wmsg m;
		if (kept_head) { /* kept while the last job waited for a reply */
			kept_job *k = kept_head;
			kept_head = k->next;
			if (!kept_head)
				kept_tail = NULL;
			m = (mb_wmsg){W_JOB, (const unsigned char *)k->data,
				      (const unsigned char *)k->data + k->len};
			sb = run_job(&m, sb);
			free(k);
			continue;
		}
		if (mb_wire_read(&rd, MB_WORKER_FD, -1, &m) < 0)
			_exit(0);
		if (m.type != W_JOB)
			die("expected a job");
		sb = run_job(&m, sb);
	}
}

int mb_worker_main(void)
{
	/* dies with the server thread that started it, whatever happens to the server (if the
	 * server died before this line, the channel's end of file stops the worker instead) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
		_exit(0);
	signal(SIGPIPE, SIG_IGN);
	rd.max = sizeof cfg + 1024;
	mb_wmsg m;
	const char *s;
	size_t n;
	if (mb_wire_read(&rd, MB_WORKER_FD, -1, &m) != 1 || (m.type != W_INIT && m.type != W_PROBE) ||
	    mb_wmsg_bytes(&m, &s, &n) != 0 || n != sizeof cfg)
		die("no configuration from the server");
	memcpy(&cfg, s, sizeof cfg);
	mb_log_set_level(cfg.log_level);
#ifdef MB_TEST_HOOKS
	if (getenv("MOONBOX_TEST_WORKER_FAIL"))
		die("test: failing at start (MOONBOX_TEST_WORKER_FAIL)");
#endif
	if (m.type == W_PROBE) {
		/* isolation = auto's probe (mb_worker_probe_start): whether a worker confines here.
		 * Nothing runs, so nothing is initialised; the server stops it once it has read this */
		confine_and_report();
		while (mb_wire_read(&rd, MB_WORKER_FD, -1, &m) > 0)
			;
		_exit(0);
	}
	/* the largest frame the server sends: code and context of one job, or a file */
	uint64_t most = (uint64_t)cfg.max_code_bytes + (uint64_t)cfg.max_message_bytes;
	if ((uint64_t)cfg.workspace_max_file_bytes > most)
		most = (uint64_t)cfg.workspace_max_file_bytes;
	rd.max = (size_t)most + (1u << 20);

	/* Executions run on this thread (the filter takes one thread only), which needs the stack
	 * a worker thread of the server gets. The main stack grows up to RLIMIT_STACK as it is
	 * when the pages are touched, and exec leaves at least 128 MiB below it, so raising the
	 * limit now is enough (max_c_stack_kb is at most 64 MiB). */
	struct rlimit rl;
	rlim_t want = ((rlim_t)cfg.max_c_stack_kb << 10) + MB_SANDBOX_STACK_RESERVE + (1u << 20);
	if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
		setrlimit(RLIMIT_STACK, &rl);
	}

	mb_json_global_init();
	if (mb_codec_init() != 0 || mb_sandbox_global_init() != 0)
		die("initialisation failed");
	mb_pii_detector *d = NULL;
	char err[MB_ERR_MAX];
	if (mb_pii_from_config(&cfg, &d, NULL, err, sizeof err) != 0)
		die(err);
	mb_sandbox_pii_set(d, NULL);
	mb_sandbox_pii_set_mint(chan_mint);
	shared_page = mmap(NULL, MB_WORKER_SHM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
			   MB_WORKER_SHM_FD, 0);
	close(MB_WORKER_SHM_FD);
	if (shared_page == MAP_FAILED)
		die("cannot map the page shared with the server");
	serve();
}
