/* json.h - the one JSON codec of moonbox (a direct encoder; jansson parses).
 *
 * Used by the trusted host Lua state for every JSON-RPC message and, as the global `json`, by
 * sandbox code. Lua integers map to JSON integers exactly (int64), Lua floats to JSON reals;
 * JSON null is the lightuserdata(NULL) sentinel `json.null`; decoded arrays carry a shared,
 * protected metatable (`__metatable = "json.array"`) so that an empty decoded array re-encodes as
 * `[]`. Encoding never invokes metamethods. Depth, output size and input size are bounded, and
 * strings must be valid UTF-8. The host can splice ready-made JSON text into an encoded value
 * with a raw value (mb_json_push_raw, mb_json_raw_lua); sandbox code has no way to make one.
 *
 * Budgets: when the lua_State has a budget (mb_budget_of(L), sandbox states) that budget is used,
 * otherwise mb_budget_current(). The encoder's output buffer and every allocation jansson makes
 * are charged to it, and the loops poll it, so a hostile value stops with the budget's memory or
 * timeout error. Nothing charged outlives a call. Host states (no budget anywhere) are
 * unaccounted and have no deadline.
 *
 * Thread rules: mb_json_global_init() once before threads start; after that every function may
 * be called from any thread on a lua_State that thread owns.
 */
#ifndef MB_JSON_H
#define MB_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/* Limits of one codec. Zero fields take defaults: max_depth 0 = 128 (values above 1000 are
 * clamped to 1000 to bound C recursion); max_output_bytes / max_input_bytes 0 = unlimited. */
typedef struct {
	int max_depth;            /* nesting of arrays/objects, in and out */
	size_t max_output_bytes;  /* encoded size */
	size_t max_input_bytes;   /* size of a string given to decode */
	const char *root_name;    /* name of the value in error paths ("result"); static string;
	                           * NULL = "value" */
	const char *input_limit_name;  /* name given for max_input_bytes in messages, e.g.
	                                * "max_message_bytes"; static string; NULL = "max_input_bytes" */
	const char *output_limit_name; /* same for max_output_bytes, e.g. "max_result_bytes";
	                                * NULL = "max_output_bytes" */
	uint64_t max_nodes;            /* encode: values written (a table written twice counts
	                                * twice; keys are not values); 0 = unlimited */
	const char *node_limit_name;   /* named for max_nodes in messages, e.g. "max_result_nodes";
	                                * static string; NULL = "max_nodes" */
	int unique_keys;               /* decode: a key repeated in one object is an error
	                                * ("duplicate object key near '"k"'"), not last-wins */
	const char *const *raw_path;   /* decode: keys from the root (NULL-terminated, at most
	                                * MB_JSON_RAW_PATH_MAX) of an object
	                                * to hand on as its text, a raw value (mb_json_push_raw),
	                                * instead of a table (read and checked like the rest, its
	                                * table dropped). Only the fast path does it (json_dec.h),
	                                * which declines valid JSON only when out of memory; then
	                                * the value is a table. NULL: none */
} mb_json_limits;

enum {
	/* Encoding flag: NaN/inf and values JSON cannot hold (functions, threads, userdata other
	 * than raw values) become null, object keys of other types than string/number are skipped,
	 * and invalid UTF-8 bytes become U+FFFD. Without it each of those is an error naming the
	 * path. */
	MB_JSON_LENIENT = 1,
};

#define MB_JSON_DEFAULT_DEPTH 128
#define MB_JSON_RAW_PATH_MAX 8
#define MB_JSON_MAX_DEPTH 1000

/// Sets jansson's allocator to the budget-aware one (mb_budget_malloc/mb_budget_free) and seeds
/// its hash function. Call once at start, before any thread.
void mb_json_global_init(void);

/// Pushes a new table {encode=, decode=, null=, array=} whose functions use these limits
/// (copied; root_name and the limit names must be static strings). It has no raw(): see
/// mb_json_raw_lua. encode(v) is strict and returns the JSON text;
/// decode(s) returns the value; null is json.null; array(t) marks t as a JSON array and returns
/// it (an error if t already has another metatable). Errors are raised as Lua errors; a tripped
/// budget raises its sticky limit error.
/// @param L   the state to push on (host or sandbox)
/// @param lim limits, or NULL for the defaults
/// @returns 1 (the number of values pushed)
int mb_json_open(lua_State *L, const mb_json_limits *lim);

/// A table may be filled on first use (the sandbox's lazy globals, sandbox_env.c): while one is,
/// the registry holds under this key (lua_rawgetp) a C function that, called with a table,
/// fills it if it is such a table (else does nothing; it may raise only a memory error). The
/// encoder and mb_json_mark_array call it on a table that has a metatable before they look at it.
extern const char mb_json_expand_key;
/// Calls that function, if the registry holds one, on the table at idx (may raise a memory
/// error). For other walkers of sandbox values (the PII policy).
void mb_json_expand(lua_State *L, int idx);

/// Pushes json.null (lightuserdata NULL).
/// @param L the state
void mb_json_push_null(lua_State *L);

/// Puts the shared array metatable on a table (creating it on first use, which may raise a Lua
/// memory error like any allocation).
/// @param L   the state
/// @param idx stack index of a table
/// @returns 0, or -1 when the table already has a different metatable (nothing changed)
int mb_json_mark_array(lua_State *L, int idx);

/// Encodes the value at idx into a malloc'd NUL-terminated string (free it with free()). The
/// output is compact and never contains a raw newline. The buffer is charged to the budget (see
/// the top of this file) while it is built; the returned buffer is not. Raw values are written
/// verbatim. Does not raise Lua errors and never invokes metamethods; the Lua stack is left as
/// it was.
/// @param L      the state holding the value
/// @param idx    stack index of the value
/// @param lim    limits, or NULL for the defaults
/// @param flags  0 (strict) or MB_JSON_LENIENT
/// @param len    set to the length of the text (without the NUL)
/// @param err    receives the error message on failure, e.g. "cannot encode function at
///               result.items[3]", "JSON output exceeds max_output_bytes=N" (with
///               lim->output_limit_name), "more than N JSON values
///               (max_nodes=N) at value[7]" (with lim->node_limit_name) or the budget's limit
///               message
/// @param errlen size of err
/// @returns the text, or NULL on failure
char *mb_json_encode(lua_State *L, int idx, const mb_json_limits *lim, int flags, size_t *len,
		     char *err, size_t errlen);

/// mb_json_encode that also sets *nodes to the number of values written (when it succeeds).
char *mb_json_encode_n(lua_State *L, int idx, const mb_json_limits *lim, int flags, size_t *len,
		       uint64_t *nodes, char *err, size_t errlen);

/// One member of an object built from C by mb_json_object.
typedef struct {
	const char *key; /* NUL-terminated */
	enum { MB_JF_NULL, MB_JF_STRING, MB_JF_RAW, MB_JF_INT, MB_JF_REAL, MB_JF_BOOL } type;
	const char *s;   /* STRING: bytes (invalid UTF-8 becomes U+FFFD); RAW: one valid JSON value */
	size_t n;        /* length of s */
	long long i;     /* INT, BOOL (0 false) */
	double d;        /* REAL (NaN and infinities become null) */
} mb_json_field;

/// Writes {"key":value,...} from C, with the encoder's own string escaping and number formats,
/// no Lua state and no budget (for the host's fixed shapes, e.g. an execution's result).
/// @returns a malloc'd NUL-terminated text (its length in *len), or NULL when out of memory
char *mb_json_object(const mb_json_field *f, size_t nf, size_t *len);

/// The JSON string literal of the n bytes at s (quotes included; invalid UTF-8 becomes U+FFFD).
/// @returns a malloc'd NUL-terminated text (its length in *len), or NULL when out of memory
char *mb_json_quote(const char *s, size_t n, size_t *len);

/// Decodes buf (any JSON value, at most lim->max_input_bytes) and pushes the Lua value. Objects
/// become tables with string keys, arrays tables marked as arrays, null json.null. Integers
/// outside int64 become floats; "\u0000" in strings is kept. Does not raise.
/// @param L      the state to push on
/// @param buf    the JSON text (need not be NUL-terminated)
/// @param len    its length
/// @param lim    limits, or NULL for the defaults
/// @param err    receives the error message on failure (jansson's message with line, column and
///               position, a limit message such as "JSON input is N bytes, exceeds
///               max_input_bytes=M" with lim->input_limit_name, or the budget's limit message).
///               Valid JSON that cannot be decoded says so in a fixed form: "object keys
///               containing \u0000 are not supported ..." (jansson cannot hold them) and, with
///               lim->unique_keys, "duplicate object key near '"<key>"' ..."
/// @param errlen size of err
/// @returns 0 with one value pushed, or -1 with err set and nothing pushed
int mb_json_decode(lua_State *L, const char *buf, size_t len, const mb_json_limits *lim,
		   char *err, size_t errlen);

/// Pushes a raw JSON value: a full userdata holding a copy of json, with a shared protected
/// metatable (`getmetatable(v) == "json.raw"`). The encoder writes its bytes verbatim wherever it
/// appears (top level, array item, object value), except that CR and LF become spaces so the
/// output never has a raw newline; an empty one is written as null. The caller guarantees json
/// is one valid JSON value - nothing checks it - so never give this to sandbox code. Raises a
/// Lua memory error like any allocation.
/// @param L    the state (normally the host's)
/// @param json the JSON text (need not be NUL-terminated)
/// @param len  its length
void mb_json_push_raw(lua_State *L, const char *json, size_t len);

/// lua_CFunction for the host only: raw(s) takes a non-empty string of valid JSON text and
/// returns a raw value for it (see mb_json_push_raw). Register it in the host's `mb` table;
/// mb_json_open does not add it to the `json` table, so sandbox code cannot inject text.
/// @param L the state; argument 1 is the JSON text
/// @returns 1 (the raw value); raises "bad argument #1" when it is not a non-empty string
int mb_json_raw_lua(lua_State *L);

#endif
