/*
 * fuzz_nbm.c - nbmalloc's API driven by a byte string, against a model of
 * the live objects.
 *
 * One operation per 4 bytes: malloc, calloc, realloc, aligned_alloc,
 * posix_memalign (good and bad alignments), reallocarray with overflow, free.
 * Every object is filled with a pattern of its own; the pattern is checked
 * before the object is freed or reallocated (nothing else wrote into it: no
 * overlap between live objects), usable_size must cover the request, calloc
 * must zero, alignment must hold. Invalid frees are not fed: nbmalloc aborts
 * on them by design (nbmalloc.h), which the nbmalloc tests cover. Sizes span
 * the small classes, medium buddy blocks and (rarely) huge mappings.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nbmalloc.h"

#define MAX_LIVE 64
#define CHECKED 256 /* bytes checked at each end of an object */

typedef struct obj {
    unsigned char *p;
    size_t         size;
    unsigned char  tag;
} obj_t;

static obj_t live[MAX_LIVE];
static unsigned nlive;

#define FAIL() __builtin_trap()

static size_t pick_size(const uint8_t *d)
{
    unsigned v = d[0] | (unsigned)d[1] << 8;
    switch (d[2] % 16) {
    case 15: return v % 3 == 0 ? NBM_MEDIUM_MAX + v : (size_t)v << 8;  /* huge, or up to 16 MiB */
    case 14: case 13: return NBM_SMALL_MAX - 64 + v % 4096;           /* around the class limit */
    case 12: case 11: return (size_t)v * 16;                          /* medium: up to 1 MiB */
    default: return v % 2048;                                         /* small */
    }
}

static void fill(obj_t *o)
{
    size_t n = o->size < CHECKED ? o->size : CHECKED;
    memset(o->p, o->tag, n);
    if (o->size > CHECKED)
        memset(o->p + o->size - n, o->tag, n);
}

/* The pattern at [from, from + n) of p. */
static void check_range(const unsigned char *p, size_t from, size_t n, unsigned char tag)
{
    for (size_t i = from; i < from + n; i++)
        if (p[i] != tag)
            FAIL();
}

/* Both patterned ends of a live object are intact. */
static void check(const obj_t *o)
{
    size_t n = o->size < CHECKED ? o->size : CHECKED;
    check_range(o->p, 0, n, o->tag);
    check_range(o->p, o->size - n, n, o->tag);
}

static void add(void *p, size_t size, size_t align, unsigned char tag)
{
    if (!p) {
        if (size < ((size_t)1 << 40))
            FAIL(); /* the machine has the memory for any size we ask */
        return;
    }
    if (((uintptr_t)p & (align - 1)) || nbm_usable_size(p) < size)
        FAIL();
    obj_t o = { p, size, tag };
    fill(&o);
    if (nlive == MAX_LIVE) {
        nbm_free(live[0].p);
        live[0] = live[--nlive];
    }
    live[nlive++] = o;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        const uint8_t *a = d + i + 1;
        unsigned char tag = (unsigned char)(i / 4 * 7 + 1);
        switch (d[i] % 9) {
        case 0: case 1: {
            size_t size = pick_size(a);
            add(nbm_malloc(size), size, NBM_MIN_ALIGN, tag);
            break;
        }
        case 2: {
            size_t count = a[0] % 64, size = pick_size(a) / 8;
            unsigned char *p = nbm_calloc(count, size);
            for (size_t k = 0; p && k < count * size && k < 4096; k++)
                if (p[k])
                    FAIL();
            add(p, count * size, NBM_MIN_ALIGN, tag);
            if (nbm_calloc(SIZE_MAX / 2, 3) != NULL)
                FAIL(); /* overflow */
            break;
        }
        case 3: { /* realloc: keeps the old contents up to the smaller size */
            if (!nlive)
                break;
            obj_t *o = &live[a[2] % nlive];
            size_t size = pick_size(a);
            check(o);
            if (size == 0) {
                nbm_free(o->p); /* realloc(p, 0) frees: tested once below */
                *o = live[--nlive];
                break;
            }
            unsigned char *p = nbm_realloc(o->p, size);
            if (!p)
                FAIL();
            size_t kept = o->size < size ? o->size : size, n = kept < CHECKED ? kept : CHECKED;
            check_range(p, 0, n, o->tag);
            if (size >= o->size)
                check_range(p, o->size - n, n, o->tag);
            o->p = p, o->size = size;
            if (nbm_usable_size(p) < size)
                FAIL();
            fill(o);
            break;
        }
        case 4: { /* aligned_alloc, any power of two up to 1 MiB */
            size_t align = (size_t)1 << (a[2] % 21), size = pick_size(a) % (1 << 20);
            add(nbm_aligned_alloc(align, size), size, align, tag);
            errno = 0;
            if (nbm_aligned_alloc(align * 3, 16) != NULL || errno != EINVAL)
                FAIL(); /* not a power of two */
            break;
        }
        case 5: { /* posix_memalign: good and bad alignments */
            void *p = (void *)&p, *keep = p;
            size_t align = (size_t)1 << (a[2] % 20);
            int rc = nbm_posix_memalign(&p, align, pick_size(a) % 65536);
            if (align < sizeof(void *)) {
                if (rc != EINVAL || p != keep)
                    FAIL();
            } else if (rc != 0) {
                FAIL();
            } else {
                add(p, pick_size(a) % 65536, align, tag);
            }
            break;
        }
        case 6: { /* reallocarray overflow leaves the object alone */
            if (!nlive)
                break;
            obj_t *o = &live[a[0] % nlive];
            errno = 0;
            if (nbm_reallocarray(o->p, SIZE_MAX / 4, 8) != NULL || errno != ENOMEM)
                FAIL();
            check(o);
            break;
        }
        case 7: case 8: { /* free */
            if (!nlive)
                break;
            obj_t *o = &live[a[0] % nlive];
            check(o);
            nbm_free(o->p);
            *o = live[--nlive];
            break;
        }
        }
    }
    nbm_free(NULL);
    void *z = nbm_realloc(NULL, 24);
    if (!z || nbm_realloc(z, 0) != NULL)
        FAIL();
    while (nlive) { /* each input starts with nothing live */
        obj_t *o = &live[--nlive];
        check(o);
        nbm_free(o->p);
    }
    return 0;
}
