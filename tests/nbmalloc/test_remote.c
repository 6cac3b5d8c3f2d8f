/*
 * test_remote.c - how free tells another heap's object (white-box: reads
 * the heap records and unit words of src/nbmalloc/internal.h).
 *  - a page's unit words carry its owner's tag (the heap index mod 512, in
 *    NBM_UNIT_TAG_MASK); two live heaps have different tags;
 *  - a heap is `mixed` once it frees another heap's object, and not before
 *    (its own frees take free's branch); nbm_thread_flush clears it;
 *  - a mixed heap's frees put its current page's objects on the bin's list
 *    and another heap's on the held list (rhead), rroom counting down, and
 *    its mallocs take the held ones first, then its own, rroom counting up;
 *  - a tag shared by two heaps (indices 512 apart, forced here) is no proof
 *    of ownership: the other heap's object still goes to the held list, not
 *    onto the owner's page list (which only the owner may write).
 * Usage: nbm_test_remote
 */
#include <pthread.h>
#include <stdint.h>

#include "../check.h"
#include "internal.h"
#include "nbmalloc.h"

static nbm_tcache_t *main_tc;
static void *main_objs[4];  /* 64 B, of the main thread's heap */
static void *main_obj96;    /* 96 B, of the main thread's heap */

static uint32_t unit_tag(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return nbm__unit_word((nbm_arena_t *)nbm__owner(a), a) & NBM_UNIT_TAG_MASK;
}

static nbm_bin_t *bin_of(nbm_tcache_t *tc, size_t n)
{
    return &tc->bins[nbm__class_of_small[(n + 15) >> 4]];
}

static unsigned held_count(nbm_bin_t *bin)
{
    unsigned n = 0;
    for (void **o = bin->rhead; o; o = o[0])
        n++;
    return n;
}

static void *other_thread(void *arg)
{
    (void)arg;
    void *own = nbm_malloc(64);
    CHECK(own != NULL);
    nbm_tcache_t *tc = nbm__tc;
    CHECK(tc != NULL && tc != main_tc);
    if (!tc || tc == main_tc)
        return NULL;
    CHECK_EQ(unit_tag(own), tc->utag);
    CHECK(tc->utag != main_tc->utag); /* two live heaps, indices < 512 */
    nbm_bin_t *bin = bin_of(tc, 64);
    uint32_t room0 = bin->rroom;

    nbm_free(own); /* its own current page: the branch, onto the bin's list */
    CHECK_EQ(tc->mixed, 0);
    CHECK(bin->head == own);
    CHECK(bin->rhead == NULL);

    nbm_free(main_objs[0]); /* another heap's: held, and the heap is mixed */
    CHECK_EQ(tc->mixed, 1);
    CHECK(bin->rhead == main_objs[0]);
    CHECK(bin->head == own);
    uint32_t room1 = bin->rroom; /* set by the first hold: 128 objects of 64 B, one taken */
    CHECK_EQ(room0, 0);
    CHECK_EQ(room1, 127);

    /* Mixed: the lists chosen by offset. */
    void *own2 = nbm_malloc(64); /* held first */
    CHECK(own2 == main_objs[0]);
    CHECK_EQ(bin->rroom, room1 + 1);
    void *own3 = nbm_malloc(64); /* then the page's */
    CHECK(own3 == own);
    nbm_free(own3);
    CHECK(bin->head == own3);
    CHECK(bin->rhead == NULL);
    CHECK_EQ(bin->rroom, room1 + 1);
    nbm_free(own2); /* main's object again: held */
    nbm_free(main_objs[1]);
    nbm_free(main_objs[2]);
    CHECK_EQ(held_count(bin), 3);
    CHECK_EQ(bin->rroom, room1 - 2);
    CHECK(bin->head == own3);

    nbm_thread_flush(); /* held objects back to their pages */
    CHECK_EQ(tc->mixed, 0);
    CHECK(bin->rhead == NULL);

    /* A tag shared with the main heap (forced: as for indices 512 apart),
     * stamped on this heap's next page (a class it has no page of yet). */
    tc->utag = main_tc->utag;
    void *mine96 = nbm_malloc(96);
    CHECK(mine96 != NULL);
    CHECK_EQ(unit_tag(mine96), main_tc->utag);
    CHECK_EQ(unit_tag(main_obj96), main_tc->utag);
    nbm_bin_t *b96 = bin_of(tc, 96);
    nbm_page_t *pg = nbm__page_at((nbm_arena_t *)nbm__owner((uintptr_t)main_obj96), (uintptr_t)main_obj96,
                                  b96->mask);
    void *pfree = pg->free;
    nbm_free(main_obj96); /* same tag, not ours: the record decides, held */
    CHECK(b96->rhead == main_obj96);
    CHECK(pg->free == pfree); /* the owner's page list untouched */
    nbm_free(mine96); /* ours */
    CHECK(b96->head == mine96);
    nbm_free(main_objs[3]); /* mixed now, the tag equal: still held */
    CHECK(bin->rhead == main_objs[3]);
    nbm_thread_flush();
    return NULL;
}

int main(void)
{
    for (int i = 0; i < 4; i++) {
        main_objs[i] = nbm_malloc(64);
        CHECK(main_objs[i] != NULL);
    }
    main_obj96 = nbm_malloc(96);
    CHECK(main_obj96 != NULL);
    main_tc = nbm__tc;
    CHECK(main_tc != NULL);
    if (!main_tc)
        TEST_MAIN_END();
    CHECK_EQ(main_tc->utag, (main_tc->index << NBM_UNIT_TAG_SHIFT) & NBM_UNIT_TAG_MASK);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(unit_tag(main_objs[i]), main_tc->utag);
    CHECK_EQ(unit_tag(main_obj96), main_tc->utag);
    pthread_t t;
    int rc = pthread_create(&t, NULL, other_thread, NULL); /* checked after the join: */
    if (rc == 0)                                           /* the counters are no atomics */
        pthread_join(t, NULL);
    CHECK_EQ(rc, 0);
    /* Every object came back to this heap's pages (remote lists): the
     * pages serve again. */
    void *q = nbm_malloc(64);
    CHECK(q != NULL);
    nbm_free(q);
    nbm_purge();
    TEST_MAIN_END();
}
