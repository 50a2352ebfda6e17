/* types_cli.c - a skill author's tools that need no server: `moonbox types DIR` writes the
 * editor files of a skill folder, `moonbox check FILE...` lints Lua against the sandbox.
 *
 * DIR/types/sandbox.lua is the ---@meta file of the sandbox API (lua/mcp/sandbox_types.lua, made
 * from the catalog's lua/catalog/sandbox_api.lua) and DIR/.luarc.json points lua-language-server
 * at it: Lua 5.4, the stock libraries the sandbox lacks disabled, moonbox's globals known. The
 * Lua runs in a plain state of its own (no server, no store, no network) with the embedded
 * modules; the files are written with the user's own rights, as any file they ask a CLI for.
 * The upstream tools' stubs need the running server's catalog: they are the resource
 * moonbox://types/servers.lua.
 *
 * `moonbox check` writes a luacheck configuration made the same way (sandbox_types.luacheckrc:
 * the sandbox's globals and library fields read-only, no global set) to a private temporary
 * file and runs Debian's luacheck on the files (directories: their .lua files) with it, so the
 * report is luacheck's `file:line:col: (Wnnn) message`; exit 0 clean, 1 findings, 2 bad
 * arguments, 4 luacheck missing or failing.
 */
#include "types_cli.h"

#include <errno.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "embedded.h"

static const char script[] =
	"local dir = ...\n"
	"local st, api = require('mcp.sandbox_types'), require('catalog.sandbox_api')\n"
	"local function put(path, text)\n"
	"  local f, err = io.open(path, 'wb')\n"
	"  if not f then error(err, 0) end\n"
	"  local ok, werr = f:write(text)\n"
	"  local cok, cerr = f:close()\n"
	"  if not ok or not cok then error(path .. ': ' .. tostring(werr or cerr), 0) end\n"
	"  io.stdout:write(path, '\\n')\n"
	"end\n"
	"put(dir .. '/types/sandbox.lua', st.file(api))\n"
	"put(dir .. '/.luarc.json', st.luarc(api))\n";

/* Runs script (given arg as ...) in a plain state with the embedded modules; 0 or 1. */
static int run_lua(const char *what, const char *script, size_t len, const char *arg)
{
	lua_State *L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "moonbox %s: out of memory\n", what);
		return 1;
	}
	luaL_openlibs(L);
	mb_embedded_install(L);
	int rc = 0;
	if (luaL_loadbuffer(L, script, len, "=moonbox") != LUA_OK ||
	    (lua_pushstring(L, arg), lua_pcall(L, 1, 0, 0)) != LUA_OK) {
		fprintf(stderr, "moonbox %s: %s\n", what, lua_tostring(L, -1));
		rc = 1;
	}
	lua_close(L);
	return rc;
}

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) == 0 || errno == EEXIST)
		return 0;
	return -1;
}

int mb_types_main(const char *dir)
{
	char sub[4096];
	if (snprintf(sub, sizeof sub, "%s/types", dir) >= (int)sizeof sub) {
		fprintf(stderr, "moonbox types: the path is too long\n");
		return 2;
	}
	if (make_dir(dir) != 0 || make_dir(sub) != 0) {
		fprintf(stderr, "moonbox types: cannot create %s: %s\n", sub, strerror(errno));
		return 1;
	}
	return run_lua("types", script, sizeof script - 1, dir);
}

static const char check_script[] =
	"local path = ...\n"
	"local st, api = require('mcp.sandbox_types'), require('catalog.sandbox_api')\n"
	"local f = assert(io.open(path, 'wb'))\n"
	"assert(f:write(st.luacheckrc(api)))\n"
	"assert(f:close())\n";

extern char **environ;

int mb_check_main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: moonbox check FILE.lua|DIR... (luacheck with the sandbox's globals)\n");
		return 2;
	}
	for (int i = 2; i < argc; i++)
		if (argv[i][0] == '-') {
			fprintf(stderr, "moonbox check: unknown option %s (give files or directories)\n", argv[i]);
			return 2;
		}
	const char *tmp = getenv("TMPDIR");
	char cfg[4096];
	snprintf(cfg, sizeof cfg, "%s/moonbox-luacheckrc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	int fd = mkstemp(cfg);
	if (fd < 0) {
		fprintf(stderr, "moonbox check: cannot make a temporary file: %s\n", strerror(errno));
		return 4;
	}
	close(fd);
	if (run_lua("check", check_script, sizeof check_script - 1, cfg) != 0) {
		unlink(cfg);
		return 4;
	}
	char **av = calloc((size_t)argc + 8, sizeof *av);
	if (!av) {
		unlink(cfg);
		return 4;
	}
	int n = 0;
	av[n++] = (char *)"luacheck";
	av[n++] = (char *)"--config";
	av[n++] = cfg;
	av[n++] = (char *)"--formatter";
	av[n++] = (char *)"plain";
	av[n++] = (char *)"--codes";
	av[n++] = (char *)"--no-cache";
	for (int i = 2; i < argc; i++)
		av[n++] = argv[i];
	av[n] = NULL;
	pid_t pid;
	int rc = posix_spawnp(&pid, "luacheck", NULL, NULL, av, environ);
	free(av);
	int status = 4;
	if (rc != 0) {
		fprintf(stderr, "moonbox check: cannot run luacheck (%s): install Debian's lua-check\n",
			strerror(rc));
	} else {
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		status = code == 0 ? 0 : code == 1 || code == 2 ? 1 : 4; /* 1 warnings, 2 errors */
		if (status == 4)
			fprintf(stderr, "moonbox check: luacheck failed (exit %d)\n", code);
	}
	unlink(cfg);
	return status;
}
