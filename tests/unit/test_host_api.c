/* test_host_api.c - docs/host-api.md stays the whole C<->Lua contract of the host: every
 * function of the host's `mb` table (and of mb.fs, mb.db, mb.workspace) and every function of
 * the entry table lua/mcp/server.lua returns is listed there, and everything listed there
 * exists. A real host is built (store and workspaces in a temporary directory). */
#include "unit.h"
#include "codec.h"
#include "config.h"
#include "host.h"
#include "host_state.h"
#include "json.h"
#include "store.h"
#include "workspace.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

static char *doc;

/* "`name" followed by '(', '`', ' ' or '{' appears in the doc */
static int documented(const char *name)
{
	char pat[128];
	int n = snprintf(pat, sizeof pat, "`%s", name);
	for (const char *p = strstr(doc, pat); p; p = strstr(p + 1, pat))
		if (strchr("(`{ ", p[n]))
			return 1;
	return 0;
}

/* The names ("mb.x", "mb.t.x") of every function in mb, newline-separated, from Lua. */
static const char LIST[] =
	"local out = {}\n"
	"for k, v in pairs(mb) do\n"
	"  if type(v) == 'function' then out[#out + 1] = 'mb.' .. k end\n"
	"  if type(v) == 'table' then for k2, v2 in pairs(v) do\n"
	"    if type(v2) == 'function' then out[#out + 1] = 'mb.' .. k .. '.' .. k2 end end end\n"
	"end\n"
	"for k, v in pairs(package.loaded['mcp.server']) do\n"
	"  if type(v) == 'function' then out[#out + 1] = k end\n"
	"end\n"
	"table.sort(out) return table.concat(out, '\\n')";

TEST(every_function_is_documented_and_every_documented_one_exists)
{
	static mb_config cfg;
	char dir[64];
	CHECK(unit_tmpdir(dir, sizeof dir, "/tmp/mb-test-hostapi-XXXXXX") == 0);
	char *args[] = { "t", "--data-dir", dir, NULL };
	CHECK(mb_config_load(&cfg, 3, args) == 0);
	char err[512], path[4200];
	mb_store *store = NULL;
	snprintf(path, sizeof path, "%s/moonbox.db", dir);
	CHECK(mb_store_open(&store, path, 1000, err, sizeof err) == 0);
	snprintf(path, sizeof path, "%s/workspaces", dir);
	mb_workspace_limits wl = { 1 << 20, 1 << 24, 1000 };
	mb_workspaces *ws = mb_workspaces_new(path, &wl, err, sizeof err);
	CHECK(ws != NULL);
	mb_host_io io = { unit_host_discard, NULL, NULL };
	mb_host_deps deps = { .loop = uv_default_loop(), .store = store, .workspaces = ws };
	mb_host *h = mb_host_new(&cfg, &io, &deps);
	CHECK(h != NULL);
	if (!h)
		return;
	lua_State *L = mb_host_state(h);
	CHECK(luaL_dostring(L, LIST) == LUA_OK);
	char *names = strdup(lua_tostring(L, -1));
	lua_pop(L, 1);
	int n = 0;
	for (char *save = NULL, *name = strtok_r(names, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
		n++;
		if (!documented(name)) {
			fprintf(stderr, "  %s is not in docs/host-api.md\n", name);
			CHECK(!"every function is documented");
		}
	}
	CHECK(n > 40);
	free(names);
	/* the other way: every `mb.x(` or `mb.t.x(` of the doc is a function of mb (the PII pair
	 * exists only when detection is configured, which this host is not) */
	for (const char *p = strstr(doc, "`mb."); p; p = strstr(p + 1, "`mb.")) {
		char name[64];
		size_t k = 0;
		for (const char *q = p + 1; k < sizeof name - 1 && (*q == '.' || *q == '_' ||
							       (*q >= 'a' && *q <= 'z')); q++)
			name[k++] = *q;
		name[k] = 0;
		const char *after = p + 1 + k;
		if (*after != '(' && *after != '{')
			continue; /* a value (mb.null, mb.config) or a prose mention */
		if (!strcmp(name, "mb.pii_scan") || !strcmp(name, "mb.pii_sanitize"))
			continue;
		/* the PostgreSQL store's own (this host is on SQLite; test_store_pg.c has them) */
		if (!strcmp(name, "mb.db.listen") || !strcmp(name, "mb.db.notify") ||
		    !strcmp(name, "mb.db.stats") || !strncmp(name, "mb.db._", 7))
			continue;
		char code[160];
		snprintf(code, sizeof code, "return type(%s) == 'function'", name);
		CHECK(luaL_dostring(L, code) == LUA_OK);
		if (!lua_toboolean(L, -1)) {
			fprintf(stderr, "  docs/host-api.md lists %s, which the host does not have\n", name);
			CHECK(!"every documented function exists");
		}
		lua_pop(L, 1);
	}
	mb_host_free(h);
	mb_store_close(store);
	mb_workspaces_free(ws);
	CHECK(unit_rmtree(dir) == 0);
}

int main(void)
{
	mb_json_global_init();
	mb_codec_init();
	size_t doc_len;
	doc = unit_read_file("docs/host-api.md", &doc_len);
	if (!doc) {
		fprintf(stderr, "docs/host-api.md not found (run from the repository root)\n");
		return 1;
	}
	RUN(every_function_is_documented_and_every_documented_one_exists);
	free(doc);
	return UNIT_END();
}
