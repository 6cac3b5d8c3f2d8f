/*
 * nbbs_geometry.h - how a node of the buddy tree is named and where its state
 * is stored: levels, rows, words, slots, and the parent/child/buddy
 * arithmetic. Used by the algorithm (nbbs_core.inc), by validation and by the
 * interleaving explorer, so the arithmetic exists once.
 *
 * Naming. The arena is nleaves min_blocks, cut into ntrees trees of
 * 2^max_order leaves each (the last one possibly partial). A node is named by
 * its level r inside its tree (0 = tree root = a max-size block, max_order =
 * leaf) and its global position gp at that level, counting across all trees
 * left to right: gp in [0, ntrees << r). Its order is max_order - r; its
 * parent is (r - 1, gp >> 1), its children (r + 1, 2 gp) and (r + 1, 2 gp + 1),
 * its buddy (r, gp ^ 1), its side gp & 1; it covers leaves
 * [gp << (max_order - r), (gp + 1) << (max_order - r)). Nothing above level 0
 * exists: the trees are independent.
 *
 * Storage. Levels are grouped into rows of lpw levels counted from the leaves
 * up (lpw = 1 for NBBS_LAYOUT_TREE, 4 for NBBS_LAYOUT_BUNCH); the top row may
 * hold fewer. Only the bottom level of a row is stored: one 5-bit slot per
 * node (SLOT_* in nbbs_internal.h); the state of a node higher in the row is
 * derived from the slots below it (occupied = some slot below it occupied;
 * allocatable = every slot below it zero). A word holds up to 8 slots (64-bit
 * word, BUNCH) or exactly one (8-bit word, TREE). Each tree's words are
 * stored together (rows from the leaves up), so threads working in different
 * trees never share the cache lines of the upper levels that every operation
 * climbs to: stored level by level across trees, the roots of 64 TREE-layout
 * trees shared one line and two threads ran 4x slower than one.
 *
 * Every function takes lpw as an argument: the algorithm passes its
 * compile-time constant, so the TREE case folds away on the hot path;
 * validation and the explorer pass b->lpw. Where a level's nodes are is read
 * from b->level[r] (nbbs_level_t, filled by nbbs_init from the row tables):
 * row = (max_order - r) / lpw, three row-table loads, the tree's first word
 * and the slot arithmetic cost ~25 of alloc-rnd's ~40 M scan instructions
 * when recomputed at every lookup.
 */
#ifndef NBBS_GEOMETRY_H
#define NBBS_GEOMETRY_H

#include "nbbs_atomic.h"
#include "nbbs_internal.h"

/* The row that holds level r. */
static inline unsigned nbbs__row(const nbbs_t *b, unsigned r, unsigned lpw)
{
    return (b->max_order - r) / lpw;
}

/* Where node (r, gp)'s slots are stored: the word's index in b->words, the
 * bit of its first slot, and how many levels below the node its slots are
 * (its row's bottom level minus r: the node has 2^depth slots). */
typedef struct nbbs_pos {
    uint64_t word;
    unsigned shift;
    unsigned depth;
    unsigned width; /* the node's bits: SLOT_BITS << depth */
    bool     whole; /* the node's slots fill the whole word */
} nbbs_pos_t;

static inline nbbs_pos_t nbbs__pos(const nbbs_t *b, unsigned r, uint64_t gp, unsigned lpw)
{
    const nbbs_level_t *lv = &b->level[r];
    nbbs_pos_t p;
    if (lpw == 1) {
        /* TREE: a row is one level and a word one slot (cpw 0, depth 0), so
         * only the level's offset and gap are used: the climbs call this
         * once per level. */
        p.word = lv->off + gp + (gp >> lv->tpw) * lv->gap; /* tpw = r */
        p.shift = 0, p.depth = 0, p.width = SLOT_BITS, p.whole = true;
        NBBS_ASSERT(lv->cpw == 0 && lv->depth == 0 && lv->tpw == r);
    } else {
        /* Its first slot is slot i << depth of its row inside its tree (i
         * its position inside the tree); a word holds 2^cpw nodes of this
         * level, each width bits. */
        uint64_t q = gp >> lv->cpw;
        p.depth = lv->depth;
        p.width = lv->width;
        p.word = lv->off + q + (q >> lv->tpw) * lv->gap; /* q >> tpw = gp >> r: its tree */
        p.shift = lv->width * (unsigned)(gp & ((UINT64_C(1) << lv->cpw) - 1));
        p.whole = lv->cpw == 0;
        NBBS_ASSERT(p.depth < lpw && p.width == SLOT_BITS << p.depth);
    }
    /* The row arithmetic it replaces. */
    NBBS_ASSERT(p.word == (gp >> r) * b->tree_words + lv->off +
                              (((gp - ((gp >> r) << r)) << p.depth) >> b->row_spw_log[nbbs__row(b, r, lpw)]));
    return p;
}

/* Climbing: from level r, position gp, to the stored slot just above the row
 * that holds r (the top level of the next row up), and the side of that slot
 * the climb came from. Returns false at a tree root. */
static inline bool nbbs__up(const nbbs_t *b, unsigned *r, uint64_t *gp, unsigned *side, unsigned lpw)
{
    /* TREE: every level is a row's top (level[r].top = r), no table load. */
    unsigned r0 = lpw == 1 ? *r : b->level[*r].top;
    NBBS_ASSERT(b->level[*r].top == b->row_top[nbbs__row(b, *r, lpw)] && (lpw != 1 || b->level[*r].top == *r));
    if (r0 == 0)
        return false;
    uint64_t top = *gp >> (*r - r0);
    *side = (unsigned)(top & 1);
    *gp = top >> 1;
    *r = r0 - 1;
    return true;
}

/* The 5-bit slot of stored node (r, gp), r being its row's bottom level, read
 * relaxed (validation and tests, with nothing in flight). */
static inline unsigned nbbs__slot(const nbbs_t *b, unsigned r, uint64_t gp)
{
    nbbs_pos_t p = nbbs__pos(b, r, gp, b->lpw);
    NBBS_ASSERT(p.depth == 0);
    uint64_t w = b->lpw == 4 ? nb_peek_u64((const NBBS_ATOMIC(uint64_t) *)b->words + p.word)
                             : nb_peek_u8((const NBBS_ATOMIC(uint8_t) *)b->words + p.word);
    return (unsigned)(w >> p.shift) & ((1u << SLOT_BITS) - 1);
}

#endif /* NBBS_GEOMETRY_H */
