/* Chunk splitting: every lane gets work, bounds respected, sizes add up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "proxy/req.h"

#define K (1024UL)
#define M (1024UL * 1024UL)

static void test_zero_and_tiny(void **state)
{
    ferry_px_chunk_plan_t p = ferry_px_chunk_plan(0, 4, 64 * K, M);

    assert_int_equal(p.nchunks, 1);
    p = ferry_px_chunk_plan(1, 4, 64 * K, M);
    assert_int_equal(p.nchunks, 1);
    p = ferry_px_chunk_plan(64 * K, 4, 64 * K, M);
    assert_int_equal(p.nchunks, 1);
}

static void test_spread_over_lanes(void **state)
{
    ferry_px_chunk_plan_t p = ferry_px_chunk_plan(M, 4, 64 * K, M);

    assert_int_equal(p.chunk_size, 256 * K);
    assert_int_equal(p.nchunks, 4);
    p = ferry_px_chunk_plan(512 * K, 16, 64 * K, M);
    assert_int_equal(p.chunk_size, 64 * K); /* min chunk wins over 32 KiB per lane */
    assert_int_equal(p.nchunks, 8);
}

static void test_max_chunk_caps(void **state)
{
    ferry_px_chunk_plan_t p = ferry_px_chunk_plan(64 * M, 4, 64 * K, M);

    assert_int_equal(p.chunk_size, M);
    assert_int_equal(p.nchunks, 64);
}

/* For many sizes: chunks cover the message exactly, and only the last is short. */
static void test_cover_property(void **state)
{
    size_t size;
    int lanes;

    for (lanes = 1; lanes <= 64; lanes *= 2) {
        for (size = 1; size < 300 * M; size = size * 3 + 7) {
            ferry_px_chunk_plan_t p = ferry_px_chunk_plan(size, lanes, 64 * K, 4 * M);

            assert_true(p.chunk_size >= 64 * K && p.chunk_size <= 4 * M);
            assert_true(p.chunk_size % 4096 == 0);
            assert_true((size_t)p.nchunks * p.chunk_size >= size);
            assert_true((size_t)(p.nchunks - 1) * p.chunk_size < size);
            /* Between the bounds, a chunk is one lane's share rounded up to a page. */
            if (size >= (size_t)lanes * 64 * K && size <= (size_t)lanes * 4 * M)
                assert_true(p.chunk_size - (size + (size_t)lanes - 1) / (size_t)lanes < 4096);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_and_tiny),
        cmocka_unit_test(test_spread_over_lanes),
        cmocka_unit_test(test_max_chunk_caps),
        cmocka_unit_test(test_cover_property),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
