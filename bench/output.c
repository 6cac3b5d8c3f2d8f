/*
 * output.c - what nbbs-bench writes: the table on stdout, the JSON of every
 * run and its summary (--json), and the lists of workloads and allocators
 * (--list, --list --json). The JSON fields are described in bench/README.md.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "runner.h"

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

void json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
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
 * The table on stdout
 * ------------------------------------------------------------------------ */

void table_header(void)
{
    printf("%-19s %-10s %3s %-10s %12s %12s %10s %10s %9s %7s\n", "workload", "allocator", "T", "param",
           "median_s", "Mops/s", "alloc_ns", "free_ns", "failed", "spread");
}

void table_row(const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p, int T,
               const run_result_t *r, int n)
{
    summary_t wall = summarize(r, n, offsetof(run_result_t, wall_s));
    summary_t tput = summarize(r, n, offsetof(run_result_t, ops_per_s));
    summary_t an = summarize(r, n, offsetof(run_result_t, alloc_ns));
    summary_t fn = summarize(r, n, offsetof(run_result_t, free_ns));
    uint64_t failed = 0;
    for (int i = 0; i < n; i++)
        failed += r[i].failed;
    char pv[32];
    snprintf(pv, sizeof pv, "%s=%ld", param_name(w), p->value);
    printf("%-19s %-10s %3d %-10s %12.4f %12.3f %10.1f %10.1f %9llu %6.0f%%", w->name, a->name, T,
           w->param == BENCH_PARAM_NONE ? "-" : pv, wall.med, tput.med / 1e6, an.med, fn.med,
           (unsigned long long)failed, tput.med > 0 ? 100 * (tput.max - tput.min) / tput.med : 0);
    /* The workload's own headline figures, medians over the runs. */
    if (w->show) {
        char *dup = strdup(w->show), *save = NULL;
        if (!dup)
            die("out of memory");
        for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            summary_t s = summarize_metric(r, n, tok);
            printf("  %s=%.6g", tok, s.med);
        }
        free(dup);
    }
    printf("\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------------
 * JSON
 * ------------------------------------------------------------------------ */

static void json_summary(FILE *f, const char *name, summary_t s, int last)
{
    fprintf(f, "\"%s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g}%s", name, s.med, s.min, s.max,
            last ? "" : ", ");
}

static int json_first = 1;

void json_result(FILE *f, const bench_workload_t *w, const bench_allocator_t *a, const bench_params_t *p,
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
    fprintf(f, ", \"pin\": ");
    json_str(f, pin_names[opt.pin]);
    fprintf(f, ", \"pinned\": %d", n > 0 && rr[0].pinned);
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
    json_summary(f, "alloc_cpu_ns", summarize(rr, n, offsetof(run_result_t, alloc_cpu_ns)), 0);
    json_summary(f, "free_cpu_ns", summarize(rr, n, offsetof(run_result_t, free_cpu_ns)), 0);
    json_summary(f, "int_frag", summarize(rr, n, offsetof(run_result_t, int_frag)), 0);
    json_summary(f, "minflt", summarize(rr, n, offsetof(run_result_t, minflt)), 1);
    /* The workload's metrics, named as the first run names them. */
    fprintf(f, "},\n   \"metrics\": {");
    for (int k = 0; n > 0 && k < rr[0].nmetrics; k++)
        json_summary(f, rr[0].metric_names[k], summarize_metric(rr, n, rr[0].metric_names[k]),
                     k + 1 == rr[0].nmetrics);
    fprintf(f, "},\n   \"runs\": [");
    for (int i = 0; i < n; i++) {
        const run_result_t *r = &rr[i];
        fprintf(f, "%s\n    {\"wall_s\": %.6g, \"ops\": %llu, \"allocs\": %llu, \"frees\": %llu, "
                   "\"failed\": %llu, \"ops_per_s\": %.6g, \"ns_per_op\": %.6g, \"pair_ns\": %.6g, \"cpu_pair_ns\": %.6g, "
                   "\"alloc_ns\": %.6g, \"free_ns\": %.6g, \"alloc_cpu_ns\": %.6g, \"free_cpu_ns\": %.6g, \"thread_ops_min\": %llu, "
                   "\"thread_ops_max\": %llu, \"int_frag\": %.6g, \"peak_rss_kb\": %ld, \"minflt\": %.0f, "
                   "\"start_skew_us\": %.6g, \"rq_wait_us\": %.6g, \"vcsw\": %.0f, \"pin_cpus\": \"%s\", \"frag\": [",
                i ? "," : "", r->wall_s, (unsigned long long)r->ops, (unsigned long long)r->allocs,
                (unsigned long long)r->frees, (unsigned long long)r->failed, r->ops_per_s, r->ns_per_op,
                r->pair_ns, r->cpu_pair_ns, r->alloc_ns, r->free_ns, r->alloc_cpu_ns, r->free_cpu_ns,
                (unsigned long long)r->thread_ops_min,
                (unsigned long long)r->thread_ops_max, r->int_frag, r->peak_rss_kb, r->minflt,
                r->start_skew_us, r->rq_wait_us, r->vcsw, r->pin_cpus);
        for (int s = 0; s < r->nsnaps; s++) {
            const bench_snap_t *sn = &r->snaps[s];
            fprintf(f, "%s{\"phase\": ", s ? ", " : "");
            json_str(f, sn->phase);
            fprintf(f, ", \"free_bytes\": %zu, \"largest_free\": %zu, \"ratio\": %.6g}", sn->free_bytes,
                    sn->largest_free, sn->free_bytes ? (double)sn->largest_free / (double)sn->free_bytes : 1.0);
        }
        fprintf(f, "], \"metrics\": {");
        for (int k = 0; k < r->nmetrics; k++) {
            json_str(f, r->metric_names[k]);
            fprintf(f, ": %.6g%s", r->metric_values[k], k + 1 == r->nmetrics ? "" : ", ");
        }
        fprintf(f, "}");
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

void json_header(FILE *f, const char *argv0)
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
    fprintf(f, "{\"tool\": \"nbbs-bench\", \"format\": 2, \"program\": ");
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

void json_footer(FILE *f, double elapsed_s)
{
    fprintf(f, "\n ], \"elapsed_s\": %.3f, \"loadavg_end\": %.2f}\n", elapsed_s, loadavg());
}

/* ------------------------------------------------------------------------
 * The lists
 * ------------------------------------------------------------------------ */

void list_text(FILE *f)
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

static void json_field(FILE *f, const char *key, const char *val, const char *sep)
{
    fprintf(f, "\"%s\": ", key);
    json_str(f, val);
    fputs(sep, f);
}

/* Everything run.sh and plot.py need to handle a workload or an allocator
 * without knowing its name beforehand. */
void list_json(FILE *f)
{
    static const char *const cfgs[] = { "paper", "page" };
    fprintf(f, "{\"workloads\": [");
    for (int i = 0; bench_workloads[i]; i++) {
        const bench_workload_t *w = bench_workloads[i];
        fprintf(f, "%s\n  {", i ? "," : "");
        json_field(f, "name", w->name, ", ");
        json_field(f, "source", w->source, ", ");
        json_field(f, "help", w->help, ", ");
        json_field(f, "group", w->group ? w->group : "other", ", ");
        json_field(f, "config", cfgs[w->cfg], ", ");
        json_field(f, "param", param_name(w), ", ");
        json_field(f, "values", w->values, ", ");
        json_field(f, "threads", w->threads, ", ");
        fprintf(f, "\"min_threads\": %d, \"repeat\": %d, \"malloc_ok\": %d, \"malloc_only\": %d, ", w->min_threads,
                w->repeat, w->malloc_ok, w->malloc_only);
        json_field(f, "metric", w->metric, ", ");
        json_field(f, "plot", w->plot ? w->plot : "threads", ", ");
        json_field(f, "show", w->show, ", ");
        json_field(f, "frontend", w->frontend, ", ");
        json_field(f, "frontend_quick", w->frontend_quick, "}");
    }
    fprintf(f, "\n ],\n \"allocators\": [");
    for (int i = 0; bench_allocators[i]; i++) {
        const bench_allocator_t *a = bench_allocators[i];
        fprintf(f, "%s\n  {", i ? "," : "");
        json_field(f, "name", a->name, ", ");
        json_field(f, "help", a->help, ", ");
        fprintf(f, "\"lockfree\": %d, \"malloc\": %d, \"baseline\": %d, \"orders\": %d, ", a->lockfree, a->is_malloc,
                a->baseline, a->alloc_order != NULL);
        json_field(f, "twin_of", a->twin_of, "}");
    }
    fprintf(f, "\n ]}\n");
}
