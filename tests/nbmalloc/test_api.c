/*
 * test_api.c - every nbm_* function once, with its edge cases, and the
 * error paths (bad pointers and double frees must abort with one line).
 * Each check prints what failed; the exit code is non-zero if any did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbmalloc.h"

/* Sanitizers whose runtime cannot start a thread in the child of a threaded
 * fork: TSan refuses; clang-14's ASan takes its allocator's locks without
 * fork handlers, so the child's pthread_create can wait for ever on a lock
 * another parent thread held at the fork (seen: 4 of 12 runs). The child's
 * own allocations are still checked under both. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define NO_THREAD_AFTER_FORK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define NO_THREAD_AFTER_FORK 1
#endif
#endif
#ifndef NO_THREAD_AFTER_FORK
#define NO_THREAD_AFTER_FORK 0
#endif

#include "child.h"
#include "../check.h" /* CHECK, and the "N passed, N failed" line */

static bool aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static bool all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return false;
    return true;
}

static void test_malloc_sizes(void)
{
    void *z1 = nbm_malloc(0), *z2 = nbm_malloc(0);
    CHECK(z1 && z2 && z1 != z2);
    nbm_free(z1);
    nbm_free(z2);
    nbm_free(NULL);
    /* every small size, then medium sizes around each power of two */
    for (size_t n = 1; n <= NBM_SMALL_MAX + 64; n += (n < 2048 ? 1 : 61)) {
        unsigned char *p = nbm_malloc(n);
        CHECK(p && aligned(p, NBM_MIN_ALIGN));
        size_t us = nbm_usable_size(p);
        CHECK(us >= n);
        memset(p, 0x5a, us);
        nbm_free(p);
    }
    for (size_t n = NBM_SMALL_MAX; n <= NBM_MEDIUM_MAX; n *= 2) {
        size_t sizes[3] = { n - 1, n, n + 1 };
        for (int k = 0; k < 3; k++) {
            unsigned char *p = nbm_malloc(sizes[k]);
            CHECK(p != NULL);
            if (!p)
                continue;
            CHECK(nbm_usable_size(p) >= sizes[k]);
            p[0] = 1, p[sizes[k] - 1] = 2;
            nbm_free(p);
        }
    }
    /* huge */
    size_t big = NBM_MEDIUM_MAX * 2 + 12345;
    unsigned char *h = nbm_malloc(big);
    CHECK(h && aligned(h, 4096) && nbm_usable_size(h) >= big);
    if (h) {
        h[0] = 1, h[big - 1] = 2;
        nbm_free(h);
    }
    errno = 0;
    CHECK(nbm_malloc(SIZE_MAX) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(nbm_malloc((size_t)1 << 62) == NULL && errno == ENOMEM);
    CHECK(nbm_usable_size(NULL) == 0);
}

static void test_calloc(void)
{
    /* dirty memory first, so calloc must really clear it */
    size_t sizes[] = { 1, 24, 1000, 5000, NBM_SMALL_MAX, 100000, 3 << 20, NBM_MEDIUM_MAX + 1 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *d = nbm_malloc(n);
        CHECK(d != NULL);
        memset(d, 0xaa, n);
        nbm_free(d);
        unsigned char *c = nbm_calloc(1, n);
        CHECK(c && all_bytes(c, n, 0));
        memset(c, 0xbb, n);
        nbm_free(c);
        c = nbm_calloc(n, 1);
        CHECK(c && all_bytes(c, n, 0));
        nbm_free(c);
    }
    void *z = nbm_calloc(0, 0);
    CHECK(z != NULL);
    nbm_free(z);
    errno = 0;
    CHECK(nbm_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(nbm_calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM);
}

static void test_realloc(void)
{
    /* grow across every class and into medium, keeping the contents */
    unsigned char *p = nbm_realloc(NULL, 1);
    CHECK(p != NULL);
    p[0] = 0;
    size_t n = 1;
    while (n < 300000) {
        size_t m = n + n / 3 + 1;
        unsigned char *q = nbm_realloc(p, m);
        CHECK(q != NULL);
        if (!q)
            return;
        bool ok = true;
        for (size_t i = 0; i < n; i++)
            ok &= q[i] == (unsigned char)(i * 7);
        CHECK(ok);
        for (size_t i = n; i < m; i++)
            q[i] = (unsigned char)(i * 7);
        p = q, n = m;
    }
    /* and shrink back */
    while (n > 1) {
        size_t m = n / 2;
        unsigned char *q = nbm_realloc(p, m);
        CHECK(q != NULL);
        bool ok = true;
        for (size_t i = 0; i < m; i++)
            ok &= q[i] == (unsigned char)(i * 7);
        CHECK(ok);
        p = q, n = m;
    }
    /* in place when the block has room */
    unsigned char *a = nbm_malloc(100);
    size_t us = nbm_usable_size(a);
    CHECK(nbm_realloc(a, us) == a);
    CHECK(nbm_realloc(a, us - 5) == a);
    unsigned char *m = nbm_malloc(40000);
    CHECK(nbm_realloc(m, nbm_usable_size(m)) == m);
    nbm_free(m);
    CHECK(nbm_realloc(a, 0) == NULL); /* frees a */
    nbm_free(p);
    /* reallocarray */
    void *r = nbm_reallocarray(NULL, 10, 10);
    CHECK(r && nbm_usable_size(r) >= 100);
    errno = 0;
    CHECK(nbm_reallocarray(r, SIZE_MAX / 2, 4) == NULL && errno == ENOMEM);
    r = nbm_reallocarray(r, 100, 100);
    CHECK(r && nbm_usable_size(r) >= 10000);
    nbm_free(r);
    /* a failed realloc leaves the block alone */
    unsigned char *k = nbm_malloc(50);
    k[0] = 42;
    errno = 0;
    CHECK(nbm_realloc(k, SIZE_MAX - 100) == NULL && errno == ENOMEM && k[0] == 42);
    nbm_free(k);
}

static void test_aligned(void)
{
    for (size_t al = 8; al <= ((size_t)1 << 20); al *= 2) {
        size_t sizes[] = { 1, al - 1, al, 3 * al + 5, 100000 };
        for (int k = 0; k < 5; k++) {
            size_t n = sizes[k] ? sizes[k] : 1;
            unsigned char *p = nbm_aligned_alloc(al, n);
            CHECK(p && aligned(p, al));
            if (!p)
                continue;
            CHECK(nbm_usable_size(p) >= n);
            memset(p, 1, n);
            void *q = NULL;
            CHECK(nbm_posix_memalign(&q, al, n) == 0 && aligned(q, al));
            nbm_free(p);
            nbm_free(q);
        }
    }
    /* beyond the back-end's blocks: huge mappings, still aligned */
    void *h = nbm_aligned_alloc((size_t)128 << 20, 10);
    CHECK(h && aligned(h, (size_t)128 << 20));
    nbm_free(h);
    /* Every alignment glibc serves, up to 2 GiB: allocated, usable, freed. */
    for (size_t al = (size_t)64 << 20; al <= ((size_t)2 << 30); al *= 2) {
        void *a = NULL;
        CHECK(nbm_posix_memalign(&a, al, 100) == 0 && a && aligned(a, al));
        if (a) {
            CHECK(nbm_usable_size(a) >= 100);
            memset(a, 3, 100);
            nbm_free(a);
        }
        unsigned char *b = nbm_aligned_alloc(al, al + 1);
        CHECK(b && aligned(b, al));
        if (b) {
            b[0] = 1, b[al] = 2;
            CHECK(nbm_usable_size(b) >= al + 1);
            nbm_free(b);
        }
    }
    /* A request no machine here can back fails cleanly, as under glibc. */
    errno = 0;
    CHECK(nbm_malloc((size_t)64 << 40) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(nbm_aligned_alloc(24, 10) == NULL && errno == EINVAL);
    CHECK(nbm_aligned_alloc(0, 10) == NULL);
    void *q = (void *)1;
    CHECK(nbm_posix_memalign(&q, 4, 10) == EINVAL && q == (void *)1);
    CHECK(nbm_posix_memalign(&q, 24, 10) == EINVAL);
    CHECK(nbm_posix_memalign(&q, 64, SIZE_MAX - 4096) == ENOMEM && q == (void *)1);
    void *v = nbm_valloc(10);
    CHECK(v && aligned(v, 4096));
    nbm_free(v);
    void *pv = nbm_pvalloc(5000);
    CHECK(pv && aligned(pv, 4096) && nbm_usable_size(pv) >= 8192);
    nbm_free(pv);
    pv = nbm_pvalloc(0);
    CHECK(pv && aligned(pv, 4096));
    nbm_free(pv);
}

/* Runs fn in a child; expects SIGABRT and `want` plus the pointer on stderr. */
static void expect_abort(const char *name, void (*fn)(void **), const char *want)
{
    CHECK(child_aborts(name, fn, want));
}

static void bad_stack(void **s) { (void)s; int x = 0; nbm_free(&x); }
static void bad_heap_libc(void **s) { (void)s; nbm_free(malloc(10)); }
static void bad_interior_small(void **s) { (void)s; char *p = nbm_malloc(64); nbm_free(p + 16); }
static void bad_odd_small(void **s) { (void)s; char *p = nbm_malloc(48); nbm_free(p + 8); }
static void double_small(void **s) { (void)s; void *p = nbm_malloc(32); nbm_free(p); nbm_free(p); }
static void double_small_late(void **s)
{
    (void)s;
    void *p = nbm_malloc(32);
    nbm_free(p);
    void *others[300];
    for (int i = 0; i < 300; i++) /* p leaves the cache in a batch */
        nbm_free(others[i] = nbm_malloc(32));
    (void)others;
    nbm_free(p);
}
static void *free_twice(void *p)
{
    nbm_free(p); /* held by this thread: another heap's object */
    nbm_free(p);
    return NULL;
}
static void double_small_remote(void **s)
{
    (void)s;
    pthread_t t;
    void *p = nbm_malloc(48);
    if (pthread_create(&t, NULL, free_twice, p) == 0)
        pthread_join(t, NULL);
}
static void double_medium(void **s) { (void)s; void *p = nbm_malloc(100000); nbm_free(p); nbm_free(p); }
static void interior_medium(void **s) { (void)s; char *p = nbm_malloc(100000); nbm_free(p + 4096); }
static void double_huge(void **s) { (void)s; void *p = nbm_malloc(NBM_MEDIUM_MAX + 1); nbm_free(p); nbm_free(p); }
static void interior_huge(void **s) { (void)s; char *p = nbm_malloc(NBM_MEDIUM_MAX + 1); nbm_free(p + 64); }
/* The first object a new chunk of 64-byte objects hands out (at the
 * chunk's colour, docs/nbmalloc.md): only the chunk's first batch (64
 * objects, the colour among them) is carved. */
static char *chunk_first_64(void)
{
    uintptr_t prev = 0;
    for (int i = 0; i < 100000; i++) {
        char *p = nbm_malloc(64);
        uintptr_t chunk = (uintptr_t)p & ~(uintptr_t)0xffff;
        unsigned step = (unsigned)((chunk >> 16) ^ (7u * ((chunk >> 30) & 1u))) & 7u;
        if (prev && chunk != prev && (uintptr_t)p - chunk == step * 512u)
            return p;
        prev = chunk;
    }
    abort();
}
/* Object-aligned, inside a chunk, never carved: never handed out. */
static void never_carved_small(void **s)
{
    (void)s;
    char *p = chunk_first_64();
    nbm_free((char *)((uintptr_t)p & ~(uintptr_t)0xffff) + 1000 * 64);
}
/* Carved onto the free list with p's batch, never handed out: the next
 * object, or the chunk's first when p is the batch's last. */
static void carved_unused_small(void **s)
{
    (void)s;
    char *p = chunk_first_64(), *base = (char *)((uintptr_t)p & ~(uintptr_t)0xffff);
    nbm_free(p + 64 < base + 64 * 64 ? p + 64 : base);
}
static void freed_usable(void **s) { (void)s; void *p = nbm_malloc(32); nbm_free(p); (void)nbm_usable_size(p); }
static void freed_realloc(void **s) { (void)s; void *p = nbm_malloc(32); nbm_free(p); (void)nbm_realloc(p, 100); }
static void double_medium_shared(void **s)
{   /* the second block of an order goes past the thread's one-block cache
       to the shared one (emptied first: it is capped) */
    (void)s;
    nbm_purge();
    void *a = nbm_malloc(100000), *b = nbm_malloc(100000);
    nbm_free(a);
    nbm_free(b);
    nbm_free(b);
}
static void freed_huge_usable(void **s) { (void)s; void *p = nbm_malloc(NBM_MEDIUM_MAX + 1); nbm_free(p); (void)nbm_usable_size(p); }
static void bad_usable(void **s) { (void)s; int x = 0; (void)nbm_usable_size(&x); }
static void bad_realloc(void **s) { (void)s; int x = 0; (void)nbm_realloc(&x, 10); }

static void test_bad_input(void)
{
    expect_abort("stack", bad_stack, "free(): invalid pointer");
    expect_abort("libc heap", bad_heap_libc, "free(): invalid pointer");
    expect_abort("interior small", bad_interior_small, "free(): invalid pointer");
    expect_abort("misaligned small", bad_odd_small, "free(): invalid pointer");
    expect_abort("double small", double_small, "double free");
    expect_abort("double small (batched)", double_small_late, "double free");
    expect_abort("double small (held remote free)", double_small_remote, "free(): double free");
    expect_abort("never carved small", never_carved_small, "free(): invalid pointer");
    expect_abort("carved, never handed out", carved_unused_small, "free(): double free");
    expect_abort("freed usable", freed_usable, "malloc_usable_size(): freed pointer");
    expect_abort("freed realloc", freed_realloc, "realloc(): freed pointer");
    expect_abort("double medium", double_medium, "free(): double free");
    expect_abort("double medium (shared cache)", double_medium_shared, "free(): double free");
    expect_abort("interior medium", interior_medium, "free(): invalid pointer");
    expect_abort("double huge", double_huge, "free(): double free");
    expect_abort("freed huge usable", freed_huge_usable, "malloc_usable_size(): freed pointer");
    expect_abort("interior huge", interior_huge, "free(): invalid pointer");
    expect_abort("usable size", bad_usable, "malloc_usable_size(): invalid pointer");
    expect_abort("realloc", bad_realloc, "realloc(): invalid pointer");
}

/* --- threads: exit returns the cache; fork leaves a usable allocator ---------- */
static _Atomic int stop;

static void *churn(void *arg)
{
    (void)arg;
    void *keep[64] = { 0 };
    unsigned i = 0;
    while (!stop) {
        unsigned k = i++ % 64;
        nbm_free(keep[k]);
        keep[k] = nbm_malloc(8 + (i * 37) % 3000);
    }
    for (int k = 0; k < 64; k++)
        nbm_free(keep[k]);
    return NULL;
}

static void test_threads_and_fork(void)
{
    nbm_stats_t before, after;
    nbm_get_stats(&before);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, churn, NULL);
    for (int f = 0; f < 5; f++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* only this thread exists now; the others held caches and maybe
             * batches in flight: the allocator must still work */
            for (int i = 0; i < 100000; i++) {
                void *p = nbm_malloc((size_t)(i % 5000) + 1);
                if (!p)
                    _exit(1);
                memset(p, 1, (size_t)(i % 5000) + 1);
                nbm_free(p);
            }
            void *m = nbm_malloc(1 << 20);
            nbm_free(m);
            if (NO_THREAD_AFTER_FORK) /* see its definition */
                _exit(0);
            pthread_t c;
            if (pthread_create(&c, NULL, churn, NULL) != 0)
                _exit(2);
            usleep(10000);
            stop = 1;
            pthread_join(c, NULL);
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        usleep(2000);
    }
    stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    stop = 0;
    nbm_get_stats(&after);
    CHECK(after.threads >= before.threads + 3);
    /* The exited threads' heaps are abandoned whole; nbm_purge collects
     * them, and their empty pages go back. */
    nbm_purge();
    nbm_get_stats(&after);
    CHECK(after.drains > before.drains);
}

/* --- adoption: a new thread takes an exited thread's heap as it was ------------ */
static void *one_small(void *arg)
{
    (void)arg;
    void *p = nbm_malloc(48);
    nbm_free(p);
    return p; /* only compared with NULL (CHECK is not for other threads) */
}

static uint64_t refills_after_thread(void)
{
    pthread_t t;
    void *got = NULL;
    CHECK(pthread_create(&t, NULL, one_small, NULL) == 0);
    pthread_join(t, &got);
    CHECK(got != NULL);
    nbm_stats_t st;
    nbm_get_stats(&st);
    return st.refills;
}

static void test_adopt_warm(void)
{
    /* The first thread leaves a page of the class (with free objects) in its
     * heap; the next one adopts that heap (the last abandoned) and serves its
     * malloc from it: no page taken. A heap swept at exit would take one. */
    uint64_t r1 = refills_after_thread();
    uint64_t r2 = refills_after_thread();
    CHECK(r2 == r1);
}

static void test_stats_and_purge(void)
{
    /* a large block freed and purged: its pages go back to the OS */
    nbm_stats_t s0, s1;
    char *p = nbm_malloc(8 << 20);
    memset(p, 1, 8 << 20);
    nbm_get_stats(&s0);
    nbm_free(p);
    nbm_purge();
    nbm_get_stats(&s1);
    CHECK(s1.purged_bytes >= s0.purged_bytes + (8 << 20));
    CHECK(s1.medium_cached == 0);
    /* a freed block is reused while cached (same order) */
    void *a = nbm_malloc(600000);
    nbm_free(a);
    void *b = nbm_malloc(600000);
    CHECK(a == b);
    nbm_free(b);
    /* arenas grow past the first one without touching memory */
    enum { N = 24 };
    void *blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = nbm_malloc(NBM_MEDIUM_MAX);
        CHECK(blocks[i] != NULL);
    }
    nbm_get_stats(&s1);
    CHECK(s1.arenas >= 2);
    for (int i = 0; i < N; i++)
        nbm_free(blocks[i]);
    nbm_purge();
    /* the printer */
    int fds[2];
    CHECK(pipe(fds) == 0);
    nbm_stats_print(fds[1]);
    close(fds[1]);
    char buf[4096] = { 0 };
    ssize_t r = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    CHECK(r > 0 && strstr(buf, "nbmalloc: statistics") && strstr(buf, "arenas"));
}

int main(void)
{
    test_malloc_sizes();
    test_calloc();
    test_realloc();
    test_aligned();
    test_bad_input();
    test_threads_and_fork();
    test_adopt_warm();
    test_stats_and_purge();
    nbm_thread_flush();
    TEST_MAIN_END();
}
