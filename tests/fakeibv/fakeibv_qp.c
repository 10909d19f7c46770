/*
 * fakeibv queue pairs: creation, the kernel's state-transition rules,
 * connection at RTR, completion ordering, error and flush handling.
 *
 * Only RC is emulated. Transfers run as jobs of the process's engine
 * (fakeibv_engine.c, fakeibv_tx.c, fakeibv_xfer.c); this file owns the QP's state and its send-queue
 * counters, which every thread changes under qp->lock only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fakeibv_internal.h"
#include "fakeibv_wire.h"

/* ---- registry: qpn -> QP, for inbound streams and fault injection ------ */

static pthread_mutex_t fakeibv_qps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fakeibv_qp **fakeibv_qps;
static uint32_t fakeibv_nqps, fakeibv_qps_cap;
static uint32_t fakeibv_next_qpn;

static int fakeibv_qp_register(struct fakeibv_qp *qp)
{
    pthread_mutex_lock(&fakeibv_qps_lock);
    if (fakeibv_nqps >= fakeibv_config()->max_qp) {
        pthread_mutex_unlock(&fakeibv_qps_lock);
        return ENOMEM;
    }
    if (fakeibv_nqps == fakeibv_qps_cap) {
        uint32_t cap = fakeibv_qps_cap ? fakeibv_qps_cap * 2 : 64;
        struct fakeibv_qp **n = realloc(fakeibv_qps, cap * sizeof(*n));

        if (n == NULL) {
            pthread_mutex_unlock(&fakeibv_qps_lock);
            return ENOMEM;
        }
        fakeibv_qps = n;
        fakeibv_qps_cap = cap;
    }
    /* QPNs are 24 bits, never 0 or 1 (reserved for SMI/GSI). */
    if (fakeibv_next_qpn < 0x100)
        fakeibv_next_qpn = 0x100 + ((uint32_t)getpid() & 0xff) * 0x1000;
    qp->qpx.qp_base.qp_num = fakeibv_next_qpn++ & 0xffffff;
    fakeibv_qps[fakeibv_nqps++] = qp;
    pthread_mutex_unlock(&fakeibv_qps_lock);
    return 0;
}

static void fakeibv_qp_unregister(struct fakeibv_qp *qp)
{
    uint32_t i;

    pthread_mutex_lock(&fakeibv_qps_lock);
    for (i = 0; i < fakeibv_nqps; i++) {
        if (fakeibv_qps[i] == qp) {
            fakeibv_qps[i] = fakeibv_qps[--fakeibv_nqps];
            break;
        }
    }
    pthread_mutex_unlock(&fakeibv_qps_lock);
}

struct fakeibv_qp *fakeibv_qp_lookup_get(uint32_t qpn)
{
    struct fakeibv_qp *qp = NULL;
    uint32_t i;

    pthread_mutex_lock(&fakeibv_qps_lock);
    for (i = 0; i < fakeibv_nqps; i++) {
        if (fakeibv_qps[i]->qpx.qp_base.qp_num == qpn) {
            qp = fakeibv_qps[i];
            /* Taken before the registry lock drops: destroy unregisters
             * first, so a QP found here cannot be freed under us. */
            pthread_mutex_lock(&qp->lock);
            break;
        }
    }
    pthread_mutex_unlock(&fakeibv_qps_lock);
    return qp;
}

int fakeibv_qp_port_num(const struct fakeibv_qp *qp)
{
    if (qp->attr.port_num != 0)
        return qp->attr.port_num;
    return qp->attr.ah_attr.port_num != 0 ? qp->attr.ah_attr.port_num : 1;
}

/* Is the port the QP is bound to up? Called with qp->lock held. */
static int fakeibv_qp_port_up(const struct fakeibv_qp *qp)
{
    int p = fakeibv_qp_port_num(qp);

    if (p < 1 || p > FAKEIBV_MAX_PORTS)
        return 1;
    return __atomic_load_n(&qp->ctx->dev->ports[p - 1].state, __ATOMIC_ACQUIRE) ==
           IBV_PORT_ACTIVE;
}

/* Closes inbound slot i, whose stream ended (qp->lock held, not stopping). */
static void fakeibv_inbound_close_locked(struct fakeibv_qp *qp, int i)
{
    fakeibv_engine_unwatch(&qp->in[i].fd, 1);
    close(qp->in[i].fd);
    qp->in[i].fd = -1;
    qp->in[i].ended = 0;
    qp->in[i].parked = 0;
}

int fakeibv_qp_attach_inbound(uint32_t qpn, int fd, int peer_pid, int one_copy)
{
    struct fakeibv_qp *qp = fakeibv_qp_lookup_get(qpn);
    struct fakeibv_wire_hdr mode;
    int i, rc;

    if (qp == NULL)
        return ENOENT;
    for (i = 0; i < FAKEIBV_MAX_INBOUND; i++) {
        /* A stream that ended is no longer served: its job let go of it. */
        if (qp->in[i].fd >= 0 && qp->in[i].ended && !qp->in[i].busy && !qp->stopping)
            fakeibv_inbound_close_locked(qp, i);
        if (qp->in[i].fd < 0)
            break;
    }
    /* A QP whose link is down hears nothing: the requester times out. */
    if (qp->link_down || (qp->attr.qp_state != IBV_QPS_RESET && !fakeibv_qp_port_up(qp))) {
        pthread_mutex_unlock(&qp->lock);
        return ENETDOWN;
    }
    if (qp->stopping || i == FAKEIBV_MAX_INBOUND) {
        pthread_mutex_unlock(&qp->lock);
        return EBUSY;
    }
    /* The stream's first message: the mode the probe allowed. Nothing else
     * is on the fresh stream yet, so this cannot block. */
    memset(&mode, 0, sizeof(mode));
    mode.op = FAKEIBV_OP_MODE;
    mode.len = one_copy ? 1 : 0;
    rc = fakeibv_io_write(fd, &mode, sizeof(mode));
    if (rc == 0) {
        qp->in[i].fd = fd;
        qp->in[i].peer_pid = peer_pid;
        qp->in[i].one_copy = one_copy;
        qp->in[i].busy = qp->in[i].parked = qp->in[i].ended = 0;
        qp->in[i].job.qp = qp;
        qp->in[i].job.kind = FAKEIBV_JOB_RESP;
        qp->in[i].job.slot = i;
        rc = fakeibv_engine_watch(&qp->in[i].job, fd);
        if (rc != 0)
            qp->in[i].fd = -1;
    }
    pthread_mutex_unlock(&qp->lock);
    return rc;
}

/* ---- timers derived from QP attributes --------------------------------- */

long fakeibv_qp_retry_timeout_ms(const struct fakeibv_qp *qp)
{
    long cfg = fakeibv_config()->retry_timeout_ms;
    double one_us;

    if (cfg >= 0)
        return cfg;
    if (qp->attr.timeout == 0)
        return -1; /* IB: timeout 0 means wait forever. */
    /* Local ACK timeout is 4.096 us * 2^timeout, tried retry_cnt + 1 times. */
    one_us = 4.096 * (double)(1ULL << qp->attr.timeout);
    return (long)(one_us * (qp->attr.retry_cnt + 1) / 1000.0) + 1;
}

long fakeibv_qp_rnr_timeout_ms(const struct fakeibv_qp *qp, int rnr_retry)
{
    /* IBA table 45: RNR NAK timer field -> delay in units of 10 us. */
    static const unsigned rnr_10us[32] = {
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
        256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576,
        32768, 49152,
    };
    long cfg = fakeibv_config()->rnr_timeout_ms;

    if (rnr_retry == 7)
        return -1; /* 7 means retry forever. */
    if (cfg >= 0)
        return cfg;
    return (long)rnr_10us[qp->attr.min_rnr_timer & 31] * (rnr_retry + 1) / 100 + 1;
}

/* ---- completions -------------------------------------------------------- */

void fakeibv_push_flush_locked(struct fakeibv_qp *qp, struct fakeibv_cq *cq, uint64_t wr_id,
                               enum ibv_wc_opcode op, enum ibv_wc_status st)
{
    struct ibv_wc wc;

    memset(&wc, 0, sizeof(wc));
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.qp_num = qp->qpx.qp_base.qp_num;
    wc.vendor_err = st == IBV_WC_SUCCESS ? 0 : 0xfa;
    fakeibv_cq_push(cq, &wc);
}

static struct fakeibv_cq *fakeibv_send_cq(struct fakeibv_qp *qp)
{
    return (struct fakeibv_cq *)qp->qpx.qp_base.send_cq;
}

static struct fakeibv_cq *fakeibv_recv_cq(struct fakeibv_qp *qp)
{
    return (struct fakeibv_cq *)qp->qpx.qp_base.recv_cq;
}

/* Moves the QP to ERR: every outstanding send and receive WQE completes
 * with IBV_WC_WR_FLUSH_ERR, in order, as the spec requires. */
void fakeibv_qp_to_err_locked(struct fakeibv_qp *qp)
{
    struct fakeibv_swqe *w;

    /* Only the hardware state changes: like rdma-core, ibv_qp::state is
     * written by ibv_modify_qp alone; ibv_query_qp reports ERR. */
    qp->attr.qp_state = IBV_QPS_ERR;
    for (; qp->sq_ack != qp->sq_head; qp->sq_ack++) {
        w = &qp->sq[qp->sq_ack % qp->sq_depth];
        fakeibv_push_flush_locked(qp, fakeibv_send_cq(qp), w->wr_id, fakeibv_wc_opcode(w->opcode),
                                  IBV_WC_WR_FLUSH_ERR);
    }
    qp->sq_tx = qp->sq_resp = qp->sq_free = qp->sq_head;
    qp->wire_out = 0;
    for (; qp->rq_tail != qp->rq_head; qp->rq_tail++)
        fakeibv_push_flush_locked(qp, fakeibv_recv_cq(qp), qp->rq[qp->rq_tail % qp->rq_depth].wr_id,
                                  IBV_WC_RECV, IBV_WC_WR_FLUSH_ERR);
    pthread_cond_broadcast(&qp->cond);
}

/* Completes finished send WQEs in posting order. A signalled WQE frees its
 * slot and those of the unsignalled WQEs before it, as on real HCAs. */
void fakeibv_qp_advance_locked(struct fakeibv_qp *qp)
{
    while (qp->sq_ack != qp->sq_tx) {
        struct fakeibv_swqe *w = &qp->sq[qp->sq_ack % qp->sq_depth];

        if (!w->done)
            break;
        if (fakeibv_trace.on)
            fakeibv_trace_acked(w);
        if (w->status != IBV_WC_SUCCESS) {
            FAKEIBV_INFO("qpn 0x%x: wr_id 0x%llx completes with %s; QP -> ERR",
                         qp->qpx.qp_base.qp_num, (unsigned long long)w->wr_id,
                         ibv_wc_status_str(w->status));
            fakeibv_push_flush_locked(qp, fakeibv_send_cq(qp), w->wr_id,
                                      fakeibv_wc_opcode(w->opcode), w->status);
            qp->sq_ack++;
            fakeibv_qp_to_err_locked(qp);
            return;
        }
        if (qp->sq_sig_all || (w->send_flags & IBV_SEND_SIGNALED)) {
            struct ibv_wc wc;

            memset(&wc, 0, sizeof(wc));
            wc.wr_id = w->wr_id;
            wc.status = IBV_WC_SUCCESS;
            wc.opcode = fakeibv_wc_opcode(w->opcode);
            wc.byte_len = w->len;
            wc.qp_num = qp->qpx.qp_base.qp_num;
            fakeibv_cq_push(fakeibv_send_cq(qp), &wc);
            qp->sq_free = qp->sq_ack + 1;
        }
        qp->sq_ack++;
    }
    /* Of the threads sleeping on cond, only the tx thread with a broken
     * peer (its retry timer watches sq_ack) cares about completions; a
     * wake-up per ACK would just bounce the idle tx thread and any
     * responder waiting for a receive WQE, on every WR. */
    if (qp->broken)
        pthread_cond_broadcast(&qp->cond);
}

void fakeibv_qp_set_broken_locked(struct fakeibv_qp *qp)
{
    if (!qp->broken)
        FAKEIBV_INFO("qpn 0x%x: peer unreachable; retry timer armed", qp->qpx.qp_base.qp_num);
    qp->broken = 1;
    qp->deadline_set = 0;
    pthread_cond_broadcast(&qp->cond);
    if (!qp->stopping)
        fakeibv_engine_kick_tx_locked(qp); /* Its retry timer. */
}

/* As if the QP's cable were pulled: every stream it has, outbound and
 * inbound, is shut down, so the peer's rx thread and responder see the
 * stream end (the peer's requests to us then go unanswered and time out,
 * as ours do), and no new stream is accepted until the QP is reset. The
 * QP itself goes to ERR only when a send's retry timer runs out. */
void fakeibv_qp_link_down_locked(struct fakeibv_qp *qp)
{
    int i;

    if (!qp->link_down)
        FAKEIBV_INFO("qpn 0x%x: link down; streams to and from qpn 0x%x cut",
                     qp->qpx.qp_base.qp_num, qp->attr.dest_qp_num);
    qp->link_down = 1;
    if (qp->out_fd >= 0)
        shutdown(qp->out_fd, SHUT_RDWR);
    for (i = 0; i < FAKEIBV_MAX_INBOUND; i++)
        if (qp->in[i].fd >= 0)
            shutdown(qp->in[i].fd, SHUT_RDWR);
    fakeibv_qp_set_broken_locked(qp);
}

void fakeibv_qps_port_down(struct fakeibv_device *dev, int port)
{
    uint32_t i;

    /* The registry lock is held throughout, so no QP found is destroyed
     * meanwhile (destroy unregisters first); qp->lock nests inside it as
     * in fakeibv_qp_lookup_get. */
    pthread_mutex_lock(&fakeibv_qps_lock);
    for (i = 0; i < fakeibv_nqps; i++) {
        struct fakeibv_qp *qp = fakeibv_qps[i];
        int i2;

        if (qp->ctx->dev != dev)
            continue;
        pthread_mutex_lock(&qp->lock);
        if (qp->attr.qp_state != IBV_QPS_RESET && fakeibv_qp_port_num(qp) == port) {
            if (qp->attr.qp_state == IBV_QPS_INIT) {
                /* Not connected yet: streams that came early are lost, the
                 * QP itself may still reach RTR once the port is back. */
                for (i2 = 0; i2 < FAKEIBV_MAX_INBOUND; i2++)
                    if (qp->in[i2].fd >= 0)
                        shutdown(qp->in[i2].fd, SHUT_RDWR);
            } else {
                fakeibv_qp_link_down_locked(qp);
            }
        }
        pthread_mutex_unlock(&qp->lock);
    }
    pthread_mutex_unlock(&fakeibv_qps_lock);
}

/* ---- walking the registry (fakeibv_dump) ----------------------------------- */

int fakeibv_qps_each(void (*fn)(struct fakeibv_qp *qp, void *arg), void *arg)
{
    uint32_t i;

    if (!fakeibv_trylock_ms(&fakeibv_qps_lock, 100))
        return -1;
    for (i = 0; i < fakeibv_nqps; i++)
        fn(fakeibv_qps[i], arg);
    pthread_mutex_unlock(&fakeibv_qps_lock);
    return 0;
}

/* ---- create / destroy --------------------------------------------------- */

static int fakeibv_qp_alloc_queues(struct fakeibv_qp *qp)
{
    qp->sq = calloc(qp->sq_depth, sizeof(*qp->sq));
    qp->rq = calloc(qp->rq_depth, sizeof(*qp->rq));
    qp->inline_slab = qp->max_inline ? calloc(qp->sq_depth, qp->max_inline) : NULL;
    if (qp->sq == NULL || qp->rq == NULL || (qp->max_inline && qp->inline_slab == NULL))
        return ENOMEM;
    return 0;
}

static void fakeibv_qp_free(struct fakeibv_qp *qp)
{
    free(qp->sq);
    free(qp->rq);
    free(qp->inline_slab);
    free(qp->wr_stage);
    free(qp->wr_stage_sge);
    free(qp->wr_stage_inl);
    free(qp);
}

struct ibv_qp *fakeibv_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a);

struct ibv_qp *fakeibv_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
    const struct fakeibv_config *cfg = fakeibv_config();
    uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                     IBV_QP_INIT_ATTR_CREATE_FLAGS;
    struct fakeibv_qp *qp;
    int rc, i;

    rc = fakeibv_fault_check(FAKEIBV_FAULT_CREATE_QP);
    if (rc != 0)
        goto err;
    rc = EINVAL;
    if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || (a->comp_mask & ~known) || a->pd == NULL ||
        a->send_cq == NULL || a->recv_cq == NULL)
        goto err;
    if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags != 0)
        goto err;
    if (a->qp_type != IBV_QPT_RC || a->srq != NULL) {
        rc = EOPNOTSUPP; /* Only RC without SRQ is emulated. */
        goto err;
    }
    if (a->cap.max_send_wr > cfg->max_qp_wr || a->cap.max_recv_wr > cfg->max_qp_wr ||
        a->cap.max_send_sge > FAKEIBV_MAX_SGE || a->cap.max_recv_sge > FAKEIBV_MAX_SGE ||
        a->cap.max_inline_data > cfg->max_inline)
        goto err;
    rc = ENOMEM;
    qp = calloc(1, sizeof(*qp));
    if (qp == NULL)
        goto err;
    qp->ctx = fakeibv_ctx(c);
    qp->sq_depth = a->cap.max_send_wr ? a->cap.max_send_wr : 1;
    qp->rq_depth = a->cap.max_recv_wr ? a->cap.max_recv_wr : 1;
    qp->max_send_sge = a->cap.max_send_sge;
    qp->max_recv_sge = a->cap.max_recv_sge;
    qp->max_inline = a->cap.max_inline_data;
    qp->sq_sig_all = a->sq_sig_all;
    qp->out_fd = -1;
    for (i = 0; i < FAKEIBV_MAX_INBOUND; i++)
        qp->in[i].fd = -1;
    qp->tx_job.qp = qp->rx_job.qp = qp;
    qp->tx_job.kind = FAKEIBV_JOB_TX;
    qp->rx_job.kind = FAKEIBV_JOB_RX;
    rc = fakeibv_qp_alloc_queues(qp);
    if (rc != 0) {
        fakeibv_qp_free(qp);
        goto err;
    }
    pthread_mutex_init(&qp->lock, NULL);
    fakeibv_cond_init_monotonic(&qp->cond);
    qp->qpx.qp_base.context = c;
    qp->qpx.qp_base.qp_context = a->qp_context;
    qp->qpx.qp_base.pd = a->pd;
    qp->qpx.qp_base.send_cq = a->send_cq;
    qp->qpx.qp_base.recv_cq = a->recv_cq;
    qp->qpx.qp_base.qp_type = IBV_QPT_RC;
    qp->qpx.qp_base.state = IBV_QPS_RESET;
    qp->qpx.qp_base.handle = 1;
    qp->attr.qp_state = IBV_QPS_RESET;
    pthread_mutex_init(&qp->qpx.qp_base.mutex, NULL);
    pthread_cond_init(&qp->qpx.qp_base.cond, NULL);
    fakeibv_qp_fill_ex_ops(qp);
    rc = fakeibv_qp_register(qp);
    if (rc != 0) {
        fakeibv_qp_free(qp);
        goto err;
    }
    /* Report what we granted: exactly what was asked (the kernel may round
     * up; consumers must cope either way). */
    a->cap.max_send_wr = qp->sq_depth;
    a->cap.max_recv_wr = qp->rq_depth;
    __atomic_add_fetch(&((struct fakeibv_cq *)a->send_cq)->users, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&((struct fakeibv_cq *)a->recv_cq)->users, 1, __ATOMIC_RELAXED);
    fakeibv_live_add(&fakeibv_live.qps, 1);
    FAKEIBV_TRACE("created RC qpn 0x%x sq %u rq %u inline %u", qp->qpx.qp_base.qp_num,
                  qp->sq_depth, qp->rq_depth, qp->max_inline);
    return &qp->qpx.qp_base;
err:
    errno = rc;
    return NULL;
}

FAKEIBV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct ibv_qp_init_attr_ex a;
    struct ibv_qp *qp;

    memset(&a, 0, sizeof(a));
    memcpy(&a, attr, sizeof(*attr));
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd;
    qp = fakeibv_create_qp_ex(pd->context, &a);
    if (qp != NULL)
        attr->cap = a.cap;
    return qp;
}

/* The QP no longer needs inbound streams accepted (RESET or destroyed). */
static void fakeibv_qp_release_acceptor(struct fakeibv_qp *qp)
{
    if (qp->acc_held) {
        qp->acc_held = 0;
        fakeibv_acceptor_release();
        fakeibv_engine_release();
    }
}

/* Ends the QP's jobs and closes its streams. Called without qp->lock. */
static void fakeibv_qp_stop_threads(struct fakeibv_qp *qp)
{
    int fds[FAKEIBV_MAX_INBOUND + 1], n = 0, i;

    pthread_mutex_lock(&qp->lock);
    qp->stopping = 1;
    if (qp->out_fd >= 0) {
        shutdown(qp->out_fd, SHUT_RDWR);
        if (qp->rx_watched)
            fds[n++] = qp->out_fd;
    }
    for (i = 0; i < FAKEIBV_MAX_INBOUND; i++) {
        if (qp->in[i].fd >= 0) {
            shutdown(qp->in[i].fd, SHUT_RDWR);
            fds[n++] = qp->in[i].fd;
        }
    }
    pthread_cond_broadcast(&qp->cond);
    pthread_mutex_unlock(&qp->lock);
    /* Nobody closes these meanwhile: stopping keeps the accept thread out. */
    fakeibv_engine_unwatch(fds, n);
    fakeibv_engine_quiesce(qp);
    pthread_mutex_lock(&qp->lock);
    /* A posting thread may still be sending on the stream (fakeibv_tx.c). */
    while (qp->tx_busy || qp->rx_busy)
        pthread_cond_wait(&qp->cond, &qp->lock);
    if (qp->out_fd >= 0)
        close(qp->out_fd);
    qp->out_fd = -1;
    qp->rx_watched = 0;
    for (i = 0; i < FAKEIBV_MAX_INBOUND; i++) {
        if (qp->in[i].fd >= 0)
            close(qp->in[i].fd);
        qp->in[i].fd = -1;
        qp->in[i].busy = qp->in[i].parked = qp->in[i].ended = 0;
    }
    qp->stopping = 0;
    qp->broken = 0;
    pthread_mutex_unlock(&qp->lock);
}

FAKEIBV_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    struct fakeibv_qp *qp = fakeibv_qp(ibqp);

    fakeibv_qp_unregister(qp);
    fakeibv_qp_stop_threads(qp);
    fakeibv_port_counters_flush(qp);
    fakeibv_qp_release_acceptor(qp);
    fakeibv_async_forget_qp(qp);
    __atomic_sub_fetch(&((struct fakeibv_cq *)ibqp->send_cq)->users, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&((struct fakeibv_cq *)ibqp->recv_cq)->users, 1, __ATOMIC_RELAXED);
    pthread_mutex_destroy(&qp->lock);
    pthread_cond_destroy(&qp->cond);
    fakeibv_qp_free(qp);
    fakeibv_live_add(&fakeibv_live.qps, -1);
    return 0;
}

FAKEIBV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    return &fakeibv_qp(qp)->qpx;
}

/* ---- modify ------------------------------------------------------------- */

/*
 * RC rows of the Linux kernel's qp_state_table (drivers/infiniband/core/
 * verbs.c): which transitions exist and which attribute bits each one
 * requires and allows. Any state may go to RESET or ERR with no attributes.
 */
struct fakeibv_transition {
    int valid;
    int req;
    int opt;
};

#define FAKEIBV_NSTATES (IBV_QPS_ERR + 1)

static const struct fakeibv_transition fakeibv_rc_table[FAKEIBV_NSTATES][FAKEIBV_NSTATES] = {
    [IBV_QPS_RESET] = {
        [IBV_QPS_INIT] = { 1, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0 },
    },
    [IBV_QPS_INIT] = {
        [IBV_QPS_INIT] = { 1, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS },
        [IBV_QPS_RTR] = { 1,
                          IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                          IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX },
    },
    [IBV_QPS_RTR] = {
        [IBV_QPS_RTS] = { 1,
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT,
                          IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                              IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE },
    },
    [IBV_QPS_RTS] = {
        [IBV_QPS_RTS] = { 1, 0,
                          IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
                              IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER },
        [IBV_QPS_SQD] = { 1, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY },
    },
    [IBV_QPS_SQD] = {
        [IBV_QPS_RTS] = { 1, 0,
                          IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
                              IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER },
        [IBV_QPS_SQD] = { 1, 0,
                          IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                              IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE | IBV_QP_PORT |
                              IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC },
    },
    [IBV_QPS_SQE] = {
        [IBV_QPS_RTS] = { 1, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS },
    },
};

static int fakeibv_transition_ok(enum ibv_qp_state cur, enum ibv_qp_state next, int mask)
{
    const struct fakeibv_transition *t;

    if ((unsigned)cur >= FAKEIBV_NSTATES || (unsigned)next >= FAKEIBV_NSTATES)
        return 0;
    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return (mask & ~IBV_QP_STATE) == 0; /* The kernel allows no other bit. */
    t = &fakeibv_rc_table[cur][next];
    if (!t->valid)
        return 0;
    if ((mask & t->req) != t->req)
        return 0;
    return (mask & ~(t->req | t->opt | IBV_QP_STATE)) == 0;
}

static int fakeibv_attr_values_ok(struct fakeibv_qp *qp, const struct ibv_qp_attr *a, int mask)
{
    int eth = fakeibv_config()->link_layer == IBV_LINK_LAYER_ETHERNET;

    if ((mask & IBV_QP_PORT) && (a->port_num < 1 || a->port_num > fakeibv_config()->nports))
        return 0;
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)
        return 0;
    if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
        return 0;
    if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
        return 0;
    if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
        return 0;
    if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
        return 0;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
        return 0;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > 16)
        return 0;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > 16)
        return 0;
    if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff)
        return 0;
    if (mask & IBV_QP_AV) {
        /* RoCE has no LIDs: the address must carry a GRH (mlx5 rejects
         * it otherwise). On IB a zero DLID without GRH reaches nobody. */
        if (eth && !a->ah_attr.is_global)
            return 0;
        if (!a->ah_attr.is_global && a->ah_attr.dlid == 0)
            return 0;
    }
    return 1;
}

static void fakeibv_qp_copy_attr(struct ibv_qp_attr *dst, const struct ibv_qp_attr *a, int mask)
{
    if (mask & IBV_QP_PKEY_INDEX) dst->pkey_index = a->pkey_index;
    if (mask & IBV_QP_PORT) dst->port_num = a->port_num;
    if (mask & IBV_QP_ACCESS_FLAGS) dst->qp_access_flags = a->qp_access_flags;
    if (mask & IBV_QP_AV) dst->ah_attr = a->ah_attr;
    if (mask & IBV_QP_ALT_PATH) dst->alt_ah_attr = a->alt_ah_attr;
    if (mask & IBV_QP_PATH_MTU) dst->path_mtu = a->path_mtu;
    if (mask & IBV_QP_DEST_QPN) dst->dest_qp_num = a->dest_qp_num;
    if (mask & IBV_QP_RQ_PSN) dst->rq_psn = a->rq_psn;
    if (mask & IBV_QP_SQ_PSN) dst->sq_psn = a->sq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) dst->max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) dst->max_rd_atomic = a->max_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) dst->min_rnr_timer = a->min_rnr_timer;
    if (mask & IBV_QP_TIMEOUT) dst->timeout = a->timeout;
    if (mask & IBV_QP_RETRY_CNT) dst->retry_cnt = a->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) dst->rnr_retry = a->rnr_retry;
    if (mask & IBV_QP_PATH_MIG_STATE) dst->path_mig_state = a->path_mig_state;
}

/* INIT -> RTR: open the requester stream and start the QP's threads. A
 * refused connection is not an error here; like a real HCA, the QP only
 * finds out when its requests time out. */
static int fakeibv_qp_connect(struct fakeibv_qp *qp)
{
    int port = fakeibv_qp_port_num(qp), down;
    uint16_t src = qp->ctx->dev->ports[port - 1].lid;
    int fd = -1, rc;

    /* From RTR on, the peer's streams to this QP must be accepted. */
    if (!qp->acc_held) {
        rc = fakeibv_engine_hold();
        if (rc != 0)
            return rc;
        rc = fakeibv_acceptor_hold();
        if (rc != 0) {
            fakeibv_engine_release();
            return rc;
        }
        qp->acc_held = 1;
    }
    /* A port that is down sends nothing: modify_qp succeeds as on real
     * hardware (the kernel does not check the link), the QP's requests
     * time out, and streams to it are refused until it is reset. */
    down = __atomic_load_n(&qp->ctx->dev->ports[port - 1].state, __ATOMIC_ACQUIRE) !=
           IBV_PORT_ACTIVE;
    if (down) {
        FAKEIBV_INFO("qpn 0x%x: RTR on port %d, which is down: nothing will move",
                     qp->qpx.qp_base.qp_num, port);
        rc = ENETDOWN;
    } else {
        rc = fakeibv_wire_connect(&qp->attr.ah_attr, src, qp->qpx.qp_base.qp_num,
                                  qp->attr.dest_qp_num, &fd);
    }
    pthread_mutex_lock(&qp->lock);
    qp->data_port = port;
    qp->mtu_bytes = 128u << (qp->attr.path_mtu ? qp->attr.path_mtu : IBV_MTU_4096);
    if (down)
        qp->link_down = 1;
    qp->out_fd = fd;
    qp->wire_out = 0;
    qp->out_sndbuf = 0;
    if (fd >= 0) {
        socklen_t sl = sizeof(qp->out_sndbuf);

        if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &qp->out_sndbuf, &sl) != 0)
            qp->out_sndbuf = 0; /* Then nothing goes directly: the tx thread sends. */
    }
    qp->mode_known = 0;
    qp->one_copy = 0;
    qp->broken = rc != 0;
    qp->deadline_set = 0;
    qp->stopping = 0;
    /* The port may have gone down while we connected, before the sweep of
     * fakeibv_qps_port_down could see this QP as connected. */
    if (!down && !fakeibv_qp_port_up(qp))
        fakeibv_qp_link_down_locked(qp);
    if (fd >= 0) {
        rc = fakeibv_engine_watch(&qp->rx_job, fd);
        if (rc != 0) {
            FAKEIBV_WARN("qpn 0x%x: cannot watch its stream: %s", qp->qpx.qp_base.qp_num,
                         strerror(rc));
            fakeibv_qp_set_broken_locked(qp);
        } else {
            qp->rx_watched = 1;
        }
    }
    if (qp->broken)
        fakeibv_engine_kick_tx_locked(qp); /* Its retry timer. */
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

static void fakeibv_qp_reset(struct fakeibv_qp *qp)
{
    fakeibv_qp_stop_threads(qp);
    fakeibv_port_counters_flush(qp);
    fakeibv_qp_release_acceptor(qp);
    pthread_mutex_lock(&qp->lock);
    qp->sq_head = qp->sq_tx = qp->sq_resp = qp->sq_ack = qp->sq_free = 0;
    qp->wire_out = 0;
    qp->rq_head = qp->rq_tail = 0;
    qp->sq_blocked = 0;
    qp->link_down = 0;
    qp->data_port = 0;
    memset(&qp->attr, 0, sizeof(qp->attr));
    qp->attr.qp_state = IBV_QPS_RESET;
    qp->qpx.qp_base.state = IBV_QPS_RESET;
    pthread_mutex_unlock(&qp->lock);
}

FAKEIBV_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
    struct fakeibv_qp *qp = fakeibv_qp(ibqp);
    enum ibv_qp_state cur, next;
    int rc = fakeibv_fault_check(FAKEIBV_FAULT_MODIFY_QP);

    if (rc != 0)
        return rc;
    pthread_mutex_lock(&qp->lock);
    cur = (mask & IBV_QP_CUR_STATE) ? attr->cur_qp_state : qp->attr.qp_state;
    next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    if (!fakeibv_transition_ok(cur, next, mask) || !fakeibv_attr_values_ok(qp, attr, mask)) {
        FAKEIBV_INFO("qpn 0x%x: modify %d -> %d with mask 0x%x rejected (EINVAL)",
                     ibqp->qp_num, cur, next, mask);
        pthread_mutex_unlock(&qp->lock);
        return EINVAL;
    }
    if (next == IBV_QPS_RESET) {
        pthread_mutex_unlock(&qp->lock);
        fakeibv_qp_reset(qp);
        return 0;
    }
    fakeibv_qp_copy_attr(&qp->attr, attr, mask);
    if (next == IBV_QPS_ERR) {
        fakeibv_qp_to_err_locked(qp);
        ibqp->state = IBV_QPS_ERR;
        pthread_mutex_unlock(&qp->lock);
        return 0;
    }
    pthread_mutex_unlock(&qp->lock);
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        rc = fakeibv_qp_connect(qp);
        if (rc != 0)
            return rc;
    }
    pthread_mutex_lock(&qp->lock);
    qp->attr.qp_state = next;
    qp->attr.cur_qp_state = next;
    ibqp->state = next;
    pthread_cond_broadcast(&qp->cond);
    if (next != IBV_QPS_INIT) {
        int i;

        /* Requests that came before RTR are served now. */
        for (i = 0; i < FAKEIBV_MAX_INBOUND; i++) {
            if (qp->in[i].fd >= 0 && qp->in[i].parked && !qp->stopping) {
                qp->in[i].parked = 0;
                fakeibv_engine_rearm(&qp->in[i].job, qp->in[i].fd);
            }
        }
        if (qp->sq_tx != qp->sq_head || qp->broken)
            fakeibv_engine_kick_tx_locked(qp);
    }
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

FAKEIBV_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
                                struct ibv_qp_init_attr *init)
{
    struct fakeibv_qp *qp = fakeibv_qp(ibqp);

    pthread_mutex_lock(&qp->lock);
    *attr = qp->attr;
    attr->cur_qp_state = qp->attr.qp_state;
    attr->cap.max_send_wr = qp->sq_depth;
    attr->cap.max_recv_wr = qp->rq_depth;
    attr->cap.max_send_sge = qp->max_send_sge;
    attr->cap.max_recv_sge = qp->max_recv_sge;
    attr->cap.max_inline_data = qp->max_inline;
    if (init != NULL) {
        memset(init, 0, sizeof(*init));
        init->qp_context = ibqp->qp_context;
        init->send_cq = ibqp->send_cq;
        init->recv_cq = ibqp->recv_cq;
        init->cap = attr->cap;
        init->qp_type = ibqp->qp_type;
        init->sq_sig_all = qp->sq_sig_all;
    }
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

FAKEIBV_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
                                              uint32_t flags)
{
    return 0; /* Data may be read before the CQE: the safe answer. */
}
