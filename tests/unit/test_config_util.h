/*
 * What the config-table tests (test_config.c, test_sock_config*.c) share: a
 * logger that keeps the last WARN, and the check that a bad value's WARN
 * ends in the table's wording ("NAME='value' is not valid: expected HELP;
 * unset it or fix the value"). Include after <cmocka.h>.
 */
#ifndef FERRY_TEST_CONFIG_UTIL_H
#define FERRY_TEST_CONFIG_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"

/* The last WARN ferry logged, to check messages by content, and how many came. */
static char last_warn[2048];
static int warns;

static inline void __attribute__((format(printf, 5, 6)))
capture_log(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    (void)flags;
    (void)file;
    (void)line;
    if (level != FERRY_LOG_WARN)
        return;
    va_start(ap, fmt);
    vsnprintf(last_warn, sizeof(last_warn), fmt, ap);
    va_end(ap);
    warns++;
}

/* Fails the test unless last_warn ends in the table's WARN for NAME=value. */
static inline void expect_bad_warn(const char *name, const char *value, const char *help)
{
    char want[1024];
    size_t n, w;

    snprintf(want, sizeof(want), "%s='%s' is not valid: expected %s; unset it or fix the value",
             name, value, help);
    n = strlen(last_warn);
    w = strlen(want);
    if (n < w || strcmp(last_warn + n - w, want) != 0)
        fail_msg("%s=%s: WARN '%s', expected it to end in '%s'", name, value, last_warn, want);
}

#endif
