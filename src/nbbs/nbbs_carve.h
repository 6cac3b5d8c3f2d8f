/*
 * nbbs_carve.h - carved blocks (bulk refill of the frame caches): a block of
 * NBBS_CARVE_ORDER that the tree keeps as one live block while its 8 index
 * bytes, read and changed as one aligned 64-bit word, describe its frames.
 * Shared by nbbs_cache.c (refill, drain, harvest) and nbbs_carve.c (merge,
 * take under pressure, free). Private to the back-end.
 */
#ifndef NBBS_CARVE_H
#define NBBS_CARVE_H

#include "nbbs_atomic.h"
#include "nbbs_internal.h"

/* The address of a leaf of the instance. */
static inline void *addr_of(const nbbs_t *b, uint64_t leaf)
{
    return (void *)(b->base + ((uintptr_t)leaf << b->min_shift));
}

/* The 8 index bytes of the carved block that starts at leaf g0 (a multiple
 * of 8), as one 64-bit word; and that word's bytes in memory order (a union
 * reads them the same way on either byte order). */
typedef union {
    uint64_t w;
    uint8_t  by[8];
} carve_word_t;

#define CARVE_LEAVES (1u << NBBS_CARVE_ORDER)
#define BYTES_HI UINT64_C(0x8080808080808080)

static inline NBBS_ATOMIC(uint64_t) *carve_word(const nbbs_t *b, uint64_t g0)
{
    return (NBBS_ATOMIC(uint64_t) *)(void *)&b->index[g0];
}

/* Every frame of the carved word x is free (and x is a carved block). Every
 * nonzero byte of a carved word starts a frame and has CARVED (bit 6); a
 * live one lacks CACHED (bit 7). So: no byte with bit 6 set and bit 7
 * clear. */
static inline bool carve_all_free(carve_word_t x)
{
    return (x.by[0] & NBBS_IDX_CARVED) && !((x.w << 1) & ~x.w & BYTES_HI);
}

/* Can this instance carve at all: a block of the carve order exists and the
 * index bytes of each carved block are one aligned word. */
static inline bool can_carve(const nbbs_t *b)
{
    return b->max_order >= NBBS_CARVE_ORDER && ((uintptr_t)b->index & 7u) == 0;
}

/* The bytes of x that are free frames (CARVED and CACHED both set): bit 7
 * of each such byte set in the word, the rest clear. */
static inline uint64_t carve_free_bytes(carve_word_t x)
{
    return x.w & (x.w << 1) & BYTES_HI;
}

/* Some byte of x is a free frame. */
static inline bool carve_any_free(carve_word_t x)
{
    return carve_free_bytes(x) != 0;
}

/* The bytes of x equal to v: bit 7 of each such byte set in the word, the
 * rest clear (exact: no carry crosses a byte). One word operation instead of
 * a compare and a branch per byte, which the refills that name a block's
 * free frames mispredicted. */
static inline uint64_t carve_eq(carve_word_t x, uint8_t v)
{
    uint64_t y = x.w ^ (UINT64_C(0x0101010101010101) * v);
    return ~(((y & ~BYTES_HI) + ~BYTES_HI) | y) & BYTES_HI;
}

/* The highest byte index (x.by[j]) that mask m (from carve_eq) names; takes
 * it out of m. m must not be 0. Byte j of the union is bits 8j..8j+7 of the
 * word on a little-endian machine, bits 56-8j.. on a big-endian one. */
static inline unsigned carve_pop_high(uint64_t *m)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    unsigned bit = (unsigned)__builtin_ctzll(*m);
    *m &= *m - 1;
    return 7u - (bit >> 3);
#else
    unsigned bit = 63u - (unsigned)__builtin_clzll(*m);
    *m &= ~(UINT64_C(1) << bit);
    return bit >> 3;
#endif
}

/* The stray bitmap (b->strays): a bit per block of NBBS_CARVE_ORDER, set
 * when a carved block there is left with free frames that no cache's stack
 * or ring names (a drain without an owner or with its ring full, a free of
 * a carved frame through nbbs_free, the halves a take under pressure split
 * off). A harvest visits only the blocks whose bit is set, clearing each
 * bit before it reads the block's word. Lossless as the hole bitmap is
 * (nbbs__hole_mark): the marker made the frame free (a seq_cst CAS on the
 * word) before its seq_cst load of the bit, and a harvester clears the bit
 * (seq_cst RMW) before its seq_cst load of the word; so either the marker's
 * load follows the clear and sets the bit again, or the harvester's load
 * follows the frame's free and sees it. A stale bit costs one load and one
 * clear. A heuristic for reuse only: under pressure nbbs__carve_take reads
 * every carved word, marked or not, so NULL does not depend on it. */
static inline void stray_mark(const nbbs_t *b, uint64_t g0)
{
    uint64_t g = g0 >> NBBS_CARVE_ORDER;
    NBBS_ATOMIC(uint64_t) *w = &b->strays[g >> 6];
    uint64_t bit = UINT64_C(1) << (g & 63);
    if (!(nb_hole_load(w) & bit))
        nb_hole_or(w, bit);
}

/* The carved block at g0 goes back to the tree if all its frames are free;
 * returns the frames that went back with it (0: it stays). */
unsigned nbbs__carve_merge(nbbs_t *b, uint64_t g0, bool covered);

/* A region of this order in the carved block at g0 (a free frame of that
 * order, one split off a larger free frame, or free frames that fill it),
 * taken with one CAS on the block's word, or NULL. */
void *nbbs__carve_take_at(nbbs_t *b, uint64_t g0, unsigned order);

/* Under pressure: a free frame of this order in any carved block, or NULL. */
void *nbbs__carve_take(nbbs_t *b, unsigned order);

/* As nbbs__carve_take, in the carved blocks whose stray bit is set only
 * (one pass over the bitmap; bits of blocks with no free frame cleared). */
void *nbbs__carve_take_stray(nbbs_t *b, unsigned order);

/* Names up to max free frames of this order found in carved blocks whose
 * stray bit is set in s[0..]; *looked: carved blocks whose bits it looked
 * at (all of them when it names fewer than max). */
uint64_t nbbs__carve_harvest(nbbs_t *b, NBBS_ATOMIC(uint64_t) *s, unsigned order, uint64_t max, uint64_t *looked);

#endif /* NBBS_CARVE_H */
