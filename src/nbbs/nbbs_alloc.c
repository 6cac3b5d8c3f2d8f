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
    return nbbs__is_bunch(b) ? nbbs__bunch_alloc(b, order) : nbbs__tree_alloc(b, order);
}

void *nbbs_alloc(nbbs_t *b, size_t size)
{
    if (!b || size > (b->min_block << b->max_order))
        return NULL;
    uint64_t units = ((uint64_t)size + b->min_block - 1) >> b->min_shift;
    unsigned order = units <= 1 ? 0 : 64u - (unsigned)__builtin_clzll(units - 1);
    return nbbs__is_bunch(b) ? nbbs__bunch_alloc(b, order) : nbbs__tree_alloc(b, order);
}

/* The index entry is taken with an exchange before the tree is touched, so of
 * two frees of one block exactly one proceeds, and a stale, foreign or
 * interior pointer is rejected without any write. */
int nbbs_free(nbbs_t *b, void *p)
{
    if (!p)
        return 0;
    if (!b)
        return NBBS_EINVAL;
    uint64_t leaf = nbbs__leaf_of(b, p);
    if (leaf == UINT64_MAX || nb_load_u8(&b->index[leaf]) == 0)
        return NBBS_EINVAL;
    uint8_t v = nb_xchg_u8(&b->index[leaf], 0);
    if (v == 0)
        return NBBS_EINVAL; /* a concurrent free of the same block won */
    unsigned order = v - 1u;
    unsigned r = b->max_order - order;
    /* The next allocation here starts at this block if it lies in the group
     * this context is filling (a free right after an allocation reuses its
     * block). A block freed elsewhere, such as another thread's handed over,
     * leaves the hint alone: following it dragged the scan into other
     * threads' regions, and allocation after cross-thread frees cost more
     * than after local ones (LLFree's "rand", docs/design.md). */
    NBBS_ATOMIC(uint64_t) *hint = nbbs__hint(b);
    uint64_t h = nb_hint_load(hint);
    if (h != leaf && h >> b->group_order == leaf >> b->group_order)
        nb_hint_store(hint, leaf);
    if (nbbs__is_bunch(b))
        nbbs__bunch_release(b, r, leaf >> order);
    else
        nbbs__tree_release(b, r, leaf >> order);
    if (order < b->group_order) /* a hole in a group: placement fills those first */
        nbbs__hole_mark(b, leaf);
    return 0;
}

size_t nbbs_block_size(const nbbs_t *b, const void *p)
{
    if (!b || !p)
        return 0;
    uint64_t leaf = nbbs__leaf_of(b, p);
    if (leaf == UINT64_MAX)
        return 0;
    uint8_t v = nb_load_u8(&b->index[leaf]);
    return v ? b->min_block << (v - 1u) : 0;
}
