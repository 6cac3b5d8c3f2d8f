/*
 * test_diff.c - sequential differential test against a reference buddy
 * model. Long random sequences of alloc/free of random orders (plus bad
 * frees) on random geometries, both layouts. After every operation:
 *   - an allocation fails exactly when the model has no free aligned block of
 *     that order inside the arena, and a success returns such a block;
 *   - a free succeeds exactly for live block starts.
 * Every so often: nbbs_validate (exact node states and group free counts), statistics and the
 * occupancy map against the model.
 *
 * Usage: test_diff [seeds] [ops-per-seed]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nbbs.h"
#include "support/nbbs_testutil.h"

#define FAKE_BASE NBBS_TU_FAKE_BASE

typedef struct {
    unsigned  max_order;
    uint64_t  nleaves, span;       /* span = ntrees << max_order */
    uint64_t *used[NBBS_MAX_ORDER + 1]; /* used leaves in each aligned block of order k */
    uint64_t  nfree[NBBS_MAX_ORDER + 1];/* blocks of order k with nothing used */
} model_t;

static void model_init(model_t *m, uint64_t nleaves, unsigned max_order)
{
    m->max_order = max_order;
    m->nleaves = nleaves;
    m->span = ((nleaves + (1ull << max_order) - 1) >> max_order) << max_order;
    for (unsigned k = 0; k <= max_order; k++) {
        uint64_t n = m->span >> k;
        m->used[k] = calloc(n, sizeof(uint64_t));
        m->nfree[k] = 0;
        for (uint64_t j = 0; j < n; j++) {
            uint64_t lo = j << k, hi = (j + 1) << k;
            m->used[k][j] = hi <= nleaves ? 0 : lo >= nleaves ? (1ull << k) : hi - nleaves;
            m->nfree[k] += m->used[k][j] == 0;
        }
    }
}

static void model_free_all(model_t *m)
{
    for (unsigned k = 0; k <= m->max_order; k++)
        free(m->used[k]);
}

/* Add (+1) or remove (-1) the block of order o at leaf `leaf`. */
static void model_update(model_t *m, uint64_t leaf, unsigned o, int dir)
{
    for (unsigned k = 0; k <= m->max_order; k++) {
        if (k >= o) {
            uint64_t *u = &m->used[k][leaf >> k];
            bool was_free = *u == 0;
            *u += dir > 0 ? (1ull << o) : -(1ull << o);
            m->nfree[k] += (*u == 0) - was_free;
        } else {
            uint64_t n = 1ull << (o - k), j0 = leaf >> k;
            for (uint64_t j = 0; j < n; j++)
                m->used[k][j0 + j] = dir > 0 ? (1ull << k) : 0;
            m->nfree[k] += dir > 0 ? -n : n;
        }
    }
}

typedef struct { char *p; unsigned order; } live_t;

static void run_seed(unsigned long long seed, long ops)
{
    uint64_t rs = seed * 0x9E3779B97F4A7C15ull + 1;
    nbbs_layout_t lay = (nbbs_tu_rand(&rs) & 1) ? NBBS_LAYOUT_BUNCH : NBBS_LAYOUT_TREE;
    size_t min_block = (size_t)8 << (nbbs_tu_rand(&rs) % 10);
    uint64_t nleaves = 1 + nbbs_tu_rand(&rs) % 3000;
    unsigned fit = 63 - (unsigned)__builtin_clzll(nleaves);
    unsigned max_order = (unsigned)(nbbs_tu_rand(&rs) % (fit + 1));
    nbbs_config_t c = { .min_block = min_block, .max_order = max_order, .layout = lay };
    if (max_order == 0)
        max_order = fit; /* 0 means as large as the arena allows */
    /* Groups of any order (0: the default), with or without group free
     * counts: with counts and groups of order 4 and up, scans pass groups
     * by, and a pass-by that skipped a free block would show here as a
     * wrong failure. */
    c.group_order = (unsigned)(nbbs_tu_rand(&rs) % (max_order + 1));
    c.flags = nbbs_tu_rand(&rs) & 1 ? NBBS_GROUP_COUNTS : 0;
    size_t arena = (size_t)nleaves * min_block;
    nbbs_t *b = nbbs_create(FAKE_BASE, arena, &c);
    CHECK(b != NULL);
    if (!b)
        return;
    nbbs_stats_t st;
    nbbs_get_stats(b, &st);
    CHECK_EQ(st.max_order, max_order);

    model_t m;
    model_init(&m, nleaves, max_order);
    live_t *live = malloc(nleaves * sizeof *live);
    size_t nlive = 0, used = 0;
    uint8_t *map = malloc(nleaves);
    int errors_before = check_failed;

    for (long i = 0; i < ops && check_failed == errors_before; i++) {
        uint64_t r = nbbs_tu_rand(&rs);
        if (nlive == 0 || r % 100 < 55) {
            /* Small orders more often, like real workloads. */
            unsigned o = (unsigned)(nbbs_tu_rand(&rs) % (max_order + 1));
            if (nbbs_tu_rand(&rs) & 1)
                o = o / 2;
            char *p = (nbbs_tu_rand(&rs) & 3) ? nbbs_alloc_order(b, o)
                                          : nbbs_alloc(b, (min_block << o) - (nbbs_tu_rand(&rs) % min_block));
            if (!p) {
                CHECK_EQ(m.nfree[o], 0); /* fails exactly when nothing is free */
                continue;
            }
            uint64_t off = (uint64_t)(p - FAKE_BASE);
            CHECK(p >= FAKE_BASE && off + (min_block << o) <= arena);
            CHECK_EQ(off % (min_block << o), 0);
            uint64_t leaf = off / min_block;
            CHECK_EQ(m.used[o][leaf >> o], 0); /* the model had it free */
            model_update(&m, leaf, o, +1);
            live[nlive++] = (live_t){ p, o };
            used += min_block << o;
        } else if (r % 100 < 95) {
            size_t k = nbbs_tu_rand(&rs) % nlive;
            live_t v = live[k];
            live[k] = live[--nlive];
            CHECK_EQ(nbbs_block_size(b, v.p), min_block << v.order);
            CHECK_EQ(nbbs_free(b, v.p), 0);
            CHECK_EQ(nbbs_free(b, v.p), NBBS_EINVAL); /* second free refused */
            model_update(&m, (uint64_t)(v.p - FAKE_BASE) / min_block, v.order, -1);
            used -= min_block << v.order;
        } else {
            /* A bad free: an interior or unaligned address of a live block,
             * or a free leaf. */
            live_t v = live[nbbs_tu_rand(&rs) % nlive];
            char *bad = v.order ? v.p + (min_block << (nbbs_tu_rand(&rs) % v.order)) : v.p + 1;
            CHECK_EQ(nbbs_free(b, bad), NBBS_EINVAL);
        }
        if (i % 512 == 0 || i == ops - 1) {
            CHECK_EQ(nbbs_validate(b), 0);
            nbbs_get_stats(b, &st);
            CHECK_EQ(st.used_bytes, used);
            CHECK_EQ(st.live_blocks, nlive);
            size_t largest = 0;
            for (unsigned k = 0; k <= max_order; k++)
                if (m.nfree[k])
                    largest = min_block << k;
            CHECK_EQ(st.largest_free, largest);
            unsigned o = (unsigned)(nbbs_tu_rand(&rs) % (max_order + 1));
            uint64_t entries = (nleaves + (1ull << o) - 1) >> o;
            CHECK_EQ(nbbs_occupancy_map(b, o, map, nleaves), (long long)entries);
            for (uint64_t j = 0; j < entries; j++) {
                uint64_t u = m.used[o][j];
                int want = u == 0 ? NBBS_MAP_FREE : u == (1ull << o) ? NBBS_MAP_FULL : NBBS_MAP_PARTIAL;
                if (map[j] != want) {
                    CHECK_EQ(map[j], want);
                    break;
                }
            }
        }
    }
    while (nlive)
        CHECK_EQ(nbbs_free(b, live[--nlive].p), 0);
    CHECK_EQ(nbbs_validate(b), 0);
    /* Exact coalescing: every max-size block is allocatable again. */
    uint64_t whole = 0;
    while (nbbs_alloc_order(b, max_order))
        whole++;
    CHECK_EQ(whole, nleaves >> max_order);
    if (check_failed != errors_before)
        fprintf(stderr, "seed %llu: layout %d min_block %zu leaves %llu max_order %u\n", seed, lay,
                min_block, (unsigned long long)nleaves, max_order);
    model_free_all(&m);
    free(live);
    free(map);
    nbbs_destroy(b);
}

int main(int argc, char **argv)
{
    unsigned long long seeds = argc > 1 ? strtoull(argv[1], NULL, 0) : 400;
    long ops = argc > 2 ? strtol(argv[2], NULL, 0) : 20000;
    for (unsigned long long s = 1; s <= seeds; s++)
        run_seed(s, ops);
    TEST_MAIN_END();
}
