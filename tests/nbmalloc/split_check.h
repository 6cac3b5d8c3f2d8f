/*
 * split_check.h - what the split tests (test_split_race.c, test_split_gap.c)
 * check alike: objects tagged every SPLIT_STRIDE bytes and in their last
 * word, and the bytes the back-end holds, to compare before and after.
 * Include after internal.h and nbbs.h.
 */
#ifndef NBM_TEST_SPLIT_CHECK_H
#define NBM_TEST_SPLIT_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPLIT_STRIDE 512 /* bytes between tag words */

/* Writes `tag` every SPLIT_STRIDE bytes of p's `usable` bytes and in its last word. */
static inline void tags_write(uint64_t *p, size_t usable, uint64_t tag)
{
    size_t words = usable / 8;
    for (size_t i = 0; i < words; i += SPLIT_STRIDE / 8)
        p[i] = tag;
    p[words - 1] = tag;
}

/* Whether every word tags_write wrote still holds `tag`. */
static inline bool tags_ok(const uint64_t *p, size_t usable, uint64_t tag)
{
    size_t words = usable / 8;
    bool ok = p[words - 1] == tag;
    for (size_t i = 0; i < words; i += SPLIT_STRIDE / 8)
        ok &= p[i] == tag;
    return ok;
}

/* Bytes the back-end holds in the arenas in use. */
static inline uint64_t backend_used(void)
{
    uint64_t used = 0;
    for (uint32_t i = 0; i < nbm__arena_count(); i++) {
        nbm_arena_t *ar = nbm__arena_at(i);
        if (nbm_load_u32(&ar->retired))
            continue;
        nbbs_stats_t bs;
        nbbs_get_stats(ar->bb, &bs);
        used += bs.used_bytes;
    }
    return used;
}

#endif
