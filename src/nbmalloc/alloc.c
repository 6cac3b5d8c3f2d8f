/*
 * alloc.c - the nbm_* allocation entry points and their generic paths.
 */
#include <errno.h>
#include <string.h>

#include "fast.h"

#define NBM_ZERO_LAZY ((size_t)256 << 10) /* calloc: one mincore is small next to this memset */

/* A medium block or a huge mapping; when none can be had, what the heaps and
 * caches hold for one use is returned (nbm__recover) and the request tried
 * once more. */
static void *medium(size_t n, size_t align, bool *fresh)
{
    nbm_tcache_t *tc = nbm__tcache_get();
    nbm_hole_t hole;
    /* nbm__thr: tc's record for the layers below, or NULL with it. */
    char *p = nbm__medium_alloc(n, align, fresh, nbm__thr, &hole);
    if (NBM_UNLIKELY(!p) && nbm__recover()) {
        tc = nbm__tcache_get();
        p = nbm__medium_alloc(n, align, fresh, nbm__thr, &hole);
    }
    if (p && hole.len) {
        /* Resident free memory first, before the request faults in new:
         * the heap's empty pages (with those its grown lists held), then
         * cached medium blocks. */
        if (tc)
            nbm__bins_shed(tc);
        size_t got = tc ? nbm__spares_fill(tc, p, hole.off, hole.len) : 0;
        if (hole.len - got >= NBM_MOVE_CACHED_MIN)
            got += nbm__medium_fill(p, hole.off + got, hole.len - got);
        if (got)
            *fresh = false;
    }
    return p;
}

static void *huge(size_t n, size_t align)
{
    void *p = nbm__huge_alloc(n, align);
    if (NBM_UNLIKELY(!p) && nbm__recover())
        p = nbm__huge_alloc(n, align);
    return p;
}

void *nbm__malloc_refill(size_t n, nbm_bin_t *bin)
{
    void *p = nbm__small_refill(bin);
    if (NBM_LIKELY(p != NULL))
        return p;
    return nbm__malloc_generic(n); /* tries once more, sets errno */
}

/* Everything the inline fast path does not handle: a size above the table
 * (large classes among them), an empty bin, a thread without a cache yet,
 * medium and huge sizes. */
void *nbm__malloc_generic(size_t n)
{
    void *p;
    nbm__init(); /* the class tables too: a preloaded malloc may be called
                    from another library's constructor before ours ran */
    if (n <= NBM_LARGE_MAX) {
        p = nbm__small_alloc_generic(nbm__class_of(n));
        bool fresh;
        if (NBM_UNLIKELY(!p) && n > NBM_SMALL_MAX) /* no page of the class (up to 256 KiB): a block that just fits */
            p = medium(n, 0, &fresh);
    } else if (n <= NBM_MEDIUM_MAX) {
        bool fresh;
        p = medium(n, 0, &fresh);
    } else {
        p = huge(n, 0);
    }
    if (NBM_UNLIKELY(!p))
        errno = ENOMEM;
    return p;
}

/* align is a power of two > NBM_MIN_ALIGN. */
void *nbm__aligned_generic(size_t align, size_t n)
{
    size_t need = n > align ? n : align;
    void *p;
    if (need <= NBM_SMALL_MAX) {
        /* The power-of-two class >= need: its objects sit on multiples of
         * their size inside a chunk aligned to the chunk size. */
        size_t s = (size_t)1 << (64 - __builtin_clzll(need - 1));
        return nbm__malloc_fast(s);
    }
    nbm__init();
    if (need <= NBM_MEDIUM_MAX) {
        bool fresh;
        p = medium(n, align, &fresh);
    } else {
        p = huge(n, align);
    }
    if (NBM_UNLIKELY(!p))
        errno = ENOMEM;
    return p;
}

void *nbm__calloc(size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    if (NBM_LIKELY(n <= NBM_LARGE_MAX)) { /* the size classes: objects are reused dirty */
        _Static_assert(NBM_LARGE_MAX < NBM_ZERO_LAZY, "class objects are zeroed by memset");
        void *p = nbm__malloc_fast(n);
        if (p)
            memset(p, 0, n);
        return p;
    }
    nbm__init();
    void *p;
    bool fresh = true; /* huge mappings are fresh */
    if (n <= NBM_MEDIUM_MAX)
        p = medium(n, 0, &fresh);
    else
        p = huge(n, 0);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    /* A reused block: below NBM_ZERO_LAZY a memset; above, what its last
     * user never touched is not made resident by the zeroing. */
    if (!fresh && n < NBM_ZERO_LAZY)
        memset(p, 0, n);
    else if (!fresh)
        nbm__os_zero(p, n);
    return p;
}

void *nbm__realloc(void *p, size_t n)
{
    if (!p)
        return nbm__malloc_fast(n);
    if (n == 0) {
        nbm__free_generic(p);
        return NULL;
    }
    uintptr_t owner = nbm__owner((uintptr_t)p);
    if (nbm__map_is_huge(owner)) { /* a live huge mapping: mremap */
        void *q = nbm__huge_realloc(owner, p, n);
        if (q)
            return q;
    }
    size_t us = nbm__usable(p, "realloc(): invalid pointer", "realloc(): freed pointer");
    if (n <= us && n >= us / 2)
        return p; /* in place: fits, and shrinking would free less than half */
    void *q = nbm__malloc_fast(n);
    if (!q)
        return NULL; /* p is left untouched, as C requires */
    memcpy(q, p, n < us ? n : us);
    nbm__free_generic(p);
    return q;
}

int nbm__posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    void *p = align <= NBM_MIN_ALIGN ? nbm__malloc_fast(n) : nbm__aligned_generic(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

/* --- public API -------------------------------------------------------------- */

void *nbm_malloc(size_t size) { return nbm__malloc_fast(size); }
void *nbm_calloc(size_t count, size_t size) { return nbm__calloc(count, size); }
void *nbm_realloc(void *p, size_t size) { return nbm__realloc(p, size); }

void *nbm_reallocarray(void *p, size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return nbm__realloc(p, n);
}

void *nbm_aligned_alloc(size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return align <= NBM_MIN_ALIGN ? nbm__malloc_fast(size) : nbm__aligned_generic(align, size);
}

int nbm_posix_memalign(void **out, size_t align, size_t size)
{
    return nbm__posix_memalign(out, align, size);
}

void *nbm_valloc(size_t size) { return nbm__aligned_generic(NBM_PAGE, size); }

void *nbm_pvalloc(size_t size)
{
    if (size > SIZE_MAX - NBM_PAGE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t n = (size + NBM_PAGE - 1) & ~(NBM_PAGE - 1);
    return nbm__aligned_generic(NBM_PAGE, n ? n : NBM_PAGE);
}
