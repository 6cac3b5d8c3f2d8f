/*
 * atomic.h - every shared word nbmalloc changes goes through these helpers.
 *
 * Orders. RMW and CAS are seq_cst: on x86-64 they are one locked instruction
 * whatever the order, and seq_cst keeps each hand-over argument one line
 * long (a batch pushed by one thread and popped by another: the push CAS
 * releases the batch contents, the pop CAS acquires them). Loads and stores
 * are relaxed only where the helper's name says so, and each caller states
 * why that is enough (typically: the value is published or consumed through
 * a seq_cst RMW on another word).
 */
#ifndef NBM_ATOMIC_H
#define NBM_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define NBM_SC memory_order_seq_cst
#define NBM_RLX memory_order_relaxed

/* On failure *old is refreshed with the current value. */
static inline bool nbm_cas_u64(_Atomic uint64_t *p, uint64_t *old, uint64_t v)
{
    return atomic_compare_exchange_weak_explicit(p, old, v, NBM_SC, NBM_SC);
}
static inline bool nbm_cas_uptr(_Atomic uintptr_t *p, uintptr_t *old, uintptr_t v)
{
    return atomic_compare_exchange_strong_explicit(p, old, v, NBM_SC, NBM_SC);
}
static inline bool nbm_cas_u32(_Atomic uint32_t *p, uint32_t *old, uint32_t v)
{
    return atomic_compare_exchange_strong_explicit(p, old, v, NBM_SC, NBM_SC);
}
static inline bool nbm_cas_u8(_Atomic uint8_t *p, uint8_t *old, uint8_t v)
{
    return atomic_compare_exchange_strong_explicit(p, old, v, NBM_SC, NBM_SC);
}
static inline uint64_t nbm_add_u64(_Atomic uint64_t *p, uint64_t v)
{
    return atomic_fetch_add_explicit(p, v, NBM_SC);
}
static inline uint32_t nbm_add_u32(_Atomic uint32_t *p, uint32_t v)
{
    return atomic_fetch_add_explicit(p, v, NBM_SC);
}
static inline uint64_t nbm_sub_u64(_Atomic uint64_t *p, uint64_t v)
{
    return atomic_fetch_sub_explicit(p, v, NBM_SC);
}
static inline uintptr_t nbm_xchg_uptr(_Atomic uintptr_t *p, uintptr_t v)
{
    return atomic_exchange_explicit(p, v, NBM_SC);
}
static inline uint8_t nbm_xchg_u8(_Atomic uint8_t *p, uint8_t v)
{
    return atomic_exchange_explicit(p, v, NBM_SC);
}

/* Plain loads and stores of shared words. */
static inline uint64_t nbm_load_u64(_Atomic uint64_t *p) { return atomic_load_explicit(p, NBM_SC); }
static inline uint32_t nbm_load_u32(_Atomic uint32_t *p) { return atomic_load_explicit(p, NBM_SC); }
static inline uintptr_t nbm_load_uptr(_Atomic uintptr_t *p) { return atomic_load_explicit(p, NBM_SC); }
static inline void nbm_store_u8(_Atomic uint8_t *p, uint8_t v) { atomic_store_explicit(p, v, NBM_SC); }
static inline void nbm_store_u32(_Atomic uint32_t *p, uint32_t v) { atomic_store_explicit(p, v, NBM_SC); }

static inline uint64_t nbm_load_u64_relaxed(_Atomic uint64_t *p) { return atomic_load_explicit(p, NBM_RLX); }
static inline uint32_t nbm_load_u32_relaxed(_Atomic uint32_t *p) { return atomic_load_explicit(p, NBM_RLX); }
static inline uintptr_t nbm_load_uptr_relaxed(_Atomic uintptr_t *p) { return atomic_load_explicit(p, NBM_RLX); }
static inline uint8_t nbm_load_u8_relaxed(_Atomic uint8_t *p) { return atomic_load_explicit(p, NBM_RLX); }
static inline void nbm_store_u32_relaxed(_Atomic uint32_t *p, uint32_t v) { atomic_store_explicit(p, v, NBM_RLX); }
static inline void nbm_store_uptr_relaxed(_Atomic uintptr_t *p, uintptr_t v) { atomic_store_explicit(p, v, NBM_RLX); }
static inline void nbm_store_u8_relaxed(_Atomic uint8_t *p, uint8_t v) { atomic_store_explicit(p, v, NBM_RLX); }
static inline void nbm_store_u64_relaxed(_Atomic uint64_t *p, uint64_t v) { atomic_store_explicit(p, v, NBM_RLX); }

/* Statistics counters: relaxed, nothing is ordered by them. */
static inline void nbm_stat_add(_Atomic uint64_t *p, uint64_t v) { atomic_fetch_add_explicit(p, v, NBM_RLX); }
static inline void nbm_stat_sub(_Atomic uint64_t *p, uint64_t v) { atomic_fetch_sub_explicit(p, v, NBM_RLX); }

#endif /* NBM_ATOMIC_H */
