/*
 * nbbs_internal.h - the instance, its geometry, and the node-state encoding.
 *
 * Geometry. The arena is nleaves min_blocks, cut into ntrees trees of
 * 2^max_order leaves each (the last one possibly partial). A node is named by
 * its level r inside its tree (0 = tree root = a max-size block, max_order =
 * leaf) and its global position gp at that level, counting across all trees
 * left to right: gp in [0, ntrees << r). Its parent is (r - 1, gp >> 1), its
 * side is gp & 1, it covers leaves [gp << (max_order - r), (gp + 1) <<
 * (max_order - r)). Nothing above level 0 exists: the trees are independent.
 *
 * Storage. Levels are grouped into rows of LPW levels counted from the leaves
 * up (LPW = 1 for NBBS_LAYOUT_TREE, 4 for NBBS_LAYOUT_BUNCH); the top row may
 * hold fewer. Only the bottom level of a row is stored: one 5-bit slot per
 * node (see SLOT_* below); the state of a node higher in the row is derived
 * from the slots below it (occupied = some slot below it occupied;
 * allocatable = every slot below it zero). A word holds up to 8 slots (64-bit
 * word, BUNCH) or exactly one (8-bit word, TREE). Each tree's words are
 * stored together (rows from the leaves up), so threads working in different
 * trees never share the cache lines of the upper levels that every operation
 * climbs to: stored level by level across trees, the roots of 64 TREE-layout
 * trees shared one line and two threads ran 4x slower than one.
 */
#ifndef NBBS_INTERNAL_H
#define NBBS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nbbs.h"

/* Slot bits: the state of one stored node. */
#define SLOT_OCC    1u  /* the node itself (or a node above it in its row) is a live block */
#define SLOT_OCC_L  2u  /* something in the left subtree is occupied */
#define SLOT_OCC_R  4u  /* something in the right subtree is occupied */
#define SLOT_COAL_L 8u  /* a release in the left subtree is in progress */
#define SLOT_COAL_R 16u /* a release in the right subtree is in progress */
#define SLOT_BUSY   (SLOT_OCC | SLOT_OCC_L | SLOT_OCC_R)
#define SLOT_BITS   5u

/* x repeated in each of the 8 slots of a 64-bit word. */
#define SLOT_REP(x) ((uint64_t)(x) * UINT64_C(0x842108421))

/* Scan start hints: up to NBBS_HINTS cells, one cache line each, picked by a
 * hash of the caller's stack address (so, in effect, per thread). A cell
 * holds the leaf where its last allocation succeeded; the next scan starts
 * there. Small arenas get fewer cells: at most half a byte per min_block. */
#define NBBS_HINTS 64u
#define NBBS_HINT_STRIDE 8u /* uint64_t per cell: 64 bytes */

#define NBBS_MAGIC UINT64_C(0x6e6262732d763100) /* "nbbs-v1" */
#define NBBS_MAX_ROWS (NBBS_MAX_ORDER + 1)

struct nbbs {
    uint64_t  magic;
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
    bool      hosted;    /* metadata from nbbs_create */
    /* Per row k (0 = the row holding the leaves). */
    uint8_t   row_bottom[NBBS_MAX_ROWS]; /* level of the stored nodes */
    uint8_t   row_top[NBBS_MAX_ROWS];    /* level of the row's top nodes */
    uint8_t   row_spw_log[NBBS_MAX_ROWS];/* log2(slots per word) */
    uint64_t  row_off[NBBS_MAX_ROWS];    /* first word of the row inside a tree's block */
    uint64_t  tree_words;                /* words per tree */
    _Atomic uint64_t *hints; /* NBBS_HINTS cells, NBBS_HINT_STRIDE apart */
    void             *words; /* _Atomic uint8_t[] (TREE) or _Atomic uint64_t[] (BUNCH) */
    _Atomic uint8_t  *index; /* per leaf: order + 1 of the live block starting there, or 0 */
};

/* Geometry of a configuration, computed without touching memory. */
typedef struct nbbs_geom {
    size_t   min_block;
    unsigned min_shift, max_order, lpw, nrows, nhints;
    uint64_t nleaves, ntrees, nwords;
    size_t   word_size, hint_bytes, tree_bytes, index_bytes, meta_size;
} nbbs_geom_t;

/* Fills g; returns false if the configuration is invalid. */
bool nbbs__geometry(size_t arena_size, const nbbs_config_t *cfg, nbbs_geom_t *g);

/* Layout-specific halves, generated from nbbs_core.inc. */
void *nbbs__tree_alloc(nbbs_t *b, unsigned order);
void  nbbs__tree_release(const nbbs_t *b, unsigned r, uint64_t gp);
bool  nbbs__tree_take(const nbbs_t *b, unsigned r, uint64_t gp);
int   nbbs__tree_validate(const nbbs_t *b);
void *nbbs__bunch_alloc(nbbs_t *b, unsigned order);
void  nbbs__bunch_release(const nbbs_t *b, unsigned r, uint64_t gp);
bool  nbbs__bunch_take(const nbbs_t *b, unsigned r, uint64_t gp);
int   nbbs__bunch_validate(const nbbs_t *b);

static inline bool nbbs__is_bunch(const nbbs_t *b) { return b->lpw == 4; }

/* The calling thread's hint cell: thread stacks are far more than 64 KiB
 * apart, and a thread's own stack pointer rarely crosses a 64 KiB line. */
static inline _Atomic uint64_t *nbbs__hint(const nbbs_t *b)
{
    volatile char probe = 0;
    uint64_t h = ((uint64_t)(uintptr_t)&probe >> 16) * UINT64_C(0x9E3779B97F4A7C15);
    return &b->hints[((h >> 40) & b->hint_mask) * NBBS_HINT_STRIDE];
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

#endif /* NBBS_INTERNAL_H */
