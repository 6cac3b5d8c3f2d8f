/*
 * nbbs_platform.h - everything the back-end core takes from its environment:
 * fixed-width types, limits, atomics, assertions and "which CPU is running".
 * No other file of the core includes a system header.
 *
 * Three branches, chosen at compile time:
 *  - NBBS_PLATFORM_HEADER defined (e.g. -DNBBS_PLATFORM_HEADER='"my_rtos.h"'):
 *    the user's header supplies the whole vocabulary below (an RTOS, a
 *    hypervisor). Use the __KERNEL__ branch as the template.
 *  - __KERNEL__ (Linux, Kbuild compiles with -nostdinc): types and limits from
 *    <linux/types.h> and <linux/limits.h>, atomics on plain integers through
 *    the compiler's __atomic builtins (what the kernel's own atomics compile
 *    to on x86-64 and arm64), assertions as BUG_ON, the CPU from
 *    raw_smp_processor_id().
 *  - otherwise (hosted or -ffreestanding): the C11 headers that a
 *    freestanding implementation must provide, <stdatomic.h> included.
 *
 * The vocabulary:
 *   NBBS_ATOMIC(T)                       an atomically accessed T
 *   nbbs_atomic_load(p, mo)              and store, cas (strong; on failure
 *   nbbs_atomic_store(p, v, mo)          *old gets the current value),
 *   nbbs_atomic_cas(p, old, v, mo)       fetch_and, exchange, fence
 *   nbbs_atomic_fetch_and(p, v, mo)      and fetch_or
 *   nbbs_atomic_xchg(p, v, mo)
 *   nbbs_atomic_fence(mo)
 *   NBBS_MO_RELAXED, NBBS_MO_RELEASE, NBBS_MO_SEQ_CST
 *   NBBS_ASSERT(x)                       checked only when NBBS_DEBUG is defined
 *   NBBS_CPU_ID()                        optional: the running CPU's number;
 *                                        without it, scan hints are picked by
 *                                        a hash of the caller's stack address
 */
#ifndef NBBS_PLATFORM_H
#define NBBS_PLATFORM_H

#if defined(NBBS_PLATFORM_HEADER)
#include NBBS_PLATFORM_HEADER

#elif defined(__KERNEL__)
#include <linux/bug.h>
#include <linux/limits.h>
#include <linux/smp.h>
#include <linux/types.h>

#define NBBS_ATOMIC(T) T
#define NBBS_MO_RELAXED __ATOMIC_RELAXED
#define NBBS_MO_RELEASE __ATOMIC_RELEASE
#define NBBS_MO_SEQ_CST __ATOMIC_SEQ_CST
#define nbbs_atomic_load(p, mo) __atomic_load_n((p), (mo))
#define nbbs_atomic_store(p, v, mo) __atomic_store_n((p), (v), (mo))
#define nbbs_atomic_cas(p, old, v, mo) __atomic_compare_exchange_n((p), (old), (v), 0, (mo), (mo))
#define nbbs_atomic_fetch_and(p, v, mo) __atomic_fetch_and((p), (v), (mo))
#define nbbs_atomic_fetch_or(p, v, mo) __atomic_fetch_or((p), (v), (mo))
#define nbbs_atomic_fetch_add(p, v, mo) __atomic_fetch_add((p), (v), (mo))
#define nbbs_atomic_xchg(p, v, mo) __atomic_exchange_n((p), (v), (mo))
#define nbbs_atomic_fence(mo) __atomic_thread_fence(mo)
#define NBBS_CPU_ID() raw_smp_processor_id()
#ifdef NBBS_DEBUG
#define NBBS_ASSERT(x) BUG_ON(!(x))
#endif
#ifndef UINT64_C
#define UINT64_C(c) c##ULL
#endif
#ifndef UINT64_MAX
#define UINT64_MAX U64_MAX
#endif
#ifndef INT32_MAX
#define INT32_MAX S32_MAX
#endif

#else
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBBS_ATOMIC(T) _Atomic T
#define NBBS_MO_RELAXED memory_order_relaxed
#define NBBS_MO_RELEASE memory_order_release
#define NBBS_MO_SEQ_CST memory_order_seq_cst
#define nbbs_atomic_load(p, mo) atomic_load_explicit((p), (mo))
#define nbbs_atomic_store(p, v, mo) atomic_store_explicit((p), (v), (mo))
#define nbbs_atomic_cas(p, old, v, mo) atomic_compare_exchange_strong_explicit((p), (old), (v), (mo), (mo))
#define nbbs_atomic_fetch_and(p, v, mo) atomic_fetch_and_explicit((p), (v), (mo))
#define nbbs_atomic_fetch_or(p, v, mo) atomic_fetch_or_explicit((p), (v), (mo))
#define nbbs_atomic_fetch_add(p, v, mo) atomic_fetch_add_explicit((p), (v), (mo))
#define nbbs_atomic_xchg(p, v, mo) atomic_exchange_explicit((p), (v), (mo))
#define nbbs_atomic_fence(mo) atomic_thread_fence(mo)
#ifdef NBBS_DEBUG
/* A trap, not assert(): the core has no libc. Tests and debug builds only. */
#define NBBS_ASSERT(x) ((x) ? (void)0 : __builtin_trap())
#endif
#endif

#ifndef NBBS_ASSERT
#define NBBS_ASSERT(x) ((void)sizeof((x) ? 1 : 0)) /* not evaluated */
#endif

#endif /* NBBS_PLATFORM_H */
