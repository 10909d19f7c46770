/*
 * NCCL's setNetAttr hints: the core's check and keeping of them
 * (core/net_hints.c), the socket backend's streams from them and its
 * variable (socket/sock_hints.c), and the acceptor's check of a connector's
 * proposed stream count (ferry_sock_hello_check_fewer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/log.h"
#include "core/net_hints.h"
#include "socket/sock.h"
#include "socket/sock_hints.h"
#include "test_config_util.h"


static int setup_logger(void **state)
{
    (void)state;
    ferry_log_set(capture_log);
    warns = 0;
    last_warn[0] = '\0';
    unsetenv("NCCL_FERRY_NET_HINTS");
    return 0;
}

static const ferry_net_attr_side_t undef_side = { -1, -1, -1, -1 };

/* What NCCL 2.30's proxy passes before a collective connection of 8 ranks, 4 channels. */
static ferry_net_attr_t conn_attr(int peers, int flows)
{
    ferry_net_attr_t a;

    a.send.max_peers = peers;
    a.send.min_peers = 1;
    a.send.max_flows = flows;
    a.send.min_flows = 1;
    a.recv = a.send;
    a.op = a.algo = a.proto = (uint32_t)FERRY_NET_ATTR_UNDEF;
    return a;
}

static void test_side_check_accepts_nccl_shapes(void **state)
{
    ferry_net_attr_side_t s = { 6, 1, 4, 1 };
    ferry_net_hint_t h;
    char why[256] = "";

    (void)state;
    assert_int_equal(ferry_net_attr_side_check(&s, "sendCommAttr", &h, why, sizeof(why)), 0);
    assert_int_equal(h.flows, 4);
    assert_int_equal(h.peers, 6);
    assert_string_equal(why, "");
    /* Unset everywhere: no hint, nothing refused. */
    assert_int_equal(ferry_net_attr_side_check(&undef_side, "sendCommAttr", &h, why,
                                               sizeof(why)), 0);
    assert_int_equal(h.flows, 0);
    assert_int_equal(h.peers, 0);
    assert_string_equal(why, "");
    /* One max unset: no usable pair, but nothing wrong either. */
    s.max_flows = FERRY_NET_ATTR_UNDEF;
    assert_int_equal(ferry_net_attr_side_check(&s, "sendCommAttr", &h, why, sizeof(why)), 0);
    assert_int_equal(h.flows, 0);
    /* The largest accepted values. */
    s.max_peers = FERRY_NET_HINT_PEERS_MAX;
    s.max_flows = FERRY_NET_HINT_FLOWS_MAX;
    assert_int_equal(ferry_net_attr_side_check(&s, "recvCommAttr", &h, why, sizeof(why)), 0);
    assert_int_equal(h.flows, FERRY_NET_HINT_FLOWS_MAX);
    assert_int_equal(h.peers, FERRY_NET_HINT_PEERS_MAX);
}

static void test_side_check_refuses_garbage(void **state)
{
    static const struct {
        ferry_net_attr_side_t side;
        int                   refused;
        const char           *words;
    } cases[] = {
        { { -5, 1, 4, 1 }, 1, "sendCommAttr.maxConcurrentPeers=-5 (negative)" },
        { { 6, 1, 0, 1 }, 1, "sendCommAttr.maxFlowsPerPeer=0 (zero, not a count)" },
        { { 65537, 1, 4, 1 }, 1, "sendCommAttr.maxConcurrentPeers=65537 (above 65536)" },
        { { 6, 1, 1025, 1 }, 1, "sendCommAttr.maxFlowsPerPeer=1025 (above 1024)" },
        { { 6, 1, 2147483647, 1 }, 1, "maxFlowsPerPeer=2147483647 (above 1024)" },
        { { 6, -2147483647 - 1, 4, 1 }, 1, "minConcurrentPeers=-2147483648 (negative)" },
        { { 6, 7, 4, 1 }, 1, "minConcurrentPeers=7 (above maxConcurrentPeers)" },
        { { 6, 1, 4, 5 }, 1, "minFlowsPerPeer=5 (above maxFlowsPerPeer)" },
        { { -7, -7, -7, -7 }, 4, "minFlowsPerPeer=-7 (negative)" },
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ferry_net_hint_t h = { 99, 99 };
        char why[512] = "";
        int refused = ferry_net_attr_side_check(&cases[i].side, "sendCommAttr", &h, why,
                                                sizeof(why));

        printf("  %-55s -> %d refused, hint %d x %d: %s\n", cases[i].words, refused, h.flows,
               h.peers, why);
        assert_int_equal(refused, cases[i].refused);
        assert_non_null(strstr(why, cases[i].words));
        /* A refused max leaves no hint; a refused min keeps the maxes. */
        if (strstr(cases[i].words, ".max") != NULL || cases[i].side.max_peers < 0)
            assert_int_equal(h.flows, 0);
    }
}

static void test_xfer_shape(void **state)
{
    ferry_net_attr_t a = conn_attr(6, 4);

    (void)state;
    assert_int_equal(ferry_net_attr_is_xfer(&a), 0);
    /* p2p connection hints: Send, Recv, AlltoAll, Scatter, Gather. */
    a.op = (1u << 5) | (1u << 6) | (1u << 8) | (1u << 9) | (1u << 10);
    assert_int_equal(ferry_net_attr_is_xfer(&a), 0);
    a.op = 1u << 4; /* One operation: a transfer's. */
    assert_int_equal(ferry_net_attr_is_xfer(&a), 1);
    a.op = 0;
    assert_int_equal(ferry_net_attr_is_xfer(&a), 0);
}

static void test_hints_kept_replaced_and_summarised(void **state)
{
    ferry_net_hints_t hints;
    ferry_net_attr_t a = conn_attr(6, 4), x, bad;
    ferry_net_hint_t h;
    char sum[512];

    (void)state;
    memset(&hints, 0, sizeof(hints));
    ferry_net_hints_summary(&hints, sum, sizeof(sum));
    assert_string_equal(sum, "");
    h = ferry_net_hints_send(&hints);
    assert_int_equal(h.flows, 0);

    ferry_net_hints_set(&hints, &a, 0xabc);
    h = ferry_net_hints_send(&hints);
    assert_int_equal(h.flows, 4);
    assert_int_equal(h.peers, 6);
    h = ferry_net_hints_recv(&hints);
    assert_int_equal(h.flows, 4);
    assert_int_equal(warns, 0);

    /* A transfer's hints (one op, its peers and channels) leave the connection's alone. */
    x = a;
    x.send.max_peers = x.send.min_peers = 1;
    x.send.max_flows = x.send.min_flows = 2;
    x.op = 1u << 4;
    x.algo = 1u << 1;
    x.proto = 1u << 2;
    ferry_net_hints_set(&hints, &x, 0xabc);
    h = ferry_net_hints_send(&hints);
    assert_int_equal(h.flows, 4);
    assert_int_equal(h.peers, 6);

    /* The latest connection call describes the next connection: a bad side has no hint. */
    bad = conn_attr(6, 4);
    bad.send.max_flows = -3;
    ferry_net_hints_set(&hints, &bad, 0xabc);
    h = ferry_net_hints_send(&hints);
    assert_int_equal(h.flows, 0);
    h = ferry_net_hints_recv(&hints);
    assert_int_equal(h.flows, 4);
    assert_int_equal(warns, 1);
    assert_non_null(strstr(last_warn, "setNetAttr(comm 0xabc): ignored "
                                      "sendCommAttr.maxFlowsPerPeer=-3 (negative)"));

    ferry_net_hints_summary(&hints, sum, sizeof(sum));
    printf("  summary: %s\n", sum);
    assert_non_null(strstr(sum, "2 connection hint(s) (last: send none, recv 4 flows x 6 peers), "
                                "1 field(s) ignored; 1 per-transfer hint(s) (last: op 0x10 algo "
                                "0x2 proto 0x4, send 1 peers x 2 channels"));
}

/* NCCL calling for every connection with a broken struct: the WARN stays within its limit. */
static void test_bad_hints_warn_limited(void **state)
{
    ferry_net_hints_t hints;
    ferry_net_attr_t bad = conn_attr(0, 4);
    int i;

    (void)state;
    memset(&hints, 0, sizeof(hints));
    for (i = 0; i < 1000; i++)
        ferry_net_hints_set(&hints, &bad, 1);
    printf("  1000 bad connection hints: %d WARN lines, %u fields counted\n", warns,
           atomic_load(&hints.ignored));
    assert_true(warns <= FERRY_LOG_LIMIT_BURST + 1);
    assert_int_equal(atomic_load(&hints.ignored), 2000);
}

static ferry_sock_config_t cfg_streams(int streams)
{
    ferry_sock_config_t cfg;

    memset(&cfg, 0, sizeof(cfg)); /* Every source FERRY_CFG_DEFAULT. */
    cfg.streams = streams;
    return cfg;
}

static void test_streams_arithmetic(void **state)
{
    static const struct {
        int streams, offered, flows, peers, expect;
    } cases[] = {
        { 4, 4, 1, 1, 4 },         /* One connection: the default. */
        { 4, 4, 1, 2, 4 },         /* 64 / 2 = 32, capped by the default. */
        { 4, 4, 2, 8, 4 },         /* 64 / 16 = 4. */
        { 4, 4, 4, 6, 2 },         /* A collective on 8 ranks, 4 channels: 64 / 24. */
        { 4, 4, 8, 6, 1 },         /* 64 / 48. */
        { 4, 4, 8, 64, 1 },        /* Below 1: at least 1. */
        { 4, 4, 1024, 65536, 1 },  /* The largest hints: no overflow. */
        { 4, 2, 1, 1, 2 },         /* Never above what the listener offered. */
        { 3, 4, 1, 1, 3 },         /* Never above this side's default. */
        { 8, 8, 2, 2, 8 },         /* 64 / 4 = 16, capped by 8. */
        { 8, 8, 4, 4, 4 },         /* 64 / 16. */
    };
    ferry_sock_streams_why_t why;
    char words[320];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ferry_sock_config_t cfg = cfg_streams(cases[i].streams);
        ferry_net_hint_t h = { cases[i].flows, cases[i].peers };
        int n = ferry_sock_hints_streams(&cfg, 1, 1, h, cases[i].offered, &why);

        ferry_sock_hints_words(why, h, cases[i].offered, words, sizeof(words));
        printf("  default %d, offered %d, %4d flows x %5d peers -> %d streams%s\n",
               cases[i].streams, cases[i].offered, cases[i].flows, cases[i].peers, n, words);
        assert_int_equal(n, cases[i].expect);
        assert_int_equal(why, FERRY_SOCK_STREAMS_HINTS);
        assert_non_null(strstr(words, "NCCL's hints"));
    }
}

static void test_streams_without_hints(void **state)
{
    ferry_sock_config_t cfg = cfg_streams(4);
    ferry_net_hint_t h = { 8, 8 }, none = { 0, 0 };
    ferry_sock_streams_why_t why;
    char words[320];

    (void)state;
    /* Off: the offer, and the connect line reads as it always has. */
    assert_int_equal(ferry_sock_hints_streams(&cfg, 0, 1, h, 4, &why), 4);
    assert_int_equal(why, FERRY_SOCK_STREAMS_OFFERED);
    ferry_sock_hints_words(why, h, 4, words, sizeof(words));
    assert_string_equal(words, "");
    /* A listener that takes no fewer (off there, or older). */
    assert_int_equal(ferry_sock_hints_streams(&cfg, 1, 0, h, 4, &why), 4);
    assert_int_equal(why, FERRY_SOCK_STREAMS_OLD_LISTENER);
    ferry_sock_hints_words(why, h, 4, words, sizeof(words));
    assert_non_null(strstr(words, "takes no fewer"));
    /* No hints on the context. */
    assert_int_equal(ferry_sock_hints_streams(&cfg, 1, 1, none, 3, &why), 3);
    assert_int_equal(why, FERRY_SOCK_STREAMS_NO_HINTS);
    ferry_sock_hints_words(why, none, 3, words, sizeof(words));
    assert_non_null(strstr(words, "from its budget"));
    /* The user's settings win: each of the three variables. */
    cfg.src[FERRY_SOCK_CFG_STREAMS] = FERRY_CFG_ENV;
    assert_int_equal(ferry_sock_hints_streams(&cfg, 1, 1, h, 4, &why), 4);
    assert_int_equal(why, FERRY_SOCK_STREAMS_EXPLICIT);
    cfg = cfg_streams(4);
    cfg.src[FERRY_SOCK_CFG_SOCKET_NTHREADS] = FERRY_CFG_ENV;
    assert_int_equal(ferry_sock_hints_streams(&cfg, 1, 1, h, 4, &why), 4);
    assert_int_equal(why, FERRY_SOCK_STREAMS_EXPLICIT);
    cfg = cfg_streams(4);
    cfg.src[FERRY_SOCK_CFG_NSOCKS_PERTHREAD] = FERRY_CFG_ENV;
    assert_int_equal(ferry_sock_hints_streams(&cfg, 1, 1, h, 4, &why), 4);
    ferry_sock_hints_words(why, h, 4, words, sizeof(words));
    assert_non_null(strstr(words, "wins over NCCL's hints"));
}

static void test_variable(void **state)
{
    ferry_sock_hints_config_t cfg;
    char line[128] = "x";

    (void)state;
    assert_int_equal(ferry_sock_hints_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.net_hints, 0);
    ferry_sock_hints_format(&cfg, line, sizeof(line));
    assert_string_equal(line, "x net_hints=0(default)");
    setenv("NCCL_FERRY_NET_HINTS", "1", 1);
    assert_int_equal(ferry_sock_hints_load(&cfg), FERRY_OK);
    assert_int_equal(cfg.net_hints, 1);
    line[1] = '\0';
    ferry_sock_hints_format(&cfg, line, sizeof(line));
    assert_string_equal(line, "x net_hints=1(env)");
    setenv("NCCL_FERRY_NET_HINTS", "2", 1);
    assert_int_equal(ferry_sock_hints_load(&cfg), FERRY_ERR_USAGE);
    assert_non_null(strstr(last_warn, "NCCL_FERRY_NET_HINTS"));
    unsetenv("NCCL_FERRY_NET_HINTS");
}

static ferry_sock_hello_t hello_of(uint16_t lane, uint16_t nlanes)
{
    ferry_sock_hello_t h;

    memset(&h, 0, sizeof(h));
    h.magic = FERRY_SOCK_MAGIC;
    h.version = FERRY_SOCK_WIRE_VERSION;
    h.hdr_size = sizeof(h);
    h.lane = lane;
    h.nlanes = nlanes;
    h.token = 77;
    h.conn_id = 5;
    return h;
}

static void test_hello_proposals(void **state)
{
    ferry_sock_hello_t h;
    char why[192];

    (void)state;
    /* Every count from 1 to the offer, every lane below it. */
    h = hello_of(0, 1);
    assert_null(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)));
    h = hello_of(1, 2);
    assert_null(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)));
    h = hello_of(3, 4);
    assert_null(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)));
    /* An old connector's hello: the offer itself. The exact check still wants exactly it. */
    assert_null(ferry_sock_hello_check(&h, 77, 4));
    h = hello_of(0, 2);
    assert_non_null(ferry_sock_hello_check(&h, 77, 4));
    /* Hostile counts. */
    h = hello_of(0, 0);
    assert_non_null(strstr(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)),
                           "proposes 0 streams"));
    h = hello_of(0, 5);
    assert_non_null(strstr(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)),
                           "proposes 5 streams for its connection, where this listener takes "
                           "1..4"));
    h = hello_of(0, 65535);
    assert_non_null(strstr(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)),
                           "proposes 65535 streams"));
    h = hello_of(2, 2);
    assert_non_null(strstr(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)),
                           "stream 2 of a connection of 2 streams"));
    /* Who it is comes first: a stranger is named as one, whatever its count. */
    h = hello_of(0, 0);
    h.token = 78;
    assert_non_null(strstr(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)),
                           "wrong token"));
    h = hello_of(0, 2);
    h.magic ^= 1;
    assert_non_null(strstr(ferry_sock_hello_check_fewer(&h, 77, 4, why, sizeof(why)),
                           "magic"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_side_check_accepts_nccl_shapes, setup_logger),
        cmocka_unit_test_setup(test_side_check_refuses_garbage, setup_logger),
        cmocka_unit_test_setup(test_xfer_shape, setup_logger),
        cmocka_unit_test_setup(test_hints_kept_replaced_and_summarised, setup_logger),
        cmocka_unit_test_setup(test_bad_hints_warn_limited, setup_logger),
        cmocka_unit_test_setup(test_streams_arithmetic, setup_logger),
        cmocka_unit_test_setup(test_streams_without_hints, setup_logger),
        cmocka_unit_test_setup(test_variable, setup_logger),
        cmocka_unit_test_setup(test_hello_proposals, setup_logger),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
