/* The log's per-site limit (core/log.c): a burst prints, the rest are counted and reported once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/log.h"

#define SEC 1000000000ULL

static int lines;
static char last[1024];

static void capture(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void capture(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    (void)level;
    (void)flags;
    (void)file;
    (void)line;
    va_start(ap, fmt);
    vsnprintf(last, sizeof(last), fmt, ap);
    va_end(ap);
    lines++;
}

/* Within one interval: exactly the burst passes; the count carries to the next interval, once. */
static void test_burst_then_count(void **state)
{
    struct ferry_log_limit lim = {0};
    unsigned long long held = 99;
    unsigned long long t0 = 5 * SEC;
    int i, passed = 0;

    (void)state;
    for (i = 0; i < 1000; i++) {
        passed += ferry_log_limit_pass_at(&lim, t0 + (unsigned long long)i * 1000, &held);
        assert_int_equal(held, 0);
    }
    assert_int_equal(passed, FERRY_LOG_LIMIT_BURST);
    /* Still inside the interval: held back, nothing reported. */
    assert_int_equal(ferry_log_limit_pass_at(&lim, t0 + FERRY_LOG_LIMIT_INTERVAL_S * SEC - 1, &held), 0);
    assert_int_equal(held, 0);
    /* The next interval: the line passes and carries the count of the ones held back. */
    assert_int_equal(ferry_log_limit_pass_at(&lim, t0 + FERRY_LOG_LIMIT_INTERVAL_S * SEC, &held), 1);
    assert_int_equal(held, 1000 - FERRY_LOG_LIMIT_BURST + 1);
    /* Reported once: the next line of the same interval carries none. */
    assert_int_equal(ferry_log_limit_pass_at(&lim, t0 + FERRY_LOG_LIMIT_INTERVAL_S * SEC + 1, &held), 1);
    assert_int_equal(held, 0);
}

/* Two sites keep separate counts: a flood on one does not silence the other. */
static void test_sites_apart(void **state)
{
    struct ferry_log_limit a = {0}, b = {0};
    unsigned long long held;
    int i;

    (void)state;
    for (i = 0; i < 50; i++)
        (void)ferry_log_limit_pass_at(&a, SEC + (unsigned long long)i, &held);
    assert_int_equal(ferry_log_limit_pass_at(&a, SEC + 60, &held), 0);
    assert_int_equal(ferry_log_limit_pass_at(&b, SEC + 60, &held), 1);
}

/* Through the macro and the logger: 500 calls print the burst, no more. */
static void warn_site(int i)
{
    FERRY_WARN_LIMITED("junk connection %d from 127.0.0.1", i);
}

static void test_macro_prints_burst(void **state)
{
    unsigned long long before = ferry_log_limit_suppressed_total();
    int i;

    (void)state;
    ferry_log_set(capture);
    lines = 0;
    for (i = 0; i < 500; i++)
        warn_site(i);
    assert_int_equal(lines, FERRY_LOG_LIMIT_BURST);
    assert_non_null(strstr(last, "junk connection 9 from 127.0.0.1"));
    assert_int_equal(ferry_log_limit_suppressed_total() - before, 500 - FERRY_LOG_LIMIT_BURST);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_count),
        cmocka_unit_test(test_sites_apart),
        cmocka_unit_test(test_macro_prints_burst),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
