/*
 * test_split_race.c - splits of cached medium blocks racing with other
 * allocations (medium.c, split; arena.c, nbm__block_take_next, check_fresh).
 *
 * Under NBM_LIMIT_MB (set by ctest) the address space runs out at the start
 * (1 MiB blocks until malloc fails), so from then on a request that takes a
 * larger cached medium block splits it: the block goes back to the back-end
 * marked NBM_PAGE_DIRTY and is taken again in parts, while other threads may
 * take some of it. Threads of two kinds run together for --seconds:
 *  - splitters free blocks of 600 KiB .. 2 MiB (to the shared cache: above
 *    the thread's slots) and keep live requests of 160 KiB .. 1 MiB, which
 *    take those blocks and split them (one in eight aligned to 8 .. 256
 *    KiB with posix_memalign, checked aligned: run on into the thread's
 *    gap or placed down, a part started on any page);
 *  - takers keep live blocks of every medium size (16 KiB .. 4 MiB), half of
 *    them calloc'd, and small objects (their pages), from the back-end
 *    when no cached block serves: the allocations that land in a split's
 *    window.
 * Every object is written with a tag of its own (unique per allocation) on
 * every 512-byte word of its usable size (nbm_usable_size, checked >= the
 * request) and checked before it is freed: two live objects sharing bytes
 * overwrite each other's tags. calloc'd memory is checked zero first (a
 * dirty block taken as zero holds an old tag). At the end, with everything
 * freed and nbm_purge: nothing cached, no medium block live, the back-end
 * holds what it held at the start (a piece lost or kept twice shows there),
 * and as many 1 MiB blocks fit as at the start.
 * The split's race counters (nbm_gstats_t: splits, lost requests, retakes,
 * pages skipped, dirty takes) are printed; --min-races N fails the run if
 * retakes + skips + lost requests + dirty takes stay below N (long runs).
 *
 * A split's window (its free to its takes) lasts about a microsecond: runs
 * of a few seconds at load 2 saw no race in it, runs of 60 s at load 6-8 a
 * few retakes a second and a lost request or two a minute. With --window P the test sets the
 * library's test hook (nbm__split_window, arena.c) so that the splitting
 * thread yields its CPU there on P % of splits, and the other threads'
 * allocations land in the freed range (release, 2 + 2 threads, at load 8 to
 * 2: 25-90 lost requests, 50-190 dirty takes, 2,000-9,000 retakes a
 * second). The end check
 * found a split's part of a power-of-two class taken as two back-end blocks
 * and freed as one (medium.c, take_part).
 *
 * Usage: nbm_test_split_race [--seconds S] [--splitters N] [--takers N]
 *                            [--window P] [--seed S] [--min-races N]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h" /* the split counters, the arenas */
#include "nbbs.h"
#include "nbmalloc.h"

#include "../check.h"
#include "../support/test_options.h"
#include "split_check.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define LIVE 12    /* live objects per thread */
#define MAXT 16

static double deadline;
static uint64_t seed = 1;
static unsigned window_pct; /* --window: splits whose window yields, in % */
static _Thread_local uint64_t window_rnd = 88172645463325252ull;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

typedef struct obj {
    uint64_t *p;
    size_t size, usable;
    uint64_t tag;
} obj_t;

typedef struct worker {
    int id;
    bool splitter;
    uint64_t allocs, fails, callocs, aligned, bad_tag, bad_zero, bad_size, bad_align;
    obj_t live[LIVE];
} worker_t;

static bool zero_ok(const uint64_t *p, size_t size)
{
    size_t words = size / 8;
    bool ok = words == 0 || p[words - 1] == 0;
    for (size_t i = 0; i < words; i += SPLIT_STRIDE / 8)
        ok &= p[i] == 0;
    return ok;
}

static void drop(worker_t *w, obj_t *o)
{
    if (!o->p)
        return;
    if (!tags_ok(o->p, o->usable, o->tag))
        w->bad_tag++;
    nbm_free(o->p);
    o->p = NULL;
}

/* An object of `size` into o (NULL when the limit refuses it), aligned to
 * align if not 0 (posix_memalign). */
static void take_aligned(worker_t *w, obj_t *o, size_t size, bool zero, size_t align)
{
    uint64_t *p = NULL;
    if (align) {
        zero = false;
        if (nbm_posix_memalign((void **)&p, align, size) != 0)
            p = NULL;
    } else {
        p = zero ? nbm_calloc(1, size) : nbm_malloc(size);
    }
    w->allocs++;
    if (!p) {
        w->fails++;
        return;
    }
    if (align) {
        w->aligned++;
        if ((uintptr_t)p & (align - 1))
            w->bad_align++;
    }
    if (zero) {
        w->callocs++;
        if (!zero_ok(p, size))
            w->bad_zero++;
    }
    o->p = p;
    o->size = size;
    o->usable = nbm_usable_size(p);
    if (o->usable < size)
        w->bad_size++;
    o->tag = ((uint64_t)w->id << 48 | w->allocs) * 2 + 1; /* odd: never 0, never a pointer */
    tags_write(o->p, o->usable, o->tag);
}

static void take(worker_t *w, obj_t *o, size_t size, bool zero)
{
    take_aligned(w, o, size, zero, 0);
}

static size_t log_uniform(uint64_t *r, size_t lo, size_t hi)
{
    /* lo * 2^(u * log2(hi / lo)), in eighths of a doubling */
    size_t s = lo;
    unsigned steps = (unsigned)(rnd(r) % 48); /* 1.125^47: 16 KiB .. 4 MiB */
    for (unsigned i = 0; i < steps && s < hi; i++)
        s += s / 8 + 1;
    s += rnd(r) % (s / 8 + 1);
    return s < hi ? s : hi;
}

/* nbm__split_window: the splitting thread yields its CPU between the
 * split's free and its takes on window_pct % of splits, so another thread
 * allocates while the range is free. */
static void window(void)
{
    if (rnd(&window_rnd) % 100 < window_pct)
        sched_yield();
}

static void *work(void *arg)
{
    worker_t *w = arg;
    uint64_t r = seed * 0x9E3779B97F4A7C15u + (uint64_t)w->id * 0xD1B54A32D192ED03u + 1;
    window_rnd ^= r;
    obj_t big = { 0 };
    while (now_s() < deadline) {
        for (int step = 0; step < 64; step++) {
            obj_t *o = &w->live[rnd(&r) % LIVE];
            if (w->splitter) {
                if (rnd(&r) % 2) {
                    /* A large block to the shared cache (above the slots). */
                    take(w, &big, 600 * KIB + rnd(&r) % (1400 * KIB), false);
                    drop(w, &big);
                } else {
                    drop(w, o);
                    /* One in eight aligned to 8 .. 256 KiB: a split's part
                     * for it must start where the block did. */
                    uint64_t k = rnd(&r);
                    take_aligned(w, o, 160 * KIB + rnd(&r) % (864 * KIB), k % 4 == 0,
                                 k % 8 == 1 ? (size_t)8 * KIB << (k >> 8) % 6 : 0);
                }
            } else {
                drop(w, o);
                uint64_t k = rnd(&r) % 8;
                if (k == 0)
                    take(w, o, 16 + rnd(&r) % (8 * KIB), false); /* small objects: pages */
                else
                    take(w, o, log_uniform(&r, 16 * KIB, 4 * MIB), k % 2 == 0);
            }
        }
    }
    for (int i = 0; i < LIVE; i++)
        drop(w, &w->live[i]);
    return NULL;
}

static void *fill_blocks[4096];

/* 1 MiB blocks until malloc fails, all freed; how many. */
static size_t fill_mib(void)
{
    size_t n = 0;
    while (n < 4096 && (fill_blocks[n] = nbm_malloc(MIB)) != NULL)
        n++;
    for (size_t k = 0; k < n; k++)
        nbm_free(fill_blocks[k]);
    return n;
}

#define COUNTER(f) nbm__stat_sum(offsetof(nbm_gstats_t, f))

int main(int argc, char **argv)
{
    double seconds = 2;
    int splitters = 2, takers = 2;
    uint64_t min_races = 0;
    int window_opt = (int)window_pct;
    test_options(argc, argv, (const test_option_t[]){
        { "--seconds", TEST_OPT_DOUBLE, &seconds }, { "--splitters", TEST_OPT_INT, &splitters },
        { "--takers", TEST_OPT_INT, &takers }, { "--seed", TEST_OPT_U64, &seed },
        { "--window", TEST_OPT_INT, &window_opt }, { "--min-races", TEST_OPT_U64, &min_races }, { 0 } });
    if (window_opt < 0 || window_opt > 100) {
        fprintf(stderr, "nbm_test_split_race: --window is a percentage, 0..100\n");
        return 2;
    }
    window_pct = (unsigned)window_opt;
    if (splitters + takers > MAXT || splitters < 1) {
        fprintf(stderr, "nbm_test_split_race: 1..%d threads, at least one splitter\n", MAXT);
        return 2;
    }
    const char *lim = getenv("NBM_LIMIT_MB");
    if (!lim || atol(lim) < 16) {
        fprintf(stderr, "nbm_test_split_race: run with NBM_LIMIT_MB >= 16 (ctest sets it)\n");
        return 2;
    }
    /* Out of address space from the start: every larger cached block a
     * smaller request takes from now on is split. */
    size_t n0 = fill_mib();
    CHECK(n0 > 0 && n0 < 4096);
    nbm_purge();
    nbm_stats_t s0;
    nbm_get_stats(&s0);
    uint64_t used0 = backend_used();

    if (window_pct)
        nbm__split_window = window; /* before any thread: never changed after */
    pthread_t th[MAXT];
    static worker_t w[MAXT];
    int nt = splitters + takers;
    deadline = now_s() + seconds;
    double t0 = now_s();
    for (int i = 0; i < nt; i++) {
        w[i] = (worker_t){ .id = i + 1, .splitter = i < splitters };
        CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    uint64_t allocs = 0, fails = 0, callocs = 0, aligned = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(w[i].bad_tag, 0);
        CHECK_EQ(w[i].bad_zero, 0);
        CHECK_EQ(w[i].bad_size, 0);
        CHECK_EQ(w[i].bad_align, 0);
        allocs += w[i].allocs, fails += w[i].fails, callocs += w[i].callocs, aligned += w[i].aligned;
    }
    double el = now_s() - t0;

    uint64_t splits = COUNTER(splits), lost = COUNTER(split_lost), retakes = COUNTER(split_retakes);
    uint64_t skips = COUNTER(split_skips), dirty = COUNTER(dirty_takes);
    printf("%.1f s, %d splitters, %d takers, window yields %u %%: %llu allocations (%llu calloc, %llu aligned,"
           " %llu refused)\n", el, splitters, takers, window_pct, (unsigned long long)allocs,
           (unsigned long long)callocs, (unsigned long long)aligned, (unsigned long long)fails);
    printf("splits %llu; races: lost requests %llu, retakes %llu, pages skipped %llu, dirty takes %llu"
           " (per second: %.1f splits, %.1f lost, %.1f retakes, %.1f skipped, %.1f dirty)\n",
           (unsigned long long)splits, (unsigned long long)lost, (unsigned long long)retakes,
           (unsigned long long)skips, (unsigned long long)dirty, (double)splits / el, (double)lost / el,
           (double)retakes / el, (double)skips / el, (double)dirty / el);
    CHECK(fails < allocs);
    CHECK(lost + retakes + skips + dirty >= min_races);

    /* Nothing lost: everything freed and returned. */
    nbm_purge();
    nbm_stats_t s1;
    nbm_get_stats(&s1);
    CHECK_EQ(s1.medium_cached, 0);
    CHECK_EQ(s1.medium_live, s0.medium_live);
    uint64_t used1 = backend_used();
    CHECK_EQ(used1, used0);
    size_t n1 = fill_mib();
    CHECK(n1 >= n0);
    printf("back-end in use %llu -> %llu KiB; 1 MiB blocks that fit %zu -> %zu\n", (unsigned long long)(used0 >> 10),
           (unsigned long long)(used1 >> 10), n0, n1);
    TEST_MAIN_END();
}
