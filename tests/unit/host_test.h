/* host_test.h - the scaffold shared by the unit tests of the host's libuv modules (test_host_uv,
 * test_host_proc, test_host_http_client): one loop and one host-like Lua state per test file.
 *
 * loop, L: the loop and the state under test (main() initialises the loop and sets L).
 * host_test_state(open): a fresh state as the host makes it (standard libraries, no budget) with
 * a global table mb filled by open (mb_host_uv_open, mb_host_proc_open, mb_host_http_open).
 * lua(code): runs a chunk in L and gives its first result as text, or "ERR: ..." (unit_lua_eval
 * does the same in any state, into the caller's buffer).
 * run_for(ms): runs the loop for about ms milliseconds (a referenced timer of ours keeps it
 * running), then finishes the timer's close.
 * log_capture() / log_text(): read back what the code under test logged (mb_log writes stderr):
 * stderr goes into a temporary file until log_text restores it and returns what was written.
 * One capture at a time. */
#ifndef MB_UNIT_HOST_TEST_H
#define MB_UNIT_HOST_TEST_H

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <unistd.h>
#include <uv.h>

#include "budget.h"

static uv_loop_t loop;
static lua_State *L;
static char out[8192];
static char logbuf[65536];

typedef struct {
	FILE *file;
	int saved_stderr;
} unit_log;

static unit_log ulog;

static inline void log_capture(void)
{
	fflush(stderr);
	ulog.file = tmpfile();
	ulog.saved_stderr = dup(2);
	dup2(fileno(ulog.file), 2);
}

static inline const char *log_text(void)
{
	fflush(stderr);
	dup2(ulog.saved_stderr, 2);
	close(ulog.saved_stderr);
	rewind(ulog.file);
	size_t n = fread(logbuf, 1, sizeof logbuf - 1, ulog.file);
	logbuf[n] = 0;
	fclose(ulog.file);
	return logbuf;
}

static inline const char *unit_lua_eval(lua_State *s, const char *code, char *buf, size_t len)
{
	int top = lua_gettop(s);
	if (luaL_loadstring(s, code) != LUA_OK || lua_pcall(s, 0, 1, 0) != LUA_OK) {
		const char *m = lua_tostring(s, -1);
		snprintf(buf, len, "ERR: %s", m ? m : "(non-string error)");
	} else {
		snprintf(buf, len, "%s", luaL_tolstring(s, -1, NULL));
	}
	lua_settop(s, top);
	return buf;
}

static inline const char *lua(const char *code)
{
	return unit_lua_eval(L, code, out, sizeof out);
}

static inline void host_test_stop_loop(uv_timer_t *t)
{
	uv_stop(t->loop);
}

static inline void run_for(int ms)
{
	uv_timer_t t;
	uv_timer_init(&loop, &t);
	uv_timer_start(&t, host_test_stop_loop, (uint64_t)ms, 0);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&loop, UV_RUN_NOWAIT); /* finish the close */
}

static inline lua_State *host_test_state(void (*open)(lua_State *, uv_loop_t *))
{
	lua_State *s = luaL_newstate();
	*(mb_budget **)lua_getextraspace(s) = NULL;
	luaL_openlibs(s);
	lua_newtable(s);
	open(s, &loop);
	lua_setglobal(s, "mb");
	return s;
}

#endif
