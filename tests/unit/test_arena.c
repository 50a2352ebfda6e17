/* test_arena.c - unit tests for the sandbox allocator (src/arena.c).
 *
 * A randomized driver runs alloc/realloc/free sequences through mb_arena_lua_alloc against a
 * shadow model (each live block's size and fill byte): after every step the touched block's
 * contents must match, the budget's mem_used must equal the sum of live sizes exactly, and
 * periodically every live block is verified, which also catches two blocks sharing memory. A
 * small region makes the run cross every path: classes, small<->large, a full region falling
 * back to malloc. Then: cap refusal trips MB_STOP_MEMORY and leaves the block intact, shrinks
 * succeed at the cap, real lua_States (GC-heavy, and one that hits the cap) close with nothing
 * left live, trim resets and gives pages back (checked with mincore), a wrong osize aborts, and
 * each thread gets its own arena. Built normally, with -DMB_ARENA_DEBUG (every block from malloc)
 * and under ASan; the tests that need a region check stats.debug and skip themselves.
 */
#include <lauxlib.h>
#include <lualib.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"
#include "budget.h"
#include "unit.h"

static mb_arena_stats stats_of(mb_arena *a)
{
	mb_arena_stats st;
	mb_arena_get_stats(a, &st);
	return st;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Sizes: mostly small (what Lua asks for), some around the small/large edge, a few large. */
static size_t rnd_size(void)
{
	unsigned r = (unsigned)(rnd() % 100);
	if (r < 70)
		return 1 + rnd() % 300;
	if (r < 90)
		return 1 + rnd() % 4200;
	if (r < 98)
		return 3900 + rnd() % 400;
	return 1 + rnd() % 70000;
}

typedef struct {
	unsigned char *p;
	size_t size;
	unsigned char fill;
} shadow;

static int block_ok(const shadow *s)
{
	for (size_t i = 0; i < s->size; i++)
		if (s->p[i] != (unsigned char)(s->fill + i * 7))
			return 0;
	return 1;
}

static void block_fill(shadow *s, size_t from)
{
	for (size_t i = from; i < s->size; i++)
		s->p[i] = (unsigned char)(s->fill + i * 7);
}

#define NSLOT 600

/* One randomized run on arena a with budget cap `cap`; returns the number of failed checks. */
static void random_run(mb_arena *a, size_t cap, int steps)
{
	mb_budget b;
	mb_budget_init(&b, cap, 0, 0);
	mb_arena_ud ud = { a, &b };
	size_t live0 = stats_of(a).live_blocks;
	static shadow slot[NSLOT];
	memset(slot, 0, sizeof slot);
	size_t sum = 0, peak = 0;
	int bad_content = 0, bad_acct = 0, refused = 0;
	for (int step = 0; step < steps; step++) {
		shadow *s = &slot[rnd() % NSLOT];
		if (!s->p) {
			size_t n = rnd_size();
			/* osize is not a size when ptr is NULL: pass garbage (Lua passes a type tag) */
			void *p = mb_arena_lua_alloc(&ud, NULL, rnd() % 9, n);
			if (!p) {
				refused++;
				if (sum + n <= cap)
					bad_acct++;
			} else {
				s->p = p;
				s->size = n;
				s->fill = (unsigned char)rnd();
				block_fill(s, 0);
				sum += n;
			}
		} else if (rnd() % 3 == 0) {
			if (!block_ok(s))
				bad_content++;
			if (mb_arena_lua_alloc(&ud, s->p, s->size, 0) != NULL)
				bad_acct++;
			sum -= s->size;
			s->p = NULL;
		} else {
			size_t n = rnd() % 2 ? rnd_size() : s->size + (rnd() % 64) - 32;
			if (n == 0 || n > (size_t)1 << 30)
				n = 1;
			void *p = mb_arena_lua_alloc(&ud, s->p, s->size, n);
			if (!p) {
				refused++;
				if (n <= s->size || sum - s->size + n <= cap)
					bad_acct++; /* a shrink or a growth within the cap was refused */
				if (!block_ok(s))
					bad_content++; /* a refused realloc must leave the block intact */
			} else {
				size_t keep = n < s->size ? n : s->size;
				size_t old = s->size;
				s->p = p;
				s->size = keep;
				if (!block_ok(s))
					bad_content++;
				s->size = n;
				block_fill(s, keep);
				sum = sum - old + n;
			}
		}
		if (sum > peak)
			peak = sum;
		if (b.mem_used != sum)
			bad_acct++;
		if (step % 997 == 0)
			for (int i = 0; i < NSLOT; i++)
				if (slot[i].p && !block_ok(&slot[i]))
					bad_content++;
	}
	for (int i = 0; i < NSLOT; i++) {
		if (!slot[i].p)
			continue;
		if (!block_ok(&slot[i]))
			bad_content++;
		mb_arena_lua_alloc(&ud, slot[i].p, slot[i].size, 0);
		slot[i].p = NULL;
	}
	CHECK(bad_content == 0);
	CHECK(bad_acct == 0);
	CHECK(b.mem_used == 0);
	CHECK(b.mem_peak == peak);
	CHECK(stats_of(a).live_blocks == live0);
	if (cap && cap < 4000000)
		CHECK(refused > 0 && atomic_load(&b.stop) == MB_STOP_MEMORY);
	else
		CHECK(refused == 0 && atomic_load(&b.stop) == MB_STOP_NONE);
}

TEST(test_random_unlimited)
{
	mb_arena *a = mb_arena_new((size_t)8 << 20, (size_t)1 << 20);
	CHECK(a != NULL);
	if (!a)
		return;
	for (int round = 0; round < 3; round++) {
		random_run(a, 0, 60000);
		mb_arena_trim(a);
		mb_arena_stats st = stats_of(a);
		CHECK(st.live_blocks == 0);
		CHECK(st.region_used == 0);
		CHECK(st.resets == (size_t)round + 1);
		if (!st.debug)
			CHECK(st.region_size == (size_t)8 << 20);
	}
	CHECK(mb_arena_delete(a) == 0);
}

TEST(test_random_small_region_falls_back)
{
	/* 64 KiB region: most blocks overflow to malloc while others are served and freed. */
	mb_arena *a = mb_arena_new(65536, 0);
	CHECK(a != NULL);
	if (!a)
		return;
	random_run(a, 0, 60000);
	mb_arena_stats st = stats_of(a);
	if (!st.debug) {
		CHECK(st.fallbacks > 1000);
		CHECK(st.region_used == 65536);
	}
	mb_arena_trim(a);
	CHECK(stats_of(a).region_used == 0);
	CHECK(mb_arena_delete(a) == 0);
}

TEST(test_random_with_cap)
{
	mb_arena *a = mb_arena_new((size_t)8 << 20, 0);
	CHECK(a != NULL);
	if (!a)
		return;
	random_run(a, 300000, 60000); /* about 600 slots of ~600 bytes average: the cap bites */
	mb_arena_trim(a);
	CHECK(mb_arena_delete(a) == 0);
}

TEST(test_no_region)
{
	mb_arena *a = mb_arena_new(0, 0);
	CHECK(a != NULL);
	if (!a)
		return;
	random_run(a, 0, 20000);
	CHECK(stats_of(a).region_size == 0);
	CHECK(mb_arena_delete(a) == 0);
}

TEST(test_cap_refusal_trips)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_budget b;
	mb_budget_init(&b, 10000, 0, 0);
	mb_arena_ud ud = { a, &b };
	char *p = mb_arena_lua_alloc(&ud, NULL, 0, 6000);
	CHECK(p != NULL);
	memset(p, 'a', 6000);
	char *q = mb_arena_lua_alloc(&ud, NULL, 0, 100);
	CHECK(q != NULL);
	memset(q, 'q', 100);
	CHECK(b.mem_used == 6100);
	CHECK(atomic_load(&b.stop) == MB_STOP_NONE);
	/* exactly at the cap is allowed */
	void *r = mb_arena_lua_alloc(&ud, NULL, 0, 3900);
	CHECK(r != NULL);
	CHECK(b.mem_used == 10000);
	CHECK(mb_arena_lua_alloc(&ud, r, 3900, 0) == NULL);
	/* small and large growth beyond the cap: refused, block untouched, memory tripped */
	CHECK(mb_arena_lua_alloc(&ud, NULL, 0, 3901) == NULL);
	CHECK(atomic_load(&b.stop) == MB_STOP_MEMORY);
	char *x = mb_arena_lua_alloc(&ud, NULL, 0, 16); /* the stop is sticky, the cap is not */
	CHECK(x != NULL);
	CHECK(b.mem_used == 6116);
	CHECK(mb_arena_lua_alloc(&ud, q, 100, 4000) == NULL);
	CHECK(mb_arena_lua_alloc(&ud, p, 6000, 9885) == NULL); /* 6116 + 3885 > 10000 */
	CHECK(mb_arena_lua_alloc(&ud, q, 100, 3985) == NULL);
	CHECK(mb_arena_lua_alloc(&ud, NULL, 0, SIZE_MAX) == NULL);
	CHECK(b.mem_used == 6116);
	q = mb_arena_lua_alloc(&ud, q, 100, 3984); /* exactly up to the cap: allowed, and back */
	CHECK(q != NULL && b.mem_used == 10000);
	q = mb_arena_lua_alloc(&ud, q, 3984, 100);
	CHECK(q != NULL && b.mem_used == 6116);
	int intact = 1;
	for (int i = 0; i < 6000; i++)
		intact &= p[i] == 'a';
	for (int i = 0; i < 100; i++)
		intact &= q[i] == 'q';
	CHECK(intact);
	CHECK(b.mem_peak == 10000);
	/* shrinks never fail, also after the trip: large->small, small->smaller class, same class */
	p = mb_arena_lua_alloc(&ud, p, 6000, 300);
	CHECK(p != NULL);
	q = mb_arena_lua_alloc(&ud, q, 100, 20);
	CHECK(q != NULL);
	CHECK(b.mem_used == 16 + 300 + 20);
	intact = 1;
	for (int i = 0; i < 300; i++)
		intact &= p[i] == 'a';
	for (int i = 0; i < 20; i++)
		intact &= q[i] == 'q';
	CHECK(intact);
	q = mb_arena_lua_alloc(&ud, q, 20, 17);
	CHECK(q != NULL && q[16] == 'q');
	CHECK(b.mem_used == 16 + 300 + 17);
	CHECK(atomic_load(&b.stop) == MB_STOP_MEMORY);
	CHECK(stats_of(a).live_blocks == 3);
	mb_arena_lua_alloc(&ud, p, 300, 0);
	mb_arena_lua_alloc(&ud, q, 17, 0);
	CHECK(b.mem_used == 16);
	CHECK(mb_arena_delete(a) == -1); /* a block is still live */
	mb_arena_trim(a);
	CHECK(stats_of(a).resets == 0);
	mb_arena_lua_alloc(&ud, x, 16, 0);
	CHECK(b.mem_used == 0);
	CHECK(mb_arena_delete(a) == 0);
}

TEST(test_same_class_realloc_keeps_pointer)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_budget b;
	mb_budget_init(&b, 0, 0, 0);
	mb_arena_ud ud = { a, &b };
	if (stats_of(a).debug) {
		mb_arena_delete(a);
		return;
	}
	char *p = mb_arena_lua_alloc(&ud, NULL, 0, 33);
	CHECK(mb_arena_lua_alloc(&ud, p, 33, 48) == p);  /* class 48 */
	CHECK(mb_arena_lua_alloc(&ud, p, 48, 40) == p);
	char *q = mb_arena_lua_alloc(&ud, p, 40, 49);   /* class 64: moves */
	CHECK(q != p);
	/* p went back on the 48 list: the next 48-class request gets it */
	char *r = mb_arena_lua_alloc(&ud, NULL, 0, 45);
	CHECK(r == p);
	/* 257..320 share a class, 4096 is small, 4097 is not */
	char *s = mb_arena_lua_alloc(&ud, NULL, 0, 257);
	CHECK(mb_arena_lua_alloc(&ud, s, 257, 320) == s);
	CHECK(mb_arena_lua_alloc(&ud, s, 320, 321) != s);
	size_t used = stats_of(a).region_used;
	char *t = mb_arena_lua_alloc(&ud, NULL, 0, 4096);
	CHECK(stats_of(a).region_used == used + 4096);
	char *u = mb_arena_lua_alloc(&ud, NULL, 0, 4097);
	CHECK(stats_of(a).region_used == used + 4096);
	mb_arena_lua_alloc(&ud, u, 4097, 0);
	mb_arena_lua_alloc(&ud, t, 4096, 0);
	mb_arena_lua_alloc(&ud, s, 321, 0);
	mb_arena_lua_alloc(&ud, r, 45, 0);
	mb_arena_lua_alloc(&ud, q, 49, 0);
	CHECK(b.mem_used == 0);
	CHECK(stats_of(a).live_blocks == 0);
	CHECK(mb_arena_delete(a) == 0);
}

/* Lua states on the arena. */
static const char gc_script[] =
	"local keep = {}\n"
	"for round = 1, 30 do\n"
	"  local t = {}\n"
	"  for i = 1, 2000 do t[i] = {i, tostring(i) .. 'x', function() return i end} end\n"
	"  for i = 1, 2000, 3 do t[i] = nil end\n"
	"  local s = {}\n"
	"  for i = 1, 300 do s[#s + 1] = string.rep('ab', i % 50) end\n"
	"  keep[round % 5] = table.concat(s)\n"
	"  local h = {}\n"
	"  for i = 1, 500 do h['k' .. i] = i end\n"
	"  for i = 1, 500 do h['k' .. i] = nil end\n"
	"  local co = coroutine.wrap(function(a) for i = 1, 50 do a = coroutine.yield(a .. i) end end)\n"
	"  for i = 1, 50 do co('c') end\n"
	"  collectgarbage(round % 2 == 0 and 'collect' or 'step')\n"
	"end\n"
	"local big = string.rep('z', 100000)\n"
	"return #keep[1] + #big\n";

static lua_State *arena_state(mb_arena_ud *ud, mb_budget *b)
{
	lua_State *L = lua_newstate(mb_arena_lua_alloc, ud);
	if (!L)
		return NULL;
	*(mb_budget **)lua_getextraspace(L) = b;
	luaL_openlibs(L);
	return L;
}

TEST(test_lua_state_gc_heavy)
{
	mb_arena *a = mb_arena_thread();
	mb_budget b;
	mb_budget_init(&b, (size_t)64 << 20, 0, 0);
	mb_arena_ud ud = { a, &b };
	size_t resets = stats_of(a).resets;
	for (int run = 0; run < 3; run++) {
		lua_State *L = arena_state(&ud, &b);
		CHECK(L != NULL);
		if (!L)
			return;
		int rc = luaL_dostring(L, gc_script);
		CHECK(rc == LUA_OK);
		if (rc == LUA_OK)
			CHECK(lua_tointeger(L, -1) == 100000 + 14700);
		else
			fprintf(stderr, "  lua: %s\n", lua_tostring(L, -1));
		CHECK(b.mem_used > 100000);
		lua_close(L);
		CHECK(b.mem_used == 0);
		CHECK(b.mem_peak > 200000 && b.mem_peak < ((size_t)64 << 20));
		CHECK(stats_of(a).live_blocks == 0);
		mb_arena_trim(a);
		CHECK(stats_of(a).region_used == 0);
		CHECK(stats_of(a).resets == resets + (size_t)run + 1);
	}
	CHECK(atomic_load(&b.stop) == MB_STOP_NONE);
}

TEST(test_lua_state_hits_cap)
{
	mb_arena *a = mb_arena_thread();
	mb_budget b;
	mb_budget_init(&b, (size_t)2 << 20, 0, 0);
	mb_arena_ud ud = { a, &b };
	lua_State *L = arena_state(&ud, &b);
	CHECK(L != NULL);
	if (!L)
		return;
	int rc = luaL_loadstring(L, "local t = {} for i = 1, 1e7 do t[i] = 'v' .. i end");
	CHECK(rc == LUA_OK);
	rc = lua_pcall(L, 0, 0, 0);
	CHECK(rc == LUA_ERRMEM);
	CHECK_STR(lua_tostring(L, -1), "not enough memory");
	CHECK(atomic_load(&b.stop) == MB_STOP_MEMORY);
	CHECK(b.mem_peak <= (size_t)2 << 20);
	CHECK(b.mem_peak > (size_t)1 << 20);
	lua_close(L);
	CHECK(b.mem_used == 0);
	CHECK(stats_of(a).live_blocks == 0);
	mb_arena_trim(a);
	CHECK(stats_of(a).region_used == 0);
}

TEST(test_trim_releases_pages)
{
	size_t keep = 65536;
	mb_arena *a = mb_arena_new((size_t)16 << 20, keep);
	mb_budget b;
	mb_budget_init(&b, 0, 0, 0);
	mb_arena_ud ud = { a, &b };
	if (stats_of(a).debug) {
		mb_arena_delete(a);
		return;
	}
	/* The first block after a reset sits at the region's start. */
	enum { N = 8192, SZ = 256 }; /* 2 MiB */
	static void *blk[N];
	for (int i = 0; i < N; i++) {
		blk[i] = mb_arena_lua_alloc(&ud, NULL, 0, SZ);
		memset(blk[i], 1, SZ);
	}
	char *base = blk[0];
	CHECK((char *)blk[N - 1] == base + (size_t)(N - 1) * SZ);
	CHECK(stats_of(a).region_used == (size_t)N * SZ);
	mb_arena_trim(a); /* live blocks: must do nothing */
	CHECK(stats_of(a).resets == 0);
	CHECK(stats_of(a).region_used == (size_t)N * SZ);
	for (int i = 0; i < N; i++)
		mb_arena_lua_alloc(&ud, blk[i], SZ, 0);
	mb_arena_trim(a);
	CHECK(stats_of(a).resets == 1);
	CHECK(stats_of(a).region_used == 0);
	long ps = sysconf(_SC_PAGESIZE);
	size_t span = (size_t)N * SZ - keep;
	size_t npages = span / (size_t)ps;
	unsigned char *vec = calloc(npages, 1);
	int resident = 0;
	if (vec && mincore(base + keep, span, vec) == 0)
		for (size_t i = 0; i < npages; i++)
			resident += vec[i] & 1;
	else
		resident = -1;
	CHECK(resident == 0);
	free(vec);
	/* the kept part is still resident and is reused first */
	unsigned char v1 = 0;
	CHECK(mincore(base, (size_t)ps, &v1) == 0 && (v1 & 1));
	void *p = mb_arena_lua_alloc(&ud, NULL, 0, 100);
	CHECK(p == base);
	mb_arena_lua_alloc(&ud, p, 100, 0);
	CHECK(mb_arena_delete(a) == 0);
}

/* Returns the signal that ended a child running fn, else its exit status. */
static int in_child(void (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		fclose(stderr); /* the abort message is expected */
		fn();
		_exit(0);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st);
}

static void free_with_wrong_size(void)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_arena_ud ud = { a, NULL };
	void *p = mb_arena_lua_alloc(&ud, NULL, 0, 64);
	mb_arena_lua_alloc(&ud, p, 100000, 0);
}

static void free_with_right_size(void)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_arena_ud ud = { a, NULL };
	void *p = mb_arena_lua_alloc(&ud, NULL, 0, 64);
	mb_arena_lua_alloc(&ud, p, 64, 0);
	mb_arena_delete(a);
}

TEST(test_wrong_osize_aborts)
{
	CHECK(in_child(free_with_right_size) == 0);
	CHECK(in_child(free_with_wrong_size) == SIGABRT);
}

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#ifdef TEST_ASAN
static volatile char sink;

static void use_after_free(void)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_arena_ud ud = { a, NULL };
	char *p = mb_arena_lua_alloc(&ud, NULL, 0, 64);
	mb_arena_lua_alloc(&ud, p, 64, 0);
	sink = p[8];
}

static void overflow_into_slack(void)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_arena_ud ud = { a, NULL };
	char *p = mb_arena_lua_alloc(&ud, NULL, 0, 20); /* class 32 */
	sink = p[24];
}

static void in_bounds(void)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_arena_ud ud = { a, NULL };
	char *p = mb_arena_lua_alloc(&ud, NULL, 0, 20);
	p[19] = 1;
	sink = p[19];
	char *q = mb_arena_lua_alloc(&ud, p, 20, 30); /* same class: the tail opens up */
	q[29] = 1;
	mb_arena_lua_alloc(&ud, q, 30, 0);
	q = mb_arena_lua_alloc(&ud, NULL, 0, 32); /* reused from the free list */
	q[31] = 1;
}

/* Under ASan (either mode) the arena's blocks are checked like malloc's. */
TEST(test_asan_sees_misuse)
{
	CHECK(in_child(in_bounds) == 0);
	CHECK(in_child(use_after_free) != 0);
	CHECK(in_child(overflow_into_slack) != 0);
}
#endif

static void *thread_main(void *arg)
{
	mb_arena **out = arg;
	out[0] = mb_arena_thread();
	out[1] = mb_arena_thread();
	mb_budget b;
	mb_budget_init(&b, (size_t)16 << 20, 0, 0);
	mb_arena_ud ud = { out[0], &b };
	lua_State *L = arena_state(&ud, &b);
	if (L) {
		if (luaL_dostring(L, "local t = {} for i = 1, 10000 do t[i] = {i} end return #t") ==
		    LUA_OK && lua_tointeger(L, -1) == 10000)
			out[2] = out[0];
		lua_close(L);
	}
	mb_arena_trim(out[0]);
	out[3] = b.mem_used == 0 && mb_arena_free_thread() == 0 ? out[0] : NULL;
	return NULL;
}

TEST(test_thread_arenas)
{
	mb_arena *mine = mb_arena_thread();
	CHECK(mine != NULL && mine == mb_arena_thread());
	mb_arena *got[2][4] = { { 0 }, { 0 } };
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, thread_main, got[i]) == 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++) {
		CHECK(got[i][0] != NULL && got[i][0] == got[i][1]);
		CHECK(got[i][0] != mine);
		CHECK(got[i][2] == got[i][0]); /* the script ran */
		CHECK(got[i][3] == got[i][0]); /* freed at thread exit */
	}
	CHECK(got[0][0] != got[1][0] || got[0][3] != NULL); /* distinct while both lived */
	/* freeing this thread's arena: a new one is made on next use */
	CHECK(mb_arena_free_thread() == 0);
	CHECK(mb_arena_free_thread() == 0);
	mb_arena *again = mb_arena_thread();
	CHECK(again != NULL);
	mb_budget b;
	mb_budget_init(&b, 0, 0, 0);
	mb_arena_ud ud = { again, &b };
	void *p = mb_arena_lua_alloc(&ud, NULL, 0, 10);
	CHECK(mb_arena_free_thread() == -1); /* live block */
	CHECK(mb_arena_thread() == again);
	mb_arena_lua_alloc(&ud, p, 10, 0);
	CHECK(mb_arena_free_thread() == 0);
}

TEST(test_null_budget)
{
	mb_arena *a = mb_arena_new((size_t)1 << 20, 0);
	mb_arena_ud ud = { a, NULL };
	char *p = mb_arena_lua_alloc(&ud, NULL, 0, 100);
	CHECK(p != NULL);
	memset(p, 7, 100);
	p = mb_arena_lua_alloc(&ud, p, 100, 10000);
	CHECK(p != NULL && p[99] == 7);
	p = mb_arena_lua_alloc(&ud, p, 10000, 50);
	CHECK(p != NULL && p[49] == 7);
	CHECK(mb_arena_lua_alloc(&ud, NULL, 0, 0) == NULL);
	CHECK(mb_arena_lua_alloc(&ud, p, 50, 0) == NULL);
	CHECK(stats_of(a).live_blocks == 0);
	CHECK(mb_arena_delete(a) == 0);
	CHECK(mb_arena_delete(NULL) == 0);
}

int main(void)
{
	RUN(test_random_unlimited);
	RUN(test_random_small_region_falls_back);
	RUN(test_random_with_cap);
	RUN(test_no_region);
	RUN(test_cap_refusal_trips);
	RUN(test_same_class_realloc_keeps_pointer);
	RUN(test_lua_state_gc_heavy);
	RUN(test_lua_state_hits_cap);
	RUN(test_trim_releases_pages);
	RUN(test_wrong_osize_aborts);
#ifdef TEST_ASAN
	RUN(test_asan_sees_misuse);
#endif
	RUN(test_thread_arenas);
	RUN(test_null_budget);
	CHECK(mb_arena_free_thread() == 0);
	return UNIT_END();
}
