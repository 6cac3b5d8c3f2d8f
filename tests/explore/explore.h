/*
 * explore.h - the interleaving explorer's two halves.
 *
 * sched.c runs 2 to 8 logical threads as coroutines in one OS thread. Every
 * atomic operation of the back-end (built with NBBS_ATOMIC_HOOK) and every
 * model update of the test is a scheduling point: the thread stops before it,
 * and the scheduler decides who performs the next step. A run is therefore a
 * pure function of the scenario, the threads' stack slots and the sequence of
 * choices (the schedule), which is what makes every failure replayable.
 *
 * model.c holds the scenarios (tiny trees, thread programs), executes the
 * programs, and checks the invariants after every step and at the end.
 */
#ifndef NBBS_EXPLORE_H
#define NBBS_EXPLORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nbbs.h"

#define EX_MAX_THREADS 8
#define EX_MAX_OPS 8
#define EX_MAX_STEPS 20000   /* per run: more means a livelock or an endless scan */
#define EX_OP_STEP_LIMIT 4000 /* atomic operations of one API call */
#define EX_STACK_SLOTS 16     /* stack slots a thread may run on (they set its scan start) */

/* Pseudo-operations, beyond NBBS_OP_LOAD .. NBBS_OP_RMW. */
enum { EX_OP_MODEL = 8, EX_OP_NONE = 9 };

typedef struct ex_pending {
    int                  op;   /* NBBS_OP_* or EX_OP_* */
    const volatile void *addr; /* word it touches */
} ex_pending_t;

/* ---- sched.c ------------------------------------------------------------ */

void sched_init(void);
/* Creates n threads running body(t) on the given stack slots and runs each to
 * its first scheduling point. */
void sched_begin(unsigned n, const unsigned *slots, void (*body)(int));
bool sched_done(int t);
ex_pending_t sched_pending(int t);
/* Lets thread t perform its pending operation and run to its next point. */
void sched_step(int t);
void sched_end(void);
/* From thread code: a scheduling point for a model update. */
void sched_point(int op, const volatile void *addr);
int  sched_self(void);
/* Accesses inside [lo, lo + len) are tracked per aligned 8 bytes (sched.c). */
void ex_alias_granules(const volatile void *lo, size_t len);
/* Records the first failure of the run (printf-style); the run stops at the
 * next scheduling point. */
void ex_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool ex_failed(void);
const char *ex_failure(void);
void ex_clear_failure(void);

/* ---- model.c ------------------------------------------------------------ */

typedef struct ex_scenario {
    const char   *name;
    const char   *what;
    nbbs_layout_t layout;
    unsigned      max_order;  /* tree depth */
    unsigned      ntrees;     /* arena = ntrees max-size blocks */
    const char   *pre;        /* blocks live before the threads start: "order@position ..." */
    const char   *prog[EX_MAX_THREADS]; /* per thread, see model.c */
    const char   *slots;      /* stack slot per thread for dfs (NULL: 0, 1, 2, ...) */
    bool          dfs;        /* small enough for exhaustive search */
    const char   *known;      /* the real core is known to fail here (why), or NULL; planted-bug
                               * hunts skip such scenarios, so what they find is the planted bug */
    unsigned      group_order; /* nbbs_config_t.group_order (0: the default, the whole tree here) */
} ex_scenario_t;

extern const ex_scenario_t ex_scenarios[];
const ex_scenario_t *ex_find(const char *name);
unsigned ex_nthreads(const ex_scenario_t *s);

/* Picks the next thread among the enabled ones (bit t set); -1 stops the run
 * without a verdict (a redundant interleaving). */
typedef int (*ex_chooser_t)(void *ctx, unsigned step, unsigned enabled);

typedef struct ex_result {
    bool     failed;
    bool     pruned;
    unsigned steps;
    char     msg[512];
    uint8_t  sched[EX_MAX_STEPS];
} ex_result_t;

extern bool ex_trace;
extern unsigned long ex_nulls; /* allocations that returned NULL, all runs */
extern bool ex_check_marks; /* check every live block's marks after every step (--no-marks: only overlaps) */ /* print every step of a run (with --replay --trace) */
void ex_run(const ex_scenario_t *s, const unsigned *slots, ex_chooser_t choose, void *ctx,
            ex_result_t *res);

#endif
