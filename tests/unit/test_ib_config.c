/* The ib backend's variables: NCCL's defaults, values from the environment, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "ib/ib_config.h"
#include "test_ib_util.h"

static const char *const vars[] = {
    "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_ROUTABLE_FLID_GID_INDEX",
    "NCCL_IB_TC", "NCCL_IB_FIFO_TC", "NCCL_IB_SL", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT",
    "NCCL_IB_PKEY", "NCCL_IB_USE_INLINE", "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_AR_THRESHOLD", "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_GDR_FLUSH_DISABLE",
    "NCCL_FERRY_IBVERBS_LIB", "NCCL_FERRY_IB_PEER_TIMEOUT_S", "NCCL_IB_MERGE_VFS",
    "NCCL_IB_MERGE_NICS", "NCCL_FERRY_IB_STRIPE_MIN",
    "NCCL_FERRY_IB_GDR", "NCCL_FERRY_IB_FLUSH", "NCCL_FERRY_IB_FORCE_FLUSH",
    "NCCL_FERRY_IB_SYSFS_ROOT",
    "NCCL_FERRY_IB_CM", "NCCL_FERRY_RDMACM_LIB",
};

static int clear_env(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    test_ib_log_reset();
    return 0;
}

static void test_every_variable_in_the_table(void **state)
{
    ferry_ib_config_t cfg;
    char line[4096] = "";
    size_t i;

    (void)state;
    assert_int_equal(FERRY_IB_CFG_COUNT, sizeof(vars) / sizeof(vars[0]));
    assert_int_equal(ferry_ib_config_load(&cfg), FERRY_OK);
    ferry_ib_config_format(&cfg, line, sizeof(line));
    for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        char name[64];

        snprintf(name, sizeof(name), " %s=", vars[i]);
        if (strstr(line, name) == NULL)
            fail_msg("%s missing from the effective-config line: %s", vars[i], line);
    }
}

/* NCCL 2.28's defaults (reference §5.1) and ferry's own. */
static void test_defaults(void **state)
{
    ferry_ib_config_t cfg;
    char line[4096] = "config";

    (void)state;
    assert_int_equal(ferry_ib_config_load(&cfg), FERRY_OK);
    assert_string_equal(cfg.hca, "");
    assert_int_equal(cfg.disable, 0);
    assert_int_equal(cfg.gid_index, -1);
    assert_int_equal(cfg.addr_family, AF_INET);
    assert_string_equal(cfg.addr_range, "");
    assert_int_equal(cfg.roce_version, 2);
    assert_int_equal(cfg.routable_flid_gid_index, 1);
    assert_int_equal(cfg.tc, -1);
    assert_int_equal(cfg.fifo_tc, -1);
    assert_int_equal(cfg.sl, -1);
    assert_int_equal(cfg.timeout, 20);
    assert_int_equal(cfg.retry_cnt, 7);
    assert_int_equal(cfg.pkey, 0);
    assert_int_equal(cfg.use_inline, 0);
    assert_int_equal(cfg.qps_per_conn, 1);
    assert_int_equal(cfg.split_data_on_qps, 0);
    assert_int_equal(cfg.ar_threshold, 8192);
    assert_int_equal(cfg.adaptive_routing, -2);
    assert_int_equal(cfg.relaxed_ordering, 2);
    assert_int_equal(cfg.return_async_events, 1);
    assert_int_equal(cfg.gdr_flush_disable, 0);
    assert_string_equal(cfg.verbs_lib, "");
    assert_int_equal(cfg.peer_timeout_s, 10);
    assert_int_equal(cfg.merge_vfs, 1);
    assert_int_equal(cfg.gdr, -1);
    assert_int_equal(cfg.flush, FERRY_IB_FLUSH_AUTO);
    assert_int_equal(cfg.force_flush, 0);
    assert_string_equal(cfg.sysfs_root, "");
    assert_int_equal(cfg.cm, FERRY_IB_CM_OOB);
    assert_string_equal(cfg.rdmacm_lib, "");
    ferry_ib_config_format(&cfg, line, sizeof(line));
    /* Appended to what the line already holds. */
    assert_true(strncmp(line, "config NCCL_IB_HCA=<all>(default) NCCL_IB_DISABLE=0(default) "
                              "NCCL_IB_GID_INDEX=-1(default) NCCL_IB_ADDR_FAMILY=AF_INET(default) "
                              "NCCL_IB_ADDR_RANGE=<any>(default) ",
                        strlen("config NCCL_IB_HCA=<all>(default) NCCL_IB_DISABLE=0(default) "
                               "NCCL_IB_GID_INDEX=-1(default) NCCL_IB_ADDR_FAMILY=AF_INET(default) "
                               "NCCL_IB_ADDR_RANGE=<any>(default) ")) == 0);
    assert_non_null(strstr(line, " NCCL_IB_ADAPTIVE_ROUTING=-2(default)"));
    assert_non_null(strstr(line, " NCCL_FERRY_IBVERBS_LIB=<libibverbs.so.1>(default)"));
    assert_non_null(strstr(line, " NCCL_FERRY_IB_PEER_TIMEOUT_S=10(default)"));
    assert_non_null(strstr(line, " NCCL_FERRY_IB_GDR=-1(default) NCCL_FERRY_IB_FLUSH=auto(default) "
                                 "NCCL_FERRY_IB_FORCE_FLUSH=0(default) "
                                 "NCCL_FERRY_IB_SYSFS_ROOT=</sys>(default)"));
    assert_non_null(strstr(line, " NCCL_FERRY_IB_CM=oob(default)"));
    assert_non_null(strstr(line, " NCCL_FERRY_RDMACM_LIB=<librdmacm.so.1>(default)"));
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, NULL), 0);
}

static void test_env_values_and_sources(void **state)
{
    ferry_ib_config_t cfg;
    unsigned char addr[16];
    char line[4096] = "";
    int plen;

    (void)state;
    setenv("NCCL_IB_HCA", "^=mlx5_1:1,mlx5_3", 1);
    setenv("NCCL_IB_ADDR_FAMILY", "AF_INET6", 1);
    setenv("NCCL_IB_ADDR_RANGE", "fd00:1::/32", 1);
    setenv("NCCL_IB_QPS_PER_CONNECTION", "128", 1);
    setenv("NCCL_IB_AR_THRESHOLD", "64K", 1);
    setenv("NCCL_IB_ADAPTIVE_ROUTING", "0", 1);
    setenv("NCCL_FERRY_IB_PEER_TIMEOUT_S", "0", 1);
    setenv("NCCL_FERRY_IBVERBS_LIB", "/opt/rdma/lib/libibverbs.so.1", 1);
    setenv("NCCL_FERRY_IB_GDR", "1", 1);
    setenv("NCCL_FERRY_IB_FLUSH", "CUDA", 1);
    setenv("NCCL_FERRY_IB_FORCE_FLUSH", "1", 1);
    setenv("NCCL_FERRY_IB_SYSFS_ROOT", "/tmp/sys", 1);
    setenv("NCCL_FERRY_IB_CM", "RDMACM", 1);
    setenv("NCCL_FERRY_RDMACM_LIB", "/opt/rdma/lib/librdmacm.so.1", 1);
    assert_int_equal(ferry_ib_config_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.gdr, 1);
    assert_int_equal(cfg.flush, FERRY_IB_FLUSH_CUDA);
    assert_int_equal(cfg.force_flush, 1);
    assert_string_equal(cfg.sysfs_root, "/tmp/sys");
    assert_int_equal(cfg.cm, FERRY_IB_CM_RDMACM);
    assert_int_equal(cfg.src[FERRY_IB_CFG_CM], FERRY_CFG_ENV);
    assert_string_equal(cfg.hca, "^=mlx5_1:1,mlx5_3");
    assert_int_equal(cfg.addr_family, AF_INET6);
    assert_int_equal(cfg.qps_per_conn, 128);
    assert_int_equal(cfg.ar_threshold, 64 << 10);
    assert_int_equal(cfg.adaptive_routing, 0);
    assert_int_equal(cfg.peer_timeout_s, 0);
    assert_int_equal(cfg.src[FERRY_IB_CFG_HCA], FERRY_CFG_ENV);
    assert_int_equal(cfg.src[FERRY_IB_CFG_GID_INDEX], FERRY_CFG_DEFAULT);
    ferry_ib_config_format(&cfg, line, sizeof(line));
    assert_non_null(strstr(line, " NCCL_IB_HCA=^=mlx5_1:1,mlx5_3(env) "));
    assert_non_null(strstr(line, " NCCL_IB_ADDR_FAMILY=AF_INET6(env) "));
    assert_non_null(strstr(line, " NCCL_IB_ADDR_RANGE=fd00:1::/32(env) "));
    assert_non_null(strstr(line, " NCCL_IB_AR_THRESHOLD=65536(env) "));
    assert_non_null(strstr(line, " NCCL_FERRY_IBVERBS_LIB=/opt/rdma/lib/libibverbs.so.1(env) "));
    assert_non_null(strstr(line, " NCCL_FERRY_IB_CM=rdmacm(env) "));
    assert_non_null(strstr(line, " NCCL_FERRY_RDMACM_LIB=/opt/rdma/lib/librdmacm.so.1(env)"));
    /* The range applies to its own family only, as in NCCL. */
    assert_int_equal(ferry_ib_config_addr_range(&cfg, AF_INET6, addr, &plen), 1);
    assert_int_equal(plen, 32);
    assert_int_equal(addr[0], 0xfd);
    assert_int_equal(addr[1], 0x00);
    assert_int_equal(addr[3], 0x01);
    assert_int_equal(ferry_ib_config_addr_range(&cfg, AF_INET, addr, &plen), 0);
    assert_int_equal(plen, 0);
}

typedef struct bad_case {
    const char *var, *value, *accepted; /* accepted: the help text the WARN must quote. */
} bad_case_t;

static void test_bad_values(void **state)
{
    static const bad_case_t cases[] = {
        {"NCCL_IB_QPS_PER_CONNECTION", "0", "1..128 (data QPs per connection)"},
        {"NCCL_IB_QPS_PER_CONNECTION", "129", "1..128 (data QPs per connection)"},
        {"NCCL_IB_ADDR_FAMILY", "AF_UNIX", "AF_INET or AF_INET6"},
        {"NCCL_IB_ADDR_RANGE", "10.0.0.0", "a CIDR block such as 10.0.0.0/8 or fd00::/16 "
                                           "(RoCE GIDs are chosen inside it)"},
        {"NCCL_IB_ADDR_RANGE", "10.0.0.0/33", "a CIDR block such as 10.0.0.0/8 or fd00::/16 "
                                              "(RoCE GIDs are chosen inside it)"},
        {"NCCL_IB_ADDR_RANGE", "fd00::/129", "a CIDR block such as 10.0.0.0/8 or fd00::/16 "
                                             "(RoCE GIDs are chosen inside it)"},
        {"NCCL_IB_ADDR_RANGE", "host/8", "a CIDR block such as 10.0.0.0/8 or fd00::/16 "
                                         "(RoCE GIDs are chosen inside it)"},
        {"NCCL_IB_ADAPTIVE_ROUTING", "-1", "-2 (auto: on for InfiniBand, off for RoCE), 0 or 1"},
        {"NCCL_IB_ROCE_VERSION_NUM", "3", "1 or 2 (the RoCE version of the GID chosen)"},
        {"NCCL_IB_RETRY_CNT", "8", "0..7 (QP transport retries)"},
        {"NCCL_IB_DISABLE", "yes", "0 or 1 (1: no ib backend)"},
        {"NCCL_FERRY_IB_CM", "verbs", "oob (connect out of band over TCP) or rdmacm (librdmacm)"},
        {"NCCL_FERRY_IB_PEER_TIMEOUT_S", "-1", "0..86400 (s without a sign of life from a peer "
                                               "before its comms fail; 0: never)"},
        {"NCCL_FERRY_IB_GDR", "2", "-1 (GPU memory when a peer-memory module is loaded), 0 "
                                   "(never) or 1 (always)"},
        {"NCCL_FERRY_IB_FLUSH", "gdrcopy", "auto (per receive comm, the cheaper of the two, "
                                           "timed over its first flushes), read (a 1-byte RDMA "
                                           "READ on a QP connected to itself) or cuda "
                                           "(cuFlushGPUDirectRDMAWrites)"},
        {"NCCL_FERRY_IB_FORCE_FLUSH", "2", "0 or 1 (1: the forceFlush property, NCCL flushes "
                                           "every GPU receive)"},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ferry_ib_config_t cfg;
        char expected[1024];

        clear_env(NULL);
        setenv(cases[i].var, cases[i].value, 1);
        assert_int_equal(ferry_ib_config_load(&cfg), FERRY_ERR_USAGE);
        snprintf(expected, sizeof(expected),
                 "NET/ferry : %s='%s' is not valid: expected %s; unset it or fix the value",
                 cases[i].var, cases[i].value, cases[i].accepted);
        if (!test_ib_log_has(FERRY_LOG_WARN, expected)) {
            test_ib_log_dump();
            fail_msg("no WARN '%s'", expected);
        }
        assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, NULL), 1);
    }
}

static void test_hca_name_too_long(void **state)
{
    ferry_ib_config_t cfg;
    char name[100];

    (void)state;
    memset(name, 'm', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    setenv("NCCL_IB_HCA", name, 1);
    assert_int_equal(ferry_ib_config_load(&cfg), FERRY_ERR_USAGE);
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, "NCCL_IB_HCA='mmmm"), 1);
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, "names of at most 63 characters"), 1);
}

/* A bad rail or plane: one WARN naming the variable, the entry, the field and what is wanted. */
static void test_hca_bad_rail_plane(void **state)
{
    static const struct {
        const char *value;
        const char *warn;
    } cases[] = {
        {"mlx5_0:1:x", "NET/ferry : NCCL_IB_HCA='mlx5_0:1:x' is not valid: entry 'mlx5_0:1:x': "
                       "rail 'x' is not a number 0..32767 (leave it empty for none); expected "
                       "HCA names as prefixes with optional :port, :rail and :plane "
                       "(name[:port[:rail[:plane]]], rail and plane 0..32767 or empty for "
                       "none), comma-separated"},
        {"=mlx5_0:1:0:1,mlx5_1:1:1:-1", "NCCL_IB_HCA='=mlx5_0:1:0:1,mlx5_1:1:1:-1' is not "
                                        "valid: entry 'mlx5_1:1:1:-1': plane '-1' is not a "
                                        "number 0..32767 (leave it empty for none); expected"},
        {"mlx5_0:1:0:1:2", "NCCL_IB_HCA='mlx5_0:1:0:1:2' is not valid: entry 'mlx5_0:1:0:1:2': "
                           "5 fields; an entry is name[:port[:rail[:plane]]]; expected"},
    };
    ferry_ib_config_t cfg;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_ib_log_reset();
        setenv("NCCL_IB_HCA", cases[i].value, 1);
        assert_int_equal(ferry_ib_config_load(&cfg), FERRY_ERR_USAGE);
        if (test_ib_log_count(FERRY_LOG_WARN, cases[i].warn) != 1) {
            test_ib_log_dump();
            fail_msg("no WARN containing '%s'", cases[i].warn);
        }
        assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, NULL), 1);
    }
    /* Good rails and planes load, kept as written. */
    setenv("NCCL_IB_HCA", "=mlx5_0:1:0:1,mlx5_1::1", 1);
    assert_int_equal(ferry_ib_config_load(&cfg), FERRY_OK);
    assert_string_equal(cfg.hca, "=mlx5_0:1:0:1,mlx5_1::1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_every_variable_in_the_table, clear_env),
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_env_values_and_sources, clear_env),
        cmocka_unit_test_setup(test_bad_values, clear_env),
        cmocka_unit_test_setup(test_hca_name_too_long, clear_env),
        cmocka_unit_test_setup(test_hca_bad_rail_plane, clear_env),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
