/*
 * nbbs_stats.c - statistics and the occupancy map, derived from the index of
 * live blocks (the alloc/free paths keep no counters). One pass over the
 * index, jumping over each live block. Freestanding.
 */
#include "nbbs_atomic.h"
#include "nbbs_internal.h"

/* Calls visit(ctx, first_leaf, nleaves_used) for each live block in address
 * order. */
static void for_each_block(const nbbs_t *b, void (*visit)(void *, uint64_t, uint64_t), void *ctx)
{
    for (uint64_t i = 0; i < b->nleaves;) {
        uint8_t v = nb_peek_u8(&b->index[i]);
        if (v) {
            uint64_t len = UINT64_C(1) << (v - 1u);
            visit(ctx, i, len);
            i += len;
        } else {
            i++;
        }
    }
}

typedef struct {
    const nbbs_t *b;
    nbbs_stats_t *s;
    uint64_t      next_free; /* first leaf after the last block seen */
    uint64_t      best;      /* largest free block, in leaves */
} stats_ctx_t;

/* Largest aligned block of order <= max_order inside the free run [lo, hi). */
static void free_run(stats_ctx_t *c, uint64_t lo, uint64_t hi)
{
    for (unsigned o = c->b->max_order + 1; o-- > 0;) {
        uint64_t len = UINT64_C(1) << o;
        if (len <= c->best)
            return;
        uint64_t s = (lo + len - 1) & ~(len - 1);
        if (s + len <= hi && s + len > s) {
            c->best = len;
            return;
        }
    }
}

static void stats_visit(void *ctx, uint64_t leaf, uint64_t len)
{
    stats_ctx_t *c = ctx;
    unsigned order = (unsigned)__builtin_ctzll(len);
    c->s->blocks[order]++;
    c->s->live_blocks++;
    c->s->used_bytes += (size_t)len << c->b->min_shift;
    if (leaf > c->next_free)
        free_run(c, c->next_free, leaf);
    c->next_free = leaf + len;
}

void nbbs_get_stats(const nbbs_t *b, nbbs_stats_t *out)
{
    if (!b || !out)
        return;
    nbbs_stats_t *s = out;
    for (unsigned i = 0; i <= NBBS_MAX_ORDER; i++)
        s->blocks[i] = 0;
    s->arena_size = b->arena_size;
    s->min_block = b->min_block;
    s->max_order = b->max_order;
    s->layout = (nbbs_layout_t)b->lpw;
    s->meta_size = b->meta_size;
    s->tree_bytes = b->tree_bytes;
    s->index_bytes = b->index_bytes;
    s->used_bytes = 0;
    s->live_blocks = 0;
    stats_ctx_t c = { b, s, 0, 0 };
    for_each_block(b, stats_visit, &c);
    if (b->nleaves > c.next_free)
        free_run(&c, c.next_free, b->nleaves);
    s->free_bytes = s->arena_size - s->used_bytes;
    s->largest_free = (size_t)c.best << b->min_shift;
}

typedef struct {
    uint8_t *out;
    unsigned order;
    uint64_t entry; /* current entry */
    uint64_t used;  /* leaves used in the current entry */
} map_ctx_t;

static void map_flush(map_ctx_t *c, uint64_t upto)
{
    uint64_t full = UINT64_C(1) << c->order;
    for (; c->entry < upto; c->entry++) {
        c->out[c->entry] = c->used == 0 ? NBBS_MAP_FREE : c->used >= full ? NBBS_MAP_FULL : NBBS_MAP_PARTIAL;
        c->used = 0;
    }
}

static void map_add(map_ctx_t *c, uint64_t leaf, uint64_t len)
{
    while (len) {
        uint64_t e = leaf >> c->order;
        map_flush(c, e);
        uint64_t end = (e + 1) << c->order;
        uint64_t n = end - leaf < len ? end - leaf : len;
        c->used += n;
        leaf += n;
        len -= n;
    }
}

static void map_visit(void *ctx, uint64_t leaf, uint64_t len) { map_add(ctx, leaf, len); }

int nbbs_occupancy_map(const nbbs_t *b, unsigned order, uint8_t *out, size_t out_len)
{
    if (!b || !out || order > b->max_order)
        return NBBS_EINVAL;
    uint64_t entries = ((b->nleaves - 1) >> order) + 1;
    if (out_len < entries || entries > (uint64_t)INT32_MAX)
        return NBBS_EINVAL;
    map_ctx_t c = { out, order, 0, 0 };
    for_each_block(b, map_visit, &c);
    uint64_t end = entries << order; /* past the arena counts as used */
    if (end > b->nleaves)
        map_add(&c, b->nleaves, end - b->nleaves);
    map_flush(&c, entries);
    return (int)entries;
}
