/*
 * runner.c - the run loop: configurations, one run on fresh threads, the
 * hooks workloads call (bench.h), and the statistics over runs.
 *
 * For every workload x allocator x parameter value x thread count it makes
 * --repeat runs, each on a fresh allocator instance and fresh threads, and
 * reports the median with the min and max of the runs. See bench/README.md.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"

/* ------------------------------------------------------------------------
 * Hooks the workloads call (bench.h)
 * ------------------------------------------------------------------------ */

/* The calling thread's time spent runnable but not running so far, in ns
 * (the second field of /proc/thread-self/schedstat), or UINT64_MAX when the
 * kernel does not keep it. Plain open/read: nothing here allocates, so the
 * allocator under test sees no call from it. */
static uint64_t rq_wait_now(void)
{
    char buf[96];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY);
    if (fd < 0)
        return UINT64_MAX;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return UINT64_MAX;
    buf[n] = 0;
    char *end;
    strtoull(buf, &end, 10); /* time on the CPU */
    if (*end != ' ')
        return UINT64_MAX;
    char *end2;
    uint64_t v = strtoull(end, &end2, 10);
    return end2 == end ? UINT64_MAX : v;
}

/* Where the thread's region starts, kept out of its record (bench.h). */
static _Thread_local uint64_t rq_start;
static _Thread_local long     vcsw_begin;

static long vcsw_now(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nvcsw : -1;
}

void bench_begin(bench_thread_t *t)
{
    t->allocs = t->frees = t->failed = 0;
    t->alloc_ns = t->free_ns = 0;
    t->alloc_cpu_ns = t->free_cpu_ns = 0;
    t->req_bytes = t->got_bytes = 0;
    bench_atomics_read(&t->at_begin);
    vcsw_begin = vcsw_now();
    t->cpu_begin = bench_cpu_ns();
    t->t_begin = bench_now_ns();
}

void bench_end(bench_thread_t *t)
{
    t->t_end = bench_now_ns();
    t->cpu_end = bench_cpu_ns();
    long v = vcsw_now();
    t->vcsw = v >= 0 && vcsw_begin >= 0 ? v - vcsw_begin : -1;
    uint64_t rq = rq_wait_now();
    t->rq_ns = rq != UINT64_MAX && rq_start != UINT64_MAX ? rq - rq_start : UINT64_MAX;
    bench_atomics_t now;
    bench_atomics_read(&now);
    t->atomics.loads = now.loads - t->at_begin.loads;
    t->atomics.stores = now.stores - t->at_begin.stores;
    t->atomics.cas = now.cas - t->at_begin.cas;
    t->atomics.cas_failed = now.cas_failed - t->at_begin.cas_failed;
    t->atomics.rmw = now.rmw - t->at_begin.rmw;
}

void bench_barrier(bench_thread_t *t)
{
    pthread_barrier_wait(&t->run->barrier);
}

void bench_snapshot(bench_thread_t *t, const char *phase)
{
    bench_run_t *r = t->run;
    bench_barrier(t);
    if (t->id == 0 && r->a->stats && r->nsnaps < BENCH_MAX_SNAPS) {
        bench_heap_stats_t s;
        r->a->stats(r->inst, &s);
        r->snaps[r->nsnaps].phase = phase;
        r->snaps[r->nsnaps].free_bytes = s.free_bytes;
        r->snaps[r->nsnaps].largest_free = s.largest_free;
        r->nsnaps++;
    }
    bench_barrier(t);
}

void bench_metric(bench_run_t *r, const char *name, double value)
{
    for (int i = 0; i < r->nmetrics; i++)
        if (strcmp(r->metric_names[i], name) == 0) {
            r->metric_values[i] = value;
            return;
        }
    if (r->nmetrics == BENCH_MAX_METRICS)
        die("more than %d metrics in one run (%s)", BENCH_MAX_METRICS, name);
    r->metric_names[r->nmetrics] = name;
    r->metric_values[r->nmetrics++] = value;
}

/* ------------------------------------------------------------------------
 * Measurements of the process
 * ------------------------------------------------------------------------ */

/* Resets the kernel's peak-RSS mark (VmHWM) so each run reports its own
 * peak; falls back to the process-wide getrusage peak if that fails. */
static int reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static long peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return kb;
}

/* ------------------------------------------------------------------------
 * One run
 * ------------------------------------------------------------------------ */

/* The start line. A thread the allocator has seen says so (ready) and spins
 * there, yielding, until main lets every thread go at once. Main does so when
 * the threads were last seen spread over the CPUs (each on a CPU of its own
 * when T <= CPUs), or after START_SETTLE_NS, or at once when they are
 * pinned. A futex barrier instead left the placement to the wake-up path:
 * on a 2-CPU machine the scheduler queued the woken thread on its waker's
 * CPU while the other CPU idled (perf sched, stop 32), and a 2 ms run then
 * measured one thread after the other (start_skew_us the length of a whole
 * thread's run), under every malloc (docs/nbmalloc.md, "The start line").
 * Spinning threads stay runnable, so the load balancer spreads them before
 * the clock starts. */
#define START_SETTLE_NS 20000000ull

typedef struct start_line {
    _Atomic int ready;
    _Atomic int go;
} start_line_t;

typedef struct thread_arg {
    const bench_workload_t *w;
    bench_thread_t         *t;
    int                     cpu; /* pinned: the CPU to run on, then the one it ran on (sched_getcpu) */
    start_line_t           *line;
    _Atomic int             at;  /* at the start line: the CPU it was last seen on */
} thread_arg_t;

static void start_line_wait(start_line_t *sl, thread_arg_t *ta)
{
    atomic_store_explicit(&ta->at, sched_getcpu(), memory_order_relaxed);
    atomic_fetch_add_explicit(&sl->ready, 1, memory_order_seq_cst);
    while (!atomic_load_explicit(&sl->go, memory_order_acquire)) {
        sched_yield();
        atomic_store_explicit(&ta->at, sched_getcpu(), memory_order_relaxed);
    }
}

static void sleep_us(long us)
{
    struct timespec ts = { .tv_sec = 0, .tv_nsec = us * 1000 };
    nanosleep(&ts, NULL);
}

/* Main: waits for every thread at the line, then (unpinned, 2+ threads)
 * until no CPU was last seen holding more than ceil(T / ncpu) of them (T <=
 * ncpu: each on a CPU of its own) or START_SETTLE_NS has passed; then go. */
static void start_line_release(start_line_t *sl, thread_arg_t *args, int nthreads, int ncpu, int settle)
{
    while (atomic_load_explicit(&sl->ready, memory_order_seq_cst) < nthreads)
        sleep_us(20);
    const int most = (nthreads + ncpu - 1) / ncpu;
    uint64_t deadline = bench_now_ns() + START_SETTLE_NS;
    while (settle && bench_now_ns() < deadline) {
        unsigned short held[CPU_SETSIZE];
        memset(held, 0, sizeof held);
        int spread = 1;
        for (int i = 0; i < nthreads && spread; i++) {
            int c = atomic_load_explicit(&args[i].at, memory_order_relaxed);
            spread = c >= 0 && c < CPU_SETSIZE && ++held[c] <= most;
        }
        if (spread)
            break;
        sleep_us(50);
    }
    atomic_store_explicit(&sl->go, 1, memory_order_release);
}

/* The CPUs the process may use (sched_getaffinity at the first run), in
 * ascending order: --pin places threads on these, and the start line
 * spreads unpinned ones over as many. */
static int pin_ncpu = -1;
static int pin_cpus[CPU_SETSIZE];

static void pin_init(void)
{
    if (pin_ncpu >= 0)
        return;
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof s, &s) != 0)
        die("sched_getaffinity failed");
    pin_ncpu = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s))
            pin_cpus[pin_ncpu++] = c;
}

/* Thread t of T under --pin mode, on n CPUs: spread, the (t mod n)-th CPU
 * (at T=4 on two, {0,2} and {1,3}: every neighbour on the other CPU); pack,
 * groups of g = max(2, ceil(T/n)) consecutive threads on one CPU, the groups
 * round-robin (T=2: both on the first; T=4 on two: {0,1} and {2,3}; T=8 on
 * two: t*n/T). A group of at least two, so that pack differs from spread
 * when T <= n. */
static int pin_cpu(int mode, int t, int T, int n)
{
    if (mode == BENCH_PIN_SPREAD)
        return pin_cpus[t % n];
    int g = (T + n - 1) / n;
    g = g < 2 ? 2 : g;
    return pin_cpus[(t / g) % n];
}

static void *thread_main(void *arg)
{
    thread_arg_t *ta = arg;
    bench_thread_t *t = ta->t;
    const bench_allocator_t *a = t->a;
    if (ta->cpu >= 0) { /* before the allocator sees the thread: no migration once it runs */
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(ta->cpu, &s);
        int e = pthread_setaffinity_np(pthread_self(), sizeof s, &s);
        if (e != 0)
            die("--pin %s: cannot put thread %d on CPU %d (error %d)", pin_names[opt.pin], t->id, ta->cpu, e);
        ta->cpu = sched_getcpu();
    }
    if (a->thread_attach && !(t->inst = a->thread_attach(t->run->inst, t->id)))
        die("%s: thread_attach failed for thread %d", a->name, t->id);
    start_line_wait(ta->line, ta);
    rq_start = rq_wait_now(); /* a thread waiting for a core after the start delays the run too */
    ta->w->thread(t);
    if (a->thread_detach)
        a->thread_detach(t->run->inst, t->inst);
    return NULL;
}

/* Adds up the threads of run r into *out. */
static void collect(const bench_run_t *r, run_result_t *out, int rss_reset)
{
    memset(out, 0, sizeof *out);
    uint64_t begin = UINT64_MAX, end = 0, busy_ns = 0, cpu_ns = 0, alloc_ns = 0, free_ns = 0, req = 0, got = 0;
    uint64_t alloc_cpu = 0, free_cpu = 0, first_begin = 0, rq_ns = 0;
    long vcsw = 0;
    out->thread_ops_min = UINT64_MAX;
    for (int i = 0; i < r->nthreads; i++) {
        const bench_thread_t *t = &r->threads[i];
        uint64_t ops = t->allocs + t->frees;
        begin = t->t_begin < begin ? t->t_begin : begin;
        first_begin = t->t_begin > first_begin ? t->t_begin : first_begin;
        end = t->t_end > end ? t->t_end : end;
        rq_ns = rq_ns == UINT64_MAX || t->rq_ns == UINT64_MAX ? UINT64_MAX : rq_ns + t->rq_ns;
        vcsw = vcsw < 0 || t->vcsw < 0 ? -1 : vcsw + t->vcsw;
        busy_ns += t->t_end - t->t_begin;
        cpu_ns += t->cpu_end - t->cpu_begin;
        alloc_ns += t->alloc_ns;
        free_ns += t->free_ns;
        alloc_cpu += t->alloc_cpu_ns;
        free_cpu += t->free_cpu_ns;
        req += t->req_bytes;
        got += t->got_bytes;
        out->allocs += t->allocs;
        out->frees += t->frees;
        out->failed += t->failed;
        out->thread_ops_min = ops < out->thread_ops_min ? ops : out->thread_ops_min;
        out->thread_ops_max = ops > out->thread_ops_max ? ops : out->thread_ops_max;
        out->atomics.loads += t->atomics.loads;
        out->atomics.stores += t->atomics.stores;
        out->atomics.cas += t->atomics.cas;
        out->atomics.cas_failed += t->atomics.cas_failed;
        out->atomics.rmw += t->atomics.rmw;
    }
    out->ops = out->allocs + out->frees;
    out->wall_s = (double)(end - begin) / 1e9;
    out->start_skew_us = (double)(first_begin - begin) / 1e3;
    out->rq_wait_us = rq_ns == UINT64_MAX ? -1 : (double)rq_ns / 1e3;
    out->vcsw = (double)vcsw;
    out->ops_per_s = out->wall_s > 0 ? (double)out->ops / out->wall_s : 0;
    /* Per-thread cost: time each thread spent in its measured region per
     * operation it did (with T <= cores, the latency of one operation). */
    out->ns_per_op = out->ops ? (double)busy_ns / (double)out->ops : 0;
    out->pair_ns = 2 * out->ns_per_op;
    out->cpu_pair_ns = out->ops ? 2 * (double)cpu_ns / (double)out->ops : 0;
    out->alloc_ns = alloc_ns && out->allocs ? (double)alloc_ns / (double)out->allocs : -1;
    out->free_ns = free_ns && out->frees ? (double)free_ns / (double)out->frees : -1;
    out->alloc_cpu_ns = alloc_cpu && out->allocs ? (double)alloc_cpu / (double)out->allocs : -1;
    out->free_cpu_ns = free_cpu && out->frees ? (double)free_cpu / (double)out->frees : -1;
    out->int_frag = req ? (double)got / (double)req : 0;
    out->peak_rss_kb = rss_reset == 0 ? peak_rss_kb() : -1;
    out->nsnaps = r->nsnaps;
    memcpy(out->snaps, r->snaps, sizeof r->snaps);
}

/* Returns 0 and fills *out, or -1 if the allocator or workload could not be
 * set up (reported, and the configuration skipped). */
static int run_once(const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p,
                    int nthreads, int rep, run_result_t *out, size_t *meta_bytes)
{
    bench_run_t r = { .a = a, .p = p, .nthreads = nthreads };
    r.inst = a->create(&p->arena);
    if (!r.inst)
        return -1;
    if (a->stats) {
        bench_heap_stats_t s;
        a->stats(r.inst, &s);
        *meta_bytes = s.meta_bytes;
    }
    if (w->setup && w->setup(&r) != 0) {
        a->destroy(r.inst);
        return -1;
    }
    r.threads = nbbs_tu_aligned_alloc(NBBS_TU_CACHE_LINE, sizeof(bench_thread_t) * (size_t)nthreads);
    thread_arg_t *args = calloc((size_t)nthreads, sizeof *args);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    if (!r.threads || !args || !tids)
        die("out of memory");
    memset(r.threads, 0, sizeof(bench_thread_t) * (size_t)nthreads);
    pthread_barrier_init(&r.barrier, NULL, (unsigned)nthreads);
    int pinned = 0;
    start_line_t line = { 0 };
    pin_init();
    if (opt.pin != BENCH_PIN_NONE) {
        pinned = nthreads >= 2 && pin_ncpu >= 2;
        static int said;
        if (!pinned && !opt.quiet && !said++)
            fprintf(stderr, "nbbs-bench: --pin %s does nothing with %s (T=%d, %d CPUs): threads left unpinned\n",
                    pin_names[opt.pin], nthreads < 2 ? "one thread" : "one CPU", nthreads, pin_ncpu);
    }
    int rss_reset = reset_peak_rss();
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    for (int i = 0; i < nthreads; i++) {
        bench_thread_t *t = &r.threads[i];
        t->run = &r;
        t->id = i;
        t->nthreads = nthreads;
        t->inst = r.inst;
        t->a = a;
        t->rng = nbbs_tu_seed(opt.seed ^ ((uint64_t)rep << 32) ^ (uint64_t)i * 7919u);
        args[i] = (thread_arg_t){ .w = w, .t = t, .cpu = pinned ? pin_cpu(opt.pin, i, nthreads, pin_ncpu) : -1, .line = &line, .at = -1 };
        if (pthread_create(&tids[i], NULL, thread_main, &args[i]) != 0)
            die("pthread_create failed");
    }
    start_line_release(&line, args, nthreads, pin_ncpu, !pinned && nthreads >= 2);
    for (int i = 0; i < nthreads; i++)
        pthread_join(tids[i], NULL);
    getrusage(RUSAGE_SELF, &ru1);
    collect(&r, out, rss_reset);
    out->minflt = (double)(ru1.ru_minflt - ru0.ru_minflt);
    out->pinned = pinned;
    for (int i = 0, len = 0; pinned && i < nthreads; i++) {
        int k = snprintf(out->pin_cpus + len, sizeof out->pin_cpus - (size_t)len, "%s%d", i ? "," : "", args[i].cpu);
        if (k < 0 || (size_t)(len + k) >= sizeof out->pin_cpus)
            break;
        len += k;
    }

    pthread_barrier_destroy(&r.barrier);
    if (w->teardown)
        w->teardown(&r);
    out->nmetrics = r.nmetrics;
    memcpy(out->metric_names, r.metric_names, sizeof r.metric_names);
    memcpy(out->metric_values, r.metric_values, sizeof r.metric_values);
    a->destroy(r.inst);
    free(r.threads);
    free(args);
    free(tids);
    return 0;
}

/* ------------------------------------------------------------------------
 * Configurations and statistics
 * ------------------------------------------------------------------------ */

static void make_params(const bench_workload_t *w, long value, bench_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->scale = opt.scale;
    p->value = value;
    if (w->cfg == BENCH_CFG_PAPER) { /* the paper: 8 B .. 16 KiB */
        p->arena = (bench_arena_t){ .min_block = 8, .max_order = 11, .size = (size_t)32 << 20 };
    } else {                         /* page frames: 4 KiB, orders 0..10 */
        p->arena = (bench_arena_t){ .min_block = 4096, .max_order = 10, .size = (size_t)64 << 20 };
    }
    p->arena.base = NBBS_TU_FAKE_BASE;
    w->scale(p, opt.scale);
    if (opt.min_block)
        p->arena.min_block = opt.min_block;
    if (opt.max_order >= 0)
        p->arena.max_order = (unsigned)opt.max_order;
    if (opt.arena)
        p->arena.size = opt.arena;
    if (opt.ops)
        p->ops = opt.ops;
    if (opt.rounds > 0)
        p->rounds = (unsigned)opt.rounds;
    if (opt.seconds > 0)
        p->seconds = opt.seconds;
    size_t maxb = p->arena.min_block << p->arena.max_order;
    p->arena.size = (p->arena.size + maxb - 1) / maxb * maxb;
}

/* The values swept: the command line's list if given, else the workload's
 * own (w->values), else the option's default. */
static const long_list_t *param_list(const bench_workload_t *w, long_list_t *own)
{
    static const long_list_t none = { .n = 1, .v = { 0 } };
    const long_list_t *l;
    int set;
    switch (w->param) {
    case BENCH_PARAM_SIZE: l = &opt.sizes, set = opt.sizes_set; break;
    case BENCH_PARAM_ORDER: l = &opt.orders, set = opt.orders_set; break;
    case BENCH_PARAM_FILL: l = &opt.fills, set = opt.fills_set; break;
    default: return &none;
    }
    if (set || !w->values)
        return l;
    parse_longs(own, w->values, w->name);
    return own;
}

static const long_list_t *thread_list(const bench_workload_t *w, long_list_t *own)
{
    if (opt.threads_set || !w->threads)
        return &opt.threads;
    parse_longs(own, w->threads, w->name);
    return own;
}

/* Runs per configuration: --repeat if given, else the workload's own
 * count if it has one, else the default (3). */
static int repeats(const bench_workload_t *w)
{
    return opt.repeat_set || w->repeat <= 0 ? opt.repeat : (w->repeat < BENCH_MAX_REPEAT ? w->repeat : BENCH_MAX_REPEAT);
}

const char *param_name(const bench_workload_t *w)
{
    static const char *const names[] = { "none", "size", "order", "fill" };
    return names[w->param];
}

/* Can this allocator run this workload with this parameter? */
static int compatible(const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p, int T)
{
    if (a->is_malloc && !w->malloc_ok)
        return 0; /* fills a bounded arena, or needs block orders */
    if (!a->is_malloc && w->malloc_only)
        return 0; /* needs real memory or sizes beyond any arena */
    if (T < w->min_threads)
        return 0;
    if (w->param == BENCH_PARAM_SIZE && (size_t)p->value > (p->arena.min_block << p->arena.max_order))
        return 0;
    if (w->param == BENCH_PARAM_ORDER && (unsigned long)p->value > p->arena.max_order)
        return 0;
    if (w->param == BENCH_PARAM_FILL && p->value > 100)
        return 0;
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static summary_t summarize_values(double *v, int m)
{
    if (m == 0)
        return (summary_t){ -1, -1, -1 };
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    double med = m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
    return (summary_t){ med, v[0], v[m - 1] };
}

/* Median, min and max of the double at offset off of the runs (negative
 * values mean "not measured" and are left out). */
summary_t summarize(const run_result_t *rr, int n, size_t off)
{
    double v[256];
    int m = 0;
    for (int i = 0; i < n && m < 256; i++) {
        double x = *(const double *)((const char *)&rr[i] + off);
        if (x >= 0)
            v[m++] = x;
    }
    return summarize_values(v, m);
}

/* The same for a workload metric (runs that lack it are left out). */
summary_t summarize_metric(const run_result_t *rr, int n, const char *name)
{
    double v[256];
    int m = 0;
    for (int i = 0; i < n && m < 256; i++)
        for (int k = 0; k < rr[i].nmetrics; k++)
            if (strcmp(rr[i].metric_names[k], name) == 0)
                v[m++] = rr[i].metric_values[k];
    return summarize_values(v, m);
}

/* ------------------------------------------------------------------------
 * The suite
 * ------------------------------------------------------------------------ */

/* One pass over the selected configurations (workload x value x threads,
 * then the compatible allocators). With run 0 it only counts them (for the
 * progress line); with run 1 it runs them and returns the number skipped. */
static int suite_pass(FILE *json, int run, int total)
{
    int progress = run && !opt.quiet && isatty(2);
    int count = 0, done = 0, failures = 0;
    uint64_t t_start = bench_now_ns();
    /* Runs of the allocators are interleaved (run 1 of each, then run 2 of
     * each, ...) so that a change in the machine's load during the suite
     * falls on all of them alike instead of on whichever ran at that time. */
    int nalloc = 0;
    while (bench_allocators[nalloc])
        nalloc++;
    run_result_t *rr = calloc((size_t)(BENCH_MAX_REPEAT * nalloc), sizeof *rr);
    int *ok = calloc((size_t)nalloc, sizeof *ok);
    size_t *meta = calloc((size_t)nalloc, sizeof *meta);
    if (!rr || !ok || !meta)
        die("out of memory");
    for (int wi = 0; bench_workloads[wi]; wi++) {
        const bench_workload_t *w = bench_workloads[wi];
        if (!in_list(opt.workloads, w->name))
            continue;
        long_list_t own, own_t;
        const long_list_t *pl = param_list(w, &own), *tl = thread_list(w, &own_t);
        for (int pi = 0; pi < pl->n; pi++)
            for (int ti = 0; ti < tl->n; ti++) {
                int T = (int)tl->v[ti];
                bench_params_t p;
                make_params(w, pl->v[pi], &p);
                for (int ai = 0; ai < nalloc; ai++) {
                    ok[ai] = in_list(opt.allocators, bench_allocators[ai]->name) &&
                             compatible(w, bench_allocators[ai], &p, T);
                    count += ok[ai];
                }
                if (!run)
                    continue;
                const int nrep = repeats(w);
                for (int rep = 0; rep < nrep; rep++)
                    for (int ai = 0; ai < nalloc; ai++) {
                        if (!ok[ai])
                            continue;
                        const bench_allocator_t *a = bench_allocators[ai];
                        if (progress)
                            fprintf(stderr, "\r\033[K[%d/%d %.0fs] %s %s=%ld T=%d run %d/%d %s", done + 1, total,
                                    (double)(bench_now_ns() - t_start) / 1e9, w->name, param_name(w), p.value, T,
                                    rep + 1, nrep, a->name);
                        if (run_once(w, a, &p, T, rep, &rr[ai * BENCH_MAX_REPEAT + rep], &meta[ai]) != 0) {
                            fprintf(stderr, "\nnbbs-bench: %s on %s could not be set up (arena %zu B), skipped\n",
                                    w->name, a->name, p.arena.size);
                            ok[ai] = 0;
                            failures++;
                            done++;
                        }
                    }
                if (progress)
                    fprintf(stderr, "\r\033[K");
                for (int ai = 0; ai < nalloc; ai++) {
                    if (!ok[ai])
                        continue;
                    done++;
                    table_row(w, bench_allocators[ai], &p, T, &rr[ai * BENCH_MAX_REPEAT], nrep);
                    if (json)
                        json_result(json, w, bench_allocators[ai], &p, T, &rr[ai * BENCH_MAX_REPEAT], nrep,
                                    meta[ai]);
                }
            }
    }
    free(rr);
    free(ok);
    free(meta);
    if (!run)
        return count;
    if (json)
        json_footer(json, (double)(bench_now_ns() - t_start) / 1e9);
    fprintf(stderr, "nbbs-bench: %d configurations in %.1f s%s\n", done,
            (double)(bench_now_ns() - t_start) / 1e9, failures ? " (some skipped)" : "");
    return failures;
}

/* Runs every selected configuration; returns the number skipped. */
int run_suite(FILE *json)
{
    int total = suite_pass(NULL, 0, 0);
    table_header();
    return suite_pass(json, 1, total);
}
