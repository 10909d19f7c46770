/*
 * fakeibv unit tests, the spinning engine (FAKEIBV_SPIN_US): requests are
 * served and answered as without it, byte for byte and in order, while
 * the engine's workers take jobs without a wake-up (spin_takes), and an
 * idle engine goes back to sleep (it costs no CPU once traffic stops).
 * Run twice by ctest: with FAKEIBV_SPIN_US=500 (every check) and without
 * (the same data; no job taken spinning).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define BUF   (1u << 20)
#define DEPTH 64
#define ROUNDS 400

static long spin_us(void)
{
    const char *s = getenv("FAKEIBV_SPIN_US");

    return s != NULL ? atol(s) : 0;
}

static int setup(void **state)
{
    static struct fx_pair x;

    if (fx_pair_open(&x, BUF, DEPTH, 4096) != 0)
        return -1;
    *state = &x;
    return 0;
}

static int teardown(void **state)
{
    fx_pair_close(*state);
    return 0;
}

static uint64_t spin_takes(void)
{
    struct fakeibv_xfer_stats s;

    fakeibv_xfer_stats(&s);
    return s.spin_takes;
}

static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* ROUNDS writes and reads, one at a time, each waited for: every byte, every completion. */
static void test_round_trips(void **state)
{
    struct fx_pair *x = *state;
    uint64_t t0 = spin_takes();
    struct ibv_wc wc;
    int i;

    for (i = 0; i < ROUNDS; i++) {
        uint32_t n = 1 + (uint32_t)(i * 37) % 8000, off = (uint32_t)(i * 4099) % (BUF / 4);

        fx_fill(x->src + off, n, (unsigned)i);
        assert_int_equal(fx_write(x->a, (uint64_t)i, IBV_WR_RDMA_WRITE, x->src + off, n,
                                  x->src_mr->lkey, (uintptr_t)x->dst + off, x->dst_mr->rkey,
                                  IBV_SEND_SIGNALED, 0), 0);
        assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
        assert_int_equal(wc.status, IBV_WC_SUCCESS);
        assert_int_equal(wc.wr_id, (uint64_t)i);
        assert_memory_equal(x->dst + off, x->src + off, n);
        /* And back: a READ of what just landed, into the upper half. */
        memset(x->src + BUF / 2, 0, n);
        assert_int_equal(fx_write(x->a, (uint64_t)i + 1000000, IBV_WR_RDMA_READ,
                                  x->src + BUF / 2, n, x->src_mr->lkey, (uintptr_t)x->dst + off,
                                  x->dst_mr->rkey, IBV_SEND_SIGNALED, 0), 0);
        assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
        assert_int_equal(wc.status, IBV_WC_SUCCESS);
        assert_int_equal(wc.wr_id, (uint64_t)i + 1000000);
        assert_memory_equal(x->src + BUF / 2, x->src + off, n);
    }
    if (spin_us() > 0) {
        assert_true(spin_takes() > t0);
        printf("spinning engine: %llu of its jobs taken without a wake-up\n",
               (unsigned long long)(spin_takes() - t0));
    } else {
        assert_int_equal(spin_takes(), t0);
    }
    assert_true(fakeibv_engine_threads() <= 17);
}

/* Idle, the engine sleeps: a spinning thread would burn the whole wait. */
static void test_idle_sleeps(void **state)
{
    double c0;

    (void)state;
    usleep(50000 + (useconds_t)spin_us()); /* The window after the last work closes. */
    c0 = cpu_s();
    usleep(400000);
    assert_true(cpu_s() - c0 < 0.1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_idle_sleeps),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
