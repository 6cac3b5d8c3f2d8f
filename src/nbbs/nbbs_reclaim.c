/*
 * nbbs_reclaim.c - giving cached blocks back to the tree: the drains of a
 * frame cache, nbbs_reclaim_cached, and the pressure path (nbbs__reclaim)
 * that takes blocks any cache holds before an allocation returns NULL.
 * Freestanding, like the rest of the core. docs/design.md, "Frame caches".
 */
#include "nbbs_cache_int.h"

/* Remember the carved block at g0 (a drain left free frames of this order
 * in it, but not all its frames are free) for the owner's next refill,
 * newest first. Returns false if that wrote over the oldest remembered
 * block (the ring was full): its free frames are then named nowhere, so
 * its region is set in the owner's private lost map, and the caller marks
 * the order stranded so that refills harvest them. */
static bool remember_part(nbbs_cache_t *owner, unsigned order, uint64_t g0)
{
    uint64_t *e = &owner->part[order][owner->ptop[order]++ % CACHE_PARTS];
    if (owner->nparts[order] == CACHE_PARTS) {
        uint64_t r = lost_region(owner, *e >> NBBS_CARVE_ORDER);
        owner->lost[order][r >> 6] |= UINT64_C(1) << (r & 63); /* the oldest, written over */
        *e = g0;
        return false;
    }
    *e = g0;
    owner->nparts[order]++;
    return true;
}

/* Give the cached blocks named by entries [from, to) of a stack of this
 * order back: a whole block is claimed straight from "cached" to 0 (so it
 * never looks live on its way back: a double free of it is refused
 * throughout; the explorer's cache-dfree-tree found the window an
 * intermediate live value opened) and then freed as nbbs_free frees (hint
 * cell, the tree's release, the placement's records). A carved frame just
 * leaves the stack, staying free in its carved block, and its carved block
 * goes back whole if all its frames are free (tried once per run of
 * entries in one block: a frame is free in its word from its cached free
 * on, so the block's state does not depend on which of its entries the
 * range holds). Returns the number of blocks that went back to the tree,
 * counting each frame of a carved block that went back (those named
 * elsewhere or nowhere included). Entries may be stale or change under a
 * reader that is not the owner: only the index bytes decide. bal: the
 * cache whose owner calls (or NULL: another thread's reclaim), whose
 * balance in a group's free count covers the carved blocks that go back
 * (cache_count_cover: an RMW for several blocks, not one each). */
size_t nbbs__give_back(nbbs_t *b, nbbs_cache_t *owner, nbbs_cache_t *bal, NBBS_ATOMIC(uint64_t) *s,
                       uint64_t from, uint64_t to, unsigned order)
{
    size_t done = 0;
    bool stranded = false;
    uint64_t last = UINT64_MAX;
    uint8_t want = (uint8_t)(NBBS_IDX_CACHED | (order + 1u));
    for (uint64_t i = from; i < to; i++) {
        uint64_t leaf = nb_own_load(&s[i]);
        if (leaf >= b->nleaves)
            continue;
        uint8_t v = nb_load_u8(&b->index[leaf]);
        if ((v & (NBBS_IDX_CACHED | NBBS_IDX_ORDER)) != want)
            continue; /* taken by someone else */
        if (v & NBBS_IDX_CARVED) {
            uint64_t g0 = leaf & ~(uint64_t)(CARVE_LEAVES - 1);
            if (g0 == last)
                continue;
            last = g0;
            carve_word_t x;
            x.w = nb_load_u64(carve_word(b, g0));
            unsigned m = 0;
            if (carve_all_free(x)) { /* a look first: most fail */
                bool cover = cache_count_cover(bal, g0);
                m = nbbs__carve_merge(b, g0, cover);
                if (m && cover)
                    bal->cbal--;
            }
            done += m;
            if (!m && !owner)
                stray_mark(b, g0); /* its free frames are named nowhere now */
            else if (!m && !remember_part(owner, order, g0))
                stranded = true;
        } else if (nb_cas_u8(&b->index[leaf], &v, 0)) {
            /* A whole block of the carve order: the balance's unit. */
            bool cover = order == NBBS_CARVE_ORDER && cache_count_cover(bal, leaf);
            nbbs__free_leaf(b, leaf, order, !cover);
            if (cover)
                bal->cbal--;
            done++;
        }
    }
    if (stranded) {
        owner->stranded[order] = true;
        owner->swept[order] = 0;
    }
    return done;
}

/* Any thread: give back every block any cache of b holds. The entries it
 * reads may be stale or change under it (the owner pushes and pops); only
 * blocks whose CAS succeeds are given back, so a stale entry costs a failed
 * CAS and nothing else. */
size_t nbbs_reclaim_cached(nbbs_t *b)
{
    if (!b)
        return 0;
    size_t done = 0;
    for (uint64_t x = nb_list_load(&b->caches); x; x = nb_own_load(&cache_of(x)->next)) {
        nbbs_cache_t *c = cache_of(x);
        for (unsigned k = 0; k < c->orders; k++) {
            NBBS_ATOMIC(uint64_t) *s = stack_of(c, k);
            uint64_t n = nb_own_load(&c->count[k]);
            if (n > c->capacity)
                n = c->capacity;
            if (n) /* most stacks of most caches are empty: no call for them */
                done += nbbs__give_back(b, NULL, NULL, s, 0, n, k);
        }
    }
    return done;
}

void *nbbs__reclaim(nbbs_t *b, unsigned order)
{
    uint64_t head = nb_list_load(&b->caches);
    if (!head)
        return NULL; /* no cache: the tree's answer stands */
    /* 1. A cached block of exactly this order, from any cache: one CAS. */
    for (uint64_t x = head; x; x = nb_own_load(&cache_of(x)->next)) {
        nbbs_cache_t *c = cache_of(x);
        if (order >= c->orders)
            continue;
        NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
        uint64_t n = nb_own_load(&c->count[order]);
        if (n > c->capacity)
            n = c->capacity;
        while (n) { /* from the top: the owner's pops meet us last */
            uint64_t leaf = nb_own_load(&s[--n]);
            if (leaf < b->nleaves && claim(b, leaf, order))
                return addr_of(b, leaf);
        }
    }
    /* 1b. A free frame in a carved block (named on no stack, or one that
     * must be split or made of several): one CAS on the block's word. */
    if (order < NBBS_CARVE_ORDER && can_carve(b)) {
        void *p = nbbs__carve_take(b, order);
        if (p)
            return p;
    }
    /* 2. None: smaller (or other) cached blocks may coalesce into one. Give
     * every cached block back and scan the tree once more. */
    if (nbbs_reclaim_cached(b) == 0)
        return NULL;
    return nbbs__scan(b, order, 0);
}
