/* arena.c - per-thread size-class allocator behind the sandbox's lua_Alloc.
 *
 * Why: each execution creates, runs and closes a fresh lua_State, which costs a few hundred
 * malloc/free pairs, and glibc spends most of its time on them consolidating and splitting
 * chunks. Lua always tells the allocator the size of the block it frees or resizes (osize), so an
 * allocator for Lua needs no per-block header: the size class follows from osize.
 *
 * How: each arena reserves one region of address space (mmap, MAP_NORESERVE: pages become
 * resident only when touched). Requests up to MB_ARENA_MAX_SMALL bytes are rounded up to one of
 * NCLASS size classes (16-byte steps to 256, then four classes per power of two up to 4096) and
 * served from that class's free list, else carved off the region with a bump pointer. A freed
 * small block is pushed on its class's free list (the link is stored in the block itself).
 * Whether a block is small is decided by its address (inside the region or not), never by its
 * size, so a small request that could not be served from a full region simply goes to malloc and
 * is later freed with free(). Larger requests go to malloc/realloc/free.
 *
 * After lua_close, no block is live; mb_arena_trim then resets the arena: free lists
 * emptied, bump pointer back at the start of the region, and the pages beyond the keep bound
 * released with madvise(MADV_DONTNEED). A steady stream of small executions therefore reuses
 * the same few warm pages with no system call and no malloc. Memory kept by per-class free lists
 * during one execution (blocks freed in one class are not reused by another) is bounded by the
 * region size, and gone at the next reset.
 *
 * Accounting: the budget is charged the requested size (what the plain malloc allocator
 * charged), before any growth; growth beyond the cap is refused and trips MB_STOP_MEMORY; a
 * shrink never fails (a block that cannot move to a smaller class stays where it is and is later
 * filed under the smaller class, which wastes a few bytes but is safe). mb_budget_charge()/mb_budget_credit() below
 * are the inline twins of mb_budget_charge/mb_budget_credit and must keep their semantics.
 *
 * Debug mode (-DMB_ARENA_DEBUG, the default under AddressSanitizer): every block comes from
 * malloc with a 16-byte header holding its size, and the osize Lua passes back is checked
 * against it, so ASan checks callers block by block. In the normal build under ASan
 * (-DMB_ARENA_DEBUG=0), free blocks and class slack are poisoned, so use-after-free and overruns
 * into slack are still reported.
 */
#include "arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MB_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MB_ARENA_ASAN 1
#endif
#endif

#ifndef MB_ARENA_DEBUG
#ifdef MB_ARENA_ASAN
#define MB_ARENA_DEBUG 1
#else
#define MB_ARENA_DEBUG 0
#endif
#endif

#ifdef MB_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

#define NCLASS 32
#define REGION_DEFAULT ((size_t)64 << 20) /* address space per worker thread */
#define KEEP_DEFAULT ((size_t)4 << 20)    /* resident bytes kept across executions */

struct mb_arena {
	char *bump;                       /* next uncarved byte of the region */
	char *end;                        /* end of the region */
	char *base;                       /* start of the region (NULL: none) */
	size_t region_size;
	size_t keep;
	size_t live;                      /* blocks handed out (small or large), not freed */
	size_t fallbacks;
	size_t resets;
	void *retry_ptr;                  /* the last refused request, while retry_armed */
	size_t retry_osize, retry_nsize;
	int retry_armed;
	void *free_list[NCLASS];
	uint32_t class_size[NCLASS];
	uint8_t class_of[MB_ARENA_MAX_SMALL / 16]; /* [(n - 1) >> 4] -> class of n bytes */
};

_Static_assert(MB_ARENA_MAX_SMALL == 4096, "class layout assumes 4096");

static _Thread_local mb_arena *thread_arena;
static _Thread_local mb_arena thread_fallback; /* used when the arena itself cannot be allocated */

/* ---- arena lifetime --------------------------------------------------------------------- */

static size_t page_round(size_t n)
{
	long ps = sysconf(_SC_PAGESIZE);
	size_t p = ps > 0 ? (size_t)ps : 4096;
	if (n > SIZE_MAX - p)
		return SIZE_MAX / p * p;
	return (n + p - 1) / p * p;
}

/* Class sizes: 16..256 in 16-byte steps (classes 0-15), then four per power of two:
 * 320 384 448 512, 640 .. 1024, 1280 .. 2048, 2560 .. 4096 (classes 16-31). */
static void init_classes(mb_arena *a)
{
	for (unsigned c = 0; c < NCLASS; c++) {
		if (c < 16) {
			a->class_size[c] = 16u * (c + 1);
		} else {
			unsigned k = (c - 16) / 4, j = (c - 16) % 4;
			a->class_size[c] = (256u << k) + (j + 1) * (64u << k);
		}
	}
	unsigned c = 0;
	for (unsigned i = 0; i < MB_ARENA_MAX_SMALL / 16; i++) {
		size_t n = (size_t)i * 16 + 16; /* largest size mapping to slot i */
		while (a->class_size[c] < n)
			c++;
		a->class_of[i] = (uint8_t)c;
	}
}

mb_arena *mb_arena_new(size_t region_bytes, size_t keep_bytes)
{
	mb_arena *a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	init_classes(a);
	a->keep = page_round(keep_bytes);
	if (!MB_ARENA_DEBUG && region_bytes) {
		size_t size = page_round(region_bytes);
		void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p != MAP_FAILED) { /* else: no region, every block goes to malloc */
			a->base = p;
			a->region_size = size;
		}
	}
	a->bump = a->base;
	a->end = a->base ? a->base + a->region_size : NULL;
	return a;
}

int mb_arena_delete(mb_arena *a)
{
	if (!a)
		return 0;
	if (a->live)
		return -1;
	if (a->base) {
		UNPOISON(a->base, a->region_size);
		munmap(a->base, a->region_size);
	}
	free(a);
	return 0;
}

/* Must never fail: without memory for an arena, a region-less one in thread-local storage
 * sends every block to malloc. */
mb_arena *mb_arena_thread(void)
{
	mb_arena *a = thread_arena;
	if (LIKELY(a != NULL))
		return a;
	a = mb_arena_new(REGION_DEFAULT, KEEP_DEFAULT);
	if (!a) {
		a = &thread_fallback;
		memset(a, 0, sizeof *a);
		init_classes(a);
	}
	thread_arena = a;
	return a;
}

int mb_arena_free_thread(void)
{
	mb_arena *a = thread_arena;
	if (!a)
		return 0;
	if (a->live)
		return -1;
	thread_arena = NULL;
	return a == &thread_fallback ? 0 : mb_arena_delete(a);
}

void mb_arena_get_stats(const mb_arena *a, mb_arena_stats *st)
{
	st->live_blocks = a->live;
	st->region_used = a->base ? (size_t)(a->bump - a->base) : 0;
	st->region_size = a->region_size;
	st->fallbacks = a->fallbacks;
	st->resets = a->resets;
	st->debug = MB_ARENA_DEBUG;
}

void mb_arena_trim(mb_arena *a)
{
	if (a->live)
		return;
	for (unsigned c = 0; c < NCLASS; c++)
		a->free_list[c] = NULL;
	a->retry_armed = 0;
	if (a->base) {
		size_t used = (size_t)(a->bump - a->base);
		POISON(a->base, used);
		if (used > a->keep)
			madvise(a->base + a->keep, used - a->keep, MADV_DONTNEED);
		a->bump = a->base;
	}
	a->resets++;
}

/* ---- blocks ----------------------------------------------------------------------------- */

#if !MB_ARENA_DEBUG

static inline int in_region(const mb_arena *a, const void *p)
{
	return (uintptr_t)p - (uintptr_t)a->base < a->region_size;
}

static inline unsigned class_of(const mb_arena *a, size_t n)
{
	return a->class_of[(n - 1) >> 4];
}

/* A small block of class c, or NULL when its free list is empty and the region is full. */
static inline void *small_get(mb_arena *a, unsigned c, size_t n)
{
	void *p = a->free_list[c];
	size_t sz = a->class_size[c];
	if (LIKELY(p != NULL)) {
		UNPOISON(p, sizeof(void *));
		a->free_list[c] = *(void **)p;
	} else if (LIKELY((size_t)(a->end - a->bump) >= sz)) {
		p = a->bump;
		a->bump += sz;
	} else {
		return NULL;
	}
	UNPOISON(p, n);
	POISON((char *)p + n, sz - n);
	a->live++;
	return p;
}

static inline void small_put(mb_arena *a, void *p, unsigned c)
{
	UNPOISON(p, sizeof(void *));
	*(void **)p = a->free_list[c];
	a->free_list[c] = p;
	POISON(p, a->class_size[c]);
	a->live--;
}

static void bad_osize(size_t osize)
{
	fprintf(stderr, "moonbox arena: freed block has impossible size %zu\n", osize);
	abort();
}

static inline void *block_new(mb_arena *a, size_t n)
{
	if (LIKELY(n <= MB_ARENA_MAX_SMALL)) {
		void *p = small_get(a, class_of(a, n), n);
		if (LIKELY(p != NULL))
			return p;
		a->fallbacks++;
	}
	void *p = malloc(n);
	if (p)
		a->live++;
	return p;
}

static inline void block_free(mb_arena *a, void *p, size_t osize)
{
	if (LIKELY(in_region(a, p))) {
		if (UNLIKELY(osize - 1 >= MB_ARENA_MAX_SMALL))
			bad_osize(osize);
		small_put(a, p, class_of(a, osize));
	} else {
		a->live--;
		free(p);
	}
}

/* Resize a live block; NULL when it cannot grow (the block is then untouched). A shrink returns
 * non-NULL. */
static void *block_resize(mb_arena *a, void *p, size_t osize, size_t nsize)
{
	if (!in_region(a, p)) {
		void *q = realloc(p, nsize);
		return q ? q : nsize <= osize ? p : NULL;
	}
	if (UNLIKELY(osize - 1 >= MB_ARENA_MAX_SMALL))
		bad_osize(osize);
	unsigned co = class_of(a, osize);
	if (nsize <= MB_ARENA_MAX_SMALL && class_of(a, nsize) == co) {
		UNPOISON(p, nsize);
		POISON((char *)p + nsize, a->class_size[co] - nsize);
		return p;
	}
	void *q = block_new(a, nsize);
	if (!q) {
		if (nsize > osize)
			return NULL;
		/* Shrink that could not move: the block stays, filed later under nsize's class. */
		UNPOISON(p, nsize);
		POISON((char *)p + nsize, a->class_size[co] - nsize);
		return p;
	}
	memcpy(q, p, nsize < osize ? nsize : osize);
	small_put(a, p, co);
	return q;
}

#else /* MB_ARENA_DEBUG: every block from malloc, with a checked header */

typedef struct {
	size_t size;
	size_t magic;
} dbg_header;

#define DBG_MAGIC ((size_t)0x6d626172656e6121ull)

static dbg_header *dbg_check(void *p, size_t osize)
{
	dbg_header *h = (dbg_header *)p - 1;
	if (h->magic != DBG_MAGIC || h->size != osize) {
		fprintf(stderr, "moonbox arena: block %p freed with osize %zu, allocated with %zu%s\n",
			p, osize, h->size, h->magic != DBG_MAGIC ? " (bad magic)" : "");
		abort();
	}
	return h;
}

static inline void *block_new(mb_arena *a, size_t n)
{
	if (n > SIZE_MAX - sizeof(dbg_header))
		return NULL;
	dbg_header *h = malloc(sizeof *h + n);
	if (!h)
		return NULL;
	h->size = n;
	h->magic = DBG_MAGIC;
	a->live++;
	return h + 1;
}

static inline void block_free(mb_arena *a, void *p, size_t osize)
{
	dbg_header *h = dbg_check(p, osize);
	h->magic = 0;
	a->live--;
	free(h);
}

static void *block_resize(mb_arena *a, void *p, size_t osize, size_t nsize)
{
	(void)a;
	dbg_header *h = dbg_check(p, osize);
	if (nsize > SIZE_MAX - sizeof(dbg_header))
		return NULL;
	dbg_header *q = realloc(h, sizeof *h + nsize);
	if (!q) {
		if (nsize > osize)
			return NULL;
		h->size = nsize; /* a shrink never fails: the block stays, now known as nsize */
		return p;
	}
	q->size = nsize;
	return q + 1;
}

#endif

/* ---- lua_Alloc -------------------------------------------------------------------------- */

/* A refused request is remembered until the next growth: Lua answers a refusal with an emergency
 * collection and then asks again, and that second request is refused too. Lua before 5.4.8
 * could otherwise resume an operation on an object the emergency collection had just freed: a
 * table whose weak metatable held its __newindex table, filled by t[i] = v, crashed the server
 * at any memory cap (upstream 983bc433, fixed there by anchoring that one table; refusing the
 * retry closes the whole class). A refusal has tripped the memory limit, so the execution is
 * over anyway; frees in between (the collection) leave it armed. */
static void *refuse(mb_arena *a, void *ptr, size_t osize, size_t nsize)
{
	a->retry_ptr = ptr;
	a->retry_osize = osize;
	a->retry_nsize = nsize;
	a->retry_armed = 1;
	return NULL;
}

/* Every case, including the rare ones (large blocks, resizes, refusals, a full region). */
static __attribute__((noinline)) void *alloc_any(mb_arena *a, mb_budget *b, void *ptr,
						 size_t osize, size_t nsize)
{
	if (a->retry_armed && nsize > (ptr ? osize : 0)) {
		int again = ptr == a->retry_ptr && osize == a->retry_osize && nsize == a->retry_nsize;
		a->retry_armed = 0;
		if (again)
			return NULL;
	}
	if (ptr == NULL) {
		if (nsize == 0)
			return NULL;
		if (mb_budget_charge(b, nsize) != 0)
			return refuse(a, ptr, osize, nsize);
		void *p = block_new(a, nsize);
		if (p == NULL) {
			mb_budget_credit(b, nsize);
			if (b)
				mb_budget_trip(b, MB_STOP_MEMORY);
			return refuse(a, ptr, osize, nsize);
		}
		return p;
	}
	if (nsize == 0) {
		block_free(a, ptr, osize);
		mb_budget_credit(b, osize);
		return NULL;
	}
	if (nsize > osize && mb_budget_charge(b, nsize - osize) != 0)
		return refuse(a, ptr, osize, nsize);
	void *p = block_resize(a, ptr, osize, nsize);
	if (p == NULL) {
		mb_budget_credit(b, nsize - osize);
		if (b)
			mb_budget_trip(b, MB_STOP_MEMORY);
		return refuse(a, ptr, osize, nsize);
	}
	if (nsize < osize)
		mb_budget_credit(b, osize - nsize);
	return p;
}

/* The two common cases (a new small block within budget, freeing a small block) are handled
 * here without a call or a saved register; the rest goes to alloc_any. */
void *mb_arena_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	mb_arena_ud *u = ud;
	mb_arena *a = u->a;
	mb_budget *b = u->b;
#if !MB_ARENA_DEBUG
	if (ptr == NULL && LIKELY(!a->retry_armed)) {
		if (LIKELY(nsize - 1 < MB_ARENA_MAX_SMALL && b != NULL)) {
			size_t lim = b->mem_limit, used = b->mem_used;
			if (LIKELY(!lim || (nsize <= lim && used <= lim - nsize))) {
				unsigned c = class_of(a, nsize);
				void *p = a->free_list[c];
				if (p != NULL) {
					UNPOISON(p, sizeof(void *));
					a->free_list[c] = *(void **)p;
				} else if (LIKELY((size_t)(a->end - a->bump) >= a->class_size[c])) {
					p = a->bump;
					a->bump += a->class_size[c];
				} else {
					goto slow;
				}
				UNPOISON(p, nsize);
				POISON((char *)p + nsize, a->class_size[c] - nsize);
				a->live++;
				used += nsize;
				b->mem_used = used;
				if (used > b->mem_peak)
					b->mem_peak = used;
				return p;
			}
		}
	} else if (nsize == 0) {
		if (LIKELY(in_region(a, ptr) && osize - 1 < MB_ARENA_MAX_SMALL && b != NULL)) {
			small_put(a, ptr, class_of(a, osize));
			b->mem_used = osize > b->mem_used ? 0 : b->mem_used - osize;
			return NULL;
		}
	}
slow:
#endif
	return alloc_any(a, b, ptr, osize, nsize);
}
