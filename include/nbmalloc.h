/*
 * nbmalloc.h - a general-purpose malloc on the lock-free buddy back-end.
 *
 * Small requests (up to NBM_SMALL_MAX bytes) are served from per-thread
 * caches of size-class free lists, which take no atomic operation on the fast
 * path and exchange batches of objects with lock-free shared stacks; medium
 * requests are blocks of the lock-free buddy system (nbbs.h), any alignment up
 * to the block size; huge requests are mapped from the OS directly. Arenas of
 * the back-end are reserved on demand and registered without a lock.
 *
 * Link libnbmalloc_static.a (or libnbmalloc.so) and call nbm_* directly, or
 * LD_PRELOAD libnbmalloc.so to replace the whole allocation interface of a
 * program (malloc, free, calloc, realloc, reallocarray, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size and every C++
 * operator new/delete). docs/nbmalloc.md describes the design and options.
 *
 * Errors: the allocation functions return NULL (errno ENOMEM, or EINVAL for a
 * bad alignment) like their C counterparts. Freeing a pointer nbmalloc never
 * returned, or one already freed where that is detected (see docs), prints
 * one line "nbmalloc: free(): invalid pointer 0x..." (or "double free") on
 * stderr and aborts the process.
 */
#ifndef NBMALLOC_H
#define NBMALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define NBM_EXPORT __attribute__((visibility("default")))
#define NBM_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#else
#define NBM_EXPORT
#define NBM_MALLOC_ATTR
#endif

/* Largest request served by the size classes; larger ones are buddy blocks. */
#define NBM_SMALL_MAX 16384
/* Largest request served by the buddy back-end; larger ones are mapped. */
#define NBM_MEDIUM_MAX ((size_t)64 << 20)
/* Alignment of every pointer returned by nbm_malloc. */
#define NBM_MIN_ALIGN 16

/* ------------------------------------------------------------------------
 * Standard malloc interface
 * ------------------------------------------------------------------------ */

/* size 0 returns a unique minimal object (free it as usual). */
NBM_EXPORT NBM_MALLOC_ATTR void *nbm_malloc(size_t size);
/* Aborts on a pointer nbmalloc did not return or a detected double free. */
NBM_EXPORT void  nbm_free(void *p);
/* Returns NULL with errno ENOMEM if count * size overflows. */
NBM_EXPORT NBM_MALLOC_ATTR void *nbm_calloc(size_t count, size_t size);
/* Keeps the block when the new size fits it and uses at least half of it;
 * realloc(NULL, n) is malloc(n); realloc(p, 0) frees p and returns NULL. */
NBM_EXPORT void *nbm_realloc(void *p, size_t size);
/* realloc of count * size bytes; NULL with errno ENOMEM on overflow. */
NBM_EXPORT void *nbm_reallocarray(void *p, size_t count, size_t size);

/* ------------------------------------------------------------------------
 * Aligned allocation
 * ------------------------------------------------------------------------ */

/* align must be a power of two (EINVAL otherwise); any size is accepted. */
NBM_EXPORT NBM_MALLOC_ATTR void *nbm_aligned_alloc(size_t align, size_t size);
/* Returns 0, EINVAL (align not a power of two multiple of sizeof(void *)) or
 * ENOMEM; *out is written only on success. */
NBM_EXPORT int   nbm_posix_memalign(void **out, size_t align, size_t size);
/* Page-aligned allocation; pvalloc rounds size up to a page multiple. */
NBM_EXPORT NBM_MALLOC_ATTR void *nbm_valloc(size_t size);
NBM_EXPORT NBM_MALLOC_ATTR void *nbm_pvalloc(size_t size);

/* ------------------------------------------------------------------------
 * Introspection
 * ------------------------------------------------------------------------ */

/* Bytes usable at p (>= the size requested); 0 for NULL. Aborts like
 * nbm_free on a pointer nbmalloc did not return. */
NBM_EXPORT size_t nbm_usable_size(const void *p);

typedef struct nbm_stats {
    size_t arenas;          /* back-end arenas reserved */
    size_t arena_bytes;     /* virtual bytes they span */
    size_t chunks;          /* pages: back-end blocks carved into small objects */
    size_t chunk_bytes;     /* bytes in those pages */
    size_t medium_live;     /* medium blocks handed out and not freed */
    size_t medium_cached;   /* bytes of freed medium blocks kept for reuse */
    size_t purged_bytes;    /* bytes given back to the OS with madvise, total */
    size_t huge_live;       /* huge mappings live */
    size_t huge_bytes;      /* bytes in them */
    size_t threads;         /* thread heaps taken (new or adopted), total */
    size_t refills;         /* pages taken by heaps */
    size_t drains;          /* empty pages given back by heaps */
    size_t peak_rss;        /* peak resident set of the process, bytes */
} nbm_stats_t;

/* Fills *out (counters of exited threads and shared state; a thread's own
 * counters join at its exit). Does nothing for NULL. */
NBM_EXPORT void nbm_get_stats(nbm_stats_t *out);
/* Writes the statistics to file descriptor fd (2 = stderr) without using
 * stdio or allocating. NBM_SHOW_STATS=1 does this at exit. */
NBM_EXPORT void nbm_stats_print(int fd);

/* ------------------------------------------------------------------------
 * Maintenance
 * ------------------------------------------------------------------------ */

/* Returns free memory to the OS now (also malloc_trim under the preload):
 * the calling thread's and exited threads' heaps take their pages' remote
 * frees and give every empty page back, and every cached free medium block
 * goes back (normally done after NBM_PURGE_DELAY_MS). */
NBM_EXPORT void nbm_purge(void);
/* Sweeps the calling thread's heap: its pages take their remote frees, and
 * empty pages leave it (up to 8 stay with the thread as spares for its next
 * pages of any class; nbm_purge and thread exit return those too). The
 * thread may keep allocating afterwards. */
NBM_EXPORT void nbm_thread_flush(void);

#ifdef __cplusplus
}
#endif

#endif /* NBMALLOC_H */
