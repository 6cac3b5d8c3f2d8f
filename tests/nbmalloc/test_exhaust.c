/*
 * test_exhaust.c - running out of memory and recovering, through the nbm_*
 * API under NBM_LIMIT_MB (set by ctest; the same paths ulimit -v takes, but
 * usable under the sanitizers). Behaviour only:
 *  - memory filled with one size and freed serves every other size: small
 *    after small, medium after small, a huge block after medium, small again
 *    as much as the first time;
 *  - threads running out together corrupt nothing, and once they have all
 *    freed, everything is available again: each thread then gets a block of
 *    every kind it asked for (even one that got nothing in that round: it may
 *    start while the others hold the whole limit), and at the end a block
 *    that needs the whole arenas' space.
 * Usage: nbm_test_exhaust [--threads T] [--rounds R]
 */
#define _GNU_SOURCE /* pthread_barrier_t */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "../support/test_options.h"
#include "nbmalloc.h"

#define MAXP 2000000
static void *ptrs[MAXP];

/* Allocates blocks of `size` until nbm_malloc fails; returns how many. */
static size_t fill(size_t size)
{
    size_t n = 0;
    while (n < MAXP) {
        char *p = nbm_malloc(size);
        if (!p) {
            CHECK_EQ(errno, ENOMEM);
            break;
        }
        p[0] = (char)n, p[size - 1] = (char)n;
        ptrs[n++] = p;
    }
    CHECK(n < MAXP); /* the limit was reached */
    return n;
}

static void drain(size_t n, size_t size)
{
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) {
        char *p = ptrs[k];
        bad += p[0] != (char)k || p[size - 1] != (char)k;
        nbm_free(p);
    }
    CHECK_EQ(bad, 0);
}

static void test_sizes(size_t limit)
{
    size_t small1 = fill(100);
    CHECK(small1 * 100 > limit / 2);
    drain(small1, 100);
    size_t med = fill(256 << 10);
    CHECK((med << 18) >= limit / 2); /* memory of small objects serves medium blocks */
    drain(med, 256 << 10);
    void *h = nbm_malloc((size_t)65 << 20); /* needs the arenas' space back */
    CHECK(h != NULL);
    nbm_free(h);
    size_t small2 = fill(100);
    CHECK(small2 >= small1 * 9 / 10);
    drain(small2, 100);
    printf("limit %zu MiB: 100 B x %zu, then 256 KiB x %zu, a 65 MiB block, then 100 B x %zu\n", limit >> 20, small1,
           med, small2);
    /* The 65 MiB block first: a live object pins its arena, so a 100 B
     * object that happened to land in the largest arena would keep that
     * arena's address space from the huge mapping (docs/nbmalloc.md,
     * "Exhaustion"); under TSan the decay timing decided where it landed. */
    void *again[3] = { nbm_malloc((size_t)65 << 20), nbm_malloc(100), nbm_malloc(1 << 20) };
    for (int k = 0; k < 3; k++) {
        CHECK(again[k] != NULL);
        nbm_free(again[k]);
    }
}

#define PER_THREAD 200000

typedef struct worker {
    int id, rounds;
    long least, bad, empty, refused;
    void **mine;
} worker_t;

/* Every round's three phases (fill, check and free, retry) start together. */
static pthread_barrier_t phase;

static void *worker(void *arg)
{
    worker_t *w = arg;
    uint64_t r = (uint64_t)w->id * 0x9E3779B97F4A7C15u + 7;
    w->least = -1;
    for (int round = 0; round < w->rounds; round++) {
        pthread_barrier_wait(&phase);
        long n = 0;
        while (n < PER_THREAD) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            size_t size = r % 64 ? 16 + r % (r % 3 ? 256 : 16000) : 20000 + r % (1u << 20);
            uintptr_t *p = nbm_malloc(size);
            if (!p)
                break;
            p[0] = (uintptr_t)p ^ 0x5a5a5a5a;
            p[1] = size;
            w->mine[n++] = p;
        }
        pthread_barrier_wait(&phase); /* all threads hold what they got */
        for (long k = 0; k < n; k++) {
            uintptr_t *p = w->mine[k];
            if (p[0] != ((uintptr_t)p ^ 0x5a5a5a5a) || nbm_usable_size(p) < p[1])
                w->bad++;
            nbm_free(p);
        }
        if (w->least < 0 || n < w->least)
            w->least = n;
        w->empty += n == 0;
        pthread_barrier_wait(&phase); /* all threads have freed */
        static const size_t kinds[] = { 16, 4000, 20000, (size_t)1 << 20 };
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            void *p = nbm_malloc(kinds[k]);
            w->refused += p == NULL;
            nbm_free(p);
        }
    }
    return NULL;
}

static void test_threads(int t, int rounds)
{
    pthread_t th[16];
    worker_t w[16];
    if (t > 16)
        t = 16;
    CHECK(pthread_barrier_init(&phase, NULL, (unsigned)t) == 0);
    for (int i = 0; i < t; i++) {
        w[i] = (worker_t){ .id = i + 1, .rounds = rounds, .mine = ptrs + (size_t)i * PER_THREAD };
        CHECK(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
    }
    long got = 0, empty = 0;
    for (int i = 0; i < t; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(w[i].bad, 0);
        CHECK_EQ(w[i].refused, 0);
        got += w[i].least, empty += w[i].empty;
    }
    pthread_barrier_destroy(&phase);
    /* Together the threads always get blocks; one alone may get none in a
     * round that starts while the others hold the limit (counted, not an
     * error: the retry above shows it gets them once they free). */
    CHECK(got > 0);
    printf("%d threads x %d rounds: fewest blocks in a round per thread summed %ld, rounds a thread got none %ld\n",
           t, rounds, got, empty);
    void *h = nbm_malloc((size_t)65 << 20);
    CHECK(h != NULL);
    nbm_free(h);
}

int main(int argc, char **argv)
{
    int threads = 4, rounds = 3;
    test_options(argc, argv, (const test_option_t[]){
        { "--threads", TEST_OPT_INT, &threads }, { "--rounds", TEST_OPT_INT, &rounds }, { 0 } });
    const char *lim = getenv("NBM_LIMIT_MB");
    size_t limit = (size_t)(lim ? atol(lim) : 0) << 20;
    if (limit < ((size_t)96 << 20)) {
        fprintf(stderr, "nbm_test_exhaust: run with NBM_LIMIT_MB >= 96 (ctest sets it)\n");
        return 2;
    }
    test_sizes(limit);
    test_threads(threads, rounds);
    TEST_MAIN_END();
}
