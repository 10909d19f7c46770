/*
 * The engine's clock (proxy/clock.h): ferry_px_now_ns() stays within a few
 * microseconds of CLOCK_MONOTONIC read around it and never goes back, in two
 * threads at once, over 1.3 s (past the first anchor at 20 ms and its renewal
 * after a second); the coarse clock stays within a few of the kernel's
 * coarse ticks of it. Whether the TSC is used must follow the kernel's
 * clocksource and NCCL_FERRY_TSC (unit_test_px_clock_os runs it with =0).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "proxy/clock.h"

#define RUN_NS    1300000000ULL
/* A rate measured over 20 ms from two clock reads is off by a few ppm: microseconds a second. */
#define TOLERANCE 20000ULL

static uint64_t os_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

typedef struct {
    uint64_t calls, worst_early, worst_late, backwards;
} track_t;

static void *track(void *arg)
{
    track_t *r = arg;
    uint64_t end = os_ns(CLOCK_MONOTONIC) + RUN_NS, prev = 0;

    memset(r, 0, sizeof(*r));
    for (;;) {
        uint64_t a = os_ns(CLOCK_MONOTONIC);
        uint64_t f = ferry_px_now_ns();
        uint64_t b = os_ns(CLOCK_MONOTONIC);

        if (f + TOLERANCE < a && a - f > r->worst_early)
            r->worst_early = a - f;
        if (f > b + TOLERANCE && f - b > r->worst_late)
            r->worst_late = f - b;
        if (f < prev)
            r->backwards++;
        prev = f;
        r->calls++;
        if (b >= end)
            break;
    }
    return NULL;
}

static void test_tracks_monotonic(void **state)
{
    track_t r[2];
    pthread_t t;

    (void)state;
    assert_int_equal(pthread_create(&t, NULL, track, &r[1]), 0);
    track(&r[0]);
    assert_int_equal(pthread_join(t, NULL), 0);
    for (int i = 0; i < 2; i++) {
        print_message("thread %d: %llu reads, tsc %d, worst early %llu late %llu ns, "
                      "backwards %llu\n", i, (unsigned long long)r[i].calls, ferry_px_clock_tsc(),
                      (unsigned long long)r[i].worst_early, (unsigned long long)r[i].worst_late,
                      (unsigned long long)r[i].backwards);
        assert_true(r[i].calls > 1000);
        assert_int_equal(r[i].worst_early, 0);
        assert_int_equal(r[i].worst_late, 0);
        assert_int_equal(r[i].backwards, 0);
    }
}

static void test_coarse(void **state)
{
    struct timespec res;
    uint64_t gran, a, c, b;

    (void)state;
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    gran = (uint64_t)res.tv_sec * 1000000000ULL + (uint64_t)res.tv_nsec;
    a = os_ns(CLOCK_MONOTONIC);
    c = ferry_px_coarse_ns();
    b = os_ns(CLOCK_MONOTONIC);
    /* The kernel's coarse clock moves at its ticks, which a quiet or virtual CPU may skip. */
    assert_true(c + 4 * gran + 20000000ULL >= a);
    assert_true(c <= b + TOLERANCE);
}

/* The TSC is used exactly when the kernel keeps time with it and NCCL_FERRY_TSC is not 0. */
static void test_mode(void **state)
{
    const char *env = getenv("NCCL_FERRY_TSC");
    char src[32] = "";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    int want;

    (void)state;
    if (f != NULL) {
        if (fgets(src, sizeof(src), f) == NULL)
            src[0] = '\0';
        fclose(f);
    }
#if defined(__x86_64__)
    want = strcmp(src, "tsc\n") == 0 && !(env != NULL && strcmp(env, "0") == 0);
#else
    want = 0;
#endif
    print_message("clocksource %s", src);
    assert_int_equal(ferry_px_clock_tsc(), want);
    /* Past the first second the anchor is in place exactly when the TSC is on. */
    assert_int_equal(atomic_load(&ferry_px_clock.seq) != 0, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tracks_monotonic),
        cmocka_unit_test(test_coarse),
        cmocka_unit_test(test_mode),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
