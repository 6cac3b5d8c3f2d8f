/*
 * test_api.c - every public function of libnbbs and every error path, in both
 * layouts: bad configurations, bad pointers (each must leave the metadata
 * byte-for-byte unchanged), sizes, alignment, exhaustion, statistics, the
 * occupancy map, arenas that are not powers of two, PROT_NONE and unmapped
 * arenas.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "nbbs.h"
#include "support/nbbs_testutil.h"
#include "../src/nbbs/nbbs_cache_int.h" /* the group free counts and a cache's balance (test_group_counts) */

static const nbbs_layout_t layouts[] = { NBBS_LAYOUT_TREE, NBBS_LAYOUT_BUNCH };
#define FAKE_BASE NBBS_TU_FAKE_BASE /* never mapped, never touched */

static void *meta_alloc(size_t n)
{
    void *m = nbbs_tu_aligned_alloc(NBBS_META_ALIGN, n);
    if (!m)
        abort();
    return m;
}

static void test_config(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 0, .max_order = 0, .layout = lay };
    CHECK(nbbs_meta_size(1 << 20, &c) > 0);              /* defaults: 4 KiB blocks */
    CHECK(nbbs_meta_size(1 << 20, NULL) > 0);            /* NULL config = defaults */
    c.min_block = 4;
    CHECK_EQ(nbbs_meta_size(1 << 20, &c), 0);            /* below 8 */
    c.min_block = 24;
    CHECK_EQ(nbbs_meta_size(1 << 20, &c), 0);            /* not a power of two */
    c.min_block = 64;
    CHECK_EQ(nbbs_meta_size(0, &c), 0);                  /* empty arena */
    CHECK_EQ(nbbs_meta_size(64 * 10 + 8, &c), 0);        /* not a multiple */
    c.max_order = 4;
    CHECK_EQ(nbbs_meta_size(64 * 8, &c), 0);             /* max block larger than the arena */
    CHECK(nbbs_meta_size(64 * 16, &c) > 0);
    c.max_order = NBBS_MAX_ORDER + 1;
    CHECK_EQ(nbbs_meta_size((size_t)1 << 40, &c), 0);    /* beyond the limit */
    c.min_block = (size_t)1 << 40, c.max_order = 30;
    CHECK_EQ(nbbs_meta_size((size_t)1 << 62, &c), 0);    /* block size would overflow */
    c.min_block = 64, c.max_order = 0, c.layout = (nbbs_layout_t)2;
    CHECK_EQ(nbbs_meta_size(1 << 20, &c), 0);            /* unknown layout */
    c.layout = (nbbs_layout_t)0;                         /* 0 = BUNCH */
    nbbs_config_t cb = { .min_block = 64, .max_order = 0, .layout = NBBS_LAYOUT_BUNCH };
    CHECK_EQ(nbbs_meta_size(1 << 20, &c), nbbs_meta_size(1 << 20, &cb));
    c.layout = lay, c.max_order = 6;
    c.group_order = 7;
    CHECK_EQ(nbbs_meta_size(1 << 20, &c), 0);            /* group larger than the max block */
    c.group_order = 6;
    CHECK(nbbs_meta_size(1 << 20, &c) > 0);
    char *m = meta_alloc(nbbs_meta_size(1 << 20, &c));
    c.group_order = 7;
    CHECK(nbbs_init(m, 1 << 16, (void *)(uintptr_t)0x100000, 1 << 20, &c) == NULL);
    free(m);
    c.group_order = 0;
    c.flags = NBBS_GROUP_COUNTS;
    size_t counted = nbbs_meta_size(1 << 20, &c);
    c.flags = 0;
    CHECK(counted > nbbs_meta_size(1 << 20, &c));        /* the counts take metadata */
    c.flags = 2;
    CHECK_EQ(nbbs_meta_size(1 << 20, &c), 0);            /* an unknown flag */
    c.flags = NBBS_GROUP_COUNTS | 4;
    CHECK_EQ(nbbs_meta_size(1 << 20, &c), 0);
}

static void test_init_errors(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 64, .max_order = 0, .layout = lay };
    size_t arena = 64 * 100, need = nbbs_meta_size(arena, &c);
    CHECK(need > 0);
    char *meta = meta_alloc(need + 128);
    memset(meta, 0xAB, need + 128);
    CHECK(nbbs_init(NULL, need, FAKE_BASE, arena, &c) == NULL);
    CHECK(nbbs_init(meta, need - 1, FAKE_BASE, arena, &c) == NULL);      /* too small */
    CHECK(nbbs_init(meta + 8, need, FAKE_BASE, arena, &c) == NULL);      /* misaligned metadata */
    CHECK(nbbs_init(meta, need, NULL, arena, &c) == NULL);               /* no base */
    CHECK(nbbs_init(meta, need, FAKE_BASE + 8, arena, &c) == NULL);      /* base not aligned */
    CHECK(nbbs_init(meta, need, (void *)(UINTPTR_MAX - 4095), 8192, &c) == NULL); /* wraps */
    c.min_block = 3;
    CHECK(nbbs_init(meta, need, FAKE_BASE, arena, &c) == NULL);          /* bad config */
    c.min_block = 64;
    bool untouched = true;
    for (size_t i = 0; i < need + 128; i++)
        untouched &= (unsigned char)meta[i] == 0xAB;
    CHECK(untouched); /* a refused init writes nothing */
    nbbs_t *b = nbbs_init(meta, need, FAKE_BASE, arena, &c);
    CHECK(b != NULL);
    CHECK_EQ(nbbs_validate(b), 0);
    free(meta);

    CHECK(nbbs_create(FAKE_BASE, 0, &c) == NULL);
    CHECK(nbbs_create(NULL, arena, &c) == NULL);
    nbbs_destroy(NULL); /* must not crash */
}

static void test_alloc_sizes(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 16, .max_order = 6, .layout = lay }; /* blocks of 16 .. 1024 bytes */
    size_t arena = 16 * 64 * 5;       /* five max-size blocks */
    nbbs_t *b = nbbs_create(FAKE_BASE, arena, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    CHECK(nbbs_alloc(NULL, 8) == NULL);
    CHECK(nbbs_alloc_order(NULL, 0) == NULL);
    CHECK(nbbs_alloc(b, 1025) == NULL);           /* above the max block */
    CHECK(nbbs_alloc(b, SIZE_MAX) == NULL);
    CHECK(nbbs_alloc_order(b, 7) == NULL);        /* above max_order */
    CHECK(nbbs_alloc_order(b, 1000) == NULL);

    size_t sizes[] = { 0, 1, 15, 16, 17, 32, 33, 100, 512, 513, 1024 };
    size_t want[] = { 16, 16, 16, 16, 32, 32, 64, 128, 512, 1024, 1024 };
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *p = nbbs_alloc(b, sizes[i]);
        CHECK(p != NULL);
        if (!p)
            continue;
        CHECK_EQ(nbbs_block_size(b, p), want[i]);
        CHECK(p >= FAKE_BASE && p + want[i] <= FAKE_BASE + arena);
        CHECK_EQ((size_t)(p - FAKE_BASE) % want[i], 0); /* aligned to its size */
        CHECK_EQ(nbbs_free(b, p), 0);
        CHECK_EQ(nbbs_block_size(b, p), 0);
    }
    for (unsigned o = 0; o <= 6; o++) {
        char *p = nbbs_alloc_order(b, o);
        CHECK(p != NULL);
        CHECK_EQ(nbbs_block_size(b, p), (size_t)16 << o);
        CHECK_EQ(nbbs_free(b, p), 0);
    }
    CHECK_EQ(nbbs_validate(b), 0);
    nbbs_destroy(b);
}

/* Every bad free returns NBBS_EINVAL and leaves the metadata byte-identical. */
static void test_bad_free(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 64, .max_order = 4, .layout = lay };
    size_t arena = 64 * 16 * 3;
    size_t need = nbbs_meta_size(arena, &c);
    char *meta = meta_alloc(need), *snap = malloc(need);
    nbbs_t *b = nbbs_init(meta, need, FAKE_BASE, arena, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    char *big = nbbs_alloc_order(b, 2);   /* 256 bytes */
    char *small = nbbs_alloc_order(b, 0); /* 64 bytes */
    CHECK(big && small);
    char *freed = nbbs_alloc_order(b, 0);
    CHECK_EQ(nbbs_free(b, freed), 0);
    char *never = FAKE_BASE;
    while (never == big || never == small || never == freed || nbbs_block_size(b, never) ||
           (never >= big && never < big + 256))
        never += 64;

    char *bad[] = {
        FAKE_BASE - 64,          /* below the arena */
        FAKE_BASE + arena,       /* just past it */
        FAKE_BASE + arena * 100, /* far past it */
        big + 64,                /* inside a live block */
        big + 1,                 /* not aligned to min_block */
        small + 8,               /* not aligned, inside */
        freed,                   /* already freed */
        never,                   /* never allocated */
    };
    memcpy(snap, meta, need);
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ(nbbs_free(b, bad[i]), NBBS_EINVAL);
        CHECK(memcmp(snap, meta, need) == 0);
        CHECK_EQ(nbbs_block_size(b, bad[i]), 0);
    }
    CHECK_EQ(nbbs_free(NULL, big), NBBS_EINVAL);
    CHECK_EQ(nbbs_free(b, NULL), 0);
    CHECK(memcmp(snap, meta, need) == 0);
    CHECK_EQ(nbbs_block_size(NULL, big), 0);
    CHECK_EQ(nbbs_validate(NULL), NBBS_EINVAL);
    CHECK_EQ(nbbs_block_size(b, NULL), 0);
    CHECK_EQ(nbbs_free(b, big), 0);
    CHECK_EQ(nbbs_free(b, big), NBBS_EINVAL); /* double free */
    CHECK_EQ(nbbs_free(b, small), 0);
    CHECK_EQ(nbbs_validate(b), 0);
    free(meta);
    free(snap);
}

/* Arena of 1000 min_blocks (not a power of two): exhaust every order, check
 * the tail is never handed out, free everything, validate. */
static void test_exhaustion(nbbs_layout_t lay)
{
    for (unsigned max_order = 0; max_order <= 9; max_order += 3) {
        nbbs_config_t c = { .min_block = 8, .max_order = max_order, .layout = lay };
        size_t n = 1000, arena = 8 * n;
        nbbs_t *b = nbbs_create(FAKE_BASE, arena, &c);
        CHECK(b != NULL);
        if (!b)
            continue;
        void **p = malloc((n + 1) * sizeof *p); /* the loop stores its final NULL too */
        for (unsigned o = 0; o <= max_order; o++) {
            size_t got = 0, bs = (size_t)8 << o;
            while ((p[got] = nbbs_alloc_order(b, o)) != NULL) {
                CHECK((char *)p[got] + bs <= FAKE_BASE + arena);
                got++;
            }
            CHECK_EQ(got, n >> o); /* every aligned block inside the arena */
            CHECK_EQ(nbbs_validate(b), 0);
            nbbs_stats_t s;
            nbbs_get_stats(b, &s);
            CHECK_EQ(s.used_bytes, got * bs);
            CHECK_EQ(s.blocks[o], got);
            CHECK_EQ(s.live_blocks, got);
            for (size_t i = 0; i < got; i++)
                CHECK_EQ(nbbs_free(b, p[i]), 0);
            CHECK_EQ(nbbs_validate(b), 0);
        }
        free(p);
        nbbs_destroy(b);
    }
}

static void test_stats_and_map(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 64, .max_order = 3, .layout = lay }; /* max block 512 */
    size_t arena = 64 * 20;           /* 2.5 max blocks */
    nbbs_t *b = nbbs_create(FAKE_BASE, arena, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    nbbs_stats_t s;
    nbbs_get_stats(b, &s);
    nbbs_get_stats(b, NULL);  /* no-ops, must not crash */
    nbbs_get_stats(NULL, &s);
    CHECK_EQ(s.arena_size, arena);
    CHECK_EQ(s.min_block, 64);
    CHECK_EQ(s.max_order, 3);
    CHECK_EQ(s.layout, lay);
    CHECK_EQ(s.meta_size, nbbs_meta_size(arena, &c));
    CHECK(s.tree_bytes + s.index_bytes <= s.meta_size);
    CHECK_EQ(s.used_bytes, 0);
    CHECK_EQ(s.free_bytes, arena);
    CHECK_EQ(s.largest_free, 512);

    uint8_t map[8];
    CHECK_EQ(nbbs_occupancy_map(b, 3, map, 3), 3);
    CHECK(map[0] == NBBS_MAP_FREE && map[1] == NBBS_MAP_FREE && map[2] == NBBS_MAP_PARTIAL);
    CHECK_EQ(nbbs_occupancy_map(b, 3, map, 2), NBBS_EINVAL); /* too short */
    CHECK_EQ(nbbs_occupancy_map(b, 4, map, 8), NBBS_EINVAL); /* order too high */
    CHECK_EQ(nbbs_occupancy_map(NULL, 0, map, 8), NBBS_EINVAL);
    CHECK_EQ(nbbs_occupancy_map(b, 0, NULL, 8), NBBS_EINVAL);

    /* Fill both whole trees, then one 64-byte block must come from the
     * partial third tree (4 blocks of 64 bytes, the rest is tail). */
    void *whole[2] = { nbbs_alloc_order(b, 3), nbbs_alloc_order(b, 3) };
    CHECK(whole[0] && whole[1]);
    CHECK(nbbs_alloc_order(b, 3) == NULL);
    void *bit = nbbs_alloc_order(b, 0);
    CHECK((char *)bit >= FAKE_BASE + 1024 && (char *)bit < FAKE_BASE + arena);
    nbbs_get_stats(b, &s);
    CHECK_EQ(s.used_bytes, 2 * 512 + 64);
    CHECK_EQ(s.free_bytes, arena - s.used_bytes);
    CHECK_EQ(s.blocks[3], 2);
    CHECK_EQ(s.blocks[0], 1);
    CHECK_EQ(s.live_blocks, 3);
    CHECK_EQ(s.largest_free, 128);
    CHECK_EQ(nbbs_occupancy_map(b, 3, map, 3), 3);
    CHECK(map[0] == NBBS_MAP_FULL && map[1] == NBBS_MAP_FULL && map[2] == NBBS_MAP_PARTIAL);
    uint8_t map0[20];
    CHECK_EQ(nbbs_occupancy_map(b, 0, map0, 20), 20);
    int used0 = 0;
    for (int i = 0; i < 20; i++)
        used0 += map0[i] == NBBS_MAP_FULL;
    CHECK_EQ(used0, 16 + 1);
    CHECK_EQ(map0[((char *)bit - FAKE_BASE) / 64], NBBS_MAP_FULL);
    CHECK_EQ(nbbs_free(b, bit), 0);
    CHECK_EQ(nbbs_free(b, whole[0]), 0);
    CHECK_EQ(nbbs_free(b, whole[1]), 0);
    nbbs_get_stats(b, &s);
    CHECK_EQ(s.used_bytes, 0);
    CHECK_EQ(s.largest_free, 512);
    nbbs_destroy(b);
}

/* The allocator never touches the arena: PROT_NONE memory and a range that
 * is not mapped at all both work. */
static void test_untouched_arena(nbbs_layout_t lay)
{
    size_t arena = (size_t)16 << 20;
    void *none = mmap(NULL, arena, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(none != MAP_FAILED);
    void *bases[] = { none, (void *)(uintptr_t)0x7e0000000000ull };
    for (int k = 0; k < 2; k++) {
        nbbs_config_t c = { .min_block = 4096, .max_order = 8, .layout = lay };
        nbbs_t *b = nbbs_create(bases[k], arena, &c);
        CHECK(b != NULL);
        if (!b)
            continue;
        void *p[64];
        for (int i = 0; i < 64; i++)
            CHECK((p[i] = nbbs_alloc(b, (size_t)4096 << (i % 8))) != NULL);
        for (int i = 0; i < 64; i++)
            CHECK_EQ(nbbs_free(b, p[i]), 0);
        CHECK_EQ(nbbs_validate(b), 0);
        nbbs_destroy(b);
    }
    munmap(none, arena);
}

/* max_order 0 (the default) on an arena of 2^62 bytes or more: the largest
 * order that both the arena and the 2^62-byte limit on a block allow, in
 * several trees, not a refused configuration (it was refused, though an
 * explicit max_order of 22 here was accepted). */
static void test_huge_default(nbbs_layout_t lay)
{
    CHECK(nbbs_meta_size((size_t)1 << 63, NULL) > 0);
    nbbs_config_t c = { .min_block = (size_t)1 << 40, .max_order = 0, .layout = lay };
    size_t arena = (size_t)1 << 63, max = (size_t)1 << 62;
    char *base = (char *)((uintptr_t)1 << 40); /* never mapped, never touched */
    nbbs_t *b = nbbs_create(base, arena, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    nbbs_stats_t s;
    nbbs_get_stats(b, &s);
    CHECK_EQ(s.max_order, 22);
    CHECK_EQ(s.largest_free, max);
    char *p = nbbs_alloc(b, max), *q = nbbs_alloc_order(b, 22);
    CHECK(p && q && p != q && (p == base || p == base + max) && (q == base || q == base + max));
    CHECK(nbbs_alloc(b, 1) == NULL);
    CHECK(nbbs_alloc(b, max + 1) == NULL);
    CHECK_EQ(nbbs_free(b, p), 0);
    CHECK_EQ(nbbs_free(b, q), 0);
    nbbs_get_stats(b, &s);
    CHECK_EQ(s.free_bytes, arena);
    CHECK_EQ(nbbs_validate(b), 0);
    nbbs_destroy(b);
}

/* The bound: no more than 4 bytes of metadata per min_block. */
static void test_metadata_size(nbbs_layout_t lay)
{
    struct { size_t arena, min_block; unsigned max_order; } cf[] = {
        { (size_t)64 << 30, 4096, 10 }, { (size_t)1 << 30, 8, 11 }, { (size_t)3 << 20, 64, 0 },
        { 4096 * 1000, 4096, 3 }, { 8 * 17, 8, 4 },
    };
    for (unsigned i = 0; i < sizeof cf / sizeof cf[0]; i++) {
        nbbs_config_t c = { .min_block = cf[i].min_block, .max_order = cf[i].max_order, .layout = lay };
        size_t m = nbbs_meta_size(cf[i].arena, &c), n = cf[i].arena / cf[i].min_block;
        CHECK(m > 0);
        if (n >= 1000) /* fixed header amortised: bound the per-block part */
            CHECK(m <= 4 * n + 1024);
    }
}

/* Placement keeps a fill point per order (docs/design.md, "Placement"): an
 * order-3 allocation does not move the order-0 allocations after it past the
 * frames it stepped over; they go on beside the last order-0 block. */
static void test_fill_points(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 4096, .max_order = 10, .layout = lay };
    nbbs_t *b = nbbs_create(FAKE_BASE, (size_t)4 << 20, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    char *a0 = nbbs_alloc_order(b, 0);
    char *a3 = nbbs_alloc_order(b, 3);
    char *b0 = nbbs_alloc_order(b, 0);
    CHECK(a0 && a3 && b0);
    CHECK(a3 == a0 + 8 * 4096);   /* the next aligned 8-frame block */
    CHECK(b0 == a0 + 4096);       /* the frame beside a0, not one past a3 */
    char *b3 = nbbs_alloc_order(b, 3);
    CHECK(b3 == a3 + 8 * 4096);   /* order 3 goes on from its own point */
    CHECK_EQ(nbbs_free(b, b0), 0);
    CHECK(nbbs_alloc_order(b, 0) == b0); /* a free moves its order's point */
    CHECK_EQ(nbbs_validate(b), 0);
    nbbs_destroy(b);
}

/* A context that frees the block at its own fill point (the block it
 * allocated last, as in LLFree's repeat) does not mark its group as having
 * holes (docs/design.md, "Hole visits and a context's own front"): another
 * context about to break a free group must not be sent there to share its
 * front. Context A (a thread: another stack, so another hint cell) takes
 * two frames and frees the second; context M (this thread) fills its own
 * group and then must break a free group, not take A's freed frame. */
struct front_arg { nbbs_t *b; char *a1, *a2; int rc; };

static void *front_thread(void *v)
{
    struct front_arg *f = v;
    f->a1 = nbbs_alloc_order(f->b, 0);
    f->a2 = nbbs_alloc_order(f->b, 0);
    f->rc = f->a2 ? nbbs_free(f->b, f->a2) : -1; /* checked by the main thread */
    return NULL;
}

static void test_own_front_no_hole(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 4096, .max_order = 10, .layout = lay };
    nbbs_t *b = nbbs_create(FAKE_BASE, (size_t)32 << 20, &c); /* 16 groups of 512 frames */
    CHECK(b != NULL);
    if (!b)
        return;
    struct front_arg f = { b, NULL, NULL, -1 };
    pthread_t th;
    int rc = pthread_create(&th, NULL, front_thread, &f);
    CHECK_EQ(rc, 0);
    if (rc) {
        nbbs_destroy(b);
        return;
    }
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK(f.a1 && f.a2 && f.a2 == f.a1 + 4096);
    CHECK_EQ(f.rc, 0);
    uint64_t ga = (uint64_t)(f.a2 - FAKE_BASE) >> 21, ng = 16;
    static char *got[520];
    unsigned n = 0;
    got[n++] = nbbs_alloc_order(b, 0);
    CHECK(got[0] != NULL);
    uint64_t gm = (uint64_t)(got[0] - FAKE_BASE) >> 21;
    /* Skipped if the two hint cells coincide (M starts at A's front) or if
     * A's group follows M's (a scan passes it by, and fills it rather than
     * break a free group when no group has holes). */
    if (gm != ga && (gm + 1) % ng != ga) {
        char *p;
        do {
            p = got[n++] = nbbs_alloc_order(b, 0);
            CHECK(p != NULL);
        } while (p && (uint64_t)(p - FAKE_BASE) >> 21 == gm && n < 520);
        CHECK(p != f.a2);
        CHECK(p && (uint64_t)(p - FAKE_BASE) >> 21 != ga);
    } else {
        printf("test_own_front_no_hole: skipped (groups %llu, %llu)\n", (unsigned long long)gm,
               (unsigned long long)ga);
    }
    for (unsigned i = 0; i < n; i++)
        if (got[i])
            CHECK_EQ(nbbs_free(b, got[i]), 0);
    CHECK_EQ(nbbs_free(b, f.a1), 0);
    CHECK_EQ(nbbs_validate(b), 0);
    nbbs_destroy(b);
}

/* nbbs_alloc_at: exactly the block named, if free. Every bad argument is
 * NBBS_EINVAL and every block not free NBBS_EBUSY, both with the metadata
 * byte-identical; a success is a live block like any other, and pieces taken
 * from a free range make a block of a size that is not a power of two. */
static void test_alloc_at(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 64, .max_order = 4, .layout = lay };
    size_t arena = 64 * 16 * 2 + 64 * 4; /* two trees and a partial one of 4 leaves */
    size_t need = nbbs_meta_size(arena, &c);
    char *meta = meta_alloc(need), *snap = malloc(need);
    nbbs_t *b = nbbs_init(meta, need, FAKE_BASE, arena, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    char *live = FAKE_BASE + 64 * 4; /* order 2 at leaf 4 */
    CHECK_EQ(nbbs_alloc_at(b, live, 2), 0);
    CHECK_EQ(nbbs_block_size(b, live), 256);
    CHECK_EQ(nbbs_validate(b), 0);

    memcpy(snap, meta, need);
    struct { char *a; unsigned o; int rc; } cases[] = {
        { FAKE_BASE - 64, 0, NBBS_EINVAL },          /* below the arena */
        { FAKE_BASE + arena, 0, NBBS_EINVAL },       /* just past it */
        { FAKE_BASE + 1, 0, NBBS_EINVAL },           /* not aligned to min_block */
        { FAKE_BASE + 64, 1, NBBS_EINVAL },          /* not aligned to the block's size */
        { FAKE_BASE + 64 * 32, 3, NBBS_EINVAL },     /* reaches past the end of the partial tree */
        { FAKE_BASE + 64 * 32, 4, NBBS_EINVAL },     /* the same, a whole tree's size */
        { FAKE_BASE, 5, NBBS_EINVAL },               /* order > max_order */
        { live, 2, NBBS_EBUSY },                     /* the live block itself */
        { live + 64, 0, NBBS_EBUSY },                /* inside it */
        { live, 1, NBBS_EBUSY },                     /* its first half */
        { FAKE_BASE, 3, NBBS_EBUSY },                /* a block around it */
        { FAKE_BASE, 4, NBBS_EBUSY },                /* its tree */
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ(nbbs_alloc_at(b, cases[i].a, cases[i].o), cases[i].rc);
        CHECK(memcmp(snap, meta, need) == 0);
    }
    CHECK_EQ(nbbs_alloc_at(NULL, FAKE_BASE, 0), NBBS_EINVAL);
    CHECK(memcmp(snap, meta, need) == 0);

    /* The last whole block of the partial tree is allocatable. */
    CHECK_EQ(nbbs_alloc_at(b, FAKE_BASE + 64 * 32, 2), 0);
    CHECK_EQ(nbbs_free(b, FAKE_BASE + 64 * 32), 0);

    /* Pieces of a free range (5 x 64 bytes of an order-3 block): the normal
     * search finds the range, it is freed, its pieces are taken in place. */
    char *r = nbbs_alloc_order(b, 3);
    CHECK(r != NULL);
    CHECK_EQ(nbbs_free(b, r), 0);
    CHECK_EQ(nbbs_alloc_at(b, r, 2), 0);
    CHECK_EQ(nbbs_alloc_at(b, r + 256, 0), 0);
    CHECK_EQ(nbbs_validate(b), 0);
    nbbs_stats_t st;
    nbbs_get_stats(b, &st);
    CHECK_EQ(st.used_bytes, 256 + 256 + 64);
    CHECK_EQ(st.live_blocks, 3);
    /* The rest of the range is free for anyone: 3 blocks of order 0 fit
     * there, and nothing handed out overlaps the pieces. */
    CHECK_EQ(nbbs_alloc_at(b, r + 320, 0), 0);
    CHECK_EQ(nbbs_alloc_at(b, r + 384, 1), 0);
    for (char *q; (q = nbbs_alloc_order(b, 0)) != NULL;)
        CHECK(q < r || q >= r + 512);
    CHECK_EQ(nbbs_validate(b), 0);
    CHECK_EQ(nbbs_free(b, r + 384), 0);
    CHECK_EQ(nbbs_alloc_at(b, r + 384, 1), 0); /* a block just freed is free again */
    CHECK_EQ(nbbs_free(b, r + 384), 0);
    CHECK_EQ(nbbs_free(b, r + 384), NBBS_EINVAL); /* and freed once only */
    free(meta);
    free(snap);

    /* A block held by a frame cache is busy (only nbbs_alloc_order reclaims). */
    nbbs_t *b2 = nbbs_create(FAKE_BASE, 64 * 16, &c);
    nbbs_cache_config_t cc = { 1, 1, 1 };
    size_t cs = nbbs_cache_size(&cc);
    void *cm = meta_alloc(cs);
    nbbs_cache_t *cache = nbbs_cache_init(cm, cs, b2, &cc);
    CHECK(b2 && cache);
    if (b2 && cache) {
        char *p = nbbs_cache_alloc(cache, 0);
        CHECK(p != NULL);
        CHECK_EQ(nbbs_cache_free(cache, p), 0);
        CHECK_EQ(nbbs_alloc_at(b2, p, 0), NBBS_EBUSY);
        nbbs_cache_drain(cache);
        CHECK_EQ(nbbs_alloc_at(b2, p, 0), 0);
        CHECK_EQ(nbbs_free(b2, p), 0);
        CHECK_EQ(nbbs_validate(b2), 0);
    }
    nbbs_destroy(b2);
    free(cm);
}

/* One free block among busy ones is found wherever it lies: after a fill of
 * one order, each block in turn at the trees' and groups' edges, the arena's
 * ends and a partial last tree is freed and must be what the next allocation
 * returns (the scan starts at the previous one, so it also wraps). At the
 * orders where a candidate is its word's only one (every TREE order; BUNCH
 * orders 3 and 7) the scan passes runs of busy candidates word by word
 * (FN(busy_run) in nbbs_search.inc), up to those edges. */
static void test_last_free(nbbs_layout_t lay)
{
    static const unsigned orders[] = { 0, 3, 7, 9 };
    nbbs_config_t c = { .min_block = 4096, .max_order = 10, .layout = lay };
    size_t arena = (size_t)14 << 20; /* 3.5 trees of 4 MiB, groups of 2 MiB */
    nbbs_t *b = nbbs_create(FAKE_BASE, arena, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    for (unsigned oi = 0; oi < sizeof orders / sizeof orders[0]; oi++) {
        unsigned o = orders[oi];
        size_t n = arena >> (12 + o), got = 0, tree = (size_t)1024 >> o, group = (size_t)512 >> o;
        char **p = malloc((n + 1) * sizeof *p);
        while (got <= n && (p[got] = nbbs_alloc_order(b, o)) != NULL)
            got++;
        CHECK_EQ(got, n);
        size_t at[] = { 0, 1, group - 1, group, group + 1, tree - 1, tree, tree + 1, 3 * tree - 1, 3 * tree,
                        3 * tree + 1, n / 2, n - 2, n - 1, 0, n - 1, tree, 0, tree };
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
            size_t k = at[i] < n ? at[i] : n - 1, j = 0;
            char *want = FAKE_BASE + (k << (12 + o));
            while (j < got && p[j] != want)
                j++;
            CHECK(j < got);
            if (j == got)
                break;
            CHECK_EQ(nbbs_free(b, want), 0);
            p[j] = nbbs_alloc_order(b, o);
            CHECK(p[j] == want);
            CHECK(nbbs_alloc_order(b, o) == NULL);
        }
        CHECK_EQ(nbbs_validate(b), 0);
        for (size_t i = 0; i < got; i++)
            CHECK_EQ(nbbs_free(b, p[i]), 0);
        free(p);
    }
    nbbs_destroy(b);
}

/* The group free counts (docs/design.md, "Group free counts"): a block of
 * a counted order leaves its group's count when allocated (by a search or
 * by name) and comes back when freed; larger and smaller blocks are not
 * counted; nbbs_validate rejects a count that disagrees (-4). */
static void test_group_counts(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 4096, .max_order = 6, .layout = lay, .group_order = 5 };
    nbbs_t *b = nbbs_create(NBBS_TU_FAKE_BASE, (size_t)4096 << 7, &c);
    CHECK(b != NULL && b->gfree == NULL);                /* no counts unless asked for */
    nbbs_destroy(b);
    c.flags = NBBS_GROUP_COUNTS;
    b = nbbs_create(NBBS_TU_FAKE_BASE, (size_t)4096 << 7, &c); /* 2 trees, 4 groups of 32 leaves */
    CHECK(b != NULL);
    if (!b)
        return;
    const uint32_t full = 32;
    char *p3 = nbbs_alloc_order(b, 3), *p0 = nbbs_alloc_order(b, 0), *p5 = nbbs_alloc_order(b, 5);
    CHECK(p3 && p0 && p5);
    uint64_t g3 = (uint64_t)(p3 - NBBS_TU_FAKE_BASE) / 4096 >> 5;
    uint64_t sum = 0;
    for (uint64_t g = 0; g < 4; g++)
        sum += b->gfree[g];
    CHECK_EQ(b->gfree[g3], full - 8);   /* order 3: counted */
    CHECK_EQ(sum, 4 * full - 8);        /* order 0 (below 3) and 5 (a group) are not */
    CHECK_EQ(nbbs_validate(b), 0);
    b->gfree[g3] += 1;                  /* a count that disagrees */
    CHECK_EQ(nbbs_validate(b), -4);
    b->gfree[g3] -= 1;
    CHECK_EQ(nbbs_validate(b), 0);
    CHECK_EQ(nbbs_free(b, p3), 0);
    CHECK_EQ(b->gfree[g3], full);
    /* By name: the same count. */
    CHECK_EQ(nbbs_alloc_at(b, p3, 3), 0);
    CHECK_EQ(b->gfree[g3], full - 8);
    CHECK_EQ(nbbs_validate(b), 0);
    /* A group whose count is below a block of order 4 is passed by, and
     * the search still finds one elsewhere: three order-3 blocks in group
     * g3 (8 leaves left), then one of order 4. */
    CHECK_EQ(nbbs_free(b, p3), 0);
    CHECK_EQ(nbbs_free(b, p0), 0);
    CHECK_EQ(nbbs_free(b, p5), 0);
    char *base = NBBS_TU_FAKE_BASE + (g3 << 5) * 4096;
    CHECK_EQ(nbbs_alloc_at(b, base, 3), 0);
    CHECK_EQ(nbbs_alloc_at(b, base + 8 * 4096, 3), 0);
    CHECK_EQ(nbbs_alloc_at(b, base + 16 * 4096, 3), 0);
    CHECK_EQ(b->gfree[g3], full - 24);
    char *p4 = nbbs_alloc_order(b, 4);
    CHECK(p4 != NULL && (uint64_t)(p4 - NBBS_TU_FAKE_BASE) / 4096 >> 5 != g3);
    CHECK_EQ(nbbs_validate(b), 0);
    CHECK_EQ(nbbs_free(b, p4), 0);
    for (uint64_t o = 0; o < 24; o += 8)
        CHECK_EQ(nbbs_free(b, base + o * 4096), 0);
    /* A frame cache's balance: counts high by it while the cache works
     * (nbbs_validate adds it back), exact again after a drain. */
    nbbs_cache_config_t cc = { 1, 16, 64 };
    size_t csz = nbbs_cache_size(&cc);
    void *cm = nbbs_tu_aligned_alloc(NBBS_CACHE_ALIGN, csz);
    nbbs_cache_t *cache = cm ? nbbs_cache_init(cm, csz, b, &cc) : NULL;
    CHECK(cache != NULL);
    if (cache) {
        void *f[100];
        for (unsigned i = 0; i < 100; i++)
            CHECK((f[i] = nbbs_cache_alloc(cache, 0)) != NULL);
        CHECK_EQ(nbbs_validate(b), 0);
        for (unsigned i = 0; i < 100; i++)
            CHECK_EQ(nbbs_cache_free(cache, f[i]), 0);
        CHECK_EQ(nbbs_validate(b), 0);
        nbbs_cache_drain(cache);
        CHECK_EQ(cache->cbal, 0);
        for (uint64_t g = 0; g < 4; g++)
            CHECK_EQ(b->gfree[g], full);
        CHECK_EQ(nbbs_validate(b), 0);
    }
    free(cm);
    nbbs_destroy(b);
}

int main(void)
{
    for (unsigned i = 0; i < 2; i++) {
        nbbs_layout_t lay = layouts[i];
        test_config(lay);
        test_init_errors(lay);
        test_alloc_sizes(lay);
        test_bad_free(lay);
        test_exhaustion(lay);
        test_stats_and_map(lay);
        test_untouched_arena(lay);
        test_metadata_size(lay);
        test_huge_default(lay);
        test_fill_points(lay);
        test_alloc_at(lay);
        test_own_front_no_hole(lay);
        test_last_free(lay);
        test_group_counts(lay);
    }
    TEST_MAIN_END();
}
