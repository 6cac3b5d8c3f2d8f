/*
 * test_stress.c - threads allocate, write, hand over, verify and free objects.
 * Not a benchmark: it checks that objects survive being passed between
 * threads (cross-thread frees), that caches go back at thread exit, and that
 * threads can be recreated, under as much interleaving as possible.
 *
 * Each round starts `threads` threads; each does `iters` steps on a shared
 * array of slots: allocate an object (mostly small, some medium, rarely huge),
 * fill it with a pattern derived from its size and a cookie, and exchange it
 * into a random slot; the object taken out (usually another thread's) is
 * verified byte by byte and freed, or kept a while in a thread-local array.
 * Deterministic pseudo-randomness per thread (--seed). Exit code 0 = all
 * objects verified.
 *
 *   nbm_test_stress [--threads N] [--rounds R] [--iters I] [--seed S]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbmalloc.h"
#include "../support/test_options.h"

#define SLOTS 4096
#define LOCAL 64

static _Atomic(uintptr_t) slots[SLOTS];
static _Atomic int bad;
static int iters = 100000;

typedef struct {
    uint64_t cookie; /* size << 20 | checksum seed */
    uint64_t size;
} hdr_t;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t pick_size(uint64_t *s)
{
    uint64_t r = rnd(s) % 1000;
    if (r < 900)
        return 16 + rnd(s) % 512;         /* most: small */
    if (r < 990)
        return 16 + rnd(s) % 16384;       /* all classes */
    if (r < 999)
        return 16384 + rnd(s) % 400000;   /* medium */
    return (64u << 20) + rnd(s) % 100000; /* huge, rarely */
}

static void fill(unsigned char *p, size_t n, uint64_t cookie)
{
    hdr_t *h = (hdr_t *)p;
    h->cookie = cookie;
    h->size = n;
    size_t end = n > 4096 ? 4096 : n; /* big ones: head and tail only */
    for (size_t i = sizeof *h; i < end; i++)
        p[i] = (unsigned char)(cookie + i);
    for (size_t i = n > 4096 ? n - 256 : n; i < n; i++)
        p[i] = (unsigned char)(cookie + i);
}

static void check(const unsigned char *p)
{
    const hdr_t *h = (const hdr_t *)p;
    size_t n = h->size;
    if (nbm_usable_size(p) < n) {
        fprintf(stderr, "stress: object %p: usable size %zu < %zu\n", (void *)p, nbm_usable_size(p), n);
        bad++;
        return;
    }
    size_t end = n > 4096 ? 4096 : n;
    for (size_t i = sizeof *h; i < end; i++)
        if (p[i] != (unsigned char)(h->cookie + i)) {
            fprintf(stderr, "stress: object %p byte %zu corrupted\n", (void *)p, i);
            bad++;
            return;
        }
    for (size_t i = n > 4096 ? n - 256 : n; i < n; i++)
        if (p[i] != (unsigned char)(h->cookie + i)) {
            fprintf(stderr, "stress: object %p tail byte %zu corrupted\n", (void *)p, i);
            bad++;
            return;
        }
}

static void *worker(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull | 1;
    unsigned char *local[LOCAL] = { 0 };
    for (int i = 0; i < iters; i++) {
        size_t n = pick_size(&s);
        unsigned char *p;
        uint64_t op = rnd(&s) % 16;
        if (op == 0) {
            p = nbm_calloc(1, n);
            if (p && p[n / 2] != 0) {
                fprintf(stderr, "stress: calloc %p not zero\n", (void *)p);
                bad++;
            }
        } else if (op == 1) {
            p = nbm_aligned_alloc((size_t)64 << (rnd(&s) % 8), n);
        } else {
            p = nbm_malloc(n);
        }
        if (!p) {
            fprintf(stderr, "stress: out of memory for %zu bytes\n", n);
            bad++;
            return NULL;
        }
        fill(p, n, rnd(&s));
        if (op == 2) { /* realloc keeps the contents */
            unsigned char *q = nbm_realloc(p, n + rnd(&s) % 2000);
            if (!q) {
                bad++;
                return NULL;
            }
            check(q);
            p = q;
        }
        /* hand it over; what comes back is usually another thread's */
        uintptr_t old = atomic_exchange(&slots[rnd(&s) % SLOTS], (uintptr_t)p);
        if (old) {
            check((unsigned char *)old);
            unsigned k = (unsigned)(rnd(&s) % LOCAL);
            if (local[k]) {
                check(local[k]);
                nbm_free(local[k]);
            }
            local[k] = (unsigned char *)old; /* kept a while, freed later */
        }
    }
    for (int k = 0; k < LOCAL; k++)
        if (local[k]) {
            check(local[k]);
            nbm_free(local[k]);
        }
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 4, rounds = 4;
    uint64_t seed = 1;
    test_options(argc, argv, (const test_option_t[]){
        { "--threads", TEST_OPT_INT, &threads }, { "--rounds", TEST_OPT_INT, &rounds },
        { "--iters", TEST_OPT_INT, &iters }, { "--seed", TEST_OPT_U64, &seed }, { 0 } });
    if (threads < 1 || threads > 256 || rounds < 1 || iters < 1) {
        fprintf(stderr, "nbm_test_stress: 1..256 threads, at least one round and one iteration\n");
        return 2;
    }
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < threads; i++)
            pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(seed * 1000 + (uint64_t)r * 64 + (uint64_t)i + 1));
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
        if (r % 2 == 1) /* every other round, empty the slots from main */
            for (int k = 0; k < SLOTS; k++) {
                uintptr_t p = atomic_exchange(&slots[k], 0);
                if (p) {
                    check((unsigned char *)p);
                    nbm_free((void *)p);
                }
            }
    }
    for (int k = 0; k < SLOTS; k++) {
        uintptr_t p = atomic_exchange(&slots[k], 0);
        if (p) {
            check((unsigned char *)p);
            nbm_free((void *)p);
        }
    }
    free(t);
    nbm_stats_t st;
    nbm_get_stats(&st);
    printf("stress: threads=%d rounds=%d iters=%d: %s (thread heaps %zu, pages taken %zu, emptied %zu, arenas %zu)\n",
           threads, rounds, iters, bad ? "FAILED" : "ok", st.threads, st.refills, st.drains, st.arenas);
    return bad != 0;
}
