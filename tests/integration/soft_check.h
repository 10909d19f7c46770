/*
 * CHECK for the single-file tests that report every failed check and go on
 * (the profiler's): prints where and what, counts it in failures; main()
 * fails the test if any.
 */
#ifndef FERRY_TEST_SOFT_CHECK_H
#define FERRY_TEST_SOFT_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            failures++;                                                      \
        }                                                                    \
    } while (0)

#endif
