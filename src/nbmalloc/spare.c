/*
 * spare.c - a heap's spare pages: empty pages it keeps, per page order, for
 * its next pages of any class, and their decay. Below the heap (heap.c
 * puts, takes and releases them); calls only the page and medium layers.
 */
#include "internal.h"

static _Atomic uint32_t trim_epoch; /* bumped by every recovery: heaps give their spares back */

void nbm__spares_trim(void)
{
    nbm_add_u32(&trim_epoch, 1);
}

void nbm__spare_put(nbm_tcache_t *tc, nbm_page_t *pg, unsigned order)
{
    unsigned k = order - NBM_SPARE_ORDER0;
    pg->next = tc->spare[k];
    tc->spare[k] = pg;
    tc->nspare[k]++;
    nbm__spares_decay(tc);
}

static void release_top(nbm_tcache_t *tc, unsigned k, uint32_t n)
{
    for (; n && tc->spare[k]; n--) {
        nbm_page_t *pg = tc->spare[k];
        tc->spare[k] = pg->next;
        tc->nspare[k]--;
        nbm__page_release((void *)nbm__page_base(pg), k + NBM_SPARE_ORDER0);
    }
    if (tc->spare_low[k] > tc->nspare[k])
        tc->spare_low[k] = tc->nspare[k];
}

/* The heap's spare pages all go back; true if it had any. */
bool nbm__spares_release(nbm_tcache_t *tc)
{
    bool any = false;
    for (unsigned k = 0; k < NBM_SPARE_ORDERS; k++) {
        any |= tc->nspare[k] != 0;
        release_top(tc, k, UINT32_MAX);
    }
    return any;
}

/* Decay of spare pages (empty pages kept for the heap's next pages of any
 * class): every half NBM_PURGE_DELAY_MS, the spares that were not needed during
 * the whole interval (the fewest held at any time in it) go back to the OS
 * and the back-end. A steady program keeps what it reuses; a shrinking one
 * returns its empty pages within two intervals of its next slow path. After
 * a thread ran out of memory (the recovery epoch moved), all go back. Called
 * on the slow paths that take or give pages and at the heartbeat. */
void nbm__spares_decay(nbm_tcache_t *tc)
{
    uint32_t e = nbm_load_u32_relaxed(&trim_epoch);
    if (NBM_UNLIKELY(e != tc->trim_seen)) {
        tc->trim_seen = e;
        nbm__spares_release(tc);
    }
    uint64_t now = nbm__os_now_ns();
    if (now - tc->spare_since < nbm__opt.purge_delay_ns / 2)
        return;
    for (unsigned k = 0; k < NBM_SPARE_ORDERS; k++) {
        release_top(tc, k, tc->spare_low[k]);
        tc->spare_low[k] = tc->nspare[k];
    }
    tc->spare_since = now;
}

/* The heap's spares to the medium cache (an exiting thread's). */
void nbm__spares_give(nbm_tcache_t *tc)
{
    for (unsigned k = 0; k < NBM_SPARE_ORDERS; k++) {
        while (tc->spare[k]) {
            nbm_page_t *pg = tc->spare[k];
            tc->spare[k] = pg->next;
            nbm__medium_release((void *)nbm__page_base(pg), k + NBM_SPARE_ORDER0);
        }
        tc->nspare[k] = tc->spare_low[k] = 0;
    }
}

/* A spare block of the order, or NULL. */
void *nbm__spare_take(nbm_tcache_t *tc, unsigned order)
{
    unsigned k = order - NBM_SPARE_ORDER0;
    nbm_page_t *pg = tc->spare[k];
    if (!pg)
        return NULL;
    tc->spare[k] = pg->next;
    if (--tc->nspare[k] < tc->spare_low[k])
        tc->spare_low[k] = tc->nspare[k];
    return (void *)nbm__page_base(pg);
}
