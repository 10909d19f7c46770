/* Shared fixtures of the fakeibv tests (see fakeibv_test_util.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakeibv.h"
#include "fakeibv_test_util.h"

int fx_open_index(struct fx *f, int index, int ndev, int cq_entries)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);

    memset(f, 0, sizeof(*f));
    if (list == NULL || index >= n || (ndev > 0 && n != ndev)) {
        if (list != NULL)
            ibv_free_device_list(list);
        return -1;
    }
    f->ctx = ibv_open_device(list[index]);
    ibv_free_device_list(list);
    if (f->ctx == NULL)
        return -1;
    f->pd = ibv_alloc_pd(f->ctx);
    f->cq = ibv_create_cq(f->ctx, cq_entries, NULL, NULL, 0);
    f->lid = fakeibv_port_lid(f->ctx, 1);
    return f->pd != NULL && f->cq != NULL ? 0 : -1;
}

int fx_open(struct fx *f)
{
    if (fx_open_index(f, 0, 0, 256) != 0 || f->lid == 0) {
        fx_close(f);
        return -1;
    }
    return 0;
}

void fx_close(struct fx *f)
{
    if (f->cq != NULL)
        ibv_destroy_cq(f->cq);
    if (f->pd != NULL)
        ibv_dealloc_pd(f->pd);
    if (f->ctx != NULL)
        ibv_close_device(f->ctx);
    memset(f, 0, sizeof(*f));
}

struct ibv_qp *fx_qp(struct fx *f, uint32_t depth, uint32_t max_inline)
{
    struct ibv_qp_init_attr a;

    memset(&a, 0, sizeof(a));
    a.send_cq = f->cq;
    a.recv_cq = f->cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = depth;
    a.cap.max_recv_wr = depth;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 2;
    a.cap.max_inline_data = max_inline;
    return ibv_create_qp(f->pd, &a);
}

int fx_to_init(struct ibv_qp *qp, int access)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS);
}

int fx_to_rtr(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn, uint8_t min_rnr_timer)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dqpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = min_rnr_timer;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                     IBV_QP_MIN_RNR_TIMER);
}

int fx_to_rts(struct ibv_qp *qp, uint8_t timeout, uint8_t retry, uint8_t rnr_retry)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = timeout;
    a.retry_cnt = retry;
    a.rnr_retry = rnr_retry;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int fx_connect(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn, uint8_t rnr_retry)
{
    int rc = fx_to_init(qp, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ);

    if (rc == 0)
        rc = fx_to_rtr(qp, dlid, dqpn, 1);
    if (rc == 0)
        rc = fx_to_rts(qp, FX_TIMEOUT, FX_RETRY, rnr_retry);
    return rc;
}

long fx_ms_since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int fx_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms)
{
    struct timespec t0, nap = { 0, 200000 };
    int got = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (got < n && fx_ms_since(&t0) < timeout_ms) {
        int r = ibv_poll_cq(cq, n - got, wc + got);

        if (r < 0)
            return r;
        got += r;
        if (r == 0)
            nanosleep(&nap, NULL);
    }
    return got;
}

int fx_write(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, void *buf, uint32_t len,
             uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned flags, uint32_t imm)
{
    struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
    struct ibv_send_wr wr, *bad = NULL;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = buf != NULL ? &sge : NULL;
    wr.num_sge = buf != NULL ? 1 : 0;
    wr.send_flags = flags;
    wr.imm_data = imm;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

enum ibv_qp_state fx_state(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;

    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) != 0)
        return (enum ibv_qp_state)-1;
    return a.qp_state;
}

int fx_pair_open(struct fx_pair *x, size_t len, uint32_t depth, int cq_entries)
{
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

    memset(x, 0, sizeof(*x));
    if (fx_open(&x->f) != 0)
        return -1;
    if (cq_entries != 256) {
        ibv_destroy_cq(x->f.cq);
        x->f.cq = ibv_create_cq(x->f.ctx, cq_entries, NULL, NULL, 0);
        if (x->f.cq == NULL)
            return -1;
    }
    x->src = malloc(len);
    x->dst = malloc(len);
    if (x->src == NULL || x->dst == NULL)
        return -1;
    x->src_mr = ibv_reg_mr(x->f.pd, x->src, len, acc);
    x->dst_mr = ibv_reg_mr(x->f.pd, x->dst, len, acc);
    x->a = fx_qp(&x->f, depth, 64);
    x->b = fx_qp(&x->f, depth, 64);
    if (x->src_mr == NULL || x->dst_mr == NULL || x->a == NULL || x->b == NULL)
        return -1;
    if (fx_connect(x->a, x->f.lid, x->b->qp_num, 7) || fx_connect(x->b, x->f.lid, x->a->qp_num, 7))
        return -1;
    return 0;
}

void fx_pair_close(struct fx_pair *x)
{
    if (x->a != NULL)
        ibv_destroy_qp(x->a);
    if (x->b != NULL)
        ibv_destroy_qp(x->b);
    if (x->src_mr != NULL)
        ibv_dereg_mr(x->src_mr);
    if (x->dst_mr != NULL)
        ibv_dereg_mr(x->dst_mr);
    free(x->src);
    free(x->dst);
    fx_close(&x->f);
    memset(x, 0, sizeof(*x));
}

void fx_fill(unsigned char *p, size_t n, unsigned seed)
{
    size_t i;

    for (i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 131u) ^ (i >> 9) ^ seed);
}
