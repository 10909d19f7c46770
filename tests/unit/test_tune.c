/*
 * The bundled tuner's policy (core/tune.c) on cost tables shaped like NCCL's:
 * float[7 algorithms][3 protocols] in microseconds, -1 for unusable entries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/tune.h"

#define NALGO  7
#define NPROTO 3
#define LL     FERRY_TUNE_PROTO_LL
#define LL128  FERRY_TUNE_PROTO_LL128
#define SIMPLE FERRY_TUNE_PROTO_SIMPLE
#define TREE   FERRY_TUNE_ALGO_TREE
#define RING   FERRY_TUNE_ALGO_RING

/* An active 2-rank, 2-node tuner with the defaults: 1000 MB/s LL, 2 MiB per channel. */
static ferry_tune_t active_tuner(void)
{
    ferry_tune_t t;

    memset(&t, 0, sizeof(t));
    t.active = 1;
    t.nranks = 2;
    t.nnodes = 2;
    t.ll_bytes_per_us = 1000.0;
    t.channel_bytes = 2 << 20;
    return t;
}

/* Everything unusable except Ring LL and Ring Simple (a 2-node ring, LL128 off). */
static void ring_table(float table[NALGO][NPROTO], float ll, float simple)
{
    int a, p;

    for (a = 0; a < NALGO; a++)
        for (p = 0; p < NPROTO; p++)
            table[a][p] = -1.0f;
    table[RING][LL] = ll;
    table[RING][SIMPLE] = simple;
}

static void argmin(float table[NALGO][NPROTO], int *a_p, int *p_p)
{
    float best = -1.0f;
    int a, p;

    for (a = 0; a < NALGO; a++)
        for (p = 0; p < NPROTO; p++)
            if (table[a][p] >= 0 && (best < 0 || table[a][p] < best)) {
                best = table[a][p];
                *a_p = a;
                *p_p = p;
            }
}

/* 64 KiB all_reduce: NCCL's model says LL (20 us) beats Simple (30 us); over ferry
 * LL needs 65536 * 1.0 / 1000 = 65.5 us, so Simple wins, on 2 channels. */
static void test_mid_size_moves_to_simple(void **state)
{
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    int nch = 0, a = -1, p = -1;

    (void)state;
    ring_table(table, 20.0f, 30.0f);
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 65536, &table[0][0], NALGO,
                                     NPROTO, &nch), 1);
    assert_true(table[RING][LL] > 65.5f && table[RING][LL] < 65.6f);
    assert_true(table[RING][SIMPLE] == 30.0f);
    argmin(table, &a, &p);
    assert_int_equal(a, RING);
    assert_int_equal(p, SIMPLE);
    assert_int_equal(nch, FERRY_TUNE_MIN_CHANNELS);
}

/* 4 KiB: LL's ceiling costs 4.1 us, below NCCL's 10 us: nothing changes. */
static void test_small_size_keeps_ll(void **state)
{
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    int nch = 0;

    (void)state;
    ring_table(table, 10.0f, 30.0f);
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 4096, &table[0][0], NALGO,
                                     NPROTO, &nch), 0);
    assert_true(table[RING][LL] == 10.0f);
    assert_int_equal(nch, 0); /* LL keeps NCCL's channel choice. */
}

/* 32 KiB where LL still wins (NCCL: 10 us, ceiling 32.8 us, Simple 40 us): LL stays,
 * on 2 channels; at 8 KiB NCCL's own (smaller) count stays. */
static void test_ll_channels(void **state)
{
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    int nch = 0, a = -1, p = -1;

    (void)state;
    ring_table(table, 10.0f, 40.0f);
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 32768, &table[0][0], NALGO,
                                     NPROTO, &nch), 1);
    argmin(table, &a, &p);
    assert_int_equal(p, LL);
    assert_int_equal(nch, FERRY_TUNE_MIN_CHANNELS);
    ring_table(table, 10.0f, 40.0f);
    nch = 0;
    ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 8192, &table[0][0], NALGO, NPROTO, &nch);
    assert_int_equal(nch, 0);
}

/* Unusable entries (NCCL_PROTO, NCCL_ALGO, unsupported) stay unusable. */
static void test_ignored_entries_stay_ignored(void **state)
{
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    int nch = 0, a, p;

    (void)state;
    ring_table(table, -1.0f, 30.0f);
    ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 1 << 20, &table[0][0], NALGO, NPROTO, &nch);
    for (a = 0; a < NALGO; a++)
        for (p = 0; p < NPROTO; p++)
            if (!(a == RING && p == SIMPLE))
                assert_true(table[a][p] == -1.0f);
}

/* Tree LL/LL128 are held to the same ceiling; Tree Simple then gets the channels. */
static void test_tree_and_ll128(void **state)
{
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    int nch = 0, a = -1, p = -1;

    (void)state;
    ring_table(table, 500.0f, 900.0f);
    table[TREE][LL] = 100.0f;
    table[TREE][LL128] = 150.0f;
    table[TREE][SIMPLE] = 800.0f;
    /* 8 MiB all_reduce, 2 ranks: LL needs 8388.6 us. */
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 8 << 20, &table[0][0], NALGO,
                                     NPROTO, &nch), 1);
    assert_true(table[TREE][LL] > 8388.0f && table[TREE][LL128] > 8388.0f);
    argmin(table, &a, &p);
    assert_int_equal(a, TREE);
    assert_int_equal(p, SIMPLE);
    assert_int_equal(nch, 4); /* 8 MiB / 2 MiB. */
}

/*
 * Below 2 x 32 KiB NCCL drops Simple to fewer than 2 channels itself (one
 * under 32 KiB): the tuner leaves the count alone there rather than raise it.
 */
static void test_small_simple_keeps_ncclcount(void **state)
{
    static const size_t sizes[] = {4096, 16384, 32768, 65535};
    ferry_tune_t t = active_tuner();
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        float table[NALGO][NPROTO];
        int nch = 0, a = -1, p = -1;

        ring_table(table, -1.0f, 30.0f);
        assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, sizes[i], &table[0][0],
                                         NALGO, NPROTO, &nch), 0);
        argmin(table, &a, &p);
        assert_int_equal(p, SIMPLE);
        assert_int_equal(nch, 0);
    }
}

/* Channels grow with size; huge sizes leave NCCL's count (it clamps to what it has). */
static void test_channels_by_size(void **state)
{
    static const struct { size_t bytes; int nch; } cases[] = {
        {64 << 10, 2}, {512 << 10, 2}, {4 << 20, 2}, {6 << 20, 3}, {16 << 20, 8},
        {64 << 20, 32}, {1 << 30, 0},
    };
    ferry_tune_t t = active_tuner();
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        float table[NALGO][NPROTO];
        int nch = 0;

        ring_table(table, -1.0f, 100.0f);
        ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, cases[i].bytes, &table[0][0], NALGO, NPROTO,
                        &nch);
        assert_int_equal(nch, cases[i].nch);
    }
}

/*
 * NCCL_FERRY_TUNER_STEP_BYTES=128K on 8 ranks: a Simple ring whose step on 2
 * channels would move under 128 KiB gets one channel (1 MiB: 64 KiB steps),
 * from 2 MiB the per-size count holds; NCCL's own drop below 64 KiB, a tree,
 * a count already chosen and 0 (off) are left alone.
 */
static void test_step_bytes_one_channel(void **state)
{
    static const struct { size_t bytes; int nch; } cases[] = {
        {32 << 10, 0}, {64 << 10, 1}, {1 << 20, 1}, {(2 << 20) - 1, 1}, {2 << 20, 2},
        {4 << 20, 2}, {16 << 20, 8},
    };
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    size_t i;
    int nch;

    (void)state;
    t.nranks = 8;
    t.nnodes = 8;
    t.step_bytes = 128 << 10;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        nch = 0;
        ring_table(table, -1.0f, 100.0f);
        ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, cases[i].bytes, &table[0][0], NALGO, NPROTO,
                        &nch);
        assert_int_equal(nch, cases[i].nch);
    }
    /* Also with the per-size count off (NCCL_FERRY_TUNER_CHANNEL_BYTES=0). */
    t.channel_bytes = 0;
    nch = 0;
    ring_table(table, -1.0f, 100.0f);
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 1 << 20, &table[0][0], NALGO,
                                     NPROTO, &nch), 1);
    assert_int_equal(nch, 1);
    /* A tree's steps are not the ring's: the per-size count, here off. */
    nch = 0;
    ring_table(table, -1.0f, -1.0f);
    table[TREE][SIMPLE] = 50.0f;
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 1 << 20, &table[0][0], NALGO,
                                     NPROTO, &nch), 0);
    assert_int_equal(nch, 0);
    /* A count NCCL or the user chose stays. */
    nch = 4;
    ring_table(table, -1.0f, 100.0f);
    ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 1 << 20, &table[0][0], NALGO, NPROTO, &nch);
    assert_int_equal(nch, 4);
    /* Off: the 2-channel minimum. */
    t.channel_bytes = 2 << 20;
    t.step_bytes = 0;
    nch = 0;
    ring_table(table, -1.0f, 100.0f);
    ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 1 << 20, &table[0][0], NALGO, NPROTO, &nch);
    assert_int_equal(nch, 2);
}

/* A channel count NCCL (or a user setting) already chose is not overridden; 0 bytes/channel = off. */
static void test_channels_left_alone(void **state)
{
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    int nch = 7;

    (void)state;
    ring_table(table, -1.0f, 100.0f);
    ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 64 << 20, &table[0][0], NALGO, NPROTO, &nch);
    assert_int_equal(nch, 7);
    t.channel_bytes = 0;
    nch = 0;
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 64 << 20, &table[0][0], NALGO,
                                     NPROTO, &nch), 0);
    assert_int_equal(nch, 0);
}

/* The bus factor per collective: all_gather of 64 KiB on 4 ranks moves 3/4 of it. */
static void test_bus_factor(void **state)
{
    ferry_tune_t t = active_tuner();
    float table[NALGO][NPROTO];
    int nch = 0;

    (void)state;
    t.nranks = 4;
    ring_table(table, 1.0f, 1000.0f);
    ferry_tune_coll(&t, FERRY_TUNE_ALL_GATHER, 65536, &table[0][0], NALGO, NPROTO, &nch);
    assert_true(table[RING][LL] > 49.1f && table[RING][LL] < 49.2f); /* 65536 * 0.75 / 1000 */
    ring_table(table, 1.0f, 1000.0f);
    ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 65536, &table[0][0], NALGO, NPROTO, &nch);
    assert_true(table[RING][LL] > 98.3f && table[RING][LL] < 98.4f); /* 65536 * 1.5 / 1000 */
    /* Send/recv and unknown kinds are not the model's: untouched. */
    ring_table(table, 1.0f, 1000.0f);
    assert_int_equal(ferry_tune_coll(&t, 5, 65536, &table[0][0], NALGO, NPROTO, &nch), 0);
    assert_int_equal(ferry_tune_coll(&t, 42, 65536, &table[0][0], NALGO, NPROTO, &nch), 0);
    assert_true(table[RING][LL] == 1.0f);
}

/* Inactive tuners change nothing; without ferry's net up, setup says so. */
static void test_inactive(void **state)
{
    ferry_tune_t t;
    float table[NALGO][NPROTO];
    int nch = 0;

    (void)state;
    ferry_tune_setup(&t, 2, 2);
    assert_int_equal(t.active, 0);
    assert_non_null(strstr(t.why, "not initialized"));
    ring_table(table, 20.0f, 30.0f);
    assert_int_equal(ferry_tune_coll(&t, FERRY_TUNE_ALL_REDUCE, 1 << 20, &table[0][0], NALGO,
                                     NPROTO, &nch), 0);
    assert_int_equal(ferry_tune_coll(NULL, FERRY_TUNE_ALL_REDUCE, 1 << 20, &table[0][0], NALGO,
                                     NPROTO, &nch), 0);
    assert_true(table[RING][LL] == 20.0f);
    assert_int_equal(nch, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mid_size_moves_to_simple),
        cmocka_unit_test(test_small_size_keeps_ll),
        cmocka_unit_test(test_ll_channels),
        cmocka_unit_test(test_ignored_entries_stay_ignored),
        cmocka_unit_test(test_tree_and_ll128),
        cmocka_unit_test(test_small_simple_keeps_ncclcount),
        cmocka_unit_test(test_channels_by_size),
        cmocka_unit_test(test_channels_left_alone),
        cmocka_unit_test(test_step_bytes_one_channel),
        cmocka_unit_test(test_bus_factor),
        cmocka_unit_test(test_inactive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
