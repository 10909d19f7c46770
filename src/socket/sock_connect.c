/*
 * The non-blocking connect() state machine. NCCL calls connect() again with
 * the same handle until it returns a comm, so the state lives in a stage
 * object the handle refers to (by a checked reference into this process's
 * table, core/stage_table.h: the handle's bytes come from the peer's host,
 * so nothing in them is followed as a pointer). Each lane walks
 *   CLOSED -> CONNECTING -> SEND_HELLO -> CONNECTED
 * and a refused or unreachable connect goes back to CLOSED with a linear
 * back-off (NCCL_SOCKET_RETRY_CNT x NCCL_SOCKET_RETRY_SLEEP_MSEC), without
 * sleeping inside the call.
 */
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "socket/sock.h"
#include "socket/sock_board.h"

typedef enum ferry_sock_conn_state {
    FERRY_SOCK_CONN_CLOSED,     /* No socket; (re)connect when next_try_ns has passed. */
    FERRY_SOCK_CONN_CONNECTING, /* connect() in progress: wait for POLLOUT. */
    FERRY_SOCK_CONN_SEND_HELLO, /* TCP up: writing the 32-byte hello. */
    FERRY_SOCK_CONN_CONNECTED   /* Hello sent: the lane is ready for data. */
} ferry_sock_conn_state_t;

static const char *const ferry_sock_conn_state_names[] = {
    "CLOSED", "CONNECTING", "SEND_HELLO", "CONNECTED",
};

typedef struct ferry_sock_conn_lane {
    ferry_sock_conn_state_t state;
    int                     fd;
    int                     attempts;    /* Failed connects so far. */
    uint64_t                next_try_ns;
    size_t                  hello_sent;
    ferry_sock_hello_t      hello;
} ferry_sock_conn_lane_t;

typedef struct ferry_sock_conn_stage {
    int                     dev;
    int                     nlanes;      /* Streams opened: the handle's, or fewer (sock_hints.h). */
    char                    why[288];    /* How nlanes was chosen, for the INFO line ("" as ever). */
    struct sockaddr_storage addr;
    socklen_t               addr_len;
    char                    peer[64];
    ferry_sock_conn_lane_t  lanes[FERRY_SOCK_MAX_LANES];
} ferry_sock_conn_stage_t;

static void ferry_sock_stage_free(ferry_sock_conn_stage_t *st, ferry_sock_handle_t *h)
{
    int i;

    for (i = 0; i < st->nlanes; i++)
        if (st->lanes[i].fd >= 0)
            close(st->lanes[i].fd);
    free(st);
    ferry_stage_drop(&h->stage);
}

/* Every call: a handle that is not a ferry socket handle is the clearest error. */
static ferry_status_t ferry_sock_handle_check(int dev, const ferry_sock_handle_t *h)
{
    if (h->magic != FERRY_SOCK_MAGIC || h->version != FERRY_SOCK_WIRE_VERSION ||
        h->nlanes < 1 || h->nlanes > FERRY_SOCK_MAX_LANES ||
        (h->family != AF_INET && h->family != AF_INET6)) {
        FERRY_WARN("connect(dev=%d): the handle is not a ferry socket handle (magic 0x%llx, "
                   "version %u, streams %u); every rank must load the same ferry build with "
                   "the same NCCL_FERRY_BACKEND", dev, (unsigned long long)h->magic, h->version,
                   h->nlanes);
        return FERRY_ERR_USAGE;
    }
    return FERRY_OK;
}

/* The stage of the connect this handle is in the middle of; NULL before its first call. */
static ferry_status_t ferry_sock_stage_find(int dev, ferry_sock_handle_t *h,
                                            ferry_sock_conn_stage_t **stage_p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char why[320], peer[64];

    *stage_p = NULL;
    if (ferry_stage_ref_none(&h->stage))
        return FERRY_OK;
    *stage_p = ferry_stage_get(&h->stage, FERRY_STAGE_SOCK, h->token, why, sizeof(why));
    if (*stage_p != NULL)
        return FERRY_OK;
    ferry_sockaddr_from_wire(&ss, &len, h->family == AF_INET ? AF_INET : AF_INET6, h->port,
                             h->addr, h->scope_id);
    ferry_sockaddr_str((struct sockaddr *)&ss, peer, sizeof(peer));
    FERRY_WARN_LIMITED("connect(dev=%d) to %s: handle %p is not one that listen() produced, nor "
                       "one that a connect() in this process is still working on (stale, forged, "
                       "or from another process): %s; pass connect() the peer's handle exactly "
                       "as its listen() produced it (connect-state bytes zero), and the same "
                       "handle again on each call until it returns a comm", dev, peer, (void *)h,
                       why);
    return FERRY_ERR_USAGE;
}

/*
 * Streams this connect opens: the handle's, or with NCCL_FERRY_NET_HINTS=1
 * and a listener that takes fewer, what NCCL's latest send hints on ctx
 * leave of the budget (sock_hints.c). Fixed here, at the first call: every
 * hello of the connection says the same count.
 */
static int ferry_sock_stage_streams(ferry_ctx_t *ctx, const ferry_sock_handle_t *h,
                                    char *why, size_t why_len)
{
    ferry_net_hint_t hint = { 0, 0 };
    ferry_sock_streams_why_t reason;
    int n;

    if (ctx != NULL)
        hint = ferry_net_hints_send(&ctx->hints);
    n = ferry_sock_hints_streams(&ferry_sock_state.cfg, ferry_sock_state.hints.net_hints,
                                 (h->flags & FERRY_SOCK_HANDLE_TAKES_FEWER) != 0, hint, h->nlanes,
                                 &reason);
    ferry_sock_hints_words(reason, hint, h->nlanes, why, why_len);
    return n;
}

static ferry_status_t ferry_sock_stage_create(ferry_ctx_t *ctx, int dev, ferry_sock_handle_t *h,
                                              ferry_sock_conn_stage_t **stage_p)
{
    ferry_sock_conn_stage_t *st;
    uint64_t conn_id = ferry_sock_random64();
    int i;

    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return FERRY_ERR_NO_MEMORY;
    st->dev = dev;
    st->nlanes = ferry_sock_stage_streams(ctx, h, st->why, sizeof(st->why));
    ferry_sockaddr_from_wire(&st->addr, &st->addr_len, h->family == AF_INET ? AF_INET : AF_INET6,
                             h->port, h->addr, h->scope_id);
    if (h->family != AF_INET) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&st->addr;

        /*
         * A link-local address only means something with an interface: ours,
         * the one NCCL connects from, not the listener's index on its host.
         */
        if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) && dev >= 0 && dev < ferry_sock_state.ndev)
            in6->sin6_scope_id = if_nametoindex(ferry_sock_state.devs[dev].ifc.name);
    }
    ferry_sockaddr_str((struct sockaddr *)&st->addr, st->peer, sizeof(st->peer));
    for (i = 0; i < st->nlanes; i++) {
        ferry_sock_conn_lane_t *l = &st->lanes[i];

        l->fd = -1;
        l->hello.magic = FERRY_SOCK_MAGIC;
        l->hello.version = FERRY_SOCK_WIRE_VERSION;
        l->hello.hdr_size = sizeof(l->hello);
        l->hello.lane = (uint16_t)i;
        l->hello.nlanes = (uint16_t)st->nlanes;
        l->hello.token = h->token;
        l->hello.conn_id = conn_id;
    }
    if (ferry_stage_put(st, FERRY_STAGE_SOCK, h->token, &h->stage) != FERRY_OK) {
        FERRY_WARN("connect(dev=%d) to %s: no room to keep the connect's state (too many "
                   "connects in progress in this process)", dev, st->peer);
        free(st);
        return FERRY_ERR_NO_MEMORY;
    }
    *stage_p = st;
    return FERRY_OK;
}

static ferry_status_t ferry_sock_conn_lane_error(ferry_sock_conn_stage_t *st, int lane, int err)
{
    ferry_sock_conn_lane_t *l = &st->lanes[lane];
    const ferry_config_t *cfg = &ferry_sock_state.core;

    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    if (ferry_connect_retryable(err) && l->attempts < cfg->retry_cnt) {
        l->attempts++;
        l->state = FERRY_SOCK_CONN_CLOSED;
        l->hello_sent = 0;
        l->next_try_ns = ferry_px_now_ns() + (uint64_t)l->attempts * (uint64_t)cfg->retry_sleep_ms * 1000000ULL;
        FERRY_INFO(FERRY_LOG_NET, "connect to %s stream %d: %s; retry %d of %d", st->peer, lane,
                   strerror(err), l->attempts, cfg->retry_cnt);
        return FERRY_OK;
    }
    FERRY_WARN("connect to %s stream %d of %d failed in state %s after %d attempt(s): %s; check "
               "that the peer process is alive and that NCCL_SOCKET_IFNAME picks an interface "
               "that reaches it", st->peer, lane, st->nlanes,
               ferry_sock_conn_state_names[l->state], l->attempts + 1, strerror(err));
    return FERRY_ERR_REMOTE;
}

/* Move one lane as far as it goes without blocking. */
static ferry_status_t ferry_sock_conn_lane_advance(ferry_sock_conn_stage_t *st, int lane)
{
    ferry_sock_conn_lane_t *l = &st->lanes[lane];
    struct pollfd pfd;
    socklen_t len;
    ssize_t n;
    int err;

    switch (l->state) {
    case FERRY_SOCK_CONN_CLOSED:
        if (ferry_px_now_ns() < l->next_try_ns)
            return FERRY_OK;
        l->fd = socket(st->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (l->fd < 0)
            return ferry_sock_conn_lane_error(st, lane, errno);
        if (ferry_sock_fd_tune(l->fd, st->peer) != FERRY_OK)
            return ferry_sock_conn_lane_error(st, lane, errno);
        l->state = FERRY_SOCK_CONN_CONNECTING;
        if (connect(l->fd, (struct sockaddr *)&st->addr, st->addr_len) != 0 &&
            errno != EINPROGRESS)
            return ferry_sock_conn_lane_error(st, lane, errno);
        /* fall through */
    case FERRY_SOCK_CONN_CONNECTING:
        pfd.fd = l->fd;
        pfd.events = POLLOUT;
        if (poll(&pfd, 1, 0) <= 0)
            return FERRY_OK;
        len = sizeof(err);
        if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err != 0)
            return ferry_sock_conn_lane_error(st, lane, err);
        l->state = FERRY_SOCK_CONN_SEND_HELLO;
        /* fall through */
    case FERRY_SOCK_CONN_SEND_HELLO:
        n = send(l->fd, (char *)&l->hello + l->hello_sent, sizeof(l->hello) - l->hello_sent,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? FERRY_OK
                                                     : ferry_sock_conn_lane_error(st, lane, errno);
        l->hello_sent += (size_t)n;
        if (l->hello_sent == sizeof(l->hello))
            l->state = FERRY_SOCK_CONN_CONNECTED;
        return FERRY_OK;
    case FERRY_SOCK_CONN_CONNECTED:
        return FERRY_OK;
    }
    return FERRY_ERR_INTERNAL;
}

ferry_status_t ferry_sock_connect(ferry_ctx_t *ctx, int dev, void *handle, int traffic_class,
                                  void **send_comm_p)
{
    ferry_sock_handle_t *h = handle;
    ferry_sock_conn_stage_t *st;
    int fds[FERRY_SOCK_MAX_LANES];
    ferry_sock_comm_t *comm;
    ferry_status_t status;
    int i, ready = 0;

    *send_comm_p = NULL;
    /* Before anything reads the config: the budget may be derived again from the siblings' masks. */
    ferry_sock_board_check();
    status = ferry_sock_handle_check(dev, h);
    if (status == FERRY_OK)
        status = ferry_sock_stage_find(dev, h, &st);
    if (status != FERRY_OK)
        return status;
    if (st == NULL) {
        status = ferry_sock_stage_create(ctx, dev, h, &st);
        if (status != FERRY_OK)
            return status;
        /* After the handle's checks: a foreign handle is the clearer error. */
        if (dev < 0 || dev >= ferry_sock_state.ndev) {
            FERRY_WARN("connect(dev=%d): socket backend has %d device(s) (0..%d)", dev,
                       ferry_sock_state.ndev, ferry_sock_state.ndev - 1);
            ferry_sock_stage_free(st, h);
            return FERRY_ERR_INVALID;
        }
    }
    for (i = 0; i < st->nlanes; i++) {
        status = ferry_sock_conn_lane_advance(st, i);
        if (status != FERRY_OK) {
            ferry_sock_stage_free(st, h);
            return status;
        }
        ready += st->lanes[i].state == FERRY_SOCK_CONN_CONNECTED;
    }
    if (ready < st->nlanes)
        return FERRY_OK;
    for (i = 0; i < st->nlanes; i++) {
        fds[i] = st->lanes[i].fd;
        st->lanes[i].fd = -1; /* The comm owns them now. */
    }
    status = ferry_sock_comm_create(FERRY_PX_SEND, st->dev, fds, st->nlanes, st->peer, &comm);
    if (status != FERRY_OK) {
        ferry_sock_stage_free(st, h);
        return status;
    }
    FERRY_INFO(FERRY_LOG_NET, "connected to %s: %d streams%s, send comm #%u", comm->px.ring.peer,
               comm->px.nlanes, st->why, comm->px.ring.serial);
    ferry_sock_stage_free(st, h);
    *send_comm_p = comm;
    return FERRY_OK;
}
