/*
 * nbbs_validate.c - nbbs_validate: the stored node states must be exactly what
 * a sequential buddy system holding the live blocks (the index) and the tail
 * blocks would store. For tests: meaningful only with nothing in flight.
 * Works on both layouts through the geometry of nbbs_geometry.h.
 * Freestanding.
 */
#include "nbbs_geometry.h"

enum { V_FREE, V_BUSY, V_ZERO }; /* what the subtree must be: free, the live block itself, inside it */

/* Is node (r, gp) a block: a live block (index entry), or a maximal aligned
 * block of the never-allocatable tail past the arena's end? */
static bool is_block(const nbbs_t *b, unsigned r, uint64_t gp)
{
    unsigned order = b->max_order - r;
    uint64_t lo = gp << order;
    if (lo >= b->nleaves)
        return r == 0 || ((gp >> 1) << (order + 1)) < b->nleaves;
    return (nb_peek_u8(&b->index[lo]) & NBBS_IDX_ORDER) == order + 1; /* cached or not */
}

/* Returns 1 if something in the subtree is occupied, 0 if not, <0 on error. */
static int check(const nbbs_t *b, unsigned r, uint64_t gp, int mode)
{
    bool bottom = r == b->row_bottom[nbbs__row(b, r, b->lpw)];
    bool block = is_block(b, r, gp);
    int occ_l = 0, occ_r = 0;
    unsigned want;

    if (mode != V_FREE && block)
        return -2; /* a block inside a live block */
    if (mode == V_FREE && block)
        mode = V_BUSY;
    if (mode == V_BUSY && bottom) {
        want = SLOT_BUSY; /* the block's own slots, one row down at most */
        mode = V_ZERO;
    } else {
        want = 0;
    }
    if (r < b->max_order) {
        occ_l = check(b, r + 1, 2 * gp, mode);
        if (occ_l < 0)
            return occ_l;
        occ_r = check(b, r + 1, 2 * gp + 1, mode);
        if (occ_r < 0)
            return occ_r;
    }
    if (bottom) {
        if (want == 0 && mode == V_FREE)
            want = (occ_l ? SLOT_OCC_L : 0) | (occ_r ? SLOT_OCC_R : 0);
        if (nbbs__slot(b, r, gp) != want)
            return -1;
        /* TREE: the bits above the slot (the owner bits of phase 3) are
         * clear with nothing in flight. */
        if (b->lpw == 1 &&
            (nb_peek_u8((const NBBS_ATOMIC(uint8_t) *)b->words + nbbs__pos(b, r, gp, 1).word) >> SLOT_BITS))
            return -1;
    }
    return block || occ_l || occ_r || mode != V_FREE;
}

int nbbs_validate(const nbbs_t *b)
{
    if (!b)
        return NBBS_EINVAL;
    for (uint64_t t = 0; t < b->ntrees; t++) {
        int rc = check(b, 0, t, V_FREE);
        if (rc < 0)
            return rc;
    }
    return 0;
}
