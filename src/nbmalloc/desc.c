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
 * Descriptors come from one reserved array of NBM_DESC_MAX records. A thread
 * keeps up to NBM_DESC_STASH free ones; beyond that, half go back to the
 * shared free stack as one chain (one CAS); when empty it pops one, or takes a
 * fresh range of indices with one fetch-add.
 */
#include "internal.h"

#define NBM_DESC_MAX  ((uint32_t)1 << 25) /* 1 GiB of address space, touched as used */
#define NBM_DESC_GRAB 32u

nbm_desc_t *nbm__descs;
static _Atomic uint32_t desc_fresh = 1; /* next never-used index; 0 is "none" */
static nbm_stack_t desc_free;

static inline _Atomic uint32_t *link_of(char *base, size_t stride, uint32_t i)
{
    return (_Atomic uint32_t *)(base + (size_t)i * stride);
}

/* Pushes the chain first..last (already linked through the nodes). The
 * relaxed store of last's link is published by the seq_cst CAS on top. */
void nbm__stack_push(nbm_stack_t *s, char *base, size_t stride, uint32_t first, uint32_t last)
{
    uint64_t old = nbm_load_u64(&s->top);
    for (;;) {
        nbm_store_u32_relaxed(link_of(base, stride, last), (uint32_t)old);
        uint64_t nw = ((old >> 32) + 1) << 32 | first;
        if (nbm_cas_u64(&s->top, &old, nw))
            return;
    }
}

/* Returns a node index, or 0 when empty. The link is read relaxed: if the
 * node was popped and reused meanwhile, the version changed and the CAS
 * fails; if not, the seq_cst load of top ordered the pusher's link store. */
uint32_t nbm__stack_pop(nbm_stack_t *s, char *base, size_t stride)
{
    uint64_t old = nbm_load_u64(&s->top);
    for (;;) {
        uint32_t i = (uint32_t)old;
        if (i == 0)
            return 0;
        uint32_t next = nbm_load_u32_relaxed(link_of(base, stride, i));
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

void nbm__desc_init(void)
{
    nbm__descs = nbm__os_map((size_t)NBM_DESC_MAX * sizeof(nbm_desc_t));
    if (!nbm__descs)
        nbm__fatal("cannot reserve descriptors, size", (void *)((size_t)NBM_DESC_MAX * sizeof(nbm_desc_t)));
}

static uint32_t desc_fresh_range(uint32_t n)
{
    uint32_t i = nbm_add_u32(&desc_fresh, n);
    if (i > NBM_DESC_MAX - n)
        nbm__fatal("out of batch descriptors at index", (void *)(uintptr_t)i);
    return i;
}

uint32_t nbm__desc_get(nbm_tcache_t *tc)
{
    if (tc && tc->ndesc)
        return tc->desc[--tc->ndesc];
    uint32_t d = nbm__stack_pop(&desc_free, (char *)nbm__descs, sizeof(nbm_desc_t));
    if (d)
        return d;
    if (!tc)
        return desc_fresh_range(1);
    uint32_t first = desc_fresh_range(NBM_DESC_GRAB);
    for (uint32_t k = 1; k < NBM_DESC_GRAB; k++)
        tc->desc[tc->ndesc++] = first + k;
    return first;
}

static void desc_release(nbm_tcache_t *tc, uint32_t keep)
{
    if (tc->ndesc <= keep)
        return;
    uint32_t first = tc->desc[keep], last = first;
    for (uint32_t k = keep + 1; k < tc->ndesc; k++) {
        nbm_store_u32_relaxed(&nbm__desc(last)->next, tc->desc[k]);
        last = tc->desc[k];
    }
    tc->ndesc = keep;
    nbm__stack_push(&desc_free, (char *)nbm__descs, sizeof(nbm_desc_t), first, last);
}

void nbm__desc_put(nbm_tcache_t *tc, uint32_t d)
{
    if (!tc) {
        nbm__stack_push(&desc_free, (char *)nbm__descs, sizeof(nbm_desc_t), d, d);
        return;
    }
    if (tc->ndesc == NBM_DESC_STASH)
        desc_release(tc, NBM_DESC_STASH / 2);
    tc->desc[tc->ndesc++] = d;
}

void nbm__desc_flush(nbm_tcache_t *tc)
{
    desc_release(tc, 0);
}
