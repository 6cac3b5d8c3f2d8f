/*
 * runner.h - what the three parts of nbbs-bench share: the options (cli.c),
 * the runs and their statistics (runner.c), the table and JSON (output.c).
 * Workloads and allocators see only bench.h.
 */
#ifndef NBBS_BENCH_RUNNER_H
#define NBBS_BENCH_RUNNER_H

#include <stdio.h>

#include "bench.h"

#define MAX_LIST 32
#define BENCH_MAX_REPEAT 256 /* --repeat's limit */

typedef struct long_list {
    int  n;
    long v[MAX_LIST];
} long_list_t;

typedef struct bench_options {
    const char   *workloads, *allocators, *json, *label;
    long_list_t   threads, sizes, orders, fills;
    int           threads_set, sizes_set, orders_set, fills_set; /* given on the command line */
    int           repeat, repeat_set, quiet;
    bench_scale_t scale;
    size_t        min_block, arena;
    long          max_order;
    uint64_t      ops, seed;
    long          rounds;
    double        seconds;
    int           pin;     /* BENCH_PIN_*: where each worker thread runs (--pin) */
} bench_options_t;

/* --pin: none leaves placement to the scheduler; spread puts thread t on the
 * t mod n-th CPU the process may use; pack puts groups of consecutive
 * threads on one CPU (see pin_cpu in runner.c). */
enum { BENCH_PIN_NONE, BENCH_PIN_SPREAD, BENCH_PIN_PACK };
extern const char *const pin_names[];

extern bench_options_t opt;
extern const char *const scale_names[];

/* cli.c */
void parse_args(int argc, char **argv);
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void parse_longs(long_list_t *l, const char *s, const char *what);
int  in_list(const char *list, const char *name);

/* One run's figures; summarised over --repeat runs. */
typedef struct run_result {
    double   wall_s, ops_per_s, ns_per_op, alloc_ns, free_ns, pair_ns, cpu_pair_ns;
    double   alloc_cpu_ns, free_cpu_ns; /* alloc_ns, free_ns from CPU time (-1: not taken) */
    uint64_t ops, allocs, frees, failed, thread_ops_min, thread_ops_max;
    double   int_frag;     /* granted / requested bytes */
    long     peak_rss_kb;
    double   minflt;       /* minor page faults of the process during the run */
    double   start_skew_us; /* last thread's start of the measured region after the first's */
    double   rq_wait_us;   /* threads' run-queue wait from the start to their end, summed (-1: unknown) */
    double   vcsw;         /* threads' voluntary context switches in the measured region, summed (-1: unknown) */
    int      pinned;       /* the threads were pinned (--pin, T >= 2 and two CPUs or more) */
    char     pin_cpus[64]; /* when pinned: the CPU each thread ran on after pinning, "0,1,0,1" (cut at 63) */
    int      nsnaps;
    bench_snap_t snaps[BENCH_MAX_SNAPS];
    bench_atomics_t atomics;
    int      nmetrics;
    const char *metric_names[BENCH_MAX_METRICS];
    double   metric_values[BENCH_MAX_METRICS];
} run_result_t;

typedef struct summary {
    double med, min, max;
} summary_t;

/* runner.c */
const char *param_name(const bench_workload_t *w);
summary_t summarize(const run_result_t *rr, int n, size_t off);
summary_t summarize_metric(const run_result_t *rr, int n, const char *name);
int run_suite(FILE *json);

/* output.c */
void json_str(FILE *f, const char *s);
void json_header(FILE *f, const char *argv0);
void json_result(FILE *f, const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p,
                 int nthreads, const run_result_t *rr, int n, size_t meta);
void json_footer(FILE *f, double elapsed_s);
void table_header(void);
void table_row(const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p, int nthreads,
               const run_result_t *rr, int n);
void list_text(FILE *f);
void list_json(FILE *f);

#endif /* NBBS_BENCH_RUNNER_H */
