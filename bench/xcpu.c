/*
 * xcpu.c - what a cache line costs to move between two CPUs, now.
 *
 * Two threads, pinned to the first two CPUs the process may use, pass one
 * counter back and forth through a cache line of its own: each waits for the
 * other's value and writes the next. A round trip is two moves of the line.
 * Prints one line:
 *
 *     xcpu cpus=A,B round_trip_ns=MEDIAN min=MIN max=MAX trials=K
 *
 * The figure is the machine's, not an allocator's: on a virtual machine the
 * host may place the two vCPUs on cores that share a cache or on cores that
 * do not, and move them while it runs (stop 32 saw 90-120 ns and 370-440 ns on
 * the same guest within minutes). Every cross-thread workload pays it per
 * hand-off, so run.sh probes it around the main suite and the front-end
 * runs, and the report prints it beside them.
 *
 *   xcpu [--trials K] [--trips N]      (defaults 7 and 100000)
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Alignas(64) _Atomic long ball;
static long trips = 100000;
static int cpu_b;
static _Atomic int partner_unpinned;

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The other side: answers every odd value with the next even one (also
 * when it could not pin itself, so that main never waits for ever). */
static void *partner(void *arg)
{
    if (pin(cpu_b) != 0)
        atomic_store(&partner_unpinned, 1);
    for (long i = 1; i < 2 * trips; i += 2) {
        while (atomic_load_explicit(&ball, memory_order_acquire) != i)
            ;
        atomic_store_explicit(&ball, i + 1, memory_order_release);
    }
    return arg;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int trials = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc)
            trials = atoi(argv[++i]);
        else if (strcmp(argv[i], "--trips") == 0 && i + 1 < argc)
            trips = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: xcpu [--trials K] [--trips N]\n");
            return 2;
        }
    }
    if (trials < 1 || trials > 99 || trips < 1) {
        fprintf(stderr, "xcpu: --trials must be 1..99 and --trips positive\n");
        return 2;
    }
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof s, &s) != 0) {
        perror("xcpu: sched_getaffinity");
        return 1;
    }
    int cpus[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &s))
            cpus[n++] = c;
    if (n < 2) {
        printf("xcpu cpus=%d round_trip_ns=-1 (one CPU: nothing crosses)\n", n ? cpus[0] : -1);
        return 0;
    }
    cpu_b = cpus[1];
    if (pin(cpus[0]) != 0) {
        fprintf(stderr, "xcpu: cannot pin to CPU %d\n", cpus[0]);
        return 1;
    }
    double rt[99];
    for (int t = 0; t < trials; t++) {
        atomic_store(&ball, 0);
        pthread_t th;
        if (pthread_create(&th, NULL, partner, NULL) != 0) {
            fprintf(stderr, "xcpu: pthread_create failed\n");
            return 1;
        }
        double t0 = now_ns();
        for (long i = 0; i < 2 * trips; i += 2) {
            while (atomic_load_explicit(&ball, memory_order_acquire) != i)
                ;
            atomic_store_explicit(&ball, i + 1, memory_order_release);
        }
        pthread_join(th, NULL);
        if (atomic_load(&partner_unpinned)) {
            fprintf(stderr, "xcpu: cannot pin to CPU %d\n", cpu_b);
            return 1;
        }
        rt[t] = (now_ns() - t0) / (double)trips;
    }
    qsort(rt, (size_t)trials, sizeof rt[0], cmp_double);
    printf("xcpu cpus=%d,%d round_trip_ns=%.1f min=%.1f max=%.1f trials=%d\n", cpus[0], cpus[1], rt[trials / 2], rt[0],
           rt[trials - 1], trials);
    return 0;
}
