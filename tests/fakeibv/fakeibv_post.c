/*
 * fakeibv posting: ibv_post_send / ibv_post_recv (reached through
 * context->ops, since verbs.h inlines them) and the ibv_wr_* builder API
 * (reached through struct ibv_qp_ex), which perftest uses by default.
 *
 * Posting validates and queues; small requests are sent right here when no
 * other thread is sending (fakeibv_tx.c), the rest by the QP's tx thread.
 * Inline data is copied here, other sources are read at transmit time, so a
 * consumer that reuses a buffer before its completion is caught.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fakeibv_internal.h"

enum ibv_wc_opcode fakeibv_wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return IBV_WC_FETCH_ADD;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        return IBV_WC_COMP_SWAP;
    default:
        return IBV_WC_SEND;
    }
}

static int fakeibv_opcode_ok(enum ibv_wr_opcode op)
{
    return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND ||
           op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_READ || fakeibv_is_atomic(op);
}

/* Validates one WR and fills the WQE; returns an errno for post_send. */
static int fakeibv_swqe_fill(struct fakeibv_qp *qp, struct fakeibv_swqe *w, uint32_t slot,
                             const struct ibv_send_wr *wr)
{
    uint64_t total = 0;
    int i;

    if (!fakeibv_opcode_ok(wr->opcode) || wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge)
        return EINVAL;
    for (i = 0; i < wr->num_sge; i++)
        total += wr->sg_list[i].length;
    if (total > fakeibv_config()->max_msg_sz)
        return EINVAL; /* Beyond the ports' max_msg_sz. */
    memset(w, 0, sizeof(*w));
    w->wr_id = wr->wr_id;
    w->opcode = wr->opcode;
    w->send_flags = wr->send_flags;
    w->imm = wr->imm_data;
    w->raddr = wr->wr.rdma.remote_addr;
    w->rkey = wr->wr.rdma.rkey;
    w->len = (uint32_t)total;
    if (fakeibv_is_atomic(wr->opcode)) {
        /* One 8-byte local buffer takes the old value (the verbs spec's atomic WR). */
        if (wr->num_sge != 1 || wr->sg_list[0].length != 8)
            return EINVAL;
        w->raddr = wr->wr.atomic.remote_addr;
        w->rkey = wr->wr.atomic.rkey;
        w->compare_add = wr->wr.atomic.compare_add;
        w->swap = wr->wr.atomic.swap;
        w->num_sge = 1;
        w->sge[0] = wr->sg_list[0];
        return 0;
    }
    if ((wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ) {
        uint8_t *p;

        if (total > qp->max_inline)
            return EINVAL;
        /* Inline data is copied now and needs no lkey, per the verbs spec. */
        w->inline_buf = p = qp->inline_slab + (size_t)slot * qp->max_inline;
        for (i = 0; i < wr->num_sge; i++) {
            memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
            p += wr->sg_list[i].length;
        }
        return 0;
    }
    w->num_sge = wr->num_sge;
    if (wr->num_sge > 0)
        memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*w->sge));
    return 0;
}

int fakeibv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct fakeibv_qp *qp = fakeibv_qp(ibqp);
    int rc = 0, queued = 0;
    uint64_t t0 = 0;

    if (fakeibv_trace.on) {
        fakeibv_trace_add(&fakeibv_trace.post_calls, 1);
        t0 = fakeibv_trace_now_ns();
    }
    pthread_mutex_lock(&qp->lock);
    for (; wr != NULL; wr = wr->next) {
        enum ibv_qp_state st;

    again:
        st = qp->attr.qp_state;

        if (st == IBV_QPS_ERR) {
            /* Posting to an errored QP is legal; the WR flushes at once. */
            fakeibv_push_flush_locked(qp, (struct fakeibv_cq *)ibqp->send_cq, wr->wr_id,
                                      fakeibv_wc_opcode(wr->opcode), IBV_WC_WR_FLUSH_ERR);
            continue;
        }
        if (st != IBV_QPS_RTS && st != IBV_QPS_SQD) {
            rc = EINVAL; /* The IB spec forbids posting sends before RTS. */
            break;
        }
        if (qp->sq_head - qp->sq_free >= qp->sq_depth) {
            uint32_t was = qp->sq_free;

            /* ACKs a NIC would have handled already may wait unread
             * (fakeibv_reap.c); the state is looked at again after. */
            fakeibv_sq_reap_locked(qp);
            if (qp->sq_free != was)
                goto again;
            rc = ENOMEM; /* Send queue full, as every provider reports it. */
            break;
        }
        rc = fakeibv_swqe_fill(qp, &qp->sq[qp->sq_head % qp->sq_depth], qp->sq_head % qp->sq_depth,
                               wr);
        if (rc != 0)
            break;
        if (fakeibv_trace.on)
            fakeibv_trace_posted(qp, wr, &qp->sq[qp->sq_head % qp->sq_depth]);
        qp->sq_head++;
        queued = 1;
    }
    if (queued)
        fakeibv_tx_direct_locked(qp); /* Sends small ones, wakes the tx thread for the rest. */
    pthread_mutex_unlock(&qp->lock);
    if (t0 != 0)
        fakeibv_trace_add(&fakeibv_trace.post_call_ns, fakeibv_trace_now_ns() - t0);
    if (rc != 0 && bad != NULL)
        *bad = wr;
    return rc;
}

int fakeibv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct fakeibv_qp *qp = fakeibv_qp(ibqp);
    int rc = 0, queued = 0;

    pthread_mutex_lock(&qp->lock);
    for (; wr != NULL; wr = wr->next) {
        struct fakeibv_rwqe *r;

        if (qp->attr.qp_state == IBV_QPS_RESET) {
            rc = EINVAL; /* C10-97.2.1: no receives in RESET. */
            break;
        }
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_recv_sge) {
            rc = EINVAL;
            break;
        }
        if (qp->attr.qp_state == IBV_QPS_ERR) {
            fakeibv_push_flush_locked(qp, (struct fakeibv_cq *)ibqp->recv_cq, wr->wr_id,
                                      IBV_WC_RECV, IBV_WC_WR_FLUSH_ERR);
            continue;
        }
        if (qp->rq_head - qp->rq_tail >= qp->rq_depth) {
            rc = ENOMEM;
            break;
        }
        r = &qp->rq[qp->rq_head % qp->rq_depth];
        r->wr_id = wr->wr_id;
        r->num_sge = wr->num_sge;
        if (wr->num_sge > 0)
            memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*r->sge));
        qp->rq_head++;
        queued = 1;
        if (fakeibv_trace.on)
            fakeibv_trace_add(&fakeibv_trace.recv_wrs, 1);
    }
    /* Only a responder waiting out RNR needs to know; waking the idle tx
     * thread on every receive would cost the poster a futex call each. */
    if (queued && qp->rq_waiters > 0)
        pthread_cond_broadcast(&qp->cond);
    pthread_mutex_unlock(&qp->lock);
    if (rc != 0 && bad != NULL)
        *bad = wr;
    return rc;
}

/* ---- ibv_wr_* builder API ---------------------------------------------- */

/*
 * WRs are staged as ordinary ibv_send_wr entries between wr_start and
 * wr_complete, then go through fakeibv_post_send in one call, so both APIs
 * share one set of rules. Errors while building are sticky and returned by
 * wr_complete, as in rdma-core providers.
 */
static struct fakeibv_qp *fakeibv_qpx(struct ibv_qp_ex *qpx)
{
    return (struct fakeibv_qp *)qpx;
}

static int fakeibv_stage_alloc(struct fakeibv_qp *qp)
{
    if (qp->wr_stage != NULL)
        return 0;
    qp->wr_stage = calloc(qp->sq_depth, sizeof(*qp->wr_stage));
    qp->wr_stage_sge = calloc((size_t)qp->sq_depth * FAKEIBV_MAX_SGE, sizeof(*qp->wr_stage_sge));
    qp->wr_stage_inl = calloc(qp->sq_depth, qp->max_inline ? qp->max_inline : 1);
    if (qp->wr_stage == NULL || qp->wr_stage_sge == NULL || qp->wr_stage_inl == NULL)
        return ENOMEM;
    return 0;
}

static void fakeibv_wr_start(struct ibv_qp_ex *qpx)
{
    struct fakeibv_qp *qp = fakeibv_qpx(qpx);

    qp->wr_nstage = 0;
    qp->wr_err = fakeibv_stage_alloc(qp);
}

static struct ibv_send_wr *fakeibv_wr_new(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
    struct fakeibv_qp *qp = fakeibv_qpx(qpx);
    struct ibv_send_wr *wr;

    if (qp->wr_err != 0)
        return NULL;
    if (qp->wr_nstage >= qp->sq_depth) {
        qp->wr_err = ENOMEM;
        return NULL;
    }
    wr = &qp->wr_stage[qp->wr_nstage];
    memset(wr, 0, sizeof(*wr));
    wr->wr_id = qpx->wr_id;
    wr->send_flags = qpx->wr_flags;
    wr->opcode = op;
    wr->sg_list = &qp->wr_stage_sge[(size_t)qp->wr_nstage * FAKEIBV_MAX_SGE];
    if (qp->wr_nstage > 0)
        qp->wr_stage[qp->wr_nstage - 1].next = wr;
    qp->wr_nstage++;
    return wr;
}

static struct ibv_send_wr *fakeibv_wr_last(struct ibv_qp_ex *qpx)
{
    struct fakeibv_qp *qp = fakeibv_qpx(qpx);

    if (qp->wr_err != 0 || qp->wr_nstage == 0) {
        if (qp->wr_err == 0)
            qp->wr_err = EINVAL;
        return NULL;
    }
    return &qp->wr_stage[qp->wr_nstage - 1];
}

static void fakeibv_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr)
{
    struct ibv_send_wr *wr = fakeibv_wr_new(qpx, IBV_WR_RDMA_WRITE);

    if (wr != NULL) {
        wr->wr.rdma.rkey = rkey;
        wr->wr.rdma.remote_addr = raddr;
    }
}

static void fakeibv_wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr,
                                      __be32 imm)
{
    struct ibv_send_wr *wr = fakeibv_wr_new(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);

    if (wr != NULL) {
        wr->wr.rdma.rkey = rkey;
        wr->wr.rdma.remote_addr = raddr;
        wr->imm_data = imm;
    }
}

static void fakeibv_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr)
{
    struct ibv_send_wr *wr = fakeibv_wr_new(qpx, IBV_WR_RDMA_READ);

    if (wr != NULL) {
        wr->wr.rdma.rkey = rkey;
        wr->wr.rdma.remote_addr = raddr;
    }
}

static void fakeibv_wr_send(struct ibv_qp_ex *qpx)
{
    (void)fakeibv_wr_new(qpx, IBV_WR_SEND);
}

static void fakeibv_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
    struct ibv_send_wr *wr = fakeibv_wr_new(qpx, IBV_WR_SEND_WITH_IMM);

    if (wr != NULL)
        wr->imm_data = imm;
}

static void fakeibv_wr_unsupported(struct ibv_qp_ex *qpx)
{
    fakeibv_qpx(qpx)->wr_err = EOPNOTSUPP;
}

static void fakeibv_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr,
                                      uint64_t compare, uint64_t swap)
{
    fakeibv_wr_unsupported(qpx);
}

static void fakeibv_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr,
                                        uint64_t add)
{
    fakeibv_wr_unsupported(qpx);
}

static void fakeibv_wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t qpn,
                                   uint32_t qkey)
{
    fakeibv_wr_unsupported(qpx);
}

static void fakeibv_wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *sg)
{
    struct fakeibv_qp *qp = fakeibv_qpx(qpx);
    struct ibv_send_wr *wr = fakeibv_wr_last(qpx);

    if (wr == NULL)
        return;
    if (n > FAKEIBV_MAX_SGE || n > qp->max_send_sge) {
        qp->wr_err = EINVAL;
        return;
    }
    memcpy(wr->sg_list, sg, n * sizeof(*sg));
    wr->num_sge = (int)n;
}

static void fakeibv_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t len)
{
    struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };

    fakeibv_wr_set_sge_list(qpx, 1, &sge);
}

static void fakeibv_wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n,
                                            const struct ibv_data_buf *bufs)
{
    struct fakeibv_qp *qp = fakeibv_qpx(qpx);
    struct ibv_send_wr *wr = fakeibv_wr_last(qpx);
    uint8_t *dst;
    size_t i, total = 0;

    if (wr == NULL)
        return;
    for (i = 0; i < n; i++)
        total += bufs[i].length;
    if (total > qp->max_inline) {
        qp->wr_err = EINVAL;
        return;
    }
    /* The caller may reuse its buffers as soon as this returns. */
    dst = qp->wr_stage_inl + (size_t)(qp->wr_nstage - 1) * (qp->max_inline ? qp->max_inline : 1);
    for (i = 0, total = 0; i < n; i++) {
        memcpy(dst + total, bufs[i].addr, bufs[i].length);
        total += bufs[i].length;
    }
    wr->sg_list[0].addr = (uintptr_t)dst;
    wr->sg_list[0].length = (uint32_t)total;
    wr->sg_list[0].lkey = 0;
    wr->num_sge = 1;
    wr->send_flags |= IBV_SEND_INLINE;
}

static void fakeibv_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t len)
{
    struct ibv_data_buf b = { .addr = addr, .length = len };

    fakeibv_wr_set_inline_data_list(qpx, 1, &b);
}

static int fakeibv_wr_complete(struct ibv_qp_ex *qpx)
{
    struct fakeibv_qp *qp = fakeibv_qpx(qpx);
    struct ibv_send_wr *bad = NULL;
    int rc = qp->wr_err;

    if (rc == 0 && qp->wr_nstage > 0) {
        /* A WR that fails to post takes the ones after it down too, so the
         * whole batch either posts or (up to the failure) does not. */
        rc = fakeibv_post_send(&qpx->qp_base, &qp->wr_stage[0], &bad);
    }
    qp->wr_nstage = 0;
    qp->wr_err = 0;
    return rc;
}

static void fakeibv_wr_abort(struct ibv_qp_ex *qpx)
{
    struct fakeibv_qp *qp = fakeibv_qpx(qpx);

    qp->wr_nstage = 0;
    qp->wr_err = 0;
}

void fakeibv_qp_fill_ex_ops(struct fakeibv_qp *qp)
{
    struct ibv_qp_ex *x = &qp->qpx;

    x->wr_atomic_cmp_swp = fakeibv_wr_atomic_cmp_swp;
    x->wr_atomic_fetch_add = fakeibv_wr_atomic_fetch_add;
    x->wr_rdma_read = fakeibv_wr_rdma_read;
    x->wr_rdma_write = fakeibv_wr_rdma_write;
    x->wr_rdma_write_imm = fakeibv_wr_rdma_write_imm;
    x->wr_send = fakeibv_wr_send;
    x->wr_send_imm = fakeibv_wr_send_imm;
    x->wr_set_ud_addr = fakeibv_wr_set_ud_addr;
    x->wr_set_inline_data = fakeibv_wr_set_inline_data;
    x->wr_set_inline_data_list = fakeibv_wr_set_inline_data_list;
    x->wr_set_sge = fakeibv_wr_set_sge;
    x->wr_set_sge_list = fakeibv_wr_set_sge_list;
    x->wr_start = fakeibv_wr_start;
    x->wr_complete = fakeibv_wr_complete;
    x->wr_abort = fakeibv_wr_abort;
}
