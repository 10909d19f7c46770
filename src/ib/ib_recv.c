/*
 * irecv: post a 0-SGE receive WR on each data QP the message will use
 * (only the sender's WRITE_WITH_IMM consumes one), then RDMA-write the n
 * buffers' descriptors into the sender's CTS FIFO slot, inline when
 * NCCL_IB_USE_INLINE allows, signalled every FERRY_IB_CTS_SIGNAL-th so the
 * send queue drains. The WRITE_WITH_IMM completions tell the sizes.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_comm.h"

static ferry_status_t ferry_ib_recv_post_fail(ferry_ib_recv_comm_t *rc, const char *what,
                                              uint32_t qpn, int err)
{
    FERRY_WARN("ib recv comm from %s on %s: %s on QP 0x%x failed: %s; the QP may be in the error "
               "state after an earlier failure", rc->base.conn.peer,
               ferry_ib_comm_where(&rc->base), what, qpn, strerror(err));
    ferry_px_ring_fail(&rc->base.ring, FERRY_ERR_REMOTE, "%s on QP 0x%x failed: %s", what, qpn,
                       strerror(err));
    return FERRY_ERR_REMOTE;
}

/* Write the n CTS entries of receive seq into the sender's FIFO, on the CTS QP. */
static ferry_status_t ferry_ib_recv_post_cts(ferry_ib_recv_comm_t *rc, uint64_t seq, int n)
{
    ferry_ib_conn_t *conn = &rc->base.conn;
    uint32_t s = (uint32_t)(seq % FERRY_IB_FIFO_SLOTS);
    int q = conn->cts_qp;
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_sge sge;
    int err;

    memset(&wr, 0, sizeof(wr));
    sge.addr = (uint64_t)(uintptr_t)rc->cts[s];
    sge.length = (uint32_t)(sizeof(ferry_ib_cts_t) * (size_t)n);
    sge.lkey = conn->mem[ferry_ib_qp_mem(conn, q)].ctrl_mr->lkey;
    wr.wr_id = FERRY_IB_WR_ID_EP(FERRY_IB_WR_CTS, q, seq, conn->mem[ferry_ib_qp_mem(conn, q)].epoch);
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = conn->remote.fifo_addr +
                             (uint64_t)s * FERRY_IB_MAX_RECVS * sizeof(ferry_ib_cts_t);
    wr.wr.rdma.rkey = conn->remote.ports[ferry_ib_qp_rmem(conn, q)].ctrl_rkey;
    if (sge.length <= conn->max_inline)
        wr.send_flags |= IBV_SEND_INLINE;
    /* Unsignalled WQEs hold their SQ slots until a later signalled one completes. */
    if (seq % FERRY_IB_CTS_SIGNAL == 0)
        wr.send_flags |= IBV_SEND_SIGNALED;
    err = ibv_post_send(conn->qps[q], &wr, &bad);
    if (err != 0)
        return ferry_ib_recv_post_fail(rc, "ibv_post_send of the clear-to-send",
                                       conn->qps[q]->qp_num, err);
    return FERRY_OK;
}

ferry_status_t ferry_ib_recv_pool_fill(ferry_ib_recv_comm_t *rc, int m)
{
    ferry_ib_conn_t *conn = &rc->base.conn;
    struct ibv_recv_wr wr, *bad = NULL;
    int q, k, err;

    for (q = 0; q < conn->nqps; q++) {
        if (m >= 0 && ferry_ib_qp_mem(conn, q) != m)
            continue;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = FERRY_IB_WR_ID_EP(FERRY_IB_WR_RECV, q, 0,
                                     conn->mem[ferry_ib_qp_mem(conn, q)].epoch);
        for (k = 0; k < FERRY_IB_RQ_DEPTH; k++) {
            err = ibv_post_recv(conn->qps[q], &wr, &bad);
            if (err != 0)
                return ferry_ib_recv_post_fail(rc, "ibv_post_recv (keeping receives posted)",
                                               conn->qps[q]->qp_num, err);
        }
    }
    return FERRY_OK;
}

int ferry_ib_recv_move(ferry_ib_recv_comm_t *rc, int m)
{
    ferry_ib_conn_t *conn = &rc->base.conn;
    uint64_t seq = rc->cts_seq > FERRY_IB_FIFO_SLOTS ? rc->cts_seq - FERRY_IB_FIFO_SLOTS : 0;
    int moved = 0;

    if (ferry_ib_qp_mem(conn, conn->cts_qp) != m)
        return 0;
    conn->cts_qp = ferry_ib_chain_qp(conn, conn->cts_qp, 0);
    /*
     * Clear-to-sends that went out on the failed port may be lost: write every
     * one still waiting for data again (the same bytes; the sender reads an
     * entry once), ahead of any new one on the same QP.
     */
    for (; seq < rc->cts_seq; seq++) {
        ferry_px_req_t *req = rc->fifo_reqs[seq % FERRY_IB_FIFO_SLOTS];

        if (req == NULL || req->backend_word != seq ||
            atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_ACTIVE)
            continue;
        if (ferry_ib_recv_post_cts(rc, seq, req->n) != FERRY_OK)
            return -1;
        moved++;
        FERRY_IB_DIAG_ADD(conn->mem[m].moved, 1);
    }
    return moved;
}

ferry_status_t ferry_ib_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **request_p)
{
    ferry_ib_recv_comm_t *rc = recv_comm;
    ferry_ib_conn_t *conn = &rc->base.conn;
    ferry_px_sub_t subs[FERRY_IB_MAX_RECVS];
    uint64_t seq = rc->cts_seq;
    uint32_t s = (uint32_t)(seq % FERRY_IB_FIFO_SLOTS);
    ferry_px_req_t *req;
    ferry_status_t status;
    void *hint = *request_p; /* NCCL_NET_OPTIONAL_RECV_COMPLETION, or anything. */
    int failed, i, m, q0, nq, err, early;

    *request_p = NULL;
    failed = atomic_load_explicit(&rc->base.ring.failed, memory_order_acquire);
    if (failed != 0)
        return (ferry_status_t)failed;
    memset(subs, 0, sizeof(subs[0]) * (size_t)n);
    for (i = 0; i < n; i++) {
        subs[i].buf = data[i];
        subs[i].capacity = sizes[i];
        subs[i].tag = tags != NULL ? tags[i] : 0;
        subs[i].mem = mhandles != NULL ? mhandles[i] : NULL;
    }
    ferry_ib_msg_qps(conn, seq, &q0, &nq);
    early = ferry_ib_recv_early_wanted(rc, hint, n, nq);
    /* FIFO slot s may still wait for an early receive's data, even for a normal receive. */
    err = ferry_ib_recv_early_slot_busy(rc, s);
    if (err != 0)
        return err < 0 ? (ferry_status_t)err : FERRY_OK;
    req = ferry_px_ring_post(&rc->base.ring, n, subs, 0, (uint32_t)nq, 0);
    if (req == NULL)
        return FERRY_OK; /* 32 in flight: NCCL retries. */
    req->backend_word = seq;
    rc->fifo_reqs[s] = req;
    rc->chains_seen[s] = 0;
    rc->chain_bytes[s] = 0;
    for (i = 0; i < nq && !conn->multi; i++) {
        struct ibv_recv_wr wr, *bad = NULL;

        memset(&wr, 0, sizeof(wr));
        wr.wr_id = FERRY_IB_WR_ID(FERRY_IB_WR_RECV, i, seq);
        err = ibv_post_recv(conn->qps[(q0 + i) % conn->nqps], &wr, &bad);
        if (err != 0)
            return ferry_ib_recv_post_fail(rc, "ibv_post_recv",
                                           conn->qps[(q0 + i) % conn->nqps]->qp_num, err);
    }
    for (i = 0; i < n; i++) {
        ferry_ib_cts_t *e = &rc->cts[s][i];
        const ferry_ib_mh_t *mh = subs[i].mem;

        e->addr = (uint64_t)(uintptr_t)data[i];
        e->size = sizes[i];
        for (m = 0; m < conn->nmem; m++)
            e->rkeys[m] = mh != NULL && mh->mr_remote[m] != NULL ? mh->mr_remote[m]->rkey : 0;
        e->nreqs = (uint32_t)n;
        e->tag = subs[i].tag;
        e->idx = seq + 1;
    }
    status = ferry_ib_recv_post_cts(rc, seq, n);
    if (status != FERRY_OK)
        return status;
    FERRY_IB_DIAG_ADD(rc->cts_seq, 1);
    ferry_px_req_parts_start_at(req, (uint32_t)nq, req->post_ns); /* Posted in this call. */
    if (early)
        ferry_ib_recv_early_post(rc, req, s, seq);
    *request_p = req;
    return FERRY_OK;
}

/*
 * The last completion of a receive: sizes in place, or the sender's data did
 * not fit. parts: the parts it retires (more than one when a merged device's
 * message came whole on one port while the receive expected one per port).
 */
static void ferry_ib_recv_finish(ferry_ib_recv_comm_t *rc, ferry_px_req_t *req, uint32_t imm,
                                 uint32_t parts)
{
    const volatile uint32_t *sizes = rc->sizes[req->backend_word % FERRY_IB_FIFO_SLOTS];
    uint64_t total = 0;
    int i;

    for (i = 0; i < req->n; i++) {
        /* imm: the size (n == 1), or on a merged device what the chains wrote (UINT32_MAX: FIFO). */
        uint64_t got = req->n == 1 && imm != UINT32_MAX ? imm : sizes[i];

        if (got > req->sub[i].capacity) {
            FERRY_WARN("ib recv comm from %s on %s: message %llu buffer %d (tag %d): the peer "
                       "sent %llu bytes into a receive of %zu bytes; nothing was written. Every "
                       "receive must be at least as large as its send (a size mismatch between "
                       "ranks)", rc->base.conn.peer, ferry_ib_comm_where(&rc->base),
                       (unsigned long long)req->backend_word, i, req->sub[i].tag,
                       (unsigned long long)got, req->sub[i].capacity);
            ferry_px_req_fail(req, FERRY_ERR_USAGE);
            return;
        }
        atomic_store_explicit(&req->sub[i].size, got, memory_order_relaxed);
        total += got;
    }
    ferry_px_req_parts_finish(req, parts, total);
}

/*
 * A merged device's WRITE_WITH_IMM: imm_data names message and chain, the
 * receive it consumed is put back, and a chain that lands twice (sent again
 * after a failover) counts once.
 */
static void ferry_ib_recv_chain(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc)
{
    ferry_ib_conn_t *conn = &rc->base.conn;
    uint32_t imm = ntohl(wc->imm_data), slot = FERRY_IB_IMM_SEQ(imm) % FERRY_IB_FIFO_SLOTS;
    int q = FERRY_IB_WR_CHAIN(wc->wr_id), j = FERRY_IB_IMM_J(imm), err;
    ferry_px_req_t *req = rc->fifo_reqs[slot];
    struct ibv_recv_wr wr, *bad = NULL;
    uint32_t nparts, count;

    if (q < conn->nqps && !conn->mem[ferry_ib_qp_mem(conn, q)].down) {
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = FERRY_IB_WR_ID_EP(FERRY_IB_WR_RECV, q, 0,
                                     conn->mem[ferry_ib_qp_mem(conn, q)].epoch);
        err = ibv_post_recv(conn->qps[q], &wr, &bad);
        if (err != 0) {
            ferry_ib_recv_post_fail(rc, "ibv_post_recv (keeping receives posted)",
                                    conn->qps[q]->qp_num, err);
            return;
        }
    }
    if (req == NULL ||
        ((uint32_t)req->backend_word & FERRY_IB_IMM_SEQ_MASK) != FERRY_IB_IMM_SEQ(imm) ||
        atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_ACTIVE) {
        uint32_t behind = ((uint32_t)rc->cts_seq - FERRY_IB_IMM_SEQ(imm)) & FERRY_IB_IMM_SEQ_MASK;

        /* A second copy of a chain of a message already reported (sent again after a failover). */
        if (behind > 0 && behind <= 2 * FERRY_IB_FIFO_SLOTS)
            return;
        FERRY_WARN("ib recv comm from %s: completion for message %u chain %d on QP 0x%x, which "
                   "no posted receive expects; a ferry bug or a peer of another build",
                   conn->peer, FERRY_IB_IMM_SEQ(imm), j, wc->qp_num);
        ferry_px_ring_fail(&rc->base.ring, FERRY_ERR_REMOTE, "unexpected completion imm 0x%x",
                           imm);
        return;
    }
    /* The sender cut it in count parts: one per port, or 1 when it went whole on one. */
    nparts = atomic_load_explicit(&req->nparts, memory_order_relaxed);
    count = (uint32_t)FERRY_IB_IMM_COUNT(imm);
    if (count > nparts || (uint32_t)j >= count) {
        char desc[192];

        ferry_px_ring_describe(&rc->base.ring, desc, sizeof(desc));
        FERRY_WARN("%s: message %u arrived as part %d of %u on QP 0x%x, but its receive "
                   "(request %s, %u of %u parts in) expects at most %u parts; the peer %s runs "
                   "another ferry build: use one build on every rank", desc,
                   FERRY_IB_IMM_SEQ(imm), j, count, wc->qp_num,
                   ferry_px_req_state_str(atomic_load(&req->state)),
                   atomic_load_explicit(&req->done, memory_order_relaxed), nparts, nparts,
                   conn->peer);
        ferry_px_ring_fail(&rc->base.ring, FERRY_ERR_REMOTE, "bad part %d of %u (imm 0x%x)", j,
                           count, imm);
        return;
    }
    if ((rc->chains_seen[slot] >> j) & 1)
        return; /* Landed twice: once on the failed port, once where it was moved. */
    rc->chains_seen[slot] |= 1U << j;
    FERRY_IB_DIAG_ADD(rc->imm_done, 1);
    /* One buffer, sizes not in the FIFO: the message is what its chains wrote. */
    rc->chain_bytes[slot] = imm & FERRY_IB_IMM_FIFO ? UINT64_MAX
                          : rc->chain_bytes[slot] == UINT64_MAX ? UINT64_MAX
                                                               : rc->chain_bytes[slot] + wc->byte_len;
    if (q < conn->nqps)
        FERRY_IB_DIAG_ADD(conn->mem[ferry_ib_qp_mem(conn, q)].chains, 1);
    if ((uint32_t)__builtin_popcount(rc->chains_seen[slot]) < count) {
        ferry_px_req_parts_finish(req, 1, 0);
        return;
    }
    ferry_ib_recv_finish(rc, req,
                         rc->chain_bytes[slot] == UINT64_MAX ? UINT32_MAX
                                                             : (uint32_t)rc->chain_bytes[slot],
                         nparts - atomic_load_explicit(&req->done, memory_order_relaxed));
}

void ferry_ib_recv_completion(ferry_ib_recv_comm_t *rc, const struct ibv_wc *wc)
{
    uint32_t seq = FERRY_IB_WR_SEQ(wc->wr_id);
    ferry_px_req_t *req;

    if (FERRY_IB_WR_KIND(wc->wr_id) == FERRY_IB_WR_CTS)
        return; /* A signalled clear-to-send went out; its SQ slots are free again. */
    if (FERRY_IB_WR_KIND(wc->wr_id) == FERRY_IB_WR_FLUSH) {
        ferry_ib_flush_completion(rc, wc); /* ib_flush.c */
        return;
    }
    if (rc->base.conn.multi && FERRY_IB_WR_KIND(wc->wr_id) == FERRY_IB_WR_RECV &&
        wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        ferry_ib_recv_chain(rc, wc);
        return;
    }
    if (FERRY_IB_WR_KIND(wc->wr_id) == FERRY_IB_WR_RECV &&
        wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && ferry_ib_recv_early_landed(rc, wc))
        return; /* The data of a receive reported done when posted (ib_recv_early.c). */
    req = rc->fifo_reqs[seq % FERRY_IB_FIFO_SLOTS];
    if (req == NULL) /* Never posted: the slot's free request, for the WARN's words. */
        req = &rc->base.ring.reqs[seq % FERRY_IB_FIFO_SLOTS];
    if (FERRY_IB_WR_KIND(wc->wr_id) != FERRY_IB_WR_RECV ||
        wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || (uint32_t)req->backend_word != seq ||
        atomic_load_explicit(&req->state, memory_order_acquire) != FERRY_PX_REQ_ACTIVE) {
        FERRY_WARN("ib recv comm from %s: unexpected completion wr_id 0x%llx opcode %d on QP "
                   "0x%x (slot holds message %llu in state %s); a ferry bug or a peer of "
                   "another build", rc->base.conn.peer, (unsigned long long)wc->wr_id,
                   (int)wc->opcode, wc->qp_num, (unsigned long long)req->backend_word,
                   ferry_px_req_state_str(atomic_load(&req->state)));
        ferry_px_ring_fail(&rc->base.ring, FERRY_ERR_REMOTE, "unexpected completion 0x%llx",
                           (unsigned long long)wc->wr_id);
        return;
    }
    FERRY_IB_DIAG_ADD(rc->imm_done, 1);
    if (atomic_load_explicit(&req->done, memory_order_relaxed) + 1 <
        atomic_load_explicit(&req->nparts, memory_order_relaxed)) {
        ferry_px_req_parts_finish(req, 1, 0);
        return;
    }
    ferry_ib_recv_finish(rc, req, ntohl(wc->imm_data), 1);
}
