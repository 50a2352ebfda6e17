/* fuzz_skill.c - libFuzzer target: skill files and their metadata (lua/mcp/skill_format.lua,
 * lua/mcp/skills.lua) through the real indexing path, and save_skill.
 *
 * Byte 0 picks the form; the rest is split at NUL bytes:
 *   0: the rest is skills/fz.lua (a leading doc-comment header: description, @param, @return,
 *      @tool, @input_schema {json}, @prompt, @resource ...);
 *   1: SKILL.md (front matter name/description/tool/title/input_schema/resource...) NUL init.lua,
 *      as the directory skill skills/fz/;
 *   2: save_skill as an agent calls it: description NUL code NUL title NUL returns, with bits of
 *      byte 0 for tool and prompt.
 * Forms 0 and 1 are indexed by the module's own index_skill(t, "fz", "file", true), which is what
 * the directory watcher's debounced scan calls (reached with debug.getupvalue; nothing is
 * reimplemented); form 2 calls skills.save. Then list_skills, load_skill, tools/list,
 * prompts/list and resources/list are called through the protocol. Invariants (abort):
 *  - indexing never raises; the entry's status is "ok" or "error", an "ok" version compiles, an
 *    "error" carries a message;
 *  - a skill saved with save_skill reads back with the description, params and title it was
 *    saved with (the header save_skill writes parses back to the same metadata);
 *  - every answer is one line of valid JSON and never a JSON-RPC internal error, and nothing in
 *    the host logs an internal error.
 * Build and run: tests/fuzz/run.sh fuzz_skill
 * FUZZ_OPTIONS: -detect_leaks=0 (the host keeps caches between inputs; ASan still checks every access)
 */
#include <sys/stat.h>

#include "fuzz_host.h"

static char file_path[512], dir_path[512], md_path[600], init_path[600];

static const char setup[] =
	"local skills = require('mcp.skills')\n"
	FZ_LUA_UPV
	"FZ_INDEX = upv(upv(skills.get_tenant, 'scan'), 'index_skill')\n"
	"FZ_T = skills.get_tenant('default')\n"
	"return FZ_T.dir\n";

/* Indexes skills/fz as the watcher would and checks the entry. */
static const char index_step[] =
	"local fmt = require('mcp.skill_format')\n"
	"local ok, e = pcall(FZ_INDEX, FZ_T, 'fz', 'file', true)\n"
	"if not ok then return 'RAISED ' .. tostring(e) end\n"
	"if not e then return 'ok' end\n"
	"local row = mb.db.row(\"SELECT status, error FROM skills WHERE tenant = 'default' AND name = 'fz'\")\n"
	"if row.status ~= 'ok' and row.status ~= 'error' then return 'STATUS ' .. tostring(row.status) end\n"
	"if row.status == 'error' and (type(row.error) ~= 'string' or row.error == '') then return 'ERROR WITHOUT MESSAGE' end\n"
	"if e.code and e.status == 'ok' and not fmt.compile('fz', e.code) then return 'OK VERSION DOES NOT COMPILE' end\n"
	"return 'ok'\n";

/* save_skill with the pieces in FZ_ARGS; checks the round trip of the metadata. */
static const char save_step[] =
	"local skills = require('mcp.skills')\n"
	"local a = FZ_ARGS\n"
	"local ok, d, err = pcall(skills.save, 'default', a)\n"
	"if not ok then return 'RAISED ' .. tostring(d) end\n"
	"if not d then\n"
	"  if type(err) ~= 'string' or err == '' then return 'REFUSED WITHOUT A MESSAGE' end\n"
	"  return 'ok'\n"
	"end\n"
	"local e = FZ_T.skills.fz\n"
	"if not e then return 'SAVED BUT NOT INDEXED' end\n"
	"if e.status ~= 'ok' then return 'SAVED SKILL HAS STATUS ' .. tostring(e.status) .. ': ' .. tostring(e.error) end\n"
	"-- line breaks are written as lines (a lone CR becomes LF), then the ends are trimmed\n"
	"local want = a.description:gsub('\\r\\n?', '\\n'):gsub('^%s+', ''):gsub('%s+$', '')\n"
	"if e.description ~= want then\n"
	"  return string.format('DESCRIPTION CHANGED: %q -> %q', want, tostring(e.description))\n"
	"end\n"
	"if (e.returns or '') ~= (a.returns and a.returns:gsub('[\\r\\n]+', ' '):gsub('^%s+', ''):gsub('%s+$', '') or '') then\n"
	"  return string.format('RETURNS CHANGED: %q -> %q', tostring(a.returns), tostring(e.returns))\n"
	"end\n"
	"if a.tool then\n"
	"  local title = a.title and a.title:gsub('[\\r\\n]+', ' '):gsub('^%s+', ''):gsub('%s+$', '')\n"
	"  if title == '' then title = nil end\n"
	"  if not e.tool then return 'SAVED AS A TOOL, NOT PUBLISHED' end\n"
	"  -- metadata is stored as JSON: invalid UTF-8 comes back with U+FFFD (json.md, lenient mode)\n"
	"  if e.tool.title ~= title and (title == nil or utf8.len(title)) then\n"
	"    local got = tostring(e.tool.title)\n"
	"    local i = 1\n"
	"    while i <= #got and got:byte(i) == (title or ''):byte(i) do i = i + 1 end\n"
	"    return string.format('TITLE CHANGED at byte %d: %q -> %q', i, tostring(title), got)\n"
	"  end\n"
	"elseif e.tool then\n"
	"  return 'PUBLISHED AS A TOOL WITHOUT tool=true'\n"
	"end\n"
	"if (e.prompt ~= nil) ~= (a.prompt == true) then return 'PROMPT FLAG CHANGED' end\n"
	"if #e.params ~= 0 then return 'PARAMS APPEARED: ' .. e.params[1].name end\n"
	"return 'ok'\n";

static void call(const char *method, const char *params)
{
	static int id;
	char line[600];
	snprintf(line, sizeof line, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\",\"params\":%s}", ++id,
		 method, params);
	fz_line(line);
}

static void write_file(const char *path, const uint8_t *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
		FZ_FAIL("cannot write %s", path);
}

/* The i-th NUL-separated piece of data (i from 0); the last piece runs to the end. */
static const uint8_t *piece(const uint8_t *data, size_t size, int i, size_t *n)
{
	const uint8_t *p = data, *end = data + size;
	for (; i > 0 && p <= end; i--) {
		const uint8_t *z = memchr(p, 0, (size_t)(end - p));
		p = z ? z + 1 : end + 1;
	}
	if (p > end) {
		*n = 0;
		return NULL;
	}
	const uint8_t *z = memchr(p, 0, (size_t)(end - p));
	*n = (size_t)((z ? z : end) - p);
	return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fz.host) {
		fz_host_start("skill", NULL);
		const char *dir = fz_lua(setup);
		snprintf(file_path, sizeof file_path, "%s/fz.lua", dir);
		snprintf(dir_path, sizeof dir_path, "%s/fz", dir);
		snprintf(md_path, sizeof md_path, "%s/SKILL.md", dir_path);
		snprintf(init_path, sizeof init_path, "%s/init.lua", dir_path);
	}
	fz_begin();
	if (size < 1)
		return 0;
	int form = data[0] % 3;
	data++;
	size--;
	unlink(file_path);
	unlink(md_path);
	unlink(init_path);
	rmdir(dir_path);
	const char *r;
	if (form == 0 || form == 1) {
		if (form == 0) {
			write_file(file_path, data, size);
		} else {
			size_t n0, n1;
			const uint8_t *md = piece(data, size, 0, &n0), *code = piece(data, size, 1, &n1);
			mkdir(dir_path, 0700);
			write_file(md_path, md, n0);
			write_file(init_path, code ? code : (const uint8_t *)"", n1);
		}
		r = fz_lua(index_step);
	} else {
		lua_State *L = mb_host_state(fz.host);
		lua_createtable(L, 0, 8);
		lua_pushliteral(L, "fz");
		lua_setfield(L, -2, "name");
		static const char *keys[] = { "description", "code", "title", "returns" };
		for (int i = 0; i < 4; i++) {
			size_t n;
			const uint8_t *p = piece(data, size, i, &n);
			if (!p)
				continue;
			lua_pushlstring(L, (const char *)p, n);
			lua_setfield(L, -2, keys[i]);
		}
		lua_pushboolean(L, (data[-1] >> 2) & 1);
		lua_setfield(L, -2, "tool");
		lua_pushboolean(L, (data[-1] >> 3) & 1);
		lua_setfield(L, -2, "prompt");
		lua_setglobal(L, "FZ_ARGS");
		r = fz_lua(save_step);
	}
	if (strcmp(r, "ok") != 0)
		FZ_FAIL("skill form %d: %s", form, r);
	fz_check_bad("skill indexing");

	call("tools/call", "{\"name\":\"list_skills\",\"arguments\":{}}");
	call("tools/call", "{\"name\":\"load_skill\",\"arguments\":{\"name\":\"fz\"}}");
	call("tools/list", "{}");
	call("prompts/list", "{}");
	call("resources/list", "{}");
	call("resources/templates/list", "{}");
	fz_check_bad("skill tools");
	return 0;
}
