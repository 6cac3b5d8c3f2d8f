/*
 * heap.c - per-thread heaps: the bins' slow paths, thread start and exit,
 * adoption of abandoned heaps, collection and recovery.
 *
 * The fast paths (internal.h) pop and push the current page's list in the
 * bin, or the held remote frees. Every NBM_HEARTBEAT-th fast malloc comes
 * here for the heartbeat (held remote frees pushed, spare decay). When the
 * bin's list is empty (refill):
 *   1. the current page's remote frees (one exchange);
 *   2. the current page's uncarved tail (a batch at a time: lazy carving
 *      keeps untouched memory free of RSS);
 *   3. another page of the heap with free objects (the bin's avail list,
 *      kept by the owner's frees);
 *   4. when pages were taken since the last sweep for a quarter of those
 *      held, a sweep: every page of the class has its remote list taken;
 *      empty pages go back (nbm__page_release), others join avail;
 *   5. a new page (a cached free block, else the back-end); when there is
 *      none, the thread collects what the heaps hold and tries once more.
 * An owner's free that empties a non-current page releases it at once.
 *
 * Thread exit (a pthread key destructor): the heap is collected (remote
 * frees taken, empty pages released) and the record, with the pages still in
 * use, goes on the stack of abandoned heaps. The next new thread adopts it
 * whole (its pages' owner word is the record's address, so nothing changes
 * hands), and nbm_purge/malloc_trim and recovery collect abandoned heaps by
 * popping them all (exclusive while held) and pushing them back.
 * A thread with no usable heap (while it is being set up, or after its exit
 * destructor ran) serves small requests as one-page medium blocks and pushes
 * its small frees on the pages' remote lists.
 */
#include <pthread.h>
#include <string.h>

#include "fast.h"

#define NBM_TCACHE_MAX   ((uint32_t)1 << 16) /* threads alive at once */
#define NBM_TCACHE_SHIFT 4                   /* 16 records (about 44 KiB) a chunk */

_Thread_local nbm_tcache_t *nbm__tc NBM_TLS;
static _Thread_local int tstate NBM_TLS;

static _Atomic uintptr_t tcache_chunks[NBM_TCACHE_MAX >> NBM_TCACHE_SHIFT];
static nbm_pool_t tcache_pool = { .chunks = tcache_chunks, .stride = sizeof(nbm_tcache_t),
                                  .shift = NBM_TCACHE_SHIFT, .max = NBM_TCACHE_MAX, .fresh = 1 };
static nbm_stack_t abandoned;
static _Atomic uint32_t trim_epoch; /* bumped by every recovery: heaps give their spares back */
static pthread_key_t tcache_key;
static bool have_key;

static void tcache_exit(void *v);
static bool collect_heap(nbm_tcache_t *tc, bool spares);

/* Without the key (pthread_key_create failed) no thread gets a heap: every
 * thread runs the no-heap paths, slower but correct. */
void nbm__tcache_init_process(void)
{
    have_key = pthread_key_create(&tcache_key, tcache_exit) == 0;
}

nbm_tcache_t *nbm__tcache_get(void)
{
    if (nbm__tc)
        return nbm__tc;
    if (tstate != NBM_T_NEW)
        return NULL; /* being set up (re-entered) or already torn down */
    tstate = NBM_T_INIT;
    nbm__init();
    if (!have_key) {
        tstate = NBM_T_DEAD;
        return NULL;
    }
    uint32_t i = nbm__stack_pop(&abandoned, &tcache_pool); /* adopt */
    if (!i)
        i = nbm__pool_fresh(&tcache_pool, 1);
    if (!i) {
        /* Out of memory or more live threads than records: run without a
         * heap for now and try again on a later call. */
        tstate = NBM_T_NEW;
        return NULL;
    }
    nbm_tcache_t *tc = (nbm_tcache_t *)nbm__pool_rec(&tcache_pool, i);
    /* An adopted heap: the frees its pages received since its thread exited
     * are taken, empty pages become spares. */
    collect_heap(tc, false);
    tc->index = i;
    tc->arena_hint = i;
    tc->tick = NBM_HEARTBEAT;
    pthread_setspecific(tcache_key, tc);
    nbm__tc = tc;
    tstate = NBM_T_LIVE;
    nbm_stat_add(&nbm__gstats.threads, 1);
    return tc;
}

/* --- the bin's page lists (owner only) --------------------------------------- */

static void avail_push(nbm_bin_t *bin, nbm_page_t *pg)
{
    pg->avail = 1;
    pg->aprev = NULL;
    pg->anext = bin->avail;
    if (bin->avail)
        bin->avail->aprev = pg;
    bin->avail = pg;
}

static void avail_unlink(nbm_bin_t *bin, nbm_page_t *pg)
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

static nbm_binx_t *binx_of(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    return &tc->binx[bin - tc->bins];
}

static void page_link(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg)
{
    pg->prev = NULL;
    pg->next = bin->pages;
    if (bin->pages)
        bin->pages->prev = pg;
    bin->pages = pg;
    binx_of(tc, bin)->npages++;
}

static void spares_decay(nbm_tcache_t *tc);

/* An empty page leaves its class: to the heap's spares. */
static void page_drop(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg)
{
    avail_unlink(bin, pg);
    if (pg->prev)
        pg->prev->next = pg->next;
    else
        bin->pages = pg->next;
    if (pg->next)
        pg->next->prev = pg->prev;
    binx_of(tc, bin)->npages--;
    if (bin->page == pg) {
        bin->page = NULL;
        bin->head = NULL;
    }
    tc->drains++;
    unsigned k = nbm__page_order(pg->cls) - NBM_SPARE_ORDER0;
    nbm__page_unmake(pg);
    pg->next = tc->spare[k];
    tc->spare[k] = pg;
    tc->nspare[k]++;
    spares_decay(tc);
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
static bool release_spares(nbm_tcache_t *tc)
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
static void spares_decay(nbm_tcache_t *tc)
{
    uint32_t e = nbm_load_u32_relaxed(&trim_epoch);
    if (NBM_UNLIKELY(e != tc->trim_seen)) {
        tc->trim_seen = e;
        release_spares(tc);
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
static void give_spares(nbm_tcache_t *tc)
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
static void *take_spare(nbm_tcache_t *tc, unsigned order)
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

void nbm__page_changed(nbm_tcache_t *tc, nbm_page_t *pg)
{
    nbm_bin_t *bin = &tc->bins[pg->cls];
    if (pg->nfree == nbm__page_carved(pg))
        page_drop(tc, bin, pg);
    else if (!pg->avail)
        avail_push(bin, pg);
}

/* Takes a non-current page's remote frees onto its own list. True if the
 * page is now empty (every carved object free). */
static bool page_collect(nbm_page_t *pg)
{
    uint32_t n;
    void **last;
    void *l = nbm__page_take_remote(pg, &n, &last);
    if (l) {
        last[0] = pg->free;
        pg->free = l;
        pg->nfree += n;
    }
    return pg->nfree == nbm__page_carved(pg);
}

/* The current page stops being current: its list goes back to the page,
 * counted here (the fast paths keep no count; the list is empty unless a
 * collection retires the page). */
static void retire_current(nbm_bin_t *bin)
{
    nbm_page_t *pg = bin->page;
    if (!pg)
        return;
    uint32_t n = 0;
    for (void **o = bin->head; o; o = o[0])
        n++;
    pg->free = bin->head;
    pg->nfree = n;
    bin->page = NULL;
    bin->head = NULL;
}

/* Every page of the class: remote frees taken, empty pages released, the
 * others with free objects on avail. Returns the pages released. */
static uint32_t sweep_bin(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    uint32_t released = 0;
    for (nbm_page_t *pg = bin->pages, *next; pg; pg = next) {
        next = pg->next;
        if (pg == bin->page)
            continue;
        if (page_collect(pg)) {
            page_drop(tc, bin, pg);
            released++;
        } else if (pg->nfree && !pg->avail) {
            avail_push(bin, pg);
        }
    }
    binx_of(tc, bin)->fresh = 0;
    return released;
}

/* Every page of the heap swept, and with spares, the spares given back.
 * True if any page or spare went back. */
static bool collect_heap(nbm_tcache_t *tc, bool spares)
{
    uint32_t released = 0;
    for (unsigned c = 0; c < NBM_NCLASSES; c++) {
        nbm_bin_t *bin = &tc->bins[c];
        retire_current(bin);
        released += sweep_bin(tc, bin);
    }
    return (spares && release_spares(tc)) || released != 0;
}

/* Makes a page with free objects current; the bin's list is empty. */
static void make_current(nbm_bin_t *bin, nbm_page_t *pg)
{
    avail_unlink(bin, pg);
    retire_current(bin); /* its list is empty: the page is full */
    bin->page = pg;
    bin->head = pg->free;
    pg->free = NULL;
    pg->nfree = 0;
}

/* Objects to carve next from the current page: a batch, except on the
 * heap's only page of the class, whose carves start at one OS page's worth
 * and then double (a class the program uses for a few objects touches 4 KiB
 * of memory, not up to 16); its later pages take whole batches. */
static uint32_t carve_max(nbm_tcache_t *tc, nbm_bin_t *bin, const nbm_class_t *c)
{
    if (binx_of(tc, bin)->npages > 1)
        return c->batch;
    uint32_t carved = nbm__page_carved(bin->page), n = (uint32_t)NBM_PAGE / c->size;
    if (n < carved)
        n = carved;
    return n == 0 ? 1 : n < c->batch ? n : c->batch;
}

static bool refill(nbm_tcache_t *tc, unsigned cls)
{
    nbm_bin_t *bin = &tc->bins[cls];
    const nbm_class_t *c = &nbm__classes[cls];
    bool recovered = false;
    for (;;) {
        nbm_page_t *pg = bin->page;
        if (pg) {
            void *l = nbm__page_take_remote(pg, NULL, NULL);
            if (l) {
                bin->head = l; /* the list was empty */
                return true;
            }
            if (nbm__page_carve(pg, &bin->head, carve_max(tc, bin, c)) != 0)
                return true;
        }
        nbm_binx_t *x = binx_of(tc, bin);
        if (!bin->avail && x->fresh * 4 >= x->npages)
            sweep_bin(tc, bin);
        if (bin->avail) {
            make_current(bin, bin->avail);
            if (bin->head)
                return true;
            continue; /* cannot happen: avail pages hold free objects */
        }
        void *b = take_spare(tc, nbm__page_order(cls));
        if (!b)
            b = nbm__block_cached(nbm__page_order(cls)); /* e.g. an exited thread's spare */
        pg = nbm__page_new(cls, (uintptr_t)tc, &tc->arena_hint, b);
        if (!pg) {
            if (recovered || !nbm__recover())
                return false;
            recovered = true;
            continue;
        }
        tc->refills++;
        spares_decay(tc);
        x->fresh++;
        page_link(tc, bin, pg);
        retire_current(bin);
        bin->page = pg;
    }
}

void *nbm__small_alloc_generic(unsigned cls)
{
    nbm_tcache_t *tc = nbm__tcache_get();
    if (NBM_UNLIKELY(!tc)) {
        bool fresh;
        return nbm__medium_alloc(nbm__classes[cls].size, 0, &fresh, NULL);
    }
    if (NBM_UNLIKELY(tc->tick == 0)) { /* the fast path's countdown ran out */
        tc->tick = NBM_HEARTBEAT;
        nbm__remote_flush(tc);
        spares_decay(tc);
    }
    nbm_bin_t *bin = &tc->bins[cls];
    void **p = bin->rhead;
    if (p) { /* held remote frees first, as in nbm__malloc_fast */
        bin->rhead = p[0];
        p[1] = NULL;
        return p;
    }
    if (!bin->head && !refill(tc, cls))
        return NULL;
    p = bin->head;
    bin->head = p[0];
    p[1] = NULL;
    return p;
}

/* A small free on a thread without a heap: onto the page's remote list,
 * whoever owns it (its owner, or whoever adopts or collects it, takes it). */
void nbm__small_free_generic(void *p, nbm_page_t *pg)
{
    void **o = p;
    o[1] = (void *)((uintptr_t)p ^ nbm__secret);
    nbm__page_free_remote(pg, o, o);
}

static bool release_medium(nbm_tcache_t *tc)
{
    bool any = false;
    for (unsigned o = 0; tc && o < NBM_MCACHE_ORDERS; o++)
        if (tc->mcache[o]) {
            void *p = tc->mcache[o];
            tc->mcache[o] = NULL;
            nbm__medium_release(p, o);
            any = true;
        }
    return any;
}

void nbm__tcache_flush(nbm_tcache_t *tc, bool spares)
{
    nbm__remote_flush(tc);
    collect_heap(tc, spares);
    release_medium(tc);
    nbm__desc_flush(tc);
    nbm_stat_add(&nbm__gstats.medium_live, (uint64_t)tc->medium_delta);
    tc->medium_delta = 0;
    nbm_stat_add(&nbm__gstats.refills, tc->refills);
    nbm_stat_add(&nbm__gstats.drains, tc->drains);
    tc->refills = tc->drains = 0;
}

static void tcache_exit(void *v)
{
    nbm_tcache_t *tc = v;
    nbm__tc = NULL;
    tstate = NBM_T_DEAD;
    /* The spares go to the medium cache, where any thread's next page (or
     * medium block) of their size takes them while warm, and its delay
     * returns them to the OS otherwise. */
    nbm__tcache_flush(tc, false);
    give_spares(tc);
    nbm__stack_push(&abandoned, &tcache_pool, tc->index, tc->index);
}

bool nbm__heaps_collect(bool medium)
{
    nbm_tcache_t *tc = nbm__tc;
    bool any = false;
    if (tc) {
        nbm__remote_flush(tc);
        any |= collect_heap(tc, true);
        if (medium)
            any |= release_medium(tc);
    }
    /* Abandoned heaps: popped all at once, so each is ours alone until the
     * chain is pushed back (a thread starting meanwhile maps a new record). */
    uint32_t first = nbm__stack_pop_all(&abandoned), last = 0;
    for (uint32_t i = first; i; i = nbm_load_u32_relaxed((_Atomic uint32_t *)nbm__pool_rec(&tcache_pool, i))) {
        nbm_tcache_t *h = (nbm_tcache_t *)nbm__pool_rec(&tcache_pool, i);
        any |= collect_heap(h, true);
        nbm_stat_add(&nbm__gstats.drains, h->drains);
        h->drains = 0;
        last = i;
    }
    if (first)
        nbm__stack_push(&abandoned, &tcache_pool, first, last);
    return any;
}

/* After an allocation found no memory: whatever is free but held for one use
 * goes where any use can take it (empty pages of this thread's and the
 * abandoned heaps, the thread's cached medium blocks, the medium cache, empty
 * arenas). Pages of other live threads stay with them. */
bool nbm__recover(void)
{
    bool any = nbm_load_u64_relaxed(&nbm__gstats.medium_cached) != 0;
    if (nbm__tc)
        nbm__tc->arena_hint = 0; /* the lowest arenas first: the higher may retire */
    nbm_add_u32(&trim_epoch, 1); /* other live heaps give their spares back at their next page */
    any |= nbm__heaps_collect(true);
    any |= nbm__arena_reclaim();
    return any;
}
