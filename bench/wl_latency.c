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
 * The floor: every FLOOR_EVERY-th iteration a thread also times an empty
 * operation (two clock reads back to back) into a histogram of its own,
 * merged into floor_p50 .. floor_max. It runs under the same load as the
 * operations (the same threads, the same preemption), so it says what no
 * allocator can go below on this machine: the timer's own spread, interrupts,
 * a preemption that falls between two clock reads. (Timed in every
 * iteration, it would add two clock reads to each and change the contention
 * it sits in; one in 8 costs about 5 ns per iteration.)
 *
 * On a CPU or not: where the C library registers a restartable-sequences
 * area for each thread (rseq, Linux 4.18 and glibc 2.35 on), every timed
 * window also says whether its thread lost the CPU inside it. Before the
 * first clock read the thread points its rseq_cs field at a descriptor
 * whose range holds no code; the kernel, on the way back to user space
 * after a context switch, a migration or a signal, finds the thread's
 * instruction outside that range and clears the field (rseq_ip_fixup). A
 * field still set after the second read means the thread kept its CPU
 * throughout (an interrupt that switched nothing does not clear it; nor
 * does a host that stops the whole virtual CPU, which the guest cannot
 * see). A window that lost it counts without the time its thread then
 * waited for a CPU (lat_desched_t: the thread's run_delay), into the
 * on-CPU histograms, merged into oncpu_p99 .. oncpu_max, floor_oncpu_p99.9
 * and floor_oncpu_max; desched_share counts those windows. p50 .. max keep
 * every window as timed. The split shows what lock-freedom promises: a
 * lock-free operation makes its running thread wait only for its own steps
 * (and what the machine does beside them); a waiter spinning on a lock
 * whose holder was preempted spins on its CPU. Timed as they are, both
 * sides' maxima are a thread preempted inside its own window instead. The
 * probe (desched_usable) runs once, in a child process, since a kernel
 * that rejected the descriptor would kill the process.
 *
 * Percentiles count operations: a thread stalled behind a preempted lock
 * holder makes one slow sample, then few others (it did little else), so a
 * stall shows in max and in the throughput (ops_per_s) more than in p99.9.
 * Time-weighting does not help here: a timed thread is itself preempted
 * inside most of its operations' windows at 8 threads on 2 cores, and
 * those waits (lock-free or not) dominate any time-weighted figure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__)) && defined(__has_include)
#if __has_include(<sys/rseq.h>)
#include <fcntl.h>
#include <sys/rseq.h>
#include <sys/wait.h>
#include <unistd.h>
#define LAT_RSEQ 1
#endif
#endif

#define RING     32
#define FLOOR_EVERY 8 /* iterations per timed empty operation */
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

/* --- descheduled or not (rseq; the header comment) --- */

#ifdef LAT_RSEQ
/* The descriptor: its range (one byte of data, lat_nocode) holds no
 * instruction, so no thread is ever inside it and the kernel never aborts
 * to abort_ip; it checks the signature word before abort_ip all the same. */
static const char lat_nocode[8];
static const uint32_t lat_sig[2] = { RSEQ_SIG, 0 };
static struct rseq_cs lat_cs __attribute__((aligned(32)));
typedef __typeof__(((struct rseq *)0)->rseq_cs) rseq_word_t; /* __u64 or uint64_t, by header */

static volatile rseq_word_t *rseq_cs_field(void)
{
    char *tp;
#if defined(__x86_64__)
    __asm__("mov %%fs:0, %0" : "=r"(tp)); /* the thread control block's pointer to itself */
#else
    tp = (char *)__builtin_thread_pointer();
#endif
    return &((struct rseq *)(tp + __rseq_offset))->rseq_cs;
}

/* The calling thread's schedstat file, opened for reading, or -1. */
static int schedstat_open(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", (long)gettid());
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Whether the split can be made: the rseq area is registered, and in a
 * child process a sleep (a context switch) clears the field, the kernel
 * accepts the descriptor, and the thread's schedstat file reads. Once per
 * process. */
static int desched_usable(void)
{
    static int usable = -1;
    if (usable >= 0)
        return usable;
    usable = 0;
    if (__rseq_size < 20) /* not registered (glibc.pthread.rseq=0, or refused) */
        return usable;
    lat_cs.version = 0;
    lat_cs.flags = 0;
    lat_cs.start_ip = (uint64_t)(uintptr_t)lat_nocode;
    lat_cs.post_commit_offset = 1;
    lat_cs.abort_ip = (uint64_t)(uintptr_t)&lat_sig[1];
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        volatile rseq_word_t *f = rseq_cs_field();
        *f = (uint64_t)(uintptr_t)&lat_cs;
        int cleared = 0;
        for (int i = 0; i < 100 && !cleared; i++) {
            usleep(1000);
            cleared = *f == 0;
        }
        *f = 0;
        int fd = schedstat_open();
        char buf[64];
        bool readable = fd >= 0 && read(fd, buf, sizeof buf) > 0;
        _exit(cleared && readable ? 0 : 1);
    }
    int st;
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        usable = 1;
    return usable;
}

static inline void desched_arm(volatile rseq_word_t *f)
{
    *f = (uint64_t)(uintptr_t)&lat_cs;
    __asm__ __volatile__("" ::: "memory");
}

/* True if the thread lost its CPU since desched_arm. */
static inline bool desched_seen(volatile rseq_word_t *f)
{
    __asm__ __volatile__("" ::: "memory");
    return *f == 0;
}
#else
typedef uint64_t rseq_word_t;
static int desched_usable(void) { return 0; }
static inline void desched_arm(volatile rseq_word_t *f) { (void)f; }
static inline bool desched_seen(volatile rseq_word_t *f) { (void)f; return false; }
#endif

/* A timing thread's view of its own waits for a CPU: the rseq field (NULL:
 * no split is made), and its schedstat file, whose second figure is the
 * time it has spent runnable but not running (run_delay). That figure
 * grows only when the thread gets a CPU back after a wait, so it is read
 * only when the field shows a loss of the CPU, before a timed window (the
 * wait fell between two windows: the base moves on) or after one (the
 * window's wait: its share of the window). */
typedef struct lat_desched {
    volatile rseq_word_t *f;
    int fd;
    uint64_t base; /* run_delay at the last look */
} lat_desched_t;

#ifdef LAT_RSEQ
static uint64_t run_delay_ns(int fd)
{
    char buf[128];
    ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
    if (k <= 0)
        return 0;
    buf[k] = 0;
    char *e;
    (void)strtoull(buf, &e, 10); /* the time on a CPU; run_delay follows */
    return strtoull(e, NULL, 10);
}

/* The split for the calling thread, if the probe allows and its schedstat
 * file opens; else d->f is NULL and no split is made. */
static void desched_open(lat_desched_t *d)
{
    d->f = NULL;
    d->fd = -1;
    d->base = 0;
    if (!desched_usable())
        return;
    d->fd = schedstat_open();
    if (d->fd < 0)
        return;
    d->base = run_delay_ns(d->fd);
    d->f = rseq_cs_field();
    desched_arm(d->f);
}

/* The field back to 0 (the descriptor is ours; nobody else's code sees it
 * set), the file closed. */
static void desched_close(lat_desched_t *d)
{
    if (d->f)
        *d->f = 0;
    if (d->fd >= 0)
        close(d->fd);
    d->f = NULL;
}
#else
static uint64_t run_delay_ns(int fd) { (void)fd; return 0; }
static void desched_open(lat_desched_t *d) { d->f = NULL; d->fd = -1; d->base = 0; }
static void desched_close(lat_desched_t *d) { d->f = NULL; }
#endif

/* Before a timed window: a loss of the CPU since the last look moves the
 * base on. The field is armed for the window. */
static inline void desched_open_window(lat_desched_t *d)
{
    if (!d->f)
        return;
    if (desched_seen(d->f))
        d->base = run_delay_ns(d->fd);
    desched_arm(d->f);
}

/* After a timed window of ns, where the split is made (d->f set): the
 * part of it the thread spent on a CPU (all of it unless the field shows a
 * loss of the CPU; then the window less the wait that run_delay gained).
 * Counts the window in *gone (if not NULL) if the thread lost the CPU
 * inside it. Re-arms the field. */
static inline uint64_t desched_close_window(lat_desched_t *d, uint64_t ns, uint64_t *gone)
{
    if (!desched_seen(d->f))
        return ns;
    uint64_t rd = run_delay_ns(d->fd), wait = rd - d->base;
    d->base = rd;
    desched_arm(d->f);
    if (gone)
        ++*gone;
    return ns > wait ? ns - wait : 0;
}

static void lat_scale(bench_params_t *p, bench_scale_t s)
{
    static const double secs[] = { 0.05, 0.5, 3.0 };
    p->seconds = secs[s];
}


/* The counting build (nbbs-bench-count) also records, per operation, which
 * path it took as the hook counts it: loads (the scan's steps and looks),
 * CAS, failed CAS and other RMWs. Its times are inflated by the hook (a call
 * per atomic), so it answers "what do the slowest operations do", never
 * "how slow". Printed after the run (lat_paths_report), not a metric. */
#define PATH_MAX_OPS (1u << 20) /* records per thread */

typedef struct lat_path {
    uint32_t ns;
    uint16_t loads;
    uint8_t  cas, cas_failed, rmw, is_free;
} lat_path_t;

typedef struct lat_paths {
    lat_path_t *rec;
    uint32_t    n;
} lat_paths_t;

static void path_record(lat_paths_t *pp, uint64_t ns, const bench_atomics_t *a, const bench_atomics_t *b,
                        int is_free)
{
    if (pp->n == PATH_MAX_OPS)
        return;
    lat_path_t *e = &pp->rec[pp->n++];
    e->ns = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
    uint64_t l = b->loads - a->loads, c = b->cas - a->cas, f = b->cas_failed - a->cas_failed, m = b->rmw - a->rmw;
    e->loads = l > UINT16_MAX ? UINT16_MAX : (uint16_t)l;
    e->cas = c > 255 ? 255 : (uint8_t)c;
    e->cas_failed = f > 255 ? 255 : (uint8_t)f;
    e->rmw = m > 255 ? 255 : (uint8_t)m;
    e->is_free = (uint8_t)is_free;
}

static int path_cmp_ns(const void *x, const void *y)
{
    uint32_t a = ((const lat_path_t *)x)->ns, b = ((const lat_path_t *)y)->ns;
    return a < b ? -1 : a > b;
}

/* One line per class of operations: all of them, and those at or above
 * p99 and p99.9 of all: how many, and their mean loads, CAS, failed CAS,
 * the share with a failed CAS, with more than 16 loads, and of frees. */
static void path_line(const char *name, const lat_path_t *r, size_t n)
{
    double l = 0, c = 0, f = 0, anyf = 0, longscan = 0, frees = 0;
    for (size_t i = 0; i < n; i++) {
        l += r[i].loads, c += r[i].cas, f += r[i].cas_failed;
        anyf += r[i].cas_failed > 0, longscan += r[i].loads > 16, frees += r[i].is_free;
    }
    double d = n ? (double)n : 1;
    fprintf(stderr, "  %-10s n %9zu  loads %6.1f  cas %5.2f  cas_failed %5.3f  any_failed %6.2f%%  loads>16 %6.2f%%  frees %5.1f%%\n",
            name, n, l / d, c / d, f / d, 100 * anyf / d, 100 * longscan / d, 100 * frees / d);
}

/* Per thread: every operation's latency and the floor's as timed, the
 * on-CPU part of each of those windows (where desched_usable), and
 * (counting build) the path records. */
typedef struct lat_data {
    lat_hist_t ops, floor;
    lat_hist_t ops_run, floor_run; /* on-CPU part of each window */
    uint64_t gone;                 /* operations' windows in which the thread lost its CPU */
    lat_paths_t paths;
} lat_data_t;

/* Every thread's path records (d[i].paths, freed here), merged and
 * summarised on stderr. */
static void lat_paths_report(bench_run_t *r, lat_data_t *d)
{
    size_t n = 0;
    for (int i = 0; i < r->nthreads; i++)
        n += d[i].paths.n;
    lat_path_t *all = malloc(n * sizeof *all);
    if (!all)
        abort();
    n = 0;
    for (int i = 0; i < r->nthreads; i++) {
        const lat_paths_t *pp = &d[i].paths;
        memcpy(all + n, pp->rec, pp->n * sizeof *all);
        n += pp->n;
        free(pp->rec);
    }
    qsort(all, n, sizeof *all, path_cmp_ns);
    fprintf(stderr, "latency paths, %s, %d threads (counting build: times inflated by the hook):\n", r->a->name,
            r->nthreads);
    static const double qs[] = { 0.5, 0.9, 0.99, 0.999 };
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        size_t i = (size_t)((double)n * qs[k]);
        char name[32];
        snprintf(name, sizeof name, ">=p%g", 100 * qs[k]);
        if (i < n) {
            fprintf(stderr, "  %s at %u ns\n", name, all[i].ns);
            path_line(name, all + i, n - i);
        }
    }
    path_line("all", all, n);
    /* The other way round: time by path class. */
    static const struct { const char *name; unsigned lo, hi; } lc[] = {
        { "loads<=4", 0, 4 }, { "loads5-8", 5, 8 }, { "loads9-16", 9, 16 }, { "loads17-64", 17, 64 },
        { "loads65+", 65, UINT16_MAX } };
    for (size_t k = 0; k < sizeof lc / sizeof lc[0]; k++) {
        size_t cnt = 0, slow = 0;
        for (size_t i = 0; i < n; i++)
            if (all[i].loads >= lc[k].lo && all[i].loads <= lc[k].hi)
                cnt++, slow += i >= (size_t)((double)n * 0.999);
        fprintf(stderr, "  %-10s %6.3f%% of ops, %6.2f%% of those >= p99.9\n", lc[k].name, 100.0 * (double)cnt / (double)(n ? n : 1),
                100.0 * (double)slow / (double)(cnt ? cnt : 1));
    }
    free(all);
}

static int lat_setup(bench_run_t *r)
{
    (void)desched_usable(); /* the probe forks: before the threads start */
    r->shared = calloc((size_t)r->nthreads, sizeof(lat_data_t));
    return r->shared ? 0 : -1;
}

static void lat_thread_paths(bench_thread_t *t, lat_hist_t *h, lat_paths_t *pp)
{
    void *ring[RING] = { 0 };
    unsigned head = 0;
    pp->rec = malloc(PATH_MAX_OPS * sizeof *pp->rec);
    if (!pp->rec)
        abort();
    bench_atomics_t a, b;
    bench_begin(t);
    const uint64_t deadline = t->t_begin + (uint64_t)(t->run->p->seconds * 1e9);
    uint64_t now = t->t_begin;
    while (now < deadline) {
        bench_atomics_read(&a);
        uint64_t t0 = bench_now_ns();
        void *p = bench_alloc_order(t, 0);
        uint64_t t1 = bench_now_ns();
        bench_atomics_read(&b);
        record(h, t1 - t0);
        path_record(pp, t1 - t0, &a, &b, 0);
        now = t1;
        if (ring[head]) {
            void *old = ring[head];
            bench_atomics_read(&a);
            t0 = bench_now_ns();
            bench_free(t, old);
            now = bench_now_ns();
            bench_atomics_read(&b);
            record(h, now - t0);
            path_record(pp, now - t0, &a, &b, 1);
        }
        ring[head] = p;
        head = (head + 1) % RING;
    }
    bench_end(t);
    for (unsigned i = 0; i < RING; i++)
        if (ring[i])
            t->a->free(t->inst, ring[i]);
}

/* One timed window of ns into h, and its on-CPU part into run (gone:
 * desched_close_window). */
static inline void record2(lat_hist_t *h, lat_hist_t *run, lat_desched_t *ds, uint64_t ns, uint64_t *gone)
{
    record(h, ns);
    if (ds->f)
        record(run, desched_close_window(ds, ns, gone));
}

static void lat_thread(bench_thread_t *t)
{
    lat_data_t *d = &((lat_data_t *)t->run->shared)[t->id];
    if (bench_counting) {
        lat_thread_paths(t, &d->ops, &d->paths);
        return;
    }
    lat_desched_t ds;
    desched_open(&ds);
    void *ring[RING] = { 0 };
    unsigned head = 0, it = 0;
    bench_begin(t);
    const uint64_t deadline = t->t_begin + (uint64_t)(t->run->p->seconds * 1e9);
    uint64_t now = t->t_begin;
    while (now < deadline) {
        desched_open_window(&ds);
        uint64_t t0 = bench_now_ns();
        void *p = bench_alloc_order(t, 0);
        uint64_t t1 = bench_now_ns();
        record2(&d->ops, &d->ops_run, &ds, t1 - t0, &d->gone);
        if (ring[head]) {
            void *old = ring[head];
            desched_open_window(&ds);
            t0 = bench_now_ns();
            bench_free(t, old);
            now = bench_now_ns();
            record2(&d->ops, &d->ops_run, &ds, now - t0, &d->gone);
        } else {
            now = t1;
        }
        ring[head] = p;
        head = (head + 1) % RING;
        if (++it % FLOOR_EVERY == 0) {
            desched_open_window(&ds);
            t0 = bench_now_ns();
            t1 = bench_now_ns();
            record2(&d->floor, &d->floor_run, &ds, t1 - t0, NULL);
        }
    }
    bench_end(t);
    desched_close(&ds);
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

/* The histogram at byte offset off of every thread's record, merged into
 * a new one. */
static lat_hist_t *merged(const lat_data_t *d, int n, size_t off)
{
    lat_hist_t *all = calloc(1, sizeof *all);
    if (!all)
        abort();
    for (int i = 0; i < n; i++) {
        const lat_hist_t *h = (const lat_hist_t *)((const char *)&d[i] + off);
        for (unsigned b = 0; b < NBUCKETS; b++)
            all->count[b] += h->count[b];
        all->n += h->n;
        all->max = h->max > all->max ? h->max : all->max;
    }
    return all;
}

static void lat_teardown(bench_run_t *r)
{
    lat_data_t *d = r->shared;
    int n = r->nthreads;
    lat_hist_t *all = merged(d, n, offsetof(lat_data_t, ops)), *fl = merged(d, n, offsetof(lat_data_t, floor));
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
    bench_metric(r, "floor_p50", quantile(fl, 0.5));
    bench_metric(r, "floor_p99", quantile(fl, 0.99));
    bench_metric(r, "floor_p99.9", quantile(fl, 0.999));
    bench_metric(r, "floor_p99.99", quantile(fl, 0.9999));
    bench_metric(r, "floor_max", (double)fl->max);
    bench_metric(r, "desched_split", !bench_counting && desched_usable() ? 1 : 0);
    if (!bench_counting && desched_usable()) {
        lat_hist_t *run = merged(d, n, offsetof(lat_data_t, ops_run)),
                   *flr = merged(d, n, offsetof(lat_data_t, floor_run));
        uint64_t gone = 0;
        for (int i = 0; i < n; i++)
            gone += d[i].gone;
        bench_metric(r, "oncpu_p99", quantile(run, 0.99));
        bench_metric(r, "oncpu_p99.9", quantile(run, 0.999));
        bench_metric(r, "oncpu_p99.99", quantile(run, 0.9999));
        bench_metric(r, "oncpu_max", (double)run->max);
        bench_metric(r, "desched_share", all->n ? (double)gone / (double)all->n : 0);
        bench_metric(r, "floor_oncpu_p99.9", quantile(flr, 0.999));
        bench_metric(r, "floor_oncpu_max", (double)flr->max);
        free(flr);
        free(run);
    }
    free(fl);
    free(all);
    if (bench_counting)
        lat_paths_report(r, d);
    free(d);
}

const bench_workload_t bench_wl_latency = {
    .name = "latency", .source = "issue 11 (tail latency under preemption)", .group = "experiment",
    .help = "8 threads (more than cores): alloc an order-0 frame, free the oldest of 32, each operation timed; p50..p99.99, max and the CDF (quick 0.5 s)",
    .cfg = BENCH_CFG_PAGE, .param = BENCH_PARAM_NONE, .threads = "8", .repeat = 5, .metric = "ops_per_s", .plot = "cdf",
    .show = "p50,p99,p99.9,max,floor_p99.9,oncpu_max", .scale = lat_scale, .setup = lat_setup, .teardown = lat_teardown,
    .thread = lat_thread,
};
BENCH_WORKLOAD(bench_wl_latency);
