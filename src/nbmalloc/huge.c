/*
 * huge.c - requests above NBM_MEDIUM_MAX (or aligned beyond it): one OS
 * mapping each.
 *
 * The mapping starts on a 1 GiB boundary (or the requested alignment, if
 * larger), and the user pointer is its start: every alignment up to the
 * mapping's own is served, 1 GiB and 2 GiB included. Its first 1 GiB slot
 * belongs to it alone, so the slot's owner-map entry points at its header (tag
 * bit 0 set). The header is a descriptor (size and user pointer), outside user
 * memory. The reservation is aligned without a 2x over-map
 * (nbm__os_reserve_aligned); a refused mapping is ENOMEM.
 *
 * free checks the pointer against the header and replaces the entry with a
 * tombstone (user pointer | 3) by CAS: of two racing frees one wins, and a
 * later free of the same pointer finds the tombstone and is reported as a
 * double free (any other pointer in the slot as invalid). The next arena or
 * huge mapping placed in the slot overwrites the tombstone.
 */
#include <errno.h>

#include "internal.h"

#define NBM_HUGE_MAX_ALIGN ((size_t)1 << 40)

void *nbm__huge_alloc(size_t size, size_t align)
{
    size_t slot_align = align > NBM_ARENA_SIZE ? align : NBM_ARENA_SIZE;
    if (size > ((size_t)1 << 47) || align > NBM_HUGE_MAX_ALIGN) {
        errno = ENOMEM;
        return NULL;
    }
    size_t total = (size + NBM_PAGE - 1) & ~(NBM_PAGE - 1);
    uint32_t d = 0;
    char *base = NULL;
    /* On failure the caller may recover (nbm__recover) and retry. */
    d = nbm__desc_get(nbm__thr);
    if (d && nbm__budget_take(total)) {
        if ((base = nbm__os_reserve_aligned(total, slot_align)) == NULL)
            nbm__budget_give(total);
    }
    if (!base) {
        if (d)
            nbm__desc_put(nbm__thr, d);
        errno = ENOMEM;
        return NULL;
    }
    nbm_desc_t *h = nbm__desc(d);
    h->list = base;
    h->count = d; /* its own index, to give it back */
    h->bump = (char *)(uintptr_t)total;
    if (!nbm__map_claim((uintptr_t)base >> NBM_ARENA_SHIFT, (uintptr_t)h)) {
        /* Above the owner map's 47-bit reach: not ours to serve. */
        nbm__os_unmap(base, total);
        nbm__budget_give(total);
        nbm__desc_put(nbm__thr, d);
        errno = ENOMEM;
        return NULL;
    }
    NBM_STAT_ADD(huge_live, 1);
    NBM_STAT_ADD(huge_bytes, total);
    return base;
}

static nbm_desc_t *header(uintptr_t owner, const void *p, const char *who, const char *freed)
{
    if ((owner & NBM_MAP_TOMB) == NBM_MAP_TOMB)
        nbm__fatal((owner & ~NBM_MAP_TOMB) == (uintptr_t)p ? freed : who, p);
    nbm_desc_t *h = (nbm_desc_t *)owner;
    if (h->list != p)
        nbm__fatal(who, p);
    return h;
}

void nbm__huge_free(uintptr_t owner, void *p, const char *who)
{
    const char *freed = "free(): double free detected for";
    nbm_desc_t *h = header(owner, p, who, freed);
    size_t total = (size_t)(uintptr_t)h->bump;
    if (!nbm_cas_uptr(&nbm__map[(uintptr_t)p >> NBM_ARENA_SHIFT], &owner, (uintptr_t)p | NBM_MAP_TOMB))
        nbm__fatal(freed, p); /* another free won */
    NBM_STAT_SUB(huge_live, 1);
    NBM_STAT_SUB(huge_bytes, total);
    uint32_t d = h->count;
    nbm__os_unmap(p, total);
    nbm__budget_give(total);
    nbm__desc_put(nbm__thr, d);
}

size_t nbm__huge_size(uintptr_t owner, const void *p, const char *who, const char *freed)
{
    return (size_t)(uintptr_t)header(owner, p, who, freed)->bump;
}

/* Resizing. The header stays; only its size and user pointer change. A
 * shrink, or a growth into free address space after the mapping, is done in
 * place. Otherwise the pages move (mremap, no copy) to a new range aligned
 * to 1 GiB, whose slot entry is claimed for the header before the move; the
 * old slot gets the tombstone of the old pointer, as a free would leave. The
 * budget (NBM_LIMIT_MB) is charged for growth before anything is mapped. */
void *nbm__huge_realloc(uintptr_t owner, void *p, size_t n)
{
    const char *who = "realloc(): invalid pointer", *freed = "realloc(): freed pointer";
    nbm_desc_t *h = header(owner, p, who, freed);
    size_t old = (size_t)(uintptr_t)h->bump;
    if (n > ((size_t)1 << 47))
        return NULL;
    size_t total = (n + NBM_PAGE - 1) & ~(NBM_PAGE - 1);
    if (total == old)
        return p;
    if (total < old) {
        if (!nbm__os_remap(p, old, total, NULL))
            return NULL;
        nbm__budget_give(old - total);
        NBM_STAT_SUB(huge_bytes, old - total);
        h->bump = (char *)(uintptr_t)total;
        return p;
    }
    if (!nbm__budget_take(total - old))
        return NULL;
    if (nbm__os_remap(p, old, total, NULL)) {
        NBM_STAT_ADD(huge_bytes, total - old);
        h->bump = (char *)(uintptr_t)total;
        return p;
    }
    char *q = nbm__os_reserve_aligned(total, NBM_ARENA_SIZE);
    if (!q || !nbm__map_claim((uintptr_t)q >> NBM_ARENA_SHIFT, owner)) {
        nbm__os_unmap(q, total);
        nbm__budget_give(total - old);
        return NULL;
    }
    if (!nbm__os_remap(p, old, total, q)) {
        /* Nothing moved: give the new slot up (as a freed mapping would). */
        uintptr_t mine = owner; /* the slot is ours: the CAS cannot fail */
        nbm_cas_uptr(&nbm__map[(uintptr_t)q >> NBM_ARENA_SHIFT], &mine, (uintptr_t)q | NBM_MAP_TOMB);
        nbm__os_unmap(q, total);
        nbm__budget_give(total - old);
        return NULL;
    }
    h->list = q;
    h->bump = (char *)(uintptr_t)total;
    if (!nbm_cas_uptr(&nbm__map[(uintptr_t)p >> NBM_ARENA_SHIFT], &owner, (uintptr_t)p | NBM_MAP_TOMB))
        nbm__fatal(freed, p); /* a free raced with this realloc */
    NBM_STAT_ADD(huge_bytes, total - old);
    return q;
}
