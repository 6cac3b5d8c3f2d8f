// override_new.cpp - every C++ operator new/delete, for libnbmalloc.so only.
//
// The throwing forms follow [new.delete]: on failure call the installed
// new_handler and retry, or throw std::bad_alloc when there is none. Sized
// deletes ignore the size (the block knows its own), aligned ones the
// alignment (free finds the owner from the pointer alone).
#include <cstddef>
#include <new>

#include "nbmalloc.h"

#define NBM_OVERRIDE __attribute__((visibility("default")))

namespace {

void *alloc_or_throw(std::size_t n)
{
    for (;;) {
        if (void *p = nbm_malloc(n))
            return p;
        std::new_handler h = std::get_new_handler();
        if (!h)
            throw std::bad_alloc();
        h();
    }
}

void *aligned_or_throw(std::size_t n, std::align_val_t al)
{
    for (;;) {
        if (void *p = nbm_aligned_alloc(static_cast<std::size_t>(al), n))
            return p;
        std::new_handler h = std::get_new_handler();
        if (!h)
            throw std::bad_alloc();
        h();
    }
}

void *aligned_nothrow(std::size_t n, std::align_val_t al) noexcept
{
    try {
        return aligned_or_throw(n, al);
    } catch (...) {
        return nullptr;
    }
}

void *nothrow(std::size_t n) noexcept
{
    try {
        return alloc_or_throw(n);
    } catch (...) {
        return nullptr;
    }
}

} // namespace

NBM_OVERRIDE void *operator new(std::size_t n) { return alloc_or_throw(n); }
NBM_OVERRIDE void *operator new[](std::size_t n) { return alloc_or_throw(n); }
NBM_OVERRIDE void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return nothrow(n); }
NBM_OVERRIDE void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return nothrow(n); }
NBM_OVERRIDE void *operator new(std::size_t n, std::align_val_t al) { return aligned_or_throw(n, al); }
NBM_OVERRIDE void *operator new[](std::size_t n, std::align_val_t al) { return aligned_or_throw(n, al); }
NBM_OVERRIDE void *operator new(std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept { return aligned_nothrow(n, al); }
NBM_OVERRIDE void *operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept { return aligned_nothrow(n, al); }

NBM_OVERRIDE void operator delete(void *p) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete[](void *p) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete(void *p, const std::nothrow_t &) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete[](void *p, const std::nothrow_t &) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete(void *p, std::size_t) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete[](void *p, std::size_t) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete(void *p, std::align_val_t) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete[](void *p, std::align_val_t) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete(void *p, std::size_t, std::align_val_t) noexcept { nbm_free(p); }
NBM_OVERRIDE void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { nbm_free(p); }
