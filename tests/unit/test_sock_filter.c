/* NCCL_SOCKET_IFNAME syntax: prefixes, ^ exclusion, = exact names, :port, bad lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/netif.h"

static void test_prefix_list(void **state)
{
    ferry_netif_filter_t f;

    assert_int_equal(ferry_netif_filter_parse("eth,ib", &f), 0);
    assert_int_equal(f.n, 2);
    assert_false(f.exclude);
    assert_false(f.exact);
    assert_true(ferry_netif_filter_match(&f, "eth0"));
    assert_true(ferry_netif_filter_match(&f, "ib12"));
    assert_false(ferry_netif_filter_match(&f, "lo"));
    assert_false(ferry_netif_filter_match(&f, "et"));
}

static void test_exclude(void **state)
{
    ferry_netif_filter_t f;

    assert_int_equal(ferry_netif_filter_parse("^docker,lo", &f), 0);
    assert_true(f.exclude);
    assert_false(ferry_netif_filter_match(&f, "docker0"));
    assert_false(ferry_netif_filter_match(&f, "lo"));
    assert_true(ferry_netif_filter_match(&f, "eth0"));
}

static void test_exact(void **state)
{
    ferry_netif_filter_t f;

    assert_int_equal(ferry_netif_filter_parse("=eth1", &f), 0);
    assert_true(f.exact);
    assert_true(ferry_netif_filter_match(&f, "eth1"));
    assert_false(ferry_netif_filter_match(&f, "eth10"));

    assert_int_equal(ferry_netif_filter_parse("^=eth1", &f), 0);
    assert_true(f.exclude && f.exact);
    assert_false(ferry_netif_filter_match(&f, "eth1"));
    assert_true(ferry_netif_filter_match(&f, "eth10"));
}

static void test_port_suffix_ignored(void **state)
{
    ferry_netif_filter_t f;

    assert_int_equal(ferry_netif_filter_parse("eth0:1,ib0:2", &f), 0);
    assert_string_equal(f.names[0], "eth0");
    assert_string_equal(f.names[1], "ib0");
}

static void test_bad_lists(void **state)
{
    ferry_netif_filter_t f;
    char longname[200];

    assert_int_equal(ferry_netif_filter_parse("", &f), -1);
    assert_int_equal(ferry_netif_filter_parse("^", &f), -1);
    assert_int_equal(ferry_netif_filter_parse(",,,", &f), -1);
    assert_int_equal(ferry_netif_filter_parse(NULL, &f), -1);
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(ferry_netif_filter_parse(longname, &f), -1);
    /* Empty entries between commas are skipped, not matched as "everything". */
    assert_int_equal(ferry_netif_filter_parse("eth,,ib", &f), 0);
    assert_int_equal(f.n, 2);
}

/* With lo selected, discovery returns exactly lo with 127.0.0.1 (IPv6 ::1 is skipped). */
static void test_find_lo(void **state)
{
    ferry_netif_t ifs[FERRY_NETIF_MAX];
    char addr[64];
    int n = ferry_netif_find("=lo", AF_UNSPEC, ifs, FERRY_NETIF_MAX);

    assert_int_equal(n, 1);
    assert_string_equal(ifs[0].name, "lo");
    assert_int_equal(ifs[0].addr.ss_family, AF_INET);
    ferry_sockaddr_str((struct sockaddr *)&ifs[0].addr, addr, sizeof(addr));
    assert_string_equal(addr, "127.0.0.1:0");
    assert_int_equal(ferry_netif_find("=lo", AF_INET6, ifs, FERRY_NETIF_MAX), 0);
    assert_int_equal(ferry_netif_find("nosuchif", AF_UNSPEC, ifs, FERRY_NETIF_MAX), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_list),
        cmocka_unit_test(test_exclude),
        cmocka_unit_test(test_exact),
        cmocka_unit_test(test_port_suffix_ignored),
        cmocka_unit_test(test_bad_lists),
        cmocka_unit_test(test_find_lo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
