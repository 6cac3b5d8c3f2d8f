/*
 * test_place_race.c - placement when a chosen free group is lost to another
 * context (docs/design.md, "Placement", "Races at a group boundary").
 *
 * Built on nbbs_hooked: the atomic hook runs before every atomic operation
 * of the core, so the test can let another thread act at an exact point of
 * an allocation. This thread fills group 4 of a fresh arena, then allocates
 * once more: the scan chooses the first frame of the free group 5, and just
 * before its claim (the allocation's first CAS) another thread takes that
 * frame. The allocation must then break the next free group (6) at its
 * start, not join the other context's front beside the frame it lost.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "nbbs.h"
#include "nbbs_atomic.h"
#include "support/nbbs_testutil.h"

#define FAKE_BASE NBBS_TU_FAKE_BASE

static nbbs_t *the_b;
static char *steal_at; /* the frame the other thread takes */
static int armed;      /* set by this thread; the other runs after pthread_create */
static int steal_rc = -1;

static void *stealer(void *v)
{
    (void)v;
    steal_rc = nbbs_alloc_at(the_b, steal_at, 0);
    return NULL;
}

void nbbs_atomic_hook(int op, const volatile void *addr, int phase)
{
    (void)addr;
    if (!armed || op != NBBS_OP_CAS || phase != NBBS_HOOK_BEFORE)
        return;
    armed = 0;
    pthread_t th;
    if (pthread_create(&th, NULL, stealer, NULL) == 0)
        pthread_join(th, NULL);
}

static void test_lost_group(nbbs_layout_t lay)
{
    nbbs_config_t c = { .min_block = 4096, .max_order = 10, .layout = lay };
    nbbs_t *b = nbbs_create(FAKE_BASE, (size_t)32 << 20, &c); /* 16 groups of 512 frames */
    CHECK(b != NULL);
    if (!b)
        return;
    char *g4 = FAKE_BASE + ((size_t)4 << 21), *g5 = g4 + ((size_t)1 << 21), *g6 = g5 + ((size_t)1 << 21);
    /* The fill point moves to group 4 (a free moves it), which is then filled. */
    CHECK_EQ(nbbs_alloc_at(b, g4, 0), 0);
    CHECK_EQ(nbbs_free(b, g4), 0);
    static char *got[512];
    for (unsigned i = 0; i < 512; i++) {
        got[i] = nbbs_alloc_order(b, 0);
        CHECK(got[i] == g4 + (size_t)i * 4096);
    }
    the_b = b, steal_at = g5, steal_rc = -1, armed = 1;
    char *p = nbbs_alloc_order(b, 0);
    CHECK_EQ(armed, 0);
    CHECK_EQ(steal_rc, 0); /* the other context took g5 first */
    CHECK(p == g6);        /* before: g5's neighbour, beside the winner's front */
    if (p)
        CHECK_EQ(nbbs_free(b, p), 0);
    if (steal_rc == 0)
        CHECK_EQ(nbbs_free(b, g5), 0);
    for (unsigned i = 0; i < 512; i++)
        if (got[i])
            CHECK_EQ(nbbs_free(b, got[i]), 0);
    CHECK_EQ(nbbs_validate(b), 0);
    nbbs_destroy(b);
}

int main(void)
{
    test_lost_group(NBBS_LAYOUT_TREE);
    test_lost_group(NBBS_LAYOUT_BUNCH);
    TEST_MAIN_END();
}
