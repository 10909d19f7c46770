/*
 * An RMA group's connections: listen() publishes an address and a token;
 * connect() opens one TCP connection to every other rank, the way both
 * backends link a group (core/rma_link.c: higher ranks dialed, lower ones
 * taken after a token-checked hello). Here: the HELLO frame, the TCP
 * options of the data path, and the group's peers, rings and close.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock.h"
#include "socket/sock_rma.h"

/* connect() as a whole, and one HELLO, must finish within these. */
#define FERRY_SOCK_RMA_CONNECT_MS 60000
#define FERRY_SOCK_RMA_HELLO_MS   5000

ferry_status_t ferry_sock_rma_listen(int dev, void *handle, void **listen_p)
{
    ferry_sock_rma_listen_t *l;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    ferry_sock_dev_t *d;
    const char *step;

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
    addr = d->ifc.addr;
    addr_len = d->ifc.addr_len;
    l->fd = ferry_rma_link_listen(&addr, &addr_len, &step);
    if (l->fd < 0) {
        FERRY_WARN("RMA listen on %s (%s): %s failed: %s%s", d->ifc.name, d->addr_str, step,
                   strerror(errno), strcmp(step, "socket()") != 0
                                        ? "; check NCCL_SOCKET_IFNAME" : "");
        free(l);
        return FERRY_ERR_IO;
    }
    l->magic = FERRY_SOCK_RMA_LISTEN_MAGIC;
    l->dev = dev;
    l->token = ferry_sock_random64();
    ferry_sockaddr_str((struct sockaddr *)&addr, l->addr, sizeof(l->addr));
    ferry_rma_link_publish(handle, FERRY_SOCK_RMA_MAGIC, l->token, &addr);
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

static int ferry_sock_rma_tune(int fd, const char *peer)
{
    return ferry_sock_fd_tune(fd, peer) != FERRY_OK;
}

static ferry_status_t ferry_sock_rma_send_hello(int fd, const ferry_rma_link_hello_t *h, int ms)
{
    ferry_sock_rma_frame_t hello;

    memset(&hello, 0, sizeof(hello));
    hello.op = FERRY_SOCK_RMA_HELLO;
    hello.reg = h->rank;
    hello.off = h->token;
    hello.size = h->nranks;
    ferry_sock_rma_seal(&hello);
    return ferry_sock_rma_send_all(fd, &hello, sizeof(hello), ms);
}

static const char *ferry_sock_rma_read_hello(int fd, int ms, ferry_rma_link_hello_t *h)
{
    ferry_sock_rma_frame_t hello;
    const char *why;

    if (ferry_sock_rma_recv_all(fd, &hello, sizeof(hello), ms) != FERRY_OK)
        return "no complete hello (it hung up, or sent too little within the hello timeout)";
    if ((why = ferry_sock_rma_frame_bad(&hello)) != NULL)
        return why;
    if (hello.op != FERRY_SOCK_RMA_HELLO)
        return "wrong token (a peer of another group or job)";
    h->rank = hello.reg;
    h->nranks = hello.size;
    h->token = hello.off;
    return NULL;
}

static ferry_rma_link_peer_t ferry_sock_rma_link_peer(void *group, int rank)
{
    ferry_sock_rma_peer_t *p = &((ferry_sock_rma_group_t *)group)->peers[rank];

    return (ferry_rma_link_peer_t){ .fd = &p->fd, .addr = p->addr };
}

/* The group's TCP connections are its data path: tuned as the socket backend's. */
static const ferry_rma_link_ops_t ferry_sock_rma_link_ops = {
    .backend = "socket",
    .magic = FERRY_SOCK_RMA_MAGIC,
    .connect_ms = FERRY_SOCK_RMA_CONNECT_MS,
    .hello_ms = FERRY_SOCK_RMA_HELLO_MS,
    .addr_str = ferry_sockaddr_str,
    .tune = ferry_sock_rma_tune,
    .send_hello = ferry_sock_rma_send_hello,
    .read_hello = ferry_sock_rma_read_hello,
    .adopt = ferry_sock_fd_tune,
    .peer = ferry_sock_rma_link_peer,
};

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
        ferry_rma_regs_free(&p->reg_size);
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
        p->ring.owner = g; /* test() takes only this group's requests. */
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
    ferry_rma_link_t link = {
        .ops = &ferry_sock_rma_link_ops, .rank = rank, .nranks = nranks,
        .retry_cnt = ferry_sock_state.core.retry_cnt,
        .retry_sleep_ms = ferry_sock_state.core.retry_sleep_ms,
    };
    ferry_sock_rma_group_t *g;
    ferry_status_t st;

    *group_p = NULL;
    if (l == NULL || l->magic != FERRY_SOCK_RMA_LISTEN_MAGIC) {
        FERRY_WARN("RMA connect: listenComm %p is not an open RMA listen comm of ferry's socket "
                   "backend; pass the one listen() returned, before closeListen()", listen);
        return FERRY_ERR_INVALID;
    }
    if (ferry_rma_link_position(handles, nranks, rank, FERRY_SOCK_RMA_MAX_RANKS) != FERRY_OK)
        return FERRY_ERR_INVALID;
    link.listen_fd = l->fd;
    link.listen_addr = l->addr;
    link.token = l->token;
    st = ferry_sock_rma_group_alloc(nranks, rank, comm_id, &g);
    if (st != FERRY_OK)
        return st;
    link.group = g;
    st = ferry_rma_link_connect(&link, handles);
    if (st == FERRY_OK)
        st = ferry_sock_rma_rings(g, l->addr);
    if (st != FERRY_OK) {
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
