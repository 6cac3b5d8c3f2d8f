/*
 * huge.c - requests above NBM_MEDIUM_MAX: one OS mapping each.
 *
 * The mapping starts on a 1 GiB boundary, so its first 1 GiB unit belongs to
 * it alone and its owner-map entry can point at the header (tag bit 0 set).
 * The header sits in the first page (or the first `align` bytes) before the
 * user pointer. free checks the pointer against the header, clears the entry
 * with a CAS (of two racing frees one wins, the other is reported) and unmaps.
 */
#include <errno.h>

#include "internal.h"

typedef struct nbm_huge {
    void  *user;     /* the pointer handed out */
    size_t map_size; /* bytes mapped from the header on */
} nbm_huge_t;

void *nbm__huge_alloc(size_t size, size_t align)
{
    size_t off = align > NBM_PAGE ? align : NBM_PAGE;
    if (size > SIZE_MAX / 2 || off > NBM_ARENA_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t total = off + ((size + NBM_PAGE - 1) & ~(NBM_PAGE - 1));
    char *base = nbm__os_reserve_aligned(total, NBM_ARENA_SIZE);
    if (!base || ((uintptr_t)base >> NBM_ARENA_SHIFT) >= NBM_MAP_SIZE) {
        nbm__os_unmap(base, total);
        errno = ENOMEM;
        return NULL;
    }
    nbm_huge_t *h = (nbm_huge_t *)base;
    h->user = base + off;
    h->map_size = total;
    uintptr_t none = 0;
    if (!nbm_cas_uptr(&nbm__map[(uintptr_t)base >> NBM_ARENA_SHIFT], &none, (uintptr_t)h | NBM_HUGE_TAG))
        nbm__fatal("internal error: owner map entry taken for huge mapping", base);
    nbm_stat_add(&nbm__gstats.huge_live, 1);
    nbm_stat_add(&nbm__gstats.huge_bytes, total);
    return h->user;
}

static nbm_huge_t *header(uintptr_t owner, const void *p, const char *who)
{
    nbm_huge_t *h = (nbm_huge_t *)(owner & ~NBM_HUGE_TAG);
    if (h->user != p)
        nbm__fatal(who, p);
    return h;
}

void nbm__huge_free(uintptr_t owner, void *p, const char *who)
{
    nbm_huge_t *h = header(owner, p, who);
    size_t total = h->map_size;
    if (!nbm_cas_uptr(&nbm__map[(uintptr_t)h >> NBM_ARENA_SHIFT], &owner, 0))
        nbm__fatal("free(): double free detected for", p);
    nbm_stat_sub(&nbm__gstats.huge_live, 1);
    nbm_stat_sub(&nbm__gstats.huge_bytes, total);
    nbm__os_unmap(h, total);
}

size_t nbm__huge_size(uintptr_t owner, const void *p, const char *who)
{
    nbm_huge_t *h = header(owner, p, who);
    return h->map_size - (size_t)((char *)p - (char *)h);
}
