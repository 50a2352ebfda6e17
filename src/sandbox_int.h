/* sandbox_int.h - what the files of the sandbox (sandbox*.c) share about a running execution.
 * Not for other modules: they see only sandbox.h (tests/arch checks it). The files depend one
 * way: sandbox_core.c at the bottom, the environment's files above it, sandbox.c on top. */
#ifndef MB_SANDBOX_INT_H
#define MB_SANDBOX_INT_H

#include <signal.h>

#include "json.h"
#include "regex.h"
#include "sandbox.h"

typedef struct mb_sandbox_ctx {
	const mb_exec_request *req; /* NULL while the state is only prepared */
	const mb_config *cfg;
	mb_budget *b;
	mb_json_limits json_lim;
	/* output capture */
	char *head, *tail;
	size_t head_len, head_cap;
	size_t tail_len, tail_cap, tail_pos;
	size_t dropped;
	/* notifications */
	uint64_t notifications;
	double last_progress;
	int has_progress;
	char *traceback;
	/* this thread's CPU time when the code started (os.clock counts from here) */
	uint64_t cpu_start_ns;
	/* values replaced by tokens in this execution (sandbox_pii.c) */
	void *pii_found;
	/* tokens that reached it from outside: code, context_vars, replies, files (sandbox_seen.c) */
	struct mb_sandbox_seen *pii_seen;
	/* what the code took in, counted where it arrives (the result's io; NULL while prepared) */
	mb_exec_io *io;
	/* notes for the agent (mb_sandbox_note), '\n' between them */
	char note[MB_EXEC_NOTE_MAX];
	size_t note_len;
} mb_sandbox_ctx;

/// Pushes a new table whose keys are weak (its metatable's __mode is "k").
static inline void mb_sandbox_weak_keys(lua_State *L)
{
	lua_newtable(L);
	lua_createtable(L, 0, 1);
	lua_pushliteral(L, "k");
	lua_setfield(L, -2, "__mode");
	lua_setmetatable(L, -2);
}

/// Pushes the table kept in the registry under key, made on first use as a new weak-keyed table.
/// Needs 3 free stack slots.
static inline void mb_sandbox_registry_weak(lua_State *L, const void *key)
{
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE)
		return;
	lua_pop(L, 1);
	mb_sandbox_weak_keys(L);
	lua_pushvalue(L, -1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/// sandbox_core.c: installs the deadline signal's handler (mb_sandbox_global_init calls it).
int mb_sandbox_core_init(void);

/// Makes c the context of L's execution (kept in the registry), and reads it back from any
/// thread of that execution.
void mb_sandbox_ctx_bind(lua_State *L, mb_sandbox_ctx *c);
mb_sandbox_ctx *mb_sandbox_ctx_of(lua_State *L);

/// Adds a note for the agent to the execution's answer (mb_exec_result.note): a sentence about
/// how its code was taken, with no data of the execution in it. Kept once; dropped when the
/// notes are full. Never raises.
void mb_sandbox_note(lua_State *L, const char *msg);
void mb_sandbox_ctx_note(mb_sandbox_ctx *c, const char *msg);

/// Appends to the captured output, keeping head and tail within the cap; the whole captured
/// text, with a marker where bytes were dropped (malloc'd, NUL-terminated; NULL out of memory).
void mb_sandbox_output(mb_sandbox_ctx *c, const char *s, size_t n);
char *mb_sandbox_output_join(mb_sandbox_ctx *c, size_t *len);

/// Loads a text chunk (mode "t") as luaL_loadbufferx would, but feeds the parser in small pieces
/// and polls the budget between them, so a slow parse stops at the deadline. Returns the
/// lua_load status; on error the message (or the sticky limit error) is on the stack.
int mb_sandbox_load_text(lua_State *L, const char *s, size_t len, const char *name);

/// Installs the budget hook on L (the main state or a new coroutine).
void mb_sandbox_sethook(lua_State *L);

/// From now on every thread of L's execution also gets call events in its hook (the __concat
/// guard, sandbox.c; a no-op when built against a Lua other than 5.4.4): called when sandbox code
/// first sets a metatable. Threads made later inherit the hook; call mb_sandbox_sync_hook on a
/// thread before it runs (coroutine resume and close) and on the resumer when it continues.
void mb_sandbox_hook_calls(lua_State *L);
void mb_sandbox_sync_hook(lua_State *L);

/// Records which Lua thread is running on this OS thread (for the deadline signal).
void mb_sandbox_set_running(lua_State *L);
lua_State *mb_sandbox_running(void);

/// Calls the host (sandbox_skills.c): the table at the top of the stack is the argument (popped);
/// pushes the decoded reply. Raises the host's error message or the sticky budget error.
void mb_sandbox_host_call(lua_State *L, const char *name);

/// The same with arguments already encoded (any bytes; the host handler for name must expect
/// them raw, see tools.host_calls_raw). Takes ownership of args (malloc'd; freed even on error).
void mb_sandbox_host_call_raw(lua_State *L, const char *name, char *args, size_t len);

/// The error message at idx, when it comes from using skills.<name> of a skill that does not
/// exist in this execution ("attempt to call a nil value (field 'boom')"), is replaced by the same
/// message with the host's reason as a hint (sandbox_skills.c; for the message handler). Anything
/// else is left alone.
void mb_sandbox_skills_explain(lua_State *L, int idx);

/// f([text]) as a host call: the one optional argument, a string, is sent as {key = text}; pushes
/// the reply and returns 1 (for lua_CFunctions such as list_skills and mcp.tools).
int mb_sandbox_host_call_opt(lua_State *L, const char *name, const char *key);

/// PII in the sandbox (sandbox_pii.c): the process-wide detector and key (set once, before any
/// worker starts), the globals pii.scan / tokenize_pii / detokenize_pii, the policy over the
/// returned values (under lua_pcall with msgh; returns its status) and over the output and error
/// texts, and freeing.
int mb_sandbox_pii_open(lua_State *L);
int mb_sandbox_pii_values(lua_State *L, int base, int msgh);
/* the policy over the value at the top of the stack (error objects, log payloads, print
 * lines): replaced in place; withheld when it cannot be scanned; never raises */
void mb_sandbox_pii_top(lua_State *L);
void mb_sandbox_pii_finish(mb_sandbox_ctx *c, mb_exec_result *res);
void mb_sandbox_pii_free(mb_sandbox_ctx *c);
void mb_sandbox_pii_thread_exit(void);
/// The tokens this execution minted (tokenize_pii, the policy), in the JSON text of an upstream
/// call's arguments, replaced by their values as JSON string content; only with pii_policy and
/// pii_restore on (the host restores the tenant's vault's tokens with the same rule).
/// @param limit  the longest text allowed (max_message_bytes)
/// @returns 0 with *out a malloc'd text (its length in *outlen) or NULL when nothing was
///          replaced; 1 when the text would be longer than limit; -1 when out of memory
int mb_sandbox_pii_restore_json(mb_sandbox_ctx *c, const char *json, size_t len, size_t limit,
				char **out, size_t *outlen);

/// A set of PII token texts (sandbox_seen.c, below the environment's files): adds the tokens
/// found in text (made on first use; *set NULL is empty); whether token is in it (if_full: the
/// answer once the set stopped growing at its bound or for want of memory); frees it.
struct mb_sandbox_seen;
void mb_sandbox_seen_add(struct mb_sandbox_seen **set, const char *text, size_t len);
int mb_sandbox_seen_has(const struct mb_sandbox_seen *set, const char *token, int if_full);
void mb_sandbox_seen_free(struct mb_sandbox_seen **set);

/// Builds the restricted environment in the fresh state L (sandbox_env.c). Runs inside a
/// protected call. Expects the state's budget already attached.
int mb_sandbox_env_open(lua_State *L);
/// Reads the stock libraries once (sandbox_env.c), before any state is built: called by
/// mb_sandbox_global_init before any worker starts; read-only afterwards. Returns 0 or -1.
int mb_sandbox_env_init(void);
/// Adds a lazy global (after mb_sandbox_env_init, before any worker starts): on first touch
/// the global `name` becomes the C closure f over (integer arg, name). Returns 0 or -1.
int mb_sandbox_env_add_stub(const char *name, lua_CFunction f, int arg);
/// The globals are lazy (sandbox_env.c, "the lazy environment"): when the table at idx is the
/// lazy globals, materialises every pending name (may raise a memory error; else a no-op).
void mb_sandbox_env_expand(lua_State *L, int idx);
/// C code stored a value under the key at idx in the globals with a raw set: a pending name of
/// that key is then never materialised (the stored value wins).
void mb_sandbox_env_claim(lua_State *L, int key);

/// Whether name is a global the sandbox provides (a base function, a library, json, re, mcp,
/// servers, skills, pii, a workspace or prelude helper): context_vars may not take it
/// (sandbox.c). Any thread, after mb_sandbox_env_init.
int mb_sandbox_env_reserved(const char *name, size_t len);
/// The sandbox's next (materialises the lazy globals first); pairs returns it.
int mb_sandbox_next(lua_State *L);

/// Adds read_file, write_file, list_files, delete_file and file_exists to the table at the top of
/// the stack (the globals, lazily: sandbox_env.c), and json.read_file, json.write_file to the json
/// table at the top (sandbox_workspace.c). They act on the running execution's
/// request->workspace, looked up at call time. Leave the stack as they found it; return 0.
int mb_sandbox_ws_open(lua_State *L);
int mb_sandbox_ws_json(lua_State *L);

/* sandbox_testhooks.c: the global __test, only in a -DMB_TEST_HOOKS build (else nothing) */
int mb_sandbox_testhooks_open(lua_State *L);

/// Adds require, skills, save_skill, load_skill and list_skills (host calls, sandbox_skills.c) to
/// the table at the top of the stack (the globals, lazily); mb_sandbox_host_mcp adds mcp.sample,
/// elicit, roots, ask and client_capabilities to the mcp table at the top.
int mb_sandbox_host_open(lua_State *L);
void mb_sandbox_host_mcp(lua_State *L);

/// With [table, next] at the top of the stack, pops next and adds servers (upstream MCP tools,
/// sandbox_upstream.c; `pairs(servers)` hands out that next) to the table (the globals, lazily). mb_sandbox_upstream_mcp: with [mcp, coroutine.create, coroutine.resume] at
/// the top, pops the two functions and adds mcp.call, mcp.parallel (over them) and mcp.tools.
int mb_sandbox_mcp_open(lua_State *L);
void mb_sandbox_upstream_mcp(lua_State *L);

#endif
