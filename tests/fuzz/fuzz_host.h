/* fuzz_host.h - the trusted host, set up once per fuzz process for the targets whose boundary is
 * host Lua (catalog files, skills, the mcpServers block, upstream answers).
 *
 * Same pattern as fuzz_protocol.c: the real configuration (mb_config_load with flags), a real
 * store, workspaces and PII detector in a fresh data directory (/dev/shm/moonbox-fuzz-<name>-<pid>,
 * removed at exit), and mb_host_new with the embedded Lua. No pool: nothing here executes code.
 *
 * What it adds for the invariants:
 *  - fz_send (the host's io.send) checks that every message the host writes is exactly one line
 *    of valid JSON and aborts when it is a JSON-RPC "Internal error" (-32603: a Lua error escaped
 *    a handler); the last message is kept in fz.last.
 *  - mb.log is wrapped in Lua: an "internal error in ..." or an "upstream: ..." error (a Lua error
 *    caught by the dispatcher or by the gateway's coroutine runner) is recorded in FZ_BAD, and
 *    fz_check_bad() aborts with it. Nothing is printed unless FUZZ_VERBOSE is set.
 *  - Lua coverage: the host's Lua is not compiled with coverage instrumentation, so libFuzzer
 *    would see only the C it reaches. A line hook on the host state hashes (function, previous
 *    line, line) of the modules' code into libFuzzer's extra counters (the
 *    __libfuzzer_extra_counters section), so an input that takes a new path through the Lua
 *    modules counts as new coverage. Coroutines the host creates inherit the hook.
 *  - fz_lua(code) runs a chunk in the host state and returns its first result as text; a Lua
 *    error in the harness chunk itself aborts (the chunks call the real modules with pcall where
 *    an error is an allowed outcome).
 */
#ifndef MB_FUZZ_HOST_H
#define MB_FUZZ_HOST_H

#include <jansson.h>
#include <lauxlib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec.h"
#include "config.h"
#include "host.h"
#include "json.h"
#include "log.h"
#include "pii_config.h"
#include "store.h"
#include "workspace.h"

/* Lua source of upv(f, name): the upvalue called name of function f, or an error. The harness
 * chunks reach a module's local functions with it; put it into a chunk's text. */
#define FZ_LUA_UPV \
	"local function upv(f, name)\n" \
	"  for i = 1, 255 do\n" \
	"    local n, v = debug.getupvalue(f, i)\n" \
	"    if n == nil then break end\n" \
	"    if n == name then return v end\n" \
	"  end\n" \
	"  error('no upvalue ' .. name)\n" \
	"end\n"

#define FZ_FAIL(...) do { fprintf(stderr, "FUZZ INVARIANT: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static struct {
	mb_config cfg;
	mb_host *host;
	mb_store *store;
	mb_workspaces *ws;
	mb_pii_detector *pii;
	unsigned char key[MB_PII_KEY_BYTES];
	char dir[256];
	char last[65536];
	size_t last_len, sent;
} fz;

/* Lua line-edge coverage for libFuzzer (see above). */
__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t fz_lua_cov[1 << 16];

static uintptr_t fz_prev_line;

static void fz_lua_hook(lua_State *L, lua_Debug *ar)
{
	uintptr_t prev = fz_prev_line;
	/* modules only ("@file" or "=name" chunks): a chunk loaded from a string by the harness gets
	 * a new source string at every load, which would make the same path look new each time */
	if (!lua_getinfo(L, "S", ar) || (ar->source[0] != '@' && ar->source[0] != '='))
		return;
	uintptr_t here = ((uintptr_t)ar->source >> 4) * 0x9E3779B97F4A7C15ull + (uintptr_t)ar->currentline;
	uintptr_t h = (here ^ (prev >> 1)) * 0xff51afd7ed558ccdull;
	fz_prev_line = here;
	uint8_t *c = &fz_lua_cov[(h >> 40) & (sizeof fz_lua_cov - 1)];
	if (*c < 255)
		(*c)++;
}

static int fz_send(void *ud, uint64_t session, uint64_t exchange, int final, int status, char *data,
		       size_t len, char *why, size_t whylen)
{
	(void)ud;
	(void)why;
	(void)whylen;
	(void)status;
	(void)session;
	(void)exchange;
	(void)final;
	if (len == 0 || data[len - 1] != '\n' || memchr(data, '\n', len - 1))
		FZ_FAIL("a host message is not exactly one line: %.*s", (int)(len > 300 ? 300 : len), data);
	json_error_t e;
	json_t *v = json_loadb(data, len - 1, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!v)
		FZ_FAIL("the host wrote invalid JSON (%s): %.*s", e.text, (int)(len > 300 ? 300 : len), data);
	json_t *err = json_is_object(v) ? json_object_get(v, "error") : NULL;
	json_t *code = err ? json_object_get(err, "code") : NULL;
	if (code && json_integer_value(code) == -32603)
		FZ_FAIL("internal error answered: %.*s", (int)(len > 2000 ? 2000 : len), data);
	json_decref(v);
	size_t n = len - 1 < sizeof fz.last - 1 ? len - 1 : sizeof fz.last - 1;
	memcpy(fz.last, data, n);
	fz.last[n] = 0;
	fz.last_len = n;
	fz.sent++;
	free(data);
	return 0;
}

static void fz_cleanup(void)
{
	if (fz.dir[0] && strncmp(fz.dir, "/dev/shm/moonbox-fuzz-", 22) == 0) {
		char cmd[400];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", fz.dir);
	}
}

/* Call at the start of every input: the coverage edges of one input do not depend on where the
 * previous one ended. */
static inline void fz_begin(void)
{
	fz_prev_line = 0;
}

/* Runs code in the host state; returns its first result as text (static buffer). */
static inline const char *fz_lua(const char *code)
{
	static char out[8192];
	lua_State *L = mb_host_state(fz.host);
	int top = lua_gettop(L);
	if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
		FZ_FAIL("harness chunk failed: %s\n%s", lua_tostring(L, -1), code);
	size_t n;
	const char *s = luaL_tolstring(L, -1, &n);
	if (n >= sizeof out)
		n = sizeof out - 1;
	memcpy(out, s, n);
	out[n] = 0;
	lua_settop(L, top);
	return out;
}

static inline void fz_check_bad(const char *what)
{
	lua_State *L = mb_host_state(fz.host);
	lua_getglobal(L, "FZ_BAD");
	if (lua_isstring(L, -1))
		FZ_FAIL("%s: %s", what, lua_tostring(L, -1));
	lua_pop(L, 1);
}

/* Starts the host once. extra: more "--flag", "value" pairs (NULL-terminated list, may be NULL). */
static void fz_host_start(const char *name, char **extra)
{
	snprintf(fz.dir, sizeof fz.dir, "/dev/shm/moonbox-fuzz-%s-%d", name, (int)getpid());
	mkdir(fz.dir, 0700);
	atexit(fz_cleanup);
	char skills[300], catalog[300];
	snprintf(skills, sizeof skills, "%s/skills", fz.dir);
	snprintf(catalog, sizeof catalog, "%s/catalog", fz.dir);
	mkdir(skills, 0700);
	mkdir(catalog, 0700);
	char *args[64] = { "fuzz", "--data-dir", fz.dir, "--skills-dir", skills, "--catalog-dir", catalog,
			   "--log-level", getenv("FUZZ_VERBOSE") ? "debug" : "critical" };
	int argc = 9;
	for (int i = 0; extra && extra[i] && argc < 62; i++)
		args[argc++] = extra[i];
	args[argc] = NULL;
	if (mb_config_load(&fz.cfg, argc, args) != 0)
		FZ_FAIL("configuration refused");
	mb_log_set_level(fz.cfg.log_level);
	mb_json_global_init();
	mb_codec_init();
	char err[512], path[400];
	snprintf(path, sizeof path, "%s/moonbox.db", fz.dir);
	if (mb_store_open(&fz.store, path, 1000, err, sizeof err) != 0)
		FZ_FAIL("store: %s", err);
	snprintf(path, sizeof path, "%s/workspaces", fz.dir);
	mb_workspace_limits wl = { 1 << 20, 1 << 24, 1000 };
	if (!(fz.ws = mb_workspaces_new(path, &wl, err, sizeof err)))
		FZ_FAIL("workspaces: %s", err);
	if (mb_pii_from_config(&fz.cfg, &fz.pii, fz.key, err, sizeof err) != 0)
		FZ_FAIL("pii: %s", err);
	mb_host_io io = { fz_send, NULL, NULL };
	mb_host_deps deps = { uv_default_loop(), fz.store, fz.ws, fz.pii, fz.key };
	if (!(fz.host = mb_host_new(&fz.cfg, &io, &deps)))
		FZ_FAIL("host did not start");
	if (!getenv("FUZZ_NO_LUA_COVERAGE"))
		lua_sethook(mb_host_state(fz.host), fz_lua_hook, LUA_MASKLINE, 0);
	fz_lua("local real = mb.log\n"
	       "local verbose = os.getenv('FUZZ_VERBOSE')\n"
	       "mb.log = function(level, msg, ...)\n"
	       "  if level == 'error' and type(msg) == 'string' and\n"
	       "     (msg:find('^internal error in') or msg:find('^upstream: ')) then\n"
	       "    FZ_BAD = FZ_BAD or msg\n"
	       "  end\n"
	       "  if verbose then return real(level, msg, ...) end\n"
	       "end\n"
	       "return true");
}

/* Sends one JSON-RPC line through the host as stdio does. */
static inline void fz_line(const char *line)
{
	mb_host_handle_line(fz.host, line, strlen(line));
}

#endif
