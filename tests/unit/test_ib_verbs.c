/*
 * Loading libibverbs: a path that does not load, then fakeibv's library
 * (argv[1]) with every member resolved; once loaded, later loads are no-ops.
 * Order matters (the library stays loaded), so the tests run in sequence.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ib/ib_verbs.h"

static const char *fake_lib;

static void test_bad_path_names_what_was_tried(void **state)
{
    char err[1024];

    (void)state;
    assert_int_equal(ferry_ibv_load("/nonexistent/libibverbs.so.1", err, sizeof(err)),
                     FERRY_ERR_UNSUPPORTED);
    assert_string_equal(err, "cannot load libibverbs: tried /nonexistent/libibverbs.so.1 "
                             "(/nonexistent/libibverbs.so.1: cannot open shared object file: No "
                             "such file or directory); install rdma-core's libibverbs "
                             "(libibverbs1 / rdma-core package), or fix NCCL_FERRY_IBVERBS_LIB");
    assert_string_equal(ferry_ibv_loaded_path(), "");
    assert_null(ferry_ibv.open_device);
}

/* A library without the verbs (libdl's own libc here) is refused by name of the first missing one. */
static void test_not_a_verbs_library(void **state)
{
    char err[1024];

    (void)state;
    assert_int_equal(ferry_ibv_load("libc.so.6", err, sizeof(err)), FERRY_ERR_UNSUPPORTED);
    assert_string_equal(err, "libc.so.6 has no ibv_get_device_list (IBVERBS_1.1): it is not a "
                             "usable libibverbs; install rdma-core's libibverbs or point "
                             "NCCL_FERRY_IBVERBS_LIB at one");
    assert_null(ferry_ibv.get_device_list);
}

static void test_loads_fakeibv(void **state)
{
    struct ibv_device **list;
    struct ibv_port_attr attr;
    struct ibv_context *ctx;
    uint32_t speed_ex = 7;
    char err[1024];
    int n = 0;

    (void)state;
    assert_int_equal(ferry_ibv_load(fake_lib, err, sizeof(err)), FERRY_OK);
    assert_string_equal(ferry_ibv_loaded_path(), fake_lib);
    /* Optional members that rdma-core 44 (and fakeibv) has. */
    assert_non_null(ferry_ibv.reg_mr_iova2);
    assert_non_null(ferry_ibv.reg_dmabuf_mr);
    assert_non_null(ferry_ibv.query_gid_ex_sym);
    list = ferry_ibv.get_device_list(&n);
    assert_non_null(list);
    assert_true(n >= 1);
    assert_string_equal(ferry_ibv.get_device_name(list[0]), "fakeib0");
    ctx = ferry_ibv.open_device(list[0]);
    assert_non_null(ctx);
    /* The full struct through the provider's extended query; speed_ex unknown to it: 0. */
    assert_int_equal(ferry_ibv.query_port(ctx, 1, &attr), 0);
    assert_int_equal(attr.state, IBV_PORT_ACTIVE);
    assert_int_equal(attr.link_layer, IBV_LINK_LAYER_INFINIBAND);
    assert_int_equal(ferry_ibv_query_port_ex(ctx, 1, &attr, &speed_ex), 0);
    assert_int_equal(speed_ex, 0);
    assert_int_equal(attr.active_width, 2); /* FAKEIBV_WIDTH=4 is the 4X code. */
    assert_int_not_equal(ferry_ibv.query_port(ctx, 9, &attr), 0);
    /* InfiniBand GIDs have the IB type. */
    assert_int_equal(ferry_ibv_query_gid_type(ctx, 1, 0), IBV_GID_TYPE_IB);
    assert_int_equal(ferry_ibv_query_gid_type(ctx, 1, -1), -1);
    assert_string_equal(ferry_ibv.event_type_str(IBV_EVENT_PORT_ERR), "port error");
    ferry_ibv.close_device(ctx);
    ferry_ibv.free_device_list(list);
}

static void test_second_load_is_a_no_op(void **state)
{
    char err[64] = "untouched";

    (void)state;
    assert_int_equal(ferry_ibv_load("/nonexistent/other.so", err, sizeof(err)), FERRY_OK);
    assert_string_equal(err, "untouched");
    assert_string_equal(ferry_ibv_loaded_path(), fake_lib);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_path_names_what_was_tried),
        cmocka_unit_test(test_not_a_verbs_library),
        cmocka_unit_test(test_loads_fakeibv),
        cmocka_unit_test(test_second_load_is_a_no_op),
    };

    if (argc < 2) {
        fprintf(stderr, "usage: %s <path of fakeibv's libibverbs.so.1>\n", argv[0]);
        return 2;
    }
    fake_lib = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}
