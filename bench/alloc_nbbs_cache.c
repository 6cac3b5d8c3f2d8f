/*
 * alloc_nbbs_cache.c - ours with a frame cache in front: nbbs-bunch, and one
 * nbbs_cache per benchmark thread (as a kernel gives one per CPU).
 *
 * The bench's allocator interface has no thread argument, so each thread
 * finds its cache through a thread-local pointer, tagged with the instance's
 * serial number (instances are fresh per run and may reuse an address). A
 * thread takes the next of the instance's caches on its first call; they are
 * made with the instance, untimed. Threads beyond NCACHES use the tree
 * directly. Caches use the library's defaults (orders 0..3, batch 16,
 * capacity 64).
 */
#include <stdlib.h>

#include "bench.h"
#include "nbbs.h"

#define FAKE_BASE ((void *)(uintptr_t)0x100000000000ull) /* never dereferenced */
#define NCACHES 64

typedef struct {
    nbbs_t        *b;
    size_t         min_block;
    unsigned       max_order;
    uint64_t       serial;
    atomic_uint    next;              /* caches handed out */
    nbbs_cache_t  *cache[NCACHES];
    void          *mem;
} cached_inst_t;

static atomic_uint_fast64_t serials;
static _Thread_local struct {
    uint64_t      serial;
    nbbs_cache_t *c;
} mine;

static void *cc_create(const bench_arena_t *a)
{
    /* Page frames keep group free counts, as the kernel module's instances
     * do (NBBS_GROUP_COUNTS: what the caches are meant for); the paper's
     * 8-byte units do not: their direct tree operations of orders 3 to 8
     * (64 B to 2 KiB) would each pay the count's RMW (constant-occupancy
     * 26.8 -> 29.4 ns a pair, larson -8 %). */
    nbbs_config_t cfg = { .min_block = a->min_block, .max_order = a->max_order, .layout = NBBS_LAYOUT_BUNCH,
                          .flags = a->min_block >= 4096 ? NBBS_GROUP_COUNTS : 0 };
    cached_inst_t *ci = calloc(1, sizeof *ci);
    if (!ci)
        return NULL;
    ci->b = nbbs_create(FAKE_BASE, a->size, &cfg);
    size_t sz = nbbs_cache_size(NULL);
    ci->mem = aligned_alloc(NBBS_CACHE_ALIGN, sz * NCACHES);
    if (!ci->b || !ci->mem) {
        nbbs_destroy(ci->b);
        free(ci->mem);
        free(ci);
        return NULL;
    }
    for (int i = 0; i < NCACHES; i++)
        ci->cache[i] = nbbs_cache_init((char *)ci->mem + (size_t)i * sz, sz, ci->b, NULL);
    ci->min_block = a->min_block;
    ci->max_order = a->max_order;
    ci->serial = atomic_fetch_add(&serials, 1) + 1;
    return ci;
}

static void cc_destroy(void *inst)
{
    cached_inst_t *ci = inst;
    nbbs_destroy(ci->b); /* the caches are attached for the instance's lifetime: freed after it */
    free(ci->mem);
    free(ci);
}

/* This thread's cache, or NULL if every cache is taken. */
static inline nbbs_cache_t *my_cache(cached_inst_t *ci)
{
    if (__builtin_expect(mine.serial == ci->serial, 1))
        return mine.c;
    unsigned i = atomic_fetch_add(&ci->next, 1);
    mine.serial = ci->serial;
    mine.c = i < NCACHES ? ci->cache[i] : NULL;
    return mine.c;
}

static void *cc_alloc_order(void *inst, unsigned order)
{
    cached_inst_t *ci = inst;
    nbbs_cache_t *c = my_cache(ci);
    return c ? nbbs_cache_alloc(c, order) : nbbs_alloc_order(ci->b, order);
}

static void *cc_alloc(void *inst, size_t size)
{
    cached_inst_t *ci = inst;
    nbbs_cache_t *c = my_cache(ci);
    if (!c || size > ci->min_block << ci->max_order)
        return nbbs_alloc(ci->b, size);
    unsigned order = 0; /* the smallest block >= size, as nbbs_alloc picks it */
    while ((ci->min_block << order) < size)
        order++;
    return nbbs_cache_alloc(c, order);
}

static void cc_free(void *inst, void *p)
{
    cached_inst_t *ci = inst;
    nbbs_cache_t *c = my_cache(ci);
    (void)(c ? nbbs_cache_free(c, p) : nbbs_free(ci->b, p));
}

static void cc_stats(void *inst, bench_heap_stats_t *out)
{
    cached_inst_t *ci = inst;
    nbbs_stats_t s;
    nbbs_get_stats(ci->b, &s);
    out->free_bytes = s.free_bytes; /* the tree's view: cached frames count as used */
    out->largest_free = s.largest_free;
    out->meta_bytes = s.meta_size + nbbs_cache_size(NULL) * NCACHES;
}

const bench_allocator_t bench_alloc_nbbs_cache = {
    .name = "nbbs-cache", .help = "nbbs-bunch with a per-thread frame cache (orders 0..3) in front", .lockfree = 1,
    .create = cc_create, .destroy = cc_destroy, .alloc = cc_alloc, .alloc_order = cc_alloc_order,
    .free = cc_free, .stats = cc_stats,
};
BENCH_ALLOCATOR(bench_alloc_nbbs_cache);
