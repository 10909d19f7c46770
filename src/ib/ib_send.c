/*
 * isend: find the receiver's clear-to-send in our CTS FIFO (or return a
 * NULL request: NCCL retries; ib_send_cts.c reads and checks it), match the tag against the receive's
 * buffers, and once every buffer of the receive has its isend, RDMA-write
 * the data: on each data QP the message uses, a chain of WRITEs ending in
 * one signalled WRITE_WITH_IMM (imm_data: the size when n == 1; with
 * n > 1 the final write carries the sizes array into the receiver's
 * sizes FIFO). The send completions are handled here too.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_comm.h"

/* Bytes of buffer len that chain j of nq carries, at *off_p. */
static inline size_t ferry_ib_chain_part(size_t len, int nq, int j, size_t *off_p)
{
    size_t per = (len + (size_t)nq - 1) / (size_t)nq;
    size_t chunk = (per + FERRY_IB_CHUNK_ALIGN - 1) / FERRY_IB_CHUNK_ALIGN * FERRY_IB_CHUNK_ALIGN;
    size_t off = chunk * (size_t)j;

    *off_p = off;
    if (off >= len)
        return 0;
    return len - off < chunk ? len - off : chunk;
}

static inline size_t ferry_ib_slot_len(const ferry_ib_send_slot_t *slot, int i)
{
    return (slot->trunc >> i) & 1 ? 0 : slot->reqs[i]->sub[0].capacity;
}

/*
 * Post chain j of the slot's message on data QP q: the WRITEs of each
 * buffer's part j, ending in one signalled WRITE_WITH_IMM (the last data
 * WRITE itself, or, for grouped receives, a write of the sizes array). On a
 * merged device imm_data names message and chain (FERRY_IB_IMM_CHAIN), so a
 * chain that lands twice after a failover is counted once.
 */
static int ferry_ib_send_chain(ferry_ib_send_comm_t *sc, ferry_ib_send_slot_t *slot, int j,
                               int q, int nq)
{
    ferry_ib_conn_t *conn = &sc->base.conn;
    uint64_t seq = slot->fifo_seq;
    uint32_t s = (uint32_t)(seq % FERRY_IB_FIFO_SLOTS);
    struct ibv_send_wr wrs[FERRY_IB_MAX_RECVS + 1], *bad = NULL;
    struct ibv_sge sges[FERRY_IB_MAX_RECVS + 1];
    int n = slot->nreqs, m = ferry_ib_qp_mem(conn, q), rm = ferry_ib_qp_rmem(conn, q), i, k, fifo;
    int err;
    size_t size0 = slot->reqs[0]->sub[0].capacity, bytes = 0;

    /* Each WR is cleared as it is filled: most messages use one of the nine. */
    for (i = 0, k = 0; i < n; i++) {
        ferry_px_req_t *req = slot->reqs[i];
        const ferry_ib_mh_t *mh = req->sub[0].mem;
        const ferry_ib_rbuf_t *rbuf = ferry_ib_send_rbuf(sc, req);
        size_t off, len = ferry_ib_chain_part(ferry_ib_slot_len(slot, i), nq, j, &off);

        if (len == 0)
            continue;
        sges[k].addr = (uint64_t)(uintptr_t)(req->sub[0].buf + off);
        sges[k].length = (uint32_t)len;
        sges[k].lkey = mh->mr[m]->lkey;
        memset(&wrs[k], 0, sizeof(wrs[k]));
        wrs[k].opcode = IBV_WR_RDMA_WRITE;
        wrs[k].sg_list = &sges[k];
        wrs[k].num_sge = 1;
        wrs[k].wr.rdma.remote_addr = rbuf->addr + off;
        wrs[k].wr.rdma.rkey = rbuf->rkeys[rm];
        bytes += len;
        k++;
    }
    /*
     * The sizes go through the receiver's sizes FIFO for a grouped receive, and on
     * a merged device whenever the last data write cannot carry them (a send that
     * did not fit writes nothing; adaptive routing ends in a 0-byte write).
     */
    fifo = n > 1 || (conn->multi && (slot->trunc != 0 || (sc->ar && size0 > sc->ar_threshold)));
    if (fifo) {
        /* The sizes array, into the receiver's sizes FIFO; its completion ends the chain. */
        sges[k].addr = (uint64_t)(uintptr_t)sc->sizes_src[s];
        sges[k].length = (uint32_t)(sizeof(uint32_t) * (size_t)n);
        sges[k].lkey = conn->mem[m].ctrl_mr->lkey;
        memset(&wrs[k], 0, sizeof(wrs[k]));
        wrs[k].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wrs[k].sg_list = &sges[k];
        wrs[k].num_sge = 1;
        wrs[k].wr.rdma.remote_addr = conn->remote.sizes_addr +
                                     (uint64_t)s * sizeof(ferry_ib_sizes_slot_t);
        wrs[k].wr.rdma.rkey = conn->remote.ports[rm].ctrl_rkey;
        wrs[k].imm_data = htonl(conn->multi ? FERRY_IB_IMM_CHAIN(seq, j, nq, 1) : (uint32_t)seq);
        k++;
    } else if (k == 0 || (sc->ar && size0 > sc->ar_threshold)) {
        /* Nothing for this QP, or adaptive routing: a 0-byte WRITE_WITH_IMM completes it. */
        const ferry_ib_rbuf_t *rbuf0 = ferry_ib_send_rbuf(sc, slot->reqs[0]);

        memset(&wrs[k], 0, sizeof(wrs[k]));
        wrs[k].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wrs[k].num_sge = 0;
        wrs[k].wr.rdma.remote_addr = rbuf0->addr;
        wrs[k].wr.rdma.rkey = rbuf0->rkeys[rm];
        wrs[k].imm_data = htonl(conn->multi ? FERRY_IB_IMM_CHAIN(seq, j, nq, 0) : (uint32_t)size0);
        k++;
    } else {
        wrs[k - 1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wrs[k - 1].imm_data = htonl(conn->multi ? FERRY_IB_IMM_CHAIN(seq, j, nq, 0)
                                                : (uint32_t)size0);
    }
    /* Every WR carries the id: an error completes the failing WR, signalled or not. */
    for (i = 0; i < k; i++) {
        wrs[i].wr_id = FERRY_IB_WR_ID_EP(FERRY_IB_WR_DATA, j, seq, conn->mem[m].epoch);
        wrs[i].next = i + 1 < k ? &wrs[i + 1] : NULL;
    }
    wrs[k - 1].send_flags = IBV_SEND_SIGNALED;
    err = ibv_post_send(conn->qps[q], wrs, &bad);
    if (err != 0) {
        FERRY_WARN("ib send comm to %s on %s: ibv_post_send of message %llu chain %d (%d WRs) "
                   "on QP 0x%x (%s) failed: %s; the QP may be in the error state (an earlier "
                   "failure) or its send queue is full", conn->peer,
                   ferry_ib_comm_where(&sc->base), (unsigned long long)seq, j, k,
                   conn->qps[q]->qp_num, conn->mem[m].dev->name, strerror(err));
        return err;
    }
    slot->chain_qp[j] = (uint8_t)q;
    FERRY_IB_DIAG_ADD(conn->mem[m].bytes, bytes);
    return 0;
}

/*
 * Post chain j on the QP planned for it, or, on a merged device, on the
 * next QP whose port is up, moving on when a post fails there.
 */
static ferry_status_t ferry_ib_send_chain_any(ferry_ib_send_comm_t *sc,
                                              ferry_ib_send_slot_t *slot, int j, int q, int nq)
{
    ferry_ib_comm_t *c = &sc->base;
    int err = 0, tries;
    char why[160];

    for (tries = 0; tries <= c->conn.nmem; tries++) {
        q = ferry_ib_chain_qp(&c->conn, q, 0);
        if (q < 0)
            break;
        err = ferry_ib_send_chain(sc, slot, j, q, nq);
        if (err == 0)
            return FERRY_OK;
        snprintf(why, sizeof(why), "ibv_post_send on QP 0x%x failed: %s",
                 c->conn.qps[q]->qp_num, strerror(err));
        /*
         * One port: the comm fails with why; merged: the next port takes the chain.
         * Its CQ waits for the next poll: a completion taken here could retire the
         * slot this chain (or the move) is being posted from.
         */
        if (ferry_ib_member_stop(c, ferry_ib_qp_mem(&c->conn, q), why, FERRY_IB_STOP_WARN) < 0)
            return FERRY_ERR_REMOTE;
    }
    ferry_px_ring_fail(&c->ring, FERRY_ERR_REMOTE, "message %llu chain %d: no port left to post "
                       "it on", (unsigned long long)slot->fifo_seq, j);
    return FERRY_ERR_REMOTE;
}

/* Post the WR chains of the message: one per QP it uses. */
static ferry_status_t ferry_ib_send_post(ferry_ib_send_comm_t *sc, ferry_ib_send_slot_t *slot)
{
    ferry_ib_conn_t *conn = &sc->base.conn;
    uint32_t s = (uint32_t)(slot->fifo_seq % FERRY_IB_FIFO_SLOTS);
    int n = slot->nreqs, q0 = slot->q0, nq = slot->nq, i, j;
    ferry_status_t status;
    uint64_t now;

    for (i = 0; i < n && (n > 1 || conn->multi); i++)
        sc->sizes_src[s][i] = (uint32_t)slot->reqs[i]->sub[0].capacity; /* Read if it goes by the FIFO. */
    for (j = 0; j < nq; j++) {
        status = ferry_ib_send_chain_any(sc, slot, j, (q0 + j) % conn->nqps, nq);
        if (status != FERRY_OK)
            return status;
        slot->chains++;
        slot->outstanding++;
        FERRY_IB_DIAG_ADD(sc->chains_posted, 1);
    }
    /* A lone buffer's request was posted in this very isend call: its post time will do. */
    now = n == 1 ? slot->reqs[0]->post_ns : ferry_px_now_ns();
    for (i = 0; i < n; i++)
        ferry_px_req_parts_start_at(slot->reqs[i], (uint32_t)nq, now);
    return FERRY_OK;
}

int ferry_ib_send_move(ferry_ib_send_comm_t *sc, int m)
{
    ferry_ib_conn_t *conn = &sc->base.conn;
    int s, j, nq, moved = 0, here;

    for (s = 0; s < FERRY_IB_FIFO_SLOTS; s++) {
        ferry_ib_send_slot_t *slot = &sc->slots[s];

        if (slot->outstanding == 0)
            continue;
        nq = slot->nq;
        for (j = 0, here = 0; j < nq; j++) {
            if ((slot->chains_done >> j) & 1 || ferry_ib_qp_mem(conn, slot->chain_qp[j]) != m)
                continue;
            if (ferry_ib_send_chain_any(sc, slot, j, slot->chain_qp[j], nq) != FERRY_OK)
                return -1;
            if (!((slot->moved >> j) & 1)) {
                slot->moved |= 1U << j;
                FERRY_IB_DIAG_ADD(sc->moved_out, 1);
            }
            here = 1;
            FERRY_IB_DIAG_ADD(conn->mem[m].moved, 1);
        }
        moved += here;
    }
    return moved;
}

void ferry_ib_send_completion(ferry_ib_send_comm_t *sc, const struct ibv_wc *wc)
{
    uint32_t seq = FERRY_IB_WR_SEQ(wc->wr_id);
    ferry_ib_send_slot_t *slot = &sc->slots[seq % FERRY_IB_FIFO_SLOTS];
    ferry_ib_conn_t *conn = &sc->base.conn;
    int i, nq, j = FERRY_IB_WR_CHAIN(wc->wr_id);

    if (FERRY_IB_WR_KIND(wc->wr_id) != FERRY_IB_WR_DATA || slot->outstanding == 0 ||
        (uint32_t)slot->fifo_seq != seq || j >= FERRY_IB_MAX_QPS) {
        if (conn->multi && FERRY_IB_WR_KIND(wc->wr_id) == FERRY_IB_WR_DATA)
            return; /* A chain moved off a failed port completed there too: counted once. */
        FERRY_WARN("ib send comm to %s: unexpected completion wr_id 0x%llx on QP 0x%x (slot "
                   "holds message %llu, %d chain(s) outstanding); a ferry bug", conn->peer,
                   (unsigned long long)wc->wr_id, wc->qp_num,
                   (unsigned long long)slot->fifo_seq, slot->outstanding);
        ferry_px_ring_fail(&sc->base.ring, FERRY_ERR_INTERNAL, "unexpected completion 0x%llx",
                           (unsigned long long)wc->wr_id);
        return;
    }
    if (conn->multi) {
        /* Only the completion of the QP the chain now lives on counts. */
        if ((slot->chains_done >> j) & 1 || conn->qps[slot->chain_qp[j]]->qp_num != wc->qp_num)
            return;
        slot->chains_done |= 1U << j;
        if ((slot->moved >> j) & 1) {
            slot->moved &= ~(1U << j);
            FERRY_IB_DIAG_ADD(sc->moved_out, -1);
        }
    }
    FERRY_IB_DIAG_ADD(conn->mem[ferry_ib_qp_mem(conn, slot->chain_qp[j])].chains, 1);
    nq = slot->nq;
    for (i = 0; i < slot->nreqs; i++) {
        size_t off, len = ferry_ib_chain_part(ferry_ib_slot_len(slot, i), nq, j, &off);

        if (!((slot->trunc >> i) & 1))
            ferry_px_req_parts_finish(slot->reqs[i], 1, len);
    }
    FERRY_IB_DIAG_ADD(sc->chains_done, 1);
    if (--slot->outstanding > 0)
        return;
    /* Every chain is back: the receiver was told; a send that did not fit fails next poll. */
    for (i = 0; i < slot->nreqs; i++)
        if ((slot->trunc >> i) & 1 && sc->ntrunc < FERRY_IB_FIFO_SLOTS)
            sc->trunc[sc->ntrunc++] = slot->reqs[i];
    memset(slot, 0, sizeof(*slot));
}

void ferry_ib_send_fail_trunc(ferry_ib_send_comm_t *sc)
{
    while (sc->ntrunc > 0)
        ferry_px_req_fail(sc->trunc[--sc->ntrunc], FERRY_ERR_USAGE);
}

/*
 * What a send that waits for its clear-to-send waits on, for the ring's
 * WARN and dump (ferry_px_ring_check_wait): mostly a receiver that has not
 * posted, else a clear-to-send the fabric lost (NCCL's own IB waits here in
 * silence). A dead receiver is an error, not this (ferry_ib_check_peer).
 */
void ferry_ib_send_wait_why(const ferry_px_ring_t *ring, char *buf, size_t len)
{
    const ferry_ib_comm_t *c = (const ferry_ib_comm_t *)ring;

    snprintf(buf, len, "for the receiver's clear-to-send: the receiver %s has not posted the "
             "matching irecv (a slower rank, or stopped), or its clear-to-send was lost on the "
             "way; check that rank's log, whether it is still running, and its dump (a receive "
             "posted there means the clear-to-send did not arrive)", c->conn.peer);
}

/* The receive's buffer this isend goes to: the first unmatched one with its tag. */
static int ferry_ib_send_match(ferry_ib_send_comm_t *sc, const ferry_ib_cts_t *e, int nreqs,
                               int tag, size_t size)
{
    const ferry_ib_send_slot_t *slot = &sc->slots[sc->fifo_head % FERRY_IB_FIFO_SLOTS];
    char tags[96];
    size_t off = 0;
    int r;

    for (r = 0; r < nreqs; r++)
        if (slot->reqs[r] == NULL && e[r].tag == tag)
            return r;
    for (r = 0; r < nreqs && off < sizeof(tags); r++)
        off += (size_t)snprintf(tags + off, sizeof(tags) - off, "%s%d%s", r ? "," : "", e[r].tag,
                                slot->reqs[r] != NULL ? "(taken)" : "");
    FERRY_WARN_LIMITED("ib send comm to %s on %s: isend of %zu bytes with tag %d matches no "
                       "free buffer of the peer's receive %llu (tags %s); sends and receives "
                       "must pair up in order with matching tags", sc->base.conn.peer,
                       ferry_ib_comm_where(&sc->base), size, tag,
                       (unsigned long long)sc->fifo_head, tags);
    return -1;
}

ferry_status_t ferry_ib_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void **request_p)
{
    ferry_ib_send_comm_t *sc = send_comm;
    ferry_ib_conn_t *conn = &sc->base.conn;
    ferry_ib_send_slot_t *slot = &sc->slots[sc->fifo_head % FERRY_IB_FIFO_SLOTS];
    const ferry_ib_cts_t *e = sc->cts_seen; /* Checked copies, never the FIFO itself. */
    ferry_ib_rbuf_t *rbuf;
    ferry_px_sub_t sub;
    ferry_px_req_t *req;
    int failed, nreqs, r, q0, nq;
    long st;

    *request_p = NULL;
    failed = atomic_load_explicit(&sc->base.ring.failed, memory_order_acquire);
    if (failed != 0)
        return (ferry_status_t)failed;
    if (size > INT_MAX) {
        FERRY_WARN("ib send comm to %s: isend of %zu bytes: the ib backend moves at most %d "
                   "bytes per message (maxP2pBytes)", conn->peer, size, INT_MAX);
        return FERRY_ERR_USAGE;
    }
    if (sc->moved_out > 0)
        return FERRY_OK; /* A failover's moved chains first (moved_out); test() reaps them. */
    if (slot->chains > 0) {
        /* The slot's previous message is still on the wire: reap, then retry later. */
        st = ferry_ib_poll(&sc->base.ring, NULL, ferry_px_ring_clock(&sc->base.ring));
        if (st < 0)
            return (ferry_status_t)st;
        if (slot->chains > 0)
            return FERRY_OK;
    }
    st = ferry_ib_send_cts_read(sc, slot->matched, &nreqs);
    if (st < 0)
        return (ferry_status_t)st;
    if (st == 0) {
        /* NCCL retries isend in a tight loop: the comm's clock, read every few calls. */
        uint64_t now = ferry_px_ring_clock(&sc->base.ring);

        st = ferry_ib_check_peer(&sc->base, 1, now);
        if (st < 0)
            return (ferry_status_t)st;
        ferry_px_ring_check_wait(&sc->base.ring, sc->fifo_head, size, now);
        return FERRY_OK; /* No clear-to-send yet, or a grouped receive's still landing. */
    }
    r = ferry_ib_send_match(sc, e, nreqs, tag, size);
    if (r < 0)
        return FERRY_ERR_USAGE;
    ferry_ib_msg_plan(conn, sc->fifo_head, nreqs, size, &q0, &nq);
    memset(&sub, 0, sizeof(sub));
    sub.buf = data;
    sub.capacity = size;
    sub.tag = tag;
    sub.mem = mhandle;
    req = ferry_px_ring_post(&sc->base.ring, 1, &sub, 0, (uint32_t)nq, 0);
    if (req == NULL)
        return FERRY_OK; /* 32 in flight. */
    atomic_store_explicit(&req->sub[0].size, size, memory_order_relaxed);
    rbuf = ferry_ib_send_rbuf(sc, req);
    rbuf->addr = e[r].addr;
    memcpy(rbuf->rkeys, e[r].rkeys, sizeof(rbuf->rkeys));
    req->backend_word = sc->fifo_head;
    if (slot->matched == 0) {
        slot->nreqs = nreqs;
        slot->fifo_seq = sc->fifo_head;
        slot->q0 = (uint8_t)q0; /* A grouped receive's buffers all get the same plan. */
        slot->nq = (uint8_t)nq;
    }
    if (size > e[r].size) {
        FERRY_WARN_LIMITED("ib send comm to %s on %s: isend of %zu bytes (tag %d) does not fit "
                           "the receive buffer of %llu bytes the peer posted for it (message "
                           "%llu, buffer %d of %d); nothing is written, both sides fail with "
                           "ncclInvalidUsage", conn->peer, ferry_ib_comm_where(&sc->base), size,
                           tag, (unsigned long long)e[r].size,
                           (unsigned long long)sc->fifo_head, r, nreqs);
        slot->trunc |= 1U << r;
        req->backend_word |= FERRY_IB_WORD_TRUNC;
    }
    slot->reqs[r] = req;
    *request_p = req;
    if (++slot->matched < nreqs)
        return FERRY_OK;
    FERRY_IB_DIAG_ADD(sc->fifo_head, 1);
    return ferry_ib_send_post(sc, slot);
}
