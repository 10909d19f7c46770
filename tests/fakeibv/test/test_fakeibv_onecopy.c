/*
 * fakeibv unit tests, one-copy mode: payload requests of at least
 * FAKEIBV_ONE_COPY_MIN bytes from host memory go as descriptors and the
 * responder copies with process_vm_readv/writev. Checks, through
 * fakeibv_xfer_stats(), which path each request took, and byte for byte
 * that the data is right on both sides of the threshold for WRITE,
 * WRITE_WITH_IMM (two SGEs), READ (two SGEs) and SEND; REM_ACCESS_ERR for a
 * bad rkey on a descriptor WRITE and READ; LOC_PROT_ERR for a bad lkey; a
 * failed probe falls back to streaming. Run twice by ctest: as is
 * (one-copy expected) and with FAKEIBV_ONE_COPY=0 (everything streams,
 * same data).
 */
#include <endian.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define MIN (64u << 10) /* FAKEIBV_ONE_COPY_MIN's default; ctest leaves it unset. */
#define BUF (4u << 20)

static int one_copy_on(void)
{
    const char *s = getenv("FAKEIBV_ONE_COPY");

    return s == NULL || strcmp(s, "0") != 0;
}

static int setup(void **state)
{
    static struct fx_pair x;

    if (fx_pair_open(&x, BUF, 64, 256) != 0)
        return -1;
    *state = &x;
    return 0;
}

static int teardown(void **state)
{
    fx_pair_close(*state);
    return 0;
}

static int reset_pair(void **state)
{
    teardown(state);
    return setup(state);
}

/* The sizes around the threshold, and a large one. */
static const uint32_t sizes[] = { 1, MIN - 1, MIN, MIN + 1, 1u << 20, BUF - 8 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* How many of these sizes go as descriptors when one-copy is on. */
static uint64_t desc_expected(void)
{
    uint64_t n = 0;
    size_t i;

    for (i = 0; i < NSIZES; i++)
        n += one_copy_on() && sizes[i] >= MIN;
    return n;
}

static void expect_paths(const struct fakeibv_xfer_stats *s0, uint64_t ndesc, uint64_t nall)
{
    struct fakeibv_xfer_stats s1;

    fakeibv_xfer_stats(&s1);
    assert_int_equal(s1.one_copy_ops - s0->one_copy_ops, ndesc);
    assert_int_equal(s1.stream_ops - s0->stream_ops, nall - ndesc);
}

static void test_probe_result(void **state)
{
    struct fakeibv_xfer_stats s;

    (void)state;
    fakeibv_xfer_stats(&s);
    /* Two streams accepted (a->b, b->a), both probed in this process
     * (a WR has gone both ways by now, so both hellos were handled). */
    if (one_copy_on()) {
        assert_true(s.probes_ok >= 2);
    } else {
        assert_int_equal(s.probes_ok, 0);
        assert_true(s.probes_failed >= 2);
    }
}

static void test_write_sizes(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0;
    struct ibv_wc wc;
    size_t i;

    fakeibv_xfer_stats(&s0);
    for (i = 0; i < NSIZES; i++) {
        uint32_t n = sizes[i], off = (uint32_t)(i * 5); /* Unaligned source. */

        if (n + off > BUF)
            off = BUF - n;
        fx_fill(x->src, BUF, (unsigned)i);
        memset(x->dst, 0xee, BUF);
        assert_int_equal(fx_write(x->a, i, IBV_WR_RDMA_WRITE, x->src + off, n, x->src_mr->lkey,
                                  (uintptr_t)x->dst + 7, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0),
                         0);
        assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
        assert_int_equal(wc.status, IBV_WC_SUCCESS);
        assert_int_equal(wc.wr_id, i);
        assert_memory_equal(x->dst + 7, x->src + off, n);
        assert_int_equal(x->dst[6], 0xee);            /* Nothing before ... */
        if (n + 7 < BUF)
            assert_int_equal(x->dst[7 + n], 0xee);    /* ... nor after. */
    }
    expect_paths(&s0, desc_expected(), NSIZES);
}

/* WRITE_WITH_IMM from two SGEs into a 0-SGE receive. */
static void test_write_imm_two_sges(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0;
    struct ibv_wc wc[2];
    size_t i;

    fakeibv_xfer_stats(&s0);
    for (i = 0; i < NSIZES; i++) {
        uint32_t n = sizes[i] < BUF / 2 ? sizes[i] : BUF / 2, h1 = n / 3, h2 = n - h1;
        struct ibv_sge sge[2] = {
            { (uintptr_t)x->src + BUF / 2 + 11, h1, x->src_mr->lkey },
            { (uintptr_t)x->src + 3, h2, x->src_mr->lkey },
        };
        struct ibv_send_wr wr, *bad;
        struct ibv_recv_wr rwr = { .wr_id = 900 + i }, *rbad;
        int k, got_send = 0, got_recv = 0;

        fx_fill(x->src, BUF, (unsigned)(i + 40));
        memset(x->dst, 0, BUF);
        assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 100 + i;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.sg_list = h1 ? sge : sge + 1;
        wr.num_sge = h1 ? 2 : 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm_data = htobe32(0xabc00000u + (uint32_t)i);
        wr.wr.rdma.remote_addr = (uintptr_t)x->dst;
        wr.wr.rdma.rkey = x->dst_mr->rkey;
        assert_int_equal(ibv_post_send(x->a, &wr, &bad), 0);
        assert_int_equal(fx_poll(x->f.cq, wc, 2, 10000), 2);
        for (k = 0; k < 2; k++) {
            assert_int_equal(wc[k].status, IBV_WC_SUCCESS);
            if (wc[k].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                got_recv = 1;
                assert_int_equal(wc[k].wr_id, 900 + i);
                assert_int_equal(wc[k].byte_len, n);
                assert_true(wc[k].wc_flags & IBV_WC_WITH_IMM);
                assert_int_equal(be32toh(wc[k].imm_data), 0xabc00000u + (uint32_t)i);
            } else {
                got_send = 1;
                assert_int_equal(wc[k].wr_id, 100 + i);
            }
        }
        assert_true(got_send && got_recv);
        assert_memory_equal(x->dst, x->src + BUF / 2 + 11, h1);
        assert_memory_equal(x->dst + h1, x->src + 3, h2);
    }
    expect_paths(&s0, desc_expected(), NSIZES);
}

/* READ into two SGEs (the responder writes the requester's memory). */
static void test_read_two_sges(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0;
    struct ibv_wc wc;
    size_t i;

    fakeibv_xfer_stats(&s0);
    for (i = 0; i < NSIZES; i++) {
        uint32_t n = sizes[i] < BUF / 2 ? sizes[i] : BUF / 2, h1 = n - n / 4, h2 = n / 4;
        struct ibv_sge sge[2] = {
            { (uintptr_t)x->src + 1, h1, x->src_mr->lkey },
            { (uintptr_t)x->src + BUF / 2 + 5, h2, x->src_mr->lkey },
        };
        struct ibv_send_wr wr, *bad;

        fx_fill(x->dst, BUF, (unsigned)(i + 80));
        memset(x->src, 0x5a, BUF);
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 200 + i;
        wr.opcode = IBV_WR_RDMA_READ;
        wr.sg_list = sge;
        wr.num_sge = h2 ? 2 : 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = (uintptr_t)x->dst + 9;
        wr.wr.rdma.rkey = x->dst_mr->rkey;
        assert_int_equal(ibv_post_send(x->a, &wr, &bad), 0);
        assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
        assert_int_equal(wc.status, IBV_WC_SUCCESS);
        assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
        assert_memory_equal(x->src + 1, x->dst + 9, h1);
        assert_memory_equal(x->src + BUF / 2 + 5, x->dst + 9 + h1, h2);
        assert_int_equal(x->src[0], 0x5a);
        assert_int_equal(x->src[1 + h1], 0x5a);
    }
    expect_paths(&s0, desc_expected(), NSIZES);
}

/* SEND scattered into a two-SGE receive. */
static void test_send_scatter(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0;
    struct ibv_wc wc[2];
    size_t i;

    fakeibv_xfer_stats(&s0);
    for (i = 0; i < NSIZES; i++) {
        uint32_t n = sizes[i] < BUF / 2 ? sizes[i] : BUF / 2, r1 = n / 2 + 1;
        struct ibv_sge rs[2] = {
            { (uintptr_t)x->dst + BUF / 2, r1, x->dst_mr->lkey },
            { (uintptr_t)x->dst, BUF / 2, x->dst_mr->lkey },
        };
        struct ibv_recv_wr rwr = { .wr_id = 300 + i, .sg_list = rs, .num_sge = 2 }, *rbad;
        int k;

        fx_fill(x->src, BUF, (unsigned)(i + 120));
        memset(x->dst, 0, BUF);
        assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
        assert_int_equal(fx_write(x->a, 400 + i, IBV_WR_SEND, x->src, n, x->src_mr->lkey, 0, 0,
                                  IBV_SEND_SIGNALED, 0),
                         0);
        assert_int_equal(fx_poll(x->f.cq, wc, 2, 10000), 2);
        for (k = 0; k < 2; k++) {
            assert_int_equal(wc[k].status, IBV_WC_SUCCESS);
            if (wc[k].opcode == IBV_WC_RECV)
                assert_int_equal(wc[k].byte_len, n);
        }
        if (n <= r1) {
            assert_memory_equal(x->dst + BUF / 2, x->src, n);
        } else {
            assert_memory_equal(x->dst + BUF / 2, x->src, r1);
            assert_memory_equal(x->dst, x->src + r1, n - r1);
        }
    }
    expect_paths(&s0, desc_expected(), NSIZES);
}

static void expect_access_error(struct fx_pair *x, uint64_t wr_id)
{
    struct ibv_wc wc[2];
    struct ibv_async_event ev;

    assert_int_equal(fx_poll(x->f.cq, wc, 2, 5000), 2);
    assert_int_equal(wc[0].wr_id, wr_id);
    assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(wc[1].wr_id, wr_id + 1);
    assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(fx_state(x->a), IBV_QPS_ERR);
    assert_int_equal(ibv_get_async_event(x->f.ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
    assert_ptr_equal(ev.element.qp, x->b);
    ibv_ack_async_event(&ev);
}

/*
 * A descriptor SEND waits for its receive (RNR) when the requester's link
 * goes down. Its payload was still on the wire then: once a receive is
 * posted the responder fetches the bytes, sees the stream cut with nothing
 * after this request, and completes nothing (streaming mode gets the same
 * from the socket itself).
 */
static void test_cut_under_descriptor(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_sge rs = { (uintptr_t)x->dst, 1u << 20, x->dst_mr->lkey };
    struct ibv_recv_wr rwr = { .wr_id = 90, .sg_list = &rs, .num_sge = 1 }, *rbad;
    struct ibv_wc wc[4];
    struct timespec t0;
    int n, k;

    if (!one_copy_on())
        skip();
    fx_fill(x->src, 1u << 20, 90);
    assert_int_equal(fx_write(x->a, 91, IBV_WR_SEND, x->src, 1u << 20, x->src_mr->lkey, 0, 0,
                              IBV_SEND_SIGNALED, 0),
                     0);
    usleep(200000); /* The responder holds the descriptor and waits for a receive. */
    assert_int_equal(fakeibv_inject(x->f.ctx, FAKEIBV_FAULT_QP_LINK_DOWN, x->a->qp_num, 0, 0, 0),
                     0);
    assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (fx_ms_since(&t0) < 1000) {
        n = fx_poll(x->f.cq, wc, 4, 100);
        for (k = 0; k < n; k++)
            assert_false(wc[k].opcode == IBV_WC_RECV && wc[k].status == IBV_WC_SUCCESS);
    }
}

/* A descriptor WRITE with a stale rkey: denied before any byte is copied. */
static void test_bad_rkey_write(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0, s1;

    fakeibv_xfer_stats(&s0);
    memset(x->dst, 0x11, BUF);
    fx_fill(x->src, BUF, 7);
    assert_int_equal(fx_write(x->a, 50, IBV_WR_RDMA_WRITE, x->src, 1u << 20, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey ^ 0x100, 0, 0),
                     0);
    assert_int_equal(fx_write(x->a, 51, IBV_WR_RDMA_WRITE, x->src, 1u << 20, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    expect_access_error(x, 50);
    assert_int_equal(x->dst[0], 0x11);
    assert_int_equal(x->dst[(1u << 20) - 1], 0x11);
    /* The second WR may have gone out (as a descriptor) before the NAK. */
    fakeibv_xfer_stats(&s1);
    if (one_copy_on())
        assert_true(s1.one_copy_ops - s0.one_copy_ops >= 1);
    else
        assert_int_equal(s1.one_copy_ops, s0.one_copy_ops);
}

/* A descriptor READ past the end of the remote MR. */
static void test_bad_range_read(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0, s1;

    fakeibv_xfer_stats(&s0);
    memset(x->src, 0x22, BUF);
    assert_int_equal(fx_write(x->a, 60, IBV_WR_RDMA_READ, x->src, 1u << 20, x->src_mr->lkey,
                              (uintptr_t)x->dst + BUF - 4096, x->dst_mr->rkey, 0, 0),
                     0);
    assert_int_equal(fx_write(x->a, 61, IBV_WR_RDMA_WRITE, x->src, 8, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    expect_access_error(x, 60);
    assert_int_equal(x->src[0], 0x22);
    fakeibv_xfer_stats(&s1); /* The 8-byte WRITE streams, if it went at all. */
    assert_int_equal(s1.one_copy_ops - s0.one_copy_ops, one_copy_on() ? 1 : 0);
}

/* A bad lkey on a large WR is still the requester's LOC_PROT_ERR. */
static void test_bad_lkey(void **state)
{
    struct fx_pair *x = *state;
    struct ibv_wc wc;

    assert_int_equal(fx_write(x->a, 70, IBV_WR_RDMA_WRITE, x->src, 1u << 20,
                              x->src_mr->lkey ^ 0x100, (uintptr_t)x->dst, x->dst_mr->rkey,
                              IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.wr_id, 70);
    assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
}

/* A probe that fails (the hello's cookie does not match, as when the pid
 * names another process in another pid namespace): the stream stays in
 * streaming mode and the data still arrives. */
static void test_failed_probe_falls_back(void **state)
{
    struct fx_pair *x = *state;
    struct fakeibv_xfer_stats s0, s1;
    struct ibv_qp *c, *d;
    struct ibv_wc wc;

    fakeibv_xfer_stats(&s0);
    fakeibv_one_copy_break_probe(1);
    c = fx_qp(&x->f, 16, 0);
    d = fx_qp(&x->f, 16, 0);
    assert_non_null(c);
    assert_non_null(d);
    assert_int_equal(fx_connect(c, x->f.lid, d->qp_num, 7), 0);
    assert_int_equal(fx_connect(d, x->f.lid, c->qp_num, 7), 0);
    fx_fill(x->src, BUF, 99);
    memset(x->dst, 0, BUF);
    assert_int_equal(fx_write(c, 80, IBV_WR_RDMA_WRITE, x->src, BUF, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(x->dst, x->src, BUF);
    fakeibv_one_copy_break_probe(0);
    fakeibv_xfer_stats(&s1);
    assert_int_equal(s1.one_copy_ops, s0.one_copy_ops);
    assert_int_equal(s1.stream_ops, s0.stream_ops + 1);
    assert_int_equal(s1.probes_failed, s0.probes_failed + 2);
    assert_int_equal(s1.probes_ok, s0.probes_ok);
    ibv_destroy_qp(c);
    ibv_destroy_qp(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_sizes),
        cmocka_unit_test(test_probe_result),
        cmocka_unit_test(test_write_imm_two_sges),
        cmocka_unit_test(test_read_two_sges),
        cmocka_unit_test(test_send_scatter),
        cmocka_unit_test(test_failed_probe_falls_back),
        cmocka_unit_test_setup(test_bad_rkey_write, reset_pair),
        cmocka_unit_test_setup(test_bad_range_read, reset_pair),
        cmocka_unit_test_setup(test_bad_lkey, reset_pair),
        cmocka_unit_test_setup(test_cut_under_descriptor, reset_pair),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
