/* worker_relay.c - the server's side of one worker process, apart from the loop: starting it,
 * and checking everything it sends (worker_int.h; worker_pool.c drives them on the loop).
 *
 * Start (mb_worker_spawn, on a thread-pool thread): socketpair, a memfd page for the worker's
 * budget, then posix_spawn of /proc/self/exe --worker with /dev/null on 0 and 1, the channel
 * dup'ed to 3, the page to 4, every descriptor above closed
 * (posix_spawn_file_actions_addclosefrom_np) and an empty environment (MOONBOX_TEST_STALL_MS, a
 * test knob, is the one variable passed), so the worker starts from a clean image whatever this
 * process holds: no store handle, no key, no client socket, no upstream credentials in memory.
 * W_INIT then gives it the configuration with every secret field blanked (HTTP tokens,
 * mcpServers, paths).
 *
 * Every byte from a worker is hostile. JSON it hands on - log data, host-call arguments,
 * upstream arguments, the result - is checked before anything splices or decodes it, in one
 * pass that builds nothing (json_check.h), against the bounds the worker's own encoder keeps
 * (json_max_depth, max_call_nodes, max_result_nodes); the
 * error type is one of a fixed list; the tokens it reports as minted are recomputed with the
 * key and dropped when they do not match (so a worker cannot bind a token to a value in the
 * vault). Workspace operations run here on the tenant's workspace, with workspace.c's own
 * confinement and quotas.
 */
#include "worker_int.h"
#include "worker_pool.h"

#include <errno.h>
#include <fcntl.h>
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
#include "json_check.h"
#include "log.h"
#include "tokest.h"
#include "worker_proc.h"
#include "worker_wire.h"

/* The configuration a worker gets: what executions need, nothing that is a secret or a path. */
static void worker_config(const mb_config *in, mb_config *out)
{
	*out = *in;
#define BLANK(f) memset(out->f, 0, sizeof out->f)
	BLANK(data_dir), BLANK(config_file), BLANK(skills_dir), BLANK(catalog_dir);
	BLANK(workflows_dir), BLANK(share_dir), BLANK(http_listen), BLANK(http_tokens);
	BLANK(http_allowed_origins), BLANK(http_allowed_hosts), BLANK(http_cors_origin);
	BLANK(mcp_servers), BLANK(store_url), BLANK(replica_id), BLANK(workspace_dir);
	BLANK(pii_key_file);
#undef BLANK
}

int mb_worker_spawn(const mb_config *cfg, int probe, mb_wspawn *out, char *err, size_t errlen)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		snprintf(err, errlen, "socketpair: %s", strerror(errno));
		return -1;
	}
	/* the page that holds the worker's budget: a fresh memfd per worker */
	int mfd = memfd_create("moonbox-budget", MFD_CLOEXEC);
	/* every descriptor the child's dup2s touch must sit above them (a low number would be
	 * overwritten, or dup'ed onto itself and so keep close-on-exec) */
	int *fds[] = {&sv[0], &sv[1], &mfd};
	for (int i = 0; i < 3; i++)
		if (*fds[i] >= 0 && *fds[i] <= MB_WORKER_SHM_FD) {
			int k = fcntl(*fds[i], F_DUPFD_CLOEXEC, MB_WORKER_SHM_FD + 1);
			close(*fds[i]);
			*fds[i] = k;
		}
	void *page = MAP_FAILED;
	if (mfd >= 0 && ftruncate(mfd, MB_WORKER_SHM_BYTES) == 0)
		page = mmap(NULL, MB_WORKER_SHM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (page == MAP_FAILED || sv[0] < 0 || sv[1] < 0) {
		snprintf(err, errlen, "cannot make the channel and the page shared with a worker: %s",
			 strerror(errno));
		if (page != MAP_FAILED)
			munmap(page, MB_WORKER_SHM_BYTES);
		for (int i = 0; i < 3; i++)
			if (*fds[i] >= 0)
				close(*fds[i]);
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
	char *envp[] = {stall[0] ? stall : NULL, NULL, NULL};
#ifdef MB_TEST_HOOKS
	/* the test build: a worker that fails at start (tests/security/process.test.mjs) */
	if (getenv("MOONBOX_TEST_WORKER_FAIL"))
		envp[stall[0] ? 1 : 0] = (char *)"MOONBOX_TEST_WORKER_FAIL=1";
#endif
	char *argv[] = {(char *)"moonbox", (char *)MB_WORKER_FLAG, NULL};
	pid_t pid;
	int rc = posix_spawn(&pid, "/proc/self/exe", &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(sv[1]);
	close(mfd);
	if (rc != 0) {
		munmap(page, MB_WORKER_SHM_BYTES);
		close(sv[0]);
		snprintf(err, errlen, "cannot start a worker process: %s", strerror(rc));
		return -1;
	}
	static mb_config wc; /* large: not on the stack; the same content for every worker */
	static pthread_mutex_t wc_lock = PTHREAD_MUTEX_INITIALIZER;
	mb_wbuf b = {0};
	pthread_mutex_lock(&wc_lock);
	worker_config(cfg, &wc);
	mb_wbuf_start(&b, probe ? W_PROBE : W_INIT);
	mb_wbuf_bytes(&b, &wc, sizeof wc);
	pthread_mutex_unlock(&wc_lock);
	out->pid = pid;
	out->fd = sv[0];
	out->shared = page;
	int sent = mb_wire_send(sv[0], &b);
	mb_wbuf_free(&b);
	if (sent != 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		mb_worker_spawn_release(out);
		snprintf(err, errlen, "a new worker process did not take its configuration");
		return -1;
	}
	return 0;
}

void mb_worker_spawn_release(mb_wspawn *w)
{
	if (w->shared)
		munmap(w->shared, MB_WORKER_SHM_BYTES);
	if (w->fd >= 0)
		close(w->fd);
	w->shared = NULL;
	w->fd = -1;
}

/* ---- checking what a worker sends ----------------------------------------------------------- */

int mb_worker_valid_json(const char *s, size_t n, const mb_config *cfg, uint64_t max_nodes,
			 uint64_t *nodes)
{
	mb_json_check_limits lim = {.max_depth = (int)cfg->json_max_depth, .max_nodes = max_nodes};
	return mb_json_check(s, n, &lim, nodes, NULL, 0) == MB_JSON_CHECK_OK;
}

/* Upstream calls carry "server\0tool\0args" items (one per line for a batch): every args part
 * must be JSON text or empty, because the gateway may splice it into the upstream request;
 * their values count together against max_call_nodes, as in the worker's encoder. */
static int valid_upstream(const char *s, size_t n, int batch, const mb_config *cfg)
{
	const char *end = s + n;
	uint64_t most = (uint64_t)cfg->max_call_nodes, used = 0;
	while (s < end || (!batch && n == 0)) {
		const char *nl = batch ? memchr(s, '\n', (size_t)(end - s)) : NULL;
		const char *item_end = nl ? nl : end;
		const char *a = memchr(s, 0, (size_t)(item_end - s));
		const char *b = a ? memchr(a + 1, 0, (size_t)(item_end - a - 1)) : NULL;
		if (!b)
			return 0;
		uint64_t k = 0;
		if (item_end > b + 1 &&
		    (used >= most || !mb_worker_valid_json(b + 1, (size_t)(item_end - b - 1), cfg,
							   most - used, &k)))
			return 0;
		used += k;
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

void mb_worker_set_failure(mb_exec_result *res, const char *type, const char *msg)
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
int mb_worker_read_done(mb_wmsg *m, const mb_exec_request *req, mb_exec_result *res)
{
	uint64_t success, has_result, instr, peak, ms_bits, nfound;
	const char *type, *err, *tb, *result, *out;
	size_t type_n, err_n, tb_n, result_n, out_n;
	if (mb_wmsg_u64(m, &success) || mb_wmsg_bytes(m, &type, &type_n) ||
	    mb_wmsg_bytes(m, &err, &err_n) || mb_wmsg_bytes(m, &tb, &tb_n) ||
	    mb_wmsg_u64(m, &has_result) || mb_wmsg_bytes(m, &result, &result_n) ||
	    mb_wmsg_bytes(m, &out, &out_n) || mb_wmsg_u64(m, &instr) || mb_wmsg_u64(m, &peak) ||
	    mb_wmsg_u64(m, &ms_bits) || mb_wmsg_u64(m, &nfound))
		return -1;
	/* the worker's own measure of its run (the caller bounds it by what it saw) */
	memcpy(&res->execution_time_ms, &ms_bits, sizeof res->execution_time_ms);
	res->success = success == 1;
	res->output = mb_wire_copy(out, out_n);
	res->output_len = res->output ? out_n : 0;
	res->instructions = instr;
	res->memory_peak_bytes = peak > req->memory_bytes ? req->memory_bytes : (size_t)peak;
	if (res->success) {
		if (has_result && result_n) {
			mb_json_check_limits lim = {.max_depth = (int)req->cfg->json_max_depth,
						    .max_nodes = (uint64_t)req->cfg->max_result_nodes,
						    .node_limit_name = "max_result_nodes",
						    .depth_limit_name = "json_max_depth"};
			char why[160], msg[MB_ERR_MAX];
			int rc = mb_json_check(result, result_n, &lim, NULL, why, sizeof why);
			if (rc == MB_JSON_CHECK_INVALID || rc == MB_JSON_CHECK_NOMEM) {
				mb_worker_set_failure(res, "result", "the worker process returned a result that is not JSON");
				return 1;
			}
			if (rc != MB_JSON_CHECK_OK) { /* its encoder would have refused it */
				snprintf(msg, sizeof msg, "the worker process returned a result its sandbox "
					 "should have refused: %s", why);
				mb_worker_set_failure(res, "result", msg);
				return 1;
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
	/* the counts of what the code took in: a token takes at least a byte; the caller bounds the
	 * bytes by what the server sent (worker_pool.c, finish) */
	for (int i = 0; i < MB_IO_NSOURCES; i++) {
		uint64_t bytes, tokens;
		if (mb_wmsg_u64(m, &bytes) || mb_wmsg_u64(m, &tokens))
			return -1;
		res->io.in_bytes[i] = bytes;
		res->io.in_tokens[i] = tokens < bytes ? tokens : bytes;
	}
	uint64_t rt;
	const char *note;
	size_t note_n;
	if (mb_wmsg_u64(m, &rt) || mb_wmsg_bytes(m, &note, &note_n) || note_n >= MB_EXEC_NOTE_MAX)
		return -1;
	if (note_n) /* shown to the agent as a JSON string, which the encoder makes of any bytes */
		res->note = mb_wire_copy(note, note_n);
	/* the result's estimate is made here, not taken from the worker: one that said 1 token for
	 * a 10 KB result shrank tokens_out and grew tokens_saved by as much (a large W_DONE is read
	 * on the thread pool, so this pass is not the loop's) */
	(void)rt;
	res->io.result_tokens = res->result_json ? mb_tokest(res->result_json, res->result_len) : 0;
	return 0;
}

/* ---- answering a worker ---------------------------------------------------------------------- */

void mb_worker_reply(mb_wbuf *out, uint64_t status, uint64_t extra, const char *data, size_t n)
{
	mb_wbuf_start(out, W_REPLY);
	mb_wbuf_u64(out, status);
	mb_wbuf_u64(out, extra);
	mb_wbuf_bytes(out, data, n);
}

int mb_worker_valid_call(const char *name, const char *args, size_t n, const mb_config *cfg,
			 char *why, size_t whylen)
{
	int ok;
	if (strcmp(name, "upstream_call") == 0)
		ok = valid_upstream(args, n, 0, cfg);
	else if (strcmp(name, "upstream_batch") == 0)
		ok = valid_upstream(args, n, 1, cfg);
	else
		ok = mb_worker_valid_json(args, n, cfg, (uint64_t)cfg->max_call_nodes, NULL);
	if (!ok)
		snprintf(why, whylen, "malformed arguments from the worker process (not JSON, nested "
			 "deeper than json_max_depth=%lld or more values than max_call_nodes=%lld)",
			 (long long)cfg->json_max_depth, (long long)cfg->max_call_nodes);
	return ok;
}

int mb_worker_mint(mb_wmsg *m, mb_wbuf *out)
{
	const char *type, *value;
	size_t tn, vn;
	if (mb_wmsg_bytes(m, &type, &tn) || mb_wmsg_bytes(m, &value, &vn))
		return -1;
	char t[MB_PII_TOKEN_MAX], tok[MB_PII_TOKEN_MAX];
	if (tn >= sizeof t || !mb_pii_type_name_valid(type, tn)) {
		mb_worker_reply(out, 1, 0, "invalid type name", 17);
		return 0;
	}
	memcpy(t, type, tn);
	t[tn] = 0;
	if (mb_sandbox_pii_token(t, value, vn, MB_PII_HEX_MIN, tok) != 0) {
		mb_worker_reply(out, 1, 0, "cannot make a token", 19);
		return 0;
	}
	mb_worker_reply(out, 0, 0, tok, strlen(tok));
	return 0;
}

int mb_worker_ws(mb_wmsg *m, mb_workspace *ws, mb_wbuf *w)
{
	uint64_t op, has_path;
	const char *path, *data;
	size_t pn, dn;
	if (mb_wmsg_u64(m, &op) || mb_wmsg_bytes(m, &path, &pn) || mb_wmsg_u64(m, &has_path) ||
	    mb_wmsg_bytes(m, &data, &dn) || op < W_WS_READ || op > W_WS_STAT)
		return -1;
	char err[MB_ERR_MAX] = "";
	if (!ws) {
		mb_wbuf_start(w, W_REPLY);
		mb_wbuf_u64(w, (uint64_t)(int64_t)-ENOSYS);
		mb_wbuf_bytes(w, "the workspace is not available here", 35);
		return 0;
	}
	int rc = 0;
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
	return 0;
}

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
	case SIGXFSZ: return "SIGXFSZ (a file size limit)";
	default: return strsignal(sig);
	}
}

void mb_worker_death_message(int st, char *msg, size_t n)
{
	if (st >= 0 && WIFSIGNALED(st))
		snprintf(msg, n, "the worker process running this execution died of %s; nothing else "
			 "was affected", signal_name(WTERMSIG(st)));
	else if (st >= 0 && WIFEXITED(st))
		snprintf(msg, n, "the worker process running this execution exited with status %d",
			 WEXITSTATUS(st));
	else
		snprintf(msg, n, "the worker process running this execution was lost");
}

/* ---- isolation = auto --------------------------------------------------------------------- */

int mb_worker_probe_start(const mb_config *cfg, mb_wprobe *p, char *why, size_t n)
{
	p->spawn = calloc(1, sizeof(mb_wspawn));
	if (!p->spawn) {
		snprintf(why, n, "out of memory");
		return -1;
	}
	mb_wspawn *w = p->spawn;
	w->fd = -1;
	if (mb_worker_spawn(cfg, 1, w, why, n) != 0) {
		free(w);
		p->spawn = NULL;
		return -1;
	}
	p->until_ns = mb_now_ns() + 5000000000ull;
	return 0;
}

int mb_worker_probe_finish(mb_wprobe *p, char *why, size_t n)
{
	mb_wspawn *w = p->spawn;
	if (!w) {
		snprintf(why, n, "the probe was not started");
		return -1;
	}
	p->spawn = NULL;
	mb_wreader rd = {.max = 4096};
	mb_wmsg m;
	uint64_t until = p->until_ns, sec = 0;
	int k = 0;
	while (k == 0 && mb_now_ns() < until)
		k = mb_wire_read(&rd, w->fd, (int)((until - mb_now_ns()) / 1000000) + 1, &m);
	if (k == 1 && m.type == W_READY)
		mb_wmsg_u64(&m, &sec);
	kill(w->pid, SIGKILL);
	int st = -1;
	while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
		;
	mb_wreader_free(&rd);
	mb_worker_spawn_release(w);
	free(w);
	if (k == 1 && m.type == W_READY && sec)
		return 0;
	if (k == 1)
		snprintf(why, n, "it started without its system-call filter");
	else if (st >= 0 && WIFEXITED(st))
		snprintf(why, n, "it exited with status %d before it was ready (the log above says why)",
			 WEXITSTATUS(st));
	else if (st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)
		snprintf(why, n, "it died of %s before it was ready", strsignal(WTERMSIG(st)));
	else
		snprintf(why, n, "it was not ready within 5 s");
	return -1;
}
