/*
 * test_override.c - run under LD_PRELOAD=libnbmalloc.so: the libc names must
 * be nbmalloc's, behave as C and glibc specify, and report bad frees.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h" /* CHECK, and the "N passed, N failed" line */

static void *volatile sink;

static int child_status(void (*fn)(void), char *buf, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        fn();
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < len - 1 && (r = read(fds[0], buf + got, len - 1 - got)) > 0)
        got += (size_t)r;
    buf[got] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return st;
}

static void bad_free(void) { char x[16]; sink = x; free(sink); }
static void double_free(void) { sink = malloc(40); free(sink); free(sink); }

int main(void)
{
    /* the preloaded library is the one answering */
    void *(*nbm)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "nbm_malloc");
    CHECK(nbm != NULL);
    void *p = malloc(100);
    CHECK(p && malloc_usable_size(p) == 112); /* nbmalloc's class; glibc says 104 */
    p = realloc(p, 5000);
    CHECK(p && malloc_usable_size(p) >= 5000);
    free(p);
    errno = 0;
    size_t huge = SIZE_MAX / 2 + (size_t)(uintptr_t)sink; /* not a constant: no compile-time warning */
    CHECK(calloc(huge, 3) == NULL && errno == ENOMEM);
    char *c = calloc(1000, 1);
    CHECK(c && c[999] == 0);
    free(c);
    errno = 0;
    CHECK(reallocarray(NULL, huge, 4) == NULL && errno == ENOMEM);
    void *q = NULL;
    CHECK(posix_memalign(&q, 4096, 10) == 0 && ((uintptr_t)q & 4095) == 0);
    free(q);
    q = aligned_alloc(1 << 20, 100);
    CHECK(q && ((uintptr_t)q & ((1 << 20) - 1)) == 0);
    free(q);
    volatile size_t odd_align = 96; /* a constant would draw a compiler warning */
    q = memalign(odd_align, 100); /* glibc rounds a non-power of two up */
    CHECK(q && ((uintptr_t)q & 127) == 0);
    free(q);
    /* glibc rounds up to 2^63 too, so an alignment between 2^62 and 2^63
     * fails with ENOMEM (no such block), and only one above 2^63 (no power
     * of two to round to) with EINVAL */
    errno = 0;
    CHECK(memalign(((size_t)1 << 62) + odd_align, 1) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(memalign(((size_t)1 << 63) + odd_align, 1) == NULL && errno == EINVAL);
    q = valloc(1);
    CHECK(q && ((uintptr_t)q & 4095) == 0);
    free(q);
    q = pvalloc(1);
    CHECK(q && ((uintptr_t)q & 4095) == 0 && malloc_usable_size(q) >= 4096);
    free(q);
    /* malloc_trim is nbmalloc's: a freed cached block goes back (1), then
     * nothing is left to return (0) */
    char *big = malloc(8 << 20);
    CHECK(big != NULL);
    memset(big, 1, 8 << 20);
    free(big);
    CHECK(malloc_trim(0) == 1);
    CHECK(malloc_trim(0) == 0);
    char *s = strdup("preloaded"); /* allocated inside libc */
    CHECK(s && malloc_usable_size(s) == 16);
    free(s);
    /* malloc_trim is nbmalloc's: freed small-object pages go back */
    typedef struct { size_t v[13]; } stats_t; /* nbm_stats_t: 13 size_t, chunk_bytes the 4th */
    void (*get_stats)(stats_t *) = (void (*)(stats_t *))dlsym(RTLD_DEFAULT, "nbm_get_stats");
    CHECK(get_stats != NULL);
    if (get_stats) {
        enum { N = 64 << 10 }; /* 4 MiB of 64-byte objects */
        static void *objs[N];
        stats_t st0, st1;
        for (int i = 0; i < N; i++)
            objs[i] = malloc(64);
        get_stats(&st0);
        for (int i = 0; i < N; i++)
            free(objs[i]);
        CHECK(malloc_trim(0) == 1);
        get_stats(&st1);
        CHECK(st0.v[3] >= (size_t)4 << 20 && st1.v[3] < (size_t)1 << 20);
    }
    char buf[256];
    int st = child_status(bad_free, buf, sizeof buf);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, "nbmalloc: free(): invalid pointer 0x"));
    st = child_status(double_free, buf, sizeof buf);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, "nbmalloc: free(): double free detected for 0x"));
    TEST_MAIN_END();
}
