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
 * Concurrency contract: nbbs_alloc, nbbs_alloc_order, nbbs_free and
 * nbbs_block_size may be called from any number of threads at once on the
 * same instance, and never block or sleep (no lock, no allocation, no
 * system call). Memory ordering, per operation:
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
    unsigned      max_order;   /* largest block = min_block << max_order; 0 means as large as the arena allows */
    nbbs_layout_t layout;      /* 0 means NBBS_LAYOUT_BUNCH */
    unsigned      group_order; /* blocks of this order are kept whole while smaller blocks fit
                                * elsewhere (huge pages: 9 for 2 MiB of 4 KiB frames); 0 means
                                * min(9, max_order); at most max_order */
} nbbs_config_t;

/* Error code returned by nbbs_free and nbbs_occupancy_map for bad input. */
#define NBBS_EINVAL (-22)

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
 * arena, group_order > max_order. */
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
 * When NULL is returned under concurrency, every block of that order was
 * seen not allocatable at some moment of the call (allocated, or inside or
 * around a block that was); a block freed while the scan had already passed
 * it may be missed. With no other operation in flight, NULL means exactly
 * that no free block of that order exists. */
void *nbbs_alloc(nbbs_t *b, size_t size);

/* Allocates a block of min_block << order bytes; as nbbs_alloc. Returns NULL
 * if order > max_order. */
void *nbbs_alloc_order(nbbs_t *b, unsigned order);

/* Releases the block that starts at p. Returns 0, or NBBS_EINVAL and changes
 * nothing if p is not the start of a live block: outside the arena, not
 * aligned to min_block, inside a block, never allocated, or already freed. Of
 * two concurrent frees of the same block exactly one returns 0.
 * nbbs_free(b, NULL) returns 0. */
int nbbs_free(nbbs_t *b, void *p);

/* Size in bytes of the live block that starts at p, or 0 if p is not the
 * start of a live block. */
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
    size_t        largest_free;  /* size of the largest block that could be allocated now */
    size_t        live_blocks;   /* number of live blocks */
    size_t        blocks[NBBS_MAX_ORDER + 1]; /* live blocks per order */
} nbbs_stats_t;

/* Fills *out from the metadata (no counter is kept on the alloc/free paths).
 * Exact when no operation is in flight. Does nothing if b or out is NULL. */
void nbbs_get_stats(const nbbs_t *b, nbbs_stats_t *out);

/* Occupancy of every block of the given order, in address order: out[i]
 * describes [base + i * (min_block << order), ...) as NBBS_MAP_FREE (no
 * byte used), NBBS_MAP_PARTIAL (some bytes used) or NBBS_MAP_FULL (every byte
 * used, or beyond the arena's end). Returns the number of entries written
 * (ceil(arena_size / (min_block << order))), or NBBS_EINVAL if b or out is
 * NULL, order > max_order, or out_len is too small. */
int nbbs_occupancy_map(const nbbs_t *b, unsigned order, uint8_t *out, size_t out_len);

enum { NBBS_MAP_FREE = 0, NBBS_MAP_PARTIAL = 1, NBBS_MAP_FULL = 2 };

/* Checks the metadata against the index of live blocks: every node state
 * must be exactly what a sequential buddy system holding those blocks would
 * have. Only meaningful with no operation in flight. Returns 0 if it holds,
 * else a negative value (the first discrepancy found). For tests. */
int nbbs_validate(const nbbs_t *b);

#ifdef __cplusplus
}
#endif

#endif /* NBBS_H */
