/*
 * wl_paper.c - the four benchmarks of the NBBS paper (Marotta et al.,
 * section IV): Linux Scalability, Thread Test, Larson, Constant Occupancy.
 * Paper configuration: 8 B minimum block, 16 KiB maximum, requests of
 * 8..1024 B (Constant Occupancy: up to 16 times the swept size).
 */
#include <stdlib.h>

#include "bench.h"

/* Larson's request sizes, as in the paper's range. */
#define SMALL_MIN 8
#define SMALL_MAX 1024

static size_t rand_small(bench_thread_t *t)
{
    return SMALL_MIN + (size_t)bench_rand_below(t, SMALL_MAX - SMALL_MIN + 1);
}

/* --- linux-scalability: alloc+free of one fixed size, ops/T times each --- */

static void ls_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t ops[] = { 20000, 1000000, 20000000 };
    p->ops = ops[s];
}

static void ls_thread(bench_thread_t *t)
{
    const size_t size = (size_t)t->run->p->value;
    const uint64_t n = t->run->p->ops / (uint64_t)t->nthreads;
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        void *p = bench_alloc(t, size);
        bench_touch(t, p, size);
        if (p)
            bench_free(t, p);
    }
    bench_end(t);
}

const bench_workload_t bench_wl_linux_scalability = {
    .name = "linux-scalability", .source = "NBBS paper IV (Lever & Boreham's Linux scalability test)",
    .help = "each thread: alloc+free one block of --size bytes, ops/T times (quick 1M, paper 20M ops)",
    .cfg = BENCH_CFG_PAPER, .param = BENCH_PARAM_SIZE, .malloc_ok = 1, .metric = "time_s",
    .scale = ls_scale, .thread = ls_thread,
    .group = "paper", .frontend = "--size 8,128,1024", .frontend_quick = "--ops 10000000",
};
BENCH_WORKLOAD(bench_wl_linux_scalability);

/* --- thread-test: alloc a batch of blocks/T, free it, for R rounds --- */

#define TT_BLOCKS 10000

static void tt_scale(bench_params_t *p, bench_scale_t s)
{
    static const unsigned rounds[] = { 2, 20, 200 };
    p->ops = TT_BLOCKS;
    p->rounds = rounds[s];
}

static void tt_thread(bench_thread_t *t)
{
    const size_t size = (size_t)t->run->p->value;
    const size_t n = (size_t)t->run->p->ops / (size_t)t->nthreads;
    void **v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        abort();
    bench_begin(t);
    for (unsigned r = 0; r < t->run->p->rounds; r++) {
        uint64_t t0 = bench_now_ns();
        for (size_t i = 0; i < n; i++) {
            v[i] = bench_alloc(t, size);
            bench_touch(t, v[i], size);
        }
        uint64_t t1 = bench_now_ns();
        for (size_t i = 0; i < n; i++)
            if (v[i])
                bench_free(t, v[i]);
        uint64_t t2 = bench_now_ns();
        t->alloc_ns += t1 - t0;
        t->free_ns += t2 - t1;
    }
    bench_end(t);
    free(v);
}

const bench_workload_t bench_wl_thread_test = {
    .name = "thread-test", .source = "NBBS paper IV (Berger et al.'s Hoard threadtest)",
    .help = "each thread: alloc 10000/T blocks of --size bytes, then free them; R rounds (quick 20, paper 200)",
    .cfg = BENCH_CFG_PAPER, .param = BENCH_PARAM_SIZE, .malloc_ok = 1, .metric = "time_s",
    .scale = tt_scale, .thread = tt_thread,
    /* Front-end runs at quick scale: 1,000 rounds, so that the fastest
     * mallocs run about 20 ms. At 100 rounds (2-4 ms) a run at 4 threads
     * on 2 CPUs came out in one of two modes, the slow one about 1-2 ms
     * longer, whatever the malloc and wherever the threads were pinned.
     * At 1,000 such a delay is an outlier, not a mode (docs/nbmalloc.md,
     * "Wall time against CPU time"). */
    .group = "paper", .frontend = "--size 8,128,1024", .frontend_quick = "--rounds 1000",
};
BENCH_WORKLOAD(bench_wl_thread_test);

/* --- larson: server simulation over a time window --- */

#define LARSON_SLOTS 1000 /* live blocks per thread */

typedef struct larson {
    size_t           nslots;
    _Atomic(void *) *slot;
} larson_t;

static void larson_scale(bench_params_t *p, bench_scale_t s)
{
    static const double secs[] = { 0.02, 0.2, 10.0 };
    p->seconds = secs[s];
}

/* Not from p->ops, so that --ops cannot turn the live set into gigabytes. */
static size_t larson_slots(const bench_params_t *p)
{
    return p->scale == BENCH_SCALE_SMOKE ? 100 : LARSON_SLOTS;
}

static int larson_setup(bench_run_t *r)
{
    larson_t *l = calloc(1, sizeof *l);
    if (!l)
        return -1;
    l->nslots = larson_slots(r->p) * (size_t)r->nthreads;
    l->slot = calloc(l->nslots, sizeof *l->slot);
    if (!l->slot) {
        free(l);
        return -1;
    }
    r->shared = l;
    return 0;
}

static void larson_teardown(bench_run_t *r)
{
    larson_t *l = r->shared;
    for (size_t i = 0; i < l->nslots; i++) {
        void *p = atomic_load(&l->slot[i]);
        if (p)
            r->a->free(r->inst, p);
    }
    free(l->slot);
    free(l);
}

/* Each operation frees the block in a random slot and puts a new block of a
 * random size there. A thread works in its own region of slots, and moves
 * to the next thread's region after every K operations: the blocks it then
 * frees were allocated by another thread, as in Larson's server where a
 * request's memory is released by whichever thread handles it next. The
 * exchange makes two threads in the same region safe. */
static void larson_thread(bench_thread_t *t)
{
    larson_t *l = t->run->shared;
    const size_t k = larson_slots(t->run->p);
    _Atomic(void *) *own = l->slot + (size_t)t->id * k;
    for (size_t i = 0; i < k; i++) { /* warm-up fill, untimed */
        size_t sz = rand_small(t);
        void *p = t->a->alloc(t->inst, sz);
        bench_touch(t, p, sz);
        atomic_store_explicit(&own[i], p, memory_order_relaxed);
    }
    bench_barrier(t);
    bench_begin(t);
    const uint64_t deadline = t->t_begin + (uint64_t)(t->run->p->seconds * 1e9);
    uint64_t ops = 0;
    for (;;) {
        if ((ops & 63) == 0 && bench_now_ns() >= deadline)
            break;
        size_t region = ((size_t)t->id + (size_t)(ops / k)) % (size_t)t->nthreads;
        size_t i = region * k + (size_t)bench_rand_below(t, k);
        size_t sz = rand_small(t);
        void *p = bench_alloc(t, sz);
        bench_touch(t, p, sz);
        void *old = atomic_exchange_explicit(&l->slot[i], p, memory_order_acq_rel);
        if (old)
            bench_free(t, old);
        ops++;
    }
    bench_end(t);
}

const bench_workload_t bench_wl_larson = {
    .name = "larson", .source = "NBBS paper IV (Larson & Krishnan, ISMM'98)",
    .help = "server simulation: 1000 live blocks/thread of 8..1024 B, free+alloc random slots, regions rotate across threads; throughput in a window (quick 0.2 s, paper 10 s)",
    .cfg = BENCH_CFG_PAPER, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .metric = "ops_per_s",
    .scale = larson_scale, .setup = larson_setup, .teardown = larson_teardown, .thread = larson_thread,
    .group = "paper", .frontend = "", .frontend_quick = "--ops 1000000",
};
BENCH_WORKLOAD(bench_wl_larson);

/* --- constant-occupancy: a pool of mixed sizes, replace a random block --- */

typedef struct co_block {
    void  *p;
    size_t size;
} co_block_t;

static void co_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t ops[] = { 20000, 500000, 20000000 };
    static const unsigned mult[] = { 2, 16, 16 };
    p->ops = ops[s];
    p->rounds = mult[s]; /* pool multiplier: c*16 blocks of s, c*8 of 2s, ... c of 16s */
}

static void co_thread(bench_thread_t *t)
{
    const size_t s = (size_t)t->run->p->value;
    const unsigned c = t->run->p->rounds;
    const uint64_t n = t->run->p->ops / (uint64_t)t->nthreads;
    size_t npool = (size_t)c * (16 + 8 + 4 + 2 + 1), j = 0;
    co_block_t *pool = calloc(npool, sizeof *pool);
    if (!pool)
        abort();
    for (unsigned m = 0; m < 5; m++) /* more of the small ones: 16:8:4:2:1 */
        for (size_t i = 0; i < (size_t)c << (4 - m); i++) {
            pool[j].size = s << m;
            pool[j].p = t->a->alloc(t->inst, pool[j].size);
            bench_touch(t, pool[j].p, pool[j].size);
            j++;
        }
    bench_snapshot(t, "pool");
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        co_block_t *b = &pool[bench_rand_below(t, npool)];
        if (b->p)
            bench_free(t, b->p);
        b->p = bench_alloc(t, b->size);
        bench_touch(t, b->p, b->size);
    }
    bench_end(t);
    bench_snapshot(t, "end");
    for (size_t i = 0; i < npool; i++)
        if (pool[i].p)
            t->a->free(t->inst, pool[i].p);
    free(pool);
}

const bench_workload_t bench_wl_constant_occupancy = {
    .name = "constant-occupancy", .source = "NBBS paper IV (the authors' own test)",
    .help = "each thread: a pool of 16:8:4:2:1 blocks of size s..16s, then free a random one and re-alloc its size, ops/T times (quick 500k, paper 20M)",
    .cfg = BENCH_CFG_PAPER, .param = BENCH_PARAM_SIZE, .malloc_ok = 1, .metric = "time_s",
    .scale = co_scale, .thread = co_thread,
    .group = "paper",
};
BENCH_WORKLOAD(bench_wl_constant_occupancy);
