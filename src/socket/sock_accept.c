/*
 * listen() and the non-blocking accept() state machine. Inbound streams wait
 * in `pending` until their 32-byte hello is complete; a stream with a bad
 * magic, version or token, one that closes or stalls, is dropped and logged
 * while real peers keep being served. Valid streams are grouped by conn_id
 * until every lane of one connection is in; then accept() returns the comm.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock.h"

/* Streams accepted per accept() call: bounds the work of one call. */
#define FERRY_SOCK_ACCEPT_BURST 64

const char *ferry_sock_hello_check(const ferry_sock_hello_t *hello, uint64_t token, int nlanes)
{
    if (hello->magic != FERRY_SOCK_MAGIC)
        return "wrong magic (not a ferry peer)";
    if (hello->version != FERRY_SOCK_WIRE_VERSION || hello->hdr_size != sizeof(*hello))
        return "unsupported wire version (mixed ferry builds?)";
    if (hello->token != token)
        return "wrong token (a peer of another connection or job)";
    if (hello->nlanes != nlanes || hello->lane >= nlanes)
        return "lane numbers do not match the listener's";
    return NULL;
}

ferry_status_t ferry_sock_listen(ferry_ctx_t *ctx, int dev, void *handle, void **listen_comm_p)
{
    ferry_sock_handle_t *h = handle;
    ferry_sock_listen_comm_t *lc;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    ferry_sock_dev_t *d;
    int one = 1;

    *listen_comm_p = NULL;
    if (dev < 0 || dev >= ferry_sock_state.ndev) {
        FERRY_WARN("listen(dev=%d): socket backend has %d device(s)", dev, ferry_sock_state.ndev);
        return FERRY_ERR_INVALID;
    }
    d = &ferry_sock_state.devs[dev];
    lc = calloc(1, sizeof(*lc));
    if (lc == NULL)
        return FERRY_ERR_NO_MEMORY;
    lc->fd = socket(d->ifc.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lc->fd < 0) {
        FERRY_WARN("listen on %s (%s): socket() failed: %s", d->ifc.name, d->addr_str,
                   strerror(errno));
        goto err_free;
    }
    setsockopt(lc->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    addr = d->ifc.addr;
    addr_len = d->ifc.addr_len;
    /* Port 0: the kernel picks one; the handle tells the peer. */
    if (addr.ss_family == AF_INET)
        ((struct sockaddr_in *)&addr)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&addr)->sin6_port = 0;
    if (bind(lc->fd, (struct sockaddr *)&addr, addr_len) != 0 ||
        listen(lc->fd, 16384) != 0 ||
        getsockname(lc->fd, (struct sockaddr *)&addr, &addr_len) != 0) {
        FERRY_WARN("listen on %s (%s): bind/listen failed: %s; check NCCL_SOCKET_IFNAME",
                   d->ifc.name, d->addr_str, strerror(errno));
        goto err_close;
    }
    lc->magic = FERRY_SOCK_LISTEN_MAGIC;
    lc->dev = dev;
    lc->nlanes = ferry_sock_state.cfg.streams;
    lc->token = ferry_sock_random64();
    ferry_sock_addr_str((struct sockaddr *)&addr, lc->addr_str, sizeof(lc->addr_str));

    memset(h, 0, sizeof(*h));
    h->magic = FERRY_SOCK_MAGIC;
    h->version = FERRY_SOCK_WIRE_VERSION;
    h->nlanes = (uint16_t)lc->nlanes;
    h->family = addr.ss_family;
    h->token = lc->token;
    if (addr.ss_family == AF_INET) {
        h->port = ((struct sockaddr_in *)&addr)->sin_port;
        memcpy(h->addr, &((struct sockaddr_in *)&addr)->sin_addr, 4);
    } else {
        h->port = ((struct sockaddr_in6 *)&addr)->sin6_port;
        memcpy(h->addr, &((struct sockaddr_in6 *)&addr)->sin6_addr, 16);
        h->scope_id = ((struct sockaddr_in6 *)&addr)->sin6_scope_id;
    }
    FERRY_INFO(FERRY_LOG_NET, "listening on %s (%s), %d streams per connection", lc->addr_str,
               d->ifc.name, lc->nlanes);
    *listen_comm_p = lc;
    return FERRY_OK;

err_close:
    close(lc->fd);
err_free:
    free(lc);
    return FERRY_ERR_IO;
}

static void ferry_sock_pending_drop(ferry_sock_listen_comm_t *lc, int i)
{
    close(lc->pending[i].fd);
    lc->pending[i] = lc->pending[--lc->npending];
}

/* Take new connections off the kernel's queue. */
static void ferry_sock_accept_new(ferry_sock_listen_comm_t *lc)
{
    int burst;

    for (burst = 0; burst < FERRY_SOCK_ACCEPT_BURST; burst++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof(peer);
        ferry_sock_pending_t *p;
        int fd = accept4(lc->fd, (struct sockaddr *)&peer, &peer_len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                FERRY_WARN("listener %s: accept failed: %s; will retry", lc->addr_str,
                           strerror(errno));
            return;
        }
        if (lc->npending == FERRY_SOCK_PENDING_MAX) {
            /* A flood of silent connections must not lock real peers out: drop the oldest. */
            FERRY_INFO(FERRY_LOG_NET, "listener %s: %d streams without hello; dropping the "
                       "oldest, from %s", lc->addr_str, lc->npending, lc->pending[0].peer);
            ferry_sock_pending_drop(lc, 0);
        }
        p = &lc->pending[lc->npending++];
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->since_ns = ferry_px_now_ns();
        ferry_sock_addr_str((struct sockaddr *)&peer, p->peer, sizeof(p->peer));
    }
}

/* File a verified stream into its connection's group; -1 if it cannot be. */
static int ferry_sock_group_add(ferry_sock_listen_comm_t *lc, const ferry_sock_pending_t *p)
{
    ferry_sock_group_t *g = NULL;
    int i;

    for (i = 0; i < lc->ngroups && g == NULL; i++)
        if (lc->groups[i].conn_id == p->hello.conn_id)
            g = &lc->groups[i];
    if (g == NULL) {
        if (lc->ngroups == FERRY_SOCK_GROUP_MAX)
            return -1;
        g = &lc->groups[lc->ngroups++];
        memset(g, 0, sizeof(*g));
        g->conn_id = p->hello.conn_id;
        g->nlanes = p->hello.nlanes;
        for (i = 0; i < FERRY_SOCK_MAX_LANES; i++)
            g->fds[i] = -1;
        memcpy(g->peer, p->peer, sizeof(g->peer));
    }
    if (g->fds[p->hello.lane] >= 0)
        return -1;
    g->fds[p->hello.lane] = p->fd;
    g->got++;
    return 0;
}

/* Read hellos; drop bad or stalled streams. */
static void ferry_sock_accept_hellos(ferry_sock_listen_comm_t *lc)
{
    uint64_t now = ferry_px_now_ns();
    uint64_t timeout_ns = (uint64_t)ferry_sock_state.cfg.hello_timeout_ms * 1000000ULL;
    int i = 0;

    while (i < lc->npending) {
        ferry_sock_pending_t *p = &lc->pending[i];
        const char *why = NULL;
        ssize_t n = recv(p->fd, (char *)&p->hello + p->got, sizeof(p->hello) - p->got,
                         MSG_DONTWAIT);

        if (n > 0)
            p->got += (size_t)n;
        else if (n == 0)
            why = "closed before completing its hello";
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            why = strerror(errno);
        if (why == NULL && p->got < sizeof(p->hello) && now - p->since_ns > timeout_ns)
            why = "stalled in its hello (NCCL_FERRY_HELLO_TIMEOUT_MS)";
        if (why == NULL && p->got == sizeof(p->hello)) {
            why = ferry_sock_hello_check(&p->hello, lc->token, lc->nlanes);
            if (why == NULL && ferry_sock_group_add(lc, p) != 0)
                why = "duplicate lane or too many connections in progress";
            if (why == NULL) {
                lc->pending[i] = lc->pending[--lc->npending]; /* The group owns the fd now. */
                continue;
            }
        }
        if (why == NULL) {
            i++;
            continue;
        }
        FERRY_WARN("listener %s: rejected stream from %s after %zu of %zu hello bytes: %s; "
                   "still accepting real peers", lc->addr_str, p->peer, p->got,
                   sizeof(p->hello), why);
        ferry_sock_pending_drop(lc, i);
    }
}

ferry_status_t ferry_sock_accept(void *listen_comm, void **recv_comm_p)
{
    ferry_sock_listen_comm_t *lc = listen_comm;
    ferry_sock_comm_t *comm;
    ferry_status_t status;
    int i;

    *recv_comm_p = NULL;
    if (lc == NULL || lc->magic != FERRY_SOCK_LISTEN_MAGIC) {
        FERRY_WARN("accept(%p): not a ferry socket listen comm", listen_comm);
        return FERRY_ERR_INVALID;
    }
    ferry_sock_accept_new(lc);
    ferry_sock_accept_hellos(lc);
    for (i = 0; i < lc->ngroups; i++) {
        ferry_sock_group_t *g = &lc->groups[i];

        if (g->got < g->nlanes)
            continue;
        status = ferry_sock_comm_create(FERRY_PX_RECV, lc->dev, g->fds, g->nlanes, g->peer,
                                        &comm);
        lc->groups[i] = lc->groups[--lc->ngroups]; /* fds now belong to the comm (or are closed). */
        if (status != FERRY_OK)
            return status;
        FERRY_INFO(FERRY_LOG_NET, "accepted connection from %s on %s: %d streams, recv comm #%u",
                   comm->px.ring.peer, lc->addr_str, comm->px.nlanes, comm->px.ring.serial);
        *recv_comm_p = comm;
        return FERRY_OK;
    }
    return FERRY_OK;
}

ferry_status_t ferry_sock_close_listen(void *listen_comm)
{
    ferry_sock_listen_comm_t *lc = listen_comm;
    int i, l;

    if (lc == NULL)
        return FERRY_OK;
    if (lc->magic != FERRY_SOCK_LISTEN_MAGIC) {
        FERRY_WARN("closeListen(%p): not a ferry socket listen comm", listen_comm);
        return FERRY_ERR_INVALID;
    }
    while (lc->npending > 0)
        ferry_sock_pending_drop(lc, 0);
    for (i = 0; i < lc->ngroups; i++)
        for (l = 0; l < FERRY_SOCK_MAX_LANES; l++)
            if (lc->groups[i].fds[l] >= 0)
                close(lc->groups[i].fds[l]);
    close(lc->fd);
    lc->magic = 0;
    free(lc);
    return FERRY_OK;
}
