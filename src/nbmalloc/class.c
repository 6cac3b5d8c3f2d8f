/*
 * class.c - the size classes: sizes, chunk (page) sizes, batch sizes, and
 * the constants of the one-multiply offset check.
 *
 * Small classes (NBM_NSMALL, up to NBM_SMALL_MAX = 16 KiB): 16..128 in steps
 * of 16, then four per power of two (p*5/4, p*6/4, p*7/4, 2p): at most 25 %
 * internal fragmentation above 128 bytes. Their pages are 64 KiB, or 128 KiB
 * where 8 objects need it.
 *
 * Large classes (above 16 KiB up to NBM_LARGE_MAX = 128 KiB): eight per power
 * of two (p*9/8 .. 2p), so a request gets at most 1/8 more than it asked
 * for. A large class's page is the smallest power of two (at least 64 KiB)
 * whose objects fill 7/8 of it, up to 256 KiB: 20 KiB objects 3 to a 64 KiB
 * page, 18 KiB ones 7 to 128 KiB, 22 KiB ones 11 to 256 KiB, 88 KiB ones 2
 * to 256 KiB (69 %). Above 128 KiB an object would have a page of its
 * own, as a medium block does: no class there (docs/nbmalloc.md). The page
 * tail past the last object is never touched: it costs address space, not
 * memory. Pages are capped because a heap's
 * page of a class strands its freed objects until the page empties: with
 * 7/8 pages for every class (11 objects of 704 KiB in 8 MiB), a storm of 8
 * threads of 16 B..1 MiB requests peaked at 2.2x the resident memory and
 * the page faults of power-of-two blocks; capped at 256 KiB, at their level
 * (docs/nbmalloc.md).
 *
 * Every class is a multiple of 16, so every object is 16-aligned, and the
 * powers of two among them serve aligned requests (a chunk is aligned to its
 * size, so an object of size 2^k sits on a 2^k boundary).
 */
#include "internal.h"


nbm_class_t nbm__classes[NBM_NCLASSES];
uint16_t nbm__bin_of_small[NBM_FAST_MAX / 16 + 1];

static uint32_t class_size(unsigned c)
{
    if (c < 8)
        return 16u * (c + 1);
    if (c >= NBM_NSMALL) { /* eighths of (2^b, 2^(b+1)], from 16 KiB */
        unsigned b = 14 + (c - NBM_NSMALL) / 8, k = (c - NBM_NSMALL) % 8;
        return (1u << b) + (k + 1) * (1u << (b - 3));
    }
    unsigned b = 7 + (c - 8) / 4, k = (c - 8) % 4; /* (2^b, 2^(b+1)] */
    return (1u << b) + (k + 1) * (1u << (b - 2));
}

/* The page of a class: at least 64 KiB (one class-map unit); a small class
 * fits 8 objects; a large one fills 7/8 of it, or is NBM_LARGE_PAGE (which
 * holds at least one object of the largest class, NBM_LARGE_MAX). */
#define NBM_LARGE_PAGE ((uint32_t)256 << 10)
_Static_assert(NBM_LARGE_MAX <= NBM_LARGE_PAGE, "a large page holds an object of every class");
_Static_assert(NBM_LARGE_PAGE / 16 < NBM_PAGE_OFF, "a page's object counts (used, left) fit 15 bits: NBM_PAGE_OFF is above");
_Static_assert(NBM_LARGE_PAGE / 16 < (uint64_t)1 << (32 - NBM_UNIT_CARVED_SHIFT), "a page's carved count fits its unit word's bits");
static uint32_t chunk_size(unsigned c, uint32_t s)
{
    uint32_t chunk = (uint32_t)1 << NBM_UNIT_SHIFT;
    if (c < NBM_NSMALL) {
        while (chunk < 8 * s)
            chunk <<= 1;
    } else {
        while ((uint64_t)(chunk / s) * s * 8 < (uint64_t)chunk * 7 && chunk < NBM_LARGE_PAGE)
            chunk <<= 1;
    }
    return chunk;
}

/* Inverse of an odd d modulo 2^32 (Newton: each step doubles the bits). */
static uint32_t inverse(uint32_t d)
{
    uint32_t x = d;
    for (int i = 0; i < 5; i++)
        x *= 2 - d * x;
    return x;
}

void nbm__classes_init(void)
{
    for (unsigned c = 0; c < NBM_NCLASSES; c++) {
        nbm_class_t *k = &nbm__classes[c];
        uint32_t s = class_size(c);
        k->size = s;
        uint32_t chunk = chunk_size(c, s);
        if (c < NBM_NSMALL && (unsigned)__builtin_ctz(chunk) - NBM_PAGE_SHIFT >= NBM_SHARED_ORDER)
            nbm__fatal("internal error: a small class's page beyond the spares, size", (void *)(uintptr_t)s);
        k->chunk = chunk;
        k->chunk_mask = chunk - 1;
        uint32_t batch = 16384 / s;
        k->batch = batch < 4 ? 4 : batch > 64 ? 64 : batch;
        k->shift = (uint32_t)__builtin_ctz(s);
        k->cap = chunk / s;
        uint32_t odd = s >> k->shift;
        k->inv = inverse(odd);
        k->lim = UINT32_MAX / odd;
    }
    for (unsigned i = 0; i <= NBM_FAST_MAX / 16; i++) {
        size_t n = i == 0 ? 1 : (size_t)i * 16;
        unsigned c = n <= 128 ? (unsigned)((n + 15) / 16 - 1) : nbm__class_of_large(n);
        nbm__bin_of_small[i] = (uint16_t)((c + 1) * sizeof(nbm_bin_t));
    }
}
