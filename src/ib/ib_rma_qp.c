/*
 * An RMA group's QPs: one RC QP per rank on the listen device's port (our
 * own rank's connected to itself, so operations on our own regions take
 * the same path, GPU memory included), sharing the group's CQ, open to remote write, read and atomics (a
 * peer's puts, gets and signals land here without our CPU), brought up
 * with the ib backend's attributes (NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT,
 * NCCL_IB_PKEY, NCCL_IB_SL / NCCL_IB_TC) towards what the peer sent over
 * the out-of-band link.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "ib/ib_rma.h"

/* Reads and atomics one QP keeps outstanding: the device's limit, at most 16. */
static int ferry_ib_rma_rd_atom(const ferry_ib_rma_group_t *g)
{
    int n = g->port->hca->attr.max_qp_rd_atom;

    if (g->port->hca->attr.max_qp_init_rd_atom < n)
        n = g->port->hca->attr.max_qp_init_rd_atom;
    return n < 1 ? 1 : n > 16 ? 16 : n;
}

ferry_status_t ferry_ib_rma_qps_create(ferry_ib_rma_group_t *g)
{
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    int cqe = g->nranks * FERRY_IB_RMA_SQ_DEPTH + 1;
    char who[256];

    ferry_ib_rma_describe(g, who, sizeof(who));
    if (g->port->hca->attr.atomic_cap == IBV_ATOMIC_NONE) {
        /* iputSignal's signal is a remote fetch-and-add: no other verb adds atomically. */
        FERRY_WARN("RMA connect: %s: the device %s has no atomic operations (atomic_cap NONE in "
                   "ibv_devinfo -v), which put-with-signal needs; pick a device with them "
                   "(NCCL_IB_HCA), or run RMA over TCP (NCCL_FERRY_BACKEND=socket) or NCCL's "
                   "own RMA", who, g->port->hca->name);
        return FERRY_ERR_UNSUPPORTED;
    }
    g->cq = ferry_ibv.create_cq(g->port->hca->ctx, cqe, NULL, NULL, 0);
    if (g->cq == NULL) {
        FERRY_WARN("RMA connect: %s: ibv_create_cq(%d entries) failed: %s; check the device's "
                   "max_cqe (ibv_devinfo -v)", who, cqe, strerror(errno ? errno : ENOMEM));
        return FERRY_ERR_IO;
    }
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];
        struct ibv_qp_init_attr ia;
        struct ibv_qp_attr attr;
        int rc;

        memset(&ia, 0, sizeof(ia));
        ia.send_cq = g->cq;
        ia.recv_cq = g->cq;
        ia.qp_type = IBV_QPT_RC;
        ia.cap.max_send_wr = FERRY_IB_RMA_SQ_DEPTH;
        ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        p->qp = ferry_ibv.create_qp(g->port->hca->pd, &ia);
        if (p->qp == NULL) {
            FERRY_WARN("RMA connect: %s: ibv_create_qp(RC, %d send WRs) for rank %d failed: "
                       "%s; check the device's max_qp / max_qp_wr (ibv_devinfo -v)", who,
                       FERRY_IB_RMA_SQ_DEPTH, r, strerror(errno ? errno : ENOMEM));
            return FERRY_ERR_IO;
        }
        memset(&attr, 0, sizeof(attr));
        attr.qp_state = IBV_QPS_INIT;
        attr.pkey_index = (uint16_t)cfg->pkey;
        attr.port_num = (uint8_t)g->port->port;
        attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC;
        rc = ferry_ibv.modify_qp(p->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                   IBV_QP_ACCESS_FLAGS);
        if (rc != 0) {
            FERRY_WARN("RMA connect: %s: ibv_modify_qp(INIT, pkey index %d) of QP 0x%x for "
                       "rank %d failed: %s; check NCCL_IB_PKEY", who, cfg->pkey,
                       p->qp->qp_num, r, strerror(rc > 0 ? rc : errno));
            return FERRY_ERR_IO;
        }
    }
    return FERRY_OK;
}

void ferry_ib_rma_qp_local(const ferry_ib_rma_group_t *g, const ferry_ib_rma_peer_t *p,
                           ferry_ib_rma_wire_t *w)
{
    memset(w, 0, sizeof(*w));
    w->kind = FERRY_IB_RMA_QP;
    w->link_layer = (uint8_t)g->port->link_layer;
    w->mtu = (uint8_t)g->port->port_attr.active_mtu;
    w->a = p->qp->qp_num;
    w->rkey = g->port->port_attr.lid;
    memcpy(w->gid, g->port->gid.raw, sizeof(w->gid));
}

ferry_status_t ferry_ib_rma_qp_up(ferry_ib_rma_group_t *g, ferry_ib_rma_peer_t *p,
                                  const ferry_ib_rma_wire_t *remote)
{
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    int mtu = g->port->port_attr.active_mtu < remote->mtu ? g->port->port_attr.active_mtu
                                                          : remote->mtu;
    struct ibv_qp_attr attr;
    char who[256];
    int rc;

    ferry_ib_rma_describe(g, who, sizeof(who));
    if (remote->link_layer != g->port->link_layer) {
        FERRY_WARN("RMA connect: %s: rank %d (%s) is on a %s port, ours is %s; every rank's "
                   "RMA device must have the same link layer (NCCL_IB_HCA)", who, p->rank,
                   p->addr, remote->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                   g->port->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
        return FERRY_ERR_REMOTE;
    }
    p->remote_qpn = remote->a;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = (enum ibv_mtu)mtu;
    attr.dest_qp_num = remote->a;
    attr.rq_psn = 0;
    attr.max_dest_rd_atomic = (uint8_t)ferry_ib_rma_rd_atom(g);
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = (uint16_t)remote->rkey;
    /* RoCE always needs the GRH; InfiniBand only across subnets (prefixes differ). */
    if (g->port->link_layer == IBV_LINK_LAYER_ETHERNET ||
        memcmp(g->port->gid.raw, remote->gid, 8) != 0) {
        attr.ah_attr.is_global = 1;
        memcpy(attr.ah_attr.grh.dgid.raw, remote->gid, 16);
        attr.ah_attr.grh.sgid_index = (uint8_t)g->port->gid_index;
        attr.ah_attr.grh.hop_limit = 255;
        attr.ah_attr.grh.traffic_class = (uint8_t)(cfg->tc >= 0 ? cfg->tc : 0);
    }
    attr.ah_attr.sl = (uint8_t)(cfg->sl >= 0 ? cfg->sl : 0);
    attr.ah_attr.port_num = (uint8_t)g->port->port;
    rc = ferry_ibv.modify_qp(p->qp, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                 IBV_QP_MIN_RNR_TIMER);
    if (rc == 0) {
        memset(&attr, 0, sizeof(attr));
        attr.qp_state = IBV_QPS_RTS;
        attr.timeout = (uint8_t)cfg->timeout;
        attr.retry_cnt = (uint8_t)cfg->retry_cnt;
        attr.rnr_retry = 7;
        attr.sq_psn = 0;
        attr.max_rd_atomic = (uint8_t)ferry_ib_rma_rd_atom(g);
        rc = ferry_ibv.modify_qp(p->qp, &attr,
                                 IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                     IBV_QP_MAX_QP_RD_ATOMIC);
    }
    if (rc != 0) {
        FERRY_WARN("RMA connect: %s: bringing QP 0x%x up towards rank %d (%s, QP 0x%x, lid %u) "
                   "failed: %s; check NCCL_IB_GID_INDEX, NCCL_IB_SL / NCCL_IB_TC and that both "
                   "ports are ACTIVE on one fabric", who, p->qp->qp_num, p->rank, p->addr,
                   remote->a, remote->rkey, strerror(rc > 0 ? rc : errno));
        return FERRY_ERR_IO;
    }
    return FERRY_OK;
}
