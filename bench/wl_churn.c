/*
 * wl_churn.c - do huge frames survive churn? (issue 10's experiment, after
 * LLFree's fragmentation benchmark, Wrenger et al., ATC'23).
 *
 * 4 KiB frames. Every thread fills its equal share of --fill % of the arena
 * with blocks of its order, all wait, each frees a random half of its own
 * blocks, all wait, each allocates the same number again. Then, with no
 * operation in flight, the run counts 2 MiB (order-9) blocks three ways:
 *
 *   huge_free   how many order-9 blocks the allocator actually hands out
 *               (thread 0 allocates order 9 until NULL, then frees them);
 *   huge_ideal  aligned 2 MiB regions with no live block in them, from the
 *               workload's own record of what is live (a buddy that merges
 *               eagerly gives exactly these);
 *   huge_bound  the most any placement could keep: free frames / 512,
 *               capped by the number of regions.
 *
 * Four variants: the small blocks are order 0 (churn, churn-mixed) or
 * order 4 = 64 KiB (churn-o4, churn-o4-mixed); in the -mixed ones the odd
 * threads allocate order 9 instead (the same share of bytes), so order-0
 * and order-9 requests race; huge_failed counts their failed order-9
 * re-allocations (fill_failed: allocations that failed while filling). An
 * order-9 thread has 512 (or 32) times fewer blocks to allocate than an
 * order-0 (order-4) thread: left alone it would finish its phase before the
 * others got going, so it paces itself to spread its allocations evenly
 * over the small threads' progress (a shared count they bump every 64
 * allocations) - "at the same time" for the whole phase.
 * Timed: the re-allocation phase (alloc_ns).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define HUGE_ORDER 9u /* 2 MiB of 4 KiB frames */

typedef struct churn_thread {
    void   **v;       /* the thread's blocks; v[i] NULL when not live */
    size_t   n;       /* blocks allocated in the fill */
    unsigned order;
    uint64_t fill_failed, refill_failed;
} churn_thread_t;

/* The run's shared state: the threads' records and the small threads'
 * progress in the current phase (fill, re-allocation). */
typedef struct churn_shared {
    churn_thread_t  *ct;
    _Atomic uint64_t small_done[2];
} churn_shared_t;

#define PACE_STEP 64u

typedef struct churn_variant {
    unsigned small_order;
    int      mixed;
} churn_variant_t;

static void churn_scale(bench_params_t *p, bench_scale_t s)
{
    /* 64 MiB (32 huge regions), 1 GiB (512), 4 GiB (2048, as in issue 10
     * and LLFree's paper) of 4 KiB frames. */
    static const size_t arena[] = { (size_t)64 << 20, (size_t)1 << 30, (size_t)4 << 30 };
    p->arena.size = arena[s];
}

static unsigned thread_order(const bench_thread_t *t, const churn_variant_t *cv)
{
    return cv->mixed && (t->id & 1) ? HUGE_ORDER : cv->small_order;
}

/* Small thread: counts its progress. Huge thread (mixed): waits until the
 * small threads have done the fraction i/n of their total in this phase. */
static void pace(bench_thread_t *t, churn_shared_t *sh, int phase, int huge, size_t i, size_t n, uint64_t total)
{
    if (!huge) {
        if ((i + 1) % PACE_STEP == 0 || i + 1 == n)
            atomic_fetch_add_explicit(&sh->small_done[phase], (i + 1) % PACE_STEP ? (i + 1) % PACE_STEP : PACE_STEP,
                                      memory_order_relaxed);
        return;
    }
    /* Sleep rather than spin: on a loaded 2-core machine a spinning waiter
     * would take the CPU from the threads it waits for. */
    static const struct timespec nap = { 0, 20000 };
    uint64_t want = n ? (uint64_t)((double)total * (double)i / (double)n) : 0;
    while (atomic_load_explicit(&sh->small_done[phase], memory_order_relaxed) < want)
        nanosleep(&nap, NULL);
    (void)t;
}

static void churn_thread(bench_thread_t *t, const churn_variant_t *cv)
{
    const bench_params_t *p = t->run->p;
    churn_shared_t *sh = t->run->shared;
    churn_thread_t *ct = &sh->ct[t->id];
    const unsigned order = thread_order(t, cv);
    const int huge = order == HUGE_ORDER && cv->mixed;
    const size_t block = p->arena.min_block << order;
    const size_t share = (size_t)((double)p->arena.size * (double)p->value / 100.0) / (size_t)t->nthreads;
    const size_t n = share / block;
    /* What the small threads do in all, per phase (for the pacing). */
    const size_t n_small = share / (p->arena.min_block << cv->small_order);
    const uint64_t nsmall_threads = (uint64_t)(t->nthreads + 1) / 2;
    const uint64_t small_total[2] = { n_small * nsmall_threads, n_small / 2 * nsmall_threads };
    ct->order = order;
    ct->n = n;
    ct->v = bench_xcalloc(n, sizeof *ct->v);

    /* Fill: the threads race, as a kernel's CPUs would at boot. */
    bench_barrier(t);
    for (size_t i = 0; i < n; i++) {
        if (cv->mixed)
            pace(t, sh, 0, huge, i, n, small_total[0]);
        ct->fill_failed += !(ct->v[i] = t->a->alloc_order(t->inst, order));
    }
    bench_barrier(t);

    /* Free a random half: shuffle, free the first half. */
    bench_shuffle(t, ct->v, n);
    const size_t half = n / 2;
    for (size_t i = 0; i < half; i++)
        if (ct->v[i]) {
            t->a->free(t->inst, ct->v[i]);
            ct->v[i] = NULL;
        }
    bench_barrier(t);

    /* Re-allocate the same number, timed (a pacing thread times each call,
     * so that its waits are not counted). */
    bench_begin(t);
    uint64_t t0 = bench_now_ns();
    for (size_t i = 0; i < half; i++) {
        if (!huge) {
            if (cv->mixed)
                pace(t, sh, 1, 0, i, half, small_total[1]);
            ct->v[i] = bench_alloc_order(t, order);
            continue;
        }
        pace(t, sh, 1, 1, i, half, small_total[1]);
        uint64_t a0 = bench_now_ns();
        ct->v[i] = bench_alloc_order(t, order);
        t->alloc_ns += bench_now_ns() - a0;
    }
    if (!huge)
        t->alloc_ns += bench_now_ns() - t0;
    bench_end(t);
    ct->refill_failed = t->failed;
    bench_barrier(t);
}

static int churn_setup(bench_run_t *r)
{
    churn_shared_t *sh = calloc(1, sizeof *sh);
    if (!sh)
        return -1;
    sh->ct = calloc((size_t)r->nthreads, sizeof(churn_thread_t));
    if (!sh->ct) {
        free(sh);
        return -1;
    }
    atomic_init(&sh->small_done[0], 0);
    atomic_init(&sh->small_done[1], 0);
    r->shared = sh;
    return 0;
}

/* Runs after the threads: counts the huge blocks three ways (see the top). */
static void churn_teardown(bench_run_t *r)
{
    churn_shared_t *sh = r->shared;
    churn_thread_t *ct = sh->ct;
    const bench_arena_t *ar = &r->p->arena;
    const size_t huge = ar->min_block << HUGE_ORDER;
    const size_t nregions = ar->size / huge;
    unsigned char *used = calloc(nregions ? nregions : 1, 1);
    if (!used)
        abort();
    size_t live_frames = 0;
    uint64_t huge_failed = 0, small_failed = 0, fill_failed = 0;
    for (int i = 0; i < r->nthreads; i++) {
        const size_t block = ar->min_block << ct[i].order;
        for (size_t k = 0; k < ct[i].n; k++) {
            if (!ct[i].v[k])
                continue;
            size_t off = (size_t)((char *)ct[i].v[k] - ar->base);
            for (size_t g = off / huge; g < (off + block + huge - 1) / huge && g < nregions; g++)
                used[g] = 1;
            live_frames += (size_t)1 << ct[i].order;
        }
        fill_failed += ct[i].fill_failed;
        if (ct[i].order == HUGE_ORDER)
            huge_failed += ct[i].refill_failed;
        else
            small_failed += ct[i].refill_failed;
    }
    size_t ideal = 0;
    for (size_t g = 0; g < nregions; g++)
        ideal += !used[g];
    const size_t frames = ar->size / ar->min_block;
    size_t bound = (frames - live_frames) >> HUGE_ORDER;
    bound = bound < nregions ? bound : nregions;

    /* The probe: what the allocator gives now. */
    void **got = calloc(nregions + 1, sizeof *got);
    if (!got)
        abort();
    size_t probe = 0;
    while (probe <= nregions && (got[probe] = r->a->alloc_order(r->inst, HUGE_ORDER)) != NULL)
        probe++;
    for (size_t i = 0; i < probe; i++)
        r->a->free(r->inst, got[i]);

    bench_metric(r, "huge_free", (double)probe);
    bench_metric(r, "huge_ideal", (double)ideal);
    bench_metric(r, "huge_bound", (double)bound);
    bench_metric(r, "huge_regions", (double)nregions);
    bench_metric(r, "huge_pct_bound", bound ? 100.0 * (double)probe / (double)bound : 100.0);
    bench_metric(r, "huge_failed", (double)huge_failed);
    bench_metric(r, "small_failed", (double)small_failed);
    bench_metric(r, "fill_failed", (double)fill_failed);
    bench_metric(r, "free_frames", (double)(frames - live_frames));
    free(got);
    free(used);
    for (int i = 0; i < r->nthreads; i++)
        free(ct[i].v);
    free(ct);
    free(sh);
}

static const churn_variant_t v_o0 = { 0, 0 }, v_o0_mixed = { 0, 1 }, v_o4 = { 4, 0 }, v_o4_mixed = { 4, 1 };
static void churn_o0(bench_thread_t *t) { churn_thread(t, &v_o0); }
static void churn_o0_mixed(bench_thread_t *t) { churn_thread(t, &v_o0_mixed); }
static void churn_o4(bench_thread_t *t) { churn_thread(t, &v_o4); }
static void churn_o4_mixed(bench_thread_t *t) { churn_thread(t, &v_o4_mixed); }

#define CHURN_SHOW "huge_free,huge_ideal,huge_bound,huge_failed"
#define CHURN_COMMON                                                                               \
    .source = "issue 10, after LLFree's fragmentation benchmark (ATC'23)", .group = "experiment",   \
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_FILL, .values = "50,75,90", .threads = "4",        \
    .repeat = 5,                                                                                    \
    .metric = "alloc_ns", .plot = "churn", .show = CHURN_SHOW, .scale = churn_scale,               \
    .setup = churn_setup, .teardown = churn_teardown

const bench_workload_t bench_wl_churn = {
    .name = "churn",
    .help = "fill --fill % (50,75,90) with order-0 frames from 4 threads, free a random half, re-allocate it; count free 2 MiB blocks vs ideal and bound",
    .thread = churn_o0, CHURN_COMMON,
};
BENCH_WORKLOAD(bench_wl_churn);

const bench_workload_t bench_wl_churn_mixed = {
    .name = "churn-mixed",
    .help = "churn with the odd threads allocating order 9 (2 MiB) at the same time; also failed order-9 re-allocations",
    .thread = churn_o0_mixed, .min_threads = 2, CHURN_COMMON,
};
BENCH_WORKLOAD(bench_wl_churn_mixed);

const bench_workload_t bench_wl_churn_o4 = {
    .name = "churn-o4",
    .help = "churn with order-4 (64 KiB) blocks instead of order 0",
    .thread = churn_o4, CHURN_COMMON,
};
BENCH_WORKLOAD(bench_wl_churn_o4);

const bench_workload_t bench_wl_churn_o4_mixed = {
    .name = "churn-o4-mixed",
    .help = "churn-o4 with the odd threads allocating order 9 at the same time",
    .thread = churn_o4_mixed, .min_threads = 2, CHURN_COMMON,
};
BENCH_WORKLOAD(bench_wl_churn_o4_mixed);
