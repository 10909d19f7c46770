/*
 * fakeibv unit tests, data path: the operations an NCCL-style transport
 * uses (WRITE chains ending in WRITE_WITH_IMM into 0-SGE receives, inline
 * writes, RDMA READ on a self-connected QP), SEND/RECV, the ibv_wr_* API,
 * ordering, atomics (fetch-and-add, compare-and-swap), and the error
 * completions: remote access, local protection, RNR, SQ full, dropped link
 * and a peer process that dies.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>
#include <cmocka.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

#define BUF (1 << 20)

struct xfx {
    struct fx f;
    struct ibv_qp *a, *b;         /* Connected to each other. */
    char *src, *dst;
    struct ibv_mr *src_mr, *dst_mr;
};

static int setup(void **state)
{
    static struct xfx x;
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

    memset(&x, 0, sizeof(x));
    if (fx_open(&x.f) != 0)
        return -1;
    x.src = calloc(1, BUF);
    x.dst = calloc(1, BUF);
    x.src_mr = ibv_reg_mr(x.f.pd, x.src, BUF, acc);
    x.dst_mr = ibv_reg_mr(x.f.pd, x.dst, BUF, acc);
    x.a = fx_qp(&x.f, 64, 64);
    x.b = fx_qp(&x.f, 64, 64);
    if (!x.src_mr || !x.dst_mr || !x.a || !x.b)
        return -1;
    if (fx_connect(x.a, x.f.lid, x.b->qp_num, 7) || fx_connect(x.b, x.f.lid, x.a->qp_num, 7))
        return -1;
    *state = &x;
    return 0;
}

static int teardown(void **state)
{
    struct xfx *x = *state;

    ibv_destroy_qp(x->a);
    ibv_destroy_qp(x->b);
    ibv_dereg_mr(x->src_mr);
    ibv_dereg_mr(x->dst_mr);
    free(x->src);
    free(x->dst);
    fx_close(&x->f);
    return 0;
}

/* Each error test breaks the pair; rebuild it fresh. */
static int reset_pair(void **state)
{
    teardown(state);
    return setup(state);
}

static void fill(char *p, size_t n, unsigned seed)
{
    size_t i;

    for (i = 0; i < n; i++)
        p[i] = (char)(i * 7 + seed);
}

static int post_recv0(struct ibv_qp *qp, uint64_t wr_id)
{
    struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = NULL, .num_sge = 0 }, *bad;

    return ibv_post_recv(qp, &wr, &bad);
}

static int post_atomic(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, uint64_t *res,
                       uint32_t lkey, uint32_t len, uint64_t raddr, uint32_t rkey,
                       uint64_t compare_add, uint64_t swap)
{
    struct ibv_sge sge = { .addr = (uintptr_t)res, .length = len, .lkey = lkey };
    struct ibv_send_wr wr, *bad = NULL;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.atomic.remote_addr = raddr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    return ibv_post_send(qp, &wr, &bad);
}

/* A pair open to remote atomics (fx_connect's QPs are not). */
static void atomic_pair(struct xfx *x, struct ibv_qp **c, struct ibv_qp **d)
{
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

    *c = fx_qp(&x->f, 16, 0);
    *d = fx_qp(&x->f, 16, 0);
    assert_non_null(*c);
    assert_non_null(*d);
    assert_int_equal(fx_to_init(*c, acc), 0);
    assert_int_equal(fx_to_init(*d, acc), 0);
    assert_int_equal(fx_to_rtr(*c, x->f.lid, (*d)->qp_num, 1), 0);
    assert_int_equal(fx_to_rtr(*d, x->f.lid, (*c)->qp_num, 1), 0);
    assert_int_equal(fx_to_rts(*c, FX_TIMEOUT, FX_RETRY, 7), 0);
    assert_int_equal(fx_to_rts(*d, FX_TIMEOUT, FX_RETRY, 7), 0);
}

/*
 * Atomics as the verbs spec has them (IBV_ATOMIC_HCA): the old value lands in
 * the 8-byte SGE, the word changes at the target, the completion says
 * FETCH_ADD / COMP_SWAP; a WRITE before an atomic on the QP is placed before
 * it; an MR without REMOTE_ATOMIC gives REM_ACCESS_ERR, a misaligned word
 * REM_INV_REQ_ERR; a local buffer other than 8 bytes is refused at post.
 */
static void test_atomics(void **state)
{
    struct xfx *x = *state;
    struct ibv_device_attr da;
    struct ibv_qp *c, *d;
    uint64_t *words = aligned_alloc(64, 4096), *res = aligned_alloc(64, 64);
    struct ibv_mr *wmr, *rmr, *nomr;
    struct ibv_async_event ev;
    struct ibv_wc wc[2];
    struct timespec t0;

    assert_int_equal(ibv_query_device(x->f.ctx, &da), 0);
    assert_int_equal(da.atomic_cap, IBV_ATOMIC_HCA);
    memset(words, 0, 4096);
    memset(res, 0xff, 64);
    wmr = ibv_reg_mr(x->f.pd, words, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                               IBV_ACCESS_REMOTE_ATOMIC);
    rmr = ibv_reg_mr(x->f.pd, res, 64, IBV_ACCESS_LOCAL_WRITE);
    nomr = ibv_reg_mr(x->f.pd, x->dst, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    assert_non_null(wmr);
    assert_non_null(rmr);
    assert_non_null(nomr);
    atomic_pair(x, &c, &d);
    words[1] = 100;
    assert_int_equal(post_atomic(c, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, &res[0], rmr->lkey, 8,
                                 (uintptr_t)&words[1], wmr->rkey, 5, 0), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 5000), 1);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].opcode, IBV_WC_FETCH_ADD);
    assert_int_equal(wc[0].wr_id, 1);
    assert_int_equal(res[0], 100);
    assert_int_equal(__atomic_load_n(&words[1], __ATOMIC_ACQUIRE), 105);
    /* Compare-and-swap: equal swaps, unequal leaves the word; both return the old value. */
    assert_int_equal(post_atomic(c, 2, IBV_WR_ATOMIC_CMP_AND_SWP, &res[1], rmr->lkey, 8,
                                 (uintptr_t)&words[1], wmr->rkey, 105, 7), 0);
    assert_int_equal(post_atomic(c, 3, IBV_WR_ATOMIC_CMP_AND_SWP, &res[2], rmr->lkey, 8,
                                 (uintptr_t)&words[1], wmr->rkey, 1, 9), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 5000), 2);
    assert_int_equal(wc[0].opcode, IBV_WC_COMP_SWAP);
    assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
    assert_int_equal(res[1], 105);
    assert_int_equal(res[2], 7);
    assert_int_equal(__atomic_load_n(&words[1], __ATOMIC_ACQUIRE), 7);
    /* A WRITE then an add on one QP: the data is there when the add is seen. */
    fill((char *)&words[64], 1024, 3);
    assert_int_equal(fx_write(c, 4, IBV_WR_RDMA_WRITE, &words[64], 1024, wmr->lkey,
                              (uintptr_t)&words[256], wmr->rkey, 0, 0), 0);
    assert_int_equal(post_atomic(c, 5, IBV_WR_ATOMIC_FETCH_AND_ADD, &res[3], rmr->lkey, 8,
                                 (uintptr_t)&words[2], wmr->rkey, 1, 0), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (__atomic_load_n(&words[2], __ATOMIC_ACQUIRE) == 0)
        assert_true(fx_ms_since(&t0) < 5000);
    assert_memory_equal(&words[256], &words[64], 1024);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 5000), 1);
    assert_int_equal(wc[0].wr_id, 5);
    /* A local buffer of 4 bytes: refused at post. */
    assert_int_equal(post_atomic(c, 6, IBV_WR_ATOMIC_FETCH_AND_ADD, &res[4], rmr->lkey, 4,
                                 (uintptr_t)&words[1], wmr->rkey, 1, 0), EINVAL);
    /* Misaligned: an invalid request; the word is untouched. */
    assert_int_equal(post_atomic(c, 7, IBV_WR_ATOMIC_FETCH_AND_ADD, &res[4], rmr->lkey, 8,
                                 (uintptr_t)&words[1] + 4, wmr->rkey, 1, 0), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 5000), 1);
    assert_int_equal(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
    assert_int_equal(words[1], 7);
    assert_int_equal(ibv_get_async_event(x->f.ctx, &ev), 0);
    ibv_ack_async_event(&ev);
    ibv_destroy_qp(c);
    ibv_destroy_qp(d);
    /* No REMOTE_ATOMIC on the target's MR: a remote access error. */
    atomic_pair(x, &c, &d);
    assert_int_equal(post_atomic(c, 8, IBV_WR_ATOMIC_FETCH_AND_ADD, &res[5], rmr->lkey, 8,
                                 (uintptr_t)x->dst, nomr->rkey, 1, 0), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 5000), 1);
    assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(ibv_get_async_event(x->f.ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
    ibv_ack_async_event(&ev);
    ibv_destroy_qp(c);
    ibv_destroy_qp(d);
    ibv_dereg_mr(wmr);
    ibv_dereg_mr(rmr);
    ibv_dereg_mr(nomr);
    free(words);
    free(res);
}

static void test_write_chain_imm(void **state)
{
    struct xfx *x = *state;
    struct ibv_sge s1 = { (uintptr_t)x->src, 300000, x->src_mr->lkey };
    struct ibv_sge s3 = { (uintptr_t)x->src + 300000, 200000, x->src_mr->lkey };
    struct ibv_send_wr w[3], *bad;
    struct ibv_wc wc[2];
    int i, got_send = 0, got_recv = 0;

    fill(x->src, BUF, 1);
    memset(x->dst, 0, BUF);
    assert_int_equal(post_recv0(x->b, 42), 0);
    memset(w, 0, sizeof(w));
    /* NCCL's shape: unsignalled WRITEs (one of them empty), then one
     * signalled WRITE_WITH_IMM whose imm carries the size. */
    w[0].wr_id = 1, w[0].opcode = IBV_WR_RDMA_WRITE, w[0].sg_list = &s1, w[0].num_sge = 1;
    w[0].wr.rdma.remote_addr = (uintptr_t)x->dst, w[0].wr.rdma.rkey = x->dst_mr->rkey;
    w[1].wr_id = 2, w[1].opcode = IBV_WR_RDMA_WRITE, w[1].num_sge = 0;
    w[1].wr.rdma.remote_addr = 0, w[1].wr.rdma.rkey = 0;
    w[2].wr_id = 3, w[2].opcode = IBV_WR_RDMA_WRITE_WITH_IMM, w[2].sg_list = &s3;
    w[2].num_sge = 1, w[2].send_flags = IBV_SEND_SIGNALED, w[2].imm_data = htobe32(500000);
    w[2].wr.rdma.remote_addr = (uintptr_t)x->dst + 300000, w[2].wr.rdma.rkey = x->dst_mr->rkey;
    w[0].next = &w[1];
    w[1].next = &w[2];
    assert_int_equal(ibv_post_send(x->a, &w[0], &bad), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 5000), 2);
    for (i = 0; i < 2; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        if (wc[i].opcode == IBV_WC_RDMA_WRITE) {
            assert_int_equal(wc[i].wr_id, 3); /* Unsignalled WRs make no CQE. */
            assert_int_equal(wc[i].qp_num, x->a->qp_num);
            got_send++;
        } else {
            assert_int_equal(wc[i].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
            assert_int_equal(wc[i].wr_id, 42);
            assert_true(wc[i].wc_flags & IBV_WC_WITH_IMM);
            assert_int_equal(be32toh(wc[i].imm_data), 500000);
            assert_int_equal(wc[i].byte_len, 200000);
            assert_int_equal(wc[i].qp_num, x->b->qp_num);
            got_recv++;
        }
    }
    assert_int_equal(got_send + got_recv, 2);
    assert_memory_equal(x->dst, x->src, 500000);
}

static void test_inline_write_one_sided(void **state)
{
    struct xfx *x = *state;
    char fifo[48];
    volatile char *target = x->dst + 4096;
    struct timespec t0;

    memset(x->dst, 0, 8192);
    memset(fifo, 0x5c, sizeof(fifo));
    /* Inline: no lkey needed, buffer reusable at once; the target sees the
     * bytes with nobody polling its CQ (the progress thread writes). */
    assert_int_equal(fx_write(x->b, 9, IBV_WR_RDMA_WRITE, fifo, sizeof(fifo), 0,
                              (uintptr_t)target, x->dst_mr->rkey, IBV_SEND_INLINE, 0),
                     0);
    memset(fifo, 0, sizeof(fifo));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (target[sizeof(fifo) - 1] != 0x5c && fx_ms_since(&t0) < 5000)
        ;
    assert_int_equal(target[0], 0x5c);
    assert_int_equal(target[sizeof(fifo) - 1], 0x5c);
    /* Too long for max_inline_data. */
    assert_int_equal(fx_write(x->b, 9, IBV_WR_RDMA_WRITE, x->src, 65, 0, (uintptr_t)target,
                              x->dst_mr->rkey, IBV_SEND_INLINE, 0),
                     EINVAL);
}

static void test_self_qp_read(void **state)
{
    struct xfx *x = *state;
    struct ibv_qp *self = fx_qp(&x->f, 8, 0);
    struct ibv_wc wc;
    static int flush_dst;
    struct ibv_mr *fmr = ibv_reg_mr(x->f.pd, &flush_dst, sizeof(flush_dst), IBV_ACCESS_LOCAL_WRITE);

    assert_non_null(self);
    assert_non_null(fmr);
    assert_int_equal(fx_connect(self, x->f.lid, self->qp_num, 7), 0);
    fill(x->src, 65536, 3);
    x->src[0] = 0x42;
    /* NCCL's flush: a 1-byte READ on a QP connected to itself. */
    assert_int_equal(fx_write(self, 11, IBV_WR_RDMA_READ, &flush_dst, 1, fmr->lkey,
                              (uintptr_t)x->src, x->src_mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
    assert_int_equal(wc.wr_id, 11);
    assert_int_equal(flush_dst & 0xff, 0x42);
    memset(x->dst, 0, 65536);
    assert_int_equal(fx_write(self, 12, IBV_WR_RDMA_READ, x->dst, 65536, x->dst_mr->lkey,
                              (uintptr_t)x->src, x->src_mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.byte_len, 65536);
    assert_memory_equal(x->dst, x->src, 65536);
    assert_int_equal(ibv_destroy_qp(self), 0);
    ibv_dereg_mr(fmr);
}

static void test_send_recv_scatter(void **state)
{
    struct xfx *x = *state;
    struct ibv_sge rs[2] = { { (uintptr_t)x->dst, 100, x->dst_mr->lkey },
                             { (uintptr_t)x->dst + 1000, 100, x->dst_mr->lkey } };
    struct ibv_recv_wr rwr = { .wr_id = 21, .sg_list = rs, .num_sge = 2 }, *rbad;
    struct ibv_wc wc[2];
    int i;

    fill(x->src, 150, 5);
    memset(x->dst, 0, 2000);
    assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
    assert_int_equal(fx_write(x->a, 20, IBV_WR_SEND_WITH_IMM, x->src, 150, x->src_mr->lkey, 0, 0,
                              IBV_SEND_SIGNALED, htobe32(7)),
                     0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 5000), 2);
    for (i = 0; i < 2; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        if (wc[i].wr_id == 21) {
            assert_int_equal(wc[i].opcode, IBV_WC_RECV);
            assert_int_equal(wc[i].byte_len, 150);
            assert_int_equal(be32toh(wc[i].imm_data), 7);
        } else {
            assert_int_equal(wc[i].opcode, IBV_WC_SEND);
        }
    }
    assert_memory_equal(x->dst, x->src, 100);
    assert_memory_equal(x->dst + 1000, x->src + 100, 50);
}

static void test_send_too_long(void **state)
{
    struct xfx *x = *state;
    struct ibv_sge rs = { (uintptr_t)x->dst, 10, x->dst_mr->lkey };
    struct ibv_recv_wr rwr = { .wr_id = 31, .sg_list = &rs, .num_sge = 1 }, *rbad;
    struct ibv_wc wc[3];
    int i, seen = 0;

    assert_int_equal(ibv_post_recv(x->b, &rwr, &rbad), 0);
    assert_int_equal(fx_write(x->a, 30, IBV_WR_SEND, x->src, 100, x->src_mr->lkey, 0, 0,
                              IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 5000), 2);
    for (i = 0; i < 2; i++) {
        if (wc[i].wr_id == 31) {
            assert_int_equal(wc[i].status, IBV_WC_LOC_LEN_ERR);
            seen |= 1;
        } else {
            assert_int_equal(wc[i].wr_id, 30);
            assert_int_equal(wc[i].status, IBV_WC_REM_INV_REQ_ERR);
            seen |= 2;
        }
    }
    assert_int_equal(seen, 3);
    assert_int_equal(fx_state(x->a), IBV_QPS_ERR);
    /* Posting to an errored QP flushes at once. */
    assert_int_equal(fx_write(x->a, 32, IBV_WR_SEND, x->src, 1, x->src_mr->lkey, 0, 0, 0, 0), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 1000), 1);
    assert_int_equal(wc[0].wr_id, 32);
    assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
}

static void test_remote_access_error(void **state)
{
    struct xfx *x = *state;
    struct ibv_wc wc[2];
    struct ibv_async_event ev;

    /* Bad rkey: REM_ACCESS_ERR for the WR, FLUSH_ERR for the one after it
     * (posted while the first is in flight), and the responder QP gets an
     * access-error async event. */
    assert_int_equal(fx_write(x->a, 40, IBV_WR_RDMA_WRITE, x->src, 64, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey ^ 0x100, 0, 0),
                     0);
    assert_int_equal(fx_write(x->a, 41, IBV_WR_RDMA_WRITE, x->src, 64, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 5000), 2);
    assert_int_equal(wc[0].wr_id, 40);
    assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(wc[1].wr_id, 41);
    assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(fx_state(x->a), IBV_QPS_ERR);
    assert_int_equal(ibv_get_async_event(x->f.ctx, &ev), 0);
    assert_int_equal(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
    assert_ptr_equal(ev.element.qp, x->b);
    ibv_ack_async_event(&ev);
}

static void test_remote_range_and_right(void **state)
{
    struct xfx *x = *state;
    struct ibv_wc wc;
    struct ibv_mr *ro = ibv_reg_mr(x->f.pd, x->dst, 4096, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_async_event ev;

    assert_non_null(ro);
    /* The MR allows no remote read. */
    assert_int_equal(fx_write(x->a, 50, IBV_WR_RDMA_READ, x->src, 16, x->src_mr->lkey,
                              (uintptr_t)x->dst, ro->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(ibv_get_async_event(x->f.ctx, &ev), 0);
    ibv_ack_async_event(&ev); /* Else destroying the QP waits for it, as in rdma-core. */
    ibv_dereg_mr(ro);
    assert_int_equal(reset_pair(state), 0);
    x = *state;
    /* In the MR's key but past its end. */
    assert_int_equal(fx_write(x->a, 51, IBV_WR_RDMA_WRITE, x->src, 64, x->src_mr->lkey,
                              (uintptr_t)x->dst + BUF - 32, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.status, IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(ibv_get_async_event(x->f.ctx, &ev), 0);
    ibv_ack_async_event(&ev);
}

static void test_local_protection_error(void **state)
{
    struct xfx *x = *state;
    struct ibv_wc wc;

    assert_int_equal(fx_write(x->a, 60, IBV_WR_RDMA_WRITE, x->src, 64, x->src_mr->lkey + 1,
                              (uintptr_t)x->dst, x->dst_mr->rkey, 0, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.wr_id, 60);
    assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
    assert_int_equal(fx_state(x->a), IBV_QPS_ERR);
}

static void test_rnr_retry_exceeded(void **state)
{
    struct xfx *x = *state;
    struct ibv_wc wc;
    struct ibv_qp_attr a = { .rnr_retry = 1 };

    /* rnr_retry 1, min_rnr_timer 1 (10 us) on the responder: fails fast. */
    assert_int_equal(ibv_modify_qp(x->a, &a, IBV_QP_RNR_RETRY), EINVAL); /* Not RTS->RTS. */
    a.qp_state = IBV_QPS_RESET;
    assert_int_equal(ibv_modify_qp(x->a, &a, IBV_QP_STATE), 0);
    assert_int_equal(fx_connect(x->a, x->f.lid, x->b->qp_num, 1), 0);
    assert_int_equal(fx_write(x->a, 70, IBV_WR_RDMA_WRITE_WITH_IMM, NULL, 0, 0, 0, 0,
                              IBV_SEND_SIGNALED, 1),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.wr_id, 70);
    assert_int_equal(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
}

static void test_rnr_waits_forever_with_7(void **state)
{
    struct xfx *x = *state;
    struct ibv_wc wc[2];
    struct timespec nap = { 0, 50 * 1000000 };

    assert_int_equal(fx_write(x->a, 80, IBV_WR_RDMA_WRITE_WITH_IMM, NULL, 0, 0, 0, 0,
                              IBV_SEND_SIGNALED, 1),
                     0);
    nanosleep(&nap, NULL);
    assert_int_equal(ibv_poll_cq(x->f.cq, 2, wc), 0);
    assert_int_equal(post_recv0(x->b, 81), 0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 5000), 2);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
}

static void test_sq_full(void **state)
{
    struct xfx *x = *state;
    struct ibv_qp *q = fx_qp(&x->f, 4, 0);
    struct ibv_wc wc[4];
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
    int i, n;

    assert_non_null(q);
    assert_int_equal(fx_connect(q, x->f.lid, x->b->qp_num, 7), 0);
    /* Unsignalled WQEs keep their slots until a signalled one completes. */
    for (i = 0; i < 4; i++)
        assert_int_equal(fx_write(q, 90 + i, IBV_WR_RDMA_WRITE, x->src, 8, x->src_mr->lkey,
                                  (uintptr_t)x->dst, x->dst_mr->rkey, 0, 0),
                         0);
    assert_int_equal(fx_write(q, 94, IBV_WR_RDMA_WRITE, x->src, 8, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, 0),
                     ENOMEM);
    assert_int_equal(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
    /* Any WQE not yet acknowledged flushes, with a CQE even if unsignalled. */
    n = fx_poll(x->f.cq, wc, 4, 200);
    for (i = 0; i < n; i++)
        assert_int_equal(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(ibv_destroy_qp(q), 0);
}

static void test_ordering_within_qp(void **state)
{
    struct xfx *x = *state;
    struct ibv_wc wc;
    uint32_t *vals = (uint32_t *)(void *)x->src;
    volatile uint32_t *target = (volatile uint32_t *)(void *)x->dst;
    int i;

    for (i = 0; i < 64; i++)
        vals[i] = (uint32_t)i + 1;
    *target = 0;
    for (i = 0; i < 64; i++)
        assert_int_equal(fx_write(x->a, 100 + i, IBV_WR_RDMA_WRITE, &vals[i], 4, x->src_mr->lkey,
                                  (uintptr_t)x->dst, x->dst_mr->rkey,
                                  i == 63 ? IBV_SEND_SIGNALED : 0, 0),
                         0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.wr_id, 163);
    assert_int_equal(*target, 64);
}

static void test_wr_api(void **state)
{
    struct xfx *x = *state;
    struct ibv_qp_init_attr_ex ia;
    struct ibv_qp *q;
    struct ibv_qp_ex *qx;
    struct ibv_wc wc;

    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = x->f.cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 32;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd = x->f.pd;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
    q = ibv_create_qp_ex(x->f.ctx, &ia);
    assert_non_null(q);
    qx = ibv_qp_to_qp_ex(q);
    assert_non_null(qx);
    assert_int_equal(fx_connect(q, x->f.lid, x->b->qp_num, 7), 0);
    fill(x->src, 4096, 9);
    memset(x->dst, 0, 4096);
    ibv_wr_start(qx);
    qx->wr_id = 200;
    qx->wr_flags = 0;
    ibv_wr_rdma_write(qx, x->dst_mr->rkey, (uintptr_t)x->dst);
    ibv_wr_set_sge(qx, x->src_mr->lkey, (uintptr_t)x->src, 4000);
    qx->wr_id = 201;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qx, x->dst_mr->rkey, (uintptr_t)x->dst + 4000);
    ibv_wr_set_inline_data(qx, x->src + 4000, 32);
    assert_int_equal(ibv_wr_complete(qx), 0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 5000), 1);
    assert_int_equal(wc.wr_id, 201);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_memory_equal(x->dst, x->src, 4032);
    /* A build error is sticky and reported by wr_complete. */
    ibv_wr_start(qx);
    ibv_wr_set_sge(qx, 0, 0, 0);
    assert_int_equal(ibv_wr_complete(qx), EINVAL);
    assert_int_equal(ibv_destroy_qp(q), 0);
}

static void test_cq_ex_poll_api(void **state)
{
    struct xfx *x = *state;
    struct ibv_cq_init_attr_ex ca;
    struct ibv_cq_ex *cqx;
    struct ibv_qp_init_attr qa;
    struct ibv_qp *a, *b;
    struct ibv_recv_wr rwr = { .wr_id = 501 }, *rbad;
    struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
    int n = 0, seen_recv = 0, seen_send = 0, tries;

    memset(&ca, 0, sizeof(ca));
    ca.cqe = 16;
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
    cqx = ibv_create_cq_ex(x->f.ctx, &ca);
    assert_non_null(cqx);
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cqx);
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    a = ibv_create_qp(x->f.pd, &qa);
    b = ibv_create_qp(x->f.pd, &qa);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(fx_connect(a, x->f.lid, b->qp_num, 7), 0);
    assert_int_equal(fx_connect(b, x->f.lid, a->qp_num, 7), 0);
    /* Nothing there yet: start_poll says ENOENT (and needs no end_poll). */
    assert_int_equal(ibv_start_poll(cqx, &pa), ENOENT);
    assert_int_equal(ibv_post_recv(b, &rwr, &rbad), 0);
    assert_int_equal(fx_write(a, 500, IBV_WR_RDMA_WRITE_WITH_IMM, x->src, 100, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, IBV_SEND_SIGNALED, htobe32(9)),
                     0);
    for (tries = 0; n < 2 && tries < 5000; tries++) {
        int rc = ibv_start_poll(cqx, &pa);

        if (rc == ENOENT) {
            usleep(1000);
            continue;
        }
        assert_int_equal(rc, 0);
        do {
            assert_int_equal(cqx->status, IBV_WC_SUCCESS);
            if (cqx->wr_id == 501) {
                assert_int_equal(ibv_wc_read_opcode(cqx), IBV_WC_RECV_RDMA_WITH_IMM);
                assert_int_equal(ibv_wc_read_byte_len(cqx), 100);
                assert_int_equal(be32toh(ibv_wc_read_imm_data(cqx)), 9);
                assert_int_equal(ibv_wc_read_qp_num(cqx), b->qp_num);
                assert_true(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM);
                seen_recv++;
            } else {
                assert_int_equal(cqx->wr_id, 500);
                assert_int_equal(ibv_wc_read_opcode(cqx), IBV_WC_RDMA_WRITE);
                seen_send++;
            }
            n++;
        } while (ibv_next_poll(cqx) == 0);
        ibv_end_poll(cqx);
    }
    assert_int_equal(seen_recv, 1);
    assert_int_equal(seen_send, 1);
    /* Timestamps are not emulated. */
    ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    assert_null(ibv_create_cq_ex(x->f.ctx, &ca));
    assert_int_equal(errno, EOPNOTSUPP);
    assert_int_equal(ibv_destroy_qp(a), 0);
    assert_int_equal(ibv_destroy_qp(b), 0);
    assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

static void test_link_drop_retry_exceeded(void **state)
{
    struct xfx *x = *state;
    struct ibv_wc wc;
    struct timespec t0;
    long ms;

    assert_int_equal(fakeibv_inject(x->f.ctx, FAKEIBV_FAULT_QP_DROP, x->a->qp_num, 0, 0, 0), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(fx_write(x->a, 300, IBV_WR_RDMA_WRITE, x->src, 64, x->src_mr->lkey,
                              (uintptr_t)x->dst, x->dst_mr->rkey, 0, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, &wc, 1, 10000), 1);
    ms = fx_ms_since(&t0);
    assert_int_equal(wc.wr_id, 300);
    assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
    /* timeout 12, retry_cnt 7: 8 x 4.096 us x 2^12 = 134 ms. */
    assert_true(ms >= 120);
    assert_true(ms < 5000);
}

/* A peer process that dies: the QP keeps working until the crash, then
 * the next WR fails with RETRY_EXC_ERR after the retry timeout and the
 * ones after it flush. */
static void test_peer_process_death(void **state)
{
    struct xfx *x = *state;
    char peer[4096];
    int to_peer[2], from_peer[2], status;
    posix_spawn_file_actions_t fa;
    char *argv[] = { (char *)"fakeibv_peer", NULL };
    unsigned plid, pqpn, prkey;
    uint64_t paddr;
    char line[128];
    FILE *in;
    pid_t pid;
    struct ibv_qp *q = fx_qp(&x->f, 16, 0);
    struct ibv_wc wc[2];
    struct timespec t0;
    long ms;

    /* fakeibv_peer is built next to this test binary. */
    {
        ssize_t n = readlink("/proc/self/exe", peer, sizeof(peer) - 32);

        assert_true(n > 0);
        peer[n] = '\0';
        strcpy(strrchr(peer, '/') + 1, "fakeibv_peer");
    }
    assert_non_null(q);
    assert_int_equal(pipe(to_peer), 0);
    assert_int_equal(pipe(from_peer), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_peer[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_peer[1], 1);
    posix_spawn_file_actions_addclose(&fa, to_peer[1]);
    posix_spawn_file_actions_addclose(&fa, from_peer[0]);
    assert_int_equal(posix_spawn(&pid, peer, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(to_peer[0]);
    close(from_peer[1]);
    in = fdopen(from_peer[0], "r");
    assert_non_null(fgets(line, sizeof(line), in));
    assert_int_equal(sscanf(line, "%u %u %" SCNu64 " %u", &plid, &pqpn, &paddr, &prkey), 4);
    assert_int_not_equal(plid, x->f.lid);
    snprintf(line, sizeof(line), "%u %u\n", x->f.lid, q->qp_num);
    assert_int_equal(write(to_peer[1], line, strlen(line)), (ssize_t)strlen(line));
    assert_int_equal(fx_connect(q, (uint16_t)plid, pqpn, 7), 0);
    assert_non_null(fgets(line, sizeof(line), in));
    assert_string_equal(line, "ready\n");

    /* Cross-process write and read back. */
    fill(x->src, 65536, 11);
    assert_int_equal(fx_write(q, 400, IBV_WR_RDMA_WRITE, x->src, 65536, x->src_mr->lkey, paddr,
                              prkey, 0, 0),
                     0);
    memset(x->dst, 0, 65536);
    assert_int_equal(fx_write(q, 401, IBV_WR_RDMA_READ, x->dst, 65536, x->dst_mr->lkey, paddr,
                              prkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, wc, 1, 5000), 1);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_memory_equal(x->dst, x->src, 65536);

    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(fx_write(q, 402, IBV_WR_RDMA_WRITE, x->src, 64, x->src_mr->lkey, paddr,
                              prkey, 0, 0),
                     0);
    assert_int_equal(fx_write(q, 403, IBV_WR_RDMA_WRITE, x->src, 64, x->src_mr->lkey, paddr,
                              prkey, IBV_SEND_SIGNALED, 0),
                     0);
    assert_int_equal(fx_poll(x->f.cq, wc, 2, 10000), 2);
    ms = fx_ms_since(&t0);
    assert_int_equal(wc[0].wr_id, 402);
    assert_int_equal(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    assert_int_equal(wc[1].wr_id, 403);
    assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    assert_true(ms >= 120 && ms < 5000);
    assert_int_equal(fx_state(q), IBV_QPS_ERR);
    fclose(in);
    close(to_peer[1]);
    assert_int_equal(ibv_destroy_qp(q), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_chain_imm),
        cmocka_unit_test(test_inline_write_one_sided),
        cmocka_unit_test(test_self_qp_read),
        cmocka_unit_test(test_send_recv_scatter),
        cmocka_unit_test(test_ordering_within_qp),
        cmocka_unit_test(test_wr_api),
        cmocka_unit_test(test_rnr_waits_forever_with_7),
        cmocka_unit_test(test_sq_full),
        cmocka_unit_test(test_cq_ex_poll_api),
        cmocka_unit_test(test_atomics),
        cmocka_unit_test_setup(test_send_too_long, reset_pair),
        cmocka_unit_test_setup(test_remote_access_error, reset_pair),
        cmocka_unit_test_setup(test_remote_range_and_right, reset_pair),
        cmocka_unit_test_setup(test_local_protection_error, reset_pair),
        cmocka_unit_test_setup(test_rnr_retry_exceeded, reset_pair),
        cmocka_unit_test_setup(test_link_drop_retry_exceeded, reset_pair),
        cmocka_unit_test_setup(test_peer_process_death, reset_pair),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
