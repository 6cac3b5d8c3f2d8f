/*
 * count_hook.c - the counting build's atomic hook (nbbs-bench-count only).
 *
 * nbbs_hooked calls nbbs_atomic_hook around every atomic operation of the
 * core. Counting in thread-local variables keeps the hook off shared cache
 * lines, so the counts do not change the contention they count (the hook
 * still slows every operation down: use this build for counts, never times).
 */
#include "bench.h"
#include "nbbs_atomic.h"

const int bench_counting = 1;

static _Thread_local bench_atomics_t counts;

void nbbs_atomic_hook(int op, const volatile void *addr, int phase)
{
    (void)addr;
    if (phase == NBBS_HOOK_BEFORE) {
        if (op == NBBS_OP_LOAD)
            counts.loads++;
        else if (op == NBBS_OP_STORE)
            counts.stores++;
        return;
    }
    if (op == NBBS_OP_CAS) {
        counts.cas++;
        if (phase == NBBS_HOOK_FAILED)
            counts.cas_failed++;
    } else if (op == NBBS_OP_RMW) {
        counts.rmw++;
    }
}

void bench_atomics_read(bench_atomics_t *out)
{
    *out = counts;
}
