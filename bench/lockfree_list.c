/*
 * lockfree_list.c - a concurrent sorted linked list (lock-free insert, delete
 * and search) with hazard-pointer reclamation, as a workload for malloc.
 *
 * The list is Harris's, with Michael's changes that make it safe under hazard
 * pointers: a node is deleted by marking its next pointer (bit 0), then
 * unlinked by one CAS on its predecessor; a search that meets a marked node
 * unlinks it itself and restarts if the predecessor changed. Every node comes
 * from malloc and goes back with free, usually from a thread other than the
 * one that allocated it (whoever unlinks retires it; the retiring thread frees
 * it once no hazard pointer names it). Linked normally against libc, so
 * LD_PRELOAD picks the allocator under test.
 *
 *   lockfree_list [--threads T] [--seconds S] [--range K] [--update U] [--payload B]
 *
 * Each thread runs random operations on keys in [0, K): U% updates (half
 * inserts, half deletes), the rest searches, for S seconds; the list starts
 * half full. Prints one line:
 *   lockfree_list threads=T ops=N seconds=S ops_per_sec=X
 * then checks the list (sorted, and its size equals the initial size plus
 * successful inserts minus successful deletes) and exits 1 if it is not.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define HP_PER_THREAD 2
#define MARK ((uintptr_t)1)

typedef struct node {
    long key;
    _Atomic uintptr_t next; /* successor | MARK when this node is deleted */
    char payload[];         /* --payload bytes, written on insert */
} node_t;

/* --- hazard pointers ------------------------------------------------------ */

typedef struct {
    _Alignas(64) _Atomic(node_t *) hp[HP_PER_THREAD];
    node_t **retired;
    size_t nretired, cap;
} hp_rec_t;

static hp_rec_t hp_recs[MAX_THREADS + 1]; /* the last one for main */
static int nthreads_total;

/* seq_cst store then seq_cst re-load of the source: the store-load order
 * hazard pointers need (the reclaimer either sees the hazard or we see the
 * node gone from its predecessor). */
static inline void hp_set(hp_rec_t *r, int i, node_t *n) { atomic_store(&r->hp[i], n); }
static inline void hp_clear(hp_rec_t *r)
{
    for (int i = 0; i < HP_PER_THREAD; i++)
        atomic_store_explicit(&r->hp[i], NULL, memory_order_release);
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Frees every retired node that no thread protects. */
static void hp_scan(hp_rec_t *r)
{
    uintptr_t hazards[(MAX_THREADS + 1) * HP_PER_THREAD];
    size_t nh = 0;
    for (int t = 0; t <= MAX_THREADS; t++)
        for (int i = 0; i < HP_PER_THREAD; i++) {
            node_t *h = atomic_load(&hp_recs[t].hp[i]);
            if (h)
                hazards[nh++] = (uintptr_t)h;
        }
    qsort(hazards, nh, sizeof *hazards, ptr_cmp);
    size_t keep = 0;
    for (size_t k = 0; k < r->nretired; k++) {
        uintptr_t p = (uintptr_t)r->retired[k];
        if (bsearch(&p, hazards, nh, sizeof *hazards, ptr_cmp))
            r->retired[keep++] = r->retired[k];
        else
            free(r->retired[k]);
    }
    r->nretired = keep;
}

static void hp_retire(hp_rec_t *r, node_t *n)
{
    if (r->nretired == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->retired = realloc(r->retired, r->cap * sizeof *r->retired);
        if (!r->retired) {
            perror("lockfree_list: realloc");
            exit(2);
        }
    }
    r->retired[r->nretired++] = n;
    if (r->nretired >= 2u * HP_PER_THREAD * (unsigned)nthreads_total + 128)
        hp_scan(r);
}

/* --- the list --------------------------------------------------------------- */

static _Atomic uintptr_t head; /* sentinel link; no node holds the head */
static size_t payload;

/* Finds the first node with key >= k. On return *prev is the link that
 * pointed at *cur (unmarked), hazard 0 protects *cur and hazard 1 the node
 * owning *prev. Unlinks (and retires) marked nodes on the way. */
static bool find(hp_rec_t *r, long k, _Atomic uintptr_t **prev_out, node_t **cur_out, uintptr_t *next_out)
{
retry:;
    _Atomic uintptr_t *prev = &head;
    node_t *cur = (node_t *)atomic_load(prev);
    for (;;) {
        if (!cur) {
            *prev_out = prev, *cur_out = NULL, *next_out = 0;
            return false;
        }
        hp_set(r, 0, cur);
        if (atomic_load(prev) != (uintptr_t)cur)
            goto retry; /* cur may have been unlinked before it was protected */
        uintptr_t next = atomic_load(&cur->next);
        if (next & MARK) {
            uintptr_t expect = (uintptr_t)cur;
            if (!atomic_compare_exchange_strong(prev, &expect, next & ~MARK))
                goto retry;
            hp_retire(r, cur);
            cur = (node_t *)(next & ~MARK);
            continue;
        }
        long ck = cur->key;
        if (atomic_load(prev) != (uintptr_t)cur)
            goto retry;
        if (ck >= k) {
            *prev_out = prev, *cur_out = cur, *next_out = next;
            return ck == k;
        }
        prev = &cur->next;
        hp_set(r, 1, cur); /* keeps prev's node alive */
        cur = (node_t *)next;
    }
}

static bool list_insert(hp_rec_t *r, long k)
{
    node_t *n = NULL;
    for (;;) {
        _Atomic uintptr_t *prev;
        node_t *cur;
        uintptr_t next;
        if (find(r, k, &prev, &cur, &next)) {
            free(n);
            hp_clear(r);
            return false;
        }
        if (!n) {
            n = malloc(sizeof *n + payload);
            if (!n) {
                perror("lockfree_list: malloc");
                exit(2);
            }
            n->key = k;
            memset(n->payload, (int)(k & 0xff), payload);
        }
        atomic_store_explicit(&n->next, (uintptr_t)cur, memory_order_relaxed);
        uintptr_t expect = (uintptr_t)cur;
        if (atomic_compare_exchange_strong(prev, &expect, (uintptr_t)n)) {
            hp_clear(r);
            return true;
        }
    }
}

static bool list_delete(hp_rec_t *r, long k)
{
    for (;;) {
        _Atomic uintptr_t *prev;
        node_t *cur;
        uintptr_t next;
        if (!find(r, k, &prev, &cur, &next)) {
            hp_clear(r);
            return false;
        }
        /* logical deletion: mark cur's link; whoever wins owns the delete */
        if (!atomic_compare_exchange_strong(&cur->next, &next, next | MARK))
            continue;
        uintptr_t expect = (uintptr_t)cur;
        if (atomic_compare_exchange_strong(prev, &expect, next))
            hp_retire(r, cur);
        else
            (void)find(r, k, &prev, &cur, &next); /* someone else unlinks it */
        hp_clear(r);
        return true;
    }
}

static bool list_search(hp_rec_t *r, long k)
{
    _Atomic uintptr_t *prev;
    node_t *cur;
    uintptr_t next;
    bool found = find(r, k, &prev, &cur, &next);
    if (found && payload && cur->payload[0] != (char)(k & 0xff)) {
        fprintf(stderr, "lockfree_list: node %ld payload corrupted\n", k);
        exit(1);
    }
    hp_clear(r);
    return found;
}

/* --- the benchmark ---------------------------------------------------------- */

static long range = 1024;
static int update = 20;
static _Atomic bool stop;

typedef struct {
    int id;
    uint64_t ops, inserted, deleted;
} worker_t;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    hp_rec_t *r = &hp_recs[w->id];
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int i = 0; i < 64; i++) {
            long k = (long)(rnd(&s) % (uint64_t)range);
            unsigned op = (unsigned)(rnd(&s) % 200);
            if (op < (unsigned)update)
                w->inserted += list_insert(r, k);
            else if (op < 2u * (unsigned)update)
                w->deleted += list_delete(r, k);
            else
                (void)list_search(r, k);
        }
        w->ops += 64;
    }
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int threads = 1, c;
    double seconds = 1.0;
    static const struct option lo[] = {
        { "threads", 1, 0, 't' }, { "seconds", 1, 0, 's' }, { "range", 1, 0, 'r' },
        { "update", 1, 0, 'u' }, { "payload", 1, 0, 'p' }, { 0, 0, 0, 0 },
    };
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 't': threads = atoi(optarg); break;
        case 's': seconds = atof(optarg); break;
        case 'r': range = atol(optarg); break;
        case 'u': update = atoi(optarg); break;
        case 'p': payload = (size_t)atol(optarg); break;
        default:
            fprintf(stderr, "usage: lockfree_list [--threads T] [--seconds S] [--range K] [--update U] [--payload B]\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lockfree_list: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (threads < 1 || threads > MAX_THREADS || range < 1 || update < 0 || update > 100) {
        fprintf(stderr, "lockfree_list: threads 1..%d, range >= 1, update 0..100\n", MAX_THREADS);
        return 2;
    }
    nthreads_total = threads + 1;
    /* start half full: every other key */
    hp_rec_t *mr = &hp_recs[MAX_THREADS];
    long initial = 0;
    for (long k = 0; k < range; k += 2)
        initial += list_insert(mr, k);

    worker_t *ws = calloc((size_t)threads, sizeof *ws);
    pthread_t *ts = calloc((size_t)threads, sizeof *ts);
    double t0 = now();
    for (int i = 0; i < threads; i++) {
        ws[i].id = i;
        pthread_create(&ts[i], NULL, worker, &ws[i]);
    }
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&stop, true);
    uint64_t ops = 0;
    long expect = initial;
    for (int i = 0; i < threads; i++) {
        pthread_join(ts[i], NULL);
        ops += ws[i].ops;
        expect += (long)ws[i].inserted - (long)ws[i].deleted;
    }
    double dt = now() - t0;
    printf("lockfree_list threads=%d ops=%llu seconds=%.3f ops_per_sec=%.0f\n", threads,
           (unsigned long long)ops, dt, (double)ops / dt);

    /* check, then free everything (retired nodes too) */
    long size = 0, last = -1;
    bool sorted = true;
    uintptr_t p = atomic_load(&head);
    while (p) {
        node_t *n = (node_t *)(p & ~MARK);
        sorted &= n->key > last;
        last = n->key;
        size++;
        p = atomic_load(&n->next);
        free(n);
    }
    for (int t = 0; t <= MAX_THREADS; t++) {
        hp_clear(&hp_recs[t]);
        hp_scan(&hp_recs[t]);
        free(hp_recs[t].retired);
    }
    free(ws);
    free(ts);
    if (!sorted || size != expect) {
        fprintf(stderr, "lockfree_list: list check failed: sorted=%d size=%ld expected=%ld\n", sorted, size, expect);
        return 1;
    }
    return 0;
}
