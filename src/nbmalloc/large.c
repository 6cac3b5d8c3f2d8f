/*
 * large.c - allocation in a large class (above NBM_SMALL_MAX, a few objects
 * a page), part of the heap layer (heap.c keeps the pages and their decay).
 */
#include "bin.h"

/* A large class (above NBM_SMALL_MAX: a few objects a page) has no current
 * page: every free by the owner lands on its page's own list, counted (the
 * third case of nbm__free_fast), so a page whose objects all came back
 * leaves the class at once and its block serves any class of its order. Its
 * avail list holds the pages with a free or an uncarved object: the first
 * gives one (its list first, else one carved), else a sweep or a new page. */
void *nbm__large_alloc(nbm_tcache_t *tc, unsigned cls)
{
    nbm_bin_t *bin = &tc->bins[cls];
    nbm_binx_t *x = binx_of(tc, bin);
    const nbm_class_t *c = &nbm__classes[cls];
    bool recovered = false;
    if (!bin->avail && x->npages && x->fresh * 4 >= x->npages)
        nbm__sweep_bin(tc, bin);
    while (!bin->avail) {
        nbm_page_t *pg = nbm__heap_page_new(tc, bin, cls);
        if (!pg) {
            if (recovered || !nbm__recover())
                return NULL;
            recovered = true;
            continue; /* the recovery swept this heap: avail may hold pages */
        }
        avail_push(bin, pg);
    }
    nbm_page_t *pg = bin->avail;
    unsigned k = nbm__page_order(cls) - NBM_SPARE_ORDER0;
    if (k < NBM_KEPT_ORDERS && tc->kept[k] == pg) { /* in use again */
        tc->kept[k] = NULL;
        tc->kept_used |= 1u << k;
    }
    void **o = pg->free;
    if (o) {
        pg->free = o[0];
        pg->uw++; /* one more in use (below NBM_PAGE_OFF) */
    } else {
        nbm__page_carve(pg, (void **)&o, 1); /* avail: there is room */
    }
    if (!pg->free && (nbm__page_carved(pg) + 1) * c->size > c->chunk)
        avail_unlink(bin, pg); /* nothing left: full */
    o[1] = NULL;
    return o;
}

