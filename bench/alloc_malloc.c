/*
 * alloc_malloc.c - the process's malloc/free, whichever it is.
 *
 * Calls go through the dynamic symbols malloc and free, so running
 * nbbs-bench under LD_PRELOAD measures the preloaded allocator (jemalloc,
 * mimalloc, tcmalloc, nbmalloc); without a preload it is glibc. The runner's
 * --label names which one it was. There is no arena: sizes are bounded only
 * by the workload, and workloads that fill an arena skip this allocator.
 */
#include <stdlib.h>

#include "bench.h"

static int token;

static void *m_create(const bench_arena_t *a) { (void)a; return &token; }
static void m_destroy(void *inst) { (void)inst; }
static void *m_alloc(void *inst, size_t size) { (void)inst; return malloc(size); }
static void m_free(void *inst, void *p) { (void)inst; free(p); }

const bench_allocator_t bench_alloc_malloc = {
    .name = "malloc", .help = "the process's malloc/free (glibc, or whatever LD_PRELOAD puts first)",
    .is_malloc = 1, .create = m_create, .destroy = m_destroy, .alloc = m_alloc, .free = m_free,
};
BENCH_ALLOCATOR(bench_alloc_malloc);
