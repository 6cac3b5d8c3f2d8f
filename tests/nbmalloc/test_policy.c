/*
 * test_policy.c - the memory policy (src/nbmalloc/decay.c), by its counters.
 *
 *   nbm_test_policy policy   (run with NBM_PURGE_DELAY_MS=100: epochs of 25 ms)
 *     steady: a working set of 96 MiB (above the old fixed 64 MiB cache),
 *       three quarters of it freed and allocated again, round after round,
 *       over many epochs, purges nothing (nbm stats' purged bytes);
 *     shrink: 128 MiB freed, then the program goes on allocating and freeing
 *       64 KiB blocks: the cache and the resident set fall by most of the
 *       128 MiB within a bounded number of epochs (the bound is generous: it
 *       checks that memory goes back, not how fast).
 *     abandoned: 32 MiB of 64-byte objects of an exited thread, freed by
 *       the main thread, go back within 5 s while it keeps allocating (its
 *       heartbeat collects the heap nobody adopted), with no nbm_purge.
 *     remap: realloc of huge mappings grows in place, moves (mremap, the
 *       new pointer aligned to 1 GiB) when the next range is taken, shrinks
 *       in place, keeps the bytes every time; a medium block grows into a
 *       huge one.
 *   nbm_test_policy nocache  (run with NBM_MEDIUM_CACHE_MB=0 or
 *                             NBM_PURGE_DELAY_MS=0)
 *     a freed medium block is purged at once and nothing is cached.
 *   nbm_test_policy carry    (run with NBM_MOVE_BUDGET=32 and
 *                             NBM_PURGE_DELAY_MS=3600000)
 *     a block's count of moves (medium.c) stays with it through its use as
 *     a page: 24 rounds of a 256 KiB block new from the back-end, filled by
 *     4 moves of a thread's spares, freed, taken by a page of 72 KiB objects,
 *     emptied and purged (mapped afresh): every round moves its 64 pages and
 *     the mappings stay flat (a forgotten count left nothing to move after
 *     8 rounds: 32 units, 4 a round); a heap with no more spares than the
 *     8 a heap keeps per page order moves none of them.
 *   nbm_test_policy saturate (run with NBM_MOVE_BUDGET=300 and
 *                             NBM_PURGE_DELAY_MS=3600000)
 *     a block's count does not saturate: a 20 MiB block takes 300 moves of
 *     spares (the budget stops it), is purged, and the next takes 300 again
 *     (a count of 8 bits gave back 255).
 *   nbm_test_policy adopt    (run with NBM_PURGE_DELAY_MS=3600000)
 *     a heap abandoned a moment ago is left for adoption: the age test at
 *     the clock values that went wrong (an exit in an even nanosecond, a
 *     `now` of the same tick), and 8 forked children in which the main
 *     thread's heartbeat right after a thread's exit purges nothing.
 *   nbm_test_policy split    (run with NBM_PURGE_DELAY_MS=3600000 and
 *                             NBM_LIMIT_MB=64)
 *     with address space to spare, a 256 KiB request takes a cached 1 MiB
 *     block whole; once the address space ran out (1 MiB blocks allocated
 *     until malloc fails, then freed), a request that takes a larger cached
 *     block keeps its part only (medium.c, split): after a 1 MiB block is
 *     freed, a 256 KiB request
 *     gets its first 256 KiB (usable size 256 KiB) and the other 768 KiB
 *     stay cached (the policy's held bytes) and serve the next three 256 KiB
 *     requests; a 512 KiB request leaves 512 KiB cached, which nbm_purge
 *     returns; three 300,000 B requests all fit in the one freed 1 MiB.
 *     dirty: a block whose pages went back to the back-end resident (marked
 *     as a split marks them) is no longer known zero: calloc of its size,
 *     until it gets that block, reads zeros every time.
 *     take: a split's takes around parts another allocation got meanwhile
 *     take every other part (the largest buddy block at each place, marks
 *     cleared) and skip those.
 *   nbm_test_policy limit    (run with NBM_LIMIT_MB=256)
 *     a huge realloc beyond the limit fails with ENOMEM, the block intact.
 *   nbm_test_policy move [--no-rss]  (run with NBM_PURGE_DELAY_MS=10000:
 *                                     nothing decays during the test)
 *     resident free memory moves where it is needed (one budget for all
 *     sizes, medium.c):
 *     phase: 64 MiB of 64-byte objects freed, then 64 MiB of 256 KiB
 *       blocks written: the blocks take the freed pages' memory, so they
 *       fault in almost nothing and the resident set does not grow by them;
 *     orders: a 32 MiB block, 24 MiB of it written, freed; a 2 MiB block
 *       then takes its memory (no cached block of its order or near it)
 *       and faults in almost nothing; a 3 MiB calloc that takes more of it
 *       reads zeros; each block keeps its own bytes. With --no-rss (the
 *       sanitizers fault in their shadow memory) only the bytes are checked.
 *   nbm_test_policy budget [--no-rss]  (run with NBM_MOVE_BUDGET=B, B <= 1024,
 *                                       and NBM_PURGE_DELAY_MS=3600000:
 *                                       nothing decays, so budget comes
 *                                       back only by nbm_purge)
 *     the cap on moves (medium.c, "moving resident pages"). A cached source
 *     block has every other page resident (each resident run is one page:
 *     one move, one budget unit), and requests of 1.5 MiB take up to 16 of
 *     them each (NBM_FILL_CALLS); the pages a request received are the ones
 *     resident before it is touched (mincore), so the moves are counted
 *     exactly, with no statistics:
 *     spend: exactly B pages move in all, then none: the requests past the
 *       budget fault in their memory; calloc reads zeros (the moved pages
 *       held the source's bytes), every block keeps the bytes written;
 *     maps: each move adds at most two mappings (the destination's mapping
 *       cut around it; the source stays as it was, MREMAP_DONTUNMAP), so
 *       /proc/self/maps stays below M0 + 2 B + slack at every request, and
 *       through 200 rounds of freeing and allocating blocks of four classes
 *       with the budget spent (the freed blocks, moved into, become sources
 *       too);
 *     spares: with the budget spent, a request of 5 MiB (a new block: a
 *       hole) whose hole the heap's spare pages would fill leaves them
 *       resident (they stay the heap's; before, a run of them was purged
 *       for a move that was then refused); the small objects still live
 *       and new ones keep their bytes. With budget (at the end) the
 *       spares move into such a request;
 *     heal: after nbm_purge (every cached block purged, those moved into
 *       mapped afresh) the mappings are back near M0 and exactly B pages
 *       move again: the budget came back whole.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h" /* nbm__abandoned_due */
#include "nbmalloc.h"
#include "rss.h"

#include "../check.h"
#include "../support/test_options.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
/* NBM_SPARE_KEEP (src/nbmalloc/internal.h): spares per page order a heap
 * keeps for its own pages, never moved into a medium block's hole. */
#define SPARE_KEEP 8

static void touch(char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 4096)
        ((volatile char *)p)[i] = 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t purged(void)
{
    nbm_stats_t s;
    nbm_get_stats(&s);
    return s.purged_bytes;
}

static size_t cached(void)
{
    nbm_stats_t s;
    nbm_get_stats(&s);
    return s.medium_cached;
}

static void test_steady(void)
{
    enum { N = 24, FREED = 18 };
    const size_t size = 3 * MIB + 12345; /* 4 MiB blocks, 96 MiB in all */
    char *set[N];
    for (int i = 0; i < N; i++) {
        set[i] = nbm_malloc(size);
        CHECK(set[i] != NULL);
        touch(set[i], size);
    }
    /* One round to reach the working set's peak, then none may purge while
     * the program keeps running: 0.5 s of rounds, none of them stalled. A
     * round the scheduler held up for a good part of the 100 ms window
     * (the machine is shared) really is a fallen working set to the
     * policy, so the count starts again after one; 10 s bound the whole. */
    size_t before = 0;
    double t0 = now_s(), streak = 0, worst = 0;
    int rounds = 0, clean = 0, restarts = 0;
    while (clean < 5 || now_s() - streak < 0.5) {
        if (now_s() - t0 > 10.0) {
            CHECK(!"0.5 s of unstalled rounds within 10 s");
            break;
        }
        double r0 = now_s();
        if (clean == 1)
            before = purged();
        for (int i = 0; i < FREED; i++)
            nbm_free(set[i]);
        for (int i = 0; i < FREED; i++) {
            set[i] = nbm_malloc(size);
            CHECK(set[i] != NULL);
            touch(set[i], size);
        }
        struct timespec ms = { 0, 2000000 };
        nanosleep(&ms, NULL); /* let epochs pass inside the loop too */
        double took = now_s() - r0;
        rounds++;
        if (took > 0.04) { /* stalled: start again */
            clean = 0;
            restarts++;
            continue;
        }
        worst = took > worst ? took : worst;
        if (clean++ == 0)
            streak = r0;
        else if (clean > 1)
            CHECK_EQ(purged() - before, 0);
    }
    printf("steady: %d rounds, %d restarts after a stall, last %.2f s clean (slowest round %.1f ms), %zu KiB purged\n",
           rounds, restarts, now_s() - streak, worst * 1e3, (purged() - before) >> 10);
    for (int i = 0; i < N; i++)
        nbm_free(set[i]);
    nbm_purge();
}

static void test_shrink(void)
{
    enum { N = 64 };
    const size_t size = 2 * MIB;
    char *set[N];
    for (int i = 0; i < N; i++) {
        set[i] = nbm_malloc(size);
        CHECK(set[i] != NULL);
        touch(set[i], size);
    }
    size_t high = rss_bytes();
    for (int i = 0; i < N; i++)
        nbm_free(set[i]);
    CHECK(cached() >= (N - 8) * size); /* kept at first: the window's peak needs it */
    double t0 = now_s();
    size_t calls = 0;
    while (now_s() - t0 < 5.0 && (cached() > 8 * MIB || rss_bytes() + 96 * MIB > high)) {
        void *p = nbm_malloc(64 << 10);
        CHECK(p != NULL);
        touch(p, 64 << 10);
        nbm_free(p);
        calls++;
        if (calls % 64 == 0) {
            struct timespec ms = { 0, 1000000 };
            nanosleep(&ms, NULL);
        }
    }
    printf("shrink: %zu MiB cached and %zu MiB resident of %zu MiB after %.2f s (%zu calls)\n",
           cached() >> 20, rss_bytes() >> 20, high >> 20, now_s() - t0, calls);
    CHECK(cached() <= 8 * MIB);
    CHECK(rss_bytes() + 96 * MIB <= high);
}

static size_t huge_bytes(void)
{
    nbm_stats_t s;
    nbm_get_stats(&s);
    return s.huge_bytes;
}

static void test_remap(void)
{
    size_t a = 100 * MIB, b = 300 * MIB, c = 80 * MIB;
    char *p = nbm_malloc(a);
    CHECK(p != NULL);
    p[0] = 11, p[a - 1] = 12;
    size_t h0 = huge_bytes();
    /* growth: in place if the range after is free, else moved */
    char *q = nbm_realloc(p, b);
    CHECK(q != NULL && q[0] == 11 && q[a - 1] == 12);
    CHECK(((uintptr_t)q & ((1u << 30) - 1)) == 0);
    CHECK(nbm_usable_size(q) >= b);
    CHECK_EQ(huge_bytes() - h0, b - a);
    q[b - 1] = 13;
    /* shrink: in place */
    char *r = nbm_realloc(q, c);
    CHECK(r == q && r[0] == 11 && r[c - 1] == 0);
    CHECK_EQ(huge_bytes() + a, h0 + c);
    /* a growth that cannot stay: the page after is someone else's */
    char *block = mmap(r + c, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(block == r + c);
    char *m = nbm_realloc(r, a);
    CHECK(m != NULL && m != r && m[0] == 11 && m[c - 1] == 0);
    CHECK(((uintptr_t)m & ((1u << 30) - 1)) == 0);
    CHECK(nbm_usable_size(m) >= a);
    m[a - 1] = 14;
    if (block != MAP_FAILED)
        munmap(block, 4096);
    nbm_free(m);
    CHECK_EQ(huge_bytes() + a, h0);
    /* a medium block growing into a huge one keeps its bytes */
    char *d = nbm_malloc(48 * MIB);
    CHECK(d != NULL);
    memset(d, 7, 48 * MIB);
    char *e = nbm_realloc(d, 100 * MIB);
    CHECK(e != NULL && e[0] == 7 && e[48 * MIB - 1] == 7);
    nbm_free(e);
}

static void test_limit(void)
{
    char *p = nbm_malloc(100 * MIB);
    CHECK(p != NULL);
    p[0] = 5;
    errno = 0;
    CHECK(nbm_realloc(p, 300 * MIB) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK(p[0] == 5 && nbm_usable_size(p) >= 100 * MIB);
    char *q = nbm_realloc(p, 150 * MIB); /* within the limit: still fine */
    CHECK(q != NULL && q[0] == 5);
    nbm_free(q);
}

/* Runs body in a new thread of its own (no slots, no lists of this one's),
 * checked after the join: the CHECK counts are not atomic. */
static void in_thread(void *(*body)(void *))
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, body, NULL);
    if (rc == 0)
        pthread_join(t, NULL);
    CHECK_EQ(rc, 0);
}

/* In a thread of its own: no medium block of a slot (one per order up to
 * 512 KiB) to serve the requests instead. */
static void *split_body(void *arg)
{
    (void)arg;
    /* Address space to spare: the request takes the block whole. */
    nbm_purge();
    char *p = nbm_malloc(MIB), *q[4];
    CHECK(p != NULL);
    nbm_free(p);
    q[0] = nbm_malloc(256 * KIB);
    CHECK(q[0] == p);
    CHECK_EQ(nbm_usable_size(q[0]), MIB);
    nbm_free(q[0]);
    /* Out of address space once (NBM_LIMIT_MB=256: arenas of 64, 128 and
     * 64 MiB): from then on, split. */
    static char *all[512];
    size_t n = 0;
    while (n < 512 && (all[n] = nbm_malloc(MIB)) != NULL)
        n++;
    CHECK(n > 0 && n < 512);
    while (n)
        nbm_free(all[--n]);
    nbm_purge();
    p = nbm_malloc(MIB);
    CHECK(p != NULL);
    touch(p, MIB);
    nbm_free(p);
    CHECK_EQ(cached(), MIB);
    q[0] = nbm_malloc(256 * KIB);
    CHECK(q[0] == p);
    CHECK_EQ(nbm_usable_size(q[0]), 256 * KIB);
    CHECK_EQ(cached(), 768 * KIB); /* the rest, still counted */
    for (int i = 1; i < 4; i++) {
        q[i] = nbm_malloc(256 * KIB);
        CHECK(q[i] >= p + 256 * KIB && q[i] < p + MIB);
        for (int j = 1; j < i; j++)
            CHECK(q[i] != q[j]);
    }
    CHECK_EQ(cached(), 0);
    for (int i = 0; i < 4; i++)
        memset(q[i], i + 1, 256 * KIB);
    for (int i = 0; i < 4; i++) {
        CHECK(q[i][0] == i + 1 && q[i][256 * KIB - 1] == i + 1);
        nbm_free(q[i]);
    }

    nbm_purge();
    p = nbm_malloc(MIB);
    CHECK(p != NULL);
    touch(p, MIB);
    nbm_free(p);
    q[0] = nbm_malloc(512 * KIB);
    CHECK(q[0] == p);
    CHECK_EQ(cached(), 512 * KIB);
    size_t p0 = purged();
    nbm_purge();
    CHECK_EQ(cached(), 0);
    CHECK(purged() - p0 >= 512 * KIB);
    nbm_free(q[0]);

    nbm_purge();
    p = nbm_malloc(MIB);
    CHECK(p != NULL);
    touch(p, MIB);
    nbm_free(p);
    for (int i = 0; i < 3; i++) {
        q[i] = nbm_malloc(300000);
        CHECK(q[i] >= p && q[i] + 300000 <= p + MIB);
    }
    for (int i = 0; i < 3; i++)
        nbm_free(q[i]);
    nbm_purge();
    return NULL;
}


/* A 256 KiB block written, then given back to the back-end with its pages
 * marked as a split marks them (nbm__block_free, not nbm_free: no purge):
 * callocs of 256 KiB (a new thread: no slot; no cached block after the
 * purge) come from the back-end until one is that block; each reads zeros. */
static void *dirty_body(void *arg)
{
    (void)arg;
    nbm_purge();
    enum { TRIES = 4096 };
    static char *got[TRIES];
    char *p = nbm_malloc(256 * KIB);
    CHECK(p != NULL);
    memset(p, 0xab, 256 * KIB);
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
    for (size_t k = 0; k < 64; k++)
        ar->page_order[((uintptr_t)p - ar->base) / 4096 + k] = NBM_PAGE_DIRTY;
    nbm__block_free(ar, p);
    size_t n = 0, nonzero = 0;
    bool seen = false;
    while (n < TRIES && !seen) {
        char *q = got[n++] = nbm_calloc(1, 256 * KIB);
        CHECK(q != NULL);
        for (size_t i = 0; i < 256 * KIB; i += 512)
            nonzero += q[i] != 0;
        seen = q == p;
    }
    CHECK(seen);
    CHECK_EQ(nonzero, 0);
    while (n)
        nbm_free(got[--n]);
    return NULL;
}


/* The split's takes around another allocation (nbm__block_take_next): a
 * 1 MiB block given back with its pages marked, two parts of it taken by
 * "another thread" (nbbs_alloc_at: 256 KiB at +256 KiB, 64 KiB at
 * +576 KiB) before the takes; the takes get every other part, each the
 * largest buddy block there, marks cleared, and skip the two. */
static void *take_body(void *arg)
{
    (void)arg;
    char *p = nbm_malloc(MIB);
    CHECK(p != NULL && ((uintptr_t)p & (MIB - 1)) == 0);
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
    size_t k0 = ((uintptr_t)p - ar->base) / 4096;
    for (size_t k = 0; k < 256; k++)
        ar->page_order[k0 + k] = NBM_PAGE_DIRTY;
    nbm__block_free(ar, p);
    CHECK_EQ(nbbs_alloc_at(ar->bb, p + 256 * KIB, 6), 0);
    CHECK_EQ(nbbs_alloc_at(ar->bb, p + 576 * KIB, 4), 0);
    static const size_t want_off[] = { 0, 512 * KIB, 640 * KIB, 768 * KIB };
    static const unsigned want_ord[] = { 6, 4, 5, 6 };
    char *q = p, *x, *got[8];
    unsigned k, n = 0;
    while ((x = nbm__block_take_next(ar, &q, p + MIB, &k)) != NULL && n < 8) {
        CHECK(n < 4 && x == p + want_off[n] && k == want_ord[n]);
        for (size_t i = 0; i < ((size_t)1 << k); i++)
            CHECK(ar->page_order[(size_t)(x - (char *)ar->base) / 4096 + i] == 0);
        got[n++] = x;
    }
    CHECK_EQ(n, 4);
    CHECK(ar->page_order[k0 + 64] == NBM_PAGE_DIRTY && ar->page_order[k0 + 144] == NBM_PAGE_DIRTY);
    for (unsigned i = 0; i < n; i++)
        nbm__block_free(ar, got[i]);
    nbm__block_free(ar, p + 256 * KIB); /* marks kept: not zero for their next taker */
    nbm__block_free(ar, p + 576 * KIB);
    return NULL;
}


static void test_nocache(void)
{
    size_t p0 = purged();
    char *p = nbm_malloc(8 * MIB);
    CHECK(p != NULL);
    touch(p, 8 * MIB);
    nbm_free(p);
    CHECK_EQ(cached(), 0);
    CHECK(purged() - p0 >= 8 * MIB);
}

/* abandoned: a thread allocates 32 MiB of 64-byte objects and exits; the
 * main thread frees them all (remote frees onto the exited heap's pages).
 * Nobody adopts that heap: while the main thread keeps allocating a little,
 * its heartbeat collects the heap (abandoned for half the delay) and the
 * emptied pages go back, with no nbm_purge. */
enum { AB_OBJS = (32 << 20) / 64 };
static void *ab_fill(void *arg)
{
    void **v = arg;
    for (size_t i = 0; i < AB_OBJS; i++)
        if ((v[i] = nbm_malloc(64)) != NULL)
            memset(v[i], 1, 64);
    return NULL;
}

static void test_abandoned(void)
{
    void **v = mmap(NULL, AB_OBJS * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(v != MAP_FAILED);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, ab_fill, v) == 0);
    pthread_join(t, NULL);
    size_t high = rss_bytes();
    for (size_t i = 0; i < AB_OBJS; i++) {
        CHECK(v[i] != NULL);
        nbm_free(v[i]);
    }
    munmap(v, AB_OBJS * sizeof *v);
    nbm_thread_flush(); /* the held remote frees reach the pages */
    double t0 = now_s();
    while (now_s() - t0 < 5.0 && rss_bytes() + 24 * MIB > high) {
        for (int i = 0; i < 8192; i++)
            nbm_free(nbm_malloc(200));
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
    printf("abandoned: %zu MiB resident of %zu MiB after %.2f s\n", rss_bytes() >> 20, high >> 20,
           now_s() - t0);
    CHECK(rss_bytes() + 24 * MIB <= high);
}

/* adopt (NBM_PURGE_DELAY_MS=3600000): a heap abandoned a moment ago is not
 * collected by the next heartbeat of another thread. An exited thread's
 * pages, emptied by the main thread's remote frees, stay with its heap for
 * half the delay (for a new thread to adopt); the main thread's heartbeat
 * right after the exit (within the same tick of the coarse clock) must not
 * give them back. The exit time is tagged with | 1: when the clock read
 * even, a `now` of the same tick was below it, the unsigned age wrapped to a
 * huge one and the heap was collected at once (its pages purged one madvise
 * each, in storm's timed loop). This part fails without the fix only while
 * the coarse clock's nanoseconds are even (its offset drifts); the age test
 * above fails always. Run in forked children, each a fresh process with no
 * abandoned heap yet, since only the first heartbeat after an exit looks
 * (the next waits half the delay). */
#define ADOPT_OBJS (1u << 16) /* 4 MiB of 64-byte objects */

static void *adopt_fill(void *arg)
{
    void **v = arg;
    for (size_t i = 0; i < ADOPT_OBJS; i++)
        v[i] = nbm_malloc(64);
    return NULL;
}

static int adopt_child(void)
{
    void **v = mmap(NULL, ADOPT_OBJS * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        return 2;
    pthread_t t;
    if (pthread_create(&t, NULL, adopt_fill, v) != 0)
        return 2;
    pthread_join(t, NULL);
    for (size_t i = 0; i < ADOPT_OBJS; i++)
        nbm_free(v[i]);
    nbm_thread_flush(); /* the held remote frees reach the exited heap's pages */
    nbm_stats_t a, b;
    nbm_get_stats(&a);
    for (int i = 0; i < 4 * 4096; i++) /* at least one heartbeat (every 4096 mallocs) */
        nbm_free(nbm_malloc(200));
    nbm_get_stats(&b);
    if (b.purged_bytes != a.purged_bytes) {
        fprintf(stderr, "adopt: %zu KiB purged by the heartbeat right after the exit\n",
                (b.purged_bytes - a.purged_bytes) >> 10);
        return 1;
    }
    return 0;
}

/* The age test itself, at the clock values that went wrong: an exit read
 * in an even nanosecond and a `now` of the same tick (below the tagged
 * time), and a `now` read just before the exit. */
static void test_adopt_age(void)
{
    const uint64_t age = 500000000u, t = 15147893208842u; /* even, as observed */
    CHECK(!nbm__abandoned_due(t | 1, t, age));      /* same tick: no age */
    CHECK(!nbm__abandoned_due(t | 1, t - 4000000u, age)); /* read before the exit */
    CHECK(!nbm__abandoned_due(t | 1, t + age - 1, age));
    CHECK(nbm__abandoned_due(t | 1, t + age, age));
    CHECK(!nbm__abandoned_due((t + 1) | 1, t + 1, age)); /* odd: the tag changes nothing */
    CHECK(nbm__abandoned_due((t + 1) | 1, t + 1 + age, age));
    CHECK(!nbm__abandoned_due(0, t + 10 * age, age)); /* not abandoned */
}

static void test_adopt(void)
{
    test_adopt_age();
    for (int k = 0; k < 8; k++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0)
            _exit(adopt_child());
        int st = 0;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    printf("adopt: 8 heaps left for adoption after their thread's exit\n");
}

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static void test_move_phase(bool rss)
{
    const size_t phase = 64 * MIB, big = 256 << 10;
    void *head = NULL;
    for (size_t got = 0; got < phase; got += 64) {
        void **o = nbm_malloc(64);
        if (!o) {
            CHECK(!"64-byte objects");
            break;
        }
        o[0] = head;
        head = o;
    }
    size_t high = rss_bytes();
    while (head) {
        void *next = *(void **)head;
        nbm_free(head);
        head = next;
    }
    long f0 = minor_faults();
    size_t n = phase / big, bad = 0;
    for (size_t i = 0; i < n; i++) {
        void **b = nbm_malloc(big);
        CHECK(b != NULL);
        if (!b)
            break;
        memset(b, (int)(i & 0xff), big);
        b[0] = head;
        head = b;
    }
    long faults = minor_faults() - f0;
    size_t after = rss_bytes();
    for (size_t i = n; head; i--) {
        void **b = head;
        head = b[0];
        bad += ((unsigned char *)b)[big - 1] != (unsigned char)((i - 1) & 0xff);
        nbm_free(b);
    }
    CHECK_EQ(bad, 0);
    printf("move phase: %ld faults writing %zu MiB of 256 KiB blocks, resident %zu MiB after the small phase, %zu MiB after\n",
           faults, phase >> 20, high >> 20, after >> 20);
    if (rss) {
        CHECK(faults < (long)(phase / 4096 / 16));
        CHECK(after <= high + 16 * MIB);
    }
}

static void test_move_orders(bool rss)
{
    char *a = nbm_malloc(32 * MIB);
    CHECK(a != NULL);
    memset(a, 0x5a, 24 * MIB);
    nbm_free(a);
    long f0 = minor_faults();
    char *b = nbm_malloc(2 * MIB);
    CHECK(b != NULL);
    memset(b, 0x11, 2 * MIB);
    long faults = minor_faults() - f0;
    unsigned char *c = nbm_calloc(3, MIB);
    CHECK(c != NULL);
    size_t nonzero = 0, wrong = 0;
    for (size_t i = 0; i < 3 * MIB; i++)
        nonzero += c[i] != 0;
    memset(c, 0x22, 3 * MIB);
    for (size_t i = 0; i < 2 * MIB; i++)
        wrong += (unsigned char)b[i] != 0x11;
    CHECK_EQ(nonzero, 0);
    CHECK_EQ(wrong, 0);
    printf("move orders: %ld faults writing a 2 MiB block after a 32 MiB one was freed\n", faults);
    if (rss)
        CHECK(faults < 64);
    nbm_free(b);
    nbm_free(c);
}

/* --- budget: the cap on moves ------------------------------------------------ */

static size_t maps_count(void)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096];
    size_t n = 0;
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < k; i++)
            n += buf[i] == '\n';
    close(fd);
    return n;
}

static size_t resident_pages(void *p, size_t len)
{
    static unsigned char vec[(64 << 20) / 4096];
    size_t pages = len / 4096, n = 0;
    if (pages > sizeof vec || mincore(p, len, vec) != 0) {
        CHECK(!"mincore of a block");
        return 0;
    }
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1u;
    return n;
}

#define BUD_REQ   (MIB + MIB / 2) /* a hole of 1.5 MiB: cached blocks fill it (1 MiB and up) */
#define BUD_CALLS 16              /* moves one request makes at most (NBM_FILL_CALLS) */
#define BUD_SLACK 24              /* mappings nbmalloc or the test's libc may add on their own */
#define BUD_MAX   1024
#define BUD_LIVE  (BUD_MAX / BUD_CALLS + 8)

static unsigned budget;         /* NBM_MOVE_BUDGET */
static size_t maps0;            /* mappings before the first move */
static char *bud_blk[BUD_LIVE]; /* live blocks, each filled with its tag */
static size_t bud_size[BUD_LIVE];
static unsigned char bud_tag[BUD_LIVE];

/* A cached source block: every other page written (resident runs of one
 * page), freed. Far larger than any request here (a request may take a
 * cached block up to 4 times its class whole). */
static void bud_source(void)
{
    size_t size = 32 * MIB;
    while (size / 8192 < (size_t)budget + 256)
        size *= 2;
    char *s = nbm_malloc(size);
    CHECK(s != NULL);
    if (!s)
        return;
    for (size_t i = 0; i < size; i += 8192)
        memset(s + i, 0x77, 4096);
    nbm_free(s);
}

static size_t bud_bound(void)
{
    return maps0 + 2 * (size_t)budget + BUD_SLACK;
}

/* A block of size in slot i (calloc every other time): the pages moved
 * into it (resident before it is touched), zeros if calloc'ed, then its tag
 * written all over. */
static size_t bud_alloc(int i, size_t size, bool zero, unsigned char tag)
{
    char *b = zero ? nbm_calloc(1, size) : nbm_malloc(size);
    CHECK(b != NULL);
    bud_blk[i] = b;
    if (!b)
        return 0;
    size_t moved = resident_pages(b, size), nonzero = 0;
    if (zero) {
        for (size_t k = 0; k < size; k++)
            nonzero += b[k] != 0;
        CHECK_EQ(nonzero, 0);
    }
    memset(b, tag, size);
    bud_size[i] = size;
    bud_tag[i] = tag;
    return moved;
}

static void bud_verify(int n)
{
    size_t wrong = 0;
    for (int i = 0; i < n; i++)
        if (bud_blk[i])
            for (size_t k = 0; k < bud_size[i]; k++)
                wrong += (unsigned char)bud_blk[i][k] != bud_tag[i];
    CHECK_EQ(wrong, 0);
}

static void bud_free_all(int n)
{
    for (int i = 0; i < n; i++) {
        nbm_free(bud_blk[i]);
        bud_blk[i] = NULL;
    }
}

/* Requests until the budget is spent and 8 past it: exactly `budget` pages
 * move, as many as each request may until none is left. */
static int bud_spend(const char *what, bool rss)
{
    int n = (int)(budget / BUD_CALLS) + 8;
    size_t total = 0, worst = 0;
    long f0 = minor_faults();
    for (int i = 0; i < n; i++) {
        size_t left = total < budget ? budget - total : 0, want = left < BUD_CALLS ? left : BUD_CALLS;
        size_t moved = bud_alloc(i, BUD_REQ, i & 1, (unsigned char)(i + 1));
        CHECK_EQ(moved, want);
        total += moved;
        size_t m = maps_count();
        worst = m > worst ? m : worst;
        CHECK(m <= bud_bound());
    }
    long faults = minor_faults() - f0;
    bud_verify(n);
    CHECK_EQ(total, budget);
    printf("budget %s: %zu pages moved by %d requests of 1.5 MiB (budget %u), %ld faults; mappings %zu at most (%zu before, bound %zu)\n",
           what, total, n, budget, faults, worst, maps0, bud_bound());
    if (rss) /* the requests past the budget fault in their memory */
        CHECK(faults >= (long)((size_t)(n - (int)(budget / BUD_CALLS) - 1) * (BUD_REQ / 4096)));
    return n;
}

/* With the budget spent: blocks of four classes freed and allocated again,
 * round after round (freed blocks, moved into, are cached sources too). */
static void bud_churn(int n)
{
    static const size_t sizes[] = { BUD_REQ, MIB + 64 * 1024, 3 * MIB, 2 * MIB + 4096 };
    size_t worst = 0;
    for (int r = 0; r < 200; r++) {
        int i = (r * 7) % n;
        nbm_free(bud_blk[i]);
        bud_alloc(i, sizes[r % 4], r & 1, (unsigned char)(0x80 + r));
        size_t m = maps_count();
        worst = m > worst ? m : worst;
        CHECK(m <= bud_bound());
        if (r % 50 == 49)
            bud_verify(n);
    }
    printf("budget churn: 200 rounds, mappings %zu at most (bound %zu)\n", worst, bud_bound());
}

/* With the budget spent, a request the heap's spare pages would fill:
 * the move is refused and the run of spares purged and returned (spare.c).
 * The live small objects keep their bytes, and new ones work. */
static void bud_spares(bool spent)
{
    enum { OBJS = 32 * 1024 }; /* 2 MiB of 64-byte objects: 32 pages of 64 KiB, 24 of them spares below,
                                  SPARE_KEEP of which never move */
    static char *o[OBJS];
    for (int i = 0; i < OBJS; i++) {
        o[i] = nbm_malloc(64);
        CHECK(o[i] != NULL);
        memset(o[i], i & 0xff, 64);
    }
    /* The 64 KiB pages whose objects all go: the heap's spares then. */
    static uintptr_t empty[OBJS / 1024 + 2];
    size_t nempty = 0;
    for (int i = 0; i < OBJS; i++) {
        uintptr_t pg = (uintptr_t)o[i] & ~(uintptr_t)0xffff;
        bool kept = false, seen = false;
        for (int k = 0; k < OBJS && !kept; k += 4096)
            kept = ((uintptr_t)o[k] & ~(uintptr_t)0xffff) == pg;
        for (size_t k = 0; k < nempty && !seen; k++)
            seen = empty[k] == pg;
        if (!kept && !seen && nempty < sizeof empty / sizeof *empty)
            empty[nempty++] = pg;
    }
    for (int i = 0; i < OBJS; i++)
        if (i % 4096 != 0) { /* one object keeps every fourth page or so */
            nbm_free(o[i]);
            o[i] = NULL;
        }
    size_t res0 = 0, res1 = 0;
    for (size_t k = 0; k < nempty; k++)
        res0 += resident_pages((void *)empty[k], 0x10000);
    const size_t size = 5 * MIB; /* a class nothing cached holds: a new block, a hole */
    char *b = nbm_calloc(1, size); /* its hole goes to the spares first */
    CHECK(b != NULL);
    for (size_t k = 0; k < nempty; k++)
        res1 += resident_pages((void *)empty[k], 0x10000);
    printf("budget spares (%s): %zu empty pages of 64 KiB, %zu KiB of them resident before the request, %zu KiB after\n",
           spent ? "budget spent" : "budget back", nempty, res0 * 4, res1 * 4);
    CHECK(nempty >= 8 && res0 == nempty * 16);
    if (spent) /* the spares stay the heap's, not purged for a refused move */
        CHECK_EQ(res1, res0);
    else /* they move into the request */
        CHECK(res1 + 8 * 16 <= res0);
    size_t nonzero = 0, wrong = 0;
    for (size_t k = 0; b && k < size; k++)
        nonzero += b[k] != 0;
    CHECK_EQ(nonzero, 0);
    for (int i = 0; i < OBJS; i++)
        if (o[i])
            for (int k = 0; k < 64; k++)
                wrong += (unsigned char)o[i][k] != (i & 0xff);
    for (int i = 0; i < OBJS; i++)
        if (!o[i]) {
            o[i] = nbm_malloc(64);
            CHECK(o[i] != NULL);
            memset(o[i], 0xa5, 64);
        }
    for (int i = 0; i < OBJS; i++)
        for (int k = 0; k < 64; k++)
            wrong += (unsigned char)o[i][k] != (i % 4096 != 0 ? 0xa5 : (i & 0xff));
    CHECK_EQ(wrong, 0);
    nbm_free(b);
    for (int i = 0; i < OBJS; i++)
        nbm_free(o[i]);
}

/* Whether this kernel moves pages at all (MREMAP_DONTUNMAP, Linux 5.7). */
static bool can_move(void)
{
    char *a = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return false;
    a[0] = 1;
    void *q = mremap(a, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, a + 4096);
    munmap(a, 2 * 4096);
    return q == a + 4096;
}

/* The start of a page-move test: moves must be possible (else the test says
 * it is skipped), and transparent huge pages are off for this process (with
 * them always on, writing one page of a source could make its whole 2 MiB
 * resident: runs of one page are what the counts rely on). */
static bool moves_start(const char *test)
{
    if (!can_move()) {
        printf("%s: skipped, the kernel has no MREMAP_DONTUNMAP (moves are off)\n", test);
        return false;
    }
    prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    return true;
}

/* NBM_MOVE_BUDGET as the test's ctest entry sets it (0 if unset). */
static unsigned env_budget(void)
{
    const char *e = getenv("NBM_MOVE_BUDGET");
    return e ? (unsigned)strtoul(e, NULL, 10) : 0;
}

static void test_budget(bool rss)
{
    budget = env_budget();
    if (budget < BUD_CALLS || budget > BUD_MAX) {
        CHECK(!"NBM_MOVE_BUDGET set, from 16 to 1024");
        return;
    }
    if (!moves_start("budget"))
        return;
    bud_source();
    maps0 = maps_count();
    int n = bud_spend("spend", rss);
    bud_churn(n);
    bud_spares(true);
    bud_verify(n);
    bud_free_all(n);
    nbm_purge(); /* every cached block purged: those moved into mapped afresh */
    size_t healed = maps_count();
    printf("budget heal: %zu mappings after nbm_purge (%zu before the first move)\n", healed, maps0);
    CHECK(healed <= maps0 + BUD_SLACK);
    bud_source();
    maps0 = maps_count();
    n = bud_spend("again", rss);
    bud_free_all(n);
    nbm_purge();
    bud_spares(false);
    nbm_purge();
}

/* --- carry: a block's count of moves kept through page use --------------- */

/* In a thread of its own (its heap's spares are its own): `spares` empty
 * pages of 64 KiB of 64-byte objects, every other page of a run kept by its
 * objects (so no two spares follow each other in memory: each moves with a
 * call of its own, one budget unit), then a medium block of `size` new from
 * the back-end whose hole they fill. Returns (through the argument) the
 * pages moved into it (resident before it is touched); the block is freed
 * and goes, at the thread's exit, to the shared medium cache. */
typedef struct {
    size_t size, spares, moved;
    void *block;
    size_t failed; /* allocations that failed (checked by the caller: CHECK is not thread-safe) */
} carry_arg_t;

static void *carry_thread(void *v)
{
    carry_arg_t *a = v;
    size_t n = (2 * a->spares + 2) * 1024;
    char **o = malloc(n * sizeof *o);
    if (!o) {
        a->failed++;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        a->failed += (o[i] = nbm_malloc(64)) == NULL;
    /* The objects of every other 64 KiB page go (their pages are spares). */
    for (size_t i = 0; i < n; i++)
        if (o[i] && ((uintptr_t)o[i] >> 16) % 2 == 0) {
            nbm_free(o[i]);
            o[i] = NULL;
        }
    char *b = nbm_malloc(a->size);
    a->failed += b == NULL;
    a->block = b;
    a->moved = b ? resident_pages(b, a->size) : 0;
    if (b)
        memset(b, 0x5a, a->size);
    nbm_free(b);
    for (size_t i = 0; i < n; i++)
        nbm_free(o[i]);
    free(o);
    return NULL;
}

static size_t carry_round(size_t size, size_t spares, void **block)
{
    carry_arg_t a = { size, spares, 0, NULL, 0 };
    pthread_t t;
    int rc = pthread_create(&t, NULL, carry_thread, &a);
    if (rc == 0)
        pthread_join(t, NULL);
    CHECK(rc == 0);
    CHECK_EQ(a.failed, 0);
    *block = a.block;
    return a.moved;
}

/* nbm_test_policy carry (NBM_MOVE_BUDGET=32, NBM_PURGE_DELAY_MS=3600000):
 * round after round a block of 256 KiB is moved into (4 of the heap's
 * spares beyond the SPARE_KEEP it keeps, 4 units),
 * freed, taken by a page of 72 KiB objects (pages of 256 KiB: the shared
 * medium cache), emptied and purged. Each round's moves are healed at the
 * purge, so every round moves its 64 pages, and the mappings stay flat.
 * (A page that forgot the block's count left its budget spent for good:
 * from the 9th round on nothing moved.) */
static void test_carry(void)
{
    if (!moves_start("carry"))
        return;
    unsigned b = env_budget();
    CHECK(b == 32);
    size_t m0 = 0, worst = 0, total = 0;
    int rounds = 24, paged = 0;
    for (int r = 0; r < rounds; r++) {
        void *blk;
        size_t moved = carry_round(256 * 1024, 4 + SPARE_KEEP, &blk);
        total += moved;
        /* The block, cached, becomes a page of the 72 KiB class. */
        void *o[3];
        bool in = false;
        for (int i = 0; i < 3; i++) {
            o[i] = nbm_malloc(72 * 1024);
            CHECK(o[i] != NULL);
            in |= (char *)o[i] >= (char *)blk && (char *)o[i] < (char *)blk + 256 * 1024;
        }
        paged += in;
        for (int i = 0; i < 3; i++)
            nbm_free(o[i]);
        nbm_purge();
        size_t m = maps_count();
        if (r == 0)
            m0 = m;
        worst = m > worst ? m : worst;
        if (r < 3 || r % 4 == 3)
            printf("carry round %d: %zu pages moved, block %s a page, %zu mappings after nbm_purge\n", r, moved,
                   in ? "became" : "did not become", m);
        CHECK_EQ(moved, (size_t)64);
    }
    printf("carry: %zu pages moved in %d rounds (budget %u units, 4 a round), %d blocks became pages; mappings %zu .. %zu\n",
           total, rounds, b, paged, m0, worst);
    CHECK(paged >= rounds / 2); /* the path under test was taken */
    CHECK(worst <= m0 + BUD_SLACK);
    /* A heap with no more spares than it keeps moves none: the block
     * faults, the spares stay for the heap's own next pages. */
    void *blk;
    size_t few = carry_round(256 * 1024, SPARE_KEEP - 2, &blk);
    printf("carry: %d spares or so, %zu pages moved (none: the heap keeps %d)\n", SPARE_KEEP - 1, few, SPARE_KEEP);
    CHECK_EQ(few, (size_t)0);
}

/* nbm_test_policy saturate (NBM_MOVE_BUDGET=300, NBM_PURGE_DELAY_MS=3600000):
 * one block of 20 MiB takes 300 moves (320 spares, the budget stops it at
 * 300), is freed and purged (mapped afresh): the budget comes back whole, so
 * a second such block takes 300 again. (A count of 8 bits stopped at 255:
 * 45 units lost a time, the second block took 255.) */
static void test_saturate(void)
{
    if (!moves_start("saturate"))
        return;
    unsigned b = env_budget();
    CHECK(b == 300);
    size_t m0 = 0; /* after the first round: a thread (and a sanitizer's bookkeeping) may map on its own */
    for (int r = 0; r < 3; r++) {
        void *blk;
        size_t moved = carry_round(20 * MIB, 320, &blk);
        nbm_purge();
        size_t m = maps_count();
        if (r == 0)
            m0 = m;
        printf("saturate round %d: %zu pages moved (%zu moves of 16 pages), %zu mappings after nbm_purge (%zu after the first)\n",
               r, moved, moved / 16, m, m0);
        CHECK_EQ(moved, (size_t)300 * 16);
        CHECK(m <= m0 + BUD_SLACK);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int no_rss = 0; /* after the mode: --no-rss (move, budget: no RSS checks under a sanitizer) */
    test_options(argc > 1 ? argc - 1 : 1, argc > 1 ? argv + 1 : argv,
                 (const test_option_t[]){ { "--no-rss", TEST_OPT_FLAG, &no_rss }, { 0 } });
    if (!strcmp(mode, "policy")) {
        test_steady();
        test_shrink();
        test_remap();
        test_abandoned();
    } else if (!strcmp(mode, "move")) {
        bool rss = !no_rss;
        test_move_phase(rss);
        test_move_orders(rss);
    } else if (!strcmp(mode, "budget")) {
        test_budget(!no_rss);
    } else if (!strcmp(mode, "carry")) {
        test_carry();
    } else if (!strcmp(mode, "saturate")) {
        test_saturate();
    } else if (!strcmp(mode, "adopt")) {
        test_adopt();
    } else if (!strcmp(mode, "split")) {
        in_thread(split_body);
        in_thread(dirty_body);
        in_thread(take_body);
    } else if (!strcmp(mode, "limit")) {
        test_limit();
    } else if (!strcmp(mode, "nocache")) {
        test_nocache();
    } else {
        fprintf(stderr, "usage: nbm_test_policy policy|nocache|split|limit|move|budget|carry|saturate|adopt [--no-rss]\n");
        return 2;
    }
    TEST_MAIN_END();
}
