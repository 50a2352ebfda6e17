/* test_config.c - option layering (defaults < file < environment < flags) and refusal of bad
 * input with messages that name the option. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "json.h"
#include "unit.h"

static char errbuf[4096];

/* Runs mb_config_load with argv, capturing stderr into errbuf. */
static int load(mb_config *c, int argc, char **argv)
{
	fflush(stderr);
	FILE *tmp = tmpfile();
	int saved = dup(2);
	dup2(fileno(tmp), 2);
	int rc = mb_config_load(c, argc, argv);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	size_t n = fread(errbuf, 1, sizeof errbuf - 1, tmp);
	errbuf[n] = 0;
	fclose(tmp);
	return rc;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

TEST(defaults)
{
	mb_config c;
	char *argv[] = { "moonbox", "--data-dir", "/tmp/mb-cfg-none", NULL };
	CHECK(load(&c, 3, argv) == 0);
	CHECK(c.default_timeout_ms == 30000);
	CHECK(c.max_memory_mb == 1024);
	CHECK(c.max_output_bytes == 65536);
	CHECK(c.max_message_bytes == 16777216);
	CHECK(c.workers >= 1);
	CHECK_STR(c.log_level, "info");
	CHECK_STR(c.data_dir, "/tmp/mb-cfg-none");
}

TEST(layering)
{
	write_file("/tmp/mb-cfg.json", "{\"default_timeout_ms\": 111, \"max_queue\": 7, \"log_level\": \"debug\"}");
	setenv("MOONBOX_DEFAULT_TIMEOUT_MS", "222", 1);
	setenv("MOONBOX_MAX_QUEUE", "8", 1);
	mb_config c;
	char *argv[] = { "moonbox", "--config", "/tmp/mb-cfg.json", "--max-queue=9", NULL };
	CHECK(load(&c, 4, argv) == 0);
	CHECK(c.default_timeout_ms == 222); /* env beats file */
	CHECK(c.max_queue == 9);            /* flag beats env */
	CHECK_STR(c.log_level, "debug");    /* file beats default */
	unsetenv("MOONBOX_DEFAULT_TIMEOUT_MS");
	unsetenv("MOONBOX_MAX_QUEUE");
}

TEST(data_dir_default)
{
	mb_config c;
	setenv("XDG_DATA_HOME", "/tmp/mb-xdg", 1);
	char *argv[] = { "moonbox", NULL };
	CHECK(load(&c, 1, argv) == 0);
	CHECK_STR(c.data_dir, "/tmp/mb-xdg/moonbox");
	unsetenv("XDG_DATA_HOME");
}

TEST(refusals)
{
	mb_config c;
	char *a1[] = { "moonbox", "--frobnicate", "1", NULL };
	CHECK(load(&c, 3, a1) == -1);
	CHECK(strstr(errbuf, "unknown option \"--frobnicate\"") != NULL);
	char *a2[] = { "moonbox", "--max-timeout-ms", "abc", NULL };
	CHECK(load(&c, 3, a2) == -1);
	CHECK(strstr(errbuf, "max_timeout_ms must be an integer, got \"abc\"") != NULL);
	char *a3[] = { "moonbox", "--workers", "100000", NULL };
	CHECK(load(&c, 3, a3) == -1);
	CHECK(strstr(errbuf, "workers=100000 is out of range [0, 256]") != NULL);
	char *a4[] = { "moonbox", "--log-level", "loud", NULL };
	CHECK(load(&c, 3, a4) == -1);
	CHECK(strstr(errbuf, "log_level \"loud\" is not one of") != NULL);
	char *a5[] = { "moonbox", "--default-timeout-ms", "9000", "--max-timeout-ms", "8000", NULL };
	CHECK(load(&c, 5, a5) == -1);
	CHECK(strstr(errbuf, "default_timeout_ms=9000 is above max_timeout_ms=8000") != NULL);
	char *a6[] = { "moonbox", "--max-queue", NULL };
	CHECK(load(&c, 2, a6) == -1);
	CHECK(strstr(errbuf, "needs a value") != NULL);
	write_file("/tmp/mb-cfg-bad.json", "{\"default_timeout_ms\": 1,\n \"nope\": 2}");
	char *a7[] = { "moonbox", "--config", "/tmp/mb-cfg-bad.json", NULL };
	CHECK(load(&c, 3, a7) == -1);
	CHECK(strstr(errbuf, "unknown option \"nope\"") != NULL);
	write_file("/tmp/mb-cfg-bad.json", "{\"default_timeout_ms\": 1,,}");
	CHECK(load(&c, 3, a7) == -1);
	CHECK(strstr(errbuf, "/tmp/mb-cfg-bad.json:1:") != NULL);
	char *a8[] = { "moonbox", "--config", "/tmp/mb-does-not-exist.json", NULL };
	CHECK(load(&c, 3, a8) == -1);
	CHECK(strstr(errbuf, "No such file") != NULL);
	setenv("MOONBOX_MAX_MEMORY_MB", "-5", 1);
	char *a9[] = { "moonbox", NULL };
	CHECK(load(&c, 1, a9) == -1);
	CHECK(strstr(errbuf, "MOONBOX_MAX_MEMORY_MB: max_memory_mb=-5 is out of range") != NULL);
	unsetenv("MOONBOX_MAX_MEMORY_MB");
	/* replica_id starts session ids (a load balancer routes on it): letters, digits, - and _ */
	char *a10[] = { "moonbox", "--replica-id", "r1.x", NULL };
	CHECK(load(&c, 3, a10) == -1);
	CHECK(strstr(errbuf, "replica_id \"r1.x\" must be 1 to 32 letters, digits, - or _") != NULL);
	char *a11[] = { "moonbox", "--replica-id", "r 1", NULL };
	CHECK(load(&c, 3, a11) == -1);
	char *a12[] = { "moonbox", "--replica-id", "abcdefghijklmnopqrstuvwxyz0123456", NULL }; /* 33 */
	CHECK(load(&c, 3, a12) == -1);
	CHECK(strstr(errbuf, "value for replica_id is too long") != NULL);
	char *a13[] = { "moonbox", "--replica-id", "Edge_eu-1", NULL };
	CHECK(load(&c, 3, a13) == 0);
	CHECK_STR(c.replica_id, "Edge_eu-1");
	char *a14[] = { "moonbox", "--replica-id", "abcdefghijklmnopqrstuvwxyz012345", NULL }; /* 32 */
	CHECK(load(&c, 3, a14) == 0);
}

/* An option given as a JSON object in the file (pii_custom_patterns) is stored as compact JSON
 * text. jansson's output must go back to jansson's allocator, which mb_json_global_init routes
 * through mb_budget_malloc: found by tests/fuzz/fuzz_config.c (free() of such a block, ASan
 * bad-free), so load the file after the JSON setup as a test or an embedder may do. */
TEST(json_valued_option_after_json_setup)
{
	mb_json_global_init();
	write_file("/tmp/mb-cfg-obj.json", "{\"pii_custom_patterns\": {\"TICKET\": \"TCK-\\\\d+\"}}");
	mb_config c;
	char *argv[] = { "moonbox", "--config", "/tmp/mb-cfg-obj.json", NULL };
	CHECK(load(&c, 3, argv) == 0);
	CHECK_STR(c.pii_custom_patterns, "{\"TICKET\":\"TCK-\\\\d+\"}");
}

int main(void)
{
	unsetenv("MOONBOX_DATA_DIR");
	unsetenv("MOONBOX_CONFIG");
	RUN(defaults);
	RUN(layering);
	RUN(data_dir_default);
	RUN(refusals);
	RUN(json_valued_option_after_json_setup);
	return UNIT_END();
}
