/*
 * An ib RMA group's set-up and teardown. listen() opens a TCP listener on
 * the ib backend's out-of-band address and publishes it with a token;
 * connect() links every pair of ranks over TCP the way both backends do
 * (core/rma_link.c: higher ranks dialed, lower ones taken after a
 * token-checked HELLO). Then every rank creates one RC QP per peer and the
 * group exchanges QP addresses over those links (one collective step) and
 * brings every QP up.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "ib/ib_comm.h"
#include "ib/ib_rma.h"

#define FERRY_IB_RMA_CONNECT_MS 60000
#define FERRY_IB_RMA_HELLO_MS   5000

ferry_status_t ferry_ib_rma_listen(int dev, void *handle, void **listen_p)
{
    const ferry_ib_vdev_t *v = ferry_ib_vdev_get(dev, "RMA listen");
    struct sockaddr_storage addr = ferry_ib_state.oob_sa;
    socklen_t addr_len = ferry_ib_state.oob_sa_len;
    ferry_ib_rma_listen_t *l;
    const char *step;

    *listen_p = NULL;
    if (v == NULL)
        return FERRY_ERR_INVALID;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return FERRY_ERR_NO_MEMORY;
    l->port = &ferry_ib_state.devs[v->devs[0]];
    l->fd = ferry_rma_link_listen(&addr, &addr_len, &step);
    if (l->fd < 0) {
        FERRY_WARN("RMA listen(dev=%d, %s): a TCP listener on the out-of-band address %s (%s) "
                   "failed: %s; check NCCL_SOCKET_IFNAME", dev, v->name,
                   ferry_ib_state.oob_addr, ferry_ib_state.oob_ifname, strerror(errno));
        free(l);
        return FERRY_ERR_IO;
    }
    l->magic = FERRY_IB_RMA_LISTEN_MAGIC;
    l->dev = dev;
    l->token = ferry_ib_random64();
    ferry_ib_addr_str((struct sockaddr *)&addr, l->addr, sizeof(l->addr));
    ferry_rma_link_publish(handle, FERRY_IB_RMA_MAGIC, l->token, &addr);
    *listen_p = l;
    return FERRY_OK;
}

ferry_status_t ferry_ib_rma_close_listen(void *listen)
{
    ferry_ib_rma_listen_t *l = listen;

    if (l == NULL || l->magic != FERRY_IB_RMA_LISTEN_MAGIC) {
        FERRY_WARN("RMA closeListen(%p): not an RMA listen comm of ferry's ib backend (closed "
                   "twice?)", listen);
        return FERRY_ERR_INVALID;
    }
    close(l->fd);
    ferry_ib_magic_clear(&l->magic);
    free(l);
    return FERRY_OK;
}

/* A dialed link: the out-of-band options, then our HELLO. */
static ferry_status_t ferry_ib_rma_send_hello(int fd, const ferry_rma_link_hello_t *h, int ms)
{
    ferry_ib_rma_wire_t hello;

    ferry_ib_oob_tune(fd, ferry_ib_state.cfg.peer_timeout_s);
    memset(&hello, 0, sizeof(hello));
    hello.kind = FERRY_IB_RMA_HELLO;
    hello.a = h->rank;
    hello.addr = h->token;
    hello.size = h->nranks;
    ferry_ib_rma_seal(&hello);
    return ferry_ib_rma_send_all(fd, &hello, sizeof(hello), ms);
}

static const char *ferry_ib_rma_read_hello(int fd, int ms, ferry_rma_link_hello_t *h)
{
    ferry_ib_rma_wire_t hello;
    const char *why;

    if (ferry_ib_rma_recv_all(fd, &hello, sizeof(hello), ms) != FERRY_OK)
        return "no complete hello (it hung up, or sent too little within the hello timeout)";
    if ((why = ferry_ib_rma_wire_bad(&hello, FERRY_IB_RMA_HELLO)) != NULL)
        return why;
    h->rank = hello.a;
    h->nranks = hello.size;
    h->token = hello.addr;
    return NULL;
}

static ferry_status_t ferry_ib_rma_adopt(int fd, const char *peer)
{
    (void)peer;
    ferry_ib_oob_tune(fd, ferry_ib_state.cfg.peer_timeout_s);
    return FERRY_OK;
}

static ferry_rma_link_peer_t ferry_ib_rma_link_peer(void *group, int rank)
{
    ferry_ib_rma_peer_t *p = &((ferry_ib_rma_group_t *)group)->peers[rank];

    return (ferry_rma_link_peer_t){ .fd = &p->fd, .addr = p->addr };
}

/* The group's TCP links carry the out-of-band messages only. */
static const ferry_rma_link_ops_t ferry_ib_rma_link_ops = {
    .backend = "ib",
    .magic = FERRY_IB_RMA_MAGIC,
    .connect_ms = FERRY_IB_RMA_CONNECT_MS,
    .hello_ms = FERRY_IB_RMA_HELLO_MS,
    .addr_str = ferry_ib_addr_str,
    .send_hello = ferry_ib_rma_send_hello,
    .read_hello = ferry_ib_rma_read_hello,
    .adopt = ferry_ib_rma_adopt,
    .peer = ferry_ib_rma_link_peer,
};

static void ferry_ib_rma_group_free(ferry_ib_rma_group_t *g)
{
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];

        if (p->watching)
            ferry_ib_watch_remove(&p->watch); /* Before the ring and QP it names go. */
    }
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];

        if (p->has_ring) {
            ferry_px_ring_unregister(&p->ring);
            ferry_px_ring_fini(&p->ring);
        }
        if (p->qp != NULL)
            ferry_ibv.destroy_qp(p->qp);
        if (p->fd >= 0)
            close(p->fd);
        ferry_rma_regs_free(&p->regs);
    }
    for (uint32_t i = 0; i < g->nregs; i++) {
        if (g->regs[i] != NULL) {
            ferry_ib_mr_put(g->port->hca, g->regs[i]->mr);
            ferry_ib_magic_clear(&g->regs[i]->magic);
            free(g->regs[i]);
        }
    }
    if (g->sink_mr != NULL)
        ferry_ib_mr_put(g->port->hca, g->sink_mr);
    free(g->sink);
    if (g->cq != NULL)
        ferry_ibv.destroy_cq(g->cq);
    pthread_mutex_destroy(&g->lock);
    free(g->peers);
    ferry_ib_magic_clear(&g->magic);
    free(g);
}

static ferry_status_t ferry_ib_rma_group_alloc(ferry_ib_rma_listen_t *l, int nranks, int rank,
                                               uint64_t comm_id, ferry_ib_rma_group_t **g_p)
{
    ferry_ib_rma_group_t *g = calloc(1, sizeof(*g));
    char err[256];

    if (g == NULL)
        return FERRY_ERR_NO_MEMORY;
    g->peers = calloc((size_t)nranks, sizeof(*g->peers));
    if (g->peers == NULL) {
        free(g);
        return FERRY_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&g->lock, NULL);
    g->nranks = nranks;
    g->rank = rank;
    g->comm_id = comm_id;
    g->port = l->port;
    g->magic = FERRY_IB_RMA_GROUP_MAGIC;
    snprintf(g->self, sizeof(g->self), "%s", l->addr);
    for (int r = 0; r < nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];

        p->fd = -1;
        p->rank = r;
        p->group = g;
    }
    /* Fetch-and-add results land here and are never read: one word for all. */
    g->sink = calloc(8, sizeof(uint64_t));
    if (g->sink == NULL ||
        ferry_ib_mr_get(g->port->hca, g->sink, 8 * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE, 0,
                        &g->sink_mr, err, sizeof(err)) != FERRY_OK) {
        FERRY_WARN("RMA connect: rank %d of %d on %s: registering the signal results' word "
                   "failed: %s", rank, nranks, g->port->name, g->sink == NULL ? "no memory" : err);
        ferry_ib_rma_group_free(g);
        return FERRY_ERR_IO;
    }
    *g_p = g;
    return FERRY_OK;
}

/* Every peer's request ring: the dump and the stall check see its operations. */
static ferry_status_t ferry_ib_rma_rings(ferry_ib_rma_group_t *g)
{
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];
        ferry_status_t st;

        if (r == g->rank)
            snprintf(p->addr, sizeof(p->addr), "%s", g->self);
        st = ferry_px_ring_init(&p->ring, FERRY_PX_SEND, "ib", p->addr, &ferry_ib_rma_ring_ops);
        if (st != FERRY_OK)
            return st;
        snprintf(p->ring.where, sizeof(p->ring.where), "rma rank %d->%d QP 0x%x", g->rank, r,
                 p->qp != NULL ? p->qp->qp_num : 0);
        p->ring.stall_ns = (uint64_t)ferry_ib_core_cfg.stall_warn_s * 1000000000ULL;
        p->ring.hold_hint = "the target's HCA answers each operation by itself; a stall means "
                            "its QP, port or process is gone";
        p->ring.owner = g; /* test() takes only this group's requests. */
        ferry_px_ring_register(&p->ring);
        p->has_ring = 1;
    }
    return FERRY_OK;
}

/* The QPs' collective step: create, exchange addresses, bring up. */
static ferry_status_t ferry_ib_rma_qps(ferry_ib_rma_group_t *g)
{
    ferry_ib_rma_wire_t *out = calloc((size_t)g->nranks, sizeof(*out));
    ferry_ib_rma_wire_t *in = calloc((size_t)g->nranks, sizeof(*in));
    ferry_status_t st = out != NULL && in != NULL ? ferry_ib_rma_qps_create(g)
                                                  : FERRY_ERR_NO_MEMORY;

    for (int r = 0; st == FERRY_OK && r < g->nranks; r++)
        ferry_ib_rma_qp_local(g, &g->peers[r], &out[r]);
    if (st == FERRY_OK)
        st = ferry_ib_rma_exchange(g, "RMA connect (QP addresses)", out, in, FERRY_IB_RMA_QP);
    if (st == FERRY_OK)
        in[g->rank] = out[g->rank]; /* Our own QP loops back to itself. */
    for (int r = 0; st == FERRY_OK && r < g->nranks; r++)
        st = ferry_ib_rma_qp_up(g, &g->peers[r], &in[r]);
    free(out);
    free(in);
    return st;
}

ferry_status_t ferry_ib_rma_connect(void *const *handles, int nranks, int rank, void *listen,
                                    uint64_t comm_id, void **group_p)
{
    ferry_ib_rma_listen_t *l = listen;
    ferry_rma_link_t link = {
        .ops = &ferry_ib_rma_link_ops, .rank = rank, .nranks = nranks,
        .retry_cnt = ferry_ib_core_cfg.retry_cnt,
        .retry_sleep_ms = ferry_ib_core_cfg.retry_sleep_ms,
    };
    ferry_ib_rma_group_t *g;
    ferry_status_t st;

    *group_p = NULL;
    if (l == NULL || l->magic != FERRY_IB_RMA_LISTEN_MAGIC) {
        FERRY_WARN("RMA connect: listenComm %p is not an open RMA listen comm of ferry's ib "
                   "backend; pass the one listen() returned, before closeListen()", listen);
        return FERRY_ERR_INVALID;
    }
    if (ferry_rma_link_position(handles, nranks, rank, FERRY_IB_RMA_MAX_RANKS) != FERRY_OK)
        return FERRY_ERR_INVALID;
    link.listen_fd = l->fd;
    link.listen_addr = l->addr;
    link.token = l->token;
    st = ferry_ib_rma_group_alloc(l, nranks, rank, comm_id, &g);
    if (st != FERRY_OK)
        return st;
    link.group = g;
    st = ferry_rma_link_connect(&link, handles);
    if (st == FERRY_OK)
        st = ferry_ib_rma_qps(g);
    if (st == FERRY_OK)
        st = ferry_ib_rma_rings(g);
    if (st == FERRY_OK)
        ferry_ib_rma_watch_start(g);
    if (st != FERRY_OK) {
        ferry_ib_rma_group_free(g);
        return st;
    }
    FERRY_INFO(FERRY_LOG_NET | FERRY_LOG_INIT, "RMA group rank %d of %d connected on %s "
               "(listening on %s)", rank, nranks, g->port->name, l->addr);
    *group_p = g;
    return FERRY_OK;
}

ferry_status_t ferry_ib_rma_close(void *group)
{
    ferry_ib_rma_group_t *g = group;

    if (g == NULL || g->magic != FERRY_IB_RMA_GROUP_MAGIC) {
        FERRY_WARN("RMA closeColl(%p): not an open RMA group of ferry's ib backend (closed "
                   "twice?)", group);
        return FERRY_ERR_INVALID;
    }
    /* Peers that read the close marker before EOF take our leaving as orderly. */
    pthread_mutex_lock(&g->lock);
    for (int r = 0; r < g->nranks; r++) {
        ferry_ib_rma_peer_t *p = &g->peers[r];

        if (p->fd >= 0) {
            ferry_ib_oob_bye(p->fd);
            p->fd = -1;
        }
    }
    pthread_mutex_unlock(&g->lock);
    ferry_ib_rma_group_free(g);
    return FERRY_OK;
}
