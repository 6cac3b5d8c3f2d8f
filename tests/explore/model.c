/*
 * model.c - scenarios, thread programs, and what must hold after every step.
 *
 * A thread program is a list of calls, one token each:
 *   aK  allocate a block of order K (it becomes the thread's next own block)
 *   fJ  free the thread's own block J (in allocation order)
 *   FJ  free pre-allocated block J (two threads may race on it)
 *   iJ  free a pointer inside pre-allocated block J (must be refused)
 *   x   free a pointer outside the arena;  u  free a misaligned pointer
 *   cK  allocate order K through the thread's own frame cache (an own block)
 *   gJ  free own block J through the thread's cache; GJ: pre-allocated block J
 *   d   drain the thread's cache;  r  nbbs_reclaim_cached (every cache)
 *   eK.P  nbbs_alloc_at of the block of order K at position P (an own
 *         block: -1 when it returned NBBS_EBUSY)
 * Scenarios that use c, g, G, d or r give each thread a cache (orders 0..1,
 * batch 2, capacity 2: refills, full stacks and stale entries come quickly;
 * scenarios named carve-* instead order 0 only, batch 8, capacity 8, so
 * that a refill carves a whole order-3 block into 8 frames and frees,
 * drains and steals race on the carved block's index word).
 * A block in a cache is free for the model: a NULL with nothing else in
 * flight while a cache holds a block of that order (or blocks that make one)
 * is a failure.
 * Each call is bracketed by two model points (scheduling points of their
 * own), where the model learns that the call began and what it returned.
 *
 * After every step: every block the model holds as live still has its index
 * entry and its whole path of marks (its own slots BUSY, OCC_side towards it
 * in every stored ancestor slot, no ancestor OCC), so no allocation can be
 * handed anything overlapping it (S1, checked directly on each returned
 * block as well). For each allocation in flight, the model notes which
 * positions of its order were not allocatable at some moment of the call;
 * a NULL is accepted only if that covers every position (and, with nothing
 * else in flight, only if the model has no free block of that order). An
 * NBBS_EBUSY of nbbs_alloc_at likewise only if its position was seen not
 * allocatable during the call (with nothing else in flight: only if a live
 * block overlaps it).
 * At the end: double frees won exactly once, nbbs_validate holds with the
 * live blocks still in, then with everything freed, and every max-size
 * block can be allocated again (exact coalescing).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "explore.h"
#include "nbbs_geometry.h"

#define MIN_BLOCK 64
#define ARENA_BASE ((uintptr_t)0x40000000) /* never dereferenced */
#define MAX_BLOCKS 64

/* ---- scenarios ------------------------------------------------------------ */

const ex_scenario_t ex_scenarios[] = {
    /* Exhaustive: two threads, two calls each, tiny trees, both layouts. */
    /* tree-d2 and tree-d3 were exhaustive (14 s and 23 s) until the TREE phase 3
     * took OWN_P (one more CAS per level): the search no longer ends within
     * 15 minutes, so they get PCT (docs/correctness.md 1.3). */
    { "tree-d2", "1-level tree of depth 2: two threads allocate and free order 0",
      NBBS_LAYOUT_TREE, 2, 1, "", { "a0 f0", "a0 f0" }, "0 1", false, NULL, 0 },
    { "tree-d3", "1-level tree of depth 3: orders 0 and 1",
      NBBS_LAYOUT_TREE, 3, 1, "", { "a0 f0", "a1 f0" }, "0 1", false, NULL, 0 },
    { "tree-d3-00", "1-level tree of depth 3: order 0 twice (long: 768k interleavings, test.d only)",
      NBBS_LAYOUT_TREE, 3, 1, "", { "a0 f0", "a0 f0" }, "0 1", false, NULL, 0 },
    { "bunch-d3", "4-level bunch of depth 3 (one word): orders 0 and 1",
      NBBS_LAYOUT_BUNCH, 3, 1, "", { "a0 f0", "a1 f0" }, "0 1", true, NULL, 0 },
    { "bunch-d5", "4-level bunch of depth 5 (two rows): order 0 twice",
      NBBS_LAYOUT_BUNCH, 5, 1, "", { "a0 f0", "a0 f0" }, "0 1", true, NULL, 0 },
    { "bunch-d5-mix", "4-level bunch of depth 5: orders 2 and 4 (a climb across rows)",
      NBBS_LAYOUT_BUNCH, 5, 1, "", { "a2 f0", "a4 f0" }, "0 1", true, NULL, 0 },
    { "tree-undo", "a failed allocation inside a whole block races with that block's release",
      NBBS_LAYOUT_TREE, 2, 1, "2@0", { "F0", "a0 f0" }, "0 1", true, NULL, 0 },
    { "bunch-undo", "as tree-undo, bunch of depth 9, the block one row above the claim",
      NBBS_LAYOUT_BUNCH, 9, 1, "8@0 8@1", { "F0", "a3 f0" }, "0 1", true, NULL, 0 },
    { "tree-stale", "section 7: failed allocation G, release of the whole block P, allocation H (3 threads: pct)",
      NBBS_LAYOUT_TREE, 2, 1, "2@0", { "a0 f0", "F0", "a0 f0" }, "0 1 2", false, NULL, 0 },

    /* Random (PCT) scenarios. */
    { "pct-tree-d4", "1-level tree of depth 4, 4 threads, orders 0-2",
      NBBS_LAYOUT_TREE, 4, 1, "", { "a0 a1 f0 f1", "a2 f0 a0 f1", "a0 a0 f1 f0", "a1 a1 f0 f1" }, NULL, false,
      NULL /* S1 bug of core 3658bc2, fixed in e78aebf: docs/correctness.md 2.4 */, 0 },
    { "pct-tree-d4-big", "as pct-tree-d4, with a fifth thread taking order-4 and -3 blocks: overlaps become visible",
      NBBS_LAYOUT_TREE, 4, 1, "", { "a0 a1 f0 f1", "a2 f0 a0 f1", "a0 a0 f1 f0", "a1 a1 f0 f1", "a4 f0 a3 f1 a3 f2" },
      NULL, false, NULL, 0 },
    { "pct-bunch-d6", "bunch of depth 6 (two rows), 4 threads, orders 0-4",
      NBBS_LAYOUT_BUNCH, 6, 1, "", { "a0 a3 f0 f1", "a2 f0 a4 f1", "a1 a0 f1 f0", "a3 a3 f0 f1" }, NULL, false, NULL, 0 },
    { "pct-bunch-d9", "bunch of depth 9 (three rows), 3 threads, orders 0-6",
      NBBS_LAYOUT_BUNCH, 9, 1, "", { "a0 a5 f1 f0", "a3 a6 f0 f1", "a4 a0 f0 f1" }, NULL, false, NULL, 0 },
    { "stale-bunch", "section 7 in the bunch layout: the marks one row apart",
      NBBS_LAYOUT_BUNCH, 9, 1, "8@0 8@1", { "a3 f0", "F0", "a3 f0" }, NULL, false, NULL, 0 },
    /* Group free counts (nbbs_t.gfree): a scan passes by a group whose
     * count is below the block it wants. Groups of order 4, order-3 blocks
     * counted: thread 1's second allocation starts in group 1 (its hint, at
     * the block its first one took) and reaches group 0 at its boundary,
     * where block 0 may have come free. Planted bug 15 (the count raised
     * after the release instead of before) is found here. */
    { "count-tree", "group free counts: a scan reaches a group whose only free block a release is returning",
      NBBS_LAYOUT_TREE, 5, 1, "3@0 3@1 3@2", { "F0", "a3 a3 f0 f1", "a0 f0" }, NULL, false, NULL, 4 },
    { "count-bunch", "as count-tree in the bunch layout (depth 5), two trees",
      NBBS_LAYOUT_BUNCH, 5, 2, "3@0 3@1 3@2 4@2 3@7", { "F0", "a3 a3 f0 f1", "a3 f0" }, NULL, false, NULL, 4 },
    { "stale-tree-8t", "8 threads: failed allocations inside two whole blocks, rollbacks racing with their releases",
      NBBS_LAYOUT_TREE, 3, 2, "3@0 3@1",
      { "F0", "F1", "a0 f0", "a1 f0", "a0 f0 a0 f1", "a2 f0", "a0 a0 f0 f1", "a1 f0 a0 f1" }, NULL, false, NULL, 0 },
    { "stale-bunch-8t", "as stale-tree-8t in the bunch layout (depth 9)",
      NBBS_LAYOUT_BUNCH, 9, 1, "8@0 8@1",
      { "F0", "F1", "a3 f0", "a3 f0", "a0 f0 a3 f1", "a4 f0", "a2 a3 f0 f1", "a3 f0 a1 f1" }, NULL, false, NULL, 0 },
    { "aba-tree", "phase-3 ABA: a release re-sets COAL_side over an allocation that climbed past the clearing's owner",
      NBBS_LAYOUT_TREE, 2, 1, "1@1", { "a0 f0", "a0 f0", "a0 f0" }, NULL, false, NULL, 0 },
    { "aba-tree-d3", "as aba-tree one level deeper, orders 0 and 1",
      NBBS_LAYOUT_TREE, 3, 1, "2@1", { "a0 f0", "a0 f0", "a1 f0", "a0 f0" }, NULL, false, NULL, 0 },
    { "dfree-tree", "double frees racing with the buddy's release; interior, outside, misaligned frees",
      NBBS_LAYOUT_TREE, 2, 1, "0@0 0@1 1@1", { "F0", "F0", "F1 x", "i2 u" }, NULL, false, NULL, 0 },
    { "dfree-bunch", "as dfree-tree, bunch of depth 5",
      NBBS_LAYOUT_BUNCH, 5, 1, "0@0 0@1 1@1 4@1", { "F0", "F0", "F1 x", "i2 u i3" }, NULL, false, NULL, 0 },

    /* Placement (docs/design.md): groups of 2 or 4 leaves, so allocations
     * choose between holes, free pairs and other groups, visit groups through
     * the hole bitmap, and lose chosen candidates to each other. The threads
     * free what they allocated: an allocation that races with its buddy's
     * release can leave that release's COAL_side above it while it lives
     * (docs/correctness.md, "A stale COAL_side"), which the final exact
     * validation would report; it is cleared by the block's own release. */
    { "place-tree-d2", "placement: 1-level trees of depth 2, two of them, groups of order 1, holes",
      NBBS_LAYOUT_TREE, 2, 2, "0@0 0@3", { "a0 f0", "F1 a0 f0" }, "0 1", false, NULL, 1 },
    { "place-tree", "placement: 1-level trees of depth 3, two of them, groups of order 1, holes being freed and filled",
      NBBS_LAYOUT_TREE, 3, 2, "0@0 0@2 0@5 1@6", { "a0 a0 f0 f1", "F0 a0 f0", "F1 a1 a0 f1 f0", "F2 a0 f0", "F3 a0 f0" },
      NULL, false, NULL, 1 },
    { "place-bunch", "placement: bunch of depth 5, two trees, groups of order 2, holes being freed and filled",
      NBBS_LAYOUT_BUNCH, 5, 2, "0@0 0@5 0@9 1@12 2@12", { "a0 a0 f0 f1", "F0 a0 a1 f1 f0", "F1 a0 f0", "F2 a1 f0", "F3 a0 F4 f0" },
      NULL, false, NULL, 2 },

    /* Fill points' trees (docs/design.md, "Placement"): tree 0 and tree 1
     * full, tree 2 free. Freeing leaf 15 and taking it again leaves the
     * order-0 fill point at the end of tree 1, and freeing the pair at
     * leaves 2-3 points the order-1 word into tree 0: an order-0 scan from
     * there meets only the free tree 2, so before breaking it the scan
     * visits tree 0 (behind it) and takes the freed pair's leaf, or, when
     * another thread took that first, finds nothing and breaks tree 2. */
    { "place-trees", "placement: 1-level trees of depth 3, three of them, groups of order 1, fill points' trees visited",
      NBBS_LAYOUT_TREE, 3, 3, "1@1 0@15 1@0 2@1 2@2 1@6 0@14", { "F1 a0 f0", "F0 a0 f0", "a0 a0 f1 f0" },
      NULL, false, NULL, 1 },
    { "place-trees-bunch", "as place-trees, one bunch word per tree",
      NBBS_LAYOUT_BUNCH, 3, 3, "1@1 0@15 1@0 2@1 2@2 1@6 0@14", { "F1 a0 f0", "F0 a0 f0", "a0 a0 f1 f0" },
      NULL, false, NULL, 1 },

    /* Frame caches (nbbs_cache.c): claims by CAS on the index byte racing.
     * Every thread that uses a cache drains it last ('d'): with a block still
     * live at the end, the end's nbbs_validate is not exact even without
     * caches (a release's COAL mark can stay above a block allocated beside
     * it while it lives; it is cleared when that block is freed). */
    { "cache-steal-tree", "a plain allocation steals the block the owner's refill cached (depth 2)",
      NBBS_LAYOUT_TREE, 2, 1, "1@1", { "c0 g0 d", "a0 f0" }, "0 1", false, NULL, 0 },
    { "cache-pop-tree", "the owner pops and re-caches while a plain allocation steals (depth 2)",
      NBBS_LAYOUT_TREE, 2, 1, "1@1", { "c0 g0 c0 g1 d", "a0 f0" }, "0 1", false, NULL, 0 },
    { "cache-steal-bunch", "as cache-pop-tree in one bunch word (depth 3)",
      NBBS_LAYOUT_BUNCH, 3, 1, "2@1 1@1", { "c0 g0 c0 g1 d", "a0 a0 f1 f0" }, "0 1", false, NULL, 0 },
    { "cache-reclaim-bunch", "an order-1 allocation under pressure reclaims a full cache while its owner drains",
      NBBS_LAYOUT_BUNCH, 3, 1, "2@1 1@1", { "c0 c0 g0 g1 d", "a1 f0" }, "0 1", false, NULL, 0 },
    { "cache-dfree-tree", "double frees through two caches and nbbs_free racing; reclaim meanwhile",
      NBBS_LAYOUT_TREE, 2, 1, "0@0 0@1 1@1", { "G0 G1 d", "G0 F1 d", "F0 r" }, NULL, false, NULL, 0 },
    { "pct-cache-tree-d3", "4 threads with caches, steals and drains, depth 3",
      NBBS_LAYOUT_TREE, 3, 1, "", { "c0 c1 g0 g1 c0 g2 d", "c0 c0 g1 g0 d", "a2 a0 f0 f1 a1 f2", "c1 r c0 g0 g1 d" },
      NULL, false, NULL, 0 },
    { "pct-cache-bunch-d5", "4 threads with caches, orders 0-3, bunch of depth 5 (two rows)",
      NBBS_LAYOUT_BUNCH, 5, 1, "3@3", { "c0 c1 g0 g1 c0 g2 d", "c0 c0 g1 g0 d", "a3 a2 f0 f1 a4 f2", "c1 r c0 g0 g1 d" },
      NULL, false, NULL, 0 },
    /* Bulk refills (nbbs_cache.c, "Bulk refill"): one tree has an order-3
     * block free (the other is taken), so refills carve it, and frees of
     * carved frames (through caches and nbbs_free), drains that return the
     * block whole, and allocations under pressure that take or split free
     * frames with one CAS on the block's index word all race. */
    { "carve-tree", "carved frames: cache pops and frees, nbbs_free of a carved frame, a plain order-0 steal (depth 4)",
      NBBS_LAYOUT_TREE, 4, 1, "3@1", { "c0 c0 g0 f1 d", "c0 g0 d", "a0 f0" }, NULL, false, NULL, 0 },
    { "carve-merge-bunch", "a carved block goes back whole while an order-1 allocation under pressure combines free frames (bunch depth 4)",
      NBBS_LAYOUT_BUNCH, 4, 1, "3@1", { "c0 c0 g1 g0 d", "c0 f0 a1 f1 d", "c0 r g0 d" }, NULL, false, NULL, 0 },
    { "pct-carve-tree-d5", "4 threads carving, freeing through caches and nbbs_free, reclaiming; order-1 and -2 takes split frames",
      NBBS_LAYOUT_TREE, 5, 1, "3@1 3@2",
      { "c0 c0 g0 g1 c0 f2 d", "c0 c0 f1 g0 d", "a1 a2 f0 a0 f1 f2", "c0 r c0 g0 g1 d" }, NULL, false, NULL, 0 },

    /* nbbs_alloc_at (the try-allocate on a named node) racing with normal
     * allocations, frees of the block around it, inside it and beside it,
     * and with another nbbs_alloc_at of an overlapping block. */
    { "at-tree", "alloc_at of order 1 racing order-0 and -1 searches and the release of the block around it (depth 3)",
      NBBS_LAYOUT_TREE, 3, 1, "2@0", { "e1.1 f0", "F0 a0 f0", "a1 a1 f1 f0" }, NULL, false, NULL, 0 },
    { "at-bunch", "alloc_at of orders 0 and 2 in one bunch word with searches and a release inside (depth 5)",
      NBBS_LAYOUT_BUNCH, 5, 1, "0@5", { "e2.1 f0", "F0 e0.4 f0", "a1 a0 f1 f0", "e0.5 f0" }, NULL, false, NULL, 0 },
    { "pct-at-tree-d4", "pieces of a range taken in place while others search and free (depth 4)",
      NBBS_LAYOUT_TREE, 4, 1, "1@3", { "e2.0 e1.2 f1 f0", "a1 F0 f0", "e1.3 a0 f1 f0", "a2 e0.7 f0 f1" }, NULL, false, NULL, 0 },
    { "pct-at-bunch-d6", "as pct-at-tree-d4 in a bunch of depth 6 (two rows)",
      NBBS_LAYOUT_BUNCH, 6, 1, "3@2", { "e4.0 e3.2 f1 f0", "a3 F0 f0", "e3.3 a2 f1 f0", "a4 e0.17 f0 f1" }, NULL, false, NULL, 0 },
    { NULL, NULL, 0, 0, 0, NULL, { NULL }, NULL, false, NULL, 0 },
};

const ex_scenario_t *ex_find(const char *name)
{
    for (const ex_scenario_t *s = ex_scenarios; s->name; s++)
        if (!strcmp(s->name, name))
            return s;
    return NULL;
}

unsigned ex_nthreads(const ex_scenario_t *s)
{
    unsigned n = 0;
    while (n < EX_MAX_THREADS && s->prog[n])
        n++;
    return n;
}

/* ---- the run's state --------------------------------------------------------- */

enum { B_LIVE, B_FREEING, B_FREE };

typedef struct mblock {
    uintptr_t addr;
    unsigned  order;
    int       state;
    bool      pre;
    unsigned  attempts, wins; /* frees begun, frees that returned 0 */
} mblock_t;

typedef struct op {
    char     kind;
    unsigned arg;
    unsigned pos; /* 'e': the position of the block named */
} op_t;

typedef struct mthread {
    op_t     ops[EX_MAX_OPS];
    unsigned nops;
    int      own[EX_MAX_OPS];  /* model block of each own allocation, -1 for NULL */
    unsigned nown;
    bool     inflight, concurrent;
    char     kind;             /* of the call in flight */
    unsigned order;            /* of the allocation in flight */
    uint64_t blocked;          /* positions seen not allocatable during this alloc */
    int      freeing;          /* model block this free began on, or -1 */
} mthread_t;

static _Alignas(NBBS_META_ALIGN) unsigned char meta[1 << 16];
static nbbs_t   *inst;
static const ex_scenario_t *scn;
static mblock_t  blocks[MAX_BLOCKS];
static unsigned  nblocks;
static mthread_t mth[EX_MAX_THREADS];
static unsigned  nth;
static int       model_word; /* the address of model points */
#define CACHE_BYTES 4096
static _Alignas(NBBS_CACHE_ALIGN) unsigned char cache_mem[EX_MAX_THREADS][CACHE_BYTES];
static nbbs_cache_t *caches[EX_MAX_THREADS]; /* per thread, when the scenario uses caches */

/* ---- reading the node state -------------------------------------------------- */

/* The geometry is the core's own (nbbs_geometry.h): the explorer reads the
 * slots exactly where the algorithm writes them. */
static unsigned slot(unsigned r, uint64_t gp) { return nbbs__slot(inst, r, gp); }

/* Every stored slot of node (r, gp) (its row's bottom slots under it) equals want. */
static bool node_slots_all(unsigned r, uint64_t gp, unsigned want)
{
    unsigned rb = inst->row_bottom[nbbs__row(inst, r, inst->lpw)], d = rb - r;
    for (uint64_t i = gp << d; i < (gp + 1) << d; i++)
        if (slot(rb, i) != want)
            return false;
    return true;
}

/* Walks the stored ancestor slots of (r, gp): returns the first bad one's level,
 * or -1. need_mark: each must carry OCC_side towards the node. Always: none OCC. */
static int ancestors_bad(unsigned r, uint64_t gp, bool need_mark)
{
    unsigned side;
    while (nbbs__up(inst, &r, &gp, &side, inst->lpw)) {
        unsigned v = slot(r, gp);
        if ((v & SLOT_OCC) || (need_mark && !(v & (SLOT_OCC_L << side))))
            return (int)r;
    }
    return -1;
}

static bool allocatable(unsigned r, uint64_t gp)
{
    return node_slots_all(r, gp, 0) && ancestors_bad(r, gp, false) < 0;
}

static uint64_t leaf_of(uintptr_t a) { return (a - ARENA_BASE) / MIN_BLOCK; }

/* ---- model updates, run by the threads at their model points ------------------ */

static bool overlap(uintptr_t a, unsigned oa, uintptr_t b, unsigned ob)
{
    uintptr_t ea = a + ((uintptr_t)MIN_BLOCK << oa), eb = b + ((uintptr_t)MIN_BLOCK << ob);
    return a < eb && b < ea;
}

/* Is some block of this order free in the model (no live or freeing block on it)? */
static int model_free_position(unsigned order)
{
    uint64_t n = (uint64_t)scn->ntrees << (scn->max_order - order);
    for (uint64_t p = 0; p < n; p++) {
        uintptr_t a = ARENA_BASE + ((uintptr_t)p * MIN_BLOCK << order);
        bool taken = false;
        for (unsigned i = 0; i < nblocks && !taken; i++)
            taken = blocks[i].state != B_FREE && overlap(a, order, blocks[i].addr, blocks[i].order);
        if (!taken)
            return (int)p;
    }
    return -1;
}

static void alloc_done(int t, unsigned order, void *p)
{
    mthread_t *m = &mth[t];
    if (!p) {
        m->own[m->nown++] = -1;
        ex_nulls++;
        unsigned r = scn->max_order - order;
        uint64_t n = (uint64_t)scn->ntrees << r;
        int free_pos = model_free_position(order);
        if (!m->concurrent && free_pos >= 0)
            ex_fail("thread %d: alloc of order %u returned NULL with nothing else in flight, but position %d is free",
                    t, order, free_pos);
        else if (n <= 64 && m->blocked != (n == 64 ? UINT64_MAX : (UINT64_C(1) << n) - 1))
            ex_fail("thread %d: alloc of order %u returned NULL, but position %d was allocatable throughout the call",
                    t, order, __builtin_ctzll(~m->blocked));
        return;
    }
    uintptr_t a = (uintptr_t)p, size = (uintptr_t)MIN_BLOCK << order;
    uintptr_t end = ARENA_BASE + ((uintptr_t)MIN_BLOCK * scn->ntrees << scn->max_order);
    if (a < ARENA_BASE || a + size > end || (a - ARENA_BASE) % size) {
        ex_fail("thread %d: alloc of order %u returned %#lx: misplaced", t, order, (unsigned long)a);
        return;
    }
    for (unsigned i = 0; i < nblocks; i++)
        if (blocks[i].state == B_LIVE && overlap(a, order, blocks[i].addr, blocks[i].order)) {
            ex_fail("S1: thread %d got [%#lx, +%lu) overlapping the live block [%#lx, +%lu)", t,
                    (unsigned long)a, (unsigned long)size, (unsigned long)blocks[i].addr,
                    (unsigned long)((uintptr_t)MIN_BLOCK << blocks[i].order));
            return;
        }
    if (nblocks == MAX_BLOCKS) {
        ex_fail("model: too many blocks");
        return;
    }
    blocks[nblocks] = (mblock_t){ a, order, B_LIVE, false, 0, 0 };
    m->own[m->nown++] = (int)nblocks++;
}

/* nbbs_alloc_at returned rc for the block of order at position pos. */
static void at_done(int t, unsigned order, unsigned pos, int rc)
{
    mthread_t *m = &mth[t];
    uintptr_t a = ARENA_BASE + ((uintptr_t)pos * MIN_BLOCK << order);
    if (rc == 0) {
        alloc_done(t, order, (void *)a);
        return;
    }
    m->own[m->nown++] = -1;
    if (rc != NBBS_EBUSY) {
        ex_fail("thread %d: alloc_at of order %u at %u returned %d", t, order, pos, rc);
        return;
    }
    ex_nulls++;
    bool taken = false;
    for (unsigned i = 0; i < nblocks && !taken; i++)
        taken = blocks[i].state != B_FREE && overlap(a, order, blocks[i].addr, blocks[i].order);
    if (!m->concurrent && !taken)
        ex_fail("thread %d: alloc_at of order %u at %u was busy with nothing else in flight, but the block is free",
                t, order, pos);
    else if (pos < 64 && !(m->blocked >> pos & 1))
        ex_fail("thread %d: alloc_at of order %u at %u was busy, but the block was allocatable throughout the call",
                t, order, pos);
}

static void op_begin(int t, const op_t *op)
{
    mthread_t *m = &mth[t];
    m->inflight = true;
    m->kind = op->kind;
    m->order = op->arg;
    m->concurrent = false;
    m->blocked = 0;
    m->freeing = -1;
    if ((op->kind == 'f' || op->kind == 'g') && m->own[op->arg] >= 0)
        m->freeing = m->own[op->arg];
    else if (op->kind == 'F' || op->kind == 'G')
        m->freeing = (int)op->arg;
    if (m->freeing >= 0) {
        mblock_t *bl = &blocks[m->freeing];
        bl->attempts++;
        if (bl->state == B_LIVE)
            bl->state = B_FREEING;
    }
}

static void free_done(int t, const op_t *op, int rc)
{
    mthread_t *m = &mth[t];
    if (op->kind == 'f' || op->kind == 'F' || op->kind == 'g' || op->kind == 'G') {
        if (m->freeing < 0) { /* free(NULL) of a failed allocation */
            if (rc != 0)
                ex_fail("thread %d: nbbs_free(NULL) returned %d", t, rc);
            return;
        }
        mblock_t *bl = &blocks[m->freeing];
        if (rc == 0) {
            if (++bl->wins > 1)
                ex_fail("S2: two frees of the block at %#lx both returned 0", (unsigned long)bl->addr);
            bl->state = B_FREE;
        } else if (rc != NBBS_EINVAL || op->kind == 'f' || op->kind == 'g') {
            ex_fail("S2: thread %d: free of its live block at %#lx returned %d", t, (unsigned long)bl->addr, rc);
        }
    } else if (rc != NBBS_EINVAL) {
        ex_fail("thread %d: a bad free ('%c') returned %d instead of NBBS_EINVAL", t, op->kind, rc);
    }
}

static void *bad_pointer(const op_t *op)
{
    switch (op->kind) {
    case 'i': return (void *)(blocks[op->arg].addr + MIN_BLOCK);
    case 'x': return (void *)(ARENA_BASE + ((uintptr_t)MIN_BLOCK * scn->ntrees << scn->max_order));
    default:  return (void *)(ARENA_BASE + 8);
    }
}

static void thread_body(int t)
{
    mthread_t *m = &mth[t];
    for (unsigned i = 0; i < m->nops && !ex_failed(); i++) {
        const op_t *op = &m->ops[i];
        sched_point(EX_OP_MODEL, &model_word);
        op_begin(t, op);
        if (op->kind == 'a' || op->kind == 'c') {
            void *p = op->kind == 'a' ? nbbs_alloc_order(inst, op->arg) : nbbs_cache_alloc(caches[t], op->arg);
            sched_point(EX_OP_MODEL, &model_word);
            m->inflight = false;
            alloc_done(t, op->arg, p);
        } else if (op->kind == 'e') {
            int rc = nbbs_alloc_at(inst, (void *)(ARENA_BASE + ((uintptr_t)op->pos * MIN_BLOCK << op->arg)), op->arg);
            sched_point(EX_OP_MODEL, &model_word);
            m->inflight = false;
            at_done(t, op->arg, op->pos, rc);
        } else if (op->kind == 'd' || op->kind == 'r') {
            if (op->kind == 'd')
                nbbs_cache_drain(caches[t]);
            else
                nbbs_reclaim_cached(inst);
            sched_point(EX_OP_MODEL, &model_word);
            m->inflight = false;
        } else {
            void *p;
            if (op->kind == 'f' || op->kind == 'g')
                p = m->own[op->arg] >= 0 ? (void *)blocks[m->own[op->arg]].addr : NULL;
            else if (op->kind == 'F' || op->kind == 'G')
                p = (void *)blocks[op->arg].addr;
            else
                p = bad_pointer(op);
            int rc = op->kind == 'g' || op->kind == 'G' ? nbbs_cache_free(caches[t], p) : nbbs_free(inst, p);
            sched_point(EX_OP_MODEL, &model_word);
            m->inflight = false;
            free_done(t, op, rc);
        }
    }
}

/* ---- checks after every step ---------------------------------------------------- */

static void check_step(void)
{
    unsigned inflight = 0;
    for (unsigned t = 0; t < nth; t++)
        inflight += mth[t].inflight;
    if (inflight > 1)
        for (unsigned t = 0; t < nth; t++)
            if (mth[t].inflight)
                mth[t].concurrent = true;

    for (unsigned i = 0; i < nblocks; i++) {
        const mblock_t *bl = &blocks[i];
        if (bl->state != B_LIVE)
            continue;
        unsigned r = scn->max_order - bl->order;
        uint64_t gp = leaf_of(bl->addr) >> bl->order;
        uint8_t ix = atomic_load(&inst->index[leaf_of(bl->addr)]);
        int bad;
        if ((ix & NBBS_IDX_CARVED) && bl->order < NBBS_CARVE_ORDER) {
            /* A frame of a carved block: the tree holds the whole block. */
            r = scn->max_order - NBBS_CARVE_ORDER;
            gp = leaf_of(bl->addr) >> NBBS_CARVE_ORDER;
            ix &= (uint8_t)~NBBS_IDX_CARVED;
        }
        if (ix != bl->order + 1) {
            ex_fail("S2: the index entry of the live block at %#lx is %u", (unsigned long)bl->addr, ix);
            return;
        }
        if (!ex_check_marks)
            continue;
        if (!node_slots_all(r, gp, SLOT_BUSY)) {
            ex_fail("S1: the live block at %#lx (order %u) is no longer marked BUSY", (unsigned long)bl->addr,
                    bl->order);
            return;
        }
        if ((bad = ancestors_bad(r, gp, true)) >= 0) {
            ex_fail("S1: the live block at %#lx (order %u) lost its mark, or has an OCC ancestor, at level %d",
                    (unsigned long)bl->addr, bl->order, bad);
            return;
        }
    }

    /* Positions each allocation in flight has seen not allocatable so far. */
    for (unsigned t = 0; t < nth; t++) {
        mthread_t *m = &mth[t];
        if (!m->inflight || (m->kind != 'a' && m->kind != 'c' && m->kind != 'e'))
            continue;
        unsigned r = scn->max_order - m->order;
        uint64_t n = (uint64_t)scn->ntrees << r;
        for (uint64_t p = 0; p < n && p < 64; p++)
            if (!(m->blocked >> p & 1) && !allocatable(r, p))
                m->blocked |= UINT64_C(1) << p;
    }
}

/* ---- tracing: one line per step, with every stored slot after it -------------- */

bool ex_trace;
bool ex_check_marks = true;
unsigned long ex_nulls;

static const char *op_name(int op)
{
    static const char *n[] = { "load", "store", "cas", "rmw" };
    return op >= 0 && op < 4 ? n[op] : op == EX_OP_MODEL ? "model" : "end";
}

/* Names a word: "index[i]" or "row k word i". */
static void word_name(const volatile void *a, char *buf, size_t len)
{
    uintptr_t x = (uintptr_t)a, ix = (uintptr_t)inst->index, w = (uintptr_t)inst->words;
    size_t ws = inst->lpw == 4 ? 8 : 1;
    if (x >= ix && x < ix + inst->nleaves) {
        snprintf(buf, len, "index[%lu]", (unsigned long)(x - ix));
        return;
    }
    if (x >= w && x < w + inst->tree_bytes) {
        uint64_t i = (x - w) / ws, t = i / inst->tree_words, j = i % inst->tree_words;
        unsigned k = 0;
        while (k + 1 < inst->nrows && inst->row_off[k + 1] <= j)
            k++;
        uint64_t per_tree = (k + 1 < inst->nrows ? inst->row_off[k + 1] : inst->tree_words) - inst->row_off[k];
        snprintf(buf, len, "level %u word %lu", inst->row_bottom[k],
                 (unsigned long)(t * per_tree + j - inst->row_off[k]));
        return;
    }
    snprintf(buf, len, "model");
}

static void trace_step(unsigned step, int t, ex_pending_t done)
{
    char name[64];
    word_name(done.addr, name, sizeof name);
    printf("%4u T%d %-5s %-18s |", step, t, op_name(done.op), name);
    for (unsigned k = inst->nrows; k-- > 0;) {
        unsigned rb = inst->row_bottom[k];
        uint64_t n = (uint64_t)scn->ntrees << rb;
        printf(" L%u:", rb);
        for (uint64_t i = 0; i < n && i < 32; i++) {
            unsigned v = slot(rb, i);
            printf("%s", i ? "," : "");
            if (v)
                printf("%s%s%s%s%s", v & SLOT_OCC ? "O" : "", v & SLOT_OCC_L ? "l" : "", v & SLOT_OCC_R ? "r" : "",
                       v & SLOT_COAL_L ? "L" : "", v & SLOT_COAL_R ? "R" : "");
            else
                printf("-");
        }
    }
    printf("\n");
}

/* ---- one run ------------------------------------------------------------------------ */

static void parse(const ex_scenario_t *s)
{
    nth = ex_nthreads(s);
    for (unsigned t = 0; t < nth; t++) {
        mthread_t *m = &mth[t];
        memset(m, 0, sizeof *m);
        const char *p = s->prog[t];
        unsigned nalloc = 0, freed = 0;
        while (*p) {
            while (*p == ' ')
                p++;
            if (!*p)
                break;
            op_t op = { *p++, 0, 0 };
            if (op.kind != 'x' && op.kind != 'u' && op.kind != 'd' && op.kind != 'r')
                op.arg = (unsigned)strtoul(p, (char **)&p, 10);
            if (op.kind == 'e') {
                if (*p != '.' || op.arg > s->max_order ||
                    (op.pos = (unsigned)strtoul(p + 1, (char **)&p, 10)) >= (s->ntrees << (s->max_order - op.arg))) {
                    fprintf(stderr, "scenario %s, thread %u: e%u names no block (eK.P)\n", s->name, t, op.arg);
                    exit(2);
                }
            }
            m->ops[m->nops++] = op;
            if (op.kind == 'a' || op.kind == 'c' || op.kind == 'e')
                nalloc++;
            bool own_free = op.kind == 'f' || op.kind == 'g';
            if (own_free && (op.arg >= nalloc || (freed >> op.arg & 1))) {
                fprintf(stderr, "scenario %s, thread %u: %c%u frees no block of its own\n", s->name, t, op.kind, op.arg);
                exit(2);
            }
            if (own_free)
                freed |= 1u << op.arg;
        }
    }
}

static bool setup(const ex_scenario_t *s)
{
    /* Group free counts in every scenario: their updates and the scan's
     * pass-by interleave with everything else (without them the core runs
     * the same steps less those). */
    nbbs_config_t cfg = { .min_block = MIN_BLOCK, .max_order = s->max_order, .layout = s->layout,
                          .group_order = s->group_order, .flags = NBBS_GROUP_COUNTS };
    size_t arena = (size_t)MIN_BLOCK * s->ntrees << s->max_order;
    scn = s;
    inst = nbbs_init(meta, sizeof meta, (void *)ARENA_BASE, arena, &cfg);
    if (!inst)
        return false;
    nblocks = 0;
    for (const char *p = s->pre; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        unsigned order = (unsigned)strtoul(p, (char **)&p, 10);
        uint64_t pos = strtoull(p + 1, (char **)&p, 10);
        unsigned r = s->max_order - order;
        bool ok = inst->lpw == 4 ? nbbs__bunch_take(inst, r, pos) : nbbs__tree_take(inst, r, pos);
        if (!ok)
            return false;
        nbbs__count(inst, order, pos << order, false); /* as every taker of a named node does */
        atomic_store(&inst->index[pos << order], (uint8_t)(order + 1));
        blocks[nblocks++] = (mblock_t){ ARENA_BASE + ((uintptr_t)pos * MIN_BLOCK << order), order, B_LIVE, true, 0, 0 };
    }
    parse(s);
    ex_alias_granules(inst->index, (size_t)((inst->nleaves + 7) & ~UINT64_C(7)));
    /* Caches, if any thread uses one: attached to this run's fresh instance. */
    bool uses = false;
    for (unsigned t = 0; t < nth; t++)
        uses |= strpbrk(s->prog[t], "cgGdr") != NULL;
    nbbs_cache_config_t ccfg = { 2, 2, 2 };
    if (!strncmp(s->name, "carve-", 6) || !strncmp(s->name, "pct-carve-", 10))
        ccfg = (nbbs_cache_config_t){ 1, 8, 8 };
    if (nbbs_cache_size(&ccfg) > CACHE_BYTES)
        return false;
    for (unsigned t = 0; t < nth; t++)
        if (!(caches[t] = uses ? nbbs_cache_init(cache_mem[t], CACHE_BYTES, inst, &ccfg) : NULL) && uses)
            return false;
    return true;
}

static void final_checks(void)
{
    int rc;
    for (unsigned i = 0; i < nblocks; i++)
        if (blocks[i].pre && blocks[i].attempts && blocks[i].wins != 1) {
            ex_fail("S2: the block at %#lx was freed %u times concurrently and %u of them returned 0",
                    (unsigned long)blocks[i].addr, blocks[i].attempts, blocks[i].wins);
            return;
        }
    if ((rc = nbbs_validate(inst)) != 0) {
        ex_fail("end: the tree is not what a sequential buddy system would hold (validate %d)", rc);
        return;
    }
    for (unsigned i = 0; i < nblocks; i++)
        if (blocks[i].state == B_LIVE && (rc = nbbs_free(inst, (void *)blocks[i].addr)) != 0) {
            ex_fail("end: free of the live block at %#lx returned %d", (unsigned long)blocks[i].addr, rc);
            return;
        }
    if ((rc = nbbs_validate(inst)) != 0) {
        ex_fail("end: after everything was freed the tree is not all-free (validate %d): a stale mark", rc);
        return;
    }
    void *top[64];
    unsigned n = scn->ntrees;
    for (unsigned i = 0; i < n; i++)
        if (!(top[i] = nbbs_alloc_order(inst, scn->max_order))) {
            ex_fail("end: after everything was freed, max-size block %u of %u cannot be allocated", i, n);
            return;
        }
    for (unsigned i = 0; i < n; i++)
        nbbs_free(inst, top[i]);
    if ((rc = nbbs_validate(inst)) != 0)
        ex_fail("end: validate %d after allocating and freeing every max-size block", rc);
}

void ex_run(const ex_scenario_t *s, const unsigned *slots, ex_chooser_t choose, void *ctx, ex_result_t *res)
{
    res->failed = res->pruned = false;
    res->steps = 0;
    res->msg[0] = 0;
    ex_clear_failure();
    if (!setup(s)) {
        snprintf(res->msg, sizeof res->msg, "scenario %s: bad set-up", s->name);
        res->failed = true;
        return;
    }
    sched_begin(nth, slots, thread_body);
    unsigned step = 0;
    while (!ex_failed()) {
        unsigned en = 0;
        for (unsigned t = 0; t < nth; t++)
            if (!sched_done((int)t))
                en |= 1u << t;
        if (!en)
            break;
        if (step >= EX_MAX_STEPS) {
            ex_fail("the run took more than %d steps (livelock?)", EX_MAX_STEPS);
            break;
        }
        int t = choose(ctx, step, en);
        if (t < 0) {
            res->pruned = true;
            break;
        }
        ex_pending_t what = sched_pending(t);
        res->sched[step++] = (uint8_t)t;
        sched_step(t);
        if (ex_trace)
            trace_step(step - 1, t, what);
        check_step();
    }
    sched_end();
    if (!ex_failed() && !res->pruned)
        final_checks();
    res->steps = step;
    res->failed = ex_failed();
    if (res->failed)
        snprintf(res->msg, sizeof res->msg, "%s", ex_failure());
}
