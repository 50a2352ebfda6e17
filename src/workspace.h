/* workspace.h - per-tenant workspaces: files that agents keep between calls.
 *
 * Each tenant has one directory, DATA_DIR/workspaces/<tenant>, reached only through an
 * mb_workspace handle. Every path given to this module is relative to that directory and is
 * resolved by the kernel with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) from an O_PATH descriptor of the workspace root (or,
 * where openat2 does not exist, one component at a time with O_NOFOLLOW), so neither "..", nor
 * an absolute path, nor a symbolic link planted anywhere in the tree can lead outside. String
 * checks run first only to give clear errors. Writes are atomic (temporary file, fsync, rename,
 * directory fsync) and bounded by three quotas per tenant (file size, total bytes, file count),
 * which hold across processes sharing the directory (replicas): the committed usage is kept in
 * ROOT/.mb-quota/<tenant> under its flock, outside every tenant's directory.
 * docs/workspace.md describes the rules for agents and Lua authors.
 *
 * Ownership: a registry (mb_workspaces) owns its workspaces; a workspace handle stays valid
 * until mb_workspaces_free. Buffers and entry arrays returned to callers are theirs to free.
 *
 * Thread rules: every function may be called from any thread at the same time on the same
 * registry or workspace (worker threads run sandbox code while the loop thread serves the host).
 * The registry and each workspace have their own mutex; file I/O runs outside the locks, only
 * quota reservations and the final rename/unlink with its accounting run under them.
 *
 * Errors: functions return 0 or a negative errno value and write a message for the agent into
 * err (e.g. "write x.bin: 12000000 bytes is above workspace_max_file_bytes=10485760"). -ENOENT
 * always means "does not exist"; mb_workspace_error_code maps the others to a short class.
 */
#ifndef MB_WORKSPACE_H
#define MB_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/* Rules of a path inside a workspace (also checked by the string layer). */
#define MB_WORKSPACE_MAX_PATH 1024
#define MB_WORKSPACE_MAX_COMPONENT 255
#define MB_WORKSPACE_TMP_PREFIX ".mb-tmp-"

/* Quotas, per tenant. Every field must be positive. */
typedef struct {
	int64_t max_file_bytes;   /* workspace_max_file_bytes: largest file read or written */
	int64_t max_total_bytes;  /* workspace_max_bytes: sum of file sizes */
	int64_t max_files;        /* workspace_max_files: number of files */
} mb_workspace_limits;

typedef struct mb_workspaces mb_workspaces;
typedef struct mb_workspace mb_workspace;

/* One file found by mb_workspace_list. */
typedef struct {
	char *path;          /* relative to the workspace root, '/'-separated */
	int64_t size;        /* bytes */
	int64_t mtime_ms;    /* modification time, milliseconds since the Unix epoch */
} mb_workspace_entry;

/* What mb_workspace_stat reports. */
typedef struct {
	int64_t size;
	int64_t mtime_ms;
	int is_dir;          /* 1 for a directory (size is then 0) */
} mb_workspace_info;

/// Opens (creating it 0700, with missing parents, when needed) the directory that holds all
/// workspaces and makes a registry of tenants over it.
/// @param root   the directory, normally DATA_DIR/workspaces
/// @param lim    quotas applied to every tenant (copied)
/// @param err    receives the reason on failure
/// @param errlen size of err
/// @returns the registry, or NULL on failure
mb_workspaces *mb_workspaces_new(const char *root, const mb_workspace_limits *lim, char *err,
				 size_t errlen);

/// The workspace of a tenant: opened (directory created 0700, usage counted by a scan that also
/// removes temporary files older than 10 minutes left by a crash) on first use, the same
/// pointer afterwards.
/// @param r      the registry
/// @param tenant the tenant name; must match ^[A-Za-z0-9_-]{1,64}$
/// @param err    receives the reason on failure
/// @param errlen size of err
/// @returns the workspace (owned by r), or NULL on failure
mb_workspace *mb_workspaces_get(mb_workspaces *r, const char *tenant, char *err, size_t errlen);

/// Closes every workspace and frees the registry. No other thread may be using it.
/// @param r the registry, or NULL
void mb_workspaces_free(mb_workspaces *r);

/// For tests: when on is nonzero, paths are resolved with the openat/O_NOFOLLOW walk even when
/// openat2 exists. Call before the first mb_workspaces_get.
/// @param r  the registry
/// @param on 1 to force the fallback, 0 to use openat2 when the kernel has it
void mb_workspaces_force_fallback(mb_workspaces *r, int on);

/// @param ws a workspace
/// @returns its quotas (owned by the registry)
const mb_workspace_limits *mb_workspace_limits_of(const mb_workspace *ws);

/// @param ws a workspace
/// @returns its tenant name (owned by the workspace)
const char *mb_workspace_tenant(const mb_workspace *ws);

/// Reads a whole file into a malloc'd buffer (NUL-terminated after len bytes, for convenience).
/// Refuses files above max_file_bytes, non-regular files (a FIFO is refused without blocking),
/// symbolic links and files with more than one hard link.
/// @param ws       the workspace
/// @param path     the path (explicit length: a NUL byte inside is an error)
/// @param path_len its length
/// @param data     receives the bytes; free with free()
/// @param len      receives their number
/// @param err      receives the reason on failure
/// @param errlen   size of err
/// @returns 0, -ENOENT when the file does not exist, another negative errno otherwise
int mb_workspace_read(mb_workspace *ws, const char *path, size_t path_len, char **data,
		      size_t *len, char *err, size_t errlen);

/// mb_workspace_read with the caller's allocator for the buffer (the sandbox passes
/// mb_budget_malloc/mb_budget_free so that the buffer is charged to the execution). An
/// allocation failure returns -ENOMEM.
/// @param alloc   allocates len+1 bytes; may return NULL
/// @param dealloc frees what alloc returned (used on failure paths)
/// (other parameters as mb_workspace_read; free *data with dealloc)
int mb_workspace_read_with(mb_workspace *ws, const char *path, size_t path_len,
			   void *(*alloc)(size_t), void (*dealloc)(void *), char **data,
			   size_t *len, char *err, size_t errlen);

/// Writes a whole file atomically: a temporary file (.mb-tmp-*, 0600, O_EXCL|O_NOFOLLOW) in the
/// same directory is written and fsync'd, renamed over the target, and the directory fsync'd.
/// Missing parent directories are created (0700). Readers see the old or the new content, never
/// a mix. Quotas are reserved before any I/O, so concurrent writers cannot overshoot them.
/// @param ws       the workspace
/// @param path     the path (explicit length)
/// @param path_len its length
/// @param data     the bytes (any content, NUL bytes included)
/// @param len      their number
/// @param err      receives the reason on failure
/// @param errlen   size of err
/// @returns 0, -EFBIG (file quota), -EDQUOT (total or count quota), another negative errno
int mb_workspace_write(mb_workspace *ws, const char *path, size_t path_len, const void *data,
		       size_t len, char *err, size_t errlen);

/// Deletes a regular file (not a directory; empty parent directories are left in place).
/// @param ws       the workspace
/// @param path     the path (explicit length)
/// @param path_len its length
/// @param err      receives the reason on failure
/// @param errlen   size of err
/// @returns 0 when deleted, -ENOENT when there was no such file, another negative errno
int mb_workspace_delete(mb_workspace *ws, const char *path, size_t path_len, char *err,
			size_t errlen);

/// Lists the regular files under a directory, recursively, sorted by path (byte order).
/// Temporary files, symbolic links and other special files are not listed.
/// @param ws      the workspace
/// @param dir     a directory path, or NULL / "" for the whole workspace
/// @param dir_len its length
/// @param out     receives a malloc'd array (free with mb_workspace_entries_free); NULL when
///                there are no entries
/// @param count   receives the number of entries
/// @param err     receives the reason on failure
/// @param errlen  size of err
/// @returns 0, -ENOENT when dir does not exist, -E2BIG when more than max_files files or
///          directories are found, another negative errno
int mb_workspace_list(mb_workspace *ws, const char *dir, size_t dir_len,
		      mb_workspace_entry **out, size_t *count, char *err, size_t errlen);

/// Frees what mb_workspace_list returned.
/// @param e the array (or NULL)
/// @param n its number of entries
void mb_workspace_entries_free(mb_workspace_entry *e, size_t n);

/// Size and modification time of a regular file or a directory.
/// @param ws       the workspace
/// @param path     the path (explicit length)
/// @param path_len its length
/// @param info     filled on success
/// @param err      receives the reason on failure
/// @param errlen   size of err
/// @returns 0, -ENOENT when it does not exist, another negative errno (a symbolic link or a
///          special file is an error, not "missing")
int mb_workspace_stat(mb_workspace *ws, const char *path, size_t path_len,
		      mb_workspace_info *info, char *err, size_t errlen);

/// Current usage as counted for the quotas (committed writes only).
/// @param ws    the workspace
/// @param files receives the number of files (may be NULL)
/// @param bytes receives the sum of their sizes (may be NULL)
void mb_workspace_usage(mb_workspace *ws, int64_t *files, int64_t *bytes);

/// A short class for an error returned by this module, for agents and host code:
/// "not_found" (-ENOENT), "quota" (-EFBIG, -EDQUOT, -E2BIG), "invalid" (bad path or tenant,
/// symbolic link, hard link, directory or special file where a file was expected), "io".
/// @param rc a negative return value
/// @returns a static string
const char *mb_workspace_error_code(int rc);


/// Adds a `workspace` table (read, write, delete, list, stat, usage; each takes the tenant
/// first) to the table on top of the stack, for the trusted host state (workspace_lua.c).
/// @param L   the host state
/// @param reg the registry; must outlive L
void mb_workspace_lua_open(lua_State *L, mb_workspaces *reg);

#endif
