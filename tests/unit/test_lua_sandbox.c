/* test_lua_sandbox.c - runs each tests/lua/sandbox_*.lua inside the real sandbox engine (the
 * same mb_sandbox_run the server uses), so the Lua-level tests of the sandbox API also run under
 * ASan/UBSan. Each script returns {passed, failed, failures}. Run from the repo root. */
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "json.h"
#include "sandbox.h"
#include "sandbox_setup.h"
#include "unit.h"

static mb_config cfg;

static void run_script(const char *path)
{
	size_t len;
	char *code = unit_read_file(path, &len);
	CHECK(code != NULL);
	if (!code)
		return;
	mb_budget b;
	mb_budget_init(&b, 64u << 20, 100000000, 10000);
	mb_exec_request req = { .code = code, .code_len = len, .timeout_ms = 10000,
				.memory_bytes = 64u << 20, .instruction_limit = 100000000, .cfg = &cfg };
	mb_exec_result r;
	mb_sandbox_run(&req, &b, &r);
	if (!r.success)
		fprintf(stderr, "  %s: %s\n%s\n", path, r.error, r.traceback ? r.traceback : "");
	CHECK(r.success);
	if (r.success) {
		const char *fail = strstr(r.result_json, "\"failed\":");
		const char *pass = strstr(r.result_json, "\"passed\":");
		CHECK(fail && atoi(fail + 9) == 0);
		CHECK(pass && atoi(pass + 9) > 0);
		if (!fail || atoi(fail + 9) != 0)
			fprintf(stderr, "  %s: %s\n", path, r.result_json);
		else
			printf("     %s: %d checks passed\n", path, atoi(pass + 9));
	}
	mb_exec_result_free(&r);
	free(code);
}

TEST(sandbox_scripts)
{
	glob_t g;
	CHECK(glob("tests/lua/sandbox_*.lua", 0, NULL, &g) == 0);
	for (size_t i = 0; i < g.gl_pathc; i++)
		run_script(g.gl_pathv[i]);
	CHECK(g.gl_pathc > 0);
	globfree(&g);
}

int main(void)
{
	if (sandbox_setup(&cfg) != 0)
		return 1;
	RUN(sandbox_scripts);
	mb_sandbox_thread_exit();
	return UNIT_END();
}
