/* test_host_uv.c - mb.timer and mb.watch on a real libuv loop with a real Lua state: one-shot
 * firing and its order, stop, handles that do not keep the loop alive, a dropped timer still
 * firing, inotify events in a temporary directory, closing a watcher (also from its own
 * callback, by garbage collection and as a to-be-closed variable), errors in callbacks logged
 * without harm, uv errors returned as nil + message, and shutdown: close_all or lua_close first,
 * then the loop closes cleanly (every handle freed; ASan checks the memory). */
#include <fcntl.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host_uv.h"
#include "host_test.h"
#include "unit.h"

static char tmpdir[64];

static lua_State *new_state(void)
{
	return host_test_state(mb_host_uv_open);
}

static void touch(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd >= 0) {
		if (write(fd, "x", 1) != 1)
			perror("write");
		close(fd);
	}
}

TEST(timer_fires_once_and_does_not_hold_the_loop)
{
	CHECK_STR(lua("fired = 0 t = mb.timer(20, function() fired = fired + 1 end) return fired"), "0");
	CHECK(mb_host_uv_live(L) == 1);
	/* unreferenced: a loop with only our handles returns at once */
	CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
	CHECK_STR(lua("return fired"), "0");
	run_for(80);
	CHECK_STR(lua("return fired"), "1");
	run_for(50);
	CHECK_STR(lua("return fired"), "1");
	CHECK(mb_host_uv_live(L) == 0);
	CHECK_STR(lua("return t:stop()"), "false"); /* already fired */
	CHECK_STR(lua("return tostring(t)"), "timer (closed)");
	CHECK(lua_gettop(L) == 0);
}

TEST(timer_order_zero_and_fractions)
{
	CHECK_STR(lua("order = {} mb.timer(30, function() order[#order + 1] = 'c' end)"
		      " mb.timer(0.2, function() order[#order + 1] = 'b' end)"
		      " mb.timer(0, function() order[#order + 1] = 'a' end) return #order"), "0");
	run_for(80);
	CHECK_STR(lua("return table.concat(order)"), "abc");
}

TEST(timer_stop_prevents_firing)
{
	CHECK_STR(lua("fired = 0 t = mb.timer(20, function() fired = fired + 1 end)"
		      " return tostring(t) .. ' ' .. tostring(t:stop()) .. ' ' .. tostring(t:stop())"),
		  "timer (pending) true false");
	CHECK(mb_host_uv_live(L) == 0);
	run_for(60);
	CHECK_STR(lua("return fired"), "0");
	CHECK_STR(lua("t = mb.timer(20, function() fired = fired + 1 end) t:close() return fired"), "0");
	run_for(50);
	CHECK_STR(lua("return fired"), "0");
}

TEST(dropped_timer_still_fires)
{
	CHECK_STR(lua("fired = 0 mb.timer(20, function() fired = fired + 1 end)"
		      " collectgarbage() collectgarbage() return fired"), "0");
	CHECK(mb_host_uv_live(L) == 1);
	run_for(70);
	CHECK_STR(lua("return fired"), "1");
	/* after firing it is released: its function can be collected */
	CHECK_STR(lua("weak = setmetatable({}, {__mode = 'k'})"
		      " do local f = function() end weak[f] = true mb.timer(0, f) end"
		      " collectgarbage() collectgarbage() return tostring(next(weak) ~= nil)"), "true");
	run_for(20);
	CHECK_STR(lua("collectgarbage() collectgarbage() return tostring(next(weak))"), "nil");
	CHECK_STR(lua("local weak = setmetatable({}, {__mode = 'k'})"
		      " do local f = function() end weak[f] = true local t = mb.timer(10000, f) t:stop() end"
		      " collectgarbage() collectgarbage() return tostring(next(weak))"), "nil");
}

TEST(timer_callback_reentrancy)
{
	/* a callback stops itself (already done), starts a new timer and stops another */
	CHECK_STR(lua("log = {}\n"
		      "other = mb.timer(40, function() log[#log + 1] = 'other' end)\n"
		      "self = mb.timer(10, function()\n"
		      "  log[#log + 1] = 'self:' .. tostring(self:stop())\n"
		      "  log[#log + 1] = 'other:' .. tostring(other:stop())\n"
		      "  mb.timer(10, function() log[#log + 1] = 'next' end)\n"
		      "end) return #log"), "0");
	run_for(80);
	CHECK_STR(lua("return table.concat(log, ',')"), "self:false,other:true,next");
	CHECK(mb_host_uv_live(L) == 0);
}

TEST(timer_bad_arguments)
{
	CHECK_STR(lua("return mb.timer(-1, print)"),
		  "ERR: [string \"return mb.timer(-1, print)\"]:1: bad argument #1 to 'timer' "
		  "(expected milliseconds between 0 and 2^53)");
	CHECK(strstr(lua("return mb.timer(0/0, print)"), "bad argument #1 to 'timer'") != NULL);
	CHECK(strstr(lua("return mb.timer(2^60, print)"), "bad argument #1 to 'timer'") != NULL);
	CHECK(strstr(lua("return mb.timer('x', print)"), "bad argument #1 to 'timer' (number expected, "
		     "got string)") != NULL);
	CHECK(strstr(lua("return mb.timer(10, 5)"), "bad argument #2 to 'timer' (function expected, "
		     "got number)") != NULL);
	CHECK(strstr(lua("return mb.timer(10)"), "bad argument #2 to 'timer' (function expected, "
		     "got no value)") != NULL);
	CHECK(mb_host_uv_live(L) == 0);
	/* the methods refuse other objects; the metatable is protected */
	CHECK(strstr(lua("local t = mb.timer(1000, print) local ok, e = pcall(t.stop, {}) t:stop()"
			 " error(e, 0)"), "timer or watch handle expected") != NULL);
	CHECK_STR(lua("local t = mb.timer(1000, print) t:stop() return getmetatable(t)"), "mb.handle");
}

TEST(callback_errors_are_logged)
{
	log_capture();
	lua("after = 0 mb.timer(0, function() error('boom') end)"
	    " mb.timer(0, function() error({}) end)"
	    " mb.timer(10, function() after = after + 1 end)");
	run_for(50);
	const char *log = log_text();
	CHECK(strstr(log, "moonbox: error: timer callback: [string \"after = 0 mb.timer(0, "
		     "function() error('boom'...\"]:1: boom\nstack traceback:\n\t[C]: in function 'error'") != NULL);
	CHECK(strstr(log, "moonbox: error: timer callback: (error object is a table value)") != NULL);
	CHECK_STR(lua("return after"), "1");
	CHECK(lua_gettop(L) == 0);
}

TEST(watch_reports_changes)
{
	char code[1024];
	snprintf(code, sizeof code, "events = {} w = mb.watch('%s', function(name, ev)"
		 " events[#events + 1] = tostring(name) .. ':' .. ev end) return tostring(w)", tmpdir);
	char want[512];
	snprintf(want, sizeof want, "watch %s", tmpdir);
	CHECK_STR(lua(code), want);
	CHECK(mb_host_uv_live(L) == 1);
	touch("a.txt");
	run_for(100);
	const char *ev = lua("return table.concat(events, ' ')");
	CHECK(strstr(ev, "a.txt:rename") != NULL);
	CHECK(strstr(ev, "a.txt:change") != NULL);
	if (!strstr(ev, "a.txt:rename"))
		fprintf(stderr, "  events: %s\n", ev);
	/* modification of an existing file */
	lua("events = {}");
	touch("a.txt");
	run_for(100);
	CHECK(strstr(lua("return table.concat(events, ' ')"), "a.txt:change") != NULL);
	/* closed: no more events, and closing again says so */
	CHECK_STR(lua("events = {} return tostring(w:close()) .. tostring(w:close()) .. tostring(w)"),
		  "truefalsewatch (closed)");
	CHECK(mb_host_uv_live(L) == 0);
	touch("b.txt");
	run_for(60);
	CHECK_STR(lua("return #events"), "0");
	CHECK(lua_gettop(L) == 0);
}

TEST(watch_errors)
{
	char code[1024], want[1024];
	snprintf(code, sizeof code, "local w, e = mb.watch('%s/missing', print) return tostring(w) .. "
		 "' ' .. e", tmpdir);
	snprintf(want, sizeof want, "nil watch %s/missing: no such file or directory", tmpdir);
	CHECK_STR(lua(code), want);
	CHECK(mb_host_uv_live(L) == 0);
	CHECK(strstr(lua("return mb.watch('', print)"), "bad argument #1 to 'watch' (expected a "
		     "directory path)") != NULL);
	CHECK(strstr(lua("return mb.watch('/tmp\\0x', print)"), "bad argument #1 to 'watch'") != NULL);
	CHECK(strstr(lua("return mb.watch('/tmp')"), "bad argument #2 to 'watch' (function expected, "
		     "got no value)") != NULL);
	CHECK(strstr(lua("return mb.watch({}, print)"), "bad argument #1 to 'watch' (string expected, "
		     "got table)") != NULL);
	CHECK(mb_host_uv_live(L) == 0);
}

TEST(watch_callback_error_and_self_close)
{
	char code[1024];
	/* an error is logged and the watcher keeps working */
	snprintf(code, sizeof code, "n = 0 w = mb.watch('%s', function(name)"
		 " n = n + 1 if name == 'bad.txt' then error('watch boom') end end)", tmpdir);
	log_capture();
	lua(code);
	touch("bad.txt");
	run_for(80);
	touch("good.txt");
	run_for(80);
	const char *log = log_text();
	char want[512];
	snprintf(want, sizeof want, "moonbox: error: watch %s callback: ", tmpdir);
	CHECK(strstr(log, want) != NULL);
	CHECK(strstr(log, "watch boom") != NULL);
	CHECK(strstr(lua("return n"), "ERR") == NULL && atoi(out) >= 2);
	lua("w:close()");
	/* a watcher that closes itself in its callback gets exactly one call, even when several
	 * events arrive in one read */
	snprintf(code, sizeof code, "calls = 0 w = mb.watch('%s', function()"
		 " calls = calls + 1 w:close() end)", tmpdir);
	lua(code);
	touch("c1.txt");
	touch("c2.txt");
	touch("c3.txt");
	run_for(80);
	CHECK_STR(lua("return calls"), "1");
	CHECK(mb_host_uv_live(L) == 0);
}

TEST(watch_gc_and_close_variable)
{
	char code[1024];
	/* dropped without :close(): collected, closed, and a warning says so */
	snprintf(code, sizeof code, "mb.watch('%s', function() end) collectgarbage() collectgarbage()",
		 tmpdir);
	log_capture();
	lua(code);
	const char *log = log_text();
	char want[512];
	snprintf(want, sizeof want, "moonbox: warning: watch %s: handle garbage-collected without "
		 ":close(); the watcher is closed", tmpdir);
	CHECK(strstr(log, want) != NULL);
	CHECK(mb_host_uv_live(L) == 0);
	run_for(10);
	/* a to-be-closed variable closes at the end of its scope */
	snprintf(code, sizeof code, "do local w <close> = mb.watch('%s', print) end return 1", tmpdir);
	CHECK_STR(lua(code), "1");
	CHECK(mb_host_uv_live(L) == 0);
}

TEST(close_all_then_lua_close)
{
	lua_State *s = new_state();
	lua_State *keep = L;
	L = s;
	char code[1024];
	snprintf(code, sizeof code, "fired = 0 local f = function() fired = fired + 1 end"
		 " t1 = mb.timer(10, f) mb.timer(20, f) mb.timer(100000, f)"
		 " w1 = mb.watch('%s', f) w2 = mb.watch('%s', f) return 1", tmpdir, tmpdir);
	CHECK_STR(lua(code), "1");
	CHECK(mb_host_uv_live(s) == 5);
	mb_host_uv_close_all(s);
	CHECK(mb_host_uv_live(s) == 0);
	CHECK_STR(lua("return tostring(t1:stop()) .. tostring(w1:close())"), "falsefalse");
	touch("after_close_all.txt");
	run_for(50);
	CHECK_STR(lua("return fired"), "0");
	/* still usable afterwards */
	CHECK_STR(lua("mb.timer(0, function() fired = 10 end) return 1"), "1");
	run_for(20);
	CHECK_STR(lua("return fired"), "10");
	mb_host_uv_close_all(s);
	lua_close(s);
	L = keep;
	uv_run(&loop, UV_RUN_NOWAIT);
	/* a state that is closed with live handles, close_all never called */
	s = new_state();
	L = s;
	snprintf(code, sizeof code, "mb.timer(1000, print) w = mb.watch('%s', print) return 1", tmpdir);
	CHECK_STR(lua(code), "1");
	CHECK(mb_host_uv_live(s) == 2);
	log_capture();
	lua_close(s);
	log_text();
	L = keep;
	uv_run(&loop, UV_RUN_NOWAIT);
	/* close_all on a state that never had the bindings does nothing */
	s = luaL_newstate();
	mb_host_uv_close_all(s);
	CHECK(mb_host_uv_live(s) == 0);
	lua_close(s);
}

/* Shutdown as the server does it: close_all, let the loop free the handles, close the state;
 * then the loop must close with nothing left (every uv handle was closed and freed). */
TEST(shutdown_loop_closes_cleanly)
{
	CHECK_STR(lua("mb.timer(100000, print) keep = mb.watch('/tmp', print) return 1"), "1");
	mb_host_uv_close_all(L);
	CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
	lua_close(L);
	L = NULL;
	CHECK(uv_loop_close(&loop) == 0);
}

int main(void)
{
	if (unit_tmpdir(tmpdir, sizeof tmpdir, "/tmp/mb-uv-XXXXXX") != 0)
		return 1;
	uv_loop_init(&loop);
	L = new_state();
	RUN(timer_fires_once_and_does_not_hold_the_loop);
	RUN(timer_order_zero_and_fractions);
	RUN(timer_stop_prevents_firing);
	RUN(dropped_timer_still_fires);
	RUN(timer_callback_reentrancy);
	RUN(timer_bad_arguments);
	RUN(callback_errors_are_logged);
	RUN(watch_reports_changes);
	RUN(watch_errors);
	RUN(watch_callback_error_and_self_close);
	RUN(watch_gc_and_close_variable);
	RUN(close_all_then_lua_close);
	RUN(shutdown_loop_closes_cleanly);
	unit_rmtree(tmpdir);
	return UNIT_END();
}
