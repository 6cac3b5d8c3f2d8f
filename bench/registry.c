/*
 * registry.c - the lists --allocator and --workload choose from. Adding an
 * allocator or a workload is one file plus one line here.
 */
#include <stddef.h>

#include "bench.h"

extern const bench_allocator_t bench_alloc_nbbs_tree, bench_alloc_nbbs_bunch, bench_alloc_tree_sl,
    bench_alloc_bunch_sl, bench_alloc_lists_sl, bench_alloc_malloc, bench_alloc_nbbs_cache;

const bench_allocator_t *const bench_allocators[] = {
    &bench_alloc_nbbs_tree, &bench_alloc_nbbs_bunch, &bench_alloc_nbbs_cache, &bench_alloc_tree_sl, &bench_alloc_bunch_sl,
    &bench_alloc_lists_sl, &bench_alloc_malloc, NULL,
};

extern const bench_workload_t bench_wl_linux_scalability, bench_wl_thread_test, bench_wl_larson,
    bench_wl_constant_occupancy, bench_wl_cached, bench_wl_alloc_seq, bench_wl_alloc_rnd, bench_wl_free_seq,
    bench_wl_free_rnd, bench_wl_stress, bench_wl_bulk, bench_wl_repeat, bench_wl_rand, bench_wl_fill_cost,
    bench_wl_prodcons, bench_wl_hybrid_pool;

const bench_workload_t *const bench_workloads[] = {
    &bench_wl_linux_scalability, &bench_wl_thread_test, &bench_wl_larson, &bench_wl_constant_occupancy,
    &bench_wl_cached, &bench_wl_alloc_seq, &bench_wl_alloc_rnd, &bench_wl_free_seq, &bench_wl_free_rnd,
    &bench_wl_stress, &bench_wl_bulk, &bench_wl_repeat, &bench_wl_rand, &bench_wl_fill_cost,
    &bench_wl_prodcons, &bench_wl_hybrid_pool, NULL,
};
