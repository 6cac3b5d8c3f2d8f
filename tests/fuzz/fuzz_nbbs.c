/*
 * fuzz_nbbs.c - the back-end's API driven by a byte string, against a
 * sequential buddy model.
 *
 * Input: a configuration header (layout, min_block, arena size, max_order,
 * and sometimes a deliberately bad argument), then one operation per 3
 * bytes: alloc by size or by order, free of a live block, or a bad free
 * (NULL, interior, outside, misaligned, double), block_size, statistics,
 * occupancy map. After every operation nbbs_validate must hold, and each
 * result must be exactly what the model predicts: an allocation fails iff no
 * aligned free block of that order exists, a free succeeds iff the pointer
 * starts a live block, and a refused free leaves the metadata byte-identical.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbbs.h"

#define META_MAX (1u << 20)
#define MAX_LEAVES 1024u
#define MAX_OPS 400 /* per input: validate after each op costs O(tree) */
#define MAX_LIVE 256

static _Alignas(NBBS_META_ALIGN) unsigned char meta[META_MAX + NBBS_META_ALIGN];
static unsigned char before[META_MAX];

typedef struct model {
    uintptr_t base;
    size_t    min_block, arena;
    unsigned  max_order;
    uint64_t  nleaves;
    uint8_t   used[MAX_LEAVES]; /* leaf taken by a live block */
    uintptr_t live[MAX_LIVE];
    unsigned  live_order[MAX_LIVE];
    unsigned  nlive;
    uintptr_t dead[16]; /* recently freed, for double frees */
    unsigned  ndead;
} model_t;

static model_t m;

#define FAIL(what) fuzz_fail(what, __LINE__)
static void fuzz_fail(const char *what, int line)
{
    fprintf(stderr, "fuzz_nbbs.c:%d: %s\n", line, what);
    __builtin_trap(); /* libFuzzer saves the input; the replayer stops here */
}

static unsigned log2u(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

/* First free aligned block of this order in the model, or -1. Blocks must lie
 * inside the arena (the tail of a partial tree is never handed out). */
static int64_t model_free_block(unsigned order)
{
    uint64_t len = UINT64_C(1) << order;
    for (uint64_t s = 0; s + len <= m.nleaves; s += len) {
        uint64_t i = s;
        while (i < s + len && !m.used[i])
            i++;
        if (i == s + len)
            return (int64_t)s;
    }
    return -1;
}

static int find_live(uintptr_t p)
{
    for (unsigned i = 0; i < m.nlive; i++)
        if (m.live[i] == p)
            return (int)i;
    return -1;
}

static void mark(uintptr_t p, unsigned order, uint8_t v)
{
    uint64_t leaf = (p - m.base) / m.min_block;
    memset(&m.used[leaf], v, (size_t)1 << order);
}

static void check_alloc(nbbs_t *b, void *p, unsigned order)
{
    int64_t want = model_free_block(order);
    if (!p) {
        if (want >= 0)
            FAIL("alloc failed with a free block");
        return;
    }
    uintptr_t a = (uintptr_t)p;
    size_t size = m.min_block << order;
    if (a < m.base || a - m.base + size > m.arena || (a - m.base) % size)
        FAIL("misplaced block");
    uint64_t leaf = (a - m.base) / m.min_block;
    for (uint64_t i = leaf; i < leaf + ((uint64_t)1 << order); i++)
        if (m.used[i])
            FAIL("S1: overlap");
    if (nbbs_block_size(b, p) != size)
        FAIL("block_size of a new block");
    if (m.nlive == MAX_LIVE) {
        if (nbbs_free(b, p) != 0)
            FAIL("free");
        return;
    }
    mark(a, order, 1);
    m.live[m.nlive] = a, m.live_order[m.nlive++] = order;
}

static void check_stats(const nbbs_t *b)
{
    nbbs_stats_t s;
    size_t used = 0, blocks[NBBS_MAX_ORDER + 1] = { 0 };
    nbbs_get_stats(b, &s);
    for (unsigned i = 0; i < m.nlive; i++)
        used += m.min_block << m.live_order[i], blocks[m.live_order[i]]++;
    if (s.used_bytes != used || s.live_blocks != m.nlive || s.free_bytes != m.arena - used)
        FAIL("stats");
    for (unsigned o = 0; o <= m.max_order; o++)
        if (s.blocks[o] != blocks[o])
            FAIL("stats per order");
    size_t largest = 0;
    for (unsigned o = m.max_order + 1; o-- > 0;)
        if (model_free_block(o) >= 0) {
            largest = m.min_block << o;
            break;
        }
    if (s.largest_free != largest)
        FAIL("largest_free");
}

static void check_map(const nbbs_t *b, unsigned order)
{
    static uint8_t map[MAX_LEAVES];
    uint64_t n = ((m.nleaves - 1) >> order) + 1;
    if (nbbs_occupancy_map(b, order, map, n - 1) != NBBS_EINVAL)
        FAIL("map accepted a short buffer");
    if (nbbs_occupancy_map(b, order, map, sizeof map) != (int)n)
        FAIL("map count");
    for (uint64_t e = 0; e < n; e++) {
        uint64_t lo = e << order, hi = lo + ((uint64_t)1 << order), u = 0;
        for (uint64_t i = lo; i < hi; i++)
            u += i >= m.nleaves || m.used[i];
        uint8_t want = u == 0 ? NBBS_MAP_FREE : u == hi - lo ? NBBS_MAP_FULL : NBBS_MAP_PARTIAL;
        if (map[e] != want)
            FAIL("map entry");
    }
}

/* A free that must be refused: NBBS_EINVAL and not one metadata byte changed. */
static void bad_free(nbbs_t *b, uintptr_t p, size_t meta_size)
{
    memcpy(before, meta, meta_size);
    if (nbbs_free(b, (void *)p) != NBBS_EINVAL)
        FAIL("bad free accepted");
    if (memcmp(before, meta, meta_size))
        FAIL("bad free changed the metadata");
}

/* The configuration: 6 bytes. Returns the instance or NULL (input rejected). */
static nbbs_t *configure(const uint8_t *d, size_t *meta_size)
{
    nbbs_config_t c = { 0 };
    c.layout = (d[0] & 1) ? NBBS_LAYOUT_BUNCH : NBBS_LAYOUT_TREE;
    unsigned shift = 3 + d[1] % 10; /* 8 .. 4096 */
    c.min_block = (size_t)1 << shift;
    uint64_t leaves = 1 + ((uint64_t)d[2] | (uint64_t)(d[3] & 0x03) << 8) % MAX_LEAVES;
    c.max_order = d[4] % (log2u(leaves) + 1);
    c.group_order = (unsigned)(d[0] >> 1) % (c.max_order + 1); /* 0: the default */
    c.flags = d[1] >= 128 ? NBBS_GROUP_COUNTS : 0;
    size_t arena = (size_t)leaves << shift;
    uintptr_t base = (uintptr_t)1 << 40;

    /* Sometimes one bad argument: the call must refuse it. */
    unsigned bad = d[5] % 16;
    if (bad == 11 && c.max_order > 0)
        bad = 6; /* a group larger than the max block (below) */
    if (bad >= 1 && bad <= 9) {
        nbbs_config_t bc = c;
        size_t barena = arena, bsize;
        void *bmeta = meta;
        uintptr_t bbase = base;
        switch (bad) {
        case 1: bc.min_block = c.min_block * 3; break;         /* not a power of two */
        case 2: bc.min_block = 4; break;                        /* too small */
        case 3: barena = arena + 1; break;                      /* not a multiple */
        case 4: barena = 0; break;
        case 5: bc.layout = (nbbs_layout_t)(2 + d[0] % 2); break;
        case 6:
            if (d[5] % 16 == 11)
                bc.group_order = c.max_order + 1 + d[4] % 4; /* larger than the max block */
            else
                bc.max_order = log2u(leaves) + 1 + d[4] % 4;
            break;
        case 7: bbase = base + 8 * (c.min_block > 8); break;    /* misaligned base */
        case 8: bbase = UINTPTR_MAX - arena / 2 + 1; bbase &= ~(uintptr_t)(c.min_block - 1); break;
        case 9: bmeta = meta + 8; break;                        /* misaligned metadata */
        }
        bsize = nbbs_meta_size(barena, &bc);
        if (bad <= 6 && bsize != 0)
            FAIL("meta_size accepted a bad configuration");
        if (nbbs_init(bmeta, META_MAX, (void *)bbase, barena, &bc) != NULL &&
            !(bad == 7 && c.min_block == 8) && !(bad == 8 && bbase + arena - 1 >= bbase))
            FAIL("init accepted a bad argument");
        return NULL;
    }
    *meta_size = nbbs_meta_size(arena, &c);
    if (*meta_size == 0 || *meta_size > META_MAX)
        FAIL("meta_size of a good configuration");
    if (bad == 10 && nbbs_init(meta, *meta_size - 1, (void *)base, arena, &c) != NULL)
        FAIL("init accepted too little metadata");
    nbbs_t *b = nbbs_init(meta, *meta_size, (void *)base, arena, &c);
    if (!b)
        FAIL("init refused a good configuration");
    memset(&m, 0, sizeof m);
    m.base = base, m.min_block = c.min_block, m.arena = arena;
    m.max_order = c.max_order ? c.max_order : log2u(leaves); /* 0: as large as fits */
    m.nleaves = leaves;
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    size_t meta_size = 0;
    if (n < 6)
        return 0;
    nbbs_t *b = configure(d, &meta_size);
    if (!b)
        return 0;
    if (nbbs_validate(b) != 0)
        FAIL("validate after init");
    for (size_t i = 6; i + 3 <= n && i < 6 + 3 * MAX_OPS; i += 3) {
        unsigned op = d[i] % 10, x = d[i + 1] | (unsigned)d[i + 2] << 8;
        switch (op) {
        case 0: case 1: case 2: { /* alloc_order */
            unsigned order = x % (m.max_order + 2);
            void *p = nbbs_alloc_order(b, order);
            if (order > m.max_order) {
                if (p)
                    FAIL("alloc_order above max_order");
            } else {
                check_alloc(b, p, order);
            }
            break;
        }
        case 3: { /* alloc by size, 0 .. a bit above the max block */
            size_t max = m.min_block << m.max_order;
            size_t size = (size_t)x * (max / 32768 + 1) % (max + max / 4 + 2);
            void *p = nbbs_alloc(b, size);
            if (size > max) {
                if (p)
                    FAIL("alloc above the max block");
                break;
            }
            unsigned order = 0;
            while ((m.min_block << order) < size)
                order++;
            check_alloc(b, p, order);
            break;
        }
        case 4: case 5: case 6: { /* free a live block */
            if (!m.nlive)
                break;
            unsigned k = x % m.nlive;
            uintptr_t p = m.live[k];
            if (nbbs_free(b, (void *)p) != 0)
                FAIL("S2: free of a live block refused");
            mark(p, m.live_order[k], 0);
            m.live[k] = m.live[--m.nlive], m.live_order[k] = m.live_order[m.nlive];
            m.dead[m.ndead++ % 16] = p;
            break;
        }
        case 7: { /* a bad free */
            uintptr_t p;
            switch (x % 6) {
            case 0: p = m.ndead ? m.dead[x % (m.ndead < 16 ? m.ndead : 16)] : m.base; break;
            case 1: p = m.nlive ? m.live[x % m.nlive] + m.min_block * (1 + x % 3) : m.base + 1; break;
            case 2: p = m.base + m.arena + m.min_block * (x % 4); break;
            case 3: p = m.base - m.min_block * (1 + x % 4); break;
            case 4: p = (m.base + x % m.arena) | 1; break;
            default: p = (uintptr_t)x * 4099; break;
            }
            int live = find_live(p);
            if (live >= 0) /* a "double free" whose address was reused: a good free */
                break;
            bad_free(b, p, meta_size);
            break;
        }
        case 8: { /* block_size of anything */
            uintptr_t p = m.base + (uintptr_t)(x % (m.nleaves + 2)) * m.min_block;
            int live = find_live(p);
            size_t want = live >= 0 ? m.min_block << m.live_order[live] : 0;
            if (nbbs_block_size(b, (void *)p) != want)
                FAIL("block_size");
            break;
        }
        default:
            check_stats(b);
            check_map(b, x % (m.max_order + 1));
            if (nbbs_occupancy_map(b, m.max_order + 1, before, 1) != NBBS_EINVAL)
                FAIL("map accepted a bad order");
            break;
        }
        if (nbbs_validate(b) != 0)
            FAIL("validate");
    }
    /* Everything back: the tree must be all-free, every max block allocatable. */
    while (m.nlive) {
        if (nbbs_free(b, (void *)m.live[--m.nlive]) != 0)
            FAIL("final free");
    }
    if (nbbs_free(b, NULL) != 0)
        FAIL("free(NULL)");
    memset(m.used, 0, sizeof m.used);
    if (nbbs_validate(b) != 0)
        FAIL("validate after freeing everything");
    uint64_t full = m.nleaves >> m.max_order;
    for (uint64_t t = 0; t < full; t++)
        if (!nbbs_alloc_order(b, m.max_order))
            FAIL("a max-size block lost after freeing everything");
    return 0;
}
