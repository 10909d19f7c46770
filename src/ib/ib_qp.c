/*
 * A comm's verbs resources: its CQ, its RC data QPs (RESET -> INIT at
 * creation, RTR -> RTS once the peer's metadata is in, NCCL's attributes),
 * the registered control block (send: CTS FIFO; recv: sizes FIFO), and
 * the hand-over to the data path once the handshake is done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib_cm_verbs.h"
#include "ib/ib_comm.h"

#define FERRY_IB_CTS_BYTES   (sizeof(ferry_ib_cts_t) * FERRY_IB_MAX_RECVS * FERRY_IB_FIFO_SLOTS)
#define FERRY_IB_SIZES_BYTES (sizeof(ferry_ib_sizes_slot_t) * FERRY_IB_FIFO_SLOTS)

const char *ferry_ib_comm_where(const ferry_ib_comm_t *c)
{
    return c->conn.dev != NULL ? c->conn.dev->name : "?";
}

static ferry_status_t ferry_ib_comm_qp_create(ferry_ib_comm_t *c, int i, struct rdma_cm_id *id,
                                              char *err, size_t len)
{
    ferry_ib_conn_t *conn = &c->conn;
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    const struct ibv_device_attr *da = &conn->dev->hca->attr;
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr attr;
    int rc;

    memset(&ia, 0, sizeof(ia));
    ia.send_cq = conn->cq;
    ia.recv_cq = conn->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 2 * FERRY_IB_FIFO_SLOTS * FERRY_IB_MAX_RECVS;
    ia.cap.max_recv_wr = FERRY_IB_FIFO_SLOTS * FERRY_IB_MAX_RECVS;
    if (da->max_qp_wr > 0 && ia.cap.max_send_wr > (uint32_t)da->max_qp_wr)
        ia.cap.max_send_wr = (uint32_t)da->max_qp_wr;
    if (da->max_qp_wr > 0 && ia.cap.max_recv_wr > (uint32_t)da->max_qp_wr)
        ia.cap.max_recv_wr = (uint32_t)da->max_qp_wr;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = cfg->use_inline ? sizeof(ferry_ib_cts_t) * FERRY_IB_MAX_RECVS : 0;
    if (id != NULL) /* rdmacm mode: rdma_cm brings it to INIT now and up at connect/accept. */
        conn->qps[i] = ferry_rdmacm.create_qp(id, conn->dev->hca->pd, &ia) == 0 ? id->qp : NULL;
    else
        conn->qps[i] = ferry_ibv.create_qp(conn->dev->hca->pd, &ia);
    if (conn->qps[i] == NULL) {
        snprintf(err, len, "%s (RC, %u send / %u recv WRs, inline %u) of data QP %d "
                 "failed: %s; check the device's max_qp / max_qp_wr (ibv_devinfo -v) and "
                 "NCCL_IB_QPS_PER_CONNECTION", id != NULL ? "rdma_create_qp" : "ibv_create_qp",
                 ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_inline_data, i,
                 strerror(errno ? errno : ENOMEM));
        return FERRY_ERR_IO;
    }
    if (i == 0 || ia.cap.max_inline_data < conn->max_inline)
        conn->max_inline = cfg->use_inline ? ia.cap.max_inline_data : 0;
    if (id != NULL)
        return FERRY_OK;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = (uint16_t)cfg->pkey;
    attr.port_num = (uint8_t)conn->dev->port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rc = ferry_ibv.modify_qp(conn->qps[i], &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        snprintf(err, len, "ibv_modify_qp(INIT, pkey index %d, port %d) of QP 0x%x failed: %s; "
                 "check NCCL_IB_PKEY", cfg->pkey, conn->dev->port, conn->qps[i]->qp_num,
                 strerror(rc > 0 ? rc : errno));
        return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

static void ferry_ib_comm_layout(ferry_ib_comm_t *c)
{
    char *ctrl = c->conn.ctrl;

    if (c->ring.kind == FERRY_PX_SEND) {
        ferry_ib_send_comm_t *sc = (ferry_ib_send_comm_t *)c;

        sc->fifo = (ferry_ib_cts_t (*)[FERRY_IB_MAX_RECVS])ctrl;
        sc->sizes_src = (ferry_ib_sizes_slot_t *)(ctrl + FERRY_IB_CTS_BYTES);
        sc->ar = c->conn.dev->ar;
        sc->ar_threshold = ferry_ib_state.cfg.ar_threshold;
        c->conn.local.fifo_addr = (uint64_t)(uintptr_t)sc->fifo;
        c->conn.local.fifo_rkey = c->conn.ctrl_mr->rkey;
    } else {
        ferry_ib_recv_comm_t *rc = (ferry_ib_recv_comm_t *)c;

        rc->cts = (ferry_ib_cts_t (*)[FERRY_IB_MAX_RECVS])ctrl;
        rc->sizes = (ferry_ib_sizes_slot_t *)(ctrl + FERRY_IB_CTS_BYTES);
        c->conn.local.sizes_addr = (uint64_t)(uintptr_t)rc->sizes;
        c->conn.local.sizes_rkey = c->conn.ctrl_mr->rkey;
    }
}

static void ferry_ib_comm_local_meta(ferry_ib_comm_t *c)
{
    ferry_ib_conn_t *conn = &c->conn;
    ferry_ib_meta_t *m = &conn->local;
    int i;

    m->magic = FERRY_IB_MAGIC;
    m->version = FERRY_IB_WIRE_VERSION;
    m->size = sizeof(*m);
    m->nqps = (uint16_t)conn->nqps;
    m->lid = conn->dev->port_attr.lid;
    m->port = (uint8_t)conn->dev->port;
    m->link_layer = (uint8_t)conn->dev->link_layer;
    m->mtu = (uint8_t)conn->dev->port_attr.active_mtu;
    m->gid_index = (uint8_t)conn->dev->gid_index;
    m->ar = (uint8_t)conn->dev->ar;
    memcpy(m->gid, conn->dev->gid.raw, sizeof(m->gid));
    snprintf(m->devname, sizeof(m->devname), "%.63s", conn->dev->name);
    for (i = 0; i < conn->nqps; i++)
        m->qpn[i] = conn->qps[i]->qp_num;
}

ferry_status_t ferry_ib_comm_create(ferry_px_req_kind_t kind, int devidx, int nqps,
                                    const char *peer, struct rdma_cm_id *const *cm_ids,
                                    ferry_ib_comm_t **comm_p)
{
    size_t size = kind == FERRY_PX_SEND ? sizeof(ferry_ib_send_comm_t)
                                        : sizeof(ferry_ib_recv_comm_t);
    ferry_ib_dev_t *dev = &ferry_ib_state.devs[devidx];
    const char *side = kind == FERRY_PX_SEND ? "connect to" : "accept from";
    const char *step = "allocating the comm";
    ferry_status_t status = FERRY_ERR_NO_MEMORY;
    char err[320] = "out of memory";
    ferry_ib_comm_t *c;
    int i, cqe;

    *comm_p = NULL;
    c = calloc(1, size);
    if (c == NULL)
        goto err_warn;
    c->magic = kind == FERRY_PX_SEND ? FERRY_IB_SEND_MAGIC : FERRY_IB_RECV_MAGIC;
    c->conn.dev = dev;
    c->conn.devidx = devidx;
    c->conn.nqps = nqps;
    c->conn.split = ferry_ib_state.cfg.split_data_on_qps;
    c->conn.oob_fd = -1;
    snprintf(c->conn.peer, sizeof(c->conn.peer), "%s", peer);
    status = ferry_px_ring_init(&c->ring, kind, "ib", peer,
                                kind == FERRY_PX_SEND ? &ferry_ib_send_ring_ops
                                                      : &ferry_ib_recv_ring_ops);
    if (status != FERRY_OK) {
        free(c);
        c = NULL;
        goto err_warn;
    }
    snprintf(c->ring.where, sizeof(c->ring.where), "%.63s", dev->name);
    c->ring.stall_ns = (uint64_t)ferry_ib_core_cfg.stall_warn_s * 1000000000ULL;

    step = "registering the FIFO";
    c->conn.ctrl_len = (FERRY_IB_CTS_BYTES + FERRY_IB_SIZES_BYTES + 4095) & ~(size_t)4095;
    if (posix_memalign(&c->conn.ctrl, 4096, c->conn.ctrl_len) != 0) {
        c->conn.ctrl = NULL;
        status = FERRY_ERR_NO_MEMORY;
        goto err_destroy;
    }
    memset(c->conn.ctrl, 0, c->conn.ctrl_len);
    status = ferry_ib_mr_get(dev->hca, c->conn.ctrl, c->conn.ctrl_len,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 1,
                             &c->conn.ctrl_mr, err, sizeof(err));
    if (status != FERRY_OK)
        goto err_destroy;
    ferry_ib_comm_layout(c);

    step = "creating the CQ";
    cqe = 2 * FERRY_IB_FIFO_SLOTS * FERRY_IB_MAX_RECVS * nqps + 64;
    if (dev->hca->attr.max_cqe > 0 && cqe > dev->hca->attr.max_cqe)
        cqe = dev->hca->attr.max_cqe;
    c->conn.cq = ferry_ibv.create_cq(dev->hca->ctx, cqe, NULL, NULL, 0);
    if (c->conn.cq == NULL) {
        snprintf(err, sizeof(err), "ibv_create_cq(%d entries) failed: %s; check the device's "
                 "max_cqe and the locked-memory limit (ulimit -l)", cqe,
                 strerror(errno ? errno : ENOMEM));
        status = FERRY_ERR_IO;
        goto err_destroy;
    }
    step = "creating the QPs";
    for (i = 0; i < nqps; i++) {
        status = ferry_ib_comm_qp_create(c, i, cm_ids != NULL ? cm_ids[i] : NULL, err,
                                         sizeof(err));
        if (status != FERRY_OK)
            goto err_destroy;
    }
    ferry_ib_comm_local_meta(c);
    ferry_ib_comm_layout(c); /* Again: local meta was just rewritten. */
    *comm_p = c;
    return FERRY_OK;

err_destroy:
    ferry_ib_comm_destroy(c);
err_warn:
    FERRY_WARN("ib %s %s on %s: %s failed: %s", side, peer, dev->name, step, err);
    return status;
}

void ferry_ib_comm_destroy(ferry_ib_comm_t *c)
{
    ferry_ib_conn_t *conn;
    int i;

    if (c == NULL)
        return;
    conn = &c->conn;
    if (conn->watching)
        ferry_ib_watch_remove(&conn->watch);
    conn->watching = 0;
    if (conn->registered)
        ferry_px_ring_unregister(&c->ring);
    conn->registered = 0;
    if (conn->oob_fd >= 0)
        ferry_ib_oob_bye(conn->oob_fd);
    conn->oob_fd = -1;
    if (conn->cm != NULL)
        ferry_ib_cm_conn_free(c); /* Takes the QPs made on its ids with them. */
    for (i = 0; i < FERRY_IB_MAX_QPS; i++)
        if (conn->qps[i] != NULL && ferry_ibv.destroy_qp(conn->qps[i]) != 0)
            FERRY_WARN("ib comm to %s on %s: ibv_destroy_qp(0x%x) failed: %s", conn->peer,
                       ferry_ib_comm_where(c), conn->qps[i]->qp_num, strerror(errno));
    if (c->ring.kind == FERRY_PX_RECV)
        ferry_ib_flush_destroy((ferry_ib_recv_comm_t *)c); /* Its QP is on the CQ. */
    if (conn->cq != NULL && ferry_ibv.destroy_cq(conn->cq) != 0)
        FERRY_WARN("ib comm to %s on %s: ibv_destroy_cq failed: %s", conn->peer,
                   ferry_ib_comm_where(c), strerror(errno));
    if (conn->ctrl_mr != NULL)
        ferry_ib_mr_put(conn->dev->hca, conn->ctrl_mr);
    free(conn->ctrl);
    ferry_px_ring_fini(&c->ring);
    ferry_ib_magic_clear(&c->magic);
    free(c);
}

const char *ferry_ib_meta_check(const ferry_ib_meta_t *m, int nqps, int link_layer)
{
    int i;

    if (m->magic != FERRY_IB_MAGIC)
        return "wrong magic (not a ferry ib peer)";
    if (m->version != FERRY_IB_WIRE_VERSION || m->size != sizeof(*m))
        return "unsupported wire version (mixed ferry builds?)";
    if (m->nqps < 1 || m->nqps > FERRY_IB_MAX_QPS || (nqps > 0 && m->nqps != nqps))
        return "QP count does not match (NCCL_IB_QPS_PER_CONNECTION differs between ranks?)";
    if (m->link_layer != link_layer)
        return "the peer's port has another link layer (InfiniBand vs RoCE)";
    if (m->mtu < IBV_MTU_256 || m->mtu > IBV_MTU_4096)
        return "invalid MTU";
    for (i = 0; i < m->nqps; i++)
        if (m->qpn[i] == 0 || m->qpn[i] > 0xffffff)
            return "invalid QP number";
    if (memchr(m->devname, '\0', sizeof(m->devname)) == NULL)
        return "device name not terminated";
    return NULL;
}

static int ferry_ib_comm_qp_rtr(ferry_ib_comm_t *c, int i, int tc, int sl)
{
    const ferry_ib_conn_t *conn = &c->conn;
    const ferry_ib_meta_t *r = &conn->remote, *l = &conn->local;
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = (enum ibv_mtu)(l->mtu < r->mtu ? l->mtu : r->mtu);
    attr.dest_qp_num = r->qpn[i];
    attr.rq_psn = 0;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.dlid = r->lid;
    /* RoCE always needs the GRH; InfiniBand only across subnets (prefixes differ). */
    if (l->link_layer == IBV_LINK_LAYER_ETHERNET || memcmp(l->gid, r->gid, 8) != 0) {
        attr.ah_attr.is_global = 1;
        memcpy(attr.ah_attr.grh.dgid.raw, r->gid, 16);
        attr.ah_attr.grh.sgid_index = l->gid_index;
        attr.ah_attr.grh.hop_limit = 255;
        attr.ah_attr.grh.traffic_class = (uint8_t)tc;
    }
    attr.ah_attr.sl = (uint8_t)sl;
    attr.ah_attr.port_num = l->port;
    return ferry_ibv.modify_qp(conn->qps[i], &attr,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                               IBV_QP_MIN_RNR_TIMER);
}

static int ferry_ib_comm_qp_rts(ferry_ib_comm_t *c, int i)
{
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = (uint8_t)cfg->timeout;
    attr.retry_cnt = (uint8_t)cfg->retry_cnt;
    attr.rnr_retry = 7;
    attr.sq_psn = 0;
    attr.max_rd_atomic = 1;
    return ferry_ibv.modify_qp(c->conn.qps[i], &attr,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                               IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

ferry_status_t ferry_ib_comm_connect_qps(ferry_ib_comm_t *c, const ferry_ib_meta_t *remote,
                                         const char *step)
{
    ferry_ib_conn_t *conn = &c->conn;
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    const char *why = ferry_ib_meta_check(remote, conn->nqps, conn->dev->link_layer);
    int i, rc, tc, sl;

    if (why != NULL) {
        FERRY_WARN("ib comm with %s on %s: %s: the peer's metadata is unusable: %s; every rank "
                   "must load the same ferry build and the same NCCL_IB_* settings",
                   conn->peer, ferry_ib_comm_where(c), step, why);
        return FERRY_ERR_REMOTE;
    }
    conn->remote = *remote;
    tc = conn->local.tc;
    sl = conn->local.sl;
    if (c->ring.kind == FERRY_PX_RECV && cfg->fifo_tc >= 0)
        tc = cfg->fifo_tc; /* The receiver's QPs carry the CTS writes. */
    for (i = 0; i < conn->nqps; i++) {
        const char *to = "RTR";

        rc = ferry_ib_comm_qp_rtr(c, i, tc, sl);
        if (rc == 0) {
            to = "RTS";
            rc = ferry_ib_comm_qp_rts(c, i);
        }
        if (rc != 0) {
            FERRY_WARN("ib comm with %s on %s: %s: ibv_modify_qp(%s) of QP 0x%x (peer QP 0x%x, "
                       "peer %s lid %u, mtu %d/%d, tc %d sl %d) failed: %s; check that both "
                       "ports are up and can reach each other (ibv_devinfo; RoCE: "
                       "NCCL_IB_GID_INDEX)", conn->peer, ferry_ib_comm_where(c), step, to,
                       conn->qps[i]->qp_num, remote->qpn[i], remote->devname,
                       (unsigned)remote->lid, conn->local.mtu, remote->mtu, tc, sl,
                       strerror(rc > 0 ? rc : errno));
            return FERRY_ERR_IO;
        }
    }
    return FERRY_OK;
}

void ferry_ib_comm_start(ferry_ib_comm_t *c, int fd)
{
    ferry_ib_conn_t *conn = &c->conn;
    int i;

    conn->oob_fd = fd;
    ferry_ib_oob_tune(fd, ferry_ib_state.cfg.peer_timeout_s);
    conn->check_ns = ferry_px_coarse_ns();
    memset(&conn->watch, 0, sizeof(conn->watch));
    conn->watch.dev = conn->dev;
    conn->watch.cq = conn->cq;
    for (i = 0; i < conn->nqps && i < FERRY_IB_WATCH_QPS; i++)
        conn->watch.qpn[i] = conn->qps[i]->qp_num;
    conn->watch.nqp = i;
    conn->watch.fn = ferry_ib_watch_fn;
    conn->watch.arg = c;
    ferry_ib_watch_add(&conn->watch);
    conn->watching = 1;
    ferry_px_ring_register(&c->ring);
    conn->registered = 1;
    /* From here NCCL holds it: close and the other ends-of-life find it in the live set. */
    if (ferry_live_add(c, c->ring.kind == FERRY_PX_SEND ? FERRY_LIVE_SEND : FERRY_LIVE_RECV) !=
        FERRY_OK)
        FERRY_WARN("ib comm to %s: no memory to list it as live; closing it will be refused",
                   conn->peer);
}
