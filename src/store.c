/* store.c - the SQLite store: opening and checking the database file, schema migrations, a cache
 * of prepared statements, and the `mb.db` functions of the host Lua state.
 *
 * Opening is defensive: the path is stat'ed first (a directory, an unreadable file or a dangling
 * link is refused before SQLite sees it), a missing file is created by us with mode 0600 and its
 * directory fsync'd, then SQLite opens it read-write and `PRAGMA quick_check` must answer "ok"
 * before anything is written (WAL mode is switched on only after that check, so a refused file is
 * left byte-for-byte as it was). Every refusal names the file and says what to do.
 *
 * Statements given to query/row/run are compiled once and kept in a small cache keyed by their
 * SQL text (FNV-1a hash plus exact comparison), evicting the least recently used. A statement is
 * reset and its bindings cleared after each use, including error paths; the one in use is
 * remembered in s->active, and every entry point first resets a leftover one, so a Lua error
 * that longjmps out mid-use (a memory error while building rows) cannot keep a read snapshot
 * open (which would stop WAL checkpoints) or leave a binding to a freed string. Strings are
 * bound SQLITE_STATIC: they are Lua arguments that stay on the stack for the whole call.
 *
 * Transactions belong to mb.db.tx alone: an authorizer refuses BEGIN/COMMIT/ROLLBACK/SAVEPOINT/
 * RELEASE in any SQL except our own (s->allow_tx set around them), so a stray COMMIT in a query
 * cannot break the nesting that tx keeps in s->tx_depth.
 */
#include "store.h"

/* Databases up to this size are checked page by page (quick_check) at every start. */
#define MB_STORE_FULL_CHECK_BYTES ((off_t)64 << 20)

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "log.h"

typedef struct cache_entry {
	char *sql;
	size_t len;
	uint64_t hash;
	uint64_t used;          /* s->tick at the last use; the smallest is evicted */
	sqlite3_stmt *stmt;
} cache_entry;

struct mb_store {
	sqlite3 *db;
	char *path;
	int tx_depth;           /* mb.db.tx nesting: 0 = no transaction of ours */
	int allow_tx;           /* authorizer lets transaction control through (our own SQL) */
	int denied_tx;          /* the authorizer refused transaction control since last cleared */
	sqlite3_stmt *active;   /* bound or stepping now; reset by the next call if a longjmp
	                         * (a Lua memory error while building rows) skipped its reset */
	uint64_t tick;
	uint64_t prepares, hits;
	int ncache;
	cache_entry cache[MB_STORE_CACHE_SIZE];
};

static const char TX_DENIED[] = "transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE) "
				"is not allowed in SQL; use mb.db.tx";

/* ---- opening ------------------------------------------------------------------------------ */

static int authorizer(void *ud, int action, const char *a, const char *b, const char *c,
		      const char *d)
{
	(void)a, (void)b, (void)c, (void)d;
	mb_store *s = ud;
	if ((action == SQLITE_TRANSACTION || action == SQLITE_SAVEPOINT) && !s->allow_tx) {
		s->denied_tx = 1;
		return SQLITE_DENY;
	}
	return SQLITE_OK;
}

/* Runs our own SQL (transaction control allowed). Returns the SQLite result code; the message
 * stays in sqlite3_errmsg. */
static int internal_exec(mb_store *s, const char *sql)
{
	s->allow_tx = 1;
	int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
	s->allow_tx = 0;
	return rc;
}

/* The SQLite message with the OS error appended when there is one ("unable to open database
 * file; Permission denied"). */
static void sqlite_msg(sqlite3 *db, char *buf, size_t len)
{
	int sys = sqlite3_system_errno(db);
	int code = sqlite3_extended_errcode(db) & 0xff;
	if (sys && (code == SQLITE_CANTOPEN || code == SQLITE_IOERR || code == SQLITE_PERM ||
		    code == SQLITE_READONLY || code == SQLITE_FULL))
		snprintf(buf, len, "%s; %s", sqlite3_errmsg(db), strerror(sys));
	else
		snprintf(buf, len, "%s", sqlite3_errmsg(db));
}

/* A refusal at open time, worded by the kind of failure. */
static void open_error(char *err, size_t errlen, const char *path, sqlite3 *db, int rc)
{
	char msg[MB_ERR_MAX];
	sqlite_msg(db, msg, sizeof msg);
	switch (rc & 0xff) {
	case SQLITE_NOTADB:
		mb_seterr(err, errlen, "%s: file is not a database (SQLite: %s); moonbox will not start "
			 "over it - move it aside or restore a backup", path, msg);
		break;
	case SQLITE_CORRUPT:
		mb_seterr(err, errlen, "%s: database file is corrupt (SQLite: %s); moonbox will not start "
			 "over it - move it aside or restore a backup (the sqlite3 shell's .recover "
			 "command may salvage its data)", path, msg);
		break;
	case SQLITE_CANTOPEN: case SQLITE_PERM: case SQLITE_READONLY: case SQLITE_AUTH:
		mb_seterr(err, errlen, "%s: cannot open for reading and writing (SQLite: %s); moonbox "
			 "will not start over it - give this user read and write permission on the file "
			 "and its directory (the WAL files are created beside it) or move it aside",
			 path, msg);
		break;
	case SQLITE_BUSY: case SQLITE_LOCKED:
		mb_seterr(err, errlen, "%s: database is locked by another process (SQLite: %s); stop "
			 "the other process or raise store_busy_timeout_ms", path, msg);
		break;
	case SQLITE_IOERR: case SQLITE_FULL:
		mb_seterr(err, errlen, "%s: I/O error (SQLite: %s); check the disk and free space",
			 path, msg);
		break;
	default:
		mb_seterr(err, errlen, "%s: cannot open the database (SQLite: %s)", path, msg);
		break;
	}
}

/* fsync the directory holding path, so that a file just created there survives a crash. */
static void sync_parent_dir(const char *path)
{
	char dir[PATH_MAX];
	size_t n = strlen(path);
	if (n >= sizeof dir)
		return;
	memcpy(dir, path, n + 1);
	char *slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/* Checks what is at path before SQLite touches it, and creates a missing file with mode 0600. */
static int precheck_path(const char *path, char *err, size_t errlen)
{
	struct stat st;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			mb_seterr(err, errlen, "%s: is a directory, not a database file; moonbox will not "
				 "start over it - move it aside or choose another data directory", path);
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			mb_seterr(err, errlen, "%s: is not a regular file; moonbox will not start over it "
				 "- move it aside or choose another data directory", path);
			return -1;
		}
		if (faccessat(AT_FDCWD, path, R_OK | W_OK, AT_EACCESS) != 0) {
			mb_seterr(err, errlen, "%s: cannot open for reading and writing (%s); moonbox will "
				 "not start over it - give this user read and write permission (mode 0600) "
				 "or move it aside", path, strerror(errno));
			return -1;
		}
		return 0;
	}
	if (errno != ENOENT) {
		mb_seterr(err, errlen, "%s: cannot inspect the database file (%s); check the "
			 "permissions of its directories", path, strerror(errno));
		return -1;
	}
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		if (errno == EEXIST) {
			struct stat lst;
			if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
				mb_seterr(err, errlen, "%s: is a symbolic link to a missing file; moonbox "
					 "will not create a database through it - remove the link or "
					 "restore its target", path);
				return -1;
			}
			return 0; /* appeared meanwhile: open it like any existing file */
		}
		mb_seterr(err, errlen, "%s: cannot create the database file (%s); check that its "
			 "directory exists and is writable", path, strerror(errno));
		return -1;
	}
	close(fd);
	sync_parent_dir(path);
	return 0;
}

/* Runs a PRAGMA that returns one text row and copies that row into out. */
static int pragma_text(sqlite3 *db, const char *sql, char *out, size_t outlen)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *t = sqlite3_column_text(st, 0);
		snprintf(out, outlen, "%s", t ? (const char *)t : "");
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		out[0] = 0;
		rc = SQLITE_OK;
	}
	if (rc != SQLITE_OK) {
		sqlite3_finalize(st); /* keeps the error code and message on db */
		return rc;
	}
	sqlite3_finalize(st);
	return SQLITE_OK;
}

int mb_store_open(mb_store **out, const char *path, int busy_timeout_ms, char *err, size_t errlen)
{
	sqlite3 *db = NULL;
	mb_store *s = NULL;
	char text[256];
	if (!path || !*path) {
		mb_seterr(err, errlen, "store: the database path is empty");
		return -1;
	}
	if (precheck_path(path, err, errlen) != 0)
		return -1;
	int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				 SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE, NULL);
	if (rc != SQLITE_OK) {
		if (!db) {
			mb_seterr(err, errlen, "%s: cannot open the database (SQLite: out of memory)", path);
			return -1;
		}
		open_error(err, errlen, path, db, rc);
		goto fail;
	}
	sqlite3_extended_result_codes(db, 1);
	if (sqlite3_db_readonly(db, "main") == 1) {
		mb_seterr(err, errlen, "%s: cannot open for reading and writing (SQLite opened it "
			 "read-only); moonbox will not start over it - give this user write permission "
			 "on the file and its directory or move it aside", path);
		goto fail;
	}
	sqlite3_busy_timeout(db, busy_timeout_ms < 0 ? 0 : busy_timeout_ms);

	/* Check before writing anything. quick_check reads every page, so it runs on databases up to
	 * MB_STORE_FULL_CHECK_BYTES; a bigger one (a large tool catalog) gets the header and schema
	 * read instead, so start-up time does not grow with the database (pages read later are
	 * still checked by SQLite as they are read). Either is the first statement, so it is also
	 * where "file is not a database" shows up. */
	struct stat fst;
	int full = stat(path, &fst) != 0 || fst.st_size <= MB_STORE_FULL_CHECK_BYTES;
	rc = pragma_text(db, full ? "PRAGMA quick_check" : "SELECT 'ok' FROM sqlite_master LIMIT 1",
			 text, sizeof text);
	if (rc == SQLITE_DONE || (!full && rc == SQLITE_OK && !text[0]))
		snprintf(text, sizeof text, "ok");
	if (rc != SQLITE_OK && rc != SQLITE_DONE) {
		open_error(err, errlen, path, db, rc);
		goto fail;
	}
	if (strcmp(text, "ok") != 0) {
		mb_seterr(err, errlen, "%s: database file is corrupt (quick_check: %s); moonbox will not "
			 "start over it - move it aside or restore a backup (the sqlite3 shell's .recover "
			 "command may salvage its data)", path, text);
		goto fail;
	}
	/* WAL is switched on by mb_store_migrate once the schema is known to be ours: a file
	 * refused there (newer schema, foreign tables) keeps its bytes and journal mode. */
	rc = sqlite3_exec(db, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		open_error(err, errlen, path, db, rc);
		goto fail;
	}

	s = calloc(1, sizeof *s);
	if (!s || !(s->path = strdup(path))) {
		mb_seterr(err, errlen, "%s: out of memory opening the store", path);
		goto fail;
	}
	s->db = db;
	sqlite3_set_authorizer(db, authorizer, s);
	*out = s;
	return 0;
fail:
	if (s)
		free(s->path);
	free(s);
	if (db) /* a refused file stays as it was: do not checkpoint a hot WAL into it */
		sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
	sqlite3_close(db);
	return -1;
}

/* After a successful migration: WAL journal mode (verified). */
static int switch_to_wal(mb_store *s, char *err, size_t errlen)
{
	char text[64];
	int rc = pragma_text(s->db, "PRAGMA journal_mode=WAL", text, sizeof text);
	if (rc != SQLITE_OK) {
		open_error(err, errlen, s->path, s->db, rc);
		return -1;
	}
	if (strcmp(text, "wal") != 0) {
		mb_seterr(err, errlen, "%s: cannot switch the database to WAL journal mode (it stays "
			 "in \"%s\" mode); moonbox needs WAL for crash safety - put the data directory "
			 "on a local file system", s->path, text);
		return -1;
	}
	return 0;
}

/* A refused database is closed without a checkpoint, so a hot WAL is not written into it. */
static int refuse(mb_store *s)
{
	sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
	return -1;
}

/* ---- statement cache ---------------------------------------------------------------------- */

static uint64_t fnv1a(const char *p, size_t n)
{
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static void stmt_done(mb_store *s, sqlite3_stmt *st)
{
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (s->active == st)
		s->active = NULL;
}

/* Called first by every entry point: finishes a statement a longjmp left behind, so it holds
 * no read snapshot (which would stop WAL checkpoints) and no binding to a freed string. */
static void reset_leftover(mb_store *s)
{
	if (s->active)
		stmt_done(s, s->active);
}

/* Returns 1 when only white space and semicolons remain. Comments count as content, so a
 * comment-only tail is compiled to check that it holds no statement. */
static int tail_is_empty(sqlite3 *db, const char *tail, size_t n)
{
	while (n && (*tail == ' ' || *tail == '\t' || *tail == '\n' || *tail == '\r' || *tail == ';'))
		tail++, n--;
	if (n == 0)
		return 1;
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, tail, (int)n, &st, NULL);
	if (rc == SQLITE_OK && st == NULL)
		return 1;
	sqlite3_finalize(st);
	return 0;
}

/* Finds or compiles the statement for sql. On failure returns NULL with a message in msg. */
static sqlite3_stmt *cache_get(mb_store *s, const char *sql, size_t len, char *msg, size_t msglen)
{
	uint64_t h = fnv1a(sql, len);
	for (int i = 0; i < s->ncache; i++) {
		cache_entry *e = &s->cache[i];
		if (e->hash == h && e->len == len && memcmp(e->sql, sql, len) == 0) {
			e->used = ++s->tick;
			s->hits++;
			stmt_done(s, e->stmt); /* in case a longjmp skipped the reset after its last use */
			s->active = e->stmt;
			return e->stmt;
		}
	}
	if (len > INT_MAX) {
		snprintf(msg, msglen, "SQL text is %zu bytes, too long", len);
		return NULL;
	}
	sqlite3_stmt *st = NULL;
	const char *tail = NULL;
	s->denied_tx = 0;
	int rc = sqlite3_prepare_v3(s->db, sql, (int)len, SQLITE_PREPARE_PERSISTENT, &st, &tail);
	if (rc != SQLITE_OK) {
		if (s->denied_tx)
			snprintf(msg, msglen, "%s", TX_DENIED);
		else
			snprintf(msg, msglen, "%s", sqlite3_errmsg(s->db));
		s->denied_tx = 0;
		return NULL;
	}
	if (!st) {
		snprintf(msg, msglen, "the SQL text holds no statement");
		return NULL;
	}
	if (!tail_is_empty(s->db, tail, len - (size_t)(tail - sql))) {
		sqlite3_finalize(st);
		snprintf(msg, msglen, "query, row and run take one statement; use exec for several");
		return NULL;
	}
	char *copy = malloc(len + 1);
	if (!copy) {
		sqlite3_finalize(st);
		snprintf(msg, msglen, "out of memory");
		return NULL;
	}
	memcpy(copy, sql, len);
	copy[len] = 0;
	cache_entry *e;
	if (s->ncache < MB_STORE_CACHE_SIZE) {
		e = &s->cache[s->ncache++];
	} else {
		e = &s->cache[0];
		for (int i = 1; i < s->ncache; i++)
			if (s->cache[i].used < e->used)
				e = &s->cache[i];
		if (s->active == e->stmt)
			s->active = NULL;
		sqlite3_finalize(e->stmt);
		free(e->sql);
	}
	e->sql = copy;
	e->len = len;
	e->hash = h;
	e->used = ++s->tick;
	e->stmt = st;
	s->prepares++;
	s->active = st;
	return st;
}

void mb_store_get_stats(const mb_store *s, mb_store_stats *out)
{
	out->prepares = s->prepares;
	out->hits = s->hits;
	out->cached = s->ncache;
}

/* ---- migrations --------------------------------------------------------------------------- */

static int read_user_version(mb_store *s, int *v)
{
	char text[32];
	int rc = pragma_text(s->db, "PRAGMA user_version", text, sizeof text);
	if (rc != SQLITE_OK)
		return rc;
	*v = atoi(text);
	return SQLITE_OK;
}

static void rollback_quietly(mb_store *s)
{
	if (!sqlite3_get_autocommit(s->db))
		internal_exec(s, "ROLLBACK");
}

int mb_store_migrate(mb_store *s, const char *const *steps, int n, char *err, size_t errlen)
{
	char msg[MB_ERR_MAX];
	int v;
	if (n < 0) {
		mb_seterr(err, errlen, "%s: invalid migration count %d", s->path, n);
		return -1;
	}
	if (s->tx_depth > 0) {
		mb_seterr(err, errlen, "%s: cannot migrate inside a transaction (mb.db.tx)", s->path);
		return -1;
	}
	reset_leftover(s);
	if (read_user_version(s, &v) != SQLITE_OK) {
		sqlite_msg(s->db, msg, sizeof msg);
		mb_seterr(err, errlen, "%s: cannot read the schema version (SQLite: %s)", s->path, msg);
		return -1;
	}
	if (v > n)
		goto newer;
	if (v == 0 && n > 0) {
		/* user_version 0 with tables in it: somebody else's database, not a new one */
		sqlite3_stmt *st = NULL;
		int tables = -1;
		if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL) == SQLITE_OK &&
		    sqlite3_step(st) == SQLITE_ROW)
			tables = sqlite3_column_int(st, 0);
		sqlite3_finalize(st);
		if (tables != 0) {
			mb_seterr(err, errlen, "%s: not a moonbox database (it has tables but no moonbox "
				 "schema version); moonbox will not add its tables to it - point --data-dir "
				 "elsewhere or move the file aside", s->path);
			return refuse(s);
		}
	}
	for (int i = v + 1; i <= n; i++) {
		if (internal_exec(s, "BEGIN IMMEDIATE") != SQLITE_OK) {
			sqlite_msg(s->db, msg, sizeof msg);
			mb_seterr(err, errlen, "%s: migration %d of %d: cannot start a transaction "
				 "(SQLite: %s)", s->path, i, n, msg);
			return -1;
		}
		/* Another process may have migrated between our read and our lock. */
		int cur;
		if (read_user_version(s, &cur) != SQLITE_OK) {
			sqlite_msg(s->db, msg, sizeof msg);
			rollback_quietly(s);
			mb_seterr(err, errlen, "%s: cannot read the schema version (SQLite: %s)", s->path,
				 msg);
			return -1;
		}
		if (cur >= i) {
			rollback_quietly(s);
			v = cur;
			if (v > n)
				goto newer;
			i = cur;
			continue;
		}
		if (!steps || !steps[i - 1]) {
			rollback_quietly(s);
			mb_seterr(err, errlen, "%s: migration %d of %d is missing (NULL)", s->path, i, n);
			return -1;
		}
		s->denied_tx = 0;
		int rc = sqlite3_exec(s->db, steps[i - 1], NULL, NULL, NULL);
		if (rc == SQLITE_OK) {
			char pragma[64];
			snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", i);
			rc = sqlite3_exec(s->db, pragma, NULL, NULL, NULL);
		}
		if (rc == SQLITE_OK)
			rc = internal_exec(s, "COMMIT");
		if (rc != SQLITE_OK) {
			if (s->denied_tx)
				snprintf(msg, sizeof msg, "transaction control (BEGIN, COMMIT, ROLLBACK, "
					 "SAVEPOINT, RELEASE) is not allowed in a migration");
			else
				sqlite_msg(s->db, msg, sizeof msg);
			s->denied_tx = 0;
			rollback_quietly(s);
			mb_seterr(err, errlen, "%s: migration %d of %d failed: %s; the database stays at "
				 "schema version %d", s->path, i, n, msg, i - 1);
			return refuse(s);
		}
	}
	return switch_to_wal(s, err, errlen);
newer:
	mb_seterr(err, errlen, "%s: schema version %d is newer than this moonbox knows (%d); upgrade "
		 "moonbox", s->path, v, n);
	return refuse(s);
}

/* ---- closing and accessors ---------------------------------------------------------------- */

void mb_store_close(mb_store *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->ncache; i++) {
		sqlite3_finalize(s->cache[i].stmt);
		free(s->cache[i].sql);
	}
	sqlite3_close(s->db);
	free(s->path);
	free(s);
}

sqlite3 *mb_store_db(mb_store *s)
{
	return s->db;
}

const char *mb_store_path(const mb_store *s)
{
	return s->path;
}

/* ---- Lua: mb.db ----------------------------------------------------------------------------- */

static mb_store *store_of(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

/* Raises "store: <msg> (<file>)". msg must not live in memory the raise frees. */
static int raise_msg(lua_State *L, mb_store *s, const char *msg)
{
	return luaL_error(L, "store: %s (%s)", msg, s->path);
}

/* Inside tx, SQLite may have rolled the whole transaction back by itself after an error (disk
 * full, I/O error) that fn caught. Statements run now would autocommit outside any transaction,
 * so every call inside tx is refused until the outermost tx has unwound. */
static void check_tx_alive(lua_State *L, mb_store *s)
{
	if (s->tx_depth > 0 && sqlite3_get_autocommit(s->db))
		raise_msg(L, s, "the enclosing transaction was already rolled back by SQLite after an "
			  "error inside it");
}

/* Takes the message of a failed step, resets the statement, then raises. */
static int raise_stmt(lua_State *L, mb_store *s, sqlite3_stmt *st)
{
	char msg[MB_ERR_MAX];
	snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(s->db));
	stmt_done(s, st);
	return raise_msg(L, s, msg);
}

/* The SQL argument: a string without NUL bytes. */
static const char *check_sql(lua_State *L, mb_store *s, size_t *len)
{
	const char *sql = luaL_checklstring(L, 1, len);
	reset_leftover(s);
	check_tx_alive(L, s);
	if (strlen(sql) != *len)
		raise_msg(L, s, "the SQL text contains a NUL byte");
	return sql;
}

/* Compiles (or finds) the statement in argument 1 and binds arguments 2.. to it. */
static sqlite3_stmt *prepare_bind(lua_State *L, mb_store *s)
{
	char msg[MB_ERR_MAX];
	size_t len;
	const char *sql = check_sql(L, s, &len);
	sqlite3_stmt *st = cache_get(s, sql, len, msg, sizeof msg);
	if (!st)
		raise_msg(L, s, msg);
	int nargs = lua_gettop(L) - 1;
	int np = sqlite3_bind_parameter_count(st);
	if (nargs != np) {
		stmt_done(s, st);
		snprintf(msg, sizeof msg, "the statement has %d parameter%s but %d value%s given", np,
			 np == 1 ? "" : "s", nargs, nargs == 1 ? " was" : "s were");
		raise_msg(L, s, msg);
	}
	for (int i = 1; i <= np; i++) {
		int idx = i + 1, rc;
		switch (lua_type(L, idx)) {
		case LUA_TNIL:
			rc = sqlite3_bind_null(st, i);
			break;
		case LUA_TBOOLEAN:
			rc = sqlite3_bind_int(st, i, lua_toboolean(L, idx));
			break;
		case LUA_TNUMBER:
			if (lua_isinteger(L, idx))
				rc = sqlite3_bind_int64(st, i, (sqlite3_int64)lua_tointeger(L, idx));
			else
				rc = sqlite3_bind_double(st, i, (double)lua_tonumber(L, idx));
			break;
		case LUA_TSTRING: {
			size_t n;
			const char *p = lua_tolstring(L, idx, &n);
			rc = sqlite3_bind_text64(st, i, p, (sqlite3_uint64)n, SQLITE_STATIC, SQLITE_UTF8);
			break;
		}
		case LUA_TLIGHTUSERDATA:
			if (lua_touserdata(L, idx) == NULL) { /* json.null / mb.null */
				rc = sqlite3_bind_null(st, i);
				break;
			}
			/* fall through */
		default:
			stmt_done(s, st);
			luaL_error(L, "store: parameter %d is a %s; expected nil, boolean, number or "
				   "string", i, luaL_typename(L, idx));
			return NULL;
		}
		if (rc != SQLITE_OK) {
			snprintf(msg, sizeof msg, "parameter %d: %s", i, sqlite3_errmsg(s->db));
			stmt_done(s, st);
			raise_msg(L, s, msg);
		}
	}
	return st;
}

static void push_row(lua_State *L, sqlite3_stmt *st)
{
	int n = sqlite3_column_count(st);
	lua_createtable(L, 0, n);
	for (int i = 0; i < n; i++) {
		const char *name = sqlite3_column_name(st, i);
		if (!name)
			continue;
		switch (sqlite3_column_type(st, i)) {
		case SQLITE_INTEGER:
			lua_pushinteger(L, (lua_Integer)sqlite3_column_int64(st, i));
			break;
		case SQLITE_FLOAT:
			lua_pushnumber(L, (lua_Number)sqlite3_column_double(st, i));
			break;
		case SQLITE_TEXT: {
			const unsigned char *t = sqlite3_column_text(st, i);
			lua_pushlstring(L, (const char *)t, t ? (size_t)sqlite3_column_bytes(st, i) : 0);
			break;
		}
		case SQLITE_BLOB: {
			const void *b = sqlite3_column_blob(st, i);
			lua_pushlstring(L, b, b ? (size_t)sqlite3_column_bytes(st, i) : 0);
			break;
		}
		default: /* NULL: absent */
			continue;
		}
		lua_setfield(L, -2, name);
	}
}

/* exec(sql): one or more statements, no parameters. */
static int l_exec(lua_State *L)
{
	mb_store *s = store_of(L);
	size_t len;
	const char *sql = check_sql(L, s, &len);
	char *emsg = NULL;
	s->denied_tx = 0;
	int rc = sqlite3_exec(s->db, sql, NULL, NULL, &emsg);
	if (rc != SQLITE_OK) {
		char msg[MB_ERR_MAX];
		snprintf(msg, sizeof msg, "%s", s->denied_tx ? TX_DENIED :
			 emsg ? emsg : sqlite3_errmsg(s->db));
		sqlite3_free(emsg);
		s->denied_tx = 0;
		return raise_msg(L, s, msg);
	}
	return 0;
}

/* query(sql, ...) -> array of rows */
static int l_query(lua_State *L)
{
	mb_store *s = store_of(L);
	sqlite3_stmt *st = prepare_bind(L, s);
	lua_newtable(L);
	lua_Integer n = 0;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		push_row(L, st);
		lua_rawseti(L, -2, ++n);
	}
	if (rc != SQLITE_DONE)
		return raise_stmt(L, s, st);
	stmt_done(s, st);
	mb_json_mark_array(L, -1);
	return 1;
}

/* row(sql, ...) -> first row or nil */
static int l_row(lua_State *L)
{
	mb_store *s = store_of(L);
	sqlite3_stmt *st = prepare_bind(L, s);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		push_row(L, st);
	else if (rc == SQLITE_DONE)
		lua_pushnil(L);
	else
		return raise_stmt(L, s, st);
	stmt_done(s, st);
	return 1;
}

/* run(sql, ...) -> changes, last_insert_rowid */
static int l_run(lua_State *L)
{
	mb_store *s = store_of(L);
	sqlite3_stmt *st = prepare_bind(L, s);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		; /* e.g. RETURNING rows: run to completion */
	if (rc != SQLITE_DONE)
		return raise_stmt(L, s, st);
	stmt_done(s, st);
	lua_pushinteger(L, (lua_Integer)sqlite3_changes64(s->db));
	lua_pushinteger(L, (lua_Integer)sqlite3_last_insert_rowid(s->db));
	return 2;
}

/* Undoes the innermost level after fn failed; SQLite may already have rolled everything back
 * itself (then there is nothing left to undo). */
static void tx_undo(mb_store *s, int outer)
{
	if (sqlite3_get_autocommit(s->db))
		return;
	internal_exec(s, outer ? "ROLLBACK" : "ROLLBACK TO mb_tx; RELEASE mb_tx");
}

/* tx(fn, ...) -> fn's results */
static int l_tx(lua_State *L)
{
	mb_store *s = store_of(L);
	char msg[MB_ERR_MAX];
	luaL_checktype(L, 1, LUA_TFUNCTION);
	int outer = s->tx_depth == 0;
	reset_leftover(s);
	check_tx_alive(L, s);
	if (internal_exec(s, outer ? "BEGIN IMMEDIATE" : "SAVEPOINT mb_tx") != SQLITE_OK) {
		snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(s->db));
		return raise_msg(L, s, msg);
	}
	s->tx_depth++;
	int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
	s->tx_depth--;
	if (status != LUA_OK) {
		tx_undo(s, outer);
		return lua_error(L);
	}
	if (sqlite3_get_autocommit(s->db))
		return raise_msg(L, s, "the transaction was rolled back by SQLite after an error inside "
				 "it that was caught; nothing was committed");
	if (internal_exec(s, outer ? "COMMIT" : "RELEASE mb_tx") != SQLITE_OK) {
		snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(s->db));
		tx_undo(s, outer);
		return raise_msg(L, s, msg);
	}
	return lua_gettop(L);
}

/* migrate(list) -> true */
const char **mb_store_migration_steps(lua_State *L, const char *label, int *n_out)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
	if (n > 100000)
		luaL_error(L, "store: migrate: more than 100000 migrations (%s)", label);
	const char **steps = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *steps, 0);
	for (lua_Integer i = 1; i <= n; i++) {
		/* The strings stay referenced by the table (argument 1) for the whole call. */
		if (lua_rawgeti(L, 1, i) != LUA_TSTRING)
			luaL_error(L, "store: migration %d is a %s; expected a string of SQL (%s)", (int)i,
				   luaL_typename(L, -1), label);
		size_t len;
		steps[i - 1] = lua_tolstring(L, -1, &len);
		if (strlen(steps[i - 1]) != len)
			luaL_error(L, "store: migration %d contains a NUL byte (%s)", (int)i, label);
		lua_pop(L, 1);
	}
	*n_out = (int)n;
	return steps;
}

static int l_migrate(lua_State *L)
{
	mb_store *s = store_of(L);
	int n;
	const char **steps = mb_store_migration_steps(L, s->path, &n);
	char err[MB_ERR_MAX];
	if (mb_store_migrate(s, steps, n, err, sizeof err) != 0)
		return luaL_error(L, "store: %s", err);
	lua_pushboolean(L, 1);
	return 1;
}

void mb_store_push_lua(lua_State *L, mb_store *s)
{
	static const luaL_Reg fns[] = {
		{ "exec", l_exec }, { "query", l_query }, { "row", l_row }, { "run", l_run },
		{ "tx", l_tx }, { "migrate", l_migrate }, { NULL, NULL },
	};
	lua_createtable(L, 0, 7);
	lua_pushlightuserdata(L, s);
	luaL_setfuncs(L, fns, 1);
	lua_pushstring(L, s->path);
	lua_setfield(L, -2, "path");
	lua_pushliteral(L, "sqlite");
	lua_setfield(L, -2, "dialect");
}
