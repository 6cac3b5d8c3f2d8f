/*
 * bench.h - the two interfaces of nbbs-bench: allocators and workloads.
 *
 * An allocator is one bench_allocator_t in one file (bench/alloc_*.c) that
 * registers itself with BENCH_ALLOCATOR(); a workload is one bench_workload_t
 * in one file (bench/wl_*.c) registered with BENCH_WORKLOAD(). Nothing else
 * names them: the runner (runner.c) finds them in the registry (registry.c),
 * and run.sh and plot.py learn them from `nbbs-bench --list --json`. The
 * runner crosses them: for every workload, allocator, parameter value and
 * thread count it creates a fresh allocator instance, starts T threads on
 * the workload and collects one bench_thread_t per thread.
 *
 * Not a correctness test: workloads check only what they must to keep going
 * (a NULL from alloc is counted as a failed allocation, never dereferenced).
 */
#ifndef NBBS_BENCH_H
#define NBBS_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "nbbs_testutil.h"

/* ------------------------------------------------------------------------
 * Allocators
 * ------------------------------------------------------------------------ */

/* The arena an allocator instance manages. The buddy allocators never touch
 * it, so base is a fake address range unless the workload writes to blocks. */
typedef struct bench_arena {
    char    *base;       /* first byte (NBBS_TU_FAKE_BASE: never mapped) */
    size_t   min_block;  /* bytes of an order-0 block */
    unsigned max_order;  /* largest block = min_block << max_order */
    size_t   size;       /* arena bytes, a multiple of the max block */
} bench_arena_t;

/* Free-space view of an instance, taken with no operation in flight. */
typedef struct bench_heap_stats {
    size_t free_bytes;
    size_t largest_free;
    size_t meta_bytes;
} bench_heap_stats_t;

typedef struct bench_allocator {
    const char *name;
    const char *help;     /* one line for --list / --help */
    int         lockfree; /* 1 for ours, 0 for the locked baselines */
    int         is_malloc;/* the process's malloc: unbounded, real memory, no orders */
    /* For a locked allocator running a lock-free one's code under a lock:
     * that allocator's name (the report compares the two). */
    const char *twin_of;
    /* 1 for a classic design every lock-free allocator is compared with. */
    int         baseline;
    /* Returns an instance over a, or NULL. */
    void *(*create)(const bench_arena_t *a);
    void  (*destroy)(void *inst);
    void *(*alloc)(void *inst, size_t size);
    void *(*alloc_order)(void *inst, unsigned order);   /* NULL for malloc */
    void  (*free)(void *inst, void *p);
    /* Optional (NULL for malloc): fills *out; only called between barriers. */
    void  (*stats)(void *inst, bench_heap_stats_t *out);
    /* Optional per-thread state (e.g. a per-CPU cache in front of the shared
     * instance): attach returns the handle the thread then passes to alloc,
     * alloc_order and free instead of inst (NULL: setup failed); detach
     * gives its resources back. Called by each worker thread at its start
     * and end, outside the measured region. */
    void *(*thread_attach)(void *inst, int thread_id);
    void  (*thread_detach)(void *inst, void *handle);
} bench_allocator_t;

/* Registration: one line after the definition, in the allocator's or the
 * workload's file. The record goes into a named section that the registry
 * walks (GNU toolchains define __start_/__stop_ symbols for it); the file
 * and line give the registry a stable order. */
typedef struct bench_reg {
    const void *item;
    const char *file;
    int         line;
} bench_reg_t;

#define BENCH_REGISTER_(sect, var)                                                        \
    static const bench_reg_t bench_reg_##var                                              \
        __attribute__((used, section(sect), aligned(sizeof(void *)))) = { &var, __FILE__, __LINE__ }
#define BENCH_ALLOCATOR(var) BENCH_REGISTER_("nbbs_bench_alloc", var)

/* ------------------------------------------------------------------------
 * Scales and per-run parameters
 * ------------------------------------------------------------------------ */

typedef enum { BENCH_SCALE_SMOKE = 0, BENCH_SCALE_QUICK = 1, BENCH_SCALE_PAPER = 2 } bench_scale_t;

/* Which command-line list a workload sweeps (one run per value). */
typedef enum { BENCH_PARAM_NONE, BENCH_PARAM_SIZE, BENCH_PARAM_ORDER, BENCH_PARAM_FILL } bench_param_t;

/* The workload's own figures of a run (bench_metric), beyond the runner's. */
#define BENCH_MAX_METRICS 64

/* Which arena configuration a workload uses. */
typedef enum { BENCH_CFG_PAPER, BENCH_CFG_PAGE } bench_cfg_t;

/* Everything a workload may read about its run (shared by all threads). */
typedef struct bench_params {
    bench_scale_t scale;
    long          value;       /* the swept parameter: size, order or fill % */
    uint64_t      ops;         /* total operations (loop iterations) for fixed-work workloads */
    unsigned      rounds;      /* rounds for round-based workloads */
    double        seconds;     /* time window for timed workloads */
    bench_arena_t arena;
} bench_params_t;

/* ------------------------------------------------------------------------
 * Threads and runs
 * ------------------------------------------------------------------------ */

/* Counts of the hooked (counting) build, per thread. */
typedef struct bench_atomics {
    uint64_t loads, stores, cas, cas_failed, rmw;
} bench_atomics_t;

#define BENCH_MAX_SNAPS 4

typedef struct bench_snap {
    const char *phase;
    size_t      free_bytes, largest_free;
} bench_snap_t;

struct bench_run;

/* One per thread, padded so counters of two threads never share a line. */
typedef struct bench_thread {
    _Alignas(64) struct bench_run *run;
    int        id, nthreads;
    uint64_t   rng;
    void      *inst;                     /* the allocator instance */
    const bench_allocator_t *a;
    /* Filled by the workload (only for operations inside the measured region). */
    uint64_t   allocs, frees, failed;
    uint64_t   alloc_ns, free_ns;        /* time spent in alloc / free batches, when timed apart */
    uint64_t   alloc_cpu_ns, free_cpu_ns; /* the thread's CPU time over the same batches (0: not taken) */
    uint64_t   req_bytes, got_bytes;     /* internal fragmentation of successful allocations */
    uint64_t   t_begin, t_end;           /* measured region, ns */
    uint64_t   cpu_begin, cpu_end;       /* the thread's CPU time over the same region */
    uint64_t   rq_ns;                    /* run-queue wait (schedstat) from the start to bench_end */
    long       vcsw;                     /* voluntary context switches (sleeps) in the measured region */
    bench_atomics_t at_begin, atomics;   /* counting build only */
    void      *priv;                     /* workload's per-thread state */
} bench_thread_t;
/* The records are allocated together by the allocator under test: a larger
 * record lands in another size class, at other addresses against the
 * measured loop's objects (thread-test 8 B T=1 took 7 % more CPU per pair
 * with 320-byte records). Keep it within its 256 bytes. */
_Static_assert(sizeof(bench_thread_t) <= 256, "bench_thread_t grew: its size class is part of every measurement");

typedef struct bench_run {
    const bench_allocator_t *a;
    void                    *inst;
    const bench_params_t    *p;
    int                      nthreads;
    pthread_barrier_t        barrier;
    bench_thread_t          *threads;
    void                    *shared;     /* workload's shared state (setup/teardown) */
    int                      nsnaps;
    bench_snap_t             snaps[BENCH_MAX_SNAPS];
    int                      nmetrics;
    const char              *metric_names[BENCH_MAX_METRICS];
    double                   metric_values[BENCH_MAX_METRICS];
} bench_run_t;

typedef struct bench_workload {
    const char   *name;
    const char   *help;        /* one line for --help */
    const char   *source;      /* where it comes from */
    /* The report's section: "paper" (checked against the NBBS paper's
     * claim), "page", "llfree", "frontend" or "experiment". */
    const char   *group;
    bench_cfg_t   cfg;
    bench_param_t param;       /* the swept parameter */
    /* Values swept when the command line gives none for this parameter
     * (NULL: the runner's default for the parameter, e.g. --order 0). */
    const char   *values;
    /* Thread counts when the command line gives no --threads (NULL: the
     * suite's 1,2,4,8), and the fewest threads the workload can run on. */
    const char   *threads;
    int           min_threads;
    /* Runs per configuration when the command line gives no --repeat (0:
     * the suite's 3), e.g. more for figures that vary from run to run. */
    int           repeat;
    int           malloc_ok;   /* sizes and pattern make sense for the system malloc */
    /* Only for the system malloc (real memory, sizes beyond the buddy
     * arenas): the buddy allocators skip it. Implies malloc_ok. */
    int           malloc_only;
    /* What the report plots, comma-separated: time_s, ops_per_s, alloc_ns,
     * free_ns or pair_ns (see bench/README.md). */
    const char   *metric;
    /* How plot.py draws it: "threads" (default: a line per allocator over
     * threads), "churn" (bars of its huge-block metrics) or "cdf" (latency
     * distribution from its q_* metrics). */
    const char   *plot;
    /* Workload metrics (bench_metric names, comma-separated) printed in the
     * table after the runner's columns. */
    const char   *show;
    /* The malloc front-end comparison: extra nbbs-bench flags for this
     * workload at every scale and at quick scale (NULL: not in it). */
    const char   *frontend, *frontend_quick;
    /* Sets the work amount for a scale: ops, rounds or seconds. */
    void (*scale)(bench_params_t *p, bench_scale_t s);
    /* Optional shared state, built before threads start and freed after. */
    int  (*setup)(bench_run_t *r);
    void (*teardown)(bench_run_t *r);
    void (*thread)(bench_thread_t *t);
} bench_workload_t;

#define BENCH_WORKLOAD(var) BENCH_REGISTER_("nbbs_bench_wl", var)

/* The registered allocators and workloads, NULL-terminated, sorted by the
 * file and line that registered them (registry.c). */
extern const bench_allocator_t *const *bench_allocators;
extern const bench_workload_t *const *bench_workloads;
void bench_registry_init(void);

/* ------------------------------------------------------------------------
 * Helpers for workloads
 * ------------------------------------------------------------------------ */

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread: unlike the clock above it does not run
 * while the thread is preempted, so per-operation costs stay meaningful on
 * a loaded or oversubscribed machine (a spinning waiter still burns it). */
static inline uint64_t bench_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The thread's random stream (nbbs_testutil.h's xorshift64*): cheap enough
 * to call inside a timed loop (a few cycles). */
static inline uint64_t bench_rand(bench_thread_t *t)
{
    return nbbs_tu_rand(&t->rng);
}

/* Uniform in [0, n) (n small: the modulo bias is below 2^-40). */
static inline uint64_t bench_rand_below(bench_thread_t *t, uint64_t n)
{
    return nbbs_tu_rand_below(&t->rng, n);
}

/* Block bytes the buddy allocators grant for a request (for the
 * allocated/requested ratio; malloc's rounding is not known, so the same
 * power-of-two rule is recorded and the report leaves malloc's ratio out). */
static inline size_t bench_granted(const bench_thread_t *t, size_t size)
{
    size_t g = t->run->p->arena.min_block;
    while (g < size)
        g <<= 1;
    return g;
}

/* Allocation wrappers that keep the per-thread counters; inline so the
 * timed loops pay one indirect call per operation, as any user would. */
static inline void *bench_alloc(bench_thread_t *t, size_t size)
{
    void *p = t->a->alloc(t->inst, size);
    if (p) {
        t->allocs++;
        t->req_bytes += size;
        t->got_bytes += bench_granted(t, size);
    } else {
        t->failed++;
    }
    return p;
}

static inline void *bench_alloc_order(bench_thread_t *t, unsigned order)
{
    void *p = t->a->alloc_order(t->inst, order);
    if (p) {
        size_t sz = t->run->p->arena.min_block << order;
        t->allocs++;
        t->req_bytes += sz;
        t->got_bytes += sz;
    } else {
        t->failed++;
    }
    return p;
}

static inline void bench_free(bench_thread_t *t, void *p)
{
    t->a->free(t->inst, p);
    t->frees++;
}

/* Writes one word into a fresh block when it is real memory (malloc), as a
 * program would; the buddy allocators' fake arenas must not be touched. */
static inline void bench_touch(bench_thread_t *t, void *p, size_t size)
{
    if (t->a->is_malloc && p && size >= sizeof(uint64_t))
        *(volatile uint64_t *)p = (uint64_t)size;
}

/* Untimed work before bench_begin is not counted: bench_begin resets the
 * counters and starts the clock (and the atomic counts), bench_end stops. */
void bench_begin(bench_thread_t *t);
void bench_end(bench_thread_t *t);

/* All threads of the run wait here. */
void bench_barrier(bench_thread_t *t);

/* Thread 0 records the allocator's free space as phase `phase`; every thread
 * must call it (it holds two barriers so no operation is in flight). */
void bench_snapshot(bench_thread_t *t, const char *phase);

/* The fill-then-drain rounds shared by alloc-seq/free-seq and bulk: each
 * thread allocates its share of every block of the run's order (a full
 * arena), then frees them, alloc and free timed apart. reverse frees the last
 * allocated first; barriers makes every free phase start on a full arena
 * (wl_pages.c). */
void bench_fill_drain(bench_thread_t *t, bool reverse, bool barriers);

/* calloc that never returns NULL (a benchmark without memory cannot go on). */
static inline void *bench_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        abort();
    return p;
}

/* Fisher-Yates shuffle of v[0..n) with the thread's random stream. */
static inline void bench_shuffle(bench_thread_t *t, void **v, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)bench_rand_below(t, i);
        void *x = v[i - 1];
        v[i - 1] = v[j];
        v[j] = x;
    }
}

/* Number of blocks of `order` the arena holds (page-frame workloads). */
static inline size_t bench_arena_blocks(const bench_thread_t *t, unsigned order)
{
    return t->run->p->arena.size / (t->run->p->arena.min_block << order);
}

/* This thread's share [lo, hi) of n items split as evenly as possible. */
static inline void bench_share(const bench_thread_t *t, size_t n, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)t->id / (size_t)t->nthreads;
    *hi = n * (size_t)(t->id + 1) / (size_t)t->nthreads;
}

/* Records a figure of the run under name (a string literal): the JSON
 * keeps it per run and its median/min/max over the runs. Call from setup,
 * teardown, or thread 0 between barriers; a name set twice is overwritten. */
void bench_metric(bench_run_t *r, const char *name, double value);

/* Counting build: the hook's thread-local counts (zero in the normal build). */
void bench_atomics_read(bench_atomics_t *out);
extern const int bench_counting;

#endif /* NBBS_BENCH_H */
