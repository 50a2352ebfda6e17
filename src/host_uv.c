/* host_uv.c - timers and directory watchers for the host Lua state, on the server's libuv loop.
 *
 * Three kinds of object cooperate. The per-state context (a full userdata kept in the registry
 * under the address of ctx_key, and an upvalue of timer/watch) knows the loop, the state's main
 * thread and the list of live handles. Each libuv handle sits in its own malloc'd `uvh` block,
 * because libuv needs the memory until the close callback runs, which may be after the Lua state
 * is gone. The Lua object a script holds (`hud`) only points at its uvh; closing detaches the two,
 * releases the registry references (the callback function, and for a pending timer the anchor
 * that keeps its Lua object alive), unlinks the uvh from the live list and calls uv_close, whose
 * callback frees the block and touches nothing else. So nothing a callback or close callback
 * does depends on the Lua state still existing, and finalizers (handle or context) at lua_close
 * simply close what is left.
 *
 * Callbacks call the Lua function on the main thread with lua_pcall and a traceback handler;
 * errors are logged. A timer is closed before its function runs (it is one-shot), so the function
 * may start a new timer or stop anything, including itself, safely.
 */
#include "host_uv.h"

#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

enum { KIND_TIMER = 1, KIND_WATCH = 2 };

static const char ctx_key = 0;   /* its address is the registry key of the context */
#define TIMER_MT "mb.timer"
#define WATCH_MT "mb.watch"
#define CTX_MT "mb.uv_ctx"

typedef struct uvh uvh;
typedef struct hud hud;

typedef struct uv_ctx {
	uv_loop_t *loop;
	lua_State *L;    /* the main thread of the state */
	uvh *live;       /* handles not yet closed */
	int nlive;
} uv_ctx;

struct uvh {
	union {
		uv_handle_t h;
		uv_timer_t t;
		uv_fs_event_t fs;
	} u;
	int kind;
	uv_ctx *ctx;
	hud *ud;          /* the Lua object, NULL once detached */
	int fn_ref;       /* registry reference of the callback */
	int self_ref;     /* registry reference of the Lua object (pending timers), or LUA_NOREF */
	uvh *prev, *next;
	char path[];      /* watched directory (watchers), for messages */
};

struct hud {
	uvh *h;           /* NULL once closed */
};

static void on_closed(uv_handle_t *handle)
{
	free(handle); /* u is the first member of uvh */
}

/* Detaches, unreferences, unlinks and uv_closes h. Safe inside h's own callback. */
static void close_handle(uvh *h)
{
	uv_ctx *ctx = h->ctx;
	if (h->ud)
		h->ud->h = NULL;
	h->ud = NULL;
	luaL_unref(ctx->L, LUA_REGISTRYINDEX, h->fn_ref);
	luaL_unref(ctx->L, LUA_REGISTRYINDEX, h->self_ref);
	h->fn_ref = h->self_ref = LUA_NOREF;
	if (h->prev)
		h->prev->next = h->next;
	else
		ctx->live = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->prev = h->next = NULL;
	ctx->nlive--;
	uv_close(&h->u.h, on_closed);
}

static void link_handle(uv_ctx *ctx, uvh *h)
{
	h->prev = NULL;
	h->next = ctx->live;
	if (ctx->live)
		ctx->live->prev = h;
	ctx->live = h;
	ctx->nlive++;
}

int mb_host_traceback(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);
	if (!msg)
		msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
	luaL_traceback(L, L, msg, 1);
	return 1;
}

/* Calls the function below the nargs arguments on top of L's stack; logs an error. */
static void call_logged(lua_State *L, int nargs, const char *what, const char *path)
{
	int fn = lua_gettop(L) - nargs;
	lua_pushcfunction(L, mb_host_traceback);
	lua_insert(L, fn);
	if (lua_pcall(L, nargs, 0, fn) != LUA_OK) {
		const char *msg = lua_tostring(L, -1);
		if (path)
			mb_log(MB_LOG_ERROR, "%s %s callback: %s", what, path, msg ? msg : "(no message)");
		else
			mb_log(MB_LOG_ERROR, "%s callback: %s", what, msg ? msg : "(no message)");
		lua_pop(L, 1);
	}
	lua_pop(L, 1); /* the handler */
}

static void on_timer(uv_timer_t *t)
{
	uvh *h = (uvh *)t;
	lua_State *L = h->ctx->L;
	if (!lua_checkstack(L, 4)) {
		mb_log(MB_LOG_ERROR, "timer callback: no Lua stack space");
		close_handle(h);
		return;
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn_ref);
	close_handle(h); /* one-shot: done; the function stays on the stack */
	call_logged(L, 0, "timer", NULL);
}

static void on_fs_event(uv_fs_event_t *fe, const char *filename, int events, int status)
{
	uvh *h = (uvh *)fe;
	lua_State *L = h->ctx->L;
	if (status < 0) {
		mb_log(MB_LOG_WARNING, "watch %s: %s", h->path, uv_strerror(status));
		return;
	}
	if (!lua_checkstack(L, 6)) {
		mb_log(MB_LOG_ERROR, "watch %s callback: no Lua stack space", h->path);
		return;
	}
	/* The callback may close this watcher; h stays allocated until the close callback, and
	 * after the call nothing here touches it. Copy the path for the message first. */
	char path[256];
	snprintf(path, sizeof path, "%s", h->path);
	lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn_ref);
	if (filename)
		lua_pushstring(L, filename);
	else
		lua_pushnil(L);
	int r = events & UV_RENAME, c = events & UV_CHANGE;
	lua_pushstring(L, r && c ? "rename,change" : r ? "rename" : "change");
	call_logged(L, 2, "watch", path);
}

/* ---- Lua objects ----------------------------------------------------------------------------- */

/* handle:stop() / handle:close() -> true if it was live, false if already closed */
static int l_handle_close(lua_State *L)
{
	hud *u = lua_touserdata(L, 1);
	if (!u || (!luaL_testudata(L, 1, TIMER_MT) && !luaL_testudata(L, 1, WATCH_MT)))
		return luaL_typeerror(L, 1, "timer or watch handle");
	int live = u->h != NULL;
	if (live)
		close_handle(u->h);
	lua_pushboolean(L, live);
	return 1;
}

static int l_timer_gc(lua_State *L)
{
	hud *u = lua_touserdata(L, 1);
	if (u && u->h)
		close_handle(u->h); /* only reachable at lua_close: a pending timer is anchored */
	return 0;
}

static int l_watch_gc(lua_State *L)
{
	hud *u = lua_touserdata(L, 1);
	if (u && u->h) {
		mb_log(MB_LOG_WARNING, "watch %s: handle garbage-collected without :close(); the "
		       "watcher is closed", u->h->path);
		close_handle(u->h);
	}
	return 0;
}

static int l_handle_tostring(lua_State *L)
{
	hud *u = lua_touserdata(L, 1);
	int timer = luaL_testudata(L, 1, TIMER_MT) != NULL;
	if (!u || !u->h)
		lua_pushfstring(L, "%s (closed)", timer ? "timer" : "watch");
	else if (timer)
		lua_pushliteral(L, "timer (pending)");
	else
		lua_pushfstring(L, "watch %s", u->h->path);
	return 1;
}

static int l_ctx_gc(lua_State *L)
{
	uv_ctx *ctx = lua_touserdata(L, 1);
	while (ctx->live)
		close_handle(ctx->live);
	return 0;
}

/* Creates the Lua object for a new handle and the registry references it needs, before any
 * libuv state exists, so a Lua memory error here leaks nothing. Leaves the object on top. */
static hud *new_hud(lua_State *L, const char *mt, int fn_idx, int anchor, int *fn_ref,
		    int *self_ref)
{
	hud *u = lua_newuserdatauv(L, sizeof *u, 0);
	u->h = NULL;
	luaL_setmetatable(L, mt);
	lua_pushvalue(L, fn_idx);
	*fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	*self_ref = LUA_NOREF;
	if (anchor) {
		lua_pushvalue(L, -1);
		*self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	}
	return u;
}

/* timer(ms, fn) -> handle */
static int l_timer(lua_State *L)
{
	uv_ctx *ctx = lua_touserdata(L, lua_upvalueindex(1));
	lua_Number ms = luaL_checknumber(L, 1);
	luaL_argcheck(L, ms >= 0 && ms <= 9007199254740992.0, 1,
		      "expected milliseconds between 0 and 2^53");
	luaL_checktype(L, 2, LUA_TFUNCTION);
	lua_settop(L, 2);
	int fn_ref, self_ref;
	hud *u = new_hud(L, TIMER_MT, 2, 1, &fn_ref, &self_ref);
	uvh *h = calloc(1, sizeof *h);
	if (!h)
		goto nomem;
	h->kind = KIND_TIMER;
	h->ctx = ctx;
	h->fn_ref = fn_ref;
	h->self_ref = self_ref;
	int rc = uv_timer_init(ctx->loop, &h->u.t);
	if (rc < 0) {
		free(h);
		goto uverr;
	}
	link_handle(ctx, h);
	h->ud = u;
	u->h = h;
	rc = uv_timer_start(&h->u.t, on_timer, (uint64_t)ceil(ms), 0);
	if (rc < 0) {
		close_handle(h);
		lua_pushnil(L);
		lua_pushfstring(L, "timer: %s", uv_strerror(rc));
		return 2;
	}
	uv_unref(&h->u.h);
	return 1;
uverr:
	luaL_unref(L, LUA_REGISTRYINDEX, fn_ref);
	luaL_unref(L, LUA_REGISTRYINDEX, self_ref);
	lua_pushnil(L);
	lua_pushfstring(L, "timer: %s", uv_strerror(rc));
	return 2;
nomem:
	luaL_unref(L, LUA_REGISTRYINDEX, fn_ref);
	luaL_unref(L, LUA_REGISTRYINDEX, self_ref);
	return luaL_error(L, "timer: out of memory");
}

/* watch(dir, fn) -> handle | nil, "watch <dir>: <reason>" */
static int l_watch(lua_State *L)
{
	uv_ctx *ctx = lua_touserdata(L, lua_upvalueindex(1));
	size_t plen;
	const char *dir = luaL_checklstring(L, 1, &plen);
	luaL_checktype(L, 2, LUA_TFUNCTION);
	luaL_argcheck(L, plen > 0 && strlen(dir) == plen, 1, "expected a directory path");
	lua_settop(L, 2);
	int fn_ref, self_ref;
	hud *u = new_hud(L, WATCH_MT, 2, 0, &fn_ref, &self_ref);
	uvh *h = calloc(1, sizeof *h + plen + 1);
	if (!h) {
		luaL_unref(L, LUA_REGISTRYINDEX, fn_ref);
		return luaL_error(L, "watch %s: out of memory", dir);
	}
	h->kind = KIND_WATCH;
	h->ctx = ctx;
	h->fn_ref = fn_ref;
	h->self_ref = self_ref;
	memcpy(h->path, dir, plen + 1);
	int rc = uv_fs_event_init(ctx->loop, &h->u.fs);
	if (rc < 0) {
		free(h);
		luaL_unref(L, LUA_REGISTRYINDEX, fn_ref);
		lua_pushnil(L);
		lua_pushfstring(L, "watch %s: %s", dir, uv_strerror(rc));
		return 2;
	}
	link_handle(ctx, h);
	h->ud = u;
	u->h = h;
	rc = uv_fs_event_start(&h->u.fs, on_fs_event, dir, 0);
	if (rc < 0) {
		close_handle(h);
		lua_pushnil(L);
		lua_pushfstring(L, "watch %s: %s", dir, uv_strerror(rc));
		return 2;
	}
	uv_unref(&h->u.h);
	return 1;
}

/* ---- public ----------------------------------------------------------------------------------- */

void mb_host_handle_mt(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
		       lua_CFunction close, lua_CFunction tostring, const char *shown)
{
	if (!luaL_newmetatable(L, name)) {
		lua_pop(L, 1);
		return;
	}
	lua_newtable(L);
	luaL_setfuncs(L, methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, close);
	lua_setfield(L, -2, "__close");
	lua_pushcfunction(L, tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushstring(L, shown);
	lua_setfield(L, -2, "__metatable");
	lua_pop(L, 1);
}

void *mb_host_context(lua_State *L, const void *key, size_t size, const char *mt, lua_CFunction gc,
		      int *made)
{
	*made = 0;
	if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) != LUA_TNIL)
		return lua_touserdata(L, -1);
	lua_pop(L, 1);
	void *p = lua_newuserdatauv(L, size, 0);
	memset(p, 0, size);
	luaL_newmetatable(L, mt);
	lua_pushcfunction(L, gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);
	lua_pushvalue(L, -1);
	lua_rawsetp(L, LUA_REGISTRYINDEX, key);
	*made = 1;
	return p;
}

static uv_ctx *find_ctx(lua_State *L)
{
	lua_rawgetp(L, LUA_REGISTRYINDEX, &ctx_key);
	uv_ctx *ctx = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return ctx;
}

void mb_host_uv_open(lua_State *L, uv_loop_t *loop)
{
	static const luaL_Reg methods[] = {
		{ "stop", l_handle_close }, { "close", l_handle_close }, { NULL, NULL },
	};
	int t = lua_absindex(L, -1);
	mb_host_handle_mt(L, TIMER_MT, methods, l_timer_gc, l_handle_close, l_handle_tostring,
			  "mb.handle");
	mb_host_handle_mt(L, WATCH_MT, methods, l_watch_gc, l_handle_close, l_handle_tostring,
			  "mb.handle");
	int made;
	uv_ctx *ctx = mb_host_context(L, &ctx_key, sizeof *ctx, CTX_MT, l_ctx_gc, &made);
	if (made) {
		ctx->loop = loop;
		lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
		ctx->L = lua_tothread(L, -1);
		lua_pop(L, 1);
	}
	lua_pushvalue(L, -1);
	lua_pushcclosure(L, l_timer, 1);
	lua_setfield(L, t, "timer");
	lua_pushcclosure(L, l_watch, 1);
	lua_setfield(L, t, "watch");
}

void mb_host_uv_close_all(lua_State *L)
{
	uv_ctx *ctx = find_ctx(L);
	if (!ctx)
		return;
	while (ctx->live)
		close_handle(ctx->live);
}

int mb_host_uv_live(lua_State *L)
{
	uv_ctx *ctx = find_ctx(L);
	return ctx ? ctx->nlive : 0;
}
