/*
 * fakeibv unit tests, who sends a request: with FAKEIBV_DIRECT=1 (the
 * default) the posting thread sends a request of at most 8 KiB on the wire
 * itself when the stream has room; bigger ones and a full stream go to the
 * QP's tx thread. Checks, through fakeibv_xfer_stats().direct_ops, which
 * requests went directly, and byte for byte that data and completion order
 * are right when both senders take turns in one chain; a stream filled
 * behind a responder waiting out RNR never blocks ibv_post_send (the test
 * would hang), and everything lands in order once the receive is posted.
 * Run twice by ctest: as is and with FAKEIBV_DIRECT=0 (nothing direct,
 * same data).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define DIRECT_MAX 8192u /* fakeibv_tx.c's FAKEIBV_DIRECT_MAX. */
#define BUF (8u << 20)
#define DEPTH 512

static int direct_on(void)
{
    const char *s = getenv("FAKEIBV_DIRECT");

    return s == NULL || strcmp(s, "0") != 0;
}

static int setup(void **state)
{
    static struct fx_pair x;

    if (fx_pair_open(&x, BUF, DEPTH, 4096) != 0)
        return -1;
    *state = &x;
    return 0;
}

static int teardown(void **state)
{
    fx_pair_close(*state);
    return 0;
}

/* The completion of a streamed request can arrive before the tx thread has
 * let go of the QP; a request posted then goes to the tx thread. Who sends
 * the next one is only defined once the transmitter is idle (bounded: 10 s). */
static void wait_tx_idle(struct ibv_qp *qp)
{
    struct fakeibv_qp_stats st;
    int i;

    for (i = 0; i < 10000; i++) {
        assert_int_equal(fakeibv_qp_stats(qp->qp_num, &st), 0);
        if (!st.tx_busy)
            return;
        usleep(1000);
    }
    fail_msg("qpn 0x%x: the transmitter is still busy after 10 s", qp->qp_num);
}

static uint64_t direct_ops(void)
{
    struct fakeibv_xfer_stats s;

    fakeibv_xfer_stats(&s);
    return s.direct_ops;
}

/* One request at a time on an idle stream: up to 8 KiB and READs go
 * directly, 8 KiB + 1 (streamed by the tx thread) does not. */
static void test_idle_small_direct(void **state)
{
    static const uint32_t sizes[] = { 0, 1, 4096, DIRECT_MAX, DIRECT_MAX + 1, 20000 };
    struct fx_pair *x = *state;
    struct ibv_wc wc;
    uint64_t d0, expect = 0;
    size_t i;

    /* A fresh QP sends nothing before the responder says the stream's mode:
     * one request first, whoever sends it. */
    assert_int_equal(fx_write(x->a, 77, IBV_WR_RDMA_WRITE, x->src, 1, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint32_t n = sizes[i];

        fx_fill(x->src, n + 64, (unsigned)i);
        memset(x->dst, 0xee, n + 64);
        wait_tx_idle(x->a);
        d0 = direct_ops();
        assert_int_equal(fx_write(x->a, i, IBV_WR_RDMA_WRITE, n ? x->src + 3 : NULL, n,
                                  x->src_mr->lkey, (uintptr_t)x->dst + 5, x->dst_mr->rkey,
                                  IBV_SEND_SIGNALED, 0), 0);
        assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
        assert_int_equal(wc.status, IBV_WC_SUCCESS);
        assert_int_equal(wc.wr_id, i);
        assert_memory_equal(x->dst + 5, x->src + 3, n);
        assert_int_equal(x->dst[4], 0xee);
        assert_int_equal(x->dst[5 + n], 0xee);
        expect = direct_on() && n <= DIRECT_MAX;
        assert_int_equal(direct_ops() - d0, expect);
    }
    /* A READ is a header on the wire: direct too. */
    fx_fill(x->dst, 4096, 77);
    memset(x->src, 0, 4096);
    wait_tx_idle(x->a);
    d0 = direct_ops();
    assert_int_equal(fx_write(x->a, 99, IBV_WR_RDMA_READ, x->src, 4096, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0), 0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(x->src, x->dst, 4096);
    assert_int_equal(direct_ops() - d0, direct_on() ? 1 : 0);
}

/* 96 WRITEs, posted one per call, whose sizes alternate between direct
 * and streamed (so poster and tx thread take turns), each to its own
 * region, the last a WRITE_WITH_IMM: every byte right, completions in
 * posting order. */
static void test_mixed_chain_order(void **state)
{
    enum { N = 96 };
    struct fx_pair *x = *state;
    struct ibv_send_wr wr[N], *bad = NULL;
    struct ibv_sge sge[N];
    struct ibv_recv_wr rwr, *rbad = NULL;
    struct ibv_wc wc[N + 1];
    size_t off = 0;
    uint32_t len[N];
    int i, got = 0, k;

    fx_fill(x->src, BUF, 5);
    memset(x->dst, 0xee, BUF);
    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id = 1000;
    assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
    memset(wr, 0, sizeof(wr));
    for (i = 0; i < N; i++) {
        len[i] = i % 3 == 1 ? 40000u + (uint32_t)i : 100u + (uint32_t)i * 80u;
        sge[i] = (struct ibv_sge){ (uintptr_t)x->src + off, len[i], x->src_mr->lkey };
        wr[i].wr_id = (uint64_t)i;
        wr[i].opcode = i == N - 1 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        wr[i].imm_data = 0x1234;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].wr.rdma.remote_addr = (uintptr_t)x->dst + off;
        wr[i].wr.rdma.rkey = x->dst_mr->rkey;
        off += len[i] + 16; /* A 16-byte gap stays untouched. */
    }
    assert_true(off <= BUF);
    for (i = 0; i < N; i++)
        assert_int_equal(ibv_post_send(x->a, &wr[i], &bad), 0);
    while (got < N + 1 && (k = fx_poll(x->f.cq, wc + got, 1, 10000)) == 1)
        got++;
    assert_int_equal(got, N + 1);
    for (i = 0, k = 0; i < N + 1; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            assert_int_equal(wc[i].wr_id, 1000);
            continue;
        }
        assert_int_equal(wc[i].wr_id, (uint64_t)k); /* Send completions in order. */
        k++;
    }
    for (i = 0, off = 0; i < N; i++) {
        assert_memory_equal(x->dst + off, x->src + off, len[i]);
        assert_int_equal(x->dst[off + len[i]], 0xee);
        off += len[i] + 16;
    }
}

/* b's responder waits out RNR on a SEND with no receive posted (rnr_retry
 * 7: for ever); 400 small WRITEs behind it fill the stream. Posting must
 * not block on the full stream: the rest queue for the tx thread. Then the
 * receive, and everything lands in order. */
static void test_full_stream_never_blocks_poster(void **state)
{
    enum { N = 400, LEN = 4096 };
    struct fx_pair *x = *state;
    struct ibv_recv_wr rwr, *rbad = NULL;
    struct ibv_sge rsge = { (uintptr_t)x->dst + (BUF - LEN), LEN, x->dst_mr->lkey };
    struct ibv_wc wc;
    uint64_t d0 = direct_ops();
    int i, got = 0, recv_seen = 0;

    fx_fill(x->src, (size_t)N * LEN + LEN, 9);
    memset(x->dst, 0xee, BUF);
    assert_int_equal(fx_write(x->a, 5000, IBV_WR_SEND, x->src + (size_t)N * LEN, LEN,
                              x->src_mr->lkey, 0, 0, IBV_SEND_SIGNALED, 0), 0);
    for (i = 0; i < N; i++)
        assert_int_equal(fx_write(x->a, (uint64_t)i, IBV_WR_RDMA_WRITE, x->src + (size_t)i * LEN,
                                  LEN, x->src_mr->lkey, (uintptr_t)x->dst + (size_t)i * LEN,
                                  x->dst_mr->rkey, IBV_SEND_SIGNALED, 0), 0);
    /* Nothing completed: the SEND holds the stream. */
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 50), 0);
    if (direct_on())
        assert_true(direct_ops() - d0 < (uint64_t)N + 1); /* The full stream stopped it. */
    else
        assert_int_equal(direct_ops(), d0);
    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id = 6000;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
    while (got < N + 1 && fx_poll(x->f.cq, &wc, 1, 10000) == 1) {
        assert_int_equal(wc.status, IBV_WC_SUCCESS);
        if (wc.wr_id == 6000) {
            recv_seen = 1;
            continue;
        }
        assert_int_equal(wc.wr_id, got == 0 ? 5000 : (uint64_t)(got - 1));
        got++;
    }
    assert_int_equal(got, N + 1);
    if (!recv_seen)
        assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
    assert_memory_equal(x->dst, x->src, (size_t)N * LEN);
    assert_memory_equal(x->dst + (BUF - LEN), x->src + (size_t)N * LEN, LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_small_direct),
        cmocka_unit_test(test_mixed_chain_order),
        cmocka_unit_test(test_full_stream_never_blocks_poster),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
