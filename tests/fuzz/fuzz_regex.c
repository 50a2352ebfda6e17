/* fuzz_regex.c - libFuzzer target for the sandbox `re` module (src/regex.c).
 *
 * Input layout: byte 0 picks the operation (low 3 bits) and the flags (high 5 bits: i m s x u);
 * byte 1 is the init / max argument (signed, 0 = none); bytes 2 and 3 say how many of the
 * remaining bytes form the pattern and the gsub template; the rest is the subject. Every input
 * runs in a fresh state with a small budget (4 MiB, 50 ms) and small limits, so compile errors,
 * limit errors, UTF-8 errors and timeouts are all ordinary outcomes. What must hold:
 *  - nothing crashes or trips ASan/UBSan (the build uses both);
 *  - an error is a string starting with "re: ", a Lua argument error, or a budget error;
 *  - the call returns within deadline + 150 ms;
 *  - when the consistency operation succeeds: gsub(s, p, "$0") == s, its count equals the number
 *    of gmatch matches and #split(s, p) - 1, gsub with a literal template equals the split pieces
 *    joined by it, and find/match agree with the first gmatch match;
 *  - after lua_close the budget's mem_used is 0 (every charged byte was credited back).
 *
 * Build and run (about a minute):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE -iquote src \
 *     $(pkg-config --cflags lua5.4 libpcre2-8) tests/fuzz/fuzz_regex.c src/regex.c src/budget.c \
 *     $(pkg-config --libs lua5.4 libpcre2-8) -lm -o build/fuzz_regex
 *   build/fuzz_regex -max_len=512 -max_total_time=60 corpus_dir
 */
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "regex.h"

static const char driver[] =
	"local re, concat, pack, select, type = re, table.concat, table.pack, select, type\n"
	"local function check(cond, what, ...)\n"
	"  if not cond then error('INVARIANT ' .. what .. ': ' .. concat({...}, ' | '), 0) end\n"
	"end\n"
	"local ops = {}\n"
	"ops[0] = function(s, p, f)\n"  /* consistency between the five functions */
	"  local g, n = re.gsub(s, p, '$0', nil, f)\n"
	"  check(g == s, 'gsub $0 is identity', s, g)\n"
	"  local k, first, firstcap = 0\n"
	"  for a in re.gmatch(s, p, f) do k = k + 1; if k == 1 then firstcap = a end end\n"
	"  check(k == n, 'gsub count == gmatch count', n, k)\n"
	"  local parts = re.split(s, p, nil, f)\n"
	"  check(#parts == n + 1, '#split == count + 1', #parts, n)\n"
	"  local j = re.gsub(s, p, '\\1<>', nil, f)\n"
	"  check(j == concat(parts, '\\1<>'), 'gsub literal == joined split')\n"
	"  local r = pack(re.find(s, p, 1, f))\n"
	"  local m = pack(re.match(s, p, 1, f))\n"
	"  check((r[1] == nil) == (k == 0), 'find finds iff gmatch does')\n"
	"  check((m[1] == nil) == (k == 0), 'match finds iff gmatch does')\n"
	"  if k > 0 then\n"
	"    check(m[1] == firstcap, 'match == first gmatch')\n"
	"    if r.n == 2 then check(s:sub(r[1], r[2]) == m[1], 'find range == match') end\n"
	"  end\n"
	"  return n\n"
	"end\n"
	"ops[1] = function(s, p, f, a, t) return re.gsub(s, p, t, a ~= 0 and a or nil, f) end\n"
	"ops[2] = function(s, p, f, a)\n"
	"  return re.gsub(s, p, function(x, ...) if x == false then return nil end\n"
	"    if #tostring(x) % 3 == 0 then return false end\n"
	"    return '[' .. tostring(x) .. select('#', ...) .. ']' end, a ~= 0 and a or nil, f)\n"
	"end\n"
	"ops[3] = function(s, p, f, a)\n"
	"  return re.gsub(s, p, setmetatable({}, {__index = function(_, k)\n"
	"    if type(k) == 'string' and #k % 2 == 0 then return k:upper() end end}), a, f)\n"
	"end\n"
	"ops[4] = function(s, p, f)\n"
	"  local o = {}\n"
	"  for a, b in re.gmatch(s, p, f) do o[#o + 1] = tostring(a) .. tostring(b) end\n"
	"  return concat(o, ',')\n"
	"end\n"
	"ops[5] = function(s, p, f, a) return re.find(s, p, a, f) end\n"
	"ops[6] = function(s, p, f, a) return re.match(s, p, a, f) end\n"
	"ops[7] = function(s, p, f, a) return #re.split(s, p, a ~= 0 and a or nil, f) end\n"
	"function run(op, s, p, f, a, t)\n"
	"  local ok, e = pcall(ops[op], s, p, f, a, t)\n"
	"  if ok then return 'ok' end\n"
	"  if type(e) ~= 'string' then return 'BAD non-string error' end\n"
	"  return e\n"
	"end\n";

static const char *flag_letters = "imsxu";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	int op = data[0] & 7;
	char flags[8];
	size_t nf = 0;
	for (int i = 0; i < 5; i++)
		if (data[0] & (8 << i))
			flags[nf++] = flag_letters[i];
	flags[nf] = '\0';
	int arg = (int8_t)data[1];
	size_t rest = size - 4;
	size_t pl = data[2] % (rest + 1);
	size_t tl = data[3] % (rest - pl + 1);
	const char *p = (const char *)data + 4, *t = p + pl, *s = t + tl;
	size_t sl = rest - pl - tl;

	mb_budget b;
	mb_budget_init(&b, 0, 0, 0);
	lua_State *L = luaL_newstate();
	if (!L)
		abort();
	luaL_openlibs(L);
	*(mb_budget **)lua_getextraspace(L) = &b;
	mb_regex_limits lim = { .max_pattern_bytes = 256, .max_subject_bytes = 4096,
				.match_limit = 20000, .heap_limit_kb = 256, .max_patterns = 8 };
	mb_regex_open(L, &lim);
	lua_setglobal(L, "re");
	if (luaL_dostring(L, driver) != LUA_OK) {
		fprintf(stderr, "driver: %s\n", lua_tostring(L, -1));
		abort();
	}

	mb_budget_init(&b, 4u << 20, 0, 50);
	uint64_t t0 = mb_now_ns();
	lua_getglobal(L, "run");
	lua_pushinteger(L, op);
	lua_pushlstring(L, s, sl);
	lua_pushlstring(L, p, pl);
	lua_pushstring(L, flags);
	lua_pushinteger(L, arg);
	lua_pushlstring(L, t, tl);
	int rc = lua_pcall(L, 6, 1, 0);
	uint64_t ms = (mb_now_ns() - t0) / 1000000;
	const char *r = lua_tostring(L, -1);
	if (!r)
		r = "(no message)";
	int ok = rc == LUA_OK &&
		 (strcmp(r, "ok") == 0 || strncmp(r, "re: ", 4) == 0 || strstr(r, ": re: ") ||
		  strstr(r, "bad argument") || strncmp(r, "timeout: ", 9) == 0 ||
		  strncmp(r, "memory limit: ", 14) == 0 || strstr(r, "not enough memory"));
	if (!ok || ms > 200) {
		fprintf(stderr, "FAILED op=%d flags=%s arg=%d rc=%d %llu ms\n  pattern: %.*s\n"
			"  template: %.*s\n  subject: %.*s\n  outcome: %s\n", op, flags, arg, rc,
			(unsigned long long)ms, (int)pl, p, (int)tl, t, (int)sl, s, r);
		abort();
	}
	lua_close(L);
	if (b.mem_used != 0) {
		fprintf(stderr, "LEAK: %zu bytes still charged after lua_close\n", b.mem_used);
		abort();
	}
	return 0;
}
