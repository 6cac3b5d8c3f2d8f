/*
 * medium.c - medium blocks: back-end blocks (or runs of contiguous ones)
 * handed to the user whole, their checks, and the caches that keep freed
 * ones by the memory policy.
 *
 * Medium blocks (NBM_SMALL_MAX < size <= NBM_MEDIUM_MAX, or aligned requests)
 * are of the smallest medium class that holds max(size, align) (below): up
 * to 128 KiB a back-end block of an order, above 8 classes per doubling
 * made of 1-4 contiguous back-end blocks. The back-end aligns a block to its
 * size; a block of pieces starts either where a free block of the next power
 * of two did, or packed right after the thread's last block of pieces, on any
 * page (fits_align below); an arena base is 1 GiB aligned. The page_order byte of the
 * first page holds the class + 1 and says the block is the user's (a piece
 * boundary inside a block finds 0: an interior pointer); free
 * sets its bit 7 with a CAS (of two racing frees one wins, the other sees a
 * double free), and the byte is cleared when the block goes back to the
 * back-end, so an interior or never handed-out pointer finds 0.
 *
 * Decay. A thread keeps its last freed medium block of each order up to
 * 512 KiB (a class up to 512 KiB whose pages' highest bit is that order) for
 * its next request of that order whose class the block holds (no atomic RMW
 * but the page-byte exchange): one slot per order, as many blocks held as
 * before the classes, though a block may serve a smaller class of its order
 * (up to 2x the request; a reuse from the cache below may be 4x, split
 * while address space is short). Other
 * freed medium blocks are kept on a per-class stack (a descriptor holding
 * the block) and reused first by the next request of that class. How many
 * are kept is the memory policy's (decay.c, one policy per class; a block in
 * a thread's slot counts as in use): once per epoch (NBM_PURGE_DELAY_MS / 4)
 * a medium call sweeps, and each class whose cache holds more than its peak
 * of the last window needs gives back
 * about half of the excess, oldest blocks first, madvise'd away. An optional
 * fixed cap (NBM_MEDIUM_CACHE_MB) bounds the cached bytes on top.
 */
#include <string.h>

#include "internal.h"

static nbm_stack_t decay[NBM_MCLASSES];
static nbm_decay_t policy[NBM_MCLASSES]; /* one per class: blocks of one class are interchangeable */
static _Atomic uint64_t last_sweep;

static _Atomic uint8_t *page_byte(nbm_arena_t *ar, const void *p)
{
    return &ar->page_order[((uintptr_t)p - ar->base) >> NBM_PAGE_SHIFT];
}

static _Atomic uint32_t *extent_of(nbm_arena_t *ar, const void *p)
{
    return &ar->extent[((uintptr_t)p - ar->base) >> NBM_UNIT_SHIFT];
}

static _Atomic uint32_t *moved_top_of(nbm_arena_t *ar, const void *p)
{
    return &ar->moved_top[((uintptr_t)p - ar->base) >> NBM_UNIT_SHIFT];
}

/* An extent word: pages that may be resident (low 16 bits), and the moves
 * into the block that may have left a mapping of their own (high 16 bits;
 * see nbm__medium_move). Neither can overflow: a block has at most 2^14
 * pages, and its moves are counted against the budget, at most
 * NBM_MOVE_BUDGET_MAX outstanding in all. */
#define EXT_PAGES(w)  ((w) & 0xffffu)
#define EXT_FRAGS(w)  ((w) >> 16)
#define EXT(pages, frags) ((uint32_t)(pages) | (uint32_t)(frags) << 16)
_Static_assert(((size_t)1 << NBM_MAX_ORDER) <= 0xffffu && NBM_MOVE_BUDGET_MAX <= 0xffffu,
               "an extent word's halves hold a block's pages and its moves");

static unsigned order_for(size_t n)
{
    if (n <= NBM_PAGE)
        return 0;
    return 64u - (unsigned)__builtin_clzll((n - 1) >> NBM_PAGE_SHIFT);
}

/* --- medium classes -----------------------------------------------------------
 *
 * Up to 128 KiB a medium block is a back-end block of an order (class c is
 * order c). Above, 8 classes per doubling, (9..16) << (o - 3) pages for
 * 2^o < pages <= 2^(o+1), so the block is at most 12.5 % larger than the
 * request; the 16th of each doubling is order o + 1 itself, the others are
 * made of up to 4 contiguous back-end blocks, the binary digits of the
 * class's pages (nbm__block_alloc_pieces). Classes ascend with size. */
#define SPLIT NBM_MCLASS_SPLIT

#define ROW(o) 9u << (o - 3), 10u << (o - 3), 11u << (o - 3), 12u << (o - 3), \
               13u << (o - 3), 14u << (o - 3), 15u << (o - 3), 16u << (o - 3)
static const uint16_t pages_of[NBM_MCLASSES] = { 1, 2, 4, 8, 16, 32, ROW(5), ROW(6), ROW(7), ROW(8),
                                                 ROW(9), ROW(10), ROW(11), ROW(12), ROW(13) };
#undef ROW
_Static_assert(NBM_MCLASS_SPLIT == 5 && NBM_MAX_ORDER == 14 && NBM_MCLASSES == 78,
               "pages_of lists the classes of these constants");

static size_t class_pages(unsigned c) { return pages_of[c]; }

static size_t class_bytes(unsigned c) { return class_pages(c) << NBM_PAGE_SHIFT; }

/* The class of a block of 2^order pages. */
static unsigned class_of_order(unsigned order)
{
    return order <= SPLIT ? order : SPLIT + 1 + 8 * (order - SPLIT - 1) + 7;
}

/* Whether class c's block is one back-end block, and of which order. */
static bool class_whole(unsigned c) { return c <= SPLIT || (c - SPLIT - 1) % 8 == 7; }
static unsigned class_order(unsigned c) { return 63u - (unsigned)__builtin_clzll(class_pages(c)); }

/* The smallest class of at least n bytes. */
static unsigned class_for(size_t n)
{
    size_t pages = (n + NBM_PAGE - 1) >> NBM_PAGE_SHIFT;
    if (pages <= ((size_t)1 << SPLIT))
        return order_for(n);
    unsigned o = 63u - (unsigned)__builtin_clzll(pages - 1); /* 2^o < pages <= 2^(o+1), o >= SPLIT */
    unsigned sh = o - 3;
    size_t m = (pages + ((size_t)1 << sh) - 1) >> sh; /* 9 .. 16 */
    return SPLIT + 1 + 8 * (o - SPLIT) + (unsigned)(m - 9);
}

#define NBM_MOVE_CLASS (SPLIT + 1 + 8 * (NBM_MOVE_ORDER - SPLIT - 1) + 7)
_Static_assert(NBM_MOVE_ORDER > SPLIT, "moves are for blocks above the split");

#define NBM_REUSE_UP_MIN 2 /* requests of 16 KiB and up may reuse a larger cached block */
#define NBM_REUSE_UP_MAX 4 /* of up to 4x the class's size */

#define NBM_PAGE_UNITS ((char *)1) /* a cached block's desc->bump: its unit words are still a page's */
static void cache_put(void *p, unsigned cls, bool page);
static void cache_hold(void *p, unsigned cls, bool page);
static void release(nbm_arena_t *ar, void *p, unsigned cls);

static _Thread_local uint32_t slot_hits NBM_TLS; /* this thread's hits on its own medium slots */

/* Once per epoch, one caller sweeps the caches by the policy. */
static void maybe_sweep(uint64_t now)
{
    if (NBM_UNLIKELY(nbm__decay_due(&last_sweep, now)))
        nbm__decay_sweep(false);
}

void nbm__medium_tick(uint64_t now)
{
    maybe_sweep(now);
}

/* Whether block p serves an alignment: a block of pieces may be packed
 * (nbm__block_alloc_pieces) and start on any page, every other block on a
 * multiple of its size. */
static bool fits_align(const void *p, size_t align)
{
    return align <= NBM_PAGE || ((uintptr_t)p & (align - 1)) == 0;
}

/* A cached block of class cls that serves the alignment (a popped one that
 * does not goes back), or 0. */
static uint32_t pop_aligned(unsigned cls, size_t align)
{
    uint32_t d = nbm__stack_pop(&decay[cls], &nbm__desc_pool);
    if (d && !fits_align(nbm__desc(d)->list, align)) {
        nbm__stack_push(&decay[cls], &nbm__desc_pool, d, d);
        d = 0;
    }
    return d;
}

/* Pieces of a block taken back remembered until all of it is known taken:
 * greedy aligned pieces of up to 2^14 pages on any page are at most 28
 * (a class placed fresh has at most 4); more only after a race. */
#define NBM_SPLIT_PIECES 32

/* What part [x, x + n pages) of the split block at p may have resident, and
 * its moved top (the block's extent word said had and mtop), in its own
 * extent words (blocks of NBM_MOVE_CLASS and up keep them); no moves. */
static void part_extent(nbm_arena_t *ar, char *p, char *x, uint32_t n, uint32_t had, uint32_t mtop)
{
    uint32_t off = (uint32_t)((size_t)(x - p) >> NBM_PAGE_SHIFT);
    uint32_t res = had > off ? had - off : 0, mt = mtop > off ? mtop - off : 0;
    /* Relaxed: the part is ours alone. */
    nbm_store_u32_relaxed(extent_of(ar, x), EXT(res < n ? res : n, 0));
    nbm_store_u32_relaxed(moved_top_of(ar, x), mt < n ? mt : n);
}

/* A part [x, ...) of class c split off the cached block at p joins the
 * cache (page byte: a freed block's), held by the class's policy, or goes
 * back purged if the policy keeps nothing. */
static void part_keep(nbm_arena_t *ar, char *p, char *x, unsigned c, uint32_t had, uint32_t mtop)
{
    if (c >= NBM_MOVE_CLASS)
        part_extent(ar, p, x, (uint32_t)class_pages(c), had, mtop);
    nbm_store_u8_relaxed(page_byte(ar, x), (uint8_t)((c + 1) | NBM_PAGE_FREED));
    if (nbm__opt.purge_delay_ns != 0)
        cache_hold(x, c, false);
    else
        release(ar, x, c);
}

/* Takes back what is free of [s, e) of a split block, each piece kept as a
 * block of its order's class. */
static void keep_range(nbm_arena_t *ar, char *p, char *s, char *e, uint32_t had, uint32_t mtop)
{
    char *x;
    unsigned k;
    while ((x = nbm__block_take_next(ar, &s, e, &k)) != NULL)
        part_keep(ar, p, x, class_of_order(k), had, mtop);
}

/* Takes [s, e) of a split block back from the back-end; true if all of it
 * (one block now), else the pieces taken are kept each as a block of its
 * order's class (the rest is another allocation's). With one (a part of a
 * power-of-two class, freed with one nbbs_free) all of it must be one
 * back-end block: a take refused while another allocation held part of it
 * for a moment, then retaken as two halves, covers it in two blocks, and
 * the second was never freed again (16-19 MiB of 64 stranded in the
 * back-end after a 4 s test_split_race run). */
static bool take_part(nbm_arena_t *ar, char *p, char *s, char *e, bool one, uint32_t had, uint32_t mtop)
{
    char *q = s, *at = s, *x, *mine[NBM_SPLIT_PIECES];
    unsigned ord[NBM_SPLIT_PIECES], k, n = 0;
    bool whole = true;
    while ((x = nbm__block_take_next(ar, &q, e, &k)) != NULL) {
        whole &= x == at;
        at = q;
        if (n < NBM_SPLIT_PIECES) {
            mine[n] = x;
            ord[n++] = k;
        } else {
            whole = false;
            part_keep(ar, p, x, class_of_order(k), had, mtop);
        }
    }
    whole &= at == e && (!one || n == 1);
    if (!whole)
        for (unsigned i = 0; i < n; i++)
            part_keep(ar, p, mine[i], class_of_order(ord[i]), had, mtop);
    return whole;
}

/* The free rest [gap_lo, gap_hi) this thread's last split of a block for
 * a class of pieces left in the back-end, purged (thread-local: no shared
 * word). A later split of a block that touches it splits both as one range
 * (split), so the parts run on across blocks freed side by side instead of
 * leaving each block's rest in pieces too small for the class (under
 * ulimit -v, 64 x 4 MiB freed then 1,100,000 B requests: three 1.125 MiB
 * parts in each 4 MiB block, and its 640 KiB rest stranded). Stale or taken
 * by another allocation meanwhile, the take of that part is refused and the
 * split goes on as after any race. */
static _Thread_local uintptr_t gap_lo NBM_TLS, gap_hi NBM_TLS;
static _Thread_local uintptr_t last_lo NBM_TLS; /* where that split's range began */

/* While address space is short (nbm__memory_short: with space to spare the
 * block is taken whole, see nbm__medium_alloc), a cached block p of class
 * up (popped: ours alone) serves a request of the smaller class cls: it
 * goes back to the back-end and is taken again
 * in parts (nbm__block_take_next): the request's block at its start (or
 * its first place aligned to its size, for a power-of-two class; a class
 * of pieces may start in the thread's gap or be placed down, below, unless
 * align is above a page: then at p, aligned as popped), then
 * as many more blocks of the request's class as fit (the class in demand;
 * 3 x 320 KiB in 1 MiB, as packed fresh blocks would be), then the tail in
 * buddy blocks, each cached as a block of its class: resident memory the
 * policies keep counting (held, returned by the sweep as any cached block)
 * and that the next requests take, instead of up to 3/4 of the block held
 * by a request that never touches it. Its pages are marked NBM_PAGE_DIRTY
 * while they pass through the back-end: an allocation that takes some
 * meanwhile knows them not zero (and what it took is simply not ours).
 * Returns false, the block whole and untouched, if moves cut it (their
 * count is the whole block's, see heal) or a request of a power-of-two
 * class finds no place aligned to its size in it; else *out is the
 * request's block, or NULL when part of it was taken meanwhile. */
static bool split(char *p, unsigned up, unsigned cls, size_t align, void **out)
{
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
    uint32_t had = 0, mtop = 0;
    if (up >= NBM_MOVE_CLASS) { /* relaxed: the block is ours alone */
        uint32_t w = nbm_load_u32_relaxed(extent_of(ar, p));
        if (EXT_FRAGS(w))
            return false;
        had = EXT_PAGES(w);
        mtop = nbm_load_u32_relaxed(moved_top_of(ar, p));
    }
    size_t pages = class_pages(up), want = class_pages(cls), size = want << NBM_PAGE_SHIFT;
    char *end = p + (pages << NBM_PAGE_SHIFT), *a = p, *lo = p, *hi = end, *g0 = end, *g1 = end, *top = end;
    bool pieces = !class_whole(cls);
    if (pieces) {
        /* A class of pieces (on any page) runs on into the thread's last
         * gap where it touches the block: [lo, hi) is split, its parts end
         * to end across both, as packed fresh blocks. Blocks freed side by
         * side come back from the cache in either order: going up, the
         * parts start at lo and the gap [g0, g1) is what is left at the
         * top; going down (the block below the last split's range), they
         * end at hi and the gap is left at the bottom, for the next block
         * down. */
        bool down = false;
        if (align > NBM_PAGE) {
            /* An aligned request's part starts at p, the one place known
             * aligned (pop_aligned): into a gap or placed down it would
             * start at any page (posix_memalign(128 KiB, 300,000 B) under
             * NBM_LIMIT_MB=64: 25 of 128 misaligned). */
        } else if (gap_hi == (uintptr_t)p && gap_lo >= ar->base && gap_lo < gap_hi) {
            lo = (char *)gap_lo;
        } else if (gap_lo == (uintptr_t)end && gap_hi <= ar->base + ar->size) {
            hi = (char *)gap_hi;
            down = true;
        } else {
            down = last_lo == (uintptr_t)end;
        }
        size_t n = (size_t)(hi - lo) / size, rest = (size_t)(hi - lo) - n * size;
        if (n == 0)
            return false;
        a = down ? lo + rest : lo;
        top = a + n * size; /* the end of the parts */
        g0 = down ? lo : top;
        g1 = down ? a : hi;
        if (up >= NBM_MOVE_CLASS) { /* extents counted from lo (a gap is purged) */
            had += (uint32_t)((size_t)(p - lo) >> NBM_PAGE_SHIFT);
            mtop += (uint32_t)((size_t)(p - lo) >> NBM_PAGE_SHIFT);
        }
    } else {
        /* A block of a power-of-two class is one back-end block, aligned to
         * its size: in a block of pieces (packed on any page) the request's
         * is the first aligned place; if none fits, no split. */
        a = (char *)(((uintptr_t)p + size - 1) & ~(uintptr_t)(size - 1));
        if ((size_t)(end - a) < size)
            return false;
    }
    /* The block's pages in the gap (pieces: the rest of the range, too
     * small for the class) are purged while still ours and go back clean:
     * the next split of a block that touches them takes them into its
     * parts. */
    char *c0 = g0 > p ? g0 : p, *c1 = g1 < end ? g1 : end;
    if (c0 < c1) {
        nbm__os_purge(c0, (size_t)(c1 - c0));
        NBM_STAT_ADD(purged, (size_t)(c1 - c0));
    }
    /* Relaxed: published by the back-end's CAS in the free below. */
    for (size_t k = 0; k < pages; k++) {
        char *x = p + (k << NBM_PAGE_SHIFT);
        nbm_store_u8_relaxed(page_byte(ar, x), x >= c0 && x < c1 ? 0 : NBM_PAGE_DIRTY);
    }
    nbm__block_free_any(ar, p, pages);
    if (NBM_UNLIKELY(nbm__split_window != NULL))
        nbm__split_window(); /* tests only: other threads into the window */
    if (!pieces)
        keep_range(ar, p, p, a, had, mtop); /* before the request's (power of two in pieces) */
    char *s = a + size;
    *out = NULL;
    NBM_STAT_ADD(splits, 1);
    if (take_part(ar, lo, a, s, !pieces, had, mtop)) {
        if (cls >= NBM_MOVE_CLASS)
            part_extent(ar, lo, a, (uint32_t)want, had, mtop);
        *out = a;
    } else {
        NBM_STAT_ADD(split_lost, 1);
    }
    for (; (size_t)(top - s) >= size; s += size)
        if (take_part(ar, lo, s, s + size, !pieces, had, mtop))
            part_keep(ar, lo, s, cls, had, mtop);
    if (pieces) { /* the gap stays free in the back-end, purged */
        gap_lo = (uintptr_t)g0;
        gap_hi = (uintptr_t)g1;
        last_lo = (uintptr_t)lo;
    } else {
        keep_range(ar, p, s, end, had, mtop);
    }
    return true;
}

/* Fast case (no atomic RMW): the thread's own last freed block of this
 * order. Then the shared decay cache (one CAS), then the back-end. */
void *nbm__medium_alloc(size_t size, size_t align, bool *fresh, nbm_thread_t *thr, nbm_hole_t *hole)
{
    unsigned cls = class_for(size > align ? size : align), slot = class_order(cls);
    void *p;
    if (thr && cls < NBM_MCACHE_CLASSES && thr->mcache[slot] && thr->mcache_cls[slot] >= cls &&
        fits_align(thr->mcache[slot], align)) {
        p = thr->mcache[slot];
        thr->mcache[slot] = NULL;
        cls = thr->mcache_cls[slot];
        *fresh = false;
        /* The policy's clock is read every 16th hit only (a clock read cost
         * about a quarter of this path); a program living on its own slots
         * still sweeps. */
        if (NBM_UNLIKELY((++slot_hits & 15) == 0))
            maybe_sweep(nbm__os_now_ns());
    } else {
        uint64_t now = nbm__os_now_ns();
        uint32_t d = pop_aligned(cls, align);
        /* A request takes a cached block up to NBM_REUSE_UP_MAX times
         * larger before new memory: its pages are already there, and classes
         * of one working set would otherwise each keep their own peak's
         * worth. While address space is short the rest is split off into
         * cached blocks (split) instead of held by the request; splitting
         * every time cut up the blocks the next large requests wanted
         * (storm: 1.45x the time, 2.8x the peak RSS; docs/nbmalloc.md). */
        size_t up_max = class_pages(cls) * NBM_REUSE_UP_MAX;
        unsigned got = cls;
        for (unsigned up = cls + 1; !d && cls >= NBM_REUSE_UP_MIN && up < NBM_MCLASSES && class_pages(up) <= up_max; up++)
            if ((d = pop_aligned(up, align)) != 0)
                got = up;
        p = NULL;
        if (d) {
            p = nbm__desc(d)->list;
            if (nbm__desc(d)->bump == NBM_PAGE_UNITS)
                nbm__page_forget(p, class_order(got)); /* a page's block becomes a medium block */
            NBM_STAT_SUB(medium_cached, class_bytes(got));
            nbm__decay_unhold(&policy[got], class_bytes(got));
            nbm__desc_put(thr, d);
            *fresh = false;
            if (got == cls || !nbm__memory_short() || !split(p, got, cls, align, (void **)&p))
                cls = got; /* whole: the same class, or one with moves in it */
        }
        if (!p) {
            uint32_t any = 0, *hint = thr ? &thr->arena_hint : &any;
            bool dirty;
            for (bool swept = false;;) {
                if (class_whole(cls)) {
                    p = nbm__block_alloc(class_order(cls), hint, &dirty);
                } else {
                    bool whole;
                    p = nbm__block_alloc_pieces(class_pages(cls), align <= NBM_PAGE, hint, &whole, &dirty);
                    if (p && whole) /* pieces lost to other threads every try: the power of two */
                        cls = class_of_order(class_order(cls) + 1);
                }
                /* No block and no arena could be added: the cached free
                 * blocks go back first, they may merge into what we need
                 * (the back-end's search could not ask this layer). */
                if (p || swept || NBM_STAT(medium_cached) == 0)
                    break;
                swept = true;
                nbm__decay_sweep(true);
            }
            if (!p)
                return NULL;
            *fresh = !dirty; /* never used, or purged before it went back */
            if (dirty && cls >= NBM_MOVE_CLASS) { /* relaxed: ours alone */
                nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
                nbm_store_u32_relaxed(extent_of(ar, p), EXT(class_pages(cls), 0)); /* all may be resident */
                nbm_store_u32_relaxed(moved_top_of(ar, p), 0);
            }
        }
        nbm__decay_take(&policy[cls], class_bytes(cls), now);
        maybe_sweep(now);
    }
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
    /* Relaxed: read by a free, which the user orders after this return. */
    nbm_store_u8_relaxed(page_byte(ar, p), (uint8_t)(cls + 1));
    if (hole)
        hole->len = 0;
    if (cls >= NBM_MOVE_CLASS) {
        /* Relaxed: the block is ours; its next owner gets it through a
         * cache's CAS or the user's hand-over. */
        _Atomic uint32_t *ext = extent_of(ar, p);
        uint32_t w = *fresh ? 0 : nbm_load_u32_relaxed(ext), had = EXT_PAGES(w); /* a dirty new block: set above */
        uint32_t want = (uint32_t)((size + NBM_PAGE - 1) >> NBM_PAGE_SHIFT);
        if (*fresh || want > had)
            nbm_store_u32_relaxed(ext, EXT(want > had ? want : had, EXT_FRAGS(w)));
        if (*fresh)
            nbm_store_u32_relaxed(moved_top_of(ar, p), 0);
        if (want > had) {
            if (hole && ((size_t)(want - had) << NBM_PAGE_SHIFT) >= NBM_MOVE_MIN) {
                hole->off = (size_t)had << NBM_PAGE_SHIFT;
                hole->len = (size_t)(want - had) << NBM_PAGE_SHIFT;
            }
        }
    }
    if (thr)
        thr->medium_delta++;
    else
        NBM_STAT_ADD(medium_live, 1);
    return p;
}

/* A free block of the medium cache (a freed medium block, or an exited
 * thread's spare page), taken for a new page; NULL when none. Its page byte
 * is cleared; the unit words are the caller's to set. */
void *nbm__block_cached(unsigned order)
{
    uint32_t d = nbm__stack_pop(&decay[class_of_order(order)], &nbm__desc_pool);
    if (!d)
        return NULL;
    void *p = nbm__desc(d)->list;
    NBM_STAT_SUB(medium_cached, NBM_PAGE << order);
    nbm__desc_put(nbm__thr, d);
    /* Relaxed: the block is ours alone (popped by the CAS above). */
    nbm_store_u8_relaxed(page_byte(nbm__arena_of((uintptr_t)p), p), 0);
    return p;
}

/* Blocks of pages of NBM_SHARED_ORDER and up (large classes) share the
 * medium cache and its policy: counted in use while they are pages, given
 * back by nbm__medium_release. A cached block for a new page (its page byte
 * cleared), or NULL. */
void *nbm__medium_page_take(unsigned order)
{
    void *p = nbm__block_cached(order);
    if (p) {
        nbm__decay_unhold(&policy[class_of_order(order)], NBM_PAGE << order);
        nbm__decay_take(&policy[class_of_order(order)], NBM_PAGE << order, nbm__os_now_ns());
    }
    return p;
}

/* An empty page's block (unit words kept) to the cache, marked as a freed
 * block's. */
void nbm__medium_page_give(void *p, unsigned order)
{
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
    /* Relaxed: the block is ours alone until the cache's CAS publishes it. */
    nbm_store_u8_relaxed(page_byte(ar, p), (uint8_t)((class_of_order(order) + 1) | NBM_PAGE_FREED));
    /* A page's objects may have touched all of it. Moves into it as a
     * medium block, if any, stay counted (the word was set when the block
     * came from the back-end, as a medium block or as a page: see
     * nbm__medium_page_new), so mapping it afresh when it is released
     * gives their budget back: forgotten, the budget drained for good over
     * blocks going medium -> page -> back-end (none left after budget / 4
     * rounds of test_policy's `carry`, the mappings flat). */
    if (order >= NBM_MOVE_ORDER) {
        _Atomic uint32_t *ext = extent_of(ar, p);
        nbm_store_u32_relaxed(ext, EXT((uint32_t)1 << order, EXT_FRAGS(nbm_load_u32_relaxed(ext))));
        nbm_store_u32_relaxed(moved_top_of(ar, p), (uint32_t)1 << order); /* not known: no source */
    }
    cache_put(p, class_of_order(order), true);
}

/* A page block of the order came from the back-end: counted in use; its
 * extent word (another block's from before) says no moves. */
void nbm__medium_page_new(void *p, unsigned order)
{
    if (order >= NBM_MOVE_ORDER) /* relaxed: the block is ours alone */
        nbm_store_u32_relaxed(extent_of(nbm__arena_of((uintptr_t)p), p), 0);
    nbm__decay_take(&policy[class_of_order(order)], NBM_PAGE << order, nbm__os_now_ns());
}

/* The class of the live medium block at p. A pointer that is not a page
 * start, or whose page byte is 0 (interior, never handed out, past the
 * arena's end, back in the back-end) is `who`; a block freed and still cached
 * is `freed`. With take, marks the block freed (CAS: one of two racing frees). */
static unsigned medium_order(nbm_arena_t *ar, const void *p, const char *who, const char *freed, bool take)
{
    uintptr_t off = (uintptr_t)p - ar->base;
    if (off & (NBM_PAGE - 1))
        nbm__fatal(who, p);
    _Atomic uint8_t *slot = page_byte(ar, p);
    uint8_t o1 = nbm_load_u8_relaxed(slot);
    for (;;) {
        if (o1 == 0 || o1 == NBM_PAGE_DIRTY)
            nbm__fatal(who, p);
        if (o1 & NBM_PAGE_FREED)
            nbm__fatal(freed, p);
        if (!take || nbm_cas_u8(slot, &o1, (uint8_t)(o1 | NBM_PAGE_FREED)))
            return o1 - 1u;
    }
}

size_t nbm__medium_size(nbm_arena_t *ar, const void *p, const char *who, const char *freed)
{
    return class_bytes(medium_order(ar, p, who, freed, false));
}

static void heal(nbm_arena_t *ar, void *p, unsigned cls);

static void release(nbm_arena_t *ar, void *p, unsigned cls)
{
    if (class_whole(cls))
        nbm__page_forget(p, class_order(cls)); /* a cached page's (a no-op store of 0 for others) */
    /* Relaxed: the block is ours alone; the back-end's CAS publishes it. */
    nbm_store_u8_relaxed(page_byte(ar, p), 0);
    if (cls >= NBM_MOVE_CLASS && EXT_FRAGS(nbm_load_u32_relaxed(extent_of(ar, p))))
        heal(ar, p, cls); /* purged too */
    else
        nbm__os_purge(p, class_bytes(cls));
    NBM_STAT_ADD(purged, class_bytes(cls));
    if (class_whole(cls))
        nbm__block_free(ar, p);
    else
        nbm__block_free_pieces(ar, p, class_pages(cls));
}

void nbm__medium_free(nbm_arena_t *ar, void *p, const char *who)
{
    unsigned cls = medium_order(ar, p, who, "free(): double free detected for", true);
    nbm_thread_t *thr = nbm__thr;
    if (thr) {
        thr->medium_delta--;
        unsigned slot = class_order(cls);
        if (cls < NBM_MCACHE_CLASSES && !thr->mcache[slot]) {
            thr->mcache[slot] = p;
            thr->mcache_cls[slot] = (uint8_t)cls;
            return;
        }
    } else {
        NBM_STAT_SUB(medium_live, 1);
    }
    (void)ar;
    cache_put(p, cls, false);
}

void nbm__medium_slots_release(nbm_thread_t *thr, bool *any)
{
    for (unsigned k = 0; k < NBM_MCACHE_ORDERS; k++)
        if (thr->mcache[k]) {
            void *p = thr->mcache[k];
            thr->mcache[k] = NULL;
            cache_put(p, thr->mcache_cls[k], false);
            *any = true;
        }
}

/* A free medium block leaves use: to the decay cache if the policy keeps
 * blocks at all (and the optional fixed cap has room), else back to the
 * back-end purged. Once per epoch one caller sweeps. With page, the block is
 * an empty page's whose unit words are kept while it is cached (a second
 * free of one of its objects is still a double free); they are cleared when
 * it leaves the cache as a medium block or for the back-end. */
static void cache_put(void *p, unsigned cls, bool page)
{
    uint64_t now = nbm__os_now_ns();
    if (nbm__decay_give(&policy[cls], class_bytes(cls), now))
        cache_hold(p, cls, page);
    else
        release(nbm__arena_of((uintptr_t)p), p, cls);
    maybe_sweep(now);
}

/* The free block p of class cls joins the cache, held by the class's
 * policy, if the optional fixed cap has room (else, or with no descriptor
 * to be had, it goes back to the back-end purged). */
static void cache_hold(void *p, unsigned cls, bool page)
{
    size_t size = class_bytes(cls);
    uint32_t d = 0;
    if (nbm__opt.cache_max == UINT64_MAX || NBM_STAT(medium_cached) + size <= nbm__opt.cache_max)
        d = nbm__desc_get(nbm__thr); /* 0 when out of memory: straight back */
    if (!d) {
        release(nbm__arena_of((uintptr_t)p), p, cls);
        return;
    }
    nbm_desc_t *ds = nbm__desc(d);
    ds->list = p;
    ds->count = cls;
    ds->bump = page ? NBM_PAGE_UNITS : NULL;
    NBM_STAT_ADD(medium_cached, size);
    /* Counted before it can be popped: a pop's unhold never runs first
     * (held would wrap, and a sweep reading it would return everything). */
    nbm__decay_hold(&policy[cls], size);
    nbm__stack_push(&decay[cls], &nbm__desc_pool, d, d);
}

void nbm__medium_release(void *p, unsigned order)
{
    cache_put(p, class_of_order(order), false);
}

/* How many cached blocks of `size` the policy returns now, given its excess:
 * while less than half of it (rounded up) went back and a block still fits. */
static size_t blocks_due(size_t excess, size_t size)
{
    size_t due = excess - excess / 2, n = 0;
    while ((n + 1) * size <= excess && n * size < due)
        n++;
    return n;
}

/* Detaches each order's stack, releases what the policy says is beyond the
 * window's peak (all of it if `all`), oldest blocks first (the stack's
 * bottom), and pushes the rest back as one chain. Blocks are ours while
 * detached, so purging them cannot race with a user. */
void nbm__decay_sweep(bool all)
{
    uint64_t now = nbm__os_now_ns();
    nbm_thread_t *thr = nbm__thr;
    for (unsigned cls = 0; cls < NBM_MCLASSES; cls++) {
        size_t size = class_bytes(cls), n = SIZE_MAX;
        if (!all) {
            n = blocks_due(nbm__decay_excess(&policy[cls], now), size);
            if (n == 0)
                continue;
        }
        uint32_t d = nbm__stack_pop_all(&decay[cls]);
        size_t count = 0;
        for (uint32_t k = d; k; k = nbm_load_u32_relaxed(&nbm__desc(k)->next))
            count++;
        size_t keep = count > n ? count - n : 0;
        uint32_t keep_first = keep ? d : 0, keep_last = 0;
        for (size_t i = 0; d; i++) {
            nbm_desc_t *ds = nbm__desc(d);
            uint32_t next = nbm_load_u32_relaxed(&ds->next);
            if (i < keep) {
                keep_last = d; /* the chain up to here stays linked as it is */
            } else {
                nbm_arena_t *ar = nbm__arena_of((uintptr_t)ds->list);
                NBM_STAT_SUB(medium_cached, size);
                nbm__decay_unhold(&policy[cls], size);
                release(ar, ds->list, cls);
                nbm__desc_put(thr, d);
            }
            d = next;
        }
        if (keep_first)
            nbm__stack_push(&decay[cls], &nbm__desc_pool, keep_first, keep_last);
    }
}

/* --- moving resident pages (one budget for all sizes) ----------------------
 *
 * A move gives the moved pages a mapping (VMA) of their own in the kernel:
 * they keep their source's offset, so they cannot merge with their new
 * neighbours, and the mapping they land in is cut in two around them (the
 * source stays as it was). A move that continues the thread's previous one
 * (source and destination both right after it) extends that mapping instead.
 * A process has a limited number of mappings (vm.max_map_count, 65530 by
 * default), so at most nbm__opt.move_budget moves (two mappings each;
 * NBM_MOVE_BUDGET, 4096 by default) are outstanding: a move beyond it is not
 * made, and the request faults in its memory instead. Each is counted in its
 * destination block's extent word; mapping the block afresh (heal: mmap
 * MAP_FIXED over it, when it is purged) merges it back into its neighbours
 * and gives its count back. The count stays with the block through its
 * use as a page, and cannot saturate (16 bits, the budget at most 16384):
 * a count lost would lower the budget for good (one lost at every block
 * going medium -> page -> back-end drained it to nothing). Above a block's moved_top (every
 * range moved into it lies below) the block is one mapping; below, a move
 * out makes one mapping per piece (Linux 6.17 and later; before, it fails),
 * so the pieces multiply (2,929 mappings after 1,000 replacements of
 * `large-blocks`): such moves are made only while the process has few
 * mappings (maps_check). */
/* Moves outstanding, at most nbm__opt.move_budget (NBM_MOVE_BUDGET, 4096 by
 * default; read at start-up, before any move). */
static _Atomic uint32_t moves_out;
static _Thread_local uintptr_t last_src NBM_TLS, last_dst NBM_TLS; /* ends of the thread's last move */

static bool budget_take(void)
{
    uint32_t n = nbm_load_u32_relaxed(&moves_out);
    while (n < nbm__opt.move_budget && !nbm_cas_u32(&moves_out, &n, n + 1))
        ;
    return n < nbm__opt.move_budget;
}

static void budget_give(uint32_t k)
{
    uint32_t n = nbm_load_u32_relaxed(&moves_out);
    while (!nbm_cas_u32(&moves_out, &n, k > n ? 0 : n - k))
        ;
}

static bool budget_left(void)
{
    return nbm_load_u32_relaxed(&moves_out) < nbm__opt.move_budget;
}

bool nbm__medium_may_move(const void *dst, const void *src)
{
    return ((uintptr_t)src == last_src && (uintptr_t)dst == last_dst) || budget_left();
}

/* The block at p (of order >= NBM_MOVE_ORDER, ours alone) mapped afresh:
 * empty, purged, its moves' mappings merged away and their budget back. If
 * the kernel refuses, it is purged as usual and the count stays. */
static void heal(nbm_arena_t *ar, void *p, unsigned cls)
{
    _Atomic uint32_t *ext = extent_of(ar, p);
    uint32_t frags = EXT_FRAGS(nbm_load_u32_relaxed(ext));
    if (nbm__os_renew(p, class_bytes(cls))) {
        nbm_store_u32_relaxed(ext, 0);
        nbm_store_u32_relaxed(moved_top_of(ar, p), 0);
        budget_give(frags);
    } else {
        nbm_store_u32_relaxed(ext, EXT(0, frags));
    }
}

/* Moves out of ranges of several mappings (below a block's moved top) are
 * made while the process has few mappings: now and then (after
 * NBM_MAPS_EVERY moves, or an eighth of the mappings counted last if more:
 * counting costs about 1.4 us a mapping, so about 11 us a move at most) one
 * thread counts them (/proc/self/maps) and allows such moves below
 * NBM_MAPS_LOW, forbids them above NBM_MAPS_HIGH (or if it cannot count,
 * or a kernel before 6.17 refused one). */
#define NBM_MAPS_EVERY 128u
#define NBM_MAPS_LOW   4096u
#define NBM_MAPS_HIGH  8192u
static _Atomic uint32_t pieces_ok = 1, pieces_never, moves_seen, maps_due = NBM_MAPS_EVERY;

static void maps_check(uint32_t seen)
{
    uint32_t due = nbm_load_u32_relaxed(&maps_due);
    if (seen < due || !nbm_cas_u32(&maps_due, &due, UINT32_MAX))
        return; /* not yet, or another thread counts */
    size_t n = nbm__os_mappings();
    if (n > NBM_MAPS_HIGH)
        nbm_store_u32_relaxed(&pieces_ok, 0);
    else if (n < NBM_MAPS_LOW && !nbm_load_u32_relaxed(&pieces_never))
        nbm_store_u32_relaxed(&pieces_ok, 1);
    size_t gap = n != SIZE_MAX && n / 8 > NBM_MAPS_EVERY ? n / 8 : NBM_MAPS_EVERY;
    nbm_store_u32_relaxed(&maps_due, seen + (uint32_t)gap);
}

bool nbm__medium_move(char *block, char *dst, void *src, size_t len, bool pieces)
{
    bool extends = !pieces && (uintptr_t)src == last_src && (uintptr_t)dst == last_dst;
    if (!extends && !budget_take())
        return false;
    if (!nbm__os_move(src, len, dst)) {
        if (pieces) {
            nbm_store_u32_relaxed(&pieces_never, 1);
            nbm_store_u32_relaxed(&pieces_ok, 0);
        }
        if (!extends)
            budget_give(1);
        return false;
    }
    maps_check(nbm_add_u32(&moves_seen, 1) + 1);
    last_src = (uintptr_t)src + len;
    last_dst = (uintptr_t)dst + len;
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)block);
    if (!extends) {
        _Atomic uint32_t *ext = extent_of(ar, block);
        nbm_store_u32_relaxed(ext, nbm_load_u32_relaxed(ext) + EXT(0, 1));
    }
    _Atomic uint32_t *mt = moved_top_of(ar, block);
    uint32_t end = (uint32_t)((size_t)(dst + len - block) >> NBM_PAGE_SHIFT);
    if (end > nbm_load_u32_relaxed(mt))
        nbm_store_u32_relaxed(mt, end);
    NBM_STAT_ADD(moved, len);
    return true;
}

/* Sources looked at, and moves made, per fill at most: a bound on the work
 * of one allocation. */
#define NBM_FILL_SOURCES 8
#define NBM_FILL_CALLS   16
#define NBM_SCAN_PAGES   512 /* pages one residency query covers (2 MiB) */

/* Moves up to `need` resident pages of the cached block b (pages [0, *e)
 * may be resident) to dst in `block`, from the top of b down, a run of
 * resident pages per move; *e drops to the lowest page scanned (nothing
 * above it is resident now). Returns the pages moved; *ok false when a move
 * failed. */
static size_t take_top(char *b, uint32_t *e, size_t floor, size_t mtop, char *block, char *dst, size_t need, unsigned *calls, bool *ok)
{
    unsigned char vec[NBM_SCAN_PAGES];
    size_t got = 0, top = *e;
    while (top > floor && got < need && *calls < NBM_FILL_CALLS) {
        size_t n = top - floor < NBM_SCAN_PAGES ? top - floor : NBM_SCAN_PAGES, lo = top - n, i = n;
        nbm__os_resident(b + (lo << NBM_PAGE_SHIFT), n, vec);
        while (i && got < need && *calls < NBM_FILL_CALLS) {
            while (i && !vec[i - 1])
                i--;
            size_t j = i;
            while (j && vec[j - 1] && i - j < need - got)
                j--;
            if (j == i)
                break;
            (*calls)++;
            if (!nbm__medium_move(block, dst + (got << NBM_PAGE_SHIFT), b + ((lo + j) << NBM_PAGE_SHIFT),
                                  (i - j) << NBM_PAGE_SHIFT, lo + j < mtop)) {
                *ok = false;
                *e = (uint32_t)(lo + i);
                return got;
            }
            got += i - j;
            i = j;
        }
        top = lo + i;
    }
    *e = (uint32_t)top;
    return got;
}

/* Cached blocks of NBM_MOVE_ORDER and up, the largest orders first, each
 * popped (ours alone until pushed back), give what they have resident from
 * their top down (take_top), and their extent shrinks. A block stays cached (its address space costs
 * nothing; the policy returns it as any other). A page's block forgets its
 * unit words first: a stale free of one of its objects would read zeros. */
size_t nbm__medium_fill(char *block, size_t off, size_t len)
{
    size_t need = len >> NBM_PAGE_SHIFT, done = 0;
    unsigned tried = 0, calls = 0;
    bool ok = true;
    /* With the budget spent, no source is popped, scanned (mincore) or has
     * its page's unit words forgotten for a move that would be refused.
     * (Its first move never extends the last one: take_top moves the top
     * of what is resident, so nothing resident follows a source's moved
     * range.) */
    if (!budget_left())
        return 0;
    for (unsigned cls = NBM_MCLASSES - 1; ok && cls >= NBM_MOVE_CLASS && done < need && tried < NBM_FILL_SOURCES; cls--) {
        uint32_t first = 0, last = 0;
        while (ok && done < need && tried < NBM_FILL_SOURCES && calls < NBM_FILL_CALLS) {
            uint32_t d = nbm__stack_pop(&decay[cls], &nbm__desc_pool);
            if (!d)
                break;
            tried++;
            if (last)
                nbm_store_u32_relaxed(&nbm__desc(last)->next, d);
            else
                first = d;
            last = d;
            nbm_desc_t *ds = nbm__desc(d);
            char *b = ds->list;
            nbm_arena_t *ar = nbm__arena_of((uintptr_t)b);
            _Atomic uint32_t *ext = extent_of(ar, b);
            uint32_t w = nbm_load_u32_relaxed(ext), e = EXT_PAGES(w);
            uint32_t mtop = nbm_load_u32_relaxed(moved_top_of(ar, b));
            uint32_t floor = nbm_load_u32_relaxed(&pieces_ok) ? 0 : mtop;
            if (e <= floor)
                continue; /* nothing resident above what moves cut up (see above) */
            if (ds->bump == NBM_PAGE_UNITS) {
                nbm__page_forget(b, class_order(cls));
                ds->bump = NULL;
            }
            done += take_top(b, &e, floor, mtop, block, block + off + (done << NBM_PAGE_SHIFT), need - done, &calls, &ok);
            nbm_store_u32_relaxed(ext, EXT(e, EXT_FRAGS(w)));
        }
        if (first)
            nbm__stack_push(&decay[cls], &nbm__desc_pool, first, last);
    }
    return done << NBM_PAGE_SHIFT;
}
