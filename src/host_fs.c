/* host_fs.c - file operations for the trusted host Lua on its own directories (skills, catalog).
 *
 * The host manages directories that the operator configured (skills_dir, catalog_dir), with
 * names it has already validated, so these are plain POSIX calls: list a directory, stat, read
 * with a size cap, write atomically (temporary file, fsync, rename, fsync of the directory, so a
 * file is either the old or the new content after a crash), remove, mkdir -p. Sandbox code never
 * reaches them: it has the tenant-confined workspace (workspace.c) instead. Every function
 * returns nil plus a message naming the path on failure. Loop thread only.
 */
#include "host_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(lua_State *L, const char *what, const char *path, int err)
{
	lua_pushnil(L);
	lua_pushfstring(L, "%s %s: %s", what, path, strerror(err));
	lua_pushstring(L, err == ENOENT ? "not_found" : "io");
	return 3;
}

static const char *type_name(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "link" : "other";
}

static void push_stat(lua_State *L, const struct stat *st)
{
	lua_createtable(L, 0, 3);
	lua_pushstring(L, type_name(st->st_mode));
	lua_setfield(L, -2, "type");
	lua_pushinteger(L, (lua_Integer)st->st_size);
	lua_setfield(L, -2, "size");
	lua_pushinteger(L, (lua_Integer)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000);
	lua_setfield(L, -2, "mtime_ms");
}

/* list(dir) -> array of {name, type, size, mtime_ms} in directory order (entries that vanish
 * while listing are skipped; symbolic links are followed) */
static int l_list(lua_State *L)
{
	const char *dir = luaL_checkstring(L, 1);
	DIR *d = opendir(dir);
	if (!d)
		return fail(L, "list", dir, errno);
	lua_newtable(L);
	lua_Integer n = 0;
	struct dirent *e;
	char path[4352];
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		struct stat st;
		if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
		    stat(path, &st) != 0)
			continue;
		push_stat(L, &st);
		lua_pushstring(L, e->d_name);
		lua_setfield(L, -2, "name");
		lua_rawseti(L, -2, ++n);
	}
	closedir(d);
	return 1;
}

static int l_stat(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	struct stat st;
	if (stat(path, &st) != 0)
		return fail(L, "stat", path, errno);
	push_stat(L, &st);
	return 1;
}

/* read(path, max_bytes) -> data | nil, message, code ("not_found", "too_large", "io") */
static int l_read(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	lua_Integer max = luaL_checkinteger(L, 2);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return fail(L, "read", path, errno);
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		int err = errno;
		close(fd);
		if (!S_ISREG(st.st_mode)) {
			lua_pushnil(L);
			lua_pushfstring(L, "read %s: not a regular file", path);
			lua_pushliteral(L, "io");
			return 3;
		}
		return fail(L, "read", path, err);
	}
	if (st.st_size > max) {
		close(fd);
		lua_pushnil(L);
		lua_pushfstring(L, "read %s: %I bytes is above the limit of %I", path,
				(lua_Integer)st.st_size, max);
		lua_pushliteral(L, "too_large");
		return 3;
	}
	luaL_Buffer b;
	char *p = luaL_buffinitsize(L, &b, (size_t)st.st_size + 1);
	size_t got = 0, cap = (size_t)st.st_size + 1;
	for (;;) {
		ssize_t r = read(fd, p + got, cap - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int err = errno;
			close(fd);
			return fail(L, "read", path, err);
		}
		if (r == 0)
			break;
		got += (size_t)r;
		if (got == cap) { /* the file grew while we read it */
			close(fd);
			lua_pushnil(L);
			lua_pushfstring(L, "read %s: the file changed while being read", path);
			lua_pushliteral(L, "io");
			return 3;
		}
	}
	close(fd);
	luaL_pushresultsize(&b, got);
	return 1;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int fsync_dir_of(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	if (n == 0 || n >= sizeof dir) {
		dir[0] = slash ? '/' : '.';
		dir[1] = 0;
	} else {
		memcpy(dir, path, n);
		dir[n] = 0;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

/* write_atomic(path, data) -> true | nil, message: the file is the old or the new content
 * whatever happens, and the new content is on disk when this returns. */
static int l_write_atomic(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	size_t len;
	const char *data = luaL_checklstring(L, 2, &len);
	char tmp[4200];
	const char *slash = strrchr(path, '/');
	int n = slash ? snprintf(tmp, sizeof tmp, "%.*s/.%s.tmp-XXXXXX", (int)(slash - path), path, slash + 1)
		      : snprintf(tmp, sizeof tmp, ".%s.tmp-XXXXXX", path);
	if (n >= (int)sizeof tmp)
		return fail(L, "write", path, ENAMETOOLONG);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return fail(L, "write", path, errno);
	if (fchmod(fd, 0644) != 0 || write_all(fd, data, len) != 0 || fsync(fd) != 0) {
		int err = errno;
		close(fd);
		unlink(tmp);
		return fail(L, "write", path, err);
	}
	if (close(fd) != 0 || rename(tmp, path) != 0) {
		int err = errno;
		unlink(tmp);
		return fail(L, "write", path, err);
	}
	if (fsync_dir_of(path) != 0)
		return fail(L, "write (fsync of the directory)", path, errno);
	lua_pushboolean(L, 1);
	return 1;
}

static int l_remove(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	if (remove(path) != 0)
		return fail(L, "remove", path, errno);
	fsync_dir_of(path);
	lua_pushboolean(L, 1);
	return 1;
}

/* mkdir(path): mkdir -p with mode 0700 for what it creates */
static int l_mkdir(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	char buf[4096];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof buf)
		return fail(L, "mkdir", path, ENAMETOOLONG);
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0700) != 0 && errno != EEXIST)
			return fail(L, "mkdir", buf, errno);
		*p = '/';
	}
	if (mkdir(buf, 0700) != 0 && errno != EEXIST)
		return fail(L, "mkdir", path, errno);
	lua_pushboolean(L, 1);
	return 1;
}

void mb_host_fs_open(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{ "list", l_list }, { "stat", l_stat }, { "read", l_read },
		{ "write_atomic", l_write_atomic }, { "remove", l_remove }, { "mkdir", l_mkdir },
		{ NULL, NULL },
	};
	luaL_newlib(L, fns);
	lua_setfield(L, -2, "fs");
}
