/*
 * nbbs_cache.c - per-CPU frame caches in front of the tree, and the reclaim
 * of cached blocks under pressure. Freestanding: caller-provided memory, no
 * libc, no TLS, no globals. docs/design.md, "Frame caches", has the argument.
 *
 * A cached block stays allocated in the tree; its index byte carries
 * NBBS_IDX_CACHED. The cache keeps, per order, a stack of leaf numbers that
 * only its owner writes. Those entries are hints, not ownership: a block
 * named there belongs to whoever clears its CACHED bit with a CAS (the owner
 * popping it, a drain, or an allocation elsewhere that found the tree
 * empty). An entry whose CAS fails was taken by someone else and is dropped.
 * So stealing needs no cooperation from the owner and the owner needs no
 * lock: one CAS per cached alloc, one per cached free.
 */
#include "nbbs_atomic.h"
#include "nbbs_internal.h"

#define CACHE_MAGIC UINT64_C(0x6e6262732d636331) /* "nbbs-cc1" */
#define CACHE_MAX_CAPACITY (1u << 20)
#define ALIGN_UP(x, a) (((x) + ((size_t)(a) - 1)) & ~((size_t)(a) - 1))

struct nbbs_cache {
    uint64_t               magic;
    nbbs_t                *b;
    NBBS_ATOMIC(uint64_t)  next;     /* the next cache attached to b; set before the cache is published */
    unsigned               orders, batch, capacity;
    /* Per order: how many entries of its stack are in use. Written by the
     * owner only; read by other threads as a bound of their sweep. */
    NBBS_ATOMIC(uint64_t)  count[NBBS_CACHE_MAX_ORDERS];
    NBBS_ATOMIC(uint64_t) *slot;     /* orders stacks of capacity leaf numbers */
};

typedef struct {
    unsigned orders, batch, capacity;
    size_t   size;
} cache_geom_t;

static bool cache_geometry(const nbbs_cache_config_t *cfg, cache_geom_t *g)
{
    nbbs_cache_config_t c = { 0, 0, 0 };
    if (cfg)
        c = *cfg;
    g->orders = c.orders ? c.orders : 4;
    g->batch = c.batch ? c.batch : 16;
    g->capacity = c.capacity ? c.capacity : 4 * g->batch;
    if (g->orders > NBBS_CACHE_MAX_ORDERS || g->batch > CACHE_MAX_CAPACITY ||
        g->capacity > CACHE_MAX_CAPACITY || g->capacity < g->batch)
        return false;
    g->size = ALIGN_UP(sizeof(struct nbbs_cache), NBBS_CACHE_ALIGN) +
              (size_t)g->orders * g->capacity * sizeof(uint64_t);
    return true;
}

size_t nbbs_cache_size(const nbbs_cache_config_t *cfg)
{
    cache_geom_t g;
    return cache_geometry(cfg, &g) ? g.size : 0;
}

static inline nbbs_cache_t *cache_of(uint64_t v) { return (nbbs_cache_t *)(uintptr_t)v; }

static inline NBBS_ATOMIC(uint64_t) *stack_of(nbbs_cache_t *c, unsigned order)
{
    return c->slot + (size_t)order * c->capacity;
}

static inline void *addr_of(const nbbs_t *b, uint64_t leaf)
{
    return (void *)(b->base + ((uintptr_t)leaf << b->min_shift));
}

/* Take the cached block of this order at leaf: its index byte goes from
 * "cached" to v (order + 1: the block is the caller's; 0: it is on its way
 * back to the tree). False if the block is not cached with this order any
 * more (someone else took it). */
static inline bool claim(const nbbs_t *b, uint64_t leaf, unsigned order, uint8_t v)
{
    uint8_t want = (uint8_t)((order + 1u) | NBBS_IDX_CACHED);
    /* Look first: a stale entry costs a load, not a failed locked CAS, and a
     * CAS that fails then failed because another thread took the block
     * between the two (the explorer checks exactly that of every CAS). */
    if (nb_load_u8(&b->index[leaf]) != want)
        return false;
    return nb_cas_u8(&b->index[leaf], &want, v);
}

/* Claim a cached block and give it back to the tree. The claim takes the
 * index entry straight from "cached" to 0, so the block never looks live on
 * its way back (a double free of it is refused throughout: the explorer's
 * cache-dfree-tree found the window an intermediate live value opened), and
 * the rest is nbbs_free's own (hint cell, release, whatever else a free
 * records for the placement). */
static bool give_back(nbbs_t *b, uint64_t leaf, unsigned order)
{
    if (leaf >= b->nleaves || !claim(b, leaf, order, 0))
        return false;
    nbbs__free_leaf(b, leaf, order);
    return true;
}

nbbs_cache_t *nbbs_cache_init(void *mem, size_t size, nbbs_t *b, const nbbs_cache_config_t *cfg)
{
    cache_geom_t g;
    if (!mem || !b || b->magic != NBBS_MAGIC || !cache_geometry(cfg, &g))
        return NULL;
    if (!cfg || !cfg->orders) /* the default fits any instance */
        g.orders = g.orders <= b->max_order + 1 ? g.orders : b->max_order + 1;
    if (((uintptr_t)mem & (NBBS_CACHE_ALIGN - 1)) || size < g.size || g.orders == 0 ||
        g.orders > b->max_order + 1)
        return NULL;
    uint64_t head = nb_list_load(&b->caches);
    for (uint64_t x = head; x; x = nb_own_load(&cache_of(x)->next))
        if (cache_of(x) == (nbbs_cache_t *)mem)
            return NULL; /* attached already: a second push would make the list a cycle */

    nbbs_cache_t *c = (nbbs_cache_t *)mem;
    c->magic = CACHE_MAGIC;
    c->b = b;
    c->orders = g.orders;
    c->batch = g.batch;
    c->capacity = g.capacity;
    c->slot = (NBBS_ATOMIC(uint64_t) *)((char *)mem + ALIGN_UP(sizeof(struct nbbs_cache), NBBS_CACHE_ALIGN));
    for (unsigned k = 0; k < NBBS_CACHE_MAX_ORDERS; k++)
        nb_init_store(&c->count[k], 0);
    /* Every entry starts as a valid leaf (0), so a sweep that reads an entry
     * beyond what the owner has written so far still names a leaf. */
    for (size_t i = 0; i < (size_t)g.orders * g.capacity; i++)
        nb_init_store(&c->slot[i], 0);
    /* Attach: a push onto b's list. The seq_cst CAS publishes the fields
     * above to every thread that reaches c through the list. */
    for (;;) {
        nb_init_store(&c->next, head);
        if (nb_cas_u64(&b->caches, &head, (uint64_t)(uintptr_t)c))
            return c;
    }
}

nbbs_t *nbbs_cache_instance(const nbbs_cache_t *c) { return c ? c->b : NULL; }

/* The stack is empty: refill it with up to batch blocks from the tree (the
 * tree's placement, from the caller's context and hint cell) and return the
 * first, or reclaim from other caches if the tree has none. */
static void *refill(nbbs_cache_t *c, unsigned order)
{
    nbbs_t *b = c->b;
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    void *first = nbbs__tree_or_bunch_alloc(b, order);
    if (!first)
        return nbbs__reclaim(b, order);
    uint64_t n = 0;
    while (n + 1 < c->batch) {
        void *p = nbbs__tree_or_bunch_alloc(b, order);
        if (!p)
            break;
        uint64_t leaf = (uint64_t)((uintptr_t)p - b->base) >> b->min_shift;
        /* Ours alone (just allocated, nobody else has the pointer): a store
         * marks it cached. Release, so a thread that claims it by CAS sees
         * the tree's allocation before it. */
        nb_store_rel_u8(&b->index[leaf], (uint8_t)((order + 1u) | NBBS_IDX_CACHED));
        nb_own_store(&s[n++], leaf);
    }
    nb_own_store(&c->count[order], n);
    return first;
}

void *nbbs_cache_alloc(nbbs_cache_t *c, unsigned order)
{
    if (!c)
        return NULL;
    if (order >= c->orders)
        return nbbs_alloc_order(c->b, order);
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    uint64_t n = nb_own_load(&c->count[order]);
    while (n) {
        uint64_t leaf = nb_own_load(&s[--n]);
        if (claim(c->b, leaf, order, (uint8_t)(order + 1u))) {
            nb_own_store(&c->count[order], n);
            return addr_of(c->b, leaf);
        }
        /* taken by another thread under pressure, or drained: drop it */
    }
    return refill(c, order);
}

/* The stack of this order is full (n == capacity): give the batch it has
 * held longest (the bottom entries) back to the tree and move the rest down.
 * Whole batches, so blocks that were refilled together from one huge block
 * go back together and can coalesce. Returns the new count. */
static uint64_t drain_oldest(nbbs_cache_t *c, unsigned order, uint64_t n)
{
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    uint64_t k = c->batch;
    for (uint64_t i = 0; i < k; i++)
        give_back(c->b, nb_own_load(&s[i]), order);
    for (uint64_t i = k; i < n; i++)
        nb_own_store(&s[i - k], nb_own_load(&s[i]));
    return n - k;
}

int nbbs_cache_free(nbbs_cache_t *c, void *p)
{
    if (!p)
        return 0;
    if (!c)
        return NBBS_EINVAL;
    nbbs_t *b = c->b;
    uint64_t leaf = nbbs__leaf_of(b, p);
    if (leaf == UINT64_MAX)
        return NBBS_EINVAL;
    uint8_t v = nb_load_u8(&b->index[leaf]);
    if (v == 0 || (v & NBBS_IDX_CACHED))
        return NBBS_EINVAL; /* not a live block, or already in a cache: a double free */
    unsigned order = v - 1u;
    if (order >= c->orders)
        return nbbs_free(b, p);
    /* The CAS is what makes two frees of one block exclusive (nbbs_free
     * takes the byte by CAS too), and it releases the block's contents. */
    if (!nb_cas_u8(&b->index[leaf], &v, (uint8_t)(v | NBBS_IDX_CACHED)))
        return NBBS_EINVAL; /* a concurrent free of the same block won */
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    uint64_t n = nb_own_load(&c->count[order]);
    if (n == c->capacity)
        n = drain_oldest(c, order, n);
    nb_own_store(&s[n], leaf);
    nb_own_store(&c->count[order], n + 1);
    return 0;
}

size_t nbbs_cache_drain(nbbs_cache_t *c)
{
    if (!c)
        return 0;
    size_t done = 0;
    for (unsigned k = 0; k < c->orders; k++) {
        NBBS_ATOMIC(uint64_t) *s = stack_of(c, k);
        uint64_t n = nb_own_load(&c->count[k]);
        for (uint64_t i = 0; i < n; i++)
            done += give_back(c->b, nb_own_load(&s[i]), k);
        nb_own_store(&c->count[k], 0);
    }
    return done;
}

/* Any thread: give back every block any cache of b holds. The entries it
 * reads may be stale or change under it (the owner pushes and pops); only
 * blocks whose CAS succeeds are given back, so a stale entry costs a failed
 * CAS and nothing else. */
size_t nbbs_reclaim_cached(nbbs_t *b)
{
    if (!b)
        return 0;
    size_t done = 0;
    for (uint64_t x = nb_list_load(&b->caches); x; x = nb_own_load(&cache_of(x)->next)) {
        nbbs_cache_t *c = cache_of(x);
        for (unsigned k = 0; k < c->orders; k++) {
            NBBS_ATOMIC(uint64_t) *s = stack_of(c, k);
            uint64_t n = nb_own_load(&c->count[k]);
            if (n > c->capacity)
                n = c->capacity;
            for (uint64_t i = 0; i < n; i++)
                done += give_back(b, nb_own_load(&s[i]), k);
        }
    }
    return done;
}

void *nbbs__reclaim(nbbs_t *b, unsigned order)
{
    uint64_t head = nb_list_load(&b->caches);
    if (!head)
        return NULL; /* no cache: the tree's answer stands */
    /* 1. A cached block of exactly this order, from any cache: one CAS. */
    for (uint64_t x = head; x; x = nb_own_load(&cache_of(x)->next)) {
        nbbs_cache_t *c = cache_of(x);
        if (order >= c->orders)
            continue;
        NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
        uint64_t n = nb_own_load(&c->count[order]);
        if (n > c->capacity)
            n = c->capacity;
        while (n) { /* from the top: the owner's pops meet us last */
            uint64_t leaf = nb_own_load(&s[--n]);
            if (leaf < b->nleaves && claim(b, leaf, order, (uint8_t)(order + 1u)))
                return addr_of(b, leaf);
        }
    }
    /* 2. None: smaller (or other) cached blocks may coalesce into one. Give
     * every cached block back and scan the tree once more. */
    if (nbbs_reclaim_cached(b) == 0)
        return NULL;
    return nbbs__tree_or_bunch_alloc(b, order);
}
