/*
 * bin.h - a bin's page lists and current page, kept by the heap's owner
 * alone (heap.c; free's fast path reaches it through
 * nbm__page_refreed): the avail list (pages of the class with a free or, for a large
 * class, an uncarved object; for a small class also the pages a switch
 * left, full, which gather frees while they wait) and the list of every
 * page the heap owns in the class.
 */
#ifndef NBM_BIN_H
#define NBM_BIN_H

#include "internal.h"


/* The avail list is circular (the first page's aprev is the last), so a
 * page can join at either end in O(1) with no tail word in the bin.
 *
 * A page that just got free objects back joins at the end, behind the
 * others: the page taken next is the one that waited longest, so it has
 * gathered the most frees meanwhile. Taken first instead (LIFO), random
 * frees (`leak`: 1024 live objects of 16-4096 B replaced at random) made the
 * bin switch to a page with one free object on 40 % of mallocs. */
static inline void avail_append(nbm_bin_t *bin, nbm_page_t *pg)
{
    nbm_page_t *first = bin->avail;
    pg->uw = (uint16_t)(pg->uw & ~NBM_PAGE_OFF);
    if (!first) {
        pg->anext = pg->aprev = pg;
        bin->avail = pg;
        return;
    }
    pg->anext = first;
    pg->aprev = first->aprev;
    first->aprev->anext = pg;
    first->aprev = pg;
}

/* A page taken next (a new page): at the front. */
static inline void avail_push(nbm_bin_t *bin, nbm_page_t *pg)
{
    avail_append(bin, pg);
    bin->avail = pg;
}

static inline void avail_unlink(nbm_bin_t *bin, nbm_page_t *pg)
{
    if (!nbm__page_avail(pg))
        return;
    pg->uw = (uint16_t)(pg->uw | NBM_PAGE_OFF);
    if (pg->anext == pg) {
        bin->avail = NULL;
        return;
    }
    pg->aprev->anext = pg->anext;
    pg->anext->aprev = pg->aprev;
    if (bin->avail == pg)
        bin->avail = pg->anext;
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
}

#endif /* NBM_BIN_H */
