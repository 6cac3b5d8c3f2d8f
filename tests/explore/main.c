/*
 * main.c - the explorer's strategies and command line.
 *
 *   --dfs   every interleaving of a scenario, by depth-first search over the
 *           scheduling choices (each run re-executes from scratch with a
 *           prefix of choices). Sleep sets skip an interleaving that only
 *           swaps two adjacent independent steps (different words, or two
 *           loads) of one already explored; --no-por turns that off.
 *   --pct   random schedules with probabilistic priority changes (PCT:
 *           random thread priorities, d-1 random points where the running
 *           thread drops to the bottom), plus random stack slots, so that
 *           threads start their scans at random positions. One seed = one run.
 *   --replay SCHEDULE [--seed S]   re-runs one failing run exactly.
 *   --prefix SCHEDULE   runs the schedule, then the lowest enabled thread
 *           until the run ends (all end-of-run checks): a hand-written
 *           interleaving as a regression test (with --expect-fail, the run
 *           must fail).
 *
 * Without a mode it runs the suite: --dfs on every small scenario, then --pct
 * on every scenario for --budget seconds in all. A failure prints the seed,
 * the schedule and the command that replays it, and the exit status is 1.
 * With --expect-fail (planted-bug builds) the exit status is 0 only if a
 * failure is found and its schedule replays to the same failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "explore.h"
#include "nbbs_atomic.h"

#ifndef NBBS_PLANT_BUG
#define NBBS_PLANT_BUG 0
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static ex_result_t res;
static const char *prog = "nbbs_explore";
static bool expect_fail;
static bool skip_known; /* leave out the scenarios where the real core is known to fail */
static bool found;          /* a failure was found (and, with expect_fail, replayed) */
static double found_at;     /* seconds from the start of the search */
static unsigned long found_after; /* runs before it */

/* ---- schedules as text: "0*3.1.0*12" ------------------------------------------ */

static void print_schedule(FILE *f, const uint8_t *s, unsigned n)
{
    for (unsigned i = 0; i < n;) {
        unsigned j = i;
        while (j < n && s[j] == s[i])
            j++;
        fprintf(f, "%s%u", i ? "." : "", s[i]);
        if (j - i > 1)
            fprintf(f, "*%u", j - i);
        i = j;
    }
}

static unsigned parse_schedule(const char *p, uint8_t *s)
{
    unsigned n = 0;
    while (*p && n < EX_MAX_STEPS) {
        unsigned t = (unsigned)strtoul(p, (char **)&p, 10), k = 1;
        if (*p == '*')
            k = (unsigned)strtoul(p + 1, (char **)&p, 10);
        while (k-- && n < EX_MAX_STEPS)
            s[n++] = (uint8_t)t;
        if (*p == '.')
            p++;
    }
    return n;
}

/* ---- slots: where each thread's stack is, hence where its scans start ---------- */

static void dfs_slots(const ex_scenario_t *s, unsigned *slots)
{
    unsigned n = ex_nthreads(s);
    const char *p = s->slots;
    for (unsigned t = 0; t < n; t++)
        slots[t] = p && *p ? (unsigned)strtoul(p, (char **)&p, 10) % EX_STACK_SLOTS : t;
}

static void seed_slots(const ex_scenario_t *s, uint64_t seed, unsigned *slots)
{
    unsigned pool[EX_STACK_SLOTS], n = ex_nthreads(s);
    uint64_t rs = seed ^ UINT64_C(0x5107);
    for (unsigned i = 0; i < EX_STACK_SLOTS; i++)
        pool[i] = i;
    for (unsigned t = 0; t < n; t++) {
        unsigned j = t + (unsigned)(splitmix(&rs) % (EX_STACK_SLOTS - t));
        unsigned x = pool[t];
        pool[t] = pool[j], pool[j] = x;
        slots[t] = pool[t];
    }
}

/* ---- replay ------------------------------------------------------------------ */

typedef struct replay {
    const uint8_t *s;
    unsigned n;
    bool prefix; /* --prefix: after the schedule, the lowest enabled thread runs to the end */
} replay_t;

static int replay_choose(void *ctx, unsigned step, unsigned enabled)
{
    replay_t *r = ctx;
    if (step >= r->n && r->prefix && enabled)
        return __builtin_ctz(enabled);
    if (step >= r->n || !(enabled >> r->s[step] & 1)) {
        ex_fail("replay: the schedule does not fit this run at step %u", step);
        return -1;
    }
    return r->s[step];
}

/* Reports a failure; replays it to show it is deterministic. */
static void report(const ex_scenario_t *s, const char *mode, long long seed, const unsigned *slots)
{
    static uint8_t sched[EX_MAX_STEPS];
    static ex_result_t again;
    unsigned n = res.steps;
    char msg[sizeof res.msg];
    memcpy(sched, res.sched, n);
    memcpy(msg, res.msg, sizeof msg);
    printf("FAIL %s (%s", s->name, mode);
    if (seed >= 0)
        printf(", seed %lld", seed);
    printf(", %u steps): %s\n  schedule: ", n, msg);
    print_schedule(stdout, sched, n);
    printf("\n  replay:   %s --scenario %s%s", prog, s->name, seed >= 0 ? " --seed " : "");
    if (seed >= 0)
        printf("%lld", seed);
    printf(" --replay ");
    print_schedule(stdout, sched, n);
    printf("\n");
    replay_t r = { sched, n, false };
    ex_run(s, slots, replay_choose, &r, &again);
    bool same = again.failed && !strcmp(again.msg, msg);
    printf("  replayed: %s\n", same ? "same failure" : again.failed ? again.msg : "no failure (NOT deterministic)");
    found = !expect_fail || same;
    fflush(stdout);
}

/* ---- exhaustive search with sleep sets ---------------------------------------- */

typedef struct dnode {
    unsigned     enabled, sleep, done;
    uint8_t      chosen;
    ex_pending_t pend[EX_MAX_THREADS];
} dnode_t;

static dnode_t dstack[EX_MAX_STEPS];
static unsigned dlen;
static bool use_por = true;

static bool independent(ex_pending_t a, ex_pending_t b)
{
    return a.addr != b.addr || (a.op == NBBS_OP_LOAD && b.op == NBBS_OP_LOAD);
}

static int dfs_choose(void *ctx, unsigned step, unsigned enabled)
{
    (void)ctx;
    if (step < dlen)
        return dstack[step].chosen;
    dnode_t *n = &dstack[step];
    n->enabled = enabled;
    n->sleep = n->done = 0;
    for (int t = 0; t < EX_MAX_THREADS; t++)
        n->pend[t] = (enabled >> t & 1) ? sched_pending(t) : (ex_pending_t){ EX_OP_NONE, NULL };
    if (use_por && step > 0) {
        const dnode_t *p = &dstack[step - 1];
        unsigned cand = (p->sleep | p->done) & ~(1u << p->chosen) & enabled;
        for (int t = 0; t < EX_MAX_THREADS; t++)
            if ((cand >> t & 1) && independent(p->pend[t], p->pend[p->chosen]))
                n->sleep |= 1u << t;
    }
    unsigned avail = enabled & ~n->sleep;
    if (!avail) {
        dlen = step;
        return -1;
    }
    n->chosen = (uint8_t)__builtin_ctz(avail);
    n->done = 1u << n->chosen;
    dlen = step + 1;
    return n->chosen;
}

static bool dfs_next(void)
{
    while (dlen > 0) {
        dnode_t *n = &dstack[dlen - 1];
        unsigned alt = n->enabled & ~n->sleep & ~n->done;
        if (alt) {
            n->chosen = (uint8_t)__builtin_ctz(alt);
            n->done |= 1u << n->chosen;
            return true;
        }
        dlen--;
    }
    return false;
}

/* Returns false on a failure. */
static bool run_dfs(const ex_scenario_t *s, unsigned long max_runs)
{
    unsigned slots[EX_MAX_THREADS];
    unsigned long runs = 0, pruned = 0;
    unsigned maxsteps = 0;
    double t0 = now();
    dfs_slots(s, slots);
    dlen = 0;
    do {
        ex_run(s, slots, dfs_choose, NULL, &res);
        if (res.failed) {
            found_at = now() - t0, found_after = runs + pruned;
            report(s, "dfs", -1, slots);
            return false;
        }
        if (res.pruned) {
            pruned++;
        } else {
            runs++;
            if (res.steps > maxsteps)
                maxsteps = res.steps;
        }
    } while (dfs_next() && runs < max_runs);
    double dt = now() - t0;
    printf("dfs %-14s %s: %lu interleavings%s, %lu redundant prefixes cut, up to %u steps, %.2f s (%.0f runs/s)\n",
           s->name, use_por ? "(sleep sets)" : "(all)", runs, dlen ? " (STOPPED at --max-runs)" : "",
           pruned, maxsteps, dt, (runs + pruned) / (dt > 0 ? dt : 1e-9));
    fflush(stdout);
    return true;
}

/* ---- PCT ------------------------------------------------------------------------ */

typedef struct pct {
    uint64_t rng;
    int      prio[EX_MAX_THREADS];
    unsigned change[8], nchange;
    bool     uniform; /* some seeds: a uniformly random thread at every step */
} pct_t;

static int pct_choose(void *ctx, unsigned step, unsigned enabled)
{
    pct_t *p = ctx;
    if (p->uniform) {
        unsigned k = (unsigned)(splitmix(&p->rng) % (unsigned)__builtin_popcount(enabled));
        while (k--)
            enabled &= enabled - 1;
        return __builtin_ctz(enabled);
    }
    int best = -1;
    for (unsigned j = 0; j <= p->nchange; j++) {
        best = -1;
        for (int t = 0; t < EX_MAX_THREADS; t++)
            if ((enabled >> t & 1) && (best < 0 || p->prio[t] > p->prio[best]))
                best = t;
        if (j == p->nchange || p->change[j] != step)
            continue;
        p->prio[best] = -(int)(j + 1); /* a change point: the running thread drops below all */
    }
    return best;
}

static void pct_init(pct_t *p, const ex_scenario_t *s, uint64_t seed, unsigned kest)
{
    unsigned n = ex_nthreads(s);
    p->rng = seed * UINT64_C(0x2545F4914F6CDD1D) + 1;
    p->uniform = splitmix(&p->rng) % 4 == 0;
    for (unsigned t = 0; t < n; t++)
        p->prio[t] = (int)t + 100;
    for (unsigned t = n; t-- > 1;) {
        unsigned j = (unsigned)(splitmix(&p->rng) % (t + 1));
        int x = p->prio[t];
        p->prio[t] = p->prio[j], p->prio[j] = x;
    }
    p->nchange = (unsigned)(splitmix(&p->rng) % 5); /* depth d = 1 .. 5 */
    for (unsigned j = 0; j < p->nchange; j++)
        p->change[j] = (unsigned)(splitmix(&p->rng) % kest);
}

static bool run_pct(const ex_scenario_t *s, uint64_t seed0, unsigned long seeds, double budget)
{
    /* PCT's k (steps per run) is estimated from the programs alone, so that each
     * seed is a run of its own: seed S alone replays it. */
    unsigned slots[EX_MAX_THREADS], kest = 0, maxsteps = 0;
    unsigned long runs = 0, nulls0 = ex_nulls;
    double t0 = now(), dt;
    pct_t p;
    for (unsigned t = 0; t < ex_nthreads(s); t++)
        for (const char *c = s->prog[t]; *c; c++)
            kest += *c == ' ' ? 0 : 12; /* about 24 steps per call, a call is 2 characters */
    for (uint64_t seed = seed0;; seed++) {
        if (runs >= seeds || ((runs & 15) == 0 && now() - t0 >= budget))
            break;
        seed_slots(s, seed, slots);
        pct_init(&p, s, seed, kest);
        ex_run(s, slots, pct_choose, &p, &res);
        runs++;
        if (res.failed) {
            found_at = now() - t0, found_after = runs;
            report(s, "pct", (long long)seed, slots);
            return false;
        }
        if (res.steps > maxsteps)
            maxsteps = res.steps;
    }
    dt = now() - t0;
    if (expect_fail)
        return true;
    printf("pct %-14s %lu seeds (%llu..%llu) in %.2f s: %.0f seeds/s, up to %u steps, %lu NULL allocs\n", s->name,
           runs, (unsigned long long)seed0, (unsigned long long)(seed0 + runs - 1), dt, runs / (dt > 0 ? dt : 1e-9),
           maxsteps, ex_nulls - nulls0);
    fflush(stdout);
    return true;
}

/* ---- command line ------------------------------------------------------------------ */

static void usage(void)
{
    puts("usage: nbbs_explore [--list] [--dfs] [--pct] [--scenario NAME[,NAME...]]\n"
         "                    [--seed S] [--seeds N] [--budget SECONDS] [--max-runs N] [--no-por] [--no-marks]\n"
         "                    [--replay|--prefix SCHEDULE [--trace]] [--expect-fail] [--skip-known]\n"
         "Without --dfs/--pct/--replay: --dfs on the small scenarios, then --pct on all\n"
         "of them sharing --budget (default 20 s).");
}

int main(int argc, char **argv)
{
    bool dfs = false, pct = false, list = false, prefix = false;
    const char *names = NULL, *replay = NULL;
    long long seed = -1;
    unsigned long seeds = (unsigned long)-1, max_runs = (unsigned long)-1;
    double budget = 20;
    prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dfs")) dfs = true;
        else if (!strcmp(a, "--pct")) pct = true;
        else if (!strcmp(a, "--list")) list = true;
        else if (!strcmp(a, "--no-por")) use_por = false;
        else if (!strcmp(a, "--expect-fail")) expect_fail = skip_known = true;
        else if (!strcmp(a, "--skip-known")) skip_known = true;
        else if (!strcmp(a, "--trace")) ex_trace = true;
        else if (!strcmp(a, "--no-marks")) ex_check_marks = false;
        else if (!strcmp(a, "--scenario") && v) names = v, i++;
        else if (!strcmp(a, "--seed") && v) seed = atoll(v), i++;
        else if (!strcmp(a, "--seeds") && v) seeds = strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--budget") && v) budget = atof(v), i++;
        else if (!strcmp(a, "--max-runs") && v) max_runs = strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--replay") && v) replay = v, i++;
        else if (!strcmp(a, "--prefix") && v) replay = v, prefix = true, i++;
        else {
            usage();
            return 2;
        }
    }
    if (list) {
        for (const ex_scenario_t *s = ex_scenarios; s->name; s++)
            printf("%-15s %s %u threads%s: %s%s%s\n", s->name, s->layout == NBBS_LAYOUT_TREE ? "tree " : "bunch",
                   ex_nthreads(s), s->dfs ? ", dfs" : "", s->what, s->known ? "\n                KNOWN CORE BUG: " : "",
                   s->known ? s->known : "");
        return 0;
    }

    /* The scenarios to run, in order. */
    const ex_scenario_t *todo[64];
    unsigned ntodo = 0;
    if (names) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", names);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            const ex_scenario_t *s = ex_find(tok);
            if (!s) {
                fprintf(stderr, "unknown scenario %s (see --list)\n", tok);
                return 2;
            }
            if (!(skip_known && s->known))
                todo[ntodo++] = s;
        }
    } else {
        for (const ex_scenario_t *s = ex_scenarios; s->name; s++)
            if (!(skip_known && s->known))
                todo[ntodo++] = s;
    }

    sched_init();
    printf("nbbs_explore: planted bug %d\n", NBBS_PLANT_BUG);
    double t0 = now();
    bool ok = true;

    if (replay) {
        static uint8_t sched[EX_MAX_STEPS];
        unsigned slots[EX_MAX_THREADS];
        replay_t r = { sched, parse_schedule(replay, sched), prefix };
        if (seed >= 0)
            seed_slots(todo[0], (uint64_t)seed, slots);
        else
            dfs_slots(todo[0], slots);
        ex_run(todo[0], slots, replay_choose, &r, &res);
        ex_trace = false;
        printf("%s\n", res.failed ? res.msg : "replay: no failure");
        return res.failed != expect_fail; /* --expect-fail: a planted bug must fail here */
    }

    if (!dfs && !pct)
        dfs = pct = true;
    if (dfs)
        for (unsigned i = 0; i < ntodo && ok; i++)
            if (todo[i]->dfs || names)
                ok = run_dfs(todo[i], max_runs);
    if (pct && ok && expect_fail) {
        /* Hunting a planted bug: seed after seed, every scenario, first failure wins. */
        uint64_t s0 = seed >= 0 ? (uint64_t)seed : 1;
        double tp = now();
        unsigned long runs = 0;
        for (uint64_t sd = s0; ok && sd - s0 < seeds && now() - tp < budget; sd++)
            for (unsigned i = 0; i < ntodo && ok; i++, runs++) {
                ok = run_pct(todo[i], sd, 1, budget);
                if (!ok)
                    found_after = runs + 1, found_at = now() - tp;
            }
    } else if (pct && ok) {
        /* Each scenario in turn gets its share of the budget. */
        double slice = budget / ntodo;
        uint64_t s0 = seed >= 0 ? (uint64_t)seed : 1;
        for (unsigned i = 0; i < ntodo && ok; i++)
            ok = run_pct(todo[i], s0, seeds, slice);
    }
    double dt = now() - t0;
    if (expect_fail) {
        if (!ok && found)
            printf("planted bug %d: FOUND after %lu runs, %.3f s into the search (%.2f s in all)\n",
                   NBBS_PLANT_BUG, found_after, found_at, dt);
        else
            printf("planted bug %d: NOT found in %.1f s\n", NBBS_PLANT_BUG, dt);
        return !ok && found ? 0 : 1;
    }
    printf("%s in %.1f s\n", ok ? "all interleavings explored passed" : "FAILED", dt);
    return ok ? 0 : 1;
}
