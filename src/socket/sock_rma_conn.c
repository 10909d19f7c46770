/*
 * An RMA group's connections: listen() publishes an address and a token;
 * connect() opens one TCP connection to every other rank. Rank r connects
 * to every higher rank (the listener's backlog takes it without the peer's
 * help) and then accepts one from every lower rank, so no order of calls
 * across ranks deadlocks. A connector quotes the listener's token, its rank
 * and the group's size in a HELLO frame; anything else that knocks is
 * closed and logged, and accepting goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "proxy/clock.h"
#include "socket/sock.h"
#include "socket/sock_rma.h"

/* connect() as a whole, and one HELLO, must finish within these. */
#define FERRY_SOCK_RMA_CONNECT_MS 60000
#define FERRY_SOCK_RMA_HELLO_MS   5000

_Static_assert(sizeof(ferry_sock_rma_handle_t) <= FERRY_HANDLE_SIZE, "RMA handle fits NCCL's");

ferry_status_t ferry_sock_rma_listen(int dev, void *handle, void **listen_p)
{
    ferry_sock_rma_handle_t *h = handle;
    ferry_sock_rma_listen_t *l;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    ferry_sock_dev_t *d;
    int one = 1;

    *listen_p = NULL;
    if (dev < 0 || dev >= ferry_sock_state.ndev) {
        FERRY_WARN("RMA listen(dev=%d): the socket backend has %d device(s); pass a device "
                   "number below that", dev, ferry_sock_state.ndev);
        return FERRY_ERR_INVALID;
    }
    d = &ferry_sock_state.devs[dev];
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return FERRY_ERR_NO_MEMORY;
    l->fd = socket(d->ifc.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        FERRY_WARN("RMA listen on %s (%s): socket() failed: %s", d->ifc.name, d->addr_str,
                   strerror(errno));
        free(l);
        return FERRY_ERR_IO;
    }
    setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    addr = d->ifc.addr;
    addr_len = d->ifc.addr_len;
    ferry_sockaddr_any_port(&addr);
    if (bind(l->fd, (struct sockaddr *)&addr, addr_len) != 0 || listen(l->fd, 4096) != 0 ||
        getsockname(l->fd, (struct sockaddr *)&addr, &addr_len) != 0) {
        FERRY_WARN("RMA listen on %s (%s): bind/listen failed: %s; check NCCL_SOCKET_IFNAME",
                   d->ifc.name, d->addr_str, strerror(errno));
        close(l->fd);
        free(l);
        return FERRY_ERR_IO;
    }
    l->magic = FERRY_SOCK_RMA_LISTEN_MAGIC;
    l->dev = dev;
    l->token = ferry_sock_random64();
    ferry_sockaddr_str((struct sockaddr *)&addr, l->addr, sizeof(l->addr));
    memset(handle, 0, FERRY_HANDLE_SIZE);
    h->magic = FERRY_SOCK_RMA_MAGIC;
    h->token = l->token;
    ferry_sockaddr_to_wire(&addr, &h->family, &h->port, h->addr, &h->scope_id);
    *listen_p = l;
    return FERRY_OK;
}

ferry_status_t ferry_sock_rma_close_listen(void *listen)
{
    ferry_sock_rma_listen_t *l = listen;

    if (l == NULL || l->magic != FERRY_SOCK_RMA_LISTEN_MAGIC) {
        FERRY_WARN("RMA closeListen(%p): not an RMA listen comm of ferry's socket backend "
                   "(closed twice?)", listen);
        return FERRY_ERR_INVALID;
    }
    close(l->fd);
    ferry_sock_magic_clear(&l->magic);
    free(l);
    return FERRY_OK;
}

/* Connect to rank `to`, retrying while its listener may not be up yet, and say hello. */
static ferry_status_t ferry_sock_rma_dial(ferry_sock_rma_group_t *g, int to,
                                          const ferry_sock_rma_handle_t *h, uint64_t deadline)
{
    const ferry_config_t *cfg = &ferry_sock_state.core;
    ferry_sock_rma_peer_t *p = &g->peers[to];
    ferry_sock_rma_frame_t hello;
    struct sockaddr_storage sa;
    socklen_t sa_len;
    int attempt = 0, err = 0;

    if (h->magic != FERRY_SOCK_RMA_MAGIC ||
        ferry_sockaddr_from_wire(&sa, &sa_len, h->family, h->port, h->addr, h->scope_id) != 0) {
        FERRY_WARN("RMA connect: rank %d of %d: the handle of rank %d is not an RMA listen "
                   "handle of ferry's socket backend; every rank must pass the handles its "
                   "peers' listen() filled, all-gathered in rank order", g->rank, g->nranks, to);
        return FERRY_ERR_INVALID;
    }
    ferry_sockaddr_str((struct sockaddr *)&sa, p->addr, sizeof(p->addr));
    for (;;) {
        struct pollfd pfd;
        socklen_t len = sizeof(err);

        p->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (p->fd < 0 || ferry_sock_fd_tune(p->fd, p->addr) != FERRY_OK) {
            err = errno;
            break;
        }
        err = 0;
        if (connect(p->fd, (struct sockaddr *)&sa, sa_len) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                pfd.fd = p->fd;
                pfd.events = POLLOUT;
                err = poll(&pfd, 1, FERRY_SOCK_RMA_HELLO_MS) == 1 &&
                              getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0
                          ? err
                          : ETIMEDOUT;
            }
        }
        if (err == 0)
            break;
        close(p->fd);
        p->fd = -1;
        if (!ferry_connect_retryable(err) || attempt >= cfg->retry_cnt ||
            ferry_px_now_ns() >= deadline)
            break;
        attempt++;
        usleep((useconds_t)attempt * (useconds_t)cfg->retry_sleep_ms * 1000u);
    }
    if (err != 0) {
        FERRY_WARN("RMA connect: rank %d of %d could not connect to rank %d at %s after %d "
                   "attempt(s): %s; check that rank %d is alive and that NCCL_SOCKET_IFNAME "
                   "picks an interface that reaches it", g->rank, g->nranks, to, p->addr,
                   attempt + 1, strerror(err), to);
        return FERRY_ERR_REMOTE;
    }
    memset(&hello, 0, sizeof(hello));
    hello.op = FERRY_SOCK_RMA_HELLO;
    hello.reg = (uint32_t)g->rank;
    hello.off = h->token;
    hello.size = (uint64_t)g->nranks;
    ferry_sock_rma_seal(&hello);
    if (ferry_sock_rma_send_all(p->fd, &hello, sizeof(hello), FERRY_SOCK_RMA_HELLO_MS) !=
        FERRY_OK) {
        FERRY_WARN("RMA connect: rank %d of %d: sending the hello to rank %d at %s failed or "
                   "timed out after %d ms; check that rank %d is alive", g->rank, g->nranks, to,
                   p->addr, FERRY_SOCK_RMA_HELLO_MS, to);
        return FERRY_ERR_REMOTE;
    }
    return FERRY_OK;
}

/* Take one inbound connection; a stranger is closed and logged (0 and no peer filled). */
static ferry_status_t ferry_sock_rma_take(ferry_sock_rma_group_t *g, ferry_sock_rma_listen_t *l,
                                          uint64_t deadline, int *got_p)
{
    struct sockaddr_storage sa;
    socklen_t sa_len = sizeof(sa);
    ferry_sock_rma_frame_t hello;
    struct pollfd pfd = { .fd = l->fd, .events = POLLIN };
    const char *why;
    char from[64];
    uint64_t now = ferry_px_now_ns();
    int fd;

    *got_p = 0;
    if (now >= deadline)
        return FERRY_ERR_REMOTE;
    if (poll(&pfd, 1, 100) <= 0)
        return FERRY_OK;
    fd = accept4(l->fd, (struct sockaddr *)&sa, &sa_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? FERRY_OK
                                                                            : FERRY_ERR_IO;
    ferry_sockaddr_str((struct sockaddr *)&sa, from, sizeof(from));
    if (ferry_sock_rma_recv_all(fd, &hello, sizeof(hello), FERRY_SOCK_RMA_HELLO_MS) != FERRY_OK)
        why = "no complete hello (it hung up, or sent too little within the hello timeout)";
    else if ((why = ferry_sock_rma_frame_bad(&hello)) != NULL)
        ;
    else if (hello.op != FERRY_SOCK_RMA_HELLO || hello.off != l->token)
        why = "wrong token (a peer of another group or job)";
    else if (hello.size != (uint64_t)g->nranks)
        why = "its group size differs from ours";
    else if (hello.reg >= (uint32_t)g->rank)
        why = "its rank is not one that connects to us";
    else if (g->peers[hello.reg].fd >= 0)
        why = "its rank is connected already";
    if (why != NULL) {
        FERRY_WARN_LIMITED("RMA connect: rank %d of %d, listening on %s: closed a connection "
                           "from %s: %s; still waiting for the group's ranks", g->rank,
                           g->nranks, l->addr, from, why);
        close(fd);
        return FERRY_OK;
    }
    g->peers[hello.reg].fd = fd;
    memcpy(g->peers[hello.reg].addr, from, sizeof(from));
    *got_p = 1;
    return ferry_sock_fd_tune(fd, from);
}

static void ferry_sock_rma_group_free(ferry_sock_rma_group_t *g)
{
    for (int r = 0; r < g->nranks; r++) {
        ferry_sock_rma_peer_t *p = &g->peers[r];

        if (p->has_ring) {
            ferry_px_ring_unregister(&p->ring);
            ferry_px_ring_fini(&p->ring);
        }
        if (p->fd >= 0)
            close(p->fd);
        for (uint32_t i = p->tx_head; i != p->tx_tail; i++)
            ferry_sock_rma_tx_release(&p->tx[i % FERRY_SOCK_RMA_TXQ]);
        free(p->reg_size);
    }
    /* Copies still queued land before the shadows go. */
    ferry_sock_gpu_queue_fini(&g->gpu_q);
    for (uint32_t i = 0; i < g->nregs; i++) {
        if (g->regs[i] != NULL)
            ferry_sock_rma_gpu_dereg(g->regs[i]);
        free(g->regs[i]);
    }
    pthread_mutex_destroy(&g->lock);
    free(g->peers);
    free(g->pfds);
    free(g->pfd_rank);
    ferry_sock_magic_clear(&g->magic);
    free(g);
}

static ferry_status_t ferry_sock_rma_group_alloc(int nranks, int rank, uint64_t comm_id,
                                                 ferry_sock_rma_group_t **g_p)
{
    ferry_sock_rma_group_t *g = calloc(1, sizeof(*g));

    if (g == NULL)
        return FERRY_ERR_NO_MEMORY;
    g->peers = calloc((size_t)nranks, sizeof(*g->peers));
    g->pfds = calloc((size_t)nranks, sizeof(*g->pfds));
    g->pfd_rank = calloc((size_t)nranks, sizeof(*g->pfd_rank));
    if (g->peers == NULL || g->pfds == NULL || g->pfd_rank == NULL) {
        free(g->peers);
        free(g->pfds);
        free(g->pfd_rank);
        free(g);
        return FERRY_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&g->lock, NULL);
    g->nranks = nranks;
    g->rank = rank;
    g->comm_id = comm_id;
    g->magic = FERRY_SOCK_RMA_GROUP_MAGIC;
    /* Test builds' knob: exercise the target's own bounds check. */
    g->source_check = getenv("FERRY_TEST_RMA_NO_SOURCE_CHECK") == NULL;
    for (int r = 0; r < nranks; r++) {
        ferry_sock_rma_peer_t *p = &g->peers[r];

        p->fd = -1;
        p->rank = r;
        p->group = g;
        p->reg_size = calloc(FERRY_SOCK_RMA_MAX_REGS, sizeof(*p->reg_size));
        if (p->reg_size == NULL) {
            ferry_sock_rma_group_free(g);
            return FERRY_ERR_NO_MEMORY;
        }
    }
    *g_p = g;
    return FERRY_OK;
}

/* Every peer's request ring: the dump and the stall check see its operations. */
static ferry_status_t ferry_sock_rma_rings(ferry_sock_rma_group_t *g, const char *self)
{
    for (int r = 0; r < g->nranks; r++) {
        ferry_sock_rma_peer_t *p = &g->peers[r];
        ferry_status_t st;

        if (r == g->rank)
            snprintf(p->addr, sizeof(p->addr), "%s", self);
        st = ferry_px_ring_init(&p->ring, FERRY_PX_SEND, "socket", p->addr,
                                &ferry_sock_rma_ring_ops);
        if (st != FERRY_OK)
            return st;
        snprintf(p->ring.where, sizeof(p->ring.where), "rma rank %d->%d", g->rank, r);
        p->ring.stall_ns = (uint64_t)ferry_sock_state.core.stall_warn_s * 1000000000ULL;
        p->ring.hold_hint = "the target rank answers each operation from its own progress "
                            "(NCCL's RMA progress thread, or test() there)";
        ferry_px_ring_register(&p->ring);
        p->has_ring = 1;
        if (p->fd >= 0 && fcntl(p->fd, F_SETFL, fcntl(p->fd, F_GETFL) | O_NONBLOCK) != 0)
            return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

ferry_status_t ferry_sock_rma_connect(void *const *handles, int nranks, int rank, void *listen,
                                      uint64_t comm_id, void **group_p)
{
    ferry_sock_rma_listen_t *l = listen;
    uint64_t deadline = ferry_px_now_ns() + FERRY_SOCK_RMA_CONNECT_MS * 1000000ULL;
    ferry_sock_rma_group_t *g;
    ferry_status_t st;
    int accepted = 0;

    *group_p = NULL;
    if (l == NULL || l->magic != FERRY_SOCK_RMA_LISTEN_MAGIC) {
        FERRY_WARN("RMA connect: listenComm %p is not an open RMA listen comm of ferry's socket "
                   "backend; pass the one listen() returned, before closeListen()", listen);
        return FERRY_ERR_INVALID;
    }
    if (handles == NULL || nranks < 1 || nranks > FERRY_SOCK_RMA_MAX_RANKS || rank < 0 ||
        rank >= nranks) {
        FERRY_WARN("RMA connect: rank %d of %d (handles %p) is no valid group position; "
                   "nranks must be 1..%d and rank below it", rank, nranks, (void *)handles,
                   FERRY_SOCK_RMA_MAX_RANKS);
        return FERRY_ERR_INVALID;
    }
    st = ferry_sock_rma_group_alloc(nranks, rank, comm_id, &g);
    if (st != FERRY_OK)
        return st;
    for (int r = rank + 1; r < nranks && st == FERRY_OK; r++)
        st = ferry_sock_rma_dial(g, r, handles[r], deadline);
    while (st == FERRY_OK && accepted < rank) {
        int got;

        st = ferry_sock_rma_take(g, l, deadline, &got);
        accepted += got;
    }
    if (st == FERRY_OK)
        st = ferry_sock_rma_rings(g, l->addr);
    if (st != FERRY_OK) {
        if (accepted < rank)
            FERRY_WARN("RMA connect: rank %d of %d, listening on %s: %d of the %d lower ranks "
                       "connected within %d ms (%s); check that every rank calls connect with "
                       "the same handles", rank, nranks, l->addr, accepted, rank,
                       FERRY_SOCK_RMA_CONNECT_MS, ferry_status_str(st));
        ferry_sock_rma_group_free(g);
        return st;
    }
    FERRY_INFO(FERRY_LOG_NET | FERRY_LOG_INIT, "RMA group rank %d of %d connected (listening on "
               "%s)", rank, nranks, l->addr);
    *group_p = g;
    return FERRY_OK;
}

ferry_status_t ferry_sock_rma_close(void *group)
{
    ferry_sock_rma_group_t *g = group;
    ferry_sock_rma_frame_t bye;

    if (g == NULL || g->magic != FERRY_SOCK_RMA_GROUP_MAGIC) {
        FERRY_WARN("RMA closeColl(%p): not an open RMA group of ferry's socket backend (closed "
                   "twice?)", group);
        return FERRY_ERR_INVALID;
    }
    /* Peers that see BYE before EOF take our leaving as orderly, not as a failure. */
    memset(&bye, 0, sizeof(bye));
    bye.op = FERRY_SOCK_RMA_BYE;
    ferry_sock_rma_seal(&bye);
    pthread_mutex_lock(&g->lock);
    for (int r = 0; r < g->nranks; r++) {
        ferry_sock_rma_peer_t *p = &g->peers[r];

        /* A peer that left (BYE) reads nothing more. */
        if (p->fd < 0 || p->dead || p->bye)
            continue;
        /* What is queued goes first (bounded), so BYE is not cut into a frame in flight. */
        for (int i = 0; i < 1000 && p->tx_head != p->tx_tail && !p->dead; i++) {
            ferry_sock_rma_progress_locked(g);
            if (p->tx_head != p->tx_tail)
                usleep(1000);
        }
        if (!p->dead && p->tx_head == p->tx_tail)
            (void)ferry_sock_rma_send_all(p->fd, &bye, sizeof(bye), 1000);
    }
    pthread_mutex_unlock(&g->lock);
    ferry_sock_rma_group_free(g);
    return FERRY_OK;
}
