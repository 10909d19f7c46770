/*
 * connect() in rdmacm mode. NCCL calls it again with the same handle until
 * it returns a comm; the stage the handle refers to (ib_conn_stage.c) holds one rdma_cm id
 * per data QP on a non-blocking channel, and each call handles the events
 * that are there:
 *   RESOLVING: rdma_resolve_addr on every id; ADDR_RESOLVED -> rdma_resolve_route
 *   ROUTE_RESOLVED on all: the send comm is built on the device and port
 *              rdma_cm chose (its QPs on the ids), then rdma_connect with our
 *              private data (token, CTS FIFO address and key)
 *   ESTABLISHED on all: the acceptor's private data gives its sizes FIFO;
 *              the comm is returned
 * Any other event fails the connect with the event in words: address and
 * route errors are ours (FERRY_ERR_IO), rejects, unreachable and
 * connection errors the peer's (FERRY_ERR_REMOTE).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_cm_conn.h"

typedef struct ferry_ib_cm_stage {
    ferry_ib_cm_conn_t   *cm;        /* Ours until the comm is built, then the comm's. */
    ferry_ib_send_comm_t *comm;
    int                   nqps, routed, established;
    uint64_t              token, conn_id;
    struct sockaddr_storage addr;
    socklen_t             addr_len;
    char                  peer[64];
    ferry_ib_cm_priv_t    remote;    /* The acceptor's (QP 0's REP). */
    uint32_t              qpn[FERRY_IB_MAX_QPS];
} ferry_ib_cm_stage_t;

static void ferry_ib_cm_stage_free(ferry_ib_cm_stage_t *st, ferry_ib_handle_t *h)
{
    if (st->comm != NULL)
        ferry_ib_comm_destroy(&st->comm->base); /* With the ids (conn.cm). */
    else
        ferry_ib_cm_conn_destroy(st->cm);
    free(st);
    ferry_ib_handle_clear_stage(h);
}

static const char *ferry_ib_cm_step(const ferry_ib_cm_stage_t *st)
{
    if (st->comm == NULL)
        return st->routed > 0 ? "resolving the route" : "resolving the address";
    return "connecting (waiting for ESTABLISHED)";
}

static ferry_status_t ferry_ib_cm_conn_fail(ferry_ib_cm_stage_t *st,
                                            const struct rdma_cm_event *ev)
{
    int local = ev->event == RDMA_CM_EVENT_ADDR_ERROR || ev->event == RDMA_CM_EVENT_ROUTE_ERROR;
    char words[256];

    FERRY_WARN("ib connect to %s (rdmacm) failed while %s: %s; %s", st->peer,
               ferry_ib_cm_step(st), ferry_ib_cm_event_words(ev, words, sizeof(words)),
               local ? "no RDMA device reaches that address: the handle's IP must be on an RDMA "
                       "interface (IPoIB, or the RoCE netdev: check NCCL_SOCKET_IFNAME and "
                       "`rdma link`), or set NCCL_FERRY_IB_CM=oob"
                     : "check that the peer process is alive (its log says why it left), that "
                       "every rank runs NCCL_FERRY_IB_CM=rdmacm, and that the ports reach each "
                       "other");
    return local ? FERRY_ERR_IO : FERRY_ERR_REMOTE;
}

static ferry_status_t ferry_ib_cm_stage_create(int dev, ferry_ib_handle_t *h,
                                               ferry_ib_cm_stage_t **stage_p)
{
    int nqps = ferry_ib_state.cfg.qps_per_conn, i, has_src;
    struct sockaddr_storage src;
    socklen_t src_len;
    ferry_ib_cm_stage_t *st;
    ferry_status_t status;
    char who[96];

    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return FERRY_ERR_NO_MEMORY;
    status = ferry_ib_handle_peer(h, dev, &st->addr, &st->addr_len, st->peer, sizeof(st->peer));
    snprintf(who, sizeof(who), "ib connect to %s", st->peer);
    if (status == FERRY_OK)
        status = ferry_ib_cm_conn_create(who, &st->cm);
    if (status != FERRY_OK) {
        free(st);
        return status;
    }
    st->nqps = nqps < 1 ? 1 : nqps > FERRY_IB_MAX_QPS ? FERRY_IB_MAX_QPS : nqps;
    st->token = h->token;
    st->conn_id = ferry_ib_random64();
    status = ferry_ib_handle_set_stage(h, FERRY_STAGE_IB_CM, st, st->peer);
    if (status != FERRY_OK) {
        ferry_ib_cm_conn_destroy(st->cm);
        free(st);
        return status;
    }
    *stage_p = st;
    has_src = ferry_ib_cm_dev_addr(dev, &src, &src_len);
    for (i = 0; i < st->nqps; i++) {
        struct rdma_cm_id *id;

        if (ferry_rdmacm.create_id(st->cm->ch, &id, (void *)(uintptr_t)(i + 1), RDMA_PS_TCP) != 0) {
            FERRY_WARN("%s (rdmacm): rdma_create_id failed: %s", who, strerror(errno));
            return FERRY_ERR_IO;
        }
        st->cm->ids[i] = id;
        st->cm->nids = i + 1;
        if (ferry_rdmacm.resolve_addr(id, has_src ? (struct sockaddr *)&src : NULL,
                                      (struct sockaddr *)&st->addr,
                                      FERRY_IB_CM_TIMEOUT_MS) != 0) {
            FERRY_WARN("%s (rdmacm): rdma_resolve_addr failed: %s; set NCCL_FERRY_IB_CM=oob",
                       who, strerror(errno));
            return FERRY_ERR_IO;
        }
    }
    return FERRY_OK;
}

/* Every route is resolved: the comm on the port rdma_cm chose, then rdma_connect. */
static ferry_status_t ferry_ib_cm_stage_connect(ferry_ib_cm_stage_t *st, const ferry_ctx_t *ctx,
                                                int dev, int traffic_class)
{
    int devidx = ferry_ib_cm_devidx(st->cm->ids[0]), i;
    ferry_ib_comm_t *c;
    ferry_status_t status;

    if (devidx < 0) {
        FERRY_WARN("ib connect to %s (rdmacm): rdma_cm routes it through %s port %u, which "
                   "ferry does not use (filtered by NCCL_IB_HCA, or not ACTIVE); widen "
                   "NCCL_IB_HCA or set NCCL_FERRY_IB_CM=oob", st->peer,
                   ferry_ibv.get_device_name(st->cm->ids[0]->verbs->device),
                   (unsigned)st->cm->ids[0]->port_num);
        return FERRY_ERR_IO;
    }
    if (devidx != dev)
        FERRY_INFO(FERRY_LOG_NET, "ib connect to %s (rdmacm): rdma_cm chose %s; NCCL asked for "
                   "%s", st->peer, ferry_ib_dev_name(devidx), ferry_ib_dev_name(dev));
    status = ferry_ib_comm_create(FERRY_PX_SEND, devidx, st->nqps, 0, st->peer, st->cm->ids, &c);
    if (status != FERRY_OK)
        return status;
    st->comm = (ferry_ib_send_comm_t *)c;
    c->conn.cm = st->cm; /* The comm takes the ids (and the QPs on them) from here. */
    ferry_ib_conn_class(&c->conn.local, ctx, traffic_class);
    for (i = 0; i < st->nqps; i++) {
        struct rdma_conn_param param;
        ferry_ib_cm_priv_t p;

        ferry_ib_cm_priv_fill(&p, c, i, st->token, st->conn_id);
        ferry_ib_cm_param(&param, &p);
        if (ferry_rdmacm.connect(st->cm->ids[i], &param) != 0) {
            FERRY_WARN("ib connect to %s (rdmacm) from %s: rdma_connect of data QP %d failed: "
                       "%s", st->peer, ferry_ib_comm_where(c), i, strerror(errno));
            return FERRY_ERR_IO;
        }
    }
    return FERRY_OK;
}

/* An ESTABLISHED: the acceptor's private data must echo our token. */
static ferry_status_t ferry_ib_cm_on_established(ferry_ib_cm_stage_t *st, int i,
                                                 const struct rdma_cm_event *ev)
{
    ferry_ib_cm_priv_t p;
    const char *why = ferry_ib_cm_priv_check(ev->param.conn.private_data,
                                             ev->param.conn.private_data_len, st->token, &p);

    if (why == NULL && (p.conn_id != st->conn_id || p.qp != i || p.nqps != st->nqps))
        why = "it answers another connection";
    if (why != NULL) {
        FERRY_WARN("ib connect to %s (rdmacm): the acceptor's reply on data QP %d is unusable: "
                   "%s; every rank must load the same ferry build", st->peer, i, why);
        return FERRY_ERR_REMOTE;
    }
    if (i == 0)
        st->remote = p;
    st->qpn[i] = ev->param.conn.qp_num;
    st->established++;
    return FERRY_OK;
}

static ferry_status_t ferry_ib_cm_connect_events(ferry_ib_cm_stage_t *st)
{
    struct rdma_cm_event *ev, copy;
    ferry_status_t status = FERRY_OK;
    uint8_t pd[256];
    int n, i;

    for (n = 0; n < FERRY_IB_CM_EVENTS_PER_CALL && status == FERRY_OK; n++) {
        if (ferry_rdmacm.get_cm_event(st->cm->ch, &ev) != 0)
            break; /* EAGAIN: nothing more now. */
        /* Acked at once (a destroy waits for its acks); the private data is copied first. */
        copy = *ev;
        if (ev->param.conn.private_data_len > 0 && ev->param.conn.private_data != NULL) {
            memcpy(pd, ev->param.conn.private_data, ev->param.conn.private_data_len);
            copy.param.conn.private_data = pd;
        }
        ferry_rdmacm.ack_cm_event(ev);
        i = ferry_ib_cm_id_index(st->cm, copy.id);
        if (i < 0)
            continue;
        switch (copy.event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (ferry_rdmacm.resolve_route(copy.id, FERRY_IB_CM_TIMEOUT_MS) != 0) {
                FERRY_WARN("ib connect to %s (rdmacm): rdma_resolve_route failed: %s",
                           st->peer, strerror(errno));
                status = FERRY_ERR_IO;
            }
            break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED:
            st->routed++;
            break;
        case RDMA_CM_EVENT_ESTABLISHED:
            status = ferry_ib_cm_on_established(st, i, &copy);
            break;
        default:
            status = ferry_ib_cm_conn_fail(st, &copy);
            break;
        }
    }
    return status;
}

ferry_status_t ferry_ib_cm_connect(ferry_ctx_t *ctx, int dev, ferry_ib_handle_t *h,
                                   int traffic_class, void **send_comm_p)
{
    ferry_ib_cm_stage_t *st;
    ferry_ib_comm_t *c;
    ferry_ib_meta_t m;
    ferry_status_t status;
    const char *why;
    int fd;

    *send_comm_p = NULL;
    status = ferry_ib_handle_stage(h, dev, FERRY_STAGE_IB_CM, (void **)&st);
    if (status != FERRY_OK)
        return status;
    if (st == NULL) {
        status = ferry_ib_cm_stage_create(dev, h, &st);
        if (status != FERRY_OK) {
            if (!ferry_stage_ref_none(&h->stage))
                ferry_ib_cm_stage_free(st, h);
            return status;
        }
    }
    status = ferry_ib_cm_connect_events(st);
    if (status == FERRY_OK && st->comm == NULL && st->routed == st->nqps)
        status = ferry_ib_cm_stage_connect(st, ctx, dev, traffic_class);
    if (status != FERRY_OK || st->comm == NULL || st->established < st->nqps) {
        if (status != FERRY_OK)
            ferry_ib_cm_stage_free(st, h);
        return status;
    }
    c = &st->comm->base;
    ferry_ib_cm_meta(&m, &st->remote, st->qpn, st->nqps, c->conn.dev, FERRY_PX_SEND);
    why = ferry_ib_meta_check(&m, st->nqps, c->conn.dev->link_layer);
    if (why == NULL && ferry_ib_cm_conn_live(c->conn.cm, &fd) != FERRY_OK)
        why = "no liveness socket";
    if (why != NULL) {
        FERRY_WARN("ib connect to %s (rdmacm) from %s: the acceptor's metadata is unusable: %s",
                   st->peer, ferry_ib_comm_where(c), why);
        ferry_ib_cm_stage_free(st, h);
        return FERRY_ERR_REMOTE;
    }
    c->conn.remote = m;
    st->comm = NULL; /* The comm is NCCL's now, with its ids. */
    st->cm = NULL;
    ferry_ib_cm_stage_free(st, h);
    ferry_ib_connected(c, fd);
    *send_comm_p = c;
    return FERRY_OK;
}
