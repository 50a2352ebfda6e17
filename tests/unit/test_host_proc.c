/* test_host_proc.c - mb.spawn on a real libuv loop with a real host-like Lua state and real
 * processes: line splitting through /bin/cat (many lines, a 1 MB line, lines split across
 * writes, "\r\n"), the max_line_bytes drop notice, stderr lines and the 4096-byte cut, exit
 * status and signals, on_exit after the last (unterminated) line, a grandchild holding the pipes,
 * a replaced environment, cwd, spawn failures (missing command, not executable, bad cwd), every
 * argument error, writes after exit / after close_stdin / into a broken pipe, queued bytes,
 * close(grace) of a child that ignores SIGTERM, shutdown with live children, garbage collection
 * and lua_close of running children, erroring callbacks, callbacks that close their own process
 * or spawn another, descriptor inheritance; at the end the loop must close with nothing left
 * (ASan/valgrind check the memory). */
#include <fcntl.h>
#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host_proc.h"
#include "host_test.h"
#include "unit.h"

static char tmpdir[64];

/* ---- running the loop ------------------------------------------------------------------------ */

static const char *wait_code;
static int (*wait_fn)(void);
static int wait_ok;

static void on_tick(uv_timer_t *t)
{
	char buf[256];
	int ok = wait_fn ? wait_fn() : strcmp(unit_lua_eval(L, wait_code, buf, sizeof buf), "true") == 0;
	if (ok) {
		wait_ok = 1;
		uv_stop(t->loop);
	}
}

static void on_deadline(uv_timer_t *t)
{
	uv_stop(t->loop);
}

/* Runs the loop until the Lua chunk code (or fn) returns true, at most ms milliseconds; returns
 * whether it did. With neither, just runs for ms. */
static int wait_until(const char *code, int (*fn)(void), int ms)
{
	uv_timer_t tick, deadline;
	wait_code = code;
	wait_fn = fn;
	wait_ok = 0;
	uv_timer_init(&loop, &deadline);
	uv_timer_start(&deadline, on_deadline, (uint64_t)ms, 0);
	if (code || fn) {
		uv_timer_init(&loop, &tick);
		uv_timer_start(&tick, on_tick, 0, 2);
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	if (code || fn)
		uv_close((uv_handle_t *)&tick, NULL);
	uv_close((uv_handle_t *)&deadline, NULL);
	uv_run(&loop, UV_RUN_NOWAIT); /* finish the closes */
	return wait_ok;
}

static int wait_lua(const char *code, int ms)
{
	return wait_until(code, NULL, ms);
}

static int no_live(void)
{
	return mb_host_proc_live(L) == 0;
}

/* uv_run until it returns by itself (an unreferenced 5 s guard stops a hang); returns the ms it
 * took and checks that nothing referenced is left. */
static uint64_t run_to_end(void)
{
	uv_timer_t guard;
	uv_timer_init(&loop, &guard);
	uv_timer_start(&guard, on_deadline, 5000, 0);
	uv_unref((uv_handle_t *)&guard);
	uint64_t t0 = uv_hrtime();
	int alive = uv_run(&loop, UV_RUN_DEFAULT);
	uint64_t ms = (uv_hrtime() - t0) / 1000000;
	CHECK(alive == 0);
	uv_close((uv_handle_t *)&guard, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
	return ms;
}

static lua_State *new_state(void)
{
	lua_State *s = host_test_state(mb_host_proc_open);
	char buf[256];
	/* rec(t): an on_line that records lines, and "ERR:<message>" for drop notices */
	unit_lua_eval(s, "function rec(t) return function(line, err) t[#t + 1] = line or ('ERR:' .. err)"
		  " end end\n"
		  /* pair(...): the values as strings, space-separated (nil included) */
		  "function pair(...) local t = table.pack(...) for i = 1, t.n do t[i] = tostring(t[i])"
		  " end return table.concat(t, ' ') end\n"
		  /* err_of(f): the error f raises, without the position prefix */
		  "function err_of(f) local ok, e = pcall(f) if ok then return 'no error' end"
		  " return (tostring(e):gsub('^%[string \".-\"%]:%d+: ', '')) end", buf, sizeof buf);
	return s;
}

/* ---- tests -------------------------------------------------------------------------------------- */

TEST(cat_echoes_many_lines)
{
	CHECK_STR(lua("lines = {} done = nil\n"
		      "p = mb.spawn{ command = 'cat', on_line = rec(lines),\n"
		      "  on_exit = function(st, sig) done = { st, sig, #lines } end }\n"
		      "for i = 1, 2000 do assert(p:write('line ' .. i .. '\\n')) end\n"
		      "local chunk = {} for i = 2001, 5000 do chunk[#chunk + 1] = 'line ' .. i end\n"
		      "assert(p:write(table.concat(chunk, '\\n') .. '\\n'))\n"
		      "return type(p:pid()) .. ' ' .. tostring(p:running())"), "number true");
	CHECK(mb_host_proc_live(L) == 1);
	CHECK(wait_lua("return #lines == 5000", 5000));
	CHECK_STR(lua("for i = 1, 5000 do if lines[i] ~= 'line ' .. i then return i end end"
		      " return 'ok'"), "ok");
	CHECK_STR(lua("return tostring(done)"), "nil"); /* cat still runs */
	CHECK_STR(lua("return tostring(p:close_stdin()) .. tostring(p:close_stdin())"), "truetrue");
	CHECK(wait_lua("return done ~= nil", 5000));
	CHECK_STR(lua("return table.concat(done, ',') .. ' ' .. tostring(p:running()) .. ' '"
		      " .. tostring(p:pid()) .. ' ' .. tostring(p)"),
		  "0,0,5000 false nil process cat (exited)");
	CHECK(mb_host_proc_live(L) == 0);
}

TEST(big_line_split_writes_and_crlf)
{
	CHECK_STR(lua("lines = {} done = false\n"
		      "p = mb.spawn{ command = '/bin/cat', on_line = rec(lines),"
		      "  on_exit = function() done = true end }\n"
		      "big = string.rep('0123456789abcdef', 65536)\n" /* 1 MiB */
		      "p:write('ab') p:write('c\\nde') p:write('f\\n\\ng\\r\\n') p:write(big)"
		      " p:write('\\nx\\ry\\n') p:write('tail-') p:write('no-newline')\n"
		      "p:close_stdin() return #big"), "1048576");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return #lines .. ' ' .. lines[1] .. ',' .. lines[2] .. ',' .. lines[3] .. ','"
		      " .. lines[4] .. ',' .. tostring(lines[5] == big) .. ',' .. lines[6] .. ','"
		      " .. lines[7]"), "7 abc,def,,g,true,x\ry,tail-no-newline");
}

TEST(over_long_line_is_dropped_with_notice)
{
	CHECK_STR(lua("lines = {} done = false\n"
		      "p = mb.spawn{ command = 'cat', max_line_bytes = 10, on_line = rec(lines),"
		      "  on_exit = function() done = true end }\n"
		      "p:write('0123456789\\n0123456789A\\nnext\\n')\n"
		      /* a long line in pieces: one notice, then the next line */
		      "p:write('aaaaaa') p:write('aaaaaa') p:write('aaaaaa') p:write('aaaaaa\\nafter\\n')\n"
		      /* the limit counts bytes before the newline, so \\r\\n after 10 bytes is 11 */
		      "p:write('0123456789\\r\\nabcdefghi\\r\\n')\n"
		      /* an over-long final line without newline: notice, nothing else */
		      "p:write(string.rep('z', 100)) p:close_stdin() return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return table.concat(lines, '|')"),
		  "0123456789|ERR:a line of more than 10 bytes was discarded (max_line_bytes=10)|next|"
		  "ERR:a line of more than 10 bytes was discarded (max_line_bytes=10)|after|"
		  "ERR:a line of more than 10 bytes was discarded (max_line_bytes=10)|abcdefghi|"
		  "ERR:a line of more than 10 bytes was discarded (max_line_bytes=10)");
	/* a big over-long line in one read: exactly one notice */
	CHECK_STR(lua("lines = {} done = false\n"
		      "p = mb.spawn{ command = 'cat', max_line_bytes = 1000, on_line = rec(lines),"
		      "  on_exit = function() done = true end }\n"
		      "p:write(string.rep('y', 300000) .. '\\nok\\n') p:close_stdin() return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return table.concat(lines, '|')"),
		  "ERR:a line of more than 1000 bytes was discarded (max_line_bytes=1000)|ok");
}

TEST(stderr_lines_and_cut)
{
	CHECK_STR(lua("lines, errs, done = {}, {}, false\n"
		      "p = mb.spawn{ command = 'sh', args = { '-c', 'echo err >&2; echo out; "
		      "printf \"e2\\\\r\\\\nlast\" >&2' },"
		      "  on_line = rec(lines), on_stderr = function(l) errs[#errs + 1] = l end,"
		      "  on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return table.concat(lines, '|') .. ' / ' .. table.concat(errs, '|')"),
		  "out / err|e2|last");
	/* stderr lines are cut at 4096 bytes; the rest of the line is dropped */
	CHECK_STR(lua("errs, done = {}, false\n"
		      "p = mb.spawn{ command = 'sh', args = { '-c', 'exec cat >&2' },"
		      "  on_stderr = function(l) errs[#errs + 1] = l end,"
		      "  on_exit = function() done = true end }\n"
		      "p:write(string.rep('x', 4096) .. '\\n')\n"
		      "p:write(string.rep('y', 5000) .. '\\nshort\\n')\n"
		      "p:write(string.rep('w', 3000)) p:write(string.rep('v', 3000) .. 'tail\\nend')\n"
		      "p:close_stdin() return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return #errs .. ' ' .. tostring(errs[1] == string.rep('x', 4096)) .. ' '"
		      " .. tostring(errs[2] == string.rep('y', 4096)) .. ' ' .. errs[3] .. ' '"
		      " .. tostring(errs[4] == string.rep('w', 3000) .. string.rep('v', 1096)) .. ' '"
		      " .. errs[5]"), "5 true true short true end");
	/* without on_stderr the lines are logged at debug level (below the default threshold):
	 * nothing breaks */
	CHECK_STR(lua("done = false p = mb.spawn{ command = 'sh', args = { '-c', 'echo e >&2' },"
		      " on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
}

TEST(exit_status_and_signals)
{
	CHECK_STR(lua("ex = nil p = mb.spawn{ command = 'sh', args = { '-c', 'exit 3' },"
		      " on_exit = function(st, sig) ex = st .. ',' .. sig end } return 1"), "1");
	CHECK(wait_lua("return ex ~= nil", 5000));
	CHECK_STR(lua("return ex"), "3,0");
	CHECK_STR(lua("return pair(p:kill('TERM'))"),
		  "nil kill sh: the process has exited");
	CHECK_STR(lua("return pair(p:write('x'))"),
		  "nil write sh: the process has exited");
	CHECK_STR(lua("return tostring(p:close()) .. tostring(p:close_stdin()) .. p:queued_bytes()"),
		  "truetrue0");
	/* kill TERM */
	CHECK_STR(lua("ex = nil p = mb.spawn{ command = 'sleep', args = { '60' },"
		      " on_exit = function(st, sig) ex = st .. ',' .. sig end }"
		      " return tostring(p:running()) .. tostring(p:kill('TERM'))"), "truetrue");
	CHECK(wait_lua("return ex ~= nil", 5000));
	CHECK_STR(lua("return ex .. ' ' .. tostring(p:running())"), "0,15 false");
	/* STOP / CONT / numbers / SIG prefix */
	CHECK_STR(lua("lines, ex = {}, nil p = mb.spawn{ command = 'cat', on_line = rec(lines),"
		      " on_exit = function(st, sig) ex = st .. ',' .. sig end }"
		      " return tostring(p:kill('STOP')) .. tostring(p:kill('SIGCONT'))"
		      " .. tostring(p:kill(0)) .. tostring(p:write('alive\\n'))"), "truetruetruetrue");
	CHECK(wait_lua("return lines[1] == 'alive'", 5000));
	CHECK_STR(lua("return err_of(function() local r = p:kill('FOO') end)"),
		  "bad argument #1 to 'kill' (unknown signal 'FOO' (expected TERM, KILL, INT, HUP, "
		  "STOP, CONT, QUIT, USR1, USR2 or a number))");
	CHECK_STR(lua("return err_of(function() local r = p:kill(65) end)"),
		  "bad argument #1 to 'kill' (expected a signal number 0..64)");
	CHECK_STR(lua("return err_of(function() local r = p:kill({}) end)"),
		  "bad argument #1 to 'kill' (signal name or number expected, got table)");
	CHECK_STR(lua("return err_of(function() local r = p:close(-1) end)"),
		  "bad argument #1 to 'close' (expected milliseconds between 0 and 86400000)");
	CHECK_STR(lua("return err_of(function() local r = p.write({}, 'x') end)"),
		  "bad argument #1 to 'write' (mb.process expected, got table)");
	CHECK_STR(lua("return tostring(p:kill(9))"), "true");
	CHECK(wait_lua("return ex ~= nil", 5000));
	CHECK_STR(lua("return ex .. ' ' .. getmetatable(p)"), "0,9 mb.process");
}

TEST(on_exit_comes_after_every_line)
{
	CHECK_STR(lua("lines, ex = {}, nil p = mb.spawn{ command = 'sh',"
		      " args = { '-c', 'printf \"a\\\\nb\\\\nlast-no-newline\"' }, on_line = rec(lines),"
		      " on_exit = function(st, sig) ex = table.concat(lines, ',') .. ' ' .. st end }"
		      " return 1"), "1");
	CHECK(wait_lua("return ex ~= nil", 5000));
	CHECK_STR(lua("return ex"), "a,b,last-no-newline 0");
	/* a background grandchild keeps stdout open: on_exit comes about 1 s after the exit */
	CHECK_STR(lua("lines, ex = {}, nil t0 = os.clock() p = mb.spawn{ command = 'sh',"
		      " args = { '-c', 'sleep 3 & echo hi' }, on_line = rec(lines),"
		      " on_exit = function(st, sig) ex = table.concat(lines, ',') .. ' ' .. st end }"
		      " return 1"), "1");
	uint64_t t0 = uv_hrtime();
	log_capture();
	int ok = wait_lua("return ex ~= nil", 5000);
	const char *log = log_text();
	uint64_t ms = (uv_hrtime() - t0) / 1000000;
	CHECK(ok);
	CHECK(ms >= 900 && ms < 2500);
	CHECK_STR(lua("return ex"), "hi 0");
	CHECK(strstr(log, "output still open 1000 ms after the exit") != NULL);
	CHECK(mb_host_proc_live(L) == 0);
}

TEST(env_is_replaced)
{
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = '/usr/bin/env',"
		      " env = { A = '1', B = 'two words', EMPTY = '' }, on_line = rec(lines),"
		      " on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("table.sort(lines) return table.concat(lines, '|')"), "A=1|B=two words|EMPTY=");
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = '/usr/bin/env', env = {},"
		      " on_line = rec(lines), on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return #lines"), "0");
	/* the command is looked up in the child's PATH */
	CHECK_STR(lua("return pair(mb.spawn{ command = 'env', env = { PATH = '/nonexistent' } })"),
		  "nil spawn env: no such file or directory");
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = 'env', env = { PATH = '/usr/bin' },"
		      " on_line = rec(lines), on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return table.concat(lines, '|')"), "PATH=/usr/bin");
	/* nil inherits ours */
	setenv("MB_PROC_TEST_VAR", "inherited", 1);
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = 'sh',"
		      " args = { '-c', 'echo $MB_PROC_TEST_VAR' }, on_line = rec(lines),"
		      " on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return lines[1]"), "inherited");
}

TEST(cwd_and_spawn_failures)
{
	char code[512];
	snprintf(code, sizeof code, "lines, done = {}, false p = mb.spawn{ command = 'pwd', cwd = '%s',"
		 " on_line = rec(lines), on_exit = function() done = true end } return 1", tmpdir);
	CHECK_STR(lua(code), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return lines[1]"), tmpdir);
	CHECK_STR(lua("return pair(mb.spawn{ command = 'no-such-command-mb' })"),
		  "nil spawn no-such-command-mb: no such file or directory");
	CHECK_STR(lua("return pair(mb.spawn{ command = '/nonexistent/bin/x' })"),
		  "nil spawn /nonexistent/bin/x: no such file or directory");
	CHECK_STR(lua("return pair(mb.spawn{ command = '/etc/passwd' })"),
		  "nil spawn /etc/passwd: permission denied");
	CHECK_STR(lua("return pair(mb.spawn{ command = 'pwd', cwd = '/nonexistent-mb' })"),
		  "nil spawn pwd: cwd /nonexistent-mb: no such file or directory");
	CHECK_STR(lua("return pair(mb.spawn{ command = 'pwd', cwd = '/etc/passwd' })"),
		  "nil spawn pwd: cwd /etc/passwd: not a directory");
	CHECK(mb_host_proc_live(L) == 0);
	/* a failed spawn's callbacks are released, not leaked into the registry */
	CHECK_STR(lua("local weak = setmetatable({}, { __mode = 'k' })"
		      " do local f = function() end weak[f] = true"
		      "  mb.spawn{ command = 'no-such-command-mb', on_line = f, on_exit = f } end"
		      " collectgarbage() collectgarbage() return tostring(next(weak))"), "nil");
	run_for(10); /* the failed handles close */
}

TEST(argument_errors)
{
	static const char *const cases[][2] = {
		{ "mb.spawn()", "bad argument #1 to 'spawn' (table expected, got no value)" },
		{ "mb.spawn('cat')", "bad argument #1 to 'spawn' (table expected, got string)" },
		{ "mb.spawn{}", "spawn: command must be a non-empty string (got nil)" },
		{ "mb.spawn{ command = 5 }", "spawn: command must be a non-empty string (got number)" },
		{ "mb.spawn{ command = '' }", "spawn: command must be a non-empty string" },
		{ "mb.spawn{ command = 'c\\0at' }", "spawn: command contains a NUL byte" },
		{ "mb.spawn{ command = string.rep('a', 4097) }", "spawn: command is 4097 bytes, above 4096" },
		{ "mb.spawn{ command = 'cat', arg = {} }", "spawn: unknown field 'arg' (fields are command, "
		  "args, env, cwd, max_line_bytes, on_line, on_stderr, on_exit)" },
		{ "mb.spawn{ 'cat' }", "spawn: unknown field [1] (fields are command, args, env, cwd, "
		  "max_line_bytes, on_line, on_stderr, on_exit)" },
		{ "mb.spawn{ command = 'cat', args = 'x' }", "spawn: args must be a table of strings (got "
		  "string)" },
		{ "mb.spawn{ command = 'cat', args = { 'a', 2 } }", "spawn: args[2] must be a string (got "
		  "number)" },
		{ "mb.spawn{ command = 'cat', args = { 'a', 'b\\0' } }", "spawn: args[2] contains a NUL "
		  "byte" },
		{ "mb.spawn{ command = 'cat', env = 'x' }", "spawn: env must be a table of strings (got "
		  "string)" },
		{ "mb.spawn{ command = 'cat', env = { ['A=B'] = 'x' } }", "spawn: env key 'A=B' must be "
		  "non-empty, without '=' or NUL" },
		{ "mb.spawn{ command = 'cat', env = { [''] = 'x' } }", "spawn: env key '' must be "
		  "non-empty, without '=' or NUL" },
		{ "mb.spawn{ command = 'cat', env = { ['A\\0B'] = 'x' } }", "spawn: env key 'A' must be "
		  "non-empty, without '=' or NUL" },
		{ "mb.spawn{ command = 'cat', env = { A = 1 } }", "spawn: env.A must be a string (got "
		  "number)" },
		{ "mb.spawn{ command = 'cat', env = { A = 'x\\0y' } }", "spawn: env.A contains a NUL byte" },
		{ "mb.spawn{ command = 'cat', env = { 'x' } }", "spawn: env keys must be strings (got a "
		  "number key)" },
		{ "mb.spawn{ command = 'cat', cwd = 5 }", "spawn: cwd must be a string (got number)" },
		{ "mb.spawn{ command = 'cat', cwd = '' }", "spawn: cwd must not be empty" },
		{ "mb.spawn{ command = 'cat', cwd = '/\\0' }", "spawn: cwd contains a NUL byte" },
		{ "mb.spawn{ command = 'cat', max_line_bytes = 0 }", "spawn: max_line_bytes must be an "
		  "integer between 1 and 1073741824" },
		{ "mb.spawn{ command = 'cat', max_line_bytes = 1.5 }", "spawn: max_line_bytes must be an "
		  "integer between 1 and 1073741824" },
		{ "mb.spawn{ command = 'cat', max_line_bytes = '10' }", "spawn: max_line_bytes must be an "
		  "integer between 1 and 1073741824" },
		{ "mb.spawn{ command = 'cat', max_line_bytes = 2^30 + 1 }", "spawn: max_line_bytes must "
		  "be an integer between 1 and 1073741824" },
		{ "mb.spawn{ command = 'cat', on_line = 'x' }", "spawn: on_line must be a function (got "
		  "string)" },
		{ "mb.spawn{ command = 'cat', on_stderr = {} }", "spawn: on_stderr must be a function (got "
		  "table)" },
		{ "mb.spawn{ command = 'cat', on_exit = true }", "spawn: on_exit must be a function (got "
		  "boolean)" },
	};
	char code[512];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(code, sizeof code, "return err_of(function() local r = %s return r end)",
			 cases[i][0]);
		const char *got = lua(code);
		if (strcmp(got, cases[i][1]) != 0)
			fprintf(stderr, "  case %s\n", cases[i][0]);
		CHECK_STR(got, cases[i][1]);
	}
	CHECK(mb_host_proc_live(L) == 0);
	/* the largest max_line_bytes and an explicit nil are accepted */
	CHECK_STR(lua("done = false p = mb.spawn{ command = 'true', max_line_bytes = 2^30,"
		      " on_line = nil, on_exit = function() done = true end } return tostring(p)"
		      ":match('^process true %(pid %d+%)$') ~= nil"), "true");
	CHECK(wait_lua("return done", 5000));
}

TEST(writes_after_exit_close_and_broken_pipe)
{
	/* stdin closed by us */
	CHECK_STR(lua("done = false p = mb.spawn{ command = 'cat', on_exit = function() done = true end }"
		      " p:close_stdin() return pair(p:write('x'))"),
		  "nil write cat: stdin is closed");
	CHECK(wait_lua("return done", 5000));
	/* the child closed its stdin but still runs: EPIPE, not a crash or SIGPIPE */
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = 'sh',"
		      " args = { '-c', 'exec 0<&-; echo closed; sleep 0.3' }, on_line = rec(lines),"
		      " on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return lines[1] == 'closed'", 5000));
	CHECK_STR(lua("local r = {} for i = 1, 3 do local ok, e = p:write('data\\n')"
		      " r[#r + 1] = tostring(ok) .. ':' .. tostring(e) end return table.concat(r, ' ')"),
		  "nil:write sh: broken pipe nil:write sh: broken pipe nil:write sh: broken pipe");
	CHECK(wait_lua("return done", 5000));
	/* a child that does not read: bytes queue up without blocking; a kill cancels them */
	CHECK_STR(lua("ex = nil p = mb.spawn{ command = 'sleep', args = { '60' },"
		      " on_exit = function(st, sig) ex = sig end }\n"
		      "local chunk = string.rep('q', 1 << 20) for i = 1, 8 do assert(p:write(chunk)) end\n"
		      "return tostring(p:queued_bytes() > (4 << 20))"), "true");
	run_for(20);
	CHECK_STR(lua("return tostring(p:queued_bytes() > (4 << 20))"), "true");
	CHECK_STR(lua("return tostring(p:close(1000))"), "true");
	CHECK(wait_lua("return ex ~= nil", 5000));
	CHECK_STR(lua("return ex .. ' ' .. p:queued_bytes()"), "15 0");
	/* close_stdin waits for queued bytes: cat echoes all of them, then exits */
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = 'cat', on_line = rec(lines),"
		      " on_exit = function() done = true end }\n"
		      "local big = string.rep('r', 3 << 20) p:write(big .. '\\n') p:write('end\\n')\n"
		      "local q = p:queued_bytes() p:close_stdin() return tostring(q > 0)"), "true");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("return #lines .. ' ' .. #lines[1] .. ' ' .. lines[2]"), "2 3145728 end");
}

TEST(close_kills_a_child_that_ignores_term)
{
	CHECK_STR(lua("lines, ex = {}, nil p = mb.spawn{ command = 'sh', args = { '-c',"
		      " 'trap \"\" TERM; echo ready; while :; do sleep 0.05; done' },"
		      " on_line = rec(lines), on_exit = function(st, sig) ex = st .. ',' .. sig end }"
		      " return 1"), "1");
	CHECK(wait_lua("return lines[1] == 'ready'", 5000));
	uint64_t t0 = uv_hrtime();
	log_capture();
	CHECK_STR(lua("return tostring(p:close(300)) .. tostring(p:close(5000)) .. tostring(p:running())"),
		  "truetruetrue");
	int ok = wait_lua("return ex ~= nil", 5000);
	const char *log = log_text();
	uint64_t ms = (uv_hrtime() - t0) / 1000000;
	CHECK(ok);
	CHECK(ms >= 290 && ms < 1000);
	CHECK_STR(lua("return ex"), "0,9");
	CHECK(strstr(log, "still running after its grace period; sending SIGKILL") != NULL);
	/* a later, shorter close shortens the grace */
	CHECK_STR(lua("lines, ex = {}, nil p = mb.spawn{ command = 'sh', args = { '-c',"
		      " 'trap \"\" TERM; echo ready; while :; do sleep 0.05; done' },"
		      " on_line = rec(lines), on_exit = function(st, sig) ex = st .. ',' .. sig end }"
		      " return 1"), "1");
	CHECK(wait_lua("return lines[1] == 'ready'", 5000));
	t0 = uv_hrtime();
	log_capture();
	lua("p:close(60000) p:close(0)");
	ok = wait_lua("return ex ~= nil", 5000);
	log_text();
	ms = (uv_hrtime() - t0) / 1000000;
	CHECK(ok);
	CHECK(ms < 500);
	CHECK_STR(lua("return ex"), "0,9");
	/* a to-be-closed variable closes (SIGTERM) at the end of its scope */
	CHECK_STR(lua("ex = nil do local q <close> = mb.spawn{ command = 'sleep', args = { '60' },"
		      " on_exit = function(st, sig) ex = sig end } end return 1"), "1");
	CHECK(wait_lua("return ex ~= nil", 5000));
	CHECK_STR(lua("return ex"), "15");
}

TEST(callback_errors_are_logged)
{
	log_capture();
	CHECK_STR(lua("lines, after = {}, false p = mb.spawn{ command = 'cat',"
		      " on_line = function(l) lines[#lines + 1] = l if l == 'boom' then error('on_line boom')"
		      " elseif l == 'table' then error({}) end end,"
		      " on_stderr = function() error('stderr boom') end,"
		      " on_exit = function() after = true error('exit boom') end }"
		      " p:write('boom\\ntable\\nfine\\n') p:close_stdin() return 1"), "1");
	int ok = wait_lua("return after", 5000);
	const char *log = log_text();
	CHECK(ok);
	CHECK_STR(lua("return table.concat(lines, ',')"), "boom,table,fine");
	CHECK(strstr(log, "on_line callback: [string \"lines, after") != NULL);
	CHECK(strstr(log, ":1: on_line boom\nstack traceback:") != NULL);
	CHECK(strstr(log, "on_line callback: (error object is a table value)") != NULL);
	CHECK(strstr(log, "on_exit callback: [string") != NULL);
	CHECK(strstr(log, "exit boom") != NULL);
	CHECK(mb_host_proc_live(L) == 0);
	/* stderr callback errors too */
	log_capture();
	CHECK_STR(lua("after = false p = mb.spawn{ command = 'sh', args = { '-c', 'echo x >&2' },"
		      " on_stderr = function() error('stderr boom') end,"
		      " on_exit = function() after = true end } return 1"), "1");
	ok = wait_lua("return after", 5000);
	log = log_text();
	CHECK(ok);
	CHECK(strstr(log, "on_stderr callback: [string") != NULL);
	CHECK(lua_gettop(L) == 0);
}

TEST(callbacks_close_their_process_and_spawn)
{
	/* p:close inside on_line; the lines already read are still delivered, on_exit fires */
	CHECK_STR(lua("lines, ex, ex2, lines2 = {}, nil, nil, {}\n"
		      "p = mb.spawn{ command = 'cat', on_line = function(l)\n"
		      "    lines[#lines + 1] = l\n"
		      "    if l == 'stop' then p:close(200) p:close() assert(p:write('more') == nil) end\n"
		      "  end,\n"
		      "  on_exit = function(st, sig)\n"
		      "    ex = sig\n"
		      "    q = mb.spawn{ command = 'echo', args = { 'from', 'on_exit' },\n"
		      "      on_line = rec(lines2), on_exit = function(st2) ex2 = st2 end }\n"
		      "  end }\n"
		      "p:write('a\\nstop\\nb\\n') return 1"), "1");
	CHECK(wait_lua("return ex2 ~= nil", 5000));
	/* SIGTERM (15) normally; cat may see the end of its stdin first and exit 0 */
	CHECK_STR(lua("return table.concat(lines, ',') .. ' ' .. (ex == 0 and 15 or ex) .. ' '"
		      " .. table.concat(lines2) .. ' ' .. ex2"), "a,stop,b 15 from on_exit 0");
	/* kill and write from on_line, on_exit closing its own (finished) process */
	CHECK_STR(lua("lines, ex = {}, nil\n"
		      "p = mb.spawn{ command = 'cat', on_line = function(l)\n"
		      "    lines[#lines + 1] = l\n"
		      "    if l == 'one' then p:write('two\\n') elseif l == 'two' then p:kill('KILL') end\n"
		      "  end,\n"
		      "  on_exit = function(st, sig) ex = sig .. tostring(p:close()) .. tostring(p:running()) end }\n"
		      "p:write('one\\n') return 1"), "1");
	CHECK(wait_lua("return ex ~= nil", 5000));
	CHECK_STR(lua("return table.concat(lines, ',') .. ' ' .. ex"), "one,two 9truefalse");
	CHECK(wait_until(NULL, no_live, 5000));
}

TEST(child_sees_only_its_pipes)
{
	int fd = open("/dev/null", O_RDONLY); /* deliberately without O_CLOEXEC */
	CHECK(fd >= 3);
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = '/bin/ls', args = { '/proc/self/fd' },"
		      " on_line = rec(lines), on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	/* 0-2 are the pipes, 3 is ls's own directory handle */
	CHECK_STR(lua("return table.concat(lines, ' ')"), "0 1 2 3");
	CHECK_STR(lua("lines, done = {}, false p = mb.spawn{ command = 'sh', args = { '-c', "
		      "'readlink /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2 | cut -d: -f1' },"
		      " on_line = rec(lines), on_exit = function() done = true end } return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	/* libuv's stdio pipes are socketpairs (1.44) or pipes (later) */
	CHECK_STR(lua("local n = 0 for _, l in ipairs(lines) do if l == 'socket' or l == 'pipe' then"
		      " n = n + 1 end end return n"), "3");
	close(fd);
}

TEST(garbage_collected_process_is_killed)
{
	log_capture();
	CHECK_STR(lua("do local p = mb.spawn{ command = 'sleep', args = { '60' } } pid = p:pid() end"
		      " collectgarbage() collectgarbage() return 1"), "1");
	const char *log = log_text();
	char want[256];
	snprintf(want, sizeof want, "spawn sleep (pid %s): its Lua object was garbage-collected while "
		 "the process runs; killing it with SIGKILL", lua("return pid"));
	CHECK(strstr(log, want) != NULL);
	CHECK(mb_host_proc_live(L) == 1); /* until reaped */
	CHECK(wait_until(NULL, no_live, 5000));
	/* a callback that refers to the object keeps it alive */
	log_capture();
	CHECK_STR(lua("ex = nil do local p p = mb.spawn{ command = 'sh', args = { '-c', 'sleep 0.2; exit 4' },"
		      " on_exit = function(st) ex = st .. tostring(p:running()) end } end"
		      " collectgarbage() collectgarbage() return 1"), "1");
	int ok = wait_lua("return ex ~= nil", 5000);
	log = log_text();
	CHECK(ok);
	CHECK_STR(lua("return ex"), "4false");
	CHECK(strstr(log, "garbage-collected") == NULL);
	/* once finished, the object and its callbacks can be collected */
	CHECK_STR(lua("weak = setmetatable({}, { __mode = 'k' }) done = false"
		      " local f = function() done = true end weak[f] = true"
		      " keep = mb.spawn{ command = 'true', on_exit = f } weak[keep] = true return 1"), "1");
	CHECK(wait_lua("return done", 5000));
	CHECK_STR(lua("collectgarbage() collectgarbage() return tostring(next(weak) ~= nil)"), "true");
	CHECK_STR(lua("keep = nil"), "nil");
	CHECK_STR(lua("collectgarbage() collectgarbage() return tostring(next(weak))"), "nil");
}

TEST(shutdown_with_live_children)
{
	lua_State *keep = L;
	L = new_state();
	CHECK_STR(lua("calls = 0 local f = function() calls = calls + 1 end\n"
		      "a = mb.spawn{ command = 'sleep', args = { '60' }, on_exit = f, on_line = f }\n"
		      "b = mb.spawn{ command = 'cat', on_exit = f, on_line = f }\n"
		      "lines = {} c = mb.spawn{ command = 'sh', args = { '-c',"
		      " 'trap \"\" TERM; echo ready; while :; do sleep 0.05; done' }, on_line = rec(lines),"
		      " on_exit = f } return 1"), "1");
	CHECK(wait_lua("return lines[1] == 'ready'", 5000));
	CHECK(mb_host_proc_live(L) == 3);
	uint64_t t0 = uv_hrtime();
	log_capture();
	mb_host_proc_shutdown(L, 300);
	mb_host_proc_shutdown(L, 300); /* twice is fine */
	CHECK(mb_host_proc_live(L) == 3); /* until reaped */
	CHECK_STR(lua("return tostring(a:running()) .. ' ' .. tostring(a:pid()) .. ' '"
		      " .. pair(b:write('x')) .. ' ' .. tostring(c)"),
		  "false nil nil write cat: the process was shut down process sh (shut down)");
	CHECK_STR(lua("return pair(c:kill())"), "nil kill sh: the process was shut down");
	int ok = wait_until(NULL, no_live, 5000);
	log_text();
	uint64_t ms = (uv_hrtime() - t0) / 1000000;
	CHECK(ok);
	CHECK(ms >= 290 && ms < 1500);
	CHECK_STR(lua("return calls"), "0"); /* no callback after shutdown */
	/* spawn is refused afterwards: nothing may keep the loop alive again */
	CHECK_STR(lua("return pair(mb.spawn{ command = 'true', on_exit = print })"),
		  "nil spawn true: the server is shutting down");
	CHECK(mb_host_proc_live(L) == 0);
	lua_close(L);
	L = keep;
	run_for(10);
	/* shutdown and live on a state that never had the bindings do nothing */
	lua_State *s = luaL_newstate();
	mb_host_proc_shutdown(s, 0);
	CHECK(mb_host_proc_live(s) == 0);
	lua_close(s);
}

/* lua_close with running children and no shutdown: the finalizers SIGKILL them; the loop reaps
 * them afterwards and ends by itself. Also lua_close right after shutdown, before the reaping. */
TEST(lua_close_with_running_children)
{
	lua_State *s = new_state();
	char buf[256];
	CHECK_STR(unit_lua_eval(s, "a = mb.spawn{ command = 'sleep', args = { '60' }, on_exit = print }"
			 " b = mb.spawn{ command = 'cat', on_line = print } b:write(string.rep('x', 1 << 20))"
			 " return 1", buf, sizeof buf), "1");
	log_capture();
	lua_close(s);
	const char *log = log_text();
	CHECK(strstr(log, "spawn sleep (pid ") != NULL);
	CHECK(strstr(log, "killing it with SIGKILL") != NULL);
	CHECK(run_to_end() < 4000); /* uv_run returns once the children are reaped */
	s = new_state();
	CHECK_STR(unit_lua_eval(s, "a = mb.spawn{ command = 'sleep', args = { '60' } } return 1", buf,
			 sizeof buf), "1");
	mb_host_proc_shutdown(s, 100);
	lua_close(s);
	CHECK(run_to_end() < 4000);
}

/* Shutdown as the server does it: shutdown, let uv_run finish by itself (children reaped, handles
 * closed), close the state; then the loop must close with nothing left. */
TEST(shutdown_loop_closes_cleanly)
{
	CHECK_STR(lua("keep1 = mb.spawn{ command = 'sleep', args = { '60' } }"
		      " keep2 = mb.spawn{ command = 'cat' } keep2:write('unread')"
		      " mb.spawn{ command = 'sh', args = { '-c', 'exit 0' } } return 1"), "1");
	mb_host_proc_shutdown(L, 200);
	CHECK(run_to_end() < 4000);
	CHECK(mb_host_proc_live(L) == 0);
	lua_close(L);
	L = NULL;
	CHECK(uv_loop_close(&loop) == 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN); /* as the server does (server.c) */
	if (unit_tmpdir(tmpdir, sizeof tmpdir, "/tmp/mb-proc-XXXXXX") != 0)
		return 1;
	uv_loop_init(&loop);
	L = new_state();
	RUN(cat_echoes_many_lines);
	RUN(big_line_split_writes_and_crlf);
	RUN(over_long_line_is_dropped_with_notice);
	RUN(stderr_lines_and_cut);
	RUN(exit_status_and_signals);
	RUN(on_exit_comes_after_every_line);
	RUN(env_is_replaced);
	RUN(cwd_and_spawn_failures);
	RUN(argument_errors);
	RUN(writes_after_exit_close_and_broken_pipe);
	RUN(close_kills_a_child_that_ignores_term);
	RUN(callback_errors_are_logged);
	RUN(callbacks_close_their_process_and_spawn);
	RUN(child_sees_only_its_pipes);
	RUN(garbage_collected_process_is_killed);
	RUN(shutdown_with_live_children);
	RUN(lua_close_with_running_children);
	RUN(shutdown_loop_closes_cleanly);
	unit_rmtree(tmpdir);
	return UNIT_END();
}
