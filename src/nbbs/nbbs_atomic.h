/*
 * nbbs_atomic.h - the only place the back-end touches shared memory.
 *
 * Every load, CAS and RMW of a node word or index entry goes through one of
 * these helpers, so the memory order of each is stated once and every
 * operation can be observed. Loads, CAS and RMW are seq_cst (on x86-64 a CAS
 * is a locked instruction whatever its order, so relaxing them gains
 * nothing). Two plain stores are release only (nb_store_rel), because a
 * seq_cst store costs a full barrier (~5 ns measured against ~0.2 ns): the
 * phase-2 store that frees a node whose slots fill its word (release is what
 * the next owner needs; every other thread interacts with that word through
 * RMWs, which read the latest value in modification order), and the index
 * entry written when an allocation succeeds (read only by the free of that
 * block, which the caller's hand-over of the pointer orders after it).
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

#include "nbbs_platform.h"

enum { NBBS_OP_LOAD = 0, NBBS_OP_STORE = 1, NBBS_OP_CAS = 2, NBBS_OP_RMW = 3 };
enum { NBBS_HOOK_BEFORE = 0, NBBS_HOOK_OK = 1, NBBS_HOOK_FAILED = 2 };

#ifdef NBBS_ATOMIC_HOOK
void nbbs_atomic_hook(int op, const volatile void *addr, int phase);
#define NB_HOOK(op, addr, phase) nbbs_atomic_hook((op), (const volatile void *)(addr), (phase))
#else
#define NB_HOOK(op, addr, phase) ((void)0)
#endif

#define NB_ORDER NBBS_MO_SEQ_CST

/* A store or an RMW of one word type T (name suffix S), observed by the hook.
 * The RMWs return the old value. */
#define NB_DEFINE_STORE(T, S, NAME, MO)                                         \
    static inline void NAME##_##S(NBBS_ATOMIC(T) *p, T v)                       \
    {                                                                           \
        NB_HOOK(NBBS_OP_STORE, p, NBBS_HOOK_BEFORE);                            \
        nbbs_atomic_store(p, v, MO);                                            \
        NB_HOOK(NBBS_OP_STORE, p, NBBS_HOOK_OK);                                \
    }
#define NB_DEFINE_RMW(T, S, NAME, OP)                                           \
    static inline T NAME##_##S(NBBS_ATOMIC(T) *p, T v)                          \
    {                                                                           \
        NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_BEFORE);                              \
        T old = OP(p, v, NB_ORDER);                                             \
        NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_OK);                                  \
        return old;                                                             \
    }

/* One set of helpers per word type: T is the C type, S the name suffix.
 * nb_store_rel: release only, for stores whose readers are RMWs on the same
 * word or are ordered by the caller's own hand-over of the block (argued at
 * each use); saves a locked instruction on x86-64 (measured ~5 ns each).
 * nb_cas: on failure *old is refreshed with the current value. nb_peek:
 * relaxed and not observed, for statistics and validation, which are exact
 * only with nothing in flight. */
#define NB_DEFINE_ATOMICS(T, S)                                                 \
    static inline T nb_load_##S(NBBS_ATOMIC(T) *p)                              \
    {                                                                           \
        NB_HOOK(NBBS_OP_LOAD, p, NBBS_HOOK_BEFORE);                             \
        return nbbs_atomic_load(p, NB_ORDER);                                   \
    }                                                                           \
    NB_DEFINE_STORE(T, S, nb_store, NB_ORDER)                                   \
    NB_DEFINE_STORE(T, S, nb_store_rel, NBBS_MO_RELEASE)                        \
    static inline bool nb_cas_##S(NBBS_ATOMIC(T) *p, T *old, T v)               \
    {                                                                           \
        NB_HOOK(NBBS_OP_CAS, p, NBBS_HOOK_BEFORE);                              \
        bool ok = nbbs_atomic_cas(p, old, v, NB_ORDER);                         \
        NB_HOOK(NBBS_OP_CAS, p, ok ? NBBS_HOOK_OK : NBBS_HOOK_FAILED);          \
        return ok;                                                              \
    }                                                                           \
    NB_DEFINE_RMW(T, S, nb_and, nbbs_atomic_fetch_and)                          \
    NB_DEFINE_RMW(T, S, nb_xchg, nbbs_atomic_xchg)                              \
    static inline T nb_peek_##S(const NBBS_ATOMIC(T) *p)                        \
    {                                                                           \
        return nbbs_atomic_load((NBBS_ATOMIC(T) *)p, NBBS_MO_RELAXED);          \
    }

NB_DEFINE_ATOMICS(uint8_t, u8)
NB_DEFINE_ATOMICS(uint64_t, u64)

/* Scan start hints: a heuristic only (any value in any order is correct,
 * the scan bounds it), so relaxed, and not observed by the hook. */
static inline uint64_t nb_hint_load(NBBS_ATOMIC(uint64_t) *p)
{
    return nbbs_atomic_load(p, NBBS_MO_RELAXED);
}
static inline void nb_hint_store(NBBS_ATOMIC(uint64_t) *p, uint64_t v)
{
    nbbs_atomic_store(p, v, NBBS_MO_RELAXED);
}

/* Frame-cache stacks (nbbs_cache.c): words written only by the cache's owner
 * and read by other threads only as hints (a block named there is taken only
 * by a CAS on its index byte, which decides), so relaxed. Observed, so the
 * explorer interleaves a thief's reads with the owner's pushes and pops. */
static inline uint64_t nb_own_load(NBBS_ATOMIC(uint64_t) *p)
{
    NB_HOOK(NBBS_OP_LOAD, p, NBBS_HOOK_BEFORE);
    return nbbs_atomic_load(p, NBBS_MO_RELAXED);
}
static inline void nb_own_store(NBBS_ATOMIC(uint64_t) *p, uint64_t v)
{
    NB_HOOK(NBBS_OP_STORE, p, NBBS_HOOK_BEFORE);
    nbbs_atomic_store(p, v, NBBS_MO_RELAXED);
    NB_HOOK(NBBS_OP_STORE, p, NBBS_HOOK_OK);
}

/* The head of an instance's list of frame caches: changed only by
 * nbbs_cache_init (a CAS), read on the pressure path of every allocation
 * that found the tree empty. seq_cst (a plain load on x86-64 and arm64) but
 * not observed, so the interleaving explorer's schedules of scenarios that
 * use no cache stay what they were. */
static inline uint64_t nb_list_load(NBBS_ATOMIC(uint64_t) *p)
{
    return nbbs_atomic_load(p, NBBS_MO_SEQ_CST);
}

/* The hole bitmap (nbbs__hole_mark in nbbs_internal.h): a placement
 * heuristic, so not observed by the hook (the explorer would only multiply
 * its interleavings by steps that cannot break safety), but seq_cst, which
 * is what makes it lossless. The OR and the AND run only when a bit changes. */
static inline uint64_t nb_hole_load(NBBS_ATOMIC(uint64_t) *p)
{
    return nbbs_atomic_load(p, NBBS_MO_SEQ_CST);
}
static inline void nb_hole_or(NBBS_ATOMIC(uint64_t) *p, uint64_t v)
{
    (void)nbbs_atomic_fetch_or(p, v, NBBS_MO_SEQ_CST);
}
static inline void nb_hole_and(NBBS_ATOMIC(uint64_t) *p, uint64_t v)
{
    (void)nbbs_atomic_fetch_and(p, v, NBBS_MO_SEQ_CST);
}

/* The free counts per group (nbbs_t.gfree): an upper bound on the leaves
 * of a group in free blocks, raised before a release starts and lowered
 * after a claim's climb succeeds, so a scan may pass by a group whose count
 * is below the size it looks for. seq_cst: a scan's load of a count must not
 * be ordered before the loads of the tree that came before it. */
static inline uint32_t nb_count_load(NBBS_ATOMIC(uint32_t) *p)
{
    NB_HOOK(NBBS_OP_LOAD, p, NBBS_HOOK_BEFORE);
    return nbbs_atomic_load(p, NBBS_MO_SEQ_CST);
}
static inline uint32_t nb_count_peek(const NBBS_ATOMIC(uint32_t) *p) /* validation */
{
    return nbbs_atomic_load((NBBS_ATOMIC(uint32_t) *)p, NBBS_MO_RELAXED);
}
static inline void nb_count_add(NBBS_ATOMIC(uint32_t) *p, uint32_t v)
{
    NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_BEFORE);
    (void)nbbs_atomic_fetch_add(p, v, NBBS_MO_SEQ_CST);
    NB_HOOK(NBBS_OP_RMW, p, NBBS_HOOK_OK);
}

/* Initialisation only (no other thread can see the metadata yet): a relaxed
 * store, which the compiler will not fuse into a call to memset. */
#define nb_init_store(p, v) nbbs_atomic_store((p), (v), NBBS_MO_RELAXED)

#endif /* NBBS_ATOMIC_H */
