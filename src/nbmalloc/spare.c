/*
 * spare.c - a heap's spare pages: empty pages kept, per page order, for the
 * heap's next page of any class of that order, and their decay.
 *
 * A page whose objects all came back leaves its class (heap.c) and is pushed
 * here. Every half NBM_PURGE_DELAY_MS the spares that were not needed during
 * the whole interval (the fewest held at any time in it) go back to the OS
 * and the back-end (nbm__page_release); a steady program keeps what it
 * reuses, a shrinking one returns its empty pages within two intervals of
 * its next slow path. After a thread ran out of memory (the recovery epoch
 * moved), every heap gives all its spares back at its next page. A spare
 * keeps its unit words (a double free of one of its objects is still
 * reported as one) until it is reused or leaves the heap. Every field here is
 * the heap owner's; only the recovery epoch is shared (an atomic counter).
 *
 * Pages of NBM_SHARED_ORDER (256 KiB) and up belong to the large classes,
 * each of few objects: they are not kept here but go to the medium cache,
 * shared by every thread and every use of the order (pages and medium
 * blocks) and kept by the memory policy (decay.c), which counts these blocks
 * in use while they are pages. Kept per heap and per order instead, a storm
 * of 8 threads of 16 B..1 MiB requests peaked at up to three times the
 * resident memory (one kept per heap and order: 10 % more).
 */
#include "internal.h"

static _Atomic uint32_t trim_epoch; /* bumped by every recovery: heaps give their spares back */

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

bool nbm__spares_release(nbm_tcache_t *tc)
{
    bool any = false;
    for (unsigned k = 0; k < NBM_SPARE_ORDERS; k++) {
        any |= tc->nspare[k] != 0;
        release_top(tc, k, UINT32_MAX);
    }
    return any;
}

bool nbm__spares_decay(nbm_tcache_t *tc)
{
    uint32_t e = nbm_load_u32_relaxed(&trim_epoch);
    if (NBM_UNLIKELY(e != tc->trim_seen)) {
        tc->trim_seen = e;
        nbm__spares_release(tc);
    }
    uint64_t now = nbm__os_now_ns();
    if (now - tc->spare_since < nbm__opt.purge_delay_ns / 2)
        return false;
    for (unsigned k = 0; k < NBM_SPARE_ORDERS; k++) {
        release_top(tc, k, tc->spare_low[k]);
        tc->spare_low[k] = tc->nspare[k];
    }
    tc->spare_since = now;
    return true;
}

void nbm__spare_put(nbm_tcache_t *tc, nbm_page_t *pg, unsigned order)
{
    if (order >= NBM_SHARED_ORDER) {
        nbm__medium_page_give((void *)nbm__page_base(pg), order);
        return;
    }
    unsigned k = order - NBM_SPARE_ORDER0;
    pg->next = tc->spare[k];
    tc->spare[k] = pg;
    tc->nspare[k]++;
}

void nbm__spares_give(nbm_tcache_t *tc)
{
    for (unsigned k = 0; k < NBM_SPARE_ORDERS; k++) {
        while (tc->spare[k]) {
            nbm_page_t *pg = tc->spare[k];
            tc->spare[k] = pg->next;
            void *b = (void *)nbm__page_base(pg);
            nbm__page_forget(b, k + NBM_SPARE_ORDER0); /* a medium block may be made of it */
            nbm__medium_release(b, k + NBM_SPARE_ORDER0);
        }
        tc->nspare[k] = tc->spare_low[k] = 0;
    }
}

/* Whole spares beyond the NBM_SPARE_KEEP of each order the heap keeps for
 * its own next pages (moved out, they would only make those fault in fresh
 * blocks, each move holding the mmap lock against other threads' faults),
 * larger pages first, their memory moved into the hole; a run
 * of spares that follow each other on the list and in memory (as pages
 * emptied in the order they were filled do) moves with one call. Each
 * leaves the heap as a released spare does, but with nothing left to purge.
 * While the move budget is spent the spares are left where they are; a
 * move refused all the same (another thread took the last of the budget,
 * or the kernel refused) purges its run, already forgotten, and returns it
 * to the back-end: its pages were empty, nothing is lost. */
size_t nbm__spares_fill(nbm_tcache_t *tc, char *block, size_t off, size_t len)
{
    char *dst = block + off;
    size_t done = 0;
    for (unsigned k = NBM_SPARE_ORDERS; k-- > 0;) {
        unsigned order = k + NBM_SPARE_ORDER0;
        size_t size = NBM_PAGE << order;
        while (tc->spare[k] && tc->nspare[k] > NBM_SPARE_KEEP && len - done >= size) {
            nbm_page_t *last = tc->spare[k];
            uintptr_t base = nbm__page_base(last);
            /* Over budget the spares stay the heap's: once detached and
             * forgotten they could only be purged (below), and the request
             * faults all the same. */
            if (!nbm__medium_may_move(dst + done, (void *)base))
                return done;
            size_t run = size;
            uint32_t n = 1;
            while (last->next && n < tc->nspare[k] - NBM_SPARE_KEEP && len - done - run >= size &&
                   nbm__page_base(last->next) == base + run) {
                last = last->next;
                run += size;
                n++;
            }
            tc->spare[k] = last->next;
            tc->nspare[k] -= n;
            if (tc->spare_low[k] > tc->nspare[k])
                tc->spare_low[k] = tc->nspare[k];
            for (size_t o = 0; o < run; o += size)
                nbm__page_forget((void *)(base + o), order);
            bool moved = nbm__medium_move(block, dst + done, (void *)base, run, false);
            for (size_t o = 0; o < run; o += size) {
                if (moved)
                    nbm__page_release_moved((void *)(base + o));
                else
                    nbm__page_release((void *)(base + o), order);
            }
            if (!moved)
                return done;
            done += run;
        }
    }
    return done;
}

void *nbm__spare_take(nbm_tcache_t *tc, unsigned order)
{
    if (order >= NBM_SHARED_ORDER)
        return nbm__medium_page_take(order);
    unsigned k = order - NBM_SPARE_ORDER0;
    nbm_page_t *pg = tc->spare[k];
    if (!pg)
        return nbm__block_cached(order);
    tc->spare[k] = pg->next;
    if (--tc->nspare[k] < tc->spare_low[k])
        tc->spare_low[k] = tc->nspare[k];
    return (void *)nbm__page_base(pg);
}

void nbm__spare_fresh(void *block, unsigned order)
{
    if (order >= NBM_SHARED_ORDER)
        nbm__medium_page_new(block, order);
}

void nbm__spares_trim(void)
{
    nbm_add_u32(&trim_epoch, 1);
}
