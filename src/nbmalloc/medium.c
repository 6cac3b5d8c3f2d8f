/*
 * medium.c - medium blocks: back-end blocks handed to the user whole, their
 * checks, and the caches that keep freed ones by the memory policy.
 *
 * Medium blocks (NBM_SMALL_MAX < size <= NBM_MEDIUM_MAX, or aligned requests)
 * are back-end blocks of the smallest order that holds max(size, align): the
 * back-end aligns a block to its size, and an arena base is 1 GiB aligned.
 * The page_order byte of the first page says the block is the user's; free
 * sets its bit 7 with a CAS (of two racing frees one wins, the other sees a
 * double free), and the byte is cleared when the block goes back to the
 * back-end, so an interior or never handed-out pointer finds 0.
 *
 * Decay. A thread keeps its last freed medium block of each order up to
 * 512 KiB for its next request of that order (no atomic RMW but the
 * page-byte exchange). Other freed medium blocks are kept on a per-order
 * stack (a descriptor holding the block) and reused first by the next
 * request of that order. How many are kept is the memory policy's (decay.c,
 * one policy per order; a block in a thread's slot counts as in use): once
 * per epoch (NBM_PURGE_DELAY_MS / 4) a medium call sweeps, and each order
 * whose cache holds more than its peak of the last window needs gives back
 * about half of the excess, oldest blocks first, madvise'd away. An optional
 * fixed cap (NBM_MEDIUM_CACHE_MB) bounds the cached bytes on top.
 */
#include <string.h>

#include "internal.h"

static nbm_stack_t decay[NBM_MAX_ORDER + 1];
static nbm_decay_t policy[NBM_MAX_ORDER + 1]; /* one per order: blocks of one order are interchangeable */
static _Atomic uint64_t last_sweep;

static _Atomic uint8_t *page_byte(nbm_arena_t *ar, const void *p)
{
    return &ar->page_order[((uintptr_t)p - ar->base) >> NBM_PAGE_SHIFT];
}

static unsigned order_for(size_t n)
{
    if (n <= NBM_PAGE)
        return 0;
    return 64u - (unsigned)__builtin_clzll((n - 1) >> NBM_PAGE_SHIFT);
}

#define NBM_REUSE_UP_MIN 2 /* requests of 16 KiB and up may reuse a larger cached block */

#define NBM_PAGE_UNITS ((char *)1) /* a cached block's desc->bump: its unit words are still a page's */
static void cache_put(void *p, unsigned order, bool page);

static _Thread_local uint32_t slot_hits NBM_TLS; /* this thread's hits on its own medium slots */

/* Once per epoch, one caller sweeps the caches by the policy. */
static void maybe_sweep(uint64_t now)
{
    if (NBM_UNLIKELY(nbm__decay_due(&last_sweep, now)))
        nbm__decay_sweep(false);
}

void nbm__medium_tick(uint64_t now)
{
    maybe_sweep(now);
}

/* Fast case (no atomic RMW): the thread's own last freed block of this
 * order. Then the shared decay cache (one CAS), then the back-end. */
void *nbm__medium_alloc(size_t size, size_t align, bool *fresh, nbm_tcache_t *tc)
{
    unsigned order = order_for(size > align ? size : align);
    void *p;
    if (tc && order < NBM_MCACHE_ORDERS && tc->mcache[order]) {
        p = tc->mcache[order];
        tc->mcache[order] = NULL;
        *fresh = false;
        /* The policy's clock is read every 16th hit only (a clock read cost
         * about a quarter of this path); a program living on its own slots
         * still sweeps. */
        if (NBM_UNLIKELY((++slot_hits & 15) == 0))
            maybe_sweep(nbm__os_now_ns());
    } else {
        uint64_t now = nbm__os_now_ns();
        uint32_t d = nbm__stack_pop(&decay[order], &nbm__desc_pool);
        /* A request takes a cached block up to two orders larger
         * before new memory: its pages are already there, and orders of one
         * working set would otherwise each keep their own peak's worth. */
        for (unsigned up = 1; !d && order >= NBM_REUSE_UP_MIN && up <= 2 && order + up <= NBM_MAX_ORDER; up++)
            if ((d = nbm__stack_pop(&decay[order + up], &nbm__desc_pool)) != 0)
                order += up;
        if (d) {
            p = nbm__desc(d)->list;
            if (nbm__desc(d)->bump == NBM_PAGE_UNITS)
                nbm__page_forget(p, order); /* a page's block becomes a medium block */
            nbm_stat_sub(&nbm__gstats.medium_cached, NBM_PAGE << order);
            nbm__decay_unhold(&policy[order], NBM_PAGE << order);
            nbm__desc_put(tc, d);
            *fresh = false;
        } else {
            uint32_t any = 0;
            p = nbm__block_alloc(order, tc ? &tc->arena_hint : &any);
            if (!p)
                return NULL;
            *fresh = true; /* never used, or purged before it went back */
        }
        nbm__decay_take(&policy[order], NBM_PAGE << order, now);
        maybe_sweep(now);
    }
    nbm_arena_t *ar = (nbm_arena_t *)nbm__owner((uintptr_t)p);
    /* Relaxed: read by a free, which the user orders after this return. */
    nbm_store_u8_relaxed(page_byte(ar, p), (uint8_t)(order + 1));
    if (tc)
        tc->medium_delta++;
    else
        nbm_stat_add(&nbm__gstats.medium_live, 1);
    return p;
}

/* A free block of the medium cache (a freed medium block, or an exited
 * thread's spare page), taken for a new page; NULL when none. Its page byte
 * is cleared; the unit words are the caller's to set. */
void *nbm__block_cached(unsigned order)
{
    uint32_t d = nbm__stack_pop(&decay[order], &nbm__desc_pool);
    if (!d)
        return NULL;
    void *p = nbm__desc(d)->list;
    nbm_stat_sub(&nbm__gstats.medium_cached, NBM_PAGE << order);
    nbm__desc_put(nbm__tc, d);
    /* Relaxed: the block is ours alone (popped by the CAS above). */
    nbm_store_u8_relaxed(page_byte((nbm_arena_t *)nbm__owner((uintptr_t)p), p), 0);
    return p;
}

/* Blocks of pages of NBM_SHARED_ORDER and up (large classes) share the
 * medium cache and its policy: counted in use while they are pages, given
 * back by nbm__medium_release. A cached block for a new page (its page byte
 * cleared), or NULL. */
void *nbm__medium_page_take(unsigned order)
{
    void *p = nbm__block_cached(order);
    if (p) {
        nbm__decay_unhold(&policy[order], NBM_PAGE << order);
        nbm__decay_take(&policy[order], NBM_PAGE << order, nbm__os_now_ns());
    }
    return p;
}

/* An empty page's block (unit words kept) to the cache, marked as a freed
 * block's. */
void nbm__medium_page_give(void *p, unsigned order)
{
    /* Relaxed: the block is ours alone until the cache's CAS publishes it. */
    nbm_store_u8_relaxed(page_byte((nbm_arena_t *)nbm__owner((uintptr_t)p), p), (uint8_t)((order + 1) | NBM_PAGE_FREED));
    cache_put(p, order, true);
}

/* A page block of the order came from the back-end: counted in use. */
void nbm__medium_page_new(unsigned order)
{
    nbm__decay_take(&policy[order], NBM_PAGE << order, nbm__os_now_ns());
}

/* The order of the live medium block at p. A pointer that is not a page
 * start, or whose page byte is 0 (interior, never handed out, past the
 * arena's end, back in the back-end) is `who`; a block freed and still cached
 * is `freed`. With take, marks the block freed (CAS: one of two racing frees). */
static unsigned medium_order(nbm_arena_t *ar, const void *p, const char *who, const char *freed, bool take)
{
    uintptr_t off = (uintptr_t)p - ar->base;
    if (off & (NBM_PAGE - 1))
        nbm__fatal(who, p);
    _Atomic uint8_t *slot = page_byte(ar, p);
    uint8_t o1 = nbm_load_u8_relaxed(slot);
    for (;;) {
        if (o1 == 0)
            nbm__fatal(who, p);
        if (o1 & NBM_PAGE_FREED)
            nbm__fatal(freed, p);
        if (!take || nbm_cas_u8(slot, &o1, (uint8_t)(o1 | NBM_PAGE_FREED)))
            return o1 - 1u;
    }
}

size_t nbm__medium_size(nbm_arena_t *ar, const void *p, const char *who, const char *freed)
{
    return NBM_PAGE << medium_order(ar, p, who, freed, false);
}

static void release(nbm_arena_t *ar, void *p, unsigned order)
{
    nbm__page_forget(p, order); /* a cached page's (a no-op store of 0 for others) */
    /* Relaxed: the block is ours alone; the back-end's CAS publishes it. */
    nbm_store_u8_relaxed(page_byte(ar, p), 0);
    nbm__os_purge(p, NBM_PAGE << order);
    nbm_stat_add(&nbm__gstats.purged, NBM_PAGE << order);
    nbm__block_free(ar, p);
}

void nbm__medium_free(nbm_arena_t *ar, void *p, const char *who)
{
    unsigned order = medium_order(ar, p, who, "free(): double free detected for", true);
    nbm_tcache_t *tc = nbm__tc;
    if (tc) {
        tc->medium_delta--;
        if (order < NBM_MCACHE_ORDERS && !tc->mcache[order]) {
            tc->mcache[order] = p;
            return;
        }
    } else {
        nbm_stat_sub(&nbm__gstats.medium_live, 1);
    }
    (void)ar;
    nbm__medium_release(p, order);
}

/* A free medium block leaves use: to the decay cache if the policy keeps
 * blocks at all (and the optional fixed cap has room), else back to the
 * back-end purged. Once per epoch one caller sweeps. With page, the block is
 * an empty page's whose unit words are kept while it is cached (a second
 * free of one of its objects is still a double free); they are cleared when
 * it leaves the cache as a medium block or for the back-end. */
static void cache_put(void *p, unsigned order, bool page)
{
    size_t size = NBM_PAGE << order;
    uint64_t now = nbm__os_now_ns();
    bool keep = nbm__decay_give(&policy[order], size, now);
    uint32_t d = 0;
    if (keep && (nbm__opt.cache_max == UINT64_MAX ||
                 nbm_load_u64_relaxed(&nbm__gstats.medium_cached) + size <= nbm__opt.cache_max))
        d = nbm__desc_get(nbm__tc); /* 0 when out of memory: straight back */
    if (!d) {
        release((nbm_arena_t *)nbm__owner((uintptr_t)p), p, order);
    } else {
        nbm_desc_t *ds = nbm__desc(d);
        ds->list = p;
        ds->count = order;
        ds->bump = page ? NBM_PAGE_UNITS : NULL;
        nbm_stat_add(&nbm__gstats.medium_cached, size);
        /* Counted before it can be popped: a pop's unhold never runs first
         * (held would wrap, and a sweep reading it would return everything). */
        nbm__decay_hold(&policy[order], size);
        nbm__stack_push(&decay[order], &nbm__desc_pool, d, d);
    }
    maybe_sweep(now);
}

void nbm__medium_release(void *p, unsigned order)
{
    cache_put(p, order, false);
}

/* How many cached blocks of `size` the policy returns now, given its excess:
 * while less than half of it (rounded up) went back and a block still fits. */
static size_t blocks_due(size_t excess, size_t size)
{
    size_t due = excess - excess / 2, n = 0;
    while ((n + 1) * size <= excess && n * size < due)
        n++;
    return n;
}

/* Detaches each order's stack, releases what the policy says is beyond the
 * window's peak (all of it if `all`), oldest blocks first (the stack's
 * bottom), and pushes the rest back as one chain. Blocks are ours while
 * detached, so purging them cannot race with a user. */
void nbm__decay_sweep(bool all)
{
    uint64_t now = nbm__os_now_ns();
    nbm_tcache_t *tc = nbm__tc;
    for (unsigned order = 0; order <= NBM_MAX_ORDER; order++) {
        size_t size = NBM_PAGE << order, n = SIZE_MAX;
        if (!all) {
            n = blocks_due(nbm__decay_excess(&policy[order], now), size);
            if (n == 0)
                continue;
        }
        uint32_t d = nbm__stack_pop_all(&decay[order]);
        size_t count = 0;
        for (uint32_t k = d; k; k = nbm_load_u32_relaxed(&nbm__desc(k)->next))
            count++;
        size_t keep = count > n ? count - n : 0;
        uint32_t keep_first = keep ? d : 0, keep_last = 0;
        for (size_t i = 0; d; i++) {
            nbm_desc_t *ds = nbm__desc(d);
            uint32_t next = nbm_load_u32_relaxed(&ds->next);
            if (i < keep) {
                keep_last = d; /* the chain up to here stays linked as it is */
            } else {
                nbm_arena_t *ar = (nbm_arena_t *)nbm__owner((uintptr_t)ds->list);
                nbm_stat_sub(&nbm__gstats.medium_cached, size);
                nbm__decay_unhold(&policy[order], size);
                release(ar, ds->list, order);
                nbm__desc_put(tc, d);
            }
            d = next;
        }
        if (keep_first)
            nbm__stack_push(&decay[order], &nbm__desc_pool, keep_first, keep_last);
    }
}
