/*
 * The comm's out-of-band TCP connection is gone: what that means.
 *
 * That socket is how a comm learns that its peer process died: the kernel
 * closes a dead process' sockets (a FIN), and keepalive finds a vanished
 * host in NCCL_FERRY_IB_PEER_TIMEOUT_S. RDMA alone would not tell: a
 * receiver whose clear-to-send already landed waits for writes that never
 * come, without a completion error, for ever. So the loss of the socket
 * fails the comm even while its QPs still work; the message says which of
 * the possible causes the socket's own error points at, and that RDMA was
 * not what failed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "ib/ib_comm.h"

void ferry_ib_oob_gone_note(ferry_ib_comm_t *c, ssize_t n, int err)
{
    ferry_ib_conn_t *conn = &c->conn;

    if (n > 0 || conn->gone_ns != 0)
        return;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR))
        return;
    conn->gone_err = n == 0 ? 0 : err;
    FERRY_IB_DIAG_SET(conn->gone_ns, ferry_px_coarse_ns()); /* The caller's now may be old. */
}

void ferry_ib_oob_gone_why(const ferry_ib_comm_t *c, char *why, size_t len)
{
    const ferry_ib_conn_t *conn = &c->conn;
    const char *how;

    if (conn->bye) {
        snprintf(why, len, "peer %s closed its comm (closeSend/closeRecv) while this side still "
                 "has requests pending; the ranks disagree on the messages they exchange",
                 conn->peer);
        return;
    }
    if (conn->cm != NULL) {
        snprintf(why, len, "peer %s disconnected the rdma_cm connection without closing its "
                 "comm (process exited or was killed); check that rank's log", conn->peer);
        return;
    }
    switch (conn->gone_err) {
    case 0:
        how = "was closed by the peer's end (FIN) without its close marker: the peer process "
              "exited or was killed (check that rank's log), or something closed only that "
              "TCP connection";
        break;
    case ETIMEDOUT:
        how = "timed out (no keepalive answer within NCCL_FERRY_IB_PEER_TIMEOUT_S): the peer "
              "host is down or unreachable on the NCCL_SOCKET_IFNAME network";
        break;
    case ECONNRESET:
        how = "was reset (ECONNRESET): the peer process died with data unread, or a firewall, "
              "NAT or connection-tracking timeout on the NCCL_SOCKET_IFNAME network reset it";
        break;
    default:
        how = NULL;
        break;
    }
    snprintf(why, len, "the out-of-band TCP connection to peer %s %s%s%s; RDMA on this comm's "
             "%d QP(s) did not fail, but that connection is how ferry learns that a peer died, "
             "so the comm cannot go on without it", conn->peer,
             how != NULL ? how : "failed: ", how != NULL ? "" : strerror(conn->gone_err),
             how != NULL ? "" : " (check the NCCL_SOCKET_IFNAME network and the peer's log)",
             conn->nqps);
}
