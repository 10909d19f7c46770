/*
 * listen() and the non-blocking accept() state machine. Inbound streams wait
 * in `pending` until their 32-byte hello is complete; a stream with a bad
 * magic, version or token, one that closes or stalls, is dropped and logged
 * while real peers keep being served. Valid streams are grouped by conn_id
 * until every lane of one connection is in; then accept() returns the comm.
 *
 * Both tables are bounded and neither can be held by strangers: a full
 * pending table evicts its oldest stream, a full group table its oldest
 * incomplete group, and both expire after NCCL_FERRY_HELLO_TIMEOUT_MS
 * (pending streams from their arrival, groups from their latest stream).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock.h"
#include "socket/sock_board.h"

/* Streams accepted per accept() call: bounds the work of one call. */
#define FERRY_SOCK_ACCEPT_BURST 64

/* Whose stream it is: ours, this build's, this listener's. */
static const char *ferry_sock_hello_ident(const ferry_sock_hello_t *hello, uint64_t token)
{
    if (hello->magic != FERRY_SOCK_MAGIC)
        return "wrong magic (not a ferry peer)";
    if (hello->version != FERRY_SOCK_WIRE_VERSION || hello->hdr_size != sizeof(*hello))
        return "unsupported wire version (mixed ferry builds?)";
    if (hello->token != token)
        return "wrong token (a peer of another connection or job)";
    return NULL;
}

const char *ferry_sock_hello_check(const ferry_sock_hello_t *hello, uint64_t token, int nlanes)
{
    const char *why = ferry_sock_hello_ident(hello, token);

    if (why != NULL)
        return why;
    if (hello->nlanes != nlanes || hello->lane >= nlanes)
        return "lane numbers do not match the listener's";
    return NULL;
}

/*
 * The stream count is the connector's proposal here: a token holder that
 * says 0, or more than was offered, is refused, never clamped (its other
 * streams would say the same, and a connection of other streams than the
 * connector opened never completes).
 */
const char *ferry_sock_hello_check_fewer(const ferry_sock_hello_t *hello, uint64_t token,
                                         int offered, char *why, size_t why_len)
{
    const char *ident = ferry_sock_hello_ident(hello, token);

    if (ident != NULL)
        return ident;
    if (hello->nlanes < 1 || hello->nlanes > offered) {
        snprintf(why, why_len, "proposes %u streams for its connection, where this listener "
                 "takes 1..%d (a ferry connector never proposes more than the handle offers)",
                 hello->nlanes, offered);
        return why;
    }
    if (hello->lane >= hello->nlanes) {
        snprintf(why, why_len, "says it is stream %u of a connection of %u streams",
                 hello->lane, hello->nlanes);
        return why;
    }
    return NULL;
}

ferry_status_t ferry_sock_listen(ferry_ctx_t *ctx, int dev, void *handle, void **listen_comm_p)
{
    ferry_sock_handle_t *h = handle;
    ferry_sock_listen_comm_t *lc;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    ferry_sock_dev_t *d;
    int one = 1, open_conns;

    *listen_comm_p = NULL;
    /* Before anything reads the config: the budget may be derived again from the siblings' masks. */
    ferry_sock_board_check();
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
    ferry_sockaddr_any_port(&addr);
    if (bind(lc->fd, (struct sockaddr *)&addr, addr_len) != 0 ||
        listen(lc->fd, 16384) != 0 ||
        getsockname(lc->fd, (struct sockaddr *)&addr, &addr_len) != 0) {
        FERRY_WARN("listen on %s (%s): bind/listen failed: %s; check NCCL_SOCKET_IFNAME",
                   d->ifc.name, d->addr_str, strerror(errno));
        goto err_close;
    }
    /*
     * Before this listen is listed: the connections the process already has
     * (and the listens that will become some) choose this one's streams.
     */
    open_conns = (int)(ferry_live_count_kind(FERRY_LIVE_SEND) +
                       ferry_live_count_kind(FERRY_LIVE_RECV) +
                       ferry_live_count_kind(FERRY_LIVE_LISTEN));
    lc->nlanes = ferry_sock_config_streams_for(&ferry_sock_state.cfg, open_conns);
    if (ferry_live_add(lc, FERRY_LIVE_LISTEN) != FERRY_OK) {
        FERRY_WARN("listen on %s (%s): no memory to list the listen comm as live", d->ifc.name,
                   d->addr_str);
        close(lc->fd);
        free(lc);
        return FERRY_ERR_NO_MEMORY;
    }
    lc->magic = FERRY_SOCK_LISTEN_MAGIC;
    lc->dev = dev;
    lc->token = ferry_sock_random64();
    ferry_sockaddr_str((struct sockaddr *)&addr, lc->addr_str, sizeof(lc->addr_str));

    memset(h, 0, sizeof(*h));
    h->magic = FERRY_SOCK_MAGIC;
    h->version = FERRY_SOCK_WIRE_VERSION;
    h->nlanes = (uint16_t)lc->nlanes;
    h->family = addr.ss_family;
    h->token = lc->token;
    /* Off: the handle's bytes as ever (flags zero), so the connector opens exactly nlanes. */
    if (ferry_sock_state.hints.net_hints) {
        lc->takes_fewer = 1;
        h->flags = FERRY_SOCK_HANDLE_TAKES_FEWER;
        snprintf(lc->comm_words, sizeof(lc->comm_words), " (comm 0x%llx)",
                 ctx != NULL ? (unsigned long long)ctx->comm_id : 0ULL);
    }
    ferry_sockaddr_to_wire(&addr, &h->family, &h->port, h->addr, &h->scope_id);
    if (lc->nlanes < ferry_sock_state.cfg.streams)
        FERRY_INFO(FERRY_LOG_NET, "listening on %s (%s), %d streams per connection (not %d: "
                   "%d socket comms are open in this process, and the sockets grow no faster "
                   "than the connections)", lc->addr_str, d->ifc.name, lc->nlanes,
                   ferry_sock_state.cfg.streams, open_conns);
    else
        FERRY_INFO(FERRY_LOG_NET, "listening on %s (%s), %d streams per connection",
                   lc->addr_str, d->ifc.name, lc->nlanes);
    *listen_comm_p = lc;
    return FERRY_OK;

err_close:
    close(lc->fd);
err_free:
    free(lc);
    return FERRY_ERR_IO;
}

/* Take pending stream i out of the table, keeping the rest in arrival order. */
static void ferry_sock_pending_remove(ferry_sock_listen_comm_t *lc, int i)
{
    memmove(&lc->pending[i], &lc->pending[i + 1],
            (size_t)(lc->npending - i - 1) * sizeof(lc->pending[0]));
    lc->npending--;
}

static void ferry_sock_pending_drop(ferry_sock_listen_comm_t *lc, int i)
{
    close(lc->pending[i].fd);
    ferry_sock_pending_remove(lc, i);
}

static void ferry_sock_group_drop(ferry_sock_listen_comm_t *lc, int i)
{
    ferry_sock_group_t *g = &lc->groups[i];
    int l;

    for (l = 0; l < FERRY_SOCK_MAX_LANES; l++)
        if (g->fds[l] >= 0)
            close(g->fds[l]);
    lc->groups[i] = lc->groups[--lc->ngroups];
}

/*
 * The group table is full and a new connection starts: the incomplete group
 * idle the longest goes. Only a connector holding the token makes groups, so
 * these are connectors that died between their streams (or a peer with the
 * token that misbehaves); either way a live connector must not wait for them.
 */
static void ferry_sock_group_evict(ferry_sock_listen_comm_t *lc)
{
    uint64_t now = ferry_px_now_ns();
    int i, oldest = -1;

    for (i = 0; i < lc->ngroups; i++)
        if (lc->groups[i].got < lc->groups[i].nlanes &&
            (oldest < 0 || lc->groups[i].last_ns < lc->groups[oldest].last_ns))
            oldest = i;
    if (oldest < 0)
        return; /* All complete: accept() turns them into comms first. */
    FERRY_WARN_LIMITED("listener %s: %d connections in progress, the most it assembles at once; dropped "
               "the oldest, from %s with %d of %d streams, idle %llu ms (its connector probably "
               "died while connecting); still accepting real peers", lc->addr_str, lc->ngroups,
               lc->groups[oldest].peer, lc->groups[oldest].got, lc->groups[oldest].nlanes,
               (unsigned long long)((now - lc->groups[oldest].last_ns) / 1000000));
    ferry_sock_group_drop(lc, oldest);
}

/* Incomplete groups without a new stream for the hello timeout: their connector is gone. */
static void ferry_sock_group_expire(ferry_sock_listen_comm_t *lc)
{
    uint64_t now = ferry_px_now_ns();
    uint64_t timeout_ns = (uint64_t)ferry_sock_state.core.hello_timeout_ms * 1000000ULL;
    int i = 0;

    while (i < lc->ngroups) {
        ferry_sock_group_t *g = &lc->groups[i];

        if (g->got == g->nlanes || now - g->last_ns <= timeout_ns) {
            i++;
            continue;
        }
        FERRY_WARN_LIMITED("listener %s: connection from %s has %d of %d streams and no new one for "
                   "%llu ms (NCCL_FERRY_HELLO_TIMEOUT_MS); its connector probably died while "
                   "connecting: closed them, still accepting real peers", lc->addr_str, g->peer,
                   g->got, g->nlanes, (unsigned long long)((now - g->last_ns) / 1000000));
        ferry_sock_group_drop(lc, i);
    }
}

/* Streams the connection conn_id's first stream said; 0 when there is no such group. */
static int ferry_sock_group_nlanes(const ferry_sock_listen_comm_t *lc, uint64_t conn_id)
{
    int i;

    for (i = 0; i < lc->ngroups; i++)
        if (lc->groups[i].conn_id == conn_id)
            return lc->groups[i].nlanes;
    return 0;
}

/*
 * File a verified stream into its connection's group: 0 filed, -1 a lane
 * that group already has, -2 a stream count other than the group's, 1 no
 * room yet (every group is complete and waits for accept() to make its
 * comm: the stream waits too).
 */
static int ferry_sock_group_add(ferry_sock_listen_comm_t *lc, const ferry_sock_pending_t *p)
{
    ferry_sock_group_t *g = NULL;
    int i;

    for (i = 0; i < lc->ngroups && g == NULL; i++)
        if (lc->groups[i].conn_id == p->hello.conn_id)
            g = &lc->groups[i];
    if (g == NULL) {
        if (lc->ngroups == FERRY_SOCK_GROUP_MAX)
            ferry_sock_group_evict(lc);
        if (lc->ngroups == FERRY_SOCK_GROUP_MAX)
            return 1;
        g = &lc->groups[lc->ngroups++];
        memset(g, 0, sizeof(*g));
        g->conn_id = p->hello.conn_id;
        g->nlanes = p->hello.nlanes;
        for (i = 0; i < FERRY_SOCK_MAX_LANES; i++)
            g->fds[i] = -1;
        memcpy(g->peer, p->peer, sizeof(g->peer));
    }
    /* Only a listener that takes fewer sees counts that differ (ferry_sock_hello_check_fewer). */
    if (p->hello.nlanes != g->nlanes)
        return -2;
    if (g->fds[p->hello.lane] >= 0)
        return -1;
    g->fds[p->hello.lane] = p->fd;
    g->got++;
    g->last_ns = ferry_px_now_ns();
    return 0;
}

/*
 * A rejected stream is named in the log whatever comes: as a WARN within
 * the per-site limit (core/log.h: anyone who can reach the port can open
 * streams by the hundred), as an INFO line beyond it.
 */
static void ferry_sock_pending_reject(const ferry_sock_listen_comm_t *lc,
                                      const ferry_sock_pending_t *p, const char *why)
{
    FERRY_WARN_LIMITED_ELSE_INFO("listener %s%s: rejected stream from %s after %zu of %zu "
                                 "hello bytes: %s; still accepting real peers", lc->addr_str,
                                 lc->comm_words, p->peer, p->got, sizeof(p->hello), why);
}

/*
 * Read more of pending stream i's hello. Returns 1 when the stream left the
 * table (filed into its group, or dropped and logged), 0 while it waits on.
 * The hello timeout is checked on every call, so silent streams go too.
 */
static int ferry_sock_pending_step(ferry_sock_listen_comm_t *lc, int i)
{
    uint64_t timeout_ns = (uint64_t)ferry_sock_state.core.hello_timeout_ms * 1000000ULL;
    ferry_sock_pending_t *p = &lc->pending[i];
    const char *why = NULL;
    char why_buf[192];

    if (p->got < sizeof(p->hello)) {
        ssize_t n = recv(p->fd, (char *)&p->hello + p->got, sizeof(p->hello) - p->got,
                         MSG_DONTWAIT);

        if (n > 0)
            p->got += (size_t)n;
        else if (n == 0)
            why = "closed before completing its hello";
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            why = strerror(errno);
        if (why == NULL && p->got < sizeof(p->hello) &&
            ferry_px_now_ns() - p->since_ns > timeout_ns)
            why = "stalled in its hello (NCCL_FERRY_HELLO_TIMEOUT_MS)";
    }
    if (why == NULL && p->got == sizeof(p->hello)) {
        why = lc->takes_fewer ? ferry_sock_hello_check_fewer(&p->hello, lc->token, lc->nlanes,
                                                             why_buf, sizeof(why_buf))
                              : ferry_sock_hello_check(&p->hello, lc->token, lc->nlanes);
        if (why == NULL) {
            int filed = ferry_sock_group_add(lc, p);

            if (filed > 0)
                return 0; /* Hello complete; filed once accept() made room. */
            if (filed == 0) {
                ferry_sock_pending_remove(lc, i); /* The group owns the fd now. */
                return 1;
            }
            why = "duplicate lane of a connection in progress";
            if (filed == -2) {
                snprintf(why_buf, sizeof(why_buf), "says its connection has %u streams, where "
                         "the connection's first stream said %d",
                         p->hello.nlanes, ferry_sock_group_nlanes(lc, p->hello.conn_id));
                why = why_buf;
            }
        }
    }
    if (why == NULL)
        return 0;
    ferry_sock_pending_reject(lc, p, why);
    ferry_sock_pending_drop(lc, i);
    return 1;
}

/*
 * The pending table is full: the oldest stream still without its hello gets
 * a last read (the hello may just have come in), then it goes if it still
 * has not said hello.
 * Evicting the oldest, never the newest, is what keeps a flood of silent
 * connections from crowding out a real peer: a real stream's hello follows
 * its handshake at once, so it is filed long before 63 later arrivals make
 * it the oldest, while a silent one only ever ages.
 */
static void ferry_sock_pending_make_room(ferry_sock_listen_comm_t *lc)
{
    while (lc->npending == FERRY_SOCK_PENDING_MAX) {
        const ferry_sock_pending_t *p;
        int i = 0;

        /* A stream whose hello is complete only waits for a group slot: spare it. */
        while (i < lc->npending && lc->pending[i].got == sizeof(lc->pending[i].hello))
            i++;
        if (i == lc->npending)
            i = 0; /* All complete (8 finished groups and 64 more streams): the oldest. */
        if (ferry_sock_pending_step(lc, i))
            continue;
        p = &lc->pending[i];
        FERRY_INFO(FERRY_LOG_NET, "listener %s: %d streams without hello; evicting the oldest, "
                   "from %s after %llu ms with %zu of %zu hello bytes", lc->addr_str,
                   lc->npending, p->peer,
                   (unsigned long long)((ferry_px_now_ns() - p->since_ns) / 1000000), p->got,
                   sizeof(p->hello));
        ferry_sock_pending_drop(lc, i);
    }
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
                FERRY_WARN_LIMITED("listener %s: accept failed: %s; will retry", lc->addr_str,
                                   strerror(errno));
            return;
        }
        ferry_sock_pending_make_room(lc);
        p = &lc->pending[lc->npending++];
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->since_ns = ferry_px_now_ns();
        ferry_sockaddr_str((struct sockaddr *)&peer, p->peer, sizeof(p->peer));
    }
}

/* Read hellos; drop bad or stalled streams. */
static void ferry_sock_accept_hellos(ferry_sock_listen_comm_t *lc)
{
    int i = 0;

    while (i < lc->npending)
        if (!ferry_sock_pending_step(lc, i))
            i++;
}

ferry_status_t ferry_sock_accept(void *listen_comm, void **recv_comm_p)
{
    ferry_sock_listen_comm_t *lc = listen_comm;
    ferry_sock_comm_t *comm;
    ferry_status_t status;
    int i;

    *recv_comm_p = NULL;
    /* The live list, not the magic: a listen comm already closed is freed memory. */
    if (!ferry_live_has(lc, FERRY_LIVE_LISTEN)) {
        FERRY_WARN("accept(%p): not a live ferry socket listen comm (closed already?)",
                   listen_comm);
        return FERRY_ERR_INVALID;
    }
    ferry_sock_accept_new(lc);
    ferry_sock_accept_hellos(lc);
    ferry_sock_group_expire(lc);
    for (i = 0; i < lc->ngroups; i++) {
        ferry_sock_group_t *g = &lc->groups[i];

        if (g->got < g->nlanes)
            continue;
        status = ferry_sock_comm_create(FERRY_PX_RECV, lc->dev, g->fds, g->nlanes, g->peer,
                                        &comm);
        lc->groups[i] = lc->groups[--lc->ngroups]; /* fds now belong to the comm (or are closed). */
        if (status != FERRY_OK)
            return status;
        if (comm->px.nlanes < lc->nlanes)
            FERRY_INFO(FERRY_LOG_NET, "accepted connection from %s on %s: %d streams (the "
                       "connector's choice from NCCL's hints; %d offered), recv comm #%u",
                       comm->px.ring.peer, lc->addr_str, comm->px.nlanes, lc->nlanes,
                       comm->px.ring.serial);
        else
            FERRY_INFO(FERRY_LOG_NET, "accepted connection from %s on %s: %d streams, recv "
                       "comm #%u", comm->px.ring.peer, lc->addr_str, comm->px.nlanes,
                       comm->px.ring.serial);
        *recv_comm_p = comm;
        return FERRY_OK;
    }
    return FERRY_OK;
}

ferry_status_t ferry_sock_close_listen(void *listen_comm)
{
    ferry_sock_listen_comm_t *lc = listen_comm;

    if (lc == NULL)
        return FERRY_OK;
    /* Taken from the live list before anything is read: a second close never touches it. */
    if (!ferry_live_take(lc, FERRY_LIVE_LISTEN)) {
        FERRY_WARN("closeListen(%p): not a live ferry socket listen comm (closed already?); "
                   "NCCL must close each listen comm exactly once", listen_comm);
        return FERRY_ERR_INVALID;
    }
    while (lc->npending > 0)
        ferry_sock_pending_drop(lc, lc->npending - 1);
    while (lc->ngroups > 0)
        ferry_sock_group_drop(lc, lc->ngroups - 1);
    close(lc->fd);
    ferry_sock_magic_clear(&lc->magic);
    free(lc);
    return FERRY_OK;
}
