/*
 * The non-blocking connect() state machine. NCCL calls connect() again
 * with the same handle until it returns a comm, so the state lives in a
 * stage object the handle refers to (ib_conn_stage.c). The send comm (CQ, QPs at INIT, CTS
 * FIFO) is built on the first call; then
 *   CLOSED -> CONNECTING -> SEND_HELLO -> RECV_META -> SEND_READY
 *          -> RECV_ACCEPTED -> (comm)
 * A refused or unreachable TCP connect goes back to CLOSED with a linear
 * back-off (NCCL_SOCKET_RETRY_CNT x NCCL_SOCKET_RETRY_SLEEP_MSEC), without
 * sleeping inside the call; so does a connection a crowded listener evicted
 * before our hello came in (it says so with FERRY_IB_OOB_EVICTED:
 * ib_pending.c). The comm is returned only on the acceptor's ACCEPTED byte,
 * so it is never one the acceptor dropped.
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
#include "ib/ib_comm.h"

typedef enum ferry_ib_conn_state {
    FERRY_IB_CONN_CLOSED,     /* No socket; (re)connect when next_try_ns has passed. */
    FERRY_IB_CONN_CONNECTING, /* connect() in progress: wait for POLLOUT. */
    FERRY_IB_CONN_SEND_HELLO, /* TCP up: writing hello + our metadata. */
    FERRY_IB_CONN_RECV_META,  /* Waiting for the acceptor's metadata (its QPs at RTS). */
    FERRY_IB_CONN_SEND_READY, /* Our QPs at RTS: writing the ready byte. */
    FERRY_IB_CONN_RECV_ACCEPTED /* Waiting for the acceptor's accept() to return its comm. */
} ferry_ib_conn_state_t;

static const char *const ferry_ib_conn_step[] = {
    "connecting", "connecting", "sending our hello and metadata",
    "waiting for the acceptor's metadata", "sending the ready byte",
    "waiting for the acceptor to accept (its ACCEPTED byte)",
};

typedef struct ferry_ib_conn_stage {
    ferry_ib_conn_state_t state;
    int                   fd;
    int                   attempts;  /* Failed TCP connects so far. */
    uint64_t              next_try_ns;
    struct sockaddr_storage addr;
    socklen_t             addr_len;
    char                  peer[64];
    struct {
        ferry_ib_hello_t  hello;
        ferry_ib_meta_t   meta;
    }                     out;
    size_t                sent;
    ferry_ib_meta_t       in;
    size_t                got;
    uint8_t               accepted;
    ferry_ib_send_comm_t *comm;
} ferry_ib_conn_stage_t;

static void ferry_ib_stage_free(ferry_ib_conn_stage_t *st, ferry_ib_handle_t *h)
{
    if (st->comm != NULL)
        ferry_ib_comm_destroy(&st->comm->base);
    if (st->fd >= 0)
        close(st->fd);
    free(st);
    ferry_ib_handle_clear_stage(h);
}

void ferry_ib_conn_class(ferry_ib_meta_t *m, const ferry_ctx_t *ctx, int traffic_class)
{
    const ferry_ib_config_t *cfg = &ferry_ib_state.cfg;
    int tc = traffic_class >= 0 ? traffic_class : ctx != NULL ? ctx->traffic_class : -1;

    m->tc = (uint8_t)(cfg->tc >= 0 ? cfg->tc : tc >= 0 ? tc : 0);
    m->sl = (uint8_t)(cfg->sl >= 0 ? cfg->sl : 0);
}

ferry_status_t ferry_ib_handle_check(const ferry_ib_handle_t *h, int dev)
{
    if (h->magic != FERRY_IB_MAGIC || h->version != FERRY_IB_WIRE_VERSION) {
        FERRY_WARN("connect(dev=%d): the handle is not a ferry ib handle (magic 0x%llx, version "
                   "%u); every rank must load the same ferry build with the same "
                   "NCCL_FERRY_BACKEND", dev, (unsigned long long)h->magic, h->version);
        return FERRY_ERR_USAGE;
    }
    if (ferry_ib_vdev_get(dev, "connect") == NULL)
        return FERRY_ERR_INVALID;
    return FERRY_OK;
}

ferry_status_t ferry_ib_handle_peer(const ferry_ib_handle_t *h, int dev,
                                    struct sockaddr_storage *ss, socklen_t *len_p,
                                    char *peer, size_t peer_len)
{
    if (ferry_ib_handle_sockaddr(h, ss, len_p) != 0) {
        FERRY_WARN("connect(dev=%d): the handle's address family %u is not IPv4/IPv6", dev,
                   h->family);
        return FERRY_ERR_USAGE;
    }
    if (h->family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

        /* A link-local address means something only with our own interface. */
        if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
            in6->sin6_scope_id = if_nametoindex(ferry_ib_state.oob_ifname);
    }
    ferry_ib_addr_str((struct sockaddr *)ss, peer, peer_len);
    return FERRY_OK;
}

static ferry_status_t ferry_ib_stage_create(const ferry_ctx_t *ctx, int dev, ferry_ib_handle_t *h,
                                            int traffic_class, ferry_ib_conn_stage_t **stage_p)
{
    int nqps;
    ferry_ib_conn_stage_t *st;
    ferry_ib_comm_t *c;
    ferry_status_t status;

    /* NCCL_IB_QPS_PER_CONNECTION on each port of the device, as NCCL's IB. */
    nqps = ferry_ib_state.cfg.qps_per_conn * ferry_ib_state.vdevs[dev].ndevs;
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return FERRY_ERR_NO_MEMORY;
    st->fd = -1;
    status = ferry_ib_handle_peer(h, dev, &st->addr, &st->addr_len, st->peer, sizeof(st->peer));
    if (status != FERRY_OK) {
        free(st);
        return status;
    }
    if (nqps > FERRY_IB_MAX_QPS) {
        FERRY_INFO(FERRY_LOG_NET, "NCCL_IB_QPS_PER_CONNECTION=%d on %d port(s): ferry uses at "
                   "most %d data QPs per connection", ferry_ib_state.cfg.qps_per_conn,
                   ferry_ib_state.vdevs[dev].ndevs, FERRY_IB_MAX_QPS);
        nqps = FERRY_IB_MAX_QPS;
    }
    status = ferry_ib_comm_create(FERRY_PX_SEND, dev, nqps < 1 ? 1 : nqps, 0, st->peer, NULL, &c);
    if (status != FERRY_OK) {
        free(st);
        return status;
    }
    st->comm = (ferry_ib_send_comm_t *)c;
    ferry_ib_conn_class(&c->conn.local, ctx, traffic_class);
    st->out.hello.magic = FERRY_IB_MAGIC;
    st->out.hello.version = FERRY_IB_WIRE_VERSION;
    st->out.hello.hdr_size = sizeof(st->out.hello);
    st->out.hello.lane = 0;
    st->out.hello.nlanes = 1;
    st->out.hello.token = h->token;
    st->out.hello.conn_id = ferry_ib_random64();
    st->out.meta = c->conn.local;
    status = ferry_ib_handle_set_stage(h, FERRY_STAGE_IB_OOB, st, st->peer);
    if (status != FERRY_OK) {
        ferry_ib_comm_destroy(c);
        free(st);
        return status;
    }
    *stage_p = st;
    return FERRY_OK;
}

/*
 * A crowded listener evicted this connection before our hello came in
 * (ib_pending.c): its answer is FERRY_IB_OOB_EVICTED instead of the
 * metadata, perhaps with a failed send of the hello before it.
 */
static int ferry_ib_conn_evicted(ferry_ib_conn_stage_t *st)
{
    uint8_t b = 0;

    if (st->state == FERRY_IB_CONN_RECV_META)
        return st->got >= 1 && *(const uint8_t *)&st->in == FERRY_IB_OOB_EVICTED;
    return st->state == FERRY_IB_CONN_SEND_HELLO && st->fd >= 0 &&
           recv(st->fd, &b, 1, MSG_DONTWAIT) == 1 && b == FERRY_IB_OOB_EVICTED;
}

static ferry_status_t ferry_ib_conn_error(ferry_ib_conn_stage_t *st, int rc)
{
    const ferry_config_t *cfg = &ferry_ib_core_cfg;
    int err = rc == FERRY_IB_OOB_EOF ? 0 : -rc;
    int evicted = ferry_ib_conn_evicted(st);

    if (st->fd >= 0)
        close(st->fd);
    st->fd = -1;
    if (((st->state <= FERRY_IB_CONN_CONNECTING && ferry_connect_retryable(err)) ||
         evicted) && st->attempts < cfg->retry_cnt) {
        st->attempts++;
        st->state = FERRY_IB_CONN_CLOSED;
        st->next_try_ns = ferry_px_now_ns() +
                          (uint64_t)st->attempts * (uint64_t)cfg->retry_sleep_ms * 1000000ULL;
        FERRY_INFO(FERRY_LOG_NET, "ib connect to %s: %s%s; retry %d of %d", st->peer,
                   evicted ? "evicted" : ferry_ib_oob_strerror(rc),
                   evicted ? " by the crowded listener before our hello came in" : "",
                   st->attempts, cfg->retry_cnt);
        return FERRY_OK;
    }
    /* Limited: a caller that connects again and again to a failing peer repeats it. */
    FERRY_WARN_LIMITED("ib connect to %s from %s failed while %s (after %d TCP attempt(s)): %s; "
                       "%s", st->peer, ferry_ib_comm_where(&st->comm->base),
                       ferry_ib_conn_step[st->state], st->attempts + 1,
                       ferry_ib_oob_strerror(rc),
                       st->state == FERRY_IB_CONN_RECV_ACCEPTED
                           ? "the acceptor dropped the connection before accept() returned it "
                             "(its process exited, or it closed its listen comm without "
                             "accepting); this connection was never in use"
                           : "check that the peer process is alive (its log says why it left) "
                             "and that NCCL_SOCKET_IFNAME picks an interface that reaches it");
    return FERRY_ERR_REMOTE;
}

/* Move the stage as far as it goes without blocking; *done when the comm is ready. */
static ferry_status_t ferry_ib_conn_advance(ferry_ib_conn_stage_t *st, int *done)
{
    struct pollfd pfd;
    socklen_t len;
    ferry_status_t status;
    int err, rc;
    uint8_t ready = FERRY_IB_OOB_READY;

    *done = 0;
    switch (st->state) {
    case FERRY_IB_CONN_CLOSED:
        if (ferry_px_now_ns() < st->next_try_ns)
            return FERRY_OK;
        st->fd = socket(st->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (st->fd < 0)
            return ferry_ib_conn_error(st, -errno);
        st->state = FERRY_IB_CONN_CONNECTING;
        if (connect(st->fd, (struct sockaddr *)&st->addr, st->addr_len) != 0 &&
            errno != EINPROGRESS)
            return ferry_ib_conn_error(st, -errno);
        /* fall through */
    case FERRY_IB_CONN_CONNECTING:
        pfd.fd = st->fd;
        pfd.events = POLLOUT;
        if (poll(&pfd, 1, 0) <= 0)
            return FERRY_OK;
        len = sizeof(err);
        if (getsockopt(st->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err != 0)
            return ferry_ib_conn_error(st, -err);
        st->state = FERRY_IB_CONN_SEND_HELLO;
        st->sent = 0;
        /* fall through */
    case FERRY_IB_CONN_SEND_HELLO:
        rc = ferry_ib_oob_send(st->fd, &st->out, sizeof(st->out), &st->sent);
        if (rc <= 0)
            return rc == 0 ? FERRY_OK : ferry_ib_conn_error(st, rc);
        st->state = FERRY_IB_CONN_RECV_META;
        st->got = 0;
        /* fall through */
    case FERRY_IB_CONN_RECV_META:
        rc = ferry_ib_oob_recv(st->fd, &st->in, sizeof(st->in), &st->got);
        if (ferry_ib_conn_evicted(st))
            return ferry_ib_conn_error(st, FERRY_IB_OOB_EOF);
        if (rc <= 0)
            return rc == 0 ? FERRY_OK : ferry_ib_conn_error(st, rc);
        status = ferry_ib_comm_connect_qps(&st->comm->base, &st->in,
                                           "connect: bringing our QPs to RTS");
        if (status != FERRY_OK)
            return status;
        st->state = FERRY_IB_CONN_SEND_READY;
        st->sent = 0;
        /* fall through */
    case FERRY_IB_CONN_SEND_READY:
        rc = ferry_ib_oob_send(st->fd, &ready, 1, &st->sent);
        if (rc <= 0)
            return rc == 0 ? FERRY_OK : ferry_ib_conn_error(st, rc);
        st->state = FERRY_IB_CONN_RECV_ACCEPTED;
        st->got = 0;
        /* fall through */
    case FERRY_IB_CONN_RECV_ACCEPTED:
        rc = ferry_ib_oob_recv(st->fd, &st->accepted, 1, &st->got);
        if (rc <= 0)
            return rc == 0 ? FERRY_OK : ferry_ib_conn_error(st, rc);
        if (st->accepted != FERRY_IB_OOB_ACCEPTED) {
            FERRY_WARN_LIMITED("ib connect to %s from %s: got byte 0x%02x instead of the "
                               "acceptor's ACCEPTED byte; every rank must load the same ferry "
                               "build", st->peer, ferry_ib_comm_where(&st->comm->base),
                               st->accepted);
            return FERRY_ERR_REMOTE;
        }
        *done = 1;
        return FERRY_OK;
    }
    return FERRY_ERR_INTERNAL;
}

void ferry_ib_connected(ferry_ib_comm_t *c, int fd)
{
    ferry_ib_comm_start(c, fd);
    FERRY_INFO(FERRY_LOG_NET, "ib connected to %s from %s%s: %d QP(s), peer device %s, tc %d "
               "sl %d, send comm #%u", c->conn.peer, ferry_ib_comm_where(c),
               c->conn.cm != NULL ? " (rdmacm)" : "", c->conn.nqps, c->conn.remote.devname,
               c->conn.local.tc, c->conn.local.sl, c->ring.serial);
}

ferry_status_t ferry_ib_connect(ferry_ctx_t *ctx, int dev, void *handle, int traffic_class,
                                void **send_comm_p)
{
    ferry_ib_handle_t *h = handle;
    ferry_ib_conn_stage_t *st;
    ferry_ib_comm_t *c;
    ferry_status_t status;
    int done, fd;

    *send_comm_p = NULL;
    if (ferry_ib_state.cfg.cm == FERRY_IB_CM_RDMACM)
        return ferry_ib_cm_connect(ctx, dev, h, traffic_class, send_comm_p);
    status = ferry_ib_handle_stage(h, dev, FERRY_STAGE_IB_OOB, (void **)&st);
    if (status != FERRY_OK)
        return status;
    if (st == NULL) {
        status = ferry_ib_stage_create(ctx, dev, h, traffic_class, &st);
        if (status != FERRY_OK)
            return status;
    }
    status = ferry_ib_conn_advance(st, &done);
    if (status != FERRY_OK) {
        ferry_ib_stage_free(st, h);
        return status;
    }
    if (!done)
        return FERRY_OK;
    c = &st->comm->base;
    fd = st->fd;
    st->comm = NULL; /* The comm owns both now. */
    st->fd = -1;
    ferry_ib_stage_free(st, h);
    ferry_ib_connected(c, fd);
    *send_comm_p = c;
    return FERRY_OK;
}
