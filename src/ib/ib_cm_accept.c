/*
 * accept() in rdmacm mode. A connector opens one rdma_cm connection per
 * data QP; their CONNECT_REQUESTs carry the same conn_id and are grouped
 * (oldest first, bounded; a full table evicts the oldest). Each group walks
 *   requests coming in -> (all nqps in) recv comm built on the port
 *   rdma_cm chose, its QPs on the ids, rdma_accept with our sizes FIFO ->
 *   ESTABLISHED on all -> recv comm returned
 * A request whose private data fails the hello's rules (magic, version,
 * token) is rejected with FERRY_IB_CM_REJ_STRANGER and a WARN naming its
 * address, while real peers keep being served; a group that stalls past
 * NCCL_FERRY_HELLO_TIMEOUT_MS is dropped the same way. A real peer that
 * fails later (CONNECT_ERROR, DISCONNECTED) makes accept() return the error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_cm_conn.h"

static void ferry_ib_cm_group_drop(struct ferry_ib_cm_listen *l, int g, int reason)
{
    ferry_ib_cm_group_t *grp = &l->groups[g];
    int i;

    if (grp->comm != NULL) {
        ferry_ib_comm_destroy(&grp->comm->base); /* With its ids. */
    } else if (grp->cm != NULL) {
        for (i = 0; i < grp->cm->nids; i++)
            if (grp->cm->ids[i] != NULL && reason != 0)
                ferry_ib_cm_reject(grp->cm->ids[i], reason);
        ferry_ib_cm_conn_destroy(grp->cm);
    }
    memmove(grp, grp + 1, (size_t)(l->ngroups - g - 1) * sizeof(*grp));
    l->ngroups--;
}

static int ferry_ib_cm_group_find(const struct ferry_ib_cm_listen *l, uint64_t conn_id)
{
    int g;

    for (g = 0; g < l->ngroups; g++)
        if (l->groups[g].conn_id == conn_id)
            return g;
    return -1;
}

/* A stranger's request: rejected, logged, forgotten. */
static void ferry_ib_cm_stranger(ferry_ib_listen_comm_t *lc, struct rdma_cm_id *id,
                                 const char *why)
{
    char peer[64];

    ferry_ib_addr_str(&id->route.addr.dst_addr, peer, sizeof(peer));
    FERRY_WARN("ib listener %s (rdmacm): rejected connection request from %s: %s; still "
               "accepting real peers", lc->addr_str, peer, why);
    ferry_ib_cm_reject(id, FERRY_IB_CM_REJ_STRANGER);
    ferry_rdmacm.destroy_id(id);
}

/* A checked request joins its group (made on the first one). */
static ferry_status_t ferry_ib_cm_request(ferry_ib_listen_comm_t *lc, struct rdma_cm_id *id,
                                          const ferry_ib_cm_priv_t *p, uint32_t qpn)
{
    struct ferry_ib_cm_listen *l = lc->cm;
    ferry_ib_cm_group_t *grp;
    int g = ferry_ib_cm_group_find(l, p->conn_id);

    if (g < 0) {
        if (l->ngroups == FERRY_IB_PENDING_MAX) {
            FERRY_WARN("ib listener %s (rdmacm): %d connections in their handshake; dropping "
                       "the oldest, from %s", lc->addr_str, l->ngroups, l->groups[0].peer);
            ferry_ib_cm_group_drop(l, 0, FERRY_IB_CM_REJ_SETUP);
        }
        g = l->ngroups;
        grp = &l->groups[g];
        memset(grp, 0, sizeof(*grp));
        if (ferry_ib_cm_conn_create(lc->addr_str, &grp->cm) != FERRY_OK) {
            ferry_ib_cm_reject(id, FERRY_IB_CM_REJ_SETUP);
            ferry_rdmacm.destroy_id(id);
            return FERRY_ERR_IO;
        }
        l->ngroups++;
        grp->conn_id = p->conn_id;
        grp->nqps = p->nqps;
        grp->cm->nids = p->nqps;
        grp->since_ns = ferry_px_now_ns();
        ferry_ib_addr_str(&id->route.addr.dst_addr, grp->peer, sizeof(grp->peer));
    }
    grp = &l->groups[g];
    if (p->nqps != grp->nqps || grp->cm->ids[p->qp] != NULL) {
        ferry_ib_cm_stranger(lc, id, "its QP index or count contradicts its first request");
        return FERRY_OK;
    }
    if (p->qp == 0)
        grp->priv = *p;
    grp->qpn[p->qp] = qpn;
    grp->cm->ids[p->qp] = id;
    id->context = (void *)(uintptr_t)(p->qp + 1);
    /* Its next events (ESTABLISHED, errors) come on the group's channel, then the comm's. */
    ferry_rdmacm.migrate_id(id, grp->cm->ch);
    grp->nreq++;
    return FERRY_OK;
}

/* Every request of the group is in: the recv comm, then rdma_accept on each id. */
static ferry_status_t ferry_ib_cm_group_accept(ferry_ib_listen_comm_t *lc, ferry_ib_cm_group_t *grp)
{
    int devidx = ferry_ib_cm_devidx(grp->cm->ids[0]), i;
    ferry_ib_comm_t *c;
    ferry_ib_meta_t m;
    ferry_status_t status;

    if (devidx < 0) {
        FERRY_WARN("ib accept from %s (rdmacm) on %s: rdma_cm chose port %u of %s, which ferry "
                   "does not use (NCCL_IB_HCA, or not ACTIVE); rejected", grp->peer,
                   lc->addr_str, (unsigned)grp->cm->ids[0]->port_num,
                   ferry_ibv.get_device_name(grp->cm->ids[0]->verbs->device));
        return FERRY_ERR_IO;
    }
    ferry_ib_cm_meta(&m, &grp->priv, grp->qpn, grp->nqps, &ferry_ib_state.devs[devidx],
                     FERRY_PX_RECV);
    status = ferry_ib_accept_comm(devidx, &m, grp->peer, grp->cm->ids, &c);
    if (status != FERRY_OK)
        return status;
    grp->comm = (ferry_ib_recv_comm_t *)c;
    c->conn.cm = grp->cm;
    c->conn.remote = m;
    for (i = 0; i < grp->nqps; i++) {
        struct rdma_conn_param param;
        ferry_ib_cm_priv_t p;

        ferry_ib_cm_priv_fill(&p, c, i, grp->priv.token, grp->conn_id);
        ferry_ib_cm_param(&param, &p);
        if (ferry_rdmacm.accept(grp->cm->ids[i], &param) != 0) {
            FERRY_WARN("ib accept from %s (rdmacm) on %s: rdma_accept of data QP %d failed: %s",
                       grp->peer, ferry_ib_comm_where(c), i, strerror(errno));
            return FERRY_ERR_IO;
        }
    }
    return FERRY_OK;
}

/* The listener's events: requests in, strangers out. */
static void ferry_ib_cm_listen_events(ferry_ib_listen_comm_t *lc)
{
    struct rdma_cm_event *ev;
    int n;

    for (n = 0; n < FERRY_IB_CM_EVENTS_PER_CALL &&
                ferry_rdmacm.get_cm_event(lc->cm->cm->ch, &ev) == 0; n++) {
        enum rdma_cm_event_type type = ev->event;
        struct rdma_cm_id *id = ev->id;
        uint32_t qpn = ev->param.conn.qp_num;
        ferry_ib_cm_priv_t p;
        const char *why = ferry_ib_cm_priv_check(ev->param.conn.private_data,
                                                 ev->param.conn.private_data_len, lc->token, &p);

        ferry_rdmacm.ack_cm_event(ev);
        if (type != RDMA_CM_EVENT_CONNECT_REQUEST) {
            FERRY_INFO(FERRY_LOG_NET, "ib listener %s (rdmacm): %s ignored", lc->addr_str,
                       ferry_rdmacm.event_str(type));
            continue;
        }
        if (why != NULL)
            ferry_ib_cm_stranger(lc, id, why);
        else
            ferry_ib_cm_request(lc, id, &p, qpn);
    }
}

/* A group's own events; 1 when its comm is ready, < 0 when the real peer failed. */
static int ferry_ib_cm_group_events(ferry_ib_listen_comm_t *lc, ferry_ib_cm_group_t *grp)
{
    struct rdma_cm_event *ev;
    char words[256];
    int n;

    for (n = 0; n < FERRY_IB_CM_EVENTS_PER_CALL &&
                ferry_rdmacm.get_cm_event(grp->cm->ch, &ev) == 0; n++) {
        struct rdma_cm_event copy = *ev;

        ferry_rdmacm.ack_cm_event(ev);
        if (ferry_ib_cm_id_index(grp->cm, copy.id) < 0)
            continue;
        if (copy.event == RDMA_CM_EVENT_ESTABLISHED && grp->comm != NULL) {
            grp->nest++;
            continue;
        }
        copy.param.conn.private_data = NULL;
        copy.param.conn.private_data_len = 0;
        FERRY_WARN("ib accept from %s (rdmacm) for %s failed while %s: %s; the connecting rank "
                   "probably exited or failed (check its log)", grp->peer,
                   ferry_ib_dev_name(lc->dev),
                   grp->comm != NULL ? "waiting for ESTABLISHED" : "waiting for its requests",
                   ferry_ib_cm_event_words(&copy, words, sizeof(words)));
        return -1;
    }
    return grp->comm != NULL && grp->nest == grp->nqps;
}

ferry_status_t ferry_ib_cm_accept(ferry_ib_listen_comm_t *lc, void **recv_comm_p)
{
    struct ferry_ib_cm_listen *l = lc->cm;
    uint64_t timeout_ns = ferry_ib_hello_timeout_ns();
    uint64_t now;
    int g = 0;

    ferry_ib_cm_listen_events(lc);
    now = ferry_px_now_ns(); /* After the events: groups made there are younger than now. */
    while (g < l->ngroups) {
        ferry_ib_cm_group_t *grp = &l->groups[g];
        ferry_status_t status = FERRY_OK;
        ferry_ib_comm_t *c;
        int rc, fd;

        if (grp->comm == NULL && grp->nreq == grp->nqps)
            status = ferry_ib_cm_group_accept(lc, grp);
        if (status != FERRY_OK) {
            ferry_ib_cm_group_drop(l, g, status == FERRY_ERR_IO ? FERRY_IB_CM_REJ_DEVICE
                                                                 : FERRY_IB_CM_REJ_SETUP);
            return status;
        }
        rc = ferry_ib_cm_group_events(lc, grp);
        if (rc < 0) {
            ferry_ib_cm_group_drop(l, g, FERRY_IB_CM_REJ_SETUP);
            return FERRY_ERR_REMOTE;
        }
        if (rc == 0 && grp->comm == NULL && now > grp->since_ns + timeout_ns) {
            FERRY_WARN("ib listener %s (rdmacm): rejected the connection from %s after %d of %d "
                       "requests: stalled (NCCL_FERRY_HELLO_TIMEOUT_MS); still accepting real "
                       "peers", lc->addr_str, grp->peer, grp->nreq, grp->nqps);
            ferry_ib_cm_group_drop(l, g, FERRY_IB_CM_REJ_SETUP);
            continue;
        }
        if (rc == 0 || ferry_ib_cm_conn_live(grp->cm, &fd) != FERRY_OK) {
            g++;
            continue;
        }
        c = &grp->comm->base;
        grp->comm = NULL; /* The comm and its ids are NCCL's now. */
        grp->cm = NULL;
        ferry_ib_cm_group_drop(l, g, 0);
        ferry_ib_accepted(c, fd);
        *recv_comm_p = c;
        return FERRY_OK;
    }
    return FERRY_OK;
}

void ferry_ib_cm_listen_close(ferry_ib_listen_comm_t *lc)
{
    struct ferry_ib_cm_listen *l = lc->cm;

    while (l->ngroups > 0)
        ferry_ib_cm_group_drop(l, 0, FERRY_IB_CM_REJ_SETUP);
    ferry_ib_cm_conn_destroy(l->cm);
    free(l);
    lc->cm = NULL;
}
