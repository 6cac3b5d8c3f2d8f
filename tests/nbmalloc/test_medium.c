/*
 * test_medium.c - the medium classes above 128 KiB (8 per doubling, blocks
 * of up to 4 contiguous back-end blocks): every size from 128 KiB to 64 MiB
 * gets at most 1/8 more than it asked for (whole pages), the memory is its
 * own (stamped and checked while many are live, freed by other threads),
 * realloc keeps the bytes and stays in place while the block has room, and
 * a free at a piece boundary inside a block (a page start the back-end sees
 * as a block start) or a second free aborts with the message.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nbmalloc.h"

#include "child.h"
#include "../check.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define PAGE ((size_t)4096)

static size_t round_page(size_t n) { return (n + PAGE - 1) & ~(PAGE - 1); }

static void stamp(unsigned char *p, size_t n, unsigned v)
{
    for (size_t i = 0; i < n - 1; i += PAGE)
        p[i] = (unsigned char)(v + i / PAGE);
    p[n - 1] = (unsigned char)v;
}

static bool stamped(const unsigned char *p, size_t n, unsigned v)
{
    for (size_t i = 0; i < n - 1; i += PAGE)
        if (p[i] != (unsigned char)(v + i / PAGE))
            return false;
    return p[n - 1] == (unsigned char)v;
}

/* Ascending sizes (a cached block is never larger than the request's
 * class, so none is reused from above): every class boundary k/8 of each
 * power of two from 128 KiB to 64 MiB, one below and one above, and 4 KiB
 * steps up to 1 MiB. Usable size: at least the request, at most 9/8 of it
 * in whole pages; the whole usable size is writable. */
static void test_bound(void)
{
    nbm_purge();
    size_t worst_num = 0, worst_den = 1, checked = 0;
    for (size_t p = 128 * KIB; p < 64 * MIB; p *= 2)
        for (size_t k = 0; k <= 8; k++) {
            size_t b = p + k * (p / 8);
            size_t try[3] = { b - 1, b, b + 1 };
            for (int i = 0; i < 3; i++) {
                size_t n = try[i];
                if (n <= 128 * KIB || n > 64 * MIB)
                    continue;
                unsigned char *q = nbm_malloc(n);
                CHECK(q != NULL);
                if (!q)
                    continue;
                size_t us = nbm_usable_size(q);
                CHECK(us >= n && us * 8 <= round_page(n) * 9);
                if (us * worst_den > worst_num * n)
                    worst_num = us, worst_den = n;
                stamp(q, us, (unsigned)n);
                CHECK(stamped(q, us, (unsigned)n));
                nbm_free(q);
                checked++;
            }
        }
    nbm_purge(); /* the blocks up to 64 MiB just cached would serve these from above */
    for (size_t n = 128 * KIB + 1; n <= MIB; n += PAGE) {
        void *q = nbm_malloc(n);
        size_t us = q ? nbm_usable_size(q) : 0;
        CHECK(q && us >= n && us * 8 <= round_page(n) * 9);
        nbm_free(q);
        checked++;
    }
    printf("bound: %zu sizes, worst usable/request %.4f (%zu for %zu)\n", checked,
           (double)worst_num / (double)worst_den, worst_num, worst_den);
}

/* Blocks of random sizes live at once, stamped, handed to other threads
 * that check and free them: no two overlap, nothing is lost. */
#define LIVE 48
#define ROUNDS 40
#define THREADS 4
static _Atomic int bad;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

typedef struct {
    unsigned id;
    unsigned char *blk[LIVE];
    size_t n[LIVE];
} live_t;

static live_t lives[THREADS];
static pthread_barrier_t bar;

static void *worker(void *arg)
{
    live_t *l = arg;
    uint64_t s = 0x9E3779B97F4A7C15ull * (l->id + 1);
    for (unsigned r = 0; r < ROUNDS; r++) {
        for (unsigned i = 0; i < LIVE; i++) {
            size_t n = 128 * KIB + 1 + rnd(&s) % ((rnd(&s) & 7) ? MIB : 6 * MIB);
            unsigned char *q = nbm_malloc(n);
            if (!q || nbm_usable_size(q) < n) {
                bad++;
                continue;
            }
            l->blk[i] = q, l->n[i] = n;
            stamp(q, n, l->id * 131 + i + r);
        }
        pthread_barrier_wait(&bar);
        /* Check and free the next thread's blocks. */
        live_t *o = &lives[(l->id + 1) % THREADS];
        for (unsigned i = 0; i < LIVE; i++)
            if (o->blk[i]) {
                if (!stamped(o->blk[i], o->n[i], o->id * 131 + i + r))
                    bad++;
                nbm_free(o->blk[i]);
                o->blk[i] = NULL;
            }
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

static void test_live(void)
{
    pthread_t th[THREADS];
    pthread_barrier_init(&bar, NULL, THREADS);
    for (unsigned t = 0; t < THREADS; t++) {
        lives[t].id = t;
        pthread_create(&th[t], NULL, worker, &lives[t]);
    }
    for (unsigned t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&bar);
    CHECK_EQ(bad, 0);
    nbm_stats_t st;
    nbm_purge();
    nbm_get_stats(&st);
    CHECK_EQ(st.medium_live, 0);
}

/* realloc: a move keeps the bytes (the pages stamped below the smaller
 * size); a size within the block's usable size and above half of it stays
 * in place. */
static bool prefix_ok(const unsigned char *p, size_t n, unsigned v)
{
    for (size_t i = 0; i + 1 < n; i += PAGE)
        if (p[i] != (unsigned char)(v + i / PAGE))
            return false;
    return true;
}

static void test_realloc(void)
{
    size_t steps[] = { 130 * KIB, 150 * KIB, 300 * KIB, 1200 * KIB, 5 * MIB + 7, 9 * MIB, 3 * MIB, 140 * KIB };
    unsigned char *p = NULL;
    size_t had = 0;
    for (unsigned i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t n = steps[i];
        unsigned char *q = nbm_realloc(p, n);
        CHECK(q != NULL);
        if (!q)
            return;
        CHECK(prefix_ok(q, had < n ? had : n, 77));
        size_t us = nbm_usable_size(q);
        CHECK(us >= n);
        stamp(q, us, 77);
        CHECK(nbm_realloc(q, us) == q);
        CHECK(nbm_realloc(q, us / 2 + 1) == q);
        CHECK(nbm_usable_size(q) == us);
        p = q, had = us;
    }
    nbm_free(p);
}

/* --- bad frees, each in a child that must abort with the message ------------- */
static void (*bad_call)(void);
static void run_bad_call(void **shared)
{
    (void)shared;
    bad_call();
}
static void expect_abort(const char *name, void (*fn)(void), const char *want)
{
    bad_call = fn;
    CHECK(child_aborts(name, run_bad_call, want));
}

/* 160 KiB: pieces of 128 and 32 KiB; 5 MiB + 1: 4 MiB, 1 MiB, 512 KiB (5.5 MiB). */
static void piece_free(void) { char *p = nbm_malloc(150 * KIB); nbm_free(p + 128 * KIB); }
static void piece_free_big(void) { char *p = nbm_malloc(5 * MIB + 1); nbm_free(p + 5 * MIB); }
static void double_free(void) { char *p = nbm_malloc(150 * KIB); nbm_free(p); nbm_free(p); }
static void double_free_big(void) { char *p = nbm_malloc(20 * MIB + 1); nbm_free(p); nbm_free(p); }
static void piece_usable(void) { char *p = nbm_malloc(5 * MIB + 1); (void)nbm_usable_size(p + 4 * MIB); }
static void piece_realloc(void) { char *p = nbm_malloc(150 * KIB); (void)nbm_realloc(p + 128 * KIB, 10); }

static void test_bad_frees(void)
{
    expect_abort("free at a piece boundary", piece_free, "free(): invalid pointer");
    expect_abort("free at the third piece", piece_free_big, "free(): invalid pointer");
    expect_abort("double free", double_free, "free(): double free");
    expect_abort("double free, 22.5 MiB", double_free_big, "free(): double free");
    expect_abort("usable size at a piece", piece_usable, "malloc_usable_size(): invalid pointer");
    expect_abort("realloc at a piece", piece_realloc, "realloc(): invalid pointer");
}

/* Blocks between powers of two are packed end to end (300,000 B: 80 pages,
 * the pieces of the next one start where the last ended); an aligned request
 * of that class never gets such a block, fresh or cached, at a start that is
 * not aligned. */
static void test_packed(void)
{
    enum { N = 8 };
    char *p[N];
    size_t block = 80 * PAGE, adjacent = 0;
    for (int i = 0; i < N; i++) {
        p[i] = nbm_malloc(300000);
        CHECK(p[i] != NULL);
        stamp((unsigned char *)p[i], 300000, (unsigned)i);
        if (i && p[i] == p[i - 1] + block)
            adjacent++;
    }
    CHECK(adjacent >= N / 2);
    for (int i = 0; i < N; i++) {
        CHECK(stamped((unsigned char *)p[i], 300000, (unsigned)i));
        nbm_free(p[i]);
    }
    for (size_t al = 8 * KIB; al <= 256 * KIB; al *= 2) {
        char *q[N];
        for (int i = 0; i < N; i++) {
            q[i] = nbm_aligned_alloc(al, 300000);
            CHECK(q[i] != NULL && ((uintptr_t)q[i] & (al - 1)) == 0);
        }
        for (int i = 0; i < N; i++)
            nbm_free(q[i]);
    }
}

int main(void)
{
    test_packed();
    test_bound();
    test_live();
    test_realloc();
    test_bad_frees();
    TEST_MAIN_END();
}
