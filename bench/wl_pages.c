/*
 * wl_pages.c - page-frame workloads: 4 KiB frames, orders 0..10.
 *
 * cached is the reference NBBS code's fourth benchmark; alloc-seq, alloc-rnd,
 * free-seq, free-rnd and stress are the scenarios of the independent kernel
 * page-frame NBBS (seed 001); fill-cost is ours, for the back-end targets
 * (cost of an alloc+free pair as a function of occupancy).
 */
#include <stdlib.h>

#include "bench.h"

/* Arena bytes per scale (a fake range: nothing is mapped): 1 Ki, 16 Ki and
 * 1 Mi frames. */
static void page_arena(bench_params_t *p, bench_scale_t s)
{
    static const size_t arena[] = { (size_t)4 << 20, (size_t)64 << 20, (size_t)4 << 30 };
    p->arena.size = arena[s];
}

/* A random order, smaller ones more likely (P(k) = 2^-(k+1)), so every
 * order contributes about the same number of bytes. */
static unsigned rand_order(bench_thread_t *t)
{
    unsigned max = t->run->p->arena.max_order;
    unsigned k = (unsigned)__builtin_ctzll(bench_rand(t) | (1ull << 63));
    return k > max ? max : k;
}

/* --- cached: alloc+free of one block in a tight loop --- */

static void cached_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t ops[] = { 20000, 1000000, 20000000 };
    page_arena(p, s);
    p->ops = ops[s];
}

static void cached_thread(bench_thread_t *t)
{
    const unsigned k = (unsigned)t->run->p->value;
    const size_t size = t->run->p->arena.min_block << k;
    const uint64_t n = t->run->p->ops / (uint64_t)t->nthreads;
    const int by_order = t->a->alloc_order != NULL;
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        void *p = by_order ? bench_alloc_order(t, k) : bench_alloc(t, size);
        bench_touch(t, p, size);
        if (p)
            bench_free(t, p);
    }
    bench_end(t);
}

const bench_workload_t bench_wl_cached = {
    .name = "cached", .source = "NBBS reference code, fourth benchmark",
    .help = "each thread: alloc+free one block of --order in a tight loop on an empty arena, ops/T times (quick 1M, paper 20M)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_ORDER, .malloc_ok = 1, .metric = "pair_ns",
    .scale = cached_scale, .thread = cached_thread,
    .group = "page",
};
BENCH_WORKLOAD(bench_wl_cached);

/* --- alloc-seq / free-seq: each thread its equal share of all blocks --- */

static void seq_scale(bench_params_t *p, bench_scale_t s)
{
    static const unsigned rounds[] = { 1, 5, 10 };
    page_arena(p, s);
    p->rounds = rounds[s];
}

void bench_fill_drain(bench_thread_t *t, bool reverse, bool barriers)
{
    const unsigned k = (unsigned)t->run->p->value;
    size_t lo, hi;
    bench_share(t, bench_arena_blocks(t, k), &lo, &hi);
    size_t n = hi - lo;
    void **v = bench_xcalloc(n, sizeof *v);
    bench_begin(t);
    for (unsigned r = 0; r < t->run->p->rounds; r++) {
        uint64_t c0 = bench_cpu_ns(), t0 = bench_now_ns();
        for (size_t i = 0; i < n; i++)
            v[i] = bench_alloc_order(t, k);
        t->alloc_ns += bench_now_ns() - t0;
        t->alloc_cpu_ns += bench_cpu_ns() - c0;
        if (r == 0)
            bench_snapshot(t, "full");
        else if (barriers)
            bench_barrier(t);
        c0 = bench_cpu_ns();
        t0 = bench_now_ns();
        for (size_t i = 0; i < n; i++) {
            void *p = v[reverse ? n - 1 - i : i];
            if (p)
                bench_free(t, p);
        }
        t->free_ns += bench_now_ns() - t0;
        t->free_cpu_ns += bench_cpu_ns() - c0;
        if (barriers)
            bench_barrier(t);
    }
    bench_end(t);
    free(v);
}

/* Both scenarios run the same rounds (fill the share, free it in allocation
 * order, both timed apart); they differ in which half the report plots. */
static void seq_thread(bench_thread_t *t) { bench_fill_drain(t, false, false); }

const bench_workload_t bench_wl_alloc_seq = {
    .name = "alloc-seq", .source = "kernel page-frame NBBS bench (seed 001), scenario 1",
    .help = "each thread allocates its equal share of all --order blocks (arena full), then frees them; alloc ns/op (quick 5 rounds, paper 10)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_ORDER, .metric = "alloc_ns",
    .scale = seq_scale, .thread = seq_thread,
    .group = "page",
};
BENCH_WORKLOAD(bench_wl_alloc_seq);

const bench_workload_t bench_wl_free_seq = {
    .name = "free-seq", .source = "kernel page-frame NBBS bench (seed 001), scenario 3",
    .help = "as alloc-seq, reporting the free phase (blocks freed in allocation order); free ns/op",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_ORDER, .metric = "free_ns",
    .scale = seq_scale, .thread = seq_thread,
    .group = "page",
};
BENCH_WORKLOAD(bench_wl_free_seq);

/* --- alloc-rnd / free-rnd: random orders until the arena is full --- */

/* Threads race: each takes random orders until even an order-0 block fails
 * (with no frees in flight that means the arena is full). A failure at a
 * larger order falls back to order 0 and counts as a failed allocation. */
static size_t fill_random(bench_thread_t *t, void **v, size_t cap)
{
    size_t n = 0;
    while (n < cap) {
        unsigned k = rand_order(t);
        void *p = bench_alloc_order(t, k);
        if (!p && k != 0)
            p = bench_alloc_order(t, 0);
        if (!p)
            break;
        v[n++] = p;
    }
    return n;
}

static void rnd_thread(bench_thread_t *t)
{
    size_t cap = bench_arena_blocks(t, 0);
    void **v = bench_xcalloc(cap, sizeof *v);
    bench_begin(t);
    for (unsigned r = 0; r < t->run->p->rounds; r++) {
        uint64_t c0 = bench_cpu_ns(), t0 = bench_now_ns();
        size_t n = fill_random(t, v, cap);
        t->alloc_ns += bench_now_ns() - t0;
        t->alloc_cpu_ns += bench_cpu_ns() - c0;
        if (r == 0)
            bench_snapshot(t, "full");
        else
            bench_barrier(t); /* nobody frees before everyone has filled */
        bench_shuffle(t, v, n);
        c0 = bench_cpu_ns();
        t0 = bench_now_ns();
        for (size_t i = 0; i < n; i++)
            bench_free(t, v[i]);
        t->free_ns += bench_now_ns() - t0;
        t->free_cpu_ns += bench_cpu_ns() - c0;
        bench_barrier(t);
    }
    bench_end(t);
    free(v);
}

const bench_workload_t bench_wl_alloc_rnd = {
    .name = "alloc-rnd", .source = "kernel page-frame NBBS bench (seed 001), scenario 2",
    .help = "threads race allocating random orders (P(k)=2^-(k+1)) until the arena is full, then free; alloc ns/op",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .metric = "alloc_ns",
    .scale = seq_scale, .thread = rnd_thread,
    .group = "page",
};
BENCH_WORKLOAD(bench_wl_alloc_rnd);

const bench_workload_t bench_wl_free_rnd = {
    .name = "free-rnd", .source = "kernel page-frame NBBS bench (seed 001), scenario 4",
    .help = "as alloc-rnd; after all threads filled, each frees its own blocks in random order; free ns/op",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .metric = "free_ns",
    .scale = seq_scale, .thread = rnd_thread,
    .group = "page",
};
BENCH_WORKLOAD(bench_wl_free_rnd);

/* --- stress: fill to 95%, drain to 5%, repeat for a duration --- */

static void stress_scale(bench_params_t *p, bench_scale_t s)
{
    static const double secs[] = { 0.02, 0.2, 5.0 };
    page_arena(p, s);
    p->seconds = secs[s];
}

/* Each thread keeps its own 1/T of the arena between 5% and 95% full, so the
 * whole arena swings the same way without a shared counter in the loop. */
static void stress_thread(bench_thread_t *t)
{
    const size_t unit = t->run->p->arena.min_block;
    const size_t quota = t->run->p->arena.size / (size_t)t->nthreads;
    const size_t hi = quota / 100 * 95, lo = quota / 100 * 5;
    size_t cap = quota / unit + 1, n = 0, bytes = 0;
    void **v = bench_xcalloc(cap, sizeof *v);
    unsigned *ord = bench_xcalloc(cap, sizeof *ord);
    bench_begin(t);
    const uint64_t deadline = t->t_begin + (uint64_t)(t->run->p->seconds * 1e9);
    uint64_t iter = 0;
    int filling = 1;
    while ((iter++ & 63) != 0 || bench_now_ns() < deadline) {
        if (filling) {
            unsigned k = rand_order(t);
            size_t sz = unit << k;
            void *p = bytes + sz <= quota && n < cap ? bench_alloc_order(t, k) : NULL;
            if (p) {
                v[n] = p;
                ord[n++] = k;
                bytes += sz;
            }
            if (!p || bytes >= hi)
                filling = 0;
        } else {
            size_t i = (size_t)bench_rand_below(t, n ? n : 1);
            if (n) {
                bench_free(t, v[i]);
                bytes -= unit << ord[i];
                v[i] = v[--n];
                ord[i] = ord[n];
            }
            if (bytes <= lo)
                filling = 1;
        }
    }
    bench_end(t);
    bench_snapshot(t, "end");
    for (size_t i = 0; i < n; i++)
        t->a->free(t->inst, v[i]);
    free(v);
    free(ord);
}

const bench_workload_t bench_wl_stress = {
    .name = "stress", .source = "kernel page-frame NBBS bench (seed 001), scenario 5",
    .help = "each thread fills its 1/T of the arena to 95% with random orders, frees random blocks down to 5%, repeats for a duration (quick 0.2 s, paper 5 s)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .metric = "ops_per_s",
    .scale = stress_scale, .thread = stress_thread,
    .group = "page",
};
BENCH_WORKLOAD(bench_wl_stress);

/* --- fill-cost: alloc+free pair cost at a given occupancy --- */

static void fill_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t ops[] = { 20000, 500000, 4000000 };
    page_arena(p, s);
    p->ops = ops[s];
}

/* Occupancy is scattered, not packed: every thread takes all its order-0
 * frames, then gives back a random (100 - fill)% of them, so free frames are
 * spread over the whole arena, the hard case for a search. */
static void fill_thread(bench_thread_t *t)
{
    const long fill = t->run->p->value;
    const uint64_t n = t->run->p->ops / (uint64_t)t->nthreads;
    size_t lo, hi;
    bench_share(t, bench_arena_blocks(t, 0), &lo, &hi);
    size_t m = hi - lo, keep = m * (size_t)fill / 100;
    void **v = bench_xcalloc(m, sizeof *v);
    for (size_t i = 0; i < m; i++)
        v[i] = t->a->alloc_order(t->inst, 0);
    bench_shuffle(t, v, m);
    for (size_t i = keep; i < m; i++)
        if (v[i])
            t->a->free(t->inst, v[i]);
    bench_snapshot(t, "filled");
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        void *p = bench_alloc_order(t, 0);
        if (p)
            bench_free(t, p);
    }
    bench_end(t);
    for (size_t i = 0; i < keep; i++)
        if (v[i])
            t->a->free(t->inst, v[i]);
    free(v);
}

const bench_workload_t bench_wl_fill_cost = {
    .name = "fill-cost", .source = "ours (back-end targets)",
    .help = "fill the arena to --fill % with scattered order-0 frames, then time alloc+free pairs of order 0 (quick 500k, paper 4M pairs)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_FILL, .metric = "pair_ns",
    .scale = fill_scale, .thread = fill_thread,
    .group = "page",
};
BENCH_WORKLOAD(bench_wl_fill_cost);
