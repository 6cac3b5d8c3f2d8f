/*
 * desc.c - tagged Treiber stacks of indices, and the descriptor pool.
 *
 * A stack's top is one 64-bit word: a 32-bit version above a 32-bit node
 * index. Every successful push or pop bumps the version, so a pop that read
 * top, then the node's link, then lost the node to other threads that pushed
 * it back, fails its CAS (ABA needs 2^32 operations inside one pop). Nodes
 * are type-stable records (never unmapped, never user memory), so the stale
 * read of a link is harmless. All of it is lock-free: a CAS fails only when
 * another thread's CAS on the same top succeeded.
 *
 * Nodes live in pools (nbm_pool_t): chunks of records mapped on first use
 * and never unmapped, found through a small static directory. A pool grows
 * with a CAS on its fresh-index counter after the chunks the new indices need
 * are mapped (a thread that loses the race to publish a chunk unmaps its
 * own); a failed mapping is reported as 0, never as an abort.
 *
 * Descriptors: a thread keeps up to NBM_DESC_STASH free ones; beyond that,
 * half go back to the shared free stack as one chain (one CAS); when empty it
 * pops one, or takes a fresh range of indices from the pool.
 */
#include "internal.h"

#define NBM_DESC_SHIFT 12                         /* 4096 descriptors (128 KiB) a chunk */
#define NBM_DESC_MAX   ((uint32_t)1 << 25)        /* 1 GiB of descriptors at most */
#define NBM_DESC_GRAB  32u

static _Atomic uintptr_t desc_chunks[NBM_DESC_MAX >> NBM_DESC_SHIFT];
nbm_pool_t nbm__desc_pool = { .chunks = desc_chunks, .stride = sizeof(nbm_desc_t),
                              .shift = NBM_DESC_SHIFT, .max = NBM_DESC_MAX, .fresh = 1 };
static nbm_stack_t desc_free;

static inline _Atomic uint32_t *link_of(nbm_pool_t *pl, uint32_t i)
{
    return (_Atomic uint32_t *)nbm__pool_rec(pl, i);
}

/* Maps chunk c of the pool if nobody has; false if the mapping fails. */
static bool pool_chunk(nbm_pool_t *pl, uint32_t c)
{
    if (nbm_load_uptr(&pl->chunks[c]))
        return true;
    size_t bytes = pl->stride << pl->shift;
    void *m = nbm__os_map(bytes);
    if (!m)
        return false;
    uintptr_t none = 0;
    if (nbm_cas_uptr(&pl->chunks[c], &none, (uintptr_t)m))
        nbm_stat_add(&pl->mapped, bytes);
    else
        nbm__os_unmap(m, bytes); /* another thread published it first */
    return true;
}

uint32_t nbm__pool_fresh(nbm_pool_t *pl, uint32_t n)
{
    uint32_t f = nbm_load_u32(&pl->fresh);
    for (;;) {
        if (f >= pl->max || pl->max - f < n)
            return 0;
        for (uint32_t c = f >> pl->shift; c <= (f + n - 1) >> pl->shift; c++)
            if (!pool_chunk(pl, c))
                return 0;
        if (nbm_cas_u32(&pl->fresh, &f, f + n))
            return f;
    }
}

/* Pushes the chain first..last (already linked through the nodes). The
 * relaxed store of last's link is published by the seq_cst CAS on top. */
void nbm__stack_push(nbm_stack_t *s, nbm_pool_t *pl, uint32_t first, uint32_t last)
{
    uint64_t old = nbm_load_u64(&s->top);
    for (;;) {
        nbm_store_u32_relaxed(link_of(pl, last), (uint32_t)old);
        uint64_t nw = ((old >> 32) + 1) << 32 | first;
        if (nbm_cas_u64(&s->top, &old, nw))
            return;
    }
}

/* Returns a node index, or 0 when empty. The link is read relaxed: if the
 * node was popped and reused meanwhile, the version changed and the CAS
 * fails; if not, the seq_cst load of top ordered the pusher's link store. */
uint32_t nbm__stack_pop(nbm_stack_t *s, nbm_pool_t *pl)
{
    uint64_t old = nbm_load_u64(&s->top);
    for (;;) {
        uint32_t i = (uint32_t)old;
        if (i == 0)
            return 0;
        uint32_t next = nbm_load_u32_relaxed(link_of(pl, i));
        uint64_t nw = ((old >> 32) + 1) << 32 | next;
        if (nbm_cas_u64(&s->top, &old, nw))
            return i;
    }
}

/* Detaches the whole chain; returns its first index (0 when empty). */
uint32_t nbm__stack_pop_all(nbm_stack_t *s)
{
    uint64_t old = nbm_load_u64(&s->top);
    for (;;) {
        if ((uint32_t)old == 0)
            return 0;
        uint64_t nw = ((old >> 32) + 1) << 32;
        if (nbm_cas_u64(&s->top, &old, nw))
            return (uint32_t)old;
    }
}

/* A free descriptor, or 0 when none can be mapped. */
uint32_t nbm__desc_get(nbm_thread_t *thr)
{
    if (thr && thr->ndesc)
        return thr->desc[--thr->ndesc];
    uint32_t d = nbm__stack_pop(&desc_free, &nbm__desc_pool);
    if (d)
        return d;
    if (!thr)
        return nbm__pool_fresh(&nbm__desc_pool, 1);
    uint32_t first = nbm__pool_fresh(&nbm__desc_pool, NBM_DESC_GRAB);
    if (!first)
        return nbm__pool_fresh(&nbm__desc_pool, 1); /* 0 when memory is out */
    for (uint32_t k = 1; k < NBM_DESC_GRAB; k++)
        thr->desc[thr->ndesc++] = first + k;
    return first;
}

static void desc_release(nbm_thread_t *thr, uint32_t keep)
{
    if (thr->ndesc <= keep)
        return;
    uint32_t first = thr->desc[keep], last = first;
    for (uint32_t k = keep + 1; k < thr->ndesc; k++) {
        nbm_store_u32_relaxed(&nbm__desc(last)->next, thr->desc[k]);
        last = thr->desc[k];
    }
    thr->ndesc = keep;
    nbm__stack_push(&desc_free, &nbm__desc_pool, first, last);
}

void nbm__desc_put(nbm_thread_t *thr, uint32_t d)
{
    if (!thr) {
        nbm__stack_push(&desc_free, &nbm__desc_pool, d, d);
        return;
    }
    if (thr->ndesc == NBM_DESC_STASH)
        desc_release(thr, NBM_DESC_STASH / 2);
    thr->desc[thr->ndesc++] = d;
}

void nbm__desc_flush(nbm_thread_t *thr)
{
    desc_release(thr, 0);
}
