/*
 * test_classes.c - the large size classes (above NBM_SMALL_MAX up to 128 KiB):
 * every size gets at most 1/8 more than it asked for, the memory is its own
 * (stamped and checked while many are live), realloc keeps the bytes, the
 * pages go back when their objects do (also when another thread frees them),
 * and bad frees of large objects abort with the message: double free (the
 * page still in use, or emptied), interior, never carved (in a big page's
 * first unit and past it), freed pointer to realloc and malloc_usable_size.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbmalloc.h"

#include "child.h"
#include "../check.h"

#define KIB ((size_t)1 << 10)
#define LARGE_MAX ((size_t)1 << 17) /* the last class */

/* Sizes to try: 16 KiB .. 128 KiB in steps of 1 KiB, and around every class
 * boundary (k/8 of each power of two from 16 KiB). */
static size_t sizes[2048];
static size_t nsizes;

static void make_sizes(void)
{
    for (size_t n = NBM_SMALL_MAX + 1; n <= LARGE_MAX; n += KIB)
        sizes[nsizes++] = n;
    for (size_t p = NBM_SMALL_MAX; p < LARGE_MAX; p *= 2)
        for (size_t k = 1; k <= 8; k++) {
            size_t b = p + k * (p / 8);
            sizes[nsizes++] = b - 1;
            sizes[nsizes++] = b;
            if (b < LARGE_MAX)
                sizes[nsizes++] = b + 1;
        }
}

static void stamp(unsigned char *p, size_t n, unsigned v)
{
    for (size_t i = 0; i < n - 1; i += 512)
        p[i] = (unsigned char)(v + i / 512);
    p[n - 1] = (unsigned char)v;
}

static bool stamped(const unsigned char *p, size_t n, unsigned v)
{
    for (size_t i = 0; i < n - 1; i += 512)
        if (p[i] != (unsigned char)(v + i / 512))
            return false;
    return p[n - 1] == (unsigned char)v;
}

static void test_bound(void)
{
    size_t worst_n = 0;
    double worst = 0;
    for (size_t i = 0; i < nsizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = nbm_malloc(n);
        CHECK(p != NULL && ((uintptr_t)p & (NBM_MIN_ALIGN - 1)) == 0);
        if (!p)
            continue;
        size_t us = nbm_usable_size(p);
        CHECK(us >= n);
        if (us > n + n / 8) {
            fprintf(stderr, "malloc(%zu): usable %zu, above 1.125x\n", n, us);
            CHECK(us <= n + n / 8);
        }
        if ((double)us / (double)n > worst)
            worst = (double)us / (double)n, worst_n = n;
        memset(p, 0x5a, us);
        /* realloc to the next size up keeps the bytes and the bound */
        size_t m = n + n / 3 + 1;
        unsigned char *q = nbm_realloc(p, m);
        CHECK(q != NULL);
        if (!q) {
            nbm_free(p);
            continue;
        }
        bool kept = q[0] == 0x5a && q[n / 2] == 0x5a && q[n - 1] == 0x5a;
        CHECK(kept);
        if (m <= LARGE_MAX)
            CHECK(nbm_usable_size(q) <= m + m / 8);
        nbm_free(q);
    }
    printf("bound: %zu sizes, worst usable/request %.4f (at %zu)\n", nsizes, worst, worst_n);
    /* calloc of a reused (dirty) large object is zero */
    size_t cs[] = { 20000, 100000, 300000, 700000, LARGE_MAX };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        unsigned char *d = nbm_malloc(cs[i]);
        CHECK(d != NULL);
        memset(d, 0xaa, cs[i]);
        nbm_free(d);
        unsigned char *z = nbm_calloc(1, cs[i]);
        bool zero = z != NULL;
        for (size_t k = 0; zero && k < cs[i]; k++)
            zero = z[k] == 0;
        CHECK(zero);
        nbm_free(z);
    }
    /* just past the last class: a medium block, still served */
    unsigned char *b = nbm_malloc(LARGE_MAX + 1);
    CHECK(b && nbm_usable_size(b) > LARGE_MAX);
    nbm_free(b);
}

/* Many live objects per class, each stamped in full: an overlap between two
 * live objects shows as a broken stamp. Freed in a scattered order. */
static void test_live(void)
{
    enum { PER = 24 };
    for (size_t p = NBM_SMALL_MAX; p < LARGE_MAX; p *= 2) {
        for (size_t k = 1; k <= 8; k++) {
            size_t n = p + k * (p / 8) - 100;
            unsigned char *o[PER];
            for (unsigned i = 0; i < PER; i++) {
                o[i] = nbm_malloc(n);
                CHECK(o[i] != NULL);
                if (o[i])
                    stamp(o[i], n, i * 7 + (unsigned)k);
            }
            bool ok = true;
            for (unsigned i = 0; i < PER; i++)
                ok &= !o[i] || stamped(o[i], n, i * 7 + (unsigned)k);
            CHECK(ok);
            for (unsigned i = 0; i < PER; i++)
                nbm_free(o[(i * 5) % PER]);
        }
    }
}

static size_t chunk_bytes(void)
{
    nbm_stats_t s;
    nbm_get_stats(&s);
    return s.chunk_bytes;
}

#define XFER 256
static unsigned char *handed[XFER];
static size_t handed_n[XFER];

static void *consumer(void *arg)
{
    (void)arg;
    int bad = 0;
    for (unsigned i = 0; i < XFER; i++) {
        bad |= !stamped(handed[i], handed_n[i], i);
        nbm_free(handed[i]);
    }
    return (void *)(intptr_t)bad;
}

/* Pages go back: freed by their owner, and freed by another thread (found by
 * the owner's collection). */
static void test_pages_return(void)
{
    nbm_purge();
    size_t base = chunk_bytes();
    for (unsigned i = 0; i < XFER; i++) {
        handed_n[i] = NBM_SMALL_MAX + 1 + (size_t)(i * 7919u) % (LARGE_MAX - NBM_SMALL_MAX);
        handed[i] = nbm_malloc(handed_n[i]);
        CHECK(handed[i] != NULL);
        stamp(handed[i], handed_n[i], i);
    }
    CHECK(chunk_bytes() > base);
    pthread_t t;
    void *bad = (void *)1;
    CHECK(pthread_create(&t, NULL, consumer, NULL) == 0);
    pthread_join(t, &bad);
    CHECK(bad == NULL);
    nbm_purge(); /* takes the remote frees: every page empty, released */
    CHECK_EQ(chunk_bytes(), base);
    /* and by the owner: each page leaves when its last object comes back */
    void *o[64];
    for (unsigned i = 0; i < 64; i++)
        o[i] = nbm_malloc(100 * KIB + i * 3000);
    for (unsigned i = 0; i < 64; i++)
        nbm_free(o[i]);
    nbm_purge();
    CHECK_EQ(chunk_bytes(), base);
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

#define BIG_OBJ  ((size_t)44 << 10) /* 5 to a 256 KiB page: objects past its first 64 KiB unit */
#define BIG_PAGE ((size_t)256 << 10)

/* The first object of a fresh page of the 44 KiB class. */
static char *big_page_start(void)
{
    for (int i = 0; i < 64; i++) {
        char *p = nbm_malloc(BIG_OBJ);
        if (((uintptr_t)p & (BIG_PAGE - 1)) == 0)
            return p;
    }
    abort();
}

static void double_large(void) { void *p = nbm_malloc(20000); nbm_free(p); nbm_free(p); }
static void double_large_busy(void)
{
    void *keep = nbm_malloc(20000), *p = nbm_malloc(20000);
    nbm_free(p);
    nbm_free(p);
    nbm_free(keep);
}
static void interior_large(void) { char *p = nbm_malloc(20000); nbm_free(p + 16); }
static void interior_large_page(void) { char *p = nbm_malloc(20000); nbm_free(p + 4096); }
static void never_carved_large(void) { char *p = big_page_start(); nbm_free(p + 4 * BIG_OBJ); }
static void double_far(void)
{
    char *p = big_page_start(), *q = nbm_malloc(BIG_OBJ), *r = nbm_malloc(BIG_OBJ);
    CHECK(q == p + BIG_OBJ && r == p + 2 * BIG_OBJ);
    nbm_free(r); /* p and q keep the page in use */
    nbm_free(r);
}
static void double_far_empty(void)
{
    char *p = big_page_start(), *q = nbm_malloc(BIG_OBJ);
    nbm_free(p);
    nbm_free(q); /* the page is empty: a spare */
    nbm_free(q);
}
static void interior_far(void) { char *p = big_page_start(); char *q = nbm_malloc(BIG_OBJ); (void)p; nbm_free(q + 8192); }
static void freed_large_usable(void) { void *p = nbm_malloc(300000); nbm_free(p); (void)nbm_usable_size(p); }
static void freed_large_realloc(void) { void *p = nbm_malloc(300000); nbm_free(p); (void)nbm_realloc(p, 10); }

static void test_bad_frees(void)
{
    expect_abort("double free, page emptied", double_large, "free(): double free");
    expect_abort("double free, page in use", double_large_busy, "free(): double free");
    expect_abort("interior", interior_large, "free(): invalid pointer");
    expect_abort("interior, page offset", interior_large_page, "free(): invalid pointer");
    expect_abort("never carved, past the first unit", never_carved_large, "free(): invalid pointer");
    expect_abort("double free past the first unit", double_far, "free(): double free");
    expect_abort("double free past the first unit, page emptied", double_far_empty, "free(): double free");
    expect_abort("interior past the first unit", interior_far, "free(): invalid pointer");
    expect_abort("usable size of a freed object", freed_large_usable, "malloc_usable_size(): freed pointer");
    expect_abort("realloc of a freed object", freed_large_realloc, "realloc(): freed pointer");
}

int main(void)
{
    make_sizes();
    test_bound();
    test_live();
    test_pages_return();
    test_bad_frees();
    TEST_MAIN_END();
}
