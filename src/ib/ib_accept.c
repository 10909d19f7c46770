/*
 * The non-blocking accept() state machine. Inbound OOB connections wait in
 * `pending` (oldest first; ib_pending.c: real peers are never evicted,
 * strangers are capped) and each walks
 *   RECV_HELLO -> SEND_META -> RECV_READY -> (recv comm returned, ACCEPTED sent)
 * A stranger (wrong magic, version or token; closes or stalls before its
 * hello is complete) is dropped with a (limited) WARN naming its address
 * while real peers keep being served. A real peer (its hello checked out)
 * that fails later makes accept() return the error. The connector counts
 * itself connected only on the ACCEPTED byte, so a connection this side
 * drops (closeListen with it pending) fails its connect, not its first isend.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib_comm.h"

#define FERRY_IB_ACCEPT_BURST 64

typedef enum ferry_ib_acc_state {
    FERRY_IB_ACC_RECV_HELLO, /* Reading hello + metadata; the hello is checked as soon as it is in. */
    FERRY_IB_ACC_SEND_META,  /* Our QPs are at RTS: writing our metadata. */
    FERRY_IB_ACC_RECV_READY  /* Waiting for the connector's QPs to reach RTS. */
} ferry_ib_acc_state_t;

static const char *const ferry_ib_acc_step[] = {
    "reading the peer's hello and metadata", "sending our metadata",
    "waiting for the peer's ready byte",
};

const char *ferry_ib_hello_check(const ferry_ib_hello_t *hello, uint64_t token)
{
    if (hello->magic != FERRY_IB_MAGIC)
        return "wrong magic (not a ferry ib peer)";
    if (hello->version != FERRY_IB_WIRE_VERSION || hello->hdr_size != sizeof(*hello))
        return "unsupported wire version (mixed ferry builds?)";
    if (hello->token != token)
        return "wrong token (a peer of another connection or job)";
    if (hello->lane != 0 || hello->nlanes != 1)
        return "lane numbers do not match an ib connection";
    return NULL;
}

static void ferry_ib_accept_new(ferry_ib_listen_comm_t *lc)
{
    int burst;

    for (burst = 0; burst < FERRY_IB_ACCEPT_BURST; burst++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);
        ferry_ib_pending_t *p;
        int fd;

        if (!ferry_ib_pending_room(lc, ferry_px_now_ns()))
            return; /* The rest wait in the kernel's queue until a stranger goes. */
        fd = accept4(lc->fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                FERRY_WARN_LIMITED("ib listener %s: accept failed: %s; will retry (check the "
                                   "process' open file limit, ulimit -n)", lc->addr_str,
                                   strerror(errno));
            return;
        }
        p = ferry_ib_pending_add(lc, fd);
        if (p == NULL) {
            FERRY_WARN_LIMITED("ib listener %s: no memory for one more connection in its "
                               "handshake (%d held); closed it, its connector retries",
                               lc->addr_str, lc->npending);
            close(fd);
            return;
        }
        p->state = FERRY_IB_ACC_RECV_HELLO;
        ferry_ib_addr_str((struct sockaddr *)&peer, p->peer, sizeof(p->peer));
    }
}

ferry_status_t ferry_ib_accept_comm(int devidx, const ferry_ib_meta_t *m, const char *peer,
                                    struct rdma_cm_id *const *cm_ids, ferry_ib_comm_t **comm_p)
{
    const ferry_ib_dev_t *dev = &ferry_ib_state.devs[ferry_ib_state.vdevs[devidx].devs[0]];
    const char *why = ferry_ib_meta_check(m, 0, dev->link_layer);
    ferry_ib_comm_t *c;
    ferry_status_t status;

    *comm_p = NULL;
    if (why != NULL) {
        FERRY_WARN_LIMITED("ib accept from %s on %s (peer device %.64s): its metadata is "
                           "unusable: %s; every rank must load the same ferry build and "
                           "NCCL_IB_* settings", peer, ferry_ib_dev_name(devidx),
                           m->devname[63] == '\0' ? m->devname : "?", why);
        return FERRY_ERR_REMOTE;
    }
    status = ferry_ib_comm_create(FERRY_PX_RECV, devidx, m->nqps, m->nmembers, peer, cm_ids,
                                  &c);
    if (status != FERRY_OK)
        return status;
    /* The connecting side chose the traffic class and service level. */
    c->conn.local.tc = m->tc;
    c->conn.local.sl = m->sl;
    *comm_p = c;
    return FERRY_OK;
}

/* The hello and metadata are in: build the recv comm and bring its QPs up. */
static ferry_status_t ferry_ib_accept_build(ferry_ib_listen_comm_t *lc, ferry_ib_pending_t *p)
{
    ferry_ib_comm_t *c;
    ferry_status_t status = ferry_ib_accept_comm(lc->dev, &p->in.meta, p->peer, NULL, &c);

    if (status != FERRY_OK)
        return status;
    p->comm = (ferry_ib_recv_comm_t *)c;
    return ferry_ib_comm_connect_qps(c, &p->in.meta, "accept: bringing our QPs to RTS");
}

uint64_t ferry_ib_hello_timeout_ns(void)
{
    return (uint64_t)(ferry_ib_core_cfg.hello_timeout_ms > 0 ? ferry_ib_core_cfg.hello_timeout_ms
                                                             : 10000) * 1000000ULL;
}

/*
 * Move one pending connection. Returns FERRY_OK with *drop 0 (keep), 1
 * (stranger dropped, keep serving), or an error (real peer failed).
 */
static ferry_status_t ferry_ib_accept_step(ferry_ib_listen_comm_t *lc, ferry_ib_pending_t *p,
                                           uint64_t now, int *drop, int *ready)
{
    uint64_t timeout_ns = ferry_ib_hello_timeout_ns();
    const char *why = NULL;
    ferry_status_t status;
    int rc = 0;

    *drop = 0;
    *ready = 0;
    switch (p->state) {
    case FERRY_IB_ACC_RECV_HELLO:
        rc = ferry_ib_oob_recv(p->fd, &p->in, sizeof(p->in), &p->got);
        if (p->got >= sizeof(p->in.hello) && !p->real) {
            why = ferry_ib_hello_check(&p->in.hello, lc->token);
            if (why != NULL)
                break;
            ferry_ib_pending_real(lc, p);
            /* From here the stall limit counts per step: in a crowd, the whole handshake
             * waits its turn on both sides. A stranger's counts from its connect. */
            p->since_ns = now;
        }
        if (rc == 1) {
            status = ferry_ib_accept_build(lc, p);
            if (status != FERRY_OK)
                return status;
            p->state = FERRY_IB_ACC_SEND_META;
            p->since_ns = now; /* A real peer stalls when a step makes no progress. */
            p->sent = 0;
        }
        break;
    case FERRY_IB_ACC_SEND_META:
        rc = ferry_ib_oob_send(p->fd, &p->comm->base.conn.local, sizeof(ferry_ib_meta_t),
                               &p->sent);
        if (rc == 1) {
            p->state = FERRY_IB_ACC_RECV_READY;
            p->since_ns = now;
            p->got = 0;
        }
        break;
    case FERRY_IB_ACC_RECV_READY:
        rc = ferry_ib_oob_recv(p->fd, &p->ready, 1, &p->got);
        if (rc == 1 && p->ready != FERRY_IB_OOB_READY) {
            FERRY_WARN_LIMITED("ib accept from %s on %s: %s: got byte 0x%02x instead of the "
                               "ready byte; mixed ferry builds?", p->peer,
                               ferry_ib_dev_name(lc->dev), ferry_ib_acc_step[p->state],
                               p->ready);
            return FERRY_ERR_REMOTE;
        }
        *ready = rc == 1;
        break;
    }
    if (why == NULL && rc < 0)
        why = ferry_ib_oob_strerror(rc);
    if (why == NULL && rc == 0 && now - p->since_ns > timeout_ns)
        why = "stalled (NCCL_FERRY_HELLO_TIMEOUT_MS)";
    if (why == NULL)
        return FERRY_OK;
    if (!p->real) {
        FERRY_WARN_LIMITED_ELSE_INFO("ib listener %s: rejected connection from %s after %zu of %zu "
                             "hello bytes: %s; still accepting real peers", lc->addr_str,
                             p->peer, p->got, sizeof(p->in), why);
        *drop = 1;
        return FERRY_OK;
    }
    FERRY_WARN_LIMITED("ib accept from %s on %s failed while %s: %s; the connecting rank "
                       "probably exited or failed (check its log)", p->peer,
                       ferry_ib_dev_name(lc->dev), ferry_ib_acc_step[p->state], why);
    return FERRY_ERR_REMOTE;
}

/*
 * The connector's connect() returns only on this byte: a connection this side
 * never returned from accept() is one it never counts as connected.
 */
static void ferry_ib_accepted_say(ferry_ib_comm_t *c, int fd)
{
    uint8_t accepted = FERRY_IB_OOB_ACCEPTED;
    size_t sent = 0;
    int rc = ferry_ib_oob_send(fd, &accepted, 1, &sent);

    /* One byte on a socket that has carried 193: only a peer already gone fails it, and the
     * comm finds that on its OOB socket like any later departure. */
    if (rc != 1)
        FERRY_INFO(FERRY_LOG_NET, "ib accept from %s on %s: could not confirm the connection "
                   "(%s); the peer's connect fails on its side", c->conn.peer,
                   ferry_ib_comm_where(c),
                   rc == 0 ? "its socket is full" : ferry_ib_oob_strerror(rc));
}

void ferry_ib_accepted(ferry_ib_comm_t *c, int fd)
{
    ferry_ib_comm_start(c, fd);
    FERRY_INFO(FERRY_LOG_NET, "ib accepted connection from %s on %s%s: %d QP(s), peer device "
               "%s, recv comm #%u", c->conn.peer, ferry_ib_comm_where(c),
               c->conn.cm != NULL ? " (rdmacm)" : "", c->conn.nqps, c->conn.remote.devname,
               c->ring.serial);
}

ferry_status_t ferry_ib_accept(void *listen_comm, void **recv_comm_p)
{
    ferry_ib_listen_comm_t *lc = listen_comm;
    uint64_t now;
    int i = 0;

    *recv_comm_p = NULL;
    if (lc == NULL || !ferry_live_has(lc, FERRY_LIVE_LISTEN)) {
        FERRY_WARN_LIMITED("accept(%p): not a live ferry ib listen comm (already closed?)",
                           listen_comm);
        return FERRY_ERR_INVALID;
    }
    if (lc->cm != NULL)
        return ferry_ib_cm_accept(lc, recv_comm_p);
    ferry_ib_accept_new(lc);
    now = ferry_px_now_ns();
    while (i < lc->npending) {
        ferry_ib_pending_t *p = &lc->pending[i];
        ferry_ib_comm_t *c;
        int drop, ready, fd;
        ferry_status_t status = ferry_ib_accept_step(lc, p, now, &drop, &ready);

        if (status != FERRY_OK) {
            ferry_ib_pending_drop(lc, i);
            return status;
        }
        if (drop) {
            ferry_ib_pending_drop(lc, i);
            continue;
        }
        if (!ready) {
            i++;
            continue;
        }
        c = &p->comm->base;
        fd = p->fd;
        p->comm = NULL; /* Both belong to the comm now. */
        p->fd = -1;
        ferry_ib_pending_drop(lc, i);
        ferry_ib_accepted_say(c, fd);
        ferry_ib_accepted(c, fd);
        *recv_comm_p = c;
        return FERRY_OK;
    }
    return FERRY_OK;
}
