/* host.c - the trusted host Lua state: one coroutine per request, and the C<->Lua bridge.
 *
 * The host state runs the embedded lua/mcp modules with the full standard library (this
 * code is ours, not the agent's). lua/mcp/server.lua returns an entry table, the functions this
 * file calls (docs/host-api.md lists them and every mb.* function). Each incoming line starts a
 * coroutine running entry.handle_line; when a handler calls mb.wait(job) the coroutine yields and
 * is parked in the registry table `waiting[job]` until the pool reports the job done, then
 * resumed with the result. Notifications from a running job go to entry.on_notify. Messages leave through
 * mb.send, which encodes with the shared JSON codec and hands the line to the transport.
 */
#include "host.h"

#include "audit.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embedded.h"
#include "protocol.h"
#include "yaml.h"
#include "arena.h"
#include "utf8.h"
#include "codec.h"
#include "host_fs.h"
#include "host_seal.h"
#include "history.h"
#include "host_uv.h"
#include "host_proc.h"
#include "host_http_client.h"
#include "store.h"
#include "store_pg.h"
#include "workspace.h"
#include "json.h"
#include "log.h"
#include "pii.h"

/* MB_VERSION comes from config.h, the one place the release is written */

struct mb_host {
	lua_State *L;
	const mb_config *cfg;
	mb_host_io io;
	mb_pool *pool;
	mb_history *history;
	mb_arena *arena;       /* the host state's allocator: size classes with free lists */
	mb_arena_ud aud;
	mb_budget abud;        /* the arena's budget: no limit (see mb_host_new) */
	mb_host_deps deps;
	mb_json_limits jl;
	int ref_handle_line, ref_handle_oversize, ref_on_notify, ref_on_host_call, ref_waiting;
	int ref_threads; /* weak-keyed set of the request coroutines made here (store_pg.h) */
	int ref_entry; /* the table lua/mcp/server.lua returns (docs/host-api.md) */
	size_t inflight;
	uint64_t start_ns;
	/* the exchange being handled by mb_host_handle_message, and what happened on it */
	uint64_t cur_exchange;
	int cur_pending, cur_answered;
	/* at shutdown: HTTP transfers still running (the DELETEs that end upstream sessions) get
	 * until http_wait_until, checked every HTTP_WAIT_TICK_MS, before they are cancelled */
	uv_timer_t http_wait;
	uint64_t http_wait_until;
	unsigned char audit_key[MB_AUDIT_KEY_BYTES]; /* the audit chain's (audit.h), from the PII key */
	int audit_keyed;
};

#define HTTP_WAIT_MAX_MS 2000 /* at most this long, and at most upstream_shutdown_grace_ms */
#define HTTP_WAIT_TICK_MS 10

/* An error outside any protected call in the host state: our own bug; say where and stop. */
static int host_panic(lua_State *L)
{
	mb_log(MB_LOG_CRIT, "host: unprotected Lua error: %s",
	       lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(not a string)");
	return 0; /* Lua aborts after the panic function returns */
}

static mb_host *host_of(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

const mb_embedded_file *mb_embedded_find(const char *name)
{
	for (const mb_embedded_file *f = mb_embedded_lua; f->name; f++)
		if (strcmp(f->name, name) == 0)
			return f;
	return NULL;
}

/* package.searchers entry for the embedded modules (embedded.h). */
int mb_embedded_searcher(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	const mb_embedded_file *f = mb_embedded_find(name);
	if (!f) {
		lua_pushfstring(L, "no embedded module '%s'", name);
		return 1;
	}
	/* bytecode compiled at build time from our own lua/ (tools/embed.c); the chunk name
	 * "@lua/<path>.lua" is inside it */
	if (luaL_loadbufferx(L, f->data, f->len, name, "b") != LUA_OK)
		return lua_error(L);
	lua_pushstring(L, name);
	return 2;
}

void mb_embedded_install(lua_State *L)
{
	lua_getglobal(L, "package");
	lua_getfield(L, -1, "searchers");
	lua_pushcfunction(L, mb_embedded_searcher);
	lua_rawseti(L, -2, 2); /* before the file searchers: ours win */
	lua_pop(L, 2);
}

/* Encodes the message at idx and hands it to the transport. @returns 0, or -ENOBUFS (err set:
 * the client is behind on reading), or -ENOMEM / -EINVAL (logged) */
static int send_value(mb_host *h, lua_State *L, int idx, uint64_t session, uint64_t exchange,
		      int final, int status, char *err, size_t errlen)
{
	size_t len;
	char *j = mb_json_encode(L, idx, &h->jl, MB_JSON_LENIENT, &len, err, errlen);
	if (!j) {
		mb_log(MB_LOG_ERROR, "host: cannot encode a message: %s", err);
		return -EINVAL;
	}
	char *line = realloc(j, len + 2);
	if (!line) {
		free(j);
		return -ENOMEM;
	}
	line[len] = '\n';
	line[len + 1] = 0;
	if (final && exchange && exchange == h->cur_exchange)
		h->cur_answered = 1;
	err[0] = 0;
	return h->io.send(h->io.ud, session, exchange, final, status, line, len + 1, err, errlen);
}

/* mb.send(message, session, exchange, final, status) -> true | false, why: status is the HTTP
 * status of a final answer sent as a whole JSON response (default 200). false: the transport
 * refused the message because its client has not read earlier ones (max_backlog_bytes); why
 * names the limit, and the caller may send a short error in its place. */
static int l_send(lua_State *L)
{
	luaL_checkany(L, 1);
	uint64_t session = (uint64_t)luaL_optinteger(L, 2, 1);
	uint64_t exchange = (uint64_t)luaL_optinteger(L, 3, 0);
	int final = lua_isnoneornil(L, 4) ? 1 : lua_toboolean(L, 4);
	int status = (int)luaL_optinteger(L, 5, 0);
	char err[MB_ERR_MAX];
	int rc = send_value(host_of(L), L, 1, session, exchange, final,
			    status >= 100 && status <= 599 ? status : 0, err, sizeof err);
	if (rc == -ENOBUFS) {
		lua_pushboolean(L, 0);
		lua_pushstring(L, err);
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

static void run_coroutine(mb_host *h, lua_State *co, int nargs);

/* Marks the thread on top of L as one of the host's request coroutines (the set pg_owns reads).
 * Only the PostgreSQL store asks, so on SQLite no request pays for the mark. */
static void mark_co(mb_host *h, lua_State *L)
{
	if (!h->deps.pg)
		return;
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_threads);
	lua_pushvalue(L, -2);
	lua_pushboolean(L, 1);
	lua_rawset(L, -3);
	lua_pop(L, 1);
}

/* mb.go(fn, ...): runs fn(...) now in a new request coroutine of the host (one the PostgreSQL
 * store may make wait, store_pg.h); an error is logged like a request's */
static int l_go(lua_State *L)
{
	mb_host *h = host_of(L);
	luaL_checktype(L, 1, LUA_TFUNCTION);
	int n = lua_gettop(L);
	lua_State *co = lua_newthread(L);
	mark_co(h, L);
	for (int i = 1; i <= n; i++)
		lua_pushvalue(L, i);
	lua_xmove(L, co, n);
	run_coroutine(h, co, n - 1);
	return 0;
}

/* mb.exchange_pending(): the message being handled is a request; its answer comes later */
static int l_exchange_pending(lua_State *L)
{
	host_of(L)->cur_pending = 1;
	return 0;
}

static int l_json_encode(lua_State *L)
{
	mb_host *h = host_of(L);
	char err[MB_ERR_MAX];
	size_t len;
	char *j = mb_json_encode(L, 1, &h->jl, MB_JSON_LENIENT, &len, err, sizeof err);
	if (!j)
		return luaL_error(L, "json encode: %s", err);
	lua_pushlstring(L, j, len);
	free(j);
	return 1;
}

/* mb.json_decode(text [, unique_keys [, raw_context]]) -> value | nil, err (unique_keys: a
 * repeated key in any object is an error, for client requests; raw_context: a request's
 * params.arguments.context_vars, when an object, is handed on as a raw value of its text) */
static int l_json_decode(lua_State *L)
{
	static const char *const context_path[] = {"params", "arguments", "context_vars", NULL};
	mb_host *h = host_of(L);
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	char err[MB_ERR_MAX];
	mb_json_limits jl = h->jl;
	jl.unique_keys = lua_toboolean(L, 2);
	if (lua_toboolean(L, 3))
		jl.raw_path = context_path;
	if (mb_json_decode(L, s, len, &jl, err, sizeof err) != 0) {
		lua_pushnil(L);
		lua_pushstring(L, err);
		return 2;
	}
	return 1;
}

static uint64_t get_u64(lua_State *L, int t, const char *k, uint64_t def)
{
	lua_getfield(L, t, k);
	uint64_t v = lua_isinteger(L, -1) ? (uint64_t)lua_tointeger(L, -1) : def;
	lua_pop(L, 1);
	return v;
}

/* Answers a refused submit: nil, err and the execute_code result of that refusal (error_type
 * "busy") as structured_json, structured_quoted raw values, shaped by the result's one owner. */
static int push_refusal(lua_State *L, const char *err)
{
	mb_exec_result r;
	memset(&r, 0, sizeof r);
	r.error = (char *)err;
	r.error_type = "busy";
	mb_exec_result_shape(&r);
	lua_pushnil(L);
	lua_pushstring(L, err);
	if (!r.structured_json)
		return 2;
	mb_json_push_raw(L, r.structured_json, r.structured_json_len);
	mb_json_push_raw(L, r.structured_quoted, r.structured_quoted_len);
	char meta[MB_EXEC_META_MAX];
	mb_json_push_raw(L, meta, mb_exec_result_meta(&r, meta));
	free(r.structured_json);
	free(r.structured_quoted);
	return 5;
}

/* mb.submit{code=, context_json=, context_internal=, timeout_ms=, memory_bytes=, instruction_limit=}
 * -> id | nil, err, structured_json, structured_quoted, io_meta */
static int l_submit(lua_State *L)
{
	mb_host *h = host_of(L);
	luaL_checktype(L, 1, LUA_TTABLE);
	mb_exec_request req;
	memset(&req, 0, sizeof req);
	lua_getfield(L, 1, "code");
	req.code = luaL_checklstring(L, -1, &req.code_len);
	lua_getfield(L, 1, "context_json");
	if (lua_isstring(L, -1))
		req.context_json = lua_tolstring(L, -1, &req.context_len);
	lua_getfield(L, 1, "context_internal");
	req.context_internal = lua_toboolean(L, -1);
	lua_pop(L, 1);
	req.timeout_ms = get_u64(L, 1, "timeout_ms", (uint64_t)h->cfg->default_timeout_ms);
	req.memory_bytes = get_u64(L, 1, "memory_bytes", (uint64_t)h->cfg->default_memory_mb << 20);
	req.instruction_limit = get_u64(L, 1, "instruction_limit", (uint64_t)h->cfg->default_instruction_limit);
	req.cfg = h->cfg;
	lua_getfield(L, 1, "pii_policy");
	req.pii_policy = lua_isboolean(L, -1) ? lua_toboolean(L, -1) : (int)h->cfg->pii_policy;
	lua_pop(L, 1);
	uint64_t id;
	char err[MB_ERR_MAX];
	lua_getfield(L, 1, "tenant");
	req.tenant = lua_isstring(L, -1) ? lua_tostring(L, -1) : "default";
	if (h->deps.workspaces) {
		const char *tenant = req.tenant;
		req.workspace = mb_workspaces_get(h->deps.workspaces, tenant, err, sizeof err);
		if (!req.workspace)
			mb_log(MB_LOG_WARNING, "workspace of tenant %s: %s", tenant, err);
	}
	if (!h->pool)
		return push_refusal(L, "no execution pool");
	if (mb_pool_submit(h->pool, &req, &id, err, sizeof err) != 0)
		return push_refusal(L, err);
	lua_pushinteger(L, (lua_Integer)id);
	return 1;
}

/* mb.busy(message) -> nil, message, structured_json, structured_quoted, io_meta: the answer of a
 * submit refused by policy in Lua (a tenant's share of the queue), shaped like the pool's own. */
static int l_busy(lua_State *L)
{
	return push_refusal(L, luaL_checkstring(L, 1));
}

static int l_wait(lua_State *L)
{
	mb_host *h = host_of(L);
	lua_Integer id = luaL_checkinteger(L, 1);
	if (!lua_isyieldable(L))
		return luaL_error(L, "mb.wait must be called from a request coroutine");
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_waiting);
	lua_pushthread(L);
	lua_rawseti(L, -2, id);
	lua_pop(L, 1);
	h->inflight++;
	return lua_yield(L, 0);
}

static int l_cancel(lua_State *L)
{
	mb_host *h = host_of(L);
	lua_Integer id = luaL_checkinteger(L, 1);
	lua_pushboolean(L, h->pool && mb_pool_cancel(h->pool, (uint64_t)id) == 0);
	return 1;
}

/* mb.hold(job, on): the job's host call waits for a client's answer (a person may take
 * minutes), so it does not take one of the pool's `workers` places (mb_pool_hold). */
static int l_hold(lua_State *L)
{
	mb_host *h = host_of(L);
	lua_Integer id = luaL_checkinteger(L, 1);
	lua_pushboolean(L, h->pool && mb_pool_hold(h->pool, (uint64_t)id, lua_toboolean(L, 2)) == 0);
	return 1;
}

/* mb.host_reply(job, seq, ok, text): answers a host call from sandbox code; ok=false makes text
 * an error message raised in the sandbox. */
static int l_host_reply(lua_State *L)
{
	mb_host *h = host_of(L);
	lua_Integer job = luaL_checkinteger(L, 1), seq = luaL_checkinteger(L, 2);
	int ok = lua_toboolean(L, 3);
	size_t len;
	const char *text = luaL_checklstring(L, 4, &len);
	lua_pushboolean(L, h->pool && mb_pool_reply(h->pool, (uint64_t)job, (uint64_t)seq, ok ? 0 : 1,
						    text, len) == 0);
	return 1;
}

/* mb.json_raw_text(raw) -> the JSON text of a raw value (mb_json_push_raw) */
static int l_raw_text(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TUSERDATA);
	lua_pushlstring(L, lua_touserdata(L, 1), lua_rawlen(L, 1));
	return 1;
}

static int l_log(lua_State *L)
{
	int level = mb_log_level_from_name(luaL_checkstring(L, 1));
	mb_log(level < 0 ? MB_LOG_INFO : (mb_log_level)level, "%s", luaL_checkstring(L, 2));
	return 0;
}

static int l_now_ms(lua_State *L)
{
	lua_pushnumber(L, (lua_Number)mb_now_ns() / 1e6);
	return 1;
}

/* mb.pii_token(type, value, hexchars) -> the keyed token (for a longer one after a collision) */
static int l_pii_token(lua_State *L)
{
	mb_host *h = host_of(L);
	const char *type = luaL_checkstring(L, 1);
	size_t len;
	const char *value = luaL_checklstring(L, 2, &len);
	int hex = (int)luaL_optinteger(L, 3, MB_PII_HEX_MIN);
	char out[MB_PII_TOKEN_MAX];
	if (!h->deps.pii_key || mb_pii_token(h->deps.pii_key, type, value, len, hex, out) != 0)
		return luaL_error(L, "pii_token: invalid type %s or length %d", type, hex);
	lua_pushstring(L, out);
	return 1;
}

/* mb.history_add(tenant, started_ms, duration_ms, outcome, instructions, memory_peak, code_hash,
 * tool, code, context_bytes, result_head, result_bytes, output_head, output_bytes, error, tools,
 * rerun_of, principal) -> the row's id | nothing: queues a row for the history writer thread (the journal's
 * fields: history.h); nothing when the row was not queued */
static const char *opt_lstring(lua_State *L, int i, size_t *n)
{
	*n = 0;
	return lua_type(L, i) == LUA_TSTRING ? lua_tolstring(L, i, n) : NULL;
}

/* mb.audit_hash(prev, at, tenant, principal, client, kind, subject, detail) -> hex: the keyed
 * hash of one audit record (audit.h); nil arguments are SQL NULLs */
static int l_audit_hash(lua_State *L)
{
	mb_host *h = host_of(L);
	if (!h->audit_keyed)
		return luaL_error(L, "audit_hash: no key (the PII key is not loaded)");
	size_t plen;
	const char *prev = opt_lstring(L, 1, &plen);
	const char *f[MB_AUDIT_NFIELDS];
	size_t n[MB_AUDIT_NFIELDS];
	for (int i = 0; i < MB_AUDIT_NFIELDS; i++) {
		if (!lua_isnoneornil(L, i + 2) && lua_type(L, i + 2) != LUA_TSTRING && lua_type(L, i + 2) != LUA_TNUMBER)
			return luaL_typeerror(L, i + 2, "string or nil");
		f[i] = lua_isnoneornil(L, i + 2) ? NULL : lua_tolstring(L, i + 2, &n[i]);
		if (!f[i])
			n[i] = 0;
	}
	char hex[MB_AUDIT_HEX];
	mb_audit_hash(h->audit_key, prev, plen, f, n, hex);
	lua_pushlstring(L, hex, 64);
	return 1;
}

static int l_history_add(lua_State *L)
{
	mb_host *h = host_of(L);
	if (!h->history)
		return 0;
	mb_history_row r = {
		.tenant = luaL_optstring(L, 1, "default"),
		.started_ms = (int64_t)luaL_optinteger(L, 2, 0),
		.duration_ms = luaL_optnumber(L, 3, 0),
		.outcome = luaL_optstring(L, 4, "ok"),
		.instructions = (int64_t)luaL_optinteger(L, 5, 0),
		.memory_peak = (int64_t)luaL_optinteger(L, 6, 0),
		.code_hash = lua_isstring(L, 7) && lua_rawlen(L, 7) ? lua_tostring(L, 7) : NULL,
		.tool = luaL_optstring(L, 8, "execute_code"),
	};
	r.code = opt_lstring(L, 9, &r.code_len);
	r.context_bytes = (int64_t)luaL_optinteger(L, 10, 0);
	r.result_head = opt_lstring(L, 11, &r.result_head_len);
	r.result_bytes = (int64_t)luaL_optinteger(L, 12, (lua_Integer)r.result_head_len);
	r.output_head = opt_lstring(L, 13, &r.output_head_len);
	r.output_bytes = (int64_t)luaL_optinteger(L, 14, (lua_Integer)r.output_head_len);
	r.error = opt_lstring(L, 15, &r.error_len);
	r.tools = opt_lstring(L, 16, &r.tools_len);
	size_t n;
	r.rerun_of = opt_lstring(L, 17, &n);
	r.principal = opt_lstring(L, 18, &n);
	char ref[17];
	mb_history_add(h->history, &r, ref);
	if (!ref[0])
		return 0;
	lua_pushlstring(L, ref, 16);
	return 1;
}

static int l_history_flush(lua_State *L)
{
	mb_host *h = host_of(L);
	uint64_t dropped = 0, failed = 0;
	if (h->history) {
		mb_history_flush(h->history);
		mb_history_counters(h->history, &dropped, &failed);
	}
	lua_pushinteger(L, (lua_Integer)dropped);
	lua_pushinteger(L, (lua_Integer)failed);
	size_t queued = 0;
	char why[512];
	if (h->history && mb_history_outage(h->history, &queued, why, sizeof why)) {
		/* the writer is down: rows (ids already given to clients) wait in the queue */
		lua_pushinteger(L, (lua_Integer)queued);
		lua_pushstring(L, why);
		return 4;
	}
	return 2;
}

/* wall clock, ms since the epoch (mb.now_ms is monotonic) */
static int l_wall_ms(lua_State *L)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	lua_pushinteger(L, (lua_Integer)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	return 1;
}

/* mb.backlog() -> {bytes, peak, refused}: what the transport holds for clients that have not
 * read it (max_backlog_bytes) */
static int l_backlog(lua_State *L)
{
	mb_host *h = host_of(L);
	uint64_t v[3] = { 0, 0, 0 };
	if (h->io.backlog)
		h->io.backlog(h->io.ud, v);
	lua_createtable(L, 0, 3);
	lua_pushinteger(L, (lua_Integer)v[0]);
	lua_setfield(L, -2, "bytes");
	lua_pushinteger(L, (lua_Integer)v[1]);
	lua_setfield(L, -2, "peak");
	lua_pushinteger(L, (lua_Integer)v[2]);
	lua_setfield(L, -2, "refused");
	return 1;
}

static int l_pool_stats(lua_State *L)
{
	mb_host *h = host_of(L);
	mb_pool_stats s = { 0 };
	if (h->pool)
		mb_pool_get_stats(h->pool, &s);
	lua_createtable(L, 0, 14);
#define SI(k, v) (lua_pushinteger(L, (lua_Integer)(v)), lua_setfield(L, -2, k))
	SI("workers", s.workers);
	SI("busy", s.busy);
	SI("queued", s.queued);
	SI("stuck_threads", s.abandoned);
	SI("threads", s.threads);
	SI("threads_peak", s.threads_peak);
	SI("submitted", s.submitted);
	SI("completed", s.completed);
	SI("refused", s.refused);
	lua_pushnumber(L, (lua_Number)(mb_now_ns() - h->start_ns) / 1e9);
	lua_setfield(L, -2, "uptime_s");
	lua_pushstring(L, h->cfg->isolation);
	lua_setfield(L, -2, "isolation");
	if (strcmp(h->cfg->isolation, "process") == 0) {
		SI("processes", s.processes);
		SI("processes_started", s.processes_started);
		SI("processes_crashed", s.processes_crashed);
		SI("processes_killed", s.processes_killed);
		SI("jobs_taken_back", s.jobs_taken_back);
		SI("workspace_ops_queued", s.workspace_ops_queued);
		SI("workspace_ops_running", s.workspace_ops_running);
		SI("workspace_ops_done", s.workspace_ops_done);
		SI("workspace_ops_dropped", s.workspace_ops_dropped);
	}
#undef SI
	return 1;
}

static void push_config(lua_State *L, const mb_config *c)
{
	lua_createtable(L, 0, 24);
#define CI(f) (lua_pushinteger(L, (lua_Integer)c->f), lua_setfield(L, -2, #f))
	CI(default_timeout_ms); CI(max_timeout_ms); CI(default_memory_mb); CI(max_memory_mb);
	CI(default_instruction_limit); CI(max_instruction_limit); CI(max_output_bytes);
	CI(max_code_bytes); CI(max_result_bytes); CI(max_notifications); CI(workers);
	CI(max_queue); CI(timeout_grace_ms); CI(max_message_bytes); CI(json_max_depth);
	CI(tools_page_size); CI(regex_match_limit); CI(regex_heap_limit_kb);
	CI(regex_max_pattern_bytes); CI(regex_max_subject_bytes); CI(store_busy_timeout_ms);
	CI(max_skill_bytes); CI(luacheck_timeout_ms); CI(workspace_max_file_bytes); CI(workspace_max_bytes);
	CI(workspace_max_files); CI(history_max_rows); CI(journal_max_rows);
	CI(journal_max_age_s); CI(journal_max_code_bytes); CI(journal_head_bytes); CI(journal_search_bytes); CI(max_host_calls); CI(max_queue_bytes);
	CI(max_abandoned); CI(pii_policy); CI(pii_restore); CI(max_backlog_bytes); CI(max_backlog_tenant_bytes);
	CI(upstream_timeout_ms); CI(upstream_init_timeout_ms); CI(upstream_max_calls);
	CI(upstream_max_parallel); CI(upstream_restart_max_ms); CI(upstream_shutdown_grace_ms);
	CI(upstream_ask_args_bytes); CI(upstream_idle_ms); CI(upstream_max_instances);
	CI(cache_ttl_ms); CI(mrtr_hold_ms); CI(task_max_timeout_ms); CI(task_result_ttl_ms);
	CI(task_max_per_tenant); CI(task_poll_interval_ms); CI(mrtr_max_held); CI(max_resource_subscriptions);
	CI(max_listeners); CI(max_listeners_per_tenant); CI(mrtr_max_held_per_tenant);
	CI(max_client_requests_per_tenant); CI(max_queue_per_tenant); CI(max_queue_bytes_per_tenant);
	CI(inferred_shape_max_nodes); CI(inferred_shape_total_nodes);
	CI(audit_max_age_s); CI(audit_flush_ms); CI(audit_max_queued); CI(audit_sign_in_records);
#undef CI
	lua_pushboolean(L, c->http_tokens[0] != 0 || c->oauth_issuer[0] != 0); /* tenants exist (the tokens stay in C) */
	lua_setfield(L, -2, "tenants");
	lua_pushstring(L, c->oauth_scopes); /* scope=right pairs: the names of the rights (lua/mcp/auth.lua) */
	lua_setfield(L, -2, "oauth_scopes");
	lua_pushstring(L, c->mcp_servers);
	lua_setfield(L, -2, "mcp_servers");
	lua_pushstring(L, c->config_file);
	lua_setfield(L, -2, "config_file");
	lua_pushstring(L, c->tenant_secrets_dir);
	lua_setfield(L, -2, "tenant_secrets_dir");
	lua_pushstring(L, c->skills_dir);
	lua_setfield(L, -2, "skills_dir");
	lua_pushstring(L, c->catalog_dir);
	lua_setfield(L, -2, "catalog_dir");
	lua_pushstring(L, c->workflows_dir);
	lua_setfield(L, -2, "workflows_dir");
	lua_pushstring(L, c->log_level);
	lua_setfield(L, -2, "log_level");
	lua_pushstring(L, c->data_dir);
	lua_setfield(L, -2, "data_dir");
}

/* mb.protocol = {modern = {...}, served = {...}, upstream = {...}}: protocol.h's lists, newest
 * first */
static void push_protocol(lua_State *L)
{
	lua_createtable(L, 0, 3);
	const char *const *lists[] = { mb_protocol_modern, mb_protocol_served, mb_protocol_upstream };
	const char *names[] = { "modern", "served", "upstream" };
	for (int k = 0; k < 3; k++) {
		lua_newtable(L);
		for (int i = 0; lists[k][i]; i++) {
			lua_pushstring(L, lists[k][i]);
			lua_rawseti(L, -2, i + 1);
		}
		lua_setfield(L, -2, names[k]);
	}
}

/* A new request coroutine, left on h->L's stack and marked as ours: the PostgreSQL store makes
 * only these wait for a statement by yielding (a coroutine made by Lua code would yield to its
 * own resumer). */
static lua_State *new_co(mb_host *h)
{
	lua_State *co = lua_newthread(h->L);
	mark_co(h, h->L);
	return co;
}

/* Starts or resumes a request coroutine and reports a crash of our own Lua as a log line. */
static void run_coroutine(mb_host *h, lua_State *co, int nargs)
{
	int nres;
	int status = lua_resume(co, h->L, nargs, &nres);
	if (status == LUA_YIELD) {
		lua_pop(co, nres);
		return;
	}
	if (status != LUA_OK) {
		const char *msg = lua_tostring(co, -1);
		luaL_traceback(h->L, co, msg, 0);
		mb_log(MB_LOG_ERROR, "host: %s", lua_tostring(h->L, -1));
		lua_pop(h->L, 1);
	}
}

static int push_entry_fn(mb_host *h, const char *name);

static void pg_resume(void *ud, lua_State *co, int nargs)
{
	run_coroutine(ud, co, nargs);
}

static int pg_owns(void *ud, lua_State *co)
{
	mb_host *h = ud;
	lua_State *L = h->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_threads);
	lua_pushthread(co);
	lua_xmove(co, L, 1);
	int r = lua_rawget(L, -2) == LUA_TBOOLEAN;
	lua_pop(L, 2);
	return r;
}

static lua_State *pg_spawn(void *ud)
{
	return new_co(ud);
}

void mb_host_handle_line(mb_host *h, const char *line, size_t len)
{
	lua_State *co = new_co(h);
	lua_rawgeti(co, LUA_REGISTRYINDEX, h->ref_handle_line);
	lua_pushlstring(co, line, len);
	run_coroutine(h, co, 1);
	lua_pop(h->L, 1);
}

int mb_host_handle_message(mb_host *h, uint64_t session, uint64_t exchange, const char *tenant,
			   const char *body, size_t len, const char *version, const char *method,
			   const char *name, const char *params, const char *principal, const char *rights)
{
	h->cur_exchange = exchange;
	h->cur_pending = h->cur_answered = 0;
	lua_State *co = new_co(h);
	lua_rawgeti(co, LUA_REGISTRYINDEX, h->ref_handle_line);
	lua_pushlstring(co, body, len);
	lua_pushinteger(co, (lua_Integer)session);
	lua_pushinteger(co, (lua_Integer)exchange);
	lua_pushstring(co, tenant ? tenant : "default");
	lua_createtable(co, 0, 4); /* what the transport read from the headers */
	lua_pushboolean(co, 1);
	lua_setfield(co, -2, "http");
	lua_pushstring(co, version);
	lua_setfield(co, -2, "protocol_version");
	lua_pushstring(co, method);
	lua_setfield(co, -2, "method");
	lua_pushstring(co, name);
	lua_setfield(co, -2, "name");
	lua_pushstring(co, params);
	lua_setfield(co, -2, "params");
	lua_pushstring(co, principal); /* OAuth only (nil otherwise): the token's sub */
	lua_setfield(co, -2, "principal");
	lua_pushstring(co, rights);    /* OAuth only: what its scopes grant */
	lua_setfield(co, -2, "rights");
	run_coroutine(h, co, 5);
	lua_pop(h->L, 1);
	int r = h->cur_pending || h->cur_answered;
	h->cur_exchange = 0;
	return r;
}

/* Calls the entry function name(v) in a protected call; an error is logged. */
static void call_entry_u64(mb_host *h, const char *name, uint64_t v)
{
	lua_State *L = h->L;
	if (!push_entry_fn(h, name))
		return;
	lua_pushinteger(L, (lua_Integer)v);
	if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
		mb_log(MB_LOG_ERROR, "host: %s: %s", name, lua_tostring(L, -1));
		lua_pop(L, 1);
	}
}

void mb_host_auth_failed(mb_host *h, const char *why, const char *peer)
{
	lua_State *L = h->L;
	if (!push_entry_fn(h, "on_auth_failed"))
		return;
	lua_pushstring(L, why);
	lua_pushstring(L, peer);
	if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
		mb_log(MB_LOG_ERROR, "host: on_auth_failed: %s", lua_tostring(L, -1));
		lua_pop(L, 1);
	}
}

void mb_host_exchange_closed(mb_host *h, uint64_t exchange)
{
	call_entry_u64(h, "on_exchange_closed", exchange);
}

void mb_host_end_session(mb_host *h, uint64_t session)
{
	call_entry_u64(h, "on_session_end", session);
}

void mb_host_handle_oversize(mb_host *h, size_t bytes, const char *id, size_t id_len)
{
	lua_State *co = new_co(h);
	lua_rawgeti(co, LUA_REGISTRYINDEX, h->ref_handle_oversize);
	lua_pushinteger(co, (lua_Integer)bytes);
	if (id)
		lua_pushlstring(co, id, id_len);
	else
		lua_pushnil(co);
	run_coroutine(h, co, 2);
	lua_pop(h->L, 1);
}

void mb_host_job_notify(mb_host *h, uint64_t job, mb_notify_kind kind, int level, const char *json,
			size_t len)
{
	lua_State *L = h->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_on_notify);
	lua_pushinteger(L, (lua_Integer)job);
	lua_pushstring(L, kind == MB_NOTIFY_PROGRESS ? "progress" : mb_log_level_name((mb_log_level)level));
	lua_pushlstring(L, json, len);
	if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
		mb_log(MB_LOG_ERROR, "host: on_notify: %s", lua_tostring(L, -1));
		lua_pop(L, 1);
	}
}

void mb_host_job_call(mb_host *h, uint64_t job, uint64_t seq, const char *name, const char *args,
		      size_t len)
{
	lua_State *co = new_co(h);
	lua_rawgeti(co, LUA_REGISTRYINDEX, h->ref_on_host_call);
	lua_pushinteger(co, (lua_Integer)job);
	lua_pushinteger(co, (lua_Integer)seq);
	lua_pushstring(co, name);
	lua_pushlstring(co, args, len);
	run_coroutine(h, co, 4);
	lua_pop(h->L, 1);
}

/* The context-saved counts (tokest.h) into the result table at the top: io_meta (the _meta
 * value, raw JSON), the totals, and io_in[source] = {bytes, tokens} when anything came in. */
static void push_io(lua_State *L, const mb_exec_result *r)
{
	const mb_exec_io *io = &r->io;
	uint64_t bytes = 0;
	for (int i = 0; i < MB_IO_NSOURCES; i++)
		bytes += io->in_bytes[i];
	char meta[MB_EXEC_META_MAX];
	mb_json_push_raw(L, meta, mb_exec_result_meta(r, meta));
	lua_setfield(L, -2, "io_meta");
	lua_pushinteger(L, (lua_Integer)io->out_bytes);
	lua_setfield(L, -2, "bytes_out");
	lua_pushinteger(L, (lua_Integer)io->out_tokens);
	lua_setfield(L, -2, "tokens_out");
	if (!bytes)
		return;
	lua_pushinteger(L, (lua_Integer)mb_exec_io_saved(io));
	lua_setfield(L, -2, "tokens_saved");
	lua_createtable(L, 0, 2);
	for (int i = 0; i < MB_IO_NSOURCES; i++) {
		if (!io->in_bytes[i])
			continue;
		lua_createtable(L, 0, 2);
		lua_pushinteger(L, (lua_Integer)io->in_bytes[i]);
		lua_setfield(L, -2, "bytes");
		lua_pushinteger(L, (lua_Integer)io->in_tokens[i]);
		lua_setfield(L, -2, "tokens");
		lua_setfield(L, -2, mb_io_source_name((mb_io_source)i));
	}
	lua_setfield(L, -2, "io_in");
}

/* The journal's view of a result (history.h): the first journal_head_bytes of the result's
 * JSON, the output and the error, all already tokenized on the worker; whole sizes when cut. */
/* t[head] = the first max bytes of s[0..n) (at a character boundary), t[whole] = n when cut. */
static void push_head(lua_State *L, const char *s, size_t n, size_t max, const char *head,
		      const char *whole)
{
	size_t k = utf8_cut(s, n, max);
	lua_pushlstring(L, s, k);
	lua_setfield(L, -2, head);
	if (k < n && whole) {
		lua_pushinteger(L, (lua_Integer)n);
		lua_setfield(L, -2, whole);
	}
}

static void push_heads(lua_State *L, const mb_exec_result *r, size_t max)
{
	if (r->result_json && r->result_len)
		push_head(L, r->result_json, r->result_len, max, "result_head", "result_bytes");
	if (r->output && r->output_len)
		push_head(L, r->output, r->output_len, max, "output_head", "output_bytes");
	if (r->error)
		push_head(L, r->error, strlen(r->error), max, "error_head", NULL);
}

static void push_result(mb_host *h, lua_State *L, const mb_exec_result *r)
{
	lua_createtable(L, 0, 20); /* its size with the journal's heads and the context counts */
	if (h->history && h->cfg->history_max_rows > 0)
		push_heads(L, r, (size_t)h->cfg->journal_head_bytes);
	if (r->pii_nfound) {
		lua_createtable(L, (int)r->pii_nfound, 0);
		for (size_t i = 0; i < r->pii_nfound; i++) {
			const mb_pii_found *f = &r->pii_found[i];
			lua_createtable(L, 0, 3);
			lua_pushstring(L, f->token);
			lua_setfield(L, -2, "token");
			/* the type is the token's name part: "[EMAIL_..." */
			const char *us = strrchr(f->token, '_');
			lua_pushlstring(L, f->token + 1, us ? (size_t)(us - f->token - 1) : 0);
			lua_setfield(L, -2, "type");
			lua_pushlstring(L, f->value, f->value_len);
			lua_setfield(L, -2, "value");
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		lua_setfield(L, -2, "pii_found");
	}
	lua_pushboolean(L, r->success);
	lua_setfield(L, -2, "success");
	if (r->error_type) {
		lua_pushstring(L, r->error_type);
		lua_setfield(L, -2, "error_type");
	}
	lua_pushnumber(L, r->execution_time_ms);
	lua_setfield(L, -2, "execution_time_ms");
	lua_pushstring(L, r->code_hash);
	lua_setfield(L, -2, "code_hash");
	lua_pushinteger(L, (lua_Integer)r->instructions);
	lua_setfield(L, -2, "instructions");
	lua_pushinteger(L, (lua_Integer)r->memory_peak_bytes);
	lua_setfield(L, -2, "memory_peak_bytes");
	if (r->structured_json && r->structured_quoted) {
		/* Shaped by mb_exec_result_shape on the worker: handed over as raw JSON, one copy
		 * each, so a big result costs the loop thread little more than a memcpy. Absent only
		 * when memory ran out shaping it. */
		mb_json_push_raw(L, r->structured_json, r->structured_json_len);
		lua_setfield(L, -2, "structured_json");
		mb_json_push_raw(L, r->structured_quoted, r->structured_quoted_len);
		lua_setfield(L, -2, "structured_quoted");
		push_io(L, r);
	}
}

void mb_host_job_done(mb_host *h, uint64_t job, const mb_exec_result *res)
{
	lua_State *L = h->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_waiting);
	lua_rawgeti(L, -1, (lua_Integer)job);
	lua_State *co = lua_tothread(L, -1);
	if (!co) {
		lua_pop(L, 2);
		return;
	}
	lua_pushnil(L);
	lua_rawseti(L, -3, (lua_Integer)job);
	h->inflight--;
	push_result(h, co, res);
	run_coroutine(h, co, 1);
	lua_pop(L, 2);
}

size_t mb_host_inflight(mb_host *h)
{
	/* with the store on PostgreSQL, requests waiting for a statement count too */
	return h->inflight + (h->deps.pg ? mb_pg_pending(h->deps.pg) : 0);
}

void mb_host_set_pool(mb_host *h, mb_pool *pool)
{
	h->pool = pool;
}

void mb_host_set_pii(mb_host *h, const mb_pii_detector *pii, const unsigned char *key)
{
	h->deps.pii = pii;
	h->deps.pii_key = key;
	if (key) {
		mb_audit_key(key, h->audit_key);
		h->audit_keyed = 1;
	}
	lua_getglobal(h->L, "mb");
	mb_pii_lua_open(h->L, pii, key);
	lua_pop(h->L, 1);
}

void mb_host_set_history(mb_host *h, mb_history *history)
{
	h->history = history;
}

/* A registry reference to entry.name (the entry table is at the top of the stack). */
static int ref_entry_fn(lua_State *L, const char *name)
{
	if (lua_getfield(L, -1, name) != LUA_TFUNCTION) {
		mb_log(MB_LOG_CRIT, "host: lua/mcp/server.lua's entry table has no function %s", name);
		lua_pop(L, 1);
		return LUA_NOREF;
	}
	return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Pushes entry.name when it is a function (returns 1), else pushes nothing (returns 0). */
static int push_entry_fn(mb_host *h, const char *name)
{
	lua_State *L = h->L;
	int top = lua_gettop(L);
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_entry);
	if (!lua_istable(L, -1) || lua_getfield(L, -1, name) != LUA_TFUNCTION) {
		lua_settop(L, top);
		return 0;
	}
	lua_remove(L, -2);
	return 1;
}

mb_host *mb_host_new(const mb_config *cfg, const mb_host_io *io, const mb_host_deps *deps)
{
	mb_host *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	h->cfg = cfg;
	h->io = *io;
	if (deps)
		h->deps = *deps;
	h->start_ns = mb_now_ns();
	h->jl.max_depth = (int)cfg->json_max_depth;
	h->jl.max_input_bytes = (size_t)cfg->max_message_bytes;
	h->jl.max_output_bytes = (size_t)cfg->max_result_bytes * 3 + ((size_t)1 << 20);
	h->jl.input_limit_name = "max_message_bytes";
	/* The host state allocates and frees small blocks for every message (tables, strings, the
	 * request coroutine): served from size-class free lists instead of malloc, which took a
	 * fifth of the loop thread under load. 1 GiB of address space is reserved, not used;
	 * blocks above 4 KiB and any overflow go to malloc. */
	h->arena = mb_arena_new((size_t)1 << 30, (size_t)8 << 20);
	h->aud.a = h->arena;
	/* a budget without limits, not none: the arena's inline paths (a small block from its free
	 * list, a small block back to it) serve only states with a budget; without one every
	 * allocation and free of the host took the general path (alloc_any, ~9% of the loop
	 * thread under pipelined load) */
	mb_budget_init(&h->abud, 0, 0, 0);
	h->aud.b = &h->abud;
	lua_State *L = h->L = h->arena ? lua_newstate(mb_arena_lua_alloc, &h->aud) : luaL_newstate();
	if (L)
		lua_atpanic(L, host_panic);
	if (!L)
		goto fail;
	*(mb_budget **)lua_getextraspace(L) = NULL;
	luaL_openlibs(L);

	/* embedded modules via require */
	mb_embedded_install(L);

	lua_createtable(L, 0, 16);
	static const luaL_Reg fns[] = {
		{ "send", l_send }, { "json_encode", l_json_encode }, { "json_decode", l_json_decode },
		{ "submit", l_submit }, { "busy", l_busy }, { "wait", l_wait }, { "cancel", l_cancel }, { "hold", l_hold }, { "log", l_log },
		{ "now_ms", l_now_ms }, { "pool_stats", l_pool_stats }, { "backlog", l_backlog }, { "host_reply", l_host_reply },
		{ "wall_ms", l_wall_ms }, { "history_add", l_history_add },
		{ "history_flush", l_history_flush }, { "pii_token", l_pii_token }, { "audit_hash", l_audit_hash },
		{ "exchange_pending", l_exchange_pending }, { "yaml_decode", mb_yaml_decode_lua },
		{ "go", l_go },
		{ NULL, NULL },
	};
	mb_host_fs_open(L);
	mb_host_seal_open(L); /* mb.seal, mb.unseal: requestState tokens */
	mb_codec_lua_open(L);
	if (h->deps.loop) {
		mb_host_uv_open(L, h->deps.loop);
		mb_host_proc_open(L, h->deps.loop);  /* mb.spawn: stdio upstream servers */
		mb_host_http_open(L, h->deps.loop);  /* mb.http_request: HTTP upstream servers */
	}
	lua_newtable(L); /* ref_threads: before any coroutine is made */
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "k");
	lua_setfield(L, -2, "__mode");
	lua_setmetatable(L, -2);
	h->ref_threads = luaL_ref(L, LUA_REGISTRYINDEX);
	if (h->deps.store) {
		mb_store_push_lua(L, h->deps.store);
		lua_setfield(L, -2, "db");
	} else if (h->deps.pg) {
		mb_pg_host ph = { pg_resume, pg_owns, pg_spawn, h };
		mb_pg_set_host(h->deps.pg, &ph);
		mb_pg_push_lua(L, h->deps.pg);
		lua_setfield(L, -2, "db");
	}
	if (h->deps.workspaces)
		mb_workspace_lua_open(L, h->deps.workspaces);
	if (h->deps.pii)
		mb_pii_lua_open(L, h->deps.pii, h->deps.pii_key); /* mb.pii_scan, mb.pii_sanitize */
	lua_pushcfunction(L, l_raw_text);
	lua_setfield(L, -2, "json_raw_text");
	lua_pushcfunction(L, mb_json_raw_lua); /* JSON text spliced verbatim by the encoder */
	lua_setfield(L, -2, "json_raw");
	lua_pushlightuserdata(L, h);
	luaL_setfuncs(L, fns, 1);
	mb_json_push_null(L);
	lua_setfield(L, -2, "null");
	mb_json_open(L, &h->jl);
	lua_getfield(L, -1, "array");
	lua_setfield(L, -3, "array");
	lua_pop(L, 1);
	push_config(L, cfg);
	lua_setfield(L, -2, "config");
	lua_pushstring(L, MB_VERSION);
	lua_setfield(L, -2, "version");
	push_protocol(L);
	lua_setfield(L, -2, "protocol");
	lua_setglobal(L, "mb");

	lua_newtable(L);
	h->ref_waiting = luaL_ref(L, LUA_REGISTRYINDEX);

	lua_getglobal(L, "require");
	lua_pushstring(L, "mcp.server");
	if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
		mb_log(MB_LOG_CRIT, "host: loading lua/mcp/server.lua: %s", lua_tostring(L, -1));
		goto fail;
	}
	if (!lua_istable(L, -1)) {
		mb_log(MB_LOG_CRIT, "host: lua/mcp/server.lua must return its entry table");
		goto fail;
	}
	h->ref_handle_line = ref_entry_fn(L, "handle_line");
	h->ref_handle_oversize = ref_entry_fn(L, "handle_oversize");
	h->ref_on_notify = ref_entry_fn(L, "on_notify");
	h->ref_on_host_call = ref_entry_fn(L, "on_host_call");
	h->ref_entry = luaL_ref(L, LUA_REGISTRYINDEX);
	if (h->ref_handle_line == LUA_NOREF || h->ref_handle_oversize == LUA_NOREF ||
	    h->ref_on_notify == LUA_NOREF || h->ref_on_host_call == LUA_NOREF)
		goto fail;
	return h;
fail:
	if (h->L)
		lua_close(h->L);
	mb_arena_delete(h->arena);
	free(h);
	return NULL;
}

void mb_host_collect(mb_host *h)
{
	lua_gc(h->L, LUA_GCCOLLECT);
}

lua_State *mb_host_state(mb_host *h)
{
	return h->L;
}

static void http_wait_tick(uv_timer_t *t)
{
	mb_host *h = t->data;
	if (mb_host_http_live(h->L) > 0 && uv_now(t->loop) < h->http_wait_until)
		return;
	mb_host_http_close_all(h->L);
	uv_timer_stop(t);
	uv_close((uv_handle_t *)t, NULL);
}

void mb_host_shutdown(mb_host *h)
{
	lua_State *L = h->L;
	if (push_entry_fn(h, "on_shutdown") && lua_pcall(L, 0, 0, 0) != LUA_OK) {
		mb_log(MB_LOG_ERROR, "host: on_shutdown: %s", lua_tostring(L, -1));
		lua_pop(L, 1);
	}
	/* on_shutdown closed the upstreams gracefully; this catches anything left */
	if (h->deps.loop) {
		int64_t grace = h->cfg->upstream_shutdown_grace_ms;
		mb_host_proc_shutdown(L, (int)grace);
		/* HTTP: what on_shutdown sent (DELETE of each upstream session) may finish, briefly;
		 * the loop runs on until this timer closes, and mb_host_free comes after the loop */
		if (mb_host_http_live(L) > 0 && grace > 0) {
			h->http_wait_until = uv_now(h->deps.loop) +
					     (uint64_t)(grace < HTTP_WAIT_MAX_MS ? grace : HTTP_WAIT_MAX_MS);
			uv_timer_init(h->deps.loop, &h->http_wait);
			h->http_wait.data = h;
			uv_timer_start(&h->http_wait, http_wait_tick, HTTP_WAIT_TICK_MS, HTTP_WAIT_TICK_MS);
		} else {
			mb_host_http_close_all(L);
		}
	}
	mb_host_uv_close_all(L);
}

char *mb_host_metrics(mb_host *h)
{
	lua_State *L = h->L;
	if (!push_entry_fn(h, "metrics_text"))
		return NULL;
	if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
		mb_log(MB_LOG_ERROR, "host: metrics_text: %s", lua_tostring(L, -1));
		lua_pop(L, 1);
		return NULL;
	}
	size_t len;
	const char *text = lua_tolstring(L, -1, &len);
	char *out = text && len ? strndup(text, len) : NULL;
	lua_pop(L, 1);
	return out;
}

void mb_host_free(mb_host *h)
{
	if (!h)
		return;
	lua_close(h->L);
	if (mb_arena_delete(h->arena) != 0)
		mb_log(MB_LOG_ERROR, "host: blocks of the host state's arena outlived it");
	free(h);
}
