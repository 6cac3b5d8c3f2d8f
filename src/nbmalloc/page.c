/*
 * page.c - pages: back-end blocks carved into objects of one class.
 *
 * A page's record sits in its arena's metadata at the page's first unit
 * (nbm__page_at). The owner heap carves objects lazily from the page's start
 * (the unit words' carved count says how far: free accepts nothing beyond
 * it), keeps its own frees on the page's `free` list, and takes other
 * threads' frees from `remote` with one exchange. Layer below the heap: this
 * file knows nothing of heaps but the opaque owner word.
 */
#include "internal.h"

static unsigned page_order(const nbm_class_t *c)
{
    return (unsigned)__builtin_ctz(c->chunk) - NBM_PAGE_SHIFT;
}

static size_t first_unit(nbm_arena_t *ar, uintptr_t base)
{
    return (base - ar->base) >> NBM_UNIT_SHIFT;
}

unsigned nbm__page_order(unsigned cls)
{
    return page_order(&nbm__classes[cls]);
}

nbm_page_t *nbm__page_new(unsigned cls, uintptr_t heap, uint32_t *hint, void *block)
{
    const nbm_class_t *c = &nbm__classes[cls];
    char *b = block;
    bool dirty; /* a page needs no zero memory */
    if (!b && !(b = nbm__block_alloc(page_order(c), hint, &dirty)))
        return NULL;
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)b);
    size_t u0 = first_unit(ar, (uintptr_t)b);
    nbm_page_t *pg = &ar->pages[u0];
    pg->arena = (uint16_t)ar->index;
    pg->cls = (uint8_t)cls;
    pg->free = NULL;
    pg->uw = NBM_PAGE_OFF; /* none in use, on no avail list */
    pg->left = (uint16_t)c->cap;
    pg->next = pg->prev = pg->anext = pg->aprev = NULL;
    /* No remote free can be under way: the page held no object. The owner
     * word and the unit words reach other threads with the objects
     * themselves (handed over by the user, see nbm__owner). */
    nbm_store_uptr_relaxed(&pg->remote, 0);
    nbm_store_uptr_relaxed(&pg->heap, heap);
    /* Relaxed: see above (a stale word of an earlier page here belongs to
     * a pointer nobody may free: the earlier page was empty). */
    for (size_t u = 0; u < c->chunk >> NBM_UNIT_SHIFT; u++)
        nbm_store_u32_relaxed(&ar->unit[u0 + u], nbm__unit_of(cls)); /* nothing carved yet */
    NBM_STAT_ADD(chunks, 1);
    NBM_STAT_ADD(chunk_bytes, c->chunk);
    return pg;
}

/* A revived page of a class of this size or more is carved again instead
 * of handing out its list. The owner's frees left that list in the order
 * they came, the last freed first: after a program freed its objects in
 * the order it had them (thread-test's rounds), the next round got each
 * page's objects in descending addresses, and every malloc's pop waited on
 * the link in the object it handed out, an object out of every nearby
 * cache by then, 8 or more lines from the last: a chain of misses no
 * prefetcher followed, one a malloc. A carve writes a batch of links (and
 * the tags they already had) in address order, stores that do not wait on
 * each other, and the pops find them in the first-level cache. thread-test
 * T1, alloc ns (7 interleaved runs, --rounds 100): 512 B 11.2 -> 8.1,
 * 1024 B 17.3 -> 9.6, 2048 B 30.6 -> 11.4, 4096 B 61.4 -> 24.6, 8192 B
 * 80.4 -> 44.8. Below 512 B the list's descending walk is a stream the
 * prefetchers follow (several objects to a 4 KiB page) and the carve's
 * extra stores cost more than they save: 128 B 3.9 -> 4.7, 256 B 7.1 ->
 * 7.6, 448 B 5.6 -> 6.9. Linking the list again in address order at
 * revival instead (every object in one pass) gained about half as much:
 * 1024 B 12.2, 2048 B 13.8. */
#define NBM_RECARVE_MIN 512u

nbm_page_t *nbm__page_revive(void *block, unsigned cls, uintptr_t heap)
{
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)block);
    size_t u0 = first_unit(ar, (uintptr_t)block);
    nbm_page_t *pg = &ar->pages[u0];
    uint32_t w = nbm_load_u32_relaxed(&ar->unit[u0]);
    /* The unit word is cleared when an empty page's block leaves its heap
     * (nbm__page_forget) or is made a page of another class: a word naming
     * this class means the block is the heap's own emptied page, untouched
     * since, its record's list holding every carved object (tagged free). */
    if ((w & 0xffffu) != nbm__unit_of(cls) || pg->cls != cls || nbm__page_used(pg) != 0)
        return NULL;
    if (nbm__classes[cls].size >= NBM_RECARVE_MIN) {
        /* Carved again from its colour on (nbm__page_carve), a batch at a
         * time; the list is dropped unread (see NBM_RECARVE_MIN). */
        pg->left = (uint16_t)nbm__classes[cls].cap;
        pg->free = NULL;
    }
    pg->uw = NBM_PAGE_OFF;
    pg->next = pg->prev = pg->anext = pg->aprev = NULL;
    /* No remote free can be under way (nothing of it was in use), so the
     * remote list is empty; the owner word reaches other threads with the
     * objects (see nbm__page_new). */
    nbm_store_uptr_relaxed(&pg->heap, heap);
    NBM_STAT_ADD(chunks, 1);
    NBM_STAT_ADD(chunk_bytes, nbm__classes[cls].chunk);
    return pg;
}

uintptr_t nbm__page_base(const nbm_page_t *pg)
{
    nbm_arena_t *ar = nbm__arena_at(pg->arena);
    return ar->base + ((uintptr_t)(pg - ar->pages) << NBM_UNIT_SHIFT);
}

/* The owner's copy (`left`) of what the unit words count. */
uint32_t nbm__page_carved(const nbm_page_t *pg)
{
    return nbm__classes[pg->cls].cap - pg->left;
}

/* The object a fresh page hands out first (its colour, in objects from the
 * page's start): the first object that starts in the page's 512-byte step
 * 0..7, the step being the page's number (its address over its size) mod 8,
 * inverted (7 - step) in an odd arena slot. Handed out first, that object is
 * the one a program that allocates and frees in a loop keeps using, and a
 * program's first objects of each class tend to be its hot ones; at their
 * pages' starts all of them would share every address bit below the page
 * size. On the AMD EPYC (Zen 3) we measure on, stores that alternate
 * between two lines whose addresses agree in bits 9-14 and in a hash of
 * bits 15-27 (bits 28 and up do not count; bits 16-19 are folded with
 * 21-24) cost 15-30 ns a pair instead of about 1 (a two-line loop,
 * docs/nbmalloc.md): linux-scalability at 8 B ran 3-4x slower in the
 * processes where its block and the bench's thread record (first objects of
 * pages 2 MiB + 64 KiB or 4 MiB + 128 KiB apart, in adjacent arenas)
 * collided. With the step, pages whose numbers differ in bits 0-2, or
 * that sit in adjacent arena slots, start their first objects in different
 * steps. Other CPUs alias on the low 12 bits (4K aliasing) or L1 sets, which
 * the steps spread too. The colour is only an order: the objects before it
 * are carved with the others and handed out last, so it costs no memory
 * and no check on the fast paths. */
static uint32_t page_colour(const nbm_class_t *c, uintptr_t base)
{
    unsigned step = ((unsigned)(base >> __builtin_ctz(c->chunk)) ^
                     (7u * (unsigned)((base >> NBM_ARENA_SHIFT) & 1u))) & 7u;
    return (step * 512u + c->size - 1) / c->size;
}

/* The carved count grows (in every unit of the page) before any of the new
 * objects is handed out; each carries the freed-object tag, like every
 * object on a free list. A page's first carve is linked from its colour
 * (page_colour) on, the objects before it at the end. */
uint32_t nbm__page_carve(nbm_page_t *pg, void **head, uint32_t max)
{
    const nbm_class_t *c = &nbm__classes[pg->cls];
    nbm_arena_t *ar = nbm__arena_at(pg->arena);
    size_t u0 = (size_t)(pg - ar->pages);
    uintptr_t base = ar->base + (u0 << NBM_UNIT_SHIFT);
    uint32_t cap = c->cap, carved = cap - pg->left;
    uint32_t n = pg->left < max ? pg->left : max;
    if (n == 0)
        return 0;
    /* The first carve reaches the colour while that stays in the page's
     * first 4 KiB, which the first object touches anyway (a 16-byte class
     * carves 64 objects at first: 1 KiB); a class of more than 2 KiB
     * (nbm__large_alloc carves one at a time) never passes that bound. */
    uint32_t s = carved == 0 ? page_colour(c, base) : 0;
    if (s >= n && (size_t)(s + 1) * c->size <= NBM_PAGE && s < cap)
        n = s + 1;
    if (s >= n)
        s = 0;
    /* Every unit (up to 4, in a 256 KiB page): free reads the
     * count in the object's own unit word. (Counting in the first unit only
     * cost free's fast path 4 instructions for the second look.) A page
     * carved again after its revival (NBM_RECARVE_MIN) counts only what
     * goes past its words' count, which stayed: an object of it not carved
     * again yet carries its tag, so a second free of it is still reported
     * as one. Relaxed: only the owner writes the words. */
    uint32_t have = nbm_load_u32_relaxed(&ar->unit[u0]) >> NBM_UNIT_CARVED_SHIFT;
    if (carved + n > have)
        for (size_t u = 0; u < c->chunk >> NBM_UNIT_SHIFT; u++)
            nbm_add_u32(&ar->unit[u0 + u], (carved + n - have) << NBM_UNIT_CARVED_SHIFT);
    pg->left = (uint16_t)(pg->left - n);
    pg->uw = (uint16_t)(pg->uw + n); /* handed out, or on the bin's list */
    char *first = (char *)base + (size_t)carved * c->size;
    /* The secret in a register: read in the loop, it was loaded again
     * after every link's store, which might have changed it (4
     * instructions an object for the tag, 2 now). */
    const uintptr_t secret = nbm__secret;
    const size_t size = c->size;
    for (char *o = first, *end = first + (size_t)n * size; o != end; o += size) {
        ((void **)o)[0] = o + size;
        ((void **)o)[1] = (void *)((uintptr_t)o ^ secret);
    }
    if (s) { /* s .. n - 1, then 0 .. s - 1 */
        *(void **)(first + (size_t)(n - 1) * c->size) = first;
        *(void **)(first + (size_t)(s - 1) * c->size) = *head;
        *head = first + (size_t)s * c->size;
    } else {
        *(void **)(first + (size_t)(n - 1) * c->size) = *head;
        *head = first;
    }
    return n;
}

/* Pushes the chain first..last (linked by word 0) onto a stack that is only
 * ever emptied whole: the CAS succeeds only if the head is still the one
 * `last` links to, and a take-all in between just makes it fail and retry.
 * Lock-free: a CAS fails only because another push or the take succeeded.
 * seq_cst: releases the chain's links to the taker. */
void nbm__page_free_remote(nbm_page_t *pg, void **first, void **last)
{
    uintptr_t old = nbm_load_uptr_relaxed(&pg->remote);
    do
        last[0] = (void *)old;
    while (!nbm_cas_uptr(&pg->remote, &old, (uintptr_t)first));
}

void *nbm__page_take_remote(nbm_page_t *pg, uint32_t *n, void ***last)
{
    /* Relaxed look first: a push missed here is taken next time. */
    if (nbm_load_uptr_relaxed(&pg->remote) == 0)
        return NULL;
    void **l = (void **)nbm_xchg_uptr(&pg->remote, 0);
    if (!n)
        return l; /* the caller needs no count: the list is not walked */
    uint32_t k = 0;
    void **o = l, **prev = NULL;
    for (; o; prev = o, o = o[0])
        k++;
    *n = k;
    *last = prev;
    return l;
}

/* An empty page leaves its class: no owner. Its unit words stay until the
 * block is reused (nbm__page_new) or leaves the heap (nbm__page_forget), so a
 * second free of one of its objects is still reported as a double free (its
 * tag is there). Returns the block. */
void *nbm__page_unmake(nbm_page_t *pg)
{
    const nbm_class_t *c = &nbm__classes[pg->cls];
    nbm_arena_t *ar = nbm__arena_at(pg->arena);
    size_t u0 = (size_t)(pg - ar->pages);
    nbm_store_uptr_relaxed(&pg->heap, 0);
    NBM_STAT_SUB(chunks, 1);
    NBM_STAT_SUB(chunk_bytes, c->chunk);
    return (void *)(ar->base + (u0 << NBM_UNIT_SHIFT));
}

void nbm__page_forget(void *block, unsigned order)
{
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)block);
    size_t u0 = first_unit(ar, (uintptr_t)block), units = (NBM_PAGE << order) >> NBM_UNIT_SHIFT;
    /* seq_cst: the block goes on to the back-end or a shared cache, whose
     * next owner may be another thread (whose CAS then orders these). */
    for (size_t u = 0; u < units; u++)
        nbm_store_u32(&ar->unit[u0 + u], 0);
}

/* The one place where the block of an empty page goes back for good: its
 * memory to the OS (madvise), the block to the back-end, where any class or
 * a medium request can take it. A different policy (a decay of its own, or
 * the medium cache's) changes this function only. */
void nbm__page_release(void *block, unsigned order)
{
    nbm__page_forget(block, order);
    nbm__os_purge(block, NBM_PAGE << order);
    NBM_STAT_ADD(purged, NBM_PAGE << order);
    nbm__block_free(nbm__arena_of((uintptr_t)block), block);
}

/* The unit words were cleared before the memory moved out (a stale free of
 * one of its objects reads zeros: it must find no page there). */
void nbm__page_release_moved(void *block)
{
    nbm__block_free(nbm__arena_of((uintptr_t)block), block);
}
