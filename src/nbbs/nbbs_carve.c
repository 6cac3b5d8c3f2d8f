/*
 * nbbs_carve.c - carved blocks: merging one back into the tree when all its
 * frames are free, taking a free frame from any of them under pressure, and
 * the free of a carved frame. Freestanding, like the rest of the core. The
 * layout of a carved block is in nbbs_carve.h and nbbs_cache.c ("Bulk
 * refill").
 */
#include "nbbs_carve.h"

/* The carved block at g0 goes back to the tree if all its frames are free:
 * one CAS takes its word from exactly that state to 0 (so the decision rests
 * on the word's current value, not on how it got there), then the rest of a
 * free of the whole block. One attempt: a CAS fails only because a frame
 * changed, and a frame that became free since our load is followed by its
 * freer's own attempt. covered: the group's free count is high enough for
 * the block already (a frame cache's balance, nbbs__give_back). */
unsigned nbbs__carve_merge(nbbs_t *b, uint64_t g0, bool covered)
{
    NBBS_ATOMIC(uint64_t) *w = carve_word(b, g0);
    carve_word_t x;
    x.w = nb_load_u64(w);
    if (!carve_all_free(x) || !nb_cas_u64(w, &x.w, 0))
        return 0;
    nbbs__free_leaf(b, g0, NBBS_CARVE_ORDER, !covered);
    /* Its frames: the bytes with CARVED, summed by one multiply (each byte
     * contributes 0 or 1 to the top byte; no popcount call in the core). */
    return (unsigned)((((x.w >> 6) & UINT64_C(0x0101010101010101)) * UINT64_C(0x0101010101010101)) >> 56);
}

/* In word y, take the region of 2^order leaves at byte o if it is free: a
 * free frame of that order or larger starting at o (a larger one is split,
 * its other halves staying free frames), or free frames that fill the
 * region. The region becomes one live frame. False if it is not free. */
static bool take_region(carve_word_t *y, unsigned o, unsigned order)
{
    /* volatile: a loop of zero stores into the word must not become a
     * call to memset (the freestanding core needs no libc function). */
    volatile uint8_t *by = y->by;
    uint8_t v0 = by[o];
    if (!(v0 & NBBS_IDX_CARVED))
        return false; /* inside a larger frame: that frame's start decides */
    unsigned k0 = (v0 & NBBS_IDX_ORDER) - 1u;
    if (k0 >= order) {
        if (!(v0 & NBBS_IDX_CACHED))
            return false;
        for (unsigned j = order; j < k0; j++)
            by[o + (1u << j)] = (uint8_t)((j + 1u) | NBBS_IDX_CARVED | NBBS_IDX_CACHED);
    } else {
        for (unsigned i = o; i < o + (1u << order); i++)
            if (by[i] && !(by[i] & NBBS_IDX_CACHED))
                return false;
        for (unsigned i = o + 1; i < o + (1u << order); i++)
            by[i] = 0;
    }
    by[o] = (uint8_t)((order + 1u) | NBBS_IDX_CARVED);
    return true;
}

/* Take a region of this order (splitting or combining free frames) in the
 * carved block at leaf g0, whose word was loaded as x: one CAS; a failed
 * CAS means a frame of that block changed (another thread's progress), and
 * the block is looked at again with its new value. Frames left free beside
 * the region (or split off) are marked stray, since no stack names them.
 * Returns the region's first leaf, or UINT64_MAX if the block has none. */
static uint64_t take_in_block(nbbs_t *b, uint64_t g0, carve_word_t x, unsigned order)
{
    NBBS_ATOMIC(uint64_t) *w = carve_word(b, g0);
again:
    if (!carve_any_free(x))
        return UINT64_MAX; /* no byte both carved (bit 6) and free (bit 7) */
    for (unsigned o = 0; o < CARVE_LEAVES; o += 1u << order) {
        carve_word_t y = x;
        if (!take_region(&y, o, order))
            continue;
        if (nb_cas_u64(w, &x.w, y.w)) {
            if (carve_any_free(y))
                stray_mark(b, g0);
            return g0 + o;
        }
        goto again; /* x holds the word's new value */
    }
    return UINT64_MAX;
}

/* take_in_block on the carved block at g0 as it is now. */
void *nbbs__carve_take_at(nbbs_t *b, uint64_t g0, unsigned order)
{
    carve_word_t x;
    x.w = nb_load_u64(carve_word(b, g0));
    uint64_t leaf = take_in_block(b, g0, x, order);
    return leaf != UINT64_MAX ? addr_of(b, leaf) : NULL;
}

/* The carved blocks [g, end) in order: the first leaf of a region of this
 * order taken in one of them (take_in_block), or UINT64_MAX. Near full
 * nearly every word has no free frame, so the words are looked at four at a
 * time, their free bytes ORed, in this loop: a call per word (a load and
 * take_in_block, as nbbs__carve_take_at does for one block) was most of
 * what a failing allocation cost (alloc-rnd: 9,400 cycles for the last,
 * failing one of a round, 64 % of them in the calls). */
static uint64_t take_in_range(nbbs_t *b, uint64_t g, uint64_t end, unsigned order)
{
    while (g < end) {
        carve_word_t x[4];
        unsigned n = end - g >= 4 ? 4u : 1u;
        uint64_t any = 0;
        for (unsigned j = 0; j < n; j++) {
            x[j].w = nb_load_u64(carve_word(b, (g + j) << NBBS_CARVE_ORDER));
            any |= carve_free_bytes(x[j]);
        }
        if (any)
            for (unsigned j = 0; j < n; j++) {
                if (!carve_any_free(x[j]))
                    continue;
                uint64_t leaf = take_in_block(b, (g + j) << NBBS_CARVE_ORDER, x[j], order);
                if (leaf != UINT64_MAX)
                    return leaf;
            }
        g += n;
    }
    return UINT64_MAX;
}

/* Under pressure: a free frame of this order (or one that can be split, or
 * free frames that make one) in any carved block, named on a stack or not.
 * One CAS on the carved block's word takes it; a failed CAS means a frame
 * of that block changed (another thread's progress), and the block is
 * looked at again with its new value. */
void *nbbs__carve_take(nbbs_t *b, unsigned order)
{
    uint64_t ng = b->nleaves >> NBBS_CARVE_ORDER;
    if (!ng)
        return NULL;
    /* From the caller's hint cell on, wrapping: where this context found
     * (or freed) frames last, so a run of takes under pressure does not
     * rescan what the previous ones passed. */
    NBBS_ATOMIC(uint64_t) *hint = nbbs__hint(b);
    uint64_t g = (nb_hint_load(hint) >> NBBS_CARVE_ORDER) % ng;
    uint64_t leaf = take_in_range(b, g, ng, order);
    if (leaf == UINT64_MAX)
        leaf = take_in_range(b, 0, g, order);
    if (leaf == UINT64_MAX)
        return NULL;
    nb_hint_store(hint, leaf);
    return addr_of(b, leaf);
}

/* Clear the stray bits in stale of bitmap word wi, whose blocks were seen
 * with no free frame (merged, or every frame live): one RMW for all of
 * them (a harvest after a phase of frees finds most marked blocks merged,
 * and an RMW per bit on lines the other CPUs mark was what it cost), then
 * a second look at each, which sees a frame freed and marked before the
 * clear and marks its block again. */
static void strays_clear(nbbs_t *b, uint64_t wi, uint64_t stale)
{
    if (!stale)
        return;
    nb_hole_and(&b->strays[wi], ~stale);
    while (stale) {
        unsigned bit = (unsigned)__builtin_ctzll(stale);
        stale &= stale - 1;
        uint64_t g0 = ((wi << 6) + bit) << NBBS_CARVE_ORDER;
        carve_word_t x;
        x.w = nb_load_u64(carve_word(b, g0));
        if (carve_any_free(x))
            stray_mark(b, g0);
    }
}

/* A pass over the stray bitmap from the carved block the context's hint
 * names (where it found or freed frames last), wrapping: nw + 1 visits of
 * words, the first word's bits below the start coming last. Shared by the
 * stray take and the harvest. */
typedef struct {
    uint64_t g, wi, nw, m0, i; /* start block, word, words, first word's mask, visit */
} stray_walk_t;

static inline stray_walk_t stray_walk(NBBS_ATOMIC(uint64_t) *hint, uint64_t ng)
{
    uint64_t g = (nb_hint_load(hint) >> NBBS_CARVE_ORDER) % ng;
    return (stray_walk_t){ .g = g, .wi = g >> 6, .nw = (ng + 63) >> 6, .m0 = ~UINT64_C(0) << (g & 63), .i = 0 };
}

static inline void stray_next(stray_walk_t *sw)
{
    sw->i++;
    sw->wi = sw->wi + 1 < sw->nw ? sw->wi + 1 : 0;
}

/* The marked bits of the walk's word that this visit covers. */
static inline uint64_t stray_bits(nbbs_t *b, const stray_walk_t *sw)
{
    uint64_t mask = sw->i == 0 ? sw->m0 : sw->i == sw->nw ? ~sw->m0 : ~UINT64_C(0);
    return nb_hole_load(&b->strays[sw->wi]) & mask;
}

/* The first leaf of the carved block of bit `bit` of stray word wi, with
 * its carve word loaded into *x. */
static inline uint64_t stray_block(nbbs_t *b, uint64_t wi, unsigned bit, carve_word_t *x)
{
    uint64_t g0 = ((wi << 6) + bit) << NBBS_CARVE_ORDER;
    x->w = nb_load_u64(carve_word(b, g0));
    return g0;
}

void *nbbs__carve_take_stray(nbbs_t *b, unsigned order)
{
    uint64_t ng = b->nleaves >> NBBS_CARVE_ORDER;
    if (!ng)
        return NULL;
    NBBS_ATOMIC(uint64_t) *hint = nbbs__hint(b);
    for (stray_walk_t sw = stray_walk(hint, ng); sw.i <= sw.nw; stray_next(&sw)) {
        uint64_t wi = sw.wi, v = stray_bits(b, &sw), stale = 0;
        while (v) {
            unsigned bit = (unsigned)__builtin_ctzll(v);
            v &= v - 1;
            carve_word_t x;
            uint64_t g0 = stray_block(b, wi, bit, &x);
            if (!carve_any_free(x)) {
                stale |= UINT64_C(1) << bit; /* nothing free here any more */
                continue;
            }
            uint64_t leaf = take_in_block(b, g0, x, order);
            if (leaf != UINT64_MAX) {
                strays_clear(b, wi, stale);
                nb_hint_store(hint, leaf);
                return addr_of(b, leaf);
            }
        }
        strays_clear(b, wi, stale);
    }
    return NULL;
}

int nbbs__carved_free(nbbs_t *b, uint64_t leaf, uint8_t v)
{
    if (!nb_cas_u8(&b->index[leaf], &v, (uint8_t)(v | NBBS_IDX_CACHED)))
        return NBBS_EINVAL; /* a concurrent free of the same frame won */
    uint64_t g0 = leaf & ~(uint64_t)(CARVE_LEAVES - 1);
    if (!nbbs__carve_merge(b, g0, false))
        stray_mark(b, g0); /* free, named on no stack: for the harvests */
    return 0;
}

/* Name up to max free frames of this order found in carved blocks whose
 * stray bit is set in s[0..], from the context's hint cell on (where it
 * found or freed frames last), wrapping, at most one pass over the bitmap.
 * A block with no free frame of this order keeps its bit (its frames are
 * for another order's harvest), or loses it if it has no free frame at all
 * (merged, or every frame live). A block whose frames are named here keeps
 * its bit only if it still holds free frames of another order. Naming takes
 * nothing: the pops' CAS decide. Returns how many. */
uint64_t nbbs__carve_harvest(nbbs_t *b, NBBS_ATOMIC(uint64_t) *s, unsigned order, uint64_t max, uint64_t *looked)
{
    uint8_t freev = (uint8_t)((order + 1u) | NBBS_IDX_CARVED | NBBS_IDX_CACHED);
    uint64_t ng = b->nleaves >> NBBS_CARVE_ORDER, n = 0;
    *looked = 0;
    if (!ng)
        return 0;
    NBBS_ATOMIC(uint64_t) *hint = nbbs__hint(b);
    stray_walk_t sw = stray_walk(hint, ng);
    uint64_t g = sw.g;
    for (; sw.i <= sw.nw && n + CARVE_LEAVES <= max; stray_next(&sw)) {
        uint64_t wi = sw.wi, v = stray_bits(b, &sw), stale = 0;
        NBBS_ATOMIC(uint64_t) *bw = &b->strays[wi];
        while (v && n + CARVE_LEAVES <= max) {
            unsigned bit = (unsigned)__builtin_ctzll(v);
            v &= v - 1;
            carve_word_t x;
            uint64_t g0 = stray_block(b, wi, bit, &x);
            NBBS_ATOMIC(uint64_t) *w = carve_word(b, g0);
            if (!carve_any_free(x)) {
                stale |= UINT64_C(1) << bit; /* merged, or every frame live */
                continue;
            }
            if (!carve_eq(x, freev))
                continue; /* another order's frames: its bit stays */
            /* Clear the bit, then read the word again: a frame freed and
             * marked before the clear is seen by this load. */
            nb_hole_and(bw, ~(UINT64_C(1) << bit));
            x.w = nb_load_u64(w);
            uint64_t mine = carve_eq(x, freev);
            /* Free frames of other orders (CARVED and CACHED, not ours). */
            bool other = (carve_free_bytes(x) & ~mine) != 0;
            while (mine)
                nb_own_store(&s[n++], g0 + carve_pop_high(&mine));
            if (other)
                stray_mark(b, g0);
            if (n + CARVE_LEAVES > max) {
                g = (wi << 6) + bit;
                break;
            }
        }
        strays_clear(b, wi, stale);
        if (n + CARVE_LEAVES > max)
            break;
    }
    if (n + CARVE_LEAVES <= max) {
        *looked = ng; /* the whole bitmap: nothing more was marked when this pass saw it */
    } else {
        /* Stopped at block g: the next harvest goes on from there, so
         * successive ones sweep the bitmap like a clock hand. (A full
         * pass leaves the hint alone: it is also the tree's order-0 fill
         * point, and moving it on past the fill front left holes behind
         * that later scans went round the arena for.) */
        *looked = sw.i << 6;
        nb_hint_store(hint, g << NBBS_CARVE_ORDER);
    }
    return n;
}
