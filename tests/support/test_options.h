/* test_options.h - the command line of a test program: "--name value" pairs
 * and "--flag"s, written once for every test that takes options.
 *
 * A test is called by ctest with the options its CMakeLists.txt names; an
 * option misspelt there, or a value that is not a number, must stop the
 * test with an error rather than run it with its defaults (it would still
 * pass, testing less than it says). So anything not understood exits with
 * status 2 and a message naming it.
 *
 *   int threads = 4;
 *   double seconds = 2;
 *   test_options(argc, argv, (const test_option_t[]){
 *       { "--threads", TEST_OPT_INT, &threads },
 *       { "--seconds", TEST_OPT_DOUBLE, &seconds },
 *       { 0 } });
 */
#ifndef NBBS_TEST_OPTIONS_H
#define NBBS_TEST_OPTIONS_H

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum test_opt_kind {
    TEST_OPT_INT,    /* int *: a decimal integer in int's range */
    TEST_OPT_U64,    /* uint64_t *: a decimal integer >= 0 */
    TEST_OPT_DOUBLE, /* double *: a number */
    TEST_OPT_FLAG    /* int *: set to 1 when the option is present (no value) */
} test_opt_kind_t;

typedef struct test_option {
    const char     *name; /* "--threads"; NULL ends the table */
    test_opt_kind_t kind;
    void           *dst;  /* written only when the option is given */
} test_option_t;

/* Parses one value of kind k from s into dst; false if s is not one whole
 * number of that kind. */
static inline int test_option_value(test_opt_kind_t k, const char *s, void *dst)
{
    char *end = NULL;
    errno = 0;
    if (k == TEST_OPT_DOUBLE) {
        double v = strtod(s, &end);
        if (end == s || *end || errno)
            return 0;
        *(double *)dst = v;
    } else if (k == TEST_OPT_U64) {
        if (*s == '-')
            return 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s || *end || errno)
            return 0;
        *(uint64_t *)dst = (uint64_t)v;
    } else {
        long v = strtol(s, &end, 10);
        if (end == s || *end || errno || v < INT_MIN || v > INT_MAX)
            return 0;
        *(int *)dst = (int)v;
    }
    return 1;
}

/* Reads argv[1..argc) against the table; exits with status 2 on an option
 * not in it, a missing value, or a value that is not a number of its kind. */
static inline void test_options(int argc, char **argv, const test_option_t *opt)
{
    for (int i = 1; i < argc; i++) {
        const test_option_t *o = opt;
        while (o->name && strcmp(o->name, argv[i]))
            o++;
        if (!o->name) {
            fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[i]);
            exit(2);
        }
        if (o->kind == TEST_OPT_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        if (i + 1 >= argc || !test_option_value(o->kind, argv[i + 1], o->dst)) {
            fprintf(stderr, "%s: option %s needs a %s value%s%s%s\n", argv[0], o->name,
                    o->kind == TEST_OPT_DOUBLE ? "numeric" : "whole-number", i + 1 < argc ? " (got '" : "",
                    i + 1 < argc ? argv[i + 1] : "", i + 1 < argc ? "')" : "");
            exit(2);
        }
        i++;
    }
}

#endif /* NBBS_TEST_OPTIONS_H */
