/* sandbox_testhooks.c - a global `__test` of deliberately unsafe functions, compiled in only
 * with -DMB_TEST_HOOKS (the test build of tests/security/process.test.mjs; never the shipped
 * binary, which that test also checks). They stand for what a memory-safety bug in the VM or in
 * a binding would give an attacker - a crash, or raw system calls - so the tests can show what
 * a worker process still cannot do:
 *   __test.crash("null" | "abort" | "recurse" | "malloc")  a NULL write, abort(), unbounded C
 *                                                        recursion, malloc until it fails
 *   __test.open(path [, "w"])    open(2): the descriptor, or nil and errno's text
 *   __test.exec(path)            execve(2) (returns only on failure)
 *   __test.socket()              socket(2) + connect to 127.0.0.1:1
 *   __test.fork()                fork(2): the child exits at once
 *   __test.env()                 the number of environment variables
 *   __test.channel(bytes)        writes bytes to a worker process's channel (fd 3) as they are,
 *                                standing for a compromised worker that forges frames
 * Each reports failure as nil plus the reason, so a test can tell "refused" from "killed".
 */
#include "sandbox_int.h"

#ifdef MB_TEST_HOOKS
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int fail(lua_State *L)
{
	lua_pushnil(L);
	lua_pushstring(L, strerror(errno));
	return 2;
}

static volatile int sink;

static int recurse(int n)
{
	volatile char pad[4096];
	pad[0] = (char)n;
	if (sink == -1) /* never: keeps the compiler from calling this infinite */
		return 0;
	return recurse(n + 1) + pad[0];
}

static int t_crash(lua_State *L)
{
	const char *how = luaL_checkstring(L, 1);
	if (strcmp(how, "null") == 0)
		*(volatile int *)(uintptr_t)sink = 1;
	else if (strcmp(how, "abort") == 0)
		abort();
	else if (strcmp(how, "recurse") == 0)
		sink = recurse(0);
	else if (strcmp(how, "malloc") == 0) {
		size_t total = 0;
		for (;;) {
			char *p = malloc(64 << 20);
			if (!p)
				break;
			memset(p, 1, 64 << 20);
			total += 64 << 20;
		}
		lua_pushinteger(L, (lua_Integer)(total >> 20));
		return 1;
	}
	return luaL_error(L, "unknown crash %s", how);
}

static int t_open(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	int w = lua_isstring(L, 2) && strcmp(lua_tostring(L, 2), "w") == 0;
	int fd = open(path, w ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY, 0600);
	if (fd < 0)
		return fail(L);
	lua_pushinteger(L, fd);
	return 1;
}

static int t_exec(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	char *argv[] = {(char *)path, NULL};
	execve(path, argv, environ);
	return fail(L);
}

static int t_socket(lua_State *L)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return fail(L);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
	int e = errno;
	close(fd);
	lua_pushboolean(L, 1);
	lua_pushstring(L, rc == 0 ? "connected" : strerror(e));
	return 2;
}

static int t_fork(lua_State *L)
{
	pid_t p = fork();
	if (p < 0)
		return fail(L);
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	lua_pushinteger(L, p);
	return 1;
}

static int t_env(lua_State *L)
{
	lua_Integer n = 0;
	for (char **e = environ; e && *e; e++)
		n++;
	lua_pushinteger(L, n);
	return 1;
}

static int t_channel(lua_State *L)
{
	size_t n;
	const char *b = luaL_checklstring(L, 1, &n);
	ssize_t k = write(3, b, n);
	if (k < 0)
		return fail(L);
	lua_pushinteger(L, k);
	return 1;
}

int mb_sandbox_testhooks_open(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{"channel", t_channel},
		{"crash", t_crash}, {"open", t_open}, {"exec", t_exec}, {"socket", t_socket},
		{"fork", t_fork},   {"env", t_env},   {NULL, NULL},
	};
	luaL_newlib(L, fns);
	lua_setfield(L, -2, "__test"); /* into the table at the top: the globals, lazily */
	return 0;
}
#else
int mb_sandbox_testhooks_open(lua_State *L)
{
	(void)L;
	return 0;
}
#endif
