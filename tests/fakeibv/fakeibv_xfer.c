/*
 * fakeibv data movement: the work behind an RC QP, run as jobs by the
 * engine's workers (fakeibv_engine.c) whenever a stream has something:
 *
 *  - transmit (requester, fakeibv_tx.c): sends requests in order on the
 *    QP's outbound stream (small ones the posting thread sends itself);
 *    runs the retry timer when the peer is unreachable.
 *  - responses (requester, here): reads ACK / NAK / READ_RESP from the same
 *    stream, places READ data, marks WQEs done and completes them in order.
 *  - requests (responder, here; one job per inbound stream): checks rkey,
 *    range and access, moves the bytes, consumes receive WQEs (waiting out
 *    RNR), and answers.
 *
 * One-copy mode (fakeibv_wire.h): when the responder's probe could read the
 * requester's memory, a payload request of at least FAKEIBV_ONE_COPY_MIN
 * bytes from host memory goes as a descriptor (the requester's addresses)
 * and the responder copies with process_vm_readv/writev, straight between
 * the two processes' buffers. Everything else (rkey checks, ordering, the
 * ACK before the requester completes, RNR, errors) is the same code: the
 * source stays untouched until the ACK, which the responder sends only
 * after the copy, exactly as the requester's completion waits for it in
 * streaming mode.
 *
 * Null-payload mode (FAKEIBV_NULL_PAYLOAD=1, a requester's choice per
 * request): a payload of at least FAKEIBV_NULL_PAYLOAD_MIN bytes that is
 * not inline goes as a bare header with FAKEIBV_HDR_NULL; the responder
 * runs the same checks, receive WQEs and completions, and places nothing
 * (a READ's answer carries no bytes either), so a client's own cost per
 * message shows without the device's copies.
 *
 * No thread holds qp->lock across socket I/O; the WQE it works on cannot be
 * reused while it is in flight, because its slot is freed only on
 * completion.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fakeibv_internal.h"
#include "fakeibv_wire.h"

struct fakeibv_xfer_stats fakeibv_stats;

FAKEIBV_EXPORT void fakeibv_xfer_stats(struct fakeibv_xfer_stats *out)
{
    out->one_copy_ops = __atomic_load_n(&fakeibv_stats.one_copy_ops, __ATOMIC_RELAXED);
    out->one_copy_bytes = __atomic_load_n(&fakeibv_stats.one_copy_bytes, __ATOMIC_RELAXED);
    out->stream_ops = __atomic_load_n(&fakeibv_stats.stream_ops, __ATOMIC_RELAXED);
    out->stream_bytes = __atomic_load_n(&fakeibv_stats.stream_bytes, __ATOMIC_RELAXED);
    out->probes_ok = __atomic_load_n(&fakeibv_stats.probes_ok, __ATOMIC_RELAXED);
    out->probes_failed = __atomic_load_n(&fakeibv_stats.probes_failed, __ATOMIC_RELAXED);
    out->direct_ops = __atomic_load_n(&fakeibv_stats.direct_ops, __ATOMIC_RELAXED);
    out->null_ops = __atomic_load_n(&fakeibv_stats.null_ops, __ATOMIC_RELAXED);
    out->null_bytes = __atomic_load_n(&fakeibv_stats.null_bytes, __ATOMIC_RELAXED);
    out->null_served_ops = __atomic_load_n(&fakeibv_stats.null_served_ops, __ATOMIC_RELAXED);
    out->spin_takes = __atomic_load_n(&fakeibv_stats.spin_takes, __ATOMIC_RELAXED);
}


/* ---- requester: responses ------------------------------------------------ */

static enum ibv_wc_status fakeibv_nak_status(uint8_t syndrome)
{
    switch (syndrome) {
    case FAKEIBV_SYN_REM_ACCESS: return IBV_WC_REM_ACCESS_ERR;
    case FAKEIBV_SYN_REM_INV_REQ: return IBV_WC_REM_INV_REQ_ERR;
    case FAKEIBV_SYN_RNR: return IBV_WC_RNR_RETRY_EXC_ERR;
    case FAKEIBV_SYN_LOC_PROT: return IBV_WC_LOC_PROT_ERR;
    default: return IBV_WC_REM_OP_ERR;
    }
}

/* Scatters READ response bytes into the WQE's SGEs. */
static int fakeibv_read_scatter(struct fakeibv_qp *qp, int fd, const struct fakeibv_swqe *w,
                                uint32_t len)
{
    uint32_t left = len;
    int i, rc = 0;

    for (i = 0; i < w->num_sge && left > 0 && rc == 0; i++) {
        uint32_t n = w->sge[i].length < left ? w->sge[i].length : left;
        struct fakeibv_mr *mr;

        if (n == 0)
            continue;
        if (fakeibv_mr_get(w->sge[i].lkey, qp->qpx.qp_base.pd, w->sge[i].addr, n,
                           IBV_ACCESS_LOCAL_WRITE, &mr) != FAKEIBV_MR_OK) {
            /* Keep the stream in step: the rest of the data is dropped. */
            rc = fakeibv_io_discard(fd, left);
            return rc != 0 ? rc : EFAULT;
        }
        rc = fakeibv_mem_from_fd(mr, w->sge[i].addr, fd, n);
        fakeibv_mr_put();
        left -= n;
    }
    if (rc == 0 && left > 0)
        rc = fakeibv_io_discard(fd, left);
    return rc;
}

/* Messages one job takes from a stream before it lets other streams in. */
#define FAKEIBV_JOB_BATCH 64

/* Something (data, or the end) waits on the stream now. */
static int fakeibv_readable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };

    return poll(&p, 1, 0) == 1 && p.revents != 0;
}

/* Takes one response off the QP's outbound stream. Returns 0, or -1 when
 * the stream ended (the QP is then broken unless it stops). */
int fakeibv_rx_one(struct fakeibv_qp *qp, int fd)
{
    struct fakeibv_wire_hdr h;
    struct fakeibv_swqe *w, copy;
    int rc = fakeibv_io_read(fd, &h, sizeof(h));

    pthread_mutex_lock(&qp->lock);
    if (rc != 0 || qp->stopping) {
        if (!qp->stopping)
            fakeibv_qp_set_broken_locked(qp);
        pthread_mutex_unlock(&qp->lock);
        return -1;
    }
    if (h.op == FAKEIBV_OP_MODE) {
        qp->one_copy = h.len == 1 && fakeibv_config()->one_copy;
        qp->mode_known = 1;
        FAKEIBV_INFO("qpn 0x%x -> qpn 0x%x: %s", qp->qpx.qp_base.qp_num, qp->attr.dest_qp_num,
                     qp->one_copy ? "one-copy mode (descriptors from "
                                    "FAKEIBV_ONE_COPY_MIN bytes on)"
                                  : "streaming mode");
        pthread_cond_broadcast(&qp->cond);
        if (qp->sq_tx != qp->sq_head)
            fakeibv_engine_kick_tx_locked(qp); /* Posted before the mode was known. */
        pthread_mutex_unlock(&qp->lock);
        return 0;
    }
    /* A response arrived on the port: READ data, or an ACK / NAK. */
    pthread_mutex_unlock(&qp->lock);
    if (h.op == FAKEIBV_OP_READ_RESP)
        fakeibv_port_count(qp, 0, h.len, h.len);
    else
        fakeibv_port_count(qp, 0, 0, -1);
    pthread_mutex_lock(&qp->lock);
    if (qp->attr.qp_state == IBV_QPS_ERR || qp->sq_resp == qp->sq_tx) {
        /* Late answers to flushed WQEs; anything else is a desync. */
        if (qp->attr.qp_state != IBV_QPS_ERR)
            FAKEIBV_WARN("qpn 0x%x: response seq %llu with nothing outstanding (wire desync)",
                         qp->qpx.qp_base.qp_num, (unsigned long long)h.seq);
        pthread_mutex_unlock(&qp->lock);
        if (h.op == FAKEIBV_OP_READ_RESP && !(h.flags & (FAKEIBV_HDR_DESC | FAKEIBV_HDR_NULL)) &&
            fakeibv_io_discard(fd, h.len) != 0)
            return -1;
        return 0;
    }
    w = &qp->sq[qp->sq_resp % qp->sq_depth];
    if (h.op == FAKEIBV_OP_NAK && h.syndrome == FAKEIBV_SYN_DROPPED) {
        fakeibv_qp_set_broken_locked(qp);
        pthread_mutex_unlock(&qp->lock);
        return 0;
    }
    if (h.seq != w->seq) {
        /*
         * Responses come back in request order on this stream (a peer that
         * dropped the QP answers each request so, whichever it was: above),
         * so this one answers another request than the oldest unanswered.
         * Crediting it would complete a WR whose answer never came. A NIC
         * matches responses by PSN; here the stream is out of step, so the
         * QP stops as if its peer were gone, and its WRs fail.
         */
        FAKEIBV_WARN("qpn 0x%x -> qpn 0x%x: response seq %llu (op %u) where the oldest "
                     "unanswered request, wr_id 0x%llx, went with seq %llu (wire desync); "
                     "the QP's WRs fail with its retry timer",
                     qp->qpx.qp_base.qp_num, qp->attr.dest_qp_num, (unsigned long long)h.seq,
                     (unsigned)h.op, (unsigned long long)w->wr_id, (unsigned long long)w->seq);
        fakeibv_qp_set_broken_locked(qp);
        pthread_mutex_unlock(&qp->lock);
        return -1;
    }
    if (h.op == FAKEIBV_OP_READ_RESP && (h.flags & (FAKEIBV_HDR_DESC | FAKEIBV_HDR_NULL))) {
        /* The responder wrote our SGEs itself, or (null payload) nobody does. */
        w->status = IBV_WC_SUCCESS;
    } else if (h.op == FAKEIBV_OP_READ_RESP) {
        copy = *w;
        pthread_mutex_unlock(&qp->lock);
        rc = fakeibv_read_scatter(qp, fd, &copy, h.len);
        pthread_mutex_lock(&qp->lock);
        if (rc != 0 && rc != EFAULT) {
            fakeibv_qp_set_broken_locked(qp);
            pthread_mutex_unlock(&qp->lock);
            return -1;
        }
        if (qp->attr.qp_state == IBV_QPS_ERR) {
            pthread_mutex_unlock(&qp->lock);
            return 0;
        }
        w->status = rc == EFAULT ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS;
    } else {
        w->status = h.op == FAKEIBV_OP_ACK ? IBV_WC_SUCCESS : fakeibv_nak_status(h.syndrome);
    }
    w->done = 1;
    /* Answered: the responder has read the whole request off the stream. */
    qp->wire_out = qp->wire_out > w->wire ? qp->wire_out - w->wire : 0;
    qp->sq_resp++;
    fakeibv_qp_advance_locked(qp);
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

/* The engine found the outbound stream readable: the responses waiting. */
void fakeibv_rx_run(struct fakeibv_qp *qp)
{
    int fd, n, ended = 0;

    fakeibv_rx_hold_wait();
    pthread_mutex_lock(&qp->lock);
    fd = fakeibv_rx_claim_locked(qp) ? qp->out_fd : -1;
    pthread_mutex_unlock(&qp->lock);
    if (fd < 0)
        return;
    /* Readable is checked before the first message too: a poster reaping
     * ACKs (fakeibv_reap.c) may have taken what the poll thread saw. */
    for (n = 0; n < FAKEIBV_JOB_BATCH && !ended; n++) {
        if (!fakeibv_readable(fd))
            break;
        ended = fakeibv_rx_one(qp, fd) != 0;
    }
    pthread_mutex_lock(&qp->lock);
    fakeibv_rx_unclaim_locked(qp);
    pthread_mutex_unlock(&qp->lock);
    if (!ended) /* Ended: nothing more to wait for on it. */
        fakeibv_engine_rearm(&qp->rx_job, fd);
}

/* ---- responder ---------------------------------------------------------- */

/* fakeibv_test_skew_response (fakeibv.h): responses still to send one seq off. */
static int fakeibv_skew_left;

FAKEIBV_EXPORT void fakeibv_test_skew_response(void)
{
    __atomic_add_fetch(&fakeibv_skew_left, 1, __ATOMIC_RELAXED);
}

static int fakeibv_skew_take(void)
{
    int n = __atomic_load_n(&fakeibv_skew_left, __ATOMIC_RELAXED);

    while (n > 0 && !__atomic_compare_exchange_n(&fakeibv_skew_left, &n, n - 1, 0,
                                                 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return n > 0;
}

static int fakeibv_reply_f(int fd, uint8_t op, uint8_t syndrome, uint32_t len, uint64_t seq,
                           uint8_t flags)
{
    struct fakeibv_wire_hdr r;

    memset(&r, 0, sizeof(r));
    r.op = op;
    r.flags = flags;
    r.syndrome = syndrome;
    r.len = len;
    r.seq = fakeibv_skew_take() ? seq + 1 : seq;
    return fakeibv_io_write(fd, &r, sizeof(r));
}

static int fakeibv_reply(int fd, uint8_t op, uint8_t syndrome, uint32_t len, uint64_t seq)
{
    return fakeibv_reply_f(fd, op, syndrome, len, seq, 0);
}

/* Where a request's payload comes from: the stream, or (HDR_DESC) the
 * requester's memory, consumed from off on, or (HDR_NULL) nowhere. */
struct fakeibv_src {
    int fd;
    int desc;
    int null;
    int pid;
    int niov;
    size_t off;
    struct iovec iov[FAKEIBV_MAX_SGE];
    uint64_t operand[2];  /* An atomic's compare_add and swap. */
};

/*
 * The requester's end of the stream is gone (its link went down, or its QP),
 * and nothing it sent is still unread: the request just served was its last.
 */
static int fakeibv_stream_cut(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    int unread = 0;

    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return 0;
    return ioctl(fd, FIONREAD, &unread) != 0 || unread == 0;
}

/*
 * Places the next n payload bytes at addr in mr. A descriptor's bytes are
 * fetched now, but on a link they would still have been on the wire: when
 * the stream was cut meanwhile and this was the last request on it, the
 * payload did not all arrive. ECONNRESET then ends the stream with nothing
 * completed or acknowledged (what was copied stays, as packets a HCA placed
 * before the link dropped).
 */
static int fakeibv_src_place(struct fakeibv_src *s, const struct fakeibv_mr *mr, uint64_t addr,
                             size_t n)
{
    int rc;

    if (s->null)
        return 0;
    if (!s->desc)
        return fakeibv_mem_from_fd(mr, addr, s->fd, n);
    rc = fakeibv_mem_pvm(mr, addr, n, s->pid, s->iov, s->niov, s->off, 0);
    s->off += n;
    if (rc == 0 && fakeibv_stream_cut(s->fd))
        rc = ECONNRESET;
    return rc;
}

/* Drops the next n payload bytes (stream) or just skips them (descriptor). */
static int fakeibv_src_skip(struct fakeibv_src *s, size_t n)
{
    if (s->null)
        return 0;
    if (!s->desc)
        return fakeibv_io_discard(s->fd, n);
    s->off += n;
    return 0;
}

/* A copy failed. On the stream that is an I/O error (the stream ends); a
 * descriptor the responder cannot follow names memory the requester no
 * longer has mapped: a local protection error there (the requester's
 * process gone, ESRCH, ends the stream, as does a stream cut under the copy,
 * ECONNRESET). */
static int fakeibv_place_failed(struct fakeibv_qp *qp, const struct fakeibv_src *s, int rc,
                                uint64_t seq)
{
    if (!s->desc || rc == ESRCH || rc == ECONNRESET)
        return rc;
    FAKEIBV_INFO("qpn 0x%x: requester memory named by descriptor seq %llu: %s",
                 qp->qpx.qp_base.qp_num, (unsigned long long)seq, strerror(rc));
    return fakeibv_reply(s->fd, FAKEIBV_OP_NAK, FAKEIBV_SYN_LOC_PROT, 0, seq);
}

/* Responder-side fatal error: the QP goes to ERR and, for access
 * violations, the owner hears about it through an async event. */
static void fakeibv_responder_fail(struct fakeibv_qp *qp, enum ibv_event_type ev_type)
{
    struct ibv_async_event ev = { .event_type = ev_type };

    pthread_mutex_lock(&qp->lock);
    if (qp->attr.qp_state != IBV_QPS_ERR)
        fakeibv_qp_to_err_locked(qp);
    pthread_mutex_unlock(&qp->lock);
    ev.element.qp = &qp->qpx.qp_base;
    fakeibv_async_raise(qp->ctx, &ev);
}

static int fakeibv_has_payload(uint8_t op)
{
    return op == FAKEIBV_OP_WRITE || op == FAKEIBV_OP_WRITE_IMM || op == FAKEIBV_OP_SEND ||
           op == FAKEIBV_OP_SEND_IMM;
}

/* Waits for a receive WQE as the RNR NAK / retry loop would. Returns 0 with
 * *r filled, FAKEIBV_SYN_RNR when the requester's RNR retries run out, or
 * FAKEIBV_SYN_DROPPED when the QP stops or errors meanwhile. */
static int fakeibv_take_rwqe(struct fakeibv_qp *qp, uint8_t rnr_retry, struct fakeibv_rwqe *r)
{
    long ms = -1;
    struct timespec deadline;
    int rc = 0;

    pthread_mutex_lock(&qp->lock);
    if (qp->rq_tail == qp->rq_head) {
        ms = fakeibv_qp_rnr_timeout_ms(qp, rnr_retry);
        if (ms >= 0)
            fakeibv_deadline_in(&deadline, ms);
    }
    while (qp->rq_tail == qp->rq_head && !qp->stopping && !qp->link_down &&
           qp->attr.qp_state != IBV_QPS_ERR) {
        int timed_out;

        qp->rq_waiters++; /* ibv_post_recv wakes the threads only while someone waits here. */
        if (ms < 0) {
            pthread_cond_wait(&qp->cond, &qp->lock);
            timed_out = 0;
        } else {
            timed_out = pthread_cond_timedwait(&qp->cond, &qp->lock, &deadline) == ETIMEDOUT;
        }
        qp->rq_waiters--;
        if (timed_out && qp->rq_tail == qp->rq_head) {
            rc = FAKEIBV_SYN_RNR;
            break;
        }
    }
    if (rc == 0 && (qp->stopping || qp->link_down || qp->attr.qp_state == IBV_QPS_ERR))
        rc = FAKEIBV_SYN_DROPPED;
    if (rc == 0)
        *r = qp->rq[qp->rq_tail++ % qp->rq_depth];
    pthread_mutex_unlock(&qp->lock);
    return rc;
}

static void fakeibv_push_recv(struct fakeibv_qp *qp, const struct fakeibv_rwqe *r,
                              enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t len,
                              const struct fakeibv_wire_hdr *h)
{
    struct ibv_wc wc;

    memset(&wc, 0, sizeof(wc));
    wc.wr_id = r->wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.byte_len = len;
    wc.qp_num = qp->qpx.qp_base.qp_num;
    wc.src_qp = qp->attr.dest_qp_num;
    wc.vendor_err = st == IBV_WC_SUCCESS ? 0 : 0xfa;
    if (h->op == FAKEIBV_OP_WRITE_IMM || h->op == FAKEIBV_OP_SEND_IMM) {
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.imm_data = h->imm;
    }
    pthread_mutex_lock(&qp->lock);
    fakeibv_cq_push((struct fakeibv_cq *)qp->qpx.qp_base.recv_cq, &wc);
    pthread_mutex_unlock(&qp->lock);
}

/* SEND: scatter the payload into the receive WQE. Returns the NAK syndrome
 * (0 = success) and the receive completion status through *st. */
static int fakeibv_recv_scatter(struct fakeibv_qp *qp, struct fakeibv_src *src,
                                const struct fakeibv_rwqe *r, uint32_t len, enum ibv_wc_status *st,
                                int *io_err)
{
    uint64_t room = 0;
    uint32_t left = len;
    int i;

    *io_err = 0;
    for (i = 0; i < r->num_sge; i++)
        room += r->sge[i].length;
    if (room < len) {
        *st = IBV_WC_LOC_LEN_ERR;
        *io_err = fakeibv_src_skip(src, len);
        return FAKEIBV_SYN_REM_INV_REQ;
    }
    for (i = 0; i < r->num_sge && left > 0; i++) {
        uint32_t n = r->sge[i].length < left ? r->sge[i].length : left;
        struct fakeibv_mr *mr;

        if (n == 0)
            continue;
        if (fakeibv_mr_get(r->sge[i].lkey, qp->qpx.qp_base.pd, r->sge[i].addr, n,
                           IBV_ACCESS_LOCAL_WRITE, &mr) != FAKEIBV_MR_OK) {
            *st = IBV_WC_LOC_PROT_ERR;
            *io_err = fakeibv_src_skip(src, left);
            return FAKEIBV_SYN_REM_OP;
        }
        /* A descriptor that cannot be followed ends the stream too. */
        *io_err = fakeibv_src_place(src, mr, r->sge[i].addr, n);
        fakeibv_mr_put();
        if (*io_err != 0)
            return FAKEIBV_SYN_REM_OP;
        left -= n;
    }
    *st = IBV_WC_SUCCESS;
    return 0;
}

/* SEND / SEND_WITH_IMM: wait for a receive WQE (RNR), scatter into it. */
static int fakeibv_serve_send(struct fakeibv_qp *qp, struct fakeibv_src *src,
                              const struct fakeibv_wire_hdr *h)
{
    struct fakeibv_rwqe r;
    enum ibv_wc_status st;
    int syn, rc, io_err, fd = src->fd;

    syn = fakeibv_take_rwqe(qp, h->rnr_retry, &r);
    if (syn != 0) {
        rc = fakeibv_src_skip(src, h->len);
        return rc ? rc : fakeibv_reply(fd, FAKEIBV_OP_NAK, (uint8_t)syn, 0, h->seq);
    }
    syn = fakeibv_recv_scatter(qp, src, &r, h->len, &st, &io_err);
    if (io_err != 0)
        return io_err;
    fakeibv_push_recv(qp, &r, st, IBV_WC_RECV, h->len, h);
    if (syn != 0) {
        fakeibv_responder_fail(qp, IBV_EVENT_QP_FATAL);
        return fakeibv_reply(fd, FAKEIBV_OP_NAK, (uint8_t)syn, 0, h->seq);
    }
    return fakeibv_reply(fd, FAKEIBV_OP_ACK, 0, 0, h->seq);
}

static int fakeibv_op_atomic(uint8_t op)
{
    return op == FAKEIBV_OP_ATOMIC_FA || op == FAKEIBV_OP_ATOMIC_CS;
}

/*
 * An atomic on the 64-bit word at h->raddr (access checked by the caller):
 * done on this process's memory with the CPU's atomics, so it is atomic
 * against the owner's own loads and stores too, as a real HCA's atomics
 * are against each other (IBV_ATOMIC_HCA). The old value goes back as an
 * 8-byte READ response. A misaligned word is an invalid request (IBA
 * 9.4.5: atomics need 8-byte alignment). Device memory (fakecuda) is read
 * and written back through the driver under a lock: atomic against the
 * other atomics, as an HCA's are.
 */
static int fakeibv_serve_atomic(struct fakeibv_qp *qp, struct fakeibv_src *src,
                                const struct fakeibv_wire_hdr *h, struct fakeibv_mr *mr)
{
    uint64_t *word, old;
    int rc;

    if (h->raddr % 8 != 0) {
        FAKEIBV_INFO("qpn 0x%x: atomic at 0x%llx rkey 0x%x refused (not 8-byte aligned)",
                     qp->qpx.qp_base.qp_num, (unsigned long long)h->raddr, h->rkey);
        fakeibv_mr_put();
        fakeibv_responder_fail(qp, IBV_EVENT_QP_REQ_ERR);
        return fakeibv_reply(src->fd, FAKEIBV_OP_NAK, FAKEIBV_SYN_REM_INV_REQ, 0, h->seq);
    }
    if (mr->is_cuda) {
        /* Device memory: read, change, write back under one lock (atomic among the HCA's). */
        static pthread_mutex_t cuda_atomic_lock = PTHREAD_MUTEX_INITIALIZER;
        uint64_t dev = (uint64_t)(uintptr_t)mr->mr.addr + (h->raddr - mr->iova), next;

        pthread_mutex_lock(&cuda_atomic_lock);
        rc = fakeibv_cuda_dtoh(mr->cu_ctx, &old, dev, sizeof(old));
        next = h->op == FAKEIBV_OP_ATOMIC_FA ? old + src->operand[0]
               : old == src->operand[0]    ? src->operand[1]
                                           : old;
        if (rc == 0 && next != old)
            rc = fakeibv_cuda_htod(mr->cu_ctx, dev, &next, sizeof(next));
        pthread_mutex_unlock(&cuda_atomic_lock);
        fakeibv_mr_put();
        if (rc != 0) {
            fakeibv_responder_fail(qp, IBV_EVENT_QP_FATAL);
            return fakeibv_reply(src->fd, FAKEIBV_OP_NAK, FAKEIBV_SYN_REM_OP, 0, h->seq);
        }
        fakeibv_port_count(qp, 1, 8, 8);
        rc = fakeibv_reply(src->fd, FAKEIBV_OP_READ_RESP, 0, 8, h->seq);
        return rc != 0 ? rc : fakeibv_io_write(src->fd, &old, sizeof(old));
    }
    word = (uint64_t *)(void *)((uint8_t *)mr->mr.addr + (h->raddr - mr->iova));
    if (h->op == FAKEIBV_OP_ATOMIC_FA) {
        old = __atomic_fetch_add(word, src->operand[0], __ATOMIC_SEQ_CST);
    } else {
        old = src->operand[0];
        (void)__atomic_compare_exchange_n(word, &old, src->operand[1], 0, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST);
    }
    fakeibv_mr_put();
    fakeibv_port_count(qp, 1, 8, 8);
    rc = fakeibv_reply(src->fd, FAKEIBV_OP_READ_RESP, 0, 8, h->seq);
    return rc != 0 ? rc : fakeibv_io_write(src->fd, &old, sizeof(old));
}

/* Handles one request; returns 0 or an I/O errno that ends the stream. */
static int fakeibv_serve(struct fakeibv_qp *qp, struct fakeibv_src *src,
                         const struct fakeibv_wire_hdr *h)
{
    int fd = src->fd;
    int need = h->op == FAKEIBV_OP_READ_REQ  ? IBV_ACCESS_REMOTE_READ
               : fakeibv_op_atomic(h->op) ? IBV_ACCESS_REMOTE_ATOMIC
                                          : IBV_ACCESS_REMOTE_WRITE;
    int is_write = h->op == FAKEIBV_OP_WRITE || h->op == FAKEIBV_OP_WRITE_IMM;
    struct fakeibv_rwqe r;
    struct fakeibv_mr *mr = NULL;
    int syn, rc = 0;

    if (h->op == FAKEIBV_OP_SEND || h->op == FAKEIBV_OP_SEND_IMM)
        return fakeibv_serve_send(qp, src, h);
    /* RDMA: a zero-length operation carries no rkey check (IBA 9.4.4). */
    if (h->len > 0) {
        int ok = (qp->attr.qp_access_flags & need) &&
                 fakeibv_mr_get(h->rkey, qp->qpx.qp_base.pd, h->raddr, h->len, need, &mr) ==
                     FAKEIBV_MR_OK;

        if (!ok) {
            FAKEIBV_INFO("qpn 0x%x: remote %s of %u bytes at 0x%llx rkey 0x%x denied",
                         qp->qpx.qp_base.qp_num,
                         is_write ? "write" : fakeibv_op_atomic(h->op) ? "atomic" : "read", h->len,
                         (unsigned long long)h->raddr, h->rkey);
            if (is_write && (rc = fakeibv_src_skip(src, h->len)) != 0)
                return rc;
            if (!is_write)
                fakeibv_port_count(qp, 1, 0, -1); /* The NAK. */
            fakeibv_responder_fail(qp, IBV_EVENT_QP_ACCESS_ERR);
            return fakeibv_reply(fd, FAKEIBV_OP_NAK, FAKEIBV_SYN_REM_ACCESS, 0, h->seq);
        }
    }
    if (fakeibv_op_atomic(h->op))
        return fakeibv_serve_atomic(qp, src, h, mr);
    if (!is_write && src->null) {
        /* Null payload: the range was checked; the answer carries no bytes. */
        if (mr != NULL)
            fakeibv_mr_put();
        fakeibv_port_count(qp, 1, h->len, h->len);
        return fakeibv_reply_f(fd, FAKEIBV_OP_READ_RESP, 0, h->len, h->seq, FAKEIBV_HDR_NULL);
    }
    if (!is_write && src->desc) {
        /* Into the requester's SGEs first; the response then says "done". */
        rc = mr != NULL ? fakeibv_mem_pvm(mr, h->raddr, h->len, src->pid, src->iov, src->niov,
                                          0, 1)
                        : 0;
        if (mr != NULL)
            fakeibv_mr_put();
        if (rc != 0) {
            fakeibv_port_count(qp, 1, 0, -1); /* The NAK, if any. */
            return fakeibv_place_failed(qp, src, rc, h->seq);
        }
        fakeibv_port_count(qp, 1, h->len, h->len);
        return fakeibv_reply_f(fd, FAKEIBV_OP_READ_RESP, 0, h->len, h->seq, FAKEIBV_HDR_DESC);
    }
    if (!is_write) {
        fakeibv_port_count(qp, 1, h->len, h->len);
        rc = fakeibv_reply(fd, FAKEIBV_OP_READ_RESP, 0, h->len, h->seq);
        if (rc == 0 && mr != NULL)
            rc = fakeibv_mem_to_fd(mr, h->raddr, fd, h->len);
        if (mr != NULL)
            fakeibv_mr_put();
        return rc;
    }
    if (mr != NULL) {
        rc = fakeibv_src_place(src, mr, h->raddr, h->len);
        fakeibv_mr_put();
        if (rc != 0)
            return fakeibv_place_failed(qp, src, rc, h->seq);
    }
    if (fakeibv_trace.on)
        fakeibv_trace_placed(qp, h->op == FAKEIBV_OP_WRITE_IMM);
    if (h->op == FAKEIBV_OP_WRITE_IMM) {
        /* The data is placed before the receive WQE is looked for, so a
         * requester never stalls on the socket while the responder waits
         * out RNR (a real HCA would re-send the data instead). */
        syn = fakeibv_take_rwqe(qp, h->rnr_retry, &r);
        if (syn != 0)
            return fakeibv_reply(fd, FAKEIBV_OP_NAK, (uint8_t)syn, 0, h->seq);
        fakeibv_push_recv(qp, &r, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, h->len, h);
    }
    return fakeibv_reply(fd, FAKEIBV_OP_ACK, 0, 0, h->seq);
}

/* Reads the descriptor of an HDR_DESC request into src. Returns 0, or -1
 * for a malformed one (the stream is closed), or an I/O errno. */
static int fakeibv_read_desc(struct fakeibv_qp *qp, struct fakeibv_src *src, int one_copy,
                             const struct fakeibv_wire_hdr *h)
{
    struct fakeibv_wire_iov wiov[FAKEIBV_MAX_SGE];
    uint64_t total = 0;
    int i, n = h->syndrome, rc;

    src->desc = 0;
    src->off = 0;
    src->null = (h->flags & FAKEIBV_HDR_NULL) != 0;
    if (src->null && (h->flags & FAKEIBV_HDR_DESC)) {
        FAKEIBV_WARN("qpn 0x%x: request both null and descriptor; closing the stream",
                     qp->qpx.qp_base.qp_num);
        return -1;
    }
    if (!(h->flags & FAKEIBV_HDR_DESC))
        return 0;
    if (!one_copy || n > FAKEIBV_MAX_SGE) {
        FAKEIBV_WARN("qpn 0x%x: descriptor request (%d pieces) on a %s stream; closing it",
                     qp->qpx.qp_base.qp_num, n, one_copy ? "one-copy" : "streaming");
        return -1;
    }
    rc = fakeibv_io_read(src->fd, wiov, (size_t)n * sizeof(wiov[0]));
    if (rc != 0)
        return rc;
    for (i = 0; i < n; i++) {
        src->iov[i].iov_base = (void *)(uintptr_t)wiov[i].addr;
        src->iov[i].iov_len = (size_t)wiov[i].len;
        total += wiov[i].len;
    }
    if (total != h->len) {
        FAKEIBV_WARN("qpn 0x%x: descriptor of %llu bytes for a %u-byte request; closing it",
                     qp->qpx.qp_base.qp_num, (unsigned long long)total, h->len);
        return -1;
    }
    src->niov = n;
    src->desc = 1;
    return 0;
}

/* Serves one request from the stream. Returns 0, or nonzero when the
 * stream ends. */
static int fakeibv_resp_one(struct fakeibv_qp *qp, struct fakeibv_src *src, int one_copy)
{
    struct fakeibv_wire_hdr h;
    int fd = src->fd, rc = fakeibv_io_read(fd, &h, sizeof(h)), in_err;
    uint64_t t0;

    if (rc != 0)
        return rc;
    if (h.op < FAKEIBV_OP_WRITE || h.op > FAKEIBV_OP_ATOMIC_CS) {
        FAKEIBV_WARN("qpn 0x%x: unknown request op %u on inbound stream; closing it",
                     qp->qpx.qp_base.qp_num, h.op);
        return -1;
    }
    if (fakeibv_read_desc(qp, src, one_copy, &h) != 0)
        return -1;
    /* An atomic's operands follow its header, whatever becomes of it. */
    if (fakeibv_op_atomic(h.op) && (h.len != 8 || (h.flags & (FAKEIBV_HDR_DESC | FAKEIBV_HDR_NULL)))) {
        FAKEIBV_WARN("qpn 0x%x: malformed atomic request (len %u, flags 0x%x); closing the stream",
                     qp->qpx.qp_base.qp_num, h.len, h.flags);
        return -1;
    }
    if (fakeibv_op_atomic(h.op) && (rc = fakeibv_io_read(fd, src->operand, 16)) != 0)
        return rc;
    /* Requests that arrive before this QP reaches RTR (the peer got there
     * first) wait in the stream: fakeibv_resp_run parks it until then. */
    pthread_mutex_lock(&qp->lock);
    if (qp->stopping) {
        pthread_mutex_unlock(&qp->lock);
        return -1;
    }
    in_err = qp->attr.qp_state == IBV_QPS_ERR;
    pthread_mutex_unlock(&qp->lock);
    /* The request arrived on this QP's port; every answer but a READ's
     * data is one packet back (READ answers count where they go out). */
    fakeibv_port_count(qp, 0, fakeibv_has_payload(h.op) ? h.len : 0,
                       h.op == FAKEIBV_OP_READ_REQ || fakeibv_op_atomic(h.op) ? -1
                                                                               : (int64_t)h.len);
    if ((h.op != FAKEIBV_OP_READ_REQ && !fakeibv_op_atomic(h.op)) || in_err)
        fakeibv_port_count(qp, 1, 0, -1);
    if (in_err) {
        rc = fakeibv_has_payload(h.op) && !src->desc && !src->null
                 ? fakeibv_io_discard(fd, h.len)
                 : 0;
        return rc != 0 ? rc : fakeibv_reply(fd, FAKEIBV_OP_NAK, FAKEIBV_SYN_DROPPED, 0, h.seq);
    }
    if (src->null)
        __atomic_add_fetch(&fakeibv_stats.null_served_ops, 1, __ATOMIC_RELAXED);
    t0 = fakeibv_trace.on ? fakeibv_trace_now_ns() : 0;
    rc = fakeibv_serve(qp, src, &h);
    if (rc == 0 && t0 != 0)
        fakeibv_trace_served(t0);
    return rc;
}

/*
 * The engine found inbound stream `slot` readable: serve the requests
 * waiting on it. Before the QP reaches RTR the stream is parked (not read,
 * not re-armed) and ibv_modify_qp re-arms it; when it ends it is shut down
 * (the requester sees the end) and closed when the slot is reused or the QP
 * stops.
 */
void fakeibv_resp_run(struct fakeibv_qp *qp, int slot)
{
    struct fakeibv_inbound *in = &qp->in[slot];
    struct fakeibv_src src;
    int fd, one_copy, n, ended = 0;

    pthread_mutex_lock(&qp->lock);
    if (qp->stopping || in->fd < 0 || in->busy || in->ended) {
        pthread_mutex_unlock(&qp->lock);
        return;
    }
    if (qp->attr.qp_state == IBV_QPS_RESET || qp->attr.qp_state == IBV_QPS_INIT) {
        in->parked = 1;
        pthread_mutex_unlock(&qp->lock);
        return;
    }
    in->busy = 1;
    fd = in->fd;
    src.pid = in->peer_pid;
    one_copy = in->one_copy;
    pthread_mutex_unlock(&qp->lock);
    src.fd = fd;
    for (n = 0; n < FAKEIBV_JOB_BATCH && !ended; n++) {
        if (n > 0 && !fakeibv_readable(fd))
            break;
        ended = fakeibv_resp_one(qp, &src, one_copy) != 0;
    }
    pthread_mutex_lock(&qp->lock);
    in->busy = 0;
    if (ended) {
        in->ended = 1;
        shutdown(fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&qp->lock);
    if (!ended)
        fakeibv_engine_rearm(&in->job, fd);
}
