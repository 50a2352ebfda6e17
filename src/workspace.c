/* workspace.c - per-tenant workspace directories, confined by the kernel, with quotas.
 *
 * A registry (mb_workspaces) holds an O_PATH descriptor of DATA_DIR/workspaces and a list of
 * open tenants. Each workspace holds an O_PATH descriptor of its own directory, the usage
 * counters for its quotas and a mutex. The pieces:
 *   - check_path: the string layer. It refuses what is plainly wrong (absolute paths, "..", ".",
 *     empty components, NUL and control bytes, over-long names, the temporary-file prefix) with
 *     a message the agent can act on. It is not the confinement.
 *   - ws_open / open_dir: the confinement. Every path is resolved from the workspace descriptor
 *     by openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 *     RESOLVE_NO_XDEV, so the kernel itself refuses to leave the directory, to follow any
 *     symbolic link (planted as the target or as any parent) or to cross a mount point. Where
 *     openat2 is missing (ENOSYS, or EPERM from an old seccomp profile) the same walk is done one
 *     component at a time with openat(O_NOFOLLOW) and a device check.
 *   - the operations (read, write, delete, stat, list) work on descriptors obtained that way and
 *     name only single components relative to them (fstatat/renameat/unlinkat with
 *     AT_SYMLINK_NOFOLLOW semantics), so nothing re-resolves a full path outside the kernel's
 *     checks.
 *   - quotas: a write reserves its bytes (and a file slot when the target is new) under the
 *     workspace mutex before any I/O, counting every other write in flight at its full size;
 *     the rename and the accounting of what it actually replaced happen together under the
 *     mutex, and the reservation is released on every path. Usage is counted by a scan when the
 *     workspace is first opened; the scan also removes stale temporary files left by a crash.
 *   - quotas across processes (replicas sharing workspace_dir): the committed usage lives in a
 *     usage file per tenant, ROOT/.mb-quota/<tenant>, outside every tenant's directory (so no
 *     workspace path can name it; a tenant name never starts with '.'). Its flock is taken,
 *     inside the workspace mutex, around the reservation (which re-reads the usage) and around
 *     the commit (which re-reads it and checks the quota again: another process may have
 *     committed in between; reservations stay per process, so a process that dies leaves none
 *     behind). A change is bracketed by "pending" and "clean" records; a holder that dies in
 *     between (the kernel drops its lock) leaves "pending", and the next holder recounts by a
 *     scan. docs/workspace.md, "Replicas", has the reasons and the costs.
 */
#include "workspace.h"

#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
#define TMP_PREFIX_LEN (sizeof MB_WORKSPACE_TMP_PREFIX - 1)
#define STALE_TMP_SECONDS 600
#define MAX_TENANT 64
#define SHOW_BYTES 96   /* a path in a message is cut after this many bytes */
#define SHOW_CAP (SHOW_BYTES * 4 + 8)
#define USAGE_DIR ".mb-quota"   /* in the root, beside the tenants' directories */
#define USAGE_FMT "mb-usage 1 %020lld %020lld %c\n" /* files, bytes, 'c'lean or 'p'ending */
#define USAGE_LEN 55

struct mb_workspace {
	mb_workspace *next;
	mb_workspaces *reg;
	char tenant[MAX_TENANT + 1];
	int fd;                       /* O_PATH | O_DIRECTORY of the workspace root */
	dev_t dev;                    /* its device: the fallback walk refuses others */
	pthread_mutex_t lock;         /* guards the counters, the rename and unlink steps */
	int ufd;                      /* the usage file: its flock excludes other processes */
	int64_t files, bytes;         /* committed usage (as last read under the usage lock) */
	int64_t res_files, res_bytes; /* reserved by writes in flight */
};

struct mb_workspaces {
	pthread_mutex_t lock;         /* guards list */
	int fd;                       /* O_PATH | O_DIRECTORY of the root of all workspaces */
	int qfd;                      /* O_PATH | O_DIRECTORY of ROOT/.mb-quota */
	mb_workspace_limits lim;
	int use_openat2;              /* fixed before the first get */
	uint64_t salt;                /* random part of temporary names */
	atomic_uint_fast64_t seq;
	mb_workspace *list;
};

/* ---- messages -------------------------------------------------------------------------- */

__attribute__((format(printf, 4, 5)))
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	mb_vseterr(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned min;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		len = 2, min = 0x80;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		len = 3, min = 0x800;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		len = 4, min = 0x10000;
	else
		return 0;
	if (n < len)
		return 0;
	unsigned cp = s[0] & (0x7F >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

/* A path as shown in messages: control bytes and invalid UTF-8 escaped as \xNN, cut after
 * SHOW_BYTES bytes with "...". buf has SHOW_CAP bytes. */
static const char *show(char *buf, const char *p, size_t n)
{
	size_t o = 0, i = 0;
	while (i < n && i < SHOW_BYTES) {
		unsigned char ch = (unsigned char)p[i];
		if (ch >= 0x20 && ch < 0x7F) {
			buf[o++] = (char)ch;
			i++;
			continue;
		}
		size_t k = ch >= 0x80 ? utf8_seq((const unsigned char *)p + i, n - i) : 0;
		if (k && i + k <= SHOW_BYTES) {
			memcpy(buf + o, p + i, k);
			o += k;
			i += k;
		} else if (k) {
			break;
		} else {
			o += (size_t)snprintf(buf + o, 5, "\\x%02x", ch);
			i++;
		}
	}
	if (i < n) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = 0;
	return buf;
}

/* ---- the string layer -------------------------------------------------------------------- */

typedef struct {
	char buf[MB_WORKSPACE_MAX_PATH + 1];
	size_t len;
	char shown[SHOW_CAP];
} wpath;

static int check_path(const char *op, const char *p, size_t n, wpath *out, char *err, size_t errlen)
{
	show(out->shown, p ? p : "", p ? n : 0);
	const char *s = out->shown;
	if (!p || n == 0)
		return fail(err, errlen, -EINVAL, "%s: the path is empty", op);
	if (n > MB_WORKSPACE_MAX_PATH)
		return fail(err, errlen, -EINVAL, "%s %s: the path is %zu bytes, above the limit of %d",
			    op, s, n, MB_WORKSPACE_MAX_PATH);
	if (p[0] == '/')
		return fail(err, errlen, -EINVAL,
			    "%s %s: the path must be relative to the workspace (it starts with /)", op, s);
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		unsigned char ch = i < n ? (unsigned char)p[i] : '/';
		if (ch == 0)
			return fail(err, errlen, -EINVAL, "%s %s: the path contains a NUL byte at offset %zu",
				    op, s, i);
		if (ch < 0x20 || ch == 0x7F)
			return fail(err, errlen, -EINVAL,
				    "%s %s: the path contains a control character (0x%02x) at offset %zu",
				    op, s, ch, i);
		if (ch != '/')
			continue;
		size_t clen = i - start;
		const char *c = p + start;
		if (clen == 0)
			return fail(err, errlen, -EINVAL,
				    "%s %s: the path has an empty component (// or a trailing /)", op, s);
		if ((clen == 1 && c[0] == '.') || (clen == 2 && c[0] == '.' && c[1] == '.'))
			return fail(err, errlen, -EINVAL,
				    "%s %s: '.' and '..' are not allowed as path components", op, s);
		if (clen > MB_WORKSPACE_MAX_COMPONENT)
			return fail(err, errlen, -EINVAL,
				    "%s %s: a path component is %zu bytes, above the limit of %d", op, s,
				    clen, MB_WORKSPACE_MAX_COMPONENT);
		if (clen >= TMP_PREFIX_LEN && memcmp(c, MB_WORKSPACE_TMP_PREFIX, TMP_PREFIX_LEN) == 0)
			return fail(err, errlen, -EINVAL,
				    "%s %s: names starting with " MB_WORKSPACE_TMP_PREFIX
				    " are reserved for temporary files", op, s);
		start = i + 1;
	}
	memcpy(out->buf, p, n);
	out->buf[n] = 0;
	out->len = n;
	return 0;
}

/* Splits a checked path into its directory ("" for the root) and its last component, in
 * place; *dir and *name point into p->buf. */
static void split_path(wpath *p, const char **dir, const char **name)
{
	char *slash = strrchr(p->buf, '/');
	if (!slash) {
		*dir = "";
		*name = p->buf;
		return;
	}
	*slash = 0;
	*dir = p->buf;
	*name = slash + 1;
}

/* ---- confinement: resolving paths inside the workspace ----------------------------------- */

static int sys_openat2(int dfd, const char *path, int flags)
{
	struct open_how how;
	memset(&how, 0, sizeof how);
	how.flags = (uint64_t)(unsigned)(flags | O_CLOEXEC);
	how.resolve = RESOLVE_FLAGS;
	for (int i = 0; i < 64; i++) { /* EAGAIN: a concurrent rename raced the lookup */
		long fd = syscall(SYS_openat2, dfd, path, &how, sizeof how);
		if (fd >= 0)
			return (int)fd;
		if (errno != EAGAIN)
			return -errno;
	}
	return -EAGAIN;
}

/* Why openat(dfd, name, O_NOFOLLOW...) failed with ELOOP or ENOTDIR: a symlink or not a dir. */
static int classify(int dfd, const char *name, int e)
{
	struct stat st;
	if ((e == ELOOP || e == ENOTDIR) && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR;
	return -e;
}

/* Opens one component below dfd without following a symlink and without leaving the device. */
static int open_one(mb_workspace *ws, int dfd, const char *name, int flags)
{
	if (ws->reg->use_openat2)
		return sys_openat2(dfd, name, flags);
	/* openat would happily climb "..": refuse it here too, not only in check_path */
	if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -EXDEV;
	int fd = openat(dfd, name, flags | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return classify(dfd, name, errno);
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) != 0)
		rc = -errno;
	else if (S_ISLNK(st.st_mode)) /* O_PATH | O_NOFOLLOW opens the link itself */
		rc = -ELOOP;
	else if (st.st_dev != ws->dev)
		rc = -EXDEV;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Opens rel ("" = the workspace root, else a checked path) below the workspace with flags.
 * Returns a descriptor or a negative errno: -ELOOP for a symbolic link anywhere on the way,
 * -EXDEV for a mount point, -ENOTDIR when a parent is not a directory. A final component that
 * is a symbolic link is refused even with O_PATH. */
static int ws_open(mb_workspace *ws, const char *rel, int flags)
{
	int fd;
	if (!*rel) {
		fd = openat(ws->fd, ".", flags | O_CLOEXEC);
		return fd < 0 ? -errno : fd;
	}
	if (ws->reg->use_openat2) {
		fd = sys_openat2(ws->fd, rel, flags);
	} else {
		char comp[MB_WORKSPACE_MAX_COMPONENT + 1];
		int cur = ws->fd;
		const char *s = rel;
		const char *slash;
		fd = -ENOENT;
		while ((slash = strchr(s, '/')) != NULL) {
			size_t n = (size_t)(slash - s);
			if (n > MB_WORKSPACE_MAX_COMPONENT) {
				fd = -ENAMETOOLONG;
				break;
			}
			memcpy(comp, s, n);
			comp[n] = 0;
			int next = open_one(ws, cur, comp, O_PATH | O_DIRECTORY);
			if (cur != ws->fd)
				close(cur);
			cur = next;
			if (cur < 0)
				break;
			s = slash + 1;
		}
		if (cur < 0) {
			fd = cur;
		} else {
			fd = open_one(ws, cur, s, flags);
			if (cur != ws->fd)
				close(cur);
		}
	}
	if (fd >= 0 && (flags & O_PATH)) {
		struct stat st;
		if (fstat(fd, &st) != 0 || S_ISLNK(st.st_mode)) {
			close(fd);
			return -ELOOP;
		}
	}
	return fd;
}

/* The message for a failure of ws_open or open_dir. */
static int path_error(int rc, const char *op, const char *shown, char *err, size_t errlen)
{
	switch (-rc) {
	case ENOENT:
		return fail(err, errlen, rc, "%s %s: no such file or directory", op, shown);
	case ELOOP:
		return fail(err, errlen, rc, "%s %s: symbolic links are not followed in the workspace",
			    op, shown);
	case ENOTDIR:
		return fail(err, errlen, rc, "%s %s: a parent of the path is not a directory", op, shown);
	case EXDEV:
		return fail(err, errlen, rc,
			    "%s %s: the path crosses a mount point, which the workspace does not follow",
			    op, shown);
	default:
		return fail(err, errlen, rc, "%s %s: %s", op, shown, strerror(-rc));
	}
}

/* fsync of the directory dfd (an O_PATH descriptor is not enough for fsync). */
static int sync_dir(int dfd)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) == 0 ? 0 : -errno;
	close(fd);
	return rc;
}

/* Opens directory dir ("" = root) as O_PATH; with create, makes missing components (0700),
 * each one opened with the same confinement as it is made, and syncs their parents. */
static int open_dir(mb_workspace *ws, const char *dir, int create)
{
	int fd = ws_open(ws, dir, O_PATH | O_DIRECTORY);
	if (fd != -ENOENT || !create)
		return fd;
	int cur = fcntl(ws->fd, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return -errno;
	char comp[MB_WORKSPACE_MAX_COMPONENT + 1];
	const char *s = dir;
	for (;;) {
		const char *slash = strchr(s, '/');
		size_t n = slash ? (size_t)(slash - s) : strlen(s);
		if (n > MB_WORKSPACE_MAX_COMPONENT) {
			close(cur);
			return -ENAMETOOLONG;
		}
		memcpy(comp, s, n);
		comp[n] = 0;
		if (mkdirat(cur, comp, 0700) == 0) {
			int rc = sync_dir(cur);
			if (rc < 0) {
				close(cur);
				return rc;
			}
		} else if (errno != EEXIST) {
			int rc = -errno;
			close(cur);
			return rc;
		}
		int next = open_one(ws, cur, comp, O_PATH | O_DIRECTORY);
		close(cur);
		if (next < 0)
			return next;
		cur = next;
		if (!slash)
			return cur;
		s = slash + 1;
	}
}

static int64_t mtime_ms(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

static int is_tmp_name(const char *name)
{
	return strncmp(name, MB_WORKSPACE_TMP_PREFIX, TMP_PREFIX_LEN) == 0;
}

/* ---- walking a tree --------------------------------------------------------------------- */

/* Called for every entry that is not a directory; rel is its path from the workspace root,
 * dfd its directory. A negative return stops the walk with that code. */
typedef int (*walk_fn)(void *ud, int dfd, const char *rel, const char *name, const struct stat *st);

typedef struct {
	char **items;
	size_t n, cap;
} strq;

static int strq_push(strq *q, const char *s)
{
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 16;
		char **ni = realloc(q->items, cap * sizeof *ni);
		if (!ni)
			return -ENOMEM;
		q->items = ni;
		q->cap = cap;
	}
	q->items[q->n] = strdup(s);
	if (!q->items[q->n])
		return -ENOMEM;
	q->n++;
	return 0;
}

/* Breadth-first walk from start ("" or a checked directory path). Each directory is opened
 * from the workspace root with ws_open, so only one directory descriptor is open at a time and
 * depth costs no descriptors. Paths longer than MB_WORKSPACE_MAX_PATH (made by hand) are
 * skipped. At most max_dirs directories are visited (-E2BIG beyond). Returns 0, a negative
 * errno from opening start (-ENOENT...), or fn's code. */
static int walk(mb_workspace *ws, const char *start, int64_t max_dirs, walk_fn fn, void *ud)
{
	strq q = { 0 };
	int rc = strq_push(&q, start);
	char rel[MB_WORKSPACE_MAX_PATH + 2];
	for (size_t qi = 0; rc == 0 && qi < q.n; qi++) {
		const char *dir = q.items[qi];
		int fd = ws_open(ws, dir, O_RDONLY | O_DIRECTORY);
		if (fd < 0) {
			if (qi == 0)
				rc = fd;
			continue; /* removed or replaced while we walked */
		}
		DIR *d = fdopendir(fd);
		if (!d) {
			rc = -errno;
			close(fd);
			break;
		}
		struct dirent *de;
		while (rc == 0 && (de = readdir(d)) != NULL) {
			const char *name = de->d_name;
			if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
				continue;
			int n = snprintf(rel, sizeof rel, "%s%s%s", dir, *dir ? "/" : "", name);
			if (n < 0 || (size_t)n > MB_WORKSPACE_MAX_PATH)
				continue;
			struct stat st;
			if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
				continue;
			if (S_ISDIR(st.st_mode)) {
				if (is_tmp_name(name))
					continue;
				if ((int64_t)q.n > max_dirs)
					rc = -E2BIG;
				else
					rc = strq_push(&q, rel);
			} else {
				rc = fn(ud, dirfd(d), rel, name, &st);
			}
		}
		closedir(d);
	}
	for (size_t i = 0; i < q.n; i++)
		free(q.items[i]);
	free(q.items);
	return rc;
}

typedef struct {
	int64_t files, bytes;
	time_t now;
} scan_state;

static int scan_entry(void *ud, int dfd, const char *rel, const char *name, const struct stat *st)
{
	(void)rel;
	scan_state *s = ud;
	if (!S_ISREG(st->st_mode))
		return 0;
	if (is_tmp_name(name)) {
		if (st->st_mtim.tv_sec < s->now - STALE_TMP_SECONDS)
			unlinkat(dfd, name, 0); /* left by a crash; a failure here is harmless */
		return 0;
	}
	s->files++;
	s->bytes += st->st_size;
	return 0;
}

/* ---- usage shared between processes -------------------------------------------------------- */

static int usage_open(mb_workspace *ws)
{
	int fd = openat(ws->reg->qfd, ws->tenant, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

static int usage_store(mb_workspace *ws, char state)
{
	char rec[USAGE_LEN + 1];
	snprintf(rec, sizeof rec, USAGE_FMT, (long long)ws->files, (long long)ws->bytes, state);
	ssize_t w = pwrite(ws->ufd, rec, USAGE_LEN, 0);
	return w == USAGE_LEN ? 0 : w < 0 ? -errno : -EIO;
}

static void usage_unlock(mb_workspace *ws)
{
	flock(ws->ufd, LOCK_UN);
}

/* Counts the workspace by a scan (which also removes stale temporary files) and records it. */
static int usage_rescan(mb_workspace *ws)
{
	scan_state s = { 0, 0, time(NULL) };
	int rc = walk(ws, "", INT64_MAX, scan_entry, &s);
	if (rc != 0)
		return rc;
	ws->files = s.files;
	ws->bytes = s.bytes;
	return usage_store(ws, 'c');
}

/* Takes the usage lock (ws->lock is held: one thread of this process at a time) and loads the
 * committed usage: from the file when its record is clean, else (a holder died between
 * "pending" and "clean", or the file is new, short or damaged) by a scan; with rescan, always by
 * a scan. On failure the lock is not held. */
static int usage_lock(mb_workspace *ws, int rescan)
{
	for (int tries = 0;; tries++) {
		while (flock(ws->ufd, LOCK_EX) != 0)
			if (errno != EINTR)
				return -errno;
		struct stat st;
		if (fstat(ws->ufd, &st) != 0) {
			int rc = -errno;
			usage_unlock(ws);
			return rc;
		}
		if (st.st_nlink > 0 || tries == 3)
			break;
		/* removed by hand: lock the file the others open now, not the orphan */
		int fd = usage_open(ws);
		if (fd < 0) {
			usage_unlock(ws);
			return fd;
		}
		close(ws->ufd); /* drops the lock */
		ws->ufd = fd;
	}
	char rec[USAGE_LEN + 1];
	long long files, bytes;
	char state = 0;
	ssize_t n = pread(ws->ufd, rec, USAGE_LEN, 0);
	if (!rescan && n == USAGE_LEN) {
		rec[USAGE_LEN] = 0;
		if (sscanf(rec, "mb-usage 1 %lld %lld %c", &files, &bytes, &state) != 3 || files < 0 ||
		    bytes < 0)
			state = 0;
	}
	int rc = 0;
	if (state == 'c') {
		ws->files = files;
		ws->bytes = bytes;
	} else {
		rc = usage_rescan(ws);
	}
	if (rc != 0)
		usage_unlock(ws);
	return rc;
}

/* ---- registry ------------------------------------------------------------------------------ */

static int mkdir_p(const char *path, char *err, size_t errlen)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof buf)
		return fail(err, errlen, -EINVAL, "workspaces: bad root directory \"%s\"", path);
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		char saved = buf[i];
		buf[i] = 0;
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return fail(err, errlen, -errno, "workspaces: cannot create %s: %s", buf,
				    strerror(errno));
		buf[i] = saved;
	}
	return 0;
}

mb_workspaces *mb_workspaces_new(const char *root, const mb_workspace_limits *lim, char *err,
				 size_t errlen)
{
	if (!lim || lim->max_file_bytes <= 0 || lim->max_total_bytes <= 0 || lim->max_files <= 0) {
		fail(err, errlen, -EINVAL, "workspaces: every quota must be positive");
		return NULL;
	}
	if (mkdir_p(root, err, errlen) != 0)
		return NULL;
	mb_workspaces *r = calloc(1, sizeof *r);
	if (!r) {
		fail(err, errlen, -ENOMEM, "workspaces: out of memory");
		return NULL;
	}
	r->fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (r->fd < 0) {
		fail(err, errlen, -errno, "workspaces: cannot open %s: %s", root, strerror(errno));
		free(r);
		return NULL;
	}
	if (pthread_mutex_init(&r->lock, NULL) != 0) {
		fail(err, errlen, -ENOMEM, "workspaces: cannot create a mutex");
		close(r->fd);
		free(r);
		return NULL;
	}
	r->lim = *lim;
	r->qfd = -1;
	if (mkdirat(r->fd, USAGE_DIR, 0700) != 0 && errno != EEXIST) {
		fail(err, errlen, -errno, "workspaces: cannot create %s/" USAGE_DIR ": %s", root,
		     strerror(errno));
		mb_workspaces_free(r);
		return NULL;
	}
	r->qfd = openat(r->fd, USAGE_DIR, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r->qfd < 0) {
		fail(err, errlen, -errno, "workspaces: cannot open %s/" USAGE_DIR " (it must be a "
		     "directory): %s", root, strerror(errno));
		mb_workspaces_free(r);
		return NULL;
	}
	atomic_init(&r->seq, 0);
	if (getrandom(&r->salt, sizeof r->salt, GRND_NONBLOCK) != (ssize_t)sizeof r->salt)
		r->salt = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	/* Is openat2 there? Old kernels say ENOSYS, old container seccomp profiles EPERM. */
	int fd = sys_openat2(r->fd, ".", O_PATH | O_DIRECTORY);
	if (fd >= 0) {
		close(fd);
		r->use_openat2 = 1;
	} else if (fd != -ENOSYS && fd != -EPERM) {
		fail(err, errlen, fd, "workspaces: cannot open %s: %s", root, strerror(-fd));
		mb_workspaces_free(r);
		return NULL;
	}
	return r;
}

void mb_workspaces_force_fallback(mb_workspaces *r, int on)
{
	if (on)
		r->use_openat2 = 0;
	else {
		int fd = sys_openat2(r->fd, ".", O_PATH | O_DIRECTORY);
		r->use_openat2 = fd >= 0;
		if (fd >= 0)
			close(fd);
	}
}

static int check_tenant(const char *t, char *err, size_t errlen)
{
	size_t n = t ? strlen(t) : 0;
	char shown[SHOW_CAP];
	show(shown, t ? t : "", n);
	if (n == 0 || n > MAX_TENANT)
		goto bad;
	for (size_t i = 0; i < n; i++) {
		char c = t[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			goto bad;
	}
	return 0;
bad:
	return fail(err, errlen, -EINVAL,
		    "tenant \"%s\": a tenant name is 1 to 64 characters of A-Z a-z 0-9 _ -", shown);
}

mb_workspace *mb_workspaces_get(mb_workspaces *r, const char *tenant, char *err, size_t errlen)
{
	if (check_tenant(tenant, err, errlen) != 0)
		return NULL;
	pthread_mutex_lock(&r->lock);
	mb_workspace *ws;
	for (ws = r->list; ws; ws = ws->next)
		if (strcmp(ws->tenant, tenant) == 0)
			goto out;
	if (mkdirat(r->fd, tenant, 0700) != 0 && errno != EEXIST) {
		fail(err, errlen, -errno, "workspace of tenant %s: cannot create its directory: %s",
		     tenant, strerror(errno));
		goto out;
	}
	int fd = openat(r->fd, tenant, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fail(err, errlen, -ENOTDIR,
		     "workspace of tenant %s: its path is not a directory (a symbolic link?)", tenant);
		if (fd >= 0)
			close(fd);
		goto out;
	}
	ws = calloc(1, sizeof *ws);
	if (!ws || pthread_mutex_init(&ws->lock, NULL) != 0) {
		free(ws);
		ws = NULL;
		close(fd);
		fail(err, errlen, -ENOMEM, "workspace of tenant %s: out of memory", tenant);
		goto out;
	}
	ws->reg = r;
	ws->fd = fd;
	ws->dev = st.st_dev;
	memcpy(ws->tenant, tenant, strlen(tenant) + 1);
	/* counted by a scan under the usage lock: exact, since every process commits under it */
	int rc = ws->ufd = usage_open(ws);
	if (rc >= 0)
		rc = usage_lock(ws, 1);
	if (rc < 0) {
		fail(err, errlen, rc, "workspace of tenant %s: counting its files failed: %s", tenant,
		     strerror(-rc));
		if (ws->ufd >= 0)
			close(ws->ufd);
		pthread_mutex_destroy(&ws->lock);
		close(fd);
		free(ws);
		ws = NULL;
		goto out;
	}
	usage_unlock(ws);
	ws->next = r->list;
	r->list = ws;
out:
	pthread_mutex_unlock(&r->lock);
	return ws;
}

void mb_workspaces_free(mb_workspaces *r)
{
	if (!r)
		return;
	mb_workspace *ws = r->list;
	while (ws) {
		mb_workspace *next = ws->next;
		close(ws->fd);
		close(ws->ufd);
		pthread_mutex_destroy(&ws->lock);
		free(ws);
		ws = next;
	}
	pthread_mutex_destroy(&r->lock);
	close(r->fd);
	if (r->qfd >= 0)
		close(r->qfd);
	free(r);
}

const mb_workspace_limits *mb_workspace_limits_of(const mb_workspace *ws)
{
	return &ws->reg->lim;
}

const char *mb_workspace_tenant(const mb_workspace *ws)
{
	return ws->tenant;
}

/* ---- operations ------------------------------------------------------------------------ */

static void *plain_malloc(size_t n)
{
	return malloc(n);
}

static void plain_free(void *p)
{
	free(p);
}

int mb_workspace_read(mb_workspace *ws, const char *path, size_t path_len, char **data,
		      size_t *len, char *err, size_t errlen)
{
	return mb_workspace_read_with(ws, path, path_len, plain_malloc, plain_free, data, len, err,
				      errlen);
}

int mb_workspace_read_with(mb_workspace *ws, const char *path, size_t path_len,
			   void *(*alloc)(size_t), void (*dealloc)(void *), char **data,
			   size_t *len, char *err, size_t errlen)
{
	*data = NULL;
	*len = 0;
	wpath p;
	int rc = check_path("read", path, path_len, &p, err, errlen);
	if (rc)
		return rc;
	/* O_NONBLOCK: opening a FIFO for reading must not wait for a writer */
	int fd = ws_open(ws, p.buf, O_RDONLY | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return path_error(fd, "read", p.shown, err, errlen);
	struct stat st;
	char *buf = NULL;
	const int64_t max = ws->reg->lim.max_file_bytes;
	if (fstat(fd, &st) != 0) {
		rc = path_error(-errno, "read", p.shown, err, errlen);
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = fail(err, errlen, -EISDIR, "read %s: is a directory", p.shown);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = fail(err, errlen, -EINVAL,
			  "read %s: not a regular file (FIFOs, sockets and devices are not read)", p.shown);
		goto out;
	}
	if (st.st_nlink > 1) {
		rc = fail(err, errlen, -EMLINK,
			  "read %s: the file has %ju hard links; hard-linked files are not read in the "
			  "workspace", p.shown, (uintmax_t)st.st_nlink);
		goto out;
	}
	if (st.st_size > max) {
		rc = fail(err, errlen, -EFBIG, "read %s: the file is %jd bytes, above "
			  "workspace_max_file_bytes=%jd", p.shown, (intmax_t)st.st_size, (intmax_t)max);
		goto out;
	}
	size_t want = (size_t)st.st_size;
	buf = alloc(want + 1);
	if (!buf) {
		rc = fail(err, errlen, -ENOMEM, "read %s: out of memory for %zu bytes", p.shown, want);
		goto out;
	}
	size_t got = 0;
	while (got < want) {
		ssize_t k = read(fd, buf + got, want - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			rc = fail(err, errlen, -errno, "read %s: %s", p.shown, strerror(errno));
			goto out;
		}
		if (k == 0)
			break; /* shrank since fstat (changed by hand): return what is there */
		got += (size_t)k;
	}
	buf[got] = 0;
	*data = buf;
	*len = got;
	buf = NULL;
out:
	if (buf)
		dealloc(buf);
	close(fd);
	return rc;
}

/* What is at name in dfd now: *exists and *size of a regular file; errors for anything else. */
static int target_state(int dfd, const char *name, const char *op, const char *shown,
			int *exists, int64_t *size, char *err, size_t errlen)
{
	struct stat st;
	*exists = 0;
	*size = 0;
	if (dfd < 0)
		return 0;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno == ENOENT)
			return 0;
		return path_error(-errno, op, shown, err, errlen);
	}
	if (S_ISLNK(st.st_mode))
		return path_error(-ELOOP, op, shown, err, errlen);
	if (S_ISDIR(st.st_mode))
		return fail(err, errlen, -EISDIR, "%s %s: is a directory", op, shown);
	if (!S_ISREG(st.st_mode))
		return fail(err, errlen, -EINVAL, "%s %s: not a regular file", op, shown);
	*exists = 1;
	*size = st.st_size;
	return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t k = write(fd, data, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		data += k;
		len -= (size_t)k;
	}
	return 0;
}

int mb_workspace_write(mb_workspace *ws, const char *path, size_t path_len, const void *data,
		       size_t len, char *err, size_t errlen)
{
	wpath p;
	int rc = check_path("write", path, path_len, &p, err, errlen);
	if (rc)
		return rc;
	const mb_workspace_limits *lim = &ws->reg->lim;
	if (len > (uint64_t)lim->max_file_bytes)
		return fail(err, errlen, -EFBIG, "write %s: %zu bytes is above "
			    "workspace_max_file_bytes=%jd", p.shown, len, (intmax_t)lim->max_file_bytes);
	const char *dir, *name;
	split_path(&p, &dir, &name);

	int dfd = open_dir(ws, dir, 0);
	if (dfd < 0 && dfd != -ENOENT)
		return path_error(dfd, "write", p.shown, err, errlen);

	/* Reserve: every write in flight counts at its full size; only the file this one replaces
	 * (as it is now) is subtracted. */
	int exists;
	int64_t old;
	int64_t n = (int64_t)len;
	int new_file = 0, reserved = 0;
	pthread_mutex_lock(&ws->lock);
	rc = usage_lock(ws, 0);
	int locked = rc == 0;
	if (rc)
		fail(err, errlen, rc, "write %s: reading the workspace usage: %s", p.shown, strerror(-rc));
	else
		rc = target_state(dfd, name, "write", p.shown, &exists, &old, err, errlen);
	if (rc == 0) {
		int64_t in_use = ws->bytes + ws->res_bytes;
		if (in_use - old + n > lim->max_total_bytes) {
			if (exists)
				rc = fail(err, errlen, -EDQUOT, "write %s: workspace_max_bytes=%jd would be "
					  "exceeded (in use %jd, writing %jd, replacing %jd)", p.shown,
					  (intmax_t)lim->max_total_bytes, (intmax_t)in_use, (intmax_t)n,
					  (intmax_t)old);
			else
				rc = fail(err, errlen, -EDQUOT, "write %s: workspace_max_bytes=%jd would be "
					  "exceeded (in use %jd, writing %jd)", p.shown,
					  (intmax_t)lim->max_total_bytes, (intmax_t)in_use, (intmax_t)n);
		} else if (!exists && ws->files + ws->res_files + 1 > lim->max_files) {
			rc = fail(err, errlen, -EDQUOT, "write %s: workspace_max_files=%jd reached",
				  p.shown, (intmax_t)lim->max_files);
		} else {
			new_file = !exists;
			ws->res_bytes += n;
			ws->res_files += new_file;
			reserved = 1;
		}
	}
	if (locked)
		usage_unlock(ws);
	pthread_mutex_unlock(&ws->lock);
	if (rc) {
		if (dfd >= 0)
			close(dfd);
		return rc;
	}

	char tmp[64];
	int fd = -1;
	if (dfd < 0) {
		dfd = open_dir(ws, dir, 1);
		if (dfd < 0) {
			rc = path_error(dfd, "write", p.shown, err, errlen);
			goto release;
		}
	}
	for (int tries = 0; fd < 0 && tries < 100; tries++) {
		uint64_t seq = atomic_fetch_add(&ws->reg->seq, 1);
		snprintf(tmp, sizeof tmp, MB_WORKSPACE_TMP_PREFIX "%016llx%08llx",
			 (unsigned long long)ws->reg->salt, (unsigned long long)(seq & 0xffffffffu));
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST) {
			rc = fail(err, errlen, -errno, "write %s: cannot create a temporary file: %s",
				  p.shown, strerror(errno));
			goto release;
		}
	}
	if (fd < 0) {
		rc = fail(err, errlen, -EEXIST, "write %s: cannot create a temporary file", p.shown);
		goto release;
	}
	rc = write_all(fd, data, len);
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc) {
		fail(err, errlen, rc, "write %s: %s", p.shown, strerror(-rc));
		goto unlink_tmp;
	}

	/* Commit: rename over the target and account for what it really replaced, atomically with
	 * respect to other writers and deletes of this workspace. */
	pthread_mutex_lock(&ws->lock);
	rc = usage_lock(ws, 0);
	locked = rc == 0;
	if (rc)
		fail(err, errlen, rc, "write %s: reading the workspace usage: %s", p.shown, strerror(-rc));
	else
		rc = target_state(dfd, name, "write", p.shown, &exists, &old, err, errlen);
	/* again: another process may have committed since the reservation */
	if (rc == 0 && ws->bytes - old + n > lim->max_total_bytes) {
		if (exists)
			rc = fail(err, errlen, -EDQUOT, "write %s: workspace_max_bytes=%jd would be "
				  "exceeded (in use %jd, writing %jd, replacing %jd)", p.shown,
				  (intmax_t)lim->max_total_bytes, (intmax_t)ws->bytes, (intmax_t)n,
				  (intmax_t)old);
		else
			rc = fail(err, errlen, -EDQUOT, "write %s: workspace_max_bytes=%jd would be "
				  "exceeded (in use %jd, writing %jd)", p.shown,
				  (intmax_t)lim->max_total_bytes, (intmax_t)ws->bytes, (intmax_t)n);
	}
	else if (rc == 0 && !exists && ws->files + 1 > lim->max_files)
		rc = fail(err, errlen, -EDQUOT, "write %s: workspace_max_files=%jd reached", p.shown,
			  (intmax_t)lim->max_files);
	if (rc == 0 && (rc = usage_store(ws, 'p')) != 0)
		fail(err, errlen, rc, "write %s: recording the workspace usage: %s", p.shown,
		     strerror(-rc));
	if (rc == 0 && renameat(dfd, tmp, dfd, name) != 0)
		rc = fail(err, errlen, -errno, "write %s: %s", p.shown, strerror(errno));
	if (rc == 0) {
		ws->bytes += n - old;
		ws->files += !exists;
	}
	if (locked) {
		usage_store(ws, 'c'); /* when it fails, "pending" stays: the next holder rescans */
		usage_unlock(ws);
	}
	ws->res_bytes -= n;
	ws->res_files -= new_file;
	reserved = 0;
	pthread_mutex_unlock(&ws->lock);
	if (rc)
		goto unlink_tmp;
	rc = sync_dir(dfd);
	if (rc)
		fail(err, errlen, rc, "write %s: syncing its directory: %s", p.shown, strerror(-rc));
	close(dfd);
	return rc;

unlink_tmp:
	unlinkat(dfd, tmp, 0);
release:
	if (reserved) {
		pthread_mutex_lock(&ws->lock);
		ws->res_bytes -= n;
		ws->res_files -= new_file;
		pthread_mutex_unlock(&ws->lock);
	}
	if (dfd >= 0)
		close(dfd);
	return rc;
}

int mb_workspace_delete(mb_workspace *ws, const char *path, size_t path_len, char *err,
			size_t errlen)
{
	wpath p;
	int rc = check_path("delete", path, path_len, &p, err, errlen);
	if (rc)
		return rc;
	const char *dir, *name;
	split_path(&p, &dir, &name);
	int dfd = open_dir(ws, dir, 0);
	if (dfd < 0)
		return path_error(dfd, "delete", p.shown, err, errlen);
	int exists;
	int64_t size;
	pthread_mutex_lock(&ws->lock);
	rc = usage_lock(ws, 0);
	int locked = rc == 0;
	if (rc)
		fail(err, errlen, rc, "delete %s: reading the workspace usage: %s", p.shown, strerror(-rc));
	else
		rc = target_state(dfd, name, "delete", p.shown, &exists, &size, err, errlen);
	if (rc == -EISDIR)
		rc = fail(err, errlen, -EISDIR, "delete %s: is a directory (only files are deleted)",
			  p.shown);
	else if (rc == 0 && !exists)
		rc = path_error(-ENOENT, "delete", p.shown, err, errlen);
	else if (rc == 0 && (rc = usage_store(ws, 'p')) != 0)
		fail(err, errlen, rc, "delete %s: recording the workspace usage: %s", p.shown,
		     strerror(-rc));
	else if (rc == 0 && unlinkat(dfd, name, 0) != 0)
		rc = fail(err, errlen, -errno, "delete %s: %s", p.shown, strerror(errno));
	if (rc == 0) {
		ws->bytes -= size;
		ws->files -= 1;
	}
	if (locked) {
		usage_store(ws, 'c');
		usage_unlock(ws);
	}
	pthread_mutex_unlock(&ws->lock);
	if (rc == 0)
		sync_dir(dfd); /* the unlink is done; a failed sync only weakens durability */
	close(dfd);
	return rc;
}

int mb_workspace_stat(mb_workspace *ws, const char *path, size_t path_len,
		      mb_workspace_info *info, char *err, size_t errlen)
{
	wpath p;
	memset(info, 0, sizeof *info);
	int rc = check_path("stat", path, path_len, &p, err, errlen);
	if (rc)
		return rc;
	int fd = ws_open(ws, p.buf, O_PATH);
	if (fd < 0)
		return path_error(fd, "stat", p.shown, err, errlen);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		rc = path_error(-errno, "stat", p.shown, err, errlen);
		close(fd);
		return rc;
	}
	if (S_ISDIR(st.st_mode))
		info->is_dir = 1;
	else if (!S_ISREG(st.st_mode))
		rc = fail(err, errlen, -EINVAL, "stat %s: not a regular file", p.shown);
	else
		info->size = st.st_size;
	info->mtime_ms = mtime_ms(&st);
	close(fd);
	return rc;
}

void mb_workspace_usage(mb_workspace *ws, int64_t *files, int64_t *bytes)
{
	pthread_mutex_lock(&ws->lock);
	if (usage_lock(ws, 0) == 0) /* else: the counts as last read */
		usage_unlock(ws);
	if (files)
		*files = ws->files;
	if (bytes)
		*bytes = ws->bytes;
	pthread_mutex_unlock(&ws->lock);
}

typedef struct {
	mb_workspace_entry *e;
	size_t n, cap;
	int64_t max;
} list_state;

static int list_entry(void *ud, int dfd, const char *rel, const char *name, const struct stat *st)
{
	(void)dfd;
	list_state *s = ud;
	if (!S_ISREG(st->st_mode) || is_tmp_name(name))
		return 0;
	if ((int64_t)s->n >= s->max)
		return -E2BIG;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 32;
		mb_workspace_entry *ne = realloc(s->e, cap * sizeof *ne);
		if (!ne)
			return -ENOMEM;
		s->e = ne;
		s->cap = cap;
	}
	char *copy = strdup(rel);
	if (!copy)
		return -ENOMEM;
	s->e[s->n].path = copy;
	s->e[s->n].size = st->st_size;
	s->e[s->n].mtime_ms = mtime_ms(st);
	s->n++;
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const mb_workspace_entry *)a)->path, ((const mb_workspace_entry *)b)->path);
}

int mb_workspace_list(mb_workspace *ws, const char *dir, size_t dir_len,
		      mb_workspace_entry **out, size_t *count, char *err, size_t errlen)
{
	*out = NULL;
	*count = 0;
	wpath p;
	p.buf[0] = 0;
	strcpy(p.shown, "(workspace root)");
	if (dir && dir_len) {
		int rc = check_path("list", dir, dir_len, &p, err, errlen);
		if (rc)
			return rc;
	}
	list_state s = { NULL, 0, 0, ws->reg->lim.max_files };
	int rc = walk(ws, p.buf, ws->reg->lim.max_files, list_entry, &s);
	if (rc == 0) {
		if (s.n)
			qsort(s.e, s.n, sizeof *s.e, entry_cmp);
		*out = s.e;
		*count = s.n;
		return 0;
	}
	mb_workspace_entries_free(s.e, s.n);
	if (rc == -E2BIG)
		return fail(err, errlen, rc, "list %s: more than workspace_max_files=%jd files or "
			    "directories", p.shown, (intmax_t)ws->reg->lim.max_files);
	if (rc == -ENOMEM)
		return fail(err, errlen, rc, "list %s: out of memory", p.shown);
	return path_error(rc, "list", p.shown, err, errlen);
}

void mb_workspace_entries_free(mb_workspace_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(e[i].path);
	free(e);
}

const char *mb_workspace_error_code(int rc)
{
	switch (-rc) {
	case ENOENT:
		return "not_found";
	case EFBIG:
	case EDQUOT:
	case E2BIG:
		return "quota";
	case EINVAL:
	case ELOOP:
	case ENOTDIR:
	case EISDIR:
	case EXDEV:
	case EMLINK:
	case ENAMETOOLONG:
		return "invalid";
	default:
		return "io";
	}
}
