/* run_cli.c - `moonbox run`: one chunk of Lua in the sandbox, from the shell, as an agent sees it.
 *
 *   moonbox run [SERVER OPTIONS] FILE.lua | -e CODE | --skill NAME [--args JSON|@FILE]
 *               [--context-vars JSON|@FILE]
 *
 * The server options (--data-dir, --skills-dir, --config with mcpServers, --pii-policy, limits,
 * ...) go to a moonbox started for the run as a stdio server, so the chunk runs with exactly the
 * configuration, skills, workspace and upstream servers the server would give it: this process
 * is only its MCP client (initialize, then one tools/call of execute_code). A skill runs as
 * require("skills.NAME")(args), with args passed as context_vars. What it prints: the result as
 * pretty JSON, the captured output, the error, the limits used and the context saved. The exit
 * status: 0 success, 1 an error in the code, 3 a limit tripped (time, memory, instructions,
 * output), 2 a bad argument, 4 the server could not start or answer.
 *
 *   moonbox test [SERVER OPTIONS] [NAME...]
 *
 * runs the examples (-- @example) and tests (skills/tests/NAME_test.lua) of the named skills, or
 * of every skill, the same way: the chunk is lua/mcp/skill_tests.lua's RUNNER (read from the
 * embedded module in a plain Lua state), the names go in as context_vars; it prints TAP on stdout
 * and exits 1 when a test or an example failed.
 */
#include "run_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "embedded.h"

extern char **environ;

#define MAX_ANSWER ((size_t)1 << 30)

/* A file's whole text (NULL and errno on failure). */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap + 1);
	for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += k;
		if (n == cap) {
			char *b = cap < MAX_ANSWER ? realloc(buf, cap * 2 + 1) : NULL;
			if (!b) {
				free(buf);
				buf = NULL;
				errno = EFBIG;
				break;
			}
			buf = b;
			cap *= 2;
		}
	}
	int bad = ferror(f);
	fclose(f);
	if (!buf || bad) {
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

/* JSON text given as is or as @FILE; returns a new reference or NULL (message printed). */
static json_t *json_arg(const char *flag, const char *v)
{
	char *text = NULL;
	size_t len = 0;
	if (v[0] == '@') {
		text = slurp(v + 1, &len);
		if (!text) {
			fprintf(stderr, "moonbox run: %s %s: %s\n", flag, v + 1, strerror(errno));
			return NULL;
		}
		v = text;
	}
	json_error_t je;
	json_t *j = json_loads(v, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	if (!j)
		fprintf(stderr, "moonbox run: %s is not JSON: %s (line %d, column %d)\n", flag, je.text,
			je.line, je.column);
	free(text);
	return j;
}

/* One line from the server's stdout (the caller frees it); NULL at its end. */
static char *read_line(FILE *in)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, in);
	if (n < 0) {
		free(line);
		return NULL;
	}
	return line;
}

static int send_json(FILE *out, json_t *msg)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	int rc = s && fprintf(out, "%s\n", s) > 0 && fflush(out) == 0 ? 0 : -1;
	free(s);
	return rc;
}

/* Reads lines until the response with this id (other messages - notifications - are shown
 * when they are logs); returns it or NULL. */
static json_t *await(FILE *in, json_int_t id)
{
	for (char *line; (line = read_line(in)) != NULL;) {
		json_t *m = json_loads(line, JSON_DECODE_ANY, NULL);
		free(line);
		if (!json_is_object(m)) {
			json_decref(m);
			continue;
		}
		json_t *mid = json_object_get(m, "id");
		if (json_is_integer(mid) && json_integer_value(mid) == id)
			return m;
		const char *method = json_string_value(json_object_get(m, "method"));
		if (method && strcmp(method, "notifications/message") == 0) {
			json_t *p = json_object_get(m, "params");
			char *data = json_dumps(json_object_get(p, "data"), JSON_ENCODE_ANY | JSON_COMPACT);
			fprintf(stderr, "log %s: %s\n", json_string_value(json_object_get(p, "level")) ?
				json_string_value(json_object_get(p, "level")) : "?", data ? data : "");
			free(data);
		}
		json_decref(m);
	}
	return NULL;
}

static int is_limit(const char *t)
{
	static const char *const limits[] = { "timeout", "memory", "instructions", "output", NULL };
	for (int i = 0; t && limits[i]; i++)
		if (strcmp(t, limits[i]) == 0)
			return 1;
	return 0;
}

/* Prints what the agent would see; returns the exit status. */
static int report(json_t *resp)
{
	json_t *res = json_object_get(resp, "result");
	json_t *sc = json_object_get(res, "structuredContent");
	if (!json_is_object(sc)) {
		char *s = json_dumps(resp, JSON_INDENT(2) | JSON_ENCODE_ANY);
		fprintf(stderr, "moonbox run: the server answered without a result:\n%s\n", s ? s : "?");
		free(s);
		return 4;
	}
	int ok = json_is_true(json_object_get(sc, "success"));
	if (ok) {
		char *s = json_dumps(json_object_get(sc, "result"), JSON_INDENT(2) | JSON_ENCODE_ANY);
		printf("%s\n", s ? s : "null");
		free(s);
	}
	const char *out = json_string_value(json_object_get(sc, "output"));
	if (out && *out)
		fprintf(stderr, "--- output\n%s%s", out, out[strlen(out) - 1] == '\n' ? "" : "\n");
	const char *type = json_string_value(json_object_get(sc, "error_type"));
	if (!ok) {
		const char *err = json_string_value(json_object_get(sc, "error"));
		const char *tb = json_string_value(json_object_get(sc, "traceback")); /* err + stack */
		fprintf(stderr, "--- error (%s)\n%s\n", type ? type : "error", tb ? tb : err ? err : "");
	}
	fprintf(stderr, "--- %.3f ms, %lld instructions, %lld bytes of memory at most",
		json_number_value(json_object_get(sc, "execution_time_ms")),
		(long long)json_integer_value(json_object_get(sc, "instructions")),
		(long long)json_integer_value(json_object_get(sc, "memory_peak_bytes")));
	json_t *ctx = json_object_get(json_object_get(res, "_meta"), "dev.moonbox/context");
	if (json_is_object(ctx))
		fprintf(stderr, "; context: %lld bytes in, %lld tokens out, %lld tokens saved",
			(long long)json_integer_value(json_object_get(ctx, "bytes_in")),
			(long long)json_integer_value(json_object_get(ctx, "tokens_out")),
			(long long)json_integer_value(json_object_get(ctx, "tokens_saved")));
	fprintf(stderr, "\n");
	return ok ? 0 : is_limit(type) ? 3 : 1;
}

/* The test runner chunk (mcp.skill_tests.RUNNER), or NULL after a message. */
static char *test_runner(void)
{
	lua_State *L = luaL_newstate();
	if (!L)
		return NULL;
	luaL_openlibs(L);
	mb_embedded_install(L);
	char *out = NULL;
	if (luaL_dostring(L, "return require('mcp.skill_tests').RUNNER") == LUA_OK && lua_isstring(L, -1))
		out = strdup(lua_tostring(L, -1));
	else
		fprintf(stderr, "moonbox test: %s\n", lua_tostring(L, -1));
	lua_close(L);
	return out;
}

/* moonbox test: the TAP the runner made on stdout; 0 when everything passed, 1 when not. */
static int report_tap(json_t *resp)
{
	json_t *sc = json_object_get(json_object_get(resp, "result"), "structuredContent");
	json_t *r = json_object_get(sc, "result");
	const char *tap = json_string_value(json_object_get(r, "tap"));
	if (!json_is_true(json_object_get(sc, "success")) || !tap) {
		int st = report(resp); /* the runner itself failed: its error */
		return st == 0 ? 1 : st;
	}
	fputs(tap, stdout);
	const char *out = json_string_value(json_object_get(sc, "output"));
	if (out && *out)
		fprintf(stderr, "--- output\n%s%s", out, out[strlen(out) - 1] == '\n' ? "" : "\n");
	return json_integer_value(json_object_get(r, "failed")) > 0 ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: moonbox run [SERVER OPTIONS] FILE.lua | -e CODE | --skill NAME [--args JSON|@FILE]\n"
			"                   [--context-vars JSON|@FILE]\n"
			"  runs one chunk in the sandbox with the server's configuration; exit 0 success,\n"
			"  1 error, 3 a limit tripped, 2 bad arguments, 4 the server did not answer\n"
			"usage: moonbox test [SERVER OPTIONS] [NAME...]\n"
			"  runs the skills' examples and tests, prints TAP; exit 1 when one failed\n");
}

int mb_run_main(int argc, char **argv)
{
	const char *file = NULL, *code_arg = NULL, *skill = NULL, *args_arg = NULL, *ctx_arg = NULL;
	int test = strcmp(argv[1], "test") == 0;
	json_t *names = json_array();
	char **srv = calloc((size_t)argc + 4, sizeof *srv);
	if (!srv)
		return 4;
	int ns = 0;
	srv[ns++] = (char *)"moonbox";
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char **slot = test ? NULL : strcmp(a, "-e") == 0 ? &code_arg : strcmp(a, "--skill") == 0 ? &skill
			: strcmp(a, "--args") == 0 ? &args_arg : strcmp(a, "--context-vars") == 0 ? &ctx_arg : NULL;
		if (slot) {
			if (i + 1 >= argc) {
				fprintf(stderr, "moonbox run: %s needs a value\n", a);
				usage();
				free(srv);
				return 2;
			}
			*slot = argv[++i];
		} else if (strncmp(a, "--", 2) == 0 && strcmp(a, "--http") != 0) {
			srv[ns++] = argv[i]; /* a server option and its value, passed on */
			if (i + 1 < argc && strchr(a, '=') == NULL)
				srv[ns++] = argv[++i];
		} else if (strcmp(a, "--http") == 0) {
			fprintf(stderr, "moonbox run: --http does not apply (the run is its own client)\n");
			free(srv);
			return 2;
		} else if (test) {
			size_t k = strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
			if (a[k] || !*a || (*a >= '0' && *a <= '9')) {
				fprintf(stderr, "moonbox test: %s is not a skill name (letters, digits and _)\n", a);
				free(srv);
				json_decref(names);
				return 2;
			}
			json_array_append_new(names, json_string(a));
		} else if (!file) {
			file = a;
		} else {
			fprintf(stderr, "moonbox run: more than one file (%s, %s)\n", file, a);
			free(srv);
			return 2;
		}
	}
	if (!test && (!!file + !!code_arg + !!skill != 1 || (args_arg && !skill))) {
		usage();
		free(srv);
		json_decref(names);
		return 2;
	}
	int has_level = 0;
	for (int i = 1; i < ns; i++)
		has_level |= strcmp(srv[i], "--log-level") == 0;
	if (!has_level) { /* the run's own report is what matters; warnings still show */
		srv[ns++] = (char *)"--log-level";
		srv[ns++] = (char *)"warning";
	}
	srv[ns] = NULL;

	json_t *arguments = json_object();
	char *code = NULL;
	if (file) {
		size_t len;
		code = slurp(file, &len);
		if (!code) {
			fprintf(stderr, "moonbox run: %s: %s\n", file, strerror(errno));
			free(srv);
			json_decref(arguments);
			return 2;
		}
		json_object_set_new(arguments, "code", json_stringn(code, len));
	} else if (code_arg) {
		json_object_set_new(arguments, "code", json_string(code_arg));
	} else if (test) {
		char *runner = test_runner();
		if (runner)
			json_object_set_new(arguments, "code", json_string(runner));
		free(runner);
	}
	json_t *ctx = ctx_arg ? json_arg("--context-vars", ctx_arg) : json_object();
	if (test && ctx)
		json_object_set(ctx, "__mb_test_names", names);
	json_decref(names);
	int bad = !ctx || !json_is_object(ctx);
	if (ctx && !json_is_object(ctx))
		fprintf(stderr, "moonbox run: --context-vars must be a JSON object\n");
	if (!bad && skill) {
		json_t *sargs = args_arg ? json_arg("--args", args_arg) : json_object();
		bad = !sargs;
		if (sargs)
			json_object_set_new(ctx, "args", sargs);
		/* the name goes in as a string literal of its own: no code from the command line */
		json_object_set_new(ctx, "skill_name", json_string(skill));
		json_object_set_new(arguments, "code", json_string("return require(\"skills.\" .. skill_name)(args)"));
	}
	if (bad || (!json_object_get(arguments, "code"))) {
		free(srv);
		free(code);
		json_decref(ctx);
		json_decref(arguments);
		return 2;
	}
	if (json_object_size(ctx))
		json_object_set(arguments, "context_vars", ctx);
	json_decref(ctx);
	free(code);

	int to[2], from[2];
	if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
		perror("moonbox run: pipe");
		free(srv);
		json_decref(arguments);
		return 4;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, to[0], 0);
	posix_spawn_file_actions_adddup2(&fa, from[1], 1);
	pid_t pid;
	int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, srv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(to[0]);
	close(from[1]);
	free(srv);
	if (rc != 0) {
		fprintf(stderr, "moonbox run: cannot start the server: %s\n", strerror(rc));
		json_decref(arguments);
		return 4;
	}
	signal(SIGPIPE, SIG_IGN);
	FILE *out = fdopen(to[1], "w"), *in = fdopen(from[0], "r");
	json_t *init = json_pack("{s:s,s:i,s:s,s:{s:s,s:{},s:{s:s,s:s}}}", "jsonrpc", "2.0", "id", 1,
				 "method", "initialize", "params", "protocolVersion", "2025-11-25",
				 "capabilities", "clientInfo", "name", "moonbox-run", "version", "1");
	json_t *call = json_pack("{s:s,s:i,s:s,s:{s:s,s:o}}", "jsonrpc", "2.0", "id", 2, "method",
				 "tools/call", "params", "name", "execute_code", "arguments", arguments);
	json_t *inited = json_pack("{s:s,s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
	int status = 4;
	json_t *resp = NULL;
	if (out && in && send_json(out, init) == 0) {
		json_t *r1 = await(in, 1);
		if (r1 && json_object_get(r1, "result") && send_json(out, inited) == 0 &&
		    send_json(out, call) == 0 && (resp = await(in, 2)) != NULL)
			status = test ? report_tap(resp) : report(resp);
		else
			fprintf(stderr, "moonbox run: the server did not answer (its log above says why)\n");
		json_decref(r1);
	}
	json_decref(resp);
	json_decref(init);
	json_decref(call);
	json_decref(inited);
	if (out)
		fclose(out); /* end of input: the server finishes and exits */
	else
		close(to[1]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (in)
		fclose(in);
	else
		close(from[0]);
	return status;
}
