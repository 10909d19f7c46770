/*
 * Port failover on a merged device. A member (port) of a comm fails when
 * a completion error arrives on one of its QPs, its port reports PORT_ERR,
 * or the async thread sees a fatal event on its QPs. The comm then posts
 * nothing new on it, and what was in flight there goes again on the other
 * members: a send's unfinished chains (the same bytes to the same place;
 * the receiver counts each chain once), a receive's clear-to-sends (the
 * same entry; the sender reads it once). One WARN says which port, which
 * peer and how many requests moved; the comm fails with ncclRemoteError
 * only when no member is left.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ib/ib_comm.h"

int ferry_ib_qp_index(const ferry_ib_conn_t *conn, uint32_t qp_num)
{
    int q;

    for (q = 0; q < conn->nqps; q++)
        if (conn->qps[q] != NULL && conn->qps[q]->qp_num == qp_num)
            return q;
    return -1;
}

int ferry_ib_chain_qp(const ferry_ib_conn_t *conn, int first, int j)
{
    int q = (first + j) % conn->nqps, k;

    if (conn->ndown == 0)
        return q;
    for (k = 0; k < conn->nqps; k++, q = (q + 1) % conn->nqps)
        if (!conn->mem[ferry_ib_qp_mem(conn, q)].down)
            return q;
    return -1;
}

long ferry_ib_member_down(ferry_ib_comm_t *c, int m, const char *why)
{
    return ferry_ib_member_stop(c, m, why, FERRY_IB_STOP_WARN | FERRY_IB_STOP_TAKE_CQ);
}

long ferry_ib_member_stop(ferry_ib_comm_t *c, int m, const char *why, unsigned flags)
{
    ferry_ib_conn_t *conn = &c->conn;
    ferry_ib_member_t *mem = &conn->mem[m];
    char desc[192], msg[512];
    int moved, i, off;

    if (mem->down)
        return 0;
    if (atomic_load_explicit(&c->ring.failed, memory_order_acquire) != 0)
        return atomic_load(&c->ring.failed);
    FERRY_IB_DIAG_SET(mem->down, 1);
    conn->ndown++;
    if (!conn->multi || conn->ndown == conn->nmem) {
        if (!conn->multi)
            snprintf(msg, sizeof(msg), "%s", why);
        else
            snprintf(msg, sizeof(msg), "port %s failed (%s) and it was the last of %d ports of "
                     "%s still up; check the links (ibv_devinfo, port counters)",
                     mem->dev->name, why, conn->nmem, ferry_ib_comm_where(c));
        ferry_px_ring_describe(&c->ring, desc, sizeof(desc));
        FERRY_WARN("%s: %s; every request of this comm now fails with ncclRemoteError", desc,
                   msg);
        ferry_px_ring_fail(&c->ring, FERRY_ERR_REMOTE, "%s", msg);
        if (conn->multi)
            ferry_ib_oob_tell_no_port(c); /* The peer's ports are fine: it must hear it. */
        return FERRY_ERR_REMOTE;
    }
    /*
     * What the CQ already holds has completed: a chain whose ACK came back
     * reached the receiver, which may have finished that receive and given
     * the buffer back. Moving it would write it there a second time. The
     * member is down first, so the errors taken here say nothing more.
     */
    if ((flags & FERRY_IB_STOP_TAKE_CQ) && ferry_ib_cq_drain(c, m) < 0)
        return atomic_load(&c->ring.failed);
    moved = c->ring.kind == FERRY_PX_SEND ? ferry_ib_send_move((ferry_ib_send_comm_t *)c, m)
                                          : ferry_ib_recv_move((ferry_ib_recv_comm_t *)c, m);
    if (moved < 0)
        return atomic_load(&c->ring.failed);
    for (i = 0, off = 0; i < conn->nmem && off < (int)sizeof(msg); i++)
        if (!conn->mem[i].down)
            off += snprintf(msg + off, sizeof(msg) - (size_t)off, "%s%s", off ? ", " : "",
                            conn->mem[i].dev->name);
    ferry_px_ring_describe(&c->ring, desc, sizeof(desc));
    if (!(flags & FERRY_IB_STOP_WARN)) {
        FERRY_INFO(FERRY_LOG_NET, "%s: port %s taken out of use (%s); %d request(s) moved to %s",
                   desc, mem->dev->name, why, moved, msg);
        return 0;
    }
    FERRY_WARN("%s: port %s failed for this comm with peer %s (%s); %d request(s) in flight "
               "there moved to %s, and new messages use the %d port(s) left. Check the link "
               "(ibv_devinfo, port counters); the comm fails only when every port is down",
               desc, mem->dev->name, conn->peer, why, moved, msg, conn->nmem - conn->ndown);
    return 0;
}

/*
 * A completion error on a merged device's QP: its member fails over. The
 * WRs still queued there complete with flush errors afterwards; their
 * member is down already and their work has moved, so they say nothing.
 */
void ferry_ib_wc_failover(ferry_ib_comm_t *c, const struct ibv_wc *wc, const char *what)
{
    ferry_ib_conn_t *conn = &c->conn;
    int q = ferry_ib_qp_index(conn, wc->qp_num);
    char why[256];

    /* Down already, or an error of a WR posted before the port came back: nothing new. */
    if (q < 0 || conn->mem[ferry_ib_qp_mem(conn, q)].down ||
        FERRY_IB_WR_EPOCH(wc->wr_id) != conn->mem[ferry_ib_qp_mem(conn, q)].epoch)
        return;
    snprintf(why, sizeof(why), "completion with status %s (%d) for the %s of message %u on QP "
             "0x%x", ferry_ibv.wc_status_str(wc->status), (int)wc->status, what,
             FERRY_IB_WR_SEQ(wc->wr_id), wc->qp_num);
    ferry_ib_member_down(c, ferry_ib_qp_mem(conn, q), why);
}

/* The peer's rejoin messages (and ours to ask), every millisecond at most. */
static void ferry_ib_members_oob(ferry_ib_comm_t *c)
{
    ferry_ib_conn_t *conn = &c->conn;
    uint64_t now = ferry_px_coarse_ns();
    uint8_t buf[64];
    ssize_t n;

    if (conn->oob_fd < 0 || conn->gone_ns != 0 || now < conn->oob_check_ns)
        return;
    conn->oob_check_ns = now + 1000000ULL;
    ferry_ib_rejoin_poll(c); /* ib_rejoin.c */
    n = recv(conn->oob_fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0)
        ferry_ib_oob_input(c, buf, (size_t)n);
    else
        ferry_ib_oob_gone_note(c, n, errno); /* ferry_ib_check_peer decides what that means. */
}

long ferry_ib_members_check(ferry_ib_comm_t *c)
{
    ferry_ib_conn_t *conn = &c->conn;
    char why[256];
    long st;
    int m;

    /*
     * The peer's rejoin requests come while this side may see nothing wrong
     * (the peer's port failed): a merged comm reads them whatever its state.
     * A single port has no rejoin; ferry_ib_check_peer alone reads its socket.
     */
    if (conn->multi)
        ferry_ib_members_oob(c);
    for (m = 0; m < conn->nmem; m++) {
        ferry_ib_member_t *mem = &conn->mem[m];

        if (mem->down)
            continue;
        if (atomic_load_explicit(&mem->dev->port_down, memory_order_relaxed))
            snprintf(why, sizeof(why), "port %s went down (PORT_ERR); check the cable, the "
                     "switch and ibv_devinfo", mem->dev->name);
        else if (atomic_load_explicit(&mem->dev->hca->fatal, memory_order_relaxed))
            snprintf(why, sizeof(why), "device %s reported a fatal error (DEVICE_FATAL); the "
                     "HCA needs a reset", mem->dev->hca->name);
        else if (atomic_load_explicit(&mem->async_down, memory_order_acquire))
            snprintf(why, sizeof(why), "%s", mem->async_why);
        else
            continue;
        st = ferry_ib_member_down(c, m, why);
        if (st < 0)
            return st;
    }
    return 0;
}
