/* test_seed.c - the first-run copy of the shipped examples (seed.c) and the share_dir default
 * (config.c): what is copied, what is never touched, and the option's values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "seed.h"
#include "unit.h"

static char root[256];

static void put(const char *rel, const char *text)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", root, rel);
	FILE *f = fopen(p, "w");
	fputs(text, f);
	fclose(f);
}

static void dir(const char *rel)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", root, rel);
	mkdir(p, 0755);
}

/* The content of root/rel, or "" when it cannot be read. */
static const char *get(const char *rel)
{
	static char buf[4096];
	char p[512];
	snprintf(p, sizeof p, "%s/%s", root, rel);
	FILE *f = fopen(p, "r");
	if (!f)
		return "";
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static int exists(const char *rel)
{
	char p[512];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", root, rel);
	return lstat(p, &st) == 0;
}

static void config(mb_config *c, const char *share)
{
	memset(c, 0, sizeof *c);
	snprintf(c->share_dir, sizeof c->share_dir, "%s", share);
	snprintf(c->skills_dir, sizeof c->skills_dir, "%s/data/skills", root);
	snprintf(c->catalog_dir, sizeof c->catalog_dir, "%s/data/catalog", root);
	snprintf(c->workflows_dir, sizeof c->workflows_dir, "%s/data/workflows", root);
}

static void fresh(void)
{
	CHECK(unit_rmtree(root) == 0);
	CHECK(mkdir(root, 0700) == 0);
	dir("share");
	dir("share/skills");
	dir("share/skills/csv");
	dir("share/catalog");
	put("share/skills/a.lua", "return 1\n");
	put("share/skills/csv/SKILL.md", "---\nname: csv\n---\n");
	put("share/skills/csv/init.lua", "return {}\n");
	put("share/catalog/README.md", "catalog\n");
	dir("data");
}

TEST(copies_both_directories_on_first_run)
{
	fresh();
	char share[512];
	snprintf(share, sizeof share, "%s/share", root);
	char link[512];
	snprintf(link, sizeof link, "%s/share/skills/link.lua", root);
	CHECK(symlink("/etc/passwd", link) == 0);
	mb_config c;
	config(&c, share);
	CHECK(mb_seed_examples(&c) == 2);
	CHECK_STR(get("data/skills/a.lua"), "return 1\n");
	CHECK_STR(get("data/skills/csv/init.lua"), "return {}\n");
	CHECK_STR(get("data/skills/csv/SKILL.md"), "---\nname: csv\n---\n");
	CHECK_STR(get("data/catalog/README.md"), "catalog\n");
	CHECK(!exists("data/skills/link.lua")); /* symbolic links are not followed or copied */
	struct stat st;
	CHECK(stat(c.skills_dir, &st) == 0 && (st.st_mode & 0777) == 0700);
	/* no temporary directory is left beside it */
	char tmp[600];
	snprintf(tmp, sizeof tmp, "data/skills.seed-%ld", (long)getpid());
	CHECK(!exists(tmp));
}

TEST(workflows_are_seeded_too)
{
	fresh();
	dir("share/workflows");
	put("share/workflows/intake.yaml", "name: intake\nsteps:\n  - lua: \"1\"\n");
	char share[512];
	snprintf(share, sizeof share, "%s/share", root);
	mb_config c;
	config(&c, share);
	CHECK(mb_seed_examples(&c) == 3);
	CHECK_STR(get("data/workflows/intake.yaml"), "name: intake\nsteps:\n  - lua: \"1\"\n");
}

TEST(never_again_once_the_directory_exists)
{
	fresh();
	char share[512];
	snprintf(share, sizeof share, "%s/share", root);
	mb_config c;
	config(&c, share);
	CHECK(mb_seed_examples(&c) == 2);
	char p[600];
	snprintf(p, sizeof p, "%s/data/skills/a.lua", root);
	CHECK(unlink(p) == 0);
	put("data/catalog/README.md", "mine\n");
	CHECK(mb_seed_examples(&c) == 0);
	CHECK(!exists("data/skills/a.lua"));           /* a deleted example stays deleted */
	CHECK_STR(get("data/catalog/README.md"), "mine\n");
}

TEST(an_existing_empty_directory_is_left_alone)
{
	fresh();
	dir("data/skills");
	char share[512];
	snprintf(share, sizeof share, "%s/share", root);
	mb_config c;
	config(&c, share);
	CHECK(mb_seed_examples(&c) == 1); /* the catalog only */
	CHECK(!exists("data/skills/a.lua"));
	CHECK(exists("data/catalog/README.md"));
}

TEST(none_or_a_missing_share_dir_copies_nothing)
{
	fresh();
	mb_config c;
	config(&c, "none");
	CHECK(mb_seed_examples(&c) == 0);
	char missing[512];
	snprintf(missing, sizeof missing, "%s/no-such-share", root);
	config(&c, missing);
	CHECK(mb_seed_examples(&c) == 0);
	CHECK(!exists("data/skills") && !exists("data/catalog"));
}

TEST(a_failed_copy_leaves_no_directory)
{
	fresh();
	if (geteuid() == 0) { /* root reads an unreadable file anyway */
		printf("     (a_failed_copy_leaves_no_directory: skipped as root)\n");
		return;
	}
	char p[512], share[512];
	snprintf(p, sizeof p, "%s/share/skills/a.lua", root);
	CHECK(chmod(p, 0) == 0);
	snprintf(share, sizeof share, "%s/share", root);
	mb_config c;
	config(&c, share);
	CHECK(mb_seed_examples(&c) == 1);
	CHECK(!exists("data/skills"));
	CHECK(exists("data/catalog/README.md"));
}

TEST(share_dir_defaults_to_prefix_share_beside_the_binary)
{
	mb_config c;
	char *argv[] = { "moonbox", "--data-dir", "/tmp/mb-seed-none", NULL };
	CHECK(mb_config_load(&c, 3, argv) == 0);
	char exe[4096], want[4200];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	CHECK(n > 0);
	exe[n > 0 ? n : 0] = 0;
	*strrchr(exe, '/') = 0; /* .../build/tests/test_seed -> .../build/tests */
	*strrchr(exe, '/') = 0; /* -> .../build */
	snprintf(want, sizeof want, "%s/share/moonbox", exe);
	CHECK_STR(c.share_dir, want);
	char *argv2[] = { "moonbox", "--data-dir", "/tmp/mb-seed-none", "--share-dir", "none", NULL };
	CHECK(mb_config_load(&c, 5, argv2) == 0);
	CHECK_STR(c.share_dir, "none");
}

int main(void)
{
	snprintf(root, sizeof root, "/tmp/mb-test-seed-%ld", (long)getpid());
	RUN(copies_both_directories_on_first_run);
	RUN(workflows_are_seeded_too);
	RUN(never_again_once_the_directory_exists);
	RUN(an_existing_empty_directory_is_left_alone);
	RUN(none_or_a_missing_share_dir_copies_nothing);
	RUN(a_failed_copy_leaves_no_directory);
	RUN(share_dir_defaults_to_prefix_share_beside_the_binary);
	if (unit_rmtree(root) != 0)
		return 1;
	return UNIT_END();
}
