/* fuzz_lpattern.c - libFuzzer target: differential test of src/lpattern.c against Lua's own
 * string library.
 *
 * Input layout: byte 0 picks the operation (find, match, gmatch, gsub with a string, table or
 * function replacement, plain find) and whether an init / max argument is passed; byte 1 is that
 * argument (signed); byte 2 says how many of the remaining bytes form the pattern; the rest is the
 * subject. The case runs first in a state using mb_lpattern_register with a 50 ms budget; if that
 * times out the input is skipped (the stock matcher would run just as long, without a limit).
 * Otherwise the same case runs in a state with the stock library, and the serialised outcomes
 * (all returned values with their types, every gmatch iteration, or the error message) must be
 * identical; a difference aborts.
 *
 * Build and run (about a minute):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -iquote src \
 *     $(pkg-config --cflags lua5.4) tests/fuzz/fuzz_lpattern.c src/lpattern.c src/budget.c \
 *     $(pkg-config --libs lua5.4) -lm -o build/fuzz_lpattern
 *   build/fuzz_lpattern -max_len=300 -max_total_time=60 corpus_dir
 */
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "lpattern.h"

static const char driver[] =
	"local find, match, gmatch, gsub = string.find, string.match, string.gmatch, string.gsub\n"
	"local fmt, concat, pack = string.format, table.concat, table.pack\n"
	"local function ser(t, i, j)\n"
	"  local o = {}\n"
	"  for k = i, j do\n"
	"    local v = t[k]\n"
	"    if type(v) == 'string' then o[#o + 1] = fmt('%q', v)\n"
	"    elseif type(v) == 'number' then o[#o + 1] = math.type(v) .. ':' .. tostring(v)\n"
	"    else o[#o + 1] = tostring(v) end\n"
	"  end\n"
	"  return concat(o, ',')\n"
	"end\n"
	"local RT = setmetatable({}, {__index = function(_, k)\n"
	"  if k == 'a' then return false end\n"
	"  if k == 'b' then return {} end\n"
	"  if math.type(k) == 'integer' then return k * 10 end\n"
	"  if type(k) == 'string' and #k % 2 == 1 then return '<' .. k .. '>' end\n"
	"  return nil end})\n"
	"local function RF(...)\n"
	"  local a = ...\n"
	"  if a == 'a' then return nil end\n"
	"  if a == 'b' then return true end\n"
	"  local o = {}\n"
	"  for i = 1, select('#', ...) do o[i] = tostring((select(i, ...))) end\n"
	"  return '[' .. concat(o, '|') .. ']'\n"
	"end\n"
	"local REPL = {'x', '%0', '%1', '%%', '%2', '<%1>', '%', '', '%9', 7}\n"
	"local ops = {\n"
	"  function(s, p, a) return find(s, p, a) end,\n"
	"  function(s, p, a) return match(s, p, a) end,\n"
	"  function(s, p, a, r)\n"
	"    local it = gmatch(s, p, a)\n"
	"    local o = {}\n"
	"    for k = 1, 1000 do\n"
	"      local v = pack(it())\n"
	"      if v.n == 0 then break end\n"
	"      o[#o + 1] = '{' .. ser(v, 1, v.n) .. '}'\n"
	"    end\n"
	"    return concat(o, ' ')\n"
	"  end,\n"
	"  function(s, p, a, r) return gsub(s, p, REPL[r % #REPL + 1], a) end,\n"
	"  function(s, p, a) return gsub(s, p, RT, a) end,\n"
	"  function(s, p, a) return gsub(s, p, RF, a) end,\n"
	"  function(s, p, a) return find(s, p, a, true) end,\n"
	"}\n"
	"NOPS = #ops\n"
	"function run(op, s, p, a, r)\n"
	"  local v = pack(pcall(ops[op], s, p, a, r))\n"
	"  if v[1] then return 'ok ' .. ser(v, 2, v.n) end\n"
	"  return 'err ' .. tostring(v[2])\n"
	"end\n";

typedef struct fz_states {
	lua_State *stock, *mine;
	mb_budget budget;
} fz_states;

static lua_State *fz_state(mb_budget *b)
{
	lua_State *L = luaL_newstate();
	if (!L)
		abort();
	luaL_openlibs(L);
	if (b) {
		*(mb_budget **)lua_getextraspace(L) = b;
		lua_getglobal(L, "string");
		mb_lpattern_register(L, -1);
		lua_pop(L, 1);
	}
	if (luaL_dostring(L, driver) != LUA_OK) {
		fprintf(stderr, "driver: %s\n", lua_tostring(L, -1));
		abort();
	}
	return L;
}

/* Runs the case in L; returns the outcome string (valid until the next lua_settop). */
static const char *fz_run(lua_State *L, int op, const uint8_t *s, size_t sl, const uint8_t *p,
			  size_t pl, int has_arg, int arg, int repl, size_t *len)
{
	lua_settop(L, 0);
	lua_getglobal(L, "run");
	lua_pushinteger(L, op);
	lua_pushlstring(L, (const char *)s, sl);
	lua_pushlstring(L, (const char *)p, pl);
	if (has_arg)
		lua_pushinteger(L, arg);
	else
		lua_pushnil(L);
	lua_pushinteger(L, repl);
	if (lua_pcall(L, 5, 1, 0) != LUA_OK) {
		/* only a tripped budget may escape the driver's pcall-free paths */
		*len = 0;
		return lua_tostring(L, -1) ? lua_tostring(L, -1) : "?";
	}
	return lua_tolstring(L, -1, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static fz_states st;
	if (!st.stock) {
		st.stock = fz_state(NULL);
		st.mine = fz_state(&st.budget);
	}
	if (size < 3)
		return 0;
	int op = data[0] % 7 + 1;
	int has_arg = (data[0] >> 3) & 1;
	int repl = data[0] >> 4;
	int arg = (int8_t)data[1];
	size_t rest = size - 3;
	size_t pl = data[2] % (rest + 1);
	const uint8_t *p = data + 3, *s = data + 3 + pl;
	size_t sl = rest - pl;

	mb_budget_init(&st.budget, 0, 0, 50);
	size_t lb = 0, la = 0;
	const char *b = fz_run(st.mine, op, s, sl, p, pl, has_arg, arg, repl, &lb);
	if (strstr(b, "timeout: execution exceeded")) {
		lua_settop(st.mine, 0);
		return 0;
	}
	const char *a = fz_run(st.stock, op, s, sl, p, pl, has_arg, arg, repl, &la);
	if (la != lb || memcmp(a, b, la) != 0) {
		fprintf(stderr, "MISMATCH op=%d arg=%s%d repl=%d\n  pattern: %.*s\n  subject: %.*s\n"
			"  stock: %.*s\n  mine:  %.*s\n", op, has_arg ? "" : "(none) ", arg, repl,
			(int)pl, (const char *)p, (int)sl, (const char *)s, (int)la, a, (int)lb, b);
		abort();
	}
	lua_settop(st.stock, 0);
	lua_settop(st.mine, 0);
	if ((data[1] & 63) == 0) {
		lua_gc(st.stock, LUA_GCCOLLECT);
		lua_gc(st.mine, LUA_GCCOLLECT);
	}
	return 0;
}
