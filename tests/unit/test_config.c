/*
 * The core's configuration (core/config.c): the variables both backends
 * read and the tuner's. Every variable's default, a value from the
 * environment with its source, and a bad value with the exact WARN. The
 * socket backend's variables are tested in test_sock_config.c, the ib
 * backend's in test_ib_config.c.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "test_config_util.h"

#include "core/config.h"
#include "core/log.h"

/*
 * One row per variable of the core's table: a value from the environment,
 * what the effective-config line then shows (a prefix where the line shows
 * another variable's source for both, as retry= does), a bad value and the
 * accepted values its WARN quotes.
 */
typedef struct core_var_case {
    ferry_cfg_id_t id;
    const char    *name;
    const char    *good;
    const char    *shown;
    const char    *bad;
    const char    *help;
} core_var_case_t;

static const core_var_case_t core_vars[] = {
    {FERRY_CFG_BACKEND, "NCCL_FERRY_BACKEND", "Socket", "backend=socket(env)", "rdma",
     "auto, socket or ib"},
    {FERRY_CFG_SOCKET_IFNAME, "NCCL_SOCKET_IFNAME", "^docker,lo", "ifname=^docker,lo(env)",
     NULL /* too long: built in test_bad_values_warn */,
     "interface prefixes, ^ to exclude, = for exact names"},
    {FERRY_CFG_SOCKET_FAMILY, "NCCL_SOCKET_FAMILY", "AF_INET6", "family=AF_INET6(env)",
     "AF_UNIX", "AF_INET or AF_INET6"},
    {FERRY_CFG_RETRY_CNT, "NCCL_SOCKET_RETRY_CNT", "3", "retry=3x100ms(env)", "-1",
     "connect retries, 0..1000000"},
    {FERRY_CFG_RETRY_SLEEP_MS, "NCCL_SOCKET_RETRY_SLEEP_MSEC", "5", "retry=34x5ms(", "60001",
     "connect back-off step in ms, 0..60000"},
    {FERRY_CFG_HELLO_TIMEOUT_MS, "NCCL_FERRY_HELLO_TIMEOUT_MS", "500",
     "hello_timeout=500ms(env)", "9", "ms an inbound stream may take to say hello"},
    {FERRY_CFG_DUMP_SIGNAL, "NCCL_FERRY_DUMP_SIGNAL", "SIGUSR2", "dump_signal=12(env)", "SEGV",
     "signal name or number that dumps all comms, off by default"},
    {FERRY_CFG_TUNER, "NCCL_FERRY_TUNER", "0", "tuner=0(env)", "yes",
     "0 or 1 (1: ferry's bundled tuner corrects NCCL's cost model)"},
    {FERRY_CFG_TUNER_LL_BW, "NCCL_FERRY_TUNER_LL_BW", "2500", "tuner_ll_bw=2500MB/s(env)", "0",
     "1..1000000 (MB/s of bus bandwidth NCCL's LL protocols reach over ferry)"},
    {FERRY_CFG_TUNER_CHANNEL_BYTES, "NCCL_FERRY_TUNER_CHANNEL_BYTES", "0",
     "tuner_channel_bytes=0(env)", "-5",
     "a size up to 1T (collective bytes per NCCL channel; 0 leaves channels to NCCL)"},
    {FERRY_CFG_TUNER_STEP_BYTES, "NCCL_FERRY_TUNER_STEP_BYTES", "128K",
     "tuner_step_bytes=131072(env)", "2T",
     "a size up to 1T (a Simple ring collective whose ring step on 2 channels would move fewer "
     "bytes runs on one; 0: off; the same on every rank)"},
    {FERRY_CFG_STALL_WARN_S, "NCCL_FERRY_STALL_WARN_S", "0", "stall_warn=0s(env)", "86401",
     "0..86400 (s a request may go without progress before test() warns about it once; 0: "
     "never)"},
    {FERRY_CFG_RMA, "NCCL_FERRY_RMA", "0", "rma=0(env)", "2",
     "0 or 1 (1: ferry's RMA plugin carries NCCL's one-sided operations; 0: it declines and "
     "NCCL uses its own)"},
};
#define NCORE_VARS ((int)(sizeof(core_vars) / sizeof(core_vars[0])))

static int clear_env(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < NCORE_VARS; i++)
        unsetenv(core_vars[i].name);
    last_warn[0] = '\0';
    return 0;
}

static void test_every_variable_has_a_row(void **state)
{
    int i;

    (void)state;
    assert_int_equal(NCORE_VARS, FERRY_CFG_COUNT);
    for (i = 0; i < NCORE_VARS; i++)
        assert_int_equal(core_vars[i].id, i);
}

static void test_defaults(void **state)
{
    ferry_config_t cfg;
    char line[2048];
    int i;

    (void)state;
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.backend, FERRY_BACKEND_AUTO);
    assert_string_equal(cfg.socket_ifname, "");
    assert_int_equal(cfg.socket_family, AF_UNSPEC);
    assert_int_equal(cfg.retry_cnt, 34);
    assert_int_equal(cfg.retry_sleep_ms, 100);
    assert_int_equal(cfg.hello_timeout_ms, 10000);
    assert_int_equal(cfg.dump_signal, 0);
    assert_int_equal(cfg.tuner, 1);
    assert_int_equal(cfg.tuner_ll_bw, 1000);
    assert_int_equal(cfg.tuner_channel_bytes, 2 << 20);
    assert_int_equal(cfg.stall_warn_s, 60);
    assert_int_equal(cfg.rma, 1);
    for (i = 0; i < FERRY_CFG_COUNT; i++)
        assert_int_equal(cfg.src[i], FERRY_CFG_DEFAULT);
    /* The core's part of the effective-config line; the backend's variables follow it. */
    ferry_config_format(&cfg, line, sizeof(line));
    assert_string_equal(line, "backend=auto(default) ifname=<nccl order>(default) "
                              "family=any(default) retry=34x100ms(default) "
                              "hello_timeout=10000ms(default) dump_signal=0(default) "
                              "tuner=1(default) tuner_ll_bw=1000MB/s(default) "
                              "tuner_channel_bytes=2097152(default) "
                              "tuner_step_bytes=0(default) stall_warn=60s(default) "
                              "rma=1(default)");
}

/* Each variable alone from the environment: its value, its source, the line's words. */
static void test_env_value_and_source_each(void **state)
{
    ferry_config_t cfg;
    char line[2048];
    int i;

    (void)state;
    for (i = 0; i < NCORE_VARS; i++) {
        const core_var_case_t *c = &core_vars[i];

        clear_env(NULL);
        setenv(c->name, c->good, 1);
        assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
        assert_int_equal(cfg.src[c->id], FERRY_CFG_ENV);
        ferry_config_format(&cfg, line, sizeof(line));
        if (strstr(line, c->shown) == NULL)
            fail_msg("%s=%s: the line lacks '%s': %s", c->name, c->good, c->shown, line);
    }
}

static void test_env_values_together(void **state)
{
    ferry_config_t cfg;
    char line[2048];

    (void)state;
    setenv("NCCL_FERRY_BACKEND", "Socket", 1);
    setenv("NCCL_FERRY_TUNER", "0", 1);
    setenv("NCCL_FERRY_TUNER_LL_BW", "2500", 1);
    setenv("NCCL_FERRY_TUNER_CHANNEL_BYTES", "0", 1);
    setenv("NCCL_SOCKET_IFNAME", "^docker,lo", 1);
    setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
    setenv("NCCL_FERRY_DUMP_SIGNAL", "SIGUSR2", 1);
    setenv("NCCL_FERRY_STALL_WARN_S", "0", 1);
    setenv("NCCL_SOCKET_RETRY_CNT", "3", 1);
    setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "5", 1);
    setenv("NCCL_FERRY_HELLO_TIMEOUT_MS", "500", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.stall_warn_s, 0);
    assert_int_equal(cfg.backend, FERRY_BACKEND_SOCKET);
    assert_string_equal(cfg.socket_ifname, "^docker,lo");
    assert_int_equal(cfg.socket_family, AF_INET6);
    assert_int_equal(cfg.dump_signal, SIGUSR2);
    assert_int_equal(cfg.tuner, 0);
    assert_int_equal(cfg.tuner_ll_bw, 2500);
    assert_int_equal(cfg.tuner_channel_bytes, 0);
    assert_int_equal(cfg.retry_cnt, 3);
    assert_int_equal(cfg.retry_sleep_ms, 5);
    assert_int_equal(cfg.hello_timeout_ms, 500);
    ferry_config_format(&cfg, line, sizeof(line));
    assert_string_equal(line, "backend=socket(env) ifname=^docker,lo(env) family=AF_INET6(env) "
                              "retry=3x5ms(env) hello_timeout=500ms(env) dump_signal=12(env) "
                              "tuner=0(env) tuner_ll_bw=2500MB/s(env) tuner_channel_bytes=0(env) "
                              "tuner_step_bytes=0(default) stall_warn=0s(env) rma=1(default)");
    setenv("NCCL_FERRY_STALL_WARN_S", "86400", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.stall_warn_s, 86400);
}

/* A bad value fails the load with "NAME='value' is not valid: expected HELP; ...". */
static void expect_bad(const char *name, const char *value, const char *help)
{
    ferry_config_t cfg;

    clear_env(NULL);
    setenv(name, value, 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_ERR_USAGE);
    expect_bad_warn(name, value, help);
}

static const char *core_help(const char *name)
{
    int i;

    for (i = 0; i < NCORE_VARS; i++)
        if (strcmp(core_vars[i].name, name) == 0)
            return core_vars[i].help;
    fail_msg("no row for %s", name);
    return NULL;
}

static void test_bad_values_warn(void **state)
{
    char longname[300];
    int i;

    (void)state;
    for (i = 0; i < NCORE_VARS; i++)
        if (core_vars[i].bad != NULL)
            expect_bad(core_vars[i].name, core_vars[i].bad, core_vars[i].help);
    /* NCCL_SOCKET_IFNAME: free text, but no longer than its 255 characters. */
    memset(longname, 'e', 256);
    longname[256] = '\0';
    expect_bad("NCCL_SOCKET_IFNAME", longname, core_help("NCCL_SOCKET_IFNAME"));
}

static void test_more_bad_values(void **state)
{
    (void)state;
    expect_bad("NCCL_FERRY_DUMP_SIGNAL", "9", core_help("NCCL_FERRY_DUMP_SIGNAL"));
    expect_bad("NCCL_FERRY_DUMP_SIGNAL", "USR9", core_help("NCCL_FERRY_DUMP_SIGNAL"));
    expect_bad("NCCL_FERRY_TUNER", "2", core_help("NCCL_FERRY_TUNER"));
    expect_bad("NCCL_FERRY_STALL_WARN_S", "-1", core_help("NCCL_FERRY_STALL_WARN_S"));
    expect_bad("NCCL_SOCKET_RETRY_CNT", "1000001", core_help("NCCL_SOCKET_RETRY_CNT"));
    expect_bad("NCCL_FERRY_HELLO_TIMEOUT_MS", "3600001", core_help("NCCL_FERRY_HELLO_TIMEOUT_MS"));
}

static void test_parse_helpers(void **state)
{
    (void)state;
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
    /* fuzz_config found these overflowing (UBSan): a multiple that does not fit is refused. */
    assert_int_equal(ferry_config_parse_size("9999999999G"), -1);
    assert_int_equal(ferry_config_parse_size("9999999999999M"), -1);
    assert_int_equal(ferry_config_parse_size("17179869184G"), -1); /* 2^64: wrapped to 0. */
    assert_int_equal(ferry_config_parse_size("-99999999999999999K"), -1);
    assert_true(ferry_config_parse_size("8589934591G") == 8589934591LL << 30); /* Largest. */
    assert_int_equal(ferry_config_parse_size("-1"), -1);
}

/* NCCL treats a 1-character NCCL_SOCKET_IFNAME as unset. */
static void test_one_char_ifname_is_unset(void **state)
{
    ferry_config_t cfg;

    (void)state;
    setenv("NCCL_SOCKET_IFNAME", "e", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    assert_string_equal(cfg.socket_ifname, "");
    assert_int_equal(cfg.src[FERRY_CFG_SOCKET_IFNAME], FERRY_CFG_DEFAULT);
}

/* The socket backend's variables are not the core's: a bad one does not fail the core's load. */
static void test_socket_variables_are_not_parsed_here(void **state)
{
    ferry_config_t cfg;

    (void)state;
    setenv("NCCL_FERRY_STREAMS", "1000", 1);
    setenv("NCCL_SOCKET_MIN_TASKSIZE", "4M", 1);
    setenv("NCCL_FERRY_CHUNK_SIZE", "1M", 1);
    assert_int_equal(ferry_config_load(&cfg), FERRY_OK);
    unsetenv("NCCL_FERRY_STREAMS");
    unsetenv("NCCL_SOCKET_MIN_TASKSIZE");
    unsetenv("NCCL_FERRY_CHUNK_SIZE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_every_variable_has_a_row, clear_env),
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_env_value_and_source_each, clear_env),
        cmocka_unit_test_setup(test_env_values_together, clear_env),
        cmocka_unit_test_setup(test_bad_values_warn, clear_env),
        cmocka_unit_test_setup(test_more_bad_values, clear_env),
        cmocka_unit_test_setup(test_parse_helpers, clear_env),
        cmocka_unit_test_setup(test_one_char_ifname_is_unset, clear_env),
        cmocka_unit_test_setup(test_socket_variables_are_not_parsed_here, clear_env),
    };

    ferry_log_set(capture_log);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
