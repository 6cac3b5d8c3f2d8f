/*
 * nbbs_testutil.h - the small things tests and benchmarks both need, once:
 * a fake arena base, a cheap deterministic random generator, and
 * cache-line (or any power-of-two) aligned allocation.
 *
 * Header-only and static inline, so a test, a benchmark or the explorer
 * includes it without linking anything. Not part of the public API.
 */
#ifndef NBBS_TESTUTIL_H
#define NBBS_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>

/* An address range the buddy allocators manage but nobody maps or touches:
 * 2^44 is far above what a process maps on x86-64 and aarch64 Linux, and
 * aligned for any arena the tests and benchmarks build (up to 16 TiB). */
#define NBBS_TU_FAKE_BASE ((char *)(uintptr_t)0x100000000000ull)

/* Cache line size assumed for padding shared counters and locks apart. */
#define NBBS_TU_CACHE_LINE 64u

/* xorshift64* (Marsaglia; Vigna's multiplier): a few cycles, good enough
 * for choosing sizes, orders and victims; *state must not be 0. */
static inline uint64_t nbbs_tu_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n), n > 0 and small (the modulo bias is below 2^-40 for
 * n < 2^24). */
static inline uint64_t nbbs_tu_rand_below(uint64_t *state, uint64_t n)
{
    return nbbs_tu_rand(state) % n;
}

/* A well-spread, non-zero seed from any number (splitmix64's finaliser), so
 * that seeds 1, 2, 3 ... of consecutive threads give unrelated streams. */
static inline uint64_t nbbs_tu_seed(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return (x ^ (x >> 31)) | 1;
}

/* aligned_alloc with the size rounded up to a multiple of align (C11 asks
 * for it); align is a power of two. Free with free(). NULL on failure. */
static inline void *nbbs_tu_aligned_alloc(size_t align, size_t size)
{
    size_t rounded = (size + align - 1) & ~(align - 1);
    return aligned_alloc(align, rounded ? rounded : align);
}

#endif /* NBBS_TESTUTIL_H */
