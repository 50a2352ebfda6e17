/* seed.c - the first run of an installed moonbox: copies of the shipped examples.
 *
 * `make install` puts the example skills, catalog and workflow files, read-only, in PREFIX/share/moonbox
 * (the option share_dir; by default found from the binary's own path). A skills_dir,
 * catalog_dir or workflows_dir that does not exist yet starts as a copy of SHARE_DIR/skills,
 * SHARE_DIR/catalog or SHARE_DIR/workflows.
 * The copy then belongs to the user: it is edited, saved over by save_skill and deleted like any
 * skill, and never refreshed, so the one-directory model of skills (the directory is the source
 * of truth, docs/skills.md) holds unchanged. A directory that exists, even empty, is never
 * touched. docs/install.md says why this was chosen over read-only defaults beside the user's
 * directory.
 *
 * The copy is built in a temporary sibling and renamed into place, so a crash leaves no
 * directory (the next start tries again) or a complete one, and of two servers starting at
 * once one rename wins and the other discards its copy. Failures are logged, never fatal: the
 * server then starts with the empty directory it would have created anyway.
 */
#include "seed.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

enum { SEED_MAX_DEPTH = 8 };

/* Copies one regular file; the new file must not exist. */
static int copy_file(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (out < 0) {
		close(in);
		return -1;
	}
	char buf[65536];
	int rc = 0;
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -1 : 0;
			break;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				rc = -1;
				goto done;
			}
			off += w;
		}
	}
done:
	close(in);
	if (close(out) != 0)
		rc = -1;
	return rc;
}

/* Removes a tree this module created (regular files and directories only). */
static void remove_tree(const char *path, int depth)
{
	DIR *d = depth < SEED_MAX_DEPTH + 1 ? opendir(path) : NULL;
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			char sub[4096];
			struct stat st;
			if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub)
				continue;
			if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
				remove_tree(sub, depth + 1);
			else
				unlink(sub);
		}
		closedir(d);
	}
	rmdir(path);
}

/* Copies the directories and regular files under src into a new directory dst (symbolic links
 * and special files are skipped, depth is bounded). */
static int copy_tree(const char *src, const char *dst, int depth)
{
	if (mkdir(dst, 0700) != 0)
		return -1;
	DIR *d = opendir(src);
	if (!d)
		return -1;
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char s[4096], t[4096];
		struct stat st;
		if (snprintf(s, sizeof s, "%s/%s", src, e->d_name) >= (int)sizeof s ||
		    snprintf(t, sizeof t, "%s/%s", dst, e->d_name) >= (int)sizeof t) {
			errno = ENAMETOOLONG;
			rc = -1;
		} else if (lstat(s, &st) != 0) {
			rc = -1;
		} else if (S_ISDIR(st.st_mode)) {
			if (depth < SEED_MAX_DEPTH)
				rc = copy_tree(s, t, depth + 1);
		} else if (S_ISREG(st.st_mode)) {
			rc = copy_file(s, t);
		}
	}
	int saved = errno;
	closedir(d);
	errno = saved;
	return rc;
}

/* Seeds one directory; returns 1 when a copy was made, 0 when there was nothing to do, -1. */
static int seed_dir(const char *share_dir, const char *sub, const char *dir)
{
	struct stat st;
	char src[4200], tmp[4200];
	if (lstat(dir, &st) == 0 || errno != ENOENT)
		return 0;
	snprintf(src, sizeof src, "%s/%s", share_dir, sub);
	if (stat(src, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0;
	if (snprintf(tmp, sizeof tmp, "%s.seed-%ld", dir, (long)getpid()) >= (int)sizeof tmp) {
		mb_log(MB_LOG_WARNING, "examples not copied: path %s is too long", dir);
		return -1;
	}
	remove_tree(tmp, 0); /* left by an earlier crash of a process with the same pid */
	if (copy_tree(src, tmp, 0) != 0) {
		mb_log(MB_LOG_WARNING, "examples not copied from %s to %s: %s", src, dir, strerror(errno));
		remove_tree(tmp, 0);
		return -1;
	}
	if (rename(tmp, dir) != 0) {
		int err = errno;
		remove_tree(tmp, 0);
		if (err == EEXIST || err == ENOTEMPTY) /* another server made it first */
			return 0;
		mb_log(MB_LOG_WARNING, "examples not copied to %s: %s", dir, strerror(err));
		return -1;
	}
	mb_log(MB_LOG_INFO, "first run: copied the examples of %s into %s", src, dir);
	return 1;
}

int mb_seed_examples(const mb_config *cfg)
{
	if (!cfg->share_dir[0] || strcmp(cfg->share_dir, "none") == 0)
		return 0;
	int a = seed_dir(cfg->share_dir, "skills", cfg->skills_dir);
	int b = seed_dir(cfg->share_dir, "catalog", cfg->catalog_dir);
	int c = seed_dir(cfg->share_dir, "workflows", cfg->workflows_dir);
	return (a > 0) + (b > 0) + (c > 0);
}
