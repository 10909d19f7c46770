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
#include "ib/ib_ctrl_pool.h"

#define FERRY_IB_CTS_BYTES   (sizeof(ferry_ib_cts_t) * FERRY_IB_MAX_RECVS * FERRY_IB_FIFO_SLOTS)
#define FERRY_IB_SIZES_BYTES (sizeof(ferry_ib_sizes_slot_t) * FERRY_IB_FIFO_SLOTS)

const char *ferry_ib_comm_where(const ferry_ib_comm_t *c)
{
    return c->ring.where[0] != '\0' ? c->ring.where : "?";
}

/* QP i from RESET to INIT on its member's port. */
static ferry_status_t ferry_ib_qp_init(ferry_ib_comm_t *c, int i, char *err, size_t len)
{
    ferry_ib_conn_t *conn = &c->conn;
    const ferry_ib_member_t *mem = &conn->mem[ferry_ib_qp_mem(conn, i)];
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    struct ibv_qp_attr attr;
    int rc;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = (uint16_t)cfg->pkey;
    attr.port_num = (uint8_t)mem->dev->port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rc = ferry_ibv.modify_qp(conn->qps[i], &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        snprintf(err, len, "ibv_modify_qp(INIT, pkey index %d, port %s) of QP 0x%x failed: %s; "
                 "check NCCL_IB_PKEY", cfg->pkey, mem->dev->name, conn->qps[i]->qp_num,
                 strerror(rc > 0 ? rc : errno));
        return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

static ferry_status_t ferry_ib_comm_qp_create(ferry_ib_comm_t *c, int i, struct rdma_cm_id *id,
                                              char *err, size_t len)
{
    ferry_ib_conn_t *conn = &c->conn;
    const ferry_ib_member_t *mem = &conn->mem[ferry_ib_qp_mem(conn, i)];
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    const struct ibv_device_attr *da = &mem->dev->hca->attr;
    struct ibv_qp_init_attr ia;

    memset(&ia, 0, sizeof(ia));
    ia.send_cq = mem->cq;
    ia.recv_cq = mem->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = conn->sq_depth;
    ia.cap.max_recv_wr = conn->rq_depth;
    if (da->max_qp_wr > 0 && ia.cap.max_send_wr > (uint32_t)da->max_qp_wr)
        ia.cap.max_send_wr = (uint32_t)da->max_qp_wr;
    if (da->max_qp_wr > 0 && ia.cap.max_recv_wr > (uint32_t)da->max_qp_wr)
        ia.cap.max_recv_wr = (uint32_t)da->max_qp_wr;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = cfg->use_inline ? sizeof(ferry_ib_cts_t) * FERRY_IB_MAX_RECVS : 0;
    if (id != NULL) /* rdmacm mode: rdma_cm brings it to INIT now and up at connect/accept. */
        conn->qps[i] = ferry_rdmacm.create_qp(id, mem->dev->hca->pd, &ia) == 0 ? id->qp : NULL;
    else
        conn->qps[i] = ferry_ibv.create_qp(mem->dev->hca->pd, &ia);
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
    return ferry_ib_qp_init(c, i, err, len);
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
    } else {
        ferry_ib_recv_comm_t *rc = (ferry_ib_recv_comm_t *)c;

        rc->cts = (ferry_ib_cts_t (*)[FERRY_IB_MAX_RECVS])ctrl;
        rc->sizes = (ferry_ib_sizes_slot_t *)(ctrl + FERRY_IB_CTS_BYTES);
        c->conn.local.sizes_addr = (uint64_t)(uintptr_t)rc->sizes;
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
    m->nmembers = (uint16_t)conn->nmem;
    for (i = 0; i < conn->nmem; i++) {
        const ferry_ib_dev_t *d = conn->mem[i].dev;
        ferry_ib_meta_port_t *p = &m->ports[i];

        p->lid = d->port_attr.lid;
        p->port = (uint8_t)d->port;
        p->link_layer = (uint8_t)d->link_layer;
        p->mtu = (uint8_t)d->port_attr.active_mtu;
        p->gid_index = (uint8_t)d->gid_index;
        p->ar = (uint8_t)d->ar;
        p->ctrl_rkey = conn->mem[i].ctrl_mr->rkey;
        memcpy(p->gid, d->gid.raw, sizeof(p->gid));
    }
    snprintf(m->devname, sizeof(m->devname), "%.63s", ferry_ib_dev_name(conn->devidx));
    for (i = 0; i < conn->nqps; i++)
        m->qpn[i] = conn->qps[i]->qp_num;
}

/*
 * What one data QP can have outstanding, by what the comm posts on it:
 *  - send: each of the FIFO_SLOTS messages in flight writes, per QP, at most a
 *    chain of MAX_RECVS data writes and the sizes write, and a failover may post a
 *    moved chain again next to it (2 x); it never posts a receive (one, as some
 *    providers refuse 0);
 *  - recv: a clear-to-send per receive in flight, each held until a later
 *    signalled one (every CTS_SIGNAL-th) is polled, and as many again moved by a
 *    failover: 4 x FIFO_SLOTS covers both with room for acks polled late. Receives:
 *    one per message per QP it uses, at most FIFO_SLOTS (a slot is reused only
 *    after its message's completion was polled), twice that for room; a merged
 *    device on either side keeps FERRY_IB_RQ_DEPTH posted on every QP.
 */
static void ferry_ib_qp_depths(ferry_ib_conn_t *conn, ferry_px_req_kind_t kind, int multi)
{
    if (kind == FERRY_PX_SEND) {
        conn->sq_depth = 2 * FERRY_IB_FIFO_SLOTS * FERRY_IB_MAX_RECVS;
        conn->rq_depth = 1;
    } else {
        conn->sq_depth = 4 * FERRY_IB_FIFO_SLOTS;
        conn->rq_depth = multi ? FERRY_IB_RQ_DEPTH : 2 * FERRY_IB_FIFO_SLOTS;
    }
}

/*
 * A member's CQ holds every completion its QPs can owe at once: each QP's send
 * and receive queues whole (after an error every posted WR completes, signalled
 * or not), for all nqps QPs, and the GDR flush QP's (ib_flush.c) on a receive comm.
 */
static int ferry_ib_cq_entries(const ferry_ib_conn_t *conn, ferry_px_req_kind_t kind, int nqps)
{
    int flush = kind == FERRY_PX_RECV ? FERRY_MAX_REQUESTS + 1 : 0;

    return (int)(conn->sq_depth + conn->rq_depth) * nqps + flush + 16;
}

/* Member m's control-block registration and CQ. */
static ferry_status_t ferry_ib_member_open(ferry_ib_comm_t *c, int m, int nqps, char *err,
                                           size_t len)
{
    ferry_ib_member_t *mem = &c->conn.mem[m];
    ferry_status_t status;
    int cqe;

    /* The registration of the block's pool chunk, shared with its other comms. */
    status = ferry_ib_ctrl_mr_get(mem->dev->hca, c->conn.ctrl, &mem->ctrl_mr, err, len);
    if (status != FERRY_OK)
        return status;
    cqe = ferry_ib_cq_entries(&c->conn, c->ring.kind, nqps);
    if (mem->dev->hca->attr.max_cqe > 0 && cqe > mem->dev->hca->attr.max_cqe)
        cqe = mem->dev->hca->attr.max_cqe;
    mem->cq = ferry_ibv.create_cq(mem->dev->hca->ctx, cqe, NULL, NULL, 0);
    if (mem->cq == NULL) {
        snprintf(err, len, "ibv_create_cq(%d entries) on %s failed: %s; check the device's "
                 "max_cqe and the locked-memory limit (ulimit -l)", cqe, mem->dev->name,
                 strerror(errno ? errno : ENOMEM));
        return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

ferry_status_t ferry_ib_comm_create(ferry_px_req_kind_t kind, int devidx, int nqps,
                                    int peer_members, const char *peer,
                                    struct rdma_cm_id *const *cm_ids, ferry_ib_comm_t **comm_p)
{
    size_t size = kind == FERRY_PX_SEND ? sizeof(ferry_ib_send_comm_t)
                                        : sizeof(ferry_ib_recv_comm_t);
    const ferry_ib_vdev_t *v = &ferry_ib_state.vdevs[devidx];
    const char *side = kind == FERRY_PX_SEND ? "connect to" : "accept from";
    const char *step = "allocating the comm";
    ferry_status_t status = FERRY_ERR_NO_MEMORY;
    char err[320] = "out of memory";
    ferry_ib_comm_t *c;
    int i;

    *comm_p = NULL;
    if (nqps < v->ndevs) {
        snprintf(err, sizeof(err), "%d data QP(s) cannot cover the %d ports of %s (the peer's "
                 "device has fewer ports: merge the same ports on every rank)", nqps, v->ndevs,
                 v->name);
        status = FERRY_ERR_REMOTE;
        step = "spreading QPs over the ports";
        c = NULL;
        goto err_warn;
    }
    c = ferry_px_ring_alloc(size);
    if (c == NULL)
        goto err_warn;
    c->magic = kind == FERRY_PX_SEND ? FERRY_IB_SEND_MAGIC : FERRY_IB_RECV_MAGIC;
    c->conn.devidx = devidx;
    c->conn.nmem = v->ndevs;
    for (i = 0; i < v->ndevs; i++)
        c->conn.mem[i].dev = &ferry_ib_state.devs[v->devs[i]];
    c->conn.dev = c->conn.mem[0].dev;
    c->conn.nqps = nqps;
    c->conn.nchains = 1;
    c->conn.split = ferry_ib_state.cfg.split_data_on_qps;
    c->conn.stripe_min = ferry_ib_state.cfg.stripe_min;
    c->conn.oob_fd = -1;
    ferry_ib_qp_depths(&c->conn, kind, v->ndevs > 1 || peer_members != 1);
    snprintf(c->conn.peer, sizeof(c->conn.peer), "%s", peer);
    status = ferry_px_ring_init(&c->ring, kind, "ib", peer,
                                kind == FERRY_PX_SEND ? &ferry_ib_send_ring_ops
                                                      : &ferry_ib_recv_ring_ops);
    if (status != FERRY_OK) {
        free(c);
        c = NULL;
        goto err_warn;
    }
    snprintf(c->ring.where, sizeof(c->ring.where), "%.63s", v->name);
    c->ring.stall_ns = (uint64_t)ferry_ib_core_cfg.stall_warn_s * 1000000000ULL;

    step = "registering the FIFO";
    c->conn.ctrl_len = (FERRY_IB_CTS_BYTES + FERRY_IB_SIZES_BYTES + 4095) & ~(size_t)4095;
    c->conn.ctrl = ferry_ib_ctrl_alloc(c->conn.ctrl_len); /* Zeroed. */
    if (c->conn.ctrl == NULL) {
        status = FERRY_ERR_NO_MEMORY;
        goto err_destroy;
    }
    step = "registering the FIFO and creating the CQ";
    for (i = 0; i < c->conn.nmem; i++) {
        status = ferry_ib_member_open(c, i, nqps, err, sizeof(err));
        if (status != FERRY_OK)
            goto err_destroy;
    }
    ferry_ib_comm_layout(c);
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
    FERRY_WARN("ib %s %s on %s: %s failed: %s", side, peer, v->name, step, err);
    return status;
}

void ferry_ib_comm_destroy(ferry_ib_comm_t *c)
{
    ferry_ib_conn_t *conn;
    int i;

    if (c == NULL)
        return;
    conn = &c->conn;
    for (i = 0; i < conn->nmem; i++) {
        if (conn->mem[i].watching)
            ferry_ib_watch_remove(&conn->mem[i].watch);
        conn->mem[i].watching = 0;
    }
    if (conn->registered)
        ferry_px_ring_unregister(&c->ring);
    conn->registered = 0;
    ferry_ib_oob_watch_del(conn->oob_watch, conn->oob_fd);
    conn->oob_watch = 0;
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
        ferry_ib_flush_destroy((ferry_ib_recv_comm_t *)c); /* Its QP is on member 0's CQ. */
    for (i = 0; i < conn->nmem; i++) {
        ferry_ib_member_t *mem = &conn->mem[i];

        if (mem->cq != NULL && ferry_ibv.destroy_cq(mem->cq) != 0)
            FERRY_WARN("ib comm to %s on %s: ibv_destroy_cq failed: %s", conn->peer,
                       mem->dev->name, strerror(errno));
        if (mem->ctrl_mr != NULL)
            ferry_ib_mr_put(mem->dev->hca, mem->ctrl_mr);
    }
    ferry_ib_ctrl_free(conn->ctrl); /* After the puts: the chunk's region may go with it. */
    ferry_px_ring_fini(&c->ring);
    ferry_ib_magic_clear(&c->magic);
    free(c);
}

/*
 * The numeric fields the QP bring-up puts into an address vector: each is
 * range-checked, and the words name the field and the value the peer sent
 * (a per-thread buffer: callers print it at once). The traffic class fills
 * the whole 8 bits of the GRH's field (DSCP and ECN), so every value the
 * wire's byte can hold is one a NIC takes; the service level is 4 bits.
 */
static const char *ferry_ib_meta_check_numbers(const ferry_ib_meta_t *m)
{
    static _Thread_local char why[160];
    int i;

    if (m->sl > 15) {
        snprintf(why, sizeof(why), "service level (sl) %u is out of range (0..15)",
                 (unsigned)m->sl);
        return why;
    }
    for (i = 0; i < m->nmembers; i++) {
        const ferry_ib_meta_port_t *p = &m->ports[i];

        if (p->port == 0) {
            snprintf(why, sizeof(why), "port %d's number is 0 (HCA ports count from 1)", i);
            return why;
        }
        /* 0xc000..0xfffe are multicast, 0xffff the permissive LID: no RC destination. */
        if (p->link_layer == IBV_LINK_LAYER_INFINIBAND && p->lid >= 0xc000) {
            snprintf(why, sizeof(why), "port %d's LID 0x%x is no unicast LID (0x0001..0xbfff)",
                     i, (unsigned)p->lid);
            return why;
        }
    }
    return NULL;
}

const char *ferry_ib_meta_check(const ferry_ib_meta_t *m, int nqps, int link_layer)
{
    static _Thread_local char why[160];
    int i;

    if (m->magic != FERRY_IB_MAGIC)
        return "wrong magic (not a ferry ib peer)";
    if (m->version != FERRY_IB_WIRE_VERSION || m->size != sizeof(*m))
        return "unsupported wire version (mixed ferry builds?)";
    if (m->nqps < 1 || m->nqps > FERRY_IB_MAX_QPS || (nqps > 0 && m->nqps != nqps))
        return "QP count does not match (NCCL_IB_QPS_PER_CONNECTION differs between ranks?)";
    if (m->nmembers < 1 || m->nmembers > FERRY_IB_MAX_MEMBERS || m->nmembers > m->nqps)
        return "invalid port count";
    for (i = 0; i < m->nmembers; i++) {
        if (m->ports[i].link_layer != link_layer)
            return "the peer's port has another link layer (InfiniBand vs RoCE)";
        if (m->ports[i].mtu < IBV_MTU_256 || m->ports[i].mtu > IBV_MTU_4096) {
            snprintf(why, sizeof(why), "invalid MTU: port %d's mtu %u is no enum ibv_mtu "
                     "(1..5)", i, (unsigned)m->ports[i].mtu);
            return why;
        }
    }
    for (i = 0; i < m->nqps; i++)
        if (m->qpn[i] == 0 || m->qpn[i] > 0xffffff) {
            snprintf(why, sizeof(why), "invalid QP number: QP %d's number 0x%x is outside "
                     "0x1..0xffffff", i, (unsigned)m->qpn[i]);
            return why;
        }
    if (memchr(m->devname, '\0', sizeof(m->devname)) == NULL)
        return "device name not terminated";
    return ferry_ib_meta_check_numbers(m);
}

static int ferry_ib_comm_qp_rtr(ferry_ib_comm_t *c, int i, int tc, int sl)
{
    const ferry_ib_conn_t *conn = &c->conn;
    const ferry_ib_meta_port_t *r = &conn->remote.ports[ferry_ib_qp_rmem(conn, i)];
    const ferry_ib_meta_port_t *l = &conn->local.ports[ferry_ib_qp_mem(conn, i)];
    struct ibv_qp_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = (enum ibv_mtu)(l->mtu < r->mtu ? l->mtu : r->mtu);
    attr.dest_qp_num = conn->remote.qpn[i];
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

/* QPs i with (m < 0 or member m) from INIT to RTR and RTS; WARNs naming step. */
static ferry_status_t ferry_ib_qps_up(ferry_ib_comm_t *c, int m, const char *step)
{
    ferry_ib_conn_t *conn = &c->conn;
    const ferry_ib_meta_t *remote = &conn->remote;
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    int i, rc, tc = conn->local.tc, sl = conn->local.sl;

    if (c->ring.kind == FERRY_PX_RECV && cfg->fifo_tc >= 0)
        tc = cfg->fifo_tc; /* The receiver's QPs carry the CTS writes. */
    for (i = 0; i < conn->nqps; i++) {
        const char *to = "RTR";

        if (m >= 0 && ferry_ib_qp_mem(conn, i) != m)
            continue;
        rc = ferry_ib_comm_qp_rtr(c, i, tc, sl);
        if (rc == 0) {
            to = "RTS";
            rc = ferry_ib_comm_qp_rts(c, i);
        }
        if (rc != 0) {
            FERRY_WARN("ib comm with %s on %s: %s: ibv_modify_qp(%s) of QP 0x%x on %s (peer QP "
                       "0x%x, peer %s port %d lid %u, mtu %d/%d, tc %d sl %d) failed: %s; check "
                       "that both ports are up and can reach each other (ibv_devinfo; RoCE: "
                       "NCCL_IB_GID_INDEX)", conn->peer, ferry_ib_comm_where(c), step, to,
                       conn->qps[i]->qp_num, conn->mem[ferry_ib_qp_mem(conn, i)].dev->name,
                       remote->qpn[i], remote->devname, ferry_ib_qp_rmem(conn, i),
                       (unsigned)remote->ports[ferry_ib_qp_rmem(conn, i)].lid,
                       conn->local.ports[ferry_ib_qp_mem(conn, i)].mtu,
                       remote->ports[ferry_ib_qp_rmem(conn, i)].mtu, tc, sl,
                       strerror(rc > 0 ? rc : errno));
            return FERRY_ERR_IO;
        }
    }
    return FERRY_OK;
}

ferry_status_t ferry_ib_comm_connect_qps(ferry_ib_comm_t *c, const ferry_ib_meta_t *remote,
                                         const char *step)
{
    ferry_ib_conn_t *conn = &c->conn;
    const char *why = ferry_ib_meta_check(remote, conn->nqps, conn->dev->link_layer);
    ferry_status_t status;
    int rmem;

    if (why != NULL) {
        FERRY_WARN("ib comm with %s on %s: %s: the peer's metadata is unusable: %s; every rank "
                   "must load the same ferry build and the same NCCL_IB_* settings",
                   conn->peer, ferry_ib_comm_where(c), step, why);
        return FERRY_ERR_REMOTE;
    }
    conn->remote = *remote;
    /* Each message touches every member of the larger device (NCCL's nDataQps). */
    rmem = remote->nmembers;
    conn->nchains = conn->nmem > rmem ? conn->nmem : rmem;
    if (conn->nchains > conn->nqps)
        conn->nchains = conn->nqps;
    conn->multi = conn->nmem > 1 || rmem > 1;
    if (c->ring.kind == FERRY_PX_RECV && conn->multi && conn->rq_depth < FERRY_IB_RQ_DEPTH) {
        /* The accept saw the peer's device as one port: its QPs hold too few receives. */
        FERRY_WARN("ib comm with %s on %s: %s: the peer's device now has %d ports, its "
                   "metadata at accept said 1; every rank must load the same ferry build",
                   conn->peer, ferry_ib_comm_where(c), step, rmem);
        return FERRY_ERR_REMOTE;
    }
    status = ferry_ib_qps_up(c, -1, step);
    if (status != FERRY_OK)
        return status;
    /* A merged device's chains may land on any QP: every QP keeps receives posted. */
    if (c->ring.kind == FERRY_PX_RECV && conn->multi)
        return ferry_ib_recv_pool_fill((ferry_ib_recv_comm_t *)c, -1);
    return FERRY_OK;
}

ferry_status_t ferry_ib_member_qps_reset(ferry_ib_comm_t *c, int m)
{
    ferry_ib_conn_t *conn = &c->conn;
    struct ibv_qp_attr attr;
    char err[320];
    int i, rc;

    conn->mem[m].epoch++; /* WRs from before are gone; their errors in the CQ are stale. */
    for (i = m; i < conn->nqps; i += conn->nmem) {
        memset(&attr, 0, sizeof(attr));
        attr.qp_state = IBV_QPS_RESET;
        rc = ferry_ibv.modify_qp(conn->qps[i], &attr, IBV_QP_STATE);
        if (rc != 0) {
            FERRY_WARN("ib comm with %s on %s: bringing port %s back: ibv_modify_qp(RESET) of "
                       "QP 0x%x failed: %s", conn->peer, ferry_ib_comm_where(c),
                       conn->mem[m].dev->name, conn->qps[i]->qp_num,
                       strerror(rc > 0 ? rc : errno));
            return FERRY_ERR_IO;
        }
        if (ferry_ib_qp_init(c, i, err, sizeof(err)) != FERRY_OK) {
            FERRY_WARN("ib comm with %s on %s: bringing port %s back: %s", conn->peer,
                       ferry_ib_comm_where(c), conn->mem[m].dev->name, err);
            return FERRY_ERR_IO;
        }
    }
    return FERRY_OK;
}

ferry_status_t ferry_ib_member_qps_up(ferry_ib_comm_t *c, int m)
{
    return ferry_ib_qps_up(c, m, "bringing a port back");
}

void ferry_ib_comm_start(ferry_ib_comm_t *c, int fd)
{
    ferry_ib_conn_t *conn = &c->conn;
    char who[192];
    int i, m;

    conn->oob_fd = fd;
    ferry_ib_oob_tune(fd, ferry_ib_state.cfg.peer_timeout_s);
    ferry_px_ring_describe(&c->ring, who, sizeof(who));
    conn->oob_watch = ferry_ib_oob_watch_add(fd, who);
    conn->check_ns = ferry_px_coarse_ns();
    for (m = 0; m < conn->nmem; m++) {
        ferry_ib_member_t *mem = &conn->mem[m];

        memset(&mem->watch, 0, sizeof(mem->watch));
        mem->watch.dev = mem->dev;
        mem->watch.cq = mem->cq;
        for (i = m; i < conn->nqps && mem->watch.nqp < FERRY_IB_WATCH_QPS; i += conn->nmem)
            mem->watch.qpn[mem->watch.nqp++] = conn->qps[i]->qp_num;
        mem->watch.fn = ferry_ib_watch_fn;
        mem->watch.arg = c;
        ferry_ib_watch_add(&mem->watch);
        mem->watching = 1;
    }
    ferry_px_ring_register(&c->ring);
    conn->registered = 1;
    /* From here NCCL holds it: close and the other ends-of-life find it in the live set. */
    if (ferry_live_add(c, c->ring.kind == FERRY_PX_SEND ? FERRY_LIVE_SEND : FERRY_LIVE_RECV) !=
        FERRY_OK)
        FERRY_WARN("ib comm to %s: no memory to list it as live; closing it will be refused",
                   conn->peer);
}
