/*
 * remote.c - frees of objects on other heaps' pages. The freeing thread
 * holds them in a list per class (the bin's rhead, linked by word 0), from
 * any pages of any other heaps, and its own mallocs of the class take from
 * it first. When the list is full (16 KiB of the class, 2 to 128 objects)
 * its older half is pushed back; at the heartbeat, what was held at the
 * last heartbeat already (held a whole interval and not reused), and at
 * nbm_thread_flush, thread exit, nbm_purge and recovery all of it: grouped
 * by page, one CAS onto each page's remote list per group. A held object
 * still counts as in use on its page, so the page cannot be emptied
 * meanwhile; holding adds no shared word (docs/nbmalloc.md).
 */
#include "internal.h"

/* Bytes of a class a bin holds at most (NBM_HELD_MAX objects at most, 2 at
 * least). Half a carving batch (8 KiB, at most 32 objects) overflowed on
 * every second batch of remote-free (uniform sizes to 1 KiB: a class of
 * 1 KiB gets about 8 objects of a batch of 64, as many as it held); 32 KiB
 * sent back fewer still but ran slower at 2 threads (docs/nbmalloc.md). */
#define NBM_HELD_BYTES 16384u
#define NBM_HELD_MAX   128u

static uint32_t held_max(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    uint32_t n = NBM_HELD_BYTES / nbm__classes[bin - tc->bins].size;
    return n < 2 ? 2 : n > NBM_HELD_MAX ? NBM_HELD_MAX : n;
}

/* Pushes every object of the list (of class cls, linked by word 0, ending in
 * NULL) onto its page's remote list: the objects of the first object's page
 * are unlinked from the rest (order kept) and pushed with one CAS, then the
 * rest the same way. At most held_max objects: O(n * pages) comparisons of
 * page bases, no page record read but the CAS's. */
static void push_grouped(unsigned cls, void **list)
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
        nbm_arena_t *ar = (nbm_arena_t *)nbm__owner(base);
        nbm__page_free_remote(nbm__page_at(ar, base, mask), first, last);
        list = rest;
    }
}

void nbm__remote_hold(nbm_tcache_t *tc, nbm_bin_t *bin, void **o)
{
    uint32_t max = held_max(tc, bin), keep = 0;
    void **h = bin->rhead;
    if (h) {
        /* Full: the newer half (at the head) stays, the older goes back. */
        void **cut = h;
        for (keep = 1; keep < max / 2 && cut[0]; keep++)
            cut = cut[0];
        void **old = cut[0];
        cut[0] = NULL;
        push_grouped((unsigned)(bin - tc->bins), old);
    }
    o[0] = h;
    bin->rhead = o;
    bin->rroom = max - keep - 1;
}

void nbm__remote_flush(nbm_tcache_t *tc)
{
    for (unsigned c = 0; c < NBM_NCLASSES; c++) {
        nbm_bin_t *bin = &tc->bins[c];
        tc->binx[c].rmark = NULL;
        if (bin->rhead) {
            push_grouped(c, bin->rhead);
            bin->rhead = NULL;
            bin->rroom = held_max(tc, bin);
        }
    }
}

/* The list grows and shrinks at its head, and a full list is cut below its
 * newer half: while the object that headed it at the last heartbeat (the
 * mark) is still on it, that object and those below it were all on it then
 * (a mark that a malloc took and a free brought back heads newer objects
 * too: those go back early, which is only what a flush does). A mark not on
 * the list was taken by a malloc or pushed with an older half, and so was
 * everything below it: nothing held now was held then. The list is at most
 * 128 objects this thread freed. */
void nbm__remote_age(nbm_tcache_t *tc)
{
    for (unsigned c = 0; c < NBM_NCLASSES; c++) {
        nbm_bin_t *bin = &tc->bins[c];
        nbm_binx_t *x = &tc->binx[c];
        void **mark = x->rmark, **o = bin->rhead, **prev = NULL;
        uint32_t kept = 0;
        if (mark) {
            for (; o && o != mark; prev = o, o = o[0])
                kept++;
            if (o) { /* o and below: held a whole heartbeat, unused */
                if (prev)
                    prev[0] = NULL;
                else
                    bin->rhead = NULL;
                push_grouped(c, o);
                bin->rroom = held_max(tc, bin) - kept;
            }
        }
        x->rmark = bin->rhead;
    }
}
