/*
 * NCCL_FERRY_IB_CM=rdmacm: the pieces its connect and accept share (ids
 * and channels, private data, events in words, liveness), and listen.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib_cm_conn.h"

ferry_status_t ferry_ib_cm_conn_create(const char *who, ferry_ib_cm_conn_t **cm_p)
{
    ferry_ib_cm_conn_t *cm = calloc(1, sizeof(*cm));
    int flags;

    *cm_p = NULL;
    if (cm == NULL)
        return FERRY_ERR_NO_MEMORY;
    cm->live_peer = -1;
    cm->ch = ferry_rdmacm.create_event_channel();
    if (cm->ch == NULL) {
        FERRY_WARN("%s (rdmacm): rdma_create_event_channel failed: %s; set "
                   "NCCL_FERRY_IB_CM=oob to connect out of band over TCP", who, strerror(errno));
        free(cm);
        return FERRY_ERR_IO;
    }
    /* connect/accept must never block NCCL's thread: rdma_get_cm_event then says EAGAIN. */
    flags = fcntl(cm->ch->fd, F_GETFL);
    if (flags < 0 || fcntl(cm->ch->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        FERRY_WARN("%s (rdmacm): cannot make the event channel non-blocking: %s", who,
                   strerror(errno));
        ferry_rdmacm.destroy_event_channel(cm->ch);
        free(cm);
        return FERRY_ERR_IO;
    }
    *cm_p = cm;
    return FERRY_OK;
}

void ferry_ib_cm_conn_destroy(ferry_ib_cm_conn_t *cm)
{
    int i;

    if (cm == NULL)
        return;
    for (i = 0; i < cm->nids; i++) {
        struct rdma_cm_id *id = cm->ids[i];

        if (id == NULL)
            continue;
        ferry_rdmacm.disconnect(id); /* Not connected yet: nothing to tell the peer. */
        if (id->qp != NULL)
            ferry_rdmacm.destroy_qp(id);
        ferry_rdmacm.destroy_id(id);
    }
    if (cm->ch != NULL)
        ferry_rdmacm.destroy_event_channel(cm->ch);
    if (cm->live_peer >= 0)
        close(cm->live_peer);
    free(cm);
}

ferry_status_t ferry_ib_cm_conn_live(ferry_ib_cm_conn_t *cm, int *fd_p)
{
    int sp[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        FERRY_WARN("ib comm (rdmacm): socketpair for the liveness check failed: %s",
                   strerror(errno));
        return FERRY_ERR_IO;
    }
    cm->live_peer = sp[1];
    *fd_p = sp[0];
    return FERRY_OK;
}

int ferry_ib_cm_id_index(const ferry_ib_cm_conn_t *cm, const struct rdma_cm_id *id)
{
    int i = (int)(uintptr_t)id->context - 1;

    return i >= 0 && i < cm->nids && cm->ids[i] == id ? i : -1;
}

int ferry_ib_cm_devidx(const struct rdma_cm_id *id)
{
    int i;

    for (i = 0; i < ferry_ib_state.ndev; i++)
        if (ferry_ib_state.devs[i].hca->ctx == id->verbs &&
            ferry_ib_state.devs[i].port == id->port_num)
            return i;
    return -1;
}

void ferry_ib_cm_priv_fill(ferry_ib_cm_priv_t *p, const ferry_ib_comm_t *c, int qp,
                           uint64_t token, uint64_t conn_id)
{
    const ferry_ib_meta_t *l = &c->conn.local;

    memset(p, 0, sizeof(*p));
    p->token = token;
    p->conn_id = conn_id;
    p->addr = c->ring.kind == FERRY_PX_SEND ? l->fifo_addr : l->sizes_addr;
    p->rkey = l->ports[0].ctrl_rkey; /* rdmacm mode: devices of one port only. */
    p->magic = FERRY_IB_CM_MAGIC;
    p->version = FERRY_IB_WIRE_VERSION;
    p->qp = (uint8_t)qp;
    p->nqps = (uint8_t)c->conn.nqps;
    p->tc = l->tc;
    p->sl = l->sl;
    snprintf(p->devname, sizeof(p->devname), "%.15s", l->devname);
}

void ferry_ib_cm_param(struct rdma_conn_param *param, const ferry_ib_cm_priv_t *p)
{
    memset(param, 0, sizeof(*param));
    param->private_data = p;
    param->private_data_len = sizeof(*p);
    /* Read depth 1 each way, as the oob mode gives its QPs (max_rd_atomic, max_dest_rd_atomic). */
    param->responder_resources = 1;
    param->initiator_depth = 1;
    /* NCCL_IB_RETRY_CNT; the REQ carries it, so both QPs get it. RNR: retry forever, as oob. */
    param->retry_count = (uint8_t)ferry_ib_state.cfg.retry_cnt;
    param->rnr_retry_count = 7;
}

const char *ferry_ib_cm_priv_check(const void *pd, int len, uint64_t token,
                                   ferry_ib_cm_priv_t *out)
{
    ferry_ib_hello_t hello;
    const char *why;

    if (pd == NULL || len < (int)sizeof(*out))
        return "private data too short (not a ferry ib peer)";
    memcpy(out, pd, sizeof(*out));
    /* The OOB hello's rules, on the same fields. */
    memset(&hello, 0, sizeof(hello));
    hello.magic = out->magic == FERRY_IB_CM_MAGIC ? FERRY_IB_MAGIC : 0;
    hello.version = out->version;
    hello.hdr_size = sizeof(hello);
    hello.nlanes = 1;
    hello.token = out->token;
    why = ferry_ib_hello_check(&hello, token);
    if (why != NULL)
        return why;
    if (out->nqps < 1 || out->nqps > FERRY_IB_MAX_QPS || out->qp >= out->nqps)
        return "QP index or count out of range";
    out->devname[sizeof(out->devname) - 1] = '\0';
    return NULL;
}

void ferry_ib_cm_meta(ferry_ib_meta_t *m, const ferry_ib_cm_priv_t *p, const uint32_t *qpn,
                      int nqps, const ferry_ib_dev_t *dev, ferry_px_req_kind_t ours)
{
    int i;

    memset(m, 0, sizeof(*m));
    m->magic = FERRY_IB_MAGIC;
    m->version = FERRY_IB_WIRE_VERSION;
    m->size = sizeof(*m);
    m->nqps = (uint16_t)nqps;
    m->nmembers = 1;
    /* Port, link, MTU and GID are the route's: rdma_cm set the QPs up with them. */
    m->ports[0].port = (uint8_t)dev->port;
    m->ports[0].link_layer = (uint8_t)dev->link_layer;
    m->ports[0].mtu = (uint8_t)dev->port_attr.active_mtu;
    m->ports[0].ctrl_rkey = p->rkey;
    m->tc = p->tc;
    m->sl = p->sl;
    if (ours == FERRY_PX_RECV)
        m->fifo_addr = p->addr;
    else
        m->sizes_addr = p->addr;
    snprintf(m->devname, sizeof(m->devname), "%s", p->devname);
    for (i = 0; i < nqps && i < FERRY_IB_MAX_QPS; i++)
        m->qpn[i] = qpn[i];
}

static const char *ferry_ib_cm_rej_words(int reason)
{
    switch (reason) {
    case FERRY_IB_CM_REJ_STRANGER:
        return "the peer says our token is wrong (a handle from another listen or job?)";
    case FERRY_IB_CM_REJ_DEVICE:
        return "rdma_cm chose a port on the peer that its NCCL_IB_HCA excludes";
    case FERRY_IB_CM_REJ_SETUP:
        return "the peer could not build its side of the comm (its log says why)";
    default:
        return "rejected by the peer";
    }
}

const char *ferry_ib_cm_event_words(const struct rdma_cm_event *ev, char *buf, size_t len)
{
    const char *name = ferry_rdmacm.event_str(ev->event);
    ferry_ib_cm_priv_t p;

    if (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 8) {
        snprintf(buf, len, "%s (status 8: nobody listens on that address and port; is the peer "
                 "in rdmacm mode too, and its listen comm still open?)", name);
    } else if (ev->event == RDMA_CM_EVENT_REJECTED) {
        int ours = ev->param.conn.private_data_len >= sizeof(p) &&
                   memcpy(&p, ev->param.conn.private_data, sizeof(p)) != NULL &&
                   p.magic == FERRY_IB_CM_MAGIC;

        snprintf(buf, len, "%s (status %d: %s)", name, ev->status,
                 ours ? ferry_ib_cm_rej_words(p.reason)
                      : "rejected by the peer's connection manager");
    } else if (ev->status < 0) {
        snprintf(buf, len, "%s (status %d: %s)", name, ev->status, strerror(-ev->status));
    } else {
        snprintf(buf, len, "%s (status %d)", name, ev->status);
    }
    return buf;
}

void ferry_ib_cm_reject(struct rdma_cm_id *id, int reason)
{
    ferry_ib_cm_priv_t p;

    memset(&p, 0, sizeof(p));
    p.magic = FERRY_IB_CM_MAGIC;
    p.version = FERRY_IB_WIRE_VERSION;
    p.reason = (uint8_t)reason;
    ferry_rdmacm.reject(id, &p, sizeof(p));
}

void ferry_ib_cm_poll(ferry_ib_comm_t *c)
{
    ferry_ib_cm_conn_t *cm = c->conn.cm;
    struct rdma_cm_event *ev;
    int n;

    for (n = 0; n < FERRY_IB_CM_EVENTS_PER_CALL &&
                ferry_rdmacm.get_cm_event(cm->ch, &ev) == 0; n++) {
        enum rdma_cm_event_type type = ev->event;

        ferry_rdmacm.ack_cm_event(ev);
        /* Address changes (bond failover) and TIMEWAIT_EXIT leave the connection as it is. */
        if (type == RDMA_CM_EVENT_ESTABLISHED || type == RDMA_CM_EVENT_ADDR_CHANGE ||
            type == RDMA_CM_EVENT_TIMEWAIT_EXIT)
            continue;
        if (cm->live_peer >= 0) {
            FERRY_INFO(FERRY_LOG_NET, "ib comm with %s on %s (rdmacm): %s", c->conn.peer,
                       ferry_ib_comm_where(c), ferry_rdmacm.event_str(type));
            close(cm->live_peer);
            cm->live_peer = -1;
        }
    }
}

void ferry_ib_cm_conn_free(ferry_ib_comm_t *c)
{
    ferry_ib_cm_conn_t *cm = c->conn.cm;
    int i;

    /* The QPs on the ids go with them (rdma_destroy_qp), not through ibv_destroy_qp. */
    for (i = 0; i < cm->nids && i < FERRY_IB_MAX_QPS; i++)
        if (cm->ids[i] != NULL && cm->ids[i]->qp != NULL && cm->ids[i]->qp == c->conn.qps[i])
            c->conn.qps[i] = NULL;
    ferry_ib_cm_conn_destroy(cm);
    c->conn.cm = NULL;
}

int ferry_ib_cm_dev_addr(int dev, struct sockaddr_storage *addr, socklen_t *len_p)
{
    const ferry_ib_dev_t *d = &ferry_ib_state.devs[dev];
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    if (d->link_layer == IBV_LINK_LAYER_ETHERNET && memcmp(d->gid.raw, v4mapped, 12) == 0) {
        struct sockaddr_in *in = (struct sockaddr_in *)addr;

        memset(addr, 0, sizeof(*addr));
        in->sin_family = AF_INET;
        memcpy(&in->sin_addr, &d->gid.raw[12], 4);
        *len_p = sizeof(*in);
        return 1;
    }
    return 0;
}

ferry_status_t ferry_ib_cm_listen(ferry_ib_listen_comm_t *lc, struct sockaddr_storage *addr,
                                  socklen_t *len_p)
{
    char who[96], where[64];
    ferry_ib_cm_conn_t *cm;
    struct rdma_cm_id *id;
    ferry_status_t status;

    snprintf(who, sizeof(who), "listen(dev=%d, %s)", lc->dev, ferry_ib_dev_name(lc->dev));
    /* The device's own address, else the OOB one: rdma_cm picks the device from it. */
    ferry_ib_cm_dev_addr(lc->dev, addr, len_p);
    ferry_ib_addr_str((struct sockaddr *)addr, where, sizeof(where));
    status = ferry_ib_cm_conn_create(who, &cm);
    if (status != FERRY_OK)
        return status;
    if (ferry_rdmacm.create_id(cm->ch, &id, NULL, RDMA_PS_TCP) != 0) {
        FERRY_WARN("%s (rdmacm): rdma_create_id failed: %s", who, strerror(errno));
        ferry_ib_cm_conn_destroy(cm);
        return FERRY_ERR_IO;
    }
    cm->ids[0] = id;
    cm->nids = 1;
    if (ferry_rdmacm.bind_addr(id, (struct sockaddr *)addr) != 0 ||
        ferry_rdmacm.listen(id, 1024) != 0) {
        FERRY_WARN("%s (rdmacm): rdma_bind_addr/rdma_listen on %s failed: %s; check "
                   "NCCL_SOCKET_IFNAME (the address must be on an RDMA interface: IPoIB or the "
                   "RoCE netdev), or set NCCL_FERRY_IB_CM=oob", who, where, strerror(errno));
        ferry_ib_cm_conn_destroy(cm);
        return FERRY_ERR_IO;
    }
    /* The port rdma_cm bound is the handle's. */
    memcpy(addr, &id->route.addr.src_storage, sizeof(*addr));
    *len_p = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    lc->cm = calloc(1, sizeof(*lc->cm));
    if (lc->cm == NULL) {
        ferry_ib_cm_conn_destroy(cm);
        return FERRY_ERR_NO_MEMORY;
    }
    lc->cm->cm = cm;
    return FERRY_OK;
}
