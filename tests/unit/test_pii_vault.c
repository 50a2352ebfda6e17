/* test_pii_vault.c - the PII vault of the host (lua/mcp/pii.lua) against a real host state, a
 * real store file and the real detector and key: tenants are isolated, a collision gives the new
 * value a longer token and the answer is rewritten, bindings survive a new host on the same
 * database, and sanitize/restore round-trip. Calls the Lua module directly (mb_host_state). */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec.h"
#include "config.h"
#include "host.h"
#include "host_state.h"
#include "json.h"
#include "pii_config.h"
#include "store.h"
#include "unit.h"
#include "workspace.h"

static mb_config cfg;
static mb_store *store;
static mb_workspaces *wss;
static mb_pii_detector *det;
static unsigned char key[MB_PII_KEY_BYTES];
static mb_host *host;

static void start(void)
{
	char err[512], path[4200];
	snprintf(path, sizeof path, "%s/moonbox.db", cfg.data_dir);
	if (mb_store_open(&store, path, 1000, err, sizeof err) != 0) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	mb_host_io io = { unit_host_discard, NULL, NULL };
	mb_host_deps deps = { uv_default_loop(), store, wss, det, key, NULL };
	host = mb_host_new(&cfg, &io, &deps);
	if (!host)
		exit(1);
}

static void stop(void)
{
	mb_host_shutdown(host);
	mb_host_free(host);
	mb_store_close(store);
}

/* Runs Lua in the host state with `pii = require("mcp.pii")`; returns the first result as a
 * string (static buffer) or "ERR: message". */
static const char *run(const char *code)
{
	return unit_host_run(host, "local pii = require('mcp.pii')", code);
}

TEST(tenants_are_isolated)
{
	CHECK_STR(run("local s = pii.sanitize('a', 'mail ann@example.org') return s:match('%[EMAIL_%x+%]') ~= nil"),
		  "true");
	/* tenant a restores it, tenant b does not */
	CHECK_STR(run("local s = pii.sanitize('a', 'ann@example.org') local r = pii.restore('a', s) return r"),
		  "ann@example.org");
	CHECK_STR(run("local s = pii.sanitize('a', 'ann@example.org') local r, u = pii.restore('b', s)"
		      " return r == s and #u == 1 and u[1] == s"), "true");
}

TEST(same_value_same_token_and_restore)
{
	CHECK_STR(run("local a = pii.sanitize('a', 'x 4111 1111 1111 1111') local b = pii.sanitize('a', "
		      "'y 4111 1111 1111 1111') return a:sub(3) == b:sub(3)"), "true");
	CHECK_STR(run("local s = pii.sanitize('a', 'ssn 123-45-6789 and ann@example.org') return (pii.restore('a', s))"),
		  "ssn 123-45-6789 and ann@example.org");
}

TEST(collision_gets_a_longer_token_and_the_answer_is_rewritten)
{
	/* bind the token that bob@example.org would get to another value, as a colliding HMAC would */
	CHECK_STR(run("local t = mb.pii_token('EMAIL', 'bob@example.org', 8)"
		      " mb.db.run('INSERT INTO pii_vault VALUES (?, ?, ?, ?, 0, 0)', 'c', t, 'EMAIL', 'eve@example.org')"
		      " return t"), run("return mb.pii_token('EMAIL', 'bob@example.org', 8)"));
	const char *t8 = strdup(run("return mb.pii_token('EMAIL', 'bob@example.org', 8)"));
	const char *t12 = strdup(run("return mb.pii_token('EMAIL', 'bob@example.org', 12)"));
	CHECK(strlen(t8) == 16 && strlen(t12) == 20);
	/* the loop-thread sanitizer picks the longer token */
	char code[512];
	snprintf(code, sizeof code, "return (pii.sanitize('c', 'to bob@example.org'))");
	char want[128];
	snprintf(want, sizeof want, "to %s", t12);
	CHECK_STR(run(code), want);
	snprintf(code, sizeof code, "return (pii.restore('c', '%s %s'))", t8, t12);
	CHECK_STR(run(code), "eve@example.org bob@example.org");
	/* a worker-minted result with the taken token is rewritten before it leaves */
	snprintf(code, sizeof code,
		 "local res = { structured_quoted = mb.json_raw('\"hi %s\"'),"
		 " structured_json = mb.json_raw('{\"r\":\"%s\"}'),"
		 " pii_found = { { token = '%s', type = 'EMAIL', value = 'bob@example.org' } } }"
		 " pii.after_execution('c', res)"
		 " return mb.json_raw_text(res.structured_quoted) .. ' ' .. mb.json_raw_text(res.structured_json)",
		 t8, t8, t8);
	snprintf(want, sizeof want, "\"hi %s\" {\"r\":\"%s\"}", t12, t12);
	CHECK_STR(run(code), want);
	free((void *)t8);
	free((void *)t12);
}

TEST(bindings_survive_a_new_host)
{
	const char *s = strdup(run("return (pii.sanitize('p', 'call +44 20 7946 0958'))"));
	stop();
	start();
	char code[256];
	snprintf(code, sizeof code, "return (pii.restore('p', '%s'))", s);
	CHECK_STR(run(code), "call +44 20 7946 0958");
	CHECK_STR(run("return mb.db.row(\"SELECT count(*) AS n FROM pii_vault WHERE tenant = 'p'\").n"), "1");
	free((void *)s);
}

TEST(restore_leaves_malformed_and_unknown_tokens)
{
	CHECK_STR(run("return (pii.restore('a', '[EMAIL_123] [email_12345678] [EMAIL_ABCDEF12] [EMAIL_00000000]'))"),
		  "[EMAIL_123] [email_12345678] [EMAIL_ABCDEF12] [EMAIL_00000000]");
	CHECK_STR(run("local _, u = pii.restore('a', '[EMAIL_00000000] [EMAIL_00000000]') return #u"), "1");
}

int main(void)
{
	char dir[64];
	if (unit_tmpdir(dir, sizeof dir, "/tmp/mb-vault-XXXXXX") != 0)
		return 1;
	char *args[] = { "test", "--data-dir", dir, NULL };
	if (mb_config_load(&cfg, 3, args) != 0)
		return 1;
	mb_json_global_init();
	mb_codec_init();
	char err[512], path[4200];
	if (mb_pii_from_config(&cfg, &det, key, err, sizeof err) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	snprintf(path, sizeof path, "%s/workspaces", dir);
	mb_workspace_limits wl = { 1 << 20, 1 << 24, 100 };
	wss = mb_workspaces_new(path, &wl, err, sizeof err);
	start();
	RUN(tenants_are_isolated);
	RUN(same_value_same_token_and_restore);
	RUN(collision_gets_a_longer_token_and_the_answer_is_rewritten);
	RUN(bindings_survive_a_new_host);
	RUN(restore_leaves_malformed_and_unknown_tokens);
	stop();
	mb_workspaces_free(wss);
	mb_pii_detector_free(det);
	unit_rmtree(dir);
	return UNIT_END();
}
