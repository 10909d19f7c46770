/* Configuration parsing: defaults, NCCL's variables, ferry's own, and bad input. */
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "core/config.h"
#include "core/log.h"

/* The last WARN ferry logged, to check messages by content. */
static char last_warn[512];
__attribute__((format(printf, 5, 6)))
static void capture_log(int level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    va_list ap;

    (void)flags;
    (void)file;
    (void)line;
    if (level != FERRY_LOG_WARN)
        return;
    va_start(ap, fmt);
    vsnprintf(last_warn, sizeof(last_warn), fmt, ap);
    va_end(ap);
}

static const char *const vars[] = {
    "NCCL_FERRY_BACKEND", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_NTHREADS",
    "NCCL_NSOCKS_PERTHREAD", "NCCL_FERRY_STREAMS", "NCCL_FERRY_THREADS",
    "NCCL_SOCKET_MIN_TASKSIZE", "NCCL_FERRY_CHUNK_SIZE", "NCCL_SOCKET_SNDBUF",
    "NCCL_SOCKET_RCVBUF", "NCCL_SOCKET_RETRY_CNT", "NCCL_SOCKET_RETRY_SLEEP_MSEC",
    "NCCL_FERRY_HELLO_TIMEOUT_MS", "NCCL_FERRY_DUMP_SIGNAL", "NCCL_FERRY_INLINE_MAX",
    "NCCL_FERRY_ASSIST_MAX", "NCCL_FERRY_TUNER", "NCCL_FERRY_TUNER_LL_BW",
    "NCCL_FERRY_TUNER_CHANNEL_BYTES", "NCCL_FERRY_ZEROCOPY", "NCCL_FERRY_ZEROCOPY_MIN",
    "NCCL_FERRY_SOLO_MAX", "NCCL_FERRY_STALL_WARN_S", "NCCL_FERRY_SOCKET_TIMEOUT_S",
};

/* The suite may run bound to one CPU (a small container): defaults then differ. */
static int runner_has_one_cpu(void)
{
    cpu_set_t set;

    return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1;
}

static int clear_env(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    return 0;
}

static void test_defaults(void **state)
{
    ferry_config_t cfg;
    char line[2048];

    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.backend, FERRY_BACKEND_AUTO);
    assert_string_equal(cfg.socket_ifname, "");
    assert_int_equal(cfg.socket_family, AF_UNSPEC);
    if (runner_has_one_cpu()) { /* test_one_cpu covers what a one-CPU process derives. */
        assert_int_equal(cfg.streams, 1);
        assert_int_equal(cfg.threads, 0);
    } else {
        assert_int_equal(cfg.streams, 4);
        assert_int_equal(cfg.threads, 4);
    }
    assert_int_equal(cfg.chunk_min, 64 << 10);
    assert_int_equal(cfg.chunk_max, 1 << 20);
    assert_int_equal(cfg.sndbuf, -1);
    assert_int_equal(cfg.retry_cnt, 34);
    assert_int_equal(cfg.dump_signal, 0);
    assert_int_equal(cfg.inline_max, 32 << 10);
    assert_true(cfg.assist_max == -1); /* Follows inline_max. */
    assert_int_equal(cfg.tuner, 1);
    assert_int_equal(cfg.zerocopy, 0);
    assert_int_equal(cfg.zerocopy_min, 64 << 10);
    assert_int_equal(cfg.tuner_ll_bw, 1000);
    assert_int_equal(cfg.tuner_channel_bytes, 2 << 20);
    assert_int_equal(cfg.solo_max, 64 << 10);
    assert_int_equal(cfg.stall_warn_s, 60);
    assert_int_equal(cfg.socket_timeout_s, 30);
    ferry_config_format(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, "tuner=1(default)"));
    assert_non_null(strstr(line, "socket_timeout=30s(default)"));
    assert_non_null(strstr(line, "stall_warn=60s(default)"));
    assert_non_null(strstr(line, "backend=auto(default)"));
    if (!runner_has_one_cpu()) {
        assert_int_equal(cfg.src[FERRY_CFG_STREAMS], FERRY_CFG_DEFAULT);
        assert_non_null(strstr(line, "streams=4(default)"));
    }
}

static void test_env_values_and_sources(void **state)
{
    ferry_config_t cfg;
    char line[2048];

    setenv("NCCL_FERRY_BACKEND", "Socket", 1);
    setenv("NCCL_FERRY_ASSIST_MAX", "16K", 1);
    setenv("NCCL_FERRY_TUNER", "0", 1);
    setenv("NCCL_FERRY_TUNER_LL_BW", "2500", 1);
    setenv("NCCL_FERRY_TUNER_CHANNEL_BYTES", "0", 1);
    setenv("NCCL_SOCKET_IFNAME", "^docker,lo", 1);
    setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
    setenv("NCCL_FERRY_CHUNK_SIZE", "2M", 1);
    setenv("NCCL_SOCKET_MIN_TASKSIZE", "128KiB", 1);
    setenv("NCCL_FERRY_DUMP_SIGNAL", "SIGUSR2", 1);
    setenv("NCCL_FERRY_SOLO_MAX", "0", 1);
    setenv("NCCL_FERRY_STALL_WARN_S", "0", 1);
    setenv("NCCL_FERRY_SOCKET_TIMEOUT_S", "0", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.stall_warn_s, 0);
    assert_int_equal(cfg.socket_timeout_s, 0);
    assert_int_equal(cfg.src[FERRY_CFG_SOCKET_TIMEOUT_S], FERRY_CFG_ENV);
    assert_int_equal(cfg.backend, FERRY_BACKEND_SOCKET);
    assert_int_equal(cfg.solo_max, 0);
    assert_string_equal(cfg.socket_ifname, "^docker,lo");
    assert_int_equal(cfg.socket_family, AF_INET6);
    assert_int_equal(cfg.chunk_max, 2 << 20);
    assert_int_equal(cfg.chunk_min, 128 << 10);
    assert_int_equal(cfg.dump_signal, SIGUSR2);
    assert_true(cfg.assist_max == 16 << 10);
    assert_int_equal(cfg.tuner, 0);
    assert_int_equal(cfg.tuner_ll_bw, 2500);
    assert_int_equal(cfg.tuner_channel_bytes, 0);
    ferry_config_format(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, "tuner=0(env)"));
    assert_non_null(strstr(line, "tuner_ll_bw=2500MB/s(env)"));
    assert_non_null(strstr(line, "assist_max=16384(env)"));
    assert_non_null(strstr(line, "backend=socket(env)"));
    assert_non_null(strstr(line, "ifname=^docker,lo(env)"));
    assert_non_null(strstr(line, "solo_max=0(env)"));
    assert_non_null(strstr(line, "stall_warn=0s(env)"));
    assert_non_null(strstr(line, "socket_timeout=0s(env)"));
    setenv("NCCL_FERRY_SOCKET_TIMEOUT_S", "3600", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.socket_timeout_s, 3600);
}

/* NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD is honoured, product capped at 64. */
static void test_nccl_threads_times_socks(void **state)
{
    ferry_config_t cfg;

    setenv("NCCL_SOCKET_NTHREADS", "2", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "3", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 6);
    assert_int_equal(cfg.threads, 2);
    assert_int_equal(cfg.src[FERRY_CFG_STREAMS], FERRY_CFG_DERIVED);

    setenv("NCCL_SOCKET_NTHREADS", "16", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "8", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 64);
    assert_int_equal(cfg.threads, 16);

    /*
     * Only NSOCKS set: NCCL would ignore it; ferry uses its default thread
     * count (none on a one-CPU runner, test_one_cpu).
     */
    unsetenv("NCCL_SOCKET_NTHREADS");
    setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 8);
    assert_int_equal(cfg.threads, runner_has_one_cpu() ? 0 : 4);

    /* ferry's own variables win over NCCL's. */
    setenv("NCCL_FERRY_STREAMS", "5", 1);
    setenv("NCCL_FERRY_THREADS", "2", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 5);
    assert_int_equal(cfg.threads, 2);
}

static void test_threads_never_exceed_streams(void **state)
{
    ferry_config_t cfg;

    setenv("NCCL_FERRY_STREAMS", "2", 1);
    setenv("NCCL_FERRY_THREADS", "8", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 2);
    assert_int_equal(cfg.threads, 2);
}

static void expect_bad(const char *name, const char *value)
{
    ferry_config_t cfg;

    clear_env(NULL);
    setenv(name, value, 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_ERR_USAGE);
}

/*
 * A process bound to one CPU: no helper threads, and one stream unless the
 * user asked for more (NCCL's thread polls every stream on every call).
 */
static void test_one_cpu(void **state)
{
    ferry_config_t cfg;
    cpu_set_t all, one;

    (void)state;
    assert_int_equal(sched_getaffinity(0, sizeof(all), &all), 0);
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(cfg.src[FERRY_CFG_THREADS], FERRY_CFG_DERIVED);
    assert_int_equal(cfg.streams, 1);
    assert_int_equal(cfg.src[FERRY_CFG_STREAMS], FERRY_CFG_DERIVED);
    setenv("NCCL_FERRY_STREAMS", "2", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(cfg.streams, 2);
    /* Helpers asked for anyway: honoured, with a WARN that says what it costs and what to do. */
    ferry_log_set(capture_log);
    last_warn[0] = '\0';
    setenv("NCCL_FERRY_THREADS", "2", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.threads, 2);
    assert_non_null(strstr(last_warn, "2 helper threads per connection (NCCL_FERRY_THREADS) in a "
                                      "process bound to one CPU"));
    assert_non_null(strstr(last_warn, "--bind-to none"));
    unsetenv("NCCL_FERRY_THREADS");
    last_warn[0] = '\0';
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(last_warn[0], '\0'); /* The default (no helpers) says nothing. */
    /* NCCL_NSOCKS_PERTHREAD alone: its sockets, but no helpers on the lone CPU. */
    unsetenv("NCCL_FERRY_STREAMS");
    setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.streams, 8);
    assert_int_equal(cfg.threads, 0);
    assert_int_equal(last_warn[0], '\0');
    unsetenv("NCCL_NSOCKS_PERTHREAD");
    assert_int_equal(sched_setaffinity(0, sizeof(all), &all), 0);
    if (CPU_COUNT(&all) > 1) {
        unsetenv("NCCL_FERRY_STREAMS");
        assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
        assert_int_equal(cfg.streams, 4);
        assert_true(cfg.threads > 0);
    }
}

static void test_bad_values_rejected(void **state)
{
    expect_bad("NCCL_FERRY_BACKEND", "rdma");
    expect_bad("NCCL_SOCKET_FAMILY", "AF_UNIX");
    expect_bad("NCCL_FERRY_STREAMS", "0");
    expect_bad("NCCL_FERRY_STREAMS", "65");
    expect_bad("NCCL_FERRY_STREAMS", "4x");
    expect_bad("NCCL_SOCKET_NTHREADS", "17");
    expect_bad("NCCL_FERRY_CHUNK_SIZE", "1");
    expect_bad("NCCL_FERRY_CHUNK_SIZE", "lots");
    expect_bad("NCCL_FERRY_DUMP_SIGNAL", "SEGV");
    expect_bad("NCCL_FERRY_DUMP_SIGNAL", "9");
    expect_bad("NCCL_FERRY_DUMP_SIGNAL", "USR9");
    expect_bad("NCCL_FERRY_TUNER", "2");
    expect_bad("NCCL_FERRY_TUNER", "yes");
    expect_bad("NCCL_FERRY_TUNER_LL_BW", "0");
    expect_bad("NCCL_FERRY_TUNER_CHANNEL_BYTES", "-5");
    expect_bad("NCCL_FERRY_ASSIST_MAX", "65M");
    expect_bad("NCCL_FERRY_ZEROCOPY", "3");
    expect_bad("NCCL_FERRY_ZEROCOPY_MIN", "1K");
    expect_bad("NCCL_FERRY_SOCKET_TIMEOUT_S", "-1");
    expect_bad("NCCL_FERRY_SOCKET_TIMEOUT_S", "3601");
    expect_bad("NCCL_FERRY_SOCKET_TIMEOUT_S", "30s");
    /* Contradictory pair. */
    clear_env(NULL);
    setenv("NCCL_SOCKET_MIN_TASKSIZE", "4M", 1);
    setenv("NCCL_FERRY_CHUNK_SIZE", "1M", 1);
    {
        ferry_config_t cfg;

        assert_int_equal(ferry_config_load(&cfg), FERRY_ERR_USAGE);
    }
}

static void test_parse_helpers(void **state)
{
    assert_int_equal(ferry_config_parse_signal(NULL), 0);
    assert_int_equal(ferry_config_parse_signal("off"), 0);
    assert_int_equal(ferry_config_parse_signal("usr1"), SIGUSR1);
    assert_int_equal(ferry_config_parse_signal("SIGHUP"), SIGHUP);
    assert_int_equal(ferry_config_parse_signal("12"), 12);
    assert_int_equal(ferry_config_parse_signal("-3"), -1);
    assert_int_equal(ferry_config_parse_size("4096"), 4096);
    assert_int_equal(ferry_config_parse_size("4k"), 4096);
    assert_int_equal(ferry_config_parse_size("3MiB"), 3 << 20);
    assert_int_equal(ferry_config_parse_size("1G"), 1 << 30);
    assert_int_equal(ferry_config_parse_size("1T"), -1);
    assert_int_equal(ferry_config_parse_size(""), -1);
}

/* NCCL treats a 1-character NCCL_SOCKET_IFNAME as unset. */
static void test_one_char_ifname_is_unset(void **state)
{
    ferry_config_t cfg;

    setenv("NCCL_SOCKET_IFNAME", "e", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_string_equal(cfg.socket_ifname, "");
    assert_int_equal(cfg.src[FERRY_CFG_SOCKET_IFNAME], FERRY_CFG_DEFAULT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_env_values_and_sources, clear_env),
        cmocka_unit_test_setup(test_nccl_threads_times_socks, clear_env),
        cmocka_unit_test_setup(test_threads_never_exceed_streams, clear_env),
        cmocka_unit_test_setup(test_one_cpu, clear_env),
        cmocka_unit_test_setup(test_bad_values_rejected, clear_env),
        cmocka_unit_test_setup(test_parse_helpers, clear_env),
        cmocka_unit_test_setup(test_one_char_ifname_is_unset, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
