/*
 * spinlock.h - the one global lock of the locked baselines.
 *
 * Test-and-test-and-set with a pause in the wait loop: waiters spin on a
 * shared read (no cache-line ping-pong while the lock is held) and take it
 * with one exchange. No back-off to the scheduler on purpose: the baselines
 * are the paper's "spin-lock based" allocators, and 8 threads on 2 cores
 * must show what spinning behind a preempted holder costs.
 */
#ifndef NBBS_BENCH_SPINLOCK_H
#define NBBS_BENCH_SPINLOCK_H

#include <stdatomic.h>
#include <stdbool.h>

/* The counting build (nbbs-bench-count) counts each exchange as one RMW, as
 * it counts the library's: the locked baselines' locked instructions then
 * stand beside the lock-free allocators' in the same table. */
#ifdef BENCH_COUNT_LOCKS
#include "nbbs_atomic.h"
#define BENCH_LOCK_COUNTED(l) nbbs_atomic_hook(NBBS_OP_RMW, &(l)->held, NBBS_HOOK_OK)
#else
#define BENCH_LOCK_COUNTED(l) ((void)0)
#endif

typedef struct bench_spinlock {
    _Alignas(64) atomic_bool held;
    char pad[64 - sizeof(atomic_bool)];
} bench_spinlock_t;

static inline void bench_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline void bench_spin_lock(bench_spinlock_t *l)
{
    for (;;) {
        bool held = atomic_exchange_explicit(&l->held, true, memory_order_acquire);
        BENCH_LOCK_COUNTED(l);
        if (!held)
            return;
        while (atomic_load_explicit(&l->held, memory_order_relaxed))
            bench_cpu_relax();
    }
}

static inline void bench_spin_unlock(bench_spinlock_t *l)
{
    atomic_store_explicit(&l->held, false, memory_order_release);
}

#endif /* NBBS_BENCH_SPINLOCK_H */
