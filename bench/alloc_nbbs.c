/*
 * alloc_nbbs.c - ours: the lock-free buddy system in both layouts.
 *
 * The arena is a fake address range: nbbs never touches the blocks, so the
 * back-end workloads measure the allocator's metadata traffic and nothing
 * else, as in the paper (no front-end, no pre-reserving).
 */
#include "bench.h"
#include "nbbs.h"

static void *create_layout(const bench_arena_t *a, nbbs_layout_t layout)
{
    nbbs_config_t cfg = { .min_block = a->min_block, .max_order = a->max_order, .layout = layout };
    return nbbs_create(a->base, a->size, &cfg);
}

static void *tree_create(const bench_arena_t *a) { return create_layout(a, NBBS_LAYOUT_TREE); }
static void *bunch_create(const bench_arena_t *a) { return create_layout(a, NBBS_LAYOUT_BUNCH); }
static void nb_destroy(void *inst) { nbbs_destroy(inst); }
static void *nb_alloc(void *inst, size_t size) { return nbbs_alloc(inst, size); }
static void *nb_alloc_order(void *inst, unsigned order) { return nbbs_alloc_order(inst, order); }
static void nb_free(void *inst, void *p) { (void)nbbs_free(inst, p); }

static void nb_stats(void *inst, bench_heap_stats_t *out)
{
    nbbs_stats_t s;
    nbbs_get_stats(inst, &s);
    out->free_bytes = s.free_bytes;
    out->largest_free = s.largest_free;
    out->meta_bytes = s.meta_size;
}

const bench_allocator_t bench_alloc_nbbs_tree = {
    .name = "nbbs-tree", .help = "lock-free NBBS, 1-level layout (one CAS per level)", .lockfree = 1,
    .create = tree_create, .destroy = nb_destroy, .alloc = nb_alloc, .alloc_order = nb_alloc_order,
    .free = nb_free, .stats = nb_stats,
};
BENCH_ALLOCATOR(bench_alloc_nbbs_tree);

const bench_allocator_t bench_alloc_nbbs_bunch = {
    .name = "nbbs-bunch", .help = "lock-free NBBS, 4-level layout (one CAS per 4 levels)", .lockfree = 1,
    .create = bunch_create, .destroy = nb_destroy, .alloc = nb_alloc, .alloc_order = nb_alloc_order,
    .free = nb_free, .stats = nb_stats,
};
BENCH_ALLOCATOR(bench_alloc_nbbs_bunch);
