/* store_pg.h - the store on PostgreSQL (store_url = postgres://...): the same `mb.db` table the
 * host Lua state gets from store.c on SQLite, driven from the libuv loop without blocking it.
 *
 * A request coroutine of the host that calls mb.db.query/row/run/exec yields while its statement
 * runs on one of `store_pg_connections` connections (libpq's non-blocking API, each socket
 * watched by a uv_poll_t) and is resumed with the rows; statements of concurrent requests run in
 * parallel on the other connections, and wait their turn in FIFO order when all are busy. A
 * transaction (mb.db.tx, written in lua/mcp/store_pg.lua on top of the primitives here) pins one
 * connection to its coroutine from BEGIN to COMMIT. Code that cannot yield (the main chunk at
 * start, timer callbacks, coroutines made by Lua code) runs its statement on a separate blocking
 * connection instead: counted in the stats, bounded by store_timeout_ms.
 *
 * A connection that breaks (PostgreSQL restarted) fails the statement on it with a clear error,
 * is reopened on libuv's thread pool with a growing pause (100 ms to 2 s), and the statements
 * waiting for a connection meanwhile fail at once when every connection is down, instead of
 * waiting without end. Nothing is retried behind the caller's back: a statement whose outcome is
 * unknown raises, and the request answers with an error.
 *
 * Placeholders are `?` and `?NNN` as on SQLite; they become $n here (outside quoted text,
 * identifiers and comments). Transaction control in SQL is refused (only tx begins and ends
 * transactions), as on SQLite.
 *
 * Ownership and threads: an mb_pg belongs to the loop thread; the caller closes it after the
 * host state it was pushed into.
 */
#ifndef MB_STORE_PG_H
#define MB_STORE_PG_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <uv.h>

typedef struct mb_pg mb_pg;

/* How the store resumes a host coroutine it made wait, and whether a thread is one of the
 * host's request coroutines (only those are made to yield: a coroutine made by Lua code would
 * return to its own resumer). Given by host.c. */
typedef struct mb_pg_host {
	void (*resume)(void *ud, lua_State *co, int nargs);  /* resumes co with nargs values */
	int (*owns)(void *ud, lua_State *co);
	lua_State *(*spawn)(void *ud);  /* a new request coroutine, pushed on the main state */
	void *ud;
} mb_pg_host;

typedef struct mb_pg_stats {
	uint64_t statements;    /* run on the non-blocking connections */
	uint64_t blocking;      /* run on the blocking connection (callers that cannot yield) */
	uint64_t waited;        /* had to wait for a free connection */
	uint64_t failed;        /* raised an error */
	uint64_t reconnects;    /* connections reopened after a break */
	int connections;        /* open now */
	int down;               /* broken, being reopened */
} mb_pg_stats;

/// Connects (blocking: this is start-up) the blocking connection and n non-blocking ones, each
/// with statement_timeout = timeout_ms and connect_timeout from it.
/// @param out        receives the store
/// @param loop       the loop the connections are watched on
/// @param conninfo   a libpq URI or key=value string (copied; its password never appears in
///                   messages)
/// @param n          non-blocking connections (>= 1)
/// @param timeout_ms statement and connect timeout
/// @param err        receives e.g. "PostgreSQL (host=/tmp/x db=moonbox): connection refused ..."
/// @returns 0, or -1 with err set (nothing left open)
int mb_pg_open(mb_pg **out, uv_loop_t *loop, const char *conninfo, int n, int64_t timeout_ms,
	       char *err, size_t errlen);

/// Where the host's hooks are (before mb_pg_push_lua's functions are first called).
void mb_pg_set_host(mb_pg *s, const mb_pg_host *host);

/// Brings the schema to version n under an advisory lock (replicas starting together apply each
/// migration once), each step in its own transaction with the version in table moonbox_schema.
/// Refuses a database newer than n, and one that has tables but no moonbox_schema.
/// @returns 0, or -1 with err set
int mb_pg_migrate(mb_pg *s, const char *const *steps, int n, char *err, size_t errlen);

/// Pushes the `mb.db` table: exec, query, row, run, migrate, the primitives lua/mcp/store_pg.lua
/// builds tx on (_begin, _commit, _rollback, _depth), listen(channel, fn) (fn(channel, payload)
/// runs in a new host coroutine for each notification; fn(channel, nil) after a reconnect, when
/// notifications may have been missed), stats(), and the fields dialect = "postgres" and path
/// (the conninfo without its password).
void mb_pg_push_lua(lua_State *L, mb_pg *s);

void mb_pg_get_stats(const mb_pg *s, mb_pg_stats *out);

/// The SQL text PostgreSQL is sent for sql: `?` and `?NNN` become $n outside quoted text
/// (including E'' strings with backslash escapes), quoted identifiers, dollar-quoted text and
/// (nested) comments; transaction control at the start of any statement is refused. Used by the
/// store; exposed for tests/fuzz/fuzz_pg_sql.c.
/// @param nparams receives the parameter count (the largest index)
/// @returns a malloc'd NUL-terminated string, or NULL with msg set
char *mb_pg_translate(const char *sql, size_t len, int *nparams, char *msg, size_t msglen);

/// Statements running, queued or answered but not yet handed back, and transactions pausing
/// before their next attempt (a coroutine waits for each): the server does not stop while
/// there are any.
size_t mb_pg_pending(const mb_pg *s);

/// Closes every connection (statements still waiting are dropped without resuming their
/// coroutines: the host state is being closed). Call after the host is freed, then run the loop
/// once so the poll handles close.
void mb_pg_close(mb_pg *s);

#endif
