/*
 * nbbs_validate.c - nbbs_validate: the stored node states must be exactly what
 * a sequential buddy system holding the live blocks (the index) and the tail
 * blocks would store. For tests: meaningful only with nothing in flight.
 * Works on both layouts through the geometry of nbbs_geometry.h.
 * Freestanding.
 */
#include "nbbs_cache_int.h"
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
    uint8_t v = nb_peek_u8(&b->index[lo]);
    if (v & NBBS_IDX_CARVED) /* frames carved from one block the tree holds whole */
        return order == NBBS_CARVE_ORDER;
    return (v & NBBS_IDX_ORDER) == order + 1; /* cached or not */
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

/* A carved block's 8 index bytes must be its frames and nothing else: each
 * frame start carries NBBS_IDX_CARVED and an order below the carve order,
 * sits aligned to its size, and the bytes inside a frame are 0; no byte
 * outside a carved block carries NBBS_IDX_CARVED. */
static int check_carved(const nbbs_t *b)
{
    for (uint64_t g = 0; g + (UINT64_C(1) << NBBS_CARVE_ORDER) <= b->nleaves; g += UINT64_C(1) << NBBS_CARVE_ORDER) {
        if (!(nb_peek_u8(&b->index[g]) & NBBS_IDX_CARVED)) {
            for (uint64_t j = 1; j < (UINT64_C(1) << NBBS_CARVE_ORDER); j++)
                if (nb_peek_u8(&b->index[g + j]) & NBBS_IDX_CARVED)
                    return -3;
            continue;
        }
        for (uint64_t j = 0; j < (UINT64_C(1) << NBBS_CARVE_ORDER);) {
            uint8_t v = nb_peek_u8(&b->index[g + j]);
            unsigned o = (v & NBBS_IDX_ORDER) - 1u;
            if (!(v & NBBS_IDX_CARVED) || (v & NBBS_IDX_ORDER) == 0 || o >= NBBS_CARVE_ORDER ||
                (j & ((UINT64_C(1) << o) - 1)))
                return -3;
            for (uint64_t i = 1; i < (UINT64_C(1) << o); i++)
                if (nb_peek_u8(&b->index[g + j + i]) != 0)
                    return -3;
            j += UINT64_C(1) << o;
        }
    }
    for (uint64_t g = b->nleaves & ~((UINT64_C(1) << NBBS_CARVE_ORDER) - 1); g < b->nleaves; g++)
        if (nb_peek_u8(&b->index[g]) & NBBS_IDX_CARVED)
            return -3; /* a partial group at the arena's end is never carved */
    return 0;
}

/* Each group's free count must be its size less the leaves of its blocks
 * of the counted orders (NBBS_COUNT_ORDER to group_order - 1: live, cached,
 * carved, or of the tail), plus the balances of the attached caches
 * (nbbs_cache_t.cbal), with nothing in flight. */
static int check_counts(const nbbs_t *b)
{
    unsigned G = b->group_order;
    for (uint64_t g = 0; b->gfree && g < b->ngroups; g++) {
        uint64_t want = UINT64_C(1) << G;
        for (uint64_t x = nb_list_load((NBBS_ATOMIC(uint64_t) *)&b->caches); x; x = nb_peek_u64(&cache_of(x)->next))
            if (cache_of(x)->cgroup == g && NBBS_CARVE_ORDER < G) /* counted (NBBS_COUNT_ORDER <= it) */
                want += (uint64_t)cache_of(x)->cbal << NBBS_CARVE_ORDER;
        for (unsigned o = NBBS_COUNT_ORDER; o < G; o++)
            for (uint64_t gp = g << (G - o); gp < (g + 1) << (G - o); gp++)
                if (is_block(b, b->max_order - o, gp))
                    want -= UINT64_C(1) << o;
        if (nb_count_peek(&b->gfree[g]) != want)
            return -4;
    }
    return 0;
}

int nbbs_validate(const nbbs_t *b)
{
    if (!b)
        return NBBS_EINVAL;
    int crc = check_carved(b);
    if (crc < 0)
        return crc;
    for (uint64_t t = 0; t < b->ntrees; t++) {
        int rc = check(b, 0, t, V_FREE);
        if (rc < 0)
            return rc;
    }
    return check_counts(b);
}
