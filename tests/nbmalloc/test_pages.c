/*
 * test_pages.c - small objects by page: memory given back, pages changing
 * class, and cross-thread frees with overlap detection.
 *  - MiB of 64-byte objects allocated, freed and purged: the pages go back
 *    (statistics: no page left; resident memory below a bound, in plain
 *    builds, where RSS means what it says);
 *  - statistics counted per heap add up: another live thread's pages show
 *    in this thread's snapshot, and after its exit and nbm_purge (pages
 *    taken by one heap, given back by another thread) the count is back;
 *  - a page emptied by another thread's frees is swept by its owner
 *    (nbm_thread_flush) and serves the next page of another class;
 *  - another thread's frees are held back by it: its next malloc of the
 *    class returns one of them, and its nbm_thread_flush (it is still alive,
 *    so no exit flush hides a missing one) lets the owner's pages empty;
 *  - a thread holds up to 8 KiB of a class (16 to 256 objects): 120
 *    objects of 64 B of another heap freed, then 120 allocated, are the
 *    same; of 400 objects of 256 B freed, at most 32 are held (400 such
 *    frees and mallocs reuse at most 32 of them);
 *  - the heartbeat pushes back only what was held at the previous one:
 *    objects freed before one heartbeat are reused after it, and gone after
 *    two;
 *  - one thread frees the objects of three other heaps' pages interleaved
 *    and allocates from what it holds: no object handed out twice, none
 *    lost (the pages all go back once every object is freed);
 *  - producers hand objects to consumers, which free all of them (every free
 *    remote): each object carries its address and a serial in every word,
 *    checked before the free, so two live objects that overlap are caught;
 *    then the exited threads' heaps are collected by nbm_purge;
 *  - a page emptied by its owner's frees and taken again for its class
 *    holds the same objects: below 512 B it comes back with its free list
 *    (the first object is the last one freed); from 512 B it is carved
 *    again from its colour upwards, and a second free of one of its objects
 *    not carved again yet is still reported; after nbm_purge a page of the
 *    class is carved afresh from its start;
 *  - the owner's free that empties a full page that is not current gives
 *    the page back at once, and a full page's first free makes that object
 *    the next one handed out once the current page is used up;
 *  - the page a switch leaves joins the avail list then, ahead of pages
 *    whose first free comes later;
 *  - a fresh page hands out first the object at its colour: the first
 *    object in the 512-byte step (page number mod 8, inverted in an odd
 *    arena slot) of its start, so the first objects of pages do not all
 *    share their low address bits (docs/nbmalloc.md, "Page colour").
 * Usage: nbm_test_pages [--mib M] [--objects N]
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "../support/test_options.h"
#include "child.h"
#include "nbmalloc.h"
#include "rss.h"

static void test_return(size_t mib, int check_rss)
{
    size_t n = (mib << 20) / 64;
    void **v = malloc(n * sizeof *v); /* libc's, or ours under the preload */
    CHECK(v != NULL);
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        v[i] = (void *)(uintptr_t)1; /* resident before the first measure */
    size_t before = rss_bytes(), got = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t *p = nbm_malloc(64);
        v[i] = p;
        if (!p)
            break;
        p[2] = i; /* touch it (words 0 and 1 are the allocator's when freed) */
        got++;
    }
    CHECK_EQ(got, n);
    nbm_stats_t s;
    nbm_get_stats(&s);
    CHECK(s.chunk_bytes >= (mib << 20));
    size_t peak = rss_bytes();
    size_t bad = 0;
    for (size_t i = 0; i < got; i++)
        if (v[i]) {
            bad += ((uint64_t *)v[i])[2] != i;
            nbm_free(v[i]);
        }
    CHECK_EQ(bad, 0);
    nbm_purge();
    nbm_get_stats(&s);
    CHECK(s.chunk_bytes < ((size_t)1 << 20)); /* nothing but a page or so */
    size_t after = rss_bytes();
    if (check_rss)
        CHECK(after < before + ((size_t)16 << 20));
    printf("%zu MiB of 64 B objects: RSS %zu MiB before, %zu MiB full, %zu MiB after nbm_purge; pages left %zu KiB\n",
           mib, before >> 20, peak >> 20, after >> 20, s.chunk_bytes >> 10);
    free(v);
}

/* Statistics are counted in each thread's heap record and summed when read:
 * pages another (live) thread took show in the caller's snapshot, and pages
 * one heap took and another thread's purge gave back (its count goes below
 * zero) add up to nothing. */
#define STATS_MIB 4
static atomic_int stats_phase;
static size_t stats_got; /* the thread's objects (no CHECK there: its counts are the main thread's) */
static void *stats_thread(void *arg)
{
    (void)arg;
    size_t n = ((size_t)STATS_MIB << 20) / 64;
    void **v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        stats_got += (v[i] = nbm_malloc(64)) != NULL;
    atomic_store(&stats_phase, 1);
    while (atomic_load(&stats_phase) != 2)
        sched_yield();
    for (size_t i = 0; v && i < n; i++)
        nbm_free(v[i]);
    free(v);
    return NULL;
}

static void test_stats_threads(void)
{
    nbm_purge();
    nbm_stats_t s0, s1, s2;
    nbm_get_stats(&s0);
    atomic_store(&stats_phase, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stats_thread, NULL) == 0);
    while (atomic_load(&stats_phase) != 1)
        sched_yield();
    nbm_get_stats(&s1); /* the thread is alive: its pages are in its record only */
    CHECK(s1.chunk_bytes >= s0.chunk_bytes + ((size_t)STATS_MIB << 20));
    CHECK(s1.chunks > s0.chunks);
    CHECK(s1.threads > s0.threads);
    atomic_store(&stats_phase, 2);
    pthread_join(t, NULL);
    CHECK_EQ(stats_got, ((size_t)STATS_MIB << 20) / 64);
    nbm_purge(); /* this thread gives back the exited heap's empty pages */
    nbm_get_stats(&s2);
    CHECK(s2.chunk_bytes <= s0.chunk_bytes);
    CHECK(s2.chunks <= s0.chunks);
    printf("statistics across threads: pages %zu KiB before, %zu KiB with the thread's, %zu KiB after its exit and nbm_purge\n",
           (size_t)s0.chunk_bytes >> 10, (size_t)s1.chunk_bytes >> 10, (size_t)s2.chunk_bytes >> 10);
}

#define REMOTE_N 4096 /* 64-byte objects: four 64 KiB pages */
static void *remote_objs[REMOTE_N];

static void *free_all(void *arg)
{
    (void)arg;
    for (int i = 0; i < REMOTE_N; i++)
        nbm_free(remote_objs[i]);
    return NULL;
}

static atomic_int held_phase;
static int held_reused;

static void *free_held(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++)
        nbm_free(remote_objs[i]);
    void *p = nbm_malloc(64); /* one of the five: held by this thread */
    for (int i = 0; i < 5; i++)
        held_reused += p == remote_objs[i];
    nbm_free(p);
    for (int i = 5; i < REMOTE_N; i++)
        nbm_free(remote_objs[i]);
    nbm_thread_flush();
    atomic_store(&held_phase, 1);
    while (atomic_load(&held_phase) != 2)
        sched_yield();
    return NULL;
}

static void test_held_remote(void)
{
    for (int i = 0; i < REMOTE_N; i++) {
        remote_objs[i] = nbm_malloc(64);
        CHECK(remote_objs[i] != NULL);
    }
    pthread_t t;
    atomic_store(&held_phase, 0);
    CHECK(pthread_create(&t, NULL, free_held, NULL) == 0);
    while (atomic_load(&held_phase) != 1)
        sched_yield();
    nbm_stats_t s0, s1;
    nbm_get_stats(&s0);
    nbm_thread_flush(); /* every object reached its page: four pages empty */
    nbm_get_stats(&s1);
    atomic_store(&held_phase, 2);
    pthread_join(t, NULL);
    CHECK_EQ(held_reused, 1);
    CHECK(s1.chunks + 4 <= s0.chunks);
}

/* Another thread frees n objects of size bytes of this heap, then allocates
 * n of the size: how many of its allocations are objects it freed (the
 * ones its list held). */
struct held_run { void **objs; int n; size_t size; int reused; };

static void *held_free_then_take(void *arg)
{
    struct held_run *h = arg;
    void **q = calloc((size_t)h->n, sizeof *q);
    if (!q)
        return NULL;
    for (int i = 0; i < h->n; i++)
        nbm_free(h->objs[i]);
    for (int i = 0; i < h->n; i++)
        q[i] = nbm_malloc(h->size);
    for (int i = 0; i < h->n; i++)
        for (int k = 0; k < h->n; k++)
            h->reused += q[i] == h->objs[k];
    for (int i = 0; i < h->n; i++)
        nbm_free(q[i]);
    nbm_thread_flush();
    free(q);
    return NULL;
}

static int held_reused_by_other(int n, size_t size)
{
    struct held_run h = { calloc((size_t)n, sizeof(void *)), n, size, 0 };
    CHECK(h.objs != NULL);
    if (!h.objs)
        return -1;
    for (int i = 0; i < n; i++) {
        h.objs[i] = nbm_malloc(size);
        CHECK(h.objs[i] != NULL);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, held_free_then_take, &h) == 0);
    pthread_join(t, NULL);
    nbm_thread_flush();
    free(h.objs);
    return h.reused;
}

/* A thread holds up to 8 KiB of a class it freed from other heaps' pages
 * (128 objects of 64 B): 120 objects of 64 B freed, then 120 allocated, are
 * the same 120 (a bin holding half a carving batch, 32, pushed the older
 * ones back to their owner). */
static void test_held_many(void)
{
    CHECK_EQ(held_reused_by_other(120, 64), 120);
}

/* ... and no more: of 400 objects of 256 B of another heap freed, at most
 * 8 KiB (32) are held, the rest went back to their pages: 400 mallocs of
 * the class return at most 32 of them (with a list of 32 KiB, 128 objects,
 * 109 of them). The objects a thread holds keep their pages in use, so
 * a ring of threads freeing each other's objects held 32 KiB of each class
 * per thread (remote-free: 1.7x mimalloc's peak RSS at 8 threads). */
#define HELD_BOUND_MAX 32 /* 8 KiB of 256 B */
static void test_held_bound(void)
{
    int reused = held_reused_by_other(400, 256);
    printf("held of another heap: %d of 400 objects of 256 B (at most %d)\n", reused, HELD_BOUND_MAX);
    CHECK(reused >= 1);
    CHECK(reused <= HELD_BOUND_MAX);
}

/* The heartbeat (every 4096th malloc) pushes back what was held at the last
 * heartbeat already: 20 objects freed just before one are still held after
 * it (a malloc of their class returns them), and 20 freed then are gone
 * after two (held, they would come back). */
#define BEAT_N    20
#define BEAT_FILL 4100 /* mallocs of another class: one heartbeat */
static void *beat_objs[2][BEAT_N];
static int beat_kept, beat_left;

static int beat_count(void **q, void **objs)
{
    int n = 0;
    for (int i = 0; i < BEAT_N; i++)
        for (int k = 0; k < BEAT_N; k++)
            n += q[i] == objs[k];
    return n;
}

static void beat_fill(void **fill, int rounds)
{
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < BEAT_FILL; i++)
            fill[i] = nbm_malloc(32);
        for (int i = 0; i < BEAT_FILL; i++)
            nbm_free(fill[i]);
    }
}

static void *beat_thread(void *arg)
{
    void **fill = arg, *q[BEAT_N];
    for (int i = 0; i < BEAT_N; i++)
        nbm_free(beat_objs[0][i]);
    beat_fill(fill, 1);
    for (int i = 0; i < BEAT_N; i++)
        q[i] = nbm_malloc(64);
    beat_kept = beat_count(q, beat_objs[0]);
    for (int i = 0; i < BEAT_N; i++)
        nbm_free(q[i]);
    for (int i = 0; i < BEAT_N; i++)
        nbm_free(beat_objs[1][i]);
    beat_fill(fill, 2);
    for (int i = 0; i < BEAT_N; i++)
        q[i] = nbm_malloc(64);
    beat_left = beat_count(q, beat_objs[1]);
    for (int i = 0; i < BEAT_N; i++)
        nbm_free(q[i]);
    nbm_thread_flush();
    return NULL;
}

static void test_held_heartbeat(void)
{
    for (int i = 0; i < 2 * BEAT_N; i++) {
        beat_objs[i / BEAT_N][i % BEAT_N] = nbm_malloc(64);
        CHECK(beat_objs[i / BEAT_N][i % BEAT_N] != NULL);
    }
    void **fill = malloc(BEAT_FILL * sizeof *fill);
    CHECK(fill != NULL);
    if (!fill)
        return;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, beat_thread, fill) == 0);
    pthread_join(t, NULL);
    free(fill);
    CHECK_EQ(beat_kept, BEAT_N);
    CHECK_EQ(beat_left, 0);
    nbm_thread_flush();
}

static void test_remote_page_reuse(void)
{
    for (int i = 0; i < REMOTE_N; i++) {
        remote_objs[i] = nbm_malloc(64);
        CHECK(remote_objs[i] != NULL);
    }
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < REMOTE_N; i++) {
        uintptr_t a = (uintptr_t)remote_objs[i];
        lo = a < lo ? a : lo;
        hi = a > hi ? a : hi;
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_all, NULL) == 0);
    pthread_join(t, NULL);
    nbm_stats_t s0, s1;
    nbm_get_stats(&s0);
    nbm_thread_flush(); /* the owner takes the remote frees: its pages are empty */
    nbm_get_stats(&s1);
    CHECK(s1.chunks + 4 <= s0.chunks);
    /* The next page, of another class, is one of them. */
    char *q[64];
    int inside = 0;
    for (int i = 0; i < 64; i++) {
        q[i] = nbm_malloc(1000);
        CHECK(q[i] != NULL);
        inside += (uintptr_t)q[i] >= (lo & ~(uintptr_t)0xffff) && (uintptr_t)q[i] <= hi;
        memset(q[i], i, 1000);
    }
    CHECK(inside == 64);
    size_t bad = 0;
    for (int i = 0; i < 64; i++) {
        for (int k = 0; k < 1000; k++)
            bad += q[i][k] != (char)i;
        nbm_free(q[i]);
    }
    CHECK_EQ(bad, 0);
}

/* --- an emptied page taken again by its class ------------------------------ */
/* Classes no other test here uses: 2560 B, 25 objects a 64 KiB page (at or
 * above NBM_RECARVE_MIN, 512 B: carved again) and 192 B, 341 objects a page
 * (below: its list handed out as it was). */
#define REVIVE_MAX 1400

static uintptr_t page_of(const void *p) { return (uintptr_t)p & ~(uintptr_t)0xffff; }

static char *revive_v[REVIVE_MAX], *revive_freed[REVIVE_MAX];

/* n objects of `size`, then the first page emptied by the owner's frees, in
 * address order, while it is full and not current: the last `skip`
 * objects are freed first, so the thread's list is full (its room is at
 * most lim plus the last refill's objects) and the first page's frees go to
 * it; the last of them empties it. Returns the page (0 if it failed:
 * checked); the objects freed are revive_freed[0 .. *nfreed - 1]. */
static uintptr_t revive_empty_first(size_t size, int n, int skip, int *nfreed)
{
    char **v = revive_v;
    *nfreed = 0;
    for (int i = 0; i < n; i++) {
        v[i] = nbm_malloc(size);
        CHECK(v[i] != NULL);
        if (!v[i])
            return 0;
        memset(v[i], 0x5a, size);
    }
    uintptr_t p1 = page_of(v[0]);
    for (int i = n - 1; i >= n - skip; i--) {
        CHECK(page_of(v[i]) != p1);
        nbm_free(v[i]);
        v[i] = NULL;
    }
    for (int i = 0; i < n; i++)
        if (v[i] && page_of(v[i]) == p1) {
            revive_freed[(*nfreed)++] = v[i];
            nbm_free(v[i]);
            v[i] = NULL;
        }
    CHECK(*nfreed >= 8);
    return p1;
}

/* In a child: the emptied page revived for its class (2560 B: carved
 * again, a batch at a time), one object of it handed out, then one not
 * carved again yet freed a second time. */
static void revive_double_free(void **shared)
{
    (void)shared;
    int nfreed;
    uintptr_t p1 = revive_empty_first(2560, 200, 50, &nfreed);
    if (!p1 || nfreed < 8)
        return;
    for (int i = 0; i < 400; i++) {
        char *p = nbm_malloc(2560);
        if (p && page_of(p) == p1)
            break;
    }
    nbm_free(revive_freed[nfreed - 2]); /* on the list, or not carved again: not handed out */
}

/* The emptied page comes back for its class and hands out exactly the
 * objects it held. At 2560 B it is carved again: from the object at its
 * colour (as a fresh page's first carve), in ascending addresses, not
 * from the last one freed down as its list had them; a second free of one of its objects
 * not carved again yet is still reported. At 192 B its list serves as it
 * was: the first object is the last one freed. */
static void test_spare_revive(size_t size, int n, int skip, bool recarve)
{
    int nfreed;
    uintptr_t p1 = revive_empty_first(size, n, skip, &nfreed);
    if (!p1)
        return;
    char **v = revive_v, **freed = revive_freed;
    /* Allocate until the page serves again. */
    static char *w[2 * REVIVE_MAX];
    int nw = 0, first = -1, back = 0, falls = 0;
    char *last = NULL;
    for (; nw < 2 * n && back < nfreed; nw++) {
        w[nw] = nbm_malloc(size);
        CHECK(w[nw] != NULL);
        if (!w[nw])
            break;
        if (page_of(w[nw]) == p1) {
            if (first < 0)
                first = nw;
            int known = 0;
            for (int k = 0; k < nfreed; k++)
                known += freed[k] == w[nw];
            CHECK_EQ(known, 1);
            falls += last > w[nw];
            last = w[nw];
            back++;
        }
        memset(w[nw], nw & 0xff, size);
    }
    CHECK(first >= 0);
    if (first >= 0 && recarve) {
        /* Its colour (test_colour): the objects before it come at the end
         * of the first batch, the one step down. */
        unsigned step = (unsigned)((p1 >> 16) ^ (7u * ((p1 >> 30) & 1u))) & 7u;
        size_t s = (step * 512u + size - 1) / size;
        CHECK(w[first] == (char *)p1 + s * size);
        CHECK(falls <= (s != 0));
    } else if (first >= 0) {
        CHECK(w[first] == freed[nfreed - 1]);
    }
    CHECK_EQ(back, nfreed);
    size_t bad = 0;
    for (int i = 0; i < nw; i++) {
        for (size_t k = 0; k < size; k += 64)
            bad += w[i][k] != (char)(i & 0xff);
        nbm_free(w[i]);
    }
    for (int i = 0; i < n; i++)
        nbm_free(v[i]);
    CHECK_EQ(bad, 0);
    /* nbm_purge returns the emptied pages (their memory and their lists):
     * the class's next page, its only one, is carved from its first object
     * (its first carve is one object: its colour would reach past the
     * first 4 KiB). */
    nbm_purge();
    if (recarve) {
        char *q = nbm_malloc(size);
        CHECK(q != NULL);
        CHECK(q != NULL && ((uintptr_t)q & 0xffff) == 0);
        nbm_free(q);
        CHECK(child_aborts("revived page, double free", revive_double_free, "double free"));
    }
    nbm_purge(); /* no page of this test left for the next one to take */
}

/* --- the owner's edges on a non-current page ------------------------------- */
#define EDGE_SIZE 4096 /* a class no other test here uses: 16 objects a 64 KiB page */
#define EDGE_CAP  16
#define EDGE_N    (8 * EDGE_CAP)

/* One more object of EDGE_SIZE into v[*n]; false (checked) when v is full or
 * malloc failed. */
static bool edge_next(char **v, int *n)
{
    CHECK(*n < EDGE_N);
    if (*n >= EDGE_N)
        return false;
    v[*n] = nbm_malloc(EDGE_SIZE);
    CHECK(v[*n] != NULL);
    if (!v[*n])
        return false;
    (*n)++;
    return true;
}

/* Objects into v until one lies in a page other than v[0]'s. */
static bool edge_fill_to_second_page(char **v, int *n)
{
    do {
        if (!edge_next(v, n))
            return false;
    } while (page_of(v[*n - 1]) == page_of(v[0]));
    return true;
}

/* The end of every page-edge test: its objects freed (NULL entries are
 * taken ones already freed) and the heap purged for the next test. */
static void edge_release(char **v, int n)
{
    for (int i = 0; i < n; i++)
        nbm_free(v[i]);
    nbm_purge();
}

/* The owner's frees go onto the thread's list whatever their page while
 * the list has room (lim, 16 objects of 4 KiB, after a refill, plus the
 * refill's objects malloc took since: at most 32 here); with no room they
 * go to their pages, counted: the free that empties a full page gives it
 * back to the heap at once (one page fewer in the statistics, no sweep or
 * purge needed), and a full page's first free puts it on the avail list,
 * so once the list and the current page are used up, a malloc returns
 * that object, not one of a new page. */
static void test_owner_edges(void)
{
    static char *v[EDGE_N];
    static uintptr_t known[EDGE_N];
    int n = 0;
    nbm_purge();
    /* Until the current page is full and held whole: a later malloc then
     * has to switch pages. */
    for (;;) {
        if (!edge_next(v, &n))
            goto out;
        memset(v[n - 1], 0x3c, EDGE_SIZE);
        known[n - 1] = page_of(v[n - 1]);
        int same = 0;
        for (int i = 0; i < n; i++)
            same += page_of(v[i]) == page_of(v[n - 1]);
        if (n >= 5 * EDGE_CAP && same == EDGE_CAP)
            break;
    }
    uintptr_t cur = page_of(v[n - 1]);
    /* Two earlier pages held whole (full, not current). */
    uintptr_t full[2] = { 0, 0 };
    int nfull = 0;
    for (int i = 0; i < n && nfull < 2; i++) {
        uintptr_t pg = page_of(v[i]);
        int same = 0;
        for (int k = 0; k < n; k++)
            same += page_of(v[k]) == pg;
        if (pg != cur && same == EDGE_CAP && (nfull == 0 || full[0] != pg))
            full[nfull++] = pg;
    }
    CHECK_EQ(nfull, 2);
    if (nfull != 2)
        goto out;
    /* 40 frees of other pages' objects (the newest first): the list is
     * full. */
    int nfill = 0;
    for (int i = n - 1; i >= 0 && nfill < 40; i--)
        if (v[i] && page_of(v[i]) != full[0] && page_of(v[i]) != full[1]) {
            nbm_free(v[i]);
            v[i] = NULL;
            nfill++;
        }
    CHECK_EQ(nfill, 40);
    /* The emptying free gives the page back at once. */
    nbm_stats_t before, after;
    nbm_get_stats(&before);
    for (int i = 0; i < n; i++)
        if (v[i] && page_of(v[i]) == full[0]) {
            nbm_free(v[i]);
            v[i] = NULL;
        }
    nbm_get_stats(&after);
    CHECK_EQ(after.chunks + 1, before.chunks);
    /* A full page's first free: its object comes back before any object
     * of a page not held before. */
    char *x = NULL;
    for (int i = 0; i < n && !x; i++)
        if (v[i] && page_of(v[i]) == full[1]) {
            x = v[i];
            nbm_free(x);
            v[i] = NULL;
        }
    int got = 0, fresh = 0;
    for (int t = 0; t < 64 && !got; t++) {
        char *y = nbm_malloc(EDGE_SIZE);
        CHECK(y != NULL);
        if (!y)
            break;
        int old = 0;
        for (int k = 0; k < n; k++)
            old |= known[k] == page_of(y);
        fresh += !old;
        got = y == x;
        for (int i = 0; i < n; i++) /* keep it: freed at the end */
            if (!v[i]) {
                v[i] = y;
                break;
            }
    }
    CHECK(got);
    CHECK_EQ(fresh, 0);
out:
    edge_release(v, n);
}

/* The thread's list takes a free of any page: once the bin has moved on
 * to a second page (whose objects are on the list), a free of an object of
 * the first page is the next malloc's object (the former bin held the
 * current page's objects only and handed out the second page's first). */
static void test_list_any_page(void)
{
    static char *v[EDGE_N];
    int n = 0;
    nbm_purge();
    if (!edge_fill_to_second_page(v, &n))
        goto out;
    char *x = v[0];
    nbm_free(x);
    v[0] = NULL;
    char *y = nbm_malloc(EDGE_SIZE);
    CHECK(y == x);
    nbm_free(y);
out:
    edge_release(v, n);
}

/* A list whose class goes idle goes back at the heartbeat (every 4096
 * mallocs on the fast path): a full page's 16 objects freed onto the list
 * (room: lim 16 after the refill of the next page, and its pop) keep the
 * page; 3 x 4096 mallocs of another class later (two heartbeats: the
 * first marks the list's head, the second finds it unchanged) the list
 * was sent and the page given back. (Main gave it back at once: the
 * first count fails there.) */
static void test_idle_list(void)
{
    static char *v[EDGE_N];
    int n = 0;
    nbm_purge();
    nbm_free(nbm_malloc(32)); /* its page is there before the count */
    if (!edge_fill_to_second_page(v, &n))
        goto out;
    CHECK_EQ(n - 1, EDGE_CAP); /* the first page full, one object of the next */
    nbm_stats_t before, after;
    nbm_get_stats(&before);
    for (int i = 0; i < n - 1; i++) {
        nbm_free(v[i]);
        v[i] = NULL;
    }
    nbm_get_stats(&after);
    CHECK_EQ(after.chunks, before.chunks); /* on the list: the page is in use */
    for (int i = 0; i < 3 * 4096; i++)
        nbm_free(nbm_malloc(32));
    nbm_get_stats(&after);
    CHECK_EQ(after.chunks + 1, before.chunks);
out:
    edge_release(v, n);
}

/* The page a switch leaves (used up, full) joins the avail list at once,
 * at its end, so its first free is no edge for free's fast path: three full
 * pages A, B, C (C current); B's first free, and the next malloc switches
 * to B (returning that object: C goes on the list, full); then A's first
 * free (A joins the list behind C) and one of C's (C is on it already);
 * B is used up, so the next malloc switches to C and returns C's object.
 * (Had C joined at its first free, A would be first: A's object.) */
static int page_full(char **v, int n, uintptr_t pg)
{
    int same = 0;
    for (int k = 0; k < n; k++)
        same += v[k] && page_of(v[k]) == pg;
    return same == EDGE_CAP;
}

static char *free_one_of(char **v, int n, uintptr_t pg)
{
    for (int i = 0; i < n; i++)
        if (v[i] && page_of(v[i]) == pg) {
            char *x = v[i];
            nbm_free(x);
            v[i] = NULL;
            return x;
        }
    return NULL;
}

static void test_switch_order(void)
{
    static char *v[EDGE_N + 2]; /* the fill, and the two switches' objects */
    int n = 0;
    nbm_purge();
    for (;;) { /* until the current page is full and two earlier ones too */
        if (!edge_next(v, &n))
            goto out;
        if (n >= 3 * EDGE_CAP && page_full(v, n, page_of(v[n - 1])))
            break;
    }
    uintptr_t c = page_of(v[n - 1]), a = 0, b = 0;
    for (int i = 0; i < n && !b; i++) {
        uintptr_t pg = page_of(v[i]);
        if (pg == c || pg == a || !page_full(v, n, pg))
            continue;
        if (!a)
            a = pg;
        else
            b = pg;
    }
    CHECK(a != 0 && b != 0);
    if (!a || !b)
        goto out;
    char *xb = free_one_of(v, n, b);
    char *y = nbm_malloc(EDGE_SIZE); /* the switch to B */
    CHECK(y == xb);
    v[n++] = y;
    free_one_of(v, n, a);
    char *xc = free_one_of(v, n, c);
    char *z = nbm_malloc(EDGE_SIZE); /* B used up: the switch to C */
    CHECK(z == xc);
    v[n++] = z;
out:
    edge_release(v, n);
}

/* --- page colour ----------------------------------------------------------- */
#define COLOUR_SIZE 48 /* a class no other test here uses: 1365 objects a 64 KiB page */
#define COLOUR_N    (24 * 1365)

static void test_colour(void)
{
    static void *v[COLOUR_N];
    uintptr_t pages[64];
    int npages = 0, bad = 0, steps = 0;
    for (int i = 0; i < COLOUR_N; i++) {
        v[i] = nbm_malloc(COLOUR_SIZE);
        CHECK(v[i] != NULL);
        if (!v[i])
            return;
        uintptr_t pg = page_of(v[i]);
        int seen = 0;
        for (int k = 0; k < npages; k++)
            seen |= pages[k] == pg;
        if (seen || npages == 64)
            continue;
        /* The first object this page handed out. */
        pages[npages++] = pg;
        unsigned step = (unsigned)((pg >> 16) ^ (7u * ((pg >> 30) & 1u))) & 7u;
        uintptr_t want = (step * 512u + COLOUR_SIZE - 1) / COLOUR_SIZE * COLOUR_SIZE;
        bad += (uintptr_t)v[i] - pg != want;
        steps |= 1 << (((uintptr_t)v[i] - pg) >> 9);
    }
    CHECK_EQ(bad, 0);
    CHECK(npages >= 20);
    CHECK(__builtin_popcount((unsigned)steps) >= 4); /* spread, not all at the start */
    for (int i = 0; i < COLOUR_N; i++)
        nbm_free(v[i]);
    nbm_purge();
}

/* --- producers and consumers ----------------------------------------------- */
#define RING 1024
static _Atomic uintptr_t ring[RING];
static _Atomic long overlaps, produced, consumed;
static long per_producer = 200000;
static _Atomic int producers_left;

static void stamp(uint64_t *p, size_t words, uint64_t serial)
{
    for (size_t k = 0; k < words; k++)
        p[k] = (uint64_t)(uintptr_t)p ^ serial ^ k;
}

static int stamped(const uint64_t *p, size_t words, uint64_t serial)
{
    for (size_t k = 0; k < words; k++)
        if (p[k] != ((uint64_t)(uintptr_t)p ^ serial ^ k))
            return 0;
    return 1;
}

/* --- held frees from many pages of many heaps ------------------------------- */
/* Three owners allocate MIXED_N objects each (several 64 KiB pages); the main
 * thread frees them interleaved (every free remote, the pages and heaps
 * mixed in its held list, which fills and pushes its older half again and
 * again) and allocates one object per three frees (served from the held
 * list), stamped. No object may be handed out twice (addresses distinct,
 * stamps intact) or lost: once everything is freed and the owners have
 * exited, nbm_purge leaves no more pages than before. */
#define MIXED_OWNERS 3
#define MIXED_N      3000
static uint64_t *mixed_objs[MIXED_OWNERS][MIXED_N];
static atomic_int mixed_phase, mixed_nulls;

static void *mixed_owner(void *arg)
{
    uint64_t **v = arg;
    for (int i = 0; i < MIXED_N; i++) {
        v[i] = nbm_malloc(64);
        if (!v[i])
            atomic_fetch_add(&mixed_nulls, 1); /* checked by the main thread: CHECK is not thread-safe */
    }
    atomic_fetch_add(&mixed_phase, 1);
    while (atomic_load(&mixed_phase) < MIXED_OWNERS + 1)
        sched_yield();
    return NULL;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

static void test_held_mixed(void)
{
    nbm_purge();
    nbm_stats_t s0, s1;
    nbm_get_stats(&s0);
    pthread_t t[MIXED_OWNERS];
    atomic_store(&mixed_phase, 0);
    for (int k = 0; k < MIXED_OWNERS; k++)
        CHECK(pthread_create(&t[k], NULL, mixed_owner, mixed_objs[k]) == 0);
    while (atomic_load(&mixed_phase) < MIXED_OWNERS)
        sched_yield();
    CHECK_EQ(atomic_load(&mixed_nulls), 0);
    if (atomic_load(&mixed_nulls) != 0) {
        atomic_store(&mixed_phase, MIXED_OWNERS + 1);
        for (int k = 0; k < MIXED_OWNERS; k++)
            pthread_join(t[k], NULL);
        return;
    }
    enum { GOT = MIXED_OWNERS * MIXED_N / 3 };
    static uint64_t *got[GOT];
    int ngot = 0;
    uint64_t serial = 0x5eed;
    for (int i = 0; i < MIXED_N; i++) {
        /* Owners in turn, each at a stride through its objects: pages mix. */
        int j = (int)(((long)i * 7) % MIXED_N);
        for (int k = 0; k < MIXED_OWNERS; k++)
            nbm_free(mixed_objs[k][j]);
        uint64_t *p = nbm_malloc(64);
        CHECK(p != NULL);
        stamp(p, 8, serial + (uint64_t)ngot);
        got[ngot++] = p;
    }
    size_t bad = 0;
    for (int i = 0; i < ngot; i++)
        bad += !stamped(got[i], 8, serial + (uint64_t)i);
    CHECK_EQ(bad, 0);
    qsort(got, (size_t)ngot, sizeof got[0], cmp_ptr);
    size_t dup = 0;
    for (int i = 1; i < ngot; i++)
        dup += got[i] == got[i - 1];
    CHECK_EQ(dup, 0);
    for (int i = 0; i < ngot; i++)
        nbm_free(got[i]);
    nbm_thread_flush(); /* the held objects go back to their pages */
    atomic_store(&mixed_phase, MIXED_OWNERS + 1);
    for (int k = 0; k < MIXED_OWNERS; k++)
        pthread_join(t[k], NULL);
    nbm_purge(); /* the exited owners' heaps: every page empty, given back */
    nbm_get_stats(&s1);
    CHECK(s1.chunks <= s0.chunks);
    printf("held frees of %d heaps mixed: %d objects reused, pages %zu before, %zu after\n", MIXED_OWNERS, ngot,
           (size_t)s0.chunks, (size_t)s1.chunks);
}

/* Slot layout: the object; its first two words hold size and serial, the
 * rest the stamp. */
static void *producer(void *arg)
{
    uint64_t r = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15u + 1;
    for (long i = 0; i < per_producer; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        size_t size = 32 + (r % 4 ? r % 200 : r % 3000);
        size_t words = size / 8;
        uint64_t *p = nbm_malloc(size);
        if (!p) {
            atomic_fetch_add(&overlaps, 1000000);
            break;
        }
        p[0] = words;
        p[1] = r;
        stamp(p + 2, words - 2, r);
        uintptr_t none = 0;
        unsigned k = (unsigned)(r >> 20) % RING;
        while (!atomic_compare_exchange_weak(&ring[k], &none, (uintptr_t)p)) {
            none = 0;
            k = (k + 1) % RING;
        }
        atomic_fetch_add(&produced, 1);
    }
    atomic_fetch_sub(&producers_left, 1);
    return NULL;
}

static void *consumer(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg * 97;
    for (;;) {
        uintptr_t v = atomic_exchange(&ring[k], 0);
        k = (k + 1) % RING;
        if (!v) {
            if (atomic_load(&producers_left) == 0 && atomic_load(&consumed) == atomic_load(&produced))
                return NULL;
            continue;
        }
        uint64_t *p = (uint64_t *)v;
        if (!stamped(p + 2, p[0] - 2, p[1]) || nbm_usable_size(p) < p[0] * 8)
            atomic_fetch_add(&overlaps, 1);
        nbm_free(p);
        atomic_fetch_add(&consumed, 1);
    }
}

static void test_prodcons(int pairs)
{
    pthread_t t[16];
    atomic_store(&producers_left, pairs);
    for (int i = 0; i < pairs; i++) {
        CHECK(pthread_create(&t[2 * i], NULL, producer, (void *)(uintptr_t)(i + 1)) == 0);
        CHECK(pthread_create(&t[2 * i + 1], NULL, consumer, (void *)(uintptr_t)(i + 1)) == 0);
    }
    for (int i = 0; i < 2 * pairs; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&overlaps), 0);
    CHECK_EQ(atomic_load(&consumed), (long)pairs * per_producer);
    /* Every object was freed by a consumer onto a producer's page; the
     * producers exited: nbm_purge collects their heaps. */
    nbm_purge();
    nbm_stats_t s;
    nbm_get_stats(&s);
    CHECK(s.chunk_bytes < ((size_t)1 << 20));
    printf("producers/consumers: %d pairs x %ld objects, pages left %zu KiB\n", pairs, per_producer,
           s.chunk_bytes >> 10);
}

int main(int argc, char **argv)
{
    int mib_opt = 256, objects = (int)per_producer;
    test_options(argc, argv, (const test_option_t[]){
        { "--mib", TEST_OPT_INT, &mib_opt }, { "--objects", TEST_OPT_INT, &objects }, { 0 } });
    if (mib_opt < 1 || objects < 1) {
        fprintf(stderr, "nbm_test_pages: --mib and --objects must be at least 1\n");
        return 2;
    }
    size_t mib = (size_t)mib_opt;
    per_producer = objects;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    int check_rss = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    int check_rss = 0;
#else
    int check_rss = 1;
#endif
#else
    int check_rss = 1;
#endif
    test_return(mib, check_rss);
    test_stats_threads();
    test_spare_revive(2560, 200, 50, true);
    test_spare_revive(192, 1400, 300, false);
    test_owner_edges();
    test_list_any_page();
    test_idle_list();
    test_switch_order();
    test_colour();
    test_remote_page_reuse();
    test_held_remote();
    test_held_many();
    test_held_bound();
    test_held_heartbeat();
    test_held_mixed();
    test_prodcons(2);
    TEST_MAIN_END();
}
