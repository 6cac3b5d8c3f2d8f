/*
 * test_lists.c - the bound of a heap's list of free objects (heap.c:
 * bin_lim, bin_lmax, refilled, nbm__bins_age), read from the heap's own
 * record (internal.h).
 *
 *   grow: thread-test's loop (10,000 objects of 16 B allocated, then all
 *     freed, round after round, one thread): lim grows to 64 KiB of the
 *     class, and after a few rounds every free of a round stays on the
 *     list (none takes the page path; with the old fixed bound of 256
 *     objects, about 6,000 of each round's frees went to their pages);
 *   remote: two threads that each free the other's objects, round after
 *     round, and malloc their own: the overflows are other heaps' objects,
 *     and lim stays at its floor;
 *   shrink: the grown list, then one malloc and one free at a time for
 *     many heartbeats: lim falls back to its floor and the list holds no
 *     more than that;
 *   idle: the grown list, then the class unused while another is: the
 *     list goes back whole, lim at its floor;
 *   purge: the grown list, then nbm_thread_flush and nbm_purge: the list
 *     goes back whole, lim at its floor;
 *   foreign: the grown list, then another thread's objects freed past its
 *     room: lim back at its floor, the list trimmed to a quarter of it;
 *   shed: the grown list, then a medium block new from the back-end (it
 *     would fault in its memory): the list goes back whole first, lim at
 *     its floor;
 *   adopt: a thread's grown list, the thread exits, the next thread adopts
 *     its heap: lim at its floor, the list empty;
 *   none: malloc's fast path on a thread without a heap (before its first
 *     call, and in a key destructor after its heap's exit) reads the lists
 *     of nbm__bins_none: they stay zeros, the calls are served, and the
 *     exited heap is not the fast path's any more.
 */
#define _GNU_SOURCE /* pthread_barrier_t */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nbmalloc.h"
#include "internal.h"

#include "../check.h"

#define N      10000
#define ROUNDS 40

static void *v[N];

static nbm_bin_t *bin_of(size_t n)
{
    return &nbm__tc->bins[nbm__class_of(n)];
}

static size_t list_len(const nbm_bin_t *bin)
{
    size_t k = 0;
    for (void **o = bin->head; o; o = o[0])
        k++;
    return k;
}

/* Rounds of thread-test's loop; returns the objects on the list after the
 * last round's frees, and in *over the last round's frees that went to a
 * non-current page. */
static size_t rounds(int r, uint32_t *over)
{
    size_t len = 0;
    for (int i = 0; i < r; i++) {
        for (size_t k = 0; k < N; k++) {
            v[k] = nbm_malloc(16);
            if (!v[k])
                abort();
        }
        nbm_bin_t *bin = bin_of(16);
        uint32_t o0 = bin->over;
        for (size_t k = 0; k < N; k++)
            nbm_free(v[k]);
        *over = bin->over - o0;
        len = list_len(bin);
    }
    return len;
}

static void grown(void)
{
    uint32_t over;
    size_t len = rounds(ROUNDS, &over);
    nbm_bin_t *bin = bin_of(16);
    CHECK_EQ(bin->lmax, 4096);
    CHECK_EQ(bin->lim, bin->lmax);
    CHECK(len >= N);
    CHECK_EQ(over, 0);
}

static void test_grow(void)
{
    nbm_bin_t *bin = bin_of(16);
    CHECK_EQ(bin->lim0, 256);
    CHECK_EQ(bin->lim, bin->lim0);
    grown();
    /* Larger classes grow to 64 KiB of theirs: 1,024 objects of 64 B. */
    CHECK_EQ(bin_of(64)->lmax, 1024);
    CHECK_EQ(bin_of(64)->lim0, 128);
    /* ... and not above their floor where that is already 64 KiB. */
    CHECK_EQ(bin_of(8192)->lmax, bin_of(8192)->lim0);
}

static void test_shrink(void)
{
    grown();
    /* A ring of 7 live objects, the oldest freed and one allocated at each
     * step: the list's depth hardly moves, and its head at the heartbeats
     * (every 4,096 mallocs, not a multiple of 7) is never the same object,
     * so the class is not idle. */
    void *ring[7];
    for (int i = 0; i < 7; i++)
        ring[i] = nbm_malloc(16);
    for (int i = 0; i < 400000; i++) {
        nbm_free(ring[i % 7]);
        ring[i % 7] = nbm_malloc(16);
        if (!ring[i % 7])
            abort();
    }
    nbm_bin_t *bin = bin_of(16);
    CHECK_EQ(bin->lim, bin->lim0);
    CHECK(list_len(bin) <= bin->lim0);
    for (int i = 0; i < 7; i++)
        nbm_free(ring[i]);
}

static void test_idle(void)
{
    grown();
    /* Another class only, for more than two heartbeats. */
    for (int i = 0; i < 3 * NBM_HEARTBEAT; i++) {
        void *p = nbm_malloc(200);
        if (!p)
            abort();
        nbm_free(p);
    }
    nbm_bin_t *bin = bin_of(16);
    CHECK_EQ(bin->lim, bin->lim0);
    CHECK_EQ(list_len(bin), 0);
}

static void test_purge(void)
{
    grown();
    nbm_thread_flush();
    CHECK_EQ(bin_of(16)->lim, bin_of(16)->lim0);
    CHECK_EQ(list_len(bin_of(16)), 0);
    grown();
    nbm_purge();
    CHECK_EQ(bin_of(16)->lim, bin_of(16)->lim0);
    CHECK_EQ(list_len(bin_of(16)), 0);
}

/* Two threads swap their rounds' objects and free the other's. */
#define RN 5000
static void *slot[2][RN];
static pthread_barrier_t bar;
static uint32_t rlim[2], rlim0[2];

static void *swapper(void *arg)
{
    int me = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; r++) {
        for (size_t k = 0; k < RN; k++) {
            slot[me][k] = nbm_malloc(16);
            if (!slot[me][k])
                abort();
        }
        pthread_barrier_wait(&bar);
        for (size_t k = 0; k < RN; k++)
            nbm_free(slot[!me][k]);
        pthread_barrier_wait(&bar);
    }
    rlim[me] = bin_of(16)->lim;
    rlim0[me] = bin_of(16)->lim0;
    return NULL;
}

static void test_remote(void)
{
    pthread_t t[2];
    pthread_barrier_init(&bar, NULL, 2);
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, swapper, (void *)(intptr_t)i) != 0)
            abort();
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(rlim0[i], 256);
        CHECK_EQ(rlim[i], rlim0[i]);
    }
}

#define FN 20000
static void *foreign[FN];

static void *allocator(void *arg)
{
    (void)arg;
    for (size_t k = 0; k < FN; k++)
        if (!(foreign[k] = nbm_malloc(16)))
            abort();
    return NULL;
}

static void test_foreign(void)
{
    grown();
    pthread_t t;
    if (pthread_create(&t, NULL, allocator, NULL) != 0)
        abort();
    pthread_join(t, NULL);
    for (size_t k = 0; k < FN; k++)
        nbm_free(foreign[k]);
    nbm_bin_t *bin = bin_of(16);
    CHECK_EQ(bin->lim, bin->lim0);
    CHECK(list_len(bin) <= bin->lim0);
    nbm_thread_flush();
}

static void test_shed(void)
{
    grown();
    void *p = nbm_malloc((size_t)4 << 20);
    CHECK(p != NULL);
    CHECK_EQ(bin_of(16)->lim, bin_of(16)->lim0);
    CHECK_EQ(list_len(bin_of(16)), 0);
    nbm_free(p);
}

static nbm_tcache_t *grown_tc;
static uint32_t grown_lim, adopted_lim, adopted_lim0;
static size_t adopted_len;
static nbm_tcache_t *adopted_tc;

static void *grower(void *arg)
{
    (void)arg;
    uint32_t over;
    rounds(ROUNDS, &over);
    grown_tc = nbm__tc;
    grown_lim = bin_of(16)->lim;
    return NULL;
}

static void *adopter(void *arg)
{
    (void)arg;
    nbm_free(nbm_malloc(200)); /* takes a heap: the exited one, first on the stack */
    adopted_tc = nbm__tc;
    adopted_lim = bin_of(16)->lim;
    adopted_lim0 = bin_of(16)->lim0;
    adopted_len = list_len(bin_of(16));
    return NULL;
}

static void test_adopt(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, grower, NULL) != 0)
        abort();
    pthread_join(t, NULL);
    if (pthread_create(&t, NULL, adopter, NULL) != 0)
        abort();
    pthread_join(t, NULL);
    CHECK_EQ(grown_lim, 4096);
    CHECK(adopted_tc == grown_tc);
    CHECK_EQ(adopted_lim0, 256);
    CHECK_EQ(adopted_lim, adopted_lim0);
    CHECK_EQ(adopted_len, 0);
}

static pthread_key_t late_key;
static nbm_tcache_t *late_tc;
static int late_before, late_fresh, late_after, late_served, late_turns;

static int none_zeros(void)
{
    const unsigned char *b = (const unsigned char *)nbm__bins_none;
    for (size_t i = 0; i < sizeof nbm__bins_none; i++)
        if (b[i])
            return 0;
    return 1;
}

/* A destructor of a key newer than nbmalloc's: glibc runs it after the
 * heap's exit; elsewhere it asks for another turn until the heap is gone. */
static void late_dtor(void *arg)
{
    (void)arg;
    if (nbm__tc != NULL && ++late_turns < 4) {
        pthread_setspecific(late_key, (void *)1);
        return;
    }
    late_after = nbm__tc == NULL && nbm__mheap == (char *)nbm__bins_none && nbm__mheap != (char *)late_tc;
    void *p = nbm_malloc(16), *q = nbm_malloc(100);
    late_served = p != NULL && q != NULL;
    nbm_free(p);
    nbm_free(q);
}

static void *late_thread(void *arg)
{
    (void)arg;
    late_before = nbm__tc == NULL && nbm__mheap == (char *)nbm__bins_none;
    void *p = nbm_malloc(16); /* the empty list of bins_none: refill, then the generic path */
    late_fresh = p != NULL && nbm__tc != NULL && nbm__mheap == (char *)nbm__tc;
    nbm_free(p);
    late_tc = nbm__tc;
    pthread_setspecific(late_key, (void *)1);
    return NULL;
}

static void test_none(void)
{
    CHECK_EQ(pthread_key_create(&late_key, late_dtor), 0);
    pthread_t t;
    if (pthread_create(&t, NULL, late_thread, NULL) != 0)
        abort();
    pthread_join(t, NULL);
    CHECK(late_before);
    CHECK(late_fresh);
    CHECK(late_after);
    CHECK(late_served);
    CHECK(none_zeros());
    CHECK(nbm__mheap == (char *)nbm__tc); /* this thread's own, untouched */
    pthread_key_delete(late_key);
}

int main(void)
{
    nbm_free(nbm_malloc(16)); /* this thread's heap */
    test_grow();
    test_shrink();
    test_idle();
    test_purge();
    test_foreign();
    test_shed();
    test_adopt();
    test_remote();
    test_none();
    TEST_MAIN_END();
}
