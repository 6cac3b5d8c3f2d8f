/*
 * class.c - the size classes: sizes, chunk sizes, batch sizes, and the
 * constants of the one-multiply offset check.
 *
 * Classes: 16..128 in steps of 16, then four per power of two (p*5/4, p*6/4,
 * p*7/4, 2p) up to 16 KiB: at most 25% internal fragmentation above 128
 * bytes. Every class is a multiple of 16, so every object is 16-aligned, and
 * the powers of two among them serve aligned requests (a chunk is aligned to
 * its size, so an object of size 2^k sits on a 2^k boundary).
 */
#include "internal.h"

nbm_class_t nbm__classes[NBM_NCLASSES];
uint8_t nbm__class_of_small[NBM_FAST_MAX / 16 + 1];

static uint32_t class_size(unsigned c)
{
    if (c < 8)
        return 16u * (c + 1);
    unsigned b = 7 + (c - 8) / 4, k = (c - 8) % 4; /* (2^b, 2^(b+1)] */
    return (1u << b) + (k + 1) * (1u << (b - 2));
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
        /* At least 8 objects per chunk, at least 64 KiB (one class-map unit). */
        uint32_t chunk = (uint32_t)1 << NBM_UNIT_SHIFT;
        while (chunk < 8 * s)
            chunk <<= 1;
        k->chunk = chunk;
        k->chunk_mask = chunk - 1;
        uint32_t batch = 16384 / s;
        k->batch = batch < 4 ? 4 : batch > 64 ? 64 : batch;
        k->shift = (uint32_t)__builtin_ctz(s);
        k->low_mask = (1u << k->shift) - 1;
        uint32_t odd = s >> k->shift;
        k->inv = inverse(odd);
        k->lim = UINT32_MAX / odd;
    }
    for (unsigned i = 0; i <= NBM_FAST_MAX / 16; i++) {
        size_t n = i == 0 ? 1 : (size_t)i * 16;
        unsigned c = n <= 128 ? (unsigned)((n + 15) / 16 - 1) : nbm__class_of_large(n);
        nbm__class_of_small[i] = (uint8_t)c;
    }
}
