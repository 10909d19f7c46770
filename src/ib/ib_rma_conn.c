/*
 * An ib RMA group's set-up and teardown. listen() opens a TCP listener on
 * the ib backend's out-of-band address and publishes it with a token;
 * connect() dials every higher rank (the listener's backlog takes it
 * without the peer's help) and accepts one connection from every lower
 * rank, so no order of calls across ranks deadlocks; a dialer quotes the
 * token, its rank and the group size in a HELLO, and anything else that
 * knocks is closed and logged. Then every rank creates one RC QP per peer
 * and the group exchanges QP addresses over those links (one collective
 * step) and brings every QP up.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/netif.h"
#include "ib/ib_comm.h"
#include "ib/ib_rma.h"
#include "proxy/clock.h"

#define FERRY_IB_RMA_CONNECT_MS 60000
#define FERRY_IB_RMA_HELLO_MS   5000

_Static_assert(sizeof(ferry_ib_rma_handle_t) <= FERRY_HANDLE_SIZE, "RMA handle fits NCCL's");

ferry_status_t ferry_ib_rma_listen(int dev, void *handle, void **listen_p)
{
    const ferry_ib_vdev_t *v = ferry_ib_vdev_get(dev, "RMA listen");
    ferry_ib_rma_handle_t *h = handle;
    struct sockaddr_storage addr = ferry_ib_state.oob_sa;
    socklen_t addr_len = ferry_ib_state.oob_sa_len;
    ferry_ib_rma_listen_t *l;
    int one = 1;

    *listen_p = NULL;
    if (v == NULL)
        return FERRY_ERR_INVALID;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return FERRY_ERR_NO_MEMORY;
    l->port = &ferry_ib_state.devs[v->devs[0]];
    l->fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd >= 0)
        setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ferry_sockaddr_any_port(&addr);
    if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&addr, addr_len) != 0 ||
        listen(l->fd, 4096) != 0 || getsockname(l->fd, (struct sockaddr *)&addr, &addr_len) != 0) {
        FERRY_WARN("RMA listen(dev=%d, %s): a TCP listener on the out-of-band address %s (%s) "
                   "failed: %s; check NCCL_SOCKET_IFNAME", dev, v->name,
                   ferry_ib_state.oob_addr, ferry_ib_state.oob_ifname, strerror(errno));
        if (l->fd >= 0)
            close(l->fd);
        free(l);
        return FERRY_ERR_IO;
    }
    l->magic = FERRY_IB_RMA_LISTEN_MAGIC;
    l->dev = dev;
    l->token = ferry_ib_random64();
    ferry_ib_addr_str((struct sockaddr *)&addr, l->addr, sizeof(l->addr));
    memset(handle, 0, FERRY_HANDLE_SIZE);
    h->magic = FERRY_IB_RMA_MAGIC;
    h->token = l->token;
    ferry_sockaddr_to_wire(&addr, &h->family, &h->port, h->addr, &h->scope_id);
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

/* Connect to rank `to`, retrying while its listener may not be up yet, and say hello. */
static ferry_status_t ferry_ib_rma_dial(ferry_ib_rma_group_t *g, int to,
                                        const ferry_ib_rma_handle_t *h, uint64_t deadline)
{
    ferry_ib_rma_peer_t *p = &g->peers[to];
    ferry_ib_rma_wire_t hello;
    struct sockaddr_storage sa;
    socklen_t sa_len;
    int attempt = 0, err = 0;

    if (h->magic != FERRY_IB_RMA_MAGIC ||
        ferry_sockaddr_from_wire(&sa, &sa_len, h->family, h->port, h->addr, h->scope_id) != 0) {
        FERRY_WARN("RMA connect: rank %d of %d: the handle of rank %d is not an RMA listen "
                   "handle of ferry's ib backend; every rank must pass the handles its peers' "
                   "listen() filled, all-gathered in rank order", g->rank, g->nranks, to);
        return FERRY_ERR_INVALID;
    }
    ferry_ib_addr_str((struct sockaddr *)&sa, p->addr, sizeof(p->addr));
    for (;;) {
        struct pollfd pfd;
        socklen_t len = sizeof(err);

        p->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (p->fd < 0) {
            err = errno;
            break;
        }
        err = 0;
        if (connect(p->fd, (struct sockaddr *)&sa, sa_len) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                pfd.fd = p->fd;
                pfd.events = POLLOUT;
                err = poll(&pfd, 1, FERRY_IB_RMA_HELLO_MS) == 1 &&
                              getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0
                          ? err
                          : ETIMEDOUT;
            }
        }
        if (err == 0)
            break;
        close(p->fd);
        p->fd = -1;
        if (!ferry_connect_retryable(err) || attempt >= ferry_ib_core_cfg.retry_cnt ||
            ferry_px_now_ns() >= deadline)
            break;
        attempt++;
        usleep((useconds_t)attempt * (useconds_t)ferry_ib_core_cfg.retry_sleep_ms * 1000u);
    }
    if (err != 0) {
        FERRY_WARN("RMA connect: rank %d of %d could not connect to rank %d at %s after %d "
                   "attempt(s): %s; check that rank %d is alive and that NCCL_SOCKET_IFNAME "
                   "picks an interface that reaches it", g->rank, g->nranks, to, p->addr,
                   attempt + 1, strerror(err), to);
        return FERRY_ERR_REMOTE;
    }
    ferry_ib_oob_tune(p->fd, ferry_ib_state.cfg.peer_timeout_s);
    memset(&hello, 0, sizeof(hello));
    hello.kind = FERRY_IB_RMA_HELLO;
    hello.a = (uint32_t)g->rank;
    hello.addr = h->token;
    hello.size = (uint64_t)g->nranks;
    ferry_ib_rma_seal(&hello);
    if (ferry_ib_rma_send_all(p->fd, &hello, sizeof(hello), FERRY_IB_RMA_HELLO_MS) != FERRY_OK) {
        FERRY_WARN("RMA connect: rank %d of %d: sending the hello to rank %d at %s failed or "
                   "timed out after %d ms; check that rank %d is alive", g->rank, g->nranks, to,
                   p->addr, FERRY_IB_RMA_HELLO_MS, to);
        return FERRY_ERR_REMOTE;
    }
    return FERRY_OK;
}

/* Take one inbound connection; a stranger is closed and logged (*got_p 0). */
static ferry_status_t ferry_ib_rma_take(ferry_ib_rma_group_t *g, ferry_ib_rma_listen_t *l,
                                        uint64_t deadline, int *got_p)
{
    struct pollfd pfd = { .fd = l->fd, .events = POLLIN };
    struct sockaddr_storage sa;
    socklen_t sa_len = sizeof(sa);
    ferry_ib_rma_wire_t hello;
    const char *why;
    char from[64];
    int fd;

    *got_p = 0;
    if (ferry_px_now_ns() >= deadline)
        return FERRY_ERR_REMOTE;
    if (poll(&pfd, 1, 100) <= 0)
        return FERRY_OK;
    fd = accept4(l->fd, (struct sockaddr *)&sa, &sa_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? FERRY_OK
                                                                            : FERRY_ERR_IO;
    ferry_ib_addr_str((struct sockaddr *)&sa, from, sizeof(from));
    if (ferry_ib_rma_recv_all(fd, &hello, sizeof(hello), FERRY_IB_RMA_HELLO_MS) != FERRY_OK)
        why = "no complete hello (it hung up, or sent too little within the hello timeout)";
    else if ((why = ferry_ib_rma_wire_bad(&hello, FERRY_IB_RMA_HELLO)) != NULL)
        ;
    else if (hello.addr != l->token)
        why = "wrong token (a peer of another group or job)";
    else if (hello.size != (uint64_t)g->nranks)
        why = "its group size differs from ours";
    else if (hello.a >= (uint32_t)g->rank)
        why = "its rank is not one that connects to us";
    else if (g->peers[hello.a].fd >= 0)
        why = "its rank is connected already";
    if (why != NULL) {
        FERRY_WARN_LIMITED("RMA connect: rank %d of %d, listening on %s: closed a connection "
                           "from %s: %s; still waiting for the group's ranks", g->rank,
                           g->nranks, l->addr, from, why);
        close(fd);
        return FERRY_OK;
    }
    ferry_ib_oob_tune(fd, ferry_ib_state.cfg.peer_timeout_s);
    g->peers[hello.a].fd = fd;
    memcpy(g->peers[hello.a].addr, from, sizeof(from));
    *got_p = 1;
    return FERRY_OK;
}

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
        free(p->regs);
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
        p->regs = calloc(FERRY_IB_RMA_MAX_REGS, sizeof(*p->regs));
        if (p->regs == NULL) {
            ferry_ib_rma_group_free(g);
            return FERRY_ERR_NO_MEMORY;
        }
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
    uint64_t deadline = ferry_px_now_ns() + FERRY_IB_RMA_CONNECT_MS * 1000000ULL;
    ferry_ib_rma_group_t *g;
    ferry_status_t st;
    int accepted = 0;

    *group_p = NULL;
    if (l == NULL || l->magic != FERRY_IB_RMA_LISTEN_MAGIC) {
        FERRY_WARN("RMA connect: listenComm %p is not an open RMA listen comm of ferry's ib "
                   "backend; pass the one listen() returned, before closeListen()", listen);
        return FERRY_ERR_INVALID;
    }
    if (handles == NULL || nranks < 1 || nranks > FERRY_IB_RMA_MAX_RANKS || rank < 0 ||
        rank >= nranks) {
        FERRY_WARN("RMA connect: rank %d of %d (handles %p) is no valid group position; "
                   "nranks must be 1..%d and rank below it", rank, nranks, (void *)handles,
                   FERRY_IB_RMA_MAX_RANKS);
        return FERRY_ERR_INVALID;
    }
    st = ferry_ib_rma_group_alloc(l, nranks, rank, comm_id, &g);
    if (st != FERRY_OK)
        return st;
    for (int r = rank + 1; r < nranks && st == FERRY_OK; r++)
        st = ferry_ib_rma_dial(g, r, handles[r], deadline);
    while (st == FERRY_OK && accepted < rank) {
        int got;

        st = ferry_ib_rma_take(g, l, deadline, &got);
        accepted += got;
    }
    if (st != FERRY_OK && accepted < rank)
        FERRY_WARN("RMA connect: rank %d of %d, listening on %s: %d of the %d lower ranks "
                   "connected within %d ms (%s); check that every rank calls connect with the "
                   "same handles", rank, nranks, l->addr, accepted, rank,
                   FERRY_IB_RMA_CONNECT_MS, ferry_status_str(st));
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
