/* test_skill_save.c - save_skill's metadata round trip (lua/mcp/skills.lua, skill_format.lua)
 * against a real host state and store: what an agent saves is what the index reads back.
 *
 * Found by tests/fuzz/fuzz_skill.c: code whose first lines are comments was written right below
 * the generated header, so the indexer read them as part of it ("-- @tool" in the code published
 * a skill saved without tool=true, "-- @param" added parameters, a second "-- @tool T" replaced
 * the title), and the next save stripped them from the code as if they were header lines; and a
 * description with a lone carriage return wrote a header whose comment ended there, and a
 * description line starting with "@" was read back as a tag. Since issue 31 a leading block of
 * "--" lines with such tags is what the indexer reads it as, a header: replaced by the generated
 * one (kept below it, it wrote "@tool" twice); comments without those tags stay code. */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "config.h"
#include "host.h"
#include "host_state.h"
#include "json.h"
#include "log.h"
#include "store.h"
#include "unit.h"
#include "workspace.h"

static mb_config cfg;
static mb_host *host;

/* Runs Lua in the host state with `skills` and `fs` in scope; the first result as a string. */
static const char *run(const char *code)
{
	return unit_host_run(host, "local skills = require('mcp.skills') local fs = mb.fs", code);
}

TEST(leading_comments_of_the_code_are_code)
{
	CHECK_STR(run("local d, err = skills.save('default', { name = 'sneaky', description = 'Adds one.',"
		      " code = '-- @tool Sneaky\\n-- @param x string a value\\nreturn function(x) return x + 1 end' })"
		      " if not d then return 'ERR ' .. tostring(err) end"
		      " local e = skills.get_tenant('default').skills.sneaky"
		      " return tostring(e.tool) .. ' ' .. #e.params .. ' ' .. e.description"),
		  "nil 0 Adds one.");
	/* a leading block with tags the indexer reads is a documentation block (a hand-written skill's
	 * header, as load_skill gives it): replaced by the generated one, not kept below it, where it
	 * wrote @tool twice (issue 31); a second save of the code as load_skill gives it writes the
	 * same file */
	CHECK_STR(run("local e = skills.get_tenant('default').skills.sneaky"
		      " local before = fs.read(mb.config.skills_dir .. '/sneaky.lua', 100000)"
		      " local d = skills.save('default', { name = 'sneaky', description = 'Adds one.', code = e.code })"
		      " local src = fs.read(mb.config.skills_dir .. '/sneaky.lua', 100000)"
		      " return src .. '|' .. tostring(src == before)"
		      " .. ' ' .. tostring(skills.get_tenant('default').skills.sneaky.tool)"),
		  "--- Adds one.\nreturn function(x) return x + 1 end|true nil");
	/* plain comments (no tag the indexer reads) stay code, below a blank line */
	CHECK_STR(run("local d, err = skills.save('default', { name = 'noted', description = 'Noted.',"
		      " code = '-- a note\\n-- @todo later\\nreturn 1' })"
		      " if not d then return 'ERR ' .. tostring(err) end"
		      " return fs.read(mb.config.skills_dir .. '/noted.lua', 100000)"),
		  "--- Noted.\n\n-- a note\n-- @todo later\nreturn 1");
}

TEST(a_comment_does_not_replace_the_title)
{
	CHECK_STR(run("local d, err = skills.save('default', { name = 'titled', description = 'Says hi.',"
		      " tool = true, title = 'Greeter', code = '-- @tool Other title\\nreturn \"hi\"' })"
		      " if not d then return 'ERR ' .. tostring(err) end"
		      " local e = skills.get_tenant('default').skills.titled"
		      " return tostring(e.tool and e.tool.title)"),
		  "Greeter");
}

/* Lua ends a comment at a lone "\r" too: a description holding one must not leave the rest of
 * its line outside the header comment, as code (the saved skill did not compile). */
TEST(a_carriage_return_in_the_description_stays_in_the_header)
{
	CHECK_STR(run("local d, err = skills.save('default', { name = 'cr', description = 'First\\rx = = 1\\r\\nthird',"
		      " code = 'return 1' })"
		      " if not d then return 'ERR ' .. tostring(err) end"
		      " local e = skills.get_tenant('default').skills.cr"
		      " return e.status .. ' ' .. string.format('%q', e.description)"),
		  "ok \"First\\\nx = = 1\\\nthird\"");
}

/* A description line that starts with "@" is description, not a tag. */
TEST(a_description_line_starting_with_at_is_not_a_tag)
{
	CHECK_STR(run("local d, err = skills.save('default', { name = 'at', description = '@tool Sneaky\\n@param x any',"
		      " code = 'return 1' })"
		      " if not d then return 'ERR ' .. tostring(err) end"
		      " local e = skills.get_tenant('default').skills.at"
		      " return tostring(e.tool) .. ' ' .. #e.params .. ' ' .. string.format('%q', e.description)"),
		  "nil 0 \"@tool Sneaky\\\n@param x any\"");
}

TEST(code_without_leading_comments_is_unchanged)
{
	CHECK_STR(run("skills.save('default', { name = 'plain', description = 'Plain.', code = 'return 1\\n' })"
		      " local src = fs.read(mb.config.skills_dir .. '/plain.lua', 100000)"
		      " return src"),
		  "--- Plain.\nreturn 1\n");
}

/* Two indexings of the same content that overlap (on PostgreSQL each waits in the store, so a
 * save and the watcher's rescan of the file it wrote, or two replicas, interleave): the one that
 * commits second finds the content already recorded instead of adding it again as a new
 * version. The overlap is made here by running the other one just before the first's tx. */
TEST(an_overlapping_index_of_the_same_content_adds_no_version)
{
	CHECK_STR(run("skills.save('default', { name = 'race', description = 'Races.', code = 'return 1' })"
		      " local tx, fired = mb.db.tx, false"
		      " mb.db.tx = function(fn, ...)"
		      "   if not fired then fired = true"
		      "     skills.save('default', { name = 'race', description = 'Races.', code = 'return 2' }) end"
		      "   return tx(fn, ...) end"
		      " local d, err = skills.save('default', { name = 'race', description = 'Races.', code = 'return 2' })"
		      " mb.db.tx = tx"
		      " if not d then return 'ERR ' .. tostring(err) end"
		      " local n = mb.db.row(\"SELECT count(*) AS n FROM skill_versions WHERE name = 'race'\").n"
		      " return n .. ' ' .. d.saved_version .. ' ' .. skills.get_tenant('default').skills.race.version"),
		  "2 2 2");
}

int main(void)
{
	char dir[64];
	if (unit_tmpdir(dir, sizeof dir, "/tmp/mb-skillsave-XXXXXX") != 0)
		return 1;
	char skills[300];
	snprintf(skills, sizeof skills, "%s/skills", dir);
	char *args[] = { "test", "--data-dir", dir, "--skills-dir", skills, "--log-level", "error", NULL };
	if (mb_config_load(&cfg, 7, args) != 0)
		return 1;
	mb_log_set_level(cfg.log_level);
	mb_json_global_init();
	mb_codec_init();
	char err[512], path[4200];
	mb_store *store;
	snprintf(path, sizeof path, "%s/moonbox.db", dir);
	if (mb_store_open(&store, path, 1000, err, sizeof err) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	snprintf(path, sizeof path, "%s/workspaces", dir);
	mb_workspace_limits wl = { 1 << 20, 1 << 24, 100 };
	mb_workspaces *wss = mb_workspaces_new(path, &wl, err, sizeof err);
	mb_host_io io = { unit_host_discard, NULL, NULL };
	mb_host_deps deps = { uv_default_loop(), store, wss, NULL, NULL, NULL };
	host = mb_host_new(&cfg, &io, &deps);
	if (!host)
		return 1;
	RUN(leading_comments_of_the_code_are_code);
	RUN(a_comment_does_not_replace_the_title);
	RUN(a_carriage_return_in_the_description_stays_in_the_header);
	RUN(a_description_line_starting_with_at_is_not_a_tag);
	RUN(code_without_leading_comments_is_unchanged);
	RUN(an_overlapping_index_of_the_same_content_adds_no_version);
	mb_host_shutdown(host);
	uv_run(uv_default_loop(), UV_RUN_DEFAULT);
	mb_host_free(host);
	mb_store_close(store);
	mb_workspaces_free(wss);
	unit_rmtree(dir);
	return UNIT_END();
}
