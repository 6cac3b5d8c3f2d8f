/*
 * fast.h - nbmalloc's malloc and free fast paths, inlined into nbm_malloc,
 * nbm_free and the preloaded malloc/free/operator new/delete (alloc.c,
 * free.c, override*.c) and the heap's slow path (heap.c). Everything they
 * touch is declared in internal.h.
 */
#ifndef NBM_FAST_H
#define NBM_FAST_H

#include "internal.h"

/* About 14 instructions: a TLS load, the heartbeat countdown, a table
 * lookup, a list pop and the store that clears the freed-object tag. No atomic operation. Another
 * heap's objects this thread freed and still holds (rhead) go first. */
__attribute__((always_inline)) static inline void *nbm__malloc_fast(size_t n)
{
    nbm_tcache_t *tc = nbm__tc;
    if (NBM_LIKELY(n <= NBM_FAST_MAX && tc != NULL && --tc->tick != 0)) {
        nbm_bin_t *bin = &tc->bins[nbm__class_of_small[(n + 15) >> 4]];
        void **p = (void **)bin->rhead;
        if (p != NULL) {
            bin->rhead = p[0];
            p[1] = NULL;
            return p;
        }
        p = (void **)bin->head;
        if (NBM_LIKELY(p != NULL)) {
            bin->head = p[0];
            p[1] = NULL; /* untag: a later free must not look like a double free */
            return p;
        }
    }
    return nbm__malloc_generic(n);
}

/* An object pointer is a multiple of the class size from its chunk's start
 * and below the objects carved so far (w is the unit word): checked with a
 * mask, a shift and one multiply (no division). For an exact multiple
 * off = q * size, (off >> shift) * inv = q mod 2^32; anything else gives a
 * quotient beyond lim, so beyond any carved count. */
static inline bool nbm__offset_ok(const nbm_class_t *c, uintptr_t a, uint32_t w)
{
    uint32_t off = (uint32_t)a & c->chunk_mask;
    return !(off & c->low_mask) && (off >> c->shift) * c->inv < (w >> NBM_UNIT_CARVED_SHIFT);
}

/* About 30 instructions: owner lookup, class byte, offset check, tag check,
 * the page record, and a list push: onto the bin (the current page), onto
 * the thread's buffer for the page (another heap's page: no atomic, no touch
 * of the page record; one CAS per half batch), or onto the page's own list
 * (another page of this heap). */
__attribute__((always_inline)) static inline void nbm__free_fast(void *p)
{
    uintptr_t a = (uintptr_t)p;
    uintptr_t owner = nbm__owner(a);
    nbm_tcache_t *tc = nbm__tc;
    if (NBM_LIKELY(owner != 0 && !(owner & NBM_HUGE_TAG) && tc != NULL)) {
        nbm_arena_t *ar = (nbm_arena_t *)owner;
        uint32_t w = nbm__unit_word(ar, a);
        if (NBM_LIKELY(w != 0)) {
            unsigned cls = (w & 0xffu) - 1;
            const nbm_class_t *c = &nbm__classes[cls];
            void **o = (void **)p;
            if (NBM_UNLIKELY(!nbm__offset_ok(c, a, w)))
                nbm__fatal("free(): invalid pointer", p);
            if (NBM_UNLIKELY((uintptr_t)o[1] == (a ^ nbm__secret)))
                nbm__fatal("free(): double free detected for", p);
            o[1] = (void *)(a ^ nbm__secret);
            nbm_page_t *pg = nbm__page_at(ar, a, c->chunk_mask);
            nbm_bin_t *bin = &tc->bins[cls];
            if (NBM_LIKELY(pg == bin->page)) {
                o[0] = bin->head;
                bin->head = o;
                return;
            }
            /* Another heap's page whose objects this thread holds back:
             * such a page is never ours (it cannot empty meanwhile). */
            if (NBM_LIKELY(pg == bin->rpage && bin->rhead && bin->rroom)) {
                o[0] = bin->rhead;
                bin->rhead = o;
                bin->rroom--;
                return;
            }
            /* Relaxed: only this thread makes a page ours (or stops it
             * being ours); another heap's value is never ours. */
            if (NBM_LIKELY(nbm_load_uptr_relaxed(&pg->heap) == (uintptr_t)tc)) {
                o[0] = pg->free;
                pg->free = o;
                uint32_t n = ++pg->nfree;
                if (NBM_UNLIKELY(n == 1 || n == (w >> NBM_UNIT_CARVED_SHIFT)))
                    nbm__page_changed(tc, pg);
                return;
            }
            nbm__remote_hold(tc, bin, pg, o);
            return;
        }
        /* Owner and unit word are known: straight to the medium free. */
        nbm__medium_free(ar, p, "free(): invalid pointer");
        return;
    }
    nbm__free_generic(p);
}

#endif /* NBM_FAST_H */
