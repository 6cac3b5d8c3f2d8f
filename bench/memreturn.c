/*
 * memreturn.c - does a malloc give freed small-object memory back to the
 * system? (issue 13, item 6; run by bench/run.sh under each LD_PRELOADed
 * malloc, plotted by bench/plot.py)
 *
 * The program allocates --mib MiB of 64-byte objects (linked through their
 * first words, so no side array adds to the resident set), frees them all,
 * and then samples its resident set (/proc/self/statm) every --interval-ms
 * through three phases:
 *   run   --run-s seconds while it keeps running lightly (a few small
 *         malloc/free pairs every millisecond);
 *   trim  after malloc_trim(0) (the preloaded malloc's if it has one, else
 *         glibc's), --trim-s seconds, still running lightly;
 *   idle  --idle-s seconds with no allocator call at all.
 * It writes one JSON object (to --json FILE, else stdout) with every
 * sample and the figures the report tabulates: RSS before, after the
 * allocation, right after the frees, 2 s into the run phase (or its end if
 * shorter), right after malloc_trim, and at the end of the idle phase, plus
 * the first time in the run phase the RSS fell below --below-mib.
 *
 * The sampling uses only open/read/close on a stack buffer, so it calls no
 * malloc itself: in the idle phase the allocator is truly left alone.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 4096

typedef struct sample {
    double t;     /* seconds since the frees finished */
    int    phase; /* 0 run, 1 trim, 2 idle */
    long   rss_kb;
} sample_t;

static const char *const phase_names[] = { "run", "trim", "idle" };
static sample_t samples[MAX_SAMPLES];
static int nsamples;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Resident set in KiB from /proc/self/statm (its second field, in pages);
 * -1 if it cannot be read. No malloc. */
static long rss_kb(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    unsigned long size, resident;
    if (sscanf(buf, "%lu %lu", &size, &resident) != 2)
        return -1;
    return (long)(resident * (unsigned long)sysconf(_SC_PAGESIZE) / 1024);
}

static void sleep_s(double s)
{
    struct timespec ts = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1du;
}

/* Where light_work's blocks escape, so the compiler keeps every malloc. */
static void *volatile sink;

/* A program that keeps running lightly: 16 small blocks allocated, written
 * and freed. */
static void light_work(void)
{
    void *p[16];
    for (int i = 0; i < 16; i++) {
        size_t sz = 16 + (size_t)(next_rand() % 497);
        p[i] = malloc(sz);
        if (p[i])
            memset(p[i], i, sz);
        sink = p[i];
    }
    for (int i = 0; i < 16; i++)
        free(p[i]);
}

/* Samples every interval for secs seconds of phase, doing light work every
 * millisecond between samples unless the phase is idle. */
static void phase(int ph, double t0, double secs, double interval)
{
    double start = now_s(), next = start;
    while (now_s() - start < secs) {
        if (now_s() >= next) {
            if (nsamples < MAX_SAMPLES)
                samples[nsamples++] = (sample_t){ now_s() - t0, ph, rss_kb() };
            next += interval;
        }
        if (ph != 2)
            light_work();
        sleep_s(ph == 2 ? interval / 4 : 0.001);
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: memreturn [--mib N] [--run-s S] [--trim-s S] [--idle-s S] [--interval-ms MS]\n"
               "                 [--below-mib N] [--label NAME] [--json FILE]\n"
               "Allocates N MiB (default 1024) of 64-byte objects, frees them, and samples the resident set\n"
               "while running lightly (run), after malloc_trim(0) (trim) and idle; see bench/README.md.\n");
}

static double parse_num(const char *opt, const char *s, double lo)
{
    char *end;
    errno = 0;
    double v = strtod(s ? s : "", &end);
    if (!s || errno || end == s || *end || !(v >= lo)) {
        fprintf(stderr, "memreturn: %s needs a number >= %g\n", opt, lo);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    double mib = 1024, run_s = 3, trim_s = 1, idle_s = 2, interval = 0.05, below = 150;
    const char *label = "", *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--mib")) {
            mib = parse_num(a, v, 1), i++;
        } else if (!strcmp(a, "--run-s")) {
            run_s = parse_num(a, v, 0), i++;
        } else if (!strcmp(a, "--trim-s")) {
            trim_s = parse_num(a, v, 0), i++;
        } else if (!strcmp(a, "--idle-s")) {
            idle_s = parse_num(a, v, 0), i++;
        } else if (!strcmp(a, "--interval-ms")) {
            interval = parse_num(a, v, 1) / 1000, i++;
        } else if (!strcmp(a, "--below-mib")) {
            below = parse_num(a, v, 0), i++;
        } else if (!strcmp(a, "--label") && v) {
            label = v, i++;
        } else if (!strcmp(a, "--json") && v) {
            json = v, i++;
        } else {
            fprintf(stderr, "memreturn: unknown or incomplete option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    long rss_before = rss_kb();
    if (rss_before < 0) {
        fprintf(stderr, "memreturn: cannot read /proc/self/statm\n");
        return 1;
    }
    /* Allocate: objects linked through their first words. */
    const uint64_t n = (uint64_t)(mib * 1048576.0) / 64;
    void *head = NULL;
    double ta = now_s();
    for (uint64_t i = 0; i < n; i++) {
        void **p = malloc(64);
        if (!p) {
            fprintf(stderr, "memreturn: malloc(64) failed after %llu objects\n", (unsigned long long)i);
            return 1;
        }
        p[0] = head;
        p[1] = (void *)(uintptr_t)i;
        head = p;
    }
    long rss_alloc = rss_kb();
    double tf = now_s();
    while (head) {
        void *next = *(void **)head;
        free(head);
        head = next;
    }
    double t0 = now_s();
    long rss_free = rss_kb();
    samples[nsamples++] = (sample_t){ 0, 0, rss_free };
    phase(0, t0, run_s, interval);
    double ttrim = now_s();
    malloc_trim(0);
    double trim_call_s = now_s() - ttrim;
    long rss_trim = rss_kb();
    samples[nsamples++] = (sample_t){ now_s() - t0, 1, rss_trim };
    phase(1, t0, trim_s, interval);
    phase(2, t0, idle_s, interval);

    /* The figures: RSS 2 s into the run phase (the last sample at or before
     * it), and the first run-phase time below the mark. */
    long rss_2s = rss_free, rss_run_end = rss_free, rss_idle_end = rss_trim;
    double t_below = -1;
    for (int i = 0; i < nsamples; i++) {
        const sample_t *s = &samples[i];
        if (s->phase == 0) {
            if (s->t <= 2.0 + 1e-9)
                rss_2s = s->rss_kb;
            rss_run_end = s->rss_kb;
            if (t_below < 0 && s->rss_kb >= 0 && (double)s->rss_kb < below * 1024)
                t_below = s->t;
        }
        if (s->phase == 2)
            rss_idle_end = s->rss_kb;
    }
    FILE *f = json ? fopen(json, "w") : stdout;
    if (!f) {
        fprintf(stderr, "memreturn: cannot write %s\n", json);
        return 1;
    }
    fprintf(f, "{\"tool\": \"memreturn\", \"label\": \"");
    for (const char *c = label; *c; c++)
        if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
            fputc(*c, f);
    fprintf(f, "\", \"mib\": %g, \"objects\": %llu, \"object_bytes\": 64, \"interval_s\": %g, "
               "\"run_s\": %g, \"trim_s\": %g, \"idle_s\": %g, \"below_mib\": %g,\n"
               " \"alloc_s\": %.4f, \"free_s\": %.4f, \"trim_call_s\": %.4f,\n"
               " \"rss_before_kb\": %ld, \"rss_alloc_kb\": %ld, \"rss_free_kb\": %ld, \"rss_2s_kb\": %ld, "
               "\"rss_run_end_kb\": %ld, \"rss_trim_kb\": %ld, \"rss_idle_end_kb\": %ld, \"t_below_s\": %.3f,\n"
               " \"samples\": [",
            mib, (unsigned long long)n, interval, run_s, trim_s, idle_s, below, tf - ta, t0 - tf, trim_call_s,
            rss_before, rss_alloc, rss_free, rss_2s, rss_run_end, rss_trim, rss_idle_end, t_below);
    for (int i = 0; i < nsamples; i++)
        fprintf(f, "%s[%.3f, \"%s\", %ld]", i ? ", " : "", samples[i].t, phase_names[samples[i].phase],
                samples[i].rss_kb);
    fprintf(f, "]}\n");
    if (f != stdout && fclose(f) != 0) {
        fprintf(stderr, "memreturn: cannot write %s\n", json);
        return 1;
    }
    return 0;
}
