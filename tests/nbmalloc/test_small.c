/*
 * test_small.c - what nbmalloc makes resident for a program that uses little.
 *
 *   calloc-reuse: a 2 MiB block, of which the program touched 64 KiB and one
 *     page, is freed (kept by the medium cache) and handed out again by a
 *     calloc of the same size: it reads as zeros everywhere, and the calloc
 *     makes no more than the touched pages resident (a memset of the whole
 *     block made 2 MiB resident).
 *
 *   few-per-class: 4 objects in each of the 12 classes from 320 B to 2 KiB
 *     (45 KiB) leave at most 128 KiB resident in their pages: about what they
 *     cover, not a whole carving batch of 16 KiB per class (192 KiB before a
 *     class's first page carved one OS page's worth first).
 *
 * Resident-set bounds are skipped with --no-rss (sanitizer builds, whose
 * shadow memory is resident too); the contents are checked in every build.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "nbmalloc.h"
#include "rss.h"

#include "../check.h"
#include "../support/test_options.h"

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

/* Resident 4 KiB pages in the distinct 64 KiB-aligned regions holding the
 * objects (pages of these classes are 64 KiB blocks aligned to their size). */
static size_t resident_in_pages(void *obj[][4], int nclasses)
{
    uintptr_t seen[48];
    int nseen = 0;
    size_t pages = 0;
    for (int c = 0; c < nclasses; c++)
        for (int k = 0; k < 4; k++) {
            uintptr_t r = (uintptr_t)obj[c][k] & ~(uintptr_t)(64 * KIB - 1);
            int dup = 0;
            for (int i = 0; i < nseen; i++)
                dup |= seen[i] == r;
            if (dup || !r)
                continue;
            seen[nseen++] = r;
            unsigned char v[16];
            if (mincore((void *)r, 64 * KIB, v) != 0)
                continue;
            for (int i = 0; i < 16; i++)
                pages += v[i] & 1;
        }
    return pages * 4 * KIB;
}

static void test_few_per_class(void)
{
    void *obj[12][4];
    size_t bytes = 0;
    for (int c = 0; c < 12; c++) {
        size_t size = (size_t)(256 + 64 * (c % 4 + 1)) << (c / 4); /* 320 .. 2048 */
        for (int k = 0; k < 4; k++) {
            obj[c][k] = nbm_malloc(size);
            CHECK(obj[c][k] != NULL);
            if (obj[c][k])
                memset(obj[c][k], c, size);
            bytes += size;
        }
    }
    size_t res = resident_in_pages(obj, 12);
    if (check_rss) {
        printf("few-per-class: %zu KiB of objects, %zu KiB resident in their pages\n", bytes >> 10, res >> 10);
        CHECK(res <= 128 * KIB);
    }
    for (int c = 0; c < 12; c++)
        for (int k = 0; k < 4; k++)
            nbm_free(obj[c][k]);
}

int main(int argc, char **argv)
{
    int no_rss = 0;
    test_options(argc, argv, (const test_option_t[]){ { "--no-rss", TEST_OPT_FLAG, &no_rss }, { 0 } });
    if (no_rss)
        check_rss = 0;
    test_few_per_class(); /* first: on pages no test used before */
    test_calloc_reuse();
    TEST_MAIN_END();
}
