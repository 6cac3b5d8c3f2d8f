/*
 * heap.c - per-thread heaps: the bins' slow paths, thread start and exit,
 * adoption of abandoned heaps, collection and recovery.
 *
 * The fast paths (fast.h) pop and push the bin's list, which holds objects
 * of any pages (internal.h); with no room on it, free gives this heap's
 * objects to their pages itself and brings other heaps' here (the trim:
 * sent to their pages in batches). Every NBM_HEARTBEAT-th fast malloc
 * comes here for the heartbeat (idle lists sent, spare decay). When the
 * bin's list is empty (refill):
 *   0. the current page's own list (frees that found no room);
 *   1. the current page's remote frees (one exchange);
 *   2. the current page's uncarved tail (a batch at a time: lazy carving
 *      keeps untouched memory free of RSS);
 *   3. another page of the heap with free objects (the bin's avail list,
 *      which a page joins when a switch leaves it, full, or at its owner's
 *      next free if it was taken off full: the page that waited longest; malloc's
 *      fast path tries 1 and 2 as a look and this switch with no call,
 *      switch_page, before the rest);
 *   4. when pages were taken since the last sweep for a quarter of those
 *      held, a sweep: every page of the class has its remote list taken;
 *      empty pages go back (nbm__page_release), others join avail;
 *   5. a new page (a spare of the heap, revived with its free list when it
 *      was a page of the class; a cached free block; else the back-end);
 *      when there is none, the thread collects what the heaps hold and
 *      tries once more.
 * A trim that empties a non-current page makes it a spare at once.
 *
 * Thread exit (a pthread key destructor): the lists' objects, medium blocks,
 * descriptors and spares go back, and the record, with its pages and their
 * lists as they are, goes on the stack of abandoned heaps. The next new
 * thread adopts it whole and warm (its pages' owner word is the record's
 * address, so nothing changes hands). A heap not adopted within half
 * NBM_PURGE_DELAY_MS is collected (remote frees taken, empty pages and
 * spares returned) at a live thread's heartbeat or new page; nbm_purge,
 * malloc_trim and recovery collect every abandoned heap. Collectors pop
 * the whole stack (each heap is theirs alone while held) and push it back.
 * A thread with no usable heap (while it is being set up, or after its exit
 * destructor ran) serves small requests as one-page medium blocks and pushes
 * its small frees on the pages' remote lists.
 */
#include <pthread.h>
#include <string.h>

#include "bin.h"

#define NBM_TCACHE_MAX   ((uint32_t)1 << 16) /* threads alive at once */
#define NBM_TCACHE_SHIFT 4                   /* 16 records (about 93 KiB) a chunk */

_Thread_local nbm_tcache_t *nbm__tc NBM_TLS;
nbm_bin_t nbm__bins_none[NBM_NSMALL + 1];
_Thread_local char *nbm__mheap NBM_TLS = (char *)nbm__bins_none;
static _Thread_local int tstate NBM_TLS;

static _Atomic uintptr_t tcache_chunks[NBM_TCACHE_MAX >> NBM_TCACHE_SHIFT];
static nbm_pool_t tcache_pool = { .chunks = tcache_chunks, .stride = sizeof(nbm_tcache_t),
                                  .shift = NBM_TCACHE_SHIFT, .max = NBM_TCACHE_MAX, .fresh = 1 };
static nbm_stack_t abandoned;
static pthread_key_t tcache_key;
static _Atomic uint32_t key_state; /* nbm__once's: 0 none, 1 being made, 2 made, 3 refused */

static void tcache_exit(void *v);
static bool collect_heap(nbm_tcache_t *tc, bool spares);
static void abandoned_decay(nbm_tcache_t *tc);

/* A bin's list: 8 KiB of its class, 16 to 256 objects; a large class 0
 * (its frees go to their pages at once: nbm__large_alloc). The list holds other
 * heaps' objects as well as this heap's, and each keeps its page in use:
 * at 32 KiB, the threads of a ring of cross-thread frees held 32 KiB of
 * every class they used each, which their owners' pages could neither
 * empty nor serve (remote-free at 8 threads, 20 classes of 16-1024 B: peak
 * RSS 12.2 MiB, 6.1 at 8 KiB, mimalloc 7.0; CPU a pair unchanged at one
 * thread: leak, larson; docs/nbmalloc.md). A smaller list only for bins
 * that overflowed on another heap's object held too much: the lists of a
 * thread that mallocs as much as it frees rarely overflow. This is the
 * floor (lim0): a bin whose own objects overflow the list grows its lim
 * (bin_lmax). */
#ifndef NBM_LIST_BYTES
#define NBM_LIST_BYTES 8192u
#endif
#ifndef NBM_LIST_MAX0
#define NBM_LIST_MAX0 256u
#endif
static uint32_t bin_lim(unsigned cls)
{
    if (cls >= NBM_NSMALL)
        return 0;
    uint32_t n = NBM_LIST_BYTES / nbm__classes[cls].size;
    return n < 16 ? 16 : n > NBM_LIST_MAX0 ? NBM_LIST_MAX0 : n;
}

/* How far a bin's lim may grow (refilled): 64 KiB of the class, at most
 * 4,096 objects, never below bin_lim. lim grows at a refill when frees
 * of this heap's own objects found the list full since the last one (a
 * run of frees longer than lim, then as many mallocs: thread-test's
 * rounds), by as many as overflowed and at least by lim (so a run that
 * fits in lmax fits at the next round: doubling alone took 5 rounds to
 * reach 4,096 and up to 17 for every free of a 10,000-object round to stay
 * on the list, against 2 this way), so that the next run stays on the
 * list, not on the page path.
 * Only this heap's objects count: a bin whose overflows are other heaps'
 * (remote-free, prodcons consumers) keeps lim, and holds no more of their
 * pages. The heartbeat takes it back (nbm__bins_age). */
#ifndef NBM_LIST_MAX_BYTES
#define NBM_LIST_MAX_BYTES 65536u
#endif
#define NBM_LIST_MAX 4096u
static uint32_t bin_lmax(unsigned cls)
{
    if (cls >= NBM_NSMALL)
        return 0;
    uint32_t n = NBM_LIST_MAX_BYTES / nbm__classes[cls].size, l = bin_lim(cls);
    n = n > NBM_LIST_MAX ? NBM_LIST_MAX : n;
    return n < l ? l : n;
}

/* lim back to its floor and the counts cleared (the list is empty, or
 * the caller gives it back). */
static void bin_reset(nbm_bin_t *bin)
{
    bin->lim = bin->lim0;
    bin->room = (int32_t)bin->lim;
    bin->over = 0;
    bin->quiet = 0;
}

/* The key whose destructor runs a thread's exit (tcache_exit), made once
 * per process: at start-up (heap_start), or by the first thread to want a
 * heap if a malloc comes before that. pthread_key_create does not call
 * malloc for the first keys, which is why it is made so early. A second
 * thread arriving while it is made waits (once per process, before any
 * heap exists). Without the key (pthread_key_create failed) no thread gets
 * a heap: every thread runs the no-heap paths, slower but correct. */
static bool make_key(void)
{
    return pthread_key_create(&tcache_key, tcache_exit) == 0;
}

static bool heap_key(void)
{
    return nbm__once(&key_state, make_key);
}

__attribute__((constructor)) static void heap_start(void) { (void)heap_key(); }

nbm_tcache_t *nbm__tcache_get(void)
{
    if (nbm__tc)
        return nbm__tc;
    if (tstate != NBM_T_NEW)
        return NULL; /* being set up (re-entered) or already torn down */
    tstate = NBM_T_INIT;
    nbm__init();
    if (!heap_key()) {
        tstate = NBM_T_DEAD;
        return NULL;
    }
    uint32_t i = nbm__stack_pop(&abandoned, &tcache_pool); /* adopt */
    bool fresh = false;
    if (!i) {
        i = nbm__pool_fresh(&tcache_pool, 1);
        fresh = true;
    }
    if (!i) {
        /* Out of memory or more live threads than records: run without a
         * heap for now and try again on a later call. */
        tstate = NBM_T_NEW;
        return NULL;
    }
    nbm_tcache_t *tc = (nbm_tcache_t *)nbm__pool_rec(&tcache_pool, i);
    if (fresh) /* its counters are summed from now on (an adopted record's already are) */
        nbm__thread_register(&tc->thr);
    for (unsigned c = 0; c < NBM_NCLASSES; c++) { /* free's copies of the class (a fresh record is zeros) */
        nbm_bin_t *bin = &tc->bins[c];
        bin->mask = nbm__classes[c].chunk_mask;
        bin->inv = nbm__classes[c].inv;
        bin->shift = nbm__classes[c].shift;
        if (c < NBM_NSMALL && bin->lim0 == 0) { /* a fresh record (an adopted one keeps them) */
            bin->lim0 = (uint16_t)bin_lim(c);
            bin->lmax = (uint16_t)bin_lmax(c);
        }
        bin_reset(bin);
    }
    /* An adopted heap is used as its thread left it (or as a collection
     * left it): its current pages and their lists serve at once, and frees
     * that reached its pages meanwhile are taken by its refills and sweeps
     * like any remote frees. */
    tc->exited = 0;
    tc->index = i;
    tc->thr.arena_hint = i;
    tc->tick = NBM_HEARTBEAT;
    pthread_setspecific(tcache_key, tc);
    nbm__thr = &tc->thr;
    nbm__tc = tc;
    nbm__mheap = (char *)tc;
    tstate = NBM_T_LIVE;
    NBM_STAT_ADD(threads, 1);
    return tc;
}


/* An empty page leaves its class: to the heap's spares. */
static void page_drop(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg)
{
    avail_unlink(bin, pg);
    nbm_binx_t *x = binx_of(tc, bin);
    if (pg->prev)
        pg->prev->next = pg->next;
    else
        x->pages = pg->next;
    if (pg->next)
        pg->next->prev = pg->prev;
    x->npages--;
    if (bin->page == pg)
        clear_current(bin); /* empty: none of its objects is on the list */
    tc->drains++;
    unsigned order = nbm__page_order(pg->cls);
    if (order < NBM_SPARE_ORDER0 + NBM_KEPT_ORDERS && tc->kept[order - NBM_SPARE_ORDER0] == pg)
        tc->kept[order - NBM_SPARE_ORDER0] = NULL;
    nbm__page_unmake(pg);
    nbm__spare_put(tc, pg, order);
    nbm__heap_decay(tc);
}

/* A large class's page of 64-512 KiB that just emptied stays in its class
 * as the heap's kept page of its order (the one kept before is dropped), so
 * a malloc/free loop of one size reuses it instead of making and dropping a
 * page each time (4-6x the instructions of a medium block's reuse); a kept
 * page unused for a decay interval is dropped (kept_decay). One per order up
 * to 512 KiB, as the former medium blocks kept one per order a thread. */
static void keep_empty(nbm_tcache_t *tc, nbm_page_t *pg)
{
    unsigned k = nbm__page_order(pg->cls) - NBM_SPARE_ORDER0;
    nbm_page_t *old = tc->kept[k];
    tc->kept[k] = pg;
    tc->kept_used |= 1u << k;
    if (old && old != pg)
        page_drop(tc, &tc->bins[old->cls], old);
}

static void kept_decay(nbm_tcache_t *tc)
{
    for (unsigned k = 0; k < NBM_KEPT_ORDERS; k++) {
        nbm_page_t *pg = tc->kept[k];
        if (pg && !(tc->kept_used & (1u << k)))
            page_drop(tc, &tc->bins[pg->cls], pg); /* clears kept[k] */
    }
    tc->kept_used = 0;
}

/* The spare decay, and at the end of each of its intervals the kept pages'. */
void nbm__heap_decay(nbm_tcache_t *tc)
{
    if (nbm__spares_decay(tc))
        kept_decay(tc);
}

/* A trim's objects to a page off the avail list, or that emptied a page
 * (send): the page joins the bin's avail list, bin in hand; an emptied page
 * goes to the heap's spares (a large class's to its kept page). The
 * current page stays as it is, even empty, as when its objects stayed on
 * the list: a heap a thread leaves keeps it, warm, for its adopter, and
 * its list is the next refill's. */
void nbm__page_refreed(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg)
{
    if (pg == bin->page)
        return; /* stays current, off avail, even empty (its list: the next refill's) */
    if (nbm__page_used(pg) == 0) {
        if (pg->cls < NBM_NSMALL || nbm__page_order(pg->cls) >= NBM_SPARE_ORDER0 + NBM_KEPT_ORDERS) {
            page_drop(tc, bin, pg);
            return;
        }
        keep_empty(tc, pg);
    }
    if (!nbm__page_avail(pg))
        avail_append(bin, pg);
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
        nbm__page_set_used(pg, nbm__page_used(pg) - n);
    }
    return nbm__page_used(pg) == 0;
}

/* Sends the list's objects (linked by word 0, ending in NULL) to their
 * pages. The list is taken in runs of one page (objects freed in
 * allocation order come in long runs; random frees in runs of one),
 * already linked in order: a run goes whole, its page looked up once.
 * This heap's own (the current page too): onto the page's list, its count
 * of objects in use lowered by the run's length, with free's former edges
 * (nbm__page_refreed): the page is off the avail list, or it empties; the
 * page record is read here, not on free's fast path. Relaxed: only this
 * thread makes a page ours (or stops it being ours); another heap's value
 * is never ours, and an object on the list keeps its page in use, so the
 * page cannot change hands meanwhile. Other heaps': one list to
 * nbm__remote_push, which groups it by page. */
static void send(nbm_tcache_t *tc, nbm_bin_t *bin, void **list)
{
    uintptr_t mask = bin->mask;
    void **other = NULL;
    while (list) {
        void **first = list, **last = list;
        uintptr_t base = (uintptr_t)first & ~mask;
        uint32_t n = 1;
        for (list = first[0]; list && ((uintptr_t)list & ~mask) == base; list = list[0]) {
            last = list;
            n++;
        }
        nbm_page_t *pg = nbm__page_at(nbm__arena_of(base), base, mask);
        if (nbm_load_uptr_relaxed(&pg->heap) == (uintptr_t)tc) {
            last[0] = pg->free;
            pg->free = first;
            /* Both edges in one word (nbm_page_t.uw): off the avail list,
             * the word is NBM_PAGE_OFF + used, negative as 16 bits after
             * the subtraction (used >= n: the run's objects were in use);
             * on it, the count alone, 0 when the page empties. */
            int16_t uw = (int16_t)(pg->uw - n);
            pg->uw = (uint16_t)uw;
            if (uw <= 0)
                nbm__page_refreed(tc, bin, pg);
        } else {
            last[0] = other;
            other = first;
        }
    }
    if (other)
        nbm__remote_push((unsigned)(bin - tc->bins), other);
}

/* The list's newest `keep` objects stay, the older go to their pages
 * (send); returns how many stayed (fewer if the list is shorter). */
static uint32_t bin_keep(nbm_tcache_t *tc, nbm_bin_t *bin, uint32_t keep)
{
    void **o = bin->head, **last = NULL;
    uint32_t n = 0;
    for (; n < keep && o; n++) {
        last = o;
        o = o[0];
    }
    if (o) {
        if (last)
            last[0] = NULL;
        else
            bin->head = NULL;
        send(tc, bin, o);
    }
    return n;
}

/* The list is full and takes another heap's object: the newest lim / 4
 * objects stay, the older go to their pages. */
static void bin_trim(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    bin->room = (int32_t)(bin->lim - bin->lim / 4);
    bin_keep(tc, bin, bin->lim / 4);
}

/* free found no room on the bin's list and the object on another heap's
 * page (nbm__free_fast, which gives this heap's own to their pages): onto
 * the list, trimmed, so it crosses back in a batch (one CAS per page;
 * prodcons, remote-free). Trimming the list for this heap's objects too,
 * 3 lim / 4 at a time, walked every object of a run of frees twice, one
 * load waiting for the other: thread-test 8 B cost 31 % more CPU a pair
 * than main at 2 % more instructions. */
void nbm__free_other(nbm_tcache_t *tc, nbm_bin_t *bin, void **o)
{
    o[0] = bin->head;
    bin->head = o;
    /* A grown list that fills up with other heaps' objects goes back to
     * its floor: it holds more than lim0 of them only until they overflow
     * it (their pages are ones their owners can neither empty nor serve). */
    bin->lim = bin->lim0;
    bin->over = 0;
    bin_trim(tc, bin);
}

/* A grown list's bottom that the thread no longer reaches: over
 * NBM_LIST_QUIET heartbeats with no refill (the list never ran empty),
 * the room sampled at each moved by less than lim / 4, so the list's depth
 * swung by about that much while its lim allowed four times more. lim
 * halves (still twice the swing), and the list keeps its newest lim
 * objects; the older go to their pages. A per-pop low-water mark
 * (tcmalloc's) would tell it exactly, at a compare and a store on
 * malloc's fast path; samples of room cost nothing there. A run of frees
 * and mallocs of the same length each interval (thread-test's rounds, when
 * the list holds them all) swings by the run: no shrink. */
#ifndef NBM_LIST_QUIET
#define NBM_LIST_QUIET 8
#endif
static void bin_shrink(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    uint32_t lim = bin->lim / 2;
    bin->lim = lim < bin->lim0 ? bin->lim0 : lim;
    bin->room = (int32_t)(bin->lim - bin_keep(tc, bin, bin->lim));
}

/* The heartbeat's look at a grown bin's room (bin_shrink). */
static void bin_sample(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    int32_t r = bin->room;
    if (bin->quiet == 0 || r < bin->room_lo)
        bin->room_lo = r;
    if (bin->quiet == 0 || r > bin->room_hi)
        bin->room_hi = r;
    if (++bin->quiet < NBM_LIST_QUIET)
        return;
    bin->quiet = 0;
    if ((uint32_t)(bin->room_hi - bin->room_lo) < bin->lim / 4)
        bin_shrink(tc, bin);
}

/* The heartbeat: a list whose head is the one of the last heartbeat (a
 * whole interval of 4096 mallocs with no push or pop of the class, or as
 * many of each) is idle, and goes to its pages whole, so the pages of a
 * class the thread stopped using can empty. A list in use keeps its
 * objects (at most lim more than its last refill brought). Sending what
 * lay below the last head, as the held remote frees were aged, walked
 * every list to its old head at every heartbeat: hybrid-pool 2.6x the
 * first-level data cache misses of main (callgrind), +3-4 % CPU a pair. */
void nbm__bins_age(nbm_tcache_t *tc)
{
    for (unsigned c = 0; c < NBM_NSMALL; c++) {
        nbm_bin_t *bin = &tc->bins[c];
        nbm_binx_t *x = &tc->binx[c];
        void **h = bin->head;
        if (h && h == x->head_mark) {
            bin->head = NULL;
            bin_reset(bin);
            send(tc, bin, h);
            h = NULL;
        } else if (bin->lim > bin->lim0) {
            bin_sample(tc, bin);
            h = bin->head;
        }
        x->head_mark = h;
    }
}

/* A medium block is about to fault in new memory (alloc.c): the lists that
 * grew go back whole first, so the pages only their objects kept in use
 * can empty, become spares and give the block their memory. A grown list
 * that went idle holds up to lmax objects (and the refill's), which may
 * lie on as many pages, until the heartbeat sends it two intervals later:
 * 3 rounds of a million 64-byte objects freed in random order, then 256
 * MiB of 256 KiB blocks, peaked at 330 MB without this, 280 with it (main
 * 311, whose 8 KiB list, with the refill's objects, pins pages the same
 * way; mimalloc 280). Only grown lists: a medium block's fault is no sign
 * that an 8 KiB list is idle. */
void nbm__bins_shed(nbm_tcache_t *tc)
{
    for (unsigned c = 0; c < NBM_NSMALL; c++) {
        nbm_bin_t *bin = &tc->bins[c];
        if (bin->lim <= bin->lim0)
            continue;
        void **l = bin->head;
        bin->head = NULL;
        tc->binx[c].head_mark = NULL;
        bin_reset(bin);
        if (l)
            send(tc, bin, l);
    }
}

/* Every list's objects to their pages, the current pages' too (exit: the
 * heap is abandoned with its current pages, whose objects its adopter's
 * refills take back from their lists). */
static void bins_send(nbm_tcache_t *tc)
{
    for (unsigned c = 0; c < NBM_NCLASSES; c++) {
        nbm_bin_t *bin = &tc->bins[c];
        tc->binx[c].head_mark = NULL;
        void **l = bin->head;
        bin->head = NULL; /* lim: reset by collect_heap before a flush, by the adopter after an exit */
        if (l)
            send(tc, bin, l);
    }
}

/* The current page stops being current, and the list goes back whole
 * (the page's objects to it too: it is off the avail list, so its first
 * one puts it back there, and it empties when all of its objects came
 * back); a page that holds objects a trim sent it joins the avail list. */
static void retire_current(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    nbm_page_t *pg = bin->page;
    clear_current(bin);
    binx_of(tc, bin)->head_mark = NULL;
    void **l = bin->head;
    bin->head = NULL;
    if (l)
        send(tc, bin, l);
    if (pg && nbm_load_uptr_relaxed(&pg->heap) == (uintptr_t)tc && pg->free && !nbm__page_avail(pg))
        avail_append(bin, pg);
}

/* Every page of the class: remote frees taken, empty pages released, the
 * others with free objects on avail. Returns the pages released. */
uint32_t nbm__sweep_bin(nbm_tcache_t *tc, nbm_bin_t *bin)
{
    uint32_t released = 0;
    for (nbm_page_t *pg = binx_of(tc, bin)->pages, *next; pg; pg = next) {
        next = pg->next;
        if (pg == bin->page)
            continue;
        if (page_collect(pg)) {
            page_drop(tc, bin, pg);
            released++;
        } else if (pg->free && !nbm__page_avail(pg)) {
            avail_append(bin, pg);
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
        retire_current(tc, bin);
        if (c < NBM_NSMALL)
            bin_reset(bin); /* its list went back whole */
        released += nbm__sweep_bin(tc, bin);
    }
    return (spares && nbm__spares_release(tc)) || released != 0;
}

/* Makes a page with free objects current; the bin's list is empty. */
static void make_current(nbm_tcache_t *tc, nbm_bin_t *bin, nbm_page_t *pg)
{
    avail_unlink(bin, pg);
    retire_current(tc, bin); /* its list is empty: the page stays off avail, full */
    bin->page = pg;
    bin->head = pg->free;
    pg->free = NULL;
    nbm__page_set_used(pg, nbm__page_carved(pg)); /* the bin's list is no count of the page's */
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

/* A new page of class cls in the bin (a spare of its order first, then the
 * medium cache, then the back-end), counted and linked. */
nbm_page_t *nbm__heap_page_new(nbm_tcache_t *tc, nbm_bin_t *bin, unsigned cls)
{
    unsigned order = nbm__page_order(cls);
    void *b = nbm__spare_take(tc, order); /* a spare, else the medium cache's (e.g. an exited thread's) */
    /* A spare that was a page of this class comes back with its free list:
     * a program that fills and empties pages in rounds (thread-test) carves
     * each page once, not every round. Not a block of the shared medium
     * cache (pages of NBM_SHARED_ORDER and up): its policy may have purged
     * the memory, and the list with it, while the unit words stayed. */
    nbm_page_t *pg = b && order < NBM_SHARED_ORDER ? nbm__page_revive(b, cls, (uintptr_t)tc) : NULL;
    if (!pg)
        pg = nbm__page_new(cls, (uintptr_t)tc, &tc->thr.arena_hint, b);
    if (!pg)
        return NULL;
    if (!b)
        nbm__spare_fresh((void *)nbm__page_base(pg), order);
    tc->refills++;
    nbm__heap_decay(tc);
    binx_of(tc, bin)->fresh++;
    page_link(tc, bin, pg);
    return pg;
}

/* The page switch: the first avail page becomes current, if it has free
 * objects. The bin's list is empty and the callers saw the current page
 * (if any) exhausted: nothing on its own or remote list, nothing left to
 * carve. It joins the avail list's end now, full: by the time it is first
 * again it has, under random frees, gathered some, and the trim that
 * brings it its first objects finds no edge (the page's avail flag: a page
 * taken off the list full, by the refill, rejoins there). */
static inline bool take_avail(nbm_bin_t *bin)
{
    nbm_page_t *av = bin->avail;
    if (!av || !av->free)
        return false;
    avail_unlink(bin, av);
    if (bin->page)
        avail_append(bin, bin->page);
    void *l = av->free;
    bin->page = av;
    const nbm_class_t *c = &nbm__classes[av->cls];
    bin->head = l;
    av->free = NULL;
    nbm__page_set_used(av, c->cap - av->left);
    return true;
}

static NBM_NOINLINE bool refill(nbm_tcache_t *tc, unsigned cls)
{
    nbm_bin_t *bin = &tc->bins[cls];
    const nbm_class_t *c = &nbm__classes[cls];
    bool recovered = false;
    for (;;) {
        nbm_page_t *pg = bin->page;
        if (pg) {
            if (pg->free) { /* objects a trim sent back to it */
                bin->head = pg->free;
                pg->free = NULL;
                nbm__page_set_used(pg, nbm__page_carved(pg));
                return true;
            }
            void *l = nbm__page_take_remote(pg, NULL, NULL);
            if (l) {
                bin->head = l; /* the list was empty */
                return true;
            }
            /* A page fully carved is the common case on a page switch
             * (random frees leave pages with a free object or two): its
             * record tells it without a call. */
            if (pg->left != 0 && nbm__page_carve(pg, &bin->head, carve_max(tc, bin, c)) != 0)
                return true;
        }
        if (take_avail(bin))
            return true;
        /* Pages that joined the list full at a switch and got no free
         * since leave it; their next free brings them back (free's edge). */
        while (bin->avail && !bin->avail->free)
            avail_unlink(bin, bin->avail);
        nbm_binx_t *x = binx_of(tc, bin);
        if (!bin->avail && x->fresh * 4 >= x->npages)
            nbm__sweep_bin(tc, bin);
        if (bin->avail) {
            make_current(tc, bin, bin->avail);
            if (bin->head)
                return true;
            continue; /* cannot happen: avail pages hold free objects */
        }
        pg = nbm__heap_page_new(tc, bin, cls);
        if (!pg) {
            if (recovered || !nbm__recover())
                return false;
            recovered = true;
            continue;
        }
        abandoned_decay(tc);
        make_current(tc, bin, pg); /* a revived page's list, else carved next */
        if (bin->head)
            return true;
    }
}

/* The page switch alone, with no call (so no register to save): the
 * current page, if any, has no remote frees and nothing left to carve (both
 * in its record's line), and the first avail page has free objects. False
 * otherwise (refill does the rest). The relaxed look at the remote word is
 * nbm__page_take_remote's own first step. */
static inline bool switch_page(nbm_bin_t *bin)
{
    nbm_page_t *pg = bin->page;
    if (pg && (pg->free || nbm_load_uptr_relaxed(&pg->remote) != 0 || pg->left != 0))
        return false;
    return take_avail(bin);
}

/* The list was empty: the room starts again at lim, so the list holds at
 * most lim objects of other pages and the refill's own (which its pops
 * count up). */
static inline void refilled(nbm_bin_t *bin)
{
    if (NBM_UNLIKELY(bin->over != 0)) {
        uint32_t lim = bin->lim + (bin->over > bin->lim ? bin->over : bin->lim);
        bin->lim = lim < bin->lmax ? lim : bin->lmax;
        bin->over = 0;
    }
    bin->quiet = 0;
    bin->room = (int32_t)bin->lim;
}

/* The rest of a refill for nbm__small_refill, then the pop; NULL when no
 * page could be had. */
static NBM_NOINLINE void *refill_pop(nbm_bin_t *bin)
{
    nbm_tcache_t *tc = nbm__tc;
    if (NBM_UNLIKELY(!refill(tc, (unsigned)(bin - tc->bins))))
        return NULL;
    return nbm__bin_pop(bin);
}

/* The bin malloc's fast path found empty (its class is the bin's place in
 * the heap: nothing recomputed), through nbm__malloc_refill. Calls nothing
 * but by tail calls, so it saves no register. */
void *nbm__small_refill(nbm_bin_t *bin)
{
    /* nbm__bins_none's: no heap (yet, or any more). Told by the bin's
     * address, not by nbm__tc, so that no order of the two pointers' stores
     * (heap.c) lets a malloc between them write there. */
    if (NBM_UNLIKELY((uintptr_t)bin - (uintptr_t)nbm__bins_none < sizeof nbm__bins_none))
        return NULL;
    refilled(bin);
    if (!switch_page(bin))
        return refill_pop(bin);
    return nbm__bin_pop(bin);
}

void *nbm__small_alloc_generic(unsigned cls)
{
    nbm_tcache_t *tc = nbm__tcache_get();
    if (NBM_UNLIKELY(!tc)) {
        bool fresh;
        return nbm__medium_alloc(nbm__classes[cls].size, 0, &fresh, NULL, NULL);
    }
    /* A large malloc counts 16 on the heartbeat; its heartbeat also sweeps
     * the medium cache, as a medium call does (small ones do not: a phase of
     * small objects then purged a working set of large ones, +50 % faults). */
    if (cls >= NBM_NSMALL)
        tc->tick = tc->tick > 16 ? tc->tick - 16 : 0;
    if (NBM_UNLIKELY(tc->tick == 0)) { /* the fast path's countdown ran out */
        tc->tick = NBM_HEARTBEAT;
        nbm__bins_age(tc);
        nbm__heap_decay(tc);
        abandoned_decay(tc);
        if (cls >= NBM_NSMALL)
            nbm__medium_tick(nbm__os_now_ns());
    }
    nbm_bin_t *bin = &tc->bins[cls];
    if (cls >= NBM_NSMALL) /* its list is empty (lim 0: frees go to their pages) */
        return nbm__large_alloc(tc, cls);
    if (!bin->head) {
        refilled(bin);
        if (!refill(tc, cls))
            return NULL;
    }
    return nbm__bin_pop(bin);
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
    if (tc)
        nbm__medium_slots_release(&tc->thr, &any);
    return any;
}

/* The thread's caches that are no page of its own go back: the lists'
 * objects, medium blocks, descriptors, statistics. */
static void flush_caches(nbm_tcache_t *tc)
{
    bins_send(tc);
    release_medium(tc);
    nbm__desc_flush(&tc->thr);
    NBM_STAT_ADD(medium_live, (uint64_t)tc->thr.medium_delta);
    tc->thr.medium_delta = 0;
    NBM_STAT_ADD(refills, tc->refills);
    NBM_STAT_ADD(drains, tc->drains);
    tc->refills = tc->drains = 0;
}

void nbm__tcache_flush(nbm_tcache_t *tc, bool spares)
{
    collect_heap(tc, spares);
    flush_caches(tc);
}

/* The heap is abandoned whole, its pages and their lists as they are: a
 * thread that starts soon (a pool, a short-lived worker) adopts it warm,
 * with no page to take, carve or sweep. What is no page of its own goes
 * back now; the spares go to the medium cache, where any thread's next page
 * (or medium block) of their size takes them while warm and its policy
 * returns them to the OS otherwise. A heap nobody adopts within half
 * NBM_PURGE_DELAY_MS is collected by a live thread (abandoned_decay), or by
 * nbm_purge and recovery. */
static void tcache_exit(void *v)
{
    nbm_tcache_t *tc = v;
    nbm__tc = NULL;
    nbm__thr = NULL;
    nbm__mheap = (char *)nbm__bins_none;
    tstate = NBM_T_DEAD;
    flush_caches(tc);
    nbm__spares_give(tc);
    tc->exited = nbm__os_now_ns() | 1;
    nbm__stack_push(&abandoned, &tcache_pool, tc->index, tc->index);
}

/* Collects the abandoned heaps (all, or those abandoned for at least `age`
 * ns at `now`): popped all at once, so each is ours alone until the chain
 * is pushed back (a thread starting meanwhile maps a new record). True if
 * anything was given back. */
static bool collect_abandoned(uint64_t now, uint64_t age, bool all)
{
    bool any = false;
    uint32_t first = nbm__stack_pop_all(&abandoned), last = 0;
    for (uint32_t i = first; i; i = nbm_load_u32_relaxed((_Atomic uint32_t *)nbm__pool_rec(&tcache_pool, i))) {
        nbm_tcache_t *h = (nbm_tcache_t *)nbm__pool_rec(&tcache_pool, i);
        last = i;
        if (!all && !nbm__abandoned_due(h->exited, now, age))
            continue;
        any |= collect_heap(h, true);
        h->exited = 0;
        NBM_STAT_ADD(drains, h->drains);
        h->drains = 0;
    }
    if (first)
        nbm__stack_push(&abandoned, &tcache_pool, first, last);
    return any;
}

/* At most once per half NBM_PURGE_DELAY_MS per thread, and only while the
 * abandoned stack is not empty: heaps nobody adopted within that time give
 * their empty pages back (the policy's delay, as for spares). */
static void abandoned_decay(nbm_tcache_t *tc)
{
    if ((uint32_t)nbm_load_u64_relaxed(&abandoned.top) == 0)
        return;
    uint64_t now = nbm__os_now_ns(), half = nbm__opt.purge_delay_ns / 2;
    if (now - tc->adecay_since < half)
        return;
    tc->adecay_since = now;
    collect_abandoned(now, half, false);
}

bool nbm__heaps_collect(bool medium)
{
    nbm_tcache_t *tc = nbm__tc;
    bool any = false;
    if (tc) {
        any |= collect_heap(tc, true);
        if (medium)
            any |= release_medium(tc);
    }
    any |= collect_abandoned(0, 0, true);
    return any;
}

/* After an allocation found no memory: whatever is free but held for one use
 * goes where any use can take it (empty pages of this thread's and the
 * abandoned heaps, the thread's cached medium blocks, the medium cache, empty
 * arenas). Pages of other live threads stay with them. */
bool nbm__recover(void)
{
    bool any = NBM_STAT(medium_cached) != 0;
    if (nbm__tc)
        nbm__tc->thr.arena_hint = 0; /* the lowest arenas first: the higher may retire */
    nbm__spares_trim(); /* other live heaps give their spares back at their next page */
    any |= nbm__heaps_collect(true);
    /* The medium cache, with what the collection put there: its blocks may
     * merge into what the request needs. */
    any |= NBM_STAT(medium_cached) != 0;
    nbm__decay_sweep(true);
    any |= nbm__arena_reclaim();
    return any;
}

/* A large class (above NBM_SMALL_MAX: a few objects a page) has no current
 * page: every free by the owner lands on its page's own list, counted (the
 * third case of nbm__free_fast), so a page whose objects all came back
 * leaves the class at once and its block serves any class of its order. Its
 * avail list holds the pages with a free or an uncarved object: the first
 * gives one (its list first, else one carved), else a sweep or a new page. */
NBM_NOINLINE void *nbm__large_alloc(nbm_tcache_t *tc, unsigned cls)
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

