/*
 * nbbs_hosted.c - conveniences for hosted programs: metadata from the C
 * library. Kept apart so the core stays freestanding.
 */
#include <stdlib.h>

#include "nbbs_internal.h"

nbbs_t *nbbs_create(void *base, size_t arena_size, const nbbs_config_t *cfg)
{
    size_t need = nbbs_meta_size(arena_size, cfg);
    if (!need)
        return NULL;
    need = (need + NBBS_META_ALIGN - 1) & ~(size_t)(NBBS_META_ALIGN - 1);
    void *meta = aligned_alloc(NBBS_META_ALIGN, need);
    if (!meta)
        return NULL;
    nbbs_t *b = nbbs_init(meta, need, base, arena_size, cfg);
    if (!b) {
        free(meta);
        return NULL;
    }
    b->hosted = true;
    return b;
}

void nbbs_destroy(nbbs_t *b)
{
    if (b && b->hosted) {
        b->magic = 0;
        free(b);
    }
}
