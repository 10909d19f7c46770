/* GID choice over hand-made tables, checked against NCCL 2.28's ncclIbGetGidIndex rules. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "ib/ib_gid.h"

static ferry_ib_gid_entry_t gid(const char *text, int version)
{
    ferry_ib_gid_entry_t e;

    memset(&e, 0, sizeof(e));
    if (text != NULL)
        assert_int_equal(inet_pton(AF_INET6, text, e.gid.raw), 1);
    e.roce_version = version;
    return e;
}

static ferry_ib_gid_want_t want_default(void)
{
    ferry_ib_gid_want_t w;

    memset(&w, 0, sizeof(w));
    w.gid_index = -1;
    w.routable_flid_index = 1;
    w.family = AF_INET;
    w.roce_version = 2;
    return w;
}

static void want_range(ferry_ib_gid_want_t *w, int family, const char *addr, int prefixlen)
{
    w->has_range = 1;
    w->prefixlen = prefixlen;
    assert_int_equal(inet_pton(family, addr, w->range), 1);
}

/* fakeibv's Ethernet table: link-local v1/v2, then IPv4-mapped v1/v2. */
static void test_roce_fakeibv_table(void **state)
{
    ferry_ib_gid_entry_t t[4];
    ferry_ib_gid_want_t w = want_default();
    char why[256];

    (void)state;
    t[0] = gid("fe80::fa4e:1b00:100:5", 1);
    t[1] = gid("fe80::fa4e:1b00:100:5", 2);
    t[2] = gid("::ffff:127.0.0.5", 1);
    t[3] = gid("::ffff:127.0.0.5", 2);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 4, &w, why, sizeof(why)), 3);
    assert_string_equal(why, "AF_INET, RoCE v2");
    w.roce_version = 1;
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 4, &w, why, sizeof(why)), 2);
    assert_string_equal(why, "AF_INET, RoCE v1");
    /* No global IPv6 GID: NCCL keeps index 0. */
    w = want_default();
    w.family = AF_INET6;
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 4, &w, why, sizeof(why)), 0);
    assert_string_equal(why, "no GID of NCCL_IB_ADDR_FAMILY=AF_INET6 that is not link-local; "
                             "index 0 (RoCE v1)");
    /* Without type information the family still decides; the version cannot. */
    w = want_default();
    t[2].roce_version = t[3].roce_version = 0;
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 4, &w, why, sizeof(why)), 2);
    assert_string_equal(why, "AF_INET, but RoCE version unknown where NCCL_IB_ROCE_VERSION_NUM=2 "
                             "is wanted");
}

static void test_roce_ranges(void **state)
{
    ferry_ib_gid_entry_t t[5];
    ferry_ib_gid_want_t w = want_default();
    char why[256];

    (void)state;
    t[0] = gid("fe80::1", 2);
    t[1] = gid("::ffff:10.1.2.3", 2);
    t[2] = gid("::ffff:192.168.7.9", 2);
    t[3] = gid("fd00:1:2:3::9", 2);
    t[4] = gid("2001:db8::9", 2);
    /* Unrestricted: the first valid AF_INET v2 GID stays (a later one of the same kind is no better). */
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 1);
    assert_string_equal(why, "AF_INET, RoCE v2");
    want_range(&w, AF_INET, "10.0.0.0", 8);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 1);
    assert_string_equal(why, "AF_INET inside NCCL_IB_ADDR_RANGE, RoCE v2");
    want_range(&w, AF_INET, "192.168.7.0", 24);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 2);
    want_range(&w, AF_INET, "192.168.7.9", 32);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 2);
    want_range(&w, AF_INET, "172.16.0.0", 12);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 0);
    /* IPv6, word by word, with a partial last word. */
    w = want_default();
    w.family = AF_INET6;
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 3);
    want_range(&w, AF_INET6, "fd00:1::", 32);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 3);
    want_range(&w, AF_INET6, "fd00:1:2:3::", 63);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 3);
    want_range(&w, AF_INET6, "2001:db8::", 33);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 5, &w, why, sizeof(why)), 4);
}

static void test_roce_unset_gids_skipped(void **state)
{
    ferry_ib_gid_entry_t t[4];
    ferry_ib_gid_want_t w = want_default();
    char why[256];

    (void)state;
    t[0] = gid(NULL, 0);               /* All zeros. */
    t[1] = gid("fe80::", 2);           /* Bare prefix: not configured. */
    t[2] = gid("::ffff:10.0.0.1", 2);
    t[3] = gid(NULL, 2);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 4, &w, why, sizeof(why)), 2);
    /* An explicit index is taken as given. */
    w.gid_index = 7;
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_ETHERNET, t, 4, &w, why, sizeof(why)), 7);
    assert_string_equal(why, "NCCL_IB_GID_INDEX=7");
}

static void test_infiniband_flid(void **state)
{
    ferry_ib_gid_entry_t t[2];
    ferry_ib_gid_want_t w = want_default();
    char why[256];

    (void)state;
    t[0] = gid("fe80::fa4e:1b00:100:5", 0);
    /* Bytes 4-5 of the subnet prefix hold the FLID: fec0:0000:0012:.... */
    t[1] = gid("fec0:0:12:1::5", 0);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_INFINIBAND, t, 2, &w, why, sizeof(why)), 1);
    assert_string_equal(why, "InfiniBand, routable FLID 0x12 at NCCL_IB_ROUTABLE_FLID_GID_INDEX=1");
    t[1] = gid("fec0::1:0:0:5", 0);
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_INFINIBAND, t, 2, &w, why, sizeof(why)), 0);
    assert_string_equal(why, "InfiniBand, no routable FLID at NCCL_IB_ROUTABLE_FLID_GID_INDEX=1");
    /* The index past the table, and NCCL_IB_GID_INDEX, do not matter on InfiniBand. */
    w.gid_index = 3;
    assert_int_equal(ferry_ib_gid_choose(IBV_LINK_LAYER_INFINIBAND, t, 1, &w, why, sizeof(why)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roce_fakeibv_table),
        cmocka_unit_test(test_roce_ranges),
        cmocka_unit_test(test_roce_unset_gids_skipped),
        cmocka_unit_test(test_infiniband_flid),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
