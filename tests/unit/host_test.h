/* host_test.h - helpers shared by the unit tests of the host's libuv modules (test_host_uv,
 * test_host_proc, test_host_http_client).
 *
 * unit_log_start / unit_log_text: read back what the code under test logged (mb_log writes
 * stderr): stderr goes into a temporary file until unit_log_text restores it and returns what
 * was written (cut to the caller's buffer). One capture at a time per test file.
 * unit_lua_eval: runs a chunk in a Lua state and gives its first result as text, or "ERR: ..". */
#ifndef MB_UNIT_HOST_TEST_H
#define MB_UNIT_HOST_TEST_H

#include <lauxlib.h>
#include <stdio.h>
#include <unistd.h>

typedef struct {
	FILE *file;
	int saved_stderr;
} unit_log;

static inline void unit_log_start(unit_log *lg)
{
	fflush(stderr);
	lg->file = tmpfile();
	lg->saved_stderr = dup(2);
	dup2(fileno(lg->file), 2);
}

static inline const char *unit_log_text(unit_log *lg, char *buf, size_t cap)
{
	fflush(stderr);
	dup2(lg->saved_stderr, 2);
	close(lg->saved_stderr);
	rewind(lg->file);
	size_t n = fread(buf, 1, cap - 1, lg->file);
	buf[n] = 0;
	fclose(lg->file);
	return buf;
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

#endif
