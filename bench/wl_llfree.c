/*
 * wl_llfree.c - the page-frame patterns used to evaluate LLFree (Wrenger et
 * al., USENIX ATC'23): bulk, repeat and rand. Same configuration as the
 * other page-frame workloads (4 KiB frames, orders 0..10).
 */
#include <stdlib.h>

#include "bench.h"

static void llf_scale(bench_params_t *p, bench_scale_t s)
{
    static const size_t arena[] = { (size_t)4 << 20, (size_t)64 << 20, (size_t)4 << 30 };
    static const unsigned rounds[] = { 1, 5, 10 };
    static const uint64_t ops[] = { 5000, 100000, 5000000 };
    p->arena.size = arena[s];
    p->rounds = rounds[s];
    p->ops = ops[s];
}

/* --- bulk: allocate everything, then free everything, timed apart --- */

/* Every thread fills its share, all wait, everything is freed in reverse. */
static void bulk_thread(bench_thread_t *t) { bench_fill_drain(t, true, true); }

const bench_workload_t bench_wl_bulk = {
    .name = "bulk", .source = "LLFree evaluation (Wrenger et al., ATC'23): bulk",
    .help = "all threads allocate every --order block (arena full), barrier, free all in reverse; alloc and free ns/op apart (quick 5 rounds, paper 10)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_ORDER, .metric = "alloc_ns,free_ns",
    .scale = llf_scale, .thread = bulk_thread,
    .group = "llfree",
};
BENCH_WORKLOAD(bench_wl_bulk);

/* --- repeat: alloc+free of the same frame on a half-full arena --- */

static void repeat_thread(bench_thread_t *t)
{
    const unsigned k = (unsigned)t->run->p->value;
    const uint64_t n = t->run->p->ops / (uint64_t)t->nthreads;
    size_t lo, hi;
    bench_share(t, bench_arena_blocks(t, k) / 2, &lo, &hi);
    size_t m = hi - lo;
    void **v = bench_xcalloc(m, sizeof *v);
    for (size_t i = 0; i < m; i++)
        v[i] = t->a->alloc_order(t->inst, k);
    bench_snapshot(t, "half");
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        void *p = bench_alloc_order(t, k);
        if (p)
            bench_free(t, p);
    }
    bench_end(t);
    for (size_t i = 0; i < m; i++)
        if (v[i])
            t->a->free(t->inst, v[i]);
    free(v);
}

const bench_workload_t bench_wl_repeat = {
    .name = "repeat", .source = "LLFree evaluation (Wrenger et al., ATC'23): repeat",
    .help = "arena half full (packed), then each thread allocs and frees one --order block, ops/T times (quick 100k, paper 5M)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_ORDER, .metric = "pair_ns",
    .scale = llf_scale, .thread = repeat_thread,
    .group = "llfree",
};
BENCH_WORKLOAD(bench_wl_repeat);

/* --- rand: allocate, shuffle across threads, free (cross-thread frees) --- */

typedef struct rand_shared {
    size_t n;
    void **v;
} rand_shared_t;

static int rand_setup(bench_run_t *r)
{
    rand_shared_t *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->n = r->p->arena.size / (r->p->arena.min_block << r->p->value);
    s->v = calloc(s->n ? s->n : 1, sizeof *s->v);
    if (!s->v) {
        free(s);
        return -1;
    }
    r->shared = s;
    return 0;
}

static void rand_teardown(bench_run_t *r)
{
    rand_shared_t *s = r->shared;
    free(s->v);
    free(s);
}

static void rand_thread(bench_thread_t *t)
{
    rand_shared_t *s = t->run->shared;
    const unsigned k = (unsigned)t->run->p->value;
    size_t lo, hi;
    bench_share(t, s->n, &lo, &hi);
    bench_begin(t);
    for (unsigned r = 0; r < t->run->p->rounds; r++) {
        uint64_t c0 = bench_cpu_ns(), t0 = bench_now_ns();
        for (size_t i = lo; i < hi; i++)
            s->v[i] = bench_alloc_order(t, k);
        t->alloc_ns += bench_now_ns() - t0;
        t->alloc_cpu_ns += bench_cpu_ns() - c0;
        bench_barrier(t);
        if (t->id == 0) /* one global shuffle: most blocks change owner */
            bench_shuffle(t, s->v, s->n);
        if (r == 0)
            bench_snapshot(t, "full"); /* also the barrier after the shuffle */
        else
            bench_barrier(t);
        c0 = bench_cpu_ns();
        t0 = bench_now_ns();
        for (size_t i = lo; i < hi; i++)
            if (s->v[i])
                bench_free(t, s->v[i]);
        t->free_ns += bench_now_ns() - t0;
        t->free_cpu_ns += bench_cpu_ns() - c0;
        bench_barrier(t);
    }
    bench_end(t);
}

const bench_workload_t bench_wl_rand = {
    .name = "rand", .source = "LLFree evaluation (Wrenger et al., ATC'23): rand",
    .help = "all threads allocate every --order block, one thread shuffles them, each frees a slice (mostly others' blocks); alloc and free ns/op",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_ORDER, .metric = "alloc_ns,free_ns",
    .scale = llf_scale, .setup = rand_setup, .teardown = rand_teardown, .thread = rand_thread,
    .group = "llfree",
};
BENCH_WORKLOAD(bench_wl_rand);
