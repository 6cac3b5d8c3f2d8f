/*
 * alloc_lists_sl.c - lists-sl: a classic Linux-style buddy allocator.
 *
 * One doubly-linked free list per order, split on allocation and merge with
 * the buddy on release, all under one global spin lock (as Linux's zone lock).
 * The lists live out of band, one record per order-0 block like Linux's
 * struct page, because the arena is a fake range that must not be written.
 */
#include <stdlib.h>

#include "bench.h"
#include "spinlock.h"

#define NIL       UINT32_MAX

enum { UNIT_NONE = 0, UNIT_FREE = 1, UNIT_USED = 2 };

/* Only the first unit of a block carries meaning (state, order, links). */
typedef struct unit {
    uint32_t next, prev;
    uint8_t  state, order;
} unit_t;

typedef struct lists {
    bench_spinlock_t lock;
    uintptr_t        base;
    unsigned         shift;      /* log2(min_block) */
    unsigned         max_order;
    size_t           nunits;
    size_t           free_units;
    uint32_t         head[64];
    unit_t          *u;
} lists_t;

static void list_push(lists_t *l, uint32_t i, unsigned k)
{
    unit_t *u = &l->u[i];
    u->state = UNIT_FREE;
    u->order = (uint8_t)k;
    u->prev = NIL;
    u->next = l->head[k];
    if (u->next != NIL)
        l->u[u->next].prev = i;
    l->head[k] = i;
}

static void list_remove(lists_t *l, uint32_t i, unsigned k)
{
    unit_t *u = &l->u[i];
    if (u->prev != NIL)
        l->u[u->prev].next = u->next;
    else
        l->head[k] = u->next;
    if (u->next != NIL)
        l->u[u->next].prev = u->prev;
    u->state = UNIT_NONE;
}

static void *ls_create(const bench_arena_t *a)
{
    size_t nunits = a->size / a->min_block;
    size_t per_max = (size_t)1 << a->max_order;
    if (nunits == 0 || nunits >= NIL || nunits % per_max != 0 || a->max_order >= 64)
        return NULL;
    lists_t *l = nbbs_tu_aligned_alloc(NBBS_TU_CACHE_LINE, sizeof *l);
    if (!l)
        return NULL;
    l->u = calloc(nunits, sizeof *l->u);
    if (!l->u) {
        free(l);
        return NULL;
    }
    atomic_init(&l->lock.held, false);
    l->base = (uintptr_t)a->base;
    l->shift = (unsigned)__builtin_ctzll(a->min_block);
    l->max_order = a->max_order;
    l->nunits = nunits;
    l->free_units = nunits;
    for (unsigned k = 0; k < 64; k++)
        l->head[k] = NIL;
    /* Pushed from the top so the lowest addresses are handed out first. */
    for (size_t i = nunits; i > 0; i -= per_max)
        list_push(l, (uint32_t)(i - per_max), a->max_order);
    return l;
}

static void ls_destroy(void *inst)
{
    lists_t *l = inst;
    free(l->u);
    free(l);
}

static void *ls_alloc_order(void *inst, unsigned k)
{
    lists_t *l = inst;
    if (k > l->max_order)
        return NULL;
    bench_spin_lock(&l->lock);
    unsigned j = k;
    while (j <= l->max_order && l->head[j] == NIL)
        j++;
    if (j > l->max_order) {
        bench_spin_unlock(&l->lock);
        return NULL;
    }
    uint32_t i = l->head[j];
    list_remove(l, i, j);
    while (j > k) { /* split: keep the lower half, free the upper */
        j--;
        list_push(l, i + ((uint32_t)1 << j), j);
    }
    l->u[i].state = UNIT_USED;
    l->u[i].order = (uint8_t)k;
    l->free_units -= (size_t)1 << k;
    bench_spin_unlock(&l->lock);
    return (void *)(l->base + ((uintptr_t)i << l->shift));
}

static void *ls_alloc(void *inst, size_t size)
{
    lists_t *l = inst;
    unsigned k = 0;
    while (((size_t)1 << (k + l->shift)) < size)
        k++;
    return ls_alloc_order(inst, k);
}

static void ls_free(void *inst, void *p)
{
    lists_t *l = inst;
    if (!p)
        return;
    uint32_t i = (uint32_t)(((uintptr_t)p - l->base) >> l->shift);
    bench_spin_lock(&l->lock);
    if (l->u[i].state != UNIT_USED) { /* not a live block: ignore, as nbbs_free */
        bench_spin_unlock(&l->lock);
        return;
    }
    unsigned k = l->u[i].order;
    l->free_units += (size_t)1 << k;
    while (k < l->max_order) { /* merge while the buddy is a free block of the same order */
        uint32_t b = i ^ ((uint32_t)1 << k);
        if (l->u[b].state != UNIT_FREE || l->u[b].order != k)
            break;
        list_remove(l, b, k);
        if (b < i) {
            l->u[i].state = UNIT_NONE;
            i = b;
        }
        k++;
    }
    list_push(l, i, k);
    bench_spin_unlock(&l->lock);
}

static void ls_stats(void *inst, bench_heap_stats_t *out)
{
    lists_t *l = inst;
    size_t unit = (size_t)1 << l->shift;
    out->free_bytes = l->free_units * unit;
    out->largest_free = 0;
    for (unsigned k = 0; k <= l->max_order; k++)
        if (l->head[k] != NIL)
            out->largest_free = unit << k;
    out->meta_bytes = sizeof *l + l->nunits * sizeof *l->u;
}

const bench_allocator_t bench_alloc_lists_sl = {
    .name = "lists-sl", .help = "Linux-style buddy: per-order free lists, split/merge, one spin lock",
    .baseline = 1,
    .create = ls_create, .destroy = ls_destroy, .alloc = ls_alloc, .alloc_order = ls_alloc_order,
    .free = ls_free, .stats = ls_stats,
};
BENCH_ALLOCATOR(bench_alloc_lists_sl);
