/*
 * override.c - the C allocation interface, for libnbmalloc.so only.
 *
 * Each symbol inlines the fast path (internal.h), so malloc and free cost a
 * call into the library and nothing more. Built only into the shared library:
 * the static library exposes just the nbm_* API.
 */
#define _GNU_SOURCE
#include <errno.h>

#include "fast.h"

#define NBM_OVERRIDE __attribute__((visibility("default")))
/* malloc and free start on a cache line, in the hot text section (gcc and
 * clang put `hot` functions in .text.hot, which the linker places first):
 * where their fast paths sit otherwise moves with any change to the code
 * before them. Within a line, that alone moved linux-scalability (size 128,
 * T=1) by 5-7 % CPU per pair (the same instructions, 16 and 48 bytes into a
 * line instead of 0 and 16); across lines, a split change in medium.c that
 * never runs without a limit moved them from 0xa80 to 0xd40 in their page
 * and thread-test T=1 took 8.6 -> 13.4 ns a pair at 128 B, 7.8 -> 11.9 at
 * 64 B (the same instructions and statistics; back at 9.4 and 7.9 ns in
 * .text.hot, where no other change moves them). */
#define NBM_HOT_ALIGN __attribute__((aligned(64), hot))

NBM_OVERRIDE NBM_HOT_ALIGN void *malloc(size_t n) { return nbm__malloc_fast(n); }
NBM_OVERRIDE NBM_HOT_ALIGN void free(void *p) { nbm__free_fast(p); }
NBM_OVERRIDE void cfree(void *p) { nbm__free_fast(p); }
NBM_OVERRIDE void *calloc(size_t count, size_t size) { return nbm__calloc(count, size); }
NBM_OVERRIDE void *realloc(void *p, size_t n) { return nbm__realloc(p, n); }
NBM_OVERRIDE void *reallocarray(void *p, size_t count, size_t size) { return nbm_reallocarray(p, count, size); }
NBM_OVERRIDE int posix_memalign(void **out, size_t align, size_t n) { return nbm__posix_memalign(out, align, n); }
NBM_OVERRIDE void *aligned_alloc(size_t align, size_t n) { return nbm_aligned_alloc(align, n); }
NBM_OVERRIDE void *valloc(size_t n) { return nbm_valloc(n); }
NBM_OVERRIDE void *pvalloc(size_t n) { return nbm_pvalloc(n); }
NBM_OVERRIDE size_t malloc_usable_size(void *p) { return nbm_usable_size(p); }

/* glibc's malloc_trim returns memory to the OS; here it is nbm_purge: empty
 * small-object pages of this thread's and exited threads' heaps, and cached
 * medium blocks, go back at once (`pad` is not needed: nothing is kept at the
 * top of a heap). 1 if anything was returned, as glibc says. */
NBM_OVERRIDE int malloc_trim(size_t pad)
{
    (void)pad;
    nbm_stats_t before, after;
    nbm_get_stats(&before);
    nbm_purge();
    nbm_get_stats(&after);
    return after.purged_bytes != before.purged_bytes;
}

/* glibc's memalign accepts any alignment, rounding a non-power of two up;
 * as there, only one above 2^63 (nothing to round to) is EINVAL: one between
 * 2^62 and 2^63 becomes 2^63 and fails with ENOMEM. */
NBM_OVERRIDE void *memalign(size_t align, size_t n)
{
    if (align <= NBM_MIN_ALIGN)
        return nbm__malloc_fast(n);
    if (align & (align - 1)) {
        if (align > ((size_t)1 << 63)) {
            errno = EINVAL;
            return NULL;
        }
        align = (size_t)1 << (64 - __builtin_clzll(align));
    }
    return nbm__aligned_generic(align, n);
}

/* Some programs and glibc internals call these names directly. */
NBM_OVERRIDE void *__libc_malloc(size_t n) { return nbm__malloc_fast(n); }
NBM_OVERRIDE void __libc_free(void *p) { nbm__free_fast(p); }
NBM_OVERRIDE void *__libc_calloc(size_t count, size_t size) { return nbm__calloc(count, size); }
NBM_OVERRIDE void *__libc_realloc(void *p, size_t n) { return nbm__realloc(p, n); }
NBM_OVERRIDE void *__libc_memalign(size_t align, size_t n) { return memalign(align, n); }
