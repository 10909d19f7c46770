/*
 * The socket backend's CPU budget when several ranks of a job share a node
 * (socket/sock_config_cpus.c over core/cpu_share.c): what a rank of an
 * 8-rank job on a 16-CPU node derives unbound, bound to its own 2 CPUs,
 * bound to a shared socket, under a quota, with NCCL_IGNORE_CPU_AFFINITY and
 * with NCCL_FERRY_LOCAL_RANKS, and the INFO line that says why; then the
 * streams per connection as the process' connections grow
 * (socket/sock_config_streams.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "test_config_util.h"

#include "socket/sock_config.h"

static const char *const env_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID", "LOCAL_WORLD_SIZE",
    "LOCAL_RANK", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE",
    "SLURM_NODEID", "SLURM_LOCALID", "NCCL_FERRY_LOCAL_RANKS", "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_FERRY_STREAMS", "NCCL_FERRY_THREADS", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD",
    "NCCL_FERRY_SEND_THREADS", "NCCL_FERRY_RECV_THREADS", NULL,
};

static const ferry_cpu_quota_t no_quota;

static int clear_env(void **state)
{
    int i;

    (void)state;
    for (i = 0; env_vars[i] != NULL; i++)
        unsetenv(env_vars[i]);
    last_warn[0] = '\0';
    return 0;
}

static void load(ferry_sock_config_t *cfg, int mask, int online, const ferry_cpu_quota_t *q,
                 char *line, size_t len)
{
    assert_int_equal(ferry_sock_config_load_shape(cfg, mask, online, q), FERRY_OK);
    ferry_sock_config_lanes_line(cfg, line, len);
    printf("mask %d of %d online, %d local ranks (%s): %d CPUs, bound %d, %d streams, %d/%d "
           "helpers\n  %s\n", mask, online, cfg->local_ranks,
           cfg->local_ranks_src != NULL ? cfg->local_ranks_src : "none", cfg->ncpus,
           cfg->cpus_bound, cfg->streams, cfg->send_threads, cfg->recv_threads, line);
}

static void expect_in(const char *line, const char *want)
{
    if (strstr(line, want) == NULL)
        fail_msg("the line lacks '%s': %s", want, line);
}

/* Unbound: every rank's mask holds the node's 16 CPUs; 8 ranks share them, 2 CPUs each. */
static void test_unbound_eight_ranks(void **state)
{
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
    load(&cfg, 16, 16, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(cfg.cpu_sharers, 8);
    assert_int_equal(cfg.cpus_bound, 0);
    /* 2 CPUs that are not the rank's own: no helpers, one stream (as a 2-CPU host). */
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.recv_threads, 0);
    assert_int_equal(cfg.streams, 1);
    expect_in(line, "chosen for 2 CPUs: 16 in the affinity mask shared by 8 local ranks "
                    "(OMPI_COMM_WORLD_LOCAL_SIZE) (2 CPUs as this rank's share of CPUs other "
                    "local ranks run on too: no core for helpers)");
    /* The effective-config line names the launcher's variable in the value, for ferry-info. */
    line[0] = '\0';
    ferry_sock_config_format(&cfg, line, sizeof(line));
    expect_in(line, " cpus=2(derived) local_ranks=8:OMPI_COMM_WORLD_LOCAL_SIZE(derived)");
    setenv("NCCL_FERRY_LOCAL_RANKS", "4", 1);
    load(&cfg, 16, 16, &no_quota, line, sizeof(line));
    line[0] = '\0';
    ferry_sock_config_format(&cfg, line, sizeof(line));
    expect_in(line, " cpus=4(derived) local_ranks=4(env)");
}

/* Bound by the launcher to 2 CPUs each: disjoint, the rank's own; the 2-CPU send helper. */
static void test_bound_own_cpus(void **state)
{
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    setenv("SLURM_STEP_TASKS_PER_NODE", "8(x2)", 1);
    setenv("SLURM_NODEID", "1", 1);
    load(&cfg, 2, 16, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(cfg.cpu_sharers, 1);
    assert_int_equal(cfg.cpus_bound, 1);
    assert_int_equal(cfg.send_threads, 1);
    assert_int_equal(cfg.recv_threads, 0);
    expect_in(line, "chosen for 2 CPUs in the affinity mask, this rank's own (8 local ranks "
                    "(SLURM_STEP_TASKS_PER_NODE) split the 16 online CPUs) (2 CPUs given to this "
                    "process");
}

/* Bound to a socket of 8 shared by 4 ranks: 2 CPUs each, not its own. */
static void test_partial_overlap(void **state)
{
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    setenv("LOCAL_WORLD_SIZE", "8", 1);
    load(&cfg, 8, 16, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(cfg.cpu_sharers, 4);
    assert_int_equal(cfg.cpus_bound, 0);
    assert_int_equal(cfg.send_threads, 0);
    expect_in(line, "chosen for 2 CPUs: 8 in the affinity mask shared by an estimated 4 of the 8 "
                    "local ranks (LOCAL_WORLD_SIZE) on 16 online CPUs");
}

/* A 64-CPU node with 8 ranks unbound: 8 CPUs each, helpers; the override says 4 ranks: 16. */
static void test_large_node_and_override(void **state)
{
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    setenv("MPI_LOCALNRANKS", "8", 1);
    load(&cfg, 64, 64, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 8);
    assert_int_equal(cfg.streams, 4);
    assert_int_equal(cfg.send_threads, 4);
    expect_in(line, "chosen for 8 CPUs: 64 in the affinity mask shared by 8 local ranks "
                    "(MPI_LOCALNRANKS) (from 3 CPUs, helpers copy beside NCCL's thread)");
    setenv("NCCL_FERRY_LOCAL_RANKS", "4", 1);
    load(&cfg, 64, 64, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 16);
    expect_in(line, "chosen for 16 CPUs: 64 in the affinity mask shared by 4 local ranks "
                    "(NCCL_FERRY_LOCAL_RANKS)");
    /* One rank on the node: the whole node, in the words of before. */
    setenv("NCCL_FERRY_LOCAL_RANKS", "1", 1);
    load(&cfg, 64, 64, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 64);
    expect_in(line, "chosen for 64 CPUs in the affinity mask (from 3 CPUs");
}

/* A quota of 4 CPUs over 2 ranks of a 16-CPU mask: 2 CPUs of time each. */
static void test_quota_shared(void **state)
{
    ferry_cpu_quota_t q = {.quota_us = 400000, .period_us = 100000};
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    snprintf(q.file, sizeof(q.file), "/sys/fs/cgroup/job/cpu.max");
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    load(&cfg, 16, 16, &q, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(cfg.cpus_bound, 0);
    expect_in(line, "chosen for 2 CPUs: 4 CPUs of time (the cgroup CPU quota, 400000 us per "
                    "100000 us in /sys/fs/cgroup/job/cpu.max, caps the 16 CPUs of the affinity "
                    "mask) shared by 2 local ranks (OMPI_COMM_WORLD_LOCAL_SIZE)");
}

/* NCCL_IGNORE_CPU_AFFINITY sets the mask aside: every online CPU, shared by every local rank. */
static void test_ignore_affinity_shared(void **state)
{
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    setenv("NCCL_IGNORE_CPU_AFFINITY", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
    load(&cfg, 16, 16, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 4);
    expect_in(line, "chosen for 4 CPUs: 16 online CPUs (NCCL_IGNORE_CPU_AFFINITY=1; the affinity "
                    "mask holds 16) shared by 4 local ranks (OMPI_COMM_WORLD_LOCAL_SIZE)");
}

/* No launcher: the node's CPUs are the rank's as before (the words tests grep stay). */
static void test_no_launcher_unchanged(void **state)
{
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    load(&cfg, 16, 16, &no_quota, line, sizeof(line));
    assert_int_equal(cfg.ncpus, 16);
    assert_int_equal(cfg.cpu_sharers, 1);
    expect_in(line, "chosen for 16 CPUs in the affinity mask (from 3 CPUs");
}

/* The process' own mask and node, as init reads them: 2 local ranks halve what it had alone. */
static void test_real_mask(void **state)
{
    ferry_sock_config_t alone, shared;

    (void)state;
    assert_int_equal(ferry_sock_config_load(&alone), FERRY_OK);
    setenv("NCCL_FERRY_LOCAL_RANKS", "2", 1);
    assert_int_equal(ferry_sock_config_load(&shared), FERRY_OK);
    printf("this runner: %d of %d online CPUs in the mask; alone %d CPUs, with 2 local ranks %d "
           "(sharers %d)\n", shared.ncpus_mask, shared.ncpus_online, alone.ncpus, shared.ncpus,
           shared.cpu_sharers);
    assert_int_equal(shared.ncpus_online, (int)sysconf(_SC_NPROCESSORS_ONLN));
    assert_int_equal(alone.cpu_sharers, 1);
    if (shared.ncpus_mask >= shared.ncpus_online) {
        assert_int_equal(shared.cpu_sharers, 2);
        assert_int_equal(shared.ncpus, alone.ncpus / 2 > 0 ? alone.ncpus / 2 : 1);
        assert_int_equal(shared.cpus_bound, 0);
    }
}

/* Streams per connection: the default for a few, fewer for many; explicit settings win. */
static void test_streams_scale_with_connections(void **state)
{
    static const struct {
        int live, streams;
    } rule[] = {{0, 4}, {1, 4}, {15, 4}, {16, 3}, {20, 3}, {21, 2}, {31, 2}, {32, 1},
                {200, 1}, {100000, 1}, {-1, 4}};
    ferry_sock_config_t cfg;
    size_t i;
    int total = 0, k;

    (void)state;
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.streams, 4);
    for (i = 0; i < sizeof(rule) / sizeof(rule[0]); i++)
        if (ferry_sock_config_streams_for(&cfg, rule[i].live) != rule[i].streams)
            fail_msg("%d live connections: %d streams, expected %d", rule[i].live,
                     ferry_sock_config_streams_for(&cfg, rule[i].live), rule[i].streams);
    /* Opened one after another: at most one stream each plus 69 (budget 64) in all. */
    for (k = 0; k < 1000; k++)
        total += ferry_sock_config_streams_for(&cfg, k);
    printf("1000 connections opened one after another: %d streams (1000 + %d)\n", total,
           total - 1000);
    assert_int_equal(total, 1000 + 69);
    /* Explicit: every connection gets what was asked. */
    setenv("NCCL_FERRY_STREAMS", "8", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(ferry_sock_config_streams_for(&cfg, 500), 8);
    clear_env(NULL);
    setenv("NCCL_SOCKET_NTHREADS", "2", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "3", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(ferry_sock_config_streams_for(&cfg, 500), 6);
    clear_env(NULL);
    setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(ferry_sock_config_streams_for(&cfg, 500), 8);
    /* One CPU: one stream already, whatever the count. */
    clear_env(NULL);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 1), FERRY_OK);
    assert_int_equal(ferry_sock_config_streams_for(&cfg, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_unbound_eight_ranks, clear_env),
        cmocka_unit_test_setup(test_bound_own_cpus, clear_env),
        cmocka_unit_test_setup(test_partial_overlap, clear_env),
        cmocka_unit_test_setup(test_large_node_and_override, clear_env),
        cmocka_unit_test_setup(test_quota_shared, clear_env),
        cmocka_unit_test_setup(test_ignore_affinity_shared, clear_env),
        cmocka_unit_test_setup(test_no_launcher_unchanged, clear_env),
        cmocka_unit_test_setup(test_real_mask, clear_env),
        cmocka_unit_test_setup(test_streams_scale_with_connections, clear_env),
    };

    ferry_log_set(capture_log);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
