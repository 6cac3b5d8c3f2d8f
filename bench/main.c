/*
 * main.c - nbbs-bench: command line, the run loop, statistics and JSON.
 *
 * For every workload x allocator x parameter value x thread count it makes
 * --repeat runs, each on a fresh allocator instance and fresh threads, and
 * reports the median with the min and max of the runs. See bench/README.md.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench.h"

#define MAX_LIST 32

typedef struct long_list {
    int  n;
    long v[MAX_LIST];
} long_list_t;

static struct options {
    const char   *workloads, *allocators, *json, *label;
    long_list_t   threads, sizes, orders, fills;
    int           repeat, quiet;
    bench_scale_t scale;
    size_t        min_block, arena;
    long          max_order;
    uint64_t      ops, seed;
    long          rounds;
    double        seconds;
} opt = {
    .repeat = 3, .scale = BENCH_SCALE_QUICK, .max_order = -1, .seed = 0x6e6262730001ull,
};

static const char *const scale_names[] = { "smoke", "quick", "paper" };

/* ------------------------------------------------------------------------
 * Hooks the workloads call (bench.h)
 * ------------------------------------------------------------------------ */

void bench_begin(bench_thread_t *t)
{
    t->allocs = t->frees = t->failed = 0;
    t->alloc_ns = t->free_ns = 0;
    t->req_bytes = t->got_bytes = 0;
    bench_atomics_read(&t->at_begin);
    t->cpu_begin = bench_cpu_ns();
    t->t_begin = bench_now_ns();
}

void bench_end(bench_thread_t *t)
{
    t->t_end = bench_now_ns();
    t->cpu_end = bench_cpu_ns();
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

/* ------------------------------------------------------------------------
 * Small utilities
 * ------------------------------------------------------------------------ */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nbbs-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static void parse_longs(long_list_t *l, const char *s, const char *what)
{
    char *end;
    l->n = 0;
    while (*s) {
        if (l->n == MAX_LIST)
            die("too many values for %s", what);
        errno = 0;
        long v = strtol(s, &end, 0);
        if (end == s || errno || v < 0)
            die("bad value for %s: '%s'", what, s);
        l->v[l->n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            die("bad value for %s: '%s'", what, end);
    }
    if (l->n == 0)
        die("empty list for %s", what);
}

/* Is name in the comma-separated list (NULL or "all" means everything)? */
static int in_list(const char *list, const char *name)
{
    if (!list || strcmp(list, "all") == 0)
        return 1;
    size_t n = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0)
            return 1;
        s += len + (e != NULL);
    }
    return 0;
}

/* Every name in list must exist (catches typos before a long run). */
static void check_names(const char *list, int is_alloc)
{
    if (!list || strcmp(list, "all") == 0)
        return;
    char *dup = strdup(list), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        if (is_alloc) {
            for (int i = 0; bench_allocators[i]; i++)
                found |= strcmp(bench_allocators[i]->name, tok) == 0;
        } else {
            for (int i = 0; bench_workloads[i]; i++)
                found |= strcmp(bench_workloads[i]->name, tok) == 0;
        }
        if (!found)
            die("unknown %s '%s' (see --list)", is_alloc ? "allocator" : "workload", tok);
    }
    free(dup);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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

/* The 1-minute load average: other work on the machine skews every number,
 * so the report shows it next to them. */
static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* ------------------------------------------------------------------------
 * One run
 * ------------------------------------------------------------------------ */

typedef struct run_result {
    double   wall_s, ops_per_s, ns_per_op, alloc_ns, free_ns, pair_ns, cpu_pair_ns;
    uint64_t ops, allocs, frees, failed, thread_ops_min, thread_ops_max;
    double   int_frag;     /* granted / requested bytes */
    long     peak_rss_kb;
    int      nsnaps;
    bench_snap_t snaps[BENCH_MAX_SNAPS];
    bench_atomics_t atomics;
} run_result_t;

typedef struct thread_arg {
    const bench_workload_t *w;
    bench_thread_t         *t;
} thread_arg_t;

static void *thread_main(void *arg)
{
    thread_arg_t *ta = arg;
    bench_barrier(ta->t);
    ta->w->thread(ta->t);
    return NULL;
}

static uint64_t splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (x ^ (x >> 31)) | 1;
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
    r.threads = aligned_alloc(64, sizeof(bench_thread_t) * (size_t)nthreads);
    thread_arg_t *args = calloc((size_t)nthreads, sizeof *args);
    pthread_t *tids = calloc((size_t)nthreads, sizeof *tids);
    if (!r.threads || !args || !tids)
        die("out of memory");
    memset(r.threads, 0, sizeof(bench_thread_t) * (size_t)nthreads);
    pthread_barrier_init(&r.barrier, NULL, (unsigned)nthreads);
    int rss_reset = reset_peak_rss();
    for (int i = 0; i < nthreads; i++) {
        bench_thread_t *t = &r.threads[i];
        t->run = &r;
        t->id = i;
        t->nthreads = nthreads;
        t->inst = r.inst;
        t->a = a;
        t->rng = splitmix(opt.seed ^ ((uint64_t)rep << 32) ^ (uint64_t)i * 7919u);
        args[i] = (thread_arg_t){ .w = w, .t = t };
        if (pthread_create(&tids[i], NULL, thread_main, &args[i]) != 0)
            die("pthread_create failed");
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(tids[i], NULL);

    memset(out, 0, sizeof *out);
    uint64_t begin = UINT64_MAX, end = 0, busy_ns = 0, cpu_ns = 0, alloc_ns = 0, free_ns = 0, req = 0, got = 0;
    out->thread_ops_min = UINT64_MAX;
    for (int i = 0; i < nthreads; i++) {
        bench_thread_t *t = &r.threads[i];
        uint64_t ops = t->allocs + t->frees;
        begin = t->t_begin < begin ? t->t_begin : begin;
        end = t->t_end > end ? t->t_end : end;
        busy_ns += t->t_end - t->t_begin;
        cpu_ns += t->cpu_end - t->cpu_begin;
        alloc_ns += t->alloc_ns;
        free_ns += t->free_ns;
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
    out->ops_per_s = out->wall_s > 0 ? (double)out->ops / out->wall_s : 0;
    /* Per-thread cost: time each thread spent in its measured region per
     * operation it did (with T <= cores, the latency of one operation). */
    out->ns_per_op = out->ops ? (double)busy_ns / (double)out->ops : 0;
    out->pair_ns = 2 * out->ns_per_op;
    out->cpu_pair_ns = out->ops ? 2 * (double)cpu_ns / (double)out->ops : 0;
    out->alloc_ns = alloc_ns && out->allocs ? (double)alloc_ns / (double)out->allocs : -1;
    out->free_ns = free_ns && out->frees ? (double)free_ns / (double)out->frees : -1;
    out->int_frag = req ? (double)got / (double)req : 0;
    out->peak_rss_kb = rss_reset == 0 ? peak_rss_kb() : -1;
    out->nsnaps = r.nsnaps;
    memcpy(out->snaps, r.snaps, sizeof r.snaps);

    pthread_barrier_destroy(&r.barrier);
    if (w->teardown)
        w->teardown(&r);
    a->destroy(r.inst);
    free(r.threads);
    free(args);
    free(tids);
    return 0;
}

/* ------------------------------------------------------------------------
 * Configurations, statistics, output
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

static const long_list_t *param_list(const bench_workload_t *w)
{
    static const long_list_t none = { .n = 1, .v = { 0 } };
    switch (w->param) {
    case BENCH_PARAM_SIZE: return &opt.sizes;
    case BENCH_PARAM_ORDER: return &opt.orders;
    case BENCH_PARAM_FILL: return &opt.fills;
    default: return &none;
    }
}

static const char *param_name(const bench_workload_t *w)
{
    static const char *const names[] = { "none", "size", "order", "fill" };
    return names[w->param];
}

/* Can this allocator run this workload with this parameter? */
static int compatible(const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p)
{
    if (a->is_malloc && !w->malloc_ok)
        return 0; /* fills a bounded arena, or needs block orders */
    if (w->param == BENCH_PARAM_SIZE && (size_t)p->value > (p->arena.min_block << p->arena.max_order))
        return 0;
    if (w->param == BENCH_PARAM_ORDER && (unsigned long)p->value > p->arena.max_order)
        return 0;
    if (w->param == BENCH_PARAM_FILL && p->value > 100)
        return 0;
    return 1;
}

typedef struct summary {
    double med, min, max;
} summary_t;

static summary_t summarize(const run_result_t *rr, int n, size_t off)
{
    double v[256];
    int m = 0;
    for (int i = 0; i < n && m < 256; i++) {
        double x = *(const double *)((const char *)&rr[i] + off);
        if (x >= 0)
            v[m++] = x;
    }
    if (m == 0)
        return (summary_t){ -1, -1, -1 };
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    double med = m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
    return (summary_t){ med, v[0], v[m - 1] };
}

static void json_summary(FILE *f, const char *name, summary_t s, int last)
{
    fprintf(f, "\"%s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g}%s", name, s.med, s.min, s.max,
            last ? "" : ", ");
}

static int json_first = 1;

static void json_result(FILE *f, const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p,
                        int nthreads, const run_result_t *rr, int n, size_t meta)
{
    fprintf(f, "%s\n  {\"workload\": ", json_first ? "" : ",");
    json_first = 0;
    json_str(f, w->name);
    fprintf(f, ", \"allocator\": ");
    json_str(f, a->name);
    fprintf(f, ", \"lockfree\": %d, \"threads\": %d, \"param\": ", a->lockfree, nthreads);
    json_str(f, param_name(w));
    fprintf(f, ", \"value\": %ld, \"metric\": ", p->value);
    json_str(f, w->metric);
    fprintf(f, ",\n   \"config\": {\"min_block\": %zu, \"max_order\": %u, \"arena\": %zu, \"ops\": %llu, "
               "\"rounds\": %u, \"seconds\": %g}, \"meta_bytes\": %zu,\n   \"summary\": {",
            p->arena.min_block, p->arena.max_order, p->arena.size, (unsigned long long)p->ops, p->rounds,
            p->seconds, meta);
    json_summary(f, "wall_s", summarize(rr, n, offsetof(run_result_t, wall_s)), 0);
    json_summary(f, "ops_per_s", summarize(rr, n, offsetof(run_result_t, ops_per_s)), 0);
    json_summary(f, "ns_per_op", summarize(rr, n, offsetof(run_result_t, ns_per_op)), 0);
    json_summary(f, "pair_ns", summarize(rr, n, offsetof(run_result_t, pair_ns)), 0);
    json_summary(f, "cpu_pair_ns", summarize(rr, n, offsetof(run_result_t, cpu_pair_ns)), 0);
    json_summary(f, "alloc_ns", summarize(rr, n, offsetof(run_result_t, alloc_ns)), 0);
    json_summary(f, "free_ns", summarize(rr, n, offsetof(run_result_t, free_ns)), 0);
    json_summary(f, "int_frag", summarize(rr, n, offsetof(run_result_t, int_frag)), 1);
    fprintf(f, "},\n   \"runs\": [");
    for (int i = 0; i < n; i++) {
        const run_result_t *r = &rr[i];
        fprintf(f, "%s\n    {\"wall_s\": %.6g, \"ops\": %llu, \"allocs\": %llu, \"frees\": %llu, "
                   "\"failed\": %llu, \"ops_per_s\": %.6g, \"ns_per_op\": %.6g, \"pair_ns\": %.6g, \"cpu_pair_ns\": %.6g, "
                   "\"alloc_ns\": %.6g, \"free_ns\": %.6g, \"thread_ops_min\": %llu, "
                   "\"thread_ops_max\": %llu, \"int_frag\": %.6g, \"peak_rss_kb\": %ld, \"frag\": [",
                i ? "," : "", r->wall_s, (unsigned long long)r->ops, (unsigned long long)r->allocs,
                (unsigned long long)r->frees, (unsigned long long)r->failed, r->ops_per_s, r->ns_per_op,
                r->pair_ns, r->cpu_pair_ns, r->alloc_ns, r->free_ns, (unsigned long long)r->thread_ops_min,
                (unsigned long long)r->thread_ops_max, r->int_frag, r->peak_rss_kb);
        for (int s = 0; s < r->nsnaps; s++) {
            const bench_snap_t *sn = &r->snaps[s];
            fprintf(f, "%s{\"phase\": ", s ? ", " : "");
            json_str(f, sn->phase);
            fprintf(f, ", \"free_bytes\": %zu, \"largest_free\": %zu, \"ratio\": %.6g}", sn->free_bytes,
                    sn->largest_free, sn->free_bytes ? (double)sn->largest_free / (double)sn->free_bytes : 1.0);
        }
        fprintf(f, "]");
        if (bench_counting)
            fprintf(f, ", \"atomics\": {\"loads\": %llu, \"stores\": %llu, \"cas\": %llu, \"cas_failed\": %llu, "
                       "\"rmw\": %llu}",
                    (unsigned long long)r->atomics.loads, (unsigned long long)r->atomics.stores,
                    (unsigned long long)r->atomics.cas, (unsigned long long)r->atomics.cas_failed,
                    (unsigned long long)r->atomics.rmw);
        fprintf(f, "}");
    }
    fprintf(f, "]}");
    fflush(f);
}

static void json_header(FILE *f, const char *argv0)
{
    struct utsname u;
    char model[256] = "unknown", line[512];
    FILE *c = fopen("/proc/cpuinfo", "r");
    while (c && fgets(line, sizeof line, c)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(model, sizeof model, "%s", colon + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    }
    if (c)
        fclose(c);
    uname(&u);
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const char *preload = getenv("LD_PRELOAD");
    fprintf(f, "{\"tool\": \"nbbs-bench\", \"format\": 1, \"program\": ");
    json_str(f, argv0);
    fprintf(f, ", \"label\": ");
    json_str(f, opt.label ? opt.label : (preload && *preload ? preload : "default"));
    fprintf(f, ", \"ld_preload\": ");
    json_str(f, preload ? preload : "");
    fprintf(f, ", \"counting\": %d, \"scale\": \"%s\", \"repeat\": %d, \"date\": \"%s\",\n \"machine\": "
               "{\"cpus\": %ld, \"model\": ",
            bench_counting, scale_names[opt.scale], opt.repeat, date, sysconf(_SC_NPROCESSORS_ONLN));
    json_str(f, model);
    fprintf(f, ", \"kernel\": ");
    json_str(f, u.release);
    fprintf(f, ", \"compiler\": ");
    json_str(f, __VERSION__);
    fprintf(f, ", \"loadavg_start\": %.2f},\n \"results\": [", loadavg());
}

/* ------------------------------------------------------------------------
 * Command line
 * ------------------------------------------------------------------------ */

static void list_all(FILE *f)
{
    fprintf(f, "Workloads (paper config: 8 B min block, max order 11 = 16 KiB; page config: 4 KiB frames, "
               "orders 0..10):\n");
    for (int i = 0; bench_workloads[i]; i++) {
        const bench_workload_t *w = bench_workloads[i];
        fprintf(f, "  %-19s %s\n", w->name, w->help);
    }
    fprintf(f, "Allocators:\n");
    for (int i = 0; bench_allocators[i]; i++)
        fprintf(f, "  %-19s %s\n", bench_allocators[i]->name, bench_allocators[i]->help);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nbbs-bench [options]\n"
            "Runs workloads on allocators with T threads; prints a table and writes JSON.\n\n"
            "  --workload W[,W...]   workloads to run (default: all)\n"
            "  --allocator A[,A...]  allocators to run (default: all; malloc only where sizes allow)\n"
            "  --threads T[,T...]    thread counts (default 1,2,4,8)\n"
            "  --repeat N            runs per configuration, median/min/max reported (default 3)\n"
            "  --scale S             smoke | quick | paper: work per run (default quick)\n"
            "  --size B[,B...]       request bytes for linux-scalability, thread-test, constant-occupancy (default 64)\n"
            "  --order K[,K...]      block order for cached, alloc-seq, free-seq, bulk, repeat, rand (default 0)\n"
            "  --fill P[,P...]       occupancy %% for fill-cost (default 5,95)\n"
            "  --min-block B         override the minimum block of every workload's arena\n"
            "  --max-order K         override the maximum order\n"
            "  --arena BYTES         override the arena size\n"
            "  --ops N, --rounds N, --seconds S   override the scale's work amount (--ops is\n"
            "                        the block count of thread-test, --rounds the pool multiplier\n"
            "                        of constant-occupancy)\n"
            "  --seed N              random seed (default fixed, runs are reproducible per thread)\n"
            "  --json FILE           write every run and its summary to FILE\n"
            "  --label NAME          name recorded in the JSON (e.g. the LD_PRELOADed malloc)\n"
            "  --quiet               no progress line\n"
            "  --list                list workloads and allocators\n"
            "  --help                this text\n\n");
    list_all(f);
}

static void parse_args(int argc, char **argv)
{
    enum { O_WL = 256, O_AL, O_TH, O_REP, O_SCALE, O_SIZE, O_ORDER, O_FILL, O_MINB, O_MAXO, O_ARENA, O_OPS,
           O_ROUNDS, O_SECS, O_SEED, O_JSON, O_LABEL, O_QUIET, O_LIST, O_HELP };
    static const struct option lo[] = {
        { "workload", 1, 0, O_WL }, { "allocator", 1, 0, O_AL }, { "threads", 1, 0, O_TH },
        { "repeat", 1, 0, O_REP }, { "scale", 1, 0, O_SCALE }, { "size", 1, 0, O_SIZE },
        { "order", 1, 0, O_ORDER }, { "fill", 1, 0, O_FILL }, { "min-block", 1, 0, O_MINB },
        { "max-order", 1, 0, O_MAXO }, { "arena", 1, 0, O_ARENA }, { "ops", 1, 0, O_OPS },
        { "rounds", 1, 0, O_ROUNDS }, { "seconds", 1, 0, O_SECS }, { "seed", 1, 0, O_SEED },
        { "json", 1, 0, O_JSON }, { "label", 1, 0, O_LABEL }, { "quiet", 0, 0, O_QUIET },
        { "list", 0, 0, O_LIST }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
    };
    parse_longs(&opt.threads, "1,2,4,8", "--threads");
    parse_longs(&opt.sizes, "64", "--size");
    parse_longs(&opt.orders, "0", "--order");
    parse_longs(&opt.fills, "5,95", "--fill");
    long_list_t one;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case O_WL: opt.workloads = optarg; break;
        case O_AL: opt.allocators = optarg; break;
        case O_TH: parse_longs(&opt.threads, optarg, "--threads"); break;
        case O_REP: parse_longs(&one, optarg, "--repeat"); opt.repeat = (int)one.v[0]; break;
        case O_SCALE:
            if (strcmp(optarg, "smoke") == 0) opt.scale = BENCH_SCALE_SMOKE;
            else if (strcmp(optarg, "quick") == 0) opt.scale = BENCH_SCALE_QUICK;
            else if (strcmp(optarg, "paper") == 0) opt.scale = BENCH_SCALE_PAPER;
            else die("--scale must be smoke, quick or paper");
            break;
        case O_SIZE: parse_longs(&opt.sizes, optarg, "--size"); break;
        case O_ORDER: parse_longs(&opt.orders, optarg, "--order"); break;
        case O_FILL: parse_longs(&opt.fills, optarg, "--fill"); break;
        case O_MINB: parse_longs(&one, optarg, "--min-block"); opt.min_block = (size_t)one.v[0]; break;
        case O_MAXO: parse_longs(&one, optarg, "--max-order"); opt.max_order = one.v[0]; break;
        case O_ARENA: parse_longs(&one, optarg, "--arena"); opt.arena = (size_t)one.v[0]; break;
        case O_OPS: parse_longs(&one, optarg, "--ops"); opt.ops = (uint64_t)one.v[0]; break;
        case O_ROUNDS: parse_longs(&one, optarg, "--rounds"); opt.rounds = one.v[0]; break;
        case O_SECS: opt.seconds = strtod(optarg, NULL); if (opt.seconds <= 0) die("bad --seconds"); break;
        case O_SEED: parse_longs(&one, optarg, "--seed"); opt.seed = (uint64_t)one.v[0]; break;
        case O_JSON: opt.json = optarg; break;
        case O_LABEL: opt.label = optarg; break;
        case O_QUIET: opt.quiet = 1; break;
        case O_LIST: list_all(stdout); exit(0);
        case O_HELP: usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc)
        die("unexpected argument '%s'", argv[optind]);
    if (opt.repeat < 1 || opt.repeat > 256)
        die("--repeat must be 1..256");
    for (int i = 0; i < opt.threads.n; i++)
        if (opt.threads.v[i] < 1 || opt.threads.v[i] > 1024)
            die("--threads values must be 1..1024");
    check_names(opt.workloads, 0);
    check_names(opt.allocators, 1);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    FILE *json = NULL;
    if (opt.json) {
        json = fopen(opt.json, "w");
        if (!json)
            die("cannot write %s: %s", opt.json, strerror(errno));
        json_header(json, argv[0]);
    }
    int progress = !opt.quiet && isatty(2);

    /* Count the configurations first, for the progress line. */
    int total = 0, done = 0;
    for (int wi = 0; bench_workloads[wi]; wi++) {
        const bench_workload_t *w = bench_workloads[wi];
        if (!in_list(opt.workloads, w->name))
            continue;
        const long_list_t *pl = param_list(w);
        for (int ai = 0; bench_allocators[ai]; ai++)
            for (int pi = 0; pi < pl->n; pi++) {
                bench_params_t p;
                make_params(w, pl->v[pi], &p);
                if (in_list(opt.allocators, bench_allocators[ai]->name) && compatible(w, bench_allocators[ai], &p))
                    total += opt.threads.n;
            }
    }

    printf("%-19s %-10s %3s %-10s %12s %12s %10s %10s %9s %7s\n", "workload", "allocator", "T", "param",
           "median_s", "Mops/s", "alloc_ns", "free_ns", "failed", "spread");
    uint64_t t_start = bench_now_ns();
    int failures = 0;
    /* Runs of the allocators are interleaved (run 1 of each, then run 2 of
     * each, ...) so that a change in the machine's load during the suite
     * falls on all of them alike instead of on whichever ran at that time. */
    int nalloc = 0;
    while (bench_allocators[nalloc])
        nalloc++;
    run_result_t *rr = calloc((size_t)(opt.repeat * nalloc), sizeof *rr);
    int *ok = calloc((size_t)nalloc, sizeof *ok);
    size_t *meta = calloc((size_t)nalloc, sizeof *meta);
    if (!rr || !ok || !meta)
        die("out of memory");
    for (int wi = 0; bench_workloads[wi]; wi++) {
        const bench_workload_t *w = bench_workloads[wi];
        if (!in_list(opt.workloads, w->name))
            continue;
        const long_list_t *pl = param_list(w);
        for (int pi = 0; pi < pl->n; pi++)
            for (int ti = 0; ti < opt.threads.n; ti++) {
                int T = (int)opt.threads.v[ti];
                bench_params_t p;
                make_params(w, pl->v[pi], &p);
                for (int ai = 0; ai < nalloc; ai++)
                    ok[ai] = in_list(opt.allocators, bench_allocators[ai]->name) &&
                             compatible(w, bench_allocators[ai], &p);
                for (int rep = 0; rep < opt.repeat; rep++)
                    for (int ai = 0; ai < nalloc; ai++) {
                        if (!ok[ai])
                            continue;
                        const bench_allocator_t *a = bench_allocators[ai];
                        if (progress)
                            fprintf(stderr, "\r\033[K[%d/%d %.0fs] %s %s=%ld T=%d run %d/%d %s", done + 1, total,
                                    (double)(bench_now_ns() - t_start) / 1e9, w->name, param_name(w), p.value, T,
                                    rep + 1, opt.repeat, a->name);
                        if (run_once(w, a, &p, T, rep, &rr[ai * opt.repeat + rep], &meta[ai]) != 0) {
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
                    const bench_allocator_t *a = bench_allocators[ai];
                    const run_result_t *r = &rr[ai * opt.repeat];
                    done++;
                    summary_t wall = summarize(r, opt.repeat, offsetof(run_result_t, wall_s));
                    summary_t tput = summarize(r, opt.repeat, offsetof(run_result_t, ops_per_s));
                    summary_t an = summarize(r, opt.repeat, offsetof(run_result_t, alloc_ns));
                    summary_t fn = summarize(r, opt.repeat, offsetof(run_result_t, free_ns));
                    uint64_t failed = 0;
                    for (int i = 0; i < opt.repeat; i++)
                        failed += r[i].failed;
                    char pv[32];
                    snprintf(pv, sizeof pv, "%s=%ld", param_name(w), p.value);
                    printf("%-19s %-10s %3d %-10s %12.4f %12.3f %10.1f %10.1f %9llu %6.0f%%\n", w->name, a->name, T,
                           w->param == BENCH_PARAM_NONE ? "-" : pv, wall.med, tput.med / 1e6, an.med, fn.med,
                           (unsigned long long)failed, tput.med > 0 ? 100 * (tput.max - tput.min) / tput.med : 0);
                    fflush(stdout);
                    if (json)
                        json_result(json, w, a, &p, T, r, opt.repeat, meta[ai]);
                }
            }
    }
    if (json) {
        fprintf(json, "\n ], \"elapsed_s\": %.3f, \"loadavg_end\": %.2f}\n",
                (double)(bench_now_ns() - t_start) / 1e9, loadavg());
        if (fclose(json) != 0)
            die("error writing %s", opt.json);
    }
    free(rr);
    free(ok);
    free(meta);
    fprintf(stderr, "nbbs-bench: %d configurations in %.1f s%s\n", done,
            (double)(bench_now_ns() - t_start) / 1e9, failures ? " (some skipped)" : "");
    return failures ? 1 : 0;
}
