/* NCCL_IB_HCA parsing and matching, case by case against NCCL 2.28's rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "ib/ib_hca_filter.h"

typedef struct filter_case {
    const char *hca;  /* NCCL_IB_HCA. */
    const char *dev;
    int         port;
    int         pass; /* What NCCL decides. */
} filter_case_t;

static const filter_case_t cases[] = {
    /* No filter: everything. */
    {NULL, "mlx5_0", 1, 1},
    {"", "mlx5_0", 1, 1},
    /* Prefixes: mlx5_1 takes mlx5_10..19 too. */
    {"mlx5_1", "mlx5_1", 1, 1},
    {"mlx5_1", "mlx5_10", 1, 1},
    {"mlx5_1", "mlx5_2", 1, 0},
    {"mlx5", "mlx5_7", 2, 1},
    {"mlx5_10", "mlx5_1", 1, 0},
    /* Exact names. */
    {"=mlx5_1", "mlx5_1", 1, 1},
    {"=mlx5_1", "mlx5_10", 1, 0},
    {"=mlx5", "mlx5_0", 1, 0},
    /* Ports. */
    {"=mlx5_0:1,mlx5_1:1", "mlx5_0", 1, 1},
    {"=mlx5_0:1,mlx5_1:1", "mlx5_0", 2, 0},
    {"=mlx5_0:1,mlx5_1:1", "mlx5_1", 1, 1},
    {"=mlx5_0:1,mlx5_1:1", "mlx5_2", 1, 0},
    {"mlx5_0:2", "mlx5_0", 2, 1},
    {"mlx5_0:2", "mlx5_0", 1, 0},
    /* Text after the port up to the comma is skipped (NCCL reads the port with atoi). */
    {"mlx5_0:1:junk,mlx5_3", "mlx5_3", 1, 1},
    {"mlx5_0:1x", "mlx5_0", 1, 1},
    /* Exclusions. */
    {"^mlx5_1", "mlx5_1", 1, 0},
    {"^mlx5_1", "mlx5_10", 1, 0},
    {"^mlx5_1", "mlx5_0", 1, 1},
    {"^=mlx5_1", "mlx5_1", 1, 0},
    {"^=mlx5_1", "mlx5_10", 1, 1},
    {"^mlx5_0:1", "mlx5_0", 2, 1},
    {"^mlx5_0:1", "mlx5_0", 1, 0},
    /* "^" alone: an empty list matches everything, and ^ inverts that. */
    {"^", "mlx5_0", 1, 0},
    /* Empty entries are dropped. */
    {",,mlx5_2,,", "mlx5_2", 1, 1},
    {",,mlx5_2,,", "mlx5_3", 1, 0},
    /* "=" before "^" is a name character, as in NCCL. */
    {"=^mlx5_0", "mlx5_0", 1, 0},
};

static void test_cases(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ferry_ib_hca_filter_t f;
        int got;

        assert_int_equal(ferry_ib_hca_filter_parse(cases[i].hca, &f), 0);
        got = ferry_ib_hca_filter_match(&f, cases[i].dev, cases[i].port);
        if (got != cases[i].pass)
            fail_msg("NCCL_IB_HCA='%s' dev %s:%d: got %d, NCCL says %d",
                     cases[i].hca ? cases[i].hca : "(unset)", cases[i].dev, cases[i].port, got,
                     cases[i].pass);
    }
}

static void test_parsed_fields(void **state)
{
    ferry_ib_hca_filter_t f;

    (void)state;
    assert_int_equal(ferry_ib_hca_filter_parse("^=mlx5_0:1,mlx5_3", &f), 0);
    assert_int_equal(f.exclude, 1);
    assert_int_equal(f.exact, 1);
    assert_int_equal(f.n, 2);
    assert_string_equal(f.entries[0].name, "mlx5_0");
    assert_int_equal(f.entries[0].port, 1);
    assert_string_equal(f.entries[1].name, "mlx5_3");
    assert_int_equal(f.entries[1].port, -1);
}

static void test_limits(void **state)
{
    char text[2048], name[80];
    ferry_ib_hca_filter_t f;
    size_t off = 0;
    int i;

    (void)state;
    /* 40 exact entries: NCCL keeps the first 32 (MAX_IB_DEVS). */
    for (i = 0; i < 40; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off, "%sdev%d", i ? "," : "=", i);
    assert_int_equal(ferry_ib_hca_filter_parse(text, &f), 0);
    assert_int_equal(f.n, FERRY_IB_HCA_FILTER_MAX);
    assert_true(ferry_ib_hca_filter_match(&f, "dev31", 1));
    assert_false(ferry_ib_hca_filter_match(&f, "dev35", 1));
    /* A name NCCL could not hold is refused rather than cut. */
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(ferry_ib_hca_filter_parse(name, &f), -1);
    name[FERRY_IB_HCA_NAME_MAX - 1] = '\0';
    assert_int_equal(ferry_ib_hca_filter_parse(name, &f), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_parsed_fields),
        cmocka_unit_test(test_limits),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
