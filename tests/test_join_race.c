/*
 * test_join_race.c - the loser of a race for a free block (docs/design.md,
 * "Convoys after cross-thread frees"), made exact on nbbs_hooked: the atomic
 * hook lets "another context" take the chosen frame with nbbs_alloc_at just
 * before the allocation's claim (its first CAS), in this one thread.
 *
 * Lost in a free block larger than a group (a mostly free arena), the scan
 * chooses again from past that block, so two contexts that reach a group's
 * end together part instead of sharing the next group; and from the middle
 * of the run of wholly free trees that follows it (FN(run_middle)), so the
 * winner fills that half of the run alone before it meets the loser's
 * groups again. Lost in a lone free group (its buddy group in use: the end
 * of a churn), it takes the frame beside the winner's, as before.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "nbbs.h"
#include "support/nbbs_testutil.h"
#include "../src/nbbs/nbbs_internal.h" /* the hint cell: this context's fill point */

#define FAKE_BASE NBBS_TU_FAKE_BASE /* never mapped, never touched */
#define LEAF(i) (FAKE_BASE + (size_t)(i) * 4096)

static nbbs_t *race_b; /* armed: the next CAS takes race_leaf first */
static uint64_t race_leaf;
static int race_fired;

void nbbs_atomic_hook(int op, const volatile void *addr, int phase)
{
    (void)addr;
    if (race_b && op == NBBS_OP_CAS && phase == NBBS_HOOK_BEFORE) {
        nbbs_t *b = race_b;
        race_b = NULL; /* the nested operations below pass through */
        race_fired += nbbs_alloc_at(b, LEAF(race_leaf), 0) == 0;
    }
}

/* This context's fill point at the last frame of group 3 (live), so its
 * next allocation breaks group 4 (leaf 2048, in tree 2: groups 4 and 5),
 * which another context takes just before the claim. lone: a frame of
 * group 5 is live, so group 4 is a lone free group. busy: a live frame
 * there too (UINT64_MAX: none), which ends the run of free trees 3..7
 * after tree 2. Returns the leaf taken. */
static uint64_t lose_race(nbbs_layout_t lay, bool lone, uint64_t busy)
{
    nbbs_config_t c = { .min_block = 4096, .max_order = 10, .layout = lay };
    nbbs_t *b = nbbs_create(FAKE_BASE, (size_t)32 << 20, &c); /* 16 groups of 512 frames */
    CHECK(b != NULL);
    if (!b)
        return UINT64_MAX;
    CHECK_EQ(nbbs_alloc_at(b, LEAF(2047), 0), 0);
    if (lone)
        CHECK_EQ(nbbs_alloc_at(b, LEAF(2600), 0), 0);
    if (busy != UINT64_MAX)
        CHECK_EQ(nbbs_alloc_at(b, LEAF(busy), 0), 0);
    nb_hint_store(nbbs__hint_order(b, 0), 2047);
    race_leaf = 2048, race_fired = 0, race_b = b;
    char *p = nbbs_alloc_order(b, 0);
    race_b = NULL;
    CHECK_EQ(race_fired, 1);
    CHECK(p != NULL);
    uint64_t got = p ? (uint64_t)(p - FAKE_BASE) / 4096 : UINT64_MAX;
    if (p)
        CHECK_EQ(nbbs_free(b, p), 0);
    if (lone)
        CHECK_EQ(nbbs_free(b, LEAF(2600)), 0);
    if (busy != UINT64_MAX)
        CHECK_EQ(nbbs_free(b, LEAF(busy)), 0);
    CHECK_EQ(nbbs_free(b, LEAF(2048)), 0);
    CHECK_EQ(nbbs_free(b, LEAF(2047)), 0);
    CHECK_EQ(nbbs_validate(b), 0);
    nbbs_destroy(b);
    return got;
}

int main(void)
{
    static const nbbs_layout_t layouts[] = { NBBS_LAYOUT_TREE, NBBS_LAYOUT_BUNCH };
    for (unsigned i = 0; i < 2; i++) {
        /* Past the free tree the winner broke, not 2049 beside the
         * winner's frame: the middle of the free trees after it, 3..7
         * (tree 5), or 3..5 (tree 4) with a frame of tree 6 live; with
         * one of tree 4 live, tree 3, the only free tree after it. */
        CHECK_EQ(lose_race(layouts[i], false, UINT64_MAX), 5 * 1024);
        CHECK_EQ(lose_race(layouts[i], false, 6 * 1024 + 7), 4 * 1024);
        CHECK_EQ(lose_race(layouts[i], false, 4 * 1024 + 7), 3 * 1024);
        /* A lone free group: beside the winner's frame. */
        CHECK_EQ(lose_race(layouts[i], true, UINT64_MAX), 2049);
    }
    TEST_MAIN_END();
}
