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
 * retry, or throw std::bad_alloc when there is none. The nothrow forms must
 * do the same and return NULL where the throwing form would throw, which
 * needs a catch, which C has not: when their allocation fails and a
 * new_handler is installed, they hand the request to the C++ runtime's own
 * nothrow form (the next definition of the same symbol, dlsym RTLD_NEXT),
 * which calls the throwing form (ours, through the preload) in a try block.
 * Without a handler, or without a C++ runtime behind us, NULL at once. Sized
 * deletes ignore the size and aligned ones the alignment: free finds the
 * block from the pointer alone.
 */
#include <dlfcn.h>
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

/* A failed nothrow request (rare: out of memory or address space). With a
 * new_handler installed, the runtime's nothrow form behind this library
 * runs the handler loop and catches; looked up at each failure by name, the
 * caller's own (__func__: the C name is the mangled one), and dlsym may call
 * malloc: we hold nothing here. */
NBM_NOINLINE static void *nothrow_failed(const char *name, size_t n, bool aligned, size_t al, const void *nt)
{
    nbm_new_handler_t h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (!h)
        return NULL;
    void *next = dlsym(RTLD_NEXT, name);
    if (!next)
        return NULL;
    if (aligned) {
        void *(*f)(size_t, size_t, const void *);
        __builtin_memcpy(&f, &next, sizeof f);
        return f(n, al, nt);
    }
    void *(*f)(size_t, const void *);
    __builtin_memcpy(&f, &next, sizeof f);
    return f(n, nt);
}

/* operator new(size_t), new[](size_t) */
NBM_OVERRIDE void *_Znwm(size_t n) { return new_throw(n); }
NBM_OVERRIDE void *_Znam(size_t n) { return new_throw(n); }
/* operator new(size_t, const std::nothrow_t &), and new[] */
NBM_OVERRIDE void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt)
{
    void *p = nbm__malloc_fast(n);
    return NBM_LIKELY(p != NULL) ? p : nothrow_failed(__func__, n, false, 0, nt);
}
NBM_OVERRIDE void *_ZnamRKSt9nothrow_t(size_t n, const void *nt)
{
    void *p = nbm__malloc_fast(n);
    return NBM_LIKELY(p != NULL) ? p : nothrow_failed(__func__, n, false, 0, nt);
}
/* operator new(size_t, std::align_val_t), and new[] */
NBM_OVERRIDE void *_ZnwmSt11align_val_t(size_t n, size_t al) { return new_slow(n, al); }
NBM_OVERRIDE void *_ZnamSt11align_val_t(size_t n, size_t al) { return new_slow(n, al); }
/* operator new(size_t, std::align_val_t, const std::nothrow_t &), and new[] */
NBM_OVERRIDE void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt)
{
    void *p = alloc_aligned(n, al);
    return p ? p : nothrow_failed(__func__, n, true, al, nt);
}
NBM_OVERRIDE void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt)
{
    void *p = alloc_aligned(n, al);
    return p ? p : nothrow_failed(__func__, n, true, al, nt);
}

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
