/*
 * bin.h - a bin's page lists, kept by the heap's owner alone (heap.c): the
 * avail list (pages of the class with a free or, for a large class, an
 * uncarved object) and the list of every page the heap owns in the class.
 */
#ifndef NBM_BIN_H
#define NBM_BIN_H

#include "internal.h"


static inline void avail_push(nbm_bin_t *bin, nbm_page_t *pg)
{
    pg->avail = 1;
    pg->aprev = NULL;
    pg->anext = bin->avail;
    if (bin->avail)
        bin->avail->aprev = pg;
    bin->avail = pg;
}

static inline void avail_unlink(nbm_bin_t *bin, nbm_page_t *pg)
{
    if (!pg->avail)
        return;
    pg->avail = 0;
    if (pg->aprev)
        pg->aprev->anext = pg->anext;
    else
        bin->avail = pg->anext;
    if (pg->anext)
        pg->anext->aprev = pg->aprev;
}

static inline nbm_binx_t *binx_of(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    return &tc->binx[bin - tc->bins];
}

static inline void page_link(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg)
{
    pg->prev = NULL;
    pg->next = bin->pages;
    if (bin->pages)
        bin->pages->prev = pg;
    bin->pages = pg;
    binx_of(tc, bin)->npages++;
}

#endif /* NBM_BIN_H */
