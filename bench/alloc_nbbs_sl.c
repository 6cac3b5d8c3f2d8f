/*
 * alloc_nbbs_sl.c - the locked twins: the same two layouts, every operation
 * under one global spin lock (the paper's "spin-lock based" versions).
 *
 * They run our lock-free code inside the lock, so they still pay its locked
 * instructions (uncontended: the line stays in the holder's cache). That makes
 * the comparison one of synchronisation strategy over identical metadata;
 * lists-sl is the classic sequential design for contrast.
 */
#include <stdlib.h>

#include "bench.h"
#include "nbbs.h"
#include "spinlock.h"

typedef struct locked {
    bench_spinlock_t lock;
    nbbs_t          *b;
} locked_t;

static void *create_layout(const bench_arena_t *a, nbbs_layout_t layout)
{
    nbbs_config_t cfg = { .min_block = a->min_block, .max_order = a->max_order, .layout = layout };
    locked_t *l = nbbs_tu_aligned_alloc(NBBS_TU_CACHE_LINE, sizeof *l);
    if (!l)
        return NULL;
    atomic_init(&l->lock.held, false);
    l->b = nbbs_create(a->base, a->size, &cfg);
    if (!l->b) {
        free(l);
        return NULL;
    }
    return l;
}

static void *tree_create(const bench_arena_t *a) { return create_layout(a, NBBS_LAYOUT_TREE); }
static void *bunch_create(const bench_arena_t *a) { return create_layout(a, NBBS_LAYOUT_BUNCH); }

static void sl_destroy(void *inst)
{
    locked_t *l = inst;
    nbbs_destroy(l->b);
    free(l);
}

static void *sl_alloc(void *inst, size_t size)
{
    locked_t *l = inst;
    bench_spin_lock(&l->lock);
    void *p = nbbs_alloc(l->b, size);
    bench_spin_unlock(&l->lock);
    return p;
}

static void *sl_alloc_order(void *inst, unsigned order)
{
    locked_t *l = inst;
    bench_spin_lock(&l->lock);
    void *p = nbbs_alloc_order(l->b, order);
    bench_spin_unlock(&l->lock);
    return p;
}

static void sl_free(void *inst, void *p)
{
    locked_t *l = inst;
    bench_spin_lock(&l->lock);
    (void)nbbs_free(l->b, p);
    bench_spin_unlock(&l->lock);
}

static void sl_stats(void *inst, bench_heap_stats_t *out)
{
    locked_t *l = inst;
    nbbs_stats_t s;
    nbbs_get_stats(l->b, &s);
    out->free_bytes = s.free_bytes;
    out->largest_free = s.largest_free;
    out->meta_bytes = s.meta_size + sizeof *l;
}

const bench_allocator_t bench_alloc_tree_sl = {
    .name = "tree-sl", .help = "1-level layout, every operation under one global spin lock",
    .twin_of = "nbbs-tree", .create = tree_create, .destroy = sl_destroy, .alloc = sl_alloc, .alloc_order = sl_alloc_order,
    .free = sl_free, .stats = sl_stats,
};
BENCH_ALLOCATOR(bench_alloc_tree_sl);

const bench_allocator_t bench_alloc_bunch_sl = {
    .name = "bunch-sl", .help = "4-level layout, every operation under one global spin lock",
    .twin_of = "nbbs-bunch", .create = bunch_create, .destroy = sl_destroy, .alloc = sl_alloc, .alloc_order = sl_alloc_order,
    .free = sl_free, .stats = sl_stats,
};
BENCH_ALLOCATOR(bench_alloc_bunch_sl);
