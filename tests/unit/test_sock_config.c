/*
 * The socket backend's configuration (socket/sock_config.c): every
 * variable's default, a value from the environment with its source, a bad
 * value with the exact WARN; NCCL's NCCL_SOCKET_NTHREADS x
 * NCCL_NSOCKS_PERTHREAD and what the CPU budget derives are in
 * test_sock_config_cpus.c.
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

static void test_every_variable_has_a_row(void **state)
{
    int i;

    (void)state;
    assert_int_equal(NSOCK_VARS, FERRY_SOCK_CFG_COUNT);
    for (i = 0; i < NSOCK_VARS; i++)
        assert_int_equal(sock_vars[i].id, i);
}

/* The default line after streams and threads (which depend on the CPUs the runner has). */
#define DEFAULT_REST " chunk=65536..1048576(default) sndbuf=-1(default) rcvbuf=-1(default) " \
                     "spin=0us(derived) inject_delay=0us(default) caller_recv_chunks=1(default) " \
                     "speed=-1Mbps(default) "                                                   \
                     "inline_max=32768(default) assist_max=-1(default) "                      \
                     "notsent_lowat=0(default) zerocopy=0/65536(default) "                    \
                     "solo_max=65536(default) rescue=100us(default) gpu_staging=0(default) epoll=0(default) " \
                     "socket_timeout=30s(default) ignore_cpu_affinity=0(default) "             \
                     "send_threads=4(derived) recv_threads=4(derived) helper_place=mask(derived) " \
                     "pool_threads=15(derived) cpus=16(derived) local_ranks=0(default)"

static void test_defaults(void **state)
{
    ferry_sock_config_t cfg;
    char line[2048];

    (void)state;
    /* 16 CPUs; test_cpu_count_chooses covers what fewer derive. */
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 16), FERRY_OK);
    assert_int_equal(cfg.socket_nthreads, 0);
    assert_int_equal(cfg.nsocks_perthread, 0);
    assert_int_equal(cfg.streams, 4);
    assert_int_equal(cfg.threads, 4);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_STREAMS], FERRY_CFG_DEFAULT);
    assert_int_equal(cfg.ncpus, 16);
    assert_int_equal(cfg.ignore_cpu_affinity, 0);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_THREADS], FERRY_CFG_DERIVED);
    assert_int_equal(cfg.chunk_min, 64 << 10);
    assert_int_equal(cfg.chunk_max, 1 << 20);
    assert_int_equal(cfg.sndbuf, -1);
    assert_int_equal(cfg.rcvbuf, -1);
    assert_int_equal(cfg.spin_us, 0); /* -1 (auto) derives 0. */
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_SPIN_US], FERRY_CFG_DERIVED);
    assert_int_equal(cfg.inject_delay_us, 0);
    assert_int_equal(cfg.speed_mbps, -1);
    assert_int_equal(cfg.inline_max, 32 << 10);
    assert_int_equal(cfg.notsent_lowat, 0);
    assert_true(cfg.assist_max == -1); /* Follows inline_max. */
    assert_int_equal(cfg.zerocopy, 0);
    assert_int_equal(cfg.zerocopy_min, 64 << 10);
    assert_int_equal(cfg.solo_max, 64 << 10);
    assert_int_equal(cfg.gpu_staging, 0);
    assert_int_equal(cfg.epoll, 0);
    assert_int_equal(cfg.socket_timeout_s, 30);
    line[0] = '\0';
    ferry_sock_config_format(&cfg, line, sizeof(line));
    assert_string_equal(line, " streams=4(default) threads=4(derived)" DEFAULT_REST);
}

/* The backend's words go after what the line already holds (the core's), space first. */
static void test_format_appends(void **state)
{
    ferry_sock_config_t cfg;
    char line[2048] = "backend=socket(env)";

    (void)state;
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    ferry_sock_config_format(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, "backend=socket(env) streams="));
    assert_non_null(strstr(line, " socket_timeout=30s(default)"));
    /* A full buffer stays a terminated string. */
    memset(line, 'x', 40);
    line[40] = '\0';
    ferry_sock_config_format(&cfg, line, 48);
    assert_int_equal(strlen(line), 47);
}

/* Each variable alone from the environment: its value, its source, the line's words. */
static void test_env_value_and_source_each(void **state)
{
    ferry_sock_config_t cfg;
    char line[2048];
    int i;

    (void)state;
    for (i = 0; i < NSOCK_VARS; i++) {
        const sock_var_case_t *c = &sock_vars[i];

        clear_env(NULL);
        setenv(c->name, c->good, 1);
        assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
        assert_int_equal(cfg.src[c->id], FERRY_CFG_ENV);
        line[0] = '\0';
        ferry_sock_config_format(&cfg, line, sizeof(line));
        if (strstr(line, c->shown) == NULL)
            fail_msg("%s=%s: the line lacks '%s': %s", c->name, c->good, c->shown, line);
    }
}

static void test_env_values_together(void **state)
{
    ferry_sock_config_t cfg;
    char line[2048];

    (void)state;
    setenv("NCCL_FERRY_ASSIST_MAX", "16K", 1);
    setenv("NCCL_FERRY_CHUNK_SIZE", "2M", 1);
    setenv("NCCL_SOCKET_MIN_TASKSIZE", "128KiB", 1);
    setenv("NCCL_FERRY_SOLO_MAX", "0", 1);
    setenv("NCCL_FERRY_SOCKET_TIMEOUT_S", "0", 1);
    setenv("NCCL_FERRY_ZEROCOPY", "1", 1);
    setenv("NCCL_FERRY_ZEROCOPY_MIN", "8K", 1);
    setenv("NCCL_FERRY_STREAMS", "3", 1);
    setenv("NCCL_FERRY_THREADS", "2", 1);
    assert_int_equal(ferry_sock_config_load_ncpus(&cfg, 8), FERRY_OK);
    assert_int_equal(cfg.socket_timeout_s, 0);
    assert_int_equal(cfg.src[FERRY_SOCK_CFG_SOCKET_TIMEOUT_S], FERRY_CFG_ENV);
    assert_int_equal(cfg.solo_max, 0);
    assert_int_equal(cfg.chunk_max, 2 << 20);
    assert_int_equal(cfg.chunk_min, 128 << 10);
    assert_true(cfg.assist_max == 16 << 10);
    assert_int_equal(cfg.zerocopy, 1);
    assert_int_equal(cfg.zerocopy_min, 8 << 10);
    line[0] = '\0';
    ferry_sock_config_format(&cfg, line, sizeof(line));
    assert_string_equal(line, " streams=3(env) threads=2(env) chunk=131072..2097152(env) "
                              "sndbuf=-1(default) rcvbuf=-1(default) spin=0us(derived) "
                              "inject_delay=0us(default) caller_recv_chunks=1(default) "
                              "speed=-1Mbps(default) "
                              "inline_max=32768(default) assist_max=16384(env) "
                              "notsent_lowat=0(default) zerocopy=1/8192(env) solo_max=0(env) "
                              "rescue=100us(default) gpu_staging=0(default) epoll=0(default) socket_timeout=0s(env) "
                              "ignore_cpu_affinity=0(default) send_threads=2(derived) "
                              "recv_threads=2(derived) helper_place=mask(derived) "
                              "pool_threads=2(derived) cpus=8(derived) local_ranks=0(default)");
    setenv("NCCL_FERRY_SOCKET_TIMEOUT_S", "3600", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.socket_timeout_s, 3600);
}

/* A bad value fails the load with "NAME='value' is not valid: expected HELP; ...". */
static void expect_bad(const char *name, const char *value, const char *help)
{
    ferry_sock_config_t cfg;

    clear_env(NULL);
    setenv(name, value, 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_ERR_USAGE);
    expect_bad_warn(name, value, help);
}

static const char *sock_help(const char *name)
{
    int i;

    for (i = 0; i < NSOCK_VARS; i++)
        if (strcmp(sock_vars[i].name, name) == 0)
            return sock_vars[i].help;
    fail_msg("no row for %s", name);
    return NULL;
}

static void test_bad_values_warn(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < NSOCK_VARS; i++)
        expect_bad(sock_vars[i].name, sock_vars[i].bad, sock_vars[i].help);
    expect_bad("NCCL_FERRY_STREAMS", "65", sock_help("NCCL_FERRY_STREAMS"));
    expect_bad("NCCL_FERRY_STREAMS", "4x", sock_help("NCCL_FERRY_STREAMS"));
    expect_bad("NCCL_FERRY_STREAMS", "1000", sock_help("NCCL_FERRY_STREAMS"));
    expect_bad("NCCL_FERRY_CHUNK_SIZE", "lots", sock_help("NCCL_FERRY_CHUNK_SIZE"));
    expect_bad("NCCL_FERRY_THREADS", "-1", sock_help("NCCL_FERRY_THREADS"));
    expect_bad("NCCL_FERRY_ZEROCOPY_MIN", "65M", sock_help("NCCL_FERRY_ZEROCOPY_MIN"));
    expect_bad("NCCL_FERRY_SOCKET_TIMEOUT_S", "-1", sock_help("NCCL_FERRY_SOCKET_TIMEOUT_S"));
    expect_bad("NCCL_FERRY_SOCKET_TIMEOUT_S", "30s", sock_help("NCCL_FERRY_SOCKET_TIMEOUT_S"));
}

/* Each value accepted, the pair contradictory: its own WARN. */
static void test_chunk_min_above_max(void **state)
{
    ferry_sock_config_t cfg;

    (void)state;
    setenv("NCCL_SOCKET_MIN_TASKSIZE", "4M", 1);
    setenv("NCCL_FERRY_CHUNK_SIZE", "1M", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_ERR_USAGE);
    assert_non_null(strstr(last_warn, "NCCL_SOCKET_MIN_TASKSIZE=4194304 is larger than "
                                      "NCCL_FERRY_CHUNK_SIZE=1048576; make the minimum no "
                                      "larger than the maximum"));
    setenv("NCCL_SOCKET_MIN_TASKSIZE", "1M", 1);
    assert_int_equal(ferry_sock_config_load(&cfg), FERRY_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_every_variable_has_a_row, clear_env),
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_format_appends, clear_env),
        cmocka_unit_test_setup(test_env_value_and_source_each, clear_env),
        cmocka_unit_test_setup(test_env_values_together, clear_env),
        cmocka_unit_test_setup(test_bad_values_warn, clear_env),
        cmocka_unit_test_setup(test_chunk_min_above_max, clear_env),
    };

    ferry_log_set(capture_log);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
