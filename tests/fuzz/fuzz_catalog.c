/* fuzz_catalog.c - libFuzzer target: catalog file import (lua/mcp/catalog.lua, catalog_text.lua,
 * the store's FTS5 index) through the real path a file in catalog_dir takes.
 *
 * Each input is written as CATALOG_DIR/fuzz.json and imported by the catalog's own
 * import_file(), inside one transaction followed by resolve(), exactly as the watcher's
 * debounced reload does (the local functions are reached through debug.getupvalue from
 * catalog.import; nothing is reimplemented). Then the three discovery tools are called through
 * the protocol (get_tool_definition for up to three imported entries, search_tools with a word
 * of the first entry, list_tool_categories). Invariants, any violation aborts:
 *  - import_file never raises and returns "imported", "unchanged" or "error"; an error leaves a
 *    non-empty, valid UTF-8 message in catalog_sources and the file's last good entries indexed;
 *  - the FTS index has exactly one row per catalog entry (no desynchronised index);
 *  - the built-in sandbox API entries (source "moonbox") are never displaced by a file;
 *  - every answer is one line of valid JSON, never a JSON-RPC internal error, and
 *    get_tool_definition of an entry the import reported finds it.
 * Build and run: tests/fuzz/run.sh fuzz_catalog
 * FUZZ_OPTIONS: -detect_leaks=0 (the host keeps caches between inputs; ASan still checks every access)
 */
#include "fuzz_host.h"

static char path[512];
static char builtin[32];

static const char setup[] =
	"local catalog = require('mcp.catalog')\n"
	FZ_LUA_UPV
	"local ensure = upv(catalog.import, 'ensure_started')\n"
	"local start = upv(ensure, 'start')\n"
	"local schedule = upv(upv(start, 'on_change'), 'schedule')\n"
	"FZ_IMPORT = upv(schedule, 'import_file')\n"
	"FZ_RESOLVE = upv(schedule, 'resolve')\n"
	"ensure()\n"
	"assert(catalog.state.ready, tostring(catalog.state.error))\n"
	"return mb.db.row(\"SELECT count(*) AS n FROM catalog_tools WHERE source = 'moonbox'\").n\n";

static const char step[] =
	"local function entries()\n"
	"  local out = {}\n"
	"  for _, e in ipairs(mb.db.query(\"SELECT category, name, definition FROM catalog_tools WHERE source = 'file:fuzz.json' ORDER BY id\")) do\n"
	"    out[#out + 1] = e.category .. '\\0' .. e.name .. '\\0' .. e.definition\n"
	"  end\n"
	"  return table.concat(out, '\\n')\n"
	"end\n"
	"local before = entries()\n"
	"local ok, r = pcall(function()\n"
	"  local out\n"
	"  mb.db.tx(function() out = FZ_IMPORT('fuzz.json'); FZ_RESOLVE() end)\n"
	"  return out\n"
	"end)\n"
	"if not ok then return 'RAISED ' .. tostring(r) end\n"
	"if r ~= 'imported' and r ~= 'unchanged' and r ~= 'error' then return 'BAD RESULT ' .. tostring(r) end\n"
	"local db = mb.db\n"
	"local c = db.row('SELECT (SELECT count(*) FROM catalog_tools) AS t, (SELECT count(*) FROM catalog_fts) AS f,'\n"
	"  .. \" (SELECT count(*) FROM catalog_tools WHERE source = 'moonbox') AS m\")\n"
	"if c.t ~= c.f then return 'FTS ROWS ' .. c.f .. ' FOR ' .. c.t .. ' ENTRIES' end\n"
	"FZ_BUILTIN = FZ_BUILTIN or c.m\n"
	"if c.m ~= FZ_BUILTIN then return 'BUILTIN ENTRIES ' .. c.m .. ' INSTEAD OF ' .. FZ_BUILTIN end\n"
	"local src = db.row(\"SELECT status, error FROM catalog_sources WHERE source = 'file:fuzz.json'\")\n"
	"if r == 'error' then\n"
	"  if not src or type(src.error) ~= 'string' or src.error == '' or not utf8.len(src.error) then\n"
	"    return 'ERROR WITHOUT A USABLE MESSAGE'\n"
	"  end\n"
	"  if entries() ~= before then return 'A FAILED IMPORT CHANGED THE INDEXED ENTRIES' end\n"
	"end\n"
	"FZ_CALLS = {}\n"
	"for i, e in ipairs(db.query(\"SELECT category, name FROM catalog_tools WHERE source = 'file:fuzz.json' ORDER BY id LIMIT 3\")) do\n"
	"  FZ_CALLS[#FZ_CALLS + 1] = mb.json_encode({ category = e.category, tool_name = e.name })\n"
	"  if i == 1 then FZ_CALLS[#FZ_CALLS + 1] = mb.json_encode({ query = e.name }) end\n"
	"end\n"
	"return r\n";

static void call_tool(const char *name, const char *args_json)
{
	static int id;
	size_t n = strlen(name) + strlen(args_json) + 200;
	char *line = malloc(n);
	snprintf(line, n, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
		 "\"arguments\":%s}}", ++id, name, args_json);
	fz.sent = 0;
	fz_line(line);
	free(line);
	if (fz.sent != 1)
		FZ_FAIL("tools/call %s gave %zu messages", name, fz.sent);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fz.host) {
		fz_host_start("catalog", NULL);
		snprintf(builtin, sizeof builtin, "%s", fz_lua(setup));
		snprintf(path, sizeof path, "%s/fuzz.json", fz.cfg.catalog_dir);
	}
	fz_begin();
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
		FZ_FAIL("cannot write %s", path);
	const char *r = fz_lua(step);
	if (strcmp(r, "imported") && strcmp(r, "unchanged") && strcmp(r, "error"))
		FZ_FAIL("catalog import of %zu bytes: %s", size, r);
	fz_check_bad("catalog import");

	/* the entries of the file, through the discovery tools (arguments encoded by the host) */
	lua_State *L = mb_host_state(fz.host);
	lua_getglobal(L, "FZ_CALLS");
	int n = (int)luaL_len(L, -1);
	for (int i = 1; i <= n; i++) {
		lua_rawgeti(L, -1, i);
		char *args = strdup(lua_tostring(L, -1));
		lua_pop(L, 1);
		int search = strncmp(args, "{\"query\"", 8) == 0;
		call_tool(search ? "search_tools" : "get_tool_definition", args);
		if (!search && strstr(fz.last, "\"isError\":true"))
			FZ_FAIL("get_tool_definition does not find an imported entry: %s\n%s", args, fz.last);
		free(args);
	}
	lua_pop(L, 1);
	call_tool("list_tool_categories", "{}");
	fz_check_bad("catalog tools");
	return 0;
}
