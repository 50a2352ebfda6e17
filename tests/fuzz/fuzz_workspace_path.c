/* fuzz_workspace_path.c - libFuzzer target: workspace path resolution (src/workspace.c) with
 * arbitrary path strings, through the public API that sandbox code and the workspace tools use.
 *
 * Every input runs against a fresh tree in /dev/shm: a workspace root holding a file, a
 * directory, a FIFO, a hard link to a file outside, and symbolic links planted to lead out of it
 * (to a sibling directory by "../..", by an absolute path, and "d/up" -> ".."). The input is a
 * list of operations, each [op][n][n path bytes] (op: read, write, delete, stat, list, and which
 * resolver: openat2 or the one-component-at-a-time fallback). Invariants, any violation aborts:
 *  - an accepted path is a clean relative path: 1..1024 bytes, no NUL or control byte, not
 *    absolute, no empty, "." or ".." component, no component above 255 bytes or starting with
 *    the temporary-file prefix;
 *  - what an accepted operation touched is inside the root: the written, read or stat'ed path
 *    walks from the root through real directories (no symbolic link on the way) to a regular
 *    file or directory, and every listed entry does too;
 *  - nothing outside the root changes (the sibling directory keeps exactly its one file and its
 *    content);
 *  - a refusal carries a message of at most 700 bytes, valid UTF-8 without control bytes (the
 *    path is escaped and cut), and one of the four error classes;
 *  - the quota counters equal what is on disk (files and bytes), after every operation.
 * Build and run: tests/fuzz/run.sh fuzz_workspace_path
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workspace.h"

#define FAIL(...) do { fprintf(stderr, "FUZZ INVARIANT: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static char base[256], root[2][300], outside[300], secret[400];
static const char SECRET[] = "TOP SECRET, never overwritten\n";

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if ((flag == FTW_DP ? rmdir(p) : unlink(p)) != 0)
		FAIL("cannot remove %s", p);
	return 0;
}

static void rmtree(const char *path)
{
	if (access(path, F_OK) == 0)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void)
{
	if (base[0])
		rmtree(base);
}

static void put(const char *dir, const char *name, const char *content)
{
	char p[700];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	if (!f || fputs(content, f) < 0 || fclose(f) != 0)
		FAIL("cannot write %s", p);
}

/* A fresh tree: base/outside/secret, and per registry base/wsN/t holding the planted entries. */
static void plant(void)
{
	for (int r = 0; r < 2; r++) {
		char ws[400], p[700];
		snprintf(ws, sizeof ws, "%s/t", root[r]);
		rmtree(root[r]);
		if (mkdir(root[r], 0700) || mkdir(ws, 0700))
			FAIL("mkdir %s", ws);
		put(ws, "a.txt", "hello");
		snprintf(p, sizeof p, "%s/d", ws);
		mkdir(p, 0700);
		put(p, "f.txt", "inner");
		snprintf(p, sizeof p, "%s/d/up", ws);
		if (symlink("..", p))
			FAIL("symlink");
		snprintf(p, sizeof p, "%s/link", ws);
		if (symlink("../../outside", p))
			FAIL("symlink");
		snprintf(p, sizeof p, "%s/abs", ws);
		if (symlink(outside, p))
			FAIL("symlink");
		snprintf(p, sizeof p, "%s/fifo", ws);
		if (mkfifo(p, 0600))
			FAIL("mkfifo");
		snprintf(p, sizeof p, "%s/hard", ws);
		if (link(secret, p))
			FAIL("link");
	}
}

static int valid_utf8_text(const unsigned char *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned c = p[i];
		if (c < 0x20 || c == 0x7F)
			return 0;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
		if (!len || i + len > n || c < 0xC2 || c > 0xF4)
			return 0;
		for (size_t k = 1; k < len; k++)
			if ((p[i + k] & 0xC0) != 0x80)
				return 0;
		i += len;
	}
	return 1;
}

/* The string rules of an accepted path. */
static void check_clean(const char *what, const char *p, size_t n)
{
	if (n == 0 || n > MB_WORKSPACE_MAX_PATH || p[0] == '/')
		FAIL("%s accepted a path of %zu bytes that is empty, too long or absolute", what, n);
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		unsigned char c = i < n ? (unsigned char)p[i] : '/';
		if (c < 0x20 || c == 0x7F)
			FAIL("%s accepted a path with byte 0x%02x at %zu", what, c, i);
		if (c != '/')
			continue;
		size_t cl = i - start;
		const char *comp = p + start;
		if (cl == 0 || cl > MB_WORKSPACE_MAX_COMPONENT || (cl == 1 && comp[0] == '.') ||
		    (cl == 2 && comp[0] == '.' && comp[1] == '.') ||
		    (cl >= 8 && memcmp(comp, MB_WORKSPACE_TMP_PREFIX, 8) == 0))
			FAIL("%s accepted a path with a bad component: %.*s", what, (int)n, p);
		start = i + 1;
	}
}

/* Walks root/t/p with lstat: every step a real directory, the end a file or directory. */
static void check_inside(int r, const char *what, const char *p, size_t n, int want_dir)
{
	char path[2048];
	int k = snprintf(path, sizeof path, "%s/t/", root[r]);
	memcpy(path + k, p, n);
	path[k + n] = 0;
	for (size_t i = (size_t)k; i <= (size_t)k + n; i++) {
		if (path[i] != '/' && path[i] != 0)
			continue;
		char c = path[i];
		path[i] = 0;
		struct stat st;
		if (lstat(path, &st) != 0)
			FAIL("%s of %s: %s does not exist", what, p, path);
		int last = c == 0;
		if (!last && !S_ISDIR(st.st_mode))
			FAIL("%s of %s went through %s, which is not a real directory", what, p, path);
		if (last && (want_dir ? !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) : !S_ISREG(st.st_mode)))
			FAIL("%s of %s ended at %s, mode %o", what, p, path, st.st_mode);
		path[i] = c;
	}
}

static void check_outside(void)
{
	DIR *d = opendir(outside);
	if (!d)
		FAIL("outside directory gone");
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	char buf[128] = "";
	FILE *f = fopen(secret, "r");
	size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	if (n != 1 || got != sizeof SECRET - 1 || memcmp(buf, SECRET, got) != 0)
		FAIL("something outside the workspace changed (%d entries, %zu bytes in secret)", n, got);
}

/* Files and bytes on disk, counted like the quotas: regular files, not temporary ones. */
static void count_disk(const char *dir, int64_t *files, int64_t *bytes)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[4096];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		struct stat st;
		if (lstat(p, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			count_disk(p, files, bytes);
		else if (S_ISREG(st.st_mode) && strncmp(e->d_name, MB_WORKSPACE_TMP_PREFIX, 8) != 0) {
			(*files)++;
			*bytes += st.st_size;
		}
	}
	closedir(d);
}

static void check_refusal(const char *what, int rc, const char *err)
{
	size_t n = strlen(err);
	if (n == 0 || n > 700 || !valid_utf8_text((const unsigned char *)err, n))
		FAIL("%s refused (%d) with a message of %zu bytes that is empty, too long or not clean text: %s",
		     what, rc, n, err);
	const char *c = mb_workspace_error_code(rc);
	if (!c || (strcmp(c, "not_found") && strcmp(c, "quota") && strcmp(c, "invalid") && strcmp(c, "io")))
		FAIL("%s: error class %s", what, c ? c : "(null)");
	if ((rc == -ENOENT) != (strcmp(c, "not_found") == 0))
		FAIL("%s: -ENOENT and not_found disagree", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!base[0]) {
		snprintf(base, sizeof base, "/dev/shm/moonbox-fuzz-ws-%d", (int)getpid());
		snprintf(outside, sizeof outside, "%s/outside", base);
		snprintf(secret, sizeof secret, "%s/secret", outside);
		snprintf(root[0], sizeof root[0], "%s/ws0", base);
		snprintf(root[1], sizeof root[1], "%s/ws1", base);
		mkdir(base, 0700);
		mkdir(outside, 0700);
		put(outside, "secret", SECRET);
		atexit(cleanup);
	}
	plant();
	mb_workspace_limits lim = { 4096, 1 << 16, 64 };
	mb_workspaces *reg[2];
	mb_workspace *ws[2];
	char err[1024];
	for (int r = 0; r < 2; r++) {
		if (!(reg[r] = mb_workspaces_new(root[r], &lim, err, sizeof err)))
			FAIL("registry: %s", err);
		mb_workspaces_force_fallback(reg[r], r);
		if (!(ws[r] = mb_workspaces_get(reg[r], "t", err, sizeof err)))
			FAIL("workspace: %s", err);
	}
	for (size_t i = 0; i + 2 <= size;) {
		int op = data[i] % 5, r = (data[i] >> 3) & 1;
		size_t n = data[i + 1];
		i += 2;
		if (n > size - i)
			n = size - i;
		const char *p = (const char *)data + i;
		i += n;
		if ((data[i - n - 2] >> 4) & 1 && n) { /* long paths too: repeat the bytes */
			static char longp[2100];
			size_t m = 0;
			while (m + n <= sizeof longp - 1 && m < 1030)
				memcpy(longp + m, p, n), m += n;
			p = longp;
			n = m;
		}
		err[0] = 0;
		int rc;
		const char *what = "?";
		switch (op) {
		case 0: {
			what = "read";
			char *buf = NULL;
			size_t len = 0;
			rc = mb_workspace_read(ws[r], p, n, &buf, &len, err, sizeof err);
			if (rc == 0) {
				check_clean(what, p, n);
				check_inside(r, what, p, n, 0);
			}
			free(buf);
			break;
		}
		case 1:
			what = "write";
			rc = mb_workspace_write(ws[r], p, n, "written", 7, err, sizeof err);
			if (rc == 0) {
				check_clean(what, p, n);
				check_inside(r, what, p, n, 0);
			}
			break;
		case 2:
			what = "delete";
			rc = mb_workspace_delete(ws[r], p, n, err, sizeof err);
			if (rc == 0)
				check_clean(what, p, n);
			break;
		case 3: {
			what = "stat";
			mb_workspace_info info;
			rc = mb_workspace_stat(ws[r], p, n, &info, err, sizeof err);
			if (rc == 0) {
				check_clean(what, p, n);
				check_inside(r, what, p, n, 1);
			}
			break;
		}
		default: {
			what = "list";
			mb_workspace_entry *e = NULL;
			size_t count = 0;
			int whole = n == 0;
			rc = mb_workspace_list(ws[r], whole ? NULL : p, n, &e, &count, err, sizeof err);
			if (rc == 0) {
				if (!whole)
					check_clean(what, p, n);
				for (size_t k = 0; k < count; k++) {
					size_t el = strlen(e[k].path);
					check_clean("list entry", e[k].path, el);
					check_inside(r, "list entry", e[k].path, el, 0);
				}
			}
			mb_workspace_entries_free(e, count);
			break;
		}
		}
		if (rc != 0)
			check_refusal(what, rc, err);
		check_outside();
		int64_t files = 0, bytes = 0, uf, ub;
		char dir[400];
		snprintf(dir, sizeof dir, "%s/t", root[r]);
		count_disk(dir, &files, &bytes);
		mb_workspace_usage(ws[r], &uf, &ub);
		if (files != uf || bytes != ub)
			FAIL("after %s of %.*s: usage says %lld files / %lld bytes, the disk has %lld / %lld", what,
			     (int)(n > 200 ? 200 : n), p, (long long)uf, (long long)ub, (long long)files,
			     (long long)bytes);
	}
	mb_workspaces_free(reg[0]);
	mb_workspaces_free(reg[1]);
	return 0;
}
