/*
 * The last port of a merged device failed: this side's comm fails, and the
 * peer is told over the OOB socket (FERRY_IB_OOB_NOPORT). Its own ports
 * are fine, so it may have nothing in flight that could time out (a
 * receive waiting for data, a send waiting for a clear-to-send): without
 * the message it would wait for the stall WARN and beyond. The peer fails
 * its comm on the message, naming us and our device.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "ib/ib_comm.h"

void ferry_ib_oob_tell_no_port(ferry_ib_comm_t *c)
{
    uint8_t msg = FERRY_IB_OOB_NOPORT;

    if (c->conn.oob_fd < 0 || c->conn.gone_ns != 0)
        return;
    /* One byte on a socket that carries a few bytes a second at most: it fits. */
    if (send(c->conn.oob_fd, &msg, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
        FERRY_INFO(FERRY_LOG_NET, "ib comm #%u with %s: could not tell the peer that no port "
                   "is left here; it finds out when its requests time out or this comm closes",
                   c->ring.serial, c->conn.peer);
}

long ferry_ib_peer_no_port(ferry_ib_comm_t *c)
{
    ferry_ib_conn_t *conn = &c->conn;
    char desc[192], why[320];

    if (atomic_load_explicit(&c->ring.failed, memory_order_acquire) != 0)
        return atomic_load(&c->ring.failed);
    snprintf(why, sizeof(why), "peer %s reports it has no usable port left: every port of its "
             "device %.64s is down, so it can no longer reach this side (nor this side it); "
             "check that host's links (ibv_devinfo, port counters)", conn->peer,
             memchr(conn->remote.devname, '\0', sizeof(conn->remote.devname)) != NULL
                 ? conn->remote.devname : "?");
    ferry_px_ring_describe(&c->ring, desc, sizeof(desc));
    FERRY_WARN_LIMITED("%s: %s; every request of this comm now fails with ncclRemoteError", desc,
                       why);
    ferry_px_ring_fail(&c->ring, FERRY_ERR_REMOTE, "%s", why);
    return FERRY_ERR_REMOTE;
}
