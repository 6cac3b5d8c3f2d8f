/*
 * remote.c - other heaps' objects on their way back: a bin's trim (heap.c)
 * sends the objects of its list that are on other heaps' pages here,
 * grouped by page, one CAS onto each page's remote list per group. Until
 * then such an object still counts as in use on its page, so the page
 * cannot be emptied meanwhile; the list adds no shared word
 * (docs/nbmalloc.md).
 */
#include "internal.h"

/* Pushes every object of the list (of class cls, linked by word 0, ending in
 * NULL) onto its page's remote list: the objects of the first object's page
 * are unlinked from the rest (order kept) and pushed with one CAS, then the
 * rest the same way. O(n * pages) comparisons of page bases (at most the
 * bin's lim objects), no page record read but the CAS's. */
void nbm__remote_push(unsigned cls, void **list)
{
    uintptr_t mask = nbm__classes[cls].chunk_mask;
    while (list) {
        uintptr_t base = (uintptr_t)list & ~mask;
        void **first = list, **last = list, **rest = NULL, **rlast = NULL;
        for (void **o = list[0]; o;) {
            void **next = o[0];
            if (((uintptr_t)o & ~mask) == base) {
                last[0] = o;
                last = o;
            } else {
                if (rlast)
                    rlast[0] = o;
                else
                    rest = o;
                rlast = o;
            }
            o = next;
        }
        if (rlast)
            rlast[0] = NULL;
        nbm_arena_t *ar = nbm__arena_of(base);
        nbm__page_free_remote(nbm__page_at(ar, base, mask), first, last);
        list = rest;
    }
}
