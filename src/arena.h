/* arena.h - a fast lua_Alloc for sandbox states: per-thread size-class arena with exact budget
 * accounting.
 *
 * Every execution makes and closes a fresh lua_State; with malloc that is a few hundred
 * malloc/free pairs per run. The arena serves blocks of up to MB_ARENA_MAX_SMALL bytes from a
 * per-thread region reserved once (bump allocation plus one free list per size class) and sends
 * larger blocks to malloc. After lua_close every small block is free again, and mb_arena_trim
 * resets the region to empty and returns its pages beyond a bound to the kernel.
 *
 * Accounting: the budget is charged the size Lua asks for (not the class size), exactly as the
 * plain malloc allocator did, so limits and memory_peak_bytes mean the same thing either way.
 *
 * Thread rules: an arena is used only by the thread that made it; a state using it must be made,
 * run and closed on that thread.
 *
 * Build with -DMB_ARENA_DEBUG (the default under AddressSanitizer) to route every block to malloc
 * with a header that checks the osize Lua passes back, so ASan sees each block on its own.
 */
#ifndef MB_ARENA_H
#define MB_ARENA_H

#include <stddef.h>

#include "budget.h"

/* Largest block served from the arena; larger ones go to malloc. */
#define MB_ARENA_MAX_SMALL 4096

typedef struct mb_arena mb_arena;

/* What mb_arena_lua_alloc's ud points to. Must outlive the lua_State. b may be NULL
 * (unaccounted). */
typedef struct mb_arena_ud {
	mb_arena *a;
	mb_budget *b;
} mb_arena_ud;

/* Counters, for tests and diagnostics. */
typedef struct mb_arena_stats {
	size_t live_blocks;   /* blocks handed out and not yet freed (small and large) */
	size_t region_used;   /* bytes of the region carved since the last reset */
	size_t region_size;   /* bytes reserved (0 when the reservation failed or in debug mode) */
	size_t fallbacks;     /* small requests sent to malloc because the region was full */
	size_t resets;        /* times mb_arena_trim found the arena empty and reset it */
	int debug;            /* 1 when built with MB_ARENA_DEBUG (every block from malloc) */
} mb_arena_stats;

/// The calling thread's arena, created on first use. Never NULL: if the address space cannot be
/// reserved, the arena sends every block to malloc.
/// @returns the arena of the calling thread
mb_arena *mb_arena_thread(void);

/// Frees the calling thread's arena (call at thread exit, after every state using it is closed).
/// Does nothing if the thread has none.
/// @returns 0, or -1 if blocks are still live (the arena is then kept, not freed)
int mb_arena_free_thread(void);

/// Makes a standalone arena (tests, or a caller that manages its own).
/// @param region_bytes address space to reserve for small blocks (rounded up to pages; 0 = all
///        blocks go to malloc)
/// @param keep_bytes resident bytes mb_arena_trim keeps after a reset (rounded up to pages)
/// @returns the arena, or NULL when out of memory
mb_arena *mb_arena_new(size_t region_bytes, size_t keep_bytes);

/// Frees an arena made by mb_arena_new.
/// @param a the arena (NULL is allowed)
/// @returns 0, or -1 if blocks are still live (the arena is then not freed)
int mb_arena_delete(mb_arena *a);

/// The lua_Alloc for sandbox states. Charges ud->b the requested bytes before any growth and
/// refuses growth beyond its cap (returning NULL and tripping MB_STOP_MEMORY); a shrink never
/// fails; osize is ignored when ptr is NULL.
/// @param ud a mb_arena_ud that outlives the state
/// @param ptr the block, or NULL
/// @param osize the block's size when ptr is not NULL
/// @param nsize the wanted size; 0 frees
/// @returns the block, or NULL (freed, or refused)
void *mb_arena_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/// Call after lua_close: if no block is live, empties the arena and gives the region's
/// pages beyond the keep bound back to the kernel. Otherwise does nothing.
/// @param a the arena
void mb_arena_trim(mb_arena *a);

/// Fills st with the arena's counters.
/// @param a the arena
/// @param st where to write them
void mb_arena_get_stats(const mb_arena *a, mb_arena_stats *st);

#endif
