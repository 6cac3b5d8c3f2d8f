/*
 * test_stress.c - concurrent stress test of the back-end. Not a benchmark.
 *
 * T threads (more than cores on purpose) allocate and free blocks of random
 * orders on one instance over real memory. Every allocation claims its
 * min_blocks in a shadow owner map with CAS, so any overlap with a live block
 * is detected at once; each block carries its owner tag at every min_block
 * and its last word, checked before it is freed. Blocks are handed between
 * threads through a mailbox, so frees happen on other threads than
 * allocations. Afterwards everything is free: nbbs_validate must pass and
 * every max-size block must be allocatable again. A second phase has all
 * threads race to free the same blocks: exactly one free of each succeeds.
 * nbbs_alloc_at is mixed in two ways: a block at a random position (any
 * order), and a 3/4-size block of two pieces taken in place in a range the
 * normal search found and freed; a lost piece gives back the one taken.
 *
 * Usage: test_stress [ops-per-thread] [max-threads]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "nbbs.h"
#include "support/nbbs_testutil.h"

#define MAX_LIVE 48
#define MAILBOX 64

typedef struct {
    nbbs_t             *b;
    char               *base;
    size_t              min_block;
    unsigned            max_order;
    size_t              arena;
    _Atomic uint64_t   *owner;   /* per min_block: tag of the live block covering it, or 0 */
    _Atomic(char *)     mailbox[MAILBOX];
    _Atomic uint64_t    next_tag;
    atomic_int          failed;
    long                ops;
} shared_t;

typedef struct {
    shared_t *s;
    unsigned  id;
    uint64_t rng;
    long      allocs, null_allocs, at_ok, at_busy;
} worker_t;

static void fail(shared_t *s, const char *what, void *p)
{
    if (atomic_fetch_add(&s->failed, 1) < 5)
        fprintf(stderr, "stress: %s at %p\n", what, p);
}

static size_t blk_size(shared_t *s, char *p) { return nbbs_block_size(s->b, p); }

/* Claim every min_block of the new block in the shadow map, then tag it. */
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

/* Check the tags, release the shadow map, then free. */
static void give_back(shared_t *s, char *p)
{
    size_t size = blk_size(s, p);
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
        uint64_t t;
        memcpy(&t, p + i * s->min_block, sizeof t);
        uint64_t expect = tag;
        if (t != tag || !atomic_compare_exchange_strong(&s->owner[first + i], &expect, 0)) {
            fail(s, "block contents or shadow owner changed while live", p + i * s->min_block);
            return;
        }
    }
    if (nbbs_free(s->b, p) != 0)
        fail(s, "nbbs_free refused a live block", p);
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    shared_t *s = w->s;
    char *live[MAX_LIVE];
    int nlive = 0;
    for (long i = 0; i < s->ops && !atomic_load(&s->failed); i++) {
        uint64_t r = nbbs_tu_rand(&w->rng);
        if (nlive + 2 <= MAX_LIVE && r % 100 < 12) {
            /* In place: a random block, or the two pieces (orders o - 1 and
             * o - 2) of a free order-o range the search found. */
            unsigned o = 1 + (unsigned)(nbbs_tu_rand(&w->rng) % s->max_order);
            o = (r >> 20) % 4 ? (o + 2) / 3 : o;
            char *at[2];
            unsigned ord[2], n = 0;
            if (r % 100 < 6) {
                uint64_t pos = nbbs_tu_rand(&w->rng) % ((uint64_t)s->arena / (s->min_block << o));
                at[0] = s->base + pos * (s->min_block << o), ord[0] = o, n = 1;
            } else {
                char *p = nbbs_alloc_order(s->b, o);
                w->allocs++;
                if (!p) {
                    w->null_allocs++;
                    continue;
                }
                if (nbbs_free(s->b, p) != 0)
                    fail(s, "nbbs_free refused a block just allocated", p);
                at[0] = p, ord[0] = o - 1, n = 1;
                if (o >= 2)
                    at[1] = p + (s->min_block << (o - 1)), ord[1] = o - 2, n = 2;
            }
            unsigned got = 0;
            for (; got < n; got++) {
                int rc = nbbs_alloc_at(s->b, at[got], ord[got]);
                if (rc == NBBS_EBUSY)
                    break;
                if (rc != 0) {
                    fail(s, "nbbs_alloc_at: neither 0 nor NBBS_EBUSY", at[got]);
                    break;
                }
                if (blk_size(s, at[got]) != s->min_block << ord[got])
                    fail(s, "wrong block size after nbbs_alloc_at", at[got]);
                take(s, at[got], s->min_block << ord[got]);
            }
            if (got < n) {
                w->at_busy++;
                while (got)
                    give_back(s, at[--got]); /* a piece was lost: the whole block is not had */
            } else {
                w->at_ok++;
                for (unsigned i = 0; i < n; i++)
                    live[nlive++] = at[i];
            }
        } else if (nlive < MAX_LIVE && (nlive == 0 || r % 100 < 55)) {
            unsigned o = (unsigned)(nbbs_tu_rand(&w->rng) % (s->max_order + 1));
            o = (r >> 20) % 4 ? o / 3 : o; /* mostly small orders */
            char *p = nbbs_alloc_order(s->b, o);
            w->allocs++;
            if (!p) {
                w->null_allocs++;
                continue;
            }
            if (blk_size(s, p) != s->min_block << o)
                fail(s, "wrong block size", p);
            take(s, p, s->min_block << o);
            live[nlive++] = p;
        } else if (r % 100 < 90) {
            int k = (int)(nbbs_tu_rand(&w->rng) % (unsigned)nlive);
            give_back(s, live[k]);
            live[k] = live[--nlive];
        } else {
            /* Hand a block over: swap it with whatever waits in a mailbox. */
            int k = (int)(nbbs_tu_rand(&w->rng) % (unsigned)nlive);
            char *got = atomic_exchange(&s->mailbox[nbbs_tu_rand(&w->rng) % MAILBOX], live[k]);
            if (got)
                live[k] = got;
            else
                live[k] = live[--nlive];
        }
    }
    while (nlive)
        give_back(s, live[--nlive]);
    return NULL;
}

/* Racing frees: every thread tries to free every block; exactly one wins. */
#define RACE_N 2000
static nbbs_t *race_b;
static char *race_blocks[RACE_N];
static atomic_int race_wins[RACE_N];

static void *racer(void *arg)
{
    unsigned start = *(unsigned *)arg;
    for (unsigned k = 0; k < RACE_N; k++) {
        unsigned i = (start + k) % RACE_N;
        if (race_blocks[i] && nbbs_free(race_b, race_blocks[i]) == 0)
            atomic_fetch_add(&race_wins[i], 1);
    }
    return NULL;
}

static void check_all_free(shared_t *s, size_t arena)
{
    CHECK_EQ(nbbs_validate(s->b), 0);
    nbbs_stats_t st;
    nbbs_get_stats(s->b, &st);
    CHECK_EQ(st.used_bytes, 0);
    CHECK_EQ(st.live_blocks, 0);
    size_t max_block = s->min_block << s->max_order, n = 0;
    void *p;
    while ((p = nbbs_alloc_order(s->b, s->max_order)) != NULL)
        n++;
    CHECK_EQ(n, arena / max_block); /* exact coalescing: every max block is whole again */
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(nbbs_free(s->b, s->base + i * max_block), 0);
    CHECK_EQ(nbbs_validate(s->b), 0);
}

static void run(nbbs_layout_t lay, unsigned nthreads, long ops)
{
    static shared_t s;
    size_t min_block = 64, arena = (size_t)256 << 10;
    unsigned max_order = 8; /* 16 KiB blocks, 16 trees: small enough to fill up */
    char *base = mmap(NULL, arena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED);
    memset(&s, 0, sizeof s);
    nbbs_config_t c = { .min_block = min_block, .max_order = max_order, .layout = lay };
    s.b = nbbs_create(base, arena, &c);
    CHECK(s.b != NULL);
    s.base = base, s.min_block = min_block, s.max_order = max_order, s.ops = ops, s.arena = arena;
    s.owner = calloc(arena / min_block, sizeof *s.owner);

    pthread_t th[64];
    worker_t w[64];
    for (unsigned t = 0; t < nthreads; t++) {
        w[t] = (worker_t){ &s, t, 0x1234567ull * (t + 1) + nthreads, 0, 0, 0, 0 };
        pthread_create(&th[t], NULL, worker, &w[t]);
    }
    long allocs = 0, nulls = 0, at_ok = 0, at_busy = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        allocs += w[t].allocs, nulls += w[t].null_allocs, at_ok += w[t].at_ok, at_busy += w[t].at_busy;
    }
    CHECK(at_ok > 0); /* the in-place allocations did run */
    for (int i = 0; i < MAILBOX; i++) {
        char *p = atomic_exchange(&s.mailbox[i], NULL);
        if (p)
            give_back(&s, p);
    }
    CHECK_EQ(atomic_load(&s.failed), 0);
    check_all_free(&s, arena);
    printf("stress %-5s %2u threads: %ld allocations (%ld NULL), %ld in place (%ld busy), ok\n",
           lay == NBBS_LAYOUT_TREE ? "tree" : "bunch", nthreads, allocs, nulls, at_ok, at_busy);

    race_b = s.b;
    for (unsigned i = 0; i < RACE_N; i++) {
        race_blocks[i] = nbbs_alloc_order(s.b, i % 3);
        atomic_store(&race_wins[i], 0);
    }
    unsigned starts[64];
    for (unsigned t = 0; t < nthreads; t++) {
        starts[t] = t * 7919 % RACE_N;
        pthread_create(&th[t], NULL, racer, &starts[t]);
    }
    for (unsigned t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    int bad = 0;
    for (unsigned i = 0; i < RACE_N; i++)
        bad += race_blocks[i] && atomic_load(&race_wins[i]) != 1;
    CHECK_EQ(bad, 0);
    check_all_free(&s, arena);

    nbbs_destroy(s.b);
    free(s.owner);
    munmap(base, arena);
}

int main(int argc, char **argv)
{
    long ops = argc > 1 ? strtol(argv[1], NULL, 0) : 200000;
    unsigned maxt = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 16;
    nbbs_layout_t lays[] = { NBBS_LAYOUT_TREE, NBBS_LAYOUT_BUNCH };
    for (int l = 0; l < 2; l++)
        for (unsigned t = 2; t <= maxt; t *= 2)
            run(lays[l], t, ops);
    TEST_MAIN_END();
}
