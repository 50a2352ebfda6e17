/* fuzz_config.c - libFuzzer target: the configuration file (src/config.c) and the mcpServers
 * block (lua/mcp/upstream_config.lua), with the options that are parsed further at start
 * (pii_custom_patterns and pii_disabled_types through src/pii_config.c).
 *
 * Each input is written as a JSON config file and loaded with mb_config_load exactly as
 * `moonbox --config FILE` does (the data directory is given as a flag, which wins over the
 * file). Then, as the server's start does: the PII detector is built from the options
 * (mb_pii_from_config), and the mcpServers text goes through upstream_config.parse in the host
 * state. The raw input is also given to upstream_config.parse directly as an mcpServers text.
 * Invariants, any violation aborts:
 *  - mb_config_load returns 0 or -1 (-1 always with a message on stderr, which is captured);
 *    on 0 every integer option lies in its documented range (mb_config_option), the cross-checks
 *    hold (defaults at most the maxima), and loading the same file again gives the same
 *    configuration;
 *  - mb_pii_from_config returns 0 or -1 with a message naming the option or the key file;
 *  - upstream_config.parse returns a list or raises a string naming mcpServers (never a Lua
 *    runtime error); a returned list is sorted by name, each server has a name of 1..64 bytes,
 *    a unique Lua identifier, transport stdio with a non-empty command without NUL, or http with
 *    an http(s) URL, and a timeout within [1, 3600000].
 * Build and run: tests/fuzz/run.sh fuzz_config
 * FUZZ_OPTIONS: -detect_leaks=0
 * (the host is kept between inputs; ASan still checks every access)
 */
#include "fuzz_host.h"

static char cfg_path[400];

static const char parse_check[] =
	"local ucfg = require('mcp.upstream_config')\n"
	"local ok, list = pcall(ucfg.parse, FZ_TEXT)\n"
	"if not ok then\n"
	"  if type(list) ~= 'string' then return 'NON-STRING ERROR ' .. tostring(list) end\n"
	"  if not list:find('mcpServers', 1, true) then return 'ERROR WITHOUT mcpServers: ' .. list end\n"
	"  if list:find('%.lua:%d+:') then return 'LUA RUNTIME ERROR: ' .. list end\n"
	"  return 'ok'\n"
	"end\n"
	"local idents, prev = {}, nil\n"
	"for i, s in ipairs(list) do\n"
	"  if type(s.name) ~= 'string' or #s.name < 1 or #s.name > 64 then return 'BAD NAME ' .. tostring(s.name) end\n"
	"  if prev and not (prev < s.name) then return 'NOT SORTED' end\n"
	"  prev = s.name\n"
	"  if type(s.ident) ~= 'string' or not s.ident:match('^[%a_][%w_]*$') then return 'BAD IDENT ' .. tostring(s.ident) end\n"
	"  if idents[s.ident] then return 'DUPLICATE IDENT ' .. s.ident end\n"
	"  idents[s.ident] = true\n"
	"  if s.transport == 'stdio' then\n"
	"    if type(s.command) ~= 'string' or s.command == '' or s.command:find('%z') then return 'BAD COMMAND' end\n"
	"    for _, a in ipairs(s.args) do if type(a) ~= 'string' or a:find('%z') then return 'BAD ARG' end end\n"
	"    for k, v in pairs(s.env) do if type(v) ~= 'string' or k == '' or k:find('[=%z]') then return 'BAD ENV' end end\n"
	"  elseif s.transport == 'http' then\n"
	"    if type(s.url) ~= 'string' or not s.url:match('^https?://') or s.url:find('[%s%c]') then return 'BAD URL' end\n"
	"    for k, v in pairs(s.headers) do if k:find('[%c:%s]') or v:find('[\\r\\n%z]') then return 'BAD HEADER' end end\n"
	"  else\n"
	"    return 'BAD TRANSPORT ' .. tostring(s.transport)\n"
	"  end\n"
	"  if math.type(s.timeout_ms) ~= 'integer' or s.timeout_ms < 1 or s.timeout_ms > 3600000 then return 'BAD TIMEOUT' end\n"
	"  local rok, why = pcall(ucfg.refusal, s, { name = 'some_tool', annotations = { readOnlyHint = true } })\n"
	"  if not rok then return 'REFUSAL RAISED ' .. tostring(why) end\n"
	"end\n"
	"return 'ok'\n";

static void check_parse(const char *text, size_t len)
{
	lua_State *L = mb_host_state(fz.host);
	lua_pushlstring(L, text, len);
	lua_setglobal(L, "FZ_TEXT");
	const char *r = fz_lua(parse_check);
	if (strcmp(r, "ok") != 0)
		FZ_FAIL("upstream_config.parse of %.*s: %s", (int)(len > 500 ? 500 : len), text, r);
	fz_check_bad("upstream_config");
}

/* Loads the file with config.c's messages captured: stderr (the FILE) points at a memory stream
 * for the call; sanitizer reports still go to file descriptor 2. Returns mb_config_load's
 * result and the message. */
static int load(mb_config *c, char *msg, size_t cap)
{
	char *args[] = { "fuzz", "--data-dir", fz.dir, "--config", cfg_path, NULL };
	char *text = NULL;
	size_t len = 0;
	FILE *saved = stderr;
	stderr = open_memstream(&text, &len);
	int rc = mb_config_load(c, 5, args);
	fclose(stderr);
	stderr = saved;
	snprintf(msg, cap, "%s", text ? text : "");
	free(text);
	return rc;
}

/* Where each string option lives in mb_config, found once by loading a file that sets every
 * one of them to a marker (config_file, log_level and isolation, which the file cannot set
 * freely, by flag and by their known values), so a new string option needs no change here. */
static size_t str_off[64];
static int nstr_off;

static void find_string_options(void)
{
	char path[400], *text = NULL;
	size_t tlen = 0;
	snprintf(path, sizeof path, "%s/markers.json", fz.dir);
	FILE *t = open_memstream(&text, &tlen);
	fputc('{', t);
	mb_option_doc od;
	int first = 1;
	for (size_t i = 0; mb_config_option(i, &od) == 0; i++)
		if (!od.is_int && strcmp(od.name, "config_file") && strcmp(od.name, "log_level") &&
		    strcmp(od.name, "isolation") && strcmp(od.name, "replica_id")) {
			/* (those take a fixed set of values; replica_id letters, digits, - and _) */
			fprintf(t, "%s\"%s\": \"\\u0001%s\"", first ? "" : ",", od.name, od.name);
			first = 0;
		}
	fputc('}', t);
	fclose(t);
	FILE *f = fopen(path, "w");
	if (!f || fwrite(text, 1, tlen, f) != tlen || fclose(f) != 0)
		FZ_FAIL("cannot write %s", path);
	free(text);
	static mb_config mc;
	char *args[] = { "fuzz", "--config", path, "--log-level", "emergency", "--isolation", "thread",
			 "--replica-id", "fuzz_replica_marker", NULL };
	if (mb_config_load(&mc, 9, args) != 0)
		FZ_FAIL("the marker configuration was refused (a new string option with a fixed set of values?)");
	for (size_t i = 0; mb_config_option(i, &od) == 0; i++) {
		if (od.is_int)
			continue;
		char want[128];
		if (!strcmp(od.name, "config_file"))
			snprintf(want, sizeof want, "%s", path);
		else if (!strcmp(od.name, "log_level"))
			snprintf(want, sizeof want, "emergency");
		else if (!strcmp(od.name, "isolation"))
			snprintf(want, sizeof want, "thread");
		else if (!strcmp(od.name, "replica_id"))
			snprintf(want, sizeof want, "fuzz_replica_marker");
		else
			snprintf(want, sizeof want, "\001%s", od.name);
		const char *base = (const char *)&mc, *hit = NULL;
		for (size_t k = 0; k + strlen(want) < sizeof mc && !hit; k++)
			if (memcmp(base + k, want, strlen(want) + 1) == 0)
				hit = base + k;
		if (!hit || nstr_off == 64)
			FZ_FAIL("cannot find string option %s in mb_config", od.name);
		str_off[nstr_off++] = (size_t)(hit - base);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fz.host) {
		fz_host_start("config", NULL);
		snprintf(cfg_path, sizeof cfg_path, "%s/fuzz-config.json", fz.dir);
		find_string_options();
	}
	fz_begin();
	FILE *f = fopen(cfg_path, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
		FZ_FAIL("cannot write %s", cfg_path);

	static mb_config c, c2;
	char msg[4096];
	int rc = load(&c, msg, sizeof msg);
	if (rc != 0 && rc != -1)
		FZ_FAIL("mb_config_load returned %d", rc);
	if (rc == -1 && !strstr(msg, "moonbox: "))
		FZ_FAIL("mb_config_load refused the file without a message");
	if (rc == 0) {
		/* every integer option in its range: read them back through the dump of a copy whose
		 * string options are blanked (a string value could hold a line that looks like one) */
		static mb_config blank;
		blank = c;
		for (int i = 0; i < nstr_off; i++)
			((char *)&blank)[str_off[i]] = 0;
		char *dump = NULL;
		size_t dlen = 0;
		FILE *m = open_memstream(&dump, &dlen);
		mb_config_dump(&blank, m);
		fclose(m);
		mb_option_doc od;
		for (size_t i = 0; mb_config_option(i, &od) == 0; i++) {
			if (!od.is_int)
				continue;
			char key[128];
			snprintf(key, sizeof key, "moonbox: config %s = ", od.name);
			const char *at = strstr(dump, key);
			if (!at)
				FZ_FAIL("option %s missing from the dump", od.name);
			long long v = strtoll(at + strlen(key), NULL, 10);
			if (v < od.min || v > od.max)
				FZ_FAIL("option %s = %lld outside [%lld, %lld]", od.name, v, (long long)od.min,
					(long long)od.max);
		}
		free(dump);
		if (c.default_timeout_ms > c.max_timeout_ms || c.default_memory_mb > c.max_memory_mb ||
		    c.default_instruction_limit > c.max_instruction_limit)
			FZ_FAIL("a default above its maximum was accepted");
		if (strcmp(c.data_dir, fz.dir) != 0)
			FZ_FAIL("the --data-dir flag did not win over the file: %s", c.data_dir);
		if (load(&c2, msg, sizeof msg) != 0 || memcmp(&c, &c2, sizeof c) != 0)
			FZ_FAIL("loading the same file twice gave different configurations");

		mb_pii_detector *d = NULL;
		unsigned char key[MB_PII_KEY_BYTES];
		char err[1024] = "";
		int prc = mb_pii_from_config(&c, &d, key, err, sizeof err);
		if (prc == 0) {
			if (!d)
				FZ_FAIL("mb_pii_from_config succeeded without a detector");
			mb_pii_detector_free(d);
		} else if (prc != -1 || !err[0] || (!strstr(err, "pii_") && !strstr(err, "key file"))) {
			FZ_FAIL("mb_pii_from_config: %d: %s", prc, err);
		}
		check_parse(c.mcp_servers, strlen(c.mcp_servers));
	}
	check_parse((const char *)data, size);
	return 0;
}
