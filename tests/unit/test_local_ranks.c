/*
 * The local rank count from each launcher's variables (core/local_ranks.c):
 * Open MPI, MVAPICH2, Hydra, torchrun, Slurm's compressed lists indexed by
 * the node id, the override, the order when several are set, and malformed
 * values ignored with a WARN naming variable and value; then the share of
 * the CPUs a rank gets (core/cpu_share.c): disjoint masks, masks of every
 * online CPU, partial overlap, a quota.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "test_config_util.h"

#include "core/cpu_share.h"
#include "core/local_ranks.h"

static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID", "LOCAL_WORLD_SIZE",
    "LOCAL_RANK", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE",
    "SLURM_NODEID", "SLURM_LOCALID", NULL,
};

static int clear_env(void **state)
{
    int i;

    (void)state;
    for (i = 0; launcher_vars[i] != NULL; i++)
        unsetenv(launcher_vars[i]);
    last_warn[0] = '\0';
    return 0;
}

/* The last WARN without the log's "NET/ferry : " prefix. */
static const char *warn_text(void)
{
    const char *p = strstr(last_warn, " : ");

    return p != NULL ? p + 3 : last_warn;
}

static void expect_ranks(int count, int index, const char *source)
{
    ferry_local_ranks_t lr;

    assert_int_equal(ferry_local_ranks_read(0, &lr), count);
    assert_int_equal(lr.count, count);
    assert_int_equal(lr.index, index);
    if (source == NULL)
        assert_null(lr.source);
    else
        assert_string_equal(lr.source, source);
}

static void test_no_launcher(void **state)
{
    (void)state;
    expect_ranks(0, -1, NULL);
    assert_string_equal(warn_text(), "");
}

/* Each launcher's pair alone: the count, this rank's index, the variable named as source. */
static void test_each_launcher(void **state)
{
    static const struct {
        const char *count, *index;
    } pairs[] = {
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"MV2_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"},
        {"MPI_LOCALNRANKS", "MPI_LOCALRANKID"},
        {"LOCAL_WORLD_SIZE", "LOCAL_RANK"},
        {"SLURM_STEP_TASKS_PER_NODE", "SLURM_LOCALID"},
        {"SLURM_TASKS_PER_NODE", "SLURM_LOCALID"},
        {"SLURM_NTASKS_PER_NODE", "SLURM_LOCALID"},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        clear_env(NULL);
        setenv(pairs[i].count, "8", 1);
        setenv(pairs[i].index, "5", 1);
        expect_ranks(8, 5, pairs[i].count);
        assert_string_equal(warn_text(), "");
    }
}

/* "2(x3),1": nodes 0..2 run 2 ranks, node 3 runs 1; node 4 is not in it. */
static void test_slurm_compressed(void **state)
{
    static const struct {
        const char *list;
        int         node, ok, count;
    } cases[] = {
        {"2(x3),1", 0, 1, 2}, {"2(x3),1", 1, 1, 2}, {"2(x3),1", 2, 1, 2}, {"2(x3),1", 3, 1, 1},
        {"2(x3),1", 4, 0, 0}, {"8(x4),2", 3, 1, 8}, {"8(x4),2", 4, 1, 2}, {"8", 0, 1, 8},
        {"4,3,2,1", 2, 1, 2}, {"1(x1048576)", 1048575, 1, 1},
        /* Malformed anywhere: refused, even past this node's entry. */
        {"", 0, 0, 0}, {"x", 0, 0, 0}, {"2(3)", 0, 0, 0}, {"2(x)", 0, 0, 0}, {"2(x3", 0, 0, 0},
        {"2(x3),", 0, 0, 0}, {"2,,1", 0, 0, 0}, {"0", 0, 0, 0}, {"2(x0)", 0, 0, 0},
        {"4097", 0, 0, 0}, {"2(x3),1 ", 0, 0, 0}, {"-2", 0, 0, 0},
        {"99999999999999999999", 0, 0, 0}, {"2(x3),1", -1, 0, 0},
    };
    size_t i;
    int n;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        n = -7;
        if (ferry_local_ranks_slurm_list(cases[i].list, cases[i].node, &n) != cases[i].ok)
            fail_msg("'%s' node %d: expected %s", cases[i].list, cases[i].node,
                     cases[i].ok ? "an entry" : "a refusal");
        if (cases[i].ok)
            assert_int_equal(n, cases[i].count);
    }
}

/* Through the environment: SLURM_NODEID picks the entry of the step's list. */
static void test_slurm_env_by_node(void **state)
{
    static const char *const ids[] = {"0", "1", "2", "3"};
    static const int want[] = {2, 2, 2, 1};
    int i;

    (void)state;
    for (i = 0; i < 4; i++) {
        clear_env(NULL);
        setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3),1", 1);
        setenv("SLURM_TASKS_PER_NODE", "8(x4)", 1); /* The allocation's; the step's wins. */
        setenv("SLURM_NODEID", ids[i], 1);
        setenv("SLURM_LOCALID", "0", 1);
        expect_ranks(want[i], 0, "SLURM_STEP_TASKS_PER_NODE");
    }
    /* No SLURM_NODEID: a list that gives every node the same count still says ours... */
    clear_env(NULL);
    setenv("SLURM_TASKS_PER_NODE", "4(x2)", 1);
    expect_ranks(4, -1, "SLURM_TASKS_PER_NODE");
    /* ...one that does not says nothing, and is no error. */
    setenv("SLURM_TASKS_PER_NODE", "4,2", 1);
    expect_ranks(0, -1, NULL);
    assert_string_equal(warn_text(), "");
}

/* MPI launchers and torchrun first: run inside an allocation, they inherit its SLURM_ variables. */
static void test_order(void **state)
{
    (void)state;
    setenv("SLURM_STEP_TASKS_PER_NODE", "16", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    expect_ranks(4, -1, "LOCAL_WORLD_SIZE");
    setenv("MPI_LOCALNRANKS", "3", 1);
    expect_ranks(3, -1, "MPI_LOCALNRANKS");
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    expect_ranks(2, -1, "OMPI_COMM_WORLD_LOCAL_SIZE");
    /* The override wins over all. */
    {
        ferry_local_ranks_t lr;

        assert_int_equal(ferry_local_ranks_read(6, &lr), 6);
        assert_string_equal(lr.source, "NCCL_FERRY_LOCAL_RANKS");
    }
}

/* A malformed value: a WARN naming variable and value, and the next source counts. */
static void test_malformed_ignored(void **state)
{
    static const char *const bad[] = {"eight", "0", "-1", "8x", "", "4097", " 8"};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char want[256];

        clear_env(NULL);
        setenv("OMPI_COMM_WORLD_LOCAL_SIZE", bad[i], 1);
        setenv("LOCAL_WORLD_SIZE", "4", 1);
        expect_ranks(4, -1, "LOCAL_WORLD_SIZE");
        if (bad[i][0] == '\0') { /* Empty: as unset, no WARN. */
            assert_string_equal(warn_text(), "");
            continue;
        }
        snprintf(want, sizeof(want), "OMPI_COMM_WORLD_LOCAL_SIZE='%s' is not a count of ranks "
                 "on this node (1..4096); it is not used for the count of local ranks", bad[i]);
        assert_string_equal(warn_text(), want);
    }
    /* A Slurm list without an entry for this node; the next Slurm variable counts. */
    clear_env(NULL);
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3),1", 1);
    setenv("SLURM_NODEID", "4", 1);
    setenv("SLURM_NTASKS_PER_NODE", "2", 1);
    expect_ranks(2, -1, "SLURM_NTASKS_PER_NODE");
    assert_string_equal(warn_text(), "SLURM_STEP_TASKS_PER_NODE='2(x3),1' has no entry for node 4 "
                                   "(SLURM_NODEID) in Slurm's form (\"8(x4),2\"); it is not used "
                                   "for the count of local ranks");
    clear_env(NULL);
    setenv("SLURM_TASKS_PER_NODE", "8(x4", 1);
    setenv("SLURM_NODEID", "0", 1);
    expect_ranks(0, -1, NULL);
    assert_non_null(strstr(warn_text(), "SLURM_TASKS_PER_NODE='8(x4' has no entry for node 0"));
    clear_env(NULL);
    setenv("SLURM_TASKS_PER_NODE", "8(x4)", 1);
    setenv("SLURM_NODEID", "first", 1);
    expect_ranks(0, -1, NULL);
    assert_string_equal(warn_text(), "SLURM_NODEID='first' is not a node index; "
                                   "SLURM_TASKS_PER_NODE='8(x4)' cannot be read for this node, "
                                   "so it is not used for the count of local ranks");
    /* A local rank past the count: the count stands, the index is unknown. */
    clear_env(NULL);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "8", 1);
    expect_ranks(8, -1, "OMPI_COMM_WORLD_LOCAL_SIZE");
    assert_string_equal(warn_text(), "OMPI_COMM_WORLD_LOCAL_RANK='8' is not a local rank below "
                                   "OMPI_COMM_WORLD_LOCAL_SIZE=8; this rank's place on the node "
                                   "is taken as unknown");
}

/* Disjoint masks, masks of every CPU, partial overlap: the budget, and whether it is its own. */
static void test_share_arithmetic(void **state)
{
    static const struct {
        ferry_cpu_share_in_t in;
        int sharers, budget, bound;
    } cases[] = {
        /* mask online ignore quota ranks known */
        {{16, 16, 0, 0, 8, 0}, 8, 2, 0},  /* Unbound 8 ranks on 16: 2 each. */
        {{16, 16, 0, 0, 0, 0}, 1, 16, 0}, /* No launcher said: the whole node, as before. */
        {{16, 16, 0, 0, 1, 0}, 1, 16, 0},
        {{2, 16, 0, 0, 8, 0}, 1, 2, 1},   /* Bound, 2 each: disjoint, its own. */
        {{8, 16, 0, 0, 8, 0}, 4, 2, 0},   /* A socket of 8 each: 4 share it. */
        {{4, 16, 0, 0, 8, 0}, 2, 2, 0},
        {{2, 20, 0, 0, 8, 0}, 1, 2, 1},   /* 8 on 20 split 2 and 3: still disjoint... */
        {{3, 20, 0, 0, 8, 0}, 1, 3, 1},
        {{16, 16, 1, 0, 8, 0}, 8, 2, 0},  /* NCCL_IGNORE_CPU_AFFINITY: every CPU, every rank. */
        {{16, 16, 0, 4, 8, 0}, 8, 1, 0},  /* A quota of 4 over 8 ranks: 1 each, at least 1. */
        {{16, 16, 0, 8, 4, 0}, 4, 2, 0},
        {{2, 16, 0, 0, 64, 0}, 8, 1, 0},  /* Oversubscribed: never below 1. */
        {{4, 0, 0, 0, 8, 0}, 1, 4, 1},    /* A node of unknown size (tests): the mask is its own. */
        /* The masks compared (mask_board.h): the count replaces the estimate. */
        {{8, 16, 0, 0, 8, 1}, 1, 8, 1},  /* A socket of 8 each, but no sibling on it: its own. */
        {{2, 16, 0, 0, 8, 3}, 3, 1, 0},  /* Sized as a split, yet 3 ranks on the same 2 CPUs. */
        {{16, 16, 1, 0, 8, 2}, 8, 2, 0}, /* NCCL_IGNORE_CPU_AFFINITY sets the masks aside. */
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ferry_cpu_share_t out;

        ferry_cpu_share_compute(&cases[i].in, &out);
        if (out.sharers != cases[i].sharers || out.budget != cases[i].budget ||
            out.bound != cases[i].bound)
            fail_msg("case %zu (mask %d online %d ignore %d quota %d ranks %d): sharers %d "
                     "budget %d bound %d, expected %d %d %d", i, cases[i].in.mask,
                     cases[i].in.online, cases[i].in.ignore_mask, cases[i].in.quota_cpus,
                     cases[i].in.local_ranks, out.sharers, out.budget, out.bound,
                     cases[i].sharers, cases[i].budget, cases[i].bound);
    }
    printf("8 local ranks on 16 CPUs: unbound 2 CPUs each (shared by 8), bound to 2 each 2 "
           "(own), a socket of 8 each 2 (shared by 4)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_no_launcher, clear_env),
        cmocka_unit_test_setup(test_each_launcher, clear_env),
        cmocka_unit_test_setup(test_slurm_compressed, clear_env),
        cmocka_unit_test_setup(test_slurm_env_by_node, clear_env),
        cmocka_unit_test_setup(test_order, clear_env),
        cmocka_unit_test_setup(test_malformed_ignored, clear_env),
        cmocka_unit_test_setup(test_share_arithmetic, clear_env),
    };

    ferry_log_set(capture_log);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
