/*
 * The ib backend's devices over fakeibv. `test_ib_dev ib` runs with
 * FAKEIBV_NDEV=2 FAKEIBV_NPORTS=2 (InfiniBand), `test_ib_dev eth` with one
 * RoCE port (FAKEIBV_LINK=eth); both with NCCL_SOCKET_IFNAME=lo.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/config.h"
#include "ib/ib.h"
#include "ib/ib_dev_port.h"
#include "ib/ib_gid.h"
#include "test_ib_util.h"

/* fakeibv.h's kinds. */
#define FAKE_FAULT_CREATE_QP 2
#define FAKE_FAULT_PORT_ERR 18
#define FAKE_FAULT_PORT_ACTIVE 19

static const char *const ib_vars[] = {
    "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_PCI_RELAXED_ORDERING",
};

static ferry_config_t core_cfg;

static int setup(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(ib_vars) / sizeof(ib_vars[0]); i++)
        unsetenv(ib_vars[i]);
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    assert_int_equal(ferry_config_load(&core_cfg), FERRY_OK);
    test_ib_log_reset();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ferry_ib_fini();
    return 0;
}

/* The library NCCL_FERRY_IBVERBS_LIB names (or the default), loaded for direct verbs. */
static void load_verbs(void)
{
    const char *lib = getenv("NCCL_FERRY_IBVERBS_LIB");
    char err[1024];

    if (ferry_ibv_load(lib, err, sizeof(err)) != FERRY_OK)
        fail_msg("%s", err);
}

/* A context of device i of the list, opened apart from ferry's. */
static struct ibv_context *open_fake(int i)
{
    struct ibv_device **list;
    struct ibv_context *ctx;
    int n = 0;

    load_verbs();
    list = ferry_ibv.get_device_list(&n);
    assert_non_null(list);
    assert_true(i < n);
    ctx = ferry_ibv.open_device(list[i]);
    ferry_ibv.free_device_list(list);
    assert_non_null(ctx);
    return ctx;
}

/* "name name ..." of the devices ferry found. */
static void dev_names(char *buf, size_t len)
{
    size_t off = 0;
    int n, i;

    buf[0] = '\0';
    assert_int_equal(ferry_ib_devices(&n), FERRY_OK);
    for (i = 0; i < n; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? " " : "", ferry_ib_dev_name(i));
}

static void test_init_all_ports(void **state)
{
    char names[256];

    (void)state;
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
    dev_names(names, sizeof(names));
    assert_string_equal(names, "fakeib0:1 fakeib0:2 fakeib1:1 fakeib1:2");
    if (!test_ib_log_has(FERRY_LOG_INFO, "NET/ferry : ib backend using [0]fakeib0:1/IB "
                                         "[1]fakeib0:2/IB [2]fakeib1:1/IB [3]fakeib1:2/IB [RO]; "
                                         "OOB lo:127.0.0.1")) {
        test_ib_log_dump();
        fail_msg("no device INFO line");
    }
    assert_int_equal(ferry_ib_state.nhca, 2);
    assert_string_equal(ferry_ib_state.oob_ifname, "lo");
    assert_string_equal(ferry_ib_state.oob_addr, "127.0.0.1");
    assert_int_equal(ferry_ib_state.oob_sa.ss_family, AF_INET);
    assert_string_equal(ferry_ib_dev_name(4), "?");
    assert_string_equal(ferry_ib_dev_name(-1), "?");
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, NULL), 0);
}

static void test_properties(void **state)
{
    struct ibv_device_attr attr;
    struct ibv_context *ctx = open_fake(1);
    ferry_props_t p;
    char want[64];
    int i;

    (void)state;
    assert_int_equal(ferry_ibv.query_device(ctx, &attr), 0);
    ferry_ibv.close_device(ctx);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
    for (i = 0; i < 4; i++) {
        assert_int_equal(ferry_ib_get_properties(i, &p), FERRY_OK);
        assert_string_equal(p.name, ferry_ib_dev_name(i));
        /* fakeibv's sysfs: <root>/devices/pci0000:00/0000:fN:00.0, a bus per HCA, which
         * NCCL's merge (NCCL_IB_MERGE_VFS: function and device digits zeroed) leaves as is. */
        assert_non_null(p.pci_path);
        printf("  %s: pciPath %s port %d\n", p.name, p.pci_path, p.port);
        snprintf(want, sizeof(want), "/devices/pci0000:00/0000:%02x:00.0", 0xf0 + i / 2);
        assert_true(strlen(p.pci_path) > strlen(want));
        assert_string_equal(p.pci_path + strlen(p.pci_path) - strlen(want), want);
        assert_int_equal(p.ptr_support, FERRY_PTR_HOST);
        assert_int_equal(p.reg_is_global, 1);
        assert_int_equal(p.force_flush, 0);
        /* FAKEIBV_SPEED=HDR (50 Gbps a lane) x FAKEIBV_WIDTH=4. */
        assert_int_equal(p.speed_mbps, 200000);
        /* Each HCA has a PCI path of its own: no HCA before it shares it, so NCCL's realPort
         * is the port itself (1, 2 on each); the two ports of one HCA share its path. */
        assert_int_equal(p.port, i % 2 + 1);
        if (i % 2 == 1)
            assert_string_equal(p.pci_path, ferry_ib_state.devs[i - 1].hca->pci_path);
        assert_int_equal(p.max_comms, attr.max_qp);
        assert_int_equal(p.max_recvs, 8);
        assert_true(p.max_p2p_bytes == (size_t)1 << 40);
        assert_true(p.max_coll_bytes == (size_t)512 << 20);
        assert_int_equal(p.max_multi_request_size, 1);
        assert_true(p.latency_us == 0);
        /* Ports of one HCA share its GUID; the two HCAs differ. */
        assert_true(p.guid == ferry_ib_state.devs[i].hca->attr.sys_image_guid);
        assert_int_equal(ferry_ib_state.devs[i].gid_index, 0);
        assert_int_equal(ferry_ib_state.devs[i].ar, 1); /* InfiniBand: on by default. */
        assert_int_equal(ferry_ib_state.devs[i].hca->numa_node, 0); /* fakeibv sysfs numa_node. */
        assert_int_equal(ferry_ib_state.devs[i].hca->dmabuf, 1); /* FAKEIBV_DMABUF=1: EBADF. */
    }
    assert_true(ferry_ib_state.devs[3].guid == attr.sys_image_guid);
    assert_true(ferry_ib_state.devs[0].guid != attr.sys_image_guid);
    assert_int_equal(ferry_ib_get_properties(4, &p), FERRY_ERR_INVALID);
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, "getProperties(dev=4): the ib backend has 4 "
                                                       "device(s) (0..3)"), 1);
    /* The GID choice is logged with its reason. */
    assert_int_equal(test_ib_log_count(FERRY_LOG_INFO, "ib fakeib1:2: GID index 0 fe80::"), 1);
    assert_int_equal(test_ib_log_count(FERRY_LOG_INFO, "(InfiniBand, no routable FLID at "
                                                       "NCCL_IB_ROUTABLE_FLID_GID_INDEX=1)"), 4);
}

/* The IB spec's active_speed / active_width codes (verbs.h of rdma-core 44 names none). */
enum { SPEED_SDR = 1, SPEED_DDR = 2, SPEED_QDR = 4, SPEED_FDR10 = 8, SPEED_FDR = 16,
       SPEED_EDR = 32, SPEED_HDR = 64, SPEED_NDR = 128, SPEED_XDR = 256 };
enum { WIDTH_1X = 1, WIDTH_4X = 2, WIDTH_8X = 4, WIDTH_12X = 8, WIDTH_2X = 16 };

/* NCCL's ibvSpeeds x ibvWidths for the codes verbs reports. */
static void test_speed_table(void **state)
{
    static const struct {
        unsigned speed, speed_ex, width;
        int      mbps;
    } cases[] = {
        {SPEED_SDR, 0, WIDTH_1X, 2500},     {SPEED_DDR, 0, WIDTH_4X, 20000},
        {SPEED_QDR, 0, WIDTH_4X, 40000},    {SPEED_FDR10, 0, WIDTH_4X, 40000},
        {SPEED_FDR, 0, WIDTH_4X, 56000},    {SPEED_EDR, 0, WIDTH_4X, 100000},
        {SPEED_HDR, 0, WIDTH_2X, 100000},   {SPEED_NDR, 0, WIDTH_4X, 400000},
        {SPEED_NDR, 0, WIDTH_8X, 800000},   {SPEED_EDR, 0, WIDTH_12X, 300000},
        /* XDR exists only as active_speed_ex (rdma-core 50+); it wins over active_speed. */
        {0, SPEED_XDR, WIDTH_4X, 800000},           {SPEED_EDR, SPEED_XDR, WIDTH_1X, 200000},
        /* Unknown codes fall on the table's last entry, as in NCCL. */
        {0, 0, 0, 200000 * 2},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(ferry_ib_port_speed_mbps(cases[i].speed, cases[i].speed_ex,
                                                  cases[i].width), cases[i].mbps);
}

static void test_filter_variants(void **state)
{
    static const struct {
        const char *hca, *names;
    } cases[] = {
        {"fakeib", "fakeib0:1 fakeib0:2 fakeib1:1 fakeib1:2"},
        {"=fakeib1:2", "fakeib1:2"},
        {"^fakeib0", "fakeib1:1 fakeib1:2"},
        {"^=fakeib1:1", "fakeib0:1 fakeib0:2 fakeib1:2"},
        {"fakeib0:2,fakeib1:1", "fakeib0:2 fakeib1:1"},
    };
    char names[256];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv("NCCL_IB_HCA", cases[i].hca, 1);
        assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
        dev_names(names, sizeof(names));
        if (strcmp(names, cases[i].names) != 0)
            fail_msg("NCCL_IB_HCA=%s: got '%s', want '%s'", cases[i].hca, names, cases[i].names);
        ferry_ib_fini();
    }
    /* An HCA without a passing port is not kept open. */
    setenv("NCCL_IB_HCA", "=fakeib1:2", 1);
    test_ib_log_reset();
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
    if (ferry_ib_state.nhca != 1) {
        test_ib_log_dump();
        fail_msg("%d HCAs open: %s, %s", ferry_ib_state.nhca, ferry_ib_state.hcas[0].name,
                 ferry_ib_state.hcas[1].name);
    }
    assert_string_equal(ferry_ib_state.hcas[0].name, "fakeib1");
    assert_int_equal(test_ib_log_count(FERRY_LOG_INFO, "ib backend: not using fakeib0:1 filtered "
                                                       "out by NCCL_IB_HCA; fakeib0:2 filtered "
                                                       "out by NCCL_IB_HCA; fakeib1:1 filtered "
                                                       "out by NCCL_IB_HCA"), 1);
}

static void test_filter_excludes_all(void **state)
{
    (void)state;
    setenv("NCCL_IB_HCA", "^fakeib", 1);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_ERR_UNSUPPORTED);
    if (!test_ib_log_has(FERRY_LOG_WARN,
                         "NET/ferry : ib backend: no usable port (fakeib0:1 filtered out by "
                         "NCCL_IB_HCA; fakeib0:2 filtered out by NCCL_IB_HCA; fakeib1:1 filtered "
                         "out by NCCL_IB_HCA; fakeib1:2 filtered out by NCCL_IB_HCA); ports must "
                         "be ACTIVE with an InfiniBand or Ethernet link layer and pass the "
                         "NCCL_IB_HCA filter ('^fakeib'); check `ibv_devinfo`")) {
        test_ib_log_dump();
        fail_msg("no WARN listing the skipped ports");
    }
    assert_int_equal(ferry_ib_state.nhca, 0);
    assert_int_equal(ferry_ib_state.ndev, 0);
}

static void test_port_down_skipped(void **state)
{
    struct ibv_context *ctx = open_fake(0);
    test_ib_inject_fn_t inject = test_ib_inject_fn();
    char names[256], why[1024];

    (void)state;
    assert_non_null(inject);
    assert_int_equal(inject(ctx, FAKE_FAULT_PORT_ERR, 1, 0, 0, 0), 0);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
    dev_names(names, sizeof(names));
    assert_string_equal(names, "fakeib0:2 fakeib1:1 fakeib1:2");
    assert_true(test_ib_log_has(FERRY_LOG_INFO, "NET/ferry : ib backend: not using fakeib0:1 "
                                                "port state DOWN"));
    ferry_ib_fini();
    /* Down and the rest filtered: nothing usable, and each port says why. */
    setenv("NCCL_IB_HCA", "=fakeib0:1", 1);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_ERR_UNSUPPORTED);
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, "no usable port (fakeib0:1 port state "
                                                       "DOWN; fakeib0:2 filtered out by "
                                                       "NCCL_IB_HCA; fakeib1:1 filtered"), 1);
    /* RDMA ports exist: auto is to WARN, so the reasons end in what to do. */
    assert_int_equal(ferry_ib_usable(&core_cfg, why, sizeof(why)), FERRY_UNUSABLE_MEANT);
    assert_string_equal(why, "fakeib0:1 port state DOWN; fakeib0:2 filtered out by NCCL_IB_HCA; "
                             "fakeib1:1 filtered out by NCCL_IB_HCA; fakeib1:2 filtered out by "
                             "NCCL_IB_HCA; no RDMA port here is usable; fix that");
    assert_int_equal(inject(ctx, FAKE_FAULT_PORT_ACTIVE, 1, 0, 0, 0), 0);
    assert_int_equal(ferry_ib_usable(&core_cfg, why, sizeof(why)), FERRY_USABLE);
    ferry_ibv.close_device(ctx);
}

static void test_disable(void **state)
{
    char why[256];

    (void)state;
    setenv("NCCL_IB_DISABLE", "1", 1);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_ERR_UNSUPPORTED);
    assert_true(test_ib_log_has(FERRY_LOG_WARN, "NET/ferry : ib backend: NCCL_IB_DISABLE=1 "
                                                "turns it off; unset it, or use "
                                                "NCCL_FERRY_BACKEND=socket"));
    /* The user's own choice: auto passes over ib quietly. */
    assert_int_equal(ferry_ib_usable(&core_cfg, why, sizeof(why)), FERRY_UNUSABLE);
    assert_string_equal(why, "NCCL_IB_DISABLE=1");
}

static void test_no_oob_interface(void **state)
{
    (void)state;
    setenv("NCCL_SOCKET_IFNAME", "=nosuchif0", 1);
    assert_int_equal(ferry_config_load(&core_cfg), FERRY_OK);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_ERR_USAGE);
    if (!test_ib_log_has(FERRY_LOG_WARN,
                         "NET/ferry : ib: no IP interface found for the out-of-band connection "
                         "(NCCL_SOCKET_IFNAME==nosuchif0, NCCL_SOCKET_FAMILY=any); the interface "
                         "must be up with an address; set NCCL_SOCKET_IFNAME to one that is (see "
                         "`ip addr`)")) {
        test_ib_log_dump();
        fail_msg("no OOB WARN");
    }
    assert_int_equal(ferry_ib_state.nhca, 0);
}

static void test_usable(void **state)
{
    test_ib_inject_fn_t inject;
    char why[1024];
    int before, after, named;

    (void)state;
    load_verbs();
    inject = test_ib_inject_fn();
    before = test_ib_threads(NULL, &named);
    assert_int_equal(ferry_ib_usable(&core_cfg, why, sizeof(why)), FERRY_USABLE);
    assert_string_equal(why, "fakeib0:1 is ACTIVE and takes an RC QP");
    /* Every QP creation fails: no port is usable, and each says why. */
    assert_int_equal(inject(NULL, FAKE_FAULT_CREATE_QP, 0, 0, 100, ENOMEM), 0);
    assert_int_equal(ferry_ib_usable(&core_cfg, why, sizeof(why)), FERRY_UNUSABLE_MEANT);
    assert_string_equal(why, "fakeib0:1: ibv_create_qp(RC) failed: Cannot allocate memory (check "
                             "ulimit -l); fakeib0:2: ibv_create_qp(RC) failed: Cannot allocate "
                             "memory (check ulimit -l); fakeib1:1: ibv_create_qp(RC) failed: "
                             "Cannot allocate memory (check ulimit -l); fakeib1:2: "
                             "ibv_create_qp(RC) failed: Cannot allocate memory (check ulimit -l); "
                             "no RDMA port here is usable; fix that");
    assert_int_equal(inject(NULL, FAKE_FAULT_CREATE_QP, 0, 0, 0, 0), 0);
    after = test_ib_threads(NULL, &named);
    assert_int_equal(after, before); /* Nothing left running. */
    assert_int_equal(ferry_ib_state.nhca, 0);
    setenv("NCCL_IB_HCA", "=fakeib1", 1);
    assert_int_equal(ferry_ib_usable(&core_cfg, why, sizeof(why)), FERRY_USABLE);
    assert_string_equal(why, "fakeib1:1 is ACTIVE and takes an RC QP");
    /* A filter that matches no port at all is the one cause named, with its fix. */
    setenv("NCCL_IB_HCA", "nosuch", 1);
    assert_int_equal(ferry_ib_usable(&core_cfg, why, sizeof(why)), FERRY_UNUSABLE_MEANT);
    assert_string_equal(why, "NCCL_IB_HCA=nosuch matches none of the RDMA ports fakeib0:1, "
                             "fakeib0:2, fakeib1:1, fakeib1:2; fix NCCL_IB_HCA");
}

static void test_threads_named_and_joined(void **state)
{
    int before, during = 0, after, named0, named1, i;

    (void)state;
    before = test_ib_threads("ferry-ibasync0", &named0);
    assert_int_equal(named0, 0);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
    /* The threads name themselves once running: give them up to a second. */
    for (i = 0; i < 100; i++) {
        during = test_ib_threads("ferry-ibasync0", &named0);
        test_ib_threads("ferry-ibasync1", &named1);
        if (named0 + named1 == 2)
            break;
        test_ib_sleep_ms(10);
    }
    assert_int_equal(during, before + 2);
    assert_int_equal(named0, 1);
    assert_int_equal(named1, 1);
    ferry_ib_fini();
    /* Joined threads are gone; a thread the emulated device started may still be exiting. */
    for (i = 0; i < 200 && (after = test_ib_threads("ferry-ibasync0", &named0)) > before; i++)
        test_ib_sleep_ms(10);
    assert_int_equal(after, before);
    assert_int_equal(named0, 0);
}

static void test_ar_and_relaxed_ordering_overrides(void **state)
{
    (void)state;
    setenv("NCCL_IB_ADAPTIVE_ROUTING", "0", 1);
    setenv("NCCL_IB_PCI_RELAXED_ORDERING", "0", 1);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
    assert_int_equal(ferry_ib_state.devs[0].ar, 0);
    assert_int_equal(ferry_ib_state.hcas[0].relaxed_ordering, 0);
    assert_true(test_ib_log_has(FERRY_LOG_INFO, "NET/ferry : ib backend using [0]fakeib0:1/IB "
                                                "[1]fakeib0:2/IB [2]fakeib1:1/IB "
                                                "[3]fakeib1:2/IB; OOB lo:127.0.0.1"));
}

/* RoCE: fakeibv's GID table is link-local v1/v2 then IPv4-mapped v1/v2. */
static void test_eth_gid_scan(void **state)
{
    char text[64], line[256];

    (void)state;
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
    assert_true(test_ib_log_has(FERRY_LOG_INFO, "NET/ferry : ib backend using [0]fakeib0:1/RoCE "
                                                "[RO]; OOB lo:127.0.0.1"));
    assert_int_equal(ferry_ib_state.devs[0].gid_index, 3);
    ferry_ib_gid_str(&ferry_ib_state.devs[0].gid, text, sizeof(text));
    assert_true(strncmp(text, "::ffff:127.0.", 13) == 0);
    snprintf(line, sizeof(line), "NET/ferry : ib fakeib0:1: GID index 3 %s (AF_INET, RoCE v2)",
             text);
    if (!test_ib_log_has(FERRY_LOG_INFO, line)) {
        test_ib_log_dump();
        fail_msg("no '%s'", line);
    }
    assert_int_equal(ferry_ib_state.devs[0].ar, 0); /* RoCE: off by default. */
}

static void test_eth_gid_variables(void **state)
{
    static const struct {
        const char *var, *value;
        int         index;
    } cases[] = {
        {"NCCL_IB_GID_INDEX", "2", 2},          {"NCCL_IB_ROCE_VERSION_NUM", "1", 2},
        {"NCCL_IB_ADDR_RANGE", "127.0.0.0/8", 3}, {"NCCL_IB_ADDR_RANGE", "10.0.0.0/8", 0},
        {"NCCL_IB_ADDR_FAMILY", "AF_INET6", 0},
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setup(NULL);
        setenv(cases[i].var, cases[i].value, 1);
        assert_int_equal(ferry_ib_init(&core_cfg), FERRY_OK);
        if (ferry_ib_state.devs[0].gid_index != cases[i].index)
            fail_msg("%s=%s: GID %d, want %d", cases[i].var, cases[i].value,
                     ferry_ib_state.devs[0].gid_index, cases[i].index);
        ferry_ib_fini();
        unsetenv(cases[i].var);
    }
    setenv("NCCL_IB_GID_INDEX", "99", 1);
    assert_int_equal(ferry_ib_init(&core_cfg), FERRY_ERR_USAGE);
    assert_int_equal(test_ib_log_count(FERRY_LOG_WARN, "ib fakeib0:1: NCCL_IB_GID_INDEX=99 is past "
                                                       "the port's GID table (4 entries)"), 1);
    assert_int_equal(ferry_ib_state.nhca, 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest ib_tests[] = {
        cmocka_unit_test_setup_teardown(test_init_all_ports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_properties, setup, teardown),
        cmocka_unit_test(test_speed_table),
        cmocka_unit_test_setup_teardown(test_filter_variants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter_excludes_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_port_down_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_oob_interface, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_named_and_joined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ar_and_relaxed_ordering_overrides, setup, teardown),
    };
    const struct CMUnitTest eth_tests[] = {
        cmocka_unit_test_setup_teardown(test_eth_gid_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eth_gid_variables, setup, teardown),
    };

    if (argc > 1 && strcmp(argv[1], "eth") == 0)
        return cmocka_run_group_tests_name("ib_dev_eth", eth_tests, NULL, NULL);
    return cmocka_run_group_tests_name("ib_dev_ib", ib_tests, NULL, NULL);
}
