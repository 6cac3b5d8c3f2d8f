/*
 * arena.c - arenas on demand, the owner map, and back-end blocks (medium.c
 * keeps the medium blocks on top of them).
 *
 * Arenas. An arena owns a 1 GiB slot of address space (aligned to 1 GiB) but
 * reserves only its own size from the slot's start: 64 MiB for the first,
 * doubling with each new arena up to 1 GiB, and smaller when the OS refuses
 * that much (down to what the request needs). One nbbs instance (4 KiB
 * min_block, blocks up to 64 MiB or the arena size) manages it; its metadata,
 * and our per-unit words and per-page bytes, sit in a separate mapping. The
 * reservation is aligned without a 2x over-map (nbm__os_reserve_aligned).
 * When every arena is full, a thread reserves a new one, registers it in the
 * owner map with a CAS, and
 * appends it to the arena table with a CAS on the first empty slot; a thread
 * that loses the slot race helps advance the count and tries the next slot.
 * No lock, and an arena is never removed, so readers need no protection.
 */
#include "internal.h"

/* Tests only (tests/nbmalloc/test_split_race.c): called, when set, by a
 * medium block's split between its free and its takes (medium.c) and by a
 * refused take (here), so that other threads allocate in that window
 * (about a microsecond: a 60 s stress run saw a few races a second without
 * it, and only under load; thousands with it). Defined here, the lower of
 * its two users (tests/nbmalloc/layers.py). Hidden (no program or preload
 * reaches it); set before any thread starts and never changed after; one
 * load on the split's path and on a refused take only. */
void (*nbm__split_window)(void);

#define NBM_ARENA_MAX 4096u /* 4 TiB of arenas */

_Atomic uintptr_t nbm__map[NBM_MAP_SIZE];
static _Atomic uintptr_t arenas[NBM_ARENA_MAX];
static _Atomic uint32_t narenas;


nbm_arena_t *nbm__arena_at(uint32_t i) { return (nbm_arena_t *)nbm_load_uptr(&arenas[i]); }
uint32_t nbm__arena_count(void) { return nbm_load_u32(&narenas); }

static size_t meta_offset(void)
{
    return (sizeof(nbm_arena_t) + NBBS_META_ALIGN - 1) & ~(size_t)(NBBS_META_ALIGN - 1);
}

/* Takes the owner-map entry of a slot whose start the caller has just
 * mapped: the entry is 0, a tombstone, or a retired arena (whose range is
 * unmapped: it is marked gone for good, so it is never revived). */
bool nbm__map_claim(uintptr_t slot, uintptr_t value)
{
    if (slot >= NBM_MAP_SIZE)
        return false;
    uintptr_t v = nbm_load_uptr(&nbm__map[slot]);
    for (;;) {
        if (nbm__map_is_huge(v))
            return false; /* a live huge mapping */
        if (nbm__map_is_arena(v)) {
            nbm_arena_t *old = nbm__map_arena(v);
            uint32_t r = nbm_load_u32(&old->retired);
            if (r != NBM_ARENA_GONE && (r != NBM_ARENA_RETIRED || !nbm_cas_u32(&old->retired, &r, NBM_ARENA_GONE)))
                return false; /* live, or being revived */
        }
        if (nbm_cas_uptr(&nbm__map[slot], &v, value))
            return true;
    }
}

static _Atomic uint64_t reserved; /* arena and huge bytes mapped */

bool nbm__budget_take(size_t bytes)
{
    uint64_t r = nbm_load_u64(&reserved);
    for (;;) {
        if (nbm__opt.limit && (r > nbm__opt.limit || bytes > nbm__opt.limit - r))
            return false;
        if (nbm_cas_u64(&reserved, &r, r + bytes))
            return true;
    }
}

void nbm__budget_give(size_t bytes)
{
    nbm_sub_u64(&reserved, bytes);
}

/* Clears the dirty marks of [p, p + pages) (the caller's now). */
static void marks_clear(nbm_arena_t *ar, void *p, size_t pages)
{
    size_t k0 = ((uintptr_t)p - ar->base) >> NBM_PAGE_SHIFT;
    for (size_t k = 0; k < pages; k++)
        nbm_store_u8_relaxed(&ar->page_order[k0 + k], 0);
}

/* The first arena: 64 MiB. With a first arena of 4 (or 16) MiB,
 * thread-test 1,024 B at 2 threads took 40 % more CPU a pair whenever the
 * host placed the two vCPUs apart; with 64 MiB or 1 GiB it took none more
 * (docs/nbmalloc.md, "Limits": measured, not traced). The arena's
 * reservation is address space only (nothing resident until touched), and
 * under a limit arena_create tries smaller sizes. */
#define NBM_ARENA_FIRST_SHIFT 26

/* log2 of the size the next arena is made at (before a large block's
 * need): 64 MiB for the first, doubling with each one, at most
 * NBM_ARENA_SIZE. */
static unsigned next_arena_shift(void)
{
    unsigned shift = NBM_ARENA_FIRST_SHIFT + nbm_load_u32(&narenas);
    return shift < NBM_ARENA_SHIFT ? shift : NBM_ARENA_SHIFT;
}

/* A new arena able to hold a block of `order`, or NULL (ENOMEM). */
static nbm_arena_t *arena_create(unsigned order)
{
    unsigned need = order + NBM_PAGE_SHIFT, want = next_arena_shift();
    if (need < NBM_UNIT_SHIFT)
        need = NBM_UNIT_SHIFT;
    if (want < need)
        want = need;
    for (unsigned shift = want; shift >= need; shift--) {
        size_t size = (size_t)1 << shift;
        unsigned mo = shift - NBM_PAGE_SHIFT < NBM_MAX_ORDER ? shift - NBM_PAGE_SHIFT : NBM_MAX_ORDER;
        nbbs_config_t cfg = { .min_block = NBM_PAGE, .max_order = mo, .layout = NBBS_LAYOUT_BUNCH };
        size_t msz = nbbs_meta_size(size, &cfg);
        if (msz == 0)
            nbm__fatal("back-end rejects the arena configuration, size", (void *)size);
        if (!nbm__budget_take(size))
            continue;
        char *meta = nbm__os_map(meta_offset() + msz);
        char *base = meta ? nbm__os_reserve_aligned(size, NBM_ARENA_SIZE) : NULL;
        if (!base || ((uintptr_t)base >> NBM_ARENA_SHIFT) >= NBM_MAP_SIZE) {
            nbm__os_unmap(base, size);
            nbm__os_unmap(meta, meta_offset() + msz);
            nbm__budget_give(size);
            continue;
        }
        nbm_arena_t *ar = (nbm_arena_t *)meta;
        ar->base = (uintptr_t)base;
        ar->size = size;
        ar->max_order = mo;
        ar->bb = nbbs_init(meta + meta_offset(), msz, base, size, &cfg);
        if (!ar->bb)
            nbm__fatal("back-end rejects the arena at", base);
        return ar;
    }
    return NULL;
}

/* Retiring. An arena whose blocks are all free can give its address space
 * back: the retirer allocates every top-level block itself (so no one else
 * can get any), then unmaps the range. The arena stays in the table and the
 * owner map (its records say "nothing here", so a pointer into it is
 * invalid); reviving maps the range again and frees the blocks. Only done
 * after an allocation failed, to make room for a mapping of another kind. */
static size_t retire_empty_arenas(void)
{
    size_t freed = 0;
    for (uint32_t i = 0; i < nbm_load_u32(&narenas); i++) {
        nbm_arena_t *ar = nbm__arena_at(i);
        if (nbm_load_u32(&ar->retired) != 0)
            continue;
        size_t top = NBM_PAGE << ar->max_order, n = ar->size / top, got = 0;
        void *taken[NBM_ARENA_SIZE >> (NBM_PAGE_SHIFT + NBM_MAX_ORDER)];
        for (; got < n; got++)
            if (!(taken[got] = nbbs_alloc_order(ar->bb, ar->max_order)))
                break;
        if (got < n) { /* something is in use: give back what was taken */
            while (got)
                nbm__block_free(ar, taken[--got]);
            continue;
        }
        nbm__os_unmap((void *)ar->base, ar->size);
        nbm__budget_give(ar->size);
        marks_clear(ar, (void *)ar->base, ar->size >> NBM_PAGE_SHIFT); /* mapped afresh if revived: zero */
        nbm_store_u32(&ar->retired, NBM_ARENA_RETIRED);
        NBM_STAT_SUB(arena_bytes, ar->size);
        freed += ar->size;
    }
    return freed;
}

/* Revives a retired arena able to hold `order`; also one whose slot went to
 * a huge mapping (gone), if that mapping is freed and the range is free
 * again: its records are reused rather than leaked. */
static bool arena_revive(uint32_t seen, unsigned order)
{
    for (uint32_t i = 0; i < seen; i++) {
        nbm_arena_t *ar = nbm__arena_at(i);
        uint32_t was = nbm_load_u32(&ar->retired);
        if (ar->max_order < order || (was != NBM_ARENA_RETIRED && was != NBM_ARENA_GONE) ||
            !nbm_cas_u32(&ar->retired, &was, NBM_ARENA_REVIVING))
            continue;
        if (!nbm__budget_take(ar->size)) {
            nbm_store_u32(&ar->retired, was);
            continue;
        }
        if (!nbm__os_map_at((void *)ar->base, ar->size)) {
            nbm__budget_give(ar->size);
            nbm_store_u32(&ar->retired, was);
            continue;
        }
        if (was == NBM_ARENA_GONE && !nbm__map_claim(ar->base >> NBM_ARENA_SHIFT, (uintptr_t)ar | NBM_MAP_ARENA)) {
            nbm__os_unmap((void *)ar->base, ar->size);
            nbm__budget_give(ar->size);
            nbm_store_u32(&ar->retired, was);
            continue;
        }
        size_t top = NBM_PAGE << ar->max_order;
        nbm_store_u32(&ar->retired, 0);
        for (size_t k = 0; k < ar->size / top; k++)
            nbm__block_free(ar, (void *)(ar->base + k * top));
        NBM_STAT_ADD(arena_bytes, ar->size);
        return true;
    }
    return false;
}

bool nbm__arena_reclaim(void)
{
    return retire_empty_arenas() != 0;
}

/* Set when a request found no block and no arena could be added (the OS or
 * NBM_LIMIT_MB refused the address space), and when an arena is added or
 * revived with the wall near (wall_near); cleared when one is added or
 * revived with room to spare. While set, a request that takes a larger
 * cached medium block splits it (medium.c): from the wall near, so that
 * blocks are not taken whole in the last arenas' worth of address space
 * and stranded there until freed. Relaxed: a hint; a stale read splits one
 * block more or less. */
static _Atomic uint32_t memory_short;

/* Whether the next arena would not fit at its size (next_arena_shift):
 * NBM_LIMIT_MB less the bytes reserved (arenas and huge mappings), or the
 * address space RLIMIT_AS leaves the whole process (nbm__os_as_room), is
 * below it. Read when an arena is added or revived
 * only (a few system calls with a limit, one getrlimit without). */
static bool wall_near(void)
{
    uint64_t next = (uint64_t)1 << next_arena_shift();
    uint64_t r = nbm_load_u64(&reserved);
    if (nbm__opt.limit && (r >= nbm__opt.limit || nbm__opt.limit - r < next))
        return true;
    return nbm__os_as_room() < next;
}

bool nbm__memory_short(void)
{
    return nbm_load_u32_relaxed(&memory_short) != 0;
}

/* Called when a scan of the first `seen` arenas found no block of `order`.
 * Returns false when out of memory. */
static bool arena_grow(uint32_t seen, unsigned order)
{
    if (nbm_load_u32(&narenas) != seen)
        return true; /* another thread grew meanwhile: rescan first */
    if (arena_revive(seen, order)) {
        nbm_store_u32_relaxed(&memory_short, wall_near());
        return true;
    }
    if (seen >= NBM_ARENA_MAX)
        return false;
    nbm_arena_t *ar = arena_create(order);
    if (!ar)
        return false;
    if (!nbm__map_claim(ar->base >> NBM_ARENA_SHIFT, (uintptr_t)ar | NBM_MAP_ARENA)) {
        /* a slot being revived under us: give this one up (rare; its
         * metadata mapping is left, unused) */
        nbm__os_unmap((void *)ar->base, ar->size);
        nbm__budget_give(ar->size);
        return false;
    }
    for (;;) {
        uint32_t n = nbm_load_u32(&narenas);
        if (n >= NBM_ARENA_MAX)
            return false; /* registered in the map but unused: harmless */
        uintptr_t empty = 0;
        ar->index = n;
        bool won = nbm_cas_uptr(&arenas[n], &empty, (uintptr_t)ar);
        /* Winner or not, slot n is filled: advance the count (helping). */
        nbm_cas_u32(&narenas, &n, n + 1);
        if (won) {
            NBM_STAT_ADD(arenas, 1);
            NBM_STAT_ADD(arena_bytes, ar->size);
            nbm_store_u32_relaxed(&memory_short, wall_near());
            return true;
        }
    }
}

/* A block fresh from the back-end must cover no unit of a live chunk and no
 * page where a live medium block starts: both bytes are cleared before a
 * block goes back. Costs a scan of size/4 KiB bytes, small next to using the
 * block; turns a back-end overlap (docs/correctness.md, S1) into a loud stop
 * instead of silent corruption. A page byte NBM_PAGE_DIRTY is not a block:
 * the page went back resident (a cached block split by nbm__block_take_next's
 * caller), so the block is not known zero; returns whether one was seen, and
 * with clear (the block is the caller's for good) clears them. Without
 * clear (a block given back at once) they stay for its next taker. With
 * count (another allocation's block, kept), a block with marks counts in
 * the statistics (dirty_takes: the split's window was entered). */
static bool check_fresh(void *p, unsigned order, bool clear, bool count)
{
    nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
    uintptr_t off = (uintptr_t)p - ar->base;
    size_t pages = (size_t)1 << order, u0 = off >> NBM_UNIT_SHIFT;
    size_t units = (NBM_PAGE << order) >> NBM_UNIT_SHIFT;
    bool dirty = false;
    for (size_t u = 0; u < (units ? units : 1); u++)
        if (nbm_load_u32_relaxed(&ar->unit[u0 + u]))
            nbm__fatal("internal error: back-end block overlaps a live chunk at", p);
    for (size_t k = 0; k < pages; k++) {
        _Atomic uint8_t *b = &ar->page_order[(off >> NBM_PAGE_SHIFT) + k];
        uint8_t v = nbm_load_u8_relaxed(b);
        if (NBM_LIKELY(v == 0)) /* a free page: the common case, one test */
            continue;
        if (v == NBM_PAGE_DIRTY) {
            if (count && !dirty)
                NBM_STAT_ADD(dirty_takes, 1);
            dirty = true;
            if (clear) /* relaxed: the block is ours; the back-end's CAS publishes it */
                nbm_store_u8_relaxed(b, 0);
        } else if (v) {
            nbm__fatal("internal error: back-end block overlaps a live medium block at", p);
        }
    }
    return dirty;
}

/* A block of the order from the back-end, searched from *hint; *dirty when
 * some of it went back resident (see check_fresh). */
static void *block_find(unsigned order, uint32_t *hint, bool clear, bool *dirty)
{
    for (;;) {
        uint32_t n = nbm_load_u32(&narenas);
        uint32_t h = *hint < n ? *hint : 0;
        for (uint32_t k = 0; k < n; k++) {
            uint32_t i = h + k < n ? h + k : h + k - n;
            nbm_arena_t *ar = (nbm_arena_t *)nbm_load_uptr(&arenas[i]);
            if (order > ar->max_order || nbm_load_u32_relaxed(&ar->retired))
                continue;
            void *p = nbbs_alloc_order(ar->bb, order);
            if (p) {
                *hint = i;
                *dirty = check_fresh(p, order, clear, clear); /* counted when final */
                return p;
            }
        }
        /* Address space first: cached blocks are what the policy decided
         * the program will reuse, and flushing them here is what made a
         * working set larger than the cache purge and refault. The cache
         * is the layer above's (medium.c): its caller sweeps it and asks
         * again, a page's through nbm__recover. */
        if (arena_grow(n, order))
            continue;
        nbm_store_u32_relaxed(&memory_short, 1);
        return NULL;
    }
}

void *nbm__block_alloc(unsigned order, uint32_t *hint, bool *dirty)
{
    return block_find(order, hint, true, dirty);
}

void nbm__block_free(nbm_arena_t *ar, void *p)
{
    if (nbbs_free(ar->bb, p) != 0)
        nbm__fatal("internal error: back-end refused to free block", p);
}

/* Frees the pieces [p, end) of a block, each of the size the back-end
 * says (a packed block's pieces need not be largest first). */
static void pieces_free(nbm_arena_t *ar, char *p, char *end)
{
    while (p < end) {
        size_t n = nbbs_block_size(ar->bb, p);
        if (n == 0)
            nbm__fatal("internal error: back-end knows no piece at", p);
        nbm__block_free(ar, p);
        p += n;
    }
}

/* Where this thread's last block of pieces ended: the next one is first
 * tried right there (pack), so blocks between powers of two sit end to end
 * instead of each in a power of two of its own (under an address-space
 * limit they fitted 0.51-0.75 of glibc's bytes). Thread-local: no shared
 * word, and a thread's blocks of one size pack with each other. */
static _Thread_local uintptr_t pack_end NBM_TLS;

/* The order of the largest buddy block aligned at q that fits below end
 * (q < end; not capped by the arena's largest block). */
static unsigned piece_order(const nbm_arena_t *ar, const char *q, const char *end)
{
    size_t off = (size_t)((uintptr_t)q - ar->base) >> NBM_PAGE_SHIFT, left = (size_t)(end - q) >> NBM_PAGE_SHIFT;
    unsigned k = 63u - (unsigned)__builtin_clzll(left);
    if (off && (unsigned)__builtin_ctzll(off) < k)
        k = (unsigned)__builtin_ctzll(off);
    return k;
}

/* Claims [x, x + pages) as aligned buddy blocks, greedy (at each address the
 * largest block aligned there that still fits; from the start of a block of
 * the next power of two, that is one block per binary digit of pages,
 * largest first); if a piece is taken meanwhile (or larger than the arena's
 * max block), gives back those taken and says false. */
static bool pieces_take(nbm_arena_t *ar, char *x, size_t pages, bool *dirty)
{
    char *q = x, *end = x + (pages << NBM_PAGE_SHIFT);
    bool d = false;
    while (q < end) {
        unsigned k = piece_order(ar, q, end);
        int rc = k > ar->max_order ? NBBS_EBUSY : nbbs_alloc_at(ar->bb, q, k);
        if (rc == NBBS_EBUSY) {
            pieces_free(ar, x, q);
            return false;
        }
        if (rc != 0)
            nbm__fatal("internal error: back-end refused a piece at", q);
        d |= check_fresh(q, k, false, false); /* marks stay if a later piece is refused */
        q += NBM_PAGE << k;
    }
    if (d) {
        marks_clear(ar, x, pages);
        NBM_STAT_ADD(dirty_takes, 1);
    }
    *dirty = d;
    return true;
}

/* The packed placement right after this thread's last block of pieces, or
 * NULL (no such block, past its arena's end, or a piece taken). */
static void *pack_next(size_t pages, bool *dirty)
{
    uintptr_t x = pack_end;
    if (!x)
        return NULL;
    nbm_arena_t *ar = nbm__arena_of(x - 1);
    if (!ar || nbm_load_u32_relaxed(&ar->retired) ||
        x + (pages << NBM_PAGE_SHIFT) > ar->base + ar->size || x + (pages << NBM_PAGE_SHIFT) < x)
        return NULL;
    return pieces_take(ar, (char *)x, pages, dirty) ? (void *)x : NULL;
}

/* Tries of the search and the in-place takes before the power-of-two
 * block is kept whole. */
#define NBM_PIECE_TRIES 3

void *nbm__block_alloc_pieces(size_t pages, bool pack, uint32_t *hint, bool *whole, bool *dirty)
{
    unsigned o = 63u - (unsigned)__builtin_clzll(pages); /* 2^o < pages < 2^(o+1) */
    *whole = false;
    void *x = pack ? pack_next(pages, dirty) : NULL;
    if (x) {
        pack_end = (uintptr_t)x + (pages << NBM_PAGE_SHIFT);
        return x;
    }
    for (unsigned t = 0;; t++) {
        bool last = t + 1 == NBM_PIECE_TRIES;
        char *p = block_find(o + 1, hint, last, dirty); /* marks kept on a block given back */
        if (!p || last) {
            *whole = p != NULL;
            return p;
        }
        nbm_arena_t *ar = nbm__arena_of((uintptr_t)p);
        nbm__block_free(ar, p);
        if (pieces_take(ar, p, pages, dirty)) {
            if (pack)
                pack_end = (uintptr_t)p + (pages << NBM_PAGE_SHIFT);
            return p;
        }
        /* another allocation took part of the range meanwhile: again */
    }
}

void nbm__block_free_pieces(nbm_arena_t *ar, void *p, size_t pages)
{
    pieces_free(ar, p, (char *)p + (pages << NBM_PAGE_SHIFT));
}

void nbm__block_free_any(nbm_arena_t *ar, void *p, size_t pages)
{
    if (pages & (pages - 1))
        pieces_free(ar, p, (char *)p + (pages << NBM_PAGE_SHIFT));
    else
        nbm__block_free(ar, p);
}

void *nbm__block_take_next(nbm_arena_t *ar, char **q, char *end, unsigned *order)
{
    while (*q < end) {
        char *x = *q;
        unsigned k = piece_order(ar, x, end);
        if (k > ar->max_order)
            k = ar->max_order;
        for (;;) {
            int rc = nbbs_alloc_at(ar->bb, x, k);
            if (rc == 0) {
                check_fresh(x, k, true, false); /* the split's own marks */
                *q = x + (NBM_PAGE << k);
                *order = k;
                return x;
            }
            if (rc != NBBS_EBUSY)
                nbm__fatal("internal error: back-end refused a piece at", x);
            if (k == 0)
                break; /* this page is another allocation's */
            k--; /* part of it is taken: its first half */
            NBM_STAT_ADD(split_retakes, 1);
            if (NBM_UNLIKELY(nbm__split_window != NULL))
                nbm__split_window(); /* tests only: the other allocation may end meanwhile */
        }
        NBM_STAT_ADD(split_skips, 1);
        *q = x + NBM_PAGE;
    }
    return NULL;
}

