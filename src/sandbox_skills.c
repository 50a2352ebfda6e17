/* sandbox_skills.c - what sandbox code reaches through host calls: skills.
 *
 * Sandbox code never touches the store or the skills directory. `require("skills.x")`,
 * `skills.x`, `save_skill`, `load_skill` and `list_skills` become host calls (a name plus JSON
 * arguments, see mb_exec_request.host_call), answered by the trusted host Lua on the loop thread
 * (lua/mcp/skills.lua). A required skill's source comes back as text and is compiled and run
 * here, in the same state, under the same budget as the caller: a skill is just more sandbox
 * code. Loaded modules are cached per execution; a module that requires itself, directly or
 * through others, gets an error that shows the cycle. `skills.<name>` of a skill that does not
 * exist is nil (so code can test for one), and the error of using that nil gets the reason as a
 * hint (mb_sandbox_skills_explain, called by the message handler).
 */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "sandbox_int.h"

static const char loaded_key = 0;  /* registry: skill name -> module value, or the marker */
static const char loading_key = 0; /* registry: array of names being loaded (for cycle text) */
static const char marker = 0;      /* loaded[name] while its chunk runs */
static const char missing_key = 0; /* registry: skill name -> why skills.<name> was nil */

/* Calls the host with the table at the top of the stack as arguments (popped) and pushes the
 * decoded reply. Raises a Lua error with the host's message, or the sticky budget error. */
void mb_sandbox_host_call(lua_State *L, const char *name)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (!c->req || !c->req->host_call)
		luaL_error(L, "%s: not available here (no server to call)", name);
	char err[MB_ERR_MAX];
	size_t len;
	/* the host decodes these on its loop: bounded by what they expand to (a table written
	 * twice counts twice), refused here before they are built in full */
	mb_json_limits lim = c->json_lim;
	lim.max_nodes = (uint64_t)c->cfg->max_call_nodes;
	lim.node_limit_name = "max_call_nodes";
	lim.max_output_bytes = (size_t)c->cfg->max_message_bytes;
	lim.output_limit_name = "max_message_bytes";
	char *args = mb_json_encode(L, -1, &lim, 0, &len, err, sizeof err);
	if (!args) {
		mb_budget_poll(L);
		if (strstr(err, "max_call_nodes") || strstr(err, "max_message_bytes"))
			luaL_error(L, "%s: the arguments are too large: %s", name, err);
		luaL_error(L, "%s: %s", name, err);
	}
	lua_pop(L, 1);
	mb_sandbox_host_call_raw(L, name, args, len); /* frees args */
}

/* malloc'd blocks owned by a userdata while Lua code may raise: its __gc frees what is left. */
typedef struct {
	char *a, *b;
} owned2;

static int owned2_gc(lua_State *L)
{
	owned2 *o = lua_touserdata(L, 1);
	free(o->a);
	free(o->b);
	o->a = o->b = NULL;
	return 0;
}

void mb_sandbox_host_call_raw(lua_State *L, const char *name, char *args, size_t len)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	if (!c->req || !c->req->host_call) {
		free(args);
		luaL_error(L, "%s: not available here (no server to call)", name);
	}
	/* from here every Lua call may raise (memory): args and the reply belong to the box */
	if (!lua_checkstack(L, 4)) {
		free(args);
		luaL_error(L, "%s: no stack space", name);
	}
	owned2 *o = lua_newuserdatauv(L, sizeof *o, 0); /* a memory error here loses args: */
	o->a = args;                                       /* only when the state is out of memory */
	o->b = NULL;
	if (luaL_newmetatable(L, "mb.owned2")) {
		lua_pushcfunction(L, owned2_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_setmetatable(L, -2);
	int box = lua_gettop(L);
	char err[MB_ERR_MAX];
	size_t rlen = 0;
	int rc = c->req->host_call(c->req->host_ud, name, o->a, len, &o->b, &rlen);
	free(o->a);
	o->a = NULL;
	if (rc < 0) {
		free(o->b);
		o->b = NULL;
		mb_budget_raise(L, c->b);
	}
	if (o->b) { /* context saved (tokest.h): the reply is what the code took in */
		mb_io_add(c->io, mb_io_source_of_call(name), o->b, rlen);
		mb_sandbox_seen_add(&c->pii_seen, o->b, rlen); /* and the tokens in it */
	}
	if (rc > 0) {
		if (o->b)
			lua_pushlstring(L, o->b, rlen);
		else
			lua_pushliteral(L, "error");
		free(o->b);
		o->b = NULL;
		lua_error(L);
	}
	int bad = mb_json_decode(L, o->b, rlen, &c->json_lim, err, sizeof err);
	free(o->b);
	o->b = NULL;
	if (bad) {
		mb_budget_poll(L);
		luaL_error(L, "%s: bad reply from the server: %s", name, err);
	}
	lua_remove(L, box);
}

static void registry_table(lua_State *L, const void *key)
{
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_newtable(L);
		lua_pushvalue(L, -1);
		lua_rawsetp(L, LUA_REGISTRYINDEX, key);
	}
}

static int valid_name(const char *s, size_t n)
{
	if (n == 0 || n > 64 || !(s[0] == '_' || ((s[0] | 32) >= 'a' && (s[0] | 32) <= 'z')))
		return 0;
	for (size_t i = 1; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (!(ch == '_' || (ch >= '0' && ch <= '9') || ((ch | 32) >= 'a' && (ch | 32) <= 'z')))
			return 0;
	}
	return 1;
}

/* Pushes "a -> b -> ... -> name" from the loading stack. */
static void push_cycle(lua_State *L, int stack, const char *name)
{
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	lua_Integer n = luaL_len(L, stack), first = 1;
	for (lua_Integer i = 1; i <= n; i++) {
		lua_rawgeti(L, stack, i);
		if (strcmp(lua_tostring(L, -1), name) == 0)
			first = i;
		lua_pop(L, 1);
	}
	for (lua_Integer i = first; i <= n; i++) {
		lua_rawgeti(L, stack, i);
		luaL_addstring(&b, "skills.");
		luaL_addvalue(&b);
		luaL_addstring(&b, " -> ");
	}
	luaL_addstring(&b, "skills.");
	luaL_addstring(&b, name);
	luaL_pushresult(&b);
}

/* Loads skill `name` (validated) and leaves its module value on the stack. optional
 * (skills.<name>): a skill that does not exist is nil, and the host's reason is kept for
 * mb_sandbox_skills_explain; require raises. */
static int load_skill_module(lua_State *L, const char *name, int optional)
{
	mb_sandbox_ctx *c = mb_sandbox_ctx_of(L);
	registry_table(L, &loaded_key);
	int loaded = lua_gettop(L);
	lua_getfield(L, loaded, name);
	if (lua_touserdata(L, -1) == &marker) {
		registry_table(L, &loading_key);
		push_cycle(L, lua_gettop(L), name);
		return luaL_error(L, "require: cycle between skills: %s", lua_tostring(L, -1));
	}
	if (!lua_isnil(L, -1))
		return 1;
	lua_pop(L, 1);
	if (optional) { /* known missing in this execution: no second host call */
		registry_table(L, &missing_key);
		if (lua_getfield(L, -1, name) != LUA_TNIL) {
			lua_pushnil(L);
			return 1;
		}
		lua_pop(L, 2);
	}

	lua_createtable(L, 0, 2);
	lua_pushstring(L, name);
	lua_setfield(L, -2, "name");
	if (optional) {
		lua_pushboolean(L, 1);
		lua_setfield(L, -2, "optional");
	}
	mb_sandbox_host_call(L, "skill_source");
	int reply = lua_gettop(L);
	if (optional) {
		int missing = lua_getfield(L, reply, "missing") == LUA_TBOOLEAN && lua_toboolean(L, -1);
		lua_pop(L, 1);
		if (missing) {
			registry_table(L, &missing_key);
			if (lua_getfield(L, reply, "message") != LUA_TSTRING) {
				lua_pop(L, 1);
				lua_pushfstring(L, "no skill named \"%s\"", name);
			}
			lua_setfield(L, -2, name);
			lua_pushnil(L);
			return 1;
		}
	}
	lua_getfield(L, reply, "code");
	size_t len;
	const char *code = lua_tolstring(L, -1, &len);
	if (!code)
		return luaL_error(L, "require: the server sent no code for skills.%s", name);
	if (len > (size_t)c->cfg->max_code_bytes)
		return luaL_error(L, "require: skills.%s is too large: %d bytes, max_code_bytes=%d", name,
				  (int)len, (int)c->cfg->max_code_bytes);
	char chunk[96];
	snprintf(chunk, sizeof chunk, "@skills/%s.lua", name);
	if (mb_sandbox_load_text(L, code, len, chunk) != LUA_OK)
		return luaL_error(L, "require: skills.%s: %s", name, lua_tostring(L, -1));

	lua_pushlightuserdata(L, (void *)&marker);
	lua_setfield(L, loaded, name);
	registry_table(L, &loading_key);
	lua_pushstring(L, name);
	lua_rawseti(L, -2, luaL_len(L, -2) + 1);
	lua_pop(L, 1);

	lua_pushstring(L, name);
	int status = lua_pcall(L, 1, 1, 0);

	registry_table(L, &loading_key);
	lua_pushnil(L);
	lua_rawseti(L, -2, luaL_len(L, -2));
	lua_pop(L, 1);
	if (status != LUA_OK) {
		lua_pushnil(L);
		lua_setfield(L, loaded, name);
		mb_budget_poll(L); /* a limit stays a limit */
		return lua_error(L);
	}
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		lua_pushboolean(L, 1);
	}
	lua_pushvalue(L, -1);
	lua_setfield(L, loaded, name);
	return 1;
}

static int sb_require(lua_State *L)
{
	size_t n;
	const char *mod = luaL_checklstring(L, 1, &n);
	if (n < 8 || memcmp(mod, "skills.", 7) != 0 || !valid_name(mod + 7, n - 7))
		return luaL_error(L, "require: module '%s' not found: only skills can be required "
				  "in the sandbox, as require(\"skills.<name>\")", mod);
	lua_settop(L, 1);
	return load_skill_module(L, mod + 7, 0);
}

static int skills_index(lua_State *L)
{
	size_t n;
	const char *name = lua_tolstring(L, 2, &n);
	if (!name || !valid_name(name, n))
		return 0;
	return load_skill_module(L, name, 1);
}

void mb_sandbox_skills_explain(lua_State *L, int idx)
{
	idx = lua_absindex(L, idx);
	if (lua_type(L, idx) != LUA_TSTRING || !lua_checkstack(L, 4))
		return;
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, &missing_key) != LUA_TTABLE) {
		lua_pop(L, 1);
		return;
	}
	const char *msg = lua_tostring(L, idx);
	const char *kinds[] = { "a nil value (field '", "a nil value (method '" };
	const char *at = NULL;
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && !at; k++) {
		at = strstr(msg, kinds[k]);
		if (at)
			at += strlen(kinds[k]);
	}
	const char *end = at ? strchr(at, '\'') : NULL;
	if (!end || !valid_name(at, (size_t)(end - at))) {
		lua_pop(L, 1);
		return;
	}
	lua_pushlstring(L, at, (size_t)(end - at));
	lua_pushvalue(L, -1);
	if (lua_rawget(L, -3) != LUA_TSTRING) {
		lua_pop(L, 3);
		return;
	}
	lua_pushfstring(L, "%s (hint: skills.%s is nil: %s)", msg, lua_tostring(L, -2),
			lua_tostring(L, -1));
	lua_replace(L, idx);
	lua_pop(L, 3);
}

static int skills_newindex(lua_State *L)
{
	return luaL_error(L, "skills is read-only: save a skill with save_skill(name, code, description)");
}

/* save_skill(name, code, description[, params]) or save_skill{name=, code=, ...} */
static int sb_save_skill(lua_State *L)
{
	if (lua_istable(L, 1)) {
		lua_settop(L, 1);
	} else {
		luaL_checkstring(L, 1);
		luaL_checkstring(L, 2);
		lua_settop(L, 4);
		lua_createtable(L, 0, 4);
		lua_pushvalue(L, 1);
		lua_setfield(L, -2, "name");
		lua_pushvalue(L, 2);
		lua_setfield(L, -2, "code");
		lua_pushvalue(L, 3);
		lua_setfield(L, -2, "description");
		lua_pushvalue(L, 4);
		lua_setfield(L, -2, "params");
	}
	mb_sandbox_host_call(L, "save_skill");
	lua_pushnil(L); /* a skill found missing earlier in this execution may exist now */
	lua_rawsetp(L, LUA_REGISTRYINDEX, &missing_key);
	return 1;
}

static int sb_load_skill(lua_State *L)
{
	luaL_checkstring(L, 1);
	lua_settop(L, 1);
	lua_createtable(L, 0, 1);
	lua_pushvalue(L, 1);
	lua_setfield(L, -2, "name");
	mb_sandbox_host_call(L, "load_skill");
	return 1;
}

int mb_sandbox_host_call_opt(lua_State *L, const char *name, const char *key)
{
	lua_settop(L, 1);
	if (!lua_isnil(L, 1))
		luaL_checkstring(L, 1);
	lua_createtable(L, 0, 1);
	if (!lua_isnil(L, 1)) {
		lua_pushvalue(L, 1);
		lua_setfield(L, -2, key);
	}
	mb_sandbox_host_call(L, name);
	return 1;
}

static int sb_list_skills(lua_State *L)
{
	return mb_sandbox_host_call_opt(L, "list_skills", "query");
}

/* mcp.sample(params) / mcp.elicit(params): a request to the client, answered before it returns */
static int client_request(lua_State *L, const char *method)
{
	lua_settop(L, 1);
	if (!lua_isnil(L, 1))
		luaL_checktype(L, 1, LUA_TTABLE);
	lua_createtable(L, 0, 2);
	lua_pushstring(L, method);
	lua_setfield(L, -2, "method");
	if (!lua_isnil(L, 1)) {
		lua_pushvalue(L, 1);
		lua_setfield(L, -2, "params");
	}
	mb_sandbox_host_call(L, "client_request");
	return 1;
}

static int sb_sample(lua_State *L)
{
	return client_request(L, "sampling/createMessage");
}

static int sb_elicit(lua_State *L)
{
	return client_request(L, "elicitation/create");
}

static int sb_roots(lua_State *L)
{
	lua_settop(L, 0);
	return client_request(L, "roots/list");
}

/* mcp.ask({key = {method=, params=}, ...}): several questions to the client at once */
static int sb_ask(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	lua_createtable(L, 0, 1);
	lua_insert(L, 1);
	lua_setfield(L, 1, "inputs");
	mb_sandbox_host_call(L, "client_requests");
	return 1;
}

/* mcp.client_capabilities(): the capabilities the client declared */
static int sb_client_capabilities(lua_State *L)
{
	lua_settop(L, 0);
	lua_newtable(L);
	mb_sandbox_host_call(L, "client_capabilities");
	return 1;
}

/* mcp.task([message]): run on as a task of the tasks extension (true), or set its statusMessage
 * when it is one already; false when the client did not declare the extension */
static int sb_task(lua_State *L)
{
	lua_settop(L, 1);
	if (!lua_isnoneornil(L, 1))
		luaL_checktype(L, 1, LUA_TSTRING);
	lua_createtable(L, 0, 1);
	lua_insert(L, 1);
	if (!lua_isnil(L, 2))
		lua_setfield(L, 1, "message");
	else
		lua_settop(L, 1);
	mb_sandbox_host_call(L, "task");
	return 1;
}

/* mcp.sleep(ms): waits without using the CPU (bounded by the execution's deadline) */
static int sb_sleep(lua_State *L)
{
	lua_Integer ms = luaL_checkinteger(L, 1);
	luaL_argcheck(L, ms >= 0, 1, "must be a number of milliseconds >= 0");
	lua_settop(L, 0);
	lua_createtable(L, 0, 1);
	lua_pushinteger(L, ms);
	lua_setfield(L, 1, "ms");
	mb_sandbox_host_call(L, "sleep");
	return 1;
}

void mb_sandbox_host_mcp(lua_State *L)
{
	/* mcp.sample, mcp.elicit, mcp.roots, mcp.ask, mcp.client_capabilities next to mcp.log and
	 * mcp.progress: the mcp table is at the top of the stack */
	static const luaL_Reg fns[] = {
		{ "sample", sb_sample }, { "elicit", sb_elicit }, { "roots", sb_roots },
		{ "ask", sb_ask }, { "client_capabilities", sb_client_capabilities },
		{ "task", sb_task }, { "sleep", sb_sleep }, { NULL, NULL },
	};
	luaL_setfuncs(L, fns, 0);
}

int mb_sandbox_host_open(lua_State *L)
{
	/* the globals table (or the table they are made in) is at the top of the stack */
	static const luaL_Reg globals[] = {
		{ "require", sb_require },       { "save_skill", sb_save_skill },
		{ "load_skill", sb_load_skill }, { "list_skills", sb_list_skills }, { NULL, NULL },
	};
	luaL_setfuncs(L, globals, 0);
	lua_newtable(L);
	lua_createtable(L, 0, 3);
	lua_pushcfunction(L, skills_index);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, skills_newindex);
	lua_setfield(L, -2, "__newindex");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	lua_setfield(L, -2, "skills");
	return 0;
}
