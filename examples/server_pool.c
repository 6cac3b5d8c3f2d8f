/*
 * server_pool.c - nbbs as the buffer pool of a server.
 *
 * A server reserves one region of real memory up front (here 64 MiB from
 * mmap) and carves request buffers out of it with nbbs: 512 B to 64 KiB,
 * rounded up to a power of two. Worker threads play connections: each takes
 * a buffer for an incoming request, fills and checksums it, keeps it until
 * the response is sent (a window of 64 in flight per worker), then frees
 * it. When the pool is empty the request is refused (a "503") instead of
 * waiting: nbbs_alloc returning NULL means nothing large enough is free, so
 * the server can shed load without ever blocking on a lock.
 *
 * Usage: server_pool [threads] [requests per thread]   (default 4, 200000)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "nbbs.h"

#define POOL_SIZE ((size_t)64 << 20)
#define MIN_BUF   512u
#define MAX_ORDER 7u /* 512 B << 7 = 64 KiB */
#define WINDOW    64

static nbbs_t *pool;
static long per_thread = 200000;

typedef struct worker {
    pthread_t th;
    unsigned  seed;
    long      served, refused;
    uint64_t  checksum;
} worker_t;

static void *serve(void *arg)
{
    worker_t *w = arg;
    char *inflight[WINDOW] = { 0 };
    for (long i = 0; i < per_thread; i++) {
        /* Request sizes: mostly small, a few up to 64 KiB. */
        size_t len = 64 + (size_t)rand_r(&w->seed) % (rand_r(&w->seed) % 16 ? 4096 : 65536 - 64);
        char *buf = nbbs_alloc(pool, len);
        if (!buf) {
            w->refused++;
            continue;
        }
        memset(buf, (int)(i & 0xff), len);       /* "read the request" */
        w->checksum += (unsigned char)buf[len - 1];
        int slot = (int)(i % WINDOW);            /* the oldest response is sent */
        if (inflight[slot] && nbbs_free(pool, inflight[slot]) != 0)
            fprintf(stderr, "unexpected: a live buffer was refused\n");
        inflight[slot] = buf;
        w->served++;
    }
    for (int s = 0; s < WINDOW; s++)
        if (inflight[s])
            nbbs_free(pool, inflight[s]);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2)
        per_thread = atol(argv[2]);
    if (threads < 1 || threads > 256 || per_thread < 1) {
        fprintf(stderr, "usage: server_pool [threads 1..256] [requests per thread]\n");
        return 2;
    }
    /* The region must be aligned to the largest buffer (mmap: to a page,
     * enough for 64 KiB only by luck), so map a little more and align. */
    size_t max_buf = (size_t)MIN_BUF << MAX_ORDER;
    char *map = mmap(NULL, POOL_SIZE + max_buf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    char *base = (char *)(((uintptr_t)map + max_buf - 1) & ~(uintptr_t)(max_buf - 1));
    nbbs_config_t cfg = { .min_block = MIN_BUF, .max_order = MAX_ORDER, .layout = NBBS_LAYOUT_BUNCH };
    pool = nbbs_create(base, POOL_SIZE, &cfg);
    if (!pool) {
        fprintf(stderr, "nbbs_create refused the configuration\n");
        return 1;
    }

    worker_t *ws = calloc((size_t)threads, sizeof *ws);
    if (!ws)
        return 1;
    for (int t = 0; t < threads; t++) {
        ws[t].seed = (unsigned)t + 1;
        pthread_create(&ws[t].th, NULL, serve, &ws[t]);
    }
    long served = 0, refused = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(ws[t].th, NULL);
        served += ws[t].served;
        refused += ws[t].refused;
    }

    nbbs_stats_t s;
    nbbs_get_stats(pool, &s);
    printf("server_pool: %d workers, %ld requests served, %ld refused (pool empty)\n", threads, served, refused);
    printf("pool: %zu MiB in buffers of %u B .. %zu KiB, metadata %zu KiB; after the run %zu live buffers, "
           "%zu MiB free, largest free %zu KiB\n",
           POOL_SIZE >> 20, MIN_BUF, max_buf >> 10, s.meta_size >> 10, s.live_blocks, s.free_bytes >> 20,
           s.largest_free >> 10);
    int bad = s.live_blocks != 0 || s.free_bytes != POOL_SIZE;
    if (bad)
        fprintf(stderr, "server_pool: buffers were lost\n");
    nbbs_destroy(pool);
    munmap(map, POOL_SIZE + max_buf);
    free(ws);
    return bad;
}
