/* store.h - the SQLite store: one database file, its schema migrations, cached prepared
 * statements, and the `mb.db` table the host Lua state sees.
 *
 * Durability: the database runs in WAL mode with synchronous=FULL, so a COMMIT returns only after
 * its WAL frames have been fsync'd. A write that was acknowledged (its statement or tx returned)
 * therefore survives kill -9 of the process and a power cut; an unacknowledged one is either
 * wholly present or wholly absent. The file is created with mode 0600 (the WAL and shared-memory
 * files inherit that mode from SQLite) and its directory is fsync'd after creation.
 *
 * Refusal, never replacement: mb_store_open runs `PRAGMA quick_check` on an existing file and
 * refuses - with a message that names the file and says what to do - a file that is not a
 * database, is corrupt, cannot be opened read-write, or is a directory. It never creates a new
 * database over an existing file and never writes to one it refuses.
 *
 * Ownership and threads: an mb_store belongs to the thread that opened it (the loop thread); the
 * connection is opened with SQLITE_OPEN_NOMUTEX and must not be shared. The caller owns the
 * store and closes it with mb_store_close after every Lua state it was pushed into has been
 * closed (the `mb.db` functions hold a plain pointer to it).
 *
 * Transactions: only mb.db.tx starts and ends transactions. SQL given to exec/query/row/run and
 * migration steps may not contain BEGIN, COMMIT, ROLLBACK, SAVEPOINT or RELEASE (an authorizer
 * refuses them), so tx nesting cannot be broken from SQL.
 */
#ifndef MB_STORE_H
#define MB_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <sqlite3.h>

typedef struct mb_store mb_store;

/* Counters of the statement cache (for tests and stats). */
typedef struct mb_store_stats {
	uint64_t prepares;  /* statements compiled for the cache (misses) */
	uint64_t hits;      /* cache lookups answered without compiling */
	int cached;         /* statements held now (at most MB_STORE_CACHE_SIZE) */
} mb_store_stats;

/* Prepared statements kept per store, keyed by SQL text; the least recently used is finalized
 * when a new one is needed. */
#define MB_STORE_CACHE_SIZE 64

/// Opens (or creates, mode 0600) the database file at path and checks it with `PRAGMA
/// quick_check`; then synchronous=FULL, foreign_keys=ON and the busy timeout. WAL journal mode
/// is switched on (and verified) by a successful mb_store_migrate, so a file refused there keeps
/// its bytes; a refused file is closed without a checkpoint (a hot WAL stays beside it).
/// Extended result codes are on.
/// @param out             receives the store on success (untouched on failure)
/// @param path            the database file (copied)
/// @param busy_timeout_ms how long a statement waits for another process's lock (>= 0)
/// @param err             receives the reason on failure, naming the file and what to do, e.g.
///                        "/x/moonbox.db: file is not a database (SQLite: file is not a
///                        database); moonbox will not start over it - move it aside or restore
///                        a backup"
/// @param errlen          size of err
/// @returns 0, or -1 with err set (nothing was created over an existing file)
int mb_store_open(mb_store **out, const char *path, int busy_timeout_ms, char *err, size_t errlen);

/// Brings the schema to version n (then switches to WAL): refuses a database with tables but
/// user_version 0 (somebody else's) and one newer than n. Reads PRAGMA user_version and applies
/// each missing step i
/// (1-based, steps[i-1]) in its own BEGIN IMMEDIATE transaction together with
/// `PRAGMA user_version = i`. A failed step is rolled back and stops the migration; earlier steps
/// stay committed. Must not be called inside a transaction (mb.db.tx).
/// @param s      the store
/// @param steps  n SQL texts, each one or more statements (no transaction control)
/// @param n      number of steps (>= 0)
/// @param err    receives the reason on failure, e.g. "<file>: schema version 5 is newer than
///               this moonbox knows (3); upgrade moonbox" or "<file>: migration 2 of 3 failed:
///               near \"CREAT\": syntax error; the database stays at schema version 1"
/// @param errlen size of err
/// @returns 0, or -1 with err set
int mb_store_migrate(mb_store *s, const char *const *steps, int n, char *err, size_t errlen);

/// Finalizes the cached statements and closes the connection (which checkpoints the WAL).
/// @param s the store, or NULL
void mb_store_close(mb_store *s);

/// The connection, for code that needs SQLite directly (same thread rules).
/// @param s the store
/// @returns the sqlite3 handle
sqlite3 *mb_store_db(mb_store *s);

/// The database file's path as given to mb_store_open.
/// @param s the store
/// @returns a string owned by the store
const char *mb_store_path(const mb_store *s);

/// Reads the statement-cache counters.
/// @param s   the store
/// @param out filled in
void mb_store_get_stats(const mb_store *s, mb_store_stats *out);

/// Pushes the `mb.db` table onto L: exec(sql), query(sql, ...), row(sql, ...), run(sql, ...),
/// tx(fn, ...), migrate(list), and the string field path. Parameters bind in order: nil or
/// json.null (lightuserdata NULL) -> NULL, boolean -> 0/1, integer -> int64, float -> double,
/// string -> TEXT with its exact length (binary-safe); anything else raises "store: parameter 2
/// is a table; expected nil, boolean, number or string". The number of arguments must equal the
/// statement's parameter count. Column values: INTEGER -> integer, REAL -> float, TEXT/BLOB ->
/// string, NULL -> absent. query returns an array marked as a JSON array (mb_json_mark_array);
/// row returns the first row or nil; run returns changes, last_insert_rowid; query/row/run take
/// exactly one statement and cache it by its SQL text. SQLite errors raise
/// "store: <sqlite message> (<file>)".
/// tx(fn, ...) runs fn(...) inside BEGIN IMMEDIATE .. COMMIT (a SAVEPOINT when nested) and
/// returns its results; when fn raises, the transaction (or savepoint) is rolled back and the
/// error value re-raised unchanged. fn runs through lua_pcall, so it must not yield: a yield
/// inside raises "attempt to yield across a C-call boundary" (and rolls back). That is on
/// purpose: other requests must never run inside a transaction.
/// Only for the state's own thread; s must outlive every call.
/// @param L the (host) state
/// @param s the store
void mb_store_push_lua(lua_State *L, mb_store *s);

/// mb.db.migrate's argument for either store (store_pg.c too): the table of SQL strings at index
/// 1 as an array of n pointers into them (a userdata pushed on L; valid while the table is on
/// the stack). Raises a Lua error naming label when an entry is not a string or holds a NUL
/// byte (the engines read SQL up to the first NUL), or there are more than 100000.
const char **mb_store_migration_steps(lua_State *L, const char *label, int *n);

#endif
