/*
 * fakeibv requester transmit side: the QP's transmit job (run by an
 * engine worker, fakeibv_engine.c), and the posting thread itself for small
 * requests.
 *
 * The transmit job takes WQEs in order, checks local keys, sends the request
 * and its payload on the QP's outbound stream, and runs the retry timer
 * when the peer is unreachable. When no other thread is sending on the QP
 * and its stream has room, a
 * request of at most FAKEIBV_DIRECT_MAX wire bytes (a small payload, a
 * READ, a one-copy descriptor) is sent by the thread that posts it
 * (FAKEIBV_DIRECT=1, the default), as a NIC starts on the doorbell: one
 * thread wake-up less per request. Either way exactly one thread transmits
 * at a time (qp->tx_busy), in send-queue order, and qp->sq_tx moves before
 * the bytes go, so the rx thread always finds the WQE its response is for.
 */
#include <errno.h>
#include <string.h>

#include "fakeibv_internal.h"
#include "fakeibv_wire.h"

static void fakeibv_count(uint64_t *ops, uint64_t *bytes, uint32_t len)
{
    __atomic_add_fetch(ops, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(bytes, len, __ATOMIC_RELAXED);
}

/* ---- requester: transmit ------------------------------------------------ */

static enum fakeibv_wire_op fakeibv_wire_op_of(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE: return FAKEIBV_OP_WRITE;
    case IBV_WR_RDMA_WRITE_WITH_IMM: return FAKEIBV_OP_WRITE_IMM;
    case IBV_WR_SEND_WITH_IMM: return FAKEIBV_OP_SEND_IMM;
    case IBV_WR_RDMA_READ: return FAKEIBV_OP_READ_REQ;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return FAKEIBV_OP_ATOMIC_FA;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return FAKEIBV_OP_ATOMIC_CS;
    default: return FAKEIBV_OP_SEND;
    }
}

/* Local key check of every SGE before anything goes on the wire, so a bad
 * lkey fails the WQE cleanly (IBV_WC_LOC_PROT_ERR) instead of mid-stream. */
static int fakeibv_sges_ok(struct fakeibv_qp *qp, const struct fakeibv_swqe *w, int access)
{
    int i;

    for (i = 0; i < w->num_sge; i++) {
        struct fakeibv_mr *mr;

        if (w->sge[i].length == 0)
            continue;
        if (fakeibv_mr_get(w->sge[i].lkey, qp->qpx.qp_base.pd, w->sge[i].addr, w->sge[i].length,
                           access, &mr) != FAKEIBV_MR_OK)
            return 0;
        fakeibv_mr_put();
    }
    return 1;
}

static int fakeibv_send_sges(int fd, struct fakeibv_qp *qp, const struct fakeibv_swqe *w)
{
    int i, rc = 0;

    for (i = 0; i < w->num_sge && rc == 0; i++) {
        struct fakeibv_mr *mr;

        if (w->sge[i].length == 0)
            continue;
        if (fakeibv_mr_get(w->sge[i].lkey, qp->qpx.qp_base.pd, w->sge[i].addr, w->sge[i].length, 0,
                           &mr) != FAKEIBV_MR_OK)
            return EFAULT; /* Deregistered while in flight: stream unusable. */
        rc = fakeibv_mem_to_fd(mr, w->sge[i].addr, fd, w->sge[i].length);
        fakeibv_mr_put();
    }
    return rc;
}

/* The WQE's SGEs as the peer may read them: addresses in this process.
 * Returns 1 (iov filled), 0 (some SGE is device memory: stream it) or -1
 * (an lkey check failed: local protection error). */
static int fakeibv_desc_build(struct fakeibv_qp *qp, const struct fakeibv_swqe *w, int access,
                              struct fakeibv_wire_iov *iov, int *n_p)
{
    int i, n = 0;

    for (i = 0; i < w->num_sge; i++) {
        struct fakeibv_mr *mr;
        int cuda;

        if (w->sge[i].length == 0)
            continue;
        if (fakeibv_mr_get(w->sge[i].lkey, qp->qpx.qp_base.pd, w->sge[i].addr, w->sge[i].length,
                           access, &mr) != FAKEIBV_MR_OK)
            return -1;
        cuda = mr->is_cuda;
        iov[n].addr = (uint64_t)(uintptr_t)mr->mr.addr + (w->sge[i].addr - mr->iova);
        iov[n].len = w->sge[i].length;
        n++;
        fakeibv_mr_put();
        if (cuda)
            return 0;
    }
    *n_p = n;
    return 1;
}

/* Per-QP counts for fakeibv_qp_stats: what this QP put on the wire. */
static void fakeibv_qp_count(struct fakeibv_qp *qp, int opcode, uint32_t len)
{
    switch (opcode) {
    case IBV_WR_RDMA_WRITE:
        __atomic_add_fetch(&qp->stat_writes, 1, __ATOMIC_RELAXED);
        break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        __atomic_add_fetch(&qp->stat_writes_imm, 1, __ATOMIC_RELAXED);
        break;
    case IBV_WR_RDMA_READ:
        __atomic_add_fetch(&qp->stat_reads, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&qp->stat_read_bytes, len, __ATOMIC_RELAXED);
        break;
    default:
        __atomic_add_fetch(&qp->stat_sends, 1, __ATOMIC_RELAXED);
        break;
    }
}

FAKEIBV_EXPORT int fakeibv_qp_stats(uint32_t qpn, struct fakeibv_qp_stats *out)
{
    struct fakeibv_qp *qp = fakeibv_qp_lookup_get(qpn);

    if (qp == NULL)
        return ENOENT;
    out->writes = __atomic_load_n(&qp->stat_writes, __ATOMIC_RELAXED);
    out->writes_imm = __atomic_load_n(&qp->stat_writes_imm, __ATOMIC_RELAXED);
    out->reads = __atomic_load_n(&qp->stat_reads, __ATOMIC_RELAXED);
    out->read_bytes = __atomic_load_n(&qp->stat_read_bytes, __ATOMIC_RELAXED);
    out->sends = __atomic_load_n(&qp->stat_sends, __ATOMIC_RELAXED);
    out->tx_busy = qp->tx_busy ? 1 : 0;
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

/* Largest request the posting thread sends itself (header and payload in
 * one send): small enough that a stream with room for it never blocks. */
#define FAKEIBV_DIRECT_MAX 8192

/* A request ready for the wire: wire > 0 bytes of m go in one send;
 * wire == 0: the header, then the WQE's SGEs streamed from their MRs. */
struct fakeibv_txmsg {
    struct {
        struct fakeibv_wire_hdr h;
        union {
            uint8_t data[FAKEIBV_DIRECT_MAX];
            struct fakeibv_wire_iov iov[FAKEIBV_MAX_SGE];
        };
    } m;
    size_t wire;
    int desc;
    int null; /* FAKEIBV_HDR_NULL: the header alone stands for the payload. */
};

/* Copies a small payload into dst under its MRs' read lock (a deregistration
 * waits for it). Returns 0, 1 (some SGE is device memory: stream it
 * instead) or EFAULT (a bad lkey). */
static int fakeibv_gather(struct fakeibv_qp *qp, const struct fakeibv_swqe *w, uint8_t *dst)
{
    int i;

    for (i = 0; i < w->num_sge; i++) {
        struct fakeibv_mr *mr;
        int cuda;

        if (w->sge[i].length == 0)
            continue;
        if (fakeibv_mr_get(w->sge[i].lkey, qp->qpx.qp_base.pd, w->sge[i].addr, w->sge[i].length,
                           0, &mr) != FAKEIBV_MR_OK)
            return EFAULT;
        cuda = mr->is_cuda;
        if (!cuda)
            memcpy(dst, (const uint8_t *)mr->mr.addr + (w->sge[i].addr - mr->iova),
                   w->sge[i].length);
        fakeibv_mr_put();
        if (cuda)
            return 1;
        dst += w->sge[i].length;
    }
    return 0;
}

/* Builds the request for WQE w: checks its local keys and decides how its
 * payload travels (descriptor, in one send, or streamed after the header),
 * looking each MR up once on the way it takes. Returns 0 or EFAULT (local
 * protection error). */
static int fakeibv_tx_build(struct fakeibv_qp *qp, const struct fakeibv_swqe *w, uint64_t seq,
                            uint8_t rnr_retry, int one_copy, struct fakeibv_txmsg *t)
{
    int is_read = w->opcode == IBV_WR_RDMA_READ || fakeibv_is_atomic(w->opcode);
    int access = is_read ? IBV_ACCESS_LOCAL_WRITE : 0;
    int rc, niov = 0;

    memset(&t->m.h, 0, sizeof(t->m.h));
    t->m.h.op = (uint8_t)fakeibv_wire_op_of(w->opcode);
    t->m.h.rnr_retry = rnr_retry;
    t->m.h.len = w->len;
    t->m.h.raddr = w->raddr;
    t->m.h.rkey = w->rkey;
    t->m.h.imm = w->imm;
    t->m.h.seq = seq;
    t->wire = sizeof(t->m.h);
    t->desc = 0;
    t->null = 0;
    if (fakeibv_is_atomic(w->opcode)) {
        /* The operands travel with the header; the old value comes back into the SGE. */
        if (!fakeibv_sges_ok(qp, w, access))
            return EFAULT;
        memcpy(t->m.data, &w->compare_add, 8);
        memcpy(t->m.data + 8, &w->swap, 8);
        t->wire += 16;
        return 0;
    }
    if (w->inline_buf != NULL) {
        /* Copied at post; small enough for one send (max_inline <= the buffer). */
        memcpy(t->m.data, w->inline_buf, w->len);
        t->wire += w->len;
        return 0;
    }
    if (w->len == 0)
        return 0;
    if (fakeibv_config()->null_payload && w->len >= fakeibv_config()->null_payload_min) {
        /* Null-payload mode: the keys are checked as for a real transfer,
         * then the header goes alone (inline data, above, always travels). */
        if (!fakeibv_sges_ok(qp, w, access))
            return EFAULT;
        t->null = 1;
        t->m.h.flags = FAKEIBV_HDR_NULL;
        return 0;
    }
    if (one_copy && w->len >= fakeibv_config()->one_copy_min) {
        /* 1: every SGE is host memory (t->m.iov filled); 0: some is device memory. */
        rc = fakeibv_desc_build(qp, w, access, t->m.iov, &niov);
        if (rc < 0)
            return EFAULT;
        if (rc == 1) {
            /* Header and descriptor in one send; the peer copies the bytes. */
            t->desc = 1;
            t->m.h.flags = FAKEIBV_HDR_DESC;
            t->m.h.syndrome = (uint8_t)niov;
            t->wire += (size_t)niov * sizeof(t->m.iov[0]);
            return 0;
        }
    } else if (!is_read && w->len <= sizeof(t->m.data)) {
        /* One send for header and payload: the responder finds both at once. */
        rc = fakeibv_gather(qp, w, t->m.data);
        if (rc == EFAULT)
            return EFAULT;
        if (rc == 0) {
            t->wire += w->len;
            return 0;
        }
    }
    if (!fakeibv_sges_ok(qp, w, access))
        return EFAULT;
    if (!is_read)
        t->wire = 0; /* Streamed after the header; a READ's request is the header alone. */
    return 0;
}

/* Counts the request and sends it. Returns 0, EFAULT (build_rc: nothing
 * sent) or an I/O errno. */
static int fakeibv_tx_send(struct fakeibv_qp *qp, int fd, const struct fakeibv_swqe *w,
                           const struct fakeibv_txmsg *t, int build_rc)
{
    int is_read = w->opcode == IBV_WR_RDMA_READ || fakeibv_is_atomic(w->opcode), rc;

    fakeibv_qp_count(qp, w->opcode, w->len);
    /* The port sends the request: its payload, or just the READ request. */
    fakeibv_port_count(qp, 1, is_read ? 0 : w->len, is_read ? -1 : (int64_t)w->len);
    if (build_rc != 0)
        return build_rc;
    if (t->null)
        fakeibv_count(&fakeibv_stats.null_ops, &fakeibv_stats.null_bytes, w->len);
    else if (t->desc)
        fakeibv_count(&fakeibv_stats.one_copy_ops, &fakeibv_stats.one_copy_bytes, w->len);
    else if (w->len > 0)
        fakeibv_count(&fakeibv_stats.stream_ops, &fakeibv_stats.stream_bytes, w->len);
    if (t->wire > 0)
        return fakeibv_io_write(fd, &t->m, t->wire);
    rc = fakeibv_io_write(fd, &t->m.h, sizeof(t->m.h));
    if (rc != 0)
        return rc;
    if (w->inline_buf != NULL)
        return fakeibv_io_write(fd, w->inline_buf, w->len);
    return fakeibv_send_sges(fd, qp, w);
}

/* What the transmitter does after sending WQE idx: a local protection
 * error completes it and stops the send queue; an I/O error breaks the
 * peer link (the retry timer decides). With qp->lock held. */
static void fakeibv_tx_after_locked(struct fakeibv_qp *qp, uint32_t idx, int rc)
{
    struct fakeibv_swqe *pw = &qp->sq[idx % qp->sq_depth];

    if (qp->attr.qp_state == IBV_QPS_ERR || qp->stopping)
        return;
    if (rc == EFAULT) {
        FAKEIBV_INFO("qpn 0x%x: wr_id 0x%llx has an SGE outside its lkey's MR",
                     qp->qpx.qp_base.qp_num, (unsigned long long)pw->wr_id);
        pw->done = 1;
        pw->status = IBV_WC_LOC_PROT_ERR;
        qp->sq_blocked = 1;
        fakeibv_qp_advance_locked(qp);
    } else if (rc != 0) {
        fakeibv_qp_set_broken_locked(qp);
    }
}

/* The next WQE may go on the wire now (by whichever thread). */
static int fakeibv_tx_ready_locked(const struct fakeibv_qp *qp)
{
    return !qp->broken && !qp->stopping && !qp->tx_busy && qp->mode_known &&
           qp->attr.qp_state == IBV_QPS_RTS && !qp->sq_blocked && qp->sq_tx != qp->sq_head;
}

/* Bytes the request puts on the stream. */
static uint32_t fakeibv_tx_wire(const struct fakeibv_txmsg *t, const struct fakeibv_swqe *w)
{
    return (uint32_t)(t->wire > 0 ? t->wire : sizeof(t->m.h) + w->len);
}

/* Counts request idx's bytes as on the stream until its answer (qp->lock held). */
static void fakeibv_tx_wire_add_locked(struct fakeibv_qp *qp, uint32_t idx, uint32_t wire,
                                       uint64_t seq)
{
    qp->sq[idx % qp->sq_depth].wire = wire;
    qp->sq[idx % qp->sq_depth].seq = seq;
    qp->wire_out += wire;
}

/*
 * The stream has room for len more bytes, so a send of them cannot block:
 * this QP is its only writer, and a Unix stream send waits only for its
 * sndbuf. What it still holds is at most the requests not yet answered, and
 * each send costs its buffer's true size, about twice a small payload. No
 * syscall: this runs on every post.
 */
static int fakeibv_stream_room_locked(const struct fakeibv_qp *qp, size_t len)
{
    return 2 * (qp->wire_out + len) + 4096 <= (uint64_t)(qp->out_sndbuf > 0 ? qp->out_sndbuf : 0);
}

void fakeibv_tx_direct_locked(struct fakeibv_qp *qp)
{
    int budget = 16; /* WQEs per post call; the tx thread takes the rest. */

    while (budget-- > 0 && fakeibv_config()->direct && fakeibv_tx_ready_locked(qp)) {
        uint32_t idx = qp->sq_tx;
        struct fakeibv_swqe w = qp->sq[idx % qp->sq_depth];
        uint64_t seq = qp->tx_seq;
        uint8_t rnr_retry = qp->attr.rnr_retry;
        int fd = qp->out_fd, one_copy = qp->one_copy, rc;
        struct fakeibv_txmsg t;

        /* Claimed: the tx thread leaves the send queue alone meanwhile. */
        qp->tx_busy = 1;
        pthread_mutex_unlock(&qp->lock);
        rc = fakeibv_tx_build(qp, &w, seq, rnr_retry, one_copy, &t);
        rc = rc == 0 && t.wire > 0 && t.wire <= sizeof(t.m) ? 0 : EAGAIN;
        pthread_mutex_lock(&qp->lock);
        if (rc != 0 || qp->broken || qp->stopping || qp->attr.qp_state != IBV_QPS_RTS ||
            qp->sq_tx != idx || qp->out_fd != fd || !fakeibv_stream_room_locked(qp, t.wire)) {
            /* Streamed, a local error, a full stream, or the QP moved on: the tx thread's. */
            qp->tx_busy = 0;
            break;
        }
        fakeibv_tx_wire_add_locked(qp, idx, (uint32_t)t.wire, seq);
        qp->sq[idx % qp->sq_depth].direct = 1;
        qp->sq_tx++;
        qp->tx_seq++;
        pthread_mutex_unlock(&qp->lock);
        __atomic_add_fetch(&fakeibv_stats.direct_ops, 1, __ATOMIC_RELAXED);
        rc = fakeibv_tx_send(qp, fd, &w, &t, 0);
        pthread_mutex_lock(&qp->lock);
        qp->tx_busy = 0;
        fakeibv_tx_after_locked(qp, idx, rc);
    }
    /* Work left for the transmit job (the queue, the retry timer), or a
     * stop waiting for tx_busy to clear; else nobody needs a wake-up. */
    if (qp->stopping)
        pthread_cond_broadcast(&qp->cond);
    else if (qp->sq_tx != qp->sq_head || qp->broken)
        fakeibv_engine_kick_tx_locked(qp);
}

static int fakeibv_deadline_passed(const struct timespec *d)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > d->tv_sec || (now.tv_sec == d->tv_sec && now.tv_nsec >= d->tv_nsec);
}

/* The peer is unreachable and work is outstanding: once the retry timer
 * runs out, the oldest WQE fails with RETRY_EXC_ERR and the QP errors out.
 * Returns 1 if the caller should wait on the deadline. */
static int fakeibv_retry_timer_locked(struct fakeibv_qp *qp)
{
    struct fakeibv_swqe *w;
    long ms;

    if (!qp->deadline_set) {
        ms = fakeibv_qp_retry_timeout_ms(qp);
        if (ms < 0)
            return 0; /* Infinite timeout: wait for ever (until destroy). */
        fakeibv_deadline_in(&qp->deadline, ms);
        qp->deadline_set = 1;
    }
    if (!fakeibv_deadline_passed(&qp->deadline))
        return 1;
    w = &qp->sq[qp->sq_ack % qp->sq_depth];
    FAKEIBV_INFO("qpn 0x%x: no response from peer qpn 0x%x within the retry timeout; "
                 "wr_id 0x%llx -> IBV_WC_RETRY_EXC_ERR",
                 qp->qpx.qp_base.qp_num, qp->attr.dest_qp_num, (unsigned long long)w->wr_id);
    w->done = 1;
    w->status = IBV_WC_RETRY_EXC_ERR;
    if (qp->sq_tx == qp->sq_ack)
        qp->sq_tx++;
    fakeibv_qp_advance_locked(qp);
    return 0;
}

/*
 * The QP's transmit job: sends what the send queue holds, in order, until
 * nothing is ready; with the peer unreachable and work outstanding it leaves
 * the retry deadline with the engine, which runs it again then. A poster
 * sending directly (tx_busy) kicks it again when it is done.
 */
void fakeibv_tx_run(struct fakeibv_qp *qp)
{
    const struct timespec *deadline = NULL;

    fakeibv_tx_hold_wait();
    pthread_mutex_lock(&qp->lock);
    while (!qp->stopping) {
        int outstanding = qp->sq_ack != qp->sq_head && qp->attr.qp_state != IBV_QPS_ERR;

        if (qp->broken && outstanding) {
            if (!qp->tx_busy && fakeibv_retry_timer_locked(qp))
                deadline = &qp->deadline;
            break;
        }
        /* Nothing goes out before the responder said which mode the stream
         * is in; until it did, no WQE could have completed anyway. */
        if (fakeibv_tx_ready_locked(qp)) {
            uint32_t idx = qp->sq_tx++;
            struct fakeibv_swqe w = qp->sq[idx % qp->sq_depth];
            uint64_t seq = qp->tx_seq++;
            uint8_t rnr_retry = qp->attr.rnr_retry;
            int fd = qp->out_fd, one_copy = qp->one_copy, rc;
            struct fakeibv_txmsg t;

            qp->tx_busy = 1;
            pthread_mutex_unlock(&qp->lock);
            rc = fakeibv_tx_build(qp, &w, seq, rnr_retry, one_copy, &t);
            if (rc == 0) {
                /* Counted before it goes: its answer may come back at once. */
                pthread_mutex_lock(&qp->lock);
                fakeibv_tx_wire_add_locked(qp, idx, fakeibv_tx_wire(&t, &w), seq);
                pthread_mutex_unlock(&qp->lock);
            }
            if (fakeibv_trace.on)
                fakeibv_trace_add(&fakeibv_trace.tx_sends, 1);
            rc = fakeibv_tx_send(qp, fd, &w, &t, rc);
            pthread_mutex_lock(&qp->lock);
            qp->tx_busy = 0;
            fakeibv_tx_after_locked(qp, idx, rc);
            if (qp->stopping)
                pthread_cond_broadcast(&qp->cond); /* The stop waits for tx_busy. */
            continue;
        }
        break;
    }
    fakeibv_engine_tx_done_locked(qp, deadline);
    pthread_mutex_unlock(&qp->lock);
}
