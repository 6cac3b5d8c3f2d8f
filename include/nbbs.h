/*
 * nbbs.h - a lock-free buddy allocator over any address range.
 *
 * An nbbs instance hands out blocks of min_block << order bytes (order 0 ..
 * max_order) from an arena [base, base + arena_size). It implements the
 * non-blocking buddy system (NBBS) of Marotta et al.: every change of shared
 * state is one CAS or atomic RMW, no thread ever waits for another, and a
 * thread retries only because another thread's atomic operation succeeded.
 *
 * The allocator never reads or writes the arena itself: base may point at heap
 * memory, at a range mapped PROT_NONE, or at "physical" addresses that are not
 * mapped at all. All of its state lives in caller-provided metadata
 * (nbbs_meta_size + nbbs_init), so the core works in a kernel without libc;
 * nbbs_create is the hosted convenience that allocates the metadata itself.
 *
 * Blocks are aligned to their size relative to base: a block of order k
 * starts at base + i * (min_block << k). The arena is cut into independent
 * trees of one max-size block each; an arena size that is not a multiple of
 * the max block gets a last, partial tree whose missing tail is never handed
 * out.
 *
 * Concurrency contract: nbbs_alloc, nbbs_alloc_order, nbbs_alloc_at, nbbs_free and
 * nbbs_block_size may be called from any number of threads at once on the
 * same instance, and never block or sleep (no lock, no allocation, no
 * system call); so may the frame caches' functions, each cache used by one
 * owner at a time (see "Per-CPU frame caches" below). Memory ordering, per operation:
 *  - nbbs_free releases and a successful nbbs_alloc / nbbs_alloc_order
 *    acquires: every write the previous owner of any part of a block made
 *    before freeing it happens before the next owner's accesses.
 *  - nbbs_free and nbbs_block_size of a block must be ordered after the
 *    allocation that returned it by the caller's own hand-over of the
 *    pointer, as with any allocator (the allocation records the block with a
 *    release store; docs/design.md, "Memory orders").
 *  - Most internal operations are sequentially consistent, not all: the
 *    statistics, the occupancy map and nbbs_validate read with relaxed
 *    loads, and are exact only when no operation is in flight (otherwise a
 *    consistent-enough snapshot).
 */
#ifndef NBBS_H
#define NBBS_H

#ifdef __KERNEL__
#include <linux/types.h> /* size_t, uint8_t, uint64_t as the kernel defines them */
#else
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Configuration
 * ------------------------------------------------------------------------ */

typedef struct nbbs nbbs_t;

/* Metadata layout, chosen per instance at run time. */
typedef enum nbbs_layout {
    NBBS_LAYOUT_TREE  = 1, /* one state byte per tree node, one CAS per level climbed (the paper's 1lvl) */
    NBBS_LAYOUT_BUNCH = 4  /* 4 levels (15 nodes) packed per 64-bit word, one CAS per 4 levels (4lvl) */
} nbbs_layout_t;

typedef struct nbbs_config {
    size_t        min_block;   /* allocation unit in bytes, a power of two >= 8; 0 means 4096 */
    unsigned      max_order;   /* largest block = min_block << max_order; 0 means as large as the arena
                                * allows, at most 2^62 bytes (a larger arena gets several trees) */
    nbbs_layout_t layout;      /* 0 means NBBS_LAYOUT_BUNCH */
    unsigned      group_order; /* blocks of this order are kept whole while smaller blocks fit
                                * elsewhere (huge pages: 9 for 2 MiB of 4 KiB frames); 0 means
                                * min(9, max_order); at most max_order */
    unsigned      flags;       /* NBBS_GROUP_COUNTS or 0 */
} nbbs_config_t;

/* nbbs_config_t.flags: keep a free count per group (4 bytes of metadata per
 * group), so that a search that fails, or succeeds near full, passes full
 * groups by instead of looking at each of their positions. It costs an
 * atomic add on each allocation and each free of a block of order 3 to
 * group_order - 1; orders 0-2 cost nothing, and frame caches batch the adds
 * for the blocks they carve. Meant for instances used through frame caches
 * (a page-frame allocator under memory pressure): their small orders come
 * from carved order-3 blocks. docs/design.md, "Group free counts". */
#define NBBS_GROUP_COUNTS 1u

/* Error code returned by nbbs_free, nbbs_alloc_at and nbbs_occupancy_map for
 * bad input. */
#define NBBS_EINVAL (-22)

/* Error code returned by nbbs_alloc_at when the block named is not free. */
#define NBBS_EBUSY (-16)

/* Largest max_order an instance accepts (a block of 2^62 bytes at most). */
#define NBBS_MAX_ORDER 62

/* Alignment nbbs_init requires of the metadata buffer. */
#define NBBS_META_ALIGN 64

/* ------------------------------------------------------------------------
 * Set-up and tear-down
 * ------------------------------------------------------------------------ */

/* Bytes of metadata an instance over arena_size bytes needs with cfg (NULL
 * means all defaults). Returns 0 if the configuration is invalid: min_block
 * not a power of two >= 8, arena_size 0 or not a multiple of min_block,
 * layout unknown, max_order > NBBS_MAX_ORDER or a max block larger than the
 * arena or than 2^62 bytes, group_order > max_order. */
size_t nbbs_meta_size(size_t arena_size, const nbbs_config_t *cfg);

/* Builds an instance in caller-provided metadata (kernel-friendly: no libc,
 * no allocation). meta must be NBBS_META_ALIGN-aligned and meta_size at least
 * nbbs_meta_size(arena_size, cfg). base must be non-NULL, aligned to
 * min_block, and base + arena_size must not wrap around the address space.
 * Returns the instance (which lives at meta), or NULL on any invalid
 * argument; nothing is written then. All blocks start free. */
nbbs_t *nbbs_init(void *meta, size_t meta_size, void *base, size_t arena_size,
                  const nbbs_config_t *cfg);

/* Hosted convenience: like nbbs_init with metadata from the C library's
 * aligned allocator. Returns NULL on invalid arguments or out of memory. */
nbbs_t *nbbs_create(void *base, size_t arena_size, const nbbs_config_t *cfg);

/* Frees the metadata nbbs_create allocated. Does nothing for NULL. Must not be
 * called on an instance made by nbbs_init (the caller owns that metadata),
 * nor while other threads still use the instance. */
void nbbs_destroy(nbbs_t *b);

/* ------------------------------------------------------------------------
 * Allocation and release
 * ------------------------------------------------------------------------ */

/* Allocates the smallest block of min_block << k >= size bytes (size 0 is
 * served as one min_block). Returns its address, or NULL if size exceeds the
 * max block or no block of that order could be taken.
 *
 * Blocks held by frame caches (nbbs_cache_*) count as free: when the tree
 * has no block of that order, the call takes one of that order from a cache,
 * else returns every cached block to the tree and scans it once more.
 *
 * When NULL is returned under concurrency, every block of that order was
 * seen not allocatable at some moment of the call (allocated, or inside or
 * around a block that was), and then no cache was seen holding one; a block
 * freed (or cached, or moved inside its cache) while the scan had already
 * passed it may be missed. With no other operation in flight, NULL means
 * exactly that no free block of that order exists, cached blocks included. */
void *nbbs_alloc(nbbs_t *b, size_t size);

/* Allocates a block of min_block << order bytes; as nbbs_alloc. Returns NULL
 * if order > max_order. */
void *nbbs_alloc_order(nbbs_t *b, unsigned order);

/* Allocates exactly the block of min_block << order bytes that starts at
 * addr, if it is free: the claim and climb an allocation makes once its
 * search has found a candidate, on the node the caller names, with no search
 * and no placement (no hint, no hole bit is touched). So a caller can build
 * a block of a size that is not a power of two from contiguous pieces:
 * nbbs_alloc_order of the next power of two finds a free range, nbbs_free
 * gives it back, nbbs_alloc_at takes the pieces (and frees those it took if
 * one is lost to a concurrent allocation). The block is then live as any
 * other: nbbs_free and nbbs_block_size know it.
 *
 * Returns 0 on success; NBBS_EBUSY, with nothing changed, if some part of
 * the block was seen allocated, inside or around a live block, held by a
 * frame cache (not reclaimed: only nbbs_alloc_order takes cached blocks), or
 * being released by a concurrent nbbs_free, at a moment of the call;
 * NBBS_EINVAL, with nothing changed, if b is NULL, order > max_order, or
 * addr is not the start of a block of that order wholly inside the arena
 * (outside it, not aligned to the block's size relative to base, or reaching
 * past the arena's end in a partial last tree). Thread-safe as nbbs_alloc,
 * never blocks; a success acquires as a successful nbbs_alloc does. */
int nbbs_alloc_at(nbbs_t *b, void *addr, unsigned order);

/* Releases the block that starts at p. Returns 0, or NBBS_EINVAL and changes
 * nothing if p is not the start of a live block: outside the arena, not
 * aligned to min_block, inside a block, never allocated, already freed, or
 * held by a frame cache (freed through nbbs_cache_free). Of two concurrent
 * frees of the same block (here or through caches) exactly one returns 0.
 * nbbs_free(b, NULL) returns 0. */
int nbbs_free(nbbs_t *b, void *p);

/* Size in bytes of the live block that starts at p, or 0 if p is not the
 * start of a live block (a block held by a frame cache is not live). */
size_t nbbs_block_size(const nbbs_t *b, const void *p);

/* ------------------------------------------------------------------------
 * Introspection
 * ------------------------------------------------------------------------ */

typedef struct nbbs_stats {
    size_t        arena_size;    /* bytes managed */
    size_t        min_block;     /* allocation unit */
    unsigned      max_order;     /* largest block = min_block << max_order */
    nbbs_layout_t layout;
    size_t        meta_size;     /* metadata bytes (nbbs_meta_size) */
    size_t        tree_bytes;    /* of which node state */
    size_t        index_bytes;   /* of which the per-min_block index */
    size_t        used_bytes;    /* bytes in live blocks */
    size_t        free_bytes;    /* arena_size - used_bytes */
    size_t        largest_free;  /* size of the largest free block in the tree: the largest
                                  * block an allocation gets now without taking blocks from
                                  * frame caches (these count as used, see below). An
                                  * allocation that takes or reclaims cached blocks can get a
                                  * larger one: with every frame of the arena cached, this
                                  * is 0 and a whole max block can still be allocated */
    size_t        live_blocks;   /* number of live blocks */
    size_t        blocks[NBBS_MAX_ORDER + 1]; /* live blocks per order */
    /* Blocks held by frame caches (nbbs_cache_*). They are counted as used
     * above (used_bytes, live_blocks, blocks[]): the tree cannot hand them
     * out, an allocation gets them only from a cache or by reclaiming them
     * under pressure. free_bytes + cached_bytes is what allocations can still
     * get. */
    size_t        cached_bytes;
    size_t        cached_blocks;
} nbbs_stats_t;

/* Fills *out from the metadata (no counter is kept on the alloc/free paths).
 * Exact when no operation is in flight. Does nothing if b or out is NULL. */
void nbbs_get_stats(const nbbs_t *b, nbbs_stats_t *out);

/* Occupancy of every block of the given order, in address order: out[i]
 * describes [base + i * (min_block << order), ...) as NBBS_MAP_FREE (no
 * byte used), NBBS_MAP_PARTIAL (some bytes used) or NBBS_MAP_FULL (every byte
 * used, or beyond the arena's end). Returns the number of entries written
 * (ceil(arena_size / (min_block << order))), or NBBS_EINVAL, writing nothing,
 * if b or out is NULL, order > max_order, out_len is too small, or the map
 * would have more than INT32_MAX entries (the int result could not count
 * them: map such an arena at a higher order). */
int nbbs_occupancy_map(const nbbs_t *b, unsigned order, uint8_t *out, size_t out_len);

enum { NBBS_MAP_FREE = 0, NBBS_MAP_PARTIAL = 1, NBBS_MAP_FULL = 2 };

/* Checks the metadata against the index of live blocks: every node state
 * must be exactly what a sequential buddy system holding those blocks would
 * have, and every group's free count what those blocks and the attached
 * frame caches' balances make it (docs/design.md, "Group free counts").
 * Only meaningful with no operation in flight. Returns 0 if it holds, else
 * a negative value (the first discrepancy found: -1, -2 the tree, -3 a
 * carved block, -4 a group's free count). For tests. */
int nbbs_validate(const nbbs_t *b);

/* ------------------------------------------------------------------------
 * Per-CPU frame caches
 *
 * A cache keeps a few free blocks of the small orders (0..3 by default) for
 * one owner, as Linux keeps per-CPU page lists: the owner allocates and frees
 * them without touching the tree, refills and drains in batches. Everything
 * lives in caller-provided memory (no libc, no TLS, no globals), so a kernel
 * gives each CPU one cache and calls it with preemption off; a runtime gives
 * each thread or worker one.
 *
 * Ownership: nbbs_cache_alloc, nbbs_cache_free and nbbs_cache_drain of one
 * cache must not run at the same time (one owner at a time; handing a cache
 * to another owner needs the caller's own synchronisation, e.g. preemption
 * off on that CPU, or a mutex, or a thread join). Any number of caches on one
 * instance, and nbbs_alloc / nbbs_free / nbbs_reclaim_cached, may run at once
 * from any threads; none of them ever blocks.
 *
 * A cached block stays allocated in the tree (nbbs_validate holds) and is
 * marked "cached" in its index entry. Whoever clears the mark with one CAS
 * owns the block: the owner popping it, nbbs_cache_drain, or an allocation
 * elsewhere that found the tree empty and takes it (nbbs_alloc_order and
 * nbbs_cache_alloc do that before they return NULL). So no block is lost in
 * a cache: under pressure every cached block can be taken by anyone.
 *
 * Cost: one CAS on the block's index byte per cached alloc and per cached
 * free (the claim, and the check that makes a double free fail), plain loads
 * and stores otherwise; the tree is touched only by batched refills and
 * drains.
 *
 * Bulk refill: orders below 3 are refilled by taking whole blocks of order 3
 * (8 min_blocks) from the tree, one tree operation each, and carving them
 * into frames; the tree holds such a block as one live block until all its
 * frames are free, then it goes back whole (on the drain, nbbs_free or
 * reclaim that finds it so). Frames of a carved block that a drain leaves
 * while some other frame of it is live stay free in it: they count as
 * cached in the statistics, the cache uses them before it carves again, and
 * allocations under pressure take them (splitting or combining frames). So
 * nbbs_cache_drain and nbbs_reclaim_cached return such a block only when it
 * is all free, and nbbs_free of a carved frame succeeds as for any block.
 *
 * Memory order: as for nbbs_alloc / nbbs_free. A free through a cache
 * releases and the allocation (through any cache, or by taking it under
 * pressure) that next gets any part of that block acquires.
 * ------------------------------------------------------------------------ */

typedef struct nbbs_cache nbbs_cache_t;

typedef struct nbbs_cache_config {
    unsigned orders;   /* orders 0 .. orders - 1 are cached; 0 means 4 (0..3), or
                        * max_order + 1 if the instance's max_order is below 3 */
    unsigned batch;    /* blocks per refill and per drain step; 0 means 16 */
    unsigned capacity; /* blocks held per order at most; 0 means 4 * batch */
} nbbs_cache_config_t;

/* Most orders a cache can hold (orders 0 .. NBBS_CACHE_MAX_ORDERS - 1). */
#define NBBS_CACHE_MAX_ORDERS 16

/* Alignment nbbs_cache_init requires of the cache memory (a cache line). */
#define NBBS_CACHE_ALIGN 64

/* Bytes of memory a cache with cfg (NULL: all defaults) needs. Returns 0 if
 * the configuration is invalid: orders > NBBS_CACHE_MAX_ORDERS, capacity <
 * batch, or capacity > 2^20. */
size_t nbbs_cache_size(const nbbs_cache_config_t *cfg);

/* Builds an empty cache for instance b in caller-provided memory mem of size
 * bytes (NBBS_CACHE_ALIGN-aligned, at least nbbs_cache_size(cfg)) and
 * attaches it to b, so that allocations elsewhere can take its blocks under
 * pressure. Returns the cache (which lives at mem), or NULL, writing
 * nothing, if mem or b is NULL or not an instance, mem is misaligned or too
 * small, cfg is invalid, orders - 1 > b's max_order (an orders of 0, the
 * default, is cut to max_order + 1 instead), or mem is already a cache of b. A cache stays attached to b for b's lifetime: its memory must
 * stay valid as long as b is used, and it can be handed from owner to owner
 * but not detached (drain it when its owner goes away, e.g. a CPU going
 * offline). nbbs_cache_init may run concurrently with any operation on b. */
nbbs_cache_t *nbbs_cache_init(void *mem, size_t size, nbbs_t *b, const nbbs_cache_config_t *cfg);

/* The instance c serves, or NULL if c is NULL. */
nbbs_t *nbbs_cache_instance(const nbbs_cache_t *c);

/* Allocates a block of min_block << order bytes, from the cache if it holds
 * one (no tree access), else by a refill of up to batch blocks from the tree
 * (nbbs_alloc_order's placement, from the caller's context, so the blocks
 * come from the huge block this context is filling). Orders the cache does
 * not hold go to nbbs_alloc_order. Returns NULL if c is NULL, order >
 * max_order, or no block could be found: the tree had none, and then no
 * block was found in any cache (nor in the tree again after every cached
 * block was returned to it); see nbbs_alloc_order for what NULL means
 * under concurrency. */
void *nbbs_cache_alloc(nbbs_cache_t *c, unsigned order);

/* Releases the live block that starts at p into the cache if its order is
 * cached, else to the tree (nbbs_free). When the cache already holds
 * capacity blocks of that order, all but the batch freed last (all if
 * capacity == batch) go back to the tree first. Returns 0, or NBBS_EINVAL and changes nothing if c is NULL
 * or p is not the start of a live block of c's instance (outside the arena,
 * not a block start, never allocated, freed, or already in a cache: a double
 * free). Of two concurrent frees of one block (through caches or nbbs_free)
 * exactly one returns 0. nbbs_cache_free(c, NULL) returns 0. */
int nbbs_cache_free(nbbs_cache_t *c, void *p);

/* Returns every block c holds to the tree. Owner only. Frames of a carved
 * block go back with their block once all its frames are free; until then
 * they stay free in it (see "Bulk refill"). Returns the number of blocks
 * that went back to the tree, each frame of a carved block counted (blocks
 * another thread took from the cache meanwhile are not counted), 0 if c is
 * NULL. */
size_t nbbs_cache_drain(nbbs_cache_t *c);

/* Returns every block held by any cache of b to the tree, from any thread at
 * any time, concurrently with the caches' owners (who find the blocks gone
 * and refill); carved blocks named by the caches go back if all their
 * frames are free. What an allocation under pressure does on its own; for a
 * kernel before a large allocation or an offline operation. Returns the
 * number of blocks returned (as nbbs_cache_drain counts), 0 if b is NULL. */
size_t nbbs_reclaim_cached(nbbs_t *b);

#ifdef __cplusplus
}
#endif

#endif /* NBBS_H */
