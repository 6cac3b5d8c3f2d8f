/*
 * remote.c - frees of objects on another heap's pages. The freeing thread
 * holds them in a short chain per class (the bin's rhead..rtail, all of one
 * page) and pushes the chain onto that page's remote list with one CAS when
 * it is full (half a carving batch), when a free goes to another page, and
 * at the heartbeat, nbm_thread_flush, thread exit, nbm_purge and recovery.
 * A held object still counts as in use on its page, so the page cannot be
 * emptied meanwhile; holding adds no shared word (docs/nbmalloc.md).
 */
#include "internal.h"

/* Pushes the bin's held remote frees onto their page (one CAS). */
static void rheld_push(nbm_bin_t *bin)
{
    if (!bin->rhead)
        return;
    nbm__page_free_remote(bin->rpage, bin->rhead, bin->rtail);
    bin->rhead = NULL;
    bin->rpage = NULL;
}

void nbm__remote_hold(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg, void **o)
{
    if (bin->rhead && bin->rpage == pg) { /* full: o goes with the others */
        o[0] = bin->rhead;
        bin->rhead = o;
        rheld_push(bin);
        return;
    }
    rheld_push(bin); /* another page's objects */
    o[0] = NULL;
    bin->rhead = o;
    bin->rpage = pg;
    bin->rtail = o;
    /* Half a carving batch (at least 2): one CAS per that many frees. */
    bin->rroom = (nbm__classes[bin - tc->bins].batch >> 1) - 1;
}

void nbm__remote_flush(nbm_tcache_t *tc)
{
    for (unsigned c = 0; c < NBM_NCLASSES; c++)
        rheld_push(&tc->bins[c]);
}
