/*
 * nbbs_internal.h - the instance, its geometry, and the node-state encoding.
 *
 * How nodes are named and stored, and the arithmetic on them, is in
 * nbbs_geometry.h; the protocol that changes the slots is in nbbs_core.inc.
 */
#ifndef NBBS_INTERNAL_H
#define NBBS_INTERNAL_H

#include "nbbs_atomic.h"
#include "nbbs_platform.h"

#include "nbbs.h"

/* Slot bits: the state of one stored node. */
#define SLOT_OCC    1u  /* the node itself (or a node above it in its row) is a live block */
#define SLOT_OCC_L  2u  /* something in the left subtree is occupied */
#define SLOT_OCC_R  4u  /* something in the right subtree is occupied */
#define SLOT_COAL_L 8u  /* a release in the left subtree is in progress */
#define SLOT_COAL_R 16u /* a release in the right subtree is in progress */
#define SLOT_BUSY   (SLOT_OCC | SLOT_OCC_L | SLOT_OCC_R)
#define SLOT_BITS   5u

/* Layout facts the code relies on. A BUNCH word is 8 slots (the bottom level
 * of a 4-level row: 8 + 4 + 2 + 1 = 15 nodes) and a 24-bit version above
 * them; a TREE byte is one slot, two owner bits and a spare bit
 * (nbbs_tree.c). A slot's state fits in its 5 bits. The index byte holds
 * order + 1 <= NBBS_MAX_ORDER + 1, below bit 6 (bits 6 and 7: per-block
 * flags). */
_Static_assert(SLOT_BUSY < (1u << SLOT_BITS) && (SLOT_COAL_R << 1) == (1u << SLOT_BITS),
               "slot bits fill exactly SLOT_BITS bits");
_Static_assert(8 * SLOT_BITS + 24 == 64, "a BUNCH word: 8 slots and a 24-bit version");
_Static_assert(1 * SLOT_BITS + 2 < 8, "a TREE byte: 1 slot and 2 owner bits");
_Static_assert(NBBS_MAX_ORDER + 1 < 64, "the index byte holds order + 1 below bit 6");

/* Index byte bit 7: the block is held by a frame cache (nbbs_cache.c), or is
 * a free frame of a carved block. Whoever clears it with a CAS owns the
 * block; nbbs_free, nbbs_block_size and a second nbbs_cache_free see it and
 * reject the block. */
#define NBBS_IDX_CACHED 0x80u
/* Index byte bit 6: the block is a frame carved from a block of order
 * NBBS_CARVE_ORDER that the tree holds as one live block (a cache's bulk
 * refill, nbbs_cache.c). The 8 index bytes of the carved block (one aligned
 * 64-bit word) describe its frames; the tree sees the carved block only. */
#define NBBS_IDX_CARVED 0x40u
#define NBBS_IDX_ORDER  0x3fu
#define NBBS_CARVE_ORDER 3u /* 8 leaves: their index bytes are one 64-bit word */

/* x repeated in each of the 8 slots of a 64-bit word. */
#define SLOT_REP(x) ((uint64_t)(x) * UINT64_C(0x842108421))
_Static_assert(SLOT_REP(31) == (UINT64_C(1) << 40) - 1, "SLOT_REP fills 8 slots and nothing else");

/* Scan start hints: up to NBBS_HINTS cells, one cache line each, picked by a
 * hash of the caller's stack address (so, in effect, per thread). Word k of
 * a cell holds the leaf where its last allocation (or free) of order k
 * succeeded (nbbs__hint_order); the next scan of that order starts there.
 * Small arenas get fewer cells: at most half a byte per min_block. */
#define NBBS_HINTS 64u
#define NBBS_HINT_STRIDE 8u /* uint64_t per cell: 64 bytes */
_Static_assert(NBBS_HINT_STRIDE * 8 == 64 && (NBBS_HINTS & (NBBS_HINTS - 1)) == 0,
               "hint cells: one cache line each, a power of two of them");

/* Placement (FN(alloc) in nbbs_search.inc, docs/design.md "Placement"): a
 * candidate that would split a free block smaller than a group is taken
 * unless one of the next NBBS_FIT_LOOK such candidates splits a smaller one.
 * Before a free group (NBBS_GROUP_ORDER: 2 MiB of 4 KiB frames) is broken
 * for a smaller block, the scan visits up to NBBS_HOLE_VISITS groups whose
 * hole bit is set, found within NBBS_HOLE_WORDS words of the bitmap ahead. */
#define NBBS_FIT_LOOK    1u
#define NBBS_GROUP_ORDER 9u /* default of nbbs_config_t.group_order */
#define NBBS_HOLE_VISITS 8u
#define NBBS_HOLE_WORDS  64u
/* The loser of a race for a wholly free tree chooses again from the middle
 * of the run of free trees after it, of which it looks at up to
 * NBBS_RUN_LOOK (FN(run_middle) in nbbs_search.inc). */
#define NBBS_RUN_LOOK    64u

#define NBBS_MAGIC UINT64_C(0x6e6262732d763100) /* "nbbs-v1" */
#define NBBS_MAX_ROWS (NBBS_MAX_ORDER + 1)

/* Where the nodes of one level are stored (nbbs__pos, nbbs__up in
 * nbbs_geometry.h), computed once by nbbs_init from the row tables so that a
 * lookup is a few loads of one entry and shifts, not row arithmetic: node gp
 * of level r is in word off + q + (q >> tpw) * gap, q = gp >> cpw (the
 * level's words counted across the trees, 2^tpw of them per tree, so
 * q >> tpw = gp >> r is the node's tree; gap is the rest of a tree's block,
 * between one tree's words of the level and the next one's). */
typedef struct nbbs_level {
    uint64_t off;   /* first word of the level's row inside a tree's block (row_off) */
    uint64_t gap;   /* tree_words - 2^tpw */
    uint8_t  cpw;   /* log2(nodes of this level per word): row_spw_log - depth */
    uint8_t  tpw;   /* log2(words of this level per tree): level - cpw */
    uint8_t  depth; /* row_bottom - level: a node has 2^depth slots */
    uint8_t  width; /* SLOT_BITS << depth: a node's bits in its word */
    uint8_t  top;   /* row_top of the level's row (where a climb leaves the row) */
} nbbs_level_t;

struct nbbs {
    uint64_t  magic;
    NBBS_ATOMIC(uint64_t) caches; /* attached frame caches: a push-only list (nbbs_cache.c) */
    uintptr_t base;
    size_t    arena_size;
    size_t    min_block;
    size_t    meta_size;
    size_t    tree_bytes;
    size_t    index_bytes;
    uint64_t  nleaves;   /* arena_size / min_block */
    uint64_t  ntrees;    /* ceil(nleaves / 2^max_order) */
    unsigned  min_shift; /* log2(min_block) */
    unsigned  max_order;
    unsigned  lpw;       /* levels per row: 1 (TREE) or 4 (BUNCH) */
    unsigned  nrows;
    unsigned  hint_mask; /* number of hint cells - 1 (a power of two) */
    unsigned  group_order; /* order of a "group" (2 MiB of 4 KiB frames): see holes */
    uint64_t  ngroups;
    bool      hosted;    /* metadata from nbbs_create */
    /* Per row k (0 = the row holding the leaves). */
    uint8_t   row_bottom[NBBS_MAX_ROWS]; /* level of the stored nodes */
    uint8_t   row_top[NBBS_MAX_ROWS];    /* level of the row's top nodes */
    uint8_t   row_spw_log[NBBS_MAX_ROWS];/* log2(slots per word) */
    uint64_t  row_off[NBBS_MAX_ROWS];    /* first word of the row inside a tree's block */
    uint64_t  tree_words;                /* words per tree */
    NBBS_ATOMIC(uint64_t) *hints; /* NBBS_HINTS cells, NBBS_HINT_STRIDE apart */
    NBBS_ATOMIC(uint64_t) *holes; /* a bit per group: a block smaller than a group was freed in it
                                   * since a scan last found it full (a heuristic, see nbbs__hole_mark) */
    NBBS_ATOMIC(uint64_t) *strays;/* a bit per block of NBBS_CARVE_ORDER: a carved block there may hold free
                                   * frames that no cache's stack or ring names (nbbs_carve.h, stray_mark) */
    void                  *words; /* NBBS_ATOMIC(uint8_t)[] (TREE) or (uint64_t)[] (BUNCH) */
    NBBS_ATOMIC(uint8_t)  *index; /* per leaf: order + 1 of the live block starting there, or 0 */
    NBBS_ATOMIC(uint32_t) *gfree; /* per group: at least the leaves in its free blocks of orders
                                   * NBBS_COUNT_ORDER to group_order - 1 (nbbs__count); NULL
                                   * without NBBS_GROUP_COUNTS */
    nbbs_level_t level[];         /* per level 0..max_order: derived from the rows (nbbs_init) */
};

/* The instance's header in its metadata: the struct and its level table. */
#define NBBS_HEADER_BYTES(max_order) \
    ALIGN_UP(sizeof(struct nbbs) + ((size_t)(max_order) + 1) * sizeof(nbbs_level_t), NBBS_META_ALIGN)

/* Geometry of a configuration, computed without touching memory. */
typedef struct nbbs_geom {
    size_t   min_block;
    unsigned min_shift, max_order, lpw, nrows, nhints, group_order;
    uint64_t nleaves, ntrees, nwords, ngroups;
    size_t   word_size, hint_bytes, hole_bytes, count_bytes, stray_bytes, tree_bytes, index_bytes, meta_size;
} nbbs_geom_t;

/* Fills g; returns false if the configuration is invalid. */
bool nbbs__geometry(size_t arena_size, const nbbs_config_t *cfg, nbbs_geom_t *g);

/* Layout-specific halves, generated from nbbs_core.inc. how: NBBS_SCAN_*. */
#define NBBS_SCAN_RECLAIM   1u /* no block found: return nbbs__reclaim's */
#define NBBS_SCAN_UNCOUNTED 2u /* the caller takes the block off its group's free count (a frame cache's balance) */
void *nbbs__tree_alloc(nbbs_t *b, unsigned order, unsigned how);
void  nbbs__tree_release(const nbbs_t *b, unsigned r, uint64_t gp);
bool  nbbs__tree_take(const nbbs_t *b, unsigned r, uint64_t gp);
void *nbbs__bunch_alloc(nbbs_t *b, unsigned order, unsigned how);
void  nbbs__bunch_release(const nbbs_t *b, unsigned r, uint64_t gp);
bool  nbbs__bunch_take(const nbbs_t *b, unsigned r, uint64_t gp);

static inline bool nbbs__is_bunch(const nbbs_t *b) { return b->lpw == 4; }

/* The layout's search for a block of order (FN(alloc)); how: NBBS_SCAN_*.
 * 0 is the tree's own allocation, without the reclaim from frame caches;
 * NBBS_SCAN_UNCOUNTED leaves the block on its group's free count for the
 * caller to take off (a frame cache's refill: cache_count_take). (With
 * NBBS_SCAN_RECLAIM, FN(alloc) that finds no block returns nbbs__reclaim's
 * result: nbbs_alloc_order then ends in a jump to it, with nothing of its
 * own to keep across the call.) */
static inline void *nbbs__scan(nbbs_t *b, unsigned order, unsigned how)
{
    return nbbs__is_bunch(b) ? nbbs__bunch_alloc(b, order, how) : nbbs__tree_alloc(b, order, how);
}

/* Under pressure (the tree found no block of order): take a block of that
 * order from any frame cache, else return every cached block to the tree
 * and scan once more. NULL if that finds none either (nbbs_cache.c). */
void *nbbs__reclaim(nbbs_t *b, unsigned order);

/* nbbs_free of a live carved frame (index byte v, NBBS_IDX_CARVED set, not
 * cached): marks it free in its carved block, which goes back to the tree
 * whole once every frame of it is free (nbbs_cache.c). 0 or NBBS_EINVAL. */
int nbbs__carved_free(nbbs_t *b, uint64_t leaf, uint8_t v);

/* nbbs_free after its CAS took the index entry of the block at leaf to 0:
 * the hint, the tree's release (nbbs_alloc.c). count: put the block back on
 * its group's free count first; false when a frame cache's balance covers
 * it already (nbbs_cache_t.cbal). */
void nbbs__free_leaf(nbbs_t *b, uint64_t leaf, unsigned order, bool count);

/* The calling context's hint cell. Where the platform names the running CPU
 * (NBBS_CPU_ID: the kernel), the CPU's own cell. Elsewhere a hash of the
 * stack address: thread stacks are far more than 64 KiB apart, and a thread's
 * own stack pointer rarely crosses a 64 KiB line. (Kernel stacks are 16 KiB
 * apart, which is why the kernel uses the CPU instead.) */
static inline NBBS_ATOMIC(uint64_t) *nbbs__hint(const nbbs_t *b)
{
#ifdef NBBS_CPU_ID
    uint64_t cell = (uint64_t)NBBS_CPU_ID();
#else
    volatile char probe = 0;
    uint64_t cell = (((uint64_t)(uintptr_t)&probe >> 16) * UINT64_C(0x9E3779B97F4A7C15)) >> 40;
#endif
    return &b->hints[(cell & b->hint_mask) * NBBS_HINT_STRIDE];
}

/* Where hint cell ci starts (every order's word; nbbs_init): the slot named
 * by ci's bits reversed, of as many slots as cells (a power of two), so that
 * cells with nearby numbers start far apart. Where the cell is the CPU
 * (NBBS_CPU_ID), CPUs 0, 1, 2 and 3 start at 0, 1/2, 1/4 and 3/4 of the
 * arena; in order (ci / cells) the first two would start in one 2 MiB group
 * of a 64 MiB arena (64 cells, 1 MiB apart). Needs b->nleaves and
 * b->hint_mask. */
static inline uint64_t nbbs__cell_start(const nbbs_t *b, unsigned ci)
{
    unsigned cells = (unsigned)b->hint_mask + 1u, r = 0;
    for (unsigned m = 1, t = cells >> 1; m < cells; m <<= 1, t >>= 1)
        if (ci & m)
            r |= t;
    return (b->nleaves * r) >> __builtin_ctz(cells);
}

/* The calling context's hint for blocks of one order: word `order` of its
 * cell (orders from NBBS_HINT_STRIDE - 1 up share the last word). One fill
 * point per order, as a free-list buddy keeps a list per order: an order-0
 * allocation goes on filling the holes behind a larger one instead of
 * following it to fresh space (docs/design.md, "Placement"). */
static inline NBBS_ATOMIC(uint64_t) *nbbs__hint_order(const nbbs_t *b, unsigned order)
{
    return nbbs__hint(b) + (order < NBBS_HINT_STRIDE - 1 ? order : NBBS_HINT_STRIDE - 1);
}

/* Index of the leaf at address p, or UINT64_MAX if p is not a min_block
 * boundary inside the arena. */
static inline uint64_t nbbs__leaf_of(const nbbs_t *b, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (a < b->base || a - b->base >= b->arena_size || ((a - b->base) & (b->min_block - 1)))
        return UINT64_MAX;
    return (uint64_t)(a - b->base) >> b->min_shift;
}

/* The group free counts (nbbs_t.gfree, docs/design.md "Group free
 * counts"). A group's count starts at its size; a block of an order from
 * NBBS_COUNT_ORDER to group_order - 1 takes its leaves off when it has been
 * won (after its claim's climb succeeded: FN(taken), or FN(take)'s caller,
 * which may do it later and for several blocks at once) and puts them back
 * before its release starts (free_leaf). So a count is never below the
 * leaves of its group that lie in free blocks smaller than the group, and a
 * scan for order k may pass by a group whose count is below 2^k: no free
 * block of order k is in it. (A claim that is undone is never counted: it
 * may lie inside a live block whose leaves are off the count already.)
 * Kept only with NBBS_GROUP_COUNTS (gfree not NULL): the adds cost the
 * paper's workloads (8-byte units, sizes 8 B to 1 KiB) 7-20 % per pair.
 * Orders below NBBS_COUNT_ORDER are not counted: their allocations and
 * frees pay no RMW (an uncontended lock add cost BUNCH's order-0 pair 15 %),
 * and their leaves only make a count high. A frame cache's small orders
 * come from carved blocks of NBBS_CARVE_ORDER, which are counted, so the
 * caches' failing scans near full are the ones the counts shorten. */
#define NBBS_COUNT_ORDER 3u
_Static_assert(NBBS_COUNT_ORDER <= NBBS_CARVE_ORDER, "carved blocks must be counted");

static inline void nbbs__count_n(const nbbs_t *b, unsigned order, uint64_t leaf, uint32_t n, bool back)
{
    if (b->gfree && order >= NBBS_COUNT_ORDER && order < b->group_order) {
        n <<= order;
        nb_count_add(&b->gfree[leaf >> b->group_order], back ? n : (uint32_t)0 - n);
    }
}
static inline void nbbs__count(const nbbs_t *b, unsigned order, uint64_t leaf, bool back)
{
    nbbs__count_n(b, order, leaf, 1, back);
}

/* The hole bitmap: a bit per group (a block of order group_order), set when
 * a block smaller than a group is freed in it, cleared by a scan that is
 * about to look at the group for a hole. A heuristic for placement only
 * (a stale bit costs a look, a missing one a hole not found), but lossless:
 * a free sets the bit after its release, with a seq_cst load (and an OR only
 * on a 0 -> 1 change, so the usual free writes nothing); a scan clears the
 * bit before it looks. In the single total order of these seq_cst
 * operations, either the free's load comes after the clear and sets the bit
 * again, or its release came before the scan's look, which then sees it. */
typedef struct nbbs_hole {
    NBBS_ATOMIC(uint64_t) *w; /* the bitmap word of leaf's group */
    uint64_t               bit;
} nbbs_hole_t;

static inline nbbs_hole_t nbbs__hole_of(const nbbs_t *b, uint64_t leaf)
{
    uint64_t g = leaf >> b->group_order;
    return (nbbs_hole_t){ &b->holes[g >> 6], UINT64_C(1) << (g & 63) };
}

static inline void nbbs__hole_set(nbbs_hole_t h)
{
    if (!(nb_hole_load(h.w) & h.bit))
        nb_hole_or(h.w, h.bit);
}

static inline void nbbs__hole_mark(const nbbs_t *b, uint64_t leaf)
{
    nbbs__hole_set(nbbs__hole_of(b, leaf));
}

/* A block smaller than a group was taken at the first leaf of its group,
 * breaking the free group (or as the hint's own candidate): the context
 * will fill that group from its start (its hint is there), so other
 * contexts' visits should not crowd into it, and their scans pass it by
 * (FN(claimed) in nbbs_search.inc). Clear the bit (a load first, so
 * a clear bit costs no write). Only at the group's start, where no hole can be
 * left behind the filling context: clearing on every take stranded holes
 * behind the taker and lost most free groups in the churn experiment. A free
 * that loads the bit just before this clear loses its mark (a hole the
 * visits miss, plain scans still find). */
static inline void nbbs__hole_entered(const nbbs_t *b, uint64_t leaf)
{
    uint64_t g = leaf >> b->group_order;
    NBBS_ATOMIC(uint64_t) *w = &b->holes[g >> 6];
    uint64_t bit = UINT64_C(1) << (g & 63);
    if (nb_hole_load(w) & bit)
        nb_hole_and(w, ~bit);
}

/* Whether the group of leaf has its hole bit set (a load only). */
static inline bool nbbs__hole_test(const nbbs_t *b, uint64_t leaf)
{
    uint64_t g = leaf >> b->group_order;
    return (nb_hole_load(&b->holes[g >> 6]) >> (g & 63)) & 1;
}

/* The first group after g0 (wrapping; within NBBS_HOLE_WORDS words of the
 * bitmap) whose hole bit is set, its bit cleared; UINT64_MAX if none. */
static inline uint64_t nbbs__hole_take(const nbbs_t *b, uint64_t g0)
{
    uint64_t nw = (b->ngroups + 63) >> 6;
    uint64_t g = g0 + 1 < b->ngroups ? g0 + 1 : 0;
    uint64_t wi = g >> 6, mask = ~UINT64_C(0) << (g & 63);
    for (uint64_t i = 0; i <= nw && i < NBBS_HOLE_WORDS; i++) {
        uint64_t v = nb_hole_load(&b->holes[wi]) & mask;
        if (v) {
            unsigned bit = (unsigned)__builtin_ctzll(v);
            nb_hole_and(&b->holes[wi], ~(UINT64_C(1) << bit));
            return (wi << 6) + bit;
        }
        mask = ~UINT64_C(0);
        wi = wi + 1 < nw ? wi + 1 : 0;
    }
    return UINT64_MAX;
}

#endif /* NBBS_INTERNAL_H */
