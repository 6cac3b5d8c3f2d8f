/*
 * override_new.c - every C++ operator new/delete, for libnbmalloc.so only.
 *
 * Written in C under their mangled (Itanium ABI, x86-64) names so that the
 * library does not depend on libstdc++: a C program that preloads it does not
 * load the C++ runtime (about 1 MiB of RSS). The two runtime functions the
 * throwing forms need are weak references, resolved from the libstdc++ that
 * every C++ program already loads:
 *   std::get_new_handler()  - _ZSt15get_new_handlerv
 *   std::__throw_bad_alloc()  - _ZSt17__throw_bad_allocv
 * Throwing forms follow [new.delete]: on failure call the new_handler and
 * retry, or throw std::bad_alloc when there is none. The nothrow forms return
 * NULL on failure without calling the handler (a handler that throws could
 * not be caught in C). Sized deletes ignore the size and aligned ones the
 * alignment: free finds the block from the pointer alone.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "fast.h"

#define NBM_OVERRIDE __attribute__((visibility("default")))

typedef void (*nbm_new_handler_t)(void);
extern nbm_new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

static void *alloc_aligned(size_t n, size_t align)
{
    if (align <= NBM_MIN_ALIGN)
        return nbm__malloc_fast(n);
    if (align & (align - 1))
        return NULL;
    return nbm__aligned_generic(align, n);
}

NBM_NOINLINE static void *new_slow(size_t n, size_t align)
{
    for (;;) {
        void *p = alloc_aligned(n, align);
        if (p)
            return p;
        nbm_new_handler_t h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
        if (!h) {
            if (_ZSt17__throw_bad_allocv)
                _ZSt17__throw_bad_allocv();
            abort(); /* no C++ runtime: nothing could catch it anyway */
        }
        h();
    }
}

static inline void *new_throw(size_t n)
{
    void *p = nbm__malloc_fast(n);
    return NBM_LIKELY(p != NULL) ? p : new_slow(n, 0);
}

/* operator new(size_t), new[](size_t) */
NBM_OVERRIDE void *_Znwm(size_t n) { return new_throw(n); }
NBM_OVERRIDE void *_Znam(size_t n) { return new_throw(n); }
/* operator new(size_t, const std::nothrow_t &), and new[] */
NBM_OVERRIDE void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt) { (void)nt; return nbm__malloc_fast(n); }
NBM_OVERRIDE void *_ZnamRKSt9nothrow_t(size_t n, const void *nt) { (void)nt; return nbm__malloc_fast(n); }
/* operator new(size_t, std::align_val_t), and new[] */
NBM_OVERRIDE void *_ZnwmSt11align_val_t(size_t n, size_t al) { return new_slow(n, al); }
NBM_OVERRIDE void *_ZnamSt11align_val_t(size_t n, size_t al) { return new_slow(n, al); }
/* operator new(size_t, std::align_val_t, const std::nothrow_t &), and new[] */
NBM_OVERRIDE void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) { (void)nt; return alloc_aligned(n, al); }
NBM_OVERRIDE void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) { (void)nt; return alloc_aligned(n, al); }

/* operator delete(void *), delete[](void *) */
NBM_OVERRIDE void _ZdlPv(void *p) { nbm__free_fast(p); }
NBM_OVERRIDE void _ZdaPv(void *p) { nbm__free_fast(p); }
/* operator delete(void *, const std::nothrow_t &), and delete[] */
NBM_OVERRIDE void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; nbm__free_fast(p); }
NBM_OVERRIDE void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; nbm__free_fast(p); }
/* operator delete(void *, size_t), and delete[] (sized) */
NBM_OVERRIDE void _ZdlPvm(void *p, size_t n) { (void)n; nbm__free_fast(p); }
NBM_OVERRIDE void _ZdaPvm(void *p, size_t n) { (void)n; nbm__free_fast(p); }
/* operator delete(void *, std::align_val_t), and delete[] */
NBM_OVERRIDE void _ZdlPvSt11align_val_t(void *p, size_t al) { (void)al; nbm__free_fast(p); }
NBM_OVERRIDE void _ZdaPvSt11align_val_t(void *p, size_t al) { (void)al; nbm__free_fast(p); }
/* operator delete(void *, std::align_val_t, const std::nothrow_t &), and delete[] */
NBM_OVERRIDE void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) { (void)al, (void)nt; nbm__free_fast(p); }
NBM_OVERRIDE void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) { (void)al, (void)nt; nbm__free_fast(p); }
/* operator delete(void *, size_t, std::align_val_t), and delete[] */
NBM_OVERRIDE void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n, (void)al; nbm__free_fast(p); }
NBM_OVERRIDE void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n, (void)al; nbm__free_fast(p); }
