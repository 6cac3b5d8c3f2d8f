/*
 * test_split_gap.c - the split's gap (medium.c, split): a split of a cached
 * block for a class of pieces leaves the block's rest free in the back-end,
 * purged, as the thread's gap, and the next split of a block that touches
 * it splits both as one range, parts end to end, going up (the block above
 * the gap) or down (the block below it).
 *
 * Under NBM_LIMIT_MB (ctest: 64) the address space is filled with 1 MiB
 * blocks (one back-end block each, aligned to 1 MiB) until malloc fails,
 * all freed to the shared cache in one order, then taken back by requests
 * of sizes between powers of two, which split them. A part that crosses a
 * 1 MiB boundary ran on across two freed blocks: among the first requests
 * (fewer than the blocks freed, each of which serves at least three: all
 * served by splits, none by fresh packed blocks) that is the gap path,
 * counted (none before the gap: checked to fail there). Checked:
 *  1. aligned requests (posix_memalign, 8 KiB .. 256 KiB) served by splits
 *     are aligned: the gap or a part placed down starts the request's part
 *     on any page (25 of 128 posix_memalign(128 KiB, 300,000 B) were
 *     misaligned before the fix);
 *  2. one thread, blocks freed in ascending and in descending order (the
 *     cache gives them back in the other order: splits going down, then
 *     up): parts cross block boundaries in both, calloc'd ones read zero,
 *     every object tagged on every 512-byte word of its usable size and
 *     checked before it is freed;
 *  3. several threads at once take the freed blocks (each its own gap;
 *     another thread's split or fresh block may take part of it), calloc
 *     and tags checked as above.
 * After each: everything freed and nbm_purge, nothing cached, no medium
 * block live, the back-end holds what it held at the start, and as many
 * 1 MiB blocks fit as at the start. About 1 s.
 *
 * Usage: nbm_test_split_gap [--threads N] [--rounds N]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* the arenas */
#include "nbbs.h"
#include "nbmalloc.h"

#include "../check.h"
#include "../support/test_options.h"
#include "split_check.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define MAXOBJ 4096
#define MAXT 8

typedef struct obj {
    uint64_t *p;
    size_t usable;
    uint64_t tag;
} obj_t;

/* Every word: a part reaching into a gap must read zero all through. */
static bool zero_ok(const uint64_t *p, size_t size)
{
    for (size_t i = 0; i < size / 8; i++)
        if (p[i])
            return false;
    return true;
}

static void *fill_blocks[MAXOBJ];
static size_t n_fill;

/* 1 MiB blocks until malloc fails; how many (kept in fill_blocks). */
static size_t fill_mib(void)
{
    size_t n = 0;
    while (n < MAXOBJ && (fill_blocks[n] = nbm_malloc(MIB)) != NULL)
        n++;
    return n_fill = n;
}

/* Frees the filled blocks: ascending addresses (the cache, a stack, gives
 * them back descending) or descending. */
static void free_fill(bool ascending)
{
    for (size_t k = 0; k < n_fill; k++)
        nbm_free(fill_blocks[ascending ? k : n_fill - 1 - k]);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

typedef struct state {
    uint64_t used0;
    size_t n0, live0;
} state_t;

/* Everything freed: back to where the test started. */
static void check_clean(const state_t *st, const char *what)
{
    nbm_purge();
    nbm_stats_t s;
    nbm_get_stats(&s);
    CHECK_EQ(s.medium_cached, 0);
    CHECK_EQ(s.medium_live, st->live0);
    uint64_t used = backend_used();
    CHECK_EQ(used, st->used0);
    size_t n = fill_mib();
    free_fill(true);
    nbm_purge();
    CHECK(n >= st->n0);
    printf("%s: back-end in use %llu -> %llu KiB, 1 MiB blocks that fit %zu -> %zu\n", what,
           (unsigned long long)(st->used0 >> 10), (unsigned long long)(used >> 10), st->n0, n);
}

/* Whether [p, p + len) crosses a 1 MiB boundary (two freed blocks). */
static bool crosses(const void *p, size_t len)
{
    return ((uintptr_t)p >> 20) != (((uintptr_t)p + len - 1) >> 20);
}

typedef struct worker {
    int id;
    size_t size, early; /* requests surely served by splits (fewer than the blocks freed) */
    uint64_t got, callocs, crossed, bad_tag, bad_zero, bad_size;
    obj_t o[MAXOBJ];
} worker_t;

/* Requests of w->size until malloc fails (every third calloc), tagged;
 * then checked and freed. */
static void take_all(worker_t *w, pthread_barrier_t *bar)
{
    size_t n = 0;
    for (; n < MAXOBJ; n++) {
        bool zero = n % 3 == 0;
        uint64_t *p = zero ? nbm_calloc(1, w->size) : nbm_malloc(w->size);
        if (!p)
            break;
        obj_t *o = &w->o[n];
        o->p = p;
        o->usable = nbm_usable_size(p);
        if (o->usable < w->size)
            w->bad_size++;
        if (zero) {
            w->callocs++;
            if (!zero_ok(p, w->size))
                w->bad_zero++;
        }
        if (n < w->early && crosses(p, w->size))
            w->crossed++;
        o->tag = ((uint64_t)w->id << 48 | (w->got + n)) * 2 + 1;
        tags_write(o->p, o->usable, o->tag);
    }
    w->got += n;
    if (bar)
        pthread_barrier_wait(bar); /* all live at once: any overlap shows */
    for (size_t k = 0; k < n; k++) {
        if (!tags_ok(w->o[k].p, w->o[k].usable, w->o[k].tag))
            w->bad_tag++;
        nbm_free(w->o[k].p);
    }
}

static pthread_barrier_t bar;
static int rounds = 4;

static void *thread_main(void *arg)
{
    worker_t *w = arg;
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_wait(&bar); /* main has freed the blocks */
        take_all(w, &bar);
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

static worker_t solo;

int main(int argc, char **argv)
{
    int threads = 3;
    test_options(argc, argv, (const test_option_t[]){
        { "--threads", TEST_OPT_INT, &threads }, { "--rounds", TEST_OPT_INT, &rounds }, { 0 } });
    const char *lim = getenv("NBM_LIMIT_MB");
    if (!lim || atol(lim) < 16 || atol(lim) > 256 || threads < 2 || threads > MAXT) {
        fprintf(stderr, "nbm_test_split_gap: run with 16 <= NBM_LIMIT_MB <= 256 (ctest sets it), 2..%d threads\n",
                MAXT);
        return 2;
    }
    state_t st;
    st.n0 = fill_mib();
    CHECK(st.n0 > 8 && st.n0 < MAXOBJ);
    /* The blocks lie side by side: most neighbours 1 MiB apart. */
    qsort(fill_blocks, n_fill, sizeof fill_blocks[0], cmp_ptr);
    size_t side = 0;
    for (size_t k = 1; k < n_fill; k++)
        side += (uintptr_t)fill_blocks[k] - (uintptr_t)fill_blocks[k - 1] == MIB;
    CHECK(side >= n_fill / 2);
    free_fill(true);
    nbm_purge();
    nbm_stats_t s0;
    nbm_get_stats(&s0);
    st.live0 = s0.medium_live;
    st.used0 = backend_used();

    /* 1. Aligned requests served by splits: aligned. */
    static const size_t aligns[] = { 8 * KIB, 64 * KIB, 128 * KIB, 256 * KIB };
    static const size_t asizes[] = { 300000, 700000 };
    uint64_t aligned_got = 0, misaligned = 0;
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        for (size_t j = 0; j < sizeof asizes / sizeof asizes[0]; j++) {
            for (int asc = 0; asc < 2; asc++) {
                CHECK_EQ(fill_mib(), st.n0);
                free_fill(asc);
                size_t n = 0;
                while (n < MAXOBJ && nbm_posix_memalign((void **)&solo.o[n].p, aligns[i], asizes[j]) == 0) {
                    if ((uintptr_t)solo.o[n].p & (aligns[i] - 1)) {
                        if (misaligned++ < 4)
                            fprintf(stderr, "posix_memalign(%zu, %zu) = %p: misaligned\n", aligns[i], asizes[j],
                                    (void *)solo.o[n].p);
                    }
                    solo.o[n].usable = nbm_usable_size(solo.o[n].p);
                    CHECK(solo.o[n].usable >= asizes[j]);
                    solo.o[n].tag = (aligned_got + n) * 2 + 1;
                    tags_write(solo.o[n].p, solo.o[n].usable, solo.o[n].tag);
                    n++;
                }
                CHECK(n > 0);
                aligned_got += n;
                for (size_t k = 0; k < n; k++) {
                    CHECK(tags_ok(solo.o[k].p, solo.o[k].usable, solo.o[k].tag));
                    nbm_free(solo.o[k].p);
                }
                nbm_purge();
            }
        }
    }
    printf("aligned requests after blocks freed: %llu, misaligned %llu\n", (unsigned long long)aligned_got,
           (unsigned long long)misaligned);
    CHECK_EQ(misaligned, 0);
    check_clean(&st, "aligned");

    /* 2. One thread: splits going down (blocks freed ascending, taken back
     * descending), then up. */
    /* Classes of pieces a 1 MiB block serves split (up to 4x the class). */
    static const size_t sizes[] = { 300000, 275000, 330000, 420000 };
    for (int asc = 1; asc >= 0; asc--) {
        uint64_t crossed = 0;
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
            CHECK_EQ(fill_mib(), st.n0);
            free_fill(asc);
            solo = (worker_t){ .id = 1, .size = sizes[j], .early = st.n0 };
            take_all(&solo, NULL);
            CHECK(solo.got > st.n0); /* more than one request per freed block */
            CHECK_EQ(solo.bad_tag, 0);
            CHECK_EQ(solo.bad_zero, 0);
            CHECK_EQ(solo.bad_size, 0);
            crossed += solo.crossed;
            nbm_purge();
        }
        printf("one thread, splits going %s: %llu parts across two freed blocks\n", asc ? "down" : "up",
               (unsigned long long)crossed);
        CHECK(crossed > 0);
    }
    check_clean(&st, "one thread");

    /* 3. Threads at once on the blocks freed side by side. */
    static worker_t w[MAXT];
    pthread_t th[MAXT];
    CHECK(pthread_barrier_init(&bar, NULL, (unsigned)threads + 1) == 0);
    for (int i = 0; i < threads; i++) {
        w[i] = (worker_t){ .id = i + 2, .size = sizes[i % 4], .early = st.n0 / 2 / (size_t)threads };
        CHECK(pthread_create(&th[i], NULL, thread_main, &w[i]) == 0);
    }
    for (int r = 0; r < rounds; r++) {
        /* The threads' medium slots keep a freed block each. */
        CHECK(fill_mib() > st.n0 / 2);
        free_fill(r % 2 == 0);
        pthread_barrier_wait(&bar); /* go */
        pthread_barrier_wait(&bar); /* all taken */
        pthread_barrier_wait(&bar); /* all freed */
        nbm_purge();
    }
    uint64_t got = 0, crossed = 0, callocs = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(w[i].bad_tag, 0);
        CHECK_EQ(w[i].bad_zero, 0);
        CHECK_EQ(w[i].bad_size, 0);
        got += w[i].got, crossed += w[i].crossed, callocs += w[i].callocs;
    }
    pthread_barrier_destroy(&bar);
    printf("%d threads, %d rounds: %llu requests (%llu calloc), %llu parts across two freed blocks\n", threads,
           rounds, (unsigned long long)got, (unsigned long long)callocs, (unsigned long long)crossed);
    CHECK(got > (uint64_t)rounds * st.n0);
    check_clean(&st, "threads");
    TEST_MAIN_END();
}
