/*
 * nbbs_atomic.h - the only place the back-end touches shared memory.
 *
 * Every load, CAS and RMW of a node word or index entry goes through one of
 * these helpers, so the memory order of each is stated once and every
 * operation can be observed. All orders are seq_cst: the node CAS that hands
 * out a block must be at least acquire and the store/RMW that releases it at
 * least release; nothing has been measured to gain from going below seq_cst
 * on x86-64 (a locked instruction either way), so we keep the simplest
 * argument.
 *
 * Observation hook: a build that defines NBBS_ATOMIC_HOOK calls
 *     void nbbs_atomic_hook(int op, const volatile void *addr, int phase);
 * before every operation (phase NBBS_HOOK_BEFORE: a scheduling point for the
 * interleaving explorer) and after every CAS/RMW (phase NBBS_HOOK_OK or
 * NBBS_HOOK_FAILED: for counting). The function is supplied by the test or
 * benchmark program, not by the core, which keeps no globals.
 */
#ifndef NBBS_ATOMIC_H
#define NBBS_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum { NBBS_OP_LOAD = 0, NBBS_OP_STORE = 1, NBBS_OP_CAS = 2, NBBS_OP_RMW = 3 };
enum { NBBS_HOOK_BEFORE = 0, NBBS_HOOK_OK = 1, NBBS_HOOK_FAILED = 2 };

#ifdef NBBS_ATOMIC_HOOK
void nbbs_atomic_hook(int op, const volatile void *addr, int phase);
#define NB_HOOK(op, addr, phase) nbbs_atomic_hook((op), (const volatile void *)(addr), (phase))
#else
#define NB_HOOK(op, addr, phase) ((void)0)
#endif

#define NB_ORDER memory_order_seq_cst

/* One set of helpers per word type: T is the C type, S the name suffix. */
#define NB_DEFINE_ATOMICS(T, S)                                                 \
    static inline T nb_load_##S(_Atomic T *p)                                   \
    {                                                                           \
        NB_HOOK(NBBS_OP_LOAD, p, NBBS_HOOK_BEFORE);                             \
        return atomic_load_explicit(p, NB_ORDER);                               \
    }                                                                           \
    static inline void nb_store_##S(_Atomic T *p, T v)                          \
    {                                                                           \
        NB_HOOK(NBBS_OP_STORE, p, NBBS_HOOK_BEFORE);                            \
        atomic_store_explicit(p, v, NB_ORDER);                                  \
        NB_HOOK(NBBS_OP_STORE, p, NBBS_HOOK_OK);                                \
    }                                                                           \
    /* On failure *old is refreshed with the current value. */                 \
    static inline bool nb_cas_##S(_Atomic T *p, T *old, T v)                    \
    {                                                                           \
        NB_HOOK(NBBS_OP_CAS, p, NBBS_HOOK_BEFORE);                              \
        bool ok = atomic_compare_exchange_strong_explicit(p, old, v, NB_ORDER,  \
                                                          NB_ORDER);            \
        NB_HOOK(NBBS_OP_CAS, p, ok ? NBBS_HOOK_OK : NBBS_HOOK_FAILED);          \
        return ok;                                                              \
    }                                                                           \
    static inline T nb_and_##S(_Atomic T *p, T v)                               \
    {                                                                           \
        NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_BEFORE);                              \
        T old = atomic_fetch_and_explicit(p, v, NB_ORDER);                      \
        NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_OK);                                  \
        return old;                                                             \
    }                                                                           \
    static inline T nb_xchg_##S(_Atomic T *p, T v)                              \
    {                                                                           \
        NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_BEFORE);                              \
        T old = atomic_exchange_explicit(p, v, NB_ORDER);                       \
        NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_OK);                                  \
        return old;                                                             \
    }

NB_DEFINE_ATOMICS(uint8_t, u8)
NB_DEFINE_ATOMICS(uint64_t, u64)

/* Initialisation only (no other thread can see the metadata yet): a relaxed
 * store, which the compiler will not fuse into a call to memset. */
#define nb_init_store(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

#endif /* NBBS_ATOMIC_H */
