/* worker_relay.c - runs executions in a worker process for one pool thread (worker_relay.h).
 *
 * Start: socketpair, then posix_spawn of /proc/self/exe --worker with /dev/null on 0 and 1, the
 * channel dup'ed to 3, every descriptor above closed (posix_spawn_file_actions_addclosefrom_np)
 * and an empty environment (MOONBOX_TEST_STALL_MS, a test knob, is the one variable passed), so
 * the worker starts from a clean image whatever this process holds: no store handle, no key,
 * no client socket, no upstream credentials in memory. W_INIT then gives it the configuration
 * with every secret field blanked (HTTP tokens, mcpServers, paths), and it answers W_READY once
 * confined.
 *
 * Every byte from the worker is hostile. Frames are bounded (max_result_bytes plus
 * max_output_bytes plus 1 MiB, or a file); JSON it hands on - log data, host-call arguments,
 * upstream arguments, the result - is checked with jansson before anything splices it; the
 * error type is one of a fixed list; the tokens it reports as minted are recomputed with the
 * key and dropped when they do not match (so a worker cannot bind a token to a value in the
 * vault); notifications are counted against max_notifications; the time, the code hash and the
 * shape of the result are the relay's own.
 */
#include "worker_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec.h"
#include "log.h"
#include "worker_proc.h"
#include "worker_wire.h"

#define READY_TIMEOUT_MS 10000 /* start-up of a worker: exec, Lua, PCRE2 JIT, confinement */
#define SPIN_NS 0              /* spinning here takes the CPU the worker needs (docs/benchmarks.md) */

struct mb_relay {
	const mb_config *cfg;
	pid_t pid;             /* 0: none */
	int fd;                /* the channel, -1: none */
	mb_budget *shared;     /* the worker's budget (MB_WORKER_SHM_FD), or NULL */
	int ready;             /* W_READY received */
	mb_wreader rd;
	mb_wbuf wb;
};

static atomic_uint_fast64_t n_started, n_crashed, n_killed;

void mb_relay_stats_get(mb_relay_stats *s)
{
	s->started = atomic_load(&n_started);
	s->crashed = atomic_load(&n_crashed);
	s->killed = atomic_load(&n_killed);
}

mb_relay *mb_relay_new(const mb_config *cfg)
{
	mb_relay *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->cfg = cfg;
	r->fd = -1;
	/* the largest frame a worker may send: a result with its output, or a file */
	uint64_t most = (uint64_t)cfg->max_result_bytes + (uint64_t)cfg->max_output_bytes * 6;
	if ((uint64_t)cfg->workspace_max_file_bytes > most)
		most = (uint64_t)cfg->workspace_max_file_bytes;
	if ((uint64_t)cfg->max_message_bytes > most)
		most = (uint64_t)cfg->max_message_bytes;
	r->rd.max = (size_t)most + (1u << 20);
	r->rd.spin_ns = SPIN_NS;
	return r;
}

/* Kills (when alive) and reaps the worker; returns its wait status, or -1. */
static int stop_worker(mb_relay *r, int sig)
{
	int status = -1;
	if (r->pid > 0) {
		/* a worker that already died keeps its own cause */
		pid_t k = waitpid(r->pid, &status, WNOHANG);
		if (k == 0 && sig)
			kill(r->pid, sig);
		while (k == 0 && waitpid(r->pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	if (r->fd >= 0)
		close(r->fd);
	if (r->shared)
		munmap(r->shared, MB_WORKER_SHM_BYTES);
	r->shared = NULL;
	r->fd = -1;
	r->pid = 0;
	r->ready = 0;
	size_t max = r->rd.max;
	mb_wreader_free(&r->rd); /* a partial frame of the old worker must not meet the new one */
	r->rd.max = max;
	return status;
}

void mb_relay_free(mb_relay *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		shutdown(r->fd, SHUT_RDWR); /* a worker between jobs exits on its own */
	stop_worker(r, SIGKILL);
	mb_wreader_free(&r->rd);
	mb_wbuf_free(&r->wb);
	free(r);
}

/* The configuration a worker gets: what executions need, nothing that is a secret or a path. */
static void worker_config(const mb_config *in, mb_config *out)
{
	*out = *in;
#define BLANK(f) memset(out->f, 0, sizeof out->f)
	BLANK(data_dir), BLANK(config_file), BLANK(skills_dir), BLANK(catalog_dir);
	BLANK(workflows_dir), BLANK(share_dir), BLANK(http_listen), BLANK(http_tokens);
	BLANK(http_allowed_origins), BLANK(http_allowed_hosts), BLANK(http_cors_origin);
	BLANK(mcp_servers);
#undef BLANK
}

static int spawn_worker(mb_relay *r, char *err, size_t errlen)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		snprintf(err, errlen, "socketpair: %s", strerror(errno));
		return -1;
	}
	if (sv[1] == MB_WORKER_FD) { /* dup2 onto itself would keep close-on-exec */
		int k = fcntl(sv[1], F_DUPFD_CLOEXEC, MB_WORKER_FD + 1);
		close(sv[1]);
		sv[1] = k;
	}
	/* the page that holds the worker's budget: a fresh memfd per worker */
	int mfd = memfd_create("moonbox-budget", MFD_CLOEXEC);
	void *page = MAP_FAILED;
	if (mfd >= 0 && ftruncate(mfd, MB_WORKER_SHM_BYTES) == 0)
		page = mmap(NULL, MB_WORKER_SHM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (page == MAP_FAILED || mfd <= MB_WORKER_SHM_FD || sv[1] == MB_WORKER_SHM_FD) {
		snprintf(err, errlen, "cannot make the page shared with a worker: %s", strerror(errno));
		if (page != MAP_FAILED)
			munmap(page, MB_WORKER_SHM_BYTES);
		if (mfd >= 0)
			close(mfd);
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, sv[1], MB_WORKER_FD);
	posix_spawn_file_actions_adddup2(&fa, mfd, MB_WORKER_SHM_FD);
	posix_spawn_file_actions_addclosefrom_np(&fa, MB_WORKER_SHM_FD + 1);
	posix_spawnattr_init(&at);
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	char stall[64] = "";
	const char *sv_stall = getenv("MOONBOX_TEST_STALL_MS");
	if (sv_stall)
		snprintf(stall, sizeof stall, "MOONBOX_TEST_STALL_MS=%s", sv_stall);
	char *envp[] = {stall[0] ? stall : NULL, NULL};
	char *argv[] = {(char *)"moonbox", (char *)MB_WORKER_FLAG, NULL};
	pid_t pid;
	int rc = sv[1] < 0 ? EMFILE : posix_spawn(&pid, "/proc/self/exe", &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (sv[1] >= 0)
		close(sv[1]);
	close(mfd);
	if (rc != 0) {
		munmap(page, MB_WORKER_SHM_BYTES);
		close(sv[0]);
		snprintf(err, errlen, "cannot start a worker process: %s", strerror(rc));
		return -1;
	}
	r->pid = pid;
	r->fd = sv[0];
	r->shared = page;
	atomic_fetch_add(&n_started, 1);
	static mb_config wc; /* large: not on the stack; same content for every relay */
	static pthread_mutex_t wc_lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&wc_lock);
	worker_config(r->cfg, &wc);
	mb_wbuf_start(&r->wb, W_INIT);
	mb_wbuf_bytes(&r->wb, &wc, sizeof wc);
	pthread_mutex_unlock(&wc_lock);
	if (mb_wire_send(r->fd, &r->wb) != 0) {
		stop_worker(r, SIGKILL);
		snprintf(err, errlen, "a new worker process did not take its configuration");
		return -1;
	}
	return 0;
}

int mb_relay_ready(mb_relay *r, char *err, size_t errlen)
{
	if (r->ready)
		return 0;
	if (r->pid <= 0 && spawn_worker(r, err, errlen) != 0)
		return -1;
	uint64_t until = mb_now_ns() + (uint64_t)READY_TIMEOUT_MS * 1000000;
	for (;;) {
		uint64_t now = mb_now_ns();
		if (now >= until) {
			stop_worker(r, SIGKILL);
			snprintf(err, errlen, "a new worker process was not ready within %d ms",
				 READY_TIMEOUT_MS);
			return -1;
		}
		mb_wmsg m;
		int k = mb_wire_read(&r->rd, r->fd, (int)((until - now) / 1000000) + 1, &m);
		if (k == 0)
			continue;
		if (k < 0 || m.type != W_READY) {
			int st = stop_worker(r, SIGKILL);
			snprintf(err, errlen, "a new worker process failed to start (%s)",
				 st >= 0 && WIFSIGNALED(st) ? strsignal(WTERMSIG(st))
				 : st >= 0 && WIFEXITED(st) ? "it exited" : "no answer");
			return -1;
		}
		uint64_t sec = 0, ll = 0;
		mb_wmsg_u64(&m, &sec);
		mb_wmsg_u64(&m, &ll);
		static atomic_int told;
		if (!atomic_exchange(&told, 1))
			mb_log(MB_LOG_INFO, "worker processes: seccomp %s, Landlock %s", sec ? "on" : "off",
			       ll ? "on" : "not available in this kernel");
		r->ready = 1;
		return 0;
	}
}

/* ---- checking what a worker sends ----------------------------------------------------------- */

static int valid_json(const char *s, size_t n)
{
	json_error_t e;
	json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!j)
		return json_error_code(&e) == json_error_null_byte_in_key;
	json_decref(j);
	return 1;
}

/* Upstream calls carry "server\0tool\0args" items (one per line for a batch): every args part
 * must be JSON text or empty, because the gateway may splice it into the upstream request. */
static int valid_upstream(const char *s, size_t n, int batch)
{
	const char *end = s + n;
	while (s < end || (!batch && n == 0)) {
		const char *nl = batch ? memchr(s, '\n', (size_t)(end - s)) : NULL;
		const char *item_end = nl ? nl : end;
		const char *a = memchr(s, 0, (size_t)(item_end - s));
		const char *b = a ? memchr(a + 1, 0, (size_t)(item_end - a - 1)) : NULL;
		if (!b)
			return 0;
		if (item_end > b + 1 && !valid_json(b + 1, (size_t)(item_end - b - 1)))
			return 0;
		if (!batch)
			return 1;
		s = nl ? nl + 1 : end;
	}
	return 1;
}

static const char *const error_types[] = {"syntax", "runtime", "timeout", "memory", "instructions",
					  "cancelled", "result", NULL};

static const char *known_type(const char *s, size_t n)
{
	for (int i = 0; error_types[i]; i++)
		if (strlen(error_types[i]) == n && memcmp(error_types[i], s, n) == 0)
			return error_types[i];
	return "runtime";
}

static void set_failure(mb_exec_result *res, const char *type, const char *msg)
{
	free(res->error);
	free(res->traceback);
	free(res->result_json);
	res->traceback = res->result_json = NULL;
	res->result_len = 0;
	res->success = 0;
	res->error_type = type;
	res->error = strdup(msg);
	if (!res->output)
		res->output = strdup("");
}

/* A reported token is kept only when the key makes the same token of that value. */
static int token_checks(const char *tok, size_t tlen, const char *value, size_t vlen)
{
	if (tlen < 4 || tlen >= MB_PII_TOKEN_MAX || tok[0] != '[' || tok[tlen - 1] != ']')
		return 0;
	const char *us = NULL;
	for (size_t i = tlen - 1; i > 0; i--)
		if (tok[i] == '_') {
			us = tok + i;
			break;
		}
	if (!us)
		return 0;
	char type[MB_PII_TOKEN_MAX], want[MB_PII_TOKEN_MAX];
	size_t tn = (size_t)(us - tok - 1);
	memcpy(type, tok + 1, tn);
	type[tn] = 0;
	int hex = (int)(tlen - (size_t)(us - tok) - 2);
	return mb_sandbox_pii_token(type, value, vlen, hex, want) == 0 && strlen(want) == tlen &&
	       memcmp(want, tok, tlen) == 0;
}

/* W_DONE into res; returns 0, or -1 for a malformed frame. */
static int read_done(mb_relay *r, mb_wmsg *m, const mb_exec_request *req, mb_exec_result *res)
{
	uint64_t success, has_result, instr, peak, nfound;
	const char *type, *err, *tb, *result, *out;
	size_t type_n, err_n, tb_n, result_n, out_n;
	if (mb_wmsg_u64(m, &success) || mb_wmsg_bytes(m, &type, &type_n) ||
	    mb_wmsg_bytes(m, &err, &err_n) || mb_wmsg_bytes(m, &tb, &tb_n) ||
	    mb_wmsg_u64(m, &has_result) || mb_wmsg_bytes(m, &result, &result_n) ||
	    mb_wmsg_bytes(m, &out, &out_n) || mb_wmsg_u64(m, &instr) || mb_wmsg_u64(m, &peak) ||
	    mb_wmsg_u64(m, &nfound))
		return -1;
	res->success = success == 1;
	res->output = mb_wire_copy(out, out_n);
	res->output_len = res->output ? out_n : 0;
	res->instructions = instr;
	res->memory_peak_bytes = peak > req->memory_bytes ? req->memory_bytes : (size_t)peak;
	if (res->success) {
		if (has_result && result_n) {
			if (!valid_json(result, result_n)) {
				set_failure(res, "result", "the worker process returned a result that is not JSON");
				return 0;
			}
			res->result_json = mb_wire_copy(result, result_n);
			res->result_len = res->result_json ? result_n : 0;
		}
	} else {
		res->error_type = known_type(type, type_n);
		res->error = mb_wire_copy(err_n ? err : "error", err_n ? err_n : 5);
		if (tb_n)
			res->traceback = mb_wire_copy(tb, tb_n);
	}
	if (nfound > (uint64_t)(m->end - m->p) / 16)
		return -1;
	if (nfound) {
		res->pii_found = calloc((size_t)nfound, sizeof *res->pii_found);
		if (!res->pii_found)
			return 0;
	}
	for (uint64_t i = 0; i < nfound; i++) {
		const char *tok, *val;
		size_t tn, vn;
		if (mb_wmsg_bytes(m, &tok, &tn) || mb_wmsg_bytes(m, &val, &vn))
			return -1;
		if (!token_checks(tok, tn, val, vn)) {
			mb_log(MB_LOG_WARNING, "worker process: a reported token does not match its value; "
			       "dropped");
			continue;
		}
		mb_pii_found *f = &res->pii_found[res->pii_nfound];
		memcpy(f->token, tok, tn);
		f->token[tn] = 0;
		f->value = mb_wire_copy(val, vn);
		if (!f->value)
			continue;
		f->value_len = vn;
		f->count = 1;
		res->pii_nfound++;
	}
	(void)r;
	return 0;
}

/* ---- answering a worker ---------------------------------------------------------------------- */

static int send_reply(mb_relay *r, uint64_t status, uint64_t extra, const char *data, size_t n)
{
	mb_wbuf_start(&r->wb, W_REPLY);
	mb_wbuf_u64(&r->wb, status);
	mb_wbuf_u64(&r->wb, extra);
	mb_wbuf_bytes(&r->wb, data, n);
	return mb_wire_send(r->fd, &r->wb);
}

static int on_call(mb_relay *r, mb_wmsg *m, const mb_exec_request *req, mb_budget *b)
{
	const char *name, *args;
	size_t nn, an;
	if (mb_wmsg_bytes(m, &name, &nn) || mb_wmsg_bytes(m, &args, &an) || nn == 0 || nn > 64 ||
	    memchr(name, 0, nn))
		return -1;
	char nm[65];
	memcpy(nm, name, nn);
	nm[nn] = 0;
	int ok = strcmp(nm, "upstream_call") == 0   ? valid_upstream(args, an, 0)
		 : strcmp(nm, "upstream_batch") == 0 ? valid_upstream(args, an, 1)
						      : valid_json(args, an);
	if (!ok) {
		static const char msg[] = "malformed arguments from the worker process";
		return send_reply(r, 1, 0, msg, sizeof msg - 1);
	}
	if (!req->host_call) {
		static const char msg[] = "no server calls here";
		return send_reply(r, 1, 0, msg, sizeof msg - 1);
	}
	char *reply = NULL;
	size_t rlen = 0;
	int rc = req->host_call(req->host_ud, nm, args, an, &reply, &rlen);
	int st = rc == 0 ? 0 : rc > 0 ? 1 : 2;
	int sent = send_reply(r, (uint64_t)st, st == 2 ? (uint64_t)mb_budget_check(b) : 0,
			      reply ? reply : "", reply ? rlen : 0);
	free(reply);
	return sent;
}

static int on_mint(mb_relay *r, mb_wmsg *m)
{
	const char *type, *value;
	size_t tn, vn;
	if (mb_wmsg_bytes(m, &type, &tn) || mb_wmsg_bytes(m, &value, &vn))
		return -1;
	char t[MB_PII_TOKEN_MAX], tok[MB_PII_TOKEN_MAX];
	if (tn >= sizeof t || !mb_pii_type_name_valid(type, tn)) {
		static const char msg[] = "invalid type name";
		return send_reply(r, 1, 0, msg, sizeof msg - 1);
	}
	memcpy(t, type, tn);
	t[tn] = 0;
	if (mb_sandbox_pii_token(t, value, vn, MB_PII_HEX_MIN, tok) != 0) {
		static const char msg[] = "cannot make a token";
		return send_reply(r, 1, 0, msg, sizeof msg - 1);
	}
	return send_reply(r, 0, 0, tok, strlen(tok));
}

/* W_WS: the operation on the tenant's workspace, answered rc, message, then what it gives. */
static int on_ws(mb_relay *r, mb_wmsg *m, const mb_exec_request *req)
{
	uint64_t op, has_path;
	const char *path, *data;
	size_t pn, dn;
	if (mb_wmsg_u64(m, &op) || mb_wmsg_bytes(m, &path, &pn) || mb_wmsg_u64(m, &has_path) ||
	    mb_wmsg_bytes(m, &data, &dn))
		return -1;
	char err[MB_ERR_MAX] = "";
	mb_wbuf *w = &r->wb;
	mb_workspace *ws = req->workspace;
	if (!ws) {
		mb_wbuf_start(w, W_REPLY);
		mb_wbuf_u64(w, (uint64_t)(int64_t)-ENOSYS);
		mb_wbuf_bytes(w, "the workspace is not available here", 35);
		return mb_wire_send(r->fd, w);
	}
	int rc;
	char *bytes = NULL;
	size_t nbytes = 0;
	mb_workspace_entry *e = NULL;
	size_t ne = 0;
	mb_workspace_info info = {0};
	switch (op) {
	case W_WS_READ: rc = mb_workspace_read(ws, path, pn, &bytes, &nbytes, err, sizeof err); break;
	case W_WS_WRITE: rc = mb_workspace_write(ws, path, pn, data, dn, err, sizeof err); break;
	case W_WS_LIST:
		rc = mb_workspace_list(ws, has_path ? path : NULL, has_path ? pn : 0, &e, &ne, err,
				       sizeof err);
		break;
	case W_WS_DELETE: rc = mb_workspace_delete(ws, path, pn, err, sizeof err); break;
	case W_WS_STAT: rc = mb_workspace_stat(ws, path, pn, &info, err, sizeof err); break;
	default: return -1;
	}
	mb_wbuf_start(w, W_REPLY);
	mb_wbuf_u64(w, (uint64_t)(int64_t)rc);
	mb_wbuf_bytes(w, err, rc ? strlen(err) : 0);
	if (rc == 0 && op == W_WS_READ)
		mb_wbuf_bytes(w, bytes, nbytes);
	if (rc == 0 && op == W_WS_LIST) {
		mb_wbuf_u64(w, ne);
		for (size_t i = 0; i < ne; i++) {
			mb_wbuf_bytes(w, e[i].path, strlen(e[i].path));
			mb_wbuf_u64(w, (uint64_t)e[i].size);
			mb_wbuf_u64(w, (uint64_t)e[i].mtime_ms);
		}
	}
	if (rc == 0 && op == W_WS_STAT) {
		mb_wbuf_u64(w, (uint64_t)info.size);
		mb_wbuf_u64(w, (uint64_t)info.mtime_ms);
		mb_wbuf_u64(w, (uint64_t)info.is_dir);
	}
	free(bytes);
	mb_workspace_entries_free(e, ne);
	return mb_wire_send(r->fd, w);
}

static void on_notify(mb_wmsg *m, const mb_exec_request *req, uint64_t *count)
{
	uint64_t kind, level;
	const char *json;
	size_t n;
	if (mb_wmsg_u64(m, &kind) || mb_wmsg_u64(m, &level) || mb_wmsg_bytes(m, &json, &n))
		return;
	if (++*count > (uint64_t)req->cfg->max_notifications || !req->notify)
		return;
	int lv = (int)(int64_t)level;
	if ((kind != MB_NOTIFY_LOG && kind != MB_NOTIFY_PROGRESS) || lv < -1 || lv > 7 ||
	    !valid_json(json, n))
		return;
	req->notify(req->notify_ud, (mb_notify_kind)kind, lv, json, n);
}

/* ---- one execution ------------------------------------------------------------------------- */

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV (a memory access fault)";
	case SIGABRT: return "SIGABRT (an abort)";
	case SIGSYS: return "SIGSYS (a system call the sandbox forbids)";
	case SIGBUS: return "SIGBUS (a bus error)";
	case SIGFPE: return "SIGFPE (an arithmetic fault)";
	case SIGILL: return "SIGILL (an illegal instruction)";
	case SIGKILL: return "SIGKILL (killed, e.g. by the kernel when out of memory)";
	case SIGXCPU: return "SIGXCPU";
	case SIGXFSZ: return "SIGXFSZ (a file size limit)";
	default: return strsignal(sig);
	}
}

static void crashed(mb_relay *r, mb_exec_result *res)
{
	int st = stop_worker(r, 0);
	atomic_fetch_add(&n_crashed, 1);
	char msg[MB_ERR_MAX];
	if (st >= 0 && WIFSIGNALED(st))
		snprintf(msg, sizeof msg, "the worker process running this execution died of %s; "
			 "nothing else was affected", signal_name(WTERMSIG(st)));
	else if (st >= 0 && WIFEXITED(st))
		snprintf(msg, sizeof msg, "the worker process running this execution exited with status "
			 "%d", WEXITSTATUS(st));
	else
		snprintf(msg, sizeof msg, "the worker process running this execution was lost");
	mb_log(MB_LOG_WARNING, "%s", msg);
	set_failure(res, "crashed", msg);
}

int mb_relay_run(mb_relay *r, const mb_exec_request *req, mb_budget *b, mb_exec_result *res)
{
	memset(res, 0, sizeof *res);
	uint64_t t0 = mb_now_ns();
	mb_codec_hash_hex(req->code, req->code_len, res->code_hash);
	char err[MB_ERR_MAX];
	if (mb_relay_ready(r, err, sizeof err) != 0) {
		mb_log(MB_LOG_ERROR, "pool: %s", err);
		set_failure(res, "crashed", err);
		mb_exec_result_shape(res);
		return -1;
	}
	atomic_store(&r->shared->cancel, 0); /* the page may hold the last job's state */
	atomic_store(&r->shared->stop, MB_STOP_NONE);
	mb_wbuf_start(&r->wb, W_JOB);
	mb_wbuf_u64(&r->wb, req->timeout_ms);
	mb_wbuf_u64(&r->wb, req->memory_bytes);
	mb_wbuf_u64(&r->wb, req->instruction_limit);
	mb_wbuf_u64(&r->wb, (uint64_t)req->pii_policy);
	mb_wbuf_u64(&r->wb, req->workspace != NULL);
	mb_wbuf_u64(&r->wb, req->workspace ? (uint64_t)mb_workspace_limits_of(req->workspace)->max_file_bytes : 0);
	mb_wbuf_bytes(&r->wb, req->code, req->code_len);
	mb_wbuf_u64(&r->wb, req->context_json != NULL);
	mb_wbuf_bytes(&r->wb, req->context_json, req->context_json ? req->context_len : 0);
	if (mb_wire_send(r->fd, &r->wb) != 0) {
		crashed(r, res);
		goto out;
	}
	uint64_t deadline = b->deadline_ns;
	uint64_t kill_at = deadline + (uint64_t)r->cfg->timeout_grace_ms * 1000000 / 2;
	int told_deadline = 0, told_cancel = 0;
	uint64_t notes = 0;
	for (;;) {
		uint64_t now = mb_now_ns();
		if (atomic_load(&b->cancel) && !told_cancel) {
			atomic_store(&r->shared->cancel, 1); /* then checked at the next instruction */
			kill(r->pid, MB_SANDBOX_SIGNAL);
			told_cancel = 1;
		}
		if (now >= deadline && !told_deadline) {
			kill(r->pid, MB_SANDBOX_SIGNAL);
			told_deadline = 1;
		}
		if (now >= kill_at) {
			/* stuck in C: the cause is what tripped first in the worker, when that is a
			 * limit (its budget is in the shared page), else the deadline or the cancel */
			int first = atomic_load(&r->shared->stop);
			res->instructions = r->shared->instructions;
			res->memory_peak_bytes = r->shared->mem_peak > req->memory_bytes
							 ? req->memory_bytes : r->shared->mem_peak;
			stop_worker(r, SIGKILL);
			atomic_fetch_add(&n_killed, 1);
			if (first > MB_STOP_NONE && first <= MB_STOP_CANCELLED)
				mb_budget_trip(b, (mb_stop_reason)first);
			mb_stop_reason why = mb_budget_check(b);
			if (why == MB_STOP_NONE)
				why = MB_STOP_TIMEOUT;
			mb_budget_trip(b, why);
			char msg[MB_ERR_MAX];
			mb_budget_message(b, msg, sizeof msg);
			set_failure(res, mb_stop_name(why), msg);
			break;
		}
		uint64_t until = told_deadline ? kill_at : deadline;
		mb_wmsg m;
		int k = mb_wire_read(&r->rd, r->fd, (int)((until - now + 999999) / 1000000), &m);
		if (k == 0)
			continue;
		if (k < 0) {
			if (errno == EMSGSIZE) {
				stop_worker(r, SIGKILL);
				set_failure(res, "result", "the worker process sent a message over the size "
					    "limit (max_result_bytes and max_output_bytes)");
			} else {
				crashed(r, res);
			}
			break;
		}
		int bad = 0;
		switch (m.type) {
		case W_NOTIFY: on_notify(&m, req, &notes); break;
		case W_CALL: bad = on_call(r, &m, req, b) != 0; break;
		case W_MINT: bad = on_mint(r, &m) != 0; break;
		case W_WS: bad = on_ws(r, &m, req) != 0; break;
		case W_DONE: bad = read_done(r, &m, req, res) != 0; break;
		default: bad = 1;
		}
		if (bad) {
			stop_worker(r, SIGKILL);
			set_failure(res, "crashed", "the worker process broke the protocol; it was stopped");
			break;
		}
		if (m.type == W_DONE)
			break;
	}
out:
	if (mb_budget_check(b) != MB_STOP_NONE && res->success) {
		/* as on a thread: a limit decides the outcome */
		char msg[MB_ERR_MAX];
		mb_budget_message(b, msg, sizeof msg);
		set_failure(res, mb_stop_name((mb_stop_reason)atomic_load(&b->stop)), msg);
	}
	if (!res->output)
		res->output = strdup("");
	if (res->success && !res->result_json) {
		res->result_json = strdup("null");
		res->result_len = res->result_json ? 4 : 0;
	}
	res->execution_time_ms = (double)(mb_now_ns() - t0) / 1e6;
	mb_exec_result_shape(res);
	return 0;
}
