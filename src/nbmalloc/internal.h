/*
 * internal.h - nbmalloc's types, geometry and the inline fast paths.
 *
 * Address space. Every arena owns a 1 GiB slot aligned to 1 GiB and is
 * managed by one nbbs instance (4 KiB min_block, max block 64 MiB or the
 * arena's size); every huge mapping starts on a 1 GiB boundary too. So the
 * owner of any pointer is nbm__map[p >> 30]: one load, never a scan. An
 * entry is an arena pointer with bit 0 set, a huge header (bits 0-1
 * clear), a freed huge mapping's tombstone (its pointer | 2), or 0 (not
 * ours): free's fast path tells an arena from all the others with one bit
 * test (the arena's tag folds into the offsets of its loads).
 *
 * An arena's 1 GiB slot is reserved only up to the arena's size (4 MiB for
 * the first, doubling up to 1 GiB): the rest of the slot is address space
 * nobody pays for, and any pointer there is reported as invalid.
 *
 * Inside an arena, each 64 KiB unit has a word: class + 1 in bits 6-11 when the
 * unit belongs to a chunk (a back-end block carved into objects of one size
 * class), 0 otherwise, and in bits 16-31 the number of objects carved so far
 * from the chunk's start (an address past them was never handed out). Each
 * 4 KiB page has an order byte: order + 1 when a medium block handed to the
 * user starts there, with bit 7 set while that block sits freed in a cache.
 * Both live in the arena's metadata mapping, never in user memory.
 *
 * Small objects. Each thread has a heap (nbm_tcache_t) owning pages: back-end
 * blocks of one class, whose records (nbm_page_t) sit in the arena metadata
 * at the page's first unit. Per class, the heap's bin holds the current
 * page's free lists (word 0 = next); the owner's frees to its other pages go
 * to their own lists, other threads' frees to the page's remote list (held
 * back by the freeing thread, then one CAS per chain), which the owner takes
 * whole with one exchange. A freed object also
 * carries a tag in word 1 (its address xor a per-process secret) that
 * exposes a double free; carving writes the same tag, so every object on any
 * free list carries it. Layers, each calling only downwards: API (alloc.c,
 * free.c, override*.c) -> heap (heap.c, bin.h, remote.c, spare.c) -> page (page.c) -> arena and medium
 * blocks (arena.c, medium.c, huge.c, desc.c) -> back-end and OS (nbbs, os.c).
 */
#ifndef NBM_INTERNAL_H
#define NBM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "atomic.h"
#include "nbbs.h"
#include "nbmalloc.h"

#define NBM_LIKELY(x)   __builtin_expect(!!(x), 1)
#define NBM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define NBM_HIDDEN      __attribute__((visibility("hidden")))
#define NBM_NOINLINE    __attribute__((noinline))
#define NBM_CACHE_LINE  64

/* Fetch p's line for writing. A prefetch never faults, so p may be any
 * value (free's argument before it is checked). x86-64's PREFETCHW is not
 * in the baseline ISA gcc targets, so __builtin_prefetch(p, 1) would emit a
 * read prefetch there: the instruction is written out (a no-op on CPUs
 * without it). */
#if defined(__x86_64__)
#define NBM_PREFETCH_W(p) __asm__ volatile("prefetchw %0" : : "m"(*(const char *)(p)))
#else
#define NBM_PREFETCH_W(p) __builtin_prefetch((p), 1, 3)
#endif

/* --- geometry -------------------------------------------------------------- */
#define NBM_ARENA_SHIFT 30                        /* 1 GiB slots (arenas up to 1 GiB) */
#define NBM_ARENA_SIZE  ((size_t)1 << NBM_ARENA_SHIFT)
#define NBM_MAP_BITS    (47 - NBM_ARENA_SHIFT)     /* x86-64 user space */
#define NBM_MAP_SIZE    ((size_t)1 << NBM_MAP_BITS)
#define NBM_PAGE_SHIFT  12                        /* back-end min_block */
#define NBM_PAGE        ((size_t)1 << NBM_PAGE_SHIFT)
#define NBM_MAX_ORDER   14                        /* 64 MiB max block */
#define NBM_UNIT_SHIFT  16                        /* 64 KiB class-map unit */
#define NBM_UNITS       (NBM_ARENA_SIZE >> NBM_UNIT_SHIFT)
#define NBM_PAGES       (NBM_ARENA_SIZE >> NBM_PAGE_SHIFT)
#define NBM_MAP_ARENA   ((uintptr_t)1) /* an arena: its pointer | 1 */
#define NBM_MAP_TOMB    ((uintptr_t)2) /* a freed huge mapping: its user pointer | 2 */

/* --- size classes ---------------------------------------------------------- */
/* Small: 16..128 step 16, then four classes per power of two up to 16 KiB
 * (NBM_NSMALL classes). Large: eight per power of two above 16 KiB up to
 * NBM_LARGE_MAX = 128 KiB (at most 12.5 % above the request), in pages of
 * up to 256 KiB (class.c). Above NBM_LARGE_MAX: medium blocks (medium.c). */
#define NBM_NSMALL     36
#define NBM_LARGE_MAX  ((size_t)1 << 17)
#define NBM_NCLASSES   (NBM_NSMALL + 8 * 3) /* 16 KiB .. 128 KiB: three doublings */
/* Sizes looked up in a table on the fast path: every small class (1025
 * bytes of table, indexed in 16-byte steps; every class boundary is a
 * multiple of 16). With the table stopping at 1 KiB, a slowly leaking
 * program of 16-4096 B requests took the generic path (two calls and the
 * class computed from the bit length) for 3/4 of its mallocs: 115
 * instructions per malloc against 35 (callgrind, `leak --threads 1`). */
#define NBM_FAST_MAX   NBM_SMALL_MAX

typedef struct nbm_class {   /* 32 bytes: indexed with a shift */
    uint32_t size;       /* object size */
    uint32_t chunk;      /* bytes of the chunk objects are carved from (power of two) */
    uint32_t chunk_mask; /* chunk - 1 */
    uint32_t cap;        /* objects a page holds: chunk / size */
    uint32_t shift;      /* size = odd << shift */
    uint32_t inv;        /* inverse of odd mod 2^32: offset check with one multiply */
    uint32_t lim;        /* UINT32_MAX / odd */
    uint32_t batch;      /* objects carved at a time */
} nbm_class_t;

NBM_HIDDEN extern nbm_class_t nbm__classes[NBM_NCLASSES];
/* Per 16 bytes of request up to NBM_FAST_MAX: the byte offset of the class's
 * bin from its heap record, (class + 1) lines (bins sit one bin into the
 * record), so malloc's fast path adds it to the record with no shift. Zeros
 * until nbm__classes_init (the offset of nbm__bins_none's first line). */
NBM_HIDDEN extern uint16_t nbm__bin_of_small[NBM_FAST_MAX / 16 + 1];

/* Class of a size in (1024, NBM_SMALL_MAX] (fills the table). */
static inline unsigned nbm__class_of_large(size_t n)
{
    unsigned b = 63u - (unsigned)__builtin_clzll(n - 1); /* 2^b < n <= 2^(b+1) */
    return 8u + (b - 7u) * 4u + (unsigned)(((n - 1) >> (b - 2)) & 3u);
}
/* Class of a size in (NBM_SMALL_MAX, NBM_LARGE_MAX]: 2^b < n <= 2^(b+1),
 * eighths of 2^b. */
static inline unsigned nbm__class_of_big(size_t n)
{
    unsigned b = 63u - (unsigned)__builtin_clzll(n - 1);
    return NBM_NSMALL + (b - 14u) * 8u + (unsigned)(((n - 1) >> (b - 3)) & 7u);
}
/* Class of a size in [0, NBM_LARGE_MAX]. */
static inline unsigned nbm__class_of(size_t n)
{
    return n <= NBM_FAST_MAX ? nbm__bin_of_small[(n + 15) >> 4] / NBM_CACHE_LINE - 1u /* a bin is a line (below) */ : nbm__class_of_big(n);
}

/* --- descriptors and tagged stacks ---------------------------------------- */
/* A batch of free objects, or (decay) a cached free medium block. Type-stable:
 * descriptors are never unmapped, so a stale reader only reads "next". */
typedef struct nbm_desc {
    _Atomic uint32_t next;  /* stack link (index, 0 = none) */
    uint32_t count;         /* batch: objects in list; decay: order */
    void    *list;          /* batch: first object; decay: the block */
    char    *bump;          /* batch: uncarved range start; decay: unused */
    char    *bump_end;
} nbm_desc_t;

typedef struct nbm_stack {
    _Alignas(NBM_CACHE_LINE) _Atomic uint64_t top; /* version << 32 | index */
} nbm_stack_t;

/* A pool of type-stable records, grown on demand in chunks of 2^shift
 * records that are mapped when first needed and never unmapped. Index 0 is
 * never used ("none"). A record's first field is the _Atomic uint32_t link
 * that stacks thread through it. */
typedef struct nbm_pool {
    _Atomic uintptr_t *chunks;  /* [max >> shift] chunk addresses, 0 = not mapped */
    size_t   stride;            /* bytes per record */
    uint32_t shift;             /* log2 records per chunk */
    uint32_t max;               /* indices are < max */
    _Atomic uint32_t fresh;     /* next never-used index */
    _Atomic uint64_t mapped;    /* bytes mapped (statistics) */
} nbm_pool_t;

static inline char *nbm__pool_rec(nbm_pool_t *pl, uint32_t i)
{
    /* The chunk was published (seq_cst CAS) before index i was handed out,
     * and whoever holds i got it after that. */
    char *c = (char *)nbm_load_uptr(&pl->chunks[i >> pl->shift]);
    return c + (size_t)(i & ((1u << pl->shift) - 1)) * pl->stride;
}
/* Takes n fresh consecutive indices, mapping their chunks; 0 when a chunk
 * cannot be mapped or the pool is full (nothing is consumed then). */
NBM_HIDDEN uint32_t nbm__pool_fresh(nbm_pool_t *pl, uint32_t n);

NBM_HIDDEN void     nbm__stack_push(nbm_stack_t *s, nbm_pool_t *pl, uint32_t first, uint32_t last);
NBM_HIDDEN uint32_t nbm__stack_pop(nbm_stack_t *s, nbm_pool_t *pl);
NBM_HIDDEN uint32_t nbm__stack_pop_all(nbm_stack_t *s);

NBM_HIDDEN extern nbm_pool_t nbm__desc_pool;
static inline nbm_desc_t *nbm__desc(uint32_t i) { return (nbm_desc_t *)nbm__pool_rec(&nbm__desc_pool, i); }

/* --- pages ------------------------------------------------------------------ */
/* A page is a back-end block (64 or 128 KiB, aligned to its size) holding
 * objects of one class, owned by one heap. Its record lives in the arena's
 * metadata at the index of the page's first 64 KiB unit (nbm__page_at), so
 * any object pointer finds it in O(1) and no record is in user memory; records
 * are type-stable (arena metadata is never unmapped).
 *  - `remote`: frees by threads other than the owner, pushed with one CAS;
 *    the owner takes the whole list with one exchange (push + take-all: no
 *    ABA, a push links its object to whatever the head is at its CAS).
 *  - `free`/`used`: the owner's own frees (plain stores), while the page is
 *    not its heap's current page (the current page's list is the bin's
 *    head), and the count of carved objects not on `free`, which the
 *    owner's free counts down (empty at 0: no second count to compare).
 * Every other field is the owner's alone. */
typedef struct nbm_page {     /* one cache line: no false sharing between pages */
    _Alignas(NBM_CACHE_LINE) _Atomic uintptr_t remote; /* other threads' frees (objects linked by word 0) */
    _Atomic uintptr_t heap;       /* the owning heap (nbm_tcache_t *), 0 = not a page */
    void    *free;                /* owner's free list (not while current) */
    /* Bits 0-14: objects carved and not on `free` (in use, on remote lists,
     * or, current page, on the bin's list; 0 = empty: nbm__page_used).
     * NBM_PAGE_OFF: the page is not on the bin's avail list. One word so
     * that free's fast path finds both of its edges (the page empties, or
     * its first free off the avail list) with one decrement and one signed
     * test: a 16-bit result <= 0. */
    uint16_t uw;
    uint16_t left;                /* objects not carved yet (the owner's copy of cap - carved:
                                     the page switch reads it with `remote`, no unit word) */
    uint8_t  cls;
    uint8_t  pad;
    uint16_t arena;               /* index of the arena (the page's address: nbm__page_base) */
    struct nbm_page *next, *prev;   /* the bin's pages */
    struct nbm_page *anext, *aprev; /* the bin's pages with free objects */
} nbm_page_t;
_Static_assert(sizeof(nbm_page_t) == NBM_CACHE_LINE, "a page record is one cache line");

#define NBM_PAGE_OFF 0x8000u /* in nbm_page_t.uw: off the avail list (counts stay below: class.c) */

static inline uint32_t nbm__page_used(const nbm_page_t *pg) { return pg->uw & ~NBM_PAGE_OFF; }
static inline bool nbm__page_avail(const nbm_page_t *pg) { return !(pg->uw & NBM_PAGE_OFF); }
static inline void nbm__page_set_used(nbm_page_t *pg, uint32_t n)
{
    pg->uw = (uint16_t)((pg->uw & NBM_PAGE_OFF) | n);
}

/* --- heaps (one per thread) ---------------------------------------------------- */
/* A bin is a heap's share of one class, in one cache line (what malloc and
 * free touch): its free list `head`, the current page (the one refills
 * take from), the other pages the heap owns in the class.
 *
 * `head` is the thread's list of free objects of the class, from any pages
 * of any heaps (tcmalloc's thread cache list): malloc pops it, and a free
 * of the class by this thread pushes onto it, whatever the page, while
 * the list has room, with no branch on the page (a test for the current
 * page mispredicted on a third of leak's frees). An object on it still
 * counts as in use on its page, so popping it changes nothing there and a
 * page with an object on any thread's list cannot empty. Each free onto
 * the list counts `room` down and each malloc up (a refill sets it to lim:
 * from 8 KiB of the class, 16 to 256 objects, it grows up to 64 KiB
 * while this heap's own frees overflow the list between refills, heap.c;
 * 0 in a large class, whose frees so go to their pages at once,
 * nbm__large_alloc). With no room, a free goes to its page if the page is this
 * heap's (counted, with the page's edges: it joins the avail list, or it
 * empties and leaves the class), as the free of a non-current page did
 * before; another heap's object goes onto the list, which is trimmed
 * (and lim falls back to its floor): the newest lim / 4 stay, the others go to their
 * pages, other heaps' to their remote lists grouped by page (remote.c). So
 * a run of frees walks no list, and frees handed to another thread
 * (prodcons) cross back in batches. With no room, the current page's
 * objects still go onto the list, uncounted (at most a page's worth). The
 * heartbeat sends a list whose head has not changed for a whole interval
 * (an idle class: its pages can empty); nbm_thread_flush, thread exit,
 * nbm_purge and recovery send every list. */
typedef struct nbm_bin {
    _Alignas(NBM_CACHE_LINE) void *head;
    struct nbm_page *page;  /* current page, NULL = none */
    struct nbm_page *avail; /* non-current pages with free objects, and pages a switch left */
    int32_t  room;          /* frees the list may still take (net of mallocs) */
    uint32_t lim;           /* the list's bound, lim0 .. lmax (heap.c: bin_lim, refilled) */
    /* Copies of the class's chunk_mask, inv and shift (nbm_class_t), set
     * when a thread takes the heap: free's checks read them in this line,
     * which it touches anyway, with no class record to address. */
    uint32_t mask, inv, shift;
    /* The adaptive bound (heap.c: refilled, nbm__bins_age): frees of this
     * heap's objects that found no room and went to a non-current page
     * since the last refill (free's fast path counts them); heartbeats in
     * a grown bin's current window of room samples (a refill starts it
     * again: bin_sample); lim's floor and ceiling; the samples' span. The
     * heartbeat reads them in the line it reads for the list's head. */
    uint32_t over;
    uint16_t quiet;
    uint16_t lim0, lmax;
    int32_t  room_lo, room_hi; /* a grown bin's room at the heartbeats of the window (bin_sample) */
} nbm_bin_t;
_Static_assert(sizeof(nbm_bin_t) == NBM_CACHE_LINE, "a bin is one cache line");

/* Pops the bin's list; the object is untagged, so a later free of it does
 * not look like a double free, and the room grows by one (a free and a
 * malloc in turn never trim). The caller knows the list is not empty.
 * The pops of malloc's fast path, the refill and the generic path. */
__attribute__((always_inline)) static inline void *nbm__bin_pop(nbm_bin_t *bin)
{
    void **p = (void **)bin->head;
    bin->head = p[0];
    bin->room++;
    p[1] = NULL;
    return p;
}

/* The bin's colder half. */
typedef struct nbm_binx {
    struct nbm_page *pages; /* every page the heap owns in this class */
    uint32_t npages;      /* pages on `pages` */
    uint32_t fresh;       /* pages taken since the last sweep of `pages` */
    void    *head_mark;       /* the bin's head at the last heartbeat (nbm__bins_age) */
} nbm_binx_t;

/* Every NBM_HEARTBEAT-th malloc on the fast path (a countdown there: a
 * decrement of memory and a branch) goes to the slow path, which pushes the
 * held remote frees unused since the last one and runs the spare decay: so
 * even a program that only ever mallocs and frees on the fast paths gives
 * its empty pages back. */
#define NBM_HEARTBEAT 4096

#define NBM_DESC_STASH 64
/* Medium classes (medium.c), ascending: classes 0..NBM_MCLASS_SPLIT are the
 * orders 0..5 (4 KiB - 128 KiB); above, 8 per doubling: (9..16) << (o - 3)
 * pages for o = 5..13 (144 KiB - 64 MiB), the 16th being order o + 1. */
#define NBM_MCLASS_SPLIT 5
#define NBM_MCLASSES (NBM_MCLASS_SPLIT + 1 + 8 * (NBM_MAX_ORDER - NBM_MCLASS_SPLIT))
#define NBM_MCACHE_CLASSES (NBM_MCLASS_SPLIT + 1 + 8 * 2) /* classes up to 512 KiB use the thread's slots */
#define NBM_MCACHE_ORDERS 8 /* medium blocks of 4..512 KiB: one per order (of their class) per thread */
#define NBM_SPARE_ORDER0 4  /* page orders: 64 KiB and 128 KiB pages */
#define NBM_SPARE_ORDERS 2
#define NBM_SPARE_KEEP 8    /* spares per page order never moved into medium blocks (nbm__spares_fill) */
#define NBM_SHARED_ORDER 6  /* pages of 256 KiB (large classes): no spares, the medium cache (spare.c) */
#define NBM_KEPT_ORDERS  4  /* a heap's kept pages (heap.c): 64 KiB .. 512 KiB */

/* Statistics counters (see nbm__stat below). */
typedef struct nbm_gstats {
    _Atomic uint64_t arenas, arena_bytes, chunks, chunk_bytes, medium_live, medium_cached;
    _Atomic uint64_t purged, huge_live, huge_bytes, threads, refills, drains;
    _Atomic uint64_t moved; /* bytes of resident free pages moved into new blocks (nbm__os_move) */
    /* Splits of cached medium blocks (medium.c, split) and their races,
     * counted on the split's path and the race branches only (not in
     * nbm_stats_t; nbm_stats_print and the tests read them): parts of a
     * take refused whole and retaken smaller (nbm__block_take_next), pages
     * skipped as another allocation's, requests whose part was lost, and
     * blocks other allocations took with marks on them (check_fresh). */
    _Atomic uint64_t splits, split_retakes, split_skips, split_lost, dirty_takes;
} nbm_gstats_t;

/* A thread's record for the layers below the heap (state.c's): the
 * statistics it counted (nbm__stat), its stash of descriptors (desc.c), the
 * arena it tries first (arena.c) and its freed medium blocks kept for reuse
 * (medium.c). It lives in the thread's heap record (nbm_tcache_t.thr) and
 * is reused with it; the heap registers each record once
 * (nbm__thread_register), so that a counter's sum (nbm__stat_sum) reaches
 * it. nbm__thr names the calling thread's, NULL while it has no heap. The
 * layers below the spares see this record only, never the heap's (which
 * goes down as far as spare.c: the heap's spare pages are kept in it). */
typedef struct nbm_thread {
    _Atomic uintptr_t next;     /* the registry: every record registered so far */
    uint32_t arena_hint;        /* arena tried first */
    uint32_t ndesc;             /* free descriptors held in desc[] */
    uint32_t desc[NBM_DESC_STASH];
    void    *mcache[NBM_MCACHE_ORDERS]; /* a freed medium block per order, reused first */
    uint8_t  mcache_cls[NBM_MCACHE_ORDERS]; /* its medium class */
    int64_t  medium_delta;      /* medium blocks allocated minus freed by this thread */
    nbm_gstats_t st;            /* the statistics this record's threads counted (nbm__stat) */
} nbm_thread_t;

/* The heap record of a thread (historically "tcache"). Records are reused:
 * at thread exit the record, with the pages it owns, goes to a stack of
 * abandoned heaps, and the next thread adopts it whole. */
typedef struct nbm_tcache {
    _Atomic uint32_t next;      /* abandoned-heap stack link */
    uint32_t index;
    uint32_t front_pad[2];      /* keeps none_* where bins[-1]'s class copies are (asserted below) */
    /* Where bins[-1] would hold its class copies: zeros, never written. free
     * reads them for a unit word of class 0 (a medium block's, whose
     * word is 0) with no test of the byte: mask and inverse 0 fail its
     * offset check (0 < carved = 0 is false), whose path tells a medium
     * block from a bad pointer. */
    uint32_t none_pad[4];
    uint32_t none_mask, none_inv, none_shift;
    _Alignas(NBM_CACHE_LINE) nbm_bin_t bins[NBM_NCLASSES]; /* records are line-aligned: a bin is one line */
    nbm_binx_t binx[NBM_NCLASSES];
    nbm_page_t *spare[NBM_SPARE_ORDERS]; /* empty pages per page order, reused first (linked by next) */
    uint32_t nspare[NBM_SPARE_ORDERS];
    uint32_t spare_low[NBM_SPARE_ORDERS]; /* fewest spares since spare_since: not needed, released next */
    uint64_t spare_since;                 /* start of the current decay interval (ns) */
    nbm_page_t *kept[NBM_KEPT_ORDERS];    /* an emptied large-class page left in its class, per page order */
    uint32_t kept_used;                   /* orders whose kept page served since the last decay */
    uint64_t exited;                      /* abandoned, not yet collected: exit time (ns) | 1; else 0 */
    uint64_t adecay_since;                /* last look at the abandoned heaps (ns) */
    uint32_t trim_seen;                   /* last recovery epoch seen */
    uint32_t tick;                        /* fast-path mallocs until the heartbeat */
    uint64_t refills, drains;   /* pages taken / given back; joined into the globals at exit */
    nbm_thread_t thr;           /* the record of the layers below (nbm__thr while this heap is a thread's) */
} nbm_tcache_t;

/* An abandoned heap that exited at `exited` (its exit time | 1; 0 when not
 * abandoned) is collected at `now` once `age` ns have passed since its exit.
 * The tag bit is dropped first, and a `now` below the exit (one read in the
 * same tick of the coarse clock, or just before the exit) is no age at all.
 * Compared as they were, the tagged time was one above a `now` of the same
 * tick whenever the clock read even, the unsigned difference wrapped, and a
 * heap was collected (its empty pages purged, one madvise each) at the next
 * heartbeat after its exit instead of waiting half NBM_PURGE_DELAY_MS for a
 * new thread to adopt it. */
static inline bool nbm__abandoned_due(uint64_t exited, uint64_t now, uint64_t age)
{
    uint64_t e = exited & ~(uint64_t)1;
    return exited != 0 && now >= e && now - e >= age;
}
/* free finds bins[k - 1] at k bins from the record's start. */
_Static_assert(offsetof(nbm_tcache_t, bins) == sizeof(nbm_bin_t), "bins start one bin into a heap record");
_Static_assert(offsetof(nbm_tcache_t, none_mask) == offsetof(nbm_bin_t, mask) &&
               offsetof(nbm_tcache_t, none_inv) == offsetof(nbm_bin_t, inv) &&
               offsetof(nbm_tcache_t, none_shift) == offsetof(nbm_bin_t, shift),
               "a unit word of 0 reads the zeros of the record's first line");

enum { NBM_T_NEW = 0, NBM_T_INIT = 1, NBM_T_LIVE = 2, NBM_T_DEAD = 3 };

#define NBM_TLS __attribute__((tls_model("initial-exec")))
NBM_HIDDEN extern _Thread_local nbm_tcache_t *nbm__tc NBM_TLS;
/* &nbm__tc->thr, or NULL with it (state.c; set by the heap, heap.c). */
NBM_HIDDEN extern _Thread_local nbm_thread_t *nbm__thr NBM_TLS;
/* malloc's fast path's view of the heap: nbm__tc as a byte pointer, or,
 * while the thread has no heap (nbm__tc NULL), nbm__bins_none, whose lists
 * are all empty (zeros, never written): malloc finds its bin empty and goes
 * to the refill, which tells the two apart, so the fast path needs no test
 * for a missing heap. Set with nbm__tc (heap.c). */
NBM_HIDDEN extern _Thread_local char *nbm__mheap NBM_TLS;
NBM_HIDDEN extern nbm_bin_t nbm__bins_none[NBM_NSMALL + 1];

/* --- arenas ------------------------------------------------------------------ */
typedef struct nbm_arena {
    uintptr_t base;
    size_t    size;      /* bytes managed (reserved), a power of two <= 1 GiB */
    nbbs_t   *bb;
    uint32_t  index;
    unsigned  max_order; /* largest block this arena can hand out */
    _Atomic uint32_t unit[NBM_UNITS];      /* (class + 1) << 6 | objects carved << 16 (nbm__unit_of) */
    _Atomic uint8_t page_order[NBM_PAGES]; /* order + 1 of a medium block here (| 0x80: freed, cached) */
    _Atomic uint32_t retired;              /* NBM_ARENA_* below; 0 = in use */
    /* At the first unit of a medium block of NBM_MOVE_ORDER and up (live,
     * or freed in a cache): how many 4 KiB pages from its start may be
     * resident (the largest request it served since it came from the
     * back-end, purged; less what was moved out of it). medium.c. */
    _Atomic uint32_t extent[NBM_UNITS];
    /* Beside it: the page below which every range moved into the block
     * since it was last mapped afresh lies (above it the block is one
     * kernel mapping). */
    _Atomic uint32_t moved_top[NBM_UNITS];
    nbm_page_t pages[NBM_UNITS];           /* page records, at a page's first unit */
} nbm_arena_t;

#define NBM_ARENA_RETIRED  1u /* emptied and unmapped, can be revived */
#define NBM_ARENA_REVIVING 2u
#define NBM_ARENA_GONE     3u /* its slot went to another mapping (revived when free again) */
/* A small page's unit word: bits 6-11 its class + 1, bits 16-31 the
 * objects carved (at most 8192, class.c). The low half is so the byte
 * offset of the class's bin from the heap record (bins sit one bin into it:
 * bins[k - 1] at k lines), which free's fast path takes with one zero
 * extension (no shift). 0: no small page (a medium block, or nothing). */
#define NBM_UNIT_CLASS_SHIFT  6
#define NBM_UNIT_CARVED_SHIFT 16
static inline uint32_t nbm__unit_of(unsigned cls) { return (uint32_t)(cls + 1) << NBM_UNIT_CLASS_SHIFT; }
/* The class of a non-zero word. */
static inline unsigned nbm__unit_class(uint32_t w) { return ((w & 0xffffu) >> NBM_UNIT_CLASS_SHIFT) - 1u; }
_Static_assert(NBM_NCLASSES + 1 < 1 << (16 - NBM_UNIT_CLASS_SHIFT), "a class fits its bits of the unit word");
_Static_assert((1u << NBM_UNIT_CLASS_SHIFT) == sizeof(nbm_bin_t),
               "the unit word's low half is the bin's byte offset (free's fast path adds it to the heap record)");
#define NBM_PAGE_FREED 0x80u
/* The page byte of a page of a split cached block while it passes through
 * the back-end resident (medium.c, split): its taker sees it is not zero
 * (arena.c, check_fresh). No block's byte: classes + 1 stay below 0x7f. */
#define NBM_PAGE_DIRTY 0xffu

NBM_HIDDEN extern _Atomic uintptr_t nbm__map[NBM_MAP_SIZE];

/* The word of the unit holding a: arena slots are aligned to 1 GiB, so the
 * unit index comes from the address alone (no load of the base). */
static inline uint32_t nbm__unit_word(nbm_arena_t *ar, uintptr_t a)
{
    /* As a byte offset (one shift and one mask, the offset of unit[]
     * folded into the load): free's fast path, one instruction less. */
    uintptr_t off = (a >> (NBM_UNIT_SHIFT - 2)) & ((uintptr_t)(NBM_UNITS - 1) << 2);
    return nbm_load_u32_relaxed((_Atomic uint32_t *)((char *)ar->unit + off));
}

/* Owner entry of an address; 0 for an address outside user space. */
static inline uintptr_t nbm__owner(uintptr_t a)
{
    uintptr_t i = a >> NBM_ARENA_SHIFT;
    /* Relaxed: the entry was published before any pointer into it was handed
     * out, and the hand-over (a return value, or a user's synchronisation)
     * carries the happens-before. */
    return NBM_LIKELY(i < NBM_MAP_SIZE) ? nbm_load_uptr_relaxed(&nbm__map[i]) : 0;
}

/* Owner-map entries (nbm__owner): an arena, a live huge mapping. */
static inline bool nbm__map_is_arena(uintptr_t v) { return (v & NBM_MAP_ARENA) != 0; }
static inline bool nbm__map_is_huge(uintptr_t v) { return v != 0 && (v & (NBM_MAP_ARENA | NBM_MAP_TOMB)) == 0; }
static inline nbm_arena_t *nbm__map_arena(uintptr_t v) { return (nbm_arena_t *)(v - NBM_MAP_ARENA); }
/* The arena of an address known to be in one. */
static inline nbm_arena_t *nbm__arena_of(uintptr_t a) { return nbm__map_arena(nbm__owner(a)); }

/* The record of the page (of `page_mask` + 1 bytes) holding address a. */
static inline nbm_page_t *nbm__page_at(nbm_arena_t *ar, uintptr_t a, uintptr_t page_mask)
{
    /* As a byte offset (records are one line): one shift and one mask,
     * the arena's offset of pages[] folded into the address (free's fast
     * path: 3 instructions, not 5 for the index form). */
    _Static_assert(sizeof(nbm_page_t) == 64, "a page record is 64 bytes");
    uintptr_t off = ((a & ~page_mask) >> (NBM_UNIT_SHIFT - 6)) & ((uintptr_t)(NBM_UNITS - 1) << 6);
    return (nbm_page_t *)((char *)ar->pages + off);
}

/* --- process state and options ----------------------------------------------- */
typedef struct nbm_options {
    bool     show_stats;      /* NBM_SHOW_STATS */
    bool     verbose;         /* NBM_VERBOSE */
    int      stats_fd;        /* stderr duplicated at start-up: programs such as
                                 sort(1) close fd 2 before exit */
    uint64_t purge_delay_ns;  /* NBM_PURGE_DELAY_MS: the policy's window (decay.c) */
    uint64_t cache_max;       /* NBM_MEDIUM_CACHE_MB, bytes; UINT64_MAX = no fixed cap */
    uint64_t limit;           /* NBM_LIMIT_MB, bytes; 0 = none */
    uint32_t move_budget;     /* NBM_MOVE_BUDGET: moves outstanding at most (medium.c) */
} nbm_options_t;

NBM_HIDDEN extern nbm_options_t nbm__opt;
NBM_HIDDEN extern uintptr_t nbm__secret; /* tags freed objects: word 1 = addr ^ secret */
NBM_HIDDEN extern _Atomic uint32_t nbm__ready; /* nbm__once's state: 2 once started */

NBM_HIDDEN void nbm__init(void);               /* idempotent, lock-free */
/* A one-time step of the process (state.c): *state 0 none, 1 being made, 2
 * made, 3 refused; the first caller runs make (true: made), a caller
 * arriving meanwhile waits for it (once per process, before any allocation
 * exists). Returns whether it was made. nbm__init's and the heap's thread
 * key (heap.c). */
NBM_HIDDEN bool nbm__once(_Atomic uint32_t *state, bool (*make)(void));
NBM_HIDDEN void nbm__options_read(void);
NBM_HIDDEN void nbm__classes_init(void);

/* --- statistics -------------------------------------------------------------- */
/* Counted by the calling thread in its own heap record (st: a relaxed load
 * and store, no read-modify-write, as only the record's thread writes it),
 * or in nbm__gstats (a relaxed atomic add) by a thread without a heap. A
 * counter's value is the sum of nbm__gstats and every record's copy, modulo
 * 2^64 (a copy that only counted frees reads "negative"), exact when no
 * thread is counting. Process-wide counters that every thread added to made
 * each page taken or emptied and each medium block cached or reused a
 * locked add on lines all threads wrote. */
NBM_HIDDEN extern nbm_gstats_t nbm__gstats;
static inline void nbm__stat(size_t off, uint64_t v)
{
    nbm_thread_t *t = nbm__thr;
    if (NBM_LIKELY(t != NULL)) {
        _Atomic uint64_t *p = (_Atomic uint64_t *)((char *)&t->st + off);
        nbm_store_u64_relaxed(p, nbm_load_u64_relaxed(p) + v);
    } else {
        nbm_stat_add((_Atomic uint64_t *)((char *)&nbm__gstats + off), v);
    }
}
/* A counter's value (the field at byte offset off): state.c. */
NBM_HIDDEN uint64_t nbm__stat_sum(size_t off);
/* A new thread record joins the registry that nbm__stat_sum reads (once per
 * record, before any thread counts in it; records are never unmapped). */
NBM_HIDDEN void nbm__thread_register(nbm_thread_t *t);
#define NBM_STAT_ADD(f, v) nbm__stat(offsetof(nbm_gstats_t, f), (uint64_t)(v))
#define NBM_STAT_SUB(f, v) nbm__stat(offsetof(nbm_gstats_t, f), -(uint64_t)(v))
#define NBM_STAT(f)        nbm__stat_sum(offsetof(nbm_gstats_t, f))

/* --- the memory policy (decay.c) --------------------------------------------- */
/* How much of one kind of freed memory is kept: enough for the peak of the
 * bytes in use over the last window (NBM_PURGE_DELAY_MS), the rest returned
 * about half per epoch (window / NBM_DECAY_SLOTS), oldest first. The owner
 * keeps the free ranges; the policy counts and decides. Zero-initialised. */
#define NBM_DECAY_SLOTS 4
typedef struct nbm_decay {
    _Alignas(NBM_CACHE_LINE) _Atomic uint64_t live; /* bytes in use */
    _Atomic uint64_t held;                          /* bytes freed and kept by the owner */
    _Atomic uint64_t epoch;                         /* epoch of the ring's newest slot */
    _Atomic uint64_t peak[NBM_DECAY_SLOTS];         /* highest live per epoch (ring) */
} nbm_decay_t;

/* `bytes` came into use (taken from the owner's held ranges or new). */
NBM_HIDDEN void   nbm__decay_take(nbm_decay_t *d, size_t bytes, uint64_t now);
/* `bytes` left use; true if the range may be kept (false: NBM_PURGE_DELAY_MS=0,
 * return it now). */
NBM_HIDDEN bool   nbm__decay_give(nbm_decay_t *d, size_t bytes, uint64_t now);
/* The owner's held bytes grew (a range kept) or shrank (reused or returned). */
NBM_HIDDEN void   nbm__decay_hold(nbm_decay_t *d, size_t bytes);
NBM_HIDDEN void   nbm__decay_unhold(nbm_decay_t *d, size_t bytes);
/* Peak bytes in use over the window. */
NBM_HIDDEN uint64_t nbm__decay_peak(nbm_decay_t *d, uint64_t now);
/* Held bytes beyond what the window's peak needs. A sweep returns oldest
 * ranges while it has returned less than half of it (rounded up) and the next
 * range still fits in it. */
NBM_HIDDEN size_t nbm__decay_excess(nbm_decay_t *d, uint64_t now);
/* True for one caller per epoch of `*clock` (the caller's own sweep clock):
 * that caller sweeps. */
NBM_HIDDEN bool   nbm__decay_due(_Atomic uint64_t *clock, uint64_t now);

/* --- OS layer (os.c) -------------------------------------------------------- */
NBM_HIDDEN void    *nbm__os_reserve_aligned(size_t size, size_t align); /* RW, NULL = ENOMEM */
NBM_HIDDEN void    *nbm__os_map(size_t size);                           /* RW, NULL = ENOMEM */
NBM_HIDDEN bool     nbm__os_map_at(void *p, size_t size);               /* RW at p exactly */
NBM_HIDDEN void     nbm__os_unmap(void *p, size_t size);
NBM_HIDDEN void     nbm__os_purge(void *p, size_t size);                 /* MADV_DONTNEED */
/* Zeroes [p, p + n) (p page-aligned), leaving pages that are not resident
 * out of memory (purged instead of written). */
NBM_HIDDEN void     nbm__os_zero(void *p, size_t n);
NBM_HIDDEN bool     nbm__os_remap(void *p, size_t old, size_t size, void *to); /* mremap; to NULL: in place */
/* The pages of [from, from + len) moved to [to, to + len), no copy; from
 * reads as zeros after. False if refused (no move is tried again). */
NBM_HIDDEN bool     nbm__os_move(void *from, size_t len, void *to);
/* [p, p + size) mapped afresh (mmap MAP_FIXED: empty, and merged with its
 * neighbours); false if refused (then purged instead). */
NBM_HIDDEN bool     nbm__os_renew(void *p, size_t size);
/* The process's kernel mappings (lines of /proc/self/maps); SIZE_MAX if
 * they cannot be counted. */
NBM_HIDDEN size_t   nbm__os_mappings(void);
/* vec[i] = 1 if page i from p is resident (mincore; all 1 if unknown). */
NBM_HIDDEN void     nbm__os_resident(void *p, size_t pages, unsigned char *vec);
NBM_HIDDEN uint64_t nbm__os_now_ns(void);                               /* coarse monotonic */
NBM_HIDDEN size_t   nbm__os_peak_rss(void);
NBM_HIDDEN uint64_t nbm__os_as_room(void); /* RLIMIT_AS less the process's size; UINT64_MAX: none */
NBM_HIDDEN _Noreturn void nbm__fatal(const char *what, const void *p);
NBM_HIDDEN void     nbm__write_str(int fd, const char *s);
NBM_HIDDEN void     nbm__write_num(int fd, uint64_t v);
NBM_HIDDEN void     nbm__write_hex(int fd, uintptr_t v);

/* --- arenas and medium blocks (arena.c, medium.c) ------------------------------------ */
/* A back-end block, NULL = none; *dirty: some of its pages may hold data
 * (see NBM_PAGE_DIRTY), else it is zero. */
NBM_HIDDEN void *nbm__block_alloc(unsigned order, uint32_t *hint, bool *dirty);
NBM_HIDDEN void *nbm__block_cached(unsigned order); /* a block of the medium cache, or NULL */
/* Whether address space is short: the last search for a block found none
 * and no arena could be added since, or, when an arena was last added or
 * revived, the next one would not fit at its size under RLIMIT_AS or
 * NBM_LIMIT_MB (the wall is near). */
NBM_HIDDEN bool  nbm__memory_short(void);
NBM_HIDDEN void  nbm__block_free(nbm_arena_t *ar, void *p);          /* back to the back-end */
/* A block of `pages` 4 KiB pages, not a power of two (2^o < pages <
 * 2^(o+1)), made of contiguous back-end blocks. With pack, first right
 * after the thread's last such block (greedy aligned buddy blocks taken
 * with nbbs_alloc_at, on any page; all given back if one is refused).
 * Otherwise one per binary digit of pages, largest first: the back-end's
 * search finds a free block of order
 * o + 1, which goes back and its pieces are taken in place
 * (nbbs_alloc_at). A piece lost to a concurrent allocation gives back the
 * pieces taken and the search runs again; after NBM_PIECE_TRIES the
 * block of order o + 1 is kept whole (*whole). NULL: no block of order
 * o + 1 could be had. The block's pieces go back with
 * nbm__block_free_pieces (a whole one with nbm__block_free). */
NBM_HIDDEN void *nbm__block_alloc_pieces(size_t pages, bool pack, uint32_t *hint, bool *whole, bool *dirty);
NBM_HIDDEN void  nbm__block_free_pieces(nbm_arena_t *ar, void *p, size_t pages);
/* A block of `pages` back to the back-end: one block if a power of two,
 * else its pieces. */
NBM_HIDDEN void  nbm__block_free_any(nbm_arena_t *ar, void *p, size_t pages);
/* After the caller gave a range [*q, end) of arena ar back to the back-end
 * (its pages marked NBM_PAGE_DIRTY), takes it again piece by piece: the
 * next piece at or after *q, the largest buddy block aligned there that
 * fits below end and is free (a smaller one where part of it was taken
 * meanwhile; a page another allocation holds is skipped). Returns the
 * piece (its marks cleared, *order its order, *q moved past it) or NULL
 * when nothing below end is left. */
NBM_HIDDEN void *nbm__block_take_next(nbm_arena_t *ar, char **q, char *end, unsigned *order);
/* Tests only: called, when set, between a split's free and its takes
 * (medium.c) and at a refused take (arena.c, which defines it). */
NBM_HIDDEN extern void (*nbm__split_window)(void);
/* Resident free memory moves where it is needed (one budget for all
 * sizes): a medium block of NBM_MOVE_ORDER and up whose request reaches past
 * what it may have resident (a block new from the back-end has nothing) has a
 * *hole*, [off, off + len) in the request, and before the request returns
 * the hole is filled with pages moved from free memory that is resident:
 * the heap's spare pages (nbm__spares_fill), then cached medium blocks
 * (nbm__medium_fill). Holes under NBM_MOVE_MIN are left to fault. */
#define NBM_MOVE_ORDER 6                     /* 256 KiB */
#define NBM_MOVE_MIN   ((size_t)64 << 10)
#define NBM_MOVE_CACHED_MIN ((size_t)1 << 20) /* from cached medium blocks: holes of 1 MiB and up */
#define NBM_MOVE_BUDGET     4096u  /* moves outstanding at most, by default (NBM_MOVE_BUDGET=N) */
#define NBM_MOVE_BUDGET_MAX 16384u /* two mappings each: well inside vm.max_map_count's 65530 */
typedef struct nbm_hole {
    size_t off, len; /* len 0: none */
} nbm_hole_t;
/* A medium block for size bytes aligned to align; fresh: known zero; hole
 * (NULL: not wanted): the part of the request to fill. */
NBM_HIDDEN void *nbm__medium_alloc(size_t size, size_t align, bool *fresh, nbm_thread_t *t, nbm_hole_t *hole);
/* Moves resident pages of cached medium blocks into [block + off, + len)
 * (page-aligned, of the caller's block and not resident); returns the bytes
 * filled from there on. */
NBM_HIDDEN size_t nbm__medium_fill(char *block, size_t off, size_t len);
/* One move of len bytes of resident pages from src (one kernel mapping) to
 * dst in the caller's medium block `block` (nbm__os_move), within the
 * budget of mappings moves may leave behind; false if refused or over
 * budget (the caller faults instead). */
NBM_HIDDEN bool  nbm__medium_move(char *block, char *dst, void *src, size_t len, bool pieces);
/* Whether a move (not out of pieces) from src to dst would be made as far as
 * the budget goes: it extends the thread's last move, or budget is left
 * (racy: nbm__medium_move may still refuse it). Callers ask before they
 * give up anything for the move. */
NBM_HIDDEN bool  nbm__medium_may_move(const void *dst, const void *src);
NBM_HIDDEN void  nbm__medium_free(nbm_arena_t *ar, void *p, const char *who);
NBM_HIDDEN size_t nbm__medium_size(nbm_arena_t *ar, const void *p, const char *who, const char *freed);
NBM_HIDDEN nbm_arena_t *nbm__arena_at(uint32_t i);
NBM_HIDDEN uint32_t nbm__arena_count(void);
NBM_HIDDEN void nbm__decay_sweep(bool all);
NBM_HIDDEN void nbm__medium_release(void *p, unsigned order); /* a block of an order to the decay cache */
NBM_HIDDEN void nbm__medium_slots_release(nbm_thread_t *t, bool *any); /* the thread's medium slots to the decay cache */
NBM_HIDDEN void nbm__medium_tick(uint64_t now); /* the cache's sweep, if one is due */
/* Page blocks of NBM_SHARED_ORDER and up (spare.c) under the medium cache's
 * policy: a cached one taken for a page, one new from the back-end, an
 * empty page's given to the cache. */
NBM_HIDDEN void *nbm__medium_page_take(unsigned order);
NBM_HIDDEN void  nbm__medium_page_new(void *p, unsigned order);
NBM_HIDDEN void  nbm__medium_page_give(void *p, unsigned order);
/* After an allocation failed, and the medium cache went to the back-end
 * (nbm__recover): empty arenas to the OS. True if any was returned. */
NBM_HIDDEN bool nbm__arena_reclaim(void);

/* --- huge mappings (huge.c) --------------------------------------------------- */
NBM_HIDDEN void  *nbm__huge_alloc(size_t size, size_t align);
NBM_HIDDEN void   nbm__huge_free(uintptr_t owner, void *p, const char *who);
NBM_HIDDEN size_t nbm__huge_size(uintptr_t owner, const void *p, const char *who, const char *freed);
/* realloc of a live huge mapping to n bytes by mremap (pages move, no copy);
 * NULL when it cannot (the caller copies instead). */
NBM_HIDDEN void  *nbm__huge_realloc(uintptr_t owner, void *p, size_t n);
NBM_HIDDEN bool   nbm__map_claim(uintptr_t slot, uintptr_t value); /* false: slot busy */
/* Bytes of arenas and huge mappings reserved, against NBM_LIMIT_MB: take
 * before reserving (false: over the limit), give back after unmapping. */
NBM_HIDDEN bool   nbm__budget_take(size_t bytes);
NBM_HIDDEN void   nbm__budget_give(size_t bytes);

/* --- pages (page.c) ---------------------------------------------------------- */
/* A new page of class cls owned by heap, in `block` (of the class's page
 * order), or when that is NULL in a block from the back-end; NULL when there
 * is none. */
NBM_HIDDEN nbm_page_t *nbm__page_new(unsigned cls, uintptr_t heap, uint32_t *hint, void *block);
/* An empty page of class cls that kept its unit words (a spare of the
 * heap, not forgotten) made the heap's page again with its free list as it
 * was, so its objects are not carved again; NULL when `block` is no such
 * page (the caller makes a new page of it). */
NBM_HIDDEN nbm_page_t *nbm__page_revive(void *block, unsigned cls, uintptr_t heap);
NBM_HIDDEN unsigned nbm__page_order(unsigned cls);
/* Carves up to max objects from the page's uncarved tail onto *head (each
 * tagged free); returns how many. */
NBM_HIDDEN uint32_t nbm__page_carve(nbm_page_t *pg, void **head, uint32_t max);
NBM_HIDDEN uint32_t nbm__page_carved(const nbm_page_t *pg);
NBM_HIDDEN uintptr_t nbm__page_base(const nbm_page_t *pg); /* the page's first byte */
/* Takes the page's remote list whole (NULL if empty); with n, also counts it
 * and gives its last object (a walk of the list), else neither. */
NBM_HIDDEN void *nbm__page_take_remote(nbm_page_t *pg, uint32_t *n, void ***last);
/* Pushes a chain of the page's objects, first..last linked by word 0, with one CAS. */
NBM_HIDDEN void  nbm__page_free_remote(nbm_page_t *pg, void **first, void **last);
NBM_HIDDEN void *nbm__page_unmake(nbm_page_t *pg); /* an empty page: its block (unit words kept) */
/* The unit words of an empty page's block cleared: a pointer into it is
 * then invalid (before the block leaves the heap). */
NBM_HIDDEN void  nbm__page_forget(void *block, unsigned order);
/* The one place an empty page's block goes back (see page.c). */
NBM_HIDDEN void  nbm__page_release(void *block, unsigned order);
/* As nbm__page_release for a block whose unit words were cleared
 * (nbm__page_forget) and whose memory was moved out: no madvise. */
NBM_HIDDEN void  nbm__page_release_moved(void *block);

/* --- heaps (heap.c, desc.c) ------------------------------------------------------ */
NBM_HIDDEN void *nbm__small_alloc_generic(unsigned cls);
NBM_HIDDEN void  nbm__small_free_generic(void *p, nbm_page_t *pg);
/* malloc of a small size whose bin is empty, its heartbeat counted
 * (nbm__malloc_refill): the bin refilled and popped without the generic
 * path's second look at the heap, the class and the heartbeat. NULL when
 * the bin is nbm__bins_none's (no heap) or no page can be had: the caller
 * takes the generic path. */
NBM_HIDDEN void *nbm__small_refill(nbm_bin_t *bin);
/* free of a small object (checked and tagged) of another heap's page
 * whose bin's list has no room (heap.c): onto the list, which is trimmed.
 * Other heaps' objects go to their pages' remote lists through
 * nbm__remote_push (remote.c: a list of class cls, linked by word 0). */
NBM_HIDDEN void  nbm__free_other(nbm_tcache_t *tc, nbm_bin_t *bin, void **o);
NBM_HIDDEN void  nbm__remote_push(unsigned cls, void **list);
/* nbm__fatal(what, p), never returns; not declared noreturn so that free's
 * fast path reaches it with a jump and keeps no stack frame. */
NBM_HIDDEN void  nbm__free_bad(const char *what, const void *p);
/* free's offset check failed: a medium block's start (class byte 0: to
 * nbm__medium_free), else reported as an invalid pointer. A jump too. */
NBM_HIDDEN void  nbm__free_unaligned(void *p);
/* The fast path's edges: the owner's free to a non-current page off the
 * avail list (to avail, bin in hand) or that emptied a page. */
NBM_HIDDEN void  nbm__page_refreed(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg);
NBM_HIDDEN void  nbm__tcache_flush(nbm_tcache_t *tc, bool spares); /* spares: give them back too */
NBM_HIDDEN nbm_tcache_t *nbm__tcache_get(void);       /* NULL while none can be used */
NBM_HIDDEN uint32_t nbm__desc_get(nbm_thread_t *t);  /* t may be NULL */
NBM_HIDDEN void  nbm__desc_put(nbm_thread_t *t, uint32_t d);
NBM_HIDDEN void  nbm__desc_flush(nbm_thread_t *t);
/* The calling thread's heap and the abandoned heaps: remote frees taken,
 * empty pages given back; with medium, the thread's cached medium blocks
 * too. True if anything was given back. */
NBM_HIDDEN bool  nbm__heaps_collect(bool medium);
NBM_HIDDEN bool  nbm__recover(void);                  /* after ENOMEM: true if anything was freed */
/* The heartbeat's look at every bin: a list whose head is the last
 * heartbeat's goes back whole (heap.c). */
NBM_HIDDEN void  nbm__bins_age(nbm_tcache_t *tc);
NBM_HIDDEN void  nbm__bins_shed(nbm_tcache_t *tc); /* the grown lists back whole (alloc.c: before a medium block faults) */

/* --- spare pages (spare.c): a heap's empty pages, kept for its next pages ------- */
/* An empty page (unmade, unit words kept) to the spares; a page of
 * NBM_SHARED_ORDER and up to the medium cache instead. */
NBM_HIDDEN void  nbm__spare_put(nbm_tcache_t *tc, nbm_page_t *pg, unsigned order);
/* A block for a new page: the heap's spare, else a cached free block (the
 * medium cache's); NULL if none: the caller takes one from the back-end and
 * calls nbm__spare_fresh. */
NBM_HIDDEN void *nbm__spare_take(nbm_tcache_t *tc, unsigned order);
NBM_HIDDEN void  nbm__spare_fresh(void *block, unsigned order);
NBM_HIDDEN bool  nbm__spares_release(nbm_tcache_t *tc); /* all to the OS and back-end; true if any */
NBM_HIDDEN void  nbm__spares_give(nbm_tcache_t *tc);    /* all to the medium cache (thread exit) */
/* Moves the memory of whole spares into [block + off, + len) of a medium
 * block (page-aligned, the caller's and not resident); the spares go to the
 * back-end. Returns the bytes filled from there on. */
NBM_HIDDEN size_t nbm__spares_fill(nbm_tcache_t *tc, char *block, size_t off, size_t len);
/* Every half NBM_PURGE_DELAY_MS: spares not needed in the interval go back;
 * true when an interval ended (the heap's kept pages decay then too). */
NBM_HIDDEN bool  nbm__spares_decay(nbm_tcache_t *tc);
NBM_HIDDEN void  nbm__spares_trim(void); /* every heap gives its spares back at its next decay */
/* The heap's allocation in a large class, and the steps it shares with the
 * small classes' refill (heap.c). */
NBM_HIDDEN void *nbm__large_alloc(nbm_tcache_t *tc, unsigned cls);
NBM_HIDDEN void  nbm__heap_decay(nbm_tcache_t *tc); /* spares, then kept pages at an interval's end */
NBM_HIDDEN uint32_t nbm__sweep_bin(nbm_tcache_t *tc, nbm_bin_t *bin); /* remote frees taken, empty pages out */
NBM_HIDDEN nbm_page_t *nbm__heap_page_new(nbm_tcache_t *tc, nbm_bin_t *bin, unsigned cls); /* NULL: none */

/* --- the generic entry points (alloc.c, free.c) --------------------------------- */
NBM_HIDDEN void  *nbm__malloc_generic(size_t n);
/* malloc(n)'s fast path found its bin empty: the heap's refill
 * (nbm__small_refill), else the generic path (no heap yet, or ENOMEM). */
NBM_HIDDEN void  *nbm__malloc_refill(size_t n, nbm_bin_t *bin);
NBM_HIDDEN void  *nbm__aligned_generic(size_t align, size_t n);
NBM_HIDDEN void   nbm__free_generic(void *p);
NBM_HIDDEN size_t nbm__usable(const void *p, const char *who, const char *freed);
NBM_HIDDEN void  *nbm__calloc(size_t count, size_t size);
NBM_HIDDEN void  *nbm__realloc(void *p, size_t n);
NBM_HIDDEN int    nbm__posix_memalign(void **out, size_t align, size_t n);

/* The fast paths, inlined into the API's malloc and free: fast.h. */

#endif /* NBM_INTERNAL_H */
