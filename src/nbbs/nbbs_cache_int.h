/*
 * nbbs_cache_int.h - the frame cache's private layout and the helpers that
 * both its files use: nbbs_cache.c (the owner's operations) and
 * nbbs_reclaim.c (giving cached blocks back: drains, and the pressure path
 * that takes them from any cache). Private to the back-end.
 */
#ifndef NBBS_CACHE_INT_H
#define NBBS_CACHE_INT_H

#include "nbbs_carve.h"
#include "nbbs_internal.h"

#define CACHE_MAGIC UINT64_C(0x6e6262732d636331) /* "nbbs-cc1" */
#define CACHE_MAX_CAPACITY (1u << 20)
#define CACHE_PARTS 64u /* carved blocks with free frames a cache remembers per order (a power of two) */
#define CACHE_PROBES 4 /* blocks a refill's take_next looks at past its last one */
#define CACHE_BACKOFF 8 /* refills that skip carving after the tree had no block for it */
#define CACHE_LOST_WORDS 8u /* per order: a private map of 512 regions of the arena (lost) */
#define ALIGN_UP(x, a) (((x) + ((size_t)(a) - 1)) & ~((size_t)(a) - 1))

struct nbbs_cache {
    uint64_t               magic;
    nbbs_t                *b;
    NBBS_ATOMIC(uint64_t)  next;     /* the next cache attached to b; set before the cache is published */
    unsigned               orders, batch, capacity;
    /* Per order: carved blocks per refill (0: the order is refilled frame by
     * frame, as orders >= NBBS_CARVE_ORDER always are). */
    unsigned               groups[NBBS_CACHE_MAX_ORDERS];
    /* Per order: carved blocks that a drain left with free frames of that
     * order but could not return whole (some frame live). A refill names
     * their free frames again before it carves a new block, so frames freed
     * into a carved block are reused first and the block fills up (or
     * empties) instead of lingering half used. Owner only, plain. */
    uint64_t               part[NBBS_CARVE_ORDER][CACHE_PARTS];
    unsigned               nparts[NBBS_CARVE_ORDER];
    unsigned               ptop[NBBS_CARVE_ORDER]; /* part[] is a ring: the next entry to write, mod CACHE_PARTS */
    /* Per order: the regions of the arena (at most 512, of a power of two
     * of carved blocks each: one in small arenas) that hold a carved
     * block the full ring wrote over, its free frames named nowhere. The
     * owner's next stranded refill of the order (or non-carving refill,
     * every order) reads the index words
     * of those regions and marks their blocks with free frames in the
     * shared stray bitmap, one RMW per bitmap word, so that every cache's
     * harvest sees them. Private (owner only, plain): marking the shared
     * bitmap at each overflow (every drained frame, in a phase of frees)
     * took a load and often a write on a line every CPU marks. */
    uint64_t               lost[NBBS_CARVE_ORDER][CACHE_LOST_WORDS];
    unsigned               lost_shift; /* a region of lost: 2^lost_shift carved blocks */
    /* Per order: refills left that do not try to carve (the tree had no
     * block of the carve order lately: a failed tree scan is costly). */
    unsigned               backoff[NBBS_CACHE_MAX_ORDERS];
    /* Per order: refills left that take one block from the tree instead of
     * a batch (a refill's search for a block of that order failed lately:
     * near full, the search that ends a batch walks the whole arena, and
     * blocks held in a cache are missing to the other orders). */
    unsigned               lean[NBBS_CACHE_MAX_ORDERS];
    /* Per order below the carve order: refills left that do not harvest
     * when they could not carve (a harvest looked at the whole arena and
     * found no free frame of the order). */
    unsigned               dry[NBBS_CARVE_ORDER];
    /* Per order below the carve order: a drain of this cache left free
     * frames in carved blocks it could not return whole since a harvest
     * last came back empty. A refill then harvests before it carves, so the
     * frames freed into carved blocks are used before new blocks are cut
     * from the tree (which would break free huge blocks). Owner only. */
    bool                   stranded[NBBS_CARVE_ORDER];
    uint64_t               swept[NBBS_CARVE_ORDER]; /* carved blocks the empty harvests since looked at */
    /* Per order below the carve order: the leaf just past the block this
     * cache carved last (0: none). A refill takes the block there in place,
     * without the tree's search, while the one before it is still carved
     * and both lie in one group (take_next). Owner only, plain. */
    uint64_t               cursor[NBBS_CARVE_ORDER];
    /* Per order below the carve order: a carved word of free frames of that
     * order, as a refill writes it (built once, in memory order). */
    uint64_t               pattern[NBBS_CARVE_ORDER];
    /* This cache's balance in group cgroup's free count: how many blocks of
     * the carve order (CARVE_LEAVES leaves each) the count holds above the
     * truth on its account. A block of that order the refill takes (in
     * place, take_next, or by a search: tree_take) adds one instead of an
     * RMW that takes it off; one this cache gives back (carved or cached
     * whole) uses one up instead of an RMW that puts it back before the
     * release (cache_count_cover raises CACHE_COVER_AHEAD more when none is
     * left). Meaningful only with counts kept for that order. The
     * balance goes to the count in one RMW when the cache moves on to
     * another group, finds the tree short, or drains (cache_count_flush).
     * Never negative, so a count is never below the truth; a count high
     * for a while only costs scans a look (docs/design.md, "Group free
     * counts"); nbbs_validate adds the balances back. Owner only, plain. */
    uint64_t               cgroup;
    uint32_t               cbal;
    /* Per order: how many entries of its stack are in use. Written by the
     * owner only; read by other threads as a bound of their sweep. */
    NBBS_ATOMIC(uint64_t)  count[NBBS_CACHE_MAX_ORDERS];
    NBBS_ATOMIC(uint64_t) *slot;     /* orders stacks of capacity leaf numbers */
};

static inline nbbs_cache_t *cache_of(uint64_t v) { return (nbbs_cache_t *)(uintptr_t)v; }

#define CACHE_COVER_AHEAD 7u /* carved blocks' worth a cover raises beyond the one it needs */

/* The balance (c->cbal) goes to its group's count: exact again. Owner only. */
static inline void cache_count_flush(nbbs_cache_t *c)
{
    if (c->cbal)
        nbbs__count_n(c->b, NBBS_CARVE_ORDER, c->cgroup << c->b->group_order, c->cbal, false);
    c->cbal = 0;
}

/* A block of the carve order at leaf g0 was taken for the cache: its
 * leaves stay on the count, on this cache's balance. Owner only. */
static inline void cache_count_take(nbbs_cache_t *c, uint64_t g0)
{
    if (!c->b->gfree)
        return; /* no counts kept (NBBS_GROUP_COUNTS) */
    uint64_t g = g0 >> c->b->group_order;
    if (g != c->cgroup) {
        cache_count_flush(c);
        c->cgroup = g;
    }
    c->cbal++;
}

/* The carved block at leaf g0 is about to go back to the tree: make sure
 * the balance covers it (the count holds its leaves already), else raise
 * its group's count for it: for it alone if the balance was in another
 * group (blocks given back in no order, as after rand's frees, would each
 * raise ahead and give back what they did not use), for it and
 * CACHE_COVER_AHEAD more blocks if the group is the balance's (blocks
 * given back in a row, as a drain of a sequential free does). The caller
 * uses one unit up if the block went back. Owner only. Returns whether the
 * balance covers the block: false with no cache (c NULL: another thread's
 * give-back) or no counts kept, and the caller counts as nbbs_free does. */
static inline bool cache_count_cover(nbbs_cache_t *c, uint64_t g0)
{
    if (!c || !c->b->gfree)
        return false;
    uint64_t g = g0 >> c->b->group_order;
    uint32_t n = 1;
    if (g == c->cgroup) {
        if (c->cbal)
            return true;
        n += CACHE_COVER_AHEAD;
    } else {
        cache_count_flush(c);
        c->cgroup = g;
    }
    nbbs__count_n(c->b, NBBS_CARVE_ORDER, g0, n, true);
    c->cbal = n;
    return true;
}

/* The region of c->lost that carved block g (a leaf / 8) falls in: regions
 * of 2^lost_shift blocks, as few as fit the map. A shift, not g * 512 / ng:
 * in stress nearly every drained frame of a half-used block overflows the
 * ring and lands here, and the division was one of the drain's costliest
 * instructions. */
static inline uint64_t lost_region(const nbbs_cache_t *c, uint64_t g)
{
    return g >> c->lost_shift;
}

static inline NBBS_ATOMIC(uint64_t) *stack_of(nbbs_cache_t *c, unsigned order)
{
    return c->slot + (size_t)order * c->capacity;
}

/* Take the cached block of this order at leaf for its next user: its index
 * byte loses NBBS_IDX_CACHED. False if the block is not cached with this
 * order any more (someone else took it). A whole block and a carved frame
 * alike: the byte says which. */
static inline bool claim(const nbbs_t *b, uint64_t leaf, unsigned order)
{
    /* Look first: a stale entry costs a load, not a failed locked CAS, and a
     * CAS that fails then failed because another thread took the block
     * between the two (the explorer checks exactly that of every CAS). */
    uint8_t v = nb_load_u8(&b->index[leaf]);
    if ((v & (NBBS_IDX_CACHED | NBBS_IDX_ORDER)) != (NBBS_IDX_CACHED | (order + 1u)))
        return false;
    return nb_cas_u8(&b->index[leaf], &v, (uint8_t)(v & ~NBBS_IDX_CACHED));
}

/* Give the cached blocks named by entries [from, to) of a stack of this
 * order back (nbbs_reclaim.c); owner (or NULL) remembers carved blocks left
 * half used; bal (or NULL), the calling owner's cache, covers the group
 * free counts of the carved blocks that go back (cache_count_cover).
 * Returns blocks (frames of carved blocks) that went back. */
size_t nbbs__give_back(nbbs_t *b, nbbs_cache_t *owner, nbbs_cache_t *bal, NBBS_ATOMIC(uint64_t) *s,
                       uint64_t from, uint64_t to, unsigned order);

#endif /* NBBS_CACHE_INT_H */
