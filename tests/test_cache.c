/*
 * test_cache.c - the frame caches (nbbs_cache_*), in both layouts.
 *
 * API part: every function and every error path (bad configurations, bad
 * memory, double attach, bad pointers and double frees, each leaving the
 * instance's metadata and the cache byte-for-byte unchanged), refill and
 * drain in batches, statistics and nbbs_validate with blocks cached, orders
 * the cache does not hold, and pressure: with every free block inside caches,
 * allocations (plain and through other caches) must take them, and the count
 * of blocks obtainable until NULL must be exactly what is free.
 *
 * Stress part: T owner threads, each with its own cache, allocate and free
 * through it on a small arena (so the tree runs dry and allocations steal
 * from other caches), hand blocks to other threads (frees on another cache
 * than the one that allocated), drain their caches now and then, while one
 * more thread returns every cached block to the tree in a loop. Overlap is
 * detected by a shadow owner map claimed with CAS and by tags written into
 * every block; loss by the final accounting (everything free, validate, every
 * max block allocatable) and, before that, by a quiescent exhaustion with
 * the caches still full (allocations until NULL must get every free block).
 * Then racing double frees through caches and nbbs_free: exactly one wins.
 *
 * Usage: test_cache [ops-per-thread] [threads]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "nbbs.h"
#include "support/nbbs_testutil.h"
#include "../src/nbbs/nbbs_internal.h" /* the hint cells (test_take_hint) */

static const nbbs_layout_t layouts[] = { NBBS_LAYOUT_TREE, NBBS_LAYOUT_BUNCH };
#define FAKE_BASE ((char *)(uintptr_t)0x200000000ull) /* never mapped, never touched */

static void *aalloc(size_t align, size_t n)
{
    void *m = aligned_alloc(align, (n + align - 1) & ~(align - 1));
    if (!m)
        abort();
    return m;
}

typedef struct {
    nbbs_t *b;
    void   *meta;
    size_t  meta_size;
} inst_t;

/* Every other instance keeps group free counts (NBBS_GROUP_COUNTS, the
 * setting frame caches are meant for), so each test runs in both modes
 * across the layouts and the runs: the caches' balance in the counts, and
 * their paths without counts. */
static inst_t make(nbbs_layout_t lay, char *base, size_t arena, size_t min_block, unsigned max_order)
{
    static unsigned made;
    nbbs_config_t c = { .min_block = min_block, .max_order = max_order, .layout = lay,
                        .flags = made++ & 1 ? NBBS_GROUP_COUNTS : 0 };
    inst_t in;
    in.meta_size = nbbs_meta_size(arena, &c);
    CHECK(in.meta_size > 0);
    in.meta = aalloc(NBBS_META_ALIGN, in.meta_size);
    in.b = nbbs_init(in.meta, in.meta_size, base, arena, &c);
    CHECK(in.b != NULL);
    return in;
}

static nbbs_stats_t stats(nbbs_t *b)
{
    nbbs_stats_t s;
    nbbs_get_stats(b, &s);
    return s;
}

static void test_config(void)
{
    nbbs_cache_config_t c = { 0, 0, 0 };
    size_t def = nbbs_cache_size(NULL);
    CHECK(def > 0);
    CHECK_EQ(nbbs_cache_size(&c), def); /* zeros are the defaults */
    c.orders = NBBS_CACHE_MAX_ORDERS;
    CHECK(nbbs_cache_size(&c) > def);
    c.orders = NBBS_CACHE_MAX_ORDERS + 1;
    CHECK_EQ(nbbs_cache_size(&c), 0);
    c = (nbbs_cache_config_t){ 2, 8, 4 };
    CHECK_EQ(nbbs_cache_size(&c), 0); /* capacity < batch */
    c = (nbbs_cache_config_t){ 2, 8, (1u << 20) + 1 };
    CHECK_EQ(nbbs_cache_size(&c), 0); /* capacity too large */
    c = (nbbs_cache_config_t){ 2, (1u << 20) + 1, 0 };
    CHECK_EQ(nbbs_cache_size(&c), 0); /* batch too large */
    c = (nbbs_cache_config_t){ 2, 8, 8 };
    CHECK(nbbs_cache_size(&c) >= 2 * 8 * sizeof(uint64_t));
}

static void test_init(nbbs_layout_t lay)
{
    inst_t in = make(lay, FAKE_BASE, 64 * 4096, 4096, 6);
    nbbs_cache_config_t cfg = { 2, 4, 8 };
    size_t sz = nbbs_cache_size(&cfg);
    char *mem = aalloc(NBBS_CACHE_ALIGN, sz + NBBS_CACHE_ALIGN);
    char *before = malloc(sz + NBBS_CACHE_ALIGN), *meta0 = malloc(in.meta_size);
    memset(mem, 0xa5, sz + NBBS_CACHE_ALIGN);
    memcpy(before, mem, sz + NBBS_CACHE_ALIGN);
    memcpy(meta0, in.meta, in.meta_size);

    CHECK(nbbs_cache_init(NULL, sz, in.b, &cfg) == NULL);
    CHECK(nbbs_cache_init(mem, sz, NULL, &cfg) == NULL);
    CHECK(nbbs_cache_init(mem + 8, sz, in.b, &cfg) == NULL);       /* misaligned */
    CHECK(nbbs_cache_init(mem, sz - 1, in.b, &cfg) == NULL);       /* too small */
    nbbs_cache_config_t bad = { 2, 8, 4 };
    CHECK(nbbs_cache_init(mem, sz, in.b, &bad) == NULL);           /* invalid config */
    bad = (nbbs_cache_config_t){ 8, 4, 8 };                        /* orders 0..7 > max_order 6 */
    CHECK(nbbs_cache_init(mem, nbbs_cache_size(&bad), in.b, &bad) == NULL);
    uint64_t not_an_instance[64] __attribute__((aligned(64))) = { 0 };
    CHECK(nbbs_cache_init(mem, sz, (nbbs_t *)not_an_instance, &cfg) == NULL);
    CHECK(memcmp(mem, before, sz + NBBS_CACHE_ALIGN) == 0);        /* nothing written */
    CHECK(memcmp(in.meta, meta0, in.meta_size) == 0);

    nbbs_cache_t *c = nbbs_cache_init(mem, sz, in.b, &cfg);
    CHECK(c == (nbbs_cache_t *)mem);
    CHECK(nbbs_cache_instance(c) == in.b);
    CHECK(nbbs_cache_instance(NULL) == NULL);
    memcpy(before, mem, sz);
    CHECK(nbbs_cache_init(mem, sz, in.b, &cfg) == NULL);           /* attached already */
    CHECK(memcmp(mem, before, sz) == 0);
    bad = (nbbs_cache_config_t){ 7, 4, 8 };                        /* orders 0..6: all of them */
    char *m2 = aalloc(NBBS_CACHE_ALIGN, nbbs_cache_size(&bad));
    CHECK(nbbs_cache_init(m2, nbbs_cache_size(&bad), in.b, &bad) != NULL);
    /* The default (orders 0..3) fits an instance whose max order is 1. */
    inst_t small = make(lay, FAKE_BASE, 2 * 4096, 4096, 1);
    char *m3 = aalloc(NBBS_CACHE_ALIGN, nbbs_cache_size(NULL));
    nbbs_cache_t *c3 = nbbs_cache_init(m3, nbbs_cache_size(NULL), small.b, NULL);
    CHECK(c3 != NULL);
    void *p = nbbs_cache_alloc(c3, 1), *q = nbbs_cache_alloc(c3, 0);
    CHECK(p != NULL && q == NULL); /* the one order-1 block is the whole arena */
    CHECK_EQ(nbbs_cache_free(c3, p), 0);
    /* largest_free is the tree's view (nbbs.h): 0 with the whole arena
     * cached, though the allocation below still gets a block of it. */
    nbbs_stats_t ss = stats(small.b);
    CHECK(ss.largest_free == 0 && ss.free_bytes == 0 && ss.cached_bytes == 2 * 4096);
    q = nbbs_cache_alloc(c3, 0); /* reclaims the cached order-1 block and splits it */
    CHECK(q != NULL);
    CHECK(nbbs_cache_alloc(c3, 2) == NULL); /* beyond max order */
    CHECK_EQ(nbbs_cache_free(c3, q), 0);
    CHECK_EQ(nbbs_validate(small.b), 0);
    free(before), free(meta0);
    /* caches stay attached for their instance's lifetime: freed after it */
    free(in.meta), free(small.meta), free(mem), free(m2), free(m3);
}

/* A cache of cfg on b in fresh memory (*mem, the caller frees it after b). */
static nbbs_cache_t *cache_new(nbbs_t *b, const nbbs_cache_config_t *cfg, char **mem)
{
    size_t sz = nbbs_cache_size(cfg);
    *mem = aalloc(NBBS_CACHE_ALIGN, sz);
    nbbs_cache_t *c = nbbs_cache_init(*mem, sz, b, cfg);
    CHECK(c != NULL);
    return c;
}

/* The instance of the tests of a tree running short: 64 frames of 64 bytes
 * in one tree (max order 6), and a cache of orders 0-3 with batches of 8
 * and stacks of 64 (*m: its memory, for finish). */
static nbbs_cache_t *short_instance(nbbs_layout_t lay, inst_t *in, char **m)
{
    *in = make(lay, FAKE_BASE, 64 * 64, 64, 6);
    nbbs_cache_config_t cfg = { 4, 8, 64 };
    return cache_new(in->b, &cfg, m);
}

/* The end of a test whose blocks are all freed: the cache drained, nothing
 * in use, the tree whole again (its largest free block `whole` bytes; 0
 * skips that check), the metadata consistent; the test's memory freed. */
static void finish(inst_t *in, nbbs_cache_t *c, char *m, size_t whole)
{
    nbbs_cache_drain(c);
    nbbs_stats_t s = stats(in->b);
    CHECK_EQ(s.used_bytes, 0);
    if (whole)
        CHECK_EQ(s.largest_free, whole);
    CHECK_EQ(nbbs_validate(in->b), 0);
    free(in->meta), free(m);
}

static void test_alloc_free(nbbs_layout_t lay)
{
    const size_t mb = 4096;
    inst_t in = make(lay, FAKE_BASE, 256 * mb, mb, 8);
    nbbs_cache_config_t cfg = { 4, 4, 8 };
    char *mem;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &mem);

    CHECK(nbbs_cache_alloc(NULL, 0) == NULL);
    CHECK(nbbs_cache_alloc(c, 9) == NULL); /* > max_order */
    CHECK_EQ(nbbs_cache_free(c, NULL), 0);
    CHECK_EQ(nbbs_cache_free(NULL, FAKE_BASE), NBBS_EINVAL);
    CHECK_EQ(nbbs_cache_drain(NULL), 0);
    CHECK_EQ(nbbs_reclaim_cached(NULL), 0);

    /* First allocation: one refill of a batch; the rest sits in the cache. */
    char *p = nbbs_cache_alloc(c, 0);
    CHECK(p != NULL);
    CHECK_EQ(nbbs_block_size(in.b, p), mb);
    nbbs_stats_t s = stats(in.b);
    CHECK_EQ(s.live_blocks, 4);
    CHECK_EQ(s.cached_blocks, 3);
    CHECK_EQ(s.cached_bytes, 3 * mb);
    CHECK_EQ(s.used_bytes, 4 * mb); /* cached blocks count as used */
    CHECK_EQ(nbbs_validate(in.b), 0);
    /* The next three come from the cache: no tree change at all. */
    char *q[3];
    for (int i = 0; i < 3; i++)
        q[i] = nbbs_cache_alloc(c, 0);
    s = stats(in.b);
    CHECK_EQ(s.cached_blocks, 0);
    CHECK_EQ(s.live_blocks, 4);
    CHECK(q[0] != p && q[1] != p && q[2] != p && q[0] != q[1] && q[1] != q[2] && q[0] != q[2]);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(nbbs_cache_free(c, q[i]), 0);

    /* A free goes to the cache: the block is no longer live for the user. */
    CHECK_EQ(nbbs_cache_free(c, p), 0);
    CHECK_EQ(nbbs_block_size(in.b, p), 0);
    s = stats(in.b);
    CHECK_EQ(s.cached_blocks, 4);
    CHECK_EQ(nbbs_validate(in.b), 0);
    CHECK(nbbs_cache_alloc(c, 0) == p); /* last in, first out */
    CHECK_EQ(nbbs_cache_free(c, p), 0);

    /* Error paths: each leaves metadata and cache byte-for-byte unchanged. */
    char *big = nbbs_alloc_order(in.b, 2);
    CHECK(big != NULL);
    size_t sz = nbbs_cache_size(&cfg);
    char *meta0 = malloc(in.meta_size), *cache0 = malloc(sz);
    memcpy(meta0, in.meta, in.meta_size);
    memcpy(cache0, mem, sz);
    CHECK_EQ(nbbs_cache_free(c, p), NBBS_EINVAL);              /* double free through the cache */
    CHECK_EQ(nbbs_free(in.b, p), NBBS_EINVAL);                 /* a cached block through nbbs_free */
    CHECK_EQ(nbbs_cache_free(c, FAKE_BASE - mb), NBBS_EINVAL); /* below the arena */
    CHECK_EQ(nbbs_cache_free(c, FAKE_BASE + 256 * mb), NBBS_EINVAL); /* past its end */
    CHECK_EQ(nbbs_cache_free(c, big + 8), NBBS_EINVAL);        /* not a min_block boundary */
    CHECK_EQ(nbbs_cache_free(c, big + mb), NBBS_EINVAL);       /* inside a live block */
    CHECK_EQ(nbbs_cache_free(c, FAKE_BASE + 200 * mb), NBBS_EINVAL); /* never allocated */
    CHECK(memcmp(in.meta, meta0, in.meta_size) == 0);
    CHECK(memcmp(mem, cache0, sz) == 0);

    /* Order 2 is cached too; its block is rejected after its free. */
    CHECK_EQ(nbbs_cache_free(c, big), 0);
    CHECK_EQ(nbbs_cache_free(c, big), NBBS_EINVAL);
    CHECK(nbbs_cache_alloc(c, 2) == big);
    CHECK_EQ(nbbs_block_size(in.b, big), 4 * mb);
    CHECK_EQ(nbbs_cache_free(c, big), 0);
    /* Orders the cache does not hold go to the tree. */
    s = stats(in.b);
    char *huge = nbbs_cache_alloc(c, 5);
    CHECK(huge != NULL);
    CHECK_EQ(stats(in.b).cached_blocks, s.cached_blocks);
    CHECK_EQ(nbbs_cache_free(c, huge), 0);
    CHECK_EQ(nbbs_cache_free(c, huge), NBBS_EINVAL);
    CHECK_EQ(stats(in.b).used_bytes, s.used_bytes);

    /* Drain: everything back to the tree, exact coalescing. */
    s = stats(in.b);
    CHECK_EQ(nbbs_cache_drain(c), s.cached_blocks);
    s = stats(in.b);
    CHECK_EQ(s.used_bytes, 0);
    CHECK_EQ(s.cached_bytes, 0);
    CHECK_EQ(s.largest_free, 256 * mb);
    CHECK_EQ(nbbs_validate(in.b), 0);
    CHECK_EQ(nbbs_cache_drain(c), 0);
    free(meta0), free(cache0), free(in.meta), free(mem);
}

/* Capacity: a full order gives back its oldest batch, whole. */
static void test_capacity(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in = make(lay, FAKE_BASE, 256 * mb, mb, 8);
    nbbs_cache_config_t cfg = { 1, 4, 8 };
    char *mem;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &mem);
    char *blk[20];
    for (int i = 0; i < 20; i++)
        blk[i] = nbbs_alloc_order(in.b, 0);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(nbbs_cache_free(c, blk[i]), 0);
    CHECK_EQ(stats(in.b).cached_blocks, 8);
    CHECK_EQ(nbbs_cache_free(c, blk[8]), 0); /* full: blk[0..3] go back, 5 stay */
    nbbs_stats_t s = stats(in.b);
    CHECK_EQ(s.cached_blocks, 5);
    CHECK_EQ(s.live_blocks, 20 - 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(nbbs_block_size(in.b, blk[i]), 0);
    CHECK_EQ(nbbs_free(in.b, blk[0]), NBBS_EINVAL); /* back in the tree, not live */
    for (int i = 9; i < 20; i++)
        CHECK_EQ(nbbs_cache_free(c, blk[i]), 0);
    s = stats(in.b);
    CHECK(s.cached_blocks <= 8);
    CHECK_EQ(s.live_blocks, s.cached_blocks);
    CHECK_EQ(nbbs_validate(in.b), 0);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(in.b).used_bytes, 0);

    /* capacity == batch: a full stack gives all of it back, then takes the
     * new block. (A second cache: the first stays attached, its memory too.) */
    nbbs_cache_config_t one = { 1, 4, 4 };
    size_t sz2 = nbbs_cache_size(&one);
    char *mem2 = aalloc(NBBS_CACHE_ALIGN, sz2);
    c = nbbs_cache_init(mem2, sz2, in.b, &one);
    CHECK(c != NULL);
    for (int i = 0; i < 5; i++)
        blk[i] = nbbs_alloc_order(in.b, 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(nbbs_cache_free(c, blk[i]), 0);
    CHECK_EQ(nbbs_cache_free(c, blk[4]), 0);
    s = stats(in.b);
    CHECK_EQ(s.cached_blocks, 1);
    CHECK_EQ(s.live_blocks, 1);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(nbbs_block_size(in.b, blk[i]), 0);
    CHECK_EQ(nbbs_cache_free(c, blk[4]), NBBS_EINVAL); /* cached already */
    CHECK_EQ(nbbs_validate(in.b), 0);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(in.b).used_bytes, 0);
    free(in.meta), free(mem), free(mem2);
}

/* Refills take the carved block after the cache's last one in place, while
 * its group lasts, passing over a block in use there. */
static void test_take_next(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in = make(lay, FAKE_BASE, 1024 * mb, mb, 10); /* 2 groups of 512 leaves */
    nbbs_cache_config_t cfg = { 1, 16, 64 };
    char *mem;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &mem);
    char *f[32];
    for (int i = 0; i < 16; i++) /* one refill: 2 order-3 blocks */
        f[i] = nbbs_cache_alloc(c, 0);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 16; i++) {
        uint64_t l = (uint64_t)(f[i] - FAKE_BASE) / mb;
        lo = l < lo ? l : lo, hi = l > hi ? l : hi;
    }
    CHECK_EQ(lo % 8, 0);
    CHECK_EQ(hi - lo, 15); /* two adjacent carved blocks */
    /* A block in use right after them: the next refill passes over it. */
    char *x = nbbs_alloc_order(in.b, 3);
    CHECK(x != NULL);
    uint64_t xl = (uint64_t)(x - FAKE_BASE) / mb;
    for (int i = 16; i < 32; i++)
        f[i] = nbbs_cache_alloc(c, 0);
    uint64_t lo2 = UINT64_MAX, hi2 = 0;
    for (int i = 16; i < 32; i++) {
        uint64_t l = (uint64_t)(f[i] - FAKE_BASE) / mb;
        CHECK(l < xl || l >= xl + 8);
        lo2 = l < lo2 ? l : lo2, hi2 = l > hi2 ? l : hi2;
    }
    /* Right after the first refill's blocks, or after x if the placement
     * put x there. */
    CHECK_EQ(lo2, xl == hi + 1 ? xl + 8 : hi + 1);
    CHECK_EQ(hi2 - lo2, 15);
    CHECK_EQ(lo2 >> 9, lo >> 9); /* the same group */
    CHECK_EQ(nbbs_validate(in.b), 0);
    for (int i = 0; i < 32; i++)
        CHECK_EQ(nbbs_cache_free(c, f[i]), 0);
    CHECK_EQ(nbbs_free(in.b, x), 0);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(in.b).used_bytes, 0);
    free(in.meta), free(mem);
}

/* The carve order's word of every hint cell (a context's cell is a hash of
 * its stack address, so a test looks at all of them). */
static void carve_hints(nbbs_t *b, uint64_t *h)
{
    for (unsigned i = 0; i < NBBS_HINTS; i++)
        h[i] = i <= b->hint_mask ? nb_hint_load(&b->hints[i * NBBS_HINT_STRIDE + NBBS_CARVE_ORDER]) : UINT64_MAX;
}

/* Some cell's carve-order hint changed to leaf since the snapshot was. */
static bool hint_moved_to(nbbs_t *b, const uint64_t *was, uint64_t leaf)
{
    uint64_t now[NBBS_HINTS];
    carve_hints(b, now);
    for (unsigned i = 0; i < NBBS_HINTS; i++)
        if (now[i] == leaf && was[i] != leaf)
            return true;
    return false;
}

/* A refill whose last carved block was taken in place leaves the caller's
 * hint of the carve order at that block, as the tree's own allocation
 * leaves it at the block it took: the next search (at the group's end)
 * starts after the blocks the cache filled, instead of walking over them
 * again from the block its last search found. */
static void test_take_hint(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in = make(lay, FAKE_BASE, 1024 * mb, mb, 10); /* 2 groups of 512 leaves */
    nbbs_cache_config_t cfg = { 1, 16, 64 };
    char *mem;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &mem);
    uint64_t was[NBBS_HINTS];
    char *f[32];
    carve_hints(in.b, was);
    for (int i = 0; i < 16; i++) /* one refill: a search, then a take in place */
        f[i] = nbbs_cache_alloc(c, 0);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 16; i++) {
        uint64_t l = (uint64_t)(f[i] - FAKE_BASE) / mb;
        lo = l < lo ? l : lo, hi = l > hi ? l : hi;
    }
    CHECK_EQ(lo % 8, 0);
    CHECK_EQ(hi - lo, 15);
    CHECK(hint_moved_to(in.b, was, lo + 8)); /* the block taken in place, not lo */
    carve_hints(in.b, was);
    for (int i = 16; i < 32; i++) /* the next refill: two takes in place */
        f[i] = nbbs_cache_alloc(c, 0);
    CHECK_EQ((uint64_t)(f[31] - FAKE_BASE) / mb >> 9, lo >> 9); /* still the same group */
    CHECK(hint_moved_to(in.b, was, lo + 24));
    CHECK_EQ(nbbs_validate(in.b), 0);
    for (int i = 0; i < 32; i++)
        CHECK_EQ(nbbs_cache_free(c, f[i]), 0);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(in.b).used_bytes, 0);
    free(in.meta), free(mem);
}

/* A refill's batch stays in the group (2 MiB of frames) its first block
 * came from: the block that takes it into another group is its last. Near
 * full, a batch taken from all over the arena held room that larger orders
 * then missed (alloc-rnd failed 3x as often through the cache as without).
 * Group A (leaves 0..511) is full but for one or two order-3 blocks, group
 * B wholly free: a batch of 16 order-3 blocks (or 8 carved blocks for
 * order 0) takes what A has and at most one block of B. */
static void test_batch_home(nbbs_layout_t lay)
{
    const size_t mb = 64;
    for (unsigned order = 0; order <= 3; order += 3) {
        inst_t in = make(lay, FAKE_BASE, 1024 * mb, mb, 10); /* 2 groups of 512 leaves */
        nbbs_cache_config_t cfg = { 4, order ? 16 : 64, 256 };
        char *mem;
        nbbs_cache_t *c = cache_new(in.b, &cfg, &mem);
        for (unsigned l = 0; l < 512; l += 8)
            CHECK_EQ(nbbs_alloc_at(in.b, FAKE_BASE + l * mb, 3), 0);
        unsigned holes = order ? 2 : 1; /* free order-3 blocks left in A */
        for (unsigned i = 0; i < holes; i++)
            CHECK_EQ(nbbs_free(in.b, FAKE_BASE + (64 + 64 * i) * mb), 0);
        /* Every cell's search starts at A: the refill's cell (a hash of its
         * stack address) need not be the one the frees above used, and a
         * cell that starts in B took its first block there
         * (test_batch_home_any_cell). */
        for (unsigned i = 0; i <= in.b->hint_mask; i++)
            for (unsigned k = 0; k < NBBS_HINT_STRIDE; k++)
                nb_hint_store(&in.b->hints[i * NBBS_HINT_STRIDE + k], 0);
        char *p = nbbs_cache_alloc(c, order);
        CHECK(p != NULL && (size_t)(p - FAKE_BASE) / mb < 512); /* from A's holes */
        nbbs_stats_t s = stats(in.b);
        /* Order 3: A's other hole and one block of B cached, not 15.
         * Order 0: the rest of the carved hole (7 frames) and one carved
         * block of B (8), not 7 blocks of B (56). */
        CHECK_EQ(s.cached_blocks, order ? 2u : 15u);
        CHECK_EQ(s.largest_free, 256 * mb); /* B lost one order-3 block, no more */
        CHECK_EQ(nbbs_validate(in.b), 0);
        CHECK_EQ(nbbs_cache_free(c, p), 0);
        nbbs_cache_drain(c);
        for (unsigned l = 0; l < 512; l += 8)
            if (l < 64 || l >= 64 + 64 * holes || l % 64)
                CHECK_EQ(nbbs_free(in.b, FAKE_BASE + l * mb), 0);
        s = stats(in.b);
        CHECK_EQ(s.used_bytes, 0);
        CHECK_EQ(nbbs_validate(in.b), 0);
        free(in.meta), free(mem);
    }
    /* Groups of one order-3 block (group_order 3): no batch would pass
     * the first block, so the rule does not apply and a refill takes a
     * whole batch. */
    nbbs_config_t gc = { .min_block = mb, .max_order = 10, .layout = lay, .group_order = 3 };
    size_t msz = nbbs_meta_size(1024 * mb, &gc);
    void *meta = aalloc(NBBS_META_ALIGN, msz);
    nbbs_t *b = nbbs_init(meta, msz, FAKE_BASE, 1024 * mb, &gc);
    CHECK(b != NULL);
    nbbs_cache_config_t cfg = { 4, 16, 64 };
    char *mem;
    nbbs_cache_t *c = cache_new(b, &cfg, &mem);
    char *p = nbbs_cache_alloc(c, 3);
    CHECK(p != NULL);
    CHECK_EQ(stats(b).cached_blocks, 15u);
    CHECK_EQ(nbbs_cache_free(c, p), 0);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(b).used_bytes, 0);
    nbbs_cache_config_t cfg0 = { 1, 64, 256 }; /* order 0: 8 carved blocks per refill */
    char *mem0;
    c = cache_new(b, &cfg0, &mem0);
    p = nbbs_cache_alloc(c, 0);
    CHECK(p != NULL);
    CHECK_EQ(stats(b).cached_blocks, 63u);
    CHECK_EQ(nbbs_cache_free(c, p), 0);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(b).used_bytes, 0);
    CHECK_EQ(nbbs_validate(b), 0);
    free(meta), free(mem), free(mem0);
}

/* test_batch_home with 64 KiB stack boundaries placed between its calls.
 * A context's hint cell is a hash of (stack address >> 16): when the
 * boundary fell between the frame of the set-up's frees and the refill's,
 * the refill searched from another cell, one that may start in group B, and
 * took its first block there (soak26: 1 run of test_cache in 20 under ASan,
 * about 1 in 500 in release). Each boundary below this frame, 0 to 8 KiB
 * under the callee's entry in steps of 128 bytes (where it falls between
 * the calls depends on the build's frame sizes); about half the cell pairs
 * that meet across a boundary failed before, so 16 boundaries. */
static __attribute__((__noinline__)) void batch_home_below(nbbs_layout_t lay, unsigned k, uintptr_t d)
{
    volatile char here = 0;
    uintptr_t sp = (uintptr_t)&here, boundary = ((sp >> 16) - k) << 16;
    volatile char *pad = __builtin_alloca(sp - boundary - d);
    pad[0] = here;
    test_batch_home(lay);
    __asm__ volatile("" ::: "memory"); /* keeps pad live across the call */
}

static void test_batch_home_any_cell(nbbs_layout_t lay)
{
    int before = check_failed;
    for (unsigned k = 2; k < 18 && check_failed == before; k++)
        for (uintptr_t d = 0; d < 8192 && check_failed == before; d += 128)
            batch_home_below(lay, k, d);
}

/* Pressure: every free block sits in caches. */
static void test_pressure(nbbs_layout_t lay)
{
    const size_t mb = 64, n = 64;
    inst_t in = make(lay, FAKE_BASE, n * mb, mb, 6);
    nbbs_cache_config_t cfg = { 4, 8, 64 };
    size_t sz = nbbs_cache_size(&cfg);
    char *ma = aalloc(NBBS_CACHE_ALIGN, sz), *mbm = aalloc(NBBS_CACHE_ALIGN, sz);
    nbbs_cache_t *a = nbbs_cache_init(ma, sz, in.b, &cfg), *bc = nbbs_cache_init(mbm, sz, in.b, &cfg);
    CHECK(a && bc);
    char *blk[64];
    for (size_t i = 0; i < n; i++) {
        blk[i] = nbbs_cache_alloc(a, 0);
        CHECK(blk[i] != NULL);
    }
    CHECK(nbbs_cache_alloc(a, 0) == NULL);
    CHECK(nbbs_cache_alloc(bc, 0) == NULL);
    CHECK(nbbs_alloc_order(in.b, 0) == NULL);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(nbbs_cache_free(a, blk[i]), 0);
    nbbs_stats_t s = stats(in.b);
    CHECK_EQ(s.cached_blocks, n);
    CHECK_EQ(s.free_bytes, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);

    /* A plain allocation takes one of a's blocks; so does b's cache. */
    char *x = nbbs_alloc_order(in.b, 0);
    CHECK(x != NULL);
    CHECK_EQ(nbbs_block_size(in.b, x), mb);
    char *y = nbbs_cache_alloc(bc, 0);
    CHECK(y != NULL && y != x);
    CHECK_EQ(stats(in.b).cached_blocks, n - 2);
    /* An order no cache holds a block of: every cached block goes back to
     * the tree, which then has an order-5 block (the half without x, y?). */
    char *h = nbbs_alloc_order(in.b, 5);
    s = stats(in.b);
    /* Except the free frames of the carved blocks (8 frames each) that x
     * and y live in: those blocks go back whole only once x and y are free. */
    bool same8 = (uintptr_t)(x - FAKE_BASE) / (8 * mb) == (uintptr_t)(y - FAKE_BASE) / (8 * mb);
    CHECK_EQ(s.cached_blocks, same8 ? 6 : 14);
    CHECK_EQ(h != NULL, ((uintptr_t)(x - FAKE_BASE) / (32 * mb)) == ((uintptr_t)(y - FAKE_BASE) / (32 * mb)));
    if (h)
        CHECK_EQ(nbbs_free(in.b, h), 0);
    /* a's owner finds its entries gone and refills from the tree. */
    char *z = nbbs_cache_alloc(a, 0);
    CHECK(z != NULL && z != x && z != y);
    CHECK_EQ(nbbs_cache_free(a, z), 0);
    CHECK_EQ(nbbs_cache_free(bc, x), 0); /* a free on another cache than the allocation's */
    CHECK_EQ(nbbs_cache_free(a, y), 0);
    CHECK_EQ(nbbs_validate(in.b), 0);

    /* Exhaustion with blocks spread over both caches and the tree: NULL
     * comes exactly when every block has been handed out. */
    size_t got = 0;
    for (;;) {
        char *p = nbbs_cache_alloc(got % 2 ? a : bc, 0);
        if (!p)
            break;
        CHECK_EQ(nbbs_block_size(in.b, p), mb);
        blk[got++ % n] = p;
    }
    CHECK_EQ(got, n);
    CHECK_EQ(stats(in.b).free_bytes, 0);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(nbbs_cache_free(i % 3 ? a : bc, blk[i]), 0);
    /* The whole arena as one block, from caches holding all of it. */
    char *all = nbbs_alloc_order(in.b, 6);
    CHECK(all == FAKE_BASE);
    CHECK_EQ(nbbs_free(in.b, all), 0);
    /* A refill of order 1: two order-3 blocks carved into 4 frames each, 7
     * cached. A reclaim returns the block without o1 whole (4 frames); the
     * other three frames stay free in o1's block, and so does a drain. (A
     * third cache: a and bc saw the tree empty above, so their next refills
     * back off, taking one block each without carving: test_short.) */
    char *mc = aalloc(NBBS_CACHE_ALIGN, sz);
    nbbs_cache_t *a3 = nbbs_cache_init(mc, sz, in.b, &cfg);
    CHECK(a3 != NULL);
    char *o1 = nbbs_cache_alloc(a3, 1);
    CHECK(o1 != NULL);
    s = stats(in.b);
    CHECK_EQ(s.cached_blocks, 7);
    CHECK_EQ(nbbs_reclaim_cached(in.b), 4);
    CHECK_EQ(stats(in.b).cached_blocks, 3);
    CHECK_EQ(nbbs_cache_drain(a3), 0);
    CHECK_EQ(stats(in.b).cached_blocks, 3);
    CHECK_EQ(nbbs_validate(in.b), 0);
    CHECK_EQ(nbbs_cache_free(bc, o1), 0);
    CHECK_EQ(nbbs_cache_drain(bc), 4);     /* o1's block, whole, with its three free frames */
    CHECK_EQ(stats(in.b).used_bytes, 0);
    free(in.meta), free(ma), free(mbm), free(mc);
}

/* After a refill's search of the tree fails, refills back off (take one
 * block, do not carve, do not repeat a harvest that found nothing) for a
 * while; they still search the tree, so a block freed to the tree is found
 * and NULL still means that nothing is free. */
static void test_short(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in;
    char *m;
    nbbs_cache_t *c = short_instance(lay, &in, &m);
    /* 5 of the 8 order-3 blocks taken outside the cache. */
    char *d[5];
    for (int i = 0; i < 5; i++) {
        d[i] = nbbs_alloc_order(in.b, 3);
        CHECK(d[i] != NULL);
    }
    /* A refill of order 3 wants 8 blocks and finds 3: one handed out, two
     * cached, and its search for a fourth fails. */
    char *e[3];
    e[0] = nbbs_cache_alloc(c, 3);
    CHECK(e[0] != NULL);
    CHECK_EQ(stats(in.b).cached_blocks, 2);
    e[1] = nbbs_cache_alloc(c, 3);
    e[2] = nbbs_cache_alloc(c, 3);
    CHECK(e[1] != NULL && e[2] != NULL);
    CHECK(nbbs_cache_alloc(c, 3) == NULL); /* nothing free anywhere */
    CHECK(nbbs_cache_alloc(c, 0) == NULL);
    /* One block back to the tree: the next refill (backing off) finds it. */
    CHECK_EQ(nbbs_free(in.b, d[0]), 0);
    char *f = nbbs_cache_alloc(c, 3);
    CHECK(f == d[0]);
    /* Three more: a refill backing off takes one block, not a batch. */
    for (int i = 1; i < 4; i++)
        CHECK_EQ(nbbs_free(in.b, d[i]), 0);
    char *g = nbbs_cache_alloc(c, 3);
    CHECK(g != NULL);
    CHECK_EQ(stats(in.b).cached_blocks, 0);
    /* Order 0 backs off from carving but still gets frames, and every
     * frame of the two free order-3 blocks is still obtainable. */
    size_t got = 0;
    char *fr[16];
    while (got < 16 && (fr[got] = nbbs_cache_alloc(c, 0)) != NULL)
        got++;
    CHECK_EQ(got, 16);
    CHECK(nbbs_cache_alloc(c, 0) == NULL);
    CHECK_EQ(stats(in.b).free_bytes, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);
    for (size_t i = 0; i < got; i++)
        CHECK_EQ(nbbs_cache_free(c, fr[i]), 0);
    CHECK_EQ(nbbs_cache_free(c, f), 0);
    CHECK_EQ(nbbs_cache_free(c, g), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(nbbs_cache_free(c, e[i]), 0);
    CHECK_EQ(nbbs_free(in.b, d[4]), 0);
    finish(&in, c, m, 64 * mb);
}

/* When the tree has no block of the carve order left, the frames of the
 * orders below it are scattered pieces: a refill of such an order then takes
 * one of them, not a batch (each further search walks far near full, and the
 * pieces it would hold are missing to the other orders). Here every order-3
 * block keeps a live frame and 8 single frames are free. */
static void test_short_small(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in;
    char *m;
    nbbs_cache_t *c = short_instance(lay, &in, &m);
    char *d[64];
    for (int i = 0; i < 64; i++) {
        d[i] = nbbs_alloc_order(in.b, 0);
        CHECK(d[i] != NULL);
    }
    for (int g = 0; g < 8; g++) /* frame 1 of each order-3 block: its buddy stays live */
        for (int i = 0; i < 64; i++)
            if ((size_t)(d[i] - FAKE_BASE) / mb == (size_t)(8 * g + 1)) {
                CHECK_EQ(nbbs_free(in.b, d[i]), 0);
                d[i] = NULL;
            }
    CHECK_EQ(stats(in.b).free_bytes, 8 * mb);
    /* The refill's carve search fails; it takes one frame and caches none. */
    char *f[8];
    f[0] = nbbs_cache_alloc(c, 0);
    CHECK(f[0] != NULL);
    CHECK_EQ(stats(in.b).cached_blocks, 0);
    CHECK_EQ(stats(in.b).free_bytes, 7 * mb);
    /* Order 1 finds nothing and order 0 still gets every free frame. */
    CHECK(nbbs_cache_alloc(c, 1) == NULL);
    for (int i = 1; i < 8; i++) {
        f[i] = nbbs_cache_alloc(c, 0);
        CHECK(f[i] != NULL);
        CHECK_EQ(stats(in.b).cached_blocks, 0);
    }
    CHECK(nbbs_cache_alloc(c, 0) == NULL);
    CHECK_EQ(nbbs_validate(in.b), 0);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(nbbs_cache_free(c, f[i]), 0);
    for (int i = 0; i < 64; i++)
        if (d[i])
            CHECK_EQ(nbbs_free(in.b, d[i]), 0);
    finish(&in, c, m, 64 * mb);
}

/* With no block of the carve order left in the tree, a refill of a carved
 * order first makes its frame of free frames this cache holds for another
 * order (one CAS on their carved block's word) before it searches the tree
 * for the pieces left there. Here the cache holds 7 free order-0 frames of
 * one carved block and the tree one free order-1 block elsewhere: an order-1
 * allocation joins two of the frames. */
static void test_take_own(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in;
    char *m;
    nbbs_cache_t *c = short_instance(lay, &in, &m);
    char *f0 = nbbs_cache_alloc(c, 0); /* carves one order-3 block: 7 frames cached */
    CHECK(f0 != NULL);
    size_t g = (size_t)(f0 - FAKE_BASE) / mb & ~(size_t)7;
    CHECK_EQ(stats(in.b).cached_blocks, 7);
    char *d[56];
    for (int i = 0; i < 56; i++) {
        d[i] = nbbs_alloc_order(in.b, 0);
        CHECK(d[i] != NULL);
        CHECK((size_t)(d[i] - FAKE_BASE) / mb >> 3 != g >> 3);
    }
    CHECK_EQ(stats(in.b).free_bytes, 0);
    /* One order-1 block free in the tree, in a block with live frames. */
    size_t h = (g + 8) % 64 + 2;
    for (int i = 0; i < 56; i++)
        if ((size_t)(d[i] - FAKE_BASE) / mb == h || (size_t)(d[i] - FAKE_BASE) / mb == h + 1) {
            CHECK_EQ(nbbs_free(in.b, d[i]), 0);
            d[i] = NULL;
        }
    CHECK_EQ(stats(in.b).free_bytes, 2 * mb);
    char *f1 = nbbs_cache_alloc(c, 1);
    CHECK(f1 != NULL);
    CHECK_EQ((size_t)(f1 - FAKE_BASE) / mb >> 3, g >> 3); /* in the cache's carved block */
    CHECK_EQ(stats(in.b).free_bytes, 2 * mb);             /* the tree's block untouched */
    CHECK_EQ(nbbs_block_size(in.b, f1), 2 * mb);
    CHECK_EQ(nbbs_validate(in.b), 0);
    /* Every frame is still obtainable: 5 order-0 frames of the carved block
     * (two of the stack's entries are stale now) and the tree's 2. */
    char *r[8];
    size_t got = 0;
    while (got < 8 && (r[got] = nbbs_cache_alloc(c, 0)) != NULL)
        got++;
    CHECK_EQ(got, 7);
    CHECK_EQ(stats(in.b).cached_blocks, 0);
    CHECK_EQ(stats(in.b).free_bytes, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);
    for (size_t i = 0; i < got; i++)
        CHECK_EQ(nbbs_cache_free(c, r[i]), 0);
    CHECK_EQ(nbbs_cache_free(c, f0), 0);
    CHECK_EQ(nbbs_cache_free(c, f1), 0);
    for (int i = 0; i < 56; i++)
        if (d[i])
            CHECK_EQ(nbbs_free(in.b, d[i]), 0);
    finish(&in, c, m, 64 * mb);
}

/* Frames a drain leaves in carved blocks that keep a live frame are used
 * again before any new block is carved: the cache remembers up to 64 such
 * blocks, and when more were left (the ring overflowed) its refills harvest
 * them from the index. 80 blocks here, one free frame in each. */
static void test_parts(nbbs_layout_t lay)
{
    const size_t mb = 64, nblk = 80;
    inst_t in = make(lay, FAKE_BASE, 2048 * mb, mb, 11);
    nbbs_cache_config_t cfg = { 1, 8, 8 };
    char *m;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &m);
    static char *f[80 * 8];
    for (size_t i = 0; i < nblk * 8; i++) {
        f[i] = nbbs_cache_alloc(c, 0);
        CHECK(f[i] != NULL);
    }
    size_t used = stats(in.b).used_bytes;
    CHECK_EQ(used, nblk * 8 * mb);
    for (size_t i = 0; i < nblk * 8; i += 8)
        CHECK_EQ(nbbs_cache_free(c, f[i + 3]), 0);
    CHECK_EQ(stats(in.b).used_bytes, used); /* no carved block is all free */
    for (size_t i = 0; i < nblk; i++) {
        char *p = nbbs_cache_alloc(c, 0);
        CHECK(p != NULL);
        CHECK_EQ((uintptr_t)(p - FAKE_BASE) % (8 * mb), 3 * mb); /* a freed frame, not a new block's */
        CHECK_EQ(nbbs_block_size(in.b, p), mb);
    }
    CHECK_EQ(stats(in.b).used_bytes, used);
    CHECK_EQ(stats(in.b).cached_blocks, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);
    for (size_t i = 0; i < nblk * 8; i++)
        CHECK_EQ(nbbs_free(in.b, f[i]), 0);
    finish(&in, c, m, 0);
}

/* Frames left in carved blocks with a live frame by nbbs_cache_drain (the
 * blocks the cache remembered are forgotten), by nbbs_reclaim_cached and by
 * nbbs_free are used again before a new block is carved: each such block is
 * marked in the instance's stray bitmap, a drained cache harvests before it
 * carves, and so does a cache whose ring overflowed (test_parts). */
static void test_strays(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in = make(lay, FAKE_BASE, 2048 * mb, mb, 11);
    nbbs_cache_config_t cfg = { 1, 8, 8 };
    char *m;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &m);
    char *f[32];
    for (size_t i = 0; i < 32; i++) {
        f[i] = nbbs_cache_alloc(c, 0);
        CHECK(f[i] != NULL);
    }
    size_t used = stats(in.b).used_bytes;
    CHECK_EQ(used, 32 * mb); /* four carved blocks */
    /* Through the cache, then drained: one frame in each of two blocks. */
    CHECK_EQ(nbbs_cache_free(c, f[3]), 0);
    CHECK_EQ(nbbs_cache_free(c, f[11]), 0);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(in.b).used_bytes, used); /* neither block is all free */
    CHECK_EQ(stats(in.b).cached_blocks, 2);
    for (int i = 0; i < 2; i++) {
        char *p = nbbs_cache_alloc(c, 0);
        CHECK(p == f[3] || p == f[11]); /* not a new block's frame */
        CHECK_EQ(nbbs_block_size(in.b, p), mb);
    }
    /* Through nbbs_free, and a cache's frame taken back by
     * nbbs_reclaim_cached: the next refill finds them too. */
    CHECK_EQ(nbbs_free(in.b, f[21]), 0);
    CHECK_EQ(nbbs_cache_free(c, f[29]), 0);
    CHECK_EQ(nbbs_reclaim_cached(in.b), 0); /* a frame, not a whole block */
    nbbs_cache_drain(c); /* its stack named f[29]: stale now, so a refill comes next */
    for (int i = 0; i < 2; i++) {
        char *p = nbbs_cache_alloc(c, 0);
        CHECK(p == f[21] || p == f[29]);
    }
    CHECK_EQ(stats(in.b).used_bytes, used);
    CHECK_EQ(stats(in.b).cached_blocks, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);
    for (size_t i = 0; i < 32; i++)
        CHECK_EQ(nbbs_free(in.b, f[i]), 0);
    finish(&in, c, m, 0);
}

/* The frames of the blocks a cache's full ring wrote over are found by the
 * other caches too, once the owner's next refill has published them in the
 * shared stray bitmap: a cache kept them in a private map, and another
 * cache that needed frames carved new blocks (or took the tree's) while
 * they sat unused (the churn experiment lost free 2 MiB blocks, issue 11).
 * Here A's ring overflows by 8 blocks, A refills once (one of them), and
 * with the tree out of order-3 blocks but one free frame left in it,
 * cache B gets A's 7 other frames before the tree's. */
static void test_lost_shared(nbbs_layout_t lay)
{
    const size_t mb = 64, nblk = 80;
    inst_t in = make(lay, FAKE_BASE, 2048 * mb, mb, 11);
    nbbs_cache_config_t cfg = { 1, 8, 8 };
    char *ma, *mbm;
    nbbs_cache_t *a = cache_new(in.b, &cfg, &ma), *c = cache_new(in.b, &cfg, &mbm);
    static char *f[80 * 8], *t[2048];
    for (size_t i = 0; i < nblk * 8; i++) {
        f[i] = nbbs_cache_alloc(a, 0);
        CHECK(f[i] != NULL);
    }
    for (size_t i = 0; i < nblk * 8; i += 8)
        CHECK_EQ(nbbs_cache_free(a, f[i + 3]), 0);
    /* 8 frees were left on the stack, 72 drained: the ring overflowed by 8.
     * The stack's 8, the ring's 64, then a refill's harvest (one block). */
    for (size_t i = 0; i < 73; i++) {
        char *p = nbbs_cache_alloc(a, 0);
        CHECK(p != NULL);
        CHECK_EQ((uintptr_t)(p - FAKE_BASE) % (8 * mb), 3 * mb);
    }
    size_t nt = 0;
    while (nt < 2048 && (t[nt] = nbbs_alloc_order(in.b, 3)) != NULL)
        nt++;
    CHECK(nt > 0 && nt < 2048);
    CHECK_EQ(nbbs_free(in.b, t[--nt]), 0);
    for (size_t i = 0; i < 7; i++) { /* split it: one free frame left in the tree */
        t[nt + i] = nbbs_alloc_order(in.b, 0);
        CHECK(t[nt + i] != NULL);
    }
    for (size_t i = 0; i < 7; i++) {
        char *p = nbbs_cache_alloc(c, 0);
        CHECK(p != NULL);
        bool mine = false;
        for (size_t j = 0; j < nblk * 8; j += 8)
            mine |= p == f[j + 3];
        CHECK(mine); /* one of A's frames, not the tree's */
    }
    char *q = nbbs_cache_alloc(c, 0); /* the tree's frame, last */
    CHECK(q != NULL);
    CHECK_EQ(nbbs_validate(in.b), 0);
    nbbs_free(in.b, q);
    for (size_t i = 0; i < nt + 7; i++)
        CHECK_EQ(nbbs_free(in.b, t[i]), 0);
    for (size_t i = 0; i < nblk * 8; i++)
        CHECK_EQ(nbbs_free(in.b, f[i]), 0);
    nbbs_cache_drain(a);
    nbbs_cache_drain(c);
    CHECK_EQ(stats(in.b).used_bytes, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);
    free(in.meta), free(ma), free(mbm);
}

/* A harvest that names a carved block's free frames of its order leaves the
 * block marked in the stray bitmap when it still holds free frames of
 * another order, so that order's next harvest finds them before the tree's
 * blocks. Here block B0 holds a free order-0 frame (split off a free
 * order-1 frame by a take under pressure) and a free order-1 frame; cache
 * d's order-0 harvest takes the first, its order-1 harvest must find the
 * second, though the tree (out of order-3 blocks) still has an order-1 block. */
static void test_harvest_other(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in = make(lay, FAKE_BASE, 2048 * mb, mb, 11);
    nbbs_cache_config_t cfg = { 2, 8, 8 };
    char *mc, *md;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &mc), *d = cache_new(in.b, &cfg, &md);
    char *a[8];
    for (size_t i = 0; i < 8; i++) { /* one refill: two carved blocks of 4 order-1 frames */
        a[i] = nbbs_cache_alloc(c, 1);
        CHECK(a[i] != NULL);
    }
    char *b0 = FAKE_BASE + ((uintptr_t)(a[0] - FAKE_BASE) & ~(uintptr_t)(8 * mb - 1));
    static char *t[256];
    size_t nt = 0;
    while (nt < 256 && (t[nt] = nbbs_alloc_order(in.b, 3)) != NULL)
        nt++;
    CHECK(nt > 0 && nt < 256);
    CHECK_EQ(nbbs_free(in.b, t[--nt]), 0);
    char *x2 = nbbs_alloc_order(in.b, 2), *x1 = nbbs_alloc_order(in.b, 1); /* one order-1 block left */
    CHECK(x2 != NULL && x1 != NULL);
    /* Two of B0's order-1 frames, freed to no stack: B0 is marked stray. */
    CHECK_EQ(nbbs_free(in.b, b0 + 2 * mb), 0);
    CHECK_EQ(nbbs_free(in.b, b0 + 4 * mb), 0);
    /* c cannot carve: its stray take splits the frame at 2. */
    char *p0 = nbbs_cache_alloc(c, 0);
    CHECK(p0 == b0 + 2 * mb);
    /* d's order-0 harvest names the other half; its order-1 harvest (d
     * does not carve: its search failed) finds the frame at 4, not the
     * tree's block. */
    char *q0 = nbbs_cache_alloc(d, 0);
    CHECK(q0 == b0 + 3 * mb);
    char *q1 = nbbs_cache_alloc(d, 1);
    CHECK(q1 == b0 + 4 * mb);
    CHECK_EQ(nbbs_validate(in.b), 0);
    CHECK_EQ(nbbs_free(in.b, q1), 0);
    CHECK_EQ(nbbs_free(in.b, q0), 0);
    CHECK_EQ(nbbs_free(in.b, p0), 0);
    for (size_t i = 0; i < 8; i++)
        if (a[i] != b0 + 2 * mb && a[i] != b0 + 4 * mb)
            CHECK_EQ(nbbs_free(in.b, a[i]), 0);
    CHECK_EQ(nbbs_free(in.b, x1), 0);
    CHECK_EQ(nbbs_free(in.b, x2), 0);
    for (size_t i = 0; i < nt; i++)
        CHECK_EQ(nbbs_free(in.b, t[i]), 0);
    nbbs_cache_drain(c);
    nbbs_cache_drain(d);
    CHECK_EQ(stats(in.b).used_bytes, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);
    free(in.meta), free(mc), free(md);
}

/* A refill that cannot carve (the tree has no order-3 block) takes a frame
 * made of free frames of a marked carved block (or split off a larger one)
 * before it searches the tree, which still has a free block of that order
 * elsewhere: the tree's block stays whole, and near full the search (and
 * its failure, and the pressure path after it) is skipped. */
static void test_stray_take(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in = make(lay, FAKE_BASE, 64 * mb, mb, 6);
    nbbs_cache_config_t cfg = { 2, 8, 8 };
    char *m;
    nbbs_cache_t *c = cache_new(in.b, &cfg, &m);
    char *f[8], *g[32];
    for (size_t i = 0; i < 8; i++) {
        f[i] = nbbs_cache_alloc(c, 0);
        CHECK(f[i] != NULL);
    }
    for (size_t i = 1; i < 8; i++)
        CHECK(f[i] == f[0] + i * mb); /* one carved block, frames in address order */
    size_t ng = 0;
    while (ng < 32 && (g[ng] = nbbs_alloc_order(in.b, 1)) != NULL)
        ng++;
    CHECK_EQ(ng, 28); /* the rest of the arena */
    CHECK_EQ(nbbs_free(in.b, g[5]), 0); /* one free order-1 block in the tree */
    CHECK_EQ(nbbs_free(in.b, f[2]), 0); /* two free order-0 frames, named nowhere */
    CHECK_EQ(nbbs_free(in.b, f[3]), 0);
    char *p = nbbs_cache_alloc(c, 1);
    CHECK(p == f[2]); /* made of the two frames, not the tree's block */
    CHECK_EQ(nbbs_block_size(in.b, p), 2 * mb);
    char *q = nbbs_cache_alloc(c, 1);
    CHECK(q == g[5]); /* then the tree's */
    CHECK(nbbs_cache_alloc(c, 1) == NULL);
    CHECK_EQ(nbbs_validate(in.b), 0);
    CHECK_EQ(nbbs_free(in.b, p), 0);
    CHECK_EQ(nbbs_free(in.b, q), 0);
    for (size_t i = 0; i < 8; i++)
        if (i != 2 && i != 3)
            CHECK_EQ(nbbs_free(in.b, f[i]), 0);
    for (size_t i = 0; i < ng; i++)
        if (i != 5)
            CHECK_EQ(nbbs_free(in.b, g[i]), 0);
    finish(&in, c, m, 0);
}

/* Bulk refill: orders 0..2 are refilled by carving order-3 blocks. Frees
 * of carved frames (through caches and nbbs_free), double frees, drains that
 * leave a half-used carved block, and allocations under pressure that take,
 * split or combine free frames of carved blocks. */
static void test_carve(nbbs_layout_t lay)
{
    const size_t mb = 64;
    inst_t in = make(lay, FAKE_BASE, 32 * mb, mb, 5);
    nbbs_cache_config_t cfg = { 3, 8, 32 };
    size_t sz = nbbs_cache_size(&cfg);
    char *m1 = aalloc(NBBS_CACHE_ALIGN, sz), *m2 = aalloc(NBBS_CACHE_ALIGN, sz);
    nbbs_cache_t *c = nbbs_cache_init(m1, sz, in.b, &cfg), *c2 = nbbs_cache_init(m2, sz, in.b, &cfg);
    CHECK(c && c2);

    /* One refill of order 0: one order-3 block, 8 frames, 7 of them cached. */
    char *p = nbbs_cache_alloc(c, 0);
    CHECK(p != NULL);
    nbbs_stats_t s = stats(in.b);
    CHECK_EQ(s.used_bytes, 8 * mb);
    CHECK_EQ(s.live_blocks, 8);
    CHECK_EQ(s.cached_blocks, 7);
    CHECK_EQ(nbbs_block_size(in.b, p), mb);
    CHECK_EQ(nbbs_validate(in.b), 0);
    /* nbbs_free of a carved frame: its block is all free then, and goes
     * back to the tree whole; a second free of the frame is refused. */
    CHECK_EQ(nbbs_free(in.b, p), 0);
    CHECK_EQ(nbbs_free(in.b, p), NBBS_EINVAL);
    CHECK_EQ(nbbs_cache_free(c, p), NBBS_EINVAL);
    CHECK_EQ(nbbs_block_size(in.b, p), 0);
    s = stats(in.b);
    CHECK_EQ(s.used_bytes, 0);
    CHECK_EQ(s.cached_blocks, 0);
    CHECK_EQ(nbbs_validate(in.b), 0);

    /* The cache's entries are stale now: the next allocation drops them
     * and carves again. Take all 8 frames, free half through the cache and
     * drain it: the block keeps its live frames, so its free ones stay
     * cached (counted) and nothing goes back. */
    char *f[8];
    for (int i = 0; i < 8; i++) {
        f[i] = nbbs_cache_alloc(c, 0);
        CHECK(f[i] != NULL);
        CHECK_EQ((uintptr_t)(f[i] - FAKE_BASE) / (8 * mb), (uintptr_t)(f[0] - FAKE_BASE) / (8 * mb));
    }
    CHECK_EQ(stats(in.b).used_bytes, 8 * mb);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(nbbs_cache_free(c, f[i]), 0);
    CHECK_EQ(nbbs_cache_free(c2, f[0]), NBBS_EINVAL); /* a double free through another cache */
    CHECK_EQ(nbbs_free(in.b, f[1]), NBBS_EINVAL);
    CHECK_EQ(nbbs_cache_drain(c), 0);
    s = stats(in.b);
    CHECK_EQ(s.cached_blocks, 4);
    CHECK_EQ(s.live_blocks, 8);
    CHECK_EQ(nbbs_validate(in.b), 0);
    /* The drained cache remembers nothing; the other names the free frames
     * again only under pressure. Frees of the last live frames return the
     * block whole (the last nbbs_free sees every frame free). */
    for (int i = 4; i < 7; i++)
        CHECK_EQ(nbbs_free(in.b, f[i]), 0);
    CHECK_EQ(stats(in.b).used_bytes, 8 * mb);
    CHECK_EQ(nbbs_cache_free(c2, f[7]), 0);   /* into c2: named there, not merged yet */
    CHECK_EQ(stats(in.b).cached_blocks, 8);
    CHECK_EQ(nbbs_cache_drain(c2), 8);        /* the whole block back: its 8 frames */
    CHECK_EQ(stats(in.b).used_bytes, 0);

    /* Pressure: a refill of order 2 carves 4 order-3 blocks, the whole
     * arena: 8 frames of order 2, one live. */
    char *x = nbbs_cache_alloc(c, 2);
    CHECK(x != NULL);
    s = stats(in.b);
    CHECK_EQ(s.free_bytes, 0);
    CHECK_EQ(s.cached_blocks, 7);
    /* Order 0 from the tree: none; no cache holds one; a free order-2
     * frame is split (one CAS on its block's word): order 0 handed out,
     * an order-0 and an order-1 frame left free. */
    char *y = nbbs_alloc_order(in.b, 0);
    CHECK(y != NULL);
    CHECK_EQ(nbbs_block_size(in.b, y), mb);
    CHECK_EQ(stats(in.b).cached_blocks, 8);
    CHECK_EQ(nbbs_validate(in.b), 0);
    char *y1 = nbbs_alloc_order(in.b, 0); /* the order-0 half left over */
    CHECK(y1 == y + mb);
    char *z = nbbs_alloc_order(in.b, 1);  /* the order-1 quarter left over */
    CHECK(z == y + 2 * mb);
    CHECK_EQ(nbbs_block_size(in.b, z), 2 * mb);
    /* Two free order-0 frames make an order-1 block: taken together. */
    CHECK_EQ(nbbs_free(in.b, y), 0);
    CHECK_EQ(nbbs_cache_free(c2, y1), 0);
    char *w = nbbs_alloc_order(in.b, 1);
    CHECK(w == y);
    CHECK_EQ(nbbs_block_size(in.b, w), 2 * mb);
    CHECK_EQ(nbbs_block_size(in.b, y1), 0);
    CHECK_EQ(nbbs_free(in.b, y1), NBBS_EINVAL); /* inside w now */
    CHECK_EQ(nbbs_validate(in.b), 0);
    /* An order-3 request needs whole blocks: the reclaim returns the six
     * carved blocks' worth that are all free, and the tree has them. */
    char *h = nbbs_alloc_order(in.b, 3);
    CHECK(h != NULL);
    CHECK_EQ(nbbs_free(in.b, h), 0);
    /* Everything back: exact. */
    CHECK_EQ(nbbs_free(in.b, w), 0);
    CHECK_EQ(nbbs_free(in.b, z), 0);
    CHECK_EQ(nbbs_cache_free(c, x), 0);
    nbbs_cache_drain(c);
    nbbs_cache_drain(c2);
    s = stats(in.b);
    CHECK_EQ(s.used_bytes, 0);
    CHECK_EQ(s.cached_bytes, 0);
    CHECK_EQ(s.largest_free, 32 * mb);
    CHECK_EQ(nbbs_validate(in.b), 0);
    free(in.meta), free(m1), free(m2);
}

/* ------------------------------------------------------------------------
 * Concurrent stress
 * ------------------------------------------------------------------------ */

#define MAX_LIVE 24
#define MAILBOX 32
#define MAX_T 16

typedef struct {
    nbbs_t           *b;
    char             *base;
    size_t            min_block, arena;
    unsigned          max_order;
    _Atomic uint64_t *owner; /* per min_block: tag of the live block covering it, or 0 */
    _Atomic(char *)   mailbox[MAILBOX];
    _Atomic uint64_t  next_tag;
    atomic_int        failed;
    atomic_int        running;
    long              ops;
    nbbs_cache_t     *cache[MAX_T];
} shared_t;

typedef struct {
    shared_t          *s;
    unsigned           id;
    uint64_t           rng;
    long               allocs, nulls, drained;
} worker_t;

static void fail(shared_t *s, const char *what, void *p)
{
    if (atomic_fetch_add(&s->failed, 1) < 5)
        fprintf(stderr, "cache stress: %s at %p\n", what, p);
}

static void take(shared_t *s, char *p, size_t size)
{
    uint64_t tag = atomic_fetch_add(&s->next_tag, 1) + 1;
    size_t first = (size_t)(p - s->base) / s->min_block, n = size / s->min_block;
    for (size_t i = 0; i < n; i++) {
        uint64_t zero = 0;
        if (!atomic_compare_exchange_strong(&s->owner[first + i], &zero, tag)) {
            fail(s, "overlap: block handed out while another live block covers it", p + i * s->min_block);
            return;
        }
        memcpy(p + i * s->min_block, &tag, sizeof tag);
    }
    memcpy(p + size - sizeof tag, &tag, sizeof tag);
}

/* Check the tags, release the shadow map, then free through cache c (or
 * nbbs_free when c is NULL). */
static void give_back(shared_t *s, nbbs_cache_t *c, char *p)
{
    size_t size = nbbs_block_size(s->b, p);
    if (size == 0) {
        fail(s, "live block unknown to nbbs_block_size", p);
        return;
    }
    size_t first = (size_t)(p - s->base) / s->min_block, n = size / s->min_block;
    uint64_t tag, last;
    memcpy(&tag, p, sizeof tag);
    memcpy(&last, p + size - sizeof last, sizeof last);
    if (last != tag)
        fail(s, "block contents overwritten (last word)", p);
    for (size_t i = 0; i < n; i++) {
        uint64_t t, expect = tag;
        memcpy(&t, p + i * s->min_block, sizeof t);
        if (t != tag || !atomic_compare_exchange_strong(&s->owner[first + i], &expect, 0)) {
            fail(s, "block contents or shadow owner changed while live", p + i * s->min_block);
            return;
        }
    }
    if ((c ? nbbs_cache_free(c, p) : nbbs_free(s->b, p)) != 0)
        fail(s, "free refused a live block", p);
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    shared_t *s = w->s;
    nbbs_cache_t *c = s->cache[w->id];
    char *live[MAX_LIVE];
    int nlive = 0;
    for (long i = 0; i < s->ops && !atomic_load(&s->failed); i++) {
        uint64_t r = nbbs_tu_rand(&w->rng);
        if (nlive < MAX_LIVE && (nlive == 0 || r % 100 < 55)) {
            unsigned o = (unsigned)((r >> 8) % 16);
            o = o < 8 ? 0 : o < 11 ? 1 : o < 13 ? 2 : o < 14 ? 3 : 4 + (unsigned)((r >> 16) % 3);
            char *p = (r >> 24) % 8 ? nbbs_cache_alloc(c, o) : nbbs_alloc_order(s->b, o);
            w->allocs++;
            if (!p) {
                w->nulls++;
                continue;
            }
            if (nbbs_block_size(s->b, p) != s->min_block << o)
                fail(s, "wrong block size", p);
            take(s, p, s->min_block << o);
            live[nlive++] = p;
        } else if (r % 100 < 88) {
            int k = (int)(nbbs_tu_rand(&w->rng) % (unsigned)nlive);
            give_back(s, (r >> 24) % 16 ? c : NULL, live[k]);
            live[k] = live[--nlive];
        } else if (r % 100 < 98) {
            /* Hand a block to another thread: it will free it on its cache. */
            int k = (int)(nbbs_tu_rand(&w->rng) % (unsigned)nlive);
            char *got = atomic_exchange(&s->mailbox[nbbs_tu_rand(&w->rng) % MAILBOX], live[k]);
            if (got)
                live[k] = got;
            else
                live[k] = live[--nlive];
        } else {
            w->drained += (long)nbbs_cache_drain(c); /* the owner drains its own */
        }
    }
    while (nlive)
        give_back(s, c, live[--nlive]);
    return NULL;
}

/* Returns every cached block to the tree, over and over, while the owners work. */
static void *reclaimer(void *arg)
{
    worker_t *w = arg;
    while (atomic_load(&w->s->running)) {
        w->drained += (long)nbbs_reclaim_cached(w->s->b);
        w->allocs++;
    }
    return NULL;
}

/* Racing frees of the same blocks through caches and nbbs_free. */
#define RACE_N 1000
static char *race_blocks[RACE_N];
static atomic_int race_wins[RACE_N];
typedef struct {
    shared_t *s;
    unsigned  id;
} racer_t;

static void *racer(void *arg)
{
    racer_t *r = arg;
    nbbs_cache_t *c = r->id % 3 == 2 ? NULL : r->s->cache[r->id];
    for (unsigned k = 0; k < RACE_N; k++) {
        unsigned i = (r->id * 7919 + k) % RACE_N;
        if (race_blocks[i] && (c ? nbbs_cache_free(c, race_blocks[i]) : nbbs_free(r->s->b, race_blocks[i])) == 0)
            atomic_fetch_add(&race_wins[i], 1);
    }
    return NULL;
}

static void drain_all_caches(shared_t *s, unsigned nthreads)
{
    for (unsigned t = 0; t < nthreads; t++)
        nbbs_cache_drain(s->cache[t]);
}

static void check_all_free(shared_t *s)
{
    CHECK_EQ(nbbs_validate(s->b), 0);
    nbbs_stats_t st = stats(s->b);
    CHECK_EQ(st.used_bytes, 0);
    CHECK_EQ(st.cached_bytes, 0);
    size_t max_block = s->min_block << s->max_order, n = 0;
    while (nbbs_alloc_order(s->b, s->max_order) != NULL)
        n++;
    CHECK_EQ(n, s->arena / max_block); /* nothing lost: every max block whole again */
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(nbbs_free(s->b, s->base + i * max_block), 0);
}

static void run(nbbs_layout_t lay, unsigned nthreads, long ops)
{
    static shared_t s;
    size_t min_block = 64, arena = (size_t)64 << 10; /* 1024 frames: allocations run dry often */
    unsigned max_order = 8;
    char *base = mmap(NULL, arena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED);
    memset(&s, 0, sizeof s);
    inst_t in = make(lay, base, arena, min_block, max_order);
    s.b = in.b;
    s.base = base, s.min_block = min_block, s.arena = arena, s.max_order = max_order, s.ops = ops;
    s.owner = calloc(arena / min_block, sizeof *s.owner);
    nbbs_cache_config_t cfg = { 4, 8, 32 };
    size_t csz = nbbs_cache_size(&cfg);
    void *cmem[MAX_T];
    for (unsigned t = 0; t < nthreads; t++) {
        cmem[t] = aalloc(NBBS_CACHE_ALIGN, csz);
        s.cache[t] = nbbs_cache_init(cmem[t], csz, s.b, &cfg);
        CHECK(s.cache[t] != NULL);
    }

    pthread_t th[MAX_T + 1];
    worker_t w[MAX_T + 1];
    atomic_store(&s.running, 1);
    for (unsigned t = 0; t <= nthreads; t++) {
        w[t] = (worker_t){ &s, t, 0x9E3779B97F4A7C15ull * (t + 1) + nthreads, 0, 0, 0 };
        pthread_create(&th[t], NULL, t < nthreads ? worker : reclaimer, &w[t]);
    }
    long allocs = 0, nulls = 0, drained = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        allocs += w[t].allocs, nulls += w[t].nulls, drained += w[t].drained;
    }
    atomic_store(&s.running, 0);
    pthread_join(th[nthreads], NULL);
    for (int i = 0; i < MAILBOX; i++) {
        char *p = atomic_exchange(&s.mailbox[i], NULL);
        if (p)
            give_back(&s, s.cache[i % nthreads], p);
    }
    CHECK_EQ(atomic_load(&s.failed), 0);
    CHECK(nulls > 0); /* the arena ran dry: allocations had to look in caches */
    /* No nbbs_validate here, with blocks still cached: after concurrent
     * operations the core may leave a release's COAL mark above a block
     * allocated beside it for as long as that block lives (found by the
     * explorer without any cache: a thread that keeps its block, "a0" against
     * "a0 f0"), and cached blocks are live. Validated below once all is free;
     * the API part validates with blocks cached. */

    /* Quiescent exhaustion with the caches still holding blocks: NULL must
     * come only once every block is out (order 0 through cache 0). */
    nbbs_stats_t st = stats(s.b);
    CHECK_EQ(st.used_bytes, st.cached_bytes);
    size_t got = 0;
    char **all = malloc(arena / min_block * sizeof *all);
    for (char *p; (p = nbbs_cache_alloc(s.cache[0], 0)) != NULL;)
        all[got++] = p;
    CHECK_EQ(got, arena / min_block);
    for (size_t i = 0; i < got; i++)
        CHECK_EQ(nbbs_cache_free(s.cache[i % nthreads], all[i]), 0);
    free(all);
    drain_all_caches(&s, nthreads);
    check_all_free(&s);
    printf("cache stress %-5s %2u threads + reclaimer: %ld allocations (%ld NULL), %ld blocks drained, %ld reclaim sweeps, ok\n",
           lay == NBBS_LAYOUT_TREE ? "tree" : "bunch", nthreads, allocs, nulls, drained, w[nthreads].allocs);

    /* Racing frees: every thread frees every block, through its cache or
     * nbbs_free; exactly one free of each block succeeds. */
    for (unsigned i = 0; i < RACE_N; i++) {
        race_blocks[i] = nbbs_alloc_order(s.b, i % 3 ? 0 : 1);
        atomic_store(&race_wins[i], 0);
    }
    racer_t rc[MAX_T];
    for (unsigned t = 0; t < nthreads; t++) {
        rc[t] = (racer_t){ &s, t };
        pthread_create(&th[t], NULL, racer, &rc[t]);
    }
    for (unsigned t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    int bad = 0, held = 0;
    for (unsigned i = 0; i < RACE_N; i++) {
        held += race_blocks[i] != NULL;
        bad += race_blocks[i] && atomic_load(&race_wins[i]) != 1;
    }
    CHECK(held > 0);
    CHECK_EQ(bad, 0);
    drain_all_caches(&s, nthreads);
    check_all_free(&s);

    free(in.meta);
    for (unsigned t = 0; t < nthreads; t++)
        free(cmem[t]);
    free(s.owner);
    munmap(base, arena);
}

int main(int argc, char **argv)
{
    long ops = argc > 1 ? strtol(argv[1], NULL, 0) : 100000;
    unsigned nt = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 4;
    if (nt < 1 || nt > MAX_T)
        nt = 4;
    test_config();
    for (int l = 0; l < 2; l++) {
        test_init(layouts[l]);
        test_alloc_free(layouts[l]);
        test_capacity(layouts[l]);
        test_pressure(layouts[l]);
        test_carve(layouts[l]);
        test_take_next(layouts[l]);
        test_take_hint(layouts[l]);
        test_batch_home(layouts[l]);
        test_batch_home_any_cell(layouts[l]);
        test_short(layouts[l]);
        test_short_small(layouts[l]);
        test_take_own(layouts[l]);
        test_parts(layouts[l]);
        test_strays(layouts[l]);
        test_lost_shared(layouts[l]);
        test_harvest_other(layouts[l]);
        test_stray_take(layouts[l]);
    }
    printf("api: %d passed, %d failed\n", check_passed, check_failed);
    for (int l = 0; l < 2; l++)
        run(layouts[l], nt, ops);
    TEST_MAIN_END();
}
