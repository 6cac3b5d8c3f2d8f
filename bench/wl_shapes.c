/*
 * wl_shapes.c - malloc shapes the front-end comparison lacked (issue 13,
 * item 6): repeated large blocks, an allocation storm, a slowly leaking
 * program, a phase change, many short threads and all-remote frees. They
 * need real memory (every page of a large block is written, as a program
 * would), so they run on the system malloc only (.malloc_only); peak RSS
 * and page faults (minflt) of each run are the runner's. See
 * bench/README.md for what each does and its amounts per scale.
 */
#include <sched.h>
#include <stdlib.h>

#include "bench.h"

#define PAGE 4096

/* Writes one word in every page of a fresh block: the first touch of each
 * page is what a cache that gave its memory back pays again (a fault). */
static void touch_pages(bench_thread_t *t, void *p, size_t size)
{
    if (!t->a->is_malloc || !p)
        return;
    for (size_t off = 0; off + sizeof(uint64_t) <= size; off += PAGE)
        *(volatile uint64_t *)((char *)p + off) = off;
}

/* Uniform in [lo, hi]. */
static size_t rand_range(bench_thread_t *t, size_t lo, size_t hi)
{
    return lo + (size_t)bench_rand_below(t, hi - lo + 1);
}

/* Roughly log-uniform in [16 B, 1 MiB]: a power of two 16..512 KiB, then
 * up to twice it, so small requests dominate by count and large ones by
 * bytes, as in a real program's mix. */
static size_t rand_mixed(bench_thread_t *t)
{
    size_t lo = (size_t)16 << bench_rand_below(t, 16);
    return rand_range(t, lo, 2 * lo);
}

/* This thread's share of a total (at least 1). */
static uint64_t share(const bench_thread_t *t, uint64_t total)
{
    uint64_t n = total / (uint64_t)t->nthreads;
    return n ? n : 1;
}

/* --- large-blocks: 5-25 MiB blocks freed and reallocated in a loop --- */

static void lb_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t iters[] = { 4, 60, 4000 };
    p->ops = iters[s];
}

/* Live blocks of the whole run: 20 at paper scale (about 300 MiB live), 10
 * at quick (about 150 MiB: still far above a fixed 64 MiB cache), 2 at
 * smoke. */
static unsigned lb_live(const bench_params_t *p)
{
    static const unsigned live[] = { 2, 10, 20 };
    return live[p->scale];
}

static void lb_thread(bench_thread_t *t)
{
    const size_t nslots = share(t, lb_live(t->run->p));
    const uint64_t n = share(t, t->run->p->ops);
    void **slot = bench_xcalloc(nslots, sizeof *slot);
    bench_begin(t);
    for (size_t i = 0; i < nslots; i++) {
        size_t sz = rand_range(t, (size_t)5 << 20, (size_t)25 << 20);
        slot[i] = bench_alloc(t, sz);
        touch_pages(t, slot[i], sz);
    }
    for (uint64_t i = 0; i < n; i++) {
        size_t k = (size_t)bench_rand_below(t, nslots);
        if (slot[k])
            bench_free(t, slot[k]);
        size_t sz = rand_range(t, (size_t)5 << 20, (size_t)25 << 20);
        slot[k] = bench_alloc(t, sz);
        touch_pages(t, slot[k], sz);
    }
    for (size_t i = 0; i < nslots; i++)
        if (slot[i])
            bench_free(t, slot[i]);
    bench_end(t);
    free(slot);
}

const bench_workload_t bench_wl_large_blocks = {
    .name = "large-blocks", .source = "issue 13 (an external suite's repeated large blocks)",
    .help = "blocks of 5..25 MiB, every page written, 10 live (paper 20) split over the threads; replace a random one, ops times (quick 60, front-end 120, paper 4000)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .malloc_only = 1, .metric = "time_s",
    .threads = "1", .repeat = 3, .scale = lb_scale, .thread = lb_thread,
    .group = "frontend", .frontend = "", .frontend_quick = "--ops 120",
};
BENCH_WORKLOAD(bench_wl_large_blocks);

/* --- storm: many threads allocating and freeing mixed sizes 16 B..1 MiB --- */

#define STORM_LIVE 32 /* live blocks per thread */

static void st_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t ops[] = { 2000, 20000, 2000000 };
    p->ops = ops[s];
}

static void st_thread(bench_thread_t *t)
{
    void *slot[STORM_LIVE] = { 0 };
    const uint64_t n = share(t, t->run->p->ops);
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        size_t k = (size_t)bench_rand_below(t, STORM_LIVE);
        if (slot[k])
            bench_free(t, slot[k]);
        size_t sz = rand_mixed(t);
        slot[k] = bench_alloc(t, sz);
        touch_pages(t, slot[k], sz);
    }
    for (size_t k = 0; k < STORM_LIVE; k++)
        if (slot[k])
            bench_free(t, slot[k]);
    bench_end(t);
}

const bench_workload_t bench_wl_storm = {
    .name = "storm", .source = "issue 13 (an external suite's 8-thread allocation storm)",
    .help = "each thread keeps 32 blocks of 16 B..1 MiB (log-uniform, every page written) and replaces a random one, ops/T times (quick 20k, front-end 100k, paper 2M)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .malloc_only = 1, .metric = "time_s",
    .threads = "2,4,8", .repeat = 3, .scale = st_scale, .thread = st_thread,
    .group = "frontend", .frontend = "", .frontend_quick = "--ops 100000",
};
BENCH_WORKLOAD(bench_wl_storm);

/* --- leak: allocates and frees, but keeps 1% for ever --- */

#define LEAK_LIVE 1024  /* live (not leaked) blocks per thread */
#define LEAK_ONE_IN 100 /* a replaced block is leaked instead of freed with this odds */

static void lk_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t ops[] = { 20000, 200000, 20000000 };
    p->ops = ops[s];
}

static void lk_thread(bench_thread_t *t)
{
    void **slot = bench_xcalloc(LEAK_LIVE, sizeof *slot);
    void *leaked = NULL; /* linked through each block's first word */
    const uint64_t n = share(t, t->run->p->ops);
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        size_t k = (size_t)bench_rand_below(t, LEAK_LIVE);
        if (slot[k]) {
            if (bench_rand_below(t, LEAK_ONE_IN) == 0) {
                *(void **)slot[k] = leaked;
                leaked = slot[k];
            } else {
                bench_free(t, slot[k]);
            }
        }
        size_t sz = rand_range(t, 16, 4096);
        slot[k] = bench_alloc(t, sz);
        bench_touch(t, slot[k], sz);
    }
    bench_end(t);
    /* The program's end: not timed, and the peak was reached already. */
    for (size_t k = 0; k < LEAK_LIVE; k++)
        if (slot[k])
            t->a->free(t->inst, slot[k]);
    while (leaked) {
        void *next = *(void **)leaked;
        t->a->free(t->inst, leaked);
        leaked = next;
    }
    free(slot);
}

const bench_workload_t bench_wl_leak = {
    .name = "leak", .source = "issue 13 (an external suite's slowly leaking program)",
    .help = "each thread keeps 1024 blocks of 16..4096 B and replaces a random one, ops/T times; 1 in 100 replaced blocks is kept for ever instead of freed (quick 200k, front-end 2M, paper 20M)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .malloc_only = 1, .metric = "time_s",
    .threads = "1,2,4", .repeat = 3, .scale = lk_scale, .thread = lk_thread,
    .group = "frontend", .frontend = "", .frontend_quick = "--ops 2000000",
};
BENCH_WORKLOAD(bench_wl_leak);

/* --- phase-change: N MiB of 64 B objects, freed; then N MiB of 256 KiB --- */

/* ops is N, the MiB of each phase (split over the threads). */
static void ph_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t mib[] = { 8, 64, 1024 };
    p->ops = mib[s];
}

/* Allocates bytes in blocks of size (pages written), linked through their
 * first words, and returns the list. */
static void *fill_list(bench_thread_t *t, uint64_t bytes, size_t size, int every_page)
{
    void *head = NULL;
    for (uint64_t got = 0; got < bytes; got += size) {
        void *p = bench_alloc(t, size);
        if (!p)
            continue;
        if (every_page)
            touch_pages(t, p, size);
        *(void **)p = head;
        head = p;
    }
    return head;
}

static void free_list(bench_thread_t *t, void *head)
{
    while (head) {
        void *next = *(void **)head;
        bench_free(t, head);
        head = next;
    }
}

static void ph_thread(bench_thread_t *t)
{
    const uint64_t bytes = (share(t, t->run->p->ops << 20));
    bench_begin(t);
    free_list(t, fill_list(t, bytes, 64, 0));
    bench_barrier(t); /* the whole program changes phase */
    free_list(t, fill_list(t, bytes, (size_t)256 << 10, 1));
    bench_end(t);
}

const bench_workload_t bench_wl_phase_change = {
    .name = "phase-change", .source = "issue 13 (small-object memory that never comes back)",
    .help = "N MiB of 64 B objects allocated and freed, then N MiB of 256 KiB blocks (every page written) allocated and freed, split over the threads; --ops is N (quick 64, front-end 256, paper 1024)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .malloc_only = 1, .metric = "time_s",
    .threads = "1", .repeat = 3, .scale = ph_scale, .thread = ph_thread,
    .group = "frontend", .frontend = "", .frontend_quick = "--ops 256",
};
BENCH_WORKLOAD(bench_wl_phase_change);

/* --- short-threads: thousands of threads that allocate a little and exit --- */

#define SHORT_ALLOCS 100 /* blocks per short thread */

static void sh_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t n[] = { 50, 500, 20000 };
    p->ops = n[s];
}

/* Runs on its own fresh thread, using its spawner's counters: the spawner
 * waits in pthread_join meanwhile, which orders the two. */
static void *sh_short(void *arg)
{
    bench_thread_t *t = arg;
    void *live[SHORT_ALLOCS];
    for (int i = 0; i < SHORT_ALLOCS; i++) {
        size_t sz = rand_range(t, 16, 2048);
        live[i] = bench_alloc(t, sz);
        bench_touch(t, live[i], sz);
    }
    for (int i = 0; i < SHORT_ALLOCS; i++)
        if (live[i])
            bench_free(t, live[i]);
    return NULL;
}

static void sh_thread(bench_thread_t *t)
{
    const uint64_t n = share(t, t->run->p->ops);
    bench_begin(t);
    for (uint64_t i = 0; i < n; i++) {
        pthread_t tid;
        if (pthread_create(&tid, NULL, sh_short, t) != 0) {
            t->failed++;
            continue;
        }
        pthread_join(tid, NULL);
    }
    bench_end(t);
}

const bench_workload_t bench_wl_short_threads = {
    .name = "short-threads", .source = "issue 13 (heaps of exited threads)",
    .help = "each of T threads starts ops/T short threads one after another; each allocates 100 blocks of 16..2048 B, frees them and exits (quick 500, front-end 2000, paper 20000 threads)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .malloc_only = 1, .metric = "time_s",
    .threads = "1,2,4", .repeat = 3, .scale = sh_scale, .thread = sh_thread,
    .group = "frontend", .frontend = "", .frontend_quick = "--ops 2000",
};
BENCH_WORKLOAD(bench_wl_short_threads);

/* --- remote-free: every block freed by another thread than its allocator --- */

#define REMOTE_BATCH 64 /* blocks handed over at once */

/* One mailbox per thread: a batch (a list linked through the blocks' first
 * words) waits there until its receiver takes it. */
typedef struct mailbox {
    _Alignas(64) _Atomic(void *) batch;
} mailbox_t;

static void rf_scale(bench_params_t *p, bench_scale_t s)
{
    static const uint64_t n[] = { 20000, 200000, 20000000 };
    p->ops = n[s];
}

static int rf_setup(bench_run_t *r)
{
    mailbox_t *m = nbbs_tu_aligned_alloc(NBBS_TU_CACHE_LINE, sizeof(mailbox_t) * (size_t)r->nthreads);
    if (!m)
        return -1;
    for (int i = 0; i < r->nthreads; i++)
        atomic_init(&m[i].batch, NULL);
    r->shared = m;
    return 0;
}

static void rf_teardown(bench_run_t *r)
{
    free(r->shared);
}

/* Frees the batch waiting in box, if any; returns 1 if there was one. */
static int rf_take(bench_thread_t *t, mailbox_t *box)
{
    void *p = atomic_exchange_explicit(&box->batch, NULL, memory_order_acquire);
    if (!p)
        return 0;
    free_list(t, p);
    return 1;
}

/* Threads form a ring: each allocates batches of 64 blocks of 16..1024 B
 * and hands them to its successor, which frees them; it sends and receives
 * the same number of batches. Taking its own mailbox whenever the
 * successor's is full keeps the ring moving; yielding lets a preempted peer
 * run on an oversubscribed machine. */
static void rf_thread(bench_thread_t *t)
{
    mailbox_t *m = t->run->shared;
    mailbox_t *in = &m[t->id], *out = &m[(t->id + 1) % t->nthreads];
    const uint64_t n = (share(t, t->run->p->ops) + REMOTE_BATCH - 1) / REMOTE_BATCH;
    uint64_t sent = 0, got = 0;
    void *pending = NULL;
    bench_begin(t);
    while (sent < n || got < n) {
        int moved = 0;
        if (sent < n) {
            if (!pending)
                for (int i = 0; i < REMOTE_BATCH; i++) {
                    size_t sz = rand_range(t, 16, 1024);
                    void *p = bench_alloc(t, sz);
                    if (!p)
                        continue;
                    *(void **)p = pending;
                    pending = p;
                }
            if (!pending)
                abort(); /* no memory: the receiver would wait for ever */
            void *expect = NULL;
            if (atomic_compare_exchange_strong_explicit(&out->batch, &expect, pending, memory_order_release,
                                                        memory_order_relaxed)) {
                pending = NULL;
                sent++;
                moved = 1;
            }
        }
        if (got < n && rf_take(t, in)) {
            got++;
            moved = 1;
        }
        if (!moved)
            sched_yield();
    }
    bench_end(t);
}

const bench_workload_t bench_wl_remote_free = {
    .name = "remote-free", .source = "issue 13 (cross-thread frees)",
    .help = "threads in a ring: each allocates batches of 64 blocks of 16..1024 B and hands each batch to the next thread, which frees it: every free is remote (quick 200k, front-end 1M, paper 20M blocks)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .malloc_ok = 1, .malloc_only = 1, .metric = "time_s",
    .threads = "2,4,8", .min_threads = 2, .repeat = 3, .scale = rf_scale, .setup = rf_setup,
    .teardown = rf_teardown, .thread = rf_thread,
    .group = "frontend", .frontend = "", .frontend_quick = "--ops 1000000",
};
BENCH_WORKLOAD(bench_wl_remote_free);
