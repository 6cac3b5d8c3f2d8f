/*
 * test_small.c - what nbmalloc makes resident for a program that uses little.
 *
 *   calloc-reuse: a 2 MiB block, of which the program touched 64 KiB and one
 *     page, is freed (kept by the medium cache) and handed out again by a
 *     calloc of the same size: it reads as zeros everywhere, and the calloc
 *     makes no more than the touched pages resident (a memset of the whole
 *     block made 2 MiB resident).
 *
 * Resident-set bounds are skipped with --no-rss (sanitizer builds, whose
 * shadow memory is resident too); the contents are checked in every build.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nbmalloc.h"
#include "rss.h"

#include "../check.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static int check_rss = 1;

static void test_calloc_reuse(void)
{
    const size_t n = 2 * MIB;
    char *p = nbm_malloc(n);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 0xa5, 64 * KIB);
    p[300 * 4096 + 7] = 0x5a;
    nbm_free(p);
    size_t before = rss_bytes();
    unsigned char *q = nbm_calloc(1, n);
    size_t after = rss_bytes();
    CHECK(q != NULL);
    if (!q)
        return;
    if (check_rss) {
        printf("calloc-reuse: %s block, resident %zu -> %zu KiB\n", (void *)q == (void *)p ? "same" : "another",
               before >> 10, after >> 10);
        CHECK(after < before + 512 * KIB);
    }
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++)
        nonzero += q[i] != 0;
    CHECK_EQ(nonzero, 0);
    memset(q, 1, n); /* every byte is the user's */
    nbm_free(q);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--no-rss"))
            check_rss = 0;
    test_calloc_reuse();
    TEST_MAIN_END();
}
