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
 *
 * Bulk refill (orders below NBBS_CARVE_ORDER): a refill takes whole blocks
 * of NBBS_CARVE_ORDER (8 leaves) from the tree, one tree operation each, and
 * carves them into frames of the wanted order. The tree keeps such a block
 * as one live block; its 8 index bytes (one aligned 64-bit word) carry
 * NBBS_IDX_CARVED and describe its frames, each live (order + 1 | CARVED)
 * or free (| CACHED). A free frame is named on some cache's stack, or on
 * none (a drain or an nbbs_free left it there); either way whoever takes it
 * does so with one CAS. The block goes back to the tree whole, with one CAS
 * on its word, as soon as a drain, a free or a reclaim finds all its frames
 * free; until then its free frames are found under pressure by a scan of
 * the index words. The carved blocks' own code: nbbs_carve.c.
 */

#include "nbbs_cache_int.h"

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
    c->cgroup = 0;
    c->cbal = 0;
    /* The owner's plain fields are zeroed through volatile pointers: a loop
     * of plain zero stores may become a call to memset, which the
     * freestanding core must not need (scripts/test.d/10-freestanding.sh). */
    volatile unsigned *backoff = c->backoff, *lean = c->lean, *dry = c->dry, *nparts = c->nparts, *ptop = c->ptop;
    volatile uint64_t *swept = c->swept, *cursor = c->cursor, *pattern = c->pattern, *lost = &c->lost[0][0];
    volatile bool *stranded = c->stranded;
    for (unsigned k = 0; k < NBBS_CACHE_MAX_ORDERS; k++) {
        if (k < NBBS_CARVE_ORDER) {
            nparts[k] = 0;
            ptop[k] = 0;
            cursor[k] = 0;
            carve_word_t x;
            x.w = 0;
            for (unsigned j = 0; j < CARVE_LEAVES; j += 1u << k)
                x.by[j] = (uint8_t)((k + 1u) | NBBS_IDX_CARVED | NBBS_IDX_CACHED);
            pattern[k] = x.w;
            stranded[k] = false;
            swept[k] = 0;
            for (unsigned j = 0; j < CACHE_LOST_WORDS; j++)
                lost[k * CACHE_LOST_WORDS + j] = 0;
            dry[k] = 0;
        }
        backoff[k] = 0;
        lean[k] = 0;
        unsigned per = 1u << (NBBS_CARVE_ORDER - (k < NBBS_CARVE_ORDER ? k : 0));
        c->groups[k] = k < g.orders && k < NBBS_CARVE_ORDER && can_carve(b) ? g.batch / per : 0;
    }
    /* The lost map's regions: as few carved blocks each as keep the
     * arena's within its 512 bits. */
    unsigned shift = 0;
    for (uint64_t ng = b->nleaves >> NBBS_CARVE_ORDER; ng > 1 && ((ng - 1) >> shift) >= CACHE_LOST_WORDS * 64;)
        shift++;
    c->lost_shift = shift;
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

/* Whether a live (or cached) block of a larger order than the carve order
 * encloses the free-looking carved block at leaf g0. prev: the index byte
 * of the block before it (g0 - CARVE_LEAVES). If a block of at most the
 * carve order starts there, none encloses g0 (it would enclose that one
 * too: live blocks do not nest), the common case, decided without a load.
 * Else the index bytes at the positions aligned to each larger order below
 * g0 are read, and the first block that starts at one of them decides (one
 * too small to reach g0 rules out every larger one around it). The tree
 * keeps a live block's inside unmarked, so a take there claims the slot,
 * climbs, meets the block and undoes it all (a handful of CAS) to find out:
 * a fifth of take_next's takes in stress did. Only a look: under
 * concurrency a stale byte costs a skipped take, as a failed one would. */
static inline bool enclosed_live(const nbbs_t *b, uint64_t g0, uint8_t prev)
{
    if (prev && (prev & NBBS_IDX_ORDER) <= NBBS_CARVE_ORDER + 1u)
        return false;
    for (unsigned k = (unsigned)__builtin_ctzll(g0) + 1u; k <= b->max_order; k++) {
        uint8_t v = nb_load_u8(&b->index[g0 & ~((UINT64_C(1) << k) - 1)]);
        if (v)
            return (v & NBBS_IDX_ORDER) > k; /* order + 1 > k: order >= k, reaching g0 */
    }
    return false;
}

/* A block of this order from the tree's search for the cache: one of the
 * carve order stays on its group's free count, on this cache's balance
 * (cache_count_take), instead of an RMW that takes it off. */
static void *tree_take(nbbs_cache_t *c, unsigned order)
{
    nbbs_t *b = c->b;
    if (order != NBBS_CARVE_ORDER || !b->gfree)
        return nbbs__scan(b, order, 0);
    void *p = nbbs__scan(b, order, NBBS_SCAN_UNCOUNTED);
    if (p)
        cache_count_take(c, (uint64_t)((uintptr_t)p - b->base) >> b->min_shift);
    return p;
}

/* The block of the carve order at c->cursor[order], taken in place (one claim
 * and the climb, no search), if the block before it is still carved (so
 * its group is in use: taking here breaks no free group) and both lie in
 * one group; else NULL, and the caller searches. The search would start at
 * this context's last block anyway, so the cache goes on filling the group
 * it is in, block after block, at a fraction of the search's cost. */
static void *take_next(nbbs_cache_t *c, unsigned order)
{
    nbbs_t *b = c->b;
    uint64_t g0 = c->cursor[order], gmask = (UINT64_C(1) << b->group_order) - 1;
    uint8_t prev;
    if (!(g0 & gmask) || !((prev = nb_load_u8(&b->index[g0 - CARVE_LEAVES])) & NBBS_IDX_CARVED))
        return NULL;
    unsigned r = b->max_order - NBBS_CARVE_ORDER;
    /* A block in use there (a claim that fails at once: a load, no CAS) is
     * passed over, a few times, while the group lasts. */
    for (unsigned tries = 0; tries < CACHE_PROBES && (g0 & gmask) && g0 + CARVE_LEAVES <= b->nleaves;
         tries++, g0 += CARVE_LEAVES) {
        uint8_t v = nb_load_u8(&b->index[g0]);
        bool used = v || enclosed_live(b, g0, prev);
        prev = v;
        if (used)
            continue; /* a live or carved block starts there, or encloses it */
        if (nbbs__is_bunch(b) ? nbbs__bunch_take(b, r, g0 >> NBBS_CARVE_ORDER)
                              : nbbs__tree_take(b, r, g0 >> NBBS_CARVE_ORDER))
            return addr_of(b, g0);
    }
    return NULL;
}

/* A search of the tree for a block of order j failed: it had none of that
 * order or larger when the search passed. Near full a failed search walks
 * the whole arena, and each cached order would find that out by a failure
 * of its own, so every order that needs such a block backs off: orders
 * below the carve order stop carving if j <= NBBS_CARVE_ORDER, and orders
 * from j up take one block per refill instead of a batch, for the next
 * CACHE_BACKOFF refills each; if j <= NBBS_CARVE_ORDER, every order does:
 * what free room the tree has left is then pieces smaller than a carved
 * block, a batch's further searches for them walk far (over every carved
 * block on the way), and the pieces a batch holds are missing to the other
 * orders, whose searches then fail (alloc-rnd near full: test_short_small).
 * (A refill that finds no block still ends in the pressure path, so NULL
 * keeps its meaning.) */
static void tree_short(nbbs_cache_t *c, unsigned j)
{
    cache_count_flush(c); /* the tree is short: scans may pass this cache's group by if it is full */
    for (unsigned k = 0; k < c->orders; k++) {
        if (k >= j || j <= NBBS_CARVE_ORDER)
            c->lean[k] = CACHE_BACKOFF;
        if (k < NBBS_CARVE_ORDER && j <= NBBS_CARVE_ORDER && c->groups[k])
            c->backoff[k] = CACHE_BACKOFF;
    }
}

/* The carved blocks with free frames that c's lost map names (orders lo
 * to hi - 1) go into the shared stray bitmap, and the map is cleared: from here on
 * every cache's harvest sees them, not only c's (a private map left them
 * out of the others' reach, and a cache that found nothing carved fresh
 * blocks while such frames sat unused: the churn experiment lost 2 MiB
 * blocks). Each region is read once; the marks of one bitmap word are set
 * by one RMW. Owner only. */
static void lost_to_strays(nbbs_cache_t *c, unsigned lo, unsigned hi)
{
    nbbs_t *b = c->b;
    uint64_t ng = b->nleaves >> NBBS_CARVE_ORDER;
    for (unsigned k = lo; k < hi; k++)
        for (unsigned wi = 0; wi < CACHE_LOST_WORDS; wi++)
            for (uint64_t v = c->lost[k][wi]; v; v &= v - 1) {
                uint64_t r = (uint64_t)wi * 64 + (unsigned)__builtin_ctzll(v);
                uint64_t g = r << c->lost_shift, end = (r + 1) << c->lost_shift;
                end = end < ng ? end : ng;
                while (g < end) {
                    /* The region's blocks in one bitmap word: their marks
                     * gathered without a branch per block (the outcome is
                     * data, and mispredicted), then one RMW if any is new. */
                    uint64_t stop = (g | 63) + 1 < end ? (g | 63) + 1 : end, bits = 0;
                    NBBS_ATOMIC(uint64_t) *w = &b->strays[g >> 6];
                    for (; g < stop; g++) {
                        carve_word_t x;
                        x.w = nb_load_u64(carve_word(b, g << NBBS_CARVE_ORDER));
                        bits |= (uint64_t)carve_any_free(x) << (g & 63);
                    }
                    if (bits && (bits & ~nb_hole_load(w)))
                        nb_hole_or(w, bits);
                }
                c->lost[k][wi] = 0;
            }
}

/* The tree had no block of the carve order lately and the stray bitmap no
 * frame of this order: a frame of it split off a larger free frame, or
 * made of smaller ones, in a carved block that this cache's stacks of the
 * other carved orders name (newest first, each block once), or NULL. Near
 * full, what the tree still has of the small orders is pieces, and its
 * search for them walks far (over every carved block on the way); the
 * frames this cache holds for its other orders are at hand, one CAS on a
 * carved block's word away. A stack entry whose frame this splits or joins
 * is dropped by the pop's claim as any stale entry is. Owner only. */
static void *take_own(nbbs_cache_t *c, unsigned order)
{
    nbbs_t *b = c->b;
    for (unsigned j = 0; j < NBBS_CARVE_ORDER && j < c->orders; j++) {
        if (j == order || !c->groups[j])
            continue;
        NBBS_ATOMIC(uint64_t) *s = stack_of(c, j);
        uint64_t last = UINT64_MAX;
        for (uint64_t n = nb_own_load(&c->count[j]); n;) {
            uint64_t g0 = nb_own_load(&s[--n]) & ~(uint64_t)(CARVE_LEAVES - 1);
            if (g0 == last || g0 >= b->nleaves)
                continue;
            last = g0;
            void *p = nbbs__carve_take_at(b, g0, order);
            if (p)
                return p;
        }
    }
    return NULL;
}

/* The stack is empty: refill it and return one block, or reclaim from
 * other caches if the tree has none. Orders below NBBS_CARVE_ORDER (with
 * batch large enough) take batch / 2^(NBBS_CARVE_ORDER - order) blocks of
 * NBBS_CARVE_ORDER, one tree operation each, and carve them; other orders,
 * or when the tree has no such block, take up to batch blocks one by one.
 * Either way from the tree's placement, from the caller's context and hint
 * cell, so the blocks come from the huge block this context is filling; a
 * batch ends with the first block outside the group its first block came
 * from (near full, a batch from all over the arena held room that larger
 * orders then missed), unless a group holds only one such block.
 * Everything written here is ours alone until the stack names it (nobody
 * else has these addresses): release stores mark the blocks, so a thread
 * that claims one by CAS sees the tree's allocation before it. */
static __attribute__((__noinline__)) void *refill(nbbs_cache_t *c, unsigned order)
{
    nbbs_t *b = c->b;
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    void *first = NULL;
    uint64_t n = 0;
    unsigned groups = c->groups[order];
    if (groups && c->stranded[order]) {
        /* Frames drains left in carved blocks come first (the blocks
         * the stray bitmap marks, after the regions this cache's lost
         * map names are published there), until harvests have found
         * none. */
        uint64_t looked = 0, max = c->capacity - c->batch > c->batch ? c->capacity - c->batch : c->batch;
        lost_to_strays(c, order, order + 1);
        uint64_t got = nbbs__carve_harvest(c->b, s, order, max, &looked);
        if (got)
            c->swept[order] = 0;
        else if ((c->swept[order] += looked) >= (b->nleaves >> NBBS_CARVE_ORDER))
            c->stranded[order] = false;
        while (got) {
            uint64_t leaf = nb_own_load(&s[--got]);
            if (claim(b, leaf, order)) {
                nb_own_store(&c->count[order], got);
                return addr_of(b, leaf);
            }
        }
    }
    if (groups && c->backoff[order]) {
        c->backoff[order]--;
        groups = 0;
    }
    if (groups) {
        unsigned per = 1u << (NBBS_CARVE_ORDER - order);
        uint8_t freev = (uint8_t)((order + 1u) | NBBS_IDX_CARVED | NBBS_IDX_CACHED);
        bool inplace = false;
        uint64_t home = 0;
        for (unsigned g = 0; g < groups; g++) {
            void *p = take_next(c, order);
            inplace = p != NULL;
            if (!p)
                p = tree_take(c, NBBS_CARVE_ORDER);
            if (!p) {
                tree_short(c, NBBS_CARVE_ORDER);
                break;
            }
            uint64_t g0 = (uint64_t)((uintptr_t)p - b->base) >> b->min_shift;
            if (inplace) /* FN(take) leaves the group's free count to its caller: the balance */
                cache_count_take(c, g0);
            c->cursor[order] = g0 + CARVE_LEAVES;
            if (!g)
                home = g0 >> b->group_order;
            else if (g0 >> b->group_order != home && b->group_order > NBBS_CARVE_ORDER)
                groups = g + 1; /* left the group: this block is the batch's last */
            carve_word_t x;
            x.w = c->pattern[order];
            unsigned lo = 0;
            if (!first) {
                x.by[0] = (uint8_t)(freev & ~NBBS_IDX_CACHED); /* the caller's */
                first = p;
                lo = 1;
            }
            /* One store replaces the tree's index entry of the whole block
             * (order NBBS_CARVE_ORDER + 1 at g0) by the frames. */
            nb_store_rel_u64(carve_word(b, g0), x.w);
            /* Every frame, the highest first (pops go up the addresses), a
             * loop of per stores whatever lo is: the first block's lowest
             * frame (the caller's) lands just above the count, where nobody
             * reads it and the next block writes over it. */
            uint64_t f = g0 + ((uint64_t)(per - 1u) << order);
            for (unsigned j = 0; j < per; j++, f -= UINT64_C(1) << order)
                nb_own_store(&s[n + j], f);
            n += per - lo;
        }
        /* The context's hint of the carve order names the last block taken,
         * as the tree's own allocation leaves it (FN(taken)): a block taken
         * in place moves it too, so the next search (at the group's end)
         * starts there instead of walking again over the blocks this cache
         * filled since its last search. Not the cursor itself: a hint past
         * the last block taken sent searches into free groups (design.md). */
        if (inplace)
            nb_hint_store(nbbs__hint_order(b, NBBS_CARVE_ORDER), c->cursor[order] - CARVE_LEAVES);
    }
    if (!first && c->groups[order] && c->dry[order])
        c->dry[order]--;
    else if (!first && c->groups[order]) {
        /* No block to carve: free frames other carved blocks hold (a
         * drain left them there, or nbbs_free), near this context's hint
         * first. A harvest that looked at every marked block and found
         * none is not repeated for the next CACHE_BACKOFF refills (the
         * pressure path still finds such frames before NULL). */
        uint64_t looked;
        uint64_t got = nbbs__carve_harvest(c->b, stack_of(c, order), order, c->batch, &looked);
        if (!got && looked >= (b->nleaves >> NBBS_CARVE_ORDER))
            c->dry[order] = CACHE_BACKOFF;
        while (got) {
            uint64_t leaf = nb_own_load(&s[--got]);
            if (claim(b, leaf, order)) {
                nb_own_store(&c->count[order], got);
                return addr_of(b, leaf);
            }
        }
    }
    if (!first && c->groups[order]) {
        /* Still nothing: the tree is out of carve-order blocks (or was
         * lately), so its search for this order is long near full, and
         * fails when only carved blocks have room, ending in the pressure
         * path that splits or combines their free frames (after a second
         * failed scan). Try that first, in the blocks the stray bitmap
         * marks: at most one pass over the bitmap (a bit per 8 leaves,
         * 1/64 of the index an order-0 scan reads), every time, since a
         * failed search of the tree costs far more. */
        lost_to_strays(c, 0, NBBS_CARVE_ORDER);
        first = nbbs__carve_take_stray(b, order);
        if (!first)
            first = take_own(c, order);
        if (first) {
            nb_own_store(&c->count[order], 0);
            return first;
        }
    }
    if (!first) {
        first = tree_take(c, order);
        if (!first) {
            tree_short(c, order);
            return nbbs__reclaim(b, order);
        }
        uint64_t want = c->batch;
        uint64_t home = ((uint64_t)((uintptr_t)first - b->base) >> b->min_shift) >> b->group_order;
        if (c->lean[order]) {
            c->lean[order]--;
            want = 1;
        }
        while (n + 1 < want) {
            void *p = tree_take(c, order);
            if (!p) {
                tree_short(c, order);
                break;
            }
            uint64_t leaf = (uint64_t)((uintptr_t)p - b->base) >> b->min_shift;
            nb_store_rel_u8(&b->index[leaf], (uint8_t)((order + 1u) | NBBS_IDX_CACHED));
            nb_own_store(&s[n++], leaf);
            if (leaf >> b->group_order != home && b->group_order > order)
                break; /* left the group: this block is the batch's last */
        }
    }
    nb_own_store(&c->count[order], n);
    return first;
}

/* The stack is empty: name again the free frames of this order in the
 * carved blocks a drain left half used (newest first), up to batch of them.
 * Naming takes nothing (the pop's CAS does); a frame taken meanwhile by
 * someone else is a stale entry like any other. Returns how many. */
static uint64_t reuse_parts(nbbs_cache_t *c, unsigned order)
{
    nbbs_t *b = c->b;
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    uint8_t freev = (uint8_t)((order + 1u) | NBBS_IDX_CARVED | NBBS_IDX_CACHED);
    uint64_t n = 0;
    while (c->nparts[order] && n + CARVE_LEAVES <= c->batch) {
        c->nparts[order]--;
        uint64_t g0 = c->part[order][--c->ptop[order] % CACHE_PARTS];
        carve_word_t x;
        x.w = nb_load_u64(carve_word(b, g0));
        for (uint64_t m = carve_eq(x, freev); m;) /* the highest first: pops go up the addresses */
            nb_own_store(&s[n++], g0 + carve_pop_high(&m));
    }
    nb_own_store(&c->count[order], n);
    return n;
}

/* The top entry was stale or the stack empty: pop further, name the frames
 * of remembered carved blocks, refill. Out of line, so that the fast path
 * below stays a few instructions with few registers to save. */
static __attribute__((__noinline__)) void *alloc_slow(nbbs_cache_t *c, unsigned order, uint64_t n)
{
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    for (;;) {
        while (n) {
            uint64_t leaf = nb_own_load(&s[--n]);
            if (claim(c->b, leaf, order)) {
                nb_own_store(&c->count[order], n);
                return addr_of(c->b, leaf);
            }
            /* taken by another thread under pressure, or drained: drop it */
        }
        /* Each round uses up at least one remembered block: bounded. */
        if (order >= NBBS_CARVE_ORDER || !c->nparts[order] || !(n = reuse_parts(c, order)))
            break;
    }
    return refill(c, order);
}

void *nbbs_cache_alloc(nbbs_cache_t *c, unsigned order)
{
    if (!c)
        return NULL;
    if (order >= c->orders)
        return nbbs_alloc_order(c->b, order);
    uint64_t n = nb_own_load(&c->count[order]);
    if (n) {
        uint64_t leaf = nb_own_load(&stack_of(c, order)[n - 1]);
        if (claim(c->b, leaf, order)) {
            nb_own_store(&c->count[order], n - 1);
            return addr_of(c->b, leaf);
        }
        n--; /* taken by another thread under pressure, or drained: drop it */
    }
    return alloc_slow(c, order, n);
}

/* The stack of this order is full (n == capacity): give back all but the
 * batch freed last (all of it if capacity == batch): the bottom entries,
 * held longest, and move that batch
 * down. Many at once, so blocks that were refilled together from one huge
 * block go back together and can coalesce, frames of one carved block tend
 * to go back together and return it whole, and the move costs a batch of
 * stores per capacity - batch frees. Returns the new count. */
static uint64_t drain_oldest(nbbs_cache_t *c, unsigned order, uint64_t n)
{
    NBBS_ATOMIC(uint64_t) *s = stack_of(c, order);
    uint64_t k = n > c->batch ? n - c->batch : n; /* capacity == batch: all */
    nbbs__give_back(c->b, c, c, s, 0, k, order);
    for (uint64_t i = k; i < n; i++)
        nb_own_store(&s[i - k], nb_own_load(&s[i]));
    return n - k;
}

/* nbbs_cache_free's push onto a full stack: drain it first. Returns 0. */
static __attribute__((__noinline__)) int push_full(nbbs_cache_t *c, unsigned order, uint64_t leaf)
{
    uint64_t n = drain_oldest(c, order, c->capacity);
    nb_own_store(&stack_of(c, order)[n], leaf);
    nb_own_store(&c->count[order], n + 1);
    return 0;
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
    unsigned order = (v & NBBS_IDX_ORDER) - 1u;
    if (order >= c->orders)
        return nbbs_free(b, p);
    /* The CAS is what makes two frees of one block exclusive (nbbs_free
     * takes the byte by CAS too), and it releases the block's contents. */
    if (!nb_cas_u8(&b->index[leaf], &v, (uint8_t)(v | NBBS_IDX_CACHED)))
        return NBBS_EINVAL; /* a concurrent free of the same block won */
    uint64_t n = nb_own_load(&c->count[order]);
    if (n == c->capacity)
        return push_full(c, order, leaf); /* a tail call: the fast path saves no registers */
    nb_own_store(&stack_of(c, order)[n], leaf);
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
        done += nbbs__give_back(c->b, NULL, c, s, 0, n, k);
        nb_own_store(&c->count[k], 0);
        if (k < NBBS_CARVE_ORDER && c->groups[k]) {
            /* The blocks it remembers are forgotten: their free frames
             * are marked for the harvests, and this cache's next refills
             * harvest before they carve (frames left in carved blocks are
             * used before new blocks are cut from the tree). */
            bool left = false;
            while (c->nparts[k]) {
                c->nparts[k]--;
                stray_mark(c->b, c->part[k][--c->ptop[k] % CACHE_PARTS]);
                left = true;
            }
            if (left || n) {
                c->stranded[k] = true;
                c->swept[k] = 0;
            }
        }
    }
    cache_count_flush(c); /* what the give-backs raised ahead and left: the counts are exact again */
    return done;
}

