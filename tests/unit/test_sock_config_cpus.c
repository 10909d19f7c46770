/*
 * What the socket backend derives from the CPUs a process has
 * (socket/sock_config_cpus.c): NCCL's NCCL_SOCKET_NTHREADS x
 * NCCL_NSOCKS_PERTHREAD, ferry's own streams and helper threads by CPU count
 * (one CPU, two a launcher gave, a 2-CPU host's, more), each side's helpers,
 * the pool, the placement, a lone comm's sends, explicit settings winning, a
 * cgroup quota and the ranks that share a node.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "test_sock_config_util.h"

#include "core/log.h"

/* NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD is honoured, product capped at 64. */
static void test_nccl_threads_times_socks(void **state)
{
    ferry_sock_config_t cfg;

    (void)state;
    setenv("NCCL_SOCKET_NTHREADS", "2", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "3", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 6);
    assert_int_equal(cfg.threads, 2);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_STREAMS], FERRY_CFG_DERIVED);

    setenv("NCCL_SOCKET_NTHREADS", "16", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "8", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 64);
    assert_int_equal(cfg.threads, 16);

    /*
     * Only NSOCKS set: NCCL would ignore it; ferry uses its default thread
     * count (none on one or two CPUs, test_cpu_count_chooses).
     */
    unsetenv("NCCL_SOCKET_NTHREADS");
    setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.streams, 8);
    assert_int_equal(cfg.threads, 4);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.streams, 8);
    assert_int_equal(cfg.threads, 0);

    /* ferry's own variables win over NCCL's. */
    setenv("NCCL_FERRY_STREAMS", "5", 1);
    setenv("NCCL_FERRY_THREADS", "2", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 5);
    assert_int_equal(cfg.threads, 2);
}

static void test_threads_never_exceed_streams(void **state)
{
    ferry_sock_config_t cfg;

    (void)state;
    setenv("NCCL_FERRY_STREAMS", "2", 1);
    setenv("NCCL_FERRY_THREADS", "8", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 2);
    assert_int_equal(cfg.threads, 2);
}

/*
 * A process bound to one CPU: no helper threads, and one stream unless the
 * user asked for more (NCCL's thread polls every stream on every call).
 */
static void test_one_cpu(void **state)
{
    ferry_sock_config_t cfg;
    cpu_set_t all, one;

    (void)state;
    assert_int_equal(sched_getaffinity(0, sizeof(all), &all), 0);
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_THREADS], FERRY_CFG_DERIVED);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_STREAMS], FERRY_CFG_DERIVED);
    setenv("NCCL_FERRY_STREAMS", "2", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(cfg.streams, 2);
    /* Helpers asked for anyway: honoured, with a WARN that says what it costs and what to do. */
    last_warn[0] = '\0';
    setenv("NCCL_FERRY_THREADS", "2", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.threads, 2);
    assert_non_null(strstr(last_warn, "2 helper threads per connection (NCCL_FERRY_THREADS) in a "
                                      "process bound to one CPU: they take turns with NCCL's own "
                                      "thread for that CPU, which measured slower than no helpers; "
                                      "unset it, or give each rank more CPUs (mpirun --bind-to "
                                      "none, or --map-by slot:PE=N)"));
    unsetenv("NCCL_FERRY_THREADS");
    last_warn[0] = '\0';
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(last_warn[0], '\0'); /* The default (no helpers) says nothing. */
    /* NCCL_SOCKET_NTHREADS asks for helpers: the WARN names it. */
    unsetenv("NCCL_FERRY_STREAMS");
    setenv("NCCL_SOCKET_NTHREADS", "2", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.threads, 2);
    assert_non_null(strstr(last_warn, "2 helper threads per connection (NCCL_SOCKET_NTHREADS) in "
                                      "a process bound to one CPU"));
    unsetenv("NCCL_SOCKET_NTHREADS");
    last_warn[0] = '\0';
    /* NCCL_NSOCKS_PERTHREAD alone: its sockets, but no helpers on the lone CPU. */
    setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 8);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(last_warn[0], '\0');
    unsetenv("NCCL_NSOCKS_PERTHREAD");
    assert_int_equal(sched_setaffinity(0, sizeof(all), &all), 0);
    if (CPU_COUNT(&all) > 2) {
        assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
        assert_int_equal(cfg.streams, 4);
        assert_true(cfg.threads > 0);
    }
}

/* One row per mask size: what the defaults become, and the line's reason. */
typedef struct cpu_case {
    int         ncpus;
    int         streams, threads, send, recv, place;
    const char *line;
} cpu_case_t;

static const cpu_case_t cpu_cases[] = {
    {1, 1, 0, 0, 0, FERRY_SOCK_PLACE_MASK,
     "socket backend: 1 stream, no helper threads (NCCL's thread moves every byte) per "
     "connection, chosen for 1 CPU in the affinity mask (1 CPU leaves no core for helpers: "
     "measured faster without them under mpirun)"},
    {2, 1, 0, 1, 0, FERRY_SOCK_PLACE_AWAY,
     "socket backend: 1 stream, 1 helper thread for sends and 0 for receives per connection, "
     "chosen for 2 CPUs in the affinity mask (2 CPUs given to this process: NCCL's thread moves "
     "the receives, and each send comm's helper runs off that thread's CPU, on the core the "
     "application's waiting thread yields); one pool of 1 helper thread serves every "
     "connection, the sends' helper"},
    {4, 4, 4, 4, 4, FERRY_SOCK_PLACE_MASK,
     "socket backend: 4 streams, 4 helper threads per connection, chosen for 4 CPUs in "
     "the affinity mask (from 3 CPUs, helpers copy beside NCCL's thread); one pool of 3 helper "
     "threads serves every connection, one per CPU of the budget but NCCL's thread's, at most "
     "16"},
    {16, 4, 4, 4, 4, FERRY_SOCK_PLACE_MASK,
     "socket backend: 4 streams, 4 helper threads per connection, chosen for 16 CPUs "
     "in the affinity mask (from 3 CPUs, helpers copy beside NCCL's thread); one pool of 15 "
     "helper threads serves every connection, one per CPU of the budget but NCCL's thread's, at "
     "most 16"},
};

/* The CPU count (injected, as the mask would give it) chooses streams and threads. */
static void test_cpu_count_chooses(void **state)
{
    ferry_sock_config_t cfg;
    char line[512];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cpu_cases) / sizeof(cpu_cases[0]); i++) {
        const cpu_case_t *c = &cpu_cases[i];

        last_warn[0] = '\0';
        assert_int_equal(ferry_sock_config_load_ncpus(&cfg, c->ncpus), FERRY_OK);
        assert_int_equal(cfg.ncpus, c->ncpus);
        assert_int_equal(cfg.streams, c->streams);
        assert_int_equal(cfg.threads, c->threads);
        assert_int_equal(cfg.src[FERRY_SOCK_CFG_THREADS], FERRY_CFG_DERIVED);
        assert_int_equal(cfg.send_threads, c->send);
        assert_int_equal(cfg.recv_threads, c->recv);
        assert_int_equal(cfg.helper_place, c->place);
        assert_int_equal(cfg.src[FERRY_SOCK_CFG_HELPER_PLACE], FERRY_CFG_DERIVED);
        assert_int_equal(last_warn[0], '\0');
        ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
        assert_string_equal(line, c->line);
    }
}

/*
 * Two CPUs that are the whole host's (a 2-CPU machine, no binding): shared with
 * every other process there, so no helpers at all, as before the send helpers.
 */
static void test_two_cpus_whole_host(void **state)
{
    ferry_sock_config_t cfg;
    char line[512];

    (void)state;
    assert_int_equal(ferry_sock_config_load_host_cpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.cpus_bound, 0);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.recv_threads, 0);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_MASK);
    assert_int_equal(cfg.solo_max, 64 << 10); /* No send helper: a lone comm's sends stay solo. */
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_SOLO_MAX], FERRY_CFG_DEFAULT);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_string_equal(line, "socket backend: 1 stream, no helper threads (NCCL's thread moves "
                              "every byte) per connection, chosen for 2 CPUs in the affinity mask "
                              "(2 CPUs that are the whole host's, shared with its other "
                              "processes: no core for helpers)");
    /* Asked for, the send helper is there all the same. */
    setenv("NCCL_FERRY_SEND_THREADS", "1", 1);
    assert_int_equal(ferry_sock_config_load_host_cpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.send_threads, 1);
    assert_int_equal(cfg.recv_threads, 0);
}

/* One side's helper count wins for that side; the other follows the CPUs' choice. */
static void test_side_threads(void **state)
{
    ferry_sock_config_t cfg;
    char line[512];

    (void)state;
    /* 2 CPUs: one send helper by default; NCCL_FERRY_SEND_THREADS=0 takes it away. */
    setenv("NCCL_FERRY_SEND_THREADS", "0", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_SEND_THREADS], FERRY_CFG_ENV);
    assert_int_equal(cfg.recv_threads, 0);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_RECV_THREADS], FERRY_CFG_DERIVED);
    assert_int_equal(cfg.solo_max, 64 << 10); /* No send helper: solo as on any budget. */
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_string_equal(line, "socket backend: 1 stream, no helper threads (NCCL's thread moves "
                              "every byte) per connection, set by NCCL_FERRY_SEND_THREADS "
                              "(explicit settings win; the default for 2 CPUs in the affinity "
                              "mask would be 1 stream, 1 helper thread for sends and 0 for "
                              "receives)");
    /* 2 CPUs, a receive helper asked for: the send side keeps the CPUs' choice. */
    clear_env(NULL);
    setenv("NCCL_FERRY_RECV_THREADS", "1", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.send_threads, 1);
    assert_int_equal(cfg.recv_threads, 1);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_AWAY);
    /* The send helper's mode: a lone comm's sends go to the helper, not to NCCL's thread. */
    assert_int_equal(cfg.solo_max, 0);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_SOLO_MAX], FERRY_CFG_DERIVED);
    setenv("NCCL_FERRY_SOLO_MAX", "128K", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.solo_max, 128 << 10);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_SOLO_MAX], FERRY_CFG_ENV);
    /* Helpers chosen by NCCL_FERRY_THREADS: both sides follow it, no extra send helper. */
    clear_env(NULL);
    setenv("NCCL_FERRY_THREADS", "0", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.recv_threads, 0);
    /* 3 CPUs and more: the placement is the mask's unless asked. */
    clear_env(NULL);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 3), FERRY_OK);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_MASK);
    setenv("NCCL_FERRY_HELPER_PLACE", "away", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 3), FERRY_OK);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_AWAY);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_HELPER_PLACE], FERRY_CFG_ENV);
    clear_env(NULL);
    setenv("NCCL_FERRY_HELPER_PLACE", "mask", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_MASK);
    /* 16 CPUs: 4 streams; send comms without helpers, receive comms capped at the streams. */
    clear_env(NULL);
    setenv("NCCL_FERRY_SEND_THREADS", "0", 1);
    setenv("NCCL_FERRY_RECV_THREADS", "9", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.streams, 4);
    assert_int_equal(cfg.threads, 4);
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.recv_threads, 4);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, "4 streams, 0 helper threads for sends and 4 for receives per "
                                 "connection, set by NCCL_FERRY_SEND_THREADS and "
                                 "NCCL_FERRY_RECV_THREADS"));
    /* One side's helpers on one CPU get the same WARN, naming the side's variable. */
    clear_env(NULL);
    last_warn[0] = '\0';
    setenv("NCCL_FERRY_RECV_THREADS", "1", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 1), FERRY_OK);
    assert_int_equal(cfg.recv_threads, 1);
    assert_non_null(strstr(last_warn, "1 helper threads per connection (NCCL_FERRY_RECV_THREADS) "
                                      "in a process bound to one CPU"));
    /* Placement is a word; anything else is refused with the words accepted. */
    clear_env(NULL);
    setenv("NCCL_FERRY_HELPER_PLACE", "AWAY", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_AWAY);
}

/* Explicit settings win over the CPU-based choice, for every mask size; the line says so. */
/*
 * The helper pool's size: NCCL_FERRY_POOL_THREADS when set; else the largest
 * per-connection setting where one was made; else the CPU budget (none on
 * one or two CPUs but the send helper of two a launcher gave; from three,
 * one per CPU but one, at most 16).
 */
static void test_pool_threads_sizing(void **state)
{
    static const struct { int ncpus, pool; } budget[] = {{1, 0}, {2, 1}, {3, 2}, {4, 3}, {16, 15},
                                                         {17, 16}, {64, 16}};
    ferry_sock_config_t cfg;
    char line[1024];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(budget) / sizeof(budget[0]); i++) {
        clear_env(NULL);
        assert_int_equal(ferry_sock_config_load_ncpus(&cfg, budget[i].ncpus), FERRY_OK);
        assert_int_equal(cfg.pool_threads, budget[i].pool);
        assert_int_equal(cfg.src[FERRY_SOCK_CFG_POOL_THREADS], FERRY_CFG_DERIVED);
    }
    /* Two CPUs that are the whole host's: no helpers, no pool. */
    clear_env(NULL);
    assert_int_equal(ferry_sock_config_load_host_cpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.pool_threads, 0);

    setenv("NCCL_FERRY_POOL_THREADS", "5", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.pool_threads, 5);
    assert_int_equal(cfg.send_threads, 4); /* Per connection: unchanged. */
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, "chosen for 16 CPUs in the affinity mask"));
    assert_non_null(strstr(line, "; one pool of 5 helper threads serves every connection, set "
                                 "by NCCL_FERRY_POOL_THREADS"));

    clear_env(NULL);
    setenv("NCCL_FERRY_STREAMS", "8", 1);
    setenv("NCCL_FERRY_SEND_THREADS", "2", 1);
    setenv("NCCL_FERRY_RECV_THREADS", "6", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.pool_threads, 6);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, "; one pool of 6 helper threads serves every connection, the "
                                 "largest per-connection setting"));

    clear_env(NULL);
    setenv("NCCL_SOCKET_NTHREADS", "3", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.pool_threads, 3);
    clear_env(NULL);
}

static void test_cpu_count_explicit_wins(void **state)
{
    static const int counts[] = {1, 2, 4, 16};
    ferry_sock_config_t cfg;
    char line[512];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        clear_env(NULL);
        setenv("NCCL_FERRY_THREADS", "3", 1);
        assert_int_equal(ferry_sock_config_load_ncpus(&cfg, counts[i]), FERRY_OK);
        assert_int_equal(cfg.threads, 3);
        assert_int_equal(cfg.streams, 4);
        assert_int_equal(cfg.src[FERRY_SOCK_CFG_THREADS], FERRY_CFG_ENV);
        ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
        assert_non_null(strstr(line, "4 streams, 3 helper threads per connection, set by "
                                     "NCCL_FERRY_THREADS (explicit settings win; the default "));

        clear_env(NULL);
        setenv("NCCL_FERRY_STREAMS", "2", 1);
        assert_int_equal(ferry_sock_config_load_ncpus(&cfg, counts[i]), FERRY_OK);
        assert_int_equal(cfg.streams, 2);
        assert_int_equal(cfg.threads, counts[i] <= 2 ? 0 : 2);

        clear_env(NULL);
        setenv("NCCL_FERRY_THREADS", "0", 1);
        assert_int_equal(ferry_sock_config_load_ncpus(&cfg, counts[i]), FERRY_OK);
        assert_int_equal(cfg.threads, 0);
        assert_int_equal(cfg.streams, 1);

        clear_env(NULL);
        setenv("NCCL_SOCKET_NTHREADS", "2", 1);
        setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
        assert_int_equal(ferry_sock_config_load_ncpus(&cfg, counts[i]), FERRY_OK);
        assert_int_equal(cfg.threads, 2);
        assert_int_equal(cfg.streams, 4);
        ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
        assert_non_null(strstr(line, "set by NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD"));
    }
    /* The line names what the CPUs alone would have chosen. */
    clear_env(NULL);
    setenv("NCCL_FERRY_THREADS", "4", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_string_equal(line, "socket backend: 4 streams, 4 helper threads per connection, set "
                              "by NCCL_FERRY_THREADS (explicit settings win; the default for 2 "
                              "CPUs in the affinity mask would be 1 stream, 1 helper thread for "
                              "sends and 0 for receives); one pool of 4 helper threads serves "
                              "every connection, the largest per-connection setting");
    assert_int_equal(cfg.pool_threads, 4);
}

/*
 * NCCL_IGNORE_CPU_AFFINITY=1: every online CPU counts, whatever the mask
 * (here the mask is cut to one CPU, as test_one_cpu does).
 */
static void test_ignore_cpu_affinity(void **state)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    ferry_sock_config_t cfg;
    ferry_cpu_quota_t quota;
    cpu_set_t all, one;
    char line[512];
    int mask, bound, budget;

    (void)state;
    /* A runner in a container with a CPU limit: the quota caps what the load derives. */
    (void)ferry_cpu_quota_read("", &quota);
    budget = ferry_cpu_quota_cpus(&quota) > 0 && ferry_cpu_quota_cpus(&quota) < online
                 ? ferry_cpu_quota_cpus(&quota)
                 : (int)online;
    assert_int_equal(sched_getaffinity(0, sizeof(all), &all), 0);
    assert_int_equal(ferry_sock_config_cpus(0, &mask, &bound), CPU_COUNT(&all));
    assert_int_equal(mask, CPU_COUNT(&all));
    assert_int_equal(bound, CPU_COUNT(&all) < online);
    assert_int_equal(ferry_sock_config_cpus(1, &mask, &bound), (int)online);
    assert_int_equal(bound, 0);
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.ncpus, 1);
    assert_int_equal(cfg.cpus_bound, online > 1);
    assert_int_equal(cfg.threads, 0);
    setenv("NCCL_IGNORE_CPU_AFFINITY", "1", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.ncpus, budget);
    assert_int_equal(cfg.ncpus_mask, 1);
    assert_int_equal(cfg.threads, budget > 2 ? 4 : 0);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    if (budget == online)
        assert_non_null(strstr(line, "online CPUs (NCCL_IGNORE_CPU_AFFINITY=1; the affinity "
                                     "mask holds 1)"));
    else
        assert_non_null(strstr(line, "online CPUs NCCL_IGNORE_CPU_AFFINITY counts)"));
    assert_int_equal(sched_setaffinity(0, sizeof(all), &all), 0);
}

/*
 * A cgroup CPU quota (a container's CPU limit) caps the CPUs the mask holds:
 * the defaults are those of the CPUs it pays for, and the line says so.
 */
static void test_cpu_quota_caps(void **state)
{
    ferry_cpu_quota_t quota = {.quota_us = 150000, .period_us = 100000,
                               .file = "/sys/fs/cgroup/cpu.max"};
    ferry_sock_config_t cfg;
    char line[512];

    (void)state;
    /* 16 CPUs in the mask, 1.5 CPUs of time: one CPU's defaults, no helpers. */
    assert_int_equal(ferry_sock_config_load_quota(&cfg, 16, 0, &quota), FERRY_OK);
    assert_int_equal(cfg.ncpus, 1);
    assert_int_equal(ferry_cpu_quota_cpus(&cfg.quota), 1);
    assert_int_equal(cfg.ncpus_given, 16);
    assert_int_equal(cfg.cpus_bound, 0);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.recv_threads, 0);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_string_equal(line, "socket backend: 1 stream, no helper threads (NCCL's thread moves "
                              "every byte) per connection, chosen for 1 CPU of time (the cgroup "
                              "CPU quota, 150000 us per 100000 us in /sys/fs/cgroup/cpu.max, caps "
                              "the 16 CPUs of the affinity mask) (1 CPU leaves no core for "
                              "helpers: measured faster without them under mpirun)");
    /*
     * Two CPUs of time, on a mask of 16 or of 2 a launcher gave: time, not
     * cores of its own, so no send helper (a waiting thread spends the limit).
     */
    quota.quota_us = 200000;
    assert_int_equal(ferry_sock_config_load_quota(&cfg, 16, 0, &quota), FERRY_OK);
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(cfg.cpus_bound, 0);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.recv_threads, 0);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_MASK);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_string_equal(line, "socket backend: 1 stream, no helper threads (NCCL's thread moves "
                              "every byte) per connection, chosen for 2 CPUs of time (the cgroup "
                              "CPU quota, 200000 us per 100000 us in /sys/fs/cgroup/cpu.max, caps "
                              "the 16 CPUs of the affinity mask) (2 CPUs of time under a CPU "
                              "limit: an application thread that waits by yielding spends the "
                              "limit too, so a helper would push the process past it)");
    /* A 2-CPU mask under a 2-CPU limit: the limit caps nothing, the mask's send helper stays. */
    assert_int_equal(ferry_sock_config_load_quota(&cfg, 2, 1, &quota), FERRY_OK);
    assert_int_equal(cfg.cpus_bound, 1);
    assert_int_equal(cfg.send_threads, 1);
    assert_int_equal(cfg.helper_place, FERRY_SOCK_PLACE_AWAY);
    /* Three: the per-stream helpers, as for a mask of three. */
    quota.quota_us = 390000;
    assert_int_equal(ferry_sock_config_load_quota(&cfg, 16, 0, &quota), FERRY_OK);
    assert_int_equal(cfg.ncpus, 3);
    assert_int_equal(cfg.streams, 4);
    assert_int_equal(cfg.threads, 4);
    /* A quota above the mask changes nothing, and the line does not name it. */
    quota.quota_us = 2000000;
    assert_int_equal(ferry_sock_config_load_quota(&cfg, 2, 1, &quota), FERRY_OK);
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(ferry_cpu_quota_cpus(&cfg.quota), 20);
    assert_int_equal(cfg.send_threads, 1);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_null(strstr(line, "quota"));
    assert_non_null(strstr(line, "chosen for 2 CPUs in the affinity mask"));
    /* Explicit settings still win, and the line names the quota as the default's budget. */
    quota.quota_us = 100000;
    setenv("NCCL_FERRY_THREADS", "4", 1);
    assert_int_equal(ferry_sock_config_load_quota(&cfg, 16, 0, &quota), FERRY_OK);
    assert_int_equal(cfg.threads, 4);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, "set by NCCL_FERRY_THREADS (explicit settings win; the default "
                                 "for 1 CPU of time (the cgroup CPU quota, 100000 us per 100000 us "
                                 "in /sys/fs/cgroup/cpu.max, caps the 16 CPUs of the affinity "
                                 "mask) would be 1 stream, no helper threads"));
    assert_non_null(strstr(last_warn, "4 helper threads per connection (NCCL_FERRY_THREADS) in "
                                      "a process with one CPU of time (the cgroup CPU quota in "
                                      "/sys/fs/cgroup/cpu.max): they take turns with NCCL's own "
                                      "thread for that CPU"));
    assert_non_null(strstr(last_warn, "give each rank more CPUs (a CPU limit of 2 or more for "
                                      "the container or job)"));
}

/*
 * Eight ranks of a job on a 16-CPU node, none bound: each sees the node's
 * every CPU, and owns an eighth of them. Before, each sized its streams and
 * helpers for all 16 (4 and 4 per connection, eight times over).
 */
static void test_local_ranks_share_node(void **state)
{
    ferry_sock_config_t cfg;
    char line[1024];

    (void)state;
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
    assert_int_equal(ferry_sock_config_load_host_cpus(&cfg, 16), FERRY_OK);
    ferry_sock_config_lanes_line(&cfg, line, sizeof(line));
    printf("8 local ranks, unbound on 16 CPUs: %d CPUs, %d stream(s), %d/%d helpers\n  %s\n",
           cfg.ncpus, cfg.streams, cfg.send_threads, cfg.recv_threads, line);
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(cfg.cpus_bound, 0);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.send_threads, 0);
    assert_int_equal(cfg.recv_threads, 0);
    assert_non_null(strstr(line, "chosen for 2 CPUs: 16 in the affinity mask shared by 8 local "
                                 "ranks (OMPI_COMM_WORLD_LOCAL_SIZE)"));
    /* Bound to 2 each by the launcher: the rank's own 2, as before. */
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(cfg.cpus_bound, 1);
    assert_int_equal(cfg.send_threads, 1);
}


/*
 * The hint for ranks bound to 2 CPUs beside other local ranks: the tuner
 * setting that ferry cannot switch on by itself, named only where it
 * applies and while nobody set it.
 */
static void test_step_hint(void **state)
{
    ferry_sock_config_t cfg;
    ferry_config_t core;
    char line[1024];

    (void)state;
    memset(&core, 0, sizeof(core));
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(ferry_sock_config_step_hint(&cfg, &core, 1, line, sizeof(line)), 1);
    printf("8 local ranks bound to 2 CPUs each:\n  %s\n", line);
    assert_non_null(strstr(line, "this rank runs on 2 CPUs a launcher gave it, beside 7 other "
                                 "local ranks; if every rank of the job is bound alike, "
                                 "NCCL_FERRY_TUNER_STEP_BYTES=128K on all of them"));
    assert_non_null(strstr(line, "wait for each other for ever"));

    /* Not while the tuner is not consulted, nor once the setting is given (0 too). */
    assert_int_equal(ferry_sock_config_step_hint(&cfg, &core, 0, line, sizeof(line)), 0);
    assert_string_equal(line, "");
    core.src[FERRY_CFG_TUNER_STEP_BYTES] = FERRY_CFG_ENV;
    assert_int_equal(ferry_sock_config_step_hint(&cfg, &core, 1, line, sizeof(line)), 0);
    assert_string_equal(line, "");
    core.src[FERRY_CFG_TUNER_STEP_BYTES] = FERRY_CFG_DEFAULT;

    /* Unbound on 16 CPUs shared by the 8: no helper, so no hint. */
    assert_int_equal(ferry_sock_config_load_host_cpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.ncpus, 2);
    assert_int_equal(ferry_sock_config_step_hint(&cfg, &core, 1, line, sizeof(line)), 0);

    /* Bound to 4: more than the mode it is for. */
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 4), FERRY_OK);
    assert_int_equal(ferry_sock_config_step_hint(&cfg, &core, 1, line, sizeof(line)), 0);

    /* One other local rank: the singular. No launcher variable: no hint (alone on the node). */
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(ferry_sock_config_step_hint(&cfg, &core, 1, line, sizeof(line)), 1);
    assert_non_null(strstr(line, "beside 1 other local rank; "));
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 2), FERRY_OK);
    assert_int_equal(cfg.send_threads, 1);
    assert_int_equal(ferry_sock_config_step_hint(&cfg, &core, 1, line, sizeof(line)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_nccl_threads_times_socks, clear_env),
        cmocka_unit_test_setup(test_threads_never_exceed_streams, clear_env),
        cmocka_unit_test_setup(test_one_cpu, clear_env),
        cmocka_unit_test_setup(test_cpu_count_chooses, clear_env),
        cmocka_unit_test_setup(test_pool_threads_sizing, clear_env),
        cmocka_unit_test_setup(test_cpu_count_explicit_wins, clear_env),
        cmocka_unit_test_setup(test_side_threads, clear_env),
        cmocka_unit_test_setup(test_two_cpus_whole_host, clear_env),
        cmocka_unit_test_setup(test_ignore_cpu_affinity, clear_env),
        cmocka_unit_test_setup(test_cpu_quota_caps, clear_env),
        cmocka_unit_test_setup(test_local_ranks_share_node, clear_env),
        cmocka_unit_test_setup(test_step_hint, clear_env),
    };

    ferry_log_set(capture_log);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
