/*
 * nbbs_init.c - configuration checks, metadata layout and instance set-up.
 * Freestanding: no libc, the caller provides the metadata.
 */
#include "nbbs_atomic.h"
#include "nbbs_internal.h"

#define ALIGN_UP(x, a) (((x) + ((size_t)(a) - 1)) & ~((size_t)(a) - 1))

static unsigned log2_floor(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

bool nbbs__geometry(size_t arena_size, const nbbs_config_t *cfg, nbbs_geom_t *g)
{
    nbbs_config_t c = { 0, 0, 0, 0, 0 };
    if (cfg)
        c = *cfg;
    if (c.min_block == 0)
        c.min_block = 4096;
    if (c.layout == 0)
        c.layout = NBBS_LAYOUT_BUNCH;
    if (c.layout != NBBS_LAYOUT_TREE && c.layout != NBBS_LAYOUT_BUNCH)
        return false;
    if (c.flags & ~NBBS_GROUP_COUNTS)
        return false;
    if (c.min_block < 8 || (c.min_block & (c.min_block - 1)))
        return false;
    if (arena_size == 0 || (arena_size & (c.min_block - 1)))
        return false;

    g->min_block = c.min_block;
    g->min_shift = log2_floor(c.min_block);
    g->nleaves = (uint64_t)arena_size >> g->min_shift;
    unsigned fit = log2_floor(g->nleaves); /* largest order that fits the arena */
    /* The default is the largest order both the arena and the limit on a
     * block's size (2^62 bytes) allow: an arena of 2^62 bytes or more has a
     * max block smaller than itself then, not a refused configuration. */
    if (c.max_order == 0)
        c.max_order = g->min_shift + fit > 62 && g->min_shift <= 62 ? 62 - g->min_shift : fit;
    if (c.max_order > fit || c.max_order > NBBS_MAX_ORDER || g->min_shift + c.max_order > 62)
        return false;

    g->max_order = c.max_order;
    g->lpw = (unsigned)c.layout;
    g->nrows = g->max_order / g->lpw + 1;
    g->ntrees = ((g->nleaves - 1) >> g->max_order) + 1;
    g->word_size = g->lpw == 4 ? sizeof(uint64_t) : sizeof(uint8_t);
    g->nwords = 0;
    for (unsigned k = 0; k < g->nrows; k++) {
        unsigned rb = g->max_order - g->lpw * k;
        unsigned sl = g->lpw == 4 ? (rb < 3 ? rb : 3) : 0;
        g->nwords += (g->ntrees << rb) >> sl;
    }
    g->tree_bytes = (size_t)g->nwords * g->word_size;
    g->index_bytes = (size_t)g->nleaves;
    g->nhints = 1;
    while (g->nhints < NBBS_HINTS && (uint64_t)g->nhints * 2 * 128 <= g->nleaves)
        g->nhints *= 2;
    g->hint_bytes = (size_t)g->nhints * NBBS_HINT_STRIDE * sizeof(uint64_t);
    if (c.group_order > g->max_order)
        return false;
    g->group_order = c.group_order ? c.group_order
                                   : g->max_order < NBBS_GROUP_ORDER ? g->max_order : NBBS_GROUP_ORDER;
    g->ngroups = g->ntrees << (g->max_order - g->group_order);
    g->hole_bytes = ALIGN_UP((size_t)((g->ngroups + 63) / 64) * sizeof(uint64_t), NBBS_META_ALIGN);
    g->count_bytes = c.flags & NBBS_GROUP_COUNTS ? ALIGN_UP((size_t)g->ngroups * sizeof(uint32_t), NBBS_META_ALIGN) : 0;
    g->stray_bytes = ALIGN_UP((size_t)(((g->nleaves >> NBBS_CARVE_ORDER) + 63) / 64) * sizeof(uint64_t),
                              NBBS_META_ALIGN);
    g->meta_size = NBBS_HEADER_BYTES(g->max_order) + g->hint_bytes + g->hole_bytes + g->stray_bytes +
                   ALIGN_UP(g->tree_bytes, NBBS_META_ALIGN) + ALIGN_UP(g->index_bytes, NBBS_META_ALIGN) +
                   g->count_bytes;
    return true;
}

size_t nbbs_meta_size(size_t arena_size, const nbbs_config_t *cfg)
{
    nbbs_geom_t g;
    return nbbs__geometry(arena_size, cfg, &g) ? g.meta_size : 0;
}

/* Mark [nleaves, ntrees << max_order) as taken, as maximal aligned blocks,
 * so that the partial last tree never hands out memory past the arena. They
 * have no index entry, so they can never be freed. */
static void mark_tail(nbbs_t *b)
{
    uint64_t end = b->ntrees << b->max_order;
    for (uint64_t i = b->nleaves; i < end;) {
        unsigned o = (unsigned)__builtin_ctzll(i);
        if (o > b->max_order)
            o = b->max_order;
        while (i + (UINT64_C(1) << o) > end)
            o--;
        unsigned r = b->max_order - o;
        bool ok = nbbs__is_bunch(b) ? nbbs__bunch_take(b, r, i >> o) : nbbs__tree_take(b, r, i >> o);
        (void)ok; /* cannot fail: nothing else runs yet and the range is free */
        nbbs__count(b, o, i, false);
        i += UINT64_C(1) << o;
    }
}

nbbs_t *nbbs_init(void *meta, size_t meta_size, void *base, size_t arena_size,
                  const nbbs_config_t *cfg)
{
    nbbs_geom_t g;
    if (!meta || !base || !nbbs__geometry(arena_size, cfg, &g))
        return NULL;
    if (((uintptr_t)meta & (NBBS_META_ALIGN - 1)) || meta_size < g.meta_size)
        return NULL;
    if (((uintptr_t)base & (g.min_block - 1)) || (uintptr_t)base + arena_size - 1 < (uintptr_t)base)
        return NULL;

    nbbs_t *b = (nbbs_t *)meta;
    b->magic = NBBS_MAGIC;
    b->base = (uintptr_t)base;
    b->arena_size = arena_size;
    b->min_block = g.min_block;
    b->meta_size = g.meta_size;
    b->tree_bytes = g.tree_bytes;
    b->index_bytes = g.index_bytes;
    b->nleaves = g.nleaves;
    b->ntrees = g.ntrees;
    b->min_shift = g.min_shift;
    b->max_order = g.max_order;
    b->lpw = g.lpw;
    b->nrows = g.nrows;
    b->hosted = false;
    nb_init_store(&b->caches, 0);
    uint64_t off = 0;
    for (unsigned k = 0; k < g.nrows; k++) {
        unsigned rb = g.max_order - g.lpw * k;
        unsigned sl = g.lpw == 4 ? (rb < 3 ? rb : 3) : 0;
        b->row_bottom[k] = (uint8_t)rb;
        b->row_top[k] = (uint8_t)(rb >= g.lpw - 1 ? rb - (g.lpw - 1) : 0);
        b->row_spw_log[k] = (uint8_t)sl;
        b->row_off[k] = off;
        off += (UINT64_C(1) << rb) >> sl;
    }
    b->tree_words = off;
    for (unsigned r = 0; r <= g.max_order; r++) {
        unsigned k = (g.max_order - r) / g.lpw, depth = b->row_bottom[k] - r;
        b->level[r].off = b->row_off[k];
        b->level[r].cpw = (uint8_t)(b->row_spw_log[k] - depth);
        b->level[r].tpw = (uint8_t)(r - b->level[r].cpw);
        b->level[r].gap = off - (UINT64_C(1) << b->level[r].tpw);
        b->level[r].depth = (uint8_t)depth;
        b->level[r].width = (uint8_t)(SLOT_BITS << depth);
        b->level[r].top = b->row_top[k];
    }

    char *p = (char *)meta + NBBS_HEADER_BYTES(g.max_order);
    b->hints = (NBBS_ATOMIC(uint64_t) *)p;
    b->hint_mask = g.nhints - 1;
    for (unsigned i = 0; i < g.nhints; i++) /* spread the start points (every order's) */
        for (unsigned j = 0; j < NBBS_HINT_STRIDE; j++)
            nb_init_store(&b->hints[i * NBBS_HINT_STRIDE + j], nbbs__cell_start(b, i));
    p += g.hint_bytes;
    b->holes = (NBBS_ATOMIC(uint64_t) *)p;
    b->group_order = g.group_order;
    b->ngroups = g.ngroups;
    for (uint64_t i = 0; i < g.hole_bytes / sizeof(uint64_t); i++)
        nb_init_store(&b->holes[i], 0);
    p += g.hole_bytes;
    b->strays = (NBBS_ATOMIC(uint64_t) *)p;
    for (uint64_t i = 0; i < g.stray_bytes / sizeof(uint64_t); i++)
        nb_init_store(&b->strays[i], 0);
    p += g.stray_bytes;
    b->words = p;
    if (g.lpw == 4) {
        NBBS_ATOMIC(uint64_t) *w = (NBBS_ATOMIC(uint64_t) *)p;
        for (uint64_t i = 0; i < g.nwords; i++)
            nb_init_store(&w[i], 0);
    } else {
        NBBS_ATOMIC(uint8_t) *w = (NBBS_ATOMIC(uint8_t) *)p;
        for (uint64_t i = 0; i < g.nwords; i++)
            nb_init_store(&w[i], 0);
    }
    b->index = (NBBS_ATOMIC(uint8_t) *)(p + ALIGN_UP(g.tree_bytes, NBBS_META_ALIGN));
    for (uint64_t i = 0; i < g.nleaves; i++)
        nb_init_store(&b->index[i], 0);
    b->gfree = NULL;
    if (g.count_bytes) {
        b->gfree = (NBBS_ATOMIC(uint32_t) *)((char *)b->index + ALIGN_UP(g.index_bytes, NBBS_META_ALIGN));
        for (uint64_t i = 0; i < g.ngroups; i++)
            nb_init_store(&b->gfree[i], (uint32_t)1 << g.group_order);
    }

    mark_tail(b);
    nbbs_atomic_fence(NBBS_MO_SEQ_CST); /* publish before the pointer escapes */
    return b;
}
