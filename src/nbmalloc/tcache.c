/*
 * tcache.c - per-thread caches: refill, drain, thread start and exit.
 *
 * The fast paths (internal.h) only pop and push a bin's list. Here:
 *  - refill: carve a batch from the bin's bump range; else pop a batch from
 *    the class's shared stack (one CAS); else take a new chunk from the
 *    back-end and carve from it (objects are carved lazily, so a chunk's
 *    untouched tail costs no RSS);
 *  - flush: a bin's `local` list that reaches a batch goes to the shared
 *    stack as one descriptor (one CAS); an empty `head` takes `local` over;
 *  - thread exit (a pthread key destructor): every bin, bump range included,
 *    goes to the shared stacks, the descriptors to the shared pool, and the
 *    tcache record to the free-tcache stack for the next thread.
 * A thread with no usable cache (while its cache is being set up, or after its
 * exit destructor ran) takes the no-cache path: small requests are served as
 * one-page medium blocks and small frees are pushed as one-object batches.
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "internal.h"

#define NBM_TCACHE_MAX   ((uint32_t)1 << 16) /* threads alive at once */
#define NBM_TCACHE_SHIFT 5                   /* 32 records (about 60 KiB) a chunk */

_Thread_local nbm_tcache_t *nbm__tc NBM_TLS;
static _Thread_local int tstate NBM_TLS;

nbm_stack_t nbm__class_stack[NBM_NCLASSES];
static _Atomic uintptr_t tcache_chunks[NBM_TCACHE_MAX >> NBM_TCACHE_SHIFT];
static nbm_pool_t tcache_pool = { .chunks = tcache_chunks, .stride = sizeof(nbm_tcache_t),
                                  .shift = NBM_TCACHE_SHIFT, .max = NBM_TCACHE_MAX, .fresh = 1 };
static nbm_stack_t tcache_free;
static pthread_key_t tcache_key;
static bool have_key;

static void tcache_exit(void *v);

/* Without the key (pthread_key_create failed) no thread gets a cache: every
 * thread runs the no-cache paths, slower but correct. */
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
    uint32_t i = nbm__stack_pop(&tcache_free, &tcache_pool);
    if (!i)
        i = nbm__pool_fresh(&tcache_pool, 1);
    if (!i) {
        /* Out of memory or more live threads than records: run uncached
         * for now and try again on a later call. */
        tstate = NBM_T_NEW;
        return NULL;
    }
    nbm_tcache_t *tc = (nbm_tcache_t *)nbm__pool_rec(&tcache_pool, i);
    /* A recycled record was flushed at its thread's exit; whatever it still
     * holds (a flush that found no descriptor) are free objects: kept. */
    tc->index = i;
    tc->arena_hint = i;
    tc->refills = tc->drains = 0;
    for (unsigned c = 0; c < NBM_NCLASSES; c++)
        tc->bins[c].limit = nbm__classes[c].batch;
    pthread_setspecific(tcache_key, tc);
    nbm__tc = tc;
    tstate = NBM_T_LIVE;
    nbm_stat_add(&nbm__gstats.threads, 1);
    return tc;
}

/* False (nothing done) when no descriptor can be had: out of memory. */
static bool push_batch(nbm_tcache_t *tc, unsigned cls, void *list, uint32_t count)
{
    uint32_t d = nbm__desc_get(tc);
    if (!d)
        return false;
    nbm_desc_t *ds = nbm__desc(d);
    ds->list = list;
    ds->count = count;
    ds->bump = ds->bump_end = NULL;
    nbm__stack_push(&nbm__class_stack[cls], &nbm__desc_pool, d, d);
    tc->drains++;
    return true;
}

void nbm__tcache_flush(nbm_tcache_t *tc)
{
    for (unsigned c = 0; c < NBM_NCLASSES; c++) {
        nbm_bin_t *bin = &tc->bins[c];
        /* Out of descriptors, lists stay in the record: the next thread to
         * take it over inherits them (they are free objects, nothing lost). */
        if (bin->local && push_batch(tc, c, bin->local, bin->lcount)) {
            bin->local = NULL;
            bin->lcount = 0;
        }
        if (!bin->head && bin->bump == bin->bump_end)
            continue;
        uint32_t d = nbm__desc_get(tc);
        if (!d)
            continue;
        nbm_desc_t *ds = nbm__desc(d);
        ds->list = bin->head;
        ds->count = bin->count;
        ds->bump = bin->bump;
        ds->bump_end = bin->bump_end;
        nbm__stack_push(&nbm__class_stack[c], &nbm__desc_pool, d, d);
        bin->head = NULL;
        bin->count = 0;
        bin->bump = bin->bump_end = NULL;
        tc->drains++;
    }
    for (unsigned o = 0; o < NBM_MCACHE_ORDERS; o++)
        if (tc->mcache[o]) {
            void *p = tc->mcache[o];
            tc->mcache[o] = NULL;
            nbm__medium_release(p, o);
        }
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
    nbm__tcache_flush(tc);
    nbm__stack_push(&tcache_free, &tcache_pool, tc->index, tc->index);
}

/* Links up to one batch of objects from the bump range into the list. Each
 * carries the freed-object tag, like every object on a free list, and the
 * chunk's carved count grows before any of them is handed out: free accepts
 * only objects below that count (a chunk is carved from its start, in order,
 * by whoever holds its bump range). */
static void carve(nbm_bin_t *bin, const nbm_class_t *c)
{
    /* Up to a batch, but no further than the page the range starts in (at
     * least one object): carving writes every object's tags, so a whole
     * batch touched 16-64 KiB per class at once, most of a small program's
     * memory. Pages are now touched as objects are needed. */
    uintptr_t page_end = ((uintptr_t)bin->bump | (NBM_PAGE - 1)) + 1;
    size_t avail = (size_t)(bin->bump_end - bin->bump) / c->size;
    size_t in_page = (size_t)(page_end - (uintptr_t)bin->bump) / c->size;
    if (in_page == 0)
        in_page = 1;
    if (avail > in_page)
        avail = in_page;
    uint32_t n = avail < c->batch ? (uint32_t)avail : c->batch;
    char *first = bin->bump;
    uintptr_t chunk = (uintptr_t)first & ~(uintptr_t)c->chunk_mask;
    nbm_arena_t *ar = (nbm_arena_t *)nbm__owner(chunk);
    size_t u0 = (chunk - ar->base) >> NBM_UNIT_SHIFT;
    for (size_t u = 0; u < c->chunk >> NBM_UNIT_SHIFT; u++)
        nbm_add_u32(&ar->unit[u0 + u], n << NBM_UNIT_CARVED_SHIFT);
    for (uint32_t k = 0; k < n; k++) {
        void **o = (void **)(first + (size_t)k * c->size);
        o[0] = first + (size_t)(k + 1) * c->size;
        o[1] = (void *)((uintptr_t)o ^ nbm__secret);
    }
    *(void **)(first + (size_t)(n - 1) * c->size) = bin->head;
    bin->head = first;
    bin->count += n;
    bin->bump += (size_t)n * c->size;
    if ((size_t)(bin->bump_end - bin->bump) < c->size)
        bin->bump = bin->bump_end = NULL; /* the tail that fits no object */
}

static void *new_chunk(nbm_tcache_t *tc, unsigned cls)
{
    const nbm_class_t *c = &nbm__classes[cls];
    unsigned order = (unsigned)__builtin_ctz(c->chunk) - NBM_PAGE_SHIFT;
    char *chunk = nbm__block_alloc(order, &tc->arena_hint);
    if (!chunk)
        return NULL;
    nbm_arena_t *ar = (nbm_arena_t *)nbm__owner((uintptr_t)chunk);
    size_t u0 = ((uintptr_t)chunk - ar->base) >> NBM_UNIT_SHIFT;
    /* Published to other threads with the objects themselves (see nbm__owner). */
    for (size_t u = 0; u < c->chunk >> NBM_UNIT_SHIFT; u++)
        nbm_store_u32(&ar->unit[u0 + u], cls + 1); /* nothing carved yet */
    nbm_stat_add(&nbm__gstats.chunks, 1);
    nbm_stat_add(&nbm__gstats.chunk_bytes, c->chunk);
    return chunk;
}

static bool refill(nbm_tcache_t *tc, unsigned cls)
{
    nbm_bin_t *bin = &tc->bins[cls];
    const nbm_class_t *c = &nbm__classes[cls];
    if (bin->local) { /* the bin's own overflow first: no atomic */
        bin->head = bin->local;
        bin->count = bin->lcount;
        bin->local = NULL;
        bin->lcount = 0;
        return true;
    }
    if (bin->bump == bin->bump_end) {
        uint32_t d = nbm__stack_pop(&nbm__class_stack[cls], &nbm__desc_pool);
        if (d) {
            nbm_desc_t *ds = nbm__desc(d);
            bin->head = ds->list; /* the bin was empty */
            bin->count = ds->count;
            bin->bump = ds->bump;
            bin->bump_end = ds->bump_end;
            nbm__desc_put(tc, d);
            tc->refills++;
            if (bin->head)
                return true;
        }
        if (bin->bump == bin->bump_end) {
            char *chunk = new_chunk(tc, cls);
            if (!chunk)
                return false;
            bin->bump = chunk;
            bin->bump_end = chunk + c->chunk;
        }
    }
    carve(bin, c);
    return true;
}

void *nbm__small_alloc_generic(unsigned cls)
{
    nbm_tcache_t *tc = nbm__tcache_get();
    if (NBM_UNLIKELY(!tc)) {
        bool fresh;
        return nbm__medium_alloc(nbm__classes[cls].size, 0, &fresh);
    }
    nbm_bin_t *bin = &tc->bins[cls];
    if (!bin->head && !refill(tc, cls))
        return NULL;
    void **p = bin->head;
    bin->head = p[0];
    bin->count--;
    p[1] = NULL;
    return p;
}

/* The bin's overflow list reached a batch: to the shared stack, whole. */
void nbm__bin_flush_local(nbm_tcache_t *tc, unsigned cls)
{
    nbm_bin_t *bin = &tc->bins[cls];
    if (!push_batch(tc, cls, bin->local, bin->lcount))
        return; /* out of memory: the list keeps growing locally */
    bin->local = NULL;
    bin->lcount = 0;
}

/* A small free on a thread without a cache: a one-object batch. */
void nbm__small_free_generic(void *p, unsigned cls)
{
    void **o = p;
    o[1] = (void *)((uintptr_t)p ^ nbm__secret); /* freed, whatever follows */
    uint32_t d = nbm__desc_get(NULL);
    if (!d) {
        nbm_stat_add(&nbm__gstats.lost, 1); /* out of memory: the object is leaked */
        return;
    }
    nbm_desc_t *ds = nbm__desc(d);
    o[0] = NULL;
    ds->list = p;
    ds->count = 1;
    ds->bump = ds->bump_end = NULL;
    nbm__stack_push(&nbm__class_stack[cls], &nbm__desc_pool, d, d);
}

/* --- giving empty chunks back (at exhaustion) ---------------------------------
 * When the back-end has no block left and no arena can be added, the chunks
 * whose objects are all free go back to the back-end, so that any class (or
 * a medium block) can use them. One thread at a time does it (a flag taken by
 * CAS; another thread that needs it meanwhile yields until it is done, for a
 * bounded time, then looks again). It takes every batch off every class stack, and with
 * its own cache's lists (handled in place), and counts, per chunk, the free objects it now holds (the
 * arena's `seen` counters, touched by nobody else). A chunk is empty when
 * that count equals the chunk's carved count and its uncarved tail, if any,
 * is in one of the batches taken (then nobody else can carve from it). The
 * objects of empty chunks are dropped from the batches, the rest go back on
 * the stacks, and the empty chunks are purged and returned. Objects still in
 * other threads' caches keep their chunks (a bounded amount per thread). */
#define SEEN_TAIL 0x8000u /* the chunk's uncarved tail is in a batch taken */

static _Atomic uint32_t reclaiming;

static uint16_t *seen_of(uintptr_t chunk, nbm_arena_t **arp)
{
    nbm_arena_t *ar = (nbm_arena_t *)nbm__owner(chunk);
    *arp = ar;
    return &ar->seen[(chunk - ar->base) >> NBM_UNIT_SHIFT];
}

static bool chunk_empty(uintptr_t chunk, const nbm_class_t *c)
{
    nbm_arena_t *ar;
    uint16_t s = *seen_of(chunk, &ar);
    uint32_t carved = nbm_load_u32(&ar->unit[(chunk - ar->base) >> NBM_UNIT_SHIFT]) >> NBM_UNIT_CARVED_SHIFT;
    bool no_tail = (size_t)(carved + 1) * c->size > c->chunk;
    return (s & ~SEEN_TAIL) == carved && (no_tail || (s & SEEN_TAIL));
}

static void count_list(void **o, const nbm_class_t *c)
{
    nbm_arena_t *ar;
    for (; o; o = o[0])
        (*seen_of((uintptr_t)o & ~(uintptr_t)c->chunk_mask, &ar))++;
}

static void note_tail(char *bump, char *bump_end, const nbm_class_t *c)
{
    nbm_arena_t *ar;
    if (bump != bump_end)
        *seen_of((uintptr_t)bump & ~(uintptr_t)c->chunk_mask, &ar) |= SEEN_TAIL;
}

/* Drops the objects of empty chunks from a list; returns the new head. */
static void *filter_list(void **o, uint32_t *count, const nbm_class_t *c)
{
    void *head = NULL, **tail = NULL;
    uint32_t n = 0;
    for (void **on; o; o = on) {
        on = o[0];
        if (chunk_empty((uintptr_t)o & ~(uintptr_t)c->chunk_mask, c))
            continue;
        o[0] = NULL;
        if (tail)
            tail[0] = o;
        else
            head = o;
        tail = o;
        n++;
    }
    *count = n;
    return head;
}

static void filter_tail(char **bump, char **bump_end, const nbm_class_t *c)
{
    if (*bump != *bump_end && chunk_empty((uintptr_t)*bump & ~(uintptr_t)c->chunk_mask, c))
        *bump = *bump_end = NULL;
}

size_t nbm__reclaim_chunks(void)
{
    uint32_t zero = 0;
    if (!nbm_cas_u32(&reclaiming, &zero, 1)) {
        /* Another thread is at it: let it finish (bounded, so never a
         * deadlock), then the caller looks again at what it returned. */
        for (int k = 0; k < 100000 && nbm_load_u32(&reclaiming); k++)
            sched_yield();
        return 1;
    }
    /* The caller's own lists are handled in place: no descriptor is needed
     * (there may be no memory left to map one). */
    nbm_tcache_t *tc = nbm__tc;
    size_t returned = 0;
    for (unsigned cls = 0; cls < NBM_NCLASSES; cls++) {
        const nbm_class_t *c = &nbm__classes[cls];
        nbm_bin_t *bin = tc ? &tc->bins[cls] : NULL;
        uint32_t first = nbm__stack_pop_all(&nbm__class_stack[cls]);
        if (!first && (!bin || (!bin->head && !bin->local)))
            continue;
        /* 1. count the free objects per chunk, note the tails */
        for (uint32_t d = first; d; d = nbm_load_u32_relaxed(&nbm__desc(d)->next)) {
            count_list(nbm__desc(d)->list, c);
            note_tail(nbm__desc(d)->bump, nbm__desc(d)->bump_end, c);
        }
        if (bin) {
            count_list(bin->head, c);
            count_list(bin->local, c);
            note_tail(bin->bump, bin->bump_end, c);
        }
        /* 2. drop what belongs to empty chunks; batches left go back */
        if (bin) {
            bin->head = filter_list(bin->head, &bin->count, c);
            bin->local = filter_list(bin->local, &bin->lcount, c);
            filter_tail(&bin->bump, &bin->bump_end, c);
        }
        uint32_t keep_first = 0, keep_last = 0;
        for (uint32_t d = first, next; d; d = next) {
            nbm_desc_t *ds = nbm__desc(d);
            next = nbm_load_u32_relaxed(&ds->next);
            ds->list = filter_list(ds->list, &ds->count, c);
            filter_tail(&ds->bump, &ds->bump_end, c);
            if (!ds->list && ds->bump == ds->bump_end) {
                nbm__desc_put(tc, d);
                continue;
            }
            if (keep_last)
                nbm_store_u32_relaxed(&nbm__desc(keep_last)->next, d);
            else
                keep_first = d;
            keep_last = d;
        }
        if (keep_first)
            nbm__stack_push(&nbm__class_stack[cls], &nbm__desc_pool, keep_first, keep_last);
    }
    /* 3. return the empty chunks, reset every counter */
    for (uint32_t i = 0; i < nbm__arena_count(); i++) {
        nbm_arena_t *ar = nbm__arena_at(i);
        for (size_t u = 0; u < (ar->size >> NBM_UNIT_SHIFT); u++) {
            if (!ar->seen[u])
                continue;
            uint32_t w = nbm_load_u32(&ar->unit[u]);
            const nbm_class_t *c = &nbm__classes[(w & 0xffu) - 1];
            uintptr_t chunk = ar->base + (u << NBM_UNIT_SHIFT);
            bool empty = chunk_empty(chunk, c);
            ar->seen[u] = 0;
            if (!empty)
                continue;
            for (size_t k = 0; k < c->chunk >> NBM_UNIT_SHIFT; k++)
                nbm_store_u32(&ar->unit[u + k], 0);
            nbm__os_purge((void *)chunk, c->chunk);
            nbm__block_free(ar, (void *)chunk);
            nbm_stat_sub(&nbm__gstats.chunks, 1);
            nbm_stat_sub(&nbm__gstats.chunk_bytes, c->chunk);
            returned += c->chunk;
        }
    }
    nbm_store_u32(&reclaiming, 0);
    return returned;
}
