/*
 * fast.h - nbmalloc's malloc and free fast paths, inlined into nbm_malloc,
 * nbm_free and the preloaded malloc/free/operator new/delete (alloc.c,
 * free.c, override*.c): the API's own header, which no layer below
 * includes (tests/nbmalloc/layers.py). Everything they touch is declared in
 * internal.h.
 */
#ifndef NBM_FAST_H
#define NBM_FAST_H

#include "internal.h"

/* About 16 instructions: a TLS load, a table lookup, a list pop, the
 * heartbeat countdown and the store that clears the freed-object tag. No
 * atomic operation. The list holds objects of any pages (internal.h). */
__attribute__((always_inline)) static inline void *nbm__malloc_fast(size_t n)
{
    char *h = nbm__mheap; /* the heap, or nbm__bins_none: no test */
    if (NBM_LIKELY(n <= NBM_FAST_MAX)) {
        /* The bin by its byte offset from the record (no shift). */
        nbm_bin_t *bin = (nbm_bin_t *)(h + nbm__bin_of_small[(n + 15) >> 4]);
        if (NBM_LIKELY(bin->head != NULL)) {
            /* A list that is not empty is a heap's: its countdown. */
            if (NBM_LIKELY(--((nbm_tcache_t *)h)->tick != 0))
                return nbm__bin_pop(bin);
            return nbm__malloc_generic(n);
        }
        /* The bin is empty: to its refill, a tail call with n as it came
         * and the bin (no register to keep, so the path above keeps no
         * frame); a thread without a heap goes on from there. */
        return nbm__malloc_refill(n, bin);
    }
    return nbm__malloc_generic(n);
}

/* An object pointer is a multiple of the class size from its chunk's start
 * and below the objects carved so far (w is the unit word): checked with a
 * mask, one multiply and one rotate (no division). With size = odd << shift
 * and inv the inverse of odd mod 2^32: for off = q * size, off * inv =
 * q << shift, and rotating right by shift gives q. Any other offset gives
 * more than any carved count (at most chunk / size < 2^(32 - shift) / odd):
 * low bits of off that are not zero stay non-zero in the product (inv is
 * odd) and rotate to the top (>= 2^(32 - shift)); a multiple of 2^shift
 * that is not one of odd gives (off >> shift) * inv mod 2^(32 - shift),
 * which is > (2^(32 - shift) - 1) / odd (multiplying by inv is a bijection
 * mod 2^(32 - shift) that maps the multiples q * odd to q). */
static inline bool nbm__offset_check(uint32_t mask, uint32_t inv, uint32_t s, uintptr_t a, uint32_t w)
{
    uint32_t x = ((uint32_t)a & mask) * inv;
    return ((x >> s) | (x << ((32u - s) & 31u))) < (w >> NBM_UNIT_CARVED_SHIFT);
}

static inline bool nbm__offset_ok(const nbm_class_t *c, uintptr_t a, uint32_t w)
{
    return nbm__offset_check(c->chunk_mask, c->inv, c->shift, a, w);
}

/* 37 instructions to the list (gcc 12), with no stack frame and no branch on the page:
 * owner lookup, the bin from the unit word, offset check,
 * tag check, a push onto the bin's list and its room counted down, whatever
 * the page and its heap (no page record is touched; the class's figures are
 * the bin's copies: no class record either). When the list has no room,
 * the object goes to its page (heap.c). The unit
 * word's low half is (class + 1) lines: the bin's byte offset from the heap
 * record (the - 1 folds into the addressing), and a word of 0 (a medium block) reads zeros that
 * fail the offset check, so it needs no test of its own. The reports go
 * through nbm__free_bad and nbm__free_unaligned, which are not marked
 * noreturn so that the calls to them are jumps and need no frame either. */
__attribute__((always_inline)) static inline void nbm__free_fast(void *p)
{
    uintptr_t a = (uintptr_t)p;
    /* The object's first line, for writing, before anything else: the tag
     * check below loads it and the push stores to it. An object another
     * core wrote last (larson's cross-thread frees) would otherwise come in
     * twice: shared for the load, then again exclusive for the stores; so
     * the load waited for a line the store then asked for again (96 % of
     * free's samples in larson at 4 threads on the tag's load). ab.py, 9
     * rounds, CPU ns per pair: larson T4 58.3 -> 53.9 (tcmalloc 49.9), T2
     * 65.1 -> 60.3 (59.0); the cost where the line is at hand: 0.17 ns a
     * pair in linux-scalability 8 B at 1 thread (3.49 -> 3.67, tcmalloc
     * 3.76). */
    NBM_PREFETCH_W(p);
    uintptr_t owner = nbm__owner(a);
    nbm_tcache_t *tc = nbm__tc;
    /* An arena's entry has bit 0 set (0, a huge mapping and a tombstone
     * have it clear: one test, not a test for 0 and one for the huge tag). */
    if (NBM_LIKELY(nbm__map_is_arena(owner) && tc != NULL)) {
        nbm_arena_t *ar = nbm__map_arena(owner);
        uint32_t w = nbm__unit_word(ar, a);
        {
            /* &tc->bins[class] is the word's low half as a byte offset
             * (bins sit one bin into the record): one zero extension. The
             * class's mask, inverse and shift are the bin's copies, in the
             * line of the list; for a word of 0, the record's zeros
             * (none_mask). */
            nbm_bin_t *bin = (nbm_bin_t *)((char *)tc + (uint16_t)w);
            void **o = (void **)p;
            if (NBM_UNLIKELY(!nbm__offset_check(bin->mask, bin->inv, bin->shift, a, w))) {
                nbm__free_unaligned(p); /* a medium block, or reported */
                return;
            }
            uintptr_t tag = a ^ nbm__secret;
            if (NBM_UNLIKELY((uintptr_t)o[1] == tag)) {
                nbm__free_bad("free(): double free detected for", p);
                return;
            }
            o[1] = (void *)tag;
            /* Any page, any heap (internal.h): one list, so no branch on
             * the page (the former test for the current page missed 742 K
             * times in leak's 2 M frees at 1 thread), while the list has
             * room: counted down in memory, a branch on the sign (2
             * instructions, not 5; linux-scalability 4 % less CPU a pair);
             * past it room is -1 here, and the ways below store 0 back
             * (nbm__free_other sets it). */
            if (NBM_LIKELY(--bin->room >= 0)) {
                o[0] = bin->head;
                bin->head = o;
                return;
            }
            /* No room: the current page's object goes onto the list all
             * the same (uncounted: at most the page's objects; thread-test
             * frees 18 % of its objects there, and the page path cost it
             * 4 % CPU a pair); a page of this heap gets the object on its
             * own list, here, in the page record's line (inlined: 20
             * instructions against 27 through a call; a run of frees,
             * thread-test's, comes here after lim, and counts in
             * bin->over, so the next refill grows lim: heap.c). Relaxed:
             * only this thread makes a page ours (or stops it being ours);
             * another heap's value is never ours. The edges go to
             * nbm__page_refreed: the page is off the bin's avail list, or
             * the free empties it. Another heap's page: nbm__free_other. */
            /* The mask read again here: kept from the check instead, it
             * cost the list path a register copy (one instruction). */
            __asm__("" : "+r"(bin));
            nbm_page_t *pg = nbm__page_at(ar, a, bin->mask);
            __asm__("" : "+r"(pg)); /* one address for all its fields (gcc 12 formed two) */
            if (pg == bin->page) {
                o[0] = bin->head;
                bin->head = o;
                bin->room = 0;
                return;
            }
            if (NBM_LIKELY(nbm_load_uptr_relaxed(&pg->heap) == (uintptr_t)tc)) {
                o[0] = pg->free;
                pg->free = o;
                bin->room = 0;
                bin->over++;
                /* Both edges in one word (nbm_page_t.uw): off the avail
                 * list, the word is NBM_PAGE_OFF + used, negative as 16
                 * bits after the decrement (used >= 1: the object was in
                 * use); on it, the count alone, 0 when the page empties. */
                int16_t uw = (int16_t)(pg->uw - 1);
                pg->uw = (uint16_t)uw;
                if (NBM_UNLIKELY(uw <= 0))
                    nbm__page_refreed(tc, bin, pg);
                return;
            }
            nbm__free_other(tc, bin, o); /* sets room (bin_trim) */
            return;
        }
    }
    nbm__free_generic(p);
}

#endif /* NBM_FAST_H */
