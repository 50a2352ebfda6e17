/* fuzz_protocol.c - libFuzzer target for the protocol path: arbitrary bytes, cut into lines, go
 * through the host exactly as stdio lines do (JSON decode, envelope validation, dispatch, tool
 * argument checks, response encoding). There is no execution pool, so tools/call execute_code
 * stops at submit with a clean error; the store and workspaces are real (under /tmp/moonbox-fuzz),
 * so skill and workspace tools run for real. Every response must be one line of valid JSON.
 * Build and run: tests/fuzz/run.sh fuzz_protocol
 * FUZZ_OPTIONS: -detect_leaks=0
 * (the host keeps its state between inputs, so LeakSanitizer's per-input check only costs time;
 * ASan still checks every access) */
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "host.h"
#include "json.h"
#include "codec.h"
#include "store.h"
#include "workspace.h"

static mb_config cfg;
static mb_host *host;

static int on_send(void *ud, uint64_t session, uint64_t exchange, int final, int status, char *data,
		       size_t len, char *why, size_t whylen)
{
	(void)ud;
	(void)why;
	(void)whylen;
	(void)status;
	(void)session;
	(void)exchange;
	(void)final;
	if (len == 0 || data[len - 1] != '\n' || memchr(data, '\n', len - 1))
		abort(); /* exactly one line per message */
	json_error_t e;
	json_t *v = json_loadb(data, len - 1, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!v)
		abort(); /* we must never emit invalid JSON */
	json_decref(v);
	free(data);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!host) {
		char *args[] = { "fuzz", "--data-dir", "/tmp/moonbox-fuzz", "--tools-page-size", "1", NULL };
		if (mb_config_load(&cfg, 5, args) != 0)
			abort();
		mb_json_global_init();
		mb_codec_init();
		mkdir(cfg.data_dir, 0700);
		char err[512], path[4200];
		static mb_store *store;
		snprintf(path, sizeof path, "%s/moonbox.db", cfg.data_dir);
		if (mb_store_open(&store, path, 1000, err, sizeof err) != 0)
			abort();
		snprintf(path, sizeof path, "%s/workspaces", cfg.data_dir);
		mb_workspace_limits wl = { 1 << 20, 1 << 24, 1000 };
		mb_workspaces *ws = mb_workspaces_new(path, &wl, err, sizeof err);
		if (!ws)
			abort();
		mb_host_io io = { on_send, NULL, NULL };
		mb_host_deps deps = { uv_default_loop(), store, ws };
		host = mb_host_new(&cfg, &io, &deps);
		if (!host)
			abort();
	}
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char *line = malloc(n + 1);
		memcpy(line, p, n);
		line[n] = 0;
		mb_host_handle_line(host, line, n);
		free(line);
		p += n + 1;
	}
	return 0;
}
