/*
 * wl_frontend.c - workloads for comparing malloc front-ends (and, through
 * the same interface, the back-ends): prodcons and hybrid-pool. Requests of
 * 8..1024 B, written to when the memory is real.
 */
#include <sched.h>
#include <stdlib.h>

#include "bench.h"

static size_t rand_small(bench_thread_t *t)
{
    return 8 + (size_t)bench_rand_below(t, 1024 - 8 + 1);
}

/* --- prodcons: every block is freed by another thread than its allocator --- */

#define RING 256 /* power of two */

/* Single-producer single-consumer ring: thread t produces into ring t+1. */
typedef struct ring {
    _Alignas(64) _Atomic size_t head; /* consumer's */
    _Alignas(64) _Atomic size_t tail; /* producer's */
    _Alignas(64) void *slot[RING];
} ring_t;

static void pc_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t ops[] = { 20000, 200000, 10000000 };
    p->ops = ops[s];
}

static int pc_setup(bench_run_t *r)
{
    ring_t *q = nbbs_tu_aligned_alloc(NBBS_TU_CACHE_LINE, sizeof(ring_t) * (size_t)r->nthreads);
    if (!q)
        return -1;
    for (int i = 0; i < r->nthreads; i++) {
        atomic_init(&q[i].head, 0);
        atomic_init(&q[i].tail, 0);
    }
    r->shared = q;
    return 0;
}

static void pc_teardown(bench_run_t *r)
{
    free(r->shared);
}

static int ring_push(ring_t *q, void *p)
{
    size_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&q->head, memory_order_acquire) == RING)
        return 0;
    q->slot[tail & (RING - 1)] = p;
    atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
    return 1;
}

/* Frees everything waiting in q; returns how many blocks it took. */
static uint64_t ring_drain(bench_thread_t *t, ring_t *q)
{
    size_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
    size_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
    for (size_t i = head; i != tail; i++) {
        void *p = q->slot[i & (RING - 1)];
        if (p)
            bench_free(t, p);
    }
    atomic_store_explicit(&q->head, tail, memory_order_release);
    return tail - head;
}

/* Each thread sends n blocks to its successor and receives n from its
 * predecessor (a ring of threads; with one thread it sends to itself).
 * Draining its own ring whenever a push fails keeps the cycle deadlock-free;
 * yielding then lets a preempted peer run on an oversubscribed machine. */
static void pc_thread(bench_thread_t *t)
{
    ring_t *q = t->run->shared;
    ring_t *in = &q[t->id], *out = &q[(t->id + 1) % t->nthreads];
    const uint64_t n = t->run->p->ops / (uint64_t)t->nthreads;
    uint64_t sent = 0, got = 0;
    void *pending = NULL;
    bench_begin(t);
    while (sent < n || got < n) {
        if (sent < n) {
            if (!pending) {
                size_t sz = rand_small(t);
                pending = bench_alloc(t, sz);
                bench_touch(t, pending, sz);
            }
            if (ring_push(out, pending)) {
                pending = NULL;
                sent++;
            }
        }
        uint64_t d = ring_drain(t, in);
        got += d;
        if (d == 0 && (pending || sent == n))
            sched_yield();
    }
    bench_end(t);
}

const bench_workload_t bench_wl_prodcons = {
    .name = "prodcons", .source = "ours (front-end issue; cross-thread frees as in seed 003)",
    .help = "threads in a ring: each allocates 8..1024 B blocks and passes them to the next, which frees them (quick 200k, paper 10M blocks)",
    .cfg = BENCH_CFG_PAPER, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .metric = "ops_per_s",
    .scale = pc_scale, .setup = pc_setup, .teardown = pc_teardown, .thread = pc_thread,
    .group = "frontend", .frontend = "", .frontend_quick = "--ops 1000000",
};
BENCH_WORKLOAD(bench_wl_prodcons);

/* --- hybrid-pool: random interleaving of allocations and frees --- */

#define HP_ALLOCS 10000 /* per thread per round, as in seed 004 */

static void hp_scale(bench_params_t *p, bench_scale_t s)
{
    static const unsigned rounds[] = { 1, 10, 50 };
    p->rounds = rounds[s];
}

/* Each step allocates (while allocations are left) or frees a random live
 * block with equal odds, so the live set random-walks; a round ends empty. */
static void hp_thread(bench_thread_t *t)
{
    void **live = calloc(HP_ALLOCS, sizeof *live);
    if (!live)
        abort();
    bench_begin(t);
    for (unsigned r = 0; r < t->run->p->rounds; r++) {
        size_t n = 0, left = HP_ALLOCS;
        while (left || n) {
            if (left && (n == 0 || (bench_rand(t) & 1))) {
                size_t sz = rand_small(t);
                void *p = bench_alloc(t, sz);
                bench_touch(t, p, sz);
                left--;
                if (p)
                    live[n++] = p;
            } else {
                size_t i = (size_t)bench_rand_below(t, n);
                bench_free(t, live[i]);
                live[i] = live[--n];
            }
        }
    }
    bench_end(t);
    free(live);
}

const bench_workload_t bench_wl_hybrid_pool = {
    .name = "hybrid-pool", .source = "seed 004 (lock-free hybrid memory pool), its timing experiment",
    .help = "each thread: 10000 allocations of 8..1024 B randomly interleaved with frees of random live blocks, per round (quick 10, paper 50 rounds)",
    .cfg = BENCH_CFG_PAPER, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .metric = "time_s",
    .scale = hp_scale, .thread = hp_thread,
    .group = "frontend", .frontend = "--size 8,128,1024", .frontend_quick = "--rounds 100",
};
BENCH_WORKLOAD(bench_wl_hybrid_pool);
