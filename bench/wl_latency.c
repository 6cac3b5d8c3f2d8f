/*
 * wl_latency.c - the latency of single operations when threads outnumber
 * cores (issue 11's tail-latency benchmark).
 *
 * 4 KiB frames, an empty 64 MiB arena. Each thread keeps a ring of 32 live
 * order-0 frames: it allocates one, frees the oldest, and times every
 * allocation and every free on its own with the monotonic clock, for the
 * scale's time window. By default 8 threads: on a 2-core machine a thread is
 * preempted in the middle of some operations; under a spin lock every other
 * thread then waits out the holder's time slice, lock-free nobody does.
 *
 * Latencies go into a log-linear histogram per thread (32 steps per power
 * of two: at most 3% off the true value; the maximum is exact), merged after
 * the run into the metrics p50 .. p99.99 and max (ns), q_<fraction> points
 * of the distribution for the CDF plot, and timer_ns, the cost of one clock
 * read (included in every figure, the same for every allocator).
 *
 * Percentiles count operations: a thread stalled behind a preempted lock
 * holder makes one slow sample, then few others (it did little else), so a
 * stall shows in max and in the throughput (ops_per_s) more than in p99.9.
 * Time-weighting does not help here: a timed thread is itself preempted
 * inside most of its operations' windows at 8 threads on 2 cores, and
 * those waits (lock-free or not) dominate any time-weighted figure.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define RING     32
#define SUB_BITS 5                                  /* 32 steps per power of two */
#define NBUCKETS ((64 - SUB_BITS + 1) << SUB_BITS)

typedef struct lat_hist {
    uint64_t count[NBUCKETS];
    uint64_t n, max;
} lat_hist_t;

static unsigned bucket_of(uint64_t v)
{
    if (v < (1u << SUB_BITS))
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);   /* e >= SUB_BITS */
    unsigned sub = (unsigned)(v >> (e - SUB_BITS)) & ((1u << SUB_BITS) - 1);
    return ((e - SUB_BITS + 1) << SUB_BITS) + sub;
}

/* The middle of bucket b's value range. */
static double bucket_value(unsigned b)
{
    if (b < (1u << SUB_BITS))
        return b;
    unsigned e = (b >> SUB_BITS) + SUB_BITS - 1, sub = b & ((1u << SUB_BITS) - 1);
    double lo = (double)(((uint64_t)(1u << SUB_BITS) + sub) << (e - SUB_BITS));
    return lo + (double)((uint64_t)1 << (e - SUB_BITS)) / 2;
}

static inline void record(lat_hist_t *h, uint64_t ns)
{
    h->count[bucket_of(ns)]++;
    h->n++;
    if (ns > h->max)
        h->max = ns;
}

static void lat_scale(bench_params_t *p, bench_scale_t s)
{
    static const double secs[] = { 0.05, 0.5, 3.0 };
    p->seconds = secs[s];
}

static int lat_setup(bench_run_t *r)
{
    r->shared = calloc((size_t)r->nthreads, sizeof(lat_hist_t));
    return r->shared ? 0 : -1;
}

static void lat_thread(bench_thread_t *t)
{
    lat_hist_t *h = &((lat_hist_t *)t->run->shared)[t->id];
    void *ring[RING] = { 0 };
    unsigned head = 0;
    bench_begin(t);
    const uint64_t deadline = t->t_begin + (uint64_t)(t->run->p->seconds * 1e9);
    uint64_t now = t->t_begin;
    while (now < deadline) {
        uint64_t t0 = bench_now_ns();
        void *p = bench_alloc_order(t, 0);
        uint64_t t1 = bench_now_ns();
        record(h, t1 - t0);
        if (ring[head]) {
            void *old = ring[head];
            t0 = bench_now_ns();
            bench_free(t, old);
            now = bench_now_ns();
            record(h, now - t0);
        } else {
            now = t1;
        }
        ring[head] = p;
        head = (head + 1) % RING;
    }
    bench_end(t);
    for (unsigned i = 0; i < RING; i++)
        if (ring[i])
            t->a->free(t->inst, ring[i]);
}

/* The CDF points plot.py draws, and the percentiles of the table. */
static const double cdf_q[] = { 0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995,
                                0.998, 0.999, 0.9995, 0.9998, 0.9999, 0.99995, 0.99999 };
static const char *const cdf_name[] = { "q_0.01", "q_0.1", "q_0.2", "q_0.3", "q_0.4", "q_0.5", "q_0.6",
                                        "q_0.7", "q_0.8", "q_0.9", "q_0.95", "q_0.98", "q_0.99", "q_0.995",
                                        "q_0.998", "q_0.999", "q_0.9995", "q_0.9998", "q_0.9999",
                                        "q_0.99995", "q_0.99999" };
_Static_assert(sizeof cdf_q / sizeof cdf_q[0] == sizeof cdf_name / sizeof cdf_name[0], "one name per point");

static double quantile(const lat_hist_t *h, double q)
{
    uint64_t want = (uint64_t)((double)h->n * q), seen = 0;
    for (unsigned b = 0; b < NBUCKETS; b++) {
        seen += h->count[b];
        if (seen > want)
            return bucket_value(b) < (double)h->max ? bucket_value(b) : (double)h->max;
    }
    return (double)h->max;
}

static void lat_teardown(bench_run_t *r)
{
    lat_hist_t *hs = r->shared, *all = calloc(1, sizeof *all);
    if (!all)
        abort();
    for (int i = 0; i < r->nthreads; i++) {
        for (unsigned b = 0; b < NBUCKETS; b++)
            all->count[b] += hs[i].count[b];
        all->n += hs[i].n;
        all->max = hs[i].max > all->max ? hs[i].max : all->max;
    }
    bench_metric(r, "p50", quantile(all, 0.5));
    bench_metric(r, "p99", quantile(all, 0.99));
    bench_metric(r, "p99.9", quantile(all, 0.999));
    bench_metric(r, "p99.99", quantile(all, 0.9999));
    bench_metric(r, "max", (double)all->max);
    bench_metric(r, "samples", (double)all->n);
    for (size_t i = 0; i < sizeof cdf_q / sizeof cdf_q[0]; i++)
        bench_metric(r, cdf_name[i], quantile(all, cdf_q[i]));
    /* What one clock read costs here (the smallest of many pairs). */
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 1000; i++) {
        uint64_t a = bench_now_ns(), b = bench_now_ns();
        best = b - a < best ? b - a : best;
    }
    bench_metric(r, "timer_ns", (double)best);
    free(all);
    free(hs);
}

const bench_workload_t bench_wl_latency = {
    .name = "latency", .source = "issue 11 (tail latency under preemption)", .group = "experiment",
    .help = "8 threads (more than cores): alloc an order-0 frame, free the oldest of 32, each operation timed; p50..p99.99, max and the CDF (quick 0.5 s)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .threads = "8", .metric = "ops_per_s", .plot = "cdf",
    .show = "p50,p99,p99.9,max", .scale = lat_scale, .setup = lat_setup, .teardown = lat_teardown,
    .thread = lat_thread,
};
BENCH_WORKLOAD(bench_wl_latency);
