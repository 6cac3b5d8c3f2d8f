/*
 * page_frames.c - nbbs as a kernel's page-frame allocator.
 *
 * Manages 64 GiB of "physical" frames starting at 4 GiB, which this process
 * never maps: the allocator only does arithmetic on the addresses. 4 KiB
 * frames, orders 0..10 (4 KiB .. 4 MiB), the 4-level layout. Metadata is
 * sized with nbbs_meta_size and provided by the caller, as a kernel would
 * carve it out of early boot memory (here: one anonymous mapping).
 *
 * It simulates a boot (a few large regions reserved), then a workload of
 * random page allocations and frees, and prints statistics and the occupancy
 * map of order 10 (one character per 4 MiB block).
 *
 * Usage: page_frames [threads]   (default 2)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "nbbs.h"

#define FRAME 4096u
#define MAX_ORDER 10u
#define PHYS_BASE ((void *)(uintptr_t)0x100000000ull) /* 4 GiB */
#define PHYS_SIZE ((size_t)64 << 30)                  /* 64 GiB */
#define PER_THREAD 20000

static nbbs_t *frames;

static void print_stats(const char *when)
{
    nbbs_stats_t s;
    nbbs_get_stats(frames, &s);
    printf("-- %s\n", when);
    printf("   managed %zu MiB in %zu frames, metadata %zu KiB (%.2f bytes per frame)\n",
           s.arena_size >> 20, s.arena_size / s.min_block, s.meta_size >> 10,
           (double)s.meta_size / (double)(s.arena_size / s.min_block));
    printf("   used %zu MiB, free %zu MiB, largest free block %zu KiB, %zu live blocks\n",
           s.used_bytes >> 20, s.free_bytes >> 20, s.largest_free >> 10, s.live_blocks);
    printf("   live blocks per order:");
    for (unsigned o = 0; o <= s.max_order; o++)
        printf(" %u:%zu", o, s.blocks[o]);
    printf("\n");
}

/* One character per `group` blocks of the given order: '.' all free, '#' all
 * full, '+' anything else. */
static void print_map(unsigned order, unsigned group)
{
    size_t n = ((PHYS_SIZE / FRAME - 1) >> order) + 1;
    uint8_t *map = malloc(n);
    int got = nbbs_occupancy_map(frames, order, map, n);
    if (got < 0) {
        printf("occupancy map: error %d\n", got);
        free(map);
        return;
    }
    size_t counts[3] = { 0, 0, 0 };
    for (int i = 0; i < got; i++)
        counts[map[i]]++;
    printf("-- occupancy map of the %d order-%u blocks: %zu free, %zu partly used, %zu full\n"
           "   one character per %u blocks ('.' all free, '#' all full, '+' mixed):\n",
           got, order, counts[0], counts[1], counts[2], group);
    for (int i = 0; i < got; i += (int)group) {
        if (i % (int)(group * 64) == 0)
            printf("%s   %6.1f GiB ", i ? "\n" : "",
                   (double)((size_t)i << order) * FRAME / (1u << 30));
        int free_ = 0, full = 0, n = 0;
        for (int j = i; j < got && j < i + (int)group; j++, n++)
            free_ += map[j] == NBBS_MAP_FREE, full += map[j] == NBBS_MAP_FULL;
        putchar(free_ == n ? '.' : full == n ? '#' : '+');
    }
    putchar('\n');
    free(map);
}

/* Each thread: random single pages and small higher-order blocks, keeping a
 * working set, as drivers and the page cache would. */
static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    static _Thread_local void *held[PER_THREAD];
    int n = 0;
    for (int i = 0; i < PER_THREAD * 4; i++) {
        if (n < PER_THREAD && (n == 0 || rand_r(&seed) % 3)) {
            unsigned order = rand_r(&seed) % 8 == 0 ? rand_r(&seed) % (MAX_ORDER + 1) : 0;
            void *p = nbbs_alloc_order(frames, order);
            if (p)
                held[n++] = p;
        } else {
            int k = rand_r(&seed) % n;
            if (nbbs_free(frames, held[k]) != 0)
                fprintf(stderr, "unexpected: free of a live frame refused\n");
            held[k] = held[--n];
        }
    }
    /* Keep the second half: it shows in the statistics and the map. */
    for (int k = n / 2; k < n; k++)
        nbbs_free(frames, held[k]);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1 || threads > 64)
        threads = 2;
    nbbs_config_t cfg = { .min_block = FRAME, .max_order = MAX_ORDER, .layout = NBBS_LAYOUT_BUNCH };

    /* The kernel way: ask for the metadata size, provide the memory. */
    size_t meta_size = nbbs_meta_size(PHYS_SIZE, &cfg);
    void *meta = mmap(NULL, meta_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (meta == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    frames = nbbs_init(meta, meta_size, PHYS_BASE, PHYS_SIZE, &cfg);
    if (!frames) {
        fprintf(stderr, "nbbs_init refused the configuration\n");
        return 1;
    }
    print_stats("after init");

    /* "Boot": reserve 256 MiB for the kernel image and a 1 GiB crash region
     * as max-order blocks. */
    for (int i = 0; i < 64 + 256; i++)
        if (!nbbs_alloc_order(frames, MAX_ORDER))
            fprintf(stderr, "unexpected: boot reservation failed\n");
    print_stats("after boot reservations (320 blocks of 4 MiB)");

    pthread_t th[64];
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)(t + 1));
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    char what[96];
    snprintf(what, sizeof what, "after %d threads of random page traffic", threads);
    print_stats(what);
    print_map(MAX_ORDER, 32);

    int bad = nbbs_free(frames, (char *)PHYS_BASE + 12345);
    printf("-- freeing an address that is not a block start: %d (NBBS_EINVAL is %d)\n", bad, NBBS_EINVAL);
    munmap(meta, meta_size);
    return 0;
}
