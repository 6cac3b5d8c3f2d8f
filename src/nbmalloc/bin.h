/*
 * bin.h - a bin's page lists and current page, kept by the heap's owner
 * alone (heap.c, large.c): the avail list (pages of the class with a free
 * or, for a large class, an uncarved object) and the list of every page the
 * heap owns in the class.
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
    nbm_binx_t *x = binx_of(tc, bin);
    pg->prev = NULL;
    pg->next = x->pages;
    if (x->pages)
        x->pages->prev = pg;
    x->pages = pg;
    x->npages++;
}

static inline void clear_current(nbm_bin_t *bin)
{
    bin->page = NULL;
    bin->cur = 0;
}

/* The bin's current page; free finds it by its first byte,
 * taken from any object of the page (obj) when there is one at hand:
 * nbm__page_base costs a call and a load per page switch. */
static inline void set_current(nbm_bin_t *bin, nbm_page_t *pg, const void *obj)
{
    bin->page = pg;
    if (obj)
        bin->cur = (uintptr_t)obj & ~(uintptr_t)nbm__classes[pg->cls].chunk_mask;
    else
        bin->cur = nbm__page_base(pg);
}

#endif /* NBM_BIN_H */
