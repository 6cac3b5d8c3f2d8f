/* check.h - the smallest test harness that can fail: CHECK records a failure
 * with its location and goes on; TEST_MAIN_END prints "N passed, N failed"
 * and makes the exit status non-zero when anything failed. */
#ifndef NBBS_TEST_CHECK_H
#define NBBS_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) {                                                                   \
            check_passed++;                                                           \
        } else {                                                                      \
            check_failed++;                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                             \
    } while (0)

#define CHECK_EQ(a, b)                                                                \
    do {                                                                              \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);               \
        if (check_a_ == check_b_) {                                                   \
            check_passed++;                                                           \
        } else {                                                                      \
            check_failed++;                                                           \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n",       \
                    __FILE__, __LINE__, #a, check_a_, #b, check_b_);                  \
        }                                                                             \
    } while (0)

#define TEST_MAIN_END()                                                               \
    do {                                                                              \
        printf("%d passed, %d failed\n", check_passed, check_failed);                 \
        return check_failed ? 1 : 0;                                                  \
    } while (0)

#endif
