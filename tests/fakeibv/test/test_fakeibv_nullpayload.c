/*
 * fakeibv unit tests, null-payload mode (FAKEIBV_NULL_PAYLOAD=1, set by
 * ctest; FAKEIBV_NULL_PAYLOAD_MIN left at its 4 KiB default): work requests
 * complete as on a real device (opcode, byte_len, imm_data, wr_id, status,
 * order, only the signalled ones) while payloads of 4 KiB and more are not
 * moved, so the target keeps its old pattern; smaller ones and inline data
 * (the control writes a plugin reads: clear-to-send entries, sizes, the
 * flush READ) arrive byte for byte; fakeibv_xfer_stats counts every request
 * whose bytes were skipped on both ends; and bad rkeys and ranges still fail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define NULL_MIN 4096u /* FAKEIBV_NULL_PAYLOAD_MIN's default. */
#define MIB (1u << 20)
#define BUF (4u << 20)
#define DEPTH 256
#define KEPT 0xee /* What the target held before; a skipped payload leaves it. */

static int setup(void **state)
{
    static struct fx_pair x;

    if (fx_pair_open(&x, BUF, DEPTH, 1024) != 0)
        return -1;
    *state = &x;
    return 0;
}

static int teardown(void **state)
{
    fx_pair_close(*state);
    return 0;
}

static struct fakeibv_xfer_stats stats(void)
{
    struct fakeibv_xfer_stats s;

    fakeibv_xfer_stats(&s);
    return s;
}

/* Every byte of p[0..n) is b. */
static int all_bytes(const unsigned char *p, size_t n, unsigned char b)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (p[i] != b)
            return 0;
    return 1;
}

static void post_recv0(struct ibv_qp *qp, uint64_t wr_id)
{
    struct ibv_recv_wr rwr, *bad = NULL;

    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id = wr_id;
    assert_int_equal(ibv_post_recv(qp, &rwr, &bad), 0);
}

/* Polls n CQEs into wc and sorts them: the send side (QP a) first. */
static void poll_pair(struct fx_pair *x, struct ibv_wc *wc, int n)
{
    int i, j;

    assert_int_equal(fx_poll(x->f.cq, wc, n, 10000), n);
    for (i = 0; i < n; i++)
        for (j = i + 1; j < n; j++)
            if (wc[j].qp_num == x->a->qp_num && wc[i].qp_num != x->a->qp_num) {
                struct ibv_wc t = wc[i];

                wc[i] = wc[j];
                wc[j] = t;
            }
}

/* 1 MiB WRITE_WITH_IMM: both completions right, the target untouched. */
static void test_write_imm_1m_skipped(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0 = stats(), s1;
    struct ibv_wc wc[2];

    fx_fill(x->src, MIB, 1);
    memset(x->dst, KEPT, MIB + 64);
    post_recv0(x->b, 900);
    assert_int_equal(fx_write(x->a, 901, IBV_WR_RDMA_WRITE_WITH_IMM, x->src, MIB, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED,
                              0x12345678u),
                     0);
    poll_pair(x, wc, 2);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].wr_id, 901);
    assert_int_equal(wc[0].opcode, IBV_WC_RDMA_WRITE);
    assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[1].wr_id, 900);
    assert_int_equal(wc[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    assert_int_equal(wc[1].byte_len, MIB);
    assert_true(wc[1].wc_flags & IBV_WC_WITH_IMM);
    assert_int_equal(wc[1].imm_data, 0x12345678u);
    assert_true(all_bytes(x->dst, MIB + 64, KEPT));
    s1 = stats();
    assert_int_equal(s1.null_ops - s0.null_ops, 1);
    assert_int_equal(s1.null_bytes - s0.null_bytes, MIB);
    assert_int_equal(s1.null_served_ops - s0.null_served_ops, 1);
    assert_int_equal(s1.stream_bytes + s1.one_copy_bytes, s0.stream_bytes + s0.one_copy_bytes);
    printf("null payload: 1 MiB WRITE_WITH_IMM imm 0x%x byte_len %u, target untouched, "
           "null_ops +%llu null_bytes +%llu served +%llu\n",
           wc[1].imm_data, wc[1].byte_len, (unsigned long long)(s1.null_ops - s0.null_ops),
           (unsigned long long)(s1.null_bytes - s0.null_bytes),
           (unsigned long long)(s1.null_served_ops - s0.null_served_ops));
}

/* Below the threshold, and inline at any size, bytes arrive; from it on
 * they do not. One unsignalled chain: only its last WR completes. */
static void test_threshold_and_chain(void **state)
{
    static const uint32_t sizes[] = { 1, 64, 512, NULL_MIN - 1, NULL_MIN, 256 << 10 };
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0 = stats(), s1;
    struct ibv_wc wc[2];
    size_t off[N], at = 0;
    uint64_t skipped = 0, skipped_bytes = 0;
    int i;

    for (i = 0; i < N; i++) {
        off[i] = at;
        at += sizes[i] + 4096;
    }
    fx_fill(x->src, at, 2);
    memset(x->dst, KEPT, at);
    post_recv0(x->b, 800);
    for (i = 0; i < N; i++) {
        int last = i == N - 1;
        /* 64 B goes inline (the pair's QPs allow 64). */
        unsigned flags = (sizes[i] == 64 ? IBV_SEND_INLINE : 0) | (last ? IBV_SEND_SIGNALED : 0);

        assert_int_equal(fx_write(x->a, 810 + (uint64_t)i,
                                  last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                                  x->src + off[i], sizes[i], x->src_mr->lkey,
                                  (uintptr_t)(x->dst + off[i]), x->dst_mr->rkey, flags, 77),
                         0);
        if (sizes[i] >= NULL_MIN) {
            skipped++;
            skipped_bytes += sizes[i];
        }
    }
    poll_pair(x, wc, 2);
    assert_int_equal(wc[0].wr_id, 810 + N - 1); /* The unsignalled ones gave no CQE. */
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[1].wr_id, 800);
    assert_int_equal(wc[1].byte_len, sizes[N - 1]);
    assert_int_equal(wc[1].imm_data, 77);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 50), 0);
    for (i = 0; i < N; i++) {
        if (sizes[i] < NULL_MIN)
            assert_memory_equal(x->dst + off[i], x->src + off[i], sizes[i]);
        else
            assert_true(all_bytes(x->dst + off[i], sizes[i], KEPT));
        /* Neighbours untouched either way. */
        assert_true(all_bytes(x->dst + off[i] + sizes[i], 4096, KEPT));
    }
    s1 = stats();
    assert_int_equal(s1.null_ops - s0.null_ops, skipped);
    assert_int_equal(s1.null_bytes - s0.null_bytes, skipped_bytes);
    assert_int_equal(s1.null_served_ops - s0.null_served_ops, skipped);
    printf("null payload: 1, 64 (inline), 512, 4095 B arrived byte for byte; 4096 B and 256 KiB "
           "skipped (%llu requests)\n",
           (unsigned long long)(s1.null_ops - s0.null_ops));
}

static void post_read(struct fx_pair *x, uint64_t wr_id, unsigned char *local, uint32_t len,
                      const unsigned char *remote)
{
    struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = x->dst_mr->lkey };
    struct ibv_send_wr wr, *bad = NULL;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)remote;
    wr.wr.rdma.rkey = x->src_mr->rkey;
    assert_int_equal(ibv_post_send(x->a, &wr, &bad), 0);
}

/* READ: 1 MiB completes with nothing placed; a 1-byte flush READ reads. */
static void test_read(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0 = stats(), s1;
    struct ibv_wc wc;

    fx_fill(x->src, MIB, 3);
    memset(x->dst, KEPT, MIB + 64);
    post_read(x, 700, x->dst, MIB, x->src);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.wr_id, 700);
    assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
    assert_true(all_bytes(x->dst, MIB + 64, KEPT));
    post_read(x, 701, x->dst + MIB, 1, x->src + 5);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.wr_id, 701);
    assert_int_equal(x->dst[MIB], x->src[5]);
    s1 = stats();
    assert_int_equal(s1.null_ops - s0.null_ops, 1);
    assert_int_equal(s1.null_served_ops - s0.null_served_ops, 1);
}

/* SEND_WITH_IMM of 64 KiB into a two-SGE receive: RECV with imm and
 * byte_len, the receive buffers untouched. */
static void test_send(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0 = stats(), s1;
    struct ibv_sge rsge[2] = {
        { .addr = (uintptr_t)x->dst, .length = 40000, .lkey = x->dst_mr->lkey },
        { .addr = (uintptr_t)(x->dst + 65536), .length = 40000, .lkey = x->dst_mr->lkey },
    };
    struct ibv_recv_wr rwr, *rbad = NULL;
    struct ibv_wc wc[2];

    fx_fill(x->src, 65536, 4);
    memset(x->dst, KEPT, 2 * 65536);
    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id = 600;
    rwr.sg_list = rsge;
    rwr.num_sge = 2;
    assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
    assert_int_equal(fx_write(x->a, 601, IBV_WR_SEND_WITH_IMM, x->src, 65536, x->src_mr->lkey, 0,
                              0, IBV_SEND_SIGNALED, 0xabcd),
                     0);
    poll_pair(x, wc, 2);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].opcode, IBV_WC_SEND);
    assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[1].wr_id, 600);
    assert_int_equal(wc[1].opcode, IBV_WC_RECV);
    assert_int_equal(wc[1].byte_len, 65536);
    assert_int_equal(wc[1].imm_data, 0xabcd);
    assert_true(all_bytes(x->dst, 2 * 65536, KEPT));
    s1 = stats();
    assert_int_equal(s1.null_ops - s0.null_ops, 1);
}

/* A bad rkey is still refused: REM_ACCESS_ERR, nothing placed. Last: the
 * QPs end in ERR. */
static void test_bad_rkey(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_wc wc[2];

    memset(x->dst, KEPT, MIB);
    assert_int_equal(fx_write(x->a, 500, IBV_WR_RDMA_WRITE, x->src, MIB, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey + 1000, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 10000), 1);
    assert_int_equal(wc[0].wr_id, 500);
    assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
    assert_true(all_bytes(x->dst, MIB, KEPT));
}

int main(void)
{
    const char *on = getenv("FAKEIBV_NULL_PAYLOAD");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_imm_1m_skipped),
        cmocka_unit_test(test_threshold_and_chain),
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_send),
        cmocka_unit_test(test_bad_rkey),
    };

    if (on == NULL || strcmp(on, "1") != 0 || getenv("FAKEIBV_NULL_PAYLOAD_MIN") != NULL) {
        fprintf(stderr, "run with FAKEIBV_NULL_PAYLOAD=1 and the default threshold\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, setup, teardown);
}
