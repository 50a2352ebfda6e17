/* test_workspace.c - the workspace module on real files in a mkdtemp directory: the string
 * layer's refusals with their exact messages, every escape we could think of through symbolic
 * links (planted as the target, as a parent, pointing outside and inside), hard links and FIFOs
 * (with both resolvers: openat2 and the openat/O_NOFOLLOW walk), the three quotas with exact
 * messages, replacement accounting, 4 concurrent writers against max_total_bytes, atomic writes
 * that leave no temporary files, stale temporary files, sorted recursive listing, tenants; then
 * the sandbox functions through mb_sandbox_run (read/write/list/delete/json, error shapes, a read
 * larger than the memory limit) and the host's `workspace` table. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <lauxlib.h>
#include <lualib.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"
#include "config.h"
#include "json.h"
#include "sandbox.h"
#include "sandbox_setup.h"
#include "unit.h"
#include "workspace.h"

static char base[256];
static char err[1024];
static mb_config cfg;

/* ---- helpers ---------------------------------------------------------------------------- */

static void pathf(char *out, size_t cap, const char *sub, const char *tenant, const char *rel)
{
	snprintf(out, cap, "%s/%s/workspaces%s%s%s%s", base, sub, tenant ? "/" : "", tenant ? tenant : "",
		 rel ? "/" : "", rel ? rel : "");
}

static mb_workspaces *reg_new(const char *sub, int64_t file, int64_t total, int64_t files, int fallback)
{
	char root[512];
	pathf(root, sizeof root, sub, NULL, NULL);
	mb_workspace_limits lim = { file, total, files };
	mb_workspaces *r = mb_workspaces_new(root, &lim, err, sizeof err);
	if (!r)
		fprintf(stderr, "  mb_workspaces_new: %s\n", err);
	else if (fallback)
		mb_workspaces_force_fallback(r, 1);
	return r;
}

static mb_workspace *get(mb_workspaces *r, const char *tenant)
{
	mb_workspace *ws = mb_workspaces_get(r, tenant, err, sizeof err);
	if (!ws)
		fprintf(stderr, "  mb_workspaces_get(%s): %s\n", tenant, err);
	return ws;
}

static int wr(mb_workspace *ws, const char *path, const char *data)
{
	err[0] = 0;
	return mb_workspace_write(ws, path, strlen(path), data, strlen(data), err, sizeof err);
}

static int wrn(mb_workspace *ws, const char *path, size_t n, char fill)
{
	char *buf = malloc(n + 1);
	memset(buf, fill, n);
	err[0] = 0;
	int rc = mb_workspace_write(ws, path, strlen(path), buf, n, err, sizeof err);
	free(buf);
	return rc;
}

/* Reads path; returns rc and leaves the text (or "") in got. */
static char got[1 << 16];
static size_t got_len;
static int rd(mb_workspace *ws, const char *path, size_t plen)
{
	char *data;
	err[0] = 0;
	got[0] = 0;
	got_len = 0;
	int rc = mb_workspace_read(ws, path, plen, &data, &got_len, err, sizeof err);
	if (rc == 0) {
		if (got_len < sizeof got) {
			memcpy(got, data, got_len);
			got[got_len] = 0;
		}
		free(data);
	}
	return rc;
}

static int del(mb_workspace *ws, const char *path)
{
	err[0] = 0;
	return mb_workspace_delete(ws, path, strlen(path), err, sizeof err);
}

static int st(mb_workspace *ws, const char *path, mb_workspace_info *info)
{
	err[0] = 0;
	return mb_workspace_stat(ws, path, strlen(path), info, err, sizeof err);
}

#define EXPECT(call, want_rc, want_msg) do { int rc_ = (call); \
	if (rc_ != (want_rc) || strcmp(err, (want_msg)) != 0) \
		fprintf(stderr, "  %s:%d: rc %d \"%s\"\n     wanted %d \"%s\"\n", __FILE__, __LINE__, rc_, err, \
			(want_rc), (want_msg)); \
	CHECK(rc_ == (want_rc)); CHECK_STR(err, (want_msg)); } while (0)

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	static char buf[4096];
	*n = fread(buf, 1, sizeof buf - 1, f);
	buf[*n] = 0;
	fclose(f);
	return buf;
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	fputs(text, f);
	fclose(f);
}

static int exists(const char *path)
{
	struct stat s;
	return lstat(path, &s) == 0;
}

static int tmp_files_seen;
static int count_tmp(const char *p, const struct stat *s, int flag, struct FTW *f)
{
	(void)s, (void)flag;
	if (strncmp(p + f->base, ".mb-tmp-", 8) == 0)
		tmp_files_seen++;
	return 0;
}

static int tmp_files_under(const char *dir)
{
	tmp_files_seen = 0;
	nftw(dir, count_tmp, 16, FTW_PHYS);
	return tmp_files_seen;
}

static int rm_entry(const char *p, const struct stat *s, int flag, struct FTW *f)
{
	(void)s, (void)f;
	if (flag == FTW_DP)
		rmdir(p);
	else
		unlink(p);
	return 0;
}

/* ---- the string layer ------------------------------------------------------------------- */

static const char *prefix96(const char *p)
{
	static char buf[97];
	memcpy(buf, p, 96);
	buf[96] = 0;
	return buf;
}

TEST(path_rules)
{
	mb_workspaces *r = reg_new("rules", 1 << 20, 1 << 24, 1000, 0);
	mb_workspace *ws = get(r, "t");
	CHECK(ws != NULL);
	if (!ws)
		return;
	char c300[301], c2000[2001], want[600];
	memset(c300, 'x', 300);
	c300[300] = 0;
	for (int i = 0; i < 2000; i++)
		c2000[i] = i % 2 ? '/' : 'a';
	c2000[1999] = 'b';
	c2000[2000] = 0;
	struct { const char *p; size_t n; const char *msg; } cases[] = {
		{ "../x", 4, "%s ../x: '.' and '..' are not allowed as path components" },
		{ "..", 2, "%s ..: '.' and '..' are not allowed as path components" },
		{ ".", 1, "%s .: '.' and '..' are not allowed as path components" },
		{ "a/../../x", 9, "%s a/../../x: '.' and '..' are not allowed as path components" },
		{ "a/./b", 5, "%s a/./b: '.' and '..' are not allowed as path components" },
		{ "a/..", 4, "%s a/..: '.' and '..' are not allowed as path components" },
		{ "/etc/passwd", 11, "%s /etc/passwd: the path must be relative to the workspace (it starts with /)" },
		{ "", 0, "%s: the path is empty" },
		{ "a//b", 4, "%s a//b: the path has an empty component (// or a trailing /)" },
		{ "a/", 2, "%s a/: the path has an empty component (// or a trailing /)" },
		{ "a\0b", 3, "%s a\\x00b: the path contains a NUL byte at offset 1" },
		{ "ok\0/../../etc/passwd", 20, "%s ok\\x00/../../etc/passwd: the path contains a NUL byte at offset 2" },
		{ "a\nb", 3, "%s a\\x0ab: the path contains a control character (0x0a) at offset 1" },
		{ "a\x1b[2Jb", 6, "%s a\\x1b[2Jb: the path contains a control character (0x1b) at offset 1" },
		{ "x\x7f", 2, "%s x\\x7f: the path contains a control character (0x7f) at offset 1" },
		{ ".mb-tmp-1", 9, "%s .mb-tmp-1: names starting with .mb-tmp- are reserved for temporary files" },
		{ "d/.mb-tmp-x/y", 13, "%s d/.mb-tmp-x/y: names starting with .mb-tmp- are reserved for temporary files" },
		{ c300, 300, "%s %s...: a path component is 300 bytes, above the limit of 255" },
		{ c2000, 2000, "%s %s...: the path is 2000 bytes, above the limit of 1024" },
	};
	const char *ops[] = { "read", "write", "delete", "stat", "list" };
	size_t ncases = sizeof cases / sizeof cases[0];
	for (size_t i = 0; i < ncases; i++) {
		for (int o = 0; o < 5; o++) {
			if (o == 4 && cases[i].n == 0)
				continue; /* list("") is the whole workspace */
			/* messages show the first 96 bytes of a long path */
			snprintf(want, sizeof want, cases[i].msg, ops[o], cases[i].n > 96 ? prefix96(cases[i].p) : "");
			char *data = NULL;
			size_t n;
			mb_workspace_info info;
			mb_workspace_entry *e = NULL;
			int rc;
			err[0] = 0;
			switch (o) {
			case 0: rc = mb_workspace_read(ws, cases[i].p, cases[i].n, &data, &n, err, sizeof err); break;
			case 1: rc = mb_workspace_write(ws, cases[i].p, cases[i].n, "x", 1, err, sizeof err); break;
			case 2: rc = mb_workspace_delete(ws, cases[i].p, cases[i].n, err, sizeof err); break;
			case 3: rc = mb_workspace_stat(ws, cases[i].p, cases[i].n, &info, err, sizeof err); break;
			default: rc = mb_workspace_list(ws, cases[i].p, cases[i].n, &e, &n, err, sizeof err); break;
			}
			if (rc != -EINVAL || strcmp(err, want) != 0)
				fprintf(stderr, "  case %zu op %s: rc %d \"%s\"\n   wanted \"%s\"\n", i, ops[o], rc, err, want);
			CHECK(rc == -EINVAL);
			CHECK_STR(err, want);
			CHECK(data == NULL && e == NULL);
		}
	}
	/* nothing was created by any of that */
	int64_t files = -1, bytes = -1;
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 0 && bytes == 0);
	char dir[512];
	pathf(dir, sizeof dir, "rules", "t", NULL);
	DIR *d = opendir(dir);
	int entries = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		entries += de->d_name[0] != '.';
	closedir(d);
	CHECK(entries == 0);

	/* unusual but valid names */
	const char *valid[] = { ("dir with space/\xc3\xbcnic\xc3\xb6" "de.txt"), "a\\b", "-x", ".hidden", "x..y", "...",
				"\xff\xfe.txt", "a/b/c/d/e/f/g.txt" };
	for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
		CHECK(wr(ws, valid[i], valid[i]) == 0);
		CHECK(rd(ws, valid[i], strlen(valid[i])) == 0);
		CHECK_STR(got, valid[i]);
	}
	/* the longest path: exactly 1024 bytes, and one byte more */
	char longp[1026];
	size_t o = 0;
	for (int i = 0; i < 10; i++) {
		memset(longp + o, 'a' + i, 100);
		o += 100;
		longp[o++] = '/';
	}
	memset(longp + o, 'z', 1024 - o);
	longp[1024] = 0;
	CHECK(mb_workspace_write(ws, longp, 1024, "deep", 4, err, sizeof err) == 0);
	CHECK(rd(ws, longp, 1024) == 0 && strcmp(got, "deep") == 0);
	longp[1024] = 'z';
	longp[1025] = 0;
	CHECK(mb_workspace_write(ws, longp, 1025, "deep", 4, err, sizeof err) == -EINVAL);
	CHECK(strstr(err, "the path is 1025 bytes, above the limit of 1024") != NULL);
	/* a component of exactly 255 bytes */
	char c255[256];
	memset(c255, 'k', 255);
	c255[255] = 0;
	CHECK(wr(ws, c255, "ok") == 0);
	mb_workspaces_free(r);
}

/* ---- symbolic links, hard links, FIFOs --------------------------------------------------- */

static void plant(const char *sub, char *outside, size_t cap)
{
	char p[600], q[800];
	pathf(p, sizeof p, sub, NULL, NULL);
	mkdir(base, 0700);
	snprintf(q, sizeof q, "%s/%s", base, sub);
	mkdir(q, 0700);
	mkdir(p, 0700);
	pathf(p, sizeof p, sub, "t", NULL);
	mkdir(p, 0700);
	snprintf(outside, cap, "%s/%s/outside", base, sub);
	mkdir(outside, 0700);
	snprintf(q, sizeof q, "%s/secret.txt", outside);
	spit(q, "SECRET");

	pathf(p, sizeof p, sub, "t", "real.txt");
	spit(p, "real");
	pathf(p, sizeof p, sub, "t", "sub");
	mkdir(p, 0700);
	pathf(p, sizeof p, sub, "t", "ln");
	symlink(q, p); /* absolute, to a file outside */
	pathf(p, sizeof p, sub, "t", "lnd");
	symlink(outside, p); /* to the directory outside */
	pathf(p, sizeof p, sub, "t", "rel");
	symlink("../../outside/secret.txt", p); /* relative, escaping */
	pathf(p, sizeof p, sub, "t", "inner");
	symlink("real.txt", p); /* pointing inside */
	pathf(p, sizeof p, sub, "t", "innerdir");
	symlink("sub", p); /* a directory inside */
	pathf(p, sizeof p, sub, "t", "sub/lnd2");
	symlink(outside, p); /* a nested link to the outside directory */
	pathf(p, sizeof p, sub, "t", "dangling");
	symlink("/nonexistent/x", p);
	pathf(p, sizeof p, sub, "t", "hl.txt");
	link(q, p); /* a hard link to the outside file */
	pathf(p, sizeof p, sub, "t", "fifo");
	mkfifo(p, 0600);
}

static void outside_untouched(const char *outside)
{
	char q[800];
	size_t n;
	snprintf(q, sizeof q, "%s/secret.txt", outside);
	const char *s = slurp(q, &n);
	CHECK(s && strcmp(s, "SECRET") == 0);
	DIR *d = opendir(outside);
	int entries = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		entries += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	CHECK(entries == 1); /* only secret.txt: nothing was created outside */
}

static void attacks(const char *sub, int fallback)
{
	char outside[600], p[600];
	plant(sub, outside, sizeof outside);
	mb_workspaces *r = reg_new(sub, 1 << 20, 1 << 24, 1000, fallback);
	mb_workspace *ws = get(r, "t");
	CHECK(ws != NULL);
	if (!ws)
		return;
	/* counted at open: real.txt and the hard link (regular files), nothing else */
	int64_t files, bytes;
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 2 && bytes == 4 + 6);

	const char *links[] = { "ln", "lnd/secret.txt", "rel", "inner", "innerdir/x", "sub/lnd2/secret.txt",
				"dangling", "lnd", "lnd/new.txt", "lnd/deeper/new.txt", "sub/lnd2/new.txt",
				"innerdir/new.txt", "dangling/x" };
	char want[300];
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		const char *l = links[i];
		snprintf(want, sizeof want, "read %s: symbolic links are not followed in the workspace", l);
		EXPECT(rd(ws, l, strlen(l)), -ELOOP, want);
		CHECK(got_len == 0);
		snprintf(want, sizeof want, "write %s: symbolic links are not followed in the workspace", l);
		EXPECT(wr(ws, l, "PWNED"), -ELOOP, want);
		snprintf(want, sizeof want, "delete %s: symbolic links are not followed in the workspace", l);
		EXPECT(del(ws, l), -ELOOP, want);
		mb_workspace_info info;
		snprintf(want, sizeof want, "stat %s: symbolic links are not followed in the workspace", l);
		EXPECT(st(ws, l, &info), -ELOOP, want);
	}
	mb_workspace_entry *e;
	size_t n;
	EXPECT(mb_workspace_list(ws, "lnd", 3, &e, &n, err, sizeof err), -ELOOP,
	       "list lnd: symbolic links are not followed in the workspace");
	EXPECT(mb_workspace_list(ws, "innerdir", 8, &e, &n, err, sizeof err), -ELOOP,
	       "list innerdir: symbolic links are not followed in the workspace");
	outside_untouched(outside);
	/* the links themselves are still there, still links */
	struct stat s;
	pathf(p, sizeof p, sub, "t", "ln");
	CHECK(lstat(p, &s) == 0 && S_ISLNK(s.st_mode));
	pathf(p, sizeof p, sub, "t", "lnd");
	CHECK(lstat(p, &s) == 0 && S_ISLNK(s.st_mode));
	pathf(p, sizeof p, sub, "t", "sub/lnd2");
	CHECK(lstat(p, &s) == 0 && S_ISLNK(s.st_mode));
	/* the real file behind "inner" is unchanged */
	CHECK(rd(ws, "real.txt", 8) == 0 && strcmp(got, "real") == 0);

	/* a hard link to an outside file is not read; a write replaces the link, not the file */
	EXPECT(rd(ws, "hl.txt", 6), -EMLINK,
	       "read hl.txt: the file has 2 hard links; hard-linked files are not read in the workspace");
	CHECK(got_len == 0);
	CHECK(wr(ws, "hl.txt", "mine") == 0);
	outside_untouched(outside);
	CHECK(rd(ws, "hl.txt", 6) == 0 && strcmp(got, "mine") == 0);
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 2 && bytes == 4 + 4);

	/* a FIFO is refused at once (opened O_NONBLOCK, then fstat), for every operation */
	uint64_t t0 = mb_now_ns();
	EXPECT(rd(ws, "fifo", 4), -EINVAL, "read fifo: not a regular file (FIFOs, sockets and devices are not read)");
	CHECK(mb_now_ns() - t0 < 1000000000ull);
	EXPECT(wr(ws, "fifo", "x"), -EINVAL, "write fifo: not a regular file");
	EXPECT(del(ws, "fifo"), -EINVAL, "delete fifo: not a regular file");
	mb_workspace_info info;
	EXPECT(st(ws, "fifo", &info), -EINVAL, "stat fifo: not a regular file");
	pathf(p, sizeof p, sub, "t", "fifo");
	CHECK(lstat(p, &s) == 0 && S_ISFIFO(s.st_mode));

	/* directories where files are expected, and files where directories are */
	EXPECT(rd(ws, "sub", 3), -EISDIR, "read sub: is a directory");
	EXPECT(wr(ws, "sub", "x"), -EISDIR, "write sub: is a directory");
	EXPECT(del(ws, "sub"), -EISDIR, "delete sub: is a directory (only files are deleted)");
	CHECK(st(ws, "sub", &info) == 0 && info.is_dir == 1 && info.size == 0);
	EXPECT(wr(ws, "real.txt/x", "x"), -ENOTDIR, "write real.txt/x: a parent of the path is not a directory");
	EXPECT(rd(ws, "real.txt/x", 10), -ENOTDIR, "read real.txt/x: a parent of the path is not a directory");
	EXPECT(mb_workspace_list(ws, "real.txt", 8, &e, &n, err, sizeof err), -ENOTDIR,
	       "list real.txt: a parent of the path is not a directory");

	/* listing shows regular files only: no links, no FIFO */
	CHECK(mb_workspace_list(ws, NULL, 0, &e, &n, err, sizeof err) == 0);
	CHECK(n == 2);
	if (n == 2) {
		CHECK_STR(e[0].path, "hl.txt");
		CHECK_STR(e[1].path, "real.txt");
	}
	mb_workspace_entries_free(e, n);
	outside_untouched(outside);
	mb_workspaces_free(r);
}

TEST(symlinks_hardlinks_fifos_openat2)
{
	attacks("attack2", 0);
}

TEST(symlinks_hardlinks_fifos_fallback)
{
	attacks("attackfb", 1);
}

/* A symbolic link swapped in for a parent directory after the workspace was opened is refused
 * just the same (resolution happens at each call, by the kernel). */
TEST(symlink_planted_later)
{
	for (int fb = 0; fb < 2; fb++) {
		const char *sub = fb ? "laterfb" : "later2";
		char outside[600], p[600], q[800];
		mb_workspaces *r = reg_new(sub, 1 << 20, 1 << 24, 1000, fb);
		mb_workspace *ws = get(r, "t");
		CHECK(wr(ws, "d/f.txt", "one") == 0);
		snprintf(outside, sizeof outside, "%s/%s/out", base, sub);
		mkdir(outside, 0700);
		pathf(p, sizeof p, sub, "t", "d/f.txt");
		unlink(p);
		pathf(p, sizeof p, sub, "t", "d");
		CHECK(rmdir(p) == 0);
		CHECK(symlink(outside, p) == 0);
		EXPECT(wr(ws, "d/f.txt", "two"), -ELOOP, "write d/f.txt: symbolic links are not followed in the workspace");
		snprintf(q, sizeof q, "%s/f.txt", outside);
		CHECK(!exists(q));
		mb_workspaces_free(r);
	}
}

/* ---- tenants -------------------------------------------------------------------------- */

TEST(tenants)
{
	mb_workspaces *r = reg_new("tenants", 1 << 20, 1 << 24, 1000, 0);
	const char *bad[] = { "", "a/b", "..", ".", "a b", "\xc3\xa9", "x\n",
			      "12345678901234567890123456789012345678901234567890123456789012345" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = 0;
		CHECK(mb_workspaces_get(r, bad[i], err, sizeof err) == NULL);
		CHECK(strstr(err, "a tenant name is 1 to 64 characters of A-Z a-z 0-9 _ -") != NULL);
	}
	CHECK(mb_workspaces_get(r, NULL, err, sizeof err) == NULL);
	mb_workspaces_get(r, "a/b", err, sizeof err);
	CHECK_STR(err, "tenant \"a/b\": a tenant name is 1 to 64 characters of A-Z a-z 0-9 _ -");
	mb_workspace *a = get(r, "Tenant_1-x");
	mb_workspace *b = get(r, "1234567890123456789012345678901234567890123456789012345678901234");
	CHECK(a && b && a != b);
	CHECK(get(r, "Tenant_1-x") == a);
	CHECK_STR(mb_workspace_tenant(a), "Tenant_1-x");
	CHECK(mb_workspace_limits_of(a)->max_files == 1000);
	/* separate directories: a file of one tenant is not visible to another */
	CHECK(wr(a, "f.txt", "A") == 0);
	CHECK(rd(b, "f.txt", 5) == -ENOENT);
	char p[600];
	struct stat s;
	pathf(p, sizeof p, "tenants", NULL, NULL);
	CHECK(stat(p, &s) == 0 && (s.st_mode & 0777) == 0700);
	pathf(p, sizeof p, "tenants", "Tenant_1-x", NULL);
	CHECK(stat(p, &s) == 0 && (s.st_mode & 0777) == 0700);
	pathf(p, sizeof p, "tenants", "Tenant_1-x", "f.txt");
	CHECK(stat(p, &s) == 0 && (s.st_mode & 0777) == 0600);
	/* a tenant directory that is a symbolic link is refused */
	char q[800];
	pathf(p, sizeof p, "tenants", "evil", NULL);
	snprintf(q, sizeof q, "%s/tenants", base);
	CHECK(symlink(q, p) == 0);
	CHECK(mb_workspaces_get(r, "evil", err, sizeof err) == NULL);
	CHECK_STR(err, "workspace of tenant evil: its path is not a directory (a symbolic link?)");
	/* concurrent first use from several threads gives one object: see concurrent_writers */
	mb_workspaces_free(r);

	mb_workspace_limits zero = { 0, 1, 1 };
	CHECK(mb_workspaces_new("/tmp/never", &zero, err, sizeof err) == NULL);
	CHECK_STR(err, "workspaces: every quota must be positive");
}

/* ---- reading, writing, listing ---------------------------------------------------------- */

TEST(read_write_basics)
{
	mb_workspaces *r = reg_new("basics", 1 << 20, 1 << 24, 1000, 0);
	mb_workspace *ws = get(r, "t");
	/* binary data with NUL bytes round-trips */
	char bin[256];
	for (int i = 0; i < 256; i++)
		bin[i] = (char)i;
	CHECK(mb_workspace_write(ws, "bin/all.bin", 11, bin, 256, err, sizeof err) == 0);
	CHECK(rd(ws, "bin/all.bin", 11) == 0 && got_len == 256 && memcmp(got, bin, 256) == 0);
	/* empty file */
	CHECK(wr(ws, "empty", "") == 0);
	CHECK(rd(ws, "empty", 5) == 0 && got_len == 0);
	/* a write replaces the whole content */
	CHECK(wr(ws, "r.txt", "a long first version") == 0);
	CHECK(wr(ws, "r.txt", "short") == 0);
	CHECK(rd(ws, "r.txt", 5) == 0 && strcmp(got, "short") == 0);
	/* missing things */
	EXPECT(rd(ws, "nope", 4), -ENOENT, "read nope: no such file or directory");
	EXPECT(rd(ws, "nodir/x", 7), -ENOENT, "read nodir/x: no such file or directory");
	EXPECT(del(ws, "nope"), -ENOENT, "delete nope: no such file or directory");
	EXPECT(del(ws, "nodir/x"), -ENOENT, "delete nodir/x: no such file or directory");
	mb_workspace_info info;
	EXPECT(st(ws, "nope", &info), -ENOENT, "stat nope: no such file or directory");
	/* stat */
	int64_t now = (int64_t)time(NULL) * 1000;
	CHECK(st(ws, "r.txt", &info) == 0 && info.size == 5 && info.is_dir == 0);
	CHECK(info.mtime_ms > now - 60000 && info.mtime_ms < now + 60000);
	/* delete */
	CHECK(del(ws, "r.txt") == 0);
	CHECK(rd(ws, "r.txt", 5) == -ENOENT);
	CHECK(del(ws, "r.txt") == -ENOENT);
	/* no temporary file is left anywhere */
	char dir[600];
	pathf(dir, sizeof dir, "basics", "t", NULL);
	CHECK(tmp_files_under(dir) == 0);
	/* a file that grew above max_file_bytes (smaller limit on reopen) is not read */
	CHECK(wrn(ws, "big", 1500, 'b') == 0);
	mb_workspaces_free(r);
	r = reg_new("basics", 1000, 1 << 24, 1000, 0);
	ws = get(r, "t");
	EXPECT(rd(ws, "big", 3), -EFBIG, "read big: the file is 1500 bytes, above workspace_max_file_bytes=1000");
	CHECK(mb_workspace_error_code(-EFBIG)[0] == 'q');
	mb_workspaces_free(r);
}

TEST(listing)
{
	mb_workspaces *r = reg_new("listing", 1 << 20, 1 << 24, 1000, 0);
	mb_workspace *ws = get(r, "t");
	mb_workspace_entry *e;
	size_t n = 99;
	CHECK(mb_workspace_list(ws, NULL, 0, &e, &n, err, sizeof err) == 0 && n == 0 && e == NULL);
	const char *names[] = { "b.txt", "a/z.txt", "a/b/c.txt", "A.txt", "a.txt", "a/b/d/e/f.txt" };
	for (size_t i = 0; i < 6; i++)
		CHECK(wr(ws, names[i], names[i]) == 0);
	CHECK(wr(ws, "empty/dir/x", "x") == 0 && del(ws, "empty/dir/x") == 0); /* leaves empty dirs */
	/* byte order: '.' (0x2e) sorts before '/' (0x2f), upper case before lower case */
	const char *sorted[] = { "A.txt", "a.txt", "a/b/c.txt", "a/b/d/e/f.txt", "a/z.txt", "b.txt" };
	int64_t now = (int64_t)time(NULL) * 1000;
	CHECK(mb_workspace_list(ws, "", 0, &e, &n, err, sizeof err) == 0);
	CHECK(n == 6);
	for (size_t i = 0; i < n && i < 6; i++) {
		CHECK_STR(e[i].path, sorted[i]);
		CHECK(e[i].size == (int64_t)strlen(sorted[i]));
		CHECK(e[i].mtime_ms > now - 60000 && e[i].mtime_ms < now + 60000);
	}
	mb_workspace_entries_free(e, n);
	CHECK(mb_workspace_list(ws, "a", 1, &e, &n, err, sizeof err) == 0);
	CHECK(n == 3 && strcmp(e[0].path, "a/b/c.txt") == 0 && strcmp(e[1].path, "a/b/d/e/f.txt") == 0 &&
	      strcmp(e[2].path, "a/z.txt") == 0);
	mb_workspace_entries_free(e, n);
	CHECK(mb_workspace_list(ws, "a/b/d", 5, &e, &n, err, sizeof err) == 0);
	CHECK(n == 1 && strcmp(e[0].path, "a/b/d/e/f.txt") == 0);
	mb_workspace_entries_free(e, n);
	CHECK(mb_workspace_list(ws, "empty", 5, &e, &n, err, sizeof err) == 0 && n == 0);
	EXPECT(mb_workspace_list(ws, "nope", 4, &e, &n, err, sizeof err), -ENOENT,
	       "list nope: no such file or directory");

	/* stale temporary files (from a crash) are removed at open; fresh ones are left alone; neither
	 * is counted or listed */
	char p[600];
	pathf(p, sizeof p, "listing", "t", ".mb-tmp-stale");
	spit(p, "crashed");
	struct timespec old[2] = { { time(NULL) - 3600, 0 }, { time(NULL) - 3600, 0 } };
	utimensat(AT_FDCWD, p, old, 0);
	char fresh[600];
	pathf(fresh, sizeof fresh, "listing", "t", "a/.mb-tmp-fresh");
	spit(fresh, "in flight");
	mb_workspaces_free(r);
	r = reg_new("listing", 1 << 20, 1 << 24, 1000, 0);
	ws = get(r, "t");
	CHECK(!exists(p));
	CHECK(exists(fresh));
	int64_t files, bytes;
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 6);
	CHECK(mb_workspace_list(ws, NULL, 0, &e, &n, err, sizeof err) == 0 && n == 6);
	mb_workspace_entries_free(e, n);
	mb_workspaces_free(r);

	/* more files than max_files (put there by hand): the listing refuses rather than grow */
	r = reg_new("listing", 1 << 20, 1 << 24, 3, 0);
	ws = get(r, "t");
	EXPECT(mb_workspace_list(ws, NULL, 0, &e, &n, err, sizeof err), -E2BIG,
	       "list (workspace root): more than workspace_max_files=3 files or directories");
	CHECK(strcmp(mb_workspace_error_code(-E2BIG), "quota") == 0);
	mb_workspaces_free(r);
}

/* ---- quotas ---------------------------------------------------------------------------- */

TEST(quotas)
{
	mb_workspaces *r = reg_new("quota", 1000, 5000, 5, 0);
	mb_workspace *ws = get(r, "t");
	int64_t files, bytes;
	EXPECT(wrn(ws, "big.bin", 1001, 'x'), -EFBIG, "write big.bin: 1001 bytes is above workspace_max_file_bytes=1000");
	CHECK(wrn(ws, "a", 1000, 'a') == 0);
	CHECK(wrn(ws, "b", 1000, 'b') == 0);
	CHECK(wrn(ws, "c", 1000, 'c') == 0);
	CHECK(wrn(ws, "d", 1000, 'd') == 0);
	CHECK(wrn(ws, "e", 1000, 'e') == 0);
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 5 && bytes == 5000);
	EXPECT(wrn(ws, "f", 1, 'f'), -EDQUOT, "write f: workspace_max_bytes=5000 would be exceeded (in use 5000, writing 1)");
	/* replacing a file counts the difference */
	CHECK(wrn(ws, "a", 1000, 'A') == 0);
	CHECK(wrn(ws, "a", 400, 'A') == 0);
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 5 && bytes == 4400);
	EXPECT(wrn(ws, "a", 1000, 'A'), 0, "");
	EXPECT(wrn(ws, "b", 1000, 'B'), 0, "");
	EXPECT(del(ws, "e"), 0, "");
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 4 && bytes == 4000);
	CHECK(wrn(ws, "f", 600, 'f') == 0);
	EXPECT(wrn(ws, "g", 1, 'g'), -EDQUOT, "write g: workspace_max_files=5 reached");
	CHECK(strcmp(mb_workspace_error_code(-EDQUOT), "quota") == 0);
	/* a refused write leaves nothing behind: no file, no temporary file, no directory */
	EXPECT(wrn(ws, "newdir/g", 1, 'g'), -EDQUOT, "write newdir/g: workspace_max_files=5 reached");
	char p[600];
	pathf(p, sizeof p, "quota", "t", "newdir");
	CHECK(!exists(p));
	pathf(p, sizeof p, "quota", "t", NULL);
	CHECK(tmp_files_under(p) == 0);
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 5 && bytes == 4600);
	/* the same counts after a reopen (scan) */
	mb_workspaces_free(r);
	r = reg_new("quota", 1000, 5000, 5, 0);
	ws = get(r, "t");
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 5 && bytes == 4600);
	mb_workspaces_free(r);

	/* the message when a replacement would not fit */
	r = reg_new("quota2", 4000, 5000, 10, 0);
	ws = get(r, "t");
	CHECK(wrn(ws, "a", 3000, 'a') == 0);
	CHECK(wrn(ws, "b", 1500, 'b') == 0);
	EXPECT(wrn(ws, "a", 3600, 'a'), -EDQUOT,
	       "write a: workspace_max_bytes=5000 would be exceeded (in use 4500, writing 3600, replacing 3000)");
	CHECK(rd(ws, "a", 1) == 0 && got_len == 3000);
	CHECK(wrn(ws, "a", 3500, 'a') == 0);
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 2 && bytes == 5000);
	mb_workspaces_free(r);
}

/* Four threads write, replace and delete at random in one workspace whose byte quota is far
 * smaller than what they try to write. The committed usage never exceeds the quota, and at the
 * end it equals what is on disk (a fresh scan). */
#define CW_MAX 20000
typedef struct {
	mb_workspaces *r;
	int id;
	int ok, refused, over, other;
} cw_arg;

static void *cw_thread(void *p)
{
	cw_arg *a = p;
	unsigned seed = (unsigned)a->id * 7919u + 1;
	char e[400], path[64];
	char *buf = malloc(1000);
	memset(buf, 'a' + a->id, 1000);
	mb_workspace *ws = mb_workspaces_get(a->r, "t", e, sizeof e); /* first use races too */
	for (int i = 0; ws && i < 400; i++) {
		int k = (int)(rand_r(&seed) % 40);
		if (k < 5)
			snprintf(path, sizeof path, "shared%d", k);
		else
			snprintf(path, sizeof path, "t%d/f%d", a->id, k);
		int rc;
		if (rand_r(&seed) % 8 == 0) {
			rc = mb_workspace_delete(ws, path, strlen(path), e, sizeof e);
			if (rc == -ENOENT)
				rc = 0;
		} else {
			size_t n = 1 + rand_r(&seed) % 1000;
			rc = mb_workspace_write(ws, path, strlen(path), buf, n, e, sizeof e);
		}
		if (rc == 0)
			a->ok++;
		else if (rc == -EDQUOT)
			a->refused++;
		else
			a->other++;
		int64_t bytes;
		mb_workspace_usage(ws, NULL, &bytes);
		if (bytes > CW_MAX)
			a->over++;
	}
	free(buf);
	return ws;
}

TEST(concurrent_writers)
{
	mb_workspaces *r = reg_new("concurrent", 1000, CW_MAX, 1000, 0);
	pthread_t th[4];
	cw_arg args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (cw_arg){ r, i, 0, 0, 0, 0 };
		pthread_create(&th[i], NULL, cw_thread, &args[i]);
	}
	void *wsp[4];
	int refused = 0, ok = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], &wsp[i]);
		CHECK(args[i].over == 0);
		CHECK(args[i].other == 0);
		refused += args[i].refused;
		ok += args[i].ok;
	}
	CHECK(wsp[0] && wsp[0] == wsp[1] && wsp[1] == wsp[2] && wsp[2] == wsp[3]);
	CHECK(refused > 0 && ok > 0);
	int64_t files, bytes, files2, bytes2;
	mb_workspace_usage(wsp[0], &files, &bytes);
	CHECK(bytes <= CW_MAX && bytes > 0);
	mb_workspaces_free(r);
	r = reg_new("concurrent", 1000, CW_MAX, 1000, 0);
	mb_workspace_usage(get(r, "t"), &files2, &bytes2);
	CHECK(files == files2 && bytes == bytes2);
	char p[600];
	pathf(p, sizeof p, "concurrent", "t", NULL);
	CHECK(tmp_files_under(p) == 0);
	mb_workspaces_free(r);
}

/* ---- replicas: processes sharing one workspace directory ----------------------------------- */

/* Two registries on one root stand for two processes (each has its own descriptor of the usage
 * file, so their flocks exclude each other as two processes' would): one's writes count
 * against the other's quota, deletes free it for the other. */
TEST(replicas_share_the_quota)
{
	mb_workspaces *a = reg_new("replicas", 4000, 5000, 3, 0);
	mb_workspaces *b = reg_new("replicas", 4000, 5000, 3, 0);
	mb_workspace *wa = get(a, "t"), *wb = get(b, "t");
	int64_t files, bytes;
	CHECK(wrn(wa, "x", 3000, 'a') == 0);
	mb_workspace_usage(wb, &files, &bytes);
	CHECK(files == 1 && bytes == 3000);
	EXPECT(wrn(wb, "y", 3000, 'b'), -EDQUOT,
	       "write y: workspace_max_bytes=5000 would be exceeded (in use 3000, writing 3000)");
	CHECK(wrn(wb, "y", 2000, 'b') == 0);
	EXPECT(wrn(wa, "z", 1, 'a'), -EDQUOT,
	       "write z: workspace_max_bytes=5000 would be exceeded (in use 5000, writing 1)");
	CHECK(del(wb, "x") == 0); /* b deletes a's file: a sees the room */
	CHECK(wrn(wa, "z", 1, 'a') == 0 && wrn(wa, "w", 1, 'a') == 0);
	EXPECT(wrn(wb, "v", 1, 'b'), -EDQUOT, "write v: workspace_max_files=3 reached");
	mb_workspace_usage(wa, &files, &bytes);
	CHECK(files == 3 && bytes == 2002);
	mb_workspace_usage(wb, &files, &bytes);
	CHECK(files == 3 && bytes == 2002);
	/* the usage file is outside the tenant's directory: no workspace path reaches it */
	char p[600], q[700];
	pathf(p, sizeof p, "replicas", NULL, ".mb-quota");
	struct stat st;
	CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
	snprintf(q, sizeof q, "%s/t", p);
	CHECK(stat(q, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
	CHECK(rd(wa, "../.mb-quota/t", 14) == -EINVAL);
	CHECK(wr(wa, "../.mb-quota/t", "x") == -EINVAL);
	CHECK(mb_workspaces_get(a, ".mb-quota", err, sizeof err) == NULL);
	mb_workspace_entry *e;
	size_t n;
	CHECK(mb_workspace_list(wa, NULL, 0, &e, &n, err, sizeof err) == 0 && n == 3);
	mb_workspace_entries_free(e, n);
	mb_workspaces_free(a);
	mb_workspaces_free(b);
}

/* Processes racing: P processes, each with its own registry on one root, write, replace and
 * delete at random in one tenant whose quotas are far below what they try. Each checks after
 * every operation that the usage it reads is within the quotas; at the end a fresh scan of the
 * directory (what is really on disk) is within them too. Without the shared usage each process
 * would count only its own files and together they would pass the quota several times over. */
#define RP_MAX 20000
#define RP_FILES 30
TEST(processes_race_for_the_quota)
{
	mb_workspaces *r0 = reg_new("procs", 1000, RP_MAX, RP_FILES, 0);
	mb_workspaces_free(r0); /* the root exists before they start */
	enum { P = 4 };
	int res[2];
	CHECK(pipe(res) == 0);
	for (int id = 0; id < P; id++) {
		if (fork() != 0)
			continue;
		int counts[3] = { 0, 0, 0 }; /* ok, refused, over */
		mb_workspaces *r = reg_new("procs", 1000, RP_MAX, RP_FILES, 0);
		char e[400], path[64], buf[1000];
		memset(buf, 'a' + id, sizeof buf);
		mb_workspace *ws = r ? mb_workspaces_get(r, "t", e, sizeof e) : NULL;
		unsigned seed = (unsigned)id * 7919u + 11;
		for (int i = 0; ws && i < 300; i++) {
			int k = (int)(rand_r(&seed) % 60);
			snprintf(path, sizeof path, k < 10 ? "shared%d" : "p%d/f%d", k < 10 ? k : id, k);
			int rc;
			if (rand_r(&seed) % 6 == 0) {
				rc = mb_workspace_delete(ws, path, strlen(path), e, sizeof e);
				if (rc == -ENOENT)
					rc = 0;
			} else {
				rc = mb_workspace_write(ws, path, strlen(path), buf, 1 + rand_r(&seed) % 1000,
							e, sizeof e);
			}
			counts[rc == 0 ? 0 : rc == -EDQUOT ? 1 : 2]++;
			int64_t files, bytes;
			mb_workspace_usage(ws, &files, &bytes);
			if (bytes > RP_MAX || files > RP_FILES)
				counts[2]++;
		}
		if (!ws)
			counts[2] = 1000;
		mb_workspaces_free(r);
		_exit(write(res[1], counts, sizeof counts) == sizeof counts ? 0 : 1);
	}
	close(res[1]);
	int c[3], ok = 0, refused = 0, bad = 0, got = 0;
	while (read(res[0], c, sizeof c) == sizeof c) {
		ok += c[0];
		refused += c[1];
		bad += c[2];
		got++;
	}
	close(res[0]);
	while (wait(NULL) > 0)
		;
	CHECK(got == P && bad == 0 && ok > 0 && refused > 0);
	/* what is on disk, counted afresh (a new registry scans) */
	mb_workspaces *r = reg_new("procs", 1000, RP_MAX, RP_FILES, 0);
	int64_t files, bytes;
	mb_workspace_usage(get(r, "t"), &files, &bytes);
	CHECK(files > 0 && files <= RP_FILES && bytes > 0 && bytes <= RP_MAX);
	char p[600];
	pathf(p, sizeof p, "procs", "t", NULL);
	CHECK(tmp_files_under(p) == 0);
	mb_workspaces_free(r);
}

/* A process killed while it holds the usage lock between "pending" and "clean": the kernel
 * drops its lock, and the next holder finds "pending" and recounts instead of trusting the
 * record (here a wrong one). A usage file deleted by hand is made again and recounted. */
TEST(crash_mid_change_is_recounted)
{
	mb_workspaces *r = reg_new("crash", 4000, 5000, 10, 0);
	mb_workspace *ws = get(r, "t");
	CHECK(wrn(ws, "a", 1000, 'a') == 0);
	char qp[600];
	pathf(qp, sizeof qp, "crash", NULL, ".mb-quota/t");
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(qp, O_RDWR);
		if (fd < 0 || flock(fd, LOCK_EX) != 0)
			_exit(1);
		const char *rec = "mb-usage 1 00000000000000000009 00000000000000004999 p\n";
		if (pwrite(fd, rec, strlen(rec), 0) != (ssize_t)strlen(rec))
			_exit(1);
		raise(SIGKILL); /* dies holding the lock, mid-change */
		_exit(2);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	int64_t files, bytes;
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 1 && bytes == 1000);     /* recounted, not 9 files and 4999 bytes */
	CHECK(wrn(ws, "b", 3000, 'b') == 0);    /* the quota is not leaked */
	/* a clean record is trusted (this is what a rescan would not say: proof it is read) */
	int fd = open(qp, O_RDWR);
	const char *rec = "mb-usage 1 00000000000000000002 00000000000000004500 c\n";
	CHECK(fd >= 0 && pwrite(fd, rec, strlen(rec), 0) == (ssize_t)strlen(rec));
	close(fd);
	EXPECT(wrn(ws, "c", 600, 'c'), -EDQUOT,
	       "write c: workspace_max_bytes=5000 would be exceeded (in use 4500, writing 600)");
	/* deleted by hand: recreated, recounted */
	CHECK(unlink(qp) == 0);
	mb_workspace_usage(ws, &files, &bytes);
	CHECK(files == 2 && bytes == 4000);
	CHECK(exists(qp));
	mb_workspaces_free(r);
}

/* ---- the sandbox functions ---------------------------------------------------------------- */

static mb_exec_result res;

static mb_exec_result *run_ws(mb_workspace *ws, const char *code, uint64_t mem_mb)
{
	mb_exec_result_free(&res);
	memset(&res, 0, sizeof res);
	mb_budget b;
	mb_budget_init(&b, mem_mb << 20, 50000000, 5000);
	mb_exec_request req = { .code = code, .code_len = strlen(code), .timeout_ms = 5000,
				.memory_bytes = mem_mb << 20, .instruction_limit = 50000000, .cfg = &cfg,
				.workspace = ws };
	mb_sandbox_run(&req, &b, &res);
	return &res;
}

static void sb_ok(mb_workspace *ws, const char *code, const char *json)
{
	mb_exec_result *o = run_ws(ws, code, 32);
	if (!o->success || !o->result_json || strcmp(o->result_json, json) != 0)
		fprintf(stderr, "  code: %s\n  got: %s %s\n  wanted: %s\n", code, o->result_json ? o->result_json : "",
			o->error ? o->error : "", json);
	CHECK(o->success);
	CHECK_STR(o->result_json, json);
}

static void sb_err(mb_workspace *ws, const char *code, uint64_t mem_mb, const char *type, const char *needle)
{
	mb_exec_result *o = run_ws(ws, code, mem_mb);
	if (o->success || !o->error_type || strcmp(o->error_type, type) != 0 || !o->error ||
	    !strstr(o->error, needle))
		fprintf(stderr, "  code: %s\n  got %s: %s\n  wanted %s containing \"%s\"\n", code,
			o->error_type ? o->error_type : "success", o->error ? o->error : o->result_json, type, needle);
	CHECK(!o->success);
	CHECK(o->error_type && strcmp(o->error_type, type) == 0);
	CHECK(o->error && strstr(o->error, needle));
}

TEST(sandbox_functions)
{
	mb_workspaces *r = reg_new("sandbox", 8 << 20, 64 << 20, 1000, 0);
	mb_workspace *ws = get(r, "t");
	sb_ok(ws, "return write_file('notes/a.txt', 'hello')", "true");
	sb_ok(ws, "return read_file('notes/a.txt')", "\"hello\"");
	sb_ok(ws, "local v, e = read_file('missing.txt') return {v == nil, e}",
	      "[true,\"read missing.txt: no such file or directory\"]");
	sb_ok(ws, "write_file('b.bin', '\\0\\1\\2\\0') local s = read_file('b.bin') return {#s, s:byte(4)}", "[4,0]");
	sb_ok(ws, "write_file('x/y/z.txt', 'zz') local t = {} for _, f in ipairs(list_files()) do "
		  "t[#t+1] = f.path .. ':' .. f.size .. ':' .. math.type(f.modified) end return t",
	      "[\"b.bin:4:integer\",\"notes/a.txt:5:integer\",\"x/y/z.txt:2:integer\"]");
	sb_ok(ws, "local t = {} for _, f in ipairs(list_files('x')) do t[#t+1] = f.path end return t",
	      "[\"x/y/z.txt\"]");
	sb_ok(ws, "return list_files('nothing/here')", "[]");
	sb_ok(ws, "return {file_exists('notes/a.txt'), file_exists('notes'), file_exists('nope'), "
		  "file_exists('notes/a.txt/x')}", "[true,false,false,false]");
	sb_ok(ws, "return {delete_file('notes/a.txt'), delete_file('notes/a.txt'), file_exists('notes/a.txt')}",
	      "[true,false,false]");
	/* json */
	sb_ok(ws, "json.write_file('d.json', {a = 1, b = {1, 2, 3}}) local v = json.read_file('d.json') "
		  "return {v.a, v.b[3], #v.b, read_file('d.json'):find('\\n') == nil}", "[1,3,3,true]");
	sb_ok(ws, "json.write_file('p.json', {1, json.array({}), 'a,b:c\\\\\"[', {{k = 'v'}}, {}}, true) "
		  "return read_file('p.json')",
	      "\"[\\n  1,\\n  [],\\n  \\\"a,b:c\\\\\\\\\\\\\\\"[\\\",\\n  [\\n    {\\n      \\\"k\\\": \\\"v\\\"\\n    }\\n  ],\\n  {}\\n]\\n\"");
	sb_ok(ws, "local v = json.read_file('p.json') return {v[3], #v[2], v[4][1].k}", "[\"a,b:c\\\\\\\"[\",0,\"v\"]");
	sb_ok(ws, "local v, e = json.read_file('none.json') return {v == nil, e}",
	      "[true,\"read none.json: no such file or directory\"]");
	mb_workspaces_free(r);
}

TEST(sandbox_errors)
{
	mb_workspaces *r = reg_new("sandbox2", 1 << 20, 64 << 20, 1000, 0);
	mb_workspace *ws = get(r, "t");
	sb_err(ws, "write_file('../x', 'y')", 32, "runtime", "write ../x: '.' and '..' are not allowed as path components");
	sb_err(ws, "read_file('/etc/passwd')", 32, "runtime",
	       "read /etc/passwd: the path must be relative to the workspace (it starts with /)");
	sb_err(ws, "read_file('a\\0b')", 32, "runtime", "read a\\x00b: the path contains a NUL byte at offset 1");
	sb_err(ws, "write_file('x', 5)", 32, "runtime", "bad argument #2 to 'write_file' (string expected, got number)");
	sb_err(ws, "write_file('x')", 32, "runtime", "bad argument #2 to 'write_file' (string expected, got no value)");
	sb_err(ws, "write_file('x', {})", 32, "runtime", "bad argument #2 to 'write_file' (string expected, got table)");
	sb_err(ws, "write_file('big', ('x'):rep(2^20 + 1))", 32, "runtime",
	       "write big: 1048577 bytes is above workspace_max_file_bytes=1048576");
	sb_err(ws, "list_files('a/../b')", 32, "runtime", "list a/../b: '.' and '..' are not allowed as path components");
	sb_err(ws, "delete_file('')", 32, "runtime", "delete: the path is empty");
	sb_err(ws, "file_exists('//')", 32, "runtime", "stat //: the path must be relative");
	sb_err(ws, "json.write_file('f.json', {f = print})", 32, "runtime", "json.write_file: cannot encode function");
	CHECK(mb_workspace_write(ws, "bad.json", 8, "{\"a\":", 5, err, sizeof err) == 0);
	sb_err(ws, "json.read_file('bad.json')", 32, "runtime", "json.read_file bad.json: ");
	/* errors are catchable Lua errors carrying the message */
	sb_ok(ws, "local ok, e = pcall(write_file, '../x', 'y') return {ok, e}",
	      "[false,\"write ../x: '.' and '..' are not allowed as path components\"]");
	/* a planted symbolic link */
	char p[600];
	pathf(p, sizeof p, "sandbox2", "t", "ln");
	CHECK(symlink("/etc/passwd", p) == 0);
	sb_err(ws, "return read_file('ln')", 32, "runtime", "read ln: symbolic links are not followed in the workspace");
	sb_err(ws, "return write_file('ln', 'x')", 32, "runtime", "write ln: symbolic links are not followed in the workspace");
	/* no workspace for this execution */
	const char *fns[] = { "read_file('x')", "write_file('x', 'y')", "list_files()", "delete_file('x')",
			      "file_exists('x')", "json.read_file('x')", "json.write_file('x', 1)" };
	for (int i = 0; i < 7; i++) {
		char want[100];
		snprintf(want, sizeof want, "%.*s: the workspace is not available here",
			 (int)(strchr(fns[i], '(') - fns[i]), fns[i]);
		sb_err(NULL, fns[i], 32, "runtime", want);
	}
	mb_workspaces_free(r);
}

/* A file larger than the execution's memory cap: the read fails with the memory error (the
 * buffer is charged before the read), and one that fits once but not twice fails when the Lua
 * string is made, freeing the buffer (ASan checks the leak). Both end as "memory" errors that
 * pcall cannot swallow. */
TEST(sandbox_memory)
{
	mb_workspaces *r = reg_new("sandbox3", 16 << 20, 64 << 20, 1000, 0);
	mb_workspace *ws = get(r, "t");
	CHECK(wrn(ws, "six.bin", 6 << 20, 's') == 0);
	CHECK(wrn(ws, "three.bin", 3 << 20, 't') == 0);
	sb_err(ws, "local s = read_file('six.bin') return #s", 4, "memory", "memory_mb=4");
	sb_err(ws, "local ok = pcall(read_file, 'six.bin') return 'swallowed'", 4, "memory", "memory_mb=4");
	sb_err(ws, "local ok = pcall(read_file, 'three.bin') return 'swallowed'", 4, "memory", "memory_mb=4");
	sb_err(ws, "local ok = pcall(json.read_file, 'six.bin') return 'swallowed'", 4, "memory", "memory_mb=4");
	sb_ok(ws, "return #read_file('six.bin')", "6291456");
	mb_workspaces_free(r);
}

/* ---- the host's table ------------------------------------------------------------------- */

static void host_expect(lua_State *L, const char *code, const char *want)
{
	int ok = luaL_dostring(L, code) == LUA_OK;
	const char *s = lua_tostring(L, -1);
	if (!ok || !s || strcmp(s, want) != 0)
		fprintf(stderr, "  %s\n  -> %s\n  wanted %s\n", code, s ? s : "(nil)", want);
	CHECK(ok);
	CHECK_STR(s, want);
	lua_settop(L, 0);
}

TEST(host_table)
{
	mb_workspaces *r = reg_new("host", 1000, 5000, 3, 0);
	lua_State *L = luaL_newstate();
	*(mb_budget **)lua_getextraspace(L) = NULL;
	luaL_openlibs(L);
	lua_newtable(L);
	mb_workspace_lua_open(L, r);
	lua_setglobal(L, "mb");
	host_expect(L, "local w = mb.workspace return tostring(w.write('default', 'a/b.txt', 'hi\\0x'))", "true");
	host_expect(L, "return mb.workspace.read('default', 'a/b.txt') == 'hi\\0x' and 'yes'", "yes");
	host_expect(L, "return table.concat({mb.workspace.read('default', 'nope')}, '|', 2)",
		    "read nope: no such file or directory|not_found");
	host_expect(L, "return table.concat({mb.workspace.read('default', '../x')}, '|', 2)",
		    "read ../x: '.' and '..' are not allowed as path components|invalid");
	host_expect(L, "return table.concat({mb.workspace.read('bad tenant', 'x')}, '|', 2)",
		    "tenant \"bad tenant\": a tenant name is 1 to 64 characters of A-Z a-z 0-9 _ -|invalid");
	host_expect(L, "return table.concat({mb.workspace.read('a\\0b', 'x')}, '|', 2)",
		    "tenant: the name contains a NUL byte|invalid");
	host_expect(L, "return table.concat({mb.workspace.write('default', 'big', ('x'):rep(1001))}, '|', 2)",
		    "write big: 1001 bytes is above workspace_max_file_bytes=1000|quota");
	host_expect(L, "mb.workspace.write('default', 'c', 'c') mb.workspace.write('default', 'd', 'd') "
		       "return table.concat({mb.workspace.write('default', 'e', 'e')}, '|', 2)",
		    "write e: workspace_max_files=3 reached|quota");
	host_expect(L, "local t = {} for _, f in ipairs(mb.workspace.list('default')) do t[#t+1] = f.path .. '=' .. f.size end "
		       "return table.concat(t, ',')", "a/b.txt=4,c=1,d=1");
	host_expect(L, "return #mb.workspace.list('default', 'none') .. ''", "0");
	host_expect(L, "local s = mb.workspace.stat('default', 'a/b.txt') return s.size .. ':' .. tostring(s.is_dir) .. ':' .. math.type(s.modified)",
		    "4:false:integer");
	host_expect(L, "return tostring(mb.workspace.stat('default', 'nope'))", "nil");
	host_expect(L, "local u = mb.workspace.usage('default') return table.concat({u.files, u.bytes, u.max_files, u.max_bytes, u.max_file_bytes}, ',')",
		    "3,6,3,5000,1000");
	host_expect(L, "return tostring(mb.workspace.delete('default', 'c')) .. tostring(mb.workspace.delete('default', 'c'))",
		    "truefalse");
	host_expect(L, "return table.concat({mb.workspace.delete('default', 'a')}, '|', 2)",
		    "delete a: is a directory (only files are deleted)|invalid");
	host_expect(L, "local ok, e = pcall(mb.workspace.write, 'default', 'x', 1) return e",
		    "bad argument #3 to '?' (string expected, got number)");
	lua_close(L);
	mb_workspaces_free(r);
}

TEST(error_codes)
{
	CHECK_STR(mb_workspace_error_code(-ENOENT), "not_found");
	CHECK_STR(mb_workspace_error_code(-EFBIG), "quota");
	CHECK_STR(mb_workspace_error_code(-EDQUOT), "quota");
	CHECK_STR(mb_workspace_error_code(-EINVAL), "invalid");
	CHECK_STR(mb_workspace_error_code(-ELOOP), "invalid");
	CHECK_STR(mb_workspace_error_code(-EMLINK), "invalid");
	CHECK_STR(mb_workspace_error_code(-EIO), "io");
	CHECK_STR(mb_workspace_error_code(-ENOSPC), "io");
}

int main(void)
{
	if (unit_tmpdir(base, sizeof base, "/tmp/mb-ws-XXXXXX") != 0)
		return 1;
	if (sandbox_setup(&cfg) != 0)
		return 1;
	alarm(120); /* a FIFO that blocked would hang the run: fail it instead */
	RUN(path_rules);
	RUN(symlinks_hardlinks_fifos_openat2);
	RUN(symlinks_hardlinks_fifos_fallback);
	RUN(symlink_planted_later);
	RUN(tenants);
	RUN(read_write_basics);
	RUN(listing);
	RUN(quotas);
	RUN(concurrent_writers);
	RUN(replicas_share_the_quota);
	RUN(processes_race_for_the_quota);
	RUN(crash_mid_change_is_recounted);
	RUN(sandbox_functions);
	RUN(sandbox_errors);
	RUN(sandbox_memory);
	RUN(host_table);
	RUN(error_codes);
	mb_exec_result_free(&res);
	mb_sandbox_thread_exit();
	nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return UNIT_END();
}
