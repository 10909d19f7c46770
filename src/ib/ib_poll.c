/*
 * Progress for test(): poll the comm's CQ in batches, hand completions to
 * the send or receive side, and turn what goes wrong into one WARN that
 * explains it and a failed ring (every request then fails with
 * ncclRemoteError): completion errors, async events on the comm's QPs or
 * port, and a peer whose process is gone (EOF on the OOB socket, seen
 * within about a millisecond of coarse clock plus a short grace).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ib/ib_comm.h"

static const char *ferry_ib_wc_hint(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
        return "no answer from the peer's NIC within NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT: the "
               "peer process died or the link, GID or routing is wrong; check the link "
               "(ibv_devinfo, port counters), NCCL_IB_GID_INDEX, or raise NCCL_IB_TIMEOUT";
    case IBV_WC_REM_ACCESS_ERR:
        return "the peer refused the RDMA write: its buffer or key is not registered for "
               "remote write (a receive buffer deregistered or freed while posted, or mixed "
               "ferry builds)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "the peer had no receive posted (a ferry protocol bug or mixed builds)";
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
        return "a local buffer is not inside its registration: deregistered or freed while "
               "in flight";
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
        return "the peer's NIC rejected the request (its QP failed or was destroyed)";
    default:
        return "see the verbs status; ibv_devinfo and the port counters show the NIC's view";
    }
}

/*
 * The path through a port is gone (no answer, QP in error): another port
 * may still reach the peer. Access and length errors are the request's own
 * and would fail on every port.
 */
static int ferry_ib_wc_path_lost(enum ibv_wc_status status)
{
    return status == IBV_WC_RETRY_EXC_ERR || status == IBV_WC_WR_FLUSH_ERR ||
           status == IBV_WC_RNR_RETRY_EXC_ERR || status == IBV_WC_FATAL_ERR ||
           status == IBV_WC_RESP_TIMEOUT_ERR || status == IBV_WC_REM_ABORT_ERR ||
           status == IBV_WC_GENERAL_ERR;
}

static const char *ferry_ib_wr_what(uint64_t wr_id)
{
    switch (FERRY_IB_WR_KIND(wr_id)) {
    case FERRY_IB_WR_DATA: return "RDMA write of data";
    case FERRY_IB_WR_CTS:  return "RDMA write of a clear-to-send";
    case FERRY_IB_WR_RECV: return "receive of the peer's WRITE_WITH_IMM";
    case FERRY_IB_WR_FLUSH: return "1-byte RDMA READ of the GDR flush";
    default:               return "unknown work request";
    }
}

/* The request a work request belongs to, for the WARN; NULL if none. */
static const ferry_px_req_t *ferry_ib_wc_req(ferry_ib_comm_t *c, uint64_t wr_id)
{
    uint32_t seq = FERRY_IB_WR_SEQ(wr_id);

    if (FERRY_IB_WR_KIND(wr_id) == FERRY_IB_WR_DATA && c->ring.kind == FERRY_PX_SEND) {
        const ferry_ib_send_slot_t *slot =
            &((ferry_ib_send_comm_t *)c)->slots[seq % FERRY_IB_FIFO_SLOTS];

        return slot->reqs[0];
    }
    if (FERRY_IB_WR_KIND(wr_id) == FERRY_IB_WR_RECV && c->ring.kind == FERRY_PX_RECV)
        return ((ferry_ib_recv_comm_t *)c)->fifo_reqs[seq % FERRY_IB_FIFO_SLOTS];
    if (FERRY_IB_WR_KIND(wr_id) == FERRY_IB_WR_FLUSH && seq < FERRY_MAX_REQUESTS)
        return &c->ring.reqs[seq];
    return NULL;
}

static long ferry_ib_fail(ferry_ib_comm_t *c, const char *why)
{
    char desc[192];

    ferry_px_ring_describe(&c->ring, desc, sizeof(desc));
    FERRY_WARN("%s: %s; every request of this comm now fails with ncclRemoteError", desc, why);
    ferry_px_ring_fail(&c->ring, FERRY_ERR_REMOTE, "%s", why);
    return FERRY_ERR_REMOTE;
}

static void ferry_ib_wc_error(ferry_ib_comm_t *c, const struct ibv_wc *wc)
{
    const ferry_px_req_t *req;
    char desc[192], words[256] = "none";

    if (FERRY_IB_WR_KIND(wc->wr_id) == FERRY_IB_WR_FLUSH && c->ring.kind == FERRY_PX_RECV) {
        /* The flush QP is the comm's own, to itself: its errors get ib_flush.c's GPU words. */
        ferry_ib_flush_wc_error((ferry_ib_recv_comm_t *)c, wc);
        return;
    }
    if (c->conn.multi && ferry_ib_wc_path_lost(wc->status)) {
        ferry_ib_wc_failover(c, wc, ferry_ib_wr_what(wc->wr_id)); /* ib_failover.c */
        return;
    }
    if (wc->status == IBV_WC_WR_FLUSH_ERR) {
        /* A consequence of what moved the QP to ERR: one WARN per comm, not one per flush. */
        if (atomic_load(&c->ring.failed) == 0) {
            snprintf(desc, sizeof(desc), "QP 0x%x is in the error state and flushes its work "
                     "requests (after an earlier error or an async event such as QP_FATAL)",
                     wc->qp_num);
            ferry_ib_fail(c, desc);
        }
        return;
    }
    req = ferry_ib_wc_req(c, wc->wr_id);
    if (req != NULL)
        ferry_px_ring_req_words(&c->ring, req, words, sizeof(words));
    ferry_px_ring_describe(&c->ring, desc, sizeof(desc));
    FERRY_WARN("%s: completion with status %s (%d) for the %s of message %u on QP 0x%x "
               "(peer %s, device %s, vendor_err 0x%x); request: %s. Likely cause: %s",
               desc, ferry_ibv.wc_status_str(wc->status), (int)wc->status,
               ferry_ib_wr_what(wc->wr_id), FERRY_IB_WR_SEQ(wc->wr_id), wc->qp_num,
               c->conn.peer, ferry_ib_comm_where(c), wc->vendor_err, words,
               ferry_ib_wc_hint(wc->status));
    ferry_px_ring_fail(&c->ring, FERRY_ERR_REMOTE, "completion error %s on QP 0x%x (%s)",
                       ferry_ibv.wc_status_str(wc->status), wc->qp_num,
                       ferry_ib_wr_what(wc->wr_id));
}

long ferry_ib_check_peer_due(ferry_ib_comm_t *c, int pending, uint64_t now)
{
    ferry_ib_conn_t *conn = &c->conn;
    char why[640];
    uint8_t buf[64];
    ssize_t n;

    conn->check_ns = now + 1000000ULL;
    if (atomic_load_explicit(&c->ring.failed, memory_order_acquire) != 0)
        return atomic_load(&c->ring.failed);
    if (ferry_ib_members_check(c) < 0) /* ib_failover.c: ports down, fatal events. */
        return atomic_load(&c->ring.failed);
    if (conn->cm != NULL) ferry_ib_cm_poll(c); /* rdmacm mode: DISCONNECTED -> oob_fd EOF. */
    /* A merged device reads it anyway: the peer's rejoin messages come on it. */
    if (conn->oob_fd < 0 || (ferry_ib_state.cfg.peer_timeout_s <= 0 && !conn->multi))
        return 0;
    /* Read only when the process' watch saw something (ib_oob_watch.h). */
    if (conn->gone_ns == 0 && ferry_ib_oob_watch_take(conn->oob_watch, now)) {
        int err;

        n = recv(conn->oob_fd, buf, sizeof(buf), MSG_DONTWAIT);
        err = errno;
        if (n > 0)
            ferry_ib_oob_input(c, buf, (size_t)n); /* ib_rejoin.c: BYE, rejoin messages. */
        ferry_ib_oob_gone_note(c, n, err); /* ib_oob_gone.c */
        if (conn->gone_ns == 0 &&
            (err = ferry_ib_oob_watch_rearm(conn->oob_watch, conn->oob_fd)) != 0) {
            char desc[192];

            ferry_px_ring_describe(&c->ring, desc, sizeof(desc));
            FERRY_WARN_LIMITED("%s: epoll_ctl(MOD) of its out-of-band socket (fd %d) failed: %s; "
                               "this comm reads its socket every millisecond instead", desc,
                               conn->oob_fd, strerror(err));
            ferry_ib_oob_watch_del(conn->oob_watch, conn->oob_fd);
            conn->oob_watch = 0;
        }
    }
    if (ferry_ib_state.cfg.peer_timeout_s <= 0)
        return 0;
    /* Completions already on their way still land: fail only once they had their chance. */
    if (conn->gone_ns == 0 || !pending || now - conn->gone_ns < FERRY_IB_PEER_GRACE_NS)
        return 0;
    ferry_ib_oob_gone_why(c, why, sizeof(why));
    return ferry_ib_fail(c, why);
}

/*
 * One batch of member m's CQ, successes first: an error fails its member
 * over, which moves whatever has not completed, so every completion
 * already polled must be counted before that. Returns the count, or -1.
 */
static int ferry_ib_cq_batch(ferry_ib_comm_t *c, int m)
{
    struct ibv_wc wcs[FERRY_IB_POLL_BATCH];
    int n = ibv_poll_cq(c->conn.mem[m].cq, FERRY_IB_POLL_BATCH, wcs), i;

    if (n < 0)
        return -1;
    for (i = 0; i < n; i++) {
        if (wcs[i].status != IBV_WC_SUCCESS)
            continue;
        if (c->ring.kind == FERRY_PX_SEND)
            ferry_ib_send_completion((ferry_ib_send_comm_t *)c, &wcs[i]);
        else
            ferry_ib_recv_completion((ferry_ib_recv_comm_t *)c, &wcs[i]);
    }
    for (i = 0; i < n; i++)
        if (wcs[i].status != IBV_WC_SUCCESS)
            ferry_ib_wc_error(c, &wcs[i]);
    return n;
}

long ferry_ib_cq_drain(ferry_ib_comm_t *c, int m)
{
    int k, n = FERRY_IB_POLL_BATCH;

    /* Bounded: a CQ holds what was posted before; a few batches empty it. */
    for (k = 0; k < FERRY_IB_DRAIN_BATCHES && n == FERRY_IB_POLL_BATCH; k++) {
        n = ferry_ib_cq_batch(c, m);
        if (n < 0)
            return ferry_ib_fail(c, "ibv_poll_cq failed (the CQ is broken)");
    }
    return atomic_load_explicit(&c->ring.failed, memory_order_acquire);
}

long ferry_ib_poll(ferry_px_ring_t *ring, ferry_px_req_t *req, uint64_t now)
{
    ferry_ib_comm_t *c = (ferry_ib_comm_t *)ring;
    int n, m, failed, total = 0;
    long st;

    if (ring->kind == FERRY_PX_SEND && ((ferry_ib_send_comm_t *)c)->ntrunc > 0)
        ferry_ib_send_fail_trunc((ferry_ib_send_comm_t *)c);
    /* A merged device looks at its ports every time: a failover must not wait for a lull. */
    if (c->conn.multi && ferry_ib_members_check(c) < 0)
        return atomic_load(&ring->failed);
    for (m = 0; m < c->conn.nmem; m++) {
        n = ferry_ib_cq_batch(c, m);
        if (n < 0)
            return ferry_ib_fail(c, "ibv_poll_cq failed (the CQ is broken)");
        total += n;
    }
    failed = atomic_load_explicit(&ring->failed, memory_order_acquire);
    if (failed != 0)
        return failed;
    if (total > 0)
        return total;
    st = ferry_ib_check_peer(c, req != NULL, now);
    return st < 0 ? st : 0;
}

void ferry_ib_watch_fn(ferry_ib_watch_t *w, const char *what, int fatal)
{
    ferry_ib_comm_t *c = w->arg;
    ferry_ib_member_t *mem = (ferry_ib_member_t *)(void *)((char *)w -
                                                          offsetof(ferry_ib_member_t, watch));
    char why[160];

    if (!fatal && !atomic_load(&w->dev->port_down))
        return;
    if (atomic_load(&c->ring.failed) != 0)
        return;
    snprintf(why, sizeof(why), "async event on %s: %s", w->dev->name, what);
    if (c->conn.multi) {
        /* The data path fails the member over (ib_failover.c); this thread only tells it. */
        if (fatal && !atomic_load(&mem->async_down)) {
            snprintf(mem->async_why, sizeof(mem->async_why), "%s", why);
            atomic_store_explicit(&mem->async_down, 1, memory_order_release);
        }
        return;
    }
    ferry_ib_fail(c, why);
}
