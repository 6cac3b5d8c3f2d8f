/*
 * nbbs_alloc.c - the public allocation and release entry points: argument
 * checks, the index of live blocks, and dispatch to the instance's layout.
 * Freestanding.
 */
#include "nbbs_atomic.h"
#include "nbbs_internal.h"

void *nbbs_alloc_order(nbbs_t *b, unsigned order)
{
    if (!b || order > b->max_order)
        return NULL;
    /* Frames held by caches count as free: FN(alloc) that finds none
     * reclaims them (nbbs__reclaim). */
    return nbbs__scan(b, order, NBBS_SCAN_RECLAIM);
}

void *nbbs_alloc(nbbs_t *b, size_t size)
{
    if (!b || size > (b->min_block << b->max_order))
        return NULL;
    uint64_t units = ((uint64_t)size + b->min_block - 1) >> b->min_shift;
    unsigned order = units <= 1 ? 0 : 64u - (unsigned)__builtin_clzll(units - 1);
    return nbbs__scan(b, order, NBBS_SCAN_RECLAIM);
}

/* The named node's try-allocate (FN(take): the claim and the climb that the
 * search runs on a candidate it found), then the index entry, as FN(taken)
 * records a block the search won; the index entry is 0 there (asserted):
 * a live block starting at leaf would have failed the claim. */
int nbbs_alloc_at(nbbs_t *b, void *addr, unsigned order)
{
    if (!b || order > b->max_order)
        return NBBS_EINVAL;
    uint64_t leaf = nbbs__leaf_of(b, addr);
    if (leaf == UINT64_MAX || (leaf & ((UINT64_C(1) << order) - 1)) || (b->nleaves - leaf) >> order == 0)
        return NBBS_EINVAL;
    unsigned r = b->max_order - order;
    uint64_t gp = leaf >> order;
    if (!(nbbs__is_bunch(b) ? nbbs__bunch_take(b, r, gp) : nbbs__tree_take(b, r, gp)))
        return NBBS_EBUSY;
    NBBS_ASSERT(nb_peek_u8(&b->index[leaf]) == 0);
    nbbs__count(b, order, leaf, false);
    /* Release: read by its free, which the caller's hand-over orders after
     * this (as FN(taken)). */
    nb_store_rel_u8(&b->index[leaf], (uint8_t)(order + 1));
    return 0;
}

/* A free once the block's index entry is taken (0): the hint, the tree's
 * release, the hole bit. Inlined into nbbs_free (its own call cost the free
 * ~10 instructions); nbbs__free_leaf is the same for a frame cache's drain. */
static inline __attribute__((__always_inline__)) void free_leaf(nbbs_t *b, uint64_t leaf, unsigned order,
                                                               bool count)
{
    unsigned r = b->max_order - order;
    NBBS_ATOMIC(uint64_t) *hint = nbbs__hint_order(b, order); /* the next allocation here starts at this block */
    bool front = nb_hint_load(hint) == leaf;
    if (!front)
        nb_hint_store(hint, leaf);
    /* A hole in a group: placement fills those first. Not the block at this
     * context's own fill point (its hint already names it: the block it
     * allocated last, freed again, as in LLFree's repeat): the context's
     * next allocation of this order takes it back at once, and marking it
     * sent other contexts' visits into the group this context is working
     * in, so both then shared one bitmap word (docs/design.md, "Hole
     * visits and a context's own front"). The bit is named before the
     * release, so only its word and bit stay live across that call; it is
     * loaded and set after the release (nbbs__hole_mark). */
    nbbs_hole_t h = order < b->group_order && !front ? nbbs__hole_of(b, leaf) : (nbbs_hole_t){ NULL, 0 };
    if (count) /* before the release: a count is never below what is free */
        nbbs__count(b, order, leaf, true);
    if (nbbs__is_bunch(b))
        nbbs__bunch_release(b, r, leaf >> order);
    else
        nbbs__tree_release(b, r, leaf >> order);
    if (h.w)
        nbbs__hole_set(h);
}

/* The index entry is taken with a CAS before the tree is touched, so of two
 * frees of one block exactly one proceeds, and a stale, foreign or interior
 * pointer, or a block a frame cache holds, is rejected without any write. */
int nbbs_free(nbbs_t *b, void *p)
{
    if (!p)
        return 0;
    if (!b)
        return NBBS_EINVAL;
    uint64_t leaf = nbbs__leaf_of(b, p);
    if (leaf == UINT64_MAX)
        return NBBS_EINVAL;
    uint8_t v = nb_load_u8(&b->index[leaf]);
    if (v & NBBS_IDX_CARVED && !(v & NBBS_IDX_CACHED))
        return nbbs__carved_free(b, leaf, v); /* a frame of a block a cache carved */
    if (v == 0 || (v & NBBS_IDX_CACHED) || !nb_cas_u8(&b->index[leaf], &v, 0))
        return NBBS_EINVAL; /* not live, in a cache, or a concurrent free won */
    free_leaf(b, leaf, v - 1u, true);
    return 0;
}

/* A free once the block's index entry is taken (0): by nbbs_free, or by a
 * frame cache's drain, which takes a cached block's entry straight to 0. */
void nbbs__free_leaf(nbbs_t *b, uint64_t leaf, unsigned order, bool count)
{
    free_leaf(b, leaf, order, count);
}

size_t nbbs_block_size(const nbbs_t *b, const void *p)
{
    if (!b || !p)
        return 0;
    uint64_t leaf = nbbs__leaf_of(b, p);
    if (leaf == UINT64_MAX)
        return 0;
    uint8_t v = nb_load_u8(&b->index[leaf]);
    return v && !(v & NBBS_IDX_CACHED) ? b->min_block << ((v & NBBS_IDX_ORDER) - 1u) : 0;
}
