/*
 * preload.c - an ordinary program, run on nbmalloc without recompiling.
 *
 * It uses nothing but malloc, realloc, strdup and free: it counts the words
 * of a generated text in a hash table from several threads (one table per
 * thread, merged at the end). Run it as is, then with nbmalloc preloaded:
 *
 *   ./preload 4
 *   LD_PRELOAD=<build>/src/nbmalloc/libnbmalloc.so ./preload 4
 *
 * The output is the same; the last line says which malloc served it (it
 * looks for nbmalloc's nbm_get_stats in the process and, if found, prints
 * how many thread caches nbmalloc made).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbmalloc.h" /* only for nbm_stats_t: the program does not link nbmalloc */

#define BUCKETS 4096
#define WORDS   200000

typedef struct entry {
    struct entry *next;
    char         *word;
    long          count;
} entry_t;

typedef struct table {
    pthread_t th;
    unsigned  seed;
    entry_t  *bucket[BUCKETS];
} table_t;

static unsigned hash(const char *s)
{
    unsigned h = 2166136261u;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h % BUCKETS;
}

static void add(table_t *t, const char *w, long n)
{
    entry_t **b = &t->bucket[hash(w)];
    for (entry_t *e = *b; e; e = e->next)
        if (strcmp(e->word, w) == 0) {
            e->count += n;
            return;
        }
    entry_t *e = malloc(sizeof *e);
    if (!e || !(e->word = strdup(w)))
        abort();
    e->count = n;
    e->next = *b;
    *b = e;
}

/* Words of 1..12 letters from a 6-letter alphabet: many repeats. */
static void *count_words(void *arg)
{
    table_t *t = arg;
    char *w = NULL;
    for (int i = 0; i < WORDS; i++) {
        size_t len = 1 + (size_t)rand_r(&t->seed) % 12;
        char *nw = realloc(w, len + 1);   /* grows and shrinks: exercises realloc */
        if (!nw)
            abort();
        w = nw;
        for (size_t k = 0; k < len; k++)
            w[k] = (char)('a' + rand_r(&t->seed) % 6);
        w[len] = 0;
        add(t, w, 1);
    }
    free(w);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "usage: preload [threads 1..64]\n");
        return 2;
    }
    table_t *ts = calloc((size_t)threads + 1, sizeof *ts), *all = &ts[threads];
    if (!ts)
        return 1;
    for (int i = 0; i < threads; i++) {
        ts[i].seed = (unsigned)i + 1;
        pthread_create(&ts[i].th, NULL, count_words, &ts[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(ts[i].th, NULL);
    long distinct = 0, total = 0, top = 0;
    for (int i = 0; i < threads; i++)
        for (int b = 0; b < BUCKETS; b++)
            for (entry_t *e = ts[i].bucket[b], *next; e; e = next) {
                next = e->next;          /* freed by another thread than its allocator's */
                add(all, e->word, e->count);
                free(e->word);
                free(e);
            }
    for (int b = 0; b < BUCKETS; b++)
        for (entry_t *e = all->bucket[b], *next; e; e = next) {
            next = e->next;
            distinct++;
            total += e->count;
            top = e->count > top ? e->count : top;
            free(e->word);
            free(e);
        }
    printf("preload: %d threads counted %ld words, %ld distinct, the most frequent %ld times\n", threads, total,
           distinct, top);
    free(ts);

    /* Which malloc was it? nbmalloc exports nbm_get_stats. */
    void (*get)(nbm_stats_t *) = (void (*)(nbm_stats_t *))dlsym(RTLD_DEFAULT, "nbm_get_stats");
    if (get) {
        nbm_stats_t st;
        get(&st);
        fprintf(stderr, "malloc: nbmalloc (%zu thread caches made, %zu arenas)\n", st.threads, st.arenas);
    } else {
        fprintf(stderr, "malloc: the system's (nbmalloc not preloaded)\n");
    }
    return 0;
}
