/* sandbox_workspace.c - the tenant's workspace as sandbox code sees it.
 *
 * Adds read_file, write_file, list_files, delete_file and file_exists to the sandbox globals, and
 * read_file / write_file to the `json` table. Each function looks up the running execution's
 * workspace when it is called, because the environment is built before any request exists: the
 * tenant's mb_workspace (req->workspace, on a worker thread) through the direct port below, or
 * the port a worker process passes (req->ws_port: the same operations over its channel,
 * worker_proc.c); with neither it raises "the workspace is not available here". All path rules, confinement and quotas live in workspace.c; this file only
 * moves bytes between it and Lua without letting sandbox code escape its memory budget:
 *   - a file is read into a buffer from mb_budget_malloc (charged to the execution, and bounded
 *     by workspace_max_file_bytes), then copied into a Lua string inside a protected call, so a
 *     memory error while making the string frees the buffer before the budget's sticky error
 *     is raised;
 *   - lists are pushed the same way; json.write_file encodes with the sandbox's JSON limits and
 *     workspace_max_file_bytes as the output cap.
 * Missing files are ordinary answers (nil plus a message, false, an empty list); every other
 * failure is a Lua error carrying workspace.c's message, which names the path and the limit.
 */
#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "json.h"
#include "log.h"
#include "sandbox_int.h"
#include "workspace.h"
#include "workspace_push.h"

/* ---- the direct port: workspace.h on the tenant's workspace ---- */

static int direct_read(void *ud, const char *path, size_t plen, char **data, size_t *n, char *err,
		       size_t errlen)
{
	return mb_workspace_read_with(ud, path, plen, mb_budget_malloc, mb_budget_free, data, n, err,
				      errlen);
}

static int direct_write(void *ud, const char *path, size_t plen, const void *data, size_t n,
			char *err, size_t errlen)
{
	return mb_workspace_write(ud, path, plen, data, n, err, errlen);
}

static int direct_list(void *ud, const char *dir, size_t dlen, mb_workspace_entry **e, size_t *n,
		       char *err, size_t errlen)
{
	return mb_workspace_list(ud, dir, dlen, e, n, err, errlen);
}

static int direct_delete(void *ud, const char *path, size_t plen, char *err, size_t errlen)
{
	return mb_workspace_delete(ud, path, plen, err, errlen);
}

static int direct_stat(void *ud, const char *path, size_t plen, mb_workspace_info *info, char *err,
		       size_t errlen)
{
	return mb_workspace_stat(ud, path, plen, info, err, errlen);
}

static const mb_ws_port direct = {direct_read, direct_write, direct_list, direct_delete,
				  direct_stat};

typedef struct {
	const mb_ws_port *port;
	void *ud;
	int64_t max_file_bytes;
} ws_ref;

static ws_ref need_ws(lua_State *L, const char *fn)
{
	mb_budget_poll(L);
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	const mb_exec_request *req = c ? c->req : NULL;
	if (req && req->workspace)
		return (ws_ref){&direct, req->workspace,
				mb_workspace_limits_of(req->workspace)->max_file_bytes};
	if (req && req->ws_port)
		return (ws_ref){req->ws_port, req->ws_ud, req->ws_max_file_bytes};
	luaL_error(L, "%s: the workspace is not available here", fn);
	return (ws_ref){0};
}

/* Raises err (already "op path: reason"), or the budget's sticky error when a limit tripped. */
static int raise_msg(lua_State *L, const char *err)
{
	mb_budget_poll(L);
	return luaL_error(L, "%s", err);
}

/* After a failed protected push: the budget's error when it tripped, else the error itself. */
static int rethrow(lua_State *L)
{
	mb_budget_poll(L);
	return lua_error(L);
}


/* Reads path into a budget-charged buffer. Returns 0 (free *data with mb_budget_free), 1 after
 * pushing nil and the message (no such file), or raises. */
static int read_bytes(lua_State *L, ws_ref ws, const char *path, size_t plen, char **data,
		      size_t *n)
{
	char err[MB_ERR_MAX];
	int rc = ws.port->read(ws.ud, path, plen, data, n, err, sizeof err);
	if (rc == -ENOENT) {
		luaL_pushfail(L);
		lua_pushstring(L, err);
		return 1;
	}
	if (rc)
		raise_msg(L, err);
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	mb_io_add(c ? c->io : NULL, MB_IO_WORKSPACE, *data, *n); /* context saved (tokest.h) */
	if (c)
		mb_sandbox_seen_add(&c->pii_seen, *data, *n); /* the tokens in it (sandbox_seen.c) */
	return 0;
}

/* read_file(path) -> string | nil, message */
static int sb_read_file(lua_State *L)
{
	ws_ref ws = need_ws(L, "read_file");
	size_t plen, n;
	const char *path = luaL_checklstring(L, 1, &plen);
	char *data;
	if (read_bytes(L, ws, path, plen, &data, &n))
		return 2;
	mb_ws_bytes b = { data, n };
	int status = mb_ws_pcall1(L, mb_ws_push_bytes, &b);
	mb_budget_free(data);
	if (status != LUA_OK)
		return rethrow(L);
	return 1;
}

/* write_file(path, data) -> true */
static int sb_write_file(lua_State *L)
{
	ws_ref ws = need_ws(L, "write_file");
	size_t plen, n;
	const char *path = luaL_checklstring(L, 1, &plen);
	luaL_argexpected(L, lua_type(L, 2) == LUA_TSTRING, 2, "string");
	const char *data = lua_tolstring(L, 2, &n);
	char err[MB_ERR_MAX];
	if (ws.port->write(ws.ud, path, plen, data, n, err, sizeof err) != 0)
		return raise_msg(L, err);
	mb_budget_poll(L);
	lua_pushboolean(L, 1);
	return 1;
}

/* list_files(dir?) -> { {path=, size=, modified=}, ... } sorted by path */
static int sb_list_files(lua_State *L)
{
	ws_ref ws = need_ws(L, "list_files");
	size_t dlen = 0;
	const char *dir = luaL_optlstring(L, 1, NULL, &dlen);
	char err[MB_ERR_MAX];
	mb_ws_entries es = { NULL, 0 };
	int rc = ws.port->list(ws.ud, dir, dlen, &es.e, &es.n, err, sizeof err);
	if (rc && rc != -ENOENT)
		return raise_msg(L, err);
	int status = mb_ws_pcall1(L, mb_ws_push_entries, &es);
	mb_workspace_entries_free(es.e, es.n);
	if (status != LUA_OK)
		return rethrow(L);
	return 1;
}

/* delete_file(path) -> true when deleted, false when there was no such file */
static int sb_delete_file(lua_State *L)
{
	ws_ref ws = need_ws(L, "delete_file");
	size_t plen;
	const char *path = luaL_checklstring(L, 1, &plen);
	char err[MB_ERR_MAX];
	int rc = ws.port->del(ws.ud, path, plen, err, sizeof err);
	if (rc && rc != -ENOENT)
		return raise_msg(L, err);
	lua_pushboolean(L, rc == 0);
	return 1;
}

/* file_exists(path) -> true for a regular file, false when missing or a directory */
static int sb_file_exists(lua_State *L)
{
	ws_ref ws = need_ws(L, "file_exists");
	size_t plen;
	const char *path = luaL_checklstring(L, 1, &plen);
	char err[MB_ERR_MAX];
	mb_workspace_info info;
	int rc = ws.port->stat(ws.ud, path, plen, &info, err, sizeof err);
	if (rc && rc != -ENOENT && rc != -ENOTDIR)
		return raise_msg(L, err);
	lua_pushboolean(L, rc == 0 && !info.is_dir);
	return 1;
}

/* json.read_file(path) -> value | nil, message */
static int sb_json_read_file(lua_State *L)
{
	ws_ref ws = need_ws(L, "json.read_file");
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	size_t plen, n;
	const char *path = luaL_checklstring(L, 1, &plen);
	char *data;
	if (read_bytes(L, ws, path, plen, &data, &n))
		return 2;
	mb_json_limits lim = c->json_lim;
	lim.max_input_bytes = (size_t)ws.max_file_bytes;
	lim.input_limit_name = "workspace_max_file_bytes";
	char jerr[MB_ERR_MAX];
	int rc = mb_json_decode(L, data, n, &lim, jerr, sizeof jerr);
	mb_budget_free(data);
	if (rc != 0) {
		mb_budget_poll(L);
		return luaL_error(L, "json.read_file %s: %s", path, jerr);
	}
	return 1;
}

/* Pretty-prints compact JSON text (as made by mb_json_encode: no whitespace outside strings)
 * with two-space indentation and a final newline. With out NULL only counts. */
static size_t pretty(const char *s, size_t n, char *out)
{
	size_t o = 0;
	int depth = 0, in_str = 0;
#define PUT(c_) do { if (out) out[o] = (c_); o++; } while (0) /* c_ has no side effects */
#define NEWLINE(d) do { PUT('\n'); for (int k_ = 0; k_ < 2 * (d); k_++) PUT(' '); } while (0)
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (in_str) {
			PUT(ch);
			if (ch == '\\' && i + 1 < n) {
				i++;
				PUT(s[i]);
			}
			else if (ch == '"')
				in_str = 0;
			continue;
		}
		switch (ch) {
		case '"':
			in_str = 1;
			PUT(ch);
			break;
		case '{':
		case '[':
			PUT(ch);
			if (i + 1 < n && (s[i + 1] == '}' || s[i + 1] == ']')) {
				i++;
				PUT(s[i]);
				break;
			}
			depth++;
			NEWLINE(depth);
			break;
		case '}':
		case ']':
			depth--;
			NEWLINE(depth);
			PUT(ch);
			break;
		case ',':
			PUT(ch);
			NEWLINE(depth);
			break;
		case ':':
			PUT(ch);
			PUT(' ');
			break;
		default:
			PUT(ch);
		}
	}
	PUT('\n');
#undef PUT
#undef NEWLINE
	return o;
}

/* json.write_file(path, value[, pretty]) -> true */
static int sb_json_write_file(lua_State *L)
{
	ws_ref ws = need_ws(L, "json.write_file");
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	size_t plen, len;
	const char *path = luaL_checklstring(L, 1, &plen);
	luaL_checkany(L, 2);
	int want_pretty = lua_toboolean(L, 3);
	int64_t max = ws.max_file_bytes;
	mb_json_limits lim = c->json_lim;
	lim.max_output_bytes = (size_t)max;
	lim.output_limit_name = "workspace_max_file_bytes";
	char jerr[MB_ERR_MAX];
	char *j = mb_json_encode(L, 2, &lim, 0, &len, jerr, sizeof jerr);
	if (!j) {
		mb_budget_poll(L);
		return luaL_error(L, "json.write_file: %s", jerr);
	}
	if (want_pretty) {
		size_t plen2 = pretty(j, len, NULL);
		if (plen2 > (uint64_t)max) {
			free(j);
			return luaL_error(L, "json.write_file: the pretty-printed JSON is %I bytes, above "
					  "workspace_max_file_bytes=%I", (lua_Integer)plen2, (lua_Integer)max);
		}
		char *p = malloc(plen2);
		if (!p) {
			free(j);
			return luaL_error(L, "json.write_file: out of memory");
		}
		pretty(j, len, p);
		free(j);
		j = p;
		len = plen2;
	}
	char err[MB_ERR_MAX];
	int rc = ws.port->write(ws.ud, path, plen, j, len, err, sizeof err);
	free(j);
	if (rc)
		return raise_msg(L, err);
	lua_pushboolean(L, 1);
	return 1;
}

int mb_sandbox_ws_open(lua_State *L)
{
	static const luaL_Reg globals[] = {
		{ "read_file", sb_read_file },     { "write_file", sb_write_file },
		{ "list_files", sb_list_files },   { "delete_file", sb_delete_file },
		{ "file_exists", sb_file_exists }, { NULL, NULL },
	};
	luaL_setfuncs(L, globals, 0);
	return 0;
}

int mb_sandbox_ws_json(lua_State *L)
{
	lua_pushcfunction(L, sb_json_read_file);
	lua_setfield(L, -2, "read_file");
	lua_pushcfunction(L, sb_json_write_file);
	lua_setfield(L, -2, "write_file");
	return 0;
}
